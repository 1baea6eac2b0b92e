"""A real training run that finishes in seconds on a CPU: handwritten digits (scikit-learn's bundled ``digits``,
1,797 8x8 images, 10 classes, no download) with a small MLP or CNN in PyTorch.

    from airflow_provider_gpusched.examples.digits import train_digits

    train_digits({"lr": 3e-3, "width": 64, "dropout": 0.1, "epochs": 12})
    # {'accuracy': 0.973, 'best_accuracy': 0.976, 'epochs': 12, 'device': 'cpu', 'params': 8970, ...}

As a sweep trial it is called ``train_digits(params, trial_dir)``; in a ``LocalGPUOperator`` or
``@task.local_gpu`` it is called with the parameters alone. It

* trains epoch by epoch and reports each epoch's ``loss``, ``val_loss`` and ``accuracy`` (on the held-out
  quarter of the data) through ``trial.report``, so a sweep's pruning rule can stop it;
* saves a checkpoint after every epoch and, on SIGTERM (a preemption, a stop), between two batches; when
  started again it resumes from that epoch and batch, not from epoch 0 (``resumed_from`` in its result);
* runs on the leased GPU when PyTorch sees one (``CUDA_VISIBLE_DEVICES`` holds the lease), else on the CPU;
* returns the last epoch's metrics, the best accuracy, the learning curve, where it started and stopped, the
  device, and the model's parameter count (and, for the CNN, its FLOPs per image, counted by PyTorch).

Parameters (all optional; unknown keys are refused, naming the key):

``model``: ``mlp`` (default) or ``cnn``; ``width``, ``depth``, ``dropout``: the MLP's hidden layers; ``block0``,
``block1``, ...: the CNN's blocks, each ``{"channels": C, "kernel": K}`` (what a NAS search chooses);
``lr``, ``weight_decay``, ``optimizer`` (``adam``, ``adamw`` or ``sgd``), ``momentum`` (SGD), ``batch_size``,
``epochs``, ``seed``.
"""

from __future__ import annotations

import math
import os
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_gpusched.core.checks import is_int, is_number
from airflow_provider_gpusched.examples.checkpoints import (
    EXIT_STOPPED,
    CheckpointError,
    Checkpoints,
    checkpoint_dir,
    stop_requested,
    stop_signal,
)

DEFAULTS: dict[str, Any] = {
    "model": "mlp",
    "width": 64,
    "depth": 2,
    "dropout": 0.1,
    "lr": 3e-3,
    "weight_decay": 0.0,
    "optimizer": "adam",
    "momentum": 0.9,
    "batch_size": 64,
    "epochs": 12,
    "seed": 0,
}
INPUT_SHAPE = (1, 1, 8, 8)  # one image: the shape a model's cost is measured with (core/sweep/searches/model_cost.py)
CLASSES = 10
VAL_FRACTION = 0.25
CHECKPOINT_KEYS = ("epoch", "batch", "epoch_loss", "model", "optimizer", "rng", "starts", "stops", "curve")
_BLOCK = re.compile(r"block(\d+)$")
_INTS = {"width": 1, "depth": 1, "batch_size": 1, "epochs": 1, "seed": 0}  # name -> smallest value
_FRACTIONS = {"dropout": (0.0, 0.95), "momentum": (0.0, 1.0)}


def require_examples_extra() -> None:
    """ImportError that says what to install when PyTorch or scikit-learn is missing."""
    import importlib.util

    missing = [
        name
        for name, module in (("torch", "torch"), ("scikit-learn", "sklearn"))
        if importlib.util.find_spec(module) is None
    ]
    if missing:
        raise ImportError(
            f"the digits example needs {' and '.join(missing)}: pip install 'airflow-provider-gpusched[examples]'"
        )


def check_params(params: Mapping[str, Any] | None) -> dict[str, Any]:
    """The parameters with defaults filled in; ValueError naming the parameter that is wrong."""
    if params is None:
        params = {}
    if not isinstance(params, Mapping):
        raise ValueError(f"train_digits: params: expected a mapping of parameters, got {type(params).__name__}")
    out = {**DEFAULTS, **params}
    unknown = [k for k in params if k not in DEFAULTS and not _BLOCK.match(str(k))]
    if unknown:
        raise ValueError(
            f"train_digits: params.{unknown[0]}: unknown parameter; expected some of "
            f"{', '.join(DEFAULTS)}, block0, block1, ..."
        )
    for name, low in _INTS.items():
        value = out[name]
        if isinstance(value, float) and value.is_integer():
            value = out[name] = int(value)
        if not is_int(value) or value < low:
            raise ValueError(f"train_digits: params.{name}: expected a whole number >= {low}, got {value!r}")
    for name in ("lr", "weight_decay"):
        value = out[name]
        if not is_number(value) or not math.isfinite(value) or value < 0 or (name == "lr" and value == 0):
            raise ValueError(
                f"train_digits: params.{name}: expected a number {'> 0' if name == 'lr' else '>= 0'}, got {value!r}"
            )
    for name, (least, most) in _FRACTIONS.items():
        value = out[name]
        if not is_number(value) or not least <= value <= most:
            raise ValueError(f"train_digits: params.{name}: expected a number from {least} to {most}, got {value!r}")
    if out["optimizer"] not in ("adam", "adamw", "sgd"):
        raise ValueError(f"train_digits: params.optimizer: expected adam, adamw or sgd, got {out['optimizer']!r}")
    if out["model"] not in ("mlp", "cnn"):
        raise ValueError(f"train_digits: params.model: expected mlp or cnn, got {out['model']!r}")
    if out["model"] == "cnn" or any(_BLOCK.match(str(k)) for k in params):
        out["model"] = "cnn"
        blocks_of(out, check=True)
    return out


