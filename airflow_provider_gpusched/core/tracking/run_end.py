"""The end of a terminal run (``gpusched sweep run``, ``run_sweep``): its trials and summary sent to the spec's
trackers, once the run ended. A hook of core/sweep/running/terminal.py's ``RUN_END`` registry, which names this class as
its built-in ``tracking`` hook (the sweep imports nothing of the tracking built on it)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from airflow_provider_gpusched.core.sweep.definition.sweep_spec import SweepSpec
from airflow_provider_gpusched.core.sweep.running.session import SweepSession
from airflow_provider_gpusched.core.sweep.running.terminal import RunEndHook
from airflow_provider_gpusched.core.tracking.callback import SweepRun
from airflow_provider_gpusched.core.tracking.config import build_callbacks, score_of
from airflow_provider_gpusched.core.tracking.sync import send_to


class SendToTrackers(RunEndHook):
    """The spec's trackers, sent what the run recorded and its summary (MLflow's server: the spec's, or
    ``$MLFLOW_TRACKING_URI``); nothing for a spec without ``tracking``."""

    name = "tracking"

    def __call__(
        self, spec: SweepSpec, session: SweepSession, run: str, summary: dict[str, Any], say: Callable[[str], None]
    ) -> None:
        if not spec.tracking:
            return
        objective = spec.objective.to_dict() if spec.objective else None
        sweep = SweepRun(sweep=spec.name, run=run, folder=session.store.dir, search=spec.search, objective=objective)
        ends = {k: v for k, v in summary.items() if k != "text"}
        send_to(
            build_callbacks(spec.tracking, session.store.dir, say),
            sweep,
            say,
            score_of(objective),
            final=True,
            summary=ends,
        )
