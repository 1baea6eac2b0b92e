"""The real-GPU tier (``bash scripts/test-gpu.sh``): NVIDIA GPUs through NVML, CUDA through PyTorch's CUDA build.
CI machines have no GPU and do not run it (``-m "not gpu"`` in pyproject.toml's pytest options). On a machine
where the tier is asked for and there is no usable GPU, every test fails saying so: it is never skipped."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile

import pytest


@pytest.fixture(scope="session")
def nvml_inventory():
    from airflow_provider_gpusched.core.gpu.inventory import GPUInventoryError, NVMLInventory

    if shutil.which("nvidia-smi") is None:
        pytest.fail("the real-GPU tier needs an NVIDIA GPU: nvidia-smi is not on PATH")
    try:
        inventory = NVMLInventory()
        gpus = inventory.gpus()
    except GPUInventoryError as exc:
        pytest.fail(f"the real-GPU tier needs an NVIDIA GPU: {exc}")
    if not gpus:
        pytest.fail("the real-GPU tier needs an NVIDIA GPU: NVML lists none")
    return inventory


@pytest.fixture(scope="session")
def cuda_torch():
    try:
        import torch
    except ImportError:
        pytest.fail("the real-GPU tier needs PyTorch with CUDA (pip install torch: the CUDA build)")
    if not torch.cuda.is_available():
        pytest.fail(f"PyTorch {torch.__version__} sees no CUDA device (is it the CPU build?)")
    return torch


@pytest.fixture
def manager(nvml_inventory, tmp_path):
    from airflow_provider_gpusched.core.gpu.leases import LeaseManager

    state = tempfile.mkdtemp(prefix="gpusched-gpu-tier-", dir=str(tmp_path))
    os.chmod(state, 0o700)
    return LeaseManager(nvml_inventory, state)


def nvidia_smi(*fields: str) -> list[list[str]]:
    out = subprocess.run(
        ["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    return [[cell.strip() for cell in line.split(",")] for line in out.strip().splitlines()]
