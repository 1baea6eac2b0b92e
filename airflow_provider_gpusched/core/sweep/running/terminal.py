"""Sweeps without Airflow: run a spec from a terminal or a notebook on this host's GPUs (GPU Task Scheduler's
``scheduler.start()``, DI-toolkit's ``.run()``), in the same results folder a DAG uses.

    from airflow_provider_gpusched import run_sweep
    summary = run_sweep(spec)                 # or: gpusched sweep run dags/sweeps/lr_schedule.yaml
    summary["leaderboard"][0]

The trials take leases from the same lease directory as Airflow's tasks (so a DAG and a terminal run share the
GPUs fairly), record their state, results and reports in the sweep's folder, and the same status table and
leaderboard come out. What succeeded or was pruned is not run again: after Ctrl-C the next run goes on with the
rest, and a DAG of the same sweep later skips what the terminal finished (and the other way round). Searches in
rounds (Optuna, evolution) ask, run and tell round by round, as their task group does.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Protocol, TextIO

from airflow_provider_gpusched.core.backends import DEFAULT_BACKEND, get_backend
from airflow_provider_gpusched.core.errors import GpuschedError, InvalidArgumentError
from airflow_provider_gpusched.core.registry import Registry
from airflow_provider_gpusched.core.sweep.definition.sweep_spec import SweepSpec
from airflow_provider_gpusched.core.sweep.running.session import SweepSession

if TYPE_CHECKING:
    from airflow_provider_gpusched.core.gpu.leases import LeaseManager


class SweepRunner(Protocol):
    """What ``gpusched sweep run`` asks of a backend (core/backends.py's ``Backend.run_sweep``): run every stage of
    ``spec`` in this process through ``handle`` and return the session's summary."""

    def run_sweep(
        self,
        spec: SweepSpec,
        session: SweepSession,
        run: str,
        *,
        handle: Any = None,
        parallel: int | None = None,
        force_rerun: bool | None = None,
        progress: Any = True,
        on_event: Any = None,
        poll_interval: float = 2.0,
    ) -> dict[str, Any]: ...


class RunEndHook:
    """What is done once a terminal run of a sweep ended, with its summary, before :func:`run_sweep` returns it: a
    class known by ``name`` in :data:`RUN_END`, made once, called after each run (it decides whether the spec asks
    anything of it). ``say`` is where the run's lines go (``on_event``, or stderr)."""

    name: str = "hook"

    def __call__(
        self, spec: SweepSpec, session: SweepSession, run: str, summary: dict[str, Any], say: Callable[[str], None]
    ) -> None:
        raise NotImplementedError


#: the hooks :func:`run_sweep` calls when a run ended (one :class:`~airflow_provider_gpusched.core.registry.Registry`,
#: as backends and trackers have: other packages add theirs under the entry-point group
#: ``airflow_provider_gpusched.run_end``). The built-in one is a ``module:Class`` string, the registry's way, imported
#: when called: the spec's trackers sent the run's summary (core/tracking/run_end.py; the sweep imports nothing of
#: the tracking built on it).
RUN_END: Registry[RunEndHook] = Registry(
    "run-end hook",
    RunEndHook,
    "airflow_provider_gpusched.run_end",
    {"tracking": "airflow_provider_gpusched.core.tracking.run_end:SendToTrackers"},
    function="RUN_END.register",
)


class SweepInterrupted(GpuschedError):
    """The run was stopped (Ctrl-C): its running trials were stopped; a new run goes on with what is left."""


def load_spec(target: str | SweepSpec) -> SweepSpec:
    """A spec from a YAML file, or from ``package.module:ATTR`` (a SweepSpec, or a function returning one)."""
    if isinstance(target, SweepSpec):
        return target
    if not isinstance(target, str) or not target:
        raise InvalidArgumentError("spec", target, "a YAML file or 'package.module:ATTR'")
    if os.path.exists(target) or target.endswith((".yaml", ".yml")):
        return SweepSpec.from_yaml(target)
    if ":" not in target:
        raise InvalidArgumentError(
            "spec", target, "a YAML file that exists, or 'package.module:ATTR' naming a SweepSpec"
        )
    value: Any = import_callable_or_value(target)
    if callable(value) and not isinstance(value, SweepSpec):
        value = value()
    if not isinstance(value, SweepSpec):
        raise InvalidArgumentError(
            "spec", target, f"a SweepSpec (or a function returning one); it is a {type(value).__name__}"
        )
    module = sys.modules.get(target.split(":", 1)[0])
    return value.anchor(os.path.dirname(os.path.abspath(module.__file__))) if module and module.__file__ else value


def script_directory() -> str:
    """The running script's directory (``python sweep.py``), or the working directory (a notebook, ``python
    -c``): where a spec made in Python and run from here finds its relative paths, unless it says."""
    main = getattr(sys.modules.get("__main__"), "__file__", None)
    return os.path.dirname(os.path.abspath(main)) if main else os.getcwd()


def import_callable_or_value(target: str) -> Any:
    """``package.module:ATTR`` (the working directory is importable, as for ``python -m``)."""
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    from airflow_provider_gpusched.core.import_target import TargetImportError, import_attribute

    try:
        obj = import_attribute(target)
    except TargetImportError as exc:
        raise InvalidArgumentError("spec", target, f"'package.module:ATTR' that imports ({exc})") from None
    return obj


class Progress:
    """A line that says how far the sweep is: done of total, running, failed, best so far. Redrawn in place on a
    terminal, a new line per change elsewhere (logs, notebooks)."""

    def __init__(self, session: SweepSession, out: TextIO | None = None, interval: float = 1.0) -> None:
        self.session, self.out, self.interval = session, out or sys.stderr, interval
        self.trials: list[Any] = []
        self._last = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.tty = bool(getattr(self.out, "isatty", lambda: False)())

    def watch(self, trials: list[Any], round_no: int | None = None, rounds: int | None = None) -> None:
        """Follow ``trials`` (a stage's: round ``round_no`` of ``rounds``); the best so far is the sweep's, over
        every stage watched, not the stage's own."""
        if self.trials:
            self._best_before = self._best(self.trials, self._best_before)
        self.trials = list(trials)
        self.round = None if round_no is None else (round_no, rounds)

    _best_before: float | None = None
    round: tuple[int, int | None] | None = None

    def _best(self, trials: list[Any], best: float | None) -> float | None:
        store, objective = self.session.store, self.session.spec.objective
        if objective is None or objective.several:
            return None
        for trial in trials:
            if store.state(trial) == "succeeded":
                score = objective.score(store.result(trial))
                if score is not None and (best is None or objective.better(score, best)):
                    best = score
        return best

    def line(self) -> str:
        store, objective = self.session.store, self.session.spec.objective
        counts: dict[str, int] = {}
        for trial in self.trials:
            state = store.state(trial)
            counts[state] = counts.get(state, 0) + 1
        best = self._best(self.trials, self._best_before)
        done = sum(counts.get(s, 0) for s in ("succeeded", "pruned", "failed", "invalid", "timeout"))
        total = max(1, len(self.trials))
        width = 24
        bar = "#" * int(width * done / total) + "-" * (width - int(width * done / total))
        failed = sum(counts.get(s, 0) for s in ("failed", "invalid", "timeout"))
        stage = "" if self.round is None else f"round {self.round[0] + 1}/{self.round[1]} "
        text = f"{stage}[{bar}] {done}/{len(self.trials)} done, {counts.get('running', 0)} running, {failed} failed" + (
            f", {counts.get('pruned', 0)} pruned" if counts.get("pruned") else ""
        )
        if best is not None and objective is not None:
            text += f", best so far {objective.metrics[0]} {best:.6g}"
        return text

    def show(self, final: bool = False) -> None:
        text = self.line()
        if self.tty:
            self.out.write("\r" + text.ljust(len(self._last)) + ("\n" if final else ""))
        elif text != self._last or final:
            self.out.write(text + "\n")
        self._last = text
        self.out.flush()

    def __enter__(self) -> Progress:
        def loop() -> None:
            while not self._stop.wait(self.interval):
                self.show()

        self._thread = threading.Thread(target=loop, daemon=True, name="gpusched-sweep-progress")
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        self.show(final=True)


def run_sweep(
    spec: str | SweepSpec,
    *,
    results_root: str | None = None,
    manager: Any = None,
    parallel: int | None = None,
    force_rerun: bool | None = None,
    progress: bool | Any = True,
    on_event: Callable[[str], None] | None = None,
    run: str | None = None,
    backend: str = DEFAULT_BACKEND,
    slurm: Any = None,
    handle: Any = None,
    poll_interval: float = 2.0,
) -> dict[str, Any]:
    """Run the sweep on a backend (this host's GPUs by default, or Slurm job arrays) and return its summary
    (``counts``, ``leaderboard``, ``best``, ``text``: the status table and leaderboard as ``gpusched sweep
    results`` prints them).

    :param spec: a :class:`~airflow_provider_gpusched.core.sweep.definition.sweep_spec.SweepSpec`, a YAML file, or ``package.module:ATTR``.
    :param manager: the ``LeaseManager`` (default: NVML's GPUs, or the simulated ones of
        ``$GPUSCHED_SIMULATE_GPUS``, in the lease directory Airflow's tasks use).
    :param parallel: trials at once (default: what fits on the GPUs).
    :param progress: draw the progress line (to stderr; or give a file).
    :param backend: a backend's name (core/backends.py): ``local``, or ``slurm``: each stage's trials as job
        arrays (``slurm``: the ``SlurmClient``, default the local Slurm CLI), followed every ``poll_interval``
        seconds; Ctrl-C cancels them.
    :param handle: what the backend works through (its ``default_handle`` when None; ``manager`` and ``slurm``
        are the local and Slurm backends' handles by their older names).
    :raises SweepInterrupted: on Ctrl-C, after the running trials were stopped.
    """
    spec = load_spec(spec).anchor(script_directory())
    chosen = get_backend(backend)
    runner: SweepRunner = chosen
    spec.resources.check_backend(backend, spec.name)
    if spec.asks_as_it_goes and not chosen.asynchronous_search:
        raise GpuschedError(
            f"sweep {spec.name}: asynchronous: true runs on the local and slurm backends (slots that ask for "
            f"trials as they free); the {backend} backend runs an Optuna search in rounds: leave out asynchronous, "
            f"or run it with backend='local'"
        )
    session = SweepSession(spec, results_root)
    run = run or f"terminal__{time.strftime('%Y-%m-%dT%H:%M:%S')}__{os.getpid()}"
    summary = runner.run_sweep(
        spec,
        session,
        run,
        handle=handle if handle is not None else {"manager": manager, "client": slurm}.get(chosen.handle),
        parallel=parallel,
        force_rerun=force_rerun,
        progress=progress,
        on_event=on_event,
        poll_interval=poll_interval,
    )
    say = on_event or (lambda line: print(line, file=sys.stderr))
    for name in RUN_END:  # the spec's trackers among them (core/tracking/run_end.py)
        try:  # a hook never fails a run whose trials have ended (as a tracker never fails its trials)
            RUN_END.instance(name, RUN_END.kind)(spec, session, run, summary, say)
        except Exception as exc:  # noqa: BLE001 - said, and the other hooks still run
            say(f"sweep {spec.name}: run-end hook {name!r} failed: {exc}")
    return summary


class StageStopped(Exception):
    """Raised by a backend's stage runner when Ctrl-C stopped its stage (after its work was stopped):
    ``why`` is recorded on the trials left without an outcome, ``message`` is the SweepInterrupted's."""

    def __init__(self, why: str, message: str) -> None:
        super().__init__(message)
        self.why, self.message = why, message


#: a backend's part of one stage: run ``manifest``'s trials here and return once they ended, or raise
#: StageStopped (``searching``: the asynchronous run whose slots ask for trials, else None; ``board``: the
#: progress line, or None)
StageHook = Callable[[Any, "int | None", Any, "Progress | None"], None]


def run_stages(
    spec: SweepSpec,
    session: SweepSession,
    run: str,
    backend: str,
    run_stage: StageHook,
    *,
    force_rerun: bool | None = None,
    progress: Any = True,
    chunk_size: int | None = None,
) -> dict[str, Any]:
    """The one stage loop of ``gpusched sweep run``, for every backend: each stage (each round of a search in
    rounds, or the one stage; an asynchronous search's plan) is planned, drawn on the progress line, run by the
    backend's ``run_stage`` and settled; a search in rounds is told each round's results; the session's summary
    is returned. A stage stopped by Ctrl-C records its unfinished trials ``stopped`` and raises SweepInterrupted."""
    searching = session.asynchronous(run, force_rerun) if spec.asks_as_it_goes else None
    stages: list[int | None] = list(range(spec.rounds or 0)) if spec.in_rounds else [None]
    board = Progress(session, out=None if progress is True else progress) if progress else None
    for round_no in stages:
        if searching is not None:
            manifest = searching.plan(chunk_size, backend=backend)
        else:
            manifest = session.prepare(round_no, chunk_size, run=run, force_rerun=force_rerun, backend=backend)
        if board is not None:
            board.watch(manifest.trials, round_no, spec.rounds if spec.in_rounds else None)
        stopped: StageStopped | None = None
        try:
            if board is not None:
                board.__enter__()
            run_stage(manifest, round_no, searching, board)
        except StageStopped as exc:
            stopped = exc
        finally:
            if board is not None:
                board.__exit__(None, None, None)
        if stopped is not None:
            stopped_run(session, round_no, run, stopped.why)
            raise SweepInterrupted(stopped.message)
        session.settle(round_no, run)
        if round_no is not None:
            session.finish_round(round_no, run)
    return session.collect(run)


def stopped_run(session: SweepSession, round_no: int | None, run: str, why: str) -> None:
    """A run stopped by Ctrl-C: its trials that started and have no outcome are recorded ``stopped`` (not left
    ``running`` until the next run), and its summary is written, so ``gpusched sweep results`` and the Sweeps tab
    say what this run did."""
    session.settle(round_no, run, state="stopped", why=why)
    session.collect(run)


@contextlib.contextmanager
def ctrl_c_stops(stop: threading.Event, interrupted: threading.Event) -> Iterator[None]:
    """While in the block, SIGINT (Ctrl-C) sets ``interrupted`` and ``stop`` instead of raising KeyboardInterrupt, so the trials in
    flight are stopped in order (the stopped ones stay without an outcome: the next run runs them); a second
    Ctrl-C raises KeyboardInterrupt at once. (A KeyboardInterrupt raised inside ``Thread.join`` can mark a
    running thread as ended, CPython's bpo-45274 handling, and leave its trials running.)"""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_sigint(signum: int, frame: object) -> None:
        if interrupted.is_set():
            raise KeyboardInterrupt
        interrupted.set()
        stop.set()

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def default_manager() -> LeaseManager:
    from airflow_provider_gpusched.core.gpu.inventory import get_inventory
    from airflow_provider_gpusched.core.gpu.leases import LeaseManager

    state_dir = os.environ.get("AIRFLOW__GPUSCHED__GPU_STATE_DIR") or None
    return LeaseManager(get_inventory(os.environ.get("AIRFLOW__GPUSCHED__SIMULATE_GPUS") or None), state_dir)
