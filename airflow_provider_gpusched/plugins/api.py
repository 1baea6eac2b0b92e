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
import threading
import time
from collections import OrderedDict
from dataclasses import asdict
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
from sqlalchemy import Text, and_, cast, func, or_, select

from airflow_provider_gpusched import settings
from airflow_provider_gpusched.core.errors import GpuschedError
from airflow_provider_gpusched.core.fleet import read_fleet_telemetry
from airflow_provider_gpusched.core.gpu.board import (
    GPU_TIME_XCOM,
    LEASE_XCOM,
    WAIT_XCOM,
    WINDOWS,
    BoardGPU,
    BoardLease,
    KnownHost,
    build_board,
    fleet_known_host,
    read_gpu_time_record,
    read_lease_record,
    read_wait_record,
)
from airflow_provider_gpusched.core.gpu.telemetry import HostSampler, TelemetryRing, sample_gpus, sample_host
from airflow_provider_gpusched.core.gpu.timeline import (
    LEASE_HISTORY_XCOM,
    build_timeline,
    read_history_record,
    running_segment,
)
from airflow_provider_gpusched.core.safe_files import BadRecordError, is_under, read_tail
from airflow_provider_gpusched.core.slurm.job_view import (
    SLURM_JOB_XCOM,
    CachedStatuses,
    job_view,
    read_job_record,
)
from airflow_provider_gpusched.core.slurm.runner import LOCAL_TARGET
from airflow_provider_gpusched.core.sweep.analysis import compare_runs, param_importance
from airflow_provider_gpusched.core.sweep.reports import RAN_AGAIN, reports_of_run
from airflow_provider_gpusched.core.sweep.store import OUTPUT_LOG_FILE, folder_dags
from airflow_provider_gpusched.core.sweep.view import (
    OUTCOMES_XCOM,
    PLAN_XCOM,
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
from airflow_provider_gpusched.core.work_tag import WorkTag
from airflow_provider_gpusched.metrics import emit_gpu_samples

STATIC_DIR = os.path.join(os.path.dirname(__file__), "static")
_WAITING_STATES = ("deferred", "running", "up_for_reschedule", "scheduled", "queued")
_live_statuses = CachedStatuses()
#: how long the api-server's own GPU inventory is reused between board refreshes
OWN_INVENTORY_SECONDS = 30.0
_own_inventory: dict[str, Any] = {"at": 0.0, "host": None}


def _value(raw: Any) -> Any:
    return XComModel.deserialize_value(_Row(raw))


class _Row:
    def __init__(self, value: Any) -> None:
        self.value = value


#: an XCom value longer than this (its JSON text) is not read: a record no task of ours writes that big
MAX_XCOM_BYTES = 8 << 20


def _xcoms(
    session,
    key: str,
    *,
    dag_id: str | None = None,
    run_id: str | None = None,
    states: tuple[str, ...] | None = None,
    task_id: str | None = None,
    map_index: int | None = None,
    ended_since: datetime | None = None,
    problems: list[str] | None = None,
):
    """(value, dag_id, run_id, task_id, map_index, ti state, ti end, ti hostname) of the XComs ``key`` of matching
    task instances (``ended_since``: those that ended since then or have not ended). A value over
    :data:`MAX_XCOM_BYTES` is not deserialized: it is said in ``problems`` (where given) and skipped."""
    size = func.length(cast(XComModel.value, Text))
    query = (
        select(
            XComModel.value,
            XComModel.dag_id,
            XComModel.run_id,
            XComModel.task_id,
            XComModel.map_index,
            TaskInstance.state,
            TaskInstance.end_date,
            TaskInstance.hostname,
            size,
        )
        .join(
            TaskInstance,
            and_(
                TaskInstance.dag_id == XComModel.dag_id,
                TaskInstance.run_id == XComModel.run_id,
                TaskInstance.task_id == XComModel.task_id,
                TaskInstance.map_index == XComModel.map_index,
            ),
        )
        .where(XComModel.key == key)
    )
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
    if ended_since is not None:
        query = query.where(or_(TaskInstance.end_date >= ended_since, TaskInstance.end_date.is_(None)))
    for value, xdag, xrun, xtask, xmap, state, end, hostname, length in session.execute(query).all():
        if length is not None and length > MAX_XCOM_BYTES:
            if problems is not None:
                problems.append(
                    f"XCom {key} of {xdag}.{xtask}[{xmap}] ({xrun}) is {length:,} bytes, over the "
                    f"{MAX_XCOM_BYTES:,} a record may have: not read"
                )
            continue
        yield _value(value), xdag, xrun, xtask, xmap, state, end, hostname or ""


#: what the GPU pages show for the DAG of a task the user may not read
HIDDEN_DAG = "(a DAG you cannot see)"


def _name_hider(readable, also: tuple[str, ...] = ()):
    """``hide(record, dag_id)``: blanks the DAG, run and task names (and the fields ``also`` names) of a record
    (a dict or an object) of a DAG not in ``readable``; the GPU board and the timeline show such work nameless."""

    def hide(record: Any, dag_id: str) -> None:
        if dag_id in readable:
            return
        for attr, hidden in (("dag_id", HIDDEN_DAG), ("run_id", ""), ("task_id", ""), *((a, "") for a in also)):
            if isinstance(record, dict):
                record[attr] = hidden
            else:
                setattr(record, attr, hidden)

    return hide


def _problem(exc: Exception, dag_id: str, readable) -> str:
    """A record that could not be read, as a problem line: its error only for a DAG the user may read."""
    return str(exc) if dag_id in readable else "a record of a DAG you cannot see could not be read"


def _own_identity(record: Any, dag_id: str, run_id: str, task_id: str, map_index: int) -> None:
    """A record is attributed to the task instance whose XCom it is, never to the DAG, run or task it names
    (any DAG author can push any XCom: a record naming another DAG would draw its work under that DAG's name)."""
    for attr, value in (("dag_id", dag_id), ("run_id", run_id), ("task_id", task_id), ("map_index", map_index)):
        if isinstance(record, dict):
            record[attr] = value
        else:
            setattr(record, attr, value)


#: the GPU pages' bounds: hosts listed, leases and waits drawn (each answer says what it cut)
MAX_BOARD_HOSTS = 256
MAX_BOARD_LEASES = 4096
#: a lease the fleet record of its (up) host does not list, though that record is this much newer, is not drawn
FLEET_RECORD_SLACK = 60.0


class _HostCheck:
    """Which host a task's record may name: a host of the fleet's own records, the api-server's own host, or the
    host Airflow says its task instance runs on (``TaskInstance.hostname``, which the task does not write). In a
    fleet, a lease must also be among the leases its up host lists in its own record once that record is newer
    than the lease (with :data:`FLEET_RECORD_SLACK`): a running task cannot draw real GPUs as busy by naming them."""

    def __init__(self, known: set[str], fleet_leases: dict[str, tuple[float, set[str]]]) -> None:
        self.known = known
        self.fleet_leases = fleet_leases

    def check_name(self, host: str, ran_on: str, source: str) -> None:
        if host in self.known or (ran_on and host == ran_on):
            return
        raise BadRecordError(
            f"{source}: key 'host': names host {host[:80]!r}, but its task runs on "
            f"{ran_on[:80] or 'a host Airflow did not record'!r} and no fleet record lists it; a "
            f"task's record is drawn only on its own host"
        )

    def check(self, lease: BoardLease, ran_on: str) -> None:
        source = f"lease {lease.lease_id[:40]} of {lease.dag_id}.{lease.task_id}[{lease.map_index}]"
        self.check_name(lease.host, ran_on, source)
        published, held = self.fleet_leases.get(lease.host, (None, set()))
        if published is not None and lease.lease_id not in held and published > lease.started + FLEET_RECORD_SLACK:
            raise BadRecordError(
                f"{source}: host {lease.host!r} does not list this lease in its own fleet record "
                f"(published {published - lease.started:.0f}s after the lease began): not drawn"
            )


def gpu_board(user, session) -> dict[str, Any]:
    """Leases of running tasks, tasks waiting for GPUs, GPU time of tasks that ended in the last day; tasks of
    DAGs the user cannot read are shown without their names. Hosts come from the fleet's records and the
    api-server's own host; a task's record adds its lease on the host its task instance runs on, never a host."""
    from airflow_provider_gpusched.fleet import enabled as in_a_fleet
    from airflow_provider_gpusched.fleet import read_this_fleet

    readable = get_auth_manager().get_authorized_dag_ids(user=user, method="GET", session=session)
    hide = _name_hider(readable)
    problems: list[str] = []
    now = time.time()
    view = read_this_fleet() if in_a_fleet() else None
    own = None if in_a_fleet() else own_host()
    known = [own] if own is not None else []
    fleet_leases: dict[str, tuple[float, set[str]]] = {}
    if view is not None:
        problems += [why for _path, why in view.unreadable]
        for record in view.hosts:
            known.append(fleet_known_host(record, now))
            if record.fresh(now):
                fleet_leases[record.host] = (record.seen, {held.lease_id for held in record.leases})
    hosts = _HostCheck({k.host for k in known}, fleet_leases)

    def bad(exc: Exception, dag_id: str) -> None:
        problems.append(_problem(exc, dag_id, readable))

    leases, lease_started = [], {}
    for value, dag_id, run_id, task_id, map_index, _state, _end, ran_on in _xcoms(
        session, LEASE_XCOM, states=("running",), problems=problems
    ):
        try:
            lease = read_lease_record(value, f"XCom {LEASE_XCOM} of {dag_id}.{task_id}[{map_index}] ({run_id})")
            _own_identity(lease, dag_id, run_id, task_id, map_index)
            hosts.check(lease, ran_on)
        except BadRecordError as exc:
            bad(exc, dag_id)
            continue
        lease_started[(dag_id, run_id, task_id, map_index)] = lease.started
        hide(lease, dag_id)
        leases.append(lease)
    waiting = []
    for value, dag_id, run_id, task_id, map_index, state, _end, ran_on in _xcoms(
        session, WAIT_XCOM, states=_WAITING_STATES, problems=problems
    ):
        try:
            wait = dict(read_wait_record(value, f"XCom {WAIT_XCOM} of {dag_id}.{task_id}[{map_index}] ({run_id})"))
            _own_identity(wait, dag_id, run_id, task_id, map_index)
            hosts.check_name(wait["host"], ran_on, f"XCom {WAIT_XCOM} of {dag_id}.{task_id}[{map_index}] ({run_id})")
        except BadRecordError as exc:
            bad(exc, dag_id)
            continue
        if lease_started.get((dag_id, run_id, task_id, map_index), -1) >= wait["since"]:
            continue  # it got its GPUs after waiting
        wait["state"] = str(state)
        hide(wait, dag_id)
        waiting.append(wait)
    waiting.sort(key=lambda r: (-r["priority"], r["since"]))
    ledger = []
    since = datetime.now(timezone.utc) - timedelta(seconds=max(WINDOWS.values()))  # the board's longest window
    for value, dag_id, _run_id, task_id, _map_index, _state, end, _host in _xcoms(
        session, GPU_TIME_XCOM, problems=problems
    ):
        if end is None or end < since:
            continue
        try:
            ledger.append(read_gpu_time_record(value, f"XCom {GPU_TIME_XCOM} of {dag_id}.{task_id}", end.timestamp()))
        except BadRecordError as exc:
            bad(exc, dag_id)
    if view is not None:
        _fleet_leases(view, leases, hide, problems, now)
    cut = []
    if len(leases) > MAX_BOARD_LEASES:
        cut.append(f"{len(leases) - MAX_BOARD_LEASES} lease(s) past the first {MAX_BOARD_LEASES} are not drawn")
        leases = sorted(leases, key=lambda lease: lease.started)[:MAX_BOARD_LEASES]
    if len(waiting) > MAX_BOARD_LEASES:
        cut.append(
            f"{len(waiting) - MAX_BOARD_LEASES} waiting task(s) past the first {MAX_BOARD_LEASES} are not listed"
        )
        waiting = waiting[:MAX_BOARD_LEASES]
    telemetry = _telemetry(problems)
    board = build_board(
        leases, waiting=waiting, ledger=ledger, problems=problems, now=now, known_hosts=known, telemetry=telemetry
    )
    if len(board["hosts"]) > MAX_BOARD_HOSTS:
        cut.append(f"{len(board['hosts']) - MAX_BOARD_HOSTS} host(s) past the first {MAX_BOARD_HOSTS} are not listed")
        board["hosts"] = board["hosts"][:MAX_BOARD_HOSTS]
    board["cut"] = cut
    board["problems"] = board["problems"][:100]
    board["api_server_host"] = socket.gethostname()
    return board


def _fleet_leases(view, leases: list[Any], hide, problems: list[str], now: float) -> None:
    """In a fleet (``[gpusched] fleet_dir``): a lease an up host's record lists that no running task's XCom has
    yet (the task just took it) is added to ``leases``."""
    have = {lease.lease_id for lease in leases}
    for record in view.hosts:
        if not record.fresh(now):
            continue  # a dead host's leases are history: its tasks are failed or running elsewhere
        for held in record.leases:
            if held.lease_id in have:
                continue
            try:
                tag = WorkTag.from_dict(held.work, f"{record.host}'s record: lease {held.lease_id}")
            except BadRecordError as exc:
                problems.append(str(exc))
                continue
            lease = BoardLease(
                host=record.host,
                lease_id=held.lease_id,
                gpus=list(held.gpus),
                memory=dict(held.memory),
                whole=held.whole,
                job_class=held.job_class,
                started=held.created,
                dag_id=tag.dag_id or f"(not an Airflow task: {held.owner})",
                run_id=tag.run_id,
                task_id=tag.task_id,
                map_index=tag.map_index,
            )
            if tag.dag_id:
                hide(lease, tag.dag_id)
            leases.append(lease)


def _airflow_hostname() -> str:
    """This host as Airflow names task instances' hosts (``[core] hostname_callable``), so that its GPUs and the
    leases its tasks publish land on one row."""
    try:
        from airflow.utils.net import get_hostname

        return get_hostname()
    except Exception:  # noqa: BLE001 - a misconfigured callable: the plain host name
        return socket.getfqdn()


def own_host() -> KnownHost | None:
    """The api-server's own host when it is a GPU host (NVML finds GPUs, or [gpusched] simulate_gpus is set):
    listed on the board with its GPUs even when nothing runs. Read at most every OWN_INVENTORY_SECONDS."""
    now = time.monotonic()
    if now - _own_inventory["at"] < OWN_INVENTORY_SECONDS:
        return _own_inventory["host"]
    from airflow_provider_gpusched.core.gpu.inventory import GPUInventoryError, get_inventory

    host = None
    try:
        inventory = get_inventory(settings.simulate_gpus() or None)
        gpus = [BoardGPU(g.index, g.uuid, g.name, g.memory_total, g.simulated) for g in inventory.gpus()]
        if gpus:
            host = KnownHost(_airflow_hostname(), gpus, "the api-server's own host")
    except (GPUInventoryError, OSError):
        host = None
    _own_inventory.update(at=now, host=host)
    return host


_own_sampler: dict[str, Any] = {"sampler": None}
_own_sampler_lock = threading.Lock()


def own_telemetry(host: KnownHost) -> dict[str, Any] | None:
    """The api-server's own GPU host (outside a fleet) sampled every 10 s on a thread of the api-server, started by
    the first look at the board: its telemetry record (core/gpu/telemetry.py)."""
    with _own_sampler_lock:
        sampler = _own_sampler["sampler"]
        if sampler is None:
            try:
                from airflow_provider_gpusched.hooks.local_gpu import LocalGPUHook

                manager = LocalGPUHook().get_conn()
                take, inventory = (lambda: sample_host(manager)), manager.inventory
            except (GpuschedError, OSError):  # its lease directory cannot be made: processes stay unattributed
                from airflow_provider_gpusched.core.gpu.inventory import get_inventory

                inventory = get_inventory(settings.simulate_gpus() or None)
                manager = None
                take = lambda: sample_gpus(inventory.gpus(), None)  # noqa: E731
            ring = TelemetryRing(host.host, inventory.source)
            sampler = HostSampler(ring, take, on_sample=lambda samples: emit_gpu_samples(host.host, samples, manager))
            _own_sampler["sampler"] = sampler.start()
    return {**sampler.ring.to_dict(), "sampled_by": "the api-server", "error": sampler.error}


def reset_own_telemetry() -> None:
    """Stop the api-server's own sampler; the next look at the board starts a new one with the settings then
    (tests that change the simulated GPUs' usage file)."""
    with _own_sampler_lock:
        sampler, _own_sampler["sampler"] = _own_sampler["sampler"], None
    if sampler is not None:
        sampler.stop()


def _telemetry(problems: list[str]) -> dict[str, dict[str, Any]]:
    """Measured GPU use per host: in a fleet, what each host's worker published; else the api-server's own host."""
    from airflow_provider_gpusched.fleet import enabled as in_a_fleet

    if in_a_fleet():
        found, bad = read_fleet_telemetry(settings.fleet_dir())
        problems += bad
        return {host: {**record, "sampled_by": "its Edge worker"} for host, record in found.items()}
    own = own_host()
    telemetry = own_telemetry(own) if own is not None else None
    return {own.host: telemetry} if own is not None and telemetry is not None else {}


#: segments the timeline reads at most, over every task's record (the answer says when more were left out)
MAX_TIMELINE_SEGMENTS = 100_000


def gpu_timeline(user, session, hours: float) -> dict[str, Any]:
    """Who held which GPU in the last ``hours``: the segments tasks published (XCom ``gpusched_lease_history``) of
    task instances that ran in the window, and the leases running tasks hold now (open bars). Each segment is
    drawn under the task instance whose XCom it is and only on a host it may name (:class:`_HostCheck`)."""
    from airflow_provider_gpusched.fleet import enabled as in_a_fleet
    from airflow_provider_gpusched.fleet import read_this_fleet

    readable = get_auth_manager().get_authorized_dag_ids(user=user, method="GET", session=session)
    now = time.time()
    since = now - hours * 3600
    segments: list[dict[str, Any]] = []
    problems: list[str] = []
    dropped = 0
    hide = _name_hider(readable, also=("label", "detail"))
    known: dict[str, list[int]] = {}
    host = None if in_a_fleet() else own_host()
    if host is not None:
        known[host.host] = [g.index for g in host.inventory]
    view = read_this_fleet() if in_a_fleet() else None
    fleet_names = {record.host for record in view.hosts} if view is not None else set()
    hosts = _HostCheck(set(known) | fleet_names, {})
    refused: dict[str, int] = {}
    left_out = 0

    ended_since = datetime.fromtimestamp(since, timezone.utc)
    for value, dag_id, run_id, task_id, map_index, _state, _end, ran_on in _xcoms(
        session, LEASE_HISTORY_XCOM, ended_since=ended_since, problems=problems
    ):
        source = f"XCom {LEASE_HISTORY_XCOM} of {dag_id}.{task_id}[{map_index}] ({run_id})"
        try:
            record = read_history_record(value, source)
        except BadRecordError as exc:
            problems.append(_problem(exc, dag_id, readable))
            continue
        dropped += record.get("dropped", 0)
        for segment in record["segments"]:
            try:
                hosts.check_name(segment["host"], ran_on, source)
            except BadRecordError:
                refused[dag_id] = refused.get(dag_id, 0) + 1
                continue
            if len(segments) >= MAX_TIMELINE_SEGMENTS:
                left_out += 1
                continue
            segment = {**segment, "dag_id": dag_id, "run_id": run_id, "task_id": task_id, "map_index": map_index}
            hide(segment, dag_id)
            segments.append(segment)
    for value, dag_id, run_id, task_id, map_index, _state, _end, ran_on in _xcoms(
        session, LEASE_XCOM, states=("running",)
    ):
        try:
            lease = read_lease_record(value, f"XCom {LEASE_XCOM} of {dag_id}.{task_id}[{map_index}] ({run_id})")
            _own_identity(lease, dag_id, run_id, task_id, map_index)
            hosts.check_name(lease.host, ran_on, "")
        except BadRecordError:
            continue  # the board says so
        segment = running_segment(lease, now)
        hide(segment, dag_id)
        segments.append(segment)
    for dag_id, count in sorted(refused.items()):
        problems.append(
            _problem(
                BadRecordError(
                    f"{count} segment(s) published by DAG {dag_id} name a host its tasks do not run on and no fleet record "
                    f"lists: not drawn"
                ),
                dag_id,
                readable,
            )
        )
    timeline = build_timeline(segments, since=since, until=now, known_gpus=known, problems=problems, dropped=dropped)
    if left_out:
        timeline["cut"].insert(0, f"{left_out} segment(s) past the first {MAX_TIMELINE_SEGMENTS:,} were not read")
    timeline["hours"] = hours
    return timeline


def task_lease(dag_id: str, run_id: str, task_id: str, map_index: int, session) -> dict[str, Any]:
    """One task instance's GPU lease as it published it (running or ended), its wait and GPU time, and when and
    where the task ran: what the "GPU lease" link shows once the task's lease is no longer on the board."""
    ti = session.execute(
        select(
            TaskInstance.state,
            TaskInstance.start_date,
            TaskInstance.end_date,
            TaskInstance.hostname,
            TaskInstance.try_number,
        ).where(
            TaskInstance.dag_id == dag_id,
            TaskInstance.run_id == run_id,
            TaskInstance.task_id == task_id,
            TaskInstance.map_index == map_index,
        )
    ).first()
    if ti is None:
        raise HTTPException(404, f"no task instance {task_id} (map index {map_index}) in run {run_id} of {dag_id}")
    state, start, end, hostname, try_number = ti
    out: dict[str, Any] = {
        "dag_id": dag_id,
        "run_id": run_id,
        "task_id": task_id,
        "map_index": map_index,
        "task_state": str(state.value if hasattr(state, "value") else state),
        "start_date": start.timestamp() if start else None,
        "end_date": end.timestamp() if end else None,
        "hostname": hostname or "",
        "try_number": try_number,
        "lease": None,
        "wait": None,
        "gpu_time": None,
        "problems": [],
    }
    where = f"{dag_id}.{task_id}[{map_index}] ({run_id})"
    readers = {
        LEASE_XCOM: lambda v, src: asdict(read_lease_record(v, src)),
        WAIT_XCOM: read_wait_record,
        GPU_TIME_XCOM: lambda v, src: read_gpu_time_record(v, src, end.timestamp() if end else time.time()),
    }
    for key, field in ((LEASE_XCOM, "lease"), (WAIT_XCOM, "wait"), (GPU_TIME_XCOM, "gpu_time")):
        for value, *_rest in _xcoms(
            session, key, dag_id=dag_id, run_id=run_id, task_id=task_id, map_index=map_index, problems=out["problems"]
        ):
            try:
                out[field] = readers[key](value, f"XCom {key} of {where}")
            except BadRecordError as exc:
                out["problems"].append(str(exc))
    return out


def _sweep_records(dag_id: str, run_id: str, session, problems: list[str], group: str | None = None):
    """What the sweeps of one DAG run published: ``(plans, outcomes, states)``, plans by sweep group (rounds in
    order), outcomes by trial id, and the Airflow state of each trial task instance; records that cannot be
    read go to ``problems``. ``group``: that sweep only."""
    plans: dict[str, list[dict[str, Any]]] = {}
    for value, _d, _r, task_id, _m, _s, _e, _h in _xcoms(
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
    for value, _d, _r, task_id, map_index, _s, _e, _h in _xcoms(
        session, OUTCOMES_XCOM, dag_id=dag_id, run_id=run_id, problems=problems
    ):
        if group is not None and task_id not in trial_tasks:
            continue
        try:
            for o in read_outcome_records(value, f"XCom {OUTCOMES_XCOM} of {task_id}[{map_index}]"):
                outcomes[o["trial_id"]] = o
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


def _one_sweep(dag_id: str, run_id: str, group: str, session):
    """``(plans, rows, objective)`` of sweep ``group`` in one DAG run; 404 when that run planned no such sweep."""
    problems: list[str] = []
    plans, outcomes, states = _sweep_records(dag_id, run_id, session, problems, group=group)
    if group not in plans:
        raise HTTPException(
            404,
            f"run {run_id} of {dag_id} planned no sweep {group!r}"
            + (f" ({'; '.join(problems)[:500]})" if problems else ""),
        )
    return plans[group], trial_rows(plans[group], outcomes, states), sweep_objective(plans[group])


#: importance answers kept, keyed by sweep, run and what was scored (a finished sweep's never changes); the
#: api-server answers in several threads
_importance_cache: OrderedDict[tuple[Any, ...], dict[str, Any]] = OrderedDict()
_importance_lock = threading.Lock()


def sweep_importance(dag_id: str, run_id: str, group: str, session) -> dict[str, Any]:
    """Parameter importance over every scored trial of one sweep in one run (core/sweep/analysis.py)."""
    plans, rows, objective = _one_sweep(dag_id, run_id, group, session)
    if objective is None:
        return {"method": "none", "note": "the sweep has no objective", "importances": [], "trials": 0}
    points, values, categories = scored_points(rows, objective)
    key = (dag_id, run_id, group, len(points), round(sum(p["score"] for p in points), 9))
    with _importance_lock:
        if key in _importance_cache:
            _importance_cache.move_to_end(key)
            return _importance_cache[key]
    t0 = time.monotonic()
    found = param_importance(
        points, param_axes(plans, values, categories), objective, pruned=sum(1 for r in rows if r["state"] == "pruned")
    )
    found["seconds"] = round(time.monotonic() - t0, 3)
    with _importance_lock:
        _importance_cache[key] = found
        while len(_importance_cache) > 64:
            _importance_cache.popitem(last=False)
    return found


def sweep_comparison(dag_id: str, run_id: str, other: str, group: str, session) -> dict[str, Any]:
    """Two runs of one sweep side by side (core/sweep/analysis.py)."""
    plans_a, rows_a, objective = _one_sweep(dag_id, run_id, group, session)
    plans_b, rows_b, _objective_b = _one_sweep(dag_id, other, group, session)
    if objective is None:
        raise HTTPException(400, f"sweep {group!r} has no objective: there is no score to compare")
    return {
        "group": group,
        **compare_runs(
            {"run": run_id, "points": scored_points(rows_a, objective)[0], "counts": trial_counts(plans_a, rows_a)},
            {"run": other, "points": scored_points(rows_b, objective)[0], "counts": trial_counts(plans_b, rows_b)},
            objective,
        ),
    }


#: lines of a trial's output the Sweeps tab shows
TRIAL_LOG_LINES = 200


def sweep_trial(dag_id: str, run_id: str, group: str, trial_id: str, session) -> dict[str, Any]:
    """One trial of a sweep: its row (parameters, state, result, error, task instance) and the tail of its output
    (``output.log`` in its folder, read only under ``[gpusched] sweep_results_root``)."""
    plans, rows, _objective = _one_sweep(dag_id, run_id, group, session)
    row = next((r for r in rows if r["trial_id"] == trial_id), None)
    if row is None:
        raise HTTPException(404, f"sweep {group!r} of run {run_id} lists no trial {trial_id!r}")
    out: dict[str, Any] = {
        k: row[k]
        for k in (
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
    reports = report_paths(plans).get(trial_id)
    if reports is None:
        out["log_note"] = "this sweep's plan names no results folder"
        return out
    root = settings.sweep_results_root()
    path = os.path.join(os.path.dirname(reports), OUTPUT_LOG_FILE)
    out["log_path"] = path
    refusal = _folder_refusal(os.path.dirname(os.path.dirname(os.path.dirname(reports))), dag_id, root)
    if refusal:
        out["log_note"] = refusal
        return out
    out["log_tail"] = read_tail(path, root, TRIAL_LOG_LINES)
    if out["log_tail"] is None:
        out["log_note"] = (
            "no output yet" if row["state"] in ("waiting", "running") else "its output file is not readable"
        )
    elif row["skipped"]:
        out["log_note"] = "from the earlier DAG run that ran it"
    return out


def _folder_refusal(folder: str, dag_id: str, root: str) -> str:
    """Why the files of sweep folder ``folder`` are not shown under DAG ``dag_id`` ("" when they are): only a folder
    under ``[gpusched] sweep_results_root`` whose ``dags.json`` lists that DAG. A plan record is an XCom any DAG
    author can push: naming another DAG's folder must not show that DAG's trial output to this DAG's readers."""
    if not is_under(folder, root):
        return f"files are read from [gpusched] sweep_results_root ({root}) only; this sweep keeps them elsewhere"
    dags = folder_dags(folder)
    if dags is None or dag_id not in dags:
        return (
            f"the sweep folder this plan names does not list DAG {dag_id} among the DAGs that planned in it "
            f"(its dags.json): its files are not shown here"
        )
    return ""


def sweeps(dag_id: str, run_id: str | None, session) -> dict[str, Any]:
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
    views = []
    root = settings.sweep_results_root()
    for group, group_plans in sorted(plans.items()):
        paths, curve_runs = report_paths(group_plans), report_runs(group_plans, run_id)
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

        view = build_sweep_view(group_plans, outcomes, states, reports=read)
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


def slurm_job(dag_id: str, run_id: str, task_id: str, map_index: int, session) -> dict[str, Any]:
    rows = list(_xcoms(session, SLURM_JOB_XCOM, dag_id=dag_id, run_id=run_id, task_id=task_id, map_index=map_index))
    if not rows:
        # the tab is on every task instance (Airflow has no per-operator tabs): a task without a Slurm job gets a
        # plain answer, with its local GPU lease where it had one
        lease = list(_xcoms(session, LEASE_XCOM, dag_id=dag_id, run_id=run_id, task_id=task_id, map_index=map_index))
        return {
            "found": False,
            "dag_id": dag_id,
            "run_id": run_id,
            "task_id": task_id,
            "map_index": map_index,
            "local_gpus": bool(lease),
            "message": (
                f"task {task_id} (map index {map_index}) of run {run_id} has no Slurm job recorded"
                + ("; it ran on local GPUs (see its GPU lease)" if lease else "")
            ),
        }
    value, *_ignored, state, _end, _host = rows[0]
    try:
        record = read_job_record(value, f"XCom {SLURM_JOB_XCOM} of {task_id}")
    except BadRecordError as exc:
        raise HTTPException(500, str(exc)) from None
    live = None
    if not record["final"] and record["via"] == LOCAL_TARGET and settings.ui_live_slurm():
        from airflow_provider_gpusched.core.slurm import CommandRunner, SlurmClient

        live = _live_statuses.get(LOCAL_TARGET, record["job_id"], lambda: SlurmClient(CommandRunner()))
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
    view["found"] = True
    return view


def create_app() -> FastAPI:
    app = FastAPI(title="gpusched", description="GPU board, sweeps and Slurm jobs of airflow-provider-gpusched")

    @app.get("/api/gpus", dependencies=[Depends(requires_access_view(AccessView.CLUSTER_ACTIVITY))])
    def get_gpu_board(user: GetUserDep, session: SessionDep) -> dict[str, Any]:
        return gpu_board(user, session)

    @app.get("/api/timeline", dependencies=[Depends(requires_access_view(AccessView.CLUSTER_ACTIVITY))])
    def get_timeline(
        user: GetUserDep, session: SessionDep, hours: float = Query(6.0, gt=0, le=24 * 14)
    ) -> dict[str, Any]:
        return gpu_timeline(user, session, hours)

    @app.get(
        "/api/dags/{dag_id}/sweeps/importance", dependencies=[Depends(requires_access_dag("GET", DagAccessEntity.XCOM))]
    )
    def get_sweep_importance(
        dag_id: str,
        session: SessionDep,
        run_id: str = Query(..., max_length=250),
        group: str = Query(..., max_length=250),
    ) -> dict[str, Any]:
        return sweep_importance(dag_id, run_id, group, session)

    @app.get(
        "/api/dags/{dag_id}/sweeps/compare", dependencies=[Depends(requires_access_dag("GET", DagAccessEntity.XCOM))]
    )
    def get_sweep_comparison(
        dag_id: str,
        session: SessionDep,
        run_id: str = Query(..., max_length=250),
        other: str = Query(..., max_length=250),
        group: str = Query(..., max_length=250),
    ) -> dict[str, Any]:
        return sweep_comparison(dag_id, run_id, other, group, session)

    @app.get(
        "/api/dags/{dag_id}/sweeps/trial", dependencies=[Depends(requires_access_dag("GET", DagAccessEntity.XCOM))]
    )
    def get_sweep_trial(
        dag_id: str,
        session: SessionDep,
        run_id: str = Query(..., max_length=250),
        group: str = Query(..., max_length=250),
        trial_id: str = Query(..., max_length=250),
    ) -> dict[str, Any]:
        return sweep_trial(dag_id, run_id, group, trial_id, session)

    @app.get("/api/dags/{dag_id}/sweeps", dependencies=[Depends(requires_access_dag("GET", DagAccessEntity.XCOM))])
    def get_sweeps(
        dag_id: str, session: SessionDep, run_id: str | None = Query(None, max_length=250)
    ) -> dict[str, Any]:
        return sweeps(dag_id, run_id, session)

    @app.get(
        "/api/dags/{dag_id}/runs/{run_id}/tasks/{task_id}/slurm",
        dependencies=[Depends(requires_access_dag("GET", DagAccessEntity.XCOM))],
    )
    def get_slurm_job(
        dag_id: str, run_id: str, task_id: str, session: SessionDep, map_index: int = Query(-1, ge=-1)
    ) -> dict[str, Any]:
        return slurm_job(dag_id, run_id, task_id, map_index, session)

    @app.get(
        "/api/dags/{dag_id}/runs/{run_id}/tasks/{task_id}/lease",
        dependencies=[Depends(requires_access_dag("GET", DagAccessEntity.XCOM))],
    )
    def get_task_lease(
        dag_id: str, run_id: str, task_id: str, session: SessionDep, map_index: int = Query(-1, ge=-1)
    ) -> dict[str, Any]:
        return task_lease(dag_id, run_id, task_id, map_index, session)

    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    return app
