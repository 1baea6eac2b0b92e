"""Which Airflow task a piece of running work belongs to, as every launched job and lease records it.

A :class:`WorkTag` travels with the work: in a local GPU lease's record (``"work"``) and in a Slurm job's
``--comment`` (fields ``dag=``, ``ti=``, ``map=``, ``sweep=``, ``class=`` next to the keys of
:func:`~airflow_provider_gpusched.core.slurm.job.job_comment`). ``gpusched queue`` reads it back to say what
runs for which DAG run, task, map index and sweep, and to stop it by any of those. No Airflow import: the
operators fill it from their task instance (:meth:`WorkTag.of_task`).
"""

from __future__ import annotations

import base64
import re
from dataclasses import asdict, dataclass
from typing import Annotated, Any

from airflow_provider_gpusched.core.records import RecordType, record_class, says

#: longest value kept per field (a Slurm comment and a lease file stay small; Airflow's own ids are <= 250)
MAX_FIELD = 250
_PLAIN = re.compile(r"^[A-Za-z0-9_.\-]+$")


def _text(value: Any) -> str:
    return str(value)[:MAX_FIELD] if value is not None else ""


TagText = Annotated[str, says(f"a string of at most {MAX_FIELD} characters", max_length=MAX_FIELD)]
Number = Annotated[int, says("a whole number")]


@record_class
@dataclass(frozen=True)
class WorkTag:
    dag_id: TagText = ""
    run_id: TagText = ""
    task_id: TagText = ""
    map_index: Number = -1
    try_number: Number = 0
    sweep: TagText = ""
    trial: TagText = ""  # the trial's label (local leases only: a Slurm comment has no room for it)
    job_class: TagText = ""
    group: TagText = ""  # the quota group it counts for (docs/quotas.md); '' when quotas are off

    @classmethod
    def of_task(cls, ti: Any, *, sweep: str = "", trial: str = "", job_class: str = "", group: str = "") -> WorkTag:
        """The tag of an Airflow task instance (anything with ``dag_id``, ``run_id``, ``task_id``,
        ``map_index``, ``try_number``)."""
        map_index = getattr(ti, "map_index", -1)
        return cls(
            dag_id=_text(ti.dag_id),
            run_id=_text(ti.run_id),
            task_id=_text(ti.task_id),
            map_index=map_index if isinstance(map_index, int) and map_index >= 0 else -1,
            try_number=int(getattr(ti, "try_number", 0) or 0),
            sweep=_text(sweep),
            trial=_text(trial),
            job_class=_text(job_class),
            group=_text(group),
        )

    @property
    def task(self) -> str:
        """``dag.task[map]``, the way people name a task instance."""
        if not self.dag_id:
            return ""
        return f"{self.dag_id}.{self.task_id}" + (f"[{self.map_index}]" if self.map_index >= 0 else "")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any, source: str = "work tag") -> WorkTag:
        """A tag read back from disk, every key checked (:class:`BadRecordError` names the key)."""
        return WORK_TAG.read(data, source)

    # -- in a Slurm comment --------------------------------------------------------------------------
    def comment_fields(self) -> list[str]:
        """``name=value`` parts for a Slurm comment (the run is already there, as ``run=``). A value that is
        not plain ASCII letters, digits, ``_.-`` is written as ``~`` + base64url."""
        parts = []
        for name, value in (
            ("dag", self.dag_id),
            ("ti", self.task_id),
            ("sweep", self.sweep),
            ("class", self.job_class),
            ("group", self.group),
        ):
            if value:
                parts.append(f"{name}={_encode(value)}")
        if self.dag_id and self.map_index >= 0:
            parts.append(f"map={self.map_index}")
        return parts

    @classmethod
    def from_comment(cls, fields: dict[str, str]) -> WorkTag:
        """The tag in the fields of a parsed comment (missing fields stay empty: jobs submitted by an older
        version of this provider carry only ``run``)."""
        map_text = fields.get("map", "")
        try_text = fields.get("try", "")
        return cls(
            dag_id=_decode(fields.get("dag", "")),
            run_id=fields.get("run", "")[:MAX_FIELD],
            task_id=_decode(fields.get("ti", "")),
            map_index=int(map_text) if map_text.isdigit() else -1,
            try_number=int(try_text) if try_text.isdigit() else 0,
            sweep=_decode(fields.get("sweep", "")),
            job_class=_decode(fields.get("class", "")),
            group=_decode(fields.get("group", "")),
        )


WORK_TAG = RecordType(WorkTag, name="work tag")


def _encode(value: str) -> str:
    if _PLAIN.match(value):
        return value
    return "~" + base64.urlsafe_b64encode(value.encode()).decode().rstrip("=")


def _decode(value: str) -> str:
    if not value.startswith("~"):
        return value[:MAX_FIELD] if _PLAIN.match(value) else ""
    body = value[1:]
    try:
        return base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)).decode()[:MAX_FIELD]
    except (ValueError, UnicodeDecodeError):
        return ""
