"""The GPU pages: the board (leases, waiting tasks, GPU time, measured use), the timeline (who held which GPU),
and one task's lease; behind the cluster-activity view (a task's lease: read access to its DAG)."""

from __future__ import annotations

import socket
import time
from dataclasses import asdict
from datetime import datetime, timezone
from typing import Any, cast

from airflow.api_fastapi.app import get_auth_manager
from airflow.api_fastapi.auth.managers.models.resource_details import AccessView, DagAccessEntity
from airflow.api_fastapi.common.db.common import SessionDep
from airflow.api_fastapi.core_api.security import GetUserDep, requires_access_dag, requires_access_view
from airflow.models import TaskInstance  # the api-server's ORM models: no Task SDK equivalent exists
from fastapi import APIRouter, Depends, HTTPException, Query
from sqlalchemy import select
from typing_extensions import TypedDict

from airflow_provider_gpusched.core.board import (
    GPU_TIME_XCOM,
    HELD_LEASES_XCOM,
    LEASE_XCOM,
    WAIT_XCOM,
    WINDOWS,
    BoardLease,
    BoardView,
    GPUTimeRecord,
    KnownHost,
    WaitRecord,
    build_board,
    fleet_known_host,
    read_gpu_time_record,
    read_held_leases_record,
    read_lease_record,
    read_wait_record,
)
from airflow_provider_gpusched.core.gpu.timeline import (
    LEASE_HISTORY_XCOM,
    TimelineView,
    build_timeline,
    ledger_of_history,
    read_history_record,
    running_segment,
)
from airflow_provider_gpusched.core.quota.report import QuotaView
from airflow_provider_gpusched.core.records import open_view
from airflow_provider_gpusched.core.safe_files import BadRecordError
from airflow_provider_gpusched.core.work_tag import WorkTag
from airflow_provider_gpusched.plugins.api.telemetry import host_telemetry, own_host
from airflow_provider_gpusched.plugins.api.xcoms import (
    HIDDEN_DAG,
    MAX_MAP_INDEX,
    WAITING_STATES,
    HostCheck,
    NameScrubber,
    name_hider,
    name_scrubber,
    own_identity,
    problem_line,
    xcom_records,
)

router = APIRouter(tags=["GPUs"])

#: the GPU pages' bounds: hosts listed, leases and waits drawn (each answer says what it cut)
MAX_BOARD_HOSTS = 256
MAX_BOARD_LEASES = 4096


