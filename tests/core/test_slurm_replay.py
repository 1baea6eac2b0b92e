"""The Slurm client and state model on recorded (and some constructed) command outputs: no cluster, no root."""

import pytest

from airflow_provider_gpusched.core.slurm import JobPhase, JobTracker, SlurmClient, SlurmJobSpec
from airflow_provider_gpusched.core.slurm.transport import SlurmCommandError, SlurmUnavailableError
from tests.core.slurm_replay import CONSTRUCTED, RECORDED, ReplayRunner


def client(**answers):
    answers.setdefault("scontrol", [RECORDED["scontrol_show_config"]])
    runner = ReplayRunner(answers={k: list(v) for k, v in answers.items()})
    return SlurmClient(runner), runner


def test_a_job_and_an_array_from_submission_to_their_final_states():
    c, runner = client(
        sbatch=[RECORDED["sbatch"], RECORDED["sbatch_array"]],
        squeue=RECORDED["squeue_polls"],
        tail=[RECORDED["jobcomp"], ""],
    )
    one = c.submit(SlurmJobSpec(command=["train", "--lr", "0.1; rm -rf /"], job_name="rec-one"))
    array = c.submit(SlurmJobSpec(command=["sweep"], array="0-2%2"))
    assert (one.job_id, array.job_id) == ("2050", "2051")
    assert runner.ran("sbatch")[0][-1].startswith("--") and "0.1; rm -rf /" not in " ".join(runner.ran("sbatch")[0])
    trackers = {"2050": JobTracker("2050"), "2051": JobTracker("2051")}
    phases = []
    for _ in RECORDED["squeue_polls"]:
        statuses = c.statuses(["2050", "2051"], {"2051": 3})
        for job_id, status in statuses.items():
            trackers[job_id].update(status)
        phases.append((statuses["2050"].phase.value, statuses["2051"].phase.value))
    assert phases == [
        ("pending", "pending"),
        ("running", "running"),
        ("running", "running"),
        ("running", "running"),
        ("succeeded", "running"),
        ("succeeded", "failed"),
    ]
    job, arr = trackers["2050"].final_status(), trackers["2051"].final_status()
    assert job.exit_code == 0 and job.nodes == "vm" and job.source == "jobcomp" and job.elapsed == 4.0
    assert arr.phase is JobPhase.FAILED and arr.exit_code == 3 and arr.reason == "1 of 3 array tasks did not succeed"
    assert sorted(arr.tasks) == ["2051_0", "2051_1", "2051_2"] and arr.tasks["2051_1"].exit_code == 3
    assert len(runner.ran("squeue")) == 6 and all(len(a) == 9 for a in runner.ran("squeue"))  # one call per poll
    assert arr.tasks["2051_2"].nodes == "vm" and len(trackers["2051"].events) >= 3


def test_a_rejected_job_names_slurms_reason_and_is_not_retried():
    c, _ = client(sbatch=[RECORDED["sbatch_bad_partition"]])
    with pytest.raises(SlurmCommandError) as err:
        c.submit(SlurmJobSpec(command=["true"], partition="nosuch"))
    assert not isinstance(err.value, SlurmUnavailableError)
    assert "Slurm rejected the job: invalid partition specified: nosuch" in str(err.value)


def test_a_controller_timeout_is_transient():
    c, _ = client(squeue=[CONSTRUCTED["squeue_controller_timeout"]])
    with pytest.raises(SlurmUnavailableError, match="Socket timed out"):
        c.statuses(["2050"])


def test_an_unknown_job_is_not_found_until_the_tracker_gives_up():
    c, _ = client(squeue=[RECORDED["squeue_unknown_id"]], tail=[""])
    now = [0.0]
    tracker = JobTracker("99999999", not_found_timeout=300, clock=lambda: now[0])
    tracker.update(c.status("99999999"))
    assert tracker.last is None and not tracker.done
    now[0] = 301.0
    tracker.update(c.status("99999999"))
    assert tracker.done and tracker.final_status().phase is JobPhase.NOT_FOUND


