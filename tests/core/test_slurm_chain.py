"""The time-limit chain's settings, its wrapper's decisions and its records, without Slurm (core/slurm/chain.py and
chain_shim.py). The wrapper runs for real as ``python3 -I -S`` with a stand-in ``scontrol`` on PATH that records its
arguments; the chain on the real cluster is in tests/slurm/test_time_limit_chain.py."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from airflow_provider_gpusched.core.errors import InvalidArgumentError
from airflow_provider_gpusched.core.safe_files import BadRecordError
from airflow_provider_gpusched.core.slurm.chain import chain_failure, parse_segments, time_limit_chain
from airflow_provider_gpusched.core.slurm.chain_shim import shim_source, slurm_restarts
from airflow_provider_gpusched.core.slurm.job import SlurmJobSpec
from airflow_provider_gpusched.core.slurm.job_view import job_record, job_view, read_job_record

#: saves its step count on the chain's signal and exits 143; "hang": ignores the signal, never saves
WORK = r"""
import json, os, signal, sys, time
ck, stop = os.environ["GPUSCHED_CHAIN_CHECKPOINT"], []
mode = sys.argv[1]
signal.signal(signal.SIGUSR1, (lambda *a: stop.append(1)) if mode == "signal" else signal.SIG_IGN)
print("ready", flush=True)
for step in range(600):
    time.sleep(0.05)
    if stop:
        json.dump({"step": step}, open(ck, "w"))
        sys.exit(143)
