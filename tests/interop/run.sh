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
REQS="$HERE/requirements.txt"
JS_DIR="$HERE/js"

log() { echo "interop: $*" >&2; }

# shellcheck source=/dev/null
source "$HERE/setup.sh"
interop_setup "@a2a-js/sdk"

interop_workdir aap-interop
ENDPOINTS="$WORK/endpoints.json"
GW_LOG="$WORK/gateway.log"
start_gateway "$ENDPOINTS" "$GW_LOG" || exit 1

# --- clients -----------------------------------------------------------------
# Both run against the same gateway process; the second runs even if the first failed.
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
