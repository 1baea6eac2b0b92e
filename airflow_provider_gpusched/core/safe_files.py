"""Files on a host shared by several Unix users: directories only we (or a trusted group) can write,
and opens that never follow a symbolic link or block on a FIFO planted by someone else.

* :func:`ensure_private_dir` — create a state directory safely, or check an existing one: a real
  directory (not a link), not writable by every user, and owned by this user — unless the operator set
  it up on purpose as a *shared group directory* (``shared=True``: owned by us, root or a group we are
  in, group-writable, not world-writable).
* :func:`open_regular` / :func:`read_json_record` / :func:`write_json_atomic` / :func:`append_line` —
  ``O_NOFOLLOW`` everywhere, ``O_EXCL`` where a file is created, regular files only.
"""

from __future__ import annotations

import contextlib
import grp
import json
import os
import pwd
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


def parse_json_record(path: str, data: bytes) -> Any:
    """The JSON in ``data`` read from ``path``; :class:`BadRecordError` naming the file if it is not JSON."""
    try:
        return json.loads(data.decode())
    except (UnicodeDecodeError, ValueError) as exc:
        raise BadRecordError(f"{path}: not valid JSON ({exc})") from None


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