"""


def run_wrapper(
    tmp_path, mode, *, max_requeues=3, earlier=(), send=signal.SIGUSR1, grace=2.0, then="", restarts=None, first=b""
):
    """The wrapper around WORK as a job would run it; ``send`` reaches it once the work is ready. The stand-in
    scontrol records its arguments, then runs ``then`` (shell). ``restarts``: Slurm's restart count
    (``SLURM_RESTART_COUNT``; by default the earlier segments of job 42); ``first``: bytes in the record file
    before the ``earlier`` records (left out of the segments returned)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    fake = bin_dir / "scontrol"
    fake.write_text(f'#!/bin/sh\necho "$@" >> {tmp_path / "scontrol.calls"}\n{then}\n')
    fake.chmod(0o700)
    records = tmp_path / "records"
    records.mkdir(exist_ok=True, mode=0o700)
    if first:
        (records / "chain-42.jsonl").write_bytes(first)
    for line in earlier:
        with open(records / "chain-42.jsonl", "a") as fh:
            fh.write(json.dumps(line) + "\n")
    config = {
        "checkpoint": str(tmp_path / "ck-%j.json"),
        "max_requeues": max_requeues,
        "signal": "USR1",
        "grace": grace,
        "records": str(records),
    }
    if restarts is None:
        restarts = max((r["segment"] for r in earlier if r["job"] == "42"), default=0)
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_ID": "42", "SLURM_RESTART_COUNT": str(restarts)}
    proc = subprocess.Popen(
        [sys.executable, "-I", "-S", "-c", shim_source(), json.dumps(config), "--", sys.executable, "-c", WORK, mode],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if line.strip() == "ready":
            break
    time.sleep(0.2)
    proc.send_signal(send)
    out, _ = proc.communicate(timeout=60)
    text = (records / "chain-42.jsonl").read_bytes()[len(first) :].decode()  # the wrapper's own records
    segments, problems = parse_segments(text, "chain-42.jsonl")
    assert not problems
    calls = (tmp_path / "scontrol.calls").read_text() if (tmp_path / "scontrol.calls").exists() else ""
    return proc.returncode, "".join(lines) + out, segments, calls


def test_a_segment_that_saved_a_newer_checkpoint_is_requeued_by_its_own_job_id(tmp_path):
    code, out, segments, calls = run_wrapper(tmp_path, "signal")
    assert code == 0 and calls == "requeue 42\n"
    [segment] = segments
    assert (segment.segment, segment.outcome, segment.job) == (1, "requeued", "42")
    assert segment.detail.startswith("time limit near (SIGUSR1 at ") and "requeued (1 of at most 3)" in segment.detail
    assert segment.started <= segment.signalled <= segment.ended
    assert "[gpusched chain] segment 1 of job 42 (at most 4) started" in out
    assert json.loads((tmp_path / "ck-42.json").read_text())["step"] >= 0  # %j filled in
    assert chain_failure(segments) is None


def test_the_segment_number_and_the_requeues_left_come_from_the_earlier_records(tmp_path):
    earlier = [
        {"v": 1, "job": "42", "segment": 1, "event": "start", "at": 1.0},
        {"v": 1, "job": "42", "segment": 1, "event": "end", "at": 2.0, "outcome": "requeued"},
        {"v": 1, "job": "9", "segment": 1, "event": "end", "at": 2.0, "outcome": "requeued"},  # another job's
    ]
    code, out, segments, calls = run_wrapper(tmp_path, "signal", max_requeues=1, earlier=earlier)
    assert code == 143 and calls == ""  # the work's own status; nothing requeued
    assert [s.outcome for s in segments if s.job == "42"] == ["requeued", "out-of-requeues"]
    assert "segment 2 of job 42 (at most 2) started" in out
    failure = chain_failure([s for s in segments if s.job == "42"])
    assert failure == (
        "the time-limit chain ended in segment 2: out of requeues: the time limit came after 1 requeue(s) "
        "(max_requeues=1)"
    )


def test_a_requeue_is_on_record_even_when_slurm_kills_the_wrapper_as_it_requeues(tmp_path):
    """Slurm stops the running job when it requeues it (SIGTERM, SIGKILL KillWait seconds later): on a loaded
    machine the wrapper can be killed before it returns from scontrol. The stand-in kills it at once."""
    code, out, [segment], calls = run_wrapper(tmp_path, "signal", then="kill -KILL $PPID")
    assert code == -signal.SIGKILL and calls == "requeue 42\n"
    assert (segment.segment, segment.outcome) == (1, "requeued")
    assert "segment 1 of job 42 ended at" in out and "requeued (1 of at most 3)" in out


def test_a_refused_requeue_overwrites_the_requeued_record_and_ends_the_chain(tmp_path):
    code, out, [segment], calls = run_wrapper(tmp_path, "signal", then="echo 'Invalid job id' >&2; exit 1")
    assert code == 143 and calls == "requeue 42\n"
    assert (segment.outcome, segment.detail) == ("requeue-failed", "scontrol requeue failed: Invalid job id")
    assert (
        chain_failure([segment]) == "the time-limit chain ended in segment 1: scontrol requeue failed: Invalid job id"
    )


def test_a_segment_left_without_an_end_record_still_counts_and_is_shown_as_such(tmp_path):
    """Segment 1 ended with a requeue; segment 2's wrapper was killed before any end record (a node failure, then
    Slurm's own requeue): this run is segment 3, and both of Slurm's restarts count against max_requeues."""
    earlier = [
        {"v": 1, "job": "42", "segment": 1, "event": "start", "at": 1.0, "node": "n1"},
        {"v": 1, "job": "42", "segment": 1, "event": "end", "at": 2.0, "outcome": "requeued"},
        {"v": 1, "job": "42", "segment": 2, "event": "start", "at": 3.0, "node": "n2"},
    ]
    code, out, segments, calls = run_wrapper(tmp_path, "signal", max_requeues=3, earlier=earlier)
    assert code == 0 and calls == "requeue 42\n"
    assert "segment 3 of job 42 (at most 4) started" in out and "requeued (3 of at most 3)" in out
    assert [(s.segment, s.outcome) for s in segments] == [(1, "requeued"), (2, None), (3, "requeued")]
    assert segments[1].ended is None and segments[1].describe().endswith("a later segment ran")
    assert "no end record" in segments[1].describe() and "(running)" not in segments[1].describe()


def test_a_work_that_ignores_the_signal_and_saves_nothing_is_stopped_and_ends_the_chain(tmp_path):
    t0 = time.monotonic()
    code, _out, [segment], calls = run_wrapper(tmp_path, "hang", grace=1.0)
    assert code == 1 and calls == ""
    assert segment.outcome == "no-progress"
    assert "no newer checkpoint at" in segment.detail and "it ignored the signal and was stopped" in segment.detail
    assert segment.ended - segment.signalled >= 1.0
    assert time.monotonic() - t0 < 20


def test_a_sigterm_without_the_chain_signal_is_never_followed_by_a_requeue(tmp_path):
    """scancel (or a preemption) sends SIGTERM: the job ends as its work does, and is not requeued."""
    _code, _out, [segment], calls = run_wrapper(tmp_path, "signal", send=signal.SIGTERM)
    assert calls == "" and segment.outcome == "stopped"


# -- the record file lies where the work can write it: Slurm's restart count caps the chain -------------------------

#: segments 1 and 2 of job 42, each ended with a requeue: with Slurm's restart count 2, no requeue is left of 2
TWO_REQUEUES = [
    {"v": 1, "job": "42", "segment": n, "event": e, "at": float(n), **({"outcome": "requeued"} if e == "end" else {})}
    for n in (1, 2)
    for e in ("start", "end")
]


@pytest.mark.parametrize(
    ("first", "earlier"),
    [
        (b"", ()),  # the work erased the record file
        ((b"x" * 1023 + b"\n") * 1024, TWO_REQUEUES),  # 1 MiB of junk before the records
        ((b"x" * 1023 + b"\n") * 1024, ()),  # 1 MiB of junk, nothing else
        (b"", [{**r, "segment": 1, "job": "42"} for r in TWO_REQUEUES[:1]]),  # forged: "this is segment 2"
    ],
    ids=["erased", "junk-first", "junk-only", "forged"],
)
def test_a_chain_never_requeues_once_slurms_restart_count_reaches_max_requeues(tmp_path, first, earlier):
    """SLURM_RESTART_COUNT=2, max_requeues=2: whatever the work did to the record file, the wrapper asks no
    requeue (it asked one on the old code, which counted the requeues in the file's first MiB only)."""
    code, out, segments, calls = run_wrapper(
        tmp_path, "signal", max_requeues=2, earlier=earlier, restarts=2, first=first
    )
    assert calls == "" and code == 143
    last = segments[-1]
    assert (last.segment, last.outcome) == (3, "out-of-requeues")  # numbered by Slurm's count, at least
    assert last.detail.startswith("out of requeues: the time limit came after 2 requeue(s) (max_requeues=2)")
    assert "segment 3 of job 42 (at most 3) started" in out


def test_a_preemptions_restart_counts_against_max_requeues(tmp_path):
    """One requeue on record, two of Slurm's restarts (a preemption's too): the cap is Slurm's count."""
    code, _out, segments, calls = run_wrapper(tmp_path, "signal", max_requeues=2, earlier=TWO_REQUEUES[:2], restarts=2)
    assert calls == "" and code == 143
    assert segments[-1].detail == (
        "out of requeues: the time limit came after 2 requeue(s) (max_requeues=2) (Slurm's restart count: a requeue "
        "after a preemption or a node failure counts too; 1 on the chain's record)"
    )


def test_the_first_segments_allowance_is_not_given_again_to_a_segment_whose_records_were_erased(tmp_path):
    """A work that takes the signal and saves nothing, signalled within advised_work: only a first segment is
    requeued for that. With the record file gone, Slurm's count still says this is segment 2."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(f'#!/bin/sh\necho "$@" >> {tmp_path / "calls"}\n')
    (bin_dir / "scontrol").chmod(0o700)
    config = {"checkpoint": str(tmp_path / "ck"), "max_requeues": 3, "signal": "USR1", "grace": 5,
              "records": str(tmp_path), "advised_work": 600}  # fmt: skip
    work = "import signal,sys,time; signal.signal(signal.SIGUSR1, lambda *a: sys.exit(143)); print('ready', flush=True); time.sleep(60)"
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_ID": "42", "SLURM_RESTART_COUNT": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-I", "-S", "-c", shim_source(), json.dumps(config), "--", sys.executable, "-c", work],
        env=env, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    for line in proc.stdout:
        if line.strip() == "ready":
            break
    time.sleep(0.5)  # the wrapper's first look in /proc: the work takes the signal
    proc.send_signal(signal.SIGUSR1)
    proc.communicate(timeout=60)
    [segment], _ = parse_segments((tmp_path / "chain-42.jsonl").read_text(), "x")
    assert (segment.segment, segment.outcome) == (2, "no-progress") and not (tmp_path / "calls").exists()


def run_script(tmp_path, spec, *, restarts, batch_signal=True):
    """``spec``'s job script as Slurm runs it (bash, then the containment shim, then the chain's wrapper), with
    Slurm's ``SLURM_RESTART_COUNT`` and a stand-in scontrol that records its arguments; SIGUSR1 reaches the batch
    shell (the containment shim, which passes it on) once the work is ready. ``batch_signal=False``: the script the
    REST transport submits."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(f'#!/bin/sh\necho "$@" >> {tmp_path / "scontrol.calls"}\n')
    (bin_dir / "scontrol").chmod(0o700)
    (bin_dir / "python3").symlink_to(os.path.realpath(sys.executable))
    script = tmp_path / "job.sh"
    script.write_text(spec.render_script(batch_signal=batch_signal))
    script.chmod(0o700)
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_ID": "42", "SLURM_RESTART_COUNT": str(restarts)}
    proc = subprocess.Popen([str(script)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if line.strip() == "ready":
            break
    time.sleep(0.2)
    proc.send_signal(signal.SIGUSR1)
    out, _ = proc.communicate(timeout=60)
    segments, problems = parse_segments((tmp_path / "records" / "chain-42.jsonl").read_text(), "chain-42.jsonl")
    assert not problems
    calls = (tmp_path / "scontrol.calls").read_text() if (tmp_path / "scontrol.calls").exists() else ""
    return proc.returncode, "".join(lines) + out, segments, calls


def chained_spec(tmp_path, **fields):
    (tmp_path / "records").mkdir(mode=0o700)  # empty: the work erased the chain's records
    return SlurmJobSpec(
        command=["python3", "-c", WORK, "signal"],
        chain_records=str(tmp_path / "records"),
        time_limit_chain={"checkpoint": str(tmp_path / "ck-%j.json"), "max_requeues": 2, "grace": 2},
        **fields,
    )


@pytest.mark.parametrize("batch_signal", [True, False], ids=["sbatch", "slurmrestd"])
@pytest.mark.parametrize(
    ("fields", "seen"),
    [
        ({"environment": {"SLURM_RESTART_COUNT": "0"}}, "'0'"),
        ({"setup": ["unset SLURM_RESTART_COUNT"]}, "unset"),
        # and the variable that keeps Slurm's count is read-only to the job's own lines
        ({"setup": ["unset SLURM_RESTART_COUNT", "gpusched_restarts=0", "unset gpusched_restarts"]}, "unset"),
    ],
    ids=["environment", "setup-unset", "setup-overwrite"],
)
def test_the_jobs_environment_and_setup_cannot_lower_slurms_restart_count_for_the_chain(
    tmp_path, fields, seen, batch_signal
):
    """Slurm restarted the job twice, max_requeues=2, the record file is erased; the job's environment sets
    SLURM_RESTART_COUNT=0 (or its setup unsets it) before the wrapper starts. The old script passed that on to the
    wrapper, which then counted 0 restarts and asked a third requeue; the script now reads Slurm's count before the
    job's own lines and hands it to the wrapper as an argument."""
    code, out, segments, calls = run_script(
        tmp_path, chained_spec(tmp_path, **fields), restarts=2, batch_signal=batch_signal
    )
    assert "requeue" not in calls and code == 143, out
    [segment] = segments
    assert (segment.segment, segment.outcome) == (3, "out-of-requeues")
    assert segment.detail.startswith("out of requeues: the time limit came after 2 requeue(s) (max_requeues=2)")
    assert f"SLURM_RESTART_COUNT is {seen} here (the job's environment or setup lines changed it" in out
    assert "the chain counts Slurm's 2 restart(s)" in out


def test_the_job_script_still_requeues_while_slurms_restart_count_is_below_max_requeues(tmp_path):
    """The same script, Slurm's count 1: one requeue is left, and asked for (the harness above sees requeues)."""
    code, out, [segment], calls = run_script(tmp_path, chained_spec(tmp_path), restarts=1)
    assert calls == "requeue 42\n" and code == 0, out
    assert (segment.segment, segment.outcome) == (2, "requeued") and "requeued (2 of at most 2)" in segment.detail
    assert "SLURM_RESTART_COUNT is" not in out  # nothing changed it: nothing said


def test_the_wrapper_prefers_the_count_the_script_read_and_falls_back_to_its_environment(monkeypatch):
    monkeypatch.setenv("SLURM_RESTART_COUNT", "5")
    assert (slurm_restarts("2"), slurm_restarts(None), slurm_restarts(""), slurm_restarts("x1")) == (2, 5, 5, 5)
    monkeypatch.delenv("SLURM_RESTART_COUNT")
    assert (slurm_restarts(None), slurm_restarts("0"), slurm_restarts("1" * 10)) == (0, 0, 0)


def test_setting_slurm_restart_count_beside_a_chain_is_said_at_submission(tmp_path):
    def advice(**fields):
        return SlurmJobSpec(
            command="train", chain_records=str(tmp_path), time_limit_chain={"checkpoint": "/c"}, **fields
        ).chain_advice()

    said = "the job's environment or setup sets or unsets SLURM_RESTART_COUNT: the command sees that value"
    assert said in (advice(environment={"SLURM_RESTART_COUNT": "0", "SLURM_CPU_BIND": "none"}) or "")
    assert said in (advice(setup=["module load x", "unset SLURM_RESTART_COUNT"]) or "")
    assert said in (advice(setup=["export SLURM_RESTART_COUNT=0"]) or "")
    assert advice(environment={"SLURM_CPU_BIND": "none"}, setup=['echo "restart $SLURM_RESTART_COUNT"']) is None
    assert SlurmJobSpec(command="t", environment={"SLURM_RESTART_COUNT": "0"}).chain_advice() is None  # no chain


@pytest.mark.parametrize(
    "line",
    [
        b"[" * 100000,  # nested too deep: RecursionError in the old wrapper, which then never ran the work
        b'{"v": 1, "job": "42", "segment": 1' + b"0" * 5000 + b', "event": "end", "outcome": "requeued"}',
        b'{"v": 1, "job": "42", "segment": 1' + b"0" * 4000 + b', "event": "end", "outcome": "requeued"}',
        b'{"v": 1, "job": "42", "segment": true, "event": "end", "outcome": "requeued"}',
        b"\xff\xfe" * 100,
    ],
    ids=["deep", "5000-digits", "4000-digits", "bool", "binary"],
)
def test_a_junk_record_line_is_skipped_by_the_wrapper(tmp_path, line):
    code, _out, segments, calls = run_wrapper(tmp_path, "signal", max_requeues=2, first=line + b"\n", restarts=0)
    assert code == 0 and calls == "requeue 42\n"
    assert [(s.segment, s.outcome) for s in segments] == [(1, "requeued")]


@pytest.mark.parametrize("kind", ["fifo", "folder"])
def test_a_record_file_the_work_replaced_neither_stops_nor_hangs_the_wrapper(tmp_path, kind):
    """The old wrapper raised at its first record (a folder) or blocked opening a FIFO with no reader."""
    records = tmp_path / "rec"
    records.mkdir()
    if kind == "fifo":
        os.mkfifo(records / "chain-7.jsonl")
    else:
        (records / "chain-7.jsonl").mkdir()
    config = {"checkpoint": str(tmp_path / "ck"), "max_requeues": 1, "signal": "USR1", "grace": 5,
              "records": str(records)}  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", shim_source(), json.dumps(config), "--", "sh", "-c", "exit 3"],
        env={"PATH": os.environ["PATH"], "SLURM_JOB_ID": "7"},
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert done.returncode == 3 and not done.stderr
    assert f"cannot write the chain's record file {records / 'chain-7.jsonl'}" in done.stdout
    assert "ended at" in done.stdout and "the work exited with 3" in done.stdout


# -- the records read back (task log, job view) ----------------------------------------------------------------------

GOOD = json.dumps({"v": 1, "job": "5", "segment": 1, "event": "start", "at": 10.0, "node": "n1"})


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("[" * 50000, "chain-5.jsonl: line 2: JSON nested too deep"),
        ('{"a":' * 20000 + "1" + "}" * 20000, "chain-5.jsonl: line 2: longer than 65536 characters"),
        (GOOD.replace('"segment": 1', '"segment": ' + "9" * 5000), "chain-5.jsonl: line 2: not valid JSON (Exceeds"),
        (GOOD.replace('"segment": 1', '"segment": ' + "9" * 4000), "chain-5.jsonl: line 2: key 'segment': expected a"),
        (GOOD.replace('"at": 10.0', '"at": 1e308'), "chain-5.jsonl: line 2: key 'at': expected a time"),
        (GOOD.replace('"at": 10.0', '"at": Infinity'), "chain-5.jsonl: line 2: key 'at': expected a time"),
        (GOOD.replace('"at": 10.0', '"at": NaN'), "chain-5.jsonl: line 2: key 'at': expected a time"),
        (GOOD.replace('"at": 10.0', '"at": 1, "exit": ' + "9" * 400), "chain-5.jsonl: line 2: key 'exit': expected"),
        (GOOD.replace('"n1"', "[" * 900 + "]" * 900), "chain-5.jsonl: line 2: key 'node': expected a node name"),
    ],
    ids=["deep", "deep-objects", "5000-digits", "4000-digits", "1e308", "inf", "nan", "exit", "nested-value"],
)
def test_a_bad_record_line_is_named_with_its_file_never_raised(line, expected):
    """The old reader raised RecursionError (deep nesting), and the task log's describe() OverflowError (a time
    of 1e308, inf); a 4000-digit segment number was taken."""
    text = "\n".join([GOOD.replace('"segment": 1', '"segment": 2'), line, GOOD])
    segments, [problem] = parse_segments(text, "chain-5.jsonl")
    assert problem.startswith(expected) and len(problem) < 1000
    assert [s.segment for s in segments] == [1, 2] and all(s.describe() for s in segments)


