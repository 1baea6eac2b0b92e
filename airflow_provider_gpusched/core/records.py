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
import hashlib
import hmac
import json
import os
import re
import secrets
import stat
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Any, Generic, Literal, TypeVar, get_args, get_origin

from airflow_provider_gpusched.core.safe_files import BadRecordError

if typing.TYPE_CHECKING:
    from pydantic import TypeAdapter, ValidationError

T = TypeVar("T")

# pydantic is imported where a record is first read, written or described, never by importing a module that
# defines one: a trial runner process starts in 0.1 s, and pydantic's import alone would add as much again. The
# metadata below stands for pydantic's own (``Field``'s bounds and ``strict``, validators) until then.

_CONTAINERS = frozenset({"list", "tuple", "dict", "set", "frozenset"})


def _constrain(schema: dict[str, Any], strict: bool | None, constraints: Mapping[str, Any]) -> dict[str, Any]:
    """Put ``strict`` and the bounds on the schema that validates the value itself: under any validator functions
    wrapped around it, on both the JSON and the Python side, at the end of a chain (``Sequence[str]``: an
    instance check, then the list)."""
    kind = schema.get("type", "")
    if kind.startswith("function-") and "schema" in schema:
        _constrain(schema["schema"], strict, constraints)
    elif kind == "json-or-python":
        _constrain(schema["json_schema"], strict, constraints)
        _constrain(schema["python_schema"], strict, constraints)
    elif kind == "chain":
        _constrain(schema["steps"][-1], strict, constraints)
    else:
        if strict is not None and kind not in _CONTAINERS:
            schema["strict"] = strict
        schema.update(constraints)
    return schema


class Says:
    """A field's metadata: the words a refusal (and the JSON Schema) uses for what was expected, and its bounds
    (pydantic ``Field``'s keywords: ``ge``, ``max_length``, ``pattern``...). Strict unless ``strict=False``:
    no type is coerced into another (a container's items carry their own)."""

    def __init__(self, description: str = "", *, strict: bool | None = True, **constraints: Any) -> None:
        self.description = description
        self.strict = strict
        self.constraints = constraints

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> Any:
        return _constrain(handler(source), self.strict, self.constraints)

    def __get_pydantic_json_schema__(self, schema: Any, handler: Any) -> Any:
        found = handler(schema)
        return {**found, "description": self.description} if self.description else found


class Check:
    """A validator function on the checked value (pydantic's ``AfterValidator``); ``before``: on the raw value
    (``BeforeValidator``)."""

    def __init__(self, function: Callable[[Any], Any], before: bool = False) -> None:
        self.function, self.before = function, before

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> Any:
        from pydantic_core import core_schema

        wrap = (
            core_schema.no_info_before_validator_function
            if self.before
            else core_schema.no_info_after_validator_function
        )
        return wrap(self.function, handler(source))


class RuntimeOnly:
    """A field that lives only in memory: never written to a record, never taken from one."""

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> Any:
        return handler(source)


RUNTIME_ONLY = RuntimeOnly()


def says(description: str, *, strict: bool | None = True, **constraints: Any) -> Says:
    """See :class:`Says`."""
    return Says(description, strict=strict, **constraints)


def _finite(value: float) -> float:
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError("a finite number")
    return value


#: strict JSON types: a ``true`` is no number, ``1`` no string, ``1.5`` no count
Int = Annotated[int, Says()]
Float = Annotated[float, Says(), Check(_finite)]  # an int is a float too, NaN and infinities are not
Bool = Annotated[bool, Says()]
Str = Annotated[str, Says()]
Count = Annotated[int, Says(ge=0)]
Seconds = Annotated[float, Says(ge=0), Check(_finite)]
Timestamp = Float


def one_of(values: Sequence[Any]) -> Check:
    """A check that a value is one of ``values`` (for choices a ``Literal`` cannot spell: a tuple defined elsewhere)."""
    allowed = frozenset(values)

    def check(value: Any) -> Any:
        if value not in allowed:
            raise ValueError("one of " + ", ".join(repr(v) for v in values))
        return value

    return _OneOf(check, tuple(values))


