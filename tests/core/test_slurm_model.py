"""The Slurm state model, job specs and job tracking, without a cluster."""

import pytest

from airflow_provider_gpusched.core.errors import InvalidArgumentError
from airflow_provider_gpusched.core.slurm import JobPhase, JobStatus, JobTracker, SlurmJobSpec, classify_state
from airflow_provider_gpusched.core.slurm.client import parse_jobcomp_line
from airflow_provider_gpusched.core.slurm.job import job_comment, parse_array_indices, task_key
from airflow_provider_gpusched.core.slurm.states import aggregate_array, parse_exit_code
from airflow_provider_gpusched.core.slurm.transport import SSHTransport, is_transient_failure

ALL_STATES = {
    "PENDING": JobPhase.PENDING,
    "CONFIGURING": JobPhase.PENDING,
    "REQUEUED": JobPhase.PENDING,
    "REQUEUE_HOLD": JobPhase.PENDING,
    "REQUEUE_FED": JobPhase.PENDING,
    "SPECIAL_EXIT": JobPhase.PENDING,
    "RESV_DEL_HOLD": JobPhase.PENDING,
    "SUSPENDED": JobPhase.PENDING,
    "STOPPED": JobPhase.PENDING,
    "RESIZING": JobPhase.PENDING,
    "RUNNING": JobPhase.RUNNING,
    "COMPLETING": JobPhase.RUNNING,
    "SIGNALING": JobPhase.RUNNING,
    "STAGE_OUT": JobPhase.RUNNING,
    "COMPLETED": JobPhase.SUCCEEDED,
    "FAILED": JobPhase.FAILED,
    "CANCELLED": JobPhase.CANCELLED,
    "TIMEOUT": JobPhase.TIMEOUT,
    "NODE_FAIL": JobPhase.NODE_FAIL,
    "BOOT_FAIL": JobPhase.BOOT_FAIL,
    "DEADLINE": JobPhase.DEADLINE,
    "OUT_OF_MEMORY": JobPhase.OUT_OF_MEMORY,
    "REVOKED": JobPhase.REVOKED,
    "PREEMPTED": JobPhase.PREEMPTED,
}


@pytest.mark.parametrize("state,phase", sorted(ALL_STATES.items()))
def test_every_slurm_state_is_classified(state, phase):
    assert classify_state(state) is phase
    assert phase.is_terminal == (
        state
        in {
            "COMPLETED",
            "FAILED",
            "CANCELLED",
            "TIMEOUT",
            "NODE_FAIL",
            "BOOT_FAIL",
            "DEADLINE",
            "OUT_OF_MEMORY",
            "REVOKED",
            "PREEMPTED",
        }
    )


def test_state_spellings():
    assert classify_state("CANCELLED by 0") is JobPhase.CANCELLED
    assert classify_state("CD") is JobPhase.SUCCEEDED
    assert classify_state("OOM") is JobPhase.OUT_OF_MEMORY
    assert classify_state("RUNNING+") is JobPhase.RUNNING
    # a state word from a future Slurm is waited on, never taken for a failure
    assert classify_state("SOMETHING_NEW") is JobPhase.PENDING


def test_exit_codes():
    assert parse_exit_code("3:0") == (3, None)
    assert parse_exit_code("0:15") == (0, 15)
    assert parse_exit_code("") == (None, None)
    assert parse_exit_code("N/A") == (None, None)


def test_jobcomp_line_with_spaces_in_values():
    line = (
        "JobId=2 UserId=root(0) GroupId=root(0) Name=my job JobState=COMPLETED Partition=batch "
        "Tres=cpu=1,mem=16000M ExitCode=3:0 ArrayJobId=7 ArrayTaskId=1"
    )
    rec = parse_jobcomp_line(line)
    assert rec["Name"] == "my job"
    assert rec["JobState"] == "COMPLETED"
    assert rec["Tres"] == "cpu=1,mem=16000M"
    assert rec["ExitCode"] == "3:0"
    assert rec["ArrayTaskId"] == "1"


def test_spec_renders_argv_verbatim_and_options():
    spec = SlurmJobSpec(
        command=["python", "-c", "print(1)", "a b", "it's", "x;y", "$HOME"],
        job_name="my job; rm -rf /",
        partition="idle",
        gpus=2,
        cpus_per_task=4,
        mem="2.5GB",
        time_limit=90,
        array="0-3%2",
        nice=100,
        requeue=True,
        environment={"NOTE": "a 'quoted' value; ok"},
        setup=["source /opt/env.sh"],
        sbatch_args=["--exclusive"],
        comment="gpusched:abc",
    )
    argv = spec.sbatch_argv()
    assert argv[0] == "--parsable"
    for expected in [
        "--job-name=my job; rm -rf /",
        "--partition=idle",
        "--gres=gpu:2",
        "--cpus-per-task=4",
        "--mem=2385M",
        "--time=01:30:00",
        "--array=0-3%2",
        "--nice=100",
        "--requeue",
        "--open-mode=append",
        "--comment=gpusched:abc",
        "--exclusive",
    ]:
        assert expected in argv
    script = spec.render_script()
    assert "export NOTE='a '\"'\"'quoted'\"'\"' value; ok'" in script
    assert script.index("source /opt/env.sh") < script.index("python -c")
    assert "'a b' 'it'\"'\"'s' 'x;y' '$HOME'" in script


