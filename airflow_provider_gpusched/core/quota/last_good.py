"""Settings files read while the scheduler runs (``[gpusched] quotas``, ``[gpusched] job_classes``): the last good
version stays in force.

Every DAG file's parse, every task start and every trigger reads these files. An admin's typo in one (``wieght``)
must not turn every DAG into an import error and stop every team's work, so they are read through
:class:`LastGood`:

* a version of the file that passes its check is kept in this process, and as a validated copy in a private
  directory (``<lease dir>/last-good``: every gpusched process of the host shares it), so a fresh process (a DAG
  file's parse, a new task) finds it too;
* a version that fails keeps the last good one in force: the value returned is that version with its
  ``config_error`` saying what is wrong with the file now, and since when the old version is used. The readers
  make it loud: the task log, ``gpusched queue health``, the GPU board's quota view, the metrics;
* with no good version ever read (the first read of the file is broken), the check's error is raised as before,
  naming the file and the key.

Only a file has a last good version: inline text in the option is a new setting each time it changes. The copy is
read back through the same check (``from_dict``), and only for the file it was made from.

Pure Python, no Airflow imports.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Generic, Protocol, TypeVar

from airflow_provider_gpusched.core.errors import GpuschedError
from airflow_provider_gpusched.core.job_classes import JobClassConfigError, JobClassMapping
from airflow_provider_gpusched.core.quota.config import QuotaConfig, QuotaConfigError
from airflow_provider_gpusched.core.records import RecordType, record_class, says
from airflow_provider_gpusched.core.safe_files import (
    BadRecordError,
    ensure_private_dir,
    read_json_record,
    write_json_atomic,
)
from airflow_provider_gpusched.core.yaml_loader import load_setting, names_a_file

log = logging.getLogger(__name__)

#: the folder of the lease directory that holds the validated copies
FOLDER = "last-good"


class Checked(Protocol):
    """A setting's value as its check builds it: it says where it came from and what is wrong with the file now."""

    source: str
    config_error: str


T = TypeVar("T", bound=Checked)


def last_good_dir(state_dir: str) -> str:
    """Where the validated copies of the last good settings files live: ``<lease dir>/last-good``."""
    return os.path.join(state_dir, FOLDER)


@dataclass
class _Good(Generic[T]):
    value: T
    read_at: float  # when the file was read and passed (said in the error: since when the version is in force)
    #: the file's modification time (ns) when it was read: of two good versions, the one of the later edit is the
    #: last good one (ordered by the file's own stamp, not by a reader's clock, which another process may have set)
    mtime_ns: int = 0


@record_class
@dataclass
class LastGoodCopy:
    """The copy on disk of a settings file's last good version (``<lease dir>/last-good/<leaf>-<hash>.json``); its
    ``data`` is checked again by the setting's own check before it is used."""

    option: Annotated[str, says("the option's name", max_length=200)]
    file: Annotated[str, says("the settings file's path", max_length=4096)]
    read_at: Annotated[float, says("a time stamp", strict=None)]
    mtime_ns: Annotated[int, says("the file's modification time in ns", ge=0)]
    data: Annotated[Any, says("the file's contents")]


LAST_GOOD_COPY = RecordType(LastGoodCopy, name="last good settings copy")


#: a file changed less than this before it was read may change again with the same (mtime, size, inode): it is
#: read again at the next look rather than trusted (file times are only as fine as the kernel's clock tick)
RACY_NS = 2_000_000_000
#: inline settings remembered (their text is their identity)
INLINE_KEPT = 8


