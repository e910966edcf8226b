#!/usr/bin/env bash
# Interop check: the official A2A SDKs (A2A v1.0) against one `aap-gateway demo` process:
# first the Python client (a2a-sdk from PyPI, in a venv), then the JavaScript client
# (@a2a-js/sdk from npm, in tests/interop/js/node_modules). Both read the same endpoints file.
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

# --- venv --------------------------------------------------------------------
stamp="$VENV/.requirements.sha256"
want="$(sha256sum "$REQS" | cut -d' ' -f1)"
if [ ! -x "$VENV/bin/python" ]; then
  log "creating venv at $VENV"
  mkdir -p "$(dirname "$VENV")"
  "$PYTHON" -m venv "$VENV" || { log "cannot create a venv with $PYTHON"; exit 1; }
fi
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  log "installing $(grep -v '^#' "$REQS" | tr '\n' ' ')"
  "$VENV/bin/python" -m pip install --disable-pip-version-check -q -r "$REQS"
  echo "$want" > "$stamp"
fi

# --- node_modules --------------------------------------------------------------
# `npm ci` installs exactly package-lock.json; it runs again only when the lock changed.
for tool in "$NODE" "$NPM"; do
  command -v "$tool" >/dev/null 2>&1 || { log "$tool not found (install Node.js >= 20 and npm)"; exit 1; }
done
"$NODE" -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 20 ? 0 : 1)' \
  || { log "@a2a-js/sdk needs Node.js >= 20; $NODE is $("$NODE" --version)"; exit 1; }
js_stamp="$JS_DIR/node_modules/.package-lock.sha256"
js_want="$(sha256sum "$JS_DIR/package-lock.json" | cut -d' ' -f1)"
if [ ! -f "$JS_DIR/node_modules/@a2a-js/sdk/package.json" ] || [ ! -f "$js_stamp" ] \
    || [ "$(cat "$js_stamp")" != "$js_want" ]; then
  log "installing $JS_DIR/package-lock.json into $JS_DIR/node_modules (npm ci)"
  (cd "$JS_DIR" && "$NPM" ci --ignore-scripts --no-audit --no-fund --loglevel=error)
  echo "$js_want" > "$js_stamp"
fi

# --- gateway -----------------------------------------------------------------
if [ ! -x "$GATEWAY_BIN" ]; then
  log "gateway binary not found at $GATEWAY_BIN (build it: cargo build --release, or set AAP_GATEWAY_BIN)"
  exit 1
fi

WORK="$(mktemp -d "${TMPDIR:-/tmp}/aap-interop.XXXXXX")"
ENDPOINTS="$WORK/endpoints.json"
GW_LOG="$WORK/gateway.log"
GW_PID=""

cleanup() {
  local rc=$?
  if [ -n "$GW_PID" ] && kill -0 "$GW_PID" 2>/dev/null; then
    kill "$GW_PID" 2>/dev/null || true
    for _ in $(seq 50); do
      kill -0 "$GW_PID" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$GW_PID" 2>/dev/null; then
      kill -9 "$GW_PID" 2>/dev/null || true
    fi
    wait "$GW_PID" 2>/dev/null || true
  fi
  rm -rf "$WORK"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

log "starting $GATEWAY_BIN demo"
"$GATEWAY_BIN" demo --listen 127.0.0.1:0 --admin-listen 127.0.0.1:0 \
  --endpoints-file "$ENDPOINTS" </dev/null >"$GW_LOG" 2>&1 &
GW_PID=$!

# The file counts once it exists and parses as JSON with a "dealers" list
# (guards against reading a half-written file).
ready=0
deadline=$((SECONDS + WAIT_SECS))
while [ "$SECONDS" -lt "$deadline" ]; do
  if ! kill -0 "$GW_PID" 2>/dev/null; then
    log "gateway exited before it was ready; its output:"
    tail -n 50 "$GW_LOG" >&2 || true
    exit 1
  fi
  if [ -s "$ENDPOINTS" ] && "$VENV/bin/python" -c \
      'import json,sys; d=json.load(open(sys.argv[1])); sys.exit(0 if isinstance(d.get("dealers"), list) else 1)' \
      "$ENDPOINTS" 2>/dev/null; then
    ready=1
    break
  fi
  sleep 0.2
done
if [ "$ready" != 1 ]; then
  log "no endpoints file after ${WAIT_SECS}s; gateway output:"
  tail -n 50 "$GW_LOG" >&2 || true
  exit 1
fi

# --- clients -----------------------------------------------------------------
# Both run against the same gateway process; the second runs even if the first failed.
run_client() {
  local name="$1"; shift
  local rc=0
  log "running the $name client"
  "$@" "$ENDPOINTS" || rc=$?
  if [ "$rc" -ne 0 ]; then
    log "$name client failed (exit $rc); last gateway output:"
    tail -n 30 "$GW_LOG" >&2 || true
  fi
  return "$rc"
}

py_status=0
run_client Python "$VENV/bin/python" "$HERE/python_client.py" || py_status=$?
js_status=0
run_client JavaScript "$NODE" "$JS_DIR/client.mjs" || js_status=$?

if [ "$py_status" -ne 0 ]; then exit "$py_status"; fi
exit "$js_status"
