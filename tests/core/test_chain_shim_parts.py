"""The time-limit chain wrapper's pieces on their own (core/slurm/chain_shim.py): its command line, the segment it
counts from the records and Slurm's restart count, and why it says it stopped the work. The wrapper as a job runs it
is in tests/core/test_slurm_chain.py."""

import json
import os
import signal
import time

import pytest

from airflow_provider_gpusched.core.slurm.chain_shim import Segment, job_end_time, limit_seconds, read_argv


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--slurm-restarts=2", "{}", "--", "run", "--", "x"], ("2", "{}", ["run", "--", "x"])),
        (["{}", "--", "run"], (None, "{}", ["run"])),
        (["{}", "run", "-v"], (None, "{}", ["run", "-v"])),  # a script rendered without "--"
        (["--slurm-restarts=", "{}", "--"], ("", "{}", [])),
    ],
)
def test_the_command_line_is_the_restart_count_the_config_and_the_work(argv, expected):
    assert read_argv(argv) == expected


def test_a_command_line_without_a_config_is_refused():
    with pytest.raises(IndexError):
        read_argv(["--slurm-restarts=1"])


def _segment(tmp_path, monkeypatch, given, records=()):
    monkeypatch.setenv("SLURM_JOB_ID", "41")
    monkeypatch.delenv("SLURM_ARRAY_JOB_ID", raising=False)
    monkeypatch.delenv("SLURM_RESTART_COUNT", raising=False)
    (tmp_path / "chain-41.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    config = {
        "max_requeues": 3,
        "grace": 5,
        "signal": "USR1",
        "checkpoint": str(tmp_path / "ck-%j"),
        "records": str(tmp_path),
    }
    return Segment(json.dumps(config), given)


def test_a_segment_is_numbered_and_capped_by_slurms_count_the_records_only_lower_what_is_left(tmp_path, monkeypatch):
    ended = [{"job": "41", "segment": n, "event": "end", "outcome": "requeued"} for n in (1, 2)]
    segment = _segment(tmp_path, monkeypatch, "1", ended)
    assert (segment.number, segment.requeues, segment.on_record, segment.restarts) == (3, 2, 2, 1)
    assert segment.checkpoint == str(tmp_path / "ck-41")
    erased = _segment(tmp_path, monkeypatch, "2")
    assert (erased.number, erased.requeues) == (3, 2)


@pytest.mark.parametrize(
    ("stopped", "took", "saved", "note"),
    [
        (False, True, True, ""),
        (True, True, True, " (it took the signal and was still saving 5 s after it: stopped)"),
        (True, True, False, " (it took the signal but had not exited 5 s after it: stopped)"),
        (True, False, False, " (it ignored the signal and was stopped)"),
        (True, None, False, " (it had not exited 5 s after the signal: stopped)"),
    ],
)
def test_the_end_says_why_the_wrapper_stopped_the_work(tmp_path, monkeypatch, stopped, took, saved, note):
    segment = _segment(tmp_path, monkeypatch, None)
    segment.stopped_by_us, segment.took, segment.mark_at_signal = stopped, took, 100
    assert segment.stop_note(200 if saved else 100) == note


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("00:01:00", 60.0),
        ("1-02:03:04", 93784.0),
        ("05:30", 330.0),  # minutes:seconds
        ("7", 420.0),  # minutes
        ("UNLIMITED", None),
        ("Partition_Limit", None),
        ("", None),
        ("x-01:00:00", None),
    ],
)
def test_slurms_time_limit_is_read_in_seconds(text, seconds):
    assert limit_seconds(text) == seconds


def _scontrol(tmp_path, monkeypatch, line):
    """A stand-in scontrol on PATH that prints ``line`` (what ``scontrol -o show job`` prints for the job)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(f"#!/bin/sh\necho '{line}'\n")
    (bin_dir / "scontrol").chmod(0o700)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")


def test_the_end_time_is_the_start_plus_the_limit_not_slurms_end_time(tmp_path, monkeypatch):
    # a cancel sets EndTime to the moment of the cancel: read then, it would fire the chain's signal at once
    _scontrol(
        tmp_path,
        monkeypatch,
        "JobId=9 JobState=RUNNING TimeLimit=00:01:00 StartTime=2026-12-07T10:00:00 EndTime=2026-12-07T10:00:01",
    )
    start = time.mktime(time.strptime("2026-12-07T10:00:00", "%Y-%m-%dT%H:%M:%S"))
    assert job_end_time("9") == start + 60


@pytest.mark.parametrize("state", ["CANCELLED", "COMPLETING", "PENDING", "REQUEUED"])
def test_a_job_no_longer_running_has_no_end_time_to_signal_before(tmp_path, monkeypatch, state):
    _scontrol(tmp_path, monkeypatch, f"JobId=9 JobState={state} TimeLimit=00:01:00 StartTime=2026-12-07T10:00:00")
    assert job_end_time("9") is None


def test_the_chains_signal_after_a_sigterm_is_no_time_limit(tmp_path, monkeypatch):
    """A cancel's SIGTERM, then the chain's signal (a wrapper that signals itself, armed before the cancel): the
    segment ends as stopped, not as a time limit with no progress."""
    segment = _segment(tmp_path, monkeypatch, None)
    segment.begin()
    segment.on_signal(signal.SIGTERM, None)
    segment.on_signal(signal.SIGUSR1, None)
    assert "chain" not in segment.seen
    segment.finish(-signal.SIGTERM)
    [_start, end] = [json.loads(line) for line in (tmp_path / "chain-41.jsonl").read_text().splitlines()]
    assert end["outcome"] == "stopped" and "signalled" not in end


def test_the_chains_signal_before_a_sigterm_is_the_time_limit(tmp_path, monkeypatch):
    segment = _segment(tmp_path, monkeypatch, None)
    segment.begin()
    segment.on_signal(signal.SIGUSR1, None)
    segment.on_signal(signal.SIGTERM, None)
    assert set(segment.seen) == {"chain", "term"}
