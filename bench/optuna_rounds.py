"""Benchmark: the bookkeeping an Optuna sweep in rounds costs per trial, next to plain Optuna.

All in one process, same journal-file storage, same TPE sampler, the same trivial objective (a
quadratic in two parameters), so what is measured is the bookkeeping, not the trials:

  plain Optuna      ``study.optimize(objective, n_trials=R*P, n_jobs=4)``
  gpusched rounds   per round: ``SweepSession.prepare(round)`` (ask P trials, write the manifest),
                    ``run_trial`` for each (claim, state files, the callable, result.json), then
                    ``finish_round`` (read the results, tell Optuna) — one session for the whole sweep
  fresh sessions    the same, but a new ``SweepSession`` for every prepare and finish, as when each is
                    its own Airflow task in its own process (the study is loaded from the journal each time)

    .venv/bin/python bench/optuna_rounds.py [--rounds 50] [--per-round 8]
"""

from __future__ import annotations

import argparse
import io
import os
import platform
import tempfile
import time


def objective_value(params: dict) -> float:
    return (params["x"] - 0.3) ** 2 + (params["y"] - 0.6) ** 2


def plain_optuna(folder: str, trials: int, per_round: int) -> float:
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = JournalStorage(JournalFileBackend(os.path.join(folder, "plain.journal")))
    study = optuna.create_study(
        study_name="plain",
        storage=storage,
        direction="minimize",
        sampler=optuna.samplers.TPESampler(seed=0, n_startup_trials=per_round),
    )
    start = time.perf_counter()
    study.optimize(
        lambda t: objective_value({"x": t.suggest_float("x", 0, 1), "y": t.suggest_float("y", 0, 1)}),
        n_trials=trials,
        n_jobs=4,
    )
    return time.perf_counter() - start


def gpusched_rounds(folder: str, rounds: int, per_round: int, fresh: bool) -> tuple[float, list[float], float]:
    """Seconds in all, seconds per round, and the best value found."""
    from airflow_provider_gpusched.core.sweep import Objective, SweepSpec, uniform
    from airflow_provider_gpusched.core.sweep.running.session import SweepSession
    from airflow_provider_gpusched.core.sweep.running.trial_run import run_trial

    spec = SweepSpec(
        name="fresh" if fresh else "rounds",
        search="optuna",
        rounds=rounds,
        per_round=per_round,
        space={"x": uniform(0, 1), "y": uniform(0, 1)},
        seed=0,
        python_callable=objective_value,
        objective=Objective("value", mode="minimize"),
        results_root=folder,
    )
    sink = io.StringIO()
    session = SweepSession(spec)
    per_round_s = []
    start = time.perf_counter()
    for r in range(rounds):
        round_start = time.perf_counter()
        manifest = (SweepSession(spec) if fresh else session).prepare(round_no=r)
        for trial in manifest.pending:
            run_trial(manifest, trial, out=sink)
        (SweepSession(spec) if fresh else session).finish_round(r)
        per_round_s.append(time.perf_counter() - round_start)
    elapsed = time.perf_counter() - start
    best = SweepSession(spec).collect()["best"]
    return elapsed, per_round_s, best["score"] if best else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--per-round", type=int, default=8)
    args = parser.parse_args()
    trials = args.rounds * args.per_round
    print(
        f"# Optuna in rounds vs plain Optuna: {args.rounds} rounds x {args.per_round} trials, journal storage, "
        f"TPE; {time.strftime('%Y-%m-%d')} on {platform.node()} ({os.cpu_count()} cores), "
        f"Python {platform.python_version()}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        plain = plain_optuna(tmp, trials, args.per_round)
        print(f"{'plain Optuna (optimize, n_jobs=4)':<36} {plain / trials * 1000:>7.1f} ms/trial")
        for name, fresh in (("gpusched rounds, one session", False), ("gpusched rounds, fresh sessions", True)):
            elapsed, per_round_s, best = gpusched_rounds(tmp, args.rounds, args.per_round, fresh)
            first, last = per_round_s[:5], per_round_s[-5:]
            print(
                f"{name:<36} {elapsed / trials * 1000:>7.1f} ms/trial  ({elapsed / plain:.2f}x plain; "
                f"round {sum(first) / len(first) * 1000:.0f} ms at the start, "
                f"{sum(last) / len(last) * 1000:.0f} ms at the end; best {best:.4f})",
                flush=True,
            )


if __name__ == "__main__":
    main()
