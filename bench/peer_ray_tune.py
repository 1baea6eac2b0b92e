"""Peer benchmark: N one-second trials on 16 slots, Ray Tune and gpusched, on this machine in one run.

Ray Tune's own scalability test ("bookkeeping overhead", ``release/tune_tests/scalability_tests``: 10,000 trials of
one second on a 16-CPU node, 625 s ideal, published 715 s = 1.14x) is run here as Ray ships it
(``ray.tune.utils.release_test_util.timed_tune_run``, its function trainable, ``reuse_actors=True``), on a local Ray
with 16 CPU slots. gpusched runs the same workload (a Python function that sleeps one second and returns a score)
on 16 SIMULATED GPUs, one trial per GPU:

  ray       Ray Tune's release test, in a subprocess (``--ray-python``: an interpreter with ``ray[tune]``; the
            ``bench`` extra installs it)
  batched   sweep_task_group(batching="batched") through the deployed stack (scripts/stack.sh: PostgreSQL,
            scheduler, dag-processor, triggerer, api-server; LocalExecutor), 2 runner tasks x 8 leases
  mapped    one task per trial (sweep_task_group(batching="mapped")) through the same stack; N <= 1,000 only
            (Airflow maps at most 1,024 tasks per task)

ideal = N x 1 s / 16. Each line gives the makespan (first trial start to last trial end, what Ray's figure
measures: the whole ``tune.run``; for the stack: the DAG run's first task start to its last task end) and its
ratio to ideal.

    .venv/bin/python bench/peer_ray_tune.py                  # N = 10,000
    .venv/bin/python bench/peer_ray_tune.py --quick          # N = 1,000
    .venv/bin/python bench/peer_ray_tune.py --parts ray --ray-python /path/to/venv-with-ray/bin/python
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SLOTS = 16
#: Ray Tune's published figure for the same workload (docs "Scalability and overhead benchmarks")
RAY_PUBLISHED = {"trials": 10_000, "seconds": 715.0, "ideal": 625.0}


def ray_child(n: int) -> None:
    """Run Ray Tune's own release test for ``n`` one-second trials on 16 CPU slots; print one JSON line."""
    import ray
    from ray.tune.utils.release_test_util import timed_tune_run

    os.environ["TUNE_GLOBAL_CHECKPOINT_S"] = "100"  # as Ray's test sets it
    with tempfile.TemporaryDirectory(prefix="gpusched-bench-ray-") as tmp:
        os.environ["TEST_OUTPUT_JSON"] = os.path.join(tmp, "out.json")
        ray.init(num_cpus=SLOTS, include_dashboard=False, logging_level="ERROR")
        timed_tune_run(name="bookkeeping overhead", num_samples=n, results_per_second=1, trial_length_s=1,
                       max_runtime=10**6, storage_path=os.path.join(tmp, "results"), verbose=0)
        result = json.loads(Path(os.environ["TEST_OUTPUT_JSON"]).read_text())
        ray.shutdown()
    print("RAY_RESULT " + json.dumps({"makespan": result["time_taken"], "states": result["trial_states"],
                                      "ray": ray.__version__}), flush=True)


