"""Peer benchmark: random search, ASHA, BOHB and PBT on real training, Ray Tune and gpusched, in one run.

The trainable is the same function on both sides: ``airflow_provider_gpusched.examples.digits.train_digits`` training
the digits CNN (blocks of 32 and 64 3x3 channels, batches of 32, scikit-learn's bundled ``digits``: no download) on the
CPU, one thread per trial, checkpointing every epoch through the examples' checkpoint module. Both tools get the same
search space (``lr`` log-uniform 1e-4..1e-1, ``dropout`` uniform 0..0.5), the same budget (trials and epochs per
method, below) and the same number of slots (``--slots``, default 2: one per core here):

  method   Ray Tune                                        gpusched
  random   BasicVariantGenerator, 6 trials x 9 epochs      search: random, count 6, 9 epochs
           (both run the same 6 draws per seed: gpusched's, given to Ray as points_to_evaluate, so their best
           differs only by what the tools did, not by which 6 points each happened to draw)
  asha     ASHAScheduler(max_t 9, grace 1, eta 3), 12      search: random, count 12, pruning: asha (min_steps 1, eta 3)
  bohb     TuneBOHB + HyperBandForBOHB(max_t 9, eta 3), 12 search: optuna (TPE), asynchronous, count 12,
                                                           pruning: optuna hyperband (min 1, max 9, eta 3)
  pbt      PopulationBasedTraining(interval 3), 4 x 9      search: pbt, population 4, perturbation_interval 3, steps 9

Ray Tune runs on a local Ray with ``--slots`` CPUs (``ray.init(num_cpus=slots)``, one CPU per trial), in a subprocess
of ``--ray-python`` (an interpreter with ``ray[tune]``, ``hpbandster`` and ``ConfigSpace`` for TuneBOHB, PyTorch and
this package on its path). gpusched runs ``gpusched sweep run``'s local backend (``run_sweep``) on ``--slots``
SIMULATED GPUs (no GPU here: the trials train on the CPU), one trial per GPU.

Each trainable call appends what it did to a log (its start, each epoch's end and held-out accuracy), so both tools
are measured the same way. Per method and tool, over ``--seeds`` seeds:

  best      the best held-out accuracy any trial reported within the budget
  to .98    seconds from the tool's start to the first report of accuracy >= ``--target``
  slot use  the seconds spent inside the trainable (start to its last report), over slots x the tool's whole run
  starts    trainable calls (a PBT generation or a resumed Hyperband trial is a call of its own)
  epochs    trial-epochs trained (the budget used)

    .venv/bin/python bench/peer_ray_tune_hpo.py --ray-python /path/to/venv-with-ray/bin/python
    .venv/bin/python bench/peer_ray_tune_hpo.py --ray-python ... --seeds 1 --methods random,pbt
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
METHODS = ("random", "asha", "bohb", "pbt")
#: Ray's random search is given gpusched's draws through this variable (random_points)
POINTS_ENV = "GPUSCHED_BENCH_POINTS"
FIXED = {
    "model": "cnn",
    "block0": {"channels": 32, "kernel": 3},
    "block1": {"channels": 64, "kernel": 3},
    "batch_size": 32,
    "seed": 0,
}
LR, DROPOUT = (1e-4, 1e-1), (0.0, 0.5)
EPOCHS = 9
TRIALS = {"random": 6, "asha": 12, "bohb": 12, "pbt": 4}
PBT_INTERVAL = 3
LOG_ENV = "GPUSCHED_BENCH_LOG"


# -- the trainable both tools call ---------------------------------------------------------------------------------
def _log(record: dict) -> None:
    with open(os.environ[LOG_ENV], "a", encoding="utf-8") as fh:
        fh.write(json.dumps(record) + "\n")


def gpusched_trainable(params, trial_dir=None):
    """gpusched's python_callable: train_digits, each epoch logged as it is reported (before the pruning rule judges
    it: a pruned trial's last epoch counts, as Ray's does, whose trainable logs before ``tune.report``)."""
    import airflow_provider_gpusched.trial as trial_api
    from airflow_provider_gpusched.examples.digits import train_digits

    name = os.path.basename(trial_dir or "") or str(os.getpid())
    _log({"t": time.time(), "kind": "start", "trial": name})
    # the runner may run several trials one after another in this process: wrap the original once
    judged = getattr(trial_api, "_unlogged_report", trial_api.report)
    trial_api._unlogged_report = judged  # type: ignore[attr-defined]

    def report(step=None, **metrics):
        _log({"t": time.time(), "kind": "epoch", "trial": name, "epoch": step, "accuracy": metrics["accuracy"]})
        return judged(step, **metrics)

    trial_api.report = report  # train_digits imports it when it starts
    return train_digits(params, trial_dir)


def ray_trainable(config):
    """Ray Tune's function trainable: train_digits from Ray's checkpoint (when Ray restores one: a paused Hyperband
    trial, or a PBT member that exploits another), reporting and checkpointing every epoch."""
    from ray import tune

    from airflow_provider_gpusched.core.sweep.searches.pbt import HANDED_OVER_FILE
    from airflow_provider_gpusched.examples.digits import train_digits

    name = f"{tune.get_context().get_trial_id()}-{os.getpid()}-{time.time():.3f}"
    _log({"t": time.time(), "kind": "start", "trial": name})
    folder = tempfile.mkdtemp(prefix="gpusched-bench-ckpt-")
    restored = tune.get_checkpoint()
    if restored is not None:
        with restored.as_directory() as src:
            for f in os.listdir(src):
                shutil.copyfile(os.path.join(src, f), os.path.join(folder, f))
        # the examples' checkpoints refuse another trial's state unless told it was handed over (PBT's exploit)
        with open(os.path.join(folder, HANDED_OVER_FILE), "w", encoding="utf-8") as fh:
            json.dump({"from_member": "ray", "generation": None}, fh)

    def on_epoch_end(epoch, metrics):
        _log({"t": time.time(), "kind": "epoch", "trial": name, "epoch": epoch, "accuracy": metrics["accuracy"]})
        with tempfile.TemporaryDirectory(prefix="gpusched-bench-report-") as out:
            for f in os.listdir(folder):
                if f != HANDED_OVER_FILE:
                    shutil.copyfile(os.path.join(folder, f), os.path.join(out, f))
            tune.report(
                {"accuracy": metrics["accuracy"], "epoch": epoch}, checkpoint=tune.Checkpoint.from_directory(out)
            )

    params = {**FIXED, "lr": config["lr"], "dropout": config["dropout"], "epochs": EPOCHS}
    train_digits(params, checkpoints=folder, on_epoch_end=on_epoch_end)
    shutil.rmtree(folder, ignore_errors=True)


# -- Ray Tune ------------------------------------------------------------------------------------------------------
def ray_child(method: str, seed: int, slots: int, log: str) -> None:
    """One method and seed on Ray Tune; prints RAY_RESULT {start, end, ray}."""
    import ray
    from ray import tune

    os.environ[LOG_ENV] = log
    random.seed(seed)
    ray.init(
        num_cpus=slots,
        include_dashboard=False,
        logging_level="ERROR",
        log_to_driver=False,
        runtime_env={"env_vars": {LOG_ENV: log, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}},
    )
    space = {"lr": tune.loguniform(*LR), "dropout": tune.uniform(*DROPOUT)}
    scheduler, search = None, tune.search.basic_variant.BasicVariantGenerator(random_state=seed)
    if method == "random":  # the points gpusched's random search draws for this seed (run_ray)
        points = json.loads(os.environ[POINTS_ENV])
        search = tune.search.basic_variant.BasicVariantGenerator(points_to_evaluate=points, random_state=seed)
    elif method == "asha":
        scheduler = tune.schedulers.ASHAScheduler(
            time_attr="training_iteration", max_t=EPOCHS, grace_period=1, reduction_factor=3
        )
    elif method == "bohb":
        import ConfigSpace as CS
        from ray.tune.search.bohb import TuneBOHB

        cs = CS.ConfigurationSpace(seed=seed)
        cs.add(CS.UniformFloatHyperparameter("lr", *LR, log=True), CS.UniformFloatHyperparameter("dropout", *DROPOUT))
        search = TuneBOHB(space=cs, metric="accuracy", mode="max", seed=seed)
        scheduler = tune.schedulers.HyperBandForBOHB(time_attr="training_iteration", max_t=EPOCHS, reduction_factor=3)
        space = {}
    elif method == "pbt":
        scheduler = tune.schedulers.PopulationBasedTraining(
            time_attr="training_iteration",
            perturbation_interval=PBT_INTERVAL,
            hyperparam_mutations={"lr": tune.loguniform(*LR), "dropout": tune.uniform(*DROPOUT)},
            quantile_fraction=0.25,
            resample_probability=0.25,
            perturbation_factors=(1.2, 0.8),
        )
    with tempfile.TemporaryDirectory(prefix="gpusched-bench-ray-") as tmp:
        tuner = tune.Tuner(
            tune.with_resources(ray_trainable, {"cpu": 1}),
            param_space=space,
            tune_config=tune.TuneConfig(
                metric="accuracy",
                mode="max",
                num_samples=TRIALS[method],
                scheduler=scheduler,
                search_alg=search,
                max_concurrent_trials=slots,
            ),
            run_config=tune.RunConfig(storage_path=tmp, name="hpo", verbose=0),
        )
        start = time.time()
        tuner.fit()
        end = time.time()
    ray.shutdown()
    print("RAY_RESULT " + json.dumps({"start": start, "end": end, "ray": ray.__version__}), flush=True)


def random_points(seed: int) -> list[dict]:
    """The configurations gpusched's random search runs for ``seed`` (the same seeded draws in every process)."""
    from airflow_provider_gpusched.core.sweep import loguniform, uniform
    from airflow_provider_gpusched.core.sweep.parts.expand import random_trials

    space = {"lr": loguniform(*LR), "dropout": uniform(*DROPOUT)}
    return [{k: t.params[k] for k in space} for t in random_trials(space, TRIALS["random"], seed)]


