"""Sweep task groups for the tests: batched local mode, Slurm mapped and Slurm job arrays."""

import os
import sys

import pendulum
from airflow.sdk import DAG

from airflow_provider_gpusched.core.sweep import Objective, SweepSpec, TrialResources, uniform
from airflow_provider_gpusched.task_groups.sweep import sweep_task_group

START = pendulum.datetime(2026, 1, 1, tz="UTC")


def score(params):
    return {"y": round(1 - (params["x"] - 0.3) ** 2, 6)}


with DAG("t_sweep_batched_local", schedule=None, start_date=START) as batched_local:
    sweep_task_group(
        SweepSpec(
            name="batched_local",
            search="random",
            space={"x": uniform(0, 1)},
            count=600,
            seed=5,
            python_callable=score,
            objective=Objective("y"),
            resources=TrialResources(gpu_memory="4GiB"),
        ),
        backend="local",
        max_mapped_trials=256,
        chunk_size=300,
    )

WRITE = (
    "import json, os, sys; json.dump({'y': float(sys.argv[1]) * 2, 'cuda': os.environ.get('CUDA_VISIBLE_DEVICES')},"
    " open(os.path.join(sys.argv[2], 'result.json'), 'w'))"
)

with DAG("t_sweep_slurm_mapped", schedule=None, start_date=START) as slurm_mapped:
    sweep_task_group(
        SweepSpec(
            name="slurm_mapped",
            test_config=[{"x": [1, 2, 3], "note": ["it's a; b"]}],
            command=[sys.executable, "-c", WRITE, "{x}", "{trial_dir}", "{note}"],
            objective=Objective("y"),
            resources=TrialResources(gpus=1, cpus=1, partition="batch"),
        ),
        backend="slurm",
        poll_interval=1,
    )

with DAG("t_sweep_slurm_arrays", schedule=None, start_date=START) as slurm_arrays:
    sweep_task_group(
        SweepSpec(
            name="slurm_arrays",
            search="random",
            space={"x": uniform(0, 1)},
            count=30,
            seed=1,
            python_callable=score,
            objective=Objective("y"),
            resources=TrialResources(gpus=0, cpus=1, time_limit=5),
        ),
        backend="slurm",
        batching="batched",
        chunk_size=15,
        max_array_parallel=8,
        poll_interval=1,
    )

with DAG("t_sweep_slurm_async", schedule=None, start_date=START) as slurm_async:
    sweep_task_group(
        SweepSpec(
            name="slurm_async",
            search="optuna",
            asynchronous=True,
            count=6,
            max_workers=2,
            seed=3,
            space={"x": uniform(0, 1)},
            python_callable=score,
            objective=Objective("y"),
            resources=TrialResources(gpus=0, cpus=1, time_limit=5),
        ),
        backend="slurm",
        poll_interval=1,
    )


def learn(params):
    from airflow_provider_gpusched.trial import report

    for step in range(4):
        report(step=step, loss=params["q"] + 1.0 / (step + 1))
    return {"loss": params["q"]}


def pruned_sweep(values):
    return sweep_task_group(
        SweepSpec(
            name="pruned_local",
            test_config=[{"q": values}],
            python_callable=learn,
            objective=Objective("loss", "minimize"),
            resources=TrialResources(gpu_memory="4GiB"),
            pruning={"rule": "median", "min_trials": 2, "warmup_steps": 1},
            shared_with_other_dags=True,
        ),  # two DAGs: the peers, then the sweep
        backend="local",
    )


# dag.test() runs mapped tasks in no fixed order, so the two good peers get a run of their own first; the
# second DAG is the same sweep with the bad value added: it skips the peers and judges the bad trial against them.
with DAG("t_sweep_pruned_local_peers", schedule=None, start_date=START) as pruned_local_peers:
    pruned_sweep([0.1, 0.2])

with DAG("t_sweep_pruned_local", schedule=None, start_date=START) as pruned_local:
    pruned_sweep([0.1, 0.2, 5.0])


# A command trial on Slurm that reports a line per step; the bad one (q > 1) would run 30 s. The runner inside
# its Slurm job judges the lines and stops it.
REPORTING = (
    "import json, os, sys, time\n"
    "q = float(sys.argv[1])\n"
    "for step in range(60 if q > 1 else 3):\n"
    "    open(os.environ['GPUSCHED_REPORT_FILE'], 'a').write('step=%d loss=%s\\n' % (step, q + 1 / (step + 1)))\n"
    "    time.sleep(0.5 if q > 1 else 0.05)\n"
    "json.dump(dict(loss=q), open('result.json', 'w'))\n"
)


