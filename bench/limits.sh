#!/usr/bin/env bash
# Bounded loopback load test of the rate limiter's cost per request. The release demo gateway is
# started three times, one after the other, each with another rate-limit configuration set
# through AAP_GATEWAY__RATE_LIMIT__* environment overrides, and the same skill call is measured
# with the same wrk settings against each:
#
#   unlimited  rate_limit.enabled=false                    (per-client limits off)
#   memory     backend=memory, default quota BENCH_RATE / BENCH_BURST (nothing is refused)
#   redis      backend=redis on a redis-server this script starts on a free loopback port,
#              same quota, on_backend_error=deny (a Redis failure is a bad reply, never a
#              silent fall-back to memory limits)
#
# Reports requests/s, p50 / p99 latency and CPU per request for each, the ratios of memory and
# redis to unlimited and the derived extra cost per request (1e6/rps − 1e6/rps_unlimited, µs),
# as a table and as one JSON line. See bench/README.md ("Rate-limit cost") for how to read them.
#
# Everything is overridable through the environment:
#   BENCH_SKILL=information  the measured skill: information (dealer.information, a reply built at
#                          load: the cheapest call, so the limiter's share is largest) or search
#                          (inventory.search, the body bench/load.sh sends)
#   BENCH_DURATION=10s     measured run per backend (wrk -d)
#   BENCH_WARMUP=2s        unreported warm-up run per backend before it ("0" skips it)
#   BENCH_ROUNDS=1         rounds of the three runs; round r starts with the r-th backend (so none
#                          is always first), and the table shows each figure's median over rounds
#   BENCH_CONNECTIONS=32   concurrent keep-alive connections (wrk -c)
#   BENCH_THREADS=2        wrk threads (wrk -t; at most BENCH_CONNECTIONS)
#   BENCH_TIMEOUT=5s       per-request timeout in wrk (slower replies count as timeouts)
#   BENCH_MAKE=Toyota      the make filter (BENCH_SKILL=search)
#   BENCH_LIMIT=20         page size, pagination.limit (BENCH_SKILL=search)
#   BENCH_DEALER=demo_toyota  the demo dealer whose JSON-RPC endpoint is measured
#   BENCH_RATE=1000000/s   the default quota of the memory and redis runs (rate_limit.default.rate)
#   BENCH_BURST=1000000    … and its burst; both so large that nothing is refused
#   BENCH_REDIS_ON_ERROR=deny  rate_limit.on_backend_error of the redis run (deny | local)
#   BENCH_REDIS_SERVER=redis-server  BENCH_REDIS_CLI=redis-cli   the Redis binaries
#   BENCH_REDIS_PORT=      Redis port (empty: a free loopback port)
#   BENCH_INSTALL_REDIS=1  install Debian's redis-server with apt-get when missing and running as root
#   BENCH_BIN=target/release/aap-gateway   the gateway binary
#   BENCH_CONFIG=          `demo --config` file (empty: the demo's own config/demo.yaml); with
#                          BENCH_BIN, lets a binary built elsewhere run with its own configuration
#   BENCH_BUILD=1          1: `cargo build --release` first (a no-op when up to date); 0: use BENCH_BIN as is
#   BENCH_RUST_LOG=warn    RUST_LOG of the gateway (its logs go to files in the work directory)
#   BENCH_GATEWAY_CPUS=    optional `taskset -c` CPU list for the gateway (and its simulators)
#   BENCH_REDIS_CPUS=      optional `taskset -c` CPU list for redis-server
#   BENCH_WRK_CPUS=        optional `taskset -c` CPU list for wrk
#   BENCH_START_TIMEOUT=60 seconds to wait for the demo's endpoints file
#   BENCH_JSON_OUT=        also write the JSON line to this file
#   BENCH_KEEP=0           1: keep the work directory (gateway and Redis logs, wrk output)
#   BENCH_INSTALL_WRK=1    install Debian's wrk with apt-get when missing and running as root
# Other AAP_GATEWAY__* variables in the environment reach all three runs alike; inherited
# AAP_GATEWAY__RATE_LIMIT__* ones are dropped so the runs differ only as described above.
#
# Every run is checked: each reply must be HTTP 200 and carry the skill's response type (so a
# RATE_LIMITED JSON-RPC error, which is HTTP 200 too, counts as bad), and the override must show:
#   unlimited  its default quota is a tripwire of 1/min, burst 1, with backend=redis: were
#              `enabled: false` ignored, all but the first call would be RATE_LIMITED, and Redis
#              would see GCRA scripts; it must see none;
#   memory     demo.yaml's own default (100/s, burst 200) would refuse calls at this rate, and
#              Redis must see no GCRA script;
#   redis      Redis must run at least one GCRA script (EVALSHA) per measured request, and the
#              gateway must log no "rate-limit backend unavailable".
#
# Exit status: 0 when all runs completed without errors, every reply passed its check and
# every override was verified; 2 when a run had errors or bad replies or an override did not
# show (numbers still printed, marked "valid": false); 1 when the bench could not run.
set -euo pipefail

# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" # the BENCH_* settings it shares with load.sh; die, pin, json, run_wrk…

SKILL=${BENCH_SKILL:-information}
RATE=${BENCH_RATE:-1000000/s}
BURST=${BENCH_BURST:-1000000}
REDIS_ON_ERROR=${BENCH_REDIS_ON_ERROR:-deny}
REDIS_SERVER=${BENCH_REDIS_SERVER:-redis-server}
REDIS_CLI=${BENCH_REDIS_CLI:-redis-cli}
REDIS_PORT=${BENCH_REDIS_PORT:-}
INSTALL_REDIS=${BENCH_INSTALL_REDIS:-1}
CONFIG=${BENCH_CONFIG:-}
REDIS_CPUS=${BENCH_REDIS_CPUS:-}
ROUNDS=${BENCH_ROUNDS:-1}
# The quota of the unlimited run: refuses all but the first call if the limiter ran at all.
TRIPWIRE_RATE=1/min
TRIPWIRE_BURST=1

check_common_settings
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || die "BENCH_ROUNDS must be a whole number ≥ 1"
[[ $BURST =~ ^[1-9][0-9]*$ ]] || die "BENCH_BURST must be a whole number ≥ 1"
[[ $RATE =~ ^[1-9][0-9]*/.+$ ]] || die "BENCH_RATE must be a rate like 1000000/s"
[[ $REDIS_ON_ERROR == deny || $REDIS_ON_ERROR == local ]] || die "BENCH_REDIS_ON_ERROR must be deny or local"
[[ -z $REDIS_PORT || $REDIS_PORT =~ ^[0-9]+$ ]] || die "BENCH_REDIS_PORT must be a port number"
case $SKILL in
    information | dealer.information)
        SKILL=dealer.information
        SKILL_DATA='{"type":"dealer.information.request"}'
        ;;
    search | inventory.search)
        SKILL=inventory.search
        SKILL_DATA=$(search_data)
        ;;
    *) die "BENCH_SKILL must be information or search" ;;
esac
# A reply is good when it is HTTP 200 and names the skill's response type: an AAP error (e.g.
# RATE_LIMITED) is a JSON-RPC error object without it.
EXPECT="\"$SKILL.response\""

# --- wrk and Redis ---------------------------------------------------------------------------
need_curl_and_wrk
if ! command -v "$REDIS_SERVER" >/dev/null || ! command -v "$REDIS_CLI" >/dev/null; then
    if can_apt_install "$INSTALL_REDIS"; then
        echo "limits.sh: installing redis-server (Debian package)" >&2
        apt_install redis-server || die "could not install redis-server; install it (apt-get install redis-server) and retry"
    fi
    if ! command -v "$REDIS_SERVER" >/dev/null || ! command -v "$REDIS_CLI" >/dev/null; then
        die "redis-server and redis-cli are required: apt-get install redis-server (as root), or set BENCH_REDIS_SERVER / BENCH_REDIS_CLI"
    fi
fi

need_json_reader
need_gateway_binary
if [[ -n $CONFIG ]]; then
    [[ -f $CONFIG ]] || die "no configuration at $CONFIG (BENCH_CONFIG)"
    DEMO_ARGS+=(--config "$(cd "$(dirname "$CONFIG")" && pwd)/$(basename "$CONFIG")")
fi

# --- processes and cleanup -------------------------------------------------------------------
GATEWAY_PID=
REDIS_PID=
make_work_dir aap-limits GATEWAY_PID REDIS_PID

# --- Redis -----------------------------------------------------------------------------------
rcli() { "$REDIS_CLI" -h 127.0.0.1 -p "$REDIS_PORT" "$@"; }