def blocks_of(params: Mapping[str, Any], check: bool = False) -> list[dict[str, Any]]:
    """The CNN blocks ``block0``, ``block1``, ... in order (a CNN without any: one 16-channel 3x3 block)."""
    found = sorted((int(m.group(1)), k) for k in params if (m := _BLOCK.match(str(k))))
    if check and [i for i, _ in found] != list(range(len(found))):
        raise ValueError(
            f"train_digits: params: expected blocks block0, block1, ... without gaps, got "
            f"{', '.join(k for _, k in found)}"
        )
    blocks = []
    for _, key in found:
        block = params[key]
        if check:
            if not isinstance(block, Mapping) or set(block) - {"channels", "kernel"}:
                raise ValueError(f"train_digits: params.{key}: expected {{channels: C, kernel: K}}, got {block!r}")
            for name, value in block.items():
                if not is_int(value) or value < 1 or (name == "kernel" and value % 2 == 0):
                    raise ValueError(
                        f"train_digits: params.{key}.{name}: expected a whole number >= 1"
                        f"{' and odd' if name == 'kernel' else ''}, got {value!r}"
                    )
        blocks.append({"channels": 16, "kernel": 3, **block})
    return blocks or [{"channels": 16, "kernel": 3}]


def build_model(params: Mapping[str, Any] | None = None):
    """The ``torch.nn.Module`` that ``params`` describe (``check_params``). Also the NAS search's evaluator:
    ``ModelCost(build_model, INPUT_SHAPE)`` measures each candidate's FLOPs and parameters from it."""
    import torch.nn as nn

    p = check_params(params)
    if p["model"] == "mlp":
        layers: list[nn.Module] = [nn.Flatten()]
        features = INPUT_SHAPE[2] * INPUT_SHAPE[3]
        for _ in range(p["depth"]):
            layers += [nn.Linear(features, p["width"]), nn.ReLU(), nn.Dropout(p["dropout"])]
            features = p["width"]
        return nn.Sequential(*layers, nn.Linear(features, CLASSES))
    layers, channels, side = [], INPUT_SHAPE[1], INPUT_SHAPE[2]
    for i, block in enumerate(blocks_of(p)):
        layers += [
            nn.Conv2d(channels, block["channels"], block["kernel"], padding=block["kernel"] // 2),
            nn.BatchNorm2d(block["channels"]),
            nn.ReLU(),
        ]
        channels = block["channels"]
        if i < 2 and side > 2:  # 8x8 -> 4x4 -> 2x2
            layers.append(nn.MaxPool2d(2))
            side //= 2
    return nn.Sequential(
        *layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(p["dropout"]), nn.Linear(channels, CLASSES)
    )


def digits_arrays():
    """``(images, target)``: scikit-learn's ``load_digits()`` images (``1797 x 8 x 8``, values 0..16) and labels,
    read from the CSV file scikit-learn ships, without importing scikit-learn (its import costs each trial
    process about 2 s of CPU, more than a few epochs of training)."""
    import gzip
    import importlib.util

    import numpy as np

    spec = importlib.util.find_spec("sklearn")  # finds the package; runs none of its code
    if spec is None or not spec.submodule_search_locations:
        require_examples_extra()
        raise ImportError("the digits example needs scikit-learn's digits data (sklearn/datasets/data/digits.csv.gz)")
    path = os.path.join(list(spec.submodule_search_locations)[0], "datasets", "data", "digits.csv.gz")
    with gzip.open(path, "rt") as f:
        data = np.loadtxt(f, delimiter=",")
    return data[:, :-1].reshape(-1, 8, 8), data[:, -1].astype(int)


def load_digits_split(seed: int = 0, device: Any = "cpu"):
    """``(x_train, y_train, x_val, y_val)``: the 1,797 images scaled to [0, 1] as ``N x 1 x 8 x 8`` tensors, a
    seeded three-to-one split (the same for every trial of a sweep with the same seed)."""
    import torch

    images, target = digits_arrays()
    x = torch.tensor(images, dtype=torch.float32).unsqueeze(1) / 16.0
    y = torch.tensor(target, dtype=torch.long)
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))
    val = int(len(y) * VAL_FRACTION)
    val_idx, train_idx = order[:val], order[val:]
    return (x[train_idx].to(device), y[train_idx].to(device), x[val_idx].to(device), y[val_idx].to(device))


