#!/usr/bin/env bash
# The demo: the example DAGs end to end with `airflow dags test` on SQLite in an isolated AIRFLOW_HOME
# (.airflow-demo/ in this checkout): the Slurm ones on the project's own two-node Slurm test cluster, the
# local-GPU ones on this machine's GPUs (simulated ones where NVML finds none), and the pipeline partitioner.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/bootstrap.sh"
cd "$REPO"
use_test_cluster
export AIRFLOW_HOME="$REPO/.airflow-demo"
export AIRFLOW__CORE__DAGS_FOLDER="$REPO/dags" AIRFLOW__CORE__LOAD_EXAMPLES=False
export AIRFLOW__GPUSCHED__SLURM_POLL_INTERVAL="${AIRFLOW__GPUSCHED__SLURM_POLL_INTERVAL:-1}"
# no NVIDIA GPU here? the local-GPU example then runs on SIMULATED GPUs (and says so)
if ! python -c "import pynvml; pynvml.nvmlInit()" >/dev/null 2>&1; then
  export AIRFLOW__GPUSCHED__SIMULATE_GPUS="${AIRFLOW__GPUSCHED__SIMULATE_GPUS:-4x24GiB}"
fi
export AIRFLOW__GPUSCHED__GPU_STATE_DIR="${AIRFLOW__GPUSCHED__GPU_STATE_DIR:-$AIRFLOW_HOME/gpu-leases}"
export AIRFLOW__GPUSCHED__SWEEP_RESULTS_ROOT="${AIRFLOW__GPUSCHED__SWEEP_RESULTS_ROOT:-$AIRFLOW_HOME/sweeps}"
mkdir -p "$AIRFLOW_HOME"
airflow db migrate >"$AIRFLOW_HOME/db-migrate.log" 2>&1 || { tail -20 "$AIRFLOW_HOME/db-migrate.log"; exit 1; }
status=0
# the Airflow pools the job classes use (idle work: pool gpusched_idle, one slot per GPU)
gpusched pools sync || status=1
# The grid sweep first: 4 trials on (simulated) GPUs, then its status table and leaderboard. Trials that
# succeeded in an earlier demo run are skipped (delete .airflow-demo/sweeps to start over).
echo "=== airflow dags test gpusched_sweep_grid   (full log: .airflow-demo/gpusched_sweep_grid.log)"
if ! airflow dags test gpusched_sweep_grid >"$AIRFLOW_HOME/gpusched_sweep_grid.log" 2>&1; then status=1; fi
python scripts/demo_summary.py gpusched_sweep_grid || status=1
gpusched sweep results "$AIRFLOW__GPUSCHED__SWEEP_RESULTS_ROOT/gan_grid" || status=1
# Real training: an Optuna (TPE) search of 9 trials (3 rounds of 3), each a PyTorch MLP learning handwritten digits epoch by
# epoch, the median rule pruning those behind; then each trial's last epoch and the best accuracy.
echo "=== airflow dags test gpusched_digits_hpo   (full log: .airflow-demo/gpusched_digits_hpo.log)"
if ! airflow dags test gpusched_digits_hpo >"$AIRFLOW_HOME/gpusched_digits_hpo.log" 2>&1; then status=1; fi
python scripts/demo_training.py "$AIRFLOW__GPUSCHED__SWEEP_RESULTS_ROOT/digits_hpo" || status=1
for dag in gpusched_slurm_command gpusched_slurm_array gpusched_slurm_python gpusched_slurm_ddp gpusched_local_gpu_trials \
    gpusched_pipeline_partition; do
  echo "=== airflow dags test $dag   (full log: .airflow-demo/$dag.log)"
  if ! airflow dags test "$dag" >"$AIRFLOW_HOME/$dag.log" 2>&1; then status=1; fi
  python scripts/demo_summary.py "$dag" || status=1
done
cat <<EOT

=== The same runs in the Airflow UI: start an api-server on this demo's database
    AIRFLOW_HOME=$AIRFLOW_HOME .venv/bin/airflow api-server -p 8080   (or: bash scripts/stack.sh up)
  GPU board      http://localhost:8080/plugin/gpusched-gpus
  Sweeps         http://localhost:8080/dags/gpusched_sweep_grid/plugin/gpusched-sweeps
  Training curves http://localhost:8080/dags/gpusched_digits_hpo/plugin/gpusched-sweeps
  Slurm job      http://localhost:8080/dags/gpusched_slurm_array/runs/<run id>/tasks/seeds/plugin/gpusched-slurm-job
  (pages and what they show: docs/ui.md)
EOT
exit $status
