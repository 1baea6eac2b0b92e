"""Running one trial of a sweep, wherever it runs (a local GPU child, a Slurm job or array task).

The Airflow side writes a *manifest* (the target, the objective, the trials of this run) under the sweep's
results folder; each trial then runs as::

    python -m airflow_provider_gpusched.core.sweep.running.trial_run MANIFEST TRIAL_ID [LABEL]
    python -m airflow_provider_gpusched.core.sweep.running.trial_run MANIFEST --chunk K   # Slurm array task
                                                      (trial K * chunk_size + $SLURM_ARRAY_TASK_ID)
    python -m airflow_provider_gpusched.core.sweep.running.trial_run MANIFEST --ids ID,ID,...  # one after another

which marks the trial running, runs the command (argv with ``{param}`` placeholders filled, in the trial
folder, environment ``GPUSCHED_TRIAL_DIR``/``_ID``/``_PARAMS``) or calls the Python callable with
``(params, trial_dir)``, records the result and the final state, and exits with the trial's exit code.
The trailing LABEL is ignored; it makes process lists and Airflow's mapped-task labels readable.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, TextIO

from airflow_provider_gpusched.core.backends import DEFAULT_BACKEND, get_backend
from airflow_provider_gpusched.core.checks import is_number
from airflow_provider_gpusched.core.errors import GpuschedError, InvalidArgumentError
from airflow_provider_gpusched.core.load_stage import channel_fds
from airflow_provider_gpusched.core.records import Float, RecordType, one_of, record_class, says, take_record_key
from airflow_provider_gpusched.core.safe_files import BadRecordError
from airflow_provider_gpusched.core.sweep.parts.expand import Trial, nested
from airflow_provider_gpusched.core.sweep.records.store import (
    FINAL_STATES,
    OUTPUT_LOG_FILE,
    TrialStore,
    describe_holder,
    read_json,
)
from airflow_provider_gpusched.core.work_env import CHECKPOINT_ENV

CALLABLE_FILE = "callable.pkl"
REQUIRED_ENV_FILE = "required_env.pkl"
EXIT_USAGE = 2
EXIT_INVALID_RESULT = 3  # the trial ran, but its result is unusable (on_invalid_result: fail)
EXIT_WRITE_FAILED = 4  # the trial runner could not write under the results root (full disk, quota)
INVALID_RESULT_POLICIES = ("fail", "record")


Text = Annotated[str, says("a string")]


@record_class
@dataclass
class ManifestTrial:
    """A trial as a manifest lists it."""

    trial_id: Annotated[str, says("a trial id", min_length=1, max_length=1000)]
    label: Text
    index: Annotated[int, says("an integer")]
    params: Annotated[dict[str, Any], says("an object of parameters", strict=None)]

    @classmethod
    def of(cls, trial: Trial) -> ManifestTrial:
        return cls(trial.trial_id, trial.label, trial.index, trial.params)

    def trial(self) -> Trial:
        return Trial(dict(self.params), self.trial_id, self.label, self.index)


@record_class
@dataclass
class ManifestRecord:
    """What a sweep stage's plan writes for its trial runners (``manifest.json``, ``manifest-rN.json``...) and
    :class:`Manifest` reads back: which trials to run and how. One definition for the writer
    (:func:`write_manifest`), the reader and the group manifests of batched runs."""

    sweep: Annotated[str, says("a sweep name", min_length=1)]
    root: Annotated[str, says("a results root", min_length=1)]
    #: the trial's command (``command``: argv list) or pickled callable (``callable``: its file name), with the
    #: config template and the pickled ``required_env`` where the spec has them
    target: Annotated[dict[str, Any], says("an object with 'command' or 'callable'", strict=None)]
    trials: Annotated[list[ManifestTrial], says("a list of trials", strict=None)]
    pending: Annotated[list[Text], says("a list of trial ids", strict=None)]
    objective: Annotated[dict[str, Any], says("an objective or null", strict=None)] | None = None
    env: Annotated[dict[str, Text], says("an object of environment variables", strict=None)] = field(
        default_factory=dict
    )
    chunk_size: Annotated[int, says("a positive integer or null", gt=0)] | None = None
    skipped: Annotated[list[Text], says("a list of trial ids", strict=None)] = field(default_factory=list)
    round: Annotated[int, says("an integer or null")] | None = None
    varying: Annotated[list[Text], says("a list of parameter names", strict=None)] = field(default_factory=list)
    run: Annotated[str, says("a DAG run id or null")] | None = None
    planned_at: Annotated[Float, says("a time stamp or null", strict=None)] | None = None
    force_rerun: Annotated[bool, says("true or false")] = False
    base_dir: Annotated[str, says("a folder or null")] | None = None
    on_invalid_result: Annotated[str, says("'fail' or 'record'"), one_of(INVALID_RESULT_POLICIES)] = "fail"
    distributed: Annotated[dict[str, Any], says("how ranks start, strict=None, or null")] | None = None
    pruning: Annotated[dict[str, Any], says("a pruning rule or null", strict=None)] | None = None
    #: an asynchronous search's stage: its trials are asked for as slots free, and the pruning rule may judge them in
    #: the sweep's shared Optuna study (core/sweep/running/asynchronous.py)
    shared_study: Annotated[bool, says("true or false")] = False
    #: each trial keeps its checkpoints in its own folder (``checkpoint/``, $GPUSCHED_CHECKPOINT_DIR), whatever runs
    #: it: population-based training hands them on to the next generation (core/sweep/searches/pbt.py)
    checkpoints_in_trial: Annotated[bool, says("true or false")] = False
    #: a batched group's manifest: the manifest it was cut from
    group_of: Annotated[str, says("a manifest path or null")] | None = None
    #: the spec's search type and experiment trackers (core/tracking/config.py): the trial tasks send their trials
    search: Annotated[str, says("a search type or null")] | None = None
    tracking: Annotated[list[dict[str, Any]], says("a list of trackers", strict=None)] = field(default_factory=list)


MANIFEST = RecordType(ManifestRecord, name="sweep manifest")


def save_callable(folder: str, func: Callable[..., Any], name: str = CALLABLE_FILE) -> str:
    """Pickle a trial callable (or the spec's ``required_env``) by value when its module is not importable
    elsewhere (a DAG file); returns the file's name in ``folder``."""
    from airflow_provider_gpusched.core import pyfunc
    from airflow_provider_gpusched.core.safe_files import write_atomic

    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, name)
    write_atomic(path, pyfunc.dumps(func, func), None)
    return name


