#!/usr/bin/env bash
# Feed mode at a dealer group's size: the demo Honda feed mapping (mappings/demo-honda) over a
# generated CSV of BENCH_ROWS rows (50,000: about 36 MB) in the demo feed's format, served by
# bench/feed_upstream.rs next to the demo REST DMS. Two runs of the release gateway (`serve`, one
# process each, nothing else inside it):
#
#   steady   feed `refresh: 1h`: time to the first load, RSS peak during it and steady RSS after
#            it; searches at a fixed rate over the feed and, for comparison, proxy-mode searches
#            of the same page size (Demo Toyota's mapping against the DMS)
#   refresh  feed `refresh: BENCH_REFRESH` (10ms): refreshes run back to back, so every search
#            of the measured run meets one in progress; RSS peak during them (VmHWM reset once the
#            first refresh is over: the cycle a running gateway repeats) and the same feed
#            searches at the same rate
#
# Reports a table and one JSON line; see bench/README.md ("Feed mode at scale").
#
#   BENCH_ROWS=50000       rows of the generated feed (sold units included)
#   BENCH_CHANGED_EVERY=20 every N-th row differs between the two versions the feed serves in
#                          turn (0: the same document every time)
#   BENCH_REFRESH=10ms     the feed's `refresh` in the refresh run
#   BENCH_DURATION=10s     each measured run (oha -z)
#   BENCH_RATE=200         fixed request rate of every run (oha -q), requests/s
#   BENCH_CONNECTIONS=8    connections (oha -c)
#   BENCH_LIMIT=20         page size of both searches
#   BENCH_BIN=…/release/aap-gateway      the gateway binary (default: $CARGO_TARGET_DIR or target/)
#   BENCH_UPSTREAM_BIN=…/release/examples/feed_upstream   the generator and upstreams
#   BENCH_BUILD=1          1: `cargo build --release` of both first; 0: use the binaries as they are
#   BENCH_RUST_LOG=info,aap_gateway::mapping::feed=debug   RUST_LOG of the gateway (request
#                          logs included; to a file)
#   BENCH_OHA=oha          the oha binary (else /work/oha/bin/oha when it exists)
#   BENCH_START_TIMEOUT=60 seconds to wait for the upstreams and for readiness
#   BENCH_JSON_OUT=        also write the JSON line to this file
#   BENCH_KEEP=0           1: keep the work directory (config, logs, oha output)
#
# Exit status: 0 when every run had only successful replies; 2 when one had failures (figures
# still printed); 1 when the bench could not run.
set -euo pipefail

# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ROWS=${BENCH_ROWS:-50000}
CHANGED_EVERY=${BENCH_CHANGED_EVERY:-20}
REFRESH=${BENCH_REFRESH:-10ms}
RATE=${BENCH_RATE:-200}
CONNECTIONS=${BENCH_CONNECTIONS:-8}
# (Builds from before the `feed loaded` / `feed refreshed` info lines logged refreshes at debug.)
GATEWAY_LOG_LEVEL=${BENCH_RUST_LOG:-info,aap_gateway::mapping::feed=debug}
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
BIN=${BENCH_BIN:-$TARGET_DIR/release/aap-gateway}
UPSTREAM_BIN=${BENCH_UPSTREAM_BIN:-$TARGET_DIR/release/examples/feed_upstream}
OHA=${BENCH_OHA:-$(command -v oha || echo /work/oha/bin/oha)}

need_curl_jq_oha
[[ $ROWS =~ ^[0-9]+$ && $RATE =~ ^[0-9]+$ ]] || die "BENCH_ROWS and BENCH_RATE must be whole numbers"
need_gateway_binary feed_upstream
[[ -x $UPSTREAM_BIN ]] || die "no feed_upstream binary at $UPSTREAM_BIN"

UPSTREAM_PID=
GATEWAY_PID=
SAMPLER_PID=
make_work_dir aap-feed-bench SAMPLER_PID GATEWAY_PID UPSTREAM_PID

# --- upstreams -------------------------------------------------------------------------------
echo "$SELF: generating $ROWS rows and starting the feed and DMS upstreams" >&2
"$UPSTREAM_BIN" --rows "$ROWS" --changed-every "$CHANGED_EVERY" \
    --endpoints-file "$WORK/upstreams.json" >"$WORK/upstream.log" 2>&1 &
