"""The job-class mapping: (class, priority) -> Airflow pool/weight and Slurm partition/qos/nice/requeue."""

import pytest

from airflow_provider_gpusched.core.errors import InvalidArgumentError
from airflow_provider_gpusched.core.job_classes import (
    JobClassConfigError,
    JobClassMapping,
    slurm_class_settings,
)


def test_defaults_send_idle_work_to_its_pool_and_the_preemptible_partition():
    m = JobClassMapping()
    assert m["normal"].airflow_settings(priority=0, gpus=2) == {
        "priority_weight": 100,
        "weight_rule": "absolute",
        "pool_slots": 2,
    }
    assert m["idle"].airflow_settings(priority=3, gpus=1) == {
        "priority_weight": 4,
        "weight_rule": "absolute",
        "pool_slots": 1,
        "pool": "gpusched_idle",
    }
    assert slurm_class_settings("normal") == {}
    assert slurm_class_settings("idle") == {"partition": "idle", "requeue": True, "nice": 100}
    assert slurm_class_settings("idle", priority=30) == {"partition": "idle", "requeue": True, "nice": 70}
    assert slurm_class_settings("idle", priority=500)["partition"] == "idle"
    assert "nice" not in slurm_class_settings("idle", priority=500)  # never negative (needs an admin)
    assert slurm_class_settings("idle", overrides={"partition": "scavenger", "qos": None}) == {
        "partition": "scavenger",
        "requeue": True,
        "nice": 100,
    }
    assert m["idle"].local.preemptible and not m["normal"].local.preemptible
    assert m.pools() == {"gpusched_idle": ["idle"]}
    with pytest.raises(InvalidArgumentError, match="job_class"):
        slurm_class_settings("background")


def test_yaml_file_overrides_only_what_it_names(tmp_path):
    f = tmp_path / "classes.yaml"
    f.write_text("""
normal:
  airflow: {pool: gpu_main, priority_weight: 50, queue: gpu}
  slurm: {partition: batch, qos: high}
idle:
  airflow: {pool: gpu_scavenge, pool_slots: 1}
  slurm: {partition: scavenger, qos: low}
  local: {grace_period: 5, min_runtime: 0, max_preemptions: 2, backoff: 1, idle_for: 0, max_foreign_memory: 1GiB}
""")
    m = JobClassMapping.load(str(f))
    assert m.source == str(f)
    assert m["normal"].airflow_settings(2, gpus=4) == {
        "priority_weight": 52,
        "weight_rule": "absolute",
        "pool_slots": 4,
        "pool": "gpu_main",
        "queue": "gpu",
    }
    assert m["idle"].airflow_settings(0, gpus=4)["pool_slots"] == 1
    assert m["idle"].slurm_settings() == {"partition": "scavenger", "qos": "low", "requeue": True, "nice": 100}
    local = m["idle"].local
    assert (local.grace_period, local.min_runtime, local.max_preemptions, local.max_foreign_memory) == (
        5.0,
        0.0,
        2,
        2**30,
    )
    assert local.preemptible  # kept from the defaults
    assert m.pools() == {"gpu_main": ["normal"], "gpu_scavenge": ["idle"]}
    inline = JobClassMapping.load('{"idle": {"airflow": {"pool": "x"}}}')
    assert inline["idle"].airflow.pool == "x" and inline.source == "[gpusched] job_classes"


def test_backoff_doubles_and_is_capped():
    local = JobClassMapping()["idle"].local
    assert [local.backoff_for(n) for n in (1, 2, 3)] == [30.0, 60.0, 120.0]
    assert local.backoff_for(20) == local.max_backoff


@pytest.mark.parametrize(
    "text, message",
    [
        ("urgent: {}", "unknown job class 'urgent'"),
        ("idle: {local: {grace: 3}}", r"idle.local.grace: unknown setting; expected one of preemptible, grace_period"),
        ("idle: {local: {min_runtime: -1}}", r"idle.local.min_runtime: expected a number of seconds >= 0, got -1"),
        ("idle: {airflow: {pool_slots: 0}}", r"idle.airflow.pool_slots: expected 'gpus' or a whole number >= 1"),
        ("idle: {slurm: {requeue: 'yes'}}", r"idle.slurm.requeue: expected true or false"),
        ("idle: {cloud: {}}", r"idle.cloud: unknown section"),
        ("idle: [1, 2]", r"idle: expected a mapping"),
        ("idle: {local: {max_foreign_memory: lots}}", r"idle.local.max_foreign_memory"),
        ("idle: {airflow: {pool: [a]", "not valid YAML/JSON"),
    ],
)
def test_bad_mapping_names_the_source_and_key(text, message):
    with pytest.raises(JobClassConfigError, match=message) as info:
        JobClassMapping.load(text)
    assert str(info.value).startswith("[gpusched] job_classes: ")


def test_missing_mapping_file_is_named(tmp_path):
    with pytest.raises(JobClassConfigError, match=r"nope.yaml: job-class mapping file not found"):
        JobClassMapping.load(str(tmp_path / "nope.yaml"))
