"""A running Slurm job's output, followed: the lines written since the last look, read incrementally and bounded,
from this host's file system or over ssh on the login host (the same :class:`~.runner.SlurmTransport` that runs
the Slurm commands).

Each :meth:`OutputFollower.read` reads at most ``max_bytes`` from where the last one stopped: a job that writes
faster is shown with a lag (its task log catches up while it runs; the tail at the end is read separately). A file
that is longer than ``max_bytes`` when first looked at (a triggerer restarted, a job that ran before being
followed) is shown from its last ``max_bytes``, saying how much was left out. Lines longer than ``max_line``
bytes are cut, saying so; a line not yet ended by a newline waits for its end (or for ``max_line`` bytes).
A file that was rewritten — it shrank, or the bytes just before where the last read stopped changed (a rewrite of
the same size or longer: a requeued job with ``--open-mode=truncate``, a file replaced) — is followed again as at a
first look: from its start, or from its last ``max_bytes`` with how much was skipped said.

Control characters in the output (binary output, terminal escapes) are written as ``\\xNN`` so that no raw ESC or BEL
byte reaches the task log; colour codes (``ESC[...m``) are kept, and a carriage return keeps what a terminal would
show (the text after the last one: a progress bar's final state).

Pure Python, no Airflow imports.
"""

from __future__ import annotations

import os
import re

from airflow_provider_gpusched.core.safe_files import open_regular
from airflow_provider_gpusched.core.slurm.transport import SlurmTransport

#: at most this much of the file per read
MAX_BYTES = 64 * 1024
#: a longer line is cut to this many bytes
MAX_LINE = 4096
#: bytes before the read position compared at each read: a change there means the file was rewritten
FINGERPRINT = 64
#: a control character (not a tab), or a terminal escape that is not a colour code
_CONTROL = re.compile(r"\x1b\[[0-9;]*m|[\x00-\x08\x0b-\x1f\x7f]")


def printable_line(text: str) -> str:
    """``text`` with what a terminal would overwrite dropped (up to its last carriage return) and every control
    character but tabs and colour codes written as ``\\xNN``."""
    if "\r" in text:
        text = text.rsplit("\r", 1)[1] or text.rstrip("\r").rsplit("\r", 1)[-1]
    return _CONTROL.sub(lambda m: m.group() if len(m.group()) > 1 else f"\\x{ord(m.group()):02x}", text)


#: the remote read: the file's size on one line, then up to MAX bytes from OFFSET. The path, offset and count are
#: arguments ($1..$3) of this fixed script, never part of it: a path with spaces, quotes or ';' is read verbatim.
_REMOTE_READ = (
    'f=$1; size=$(stat -c %s -- "$f" 2>/dev/null) || { echo missing; exit 0; }; echo "$size"; '
    'dd if="$f" iflag=skip_bytes,count_bytes skip="$2" count="$3" status=none'
)


def follows_output(follow_output: bool, path: str | None, array_size: int | None) -> bool:
    """Whether a job's output is followed into the task log while it runs (the operator's blocking wait and the
    trigger alike): when asked for, and the job writes one file named in full (an array's tasks each have a file,
    shown as a tail at the end; a path still holding a ``%`` pattern names none yet)."""
    return bool(follow_output and path and not array_size and "%" not in path)


