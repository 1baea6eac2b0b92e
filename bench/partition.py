"""Benchmark: the pipeline partitioner on the 24 scaling instances, next to the reference C++ tool's figures
(``scaling/reference.json``: wall time and peak RSS on a 2-core machine), plus the generated cluster-scale
instances the reference cannot finish: 200 layers, 8 device types, and 64, 256 and 1,024 hosts
(``tests/data/pipeline_partition.make_cluster_instance``).

Each instance runs in a fresh Python process: the time is ``partition()`` alone (inputs already loaded),
the memory is the process's peak RSS (Python, numpy and the inputs included) and, separately, the peak
of what the solver allocated (tracemalloc, numpy arrays included).

    .venv/bin/python bench/partition.py [--data DIR] [--cases L96_T4_D64 ...] [--big-timeout 120]

The solver's peak (tracemalloc) does not see what HiGHS allocates in C++; the process's peak RSS does.

Then ``gpusched partition`` on L96_T4_D64 as a whole process (interpreter start, imports, reading the YAML,
solving, printing), next to the interpreter's own start-up with and without numpy.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, resource, sys, time, tracemalloc
from airflow_provider_gpusched.core.partition import load_problem, partition
folder, args = sys.argv[1], json.loads(sys.argv[2])
problem = load_problem(f"{folder}/models.yml", f"{folder}/device_types.yml", f"{folder}/devices.yml", **args)
start = time.perf_counter()
schedule = partition(problem)
seconds = time.perf_counter() - start
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
tracemalloc.start()
partition(problem)
traced = tracemalloc.get_traced_memory()[1] / 2**20
print(json.dumps({"seconds": seconds, "rss_mb": rss, "solver_mb": traced, "bottleneck_s": schedule.bottleneck_s,
                  "stages": len(schedule.stages), "checks": schedule.checks, "optimal": schedule.optimal,
                  "lower_bound_s": schedule.lower_bound_s}))
"""


def run_case(folder: Path, args: dict, timeout: float) -> dict | None:
    try:
        out = subprocess.run(
            [sys.executable, "-c", CHILD, str(folder), json.dumps(args)],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=REPO,
        )
    except subprocess.TimeoutExpired:
        return None
    if out.returncode != 0:
        raise SystemExit(f"{folder}: {out.stderr[-2000:]}")
    return json.loads(out.stdout.splitlines()[-1])


def whole_process(folder: Path, args: dict, runs: int = 9) -> dict[str, float]:
    """Median wall time of `gpusched partition` as a whole process on one case, next to the floor of the
    same interpreter: starting it bare and starting it to import numpy. The three commands take turns (so a
    slow spell of the machine hits them alike), after one untimed run each that leaves the package's
    bytecode cached as an installed package has it (PYTHONDONTWRITEBYTECODE is dropped for the children:
    an editable checkout would otherwise recompile every module of ours on every start)."""
    import statistics
    import time

    cli = [
        sys.executable,
        "-m",
        "airflow_provider_gpusched.cli",
        "partition",
        "-m",
        args["model"],
        "-b",
        str(args["batch_size"]),
        "-i",
        str(args["buffers_in"]),
        "-o",
        str(args["buffers_out"]),
    ]
    commands = {
        "gpusched partition": cli,
        "python (bare)": [sys.executable, "-c", "pass"],
        "python + import numpy": [sys.executable, "-c", "import numpy"],
    }
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    times: dict[str, list[float]] = {name: [] for name in commands}
    for n in range(runs + 1):
        for name, command in commands.items():
            start = time.perf_counter()
            subprocess.run(command, cwd=folder, check=True, capture_output=True, env=env)
            if n:
                times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--data",
        help="pipeline-partition folder (default: ../shared/pipeline-partition, else the copy vendored in tests/data)",
    )
    parser.add_argument("--cases", nargs="*", help="scaling cases to run (default: all)")
    parser.add_argument("--timeout", type=float, default=60, help="seconds per scaling case")
    parser.add_argument("--big-timeout", type=float, default=120, help="seconds per cluster-scale instance")
    parser.add_argument(
        "--hosts",
        type=int,
        nargs="*",
        default=[64, 256, 1024],
        help="host counts of the cluster-scale instances (default 64 256 1024)",
    )
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="gpusched-partition-bench-"))
    data = Path(args.data) if args.data else REPO.parent / "shared" / "pipeline-partition"
    sys.path.insert(0, str(REPO))
    from tests.data.pipeline_partition import make_cluster_instance, materialize

    if not (data / "scaling" / "reference.json").exists():
        data = materialize(tmp / "data")
    references = json.loads((data / "scaling" / "reference.json").read_text())
    print(f"pipeline partitioner, {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}")
    print(
        f"{'case':<12} {'time':>8} {'ref time':>9} {'speed-up':>9} {'peak RSS':>9} {'solver':>8} {'ref RSS':>8} "
        f"{'checks':>6}  bottleneck"
    )
    worst_time = worst_rss = 0.0
    for ref in references:
        if args.cases and ref["case"] not in args.cases:
            continue
        r = run_case(data / "scaling" / ref["case"], ref["args"], args.timeout)
        if r is None:
            print(f"{ref['case']:<12} timed out after {args.timeout:.0f}s")
            continue
        ok = abs(r["bottleneck_s"] - ref["bottleneck_s"]) <= 1e-9 * ref["bottleneck_s"]
        worst_time, worst_rss = max(worst_time, r["seconds"]), max(worst_rss, r["rss_mb"])
        print(
            f"{ref['case']:<12} {r['seconds']:>7.3f}s {ref['reference_wall_s']:>8.2f}s "
            f"{ref['reference_wall_s'] / r['seconds']:>8.1f}x {r['rss_mb']:>7.0f}MB {r['solver_mb']:>6.1f}MB "
            f"{ref['reference_peak_rss_MB']:>6.0f}MB {r['checks']:>6}  {r['bottleneck_s']:.9f}"
            f"{'' if ok else '  MISMATCH (expected ' + str(ref['bottleneck_s']) + ')'}",
            flush=True,
        )
    print(f"slowest {worst_time:.3f}s, largest peak RSS {worst_rss:.0f}MB")
    case = next(ref for ref in references if ref["case"] == "L96_T4_D64")
    figures = whole_process(data / "scaling" / "L96_T4_D64", case["args"])
    print("whole process on L96_T4_D64 (median of 9): " + ", ".join(f"{k} {v:.3f}s" for k, v in figures.items()))
    print(f"{'cluster scale':<16} {'time':>8} {'peak RSS':>9} {'checks':>6} {'stages':>6}  bottleneck")
    for hosts in args.hosts:
        name = f"L200_T8_D{hosts}"
        big_args = make_cluster_instance(data / "scaling", tmp / name, hosts=hosts)
        r = run_case(tmp / name, big_args, args.big_timeout)
        if r is None:
            print(f"{name:<16} did not finish within {args.big_timeout:.0f}s")
            continue
        proof = "optimal (proven)" if r["optimal"] else f"NOT PROVEN, lower bound {r['lower_bound_s']:.9f}"
        print(
            f"{name:<16} {r['seconds']:>7.3f}s {r['rss_mb']:>7.0f}MB {r['checks']:>6} {r['stages']:>6}  "
            f"{r['bottleneck_s']:.9f} {proof}",
            flush=True,
        )


if __name__ == "__main__":
    main()
