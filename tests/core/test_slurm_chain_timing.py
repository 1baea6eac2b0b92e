"""Issue 76: time-limit chains judged fairly when the time limit is short, requeues counted right, and a job too big
for any node told what the nodes have.

The wrapper (core/slurm/chain_shim.py) runs for real as ``python3 -I -S``, as in tests/core/test_slurm_chain.py, with
a stand-in ``scontrol`` on PATH that records its arguments and answers ``show job`` with an end time ``END`` seconds
from when it is asked."""

import json
import os
import re
import signal
import subprocess
import sys

import pytest

from airflow_provider_gpusched.core.errors import InvalidArgumentError
from airflow_provider_gpusched.core.slurm import SlurmClient, SlurmJobSpec
from airflow_provider_gpusched.core.slurm.chain import parse_segments
from airflow_provider_gpusched.core.slurm.chain_shim import shim_source
from airflow_provider_gpusched.core.slurm.rest import SlurmRestClient, SlurmRestError, SlurmRestTransport
from airflow_provider_gpusched.core.slurm.states import JobPhase, JobStatus, JobTracker
from airflow_provider_gpusched.core.slurm.transport import SlurmCommandError

from .slurm_replay import ReplayRunner

#: a work's answer to the chain's signal (argv[1]):
#: "saving"  takes it and rewrites its checkpoint every 0.2 s, never exiting (a save longer than the grace);
#: "deaf"    takes it and does nothing, never saving;
#: "slow"    takes it and saves 2 s later, then exits 143;
#: "quit"    takes it and exits 143 a second later without saving (it had nothing to save yet);
#: "hang"    ignores it (SIG_IGN) and never saves
WORK = r"""
import json, os, signal, sys, time
ck, mode, got = os.environ["GPUSCHED_CHAIN_CHECKPOINT"], sys.argv[1], []
signal.signal(signal.SIGUSR1, signal.SIG_IGN if mode == "hang" else (lambda *a: got.append(time.monotonic())))
print("ready", flush=True)

def save(n):
    with open(ck + ".tmp", "w") as fh:
        json.dump({"n": n}, fh)
    os.replace(ck + ".tmp", ck)

n = 0
while True:
    time.sleep(0.05)
    if not got or mode in ("hang", "deaf"):
        continue
    if mode == "saving":
        n += 1
        save(n)
        time.sleep(0.2)
    elif mode == "slow" and time.monotonic() - got[0] >= 2:
        save(1)
        sys.exit(143)
    elif mode == "quit" and time.monotonic() - got[0] >= 1:
        sys.exit(143)
"""