@dataclass
class LastGood(Generic[T]):
    """One setting that is a YAML/JSON file path or inline text, read through its check (``build``: ``from_dict``),
    with the last good version of a file kept in force while the file is broken."""

    option: str  # "[gpusched] quotas"
    what: str  # "quota file": how the errors name the file
    leaf: str  # the copies' file names: <leaf>-<hash of the path>.json
    build: Callable[[Any, str], T]  # (data, source) -> the checked value; raises a GpuschedError (its ``error``)
    empty: Callable[[], T]  # the value of an empty setting
    error: type[GpuschedError]  # the check's error: a file not found or not YAML/JSON is one too

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        #: path -> (stamp of the file, whether the stamp can be trusted, what was made of it)
        self._seen: dict[str, tuple[tuple[int, int, int], bool, T]] = {}
        self._good: dict[str, _Good[T]] = {}  # path -> the last good version this process read
        self._inline: dict[str, T] = {}

    def load(self, setting: str | None, state_dir: str = "", *, shared: bool = False) -> T:
        """The setting's value now: inline text or an empty setting as it is (or the check's error); a file as it
        is when it passes its check, else its last good version (this process's or the copy in
        ``last_good_dir(state_dir)``, the newer) with ``config_error`` set, else the check's error. ``state_dir``
        '' keeps no copy on disk; ``shared``: the lease directory is a group directory (its copies are 0660).
        Read again only when the file changes: cheap enough for every operator of every DAG file."""
        text = str(setting or "").strip()
        if not text:
            return self.empty()
        if not names_a_file(text):
            return self._inline_value(text)
        path = os.path.abspath(os.path.expanduser(text))
        with self._lock:
            stamp = _stamp(path)
            seen = self._seen.get(path)
            if seen is not None and seen[0] == stamp and seen[1]:
                return seen[2]
            trusted = time.time_ns() - stamp[0] > RACY_NS
            try:
                data, source = load_setting(path, self.option, self.what, self.error)
                value = self.build(data, source)
            except GpuschedError as exc:
                kept = self._kept(path, str(exc), state_dir)
                if kept is None:
                    raise
                self._seen[path] = (stamp, trusted, kept)
                return kept
            good = _Good(value, time.time(), stamp[0])
            self._good[path] = good
            self._seen[path] = (stamp, trusted, value)
            if state_dir:
                self._save(path, data, good, state_dir, shared)
            return value

    def forget(self) -> None:
        """Drop what this process read (the copies on disk stay), as a fresh process starts."""
        with self._lock:
            self._seen.clear()
            self._good.clear()
            self._inline.clear()

    def _inline_value(self, text: str) -> T:
        value = self._inline.get(text)
        if value is None:
            data, source = load_setting(text, self.option, self.what, self.error)
            value = self.build(data, source)
            with self._lock:
                if len(self._inline) >= INLINE_KEPT:
                    self._inline.pop(next(iter(self._inline)))
                self._inline[text] = value
        return value

    # -- the last good version --------------------------------------------------------------------------
    def _kept(self, path: str, error: str, state_dir: str) -> T | None:
        """The last good version of ``path`` (this process's or the copy on disk, the newer), marked with ``error``;
        None when there is none."""
        candidates = [g for g in (self._good.get(path), self._copy(path, state_dir)) if g is not None]
        if not candidates:
            return None
        good = max(candidates, key=lambda g: g.mtime_ns)  # this process's first where the two are of one edit
        self._good[path] = good
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(good.read_at))
        log.info("gpusched: %s is broken (%s); its last good version stays in force", path, error)
        kept: T = dataclasses.replace(  # type: ignore[type-var]  # T is a dataclass: QuotaConfig, JobClassMapping
            good.value,
            config_error=f"{error} (the last good version of {path}, read {when}, stays in force until it is fixed)",
        )
        return kept

    def _copy_path(self, path: str, state_dir: str) -> str:
        digest = hashlib.sha256(path.encode()).hexdigest()[:16]
        return os.path.join(last_good_dir(state_dir), f"{self.leaf}-{digest}.json")

    def _save(self, path: str, data: Any, good: _Good[T], state_dir: str, shared: bool) -> None:
        """The validated copy of ``path``'s good version, written unless the copy there holds the same data or is
        of a later edit of the file (another process read it since). A copy that is not one (unreadable, another
        user's in a shared directory) is replaced. A copy that cannot be written costs only the keeping across
        processes, never the read."""
        try:
            try:
                there = self._record(path, state_dir)
            except GpuschedError:
                there = None  # (not a copy: replaced)
            if there is not None and (there.data == json.loads(json.dumps(data)) or there.mtime_ns > good.mtime_ns):
                return
            ensure_private_dir(last_good_dir(state_dir), shared=shared, what="last-good settings directory")
            record = LAST_GOOD_COPY.dump(LastGoodCopy(self.option, path, good.read_at, good.mtime_ns, data))
            write_json_atomic(self._copy_path(path, state_dir), record, 0o660 if shared else 0o600, allow_nan=False)
        except (OSError, GpuschedError, TypeError, ValueError) as exc:
            log.warning("gpusched: no copy of the last good %s kept (%s)", path, exc)

    def _copy(self, path: str, state_dir: str) -> _Good[T] | None:
        """The copy on disk of ``path``'s last good version, checked again as the file is; None when there is none,
        or it is not one (another file's, or no longer passing the check)."""
        try:
            record = self._record(path, state_dir)
            if record is None:
                return None
            return _Good(self.build(record.data, path), record.read_at, record.mtime_ns)
        except GpuschedError as exc:
            log.warning("gpusched: the copy of the last good %s is not used (%s)", path, exc)
            return None

    def _record(self, path: str, state_dir: str) -> LastGoodCopy | None:
        """The copy's record, read through its record type (its ``data`` not yet checked: :meth:`_copy`); None when
        there is none; :class:`BadRecordError` when it is not a record, not a copy of ``path``'s, or (in a shared
        lease directory) written by a user who is neither this one, root nor the file's owner."""
        if not state_dir:
            return None
        where = self._copy_path(path, state_dir)
        try:
            owner = os.lstat(where).st_uid
            raw = read_json_record(where)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise BadRecordError(f"{where}: {exc}") from None
        try:
            file_owner = os.stat(path).st_uid
        except OSError:
            file_owner = os.geteuid()
        if owner not in (os.geteuid(), 0, file_owner):
            raise BadRecordError(f"{where}: written by user {owner}, not by this user, root or the file's owner")
        record = LAST_GOOD_COPY.read(raw, where)
        if record.file != path or record.option != self.option:
            raise BadRecordError(f"{where}: not a copy of {path}")
        return record


def _stamp(path: str) -> tuple[int, int, int]:
    """(mtime_ns, size, inode) of ``path``: an edit (or an editor's rename over it) changes it; zeros when missing."""
    try:
        st = os.stat(path)
    except OSError:
        return (0, 0, 0)
    return (st.st_mtime_ns, st.st_size, st.st_ino)


#: ``[gpusched] quotas`` (docs/quotas.md)
QUOTAS: LastGood[QuotaConfig] = LastGood(
    "[gpusched] quotas", "quota file", "quotas", QuotaConfig.from_dict, QuotaConfig, QuotaConfigError
)
#: ``[gpusched] job_classes`` (docs/idle-filling.md)
JOB_CLASSES: LastGood[JobClassMapping] = LastGood(
    "[gpusched] job_classes",
    "job-class mapping file",
    "job-classes",
    JobClassMapping.from_dict,
    JobClassMapping,
    JobClassConfigError,
)