def gpu_board(user, session) -> BoardView:
    """Leases held now, tasks waiting for GPUs, GPU time of the last day; tasks of DAGs the user cannot read are
    shown without their names. Hosts come from the fleet's records and the api-server's own host; a task's record
    adds its lease on the host its task instance runs on, never a host. Every lease a host holds is drawn, also one
    no task published a record of (a batched runner's, an asynchronous sweep's worker's: they hold several leases
    one after another, or at once): from the up hosts' fleet records, or outside a fleet from the lease directory of
    the api-server's own host (what ``gpusched gpus`` lists). GPU time is each task's published attempts (its
    lease history: one record per attempt, as the host's ledger counts them), else its published ``gpu_time``."""
    from airflow_provider_gpusched.fleet import enabled as in_a_fleet
    from airflow_provider_gpusched.fleet import read_this_fleet

    readable = get_auth_manager().get_authorized_dag_ids(user=user, method="GET", session=session)
    hide = name_hider(readable)
    scrub = name_scrubber(session, readable)
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
    hosts = HostCheck({k.host for k in known}, fleet_leases)

    def bad(exc: Exception, dag_id: str) -> None:
        problems.append(problem_line(exc, dag_id, readable))

    leases, lease_started = [], {}
    for value, dag_id, run_id, task_id, map_index, _state, _end, ran_on in xcom_records(
        session, LEASE_XCOM, states=("running",), problems=problems
    ):
        try:
            lease = read_lease_record(value, f"XCom {LEASE_XCOM} of {dag_id}.{task_id}[{map_index}] ({run_id})")
            own_identity(lease, dag_id, run_id, task_id, map_index)
            hosts.check(lease, ran_on)
        except BadRecordError as exc:
            bad(exc, dag_id)
            continue
        lease_started[(dag_id, run_id, task_id, map_index)] = lease.started
        hide(lease, dag_id)
        leases.append(lease)
    for lease, dag_id in running_runners_leases(session, hosts.check, problems, bad):
        hide(lease, dag_id)
        leases.append(lease)
    waiting = []
    for value, dag_id, run_id, task_id, map_index, state, _end, ran_on in xcom_records(
        session, WAIT_XCOM, states=WAITING_STATES, problems=problems
    ):
        try:
            wait = dict(read_wait_record(value, f"XCom {WAIT_XCOM} of {dag_id}.{task_id}[{map_index}] ({run_id})"))
            own_identity(wait, dag_id, run_id, task_id, map_index)
            hosts.check_name(wait["host"], ran_on, f"XCom {WAIT_XCOM} of {dag_id}.{task_id}[{map_index}] ({run_id})")
        except BadRecordError as exc:
            bad(exc, dag_id)
            continue
        if lease_started.get((dag_id, run_id, task_id, map_index), -1) >= wait["since"]:
            continue  # it got its GPUs after waiting
        wait["state"] = str(state)
        wait["why"] = scrub(wait["why"])  # it may name whom it waits behind
        hide(wait, dag_id)
        waiting.append(wait)
    waiting.sort(key=lambda r: (-r["priority"], r["since"]))
    ledger = task_ledger(session, now - max(WINDOWS.values()), bad, problems)  # the board's longest window
    leases += held_leases(view, own, {lease.lease_id for lease in leases}, hide, problems, now)
    cut = []
    if len(leases) > MAX_BOARD_LEASES:
        cut.append(f"{len(leases) - MAX_BOARD_LEASES} lease(s) past the first {MAX_BOARD_LEASES} are not drawn")
        leases = sorted(leases, key=lambda lease: lease.started)[:MAX_BOARD_LEASES]
    if len(waiting) > MAX_BOARD_LEASES:
        cut.append(
            f"{len(waiting) - MAX_BOARD_LEASES} waiting task(s) past the first {MAX_BOARD_LEASES} are not listed"
        )
        waiting = waiting[:MAX_BOARD_LEASES]
    telemetry = host_telemetry(problems)
    quotas = quota_table(problems)
    if quotas is not None:
        hide_quota_names(quotas, scrub)
    problems.extend(settings_file_problems())
    board = build_board(
        leases,
        waiting=waiting,
        ledger=ledger,
        problems=problems,
        now=now,
        known_hosts=known,
        telemetry=telemetry,
        quotas=quotas,
    )
    if len(board["hosts"]) > MAX_BOARD_HOSTS:
        cut.append(f"{len(board['hosts']) - MAX_BOARD_HOSTS} host(s) past the first {MAX_BOARD_HOSTS} are not listed")
        board["hosts"] = board["hosts"][:MAX_BOARD_HOSTS]
    board["cut"] = cut
    board["problems"] = board["problems"][:100]
    board["api_server_host"] = socket.gethostname()
    return board


def settings_file_problems() -> list[str]:
    """A broken job-class file, said on the board (its last good version is in force: core/quota/last_good.py; the
    quota file's own error is the quota section's ``config_error``)."""
    from airflow_provider_gpusched import settings
    from airflow_provider_gpusched.core.errors import GpuschedError

    try:
        error = settings.job_class_mapping().config_error
    except GpuschedError as exc:  # a file never good: nothing is in force, every DAG using it says so too
        return [f"[gpusched] job_classes: {exc}"]
    return [f"[gpusched] job_classes is broken, its last good version is in force: {error}"] if error else []


def quota_table(problems: list[str]) -> QuotaView | None:
    """The team quotas now (core/quota/report.py), from the fleet's quota book or this host's; None without quotas.
    The book's own problems go to ``problems``; a book that cannot be read is one problem, not a failed board."""
    from airflow_provider_gpusched import settings
    from airflow_provider_gpusched.core.errors import GpuschedError
    from airflow_provider_gpusched.core.fleet import open_quota_book
    from airflow_provider_gpusched.core.gpu.lease_store import default_state_dir
    from airflow_provider_gpusched.core.quota.report import quota_view

    try:
        config = settings.quota_config()
        if not config.enabled:
            return None
        folder = settings.fleet_dir()
        own = None if folder else own_host()
        book, capacity = open_quota_book(
            config,
            folder,
            settings.gpu_state_dir() or default_state_dir(),
            shared=settings.gpu_state_dir_shared(),
            gpus=own.inventory if own is not None else (),
        )
        view = quota_view(book, capacity)
    except (GpuschedError, OSError) as exc:
        problems.append(f"team quotas: {exc}")
        return None
    problems.extend(view["problems"])
    return view


