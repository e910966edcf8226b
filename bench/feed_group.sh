#!/usr/bin/env bash
# A dealer group's feeds refreshing (issue 39, item 5): BENCH_DEALERS (100) feed-mode dealers
# behind one release gateway, their exports served by bench/feed_group_upstream.rs from one
# process — gzip CSV, JSON and XML of 100 to 3,000 units each (seeded), a third answering `304`,
# a quarter changing on every refresh, a tenth the same bytes without validators, and 15 %
# failing after their first load (500s, hung requests, a truncated gzip). Two runs of
# `aap-gateway serve`, one process each:
#
#   steady   every feed `refresh: 1h` (no refresh in the run): start-up until every first load
#            ended, RSS; searches spread over the dealers at a fixed rate (oha, one URL a
#            request picked among the dealers')
#   refresh  every feed `refresh: BENCH_REFRESH` (5s, ± a tenth): after the first round of
#            refreshes, VmHWM is reset and the same searches run at the same rate through the
#            storm; RSS sampled (builtins only) and its peak; refreshes by outcome from
#            /metrics, the feed host's answers by status
#
# Reports a table with the ratios (p99 and memory, during / steady) and one JSON line; see
# bench/README.md ("A group of feeds refreshing").
#
#   BENCH_DEALERS=100      dealers (feeds) in the group
#   BENCH_SEED=39          seed of the group's formats, sizes and behaviours
#   BENCH_REFRESH=5s       every feed's `refresh` in the refresh run
#   BENCH_DURATION=20s     each measured run (oha -z)
#   BENCH_RATE=200         fixed request rate of both runs (oha -q), requests/s
#   BENCH_CONNECTIONS=8    connections (oha -c)
#   BENCH_LIMIT=20         page size of the searches
#   BENCH_BIN=…/release/aap-gateway      the gateway binary (default: $CARGO_TARGET_DIR or target/)
#   BENCH_UPSTREAM_BIN=…/release/examples/feed_group_upstream   the feed host
#   BENCH_BUILD=1          1: `cargo build --release` of both first; 0: use the binaries as they are
#   BENCH_RUST_LOG=info    RUST_LOG of the gateway (to a file)
#   BENCH_OHA=oha          the oha binary
#   BENCH_START_TIMEOUT=120 seconds to wait for the feed host and for readiness
#   BENCH_JSON_OUT=        also write the JSON line to this file
#   BENCH_KEEP=0           1: keep the work directory (configuration, logs, oha output, samples)
#
# Exit status: 0 when every search of both runs was answered with a page; 2 when one was not
# (figures still printed); 1 when the bench could not run.
set -euo pipefail

# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

DEALERS=${BENCH_DEALERS:-100}
SEED=${BENCH_SEED:-39}
REFRESH=${BENCH_REFRESH:-5s}
DURATION=${BENCH_DURATION:-20s}
RATE=${BENCH_RATE:-200}
CONNECTIONS=${BENCH_CONNECTIONS:-8}
START_TIMEOUT=${BENCH_START_TIMEOUT:-120}
GATEWAY_LOG_LEVEL=${BENCH_RUST_LOG:-info}
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
BIN=${BENCH_BIN:-$TARGET_DIR/release/aap-gateway}
UPSTREAM_BIN=${BENCH_UPSTREAM_BIN:-$TARGET_DIR/release/examples/feed_group_upstream}
OHA=${BENCH_OHA:-$(command -v oha || echo /work/oha/bin/oha)}

need_curl_jq_oha
[[ $DEALERS =~ ^[0-9]+$ && $DEALERS -ge 1 && $DEALERS -le 333 ]] || die "BENCH_DEALERS is a whole number from 1 to 333"
[[ $RATE =~ ^[0-9]+$ && $SEED =~ ^[0-9]+$ ]] || die "BENCH_RATE and BENCH_SEED must be whole numbers"
[[ $REFRESH =~ ^([0-9]+)(ms|s)$ ]] || die "BENCH_REFRESH is milliseconds or seconds (5s, 2500ms)"
if [[ ${BASH_REMATCH[2]} == s ]]; then REFRESH_MS=$((BASH_REMATCH[1] * 1000)); else REFRESH_MS=${BASH_REMATCH[1]}; fi
need_gateway_binary feed_group_upstream
[[ -x $UPSTREAM_BIN ]] || die "no feed_group_upstream binary at $UPSTREAM_BIN"

UPSTREAM_PID=
GATEWAY_PID=
SAMPLER_PID=
make_work_dir aap-feed-group-bench SAMPLER_PID GATEWAY_PID UPSTREAM_PID

