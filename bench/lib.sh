# shellcheck shell=bash
# What bench/load.sh and bench/limits.sh share. Sourced by both right after `set -euo pipefail`:
#   source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# It reads the BENCH_* settings the two have in common (documented at the top of each script)
# and defines helpers; it starts nothing by itself. Messages are prefixed with the name of the
# script that sourced it.

SELF=$(basename "${BASH_SOURCE[1]:-$0}")
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# The settings both scripts take, with the same defaults (some are used only by the scripts).
# shellcheck disable=SC2034
{
    DURATION=${BENCH_DURATION:-10s}
    WARMUP=${BENCH_WARMUP:-2s}
    CONNECTIONS=${BENCH_CONNECTIONS:-32}
    THREADS=${BENCH_THREADS:-2}
    TIMEOUT=${BENCH_TIMEOUT:-5s}
    MAKE=${BENCH_MAKE:-Toyota}
    LIMIT=${BENCH_LIMIT:-20}
    DEALER=${BENCH_DEALER:-demo_toyota}
    BIN=${BENCH_BIN:-$ROOT/target/release/aap-gateway}
    BUILD=${BENCH_BUILD:-1}
    GATEWAY_LOG_LEVEL=${BENCH_RUST_LOG:-warn}
    GATEWAY_CPUS=${BENCH_GATEWAY_CPUS:-}
    WRK_CPUS=${BENCH_WRK_CPUS:-}
    START_TIMEOUT=${BENCH_START_TIMEOUT:-60}
    JSON_OUT=${BENCH_JSON_OUT:-}
    KEEP=${BENCH_KEEP:-0}
    INSTALL_WRK=${BENCH_INSTALL_WRK:-1}
    EXTENSION=https://draft.autoagentprotocol.invalid/extensions/aap/latest
    CLK_TCK=$(getconf CLK_TCK 2>/dev/null || echo 100)
}

die() {
    # die MESSAGE… → MESSAGE on stderr, exit 1 ("the bench could not run")
    echo "$SELF: $*" >&2
    exit 1
}

check_common_settings() {
    # Rejects the shared settings that cannot work.
    (( THREADS <= CONNECTIONS )) || die "BENCH_THREADS ($THREADS) must not exceed BENCH_CONNECTIONS ($CONNECTIONS)"
    [[ $LIMIT =~ ^[0-9]+$ ]] || die "BENCH_LIMIT must be a whole number"
}

# --- tools -----------------------------------------------------------------------------------
apt_install() {
    # apt_install PACKAGE → installs it quietly (refreshing the index once if needed)
    apt-get install -y "$1" >/dev/null 2>&1 \
        || { apt-get update >/dev/null 2>&1 && apt-get install -y "$1" >/dev/null 2>&1; }
}

can_apt_install() {
    # can_apt_install SETTING → true when SETTING is 1, this runs as root and apt-get exists
    [[ $1 == 1 && $(id -u) == 0 ]] && command -v apt-get >/dev/null
}

need_curl_and_wrk() {
    # Dies without curl; installs Debian's wrk when missing (BENCH_INSTALL_WRK, root), else dies.
    command -v curl >/dev/null || die "curl is required"
    command -v wrk >/dev/null && return 0
    can_apt_install "$INSTALL_WRK" || die "wrk is required: apt-get install wrk (as root), or put it on PATH"
    echo "$SELF: installing wrk (Debian package)" >&2
    apt_install wrk || die "could not install wrk; install it (apt-get install wrk) and retry"
}

need_json_reader() {
    # Dies unless json (below) has jq or python3 to work with.
    command -v jq >/dev/null || command -v python3 >/dev/null \
        || die "jq or python3 is required to read the endpoints file"
}

json() {
    # json JQ-EXPR FILE → the value as text, empty when absent. Without jq, python3 understands
    # only the forms the scripts use: .simulators.dms and .dealers[] | select(.id == "X") | .field
    if command -v jq >/dev/null; then
        jq -r "$1 // empty" "$2"
        return
    fi
    python3 - "$1" "$2" <<'PY'
import json, re, sys
expr, path = sys.argv[1], sys.argv[2]
data = json.load(open(path))
if expr == ".simulators.dms":
    out = data["simulators"]["dms"]
else:
    dealer = re.search(r'\.id == "([^"]*)"', expr).group(1)
    field = expr.rsplit(".", 1)[1]
    out = next((d.get(field) for d in data["dealers"] if d["id"] == dealer), None)
print("" if out is None else out)
PY
}

