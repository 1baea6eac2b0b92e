"""Grid sweep: GPU Task Scheduler's GAN / ALI / WGAN example as an Airflow task group (drop-in example).

The spec is the GPU Task Scheduler README's: ``global_config`` values are fixed, each ``test_config`` block
is a cross product, the trials are their union — exactly 4 trials here. Each trial runs a (toy) training
command on a local GPU with ``{placeholders}`` filled from its parameters, writes ``result.json`` in its
trial folder, and the group ends with the leaderboard (best ``inception_score``), also published as an
Asset. Re-running the DAG skips trials that already succeeded; set ``force_rerun=True`` to redo them.

On a machine without NVIDIA GPUs set ``[gpusched] simulate_gpus = 4x24GiB`` (the demo does).
"""

from __future__ import annotations

import pendulum
from airflow.sdk import dag

from airflow_provider_gpusched.core.sweep import Objective, SweepSpec, TrialResources
from airflow_provider_gpusched.task_groups.sweep import sweep_task_group

# Stands in for `python train.py ...`: a deterministic toy "inception score" from the parameters.
TOY_GAN = """
import json, os, sys, time
method, packing, zmode, epochs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
print("training %s packing=%d zmode=%d for %d epochs on CUDA_VISIBLE_DEVICES=%s"
      % (method, packing, zmode, epochs, os.environ.get("CUDA_VISIBLE_DEVICES")))
time.sleep(0.5)
score = dict(GAN=6.1, ALI=6.4, WGAN=7.0)[method] + 0.3 * packing - 0.2 * zmode
json.dump(dict(inception_score=round(score, 3), epochs=epochs), open("result.json", "w"))
"""

GAN_SWEEP = SweepSpec(
    name="gan_grid",
    global_config={"num_run": 5, "num_epoch": 200},
    test_config=[
        {"method": ["GAN", "ALI"], "num_packing": [1], "num_zmode": [1]},
        {"method": ["WGAN"], "num_packing": [3], "num_zmode": [1, 2]},
    ],
    command=["python3", "-c", TOY_GAN, "{method}", "{num_packing}", "{num_zmode}", "{num_epoch}"],
    objective=Objective("inception_score", "maximize"),
    resources=TrialResources(gpus=1, gpu_memory="6GiB"),
)


@dag(
    dag_id="gpusched_sweep_grid",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["gpusched", "sweep", "example"],
    doc_md=__doc__,
)
def sweep_grid():
    sweep_task_group(GAN_SWEEP, backend="local", poll_interval=1)


sweep_grid_dag = sweep_grid()
