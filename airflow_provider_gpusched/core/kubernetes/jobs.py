"""The Kubernetes wing's one client of the API: :class:`JobClient` creates, finds, reads, follows and deletes the
Jobs this provider runs (the cncf provider's ``PodManager`` in spirit: the operator and the trigger ask it, never
the API directly).

A task instance's Job is named from its work key (DAG, run, task, map index: core/kubernetes/job_spec.py), so a
retry finds the Job of the try before. :meth:`JobClient.submit` then decides (``attach_rule``):

- no Job: create it;
- a Job still pending or running (the worker that waited for it died, or the task was deferred and resumed
  elsewhere): attach to it, whatever try made it; its result is this try's;
- a Job that succeeded and whose result no try has taken (``gpusched.io/result-taken`` missing): attach (the
  worker died between the end and its read; the work is not done twice);
- a Job that failed, or whose result a try took already (a cleared task runs again): delete it, wait until it is
  gone, create a new one.

Pure Python, no Airflow imports; the ``kubernetes`` client is imported when a :class:`JobClient` is made.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_provider_gpusched.core.errors import GpuschedError, InvalidArgumentError
from airflow_provider_gpusched.core.kubernetes.access import ClusterAccess
from airflow_provider_gpusched.core.kubernetes.job_spec import (
    GPU_RESOURCE,
    MANAGED_LABEL,
    WORK_KEY_LABEL,
    KubernetesJobSpec,
    job_name,
    resource_names,
    work_key_of,
)
from airflow_provider_gpusched.core.kubernetes.states import JobPhase, JobView, classify, gpu_capacity
from airflow_provider_gpusched.core.work_tag import WorkTag

RESULT_TAKEN = "gpusched.io/result-taken"
#: what the product needs in a namespace (checked before the first Job: a clear error, not a 403 mid-run)
NEEDED_RIGHTS = (
    ("batch", "jobs", "create"),
    ("batch", "jobs", "get"),
    ("batch", "jobs", "delete"),
    ("", "pods", "list"),
    ("", "pods/log", "get"),
)


class KubernetesError(GpuschedError):
    """The cluster refused or could not be reached; the message says what was asked and the API's answer."""


@dataclass(frozen=True)
class Submitted:
    name: str
    namespace: str
    uid: str
    attached: bool  # True: an existing Job (a try before this one made it)
    note: str = ""


def api_error(exc: BaseException, what: str) -> KubernetesError:
    """An ApiException (or a connection error) as a message a person can act on."""
    status = getattr(exc, "status", None)
    reason = getattr(exc, "reason", "") or type(exc).__name__
    body = getattr(exc, "body", "") or ""
    message = ""
    if body:
        import json

        try:
            message = json.loads(body).get("message", "")
        except (ValueError, AttributeError):
            message = str(body)[:300]
    if status is None:
        return KubernetesError(f"{what}: the cluster cannot be reached ({exc})")
    hint = {401: " (the credentials were refused)", 403: " (not allowed: see NEEDED_RIGHTS in docs/kubernetes.md)"}.get(
        status, ""
    )
    return KubernetesError(f"{what}: {status} {reason}{hint}: {message}".rstrip(": "))


