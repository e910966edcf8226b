#!/usr/bin/env bash
# Prepares what tests/deploy.rs needs to render the Helm chart: a virtualenv with
# helm-python-sdk (Helm's Go engine in a wheel; no helm binary). Idempotent; reinstalls when
# requirements.txt changes. Without it, `cargo test --test deploy` skips the chart rendering
# (and fails under CI=true).
#
# Environment:
#   DEPLOY_CHECK_VENV    virtualenv directory (default target/deploy-venv; tests/deploy.rs
#                        looks there, or at $DEPLOY_CHECK_PYTHON)
#   DEPLOY_CHECK_PYTHON_BASE  interpreter that creates the venv, >= 3.10 (default python3)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
VENV="${DEPLOY_CHECK_VENV:-target/deploy-venv}"
REQS="deploy/check/requirements.txt"
stamp="$VENV/.requirements.sha256"
want="$(sha256sum "$REQS" | cut -d' ' -f1)"
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv --help >/dev/null 2>&1 || { apt-get update -q && apt-get install -y -q python3-venv; }
  mkdir -p "$(dirname "$VENV")"
  "${DEPLOY_CHECK_PYTHON_BASE:-python3}" -m venv "$VENV"
fi
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  "$VENV/bin/python" -m pip install --disable-pip-version-check -q -r "$REQS"
  echo "$want" > "$stamp"
fi
"$VENV/bin/python" -c 'import helm_python as h; print("deploy check: helm", h.helm_sdk_version(), "via helm-python-sdk")'