start_redis() {
    # Tries BENCH_REDIS_PORT, or up to 20 random free-looking loopback ports (another process
    # may take one between the probe and the bind: redis-server then exits and the next is tried).
    local attempt port
    for attempt in $(seq 1 20); do
        if [[ -n ${BENCH_REDIS_PORT:-} ]]; then
            port=$BENCH_REDIS_PORT
        else
            port=$((20000 + RANDOM % 40000))
            # Something answers there already: not free.
            if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then continue; fi
        fi
        (exec_pinned "$REDIS_CPUS" "$REDIS_SERVER" --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
            --dir "$WORK" --daemonize no) >"$WORK/redis.log" 2>&1 &
        REDIS_PID=$!
        REDIS_PORT=$port
        for _ in $(seq 1 100); do
            kill -0 "$REDIS_PID" 2>/dev/null || break
            [[ $(rcli PING 2>/dev/null) == PONG ]] && return 0
            sleep 0.05
        done
        stop "$REDIS_PID"
        REDIS_PID=
        [[ -n ${BENCH_REDIS_PORT:-} ]] && break
        (( attempt < 20 )) || break
    done
    tail -n 20 "$WORK/redis.log" >&2 || true
    die "could not start redis-server (last port tried: ${port:-none})"
}

redis_scripts() {
    # → "calls usec": GCRA script runs (EVAL + EVALSHA) and Redis' own time in them, so far
    rcli INFO commandstats 2>/dev/null | tr -d '\r' | awk -F'[:,=]' '
        $1 == "cmdstat_evalsha" || $1 == "cmdstat_eval" { calls += $3; usec += $5 }
        END { printf "%d %d\n", calls, usec }'
}

# --- one gateway run -------------------------------------------------------------------------
RPC=
HOST=
start_gateway() {
    # start_gateway NAME VAR=VALUE… → the demo with those overrides; sets GATEWAY_PID, RPC, HOST
    local name=$1
    shift
    local endpoints=$WORK/$name.endpoints.json
    (
        while read -r var; do
            [[ $var == AAP_GATEWAY__RATE_LIMIT__* ]] && unset "$var"
        done < <(compgen -e)
        for assignment in "$@"; do export "${assignment?}"; done
        exec_demo "$endpoints"
    ) >"$WORK/$name.gateway.log" 2>&1 &
    GATEWAY_PID=$!
    wait_for_endpoints "$endpoints" "$WORK/$name.gateway.log" \
        "$name: the gateway exited before writing its endpoints file (overrides: $*)" \
        "$name: no endpoints file after ${START_TIMEOUT}s"
    read_dealer "$endpoints"
}

BODY=$WORK/request.json
send_message "$SKILL_DATA" >"$BODY"

measure() {
    # measure LABEL → the BENCH summary line of the measured run plus CPU and Redis counters
    local label=$1 hdrs
    mapfile -t hdrs < <(gateway_headers)
    warm_up "$label" "$BODY" "$EXPECT" "$RPC" "${hdrs[@]}"
    local gw_before gw_after rd_before rd_after scripts_before scripts_after line sampler
    # Redis keys expire once their bucket drains (1 ms at 1 µs emission): look mid-run.
    (sleep 1; rcli --scan --pattern 'aapgw:rl:*' 2>/dev/null | head -n 5) >"$WORK/$label.keys" &
    sampler=$!
    scripts_before=$(redis_scripts)
    gw_before=$(cpu_ticks "$GATEWAY_PID")
    rd_before=$(cpu_ticks "$REDIS_PID")
    run_wrk "$label" "$DURATION" "$BODY" "$EXPECT" "$RPC" "${hdrs[@]}" >"$WORK/$label.wrk.txt"
    gw_after=$(cpu_ticks "$GATEWAY_PID")
    rd_after=$(cpu_ticks "$REDIS_PID")
    scripts_after=$(redis_scripts)
    wait "$sampler" || true
    line=$(grep '^BENCH ' "$WORK/$label.wrk.txt") || die "no summary from wrk ($label): $(cat "$WORK/$label.wrk.txt")"
    awk -v line="$line" -v gb="$gw_before" -v ga="$gw_after" -v rb="$rd_before" -v ra="$rd_after" \
        -v sb="$scripts_before" -v sa="$scripts_after" -v hz="$CLK_TCK" 'BEGIN {
        split(sb, b, " "); split(sa, a, " ")
        printf "%s gw_cpu_s=%.2f redis_cpu_s=%.2f redis_scripts=%d redis_usec=%d\n",
            line, (ga - gb) / hz, (ra - rb) / hz, a[1] - b[1], a[2] - b[2]
    }'
}

