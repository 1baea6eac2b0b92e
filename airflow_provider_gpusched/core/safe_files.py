"""Files on a host shared by several Unix users: directories only we (or a trusted group) can write,
and opens that never follow a symbolic link or block on a FIFO planted by someone else.

* :func:`ensure_private_dir` — create a state directory safely, or check an existing one: a real
  directory (not a link), not writable by every user, and owned by this user — unless the operator set
  it up on purpose as a *shared group directory* (``shared=True``: owned by us, root or a group we are
  in, group-writable, not world-writable).
* :func:`open_regular` / :func:`read_json_record` / :func:`write_json_atomic` / :func:`append_line` —
  ``O_NOFOLLOW`` everywhere, ``O_EXCL`` where a file is created, regular files only.
* :func:`open_dir` / :func:`open_dir_at` / :func:`copy_tree_at` / :func:`write_at` — a folder tree walked and
  written by directory fds (``O_NOFOLLOW`` at every level), sparse-aware and bounded (a checkpoint handed over).
"""

from __future__ import annotations

import array
import contextlib
import dataclasses
import errno
import grp
import itertools
import json
import os
import pwd
import re
import stat
import threading
from collections.abc import Callable, Iterator
from typing import Any

from airflow_provider_gpusched.core.errors import GpuschedError


class UnsafePathError(GpuschedError):
    """A directory or file that another user could control; the message says which and what to do."""


