"""``sweep_task_group``: a sweep spec (Python or YAML) as an Airflow task group.

One-shot sweeps (grid, random)::

    plan ──> trial (mapped, one task per trial, label "method=GAN,num_zmode=1")  ──> collect ──> leaderboard
    plan ──> run_batch (mapped over chunks: many trials each)                     ──> collect ──> leaderboard

Searches in rounds (optuna, evolution)::

    round_0.plan ──> round_0.trial[...] ──> round_0.tell ──> round_1.plan ──> ... ──> collect ──> leaderboard

Trials run on local GPUs (:class:`LocalGPUOperator`, one lease each) or on Slurm (:class:`SlurmJobOperator`,
deferrable; in batched mode one job array per chunk). Every trial executes the core trial runner, which
records its state and result in the results folder, so a re-run skips what already succeeded or was pruned.
``leaderboard`` returns the best trial (XCom), writes ``best.json`` and updates an Airflow Asset.
"""

from __future__ import annotations

import importlib
import os
import threading
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any, Protocol

from airflow.sdk import Asset, TaskGroup, task
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from airflow_provider_gpusched import settings, tracking
from airflow_provider_gpusched.core.backends import get_backend
from airflow_provider_gpusched.core.errors import GpuschedError, InvalidArgumentError
from airflow_provider_gpusched.core.sweep.definition.sweep_spec import SweepSpec
from airflow_provider_gpusched.core.sweep.results.view import PLAN_XCOM, plan_record
from airflow_provider_gpusched.core.sweep.running.session import SweepSession
from airflow_provider_gpusched.core.sweep.running.terminal import script_directory
from airflow_provider_gpusched.core.sweep.running.trial_run import Manifest, trial_argv, trial_set
from airflow_provider_gpusched.task_groups.execution import SweepExecution
from airflow_provider_gpusched.task_groups.stage_view import StageView

#: the sweep's bookkeeping tasks (plan, tell, collect, leaderboard, check_trials) retry what fails around them (the
#: execution API timing out on a loaded machine, a worker lost before the task began: issue 76); what they find
#: wrong with the sweep itself fails at once (AirflowFailException: no retry)
BOOKKEEPING_RETRIES = 3
BOOKKEEPING: dict[str, Any] = {"retries": BOOKKEEPING_RETRIES, "retry_delay": timedelta(seconds=20)}


def load_spec(spec: SweepSpec | Mapping[str, Any] | str) -> SweepSpec:
    try:
        if isinstance(spec, SweepSpec):
            return spec
        if isinstance(spec, (str, os.PathLike)):
            return SweepSpec.from_yaml(os.fspath(spec))
        return SweepSpec.from_dict(spec)
    except InvalidArgumentError as exc:
        raise AirflowException(f"sweep spec: {exc}") from exc


