#!/usr/bin/env bash
# Bounded loopback load test: the DMS simulator called directly vs. the same search through the
# gateway (AAP inventory.search → GET /api/v2/vehicles). One run measures both and reports
# requests/s, p50 and p99 latency for each, and the gateway/direct ratios, as a table and as one
# JSON line. See bench/README.md for how to read the numbers.
#
# Everything is overridable through the environment:
#   BENCH_DURATION=10s     measured run per target (wrk -d)
#   BENCH_WARMUP=2s        unreported warm-up run per target before it ("0" skips it)
#   BENCH_CONNECTIONS=32   concurrent keep-alive connections (wrk -c)
#   BENCH_THREADS=2        wrk threads (wrk -t; at most BENCH_CONNECTIONS)
#   BENCH_TIMEOUT=5s       per-request timeout in wrk (slower replies count as timeouts)
#   BENCH_MAKE=Toyota      the make filter of both calls
#   BENCH_LIMIT=20         page size: pagination.limit (gateway) = pageSize (direct)
#   BENCH_DEALER=demo_toyota  the demo dealer whose JSON-RPC endpoint is measured (proxy mode)
#   BENCH_BIN=target/release/aap-gateway   the gateway binary
#   BENCH_BUILD=1          1: `cargo build --release` first (a no-op when up to date); 0: use BENCH_BIN as is
#   BENCH_RUST_LOG=warn    RUST_LOG of the gateway (its logs go to a file in the work directory)
#   BENCH_GATEWAY_CPUS=    optional `taskset -c` CPU list for the gateway (and its simulators)
#   BENCH_WRK_CPUS=        optional `taskset -c` CPU list for wrk
#   BENCH_START_TIMEOUT=60 seconds to wait for the demo's endpoints file
#   BENCH_JSON_OUT=        also write the JSON line to this file
#   BENCH_KEEP=0           1: keep the work directory (gateway log, wrk output) and print its path
#   BENCH_INSTALL_WRK=1    install Debian's wrk with apt-get when missing and running as root
#
# Exit status: 0 when both runs completed without errors and every reply passed its check
# (direct: HTTP 200 with "Items"; gateway: HTTP 200 with "vehicles", so a JSON-RPC error, which
# is HTTP 200 too, counts as bad); 2 when a run had errors or bad replies (numbers still
# printed); 1 when the bench could not run.
set -euo pipefail

# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh" # the BENCH_* settings above; die, pin, json, run_wrk…

check_common_settings
need_curl_and_wrk
need_json_reader
need_gateway_binary

# --- start the demo --------------------------------------------------------------------------
GATEWAY_PID=
make_work_dir aap-bench GATEWAY_PID

ENDPOINTS=$WORK/endpoints.json
# The demo's per-client quota (100/s) would refuse most of this load: this measures the mapping
# path, so the limiter is off (bench/limits.sh measures the limiter itself).
(export AAP_GATEWAY__RATE_LIMIT__ENABLED=false; exec_demo "$ENDPOINTS") >"$WORK/gateway.log" 2>&1 &
GATEWAY_PID=$!
wait_for_endpoints "$ENDPOINTS" "$WORK/gateway.log" "the gateway exited before writing $ENDPOINTS" \
    "no endpoints file after ${START_TIMEOUT}s"

DMS=$(json '.simulators.dms' "$ENDPOINTS")
[[ -n $DMS ]] || die "no simulators.dms in the endpoints file"
read_dealer "$ENDPOINTS"

DIRECT_URL="$DMS/api/v2/vehicles?make=$MAKE&page=1&pageSize=$LIMIT"
BODY=$WORK/search.json
send_message "$(search_data)" >"$BODY"

DIRECT_HEADERS=("X-Api-Key: demo-dms-key")
mapfile -t GATEWAY_HEADERS < <(gateway_headers)

# --- one call each, checked, before any load -------------------------------------------------
mapfile -t direct_curl < <(curl_headers "${DIRECT_HEADERS[@]}")
mapfile -t gateway_curl < <(curl_headers "${GATEWAY_HEADERS[@]}")
curl -fsS "${direct_curl[@]}" "$DIRECT_URL" -o "$WORK/direct.reply" \
    || die "direct call failed: GET $DIRECT_URL"
