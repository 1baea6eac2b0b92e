#!/usr/bin/env bash
# The demo: the Slurm example DAGs end to end on the project's own single-node Slurm cluster, with
# `airflow dags test` on SQLite in an isolated AIRFLOW_HOME (.airflow-demo/ in this checkout).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/bootstrap.sh"
cd "$REPO"
started=""
if ! SLURM_CONF="$REPO/.slurm/etc/slurm.conf" sinfo -h >/dev/null 2>&1; then
  bash scripts/slurm-cluster.sh up
  started=1
fi
cleanup() { [ -z "$started" ] || bash "$REPO/scripts/slurm-cluster.sh" down; }
trap cleanup EXIT
export SLURM_CONF="$REPO/.slurm/etc/slurm.conf"
export AIRFLOW_HOME="$REPO/.airflow-demo"
export AIRFLOW__CORE__DAGS_FOLDER="$REPO/dags" AIRFLOW__CORE__LOAD_EXAMPLES=False
export AIRFLOW__GPUSCHED__SLURM_POLL_INTERVAL="${AIRFLOW__GPUSCHED__SLURM_POLL_INTERVAL:-1}"
mkdir -p "$AIRFLOW_HOME"
airflow db migrate >"$AIRFLOW_HOME/db-migrate.log" 2>&1 || { tail -20 "$AIRFLOW_HOME/db-migrate.log"; exit 1; }
status=0
for dag in gpusched_slurm_command gpusched_slurm_array gpusched_slurm_python; do
  echo "=== airflow dags test $dag   (full log: .airflow-demo/$dag.log)"
  if ! airflow dags test "$dag" >"$AIRFLOW_HOME/$dag.log" 2>&1; then status=1; fi
  python scripts/demo_summary.py "$dag" || status=1
done
exit $status
