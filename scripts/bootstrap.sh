# Sourced by scripts/demo.sh and scripts/test.sh: make this checkout runnable on a fresh Debian machine.
#  - system packages: python3-venv (and, for the tests, openssh and chromium), installed with apt-get when missing;
#    Slurm and munge are installed by scripts/slurm-cluster.sh, which use_test_cluster calls
#    (needs root; as another user, install them yourself first)
#  - .venv with this package and its dev extra: the tests, the examples (PyTorch: the CPU build where that is the
#    one pip finds) and the code checks, not Ray; pinned by constraints/airflow-3.3.2.txt
# Re-running is cheap: nothing is reinstalled unless pyproject.toml or the constraints changed.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-python3}"
CONSTRAINTS="$REPO/constraints/airflow-3.3.2.txt"

say() { echo "[gpusched] $*" >&2; }

apt_install() {
  if [ "$(id -u)" != 0 ]; then
    say "missing system packages: $*; install them (as root: apt-get install -y $*) and re-run"
    exit 2
  fi
  say "apt-get install $*"
  # (no package's own service started: the tests run their own munged, PostgreSQL, sshd...)
  GPUSCHED_APT_NO_START=1 bash "$REPO/scripts/apt-install.sh" "$@"
  export GPUSCHED_APT_UPDATED=1
}

need=()
command -v "$PY" >/dev/null || need+=(python3)
if command -v "$PY" >/dev/null && ! "$PY" -c "import ensurepip, venv" >/dev/null 2>&1; then need+=(python3-venv); fi
if [ -n "${GPUSCHED_NEED_SSHD:-}" ]; then  # the tests drive Slurm through a real ssh login host too
  [ -x /usr/sbin/sshd ] || need+=(openssh-server)
  command -v ssh >/dev/null || need+=(openssh-client)
  [ -x /usr/bin/chromium ] || need+=(chromium)  # the UI tests drive Debian's headless Chromium (Playwright)
  # the team-quota test's Slurm cluster with real accounting (tests/slurm/test_quota_accounts.py): installed here,
  # before the test workers start, so that no two apt-get runs race
  command -v slurmdbd >/dev/null || need+=(slurmdbd)
  command -v mariadbd >/dev/null || need+=(mariadb-server)
  # and what every worker's Slurm cluster, the stack and the Kubernetes nodes install otherwise, one worker while the
  # others wait for the lock (scripts/apt-install.sh)
  for p in slurm-wlm slurmrestd slurm-wlm-jwt-plugin munge postgresql; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
  done
fi
[ ${#need[@]} -eq 0 ] || apt_install "${need[@]}"

if [ ! -x "$REPO/.venv/bin/python" ]; then
  say "creating .venv"
  "$PY" -m venv "$REPO/.venv"
fi
stamp="$REPO/.venv/.gpusched-installed"
want="$(cat "$REPO/pyproject.toml" "$CONSTRAINTS" | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  say "installing airflow-provider-gpusched and Apache Airflow 3.3.2 into .venv (a few minutes the first time)"
  log="$REPO/.venv/pip-install.log"
  if ! { "$REPO/.venv/bin/python" -m pip install --disable-pip-version-check --upgrade pip \
         && "$REPO/.venv/bin/python" -m pip install --disable-pip-version-check -c "$CONSTRAINTS" -e "$REPO[dev]"; \
       } >"$log" 2>&1; then
    tail -n 40 "$log" >&2
    say "pip install failed; full log in $log"
    exit 1
  fi
  echo "$want" >"$stamp"
fi
# The UI's frontend project (ui/): Node (Debian's nodejs and npm where there is none; 18.19 or newer) and its packages
# from ui/package-lock.json (npm ci; again only when the lock file changed). The tests run its unit tests, type check
# and build (tests/ui); the package itself needs none of it: the built bundle is committed.
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then apt_install nodejs npm; fi
ui_stamp="$REPO/ui/node_modules/.gpusched-lock"
ui_want="$(sha256sum "$REPO/ui/package-lock.json" | cut -d' ' -f1)"
if [ "$(cat "$ui_stamp" 2>/dev/null)" != "$ui_want" ]; then
  say "installing the UI's npm packages (npm ci in ui/)"
  if ! (cd "$REPO/ui" && npm ci --no-audit --no-fund --loglevel=error >"$REPO/.venv/npm-ci.log" 2>&1); then
    tail -n 40 "$REPO/.venv/npm-ci.log" >&2
    say "npm ci failed; full log in $REPO/.venv/npm-ci.log"
    exit 1
  fi
  echo "$ui_want" >"$ui_stamp"
fi
# The editable install's metadata lives in .venv; setuptools also leaves a copy in the checkout, which a process
# started there (sys.path '') sees as a second distribution: Airflow's Task SDK then stops loading plugins at
# the duplicate (the OpenLineage provider's listener among them). Never keep it.
rm -rf -- "$REPO/airflow_provider_gpusched.egg-info"
export PATH="$REPO/.venv/bin:$PATH"

# Start the project's two-node Slurm test cluster unless it is already up, stop it on exit if we started it.
use_test_cluster() {
  GPUSCHED_STARTED_CLUSTER=""
  if ! SLURM_CONF="$REPO/.slurm/etc/slurm.conf" sinfo -h >/dev/null 2>&1; then
    bash "$REPO/scripts/slurm-cluster.sh" up
    GPUSCHED_STARTED_CLUSTER=1
  fi
  trap '[ -z "$GPUSCHED_STARTED_CLUSTER" ] || bash "$REPO/scripts/slurm-cluster.sh" down' EXIT
  export SLURM_CONF="$REPO/.slurm/etc/slurm.conf"
}