class JobClient:
    """Jobs of one cluster (``access``). Not thread-safe: one per thread."""

    def __init__(self, access: ClusterAccess, api_client: Any = None) -> None:
        import urllib3
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        #: what a call to the API raises: the API's refusal, a connection that failed
        self.errors: tuple[type[BaseException], ...] = (ApiException, urllib3.exceptions.HTTPError, OSError)
        self.access = access
        self.api = api_client or access.api_client()
        self.batch = client.BatchV1Api(self.api)
        self.core = client.CoreV1Api(self.api)
        self.auth = client.AuthorizationV1Api(self.api)

    def close(self) -> None:
        self.api.close()

    def __enter__(self) -> JobClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _json(self, obj: Any) -> dict[str, Any]:
        data: dict[str, Any] = self.api.sanitize_for_serialization(obj)
        return data

    # -- before the first Job ------------------------------------------------------------------------------------
    def check_rights(self, namespace: str) -> list[str]:
        """What the credentials may not do in ``namespace`` (empty: everything needed), from the API's own answer
        (SelfSubjectAccessReview)."""
        from kubernetes import client

        missing = []
        for group, resource, verb in NEEDED_RIGHTS:
            sub = resource.split("/", 1)
            review = client.V1SelfSubjectAccessReview(
                spec=client.V1SelfSubjectAccessReviewSpec(
                    resource_attributes=client.V1ResourceAttributes(
                        namespace=namespace,
                        group=group,
                        resource=sub[0],
                        subresource=sub[1] if len(sub) > 1 else None,
                        verb=verb,
                    )
                )
            )
            try:
                answer = self.auth.create_self_subject_access_review(review)
            except self.errors as exc:
                raise api_error(exc, f"checking what {self.access.source} may do in namespace {namespace!r}") from None
            if not answer.status.allowed:
                missing.append(f"{verb} {resource}" + (f" ({group})" if group else ""))
        return missing

    def gpu_nodes(self) -> dict[str, int] | None:
        """Node -> allocatable GPUs; None when the credentials may not list nodes (the check is then left to the
        scheduler)."""
        try:
            nodes = self.core.list_node(_request_timeout=30)
        except self.errors as exc:
            if getattr(exc, "status", None) == 403:
                return None
            raise api_error(exc, "listing the cluster's nodes") from None
        return gpu_capacity(self._json(nodes)["items"], GPU_RESOURCE)

    def preflight(self, spec: KubernetesJobSpec, manifest: Mapping[str, Any], namespace: str) -> None:
        """Refuse what cannot work before creating anything: rights missing in the namespace, more GPUs than any
        node has (a Job that would wait forever)."""
        missing = self.check_rights(namespace)
        if missing:
            raise InvalidArgumentError(
                "namespace",
                namespace,
                f"a namespace where {self.access.source} may {', '.join(NEEDED_RIGHTS_TEXT)} (missing: {'; '.join(missing)})",
            )
        wanted = resource_names(spec, manifest)
        gpus = int(wanted.get(GPU_RESOURCE, "0") or 0)
        if gpus:
            nodes = self.gpu_nodes()
            if nodes is not None and max(nodes.values(), default=0) < gpus:
                offer = ", ".join(f"{n}: {c}" for n, c in sorted(nodes.items())) or "no node has any"
                raise InvalidArgumentError("gpus", gpus, f"at most the GPUs one node has ({offer})")

    # -- submit and attach ---------------------------------------------------------------------------------------
    def read_job(self, name: str, namespace: str) -> dict[str, Any] | None:
        try:
            return self._json(self.batch.read_namespaced_job(name, namespace, _request_timeout=30))
        except self.errors as exc:
            if getattr(exc, "status", None) == 404:
                return None
            raise api_error(exc, f"reading Job {namespace}/{name}") from None

    def pods_of(self, name: str, namespace: str) -> list[dict[str, Any]]:
        try:
            pods = self.core.list_namespaced_pod(namespace, label_selector=f"job-name={name}", _request_timeout=30)
        except self.errors as exc:
            raise api_error(exc, f"listing the pods of Job {namespace}/{name}") from None
        return list(self._json(pods)["items"])

    def view(self, name: str, namespace: str, **classify_args: Any) -> JobView:
        job = self.read_job(name, namespace)
        pods = self.pods_of(name, namespace) if job is not None else []
        return classify(job, pods, name=name, namespace=namespace, **classify_args)

    def submit(
        self, spec: KubernetesJobSpec, tag: WorkTag, *, namespace: str | None = None, preflight: bool = True
    ) -> Submitted:
        """Create the task instance's Job, or attach to the one a try before made (the rules above)."""
        namespace = spec.namespace or namespace or self.access.namespace
        key = work_key_of(tag)
        name = job_name(key)
        manifest = spec.manifest(name, namespace, tag, key)
        existing = self.read_job(name, namespace)
        if existing is not None:
            rule, why = attach_rule(existing, self.pods_of(name, namespace), key)
            if rule == "attach":
                return Submitted(name, namespace, existing["metadata"].get("uid", ""), True, why)
            self.delete(name, namespace, wait=120)
        if preflight:
            self.preflight(spec, manifest, namespace)
        try:
            created = self.batch.create_namespaced_job(namespace, manifest, _request_timeout=60)
        except self.errors as exc:
            if getattr(exc, "status", None) == 409:  # another try made it just now: take that one
                job = self.read_job(name, namespace)
                if job is not None:
                    return Submitted(
                        name, namespace, job["metadata"].get("uid", ""), True, "created by another try just now"
                    )
            raise api_error(exc, f"creating Job {namespace}/{name}") from None
        return Submitted(name, namespace, created.metadata.uid, False, "created")

    def mark_taken(self, name: str, namespace: str, try_number: int) -> None:
        """The result of the Job was read by try ``try_number`` (a later try runs it again, see the rules)."""
        body = {"metadata": {"annotations": {RESULT_TAKEN: str(try_number)}}}
        try:
            self.batch.patch_namespaced_job(name, namespace, body, _request_timeout=30)
        except self.errors as exc:
            if getattr(exc, "status", None) != 404:
                raise api_error(exc, f"marking Job {namespace}/{name}'s result taken") from None

    def delete(self, name: str, namespace: str, *, wait: float = 0.0, grace_seconds: int | None = None) -> bool:
        """Delete the Job and its pods (foreground: the pods go first); True if there was one. ``wait``: seconds to
        wait until it is gone."""
        from kubernetes import client

        body = client.V1DeleteOptions(propagation_policy="Foreground", grace_period_seconds=grace_seconds)
        try:
            self.batch.delete_namespaced_job(name, namespace, body=body, _request_timeout=30)
        except self.errors as exc:
            if getattr(exc, "status", None) == 404:
                return False
            raise api_error(exc, f"deleting Job {namespace}/{name}") from None
        deadline = time.monotonic() + wait
        while wait and time.monotonic() < deadline:
            if self.read_job(name, namespace) is None:
                break
            time.sleep(0.5)
        return True

    # -- what it said --------------------------------------------------------------------------------------------
    def log_text(
        self,
        pod: str,
        namespace: str,
        *,
        container: str | None = None,
        tail_lines: int | None = None,
        limit_bytes: int = 8 << 20,
    ) -> str:
        try:
            text: str = self.core.read_namespaced_pod_log(
                pod, namespace, container=container, tail_lines=tail_lines, limit_bytes=limit_bytes, _request_timeout=60
            )
        except self.errors as exc:
            if getattr(exc, "status", None) in (400, 404):
                return ""
            raise api_error(exc, f"reading pod {namespace}/{pod}'s log") from None
        return text

    def follow_log(
        self, pod: str, namespace: str, *, container: str | None = None, since_seconds: int | None = None
    ) -> Iterator[str]:
        """The pod's log lines as they are written, until the container ends."""
        from kubernetes import watch

        w = watch.Watch()
        try:
            yield from w.stream(
                self.core.read_namespaced_pod_log,
                name=pod,
                namespace=namespace,
                container=container,
                since_seconds=since_seconds,
                _request_timeout=(30, 3600),
            )
        finally:
            w.stop()

    def events(self, name: str, namespace: str, pods: Sequence[str] = ()) -> list[str]:
        """The Job's and its pods' events, oldest first, as ``Warning FailedScheduling: message`` lines."""
        out = []
        for kind, obj in [("Job", name), *(("Pod", p) for p in pods)]:
            try:
                found = self.core.list_namespaced_event(
                    namespace,
                    field_selector=f"involvedObject.name={obj},involvedObject.kind={kind}",
                    _request_timeout=30,
                )
            except self.errors:
                continue
            for e in found.items:
                when = e.last_timestamp or e.event_time or e.first_timestamp
                out.append((str(when or ""), f"{kind} {obj}: {e.type} {e.reason}: {e.message}"))
        return [line for _, line in sorted(out)]

    def list_managed(self, namespace: str | None = None) -> list[dict[str, Any]]:
        """Every Job this provider created (label ``gpusched.io/managed``), in one namespace or all."""
        try:
            if namespace:
                jobs = self.batch.list_namespaced_job(
                    namespace, label_selector=f"{MANAGED_LABEL}=true", _request_timeout=60
                )
            else:
                jobs = self.batch.list_job_for_all_namespaces(
                    label_selector=f"{MANAGED_LABEL}=true", _request_timeout=60
                )
        except self.errors as exc:
            raise api_error(exc, "listing gpusched's Jobs") from None
        return list(self._json(jobs)["items"])


