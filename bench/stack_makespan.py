"""Benchmark: what a real Airflow deployment adds to GPU trials (SIMULATED GPUs, LocalExecutor, PostgreSQL).

Starts its own stack (scripts/stack.sh in .stack-bench/, ports 28093/55444; removed afterwards unless --keep)
and runs the same N one-GPU trials of S seconds on 4 simulated GPUs three ways, in one run:

  launcher alone   the core launcher driven by 8 threads (bench/local_gpu_launcher.py's layout): the floor
  mapped           one LocalGPUOperator task per trial (bench_mapped), in a pool of 4 slots (one per GPU)
  batched sweep    sweep_task_group(batching="batched"): 2 runner tasks, 2 leases in flight each

ideal = N x S / 4. "Airflow per trial" is (makespan - ideal) x 4 / N: GPU-slot time lost per trial. Then idle
filling through the stack: a normal 4-GPU task on empty GPUs, and again while 4 idle-class fillers hold every GPU
(they yield: SIGTERM, checkpoint, relaunch) — the delay from the task's start to its GPU work's start, both
times (on empty GPUs: the median of 3 runs), and the GPU utilisation while the fillers ran (the lease ledger's GPU-seconds / 4 x the window). Also:
the stack's start-up time and each component's memory (PSS of its process tree) idle and at the peak of the
mapped run.

    .venv/bin/python bench/stack_makespan.py [--trials 256] [--seconds 1] [--parts mapped] [--pool-slots 8]
        [--set GPUSCHED__DEFER_AFTER=30] [--set SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME=0.2] [--keep]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import re
import statistics
import sys
import threading
import time
from datetime import datetime
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from local_gpu_launcher import run_layout

from airflow_provider_gpusched.core.gpu.accounting import GPUTimeLedger
from airflow_provider_gpusched.core.gpu.placement import GPURequest
from tests.stack.client import Stack, StackConfig

COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer")
SLOTS = 4
FAST_IDLE = '{"idle": {"local": {"idle_for": 0, "min_runtime": 0, "grace_period": 3, "backoff": 2, "max_backoff": 4}}}'


def tree_pss(pid: int) -> int:
    """Memory of ``pid`` and its descendants (bytes): their PSS (proportional set size), so pages that forked
    workers share are counted once, not once per process as RSS would."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    total = 0
    for proc in procs:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            total += proc.memory_full_info().pss
    return total


class MemoryWatch:
    """The largest PSS of each component's process tree while running (sampled every second)."""

    def __init__(self, config: StackConfig):
        self.pids = {c: config.pid(c) for c in COMPONENTS}
        self.peak = dict.fromkeys(COMPONENTS, 0)
        self.peak_rss = dict.fromkeys(COMPONENTS, 0)  # of the component's main process alone
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.is_set():
            for c, pid in self.pids.items():
                self.peak[c] = max(self.peak[c], tree_pss(pid))
                with contextlib.suppress(psutil.NoSuchProcess):
                    self.peak_rss[c] = max(self.peak_rss[c], psutil.Process(pid).memory_info().rss)
            self._stop.wait(1.0)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def _cpu(proc: psutil.Process, reaped: bool = True) -> float:
    try:
        t = proc.cpu_times()
    except psutil.NoSuchProcess:
        return 0.0
    return t.user + t.system + ((t.children_user + t.children_system) if reaped else 0.0)


