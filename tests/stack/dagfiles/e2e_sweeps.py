"""A sweep the UI tests run again and again (tests/stack/test_ui.py): six trials that report a loss per step, the even
ones stopped as pruned at step 2. ``e2e_sweep_rerun`` skips what a run before it did; ``e2e_sweep_rerun_forced``
runs the same sweep (same folder) again, every trial, with five steps instead of three."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from airflow_provider_gpusched.core.sweep import Objective, SweepSpec, TrialResources
from airflow_provider_gpusched.task_groups.sweep import sweep_task_group

START = pendulum.datetime(2026, 1, 1, tz="UTC")


def _learn(params: dict, steps: int) -> dict:
    from airflow_provider_gpusched.core.sweep.pruning_rules.judging import TrialPruned
    from airflow_provider_gpusched.trial import report

    q = params["q"]
    for step in range(1, steps + 1):
        report(step=step, loss=q / step)
        if q % 2 == 0 and step == 2:  # the test's own rule, so which trials are pruned does not depend on timing
            raise TrialPruned(f"stopped at step {step}: loss {q / step:g} (the test's rule)")
    return {"loss": q / steps}


def learn_3_steps(params: dict) -> dict:
    return _learn(params, 3)


def learn_5_steps(params: dict) -> dict:
    return _learn(params, 5)


def rerun_sweep(learn, force_rerun: bool) -> SweepSpec:
    # the median rule never stops a trial with min_trials=100; it makes pruning count (a raised TrialPruned)
    return SweepSpec(
        name="e2e_rerun",
        test_config=[{"q": [1, 2, 3, 4, 5, 6]}],
        python_callable=learn,
        objective=Objective("loss", "minimize"),
        resources=TrialResources(gpu_memory="2GiB"),
        pruning={"rule": "median", "min_trials": 100},
        force_rerun=force_rerun,
        shared_with_other_dags=True,
    )  # the two DAGs below share it on purpose


with DAG("e2e_sweep_rerun", schedule=None, start_date=START, catchup=False, max_active_runs=1):
    sweep_task_group(rerun_sweep(learn_3_steps, False), backend="local")

with DAG("e2e_sweep_rerun_forced", schedule=None, start_date=START, catchup=False, max_active_runs=1):
    sweep_task_group(rerun_sweep(learn_5_steps, True), backend="local")


def quick_score(params: dict) -> dict:
    """A trial that returns at once: the 1,000-trial sweep measures gpusched and Airflow, not the work."""
    return {"score": round(1 - (params["x"] - 0.3) ** 2, 9)}


with DAG("e2e_sweep_1000", schedule=None, start_date=START, catchup=False, max_active_runs=1):
    # 1,000 trials batched (2 runner tasks), every one a new trial each run (force_rerun): counts, leaderboard and the
    # Sweeps API's answer are checked by tests/stack/test_deployed.py
    from airflow_provider_gpusched.core.sweep import uniform

    sweep_task_group(
        SweepSpec(
            name="e2e_1000",
            search="random",
            space={"x": uniform(0, 1)},
            count=1000,
            seed=11,
            python_callable=quick_score,
            objective=Objective("score", "maximize"),
            resources=TrialResources(gpu_memory="4GiB"),
            force_rerun=True,
        ),
        backend="local",
        batching="batched",
        chunk_size=500,
        publish_asset=False,
    )


#: a command trial (any language): reports loss = q + 1/step for 5 steps; waits 90 s first while the sweep folder
#: holds a SLOW file (so a run can be stopped while it runs); q = 7 fails with a Python exception
STOP_TRIAL = """
import os, sys, time
q, folder, t0 = float(sys.argv[1]), sys.argv[2], time.time()
while os.path.exists(os.path.join(folder, '..', '..', 'SLOW')) and time.time() < t0 + 90:
    time.sleep(0.2)
if q == 7:
    raise ValueError('q=%g is not allowed' % q)
for step in range(1, 6):
    open(os.environ['GPUSCHED_REPORT_FILE'], 'a').write('step=%d loss=%s\\n' % (step, q + 1 / step))
    time.sleep(0.4)
open('result.json', 'w').write('{{"loss": %s}}' % q)
"""

with DAG("e2e_sweep_stop", schedule=None, start_date=START, catchup=False, max_active_runs=1):
    # issue 52: run, force_rerun stopped by `gpusched queue stop`, plain re-run (tests/stack/test_ui.py). Optuna's
    # threshold pruner stops q = 5 and 6 (loss above 4.5 after the first step) whatever the order; lr spans four
    # decades, so the parallel coordinates draw it on a log axis
    import sys

    sweep_task_group(
        SweepSpec(
            name="e2e_stop",
            test_config=[
                {"q": [q], "lr": [lr]} for q, lr in ((1, 1e-4), (2, 1e-3), (3, 1e-2), (5, 1e-1), (6, 3e-2), (7, 3e-3))
            ],
            command=[sys.executable, "-c", STOP_TRIAL, "{q}", "{trial_dir}"],
            objective=Objective("loss", "minimize"),
            resources=TrialResources(gpu_memory="2GiB"),
            max_failed_trials=1,
            max_workers=2,  # two trials at a time: a stop finds some running and some not started
            pruning={"rule": "optuna", "pruner": "threshold", "options": {"upper": 4.5, "n_warmup_steps": 1}},
        ),
        backend="local",
        trial_kwargs={"grace_period": 2},
    )
