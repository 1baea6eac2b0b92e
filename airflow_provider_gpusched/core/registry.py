"""One registry of named classes that another package may add to: backends, pruning rules, search kinds and
tracking callbacks each keep one :class:`Registry` (docs/development.md, the "Adding ..." sections).

A registry knows its built-in classes as ``module:Class`` strings, imported on first use (listing this host's leases
never pays for the Slurm package), the classes a program registers, and those other packages declare under its
entry-point group (``[project.entry-points."airflow_provider_gpusched.backends"]``, ``name = "package.module:Class"``),
read once, when a name is first listed or not found, and never in place of a built-in or registered class.
``unregister`` puts a built-in (or an installed package's) class back; a name nobody knows is refused naming the
argument and the known names. Every method may be called from any thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from typing import Any, Generic, TypeVar

from airflow_provider_gpusched.core.errors import GpuschedError, InvalidArgumentError
from airflow_provider_gpusched.core.import_target import TargetImportError, import_attribute

T = TypeVar("T")


def one_of(names: list[str]) -> str:
    """The default "expected" of an unknown name: ``one of ['a', 'b']``."""
    return f"one of {names}"


class Registry(Generic[T]):
    """The subclasses of ``base`` known by name. ``kind`` is what one is called in errors ("backend"), ``group``
    the entry-point group, ``built_in`` name -> ``module:Class`` (in listing order), ``function`` the public name of
    :meth:`register` (errors name it), ``expected`` says the known names in an unknown name's error."""

    def __init__(
        self,
        kind: str,
        base: type[T],
        group: str,
        built_in: Mapping[str, str],
        *,
        function: str = "register",
        expected: Callable[[list[str]], str] = one_of,
    ) -> None:
        self.kind, self.base, self.group, self.function = kind, base, group, function
        self._expected = expected
        self._built_in = dict(built_in)
        self._targets: dict[str, str | type[T]] = dict(built_in)  # listing order: built-in, then as they came
        self._found: dict[str, str] = {}  # what installed packages' entry points name
        self._explicit: set[str] = set()  # names a program registered
        self._classes: dict[str, type[T]] = {}
        self._instances: dict[str, T] = {}
        self._lock = threading.RLock()  # loading a class may import a module that registers another
        self._entry_points_read = False

    # -- changing it ---------------------------------------------------------------------------------------
    def register(self, cls: type[T] | T | str, name: str | None = None) -> Any:
        """Make ``cls`` known by ``name`` (default its ``name`` attribute), replacing what had the name; also a
        ``module:Class`` string (then ``name`` is needed) or an instance (what :meth:`instance` then answers).
        Returns ``cls``, so that it serves as a class decorator."""
        instance = None
        if isinstance(cls, str):
            if not name:
                raise InvalidArgumentError(f"{self.function} name", name, f"a name for the 'module:Class' {self.kind}")
            target: str | type[T] = cls
        elif isinstance(cls, self.base) and not isinstance(cls, type):
            instance, target = cls, type(cls)
        elif isinstance(cls, type) and issubclass(cls, self.base):
            target = cls
        else:
            raise InvalidArgumentError(self.function, cls, f"a {self.base.__name__} subclass with a name")
        key = name or getattr(target, "name", None)
        if not isinstance(key, str) or not key:
            raise InvalidArgumentError(self.function, cls, f"a {self.base.__name__} subclass with a name")
        with self._lock:
            self._targets[key] = target
            self._explicit.add(key)
            self._forget(key)
            if instance is not None:
                self._instances[key] = instance
        return cls

    def unregister(self, name: str) -> None:
        """Forget what a program registered as ``name``: a built-in or installed class of that name comes back."""
        with self._lock:
            self._explicit.discard(name)
            self._forget(name)
            original = self._built_in.get(name) or self._found.get(name)
            if original is None:
                self._targets.pop(name, None)
            else:
                self._targets[name] = original

    def refresh(self) -> None:
        """Forget what was loaded and read the entry points again (a package installed into a running process)."""
        with self._lock:
            for name in self._found:
                if name not in self._explicit and name not in self._built_in:
                    self._targets.pop(name, None)
            self._found.clear()
            self._classes.clear()
            self._instances.clear()
            self._entry_points_read = False

    def _forget(self, name: str) -> None:
        self._classes.pop(name, None)
        self._instances.pop(name, None)

    def _read_entry_points(self) -> None:
        if self._entry_points_read:
            return
        self._entry_points_read = True
        from importlib.metadata import entry_points  # reading them costs 0.1-0.2 s: only when needed

        for ep in entry_points(group=self.group):
            self._found.setdefault(ep.name, ep.value)
            self._targets.setdefault(ep.name, ep.value)

    # -- asking it -----------------------------------------------------------------------------------------
    def names(self) -> list[str]:
        """Every known name: the built-in ones first, then as registered or installed."""
        with self._lock:
            self._read_entry_points()
            return list(self._targets)

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        with self._lock:
            if name not in self._targets:
                self._read_entry_points()
            return name in self._targets

    def describe(self) -> str:
        """The known names as an unknown name's error says them."""
        return self._expected(self.names())

    def get(self, name: object, where: str) -> type[T]:
        """The class called ``name``, imported on first use; an unknown name is an InvalidArgumentError naming
        ``where`` and the known names."""
        with self._lock:
            if not isinstance(name, str) or name not in self:
                raise InvalidArgumentError(where, name, self.describe())
            found = self._classes.get(name)
            if found is None:
                target = self._targets[name]
                found = self._classes[name] = self._load(target, name, where) if isinstance(target, str) else target
            return found

    def instance(self, name: object, where: str) -> T:
        """The one instance of the class called ``name`` (made on first use)."""
        with self._lock:
            cls = self.get(name, where)
            found = self._instances.get(str(name))
            if found is None:
                found = self._instances[str(name)] = cls()
            return found

    def instances(self) -> Instances[T]:
        """The registry as a mapping of name -> instance (``KINDS["x"] = XKind()`` registers)."""
        return Instances(self)

    def _load(self, target: str, name: str, where: str) -> type[T]:
        said = f"{self.kind} {name!r}" if where == self.kind else f"{where}: {self.kind} {name!r}"
        try:
            cls = import_attribute(target)
        except TargetImportError as exc:
            raise GpuschedError(f"{said}: cannot load {target!r} ({exc})") from None
        if not (isinstance(cls, type) and issubclass(cls, self.base)):
            raise GpuschedError(f"{said}: {target!r} is not a {self.base.__name__} subclass")
        return cls


class Instances(MutableMapping[str, T]):
    """A registry seen as name -> its instance: setting an item registers, deleting one unregisters."""

    def __init__(self, registry: Registry[T]) -> None:
        self.registry = registry

    def __getitem__(self, name: str) -> T:
        if name not in self.registry:
            raise KeyError(name)
        return self.registry.instance(name, self.registry.kind)

    def __setitem__(self, name: str, value: T) -> None:
        self.registry.register(value, name)

    def __delitem__(self, name: str) -> None:
        if name not in self.registry:
            raise KeyError(name)
        self.registry.unregister(name)

    def __contains__(self, name: object) -> bool:
        return name in self.registry

    def __iter__(self) -> Iterator[str]:
        return iter(self.registry)

    def __len__(self) -> int:
        return len(self.registry.names())
