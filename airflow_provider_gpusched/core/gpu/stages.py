"""A two-stage task (fedflow's load and train stages): the work loads on host resources, then gets its GPUs.

A request with ``load_stage=True`` starts its work on a lease of host RAM (``mem``) and CPUs only, with no GPU
visible (``CUDA_VISIBLE_DEVICES`` empty). When the work has loaded its data it calls :func:`wait_for_gpus`:
gpusched then marks the lease ``wait``, places the request's GPUs as for any request (by GPU memory, packing,
fill-in rules) and answers with the GPUs' environment, which :func:`wait_for_gpus` puts into ``os.environ``
before the work touches CUDA. The loaded data stays in the process: nothing is loaded twice.

The channel is a pair of pipes whose numbers the child finds in ``$GPUSCHED_STAGE_FDS`` (``"read,write"``): the
child writes ``loaded`` and a newline, and reads one JSON line, ``{"set": {...}, "default": {...}}`` (variables
to set, and to set where unset), or ``{"error": "..."}``. Any language can speak it.

:func:`wait_for_gpus` in work that was not started as a load stage returns the GPUs it already has, so one
training script runs either way.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from typing import Any

from airflow_provider_gpusched.core.errors import GpuschedError

# the channel's variable and fds (for a wrapper) live in core/load_stage.py, which the trial side imports; kept here too
from airflow_provider_gpusched.core.load_stage import STAGE_ENV as STAGE_ENV
from airflow_provider_gpusched.core.load_stage import channel_fds as channel_fds

LOADED = b"loaded\n"
_MAX_LINE = 1 << 16


class StageError(GpuschedError):
    """The two-stage handshake went wrong (the work touched CUDA too early, the channel broke)."""


def _visible_gpus() -> list[int]:
    raw = os.environ.get("CUDA_VISIBLE_DEVICES", "").strip()
    out = []
    for part in raw.split(","):
        part = part.strip()
        if part.isdigit():
            out.append(int(part))
    return out


def _cuda_initialised() -> bool:
    torch = sys.modules.get("torch")
    try:
        return bool(torch is not None and torch.cuda.is_initialized())
    except Exception:  # noqa: BLE001 - a torch without CUDA support: nothing to initialise
        return False


def wait_for_gpus() -> list[int]:
    """The load stage is done: wait for this task's GPUs, set their environment (``CUDA_VISIBLE_DEVICES``,
    ``GPUSCHED_GPU_MEMORY_FRACTION``...) in ``os.environ``, and return their indices on the host.

    Call it after loading the data and before anything touches CUDA (``torch.cuda``, ``.to("cuda")``): CUDA
    reads ``CUDA_VISIBLE_DEVICES`` once, when it starts. In work not started as a load stage it returns at once
    with the GPUs the work already has (empty on a host without GPUs)."""
    raw = os.environ.get(STAGE_ENV, "")
    if not raw:
        return _visible_gpus()
    try:
        read_fd, write_fd = (int(x) for x in raw.split(","))
    except ValueError:
        raise StageError(f"${STAGE_ENV}={raw!r}: expected two file descriptors 'read,write'") from None
    if _cuda_initialised():
        raise StageError(
            "CUDA was initialised during the load stage, before wait_for_gpus(): it has no GPU then "
            "(CUDA_VISIBLE_DEVICES is empty) and cannot see the GPUs given later; touch CUDA only "
            "after wait_for_gpus() returns"
        )
    try:
        os.write(write_fd, LOADED)
        line = _read_line(read_fd)
    except OSError as exc:
        raise StageError(f"the channel to gpusched broke while waiting for GPUs: {exc}") from exc
    finally:
        for fd in (read_fd, write_fd):
            with contextlib.suppress(OSError):
                os.close(fd)
        os.environ.pop(STAGE_ENV, None)
    if not line:
        raise StageError("gpusched closed the channel before giving GPUs (the task was stopped)")
    try:
        answer = json.loads(line)
    except ValueError:
        raise StageError(f"gpusched's answer is not JSON: {line[:200]!r}") from None
    if not isinstance(answer, dict):
        raise StageError(f"gpusched's answer: expected a JSON object, got {line[:200]!r}")
    if answer.get("error"):
        raise StageError(f"gpusched gave no GPUs: {answer['error']}")
    for key in ("set", "default"):
        values = answer.get(key, {})
        if not isinstance(values, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in values.items()
        ):
            raise StageError(f"gpusched's answer: key {key!r}: expected an object of variable -> string value")
    os.environ.update(answer.get("set", {}))
    for name, value in answer.get("default", {}).items():
        os.environ.setdefault(name, value)
    return _visible_gpus()


def _read_line(fd: int) -> bytes:
    data = b""
    while not data.endswith(b"\n") and len(data) < _MAX_LINE:
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        data += chunk
    return data.strip()


class StageChannel:
    """The parent's end: give the child its fds, see when it has loaded, send it its GPUs' environment."""

    def __init__(self) -> None:
        self._from_child, self._child_write = os.pipe()
        self._child_read, self._to_child = os.pipe()
        os.set_blocking(self._from_child, False)
        self._buffer = b""
        self.loaded = False

    @property
    def child_fds(self) -> tuple[int, int]:
        return self._child_read, self._child_write

    def child_env(self) -> dict[str, str]:
        return {STAGE_ENV: f"{self._child_read},{self._child_write}"}

    def started(self) -> None:
        """The child runs: close its ends here, so that its exit closes the channel."""
        _close(self._child_read)
        _close(self._child_write)
        self._child_read = self._child_write = -1

    def poll_loaded(self) -> bool:
        """True once the child has said it loaded (never blocks)."""
        if self.loaded:
            return True
        try:
            chunk = os.read(self._from_child, 64)
        except BlockingIOError:
            return False
        except OSError:
            return False
        self._buffer += chunk
        if LOADED.strip() in self._buffer:
            self.loaded = True
        return self.loaded

    def give(self, env: dict[str, str], defaults: dict[str, str]) -> None:
        self._send({"set": env, "default": defaults})

    def refuse(self, why: str) -> None:
        self._send({"error": why})

    def _send(self, answer: dict[str, Any]) -> None:
        with contextlib.suppress(OSError):  # the child is gone: its exit is seen by the caller
            os.write(self._to_child, json.dumps(answer).encode() + b"\n")

    def close(self) -> None:
        for fd in (self._from_child, self._to_child, self._child_read, self._child_write):
            _close(fd)
        self._from_child = self._to_child = self._child_read = self._child_write = -1


def _close(fd: int) -> None:
    if fd < 0:
        return
    with contextlib.suppress(OSError):
        os.close(fd)
