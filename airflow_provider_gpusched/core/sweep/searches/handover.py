"""Handing a trial's checkpoint on to another trial's folder (PBT's exploit, Hyperband's promotion): regular files
only, through no link at either end, sparse-aware, the hand-over noted beside it (issue 77)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Mapping
from typing import Any

from airflow_provider_gpusched.core.errors import GpuschedError

#: the file, in a checkpoint folder PBT filled, that says whose checkpoint it is
CHECKPOINT_FOLDER = "checkpoint"

log = logging.getLogger(__name__)

HANDED_OVER_FILE = "handed_over.json"


def hand_over(source: str, target: str, note: Mapping[str, Any], what: str) -> None:
    """Start trial folder ``target`` from the checkpoint of trial folder ``source`` (its folder of the same name in
    ``target``'s sweep): a copy of its checkpoint folder (:func:`~airflow_provider_gpusched.core.safe_files.copy_tree_at`:
    regular files and folders, walked and written by directory fds, never through a link at either end; sparse;
    private) and ``handed_over.json`` (``note``, with the source folder and what was left out). Done once: a target
    that has its note already is left as it is. ``what`` names the source in the error when it left no checkpoint.
    A link, FIFO, socket or device in the source's checkpoint is left out (logged, and listed in the note as
    ``skipped``); a sweep, trial or checkpoint folder that is a link is refused (UnsafePathError naming it)."""
    from airflow_provider_gpusched.core.safe_files import (
        copy_tree_at,
        open_dir,
        open_dir_at,
        regular_file_at,
        write_at,
    )

    trials, member = os.path.split(os.path.normpath(target))
    donor = os.path.basename(os.path.normpath(source))
    if donor in ("", ".", ".."):
        raise GpuschedError(f"{what}: its folder {source!r} names no trial folder")
    src, dst = os.path.join(trials, donor, CHECKPOINT_FOLDER), os.path.join(target, CHECKPOINT_FOLDER)
    with contextlib.ExitStack() as fds:

        def held(fd: int) -> int:
            fds.callback(os.close, fd)
            return fd

        trials_fd = held(open_dir(trials, "sweep trials folder"))
        try:
            member_fd = held(open_dir_at(trials_fd, member, target, "trial folder"))
            dst_fd = held(open_dir_at(member_fd, CHECKPOINT_FOLDER, dst, "checkpoint folder"))
            if regular_file_at(dst_fd, HANDED_OVER_FILE):
                return
        except FileNotFoundError:
            pass
        try:
            donor_fd = held(open_dir_at(trials_fd, donor, os.path.join(trials, donor), "trial folder"))
            src_fd = held(open_dir_at(donor_fd, CHECKPOINT_FOLDER, src, "checkpoint folder"))
        except FileNotFoundError:
            src_fd = -1
        if src_fd < 0 or not _has_entries(src_fd):
            raise GpuschedError(_no_checkpoint(what, src))
        member_fd = held(open_dir_at(trials_fd, member, target, "trial folder", create=True))
        dst_fd = held(open_dir_at(member_fd, CHECKPOINT_FOLDER, dst, "checkpoint folder", create=True))
        copy = copy_tree_at(src_fd, dst_fd, src, dst, exclude=frozenset({HANDED_OVER_FILE}))
        if copy.skipped:
            log.warning(
                "%s: PBT hand-over to %s left out what is not a regular file or folder: %s",
                src,
                dst,
                ", ".join(copy.skipped[:20])
                + (f" and {len(copy.skipped) - 20} more" if len(copy.skipped) > 20 else ""),
            )
        if not copy.files:
            raise GpuschedError(_no_checkpoint(what, src))
        record = {**note, "folder": src, **({"skipped": copy.skipped[:100]} if copy.skipped else {})}
        write_at(dst_fd, HANDED_OVER_FILE, os.path.join(dst, HANDED_OVER_FILE), (json.dumps(record) + "\n").encode())


def _has_entries(folder_fd: int) -> bool:
    with os.scandir(folder_fd) as entries:
        return any(e.name != HANDED_OVER_FILE for e in entries)


def _no_checkpoint(what: str, src: str) -> str:
    return (
        f"{what} left no checkpoint in {src}; its trials must save their state there ($GPUSCHED_CHECKPOINT_DIR, "
        f"or the examples' Checkpoints) for the next trial to start from"
    )


def read_handed_over(folder: str) -> dict[str, Any] | None:
    """What PBT noted in a checkpoint folder it filled (``handed_over.json``: a regular file, never through a link),
    or None."""
    from airflow_provider_gpusched.core.safe_files import BadRecordError, read_json_record

    try:
        data = read_json_record(os.path.join(folder, HANDED_OVER_FILE))
    except (OSError, BadRecordError):
        return None
    return data if isinstance(data, dict) else None


# -- the lineage as a record, and as the Sweeps tab draws it ---------------------------------------------------------
#: the most members and exploits the Sweeps tab's answer carries
