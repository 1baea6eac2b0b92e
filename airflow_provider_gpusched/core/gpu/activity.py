"""When a GPU counts as idle: nothing we do not know about uses it, and has not for a while.

:func:`gpu_is_busy` says what (a colleague's process, or utilisation on a GPU without any lease of ours)
keeps a GPU from counting as quiet under a class's thresholds. :class:`GPUActivity` remembers, per GPU,
when it was last busy (``activity.json`` in the lease directory), so that fill-in work starts only on GPUs
quiet for the class's ``idle_for`` seconds.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence

from airflow_provider_gpusched.core.gpu.class_policy import LocalClassPolicy
from airflow_provider_gpusched.core.gpu.placement import GPUUsage
from airflow_provider_gpusched.core.safe_files import BadRecordError, read_json_record, write_json_atomic
from airflow_provider_gpusched.core.units import format_bytes

ACTIVITY_FILE = "activity.json"


def gpu_is_busy(usage: GPUUsage, policy: LocalClassPolicy) -> str:
    """'' if nothing we do not know about is using the GPU, else what is."""
    if usage.foreign_used > policy.max_foreign_memory:
        return (
            f"GPU {usage.gpu.index}: {usage.foreign_processes or 'unknown'} foreign process(es) use "
            f"{format_bytes(usage.foreign_used)}"
        )
    util = usage.gpu.utilization
    if usage.leases == 0 and util is not None and util > policy.max_utilization:
        return f"GPU {usage.gpu.index}: {util}% utilisation with no lease on it"
    return ""


class GPUActivity:
    """When each GPU was last busy with foreign work (a JSON file, updated under the allocation lock).
    Busy means busy under any of ``policies`` (the fill-in classes' thresholds; the strictest wins)."""

    def __init__(self, state_dir: str, clock: Callable[[], float] = time.time, file_mode: int = 0o600) -> None:
        self.path = os.path.join(state_dir, ACTIVITY_FILE)
        self.clock = clock
        self.file_mode = file_mode

    def _recorded(self) -> dict[int, float]:
        try:  # an unreadable file only means "busy until now": idle work waits, nothing is handed out twice
            return {int(k): float(v) for k, v in read_json_record(self.path).items()}
        except (OSError, BadRecordError, ValueError, TypeError, AttributeError):
            return {}

    def quiet_since(
        self, usage: dict[int, GPUUsage], policies: Sequence[LocalClassPolicy], *, record: bool = True
    ) -> dict[int, float]:
        """Per GPU, since when it has been quiet, counting what is busy now; ``record`` writes that down."""
        now = self.clock()
        data = self._recorded()
        changed = False
        for index, u in usage.items():
            if index not in data or any(gpu_is_busy(u, p) for p in policies):
                data[index] = now
                changed = True
        if changed and record:
            write_json_atomic(self.path, {str(k): v for k, v in data.items()}, self.file_mode)
        return data
