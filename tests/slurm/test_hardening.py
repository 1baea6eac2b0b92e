"""Slurm on a shared host, tried as a hostile or careless user would: no job script in a path another user
controls, no secret left in a file, no value that becomes an option, no record that looks 'pending' forever."""

import os
import stat
import subprocess
import tempfile
import uuid

import pytest

from airflow_provider_gpusched.core.errors import InvalidArgumentError
from airflow_provider_gpusched.core.slurm import JobPhase, SlurmJobSpec, SSHTransport
from airflow_provider_gpusched.core.slurm.client import JobCompletionFile, jobcomp_records, parse_jobcomp_line
from airflow_provider_gpusched.core.slurm.states import JobStatus
from tests.polling import wait_until

pytestmark = pytest.mark.slurm


def _slurm_spool_dirs():
    """Slurm keeps every job's script and environment in its own state and spool directories (root-owned,
    private to the daemons): that copy is Slurm's, not a file this provider left behind."""
    conf = os.environ.get("SLURM_CONF", "")
    dirs = []
    if conf and os.path.exists(conf):
        with open(conf) as fh:
            for line in fh:
                key, _, value = line.strip().partition("=")
                if key in ("StateSaveLocation", "SlurmdSpoolDir") and value:
                    dirs.append(os.path.realpath(value))
    return dirs


def _files_containing(roots, needle, skip=()):
    hits = []
    for base, subdirs, files in (step for root in roots for step in os.walk(root)):
        subdirs[:] = [d for d in subdirs if os.path.realpath(os.path.join(base, d)) not in skip]
        for name in files:
            path = os.path.join(base, name)
            try:
                if not stat.S_ISREG(os.lstat(path).st_mode):
                    continue  # a FIFO (another test's, or anyone's under /tmp) would block the read forever
                with open(path, "rb") as fh:
                    if needle in fh.read(1 << 20):
                        hits.append(path)
            except OSError:
                pass
    return hits


def test_job_script_never_goes_through_a_path_another_user_controls(client, tmp_path):
    # the attacker's directory, created first, world-writable, with a "replacement" script waiting in it
    planted = os.path.join(tempfile.gettempdir(), "gpusched-sbatch")
    os.makedirs(planted, exist_ok=True)
    os.chmod(planted, 0o777)
    before = set(os.listdir(planted))
    secret = f"sk-{uuid.uuid4().hex}"
    out = tmp_path / "job-%j.out"
    job = client.submit(
        SlurmJobSpec(
            command=["sh", "-c", 'echo "ran ours: ${#API_KEY} chars"'], environment={"API_KEY": secret}, output=str(out)
        )
    )
    assert set(os.listdir(planted)) == before  # nothing written where another user could swap it
    status = client.wait(job.job_id, poll_interval=0.5, timeout=60)
    assert status.phase is JobPhase.SUCCEEDED
    assert f"ran ours: {len(secret)} chars" in client.tail(str(out).replace("%j", job.job_id))
    # the secret is in no file left behind under the temp directory (a checkout there holds Slurm's spool)
    spool = _slurm_spool_dirs()
    assert spool, "SLURM_CONF names no StateSaveLocation/SlurmdSpoolDir"
    for path in _files_containing(spool, secret.encode()):  # Slurm's own copy: private to its user
        assert os.stat(path).st_mode & 0o077 == 0, f"{path} is readable by others"
    assert _files_containing([tempfile.gettempdir()], secret.encode(), skip=set(spool)) == []


def test_cancel_refuses_option_like_and_malformed_ids(client, out):
    job = client.submit(SlurmJobSpec(command="sleep 120", output=out()))
    try:
        wait_until(lambda: client.status(job.job_id).phase is JobPhase.RUNNING, what="job running")
        for bad in (["--me"], ["-u", "root"], ["1;scancel --me"], [""], ["12_x"]):
            with pytest.raises(InvalidArgumentError, match="job id"):
                client.cancel(bad)
        with pytest.raises(InvalidArgumentError):
            client.statuses(["--me"])
        assert client.status(job.job_id).phase is JobPhase.RUNNING  # still running: nothing was cancelled
    finally:
        client.cancel([job.job_id])
    assert client.wait(job.job_id, poll_interval=0.5, timeout=60).phase is JobPhase.CANCELLED


@pytest.mark.parametrize("host", ["-oProxyCommand=touch /tmp/pwned", "-p", "host name", "a;b", "", "\nhost"])
def test_ssh_host_that_would_be_an_option_is_refused(host):
    with pytest.raises(InvalidArgumentError, match="host"):
        SSHTransport(host=host)


def test_ssh_destination_follows_double_dash():
    argv = SSHTransport(host="login.cluster.org", user="ann", port=2222).wrap(["squeue", "--me"])
    assert argv[argv.index("--") + 1] == "ann@login.cluster.org"
    with pytest.raises(InvalidArgumentError, match="login"):
        SSHTransport(host="h", user="-oProxyCommand=x")
    with pytest.raises(InvalidArgumentError, match="port"):
        SSHTransport(host="h", port=0)


