"""A sweep spec's ``tracking`` list: which trackers its trials go to (off by default).

Each entry is a tracker's name, or a mapping with ``kind`` (a built-in tracker, or one an installed package adds
through the entry-point group ``airflow_provider_gpusched.tracking``) or ``callback`` (``package.module:
Class``, a :class:`~airflow_provider_gpusched.core.sweep.definition.tracking_callback.TrackingCallback` of your own) and that tracker's settings::

    tracking:
      - mlflow                                    # the server of connection mlflow_default
      - {kind: mlflow, experiment: digits, conn_id: mlflow_lab}
      - {kind: tensorboard}                       # event files under <sweep folder>/tensorboard
      - {kind: wandb, project: digits}            # offline run files under <sweep folder>/wandb
      - {callback: my_lab.tracking:SlackCallback, channel: "#sweeps"}

The ``[gpusched] tracking`` option names trackers every sweep sends to (``mlflow,tensorboard``), on top of its own.
Errors name the key (``sweeps/hpo.yaml: tracking[1].experiment: expected a string``), and come when the spec is
loaded: a ``tracking_uri`` MLflow's REST API cannot be reached at (``htp://...``, a ``file:`` store) or a directory
that cannot be one is refused before any trial runs, not by each trial's task afterwards.

The parse is the spec's own (core/sweep/definition/sweep_spec.py reads its ``tracking`` list here); core/tracking/config.py
re-exports these names, and adds what sends to the trackers (``build_callbacks``, ``merge_default``).
"""

from __future__ import annotations

import difflib
import os
import re
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_gpusched.core.checks import is_number
from airflow_provider_gpusched.core.errors import InvalidArgumentError
from airflow_provider_gpusched.core.import_target import import_attribute
from airflow_provider_gpusched.core.registry import Registry
from airflow_provider_gpusched.core.sweep.definition.tracking_callback import TrackingCallback

#: the entry-point group other packages add trackers under (``name = "package.module:Class"``, a
#: TrackingCallback subclass); a spec then names it as ``kind``, its keys passed to its constructor
ENTRY_POINT_GROUP = "airflow_provider_gpusched.tracking"
#: the trackers a spec's ``kind`` may name (one :class:`~airflow_provider_gpusched.core.registry.Registry`, as
#: backends have): the built-in ones are core/tracking's ``module:Class`` strings, imported only when a sweep uses
#: them (by name, the registry's way: the sweep imports nothing of the trackers built on it)
TRACKERS: Registry[TrackingCallback] = Registry(
    "tracker",
    TrackingCallback,
    ENTRY_POINT_GROUP,
    {
        "mlflow": "airflow_provider_gpusched.core.tracking.mlflow:MLflowCallback",
        "tensorboard": "airflow_provider_gpusched.core.tracking.tensorboard:TensorBoardCallback",
        "wandb": "airflow_provider_gpusched.core.tracking.wandb:WandbCallback",
    },
    function="register_tracker",
    expected=lambda names: "one of " + ", ".join(names),
)


def register_tracker(cls: type[TrackingCallback]) -> type[TrackingCallback]:
    """Make a tracker known by its ``name`` (usable as a class decorator); a name again replaces it."""
    TRACKERS.register(cls)
    return cls


def unregister_tracker(name: str) -> None:
    TRACKERS.unregister(name)


def _string(value: Any) -> bool:
    return isinstance(value, str) and bool(value) and "\x00" not in value


SERVER_URL = "an MLflow tracking server's URL, http(s)://host[:port][/prefix], such as http://mlflow:5000"
#: MLflow's tracking URIs that are not a server: its own client writes them (a folder, Databricks, a database)
_MLFLOW_STORES = ("file", "databricks", "databricks-uc", "uc", "sqlite", "postgresql", "mysql", "mssql")
_HOST_PORT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.-]*:[0-9]+(/.*)?$")