need_gateway_binary() {
    # `cargo build --release` of the gateway and of the examples named (when BENCH_BUILD=1);
    # dies unless BIN is then executable (each caller checks its examples' own binaries).
    local args=(--bin aap-gateway) example
    for example in "$@"; do args+=(--example "$example"); done
    if [[ $BUILD == 1 ]]; then
        echo "$SELF: cargo build --release (gateway${1:+, $*})" >&2
        (cd "$ROOT" && cargo build --release --quiet "${args[@]}") || die "build failed"
    fi
    [[ -x $BIN ]] || die "no gateway binary at $BIN (set BENCH_BIN, or BENCH_BUILD=1)"
}

need_curl_jq_oha() {
    # What the benches that load with oha and read /metrics with jq need (OHA: its path).
    command -v curl >/dev/null || die "curl is required"
    command -v jq >/dev/null || die "jq is required (apt-get install jq)"
    [[ -x $OHA ]] || die "oha is required: cargo install oha, or set BENCH_OHA"
}

group_config_head() {
    # The top of a group's gateway config, up to `dealers:`: ports of its own, limits and a
    # rate limit that never refuse the bench's load.
    cat <<EOF
listen: 127.0.0.1:0
admin_listen: 127.0.0.1:0
limits: { max_body_bytes: 65536, request_timeout: 15s, max_concurrency: 1024 }
rate_limit: { default: { rate: 1000000/s, burst: 1000000 } }
provider: { organization: Bench Group, url: https://bench.example.com }
dealers:
EOF
}

# --- processes, work directory, cleanup ------------------------------------------------------
stop() {
    # stop PID → TERM, up to 5 s, then KILL; waits for it (nothing when PID is empty or gone)
    local pid=$1
    [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null || return 0
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}

STOP_AT_EXIT=()
make_work_dir() {
    # make_work_dir PREFIX PID-VARIABLE… → sets WORK to a new temporary directory; on every exit
    # the processes whose PIDs those variables then hold are stopped, in that order, and WORK is
    # removed (kept with BENCH_KEEP=1 or when the bench could not run, exit status 1)
    WORK=$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX")
    STOP_AT_EXIT=("${@:2}")
    trap cleanup EXIT
    trap 'exit 1' INT TERM HUP
}

cleanup() {
    # The EXIT trap of make_work_dir; keeps the exit status.
    local status=$? var
    for var in "${STOP_AT_EXIT[@]}"; do stop "${!var:-}"; done
    if [[ $KEEP == 1 || $status == 1 ]]; then
        echo "$SELF: work directory kept: $WORK" >&2
    else
        rm -rf "$WORK"
    fi
    exit "$status"
}

pin() {
    # pin CPUS command… → run with taskset when CPUS is set
    local cpus=$1
    shift
    if [[ -n $cpus ]]; then
        command -v taskset >/dev/null || die "taskset is required for CPU pinning"
        taskset -c "$cpus" "$@"
    else
        "$@"
    fi
}

exec_pinned() {
    # exec_pinned CPUS command… → replaces this (sub)shell with the command, under taskset when
    # CPUS is set
    local cpus=$1
    shift
    if [[ -n $cpus ]]; then
        exec taskset -c "$cpus" "$@"
    fi
    exec "$@"
}

cpu_ticks() {
    # cpu_ticks PID → user + system clock ticks (CLK_TCK a second) of the process so far
    awk '{ print $14 + $15 }' "/proc/$1/stat" 2>/dev/null || echo 0
}

now_ms() {
    # → the wall clock, Unix milliseconds (bash 5's EPOCHREALTIME: no process started)
    local t=${EPOCHREALTIME/[.,]/}
    echo $(( t / 1000 ))
}

log_ms() {
    # log_ms → for each JSON log line on stdin, its "timestamp" in Unix milliseconds
    jq -r '.timestamp | (sub("\\.[0-9]+Z$"; "Z") | fromdateiso8601) * 1000
        + ((capture("\\.(?<f>[0-9]+)Z$").f // "0") + "000" | .[0:3] | tonumber)'
}

# --- the demo gateway ------------------------------------------------------------------------
# `aap-gateway demo` on free loopback ports (a script may append e.g. --config).
DEMO_ARGS=(demo --listen 127.0.0.1:0 --admin-listen 127.0.0.1:0)

exec_demo() {
    # exec_demo ENDPOINTS-FILE → replaces this (sub)shell with the demo gateway, run from the
    # repository root with RUST_LOG=BENCH_RUST_LOG, pinned to BENCH_GATEWAY_CPUS when set
    cd "$ROOT" || exit 1
    export RUST_LOG=$GATEWAY_LOG_LEVEL
    exec_pinned "$GATEWAY_CPUS" "$BIN" "${DEMO_ARGS[@]}" --endpoints-file "$1"
}

die_if_gateway_gone() {
    # die_if_gateway_gone LOG MESSAGE → dies with the log's last 30 lines and MESSAGE when the
    # process GATEWAY_PID has exited
    kill -0 "$GATEWAY_PID" 2>/dev/null && return 0
    tail -n 30 "$1" >&2 || true
    die "$2"
}

wait_for_endpoints() {
    # wait_for_endpoints FILE LOG EXITED-MESSAGE TIMEOUT-MESSAGE → returns once the gateway has
    # written FILE; dies when it exits first or after BENCH_START_TIMEOUT seconds
    local deadline=$((SECONDS + START_TIMEOUT))
    until [[ -s $1 ]]; do
        die_if_gateway_gone "$2" "$3"
        (( SECONDS < deadline )) || die "$4"
        sleep 0.1
    done
}

# shellcheck disable=SC2034  # RPC is the scripts' to use
read_dealer() {
    # read_dealer ENDPOINTS-FILE → sets RPC (the JSON-RPC URL of BENCH_DEALER) and HOST; dies
    # when the dealer is not there
    RPC=$(json ".dealers[] | select(.id == \"$DEALER\") | .jsonrpc_url" "$1")
    HOST=$(json ".dealers[] | select(.id == \"$DEALER\") | .host" "$1")
    [[ -n $RPC ]] || die "no dealer $DEALER in the endpoints file"
}

# --- requests --------------------------------------------------------------------------------
search_data() {
    # → the inventory.search request data (BENCH_MAKE, BENCH_LIMIT)
    printf '{"type":"inventory.search.request","filters":{"make":["%s"]},"pagination":{"limit":%s}}' "$MAKE" "$LIMIT"
}

send_message() {
    # send_message DATA → the JSON-RPC SendMessage body with DATA as its one part
    printf '{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"m-1","role":"ROLE_USER","parts":[{"data":%s}]}}}' "$1"
}

gateway_headers() {
    # → the gateway request headers, one a line (Host: only when the dealer has a host)
    printf '%s\n' "Content-Type: application/json" "A2A-Version: 1.0" "A2A-Extensions: $EXTENSION"
    [[ -n $HOST ]] && printf 'Host: %s\n' "$HOST"
    return 0
}

curl_headers() {
    # curl_headers HEADER… → curl's arguments for them, one a line (-H, then the header)
    local h
    for h in "$@"; do printf -- '-H\n%s\n' "$h"; done
}

# --- load ------------------------------------------------------------------------------------
run_wrk() {
    # run_wrk LABEL DURATION BODY|- EXPECT URL HEADERS… → wrk's output on stdout
    local label=$1 duration=$2 body=$3 expect=$4 url=$5
    shift 5
    pin "$WRK_CPUS" wrk -t "$THREADS" -c "$CONNECTIONS" -d "$duration" --timeout "$TIMEOUT" \
        --latency -s "$ROOT/bench/wrk.lua" "$url" -- "$label" "$body" "$expect" "$@"
}

warm_up() {
    # warm_up LABEL BODY|- EXPECT URL HEADERS… → the unreported BENCH_WARMUP run (none when "0")
    if [[ $WARMUP != 0 && $WARMUP != 0s ]]; then
        run_wrk "$1" "$WARMUP" "${@:2}" >"$WORK/$1.warmup.txt"
    fi
}

# --- report ----------------------------------------------------------------------------------
load_average() {
    # → the 1-minute load average (0 when unknown)
    cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo 0
}

commit_id() (
    # → the short commit of the checkout ("unknown" outside git)
    cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null || echo unknown
)

tree_dirty() (
    # → "true" when the checkout differs from that commit, else "false"
    cd "$ROOT" && { git diff --quiet HEAD 2>/dev/null && echo false || echo true; }
)
