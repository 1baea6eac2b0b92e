"""The REST transport's pure parts: sbatch's arguments as slurmrestd's job properties (one definition of a job for
both transports), the wait status it reports, and a token that stays out of every description, repr and message."""

import base64
import json
import time

import pytest

from airflow_provider_gpusched.core.errors import InvalidArgumentError
from airflow_provider_gpusched.core.slurm import SlurmJobSpec, client_for, transport_from_description
from airflow_provider_gpusched.core.slurm.rest import (
    SlurmRestClient,
    SlurmRestTransport,
    _exit_status,
    job_properties,
    token_claims,
)


def jwt(**claims):
    body = base64.urlsafe_b64encode(json.dumps(claims).encode()).decode().rstrip("=")
    return f"eyJhbGciOiJIUzI1NiJ9.{body}.c2ln"


def transport(**kw):
    return SlurmRestTransport(url="http://login1:6820", user="ada", token=jwt(sun="ada", exp=time.time() + 60), **kw)


def test_a_specs_sbatch_arguments_become_the_apis_properties():
    spec = SlurmJobSpec(
        command="train",
        job_name="t",
        partition="gpu",
        cpus_per_task=4,
        mem="16GiB",
        time_limit=90,
        array="0-9%2",
        nodes=2,
        ntasks_per_node=2,
        gpus_per_node=2,
        constraint="a100",
        exclusive=True,
        requeue=True,
        output="/scratch/%j.out",
        comment="gpusched:x",
        time_limit_chain={"checkpoint": "/scratch/ck", "signal_delay": 120},
        chain_records="/scratch",
        sbatch_args=["--nice=3", "--mail-type=END"],
    )
    props = job_properties(spec.sbatch_argv(), transport(working_dir="/scratch"))
    assert props == {
        "name": "t",
        "partition": "gpu",
        "cpus_per_task": 4,
        "memory_per_node": 16384,
        "time_limit": 90,
        "array": "0-9%2",
        "nodes": "2",
        "tasks_per_node": 2,
        "gpus_per_node": "2",
        "constraints": "a100",
        "exclusive": "true",
        "requeue": True,
        "open_mode": "append",
        "standard_output": "/scratch/%j.out",
        "comment": "gpusched:x",
        "signal": "SIGUSR1@120",  # B: is refused by slurmrestd 22.05: the chain's wrapper signals the batch shell
        "nice": 3,
        "mail_type": "END",
        "current_working_directory": "/scratch",
        "environment": {"PATH": "/usr/local/bin:/usr/bin:/bin"},
    }


def test_the_script_for_rest_has_the_wrapper_signal_the_batch_shell_itself():
    spec = SlurmJobSpec(command="train", time_limit=10, time_limit_chain={"checkpoint": "/c"}, chain_records="/r")
    assert '"self_signal": 90' in spec.render_script(batch_signal=False)
    assert '"self_signal": ' not in spec.render_script()


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--nodelist=n1"], "--nodelist"),
        (["--exclude", "n1"], "--exclude"),
        (["-w", "n1"], "-w"),
        (["--time=soon"], "--time"),
        (["--mem=lots"], "--mem"),
        (["--nodes=2-x"], "--nodes"),
    ],
)
def test_what_the_api_cannot_carry_is_refused_naming_the_option(args, named):
    with pytest.raises(InvalidArgumentError) as err:
        job_properties(args, transport())
    assert named in str(err.value)


def test_the_apis_exit_code_is_a_wait_status():
    assert _exit_status(3 << 8) == (3, None)
    assert _exit_status(15) == (0, 15)
    assert _exit_status(0) == (0, None)
    assert _exit_status(None) == (None, None)


def test_the_token_is_in_no_description_repr_or_equality():
    t = transport(conn_id="slurm_rest")
    assert t.token not in repr(t) and t.token not in json.dumps(t.describe())
    again = transport_from_description(t.describe(), token=t.token)
    assert isinstance(again, SlurmRestTransport) and again == t and again.token == t.token
    assert isinstance(client_for(again), SlurmRestClient)


def test_what_is_wrong_with_a_token_is_told_before_asking():
    assert token_claims("not.a.jwt") == {}
    expired = SlurmRestTransport(url="http://h:1", user="ada", token=jwt(sun="ada", exp=1))
    assert expired.token_problem().startswith("the token expired at 1970-01-01")
    other = SlurmRestTransport(url="http://h:1", user="ada", token=jwt(sun="bob", exp=time.time() + 60))
    assert other.token_problem() == "the token was made for user 'bob', the connection says 'ada'"
    assert "no token" in SlurmRestTransport(url="http://h:1", user="ada").token_problem()


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"url": "login1:6820"}, "rest_url"),
        ({"url": "http://h:1", "user": "-oX"}, "login"),
        ({"url": "http://h:1", "user": "a", "api_version": "v0.0.40"}, "api_version"),
        ({"url": "http://h:1", "user": "a", "working_dir": "scratch"}, "working_dir"),
        ({"url": "http://h:1", "user": "a", "environment": {"PATH": 1}}, "job_environment"),
    ],
)
def test_a_bad_rest_setting_is_refused_naming_it(settings, named):
    with pytest.raises(InvalidArgumentError) as err:
        SlurmRestTransport(**settings)
    assert str(err.value).startswith(f"{named}: expected")