def hide_quota_names(view: QuotaView, scrub: NameScrubber) -> None:
    """The quota table as the leases are shown: a waiter whose ``owner`` names a task of a DAG the user may not read
    (or of a DAG Airflow does not list) is shown without its names or its reason, and the other reasons without
    the tasks of such DAGs they name (:class:`~.xcoms.NameScrubber`)."""
    for group in view["groups"]:
        for waiter in group["waiters"]:
            if scrub.hides_owner(waiter["owner"]):
                waiter["owner"], waiter["reason"] = HIDDEN_DAG, ""
            else:
                waiter["reason"] = scrub(waiter["reason"])


def running_runners_leases(session, check, problems: list[str], bad) -> list[tuple[BoardLease, str]]:
    """(lease, dag id) of the leases running tasks that hold several list (XCom ``gpusched_held_leases``: batched
    runners, asynchronous workers), each checked as a task's own lease is (its identity, ``check(lease, ran_on)``);
    ``bad(exc, dag_id)`` is told of each record that cannot be read."""
    out = []
    for value, dag_id, run_id, task_id, map_index, _state, _end, ran_on in xcom_records(
        session, HELD_LEASES_XCOM, states=("running",), problems=problems
    ):
        source = f"XCom {HELD_LEASES_XCOM} of {dag_id}.{task_id}[{map_index}] ({run_id})"
        try:
            held = read_held_leases_record(value, source)
            for lease in held:
                own_identity(lease, dag_id, run_id, task_id, map_index)
                check(lease, ran_on)
        except BadRecordError as exc:
            bad(exc, dag_id)
            continue
        out += [(lease, dag_id) for lease in held]
    return out


def task_ledger(session, since: float, bad, problems: list[str]) -> list[dict[str, Any]]:
    """GPU time since ``since`` as ledger records (``time``, ``job_class``, ``gpu_seconds``, ``lost_gpu_seconds``,
    ``preemptions``), task instance by task instance, as the host's ledger (core/gpu/accounting.py) counts it: the
    attempts a task published in its lease history (XCom ``gpusched_lease_history``: every attempt as it ends, of
    a running task too), else the ``gpu_time`` it published when it ended. A batched runner and an asynchronous
    sweep's worker publish only their history; a task of an older version, whose segments lack their GPU time,
    counts by its ``gpu_time``. ``bad(exc, dag_id)`` is told of each record that cannot be read."""
    start = datetime.fromtimestamp(since, timezone.utc)
    histories: dict[tuple[str, str, str, int], list[dict[str, Any]]] = {}
    for value, dag_id, run_id, task_id, map_index, _state, _end, _host in xcom_records(
        session, LEASE_HISTORY_XCOM, ended_since=start, problems=problems
    ):
        source = f"XCom {LEASE_HISTORY_XCOM} of {dag_id}.{task_id}[{map_index}] ({run_id})"
        try:
            record = read_history_record(value, source)
        except BadRecordError:
            continue  # the timeline says so; the task's gpu_time (if any) counts instead
        ended = [s for s in record["segments"] if s["outcome"] != "running"]
        if (ended or record.get("dropped")) and all(s.get("gpu_seconds") is not None for s in ended):
            histories[(dag_id, run_id, task_id, map_index)] = ledger_of_history(record)
    ledger = [r for records in histories.values() for r in records if r["time"] >= since]
    for value, dag_id, run_id, task_id, map_index, _state, end, _host in xcom_records(
        session, GPU_TIME_XCOM, ended_since=start, problems=problems
    ):
        if end is None or end.timestamp() < since or (dag_id, run_id, task_id, map_index) in histories:
            continue
        try:
            ledger.append(read_gpu_time_record(value, f"XCom {GPU_TIME_XCOM} of {dag_id}.{task_id}", end.timestamp()))
        except BadRecordError as exc:
            bad(exc, dag_id)
    return ledger


