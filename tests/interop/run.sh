#!/usr/bin/env bash
# Interop check: the official A2A SDKs (A2A v1.0) against one `aap-gateway demo` process:
# first the Python client (a2a-sdk from PyPI, in a venv), then the JavaScript client
# (@a2a-js/sdk from npm, in tests/interop/js/node_modules). Both read the same endpoints file.
# Then each client meets RATE_LIMITED from demo processes with a one-call quota, under
# `bindings.jsonrpc.rate_limited_status` 200 and 429.
#
# Environment:
#   AAP_GATEWAY_BIN   gateway binary        (default target/release/aap-gateway)
#   INTEROP_VENV      virtualenv directory  (default target/interop-venv)
#   INTEROP_PYTHON    interpreter for the venv, >= 3.10 (default python3)
#   INTEROP_NODE      Node.js, >= 20        (default node)
#   INTEROP_NPM       npm                   (default npm)
#   INTEROP_WAIT_SECS max wait for the endpoints file (default 30)
#
# Exit status: 0 when both clients pass all their checks; otherwise the failing client's status
# (the Python one's if both fail); 1 on setup failure.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
cd "$ROOT"

VENV="${INTEROP_VENV:-target/interop-venv}"
GATEWAY_BIN="${AAP_GATEWAY_BIN:-target/release/aap-gateway}"
PYTHON="${INTEROP_PYTHON:-python3}"
NODE="${INTEROP_NODE:-node}"
NPM="${INTEROP_NPM:-npm}"
WAIT_SECS="${INTEROP_WAIT_SECS:-30}"
if [ "$WAIT_SECS" -gt 30 ] 2>/dev/null; then WAIT_SECS=30; fi
REQS="$HERE/requirements.txt"
JS_DIR="$HERE/js"

log() { echo "interop: $*" >&2; }

# shellcheck source=/dev/null
source "$HERE/setup.sh"
interop_setup "@a2a-js/sdk"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/aap-interop.XXXXXX")"
ENDPOINTS="$WORK/endpoints.json"
GW_LOG="$WORK/gateway.log"
GW_PIDS=()

stop_gateway() {
  local pid="$1"
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
      kill -9 "$pid" 2>/dev/null || true
    fi
    wait "$pid" 2>/dev/null || true
  fi
}

cleanup() {
  local rc=$?
  for pid in "${GW_PIDS[@]}"; do stop_gateway "$pid"; done
  rm -rf "$WORK"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# start_gateway ENDPOINTS LOG [VAR=VALUE ...]: a demo process with those environment overrides,
# ready once its endpoints file exists and parses as JSON with a "dealers" list (guards against
# reading a half-written file). Its pid is the last of GW_PIDS.
start_gateway() {
  local endpoints="$1" gw_log="$2"; shift 2
  log "starting $GATEWAY_BIN demo${*:+ with $*}"
  env "$@" "$GATEWAY_BIN" demo --listen 127.0.0.1:0 --admin-listen 127.0.0.1:0 \
    --endpoints-file "$endpoints" </dev/null >"$gw_log" 2>&1 &
  local pid=$!
  GW_PIDS+=("$pid")
  local deadline=$((SECONDS + WAIT_SECS))
  while [ "$SECONDS" -lt "$deadline" ]; do
    if ! kill -0 "$pid" 2>/dev/null; then
      log "gateway exited before it was ready; its output:"
      tail -n 50 "$gw_log" >&2 || true
      return 1
    fi
    if [ -s "$endpoints" ] && "$VENV/bin/python" -c \
        'import json,sys; d=json.load(open(sys.argv[1])); sys.exit(0 if isinstance(d.get("dealers"), list) else 1)' \
        "$endpoints" 2>/dev/null; then
      return 0
    fi
    sleep 0.2
  done
  log "no endpoints file after ${WAIT_SECS}s; gateway output:"
  tail -n 50 "$gw_log" >&2 || true
  return 1
}

start_gateway "$ENDPOINTS" "$GW_LOG" || exit 1

# --- clients -----------------------------------------------------------------
# Both run against the same gateway process; the second runs even if the first failed.
run_client() {
  local name="$1" gw_log="$2"; shift 2
  local rc=0
  log "running the $name client"
  "$@" || rc=$?
  if [ "$rc" -ne 0 ]; then
    log "$name client failed (exit $rc); last gateway output:"
    tail -n 30 "$gw_log" >&2 || true
  fi
  return "$rc"
}

py_status=0
run_client Python "$GW_LOG" "$VENV/bin/python" "$HERE/python_client.py" "$ENDPOINTS" || py_status=$?
js_status=0
run_client JavaScript "$GW_LOG" "$NODE" "$JS_DIR/client.mjs" "$ENDPOINTS" || js_status=$?

# --- throttling ----------------------------------------------------------------
# What each client makes of RATE_LIMITED under both `bindings.jsonrpc.rate_limited_status`
# settings (docs/protocol.md §Rate limits): one gateway per setting, each allowing one call per
# minute per skill, so each client's second dealer.information call is refused. Each client
# gets a fresh gateway (its quota is per client address, and both clients share 127.0.0.1).
for status in 200 429; do
  for client in Python JavaScript; do
    endpoints="$WORK/throttle-$status-$client.json"
    gw_log="$WORK/throttle-$status-$client.log"
    if ! start_gateway "$endpoints" "$gw_log" \
        AAP_GATEWAY__BINDINGS__JSONRPC__RATE_LIMITED_STATUS="$status" \
        AAP_GATEWAY__RATE_LIMIT__DEFAULT__RATE=1/min \
        AAP_GATEWAY__RATE_LIMIT__DEFAULT__BURST=1; then
      [ "$client" = Python ] && py_status=1 || js_status=1
      continue
    fi
    if [ "$client" = Python ]; then
      run_client "Python (throttle $status)" "$gw_log" \
        "$VENV/bin/python" "$HERE/python_client.py" --throttle "$status" "$endpoints" || py_status=$?
    else
      run_client "JavaScript (throttle $status)" "$gw_log" \
        "$NODE" "$JS_DIR/client.mjs" --throttle "$status" "$endpoints" || js_status=$?
    fi
    stop_gateway "${GW_PIDS[-1]}"
  done
done

if [ "$py_status" -ne 0 ]; then exit "$py_status"; fi
exit "$js_status"