RESULTS=$WORK/results.txt
: >"$RESULTS"
run_backend() {
    # run_backend NAME ROUND VAR=VALUE… → one measured run, appended to $RESULTS
    local name=$1 round=$2
    shift 2
    local tag=$name.$round
    start_gateway "$tag" "$@"
    local hdrs curl_args
    mapfile -t hdrs < <(gateway_headers)
    mapfile -t curl_args < <(curl_headers "${hdrs[@]}")
    curl -fsS "${curl_args[@]}" --data-binary "@$BODY" "$RPC" -o "$WORK/$tag.reply" \
        || die "$tag: gateway call failed: POST $RPC"
    grep -qF "$EXPECT" "$WORK/$tag.reply" \
        || die "$tag: the reply is not a $SKILL result: $(head -c 300 "$WORK/$tag.reply")"
    echo "limits.sh: $tag: POST $RPC ($(wc -c <"$WORK/$tag.reply" | tr -d ' ') bytes), overrides: $*" >&2
    local line keys warnings
    line=$(measure "$tag")
    die_if_gateway_gone "$WORK/$tag.gateway.log" "$tag: the gateway died during the run"
    stop "$GATEWAY_PID"
    GATEWAY_PID=
    keys=$(paste -sd, "$WORK/$tag.keys")
    warnings=$(grep -c 'rate-limit backend unavailable' "$WORK/$tag.gateway.log" || true)
    echo "$line backend=$name round=$round keys=${keys:--} warnings=$warnings" >>"$RESULTS"
}

# --- the runs --------------------------------------------------------------------------------
start_redis
REDIS_URL=redis://127.0.0.1:$REDIS_PORT/0
redis_version=$(rcli INFO server 2>/dev/null | tr -d '\r' | awk -F: '$1 == "redis_version" { print $2 }')
P=AAP_GATEWAY__RATE_LIMIT__
run_named() {
    # run_named NAME ROUND → run_backend with that backend's overrides
    case $1 in
        unlimited)
            run_backend unlimited "$2" "${P}ENABLED=false" "${P}BACKEND=redis" "${P}REDIS_URL=$REDIS_URL" \
                "${P}DEFAULT__RATE=$TRIPWIRE_RATE" "${P}DEFAULT__BURST=$TRIPWIRE_BURST"
            ;;
        memory)
            run_backend memory "$2" "${P}BACKEND=memory" "${P}DEFAULT__RATE=$RATE" "${P}DEFAULT__BURST=$BURST"
            ;;
        redis)
            run_backend redis "$2" "${P}BACKEND=redis" "${P}REDIS_URL=$REDIS_URL" \
                "${P}ON_BACKEND_ERROR=$REDIS_ON_ERROR" "${P}DEFAULT__RATE=$RATE" "${P}DEFAULT__BURST=$BURST"
            ;;
    esac
}

start_loadavg=$(load_average)
echo "limits.sh: $SKILL, $DURATION per run (+$WARMUP warm-up), $ROUNDS round(s) of 3 runs, $CONNECTIONS connections, $THREADS wrk threads, $(nproc) CPUs; redis-server $redis_version on port $REDIS_PORT" >&2
BACKENDS=(unlimited memory redis)
for (( round = 1; round <= ROUNDS; round++ )); do
    # Round r starts at backend r−1 (mod 3), so no backend always runs first or last.
    for (( i = 0; i < 3; i++ )); do
        run_named "${BACKENDS[(round - 1 + i) % 3]}" "$round"
    done
done
expired_keys=$(rcli INFO stats 2>/dev/null | tr -d '\r' | awk -F: '$1 == "expired_keys" { print $2 }')

# --- report ----------------------------------------------------------------------------------
loadavg=$(load_average)
commit=$(commit_id)
dirty=$(tree_dirty)
awk -v date="$(date -u +%Y-%m-%dT%H:%M:%SZ)" -v cpus="$(nproc)" -v loadavg="$loadavg" -v start_loadavg="$start_loadavg" \
    -v commit="$commit" -v dirty="$dirty" -v duration="$DURATION" -v warmup="$WARMUP" -v rounds="$ROUNDS" \
    -v conns="$CONNECTIONS" -v threads="$THREADS" -v dealer="$DEALER" -v skill="$SKILL" -v rate="$RATE" \
    -v burst="$BURST" -v on_error="$REDIS_ON_ERROR" -v redis_version="$redis_version" -v expired="${expired_keys:-0}" \
    -v json_out="$JSON_OUT" '
