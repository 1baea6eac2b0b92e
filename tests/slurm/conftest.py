import os
import subprocess
import uuid
from pathlib import Path

import pytest

from airflow_provider_gpusched.core.slurm import SlurmClient, SlurmTransport

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def client(slurm_cluster):
    return SlurmClient(SlurmTransport(slurm_conf=slurm_cluster))


@pytest.fixture
def out(tmp_path):
    """A fresh output path pattern for one job."""
    return lambda name="job": str(tmp_path / f"{name}-{uuid.uuid4().hex[:6]}-%j.out")


def scontrol(conf, *args):
    return subprocess.run(
        ["scontrol", *args], env={**os.environ, "SLURM_CONF": conf}, capture_output=True, text=True, check=False
    )
