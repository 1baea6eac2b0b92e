"""Asynchronous search: a pool of workers, each asking for its next trial the moment its slot frees, all sharing one
Optuna study (``search: optuna`` with ``asynchronous: true``). No round waits for its slowest trial.

The study is the one a search in rounds keeps (``search/optuna.journal``, Optuna's ``JournalStorage`` in the sweep
folder): a plain file next to the trials it describes, on the shared file system every worker already writes its
trials to (a Slurm cluster's, a fleet's), with no database server to run, and Optuna's own format for several
processes (``optuna-dashboard`` reads it). Each study trial carries the gpusched trial it ran (its ``trial_id``,
``index``, folder and run) as user attributes: the one record of which trials the search asked for.

One run of the sweep (:class:`AsyncRun`):

* :meth:`AsyncRun.plan` writes the run's manifest: every trial the study asked for before, those that succeeded or
  were pruned as done (skip-on-re-run; all of them again with ``force_rerun``), the others (failed, stopped, never
  finished because a worker died) to run again first, with the same parameters. A study begun anew (its journal
  moved aside) is first rebuilt from the records of the trials that ended (core/sweep/searches/rounds.py's
  ``OptunaSearch.rebuild``, under the lock below), so they are planned and counted as if it had asked for them;
* :meth:`AsyncRun.next_trial` hands a free slot its next trial: one of those, else a new one from the sampler, until
  the study holds ``count`` trials; under an exclusive lock on the search folder (``flock``), so two workers (threads,
  processes, hosts) never get the same trial, and a trial is added to the manifest before it is handed out;
* :meth:`AsyncRun.finish` tells the study how the trial ended, from its record in the trial store.

A trial handed out runs under its claim (core/sweep/records/store.py), as every trial does: it never runs twice at once.
A worker that dies leaves its trial RUNNING in the study and without an outcome in the store; the next run (or the
retried task) plans it again and runs it on the same study trial, so nothing is lost.

Optuna's pruners judge in the study itself (``pruning: {rule: optuna, pruner: hyperband}``): the trial runner
reports each step to the trial's RUNNING study trial and asks the study's pruner
(:func:`judge_in_study`); the sampler knows the pruner, so TPE samples within Hyperband's brackets (BOHB).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from airflow_provider_gpusched.core.errors import GpuschedError
from airflow_provider_gpusched.core.sweep.parts.expand import DEFAULT_LABELS, Trial, make_trial
from airflow_provider_gpusched.core.sweep.records.store import FINAL_STATES
from airflow_provider_gpusched.core.sweep.searches.optuna import HANDED_FILE, AsyncOptunaSearch, report_curve
from airflow_provider_gpusched.core.sweep.searches.optuna import SPEC_FILE as SPEC_FILE
from airflow_provider_gpusched.core.sweep.searches.rounds import _key

if TYPE_CHECKING:
    from airflow_provider_gpusched.core.sweep.definition.sweep_spec import SweepSpec
    from airflow_provider_gpusched.core.sweep.records.store import TrialStore
    from airflow_provider_gpusched.core.sweep.running.trial_run import Manifest


class StageSession(Protocol):
    """What an asynchronous run needs of its sweep session (core/sweep/running/session.py's ``SweepSession``, which
    makes the run: the session is built on this module, not under it)."""

    spec: SweepSpec
    store: TrialStore

    def manifest_path(self, round_no: int | None = None, run: str | None = None) -> str: ...

    def write_stage_manifest(
        self,
        round_no: int | None,
        run: str | None,
        *,
        trials: Sequence[Trial],
        pending: Sequence[Trial],
        skipped: Sequence[Trial],
        force_rerun: bool,
        chunk_size: int | None,
        backend: str,
    ) -> str: ...


class AsyncRun:
    """One run of an asynchronous search: its plan, the trials it hands out, what it tells the study."""

    def __init__(self, session: StageSession, run: str | None = None, force_rerun: bool | None = None) -> None:
        spec = session.spec
        if not spec.asks_as_it_goes or spec.count is None:
            raise GpuschedError(f"sweep {spec.name}: search {spec.search!r} is not an asynchronous search")
        self.session, self.spec, self.run = session, spec, run
        self.force_rerun = spec.force_rerun if force_rerun is None else force_rerun
        self.count: int = spec.count
        self.store = session.store
        self.search_dir = self.store.path("search")
        os.makedirs(self.search_dir, exist_ok=True)
        self._threads = threading.Lock()
        self._search: AsyncOptunaSearch | None = None
        #: the manifest's trials as last read by taken(), with the file's (inode, mtime, size) then
        self._read_manifest: tuple[tuple[int, int, int], dict[str, Trial]] | None = None

    @property
    def search(self) -> AsyncOptunaSearch:
        if self._search is None:
            self._search = AsyncOptunaSearch(self.spec, self.search_dir, self.store)
        return self._search

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """The search's lock: threads of this process, and every process on any host (flock on the folder)."""
        with self._threads:
            fd = os.open(self.search_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                yield
            finally:
                os.close(fd)

    @property
    def manifest_path(self) -> str:
        return self.session.manifest_path(None, self.run)

    def _handed_path(self) -> str:
        return os.path.join(os.path.dirname(self.manifest_path), HANDED_FILE)

    def _handed(self) -> dict[str, Any]:
        from airflow_provider_gpusched.core.sweep.records.store import read_json

        data = read_json(self._handed_path())
        return data.get("handed", {}) if isinstance(data, dict) and isinstance(data.get("handed"), dict) else {}

    def _trial(self, frozen: Any) -> Trial:
        params = {**self.search.fixed, **frozen.params}
        index = frozen.user_attrs.get("index")
        return make_trial(
            params,
            self.spec.varying(),
            self.spec.code_version,
            int(index) if isinstance(index, int) else frozen.number,
            self.spec.label_format or DEFAULT_LABELS,
        )

    # -- the run -------------------------------------------------------------------------------------
    def plan(self, chunk_size: int | None = None, backend: str = "local") -> Manifest:
        """Write this run's manifest: the trials the study asked for before (done ones skipped unless
        ``force_rerun``; the others pending, to run first), and an empty hand-out list. (``chunk_size`` is not
        used: the workers' one chunk is every trial they take.)"""
        from airflow_provider_gpusched.core.sweep.running.trial_run import Manifest

        with self.locked():
            known = sorted(self.search.known().values(), key=lambda t: t.user_attrs.get("index", t.number))
            trials = [self._trial(t) for t in known]
            pending, skipped = self.store.plan(trials, self.force_rerun)
            path = self.session.write_stage_manifest(
                None,
                self.run,
                trials=trials,
                pending=pending,
                skipped=skipped,
                force_rerun=self.force_rerun,
                chunk_size=None,  # (its one chunk: every trial the workers take)
                backend=backend,
            )
            self.store.write(os.path.relpath(self._handed_path(), self.store.dir), {"handed": {}})
            self._save_spec()
        return Manifest(path)

    def _save_spec(self) -> None:
        """The spec for workers elsewhere (core/sweep/running/worker.py): its settings, not its callables."""
        import copy

        import cloudpickle

        from airflow_provider_gpusched.core.safe_files import write_atomic

        spec = copy.copy(self.spec)
        spec.python_callable = spec.required_env = None
        write_atomic(os.path.join(self.search_dir, SPEC_FILE), cloudpickle.dumps(spec), 0o600)

    def next_trial(self, worker: str = "", resume: bool = False) -> Trial | None:
        """The next trial for a free slot, or None when the search has handed out all it will: a trial of the plan
        not handed out yet, else a new one, while the study holds fewer than ``count`` trials.

        ``resume``: first a trial handed to this same ``worker`` earlier in this run that has no outcome (a worker
        process that runs one trial after another, relaunched after a GPU OOM or a preemption, or requeued by
        Slurm: it goes on with the trial it was running, from its checkpoint). Only for a worker name that one
        process at a time uses."""
        from airflow_provider_gpusched.core.sweep.running.trial_run import Manifest, ManifestTrial

        with self.locked():
            manifest = Manifest(self.manifest_path)
            handed = self._handed()
            if resume:
                mine = self._unfinished(manifest, handed, worker)
                if mine is not None:
                    return mine
            search = self.search
            known = search.known()
            trial = next((t for t in manifest.pending if t.trial_id not in handed), None)
            if trial is not None:
                earlier = known.get(trial.trial_id)
                if earlier is None:
                    raise GpuschedError(
                        f"sweep {self.spec.name}: trial {trial.trial_id} of {manifest.path} is not in the study "
                        f"({search.state_dir}); was the search folder replaced?"
                    )
                running = self.search.optuna.trial.TrialState.RUNNING
                number = earlier.number if earlier.state == running else search.ask_again(earlier)
            else:
                if len(known) >= self.count:
                    return None
                evaluated = {_key({**search.fixed, **t.params}) for t in known.values()}
                asked = search.ask_new(evaluated)
                if asked is None:
                    return None
                params, number = asked
                trial = make_trial(
                    params,
                    self.spec.varying(),
                    self.spec.code_version,
                    len(known),
                    self.spec.label_format or DEFAULT_LABELS,
                )
                record = manifest.record
                record.trials.append(ManifestTrial.of(trial))
                record.pending.append(trial.trial_id)
                from airflow_provider_gpusched.core.sweep.running.trial_run import MANIFEST

                self.store.write(os.path.relpath(manifest.path, self.store.dir), MANIFEST.dump(record))
            search.label(number, trial, self.run)
            handed[trial.trial_id] = {"number": number, "worker": worker, "at": time.time()}
            self.store.write(os.path.relpath(self._handed_path(), self.store.dir), {"handed": handed})
            return trial

    def _unfinished(self, manifest: Manifest, handed: dict[str, Any], worker: str) -> Trial | None:
        by_id = {t.trial_id: t for t in manifest.trials}
        return next((t for t in _handed_to(handed, by_id, worker) if self.store.state(t) not in FINAL_STATES), None)

    def taken(self, worker: str) -> list[Trial]:
        """The trials handed to ``worker`` in this run, in the order they were handed out (a local batch asks each
        second: the manifest is read again only when it changed)."""
        from airflow_provider_gpusched.core.sweep.running.trial_run import Manifest

        handed = self._handed()  # (written whole, atomically: read without the lock)
        st = os.stat(self.manifest_path)
        if self._read_manifest is None or self._read_manifest[0] != (st.st_ino, st.st_mtime_ns, st.st_size):
            trials = Manifest(self.manifest_path).trials
            self._read_manifest = ((st.st_ino, st.st_mtime_ns, st.st_size), {t.trial_id: t for t in trials})
        return _handed_to(handed, self._read_manifest[1], worker)

    def finish(self, trial: Trial) -> str:
        """Tell the study how ``trial`` (handed out by this run) ended, from its record; returns its state. A trial
        whose runner died without an outcome is marked failed first; a stopped one stays RUNNING in the study (the
        next run goes on with it)."""
        with self.locked():
            entry = self._handed().get(trial.trial_id)
            if not isinstance(entry, dict) or not isinstance(entry.get("number"), int):
                raise GpuschedError(f"sweep {self.spec.name}: trial {trial.trial_id} was not handed out by this run")
            state = self.store.state(trial)
            if state not in FINAL_STATES:
                written = self.store.end_unfinished(
                    trial,
                    run=self.run,
                    state="failed",
                    reason="its runner stopped before recording an outcome (killed, or its process died)",
                )
                state = written or self.store.state(trial)
                if state not in FINAL_STATES:  # another run holds it now: its outcome will be that run's to tell
                    return state
            search, number = self.search, entry["number"]
            if state == "stopped" or search.state_of(number) != search.optuna.trial.TrialState.RUNNING:
                return state  # stopped: the next run goes on with it; told already: nothing to add
            values = None
            if state == "succeeded":
                values = self.spec.objective.values(self.store.result(trial)) if self.spec.objective else None
            curve = None
            if state in ("pruned", "succeeded"):
                curve = report_curve(self.store.trial_dir(trial), self.spec.report_metric)
            search.tell_number(number, values, curve if state == "pruned" or values is not None else None)
            return state


def _handed_to(handed: dict[str, Any], by_id: dict[str, Trial], worker: str) -> list[Trial]:
    """The trials of ``by_id`` the hand-out record ``handed`` gives to ``worker``, in the order handed out."""
    mine = [
        (entry.get("at", 0), trial_id)
        for trial_id, entry in handed.items()
        if isinstance(entry, dict) and entry.get("worker") == worker and trial_id in by_id
    ]
    return [by_id[trial_id] for _, trial_id in sorted(mine)]
