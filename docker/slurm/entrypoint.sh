#!/bin/bash
# docker/slurm entrypoint:  slurmctld | slurmd | any other command (run as given)
#
# slurmctld: creates the munge key on the shared munge-key volume if there is none, renders slurm.conf and
#            gres.conf onto the shared slurm-etc volume, starts munged (its socket directory is the munge-socket
#            volume, which the Airflow containers use as their munge) and runs slurmctld in the foreground.
# slurmd:    waits for the key and slurm.conf, starts its own munged with the same key, runs slurmd as
#            node $SLURMD_NODE.
# Settings (environment): SLURMCTLD_HOST (slurmctld; must be this container's hostname), SLURMCTLD_ADDR (empty:
# resolve SLURMCTLD_HOST), SLURMCTLD_PORT (6817), SLURMD_NODE (slurmd), SLURMD_ADDR (SLURMD_NODE), SLURMD_PORT
# (6818), SLURMD_CPUS (4), SLURMD_MEMORY_MB (4000), SHARED_DIR (/shared: made writable for the Airflow user).
set -euo pipefail
role="${1:-slurmctld}"
key=/etc/munge/munge.key
conf=/etc/slurm/slurm.conf
log() { echo "[slurm-entrypoint $role] $*" >&2; }

: "${SLURMCTLD_HOST:=slurmctld}" "${SLURMCTLD_ADDR:=}" "${SLURMCTLD_PORT:=6817}"
: "${SLURMD_NODE:=slurmd}" "${SLURMD_ADDR:=$SLURMD_NODE}" "${SLURMD_PORT:=6818}"
: "${SLURMD_CPUS:=4}" "${SLURMD_MEMORY_MB:=4000}" "${SHARED_DIR:=/shared}"

start_munged() {
  install -d -o munge -g munge -m 0700 /etc/munge
  install -d -o munge -g munge -m 0755 /run/munge /var/lib/munge /var/log/munge
  runuser -u munge -- /usr/sbin/munged
  for _ in $(seq 50); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && return; sleep 0.1; done
  log "munged did not come up"; exit 1
}

render_config() {
  local addr_suffix="" tmp
  [ -z "$SLURMCTLD_ADDR" ] || addr_suffix="($SLURMCTLD_ADDR)"
  tmp="$(mktemp /etc/slurm/.slurm.conf.XXXXXX)"
  sed -e "s|@SLURMCTLD_HOST@|$SLURMCTLD_HOST|; s|@SLURMCTLD_ADDR_SUFFIX@|$addr_suffix|" \
      -e "s|@SLURMCTLD_PORT@|$SLURMCTLD_PORT|; s|@SLURMD_PORT@|$SLURMD_PORT|" \
      -e "s|@SLURMD_NODE@|$SLURMD_NODE|; s|@SLURMD_ADDR@|$SLURMD_ADDR|" \
      -e "s|@SLURMD_CPUS@|$SLURMD_CPUS|; s|@SLURMD_MEMORY_MB@|$SLURMD_MEMORY_MB|" \
      /opt/gpusched-slurm/slurm.conf.template >"$tmp"
  chmod 0644 "$tmp"
  echo "NodeName=$SLURMD_NODE Name=gpu File=/opt/fake-gpus/gpu[0-3]" >/etc/slurm/gres.conf
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
    log "slurm.conf: SlurmctldHost=$SLURMCTLD_HOST${SLURMCTLD_ADDR:+($SLURMCTLD_ADDR)} node $SLURMD_NODE ($SLURMD_ADDR)"
    exec slurmctld -D -f "$conf"
    ;;
  slurmd)
    for _ in $(seq 120); do [ -s "$key" ] && [ -s "$conf" ] && break; sleep 0.5; done
    [ -s "$key" ] && [ -s "$conf" ] || { log "no munge key or slurm.conf after 60 s: is slurmctld up?"; exit 1; }
    start_munged
    exec slurmd -D -N "$SLURMD_NODE" -f "$conf"
    ;;
  *) exec "$@" ;;
esac
