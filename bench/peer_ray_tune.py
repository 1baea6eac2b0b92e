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
  slurm     sweep_task_group(backend="slurm", batching="batched") through the same stack on the project's Slurm test
            cluster (scripts/slurm-cluster.sh: 2 nodes x 8 CPUs = 16 slots; one CPU per trial, no GPU): job arrays of
            up to 1,000 trials. Every Slurm command the stack runs is counted (a logging wrapper first on the
            stack's PATH), and a one-task canary DAG is triggered every 15 s meanwhile: the delay from its trigger
            to its task's start, next to the same delay on the idle stack

After each sweep: the durations of its tasks other than the trial runners (plan, collect with the leaderboard and
the end report), the Sweeps tab's API answer (size, time: median of 3), and `gpusched sweep results` (time).
Memory: the peak PSS of each component's process tree (forked workers' shared pages counted once) and the peak RSS
of its main process, sampled every second.

ideal = N x 1 s / 16. Each line gives the makespan (first trial start to last trial end, what Ray's figure
measures: the whole ``tune.run``; for the stack: the DAG run's first task start to its last task end) and its
ratio to ideal.

    .venv/bin/python bench/peer_ray_tune.py                  # N = 10,000
    .venv/bin/python bench/peer_ray_tune.py --quick          # N = 1,000
    .venv/bin/python bench/peer_ray_tune.py --parts ray --ray-python /path/to/venv-with-ray/bin/python
    .venv/bin/python bench/peer_ray_tune.py --parts slurm    # needs root (the test cluster's namespaces)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SLOTS = 16
SLURM_POLL_INTERVAL = (
    2.0  # the stack's [gpusched] slurm_poll_interval in the Slurm part (squeue calls are counted per interval)
)
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
        timed_tune_run(
            name="bookkeeping overhead",
            num_samples=n,
            results_per_second=1,
            trial_length_s=1,
            max_runtime=10**6,
            storage_path=os.path.join(tmp, "results"),
            verbose=0,
        )
        result = json.loads(Path(os.environ["TEST_OUTPUT_JSON"]).read_text())
        ray.shutdown()
    print(
        "RAY_RESULT "
        + json.dumps({"makespan": result["time_taken"], "states": result["trial_states"], "ray": ray.__version__}),
        flush=True,
    )


def run_ray(n: int, python: str) -> dict:
    out = subprocess.run([python, __file__, "--ray-child", str(n)], capture_output=True, text=True)
    lines = [line for line in out.stdout.splitlines() if line.startswith("RAY_RESULT ")]
    if out.returncode != 0 or not lines:
        raise SystemExit(
            f"Ray Tune's run failed ({out.returncode}); is ray[tune] installed for {python}? "
            f"(pip install -e '.[bench]')\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
        )
    return json.loads(lines[-1][len("RAY_RESULT ") :])


SLURM_COMMANDS = ("sbatch", "squeue", "sacct", "scancel", "scontrol")
STACK_DAGS = (("peer_batched", "batched"), ("peer_mapped", "mapped"), ("peer_slurm", "slurm"))


def command_wrappers(directory: Path) -> Path:
    """A folder of wrappers that log each Slurm command's start (time, name) to ``calls.log``, then exec it."""
    import shutil

    directory.mkdir(parents=True, exist_ok=True)
    log = directory / "calls.log"
    for name in SLURM_COMMANDS:
        real = shutil.which(name)
        if real is None:
            raise SystemExit(
                f"{name} not found: the slurm part needs Slurm's client commands (apt-get install "
                "slurm-client, or scripts/slurm-cluster.sh up)"
            )
        wrapper = directory / name
        wrapper.write_text(f'#!/bin/sh\nprintf "%s {name}\\n" "$(date +%s.%N)" >> "{log}"\nexec "{real}" "$@"\n')
        wrapper.chmod(0o755)
    return log


def slurm_calls(log: Path, start: float, end: float, interval: float) -> dict:
    """Slurm commands run between ``start`` and ``end``: totals, and squeue calls per poll interval."""
    calls = [(float(t), name) for t, name in (line.split() for line in log.read_text().splitlines() if line)]
    calls = [(t, name) for t, name in calls if start <= t <= end]
    totals = {name: sum(1 for _, n in calls if n == name) for name in SLURM_COMMANDS}
    squeue = sorted(t for t, n in calls if n == "squeue")
    busiest = max((sum(1 for u in squeue if t <= u < t + interval) for t in squeue), default=0)
    return {
        **totals,
        "window_s": end - start,
        "squeue_per_interval": totals["squeue"] / max(1.0, (end - start) / interval),
        "squeue_most_in_one_interval": busiest,
    }


def canary_delay(stack, run_id: str) -> float:
    """Seconds from the canary run's creation (queued) to its task's start."""
    from stack_makespan import timestamp

    run = stack.run("peer_canary", run_id)
    [ti] = stack.task_instances("peer_canary", run_id)
    return timestamp(ti["start_date"]) - timestamp(run["queued_at"])


def canaries(stack, count: int) -> list[float]:
    delays = []
    for _ in range(count):
        run_id = stack.trigger("peer_canary")
        if stack.wait_run("peer_canary", run_id, timeout=600) != "success":
            raise SystemExit(f"peer_canary {run_id} failed")
        delays.append(canary_delay(stack, run_id))
    return delays


def around_the_sweep(stack, dag_id: str, run_id: str) -> dict:
    """What a user does with a finished sweep, timed: its collect/report tasks (from the run), the Sweeps tab's
    API answer, and `gpusched sweep results`."""
    from stack_makespan import timestamp

    tis = stack.task_instances(dag_id, run_id)
    runners = ("run_batch", "trial", "trial_array")
    steps = {
        t["task_id"].rsplit(".", 1)[-1]: round(timestamp(t["end_date"]) - timestamp(t["start_date"]), 2)
        for t in tis
        if t["task_id"].rsplit(".", 1)[-1] not in runners and t.get("end_date")
    }
    api, size = [], 0
    for _ in range(3):
        t0 = time.monotonic()
        response = stack.http.get(f"{stack.url}/gpusched/api/dags/{dag_id}/sweeps", params={"run_id": run_id})
        api.append(time.monotonic() - t0)
        if response.status_code != 200:
            raise SystemExit(f"Sweeps API for {dag_id}: {response.status_code} {response.text[:300]}")
        size = len(response.content)
    folder = stack.xcom(dag_id, run_id, f"{dag_id}.collect")["folder"]
    t0 = time.monotonic()
    out = stack.gpusched("sweep", "results", folder)
    results_s = time.monotonic() - t0
    if out.returncode != 0:
        raise SystemExit(f"gpusched sweep results {folder}: {out.stderr[-1000:]}")
    return {"steps_s": steps, "api_s": sorted(api)[1], "api_bytes": size, "results_cli_s": results_s}


def run_stack(n: int, parts: set[str], keep: bool, pool_slots: int = SLOTS, settings: list[str] = ()) -> dict:
    sys.path.insert(0, str(REPO))
    sys.path.insert(0, str(REPO / "bench"))
    from stack_makespan import COMPONENTS, MemoryWatch, run_through_stack, slot_breakdown, tree_pss

    from tests.stack.client import Stack, StackConfig

    directory = REPO / ".stack-bench-peer"
    wrappers = directory.parent / ".stack-bench-peer-bin"  # outside the stack's folder, which `destroy` removes
    env = (
        f"export GPUSCHED_BENCH_TRIALS={n}\n"
        f"export AIRFLOW__GPUSCHED__SIMULATE_GPUS={SLOTS}x24GiB\n"
        "export AIRFLOW__CORE__MAX_MAP_LENGTH=1024\n"
        f"export AIRFLOW__GPUSCHED__SLURM_POLL_INTERVAL={SLURM_POLL_INTERVAL}"
        + "".join(f"\nexport AIRFLOW__{setting}" for setting in settings)
    )
    calls_log = None
    if "slurm" in parts:
        calls_log = command_wrappers(wrappers)
        env += f'\nexport PATH="{wrappers}:$PATH"'
    config = StackConfig(directory, 28101, 55451, REPO / "bench" / "peer_dags", env)  # ports no test or bench uses
    config.run("destroy", check=False)
    t0 = time.monotonic()
    config.run("up")
    out: dict = {"stack_up": time.monotonic() - t0}
    try:
        stack = Stack(config)
        dags = [d for d, part in STACK_DAGS if part in parts]
        for dag_id in dags:
            stack.wait_for_dag(dag_id, timeout=600)
        stack.ensure_pool("peer_gpus", pool_slots, include_deferred=pool_slots > SLOTS)
        time.sleep(5)
        out["idle_pss"] = {c: tree_pss(config.pid(c)) for c in COMPONENTS}
        if "slurm" in parts:
            out["canary_idle"] = canaries(stack, 3)
        for dag_id in dags:
            during = None
            if dag_id == "peer_slurm":
                canary_runs: list[str] = []
                last = [0.0]

                def during(
                    last: list[float] = last, canary_runs: list[str] = canary_runs
                ) -> None:  # a canary every 15 s while the Slurm sweep runs
                    if time.monotonic() - last[0] >= 15:
                        last[0] = time.monotonic()
                        canary_runs.append(stack.trigger("peer_canary"))

            t_start = time.time()
            with MemoryWatch(config) as watch:
                out[dag_id] = run_through_stack(stack, dag_id, timeout=4 * 60 * 60, during=during)
            out[dag_id]["peak_pss"] = dict(watch.peak)
            out[dag_id]["peak_rss"] = dict(watch.peak_rss)
            out[dag_id].update(around_the_sweep(stack, dag_id, out[dag_id]["run_id"]))
            if dag_id == "peer_mapped":
                out[dag_id]["slot"] = slot_breakdown(stack, dag_id, out[dag_id]["run_id"], ".trial", SLOTS)
            if dag_id == "peer_slurm":
                for run_id in canary_runs:
                    stack.wait_run("peer_canary", run_id, timeout=600)
                out[dag_id]["canary_during"] = [canary_delay(stack, r) for r in canary_runs]
                out[dag_id]["slurm_calls"] = slurm_calls(calls_log, t_start, time.time(), SLURM_POLL_INTERVAL)
            print(f"{dag_id}: {out[dag_id]}", flush=True)
    finally:
        if not keep:
            config.run("destroy", check=False)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=10_000)
    parser.add_argument("--quick", action="store_true", help="N = 1,000")
    parser.add_argument(
        "--parts", default="ray,batched,mapped,slurm", help="comma-separated: ray, batched, mapped, slurm"
    )
    parser.add_argument("--ray-python", default=sys.executable, help="an interpreter with ray[tune] installed")
    parser.add_argument("--keep", action="store_true", help="leave the stack running (.stack-bench-peer/)")
    parser.add_argument(
        "--pool-slots", type=int, default=SLOTS, help="slots of the one-task-per-trial pool (default: one per GPU)"
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SECTION__KEY=VALUE",
        help="an Airflow setting for the stack, e.g. GPUSCHED__DEFER_AFTER=30 (repeatable)",
    )
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
    print(
        f"# peer benchmark, {time.strftime('%Y-%m-%d')} on {platform.node()} ({os.cpu_count()} cores, "
        f"{psutil.virtual_memory().total / 2**30:.0f} GiB), Python {platform.python_version()}; {n} one-second "
        f"trials on {SLOTS} slots; ideal {ideal:.1f} s",
        flush=True,
    )
    rows = []
    if "ray" in parts:
        ray = run_ray(n, args.ray_python)
        rows.append((f"Ray Tune {ray['ray']} (its release test)", ray["makespan"]))
        print(f"ray: {ray}", flush=True)
    if parts & {"batched", "mapped", "slurm"}:
        stack = run_stack(n, parts, args.keep, args.pool_slots, args.set)
        names = {
            "peer_batched": "gpusched batched, through the stack",
            "peer_mapped": "gpusched one task per trial",
            "peer_slurm": "gpusched Slurm arrays, through the stack",
        }
        ran = [d for d, _ in STACK_DAGS if d in stack]
        for dag_id in ran:
            rows.append((f"{names[dag_id]} ({stack[dag_id]['tasks']} tasks)", stack[dag_id]["makespan"]))
        print(f"\n{'component':<14} {'idle PSS MiB':>12} " + " ".join(f"{d[5:] + ' PSS/RSS MiB':>22}" for d in ran))
        for c, idle in stack["idle_pss"].items():
            peaks = " ".join(
                f"{stack[d]['peak_pss'][c] / 2**20:>15.0f}/{stack[d]['peak_rss'][c] / 2**20:<6.0f}" for d in ran
            )
            print(f"{c:<14} {idle / 2**20:>12.0f} {peaks}")
        print(f"\n{'sweep':<14} {'steps besides the trials (s)':<52} {'API s':>6} {'API kB':>7} {'results s':>9}")
        for d in ran:
            steps = ", ".join(f"{k} {v:.2f}" for k, v in stack[d]["steps_s"].items())
            print(
                f"{d[5:]:<14} {steps:<52} {stack[d]['api_s']:>6.2f} {stack[d]['api_bytes'] / 1e3:>7.0f} "
                f"{stack[d]['results_cli_s']:>9.2f}"
            )
        if stack.get("peer_mapped", {}).get("slot"):
            print(
                "\none task per trial, a GPU slot's time per trial (s): "
                + ", ".join(f"{k} {v:.2f}" for k, v in stack["peer_mapped"]["slot"].items())
            )
        if "peer_slurm" in stack:
            calls, idle, busy = (
                stack["peer_slurm"]["slurm_calls"],
                stack["canary_idle"],
                stack["peer_slurm"]["canary_during"],
            )
            print(
                f"\nSlurm commands during the Slurm sweep ({calls['window_s']:.0f} s): "
                + ", ".join(f"{k} {calls[k]}" for k in SLURM_COMMANDS)
                + f"; squeue per poll interval {calls['squeue_per_interval']:.2f} (most in one interval: "
                f"{calls['squeue_most_in_one_interval']})"
            )
            print(
                f"canary DAG, trigger to task start: idle stack median {statistics.median(idle):.1f} s "
                f"(max {max(idle):.1f}); during the Slurm sweep median "
                f"{statistics.median(busy) if busy else float('nan'):.1f} s (max {max(busy, default=0):.1f}, "
                f"{len(busy)} runs)"
            )
    print(f"\n{'way':<52} {'makespan s':>10} {'x ideal':>8} {'lost per trial s':>16}")
    for name, makespan in rows:
        print(f"{name:<52} {makespan:>10.1f} {makespan / ideal:>8.3f} {(makespan - ideal) * SLOTS / n:>16.3f}")
    print(
        f"{'Ray Tune, published (10,000 trials, 16 CPUs)':<52} {RAY_PUBLISHED['seconds']:>10.1f} "
        f"{RAY_PUBLISHED['seconds'] / RAY_PUBLISHED['ideal']:>8.3f}"
    )


if __name__ == "__main__":
    main()