# One input line per measured run: BENCH label=… k=v … backend=… round=… keys=… warnings=…
{
    delete kv
    for (i = 2; i <= NF; i++) {
        eq = index($i, "=")
        kv[substr($i, 1, eq - 1)] = substr($i, eq + 1)
    }
    b = kv["backend"]
    k = ++runs[b]
    for (f in kv) v[b, k, f] = kv[f]
    # Per-run derived figures.
    v[b, k, "gw_us"] = kv["requests"] > 0 ? kv["gw_cpu_s"] * 1e6 / kv["requests"] : 0
    v[b, k, "redis_us"] = kv["requests"] > 0 ? kv["redis_cpu_s"] * 1e6 / kv["requests"] : 0
    v[b, k, "failures"] = kv["socket_errors"] + kv["http_errors"] + kv["timeouts"] + kv["bad"]
}
function median(b, f,   n, i, j, t, a) {
    n = runs[b]
    for (i = 1; i <= n; i++) a[i] = v[b, i, f] + 0
    for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j - 1] > a[j]; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
    return n == 0 ? 0 : (n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2)
}
function total(b, f,   i, s) { s = 0; for (i = 1; i <= runs[b]; i++) s += v[b, i, f]; return s }
function list(b, f, fmt,   i, s) { s = ""; for (i = 1; i <= runs[b]; i++) s = s (i > 1 ? "," : "") sprintf(fmt, v[b, i, f]); return s }
function summarize(b, into) {
    into["rps"] = median(b, "rps"); into["p50"] = median(b, "p50_us"); into["p90"] = median(b, "p90_us")
    into["p99"] = median(b, "p99_us"); into["mean"] = median(b, "mean_us"); into["gw_us"] = median(b, "gw_us")
    into["redis_us"] = median(b, "redis_us"); into["errors"] = total(b, "socket_errors") + total(b, "http_errors") + total(b, "timeouts")
    into["bad"] = total(b, "bad"); into["requests"] = total(b, "requests"); into["scripts"] = total(b, "redis_scripts")
    into["script_us"] = into["scripts"] > 0 ? total(b, "redis_usec") / into["scripts"] : 0
}
function ms(us) { return us / 1000 }
function ratio(a, b) { return b > 0 ? a / b : 0 }
function extra_us(r) { return r["rps"] > 0 && u["rps"] > 0 ? 1e6 / r["rps"] - 1e6 / u["rps"] : 0 }
function check(ok, message) {
    if (!ok) {
        failed++
        problems = problems (problems == "" ? "" : ",") "\"" message "\""
        printf "CHECK FAILED: %s\n", message
    }
}
function obj(b, r, vs,   s) {
    s = sprintf("{\"runs\":%d,\"rps\":%.1f,\"p50_ms\":%.3f,\"p90_ms\":%.3f,\"p99_ms\":%.3f,\"mean_ms\":%.3f,\"requests\":%d,\"errors\":%d,\"bad_replies\":%d,\"gateway_cpu_us_per_request\":%.2f,\"redis_cpu_us_per_request\":%.2f,\"redis_scripts\":%d,\"redis_script_us\":%.2f,\"rps_per_run\":[%s],\"p99_us_per_run\":[%s],\"gateway_cpu_us_per_request_per_run\":[%s],\"redis_keys_seen\":\"%s\",\"backend_warnings\":%d",
        runs[b], r["rps"], ms(r["p50"]), ms(r["p90"]), ms(r["p99"]), ms(r["mean"]), r["requests"], r["errors"], r["bad"],
        r["gw_us"], r["redis_us"], r["scripts"], r["script_us"], list(b, "rps", "%.1f"), list(b, "p99_us", "%d"), list(b, "gw_us", "%.2f"),
        (v[b, 1, "keys"] == "-" ? "" : v[b, 1, "keys"]), total(b, "warnings"))
    if (vs) {
        s = s sprintf(",\"vs_unlimited\":{\"throughput\":%.4f,\"p50\":%.4f,\"p99\":%.4f,\"extra_us_per_request\":%.2f,\"extra_gateway_cpu_us_per_request\":%.2f,\"extra_cpu_us_per_request\":%.2f}",
            ratio(r["rps"], u["rps"]), ratio(r["p50"], u["p50"]), ratio(r["p99"], u["p99"]), extra_us(r),
            r["gw_us"] - u["gw_us"], r["gw_us"] + r["redis_us"] - u["gw_us"] - u["redis_us"])
    }
    return s "}"
}
function row(name, r) {
    printf "%-10s %10.1f %8.3f %8.3f %8.3f %8.3f %7d %6d %10.1f %12.1f\n", name, r["rps"], ms(r["p50"]), ms(r["p90"]),
        ms(r["p99"]), ms(r["mean"]), r["errors"], r["bad"], r["gw_us"], r["redis_us"]
}
function vsrow(name, r) {
    printf "%-10s %9.3fx %7.2fx %7.2fx %+12.1f %+14.1f %+14.1f\n", name, ratio(r["rps"], u["rps"]),
        ratio(r["p50"], u["p50"]), ratio(r["p99"], u["p99"]), extra_us(r),
        r["gw_us"] - u["gw_us"], r["gw_us"] + r["redis_us"] - u["gw_us"] - u["redis_us"]
}
END {
    summarize("unlimited", u)
    summarize("memory", m)
    summarize("redis", d)

    printf "\n%s  %s  %s CPUs  %s conns  %s threads  %s per run, %s round(s)  load avg %s before, %s after\n", date, skill, cpus, conns, threads, duration, rounds, start_loadavg, loadavg
    printf "%-10s %10s %8s %8s %8s %8s %7s %6s %10s %12s\n", "backend", "req/s", "p50 ms", "p90 ms", "p99 ms", "mean ms", "errors", "bad", "gw us/req", "redis us/req"
    row("unlimited", u)
    row("memory", m)
    row("redis", d)
    printf "\n%-10s %10s %8s %8s %12s %14s %14s\n", "vs unlim.", "req/s", "p50", "p99", "+us/req", "+gw cpu us", "+cpu us (all)"
    vsrow("memory", m)
    vsrow("redis", d)
    printf "+us/req = 1e6/rps - 1e6/rps(unlimited); cpu us = process CPU (user+sys) per request: gateway, and gateway + redis-server\n"
    if (rounds > 1) {
        printf "medians of %d runs each; req/s per run: unlimited %s | memory %s | redis %s\n", rounds,
            list("unlimited", "rps", "%.0f"), list("memory", "rps", "%.0f"), list("redis", "rps", "%.0f")
    }
    printf "redis: %d GCRA scripts in the measured runs (%.2f per request), %.1f us each inside Redis; keys seen mid-run: %s\n",
        d["scripts"], ratio(d["scripts"], d["requests"]), d["script_us"], (v["redis", 1, "keys"] == "-" ? "none" : v["redis", 1, "keys"])

    failed = 0
    problems = ""
    for (b in runs) for (k = 1; k <= runs[b]; k++) {
        f = v[b, k, "failures"]; s = v[b, k, "redis_scripts"]; n = v[b, k, "requests"]
        check(f == 0, b " run " k ": " f " failed or refused calls" (b == "unlimited" ? " (rate_limit.enabled=false not honoured?)" : ""))
        if (b == "redis") {
            check(n > 0 && s >= n, b " run " k ": " s " GCRA scripts for " n " requests (backend=redis not honoured?)")
            check(v[b, k, "warnings"] == 0, b " run " k ": the gateway logged rate-limit backend unavailable")
        } else {
            check(s == 0, b " run " k ": Redis ran " s " GCRA scripts (the limiter ran on Redis)")
        }
    }
    valid = failed == 0 ? "true" : "false"
    if (valid != "true") printf "WARNING: %d check(s) failed; the figures are not valid\n", failed
    printf "\n"

    line = sprintf("{\"bench\":\"aap-gateway-limits\",\"date\":\"%s\",\"commit\":\"%s\",\"dirty\":%s,\"cpus\":%d,\"loadavg_before\":%s,\"loadavg_after\":%s,\"tool\":\"wrk\",\"duration\":\"%s\",\"warmup\":\"%s\",\"rounds\":%d,\"connections\":%d,\"threads\":%d,\"dealer\":\"%s\",\"skill\":\"%s\",\"quota\":{\"rate\":\"%s\",\"burst\":%d},\"redis_server\":{\"version\":\"%s\",\"on_backend_error\":\"%s\",\"expired_keys\":%d},\"unlimited\":%s,\"memory\":%s,\"redis\":%s,\"problems\":[%s],\"valid\":%s}",
        date, commit, dirty, cpus, start_loadavg, loadavg, duration, warmup, rounds, conns, threads, dealer, skill, rate, burst,
        redis_version, on_error, expired, obj("unlimited", u, 0), obj("memory", m, 1), obj("redis", d, 1), problems, valid)
    print line
    if (json_out != "") print line > json_out
    exit(valid == "true" ? 0 : 2)
}' "$RESULTS"
