"""The plugin's JSON API and page bundle (mounted at ``/gpusched`` by the api-server).

Every endpoint is behind Airflow's own auth: the GPU board needs a user with the cluster-activity view; a
sweep or Slurm job needs read access to its DAG (``dag_id`` in the path, so ``requires_access_dag`` sees it).
Data comes from Airflow's database (what tasks published as XCom, and task-instance states), never from a
Slurm command built from a request: the api-server may run on another host than the workers. The only
exceptions, both optional and bounded: a Slurm job's live state through one shared, cached poll of the
api-server's own local Slurm client, and output tails read from files under ``[gpusched] slurm_output_dir``."""

from __future__ import annotations

import os
import socket
import time
from datetime import datetime, timedelta, timezone
from typing import Any

from airflow.api_fastapi.app import get_auth_manager
from airflow.api_fastapi.auth.managers.models.resource_details import AccessView, DagAccessEntity
from airflow.api_fastapi.common.db.common import SessionDep
from airflow.api_fastapi.core_api.security import GetUserDep, requires_access_dag, requires_access_view
from airflow.models import DagRun, TaskInstance  # the api-server's ORM models: no Task SDK equivalent exists
from airflow.models.xcom import XComModel
from fastapi import Depends, FastAPI, HTTPException, Query
from fastapi.staticfiles import StaticFiles
from sqlalchemy import and_, select

from airflow_provider_gpusched import settings
from airflow_provider_gpusched.core.gpu.board import (
    GPU_TIME_XCOM,
    LEASE_XCOM,
    WAIT_XCOM,
    WINDOWS,
    build_board,
    read_gpu_time_record,
    read_lease_record,
    read_wait_record,
)
from airflow_provider_gpusched.core.safe_files import BadRecordError, is_under
from airflow_provider_gpusched.core.slurm.job_view import (
    SLURM_JOB_XCOM,
    CachedStatuses,
    job_view,
    read_job_record,
    read_tail,
)
from airflow_provider_gpusched.core.sweep.reports import read_reports
from airflow_provider_gpusched.core.sweep.view import (
    OUTCOMES_XCOM,
    PLAN_XCOM,
    build_sweep_view,
    read_outcome_records,
    read_plan_record,
    report_paths,
)

STATIC_DIR = os.path.join(os.path.dirname(__file__), "static")
_WAITING_STATES = ("deferred", "running", "up_for_reschedule", "scheduled", "queued")
_live_statuses = CachedStatuses()


def _value(raw: Any) -> Any:
    return XComModel.deserialize_value(_Row(raw))


class _Row:
    def __init__(self, value: Any) -> None:
        self.value = value


def _xcoms(session, key: str, *, dag_id: str | None = None, run_id: str | None = None,
           states: tuple[str, ...] | None = None, task_id: str | None = None, map_index: int | None = None):
    """(value, dag_id, run_id, task_id, map_index, ti state, ti end) of the XComs ``key`` of matching task
    instances."""
    query = (select(XComModel.value, XComModel.dag_id, XComModel.run_id, XComModel.task_id, XComModel.map_index,
                    TaskInstance.state, TaskInstance.end_date)
             .join(TaskInstance, and_(TaskInstance.dag_id == XComModel.dag_id, TaskInstance.run_id == XComModel.run_id,
                                      TaskInstance.task_id == XComModel.task_id,
                                      TaskInstance.map_index == XComModel.map_index))
             .where(XComModel.key == key))
    if dag_id is not None:
        query = query.where(XComModel.dag_id == dag_id)
    if run_id is not None:
        query = query.where(XComModel.run_id == run_id)
    if task_id is not None:
        query = query.where(XComModel.task_id == task_id)
    if map_index is not None:
        query = query.where(XComModel.map_index == map_index)
    if states is not None:
        query = query.where(TaskInstance.state.in_(states))
    for value, *rest in session.execute(query).all():
        yield (_value(value), *rest)


