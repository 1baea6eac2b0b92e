"""GPUAvailableSensor: wait until a GPU request would fit on this host."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseSensorOperator

from airflow_provider_gpusched import settings
from airflow_provider_gpusched.core.gpu.placement import GPURequest
from airflow_provider_gpusched.hooks.local_gpu import LocalGPUHook
from airflow_provider_gpusched.triggers.local_gpu import GPUAvailableTrigger


class GPUAvailableSensor(BaseSensorOperator):
    """Succeeds once ``gpus`` GPUs (or ``gpu_memory`` on each) are free; reserves nothing.

    Deferrable by default (the triggerer must run on the GPU host); ``deferrable=False`` pokes.
    """

    def __init__(
        self,
        *,
        gpus: int = 1,
        gpu_memory: int | str | None = None,
        devices: Sequence[int] | None = None,
        max_foreign_processes: int | None = None,
        deferrable: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.request = GPURequest(
            gpus=gpus, gpu_memory=gpu_memory, devices=devices, max_foreign_processes=max_foreign_processes
        )
        self.deferrable = deferrable

    def execute(self, context) -> Any:
        if not self.deferrable or self.poke(context):
            return super().execute(context) if not self.deferrable else None
        hook = LocalGPUHook()
        self.defer(
            trigger=GPUAvailableTrigger(
                request=dataclasses.asdict(self.request),
                simulate=hook.simulate or None,
                state_dir=hook.get_conn().state_dir,
                poll_interval=self.poke_interval or settings.gpu_poll_interval(),
                fire_after=time.time() + settings.min_deferral(),
            ),
            method_name="execute_complete",
            timeout=self.execution_timeout,
        )

    def poke(self, context) -> bool:
        manager = LocalGPUHook().get_conn()
        manager.check_possible(self.request)
        why = manager.why_not(self.request)
        if why:
            self.log.info("Not yet: %s", why)
        return not why

    def execute_complete(self, context, event: dict[str, Any]) -> None:
        self.log.info("GPUs available for %s", self.request.describe())