def pick_device():
    """The leased GPU when PyTorch sees one (``cuda:0`` is the first GPU of ``CUDA_VISIBLE_DEVICES``), held to
    the lease's share of its memory when the lease reserves a slice (``$GPUSCHED_GPU_MEMORY_FRACTION``), else
    the CPU (with one thread unless ``OMP_NUM_THREADS`` says otherwise: several small trials share a host)."""
    import torch

    if torch.cuda.is_available():
        fraction = os.environ.get("GPUSCHED_GPU_MEMORY_FRACTION")
        if fraction:  # a packed lease: stay within the slice reserved (a CUDA OOM then retries with more)
            torch.cuda.set_per_process_memory_fraction(float(fraction), 0)
        return torch.device("cuda", 0)
    if "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(1)
    return torch.device("cpu")


def describe_device(device) -> str:
    import torch

    if device.type == "cuda":
        return (
            f"cuda:{device.index or 0} ({torch.cuda.get_device_name(device)}, "
            f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '')})"
        )
    return "cpu"


def _optimizer(p: Mapping[str, Any], model):
    import torch

    if p["optimizer"] == "sgd":
        return torch.optim.SGD(model.parameters(), lr=p["lr"], momentum=p["momentum"], weight_decay=p["weight_decay"])
    cls = torch.optim.AdamW if p["optimizer"] == "adamw" else torch.optim.Adam
    return cls(model.parameters(), lr=p["lr"], weight_decay=p["weight_decay"])


def evaluate(model, x, y) -> tuple[float, float]:
    """``(loss, accuracy)`` of ``model`` on ``x``, ``y``."""
    import torch
    import torch.nn.functional as F

    model.eval()
    with torch.no_grad():
        logits = model(x)
        loss = F.cross_entropy(logits, y).item()
        accuracy = (logits.argmax(1) == y).float().mean().item()
    model.train()
    return loss, accuracy


@dataclass
class _Progress:
    """Where a training run stands: the epoch, the batch within it, the epoch's training loss so far (summed
    over its batches), where each start began and each stop stopped, and the learning curve. A checkpoint keeps
    it with the model's and optimizer's state; ``epochs_run`` counts this start's epochs only."""

    epoch: int = 0
    batch: int = 0
    epoch_loss: float = 0.0
    starts: list[dict[str, int]] = field(default_factory=list)
    stops: list[dict[str, int]] = field(default_factory=list)
    curve: list[dict[str, Any]] = field(default_factory=list)
    resumed_from: dict[str, int] | None = None
    epochs_run: int = 0

    @classmethod
    def resume(cls, store: Checkpoints, p: Mapping[str, Any], model, optimizer, device) -> _Progress:
        """The progress of the checkpoint in ``store``, with the model, the optimizer and PyTorch's random state
        restored from it (a new run when there is none); the start is counted in ``starts``."""
        import torch

        state = store.load(map_location=device)
        progress = cls()
        if state is not None:
            missing = sorted(set(CHECKPOINT_KEYS) - set(state))
            if missing:
                raise CheckpointError(
                    f"checkpoint {store.path}: has no {', '.join(missing)} (not written by "
                    "train_digits); remove it to start from scratch"
                )
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            for group in optimizer.param_groups:  # this run's values (PBT may start it from another member's state)
                group["lr"], group["weight_decay"] = p["lr"], p["weight_decay"]
                if "momentum" in group and p["optimizer"] == "sgd":
                    group["momentum"] = p["momentum"]
            torch.set_rng_state(state["rng"].cpu() if hasattr(state["rng"], "cpu") else state["rng"])
            progress = cls(
                epoch=int(state["epoch"]),
                batch=int(state["batch"]),
                epoch_loss=float(state["epoch_loss"]),
                starts=list(state["starts"]),
                stops=list(state["stops"]),
                curve=list(state["curve"]),
            )
            print(
                f"resuming from epoch {progress.epoch}, batch {progress.batch} (checkpoint {store.path}; "
                f"{len(progress.stops)} stop(s) before)",
                flush=True,
            )
            progress.resumed_from = {"epoch": progress.epoch, "batch": progress.batch}
        progress.starts.append({"epoch": progress.epoch, "batch": progress.batch})
        return progress

    def checkpoint(self, model, optimizer) -> dict[str, Any]:
        """What a checkpoint keeps (CHECKPOINT_KEYS)."""
        import torch

        return {
            "epoch": self.epoch,
            "batch": self.batch,
            "epoch_loss": self.epoch_loss,
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "rng": torch.get_rng_state(),
            "starts": self.starts,
            "stops": self.stops,
            "curve": self.curve,
        }

    def end_epoch(self, metrics: Mapping[str, float]) -> None:
        """The epoch's metrics on the curve, and the next epoch's first batch."""
        self.curve.append({"epoch": self.epoch + 1, **{k: round(v, 5) for k, v in metrics.items()}})
        self.epoch, self.batch, self.epoch_loss = self.epoch + 1, 0, 0.0
        self.epochs_run += 1