def held_leases(view, own: KnownHost | None, have: set[str], hide, problems: list[str], now: float) -> list[BoardLease]:
    """The leases hosts hold now that no running task's XCom lists (``have``: the lease ids they list): a task
    that just took its lease, and the leases of tasks that publish none (a batched runner, an asynchronous
    sweep's workers, which take a lease per group of trials or per worker process). In a fleet (``view``), what
    each up host's record lists; outside one, the lease directory of the api-server's own host (``own``), as
    ``gpusched gpus`` reads it. Each is drawn under the task its work tag names."""
    found: list[tuple[str, Any]] = []
    if view is not None:
        for record in view.hosts:
            if record.fresh(now):  # a dead host's leases are history: its tasks are failed or running elsewhere
                found += [(record.host, held) for held in record.leases]
    elif own is not None:
        found = [(own.host, held) for held in _own_leases(own, problems)]
    out = []
    for host, held in found:
        if held.lease_id in have:
            continue
        try:
            tag = WorkTag.from_dict(held.work, f"{host}'s lease {held.lease_id}")
        except BadRecordError as exc:
            problems.append(str(exc))
            continue
        lease = BoardLease(
            host=host,
            lease_id=held.lease_id,
            gpus=list(held.gpus),
            memory=dict(held.memory),
            whole=held.whole,
            job_class=held.job_class,
            priority=held.priority,
            started=held.created,
            dag_id=tag.dag_id or f"(not an Airflow task: {held.owner})",
            run_id=tag.run_id,
            task_id=tag.task_id,
            map_index=tag.map_index,
            group=tag.group,
        )
        if tag.dag_id:
            hide(lease, tag.dag_id)
        out.append(lease)
    return out


def _own_leases(own: KnownHost, problems: list[str]) -> list[Any]:
    """The live leases of the api-server's own host (its ``[gpusched] gpu_state_dir``); a lease directory that
    cannot be read is one problem, not a failed board."""
    from airflow_provider_gpusched import settings
    from airflow_provider_gpusched.core.errors import GpuschedError
    from airflow_provider_gpusched.core.gpu.inventory import get_inventory
    from airflow_provider_gpusched.core.gpu.leases import LeaseManager

    try:
        manager = LeaseManager(
            get_inventory(settings.simulate_gpus() or None),
            settings.gpu_state_dir(),
            shared=settings.gpu_state_dir_shared(),
        )
        return manager.snapshot()[1]
    except (GpuschedError, OSError) as exc:
        problems.append(f"the leases of {own.host} (the api-server's own host) cannot be read: {exc}")
        return []


#: the shortest window the timeline draws (a minute): a shorter one has no width to draw in
MIN_TIMELINE_HOURS = 1 / 60
#: segments the timeline reads at most, over every task's record (the answer says when more were left out)
MAX_TIMELINE_SEGMENTS = 100_000


