"""Slurm stop marks: ``gpusched queue stop`` leaves one next to a job's output when it cancels the job
(core/slurm/backend.py), so the job's operator reads that it was stopped on purpose (core/slurm/finish.py).
A mark holds the :class:`~airflow_provider_gpusched.core.stops.StopRequest` (core/stops.py)."""

from __future__ import annotations

import os
import stat

from airflow_provider_gpusched.core.errors import GpuschedError
from airflow_provider_gpusched.core.safe_files import UnsafePathError, read_json_record, write_json_atomic
from airflow_provider_gpusched.core.stops import StopRequest

#: a Slurm job's stop mark, next to its output file: ``gpusched-stop-<job id>.json``
SLURM_STOP_MARK = "gpusched-stop-{job_id}.json"


def slurm_stop_mark(output_path: str, job_id: str) -> str:
    """Where the stop mark of Slurm job ``job_id`` (its array's id for an array job) goes: the folder of
    its output file, which the task's operator reads the output tail from."""
    return os.path.join(os.path.dirname(output_path), SLURM_STOP_MARK.format(job_id=job_id.split("_")[0]))


def write_slurm_stop_mark(output_path: str, job_id: str, request: StopRequest) -> str:
    """Write the mark; refused (:class:`UnsafePathError`) unless the folder is this user's own and nobody
    else may write in it."""
    path = slurm_stop_mark(output_path, job_id)
    folder = os.path.dirname(path)
    st = os.lstat(folder)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or stat.S_IMODE(st.st_mode) & 0o022:
        raise UnsafePathError(
            f"{folder}: not a directory of this user's that only it may write to; no stop mark written there"
        )
    write_json_atomic(path, request.to_dict(), 0o600)
    return path


def read_slurm_stop_mark(output_path: str, job_id: str) -> StopRequest | None:
    """The stop mark of a job that ended, or None (no mark, or one that cannot be trusted: a link, not ours,
    malformed)."""
    if not output_path or not job_id:
        return None
    path = slurm_stop_mark(output_path, job_id)
    try:
        if os.lstat(path).st_uid != os.geteuid():
            return None
        return StopRequest.from_record(read_json_record(path), path)
    except (OSError, GpuschedError):
        return None
