"""The Slurm job's life after its submission (core/slurm/submission.py's SlurmJobManager): where its output is, the
one rule for following that output (the operator's blocking wait and the trigger share it), the blocking wait, and
the triggerer's event read as the same JobWait. No cluster: a SlurmClient whose statuses are scripted."""

import logging

import pytest

from airflow_provider_gpusched.core.slurm import SlurmClient, SlurmJobSpec, SlurmTransport
from airflow_provider_gpusched.core.slurm.output import follows_output
from airflow_provider_gpusched.core.slurm.states import JobPhase, JobStatus
from airflow_provider_gpusched.core.slurm.submission import Attached, JobWait, SlurmJobManager, Submission


@pytest.mark.parametrize(
    ("follow", "path", "array_size", "expected"),
    [
        (True, "/out/7.out", None, True),
        (True, "/out/7.out", 0, True),
        (False, "/out/7.out", None, False),  # not asked for
        (True, "", None, False),  # no file
        (True, None, None, False),
        (True, "/out/7.out", 4, False),  # an array: a file per task, shown as a tail at the end
        (True, "/out/7_%a.out", None, False),  # a pattern, not one file
    ],
)
def test_one_rule_says_when_a_jobs_output_is_followed(follow, path, array_size, expected):
    assert follows_output(follow, path, array_size) is expected


def test_the_trigger_follows_by_the_same_rule():
    from airflow_provider_gpusched.triggers.slurm import SlurmJobTrigger

    def trigger(**kwargs):
        return SlurmJobTrigger(job_id="7", runner={}, **kwargs)

    assert trigger(output_path="/out/7.out")._follower() is not None
    assert trigger(output_path="/out/7.out", follow_output=False)._follower() is None
    assert trigger(output_path="/out/7.out", array_size=3)._follower() is None
    assert trigger(output_path="/out/7_%a.out")._follower() is None


class ScriptedSlurm(SlurmClient):
    """Answers each status poll with the next of ``phases``, and writes ``lines`` to the output file as it goes."""

    def __init__(self, out, phases, lines):
        super().__init__(SlurmTransport())
        self.out, self.phases, self.lines = out, list(phases), list(lines)

    def status(self, job_id, array_size=None):
        if self.lines:
            with open(self.out, "a") as fh:
                fh.write(self.lines.pop(0))
        return JobStatus(job_id, self.phases.pop(0), state="X", exit_code=0)

    def output_path(self, job_id):
        return f"/other-run/{job_id}.out"


def test_the_output_path_of_each_way_a_job_is_found():
    manager = SlurmJobManager(ScriptedSlurm("", [], []), "k1")
    submitted = SlurmJobSpec(command="true", output="/mine/%j.out")
    assert manager.output_path(Attached("7", "submitted"), submitted, "/mine/%A_%a.out") == "/mine/7.out"
    assert manager.output_path(Attached("7", "re-attached"), None, "/mine/%A_%a.out") == "/mine/7_%a.out"
    assert manager.output_path(Attached("7", "adopted"), submitted, "/mine/%j.out") == "/other-run/7.out"
    assert Submission is SlurmJobManager  # the old name


def test_the_blocking_wait_shows_the_output_as_it_is_written(tmp_path, caplog):
    out = tmp_path / "7.out"
    phases = [JobPhase.RUNNING, JobPhase.RUNNING, JobPhase.SUCCEEDED]
    client = ScriptedSlurm(str(out), phases, ["one\n", "two\nthr", "ee"])
    manager = SlurmJobManager(client, "k1", log=logging.getLogger("t"))
    with caplog.at_level(logging.INFO, logger="t"):
        waited = manager.wait(
            "7", str(out), poll_interval=0, array_size=None, not_found_timeout=5, follow_output=True, chain=False
        )
    shown = [r.getMessage() for r in caplog.records]
    assert [line for line in shown if line in ("one", "two", "three")] == ["one", "two", "three"]
    assert waited.followed_lines == 2 and waited.problem is None and waited.preemptions == 0
    assert waited.job is not None and JobStatus.from_dict(waited.job).phase is JobPhase.SUCCEEDED


def test_the_blocking_wait_of_an_array_follows_no_output(tmp_path):
    client = ScriptedSlurm(str(tmp_path / "7.out"), [JobPhase.SUCCEEDED], [])
    waited = SlurmJobManager(client, "k1").wait(
        "7",
        str(tmp_path / "7.out"),
        poll_interval=0,
        array_size=2,
        not_found_timeout=5,
        follow_output=True,
        chain=False,
    )
    assert waited.followed_lines is None


def test_the_triggers_event_is_read_as_the_same_record():
    job = JobStatus("7", JobPhase.SUCCEEDED, state="COMPLETED", exit_code=0).to_dict()
    event = {"job_id": "7", "output_path": "/o", "job": job, "preemptions": 1, "preemption_events": ["e"]}
    assert JobWait.from_event({**event, "message": "ok", "followed_lines": 3}) == JobWait(job, "/o", 1, ["e"], None, 3)
    lost = JobWait.from_event({"status": "error", "job_id": "7", "message": "cannot query Slurm: x", "events": []})
    assert lost == JobWait(None, "", 0, [], "cannot query Slurm: x", None)
