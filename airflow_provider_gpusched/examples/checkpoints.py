"""Checkpoints that survive preemption, for training code that gpusched runs (or that runs on its own).

    from airflow_provider_gpusched.examples.checkpoints import Checkpoints, checkpoint_dir

    checkpoints = Checkpoints(checkpoint_dir(trial_dir), fingerprint=params)
    state = checkpoints.load()                 # None on the first start; else what save() was given
    with checkpoints.stop_on_sigterm():        # SIGTERM now asks the loop to stop (stop_requested())
        for epoch in range(start, epochs):
            ...                                # between steps: if stop_requested(): save, then exit 143
            checkpoints.save({"epoch": epoch + 1, "model": model.state_dict(), ...})

Population-based training (``search: pbt``) fills a new trial's checkpoint folder with the checkpoint it starts
from (its member's last one, or the one it exploits) and a ``handed_over.json`` note: ``load`` then returns that
checkpoint although it was written for other parameters, and the run goes on from it with its own.

Where a checkpoint lives (:func:`checkpoint_dir`): ``$GPUSCHED_CHECKPOINT_DIR`` where gpusched's local GPU
runner gives one (kept across the relaunches after a preemption; the runner counts the GPU time lost since
the newest file there), else ``checkpoint/`` in the sweep trial's folder (kept across Slurm requeues and
re-runs of the DAG), else nowhere (no checkpoints).

A checkpoint is written to a new private file (mode 0600) renamed over the old one, so a preemption in the
middle of a save leaves the previous checkpoint whole. It is read back with ``torch.load(weights_only=True)``
(tensors, numbers, strings and containers only: no code runs) and checked: a file that is not a checkpoint, or
one written for other parameters, is an error naming the file, never a silent fresh start.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import signal
import threading
from collections.abc import Iterator, Mapping
from typing import Any

from airflow_provider_gpusched.core.work_env import CHECKPOINT_ENV

CHECKPOINT_FILE = "last.pt"
FORMAT = "gpusched-checkpoint/1"
MAX_CHECKPOINT_BYTES = 4 << 30
#: the exit status after a stop on SIGTERM (128 + 15, what a shell reports for a process SIGTERM ended)
EXIT_STOPPED = 143

_stop = threading.Event()
_stopped_by = ["SIGTERM"]  # the signal that asked for the stop


class CheckpointError(ValueError):
    """A checkpoint file that cannot be used; the message names the file and what is wrong."""


def checkpoint_dir(trial_dir: str | os.PathLike | None = None) -> str | None:
    """Where this run's checkpoints go (see the module's docstring); None: nowhere."""
    if os.environ.get(CHECKPOINT_ENV):
        return os.environ[CHECKPOINT_ENV]
    trial_dir = trial_dir or os.environ.get("GPUSCHED_TRIAL_DIR")
    if trial_dir:
        return os.path.join(os.fspath(trial_dir), "checkpoint")
    return None


def stop_signal() -> str:
    """The name of the signal that asked the loop to stop (``SIGTERM``, or a time-limit chain's ``SIGUSR1``)."""
    return _stopped_by[0]


def stop_requested() -> bool:
    """True once SIGTERM arrived inside :meth:`Checkpoints.stop_on_sigterm` (this process)."""
    return _stop.is_set()


def fingerprint_of(params: Mapping[str, Any]) -> str:
    """A short digest of the parameters a checkpoint belongs to."""
    text = json.dumps(params, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class Checkpoints:
    """The checkpoint of one training run in ``folder`` (None: checkpointing off; save and load do nothing)."""

    def __init__(self, folder: str | os.PathLike | None, *, fingerprint: Mapping[str, Any] | str = "") -> None:
        self.folder = os.fspath(folder) if folder else None
        self.fingerprint = fingerprint if isinstance(fingerprint, str) else fingerprint_of(fingerprint)

    @property
    def path(self) -> str | None:
        return os.path.join(self.folder, CHECKPOINT_FILE) if self.folder else None

    def save(self, state: Mapping[str, Any]) -> str | None:
        """Write ``state`` (tensors, numbers, strings, lists, dicts) atomically; returns the file's path."""
        path = self.path
        if path is None:
            return None
        import torch

        from airflow_provider_gpusched.core.safe_files import write_atomic

        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        buffer = io.BytesIO()
        torch.save({**state, "format": FORMAT, "fingerprint": self.fingerprint}, buffer)
        write_atomic(path, buffer.getvalue(), 0o600)
        return path

    def load(self, map_location: Any = "cpu") -> dict[str, Any] | None:
        """What the last :meth:`save` wrote, or None when there is no checkpoint yet."""
        path = self.path
        if path is None:
            return None
        import torch

        from airflow_provider_gpusched.core.safe_files import BadRecordError, read_record_bytes

        try:
            data = read_record_bytes(path, MAX_CHECKPOINT_BYTES)
        except FileNotFoundError:
            return None
        except BadRecordError as exc:
            raise CheckpointError(f"checkpoint {exc}") from None
        try:
            state = torch.load(io.BytesIO(data), map_location=map_location, weights_only=True)
        except Exception as exc:  # noqa: BLE001 - torch raises many kinds for a damaged file
            raise CheckpointError(
                f"checkpoint {path}: not a readable PyTorch checkpoint "
                f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
            ) from None
        if not isinstance(state, dict) or state.get("format") != FORMAT:
            raise CheckpointError(
                f"checkpoint {path}: not written by Checkpoints.save (expected format {FORMAT!r}); "
                "remove it to start from scratch"
            )
        from airflow_provider_gpusched.core.sweep.searches.pbt import read_handed_over

        handed = read_handed_over(self.folder) if self.folder else None
        if self.fingerprint and state.get("fingerprint") != self.fingerprint and handed is not None:
            # population-based training copied another member's checkpoint here on purpose: this run goes on from
            # it with its own (perturbed) parameters
            print(
                f"starting from the checkpoint of PBT member {handed.get('from_member')} (generation "
                f"{handed.get('generation')}, {path}) with this run's parameters",
                flush=True,
            )
            return state
        if self.fingerprint and state.get("fingerprint") != self.fingerprint:
            raise CheckpointError(
                f"checkpoint {path}: written for other parameters (fingerprint "
                f"{state.get('fingerprint')!r}, this run's is {self.fingerprint!r}); give this run "
                "its own checkpoint folder, or remove the file to start from scratch"
            )
        return state

    @contextlib.contextmanager
    def stop_on_sigterm(self) -> Iterator[None]:
        """Within the block, SIGTERM sets :func:`stop_requested` instead of ending the process, so the loop can
        save and stop between two steps (the runner's grace period, ``grace_period`` of the job class, is the
        time it has). In a Slurm time-limit chain (``$GPUSCHED_CHAIN_SIGNAL``, docs/slurm.md) the chain's signal
        does the same: the next segment goes on from that checkpoint. Outside the main thread, or with
        checkpointing off, the signals are left as they are."""
        if not self.folder or threading.current_thread() is not threading.main_thread():
            yield
            return
        _stop.clear()
        chain = os.environ.get("GPUSCHED_CHAIN_SIGNAL", "")
        signals = [signal.SIGTERM]
        if chain in ("USR1", "USR2"):
            signals.append(getattr(signal, f"SIG{chain}"))

        def stop(signum: int, _frame: Any) -> None:
            _stopped_by[0] = signal.Signals(signum).name
            _stop.set()

        previous = {sig: signal.signal(sig, stop) for sig in signals}
        if chain and os.environ.get("GPUSCHED_CHAIN_SIGNALLED"):  # it came before this loop could take it
            _stopped_by[0] = f"SIG{chain}"
            _stop.set()
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
