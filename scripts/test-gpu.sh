#!/usr/bin/env bash
# The real-GPU tier: the tests marked `gpu` (tests/real_gpu/), on a machine with NVIDIA GPUs, a driver and
# PyTorch's CUDA build. CI does not run it (it has no GPU). Arguments go to pytest.
#   bash scripts/test-gpu.sh            # sets up .venv (scripts/bootstrap.sh) unless GPUSCHED_PYTHON names a Python
#   GPUSCHED_PYTHON=/opt/venv/bin/python bash scripts/test-gpu.sh -x
# Writes what it saw (device, driver, CUDA, PyTorch, each test's outcome) to stdout; docs/local-gpus.md keeps
# the latest results.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
if [ -n "${GPUSCHED_PYTHON:-}" ]; then
  python="$GPUSCHED_PYTHON"
else
  source "$here/scripts/bootstrap.sh"
  python="$here/.venv/bin/python"
fi
command -v nvidia-smi >/dev/null || { echo "[test-gpu] no nvidia-smi: this tier needs NVIDIA GPUs and their driver" >&2; exit 2; }
"$python" -c 'import pydantic, yaml, psutil, cloudpickle' 2>/dev/null || {
  echo "[test-gpu] $python lacks a dependency of the package's core (pydantic, pyyaml, psutil, cloudpickle):" \
    "install them (pip install 'pydantic>=2.11' pyyaml psutil cloudpickle) or point GPUSCHED_PYTHON at a Python" \
    "that has them" >&2
  exit 2
}
echo "=== devices"
nvidia-smi --query-gpu=index,name,memory.total,pci.bus_id,driver_version --format=csv
nvidia-smi | sed -n 's/.*\(CUDA Version: [0-9.]*\).*/\1/p' | head -1
"$python" -c 'import torch; print("PyTorch", torch.__version__, "CUDA build", torch.version.cuda, "sees", torch.cuda.device_count(), "device(s)")'
echo "=== tests (marked gpu)"
exec "$python" -m pytest -m gpu tests/real_gpu -v -s "$@"
