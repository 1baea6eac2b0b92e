import pytest

from airflow_provider_gpusched.core.gpu.inventory import SimulatedInventory
from airflow_provider_gpusched.core.gpu.leases import LeaseManager
from airflow_provider_gpusched.core.job_classes import JobClassMapping

#: Idle-class timings short enough for tests (the defaults are minutes).
FAST_CLASSES = JobClassMapping.from_dict(
    {"idle": {"local": {"idle_for": 0, "min_runtime": 0, "grace_period": 2, "backoff": 0.2, "max_backoff": 1}}},
    "test classes",
)


@pytest.fixture
def state_dir(tmp_path):
    return str(tmp_path / "leases")


@pytest.fixture
def manager(state_dir):
    """A lease manager over a SIMULATED 4 x 24 GiB inventory (this machine has no GPU)."""
    return LeaseManager(SimulatedInventory("4x24GiB"), state_dir, classes=FAST_CLASSES)
