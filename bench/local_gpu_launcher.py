"""Benchmark: many 1-second trials through the local GPU launcher on SIMULATED GPUs.

Every trial goes the full way — lease (flock-guarded allocation), child process in its own process
group with CUDA_VISIBLE_DEVICES, output to a log file, release — with more worker threads than GPU
slots, so trials really wait for each other. Two layouts on 4 simulated 24 GiB GPUs:

  whole   each trial leases a whole GPU: 4 at a time, ideal makespan = trials x 1 s / 4
  packed  each trial reserves 6 GiB: 16 at a time (4 per GPU), ideal = trials x 1 s / 16

    .venv/bin/python bench/local_gpu_launcher.py [--trials 256] [--seconds 1.0]
"""

from __future__ import annotations

import argparse
import os
import platform
import queue
import statistics
import tempfile
import threading
import time

from airflow_provider_gpusched.core.gpu.inventory import SimulatedInventory
from airflow_provider_gpusched.core.gpu.leases import LeaseManager
from airflow_provider_gpusched.core.gpu.placement import GPURequest
from airflow_provider_gpusched.core.gpu.runner import GPUWorkRunner, Work


def run_layout(trials: int, seconds: float, request: GPURequest, slots: int, workers: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        manager = LeaseManager(SimulatedInventory("4x24GiB"), os.path.join(tmp, "leases"))
        todo: queue.Queue[int] = queue.Queue()
        for i in range(trials):
            todo.put(i)
        durations: list[float] = []
        lock = threading.Lock()

        def worker() -> None:
            runner = GPUWorkRunner(manager, poll_interval=0.02)
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
    return {"makespan": makespan, "ideal": ideal, "ratio": makespan / ideal,
            "overhead_per_launch": (makespan - ideal) * slots / trials,
            "median_trial": statistics.median(durations)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=256)
    parser.add_argument("--seconds", type=float, default=1.0)
    args = parser.parse_args()
    print(f"# local GPU launcher benchmark: {args.trials} trials of {args.seconds}s on 4 SIMULATED 24 GiB GPUs")
    print(f"# {time.strftime('%Y-%m-%d')} on {platform.node()} ({os.cpu_count()} cores)")
    print(f"{'layout':<8} {'slots':>5} {'makespan s':>10} {'ideal s':>8} {'ratio':>6} {'overhead/launch ms':>18} "
          f"{'median trial s':>14}")
    for name, request, slots, workers in (("whole", GPURequest(gpus=1), 4, 8),
                                          ("packed", GPURequest(gpu_memory="6GiB"), 16, 24)):
        r = run_layout(args.trials, args.seconds, request, slots, workers)
        print(f"{name:<8} {slots:>5} {r['makespan']:>10.1f} {r['ideal']:>8.1f} {r['ratio']:>6.3f} "
              f"{r['overhead_per_launch'] * 1000:>18.0f} {r['median_trial']:>14.2f}")


if __name__ == "__main__":
    main()
