#!/usr/bin/env bash
# Install the Debian packages of those named that are missing, one apt-get at a time on this machine (root).
#
#   bash scripts/apt-install.sh PACKAGE...
#
# The test workers start their Slurm clusters, deployments and Kubernetes nodes at once, and on a fresh machine each
# may need packages: apt-get refuses a second run while one holds its lock ("Could not get lock
# /var/lib/apt/lists/lock", CI's run of 214b9b2: a worker's whole Slurm tier errored). Every script of the project
# installs through this one: a lock of its own serializes them, and a package a run before installed is not asked
# for again. GPUSCHED_APT_NO_START=1: the packages' services are not started (policy-rc.d), as the stack runs its
# own PostgreSQL. GPUSCHED_APT_UPDATED=1: the package lists are fresh (scripts/bootstrap.sh updated them).
set -euo pipefail
[ "$#" -gt 0 ] || exit 0
exec 9>/run/gpusched-apt.lock
if ! flock -w 1200 9; then
  echo "[apt-install] another install held /run/gpusched-apt.lock for 20 minutes: $*" >&2
  exit 1
fi
missing=()
for p in "$@"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ "${#missing[@]}" -eq 0 ] && exit 0
echo "[apt-install] apt-get install ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
[ "${GPUSCHED_APT_UPDATED:-}" = 1 ] || apt-get update -q >/dev/null
if [ "${GPUSCHED_APT_NO_START:-}" = 1 ]; then
  printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d
  trap 'rm -f /usr/sbin/policy-rc.d' EXIT
fi
# DPkg::Lock::Timeout: an apt-get of someone else's (unattended upgrades) is waited for too
apt-get install -y -q -o DPkg::Lock::Timeout=600 --no-install-recommends "${missing[@]}" >/dev/null