curl -fsS "${gateway_curl[@]}" --data-binary "@$BODY" "$RPC" -o "$WORK/gateway.reply" \
    || die "gateway call failed: POST $RPC"
grep -q '"Items"' "$WORK/direct.reply" || die "direct reply has no Items: $(head -c 300 "$WORK/direct.reply")"
grep -q '"vehicles"' "$WORK/gateway.reply" \
    || die "gateway reply is not a search result: $(head -c 300 "$WORK/gateway.reply")"
count() {
    # count FILE JQ-PATH → number of elements, or "?" without jq
    if command -v jq >/dev/null; then jq "$2 | length" "$1" 2>/dev/null || echo "?"; else echo "?"; fi
}
direct_items=$(count "$WORK/direct.reply" '.Items')
gateway_items=$(count "$WORK/gateway.reply" '[.. | objects | .vehicles? // empty][0]')
direct_bytes=$(wc -c <"$WORK/direct.reply" | tr -d ' ')
gateway_bytes=$(wc -c <"$WORK/gateway.reply" | tr -d ' ')

# --- load ------------------------------------------------------------------------------------
# The gateway process's CPU time (cpu_ticks) is measured around each run. The simulators run
# inside it, so the direct run measures the DMS simulator alone and the gateway run both.
measure() {
    # measure LABEL BODY|- EXPECT URL HEADERS… → the BENCH summary line
    local label=$1
    warm_up "$@"
    local before after line
    before=$(cpu_ticks "$GATEWAY_PID")
    run_wrk "$label" "$DURATION" "${@:2}" >"$WORK/$label.wrk.txt"
    after=$(cpu_ticks "$GATEWAY_PID")
    line=$(grep '^BENCH ' "$WORK/$label.wrk.txt") || die "no summary from wrk ($label): $(cat "$WORK/$label.wrk.txt")"
    echo "$line proc_cpu_s=$(awk -v a="$after" -v b="$before" -v hz="$CLK_TCK" 'BEGIN { printf "%.2f", (a - b) / hz }')"
}

start_loadavg=$(load_average)
echo "load.sh: $DURATION per target (+$WARMUP warm-up), $CONNECTIONS connections, $THREADS wrk threads, $(nproc) CPUs" >&2
echo "load.sh: direct  GET  $DIRECT_URL ($direct_items items, $direct_bytes bytes)" >&2
echo "load.sh: gateway POST $RPC ($gateway_items vehicles, $gateway_bytes bytes)" >&2
direct_line=$(measure direct - '"Items"' "$DIRECT_URL" "${DIRECT_HEADERS[@]}")
gateway_line=$(measure gateway "$BODY" '"vehicles"' "$RPC" "${GATEWAY_HEADERS[@]}")
die_if_gateway_gone "$WORK/gateway.log" "the gateway died during the run"

# --- report ----------------------------------------------------------------------------------
loadavg=$(load_average)
commit=$(commit_id)
dirty=$(tree_dirty)
awk -v direct="$direct_line" -v gateway="$gateway_line" \
    -v date="$(date -u +%Y-%m-%dT%H:%M:%SZ)" -v cpus="$(nproc)" -v loadavg="$loadavg" -v start_loadavg="$start_loadavg" -v commit="$commit" -v dirty="$dirty" \
    -v duration="$DURATION" -v warmup="$WARMUP" -v conns="$CONNECTIONS" -v threads="$THREADS" \
    -v make="$MAKE" -v limit="$LIMIT" -v dealer="$DEALER" \
    -v direct_items="$direct_items" -v gateway_items="$gateway_items" \
    -v direct_bytes="$direct_bytes" -v gateway_bytes="$gateway_bytes" \
    -v json_out="$JSON_OUT" '