def run_wrapper(tmp_path, mode, *, grace=1.0, extra=None, earlier=(), end_in=None):
    """The wrapper around WORK as a job would run it, sent SIGUSR1 once the work is ready; ``extra``: more of the
    wrapper's config (as TimeLimitChain.wrap writes it); ``end_in``: seconds to the job's end time that the stand-in
    ``scontrol show job`` gives."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    calls = tmp_path / "scontrol.calls"
    end = (
        # the end time is StartTime + TimeLimit of a RUNNING job (EndTime is what a cancel rewrites)
        f'if [ "$1" = "-o" ]; then echo "JobId=42 JobState=RUNNING TimeLimit=01:00:00 '
        f"StartTime=$(date -d @$(( $(date +%s) + {end_in} - 3600 )) +%Y-%m-%dT%H:%M:%S) "
        f'EndTime=2000-01-01T00:00:00 Partition=batch"; exit 0; fi\n'
        if end_in is not None
        else ""
    )
    fake = bin_dir / "scontrol"
    fake.write_text(f'#!/bin/sh\necho "$@" >> {calls}\n{end}')
    fake.chmod(0o700)
    records = tmp_path / "records"
    records.mkdir(exist_ok=True, mode=0o700)
    for line in earlier:
        with open(records / "chain-42.jsonl", "a") as fh:
            fh.write(json.dumps(line) + "\n")
    config = {
        "checkpoint": str(tmp_path / "ck.json"),
        "max_requeues": 3,
        "signal": "USR1",
        "grace": grace,
        "records": str(records),
        **(extra or {}),
    }
    restarts = max((r["segment"] for r in earlier if r["job"] == "42"), default=0)  # Slurm's: one a segment before
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
    proc.send_signal(signal.SIGUSR1)
    out, _ = proc.communicate(timeout=60)
    segments, problems = parse_segments((records / "chain-42.jsonl").read_text(), "chain-42.jsonl")
    assert not problems
    return proc.returncode, "".join(lines) + out, segments, calls.read_text() if calls.exists() else ""


# -- "did not exit within the grace" told apart from "ignored the signal" ------------------------------------------


def test_a_work_still_saving_when_the_grace_ends_is_not_said_to_have_ignored_the_signal(tmp_path):
    code, out, [segment], calls = run_wrapper(tmp_path, "saving")
    assert code == 0 and calls == "requeue 42\n"  # its checkpoint is newer: the chain goes on
    assert segment.outcome == "requeued"
    assert "(it took the signal and was still saving 1 s after it: stopped)" in segment.detail
    assert "ignored" not in segment.detail
    assert "the work took SIGUSR1 but had not exited 1 s after it; stopping it" in out


def test_a_work_that_took_the_signal_but_never_exits_is_said_so_and_ends_the_chain(tmp_path):
    code, out, [segment], calls = run_wrapper(tmp_path, "deaf")
    assert code == 1 and calls == ""
    assert segment.outcome == "no-progress"
    assert segment.detail.endswith("(it took the signal but had not exited 1 s after it: stopped)")


def test_a_work_that_ignores_the_signal_is_still_said_to_have_ignored_it(tmp_path):
    _code, out, [segment], _calls = run_wrapper(tmp_path, "hang")
    assert segment.outcome == "no-progress" and segment.detail.endswith("(it ignored the signal and was stopped)")
    assert "the work ignored SIGUSR1 and had not exited 1 s after it; stopping it" in out


# -- the default grace runs on to the job's end time ---------------------------------------------------------------


def test_the_default_grace_lasts_until_shortly_before_the_jobs_end_time(tmp_path):
    """slurmctld's signal may come 30 s earlier than signal_delay: a fixed grace (signal_delay - 5) stopped a work
    that was still saving. With the end time 16 s away, the work has about 6 s (16 less the 10 s margin); its save
    2 s after the signal is kept, where a 1-second grace stopped it with nothing saved."""
    code, out, [segment], calls = run_wrapper(tmp_path, "slow", extra={"grace_to_end": True}, end_in=16)
    assert calls == "-o show job 42\nrequeue 42\n"
    assert code == 0 and segment.outcome == "requeued", segment.detail
    assert segment.ended - segment.signalled >= 2
    assert re.search(r"SIGUSR1 came \d+ s after the segment started; the work has ", out)
    said = float(out.split("the work has ")[1].split(" s to save")[0])
    assert 5 <= said <= 10


def test_a_grace_given_as_a_setting_is_kept(tmp_path):
    code, _out, [segment], calls = run_wrapper(tmp_path, "slow", end_in=16)
    assert calls == "" and code == 1  # no look at the end time; stopped after its 1 s, nothing saved
    assert segment.outcome == "no-progress"


# -- a segment signalled before its work could checkpoint ----------------------------------------------------------


def test_a_first_segment_signalled_before_its_work_could_save_is_requeued_once_not_taken_for_a_hang(tmp_path):
    code, out, [segment], calls = run_wrapper(tmp_path, "quit", extra={"advised_work": 60})
    assert code == 0 and calls == "requeue 42\n"
    assert segment.outcome == "requeued"
    assert re.match(r"no checkpoint yet: SIGUSR1 came \d+ s after the segment started, before the work", segment.detail)
    assert "(it took the signal); requeued to try once more (the first segment's allowance) (1 of at most 3)" in (
        segment.detail
    )


def test_a_second_segment_without_a_checkpoint_ends_the_chain_saying_the_signal_came_too_soon(tmp_path):
    earlier = [
        {"v": 1, "job": "42", "segment": 1, "event": "start", "at": 1.0},
        {"v": 1, "job": "42", "segment": 1, "event": "end", "at": 2.0, "outcome": "requeued"},
    ]
    code, _out, segments, calls = run_wrapper(tmp_path, "quit", extra={"advised_work": 60}, earlier=earlier)
    assert code == 143 and calls == ""
    last = segments[-1]
    assert (last.segment, last.outcome) == (2, "no-progress")
    assert re.search(
        r"; SIGUSR1 came \d+ s after the segment started, sooner than a segment needs \(60 s\) to start and "
        r"checkpoint: give the job a longer time_limit",
        last.detail,
    )


def test_a_first_segment_whose_work_ignores_the_signal_gets_no_allowance(tmp_path):
    code, _out, [segment], calls = run_wrapper(tmp_path, "hang", extra={"advised_work": 60})
    assert code == 1 and calls == ""
    assert segment.outcome == "no-progress" and "sooner than a segment needs (60 s)" in segment.detail


# -- what limit and signal delay a chain needs, said before it runs ------------------------------------------------


def chained(time_limit, signal_delay):
    return SlurmJobSpec(
        command=["train"],
        time_limit=time_limit,
        chain_records="/r",
        time_limit_chain={"checkpoint": "/c", "signal_delay": signal_delay},
    )


def test_a_signal_delay_that_leaves_a_segment_no_time_before_slurms_early_signal_is_refused():
    with pytest.raises(InvalidArgumentError) as refused:
        chained(1, 30)  # the signal may come 30 + 30 s before the end of a 60 s job: at its start
    assert str(refused.value).startswith(
        "time_limit_chain.signal_delay: expected fewer seconds than the job's time limit (60 s) less the 30 s by "
        "which Slurm's signal may come early: at most 29 s, or a longer time_limit"
    )
    chained(1, 29)  # a second is left: allowed, and said (below)


def test_a_time_limit_that_leaves_less_than_a_minute_before_the_signal_is_said_at_submission():
    advice = chained(1, 10).chain_advice()
    assert advice is not None and "Slurm's signal may come as soon as 20 s after a segment starts" in advice
    assert "a time limit of 2 minutes or more leaves it at least 60 s" in advice
    assert "as soon as 30 s after" in (chained(2, 60).chain_advice() or "")
    assert "a time limit of 3 minutes or more" in (chained(2, 60).chain_advice() or "")
    assert chained(2, 10).chain_advice() is None  # 80 s
    assert chained(3, 90).chain_advice() is None  # the default delay: 60 s
    assert chained("24:00:00", 90).chain_advice() is None
    assert SlurmJobSpec(command=["train"], time_limit=1).chain_advice() is None


def test_the_example_dag_leaves_its_segments_a_minute_or_more():
    """dags/digits_slurm_chain.py is what users copy: its limit must not draw the advice above."""
    import ast
    from pathlib import Path

    tree = ast.parse((Path(__file__).resolve().parents[2] / "dags" / "digits_slurm_chain.py").read_text())
    [call] = [
        n for n in ast.walk(tree) if isinstance(n, ast.Call) and any(k.arg == "time_limit_chain" for k in n.keywords)
    ]
    kw = {k.arg: ast.literal_eval(k.value) for k in call.keywords if k.arg in ("time_limit", "time_limit_chain")}
    spec = SlurmJobSpec(
        command=["x"],
        time_limit=kw["time_limit"],
        chain_records="/r",
        time_limit_chain={**kw["time_limit_chain"], "checkpoint": "/c"},
    )
    assert spec.chain_advice() is None


# -- requeues counted right, and no "still waiting" kept after the job ended ---------------------------------------


def status(state, restarts):
    phase = JobPhase.SUCCEEDED if state == "COMPLETED" else JobPhase.PENDING if state == "PENDING" else JobPhase.RUNNING
    return JobStatus(job_id="7", phase=phase, state=state, restarts=restarts)


@pytest.mark.parametrize("chain", [True, False])
def test_requeues_before_the_first_poll_are_counted(chain):
    """The task log said 'requeued 3 time(s)' after 4 requeues: the tracker counted from the first status it saw
    (restart 1: the first requeue came before the trigger's first poll)."""
    tracker = JobTracker("7", chain=chain)
    for state, restarts in [("RUNNING", 1), ("PENDING", 2), ("RUNNING", 2), ("PENDING", 3), ("RUNNING", 4)]:
        tracker.update(status(state, restarts))
    tracker.update(status("COMPLETED", 4))
    assert tracker.done and tracker.preemptions == 4
    assert len(tracker.preemption_events) == 4
    # the events stay on the Slurm tab after the job ended: none says it is still being waited for
    assert not [e for e in tracker.events if "still waiting" in e]


# -- a job bigger than any node: what the nodes have ---------------------------------------------------------------

REFUSED = "sbatch: error: Batch job submission failed: Requested node configuration is not available\n"
SINFO = "n1|batch*|8|16000|gpu:4(S:0)\nn1|idle|8|16000|gpu:4(S:0)\nn2|batch*|8|16000|gpu:4\nn2|idle|8|16000|gpu:4\n"
LARGEST = "partition 'batch' has 2 node(s); the largest has 4 GPU(s), 8 CPUs and 16000 MB of memory (n1, n2)"


def test_a_job_asking_for_more_gpus_than_any_node_has_is_told_the_largest_node_through_the_cli():
    runner = ReplayRunner(answers={"sbatch": [{"returncode": 1, "stderr": REFUSED}], "sinfo": [SINFO]})
    with pytest.raises(SlurmCommandError) as refused:
        SlurmClient(runner).submit(SlurmJobSpec(command=["train"], gpus=16))
    text = str(refused.value)
    assert (
        "Requested node configuration is not available — " + LARGEST + "; this job asks for 16 GPUs on each node"
        in text
    )
    assert text.index("Requested node configuration") < text.index(LARGEST) < text.index("(sbatch options:")
    assert runner.ran("sinfo") == [["sinfo", "-h", "-N", "-o", "%N|%P|%c|%m|%G"]]


def test_the_partition_the_job_names_is_the_one_described_and_cpus_and_memory_beyond_it_are_named():
    sinfo = SINFO + "big|fat|64|512000|gpu:8\n"
    runner = ReplayRunner(answers={"sbatch": [{"returncode": 1, "stderr": REFUSED}], "sinfo": [sinfo]})
    with pytest.raises(SlurmCommandError) as refused:
        SlurmClient(runner).submit(SlurmJobSpec(command=["t"], partition="fat", cpus_per_task=100, mem="1T"))
    assert (
        "partition 'fat' has 1 node(s); the largest has 8 GPU(s), 64 CPUs and 512000 MB of memory (big); this job "
        "asks for 100 CPUs on each node and 1048576 MB of memory on each node" in str(refused.value)
    )


def test_other_refusals_and_unreadable_nodes_leave_slurms_words_as_they_are():
    other = "sbatch: error: Batch job submission failed: Invalid partition name specified\n"
    runner = ReplayRunner(answers={"sbatch": [{"returncode": 1, "stderr": other}], "sinfo": [SINFO]})
    with pytest.raises(SlurmCommandError, match="Invalid partition name specified \\(sbatch options"):
        SlurmClient(runner).submit(SlurmJobSpec(command=["t"], gpus=16))
    assert runner.ran("sinfo") == []
    down = ReplayRunner(answers={"sbatch": [{"returncode": 1, "stderr": REFUSED}]})  # sinfo answers nothing
    with pytest.raises(SlurmCommandError, match="not available \\(sbatch options"):
        SlurmClient(down).submit(SlurmJobSpec(command=["t"], gpus=16))


class RestAnswers(SlurmRestTransport):
    """slurmrestd as its answers say: the submission refused, the nodes and partitions as the test cluster's."""

    def request(self, method, path, **kw):
        if path == "job/submit":
            raise SlurmRestError(
                f"POST {self.url}/slurm/v0.0.38/job/submit",
                500,
                "Slurm answered with errors (a job): Requested node configuration is not available",
            )
        if path == "nodes":
            return {
                "nodes": [
                    {"name": n, "partitions": ["batch", "idle"], "cpus": 8, "real_memory": 16000, "gres": "gpu:4"}
                    for n in ("n1", "n2")
                ]
            }
        if path == "partitions":
            return {"partitions": [{"name": "batch", "flags": ["default"]}, {"name": "idle", "flags": []}]}
        raise AssertionError(path)


def test_a_job_asking_for_more_gpus_than_any_node_has_is_told_the_largest_node_through_slurmrestd():
    rest = RestAnswers(url="http://login1:6820", user="ada", token="t")
    with pytest.raises(SlurmRestError) as refused:
        SlurmRestClient(rest).submit(SlurmJobSpec(command=["train"], gpus=16))
    assert (
        "Requested node configuration is not available — " + LARGEST + "; this job asks for 16 GPUs on each node"
    ) in str(refused.value)


def test_the_rest_nodes_counts_of_later_api_versions_are_read_too():
    class Later(RestAnswers):
        def request(self, method, path, **kw):
            if path == "nodes":
                return {
                    "nodes": [
                        {
                            "name": "n1",
                            "partitions": ["batch"],
                            "cpus": {"set": True, "number": 8},
                            "real_memory": {"set": True, "number": 16000},
                            "gres": "gpu:4",
                        }
                    ]
                }
            return super().request(method, path, **kw)

    nodes, default = SlurmRestClient(Later(url="http://login1:6820", user="ada", token="t")).node_sizes()
    assert default == "batch" and [(n.cpus, n.memory_mb, n.gpus) for n in nodes] == [(8, 16000, 4)]


def test_the_slurm_tab_no_longer_says_still_waiting_for_a_job_recorded_before_the_fix():
    from airflow_provider_gpusched.core.slurm.job_view import job_record, job_view, read_job_record

    old = "job 5 was requeued for segment 2 of its time-limit chain (restart 1, seen 2026-12-01T10:00:00+0000)"
    record = job_record(
        "5",
        output_path="/o",
        runner={},
        status=JobStatus(job_id="5", phase=JobPhase.SUCCEEDED, state="COMPLETED", exit_code=0, restarts=1),
        preemptions=1,
        preemption_events=[old + "; still waiting for it to complete"],
    )
    assert job_view(read_job_record(record, "xcom"))["preemption_events"] == [old]


def test_a_launcher_that_passes_signals_on_is_not_taken_for_the_work():
    """srun, torchrun and mpirun catch every signal to pass it on: that one of them catches SIGUSR1 says nothing of
    the work, which is judged by the processes below them (review of issue 76)."""
    import time
    from pathlib import Path

    from airflow_provider_gpusched.core.slurm.chain_shim import takes_signal

    launcher = (
        "import signal, subprocess, sys\n"
        "open('/proc/self/comm', 'w').write(sys.argv[1])\n"
        "signal.signal(signal.SIGUSR1, lambda *a: None)\n"
        "subprocess.run(['sleep', '30'])\n"
    )
    for name, expected in (("srun", False), ("mytrainer", True)):
        proc = subprocess.Popen([sys.executable, "-c", launcher, name], start_new_session=True)
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:  # until the launcher has named itself and started its child
                kids = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()
                comm = Path(f"/proc/{proc.pid}/comm").read_text().strip()
                if kids and comm == name:
                    break
                time.sleep(0.05)
            assert takes_signal(proc.pid, signal.SIGUSR1) is expected, name
        finally:
            os.killpg(proc.pid, signal.SIGKILL)  # (the launcher and its sleep)
            proc.wait()
