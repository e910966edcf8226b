# Shared setup and process handling of the interop checks (sourced by tests/interop/run.sh and
# tests/interop/mcp/run.sh).
#
# Sourcing it reads the settings both checks take from the environment (AAP_GATEWAY_BIN,
# INTEROP_PYTHON, INTEROP_NODE, INTEROP_NPM, INTEROP_WAIT_SECS; see the callers' headers).
# The caller sets VENV, REQS, JS_DIR and log(), then:
#   - `interop_setup SDK`: the Python venv from `$REQS`, the Node.js client's node_modules from
#     `$JS_DIR/package-lock.json` (each installed again only when its lock changed), and the
#     gateway binary; SDK names the npm package whose presence shows node_modules is installed;
#   - `interop_workdir NAME`: a scratch folder `$WORK`, removed on exit together with every
#     gateway still running (the EXIT/INT/TERM traps);
#   - `start_gateway`, `stop_gateway` and `run_client` (each documented below).

GATEWAY_BIN="${AAP_GATEWAY_BIN:-target/release/aap-gateway}"
PYTHON="${INTEROP_PYTHON:-python3}"
NODE="${INTEROP_NODE:-node}"
NPM="${INTEROP_NPM:-npm}"
WAIT_SECS="${INTEROP_WAIT_SECS:-30}"
if [ "$WAIT_SECS" -gt 30 ] 2>/dev/null; then WAIT_SECS=30; fi
GW_PIDS=()

interop_setup() {
  local sdk="$1"
  # --- venv (re-installed only when requirements.txt changed) ------------------------------
  local stamp="$VENV/.requirements.sha256"
  local want
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

  # --- node_modules (npm ci of package-lock.json, again only when the lock changed) ---------
  local tool
  for tool in "$NODE" "$NPM"; do
    command -v "$tool" >/dev/null 2>&1 || { log "$tool not found (install Node.js >= 20 and npm)"; exit 1; }
  done
  "$NODE" -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 20 ? 0 : 1)' \
    || { log "$sdk needs Node.js >= 20; $NODE is $("$NODE" --version)"; exit 1; }
  local js_stamp="$JS_DIR/node_modules/.package-lock.sha256"
  local js_want
  js_want="$(sha256sum "$JS_DIR/package-lock.json" | cut -d' ' -f1)"
  if [ ! -f "$JS_DIR/node_modules/$sdk/package.json" ] || [ ! -f "$js_stamp" ] \
      || [ "$(cat "$js_stamp")" != "$js_want" ]; then
    log "installing $JS_DIR/package-lock.json into $JS_DIR/node_modules (npm ci)"
    (cd "$JS_DIR" && "$NPM" ci --ignore-scripts --no-audit --no-fund --loglevel=error)
    echo "$js_want" > "$js_stamp"
  fi

  # --- gateway ---------------------------------------------------------------------------------
  if [ ! -x "$GATEWAY_BIN" ]; then
    log "gateway binary not found at $GATEWAY_BIN (build it: cargo build --release, or set AAP_GATEWAY_BIN)"
    exit 1
  fi
}

# interop_workdir NAME: a fresh scratch folder in $WORK (under $TMPDIR, named after NAME); on
# exit, however it comes, every gateway started is stopped and the folder removed, and the
# script's status kept.
interop_workdir() {
  WORK="$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX")"
  trap interop_cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
}

interop_cleanup() {
  local rc=$?
  local pid
  for pid in "${GW_PIDS[@]}"; do stop_gateway "$pid"; done
  rm -rf "$WORK"
  exit "$rc"
}

# stop_gateway PID: SIGTERM, up to 5 s for it to end, then SIGKILL; reaps it.
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

# start_gateway ENDPOINTS LOG [VAR=VALUE ...]: a demo process with those environment overrides,
# ready once its endpoints file exists and parses as JSON with a "dealers" list (guards against
# reading a half-written file), within WAIT_SECS. Its pid is the last of GW_PIDS. Returns 1 (with
# the gateway's last output on stderr) when it exits early or never gets ready.
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

# run_client NAME LOG COMMAND...: runs one client; on failure shows the gateway's last output.
# Returns the client's status.
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