function parse(line, into,   n, parts, i, kv) {
    n = split(line, parts, " ")
    for (i = 2; i <= n; i++) {
        split(parts[i], kv, "=")
        into[kv[1]] = kv[2]
    }
}
function ms(us) { return us / 1000 }
function ratio(a, b) { return b > 0 ? a / b : 0 }
function cpu_per_req(r) { return r["requests"] > 0 ? r["proc_cpu_s"] * 1000 / r["requests"] : 0 }
function obj(r, items, bytes) {
    return sprintf("{\"rps\":%.1f,\"p50_ms\":%.3f,\"p90_ms\":%.3f,\"p99_ms\":%.3f,\"mean_ms\":%.3f,\"max_ms\":%.3f,\"requests\":%d,\"socket_errors\":%d,\"http_errors\":%d,\"timeouts\":%d,\"bad_replies\":%d,\"items\":%s,\"reply_bytes\":%d,\"process_cpu_s\":%.2f,\"process_cpu_ms_per_request\":%.3f}",
        r["rps"], ms(r["p50_us"]), ms(r["p90_us"]), ms(r["p99_us"]), ms(r["mean_us"]), ms(r["max_us"]),
        r["requests"], r["socket_errors"], r["http_errors"], r["timeouts"], r["bad"],
        (items ~ /^[0-9]+$/ ? items : "null"), bytes, r["proc_cpu_s"], cpu_per_req(r))
}
function row(name, r) {
    printf "%-8s %10.1f %9.3f %9.3f %9.3f %9.3f %8d %6d %11.3f\n", name, r["rps"], ms(r["p50_us"]), ms(r["p90_us"]),
        ms(r["p99_us"]), ms(r["mean_us"]), r["socket_errors"] + r["http_errors"] + r["timeouts"], r["bad"], cpu_per_req(r)
}
BEGIN {
    parse(direct, d)
    parse(gateway, g)
    tput = ratio(g["rps"], d["rps"])
    p50 = ratio(g["p50_us"], d["p50_us"])
    p99 = ratio(g["p99_us"], d["p99_us"])
    cpu = ratio(cpu_per_req(g), cpu_per_req(d))
    failures = d["socket_errors"] + d["http_errors"] + d["timeouts"] + d["bad"] \
             + g["socket_errors"] + g["http_errors"] + g["timeouts"] + g["bad"]
    valid = failures == 0 ? "true" : "false"

    printf "\n%s  %s CPUs  %s conns  %s threads  %s per target  load avg %s before, %s after\n", date, cpus, conns, threads, duration, start_loadavg, loadavg
    printf "%-8s %10s %9s %9s %9s %9s %8s %6s %11s\n", "target", "req/s", "p50 ms", "p90 ms", "p99 ms", "mean ms", "errors", "bad", "cpu ms/req"
    row("direct", d)
    row("gateway", g)
    printf "%-8s %9.3fx %8.2fx %9s %8.2fx %9s %8s %6s %10.2fx\n", "gw/dir", tput, p50, "", p99, "", "", "", cpu
    printf "gateway added latency: p50 +%.3f ms, p99 +%.3f ms; added CPU per request: %.3f ms\n", ms(g["p50_us"] - d["p50_us"]), ms(g["p99_us"] - d["p99_us"]), cpu_per_req(g) - cpu_per_req(d)
    if (valid != "true") printf "WARNING: %d failed requests or bad replies; the figures are not valid\n", failures
    printf "\n"

    line = sprintf("{\"bench\":\"aap-gateway-load\",\"date\":\"%s\",\"commit\":\"%s\",\"dirty\":%s,\"cpus\":%d,\"loadavg_before\":%s,\"loadavg_after\":%s,\"tool\":\"wrk\",\"duration\":\"%s\",\"warmup\":\"%s\",\"connections\":%d,\"threads\":%d,\"dealer\":\"%s\",\"make\":\"%s\",\"limit\":%d,\"direct\":%s,\"gateway\":%s,\"ratio\":{\"throughput\":%.4f,\"p50\":%.4f,\"p99\":%.4f,\"cpu_per_request\":%.4f},\"valid\":%s}",
        date, commit, dirty, cpus, start_loadavg, loadavg, duration, warmup, conns, threads, dealer, make, limit,
        obj(d, direct_items, direct_bytes), obj(g, gateway_items, gateway_bytes), tput, p50, p99, cpu, valid)
    print line
    if (json_out != "") print line > json_out
    exit(valid == "true" ? 0 : 2)
}'