def sweep_task_group(
    spec: SweepSpec | Mapping[str, Any] | str,
    *,
    execution: SweepExecution | None = None,
    group_id: str | None = None,
    results_root: str | None = None,
    publish_asset: bool = True,
    notify: Sequence[Any] | None = None,
    notify_rounds: bool = False,
    **options: Any,
) -> TaskGroup:
    """Build the task group of ``spec`` (a :class:`~airflow_provider_gpusched.core.sweep.definition.sweep_spec.SweepSpec`, its dict, or a YAML path) in the DAG being defined.

    :param execution: how the trials run (:class:`~airflow_provider_gpusched.task_groups.execution.SweepExecution`:
        backend, batching, chunking, the trial operator's arguments); or give its fields as keyword
        ``options`` (``backend="slurm"``, ``poll_interval=1``...).
    :param group_id: the task group's id (default: the sweep's name).
    :param results_root: where the sweep folder goes (default: the spec's, else ``[gpusched] sweep_results_root``).
    :param publish_asset: update an Airflow Asset (the sweep's ``best.json``) when the leaderboard is written.
    :param notify: notifiers told when the sweep ends (``check_trials`` succeeded or failed, or ``collect``
        failed): ``EmailNotifier`` / ``WebhookNotifier`` (airflow_provider_gpusched.notifications) send the
        sweep's end report; any other Airflow ``BaseNotifier`` gets the task's context as usual.
    :param notify_rounds: searches in rounds (optuna, evolution): the ``notify`` notifiers also report at the end
        of every round (the counts and leaderboard so far; ``collect`` then runs after each round's ``tell``).
    """
    spec = load_spec(spec)
    try:
        execution = SweepExecution.from_options(execution, options)
    except AirflowException as exc:
        raise AirflowException(f"sweep {spec.name}: {exc}") from exc
    root = results_root or spec.results_root or settings.sweep_results_root()
    session = SweepSession(spec, root)
    size = spec.stage_size()
    # an asynchronous search runs as worker tasks, each asking for its next trial as its slot frees
    batched = execution.batched(size) or spec.asks_as_it_goes
    stage = SweepStage(session, execution, batched, execution.chunk_size_for(size))
    # named by its URI: the same sweep name under another results root is another asset
    asset = (
        Asset(uri=f"file://{os.path.join(session.store.dir, 'best.json')}")
        if publish_asset and spec.objective is not None
        else None
    )
    notifiers = _bind_notifiers(notify, session)
    if notify_rounds and not spec.in_rounds:
        raise AirflowException(
            f"sweep {spec.name}: notify_rounds=True, but search {spec.search!r} does not run "
            f"in rounds (optuna and evolution do)"
        )

    with TaskGroup(group_id=group_id or spec.name, tooltip=f"{spec.search} sweep {spec.name}") as group:
        # a relative path in the command: found next to the DAG file (unless the spec says base_dir)
        spec.anchor(os.path.dirname(os.path.abspath(group.dag.fileloc)) if group.dag else script_directory())
        last = _rounds(stage, notify if notify_rounds else None) if spec.in_rounds else stage.build()[1]
        summary = _collect(session, notifiers)
        last >> summary
        _leaderboard(spec, asset)(summary)
        _check_trials(spec, notifiers)(summary)
    return group


def _bind_notifiers(notify: Sequence[Any] | None, session: SweepSession, round_no: int | None = None) -> list[Any]:
    """Each notifier, bound to this sweep's folder (and round) where it is one of ours."""
    from airflow.sdk import BaseNotifier

    from airflow_provider_gpusched.notifications import GpuschedNotifier

    if notify is None:
        return []
    if isinstance(notify, BaseNotifier) or callable(notify):
        notify = [notify]
    out = []
    for i, n in enumerate(notify):
        if isinstance(n, GpuschedNotifier):
            r = session.spec.resources
            out.append(
                n.for_sweep(
                    session.store.dir,
                    job_class=r.job_class,
                    gpus_per_trial=max(1, r.gpus),
                    round_no=round_no,
                    rounds=session.spec.rounds if round_no is not None else None,
                )
            )
        elif isinstance(n, BaseNotifier) or callable(n):
            out.append(n)
        else:
            raise AirflowException(
                f"sweep {session.spec.name}: notify[{i}]: expected a notifier (EmailNotifier, "
                f"WebhookNotifier or another BaseNotifier), got {type(n).__name__}"
            )
    return out


def _rounds(stage: SweepStage, notify: Sequence[Any] | None = None):
    """``round_0`` ... ``round_<n-1>``: plan, trials, tell; each round after the previous one's tell. With
    ``notify``, each tell also writes the summary so far and tells the notifiers (bound to its round)."""
    session, spec = stage.session, stage.spec
    previous = None
    for r in range(spec.rounds or 0):  # a round search's kind set it
        with TaskGroup(group_id=f"round_{r}", tooltip=f"round {r + 1} of {spec.rounds}"):
            plan, run = stage.build(round_no=r)
            told_to = _bind_notifiers(notify, session, round_no=r) if notify is not None else []

            @task(task_id="tell", trigger_rule="all_done", on_success_callback=told_to or None, **BOOKKEEPING)
            def tell(round_no: int = r, report: bool = bool(told_to)) -> dict[str, Any]:
                from airflow.sdk import get_current_context

                run_id = get_current_context()["run_id"]
                try:
                    session.settle(round_no, run_id, print)
                    outcome = session.finish_round(round_no, run_id)
                except GpuschedError as exc:  # the sweep's own error: no retry mends it
                    raise AirflowFailException(f"sweep {session.spec.name} round {round_no}: {exc}") from exc
                tracking.send_session(session, get_current_context())
                print(
                    f"round {round_no}: {outcome['scored']}/{outcome['trials']} trials scored, "
                    f"round best {outcome['round_best']}"
                )
                if report:  # the round's report reads the summary: bring it up to this round
                    session.collect(run_id)
                return outcome

            told = tell()
            run >> told
        if previous is not None:
            previous >> plan
        previous = told
    return previous


