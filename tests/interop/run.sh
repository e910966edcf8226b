#!/usr/bin/env bash
# Interop check: the official Python A2A SDK (a2a-sdk, A2A v1.0) against
# `aap-gateway demo`.
#
# Environment:
#   AAP_GATEWAY_BIN   gateway binary        (default target/release/aap-gateway)
#   INTEROP_VENV      virtualenv directory  (default target/interop-venv)
#   INTEROP_PYTHON    interpreter for the venv, >= 3.10 (default python3)
#   INTEROP_WAIT_SECS max wait for the endpoints file (default 30)
#
# Exit status: the Python client's (0 = all checks passed); 1 on setup failure.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
cd "$ROOT"

VENV="${INTEROP_VENV:-target/interop-venv}"
GATEWAY_BIN="${AAP_GATEWAY_BIN:-target/release/aap-gateway}"
PYTHON="${INTEROP_PYTHON:-python3}"
WAIT_SECS="${INTEROP_WAIT_SECS:-30}"
if [ "$WAIT_SECS" -gt 30 ] 2>/dev/null; then WAIT_SECS=30; fi
REQS="$HERE/requirements.txt"

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

# --- client ------------------------------------------------------------------
set +e
"$VENV/bin/python" "$HERE/python_client.py" "$ENDPOINTS"
status=$?
set -e
if [ "$status" -ne 0 ]; then
  log "client failed (exit $status); last gateway output:"
  tail -n 30 "$GW_LOG" >&2 || true
fi
exit "$status"
