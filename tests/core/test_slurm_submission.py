"""The one retry policy of Slurm submission (core/slurm/submission.py), on a stand-in for a Slurm controller that is
unreachable for a while: how long it waits, that a retry never submits twice, and what is not retried. The real
controller's outages are tested on the test cluster (tests/slurm/test_client.py restarts slurmctld; the re-attach
paths: tests/airflow/test_orphans.py, tests/slurm/test_sweep_run_slurm.py)."""

import logging

import pytest

from airflow_provider_gpusched.core.slurm.job import SlurmJobSpec, job_comment
from airflow_provider_gpusched.core.slurm.submission import SLURM_RETRY, RetryPolicy, Submission
from airflow_provider_gpusched.core.slurm.transport import SlurmCommandError, SlurmUnavailableError


class FlakySlurm:
    """Answers like SlurmClient: ``down`` calls fail as unreachable first; ``lands`` makes a failed sbatch get
    through after all (the controller took it, the answer was lost)."""

    def __init__(self, down=0, lands=False, refuse=False):
        self.down, self.lands, self.refuse = down, lands, refuse
        self.jobs: dict[str, str] = {}
        self.submits = 0
        self.calls = 0

    def _call(self):
        self.calls += 1
        if self.down > 0:
            self.down -= 1
            raise SlurmUnavailableError(["squeue"], 1, "slurm_load_jobs error: Unable to contact slurm controller")

    def find_live_jobs(self, prefix):
        self._call()
        return [(j, c) for j, c in self.jobs.items() if c.startswith(prefix)]

    def submit(self, spec):
        self.submits += 1
        if self.refuse:
            raise SlurmCommandError(["sbatch"], 1, "sbatch: error: Invalid partition name specified")
        if self.down > 0:
            if self.lands:
                self.jobs[str(100 + self.submits)] = spec.comment
            self._call()
        job_id = str(100 + self.submits)
        self.jobs[job_id] = spec.comment
        return type("Submitted", (), {"job_id": job_id})()


def spec(key="k1"):
    return SlurmJobSpec(command="true", comment=job_comment(key))


def test_the_declared_policy_waits_one_two_four_up_to_thirty_seconds():
    slept = []
    client = FlakySlurm(down=6)
    job = Submission(client, "k1", sleep=slept.append).submit(spec())
    # try 1: sbatch; tries 2-7: first look for the job by its comment (none), then sbatch
    assert slept == [1, 2, 4, 8, 16, 30] and client.calls == 7 and job == "102" and client.submits == 2
    assert RetryPolicy(attempts=7, first_wait=1.0, max_wait=30.0) == SLURM_RETRY


def test_a_submission_that_got_through_after_all_is_found_not_repeated(caplog):
    client = FlakySlurm(down=1, lands=True)
    with caplog.at_level(logging.WARNING):
        job = Submission(client, "k1", sleep=lambda s: None).submit(spec())
    assert job == "101" and client.submits == 1 and list(client.jobs) == ["101"]
    assert "Slurm did not take the job (unreachable or full for now" in caplog.text
    assert "trying again in 1 s (try 2 of 7)" in caplog.text


def test_slurm_down_for_longer_than_the_policy_raises_its_error():
    client = FlakySlurm(down=50)
    with pytest.raises(SlurmUnavailableError, match="Unable to contact slurm controller"):
        Submission(client, "k1", sleep=lambda s: None).submit(spec())
    assert client.calls == 7 and client.submits == 1


def test_a_job_sbatch_refuses_is_not_retried():
    client = FlakySlurm(refuse=True)
    with pytest.raises(SlurmCommandError, match="Invalid partition"):
        Submission(client, "k1", sleep=lambda s: None).submit(spec())
    assert client.submits == 1


def test_start_re_attaches_to_a_live_job_of_the_key_and_builds_nothing():
    client = FlakySlurm()
    client.jobs["55"] = job_comment("k1", 1)
    built = []
    attached, made = Submission(client, "k1", sleep=lambda s: None).start(lambda: built.append(1) or (spec(), "w"))
    assert (attached.job_id, attached.how, made, built, client.submits) == ("55", "re-attached", None, [], 0)


def test_orphans_of_the_family_are_adopted_when_they_do_the_same_work_and_cancelled_otherwise():
    cancelled = []
    client = FlakySlurm()
    client.cancel = cancelled.extend
    client.jobs["61"] = job_comment("old-a", 1, task="fam", work="w1", run="run-a")  # its owner failed: same work
    client.jobs["62"] = job_comment("old-b", 1, task="fam", work="w2", run="run-b")  # its owner failed: other work
    client.jobs["63"] = job_comment("old-c", 1, task="fam", work="w1", run="run-c")  # its owner still runs
    client.jobs["64"] = job_comment("other", 1, task="other-family", work="w1", run="run-a")
    owners = {"run-a": "failed", "run-b": "failed", "run-c": "running"}
    submission = Submission(client, "new", family="fam", owner_state=owners.get, sleep=lambda s: None)
    attached, _ = submission.start(lambda: (spec("new"), "w1"))
    assert (attached.job_id, attached.how) == ("61", "adopted")
    assert cancelled == ["62"] and client.submits == 0
