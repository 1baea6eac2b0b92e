"""core/fleet.py without Airflow: routing queues, host records read back from disk, room in the fleet."""

from __future__ import annotations

import json
import os
import time

import pytest

from airflow_provider_gpusched.core import fleet
from airflow_provider_gpusched.core.errors import InvalidArgumentError
from airflow_provider_gpusched.core.gpu.inventory import SimulatedInventory
from airflow_provider_gpusched.core.gpu.leases import LeaseManager
from airflow_provider_gpusched.core.gpu.placement import GPURequest
from airflow_provider_gpusched.core.safe_files import BadRecordError

GIB = 1 << 30


def test_a_memory_request_goes_to_the_smallest_tier_that_holds_it_and_only_big_hosts_serve_it():
    assert fleet.queue_for(GPURequest(gpus=2)) == "gpu"
    assert fleet.queue_for(GPURequest(gpu_memory="60GiB")) == "gpu-64g"
    assert fleet.queue_for(GPURequest(gpu_memory="10GiB"), "idle") == "idle-12g"
    small = SimulatedInventory("2x24GiB").gpus()
    big = SimulatedInventory("4x80GiB").gpus()
    assert "gpu-64g" not in fleet.host_queues(small) and "gpu-64g" in fleet.host_queues(big)
    assert fleet.host_queues(small, "idle")[0] == "idle" and "idle-24g" in fleet.host_queues(small, "idle")
    huge = SimulatedInventory("1x288GiB").gpus()  # above every listed tier: multiples of 64 GiB
    assert fleet.queue_for(GPURequest(gpu_memory="200GiB")) == "gpu-256g" and "gpu-256g" in fleet.host_queues(huge)
    assert "gpu-320g" not in fleet.host_queues(huge)
    with pytest.raises(InvalidArgumentError, match="lane"):
        fleet.queue_for(GPURequest(), "batch")


def _publish(folder, host, spec, tmp_path, hold=None):
    manager = LeaseManager(SimulatedInventory(spec), str(tmp_path / f"leases-{host}"))
    lease = manager.try_acquire(hold, "test")[0] if hold else None
    record = fleet.record_of(manager, host)
    fleet.publish(str(folder), record)
    return manager, lease


def test_records_round_trip_and_room_follows_the_leases(tmp_path):
    folder = tmp_path / "fleet"
    _publish(folder, "gpu-a", "2x24GiB", tmp_path, hold=GPURequest(gpus=2))
    _publish(folder, "gpu-b", "4x80GiB", tmp_path)
    view = fleet.read_fleet(str(folder))
    assert [h.host for h in view.hosts] == ["gpu-a", "gpu-b"] and not view.unreadable
    assert len(view.hosts[0].leases) == 1 and view.hosts[0].sizes() == "2x24.0GiB"
    hosts, _ = view.room(GPURequest(gpus=1))
    assert hosts == ["gpu-b"], "gpu-a's two GPUs are leased"
    hosts, why = view.room(GPURequest(gpus=1, gpu_memory="60GiB"))
    assert hosts == ["gpu-b"]
    view.refuse_impossible(GPURequest(gpus=4))
    with pytest.raises(InvalidArgumentError, match=r"gpu-a 2x24.0GiB, gpu-b 4x80.0GiB"):
        view.refuse_impossible(GPURequest(gpus=5))


def test_a_stale_host_offers_no_room_and_a_bad_record_is_named_not_trusted(tmp_path):
    folder = tmp_path / "fleet"
    _publish(folder, "gpu-a", "1x24GiB", tmp_path)
    path = folder / "hosts" / "gpu-a.json"
    data = json.loads(path.read_text())
    data["time"] = time.time() - fleet.FRESH_FOR - 5
    path.write_text(json.dumps(data))
    hosts, why = fleet.read_fleet(str(folder)).room(GPURequest())
    assert hosts == [] and "no host published a record" in why
    data["gpus"][0]["memory_total"] = "lots"
    path.write_text(json.dumps(data))
    view = fleet.read_fleet(str(folder))
    assert view.hosts == [] and "gpus[0].memory_total" in view.unreadable[0][1]
    data["gpus"][0]["memory_total"] = 24 * GIB
    (folder / "hosts" / "gpu-z.json").write_text(json.dumps({**data, "host": "gpu-y"}))
    assert any("the file's name" in why for _, why in fleet.read_fleet(str(folder)).unreadable)


def test_a_host_whose_gpus_others_hold_offers_no_room(tmp_path):
    usage = tmp_path / "usage.json"
    usage.write_text(json.dumps({"0": {"memory_used": "20GiB", "pids": [os.getpid() + 100000]}}))
    manager = LeaseManager(SimulatedInventory("1x24GiB", str(usage)), str(tmp_path / "leases"))
    record = fleet.record_of(manager, "gpu-a")
    assert record.foreign_busy == [0]
    fleet.publish(str(tmp_path / "fleet"), record)
    hosts, why = fleet.read_fleet(str(tmp_path / "fleet")).room(GPURequest(gpu_memory="2GiB"))
    assert hosts == [] and "processes of others" in why


def test_publish_refuses_a_planted_link(tmp_path):
    folder = tmp_path / "fleet"
    folder.mkdir()
    os.symlink(tmp_path, folder / "hosts")
    with pytest.raises(Exception, match="symbolic link"):
        _publish(folder, "gpu-a", "1x24GiB", tmp_path)
    with pytest.raises(BadRecordError):
        fleet.read_host_record([], "x")
