"""Benchmark: idle-time filling on 4 SIMULATED GPUs with a mixed workload (real processes and signals).

Normal jobs arrive at random times (Poisson, seeded), each wanting 1-4 whole GPUs for a few seconds.
Three runs of the same arrivals:

  normal only        no fill-in work: GPUs sit idle between normal jobs
  fill, preemptive   idle-class fillers (1 GPU each, checkpoint every second) take every free GPU and
                     yield to normal work (SIGTERM, grace, SIGKILL, relaunch from the checkpoint)
  fill, no preempt   the same fillers, not preemptible (what a polite folder of shell scripts does: start
                     fill-in work only when nobody waits, never kill it): normal work waits until the
                     fillers in its way finish their work unit

Reported: GPU utilisation (GPU-seconds held / GPU-seconds available), useful utilisation (minus work lost
to preemption), the normal jobs' wait from arrival to start (mean, p95, max), GPU-seconds lost to
preemption and the number of preemptions.

    .venv/bin/python bench/idle_fill.py [--seconds 60] [--rate 0.25] [--seeds 7,8,9] [--modes ...]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import random
import statistics
import sys
import tempfile
import threading
import time

from airflow_provider_gpusched.core.gpu.inventory import SimulatedInventory
from airflow_provider_gpusched.core.gpu.leases import LeaseManager
from airflow_provider_gpusched.core.gpu.placement import GPURequest
from airflow_provider_gpusched.core.gpu.supervisor import GPUWorkFailed, GPUWorkSupervisor, Work
from airflow_provider_gpusched.core.job_classes import JobClassMapping

GPUS = 4
FILLER = """
import os, pathlib, signal, sys, time
ck = pathlib.Path(os.environ["GPUSCHED_CHECKPOINT_DIR"]) / "step"
step = int(ck.read_text()) if ck.exists() else 0
stop = []
signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
while step < int(sys.argv[1]) and not stop:
    time.sleep(0.1)
    step += 1
    if step % 10 == 0:
        ck.write_text(str(step))   # a checkpoint every second
