"""The Kubernetes Job spec (core/kubernetes/job_spec.py): what is sent for each setting, templates with
placeholders, and the errors that name the key, at parse time. The same manifests run on the real test cluster in
tests/kubernetes."""

import json

import pytest

from airflow_provider_gpusched.core.errors import InvalidArgumentError
from airflow_provider_gpusched.core.kubernetes.job_spec import (
    KUEUE_QUEUE_LABEL,
    MANAGED_LABEL,
    TAG_ANNOTATION,
    WORK_KEY_LABEL,
    job_name,
    job_spec,
    resource_names,
    work_key_of,
)
from airflow_provider_gpusched.core.work_tag import WorkTag

TAG = WorkTag(dag_id="sweep", run_id="manual__1", task_id="train", map_index=3, try_number=2)


def _main(manifest):
    return manifest["spec"]["template"]["spec"]["containers"][0]


def test_the_fields_become_the_jobs_pod_and_the_gpus_its_limit():
    spec = job_spec(
        {
            "image": "python:3.11",
            "command": ["python", "train.py"],
            "args": ["--lr", "0.1; rm -rf /"],  # an argument, never a shell
            "env": {"SEED": "1"},
            "gpus": 4,
            "cpu": "8",
            "memory": "32Gi",
            "node_selector": {"gpu": "a100"},
            "tolerations": [{"key": "gpu", "operator": "Exists"}],
            "priority_class": "research",
            "service_account": "trainer",
            "volumes": [{"name": "data", "emptyDir": {}}],
            "volume_mounts": [{"name": "data", "mountPath": "/data"}],
        }
    )
    key = work_key_of(TAG)
    job = spec.manifest(job_name(key), "lab", TAG, key)
    main = _main(job)
    assert main["command"] == ["python", "train.py"] and main["args"] == ["--lr", "0.1; rm -rf /"]
    assert main["resources"] == {
        "limits": {"nvidia.com/gpu": "4", "memory": "32Gi"},
        "requests": {"nvidia.com/gpu": "4", "cpu": "8", "memory": "32Gi"},
    }
    assert main["env"] == [{"name": "SEED", "value": "1"}]
    pod = job["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"gpu": "a100"} and pod["priorityClassName"] == "research"
    assert pod["serviceAccountName"] == "trainer" and pod["restartPolicy"] == "Never"
    assert pod["volumes"] == [{"name": "data", "emptyDir": {}}] and main["volumeMounts"][0]["mountPath"] == "/data"
    assert job["metadata"]["labels"][MANAGED_LABEL] == "true" and job["metadata"]["labels"][WORK_KEY_LABEL] == key
    assert json.loads(job["metadata"]["annotations"][TAG_ANNOTATION])["map_index"] == 3
    # a disruption is not a failure: the Job makes a new pod (the trial resumes), Airflow's retries do the rest
    assert job["spec"]["backoffLimit"] == 0 and job["spec"]["podReplacementPolicy"] == "Failed"
    assert job["spec"]["podFailurePolicy"]["rules"][0] == {
        "action": "Ignore",
        "onPodConditions": [{"type": "DisruptionTarget"}],
    }
    assert resource_names(spec, job)["nvidia.com/gpu"] == "4"


def test_a_task_instances_job_has_one_name_for_every_try_and_another_for_another_map_index():
    again = WorkTag(dag_id="sweep", run_id="manual__1", task_id="train", map_index=3, try_number=3)
    other = WorkTag(dag_id="sweep", run_id="manual__1", task_id="train", map_index=4, try_number=2)
    assert job_name(work_key_of(TAG)) == job_name(work_key_of(again)) != job_name(work_key_of(other))
    assert len(job_name(work_key_of(TAG))) <= 63 and len(work_key_of(TAG)) <= 63


def test_a_pod_template_is_the_base_the_fields_are_laid_over():
    template = {
        "metadata": {"labels": {"team": "vision"}},
        "spec": {
            "initContainers": [{"name": "fetch", "image": "busybox"}],
            "containers": [{"name": "trainer", "image": "base:1", "env": [{"name": "SEED", "value": "0"}]}],
        },
    }
    job = job_spec({"pod_template": template, "gpus": 1, "env": {"SEED": "7"}}).manifest("gs-x", "ns")
    pod = job["spec"]["template"]
    assert pod["metadata"]["labels"]["team"] == "vision" and pod["spec"]["initContainers"][0]["name"] == "fetch"
    assert _main(job)["image"] == "base:1" and _main(job)["env"] == [{"name": "SEED", "value": "7"}]
    assert template["spec"]["containers"][0]["env"] == [{"name": "SEED", "value": "0"}]  # the template untouched


JOB_TEMPLATE = """
apiVersion: batch/v1
kind: Job
metadata: {name: "${name}", labels: {exp: "${exp}"}}
spec:
  parallelism: ${workers}
  template:
    spec:
      containers:
      - name: main
        image: "registry.lab/train:${version}"
        command: [python, train.py, "--exp=${exp}"]
"""


def test_a_job_template_takes_placeholders_as_whole_values_or_inside_text():
    spec = job_spec(
        {"job_template": JOB_TEMPLATE, "template_values": {"exp": "e1", "workers": 1, "version": "2.1"}, "gpus": 2}
    )
    job = spec.manifest("gs-abc", "lab")
    assert job["spec"]["parallelism"] == 1  # a number, not the text "1"
    assert job["metadata"]["labels"]["exp"] == "e1" and job["metadata"]["name"] == "gs-abc"
    assert _main(job)["image"] == "registry.lab/train:2.1" and _main(job)["command"][-1] == "--exp=e1"
    assert _main(job)["resources"]["limits"]["nvidia.com/gpu"] == "2"


@pytest.mark.parametrize(
    ("given", "names", "expected"),
    [
        ({"image": "x", "gpus": -1}, "job.gpus", "a whole number >= 0"),
        ({"image": "x", "gpu": 1}, "job.gpu", "one of image"),
        ({"gpus": 1}, "job.image", "an image"),
        ({"image": "x", "command": "python train.py"}, "job.command", "a list of arguments"),
        ({"image": "x", "memory": "lots"}, "job.memory", "a Kubernetes quantity"),
        ({"image": "x", "namespace": "Lab_1"}, "job.namespace", "a DNS label"),
        ({"image": "x", "env": {"1A": "x"}}, "job.env", "an environment variable name"),
        ({"job_template": "apiVersion: v1\nkind: Pod"}, "job.job_template", "a Job manifest"),
        ({"job_template": JOB_TEMPLATE}, "job.job_template.metadata.labels.exp", "a known placeholder"),
        ({"image": "x", "pod_template": {"spec": {}}}, "job.pod_template.spec.containers", "one or more containers"),
        (
            {"image": "x", "pod_template": {"spec": {"containers": [{}]}}, "job_template": JOB_TEMPLATE},
            "job.pod_template",
            "not both",
        ),
        (
            {
                "job_template": JOB_TEMPLATE.replace("spec:\n  parallelism", "spec:\n  x: 1\n  parallelism"),
                "template_values": {"exp": 1, "workers": 1, "version": 1},
                "pod_template": None,
                "image": "y",
                "container": "other",
            },
            "job.container",
            "a container of the pod template",
        ),
    ],
)
def test_bad_settings_are_refused_naming_the_key(given, names, expected):
    with pytest.raises(InvalidArgumentError) as err:
        job_spec(given)
    assert str(err.value).startswith(names), str(err.value)
    assert expected in str(err.value)


def test_a_kueue_queue_labels_the_job_and_suspends_it_for_admission():
    job = job_spec({"image": "x", "gpus": 8, "queue": "team-vision"}).manifest("gs-q", "lab")
    assert job["metadata"]["labels"][KUEUE_QUEUE_LABEL] == "team-vision" and job["spec"]["suspend"] is True
