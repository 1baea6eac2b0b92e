"""Running a Python callable in another process (a Slurm job, a GPU child process) and getting its
return value or its exception back.

The caller writes a *run directory* with :func:`write_call`; the other process runs
``python -m airflow_provider_gpusched.core.pyfunc RUN_DIR``; the caller reads :func:`read_outcome`.
Callables are pickled by value with cloudpickle when their module cannot be imported elsewhere (a DAG
file), so closures and module-level helpers of the DAG file travel with them. The other side needs
the same Python minor version, cloudpickle and this package installed.

A call written with ``ranks=...`` runs on every rank of a distributed start (core/distributed.py): each rank
calls the function (a parameter named ``rank_info`` receives its :class:`RankInfo`), rank 0's return value is
the outcome, and the first rank to raise is the error, with its rank and node. A rank still running
``rank_exit_grace`` seconds after another rank ended stops itself, saying where it was.
"""

from __future__ import annotations

import contextlib
import glob
import importlib.util
import inspect
import os
import re
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_provider_gpusched.core.checks import is_json_number
from airflow_provider_gpusched.core.safe_files import BadRecordError, read_json_record, write_atomic, write_json_atomic

if TYPE_CHECKING:
    from airflow_provider_gpusched.core.distributed import RankInfo

CALL_FILE = "call.pkl"
RESULT_FILE = "result.pkl"
ERROR_FILE = "error.json"
#: per rank of a distributed call: its error, and a mark that it ended (either way)
RANK_ERROR_FILE = "error.rank-{rank}.json"
RANK_ENDED_FILE = "ended.rank-{rank}.json"
_RANK_FILE_RE = re.compile(r"^(error|ended)\.rank-(\d+)\.json$")
#: the exit status of a rank that stopped itself (it outlived the others by rank_exit_grace)
EXIT_RANK_STOPPED = 3


class RemoteCallError(Exception):
    """The callable raised in the other process; ``remote_traceback`` is its traceback text. In a distributed
    call, ``rank`` and ``host`` say where."""

    time: float = float("inf")  # when the rank recorded it (read back from its record)

    def __init__(
        self,
        exc_type: str,
        message: str,
        remote_traceback: str,
        rank: int | None = None,
        host: str | None = None,
        world_size: int | None = None,
    ) -> None:
        self.exc_type = exc_type
        self.remote_traceback = remote_traceback
        self.rank, self.host, self.world_size = rank, host, world_size
        where = ""
        if rank is not None:
            where = f" (rank {rank}{f' of {world_size}' if world_size else ''} on {host or 'an unknown node'})"
        super().__init__(f"{exc_type}: {message}{where}")


@dataclass
class Outcome:
    finished: bool
    value: Any = None
    error: RemoteCallError | None = None


def _importable_elsewhere(module_name: str) -> bool:
    if module_name in ("__main__", "__mp_main__") or module_name.startswith("unusual_prefix_"):
        return False  # Airflow loads DAG files under such names
    try:
        spec = importlib.util.find_spec(module_name.split(".")[0])
    except (ImportError, ValueError):
        return False
    return spec is not None and spec.origin is not None and "site-packages" in (spec.origin or "")


def dumps(func: Callable[..., Any], obj: Any) -> bytes:
    """cloudpickle ``obj`` (which holds ``func``), taking ``func``'s module by value when it cannot be
    imported elsewhere (a DAG file), so its closures and module-level helpers travel with it."""
    import cloudpickle

    module = sys.modules.get(getattr(func, "__module__", "") or "")
    by_value = module is not None and not _importable_elsewhere(module.__name__) and module.__name__ != "builtins"
    if by_value:
        cloudpickle.register_pickle_by_value(module)
    try:
        data: bytes = cloudpickle.dumps(obj)
        return data
    finally:
        if by_value:
            cloudpickle.unregister_pickle_by_value(module)


#: what a run of the call leaves (its value, its error, each rank's error and end), cleared before every start
OUTCOME_FILES = (RESULT_FILE, ERROR_FILE, "error.rank-*.json", "ended.rank-*.json")


def clear_outcome(run_dir: str) -> None:
    """Remove what an earlier start of the call left: a relaunch after a preemption (or a Slurm requeue) must not
    be judged by the error of the start it replaced, nor a rank's watch by a peer's earlier end."""
    for name in OUTCOME_FILES:
        for path in (
            glob.glob(os.path.join(glob.escape(run_dir), name)) if "*" in name else [os.path.join(run_dir, name)]
        ):
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)


