"""KubernetesJobTrigger: waits in the triggerer for a Kubernetes Job to end.

Every trigger of one triggerer process that waits on Jobs of the same namespace of the same cluster shares one
:class:`~airflow_provider_gpusched.core.kubernetes.watch.SharedJobWatch` (a Job watch and a pod watch): N deferred
tasks cost two watch connections, not N polls. The container's log is followed into the task's log while it
runs (the triggerer writes a trigger's log into its task's). If the user kills the deferred task (mark failed,
clear), :meth:`on_kill` deletes the Job and its pods; a triggerer restart does not (the Job goes on, the next
triggerer watches it).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_provider_gpusched.core.kubernetes.access import ClusterAccess
from airflow_provider_gpusched.core.kubernetes.jobs import JobClient
from airflow_provider_gpusched.core.kubernetes.states import UnschedulableClock
from airflow_provider_gpusched.core.kubernetes.watch import SharedJobWatch
from airflow_provider_gpusched.triggers.deferral import hold_until


class KubernetesJobTrigger(BaseTrigger):
    def __init__(
        self,
        name: str,
        namespace: str,
        kubernetes_conn_id: str | None = None,
        access: dict[str, Any] | None = None,
        container: str | None = None,
        max_disruptions: int | None = 3,
        unschedulable_timeout: float | None = 600.0,
        stream_logs: bool = True,
        fire_after: float | None = None,
        delete_on_kill: bool = True,
        check_interval: float = 15.0,
    ) -> None:
        super().__init__()
        self.name = name
        self.namespace = namespace
        self.kubernetes_conn_id = kubernetes_conn_id
        self.access = dict(access) if access else None
        self.container = container
        self.max_disruptions = max_disruptions
        self.unschedulable_timeout = unschedulable_timeout
        self.stream_logs = stream_logs
        self.fire_after = fire_after
        self.delete_on_kill = delete_on_kill
        self.check_interval = float(check_interval)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "name": self.name,
                "namespace": self.namespace,
                "kubernetes_conn_id": self.kubernetes_conn_id,
                "access": self.access,
                "container": self.container,
                "max_disruptions": self.max_disruptions,
                "unschedulable_timeout": self.unschedulable_timeout,
                "stream_logs": self.stream_logs,
                "fire_after": self.fire_after,
                "delete_on_kill": self.delete_on_kill,
                "check_interval": self.check_interval,
            },
        )

    async def cluster_access(self) -> ClusterAccess:
        if self.access is not None:
            return ClusterAccess(**self.access)
        from asgiref.sync import sync_to_async

        from airflow_provider_gpusched.hooks.kubernetes import KubernetesGpuHook

        hook = KubernetesGpuHook(self.kubernetes_conn_id or KubernetesGpuHook.default_conn_name)
        return await sync_to_async(hook.access)()

    async def run(self) -> AsyncIterator[TriggerEvent]:
        access = await self.cluster_access()
        watch = SharedJobWatch.shared(access, self.namespace)
        sub = watch.subscribe(self.name)
        said = ""
        clock = UnschedulableClock(self.unschedulable_timeout)
        follower: _LogFollower | None = None
        try:
            while True:
                listed, job, pods = sub.snapshot()
                if not listed and watch.problem and watch.problem != said:  # e.g. not allowed to watch pods
                    said = watch.problem
                    self.log.warning("%s", said)
                if listed and job is None:  # created after the watch's list, its event not here yet: read it
                    job = await asyncio.to_thread(_read_job, access, self.name, self.namespace)
                if listed:
                    view = clock.classify(
                        job,
                        pods,
                        name=self.name,
                        namespace=self.namespace,
                        container=self.container,
                        max_disruptions=self.max_disruptions,
                    )
                    if view.describe != said:
                        said = view.describe
                        self.log.info("%s", said)
                    running = [p for p in view.pods if p.phase == "Running" and not p.disruption]
                    if self.stream_logs and running and (follower is None or follower.pod != running[-1].name):
                        if follower is not None:
                            follower.stop()
                        follower = _LogFollower(access, running[-1].name, self.namespace, self.container, self.log)
                    if view.phase.is_terminal:
                        if follower is not None:
                            await asyncio.to_thread(follower.finish, 10.0)
                        await hold_until(self.fire_after)
                        yield TriggerEvent(
                            {
                                "status": view.phase.value,
                                "name": self.name,
                                "namespace": self.namespace,
                                "message": view.message,
                                "failure": view.failure.kind if view.failure else None,
                                "retry": view.failure.retry if view.failure else None,
                                "node": view.node,
                                "disruptions": view.disruptions,
                                "logged": follower is not None,
                                "pods": [p.name for p in view.pods],
                            }
                        )
                        return
                await sub.changed(timeout=self.check_interval)
        finally:
            sub.close()
            if follower is not None:
                follower.stop()

    async def on_kill(self) -> None:
        """The user killed the deferred task: delete its Job and pods (not called on triggerer restarts)."""
        if not self.delete_on_kill:
            return
        self.log.info("Task killed while deferred: deleting Job %s/%s", self.namespace, self.name)
        access = await self.cluster_access()
        await asyncio.to_thread(_delete_job, access, self.name, self.namespace)


def _read_job(access: ClusterAccess, name: str, namespace: str) -> dict[str, Any] | None:
    with JobClient(access) as client:
        return client.read_job(name, namespace)


def _delete_job(access: ClusterAccess, name: str, namespace: str) -> None:
    with JobClient(access) as client:
        client.delete(name, namespace)


class _LogFollower:
    """A pod's log followed into the task's log from a thread of its own, until the container ends."""

    def __init__(self, access: ClusterAccess, pod: str, namespace: str, container: str | None, log: Any) -> None:
        self.pod = pod
        self.stopping = threading.Event()
        self.lines = 0
        self.thread = threading.Thread(
            target=self._run, args=(access, namespace, container, log), name=f"gpusched-k8s-log-{pod}", daemon=True
        )
        self.thread.start()

    def _run(self, access: ClusterAccess, namespace: str, container: str | None, log: Any) -> None:
        try:
            with JobClient(access) as client:
                for line in client.follow_log(self.pod, namespace, container=container):
                    if self.stopping.is_set():
                        break
                    self.lines += 1
                    log.info("[%s] %s", self.pod, line)
        except Exception as exc:  # noqa: BLE001 - the log is a convenience: the task's outcome does not depend on it
            log.info("the log of pod %s could not be followed: %s", self.pod, exc)

    def finish(self, timeout: float) -> None:
        self.thread.join(timeout)
        self.stopping.set()

    def stop(self) -> None:
        self.stopping.set()
