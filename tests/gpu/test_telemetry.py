"""Measured GPU use (core/gpu/telemetry.py): samples attributed to leases, a bounded ring, its record read back,
and what the board draws from it. Over SIMULATED GPUs (this machine has none): a usage file says what NVML would."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from airflow_provider_gpusched.core.gpu.inventory import GPUInfo, GPUInventoryError, GPUProcess, SimulatedInventory
from airflow_provider_gpusched.core.gpu.leases import LeaseManager
from airflow_provider_gpusched.core.gpu.placement import GPURequest
from airflow_provider_gpusched.core.gpu.telemetry import (
    MAX_PROCESSES,
    GPUSample,
    HostSampler,
    TelemetryRing,
    lease_memory,
    measured_gpus,
    over_reservation,
    read_telemetry_record,
    sample_gpus,
    sample_host,
)
from airflow_provider_gpusched.core.safe_files import BadRecordError
from tests.processes import start_foreign_process

GIB = 1 << 30


def _gpu(index, procs=(), util=50):
    return GPUInfo(
        index,
        f"GPU-{index}",
        "Test GPU",
        24 * GIB,
        8 * GIB,
        util,
        [GPUProcess(pid, mem) for pid, mem in procs],
        temperature=61,
        power_watts=180.5,
    )


def test_a_sample_attributes_each_process_to_its_lease_and_marks_the_others():
    gpus = [_gpu(0, [(101, 6 * GIB), (202, 2 * GIB)]), _gpu(1, [(303, None)])]
    samples = sample_gpus(gpus, {"a" * 16: {101}}, now=1000.0, user_of=lambda pid: f"user{pid}")
    assert [(p.pid, p.lease_id, p.user) for p in samples[0].processes] == [
        (101, "a" * 16, "user101"),
        (202, "", "user202"),
    ]
    assert samples[1].processes[0].lease_id == "" and samples[1].processes[0].used_memory is None
    assert samples[0].row() == [1000.0, 50, 8 * GIB, 61, 180.5]
    # the leases could not be read: nobody is called "not ours"
    unknown = sample_gpus(gpus, None, now=1000.0, user_of=lambda pid: "")
    assert {p.lease_id for s in unknown for p in s.processes} == {"?"}
    measured = measured_gpus(_record(unknown), now=1000.0)
    assert measured[0]["others"] == 0 and all(p["unattributed"] for p in measured[0]["processes"])


def test_a_sample_keeps_the_largest_processes_only():
    many = [_gpu(0, [(1000 + i, i * 1024) for i in range(200)])]
    procs = sample_gpus(many, {}, user_of=lambda pid: "")[0].processes
    assert len(procs) == MAX_PROCESSES and procs[0].used_memory == 199 * 1024


def _record(samples_by_time, host="gpu-a", source="nvml"):
    ring = TelemetryRing(host, source)
    if samples_by_time and isinstance(samples_by_time[0], GPUSample):
        samples_by_time = [samples_by_time]
    for samples in samples_by_time:
        ring.add(samples)
    return read_telemetry_record(json.loads(json.dumps(ring.to_dict())), "test record")


def test_the_ring_keeps_ten_minutes_at_ten_second_resolution():
    ring = TelemetryRing("gpu-a", "nvml")
    for k in range(200):  # 2,000 s of samples every 10 s
        ring.add(sample_gpus([_gpu(0, util=k % 101)], {}, now=1000.0 + 10 * k, user_of=lambda pid: ""))
    series = ring.to_dict()["gpus"]["0"]["series"]
    assert len(series) == 61 and series[0][0] == 1000.0 + 10 * 139 and series[-1][0] == 1000.0 + 10 * 199
    # a sample sooner than half the resolution after the last replaces it
    ring.add(sample_gpus([_gpu(0, util=7)], {}, now=1000.0 + 10 * 199 + 2, user_of=lambda pid: ""))
    series = ring.to_dict()["gpus"]["0"]["series"]
    assert len(series) == 60 and series[0][0] == 2400.0 and series[-1][:2] == [1000.0 + 1992, 7]  # 600 s back


def test_measured_use_flags_a_lease_over_its_reservation_and_counts_others():
    lease = "b" * 16
    samples = sample_gpus(
        [_gpu(0, [(11, 6 * GIB), (12, 1 * GIB), (99, 3 * GIB)])], {lease: {11, 12}}, now=500.0, user_of=lambda pid: ""
    )
    measured = measured_gpus(_record(samples, source="simulated"), now=505.0)[0]
    assert measured["simulated"] and not measured["stale"] and measured["utilization"] == 50
    assert measured["others"] == 1 and measured["others_memory"] == 3 * GIB
    used = lease_memory(measured["processes"], lease)
    assert used == 7 * GIB
    assert over_reservation(used, 4 * GIB, whole=False)
    assert not over_reservation(used, 8 * GIB, whole=False)
    assert not over_reservation(used, 4 * GIB, whole=True)  # a whole GPU is all its own
    assert lease_memory(measured["processes"], "c" * 16) is None
    assert measured_gpus(_record(samples), now=600.0)[0]["stale"]


@pytest.mark.parametrize(
    "mutate, key",
    [
        (lambda r: r.update(version=9), "version"),
        (lambda r: r.update(source="nvidia"), "source"),
        (lambda r: r["gpus"]["0"].update(series=[[1.0, 101, 5, None, None]]), "gpus.0.series[0][1]"),
        (lambda r: r["gpus"]["0"].update(series=[[1.0, 5, -1, None, None]]), "gpus.0.series[0][2]"),
        (lambda r: r["gpus"]["0"].update(series=[[1.0, 5, 1, None]]), "gpus.0.series[0]"),
        (lambda r: r["gpus"]["0"].update(series=[[1.0, 5, 1, None, None]] * 100), "gpus.0.series"),
        (lambda r: r["gpus"]["0"].update(processes=[{"pid": "1"}]), "gpus.0.processes[0].pid"),
        (lambda r: r["gpus"].update({"x": {}}), "gpus.x"),
    ],
)
def test_a_bad_record_is_refused_naming_its_key(mutate, key):
    ring = TelemetryRing("gpu-a", "nvml")
    ring.add(sample_gpus([_gpu(0, [(5, GIB)])], {}, now=10.0, user_of=lambda pid: ""))
    record = ring.to_dict()
    mutate(record)
    with pytest.raises(BadRecordError, match=re.escape(f"host record: key '{key}'")):
        read_telemetry_record(record, "host record")


def test_a_host_sample_attributes_a_real_child_of_a_lease(tmp_path):
    """A real process that a lease's holder started, listed on its GPU by the (simulated) driver with more memory
    than the lease reserved: attributed to the lease and flagged; a colleague's process is not ours."""
    usage = tmp_path / "usage.json"
    manager = LeaseManager(SimulatedInventory("2x24GiB", usage_file=str(usage)), str(tmp_path / "leases"))
    lease = manager.acquire(GPURequest(gpus=1, gpu_memory="4GiB"), "test", timeout=5)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], start_new_session=True)
    # a colleague's process: not a descendant of this (the lease's holder) process, as another user's would be
    colleague = start_foreign_process(60)
    try:
        manager.record_child(lease, child.pid)
        gpu = lease.gpus[0]
        usage.write_text(
            json.dumps(
                {
                    str(gpu): {
                        "memory_used": "9GiB",
                        "utilization": 87,
                        "processes": [
                            {"pid": child.pid, "used_memory": "6GiB"},
                            {"pid": colleague, "used_memory": "3GiB"},
                        ],
                    }
                }
            )
        )
        ring = TelemetryRing("gpu-a", manager.inventory.source)
        sampler = HostSampler(ring, lambda: sample_host(manager), every=0.05).start()
        time.sleep(0.3)
        sampler.stop()
        assert sampler.error == ""
        measured = measured_gpus(read_telemetry_record(ring.to_dict(), "ring"))[gpu]
        assert measured["simulated"] and measured["utilization"] == 87 and measured["memory_used"] == 9 * GIB
        assert measured["temperature"] == 30 + 87 // 3  # made up, and said to be: simulated
        by_pid = {p["pid"]: p for p in measured["processes"]}
        assert by_pid[child.pid]["lease_id"] == lease.lease_id and by_pid[child.pid]["ours"]
        assert by_pid[colleague]["lease_id"] == "" and not by_pid[colleague]["ours"]
        assert over_reservation(lease_memory(measured["processes"], lease.lease_id), lease.memory[gpu], lease.whole)
    finally:
        child.kill()
        child.wait()
        os.kill(colleague, signal.SIGKILL)
        manager.release(lease)


