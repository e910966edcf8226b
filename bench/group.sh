#!/usr/bin/env bash
# A dealer group behind one gateway: BENCH_DEALERS dealers (100), each with its own copy of the
# shared yardstick's mapping (bench/fixtures/group-mapping: identical files, as a group that
# rolls one mapping out to every store has), and a dealer profile each. The release gateway is
# started BENCH_ROUNDS times (`serve`); each round measures how long it takes from the start of
# the process until it is ready (its "aap-gateway ready" log line; /readyz then answers 200),
# the CPU it used until then, and the resident memory once it idles.
#
# Reports each round, the medians, and one JSON line; see bench/README.md ("A dealer group").
#
#   BENCH_DEALERS=100      dealers in the generated configuration
#   BENCH_LAYOUT=copies    copies: a mapping folder per dealer (identical files); shared: every
#                          dealer names the same folder
#   BENCH_ROUNDS=3         gateway starts (medians reported)
#   BENCH_IDLE=3           seconds to let the started gateway idle before reading its RSS
#   BENCH_BIN=…/release/aap-gateway   the gateway binary (default: $CARGO_TARGET_DIR or target/)
#   BENCH_BUILD=1          1: `cargo build --release` first; 0: use BENCH_BIN as is
#   BENCH_RUST_LOG=info    RUST_LOG of the gateway (to a file)
#   BENCH_START_TIMEOUT=60 seconds to wait for readiness
#   BENCH_JSON_OUT=        also write the JSON line to this file
#   BENCH_KEEP=0           1: keep the work directory (configuration, logs)
#
# Exit status: 0 when every round got ready and its last dealer answered its agent card; 1 when
# the bench could not run.
set -euo pipefail

# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

DEALERS=${BENCH_DEALERS:-100}
LAYOUT=${BENCH_LAYOUT:-copies}
ROUNDS=${BENCH_ROUNDS:-3}
IDLE=${BENCH_IDLE:-3}
GATEWAY_LOG_LEVEL=${BENCH_RUST_LOG:-info}
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
BIN=${BENCH_BIN:-$TARGET_DIR/release/aap-gateway}

command -v curl >/dev/null || die "curl is required"
command -v jq >/dev/null || die "jq is required (apt-get install jq)"
[[ $DEALERS =~ ^[0-9]+$ && $DEALERS -ge 1 && $ROUNDS =~ ^[0-9]+$ && $ROUNDS -ge 1 ]] \
    || die "BENCH_DEALERS and BENCH_ROUNDS must be whole numbers from 1"
[[ $LAYOUT == copies || $LAYOUT == shared ]] || die "BENCH_LAYOUT is copies or shared"
need_gateway_binary

GATEWAY_PID=
make_work_dir aap-group-bench GATEWAY_PID