def _user(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def _group(gid: int) -> str:
    try:
        return f"{grp.getgrgid(gid).gr_name} (gid {gid})"
    except KeyError:
        return f"gid {gid}"


def ensure_private_dir(path: str, *, shared: bool = False, what: str = "state directory") -> str:
    """Create ``path`` (mode 0700, or 2770 when ``shared``) if it is missing, then check that nobody
    else can replace what is in it. Raises :class:`UnsafePathError` naming the path and the fix."""
    path = os.path.abspath(os.path.expanduser(path))
    parent = os.path.dirname(path)
    if not os.path.isdir(parent):
        os.makedirs(parent, mode=0o700, exist_ok=True)
    try:
        os.mkdir(path, 0o2770 if shared else 0o700)
        if shared:
            os.chmod(path, 0o2770)  # mkdir's mode is cut by the umask
    except FileExistsError:
        pass
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        raise UnsafePathError(
            f"{what} {path} is a symbolic link (to {os.readlink(path)!r}); refusing to use it: "
            f"another user may have planted it. Remove it, or configure a directory of your own"
        )
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafePathError(f"{what} {path} exists and is not a directory")
    uid = os.geteuid()
    mode = stat.S_IMODE(st.st_mode)
    if mode & stat.S_IWOTH:
        raise UnsafePathError(
            f"{what} {path} is writable by every user (mode {mode:04o}): anyone could replace or delete its files. "
            f"Use a private directory (chmod 700), or a shared group directory: install -d -m 2770 -g GROUP {path} "
            f"and set [gpusched] gpu_state_dir_shared = True"
        )
    if shared:
        if st.st_uid not in (uid, 0) and st.st_gid not in {os.getegid(), *os.getgroups()}:
            raise UnsafePathError(
                f"shared {what} {path} belongs to {_user(st.st_uid)} and group {_group(st.st_gid)}, "
                f"and this user is neither its owner nor in its group"
            )
        return path
    if st.st_uid != uid:
        raise UnsafePathError(
            f"{what} {path} is owned by {_user(st.st_uid)}, not by this user ({_user(uid)}): another user may have "
            f"created it first. Remove it, configure a directory of your own, or (a shared group directory set up "
            f"on purpose) set [gpusched] gpu_state_dir_shared = True"
        )
    if mode & stat.S_IWGRP:
        raise UnsafePathError(
            f"{what} {path} is group-writable (mode {mode:04o}); if that is a shared group directory on purpose, "
            f"set [gpusched] gpu_state_dir_shared = True (or GPUSCHED_STATE_DIR_SHARED=1), else chmod 700 it"
        )
    return path


def check_path_chain(path: str, what: str, _links: int = 0) -> None:
    """Refuse a ``path`` another user could redirect: a symbolic link on the way that a user other than this one
    (or root) owns, or a directory on the way that every user may write to without the sticky bit (another user
    could replace the next component with a link). :class:`UnsafePathError` names the component and the fix."""
    import stat

    me = os.geteuid()
    current = os.sep
    parts = [p for p in os.path.abspath(path).split(os.sep) if p]
    for i, part in enumerate(parts):
        parent, current = current, os.path.join(current, part)
        try:
            st = os.lstat(current)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise UnsafePathError(f"{what} {path}: {current} cannot be checked ({exc})") from None
        pst = os.stat(parent)
        if stat.S_IMODE(pst.st_mode) & stat.S_IWOTH and not pst.st_mode & stat.S_ISVTX:
            raise UnsafePathError(
                f"{what} {path}: {parent} is writable by every user without the sticky bit (mode "
                f"{stat.S_IMODE(pst.st_mode):04o}), so another user could replace {current} with a link of theirs. "
                f"Use a directory under one only you can write to (or chmod +t {parent})"
            )
        if stat.S_ISLNK(st.st_mode):
            if st.st_uid not in (me, 0):
                raise UnsafePathError(
                    f"{what} {path}: {current} is a symbolic link (to {os.readlink(current)!r}) owned by "
                    f"{_user(st.st_uid)}, not by this user or root: another user may have planted it. Remove it, "
                    f"or use another path"
                )
            if _links > 40:
                raise UnsafePathError(f"{what} {path}: too many symbolic links on the way")
            target = os.path.join(os.path.dirname(current), os.readlink(current))
            check_path_chain(os.path.join(target, *parts[i + 1 :]), what, _links + 1)
            return


def open_regular(path: str, flags: int, mode: int = 0o600) -> int:
    """``os.open`` that never follows a symbolic link and accepts only a regular file (no FIFO, device)."""
    fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, mode)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafePathError(f"{path} is not a regular file")
        if flags & os.O_CREAT and st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) != mode:
            os.fchmod(fd, mode)  # the mode given to open is cut by the umask
        if flags & (os.O_WRONLY | os.O_RDWR) == 0:
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def is_under(path: str, root: str) -> bool:
    """Whether ``path`` lies under ``root`` with no symbolic link on the way (``..`` cannot leave the root):
    what a reader checks before opening a path that a record (an XCom, a status file) named."""
    if not path or not root:
        return False
    real_root = os.path.realpath(root)
    real = os.path.realpath(path)
    return os.path.commonpath([real_root, real]) == real_root and real == os.path.abspath(path)


class BadRecordError(GpuschedError):
    """A file in a state directory that cannot be read as the record it should be (``record``: what it held, where
    a caller still reads part of it)."""

    record: Any = None


def read_json_record(path: str, max_bytes: int = 1 << 20) -> Any:
    """The JSON in ``path`` (``FileNotFoundError`` if it is gone); :class:`BadRecordError` naming the
    file when it is a link, not a regular file, too big, or not JSON."""
    return parse_json_record(path, read_record_bytes(path, max_bytes))


def parse_json_record(path: str, data: bytes, *, max_depth: int | None = None, max_digits: int | None = None) -> Any:
    """The JSON in ``data`` read from ``path``; :class:`BadRecordError` naming the file if it is not JSON (a whole
    number over 4300 digits included) or is nested deeper than the interpreter's recursion limit. With ``max_depth``
    or ``max_digits`` (an answer from a server: ``path`` is then what the caller calls it), checked before anything
    is parsed: arrays and objects nested more than ``max_depth`` deep, or a number of more than ``max_digits``
    digits, are refused the same way."""
    if max_depth is not None or max_digits is not None:
        outside = _outside_strings(data)
        if max_depth is not None and json_depth(data, max_depth, outside=outside) > max_depth:
            raise BadRecordError(f"{path}: nested deeper than {max_depth} levels")
        if max_digits is not None and re.search(rb"[0-9]{%d}" % (max_digits + 1), outside):
            raise BadRecordError(f"{path}: holds a number longer than {max_digits} digits")
    try:
        return json.loads(data.decode())
    except (UnicodeDecodeError, ValueError) as exc:
        raise BadRecordError(f"{path}: not valid JSON ({exc})") from None
    except RecursionError:
        raise BadRecordError(f"{path}: JSON nested too deep") from None


