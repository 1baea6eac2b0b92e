"""The Sweeps tab: every sweep of a DAG run (plans, outcomes, states, curves), a trial's output, parameter
importance and two runs compared; behind read access to the DAG."""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from typing import Any, cast

from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
from airflow.api_fastapi.common.db.common import SessionDep
from airflow.api_fastapi.core_api.security import requires_access_dag
from airflow.models import DagRun, TaskInstance  # the api-server's ORM models: no Task SDK equivalent exists
from airflow.models.xcom import XComModel
from fastapi import APIRouter, Depends, HTTPException, Query
from sqlalchemy import and_, select
from typing_extensions import NotRequired, TypedDict

from airflow_provider_gpusched import settings
from airflow_provider_gpusched.core.errors import GpuschedError
from airflow_provider_gpusched.core.records import open_view
from airflow_provider_gpusched.core.safe_files import BadRecordError, read_tail
from airflow_provider_gpusched.core.sweep.definition.search_kind import SearchKind, search_kind
from airflow_provider_gpusched.core.sweep.records.reports import RAN_AGAIN, reports_of_run
from airflow_provider_gpusched.core.sweep.records.store import OUTPUT_LOG_FILE, folder_refusal
from airflow_provider_gpusched.core.sweep.results.analysis import compare_runs, param_importance
from airflow_provider_gpusched.core.sweep.results.view import (
    OUTCOMES_XCOM,
    PLAN_XCOM,
    SweepView,
    add_outcomes,
    build_sweep_view,
    param_axes,
    read_outcome_records,
    read_plan_record,
    report_paths,
    report_runs,
    scored_points,
    sweep_objective,
    trial_counts,
    trial_rows,
)
from airflow_provider_gpusched.plugins.api.xcoms import xcom_records

router = APIRouter(tags=["Sweeps"])
READ_DAG = [Depends(requires_access_dag("GET", DagAccessEntity.XCOM))]


def _sweep_records(dag_id: str, run_id: str, session, problems: list[str], group: str | None = None):
    """What the sweeps of one DAG run published: ``(plans, outcomes, states)``, plans by sweep group (rounds in
    order), outcomes by trial id, and the Airflow state of each trial task instance; records that cannot be
    read go to ``problems``. ``group``: that sweep only."""
    plans: dict[str, list[dict[str, Any]]] = {}
    for value, _d, _r, task_id, _m, _s, _e, _h in xcom_records(
        session, PLAN_XCOM, dag_id=dag_id, run_id=run_id, problems=problems
    ):
        name = task_id.rsplit(".plan", 1)[0].split(".round_")[0]
        if group is not None and name != group:
            continue
        try:
            plan = read_plan_record(value, f"XCom {PLAN_XCOM} of {task_id}")
        except BadRecordError as exc:
            problems.append(str(exc))
            continue
        plans.setdefault(name, []).append(plan)
    for group_plans in plans.values():
        group_plans.sort(key=lambda p: -1 if p.get("round") is None else p["round"])
    trial_tasks = {p["trial_task"] for group_plans in plans.values() for p in group_plans}
    outcomes: dict[str, dict[str, Any]] = {}
    for value, _d, _r, task_id, map_index, _s, _e, _h in xcom_records(
        session, OUTCOMES_XCOM, dag_id=dag_id, run_id=run_id, problems=problems
    ):
        if group is not None and task_id not in trial_tasks:
            continue
        try:
            add_outcomes(
                outcomes,
                read_outcome_records(value, f"XCom {OUTCOMES_XCOM} of {task_id}[{map_index}]"),
                task_id,
                map_index,
            )
        except BadRecordError as exc:
            problems.append(str(exc))
    states = (
        {
            (t, m): (s.value if hasattr(s, "value") else s)
            for t, m, s in session.execute(
                select(TaskInstance.task_id, TaskInstance.map_index, TaskInstance.state).where(
                    TaskInstance.dag_id == dag_id, TaskInstance.run_id == run_id, TaskInstance.task_id.in_(trial_tasks)
                )
            ).all()
        }
        if trial_tasks
        else {}
    )
    return plans, outcomes, states


def _run_ended(dag_id: str, run_id: str, session) -> bool:
    """Whether the DAG run is over (success or failed: a stopped run too), so that trials which never started are
    ``not_started``, not ``waiting``."""
    state = session.scalar(select(DagRun.state).where(DagRun.dag_id == dag_id, DagRun.run_id == run_id))
    return str(getattr(state, "value", state)) in ("success", "failed")


