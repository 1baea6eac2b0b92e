#!/usr/bin/env bash
# The fast tier: every test that needs no Slurm cluster, Airflow database, stack, fleet or sshd (marker `fast`, set
# by tests/conftest.py from the fixtures each test uses), on parallel workers. 75-82 s on 2 cores (budget 60 s)
# (docs/development.md "Tiers"). Starts no service, and installs nothing once .venv exists (without one, it runs
# scripts/bootstrap.sh first). Arguments are passed on to pytest: `bash scripts/test-fast.sh -k lease -x`.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ ! -x "$REPO/.venv/bin/python" ]; then
  source "$REPO/scripts/bootstrap.sh"
fi
cd "$REPO"
export GPUSCHED_TIER=fast
# keep Python's bytecode caches (__pycache__, ignored by git) even where PYTHONDONTWRITEBYTECODE is set: each
# worker, and each process the tests start, would otherwise compile the same modules again (collection alone:
# 12 s of CPU per worker instead of 6)
unset PYTHONDONTWRITEBYTECODE
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" MKL_NUM_THREADS="${MKL_NUM_THREADS:-1}"  # the workers share the cores
# four workers on two cores: many tests wait on processes they start; the tests that import PyTorch in the test process
# are one unit of work (tests/conftest.py tier_unit), so one worker pays that import
exec "$REPO/.venv/bin/python" -m pytest -m fast -n "${GPUSCHED_WORKERS:-4}" --dist loadgroup -p no:cacheprovider "$@"
