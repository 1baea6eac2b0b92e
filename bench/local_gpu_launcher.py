"""Benchmark: many 1-second trials through the local GPU launcher on SIMULATED GPUs.

Every trial goes the full way — lease (flock-guarded allocation), child process in its own process
group with CUDA_VISIBLE_DEVICES, output to a log file, release — with more worker threads than GPU
slots, so trials really wait for each other. Two layouts on 4 simulated 24 GiB GPUs:

  whole   each trial leases a whole GPU: 4 at a time, ideal makespan = trials x 1 s / 4
  packed  each trial reserves 6 GiB: 16 at a time (4 per GPU), ideal = trials x 1 s / 16

Each layout also runs through xargs -P (the floor: no GPU bookkeeping) and simple-gpu-scheduler (the
peer; ``pip install -e .[bench]``) in the same run. Waiting workers are woken by releases (the default
0.5 s poll interval is only the fallback).

    .venv/bin/python bench/local_gpu_launcher.py [--workloads 256x1.0,64x0.2]
"""

from __future__ import annotations

import argparse
import os
import platform
import queue
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from airflow_provider_gpusched.core.gpu.inventory import SimulatedInventory
from airflow_provider_gpusched.core.gpu.leases import LeaseManager
from airflow_provider_gpusched.core.gpu.placement import GPURequest
from airflow_provider_gpusched.core.gpu.supervisor import GPUWorkSupervisor, Work


def run_layout(
    trials: int, seconds: float, request: GPURequest, slots: int, workers: int, inventory: str = "4x24GiB"
) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        manager = LeaseManager(SimulatedInventory(inventory), os.path.join(tmp, "leases"))
        todo: queue.Queue[int] = queue.Queue()
        for i in range(trials):
            todo.put(i)
        durations: list[float] = []
        lock = threading.Lock()

        def worker() -> None:
            runner = GPUWorkSupervisor(manager)
            while True:
                try:
                    i = todo.get_nowait()
                except queue.Empty:
                    return
                start = time.monotonic()
                runner.run(request, Work(argv=["sleep", str(seconds)]), os.path.join(tmp, f"t{i}.log"))
                with lock:
                    durations.append(time.monotonic() - start)

        threads = [threading.Thread(target=worker) for _ in range(workers)]
        start = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        makespan = time.monotonic() - start
        assert len(durations) == trials and manager.leases() == []
    ideal = trials * seconds / slots
    return {
        "makespan": makespan,
        "ideal": ideal,
        "ratio": makespan / ideal,
        "overhead_per_launch": (makespan - ideal) * slots / trials,
        "median_trial": statistics.median(durations),
    }


def run_peer(command: list[str], lines: list[str]) -> float:
    start = time.monotonic()
    subprocess.run(
        command, input="".join(line + "\n" for line in lines), text=True, check=True, stdout=subprocess.DEVNULL
    )
    return time.monotonic() - start


def peers(trials: int, seconds: float, slots: int) -> dict[str, float | None]:
    """Makespans of the floor (xargs -P running `sleep`, no GPU bookkeeping at all) and of
    simple-gpu-scheduler (a semaphore over a list of GPU ids, one thread per job; each id listed 4 times
    for the packed layout) on the same trials."""
    figures: dict[str, float | None] = {
        "xargs -P (floor)": run_peer(["xargs", "-P", str(slots), "-n", "1", "sleep"], [str(seconds)] * trials)
    }
    try:
        import simple_gpu_scheduler  # noqa: F401
    except ImportError:
        figures["simple-gpu-scheduler (not installed: pip install -e .[bench])"] = None
        return figures
    gpus = [str(i) for i in range(4) for _ in range(slots // 4)]
    figures["simple-gpu-scheduler"] = run_peer(
        [sys.executable, "-c", "from simple_gpu_scheduler.scheduler import main; main()", "--gpus", *gpus],
        [f"sleep {seconds}"] * trials,
    )
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--workloads", default="256x1.0,64x0.2", help="comma-separated TRIALSxSECONDS (default: 256x1.0,64x0.2)"
    )
    parser.add_argument("--layouts", default="whole,packed", help="comma-separated (default: whole,packed)")
    args = parser.parse_args()
    print("# local GPU launcher benchmark on 4 SIMULATED 24 GiB GPUs, next to xargs and simple-gpu-scheduler")
    print(f"# {time.strftime('%Y-%m-%d')} on {platform.node()} ({os.cpu_count()} cores)")
    print(
        f"{'workload':<10} {'layout':<7} {'slots':>5} {'launcher':<24} {'makespan s':>10} {'ideal s':>8} "
        f"{'ratio':>6} {'overhead/launch ms':>18}"
    )
    for workload in args.workloads.split(","):
        trials, seconds = int(workload.split("x")[0]), float(workload.split("x")[1])
        for name, request, slots, workers in (
            ("whole", GPURequest(gpus=1), 4, 8),
            ("packed", GPURequest(gpu_memory="6GiB"), 16, 24),
        ):
            if name not in args.layouts.split(","):
                continue
            ideal = trials * seconds / slots
            rows = peers(trials, seconds, slots)
            rows["gpusched"] = run_layout(trials, seconds, request, slots, workers)["makespan"]
            for tool, makespan in rows.items():
                if makespan is None:
                    print(f"{workload:<10} {name:<7} {slots:>5} {tool}")
                    continue
                print(
                    f"{workload:<10} {name:<7} {slots:>5} {tool:<24} {makespan:>10.2f} {ideal:>8.1f} "
                    f"{makespan / ideal:>6.3f} {(makespan - ideal) * slots / trials * 1000:>18.0f}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
