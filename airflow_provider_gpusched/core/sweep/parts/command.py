"""A trial's command: its placeholders filled per trial, and relative paths made absolute. Compute nodes import
this (the trial runner formats each command there), so it imports nothing else of the spec."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

from airflow_provider_gpusched.core.errors import InvalidArgumentError
from airflow_provider_gpusched.core.sweep.parts.expand import Trial

PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_.]*)\}")
#: placeholders every command may use besides parameters
TRIAL_FIELDS = ("trial_dir", "trial_id", "label")
_FILE_SUFFIXES = (".py", ".sh", ".bash", ".yaml", ".yml", ".json", ".toml", ".cfg", ".ini", ".txt", ".csv")


def resolve_command_paths(command: Sequence[str], base: str) -> list[str]:
    """A trial's command runs in the trial's own folder, so a relative path there would name nothing: a relative
    file path that exists under ``base`` becomes absolute. One that is not there is left as it is (a ``setup``
    line may ``cd`` to where it is); if the trial then fails, its error says where it was looked for
    (trial_run.relative_path_hint)."""
    out = list(command)
    for i, arg in enumerate(out):
        if "{" in arg or arg.startswith("-") or os.path.isabs(os.path.expanduser(arg)) or not arg:
            continue
        pathlike = "/" in arg or os.path.splitext(arg)[1] in _FILE_SUFFIXES
        if not pathlike:
            continue
        candidate = os.path.normpath(os.path.join(base, os.path.expanduser(arg)))
        if os.path.isfile(candidate):
            out[i] = candidate
    return out


def check_command_placeholders(
    command: Sequence[str], parameters: Sequence[str], where: str, extra: Sequence[str] = ()
) -> None:
    """Every ``{name}`` of ``command`` names a parameter, one of :data:`TRIAL_FIELDS` or ``extra``."""
    known = set(parameters) | set(TRIAL_FIELDS) | set(extra)
    for arg in command:
        for name in command_placeholders(arg):
            if name not in known:
                raise InvalidArgumentError(
                    where,
                    arg,
                    f"placeholders naming a parameter or one of {list(TRIAL_FIELDS)}; "
                    f"{{{name}}} is neither (parameters: {sorted(parameters)}). "
                    "A brace meant literally (inline code, such as Python's f'{x}') "
                    "is written twice: f'{{x}}' reaches the program as f'{x}'",
                )


def command_placeholders(arg: str) -> list[str]:
    """The ``{name}`` placeholders of one argument (``{{``/``}}`` are literal braces)."""
    return PLACEHOLDER.findall(re.sub(r"\{\{|\}\}", "", arg))


def placeholder_values(params: Mapping[str, Any], trial_dir: str, trial: Trial) -> dict[str, Any]:
    """What ``{name}`` in a command and ``{{ name }}`` in a config template may name: the parameters (dotted
    names) and :data:`TRIAL_FIELDS`."""
    return {**params, "trial_dir": trial_dir, "trial_id": trial.trial_id, "label": trial.label}


def format_command(
    command: Sequence[str], params: Mapping[str, Any], trial_dir: str, trial: Trial, config: str | None = None
) -> list[str]:
    """Fill ``{param}`` placeholders (dotted names allowed) in each argv element. Values are put in as text,
    each argument stays one argument (no shell): spaces, quotes and ``;`` arrive verbatim. ``{{``/``}}``
    give literal braces."""
    fill = {**placeholder_values(params, trial_dir, trial), **({"config": config} if config else {})}

    def one(arg: str) -> str:
        parts = re.split(r"(\{\{|\}\})", arg)
        out = []
        for part in parts:
            if part == "{{":
                out.append("{")
            elif part == "}}":
                out.append("}")
            else:
                out.append(PLACEHOLDER.sub(lambda m: _fill(fill, m.group(1), arg, trial), part))
        return "".join(out)

    return [one(a) for a in command]


def _fill(fill: Mapping[str, Any], name: str, arg: str, trial: Trial) -> str:
    if name not in fill:
        raise InvalidArgumentError(
            "command",
            arg,
            f"parameters trial {trial.label or trial.trial_id} has; it has no {name!r} (a conditional parameter?)",
        )
    return value_text(fill[name])


def value_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)