# --- the feed host -----------------------------------------------------------------------------
echo "$SELF: generating $DEALERS dealers' exports (seed $SEED) and starting the feed host" >&2
"$UPSTREAM_BIN" --dealers "$DEALERS" --seed "$SEED" --endpoints-file "$WORK/upstream.json" \
    >"$WORK/upstream.log" 2>&1 &
UPSTREAM_PID=$!
deadline=$((SECONDS + START_TIMEOUT))
until [[ -s $WORK/upstream.json ]]; do
    kill -0 "$UPSTREAM_PID" 2>/dev/null || die "feed_group_upstream exited: $(tail -5 "$WORK/upstream.log")"
    ((SECONDS < deadline)) || die "feed_group_upstream did not start within ${START_TIMEOUT}s"
    sleep 0.1
done
FEED_URL=$(jq -r .url "$WORK/upstream.json")
UNITS=$(jq -r .units "$WORK/upstream.json")
FEED_BYTES=$(jq -r .bytes "$WORK/upstream.json")
MIX=$(jq -r '[.dealers | group_by(.format)[] | "\(length) \(.[0].format)"] | join(", ")' "$WORK/upstream.json")
BEHAVIOURS=$(jq -r '[.dealers | group_by(.behaviour)[] | "\(length) \(.[0].behaviour)"] | join(", ")' "$WORK/upstream.json")

# --- configuration -----------------------------------------------------------------------------
write_config() {
    # write_config NAME REFRESH → $WORK/NAME/config: gateway.yaml and one mapping folder per
    # format (every dealer of a format names it; the request path names the dealer). Logs and
    # everything else stay out of that folder: the gateway reloads when a file in it changes.
    local dir=$WORK/$1/config format
    mkdir -p "$dir/mappings"
    for format in csv json xml; do
        cp -r "$ROOT/bench/fixtures/feed-group/$format" "$dir/mappings/"
        sed -i -e "s/^refresh: .*/refresh: $2/" "$dir/mappings/$format/feed.yaml"
        grep -q "^refresh: $2\$" "$dir/mappings/$format/feed.yaml" || die "could not set refresh in the $format mapping"
    done
    {
        group_config_head
        jq -r '.dealers[] | "\(.id) \(.format)"' "$WORK/upstream.json" | while read -r id format; do
            cat <<EOF
  - id: $id
    path_prefix: /dealers/$id
    card: { name: Bench Motors $id, description: Bench group dealer $id ($format feed) }
    mappings: mappings/$format
EOF
        done
    } >"$dir/gateway.yaml"
}

# --- measuring one gateway ---------------------------------------------------------------------
rss_kb() { awk -v k="$2:" '$1 == k { print $2 }' "/proc/$1/status" 2>/dev/null || echo 0; }

start_gateway() {
    # start_gateway NAME → GATEWAY_PID, ADMIN, LISTEN, READY_MS (process start → /readyz 200:
    # every feed's first load ended), READY_CPU_S
    local log=$WORK/$1/gateway.log started
    # Every dealer's next request is a first one again (the failing ones answer it).
    curl -fsS -X POST "$FEED_URL/_reset" || die "the feed host did not reset"
    (cd "$WORK/$1/config" && now_ms >../started && RUST_LOG=$GATEWAY_LOG_LEVEL FEED_URL=$FEED_URL exec "$BIN" --log-format json serve -c gateway.yaml) >"$log" 2>&1 &
    GATEWAY_PID=$!
    local deadline=$((SECONDS + START_TIMEOUT))
    ADMIN=
    while :; do
        die_if_gateway_gone "$log" "the gateway exited"
        ((SECONDS < deadline)) || die "the gateway was not ready within ${START_TIMEOUT}s"
        if [[ -z $ADMIN ]]; then
            ADMIN=$(grep -m1 '"aap-gateway ready"' "$log" | jq -r '.admin // empty' 2>/dev/null || true)
            [[ -z $ADMIN ]] || LISTEN=$(grep -m1 '"aap-gateway ready"' "$log" | jq -r '.listen')
        fi
        [[ -n $ADMIN ]] && curl -fs -o /dev/null "http://$ADMIN/readyz" && break
        sleep 0.02
    done
    started=$(<"$WORK/$1/started")
    READY_MS=$(( $(now_ms) - started ))
    READY_CPU_S=$(awk -v t="$(cpu_ticks "$GATEWAY_PID")" -v hz="$CLK_TCK" 'BEGIN { printf "%.2f", t / hz }')
    # The searches' URLs, one per dealer (oha picks one at random for each request).
    jq -r --arg base "http://$LISTEN" '.dealers[] | "\($base)/dealers/\(.id)/a2a"' "$WORK/upstream.json" >"$WORK/urls.txt"
}

