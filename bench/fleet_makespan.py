"""Benchmark: a GPU fleet on Airflow's EdgeExecutor against one host with as many GPUs (SIMULATED GPUs; root).

Runs 192 one-GPU trials of 1 s three ways, in one run:

  launcher alone   the core launcher on 12 simulated GPUs, 24 threads, no Airflow (the floor)
  one host         scripts/fleet.sh up --hosts 1 --sizes 12x24GiB: one Edge worker with 12 slots
  fleet            scripts/fleet.sh up --hosts 3 --sizes 4x24GiB: three hosts in namespaces, 4 GPUs each

ideal = 192 x 1 s / 12 = 16 s. Prints makespan / ideal and the landings per task (hosts a task was taken by
before it ran: 1 = placed right the first time). Each stack lives in .stack-bench-fleet/ (ports 28099/55449)
and is destroyed afterwards.

    .venv/bin/python bench/fleet_makespan.py [--seconds 1]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from collections import Counter
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from local_gpu_launcher import run_layout  # noqa: E402

from airflow_provider_gpusched.core.fleet import FLEET_HOSTS_XCOM  # noqa: E402
from airflow_provider_gpusched.core.gpu.placement import GPURequest  # noqa: E402
from tests.stack.client import Stack, StackConfig  # noqa: E402

TRIALS, GPUS = 192, 12
CONFIG = StackConfig(REPO / ".stack-bench-fleet", 28099, 55449, REPO / "bench" / "fleet_dags", "", script="fleet.sh")


def run_airflow(hosts: int, sizes: str, seconds: float) -> dict:
    CONFIG.run("destroy", check=False)
    t0 = time.monotonic()
    CONFIG.run("up", "--hosts", str(hosts), "--sizes", sizes, timeout=900)
    up = time.monotonic() - t0
    try:
        stack = Stack(CONFIG)
        run_id = stack.trigger("bench_fleet", seconds=seconds)
        start = time.monotonic()
        assert stack.wait_run("bench_fleet", run_id, timeout=1800) == "success"
        tis = stack.task_instances("bench_fleet", run_id)
        # the run's own clock: first task start to last task end
        begin = min(datetime.fromisoformat(t["start_date"]) for t in tis)
        end = max(datetime.fromisoformat(t["end_date"]) for t in tis)
        makespan = (end - begin).total_seconds()
        wall = time.monotonic() - start
        landings = Counter(len(stack.xcom("bench_fleet", run_id, "trial", FLEET_HOSTS_XCOM, map_index=i))
                           for i in range(TRIALS))
        per_host = Counter(t["hostname"] for t in tis)
    finally:
        CONFIG.run("destroy", check=False)
    ideal = TRIALS * seconds / GPUS
    return {"makespan": makespan, "wall": wall, "ratio": makespan / ideal, "landings": dict(sorted(landings.items())),
            "per_host": dict(sorted(per_host.items())), "up": up}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=1.0)
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("needs root: the fleet's hosts are Linux namespaces (scripts/fleet.sh)")
    ideal = TRIALS * args.seconds / GPUS
    print(f"{datetime.now():%Y-%m-%d}, {platform.node()}, {os.cpu_count()} CPUs; {TRIALS} one-GPU trials of "
          f"{args.seconds:g} s on {GPUS} SIMULATED GPUs; ideal {ideal:.1f} s")
    floor = run_layout(TRIALS, args.seconds, GPURequest(gpus=1), GPUS, 24, inventory=f"{GPUS}x24GiB")
    print(f"launcher alone : makespan {floor['makespan']:6.1f} s  = {floor['ratio']:.2f} x ideal")
    one = run_airflow(1, f"{GPUS}x24GiB", args.seconds)
    print(f"one host (12)  : makespan {one['makespan']:6.1f} s  = {one['ratio']:.2f} x ideal; landings per task "
          f"{one['landings']}; up in {one['up']:.0f} s")
    fleet = run_airflow(3, "4x24GiB", args.seconds)
    print(f"fleet (3 x 4)  : makespan {fleet['makespan']:6.1f} s  = {fleet['ratio']:.2f} x ideal; landings per task "
          f"{fleet['landings']}; trials per host {fleet['per_host']}; up in {fleet['up']:.0f} s")
    print(f"fleet / one host: {fleet['makespan'] / one['makespan']:.2f} (target <= 1.2)")


if __name__ == "__main__":
    main()