_NOT_BRACKETS = bytes(sorted(set(range(256)) - set(b"[]{}")))
#: ``[`` and ``{`` as 1, ``]`` and ``}`` as -1 (a signed byte)
_STEPS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")


def _outside_strings(data: bytes) -> bytes:
    """JSON text without its strings (what lies between them), found without parsing: escaped backslashes, then
    escaped quotes, are dropped (left to right, as JSON pairs them), then every other part of a split on the quotes
    left is outside a string. (A quote or backslash byte is never part of a multi-byte UTF-8 character.)"""
    if b"\\" in data:
        data = data.replace(b"\\\\", b"").replace(b'\\"', b"")
    return b"".join(data.split(b'"')[0::2])


def json_depth(data: bytes, limit: int | None = None, *, outside: bytes | None = None) -> int:
    """The deepest nesting of ``[`` and ``{`` in JSON text (outside strings), without parsing it (``limit``: a
    caller's bound, only to stop early). Linear, at the speed of bytes methods: a large slurmrestd answer is scanned
    at every poll."""
    if outside is None:
        outside = _outside_strings(data)
    steps = outside.translate(None, _NOT_BRACKETS)
    if limit is not None and limit < len(steps) and b"[" * (limit + 1) in steps:
        return limit + 1  # the plain attack, at once
    return max(0, max(itertools.accumulate(array.array("b", steps.translate(_STEPS))), default=0))


def read_record_bytes(path: str, max_bytes: int = 1 << 20) -> bytes:
    """The bytes of the regular file ``path`` (``FileNotFoundError`` if it is gone); :class:`BadRecordError`
    naming the file when it is a link, not a regular file, or too big."""
    try:
        fd = open_regular(path, os.O_RDONLY)
    except OSError as exc:
        if isinstance(exc, FileNotFoundError):
            raise
        raise BadRecordError(f"{path}: cannot be read safely ({exc.strerror or exc})") from None
    except UnsafePathError as exc:
        raise BadRecordError(str(exc)) from None
    try:
        size = os.fstat(fd).st_size  # a read sized to the file, not a max_bytes buffer for a small record
        parts, total = [], 0
        while total <= max_bytes:
            part = os.read(fd, min(max_bytes + 1 - total, max(size + 1 - total, 4096)))
            if not part:
                break
            parts.append(part)
            total += len(part)
    finally:
        os.close(fd)
    if total > max_bytes:
        raise BadRecordError(f"{path}: larger than {max_bytes} bytes")
    return b"".join(parts)


def write_atomic(path: str, data: bytes | str, mode: int | None = 0o600) -> None:
    """Write through a new, uniquely named file (``O_EXCL``) renamed over ``path``: a reader never sees half
    a file, and a link planted at either name is never written through. ``mode`` is set exactly (not cut by
    the umask: a shared group directory wants 0660); None: what the umask leaves of 0666."""
    tmp = f"{path}.{os.urandom(6).hex()}.tmp"
    fd = os.open(
        tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666 if mode is None else mode
    )
    try:
        if mode is not None:
            os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data.encode() if isinstance(data, str) else data)
        os.replace(tmp, path)
    except OSError as exc:  # a full disk, a quota: the error names the file meant, not the temporary one
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise OSError(exc.errno, exc.strerror, path) from None
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise


def write_json_atomic(
    path: str,
    data: Any,
    mode: int | None = 0o600,
    *,
    indent: int | None = None,
    default: Any = None,
    allow_nan: bool = True,
) -> None:
    """``data`` as JSON through :func:`write_atomic`; a value JSON cannot hold raises before anything is
    written (``TypeError``/``ValueError``)."""
    text = json.dumps(data, indent=indent, default=default, allow_nan=allow_nan)
    write_atomic(path, text + "\n", mode)


def append_line(path: str, line: str, mode: int = 0o600) -> None:
    """Append one line (``O_APPEND``: short lines of several writers do not interleave)."""
    fd = open_regular(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, mode)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


# -- locks held briefly, in processes that fork -------------------------------------------------------------
# A flock belongs to the open file, which a forked child shares: had a process forked while one of its threads
# briefly held a lock (an Edge worker forks each task while its heartbeat thread reads the host's leases), the
# child would keep the lock after the parent let go, and every later taker would wait forever. Each such fd is
# registered while open, and a forked child closes its copies at once. The guard keeps a fork from falling
# between opening an fd and registering it (or between unregistering and closing it).
_fork_guard = threading.Lock()
_brief_fds: set[int] = set()


def _after_fork_in_child() -> None:
    for fd in _brief_fds:
        with contextlib.suppress(OSError):
            os.close(fd)
    _brief_fds.clear()
    _fork_guard.release()


os.register_at_fork(
    before=_fork_guard.acquire, after_in_parent=_fork_guard.release, after_in_child=_after_fork_in_child
)


@contextlib.contextmanager
def brief_fd(open_fd: Callable[[], int]) -> Iterator[int]:
    """The fd ``open_fd()`` gives, for a lock held briefly: closed on leaving, and never kept by a process
    forked meanwhile (see above)."""
    with _fork_guard:
        fd = open_fd()
        _brief_fds.add(fd)
    try:
        yield fd
    finally:
        with _fork_guard:
            _brief_fds.discard(fd)
            os.close(fd)


def read_tail(path: str, root: str, lines: int = 40, limit: int = 256 * 1024) -> str | None:
    """The last ``lines`` lines of ``path`` if it is a regular file under ``root`` (symlinks are not followed,
    ``..`` cannot leave the root); None when it is outside the root, missing or unreadable."""
    if not is_under(path, root):
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        start = max(0, st.st_size - limit)
        data = os.pread(fd, limit, start)
    finally:
        os.close(fd)
    text = data.decode(errors="replace")
    return "\n".join(text.splitlines()[-lines:])


# -- copying a folder tree another process filled (a trial's checkpoint): directory fds all the way down ----------
#: how deep a copied tree may nest and how many entries its walk reads: a bound on a tree someone else filled
COPY_MAX_DEPTH = 32
COPY_MAX_ENTRIES = 100_000
_COPY_CHUNK = 1 << 20
_ZERO_CHUNK = bytes(_COPY_CHUNK)
_TMP_PREFIX, _TMP_SUFFIX = ".gpusched-", ".tmp"
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclasses.dataclass
class TreeCopy:
    """What :func:`copy_tree_at` did: the files copied, the bytes read and written (holes and all-zero blocks are
    neither), and each entry left out, as ``"<relative path> (why)"``."""

    files: int = 0
    data_bytes: int = 0
    skipped: list[str] = dataclasses.field(default_factory=list)


def open_dir(path: str, what: str) -> int:
    """An fd of the directory ``path``: the way to it checked (:func:`check_path_chain`), the folder itself not a
    link. :class:`UnsafePathError` naming it; ``FileNotFoundError`` when it is missing."""
    check_path_chain(path, what)
    try:
        return os.open(path, _DIR_FLAGS)
    except OSError as exc:
        raise _not_a_folder(exc, path, what) from None


def open_dir_at(dir_fd: int, name: str, path: str, what: str, *, create: bool = False) -> int:
    """An fd of the folder ``name`` in the folder ``dir_fd`` (``path``: its full name, for messages), never through a
    link; made first (0700) when ``create`` and missing. :class:`UnsafePathError` when it is a link or not a
    folder; ``FileNotFoundError`` when it is missing."""
    if create:
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, 0o700, dir_fd=dir_fd)
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        raise _not_a_folder(exc, path, what) from None


