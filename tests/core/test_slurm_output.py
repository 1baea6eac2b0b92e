"""Following a job's output file (core/slurm/output.py) on this host's file system: new lines at each read,
bounded, partial lines held back, a long file shown from its end, a rewritten file from its start."""

from __future__ import annotations

import os

import pytest

from airflow_provider_gpusched.core.safe_files import UnsafePathError
from airflow_provider_gpusched.core.slurm.output import OutputFollower


def test_each_read_gives_the_lines_written_since_the_last(tmp_path):
    path = tmp_path / "job 1; 'x'.out"
    follower = OutputFollower(str(path))
    assert follower.read() == []  # not written yet
    path.write_bytes(b"epoch 1 loss 0.9\nepoch 2 lo")
    assert follower.read() == ["epoch 1 loss 0.9"]  # the unfinished line waits
    with open(path, "ab") as fh:
        fh.write(b"ss 0.7\r\nepoch 3 loss 0.5\n")
    assert follower.read() == ["epoch 2 loss 0.7", "epoch 3 loss 0.5"]
    assert follower.read() == []
    with open(path, "ab") as fh:
        fh.write("done ✓".encode())
    assert follower.read() == [] and follower.flush() == ["done ✓"]
    assert follower.lines == 3


def test_a_read_is_bounded_and_catches_up_over_later_reads(tmp_path):
    path = tmp_path / "big.out"
    follower = OutputFollower(str(path), max_bytes=1000)
    assert follower.read() == []
    path.write_bytes(b"".join(b"line %04d\n" % i for i in range(500)))  # 5,000 bytes
    seen = []
    for _ in range(5):
        got = follower.read()
        assert sum(len(x) + 1 for x in got) <= 1000
        seen += got
    assert seen == [f"line {i:04d}" for i in range(500)]


def test_a_long_file_is_shown_from_its_end_at_the_first_look(tmp_path):
    path = tmp_path / "restarted.out"
    path.write_bytes(b"".join(b"line %04d\n" % i for i in range(500)))
    got = OutputFollower(str(path), max_bytes=1000).read()
    assert got[0].startswith("[") and "bytes of" in got[0] and "written earlier not shown" in got[0]
    assert got[1:] == [f"line {i:04d}" for i in range(400, 500)]  # whole lines only


def test_a_rewritten_file_is_followed_from_its_start(tmp_path):
    path = tmp_path / "requeued.out"
    path.write_bytes(b"first try, line 1\nfirst try, line 2\n")
    follower = OutputFollower(str(path))
    assert len(follower.read()) == 2
    path.write_bytes(b"again\n")
    assert follower.read() == [f"[{path} was rewritten (shorter): following it again]", "again"]


def test_a_rewrite_of_the_same_size_or_longer_is_seen_and_what_is_skipped_said(tmp_path):
    """Issue 53, item 16: a rewrite of the same size was missed (40,000 lines never shown, the note only at the
    end). The bytes before the read position are compared at each read: any rewrite is seen at the next read."""
    path = tmp_path / "requeued.out"
    path.write_bytes(b"".join(b"try 1 line %05d\n" % i for i in range(10)))
    follower = OutputFollower(str(path), max_bytes=1000)
    assert len(follower.read()) == 10
    path.write_bytes(b"".join(b"try 2 line %05d\n" % i for i in range(10)))  # the same size, other bytes
    got = follower.read()
    assert got[0] == f"[{path} was rewritten (other bytes where the last read stopped): following it again]"
    assert got[1:] == [f"try 2 line {i:05d}" for i in range(10)]
    path.write_bytes(b"".join(b"try 3 line %05d\n" % i for i in range(40_000)))  # longer, from the start
    got = follower.read()
    assert got[0].startswith(f"[{path} was rewritten") and "written earlier not shown]" in got[1], got[:2]
    assert got[-1] == "try 3 line 39999"
    with open(path, "ab") as fh:
        fh.write(b"more\n")
    assert follower.read() == ["more"]  # appending is not a rewrite


def test_control_characters_never_reach_the_task_log_raw(tmp_path):
    """Binary output put raw ESC and BEL bytes into the task log: they are written as \\xNN; colour codes stay, and
    a progress bar's carriage returns keep its last state."""
    path = tmp_path / "binary.out"
    path.write_bytes(b"bell\x07 esc\x1b]0;title\x07 nul\x00\n\x1b[32mgreen\x1b[0m\n 10%\r 50%\r100% done\n\t tab\n")
    assert OutputFollower(str(path)).read() == [
        "bell\\x07 esc\\x1b]0;title\\x07 nul\\x00",
        "\x1b[32mgreen\x1b[0m",
        "100% done",
        "\t tab",
    ]


def test_a_line_longer_than_the_limit_is_cut_saying_so(tmp_path):
    path = tmp_path / "long.out"
    path.write_bytes(b"x" * 10_000 + b"\nok\n")
    got = OutputFollower(str(path), max_line=100).read()
    assert got[0] == "x" * 100 + " [... 9900 more bytes of this line not shown]" and got[1] == "ok"


def test_a_fifo_planted_at_the_path_is_refused_not_waited_on(tmp_path):
    path = tmp_path / "trap.out"
    os.mkfifo(path)
    with pytest.raises(UnsafePathError, match="is not a regular file"):
        OutputFollower(str(path)).read()
