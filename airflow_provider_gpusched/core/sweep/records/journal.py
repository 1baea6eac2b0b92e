"""The Optuna study's journal in a sweep's ``search/`` folder: opened for Optuna, and named with its first bad line
and the way forward when Optuna cannot replay it."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from airflow_provider_gpusched.core.errors import GpuschedError

if TYPE_CHECKING:
    pass


#: the Optuna study's file in a sweep's ``search/`` folder
JOURNAL_FILE = "optuna.journal"


def open_journal(path: str) -> Any:
    """Optuna's ``JournalStorage`` on the journal ``path``. A journal Optuna cannot replay (a line that is not JSON
    or not one of its records, other than a last line cut by a crash, which Optuna leaves out) is refused with a
    :class:`GpuschedError` that names the file, the line and what to do; never Optuna's raw error."""
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    try:
        return JournalStorage(JournalFileBackend(path))
    except (ValueError, KeyError, TypeError, IndexError, AttributeError, RecursionError) as exc:
        raise GpuschedError(bad_journal(path, exc)) from None


def bad_journal(path: str, exc: BaseException) -> str:
    """What to say of a journal Optuna could not read: the file, its first line that is not a record, and the
    way forward."""
    where = ""
    try:
        with open(path, "rb") as fh:
            for number, line in enumerate(fh, 1):
                try:
                    ok = line.endswith(b"\n") and isinstance(json.loads(line), dict)
                except (ValueError, RecursionError):
                    ok = False
                if not ok:
                    where = f" (line {number})"
                    break
    except OSError:
        pass
    why = str(exc)[:200] or type(exc).__name__
    return (
        f"{path}: the Optuna study of the sweep cannot be read{where}: {why}. To go on, move it aside "
        f"(mv {path} {path}.bad) and run the sweep again: the search rebuilds the study from the records of the "
        "trials that ended (their folders under trials/), so the sampler learns from them, they count towards the "
        "trials asked for, and those that succeeded or were pruned do not run again; the log says how many it "
        "rebuilt and names any whose records cannot be read"
    )
