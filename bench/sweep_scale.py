"""Benchmark: how sweeps scale — DAG parse time and batched-mode throughput (SIMULATED GPUs).

1. Parse time of a DAG file holding a sweep, the way Airflow's DAG processor sees it: DagBag import of
   the file plus serialisation of the DAG. Cases: a 1,000-trial grid in mapped mode, a 10,000-trial grid
   in batched mode (auto), and a 10,000-trial random search (batched). Airflow's DAG processor gives a
   file 30 s (dagbag_import_timeout); the target is well under 1 s.
2. Trials per minute for tiny trials (a Python callable returning a number) in batched mode on 4
   SIMULATED 24 GiB GPUs with 4 GiB reservations (24 at a time), one process per trial vs groups of 8 per
   process, next to a spawn ``multiprocessing.Pool`` of the same size and group size (``maxtasksperchild``).

    .venv/bin/python bench/sweep_scale.py [--trials 2000]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time

PARSE_CASES = {
    "grid 1,000 (mapped)": (
        "test_config=[{'lr': [i * 1e-4 for i in range(1, 41)], 'seed': list(range(25))}]",
        "batching='mapped', max_mapped_trials=1024",
    ),
    "grid 10,000 (batched)": (
        "test_config=[{'lr': [i * 1e-5 for i in range(1, 101)], 'seed': list(range(100))}]",
        "batching='auto'",
    ),
    "random 10,000 (batched)": (
        "search='random', count=10000, space={'lr': loguniform(1e-5, 1e-1), "
        "'wd': uniform(0, 0.1), 'opt': ['sgd', 'adam'], 'mom': when({'opt': 'sgd'}, "
        "uniform(0.5, 0.99))}",
        "batching='auto'",
    ),
}

DAG_TEMPLATE = """
import pendulum
from airflow.sdk import DAG
from airflow_provider_gpusched.core.sweep import Objective, SweepSpec, loguniform, uniform, when
from airflow_provider_gpusched.task_groups.sweep import sweep_task_group

