#!/usr/bin/env bash
# A lab's GPU fleet on one machine (root): the head node's stack (scripts/stack.sh with the EdgeExecutor) and N GPU
# hosts, each a set of Linux namespaces (network with its own veth pair and address, hostname, process table)
# running Airflow's own Edge workers. Every host has its own lease directory and its own SIMULATED inventory.
#
#   scripts/fleet.sh up [--hosts N] [--sizes "2x24GiB 4x80GiB 1x48GiB"] [--executor edge|celery]
#                                         head stack + N hosts, all healthy (one inventory per host, in turn; a
#                                         mixed host: 24GiB,80GiB); celery: CeleryExecutor, redis-server broker
#   scripts/fleet.sh down                 stop every host (its whole namespace) and remove namespaces and links,
#                                         then the head stack (scripts/stack.sh down)
#   scripts/fleet.sh destroy              down, then delete the stack's database and directory
#   scripts/fleet.sh status               each host's workers, and the stack's health
#   scripts/fleet.sh kill-host NAME       SIGKILL every process of host NAME (a host that dies); its namespace stays
#   scripts/fleet.sh kill|start|logs COMPONENT   the head node's scheduler, triggerer, ... (as scripts/stack.sh)
#   scripts/fleet.sh start-host NAME      start host NAME's workers again (a host that comes back)
#   scripts/fleet.sh cut-host NAME        cut host NAME off the network (its link down); mend-host NAME: back
#   scripts/fleet.sh env                  the head's exports (see scripts/stack.sh env)
#
# Each host runs two Edge workers (queues from `gpusched fleet queues`): `gpu` lanes with one concurrency slot per
# GPU, and `idle` lanes (idle-class work) with as many, so idle work never takes the slots normal work needs. The
# head node runs one more worker for the `default` queue (tasks that need no GPU). Every worker is supervised: one
# that exits (an Edge worker gives up when the api-server is unreachable for a while) is started again 5 s later,
# so a host cut off the network rejoins by itself (docs/fleet.md has the systemd unit for real hosts).
# Hosts publish their GPUs and leases to $GPUSCHED_STACK_DIR/fleet/records ([gpusched] fleet_dir).
# Settings: those of scripts/stack.sh, GPUSCHED_FLEET_NET (the third octet of 10.203.X.0/24; default: a free one), and
# GPUSCHED_FLEET_SLOTS_PER_GPU (default 1; 2 with team quotas, so work within its quota can land where borrowed work
# holds the GPUs: docs/quotas.md). The Edge workers' poll and heartbeat intervals (1 s, 5 s) can be set through
# GPUSCHED_STACK_ENV (tests/fleet/conftest.py does).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$HERE/bootstrap.sh"
STACK="${GPUSCHED_STACK_DIR:-$REPO/.stack}"
FLEET="$STACK/fleet"
PORT="${GPUSCHED_STACK_PORT:-28080}"
DEFAULT_SIZES="2x24GiB 4x80GiB 1x48GiB"
NAMES=(gpu-a gpu-b gpu-c gpu-d gpu-e gpu-f gpu-g gpu-h gpu-i gpu-j)
say() { echo "[fleet] $*" >&2; }
die() { say "$*"; exit 1; }

[ "$(id -u)" = 0 ] || [ "${1:-}" = env ] || die "the fleet's namespaces need root (ip netns, unshare)"

net_octet() {
  if [ -f "$FLEET/net" ]; then cat "$FLEET/net"; return; fi
  local x="${GPUSCHED_FLEET_NET:-}"
  if [ -z "$x" ]; then
    for x in $(shuf -i 20-250 -n 40); do ip -4 addr | grep -q "10\.203\.$x\." || break; done
  fi
  mkdir -p "$FLEET" && echo "$x" >"$FLEET/net"
  echo "$x"
}