def gpu_board(user, session) -> dict[str, Any]:
    """Leases of running tasks, tasks waiting for GPUs, GPU time of tasks that ended in the last day; tasks of
    DAGs the user cannot read are shown without their names."""
    readable = get_auth_manager().get_authorized_dag_ids(user=user, method="GET", session=session)

    def hide(record: Any, dag_id: str) -> None:
        if dag_id not in readable:
            for attr, hidden in (("dag_id", "(a DAG you cannot see)"), ("run_id", ""), ("task_id", "")):
                if isinstance(record, dict):
                    record[attr] = hidden
                else:
                    setattr(record, attr, hidden)

    problems: list[str] = []

    def bad(exc: Exception, dag_id: str) -> None:
        problems.append(str(exc) if dag_id in readable else "a record of a DAG you cannot see could not be read")

    leases, lease_started = [], {}
    for value, dag_id, run_id, task_id, map_index, _state, _end in _xcoms(session, LEASE_XCOM, states=("running",)):
        try:
            lease = read_lease_record(value, f"XCom {LEASE_XCOM} of {dag_id}.{task_id}[{map_index}] ({run_id})")
        except BadRecordError as exc:
            bad(exc, dag_id)
            continue
        lease_started[(dag_id, run_id, task_id, map_index)] = lease.started
        hide(lease, dag_id)
        leases.append(lease)
    waiting = []
    for value, dag_id, run_id, task_id, map_index, state, _end in _xcoms(session, WAIT_XCOM, states=_WAITING_STATES):
        try:
            record = dict(read_wait_record(value, f"XCom {WAIT_XCOM} of {dag_id}.{task_id}[{map_index}] ({run_id})"))
        except BadRecordError as exc:
            bad(exc, dag_id)
            continue
        if lease_started.get((dag_id, run_id, task_id, map_index), -1) >= record["since"]:
            continue  # it got its GPUs after waiting
        record["state"] = str(state)
        hide(record, dag_id)
        waiting.append(record)
    waiting.sort(key=lambda r: (-r["priority"], r["since"]))
    ledger = []
    since = datetime.now(timezone.utc) - timedelta(seconds=max(WINDOWS.values()))  # the board's longest window
    for value, dag_id, run_id, task_id, map_index, _state, end in _xcoms(session, GPU_TIME_XCOM):
        if end is None or end < since:
            continue
        try:
            ledger.append(read_gpu_time_record(value, f"XCom {GPU_TIME_XCOM} of {dag_id}.{task_id}", end.timestamp()))
        except BadRecordError as exc:
            bad(exc, dag_id)
    board = build_board(leases, waiting=waiting, ledger=ledger, problems=problems, now=time.time())
    board["api_server_host"] = socket.gethostname()
    return board


def sweeps(dag_id: str, run_id: str | None, session) -> dict[str, Any]:
    """Every sweep of one run of the DAG (default: its latest run that planned a sweep), and the runs to pick."""
    latest = (select(XComModel.run_id, DagRun.run_after)
              .join(DagRun, and_(DagRun.dag_id == XComModel.dag_id, DagRun.run_id == XComModel.run_id))
              .where(XComModel.dag_id == dag_id, XComModel.key == PLAN_XCOM)
              .distinct().order_by(DagRun.run_after.desc()).limit(50))
    runs = [r for r, _after in session.execute(latest).all()]
    if run_id is None:
        run_id = runs[0] if runs else None
    if run_id is None:
        return {"dag_id": dag_id, "run_id": None, "runs": [], "sweeps": [], "problems": []}
    problems: list[str] = []
    plans: dict[str, list[dict]] = {}
    for value, _d, _r, task_id, _m, _s, _e in _xcoms(session, PLAN_XCOM, dag_id=dag_id, run_id=run_id):
        try:
            plan = read_plan_record(value, f"XCom {PLAN_XCOM} of {task_id}")
        except BadRecordError as exc:
            problems.append(str(exc))
            continue
        plans.setdefault(task_id.rsplit(".plan", 1)[0].split(".round_")[0], []).append(plan)
    outcomes: dict[str, dict] = {}
    for value, _d, _r, task_id, map_index, _s, _e in _xcoms(session, OUTCOMES_XCOM, dag_id=dag_id, run_id=run_id):
        try:
            for o in read_outcome_records(value, f"XCom {OUTCOMES_XCOM} of {task_id}[{map_index}]"):
                outcomes[o["trial_id"]] = o
        except BadRecordError as exc:
            problems.append(str(exc))
    trial_tasks = {p["trial_task"] for group in plans.values() for p in group}
    states = {(t, m): (s.value if hasattr(s, "value") else s) for t, m, s in session.execute(
        select(TaskInstance.task_id, TaskInstance.map_index, TaskInstance.state)
        .where(TaskInstance.dag_id == dag_id, TaskInstance.run_id == run_id,
               TaskInstance.task_id.in_(trial_tasks))).all()} if trial_tasks else {}
    views = []
    root = settings.sweep_results_root()
    for group, group_plans in sorted(plans.items()):
        group_plans.sort(key=lambda p: -1 if p.get("round") is None else p["round"])
        paths = report_paths(group_plans)

        def read(trial_id: str, paths=paths) -> list[dict] | None:
            # only under [gpusched] sweep_results_root: a published record cannot make us read elsewhere
            return read_reports(paths[trial_id], root)[0] if trial_id in paths else None

        view = build_sweep_view(group_plans, outcomes, states, reports=read)
        if paths and not any(is_under(p, root) for p in list(paths.values())[:1]):
            view["reports_note"] = (f"reports are read from [gpusched] sweep_results_root ({root}) only; this sweep "
                                    f"keeps them elsewhere")
        view["group"] = group
        views.append(view)
    return {"dag_id": dag_id, "run_id": run_id, "runs": runs, "sweeps": views, "problems": problems}