def _collect(session: SweepSession, notifiers: Sequence[Any] = ()):
    spec = session.spec

    @task(task_id="collect", trigger_rule="all_done", on_failure_callback=list(notifiers) or None, **BOOKKEEPING)
    def collect() -> dict[str, Any]:
        from airflow.sdk import get_current_context

        context = get_current_context()
        run_id = context["run_id"]
        if not session.manifests(run_id):  # its plan wrote nothing: say why, and no retry can mend it
            raise AirflowFailException(
                f"sweep {spec.name}: nothing was planned for run {run_id} in {session.store.dir}: "
                f"{_plan_outcome(context)}"
            )
        try:
            if not spec.in_rounds:
                session.settle(None, run_id, print)
            summary = session.collect(run_id)
        except GpuschedError as exc:  # the sweep's own error: no retry mends it
            raise AirflowFailException(f"sweep {spec.name}: {exc}") from exc
        print(summary.pop("text"))
        # the sweep run's last sync: every trial not sent yet, then its end (tracking.py; never fails the task)
        tracking.send_session(session, get_current_context(), summary)
        return summary

    return collect()


def _plan_outcome(context: Any) -> str:
    """Why a sweep run has no manifest: how its (first) plan task ended, from Airflow's record of it."""
    ti = context["ti"]
    prefix = ti.task_id.rsplit(".", 1)[0] + "." if "." in ti.task_id else ""
    plans = [f"{prefix}plan", f"{prefix}round_0.plan"]
    try:
        states = ti.get_task_states(dag_id=ti.dag_id, task_ids=plans, run_ids=[ti.run_id]).get(ti.run_id, {})
    except Exception:  # noqa: BLE001 - the message only: the task fails either way
        states = {}
    for plan in plans:
        if plan in states:
            state = states[plan]
            if state in (None, "upstream_failed", "skipped", "removed", "none"):
                return f"its plan task {plan} never ran ({state or 'no state'}); clear it to plan the sweep"
            return (
                f"its plan task {plan} ended {state} before it wrote the plan (its log says why; a failure of "
                f"Airflow itself is retried {BOOKKEEPING_RETRIES} times); clear it to plan again"
            )
    return "its plan task did not write the plan (see the plan task's log); clear it to plan again"


def _check_trials(spec: SweepSpec, notifiers: Sequence[Any] = ()):
    @task(
        task_id="check_trials",
        on_success_callback=list(notifiers) or None,
        on_failure_callback=list(notifiers) or None,
        **BOOKKEEPING,
    )
    def check_trials(summary: dict[str, Any]) -> dict:
        """The run is green only when it ran every trial of its plan (none stopped or not started) and at most
        ``max_failed_trials`` of them failed, were invalid or timed out."""
        from airflow_provider_gpusched.core.sweep.records.store import FAILED_STATES

        counts = summary["counts"]
        bad = sum(counts.get(state, 0) for state in FAILED_STATES)
        allowed = spec.max_failed_trials
        unfinished = {k: counts.get(k, 0) for k in ("stopped", "not_started") if counts.get(k, 0)}
        if unfinished:  # stopped (gpusched queue stop), or its tasks ended first: not a finished run
            raise AirflowFailException(
                f"sweep {spec.name}: this run did not finish its trials: "
                + ", ".join(f"{n} {k.replace('_', ' ')}" for k, n in unfinished.items())
                + " (the earlier results they had stand; the next run runs them)"
            )
        if allowed is not None and bad > allowed:
            lines = [
                f"  {p['index']} {p['label'] or p['trial_id']} [{p['state']}]: {p['error']}"
                for p in summary.get("problems", [])[:20]
            ]
            raise AirflowFailException(
                f"sweep {spec.name}: {bad} of {counts['defined']} trials failed or gave an invalid result "
                f"(max_failed_trials={allowed}):\n" + "\n".join(lines)
            )
        pruned = f", {counts['pruned']} pruned (stopped early)" if counts.get("pruned") else ""
        print(
            f"sweep {spec.name}: {counts.get('succeeded', 0)} succeeded{pruned}, {bad} failed or invalid "
            f"(allowed: {'any' if allowed is None else allowed})"
        )
        return counts

    return check_trials


