#!/usr/bin/env bash
# Bring up / tear down a throw-away Slurm cluster of several compute nodes for tests and the demo (root).
#
#   scripts/slurm-cluster.sh up           install (if missing) and start munge, slurmctld and every node's slurmd
#   scripts/slurm-cluster.sh down         cancel jobs, stop only the daemons this script started, remove the nodes'
#                                         namespaces, bridge and links (nothing is left behind)
#   scripts/slurm-cluster.sh status       sinfo per node, daemon pids
#   scripts/slurm-cluster.sh env          print the `export SLURM_CONF=...` line for clients
#   scripts/slurm-cluster.sh nodes        the compute nodes' names, one a line
#   scripts/slurm-cluster.sh kill-node N  node N dies: its network link goes down, then every process of it (slurmd,
#                                         its jobs' steps) is SIGKILLed
#   scripts/slurm-cluster.sh start-node N start node N's slurmd again (a node that comes back; ReturnToService=2)
#
# The cluster: $GPUSCHED_SLURM_NODES compute nodes (default 2) named n1, n2, ... Each is a real slurmd in its own
# network namespace (a veth pair on a bridge, 10.204.X.0/24, X chosen free), UTS namespace (its own hostname) and
# mount namespace (its own /etc/hosts naming every node, as a cluster's DNS would: MASTER_ADDR=n1 resolves on n2),
# with its own spool directory and log. Per node: 8 CPUs, 16000 MB, 4 fake GPUs as GRES (symlinks to /dev/null, so
# jobs get CUDA_VISIBLE_DEVICES), features fakegpu and rack<i> (for --constraint). slurmctld runs on this host, at the bridge's address. Partitions:
#   batch (default, PriorityTier=10, never preempted)
# Slurm's REST API: slurmrestd (Debian's package) with auth/jwt, on the first free port from 6820 at the controller's
# address, run as user nobody; its URL is in $root/rest-url, the JWT key in $root/etc/jwt_hs256.key (0600). A token:
# `scontrol token username=USER lifespan=SECONDS`.
#   idle  (PriorityTier=1, PreemptMode=REQUEUE: preempted and requeued by batch jobs)
# No slurmdbd by default: final job states go to a jobcomp file that `sacct -c` reads. With
# GPUSCHED_SLURM_ACCOUNTING=1 the cluster has real accounting: Debian's MariaDB (its own data directory and port under
# $root) and slurmdbd, AccountingStorageEnforce=associations,limits,qos, the cluster registered with sacctmgr; accounts,
# QOS and their limits (GrpTRES=gres/gpu=N) then work as on a site's cluster (tests/slurm/test_quota_accounts.py). A node that stops answering is DOWN after
# SlurmdTimeout=20 s (its jobs end NODE_FAIL, or are requeued) and comes back when its slurmd registers again.
# State lives under $GPUSCHED_SLURM_ROOT (default: <repo>/.slurm). The filesystem is shared by all nodes, as a
# cluster's shared home is. Needs root (SlurmUser=root, namespaces). docs/slurm.md has the layout and why.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
root="$(realpath -m "${GPUSCHED_SLURM_ROOT:-$here/.slurm}")"
conf="$root/etc/slurm.conf"
# this cluster's munged (key, socket, pid, log): one directory per cluster root
munge_dir="/run/gpusched-munge-$(printf '%s' "$root" | sha256sum | cut -c1-12)"
# the copy of its slurm.conf that slurmrestd (user nobody) reads
rest_dir="/run/gpusched-rest-$(printf '%s' "$root" | sha256sum | cut -c1-12)"
ctld_port="${GPUSCHED_SLURMCTLD_PORT:-}"  # empty: the first free port from 6817 (another cluster may hold 6817)
slurmd_port="${GPUSCHED_SLURMD_PORT:-6818}"
node_count="${GPUSCHED_SLURM_NODES:-2}"
accounting="${GPUSCHED_SLURM_ACCOUNTING:-0}"
log() { echo "[slurm-cluster] $*" >&2; }

need_root() {
  if [ "$(id -u)" != 0 ]; then
    log "must run as root (Slurm runs with SlurmUser=root, the nodes are namespaces); try: sudo $0 $*"
    exit 2
  fi
}

case "$node_count" in
  [1-9]) ;;
  *) log "GPUSCHED_SLURM_NODES=$node_count: expected a number of compute nodes from 1 to 9"; exit 2 ;;