def _not_a_folder(exc: OSError, path: str, what: str) -> OSError | UnsafePathError:
    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
        return UnsafePathError(
            f"{what} {path} is a symbolic link or not a folder; refusing to go through it (another user may have "
            f"planted it). Remove it"
        )
    return exc


def regular_file_at(dir_fd: int, name: str) -> bool:
    """Whether ``name`` in the folder ``dir_fd`` is a regular file (a link is not)."""
    try:
        return stat.S_ISREG(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def write_at(dir_fd: int, name: str, path: str, data: bytes, mode: int = 0o600) -> None:
    """:func:`write_atomic` in the folder ``dir_fd``: a new file (``O_EXCL|O_NOFOLLOW``) renamed over ``name``."""
    _replace_at(dir_fd, name, path, mode, lambda fd: _write_all(fd, data, 0))


def copy_tree_at(
    src_fd: int, dst_fd: int, src_path: str, dst_path: str, *, exclude: frozenset[str] = frozenset()
) -> TreeCopy:
    """Copy the regular files and folders under the folder ``src_fd`` into the folder ``dst_fd`` (``src_path`` and
    ``dst_path``: their names in messages; ``exclude``: names left out at the top). Every folder is opened by its
    parent's fd with ``O_NOFOLLOW``: a symbolic link, FIFO, socket or device at any depth on the source side is
    skipped and listed in the answer; a folder on the target side that is a link or a file is refused
    (:class:`UnsafePathError`). Each file is written as a new file (``O_EXCL|O_NOFOLLOW``, mode 0600) renamed over
    its name: a link or file already there is replaced, never written through. Sparse: only the data the source
    holds is read (``SEEK_DATA``/``SEEK_HOLE``), all-zero blocks are left as holes, and the size is set with
    ``ftruncate``. Bounded: :data:`COPY_MAX_DEPTH`, :data:`COPY_MAX_ENTRIES`, and the free space on the target's file
    system, checked before each file; a full disk or quota is a :class:`GpuschedError` naming the file."""
    report = TreeCopy()
    _copy_tree(src_fd, dst_fd, src_path, dst_path, "", exclude, 0, report, [0])
    return report


def _copy_tree(
    src_fd: int,
    dst_fd: int,
    src_path: str,
    dst_path: str,
    rel: str,
    exclude: frozenset[str],
    depth: int,
    report: TreeCopy,
    seen: list[int],
) -> None:
    with os.scandir(src_fd) as entries:
        for entry in entries:
            seen[0] += 1
            if seen[0] > COPY_MAX_ENTRIES:
                raise GpuschedError(
                    f"{src_path}: more than {COPY_MAX_ENTRIES} files and folders; refusing to copy a tree that large"
                )
            name = entry.name
            if (not rel and name in exclude) or (name.startswith(_TMP_PREFIX) and name.endswith(_TMP_SUFFIX)):
                continue
            sub = f"{rel}{name}"
            if entry.is_symlink():
                report.skipped.append(f"{sub} (a symbolic link)")
            elif entry.is_dir(follow_symlinks=False):
                if depth + 1 > COPY_MAX_DEPTH:
                    raise GpuschedError(
                        f"{os.path.join(src_path, sub)}: nested more than {COPY_MAX_DEPTH} folders deep; refusing to "
                        f"copy a tree that deep"
                    )
                try:
                    src_sub = os.open(name, _DIR_FLAGS, dir_fd=src_fd)
                except OSError as exc:  # replaced meanwhile (by a link: ELOOP), or gone
                    report.skipped.append(f"{sub} (cannot be opened as a folder: {exc.strerror})")
                    continue
                try:
                    dst_sub = open_dir_at(dst_fd, name, os.path.join(dst_path, sub), "folder", create=True)
                    try:
                        _copy_tree(src_sub, dst_sub, src_path, dst_path, f"{sub}/", exclude, depth + 1, report, seen)
                    finally:
                        os.close(dst_sub)
                finally:
                    os.close(src_sub)
            elif entry.is_file(follow_symlinks=False):
                _copy_file_at(src_fd, dst_fd, name, sub, src_path, dst_path, report)
            else:
                report.skipped.append(f"{sub} (not a regular file: a FIFO, socket or device)")


def _copy_file_at(
    src_fd: int, dst_fd: int, name: str, rel: str, src_path: str, dst_path: str, report: TreeCopy
) -> None:
    src, dst = os.path.join(src_path, rel), os.path.join(dst_path, rel)
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=src_fd)
    except OSError as exc:  # replaced by a link meanwhile (ELOOP), gone, unreadable
        report.skipped.append(f"{rel} (cannot be opened: {exc.strerror})")
        return
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            report.skipped.append(f"{rel} (not a regular file)")
            return
        os.set_blocking(fd, True)
        need = min(st.st_size, st.st_blocks * 512)
        vfs = os.fstatvfs(dst_fd)
        if need > vfs.f_bavail * vfs.f_frsize:
            raise GpuschedError(
                f"{dst}: the {need} bytes of data of {src} do not fit in the {vfs.f_bavail * vfs.f_frsize} bytes "
                f"free there; free some space (or a quota) and run the sweep again"
            )
        copied: list[int] = []
        _replace_at(dst_fd, name, dst, 0o600, lambda out: copied.append(_copy_sparse(fd, out, st.st_size)), src)
    finally:
        os.close(fd)
    report.files += 1
    report.data_bytes += copied[0]


