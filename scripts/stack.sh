#!/usr/bin/env bash
# A real Airflow 3 deployment on this machine, for trying the provider as deployed and for the end-to-end tests:
# PostgreSQL (Debian's packages; its own data directory, port and socket directory, nothing of a system cluster
# touched), then api-server, scheduler (LocalExecutor), dag-processor and triggerer as background processes,
# against the project's two-node Slurm test cluster and this host's GPUs (simulated ones where NVML finds none).
#
#   scripts/stack.sh up                start everything (idempotent) and wait until each component is healthy
#   scripts/stack.sh down              stop exactly what `up` started, by pid, then PostgreSQL (and the Slurm
#                                      test cluster if `up` started it); its data is kept (it says where)
#   scripts/stack.sh destroy           down, then delete the stack's database and directory (a clean start)
#   scripts/stack.sh status            each component's pid and health; exit 1 if one is down
#   scripts/stack.sh logs [NAME]       the last lines of each log (or NAME's: api-server, scheduler, ...)
#   scripts/stack.sh env               print the exports that point `airflow`/`gpusched` at this stack
#   scripts/stack.sh start NAME        start one component again (after `kill NAME`)
#   scripts/stack.sh kill NAME [SIG]   send SIG (default TERM) to one component's process group
#
# Everything lives in $GPUSCHED_STACK_DIR (default <checkout>/.stack): pid files, logs, AIRFLOW_HOME, lease
# directory, Slurm output, and the settings it was started with (settings.env: every later command, in any shell,
# uses them; `up` on a running stack applies changed ones, restarting the Airflow components, and refuses other
# ports, saying what to run). Settings: GPUSCHED_STACK_PORT (api-server, default 28080), GPUSCHED_STACK_PG_PORT
# (default 55432), GPUSCHED_STACK_EXTRA_DAGS (a second DAG folder, added as its own DAG bundle),
# GPUSCHED_STACK_PARALLELISM (LocalExecutor slots, default 48), GPUSCHED_STACK_API_HOST (the api-server's
# listening address, default 127.0.0.1), GPUSCHED_STACK_ENV (extra export lines; scripts/fleet.sh sets the
# EdgeExecutor through it). The UI user is `admin`; its password is
# generated on first `up` and kept in .stack/admin-password (0600).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/bootstrap.sh"
STACK="${GPUSCHED_STACK_DIR:-$REPO/.stack}"
# the Slurm test cluster the stack submits to: scripts/slurm-cluster.sh's (its root: $GPUSCHED_SLURM_ROOT, else .slurm)
SLURM_ROOT="$(realpath -m "${GPUSCHED_SLURM_ROOT:-$REPO/.slurm}")"
COMPONENTS=(api-server scheduler dag-processor triggerer)
say() { echo "[stack] $*" >&2; }
die() { say "$*"; exit 1; }

# The settings a stack runs with are recorded by `up` in $STACK/settings.env; every later command (in any shell)
# reads them, so `status`, `logs`, `down` and `env` talk to the stack that runs, whatever this shell exports. A
# setting exported here overrides the recorded one for `up` only, which applies it or refuses (see apply_or_refuse).
SETTINGS=(PORT PG_PORT API_HOST EXTRA_DAGS PARALLELISM ENV)
declare -A DEFAULTS=([PORT]=28080 [PG_PORT]=55432 [API_HOST]=127.0.0.1 [EXTRA_DAGS]="" [PARALLELISM]=48 [ENV]="")
declare -A RECORDED=() ASKED=()
if [ -f "$STACK/settings.env" ]; then
  while IFS='=' read -r key value; do
    case " ${SETTINGS[*]} " in *" $key "*) RECORDED[$key]="$(printf '%b' "$value")" ;; esac
  done <"$STACK/settings.env"
fi
for key in "${SETTINGS[@]}"; do
  var="GPUSCHED_STACK_$key"
  if [ -n "${!var+x}" ]; then ASKED[$key]="${!var}"; fi
