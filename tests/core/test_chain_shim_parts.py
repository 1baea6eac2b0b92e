"""The time-limit chain wrapper's pieces on their own (core/slurm/chain_shim.py): its command line, the segment it
counts from the records and Slurm's restart count, and why it says it stopped the work. The wrapper as a job runs it
is in tests/core/test_slurm_chain.py."""

import json

import pytest

from airflow_provider_gpusched.core.slurm.chain_shim import Segment, read_argv


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