def pruned_slurm_sweep(values):
    return sweep_task_group(
        SweepSpec(
            name="pruned_slurm",
            test_config=[{"q": values}],
            command=[sys.executable, "-c", REPORTING, "{q}"],
            objective=Objective("loss", "minimize"),
            resources=TrialResources(gpus=0, cpus=1, time_limit=5),
            pruning={"rule": "median", "min_trials": 2, "warmup_steps": 1},
            shared_with_other_dags=True,
        ),  # two DAGs: the peers, then the sweep
        backend="slurm",
        poll_interval=1,
    )


with DAG("t_sweep_pruned_slurm_peers", schedule=None, start_date=START) as pruned_slurm_peers:
    pruned_slurm_sweep([0.1, 0.2])

with DAG("t_sweep_pruned_slurm", schedule=None, start_date=START) as pruned_slurm:
    pruned_slurm_sweep([0.1, 0.2, 5.0])

SETUP_WRITE = (
    "import json, os, sys; json.dump({'y': 1.0, 'env': os.environ['TRAIN_ENV'], 'args': sys.argv[2:], "
    "'cpus': sorted(os.sched_getaffinity(0)), 'reserved': os.environ['GPUSCHED_CPUS']},"
    " open(os.path.join(sys.argv[1], 'result.json'), 'w'))"
)
ENV_SCRIPT = os.environ.get("GPUSCHED_TEST_ENV_SCRIPT", "/nonexistent/env.sh")

with DAG("t_sweep_local_setup", schedule=None, start_date=START) as local_setup:
    # the setup line activates the trials' environment, as on Slurm: mapped and batched, arguments verbatim; each
    # trial holds one CPU, pinned
    for batching in ("mapped", "batched"):
        sweep_task_group(
            SweepSpec(
                name=f"local_setup_{batching}",
                test_config=[{"word": ["a b", "it's; $HOME"]}],
                command=[sys.executable, "-c", SETUP_WRITE, "{trial_dir}", "{word}"],
                objective=Objective("y"),
                resources=TrialResources(gpu_memory="1GiB", cpus=1, setup=[f"source {ENV_SCRIPT}"]),
            ),
            backend="local",
            batching=batching,
            poll_interval=0.5,
        )

SLOW_OR_NOT = (
    "import json, os, sys, time; time.sleep(60 if sys.argv[2] == 'slow' else 0);"
    " json.dump({'y': 1.0}, open(os.path.join(sys.argv[1], 'result.json'), 'w'))"
)

with DAG("t_sweep_local_time_limit", schedule=None, start_date=START) as local_time_limit:
    # time_limit "0:03" (3 s): the slow trial is stopped and ends timeout, mapped and batched; one is allowed
    for batching in ("mapped", "batched"):
        sweep_task_group(
            SweepSpec(
                name=f"local_limit_{batching}",
                test_config=[{"pace": ["slow", "quick"]}],
                command=[sys.executable, "-c", SLOW_OR_NOT, "{trial_dir}", "{pace}"],
                objective=Objective("y"),
                max_failed_trials=1,
                resources=TrialResources(gpu_memory="1GiB", time_limit="0:03"),
            ),
            backend="local",
            batching=batching,
            poll_interval=0.5,
        )

#: run from a terminal first (run_sweep), then by this DAG: it finds every trial done
SHARED_WITH_TERMINAL = SweepSpec(
    name="shared_with_terminal",
    test_config=[{"x": [1, 2, 3]}],
    command=[sys.executable, "-c", WRITE, "{x}", "{trial_dir}"],
    objective=Objective("y"),
    resources=TrialResources(gpu_memory="1GiB"),
)

with DAG("t_sweep_after_terminal", schedule=None, start_date=START) as after_terminal:
    sweep_task_group(SHARED_WITH_TERMINAL, backend="local", poll_interval=0.5)

#: fedflow's two-stage trial: load with no GPU visible, then wait_for_gpus() and train on the GPU given
TWO_STAGE_TRIAL = (
    "import json, os, sys; from airflow_provider_gpusched import wait_for_gpus; "
    "before = os.environ['CUDA_VISIBLE_DEVICES']; gpus = wait_for_gpus(); "
    "json.dump({'y': float(sys.argv[2]), 'before': before, 'gpus': gpus, "
    "'memory': os.environ.get('GPUSCHED_GPU_MEMORY_BYTES')}, "
    "open(os.path.join(sys.argv[1], 'result.json'), 'w'))"
)

with DAG("t_sweep_two_stage", schedule=None, start_date=START) as two_stage:
    for batching in ("mapped", "batched"):
        sweep_task_group(
            SweepSpec(
                name=f"two_stage_{batching}",
                test_config=[{"x": [1, 2, 3]}],
                command=[sys.executable, "-c", TWO_STAGE_TRIAL, "{trial_dir}", "{x}"],
                objective=Objective("y"),
                resources=TrialResources(gpu_memory="2GiB", mem="1GiB", load_stage=True, max_waiting=2),
            ),
            backend="local",
            batching=batching,
            poll_interval=0.5,
        )