# host i (0-based): namespace gsf<X>h<i>, links gsf<X>h<i>a (head end, 10.203.X.4i+1/30) and ...b (host end, 4i+2)
ns_of() { echo "gsf$(net_octet)h$1"; }
index_of() { local i; for i in "${!NAMES[@]}"; do [ "${NAMES[$i]}" = "$1" ] && { echo "$i"; return; }; done; die "no host $1"; }
hosts_up() { cat "$FLEET/hosts" 2>/dev/null || true; }
# the number of GPUs of a simulated inventory spec (the spec passed as an argument, never as code)
gpu_count() {
  python -c 'import sys; from airflow_provider_gpusched.core.gpu.inventory import parse_simulation_spec as p
print(len(p(sys.argv[1])))' "$1"
}
export -f gpu_count  # the hosts' shells (start_host) use it too

host_env() {  # the exports of host $1 (index $2, inventory $3): the head's, then what is the host's own
  local name="$1" i="$2" size="$3" x gw dir
  x="$(net_octet)"; gw="10.203.$x.$((4 * i + 1))"; dir="$FLEET/$name"
  cat "$STACK/env.sh"
  cat <<EOF
export AIRFLOW_HOME="$dir/airflow"
export AIRFLOW__EDGE__API_URL="http://$gw:$PORT/edge_worker/v1/rpcapi"
export AIRFLOW__CORE__EXECUTION_API_SERVER_URL="http://$gw:$PORT/execution/"
export AIRFLOW__LOGGING__BASE_LOG_FOLDER="$dir/logs"
export AIRFLOW__GPUSCHED__GPU_STATE_DIR="$dir/gpu-leases"
# one run directory for every host (NFS on real hosts): work preempted on one host and relaunched on another
# resumes from the checkpoint it left in \$GPUSCHED_CHECKPOINT_DIR (docs/fleet.md)
export AIRFLOW__GPUSCHED__LOCAL_RUN_DIR="$FLEET/local-runs"
export AIRFLOW__GPUSCHED__SIMULATE_GPUS="$size"  # SIMULATED GPUs of this host
export GPUSCHED_SIMULATE_USAGE="$dir/simulated-usage.json"  # what processes of others hold (tests write it)
unset AIRFLOW__DATABASE__SQL_ALCHEMY_CONN  # a worker talks HTTP (and, with Celery, to the broker) only
EOF
  if [ "$(executor)" = celery ]; then
    local pw; pw="$(cat "$FLEET/redis/password")"
    echo "export AIRFLOW__CELERY__BROKER_URL='redis://:$pw@$gw:$(redis_port)/0'"
    echo "export AIRFLOW__CELERY__RESULT_BACKEND='redis://:$pw@$gw:$(redis_port)/1'"
  fi
}

executor() { cat "$FLEET/executor" 2>/dev/null || echo edge; }
redis_port() { echo "${GPUSCHED_FLEET_REDIS_PORT:-$((PORT + 100))}"; }

# Celery's broker (and result backend): Debian's redis-server on the head, on 127.0.0.1 and the head end of every
# host's veth pair, with a password in a private config file (never on a command line)
start_redis() {
  local addrs="127.0.0.1" i
  for ((i = 0; i < $1; i++)); do addrs+=" 10.203.$(net_octet).$((4 * i + 1))"; done
  command -v redis-server >/dev/null || die "the Celery layout needs a broker: apt-get install redis-server"
  mkdir -p "$FLEET/redis" && chmod 700 "$FLEET/redis"
  [ -f "$FLEET/redis/password" ] || (umask 077; python -c 'import secrets; print(secrets.token_hex(16))' >"$FLEET/redis/password")
  (umask 077; printf '%s\n' "port $(redis_port)" "bind $addrs" "requirepass $(cat "$FLEET/redis/password")" \
    'save ""' "appendonly no" "dir $FLEET/redis" "pidfile $FLEET/redis/redis.pid" "logfile $FLEET/redis/redis.log" \
    >"$FLEET/redis/redis.conf")
  setsid redis-server "$FLEET/redis/redis.conf" </dev/null >/dev/null 2>&1 &
  local k; for k in $(seq 1 50); do [ -s "$FLEET/redis/redis.pid" ] && break; sleep 0.1; done
  say "redis-server up on port $(redis_port) (${addrs// /, })"
}

