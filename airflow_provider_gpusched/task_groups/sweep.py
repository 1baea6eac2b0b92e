"""``sweep_task_group``: a sweep spec (Python or YAML) as an Airflow task group.

One-shot sweeps (grid, random)::

    plan ──> trial (mapped, one task per trial, label "method=GAN,num_zmode=1")  ──> collect ──> leaderboard
    plan ──> run_batch (mapped over chunks: many trials each)                     ──> collect ──> leaderboard

Searches in rounds (optuna, evolution)::

    round_0.plan ──> round_0.trial[...] ──> round_0.tell ──> round_1.plan ──> ... ──> collect ──> leaderboard

Trials run on local GPUs (:class:`LocalGPUOperator`, one lease each) or on Slurm (:class:`SlurmJobOperator`,
deferrable; in batched mode one job array per chunk). Every trial executes the core trial runner, which
records its state and result in the results folder, so a re-run skips what already succeeded.
``leaderboard`` returns the best trial (XCom), writes ``best.json`` and updates an Airflow Asset.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Mapping

from airflow.sdk import Asset, TaskGroup, task
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from airflow_provider_gpusched import settings
from airflow_provider_gpusched.core.errors import GpuschedError, InvalidArgumentError
from airflow_provider_gpusched.core.sweep.batch import run_local_batch, runner_argv, trial_argv
from airflow_provider_gpusched.core.sweep.session import SweepSession
from airflow_provider_gpusched.core.sweep.spec import SweepSpec
from airflow_provider_gpusched.core.sweep.trial_run import Manifest
from airflow_provider_gpusched.core.sweep.view import OUTCOMES_XCOM, PLAN_XCOM, outcome_records, plan_record

BACKENDS = ("local", "slurm")
BATCHING = ("auto", "mapped", "batched")


def load_spec(spec: SweepSpec | Mapping | str) -> SweepSpec:
    try:
        if isinstance(spec, SweepSpec):
            return spec
        if isinstance(spec, (str, os.PathLike)):
            return SweepSpec.from_yaml(os.fspath(spec))
        return SweepSpec.from_dict(spec)
    except InvalidArgumentError as exc:
        raise AirflowException(f"sweep spec: {exc}") from exc


def sweep_task_group(
    spec: SweepSpec | Mapping | str,
    *,
    backend: str = "local",
    group_id: str | None = None,
    results_root: str | None = None,
    batching: str = "auto",
    max_mapped_trials: int = 256,
    chunk_size: int | None = None,
    parallel: int | None = None,
    trials_per_process: int = 8,
    python: str | None = None,
    slurm_conn_id: str = "slurm_default",
    max_array_parallel: int | None = None,
    poll_interval: float | None = None,
    publish_asset: bool = True,
    trial_kwargs: Mapping[str, Any] | None = None,
) -> TaskGroup:
    """Build the task group of ``spec`` in the DAG being defined.

    :param backend: ``"local"`` (this host's GPUs) or ``"slurm"``.
    :param batching: ``"mapped"`` (a task per trial), ``"batched"`` (runner tasks or job arrays over chunks)
        or ``"auto"``: batched when a stage has more than ``max_mapped_trials`` trials.
    :param chunk_size: trials per runner task / job array (default: 500, or fewer so there are >= 2 chunks).
    :param parallel: local batched mode: leases in flight per runner (default: what fits on the GPUs).
    :param trials_per_process: local batched mode: trials run one after another in one process under one
        lease (saves a Python start per trial for short trials).
    :param python: interpreter that runs the trial runner (default: this one; on Slurm nodes it must have
        this package installed and see the results folder).
    :param trial_kwargs: extra arguments for the trial operator (``LocalGPUOperator``/``SlurmJobOperator``),
        e.g. ``retries`` or ``execution_timeout``.
    """
    spec = load_spec(spec)
    if backend not in BACKENDS:
        raise AirflowException(f"sweep {spec.name}: backend must be one of {BACKENDS}, got {backend!r}")
    if batching not in BATCHING:
        raise AirflowException(f"sweep {spec.name}: batching must be one of {BATCHING}, got {batching!r}")
    root = results_root or spec.results_root or settings.sweep_results_root()
    session = SweepSession(spec, root)
    size = spec.stage_size()
    batched = batching == "batched" or (batching == "auto" and size > max_mapped_trials)
    if batched and chunk_size is None:
        chunk_size = max(1, min(500, -(-size // 2)))
    stage = _Stage(spec, session, backend, batched, chunk_size, parallel, python or sys.executable, slurm_conn_id,
                   max_array_parallel, poll_interval, dict(trial_kwargs or {}), trials_per_process)
    # named by its URI: the same sweep name under another results root is another asset
    asset = Asset(uri=f"file://{os.path.join(session.store.dir, 'best.json')}") \
        if publish_asset and spec.objective is not None else None

    with TaskGroup(group_id=group_id or spec.name, tooltip=f"{spec.search} sweep {spec.name}") as group:
        if spec.in_rounds:
            previous = None
            for r in range(spec.rounds):
                with TaskGroup(group_id=f"round_{r}", tooltip=f"round {r + 1} of {spec.rounds}"):
                    plan, run = stage.build(round_no=r)

                    @task(task_id="tell", trigger_rule="all_done")
                    def tell(round_no: int = r) -> dict:
                        from airflow.sdk import get_current_context

                        run_id = get_current_context()["run_id"]
                        session.settle(round_no, run_id, print)
                        outcome = session.finish_round(round_no, run_id)
                        print(f"round {round_no}: {outcome['scored']}/{outcome['trials']} trials scored, "
                              f"round best {outcome['round_best']}")
                        return outcome

                    told = tell()
                    run >> told
                if previous is not None:
                    previous >> plan
                previous = told
            last = previous
        else:
            _plan, last = stage.build()

        @task(task_id="collect", trigger_rule="all_done")
        def collect() -> dict:
            from airflow.sdk import get_current_context

            run_id = get_current_context()["run_id"]
            if not spec.in_rounds:
                session.settle(None, run_id, print)
            summary = session.collect(run_id)
            print(summary.pop("text"))
            return summary

        @task(task_id="check_trials")
        def check_trials(summary: dict) -> dict:
            """The run is green only when at most ``max_failed_trials`` trials failed or were invalid."""
            counts = summary["counts"]
            bad = counts.get("failed", 0) + counts.get("invalid", 0)
            allowed = spec.max_failed_trials
            if allowed is not None and bad > allowed:
                lines = [f"  {p['index']} {p['label'] or p['trial_id']} [{p['state']}]: {p['error']}"
                         for p in summary.get("problems", [])[:20]]
                raise AirflowFailException(
                    f"sweep {spec.name}: {bad} of {counts['defined']} trials failed or gave an invalid result "
                    f"(max_failed_trials={allowed}):\n" + "\n".join(lines))
            print(f"sweep {spec.name}: {counts.get('succeeded', 0)} succeeded, {bad} failed or invalid "
                  f"(allowed: {'any' if allowed is None else allowed})")
            return counts

        @task(task_id="leaderboard", outlets=[asset] if asset else [])
        def leaderboard(summary: dict) -> dict | None:
            if spec.objective is None:
                print(f"no objective: {summary['counts']['succeeded']} trials succeeded; results in {summary['folder']}")
                return None
            best = summary.get("best")
            if best is None:
                raise AirflowFailException(f"sweep {spec.name}: no trial succeeded with a {spec.objective.metric!r} "
                                           f"in its result (see {summary['folder']}/summary.json)")
            print(f"best {spec.objective.metric} = {best['score']:.6g}: {best['label']} "
                  f"(trial {best['trial_id']}; {os.path.join(summary['folder'], 'best.json')})")
            return best

        summary = collect()
        last >> summary
        leaderboard(summary)
        check_trials(summary)
    return group


def _publish_plan(session: SweepSession, manifest: Manifest, round_no: int | None, backend: str, batched: bool,
                  context) -> None:
    """The stage's plan for the UI's sweep view (XCom ``gpusched_sweep_plan``)."""
    ti = context["ti"]
    group = ti.task_id.rsplit(".", 1)[0]
    trial_task = f"{group}.{'trial' if not batched else 'run_batch' if backend == 'local' else 'trial_array'}"
    skipped_ids = set(manifest.data["skipped"])
    spec = session.spec
    ti.xcom_push(key=PLAN_XCOM, value=plan_record(
        spec.name, spec.search, round_no, spec.objective, backend, trial_task,
        manifest.data.get("chunk_size") if batched else None, manifest.trials, manifest.pending, session.store,
        [t for t in manifest.trials if t.trial_id in skipped_ids], context["run_id"]))


class _Stage:
    """plan -> run trials, in mapped or batched form, on one backend."""

    def __init__(self, spec: SweepSpec, session: SweepSession, backend: str, batched: bool, chunk_size: int | None,
                 parallel: int | None, python: str, slurm_conn_id: str, max_array_parallel: int | None,
                 poll_interval: float | None, trial_kwargs: dict, trials_per_process: int = 8) -> None:
        self.spec, self.session, self.backend, self.batched = spec, session, backend, batched
        self.chunk_size, self.parallel, self.python = chunk_size, parallel, python
        self.slurm_conn_id, self.max_array_parallel = slurm_conn_id, max_array_parallel
        self.poll_interval, self.trial_kwargs = poll_interval, trial_kwargs
        self.trials_per_process = trials_per_process

    def build(self, round_no: int | None = None):
        session, python = self.session, self.python
        batched, backend, chunk_size = self.batched, self.backend, self.chunk_size
        max_array_parallel = self.max_array_parallel

        @task(task_id="plan")
        def plan() -> list:
            from airflow.sdk import get_current_context

            try:
                manifest = session.prepare(round_no, chunk_size if batched else None,
                                           run=get_current_context()["run_id"])
            except GpuschedError as exc:
                raise AirflowFailException(f"sweep {session.spec.name}: {exc}") from exc
            skipped = len(manifest.data["skipped"])
            _publish_plan(session, manifest, round_no, backend, batched, get_current_context())
            print(f"sweep {session.spec.name}{'' if round_no is None else f' round {round_no}'}: "
                  f"{len(manifest.trials)} trials, {len(manifest.pending)} to run, {skipped} already succeeded "
                  f"(skipped{'' if not session.spec.force_rerun else '; force_rerun'}); manifest {manifest.path}")
            if not batched:
                return [trial_argv(manifest, t, python) for t in manifest.pending]
            chunks = manifest.chunk_count()
            if backend == "local":
                return list(range(chunks))
            items = []
            for k in range(chunks):
                n = len(manifest.chunk(k))
                limit = f"%{max_array_parallel}" if max_array_parallel else ""
                items.append({"command": runner_argv(manifest, "--chunk", str(k), python=python),
                              "array": f"0-{n - 1}{limit}"})
            return items

        planned = plan()
        if not batched:
            run = self._trial_operator("trial", "{{ task.command[-1] }}").expand(command=planned)
        elif backend == "local":
            run = self._local_runner(round_no).expand(chunk=planned)
        else:
            run = self._trial_operator("trial_array", "chunk {{ task.command[-1] }}").expand_kwargs(planned)
        return planned, run

    def _class_kwargs(self, **kwargs):
        """The job class's pool and weight for the batch-runner task (the operators' ``partial`` applies
        them to mapped trials by itself)."""
        from airflow_provider_gpusched.operators.job_class import apply_job_class

        r = self.spec.resources
        apply_job_class(kwargs, r.job_class, r.priority, r.gpus)
        return kwargs

    def _trial_operator(self, task_id: str, label_template: str):
        r = self.spec.resources
        common = dict(task_id=task_id, map_index_template=label_template, sweep_name=self.spec.name,
                      **self.trial_kwargs)
        if self.backend == "local":
            from airflow_provider_gpusched.task_groups.trial_operators import SweepTrialGPUOperator

            return SweepTrialGPUOperator.partial(gpus=max(1, r.gpus), gpu_memory=r.gpu_memory, job_class=r.job_class,
                                            priority=r.priority, env=r.env or None,
                                            poll_interval=self.poll_interval, **common)
        from airflow_provider_gpusched.task_groups.trial_operators import SweepTrialSlurmOperator

        return SweepTrialSlurmOperator.partial(gpus=r.gpus or None, cpus_per_task=r.cpus, mem=r.mem, partition=r.partition,
                                        qos=r.qos, time_limit=r.time_limit, setup=r.setup or None,
                                        job_class=r.job_class, priority=r.priority, environment=r.env or None,
                                        slurm_conn_id=self.slurm_conn_id, poll_interval=self.poll_interval,
                                        job_name=f"sweep.{self.spec.name}", **common)

    def _local_runner(self, round_no: int | None):
        session, spec, parallel, per_process = self.session, self.spec, self.parallel, self.trials_per_process

        @task(**self._class_kwargs(task_id="run_batch", map_index_template="chunk {{ chunk }}", **self.trial_kwargs))
        def run_batch(chunk: int) -> dict:
            from airflow.sdk import get_current_context

            from airflow_provider_gpusched.core.gpu.placement import GPURequest
            from airflow_provider_gpusched.core.sweep.session import manifest_name
            from airflow_provider_gpusched.hooks.local_gpu import LocalGPUHook

            context = get_current_context()
            context["chunk"] = chunk
            manifest = Manifest(session.store.path(manifest_name(round_no, context["run_id"])))
            trials = manifest.chunk(chunk)
            r = spec.resources
            request = GPURequest(gpus=max(1, r.gpus), gpu_memory=r.gpu_memory)
            manager = LocalGPUHook().get_conn()
            ti = context["ti"]
            print(f"chunk {chunk}: {len(trials)} trials on {manager.inventory.source} GPUs")
            outcome = run_local_batch(manifest, trials, manager, request, parallel=parallel,
                                      trials_per_process=per_process,
                                      owner=f"{ti.dag_id}.{ti.task_id}[{chunk}] ({ti.run_id})",
                                      job_class=r.job_class, priority=r.priority, on_event=print)
            ti.xcom_push(key=OUTCOMES_XCOM, value=outcome_records(session.store, trials))
            counts = {k: len(v) for k, v in outcome.items()}
            print(f"chunk {chunk}: {counts['succeeded']} succeeded, {counts['failed']} failed")
            if counts["failed"] and not counts["succeeded"]:
                raise AirflowException(f"chunk {chunk}: every trial failed (see {session.store.dir}/logs)")
            return counts

        return run_batch