UPSTREAM_PID=$!
deadline=$((SECONDS + START_TIMEOUT))
until [[ -s $WORK/upstreams.json ]]; do
    kill -0 "$UPSTREAM_PID" 2>/dev/null || die "feed_upstream exited: $(tail -5 "$WORK/upstream.log")"
    ((SECONDS < deadline)) || die "feed_upstream did not start within ${START_TIMEOUT}s"
    sleep 0.1
done
FEED_URL=$(jq -r .feed "$WORK/upstreams.json")
DMS_URL=$(jq -r .dms "$WORK/upstreams.json")
FEED_BYTES=$(jq -r .bytes "$WORK/upstreams.json")

# --- configuration: the demo Honda feed mapping and the Demo Toyota proxy mapping -------------
write_config() {
    # write_config NAME REFRESH → $WORK/NAME/config/gateway.yaml (logs and everything else the
    # bench writes stay out of that folder: the gateway reloads when a file in it changes)
    local dir=$WORK/$1/config
    mkdir -p "$dir/feed"
    cp -r "$ROOT/mappings/demo-honda/examples" "$dir/feed/"
    cp "$ROOT"/mappings/demo-honda/inventory.{search,facets,vehicle}.yaml "$dir/feed/"
    sed -e "s/^refresh: .*/refresh: $2/" -e "s/^max_stale: .*/max_stale: 24h/" \
        "$ROOT/mappings/demo-honda/feed.yaml" >"$dir/feed/feed.yaml"
    grep -q "^refresh: $2\$" "$dir/feed/feed.yaml" || die "could not set refresh in the feed mapping"
    cat >"$dir/feed/upstreams.yaml" <<EOF
feed:
  kind: rest
  base_url: $FEED_URL
  timeouts: { connect: 1s, request: 60s }
  max_response_bytes: 268435456
EOF
    cat >"$dir/gateway.yaml" <<EOF
listen: 127.0.0.1:0
admin_listen: 127.0.0.1:0
rate_limit: { default: { rate: 1000000/s, burst: 1000000 } }
provider: { organization: Bench Group, url: https://bench.example.com }
dealers:
  - id: bench_feed
    path_prefix: /dealers/feed
    card: { name: Bench Feed Motors, description: The whole group inventory from one feed }
    mappings: feed
  - id: bench_proxy
    path_prefix: /dealers/proxy
    card: { name: Bench Proxy Motors, description: Demo Toyota's mapping against the demo DMS }
    mappings: $ROOT/mappings/demo-toyota
EOF
}

# --- measuring one gateway -------------------------------------------------------------------
rss_kb() { awk -v k="$2:" '$1 == k { print $2 }' "/proc/$1/status" 2>/dev/null || echo 0; }

start_gateway() {
    # start_gateway NAME → GATEWAY_PID, ADMIN, RPC_FEED, RPC_PROXY, READY_MS (process start →
    # feed loaded, when /readyz turns 200), BOUND_MS (process start → listening), READY_CPU_S
    local log=$WORK/$1/gateway.log
    # The clock is read right before the exec: the process starts then.
    (cd "$WORK/$1/config" && now_ms >../started && RUST_LOG=$GATEWAY_LOG_LEVEL DMS_URL=$DMS_URL exec "$BIN" --log-format json serve -c gateway.yaml) >"$log" 2>&1 &
    GATEWAY_PID=$!
    local deadline=$((SECONDS + START_TIMEOUT)) ready= polled
    ADMIN=
    until [[ -n $ready ]]; do
        die_if_gateway_gone "$log" "the gateway exited"
        ((SECONDS < deadline)) || die "the gateway was not ready within ${START_TIMEOUT}s"
        if [[ -z $ADMIN ]]; then
            ADMIN=$(grep -m1 '"aap-gateway ready"' "$log" | jq -r '.admin // empty' 2>/dev/null || true)
            if [[ -n $ADMIN ]]; then
                LISTEN=$(grep -m1 '"aap-gateway ready"' "$log" | jq -r '.listen')
            fi
        fi
        if [[ -n $ADMIN ]] && curl -fs -o /dev/null "http://$ADMIN/readyz"; then
            ready=1
            polled=$(now_ms)
        else
            sleep 0.01
        fi
    done
    # From the process's start to its log lines (the polls above only confirm them).
    local started
    started=$(<"$WORK/$1/started")
    BOUND_MS=$(( $(grep -m1 '"aap-gateway ready"' "$log" | log_ms) - started ))
    # (A build from before that log line: when the poll saw /readyz answer 200.)
    local loaded
    loaded=$(grep -m1 '"feed loaded"' "$log" | log_ms || true)
    READY_MS=$(( ${loaded:-$polled} - started ))
    READY_CPU_S=$(awk -v t="$(cpu_ticks "$GATEWAY_PID")" -v hz="$CLK_TCK" 'BEGIN { printf "%.2f", t / hz }')
    RPC_FEED=http://$LISTEN/dealers/feed/a2a
    RPC_PROXY=http://$LISTEN/dealers/proxy/a2a
}

# The searches: the same shape for both dealers, a page of BENCH_LIMIT.
search_body() {
    # search_body MAKE → a SendMessage body
    send_message "$(printf '{"type":"inventory.search.request","filters":{"make":["%s"],"condition":["used","cpo"]},"sort":{"field":"price","order":"asc"},"pagination":{"limit":%s}}' "$1" "$LIMIT")"
}
search_body Honda >"$WORK/feed-search.json"
search_body Toyota >"$WORK/proxy-search.json"
HEADERS=(-H "Content-Type: application/json" -H "A2A-Version: 1.0" -H "A2A-Extensions: $EXTENSION")

check_search() {
    # check_search URL BODY-FILE → the number of vehicles on the page; dies on anything else
    local reply=$WORK/reply.json
    curl -fsS "${HEADERS[@]}" --data-binary "@$2" "$1" -o "$reply" || die "search failed: POST $1"
    jq -e '[.. | objects | .vehicles? // empty][0] | length' "$reply" 2>/dev/null \
        || die "not a search result from $1: $(head -c 300 "$reply")"
}

run_oha() {
    # run_oha LABEL URL BODY-FILE → "p50_ms p99_ms rps success_rate requests cpu_us_per_request"
    local out=$WORK/$1.oha.json before after
    before=$(cpu_ticks "$GATEWAY_PID")
    "$OHA" -z "$DURATION" -q "$RATE" -c "$CONNECTIONS" --no-tui --output-format json \
        -m POST "${HEADERS[@]}" -D "$3" "$2" >"$out" 2>"$WORK/$1.oha.err" || die "oha failed: $(cat "$WORK/$1.oha.err")"
    after=$(cpu_ticks "$GATEWAY_PID")
    jq -r --argjson cpu "$(( after - before ))" --argjson hz "$CLK_TCK" '
        ([.statusCodeDistribution // {} | to_entries[] | .value] | add // 0) as $n
        | [.metrics.latency_ms.p50, .metrics.latency_ms.p99, .summary.requestsPerSec,
           .summary.successRate, $n, (if $n > 0 then $cpu / $hz * 1e6 / $n else 0 end)]
        | map(tostring) | join(" ")' "$out"
}

start_sampler() {
    # start_sampler FILE → samples VmRSS of the gateway every 20 ms into FILE (kB, one a line).
    # Bash builtins only: a sampler that forked `awk` and `sleep` fifty times a second ran only
    # in the refresh run and put its own process starts into that run's latencies.
    (
        exec {tick}<> <(:) # an open pipe nobody writes to: `read -t` on it is a sleep
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
max_of() { sort -n "$1" | tail -1; }

feed_log() {
    # feed_log NAME → one "unix_ms elapsed_ms vehicles" line per feed load or refresh in the log
    jq -rc 'select((.message // "") | test("^feed (loaded|refreshed)")) |
        [(.timestamp | sub("\\.[0-9]+Z$"; "Z") | fromdateiso8601) * 1000
           + ((.timestamp | capture("\\.(?<f>[0-9]+)Z$").f // "0") | .[0:3] | tonumber),
         (.elapsed_ms // -1), (.vehicles // -1)] | map(tostring) | join(" ")' \
        "$WORK/$1/gateway.log" 2>/dev/null || true
}

# --- run 1: steady ---------------------------------------------------------------------------
start_loadavg=$(load_average)
echo "$SELF: $ROWS rows, $FEED_BYTES bytes; $DURATION per run at $RATE req/s over $CONNECTIONS connections" >&2
write_config steady 1h
start_gateway steady
load_hwm=$(rss_kb "$GATEWAY_PID" VmHWM)
steady_ready_ms=$READY_MS
steady_bound_ms=$BOUND_MS
steady_ready_cpu=$READY_CPU_S
load_elapsed=$(feed_log steady | head -1 | cut -d' ' -f2)
vehicles=$(check_search "$RPC_FEED" "$WORK/feed-search.json")
proxy_vehicles=$(check_search "$RPC_PROXY" "$WORK/proxy-search.json")
sleep 5
settled_rss=$(rss_kb "$GATEWAY_PID" VmRSS)
echo "$SELF: steady: ready after $steady_ready_ms ms (listening after $steady_bound_ms ms), RSS $settled_rss kB, peak $load_hwm kB" >&2
read -r feed_p50 feed_p99 feed_rps feed_ok feed_n feed_cpu < <(run_oha feed-steady "$RPC_FEED" "$WORK/feed-search.json")
read -r proxy_p50 proxy_p99 proxy_rps proxy_ok proxy_n proxy_cpu < <(run_oha proxy "$RPC_PROXY" "$WORK/proxy-search.json")
# Steady state: the copy in place and the searches served.
steady_rss=$(rss_kb "$GATEWAY_PID" VmRSS)
die_if_gateway_gone "$WORK/steady/gateway.log" "the gateway died during the steady run"
stop "$GATEWAY_PID"
GATEWAY_PID=

# --- run 2: refreshes back to back -----------------------------------------------------------
write_config refresh "$REFRESH"
start_gateway refresh
# The first refresh overlaps what the first load left to the allocator; measure from the
# second on, the cycle a running gateway repeats.
deadline=$((SECONDS + 3 * START_TIMEOUT))
until grep -q '"feed refreshed"' "$WORK/refresh/gateway.log"; do
    die_if_gateway_gone "$WORK/refresh/gateway.log" "the gateway died before its first refresh"
    ((SECONDS < deadline)) || die "no refresh within ${START_TIMEOUT}s"
    sleep 0.05
done
refresh_base_rss=$(rss_kb "$GATEWAY_PID" VmRSS)
# Forget the peaks so far (VmHWM) so that what follows is the refreshes' peak.
echo 5 >"/proc/$GATEWAY_PID/clear_refs" 2>/dev/null && hwm_reset=true || hwm_reset=false
start_sampler "$WORK/refresh.rss"
t_start=$(now_ms)
read -r during_p50 during_p99 during_rps during_ok during_n during_cpu < <(run_oha feed-refresh "$RPC_FEED" "$WORK/feed-search.json")
t_end=$(now_ms)
refresh_hwm=$(rss_kb "$GATEWAY_PID" VmHWM)
stop_sampler
refresh_sampled=$(max_of "$WORK/refresh.rss")
[[ $hwm_reset == true ]] || refresh_hwm=$refresh_sampled
die_if_gateway_gone "$WORK/refresh/gateway.log" "the gateway died during the refresh run"
# Refreshes that ended during the measured run, and the share of it they covered.
read -r refreshes refresh_ms_mean refresh_share < <(feed_log refresh | awk -v a="$t_start" -v b="$t_end" '
    $1 >= a && $1 <= b { n++; if ($2 >= 0) { sum += $2; timed++ } }
    END { printf "%d %.0f %.2f\n", n, timed ? sum / timed : -1, timed ? sum / (b - a) : -1 }')
stop "$GATEWAY_PID"
GATEWAY_PID=

# --- report ----------------------------------------------------------------------------------
mb() { awk -v k="$1" 'BEGIN { printf "%.1f", k / 1024 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }'; }
failures=$(awk -v a="$feed_ok" -v b="$proxy_ok" -v c="$during_ok" 'BEGIN { print (a < 1 || b < 1 || c < 1) ? 1 : 0 }')
valid=$([[ $failures == 0 ]] && echo true || echo false)
loadavg=$(load_average)
cat <<EOF

$(date -u +%Y-%m-%dT%H:%M:%SZ)  $(nproc) CPUs  load avg $start_loadavg before, $loadavg after  commit $(commit_id)$([[ $(tree_dirty) == true ]] && echo "+dirty")
feed: $ROWS rows, $(mb $((FEED_BYTES / 1024))) MB; pages of $LIMIT ($vehicles feed, $proxy_vehicles proxy vehicles); $RATE req/s, $CONNECTIONS conns, $DURATION
first load           ready after ${steady_ready_ms} ms (listening after ${steady_bound_ms} ms); load logged: ${load_elapsed:--} ms; gateway CPU until ready ${steady_ready_cpu} s
RSS                  steady $(mb "$steady_rss") MB (after the searches; 5 s after the load: $(mb "$settled_rss") MB); peak during the first load $(mb "$load_hwm") MB
RSS, refresh run     after the first refresh $(mb "$refresh_base_rss") MB; peak during refreshes $(mb "$refresh_hwm") MB (sampled $(mb "$refresh_sampled") MB) = $(ratio "$refresh_hwm" "$steady_rss")x steady
refreshes            $refreshes ended during the run, ${refresh_ms_mean} ms each, covering $refresh_share of it
search               p50 ms    p99 ms   req/s  success  cpu us/req
feed, steady      $(printf '%8.3f %9.3f %7.1f %8.3f %11.0f' "$feed_p50" "$feed_p99" "$feed_rps" "$feed_ok" "$feed_cpu")
feed, refreshing  $(printf '%8.3f %9.3f %7.1f %8.3f %11.0f' "$during_p50" "$during_p99" "$during_rps" "$during_ok" "$during_cpu")
proxy             $(printf '%8.3f %9.3f %7.1f %8.3f %11.0f' "$proxy_p50" "$proxy_p99" "$proxy_rps" "$proxy_ok" "$proxy_cpu")
ratios            p99 refreshing/steady $(ratio "$during_p99" "$feed_p99")x; feed/proxy: p50 $(ratio "$feed_p50" "$proxy_p50")x, p99 $(ratio "$feed_p99" "$proxy_p99")x, cpu $(ratio "$feed_cpu" "$proxy_cpu")x
EOF
[[ $valid == true ]] || echo "WARNING: failed requests; the figures are not valid"
line=$(jq -cn --arg date "$(date -u +%Y-%m-%dT%H:%M:%SZ)" --arg commit "$(commit_id)" \
    --argjson rows "$ROWS" --argjson bytes "$FEED_BYTES" --argjson rate "$RATE" \
    --argjson ready_ms "$steady_ready_ms" --arg load_ms "${load_elapsed:-}" --argjson ready_cpu_s "$steady_ready_cpu" \
    --argjson steady_kb "$steady_rss" --argjson load_peak_kb "$load_hwm" --argjson refresh_peak_kb "$refresh_hwm" \
    --argjson refreshes "$refreshes" --argjson refresh_share "$refresh_share" \
    --argjson feed "[$feed_p50,$feed_p99,$feed_cpu]" --argjson during "[$during_p50,$during_p99,$during_cpu]" \
    --argjson proxy "[$proxy_p50,$proxy_p99,$proxy_cpu]" --argjson valid "$valid" '
    def s(a): {p50_ms: a[0], p99_ms: a[1], cpu_us_per_request: a[2]};
    {bench: "aap-gateway-feed", $date, $commit, $rows, $bytes, $rate, $ready_ms, $ready_cpu_s,
     load_ms: ($load_ms | tonumber? // null), $steady_kb, $load_peak_kb, $refresh_peak_kb,
     $refreshes, $refresh_share, feed_steady: s($feed), feed_refreshing: s($during), proxy: s($proxy), $valid}')
echo "$line"
[[ -z $JSON_OUT ]] || echo "$line" >"$JSON_OUT"
[[ $valid == true ]] || exit 2