stop_redis() {
  [ -f "$FLEET/redis/redis.pid" ] || return 0
  kill "$(cat "$FLEET/redis/redis.pid")" 2>/dev/null || true
  local k; for k in $(seq 1 50); do [ -f "$FLEET/redis/redis.pid" ] || break; sleep 0.1; done
  rm -rf -- "$FLEET/redis"
}

start_host() {
  local name="$1" i size ns
  i="$(index_of "$name")"; size="$(grep "^$name " "$FLEET/hosts" | cut -d' ' -f2)"; ns="$(ns_of "$i")"
  [ -n "$size" ] || die "$name is not a host of this fleet"
  [ -z "$(ip netns pids "$ns" 2>/dev/null)" ] || { say "$name already running"; return; }
  mkdir -p "$FLEET/$name"/{airflow,airflow-idle,logs,gpu-leases} "$FLEET/local-runs"
  # nothing of the host runs (checked above): a worker's pid file is a killed one's, and in the host's fresh pid
  # namespace its number may be the new worker's own, which the Edge worker then refuses to start on
  rm -f "$FLEET/$name"/airflow{,-idle}/airflow-edge-worker.pid
  chmod 700 "$FLEET/$name/gpu-leases"
  (umask 077; host_env "$name" "$i" "$size" >"$FLEET/$name/env.sh")
  # its own network (nsenter: `ip netns exec` would mount a fresh /sys), hostname and process table
  setsid nsenter --net="/run/netns/$ns" unshare --uts --pid --fork --mount-proc -- bash -c '
    name="$1"; dir="$2"; hostname "$name"; source "$dir/env.sh"
    gpus=$(gpu_count "$AIRFLOW__GPUSCHED__SIMULATE_GPUS")
    supervise() {  # run "$@" again 5 s after it exits, for ever; $1: its log, $2: its AIRFLOW_HOME
      local log="$1" home="$2"; shift 2
      while true; do
        rm -f "$home/airflow-edge-worker.pid"  # the exited worker'"'"'s: the next one would refuse to start on it
        AIRFLOW_HOME="$home" "$@" >>"$log" 2>&1
        echo "[fleet] $(date -u +%FT%TZ) worker exited (status $?); starting it again in 5 s" >>"$log"
        sleep 5
      done
    }
    if [ "$3" = celery ]; then
      # Celery has no heartbeat hook: the host publishes its record every 5 s itself
      supervise "$dir/logs/worker-gpu.log" "$dir/airflow" airflow celery worker -H "$name" -q "$(gpusched fleet queues --lane gpu)" -c "$gpus" --skip-serve-logs &
      supervise "$dir/logs/worker-idle.log" "$dir/airflow-idle" airflow celery worker -H "$name-idle" -q "$(gpusched fleet queues --lane idle)" -c "$gpus" --skip-serve-logs &
      while true; do gpusched fleet publish >/dev/null 2>>"$dir/logs/publish.log"; sleep 5; done &
    else
      supervise "$dir/logs/worker-gpu.log" "$dir/airflow" airflow edge worker -H "$name" -q "$(gpusched fleet queues --lane gpu)" -c "$((gpus * ${GPUSCHED_FLEET_SLOTS_PER_GPU:-1}))" &
      supervise "$dir/logs/worker-idle.log" "$dir/airflow-idle" airflow edge worker -H "$name-idle" -q "$(gpusched fleet queues --lane idle)" -c "$gpus" &
    fi
    wait' fleet-host "$name" "$FLEET/$name" "$(executor)" </dev/null >>"$FLEET/$name/logs/host.log" 2>&1 &
  say "$name started ($size SIMULATED, namespace $ns, logs ${FLEET#"$REPO"/}/$name/logs)"
}