# --- the group -------------------------------------------------------------------------------
{
    group_config_head
    for i in $(seq -f '%03g' 1 "$DEALERS"); do
        if [[ $LAYOUT == copies ]]; then
            mkdir -p "$WORK/config/mappings/d$i"
            cp "$ROOT"/bench/fixtures/group-mapping/*.yaml "$WORK/config/mappings/d$i/"
            folder=mappings/d$i
        else
            folder=$ROOT/bench/fixtures/group-mapping
        fi
        cat <<EOF
  - id: bench_$i
    path_prefix: /dealers/d$i
    card: { name: Bench Motors $i, description: Bench dealer $i }
    mappings: $folder
    profile:
      name: Bench Motors $i
      rooftops:
        - name: Bench Motors $i Atlanta
          phones: [{ name: Sales, value: "+14045550100" }]
          address: { address_line_1: $i Peachtree St, city: Atlanta, state: GA, zip: "30341" }
          timezone: America/New_York
          capabilities: [sales]
EOF
    done
} >"$WORK/gateway.yaml.tmp"
# Logs and everything else the bench writes stay out of the configuration's folder: the gateway
# reloads when a file in it changes.
mkdir -p "$WORK/config"
mv "$WORK/gateway.yaml.tmp" "$WORK/config/gateway.yaml"

# --- rounds ----------------------------------------------------------------------------------
rss_kb() { awk -v k="$2:" '$1 == k { print $2 }' "/proc/$1/status" 2>/dev/null || echo 0; }
last=$(printf '%03d' "$DEALERS")

READY=() CPU=() RSS=() HWM=()
for round in $(seq 1 "$ROUNDS"); do
    log=$WORK/gateway.$round.log
    # The clock is read right before the exec: the process starts then.
    (cd "$WORK/config" && now_ms >"$WORK/started" && RUST_LOG=$GATEWAY_LOG_LEVEL exec "$BIN" --log-format json serve -c gateway.yaml) >"$log" 2>&1 &
    GATEWAY_PID=$!
    admin= listen=
    deadline=$((SECONDS + START_TIMEOUT))
    while :; do
        die_if_gateway_gone "$log" "the gateway exited"
        ((SECONDS < deadline)) || die "not ready within ${START_TIMEOUT}s"
        if [[ -z $admin ]]; then
            line=$(grep -m1 '"aap-gateway ready"' "$log" || true)
            admin=$(jq -r '.admin // empty' <<<"$line" 2>/dev/null || true)
            listen=$(jq -r '.listen // empty' <<<"$line" 2>/dev/null || true)
        fi
        [[ -n $admin ]] && curl -fs -o /dev/null "http://$admin/readyz" && break
        sleep 0.005
    done
    # From the process's start to the moment it logged being ready (the poll above only
    # confirms it: its own tools take tens of milliseconds per round on a busy box).
    started=$(<"$WORK/started")
    ready_ms=$(( $(grep -m1 '"aap-gateway ready"' "$log" | log_ms) - started ))
    ready_cpu=$(awk -v t="$(cpu_ticks "$GATEWAY_PID")" -v hz="$CLK_TCK" 'BEGIN { printf "%.2f", t / hz }')
    curl -fsS -o "$WORK/card.json" "http://$listen/dealers/d$last/.well-known/agent-card.json" \
        || die "dealer bench_$last has no agent card"
    jq -e --arg name "Bench Motors $last" '.name == $name' "$WORK/card.json" >/dev/null \
        || die "the card of bench_$last is not its own: $(head -c 200 "$WORK/card.json")"
    sleep "$IDLE"
    rss=$(rss_kb "$GATEWAY_PID" VmRSS)
    hwm=$(rss_kb "$GATEWAY_PID" VmHWM)
    stop "$GATEWAY_PID"
    GATEWAY_PID=
    READY+=("$ready_ms") CPU+=("$ready_cpu") RSS+=("$rss") HWM+=("$hwm")
    printf '%s: round %d: ready after %d ms (%s s of CPU), idle RSS %.1f MB (peak %.1f MB)\n' "$SELF" "$round" \
        "$ready_ms" "$ready_cpu" "$(awk -v k="$rss" 'BEGIN { print k / 1024 }')" "$(awk -v k="$hwm" 'BEGIN { print k / 1024 }')" >&2
done

median() { printf '%s\n' "$@" | sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
m_ready=$(median "${READY[@]}")
m_cpu=$(median "${CPU[@]}")
m_rss=$(median "${RSS[@]}")
m_hwm=$(median "${HWM[@]}")
cat <<EOF

$(date -u +%Y-%m-%dT%H:%M:%SZ)  $(nproc) CPUs  load avg $(load_average)  commit $(commit_id)$([[ $(tree_dirty) == true ]] && echo "+dirty")
$DEALERS dealers ($LAYOUT mapping folders), $ROUNDS rounds (medians): ready after $m_ready ms ($m_cpu s of CPU); idle RSS $(awk -v k="$m_rss" 'BEGIN { printf "%.1f", k / 1024 }') MB, peak $(awk -v k="$m_hwm" 'BEGIN { printf "%.1f", k / 1024 }') MB
rounds: ready ms ${READY[*]}; CPU s ${CPU[*]}; RSS kB ${RSS[*]}
EOF
line=$(jq -cn --arg date "$(date -u +%Y-%m-%dT%H:%M:%SZ)" --arg commit "$(commit_id)" --arg layout "$LAYOUT" \
    --argjson dealers "$DEALERS" --argjson ready "[$(IFS=,; echo "${READY[*]}")]" \
    --argjson cpu "[$(IFS=,; echo "${CPU[*]}")]" --argjson m_cpu "$m_cpu" \
    --argjson rss "[$(IFS=,; echo "${RSS[*]}")]" --argjson hwm "[$(IFS=,; echo "${HWM[*]}")]" \
    --argjson m_ready "$m_ready" --argjson m_rss "$m_rss" --argjson m_hwm "$m_hwm" '
    {bench: "aap-gateway-group", $date, $commit, $dealers, $layout, ready_ms: $ready, ready_cpu_s: $cpu, idle_rss_kb: $rss,
     peak_rss_kb: $hwm, median: {ready_ms: $m_ready, ready_cpu_s: $m_cpu, idle_rss_kb: $m_rss, peak_rss_kb: $m_hwm}}')
echo "$line"
[[ -z $JSON_OUT ]] || echo "$line" >"$JSON_OUT"
