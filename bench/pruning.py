"""Benchmark: the same random search with and without pruning, on synthetic learning curves.

Each trial is a Python callable that "trains" for ``--steps`` steps: every step sleeps ``--step-seconds``
(standing in for GPU time) and reports a validation loss that follows a noisy exponential learning curve
whose floor and speed depend on the trial's learning rate (too small: slow; too large: a high floor). The
sweep runs ``--trials`` trials of the same seeded random search, ``--parallel`` trial processes at a time
(each through the real trial runner, as a sweep's trial tasks do), once per mode: no pruning, median
stopping, ASHA, and Optuna's MedianPruner and SuccessiveHalvingPruner (rule ``optuna``). Printed per mode: trial-seconds spent (the sum of the trials' own run times: the GPU time a
sweep would hold), steps run, trials pruned, the best final loss reached and the wall time.

    .venv/bin/python bench/pruning.py [--trials 32] [--steps 27] [--step-seconds 0.05] [--parallel 4]
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
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)


def curve_trial(params: dict) -> dict:
    """A noisy learning curve: loss(step) = floor + (1 - floor) * exp(-speed * step) + noise."""
    import math
    import random

    from airflow_provider_gpusched.trial import report

    lr, steps, step_seconds = params["lr"], params["steps"], params["step_seconds"]
    floor = 0.1 + 4.0 * (math.log10(lr) + 2.5) ** 2 / 10  # best near lr = 10**-2.5
    speed = 0.02 + 2.0 * lr**0.5
    rng = random.Random(params["seed"])
    loss = 1.0
    for step in range(steps):
        time.sleep(step_seconds)
        loss = floor + (1 - floor) * math.exp(-speed * (step + 1)) + rng.gauss(0, 0.01)
        report(step=step, loss=loss)
    return {"loss": loss}


def run_mode(root: str, mode: str, args) -> dict:
    from airflow_provider_gpusched.core.sweep import Objective, SweepSpec, loguniform
    from airflow_provider_gpusched.core.sweep.running.session import SweepSession
    from airflow_provider_gpusched.core.sweep.running.trial_run import trial_argv

    pruning = {
        "none": None,
        "median": {"rule": "median", "warmup_steps": 3, "min_trials": 4},
        "asha": {"rule": "asha", "min_steps": 1, "reduction_factor": 3},
        "asha-grace3": {"rule": "asha", "min_steps": 3, "reduction_factor": 3},
        "optuna-median": {
            "rule": "optuna",
            "pruner": "median",
            "options": {"n_startup_trials": 4, "n_warmup_steps": 3},
        },
        "optuna-halving": {
            "rule": "optuna",
            "pruner": "successive_halving",
            "options": {"min_resource": 1, "reduction_factor": 3},
        },
    }[mode]
    spec = SweepSpec(
        name=f"curves_{mode}",
        search="random",
        count=args.trials,
        seed=11,
        space={"lr": loguniform(1e-5, 1e-0)},
        global_config={"steps": args.steps, "step_seconds": args.step_seconds, "seed": 3},
        python_callable=curve_trial,
        objective=Objective("loss", "minimize"),
        results_root=root,
        pruning=pruning,
    )
    session = SweepSession(spec)
    manifest = session.prepare()
    started = time.perf_counter()
    env = {**os.environ, "PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", "")}
    with ThreadPoolExecutor(args.parallel) as pool:
        codes = list(
            pool.map(
                lambda t: subprocess.run(trial_argv(manifest, t), env=env, cwd=REPO, capture_output=True).returncode,
                manifest.pending,
            )
        )
    wall = time.perf_counter() - started
    assert all(c == 0 for c in codes), codes
    summary = session.collect()
    records = json.loads(Path(os.path.join(root, spec.name, "summary.json")).read_text())["records"]
    seconds = sum(r["seconds"] or 0 for r in records)
    steps = sum((r["reports"] or {}).get("count", 0) for r in records)
    return {
        "mode": mode,
        "trial_s": seconds,
        "steps": steps,
        "pruned": summary["counts"]["pruned"],
        "best": summary["best"]["score"],
        "wall_s": wall,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=32)
    parser.add_argument("--steps", type=int, default=27)
    parser.add_argument("--step-seconds", type=float, default=0.05)
    parser.add_argument("--parallel", type=int, default=4)
    parser.add_argument(
        "--modes",
        default="none,median,asha,asha-grace3,optuna-median,optuna-halving",
        help="comma-separated: none, median, asha, asha-grace3, optuna-median, optuna-halving",
    )
    args = parser.parse_args()
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)  # children start from cached bytecode, as an install does
    print(
        f"# pruning benchmark, {time.strftime('%Y-%m-%d')} on {platform.node()} ({os.cpu_count()} cores), "
        f"Python {platform.python_version()}: {args.trials} trials x {args.steps} steps of {args.step_seconds}s, "
        f"{args.parallel} at a time"
    )
    print(f"{'pruning':<14} {'trial-s':>8} {'steps':>6} {'pruned':>6} {'best loss':>10} {'wall s':>7}")
    rows = []
    with tempfile.TemporaryDirectory() as root:
        for mode in args.modes.split(","):
            row = run_mode(root, mode, args)
            rows.append(row)
            print(
                f"{row['mode']:<14} {row['trial_s']:>8.1f} {row['steps']:>6} {row['pruned']:>6} "
                f"{row['best']:>10.4f} {row['wall_s']:>7.1f}",
                flush=True,
            )
    base = rows[0]
    for row in rows[1:]:
        print(
            f"{row['mode']}: {row['trial_s'] / base['trial_s']:.0%} of the trial time without pruning, best loss "
            f"{row['best']:.4f} vs {base['best']:.4f}"
        )


if __name__ == "__main__":
    main()
