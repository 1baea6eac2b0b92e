import os
import subprocess
import uuid
from pathlib import Path

import pytest

from airflow_provider_gpusched.core.slurm import SlurmTransport, client_for
from airflow_provider_gpusched.core.slurm.rest import SlurmRestTransport

REPO = Path(__file__).resolve().parents[2]
#: the transports every job test runs through: the Slurm CLI on this host, and slurmrestd (auth/jwt)
TRANSPORTS = ("cli", "rest")


def make_transport(kind, slurm_cluster, rest):
    if kind == "rest":
        return SlurmRestTransport(
            url=rest["rest_url"], user=rest["user"], token=rest["token"], environment=rest["environment"]
        )
    return SlurmTransport(slurm_conf=slurm_cluster)


#: a module's or test's mark that runs it through every transport
over_every_transport = pytest.mark.parametrize("transport", TRANSPORTS, indirect=True)


@pytest.fixture
def transport(request, slurm_cluster):
    """A maker of the transport: the CLI's, or each in turn under :data:`over_every_transport` (the REST one asks
    for the cluster's slurmrestd only when its turn comes)."""
    kind = getattr(request, "param", "cli")
    rest = request.getfixturevalue("slurm_rest") if kind == "rest" else None
    return lambda: make_transport(kind, slurm_cluster, rest)


@pytest.fixture
def client(transport):
    return client_for(transport())


@pytest.fixture
def out(tmp_path):
    """A fresh output path pattern for one job."""
    return lambda name="job": str(tmp_path / f"{name}-{uuid.uuid4().hex[:6]}-%j.out")


def scontrol(conf, *args):
    return subprocess.run(
        ["scontrol", *args], env={**os.environ, "SLURM_CONF": conf}, capture_output=True, text=True, check=False
    )
