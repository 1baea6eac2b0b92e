"""The Slurm tab: a task instance's Slurm job as its task published it, its live state through one shared, cached
poll of the api-server's own local Slurm client (optional), and output tails read in the task instance's own folder
under ``[gpusched] slurm_output_dir`` (never a folder its record names), once that folder lists the DAG; behind
read access to the DAG."""

from __future__ import annotations

from typing import Any, NamedTuple, cast

from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
from airflow.api_fastapi.common.db.common import SessionDep
from airflow.api_fastapi.core_api.security import requires_access_dag
from fastapi import APIRouter, Depends, Query
from typing_extensions import TypedDict

from airflow_provider_gpusched import settings
from airflow_provider_gpusched.core.board import LEASE_XCOM
from airflow_provider_gpusched.core.records import open_view
from airflow_provider_gpusched.core.safe_files import BadRecordError, is_under, read_tail
from airflow_provider_gpusched.core.slurm.job_view import (
    SLURM_JOB_XCOM,
    CachedStatuses,
    JobView,
    SegmentView,
    folder_refusal,
    job_view,
    read_job_record,
)
from airflow_provider_gpusched.core.slurm.transport import LOCAL_TARGET
from airflow_provider_gpusched.plugins.api.xcoms import MAX_MAP_INDEX, xcom_records

router = APIRouter(tags=["Slurm"])
_live_statuses = CachedStatuses()


@open_view
class NoSlurmJob(TypedDict):
    """The answer for a task instance without a Slurm job (the tab is on every task instance)."""

    found: bool  # False
    dag_id: str
    run_id: str
    task_id: str
    map_index: int
    local_gpus: bool  # it ran on local GPUs instead (see its GPU lease)
    message: str


def slurm_job(dag_id: str, run_id: str, task_id: str, map_index: int, session) -> JobView | NoSlurmJob:
    rows = list(
        xcom_records(session, SLURM_JOB_XCOM, dag_id=dag_id, run_id=run_id, task_id=task_id, map_index=map_index)
    )
    if not rows:
        # the tab is on every task instance (Airflow has no per-operator tabs): a task without a Slurm job gets a
        # plain answer, with its local GPU lease where it had one
        lease = list(
            xcom_records(session, LEASE_XCOM, dag_id=dag_id, run_id=run_id, task_id=task_id, map_index=map_index)
        )
        message = f"task {task_id} (map index {map_index}) of run {run_id} has no Slurm job recorded"
        if lease:
            message += "; it ran on local GPUs (see its GPU lease)"
        return _no_job(dag_id, run_id, task_id, map_index, message, local_gpus=bool(lease))
    value, *_ignored, state, _end, _host = rows[0]
    try:
        record = read_job_record(value, f"XCom {SLURM_JOB_XCOM} of {task_id}")
    except BadRecordError as exc:  # any DAG author can push any XCom: a bad one is said, not a server error
        return _no_job(
            dag_id, run_id, task_id, map_index, f"the Slurm job record of task {task_id} cannot be read: {exc}"
        )
    live = None
    if not record["final"] and record["via"] == LOCAL_TARGET and settings.ui_live_slurm():
        from airflow_provider_gpusched.core.slurm import SlurmClient, SlurmTransport

        live = _live_statuses.get(LOCAL_TARGET, record["job_id"], lambda: SlurmClient(SlurmTransport()))
    root = settings.slurm_output_dir()
    view = job_view(record, live)
    keys = [t["task"] for t in view["tasks"] if t["task"]] or [""]
    # the files read are in this task instance's own folder (its DAG, run and task ids), never where the record
    # says: any DAG author can push any XCom, and a record naming another DAG's files must not show them here
    folder = settings.task_directory(root, _TaskInstanceIds(dag_id, run_id, task_id, map_index))
    refusal = folder_refusal(folder, dag_id, root)
    tails = {} if refusal else output_tails(record["output_path"], keys, folder, settings.output_tail_lines())
    if record.get("chain_records") and not record["final"] and not refusal:
        view["segments"] = cast("list[SegmentView]", live_segments(folder, keys, record["job_id"], folder))
    if tails:
        view["tails"] = tails
        view["tail_source"] = f"read now from {folder}"
    else:
        view["tail_source"] = "recorded when the job ended" if view["tails"] else "not available yet"
        if not record["final"] and refusal:
            view["tail_source"] += f" ({refusal})"
        elif not record["final"] and not is_under(record["output_path"].replace("%a", "0"), folder):
            view["tail_source"] += (
                f" (its output file is not in its task folder {folder}, the only place the UI reads a job's files)"
            )
    view["task_state"] = str(state.value if hasattr(state, "value") else state)
    view["found"] = True
    return view


def _no_job(
    dag_id: str, run_id: str, task_id: str, map_index: int, message: str, *, local_gpus: bool = False
) -> NoSlurmJob:
    """The answer for a task instance that shows no Slurm job (none recorded, or its record cannot be read)."""
    return {
        "found": False,
        "dag_id": dag_id,
        "run_id": run_id,
        "task_id": task_id,
        "map_index": map_index,
        "local_gpus": local_gpus,
        "message": message,
    }


class _TaskInstanceIds(NamedTuple):
    """What :func:`settings.task_directory` reads of a task instance."""

    dag_id: str
    run_id: str
    task_id: str
    map_index: int


def output_tails(pattern: str, keys: list[str], folder: str, lines: int) -> dict[str, str]:
    """Array task id (or "") -> the tail of its output file: ``pattern`` (the record's output path, ``%a`` the array
    task id) only where it lies in the task's own ``folder`` (no link, no ``..`` out of it)."""
    tails = {}
    for key in keys[:200]:
        text = read_tail(pattern.replace("%a", key) if key else pattern, folder, lines)
        if text is not None:
            tails[key] = text
    return tails


def live_segments(records_dir: str, array_tasks: list[str], job_id: str, root: str) -> list[dict[str, Any]]:
    """A running time-limit chain's segments, read now from its record files in ``records_dir`` (the task's own
    folder), each only under ``root``."""
    from airflow_provider_gpusched.core.slurm.chain import parse_segments, records_path

    segments: list[dict[str, Any]] = []
    for key in [f"{job_id}_{t}" for t in array_tasks if t] or [job_id]:
        path = records_path(records_dir, key)
        text = read_tail(path, root, 2000)
        if text:
            found, _problems = parse_segments(text, path)
            segments.extend(s.to_dict() for s in found if s.job == key)
    return segments


@router.get(
    "/api/dags/{dag_id}/runs/{run_id}/tasks/{task_id}/slurm",
    summary="A task instance's Slurm job",
    dependencies=[Depends(requires_access_dag("GET", DagAccessEntity.XCOM))],
)
def get_slurm_job(
    dag_id: str, run_id: str, task_id: str, session: SessionDep, map_index: int = Query(-1, ge=-1, le=MAX_MAP_INDEX)
) -> JobView | NoSlurmJob:
    return slurm_job(dag_id, run_id, task_id, map_index, session)
