"""OpenLineage for gpusched's tasks, through the OpenLineage provider's operator methods
(``get_openlineage_facets_on_start / _on_complete / _on_failure``, docs/observability.md).

What a task reports, besides what the provider reports of every task:

* job facet ``gpuschedJobType`` (OpenLineage's job type facet; the provider keeps ``jobType`` for its own
  ``AIRFLOW``/``TASK``): processing ``BATCH``, integration ``GPUSCHED``, job type ``SLURM_JOB``, ``LOCAL_GPU``,
  ``SWEEP_TRIAL_SLURM`` or ``SWEEP_TRIAL_LOCAL_GPU``;
* run facet ``externalQuery`` (Slurm): the job id, source ``slurm://<login host or this host>``;
* run facet ``gpusched``: backend, job class and priority, what was asked for (GPUs, memory, partition...), where it
  ran, attempts, preemptions and OOM retries;
* run facet ``gpuschedTrial`` (a sweep's trial): the sweep, its DAG run and task group (the parent sweep run), and
  each trial's id, label, hyper-parameters, state and result;
* on failure, run facet ``gpuschedFailure``: how it failed (``oom``, ``timeout``, ``preempted``, Slurm's final
  state...) and the message; the provider adds the exception as ``errorMessage``.

The provider is optional: nothing here imports it until it calls these methods, and without it they are never
called.
"""

from __future__ import annotations

import functools
import socket
import urllib.parse
from typing import Any

INTEGRATION = "GPUSCHED"


@functools.cache
def _facets():
    from attrs import define
    from openlineage.client.facet_v2 import RunFacet

    @define
    class GpuschedRunFacet(RunFacet):
        """How gpusched ran a task: backend, class, request, placement, attempts."""

        backend: str
        jobClass: str
        priority: int
        request: dict[str, Any]
        placement: dict[str, Any]
        attempts: int
        preemptions: int
        oomRetries: int

    @define
    class GpuschedTrialRunFacet(RunFacet):
        """The sweep trials a task ran, with the sweep run they belong to."""

        sweep: str
        sweepRun: dict[str, Any]
        trials: list[Any]
        leftOut: str = ""  # what the size cap (MAX_TRIAL_FACET_BYTES) left out, said; "" when nothing

    @define
    class GpuschedFailureRunFacet(RunFacet):
        """How gpusched saw the work fail."""

        kind: str
        message: str

    return GpuschedRunFacet, GpuschedTrialRunFacet, GpuschedFailureRunFacet


def operator_lineage(
    *,
    job_type: str,
    run: dict[str, Any] | None = None,
    external_id: str = "",
    external_source: str = "",
    trial: dict[str, Any] | None = None,
    failure: tuple[str, str] | None = None,
):
    """The ``OperatorLineage`` of one task (see the module's docstring)."""
    from airflow.providers.openlineage.extractors import OperatorLineage
    from openlineage.client.facet_v2 import external_query_run, job_type_job

    run_facet, trial_facet, failure_facet = _facets()
    run_facets: dict[str, Any] = {}
    if run is not None:
        run_facets["gpusched"] = run_facet(**run)
    if external_id:
        run_facets["externalQuery"] = external_query_run.ExternalQueryRunFacet(
            externalQueryId=external_id, source=external_source
        )
    if trial is not None:
        run_facets["gpuschedTrial"] = trial_facet(**capped_trials(trial))
    if failure is not None:
        run_facets["gpuschedFailure"] = failure_facet(kind=failure[0], message=failure[1][:2000])
    # the provider sets the standard "jobType" facet itself (integration AIRFLOW, job type TASK): ours has its own key
    return OperatorLineage(
        run_facets=run_facets,
        job_facets={
            "gpuschedJobType": job_type_job.JobTypeJobFacet(
                processingType="BATCH", integration=INTEGRATION, jobType=job_type
            )
        },
    )


#: the ``gpuschedTrial`` facet's trials at most, as JSON (an event goes to every lineage backend on every task;
#: a 200-trial array with large parameters made 40 MB events)
MAX_TRIAL_FACET_BYTES = 256 * 1024