def tracking_uri_problem(value: Any) -> str | None:
    """What is wrong with ``value`` as the MLflow server's URL (what is expected, with the likely fix), or None.
    The one check of a URI from the spec, an Airflow connection or ``$MLFLOW_TRACKING_URI``: the provider speaks
    MLflow's REST API (mlflow.py), so the URI is a server's."""
    if not _string(value) or any(c.isspace() for c in value):
        return SERVER_URL
    if _HOST_PORT.match(value):  # mlflow:5000 (a URL parser reads 'mlflow' as the scheme)
        return f"{SERVER_URL}; did you mean http://{value}?"
    parsed = urllib.parse.urlsplit(value)
    scheme = parsed.scheme.lower()
    if scheme in ("http", "https"):
        try:
            port = parsed.port
        except ValueError:
            return f"{SERVER_URL} (its port is not a number from 1 to 65535)"
        if not parsed.hostname:
            return f"{SERVER_URL} (it names no host)"
        if port == 0:
            return f"{SERVER_URL} (its port is not a number from 1 to 65535)"
        return None
    store = scheme.split("+")[0] or (value.lower() if value.lower() in _MLFLOW_STORES else "")
    if store in _MLFLOW_STORES or not scheme:
        what = f"a {store} store" if store else "a local folder"
        return (
            f"{SERVER_URL}: the provider speaks to MLflow through a tracking server, not to {what}; serve it with "
            f"`mlflow server --backend-store-uri URI` and give that server's URL (docs/tracking.md, "
            f"'Setting up an MLflow server')"
        )
    close = difflib.get_close_matches(scheme, ["http", "https"], n=1, cutoff=0.5)
    if close:
        rest = value.split(":", 1)[1].lstrip("/")
        return f"{SERVER_URL}; did you mean {close[0]}://{rest}?"
    return SERVER_URL


def _tracking_uri(value: Any) -> bool | str:
    return tracking_uri_problem(value) or True


def _directory(default: str) -> Callable[[Any], bool | str]:
    """A check of a directory the callback writes to with the file system, on whichever Airflow worker syncs."""

    def check(value: Any) -> bool | str:
        if not _string(value):
            return False
        expected = f"an absolute directory (default {default})"
        if "://" in value:
            return f"{expected}: the files are written with the file system, not to a URL"
        path = os.path.expanduser(value)
        if not os.path.isabs(path):
            return (
                f"{expected}: a relative one would be relative to each task's working directory; "
                f"leave it out for {default}"
            )
        if os.path.exists(path) and not os.path.isdir(path):
            return f"{expected}: {path} is a file"
        return True

    return check


#: each built-in tracker's settings: key -> (check, what is expected); a check returns True, False (then the value
#: is not what ``expected`` says) or the particular problem of the value, said instead
SETTINGS: dict[str, dict[str, tuple[Callable[[Any], bool | str], str]]] = {
    "mlflow": {
        "tracking_uri": (_tracking_uri, SERVER_URL),
        "conn_id": (_string, "an Airflow connection id (default mlflow_default)"),
        "experiment": (_string, "an MLflow experiment name (default: the sweep's name)"),
        "artifacts": (lambda v: isinstance(v, bool), "true or false (upload output.log and result.json)"),
        "timeout": (lambda v: is_number(v) and 0 < v <= 120, "seconds from 0 to 120 per request"),
    },
    "tensorboard": {
        "log_dir": (_directory("<sweep folder>/tensorboard"), "a directory (default <sweep folder>/tensorboard)"),
    },
    "wandb": {
        "project": (_string, "a W&B project (default: the sweep's name)"),
        "entity": (_string, "a W&B entity (team or user)"),
        "mode": (
            lambda v: v in ("offline", "online"),
            "'offline' (default: run files, `wandb sync` later) or 'online'",
        ),
        "dir": (_directory("<sweep folder>/wandb"), "a directory for the run files (default <sweep folder>/wandb)"),
    },
}


