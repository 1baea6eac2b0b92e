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
import json
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any

from airflow_provider_gpusched.core.checks import is_int
from airflow_provider_gpusched.core.errors import InvalidArgumentError
from airflow_provider_gpusched.core.records import Settings, says
from airflow_provider_gpusched.core.sweep.parts.spaces import (
    Choice,
    Conditional,
    LogUniform,
    QUniform,
    RandInt,
    Uniform,
)

SPACES = (Choice, Uniform, LogUniform, RandInt, QUniform)
_UNSAFE = re.compile(r"[^A-Za-z0-9._=,+-]+")


#: a trial's parameters as JSON at most: they travel in one environment variable (``GPUSCHED_TRIAL_PARAMS``), and
#: Linux refuses to start a program with one environment string over 128 KiB ("Argument list too long")
MAX_PARAMS_BYTES = 64 * 1024


def trial_id(params: Mapping[str, Any], code_version: str | None = None, index: int | None = None) -> str:
    """A short hash of the parameters (and code version), identical across processes and runs. Parameters over
    :data:`MAX_PARAMS_BYTES` as JSON are refused here, when the sweep is planned (``index``: the trial's, named)."""
    canonical = json.dumps(
        {"params": params, "code_version": code_version}, sort_keys=True, separators=(",", ":"), default=str
    )
    if len(canonical) > MAX_PARAMS_BYTES:
        from airflow_provider_gpusched.core.errors import InvalidArgumentError

        big = max(params, key=lambda k: len(json.dumps(params[k], default=str)), default="")
        raise InvalidArgumentError(
            f"trial {index}" if index is not None else "trial parameters",
            f"{len(canonical):,} bytes of parameters (the largest: {big!r})",
            f"at most {MAX_PARAMS_BYTES:,} bytes as JSON: they reach the trial in one "
            f"environment variable (GPUSCHED_TRIAL_PARAMS), which Linux caps at 128 KiB. Pass a path to a file "
            f"instead of its content",
        )
    return hashlib.sha256(canonical.encode()).hexdigest()[:12]


def _value_text(value: Any, maxlen: int) -> str:
    if isinstance(value, float):
        text = f"{value:.6g}"
    else:
        text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text[:maxlen]


#: text that goes into folder names
FolderText = Annotated[
    str, says("1 to 5 characters, no '/', '\\', space or control character", pattern=r"^[^/\\\x00\n\r\t ]{1,5}$")
]


@dataclass(frozen=True)
class LabelFormat:
    """How a trial's label (and so its result folder) is spelled: GPU Task Scheduler's
    ``key1<indicator>value1<separator>key2<indicator>value2``, each value cut to ``value_maxlen`` characters
    (its ``test_config_string_indicator``, ``test_config_string_separator``, ``config_string_value_maxlen``
    and ``test_config_string_inst_separator``; our defaults are ``=`` and ``,``, its are ``-`` and ``,``)."""

    indicator: FolderText = "="
    separator: FolderText = ","
    value_maxlen: Annotated[int, says("a whole number from 1 to 200", ge=1, le=200)] = 30
    #: between trials when all labels are listed as one string (``gpusched sweep preview --labels``)
    instance_separator: Annotated[str, says("1 to 10 characters", pattern=r"^[^\x00]{1,10}$")] = "+"

    def check(self, where: str) -> None:
        _LABELS.check(self, where)  # each setting's type and bounds (their annotations)

    def label(self, params: Mapping[str, Any], keys: Sequence[str] | None = None) -> str:
        keys = list(params) if keys is None else [k for k in keys if k in params]
        return self.separator.join(f"{k}{self.indicator}{_value_text(params[k], self.value_maxlen)}" for k in keys)


_LABELS = Settings(LabelFormat)


DEFAULT_LABELS = LabelFormat()


def trial_label(
    params: Mapping[str, Any], keys: Sequence[str] | None = None, label_format: LabelFormat = DEFAULT_LABELS
) -> str:
    return label_format.label(params, keys)


def safe_text(text: str, maxlen: int = 120) -> str:
    """``text`` as part of a file name: unsafe characters replaced, no leading or trailing ``.``/``_``, at most
    ``maxlen`` characters; may be empty."""
    return _UNSAFE.sub("_", text).strip("._")[:maxlen]


def safe_name(label: str, tid: str, maxlen: int = 120) -> str:
    """A folder name for a trial: the label with unsafe characters replaced, plus the id (so names that
    sanitise alike stay distinct). Never empty, never ``.``/``..``, never containing ``/``."""
    text = safe_text(label, maxlen)
    return f"{text}.{tid[:8]}" if text else tid


