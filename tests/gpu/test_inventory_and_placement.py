"""Inventory and placement on a simulated 4 x 24 GiB host."""

import json

import pytest

from airflow_provider_gpusched.core.errors import InvalidArgumentError
from airflow_provider_gpusched.core.gpu.inventory import (
    GPUInventoryError,
    SimulatedInventory,
    get_inventory,
    parse_simulation_spec,
)
from airflow_provider_gpusched.core.gpu.leases import LeaseManager
from airflow_provider_gpusched.core.gpu.placement import GPURequest

GiB = 1024**3


def test_simulation_spec():
    assert parse_simulation_spec("4x24GiB") == [24 * GiB] * 4
    assert parse_simulation_spec("24GiB,2x80GiB") == [24 * GiB, 80 * GiB, 80 * GiB]
    for bad in ("", "4x", "fourx24GiB", "0x24GiB"):
        with pytest.raises(InvalidArgumentError, match="simulate_gpus"):
            parse_simulation_spec(bad)


def test_simulated_gpus_say_so():
    gpus = SimulatedInventory("2x16GiB").gpus()
    assert [g.index for g in gpus] == [0, 1]
    assert all(g.simulated and g.uuid.startswith("GPU-SIMULATED-") for g in gpus)
    assert gpus[0].memory_free == 16 * GiB


def test_no_nvml_and_no_simulation_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("GPUSCHED_SIMULATE_GPUS", raising=False)
    with pytest.raises(GPUInventoryError) as err:
        get_inventory()
    assert "GPUSCHED_SIMULATE_GPUS" in str(err.value)
    monkeypatch.setenv("GPUSCHED_SIMULATE_GPUS", "2x8GiB")
    inv = get_inventory()
    assert inv.source == "simulated" and len(inv.gpus()) == 2


def test_packing_puts_three_8gib_requests_on_one_24gib_gpu(manager):
    leases = [manager.try_acquire(GPURequest(gpu_memory="8GiB"), f"t{i}")[0] for i in range(4)]
    assert [lease.gpus for lease in leases] == [[0], [0], [0], [1]]
    assert all(not lease.whole and lease.memory == {lease.gpus[0]: 8 * GiB} for lease in leases)


def test_best_fit_keeps_big_holes_for_big_requests(manager):
    manager.try_acquire(GPURequest(gpu_memory="20GiB"), "a")  # GPU 0: 4 GiB left
    manager.try_acquire(GPURequest(gpu_memory="10GiB"), "b")  # GPU 1: 14 GiB left
    small, _ = manager.try_acquire(GPURequest(gpu_memory="3GiB"), "c")
    assert small.gpus == [0]  # the tightest fit, not the emptiest GPU
    big, _ = manager.try_acquire(GPURequest(gpu_memory="24GiB"), "d")
    assert big.gpus == [2]


def test_multi_gpu_and_whole_gpu_requests(manager):
    pair, _ = manager.try_acquire(GPURequest(gpus=2), "pair")
    assert len(set(pair.gpus)) == 2 and pair.whole and pair.cuda_visible_devices == ",".join(map(str, pair.gpus))
    shared, _ = manager.try_acquire(GPURequest(gpu_memory="1GiB"), "shared")
    assert shared.gpus[0] not in pair.gpus  # a whole-GPU lease admits nobody else
    none, why = manager.try_acquire(GPURequest(gpus=2), "another pair")
    assert none is None and "without leases" in why


def test_pinned_devices(manager):
    lease, _ = manager.try_acquire(GPURequest(gpus=1, devices=[3]), "pinned")
    assert lease.gpus == [3]
    assert manager.try_acquire(GPURequest(gpus=1, devices=[3]), "pinned too")[0] is None


def test_foreign_processes_count_as_used_and_whole_gpus_avoid_them(tmp_path):
    usage = tmp_path / "usage.json"
    usage.write_text(
        json.dumps(
            {
                "0": {"memory_used": "20GiB", "utilization": 90, "pids": [999999]},
                "1": {"memory_used": "1GiB", "pids": [999998]},
            }
        )
    )
    m = LeaseManager(SimulatedInventory("3x24GiB", usage_file=str(usage)), str(tmp_path / "leases"))
    lease, _ = m.try_acquire(GPURequest(gpu_memory="8GiB"), "x")
    assert lease.gpus == [1]  # GPU 0 has only 4 GiB left next to the colleague's process
    whole, _ = m.try_acquire(GPURequest(gpus=1), "y")
    assert whole.gpus == [2]  # no foreign process there
    assert m.try_acquire(GPURequest(gpus=1, max_foreign_processes=0), "z")[0] is None


@pytest.mark.parametrize(
    "kwargs,argument",
    [
        ({"gpu_memory": "lots"}, "gpu_memory"),
        ({"gpu_memory": "-2GiB"}, "gpu_memory"),
        ({"gpu_memory": 0}, "gpu_memory"),
        ({"gpus": 0}, "gpus"),
        ({"gpus": 1.5}, "gpus"),
        ({"devices": []}, "devices"),
        ({"devices": [0, 0]}, "devices"),
        ({"memory_margin": "a bit"}, "memory_margin"),
        ({"max_cpu_percent": 250}, "max_cpu_percent"),
    ],
)
def test_bad_requests_name_the_argument(kwargs, argument):
    with pytest.raises(InvalidArgumentError) as err:
        GPURequest(**kwargs)
    assert argument in str(err.value)


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"gpus": 5}, "at most 4"),
        ({"gpu_memory": "30GiB"}, "at most 24.0GiB"),
        ({"gpus": 2, "devices": [1]}, "at most 1"),
        ({"devices": [7]}, "indices of this host's GPUs"),
    ],
)
def test_impossible_requests_fail_at_once(manager, kwargs, message):
    with pytest.raises(InvalidArgumentError) as err:
        manager.try_acquire(GPURequest(**kwargs), "x")
    assert message in str(err.value)