def test_a_record_file_of_junk_is_read_in_bounded_time_and_words():
    """1 MiB of bad lines: the last MAX_LINES are read, 20 named, the rest counted (the old reader named each,
    500,000 warnings in the task log). Too many segments: the newest MAX_SEGMENTS (what a job's record holds)."""
    from airflow_provider_gpusched.core.slurm.chain import MAX_LINES, MAX_PROBLEMS, MAX_SEGMENTS

    segments, problems = parse_segments("x\n" * 500000 + GOOD, "c")
    assert [s.node for s in segments] == ["n1"]
    assert problems[0] == f"c: 500001 lines; only the last {MAX_LINES} are read"
    assert (
        len(problems) == MAX_PROBLEMS + 2
        and problems[-1] == f"c: {MAX_LINES - 1 - MAX_PROBLEMS} more line(s) that are not records"
    )
    many = "\n".join(GOOD.replace('"segment": 1', f'"segment": {n}') for n in range(1, 3001))
    segments, problems = parse_segments(many, "c")
    assert [s.segment for s in segments] == list(range(2001, 3001)) and len(segments) == MAX_SEGMENTS
    assert problems == [f"c: 3000 segments on record; the newest {MAX_SEGMENTS} are shown"]


@pytest.mark.parametrize("remote", [False, True], ids=["here", "login-host"])
def test_the_operator_reads_the_newest_records_after_a_mib_of_junk(tmp_path, remote):
    """The old reader read the file's first MiB: junk written first hid every record."""
    from airflow_provider_gpusched.core.slurm import SlurmClient, SlurmTransport
    from airflow_provider_gpusched.core.slurm.chain import read_chain

    class LoginHost(SlurmTransport):  # `tail` as it runs over ssh, here
        target = "login"

    path = tmp_path / "chain-5.jsonl"
    path.write_text(("y" * 1023 + "\n") * 1100 + GOOD + "\n")
    client = SlurmClient(LoginHost() if remote else SlurmTransport())
    assert client.runner.is_local is not remote
    segments, problems = read_chain(client, str(tmp_path), ["5"])
    assert [(s.segment, s.node) for s in segments] == [(1, "n1")]
    assert problems[0] == f"{path}: line 1: not valid JSON (Expecting value: line 1 column 1 (char 0))"