def gpu_timeline(user, session, hours: float) -> TimelineView:
    """Who held which GPU in the last ``hours``: the segments tasks published (XCom ``gpusched_lease_history``) of
    task instances that ran in the window, and the leases running tasks hold now (open bars). Each segment is
    drawn under the task instance whose XCom it is and only on a host it may name (:class:`HostCheck`)."""
    from airflow_provider_gpusched.fleet import enabled as in_a_fleet
    from airflow_provider_gpusched.fleet import read_this_fleet

    readable = get_auth_manager().get_authorized_dag_ids(user=user, method="GET", session=session)
    now = time.time()
    since = now - hours * 3600
    segments: list[dict[str, Any]] = []
    problems: list[str] = []
    dropped = 0
    hide = name_hider(readable, also=("label", "detail"))
    known: dict[str, list[int]] = {}
    host = None if in_a_fleet() else own_host()
    if host is not None:
        known[host.host] = [g.index for g in host.inventory]
    view = read_this_fleet() if in_a_fleet() else None
    fleet_names = {record.host for record in view.hosts} if view is not None else set()
    hosts = HostCheck(set(known) | fleet_names, {})
    refused: dict[str, int] = {}
    left_out = 0

    ended_since = datetime.fromtimestamp(since, timezone.utc)
    for value, dag_id, run_id, task_id, map_index, _state, _end, ran_on in xcom_records(
        session, LEASE_HISTORY_XCOM, ended_since=ended_since, problems=problems
    ):
        source = f"XCom {LEASE_HISTORY_XCOM} of {dag_id}.{task_id}[{map_index}] ({run_id})"
        try:
            record = read_history_record(value, source)
        except BadRecordError as exc:
            problems.append(problem_line(exc, dag_id, readable))
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
    running = set()
    for value, dag_id, run_id, task_id, map_index, _state, _end, ran_on in xcom_records(
        session, LEASE_XCOM, states=("running",)
    ):
        try:
            lease = read_lease_record(value, f"XCom {LEASE_XCOM} of {dag_id}.{task_id}[{map_index}] ({run_id})")
            own_identity(lease, dag_id, run_id, task_id, map_index)
            hosts.check_name(lease.host, ran_on, "")
        except BadRecordError:
            continue  # the board says so
        running.add(lease.lease_id)
        segment = running_segment(lease, now)
        hide(segment, dag_id)
        segments.append(segment)
    for lease, dag_id in running_runners_leases(
        session, lambda lease, ran_on: hosts.check_name(lease.host, ran_on, ""), [], lambda exc, dag_id: None
    ):
        running.add(lease.lease_id)
        segment = running_segment(lease, now)
        hide(segment, dag_id)
        segments.append(segment)
    # the leases of tasks that publish no lease record (batched runners, asynchronous workers) are open bars too,
    # drawn while they are held, not only once they end (names hidden as the board hides them)
    for lease in held_leases(view, host, running, name_hider(readable), problems, now):
        segments.append(running_segment(lease, now))
    for dag_id, count in sorted(refused.items()):
        problems.append(
            problem_line(
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


@open_view
class TaskLeaseView(TypedDict):
    """One task instance's GPU lease, wait and GPU time, as it published them, and when and where it ran."""

    dag_id: str
    run_id: str
    task_id: str
    map_index: int
    task_state: str
    start_date: float | None
    end_date: float | None
    hostname: str
    try_number: int
    lease: BoardLease | None  # the published lease record (core/board.BoardLease)
    wait: WaitRecord | None
    gpu_time: GPUTimeRecord | None
    problems: list[str]  # records that were refused, and why


def task_lease(dag_id: str, run_id: str, task_id: str, map_index: int, session) -> TaskLeaseView:
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
        for value, *_rest in xcom_records(
            session, key, dag_id=dag_id, run_id=run_id, task_id=task_id, map_index=map_index, problems=out["problems"]
        ):
            try:
                out[field] = readers[key](value, f"XCom {key} of {where}")
            except BadRecordError as exc:
                out["problems"].append(str(exc))
    return cast(TaskLeaseView, out)


@router.get(
    "/api/gpus",
    summary="The GPU board",
    dependencies=[Depends(requires_access_view(AccessView.CLUSTER_ACTIVITY))],
)
def get_gpu_board(user: GetUserDep, session: SessionDep) -> BoardView:
    return gpu_board(user, session)


@router.get(
    "/api/timeline",
    summary="Who held which GPU in the last hours",
    dependencies=[Depends(requires_access_view(AccessView.CLUSTER_ACTIVITY))],
)
def get_timeline(
    user: GetUserDep,
    session: SessionDep,
    hours: float = Query(6.0, ge=MIN_TIMELINE_HOURS, le=24 * 14, allow_inf_nan=False),
) -> TimelineView:
    return gpu_timeline(user, session, hours)


@router.get(
    "/api/dags/{dag_id}/runs/{run_id}/tasks/{task_id}/lease",
    summary="One task instance's GPU lease, wait and GPU time",
    dependencies=[Depends(requires_access_dag("GET", DagAccessEntity.XCOM))],
)
def get_task_lease(
    dag_id: str, run_id: str, task_id: str, session: SessionDep, map_index: int = Query(-1, ge=-1, le=MAX_MAP_INDEX)
) -> TaskLeaseView:
    return task_lease(dag_id, run_id, task_id, map_index, session)