done
if [ -n "${ASKED[EXTRA_DAGS]:-}" ]; then  # recorded as an absolute path: a relative one means the same anywhere
  ASKED[EXTRA_DAGS]="$(cd "${ASKED[EXTRA_DAGS]}" 2>/dev/null && pwd)" \
    || die "GPUSCHED_STACK_EXTRA_DAGS=$GPUSCHED_STACK_EXTRA_DAGS: not a directory"
fi
# the value a setting has: for `up`, what this shell asks, else what the stack was started with, else the default;
# for every other command, what the stack was started with
setting() {
  local key="$1"
  if [ "${CMD:-}" = up ] && [ -n "${ASKED[$key]+x}" ]; then printf '%s' "${ASKED[$key]}"
  elif [ -n "${RECORDED[$key]+x}" ]; then printf '%s' "${RECORDED[$key]}"
  elif [ -n "${ASKED[$key]+x}" ]; then printf '%s' "${ASKED[$key]}"
  else printf '%s' "${DEFAULTS[$key]}"; fi
}
CMD="${1:-}"
PORT="$(setting PORT)"
PG_PORT="$(setting PG_PORT)"
# the address the api-server listens on (scripts/fleet.sh: 0.0.0.0, so GPU hosts in namespaces reach it)
API_HOST="$(setting API_HOST)"
EXTRA_DAGS="$(setting EXTRA_DAGS)"
PARALLELISM="$(setting PARALLELISM)"
STACK_ENV="$(setting ENV)"

record_settings() {
  local key value
  (umask 077; for key in "${SETTINGS[@]}"; do
     value="$(setting "$key")"
     printf '%s=%s\n' "$key" "$(printf '%s' "$value" | sed -e 's/\\/\\\\/g' -e ':a;N;$!ba;s/\n/\\n/g')"
   done >"$STACK/settings.env")
}

