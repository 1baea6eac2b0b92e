"""Benchmark: ranking a multi-objective sweep — Pareto fronts of N trials, next to Optuna's own front.

For each case this prints the time of ``pareto_fronts`` (what the leaderboard, ``pareto.json``, the Sweeps tab
and evolution's parent selection call) and, in the same run, the time Optuna takes for ``study.best_trials``
on an in-memory study holding the same points (the peer figure: what an Optuna user waits for to get the
front). Cases: random points (a small front) and the worst case where every point is on the front.

    .venv/bin/python bench/pareto.py [--trials 10000]
"""

from __future__ import annotations

import argparse
import functools
import os
import platform
import random
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from airflow_provider_gpusched.core.sweep.parts.objective import pareto_fronts


def timed(fn, repeat: int = 3) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return best, out


def optuna_front(points, directions):
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(directions=directions)
    study.add_trials([optuna.trial.create_trial(values=list(p)) for p in points])
    return timed(lambda: study.best_trials, repeat=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10000)
    args = parser.parse_args()
    n = args.trials
    rng = random.Random(0)
    cases = [
        ("2 metrics, random", [(rng.random(), rng.random()) for _ in range(n)], ["maximize", "minimize"]),
        ("2 metrics, all on the front", [(i, i) for i in range(n)], ["maximize", "maximize"][:1] + ["minimize"]),
        ("3 metrics, random", [(rng.random(), rng.random(), rng.random()) for _ in range(n)], ["maximize"] * 3),
        # the slow case: three or more metrics and a front of everything (O(n * front)); a fifth of the trials
        (f"3 metrics, all on the front/{n // 5}", [(i, -i, 0) for i in range(n // 5)], ["maximize"] * 3),
    ]
    print(f"{n:,} trials; {platform.node()}, {os.cpu_count()} CPUs, Python {platform.python_version()}")
    print(f"{'case':<30} {'front':>7} {'ours: front 1':>14} {'ours: top 10':>13} {'Optuna best_trials':>19}")
    for name, points, modes in cases:
        first, fronts = timed(functools.partial(pareto_fronts, points, modes, enough=1))
        top, _ = timed(functools.partial(pareto_fronts, points, modes, enough=10))
        try:
            peer, best = optuna_front(points, modes)
            assert len(best) == len(fronts[0]), (len(best), len(fronts[0]))  # the same front
            peer_text = f"{peer:.3f} s"
        except ImportError:
            peer_text = "(no Optuna)"
        print(f"{name:<30} {len(fronts[0]):>7,} {first:>12.3f} s {top:>11.3f} s {peer_text:>19}")


if __name__ == "__main__":
    main()