@pytest.mark.parametrize(
    "kwargs,argument",
    [
        ({}, "command/script"),
        ({"command": "x", "script": "y"}, "command/script"),
        ({"command": []}, "command"),
        ({"command": "x", "gpus": -1}, "gpus"),
        ({"command": "x", "gpus": "two"}, "gpus"),
        ({"command": "x", "mem": "lots"}, "mem"),
        ({"command": "x", "time_limit": "tomorrow"}, "time_limit"),
        ({"command": "x", "array": "0..3"}, "array"),
        ({"command": "x", "gres": "gpu 2"}, "gres"),
        ({"command": "x", "environment": {"BAD-NAME": "1"}}, "environment"),
        ({"command": "x", "sbatch_args": "--exclusive"}, "sbatch_args"),
        ({"command": "x", "sbatch_args": ["exclusive"]}, "sbatch_args"),
        ({"command": "x", "open_mode": "overwrite"}, "open_mode"),
    ],
)
def test_spec_rejects_bad_input_naming_the_argument(kwargs, argument):
    with pytest.raises(InvalidArgumentError) as err:
        SlurmJobSpec(**kwargs)
    assert argument in str(err.value)


def test_with_defaults_keeps_explicit_values():
    spec = SlurmJobSpec(command="x", partition="idle", sbatch_args=["--exclusive"])
    merged = spec.with_defaults(partition="batch", account="lab", sbatch_args=["--constraint=a100"])
    assert merged.partition == "idle"
    assert merged.account == "lab"
    assert merged.sbatch_args == ["--constraint=a100", "--exclusive"]


def test_array_indices():
    assert parse_array_indices("0-6:2,9%2") == [0, 2, 4, 6, 9]
    assert parse_array_indices("3") == [3]
    with pytest.raises(InvalidArgumentError):
        parse_array_indices("a-b")


def test_task_key_is_stable_and_distinct():
    a = task_key("dag", "run", "task", -1)
    assert a == task_key("dag", "run", "task", -1)
    assert a != task_key("dag", "run", "task", 0)
    assert a != task_key("dag", "run2", "task", -1)
    assert job_comment(a, 2) == f"gpusched:{a}:try=2"
    assert " " not in job_comment(a, 2)


def test_ssh_runner_quotes_each_argument():
    runner = SSHTransport(host="login1", user="ann", port=2222, ssh_options=["-i", "/k"], slurm_conf="/a b/slurm.conf")
    argv = runner.wrap(["sbatch", "--job-name=a b;c", "it's"])
    assert argv[: argv.index("--")] == ["ssh", "-o", "BatchMode=yes", "-i", "/k", "-p", "2222"]
    assert argv[argv.index("--") + 1] == "ann@login1"  # after "--": never an option
    remote = argv[argv.index("--") + 2 :]
    assert remote == ["env", "'SLURM_CONF=/a b/slurm.conf'", "sbatch", "'--job-name=a b;c'", "'it'\"'\"'s'"]


def test_transient_failures_are_recognised():
    assert is_transient_failure(1, "squeue: error: Unable to contact slurm controller (connect failure)")
    assert is_transient_failure(1, "slurm_load_jobs error: Socket timed out on send/recv operation")
    assert is_transient_failure(255, "ssh: connect to host x port 22: Connection refused", via_ssh=True)
    assert not is_transient_failure(1, "sbatch: error: Batch job submission failed: Invalid partition name specified")


def _status(state, restarts=0, **kw):
    return JobStatus(job_id="7", phase=classify_state(state), state=state, restarts=restarts, **kw)


def test_tracker_follows_requeue_and_logs_changes():
    tracker = JobTracker("7")
    assert tracker.update(_status("PENDING")) == ["job 7 PENDING"]
    tracker.update(_status("RUNNING"))
    lines = tracker.update(_status("PENDING", restarts=1, reason="BeginTime"))
    assert any("preempted/requeued (restart 1, seen " in line for line in lines)
    assert tracker.preemption_events == [line for line in lines if "preempted" in line]
    assert not tracker.done
    tracker.update(_status("RUNNING", restarts=1))
    tracker.update(_status("COMPLETED", restarts=1, exit_code=0))
    assert tracker.done and tracker.preemptions == 1
    assert tracker.final_status().phase is JobPhase.SUCCEEDED