class _OneOf(Check):
    """:func:`one_of`'s check; the JSON Schema lists the values (``enum``)."""

    def __init__(self, function: Callable[[Any], Any], values: tuple[Any, ...]) -> None:
        super().__init__(function)
        self.values = values

    def __get_pydantic_json_schema__(self, schema: Any, handler: Any) -> Any:
        return {**handler(schema), "enum": list(self.values)}


def _index_key(value: Any) -> Any:
    """A JSON object's key that stands for a whole number (a GPU index): digits only, at most three of them."""
    if isinstance(value, str) and re.fullmatch(r"\d{1,3}", value):
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise ValueError("a GPU index (digits)")


#: a GPU index as a JSON object's key ("0".."999"), an int in Python
IndexKey = Annotated[int, Check(_index_key, before=True)]


class RecordType(Generic[T]):
    """A record's dataclass and what pydantic derives from it: read, dump, schema."""

    def __init__(self, cls: type[T], *, name: str = "") -> None:
        self.cls = cls
        self.name = name or cls.__name__
        self.fields = tuple(f.name for f in dataclasses.fields(cls))  # type: ignore[arg-type]

    # built on first use: a process (a trial runner) pays only for the records it reads
    @functools.cached_property
    def adapter(self) -> TypeAdapter[T]:
        from pydantic import TypeAdapter

        return TypeAdapter(self.cls)

    @functools.cached_property
    def runtime(self) -> frozenset[str]:
        """Fields that live only in memory (``Field(exclude=True)``): never written, never taken from a record."""
        hints = _hints(self.cls)  # type: ignore[arg-type]
        return frozenset(
            name for name in self.fields if any(isinstance(m, RuntimeOnly) for m in get_args(hints[name])[1:])
        )

    def read(self, data: Any, source: str, *, key: bytes | None = None) -> T:
        """``data`` (parsed JSON) as the record, every field checked: :class:`BadRecordError` naming ``source``,
        the key path and what was expected. ``key``: a record sealed with it (:func:`seal`) by the process that
        checked it before writing it is taken as that process wrote it (its seal proves it is), at no cost;
        any other is checked."""
        if not isinstance(data, dict):
            raise BadRecordError(f"{source}: expected a JSON object, got {type(data).__name__}")
        if key is not None:
            unsealed = self.unseal(data, key)
            if unsealed is not None:
                return unsealed
        data = {k: v for k, v in data.items() if k != SEAL}
        if self.runtime & data.keys():
            data = {k: v for k, v in data.items() if k not in self.runtime}
        from pydantic import ValidationError

        try:
            return self.adapter.validate_python(data)
        except ValidationError as exc:
            raise BadRecordError(refusal(exc, self.cls).message(source)) from None

    def read_argument(self, data: Any, argument: str, expected: str, *, joiner: str = ".") -> T:
        """``data`` given as an argument (an operator's, a command line's): :class:`InvalidArgumentError` naming
        ``argument`` and the key path joined by ``joiner`` (``trials.ids``; a spec's ``sweep.yaml: count``), what
        was expected there and what was given."""
        from airflow_provider_gpusched.core.errors import InvalidArgumentError

        if not isinstance(data, Mapping):
            raise InvalidArgumentError(argument, data, expected)
        from pydantic import ValidationError

        try:
            return self.adapter.validate_python(dict(data))
        except ValidationError as exc:
            why = refusal(exc, self.cls)
            name = joiner.join(part for part in (argument, why.path) if part)
            if why.problem == "unknown":
                raise InvalidArgumentError(name, why.value, "one of " + ", ".join(self.fields)) from None
            raise InvalidArgumentError(name, why.value if why.problem != "missing" else None, why.expected) from None

    def read_list(self, data: Any, source: str, *, max_items: int = 100_000) -> list[T]:
        """A JSON list of records (each refused by its position: ``item 3: key ...``)."""
        if not isinstance(data, list) or len(data) > max_items:
            raise BadRecordError(f"{source}: expected a list of at most {max_items} {self.name} records")
        return [self.read(item, f"{source}: item {i}") for i, item in enumerate(data)]

    def unseal(self, data: Mapping[str, Any], key: bytes) -> T | None:
        """The record when ``data`` carries a seal made under ``key`` over exactly this content; None otherwise."""
        seal = data.get(SEAL)
        if not isinstance(seal, str):
            return None
        body = {k: v for k, v in data.items() if k != SEAL}
        if not hmac.compare_digest(_mac(body, key), seal):
            return None
        built: T = _build(self.cls, body)
        return built

    def dump_sealed(self, value: T, key: bytes) -> dict[str, Any]:
        """:meth:`dump` with a seal: the MAC under ``key`` that lets a process given the key read it back
        without checking it again (a batch's group manifests, read by the trial runners it starts)."""
        body = self.dump(value)
        return {**body, SEAL: _mac(body, key)}

    def dump(self, value: T) -> dict[str, Any]:
        """The record as JSON-ready data (nested records as objects, tuples as lists, GPU-index keys as strings;
        runtime-only fields left out). No pydantic: a record made in code has the types its annotations say
        (a test compares this with pydantic's own dump of every record type)."""
        out: dict[str, Any] = _json_ready(value, self.runtime)
        return out

    def json_schema(self) -> dict[str, Any]:
        return self.adapter.json_schema()


