#!/usr/bin/env bash
# The MLflow tracking server the tracking tests start (tests/conftest.py mlflow_server) lives in a venv of its own,
# .venv-mlflow: MLflow cannot be installed next to Airflow 3.3's tested dependency set (it wants cachetools<8,
# Airflow's constraints pin 8). Exactly the packages of constraints/mlflow-server.txt (mlflow 3.17.2, SQLite backend),
# installed without their dependency resolution (the model flavours' packages are left out: see that file) and without
# compiling them (the server compiles the few modules it imports).
# Idempotent and safe to run twice at once (a flock): scripts/test.sh starts it in the background before pytest,
# and the fixture runs it again, which waits for the first and then finds the venv made.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$REPO/.venv-mlflow"
want="$(sha256sum "$REPO/constraints/mlflow-server.txt" | cut -d' ' -f1)"
exec 9>"$REPO/.venv-mlflow.lock"
flock 9
if [ "$(cat "$VENV/.ready" 2>/dev/null)" = "$want" ]; then exit 0; fi
rm -rf "$VENV"
"${PYTHON:-python3}" -m venv "$VENV"
"$VENV/bin/python" -m pip install --disable-pip-version-check -q --no-compile --no-deps -r "$REPO/constraints/mlflow-server.txt" \
  >"$REPO/.venv-mlflow.log" 2>&1 || { tail -n 30 "$REPO/.venv-mlflow.log" >&2; exit 1; }
echo "$want" >"$VENV/.ready"
