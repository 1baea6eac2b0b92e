"""Turning a sweep definition into trials.

Grid semantics are GPU Task Scheduler's: ``global_config`` holds fixed values; ``test_config`` is a list of
dicts whose values are lists (or search spaces); each dict gives the cross product of its values (key order
kept, the last key varying fastest), the trials are the union over the list in order, test values override
global ones, and duplicate trials are dropped (the first stays).

Every trial has a stable id (a hash of its parameters and an optional code version, the same in every
process), a human label ``key1=value1,key2=value2`` of the parameters that vary, and a folder name that
is safe on any file system (no ``/``, no ``..``).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import random
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from airflow_provider_gpusched.core.errors import InvalidArgumentError
from airflow_provider_gpusched.core.sweep.spaces import Choice, LogUniform, QUniform, RandInt, Uniform

SPACES = (Choice, Uniform, LogUniform, RandInt, QUniform)
_UNSAFE = re.compile(r"[^A-Za-z0-9._=,+-]+")


def trial_id(params: Mapping[str, Any], code_version: str | None = None) -> str:
    """A short hash of the parameters (and code version), identical across processes and runs."""
    canonical = json.dumps({"params": params, "code_version": code_version}, sort_keys=True,
                           separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:12]


def _value_text(value: Any, maxlen: int) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text[:maxlen]


def trial_label(params: Mapping[str, Any], keys: Sequence[str] | None = None, value_maxlen: int = 30) -> str:
    keys = list(params) if keys is None else [k for k in keys if k in params]
    return ",".join(f"{k}={_value_text(params[k], value_maxlen)}" for k in keys)


def safe_name(label: str, tid: str, maxlen: int = 120) -> str:
    """A folder name for a trial: the label with unsafe characters replaced, plus the id (so names that
    sanitise alike stay distinct). Never empty, never ``.``/``..``, never containing ``/``."""
    text = _UNSAFE.sub("_", label).strip("._")[:maxlen]
    return f"{text}.{tid[:8]}" if text else tid


@dataclass(frozen=True)
class Trial:
    params: dict
    trial_id: str
    label: str
    index: int = 0

    @property
    def folder(self) -> str:
        return safe_name(self.label, self.trial_id)


@dataclass
class GridSweep:
    """``global_config`` + ``test_config`` (GPU Task Scheduler) expanded into trials."""

    global_config: Mapping[str, Any] = field(default_factory=dict)
    test_config: Sequence[Mapping[str, Any]] = field(default_factory=lambda: [{}])
    grid_steps: int | None = None
    code_version: str | None = None
    where: str = "sweep"  # for error messages: a file name, or "sweep"

    def trials(self) -> list[Trial]:
        if not isinstance(self.global_config, Mapping):
            raise InvalidArgumentError(f"{self.where}: global_config", self.global_config, "a mapping of fixed values")
        if isinstance(self.test_config, Mapping) or not isinstance(self.test_config, Sequence):
            raise InvalidArgumentError(f"{self.where}: test_config", self.test_config, "a list of mappings")
        trials: list[Trial] = []
        seen: set[str] = set()
        varying: list[str] = []
        for i, block in enumerate(self.test_config):
            if not isinstance(block, Mapping):
                raise InvalidArgumentError(f"{self.where}: test_config[{i}]", block, "a mapping of value lists")
            for key in block:
                if key not in varying:
                    varying.append(key)
        for i, block in enumerate(self.test_config):
            keys = list(block)
            values = [self._values(f"test_config[{i}].{k}", block[k]) for k in keys]
            for combo in itertools.product(*values):
                params = {**self.global_config, **dict(zip(keys, combo))}
                tid = trial_id(params, self.code_version)
                if tid in seen:
                    continue
                seen.add(tid)
                trials.append(Trial(params, tid, trial_label(params, varying), len(trials)))
        return trials

    def _values(self, path: str, value: Any) -> list:
        if isinstance(value, SPACES):
            try:
                return value.grid(self.grid_steps)
            except InvalidArgumentError as exc:
                raise InvalidArgumentError(f"{self.where}: {path}", value, exc.expected) from None
        if isinstance(value, (list, tuple)) and value:
            return list(value)
        raise InvalidArgumentError(f"{self.where}: {path}", value,
                                   "a non-empty list of values or a search space (choice, uniform, ...)")


def random_trials(space: Mapping[str, Any], count: int, seed: int, *, fixed: Mapping[str, Any] | None = None,
                  code_version: str | None = None, max_tries: int | None = None) -> list[Trial]:
    """``count`` distinct trials sampled from ``space`` (values: search spaces, lists = choice, scalars fixed)
    with a seeded generator: the same seed gives the same trials in every process."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise InvalidArgumentError("count", count, "an integer >= 1")
    rng = random.Random(seed)
    trials: list[Trial] = []
    seen: set[str] = set()
    tries = 0
    limit = max_tries or count * 50
    while len(trials) < count and tries < limit:
        tries += 1
        params = dict(fixed or {})
        for key, dim in space.items():
            if isinstance(dim, SPACES):
                params[key] = dim.sample(rng)
            elif isinstance(dim, (list, tuple)):
                params[key] = rng.choice(list(dim))
            else:
                params[key] = dim
        tid = trial_id(params, code_version)
        if tid not in seen:
            seen.add(tid)
            trials.append(Trial(params, tid, trial_label(params, list(space)), len(trials)))
    return trials
