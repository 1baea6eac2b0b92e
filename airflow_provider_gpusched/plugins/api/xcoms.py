"""Reading what tasks published (XComs of task instances) for the plugin's pages, and the rules every page applies
to a record: it is attributed to the task instance whose XCom it is, drawn only on a host its task may name, and
a DAG the user cannot read is shown without its names."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from airflow.models import TaskInstance  # the api-server's ORM models: no Task SDK equivalent exists
from airflow.models.xcom import XComModel
from sqlalchemy import Text, and_, cast, func, or_, select

from airflow_provider_gpusched.core.board import BoardLease
from airflow_provider_gpusched.core.safe_files import BadRecordError

#: task states in which a task may be waiting for GPUs
WAITING_STATES = ("deferred", "running", "up_for_reschedule", "scheduled", "queued")
#: a lease the fleet record of its (up) host does not list, though that record is this much newer, is not drawn
FLEET_RECORD_SLACK = 60.0


#: the highest map index a request may ask for (Airflow keeps it in a 32-bit column: a bigger number is no task's)
MAX_MAP_INDEX = 2**31 - 1

#: an XCom value longer than this (its JSON text) is not read: a record no task of ours writes that big
MAX_XCOM_BYTES = 8 << 20


def xcom_records(
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
    for row in session.execute(query).all():
        _value, xdag, xrun, xtask, xmap, state, end, hostname, length = row
        if length is not None and length > MAX_XCOM_BYTES:
            if problems is not None:
                problems.append(
                    f"XCom {key} of {xdag}.{xtask}[{xmap}] ({xrun}) is {length:,} bytes, over the "
                    f"{MAX_XCOM_BYTES:,} a record may have: not read"
                )
            continue
        # Airflow's own decoding of a stored value (the row has its ``value`` column, as deserialize_value reads)
        yield XComModel.deserialize_value(row), xdag, xrun, xtask, xmap, state, end, hostname or ""


#: what the GPU pages show for the DAG of a task the user may not read
HIDDEN_DAG = "(a DAG you cannot see)"


def name_hider(readable, also: tuple[str, ...] = ()):
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


#: a task as the GPU code names a lease holder or a waiter: ``<dag>.<task>[<map>] (<run>[, try N])`` (Airflow's ids
#: are ``[\w.-]``, its run ids have no space): the dotted name, its map index, its run
_TASK_NAME = re.compile(r"(?<![\w.-])([\w-]+(?:\.[\w-]+)+)(\[[^\]\s]*\])?( \([^()\s]*(?:, try \d+)?\))?")


class NameScrubber:
    """Which names of tasks a user may see in the GPU pages' texts (a quota waiter's ``owner``, a reason that names
    whom it waits behind): an allow-list. A task name shows only where its DAG is one the user may read
    (``readable``); a DAG not in Airflow's DAG table (deleted, or another deployment's on a shared fleet) is hidden
    like a private one. Work started outside Airflow (``gpusched sweep run <sweep> (pid N)``, ``pid N``) has no
    DAG and shows as it is. A DAG id may hold dots (``a.b``'s task ``c`` reads ``a.b.c``, like ``a``'s task
    ``b.c``): a name shows only if one of its dotted prefixes is readable and none is a DAG of the table the
    user may not read (``known``)."""

    def __init__(self, readable, known) -> None:
        self.readable = set(readable)
        self.unreadable = set(known) - self.readable

    def allowed(self, name: str) -> bool:
        """Whether dotted name ``name`` (``<dag>.<task>``) is a task of a DAG the user may read."""
        parts = name.split(".")
        prefixes = {".".join(parts[:n]) for n in range(1, len(parts))}
        return bool(prefixes & self.readable) and not prefixes & self.unreadable

    def hides_owner(self, owner: str) -> bool:
        """Whether ``owner`` (who holds or waits for GPUs) names a task the user may not see. An Airflow task's owner
        starts with its dotted name; any other (its first word has no dot) is work started outside Airflow."""
        first = re.split(r"[\s\[(]", owner, maxsplit=1)[0]
        return "." in first and not self.allowed(first)

    def __call__(self, text: str) -> str:
        """``text`` with each task it names that the user may not see replaced by :data:`HIDDEN_DAG`: a dotted
        name followed by a map index or a run (as an owner is written), or one that starts with a DAG's id."""

        def replace(m: re.Match[str]) -> str:
            name = m.group(1)
            if self.allowed(name):
                return m.group(0)
            parts = name.split(".")
            prefixes = {".".join(parts[:n]) for n in range(1, len(parts))}
            named = m.group(2) or m.group(3) or prefixes & (self.readable | self.unreadable)
            return HIDDEN_DAG if named else m.group(0)

        return _TASK_NAME.sub(replace, text)


def name_scrubber(session, readable) -> NameScrubber:
    """The :class:`NameScrubber` of a user who may read the DAGs ``readable`` (the other DAGs: Airflow's DAG table)."""
    from airflow.models import DagModel

    return NameScrubber(readable, session.scalars(select(DagModel.dag_id)))


def problem_line(exc: Exception, dag_id: str, readable) -> str:
    """A record that could not be read, as a problem line: its error only for a DAG the user may read."""
    return str(exc) if dag_id in readable else "a record of a DAG you cannot see could not be read"


def own_identity(record: Any, dag_id: str, run_id: str, task_id: str, map_index: int) -> None:
    """A record is attributed to the task instance whose XCom it is, never to the DAG, run or task it names
    (any DAG author can push any XCom: a record naming another DAG would draw its work under that DAG's name)."""
    for attr, value in (("dag_id", dag_id), ("run_id", run_id), ("task_id", task_id), ("map_index", map_index)):
        if isinstance(record, dict):
            record[attr] = value
        else:
            setattr(record, attr, value)


class HostCheck:
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