def cpu_snapshot(config: StackConfig) -> dict[str, float]:
    """CPU seconds used so far by each part of the deployment (a difference of two snapshots is what a run
    cost): the scheduler's own loop; the LocalExecutor's workers (each supervises its task); the task processes
    and what they started (the trial commands), reaped by the workers; the api-server, triggerer, dag-processor
    (with their children) and PostgreSQL; and the whole machine (/proc/stat, busy time of every core)."""
    out: dict[str, float] = {}
    scheduler = psutil.Process(config.pid("scheduler"))
    out["scheduler loop"] = _cpu(scheduler, reaped=False)
    workers = [p for p in scheduler.children() if "supervisor" not in " ".join(p.cmdline())]
    out["executor workers (supervisors)"] = sum(_cpu(w, reaped=False) for w in workers)
    out["tasks and their trials"] = sum(
        w.cpu_times().children_user + w.cpu_times().children_system for w in workers if w.is_running()
    )
    for c in ("api-server", "triggerer", "dag-processor"):
        root = psutil.Process(config.pid(c))
        out[c] = _cpu(root) + sum(_cpu(p) for p in root.children(recursive=True))
    data = (config.directory / "pgdata").read_text().strip()
    postmaster = psutil.Process(int((Path(data) / "data" / "postmaster.pid").read_text().split()[0]))
    out["postgresql"] = _cpu(postmaster) + sum(_cpu(p) for p in postmaster.children(recursive=True))
    with open("/proc/stat") as fh:
        fields = [float(x) for x in fh.readline().split()[1:]]
    out["machine, all cores"] = (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")
    return out


def cpu_used(before: dict[str, float], after: dict[str, float], trials: int) -> dict[str, float]:
    """CPU seconds per trial of each part between two snapshots (processes that ended between them are lost
    from their part, so "other" = machine - the parts holds them and everything else on the machine)."""
    used = {k: max(0.0, after[k] - before.get(k, 0.0)) for k in after}
    used["other"] = used["machine, all cores"] - sum(v for k, v in used.items() if k != "machine, all cores")
    return {k: v / trials for k, v in used.items()}


def timestamp(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def run_through_stack(stack: Stack, dag_id: str, timeout: float, during=None) -> dict:
    """Trigger ``dag_id``; makespan from the first task's start to the last task's end (the run's own
    queueing before its first task is reported apart). ``during()`` is called every second meanwhile."""
    t0 = time.time()
    run_id = stack.trigger(dag_id)
    state = stack.wait_run(dag_id, run_id, timeout=timeout, during=during)
    wall = time.time() - t0
    tis = stack.task_instances(dag_id, run_id)
    if state != "success":
        bad = [(t["task_id"], t.get("map_index"), t["state"]) for t in tis if t["state"] != "success"]
        raise SystemExit(f"{dag_id} ended {state}: {bad[:10]}")
    starts = [timestamp(t["start_date"]) for t in tis if t.get("start_date")]
    ends = [timestamp(t["end_date"]) for t in tis if t.get("end_date")]
    tries = sum(t["try_number"] for t in tis)
    return {"makespan": max(ends) - min(starts), "wall": wall, "tasks": len(tis), "tries": tries, "run_id": run_id}


def slot_breakdown(stack: Stack, dag_id: str, run_id: str, task_id: str, slots: int) -> dict:
    """Where a pool slot's time goes, per trial, for one-task-per-trial runs (``task_id``'s mapped instances, one
    GPU each): from the REST API's queued/start/end stamps and the lease ledger's GPU work (each record's end
    and length). ``scheduler`` is slot time with no task queued or running (the scheduler had not yet queued the
    next task); ``queued->start`` the executor and the task's start; ``start->GPU`` parsing, the operator, the
    lease and the child's start; ``GPU->end`` the child's exit, XComs and the task's end. Seconds per trial."""
    tis = [t for t in stack.task_instances(dag_id, run_id) if t["task_id"].endswith(task_id) and t.get("end_date")]
    owners = {f"{dag_id}.{t['task_id']}[{t['map_index']}] ({run_id})": t for t in tis}
    work = {}
    for record in GPUTimeLedger(str(stack.lease_dir)).records():
        ti = owners.get(re.sub(r", try \d+\)$", ")", str(record.get("owner", ""))))
        if ti is not None:
            work[ti["map_index"]] = (record["time"] - record["seconds"], record["time"])
    if not tis or len(work) != len(tis):
        return {}
    n = len(tis)
    start = min(timestamp(t["queued_when"]) for t in tis)
    end = max(timestamp(t["end_date"]) for t in tis)
    queued = sum(timestamp(t["start_date"]) - timestamp(t["queued_when"]) for t in tis)
    to_gpu = sum(work[t["map_index"]][0] - timestamp(t["start_date"]) for t in tis)
    from_gpu = sum(timestamp(t["end_date"]) - work[t["map_index"]][1] for t in tis)
    gpu = sum(b - a for a, b in work.values())
    held = sum(timestamp(t["end_date"]) - timestamp(t["queued_when"]) for t in tis)
    return {
        "scheduler": (slots * (end - start) - held) / n,
        "queued->start": queued / n,
        "start->GPU": to_gpu / n,
        "GPU work": gpu / n,
        "GPU->end": from_gpu / n,
    }


def normal_delay(stack: Stack, out: Path) -> float:
    """Run bench_normal; seconds from its task's start to its GPU work's start."""
    run_id = stack.trigger("bench_normal", out=str(out))
    if stack.wait_run("bench_normal", run_id, timeout=600) != "success":
        raise SystemExit(f"bench_normal {run_id} failed")
    [ti] = stack.task_instances("bench_normal", run_id)
    return float((out / f"{run_id}.start").read_text()) - timestamp(ti["start_date"])


def idle_filling(stack: Stack) -> dict:
    out = stack.dir / "bench-out"
    out.mkdir(exist_ok=True)
    empty = statistics.median(normal_delay(stack, out) for _ in range(3))  # the first one warms caches up
    t0 = time.time()
    fill = stack.trigger("bench_fillers")

    def idle_leases() -> int:
        return sum(1 for p in stack.lease_dir.glob("*.json") if '"job_class": "idle"' in p.read_text())

    deadline = time.monotonic() + 600
    while idle_leases() < 4:
        if time.monotonic() > deadline:
            raise SystemExit("the 4 fillers did not all start within 600 s")
        time.sleep(1)
    time.sleep(5)
    busy = normal_delay(stack, out)
    if stack.wait_run("bench_fillers", fill, timeout=1200) != "success":
        raise SystemExit("bench_fillers failed")
    tis = stack.task_instances("bench_fillers", fill)
    window = max(timestamp(t["end_date"]) for t in tis) - min(timestamp(t["start_date"]) for t in tis)
    start = min(timestamp(t["start_date"]) for t in tis)
    records = [r for r in GPUTimeLedger(str(stack.lease_dir)).records() if r.get("time", 0) >= t0]
    used = sum(r.get("gpu_seconds", 0) for r in records if r.get("time", 0) >= start)
    return {
        "empty": empty,
        "busy": busy,
        "utilisation": used / (SLOTS * window),
        "window": window,
        "preemptions": sum(1 for r in records if r.get("preempted")),
        "lost": sum(r.get("lost_gpu_seconds", 0) for r in records),
        "filler_tries": sorted({t["try_number"] for t in tis}),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=256)
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--keep", action="store_true", help="leave the stack running (.stack-bench/)")
    parser.add_argument(
        "--parts",
        default="launcher,mapped,batched,idle",
        help="comma-separated: launcher, mapped, batched, idle (default: all)",
    )
    parser.add_argument(
        "--pool-slots", type=int, default=SLOTS, help="slots of the mapped tasks' pool (default: one per GPU)"
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SECTION__KEY=VALUE",
        help="an Airflow setting for the stack, e.g. GPUSCHED__DEFER_AFTER=30 (repeatable)",
    )
    args = parser.parse_args()
    n, s = args.trials, args.seconds
    ideal = n * s / SLOTS
    config = StackConfig(
        REPO / ".stack-bench",
        28093,
        55444,
        REPO / "bench" / "stack_dags",
        f"export GPUSCHED_BENCH_TRIALS={n} GPUSCHED_BENCH_SECONDS={s:g}\n"
        f"export AIRFLOW__GPUSCHED__JOB_CLASSES='{FAST_IDLE}'"
        + "".join(f"\nexport AIRFLOW__{setting}" for setting in args.set),
    )
    print(
        f"# stack benchmark, {time.strftime('%Y-%m-%d')} on {platform.node()} ({os.cpu_count()} cores, "
        f"{psutil.virtual_memory().total / 2**30:.0f} GiB), Python {platform.python_version()}; "
        f"{n} trials x {s:g} s, 4 SIMULATED GPUs, one GPU per trial; ideal makespan {ideal:.1f} s; mapped "
        f"tasks' pool {args.pool_slots} slots; settings {args.set or 'as scripts/stack.sh sets them'}",
        flush=True,
    )

    parts = set(args.parts.split(","))
    rows = []
    if "launcher" in parts:
        floor = run_layout(n, s, GPURequest(gpus=1), SLOTS, 8)
        rows.append(("launcher alone (8 threads)", floor["makespan"], floor["makespan"]))
        print(f"launcher alone: {floor['makespan']:.1f} s", flush=True)

    config.run("destroy", check=False)
    t0 = time.monotonic()
    config.run("up")
    print(f"stack up (PostgreSQL initdb, db migrate, 4 components healthy): {time.monotonic() - t0:.0f} s", flush=True)
    idle_fill = None
    try:
        stack = Stack(config)
        for dag_id in ("bench_mapped", "bench_batched", "bench_fillers", "bench_normal"):
            stack.wait_for_dag(dag_id, timeout=300)
        # more slots than GPUs: deferred tasks count, as in the pools `gpusched pools sync` makes then
        stack.ensure_pool("bench_gpus", args.pool_slots, include_deferred=args.pool_slots > SLOTS)
        time.sleep(10)  # let the start-up settle before the idle memory figures
        idle = {c: tree_pss(config.pid(c)) for c in COMPONENTS}
        print(f"idle PSS MiB: { {c: round(v / 2**20) for c, v in idle.items()} }", flush=True)
        with MemoryWatch(config) as watch:
            if "mapped" in parts:
                before = cpu_snapshot(config)
                mapped = run_through_stack(stack, "bench_mapped", timeout=60 * 60)
                cpu = cpu_used(before, cpu_snapshot(config), n)
                rows.append((f"mapped: {mapped['tasks']} LocalGPUOperator tasks", mapped["makespan"], mapped["wall"]))
                print(f"mapped: {mapped}", flush=True)
                slot = slot_breakdown(stack, "bench_mapped", mapped["run_id"], "trial", args.pool_slots)
                print(
                    "mapped, a pool slot's time per trial (s): " + ", ".join(f"{k} {v:.2f}" for k, v in slot.items()),
                    flush=True,
                )
                print(
                    f"mapped, CPU seconds per trial ({os.cpu_count()} cores): "
                    + ", ".join(f"{k} {v:.3f}" for k, v in cpu.items()),
                    flush=True,
                )
            if "batched" in parts:
                batched = run_through_stack(stack, "bench_batched", timeout=60 * 60)
                rows.append((f"batched sweep: {batched['tasks']} tasks", batched["makespan"], batched["wall"]))
                print(f"batched: {batched}", flush=True)
            if "idle" in parts:
                idle_fill = idle_filling(stack)
                print(f"idle filling: {idle_fill}", flush=True)
    finally:
        if not args.keep:
            config.run("destroy", check=False)

    print(f"\n{'way':<34} {'makespan s':>10} {'trigger->end s':>14} {'x ideal':>8} {'lost per trial s':>16}")
    for name, makespan, wall in rows:
        print(
            f"{name:<34} {makespan:>10.1f} {wall:>14.1f} {makespan / ideal:>8.2f} "
            f"{(makespan - ideal) * SLOTS / n:>16.2f}"
        )
    if idle_fill:
        f = idle_fill
        print(
            f"\nidle filling: a normal 4-GPU task's GPU work started {f['empty']:.2f} s after the task on empty "
            f"GPUs (median of 3), {f['busy']:.2f} s with 4 fillers holding them (added {f['busy'] - f['empty']:.2f} s); GPU "
            f"utilisation while the fillers ran: {f['utilisation']:.1%} of {f['window']:.0f} s; "
            f"{f['preemptions']:.0f} preemption(s), {f['lost']:.1f} GPU-s lost; filler tries {f['filler_tries']}"
        )
    print(f"\n{'component':<14} {'idle PSS MiB':>12} {'peak PSS MiB (this run)':>24}")
    for c in COMPONENTS:
        print(f"{c:<14} {idle[c] / 2**20:>12.0f} {watch.peak[c] / 2**20:>24.0f}")
    print(f"{'total':<14} {sum(idle.values()) / 2**20:>12.0f} {sum(watch.peak.values()) / 2**20:>24.0f}")


if __name__ == "__main__":
    main()