def clear_outcome_line(run_dir: str) -> str:
    """:func:`clear_outcome` as a shell line, for a job script that may start more than once (requeue)."""
    import shlex

    return "rm -f -- " + " ".join(f"{shlex.quote(run_dir)}/{name}" for name in OUTCOME_FILES)


def write_call(
    run_dir: str,
    func: Callable[..., Any],
    args: tuple[Any, ...] = (),
    kwargs: dict[str, Any] | None = None,
    *,
    rank_exit_grace: float | None = None,
) -> str:
    """Pickle ``func(*args, **kwargs)`` into ``run_dir``; return the path of the call file. With
    ``rank_exit_grace`` (seconds, 0: no limit) the call runs on every rank of a distributed start."""
    os.makedirs(run_dir, exist_ok=True)
    clear_outcome(run_dir)
    payload = dumps(
        func,
        {
            "func": func,
            "args": tuple(args),
            "kwargs": dict(kwargs or {}),
            "python": list(sys.version_info[:2]),
            "ranks": None if rank_exit_grace is None else {"grace": float(rank_exit_grace)},
        },
    )
    path = os.path.join(run_dir, CALL_FILE)
    with contextlib.suppress(FileNotFoundError):
        os.remove(path)  # a new file, private to this user: the call's arguments may hold secrets
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(payload)
    return path


def _read_error(path: str) -> RemoteCallError | None:
    """An error record, checked; one that cannot be read is an error that says so (never a traceback from here)."""
    try:
        data = read_json_record(path)
    except FileNotFoundError:
        return None
    except BadRecordError as exc:
        return RemoteCallError("UnreadableError", str(exc), "", None, None)
    fields = ("type", "message", "traceback")
    if not isinstance(data, dict) or not all(isinstance(data.get(k), str) for k in fields):
        return RemoteCallError("UnreadableError", f"{path}: expected an error record with {', '.join(fields)}", "")
    rank = data.get("rank") if isinstance(data.get("rank"), int) and not isinstance(data.get("rank"), bool) else None
    world = data.get("world_size") if isinstance(data.get("world_size"), int) else None
    host = data.get("host") if isinstance(data.get("host"), str) else None
    error = RemoteCallError(data["type"], data["message"], data["traceback"], rank, host, world)
    when: Any = data.get("time")
    error.time = float(when) if is_json_number(when) else float("inf")
    return error


def rank_errors(run_dir: str) -> list[RemoteCallError]:
    """Every rank's error in a distributed call, the first to fail first."""
    errors = []
    for path in glob.glob(os.path.join(glob.escape(run_dir), "error.rank-*.json")):
        if _RANK_FILE_RE.match(os.path.basename(path)):
            error = _read_error(path)
            if error is not None:
                errors.append(error)
    return sorted(errors, key=lambda e: (getattr(e, "time", float("inf")), e.rank if e.rank is not None else 1 << 30))


def read_outcome(run_dir: str) -> Outcome:
    """What the other process left: a value, an error, or nothing (it died before finishing). In a distributed
    call: rank 0's value, or the error of the first rank that failed (the others are listed in its traceback)."""
    import pickle

    error = _read_error(os.path.join(run_dir, ERROR_FILE))
    if error is not None:
        return Outcome(True, error=error)
    errors = rank_errors(run_dir)
    if errors:
        first = errors[0]
        if len(errors) > 1:
            others = "; ".join(f"rank {e.rank} on {e.host}: {e.exc_type}" for e in errors[1:6])
            first.remote_traceback += f"\n(after it, {len(errors) - 1} other rank(s) failed too: {others})"
        return Outcome(True, error=first)
    result_path = os.path.join(run_dir, RESULT_FILE)
    if os.path.exists(result_path):
        with open(result_path, "rb") as fh:
            return Outcome(True, value=pickle.load(fh))
    return Outcome(False)


