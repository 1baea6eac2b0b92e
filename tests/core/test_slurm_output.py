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
    assert follower.read() == [f"[{path} was rewritten: following it from its start]", "again"]


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