@dataclass(frozen=True)
class Trial:
    params: dict[str, Any]
    trial_id: str
    label: str
    index: int = 0

    @property
    def folder(self) -> str:
        return safe_name(self.label, self.trial_id)


def flatten(mapping: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested plain mappings become dotted keys (``{"policy": {"lr": x}}`` -> ``{"policy.lr": x}``), so a
    space can mirror the structure of a training config (DI-toolkit). Search spaces and values stay as they are."""
    flat: dict[str, Any] = {}
    for key, value in mapping.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value and not isinstance(value, SPACES + (Conditional,)):
            flat.update(flatten(value, name + "."))
        else:
            flat[name] = value
    return flat


def nested(params: Mapping[str, Any]) -> dict[str, Any]:
    """The inverse of :func:`flatten`: dotted keys back into nested dicts (what a trial's code receives)."""
    out: dict[str, Any] = {}
    for key, value in params.items():
        parts = key.split(".")
        node = out
        for part in parts[:-1]:
            child = node.get(part)
            if not isinstance(child, dict):
                child = node[part] = {}
            node = child
        node[parts[-1]] = value
    return out


def make_trial(
    params: Mapping[str, Any],
    varying: Sequence[str],
    code_version: str | None,
    index: int,
    label_format: LabelFormat = DEFAULT_LABELS,
) -> Trial:
    params = dict(params)
    return Trial(params, trial_id(params, code_version, index), label_format.label(params, varying), index)


def _check_condition(where: str, key: str, dim: Conditional, known: Sequence[str]) -> None:
    for ckey in dim.keys:
        if ckey not in known:
            raise InvalidArgumentError(
                f"{where}.{key}.when", ckey, f"a parameter defined before {key!r} (one of {sorted(known)})"
            )


def _dim_count(where: str, value: Any, grid_steps: int | None) -> int:
    """How many values :func:`_dim_values` gives, without making them."""
    return int(_dimension(where, value, grid_steps, "count"))


def finite_space_size(flat: Mapping[str, Any]) -> int | None:
    """An upper bound on the distinct points of a (flattened) random-search space; None when a dimension is
    continuous (uniform, loguniform: as many points as draws)."""
    total = 1
    for dim in flat.values():
        inner = dim.dim if isinstance(dim, Conditional) else dim
        if isinstance(inner, (Uniform, LogUniform)):
            return None
        n = inner.count() if isinstance(inner, SPACES) else len(inner) if isinstance(inner, (list, tuple)) else 1
        total *= n + (1 if isinstance(dim, Conditional) else 0)  # a conditional may also be absent
    return total


def _dim_values(where: str, value: Any, grid_steps: int | None) -> list[Any]:
    return list(_dimension(where, value, grid_steps, "grid"))


def _dimension(where: str, value: Any, grid_steps: int | None, what: str) -> Any:
    """A grid dimension's values (``what="grid"``) or their number (``"count"``); errors name ``where``."""
    if isinstance(value, SPACES):
        try:
            return getattr(value, what)(grid_steps)
        except InvalidArgumentError as exc:
            raise InvalidArgumentError(where, value, exc.expected) from None
    if isinstance(value, (list, tuple)) and value:
        return list(value) if what == "grid" else len(value)
    raise InvalidArgumentError(where, value, "a non-empty list of values or a search space (choice, uniform, ...)")


@dataclass
class GridSweep:
    """``global_config`` + ``test_config`` (GPU Task Scheduler) expanded into trials."""

    global_config: Mapping[str, Any] = field(default_factory=dict)
    test_config: Sequence[Mapping[str, Any]] = field(default_factory=lambda: [{}])
    grid_steps: int | None = None
    code_version: str | None = None
    where: str = "sweep"  # for error messages: a file name, or "sweep"
    label_format: LabelFormat = DEFAULT_LABELS

    def blocks(self) -> list[dict[str, Any]]:
        if not isinstance(self.global_config, Mapping):
            raise InvalidArgumentError(f"{self.where}: global_config", self.global_config, "a mapping of fixed values")
        if isinstance(self.test_config, (Mapping, str)) or not isinstance(self.test_config, Sequence):
            raise InvalidArgumentError(f"{self.where}: test_config", self.test_config, "a list of mappings")
        blocks = []
        for i, block in enumerate(self.test_config):
            if not isinstance(block, Mapping):
                raise InvalidArgumentError(f"{self.where}: test_config[{i}]", block, "a mapping of value lists")
            blocks.append(flatten(block))
        return blocks

    def varying(self) -> list[str]:
        keys: list[str] = []
        for block in self.blocks():
            keys.extend(k for k in block if k not in keys)
        return keys

    def size_upper_bound(self) -> int:
        """Trials before conditions and duplicate removal (cheap: nothing is expanded)."""
        total = 0
        for i, block in enumerate(self.blocks()):
            n = 1
            for key, dim in block.items():
                inner = dim.dim if isinstance(dim, Conditional) else dim
                n *= _dim_count(f"{self.where}: test_config[{i}].{key}", inner, self.grid_steps)
            total += n
        return total

    def trials(self) -> list[Trial]:
        blocks = self.blocks()
        base = flatten(self.global_config)
        varying = self.varying()
        trials: list[Trial] = []
        seen: set[str] = set()
        for i, block in enumerate(blocks):
            partials: list[dict[str, Any]] = [dict(base)]
            for key, dim in block.items():
                path = f"{self.where}: test_config[{i}].{key}"
                if isinstance(dim, Conditional):
                    _check_condition(
                        f"{self.where}: test_config[{i}]", key, dim, [*base, *list(block)[: list(block).index(key)]]
                    )
                    values = _dim_values(path, dim.dim, self.grid_steps)
                    partials = [q for p in partials for q in ([{**p, key: v} for v in values] if dim.holds(p) else [p])]
                else:
                    values = _dim_values(path, dim, self.grid_steps)
                    partials = [{**p, key: v} for p in partials for v in values]
            for params in partials:
                trial = make_trial(params, varying, self.code_version, len(trials), self.label_format)
                if trial.trial_id not in seen:
                    seen.add(trial.trial_id)
                    trials.append(trial)
        return trials


def sample_params(
    space: Mapping[str, Any], rng: random.Random, fixed: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """One draw from a (flattened) space: spaces sampled, lists are choices, scalars fixed, conditional
    parameters only where their condition holds."""
    params = dict(fixed or {})
    for key, dim in space.items():
        if isinstance(dim, Conditional):
            if not dim.holds(params):
                continue
            dim = dim.dim
        if isinstance(dim, SPACES):
            params[key] = dim.sample(rng)
        elif isinstance(dim, (list, tuple)):
            params[key] = rng.choice(list(dim))
        else:
            params[key] = dim
    return params


def check_space(
    space: Mapping[str, Any], where: str = "space", fixed: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    if not isinstance(space, Mapping) or not space:
        raise InvalidArgumentError(where, space, "a non-empty mapping of parameter -> search space or value list")
    flat = flatten(space)
    known = list(flatten(fixed or {}))
    for key, dim in flat.items():
        if isinstance(dim, Conditional):
            _check_condition(where, key, dim, known)
            inner = dim.dim
        else:
            inner = dim
        if isinstance(inner, (list, tuple)) and not inner:
            raise InvalidArgumentError(f"{where}.{key}", inner, "a non-empty list of values")
        known.append(key)
    return flat


def random_trials(
    space: Mapping[str, Any],
    count: int,
    seed: int,
    *,
    fixed: Mapping[str, Any] | None = None,
    code_version: str | None = None,
    max_tries: int | None = None,
    where: str = "space",
    label_format: LabelFormat = DEFAULT_LABELS,
) -> list[Trial]:
    """``count`` distinct trials sampled from ``space`` (values: search spaces, lists = choice, scalars fixed)
    with a seeded generator: the same seed gives the same trials in every process."""
    if not is_int(count) or count < 1:
        raise InvalidArgumentError("count", count, "an integer >= 1")
    flat = check_space(space, where, fixed)
    base = flatten(fixed or {})
    size = finite_space_size(flat)
    if size is not None and count > size:
        raise InvalidArgumentError(
            f"{where.rsplit(':', 1)[0]}: count" if ":" in where else "count",
            count,
            f"at most the {size:,} distinct points of this space (use search: grid to try them all)",
        )
    rng = random.Random(seed)
    trials: list[Trial] = []
    seen: set[str] = set()
    tries = 0
    limit = max_tries or count * 50
    since_new = 0  # a space with fewer distinct points than it seems (conditions) ends the search here
    varying = list(flat)
    while len(trials) < count and tries < limit and since_new < max(1000, 20 * len(trials)):
        tries += 1
        since_new += 1
        trial = make_trial(sample_params(flat, rng, base), varying, code_version, len(trials), label_format)
        if trial.trial_id not in seen:
            seen.add(trial.trial_id)
            trials.append(trial)
            since_new = 0
    if len(trials) < count:
        raise InvalidArgumentError(
            f"{where.rsplit(':', 1)[0]}: count" if ":" in where else "count",
            count,
            f"at most the {len(trials):,} distinct trials found in this space after {tries:,} draws",
        )
    return trials
