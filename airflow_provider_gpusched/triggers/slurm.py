"""SlurmJobTrigger: waits in the triggerer for a Slurm job to finish.

Every trigger in one triggerer process that talks to the same cluster shares one
:class:`~airflow_provider_gpusched.core.slurm.SharedJobPoller`: N deferred tasks cost one ``squeue``
call per poll interval, not N. The trigger carries how to reach Slurm as plain data (no connection
lookup in the triggerer). If the user kills the task (mark failed, clear), :meth:`on_kill` cancels the job.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_provider_gpusched import metrics
from airflow_provider_gpusched.core import options
from airflow_provider_gpusched.core.errors import GpuschedError
from airflow_provider_gpusched.core.slurm import (
    JobTracker,
    PollProblem,
    SharedJobPoller,
    client_from_description,
    transport_from_description,
)
from airflow_provider_gpusched.core.slurm.output import OutputFollower, follows_output
from airflow_provider_gpusched.hooks.slurm import rest_token
from airflow_provider_gpusched.triggers.deferral import hold_until


class SlurmJobTrigger(BaseTrigger):
    def __init__(
        self,
        job_id: str,
        runner: dict[str, Any],
        poll_interval: float = options.default("slurm_poll_interval"),
        array_size: int | None = None,
        not_found_timeout: float = options.default("slurm_not_found_timeout"),
        cancel_on_kill: bool = True,
        output_path: str = "",
        fire_after: float | None = None,
        follow_output: bool = True,
        chain: bool = False,
    ) -> None:
        super().__init__()
        self.chain = chain
        self.follow_output = follow_output
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
                "follow_output": self.follow_output,
                "chain": self.chain,
            },
        )

    def _poller(self, token: str | None) -> SharedJobPoller:
        key = json.dumps(self.runner, sort_keys=True)
        poller = SharedJobPoller.shared(key, lambda: client_from_description(self.runner, token=token))
        if poller.on_poll is None:  # gpusched.slurm_jobs.<partition>.<pending|running> (docs/metrics.md)
            poller.on_poll = metrics.SlurmJobCounts()
        return poller

    def _follower(self) -> OutputFollower | None:
        """The job's output followed into the task log while it runs: one file (not an array's, one per task)."""
        if not follows_output(self.follow_output, self.output_path, self.array_size):
            return None
        return OutputFollower(self.output_path, transport_from_description(self.runner))

    async def _show_output(self, follower: OutputFollower | None, final: bool = False) -> None:
        if follower is None:
            return
        try:
            lines = await asyncio.to_thread(follower.read)
        except (OSError, GpuschedError) as exc:
            self.log.warning("Cannot read the job's output %s now: %s", follower.path, exc)
            return
        for line in lines + (follower.flush() if final else []):
            self.log.info("%s", line)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        tracker = JobTracker(self.job_id, not_found_timeout=self.not_found_timeout, chain=self.chain)
        poller = self._poller(await rest_token(self.runner))
        follower = self._follower()
        self.log.info(
            "Waiting for Slurm job %s (shared poller, every %.0fs)%s",
            self.job_id,
            self.poll_interval,
            f"; its output {self.output_path} follows as it is written" if follower else "",
        )
        async for update in poller.watch(self.job_id, poll_interval=self.poll_interval, array_size=self.array_size):
            if isinstance(update, PollProblem):
                if update.transient or update.consecutive_failures < poller.max_permanent_failures:
                    self.log.warning("Slurm status unavailable (%s); will retry", update.message)
                    continue
                await hold_until(self.fire_after)
                yield TriggerEvent(
                    {
                        "status": "error",
                        "job_id": self.job_id,
                        "output_path": self.output_path,
                        "message": f"cannot query Slurm: {update.message}",
                        "preemptions": tracker.preemptions,
                        "events": tracker.events,
                    }
                )
                return
            for line in tracker.update(update):
                self.log.info("%s", line)
            await self._show_output(follower, final=tracker.done)
            if tracker.done:
                final = tracker.final_status()
                await hold_until(self.fire_after)
                yield TriggerEvent(
                    {
                        "status": "success" if final.phase.is_success else "error",
                        "job_id": self.job_id,
                        "output_path": self.output_path,
                        "job": final.to_dict(),
                        "preemptions": tracker.preemptions,
                        "preemption_events": tracker.preemption_events,
                        "events": tracker.events,
                        "message": final.describe() if not tracker.lost else final.reason,
                        "followed_lines": follower.lines if follower is not None else None,
                    }
                )
                return

    async def on_kill(self) -> None:
        """The user killed the deferred task: cancel the Slurm job (not called on triggerer restarts)."""
        if not self.cancel_on_kill:
            return
        self.log.info("Task killed while deferred: cancelling Slurm job %s", self.job_id)
        client = client_from_description(self.runner, token=await rest_token(self.runner))
        await asyncio.to_thread(client.cancel, [self.job_id])
