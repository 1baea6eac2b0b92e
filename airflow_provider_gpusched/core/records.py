"""One definition per record: each record that crosses a process or a disk (a lease file, what a task publishes
for the GPU board, a host's telemetry, a sweep's plan...) is one typed dataclass, its fields annotated with their
types and bounds. :class:`RecordType` derives everything else from it through pydantic v2 (which comes with
Airflow): the reader that checks a record read back (:meth:`RecordType.read`), the writer
(:meth:`RecordType.dump`), the JSON Schema, and the api-server's response models (FastAPI takes the dataclass as
it is).

A record that fails its check is refused with :class:`~airflow_provider_gpusched.core.safe_files.BadRecordError`
in the shape every reader here has always used: where it came from, the key path, what was expected (the field's
``description``) and what was there::

    lease 0123456789abcdef.json: key 'gpus[0]': expected a GPU index, got -1

The building blocks (:data:`Int`, :data:`Name`, :func:`text`...) are strict: a JSON ``true`` is not a number, a
number is not a string, a float is not a count. The dataclasses stay plain ``dataclasses`` (constructing one in
code costs nothing and validates nothing: only what comes from outside is checked).

Pure Python, no Airflow imports.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Generic, Literal, TypeVar, get_args, get_origin

from pydantic import AfterValidator, BeforeValidator, ConfigDict, Field, Strict, TypeAdapter, ValidationError
from pydantic.fields import FieldInfo

from airflow_provider_gpusched.core.safe_files import BadRecordError

T = TypeVar("T")


def _finite(value: float) -> float:
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError("a finite number")
    return value


#: strict JSON types: a ``true`` is no number, ``1`` no string, ``1.5`` no count
Int = Annotated[int, Strict()]
Float = Annotated[float, Strict(), AfterValidator(_finite)]  # an int is a float too, NaN and infinities are not
Bool = Annotated[bool, Strict()]
Str = Annotated[str, Strict()]
Count = Annotated[int, Strict(), Field(ge=0)]
Seconds = Annotated[float, Strict(), AfterValidator(_finite), Field(ge=0)]
Timestamp = Float


def says(description: str, **constraints: Any) -> Any:
    """A field's metadata: the words a refusal uses for what was expected, and its bounds (``Field``'s keywords:
    ``ge``, ``max_length``, ``pattern``...); strict, so no type is coerced into another."""
    return Field(description=description, strict=True, **constraints)


def one_of(values: Sequence[Any]) -> AfterValidator:
    """A check that a value is one of ``values`` (for choices a ``Literal`` cannot spell: a tuple defined elsewhere)."""
    allowed = frozenset(values)

    def check(value: Any) -> Any:
        if value not in allowed:
            raise ValueError("one of " + ", ".join(repr(v) for v in values))
        return value

    return AfterValidator(check)


def _index_key(value: Any) -> Any:
    """A JSON object's key that stands for a whole number (a GPU index): digits only, at most three of them."""
    if isinstance(value, str) and re.fullmatch(r"\d{1,3}", value):
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise ValueError("a GPU index (digits)")


#: a GPU index as a JSON object's key ("0".."999"), an int in Python
IndexKey = Annotated[int, BeforeValidator(_index_key)]


class RecordType(Generic[T]):
    """A record's dataclass and what pydantic derives from it: read, dump, schema."""

    def __init__(self, cls: type[T], *, name: str = "") -> None:
        self.cls = cls
        self.name = name or cls.__name__
        self.fields = tuple(f.name for f in dataclasses.fields(cls))  # type: ignore[arg-type]

    # built on first use: a process (a trial runner) pays only for the records it reads
    @functools.cached_property
    def adapter(self) -> TypeAdapter[T]:
        return TypeAdapter(self.cls)

    @functools.cached_property
    def runtime(self) -> frozenset[str]:
        """Fields that live only in memory (``Field(exclude=True)``): never written, never taken from a record."""
        hints = _hints(self.cls)  # type: ignore[arg-type]
        return frozenset(
            name for name in self.fields if any(getattr(m, "exclude", None) for m in get_args(hints[name])[1:])
        )

    def read(self, data: Any, source: str) -> T:
        """``data`` (parsed JSON) as the record, every field checked: :class:`BadRecordError` naming ``source``,
        the key path and what was expected."""
        if not isinstance(data, dict):
            raise BadRecordError(f"{source}: expected a JSON object, got {type(data).__name__}")
        if self.runtime & data.keys():
            data = {k: v for k, v in data.items() if k not in self.runtime}
        try:
            return self.adapter.validate_python(data)
        except ValidationError as exc:
            raise BadRecordError(refusal(exc, self.cls).message(source)) from None

    def read_argument(self, data: Any, argument: str, expected: str) -> T:
        """``data`` given as an argument (an operator's, a command line's): :class:`InvalidArgumentError` naming
        ``argument`` and the key path (``trials.ids``), what was expected there and what was given."""
        from airflow_provider_gpusched.core.errors import InvalidArgumentError

        if not isinstance(data, Mapping):
            raise InvalidArgumentError(argument, data, expected)
        try:
            return self.adapter.validate_python(dict(data))
        except ValidationError as exc:
            why = refusal(exc, self.cls)
            name = f"{argument}.{why.path}" if why.path else argument
            if why.problem == "unknown":
                raise InvalidArgumentError(name, why.value, "one of " + ", ".join(self.fields)) from None
            raise InvalidArgumentError(name, why.value if why.problem != "missing" else None, why.expected) from None

    def read_list(self, data: Any, source: str, *, max_items: int = 100_000) -> list[T]:
        """A JSON list of records (each refused by its position: ``item 3: key ...``)."""
        if not isinstance(data, list) or len(data) > max_items:
            raise BadRecordError(f"{source}: expected a list of at most {max_items} {self.name} records")
        return [self.read(item, f"{source}: item {i}") for i, item in enumerate(data)]

    def dump(self, value: T) -> dict[str, Any]:
        """The record as JSON-ready data (GPU-index keys as strings)."""
        out: dict[str, Any] = self.adapter.dump_python(value, mode="json")
        return out

    def json_schema(self) -> dict[str, Any]:
        return self.adapter.json_schema()


