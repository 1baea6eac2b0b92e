"""The REST transport's own behaviour against the test cluster's real slurmrestd (auth/jwt): what the connection test
and the first request say when the URL, the token or the API version is wrong (naming what to fix, never printing
the token), options the API cannot carry, and the poller's one call per poll."""

import base64
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from airflow_provider_gpusched.core.errors import InvalidArgumentError
from airflow_provider_gpusched.core.slurm import JobPhase, SlurmJobSpec, client_for
from airflow_provider_gpusched.core.slurm.rest import (
    SlurmRestError,
    SlurmRestTransport,
    SlurmRestUnavailableError,
)
from tests import services

pytestmark = pytest.mark.slurm


def rest_client(slurm_rest, **changes):
    settings = {
        "url": slurm_rest["rest_url"],
        "user": slurm_rest["user"],
        "token": slurm_rest["token"],
        "environment": slurm_rest["environment"],
        **changes,
    }
    return client_for(SlurmRestTransport(**settings))


def token_for(slurm_cluster, *args):
    out = subprocess.run(
        ["scontrol", "token", *args],
        env={**os.environ, "SLURM_CONF": slurm_cluster},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return out.strip().split("=", 1)[1]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_connection_test_says_where_it_reached_and_what_the_cluster_has(slurm_rest):
    line = rest_client(slurm_rest).check_connection()
    assert line.startswith(f"slurmrestd {slurm_rest['rest_url']} (Slurm 22.05") and "API v0.0.38" in line
    assert "batch* up 8 GPUs" in line and "idle up 8 GPUs" in line


def test_a_wrong_url_is_unreachable_and_named(slurm_rest):
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(SlurmRestUnavailableError) as err:
        rest_client(slurm_rest, url=url).check_connection()
    assert f"cannot reach slurmrestd at {url}" in str(err.value) and "GET " in str(err.value)
    assert slurm_rest["token"] not in str(err.value)


def test_an_expired_token_is_named_at_the_connection_test_and_at_first_use(slurm_cluster, slurm_rest):
    expired = token_for(slurm_cluster, f"username={slurm_rest['user']}", "lifespan=1")
    time.sleep(2.5)
    client = rest_client(slurm_rest, token=expired)
    with pytest.raises(SlurmRestError) as err:
        client.check_connection()
    assert "the token expired at" in str(err.value) and "scontrol token" in str(err.value)
    with pytest.raises(SlurmRestError) as err:  # first use, past the connection test: slurmctld's refusal, explained
        client.status("1")
    message = str(err.value)
    assert message.startswith(f"GET {slurm_rest['rest_url']}/slurm/v0.0.38/jobs: ")  # the endpoint, named
    assert "the token expired at" in message and expired not in message


def test_a_token_for_another_user_or_not_signed_by_the_cluster_is_refused_saying_so(slurm_cluster, slurm_rest):
    other = token_for(slurm_cluster, "username=nobody", "lifespan=600")
    with pytest.raises(SlurmRestError) as err:
        rest_client(slurm_rest, token=other).check_connection()
    assert f"the token was made for user 'nobody', the connection says {slurm_rest['user']!r}" in str(err.value)
    # a well-formed JWT for the right user, signed with another key: only slurmctld can tell
    head, _, _ = slurm_rest["token"].split(".")
    claims = base64.urlsafe_b64encode(
        json.dumps({"exp": int(time.time()) + 600, "iat": int(time.time()), "sun": slurm_rest["user"]}).encode()
    )
    forged = f"{head}.{claims.decode().rstrip('=')}.c2lnbmVkIGVsc2V3aGVyZQ"
    with pytest.raises(SlurmRestError) as err:
        rest_client(slurm_rest, token=forged).check_connection()
    assert "refuses the token" in str(err.value) and forged not in str(err.value)
    assert "/slurm/v0.0.38/ping" in str(err.value)


def test_a_server_that_does_not_speak_the_api_version_says_which_it_speaks(slurm_cluster, slurm_rest):
    """A second slurmrestd of the same cluster that loads only the v0.0.37 plugin (its config where user nobody
    reads it: pytest's own temporary folders are closed to other users)."""
    port = free_port()
    folder = Path(tempfile.mkdtemp(prefix="gpusched-rest-v37-"))
    folder.chmod(0o755)
    conf = folder / "slurm.conf"
    shutil.copyfile(slurm_cluster, conf)
    conf.chmod(0o644)
    server = subprocess.Popen(
        ["slurmrestd", "-f", str(conf), "-a", "rest_auth/jwt", "-s", "openapi/v0.0.37", "-u", "nobody"]
        + ["-g", "nogroup", f"127.0.0.1:{port}"],
        env={**os.environ, "SLURM_JWT": "daemon"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its own process group: tests/services.py stops it if this test cannot
    )
    record = services.register("slurmrestd-v37", pgid=server.pid)
    try:
        deadline = time.monotonic() + 30
        while socket.socket().connect_ex(("127.0.0.1", port)) != 0:
            assert time.monotonic() < deadline and server.poll() is None, "the v0.0.37 slurmrestd did not start"
            time.sleep(0.1)
        with pytest.raises(SlurmRestError) as err:
            rest_client(slurm_rest, url=f"http://127.0.0.1:{port}").check_connection()
        message = str(err.value)
        assert "the server speaks API v0.0.37, not v0.0.38" in message and "openapi/v0.0.38" in message
    finally:
        server.terminate()
        server.wait(timeout=30)
        services.stopped(record)
        shutil.rmtree(folder)


def test_an_option_the_api_cannot_carry_is_refused_before_anything_is_sent(slurm_rest, tmp_path):
    client = rest_client(slurm_rest)
    for spec, option in (
        (SlurmJobSpec(command="true", nodelist="n1", output=str(tmp_path / "%j.out")), "--nodelist"),
        (SlurmJobSpec(command="true", sbatch_args=["--exclude=n2"], output=str(tmp_path / "%j.out")), "--exclude"),
    ):
        with pytest.raises(InvalidArgumentError) as err:
            client.submit(spec)
        assert str(err.value).startswith("sbatch option: expected an option slurmrestd's job properties can carry")
        assert option in str(err.value) and "use the CLI or ssh transport" in str(err.value)
    assert client.runner.calls["POST job/submit"] == 0


def test_the_jobs_own_options_and_environment_arrive(slurm_rest, tmp_path):
    """What sbatch would take from the shell (environment, working directory) comes from the transport; the job's
    environment values from the spec; a multi-node shape and a user's own sbatch options as the API's properties."""
    client = rest_client(slurm_rest, working_dir=str(tmp_path))
    job = client.submit(
        SlurmJobSpec(
            command='echo "$SLURM_JOB_NUM_NODES $SLURM_NTASKS $GREETING $(pwd) $SLURM_JOB_NAME"',
            nodes=2,
            ntasks_per_node=2,
            job_name="shape",
            environment={"GREETING": "hello world"},
            sbatch_args=["--nice=5", "--time=2"],
            output="shape-%j.out",  # relative: to the working directory
        )
    )
    status = client.wait(job.job_id, poll_interval=0.5, timeout=60)
    assert status.phase is JobPhase.SUCCEEDED, status.describe()
    assert status.nodes == "n[1-2]" and status.name == "shape"
    words = (tmp_path / f"shape-{job.job_id}.out").read_text().split()
    assert words == [
        "2",
        "4",  # 2 nodes x 2 tasks
        "hello",
        "world",
        str(tmp_path),
        "shape",
    ]
    shown = subprocess.run(
        ["scontrol", "-o", "show", "job", job.job_id], capture_output=True, text=True, env=os.environ
    ).stdout
    assert "Nice=5 " in shown and "TimeLimit=00:02:00 " in shown, shown