@dataclass(frozen=True)
class TrackerConfig:
    """One entry of ``tracking``: a built-in ``kind`` or a ``callback`` target, and its settings."""

    kind: str | None
    callback: str | None = None
    settings: Mapping[str, Any] = field(default_factory=dict)
    where: str = "tracking"

    @property
    def label(self) -> str:
        return self.kind or str(self.callback)

    def to_dict(self) -> dict[str, Any]:
        return {**({"kind": self.kind} if self.kind else {"callback": self.callback}), **self.settings}

    def build(self, sweep_folder: str, resolved: Mapping[str, Any] | None = None) -> TrackingCallback:
        """The callback, made with its settings (and ``resolved``: what the Airflow side looked up, such as an
        MLflow connection's URL and credentials)."""
        target = self.kind or str(self.callback)
        if self.kind:
            cls: type[TrackingCallback] = TRACKERS.get(self.kind, f"{self.where}.kind")
        else:
            try:
                cls = import_attribute(target)
            except Exception as exc:  # noqa: BLE001 - a user's module may raise anything on import
                raise InvalidArgumentError(f"{self.where}", target, f"an importable TrackingCallback ({exc})") from None
            if not (isinstance(cls, type) and issubclass(cls, TrackingCallback)):
                raise InvalidArgumentError(self.where, target, "a TrackingCallback subclass")
        options = {**self.settings, **(resolved or {})}
        if self.kind in SETTINGS:  # a built-in tracker writes under the sweep folder by default
            options["sweep_folder"] = sweep_folder
        try:
            callback = cls(**options)
        except TypeError as exc:
            raise InvalidArgumentError(self.where, self.to_dict(), f"settings {target} takes ({exc})") from None
        return callback


def parse_tracking(value: Any, where: str = "tracking") -> tuple[TrackerConfig, ...]:
    """The ``tracking`` setting as configs; every error names the entry and the key."""
    if value is None:
        return ()
    if isinstance(value, (str, Mapping)):
        value = [value]
    if not isinstance(value, Sequence):
        raise InvalidArgumentError(where, value, "a list of trackers, such as [mlflow, tensorboard]")
    out: list[TrackerConfig] = []
    for i, entry in enumerate(value):
        at = f"{where}[{i}]"
        if isinstance(entry, TrackerConfig):
            out.append(entry)
            continue
        if isinstance(entry, str):
            entry = {"kind": entry}
        if not isinstance(entry, Mapping):
            raise InvalidArgumentError(at, entry, f"a tracker's name ({', '.join(TRACKERS)}) or a mapping with kind")
        kind, target = entry.get("kind"), entry.get("callback")
        if (kind is None) == (target is None):
            raise InvalidArgumentError(
                at, dict(entry), f"exactly one of kind ({', '.join(TRACKERS)}) or callback (package.module:Class)"
            )
        settings = {str(k): v for k, v in entry.items() if k not in ("kind", "callback")}
        if kind is not None:
            if kind not in TRACKERS:
                raise InvalidArgumentError(f"{at}.kind", kind, TRACKERS.describe())
            known = SETTINGS.get(kind)  # an installed tracker's settings are its constructor's to check
            if known is None:
                out.append(TrackerConfig(kind=kind, settings=settings, where=at))
                continue
            for key, setting in settings.items():
                if key not in known:
                    raise InvalidArgumentError(
                        f"{at}.{key}", setting, f"one of the {kind} settings: {', '.join(known)}"
                    )
                check, expected = known[key]
                verdict = check(setting)
                if verdict is not True:
                    raise InvalidArgumentError(f"{at}.{key}", setting, verdict or expected)
            out.append(TrackerConfig(kind=kind, settings=settings, where=at))
        else:
            if not isinstance(target, str) or ":" not in target:
                raise InvalidArgumentError(f"{at}.callback", target, "'package.module:Class'")
            out.append(TrackerConfig(kind=None, callback=target, settings=settings, where=at))
    labels = [c.to_dict().get("kind") or c.callback for c in out]
    for label in labels:
        if labels.count(label) > 1 and label in TRACKERS:
            raise InvalidArgumentError(
                where, label, f"each tracker once ({label} is listed {labels.count(label)} times)"
            )
    return tuple(out)
