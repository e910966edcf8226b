# Shared setup of the interop checks (sourced by tests/interop/run.sh and
# tests/interop/mcp/run.sh): the Python venv from `$REQS`, the Node.js client's node_modules
# from `$JS_DIR/package-lock.json` (each installed again only when its lock changed), and the
# gateway binary. The caller sets VENV, REQS, JS_DIR, PYTHON, NODE, NPM, GATEWAY_BIN and log();
# `interop_setup SDK` names the npm package whose presence shows node_modules is installed.

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