def _one_sweep(dag_id: str, run_id: str, group: str, session, outcomes_too: bool = False):
    """``(plans, rows, objective)`` of sweep ``group`` in one DAG run (and its outcomes, with ``outcomes_too``);
    404 when that run planned no such sweep."""
    problems: list[str] = []
    plans, outcomes, states = _sweep_records(dag_id, run_id, session, problems, group=group)
    if group not in plans:
        raise HTTPException(
            404,
            f"run {run_id} of {dag_id} planned no sweep {group!r}"
            + (f" ({'; '.join(problems)[:500]})" if problems else ""),
        )
    rows = trial_rows(plans[group], outcomes, states, _run_ended(dag_id, run_id, session))
    found = plans[group], rows, sweep_objective(plans[group])
    return (*found, outcomes) if outcomes_too else found


#: importance answers kept, keyed by sweep, run and what was scored (a finished sweep's never changes); the
#: api-server answers in several threads
_importance_cache: OrderedDict[tuple[Any, ...], dict[str, Any]] = OrderedDict()
_importance_lock = threading.Lock()


@open_view
class ParamImportance(TypedDict):
    name: str
    importance: float  # its share, 0..1


@open_view
class RunBest(TypedDict):
    index: int
    label: str
    score: float
    trial_id: str


@open_view
class RunSummary(TypedDict):
    """One run in a comparison: its counts, scored trials, best trial and best-so-far line."""

    run: str
    counts: dict[str, int]
    scored: int
    best: RunBest | None
    best_so_far: list[list[float]]


@open_view
class ScorePair(TypedDict):
    """A trial scored in both runs."""

    trial_id: str
    index: int
    label: str
    a: float
    b: float
    diff: float


@open_view
class ImportanceView(TypedDict):
    """Parameter importance over the scored trials of one sweep (core/sweep/analysis.param_importance)."""

    method: str  # "optuna-ped-anova", "variance-explained" or "none"
    importances: list[ParamImportance]
    trials: int
    note: str
    metric: NotRequired[str]
    method_label: NotRequired[str]
    seconds: NotRequired[float]


@open_view
class ComparisonView(TypedDict):
    """Two runs of one sweep side by side (core/sweep/analysis.compare_runs)."""

    group: str
    metric: str
    maximize: bool
    a: RunSummary
    b: RunSummary
    both: int  # trials scored in both runs
    only_a: int
    only_b: int
    changed: int
    better_in_b: int
    worse_in_b: int
    pairs: list[ScorePair]  # the most changed first
    pairs_total: int


@open_view
class TrialView(TypedDict):
    """One trial of a sweep and the tail of its output."""

    index: int
    trial_id: str
    label: str
    params: dict[str, Any]
    state: str
    result: Any
    error: str | None
    seconds: float | None
    task_id: str | None
    map_index: int | None
    skipped: bool
    step: int | None
    round: int | None
    log_tail: str | None
    log_path: str | None
    log_note: str


@open_view
class SweepsView(TypedDict):
    """Every sweep of one DAG run (the Sweeps tab)."""

    dag_id: str
    run_id: str | None
    runs: list[str]  # the DAG run ids that have sweeps, newest first
    sweeps: list[SweepView]
    problems: list[str]


def sweep_importance(dag_id: str, run_id: str, group: str, session) -> ImportanceView:
    """Parameter importance over every scored trial of one sweep in one run (core/sweep/results/analysis.py)."""
    plans, rows, objective = _one_sweep(dag_id, run_id, group, session)
    if objective is None:
        return {"method": "none", "note": "the sweep has no objective", "importances": [], "trials": 0}
    points, values, categories = scored_points(rows, objective)
    key = (dag_id, run_id, group, len(points), round(sum(p["score"] for p in points), 9))
    with _importance_lock:
        if key in _importance_cache:
            _importance_cache.move_to_end(key)
            return cast(ImportanceView, _importance_cache[key])
    t0 = time.monotonic()
    found = param_importance(
        points, param_axes(plans, values, categories), objective, pruned=sum(1 for r in rows if r["state"] == "pruned")
    )
    found["seconds"] = round(time.monotonic() - t0, 3)
    with _importance_lock:
        _importance_cache[key] = found
        while len(_importance_cache) > 64:
            _importance_cache.popitem(last=False)
    return cast(ImportanceView, found)


