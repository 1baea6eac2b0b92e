"""On real NVIDIA GPUs: NVML's inventory, CUDA_VISIBLE_DEVICES as PyTorch sees it, memory packing, a real CUDA
out-of-memory error retried with a bigger reservation, the GPU board's view of a real lease, and the digits
example training on the GPU. Run with ``bash scripts/test-gpu.sh``; results go to docs/local-gpus.md."""

from __future__ import annotations

import dataclasses
import json
import sys
import threading
import time

import pytest

from airflow_provider_gpusched.core.gpu.placement import GPURequest
from airflow_provider_gpusched.core.gpu.supervisor import GPUWorkSupervisor, Work
from airflow_provider_gpusched.core.pyfunc import write_call

from .conftest import nvidia_smi

MiB = 1024**2
pytestmark = pytest.mark.gpu


def test_nvml_inventory_matches_nvidia_smi(nvml_inventory):
    rows = nvidia_smi("index", "uuid", "name", "memory.total", "pci.bus_id")
    gpus = nvml_inventory.gpus()
    assert [g.index for g in gpus] == [int(r[0]) for r in rows]
    assert [g.uuid for g in gpus] == [r[1] for r in rows]
    assert [g.name for g in gpus] == [r[2] for r in rows]
    assert [g.memory_total // MiB for g in gpus] == [int(r[3]) for r in rows]
    assert not any(g.simulated for g in gpus)
    # NVML's indices follow PCI bus order, as CUDA's do under CUDA_DEVICE_ORDER=PCI_BUS_ID
    buses = [r[4] for r in rows]
    assert buses == sorted(buses)


def _visible_devices() -> list[dict]:
    import torch

    out = []
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        out.append({"uuid": "GPU-" + str(p.uuid), "pci_bus_id": p.pci_bus_id, "name": p.name})
    return out


def test_cuda_visible_devices_makes_pytorch_see_exactly_the_leased_gpus_in_pci_order(manager, cuda_torch, tmp_path):
    gpus = manager.inventory.gpus()
    wanted = [gpus[-1].index] if len(gpus) == 1 else [gpus[-1].index, gpus[0].index]  # out of order on purpose
    call_dir = str(tmp_path / "call")
    write_call(call_dir, _visible_devices)
    result = GPUWorkSupervisor(manager).run(
        GPURequest(gpus=len(wanted), devices=wanted), Work(call_dir=call_dir), str(tmp_path / "log")
    )
    leased = sorted(result.gpus, key=lambda g: g["index"])
    seen = result.value
    assert [d["uuid"] for d in seen] == [g["uuid"] for g in leased]  # these GPUs, no others, in PCI order
    assert [d["pci_bus_id"] for d in seen] == sorted(d["pci_bus_id"] for d in seen)


def _hold_memory(nbytes: int, seconds: float) -> dict:
    import os
    import time

    import torch

    torch.cuda.set_per_process_memory_fraction(float(os.environ["GPUSCHED_GPU_MEMORY_FRACTION"]), 0)
    block = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    block.fill_(1)
    torch.cuda.synchronize()
    started = time.time()
    time.sleep(seconds)
    from airflow_provider_gpusched.core.sweep.records.store import where_running  # what a trial's status.json records

    return {
        "started": started,
        "ended": time.time(),
        "allocated": torch.cuda.memory_allocated(),
        "gpu_share": where_running()["gpu_share"],
    }


def test_two_trials_share_one_gpu_in_their_slices_and_a_third_that_does_not_fit_waits(manager, cuda_torch, tmp_path):
    gpu = manager.inventory.gpus()[0]
    slice_bytes = int(gpu.memory_total * 0.4) // MiB * MiB
    hold = slice_bytes // 2  # what each trial really allocates, inside its slice
    results: dict = {}

    def trial(name: str, seconds: float) -> None:
        call_dir = str(tmp_path / name)
        write_call(call_dir, _hold_memory, (hold, seconds))
        results[name] = GPUWorkSupervisor(manager, owner=name, poll_interval=0.2, sample_interval=0.2).run(
            GPURequest(gpu_memory=slice_bytes, devices=[gpu.index]),
            Work(call_dir=call_dir),
            str(tmp_path / f"{name}.log"),
        )

    threads = [threading.Thread(target=trial, args=(n, 8.0)) for n in ("a", "b")]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 60
    while len(manager.leases()) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(manager.leases()) == 2  # both slices on the one GPU at once
    # both allocate once PyTorch and CUDA are up in each child (seconds on a cold machine): NVML then shows both
    # blocks on that GPU, while both hold their slices
    deadline = time.monotonic() + 60
    used = next(g for g in manager.inventory.gpus() if g.index == gpu.index)
    while used.memory_used < 2 * hold and time.monotonic() < deadline and len(manager.leases()) == 2:
        time.sleep(0.2)
        used = next(g for g in manager.inventory.gpus() if g.index == gpu.index)
    assert used.memory_used >= 2 * hold
    third = threading.Thread(target=trial, args=("c", 0.5))
    asked = time.time()
    third.start()
    for t in [*threads, third]:
        t.join(180)
    assert all(results[n].exit_code == 0 for n in "abc")
    a, b, c = (results[n].value for n in "abc")
    assert a["started"] < b["ended"] and b["started"] < a["ended"]  # a and b overlapped
    assert c["started"] >= min(a["ended"], b["ended"]) > asked  # c waited for a slice to be given back
    # GPU time counts each slice as its share of the GPU (0.4 here), not as a whole GPU: a and b together held
    # less than one GPU for their overlap
    fraction = slice_bytes / gpu.memory_total
    for name in "abc":
        attempt = results[name].attempts[-1]
        assert attempt.gpu_seconds == pytest.approx(fraction * attempt.seconds, rel=0.01)
        assert results[name].value["gpu_share"] == pytest.approx(fraction, abs=1e-3)
        print(
            f"[slices] trial {name}: {attempt.seconds:.2f} s on a {fraction:.2f} slice -> "
            f"{attempt.gpu_seconds:.2f} GPU-s"
        )


def _allocate(nbytes: int) -> int:
    import os

    import torch

    fraction = os.environ.get("GPUSCHED_GPU_MEMORY_FRACTION")
    if fraction:
        torch.cuda.set_per_process_memory_fraction(float(fraction), 0)
    block = torch.empty(nbytes, dtype=torch.uint8, device="cuda")  # a real torch.cuda.OutOfMemoryError
    return int(block.numel())


def test_a_real_cuda_out_of_memory_error_is_retried_with_a_bigger_reservation(manager, cuda_torch, tmp_path):
    from airflow_provider_gpusched.core.gpu.oom import OOMRetryPolicy

    gpu = manager.inventory.gpus()[0]
    reserve = 2 * 1024 * MiB
    need = int(2.5 * 1024 * MiB)  # more than the first slice, less than the second (x 1.5 = 3 GiB)
    call_dir = str(tmp_path / "call")
    write_call(call_dir, _allocate, (need,))
    result = GPUWorkSupervisor(manager, oom_policy=OOMRetryPolicy(retries=2, factor=1.5)).run(
        GPURequest(gpu_memory=reserve, devices=[gpu.index]), Work(call_dir=call_dir), str(tmp_path / "log")
    )
    assert result.value == need
    first, *rest = result.attempts
    assert first.oom and "out of memory" in first.oom.lower()
    assert result.oom_retries >= 1 and rest[-1].oom is None
    assert first.request.startswith("2.0GiB") and rest[0].request.startswith("3.0GiB")  # 1.5 x the first


def test_the_gpu_board_shows_the_real_gpu_and_what_a_running_task_holds(manager, cuda_torch, tmp_path):
    from airflow_provider_gpusched.core.board import build_board, lease_record, read_lease_record

    gpu = manager.inventory.gpus()[0]
    call_dir = str(tmp_path / "call")
    write_call(call_dir, _hold_memory, (512 * MiB, 6.0))
    box: dict = {}
    thread = threading.Thread(
        target=lambda: box.update(
            r=GPUWorkSupervisor(manager, sample_interval=0.2).run(
                GPURequest(gpu_memory="2GiB", devices=[gpu.index]), Work(call_dir=call_dir), str(tmp_path / "log")
            )
        )
    )
    thread.start()
    deadline = time.monotonic() + 60
    while not manager.leases() and time.monotonic() < deadline:
        time.sleep(0.1)
    deadline = time.monotonic() + 60  # until the child has PyTorch and CUDA up and its block allocated
    while (
        manager.leases()
        and time.monotonic() < deadline
        and next(g for g in manager.inventory.gpus() if g.index == gpu.index).memory_used < 512 * MiB
    ):
        time.sleep(0.2)
    (lease,) = manager.leases()
    record = lease_record(
        "this-host", dataclasses.asdict(lease), manager.inventory.gpus(), dag_id="d", run_id="r", task_id="t"
    )
    board = build_board([read_lease_record(record, "record")], waiting=[], now=time.time())
    (host,) = board["hosts"]
    shown = next(g for g in host["gpus"] if g["index"] == gpu.index)
    assert not host["simulated"] and shown["name"] == gpu.name and shown["memory_total"] == gpu.memory_total
    assert shown["memory_leased"] == 2 * 1024 * MiB and shown["leases"][0]["task_id"] == "t"
    measured = next(g for g in manager.inventory.gpus() if g.index == gpu.index)
    assert measured.memory_used >= 512 * MiB  # NVML sees the task's real allocation on that GPU
    thread.join(60)
    assert box["r"].exit_code == 0


def test_the_digits_example_trains_on_the_leased_gpu(manager, cuda_torch, tmp_path):
    from airflow_provider_gpusched.examples.digits import train_digits

    gpu = manager.inventory.gpus()[-1]
    call_dir = str(tmp_path / "call")
    write_call(
        call_dir,
        train_digits,
        (
            {
                "model": "cnn",
                "block0": {"channels": 32, "kernel": 3},
                "block1": {"channels": 64, "kernel": 3},
                "epochs": 8,
                "lr": 0.003,
            },
        ),
    )
    result = GPUWorkSupervisor(manager).run(
        GPURequest(gpu_memory="2GiB", devices=[gpu.index]), Work(call_dir=call_dir), str(tmp_path / "log")
    )
    value = result.value
    assert value["device"].startswith("cuda:0 (") and gpu.name in value["device"]
    assert f"CUDA_VISIBLE_DEVICES={gpu.index}" in value["device"]
    assert value["accuracy"] > 0.9
    print(
        f"digits CNN on {value['device']}: accuracy {value['accuracy']:.3f} in {value['seconds']:.1f}s", file=sys.stderr
    )


def test_gpusched_gpus_reads_nvml_without_airflow_and_shows_a_held_lease(manager, capsys):
    """``gpusched gpus --json`` on the real GPUs: NVML's driver and memory, the lease another process holds, and
    no Airflow import on the way (the lent machine has no Airflow: the import would fail)."""
    from airflow_provider_gpusched import cli

    gpu = manager.inventory.gpus()[0]
    lease = manager.acquire(GPURequest(gpu_memory="1GiB", devices=[gpu.index]), "real-gpu-tier", timeout=30)
    try:
        assert cli.main(["gpus", "--json", "--this-host", "--state-dir", manager.state_dir]) == 0
    finally:
        manager.release(lease)
    shown = json.loads(capsys.readouterr().out)
    (driver,) = {row[0] for row in nvidia_smi("driver_version")}
    assert shown["source"] == "nvml" and shown["driver"] == driver
    by_index = {g["index"]: g for g in shown["gpus"]}
    assert by_index[gpu.index]["uuid"] == gpu.uuid and by_index[gpu.index]["memory_total"] == gpu.memory_total
    assert by_index[gpu.index]["reserved"] == 1024 * MiB
    assert [entry["owner"] for entry in shown["leases"]] == ["real-gpu-tier"]
    assert "airflow" not in sys.modules
    print(f"gpusched gpus: driver {driver}, GPU {gpu.index} {gpu.name}, 1 lease shown", file=sys.stderr)


def test_the_profiler_measures_each_layer_on_the_gpu(cuda_torch):
    """The profiler's CUDA path: layer times after synchronisation, activation memory from CUDA's peak counter."""
    from airflow_provider_gpusched.core.partition.profile import profile_model

    profile = profile_model("convnet", dtype="torch.float16", batch_size=32, device="auto", warmup=2, repeat=5)
    assert profile.device.startswith("cuda:0 (") and cuda_torch.cuda.get_device_name(0) in profile.device
    assert profile.device_memory_mb > 1000
    assert profile.layers and all(lp.time_s > 0 for lp in profile.layers)
    assert any(lp.activation_bytes > 0 for lp in profile.layers)  # torch.cuda.max_memory_allocated saw them
    assert sum(lp.weights_bytes for lp in profile.layers) > 0
    total_ms = 1000 * sum(lp.time_s for lp in profile.layers)
    print(
        f"profile convnet float16 x32 on {profile.device}: {len(profile.layers)} layers, {total_ms:.3f} ms",
        file=sys.stderr,
    )


WAIT_FOR_GPUS = """
import json, os, sys
import torch
from airflow_provider_gpusched import wait_for_gpus
data = torch.randn(1024, 1024)  # the load stage: data in host RAM, CUDA untouched
loading = os.environ["CUDA_VISIBLE_DEVICES"]
gpus = wait_for_gpus()
props = torch.cuda.get_device_properties(0)
y = (data.to("cuda") @ data.to("cuda")).sum().item()
print(json.dumps({"loading": loading, "gpus": gpus, "visible": os.environ["CUDA_VISIBLE_DEVICES"],
                  "count": torch.cuda.device_count(), "uuid": "GPU-" + str(props.uuid), "finite": y == y}),
      flush=True)
"""


def test_wait_for_gpus_hands_the_placed_gpu_to_a_loaded_process(manager, cuda_torch, tmp_path):
    """A two-stage task on the real GPU: no GPU while loading, then exactly the placed GPU, used by CUDA."""
    program = tmp_path / "two_stage.py"
    program.write_text(WAIT_FOR_GPUS)
    lines: list[str] = []
    result = GPUWorkSupervisor(manager, on_line=lines.append).run(
        GPURequest(gpu_memory="2GiB", host_memory="1GiB", load_stage=True),
        Work(argv=[sys.executable, str(program)]),
        str(tmp_path / "log"),
    )
    seen = json.loads(next(line for line in lines if line.startswith("{")))
    (placed,) = result.gpus
    assert seen["loading"] == "" and seen["gpus"] == [placed["index"]] and seen["visible"] == str(placed["index"])
    assert seen["count"] == 1 and seen["uuid"] == placed["uuid"] and seen["finite"]
    attempt = result.attempts[0]
    assert attempt.load_seconds is not None and attempt.gpu_wait_seconds is not None
    print(
        f"wait_for_gpus: loaded in {attempt.load_seconds:.2f}s, then GPU {placed['index']} after "
        f"{attempt.gpu_wait_seconds:.2f}s",
        file=sys.stderr,
    )
