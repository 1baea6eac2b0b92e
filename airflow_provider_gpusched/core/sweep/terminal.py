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
from typing import TYPE_CHECKING, Any, TextIO

from airflow_provider_gpusched.core.errors import GpuschedError, InvalidArgumentError
from airflow_provider_gpusched.core.options import host_limit_defaults
from airflow_provider_gpusched.core.sweep.session import SweepSession
from airflow_provider_gpusched.core.sweep.spec import SweepSpec
from airflow_provider_gpusched.core.units import time_limit_seconds

if TYPE_CHECKING:
    from airflow_provider_gpusched.core.gpu.leases import LeaseManager


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
    return value


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
    backend: str = "local",
    slurm: Any = None,
    poll_interval: float = 2.0,
) -> dict[str, Any]:
    """Run the sweep on this host's GPUs (or, ``backend="slurm"``, as Slurm job arrays) and return its summary (``counts``, ``leaderboard``, ``best``, ``text``:
    the status table and leaderboard as ``gpusched sweep results`` prints them).

    :param spec: a :class:`SweepSpec`, a YAML file, or ``package.module:ATTR``.
    :param manager: the ``LeaseManager`` (default: NVML's GPUs, or the simulated ones of
        ``$GPUSCHED_SIMULATE_GPUS``, in the lease directory Airflow's tasks use).
    :param parallel: trials at once (default: what fits on the GPUs).
    :param progress: draw the progress line (to stderr; or give a file).
    :param backend: ``"local"`` or ``"slurm"``: each stage's trials as job arrays (``slurm``: the
        ``SlurmClient``, default the local Slurm CLI), followed every ``poll_interval`` seconds; Ctrl-C cancels them.
    :raises SweepInterrupted: on Ctrl-C, after the running trials were stopped.
    """
    spec = load_spec(spec)
    if backend not in ("local", "slurm"):
        raise InvalidArgumentError("backend", backend, "'local' or 'slurm'")
    spec.resources.check_backend(backend, spec.name)
    session = SweepSession(spec, results_root)
    if backend == "slurm":
        return _run_on_slurm(spec, session, slurm, force_rerun, progress, run, poll_interval)
    from airflow_provider_gpusched.core.sweep.batch import run_local_batch

    manager = manager or _default_manager()
    r = spec.resources
    request = r.local_gpu_request(host_limit_defaults())
    manager.check_possible(request)
    if spec.max_workers is not None:
        parallel = min(parallel or spec.max_workers, spec.max_workers)
    run = run or f"terminal__{time.strftime('%Y-%m-%dT%H:%M:%S')}__{os.getpid()}"
    limit = None if r.time_limit is None else time_limit_seconds(r.time_limit)
    stages: list[int | None] = list(range(spec.rounds or 0)) if spec.in_rounds else [None]
    board = Progress(session, out=None if progress is True else progress) if progress else None
    for round_no in stages:
        manifest = session.prepare(round_no, run=run, force_rerun=force_rerun, backend="local")
        if board is not None:
            board.watch(manifest.trials, round_no, spec.rounds if spec.in_rounds else None)
        stop, done, interrupted = threading.Event(), threading.Event(), threading.Event()
        outcome: dict[str, Any] = {}

        def work(manifest: Any, stop: threading.Event, done: threading.Event, outcome: dict[str, Any]) -> None:
            try:
                outcome["value"] = run_local_batch(
                    manifest,
                    manifest.pending,
                    manager,
                    request,
                    parallel=parallel,
                    trials_per_process=1,
                    owner=f"gpusched sweep run {spec.name} (pid {os.getpid()})",
                    job_class=r.job_class,
                    priority=r.priority,
                    on_event=on_event,
                    stop_event=stop,
                    setup=r.setup,
                    time_limit=limit,
                )
            except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
                outcome["error"] = exc
            finally:
                done.set()

        worker = threading.Thread(
            target=work, args=(manifest, stop, done, outcome), name=f"gpusched-sweep-{spec.name}", daemon=True
        )
        try:
            if board is not None:
                board.__enter__()
            with _ctrl_c_stops(stop, interrupted):
                worker.start()
                while not done.wait(0.5):
                    pass
        finally:
            if board is not None:
                board.__exit__(None, None, None)
        if (
            interrupted.is_set()
        ):  # Ctrl-C: every running trial got SIGTERM, its grace period, SIGKILL; leases given back
            _stopped(session, round_no, run, "stopped by Ctrl-C in gpusched sweep run")
            raise SweepInterrupted(
                f"sweep {spec.name}: stopped; the trials that finished are kept in "
                f"{session.store.dir}, and the next run goes on with the rest"
            )
        if "error" in outcome:
            raise outcome["error"]
        session.settle(round_no, run)
        if round_no is not None:
            session.finish_round(round_no, run)
    return session.collect(run)