class Settings(Generic[T]):
    """The settings of a class that parses and relates its settings itself (a dataclass whose ``__post_init__``
    does): those whose annotation says their type and bounds (``Annotated[int, says(...)] | None``) are checked
    together as one record, the first wrong one refused as an argument named by its key path (``gres``,
    ``environment.A``, ``resources.env.A``); the class's own code is left what needs parsing or relates settings."""

    def __init__(self, cls: type[T]) -> None:
        self.cls = cls

    @functools.cached_property
    def record(self) -> RecordType[Any]:
        hints = _hints(self.cls)  # type: ignore[arg-type]
        said = [f.name for f in dataclasses.fields(self.cls) if _says(hints[f.name])]  # type: ignore[arg-type]
        shadow = dataclasses.make_dataclass(
            f"{self.cls.__name__}Settings", [(n, hints[n], dataclasses.field(default=None)) for n in said]
        )
        return RecordType(shadow, name=f"{self.cls.__name__} settings")

    @property
    def names(self) -> tuple[str, ...]:
        return self.record.fields

    def check(
        self, owner: T | Mapping[str, Any], argument: str = "", expected: str = "settings", *, joiner: str = "."
    ) -> Any:
        """``owner``'s annotated settings checked (an object with the settings, or a mapping of them): the checked
        values as attributes; :class:`InvalidArgumentError` for the first wrong one."""
        values = (
            {n: owner[n] for n in self.names if n in owner}
            if isinstance(owner, Mapping)
            else {n: getattr(owner, n) for n in self.names}
        )
        return self.record.read_argument(values, argument, expected, joiner=joiner)


def _says(hint: Any) -> bool:
    """Whether an annotation (or a member of its union) carries :class:`Says`."""
    if get_origin(hint) is Annotated:
        return any(isinstance(m, Says) for m in get_args(hint)[1:])
    if get_origin(hint) in (typing.Union, types.UnionType):
        return any(_says(member) for member in get_args(hint))
    return False


#: a sealed record's key holding its MAC (HMAC-SHA256 of its canonical JSON)
SEAL = "_seal"
#: where a process started to read sealed records finds their key (hex); it takes it out of its environment
RECORD_KEY_ENV = "GPUSCHED_RECORD_KEY"


def _mac(body: Mapping[str, Any], key: bytes) -> str:
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hmac.new(key, text.encode(), hashlib.sha256).hexdigest()


def new_record_key() -> bytes:
    return secrets.token_bytes(32)


def take_record_key() -> bytes | None:
    """The key this process was given to read sealed records (:data:`RECORD_KEY_ENV`), removed from the
    environment so that nothing it starts inherits it."""
    text = os.environ.pop(RECORD_KEY_ENV, "")
    try:
        return bytes.fromhex(text) if len(text) == 64 else None
    except ValueError:
        return None


def _json_ready(value: Any, leave_out: frozenset[str] = frozenset()) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            f.name: _json_ready(getattr(value, f.name)) for f in dataclasses.fields(value) if f.name not in leave_out
        }
    if isinstance(value, (list, tuple)):
        return [_json_ready(v) for v in value]
    if isinstance(value, dict):
        return {str(k) if isinstance(k, int) else k: _json_ready(v) for k, v in value.items()}
    return value


