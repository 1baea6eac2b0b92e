"""Recognising GPU out-of-memory failures, and what to ask for next time.

A child that fails with one of these messages in its output (PyTorch, TensorFlow, JAX/XLA, raw CUDA)
ran out of GPU memory; host-RAM problems (``MemoryError``, the kernel OOM killer) do not count. Such a
failure is retried here with a bigger reservation; every other failure goes to Airflow's retries.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from airflow_provider_gpusched.core.checks import is_int, is_number
from airflow_provider_gpusched.core.errors import InvalidArgumentError
from airflow_provider_gpusched.core.gpu.placement import GPURequest

OOM_PATTERNS = [
    re.compile(p, re.IGNORECASE)
    for p in (
        r"CUDA out of memory",  # PyTorch
        r"\b(?:torch\.(?:cuda\.)?)?OutOfMemoryError\b",  # torch.OutOfMemoryError / torch.cuda.OutOfMemoryError
        r"CUDA_ERROR_OUT_OF_MEMORY|cudaErrorMemoryAllocation",  # CUDA driver / runtime
        r"CUBLAS_STATUS_ALLOC_FAILED|CUDNN_STATUS_ALLOC_FAILED",
        r"ResourceExhaustedError",  # TensorFlow
        r"OOM when allocating tensor",  # TensorFlow
        r"RESOURCE_EXHAUSTED:.*(?:out of memory|allocat)",  # XLA / JAX
        r"Out of memory while trying to allocate",  # XLA
        r"failed to allocate .* on device",  # XLA
    )
]


def find_oom(lines: Iterable[str]) -> str | None:
    """The last output line that shows a GPU out-of-memory error, or None. The last, because a traceback echoes
    source lines first (``block = torch.empty(...)  # may raise OutOfMemoryError``) and ends with the error itself
    (``torch.OutOfMemoryError: CUDA out of memory. Tried to allocate ...``), seen on an H100 with PyTorch 2.11."""
    found = None
    for line in lines:
        if any(p.search(line) for p in OOM_PATTERNS):
            found = line.strip()
    return found


def memory_evidence(peaks: dict[int, int], reserved: dict[int, int], threshold: float = 0.95) -> str | None:
    """NVML evidence of an OOM: the child's processes reached ``threshold`` of the reservation on a GPU."""
    for index, peak in sorted(peaks.items()):
        limit = reserved.get(index)
        if limit and peak >= threshold * limit:
            from airflow_provider_gpusched.core.units import format_bytes

            return (
                f"GPU memory evidence: the job's processes used {format_bytes(peak)} of the "
                f"{format_bytes(limit)} reserved on GPU {index}"
            )
    return None


@dataclass
class OOMRetryPolicy:
    """Retry a GPU OOM ``retries`` times: each time reserve ``factor`` x more memory, and the last time
    (or when that would not fit on any GPU) a whole GPU."""

    retries: int = 2
    factor: float = 1.5

    def __post_init__(self) -> None:
        if not is_int(self.retries) or self.retries < 0:
            raise InvalidArgumentError("oom_retries", self.retries, "an integer >= 0")
        if not is_number(self.factor) or not 1 < self.factor < 1e6:
            raise InvalidArgumentError("oom_factor", self.factor, "a number > 1")

    def escalate(self, request: GPURequest, oom_failures: int, gpu_sizes: Sequence[int]) -> GPURequest | None:
        """The request for the next attempt after the ``oom_failures``-th OOM, or None (give up)."""
        if oom_failures > self.retries or request.gpu_memory is None:  # whole GPUs: nothing to grow
            return None
        bigger = int(math.ceil(request.gpu_memory * self.factor))
        largest = max(gpu_sizes) - request.memory_margin if gpu_sizes else 0
        if oom_failures == self.retries or bigger > largest:
            return replace(request, gpu_memory=None)
        return replace(request, gpu_memory=bigger)