def record_class(cls: type[T] | None = None, *, extra: Literal["ignore", "forbid"] = "ignore") -> Any:
    """Class decorator: a dataclass whose unknown keys are ``extra`` ("ignore": records from a newer version
    still read; "forbid": a typo is refused)."""

    def wrap(c: type[T]) -> type[T]:
        c.__pydantic_config__ = ConfigDict(extra=extra)  # type: ignore[attr-defined]
        return c

    return wrap(cls) if cls is not None else wrap


def open_view(cls: type[T]) -> type[T]:
    """Class decorator for an answer's ``TypedDict`` (an api-server response model): keys it does not declare pass
    through as they are, never dropped (the declared ones are checked)."""
    cls.__pydantic_config__ = ConfigDict(extra="allow")  # type: ignore[attr-defined]
    return cls


# -- refusals in this package's shape -----------------------------------------------------------------------------


def key_path(loc: tuple[Any, ...]) -> str:
    """pydantic's error location as the key path the messages use: ``inventory[0].uuid``, ``memory['x'] (key)``."""
    out = ""
    for part in loc:
        if part == "[key]":
            continue  # the key itself is refused: its path names it
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _described(tp: Any) -> tuple[Any, str]:
    """(the bare type, its description) of an annotation: ``Annotated`` and ``X | None`` unwrapped, the outermost
    description kept."""
    description = ""
    while True:
        if get_origin(tp) is Annotated:
            args = get_args(tp)
            for meta in args[1:]:
                if isinstance(meta, FieldInfo) and meta.description:
                    description = description or meta.description
            tp = args[0]
        elif get_origin(tp) in (typing.Union, types.UnionType):
            members = [a for a in get_args(tp) if a is not type(None)]
            if len(members) != 1:
                return tp, description
            tp = members[0]
        else:
            return tp, description


@functools.cache
def _hints(cls: type) -> Mapping[str, Any]:
    return typing.get_type_hints(cls, include_extras=True)


def expected_at(cls: Any, loc: tuple[Any, ...]) -> str:
    """The description of the deepest described field on the way to ``loc``."""
    tp, found = cls, ""
    for part in loc:
        tp, description = _described(tp)
        found = description or found
        origin, args = get_origin(tp), get_args(tp)
        if dataclasses.is_dataclass(tp) and isinstance(part, str):
            tp = _hints(tp).get(part)  # type: ignore[arg-type]
            if tp is None:
                return found
        elif origin is tuple and isinstance(part, int) and args and args[-1] is not Ellipsis:
            tp = args[part] if part < len(args) else Any
        elif origin in (list, tuple) and args:
            tp = args[0]
        elif origin in (dict, Mapping) and len(args) == 2:
            tp = args[1]
        else:
            return found
    _, description = _described(tp)
    return description or found


@dataclasses.dataclass(frozen=True)
class Refusal:
    """Why a record was refused: the key path, what was expected there (or "is missing"/"is not a known key"),
    and what was there."""

    path: str
    expected: str
    got: str
    value: Any = None
    problem: str = ""  # "missing", "unknown", or "" (a wrong value)

    def message(self, source: str) -> str:
        if self.problem == "missing":
            return f"{source}: key {self.path!r} is missing"
        if self.problem == "unknown":
            return f"{source}: key {self.path!r} is not a known key"
        where = f"key {self.path!r}: " if self.path else ""
        return f"{source}: {where}expected {self.expected}, got {self.got}"


def refusal(exc: ValidationError, cls: Any) -> Refusal:
    """The first error of ``exc`` as this package words a refused record."""
    error = exc.errors(include_url=False)[0]
    loc = tuple(error["loc"])
    # a union's member or a tagged branch adds its own name to the location: keep the keys only
    loc = tuple(
        p for p in loc if isinstance(p, int) or (isinstance(p, str) and not p.startswith(("function-", "lax-")))
    )
    path = key_path(loc)
    kind = error["type"]
    value = error.get("input")
    if kind == "missing" and loc and isinstance(loc[-1], int):  # a row too short: say what the row should be
        loc, path = loc[:-1], key_path(loc[:-1])
    elif kind == "missing":
        return Refusal(path, "a value", "nothing", problem="missing")
    if kind in ("extra_forbidden", "unexpected_keyword_argument"):
        return Refusal(path, "a known key", _short(value), value, problem="unknown")
    expected = (expected_at(cls, loc) if "[key]" not in loc else "") or _plain(error["msg"])
    got = _short(value)
    if kind in ("too_long", "too_short") and "actual_length" in error.get("ctx", {}):
        got = f"{error['ctx']['actual_length']} items"
    return Refusal(path, expected, got, value)


def _plain(msg: str) -> str:
    msg = re.sub(r"^(Value error, |Assertion failed, )", "", msg)
    return re.sub(r"^Input should be ", "", msg)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
