"""KubernetesGpuJobOperator: a command on N GPUs of one node, in a Kubernetes Job (docs/kubernetes.md).

The operator asks :class:`~airflow_provider_gpusched.core.kubernetes.jobs.JobClient` for everything (the cncf
provider's operator -> ``PodManager``): it checks the spec when the DAG is parsed, creates the task instance's Job
(or attaches to the one an earlier try made: a retry never runs the work twice at once), defers to
:class:`~airflow_provider_gpusched.triggers.kubernetes.KubernetesJobTrigger` (one shared watch per triggerer), and
when the Job ended prints what the task needs to know: the log's tail if the trigger did not follow it, the
events when it failed, the failure's rule. A failure no retry can mend (an image that cannot be pulled, a missing
secret, unschedulable, past its deadline) fails the task at once, whatever its retries.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from airflow_provider_gpusched import settings
from airflow_provider_gpusched.core.errors import GpuschedError, InvalidArgumentError
from airflow_provider_gpusched.core.kubernetes.access import ClusterAccess
from airflow_provider_gpusched.core.kubernetes.job_spec import KubernetesJobSpec, job_spec
from airflow_provider_gpusched.core.kubernetes.jobs import JobClient
from airflow_provider_gpusched.core.kubernetes.states import FAILURES, JobPhase, UnschedulableClock
from airflow_provider_gpusched.core.work_tag import WorkTag
from airflow_provider_gpusched.hooks.kubernetes import KubernetesGpuHook
from airflow_provider_gpusched.triggers.kubernetes import KubernetesJobTrigger

#: the XCom key of the Job's record (name, namespace, node) for the UI and `gpusched queue`
KUBERNETES_JOB_XCOM = "gpusched_kubernetes_job"


class KubernetesJobFailed(AirflowException):
    """The Job failed in a way a retry may mend (exit code, OOMKilled, too many disruptions, deleted)."""


class KubernetesJobRefused(AirflowFailException):
    """The Job failed in a way no retry mends (image, config, unschedulable, deadline): no retry."""


class KubernetesGpuJobOperator(BaseOperator):
    """Run ``command`` in ``image`` on ``gpus`` GPUs of one Kubernetes node, as a Job.

    Every keyword of :class:`~airflow_provider_gpusched.core.kubernetes.job_spec.KubernetesJobSpec` (``image``,
    ``command``, ``args``, ``env``, ``gpus``, ``cpu``, ``memory``, ``namespace``, ``node_selector``,
    ``tolerations``, ``priority_class``, ``service_account``, ``volumes``, ``volume_mounts``, ``pod_template``,
    ``job_template`` with ``template_values``, ``queue``...) is checked when the DAG is parsed.

    :param kubernetes_conn_id: an Airflow connection of type ``kubernetes`` (kubeconfig, inline or in-cluster)
    :param access: a :class:`ClusterAccess` instead of a connection (tests, a kubeconfig path given in code)
    :param deferrable: wait in the triggerer (default); False waits in the worker
    :param unschedulable_timeout: seconds a pod may stay unschedulable before the task fails naming what no node
        has (None: wait forever, as for Kueue or an autoscaler)
    :param stream_logs: follow the container's log into the task's log while it runs
    :param delete_on_finish: delete the Job once its log and events are read (a Job's TTL cleans up otherwise)
    """

    template_fields: Sequence[str] = ("command", "args", "env", "image", "job_template", "template_values")
    ui_color = "#c7e3ff"

    def __init__(
        self,
        *,
        kubernetes_conn_id: str = KubernetesGpuHook.default_conn_name,
        access: ClusterAccess | None = None,
        deferrable: bool = True,
        unschedulable_timeout: float | None = 600.0,
        stream_logs: bool = True,
        delete_on_finish: bool = True,
        poll_interval: float = 5.0,
        log_tail_lines: int = 200,
        preflight: bool = True,
        **kwargs: Any,
    ) -> None:
        fields = {k: kwargs.pop(k) for k in list(kwargs) if k in _SPEC_FIELDS}
        super().__init__(**kwargs)
        self.kubernetes_conn_id = kubernetes_conn_id
        self.access = access
        self.deferrable = deferrable
        self.unschedulable_timeout = unschedulable_timeout
        self.stream_logs = stream_logs
        self.delete_on_finish = delete_on_finish
        self.poll_interval = poll_interval
        self.log_tail_lines = log_tail_lines
        self.preflight = preflight
        self.job_fields = fields
        for name, value in fields.items():  # the templated ones are attributes, as Airflow renders them there
            setattr(self, name, value)
        for name in self.template_fields:
            if not hasattr(self, name):
                setattr(self, name, None)
        if not _templated(fields):  # checked now, at parse time, unless a template is still to be rendered
            self.spec()

    # -- the spec, as given (rendered) ---------------------------------------------------------------------------
    def spec(self) -> KubernetesJobSpec:
        given = dict(self.job_fields)
        for name in self.template_fields:
            value = getattr(self, name, None)
            if name in given or value is not None:
                given[name] = value
        given = {k: v for k, v in given.items() if v is not None}
        return job_spec(given, self.task_id)

    def cluster(self) -> ClusterAccess:
        return self.access if self.access is not None else KubernetesGpuHook(self.kubernetes_conn_id).access()

    # -- running it ----------------------------------------------------------------------------------------------
    def execute(self, context: Mapping[str, Any]) -> Any:
        spec = self.spec()
        access = self.cluster()
        tag = WorkTag.of_task(context["ti"])
        try:
            with JobClient(access) as client:
                submitted = client.submit(spec, tag, preflight=self.preflight)
        except InvalidArgumentError as exc:  # what was asked cannot work (rights, GPUs no node has): no retry
            raise AirflowFailException(f"{self.task_id}: {exc}") from None
        except GpuschedError as exc:  # the cluster refused or could not be reached: a retry may find it back
            raise AirflowException(f"{self.task_id}: {exc}") from None
        self.log.info(
            "Job %s/%s %s (%s)",
            submitted.namespace,
            submitted.name,
            "attached" if submitted.attached else "created",
            submitted.note,
        )
        self._job = (submitted.name, submitted.namespace)
        context["ti"].xcom_push(
            key=KUBERNETES_JOB_XCOM, value={"name": submitted.name, "namespace": submitted.namespace}
        )
        if self.deferrable:
            self.defer(
                trigger=KubernetesJobTrigger(
                    name=submitted.name,
                    namespace=submitted.namespace,
                    kubernetes_conn_id=None if self.access is not None else self.kubernetes_conn_id,
                    access=self.access.to_dict() if self.access is not None else None,
                    container=spec.container,
                    max_disruptions=spec.max_disruptions,
                    unschedulable_timeout=self.unschedulable_timeout,
                    stream_logs=self.stream_logs,
                    fire_after=time.time() + settings.min_deferral(),
                ),
                method_name="execute_complete",
            )
        return self._wait_here(access, spec, submitted.name, submitted.namespace, context)

    def _wait_here(
        self, access: ClusterAccess, spec: KubernetesJobSpec, name: str, namespace: str, context: Any
    ) -> Any:
        said = ""
        clock = UnschedulableClock(self.unschedulable_timeout)
        with JobClient(access) as client:
            while True:
                job = client.read_job(name, namespace)
                pods = client.pods_of(name, namespace) if job is not None else []
                view = clock.classify(
                    job,
                    pods,
                    name=name,
                    namespace=namespace,
                    container=spec.container,
                    max_disruptions=spec.max_disruptions,
                )
                if view.describe != said:
                    said = view.describe
                    self.log.info("%s", said)
                if view.phase.is_terminal:
                    event = {
                        "status": view.phase.value, "name": name, "namespace": namespace, "message": view.message,
                        "failure": view.failure.kind if view.failure else None, "node": view.node,
                        "disruptions": view.disruptions, "logged": False, "pods": [p.name for p in view.pods],
                    }  # fmt: skip
                    return self.execute_complete(context, event)
                time.sleep(self.poll_interval)

    def execute_complete(self, context: Mapping[str, Any], event: Mapping[str, Any]) -> Any:
        name, namespace = event["name"], event["namespace"]
        status = JobPhase(event["status"])
        failure = event.get("failure")
        access = self.cluster()
        with JobClient(access) as client:
            pods = list(event.get("pods") or [])
            if pods and not event.get("logged"):
                text = client.log_text(pods[-1], namespace, tail_lines=self.log_tail_lines)
                if text:
                    self.log.info(
                        "The last %d lines of pod %s's log:\n%s", self.log_tail_lines, pods[-1], text.rstrip()
                    )
            if status is not JobPhase.SUCCEEDED:
                for line in client.events(name, namespace, pods)[-20:]:
                    self.log.info("event: %s", line)
            ti = context["ti"]
            client.mark_taken(name, namespace, int(getattr(ti, "try_number", 0) or 0))
            if self.delete_on_finish:
                client.delete(name, namespace)
        result = {
            "name": name,
            "namespace": namespace,
            "node": event.get("node", ""),
            "disruptions": event.get("disruptions", 0),
        }
        if status is JobPhase.SUCCEEDED:
            self.log.info("Job %s/%s succeeded on %s", namespace, name, event.get("node") or "?")
            return result
        why = FAILURES.get(failure or "job-failed", (True, "the Job failed"))
        message = (
            f"{self.task_id}: Job {namespace}/{name} {status.value} ({failure}): {event.get('message', '')}. {why[1]}"
        )
        if not why[0]:
            raise KubernetesJobRefused(message + " (no retry: the same Job would fail the same way)")
        raise KubernetesJobFailed(message)

    def on_kill(self) -> None:
        """The task was killed while it waited in the worker (not deferred): delete its Job and pods."""
        job = getattr(self, "_job", None)
        if job is None:
            return
        try:
            with JobClient(self.cluster()) as client:
                client.delete(*job)
            self.log.info("Deleted Job %s/%s", job[1], job[0])
        except (GpuschedError, OSError) as exc:
            self.log.warning("on_kill: Job %s/%s could not be deleted: %s", job[1], job[0], exc)


_SPEC_FIELDS = frozenset(f for f in KubernetesJobSpec.__dataclass_fields__)


def _templated(fields: Mapping[str, Any]) -> bool:
    def has(value: Any) -> bool:
        if isinstance(value, str):
            return "{{" in value or "{%" in value
        if isinstance(value, Mapping):
            return any(has(v) for v in value.values())
        if isinstance(value, (list, tuple)):
            return any(has(v) for v in value)
        return False

    return any(has(v) for v in fields.values())