def test_tracker_gives_up_on_a_job_that_vanished():
    now = [0.0]
    tracker = JobTracker("7", not_found_timeout=30, clock=lambda: now[0])
    tracker.update(_status("RUNNING"))
    tracker.update(JobStatus(job_id="7", phase=JobPhase.NOT_FOUND))
    assert not tracker.done and tracker.last.state == "RUNNING"
    now[0] = 31
    tracker.update(JobStatus(job_id="7", phase=JobPhase.NOT_FOUND))
    assert tracker.done and tracker.final_status().phase is JobPhase.NOT_FOUND


def test_array_aggregation():
    ok = {f"5_{i}": JobStatus(job_id=f"5_{i}", phase=JobPhase.SUCCEEDED, state="COMPLETED") for i in range(3)}
    assert aggregate_array("5", ok, 3).phase is JobPhase.SUCCEEDED
    assert aggregate_array("5", ok, 4).phase is JobPhase.PENDING  # a task not seen yet
    mixed = dict(ok)
    mixed["5_1"] = JobStatus(job_id="5_1", phase=JobPhase.FAILED, state="FAILED", exit_code=3)
    agg = aggregate_array("5", mixed, 3)
    assert agg.phase is JobPhase.FAILED and agg.exit_code == 3 and "1 of 3" in agg.reason
    running = dict(ok)
    running["5_2"] = JobStatus(job_id="5_2", phase=JobPhase.RUNNING, state="RUNNING")
    assert aggregate_array("5", running, 3).phase is JobPhase.RUNNING


def test_status_round_trips_through_dict():
    st = aggregate_array("5", {"5_0": JobStatus(job_id="5_0", phase=JobPhase.FAILED, state="FAILED", exit_code=2)}, 1)
    again = JobStatus.from_dict(st.to_dict())
    assert again == st


def test_explicit_settings_beat_the_class_which_beats_connection_defaults():
    from airflow_provider_gpusched.core.slurm.options import slurm_class_settings

    spec = SlurmJobSpec(command="x", requeue=False)
    merged = spec.with_defaults(**slurm_class_settings("idle")).with_defaults(partition="batch", account="lab")
    assert (merged.partition, merged.requeue, merged.account) == ("idle", False, "lab")


def test_gres_gpu_count():
    from airflow_provider_gpusched.core.slurm.client import gres_gpu_count

    assert gres_gpu_count("gpu:4") == 4
    assert gres_gpu_count("gpu:a100:8(S:0-1)") == 8
    assert gres_gpu_count("gpu:2,shard:8") == 2
    assert gres_gpu_count("(null)") == 0
    # a cluster's answer with a count no node has (issue 77 item 10: int() raised ValueError deep in a poll)
    assert gres_gpu_count("gpu:" + "5" * 5000) == 0 and gres_gpu_count("gpu:\u0664,gpu:2") == 2


def test_a_gpu_count_of_5000_digits_is_refused_naming_the_argument():
    from airflow_provider_gpusched.core.errors import InvalidArgumentError
    from airflow_provider_gpusched.core.job_shape import gpus_on_each_node

    with pytest.raises(InvalidArgumentError) as err:
        gpus_on_each_node({"gpus_per_node": "5" * 5000})
    assert err.value.argument == "gpus_per_node"


def test_an_unreadable_state_is_never_pending():
    from airflow_provider_gpusched.core.slurm.states import JobPhase, classify_state

    assert classify_state("") is JobPhase.NOT_FOUND and classify_state("  ") is JobPhase.NOT_FOUND
    assert classify_state("SOME_NEW_STATE") is JobPhase.PENDING  # a newer Slurm's word: wait, never fail


def test_pickled_calls_are_private(tmp_path):
    import os
    import stat

    from airflow_provider_gpusched.core import pyfunc

    path = pyfunc.write_call(str(tmp_path / "call"), max, (1, 2))
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    os.remove(path)
    os.symlink(tmp_path / "elsewhere", path)  # a link planted at the name is replaced, never written through
    pyfunc.write_call(str(tmp_path / "call"), max, (1, 2))
    assert not os.path.islink(path) and not (tmp_path / "elsewhere").exists()


def test_job_comment_round_trips_its_fields():
    from airflow_provider_gpusched.core.slurm.job import job_comment, parse_job_comment, task_family_key

    run = "manual__2026-11-22T13:53:01.778689+00:00"
    comment = job_comment("k" * 24, 3, task=task_family_key("d", "t"), work="w" * 16, run=run)
    assert " " not in comment and "\n" not in comment
    assert parse_job_comment(comment) == {
        "key": "k" * 24,
        "task": task_family_key("d", "t"),
        "work": "w" * 16,
        "run": run,
        "try": "3",
    }
    assert parse_job_comment("someone else's comment") == {}
    assert "run=" not in job_comment("k", 1, run="r" * 400)  # too long for a comment: left out
