"""What to run on Kubernetes: :class:`KubernetesJobSpec` turns an image, a command and a GPU count into a
``batch/v1`` Job manifest.

A spec is checked when it is made (every key named in its error, at parse time: an unknown key, a negative GPU
count, a template that is not a Job); the manifest is built from it with nothing but dictionaries, so that what
is sent is exactly what a test can read. Three ways to say the pod, which combine (later wins):

1. the spec's own fields (``image``, ``command``, ``gpus``, ``env``, ``node_selector``, ``tolerations``...);
2. ``pod_template``: a ``PodTemplateSpec`` (or a ``Pod``) whose ``metadata`` and ``spec`` are the base the fields
   are laid over (volumes, init containers, security contexts: anything the fields do not name);
3. ``job_template``: a whole ``Job`` manifest, as YAML text or a mapping, with ``${placeholders}`` (DI-toolkit's
   "k8s mode"): ``${name}``, ``${namespace}``, ``${image}``, ``${gpus}`` and every key of ``template_values``. A
   value replaces a whole YAML scalar (``gpus: ${gpus}`` is the number 4, not the text "4"), or is spliced into a
   longer string; an unknown placeholder is an error naming it.

The first container of the pod (or the one named by ``container``) runs the command and gets the GPUs
(``resources.limits["nvidia.com/gpu"]``). The Job is created with ``backoffLimit: 0`` (Airflow's retries are the
retries) and a pod failure policy that does not count a disruption (preemption, eviction, a lost node) as a
failure: the Job makes a new pod, the trial resumes from its checkpoint (core/kubernetes/states.py has the rules).

Pure Python, no Airflow imports.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Annotated, Any

from airflow_provider_gpusched.core.errors import InvalidArgumentError
from airflow_provider_gpusched.core.records import RecordType, record_class, says
from airflow_provider_gpusched.core.work_tag import WorkTag

#: the label every Job and pod this provider creates carries: the shared watch selects on it
MANAGED_LABEL = "gpusched.io/managed"
#: the work key of a Job (one per Airflow task instance, the same for each try): how a retry finds its Job
WORK_KEY_LABEL = "gpusched.io/work-key"
#: annotations: the task instance the Job belongs to (WorkTag fields), and the try that last took its result
TAG_ANNOTATION = "gpusched.io/work"
TRY_ANNOTATION = "gpusched.io/try"
GPU_RESOURCE = "nvidia.com/gpu"
#: Kueue's label naming the LocalQueue a Job is submitted to
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"

_DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
_PLACEHOLDER = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_QUANTITY = r"^[0-9]+(\.[0-9]+)?(m|k|Ki|M|Mi|G|Gi|T|Ti|P|Pi|E|Ei)?$"

Name = Annotated[
    str, says("a DNS label (lower-case letters, digits and '-', at most 63)", pattern=_DNS_LABEL, max_length=63)
]
Text = Annotated[str, says("a string without control characters", pattern=r"^[^\x00-\x1f\x7f]*$")]
#: an argument or a value: newlines are fine (``python -c`` code: argv, never a shell), NUL is not (no exec takes it)
Arg = Annotated[str, says("a string without NUL characters", pattern=r"^[^\x00]*$")]
EnvName = Annotated[str, says("an environment variable name", pattern=r"^[A-Za-z_][A-Za-z0-9_.-]*$")]
Quantity = Annotated[str, says("a Kubernetes quantity such as '8', '500m', '32Gi'", pattern=_QUANTITY)]
Count = Annotated[int, says("a whole number >= 0", ge=0)]
Seconds = Annotated[int, says("whole seconds > 0", gt=0)]


@record_class(extra="forbid")
@dataclass(frozen=True)
class KubernetesJobSpec:
    """One Job: a command in an image on ``gpus`` GPUs of one node. Fields left empty are not sent."""

    image: Text = ""
    #: the container's command (argv, no shell) and its arguments; empty: the image's own
    command: tuple[Arg, ...] = ()
    args: tuple[Arg, ...] = ()
    env: dict[EnvName, Arg] = field(default_factory=dict)
    gpus: Count = 0
    cpu: Quantity | None = None
    memory: Quantity | None = None
    namespace: Name | None = None  # None: the connection's (or "default")
    node_selector: dict[Text, Text] = field(default_factory=dict)
    tolerations: tuple[dict[str, Any], ...] = ()
    priority_class: Text | None = None
    service_account: Text | None = None
    volumes: tuple[dict[str, Any], ...] = ()
    volume_mounts: tuple[dict[str, Any], ...] = ()
    labels: dict[Text, Text] = field(default_factory=dict)
    annotations: dict[Text, Text] = field(default_factory=dict)
    image_pull_policy: Annotated[
        str, says("Always, IfNotPresent or Never", pattern=r"^(Always|IfNotPresent|Never)$")
    ] = "IfNotPresent"
    working_dir: Text | None = None
    #: the Job's deadline (activeDeadlineSeconds): it fails with DeadlineExceeded past it
    deadline_seconds: Seconds | None = None
    #: how long a finished Job stays for its log and events (ttlSecondsAfterFinished); the operator deletes it
    #: itself once it has read them, so this only cleans up after a task that never came back
    ttl_seconds: Seconds = 86400
    #: pods replaced after a disruption (preemption, eviction, a lost node) before the Job fails: such a pod does not
    #: count against backoffLimit (pod failure policy), this caps them
    max_disruptions: Count = 3
    #: Kueue's LocalQueue (label kueue.x-k8s.io/queue-name): the Job is created suspended and Kueue admits it
    queue: Name | None = None
    container: Name | None = None  # the container that runs the command (pod_template's first one by default)
    pod_template: dict[str, Any] | None = None
    job_template: str | dict[str, Any] | None = None
    template_values: dict[Annotated[str, says("a placeholder name", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")], Any] = field(
        default_factory=dict
    )

    def validate(self, argument: str = "job") -> KubernetesJobSpec:
        """The checks that relate fields (one field's type and bounds are checked when a spec is read): an image
        somewhere, one kind of template, a template that renders to a Job. Returns the spec."""
        try:
            self._validate()
        except InvalidArgumentError as exc:
            if argument and exc.argument.split(".")[0] != argument:
                raise InvalidArgumentError(f"{argument}.{exc.argument}", exc.value, exc.expected) from None
            raise
        return self

    def _validate(self) -> None:
        if self.job_template is None and not self.image and not _template_image(self.pod_template, self.container):
            raise InvalidArgumentError(
                "image", self.image, "an image (or a pod_template or job_template that names one)"
            )
        if self.pod_template is not None and self.job_template is not None:
            raise InvalidArgumentError("pod_template", "...", "either pod_template or job_template, not both")
        if self.pod_template is not None:
            _pod_spec_of(self.pod_template, "pod_template")
        if self.job_template is not None:
            self.render_template("gs-check", "default")  # every placeholder known, the result a Job

    # -- the manifest ---------------------------------------------------------------------------------------------
    def manifest(self, name: str, namespace: str, tag: WorkTag | None = None, work_key: str = "") -> dict[str, Any]:
        """The Job to create, named ``name`` in ``namespace``, labelled as managed and with ``work_key``, annotated
        with ``tag`` (the task instance it runs for)."""
        job = (
            self.render_template(name, namespace) if self.job_template is not None else self._base_job(name, namespace)
        )
        meta = job.setdefault("metadata", {})
        meta["name"], meta["namespace"] = name, namespace
        labels = {**meta.get("labels", {}), **self.labels, MANAGED_LABEL: "true"}
        if work_key:
            labels[WORK_KEY_LABEL] = work_key
        if self.queue:
            labels[KUEUE_QUEUE_LABEL] = self.queue
        meta["labels"] = labels
        annotations = {**meta.get("annotations", {}), **self.annotations}
        if tag is not None:
            annotations[TAG_ANNOTATION] = json.dumps(tag.to_dict(), sort_keys=True, separators=(",", ":"))
            annotations[TRY_ANNOTATION] = str(tag.try_number)
        meta["annotations"] = annotations
        spec = job.setdefault("spec", {})
        pod = spec.setdefault("template", {})
        pod_meta = pod.setdefault("metadata", {})
        pod_meta["labels"] = {
            **pod_meta.get("labels", {}),
            MANAGED_LABEL: "true",
            **({WORK_KEY_LABEL: work_key} if work_key else {}),
        }
        pod_spec = pod.setdefault("spec", {})
        pod_spec.setdefault("restartPolicy", "Never")
        if pod_spec["restartPolicy"] != "Never":
            raise InvalidArgumentError(
                "job_template: spec.template.spec.restartPolicy",
                pod_spec["restartPolicy"],
                "Never (the Job makes a new pod after a disruption; Airflow's retries are the retries)",
            )
        spec.setdefault("backoffLimit", 0)
        spec.setdefault("podReplacementPolicy", "Failed")  # never two pods of one try at once
        spec.setdefault("ttlSecondsAfterFinished", self.ttl_seconds)
        spec.setdefault(
            "podFailurePolicy", {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]}
        )
        spec.setdefault("completions", 1)
        spec.setdefault("parallelism", 1)
        if self.deadline_seconds:
            spec["activeDeadlineSeconds"] = self.deadline_seconds
        if self.queue:
            spec["suspend"] = True  # Kueue admits it
        return job

    def _base_job(self, name: str, namespace: str) -> dict[str, Any]:
        pod = copy.deepcopy(self.pod_template) if self.pod_template else {}
        if pod.get("kind") == "Pod":
            pod = {"metadata": pod.get("metadata", {}), "spec": pod.get("spec", {})}
        pod_spec = pod.setdefault("spec", {})
        containers = pod_spec.setdefault("containers", [])
        main = self._main_container(containers)
        if self.image:
            main["image"] = self.image
        main.setdefault("name", self.container or "main")
        if self.command:
            main["command"] = list(self.command)
        if self.args:
            main["args"] = list(self.args)
        if self.working_dir:
            main["workingDir"] = self.working_dir
        main.setdefault("imagePullPolicy", self.image_pull_policy)
        if self.env:
            given = [e for e in main.get("env", []) if e.get("name") not in self.env]
            main["env"] = given + [{"name": k, "value": str(v)} for k, v in self.env.items()]
        resources = main.setdefault("resources", {})
        limits, requests = resources.setdefault("limits", {}), resources.setdefault("requests", {})
        if self.gpus:
            limits[GPU_RESOURCE] = str(self.gpus)
            requests[GPU_RESOURCE] = str(self.gpus)
        if self.cpu is not None:
            requests["cpu"] = str(self.cpu)
        if self.memory is not None:
            requests["memory"] = limits["memory"] = str(self.memory)
        if not limits:
            resources.pop("limits")
        if not requests:
            resources.pop("requests")
        if self.volume_mounts:
            main["volumeMounts"] = [*main.get("volumeMounts", []), *map(dict, self.volume_mounts)]
        if self.volumes:
            pod_spec["volumes"] = [*pod_spec.get("volumes", []), *map(dict, self.volumes)]
        if self.node_selector:
            pod_spec["nodeSelector"] = {**pod_spec.get("nodeSelector", {}), **self.node_selector}
        if self.tolerations:
            pod_spec["tolerations"] = [*pod_spec.get("tolerations", []), *map(dict, self.tolerations)]
        if self.priority_class:
            pod_spec["priorityClassName"] = self.priority_class
        if self.service_account:
            pod_spec["serviceAccountName"] = self.service_account
        return {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"template": pod},
        }

    def _main_container(self, containers: list[dict[str, Any]]) -> dict[str, Any]:
        if self.container:
            for c in containers:
                if c.get("name") == self.container:
                    return c
            if containers:
                raise InvalidArgumentError(
                    "container",
                    self.container,
                    f"a container of the pod template (it has {[c.get('name') for c in containers]})",
                )
        if not containers:
            containers.append({})
        return containers[0]

    # -- job templates with placeholders --------------------------------------------------------------------------
    def placeholder_values(self, name: str, namespace: str) -> dict[str, Any]:
        return {"name": name, "namespace": namespace, "image": self.image, "gpus": self.gpus, **self.template_values}

    def render_template(self, name: str, namespace: str) -> dict[str, Any]:
        """``job_template`` with every placeholder replaced: a Job manifest (checked), fields of the spec laid over
        its first container where they are given (image, command, env, gpus...)."""
        values = self.placeholder_values(name, namespace)
        template = self.job_template
        if isinstance(template, str):
            import yaml

            from airflow_provider_gpusched.core.yaml_loader import safe_load

            try:
                template = safe_load(template)
            except yaml.YAMLError as exc:
                raise InvalidArgumentError("job_template", "...", f"a Job manifest in YAML ({exc})") from None
        job = _substitute(copy.deepcopy(template), values, "job_template")
        if (
            not isinstance(job, dict)
            or job.get("kind") != "Job"
            or not str(job.get("apiVersion", "")).startswith("batch/")
        ):
            kind = job.get("kind") if isinstance(job, dict) else type(job).__name__
            raise InvalidArgumentError("job_template", kind, "a Job manifest (apiVersion: batch/v1, kind: Job)")
        pod = _pod_spec_of(job.get("spec", {}).get("template"), "job_template: spec.template")
        if self.image or self.command or self.env or self.gpus or self.args:
            overlay = KubernetesJobSpec(
                image=self.image or "x",
                command=self.command,
                args=self.args,
                env=dict(self.env),
                gpus=self.gpus,
                container=self.container,
                pod_template={"spec": pod},
            )
            laid = overlay._base_job(name, namespace)["spec"]["template"]["spec"]
            if not self.image:
                laid["containers"][0]["image"] = pod["containers"][0].get("image", "")
            job["spec"]["template"]["spec"] = laid
        return job


def _template_image(template: dict[str, Any] | None, container: str | None) -> str:
    if not isinstance(template, dict):
        return ""
    spec = template.get("spec")
    for c in (spec.get("containers") if isinstance(spec, dict) else None) or []:
        if isinstance(c, dict) and (container is None or c.get("name") == container):
            return str(c.get("image") or "")
    return ""


def _pod_spec_of(template: Any, argument: str) -> dict[str, Any]:
    if not isinstance(template, dict) or not isinstance(template.get("spec"), dict):
        raise InvalidArgumentError(argument, template, "a pod template (a mapping with a 'spec' that has 'containers')")
    spec: dict[str, Any] = template["spec"]
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers or not all(isinstance(c, dict) for c in containers):
        raise InvalidArgumentError(f"{argument}.spec.containers", containers, "a list of one or more containers")
    return spec


def _substitute(value: Any, values: Mapping[str, Any], where: str) -> Any:
    """``${name}`` replaced in every string of ``value``: a string that is one placeholder takes the value itself
    (a number stays a number), a longer one gets its text. An unknown name is an error naming it and where."""
    if isinstance(value, dict):
        return {_substitute(k, values, where): _substitute(v, values, f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, list):
        return [_substitute(v, values, f"{where}[{i}]") for i, v in enumerate(value)]
    if not isinstance(value, str) or "${" not in value:
        return value
    for found in _PLACEHOLDER.findall(value):
        if found not in values:
            raise InvalidArgumentError(
                where, "${" + found + "}", f"a known placeholder (one of {sorted(values)}; add it to template_values)"
            )
    whole = _PLACEHOLDER.fullmatch(value)
    if whole:
        return values[whole.group(1)]
    return _PLACEHOLDER.sub(lambda m: str(values[m.group(1)]), value)


JOB_SPEC: RecordType[KubernetesJobSpec] = RecordType(KubernetesJobSpec, name="Kubernetes job")
SPEC_FIELDS = tuple(f.name for f in fields(KubernetesJobSpec))


def job_spec(value: Mapping[str, Any] | KubernetesJobSpec, argument: str = "job") -> KubernetesJobSpec:
    """A spec from a mapping (an operator's keyword arguments, a YAML file's section), every key checked."""
    if isinstance(value, KubernetesJobSpec):
        return value
    data = dict(value)
    for key in ("command", "args", "tolerations", "volumes", "volume_mounts"):
        if isinstance(data.get(key), str) and key in ("command", "args"):
            raise InvalidArgumentError(
                f"{argument}.{key}", data[key], "a list of arguments (no shell: ['python', 'train.py'])"
            )
        if isinstance(data.get(key), list):
            data[key] = tuple(data[key])
    return JOB_SPEC.read_argument(data, argument, "a mapping of Kubernetes job settings").validate(argument)


def job_name(work_key: str, prefix: str = "gs") -> str:
    """The Job's name for a work key: ``gs-<16 hex>`` (the same for every try of a task instance, so a retry finds
    the Job of the try before; a DNS label, whatever the DAG and task ids hold)."""
    return f"{prefix}-{hashlib.sha256(work_key.encode()).hexdigest()[:16]}"


def work_key_of(tag: WorkTag) -> str:
    """One task instance's key (DAG, run, task, map index; not the try): a label value (63 characters)."""
    raw = "\x1f".join((tag.dag_id, tag.run_id, tag.task_id, str(tag.map_index)))
    return hashlib.sha256(raw.encode()).hexdigest()[:40]


def resource_names(spec: KubernetesJobSpec, manifest: Mapping[str, Any]) -> dict[str, str]:
    """What the Job's main container asks for (``{"nvidia.com/gpu": "4", "cpu": "2"}``): for the unschedulable
    message and the preflight check of GPU counts."""
    pod = manifest["spec"]["template"]["spec"]
    containers: Sequence[Mapping[str, Any]] = pod.get("containers", [])
    wanted: dict[str, str] = {}
    for c in containers:
        for k, v in (c.get("resources", {}).get("limits", {}) or {}).items():
            wanted[k] = str(v)
        for k, v in (c.get("resources", {}).get("requests", {}) or {}).items():
            wanted.setdefault(k, str(v))
    return wanted
