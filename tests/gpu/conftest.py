import pytest

from airflow_provider_gpusched.core.gpu.inventory import SimulatedInventory
from airflow_provider_gpusched.core.gpu.leases import LeaseManager


@pytest.fixture
def state_dir(tmp_path):
    return str(tmp_path / "leases")


@pytest.fixture
def manager(state_dir):
    """A lease manager over a SIMULATED 4 x 24 GiB inventory (this machine has no GPU)."""
    return LeaseManager(SimulatedInventory("4x24GiB"), state_dir)