def _stopped(session: SweepSession, round_no: int | None, run: str, why: str) -> None:
    """A run stopped by Ctrl-C: its trials that started and have no outcome are recorded ``stopped`` (not left
    ``running`` until the next run), and its summary is written, so ``gpusched sweep results`` and the Sweeps tab
    say what this run did."""
    session.settle(round_no, run, state="stopped", why=why)
    session.collect(run)


@contextlib.contextmanager
def _ctrl_c_stops(stop: threading.Event, interrupted: threading.Event) -> Iterator[None]:
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


#: trials per job array (below Slurm's usual MaxArraySize of 1001)
SLURM_CHUNK = 1000


def slurm_job_arguments(spec: SweepSpec) -> dict[str, Any]:
    """The spec's resources and job class as SlurmJobSpec fields (sbatch's names)."""
    from airflow_provider_gpusched.core.job_classes import JobClassMapping

    r = spec.resources
    args = dict(r.slurm_arguments())
    job_class, priority = args.pop("job_class"), args.pop("priority")
    args["cpus_per_task"] = args.pop("cpus")
    args["environment"] = args.pop("env") or {}
    args["setup"] = args.get("setup") or ()
    classes = JobClassMapping.load(os.environ.get("AIRFLOW__GPUSCHED__JOB_CLASSES") or None)
    for key, value in classes[job_class].slurm_settings(priority).items():
        if args.get(key) is None:
            args[key] = value
    return {k: v for k, v in args.items() if v is not None}


def _run_on_slurm(
    spec: SweepSpec,
    session: SweepSession,
    client: Any,
    force_rerun: bool | None,
    progress: Any,
    run: str | None,
    poll_interval: float,
) -> dict[str, Any]:
    from airflow_provider_gpusched.core.slurm.client import SlurmClient
    from airflow_provider_gpusched.core.slurm.job import SlurmJobSpec, array_range
    from airflow_provider_gpusched.core.sweep.trial_run import chunk_argv

    client = client or SlurmClient()
    run = run or f"terminal__{time.strftime('%Y-%m-%dT%H:%M:%S')}__{os.getpid()}"
    stages: list[int | None] = list(range(spec.rounds or 0)) if spec.in_rounds else [None]
    board = Progress(session, out=None if progress is True else progress) if progress else None
    logs = os.path.join(session.store.dir, "logs")
    os.makedirs(logs, exist_ok=True)
    base = slurm_job_arguments(spec)
    for round_no in stages:
        manifest = session.prepare(round_no, SLURM_CHUNK, run=run, force_rerun=force_rerun, backend="slurm")
        if board is not None:
            board.watch(manifest.trials, round_no, spec.rounds if spec.in_rounds else None)
            board.__enter__()
        jobs: dict[str, int] = {}
        try:
            for k in range(manifest.chunk_count()):
                size = len(manifest.chunk(k))
                job = client.submit(
                    SlurmJobSpec(
                        command=chunk_argv(manifest, k),
                        array=array_range(size, spec.max_workers),
                        job_name=f"sweep.{spec.name}",
                        output=os.path.join(logs, "slurm-%A_%a.out"),
                        comment=f"gpusched sweep run {spec.name}",
                        **base,
                    )
                )
                jobs[job.job_id] = size
            while jobs:
                states = client.statuses(list(jobs), jobs)
                jobs = {j: n for j, n in jobs.items() if not states[j].is_terminal}
                if jobs:
                    time.sleep(poll_interval)
        except KeyboardInterrupt:
            if jobs:
                client.cancel(list(jobs))
            _stopped(session, round_no, run, "stopped by Ctrl-C in gpusched sweep run (its Slurm jobs cancelled)")
            raise SweepInterrupted(
                f"sweep {spec.name}: stopped (Slurm jobs {', '.join(jobs) or '-'} cancelled); "
                f"the trials that finished are kept in {session.store.dir}, and the next run goes "
                f"on with the rest"
            ) from None
        finally:
            if board is not None:
                board.__exit__(None, None, None)
        session.settle(round_no, run)
        if round_no is not None:
            session.finish_round(round_no, run)
    return session.collect(run)


def _default_manager() -> LeaseManager:
    from airflow_provider_gpusched.core.gpu.inventory import get_inventory
    from airflow_provider_gpusched.core.gpu.leases import LeaseManager

    state_dir = os.environ.get("AIRFLOW__GPUSCHED__GPU_STATE_DIR") or None
    return LeaseManager(get_inventory(os.environ.get("AIRFLOW__GPUSCHED__SIMULATE_GPUS") or None), state_dir)
