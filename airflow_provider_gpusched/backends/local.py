"""The local backend under Airflow: a trial is a ``SweepTrialGPUOperator`` (a lease of this host's GPUs); a batched
stage is one ``run_batch`` task per chunk, running the chunk's trials under leases several at once."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from airflow.sdk import task
from airflow.sdk.exceptions import AirflowException

from airflow_provider_gpusched import fleet, settings
from airflow_provider_gpusched.backends import AirflowBackend
from airflow_provider_gpusched.core.backends import get_backend, within_max_workers
from airflow_provider_gpusched.core.board import HELD_LEASES_XCOM, MAX_HELD_LEASES, lease_record
from airflow_provider_gpusched.core.gpu.sweep_batch import run_local_batch
from airflow_provider_gpusched.core.gpu.timeline import LEASE_HISTORY_XCOM, SegmentLog, segment_of
from airflow_provider_gpusched.core.stops import WorkHalted
from airflow_provider_gpusched.core.sweep.results.view import OUTCOMES_XCOM, outcome_records
from airflow_provider_gpusched.core.work_tag import WorkTag
from airflow_provider_gpusched.links import SweepLeaderboardLink
from airflow_provider_gpusched.operators.job_class import apply_quota_group
from airflow_provider_gpusched.operators.local_gpu import LocalGPUOperator
from airflow_provider_gpusched.operators.queue_stops import WorkStopped
from airflow_provider_gpusched.task_groups.trial_operators import RecordsTrialFailures
from airflow_provider_gpusched.tracking import BackgroundSender, send_manifest_trials

if TYPE_CHECKING:
    from airflow_provider_gpusched.core.gpu.backend import LocalBackend
    from airflow_provider_gpusched.core.job_classes import JobClass
    from airflow_provider_gpusched.core.sweep.running.trial_run import Manifest
    from airflow_provider_gpusched.task_groups.stage_view import StageView


class LocalAirflowBackend(AirflowBackend):
    batches = True
    runs_workers = True

    def trial_operator(self, view: StageView, arguments: dict[str, Any]) -> Any:
        wanted = get_backend(view.backend).trial_arguments(view.resources)
        return SweepTrialGPUOperator.partial(**wanted, **arguments)

    def plan_chunks(self, manifest: Manifest, python: str, max_parallel: int | None) -> list[Any]:
        """The chunks' numbers: each ``run_batch`` task reads its chunk from the manifest."""
        return list(range(manifest.chunk_count()))

    def plan_workers(self, manifest: Manifest, python: str, workers: int) -> list[Any]:
        """One ``run_batch`` task per worker, each one slot (in a fleet, each may run on another host)."""
        return list(range(workers))

    def pool_gpus(self, conn_id: str | None, simulate: str | None) -> Callable[[JobClass], int]:
        """Every GPU of this host's inventory (NVML, or the configured simulation), or with ``[gpusched]
        fleet_dir`` every GPU the fleet's hosts published."""
        from airflow_provider_gpusched.core.gpu.inventory import get_inventory
        from airflow_provider_gpusched.fleet import read_this_fleet

        view = None if simulate else read_this_fleet()
        if view is not None and view.hosts:  # several GPU hosts: every GPU any of them published
            count = sum(len(h.gpus) for h in view.hosts)
        else:
            count = len(get_inventory(simulate or settings.simulate_gpus() or None).gpus())
        return lambda cls: count

    def run_chunks(self, view: StageView, round_no: int | None, planned: Any) -> Any:
        """One ``run_batch`` task per chunk: the chunk's trials under leases of this host's GPUs, several at once."""
        chunks = _ChunkRunner(
            view.session,
            round_no,
            cast("LocalBackend", get_backend(view.backend)),  # its GPU request, read from the resources
            within_max_workers(view.parallel, view.max_workers),
            view.trials_per_process,
        )
        # an asynchronous search: each chunk is a worker, one slot asking for trials as it frees
        label = "worker {{ chunk }}" if view.asynchronous else "chunk {{ chunk }}"

        @task(**view.runner_task(task_id="run_batch", map_index_template=label, **view.trial_kwargs))
        def run_batch(chunk: int) -> dict[str, Any]:
            from airflow.sdk import get_current_context

            return chunks.run(chunk, get_current_context())

        return run_batch.expand(chunk=planned)