def run_ray(method: str, seed: int, slots: int, python: str, log: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    if method == "random":
        env[POINTS_ENV] = json.dumps(random_points(seed))
    argv = [python, __file__, "--ray-child", method, str(seed), str(slots), log]
    out = subprocess.run(argv, capture_output=True, text=True, env=env)
    lines = [line for line in out.stdout.splitlines() if line.startswith("RAY_RESULT ")]
    if out.returncode != 0 or not lines:
        raise SystemExit(
            f"Ray Tune's {method} run failed ({out.returncode}); does {python} have ray[tune], hpbandster, "
            f"ConfigSpace and PyTorch?\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
        )
    return json.loads(lines[-1][len("RAY_RESULT ") :])


# -- gpusched ------------------------------------------------------------------------------------------------------
def gpusched_spec(method: str, seed: int, slots: int, root: str):
    from airflow_provider_gpusched.core.sweep import Objective, SweepSpec, TrialResources, loguniform, uniform

    space = {"lr": loguniform(*LR), "dropout": uniform(*DROPOUT)}
    common = {
        "name": f"bench_{method}",
        "seed": seed,
        "space": space,
        "python_callable": gpusched_trainable,
        "objective": Objective("accuracy", "maximize"),
        "resources": TrialResources(gpus=1),
        "results_root": root,
    }
    fixed = {**FIXED, "epochs": EPOCHS}
    if method == "random":
        return SweepSpec(search="random", count=TRIALS[method], global_config=fixed, **common)
    if method == "asha":
        pruning = {"rule": "asha", "min_steps": 1, "reduction_factor": 3}
        return SweepSpec(search="random", count=TRIALS[method], global_config=fixed, pruning=pruning, **common)
    if method == "bohb":
        pruning = {
            "rule": "optuna",
            "pruner": "hyperband",
            "options": {"min_resource": 1, "max_resource": EPOCHS, "reduction_factor": 3},
        }
        return SweepSpec(
            search="optuna",
            sampler="tpe",
            asynchronous=True,
            count=TRIALS[method],
            per_round=slots,
            global_config=fixed,
            pruning=pruning,
            **common,
        )
    pbt = {
        "population": TRIALS[method],
        "perturbation_interval": PBT_INTERVAL,
        "steps": EPOCHS,
        "step_param": "epochs",
        "quantile_fraction": 0.25,
        "resample_probability": 0.25,
        "perturbation_factors": [1.2, 0.8],
    }
    return SweepSpec(search="pbt", global_config=FIXED, pbt=pbt, **common)


def run_gpusched(method: str, seed: int, slots: int, log: str) -> dict:
    from airflow_provider_gpusched.core.gpu.inventory import SimulatedInventory
    from airflow_provider_gpusched.core.gpu.leases import LeaseManager
    from airflow_provider_gpusched.core.sweep.running.terminal import run_sweep

    os.environ[LOG_ENV] = log
    with tempfile.TemporaryDirectory(prefix="gpusched-bench-") as root:
        manager = LeaseManager(SimulatedInventory(f"{slots}x24GiB"), os.path.join(root, "leases"))
        start = time.time()
        summary = run_sweep(
            gpusched_spec(method, seed, slots, root), manager=manager, parallel=slots, progress=False, run="bench"
        )
        end = time.time()
    counts = summary["counts"]
    bad = sum(counts.get(s, 0) for s in ("failed", "invalid", "timeout"))
    if bad:
        raise SystemExit(f"gpusched's {method} run: {bad} trial(s) failed: {counts}")
    return {"start": start, "end": end}


# -- the figures ---------------------------------------------------------------------------------------------------
def figures(log: str, start: float, end: float, slots: int, target: float) -> dict:
    records = [json.loads(line) for line in Path(log).read_text().splitlines() if line.strip()]
    starts = {r["trial"]: r["t"] for r in records if r["kind"] == "start"}
    epochs = [r for r in records if r["kind"] == "epoch"]
    last = {}
    for r in epochs:
        last[r["trial"]] = max(last.get(r["trial"], 0.0), r["t"])
    busy = sum(last.get(trial, t) - t for trial, t in starts.items())
    reached = [r["t"] - start for r in epochs if r["accuracy"] >= target]
    return {
        "best": max((r["accuracy"] for r in epochs), default=float("nan")),
        "to_target": min(reached) if reached else None,
        "use": busy / (slots * (end - start)),
        "starts": len(starts),
        "epochs": len(epochs),
        "wall": end - start,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ray-python", required=True, help="an interpreter with ray[tune], hpbandster, ConfigSpace")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--slots", type=int, default=2)
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--target", type=float, default=0.98)
    args = parser.parse_args()
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = sorted(set(methods) - set(METHODS))
    if unknown:
        parser.error(f"--methods: unknown {', '.join(unknown)}; expected some of {', '.join(METHODS)}")
    os.environ["OMP_NUM_THREADS"] = "1"
    version = subprocess.run(
        [args.ray_python, "-c", "import ray; print(ray.__version__)"], capture_output=True, text=True
    ).stdout.strip()
    print(
        f"{time.strftime('%Y-%m-%d %H:%M')}  {platform.node()}  {os.cpu_count()} cores  Python "
        f"{platform.python_version()}  Ray {version or '?'}  {args.slots} slots  digits CNN, {EPOCHS} epochs at most"
    )
    rows: dict[tuple[str, str], list[dict]] = {}
    for seed in range(args.seeds):
        for method in methods:
            for tool in ("ray", "gpusched"):
                with tempfile.NamedTemporaryFile(prefix="gpusched-bench-log-", suffix=".jsonl", delete=False) as fh:
                    log = fh.name
                try:
                    if tool == "ray":
                        span = run_ray(method, seed, args.slots, args.ray_python, log)
                    else:
                        span = run_gpusched(method, seed, args.slots, log)
                    result = figures(log, span["start"], span["end"], args.slots, args.target)
                finally:
                    os.unlink(log)
                rows.setdefault((method, tool), []).append(result)
                to = f"{result['to_target']:5.1f} s" if result["to_target"] is not None else "  never"
                print(
                    f"  seed {seed}  {method:<6}  {tool:<8}  best {result['best']:.4f}  to {args.target}: {to}  "
                    f"slot use {result['use']:6.1%}  starts {result['starts']:3d}  epochs {result['epochs']:3d}  "
                    f"wall {result['wall']:5.1f} s",
                    flush=True,
                )
    print(
        f"\n{'method':<6}  {'tool':<8}  {'best (mean)':>11}  {'(min)':>6}  {'to target':>9}  {'slot use':>8}  "
        f"{'starts':>6}  {'epochs':>6}  {'wall':>7}"
    )
    for (method, tool), results in rows.items():
        reached = [r["to_target"] for r in results if r["to_target"] is not None]
        to = f"{statistics.mean(reached):7.1f} s" if reached else "    never"
        if reached and len(reached) < len(results):
            to += f" ({len(reached)}/{len(results)})"
        print(
            f"{method:<6}  {tool:<8}  {statistics.mean(r['best'] for r in results):>11.4f}  "
            f"{min(r['best'] for r in results):>6.4f}  {to:>9}  {statistics.mean(r['use'] for r in results):>8.1%}  "
            f"{statistics.mean(r['starts'] for r in results):>6.1f}  {statistics.mean(r['epochs'] for r in results):>6.1f}  "
            f"{statistics.mean(r['wall'] for r in results):>5.1f} s"
        )


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "--ray-child":
        ray_child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
    else:
        main()