def run_call(run_dir: str) -> int:
    """The other side: load, call, store the result or the traceback. Returns the exit status."""
    import pickle

    def fail(exc_type: str, message: str, tb: str) -> int:
        write_json_atomic(os.path.join(run_dir, ERROR_FILE), {"type": exc_type, "message": message, "traceback": tb})
        sys.stderr.write(tb)
        return 1

    _note_an_early_chain_signal()
    try:
        with open(os.path.join(run_dir, CALL_FILE), "rb") as fh:
            call = pickle.load(fh)
    except Exception as exc:  # noqa: BLE001
        return fail(
            type(exc).__name__,
            f"could not load the callable from {run_dir}: {exc} "
            f"(this Python is {sys.version_info[0]}.{sys.version_info[1]}; is it the same environment "
            f"as Airflow's?)",
            traceback.format_exc(),
        )
    want = tuple(call.get("python", ()))
    if want and want != tuple(sys.version_info[:2]):
        sys.stderr.write(
            f"warning: the callable was pickled by Python {want[0]}.{want[1]}, this is "
            f"{sys.version_info[0]}.{sys.version_info[1]}\n"
        )
    if call.get("ranks") is not None:
        return _run_rank(run_dir, call)
    _checkpoint_on_chain_signal(run_dir, call)
    try:
        value = call["func"](*call["args"], **call["kwargs"])
    except SystemExit as exc:
        if os.environ.get("GPUSCHED_CHAIN_SIGNAL"):  # a time-limit chain's segment that stopped for the limit
            write_json_atomic(
                os.path.join(run_dir, ERROR_FILE),
                {"type": "SystemExit", "message": str(exc), "traceback": traceback.format_exc()},
            )
            print(
                f"[gpusched] the callable exited ({exc.code}) in segment {os.environ.get('GPUSCHED_CHAIN_SEGMENT')}",
                flush=True,
            )
            return exc.code if isinstance(exc.code, int) else 1
        return fail(type(exc).__name__, str(exc), traceback.format_exc())
    except BaseException as exc:  # noqa: BLE001 - KeyboardInterrupt is reported too
        return fail(type(exc).__name__, str(exc), traceback.format_exc())
    try:
        data = pickle.dumps(value)
    except Exception as exc:  # noqa: BLE001
        return fail(type(exc).__name__, f"the return value could not be pickled: {exc}", traceback.format_exc())
    write_atomic(os.path.join(run_dir, RESULT_FILE), data)
    return 0


class DelayedCall:
    """What a checkpoint method returns: the call the next segment of a time-limit chain makes (submitit's
    ``DelayedSubmission``, which has the same three attributes, is taken as well)."""

    def __init__(self, function: Any, *args: Any, **kwargs: Any) -> None:
        self.function, self.args, self.kwargs = function, args, kwargs


class Checkpointable:
    """A callable class whose instances a time-limit chain continues (submitit's ``helpers.Checkpointable``): when
    the chain's signal comes, :meth:`checkpoint` is called with the call's arguments, and the call it returns,
    this object with its state as it is now by default, is what the next segment runs."""

    def checkpoint(self, *args: Any, **kwargs: Any) -> DelayedCall | None:
        return DelayedCall(self, *args, **kwargs)


def checkpoint_hook(func: Any) -> Callable[..., Any] | None:
    """The callable's checkpoint method: ``__submitit_checkpoint__`` or ``checkpoint`` (submitit's contract)."""
    for name in ("__submitit_checkpoint__", "checkpoint"):
        hook = getattr(func, name, None)
        if callable(hook):
            return hook  # type: ignore[no-any-return]
    return None


#: set in the process's environment when a time-limit chain's signal came before the work could take it
CHAIN_SIGNALLED_ENV = "GPUSCHED_CHAIN_SIGNALLED"


def _note_an_early_chain_signal() -> None:
    """In a time-limit chain, the signal may come while the call is still loading (PyTorch's import takes seconds),
    and its default action would end the process with nothing saved. Until the work takes the signal itself, it is
    noted instead (``$GPUSCHED_CHAIN_SIGNALLED``): the examples' checkpoint loop stops at its first step, and a
    checkpoint method is called as soon as it is known."""
    import signal

    name = os.environ.get("GPUSCHED_CHAIN_SIGNAL")
    if name in ("USR1", "USR2"):
        signal.signal(getattr(signal, f"SIG{name}"), lambda _s, _f: os.environ.__setitem__(CHAIN_SIGNALLED_ENV, "1"))


def _checkpoint_on_chain_signal(run_dir: str, call: dict[str, Any]) -> None:
    """In a time-limit chain (core/slurm/chain.py), a callable with a checkpoint method is asked for the next call
    when the chain's signal comes; the new call file is the segment's checkpoint. A callable without one is left
    to handle the signal itself (it checkpoints where the chain's ``checkpoint`` setting says)."""
    import signal

    name = os.environ.get("GPUSCHED_CHAIN_SIGNAL")
    hook = checkpoint_hook(call["func"])
    if not name or hook is None:
        return

    def on_signal(_signum: int, _frame: Any) -> None:
        try:
            delayed = hook(*call["args"], **call["kwargs"])
        except BaseException:  # noqa: BLE001 - said in the job's output; the chain sees no new checkpoint
            sys.stderr.write("[gpusched] the checkpoint method raised:\n" + traceback.format_exc())
            sys.stderr.flush()
            os._exit(1)
        if delayed is None:
            print("[gpusched] the checkpoint method returned None: no next segment", flush=True)
            os._exit(1)
        func, args, kwargs = delayed.function, tuple(delayed.args or ()), dict(delayed.kwargs or {})
        payload = dumps(func, {**call, "func": func, "args": args, "kwargs": kwargs})
        write_atomic(os.path.join(run_dir, CALL_FILE), payload)
        print(f"[gpusched] checkpoint: the next segment calls {getattr(func, '__name__', func)!r} again", flush=True)
        os._exit(143)

    signal.signal(getattr(signal, f"SIG{name}"), on_signal)
    if os.environ.get(CHAIN_SIGNALLED_ENV):  # it came while the call was loading
        on_signal(0, None)


