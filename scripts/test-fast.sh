#!/usr/bin/env bash
# The fast tier: every test that needs no Slurm cluster, Airflow database, stack, fleet or sshd (marker `fast`, set
# by tests/conftest.py from the fixtures each test uses), on parallel workers, within 60 s on 2 cores
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
# the fuzz tests try 100 inputs each here, 300 in the whole suite (tests/fuzzing.py; derandomized, so the same first
# 100): 4-5 s of the tier's CPU
export GPUSCHED_FUZZ_EXAMPLES="${GPUSCHED_FUZZ_EXAMPLES:-100}"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" MKL_NUM_THREADS="${MKL_NUM_THREADS:-1}"  # the workers share the cores
# three workers per core (6 on 2 cores, at most 16): many tests wait on the processes they start, and more workers fill
# those waits (on 2 cores, 2026-11-28: 4 workers 59-63 s, 5: 59-61 s, 6: 58-59 s); the tests that share a costly
# start (PyTorch imported in the test process, the partitioner's cases) are one unit of work each (tests/conftest.py
# tier_unit), so one worker pays that start
cores="$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)"  # nproc itself answers OMP_NUM_THREADS where it is set
workers="${GPUSCHED_WORKERS:-$(( cores * 3 > 16 ? 16 : cores * 3 ))}"
# the tests' own files (tmp_path: trial folders, leases, logs) in memory where /dev/shm is a tmpfs: the tier creates
# tens of thousands of small files, and creating one costs about 0.7 ms on this VM's disk and microseconds there
# (12 s of CPU of the tier's 128). A folder of this run's own (mktemp: 0700, a new name), removed at the end unless
# tests failed (then kept, its path printed). GPUSCHED_FAST_TMP=disk keeps pytest's default (/tmp).
# every test under tests/stack and tests/fleet needs its deployment (each module is marked so: tests/test_tiers.py
# checks it): not collected at all, so that no worker imports their modules and clients (0.14 s of CPU per process)
args=(--ignore=tests/stack --ignore=tests/fleet)
if [ "${GPUSCHED_FAST_TMP:-shm}" = shm ] && [ "$(stat -f -c %T /dev/shm 2>/dev/null)" = tmpfs ] && [ -w /dev/shm ]; then
  tmp="$(mktemp -d /dev/shm/gpusched-fast.XXXXXX)"
  args+=(--basetemp "$tmp/t")
  # on any exit (a pass, a stop, a signal) the folder goes, unless tests failed (pytest's status 1)
  trap 'rc=$?; if [ "$rc" = 1 ]; then echo "test-fast.sh: the failed tests'"'"' files are kept in $tmp/t (in memory: rm -rf $tmp when done)" >&2; else rm -rf "$tmp"; fi' EXIT
fi
"$REPO/.venv/bin/python" -m pytest -m fast -n "$workers" --dist loadgroup -p no:cacheprovider "${args[@]}" "$@"