pg_bin() {
  local d
  for d in /usr/lib/postgresql/*/bin; do [ -x "$d/pg_ctl" ] && { echo "$d"; return; }; done
  return 1
}

ensure_postgres_installed() {
  pg_bin >/dev/null && return
  [ "$(id -u)" = 0 ] || die "PostgreSQL server binaries not found; install them (as root: apt-get install -y postgresql)"
  say "installing postgresql with apt-get"
  # GPUSCHED_APT_NO_START: the package must not start the system cluster; this stack runs its own
  GPUSCHED_APT_NO_START=1 bash "$(dirname "${BASH_SOURCE[0]}")/apt-install.sh" postgresql
}

# PostgreSQL refuses to run as root: as root it runs as the `postgres` system user, in a private directory that
# user owns under /var/tmp (.stack itself is 0700: it holds the passwords), named in .stack/pgdata.
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }

pgbase() {
  if [ -f "$STACK/pgdata" ] && [ -d "$(cat "$STACK/pgdata")" ]; then cat "$STACK/pgdata"; return; fi
  local dir="$STACK/pg"
  if [ "$(id -u)" = 0 ]; then
    dir="$(mktemp -d /var/tmp/gpusched-stack-pg.XXXXXX)"
    chown postgres: "$dir"
  fi
  mkdir -p "$dir" && chmod 700 "$dir"
  echo "$dir" >"$STACK/pgdata"
  echo "$dir"
}

start_postgres() {
  local bin base data
  bin="$(pg_bin)"
  base="$(pgbase)"
  data="$base/data"
  if [ ! -f "$data/PG_VERSION" ]; then
    say "initdb $data (port $PG_PORT)"
    [ -f "$STACK/pg-password" ] || (umask 077; python3 -c 'import secrets; print(secrets.token_hex(16))' >"$STACK/pg-password")
    local pwfile="$base/pw"
    (umask 077; cp "$STACK/pg-password" "$pwfile")
    if [ "$(id -u)" = 0 ]; then chown postgres: "$pwfile"; fi
    as_pg "$bin/initdb" -D "$data" -U airflow --pwfile="$pwfile" --auth-local=scram-sha-256 \
      --auth-host=scram-sha-256 -E UTF8 >"$STACK/logs/initdb.log" 2>&1 || { cat "$STACK/logs/initdb.log"; die "initdb failed"; }
    rm -f "$pwfile"
  fi
  if ! as_pg "$bin/pg_ctl" -D "$data" status >/dev/null 2>&1; then
    as_pg "$bin/pg_ctl" -D "$data" -w -t 60 -l "$data/postgres.log" \
      -o "-p $PG_PORT -k $data -c listen_addresses=127.0.0.1 -c max_connections=300 -c fsync=off" start >/dev/null \
      || { tail -20 "$data/postgres.log" >&2; die "PostgreSQL did not start (log: $data/postgres.log)"; }
  fi
  export PGPASSWORD
  PGPASSWORD="$(cat "$STACK/pg-password")"
  if ! psql -h 127.0.0.1 -p "$PG_PORT" -U airflow -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname='airflow'" \
      | grep -q 1; then
    createdb -h 127.0.0.1 -p "$PG_PORT" -U airflow airflow
  fi
}

stop_postgres() {
  [ -f "$STACK/pgdata" ] || return 0
  local data bin
  data="$(cat "$STACK/pgdata")/data"
  bin="$(pg_bin)" || return 0
  [ -f "$data/postmaster.pid" ] && as_pg "$bin/pg_ctl" -D "$data" -m fast -w stop >/dev/null 2>&1 || true
}

write_env() {
  local pw; pw="$(cat "$STACK/pg-password")"
  [ -f "$STACK/admin-password" ] || (umask 077; python3 -c 'import secrets; print(secrets.token_urlsafe(12))' >"$STACK/admin-password")
  [ -f "$STACK/jwt-secret" ] || (umask 077; python3 -c 'import secrets; print(secrets.token_hex(32))' >"$STACK/jwt-secret")
  (umask 077; printf '{"admin": "%s"}\n' "$(cat "$STACK/admin-password")" >"$STACK/airflow/passwords.json")
  local simulate=""
  if ! python -c "import pynvml; pynvml.nvmlInit()" >/dev/null 2>&1; then simulate="${AIRFLOW__GPUSCHED__SIMULATE_GPUS:-4x24GiB}"; fi
  local bundles='[{"name": "dags-folder", "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle", "kwargs": {}}'
  if [ -n "$EXTRA_DAGS" ]; then
    bundles+=", {\"name\": \"extra-dags\", \"classpath\": \"airflow.dag_processing.bundles.local.LocalDagBundle\", \"kwargs\": {\"path\": \"$EXTRA_DAGS\"}}"
  fi
  bundles+="]"
  (umask 077; cat >"$STACK/env.sh" <<EOF
# Generated by scripts/stack.sh: source it to point airflow and gpusched at this stack.
export PATH="$REPO/.venv/bin:\$PATH"
export AIRFLOW_HOME="$STACK/airflow"
export AIRFLOW__CORE__DAGS_FOLDER="$REPO/dags"
export AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST='$bundles'
export AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL=5
export AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL=30  # Airflow's default; 10 cost a fifth of the CPU in a busy run
# a GPU box's cores are busy with training: a DAG file's parse that outlasts Airflow's 30/50 s marks its DAGs stale
# (they vanish from triggering until the next parse), so parses get more time here
export AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT=120
export AIRFLOW__DAG_PROCESSOR__DAG_FILE_PROCESSOR_TIMEOUT=180
export AIRFLOW__DAG_PROCESSOR__STALE_DAG_THRESHOLD=180
export AIRFLOW__CORE__LOAD_EXAMPLES=False
export AIRFLOW__CORE__EXECUTOR=LocalExecutor
export AIRFLOW__CORE__PARALLELISM=$PARALLELISM
export AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG=256
export AIRFLOW__DATABASE__SQL_ALCHEMY_CONN="postgresql+psycopg2://airflow:$pw@127.0.0.1:$PG_PORT/airflow"
export AIRFLOW__DATABASE__SQL_ALCHEMY_POOL_SIZE=10
export AIRFLOW__CORE__EXECUTION_API_SERVER_URL="http://127.0.0.1:$PORT/execution/"
export AIRFLOW__API__BASE_URL="http://127.0.0.1:$PORT"
export AIRFLOW__API__PORT=$PORT
export AIRFLOW__API__HOST=$API_HOST
export AIRFLOW__API__WORKERS=1
export AIRFLOW__API_AUTH__JWT_SECRET="$(cat "$STACK/jwt-secret")"
export AIRFLOW__CORE__AUTH_MANAGER=airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager
export AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS=admin:admin
export AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE="$STACK/airflow/passwords.json"
export AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC=2
export AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT=60
export AIRFLOW__TRIGGERER__CAPACITY=1000
export AIRFLOW__GPUSCHED__GPU_STATE_DIR="$STACK/gpu-leases"
export AIRFLOW__GPUSCHED__LOCAL_RUN_DIR="$STACK/local-runs"
export AIRFLOW__GPUSCHED__SLURM_OUTPUT_DIR="$STACK/slurm-out"
export AIRFLOW__GPUSCHED__SWEEP_RESULTS_ROOT="$STACK/sweeps"
export AIRFLOW__GPUSCHED__SLURM_POLL_INTERVAL=\${AIRFLOW__GPUSCHED__SLURM_POLL_INTERVAL:-2}
export AIRFLOW__GPUSCHED__GPU_POLL_INTERVAL=\${AIRFLOW__GPUSCHED__GPU_POLL_INTERVAL:-1}
export SLURM_CONF="$SLURM_ROOT/etc/slurm.conf"
EOF
  if [ -n "$simulate" ]; then
    echo "export AIRFLOW__GPUSCHED__SIMULATE_GPUS=$simulate  # no NVML here: SIMULATED GPUs" >>"$STACK/env.sh"
    # what the simulated GPUs' driver reports besides our leases (utilisation, others' processes): absent = nothing
    echo "export GPUSCHED_SIMULATE_USAGE=\"$STACK/simulated-usage.json\"" >>"$STACK/env.sh"
  fi
  [ -n "$STACK_ENV" ] && printf '%s\n' "$STACK_ENV" >>"$STACK/env.sh"
  true)
}

pid_of() { cat "$STACK/pids/$1.pid" 2>/dev/null || true; }
# running: the pid exists and is not a zombie (an unreaped exited process, where PID 1 does not reap)
alive() {
  local p; p="$(pid_of "$1")"
  [ -n "$p" ] && kill -0 "$p" 2>/dev/null && [ "$(sed 's/.*) //' "/proc/$p/stat" 2>/dev/null | cut -d' ' -f1)" != Z ]
}

start_component() {
  local name="$1"
  case " ${COMPONENTS[*]} " in *" $name "*) ;; *) die "unknown component $name (one of: ${COMPONENTS[*]})";; esac
  alive "$name" && { say "$name already running (pid $(pid_of "$name"))"; return; }
  # shellcheck disable=SC1091
  source "$STACK/env.sh"
  local args=("$name")
  [ "$name" = api-server ] && args+=(-p "$PORT" -H "$API_HOST")
  # its own session (process group = pid): `down` and `kill` reach the component and everything it forked
  setsid airflow "${args[@]}" >>"$STACK/logs/$name.log" 2>&1 </dev/null &
  echo $! >"$STACK/pids/$name.pid"
  say "$name started (pid $!, log ${STACK#"$REPO"/}/logs/$name.log)"
}

health_json() { curl -fsS --max-time 5 "http://127.0.0.1:$PORT/api/v2/monitor/health" 2>/dev/null; }

# 'healthy' when the api-server answers and the scheduler, triggerer and dag processor have sent a recent heartbeat
component_health() {
  health_json | python -c '
import json, sys
h = json.load(sys.stdin)
bad = [k for k in ("metadatabase", "scheduler", "triggerer", "dag_processor") if (h.get(k) or {}).get("status") != "healthy"]
print("healthy" if not bad else "unhealthy: " + ", ".join(bad))' 2>/dev/null || echo "api-server not answering"
}

wait_healthy() {
  local deadline=$((SECONDS + ${1:-180})) state=""
  while [ $SECONDS -lt $deadline ]; do
    for c in "${COMPONENTS[@]}"; do alive "$c" || { tail -30 "$STACK/logs/$c.log" >&2; die "$c exited (log ${STACK#"$REPO"/}/logs/$c.log)"; }; done
    state="$(component_health)"
    [ "$state" = healthy ] && return 0
    sleep 2
  done
  die "not healthy after ${1:-180}s: $state"
}

# a port this stack needs that something else already listens on (another checkout's stack, say): refuse, naming it,
# rather than have this stack's clients talk to that one
port_taken_by_other() {
  local port="$1" component="$2"
  [ -n "$component" ] && alive "$component" && return 1
  python3 -c 'import socket, sys
s = socket.socket()
try:
    s.connect(("127.0.0.1", int(sys.argv[1]))); sys.exit(0)
except OSError:
    sys.exit(1)' "$port"
}

# `up` on a stack that runs: the settings this shell asks for that differ from those it runs with are applied
# (EXTRA_DAGS, PARALLELISM, API_HOST, ENV: env.sh is written anew and the Airflow components restarted) or, for its
# ports, refused with what to run. Nothing changed: nothing is restarted.
apply_or_refuse() {
  local key changed=() ports=()
  for key in "${SETTINGS[@]}"; do
    [ -n "${ASKED[$key]+x}" ] || continue
    [ "${ASKED[$key]}" = "${RECORDED[$key]-${DEFAULTS[$key]}}" ] && continue
    case "$key" in PORT|PG_PORT) ports+=("$key") ;; *) changed+=("$key") ;; esac
  done
  if [ ${#ports[@]} -gt 0 ]; then
    for key in "${ports[@]}"; do
      say "GPUSCHED_STACK_$key=${ASKED[$key]} differs from the running stack's ${RECORDED[$key]-${DEFAULTS[$key]}}"
    done
    die "the stack in ${STACK#"$REPO"/} runs on other ports; to move it: bash scripts/stack.sh down, then up with the new ports (its data is kept)"
  fi
  [ ${#changed[@]} -gt 0 ] || return 0
  for key in "${changed[@]}"; do
    say "GPUSCHED_STACK_$key changed: '${RECORDED[$key]-${DEFAULTS[$key]}}' -> '${ASKED[$key]}'"
  done
  say "applying: restarting ${COMPONENTS[*]} with the new settings"
  stop_components
}

up() {
  local running=""
  for c in "${COMPONENTS[@]}"; do alive "$c" && running=1; done
  [ -z "$running" ] || apply_or_refuse
  if port_taken_by_other "$PORT" api-server; then
    die "port $PORT is already in use by another program (another checkout's stack? see: ss -ltnp 'sport = :$PORT'); stop it or pick another port (GPUSCHED_STACK_PORT)"
  fi
  command -v curl >/dev/null || apt_install curl
  ensure_postgres_installed
  mkdir -p "$STACK"/{pids,logs,airflow,gpu-leases,local-runs,slurm-out,sweeps}
  chmod 700 "$STACK" "$STACK/gpu-leases"
  local t0=$SECONDS
  if ! SLURM_CONF="$SLURM_ROOT/etc/slurm.conf" sinfo -h >/dev/null 2>&1; then
    GPUSCHED_SLURM_ROOT="$SLURM_ROOT" bash "$REPO/scripts/slurm-cluster.sh" up
    echo "$SLURM_ROOT" >"$STACK/started-slurm"  # `down` stops this cluster again; one that was already up is left alone
  fi
  start_postgres
  write_env
  record_settings
  # shellcheck disable=SC1091
  source "$STACK/env.sh"
  airflow db migrate >"$STACK/logs/db-migrate.log" 2>&1 || { tail -30 "$STACK/logs/db-migrate.log" >&2; die "airflow db migrate failed"; }
  gpusched pools sync >"$STACK/logs/pools-sync.log" 2>&1 || { cat "$STACK/logs/pools-sync.log" >&2; die "gpusched pools sync failed"; }
  for c in "${COMPONENTS[@]}"; do start_component "$c"; done
  wait_healthy 240
  say "up in $((SECONDS - t0))s: UI http://127.0.0.1:$PORT (user admin, password in ${STACK#"$REPO"/}/admin-password)"
}

kill_component() {
  local name="$1" sig="${2:-TERM}" p i
  p="$(pid_of "$name")"
  [ -n "$p" ] || { say "$name: no pid file"; return 0; }
  kill -"$sig" -- "-$p" 2>/dev/null || kill -"$sig" "$p" 2>/dev/null || true
  # SIGKILL: return once it is gone, so that `start NAME` right after it does not find it still there (on a busy
  # host it outlived a one-second pause, `start` said "already running", and the stack was left without it; with the
  # disk and both cores busy, a killed scheduler once took over 10 s to end). Not gone in 120 s: an error, not a
  # `start` that finds it "already running" and leaves the stack without it once it does end.
  if [ "$sig" = KILL ] || [ "$sig" = 9 ]; then
    local deadline=$((SECONDS + 120))
    while [ $SECONDS -lt $deadline ]; do alive "$name" || return 0; sleep 0.1; done
    die "$name (pid $p) still running 120 s after SIGKILL (state: $(sed 's/.*) //' "/proc/$p/stat" 2>/dev/null | cut -d' ' -f1))"
  fi
}

# the Airflow components: SIGTERM to each process group, 20 s to end, then SIGKILL
stop_components() {
  local c p i
  for c in "${COMPONENTS[@]}"; do kill_component "$c" TERM; done
  for c in "${COMPONENTS[@]}"; do
    p="$(pid_of "$c")"
    [ -n "$p" ] || continue
    for i in $(seq 1 40); do alive "$c" || break; sleep 0.5; done
    kill -KILL -- "-$p" 2>/dev/null || true
    rm -f "$STACK/pids/$c.pid"
  done
}

down() {
  stop_components
  stop_postgres
  if [ -f "$STACK/started-slurm" ]; then
    GPUSCHED_SLURM_ROOT="$(head -n 1 "$STACK/started-slurm")" bash "$REPO/scripts/slurm-cluster.sh" down
    rm -f "$STACK/started-slurm"
  fi
  say "down"
  if [ -f "$STACK/pgdata" ] && [ -z "${DESTROYING:-}" ]; then
    say "kept: its PostgreSQL data in $(cat "$STACK/pgdata") and its files in $STACK (the next up starts from them;" \
        "bash scripts/stack.sh destroy removes both)"
  fi
}

destroy() {
  DESTROYING=1 down
  local base=""
  [ -f "$STACK/pgdata" ] && base="$(cat "$STACK/pgdata")"
  case "$base" in  # only a directory that `up` made
    /var/tmp/gpusched-stack-pg.*|"$STACK/pg") rm -rf -- "$base" ;;
    "") ;;
    *) say "leaving $base alone (not a directory this script creates)" ;;
  esac
  if [ -f "$STACK/env.sh" ] || [ -d "$STACK/pids" ]; then rm -rf -- "$STACK"; fi  # never a directory not ours
  say "destroyed ${STACK#"$REPO"/}"
}

status() {
  local c rc=0
  [ -f "$STACK/settings.env" ] || { echo "no stack in $STACK (bash scripts/stack.sh up starts one)"; return 1; }
  echo "stack: $STACK, api-server http://127.0.0.1:$PORT, PostgreSQL port $PG_PORT${EXTRA_DAGS:+, extra DAGs $EXTRA_DAGS}"
  for c in "${COMPONENTS[@]}"; do
    if alive "$c"; then echo "$c: running (pid $(pid_of "$c"))"; else echo "$c: stopped"; rc=1; fi
  done
  echo "health: $(component_health)"
  [ "$(component_health)" = healthy ] || rc=1
  return $rc
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  destroy) destroy ;;
  status) status ;;
  env) cat "$STACK/env.sh" ;;
  logs) if [ -n "${2:-}" ]; then tail -n "${LINES:-60}" "$STACK/logs/$2.log"; else for c in "${COMPONENTS[@]}"; do echo "== $c"; tail -n 15 "$STACK/logs/$c.log"; done; fi ;;
  start) [ -n "${2:-}" ] || die "start NAME"; start_component "$2"; wait_healthy 120 ;;
  kill) [ -n "${2:-}" ] || die "kill NAME [SIGNAL]"; kill_component "$2" "${3:-TERM}" ;;
  *) sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