kill_host() {
  local name="$1" ns pids
  ns="$(ns_of "$(index_of "$name")")"
  pids="$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ')"
  [ -n "$pids" ] && kill -9 $pids 2>/dev/null || true
  local k; for k in $(seq 1 50); do [ -z "$(ip netns pids "$ns" 2>/dev/null)" ] && break; sleep 0.1; done
  say "$name killed (${pids:-nothing was running})"
}

cut_host() {  # $1: host, $2: down|up (the head end of its link)
  local ns; ns="$(ns_of "$(index_of "$1")")"
  ip link set "${ns}a" "$2"
  say "$1 $([ "$2" = down ] && echo "cut off the network" || echo "back on the network")"
}

# the head node's own Edge worker: the `default` queue (tasks that need no GPU: a sweep's plan, a partition, ...)
# never takes a GPU host's slots. Its own session, so `down` reaches everything it forked.
start_head_worker() {
  [ -f "$FLEET/head.pid" ] && kill -0 "$(cat "$FLEET/head.pid")" 2>/dev/null && return
  mkdir -p "$FLEET/head/airflow" "$FLEET/head/logs"
  (
    # shellcheck disable=SC1091
    source "$STACK/env.sh"
    export AIRFLOW_HOME="$FLEET/head/airflow"
    # not a GPU host: it publishes no host record and has no GPUs
    unset AIRFLOW__EDGE__EXTENDED_SYSTEM_INFO_FUNCTION AIRFLOW__GPUSCHED__SIMULATE_GPUS GPUSCHED_SIMULATE_GPUS
    if [ "$(executor)" = celery ]; then
      setsid airflow celery worker -H head -q default -c "${GPUSCHED_FLEET_HEAD_SLOTS:-8}" --skip-serve-logs \
        >>"$FLEET/head/logs/worker-default.log" 2>&1 </dev/null &
    else
      setsid airflow edge worker -H head -q default -c "${GPUSCHED_FLEET_HEAD_SLOTS:-8}" \
        >>"$FLEET/head/logs/worker-default.log" 2>&1 </dev/null &
    fi
    echo $! >"$FLEET/head.pid"
  )
  say "head worker started (queue default, log ${FLEET#"$REPO"/}/head/logs/worker-default.log)"
}

stop_head_worker() {
  [ -f "$FLEET/head.pid" ] || return 0
  local pid; pid="$(cat "$FLEET/head.pid")"
  kill -9 -- "-$pid" 2>/dev/null || true
  rm -f "$FLEET/head.pid"
}

wait_workers() {  # every host's two workers and the head's registered with the api-server and idle or running
  local deadline=$((SECONDS + ${1:-180})) want=$(( $(hosts_up | wc -l) * 2 + 1 )) have=0
  # shellcheck disable=SC1091
  source "$STACK/env.sh"
  while [ $SECONDS -lt $deadline ]; do
    if [ "$(executor)" = celery ]; then
      have="$(python -c 'from airflow.providers.celery.executors.celery_executor_utils import app
print(len(app.control.ping(timeout=2) or []))' 2>/dev/null | tail -n 1)" || have=0
      [[ "$have" =~ ^[0-9]+$ ]] || have=0
      [ "$have" -ge "$want" ] && { say "$have Celery workers answer"; return 0; }
      sleep 2; continue
    fi
    have="$(python - <<'EOF'
from airflow.providers.edge3.models.edge_worker import EdgeWorkerModel, EdgeWorkerState
from airflow.utils.session import create_session
from sqlalchemy import select
with create_session() as s:
    print(sum(1 for w in s.scalars(select(EdgeWorkerModel)) if w.state in (EdgeWorkerState.IDLE, EdgeWorkerState.RUNNING)))
EOF
)" || have=0
    [ "$have" -ge "$want" ] && { say "$have workers up"; return 0; }
    sleep 2
  done
  die "only $have of $want $(executor) workers came up (logs: ${FLEET#"$REPO"/}/*/logs)"
}