def slurm_job(dag_id: str, run_id: str, task_id: str, map_index: int, session) -> dict[str, Any]:
    rows = list(_xcoms(session, SLURM_JOB_XCOM, dag_id=dag_id, run_id=run_id, task_id=task_id, map_index=map_index))
    if not rows:
        raise HTTPException(404, f"task {task_id} (map index {map_index}) of run {run_id} has no Slurm job recorded")
    value, *_ignored, state, _end = rows[0]
    try:
        record = read_job_record(value, f"XCom {SLURM_JOB_XCOM} of {task_id}")
    except BadRecordError as exc:
        raise HTTPException(500, str(exc)) from None
    live = None
    if not record["final"] and record["via"] == "local" and settings.ui_live_slurm():
        from airflow_provider_gpusched.core.slurm import CommandRunner, SlurmClient

        live = _live_statuses.get("local", record["job_id"], lambda: SlurmClient(CommandRunner()))
    root = settings.slurm_output_dir()
    lines = settings.output_tail_lines()
    tails = {}
    pattern = record["output_path"]
    view = job_view(record, live)
    keys = [t["task"] for t in view["tasks"] if t["task"]] or [""]
    for key in keys[:200]:
        path = pattern.replace("%a", key) if key else pattern
        text = read_tail(path, root, lines)
        if text is not None:
            tails[key] = text
    if tails:
        view["tails"] = tails
        view["tail_source"] = f"read now from {root}"
    else:
        view["tail_source"] = "recorded when the job ended" if view["tails"] else "not available yet"
    view["task_state"] = str(state.value if hasattr(state, "value") else state)
    return view


def create_app() -> FastAPI:
    app = FastAPI(title="gpusched", description="GPU board, sweeps and Slurm jobs of airflow-provider-gpusched")

    @app.get("/api/gpus", dependencies=[Depends(requires_access_view(AccessView.CLUSTER_ACTIVITY))])
    def get_gpu_board(user: GetUserDep, session: SessionDep) -> dict[str, Any]:
        return gpu_board(user, session)

    @app.get("/api/dags/{dag_id}/sweeps",
             dependencies=[Depends(requires_access_dag("GET", DagAccessEntity.XCOM))])
    def get_sweeps(dag_id: str, session: SessionDep, run_id: str | None = Query(None, max_length=250)) -> dict:
        return sweeps(dag_id, run_id, session)

    @app.get("/api/dags/{dag_id}/runs/{run_id}/tasks/{task_id}/slurm",
             dependencies=[Depends(requires_access_dag("GET", DagAccessEntity.XCOM))])
    def get_slurm_job(dag_id: str, run_id: str, task_id: str, session: SessionDep,
                      map_index: int = Query(-1, ge=-1)) -> dict:
        return slurm_job(dag_id, run_id, task_id, map_index, session)

    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    return app
