"""Weights & Biases: each trial attempt is a W&B run (its config the parameters, its history the reports at their
steps, its summary the result and state), grouped by the sweep's DAG run, through the real ``wandb`` client.

``mode: offline`` (the default) writes the run files under ``dir`` (default ``<sweep folder>/wandb``): nothing leaves
the machine until ``wandb sync <dir>/wandb/offline-run-*`` uploads them (a lab without outbound network, or one that
reviews first). ``mode: online`` sends to the server ``WANDB_API_KEY``/``WANDB_BASE_URL`` name. A W&B run is written
in one go, when its trial ends: W&B cannot add to an offline run after it finished.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from airflow_provider_gpusched.core.errors import GpuschedError
from airflow_provider_gpusched.core.sweep.parts.expand import nested
from airflow_provider_gpusched.core.sweep.records.reports import REPORTS_FILE, read_reports
from airflow_provider_gpusched.core.tracking.callback import SweepRun, TrackingCallback, TrialEnd, TrialRun


class WandbCallback(TrackingCallback):
    name = "wandb"

    def __init__(
        self,
        *,
        sweep_folder: str = "",
        project: str | None = None,
        entity: str | None = None,
        mode: str = "offline",
        dir: str | None = None,
    ) -> None:
        try:
            import wandb
        except ImportError as exc:
            raise GpuschedError(
                f"tracking: wandb needs the W&B client ({exc}): pip install 'airflow-provider-gpusched[wandb]'"
            ) from None
        self.wandb = wandb
        self.project, self.entity, self.mode = project, entity, mode
        self.dir = os.path.abspath(os.path.expanduser(dir or os.path.join(sweep_folder, "wandb")))

    def on_trial_end(self, trial: TrialRun, end: TrialEnd) -> None:
        if end.superseded:  # a W&B run is written whole at its end, from the folder's reports: they are a later
            return  # attempt's now, and this attempt never had a run to close
        sweep: SweepRun = trial.sweep
        os.makedirs(self.dir, mode=0o700, exist_ok=True)
        reports, _ = read_reports(os.path.join(trial.folder, REPORTS_FILE), trial.folder)
        settings = self.wandb.Settings(silent=True, console="off", save_code=False, x_disable_stats=True)
        run = self.wandb.init(
            project=self.project or sweep.sweep,
            entity=self.entity,
            dir=self.dir,
            mode=self.mode,  # type: ignore[arg-type]  # 'offline' or 'online' (config.py checks)
            name=trial.label,
            group=f"{sweep.sweep}/{sweep.run}" if sweep.run else sweep.sweep,
            job_type="trial",
            config=nested(dict(trial.params)),
            tags=[end.state],
            reinit="create_new",
            settings=settings,
        )
        try:
            last = -1
            for report in reports:
                step = max(int(report["step"]), last + 1)  # W&B drops a step that does not grow
                run.log({k: v for k, v in report["metrics"].items() if v is not None}, step=step)
                last = step
            summary: dict[str, Any] = {"state": end.state, "trial_id": trial.trial_id, **dict(end.metrics)}
            if end.score is not None:
                summary["score"] = end.score
            if end.error:
                summary["error"] = end.error
            task = trial.task or {}
            summary.update(
                {
                    f"airflow/{k}": v
                    for k, v in {"dag_id": sweep.dag_id, "run_id": sweep.run, **dict(task)}.items()
                    if v is not None
                }
            )
            for key, value in summary.items():
                run.summary[key] = value
            trial.memo["run_id"] = run.id
        finally:
            run.finish(exit_code=0 if end.state in ("succeeded", "pruned") else 1)

    def on_sweep_end(self, sweep: SweepRun, summary: Mapping[str, Any]) -> None:
        """Nothing more: W&B groups the trials' runs (``group``) and compares them."""
