"""In a fleet ([gpusched] fleet_dir set), a local GPU task that names no queue is routed by lane and memory tier,
and a request no host can hold is refused when the DAG is parsed, naming the hosts' sizes."""

# Airflow is imported in the tests, not here: collecting this module on every pytest-xdist worker would import it
# on each (2.7 s of CPU); the fast tier runs tests/airflow on one worker (tests/conftest.py tier_unit)

from __future__ import annotations

import pytest

from airflow_provider_gpusched.core import fleet
from airflow_provider_gpusched.core.gpu.inventory import SimulatedInventory
from airflow_provider_gpusched.core.gpu.leases import LeaseManager

pytestmark = pytest.mark.airflow


@pytest.fixture
def fleet_dir(tmp_path, monkeypatch):
    folder = tmp_path / "fleet"
    for host, spec in (("gpu-a", "2x24GiB"), ("gpu-b", "4x80GiB")):
        manager = LeaseManager(SimulatedInventory(spec), str(tmp_path / host))
        fleet.publish(str(folder), fleet.record_of(manager, host))
    monkeypatch.setenv("AIRFLOW__GPUSCHED__FLEET_DIR", str(folder))
    return folder


def _train():
    return 1


def test_tasks_are_routed_by_lane_and_memory_tier(fleet_dir):
    from airflow.sdk import DAG

    from airflow_provider_gpusched.decorators.local_gpu import local_gpu_task
    from airflow_provider_gpusched.operators.local_gpu import LocalGPUOperator

    with DAG("fleet_routing", schedule=None):
        whole = LocalGPUOperator(task_id="whole", gpus=2, command=["true"])
        big = LocalGPUOperator(task_id="big", gpu_memory="60GiB", command=["true"])
        idle = LocalGPUOperator(task_id="idle", job_class="idle", command=["true"])
        named = LocalGPUOperator(task_id="named", queue="lab-a100", gpu_memory="60GiB", command=["true"])
        mapped = LocalGPUOperator.partial(task_id="mapped", gpu_memory="10GiB").expand(command=[["true"]])
        decorated = local_gpu_task(gpu_memory="30GiB")(_train)()
    assert (whole.queue, big.queue, idle.queue, named.queue) == ("gpu", "gpu-64g", "idle", "lab-a100")
    assert whole.pool_slots == 2, "one executor slot per GPU"
    assert mapped.partial_kwargs["queue"] == "gpu-12g"
    assert decorated.operator.queue == "gpu-32g"


def test_a_request_no_host_can_hold_is_refused_at_parse_time(fleet_dir):
    from airflow.sdk import DAG
    from airflow.sdk.exceptions import AirflowException

    from airflow_provider_gpusched.operators.local_gpu import LocalGPUOperator

    with DAG("fleet_refused", schedule=None):
        with pytest.raises(AirflowException, match=r"five: .*gpu-a 2x24.0GiB, gpu-b 4x80.0GiB"):
            LocalGPUOperator(task_id="five", gpus=5, command=["true"])
        with pytest.raises(AirflowException, match=r"huge: .*gpu-b 4x80.0GiB"):
            LocalGPUOperator(task_id="huge", gpu_memory="100GiB", command=["true"])


def test_without_a_fleet_nothing_is_routed(monkeypatch):
    from airflow.sdk import DAG

    from airflow_provider_gpusched.operators.local_gpu import LocalGPUOperator

    monkeypatch.delenv("AIRFLOW__GPUSCHED__FLEET_DIR", raising=False)
    with DAG("one_host", schedule=None):
        task = LocalGPUOperator(task_id="t", gpu_memory="60GiB", command=["true"])
    assert task.queue == "default"
