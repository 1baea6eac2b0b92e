"""SlurmJobTrigger: waits in the triggerer for a Slurm job to finish.

Every trigger in one triggerer process that talks to the same cluster shares one
:class:`~airflow_provider_gpusched.core.slurm.SharedJobPoller`: N deferred tasks cost one ``squeue``
call per poll interval, not N. The trigger carries how to reach Slurm as plain data (no connection
lookup in the triggerer). If the user kills the task (mark failed, clear), :meth:`on_kill` cancels the job.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, AsyncIterator

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_provider_gpusched.core import options
from airflow_provider_gpusched.core.slurm import (
    JobTracker,
    PollProblem,
    SharedJobPoller,
    SlurmClient,
    runner_from_description,
)
from airflow_provider_gpusched.triggers.deferral import hold_until


class SlurmJobTrigger(BaseTrigger):
    def __init__(
        self,
        job_id: str,
        runner: dict,
        poll_interval: float = options.default("slurm_poll_interval"),
        array_size: int | None = None,
        not_found_timeout: float = options.default("slurm_not_found_timeout"),
        cancel_on_kill: bool = True,
        output_path: str = "",
        fire_after: float | None = None,
    ) -> None:
        super().__init__()
        self.fire_after = fire_after
        self.job_id = str(job_id)
        self.runner = dict(runner)
        self.poll_interval = float(poll_interval)
        self.array_size = array_size
        self.not_found_timeout = float(not_found_timeout)
        self.cancel_on_kill = cancel_on_kill
        self.output_path = output_path

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "job_id": self.job_id,
                "runner": self.runner,
                "poll_interval": self.poll_interval,
                "array_size": self.array_size,
                "not_found_timeout": self.not_found_timeout,
                "cancel_on_kill": self.cancel_on_kill,
                "output_path": self.output_path,
                "fire_after": self.fire_after,
            },
        )

    def _poller(self) -> SharedJobPoller:
        key = json.dumps(self.runner, sort_keys=True)
        return SharedJobPoller.shared(key, lambda: SlurmClient(runner_from_description(self.runner)))

    async def run(self) -> AsyncIterator[TriggerEvent]:
        tracker = JobTracker(self.job_id, not_found_timeout=self.not_found_timeout)
        poller = self._poller()
        self.log.info("Waiting for Slurm job %s (shared poller, every %.0fs)", self.job_id, self.poll_interval)
        async for update in poller.watch(self.job_id, poll_interval=self.poll_interval,
                                         array_size=self.array_size):
            if isinstance(update, PollProblem):
                if update.transient or update.consecutive_failures < poller.max_permanent_failures:
                    self.log.warning("Slurm status unavailable (%s); will retry", update.message)
                    continue
                await hold_until(self.fire_after)
                yield TriggerEvent({"status": "error", "job_id": self.job_id, "output_path": self.output_path,
                                    "message": f"cannot query Slurm: {update.message}",
                                    "preemptions": tracker.preemptions, "events": tracker.events})
                return
            for line in tracker.update(update):
                self.log.info("%s", line)
            if tracker.done:
                final = tracker.final_status()
                await hold_until(self.fire_after)
                yield TriggerEvent({
                    "status": "success" if final.phase.is_success else "error",
                    "job_id": self.job_id,
                    "output_path": self.output_path,
                    "job": final.to_dict(),
                    "preemptions": tracker.preemptions,
                    "preemption_events": tracker.preemption_events,
                    "events": tracker.events,
                    "message": final.describe() if not tracker.lost else final.reason,
                })
                return

    async def on_kill(self) -> None:
        """The user killed the deferred task: cancel the Slurm job (not called on triggerer restarts)."""
        if not self.cancel_on_kill:
            return
        self.log.info("Task killed while deferred: cancelling Slurm job %s", self.job_id)
        client = SlurmClient(runner_from_description(self.runner))
        await asyncio.to_thread(client.cancel, [self.job_id])
