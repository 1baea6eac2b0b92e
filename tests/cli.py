"""``gpusched`` run through its own ``main()`` in the test process: the exit status, stdout and stderr a process would
give, without a process start (and its imports: PyTorch, SciPy, Airflow's configuration cost seconds of CPU each).
Tests about the process itself (signals, time limits, what it imports, its environment) start a real one."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys


def gpusched(*args: str, cwd=None, pythonpath=None, env=None) -> subprocess.CompletedProcess:
    """``gpusched ARGS`` in ``cwd`` (None: here). ``pythonpath``: a folder of the user's modules, put first on
    ``sys.path`` meanwhile (as ``PYTHONPATH`` would), and the modules imported from it forgotten afterwards.
    ``env``: environment variables set meanwhile (a value of None: unset)."""
    from airflow_provider_gpusched.cli import main

    out, err, before = io.StringIO(), io.StringIO(), os.getcwd()
    modules = set(sys.modules)
    saved_env = {name: os.environ.get(name) for name in env or {}}
    for name, value in (env or {}).items():
        _set_env(name, value)
    os.chdir(cwd or before)
    if pythonpath:
        sys.path.insert(0, str(pythonpath))
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(args))
            except SystemExit as exc:  # argparse's usage errors
                code = exc.code if isinstance(exc.code, int) else 1
    finally:
        os.chdir(before)
        for name, value in saved_env.items():
            _set_env(name, value)
        if pythonpath:
            sys.path.remove(str(pythonpath))
            for name in set(sys.modules) - modules:
                if (getattr(sys.modules[name], "__file__", None) or "").startswith(str(pythonpath)):
                    del sys.modules[name]
    return subprocess.CompletedProcess(["gpusched", *args], code, out.getvalue(), err.getvalue())


def _set_env(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value
