#!/usr/bin/env bash
# MCP interop check: the official MCP SDKs against one `aap-gateway demo` process: first the
# Python client (`mcp` from PyPI, in a venv), then the TypeScript SDK's client
# (@modelcontextprotocol/sdk from npm, in tests/interop/mcp/js/node_modules). Both list and call
# every tool of the demo's two dealers (a lead replayed with its key included). Then each client
# meets RATE_LIMITED (a tool error with its retry hint) from a demo allowing one call a minute.
#
# Environment:
#   AAP_GATEWAY_BIN   gateway binary        (default target/release/aap-gateway)
#   MCP_INTEROP_VENV  virtualenv directory  (default target/interop-mcp-venv)
#   INTEROP_PYTHON    interpreter for the venv, >= 3.10 (default python3)
#   INTEROP_NODE      Node.js, >= 20        (default node)
#   INTEROP_NPM       npm                   (default npm)
#   INTEROP_WAIT_SECS max wait for the endpoints file (default 30)
#
# Exit status: 0 when both clients pass all their checks; otherwise the failing client's status
# (the Python one's if both fail); 1 on setup failure.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../../.." && pwd)"
cd "$ROOT"

VENV="${MCP_INTEROP_VENV:-target/interop-mcp-venv}"
GATEWAY_BIN="${AAP_GATEWAY_BIN:-target/release/aap-gateway}"
PYTHON="${INTEROP_PYTHON:-python3}"
NODE="${INTEROP_NODE:-node}"
NPM="${INTEROP_NPM:-npm}"
WAIT_SECS="${INTEROP_WAIT_SECS:-30}"
if [ "$WAIT_SECS" -gt 30 ] 2>/dev/null; then WAIT_SECS=30; fi
REQS="$HERE/requirements.txt"
JS_DIR="$HERE/js"

log() { echo "mcp interop: $*" >&2; }

# shellcheck source=/dev/null
source "$HERE/../setup.sh"
interop_setup "@modelcontextprotocol/sdk"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/aap-mcp-interop.XXXXXX")"
GW_PIDS=()

stop_gateway() {
  local pid="$1"
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null || true
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
# ready once its endpoints file parses with a "dealers" list. Its pid is the last of GW_PIDS.
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

start_gateway "$WORK/endpoints.json" "$WORK/gateway.log" || exit 1
py_status=0
run_client Python "$WORK/gateway.log" \
  "$VENV/bin/python" "$HERE/python_client.py" "$WORK/endpoints.json" || py_status=$?
js_status=0
run_client TypeScript "$WORK/gateway.log" \
  "$NODE" "$JS_DIR/client.mjs" "$WORK/endpoints.json" || js_status=$?

# --- throttling: one gateway per client (quotas are per client address, shared by both) -----
for client in Python TypeScript; do
  endpoints="$WORK/throttle-$client.json"
  gw_log="$WORK/throttle-$client.log"
  if ! start_gateway "$endpoints" "$gw_log" \
      AAP_GATEWAY__RATE_LIMIT__DEFAULT__RATE=1/min AAP_GATEWAY__RATE_LIMIT__DEFAULT__BURST=1; then
    [ "$client" = Python ] && py_status=1 || js_status=1
    continue
  fi
  if [ "$client" = Python ]; then
    run_client "Python (throttle)" "$gw_log" \
      "$VENV/bin/python" "$HERE/python_client.py" --throttle "$endpoints" || py_status=$?
  else
    run_client "TypeScript (throttle)" "$gw_log" \
      "$NODE" "$JS_DIR/client.mjs" --throttle "$endpoints" || js_status=$?
  fi
  stop_gateway "${GW_PIDS[-1]}"
done

if [ "$py_status" -ne 0 ]; then exit "$py_status"; fi
exit "$js_status"