class OutputFollower:
    """The new lines of one output file at each :meth:`read` (see the module's docstring)."""

    def __init__(
        self, path: str, runner: SlurmTransport | None = None, *, max_bytes: int = MAX_BYTES, max_line: int = MAX_LINE
    ) -> None:
        self.path = path
        self.runner = runner
        self.max_bytes, self.max_line = max_bytes, max_line
        self.offset: int | None = None  # None: not looked at yet
        self.lines = 0
        self._partial = b""
        self._seen = b""  # the last FINGERPRINT bytes before ``offset``, as read

    @property
    def remote(self) -> bool:
        return self._remote_runner() is not None

    def _remote_runner(self) -> SlurmTransport | None:
        """The runner that reads the file on another host (ssh); None where it is read here."""
        return self.runner if self.runner is not None and not self.runner.is_local else None

    def _chunk(self, offset: int, count: int | None = None) -> tuple[int, bytes] | None:
        """The file's size and up to ``count`` (``max_bytes``) bytes from ``offset``; None while it does not
        exist."""
        count = count or self.max_bytes
        runner = self._remote_runner()
        if runner is not None:
            code, out, err = runner.run_bytes(["sh", "-c", _REMOTE_READ, "sh", self.path, str(offset), str(count)])
            if code != 0:
                raise OSError(f"reading {self.path} on {runner.target}: {err.strip()[:300]}")
            head, _, data = out.partition(b"\n")
            if head.strip() == b"missing":
                return None
            if not head.strip().isdigit():
                raise OSError(f"reading {self.path} on {runner.target}: unexpected answer {head[:80]!r}")
            return int(head), data
        try:  # a regular file only: a FIFO planted at the path would block the read forever
            fd = open_regular(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        with os.fdopen(fd, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            fh.seek(min(offset, size))
            return size, fh.read(count)

    def read(self) -> list[str]:
        """The complete lines written since the last read (with a note where some were left out)."""
        notes: list[str] = []
        if self.offset is None:
            return self._first_look(notes)
        back = len(self._seen)
        found = self._chunk(self.offset - back, self.max_bytes + back)
        if found is None:
            return []
        size, data = found
        if size < self.offset or data[:back] != self._seen:  # rewritten: shorter, or other bytes where we were
            how = "shorter" if size < self.offset else "other bytes where the last read stopped"
            notes.append(f"[{self.path} was rewritten ({how}): following it again]")
            self._partial, self.offset, self._seen = b"", None, b""
            return self._first_look(notes)
        data = data[back:]
        self._advance(data)
        return notes + self._lines(data)

    def _advance(self, data: bytes) -> None:
        self._seen = (self._seen + data)[-FINGERPRINT:]
        self.offset = (self.offset or 0) + len(data)

    def _first_look(self, notes: list[str]) -> list[str]:
        """At most the last max_bytes of the file, from a line's start, saying how much was left out."""
        found = self._chunk(0)
        if found is None:
            self.offset = 0  # not written yet: followed from its first byte
            return notes
        size, data = found
        start = 0
        if size > self.max_bytes:
            start = size - self.max_bytes - 1  # one byte before: is the first line whole?
            found = self._chunk(start, self.max_bytes + 1)
            if found is None:
                return notes
            _size, data = found
            cut = data.find(b"\n")
            start, data = (start + cut + 1, data[cut + 1 :]) if cut >= 0 else (start + 1, data[1:])
            notes.append(f"[{start} bytes of {self.path} written earlier not shown]")
        self.offset, self._seen = start, b""
        if start:
            before = self._chunk(max(0, start - FINGERPRINT), min(start, FINGERPRINT))
            self._seen = before[1] if before is not None else b""
        self._advance(data)
        return notes + self._lines(data)

    def _lines(self, data: bytes) -> list[str]:
        buffer = self._partial + data
        parts = buffer.split(b"\n")
        self._partial = parts.pop()
        if len(self._partial) >= self.max_line:  # a line that never ends: shown in pieces
            parts.append(self._partial)
            self._partial = b""
        out = []
        for raw in parts:
            text = printable_line(raw[: self.max_line].decode(errors="replace").rstrip("\r"))
            if len(raw) > self.max_line:
                text += f" [... {len(raw) - self.max_line} more bytes of this line not shown]"
            out.append(text)
        self.lines += len(out)
        return out

    def flush(self) -> list[str]:
        """The last line, if the job ended without a newline after it."""
        rest, self._partial = self._partial, b""
        return [printable_line(rest[: self.max_line].decode(errors="replace"))] if rest else []
