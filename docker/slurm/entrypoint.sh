#!/bin/bash
# docker/slurm entrypoint:  slurmctld | slurmd | any other command (run as given)
#
# slurmctld: creates the munge key on the shared munge-key volume if there is none, renders slurm.conf and
#            gres.conf onto the shared slurm-etc volume, starts munged (its socket directory is the munge-socket
#            volume, which the Airflow containers use as their munge) and runs slurmctld in the foreground.
# slurmd:    waits for the key and slurm.conf, starts its own munged with the same key, runs slurmd as
#            node $SLURMD_NODE.
# Settings (environment): SLURMCTLD_HOST (slurmctld; must be this container's hostname), SLURMCTLD_ADDR (empty:
# resolve SLURMCTLD_HOST), SLURMCTLD_PORT (6817), SLURMD_NODES (the compute nodes: "NAME[:ADDR[:PORT]] ...",
# default "slurmd slurmd-2"; ADDR defaults to NAME, PORT to SLURMD_PORT), SLURMD_NODE (which of them this slurmd
# container is), SLURMD_PORT (6818), SLURMD_CPUS (4), SLURMD_MEMORY_MB (4000), SHARED_DIR (/shared: made writable
# for the Airflow user).
set -euo pipefail
role="${1:-slurmctld}"
key=/etc/munge/munge.key
conf=/etc/slurm/slurm.conf
log() { echo "[slurm-entrypoint $role] $*" >&2; }

: "${SLURMCTLD_HOST:=slurmctld}" "${SLURMCTLD_ADDR:=}" "${SLURMCTLD_PORT:=6817}"
: "${SLURMD_NODE:=slurmd}" "${SLURMD_NODES:=slurmd slurmd-2}" "${SLURMD_PORT:=6818}"
: "${SLURMD_CPUS:=4}" "${SLURMD_MEMORY_MB:=4000}" "${SHARED_DIR:=/shared}"

start_munged() {
  install -d -o munge -g munge -m 0700 /etc/munge
  install -d -o munge -g munge -m 0755 /run/munge /var/lib/munge /var/log/munge
  runuser -u munge -- /usr/sbin/munged
  for _ in $(seq 50); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && return; sleep 0.1; done
  log "munged did not come up"; exit 1
}

# one NodeName line per SLURMD_NODES entry (NAME[:ADDR[:PORT]]), each name checked: it becomes part of slurm.conf
node_lines() {
  local entry name addr port
  for entry in $SLURMD_NODES; do
    IFS=: read -r name addr port <<<"$entry"
    if ! [[ "$name" =~ ^[A-Za-z0-9][A-Za-z0-9-]*$ && "${addr:-$name}" =~ ^[A-Za-z0-9][A-Za-z0-9.-]*$ \
          && "${port:-$SLURMD_PORT}" =~ ^[0-9]+$ ]]; then
      log "SLURMD_NODES entry '$entry': expected NAME[:ADDR[:PORT]] (letters, digits, '-', '.')"; exit 2
    fi
    echo "NodeName=$name NodeAddr=${addr:-$name} Port=${port:-$SLURMD_PORT} CPUs=$SLURMD_CPUS RealMemory=$SLURMD_MEMORY_MB Gres=gpu:4 State=UNKNOWN"
  done
}

render_config() {
  local addr_suffix="" tmp lines
  [ -z "$SLURMCTLD_ADDR" ] || addr_suffix="($SLURMCTLD_ADDR)"
  lines="$(node_lines)"
  [ -n "$lines" ] || { log "SLURMD_NODES is empty: name at least one compute node"; exit 2; }
  tmp="$(mktemp /etc/slurm/.slurm.conf.XXXXXX)"
  sed -e "s|@SLURMCTLD_HOST@|$SLURMCTLD_HOST|; s|@SLURMCTLD_ADDR_SUFFIX@|$addr_suffix|" \
      -e "s|@SLURMCTLD_PORT@|$SLURMCTLD_PORT|; s|@SLURMD_PORT@|$SLURMD_PORT|" \
      /opt/gpusched-slurm/slurm.conf.template | awk -v lines="$lines" '$0 == "@SLURMD_NODE_LINES@" { print lines; next } 1' >"$tmp"
  chmod 0644 "$tmp"
  for entry in $SLURMD_NODES; do
    echo "NodeName=${entry%%:*} Name=gpu File=/opt/fake-gpus/gpu[0-3]"
  done >/etc/slurm/gres.conf
  mv -f "$tmp" "$conf"   # last: slurmd waits for slurm.conf, so gres.conf is there when it appears
}

case "$role" in
  slurmctld)
    install -d -o munge -g munge -m 0700 /etc/munge
    if [ ! -s "$key" ]; then
      log "creating the munge key (shared with slurmd through the munge-key volume)"
      runuser -u munge -- mungekey --create --keyfile="$key"
    fi
    chown munge:munge "$key"; chmod 0400 "$key"
    render_config
    install -d -o airflow -g 0 -m 0775 "$SHARED_DIR"
    start_munged
    log "slurm.conf: SlurmctldHost=$SLURMCTLD_HOST${SLURMCTLD_ADDR:+($SLURMCTLD_ADDR)} nodes $SLURMD_NODES"
    exec slurmctld -D -f "$conf"
    ;;
  slurmd)
    for _ in $(seq 120); do [ -s "$key" ] && [ -s "$conf" ] && break; sleep 0.5; done
    [ -s "$key" ] && [ -s "$conf" ] || { log "no munge key or slurm.conf after 60 s: is slurmctld up?"; exit 1; }
    start_munged
    mkdir -p "/var/spool/slurmd/$SLURMD_NODE"
    exec slurmd -D -N "$SLURMD_NODE" -f "$conf"
    ;;
  *) exec "$@" ;;
esac