def test_the_wrapper_needs_only_the_standard_library_and_passes_the_exit_status_on(tmp_path):
    records = tmp_path / "rec"
    records.mkdir()
    config = {
        "checkpoint": str(tmp_path / "ck"),
        "max_requeues": 1,
        "signal": "USR1",
        "grace": 5,
        "records": str(records),
    }
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", shim_source(), json.dumps(config), "--", "sh", "-c", "exit 3"],
        env={"PATH": os.environ["PATH"], "SLURM_JOB_ID": "7"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 3, done.stderr
    assert "segment 1 of job 7 (at most 2) started" in done.stdout
    segments, _ = parse_segments((records / "chain-7.jsonl").read_text(), "x")
    assert [(s.outcome, s.detail) for s in segments] == [("failed", "the work exited with 3")]
    assert oct((records / "chain-7.jsonl").stat().st_mode & 0o777) == "0o600"


@pytest.mark.parametrize(
    ("settings", "argument", "expected"),
    [
        ({"signal_delay": 20}, "time_limit_chain.checkpoint", "the file or folder the job checkpoints to"),
        ({"checkpoint": "/c", "signal_delay": 90}, "time_limit_chain.signal_delay", "fewer seconds than the job's"),
        ({"checkpoint": "/c", "signal": "KILL"}, "time_limit_chain.signal", "'USR1' or 'USR2'"),
        ({"checkpoint": "/c", "max_requeue": 3}, "time_limit_chain.max_requeue", "one of checkpoint, max_requeues"),
        ({"checkpoint": "/c", "grace": 50, "signal_delay": 30}, "time_limit_chain.grace", "fewer seconds than"),
        ("yes", "time_limit_chain", "True, or a mapping of"),
    ],
)
def test_bad_chain_settings_are_refused_naming_the_key(tmp_path, settings, argument, expected):
    with pytest.raises(InvalidArgumentError) as info:
        SlurmJobSpec(command=["train"], time_limit=1, chain_records=str(tmp_path), time_limit_chain=settings)
    assert str(info.value).startswith(f"{argument}: expected {expected}")


def test_a_chain_needs_a_command_and_requeues(tmp_path):
    with pytest.raises(InvalidArgumentError, match="^time_limit_chain: expected a command"):
        SlurmJobSpec(script="true", chain_records=str(tmp_path), time_limit_chain={"checkpoint": "/c"})
    with pytest.raises(InvalidArgumentError, match="^requeue: expected True or None"):
        SlurmJobSpec(command="x", requeue=False, chain_records=str(tmp_path), time_limit_chain={"checkpoint": "/c"})
    with pytest.raises(InvalidArgumentError, match="^chain_records"):
        SlurmJobSpec(command="x", time_limit_chain={"checkpoint": "/c"})


def test_a_chained_job_is_signalled_requeueable_and_runs_its_command_under_the_wrapper(tmp_path):
    spec = SlurmJobSpec(
        command=["python3", "train.py", "--name", "a b; rm -rf /"],
        time_limit="00:30:00",
        chain_records=str(tmp_path),
        time_limit_chain={"checkpoint": "/ck", "signal": "USR2", "signal_delay": 120},
    )
    assert spec.sbatch_argv()[-2:] == ["--signal=B:USR2@120", "--requeue"]
    last = spec.render_script().splitlines()[-1]
    assert last.startswith('exec python3 -I -S -c "$gpusched_chain" ')
    assert last.endswith("-- python3 train.py --name 'a b; rm -rf /'")  # one argument, never a shell line
    assert time_limit_chain(True).max_requeues == 3 and time_limit_chain(None) is None


def test_a_record_line_that_is_not_a_segment_is_named_never_dropped_silently():
    text = "\n".join(
        [
            json.dumps({"v": 1, "job": "5", "segment": 1, "event": "start", "at": 10.0, "node": "n1"}),
            "not json",
            json.dumps({"v": 1, "job": "5; rm", "segment": 1, "event": "end", "at": 11.0}),
            json.dumps({"v": 1, "job": "5", "segment": 1, "event": "end", "at": 12.0, "outcome": "completed"}),
        ]
    )
    segments, problems = parse_segments(text, "chain-5.jsonl")
    assert [(s.segment, s.node, s.started, s.ended, s.outcome) for s in segments] == [
        (1, "n1", 10.0, 12.0, "completed")
    ]
    assert problems[0].startswith("chain-5.jsonl: line 2: not valid JSON")
    assert problems[1].startswith("chain-5.jsonl: line 3: key 'job': expected a Slurm job id")


def test_the_job_view_shows_the_segments_and_refuses_forged_ones():
    segment = {"job": "5", "segment": 1, "node": "n1", "started": 1.0, "ended": 2.0, "outcome": "requeued",
               "detail": "x", "signalled": 1.5}  # fmt: skip
    record = job_record("5", output_path="/o", runner={}, chain_records="/r", segments=[segment])
    assert job_view(read_job_record(record, "xcom"))["segments"] == [segment]
    with pytest.raises(BadRecordError, match="key 'segments': item 0: key 'outcome'"):
        read_job_record({**record, "segments": [{**segment, "outcome": "<script>"}]}, "xcom")


def test_a_chains_requeues_are_logged_as_its_segments_not_as_preemptions():
    from airflow_provider_gpusched.core.slurm.states import JobPhase, JobStatus, JobTracker

    def status(restarts):
        return JobStatus(job_id="7", phase=JobPhase.RUNNING, state="RUNNING", restarts=restarts)

    chained, plain = JobTracker("7", chain=True), JobTracker("7")
    for tracker in (chained, plain):
        tracker.update(status(0))
    [line] = [x for x in chained.update(status(1)) if "requeued" in x]
    assert line.startswith("job 7 was requeued for segment 2 of its time-limit chain (restart 1, seen ")
    assert any(x.startswith("job 7 was preempted/requeued (restart 1") for x in plain.update(status(1)))


def _loop_after_a_slow_start(folder):
    """A training loop on the examples' checkpoint module that takes a second to start (an import): the chain's
    signal comes in that second."""
    from airflow_provider_gpusched.examples.checkpoints import Checkpoints, stop_requested, stop_signal

    open(os.path.join(folder, "started"), "w").close()
    time.sleep(1.0)
    with Checkpoints(folder).stop_on_sigterm():
        for step in range(200):
            if stop_requested():
                return {"stopped_at": step, "by": stop_signal()}
            time.sleep(0.05)
    return {"stopped_at": None, "by": None}


def test_a_chain_signal_that_comes_before_the_loop_takes_it_stops_the_loop_at_its_first_step(tmp_path):
    """Without this, the signal's default action would end the process with nothing saved: no progress."""
    from airflow_provider_gpusched.core import pyfunc

    folder = tmp_path / "work"
    folder.mkdir()
    pyfunc.write_call(str(tmp_path / "call"), _loop_after_a_slow_start, (str(folder),))
    proc = subprocess.Popen(
        [sys.executable, "-m", "airflow_provider_gpusched.core.pyfunc", str(tmp_path / "call")],
        env={**os.environ, "GPUSCHED_CHAIN_SIGNAL": "USR1", "GPUSCHED_CHAIN_SEGMENT": "1"},
    )
    deadline = time.monotonic() + 30
    while not (folder / "started").exists():
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.02)
    proc.send_signal(signal.SIGUSR1)
    assert proc.wait(timeout=30) == 0
    outcome = pyfunc.read_outcome(str(tmp_path / "call"))
    assert outcome.value == {"stopped_at": 0, "by": "SIGUSR1"}
