"""Benchmark: how busy the slots stay in an adaptive search, rounds against asynchronous, in one run.

The same 12-trial Optuna sweep (TPE, the median pruning rule) on the same 4 slots, twice per seed:

  rounds        ``rounds: 3, per_round: 4``: each round waits for its slowest trial, and the slots of the trials
                pruned early wait with it
  asynchronous  ``asynchronous: true, count: 12``: each slot asks for its next trial the moment it frees

Each trial is a real trial runner process (``gpusched sweep run``'s local backend, leases of 4 simulated GPUs:
no GPU here) running a command that reports a loss curve for 10 steps of 0.4 s; a poor learning rate gives a
poor curve, which the median rule stops. Slot use is the host's own GPU ledger (``accounting.jsonl``: every
attempt's seconds on its lease, what the GPU board sums): the seconds the slots held a trial, over 4 x the span
from the first trial's start to the last one's end.

    .venv/bin/python bench/async_slot_use.py [--seeds 3] [--step-seconds 0.4]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time

TRAIN = """
import json, math, os, sys, time
p = json.loads(os.environ["GPUSCHED_TRIAL_PARAMS"])
from airflow_provider_gpusched.trial import report
loss = 1.0
for step in range(1, 11):
    time.sleep(float(sys.argv[1]))
    # a learning rate near 10**-2.5 learns fastest; far from it the loss stalls
    loss *= 1 - 0.3 * math.exp(-((math.log10(p["lr"]) + 2.5) ** 2))
    report(step=step, loss=loss)
json.dump({"loss": loss}, open(os.path.join(os.environ["GPUSCHED_TRIAL_DIR"], "result.json"), "w"))
"""

SLOTS = 4
TRIALS = 12


def spec(root: str, seed: int, step_seconds: float, asynchronous: bool):
    from airflow_provider_gpusched.core.sweep import Objective, SweepSpec, loguniform

    shape = {"asynchronous": True, "count": TRIALS} if asynchronous else {"rounds": 3}
    return SweepSpec(
        name="slots",
        search="optuna",
        per_round=SLOTS,
        seed=seed,
        space={"lr": loguniform(1e-4, 1e-1)},
        command=[sys.executable, "-c", TRAIN, str(step_seconds)],
        objective=Objective("loss", "minimize"),
        pruning={"rule": "median", "warmup_steps": 3, "min_trials": 3},
        results_root=root,
        **shape,
    )


def slot_use(ledger: str) -> dict[str, float]:
    """From the host's GPU ledger: the busy seconds, the span, the slot use over the span, and the slot use while
    trials were left to start (up to the last trial's start: after it, a free slot has nothing to take, under any
    scheduler), and the mean gap between a trial's end on a GPU and the next one's start there."""
    spans = []
    with open(ledger, encoding="utf-8") as fh:
        for line in fh:
            record = json.loads(line)
            spans.append((record["time"] - record["seconds"], record["time"], record["gpus"][0]))
    first = min(start for start, _, _ in spans)
    last_start = max(start for start, _, _ in spans)
    end = max(stop for _, stop, _ in spans)
    busy = sum(stop - start for start, stop, _ in spans)
    busy_before = sum(max(0.0, min(stop, last_start) - start) for start, stop, _ in spans)
    gaps = []
    for gpu in {g for _, _, g in spans}:
        mine = sorted((start, stop) for start, stop, g in spans if g == gpu)
        gaps += [b[0] - a[1] for a, b in zip(mine, mine[1:], strict=False)]
    return {
        "busy": busy,
        "span": end - first,
        "use": busy / (SLOTS * (end - first)),
        "use_while_left": busy_before / (SLOTS * (last_start - first)) if last_start > first else 1.0,
        "gap": statistics.mean(gaps) if gaps else 0.0,
    }


def one(seed: int, step_seconds: float, asynchronous: bool) -> dict[str, float]:
    from airflow_provider_gpusched.core.gpu.inventory import SimulatedInventory
    from airflow_provider_gpusched.core.gpu.leases import LeaseManager
    from airflow_provider_gpusched.core.sweep.running.terminal import run_sweep

    with tempfile.TemporaryDirectory(prefix="gpusched-slots-") as root:
        leases = os.path.join(root, "leases")
        manager = LeaseManager(SimulatedInventory(f"{SLOTS}x24GiB"), leases)
        started = time.perf_counter()
        summary = run_sweep(
            spec(root, seed, step_seconds, asynchronous), manager=manager, parallel=SLOTS, progress=False, run="bench"
        )
        wall = time.perf_counter() - started
        counts = summary["counts"]
        return {
            **slot_use(os.path.join(leases, "accounting.jsonl")),
            "wall": wall,
            "trials": counts["succeeded"] + counts["pruned"] + counts["failed"],
            "pruned": counts["pruned"],
            "best": summary["best"]["score"],
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--step-seconds", type=float, default=0.4)
    args = parser.parse_args()
    print(
        f"{time.strftime('%Y-%m-%d %H:%M')}  {platform.node()}  {os.cpu_count()} cores  Python "
        f"{platform.python_version()}  {TRIALS} trials, {SLOTS} simulated GPUs, 10 steps x {args.step_seconds} s"
    )
    rows: dict[str, list[dict[str, float]]] = {"rounds": [], "asynchronous": []}
    for seed in range(args.seeds):
        for mode in rows:
            result = one(seed, args.step_seconds, mode == "asynchronous")
            rows[mode].append(result)
            print(
                f"  seed {seed}  {mode:<12}  slot use {result['use']:6.1%} (while trials were left "
                f"{result['use_while_left']:6.1%})  span {result['span']:5.1f} s  busy {result['busy']:5.1f} s  "
                f"gap {result['gap']:.2f} s  trials {result['trials']:.0f} ({result['pruned']:.0f} pruned)  "
                f"best loss {result['best']:.4f}"
            )
    print(
        f"\n{'mode':<12}  {'slot use':>9}  {'(min)':>6}  {'while left':>10}  {'(min)':>6}  {'span':>7}  "
        f"{'gap':>6}  {'pruned':>6}  {'best loss':>9}"
    )
    for mode, results in rows.items():
        uses, left = [r["use"] for r in results], [r["use_while_left"] for r in results]
        print(
            f"{mode:<12}  {statistics.mean(uses):>9.1%}  {min(uses):>6.1%}  {statistics.mean(left):>10.1%}  "
            f"{min(left):>6.1%}  {statistics.mean(r['span'] for r in results):>5.1f} s  "
            f"{statistics.mean(r['gap'] for r in results):>4.2f} s  "
            f"{statistics.mean(r['pruned'] for r in results):>6.1f}  {statistics.mean(r['best'] for r in results):>9.4f}"
        )


if __name__ == "__main__":
    main()