def test_a_sampler_survives_a_failing_inventory(tmp_path):
    usage = tmp_path / "usage.json"
    usage.write_text("{not json")
    inventory = SimulatedInventory("1x24GiB", usage_file=str(usage))
    ring = TelemetryRing("gpu-a", "simulated")
    sampler = HostSampler(ring, lambda: sample_gpus(inventory.gpus(), {}), every=0.05).start()
    assert "not a valid simulated-usage JSON file" in sampler.error and sampler.running()
    usage.write_text(json.dumps({"0": {"utilization": 12}}))
    deadline = time.monotonic() + 5
    while sampler.error and time.monotonic() < deadline:
        time.sleep(0.05)
    sampler.stop()
    assert sampler.error == "" and ring.to_dict()["gpus"]["0"]["series"][-1][1] == 12


def test_a_bad_simulated_figure_is_refused_naming_file_and_key(tmp_path):
    usage = tmp_path / "usage.json"
    usage.write_text(json.dumps({"1": {"utilization": "busy"}}))
    with pytest.raises(GPUInventoryError, match=r"usage.json: key 1.utilization: expected a number from 0 to 100"):
        SimulatedInventory("2x24GiB", usage_file=str(usage)).gpus()


def test_fleet_hosts_publish_their_rings_and_the_head_node_reads_them_checked(tmp_path):
    from airflow_provider_gpusched.core.fleet import publish_telemetry, read_fleet_telemetry, telemetry_dir

    folder = str(tmp_path / "fleet")
    now = time.time()
    for host in ("gpu-a", "gpu-b"):
        ring = TelemetryRing(host, "nvml")
        ring.add(sample_gpus([_gpu(0, [(7, GIB)])], {}, now=now - 5, user_of=lambda pid: ""))
        path = publish_telemetry(folder, ring.to_dict())
        assert oct(os.stat(path).st_mode & 0o777) == "0o644"
    old = TelemetryRing("gpu-old", "nvml")
    old.add(sample_gpus([_gpu(0)], {}, now=now - 3600, user_of=lambda pid: ""))
    publish_telemetry(folder, old.to_dict())
    with open(os.path.join(telemetry_dir(folder), "gpu-c.json"), "w") as fh:
        json.dump({**ring.to_dict(), "host": "gpu-c"} | {"gpus": {"0": {"memory_total": -1}}}, fh)
    with open(os.path.join(telemetry_dir(folder), "gpu-d.json"), "w") as fh:
        json.dump({**ring.to_dict()}, fh)  # says it is gpu-b
    found, bad = read_fleet_telemetry(folder, now=now)
    assert sorted(found) == ["gpu-a", "gpu-b"]  # gpu-old's newest sample is an hour old
    assert any("gpu-c.json: key 'gpus.0.memory_total'" in b for b in bad), bad
    assert any("gpu-d.json: key 'host': expected 'gpu-d'" in b for b in bad), bad
    with pytest.raises(Exception, match="host"):
        publish_telemetry(folder, {**ring.to_dict(), "host": "../etc"})