def write_manifest(
    store: TrialStore,
    name: str,
    *,
    trials: Sequence[Trial],
    pending: Sequence[Trial],
    target: Mapping[str, Any],
    objective: Mapping[str, Any] | None,
    env: Mapping[str, str] | None = None,
    chunk_size: int | None = None,
    **settings: Any,
) -> str:
    """``trials``: every trial of this run; ``pending``: those to run now (the others were done before);
    ``settings``: the manifest's other fields (:class:`ManifestRecord`)."""
    record = ManifestRecord(
        sweep=store.sweep,
        root=store.root,
        target=dict(target),
        objective=dict(objective) if objective is not None else None,
        env=dict(env or {}),
        chunk_size=chunk_size,
        trials=[ManifestTrial.of(t) for t in trials],
        pending=[t.trial_id for t in pending],
        **settings,
    )
    return store.write(name, MANIFEST.dump(record))


class Manifest:
    def __init__(self, path: str, data: Any = None, *, key: bytes | None = None) -> None:
        """The manifest in ``path`` (``data``: its content, when the caller just wrote it), every field checked
        (``key``: unless it is sealed with it, core/records.py)."""
        data = read_json(path) if data is None else data
        if not isinstance(data, dict) or "_unreadable" in data or "trials" not in data:
            raise InvalidArgumentError("manifest", path, "a sweep manifest written by the sweep's expand task")
        try:
            self.record = MANIFEST.read(data, path, key=key)
        except BadRecordError as exc:
            raise InvalidArgumentError(
                "manifest", path, f"a sweep manifest written by the sweep's plan ({exc})"
            ) from None
        self.path = os.path.abspath(path)
        self.store = TrialStore(self.record.root, self.record.sweep)
        self.trials = [t.trial() for t in self.record.trials]
        self._by_id = {t.trial_id: t for t in self.trials}
        self.pending = [self._by_id[i] for i in self.record.pending]
        self._callable: Callable[..., Any] | None = None

    def trial(self, trial_id: str) -> Trial:
        try:
            return self._by_id[trial_id]
        except KeyError:
            raise InvalidArgumentError("trial_id", trial_id, f"a trial of {self.path}") from None

    def chunk(self, k: int) -> list[Trial]:
        size = self.record.chunk_size or len(self.pending) or 1
        return self.pending[k * size : (k + 1) * size]

    def chunk_count(self) -> int:
        size = self.record.chunk_size or len(self.pending) or 1
        return -(-len(self.pending) // size)

    def load_required_env(self) -> Callable[..., Any]:
        """GPU Task Scheduler's ``required_env``: the function the spec pickled (core/sweep/running/session.py)."""
        import pickle

        with open(os.path.join(self.store.dir, self.record.target["required_env"]), "rb") as fh:
            func: Callable[..., Any] = pickle.load(fh)
        return func

    def load_callable(self) -> Callable[..., Any]:
        """The sweep's callable, unpickled once per manifest object (a group runs several trials with it)."""
        if self._callable is None:
            import pickle  # cloudpickle writes it; reading needs only pickle, which imports cloudpickle's
            # helpers itself when the callable was pickled by value (a lambda, a closure), not by reference

            with open(os.path.join(self.store.dir, self.record.target["callable"]), "rb") as fh:
                self._callable = pickle.load(fh)
        return self._callable


def trial_environment(trial: Trial, folder: str, sweep: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    # matplotlib draws to files in a trial, never to a screen (GPU Task Scheduler sets Agg too); a trial that wants
    # another backend says so in its environment or with matplotlib.pyplot.switch_backend
    agg = {} if "MPLBACKEND" in os.environ or "MPLBACKEND" in (extra or {}) else {"MPLBACKEND": "Agg"}
    return {
        **agg,
        **dict(extra or {}),
        "GPUSCHED_SWEEP": sweep,
        "GPUSCHED_TRIAL_ID": trial.trial_id,
        "GPUSCHED_TRIAL_DIR": folder,
        "GPUSCHED_TRIAL_LABEL": trial.label,
        "GPUSCHED_REPORT_FILE": os.path.join(folder, "reports.jsonl"),
        "GPUSCHED_TRIAL_PARAMS": json.dumps(nested(trial.params), default=str),
    }


_ENV_NAME = __import__("re").compile(r"[A-Za-z_][A-Za-z0-9_]*")


def required_env(manifest: Manifest, trial: Trial, folder: str) -> dict[str, str]:
    """What the spec's ``required_env(params, trial_dir)`` returns for this trial, checked: names of environment
    variables, values as strings (GPU Task Scheduler calls it before the test starts)."""
    value = call_trial(manifest.load_required_env(), nested(trial.params), folder)
    if not isinstance(value, Mapping):
        raise TypeError(f"expected a mapping of variable name -> value, got {type(value).__name__}")
    out = {}
    for name, item in value.items():
        if not isinstance(name, str) or not _ENV_NAME.fullmatch(name):
            raise ValueError(f"{name!r} is not an environment variable name")
        if item is None or "\x00" in str(item):
            raise ValueError(f"{name}: expected a value (text without NUL), got {item!r}")
        out[name] = str(item)
    return out


def call_trial(func: Callable[..., Any], params: dict[str, Any], folder: str) -> Any:
    """``func(params, trial_dir)``; ``func(params)`` when it takes one argument."""
    try:
        import inspect

        kinds = [p.kind for p in inspect.signature(func).parameters.values()]
    except (TypeError, ValueError):  # no signature to read (a builtin): both arguments
        return func(params, folder)
    positional = [k for k in kinds if k in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    if len(positional) >= 2 or inspect.Parameter.VAR_POSITIONAL in kinds:
        return func(params, folder)
    return func(params)


def result_document(value: Any, objective: Mapping[str, Any] | None) -> Any:
    """A callable's return value as stored: dicts as they are, a bare number under the objective's metric."""
    if value is None or isinstance(value, Mapping):
        return value
    if is_number(value):
        return {(objective or {}).get("metric") or "value": value}
    return {"value": value}


def result_problem(result: Any, objective: Mapping[str, Any] | None) -> str:
    """'' when ``result`` gives the objective a finite number (or there is no objective), else why not."""
    if isinstance(result, Mapping) and "_unreadable" in result:
        return f"its result cannot be read ({result['_unreadable']})"
    if not objective:
        return ""
    from airflow_provider_gpusched.core.sweep.parts.objective import Objective

    metric = objective.get("metric")
    if result is None:
        return f"the trial wrote no result.json (the objective needs {metric!r})"
    return Objective(objective["metric"], objective.get("mode", "maximize")).problem(result)


def _finished_elsewhere(manifest: Manifest, trial: Trial) -> tuple[str, int] | None:
    """Once we hold the claim: (state, exit code) when this trial must not run again here — it succeeded
    (and this run does not force a re-run, or another run re-ran it after this run was planned), or another
    run finished it while this one waited."""
    status = manifest.store.status(trial)
    if not isinstance(status, dict) or status.get("state") not in FINAL_STATES or status.get("state") == "stopped":
        return None  # (a stop is not an outcome to take over: the trial runs here)
    run = manifest.record.run
    by_other = bool(status.get("run")) and status.get("run") != run
    after_plan = float(status.get("ended") or 0) >= float(manifest.record.planned_at or 0)
    if status["state"] in ("succeeded", "pruned") and (not manifest.record.force_rerun or after_plan):
        return status["state"], 0
    if by_other and after_plan:
        return status["state"], int(status.get("exit_code") or 1) if status["state"] != "invalid" else (
            EXIT_INVALID_RESULT if manifest.record.on_invalid_result == "fail" else 0
        )
    return None


def run_trial(manifest: Manifest, trial: Trial, *, out: TextIO | None = None) -> int:
    """Run ``trial`` here and now; record its state and result; return its exit code.

    Only one process runs a trial at a time, whichever DAG run it belongs to: the runner takes the trial's
    claim first; when another run holds it, this one waits and then takes over that run's outcome."""
    out = out or sys.stdout
    store = manifest.store
    holder = {"host": os.uname().nodename, "pid": os.getpid(), "run": manifest.record.run, "since": time.time()}
    claim = store.claim(trial, holder, wait=False)
    if claim is None:
        print(
            f"[gpusched] trial {trial.index} {trial.label or trial.trial_id} is being run by "
            f"{describe_holder(store.claim_holder(trial))}; waiting for it instead of running it twice",
            file=out,
            flush=True,
        )
        claim = store.claim(trial, holder, wait=True)
    try:
        done = _finished_elsewhere(manifest, trial)
        if done is not None:
            status = store.status(trial) or {}
            who = (
                f"DAG run {status['run']}"
                if status.get("run") and status.get("run") != holder["run"]
                else "an earlier run"
            )
            print(
                f"[gpusched] trial {trial.index} {trial.label or trial.trial_id} already {done[0]} "
                f"(by {who}); not running it again",
                file=out,
                flush=True,
            )
            return done[1]
        return _run_claimed(manifest, trial, out)
    finally:
        claim.release()


def _finish_ok(manifest: Manifest, trial: Trial, result: Any, out: TextIO) -> int:
    """Record a trial whose command/callable succeeded: ``succeeded``, or ``invalid`` when its result
    cannot be scored (the trial task then fails unless ``on_invalid_result: record``)."""
    store = manifest.store
    problem = result_problem(result, manifest.record.objective)
    if problem:
        fail = manifest.record.on_invalid_result == "fail"
        code = EXIT_INVALID_RESULT if fail else 0
        store.mark_finished(trial, ok=False, state="invalid", exit_code=code, error=f"invalid result: {problem}")
        print(
            f"[gpusched] trial {trial.trial_id} ran but its result is invalid: {problem}"
            + ("" if fail else " (recorded; on_invalid_result: record)"),
            file=out,
            flush=True,
        )
        return code
    store.mark_finished(trial, ok=True, result=None, exit_code=0)
    print(
        f"[gpusched] trial {trial.trial_id} succeeded"
        + (f": {json.dumps(result, default=str)[:500]}" if result is not None else ""),
        file=out,
        flush=True,
    )
    return 0


def _run_claimed(manifest: Manifest, trial: Trial, out: TextIO) -> int:
    store = manifest.store
    log_path = os.path.join(store.trial_dir(trial), OUTPUT_LOG_FILE)
    folder = store.mark_running(trial, run=manifest.record.run, log=log_path)
    env = trial_environment(trial, folder, store.sweep, manifest.record.env)
    if manifest.record.checkpoints_in_trial:
        env[CHECKPOINT_ENV] = os.path.join(folder, "checkpoint")
    target = manifest.record.target
    if target.get("required_env"):
        try:
            env.update(required_env(manifest, trial, folder))
        except Exception as exc:  # noqa: BLE001 - the user's function: the trial fails, saying so
            why = f"required_env: {type(exc).__name__}: {exc}"
            store.mark_finished(trial, ok=False, exit_code=2, error=why)
            print(f"[gpusched] trial {trial.trial_id}: {why}", file=out, flush=True)
            return 2
    config = None
    if target.get("config_template"):
        try:
            config = render_config(target["config_template"], trial, folder)
        except (ValueError, OSError) as exc:  # InvalidArgumentError is a ValueError: a placeholder it lacks
            store.mark_finished(trial, ok=False, exit_code=2, error=f"config_template: {exc}")
            print(f"[gpusched] trial {trial.trial_id}: config_template: {exc}", file=out, flush=True)
            return 2
        env["GPUSCHED_TRIAL_CONFIG"] = config
    pruning = manifest.record.pruning
    if pruning and "callable" in target:
        # a callable's report() judges and raises TrialPruned; a command is judged and stopped by this runner
        # (its own report() then only writes: two judges would race, and the command would end failed)
        env["GPUSCHED_PRUNING"] = json.dumps(pruning)
        if manifest.record.shared_study:
            env["GPUSCHED_SHARED_STUDY"] = "1"
    print(
        f"[gpusched] trial {trial.index} {trial.label or trial.trial_id} (id {trial.trial_id}) in {folder}",
        file=out,
        flush=True,
    )
    if "callable" in target:
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            with _output_copied_to(log_path):
                value = call_trial(manifest.load_callable(), nested(trial.params), folder)
        except BaseException as exc:  # noqa: BLE001 - the trial's own failure, recorded and reported
            if pruning:
                from airflow_provider_gpusched.core.sweep.pruning_rules.judging import TrialPruned

                if isinstance(exc, TrialPruned):
                    return _pruned(store, trial, str(exc), out)
            import traceback

            text = traceback.format_exc()
            print(text, file=sys.stderr, flush=True)
            with open(log_path, "a", encoding="utf-8", errors="replace") as log:
                log.write(text)
            store.mark_finished(trial, ok=False, exit_code=1, error=f"{type(exc).__name__}: {exc}")
            return 1
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        result = result_document(value, manifest.record.objective)
        if result is not None:
            try:
                store.write_result(trial, result)
            except (TypeError, ValueError) as exc:
                result = {"_unreadable": f"the callable returned a value that is not JSON: {exc}"}
        return _finish_ok(manifest, trial, result if result is not None else store.result(trial), out)
    from airflow_provider_gpusched.core.sweep.parts.command import format_command

    argv = format_command(target["command"], trial.params, folder, trial, config)
    if manifest.record.distributed:
        try:
            argv = distributed_argv(manifest.record.distributed, argv, {**os.environ, **env})
        except GpuschedError as exc:
            store.mark_finished(trial, ok=False, exit_code=EXIT_USAGE, error=f"distributed: {exc}")
            print(f"[gpusched] trial {trial.trial_id}: {exc}", file=out, flush=True)
            return EXIT_USAGE
    stop = _pruning_watch(pruning, store.dir, folder, manifest.record.shared_study) if pruning else None
    try:
        code, pruned = _run_command(argv, folder, {**os.environ, **env}, log_path, out, stop)
    except OSError as exc:
        why = f"cannot run {argv[0]!r}: {exc}{relative_path_hint(argv, folder, manifest.record.base_dir)}"
        store.mark_finished(trial, ok=False, exit_code=127, error=why)
        print(f"[gpusched] {why}", file=out, flush=True)
        return 127
    if pruned:
        return _pruned(store, trial, pruned, out)
    result = store.result(trial)
    if code == 0:
        return _finish_ok(manifest, trial, result, out)
    hint = relative_path_hint(argv, folder, manifest.record.base_dir)
    last = error_line(log_path)
    why = f"exit code {code}" + (f": {last}" if last else "")
    store.mark_finished(trial, ok=False, result=None, exit_code=code, error=f"{why}{hint}")
    print(f"[gpusched] trial {trial.trial_id} failed ({why}){hint}", file=out, flush=True)
    return code


_ERROR_LINE = re.compile(r"^(?:[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt)|[Ee]rror|FATAL|Fatal)\b")


def error_line(log_path: str, limit: int = 300) -> str:
    """What a failed command said last about why, for its trial's error next to the exit code: the last line of
    its output (its final 64 KiB) that reads like an error (``ValueError: lr must be positive``, ``Error: ...``),
    else its last non-empty line; '' when it printed nothing. Cut to ``limit`` characters, control characters
    removed (it is shown in tables and the UI)."""
    from airflow_provider_gpusched.core.text import printable

    try:
        with open(log_path, "rb") as fh:
            fh.seek(max(0, os.fstat(fh.fileno()).st_size - 65536))
            lines = [ln.strip() for ln in fh.read().decode("utf-8", "replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    lines = [ln for ln in lines if not ln.startswith("[gpusched]")]
    found = next((ln for ln in reversed(lines) if _ERROR_LINE.match(ln)), lines[-1] if lines else "")
    found = printable(found)
    return found if len(found) <= limit else found[: limit - 3] + "..."


def relative_path_hint(argv: Sequence[str], folder: str, base_dir: str | None) -> str:
    """When a failed command names a relative file that is not in the trial's folder (where it ran): why, and
    what to do (the spec turned the relative paths it found under its ``base_dir`` into absolute ones)."""
    for i, arg in enumerate(argv[:2]):
        if (
            not arg
            or arg.startswith("-")
            or os.path.isabs(arg)
            or ("/" not in arg and not arg.endswith((".py", ".sh", ".bash")))
        ):
            continue
        if not os.path.exists(os.path.join(folder, arg)):
            where = f" nor in the spec's directory {base_dir}" if base_dir else ""
            return (
                f" (command[{i}] {arg!r} is a relative path: the trial ran in its own folder {folder}, where there "
                f"is no such file{where}; give an absolute path, a path relative to the spec's directory, or set "
                f"the spec's base_dir)"
            )
    return ""


def distributed_argv(settings: Any, argv: Sequence[str], env: Mapping[str, str]) -> list[str]:
    """A trial's command started as ranks, as the manifest says (``TrialResources.distributed_settings``): inside
    the trial's Slurm job, srun over its nodes; on local GPUs, one rank per GPU of the lease
    (``CUDA_VISIBLE_DEVICES``): the manifest's backend decides. The manifest's record is checked before use."""
    from airflow_provider_gpusched.core.distributed import check_grace, check_mode

    if not isinstance(settings, Mapping):
        raise InvalidArgumentError("manifest distributed", settings, "a mapping written by the sweep's plan task")
    mode = check_mode(settings.get("mode"), "manifest distributed.mode")
    grace = check_grace(settings.get("grace"), "manifest distributed.grace")
    if mode is None:
        return list(argv)
    backend = get_backend(settings.get("backend", DEFAULT_BACKEND), "manifest distributed.backend")
    return backend.rank_argv(mode, argv, settings, env, grace)


# -- the trial runner's command line: built and parsed here, nowhere else --------------------------------
RUNNER_MODULE = "airflow_provider_gpusched.core.sweep.running.trial_run"


def runner_argv(manifest: Manifest, *args: str, python: str | None = None) -> list[str]:
    """The trial runner's command line for ``manifest`` (the forms in this module's docstring)."""
    return [python or sys.executable, "-m", RUNNER_MODULE, manifest.path, *args]


def trial_argv(manifest: Manifest, trial: Trial, python: str | None = None) -> list[str]:
    """The command that runs one trial of ``manifest`` (on a local GPU child or a Slurm node)."""
    return runner_argv(manifest, trial.trial_id, trial.label or trial.trial_id, python=python)


def write_group_manifest(manifest: Manifest, group: Sequence[Trial], key: bytes | None = None) -> Manifest:
    """A manifest of only ``group``, with ``manifest``'s settings (target, objective, run, ...): the process
    that runs a group in batched mode reads its few trials, not the whole plan of thousands. The caller
    removes it (``os.remove(sliced.path)``) once the group has run. ``key``: sealed with it (the runner it starts
    is given the key, core/records.py), so that runner need not check it again."""
    record = dataclasses.replace(
        manifest.record,
        trials=[ManifestTrial.of(t) for t in group],
        pending=[t.trial_id for t in group],
        group_of=manifest.path,
    )
    data = MANIFEST.dump_sealed(record, key) if key is not None else MANIFEST.dump(record)
    stem = os.path.splitext(os.path.basename(manifest.path))[0]
    name = os.path.join("groups", f"{stem}-{group[0].trial_id[:16]}-{len(group)}-{os.getpid()}.json")
    return Manifest(manifest.store.write(name, data), data, key=key)


def group_argv(manifest: Manifest, group: Sequence[Trial], python: str | None = None) -> list[str]:
    """Several trials one after another in one process (batched local mode)."""
    if len(group) == 1:
        return trial_argv(manifest, group[0], python)
    return runner_argv(manifest, "--ids", ",".join(t.trial_id for t in group), python=python)


#: an asynchronous search's worker (core/sweep/running/worker.py)
WORKER_MODULE = "airflow_provider_gpusched.core.sweep.running.worker"


def worker_argv(manifest: Manifest, name: str, python: str | None = None, max_trials: int | None = None) -> list[str]:
    """An asynchronous search's worker (a Slurm job or array task, a slot on local GPUs): it asks for trials until
    none are left, or until it ran ``max_trials``."""
    argv = [python or sys.executable, "-m", WORKER_MODULE, manifest.path, name]
    return argv if max_trials is None else [*argv, str(max_trials)]


def chunk_argv(manifest: Manifest, chunk: int, python: str | None = None) -> list[str]:
    """A Slurm array over chunk ``chunk``: array task ``$SLURM_ARRAY_TASK_ID`` runs that trial of the chunk."""
    return runner_argv(manifest, "--chunk", str(chunk), python=python)


@dataclass(frozen=True)
class RunnerCommand:
    """A parsed trial-runner command line: the manifest and one of trial id, ids or chunk."""

    manifest: str
    trial_id: str | None = None
    ids: tuple[str, ...] = ()
    chunk: int | None = None

    def trials(self, manifest: Manifest, array_task: str | None = None) -> list[Trial]:
        """The trials it runs (a chunk: the one for ``array_task``, or the whole chunk when None)."""
        if self.chunk is not None:
            trials = manifest.chunk(self.chunk)
            if array_task is None:
                return trials
            if not array_task.isdigit():
                raise GpuschedError("--chunk needs SLURM_ARRAY_TASK_ID (run it as a Slurm array task)")
            if int(array_task) >= len(trials):
                raise GpuschedError(f"array task {array_task} is beyond chunk {self.chunk} ({len(trials)} trials)")
            return [trials[int(array_task)]]
        if self.ids:
            return [manifest.trial(i) for i in self.ids]
        return [manifest.trial(self.trial_id or "")]


def parse_runner_args(args: Sequence[str]) -> RunnerCommand:
    """The arguments after ``-m RUNNER_MODULE``; :class:`InvalidArgumentError` for anything else."""
    args = [str(a) for a in args]
    usage = "MANIFEST TRIAL_ID [LABEL], MANIFEST --ids ID,ID,... or MANIFEST --chunk K"
    if len(args) < 2:
        raise InvalidArgumentError("trial runner arguments", " ".join(args), usage)
    if args[1] == "--chunk":
        if len(args) != 3 or not args[2].isdigit():
            raise InvalidArgumentError("--chunk", " ".join(args[2:]), "one chunk number")
        return RunnerCommand(args[0], chunk=int(args[2]))
    if args[1] == "--ids":
        ids = tuple(i for i in (args[2].split(",") if len(args) == 3 else []) if i)
        if not ids:
            raise InvalidArgumentError("--ids", " ".join(args[2:]), "comma-separated trial ids")
        return RunnerCommand(args[0], ids=ids)
    if len(args) > 3:
        raise InvalidArgumentError("trial runner arguments", " ".join(args), usage)
    return RunnerCommand(args[0], trial_id=args[1])


@record_class(extra="forbid")
@dataclass(frozen=True)
class TrialSet:
    """The trials one task runs, as data: the manifest's path and the trial ids (or a chunk of it, for a Slurm
    array). The task group hands it to each trial operator (its ``trials`` argument) next to the command line, so
    the operator never parses trial identity back out of argv; :meth:`read` reads the manifest once."""

    manifest: Annotated[str, says("a manifest path", min_length=1, pattern=r"^[^\x00]+$")]
    ids: Annotated[
        tuple[Annotated[str, says("a trial id", min_length=1)], ...], says("a non-empty list of trial ids", strict=None)
    ] = ()
    chunk: Annotated[int, says("a chunk number >= 0 (and no ids)", ge=0)] | None = None

    def to_record(self) -> dict[str, Any]:
        data = TRIAL_SET.dump(self)
        return (
            {"manifest": data["manifest"], "ids": data["ids"]}
            if self.chunk is None
            else {
                "manifest": data["manifest"],
                "chunk": data["chunk"],
            }
        )

    @classmethod
    def from_record(cls, data: Any, where: str = "trials") -> TrialSet:
        """A record from :meth:`to_record` (a task's argument, after Airflow's XCom); InvalidArgumentError
        naming the key otherwise."""
        found = TRIAL_SET.read_argument(data, where, "{manifest: PATH, ids: [TRIAL_ID, ...]} or {manifest, chunk}")
        if found.chunk is not None and found.ids:
            raise InvalidArgumentError(f"{where}.chunk", found.chunk, "a chunk number >= 0 (and no ids)")
        if found.chunk is None and not found.ids:
            raise InvalidArgumentError(f"{where}.ids", list(found.ids), "a non-empty list of trial ids")
        return found

    def read(self) -> tuple[Manifest, list[Trial]]:
        """The manifest and these trials (GpuschedError when it is gone or does not hold them): the same lookup
        as the trial runner's command line (RunnerCommand.trials; a chunk: the whole chunk)."""
        manifest = Manifest(self.manifest)
        return manifest, RunnerCommand(self.manifest, ids=self.ids, chunk=self.chunk).trials(manifest)


TRIAL_SET = RecordType(TrialSet, name="trial set")


def trial_set(manifest: Manifest, trials: Sequence[Trial] = (), *, chunk: int | None = None) -> dict[str, Any]:
    """The record of ``trials`` (or chunk ``chunk``) of ``manifest`` a trial operator gets as ``trials``."""
    return TrialSet(manifest.path, tuple(t.trial_id for t in trials), chunk).to_record()


def mark_unfinished(manifest: Manifest, trials: Sequence[Trial], reason: str, state: str = "failed") -> list[str]:
    """After the task running ``trials`` failed (``failed``), stopped them at their time limit (``timeout``) or was
    stopped (``stopped``): end each of this run's trials that has no outcome, through the records' one transition
    (:meth:`TrialStore.end_unfinished`: a run never rewrites another run's record or an outcome that stands)."""
    lines = []
    for trial in trials:
        written = manifest.store.end_unfinished(trial, run=manifest.record.run, state=state, reason=reason)
        if written == state:
            lines.append(f"trial {trial.index} {trial.label or trial.trial_id} marked {state}: {reason}")
        elif written is not None:
            lines.append(
                f"trial {trial.index} {trial.label or trial.trial_id}: its re-run ended without an outcome "
                f"({state}: {reason}); its earlier outcome ({written}) stands"
            )
    return lines


def run_group(manifest: Manifest, trials: Sequence[Trial]) -> int:
    """Several trials one after another in this process (batched mode: saves a process start per trial).
    Returns 0 when every trial succeeded, else the last failing trial's exit code."""
    code = 0
    for trial in trials:
        rc = run_trial(manifest, trial)
        code = rc if rc != 0 else code
    return code


def render_config(template: Mapping[str, str], trial: Trial, folder: str) -> str:
    """Write the trial's copy of the sweep's config template into its folder (private to the user: a config
    may hold credentials); returns its path."""
    from airflow_provider_gpusched.core.safe_files import write_atomic
    from airflow_provider_gpusched.core.sweep.parts.command import placeholder_values
    from airflow_provider_gpusched.core.sweep.parts.config_template import ConfigTemplate

    name = os.path.basename(str(template["name"]))
    text = ConfigTemplate(name, str(template["text"])).render(placeholder_values(trial.params, folder, trial))
    path = os.path.join(folder, name)
    write_atomic(path, text.encode("utf-8"), 0o600)
    return path


class _Tee:
    """Writes to a stream and to the trial's log file."""

    def __init__(self, stream: TextIO, log: TextIO) -> None:
        self.stream, self.log = stream, log

    def write(self, text: str) -> int:
        self.log.write(text)
        return self.stream.write(text)

    def flush(self) -> None:
        self.log.flush()
        self.stream.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


@contextlib.contextmanager
def _output_copied_to(path: str) -> Iterator[None]:
    """While a callable trial runs, what it prints through Python's ``sys.stdout``/``sys.stderr`` also goes
    to its ``output.log`` (the runner's own output, the task log or Slurm output file, still gets it)."""
    saved = sys.stdout, sys.stderr
    with open(path, "a", encoding="utf-8", errors="replace") as log:
        sys.stdout, sys.stderr = _Tee(sys.stdout, log), _Tee(sys.stderr, log)
        try:
            yield
        finally:
            sys.stdout, sys.stderr = saved


#: how often a command trial's reports are judged by the pruning rule, and how long a stopped trial gets
#: between SIGTERM and SIGKILL
PRUNE_CHECK_SECONDS = 0.5
PRUNE_GRACE_SECONDS = 10.0
#: how many times in a row a verdict to stop is taken again because the trial reported on while it was judged
_REJUDGE_AT_MOST = 20


def _pruning_watch(
    pruning: Mapping[str, Any], sweep_dir: str, folder: str, shared_study: bool = False
) -> Callable[[], str]:
    """For a command trial: a check, called while it runs, that says why the rule stops it ('' = go on);
    it judges again only when the trial's reports file grew."""
    from airflow_provider_gpusched.core.sweep.pruning_rules.judging import PruningRule, SweepReports

    rule, name = PruningRule(**pruning), os.path.basename(folder)
    reports = SweepReports(sweep_dir, shared_study)
    path, seen, judged = os.path.join(folder, "reports.jsonl"), [-1], [-1]

    def check() -> str:
        try:
            size = os.stat(path).st_size
        except OSError:
            return ""
        if size == seen[0]:
            return ""
        # a verdict is on the reports as they were when it began: a trial that reported on while it was judged
        # (a fast trial, a slow study) is judged again on its newest reports, so that one that reached its budget
        # meanwhile is not stopped for an earlier step (it is complete: Pruner.decide)
        since = judged[0]
        for _ in range(_REJUDGE_AT_MOST):
            seen[0] = size
            why = reports.judge(rule, name, since)  # every rung reached since the last check
            judged[0] = reports.last_step(name)
            try:
                size = os.stat(path).st_size
            except OSError:
                return why
            if not why or size == seen[0]:
                return why
        return why

    return check


def _pruned(store: TrialStore, trial: Trial, why: str, out: TextIO) -> int:
    """A trial the pruning rule stopped: ``pruned``, not failed; its task succeeds (no retry)."""
    store.mark_finished(trial, ok=False, state="pruned", error=why)
    print(f"[gpusched] trial {trial.trial_id} pruned: {why}", file=out, flush=True)
    return 0


def _run_command(
    argv: list[str], cwd: str, env: Mapping[str, str], log_path: str, out: TextIO, stop: Callable[[], str] | None = None
) -> tuple[int, str]:
    """Run the command with its output to the log and ``out``; with ``stop``, ask it every
    PRUNE_CHECK_SECONDS while the command runs and, when it gives a reason, stop the command (SIGTERM, then
    SIGKILL after PRUNE_GRACE_SECONDS). Returns (exit code, why it was stopped or '')."""
    import subprocess
    import threading

    stopped = [""]
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            argv, cwd=cwd, env=dict(env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, pass_fds=channel_fds(env)
        )  # a two-stage trial's channel reaches the command
        assert proc.stdout is not None

        def watch(stop: Callable[[], str]) -> None:
            while proc.poll() is None:
                try:
                    why = stop()
                except Exception as exc:  # noqa: BLE001 - a rule that cannot judge never kills the trial
                    print(f"[gpusched] pruning check failed ({exc}); the trial goes on", file=out, flush=True)
                    return
                if why:
                    stopped[0] = why
                    proc.terminate()
                    try:
                        proc.wait(PRUNE_GRACE_SECONDS)
                    except subprocess.TimeoutExpired:
                        proc.kill()
                    return
                time.sleep(PRUNE_CHECK_SECONDS)

        watcher = threading.Thread(target=watch, args=(stop,), daemon=True) if stop else None
        if watcher:
            watcher.start()
        for raw in proc.stdout:
            log.write(raw)
            out.write(raw.decode(errors="replace"))
        out.flush()
        code = proc.wait()
        if watcher:
            watcher.join(PRUNE_GRACE_SECONDS + 1)
        return code, stopped[0]


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 2:
        print(__doc__, file=sys.stderr)
        return EXIT_USAGE
    try:
        command = parse_runner_args(args)
        manifest = Manifest(command.manifest, key=take_record_key())
        array_task = os.environ.get("SLURM_ARRAY_TASK_ID", "") if command.chunk is not None else None
        trials = command.trials(manifest, array_task)
    except GpuschedError as exc:
        print(f"gpusched trial_run: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        if command.ids:
            return run_group(manifest, trials)
        return run_trial(manifest, trials[0])
    except OSError as exc:  # a full disk or a quota under the results root: say which file, no traceback
        print(
            f"gpusched trial_run: cannot write {exc.filename or 'a file'}: {exc.strerror or exc} (the trial "
            f"is marked failed once its task ends and the folder can be written again)",
            file=sys.stderr,
        )
        return EXIT_WRITE_FAILED


if __name__ == "__main__":
    sys.exit(main())
