"""What a Kubernetes Job and its pods say, classified: one :class:`JobView` per look, with the rule for each way a
pod fails (its own message and whether a retry, a requeue or nothing helps).

The objects read are the API's JSON (``ApiClient.sanitize_for_serialization`` of the client's models, or a watch
event's raw object), so the same code reads a watch event, a list and a test's manifest.

Ways a Job ends, and what the product does (``FAILURES``):

========================  =================================================================  =================
failure                   seen as                                                            rule
========================  =================================================================  =================
``oom``                   a container terminated with reason ``OOMKilled``                   retry (Airflow)
``exit-code``             a container terminated with a non-zero exit code                   retry (Airflow)
``disrupted``             pod condition ``DisruptionTarget`` (preempted, evicted, node       requeue: the Job
                          lost, deleted by the taint manager)                                makes a new pod
``too-many-disruptions``  more disrupted pods than the spec's ``max_disruptions``            retry (Airflow)
``image``                 waiting reason ``ErrImagePull``, ``ImagePullBackOff``,             fail, no retry
                          ``ErrImageNeverPull``, ``InvalidImageName``
``config``                waiting reason ``CreateContainerConfigError`` (a missing secret    fail, no retry
                          or config map), ``CreateContainerError``
``unschedulable``         ``PodScheduled=False`` reason ``Unschedulable`` past the wait      fail, no retry
                          allowed (the scheduler's message names the resource)
``deadline``              Job condition ``Failed`` reason ``DeadlineExceeded``               fail, no retry
``deleted``               the Job is gone before it ended (deleted by someone)               retry (Airflow)
========================  =================================================================  =================

Pure Python, no Airflow imports.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_gpusched.core.kubernetes.job_spec import GPU_RESOURCE


class JobPhase(str, enum.Enum):
    PENDING = "pending"  # created, no pod running yet (suspended, queued by Kueue, unscheduled, pulling)
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    #: gone before it ended
    DELETED = "deleted"

    @property
    def is_terminal(self) -> bool:
        return self in (JobPhase.SUCCEEDED, JobPhase.FAILED, JobPhase.DELETED)


@dataclass(frozen=True)
class Failure:
    kind: str
    #: retry: Airflow's retries may help; no-retry: the same Job would fail the same way (the task fails at once)
    retry: bool
    summary: str


#: failure kind -> (whether a retry may help, what it means)
FAILURES: dict[str, tuple[bool, str]] = {
    "oom": (True, "a container was killed for memory (OOMKilled): ask for more memory, or a smaller batch"),
    "exit-code": (True, "the command exited with an error"),
    "too-many-disruptions": (True, "its pods were disrupted (preempted, evicted, node lost) more often than allowed"),
    "image": (False, "the image cannot be pulled: check its name and tag, and that the nodes can reach its registry"),
    "config": (False, "the container cannot be created: a secret, config map or volume it names is missing"),
    "unschedulable": (False, "no node can take the pod"),
    "deadline": (False, "the Job ran past its deadline (deadline_seconds)"),
    "deleted": (True, "the Job was deleted before it ended"),
    "job-failed": (True, "the Job failed"),
}
IMAGE_REASONS = frozenset({"ErrImagePull", "ImagePullBackOff", "ErrImageNeverPull", "InvalidImageName"})
CONFIG_REASONS = frozenset({"CreateContainerConfigError", "CreateContainerError", "RunContainerError"})
#: a pod condition DisruptionTarget's reasons, as people say them
DISRUPTIONS = {
    "PreemptionByScheduler": "preempted by a pod of higher priority",
    "PreemptionByKubeScheduler": "preempted by a pod of higher priority",
    "DeletionByTaintManager": "its node was lost (NoExecute taint: not ready or unreachable)",
    "EvictionByEvictionAPI": "evicted (drained or by a disruption budget)",
    "DeletionByPodGC": "its node is gone (garbage-collected)",
    "TerminationByKubelet": "stopped by its node (memory or disk pressure, or a node shutdown)",
}


def _conditions(obj: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {c.get("type", ""): c for c in (obj.get("status") or {}).get("conditions") or []}


@dataclass(frozen=True)
class PodView:
    """One pod of the Job, as much as the product reads of it."""

    name: str
    phase: str  # Pending, Running, Succeeded, Failed, Unknown
    node: str = ""
    waiting: str = ""  # the main container's waiting reason
    waiting_message: str = ""
    exit_code: int | None = None
    terminated_reason: str = ""  # OOMKilled, Error, Completed
    unschedulable: str = ""  # the scheduler's message when PodScheduled is False
    disruption: str = ""  # DisruptionTarget's reason
    started: str = ""
    deleting: bool = False

    @classmethod
    def of(cls, pod: Mapping[str, Any], container: str | None = None) -> PodView:
        meta, status = pod.get("metadata") or {}, pod.get("status") or {}
        conditions = _conditions(pod)
        scheduled = conditions.get("PodScheduled", {})
        disruption = conditions.get("DisruptionTarget", {})
        statuses = list(status.get("containerStatuses") or [])
        inits = list(status.get("initContainerStatuses") or [])
        main = next((s for s in statuses if container and s.get("name") == container), statuses[0] if statuses else {})
        waiting = (main.get("state") or {}).get("waiting") or {}
        terminated = (main.get("state") or {}).get("terminated") or {}
        for s in inits:  # an init container that cannot start or failed holds the pod
            init_waiting = (s.get("state") or {}).get("waiting") or {}
            init_term = (s.get("state") or {}).get("terminated") or {}
            if init_waiting.get("reason") in IMAGE_REASONS | CONFIG_REASONS:
                waiting = {
                    **init_waiting,
                    "message": f"init container {s.get('name')}: {init_waiting.get('message', '')}",
                }
            if init_term and init_term.get("exitCode") not in (0, None) and not terminated:
                terminated = {**init_term, "reason": f"init container {s.get('name')}: {init_term.get('reason', '')}"}
        return cls(
            name=meta.get("name", ""),
            phase=status.get("phase", "Pending"),
            node=(pod.get("spec") or {}).get("nodeName") or "",
            waiting=waiting.get("reason", ""),
            waiting_message=waiting.get("message", ""),
            exit_code=terminated.get("exitCode"),
            terminated_reason=terminated.get("reason", ""),
            unschedulable=(scheduled.get("message", "") if scheduled.get("status") == "False" else ""),
            disruption=disruption.get("reason", "") if disruption.get("status") == "True" else "",
            started=status.get("startTime", "") or "",
            deleting=bool(meta.get("deletionTimestamp")),
        )

    def describe(self) -> str:
        where = f" on {self.node}" if self.node else ""
        extra = f", {self.waiting}" if self.waiting else ""
        if self.exit_code is not None:
            extra = f", exit code {self.exit_code} ({self.terminated_reason})"
        if self.disruption:
            extra += f", {DISRUPTIONS.get(self.disruption, self.disruption)}"
        return f"pod {self.name}{where}: {self.phase}{extra}"


@dataclass(frozen=True)
class JobView:
    """One look at a Job and its pods: the phase, and for a failed one its :class:`Failure`."""

    name: str
    namespace: str
    phase: JobPhase
    failure: Failure | None = None
    message: str = ""
    pods: tuple[PodView, ...] = ()
    node: str = ""
    disruptions: int = 0
    suspended: bool = False
    uid: str = ""
    annotations: Mapping[str, str] = field(default_factory=dict)

    @property
    def describe(self) -> str:
        what = f"Job {self.namespace}/{self.name}: {self.phase.value}"
        if self.failure:
            what += f" ({self.failure.kind}): {self.message}"
        elif self.message:
            what += f": {self.message}"
        return what


def classify(
    job: Mapping[str, Any] | None,
    pods: Sequence[Mapping[str, Any]] = (),
    *,
    name: str = "",
    namespace: str = "",
    container: str | None = None,
    max_disruptions: int | None = None,
    unschedulable_for: float = 0.0,
    unschedulable_limit: float | None = None,
) -> JobView:
    """A Job (None: it is gone) and its pods as a :class:`JobView`. ``unschedulable_for``: how long its pod has been
    unschedulable (the caller's clock); past ``unschedulable_limit`` seconds it fails with the scheduler's message.
    A failure that shows before the Job says it failed (an image that cannot be pulled, a missing secret) ends it
    then: waiting on would only wait for the Job's deadline."""
    if job is None:
        failure = _failure("deleted")
        return JobView(name, namespace, JobPhase.DELETED, failure, "the Job is gone (deleted before it ended)")
    meta, spec, status = job.get("metadata") or {}, job.get("spec") or {}, job.get("status") or {}
    name, namespace = meta.get("name", name), meta.get("namespace", namespace)
    views = tuple(sorted((PodView.of(p, container) for p in pods), key=lambda v: v.started or "~"))
    disrupted = [v for v in views if v.disruption]
    latest = next((v for v in reversed(views) if not v.disruption), views[-1] if views else None)
    conditions = _conditions(job)
    common = {
        "name": name,
        "namespace": namespace,
        "pods": views,
        "node": latest.node if latest else "",
        "disruptions": len(disrupted),
        "suspended": bool(spec.get("suspend")),
        "uid": meta.get("uid", ""),
        "annotations": dict(meta.get("annotations") or {}),
    }
    done = (
        conditions.get("Complete", {}).get("status") == "True"
        or conditions.get("SuccessCriteriaMet", {}).get("status") == "True"
    )
    failed = conditions.get("Failed", {})
    if done:
        return JobView(phase=JobPhase.SUCCEEDED, message="completed", **common)
    if failed.get("status") == "True" or conditions.get("FailureTarget", {}).get("status") == "True":
        reason = failed.get("reason") or conditions.get("FailureTarget", {}).get("reason", "")
        detail = failed.get("message") or conditions.get("FailureTarget", {}).get("message", "")
        if reason == "DeadlineExceeded":
            return _failed(common, "deadline", f"{detail or 'past activeDeadlineSeconds'}{_pod_note(latest)}")
        return _failed(common, *_pod_failure(latest, reason, detail))
    if max_disruptions is not None and len(disrupted) > max_disruptions:
        return _failed(
            common,
            "too-many-disruptions",
            f"{len(disrupted)} pods disrupted (max_disruptions={max_disruptions}): "
            + "; ".join(v.describe() for v in disrupted[-3:]),
        )
    if latest is not None and not latest.deleting:
        if latest.waiting in IMAGE_REASONS:
            return _failed(common, "image", f"{latest.waiting}: {latest.waiting_message}".rstrip(": "))
        if latest.waiting in CONFIG_REASONS:
            return _failed(common, "config", f"{latest.waiting}: {latest.waiting_message}".rstrip(": "))
        if latest.unschedulable and unschedulable_limit is not None and unschedulable_for >= unschedulable_limit:
            return _failed(
                common,
                "unschedulable",
                f"unschedulable for {unschedulable_for:.0f} s: {latest.unschedulable}",
            )
    if status.get("active") and latest is not None and latest.phase == "Running":
        note = f"running on {latest.node}" + (f" (after {len(disrupted)} disruption(s))" if disrupted else "")
        return JobView(phase=JobPhase.RUNNING, message=note, **common)
    if latest is not None and latest.phase == "Succeeded":  # the Job controller has not said Complete yet
        return JobView(phase=JobPhase.RUNNING, message=f"{latest.describe()}; the Job is completing", **common)
    return JobView(phase=JobPhase.PENDING, message=_pending_note(common["suspended"], latest, disrupted), **common)


class UnschedulableClock:
    """How long a Job's pod has been unschedulable, on the waiter's own clock, and the view with that said: the one
    rule of the trigger and of the worker-side wait (a pod unschedulable for ``limit`` seconds fails the Job's task;
    None waits forever, for Kueue or an autoscaler)."""

    def __init__(self, limit: float | None) -> None:
        self.limit = limit
        self.since: float | None = None

    def classify(self, job: Mapping[str, Any] | None, pods: Sequence[Mapping[str, Any]] = (), **kw: Any) -> JobView:
        view = classify(job, pods, **kw)
        if not any(p.unschedulable and not p.deleting for p in view.pods):
            self.since = None
            return view
        now = time.monotonic()
        self.since = self.since if self.since is not None else now
        if self.limit is None or now - self.since < self.limit or view.phase.is_terminal:
            return view
        return classify(job, pods, unschedulable_for=now - self.since, unschedulable_limit=self.limit, **kw)


def _failure(kind: str) -> Failure:
    retry, summary = FAILURES[kind]
    return Failure(kind, retry, summary)


def _failed(common: dict[str, Any], kind: str, message: str) -> JobView:
    return JobView(phase=JobPhase.FAILED, failure=_failure(kind), message=message, **common)


def _pod_note(pod: PodView | None) -> str:
    return f" ({pod.describe()})" if pod else ""


def _pod_failure(pod: PodView | None, reason: str, detail: str) -> tuple[str, str]:
    if pod is not None and pod.terminated_reason == "OOMKilled":
        return "oom", f"OOMKilled{_pod_note(pod)}"
    if pod is not None and pod.exit_code not in (None, 0):
        return "exit-code", f"exit code {pod.exit_code}{_pod_note(pod)}"
    if pod is not None and pod.waiting in IMAGE_REASONS:
        return "image", f"{pod.waiting}: {pod.waiting_message}"
    return "job-failed", f"{reason}: {detail}{_pod_note(pod)}".strip(": ")


def _pending_note(suspended: bool, pod: PodView | None, disrupted: Sequence[PodView]) -> str:
    if suspended:
        return "suspended (waiting for admission: Kueue, or spec.suspend)"
    again = f"; {len(disrupted)} earlier pod(s) disrupted: {disrupted[-1].describe()}" if disrupted else ""
    if pod is None:
        return "waiting for its pod" + again
    if pod.unschedulable:
        return f"unschedulable: {pod.unschedulable}{again}"
    if pod.waiting:
        return f"{pod.waiting}{again}"
    return f"{pod.describe()}{again}"


def unschedulable_summary(message: str, wanted: Mapping[str, str]) -> str:
    """The scheduler's ``0/6 nodes are available: 4 Insufficient nvidia.com/gpu, ...`` with what the pod asked."""
    asked = ", ".join(f"{k}={v}" for k, v in sorted(wanted.items()))
    return f"{message} (the pod asks for {asked})" if asked else message


def gpu_capacity(nodes: Sequence[Mapping[str, Any]], resource: str = GPU_RESOURCE) -> dict[str, int]:
    """Node name -> its allocatable GPUs (nodes with none left out)."""
    out = {}
    for n in nodes:
        value = ((n.get("status") or {}).get("allocatable") or {}).get(resource)
        try:
            count = int(str(value))
        except (TypeError, ValueError):
            continue
        if count > 0:
            out[(n.get("metadata") or {}).get("name", "")] = count
    return out