def sweep_comparison(dag_id: str, run_id: str, other: str, group: str, session) -> ComparisonView:
    """Two runs of one sweep side by side (core/sweep/results/analysis.py)."""
    plans_a, rows_a, objective = _one_sweep(dag_id, run_id, group, session)
    plans_b, rows_b, _objective_b = _one_sweep(dag_id, other, group, session)
    if objective is None:
        raise HTTPException(400, f"sweep {group!r} has no objective: there is no score to compare")
    return cast(
        ComparisonView,
        {
            "group": group,
            **compare_runs(
                {
                    "run": run_id,
                    "points": scored_points(rows_a, objective)[0],
                    "counts": trial_counts(plans_a, rows_a, _run_ended(dag_id, run_id, session)),
                },
                {
                    "run": other,
                    "points": scored_points(rows_b, objective)[0],
                    "counts": trial_counts(plans_b, rows_b, _run_ended(dag_id, other, session)),
                },
                objective,
            ),
        },
    )


#: lines of a trial's output the Sweeps tab shows
TRIAL_LOG_LINES = 200


def sweep_trial(dag_id: str, run_id: str, group: str, trial_id: str, session) -> TrialView:
    """One trial of a sweep: its row (parameters, state, result, error, task instance) and the tail of its output
    (``output.log`` in its folder, read only under ``[gpusched] sweep_results_root``)."""
    plans, rows, _objective, outcomes = _one_sweep(dag_id, run_id, group, session, outcomes_too=True)
    row = next((r for r in rows if r["trial_id"] == trial_id), None)
    if row is None:
        raise HTTPException(404, f"sweep {group!r} of run {run_id} lists no trial {trial_id!r}")
    out: dict[str, Any] = {
        k: row[k]
        for k in (  # TrialView's keys
            "index",
            "trial_id",
            "label",
            "params",
            "state",
            "result",
            "error",
            "seconds",
            "task_id",
            "map_index",
            "skipped",
            "step",
            "round",
        )
    }
    out.update(log_tail=None, log_path=None, log_note="")
    reports = report_paths(plans, outcomes).get(trial_id)
    if reports is None:
        out["log_note"] = "this sweep's plan names no results folder"
        return cast(TrialView, out)
    root = settings.sweep_results_root()
    path = os.path.join(os.path.dirname(reports), OUTPUT_LOG_FILE)
    out["log_path"] = path
    refusal = _folder_refusal(os.path.dirname(os.path.dirname(os.path.dirname(reports))), dag_id, root)
    if refusal:
        out["log_note"] = refusal
        return cast(TrialView, out)
    out["log_tail"] = read_tail(path, root, TRIAL_LOG_LINES)
    if out["log_tail"] is None:
        out["log_note"] = (
            "no output yet" if row["state"] in ("waiting", "running") else "its output file is not readable"
        )
    elif row["skipped"]:
        out["log_note"] = "from the earlier DAG run that ran it"
    return cast(TrialView, out)


def _kind_of(name: object) -> SearchKind[Any] | None:
    """The search type a published plan names, or None where it is not installed here (its sweeps are drawn without
    their kind's own views)."""
    try:
        return search_kind(name, "plan search")
    except GpuschedError:
        return None


def _folder_refusal(folder: str, dag_id: str, root: str) -> str:
    """Why the files of sweep folder ``folder`` are not shown under DAG ``dag_id`` ("" when they are): only a folder
    under ``[gpusched] sweep_results_root`` whose ``dags.json`` lists that DAG (core/sweep/records/store.py)."""
    return folder_refusal(
        folder,
        dag_id,
        root,
        outside="files are read from [gpusched] sweep_results_root ({root}) only; this sweep keeps them elsewhere",
        unlisted=(
            "the sweep folder this plan names does not list DAG {dag_id} among the DAGs that planned in it "
            "(its dags.json): its files are not shown here"
        ),
    )