NEEDED_RIGHTS_TEXT = tuple(f"{verb} {resource}" for _, resource, verb in NEEDED_RIGHTS)


def attach_rule(job: Mapping[str, Any], pods: Sequence[Mapping[str, Any]], work_key: str) -> tuple[str, str]:
    """Whether a retry takes the existing Job (``attach``) or replaces it (``replace``), and why."""
    meta = job.get("metadata") or {}
    if (meta.get("labels") or {}).get(WORK_KEY_LABEL) != work_key:
        return "replace", "a Job of that name belongs to other work"
    if meta.get("deletionTimestamp"):
        return "replace", "the Job is being deleted"
    view = classify(job, pods)
    taken = (meta.get("annotations") or {}).get(RESULT_TAKEN)
    if view.phase in (JobPhase.PENDING, JobPhase.RUNNING):
        return "attach", f"the Job of an earlier try is still {view.phase.value}: waiting for it, not starting another"
    if view.phase is JobPhase.SUCCEEDED and not taken:
        return "attach", "the Job of an earlier try succeeded and no try took its result: taking it"
    if view.phase is JobPhase.SUCCEEDED:
        return "replace", f"try {taken} took this Job's result: the task runs again"
    return "replace", f"the Job of an earlier try failed ({view.message}): running it again"
