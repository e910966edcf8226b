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
REQS="$HERE/requirements.txt"
JS_DIR="$HERE/js"

log() { echo "mcp interop: $*" >&2; }

# shellcheck source=/dev/null
source "$HERE/../setup.sh"
interop_setup "@modelcontextprotocol/sdk"

interop_workdir aap-mcp-interop
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