def private_key(folder: str, name: str = "record-key") -> bytes | None:
    """The key in ``folder/name`` that this user's processes seal their records with (made on first use: 32
    random bytes, mode 0600, never through a link); None when the file is not a regular file of this user that
    only they can read, or cannot be made (its records are then checked in full)."""
    path = os.path.join(folder, name)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        pass
    except OSError:
        return None
    else:
        try:
            os.write(fd, new_record_key())
        finally:
            os.close(fd)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077 or st.st_size != 32:
            return None
        key = os.read(fd, 64)
    finally:
        os.close(fd)
    return key if len(key) == 32 else None


def _build(tp: Any, value: Any) -> Any:
    """``value`` (a sealed record's JSON, checked by the process that sealed it) as the record's dataclasses:
    nested records, lists, tuples and GPU-index keys turned back into what reading it checked would give."""
    bare, _ = _described(tp)
    if value is None:
        return None
    if dataclasses.is_dataclass(bare) and isinstance(bare, type):
        hints = _hints(bare)
        return bare(
            **{f.name: _build(hints[f.name], value[f.name]) for f in dataclasses.fields(bare) if f.name in value}
        )
    origin, args = get_origin(bare), get_args(bare)
    if origin is list and args:
        return [_build(args[0], v) for v in value]
    if origin is tuple and args:
        items = args[:1] * len(value) if args[-1] is Ellipsis else args
        return tuple(_build(t, v) for t, v in zip(items, value, strict=True))
    if origin is dict and len(args) == 2:
        return {_build_key(args[0], k): _build(args[1], v) for k, v in value.items()}
    return value


def _build_key(tp: Any, key: Any) -> Any:
    for meta in get_args(tp)[1:] if get_origin(tp) is Annotated else ():
        if isinstance(meta, Check) and meta.before:
            return meta.function(key)
    return key


def record_class(cls: type[T] | None = None, *, extra: Literal["ignore", "forbid"] = "ignore") -> Any:
    """Class decorator: a dataclass whose unknown keys are ``extra`` ("ignore": records from a newer version
    still read; "forbid": a typo is refused)."""

    def wrap(c: type[T]) -> type[T]:
        c.__pydantic_config__ = {"extra": extra}  # type: ignore[attr-defined] # pydantic's ConfigDict
        return c

    return wrap(cls) if cls is not None else wrap


def open_view(cls: type[T]) -> type[T]:
    """Class decorator for an answer's ``TypedDict`` (an api-server response model): keys it does not declare pass
    through as they are, never dropped (the declared ones are checked)."""
    cls.__pydantic_config__ = {"extra": "allow"}  # type: ignore[attr-defined] # pydantic's ConfigDict
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
                if isinstance(meta, Says) and meta.description:
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
    """The description of the deepest described field on the way to ``loc`` (``[key]``: a mapping's key)."""
    tp, found = cls, ""
    for i, part in enumerate(loc):
        if part == "[key]":
            continue
        tp, description = _described(tp)
        found = description or found
        origin, args = get_origin(tp), get_args(tp)
        if dataclasses.is_dataclass(tp) and isinstance(part, str):
            tp = _hints(tp).get(part)  # type: ignore[arg-type]
            if tp is None:
                return found
        elif origin is tuple and isinstance(part, int) and args and args[-1] is not Ellipsis:
            tp = args[part] if part < len(args) else Any
        elif origin in (list, tuple, set, frozenset, Sequence) and args:
            tp = args[0]
        elif origin in (dict, Mapping) and len(args) == 2:
            is_key = i + 1 < len(loc) and loc[i + 1] == "[key]"
            tp = args[0] if is_key else args[1]
            if is_key:
                found = ""  # a key's words are its own type's, not the mapping's
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
    expected = expected_at(cls, loc) or _plain_words(error["msg"])
    got = _short(value)
    if kind in ("too_long", "too_short") and "actual_length" in error.get("ctx", {}):
        got = f"{error['ctx']['actual_length']} items"
    return Refusal(path, expected, got, value)


def _plain_words(msg: str) -> str:
    msg = re.sub(r"^(Value error, |Assertion failed, )", "", msg)
    return re.sub(r"^Input should be ", "", msg)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
