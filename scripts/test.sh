#!/usr/bin/env bash
# The whole test suite: sets up (scripts/bootstrap.sh: .venv, and the system packages the tiers use), then runs
# pytest on parallel workers (pytest-xdist; arguments are passed on: `-n 0` runs in one process). Nothing is started
# here: the Slurm test cluster, sshd, the stack, the fleet and Chromium are started by the fixtures of the tests
# that need them (tests/conftest.py; each worker gets its own Slurm cluster) and stopped at the end, so
# `bash scripts/test.sh tests/core` starts none of them. docs/development.md "Tiers" has the tiers and their times.
set -euo pipefail
GPUSCHED_NEED_SSHD=1 source "$(dirname "${BASH_SOURCE[0]}")/bootstrap.sh"
cd "$REPO"
# keep Python's bytecode caches (__pycache__, ignored by git) even where PYTHONDONTWRITEBYTECODE is set: each
# worker, and each process the tests start, would otherwise compile the same modules again (collection alone:
# 12 s of CPU per worker instead of 6)
unset PYTHONDONTWRITEBYTECODE
# PyTorch and NumPy compute on one thread in each test process: four workers already share the cores, and OpenMP
# threads that spin waiting for a core they cannot get burn CPU the other workers need
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" MKL_NUM_THREADS="${MKL_NUM_THREADS:-1}"
# the tests that share one deployment (the stack tier, the fleet tier) stay on one worker (pytest_xdist_make_scheduler in
# tests/conftest.py); the slowest tests are printed at the end
# Nothing the tests start outlives the run (tests/services.py): what an earlier run left when it was killed outright
# (kill -9, a CI job's timeout: no trap ran) is stopped first, and what this run started is stopped when it exits,
# however it exits (failure, Ctrl-C, kill). The fixtures record what they start, owned by this shell.
export GPUSCHED_TEST_OWNER=$$
python -m tests.services reap
# the MLflow server's own venv (scripts/mlflow-venv.sh, a few minutes the first time) is made while the tests run;
# the tracking tests' fixture waits for it
venv_job=""
if [ -z "${GPUSCHED_NO_MLFLOW_VENV:-}" ]; then  # (set by tests/test_services.py's runs of this script)
  bash scripts/mlflow-venv.sh >/dev/null 2>&1 &
  venv_job=$!
fi
on_exit() {
  local rc=$?
  trap - EXIT INT TERM
  [ -z "$venv_job" ] || kill "$venv_job" 2>/dev/null || true
  python -m tests.services reap --owner "$GPUSCHED_TEST_OWNER" || true
  exit "$rc"
}
trap on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
python -m pytest -n "${GPUSCHED_WORKERS:-4}" --dist loadgroup --durations=30 "$@"
