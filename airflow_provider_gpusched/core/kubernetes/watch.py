"""One watch per cluster and namespace, shared by every deferred task of a process (the triggerer): as Slurm's one
``squeue`` per poll, never one request loop per task.

:class:`SharedJobWatch` lists, then watches, the Jobs and the pods this provider made (label
``gpusched.io/managed=true``) in one namespace, each in a thread of its own, and keeps the newest copy of each. A
task waits on a :class:`Subscription` for its Job's next change (an ``asyncio.Event`` set from the watch thread):
1,000 deferred Jobs cost two watch connections and a relist when the server says the watch is too old (410 Gone),
not 1,000 polls. ``stats`` counts the requests made (bench/kubernetes_watch.py compares them with the cncf
provider's trigger).

Pure Python, no Airflow imports; the ``kubernetes`` client is imported when a watch starts.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_gpusched.core.kubernetes.access import ClusterAccess
from airflow_provider_gpusched.core.kubernetes.job_spec import MANAGED_LABEL

log = logging.getLogger(__name__)
#: a watch request's server-side timeout: the server ends it, the thread starts the next from the last version
WATCH_SECONDS = 240
#: a watch with no subscriber for this long stops (started again by the next subscriber)
IDLE_STOP_SECONDS = 120.0


@dataclass
class Subscription:
    """One Job's changes, for one waiting task: :meth:`changed` returns when the Job or one of its pods changed
    (or the watch relisted), or after ``timeout``."""

    watch: SharedJobWatch
    name: str
    loop: asyncio.AbstractEventLoop
    event: asyncio.Event = field(default_factory=asyncio.Event)
    closed: bool = False

    def notify(self) -> None:
        self.loop.call_soon_threadsafe(self.event.set)

    async def changed(self, timeout: float) -> bool:
        try:
            await asyncio.wait_for(self.event.wait(), timeout)
        except asyncio.TimeoutError:
            return False
        self.event.clear()
        return True

    def snapshot(self) -> tuple[bool, dict[str, Any] | None, list[dict[str, Any]]]:
        """(whether the watch has listed once, the Job or None, its pods) as the watch last saw them."""
        return self.watch.snapshot(self.name)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.watch.unsubscribe(self)


class SharedJobWatch:
    """The Jobs and pods of one namespace of one cluster, kept up to date by two watch threads."""

    _shared: dict[str, SharedJobWatch] = {}
    _lock = threading.Lock()

    def __init__(self, access: ClusterAccess, namespace: str, client_factory: Callable[[], Any] | None = None) -> None:
        self.access = access
        self.namespace = namespace
        self.client_factory = client_factory or access.api_client
        self.jobs: dict[str, dict[str, Any]] = {}
        self.pods: dict[str, dict[str, dict[str, Any]]] = {}  # job name -> pod name -> pod
        self.listed = {"jobs": False, "pods": False}
        self.subscribers: dict[str, list[Subscription]] = {}
        self.stats: Counter[str] = Counter()
        self.state_lock = threading.Lock()
        self.stop_event = threading.Event()
        self.threads: list[threading.Thread] = []
        self.idle_since: float | None = None
        self.problem = ""

    # -- one per process -----------------------------------------------------------------------------------------
    @classmethod
    def shared(cls, access: ClusterAccess, namespace: str) -> SharedJobWatch:
        key = json.dumps([access.to_dict(), namespace], sort_keys=True)
        with cls._lock:
            watch = cls._shared.get(key)
            if watch is None or watch.stop_event.is_set():
                watch = cls._shared[key] = cls(access, namespace)
            watch.start()
            return watch

    @classmethod
    def stop_all(cls) -> None:
        with cls._lock:
            for watch in cls._shared.values():
                watch.stop()
            cls._shared.clear()

    def start(self) -> None:
        if self.threads and all(t.is_alive() for t in self.threads):
            return
        self.stop_event.clear()
        self.threads = [
            threading.Thread(
                target=self._run, args=(kind,), name=f"gpusched-k8s-watch-{kind}-{self.namespace}", daemon=True
            )
            for kind in ("jobs", "pods")
        ]
        for t in self.threads:
            t.start()

    def stop(self) -> None:
        self.stop_event.set()

    # -- subscribers ---------------------------------------------------------------------------------------------
    def subscribe(self, name: str, loop: asyncio.AbstractEventLoop | None = None) -> Subscription:
        sub = Subscription(self, name, loop or asyncio.get_running_loop())
        with self.state_lock:
            self.subscribers.setdefault(name, []).append(sub)
            self.idle_since = None
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        with self.state_lock:
            subs = self.subscribers.get(sub.name, [])
            if sub in subs:
                subs.remove(sub)
            if not subs:
                self.subscribers.pop(sub.name, None)
            if not self.subscribers:
                self.idle_since = time.monotonic()

    def snapshot(self, name: str) -> tuple[bool, dict[str, Any] | None, list[dict[str, Any]]]:
        with self.state_lock:
            listed = self.listed["jobs"] and self.listed["pods"]
            return listed, self.jobs.get(name), list(self.pods.get(name, {}).values())

    def _notify(self, names: Any) -> None:
        with self.state_lock:
            subs = [s for n in names for s in self.subscribers.get(n, [])]
        for s in subs:
            s.notify()

    # -- the watch threads ---------------------------------------------------------------------------------------
    def _run(self, kind: str) -> None:
        from kubernetes import client, watch
        from kubernetes.client.exceptions import ApiException

        api = self.client_factory()
        batch, core = client.BatchV1Api(api), client.CoreV1Api(api)
        lister = batch.list_namespaced_job if kind == "jobs" else core.list_namespaced_pod
        selector = f"{MANAGED_LABEL}=true"
        backoff = 1.0
        version = ""
        try:
            while not self.stop_event.is_set():
                if self._idle_too_long():
                    log.info("no task waits on the %s watch of %s any more: stopped", kind, self.namespace)
                    self.stop_event.set()
                    break
                try:
                    if not version:
                        listed = lister(self.namespace, label_selector=selector, _request_timeout=60)
                        self.stats[f"list {kind}"] += 1
                        version = listed.metadata.resource_version
                        self._replace(kind, [api.sanitize_for_serialization(o) for o in listed.items])
                    w = watch.Watch()
                    self.stats[f"watch {kind}"] += 1
                    for event in w.stream(
                        lister, self.namespace, label_selector=selector, resource_version=version,
                        timeout_seconds=WATCH_SECONDS, allow_watch_bookmarks=True, _request_timeout=WATCH_SECONDS + 30,
                    ):  # fmt: skip
                        if self.stop_event.is_set():
                            w.stop()
                            break
                        obj = event["raw_object"]
                        version = (obj.get("metadata") or {}).get("resourceVersion", version)
                        if event["type"] == "BOOKMARK":
                            continue
                        if event["type"] == "ERROR":
                            raise ApiException(status=obj.get("code", 500), reason=obj.get("reason", ""))
                        self._apply(kind, event["type"], obj)
                    backoff = 1.0
                    self.problem = ""
                except ApiException as exc:
                    if exc.status == 410:  # too old a version: list again
                        self.stats[f"relist {kind}"] += 1
                        version = ""
                        continue
                    self._trouble(kind, f"{exc.status} {exc.reason}", backoff)
                    version = ""
                    backoff = min(backoff * 2, 30.0)
                except Exception as exc:  # noqa: BLE001 - a connection lost or a thread's bug: say it, list again
                    self._trouble(kind, repr(exc), backoff)
                    version = ""
                    backoff = min(backoff * 2, 30.0)
        finally:
            api.close()

    def _idle_too_long(self) -> bool:
        with self.state_lock:
            return self.idle_since is not None and time.monotonic() - self.idle_since > IDLE_STOP_SECONDS

    def _trouble(self, kind: str, what: str, backoff: float) -> None:
        self.problem = f"the {kind} watch of namespace {self.namespace}: {what} (again in {backoff:.0f} s)"
        log.warning("%s", self.problem)
        self.stats[f"errors {kind}"] += 1
        self.stop_event.wait(backoff)

    @staticmethod
    def _job_of(kind: str, obj: dict[str, Any]) -> str:
        meta = obj.get("metadata") or {}
        if kind == "jobs":
            return str(meta.get("name", ""))
        labels = meta.get("labels") or {}
        return str(labels.get("batch.kubernetes.io/job-name") or labels.get("job-name") or "")

    def _replace(self, kind: str, items: list[dict[str, Any]]) -> None:
        with self.state_lock:
            if kind == "jobs":
                before = set(self.jobs)
                self.jobs = {self._job_of(kind, o): o for o in items}
                touched = before | set(self.jobs)
            else:
                before = set(self.pods)
                self.pods = {}
                for o in items:
                    self.pods.setdefault(self._job_of(kind, o), {})[o["metadata"]["name"]] = o
                touched = before | set(self.pods)
            self.listed[kind] = True
        self._notify(touched | set(self.subscribers))

    def _apply(self, kind: str, what: str, obj: dict[str, Any]) -> None:
        job = self._job_of(kind, obj)
        with self.state_lock:
            if kind == "jobs":
                if what == "DELETED":
                    self.jobs.pop(job, None)
                else:
                    self.jobs[job] = obj
            else:
                pods = self.pods.setdefault(job, {})
                if what == "DELETED":
                    pods.pop(obj["metadata"]["name"], None)
                else:
                    pods[obj["metadata"]["name"]] = obj
        self._notify([job])
