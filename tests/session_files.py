"""Files a test module needs that take seconds to make (a built wheel, the partitioner's 5,000 instance files): made
once per test session, by the first worker that asks, under a lock, and read by the others. Each worker making its
own copy cost seconds of CPU per worker, and as much again deleting them."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable
from pathlib import Path


def made_once(tmp_path_factory, name: str, make: Callable[[Path], None]) -> Path:
    """The folder ``name`` of this session, made by ``make(folder)`` the first time any worker asks for it."""
    session = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        session = session.parent  # the session's folder, above each worker's own
    folder = session / name
    with open(session / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (folder / ".made").exists():
            folder.mkdir(exist_ok=True)
            make(folder)
            (folder / ".made").touch()
    return folder
