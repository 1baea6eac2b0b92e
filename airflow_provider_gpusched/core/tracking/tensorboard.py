"""TensorBoard: each trial attempt's reports as scalars at their steps, and the sweep as one HParams table.

Written with TensorBoard's own event-file writer and its HParams plugin's protocol buffers (the ``tensorboard``
package; no TensorFlow, no PyTorch). Layout under ``log_dir`` (default ``<sweep folder>/tensorboard``)::

    <run>/                          the HParams experiment: every parameter and the metrics reported
    <run>/<trial label>-<id>-<n>/   one trial attempt: its scalars, its hyper-parameters (one row of the table)

``tensorboard --logdir <sweep folder>/tensorboard`` shows curves across trials and, in HPARAMS, the table,
parallel coordinates and scatter plots of parameters against metrics.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Mapping, Sequence
from typing import Any

from airflow_provider_gpusched.core.errors import GpuschedError
from airflow_provider_gpusched.core.tracking.callback import SweepRun, TrackingCallback, TrialEnd, TrialReport, TrialRun

_SAFE = re.compile(r"[^A-Za-z0-9_.,=+-]+")


def _writer_parts() -> Any:
    try:
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.compat.proto.summary_pb2 import Summary
        from tensorboard.plugins.hparams import summary_v2 as hp
        from tensorboard.summary.writer.event_file_writer import EventFileWriter
    except ImportError as exc:
        raise GpuschedError(
            f"tracking: tensorboard needs TensorBoard ({exc}): pip install 'airflow-provider-gpusched[tensorboard]'"
        ) from None
    return Event, Summary, hp, EventFileWriter


def _hparam_value(value: Any) -> Any:
    """What the HParams plugin takes: a bool, number or string."""
    if isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


class TensorBoardCallback(TrackingCallback):
    name = "tensorboard"

    def __init__(self, *, sweep_folder: str = "", log_dir: str | None = None) -> None:
        self.Event, self.Summary, self.hp, self.EventFileWriter = _writer_parts()
        self.root = os.path.abspath(os.path.expanduser(log_dir or os.path.join(sweep_folder, "tensorboard")))
        self.writers: dict[str, Any] = {}

    def _run_dir(self, sweep: SweepRun) -> str:
        name = _SAFE.sub("_", sweep.run or "sweep").strip("._")[:100] or "sweep"
        return os.path.join(self.root, name)

    def _writer(self, path: str) -> Any:
        if path not in self.writers:
            os.makedirs(path, mode=0o755, exist_ok=True)
            self.writers[path] = self.EventFileWriter(path)
        return self.writers[path]

    def _trial_dir(self, trial: TrialRun) -> str:
        if "dir" not in trial.memo:
            label = _SAFE.sub("_", trial.label).strip("._")[:80] or "trial"
            base = os.path.join(self._run_dir(trial.sweep), f"{label}-{trial.trial_id[:8]}")
            n = 0
            while os.path.exists(f"{base}-{n}"):  # another attempt of the trial in this run keeps its own folder
                n += 1
            trial.memo["dir"] = f"{base}-{n}"
        return str(trial.memo["dir"])

    def _summary(self, path: str, summary: Any, step: int = 0, wall: float | None = None) -> None:
        self._writer(path).add_event(self.Event(summary=summary, step=step, wall_time=wall or time.time()))

    def on_trial_start(self, trial: TrialRun) -> None:
        params = {k: _hparam_value(v) for k, v in trial.params.items()}
        group = trial.trial_id if trial.sweep.run is None else f"{trial.sweep.run}/{trial.trial_id}"
        self._summary(self._trial_dir(trial), self.hp.hparams_pb(params, trial_id=group, start_time_secs=trial.started))
        keys = trial.sweep.memo.setdefault("params", {})
        for key, value in params.items():
            keys.setdefault(key, type(value).__name__)

    def on_trial_reports(self, trial: TrialRun, reports: Sequence[TrialReport]) -> None:
        path = self._trial_dir(trial)
        metrics = trial.sweep.memo.setdefault("metrics", [])
        for report in reports:
            values = [
                self.Summary.Value(tag=key, simple_value=float(value))
                for key, value in report.metrics.items()
                if value is not None
            ]
            for key in report.metrics:
                if key not in metrics:
                    metrics.append(key)
            self._summary(path, self.Summary(value=values), report.step, report.time)

    def on_trial_end(self, trial: TrialRun, end: TrialEnd) -> None:
        path = self._trial_dir(trial)
        values = dict(end.metrics)
        if end.score is not None:
            values["score"] = end.score
        metrics = trial.sweep.memo.setdefault("metrics", [])
        summary = [self.Summary.Value(tag=f"result/{k}", simple_value=float(v)) for k, v in values.items()]
        for key in values:
            if f"result/{key}" not in metrics:
                metrics.append(f"result/{key}")
        if summary:
            self._summary(path, self.Summary(value=summary), 0, end.ended)

    def _write_experiment(self, sweep: SweepRun) -> None:
        hp = self.hp
        params = sweep.memo.get("params", {})
        metrics = sweep.memo.get("metrics", [])
        config = hp.hparams_config_pb(
            hparams=[hp.HParam(name) for name in sorted(params)],
            metrics=[hp.Metric(tag) for tag in metrics],
        )
        self._summary(self._run_dir(sweep), config)

    def on_sweep_end(self, sweep: SweepRun, summary: Mapping[str, Any]) -> None:
        """The table's columns, once (TensorBoard keeps the first experiment it reads); until then the HParams
        dashboard infers them from the trials' own records."""
        self._write_experiment(sweep)

    def close(self) -> None:
        for writer in self.writers.values():
            writer.close()
        self.writers.clear()
