"""Experiment tracking under Airflow: the sync of core/tracking/sync.py, run where Airflow runs a sweep's work.

Called by each trial's task when it ends (its trials), by the local batch runner and the asynchronous workers after
each trial, by each round's ``tell`` and by the sweep's ``collect`` (the last, final sync, which also tells the sweep
run's end). Never fails a task: a tracker that is down or misconfigured is logged, and its events wait for the next
sync (core/tracking/sync.py). The MLflow server comes from the spec's ``tracking_uri``, else the Airflow connection
``conn_id`` (default ``mlflow_default``), else ``$MLFLOW_TRACKING_URI``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow_provider_gpusched import settings
from airflow_provider_gpusched.core.tracking.callback import SweepRun, TrackingCallback
from airflow_provider_gpusched.core.tracking.config import TrackerConfig, merge_default, parse_tracking, score_of
from airflow_provider_gpusched.core.tracking.config import build_callbacks as core_build
from airflow_provider_gpusched.core.tracking.sync import send_to

if TYPE_CHECKING:
    from airflow_provider_gpusched.core.sweep.running.session import SweepSession
    from airflow_provider_gpusched.core.sweep.running.trial_run import Manifest

log = logging.getLogger(__name__)
DEFAULT_MLFLOW_CONN = "mlflow_default"


def mlflow_connection(conn_id: str) -> dict[str, Any]:
    """The tracking URI and credentials of an Airflow connection: host (``http://mlflow`` or ``mlflow``; schema
    ``https`` for TLS), port (default 5000), login/password (basic auth), or the token as password with
    ``{"auth": "bearer"}`` in extra. {} when the connection does not exist."""
    from airflow.sdk import BaseHook

    try:
        conn = BaseHook.get_connection(conn_id)
    except Exception:  # noqa: BLE001 - AirflowNotFoundException, or no way to ask: the env may still say
        return {}
    host = (conn.host or "").rstrip("/")
    if not host:
        return {}
    bare = "://" not in host
    if bare:
        host = f"{conn.schema or 'http'}://{host}"
    if conn.port or bare:  # a bare host name: MLflow's own port unless the connection says another
        host = f"{host}:{conn.port or 5000}"
    extra = conn.extra_dejson or {}
    if extra.get("auth") == "bearer":
        return {"tracking_uri": host, "token": conn.password}
    return {"tracking_uri": host, "username": conn.login or None, "password": conn.password or None}


def _resolved(config: TrackerConfig) -> dict[str, Any]:
    if config.kind != "mlflow" or config.settings.get("tracking_uri"):
        return {}
    conn_id = str(config.settings.get("conn_id") or DEFAULT_MLFLOW_CONN)
    found = mlflow_connection(conn_id)
    if found:  # an error about its URL names the connection it came from
        found["uri_source"] = f"the Airflow connection {conn_id}"
    return found


def build_callbacks(
    configs: Sequence[TrackerConfig], folder: str, say: Callable[[str], None]
) -> list[TrackingCallback]:
    """The callbacks of ``configs`` and of ``[gpusched] tracking``, MLflow's server looked up in its connection."""
    try:
        configs = merge_default(configs, settings.tracking())
    except Exception as exc:  # noqa: BLE001 - a bad option must not fail the trials
        say(f"tracking: [gpusched] tracking: {exc}")
    return core_build(configs, folder, say, _resolved)


def _send(
    configs: Sequence[TrackerConfig],
    sweep: SweepRun,
    say: Callable[[str], None],
    *,
    folders: Iterable[str] | None = None,
    final: bool = False,
    summary: Mapping[str, Any] | None = None,
    tasks: Mapping[str, Mapping[str, Any]] | None = None,
) -> None:
    try:
        callbacks = build_callbacks(configs, sweep.folder, say)
        send_to(
            callbacks, sweep, say, score_of(sweep.objective), folders=folders, final=final, summary=summary, tasks=tasks
        )
    except Exception as exc:  # noqa: BLE001 - tracking never fails the task that runs trials
        say(f"tracking: not sent ({type(exc).__name__}: {exc}); the next sync tries again")


def _task_of(context: Mapping[str, Any]) -> dict[str, Any]:
    ti = context.get("ti")
    return {
        "dag_id": getattr(ti, "dag_id", None),
        "run_id": context.get("run_id"),
        "task_id": getattr(ti, "task_id", None),
        "map_index": getattr(ti, "map_index", None),
        "try_number": getattr(ti, "try_number", None),
    }


def send_manifest_trials(
    manifest: Manifest,
    trials: Sequence[Any] | None,
    context: Mapping[str, Any],
    say: Callable[[str], None] = log.info,
) -> None:
    """After a trial task (or a batch runner's trial) ended: send its trials (None: every trial of the run)."""
    record = manifest.record
    if not record.tracking and not settings.tracking():
        return
    dag = context.get("dag")
    sweep = SweepRun(
        sweep=record.sweep,
        run=record.run,
        folder=manifest.store.dir,
        search=record.search or "",
        objective=record.objective,
        dag_id=getattr(dag, "dag_id", None),
    )
    task = _task_of(context)
    folders = [t.folder for t in trials] if trials is not None else None
    _send(
        parse_tracking(record.tracking),
        sweep,
        say,
        folders=folders,
        tasks={f: task for f in folders or ()},
    )


def send_session(
    session: SweepSession,
    context: Mapping[str, Any],
    summary: Mapping[str, Any] | None = None,
    say: Callable[[str], None] = print,
) -> None:
    """From a round's ``tell`` (every trial of the run so far) or the sweep's ``collect`` (``summary``: the final
    sync, which tells the sweep run's end)."""
    spec = session.spec
    if not spec.tracking and not settings.tracking():
        return
    dag = context.get("dag")
    sweep = SweepRun(
        sweep=spec.name,
        run=context.get("run_id"),
        folder=session.store.dir,
        search=spec.search,
        objective=spec.objective.to_dict() if spec.objective else None,
        dag_id=getattr(dag, "dag_id", None),
    )
    _send(spec.tracking or (), sweep, say, final=summary is not None, summary=summary)


class BackgroundSender:
    """Sends from a thread of its own while a batch runs (``poke`` at each tick: a sync starts unless one is under
    way), so a slow tracker never delays the runner's loop; ``finish`` waits for it (bounded) and sends the rest."""

    def __init__(self, send: Callable[[], None]) -> None:
        self.send = send
        self.thread: Any = None

    def poke(self) -> None:
        import threading

        if self.thread is not None and self.thread.is_alive():
            return
        self.thread = threading.Thread(target=self.send, name="gpusched-tracking", daemon=True)
        self.thread.start()

    def finish(self, wait: float = 30.0) -> None:
        if self.thread is not None:
            self.thread.join(wait)
            if self.thread.is_alive():
                return  # still sending: the sweep's collect sends what it could not
        self.send()
