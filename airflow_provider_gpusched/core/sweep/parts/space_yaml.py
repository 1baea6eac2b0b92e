"""Search spaces written in YAML: ``[a, b]``, ``{loguniform: [1e-5, 1e-1]}``, ``{uniform: [0.8, 0.99], when:
{optimizer: sgd}}``, nested mappings; a misspelt maker is refused by name."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_provider_gpusched.core.errors import InvalidArgumentError, UnknownKeyError
from airflow_provider_gpusched.core.sweep.parts import spaces

SPACE_MAKERS = {"choice": 1, "uniform": 2, "loguniform": 2, "randint": 2, "quniform": 3}


def _refuse_misspelt_space(value: Mapping[str, Any], where: str) -> None:
    """A one-key mapping (beside ``when``) whose key looks like a space type (``{logunifrom: [1e-4, 0.1]}``)
    is a typo, not a nested parameter ``lr.logunifrom`` with two values: refused, naming the key and the closest
    space type. A real nested parameter of that spelling can be written as ``{values: [...]}`` under its key."""
    rest = {k: v for k, v in value.items() if k != "when"}
    if len(rest) != 1:
        return
    ((key, args),) = rest.items()
    if not isinstance(key, str) or not isinstance(args, list):
        return
    import difflib

    names = [*SPACE_MAKERS, "values"]
    close = difflib.get_close_matches(key.lower(), names, n=1, cutoff=0.75)
    if close:
        raise UnknownKeyError(f"{where}.{key}", key, names, what="search space type")


def parse_dim(value: Any, where: str) -> Any:
    """YAML form of a dimension: a list of values, ``{uniform: [lo, hi]}`` and friends, ``{values: [...]}``,
    each optionally with ``when: {param: value-or-list}``; a nested plain mapping stays nested."""
    if isinstance(
        value, (spaces.Choice, spaces.Uniform, spaces.LogUniform, spaces.RandInt, spaces.QUniform, spaces.Conditional)
    ):
        return value
    if not isinstance(value, Mapping):
        return value
    kinds = [k for k in value if k in SPACE_MAKERS or k == "values"]
    if not kinds:
        _refuse_misspelt_space(value, where)
        if "when" in value:
            raise InvalidArgumentError(f"{where}.when", value["when"], "a search space or values next to when")
        return {k: parse_dim(v, f"{where}.{k}") for k, v in value.items()}
    extra = [k for k in value if k not in (*kinds, "when")]
    if len(kinds) > 1 or extra:
        raise InvalidArgumentError(
            where, dict(value), "one space (choice/uniform/loguniform/randint/quniform/values) and optionally when"
        )
    kind = kinds[0]
    args = value[kind]
    try:
        if kind in ("values", "choice"):
            if not isinstance(args, list) or not args:
                raise InvalidArgumentError(kind, args, "a non-empty list of values")
            dim: Any = list(args) if kind == "values" else spaces.choice(args)
        else:
            if not isinstance(args, list) or len(args) != SPACE_MAKERS[kind]:
                raise InvalidArgumentError(kind, args, f"a list of {SPACE_MAKERS[kind]} numbers")
            dim = getattr(spaces, kind)(*args)
        if "when" in value:
            dim = spaces.when(value["when"], dim)
    except InvalidArgumentError as exc:
        raise InvalidArgumentError(where, exc.value, exc.expected) from None
    return dim