up() {
  local hosts=3 sizes="$DEFAULT_SIZES" exe=edge
  while [ $# -gt 0 ]; do
    case "$1" in
      --hosts) hosts="$2"; shift 2 ;;
      --sizes) sizes="$2"; shift 2 ;;
      --executor) exe="$2"; shift 2 ;;
      *) die "unknown argument $1 (up [--hosts N] [--sizes \"2x24GiB 4x80GiB ...\"] [--executor edge|celery])" ;;
    esac
  done
  [[ "$hosts" =~ ^[0-9]+$ ]] && [ "$hosts" -ge 1 ] && [ "$hosts" -le ${#NAMES[@]} ] || die "--hosts: 1 to ${#NAMES[@]}, got $hosts"
  case "$exe" in
    edge) python -c "import airflow.providers.edge3" 2>/dev/null || die "the EdgeExecutor is not installed: pip install 'airflow-provider-gpusched[fleet]'" ;;
    celery) python -c "import airflow.providers.celery, redis" 2>/dev/null \
      || die "the CeleryExecutor is not installed: pip install apache-airflow-providers-celery redis (docs/fleet.md)" ;;
    *) die "--executor: edge or celery, got $exe" ;;
  esac
  mkdir -p "$FLEET/records" && chmod 700 "$FLEET" "$FLEET/records"
  echo "$exe" >"$FLEET/executor"
  rm -rf -- "$FLEET/records/hosts"  # an earlier fleet's hosts on this directory are not this one's
  local size_list size err
  read -r -a size_list <<<"$sizes"
  [ ${#size_list[@]} -ge 1 ] || die "--sizes: expected one simulated inventory per host, such as \"2x24GiB 4x80GiB\""
  for size in "${size_list[@]}"; do
    err="$(gpu_count "$size" 2>&1 >/dev/null)" \
      || die "--sizes: '$size' is not a simulated inventory such as 4x24GiB: ${err##*$'\n'}"
  done
  local x; x="$(net_octet)"
  # the hosts' networks first: the head's services (api-server, a Celery broker) listen on their ends
  : >"$FLEET/hosts.new"
  local i
  for ((i = 0; i < hosts; i++)); do
    size="${size_list[$((i % ${#size_list[@]}))]}"
    local name="${NAMES[$i]}" ns; ns="$(ns_of "$i")"
    echo "$name $size" >>"$FLEET/hosts.new"
    if ! ip netns list | grep -q "^$ns\b"; then
      ip netns add "$ns"
      ip link add "${ns}a" type veth peer name "${ns}b"
      ip link set "${ns}b" netns "$ns"
      ip addr add "10.203.$x.$((4 * i + 1))/30" dev "${ns}a"
      ip link set "${ns}a" up
      ip netns exec "$ns" ip addr add "10.203.$x.$((4 * i + 2))/30" dev "${ns}b"
      ip netns exec "$ns" ip link set "${ns}b" up
      ip netns exec "$ns" ip link set lo up
    fi
  done
  mv "$FLEET/hosts.new" "$FLEET/hosts"
  if [ "$exe" = celery ]; then
    start_redis "$hosts"
    local pw; pw="$(cat "$FLEET/redis/password")"
    GPUSCHED_STACK_API_HOST=0.0.0.0 GPUSCHED_STACK_ENV="${GPUSCHED_STACK_ENV:-}
export AIRFLOW__CORE__EXECUTOR=CeleryExecutor
export AIRFLOW__CELERY__BROKER_URL='redis://:$pw@127.0.0.1:$(redis_port)/0'
export AIRFLOW__CELERY__RESULT_BACKEND='redis://:$pw@127.0.0.1:$(redis_port)/1'
export AIRFLOW__GPUSCHED__FLEET_DIR=$FLEET/records" bash "$HERE/stack.sh" up
  else
    GPUSCHED_STACK_API_HOST=0.0.0.0 GPUSCHED_STACK_ENV="${GPUSCHED_STACK_ENV:-}
export AIRFLOW__CORE__EXECUTOR=airflow.providers.edge3.executors.EdgeExecutor
export AIRFLOW__EDGE__API_ENABLED=True
export AIRFLOW__EDGE__API_URL=http://127.0.0.1:$PORT/edge_worker/v1/rpcapi
export AIRFLOW__EDGE__JOB_POLL_INTERVAL=\${AIRFLOW__EDGE__JOB_POLL_INTERVAL:-1}
export AIRFLOW__EDGE__HEARTBEAT_INTERVAL=\${AIRFLOW__EDGE__HEARTBEAT_INTERVAL:-5}
export AIRFLOW__EDGE__PUSH_LOG_CHUNK_SIZE=65536
export AIRFLOW__EDGE__EXTENDED_SYSTEM_INFO_FUNCTION=airflow_provider_gpusched.fleet.edge_worker_sysinfo
export AIRFLOW__EDGE__AUTOMATIC_MAINTENANCE_ON=Error
export AIRFLOW__EDGE__AUTOMATIC_MAINTENANCE_EXIT=Info
export AIRFLOW__GPUSCHED__FLEET_DIR=$FLEET/records" bash "$HERE/stack.sh" up
  fi
  for ((i = 0; i < hosts; i++)); do start_host "${NAMES[$i]}"; done
  start_head_worker
  wait_workers 240
  # shellcheck disable=SC1091
  source "$STACK/env.sh"
  local k; for k in $(seq 1 30); do [ "$(ls "$FLEET/records/hosts" 2>/dev/null | wc -l)" -ge "$hosts" ] && break; sleep 1; done
  gpusched pools sync >"$STACK/logs/pools-sync.log" 2>&1 || { cat "$STACK/logs/pools-sync.log" >&2; die "gpusched pools sync failed"; }
  say "fleet up: $(hosts_up | tr '\n' ';' | sed 's/;$//; s/;/, /g') (UI http://127.0.0.1:$PORT)"
}

down() {
  local name i ns
  while read -r name _; do [ -n "$name" ] && kill_host "$name"; done < <(hosts_up)
  stop_head_worker
  stop_redis
  if [ -f "$FLEET/net" ]; then
    for ns in $(ip netns list | awk '{print $1}' | grep "^gsf$(cat "$FLEET/net")h" || true); do ip netns del "$ns"; done
  fi
  bash "$HERE/stack.sh" down
  rm -f "$FLEET/hosts" "$FLEET/net" "$FLEET/executor"
  say "down (links left: $(ip link show | grep -c "gsf" || true))"
}

status() {
  local name size rc=0 pids
  while read -r name size; do
    pids="$(ip netns pids "$(ns_of "$(index_of "$name")")" 2>/dev/null | wc -l)"
    echo "$name ($size SIMULATED): $pids process(es)"; [ "$pids" -gt 0 ] || rc=1
  done < <(hosts_up)
  bash "$HERE/stack.sh" status || rc=1
  return $rc
}

case "${1:-}" in
  up) shift; up "$@" ;;
  down) down ;;
  destroy) down; bash "$HERE/stack.sh" destroy ;;
  status) status ;;
  kill-host) [ -n "${2:-}" ] || die "kill-host NAME"; kill_host "$2" ;;
  start-host) [ -n "${2:-}" ] || die "start-host NAME"; start_host "$2" ;;
  cut-host) [ -n "${2:-}" ] || die "cut-host NAME"; cut_host "$2" down ;;
  mend-host) [ -n "${2:-}" ] || die "mend-host NAME"; cut_host "$2" up ;;
  env) bash "$HERE/stack.sh" env ;;
  kill|start|logs) bash "$HERE/stack.sh" "$@" ;;  # the head node's components (scheduler, triggerer, ...)
  *) sed -n '2,28p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