SEARCH=$(send_message "$(printf '{"type":"inventory.search.request","filters":{"condition":["used","cpo"]},"sort":{"field":"price","order":"asc"},"pagination":{"limit":%s}}' "$LIMIT")")
echo "$SEARCH" >"$WORK/search.json"
HEADERS=(-H "Content-Type: application/json" -H "A2A-Version: 1.0" -H "A2A-Extensions: $EXTENSION")

check_every_dealer() {
    # check_every_dealer → dies unless every dealer answers the search with a page of vehicles
    local id n
    for id in $(jq -r '.dealers[].id' "$WORK/upstream.json"); do
        curl -fsS "${HEADERS[@]}" --data-binary "@$WORK/search.json" "http://$LISTEN/dealers/$id/a2a" -o "$WORK/reply.json" \
            || die "search failed: dealer $id"
        n=$(jq -e '[.. | objects | .vehicles? // empty][0] | length' "$WORK/reply.json" 2>/dev/null) \
            || die "not a search result from $id: $(head -c 300 "$WORK/reply.json")"
        ((n > 0)) || die "dealer $id lists nothing"
    done
}

metric_sums() {
    # metric_sums → "changed not_modified failed errors": the feed refreshes by outcome summed
    # over the dealers, and the calls answered with an error so far
    curl -fsS "http://$ADMIN/metrics" | awk '
        /^aap_gateway_feed_refreshes_total\{/ {
            match($0, /outcome="[a-z_]+"/); o = substr($0, RSTART + 9, RLENGTH - 10); n[o] += $NF }
        /^aap_gateway_requests_total\{/ && !/outcome="ok"/ { e += $NF }
        END { printf "%d %d %d %d\n", n["changed"], n["not_modified"], n["failed"], e }'
}

run_oha() {
    # run_oha LABEL → "p50_ms p99_ms rps success_rate requests gateway_cpu_share"
    local out=$WORK/$1.oha.json before after t0 t1
    before=$(cpu_ticks "$GATEWAY_PID")
    t0=$(now_ms)
    "$OHA" -z "$DURATION" -q "$RATE" -c "$CONNECTIONS" --no-tui --output-format json \
        -m POST "${HEADERS[@]}" -D "$WORK/search.json" --urls-from-file "$WORK/urls.txt" \
        >"$out" 2>"$WORK/$1.oha.err" || die "oha failed: $(cat "$WORK/$1.oha.err")"
    t1=$(now_ms)
    after=$(cpu_ticks "$GATEWAY_PID")
    jq -r --argjson cpu "$(( after - before ))" --argjson hz "$CLK_TCK" --argjson ms "$(( t1 - t0 ))" '
        ([.statusCodeDistribution // {} | to_entries[] | .value] | add // 0) as $n
        | [.metrics.latency_ms.p50, .metrics.latency_ms.p99, .summary.requestsPerSec,
           .summary.successRate, $n, ($cpu / $hz * 1000 / $ms)]
        | map(tostring) | join(" ")' "$out"
}

start_sampler() {
    # start_sampler FILE → VmRSS of the gateway every 20 ms into FILE (kB, one a line). Bash
    # builtins only: a sampler that starts processes puts them into the latencies it sits beside
    # (bench/README.md, "the p99 during refreshes was the bench's own sampler").
    (
        exec {tick}<> <(:)
        while [[ -r /proc/$GATEWAY_PID/status ]]; do
            while read -r key value _; do
                [[ $key == VmRSS: ]] && { echo "$value"; break; }
            done <"/proc/$GATEWAY_PID/status"
            read -r -t 0.02 -u "$tick" _ || true
        done
    ) >"$1" 2>/dev/null &
    SAMPLER_PID=$!
}
stop_sampler() { stop "$SAMPLER_PID"; SAMPLER_PID=; }

feed_log() {
    # feed_log NAME → one "unix_ms kind elapsed_ms" line per refresh outcome in the log (kind:
    # loaded, changed, unchanged, failed)
    jq -rc 'select((.message // "") | test("^feed (loaded|refreshed|refresh failed)")) |
        [(.timestamp | sub("\\.[0-9]+Z$"; "Z") | fromdateiso8601) * 1000
           + ((.timestamp | capture("\\.(?<f>[0-9]+)Z$").f // "0") + "000" | .[0:3] | tonumber),
         (if .message == "feed loaded" then "loaded" elif (.message | test("failed")) then "failed"
          elif .unchanged then "unchanged" else "changed" end),
         (.elapsed_ms // -1)] | map(tostring) | join(" ")' \
        "$WORK/$1/gateway.log" 2>/dev/null || true
}

# --- run 1: steady (no refresh) ----------------------------------------------------------------
start_loadavg=$(load_average)
echo "$SELF: $DEALERS dealers ($MIX; $BEHAVIOURS), $UNITS units, $FEED_BYTES bytes as served" >&2
write_config steady 1h
start_gateway steady
steady_ready_ms=$READY_MS
steady_ready_cpu=$READY_CPU_S
load_hwm=$(rss_kb "$GATEWAY_PID" VmHWM)
check_every_dealer
sleep 3
echo "$SELF: steady: ready after $steady_ready_ms ms, RSS $(rss_kb "$GATEWAY_PID" VmRSS) kB" >&2
read -r s_changed s_nm s_failed s_errors < <(metric_sums)
start_sampler "$WORK/steady.rss"
read -r steady_p50 steady_p99 steady_rps steady_ok steady_n steady_cpu < <(run_oha steady)
stop_sampler
read -r s2_changed s2_nm s2_failed s2_errors < <(metric_sums)
steady_rss=$(rss_kb "$GATEWAY_PID" VmRSS)
steady_sampled_max=$(sort -n "$WORK/steady.rss" | tail -1)
steady_refreshes=$(( s2_changed + s2_nm + s2_failed - s_changed - s_nm - s_failed ))
steady_errors=$(( s2_errors - s_errors ))
die_if_gateway_gone "$WORK/steady/gateway.log" "the gateway died during the steady run"
stop "$GATEWAY_PID"
GATEWAY_PID=

# --- run 2: the refresh storm ------------------------------------------------------------------
write_config refresh "$REFRESH"
start_gateway refresh
refresh_ready_ms=$READY_MS
check_every_dealer
# Every feed's first refresh is due within 1.1 × refresh of its load: measure from the round
# after, the cycle a running gateway repeats.
sleep "$(awk -v ms="$REFRESH_MS" 'BEGIN { printf "%.1f", ms * 1.2 / 1000 + 1 }')"
refresh_base_rss=$(rss_kb "$GATEWAY_PID" VmRSS)
echo 5 >"/proc/$GATEWAY_PID/clear_refs" 2>/dev/null && hwm_reset=true || hwm_reset=false
read -r r_changed r_nm r_failed r_errors < <(metric_sums)
curl -fsS "$FEED_URL/_counts" -o "$WORK/counts.before.json"
host_before=$(cpu_ticks "$UPSTREAM_PID")
start_sampler "$WORK/refresh.rss"
t_start=$(now_ms)
read -r during_p50 during_p99 during_rps during_ok during_n during_cpu < <(run_oha refresh)
t_end=$(now_ms)
refresh_hwm=$(rss_kb "$GATEWAY_PID" VmHWM)
stop_sampler
host_cpu=$(awk -v t="$(( $(cpu_ticks "$UPSTREAM_PID") - host_before ))" -v hz="$CLK_TCK" -v ms="$(( t_end - t_start ))" 'BEGIN { printf "%.2f", t / hz * 1000 / ms }')
read -r r2_changed r2_nm r2_failed r2_errors < <(metric_sums)
curl -fsS "$FEED_URL/_counts" -o "$WORK/counts.after.json"
refresh_sampled_max=$(sort -n "$WORK/refresh.rss" | tail -1)
refresh_sampled_mean=$(awk '{ s += $1; n++ } END { printf "%.0f", n ? s / n : 0 }' "$WORK/refresh.rss")
[[ $hwm_reset == true ]] || refresh_hwm=$refresh_sampled_max
die_if_gateway_gone "$WORK/refresh/gateway.log" "the gateway died during the refresh run"
refresh_end_rss=$(rss_kb "$GATEWAY_PID" VmRSS)
changed=$(( r2_changed - r_changed ))
not_modified=$(( r2_nm - r_nm ))
failed=$(( r2_failed - r_failed ))
during_errors=$(( r2_errors - r_errors ))
# Builds that ended in the window (log), their mean fetch + build time.
read -r built built_ms < <(feed_log refresh | awk -v a="$t_start" -v b="$t_end" '
    $1 >= a && $1 <= b && $2 == "changed" { n++; s += $3 } END { printf "%d %.0f\n", n, n ? s / n : 0 }')
# The feed host's answers in the window, by status.
answers=$(jq -rn --slurpfile a "$WORK/counts.before.json" --slurpfile b "$WORK/counts.after.json" '
    [$b[0] | to_entries[] | .key as $d | .value | to_entries[]
     | {code: .key, n: (.value - ($a[0][$d][.key] // 0))}]
    | group_by(.code) | map("\(.[0].code): \(map(.n) | add)") | join(", ")')
stop "$GATEWAY_PID"
GATEWAY_PID=

# --- report ------------------------------------------------------------------------------------
mb() { awk -v k="$1" 'BEGIN { printf "%.1f", k / 1024 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }'; }
valid=$(awk -v a="$steady_ok" -v b="$during_ok" -v e="$steady_errors" -v f="$during_errors" \
    'BEGIN { print (a < 1 || b < 1 || e > 0 || f > 0) ? "false" : "true" }')
p99_ratio=$(ratio "$during_p99" "$steady_p99")
mem_ratio=$(ratio "$refresh_hwm" "$steady_rss")
cat <<EOF

$(date -u +%Y-%m-%dT%H:%M:%SZ)  $(nproc) CPUs  load avg $start_loadavg before, $(load_average) after  commit $(commit_id)$([[ $(tree_dirty) == true ]] && echo "+dirty")
group: $DEALERS dealers, $UNITS units, $(mb $((FEED_BYTES / 1024))) MB as served ($MIX; $BEHAVIOURS)
searches: $RATE req/s over $CONNECTIONS connections, $DURATION per run, a random dealer each, pages of $LIMIT
start-up             steady run: every first load ended after $steady_ready_ms ms ($steady_ready_cpu s CPU), peak RSS $(mb "$load_hwm") MB; refresh run: $refresh_ready_ms ms
RSS, steady          $(mb "$steady_rss") MB after the searches (sampled max $(mb "$steady_sampled_max") MB); refreshes in the run: $steady_refreshes
RSS, refreshing      $(mb "$refresh_base_rss") MB before the window, $(mb "$refresh_end_rss") MB after; peak $(mb "$refresh_hwm") MB (sampled max $(mb "$refresh_sampled_max"), mean $(mb "$refresh_sampled_mean") MB)
refreshes            in the window: $changed changed ($built builds logged, ${built_ms} ms each), $not_modified not_modified, $failed failed; feed host answered $answers; host CPU $host_cpu of a core
search               p50 ms    p99 ms   req/s  success  gateway CPU (cores)
steady            $(printf '%8.3f %9.3f %7.1f %8.3f %8.2f' "$steady_p50" "$steady_p99" "$steady_rps" "$steady_ok" "$steady_cpu")
refreshing        $(printf '%8.3f %9.3f %7.1f %8.3f %8.2f' "$during_p50" "$during_p99" "$during_rps" "$during_ok" "$during_cpu")
ratios            p99 refreshing/steady ${p99_ratio}x (≤ 2); memory peak refreshing/steady ${mem_ratio}x (≤ 1.5), sampled mean $(ratio "$refresh_sampled_mean" "$steady_rss")x
EOF
[[ $valid == true ]] || echo "WARNING: failed requests or JSON-RPC errors (steady $steady_errors, refreshing $during_errors); the figures are not valid"
line=$(jq -cn --arg date "$(date -u +%Y-%m-%dT%H:%M:%SZ)" --arg commit "$(commit_id)" \
    --argjson dealers "$DEALERS" --argjson units "$UNITS" --argjson bytes "$FEED_BYTES" --argjson rate "$RATE" \
    --arg refresh "$REFRESH" --argjson ready_ms "$steady_ready_ms" \
    --argjson steady_kb "$steady_rss" --argjson peak_kb "$refresh_hwm" --argjson mean_kb "$refresh_sampled_mean" \
    --argjson changed "$changed" --argjson not_modified "$not_modified" --argjson failed "$failed" \
    --argjson steady "[$steady_p50,$steady_p99]" --argjson during "[$during_p50,$during_p99]" \
    --argjson p99_ratio "$p99_ratio" --argjson memory_ratio "$mem_ratio" --argjson valid "$valid" '
    {bench: "aap-gateway-feed-group", $date, $commit, $dealers, $units, $bytes, $rate, $refresh, $ready_ms,
     $steady_kb, refresh_peak_kb: $peak_kb, refresh_mean_kb: $mean_kb,
     refreshes: {$changed, $not_modified, $failed},
     steady: {p50_ms: $steady[0], p99_ms: $steady[1]}, refreshing: {p50_ms: $during[0], p99_ms: $during[1]},
     $p99_ratio, $memory_ratio, $valid}')
echo "$line"
[[ -z $JSON_OUT ]] || echo "$line" >"$JSON_OUT"
[[ $valid == true ]] || exit 2