class _ChunkRunner:
    """What a ``run_batch`` task of a batched local stage does: its chunk's trials (or, for an asynchronous search,
    the trials its slot asks for) under leases of this host's GPUs, publishing its leases, GPU-timeline bars and
    outcomes as it goes, its trials to the sweep's trackers."""

    def __init__(
        self, session: Any, round_no: int | None, wing: LocalBackend, parallel: int | None, per_process: int
    ) -> None:
        self.session, self.spec, self.round_no, self.wing = session, session.spec, round_no, wing
        self.parallel, self.per_process = parallel, per_process

    def run(self, chunk: int, context: Any) -> dict[str, Any]:
        from airflow_provider_gpusched.core.units import time_limit_seconds
        from airflow_provider_gpusched.hooks.local_gpu import LocalGPUHook

        session, spec, r = self.session, self.spec, self.spec.resources
        asynchronous = spec.asks_as_it_goes
        # for map_index_template ("chunk {{ chunk }}"): Airflow renders it from the context the task leaves
        cast("dict[str, Any]", context)["chunk"] = chunk
        manifest = session.manifest(self.round_no, context["run_id"])
        trials = manifest.chunk(chunk) if not asynchronous else []
        searching = session.asynchronous(context["run_id"]) if asynchronous else None
        request = self.wing.gpu_request(r, settings.host_limit_defaults())
        manager = LocalGPUHook().get_conn()
        ti = context["ti"]
        name = f"worker {chunk}" if asynchronous else f"chunk {chunk}"
        if searching is None:
            print(f"chunk {chunk}: {len(trials)} trials on {manager.inventory.source} GPUs")
        else:
            print(f"worker {chunk}: asking the search for trials on {manager.inventory.source} GPUs")
        group = apply_quota_group(
            {"task_id": ti.task_id, "owner": context["task"].owner}, r.group, r.job_class, pool=False
        )
        tag = WorkTag.of_task(ti, sweep=spec.name, trial=name, job_class=r.job_class, group=group)
        board = _RunnerBoard(ti, manager, r, group, fleet.worker_host(ti))

        def outcomes() -> list[dict[str, Any]]:  # this run's outcome of each trial of the chunk
            return outcome_records(
                session.store,
                trials,
                manifest.record.run,
                manifest.record.planned_at,
                described=searching is not None,  # (an asynchronous search's trials are in no plan)
            )

        # the trials' starts, reports and ends to the sweep's trackers, from a thread of its own (tracking.py)
        sender = BackgroundSender(lambda: send_manifest_trials(manifest, list(trials), context, print))

        def publish() -> None:  # the GPU timeline's bars of this runner so far (and a worker's trials)
            board.publish()
            if searching is not None:
                ti.xcom_push(key=OUTCOMES_XCOM, value=outcomes())
            sender.poke()

        try:
            outcome = run_local_batch(
                manifest,
                trials,
                manager,
                request,
                parallel=self.parallel if searching is None else 1,
                trials_per_process=self.per_process,
                owner=f"{ti.dag_id}.{ti.task_id}[{chunk}] ({ti.run_id})",
                job_class=r.job_class,
                priority=r.priority,
                on_event=print,
                work=tag,
                setup=r.setup,
                time_limit=None if r.time_limit is None else time_limit_seconds(r.time_limit),
                on_attempt=board.on_attempt,
                on_tick=publish,
                host=board.host,
                search=searching,
                worker=f"{ti.task_id}[{chunk}] ({ti.run_id})",
                on_taken=trials.append,  # (the batch publishes them from this thread: on_tick)
            )
        except WorkHalted as exc:  # no retry: someone stopped it
            ti.xcom_push(key=OUTCOMES_XCOM, value=outcomes())
            raise WorkStopped(f"{name}: {exc}") from exc
        finally:
            publish()
            sender.finish()
        ti.xcom_push(key=OUTCOMES_XCOM, value=outcomes())
        return _chunk_counts(name, outcome, session.store.dir)


def _chunk_counts(name: str, outcome: dict[str, list[Any]], folder: str) -> dict[str, int]:
    """A chunk's counts by outcome, said in its log; a chunk whose every trial failed fails its task."""
    counts = {k: len(v) for k, v in outcome.items()}
    print(
        f"{name}: {counts['succeeded']} succeeded, {counts['pruned']} pruned, "
        f"{counts['failed']} failed, {counts['timeout']} stopped at their time limit"
    )
    if (counts["failed"] or counts["timeout"]) and not counts["succeeded"] and not counts["pruned"]:
        raise AirflowException(f"{name}: every trial failed (see {folder}/logs)")
    return counts


class _RunnerBoard:
    """What a runner task publishes for the GPU board and timeline: the bars of its lease attempts so far and the
    leases it holds now (XComs of its task instance)."""

    def __init__(self, ti: Any, manager: Any, resources: Any, group: str, host: str) -> None:
        self.ti, self.manager, self.resources, self.group, self.host = ti, manager, resources, group, host
        self.segments = SegmentLog()
        self.map_index = ti.map_index if ti.map_index is not None else -1

    def on_attempt(self, attempt: Any, label: str) -> None:
        ti, r = self.ti, self.resources
        self.segments.add(
            segment_of(
                attempt,
                job_class=r.job_class,
                priority=r.priority,
                label=label,
                dag_id=ti.dag_id,
                run_id=ti.run_id,
                task_id=ti.task_id,
                map_index=self.map_index,
                group=self.group,
            )
        )

    def held_now(self) -> list[dict[str, Any]]:
        """The leases this runner holds now."""
        ti, mine = self.ti, []
        me = (ti.dag_id, ti.run_id, ti.task_id, self.map_index)
        for lease in self.manager.leases():
            work = lease.work or {}
            if (work.get("dag_id"), work.get("run_id"), work.get("task_id"), work.get("map_index")) == me:
                mine.append(
                    lease_record(
                        self.host,
                        dataclasses.asdict(lease),
                        self.manager.inventory.gpus(),
                        dag_id=ti.dag_id,
                        run_id=ti.run_id,
                        task_id=ti.task_id,
                        map_index=self.map_index,
                    )
                )
        return mine[:MAX_HELD_LEASES]

    def publish(self) -> None:
        self.ti.xcom_push(key=LEASE_HISTORY_XCOM, value=self.segments.record())
        self.ti.xcom_push(key=HELD_LEASES_XCOM, value=self.held_now())


class SweepTrialGPUOperator(RecordsTrialFailures, LocalGPUOperator):
    """One mapped trial of a sweep on this host's GPUs (a lease per task): LocalGPUOperator, recording its
    trials' failures and publishing their outcomes (task_groups/trial_operators.py)."""

    lineage_job_type = "SWEEP_TRIAL_LOCAL_GPU"
    operator_extra_links = (*LocalGPUOperator.operator_extra_links, SweepLeaderboardLink())

    def __init__(self, *, sweep_name: str = "", trials: dict[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.sweep_name = sweep_name  # for the "Sweep leaderboard" link
        self.trials = trials

    def resume(self, context, event: dict[str, Any]) -> Any:
        return self._recording(super().resume, context, event)
