"""Benchmark: a GPU fleet on Airflow's EdgeExecutor against one host with as many GPUs, and against the
CeleryExecutor (SIMULATED GPUs; root).

Runs 192 one-GPU trials of 1 s, in one run:

  launcher alone   the core launcher on 12 simulated GPUs, 24 threads, no Airflow (the floor)
  one host         scripts/fleet.sh up --hosts 1 --sizes 12x24GiB: one Edge worker with 12 slots
  fleet            scripts/fleet.sh up --hosts 3 --sizes 4x24GiB: three hosts in namespaces, 4 GPUs each

ideal = 192 x 1 s / 12 = 16 s. Then, on each executor's three-host fleet (--executors, default edge and celery
when apache-airflow-providers-celery and redis-server are installed), the same 192 trials and a mixed workload:
24 one-GPU, 12 two-GPU and 6 four-GPU trials of 2 s (ideal 12 s), where placement by GPU count matters. Prints
makespan / ideal and the landings per task (hosts a task was taken by before it ran: 1 = placed right the first
time). Each stack lives in .stack-bench-fleet/ (ports 28099/55449) and is destroyed afterwards.

    .venv/bin/python bench/fleet_makespan.py [--seconds 1] [--executors edge,celery]

Celery needs: pip install -c constraints/airflow-3.3.2.txt apache-airflow-providers-celery==3.26.0 redis;
apt-get install redis-server.
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

from local_gpu_launcher import run_layout

from airflow_provider_gpusched.core.fleet import FLEET_HOSTS_XCOM
from airflow_provider_gpusched.core.gpu.placement import GPURequest
from tests.stack.client import Stack, StackConfig

TRIALS, GPUS = 192, 12
MIXED_GPU_SECONDS = 24 * 1 + 12 * 2 + 6 * 4  # bench_fleet_mixed's GPUs x trials (each of 2 x --seconds)
CONFIG = StackConfig(REPO / ".stack-bench-fleet", 28099, 55449, REPO / "bench" / "fleet_dags", "", script="fleet.sh")


def run_airflow(hosts: int, sizes: str, seconds: float, executor: str = "edge", dag_id: str = "bench_fleet") -> dict:
    CONFIG.run("destroy", check=False)
    t0 = time.monotonic()
    CONFIG.run("up", "--hosts", str(hosts), "--sizes", sizes, "--executor", executor, timeout=900)
    up = time.monotonic() - t0
    try:
        stack = Stack(CONFIG)
        results = {}
        for dag in dag_id.split(","):
            run_id = stack.trigger(dag, seconds=seconds if dag == "bench_fleet" else 2 * seconds)
            start = time.monotonic()
            assert stack.wait_run(dag, run_id, timeout=1800) == "success"
            tis = stack.task_instances(dag, run_id)
            # the run's own clock: first task start to last task end
            begin = min(datetime.fromisoformat(t["start_date"]) for t in tis)
            end = max(datetime.fromisoformat(t["end_date"]) for t in tis)
            makespan = (end - begin).total_seconds()
            landings = Counter(
                len(stack.xcom(dag, run_id, t["task_id"], FLEET_HOSTS_XCOM, map_index=t["map_index"])) for t in tis
            )
            ideal = (TRIALS * seconds if dag == "bench_fleet" else MIXED_GPU_SECONDS * 2 * seconds) / GPUS
            results[dag] = {
                "makespan": makespan,
                "wall": time.monotonic() - start,
                "ratio": makespan / ideal,
                "landings": dict(sorted(landings.items())),
                "per_host": dict(sorted(Counter(t["hostname"] for t in tis).items())),
                "up": up,
            }
    finally:
        CONFIG.run("destroy", check=False)
    return results if "," in dag_id else results[dag_id]


def celery_ready() -> str:
    """'' when the Celery layout can run here, else why not."""
    import shutil

    try:
        import airflow.providers.celery  # noqa: F401
        import redis  # noqa: F401
    except ImportError:
        return "apache-airflow-providers-celery or redis (Python) not installed"
    return "" if shutil.which("redis-server") else "redis-server not installed"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--executors", default="", help="edge,celery (default: both where Celery is installed)")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("needs root: the fleet's hosts are Linux namespaces (scripts/fleet.sh)")
    why_not = celery_ready()
    executors = [e for e in (args.executors or "edge,celery").split(",") if e]
    if "celery" in executors and why_not:
        if args.executors:
            sys.exit(f"--executors celery: {why_not} (see this script's help)")
        executors.remove("celery")
        print(f"CeleryExecutor left out: {why_not}")
    ideal = TRIALS * args.seconds / GPUS
    print(
        f"{datetime.now():%Y-%m-%d}, {platform.node()}, {os.cpu_count()} CPUs; {TRIALS} one-GPU trials of "
        f"{args.seconds:g} s on {GPUS} SIMULATED GPUs; ideal {ideal:.1f} s"
    )
    floor = run_layout(TRIALS, args.seconds, GPURequest(gpus=1), GPUS, 24, inventory=f"{GPUS}x24GiB")
    print(f"launcher alone : makespan {floor['makespan']:6.1f} s  = {floor['ratio']:.2f} x ideal")
    one = run_airflow(1, f"{GPUS}x24GiB", args.seconds)
    print(
        f"one host (12)  : makespan {one['makespan']:6.1f} s  = {one['ratio']:.2f} x ideal; landings per task "
        f"{one['landings']}; up in {one['up']:.0f} s"
    )
    fleets = {}
    for executor in executors:
        fleets[executor] = both = run_airflow(3, "4x24GiB", args.seconds, executor, "bench_fleet,bench_fleet_mixed")
        for dag, label in (("bench_fleet", "192 x 1 GPU"), ("bench_fleet_mixed", "mixed 1/2/4")):
            r = both[dag]
            print(
                f"fleet {executor:6} {label:11}: makespan {r['makespan']:6.1f} s = {r['ratio']:.2f} x ideal; "
                f"landings per task {r['landings']}; tasks per host {r['per_host']}; up in {r['up']:.0f} s"
            )
    if "edge" in fleets:
        print(
            f"fleet (edge) / one host: {fleets['edge']['bench_fleet']['makespan'] / one['makespan']:.2f} "
            f"(target <= 1.2)"
        )
    if len(fleets) == 2:
        for dag in ("bench_fleet", "bench_fleet_mixed"):
            print(
                f"{dag}: celery / edge makespan {fleets['celery'][dag]['makespan'] / fleets['edge'][dag]['makespan']:.2f}"
            )


if __name__ == "__main__":
    main()