@pytest.mark.parametrize("field", ["job_name", "partition", "account", "output", "comment"])
def test_control_characters_never_reach_slurm(field):
    with pytest.raises(InvalidArgumentError, match=field):
        SlurmJobSpec(command="true", **{field: "evil\nname"})
    with pytest.raises(InvalidArgumentError, match="sbatch_args"):
        SlurmJobSpec(command="true", sbatch_args=["--constraint=a\nb"])
    with pytest.raises(InvalidArgumentError, match="cpus_per_task"):
        SlurmJobSpec(command="true", cpus_per_task=0)


def test_a_job_name_with_a_newline_from_elsewhere_is_tracked_to_the_end(client, slurm_cluster, tmp_path):
    """A job submitted by another tool with a newline in its name splits its completion record across two
    lines: it must still be seen as completed, never as pending."""
    proc = subprocess.run(
        ["sbatch", "--parsable", "--job-name=evil\nname", f"--output={tmp_path}/%j.out", "--wrap", "true"],
        capture_output=True,
        text=True,
        env={**os.environ, "SLURM_CONF": slurm_cluster},
        check=True,
    )
    job_id = proc.stdout.strip().split(";")[0]
    status = client.wait(job_id, poll_interval=0.5, timeout=60)
    assert status.phase is JobPhase.SUCCEEDED
    # the completion record alone (the job gone from squeue): joined back, complete
    completions = JobCompletionFile()  # read from the start of the file
    assert completions.statuses(client.runner, client.accounting().jobcomp_loc, [job_id])[job_id].state == "COMPLETED"
    record = completions.records[job_id]
    assert record["JobState"] == "COMPLETED" and record["Name"] == "evil\nname"


def test_jobcomp_records_join_continuation_lines_and_drop_stateless_ones():
    text = (
        "JobId=7 UserId=a(1) Name=evil\nname JobState=COMPLETED Partition=batch ExitCode=0:0\n"
        "JobId=8 UserId=a(1) Name=ok JobState=FAILED ExitCode=3:0\n"
    )
    records = [parse_jobcomp_line(r) for r in jobcomp_records(text)]
    assert [(r["JobId"], r["JobState"], r["Name"]) for r in records] == [
        ("7", "COMPLETED", "evil\nname"),
        ("8", "FAILED", "ok"),
    ]


def test_timeout_and_cancelled_never_say_exit_code_0():
    timeout = JobStatus("5", JobPhase.TIMEOUT, state="TIMEOUT", exit_code=0)
    assert timeout.describe() == "job 5 TIMEOUT (reached its time limit)"
    cancelled = JobStatus("6", JobPhase.CANCELLED, state="CANCELLED", exit_code=0, signal=15)
    assert (
        cancelled.describe() == "job 6 CANCELLED (cancelled (scancel, an administrator, or Slurm); signal 15 (SIGTERM))"
    )
    failed = JobStatus("7", JobPhase.FAILED, state="FAILED", exit_code=3)
    assert failed.describe() == "job 7 FAILED (exit code 3)"
    # a shell that outlived SIGTERM long enough to exit 143 (seen through slurmrestd on a loaded host): still a timeout
    late = JobStatus("8", JobPhase.TIMEOUT, state="TIMEOUT", exit_code=143, reason="TimeLimit")
    assert late.describe() == "job 8 TIMEOUT (reached its time limit; exit code 143) [TimeLimit]"
    killed = JobStatus("9", JobPhase.FAILED, state="FAILED", exit_code=1, signal=9)
    assert killed.describe() == "job 9 FAILED (exit code 1, signal 9 (SIGKILL))"
    done = JobStatus("10", JobPhase.SUCCEEDED, state="COMPLETED", exit_code=0)
    assert done.describe() == "job 10 COMPLETED (exit code 0)"


def test_output_in_a_missing_directory_fails_before_submitting(client, tmp_path):
    submitted = client.runner.calls["sbatch"]
    with pytest.raises(InvalidArgumentError, match="output_path.*does not exist"):
        client.submit(SlurmJobSpec(command="true", output=str(tmp_path / "nosuch" / "%j.out")))
    with pytest.raises(InvalidArgumentError, match="working_dir"):
        client.submit(SlurmJobSpec(command="true", working_dir=str(tmp_path / "nosuch")))
    assert client.runner.calls["sbatch"] == submitted  # nothing was submitted


def test_an_array_past_max_array_size_is_explained(client, out):
    """Issue 30, item 13: Slurm says only "Invalid job array specification"; the error names MaxArraySize."""
    from airflow_provider_gpusched.core.slurm import SlurmCommandError

    limit = client.accounting().max_array_size
    assert limit == 1001  # the test cluster keeps Slurm's default
    with pytest.raises(SlurmCommandError) as err:
        client.submit(SlurmJobSpec(command="true", array=f"0-{limit + 500}%4", output=out()))
    message = str(err.value)
    assert "Invalid job array specification" in message
    assert f"goes up to index {limit + 500}, and this cluster's MaxArraySize is {limit}" in message, message
    assert f"chunk_size <= {limit}" in message
