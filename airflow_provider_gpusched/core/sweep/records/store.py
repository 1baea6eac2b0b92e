"""Where a sweep's trials live on disk, and what state each is in.

Layout under the results root (a shared file system when trials run on Slurm nodes)::

    <root>/<sweep>/manifest.json            what to run: target, objective, the trials of this run
    <root>/<sweep>/trials/<folder>/         one per trial (folder = label + id, safe for any value)
        params.json   the parameters (nested as the spec wrote them)
        status.json   {"state": "running"|"succeeded"|"failed"|"invalid"|"timeout"|"pruned", times, host, GPUs (CUDA_VISIBLE_DEVICES),
                      Slurm job, log path, run, exit code, error}
        result.json   the metrics the trial wrote (or its callable returned); without it, result.pkl
                      (DI-toolkit's pickled dict, also in hpo/) is read, plain values only
        output.log    the trial's output (a command's stdout and stderr; what a callable prints)
        reports.jsonl its intermediate reports, one line each (core/sweep/records/reports.py); a re-run moves the
                      previous attempt's to reports.previous.jsonl
        claim.lock    flock'ed by the process running the trial: one runner at a time, whichever DAG run
    <root>/<sweep>/summary.json, leaderboard.json, best.json

A trial whose status is ``succeeded`` or ``pruned`` (stopped early by the sweep's pruning rule) is skipped by
the next run of the sweep unless ``force_rerun``;
failed, ``invalid`` (it ran, but its result is unusable: not JSON, no objective, NaN), interrupted
(``running``) and new trials run. Two DAG runs of one sweep never run a trial twice: the runner holds the
trial's claim (an exclusive ``flock``, released by the kernel if it dies), a second runner waits for it and
takes over its outcome.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal, overload

from airflow_provider_gpusched.core.errors import GpuschedError, InvalidArgumentError
from airflow_provider_gpusched.core.safe_files import brief_fd, write_json_atomic
from airflow_provider_gpusched.core.sweep.parts.expand import Trial, nested
from airflow_provider_gpusched.core.sweep.records.reports import (
    PREVIOUS_REPORTS_FILE,
    REPORTS_FILE,
    read_reports,
    summarise,
)

STATES = ("defined", "waiting", "running", "succeeded", "failed", "invalid", "timeout", "pruned", "stopped", "skipped")
#: stopped: started by a run that was stopped (``gpusched queue stop``) before the trial recorded an outcome; run
#: again by the next run, and not counted against ``max_failed_trials``
#: one run's view (core/sweep/results/view.py) also has ``not_started``, never on disk: a trial that run planned but never
#: started (the run was stopped or failed first), whose record, if any, is an earlier run's
RUN_STATES = (*STATES[:-1], "not_started", "skipped")
FINAL_STATES = ("succeeded", "failed", "invalid", "timeout", "pruned", "stopped")
#: the final states that count against ``max_failed_trials`` (timeout: stopped at its time limit, on any backend)
FAILED_STATES = ("failed", "invalid", "timeout")
#: the DAGs that plan in a sweep's folder (TrialStore.claim_for_dag)
DAGS_FILE = "dags.json"
DONE_STATES = ("succeeded", "pruned")  # not run again by a later run of the sweep (unless force_rerun)
#: where a re-run keeps the outcome it may replace (status.json's ``previous`` holds its record): the outcome
#: comes back if the re-run ends without one of its own (stopped, its runner died)
PREVIOUS_RESULT_FILE = "result.previous.json"
CLAIM_FILE = "claim.lock"
#: a trial's output (in its folder): what the Sweeps tab's trial panel shows the tail of
OUTPUT_LOG_FILE = "output.log"
_SWEEP_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


#: a sweep's name is its task group id: Airflow task ids (group.round_N.trial...) must stay within 250 chars
MAX_SWEEP_NAME = 100


def check_sweep_name(name: Any, where: str = "name") -> str:
    if not isinstance(name, str) or not _SWEEP_NAME.match(name) or ".." in name:
        raise InvalidArgumentError(where, name, "a sweep name of letters, digits, '_', '-', '.' (no '/', no '..')")
    if len(name) > MAX_SWEEP_NAME:
        raise InvalidArgumentError(
            where,
            f"{name[:40]}... ({len(name)} characters)",
            f"at most {MAX_SWEEP_NAME} characters (it becomes the Airflow task group id)",
        )
    return name


def write_json(path: str, data: Any) -> None:
    """A results file (readable as the umask allows, for the user's own tools), written atomically."""
    write_json_atomic(path, data, None, indent=1, default=str)


def read_json(path: str) -> Any:
    try:
        with open(path) as fh:
            return json.load(fh)
    except FileNotFoundError:
        return None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        return {"_unreadable": f"{path}: {exc}"}
    except RecursionError:
        return {"_unreadable": f"{path}: nested too deeply to read"}


#: what is read back of a file a trial wrote (result.json, result.pkl): at most this many bytes, nested at most
#: this deep, expanding to at most this many values (a small pickle can share one list a billion times)
MAX_RESULT_BYTES = 16 * 2**20
MAX_RESULT_DEPTH = 64
MAX_RESULT_VALUES = 100_000


def _open_output(path: str, folder: str) -> tuple[Any, str]:
    """A file the trial wrote, opened for reading: only a regular file inside ``folder`` reached without a
    symbolic link, and not bigger than MAX_RESULT_BYTES. (file object or None, why not)."""
    from airflow_provider_gpusched.core.safe_files import is_under, open_regular

    if not is_under(path, folder):
        return None, f"{path}: not inside the trial folder (a symbolic link on the way?)"
    try:
        fh = os.fdopen(open_regular(path, os.O_RDONLY), "rb")
    except FileNotFoundError:
        return None, ""
    except (OSError, GpuschedError) as exc:
        why = "a symbolic link (not followed)" if getattr(exc, "errno", None) == 40 else str(exc)
        return None, f"{path}: {why}"
    size = os.fstat(fh.fileno()).st_size
    if size > MAX_RESULT_BYTES:
        fh.close()
        return None, f"{path}: {size} bytes, more than the {MAX_RESULT_BYTES // 2**20} MiB a result may have"
    return fh, ""


def read_result_json(path: str, folder: str) -> Any:
    """A trial's ``result.json`` (None when there is none), bounded: see :func:`_open_output`, and nested at most
    MAX_RESULT_DEPTH deep; otherwise ``{"_unreadable": why}`` (the trial is then invalid, saying why)."""
    fh, why = _open_output(path, folder)
    if fh is None:
        return {"_unreadable": why} if why else None
    with fh:
        data = fh.read(MAX_RESULT_BYTES + 1)
    from airflow_provider_gpusched.core.safe_files import json_depth

    if json_depth(data, MAX_RESULT_DEPTH) > MAX_RESULT_DEPTH:
        return {"_unreadable": f"{path}: nested deeper than {MAX_RESULT_DEPTH} levels"}
    try:
        return json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        return {"_unreadable": f"{path}: not valid JSON ({exc})"}


class _PlainDict(dict[str, Any]):
    """What a pickled EasyDict is read as: its items (the attributes it also pickles are the same values)."""

    def __setstate__(self, state: Any) -> None:
        pass


#: dict subclasses whose pickles are read as plain dicts (their own class is never imported or run)
_PICKLE_DICTS = {("easydict", "EasyDict"), ("addict.addict", "Dict"), ("munch", "Munch")}

#: what a ``result.pkl`` may hold: plain values, numpy scalars and arrays, nothing that runs code when loaded
_PICKLE_ALLOWED = (
    {("builtins", n) for n in ("dict", "list", "tuple", "set", "frozenset", "int", "float", "str", "bool", "complex")}
    | {("collections", "OrderedDict")}
    | {(m, n) for m in ("numpy.core.multiarray", "numpy._core.multiarray") for n in ("scalar", "_reconstruct")}
    | {("numpy", "dtype"), ("numpy", "ndarray")}
)


def read_pickled_result(path: str, folder: str | None = None) -> Any:
    """A DI-toolkit ``result.pkl`` as plain JSON values; a file that holds anything but plain values (which
    could run code when unpickled) is not loaded: the result is then marked unreadable, saying why. Bounded as
    a ``result.json`` is (``folder``: the trial folder it must lie in), and at most MAX_RESULT_VALUES values
    once shared references are expanded."""
    import pickle

    class PlainValues(pickle.Unpickler):
        def find_class(self, module: str, name: str) -> Any:
            if (module, name) in _PICKLE_DICTS:  # EasyDict (DI-toolkit's results) and the like: read as a dict
                return _PlainDict
            if (module, name) not in _PICKLE_ALLOWED:
                raise pickle.UnpicklingError(
                    f"it holds a {module}.{name}; only dicts (EasyDict too), lists, "
                    f"numbers, strings and numpy scalars and arrays are read"
                )
            return super().find_class(module, name)

    fh, why = _open_output(path, folder or os.path.dirname(os.path.abspath(path)))
    if fh is None:
        return {"_unreadable": why or f"{path}: not found"}
    try:
        with fh:
            value = PlainValues(fh).load()
        return _plain(value, [MAX_RESULT_VALUES], 0)
    except _TooBig as exc:
        return {"_unreadable": f"{path}: {exc}"}
    except (
        OSError,
        pickle.UnpicklingError,
        EOFError,
        ValueError,
        TypeError,
        AttributeError,
        ImportError,
        IndexError,
        KeyError,
        MemoryError,
        RecursionError,
    ) as exc:
        return {"_unreadable": f"{path}: {type(exc).__name__}: {exc}"[:1000]}


class _TooBig(Exception):
    pass


def _plain(value: Any, budget: list[int], depth: int) -> Any:
    """``value`` as JSON values; :class:`_TooBig` past MAX_RESULT_DEPTH levels or ``budget`` values."""
    budget[0] -= 1
    if budget[0] < 0:
        raise _TooBig(f"more than {MAX_RESULT_VALUES} values (shared references counted each time they are used)")
    if depth > MAX_RESULT_DEPTH:
        raise _TooBig(f"nested deeper than {MAX_RESULT_DEPTH} levels")
    if isinstance(value, dict):
        return {str(k): _plain(v, budget, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_plain(v, budget, depth + 1) for v in value]
    if hasattr(value, "tolist") and hasattr(value, "ndim") and value.ndim > 0:  # a numpy array
        if value.size > budget[0]:
            raise _TooBig(f"more than {MAX_RESULT_VALUES} values (a numpy array of {value.size})")
        budget[0] -= value.size
        return _plain(value.tolist(), [MAX_RESULT_VALUES], depth)
    if hasattr(value, "item") and callable(value.item):  # a numpy scalar
        return value.item()
    if isinstance(value, complex):
        return str(value)
    return value


def folder_dags(folder: str) -> list[str] | None:
    """The DAGs that planned in sweep folder ``folder`` (its ``dags.json``), or None when it says none or cannot be
    read as that record: what a reader checks before it shows a folder's files under a DAG's name."""
    from airflow_provider_gpusched.core.safe_files import BadRecordError, read_json_record

    try:
        record = read_json_record(os.path.join(folder, DAGS_FILE), 1 << 20)
    except (OSError, BadRecordError):
        return None
    dags = record.get("dags") if isinstance(record, dict) else None
    if not isinstance(dags, list) or not all(isinstance(d, str) for d in dags):
        return None
    return dags


def folder_refusal(folder: str, dag_id: str, root: str, *, outside: str, unlisted: str) -> str:
    """Why the files of ``folder`` (a sweep folder, a Slurm task folder) are not shown under DAG ``dag_id``: ''
    when it lies under ``root`` (the setting that keeps such folders) and its ``dags.json`` lists that DAG
    (:func:`folder_dags`), else ``outside`` or ``unlisted``, with ``{folder}``, ``{dag_id}`` and ``{root}`` filled in.
    A record naming a folder is an XCom any DAG author can push: naming another DAG's folder must not show that
    DAG's files to this DAG's readers."""
    from airflow_provider_gpusched.core.safe_files import is_under

    if not is_under(folder, root):
        return outside.format(folder=folder, dag_id=dag_id, root=root)
    dags = folder_dags(folder)
    if dags is None or dag_id not in dags:
        return unlisted.format(folder=folder, dag_id=dag_id, root=root)
    return ""


def check_results_folders(root: str, folder: str) -> None:
    """The checks the lease directory gets, for a sweep's results: a results root that every user may write to
    (e.g. 1777) is refused (another user could plant ``<root>/<sweep>`` as a link to a place of their choice),
    and an existing sweep folder must be a real directory of this user's (or root's) that others cannot write
    to. :class:`UnsafePathError` names the path and the fix."""
    import stat

    from airflow_provider_gpusched.core.safe_files import UnsafePathError, check_path_chain

    check_path_chain(root, "results_root")  # a root planted as a link, or replaceable by another user
    try:
        st = os.stat(root)
    except FileNotFoundError:
        return
    if stat.S_IMODE(st.st_mode) & stat.S_IWOTH:
        raise UnsafePathError(
            f"results_root {root} is writable by every user (mode {stat.S_IMODE(st.st_mode):04o}): "
            f"another user could plant a link in it that sends this sweep's files elsewhere. Use a "
            f"directory of your own (chmod 700, or a group directory: chmod 2770)"
        )
    try:
        st = os.lstat(folder)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode):
        raise UnsafePathError(
            f"sweep folder {folder} is a symbolic link (to {os.readlink(folder)!r}); refusing to "
            f"follow it: another user may have planted it. Remove it, or choose another results_root"
        )
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafePathError(f"sweep folder {folder} exists and is not a directory")
    if st.st_uid not in (os.geteuid(), 0) and stat.S_IMODE(st.st_mode) & stat.S_IWGRP == 0:
        raise UnsafePathError(
            f"sweep folder {folder} belongs to uid {st.st_uid}, not to this user: another user's "
            f"sweep of the same name, or a planted folder. Choose another sweep name or results_root"
        )
    if stat.S_IMODE(st.st_mode) & stat.S_IWOTH:
        raise UnsafePathError(
            f"sweep folder {folder} is writable by every user (mode {stat.S_IMODE(st.st_mode):04o}); chmod o-w it"
        )


class TrialStore:
    def __init__(self, root: str, sweep: str) -> None:
        if not isinstance(root, str) or not root:
            raise InvalidArgumentError("results_root", root, "a directory path")
        self.root = os.path.abspath(os.path.expanduser(root))
        for path in (self.root, os.path.join(self.root, sweep if isinstance(sweep, str) else "")):
            if os.path.exists(path) and not os.path.isdir(path):
                raise InvalidArgumentError("results_root", root, f"a directory ({path} is a file)")
        self.sweep = check_sweep_name(sweep)
        self.dir = os.path.join(self.root, self.sweep)
        check_results_folders(self.root, self.dir)

    # -- paths -----------------------------------------------------------------------------------------
    def path(self, name: str) -> str:
        return os.path.join(self.dir, name)

    def trial_dir(self, trial: Trial) -> str:
        path = os.path.join(self.dir, "trials", trial.folder)
        assert os.path.dirname(path) == os.path.join(self.dir, "trials")  # folder names never contain "/"
        return path

    # -- per-trial state -------------------------------------------------------------------------------
    def status(self, trial: Trial) -> dict[str, Any] | None:
        """The trial's status record; None when it has none (or it is not a mapping: never a half-written one)."""
        status = read_json(os.path.join(self.trial_dir(trial), "status.json"))
        return status if isinstance(status, dict) else None

    def state(self, trial: Trial) -> str:
        return self.state_of(self.status(trial))

    @staticmethod
    def state_of(status: dict[str, Any] | None) -> str:
        """The state a trial's ``status.json`` (as :meth:`status` read it) says."""
        state = status.get("state") if isinstance(status, dict) else None
        return state if state in ("running", *FINAL_STATES) else "waiting"

    def result(self, trial: Trial) -> Any:
        """``result.json``; without it, DI-toolkit's ``result.pkl`` (in the folder or its ``hpo/``)."""
        folder = self.trial_dir(trial)
        result = read_result_json(os.path.join(folder, "result.json"), folder)
        if result is None:
            for path in (os.path.join(folder, "result.pkl"), os.path.join(folder, "hpo", "result.pkl")):
                if os.path.lexists(path):
                    return read_pickled_result(path, folder)
        return result

    def reports(self, trial: Trial) -> dict[str, Any] | None:
        """A summary of the trial's intermediate reports (count, last step and metrics, last checkpoint,
        problems of lines that are not reports), or None when it reported nothing."""
        folder = self.trial_dir(trial)
        found, problems = read_reports(os.path.join(folder, REPORTS_FILE), folder)  # no link out of the folder
        summary = summarise(found)
        if problems:
            summary = {**(summary or {"count": 0}), "problems": problems[:5]}
        return summary

    def write_result(self, trial: Trial, result: Any) -> None:
        """Store a callable's return value as the trial's ``result.json`` (strict JSON: NaN is refused)."""
        write_json_atomic(os.path.join(self.trial_dir(trial), "result.json"), result, None, allow_nan=False)

    def prepare(self, trial: Trial) -> str:
        """The trial's folder, with its ``params.json`` (written once: the folder is named by the trial id,
        a hash of the parameters, so they never change)."""
        folder = self.trial_dir(trial)
        params = os.path.join(folder, "params.json")
        if not os.path.isfile(params):
            os.makedirs(folder, exist_ok=True)
            write_json(params, nested(trial.params))
        return folder

    def mark_running(self, trial: Trial, **extra: Any) -> str:
        """Start the trial's record for the run ``extra["run"]``. An outcome it had (from an earlier run, or an
        earlier attempt) is kept aside, whole: its status under ``previous``, its result as result.previous.json,
        its curve as reports.previous.jsonl, so that :meth:`end_unfinished` can put it back if this start ends
        without an outcome of its own."""
        folder = self.prepare(trial)
        previous = self.status(trial) or {}
        if not isinstance(previous, dict) or "_unreadable" in previous:
            previous = {}
        kept = None
        if previous.get("state") in FINAL_STATES and previous.get("state") != "stopped":
            kept = {k: v for k, v in previous.items() if k != "previous"}
            with contextlib.suppress(FileNotFoundError):
                os.replace(os.path.join(folder, "result.json"), os.path.join(folder, PREVIOUS_RESULT_FILE))
        elif previous.get("state") == "running" and isinstance(previous.get("previous"), dict):
            kept = previous["previous"]  # a restart after a dead runner: the outcome kept aside is still the one
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.join(folder, "result.json"))
        with contextlib.suppress(FileNotFoundError):  # an earlier attempt's curve is kept beside, not mixed in
            if kept is not None and previous.get("state") == "running":  # (the kept outcome's curve stays there)
                os.remove(os.path.join(folder, REPORTS_FILE))
            else:
                os.replace(os.path.join(folder, REPORTS_FILE), os.path.join(folder, PREVIOUS_REPORTS_FILE))
        # which DAG run the kept-aside curve (reports.previous.jsonl) belongs to: the UI draws a run's own curves
        previous_run = previous.get("run") if isinstance(previous.get("run"), str) else None
        if kept is not None and previous.get("state") == "running":
            previous_run = kept.get("run") if isinstance(kept.get("run"), str) else None
        write_json(
            os.path.join(folder, "status.json"),
            {
                "state": "running",
                "trial_id": trial.trial_id,
                "label": trial.label,
                "started": time.time(),
                "host": os.uname().nodename,
                "pid": os.getpid(),
                **where_running(),
                "attempts": int(previous.get("attempts", 0) or 0) + 1,
                "previous_run": previous_run,
                **({"previous": kept} if kept is not None else {}),
                **extra,
            },
        )
        return folder

    def end_unfinished(self, trial: Trial, *, run: str | None, state: str, reason: str) -> str | None:
        """The one way a run ends a trial of its plan that recorded no outcome of its own (its task failed or
        was stopped, its runner died). Returns the state written, or None when the record is left as it is.

        A run only ever changes its own record:
        - a trial somebody is running now (its claim is held), or whose record is final (an outcome stands,
          whichever run established it), is left alone;
        - a trial ``running`` for another DAG run is that run's to settle;
        - a trial this run started gets ``state`` (``stopped``, ``failed``, ``timeout``) with ``reason``, unless
          it had an outcome before this run started it again (a forced re-run): then that outcome is put back,
          with an ``interrupted`` note saying which run stopped its re-run and why (``timeout`` is the trial's own
          outcome and replaces it);
        - a trial nobody started: a stop leaves it waiting (it runs next time); another end marks it with
          ``reason``, so that its row says why it never ran."""
        if self.claim_holder(trial) is not None:
            return None
        status = self.status(trial)
        status = status if isinstance(status, dict) and "_unreadable" not in status else {}
        current = status.get("state")
        if current in FINAL_STATES:
            return None
        if current == "running":
            if status.get("run") and run and status.get("run") != run:
                return None
            kept = status.get("previous")
            if isinstance(kept, dict) and kept.get("state") in FINAL_STATES and state != "timeout":
                self._restore(
                    trial,
                    kept,
                    {
                        "run": run,
                        "state": state,
                        "reason": reason,
                        "started": status.get("started"),
                        "ended": time.time(),
                    },
                )
                return str(kept["state"])
        elif state == "stopped":
            return None
        self.mark_finished(
            trial, ok=False, exit_code=None, error=reason, state=state, **({} if current == "running" else {"run": run})
        )
        return state

    def _restore(self, trial: Trial, kept: Mapping[str, Any], interrupted: Mapping[str, Any]) -> None:
        folder = self.trial_dir(trial)
        with contextlib.suppress(FileNotFoundError):
            os.replace(os.path.join(folder, PREVIOUS_RESULT_FILE), os.path.join(folder, "result.json"))
        with contextlib.suppress(FileNotFoundError):
            os.replace(os.path.join(folder, REPORTS_FILE), os.path.join(folder, "reports.interrupted.jsonl"))
        with contextlib.suppress(FileNotFoundError):
            os.replace(os.path.join(folder, PREVIOUS_REPORTS_FILE), os.path.join(folder, REPORTS_FILE))
        write_json(os.path.join(folder, "status.json"), {**kept, "interrupted": dict(interrupted)})

    def mark_finished(
        self,
        trial: Trial,
        *,
        ok: bool,
        result: Any = None,
        exit_code: int | None = None,
        error: str | None = None,
        state: str | None = None,
        note: str | None = None,
        run: str | None = None,
    ) -> dict[str, Any]:
        """Record the trial's own outcome (``run``: the DAG run it is recorded for, where no start recorded it)."""
        folder = self.prepare(trial)
        if result is not None:
            write_json(os.path.join(folder, "result.json"), result)
        status = self.status(trial) or {}
        if not isinstance(status, dict) or "_unreadable" in status:
            status = {}
        status.pop("previous", None)  # a new outcome replaces the one kept aside for good
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.join(folder, PREVIOUS_RESULT_FILE))
        status.pop("interrupted", None)
        if run is not None:
            status["run"] = run
        ended = time.time()
        status.update(
            {
                "state": state or ("succeeded" if ok else "failed"),
                "trial_id": trial.trial_id,
                "label": trial.label,
                "ended": ended,
                "exit_code": exit_code,
                "error": error,
            }
        )
        if note:
            status["note"] = note
        status["seconds"] = round(ended - status["started"], 3) if "started" in status else None
        write_json(os.path.join(folder, "status.json"), status)
        return status

    # -- one runner per trial -------------------------------------------------------------------------
    @overload
    def claim(self, trial: Trial, holder: Mapping[str, Any], *, wait: Literal[True]) -> TrialClaim: ...
    @overload
    def claim(self, trial: Trial, holder: Mapping[str, Any], *, wait: bool) -> TrialClaim | None: ...
    def claim(self, trial: Trial, holder: Mapping[str, Any], *, wait: bool) -> TrialClaim | None:
        """Take the trial's claim (an exclusive ``flock`` on ``claim.lock``, released by the kernel when the
        holder dies). ``wait=False``: None when another process holds it; ``wait=True``: block until free."""
        folder = self.prepare(trial)
        path = os.path.join(folder, CLAIM_FILE)
        fd = os.open(path, os.O_CREAT | os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            os.close(fd)
            return None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(dict(holder), default=str).encode(), 0)
        return TrialClaim(fd, path)

    def claim_holder(self, trial: Trial) -> dict[str, Any] | None:
        """Who runs the trial now (``{"host", "pid", "run", "since"}``), or None when nobody does."""
        path = os.path.join(self.trial_dir(trial), CLAIM_FILE)
        try:
            # held a moment: a process forked meanwhile must not keep the shared lock (brief_fd)
            with brief_fd(lambda: os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)) as fd:
                try:
                    fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                except BlockingIOError:
                    try:
                        holder = json.loads(os.pread(fd, 65536, 0) or b"{}")
                    except ValueError:
                        holder = None
                    return holder if isinstance(holder, dict) else {}
                return None
        except OSError:
            return None

    # -- the sweep as a whole --------------------------------------------------------------------------
    def claim_for_dag(self, dag_id: str, shared: bool = False) -> None:
        """Record that DAG ``dag_id`` uses this sweep's folder (``dags.json``). A folder another DAG planned in is
        refused (its Sweeps tab would show that DAG's trials to whoever may read this one) unless ``shared``
        (``shared_with_other_dags``). A folder from before this record was kept is taken over by its next DAG."""
        from airflow_provider_gpusched.core.safe_files import BadRecordError, read_json_record

        path = self.path(DAGS_FILE)
        try:
            record = read_json_record(path, 1 << 20)
        except FileNotFoundError:
            record = {"dags": []}
        except (OSError, BadRecordError) as exc:
            raise GpuschedError(
                f"sweep {self.sweep}: {path} cannot be read ({exc}); remove it if the folder is yours"
            ) from None
        dags = record.get("dags") if isinstance(record, dict) else None
        if not isinstance(dags, list) or not all(isinstance(d, str) for d in dags):
            raise GpuschedError(f"sweep {self.sweep}: {path}: key 'dags': expected a list of DAG ids")
        if dag_id in dags:
            return
        if dags and not shared:
            raise GpuschedError(
                f"sweep {self.sweep}: its results folder {self.dir} belongs to DAG {dags[0]!r}; DAG {dag_id!r} "
                f"cannot use it (each would show the other's trials). Give this sweep another name or results_root, "
                f"or set shared_with_other_dags=True in both DAGs' specs to share it on purpose"
            )
        self.write(DAGS_FILE, {"dags": [*dags, dag_id][:1000]})

    def plan(self, trials: Sequence[Trial], force_rerun: bool = False) -> tuple[list[Trial], list[Trial]]:
        """(to run, skipped): succeeded and pruned trials are skipped unless ``force_rerun``."""
        if force_rerun:
            return list(trials), []
        run: list[Trial] = []
        skipped: list[Trial] = []
        for trial in trials:
            (skipped if self.state(trial) in DONE_STATES else run).append(trial)
        return run, skipped

    def records(self, trials: Iterable[Trial]) -> list[dict[str, Any]]:
        out = []
        for trial in trials:
            status = self.status(trial) or {}
            out.append(
                {
                    "index": trial.index,
                    "trial_id": trial.trial_id,
                    "label": trial.label,
                    "params": nested(trial.params),
                    "state": self.state(trial),
                    "result": self.result(trial),
                    "seconds": status.get("seconds"),
                    "error": status.get("error"),
                    "folder": self.trial_dir(trial),
                    **{
                        k: status.get(k)
                        for k in ("host", "gpus", "gpu_share", "slurm_job", "log", "run", "ended", "interrupted")
                    },
                    "reports": self.reports(trial),
                }
            )
        return out

    def write(self, name: str, data: Any) -> str:
        path = self.path(name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        write_json(path, data)
        return path

    def read(self, name: str) -> Any:
        return read_json(self.path(name))


def where_running() -> dict[str, str | float | None]:
    """The GPUs this process was given (``CUDA_VISIBLE_DEVICES`` as set by the local-GPU launcher or Slurm)
    and its Slurm job (``<array job>_<task>`` for an array task), for a trial's status."""
    env = os.environ
    job = env.get("SLURM_JOB_ID")
    if env.get("SLURM_ARRAY_JOB_ID") and env.get("SLURM_ARRAY_TASK_ID"):
        job = f"{env['SLURM_ARRAY_JOB_ID']}_{env['SLURM_ARRAY_TASK_ID']}"
    gpus = env.get("CUDA_VISIBLE_DEVICES")
    return {
        "gpus": gpus,
        "gpu_share": gpu_share_from_env(gpus, env.get("GPUSCHED_GPU_MEMORY_FRACTION")),
        "slurm_job": job,
    }


def gpu_share_from_env(gpus: str | None, fraction: str | None) -> float | None:
    """How many GPUs the trial holds, a memory slice counted as its fraction (the launcher's
    ``GPUSCHED_GPU_MEMORY_FRACTION``, core/gpu/accounting.gpu_share): 2 GPUs at 0.25 each are 0.5 GPU. None when
    no GPUs are named."""
    count = len([g for g in (gpus or "").split(",") if g.strip()])
    if not count:
        return None
    try:
        share = float(fraction) if fraction else 1.0
    except ValueError:
        share = 1.0
    return round(count * (share if 0.0 < share <= 1.0 else 1.0), 4)


class TrialClaim:
    """A held trial claim; :meth:`release` (or the process ending) frees it."""

    def __init__(self, fd: int, path: str) -> None:
        self.fd, self.path = fd, path

    def release(self) -> None:
        if self.fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = -1


def describe_holder(holder: Mapping[str, Any] | None) -> str:
    if not holder:
        return "another process"
    where = f"pid {holder.get('pid', '?')} on {holder.get('host', '?')}"
    return f"DAG run {holder['run']} ({where})" if holder.get("run") else where


def state_in_run(record: Mapping[str, Any], run: str | None, planned_at: float | None = None) -> str:
    """A trial's state as DAG run ``run`` knows it, from its record (:meth:`TrialStore.records`). The record is
    this run's when this run wrote it, or when another run finished the trial after this run was planned (this run's
    runner waited for that one and took its outcome over). Otherwise this run did not start the trial:
    ``not_started`` (the record, if any, is an earlier run's and stands), or the state its re-run in this run ended
    in (``stopped``) when this run's re-run was interrupted and the earlier outcome put back. ``run`` None: the
    record's own state (a sweep run without a DAG run: the CLI)."""
    state = str(record["state"])
    if run is None:
        return state
    if state != "waiting":
        if record.get("run") in (run, None):
            return state
        ended = record.get("ended")
        if planned_at is not None and isinstance(ended, (int, float)) and ended >= planned_at:
            return state
    interrupted = record.get("interrupted")
    if isinstance(interrupted, dict) and interrupted.get("run") == run:
        return str(interrupted.get("state") or "stopped")
    return "not_started"


def state_counts(
    records: Sequence[Mapping[str, Any]],
    skipped_ids: Iterable[str] = (),
    run: str | None = None,
    planned_at: Mapping[str, float] | None = None,
) -> dict[str, list[int]]:
    """DI-toolkit's status table: trial indices per state. ``skipped`` = succeeded (or pruned) in an earlier
    run and not run again; they also count in that state. With ``run``, the other trials count in their state in
    that run (:func:`state_in_run`; ``planned_at``: trial id -> when that run planned it)."""
    skipped = set(skipped_ids)
    table: dict[str, list[int]] = {state: [] for state in (STATES if run is None else RUN_STATES)}
    for record in records:
        table["defined"].append(record["index"])
        if record["trial_id"] in skipped or run is None:
            table[record["state"]].append(record["index"])
        else:
            table[state_in_run(record, run, (planned_at or {}).get(record["trial_id"]))].append(record["index"])
        if record["trial_id"] in skipped:
            table["skipped"].append(record["index"])
    return table


def format_counts(table: Mapping[str, Sequence[int]], show_indices: int = 40) -> str:
    from airflow_provider_gpusched.core.text import format_table

    rows = []
    for state in table:
        indices = list(table.get(state, []))
        shown = ", ".join(map(str, indices[:show_indices])) + (", ..." if len(indices) > show_indices else "")
        rows.append((state, len(indices), f"[{shown}]"))
    return format_table(rows, ["status", "count", "trials"])