def sweeps(dag_id: str, run_id: str | None, session) -> SweepsView:
    """Every sweep of one run of the DAG (default: its latest run that planned a sweep), and the runs to pick."""
    latest = (
        select(XComModel.run_id, DagRun.run_after)
        .join(DagRun, and_(DagRun.dag_id == XComModel.dag_id, DagRun.run_id == XComModel.run_id))
        .where(XComModel.dag_id == dag_id, XComModel.key == PLAN_XCOM)
        .distinct()
        .order_by(DagRun.run_after.desc())
        .limit(50)
    )
    runs = [r for r, _after in session.execute(latest).all()]
    if run_id is None:
        run_id = runs[0] if runs else None
    if run_id is None:
        return {"dag_id": dag_id, "run_id": None, "runs": [], "sweeps": [], "problems": []}
    problems: list[str] = []
    plans, outcomes, states = _sweep_records(dag_id, run_id, session, problems)
    ended = _run_ended(dag_id, run_id, session)
    views = []
    root = settings.sweep_results_root()
    for group, group_plans in sorted(plans.items()):
        # this sweep's outcomes: those its trial tasks published (an asynchronous sweep's trials are in no plan:
        # the outcomes its workers publish name them, and another sweep's workers' must not land here)
        tasks = {p["trial_task"] for p in group_plans}
        ours = {trial_id: o for trial_id, o in outcomes.items() if o["task_id"] in tasks}
        paths, curve_runs = report_paths(group_plans, ours), report_runs(group_plans, run_id, ours)
        folder = next((p["folder"] for p in group_plans if p.get("folder")), None)
        refusal = _folder_refusal(folder, dag_id, root) if folder else ""
        if refusal:
            paths = {}
        replaced: list[str] = []

        def read(trial_id: str, paths=paths, curve_runs=curve_runs, replaced=replaced) -> list[dict[str, Any]] | None:
            # only under [gpusched] sweep_results_root: a published record cannot make us read elsewhere; and
            # only this run's curve (or, for a trial it skipped, the curve of the run that did it): a trial that a
            # later run ran again keeps this run's aside, or has none
            if trial_id not in paths:
                return None
            found, why = reports_of_run(paths[trial_id], curve_runs[trial_id], root)
            if found is None and why.startswith(RAN_AGAIN):
                replaced.append(trial_id)
            return found

        lineage, why_not = None, ""
        kind = _kind_of(group_plans[0]["search"])
        if kind is not None and kind.draws_population:
            if folder and not refusal:  # (a refused folder: reports_note says why nothing of it is shown)
                lineage, why_not = kind.read_population(folder, root)
            elif not folder:
                why_not = "the plan names no sweep folder: the population is not drawn"
        view = build_sweep_view(group_plans, ours, states, reports=read, lineage=lineage, run_ended=ended)
        if why_not:
            view["population_note"] = why_not
        if replaced:
            view["reports_note"] = (
                f"{len(replaced)} trial(s) ran again in a later DAG run; their curves of this "
                f"run are not kept, so they are not drawn"
            )
        if refusal:
            view["reports_note"] = refusal
        view["group"] = group
        views.append(view)
    return {"dag_id": dag_id, "run_id": run_id, "runs": runs, "sweeps": views, "problems": problems}


@router.get("/api/dags/{dag_id}/sweeps/importance", summary="Parameter importance of one sweep", dependencies=READ_DAG)
def get_sweep_importance(
    dag_id: str,
    session: SessionDep,
    run_id: str = Query(..., max_length=250),
    group: str = Query(..., max_length=250),
) -> ImportanceView:
    return sweep_importance(dag_id, run_id, group, session)


@router.get("/api/dags/{dag_id}/sweeps/compare", summary="Two runs of one sweep side by side", dependencies=READ_DAG)
def get_sweep_comparison(
    dag_id: str,
    session: SessionDep,
    run_id: str = Query(..., max_length=250),
    other: str = Query(..., max_length=250),
    group: str = Query(..., max_length=250),
) -> ComparisonView:
    return sweep_comparison(dag_id, run_id, other, group, session)


@router.get("/api/dags/{dag_id}/sweeps/trial", summary="One trial and its output's tail", dependencies=READ_DAG)
def get_sweep_trial(
    dag_id: str,
    session: SessionDep,
    run_id: str = Query(..., max_length=250),
    group: str = Query(..., max_length=250),
    trial_id: str = Query(..., max_length=250),
) -> TrialView:
    return sweep_trial(dag_id, run_id, group, trial_id, session)


@router.get("/api/dags/{dag_id}/sweeps", summary="Every sweep of one DAG run", dependencies=READ_DAG)
def get_sweeps(dag_id: str, session: SessionDep, run_id: str | None = Query(None, max_length=250)) -> SweepsView:
    return sweeps(dag_id, run_id, session)