def capped_trials(trial: dict[str, Any], limit: int = MAX_TRIAL_FACET_BYTES) -> dict:
    """``trial`` (the facet's fields) with its trials cut to ``limit`` bytes of JSON: the first that fit are kept
    (one too large on its own keeps its id, label and state, its parameters and result left out), and ``leftOut``
    says what was left out and where the rest is."""
    import json

    kept, used, cut, trimmed = [], 0, 0, 0
    for entry in trial.get("trials", []):
        size = len(json.dumps(entry, default=str))
        if size > limit // 8:
            entry = {**entry, "params": {}, "result": None}
            size = len(json.dumps(entry, default=str))
            trimmed += 1
        if used + size > limit:
            cut += 1
            continue
        kept.append(entry)
        used += size
    notes = []
    if trimmed:
        notes.append(f"{trimmed} trial(s) listed without their parameters and result (over {limit // 8:,} bytes each)")
    if cut:
        notes.append(
            f"{cut} of {len(trial.get('trials', []))} trials left out (the facet is capped at {limit:,} bytes)"
        )
    if notes:
        notes.append("the sweep's results folder has every trial")
    return {**trial, "trials": kept, "leftOut": "; ".join(notes)}


def slurm_source(runner_description: dict[str, Any] | None) -> str:
    """Where a Slurm job id means something: ``slurm://<login host>``, slurmrestd's host, or this host (where the
    commands run)."""
    desc = runner_description or {}
    rest = urllib.parse.urlsplit(desc["rest_url"]).hostname if desc.get("rest_url") else None
    host = desc.get("host") or rest or socket.getfqdn()
    return f"slurm://{host}"


def trial_facet(manifest: Any, trials: Any, sweep: str, task_instance) -> dict[str, Any]:
    """The ``gpuschedTrial`` facet of a sweep's trial task: its trials (the manifest's records, from the results
    folder) and the sweep run."""
    records = {r["trial_id"]: r for r in manifest.store.records(trials)}
    task_id = getattr(task_instance, "task_id", "")
    return {
        "sweep": sweep,
        "sweepRun": {
            "dag_id": getattr(task_instance, "dag_id", ""),
            "run_id": getattr(task_instance, "run_id", ""),
            "group": task_id.rsplit(".", 1)[0] if "." in task_id else "",
        },
        "trials": [
            {
                "trial_id": t.trial_id,
                "label": t.label,
                "params": dict(t.params),
                "state": records.get(t.trial_id, {}).get("state", ""),
                "result": records.get(t.trial_id, {}).get("result"),
            }
            for t in trials
        ],
    }


class LineageFacets:
    """The OpenLineage methods the provider calls on an operator (start, complete, failure), once for
    LocalGPUOperator and SlurmJobOperator: each says what it ran and where (``_lineage_run``), how it failed
    (``_lineage_failure``), the external job it ran as (``_lineage_external``); a sweep's trial operators add the
    trial (``_lineage_trial``)."""

    lineage_job_type = ""

    def _lineage_run(self) -> dict[str, Any]:
        raise NotImplementedError

    def _lineage_failure(self) -> tuple[str, str]:
        raise NotImplementedError

    def _lineage_external(self) -> tuple[str, str]:
        """(external job id, its source), e.g. a Slurm job id; ("", "") when there is none."""
        return "", ""

    def _lineage_trial(self, task_instance) -> dict[str, Any] | None:
        return None

    def _lineage(self, task_instance, failure: tuple[str, str] | None = None):
        external_id, external_source = self._lineage_external()
        return operator_lineage(
            job_type=self.lineage_job_type,
            run=self._lineage_run(),
            external_id=external_id,
            external_source=external_source,
            trial=self._lineage_trial(task_instance) if task_instance is not None else None,
            failure=failure,
        )

    def get_openlineage_facets_on_start(self):
        return self._lineage(None)

    def get_openlineage_facets_on_complete(self, task_instance):
        return self._lineage(task_instance)

    def get_openlineage_facets_on_failure(self, task_instance):
        return self._lineage(task_instance, self._lineage_failure())