def run_ray(n: int, python: str) -> dict:
    out = subprocess.run([python, __file__, "--ray-child", str(n)], capture_output=True, text=True)
    lines = [line for line in out.stdout.splitlines() if line.startswith("RAY_RESULT ")]
    if out.returncode != 0 or not lines:
        raise SystemExit(f"Ray Tune's run failed ({out.returncode}); is ray[tune] installed for {python}? "
                         f"(pip install -e '.[bench]')\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    return json.loads(lines[-1][len("RAY_RESULT "):])


def run_stack(n: int, parts: set[str], keep: bool) -> dict:
    sys.path.insert(0, str(REPO))
    sys.path.insert(0, str(REPO / "bench"))
    from stack_makespan import COMPONENTS, MemoryWatch, run_through_stack, tree_pss

    from tests.stack.client import Stack, StackConfig

    config = StackConfig(REPO / ".stack-bench-peer", 28097, 55447, REPO / "bench" / "peer_dags",
                         f"export GPUSCHED_BENCH_TRIALS={n}\n"
                         f"export AIRFLOW__GPUSCHED__SIMULATE_GPUS={SLOTS}x24GiB\n"
                         "export AIRFLOW__CORE__MAX_MAP_LENGTH=1024")
    config.run("destroy", check=False)
    t0 = time.monotonic()
    config.run("up")
    out = {"stack_up": time.monotonic() - t0}
    try:
        stack = Stack(config)
        dags = [d for d, part in (("peer_batched", "batched"), ("peer_mapped", "mapped")) if part in parts]
        for dag_id in dags:
            stack.wait_for_dag(dag_id, timeout=600)
        stack.ensure_pool("peer_gpus", SLOTS)
        time.sleep(5)
        out["idle_pss"] = {c: tree_pss(config.pid(c)) for c in COMPONENTS}
        for dag_id in dags:
            with MemoryWatch(config) as watch:
                out[dag_id] = run_through_stack(stack, dag_id, timeout=4 * 60 * 60)
            out[dag_id]["peak_pss"] = dict(watch.peak)
            print(f"{dag_id}: {out[dag_id]}", flush=True)
    finally:
        if not keep:
            config.run("destroy", check=False)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=10_000)
    parser.add_argument("--quick", action="store_true", help="N = 1,000")
    parser.add_argument("--parts", default="ray,batched,mapped", help="comma-separated: ray, batched, mapped")
    parser.add_argument("--ray-python", default=sys.executable, help="an interpreter with ray[tune] installed")
    parser.add_argument("--keep", action="store_true", help="leave the stack running (.stack-bench-peer/)")
    parser.add_argument("--ray-child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.ray_child:
        ray_child(args.ray_child)
        return
    import psutil

    n = 1000 if args.quick else args.trials
    parts = set(args.parts.split(","))
    if n > 1000 and "mapped" in parts:
        parts.discard("mapped")  # Airflow maps at most 1,024 task instances per task
        print("mapped: left out above 1,000 trials (Airflow maps at most 1,024 tasks per task)", flush=True)
    ideal = n * 1.0 / SLOTS
    print(f"# peer benchmark, {time.strftime('%Y-%m-%d')} on {platform.node()} ({os.cpu_count()} cores, "
          f"{psutil.virtual_memory().total / 2**30:.0f} GiB), Python {platform.python_version()}; {n} one-second "
          f"trials on {SLOTS} slots; ideal {ideal:.1f} s", flush=True)
    rows = []
    if "ray" in parts:
        ray = run_ray(n, args.ray_python)
        rows.append((f"Ray Tune {ray['ray']} (its release test)", ray["makespan"]))
        print(f"ray: {ray}", flush=True)
    if parts & {"batched", "mapped"}:
        stack = run_stack(n, parts, args.keep)
        for dag_id, name in (("peer_batched", "gpusched batched, through the stack"),
                             ("peer_mapped", "gpusched one task per trial, stack")):
            if dag_id in stack:
                rows.append((f"{name} ({stack[dag_id]['tasks']} tasks)", stack[dag_id]["makespan"]))
        if "idle_pss" in stack:
            print(f"\n{'component':<14} {'idle PSS MiB':>12} " + " ".join(f"{d + ' peak':>18}" for d in stack
                                                                          if d.startswith("peer_")))
            for c, idle in stack["idle_pss"].items():
                peaks = " ".join(f"{stack[d]['peak_pss'][c] / 2**20:>18.0f}" for d in stack if d.startswith("peer_"))
                print(f"{c:<14} {idle / 2**20:>12.0f} {peaks}")
    print(f"\n{'way':<52} {'makespan s':>10} {'x ideal':>8} {'lost per trial s':>16}")
    for name, makespan in rows:
        print(f"{name:<52} {makespan:>10.1f} {makespan / ideal:>8.3f} {(makespan - ideal) * SLOTS / n:>16.3f}")
    print(f"{'Ray Tune, published (10,000 trials, 16 CPUs)':<52} {RAY_PUBLISHED['seconds']:>10.1f} "
          f"{RAY_PUBLISHED['seconds'] / RAY_PUBLISHED['ideal']:>8.3f}")


if __name__ == "__main__":
    main()