esac

install_packages() {
  if [ "$accounting" = 1 ] && ! { command -v slurmdbd >/dev/null && command -v mariadbd >/dev/null; }; then
    log "installing slurmdbd and mariadb-server with apt-get (GPUSCHED_SLURM_ACCOUNTING=1)"
    export DEBIAN_FRONTEND=noninteractive
    bash "$here/scripts/apt-install.sh" slurmdbd mariadb-server
  fi
  if command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null \
     && command -v ip >/dev/null && command -v nsenter >/dev/null && command -v slurmrestd >/dev/null \
     && ls /usr/lib/*/slurm-wlm/auth_jwt.so >/dev/null 2>&1; then
    return
  fi
  log "installing slurm-wlm, slurmrestd, its JWT plugin, munge and iproute2 with apt-get"
  bash "$here/scripts/apt-install.sh" slurm-wlm slurmrestd slurm-wlm-jwt-plugin munge iproute2 util-linux
}

# -- the nodes' network: one bridge on this host, one veth pair and one network namespace per node --------------
# The subnet 10.204.X.0/24 (X free on this machine) is chosen once per cluster and kept in $root/net; names carry it
# (gss<X>br, gss<X>n<i>, gss<X>n<i>h: at most 15 characters) so that down removes only what this cluster made.
net_octet() {
  if [ -f "$root/net" ]; then cat "$root/net"; return; fi
  local x="${GPUSCHED_SLURM_NET:-}"
  if [ -z "$x" ]; then
    for x in $(shuf -i 20-250 -n 60); do
      ip -4 addr | grep -q "10\.204\.$x\." || ip link show "gss${x}br" >/dev/null 2>&1 || break
    done
  fi
  case "$x" in ''|*[!0-9]*) log "GPUSCHED_SLURM_NET=$x: expected a number from 1 to 254"; exit 2 ;; esac
  mkdir -p "$root" && echo "$x" >"$root/net"
  echo "$x"
}
head_addr() { echo "10.204.$(net_octet).1"; }
node_addr() { echo "10.204.$(net_octet).$(( $1 + 10 ))"; }   # node i (1-based) at .11, .12, ...
node_ns() { echo "gss$(net_octet)n$1"; }
node_names() { local i; for ((i = 1; i <= node_count; i++)); do echo "n$i"; done; }
index_of() {
  case "$1" in n[1-9]) [ "${1#n}" -le "$node_count" ] && { echo "${1#n}"; return; } ;; esac
  log "no node $1 in this cluster (nodes: $(node_names | tr '\n' ' '))"; exit 2
}

make_network() {
  local x br i ns
  x="$(net_octet)"; br="gss${x}br"
  if ! ip link show "$br" >/dev/null 2>&1; then
    ip link add "$br" type bridge
    ip addr add "$(head_addr)/24" dev "$br"
    ip link set "$br" up
  fi
  for ((i = 1; i <= node_count; i++)); do
    ns="$(node_ns "$i")"
    [ -e "/run/netns/$ns" ] && continue
    ip netns add "$ns"
    ip link add "${ns}h" type veth peer name "${ns}"
    ip link set "${ns}" netns "$ns"
    ip link set "${ns}h" master "$br"
    ip link set "${ns}h" up
    ip netns exec "$ns" ip addr add "$(node_addr "$i")/24" dev "$ns"
    ip netns exec "$ns" ip link set "$ns" up
    ip netns exec "$ns" ip link set lo up
  done
}

remove_network() {
  local x i
  [ -f "$root/net" ] || return 0
  x="$(cat "$root/net")"
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^gss${x}n[0-9]*$" || true); do
    pids="$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ')"
    [ -z "$pids" ] || kill -9 $pids 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
  done
  # exactly this cluster's names: a prefix match ("^gss20") would take another cluster's links (gss200br, gss201n1h)
  for link in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1 | grep -E "^gss${x}(br|n[0-9]+h?)$" || true); do
    ip link del "$link" 2>/dev/null || true
  done
  rm -f "$root/net"
}

write_config() {
  local host nodes
  host="$(hostname -s)"
  mkdir -p "$root"/{etc,state,log,run,dev}
  for i in 0 1 2 3; do ln -sfn /dev/null "$root/dev/gpu$i"; done
  nodes="n[1-$node_count]"
  [ "$node_count" -gt 1 ] || nodes="n1"
  {
    cat <<CONF
# Generated by scripts/slurm-cluster.sh: a test cluster of $node_count compute node(s) in Linux namespaces.
ClusterName=gpusched
SlurmctldHost=${host}($(head_addr))
SlurmctldPort=${ctld_port}
SlurmdPort=${slurmd_port}
SlurmUser=root
AuthType=auth/munge
# cred_expire: a requeued job (a time-limit chain's next segment) starts again 21 s after its requeue, not 121 s
AuthInfo=socket=$munge_dir/munge.socket,cred_expire=20
# slurmrestd's users: JWTs signed with this cluster's key (scontrol token)
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=${root}/etc/jwt_hs256.key
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2,bf_interval=2
GresTypes=gpu
SlurmdParameters=config_overrides
StateSaveLocation=${root}/state
SlurmdSpoolDir=${root}/spool/%n
SlurmctldPidFile=${root}/run/slurmctld.pid
SlurmdPidFile=${root}/run/slurmd.%n.pid
SlurmctldLogFile=${root}/log/slurmctld.log
SlurmdLogFile=${root}/log/slurmd.%n.log
$(accounting_lines)
JobCompType=jobcomp/filetxt
JobCompLoc=${root}/log/jobcomp.txt
MinJobAge=300
KillWait=5
InactiveLimit=0
SlurmdTimeout=20
ReturnToService=2
PriorityType=priority/multifactor
PriorityWeightPartition=10000
PriorityWeightAge=0
PriorityWeightFairshare=0
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
CONF
    for ((i = 1; i <= node_count; i++)); do
      echo "NodeName=n$i NodeAddr=$(node_addr "$i") CPUs=8 RealMemory=16000 Gres=gpu:4 Features=fakegpu,rack$i State=UNKNOWN"
    done
    echo "PartitionName=batch Nodes=ALL Default=YES MaxTime=INFINITE State=UP PriorityTier=10 PreemptMode=OFF"
    echo "PartitionName=idle Nodes=ALL Default=NO MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=REQUEUE"
  } >"$conf"
  echo "NodeName=${nodes} Name=gpu File=${root}/dev/gpu[0-3]" >"$root/etc/gres.conf"
  # what every node's /etc/hosts says (a cluster's DNS): the nodes, and this host by its name
  {
    echo "127.0.0.1 localhost"
    echo "$(head_addr) ${host}"
    for ((i = 1; i <= node_count; i++)); do echo "$(node_addr "$i") n$i"; done
  } >"$root/etc/hosts"
  echo "export SLURM_CONF=$conf" >"$root/env.sh"
  if [ ! -s "$root/etc/jwt_hs256.key" ]; then
    (umask 077; dd if=/dev/urandom of="$root/etc/jwt_hs256.key" bs=32 count=1 status=none)
  fi
  chmod 600 "$root/etc/jwt_hs256.key"
}

# slurmrestd: SLURM_JWT=daemon makes it speak auth/jwt to slurmctld (without it every token is refused: "Rejecting
# thread config token"); -u nobody: it never runs as root; its pid file is ours (it writes none)
start_rest() {
  local port
  pid_alive "$root/run/slurmrestd.pid" && return
  port="${GPUSCHED_SLURMRESTD_PORT:-$(free_port 6820)}"
  # user nobody reads the config after dropping root: a copy where it can (the checkout may be in a closed home)
  install -d -m 0755 "$rest_dir"
  install -m 0644 "$conf" "$rest_dir/slurm.conf"
  SLURM_JWT=daemon setsid slurmrestd -f "$rest_dir/slurm.conf" -a rest_auth/jwt -s openapi/v0.0.38 -u nobody -g nogroup \
    "$(head_addr):$port" >"$root/log/slurmrestd.log" 2>&1 </dev/null &
  echo $! >"$root/run/slurmrestd.pid"
  for _ in $(seq 100); do
    if (exec 3<>"/dev/tcp/$(head_addr)/$port") 2>/dev/null; then
      echo "http://$(head_addr):$port" >"$root/rest-url"
      return
    fi
    pid_alive "$root/run/slurmrestd.pid" || break
    sleep 0.1
  done
  log "slurmrestd did not come up; see $root/log/slurmrestd.log"
  tail -n 20 "$root/log/slurmrestd.log" >&2 || true
  return 1
}

pid_alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

# -- accounting (GPUSCHED_SLURM_ACCOUNTING=1): MariaDB and slurmdbd of this cluster's own, on ports of their own ---
accounting_lines() {
  if [ "$accounting" != 1 ]; then echo "AccountingStorageType=accounting_storage/none"; return; fi
  cat <<ACCT
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=$(head_addr)
AccountingStoragePort=$(cat "$root/dbd-port")
AccountingStoragePass=$munge_dir/munge.socket
AccountingStorageEnforce=associations,limits,qos
AccountingStorageTRES=gres/gpu
ACCT
}

start_accounting() {
  [ "$accounting" = 1 ] || return 0
  local db="$root/mysql" sock="$root/run/mysqld.sock" dbport pass
  [ -f "$root/db-port" ] || free_port 13306 >"$root/db-port"
  [ -f "$root/dbd-port" ] || free_port 6819 >"$root/dbd-port"
  dbport="$(cat "$root/db-port")"
  if [ ! -d "$db/mysql" ]; then
    mkdir -p "$db"
    mariadb-install-db --user=root --datadir="$db" --auth-root-authentication-method=socket >"$root/log/mariadb-install.log" 2>&1
  fi
  if ! pid_alive "$root/run/mariadb.pid"; then
    setsid mariadbd --user=root --datadir="$db" --socket="$sock" --port="$dbport" --bind-address=127.0.0.1 \
      --pid-file="$root/run/mariadb.pid" --log-error="$root/log/mariadb.log" --skip-name-resolve </dev/null >/dev/null 2>&1 &
    for _ in $(seq 150); do mariadb --socket="$sock" -e "select 1" >/dev/null 2>&1 && break; sleep 0.2; done
  fi
  if [ ! -s "$root/etc/db-password" ]; then
    (umask 077; head -c 18 /dev/urandom | base64 | tr -d '/+=' >"$root/etc/db-password")
  fi
  pass="$(cat "$root/etc/db-password")"
  mariadb --socket="$sock" -e "CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '$pass';
    ALTER USER 'slurm'@'127.0.0.1' IDENTIFIED BY '$pass';
    GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1'; FLUSH PRIVILEGES;" \
    || { log "MariaDB did not come up; see $root/log/mariadb.log"; tail -n 20 "$root/log/mariadb.log" >&2; return 1; }
  (umask 077; cat >"$root/etc/slurmdbd.conf" <<DBD
AuthType=auth/munge
AuthInfo=socket=$munge_dir/munge.socket
DbdHost=localhost
DbdAddr=$(head_addr)
DbdPort=$(cat "$root/dbd-port")
SlurmUser=root
PidFile=$root/run/slurmdbd.pid
LogFile=$root/log/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$dbport
StorageUser=slurm
StoragePass=$pass
StorageLoc=slurm_acct_db
DBD
  )
  chmod 600 "$root/etc/slurmdbd.conf"
  if ! pid_alive "$root/run/slurmdbd.pid"; then
    SLURM_CONF="$conf" slurmdbd  # reads slurmdbd.conf beside slurm.conf
  fi
  for _ in $(seq 150); do
    (exec 3<>"/dev/tcp/$(head_addr)/$(cat "$root/dbd-port")") 2>/dev/null && break
    sleep 0.2
  done
  # the cluster must exist in the database before slurmctld registers (associations are enforced)
  for _ in $(seq 10); do
    SLURM_CONF="$conf" sacctmgr -i -n list cluster format=cluster 2>/dev/null | grep -qw gpusched && return 0
    SLURM_CONF="$conf" sacctmgr -i add cluster gpusched >/dev/null 2>&1 || true
    sleep 0.2
  done
  log "slurmdbd did not take the cluster; see $root/log/slurmdbd.log"; tail -n 20 "$root/log/slurmdbd.log" >&2
  return 1
}

# this cluster's own munged: its own key, socket, pid and log in $munge_dir, so that two clusters on one machine
# (two checkouts) never share one and `down` stops only its own (slurm.conf's AuthInfo names the socket, for the
# daemons and for every client command that reads the config)
munge_ok() { munge --socket="$munge_dir/munge.socket" -n 2>/dev/null | unmunge --socket="$munge_dir/munge.socket" >/dev/null 2>&1; }

start_munge() {
  if pid_alive "$munge_dir/munged.pid" && munge_ok; then
    return  # ours, from an earlier `up`
  fi
  # under /run, not under the checkout: munged runs as user munge, which may not reach a checkout in a closed home
  install -d -o munge -g munge -m 0755 "$munge_dir"  # clients of every user reach the socket; the key stays 0600
  if [ ! -f "$munge_dir/munge.key" ]; then
    if command -v mungekey >/dev/null; then mungekey --create --keyfile="$munge_dir/munge.key"
    else (umask 077; dd if=/dev/urandom bs=1 count=1024 of="$munge_dir/munge.key" 2>/dev/null); fi
    chown munge:munge "$munge_dir/munge.key"
    chmod 600 "$munge_dir/munge.key"
  fi
  rm -f "$munge_dir/munge.socket" "$munge_dir/munge.socket.lock"  # a killed munged's
  runuser -u munge -- /usr/sbin/munged --socket="$munge_dir/munge.socket" --key-file="$munge_dir/munge.key" \
    --pid-file="$munge_dir/munged.pid" --log-file="$munge_dir/munged.log" --seed-file="$munge_dir/munged.seed"
  for _ in $(seq 50); do munge_ok && return; sleep 0.1; done
  log "munged did not come up (see $munge_dir/munged.log)"; exit 1
}

# node i's slurmd: in the node's network namespace (nsenter: `ip netns exec` would mount a fresh /sys, and slurmd
# then fails with "No filesystem mounted on /sys/fs/cgroup"), with its own hostname and its own /etc/hosts
start_node() {
  local i="$1" name="n$1"
  pid_alive "$root/run/slurmd.$name.pid" && return
  ip link set "$(node_ns "$i")h" up 2>/dev/null || true   # back on the network after a kill-node
  mkdir -p "$root/spool/$name"
  nsenter --net="/run/netns/$(node_ns "$i")" unshare --uts --mount -- sh -c \
    'mount --bind "$1" /etc/hosts && hostname "$2" && exec slurmd -f "$3" -N "$2"' \
    slurm-node "$root/etc/hosts" "$name" "$conf"
}

# every node answers with one of these states (a node left DOWN by an earlier run comes back: ReturnToService=2)
# the first TCP port from $1 that nothing listens on here (this namespace): a second cluster on the machine (another
# checkout's tests) must not find the first one's slurmctld on its port and talk to it
free_port() {
  local used=" " f local_ state rest p
  for f in /proc/net/tcp /proc/net/tcp6; do
    [ -r "$f" ] || continue
    while read -r _ local_ _ state rest; do
      [ "$state" = 0A ] && used+="$((16#${local_##*:})) "
    done <"$f"
  done
  for ((p = $1; p < $1 + 200; p++)); do
    case "$used" in *" $p "*) ;; *) echo "$p"; return ;; esac
  done
  echo "$1"
}

wait_ready() {
  export SLURM_CONF="$conf"
  local states="" i
  for i in $(seq 200); do
    # ours died (its port taken?) or never wrote its pid file: never report another cluster's nodes as ours
    if { [ -f "$root/run/slurmctld.pid" ] || [ "$i" -gt 50 ]; } && ! pid_alive "$root/run/slurmctld.pid"; then
      log "slurmctld is not running; logs in $root/log"
      tail -n 20 "$root/log/slurmctld.log" >&2 || true
      return 1
    fi
    states="$(sinfo -h -N -o '%N %T' 2>/dev/null | sort -u || true)"
    if [ "$(echo "$states" | grep -cE ' (idle|mixed|allocated)$' || true)" -ge "$node_count" ]; then
      return 0
    fi
    sleep 0.2
  done
  log "cluster not ready after 40 s (nodes: ${states:-none}); logs in $root/log"
  tail -n 20 "$root/log/slurmctld.log" "$root"/log/slurmd.*.log >&2 || true
  return 1
}

all_running() {
  pid_alive "$root/run/slurmctld.pid" || return 1
  pid_alive "$root/run/slurmrestd.pid" || return 1
  local i
  for ((i = 1; i <= node_count; i++)); do pid_alive "$root/run/slurmd.n$i.pid" || return 1; done
}

up() {
  need_root up
  install_packages
  if all_running && [ -f "$conf" ]; then
    log "already running (SLURM_CONF=$conf)"
    wait_ready
    return
  fi
  mkdir -p "$root"
  if [ -f "$root/net" ] && ! pid_alive "$root/run/slurmctld.pid"; then
    remove_network  # left by a run that did not end cleanly
  fi
  start_munge
  make_network
  [ -n "$ctld_port" ] || ctld_port="$(free_port 6817)"
  if [ "$accounting" = 1 ]; then  # ports first: slurm.conf names slurmdbd's
    [ -f "$root/db-port" ] || free_port 13306 >"$root/db-port"
    [ -f "$root/dbd-port" ] || free_port 6819 >"$root/dbd-port"
  fi
  write_config
  export SLURM_CONF="$conf"
  start_accounting
  pid_alive "$root/run/slurmctld.pid" || slurmctld -c -f "$conf"
  local i
  for ((i = 1; i <= node_count; i++)); do start_node "$i"; done
  wait_ready
  start_rest
  for name in $(node_names); do scontrol update NodeName="$name" State=RESUME >/dev/null 2>&1 || true; done
  log "up: $(sinfo -h -N -o '%N(%T,%G)' | sort -u | tr '\n' ' ')partitions $(sinfo -h -o %P | tr '\n' ' ')(SLURM_CONF=$conf; slurmrestd $(cat "$root/rest-url"))"
}

stop_pidfile() {
  local f="$1"
  if pid_alive "$f"; then
    local pid; pid="$(cat "$f")"
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$f"
}

down() {
  export SLURM_CONF="$conf"
  if [ -f "$conf" ] && pid_alive "$root/run/slurmctld.pid"; then
    scancel --full --quiet $(squeue -h -o %i 2>/dev/null) 2>/dev/null || true
    scontrol shutdown >/dev/null 2>&1 || true
    sleep 1
  fi
  for f in "$root"/run/slurmd.*.pid; do [ -e "$f" ] && stop_pidfile "$f"; done
  stop_pidfile "$root/run/slurmrestd.pid"
  rm -rf -- "$root/rest-url" "$rest_dir"
  stop_pidfile "$root/run/slurmctld.pid"
  stop_pidfile "$root/run/slurmdbd.pid"
  stop_pidfile "$root/run/mariadb.pid"
  stop_pidfile "$munge_dir/munged.pid"  # this cluster's own munged, never another's
  rm -rf -- "$munge_dir"
  remove_network                        # and whatever still ran in a node's namespace (a job's processes)
  log "down"
}

# a node that dies as a powered-off machine does: its network goes first (its peers hear nothing more, no
# connection reset), then every process of it; Slurm notices only by its silence (SlurmdTimeout)
kill_node() {
  local i ns pids
  i="$(index_of "$1")"; ns="$(node_ns "$i")"
  ip link set "${ns}h" down 2>/dev/null || true
  pids="$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ')"
  [ -z "$pids" ] || kill -9 $pids 2>/dev/null || true
  for _ in $(seq 50); do [ -z "$(ip netns pids "$ns" 2>/dev/null)" ] && break; sleep 0.1; done
  rm -f "$root/run/slurmd.$1.pid"
  log "$1 killed (${pids:-nothing was running})"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  restart-ctld)   # used by tests: slurmctld goes away and comes back, jobs stay
    export SLURM_CONF="$conf"; stop_pidfile "$root/run/slurmctld.pid"; sleep "${2:-2}"; slurmctld -f "$conf"; wait_ready ;;
  kill-node) need_root kill-node; kill_node "${2:?usage: $0 kill-node NODE}" ;;
  start-node)
    need_root start-node; export SLURM_CONF="$conf"
    start_node "$(index_of "${2:?usage: $0 start-node NODE}")"; log "${2} started" ;;
  nodes) node_names ;;
  status)
    export SLURM_CONF="$conf"
    for f in "$munge_dir/munged.pid" "$root/run/slurmctld.pid" "$root/run/slurmrestd.pid" "$root"/run/slurmd.*.pid; do
      [ -e "$f" ] || continue
      d="$(basename "$f" .pid)"
      if pid_alive "$f"; then echo "$d: running (pid $(cat "$f"))"; else echo "$d: not running"; fi
    done
    sinfo -N 2>/dev/null || true ;;
  env)
    echo "export SLURM_CONF=$conf"
    [ ! -f "$root/rest-url" ] || echo "export GPUSCHED_SLURM_REST_URL=$(cat "$root/rest-url")" ;;
  *) echo "usage: $0 up|down|status|env|nodes|kill-node NODE|start-node NODE|restart-ctld [seconds]" >&2; exit 2 ;;
esac