def test_empty_squeue_output_means_ask_the_completion_record():
    c, runner = client(squeue=[""], tail=[RECORDED["jobcomp"], ""])
    status = c.status("2050")
    assert status.phase is JobPhase.SUCCEEDED and status.source == "jobcomp"
    assert runner.ran("tail")[0][-1] == "/home/lab/.slurm/log/jobcomp.txt"


def test_a_requeued_job_is_still_waited_for_and_counted_as_preempted():
    c, _ = client(
        squeue=[
            RECORDED["squeue_polls"][1].replace(
                "2050|2050|N/A|RUNNING|None|0|batch|vm|0:01|rec-one|", "2060|2060|N/A|RUNNING|None|0|idle|vm|1:40|fill|"
            ),
            CONSTRUCTED["squeue_requeued"],
        ],
        tail=[CONSTRUCTED["jobcomp_requeued"], ""],
    )
    tracker = JobTracker("2060")
    tracker.update(c.status("2060"))
    assert tracker.last.phase is JobPhase.RUNNING and tracker.last.elapsed == 100.0
    tracker.update(c.status("2060"))  # the old run's PREEMPTED record is history: squeue says pending again
    assert tracker.last.phase is JobPhase.PENDING and tracker.last.restarts == 1 and not tracker.done
    assert tracker.preemptions == 1 and "was preempted/requeued (restart 1" in tracker.preemption_events[0]


def test_states_newer_slurm_may_add_count_as_pending_and_odd_lines_are_skipped():
    c, _ = client(squeue=[CONSTRUCTED["squeue_new_state"] + CONSTRUCTED["squeue_garbage"]])
    statuses = c.statuses(["2061", "2062", "2064"])
    assert statuses["2061"].phase is JobPhase.PENDING and statuses["2061"].state == "POWER_UP_NODE"
    assert statuses["2062"].phase is JobPhase.RUNNING and statuses["2062"].elapsed == 93784.0  # 1-02:03:04
    assert statuses["2064"].phase is JobPhase.RUNNING and statuses["2064"].elapsed == 300.0


def test_sacct_records_with_array_ranges_signals_and_cancellations():
    c, runner = client(
        scontrol=[CONSTRUCTED["scontrol_show_config_slurmdbd"]], squeue=[""], sacct=[CONSTRUCTED["sacct"]]
    )
    statuses = c.statuses(["2070", "2071", "2074"], {"2071": 10})
    assert statuses["2070"].phase is JobPhase.SUCCEEDED and statuses["2070"].elapsed == 12.0
    assert statuses["2074"].phase is JobPhase.TIMEOUT
    array = statuses["2071"]
    assert array.phase is JobPhase.PENDING  # tasks 2-9 have not started: the array is not finished
    assert array.tasks["2071_0"].exit_code == 3 and array.tasks["2071_1"].phase is JobPhase.CANCELLED
    assert array.tasks["2071_1"].signal == 15
    assert runner.ran("sacct")[0][:5] == ["sacct", "-P", "-n", "-X", "-j"] and not runner.ran("tail")


def test_squeue_fields_with_control_characters_or_absurd_counts_are_escaped_or_no_count():
    """Issue 77 items 10-11 on the CLI path, as slurmrestd's client: a 5000-digit restart count made ``int()`` raise
    deep in a poll; ESC, BEL and NUL in a reason or a job name reached the task log raw."""
    line = "2050|2050|N/A|RUNNING|Bad\x1b[31mreason\x07|" + "9" * 5000 + "|batch|vm|0:01|rec\x00-one|\n"
    c, _ = client(squeue=[line])
    status = c.statuses(["2050"])["2050"]
    assert status.restarts == 0 and status.state == "RUNNING"
    assert status.reason == "Bad\\x1b[31mreason\\x07" and status.name == "rec\\x00-one"
