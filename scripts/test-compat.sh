#!/usr/bin/env bash
# Check this provider against one Airflow version, as a user would install it:
#
#   scripts/test-compat.sh AIRFLOW_VERSION [PYTHON] [-- PYTEST_ARGS...]
#   scripts/test-compat.sh 3.2.0                 # Python 3.11 (python3.11, else python3)
#   scripts/test-compat.sh 3.3.2 python3.12
#   scripts/test-compat.sh 3.2.0 python3.11 -- -m airflow tests/airflow/test_import_smoke.py   # smoke only
#
# 1. builds the wheel and the sdist of this checkout (python -m build, in a private temporary directory);
# 2. makes a fresh venv with PYTHON and installs `apache-airflow==AIRFLOW_VERSION` and the *wheel* with its test
#    extra, pinned by constraints/airflow-AIRFLOW_VERSION[-pyX.Y].txt where the project has one for that Python
#    (Airflow's published constraints cannot be downloaded here; those files are the tested sets), otherwise
#    resolved by pip (said so);
# 3. unpacks the sdist, removes its copy of the package (so the installed wheel is what gets imported) and runs,
#    from there, the import smoke test and the Airflow DAG tests (`-m airflow tests/airflow`) against the
#    project's Slurm test cluster (started if needed, as for scripts/test.sh).
# The venv and the build are removed afterwards unless GPUSCHED_COMPAT_KEEP=1; GPUSCHED_COMPAT_FREEZE=FILE saves
# the venv's `pip freeze` (the start of a constraints file). Exit status: pytest's.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ $# -lt 1 ] || [[ "$1" == -* ]]; then
  sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
fi
version="$1"; shift
if ! [[ "$version" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]]; then
  echo "test-compat: AIRFLOW_VERSION must look like 3.3.2, got '$version'" >&2; exit 2
fi
py=""
if [ $# -gt 0 ] && [ "$1" != "--" ]; then py="$1"; shift; fi
[ $# -gt 0 ] && [ "$1" = "--" ] && shift
pytest_args=("$@")
[ ${#pytest_args[@]} -gt 0 ] || pytest_args=(-m airflow tests/airflow)
if [ -z "$py" ]; then py="$(command -v python3.11 || command -v python3)"; fi
command -v "$py" >/dev/null || { echo "test-compat: no interpreter '$py'" >&2; exit 2; }

say() { echo "[test-compat] $*" >&2; }
work="$(mktemp -d "${TMPDIR:-/tmp}/gpusched-compat-XXXXXX")"   # private (0700), never a fixed name
started_cluster=""
cleanup() {
  [ -z "$started_cluster" ] || bash "$here/scripts/slurm-cluster.sh" down
  if [ -n "${GPUSCHED_COMPAT_KEEP:-}" ]; then say "kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT

# the build front end: this checkout's .venv has it (test extra); otherwise a throw-away one
builder="$here/.venv/bin/python"
if ! "$builder" -c "import build" 2>/dev/null; then
  "$py" -m venv "$work/build-venv" && "$work/build-venv/bin/pip" install -q --disable-pip-version-check build
  builder="$work/build-venv/bin/python"
fi
say "building wheel and sdist"
"$builder" -m build --outdir "$work/dist" "$here" >"$work/build.log" 2>&1 || { tail -n 30 "$work/build.log" >&2; exit 1; }
wheel="$(ls "$work"/dist/*.whl)"; sdist="$(ls "$work"/dist/*.tar.gz)"

pyver="$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
say "fresh venv: Python $pyver ($py), apache-airflow==$version"
"$py" -m venv "$work/venv"
pip=("$work/venv/bin/python" -m pip install --disable-pip-version-check -q)
"${pip[@]}" --upgrade pip >"$work/pip.log" 2>&1
# constraints/airflow-VERSION[-pyX.Y].txt: a tested set says on its first line which Python it was made on
cflag=()
for constraints in "$here/constraints/airflow-$version-py$pyver.txt" "$here/constraints/airflow-$version.txt"; do
  if [ -f "$constraints" ] && head -n1 "$constraints" | grep -q "on Python $pyver\b"; then
    say "pinned by constraints/$(basename "$constraints")"; cflag=(-c "$constraints"); break
  fi
done
[ ${#cflag[@]} -gt 0 ] || say "no constraints for Airflow $version on Python $pyver: pip resolves the dependencies"
if ! "${pip[@]}" "${cflag[@]}" "apache-airflow==$version" "${wheel}[test]" >>"$work/pip.log" 2>&1; then
  grep -v "^WARNING: Location" "$work/pip.log" | tail -n 30 >&2; say "install failed"; exit 1
fi
"$work/venv/bin/python" -m pip freeze --disable-pip-version-check --exclude airflow-provider-gpusched 2>/dev/null \
  >"$work/freeze.txt"
[ -z "${GPUSCHED_COMPAT_FREEZE:-}" ] || cp "$work/freeze.txt" "$GPUSCHED_COMPAT_FREEZE"   # to make a constraints file
grep -iE '^(apache-airflow|pydantic|sqlalchemy|fastapi|cadwyn)[=-]' "$work/freeze.txt" | sed 's/^/    /' >&2

mkdir -p "$work/src"
tar -xzf "$sdist" -C "$work/src" --strip-components=1
rm -rf "$work/src/airflow_provider_gpusched"   # import the installed wheel, never this copy

export SLURM_CONF="$here/.slurm/etc/slurm.conf"   # the project's test cluster, as scripts/test.sh uses it
if ! sinfo -h >/dev/null 2>&1; then bash "$here/scripts/slurm-cluster.sh" up; started_cluster=1; fi
export PATH="$work/venv/bin:$PATH"
cd "$work/src"
export GPUSCHED_EXPECT_INSTALLED=1   # tests/conftest.py: fail unless the package comes from site-packages
say "pytest ${pytest_args[*]}"
set +e
"$work/venv/bin/python" -m pytest -p no:cacheprovider "${pytest_args[@]}"
rc=$?
set -e
say "Airflow $version, Python $pyver: pytest exit $rc"
exit $rc