with DAG("bench_sweep", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")) as dag:
    sweep_task_group(SweepSpec(name="bench", {spec}, command=["python", "train.py", "--lr", "{{lr}}"],
                               objective=Objective("acc")), backend="local", {factory})
"""

MEASURE = """
import sys, time
t0 = time.perf_counter()
from airflow.models.dagbag import DagBag
from airflow.serialization.serialized_objects import DagSerialization
t1 = time.perf_counter()
bag = DagBag(dag_folder=sys.argv[1])
assert not bag.import_errors, bag.import_errors
dag = bag.dags["bench_sweep"]
t2 = time.perf_counter()
DagSerialization.to_dict(dag)
t3 = time.perf_counter()
print("RESULT", t2 - t1, t3 - t2, len(dag.tasks))
"""


def parse_times(repeats: int) -> list[tuple[str, float, float, int]]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        env = {
            **os.environ,
            "AIRFLOW_HOME": tmp,
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__GPUSCHED__SWEEP_RESULTS_ROOT": os.path.join(tmp, "sweeps"),
        }
        for name, (spec, factory) in PARSE_CASES.items():
            path = os.path.join(tmp, "bench_dag.py")
            with open(path, "w") as fh:
                fh.write(textwrap.dedent(DAG_TEMPLATE.format(spec=spec, factory=factory)))
            parse, serialise = [], []
            for _ in range(repeats):
                out = subprocess.run([sys.executable, "-c", MEASURE, path], env=env, capture_output=True, text=True)
                if out.returncode != 0:
                    raise SystemExit(out.stderr[-2000:])
                p, s, tasks = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT")][-1].split()[1:]
                parse.append(float(p))
                serialise.append(float(s))
            rows.append((name, statistics.median(parse), statistics.median(serialise), int(tasks)))
    return rows


def tiny_trial(params: dict) -> float:
    return params["x"]


def throughput(trials: int, per_process: int) -> tuple[float, float]:
    from airflow_provider_gpusched.core.gpu.inventory import SimulatedInventory
    from airflow_provider_gpusched.core.gpu.leases import LeaseManager
    from airflow_provider_gpusched.core.gpu.placement import GPURequest
    from airflow_provider_gpusched.core.gpu.sweep_batch import run_local_batch
    from airflow_provider_gpusched.core.sweep import Objective, SweepSpec, uniform
    from airflow_provider_gpusched.core.sweep.running.session import SweepSession

    with tempfile.TemporaryDirectory() as tmp:
        spec = SweepSpec(
            name="tput",
            search="random",
            space={"x": uniform(0, 1)},
            count=trials,
            seed=0,
            python_callable=tiny_trial,
            objective=Objective("value"),
            results_root=tmp,
        )
        session = SweepSession(spec)
        manifest = session.prepare(chunk_size=trials)
        manager = LeaseManager(SimulatedInventory("4x24GiB"), os.path.join(tmp, "leases"))
        start = time.perf_counter()
        outcome = run_local_batch(
            manifest, manifest.chunk(0), manager, GPURequest(gpu_memory="4GiB"), trials_per_process=per_process
        )
        elapsed = time.perf_counter() - start
        assert len(outcome["succeeded"]) == trials, outcome["failed"][:3]
        collect_start = time.perf_counter()
        assert session.collect()["counts"]["succeeded"] == trials
        return trials / elapsed * 60, time.perf_counter() - collect_start


def spawn_pool(trials: int, processes: int, per_process: int) -> float:
    """The peer: a spawn ``multiprocessing.Pool`` of ``processes`` workers, each replaced after
    ``per_process`` tasks (a fresh interpreter per group, as batched mode starts one), mapping the same
    tiny callable over the same parameters. Trials per minute; nothing is recorded."""
    import multiprocessing
    import random

    params = [{"x": random.random()} for _ in range(trials)]
    start = time.perf_counter()
    with multiprocessing.get_context("spawn").Pool(processes, maxtasksperchild=per_process) as pool:
        values = pool.map(tiny_trial, params, chunksize=1)
    assert len(values) == trials
    return trials / (time.perf_counter() - start) * 60


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=2000, help="tiny trials for the throughput part")
    parser.add_argument("--repeats", type=int, default=3, help="parses per case (median reported)")
    parser.add_argument("--skip-parse", action="store_true", help="only the batched-mode throughput")
    args = parser.parse_args()
    # Children cache bytecode as an installed package has it: with PYTHONDONTWRITEBYTECODE (set on some
    # machines) an editable checkout recompiles every module of ours in every group process, a cost users'
    # installs do not have (the pool's workers compile this file alike).
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    sys.dont_write_bytecode = False
    print(
        f"# sweep scale benchmark, {time.strftime('%Y-%m-%d')} on {platform.node()} ({os.cpu_count()} cores), "
        f"Python {platform.python_version()}"
    )
    print(f"{'DAG file':<26} {'tasks':>5} {'DagBag parse s':>14} {'serialise s':>11} {'total s':>8}")
    for name, parse, serialise, tasks in [] if args.skip_parse else parse_times(args.repeats):
        print(f"{name:<26} {tasks:>5} {parse:>14.3f} {serialise:>11.3f} {parse + serialise:>8.3f}")
    print(
        f"\n# batched mode, {args.trials} tiny callable trials, 4 SIMULATED 24 GiB GPUs, 4 GiB each "
        f"(24 slots), next to a spawn multiprocessing.Pool"
    )
    print(f"{'trials per process':<20} {'gpusched/min':>12} {'collect s':>9} {'spawn pool(24)/min':>19} {'ratio':>6}")
    for per_process in (1, 8):
        pool = spawn_pool(args.trials, 24, per_process)
        rate, collect = throughput(args.trials, per_process)
        print(f"{per_process:<20} {rate:>12.0f} {collect:>9.2f} {pool:>19.0f} {pool / rate:>6.2f}", flush=True)


if __name__ == "__main__":
    main()