def _run_rank(run_dir: str, call: dict[str, Any]) -> int:
    """One rank of a distributed call (see the module's docstring)."""
    import pickle

    from airflow_provider_gpusched.core.distributed import RankInfo

    info = RankInfo.from_env()
    if info is None:
        write_json_atomic(
            os.path.join(run_dir, ERROR_FILE),
            {
                "type": "NotDistributed",
                "traceback": "",
                "message": "the call was written for a distributed start, "
                "but RANK and WORLD_SIZE are not set (it was not started by torchrun or gpusched's srun start)",
            },
        )
        return 1
    host = socket.gethostname()
    ended = os.path.join(run_dir, RANK_ENDED_FILE.format(rank=info.rank))

    def record(ok: bool) -> None:
        with contextlib.suppress(OSError):
            write_json_atomic(ended, {"rank": info.rank, "host": host, "ok": ok, "time": time.time()})

    def fail(exc_type: str, message: str, tb: str) -> int:
        write_json_atomic(
            os.path.join(run_dir, RANK_ERROR_FILE.format(rank=info.rank)),
            {
                "type": exc_type,
                "message": message,
                "traceback": tb,
                "rank": info.rank,
                "host": host,
                "world_size": info.world_size,
                "time": time.time(),
            },
        )
        record(False)
        sys.stderr.write(f"[gpusched] rank {info.rank} on {host}:\n{tb}")
        return 1

    grace = float(call["ranks"].get("grace") or 0)
    if grace > 0 and info.world_size > 1:
        threading.Thread(
            target=_outlive_watch, args=(run_dir, info, host, grace, fail), daemon=True, name="gpusched-rank-watch"
        ).start()
    kwargs = dict(call["kwargs"])
    if _takes(call["func"], "rank_info") and "rank_info" not in kwargs:
        kwargs["rank_info"] = info
    try:
        value = call["func"](*call["args"], **kwargs)
    except BaseException as exc:  # noqa: BLE001
        return fail(type(exc).__name__, str(exc), traceback.format_exc())
    if info.rank == 0:
        try:
            data = pickle.dumps(value)
        except Exception as exc:  # noqa: BLE001
            return fail(type(exc).__name__, f"the return value could not be pickled: {exc}", traceback.format_exc())
        write_atomic(os.path.join(run_dir, RESULT_FILE), data)
    record(True)
    return 0


def _takes(func: Callable[..., Any], name: str) -> bool:
    try:
        return name in inspect.signature(func).parameters
    except (TypeError, ValueError):
        return False


def _outlive_watch(run_dir: str, info: RankInfo, host: str, grace: float, fail: Callable[[str, str, str], int]) -> None:
    """Stop this rank when it is still running ``grace`` seconds after another rank ended: a rank that hangs
    (in a collective whose peers are gone) would otherwise hold every GPU of the job until its time limit. The
    error says where it was (its main thread's stack)."""
    main = threading.main_thread()
    seen: float | None = None
    other = None
    while True:
        time.sleep(0.5)
        if seen is None:
            for path in glob.glob(os.path.join(glob.escape(run_dir), "ended.rank-*.json")):
                match = _RANK_FILE_RE.match(os.path.basename(path))
                if match and int(match.group(2)) != info.rank:
                    seen, other = time.monotonic(), int(match.group(2))
                    break
            continue
        if time.monotonic() - seen >= grace:
            frame = sys._current_frames().get(main.ident) if main.ident is not None else None
            where = "".join(traceback.format_stack(frame)) if frame is not None else ""
            fail(
                "RankStillRunning",
                f"still running {grace:g} s after rank {other} ended (rank_exit_grace); stopped",
                f"Where rank {info.rank} was:\n{where}",
            )
            sys.stderr.flush()
            os._exit(EXIT_RANK_STOPPED)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m airflow_provider_gpusched.core.pyfunc RUN_DIR")
    sys.exit(run_call(sys.argv[1]))