def _replace_at(
    dir_fd: int, name: str, path: str, mode: int, fill: Callable[[int], object], source: str | None = None
) -> None:
    tmp = f"{_TMP_PREFIX}{os.urandom(6).hex()}{_TMP_SUFFIX}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dir_fd)
    try:
        try:
            os.fchmod(fd, mode)  # the mode given to open is cut by the umask
            fill(fd)
        finally:
            os.close(fd)
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
            copying = f" copying {source}" if source else ""
            raise GpuschedError(
                f"{path}: {exc.strerror}{copying}; free some space (or a quota) and run the sweep again"
            ) from None
        if isinstance(exc, IsADirectoryError):
            raise UnsafePathError(f"{path} is a folder; refusing to replace it with a file. Remove it") from None
        raise


def _copy_sparse(src: int, dst: int, size: int) -> int:
    """Copy the first ``size`` bytes of ``src`` into the new file ``dst``, data extents only; the bytes copied."""
    copied, pos = 0, 0
    seek_data, seek_hole = getattr(os, "SEEK_DATA", None), getattr(os, "SEEK_HOLE", None)
    while pos < size:
        start, end = pos, size
        if seek_data is not None and seek_hole is not None:
            try:
                start = os.lseek(src, pos, seek_data)
                end = min(size, os.lseek(src, start, seek_hole))
            except OSError as exc:
                if exc.errno == errno.ENXIO:  # nothing but a hole after pos
                    break
                if exc.errno not in (errno.EINVAL, errno.EOPNOTSUPP):
                    raise
                seek_data = seek_hole = None  # no hole reporting here: read all of it (zero blocks still skipped)
                start, end = pos, size
        while start < end:
            chunk = os.pread(src, min(_COPY_CHUNK, end - start), start)
            if not chunk:  # the file shrank meanwhile: the rest reads as zeros
                end = size
                break
            if chunk != _ZERO_CHUNK if len(chunk) == _COPY_CHUNK else chunk.count(0) != len(chunk):
                _write_all(dst, chunk, start)
                copied += len(chunk)
            start += len(chunk)
        pos = end
    os.ftruncate(dst, size)
    return copied


def _write_all(fd: int, data: bytes, offset: int) -> None:
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, offset)
        view, offset = view[n:], offset + n