def _leaderboard(spec: SweepSpec, asset: Asset | None):
    @task(task_id="leaderboard", outlets=[asset] if asset else [], **BOOKKEEPING)
    def leaderboard(summary: dict[str, Any]) -> dict | None:
        if spec.objective is None:
            print(f"no objective: {summary['counts']['succeeded']} trials succeeded; results in {summary['folder']}")
            return None
        best = summary.get("best")
        if best is None:
            raise AirflowFailException(
                f"sweep {spec.name}: no trial succeeded with "
                f"{' and '.join(map(repr, spec.objective.metrics))} in its result "
                f"(see {summary['folder']}/summary.json)"
            )
        print(
            f"best {spec.objective.score_label} = {best['score']:.6g}: {best['label']} "
            f"(trial {best['trial_id']}; {os.path.join(summary['folder'], 'best.json')})"
        )
        if summary.get("pareto_front") is not None:
            print(f"Pareto front ({spec.objective.describe()}): {len(summary['pareto_front'])} trial(s):")
            for row in summary["pareto_front"][:20]:
                print("  " + ", ".join(f"{m} {v:.6g}" for m, v in row["values"].items()) + f": {row['label']}")
        return best

    return leaderboard


def _force_rerun_from_conf(context) -> bool | None:
    """``force_rerun`` from the DAG run's conf (trigger with ``{"force_rerun": true}`` to redo done trials), or
    None to keep the spec's."""
    conf = getattr(context.get("dag_run"), "conf", None) or {}
    if "force_rerun" not in conf:
        return None
    if not isinstance(conf["force_rerun"], bool):
        raise AirflowFailException(f"DAG run conf: force_rerun: expected true or false, got {conf['force_rerun']!r}")
    return conf["force_rerun"]


def _publish_plan(
    session: SweepSession, manifest: Manifest, round_no: int | None, backend: str, batched: bool, context
) -> None:
    """The stage's plan for the UI's sweep view (XCom ``gpusched_sweep_plan``)."""
    ti = context["ti"]
    group = ti.task_id.rsplit(".", 1)[0]
    trial_task = f"{group}.{get_backend(backend).chunk_task if batched else 'trial'}"
    skipped_ids = set(manifest.record.skipped)
    spec = session.spec
    ti.xcom_push(
        key=PLAN_XCOM,
        value=plan_record(
            spec.name,
            spec.search,
            round_no,
            spec.objective,
            backend,
            trial_task,
            manifest.record.chunk_size if batched else None,
            manifest.trials,
            # an asynchronous search's trials run in whichever worker asks first: their rows come from the workers'
            # outcomes, not from a position in the plan
            manifest.pending if not spec.asks_as_it_goes else [],
            session.store,
            [t for t in manifest.trials if t.trial_id in skipped_ids],
            context["run_id"],
            spec.report_metric,
            spec.log_scaled_params,
        ),
    )


class StageAdapter(Protocol):
    """What a sweep stage asks of its backend's Airflow side (backends/__init__.py's ``AirflowBackend``, built on
    this module): a stage hands its adapter a :class:`~airflow_provider_gpusched.task_groups.stage_view.StageView`
    (never itself) and the manifest, and gets operators and tasks back."""

    batches: bool
    runs_workers: bool

    def trial_operator(self, view: StageView, arguments: dict[str, Any]) -> Any: ...

    def plan_chunks(self, manifest: Manifest, python: str, max_parallel: int | None) -> list[Any]: ...

    def chunk_parallel(self, options: Any, max_workers: int | None) -> int | None: ...

    def plan_workers(self, manifest: Manifest, python: str, workers: int) -> list[Any]: ...

    def run_chunks(self, view: StageView, round_no: int | None, planned: Any) -> Any: ...


_adapters: dict[str, Any] = {}
_adapters_lock = threading.RLock()  # loading one may import a module that asks for another


def stage_adapter(name: str) -> Any:
    """The Airflow side of the backend called ``name`` (its ``Backend.airflow``, ``module:Class``), made once per
    process; :func:`airflow_provider_gpusched.backends.airflow_backend` answers the same object."""
    backend = get_backend(name)
    key = f"{name}={backend.airflow}"
    with _adapters_lock:
        if key not in _adapters:
            module, _, attr = backend.airflow.partition(":")
            try:
                cls = getattr(importlib.import_module(module), attr)
            except (ImportError, AttributeError, ValueError) as exc:
                raise GpuschedError(
                    f"backend {name!r}: cannot load its Airflow side {backend.airflow!r} ({exc})"
                ) from exc
            _adapters[key] = cls()
        return _adapters[key]


