"""The one engine that tells tracking callbacks what a sweep's folder records: each attempt's start, its reports,
its end, then the sweep run's end, once each, in that order.

It reads the trial store (status.json, reports.jsonl, result.json of each trial folder), so it works the same for
mapped, batched and asynchronous trials, on local GPUs, on a fleet and on Slurm: the trial writes its folder, and the
sync runs on the Airflow side (the trial's task when it ends, the batch runner after each trial, the sweep's
``collect``, ``gpusched sweep track``). A compute node never talks to a tracker.

What each callback has been told is kept under ``<sweep>/tracking/<callback name>/`` (private files, read back
checked): ``runs/<run>.json`` (the sweep run's memo, whether its end was told), ``trials/<trial folder>.json`` (per
attempt: started, reports told, ended, memo) and ``health.json`` (since when it fails, and whether that was said).
A callback that raises is left where it stopped: its events wait for the next sync, which resumes there. While it
keeps failing, syncs that are not the sweep's last try it at most once per ``retry_after`` seconds and give it at
most ``budget`` seconds, so a tracker that is down or slow never holds up the tasks that run trials; the failure is
logged once, and again when it recovers with what was sent late. One sync per callback at a time (a ``flock``).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_gpusched.core.checks import is_number
from airflow_provider_gpusched.core.errors import GpuschedError
from airflow_provider_gpusched.core.safe_files import BadRecordError, read_json_record, write_json_atomic
from airflow_provider_gpusched.core.sweep.reports import REPORTS_FILE, read_reports
from airflow_provider_gpusched.core.sweep.store import FINAL_STATES, OUTPUT_LOG_FILE, read_json, read_result_json
from airflow_provider_gpusched.core.tracking.callback import (
    SweepRun,
    TrackingCallback,
    TrialEnd,
    TrialReport,
    TrialRun,
)

TRACKING_DIR = "tracking"
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
    elif is_number(value) and value == value and abs(value) != float("inf"):
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


@dataclass
class SyncOutcome:
    callbacks: dict[str, CallbackOutcome] = field(default_factory=dict)

    def describe(self) -> str:
        parts = []
        for name, out in self.callbacks.items():
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
    log). ``retry_after``/``budget``: see the module's docstring (a ``final`` sync ignores both)."""

    def __init__(
        self,
        sweep: SweepRun,
        callbacks: Sequence[TrackingCallback],
        *,
        score: Callable[[Any], float | None] | None = None,
        log: Callable[[str], None] = print,
        retry_after: float = 60.0,
        budget: float = 20.0,
    ) -> None:
        self.sweep, self.callbacks, self.log = sweep, list(callbacks), log
        self.score = score or (lambda result: None)
        self.retry_after, self.budget = retry_after, budget
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
            return float(value) if is_number(value) else float("inf")

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
            return out
        try:
            health = self._read(os.path.join(base, "health.json"), {})
            if (
                not final
                and health.get("failing_since")
                and time.time() - float(health.get("last_try", 0)) < (self.retry_after)
            ):
                out.skipped = f"failing since {time.ctime(float(health['failing_since']))}; tried again later"
                out.pending = True
                return out
            deadline = None if final else time.monotonic() + self.budget
            run_path = os.path.join(base, "runs", _safe_name(self.sweep.run or "-") + ".json")
            run_record = self._read(run_path, {"run": self.sweep.run, "memo": {}, "ended": False})
            if run_record.get("run") != self.sweep.run or not isinstance(run_record.get("memo"), dict):
                raise GpuschedError(f"{run_path}: not the tracking record of run {self.sweep.run!r}")
            sweep = SweepRun(**{**self.sweep.__dict__, "memo": run_record["memo"]})
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
                        self._write(run_path, run_record)  # what the callback kept (its parent run) before it failed
                    run_record["ended"] = True
                    self._write(run_path, run_record)
                    out.told += 1
            except _CallbackFailed as exc:
                out.error, out.pending = str(exc), True
            finally:
                with contextlib.suppress(Exception):
                    callback.close()
            self._health(base, health, callback.name, out)
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
        """Tell ``callback`` what it has not been told of the attempt of this run in ``folder``; the count."""
        if os.sep in folder or folder in ("", ".", ".."):
            return 0
        where = os.path.join(self.trials_dir, folder)
        status = read_json(os.path.join(where, "status.json"))
        if not isinstance(status, dict) or "_unreadable" in status:
            return 0
        state = status.get("state")
        if state not in ("running", *FINAL_STATES) or status.get("run") != self.sweep.run:
            return 0  # waiting, or another run's attempt (never rewritten by this run)
        started = status.get("started") if is_number(status.get("started")) else None
        key = f"{started!r}"
        cursor_path = os.path.join(base, "trials", folder + ".json")
        record = self._read(cursor_path, {"attempts": {}})
        attempts = record.get("attempts")
        if not isinstance(attempts, dict):
            raise GpuschedError(f"{cursor_path}: key 'attempts': expected a mapping")
        cursor = attempts.setdefault(key, {"started": False, "reports": 0, "ended": False, "memo": {}})
        if not isinstance(cursor, dict) or not isinstance(cursor.get("memo"), dict):
            raise GpuschedError(f"{cursor_path}: attempt {key}: not a tracking cursor")
        if task:
            cursor["task"] = dict(task)
        params = read_json(os.path.join(where, "params.json"))
        from airflow_provider_gpusched.core.sweep.expand import flatten

        trial = TrialRun(
            sweep=sweep,
            trial_id=str(status.get("trial_id") or folder),
            label=str(status.get("label") or status.get("trial_id") or folder),
            params=flatten(params) if isinstance(params, dict) and "_unreadable" not in params else {},
            started=started,
            folder=where,
            host=_text(status.get("host")),
            gpus=_text(status.get("gpus")),
            slurm_job=_text(status.get("slurm_job")),
            task=cursor.get("task") if isinstance(cursor.get("task"), dict) else None,
            memo=cursor["memo"],
        )
        told = 0

        def save(run_too: bool = True) -> None:
            self._write(cursor_path, record)
            if run_too:
                self._write(run_path, run_record)

        def tell(call: Callable[[], None], what: str) -> None:
            try:
                _told(call, f"{what} of trial {trial.label}")
            except _CallbackFailed:
                save()  # what the callback kept (a run id) before it failed
                raise

        if not cursor["started"]:
            tell(lambda: callback.on_trial_start(trial), "the start")
            cursor["started"] = True
            told += 1
            if state not in FINAL_STATES:  # a running trial's next events come in a later sync: keep its run id now
                save()
        reports, _problems = read_reports(os.path.join(where, REPORTS_FILE), where)
        sent = int(cursor.get("reports", 0) or 0)
        if len(reports) > sent:
            new = [
                TrialReport(
                    step=int(r["step"]),
                    metrics=dict(r["metrics"]),
                    time=float(r["time"]) if is_number(r.get("time")) else None,
                )
                for r in reports[sent:]
            ]
            tell(lambda: callback.on_trial_reports(trial, new), f"{len(new)} report(s)")
            cursor["reports"] = len(reports)
            told += len(new)
        if state in FINAL_STATES and not cursor["ended"]:
            result = read_result_json(os.path.join(where, "result.json"), where)
            files = [
                os.path.join(where, name)
                for name in (OUTPUT_LOG_FILE, "result.json")
                if os.path.isfile(os.path.join(where, name)) and not os.path.islink(os.path.join(where, name))
            ]
            end = TrialEnd(
                state=str(state),
                metrics=flat_numbers(result) if isinstance(result, Mapping) else {},
                result=result if state in ("succeeded", "pruned", "invalid") else None,
                score=self.score(result) if state == "succeeded" else None,
                ended=float(status["ended"]) if is_number(status.get("ended")) else None,
                seconds=float(status["seconds"]) if is_number(status.get("seconds")) else None,
                error=_text(status.get("error")),
                files=tuple(files),
            )
            tell(lambda: callback.on_trial_end(trial, end), "the end")
            cursor["ended"] = True
            told += 1
        if told:
            # one write for what was told here (a process killed before it tells it again: at least once)
            save(run_too=False)
        return told

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

    def _health(self, base: str, health: dict[str, Any], name: str, out: CallbackOutcome) -> None:
        path = os.path.join(base, "health.json")
        now = time.time()
        if out.error:
            first = not health.get("failing_since")
            health = {
                "failing_since": health.get("failing_since") or now,
                "last_try": now,
                "error": out.error,
                "reported": True,
            }
            if first:  # said once per outage; the task logs of later syncs say 'waits' in their one line
                self.log(
                    f"tracking: {name} failed: {out.error}. Nothing is lost: what it was not sent waits in "
                    f"{base} and goes at the next sync (a later trial's end, the sweep's collect, or "
                    f"`gpusched sweep track {self.sweep.sweep}`)"
                )
            self._write(path, health)
        elif health.get("failing_since") and not out.pending:
            self.log(
                f"tracking: {name} works again: sent what waited since {time.ctime(float(health['failing_since']))}"
            )
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)

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


def _told(call: Callable[[], None], what: str) -> None:
    """Make one call of a callback; any error it raises becomes the one that stops this callback's sync."""
    try:
        call()
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        raise _CallbackFailed(f"{what}: {type(exc).__name__}: {first}") from exc


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def send_to(
    callbacks: Sequence[TrackingCallback],
    sweep: SweepRun,
    say: Callable[[str], None],
    score: Callable[[Any], float | None] | None = None,
    **sync: Any,
) -> SyncOutcome | None:
    """One sync of ``callbacks`` (made by config.build_callbacks) with its one line said; None when there are none.
    The one way the Airflow side, ``gpusched sweep run`` and ``gpusched sweep track`` send."""
    if not callbacks:
        return None
    outcome = TrackingSync(sweep, callbacks, score=score, log=say).sync(**sync)
    say(outcome.describe())
    return outcome
