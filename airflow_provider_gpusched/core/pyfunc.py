"""Running a Python callable in another process (a Slurm job, a GPU child process) and getting its
return value or its exception back.

The caller writes a *run directory* with :func:`write_call`; the other process runs
``python -m airflow_provider_gpusched.core.pyfunc RUN_DIR``; the caller reads :func:`read_outcome`.
Callables are pickled by value with cloudpickle when their module cannot be imported elsewhere (a DAG
file), so closures and module-level helpers of the DAG file travel with them. The other side needs
the same Python minor version, cloudpickle and this package installed.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import sys
import traceback
from dataclasses import dataclass
from typing import Any, Callable

from airflow_provider_gpusched.core.safe_files import write_atomic, write_json_atomic

CALL_FILE = "call.pkl"
RESULT_FILE = "result.pkl"
ERROR_FILE = "error.json"


class RemoteCallError(Exception):
    """The callable raised in the other process; ``remote_traceback`` is its traceback text."""

    def __init__(self, exc_type: str, message: str, remote_traceback: str):
        self.exc_type = exc_type
        self.remote_traceback = remote_traceback
        super().__init__(f"{exc_type}: {message}")


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


def dumps(func: Callable, obj: Any) -> bytes:
    """cloudpickle ``obj`` (which holds ``func``), taking ``func``'s module by value when it cannot be
    imported elsewhere (a DAG file), so its closures and module-level helpers travel with it."""
    import cloudpickle

    module = sys.modules.get(getattr(func, "__module__", "") or "")
    by_value = module is not None and not _importable_elsewhere(module.__name__) and module.__name__ != "builtins"
    if by_value:
        cloudpickle.register_pickle_by_value(module)
    try:
        return cloudpickle.dumps(obj)
    finally:
        if by_value:
            cloudpickle.unregister_pickle_by_value(module)


def write_call(run_dir: str, func: Callable, args: tuple = (), kwargs: dict | None = None) -> str:
    """Pickle ``func(*args, **kwargs)`` into ``run_dir``; return the path of the call file."""
    os.makedirs(run_dir, exist_ok=True)
    for name in (RESULT_FILE, ERROR_FILE):
        try:
            os.remove(os.path.join(run_dir, name))
        except FileNotFoundError:
            pass
    payload = dumps(func, {"func": func, "args": tuple(args), "kwargs": dict(kwargs or {}),
                           "python": list(sys.version_info[:2])})
    path = os.path.join(run_dir, CALL_FILE)
    with contextlib.suppress(FileNotFoundError):
        os.remove(path)  # a new file, private to this user: the call's arguments may hold secrets
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(payload)
    return path


def read_outcome(run_dir: str) -> Outcome:
    """What the other process left: a value, an error, or nothing (it died before finishing)."""
    import pickle

    error_path = os.path.join(run_dir, ERROR_FILE)
    if os.path.exists(error_path):
        with open(error_path) as fh:
            data = json.load(fh)
        return Outcome(True, error=RemoteCallError(data["type"], data["message"], data["traceback"]))
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

    try:
        with open(os.path.join(run_dir, CALL_FILE), "rb") as fh:
            call = pickle.load(fh)
    except Exception as exc:  # noqa: BLE001
        return fail(type(exc).__name__, f"could not load the callable from {run_dir}: {exc} "
                    f"(this Python is {sys.version_info[0]}.{sys.version_info[1]}; is it the same environment "
                    f"as Airflow's?)", traceback.format_exc())
    want = tuple(call.get("python", ()))
    if want and want != tuple(sys.version_info[:2]):
        sys.stderr.write(f"warning: the callable was pickled by Python {want[0]}.{want[1]}, this is "
                         f"{sys.version_info[0]}.{sys.version_info[1]}\n")
    try:
        value = call["func"](*call["args"], **call["kwargs"])
    except BaseException as exc:  # noqa: BLE001 - SystemExit and KeyboardInterrupt are reported too
        return fail(type(exc).__name__, str(exc), traceback.format_exc())
    try:
        data = pickle.dumps(value)
    except Exception as exc:  # noqa: BLE001
        return fail(type(exc).__name__, f"the return value could not be pickled: {exc}", traceback.format_exc())
    write_atomic(os.path.join(run_dir, RESULT_FILE), data)
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m airflow_provider_gpusched.core.pyfunc RUN_DIR")
    sys.exit(run_call(sys.argv[1]))
