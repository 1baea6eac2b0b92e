"""The one engine that tells tracking callbacks what a sweep's folder records: each attempt's start, its reports,
its end, then the sweep run's end, once each, in that order.

It reads the trial store (status.json, reports.jsonl, result.json of each trial folder), so it works the same for
mapped, batched and asynchronous trials, on local GPUs, on a fleet and on Slurm: the trial writes its folder, and the
sync runs on the Airflow side (the trial's task when it ends, the batch runner after each trial, the sweep's
``collect``, ``gpusched sweep track``). A compute node never talks to a tracker.

What each callback has been told is kept under ``<sweep>/tracking/<callback name>/`` (private files, read back
checked): ``runs/<run>.json`` (the sweep run's memo, whether its end was told), ``trials/<trial folder>.json`` (per
attempt: its run, started, reports told, ended, memo) and ``health.json`` (since when it fails). Which Airflow task
ran each attempt is kept for every callback under ``<sweep>/tracking/_tasks/`` by the first sync that knows it (the
trial's own task), even while the trackers are down: an attempt sent later (after an outage, by the sweep's
``collect``) is tagged as one sent live.

An attempt whose trial started again before its end was told (it was preempted, reclaimed, or its runner was killed:
the trial's record is the later attempt's now) is ended for the callback the first time a sync sees that: with the
outcome the trial store kept aside for it where there is one, else ``stopped``, saying why (``TrialEnd.superseded``).
A tracker's run of it never stays open.

A callback that raises is left where it stopped: its events wait for the next sync, which resumes there. While it
keeps failing, syncs that are not the sweep's last try it at most once per ``retry_after`` seconds and give it at
most ``budget`` seconds, so a tracker that is down or slow never holds up the tasks that run trials. A process (one
task's log) says an outage once when it first sees it, then again after 1, 2, 4 ... minutes (at most every 30), and
once when it works again; the syncs in between say nothing of it. One sync per callback at a time (a ``flock``).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from airflow_provider_gpusched.core.checks import is_finite_number, is_number
from airflow_provider_gpusched.core.errors import GpuschedError
from airflow_provider_gpusched.core.http import time_budget
from airflow_provider_gpusched.core.safe_files import BadRecordError, read_json_record, write_json_atomic
from airflow_provider_gpusched.core.sweep.records.reports import REPORTS_FILE, read_reports
from airflow_provider_gpusched.core.sweep.records.store import (
    FINAL_STATES,
    OUTPUT_LOG_FILE,
    PREVIOUS_RESULT_FILE,
    read_json,
    read_result_json,
)
from airflow_provider_gpusched.core.tracking.callback import (
    SweepRun,
    TrackingCallback,
    TrialEnd,
    TrialReport,
    TrialRun,
)

TRACKING_DIR = "tracking"
#: under TRACKING_DIR: the Airflow task of each attempt, shared by the callbacks (no callback name starts with "_")
TASKS_DIR = "_tasks"
#: a task's log says an outage again this long after it first said it, the gap doubling up to REMIND_MAX
REMIND_FIRST, REMIND_MAX = 60.0, 1800.0
#: what this process said of each outage, by its health file: since when it fails, when to say it next, the gap
_SAID: dict[str, dict[str, float]] = {}
_SAID_LOCK = threading.Lock()
_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def _safe_name(text: str) -> str:
    """A file name for ``text`` (a DAG run id): readable, and unique by a hash of the whole."""
    return f"{_SAFE.sub('_', text).strip('._')[:80] or '_'}-{hashlib.sha1(text.encode()).hexdigest()[:10]}"


def flat_numbers(value: Any, prefix: str = "") -> dict[str, float]:
    """The finite numbers in a result (nested mappings as dotted keys); bools and the rest are left out."""
    out: dict[str, float] = {}
    if isinstance(value, Mapping):
        for key, item in value.items():
            out.update(flat_numbers(item, f"{prefix}{key}."))
    elif is_finite_number(value):
        out[prefix.rstrip(".")] = float(value)
    return out


@dataclass
class CallbackOutcome:
    """What one sync did for one callback."""

    told: int = 0
    #: attempts or the sweep end it could not finish telling (they wait for the next sync)
    pending: bool = False
    error: str | None = None
    skipped: str | None = None
    #: nothing worth a line: an outage this process said already (and said again when due), another sync sending
    quiet: bool = False


@dataclass
class SyncOutcome:
    callbacks: dict[str, CallbackOutcome] = field(default_factory=dict)

    def describe(self) -> str:
        """One line of what each callback got; "" when none has anything to say (``quiet``)."""
        if self.callbacks and all(out.quiet for out in self.callbacks.values()):
            return ""
        parts = []
        for name, out in self.callbacks.items():
            if out.quiet:
                continue
            if out.skipped:
                parts.append(f"{name}: {out.skipped}")
            elif out.error:
                parts.append(f"{name}: {out.told} event(s) sent, the rest waits ({out.error})")
            else:
                parts.append(f"{name}: {out.told} event(s) sent")
        return "tracking: " + ("; ".join(parts) if parts else "no trackers")


class _CallbackFailed(Exception):
    pass


class TrackingSync:
    """Tells ``callbacks`` what the folder of ``sweep`` records for its run ``sweep.run``.

    ``score``: the objective's score of a result (None without one). ``log``: where its few lines go (a task's
    log). ``retry_after``/``budget``: see the module's docstring (a ``final`` sync ignores both). ``clock``: the
    time (epoch seconds) of the health records and of when an outage is said again."""

    def __init__(
        self,
        sweep: SweepRun,
        callbacks: Sequence[TrackingCallback],
        *,
        score: Callable[[Any], float | None] | None = None,
        log: Callable[[str], None] = print,
        retry_after: float = 60.0,
        budget: float = 20.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.sweep, self.callbacks, self.log = sweep, list(callbacks), log
        self.score = score or (lambda result: None)
        self.retry_after, self.budget, self.clock = retry_after, budget, clock
        names = [c.name for c in self.callbacks]
        for name in names:
            if not isinstance(name, str) or not _NAME.match(name):
                raise GpuschedError(f"tracking callback name {name!r}: expected letters, digits, '_', '-', '.'")
            if names.count(name) > 1:
                raise GpuschedError(f"tracking: two callbacks are named {name!r}; give each its own name")
        self.trials_dir = os.path.join(sweep.folder, "trials")

    # -- the one entry point ----------------------------------------------------------------------------------
    def sync(
        self,
        folders: Iterable[str] | None = None,
        *,
        final: bool = False,
        summary: Mapping[str, Any] | None = None,
        tasks: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> SyncOutcome:
        """Tell every callback what it has not been told about the trial folders ``folders`` (names under
        ``trials/``; None: every trial of the run), and with ``summary`` the sweep run's end. ``tasks``: the
        Airflow task instance of a trial (by folder name), where the caller knows it. ``final``: the sweep's last
        sync (no back-off, no time budget, waits for the lock)."""
        outcome = SyncOutcome()
        if tasks:  # before anything can fail or be skipped: an attempt sent later is tagged with its task all the same
            self._remember_tasks(tasks)
        if not self.callbacks:
            return outcome
        names = self._by_start(sorted(set(folders)) if folders is not None else self._all_folders())
        for callback in self.callbacks:
            outcome.callbacks[callback.name] = self._sync_one(callback, names, final, summary, tasks or {})
        return outcome

    def _by_start(self, names: list[str]) -> list[str]:
        """Trial folders in the order their attempts started (a tracker then sees the sweep as it happened: MLflow's
        parent run starts with the first trial)."""

        def started(name: str) -> float:
            status = read_json(os.path.join(self.trials_dir, name, "status.json")) if os.sep not in name else None
            value = status.get("started") if isinstance(status, dict) else None
            return float(value) if is_finite_number(value) else float("inf")

        return sorted(names, key=started)

    def _all_folders(self) -> list[str]:
        try:
            return sorted(n for n in os.listdir(self.trials_dir) if not n.startswith("."))
        except FileNotFoundError:
            return []

    # -- one callback -------------------------------------------------------------------------------------------
    def _sync_one(
        self,
        callback: TrackingCallback,
        folders: Sequence[str],
        final: bool,
        summary: Mapping[str, Any] | None,
        tasks: Mapping[str, Mapping[str, Any]],
    ) -> CallbackOutcome:
        out = CallbackOutcome()
        base = os.path.join(self.sweep.folder, TRACKING_DIR, callback.name)
        for sub in ("runs", "trials"):
            os.makedirs(os.path.join(base, sub), mode=0o700, exist_ok=True)
        lock = self._lock(os.path.join(base, "lock"), 120.0 if final else 5.0)
        if lock is None:
            out.skipped = "another process is sending (what it misses goes at the next sync)"
            out.quiet = not final
            return out
        try:
            health = self._read(os.path.join(base, "health.json"), {})
            if (
                not final
                and health.get("failing_since")
                and self.clock() - float(health.get("last_try", 0)) < (self.retry_after)
            ):
                out.skipped = f"failing since {time.ctime(float(health['failing_since']))}; tried again later"
                out.pending = True
                out.quiet = not self._say_outage(base, callback.name, health, fresh=False)
                return out
            deadline = None if final else time.monotonic() + self.budget
            run_path = os.path.join(base, "runs", _safe_name(self.sweep.run or "-") + ".json")
            run_record = self._read(run_path, {"run": self.sweep.run, "memo": {}, "ended": False})
            if run_record.get("run") != self.sweep.run or not isinstance(run_record.get("memo"), dict):
                raise GpuschedError(f"{run_path}: not the tracking record of run {self.sweep.run!r}")
            sweep = SweepRun(**{**self.sweep.__dict__, "memo": run_record["memo"]})
            # the budget bounds the tracker's requests too, not only the trials started: one trial's events may take
            # many requests, each within its own timeout (an MLflow server answering slowly held a step 5.5 minutes)
            spend = time_budget(None if deadline is None else self.budget, f"the tracking step's {self.budget:g}s")
            with spend:
                try:
                    _told(lambda: callback.setup(sweep), "the setup")
                    for folder in folders:
                        if deadline is not None and time.monotonic() > deadline:
                            out.pending = True
                            break
                        out.told += self._trial(callback, sweep, base, folder, tasks.get(folder), run_path, run_record)
                    if out.told:  # what the trials' events added to the sweep run's memo (TensorBoard's columns)
                        self._write(run_path, run_record)
                    if summary is not None and not run_record.get("ended") and not out.pending:
                        try:
                            _told(lambda: callback.on_sweep_end(sweep, summary), "the sweep's end")
                        finally:
                            self._write(
                                run_path, run_record
                            )  # what the callback kept (its parent run) before it failed
                        run_record["ended"] = True
                        self._write(run_path, run_record)
                        out.told += 1
                except _CallbackFailed as exc:
                    out.error, out.pending = str(exc), True
                finally:
                    with contextlib.suppress(Exception):
                        callback.close()
            self._health(base, health, callback.name, out, final)
            return out
        finally:
            os.close(lock)

    def _trial(
        self,
        callback: TrackingCallback,
        sweep: SweepRun,
        base: str,
        folder: str,
        task: Mapping[str, Any] | None,
        run_path: str,
        run_record: dict[str, Any],
    ) -> int:
        """Tell ``callback`` what it has not been told of the attempt of this run in ``folder`` (and the end of an
        earlier attempt there that a later one replaced); the count."""
        if os.sep in folder or folder in ("", ".", ".."):
            return 0
        status = read_json(os.path.join(self.trials_dir, folder, "status.json"))
        if not isinstance(status, dict) or "_unreadable" in status:
            return 0
        teller = _TrialTeller(self, callback, sweep, base, folder, status, run_path, run_record)
        teller.end_superseded()
        if teller.state not in ("running", *FINAL_STATES) or status.get("run") != self.sweep.run:
            if teller.told:
                teller.save(run_too=False)
            return teller.told  # waiting, or another run's attempt (never rewritten by this run)
        teller.tell_current(task)
        return teller.told

    def _superseded_end(self, key: str, status: Mapping[str, Any], where: str) -> TrialEnd:
        """How the attempt that started at ``key`` ended, now that the trial's record (``status``) is another's:
        the outcome the store kept aside for it (``previous``: its own, kept when the trial started again;
        ``interrupted``: how a run ended it when it put an earlier outcome back), else ``stopped``, saying why."""
        for name in ("previous", "interrupted"):
            kept = status.get(name)
            if not isinstance(kept, Mapping) or kept.get("state") not in FINAL_STATES:
                continue
            if f"{kept.get('started') if is_number(kept.get('started')) else None!r}" != key:
                continue
            state = str(kept["state"])
            result = read_result_json(os.path.join(where, PREVIOUS_RESULT_FILE), where) if name == "previous" else None
            return TrialEnd(
                state=state,
                metrics=flat_numbers(result) if isinstance(result, Mapping) else {},
                result=result if state in ("succeeded", "pruned", "invalid") else None,
                score=self.score(result) if state == "succeeded" and result is not None else None,
                ended=float(kept["ended"]) if is_finite_number(kept.get("ended")) else None,
                seconds=float(kept["seconds"]) if is_finite_number(kept.get("seconds")) else None,
                error=_text(kept.get("error") if name == "previous" else kept.get("reason")),
                superseded=True,
            )
        then = float(status["started"]) if is_finite_number(status.get("started")) else None
        since = _started_of(key)
        later = then is not None and (since is None or then > since)
        why = (
            f"the trial started again at {time.ctime(then)}"
            if then is not None and later
            else "the trial's record is another's"
        )
        return TrialEnd(
            state="stopped",
            metrics={},
            result=None,
            score=None,
            ended=then if later else None,
            seconds=None,
            error=f"this attempt ended without an outcome: {why} (it was preempted, reclaimed or its runner killed)",
            superseded=True,
        )

    # -- the Airflow task of each attempt -----------------------------------------------------------------------
    def _tasks_path(self, folder: str) -> str:
        return os.path.join(self.sweep.folder, TRACKING_DIR, TASKS_DIR, folder + ".json")

    def _remember_tasks(self, tasks: Mapping[str, Mapping[str, Any]]) -> None:
        """Keep the task of each folder's attempt of this run (the one its status names now), for every callback."""
        for folder, task in tasks.items():
            if not task or os.sep in folder or folder in ("", ".", ".."):
                continue
            status = read_json(os.path.join(self.trials_dir, folder, "status.json"))
            if not isinstance(status, dict) or "_unreadable" in status or status.get("run") != self.sweep.run:
                continue
            if status.get("state") not in ("running", *FINAL_STATES):
                continue
            started = status.get("started") if is_number(status.get("started")) else None
            path = self._tasks_path(folder)
            try:
                record = self._read(path, {"attempts": {}})
            except (GpuschedError, OSError):
                record = {"attempts": {}}  # (a broken one holds nothing the task does not say again here)
            attempts = record.get("attempts")
            if not isinstance(attempts, dict):
                record = {"attempts": {}}
                attempts = record["attempts"]
            if attempts.get(f"{started!r}") == dict(task):
                continue
            attempts[f"{started!r}"] = dict(task)
            try:
                for folder_path in (os.path.dirname(os.path.dirname(path)), os.path.dirname(path)):
                    os.makedirs(folder_path, mode=0o700, exist_ok=True)  # (each private: mode applies to the leaf)
                self._write(path, record)
            except OSError:  # the tags are a convenience: a trial's task never fails on them
                continue

    def _recorded_task(self, folder: str, key: str) -> dict[str, Any] | None:
        try:
            record = self._read(self._tasks_path(folder), {"attempts": {}})
        except (GpuschedError, OSError):
            return None  # (the tags are a convenience: never what stops a sync)
        attempts = record.get("attempts")
        found = attempts.get(key) if isinstance(attempts, dict) else None
        return _task_record(found)

    # -- records -----------------------------------------------------------------------------------------------
    @staticmethod
    def _read(path: str, default: dict[str, Any]) -> dict[str, Any]:
        try:
            data = read_json_record(path, 4 << 20)
        except FileNotFoundError:
            return default
        except BadRecordError as exc:
            raise GpuschedError(f"tracking record {exc}; remove it to send that trial again") from None
        if not isinstance(data, dict):
            raise GpuschedError(f"tracking record {path}: expected a JSON object; remove it to send again")
        return data

    @staticmethod
    def _write(path: str, data: Mapping[str, Any]) -> None:
        write_json_atomic(path, data, 0o600)

    def _health(self, base: str, health: dict[str, Any], name: str, out: CallbackOutcome, final: bool = False) -> None:
        path = os.path.join(base, "health.json")
        now = self.clock()
        if out.error:
            fresh = not health.get("failing_since")
            health = {"failing_since": health.get("failing_since") or now, "last_try": now, "error": out.error}
            self._write(path, health)
            said = self._say_outage(base, name, health, fresh=fresh)
            # the one line of a sync says a failure this process said already only in a final sync or with progress
            out.quiet = not (said or final or out.told)
            return
        if health.get("failing_since") and not out.pending:
            self.log(
                f"tracking: {name} works again: sent what waited since {time.ctime(float(health['failing_since']))}"
            )
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)
            with _SAID_LOCK:
                _SAID.pop(path, None)
            return
        with _SAID_LOCK:  # another process's sync found it working: this log said the outage, so it says its end
            ended = _SAID.pop(path, None) if not health.get("failing_since") else None
        if ended is not None:
            self.log(f"tracking: {name} works again (it failed since {time.ctime(ended['since'])})")

    def _say_outage(self, base: str, name: str, health: Mapping[str, Any], *, fresh: bool) -> bool:
        """Say that ``name`` fails, once in this process (its task's log) per outage, then again after
        REMIND_FIRST, doubling up to REMIND_MAX; False when it is not due."""
        path = os.path.join(base, "health.json")
        since, now = float(health["failing_since"]), self.clock()
        with _SAID_LOCK:
            said = _SAID.get(path)
            first = said is None or said["since"] != since
            if said is None or first:
                _SAID[path] = {"since": since, "next": now + REMIND_FIRST, "gap": REMIND_FIRST}
            elif now >= said["next"]:
                said["gap"] = min(said["gap"] * 2, REMIND_MAX)
                said["next"] = now + said["gap"]
            else:
                return False
        error = health.get("error") or "an error"
        if first:
            when = "" if fresh else f" (since {time.ctime(since)})"
            self.log(
                f"tracking: {name} failed{when}: {error}. Nothing is lost: what it was not sent waits in "
                f"{base} and goes at the next sync (a later trial's end, the sweep's collect, or "
                f"`gpusched sweep track {self.sweep.sweep}`); said again every so often while it lasts, and "
                f"when it works again"
            )
        else:
            self.log(
                f"tracking: {name} still failing since {time.ctime(since)} ({error}); what waits goes when it "
                f"works again"
            )
        return True

    @staticmethod
    def _lock(path: str, wait: float) -> int | None:
        fd = os.open(path, os.O_CREAT | os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        end = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return fd
            except BlockingIOError:
                if time.monotonic() > end:
                    os.close(fd)
                    return None
                time.sleep(0.05)


class _TrialTeller:
    """What one sync tells one callback of one trial folder: the end of each earlier attempt there that a later
    one replaced, then the current attempt's start, new reports and end. Its cursor file (``trials/<folder>.json``
    under the callback's tracking folder) says what was told of each attempt, keyed by the ``repr`` of the
    attempt's start; ``told`` counts the events told now."""

    def __init__(
        self,
        sync: TrackingSync,
        callback: TrackingCallback,
        sweep: SweepRun,
        base: str,
        folder: str,
        status: dict[str, Any],
        run_path: str,
        run_record: dict[str, Any],
    ) -> None:
        self.sync, self.callback, self.sweep, self.folder, self.status = sync, callback, sweep, folder, status
        self.run_path, self.run_record = run_path, run_record
        self.where = os.path.join(sync.trials_dir, folder)
        self.state = status.get("state")
        self.started = status.get("started") if is_number(status.get("started")) else None
        self.key = f"{self.started!r}"
        self.cursor_path = os.path.join(base, "trials", folder + ".json")
        self.record = sync._read(self.cursor_path, {"attempts": {}})
        attempts = self.record.get("attempts")
        if not isinstance(attempts, dict):
            raise GpuschedError(f"{self.cursor_path}: key 'attempts': expected a mapping")
        self.attempts: dict[str, Any] = attempts
        self.params = read_json(os.path.join(self.where, "params.json"))
        self.told = 0

    def trial_of(self, attempt: dict[str, Any], at: float | None, current: bool) -> TrialRun:
        """The callback's view of an attempt (``current``: the one the trial's status describes now)."""
        from airflow_provider_gpusched.core.sweep.parts.expand import flatten

        status, folder, params = self.status, self.folder, self.params
        return TrialRun(
            sweep=self.sweep,
            trial_id=str(status.get("trial_id") or folder),
            label=str(status.get("label") or status.get("trial_id") or folder),
            params=flatten(params) if isinstance(params, dict) and "_unreadable" not in params else {},
            started=at,
            folder=self.where,
            host=_text(status.get("host")) if current else None,
            gpus=_text(status.get("gpus")) if current else None,
            slurm_job=_text(status.get("slurm_job")) if current else None,
            task=attempt.get("task") if isinstance(attempt.get("task"), dict) else None,
            memo=attempt["memo"],
        )

    def save(self, run_too: bool = True) -> None:
        self.sync._write(self.cursor_path, self.record)
        if run_too:
            self.sync._write(self.run_path, self.run_record)

    def tell(self, call: Callable[[], None], what: str) -> None:
        try:
            _told(call, what)
        except _CallbackFailed:
            self.save()  # what the callback kept (a run id) before it failed
            raise

    def end_superseded(self) -> None:
        """End each attempt told as started whose trial started again since (or whose record an earlier outcome
        replaced): it is over, whichever run it was of; its run at the tracker ends now, never left open."""
        for old_key, old in list(self.attempts.items()):
            if old_key == self.key or not isinstance(old, dict) or not old.get("started") or old.get("ended"):
                continue
            if not isinstance(old.get("memo"), dict):
                raise GpuschedError(f"{self.cursor_path}: attempt {old_key}: not a tracking cursor")
            if not isinstance(old.get("task"), dict):
                found = self.sync._recorded_task(self.folder, old_key)
                if found:
                    old["task"] = found
            old_trial = self.trial_of(old, _started_of(old_key), current=False)
            old_end = self.sync._superseded_end(old_key, self.status, self.where)
            self.tell(
                partial(self.callback.on_trial_end, old_trial, old_end),
                f"the end of an earlier attempt of {old_trial.label}",
            )
            old["ended"] = True
            self.told += 1

    def tell_current(self, task: Mapping[str, Any] | None) -> None:
        """Tell what waits of the attempt the trial's status describes (running or ended, of this run)."""
        cursor = self._cursor(task)
        trial = self.trial_of(cursor, self.started, current=True)
        if not cursor["started"]:
            self.tell(lambda: self.callback.on_trial_start(trial), f"the start of trial {trial.label}")
            cursor["started"] = True
            self.told += 1
            if self.state not in FINAL_STATES:  # a running trial's next events come in a later sync: keep its run id
                self.save()
        self._tell_reports(cursor, trial)
        if self.state in FINAL_STATES and not cursor["ended"]:
            end = self._end()
            self.tell(lambda: self.callback.on_trial_end(trial, end), f"the end of trial {trial.label}")
            cursor["ended"] = True
            self.told += 1
        if self.told:
            # one write for what was told here (a process killed before it tells it again: at least once)
            self.save(run_too=False)

    def _cursor(self, task: Mapping[str, Any] | None) -> dict[str, Any]:
        """The current attempt's cursor (a new one when it was never told), tagged with its Airflow task."""
        cursor = self.attempts.setdefault(
            self.key, {"run": self.sync.sweep.run, "started": False, "reports": 0, "ended": False, "memo": {}}
        )
        if not isinstance(cursor, dict) or not isinstance(cursor.get("memo"), dict):
            raise GpuschedError(f"{self.cursor_path}: attempt {self.key}: not a tracking cursor")
        if task:
            cursor["task"] = dict(task)
        elif not isinstance(cursor.get("task"), dict):
            found = self.sync._recorded_task(self.folder, self.key)
            if found:
                cursor["task"] = found
        return cursor

    def _tell_reports(self, cursor: dict[str, Any], trial: TrialRun) -> None:
        reports, _problems = read_reports(os.path.join(self.where, REPORTS_FILE), self.where)
        sent = int(cursor.get("reports", 0) or 0)
        if len(reports) <= sent:
            return
        new = [
            TrialReport(
                step=int(r["step"]),
                metrics=dict(r["metrics"]),
                time=float(r["time"]) if is_finite_number(r.get("time")) else None,
            )
            for r in reports[sent:]
        ]
        self.tell(lambda: self.callback.on_trial_reports(trial, new), f"{len(new)} report(s) of trial {trial.label}")
        cursor["reports"] = len(reports)
        self.told += len(new)

    def _end(self) -> TrialEnd:
        """How the current attempt ended, from its status and result.json."""
        where, status, state = self.where, self.status, self.state
        result = read_result_json(os.path.join(where, "result.json"), where)
        files = [
            os.path.join(where, name)
            for name in (OUTPUT_LOG_FILE, "result.json")
            if os.path.isfile(os.path.join(where, name)) and not os.path.islink(os.path.join(where, name))
        ]
        return TrialEnd(
            state=str(state),
            metrics=flat_numbers(result) if isinstance(result, Mapping) else {},
            result=result if state in ("succeeded", "pruned", "invalid") else None,
            score=self.sync.score(result) if state == "succeeded" else None,
            ended=float(status["ended"]) if is_finite_number(status.get("ended")) else None,
            seconds=float(status["seconds"]) if is_finite_number(status.get("seconds")) else None,
            error=_text(status.get("error")),
            files=tuple(files),
        )


def _told(call: Callable[[], None], what: str) -> None:
    """Make one call of a callback; any error it raises becomes the one that stops this callback's sync."""
    try:
        call()
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        raise _CallbackFailed(f"{what}: {type(exc).__name__}: {first}") from exc


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def _started_of(key: str) -> float | None:
    """The start time of an attempt's cursor key (the ``repr`` of its status's ``started``)."""
    try:
        return float(key)
    except ValueError:
        return None  # "None": an attempt recorded without a start


def send_to(
    callbacks: Sequence[TrackingCallback],
    sweep: SweepRun,
    say: Callable[[str], None],
    score: Callable[[Any], float | None] | None = None,
    *,
    clock: Callable[[], float] = time.time,
    **sync: Any,
) -> SyncOutcome | None:
    """One sync of ``callbacks`` (made by config.build_callbacks) with its one line said (none when there is
    nothing new to say); None when there are no callbacks. The one way the Airflow side, ``gpusched sweep run``
    and ``gpusched sweep track`` send."""
    if not callbacks:
        if sync.get("tasks"):  # no tracker can be made now (its setup failed): keep the tasks for a later send
            TrackingSync(sweep, [], log=say).sync(tasks=sync["tasks"])
        return None
    outcome = TrackingSync(sweep, callbacks, score=score, log=say, clock=clock).sync(**sync)
    line = outcome.describe()
    if line:  # (nothing when every callback is quiet: an outage said already)
        say(line)
    return outcome


#: what a remembered task may say (the tags MLflow gets: airflow.dag_id, task_id, map_index, try_number)
_TASK_TEXT = ("dag_id", "run_id", "task_id")
_TASK_NUMBERS = ("map_index", "try_number")


def _task_record(found: Any) -> dict[str, Any] | None:
    """A task remembered under ``tracking/_tasks/`` as it was read back: its text fields strings (at most 250
    characters), its numbers whole numbers; None when it is not such a record (a broken one names no task, and a
    tracker never gets what it was not checked)."""
    if not isinstance(found, dict):
        return None
    out: dict[str, Any] = {}
    for key in _TASK_TEXT:
        value = found.get(key)
        if value is not None and not (isinstance(value, str) and 0 < len(value) <= 250):
            return None
        if value is not None:
            out[key] = value
    for key in _TASK_NUMBERS:
        value = found.get(key)
        if value is not None and not (isinstance(value, int) and not isinstance(value, bool)):
            return None
        if value is not None:
            out[key] = value
    return out if out.get("task_id") else None