class SweepStage:
    """plan -> run trials, in mapped or batched form, on one backend."""

    def __init__(self, session: SweepSession, execution: SweepExecution, batched: bool, chunk_size: int) -> None:
        self.spec, self.session, self.execution = session.spec, session, execution
        self.backend, self.batched, self.chunk_size = execution.backend, batched, chunk_size
        self.adapter: StageAdapter = stage_adapter(self.backend)
        if session.spec.asks_as_it_goes and not self.adapter.runs_workers:
            raise AirflowException(
                f"sweep {self.spec.name}: asynchronous: true runs as workers on the local backend (and a fleet of "
                f"GPU hosts) and on Slurm; the {self.backend} backend runs no workers: leave out asynchronous, or "
                f"run it with backend='local'"
            )
        if batched and not self.adapter.batches:
            raise AirflowException(
                f"sweep {self.spec.name}: the {self.backend} backend runs no batched stages; give "
                f"batching='mapped' (this stage has {self.spec.stage_size()} trials)"
            )
        try:
            self.spec.resources.check_backend(self.backend, self.spec.name)
        except GpuschedError as exc:
            raise AirflowException(str(exc)) from None
        self.view = StageView(
            backend=self.backend,
            sweep=self.spec.name,
            resources=self.spec.resources,
            options=execution.options,
            session=session,
            asynchronous=self.spec.asks_as_it_goes,
            max_workers=self.spec.max_workers,
            parallel=execution.parallel,
            trials_per_process=execution.trials_per_process,
            poll_interval=execution.poll_interval,
            trial_kwargs=execution.trial_kwargs,
            _execution=execution,
        )

    def build(self, round_no: int | None = None):
        session, python, adapter = self.session, self.execution.interpreter, self.adapter
        batched, backend, chunk_size = self.batched, self.backend, self.chunk_size
        max_parallel = adapter.chunk_parallel(self.execution.options, self.spec.max_workers)
        workers = self.spec.max_workers or self.execution.parallel or self.spec.per_round or 1

        @task(task_id="plan", **BOOKKEEPING)
        def plan() -> list[Any]:
            from airflow.sdk import get_current_context

            context = get_current_context()
            force_rerun = _force_rerun_from_conf(context)
            try:
                session.store.claim_for_dag(context["dag"].dag_id, session.spec.shared_with_other_dags)
                manifest = session.prepare(
                    round_no,
                    chunk_size if batched else None,
                    run=context["run_id"],
                    force_rerun=force_rerun,
                    backend=backend,
                )
            except GpuschedError as exc:
                raise AirflowFailException(f"sweep {session.spec.name}: {exc}") from exc
            skipped = len(manifest.record.skipped)
            _publish_plan(session, manifest, round_no, backend, batched, get_current_context())
            print(
                f"sweep {session.spec.name}{'' if round_no is None else f' round {round_no}'}: "
                f"{len(manifest.trials)} trials, {len(manifest.pending)} to run, {skipped} already succeeded or pruned "
                f"(skipped{'' if not manifest.record.force_rerun else '; force_rerun'}); manifest {manifest.path}"
            )
            if round_no is not None and not manifest.trials:
                print(
                    f"sweep {session.spec.name}: every candidate of the space has been evaluated; "
                    f"round {round_no} has nothing left to try (the search is complete)"
                )
            if session.spec.asks_as_it_goes:  # workers, each asking for its trials as its slot frees
                left = session.trials_left(manifest)
                if left == 0:
                    print(f"sweep {session.spec.name}: the search has no trial left to run: no worker starts")
                    return []
                return adapter.plan_workers(manifest, python, workers if left is None else min(workers, left))
            if not batched:  # each trial task gets its command and, as data, the trial it runs
                return [
                    {"command": trial_argv(manifest, t, python), "trials": trial_set(manifest, [t])}
                    for t in manifest.pending
                ]
            return adapter.plan_chunks(manifest, python, max_parallel)

        planned = plan()
        if not batched:
            run = self.trial_operator("trial", "{{ task.command[-1] }}").expand_kwargs(planned)
        else:
            run = self.adapter.run_chunks(self.view, round_no, planned)
        return planned, run

    def trial_operator(self, task_id: str, label_template: str):
        """The operator (partial) that runs one trial."""
        return self.adapter.trial_operator(self.view, self.view.trial_task(task_id, label_template))