def train_digits(
    params: Mapping[str, Any] | None = None,
    trial_dir: str | None = None,
    *,
    checkpoints: str | None = None,
    on_epoch_end: Callable[[int, dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Train on ``digits`` and return the metrics (see the module's docstring). ``checkpoints``: the folder
    (default: :func:`~.checkpoints.checkpoint_dir`). ``on_epoch_end(epoch, metrics)`` is called after each
    epoch's report and checkpoint."""
    require_examples_extra()
    import torch
    import torch.nn.functional as F

    from airflow_provider_gpusched.trial import report

    p = check_params(params)
    started = time.monotonic()
    device = pick_device()
    torch.manual_seed(p["seed"])
    x_train, y_train, x_val, y_val = load_digits_split(p["seed"], device)
    model = build_model(p).to(device)
    optimizer = _optimizer(p, model)
    store = Checkpoints(checkpoints or checkpoint_dir(trial_dir), fingerprint=p)
    run = _Progress.resume(store, p, model, optimizer, device)
    batches = math.ceil(len(y_train) / p["batch_size"])

    def save() -> str | None:
        return store.save(run.checkpoint(model, optimizer))

    with store.stop_on_sigterm():
        while run.epoch < p["epochs"]:
            # the same order for an epoch however often it starts: a resumed epoch skips the batches done
            seed = p["seed"] * 100_003 + run.epoch
            order = torch.randperm(len(y_train), generator=torch.Generator().manual_seed(seed)).to(device)
            while run.batch < batches:
                if stop_requested():
                    run.stops.append({"epoch": run.epoch, "batch": run.batch})
                    path = save()
                    print(
                        f"stopped by {stop_signal()} at epoch {run.epoch}, batch {run.batch}: checkpoint {path}",
                        flush=True,
                    )
                    raise SystemExit(EXIT_STOPPED)
                idx = order[run.batch * p["batch_size"] : (run.batch + 1) * p["batch_size"]]
                loss = F.cross_entropy(model(x_train[idx]), y_train[idx])
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                run.epoch_loss += loss.item() * len(idx)
                run.batch += 1
            val_loss, accuracy = evaluate(model, x_val, y_val)
            metrics = {"loss": run.epoch_loss / len(y_train), "val_loss": val_loss, "accuracy": accuracy}
            run.end_epoch(metrics)
            path = save()
            # a pruning rule may stop the trial here, but never at its last epoch (final: its budget trained)
            report(step=run.epoch, checkpoint=path, final=run.epoch == p["epochs"], **metrics)
            if on_epoch_end is not None:
                on_epoch_end(run.epoch, metrics)
    return _training_result(p, model, run, device, store.path, started)


def _training_result(
    p: Mapping[str, Any], model, run: _Progress, device, checkpoint: str | None, started: float
) -> dict[str, Any]:
    """What ``train_digits`` returns: the last epoch's metrics, the best accuracy, the progress, the model's size."""
    from airflow_provider_gpusched.core.sweep.searches.model_cost import model_cost

    # FLOPs for the CNN (what a NAS search constrains), counted after training: PyTorch's counter takes 1.5-2 s to
    # load (4 s with the cores busy), time a time-limit chain's segment would otherwise spend before its first step
    cost = (
        model_cost(model, INPUT_SHAPE)
        if p["model"] == "cnn"
        else {"params": sum(t.numel() for t in model.parameters()), "flops": None}
    )
    curve = run.curve
    last = curve[-1] if curve else {"accuracy": float("nan"), "val_loss": float("nan"), "loss": float("nan")}
    return {
        "accuracy": last["accuracy"],
        "best_accuracy": max(c["accuracy"] for c in curve) if curve else None,
        "val_loss": last["val_loss"],
        "loss": last["loss"],
        "epochs": run.epoch,
        "epochs_run": run.epochs_run,
        "resumed_from": run.resumed_from,
        "starts": run.starts,
        "stops": run.stops,
        "curve": curve,
        "device": describe_device(device),
        "params": cost["params"],
        "flops": cost["flops"],
        "seconds": round(time.monotonic() - started, 3),
        "checkpoint": checkpoint,
    }