ck.write_text(str(step))
sys.exit(143 if stop else 0)
"""


def arrivals(seconds: float, rate: float, seed: int) -> list[tuple[float, int, float]]:
    """(arrival time, GPUs, duration) of the normal jobs."""
    rng = random.Random(seed)
    t, jobs = rng.expovariate(rate), []
    while t < seconds - 8:
        jobs.append((t, rng.choice([1, 2, 2, 4]), rng.uniform(2.0, 6.0)))
        t += rng.expovariate(rate)
    return jobs


def run(mode: str, jobs, seconds: float, fillers: int, filler_steps: int) -> dict:
    classes = JobClassMapping.from_dict(
        {
            "idle": {
                "local": {
                    "preemptible": mode != "fill-no-preempt",
                    "idle_for": 0,
                    "min_runtime": 0,
                    "grace_period": 1,
                    "backoff": 0.5,
                    "max_backoff": 2,
                    "max_preemptions": 1000,
                }
            }
        },
        "bench",
    )
    with tempfile.TemporaryDirectory() as tmp:
        manager = LeaseManager(SimulatedInventory(f"{GPUS}x24GiB"), os.path.join(tmp, "leases"), classes=classes)
        script = os.path.join(tmp, "filler.py")
        with open(script, "w") as fh:
            fh.write(FILLER)
        waits: dict[int, float] = {}
        lock = threading.Lock()
        start = time.monotonic()
        stop = threading.Event()

        def normal_job(i: int, at: float, gpus: int, duration: float) -> None:
            time.sleep(max(0.0, start + at - time.monotonic()))
            arrived = time.monotonic()
            started: list[float] = []

            def event(message: str) -> None:
                if message.startswith("attempt 1:") and not started:
                    started.append(time.monotonic())

            runner = GPUWorkSupervisor(manager, owner=f"normal-{i}", poll_interval=0.1, on_event=event)
            runner.run(
                GPURequest(gpus=gpus),
                Work(argv=["sleep", f"{duration:.2f}"], cwd=os.path.join(tmp, f"n{i}")),
                os.path.join(tmp, f"n{i}.log"),
            )
            with lock:
                waits[i] = started[0] - arrived

        def filler(k: int) -> None:
            unit = 0
            while not stop.is_set():
                runner = GPUWorkSupervisor(
                    manager, owner=f"filler-{k}", job_class="idle", poll_interval=0.1, yield_interval=0.2
                )
                stop_watch = threading.Thread(target=lambda r=runner: (stop.wait(), r.stop()), daemon=True)
                stop_watch.start()
                work = Work(
                    argv=[sys.executable, script, str(filler_steps)],
                    cwd=os.path.join(tmp, f"f{k}-{unit}"),
                    checkpoint_dir=os.path.join(tmp, f"f{k}-{unit}", "ckpt"),
                )
                with contextlib.suppress(GPUWorkFailed):  # stopped at the end of the run
                    runner.run(GPURequest(gpus=1), work, os.path.join(tmp, f"f{k}-{unit}.log"))
                unit += 1

        threads = [threading.Thread(target=normal_job, args=(i, *job), daemon=True) for i, job in enumerate(jobs)]
        if mode != "normal-only":
            threads += [threading.Thread(target=filler, args=(k,), daemon=True) for k in range(fillers)]
        for t in threads:
            t.start()
        for t in threads[: len(jobs)]:
            t.join()
        elapsed = max(seconds, time.monotonic() - start)
        time.sleep(max(0.0, start + seconds - time.monotonic()))
        stop.set()
        for t in threads[len(jobs) :]:
            t.join(timeout=10)
        records = manager.ledger.records()
    held = sum(r["gpu_seconds"] for r in records)
    lost = sum(r["lost_gpu_seconds"] for r in records)
    capacity = GPUS * elapsed
    by_job = dict(waits)
    waits = sorted(by_job.values())
    return {
        "waits": by_job,
        "mode": mode,
        "normal_jobs": len(waits),
        "elapsed_s": elapsed,
        "utilisation": held / capacity,
        "useful_utilisation": (held - lost) / capacity,
        "normal_gpu_s": sum(r["gpu_seconds"] for r in records if r["job_class"] == "normal"),
        "idle_gpu_s": sum(r["gpu_seconds"] for r in records if r["job_class"] == "idle"),
        "wait_mean_s": statistics.mean(waits),
        "wait_p95_s": waits[int(0.95 * (len(waits) - 1))],
        "wait_max_s": waits[-1],
        "lost_gpu_s": lost,
        "preemptions": sum(1 for r in records if r.get("preempted")),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=60.0, help="length of each run")
    parser.add_argument("--rate", type=float, default=0.25, help="normal jobs per second")
    parser.add_argument(
        "--seeds",
        default="7",
        help="comma-separated arrival seeds, one set of runs each (the added wait is then also given over all of them)",
    )
    parser.add_argument(
        "--modes",
        default="normal-only,fill-preemptive,fill-no-preempt",
        help="comma-separated; normal-only always runs first (the baseline)",
    )
    parser.add_argument("--filler-seconds", type=float, default=8.0, help="work per filler unit")
    args = parser.parse_args()
    modes = ["normal-only"] + [m for m in args.modes.split(",") if m and m != "normal-only"]
    added_by_mode: dict[str, list[list[float]]] = {m: [] for m in modes[1:]}
    for seed in [int(s) for s in args.seeds.split(",")]:
        run_seed(args, seed, modes, added_by_mode)
    if len(args.seeds.split(",")) > 1:
        print("\nadded wait over all seeds (each normal job's wait minus its normal-only wait):")
        for mode, per_seed in added_by_mode.items():
            pooled = sorted(a for added in per_seed for a in added)
            p = lambda q, pooled=pooled: pooled[min(len(pooled) - 1, int(q * len(pooled)))]  # noqa: E731
            print(
                f"  {mode:<17} per-seed max {', '.join(f'{max(a):.2f}' for a in per_seed)} s; all {len(pooled)} "
                f"jobs: median {p(0.5):.2f} s, p90 {p(0.9):.2f} s, p95 {p(0.95):.2f} s, max {pooled[-1]:.2f} s"
            )


def run_seed(args, seed: int, modes: list[str], added_by_mode: dict[str, list[list[float]]]) -> None:
    jobs = arrivals(args.seconds, args.rate, seed)
    print(
        f"idle-fill benchmark on {GPUS} SIMULATED GPUs, {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} CPUs, python {platform.python_version()}; {len(jobs)} normal jobs over "
        f"{args.seconds:.0f}s (seed {seed}), {GPUS} fillers of {args.filler_seconds:.0f}s units"
    )
    print(
        "wait = a normal job's arrival to its start; added = its wait minus its wait in the normal-only run "
        "(the delay idle work causes)"
    )
    print(
        f"{'mode':<17} {'util':>6} {'useful':>7} {'normal GPU-s':>12} {'idle GPU-s':>10} {'wait mean':>9} "
        f"{'p95':>6} {'max':>6} {'added mean':>10} {'max':>6} {'lost GPU-s':>10} {'preempt':>7}"
    )
    baseline: dict[int, float] = {}
    for mode in modes:
        r = run(mode, jobs, args.seconds, GPUS, int(args.filler_seconds * 10))
        baseline = baseline or r["waits"]
        added = [r["waits"][i] - baseline[i] for i in r["waits"]]
        if mode in added_by_mode:
            added_by_mode[mode].append(added)
        print(
            f"{mode:<17} {r['utilisation']:>6.1%} {r['useful_utilisation']:>7.1%} {r['normal_gpu_s']:>12.1f} "
            f"{r['idle_gpu_s']:>10.1f} {r['wait_mean_s']:>8.2f}s {r['wait_p95_s']:>5.2f}s {r['wait_max_s']:>5.2f}s "
            f"{statistics.mean(added):>9.2f}s {max(added):>5.2f}s {r['lost_gpu_s']:>10.1f} {r['preemptions']:>7}",
            flush=True,
        )


if __name__ == "__main__":
    main()
