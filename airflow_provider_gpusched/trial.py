"""For code that runs as a sweep trial: report metrics while it runs.

    from airflow_provider_gpusched.trial import report

    for epoch in range(epochs):
        ...
        report(step=epoch, loss=val_loss, accuracy=acc, checkpoint=f"ckpt/{epoch}.pt")

Each call appends a line to the trial's ``reports.jsonl``; ``gpusched sweep results`` shows the last one of
each trial. Command trials in any language append the same lines to ``$GPUSCHED_REPORT_FILE`` (see
docs/sweeps.md). Outside a sweep, ``report`` does nothing. Imports nothing from Airflow.
"""

from airflow_provider_gpusched.core.sweep.records.reports import REPORT_ENV
from airflow_provider_gpusched.core.sweep.running.trial_report import report

__all__ = ["REPORT_ENV", "report"]
