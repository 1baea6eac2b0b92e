"""Each way a Kubernetes Job ends, classified with its own message and rule (core/kubernetes/states.py), from the
API's JSON as the watch and the client return it. The real cluster produces the same objects in
tests/kubernetes (exit codes, a missing image, an unschedulable pod, a deleted pod)."""

import pytest

from airflow_provider_gpusched.core.kubernetes.jobs import attach_rule
from airflow_provider_gpusched.core.kubernetes.states import JobPhase, classify, gpu_capacity


def job(conditions=(), active=0, suspend=False, labels=None, annotations=None):
    return {
        "metadata": {
            "name": "gs-1",
            "namespace": "lab",
            "uid": "u1",
            "labels": labels or {},
            "annotations": annotations or {},
        },
        "spec": {"suspend": suspend},
        "status": {
            "active": active,
            "conditions": [{"type": t, "status": "True", "reason": r, "message": m} for t, r, m in conditions],
        },
    }


def pod(
    name="gs-1-abc",
    phase="Running",
    node="node-1",
    waiting=None,
    terminated=None,
    conditions=(),
    started="2026-12-07T10:00:00Z",
    init=None,
):
    state = {}
    if waiting:
        state["waiting"] = {"reason": waiting[0], "message": waiting[1]}
    if terminated:
        state["terminated"] = {"exitCode": terminated[0], "reason": terminated[1]}
    status = {
        "phase": phase,
        "startTime": started,
        "containerStatuses": [{"name": "main", "state": state}],
        "conditions": [{"type": t, "status": s, "reason": r, "message": m} for t, s, r, m in conditions],
    }
    if init:
        status["initContainerStatuses"] = [
            {"name": "fetch", "state": {"waiting": {"reason": init[0], "message": init[1]}}}
        ]
    return {"metadata": {"name": name}, "spec": {"nodeName": node}, "status": status}


def test_a_completed_job_succeeded():
    view = classify(job([("Complete", "", "")]), [pod(phase="Succeeded", terminated=(0, "Completed"))])
    assert view.phase is JobPhase.SUCCEEDED and view.failure is None and view.node == "node-1"


@pytest.mark.parametrize(
    ("terminated", "kind", "retry", "says"),
    [
        ((3, "Error"), "exit-code", True, "exit code 3"),
        ((137, "OOMKilled"), "oom", True, "OOMKilled"),
    ],
)
def test_a_failed_container_is_classified_by_how_it_ended(terminated, kind, retry, says):
    view = classify(
        job([("Failed", "BackoffLimitExceeded", "Job has reached the specified backoff limit")]),
        [pod(phase="Failed", terminated=terminated)],
    )
    assert view.phase is JobPhase.FAILED and view.failure.kind == kind and view.failure.retry is retry
    assert says in view.message and "node-1" in view.message


def test_past_its_deadline_is_no_retry():
    view = classify(job([("Failed", "DeadlineExceeded", "Job was active longer than specified deadline")]), [pod()])
    assert view.failure.kind == "deadline" and view.failure.retry is False


@pytest.mark.parametrize("reason", ["ErrImagePull", "ImagePullBackOff", "ErrImageNeverPull", "InvalidImageName"])
def test_an_image_that_cannot_be_pulled_ends_it_at_once_without_retry(reason):
    view = classify(job(active=1), [pod(phase="Pending", waiting=(reason, 'image "nope:1" not present'))])
    assert view.phase is JobPhase.FAILED and view.failure.kind == "image" and view.failure.retry is False
    assert "nope:1" in view.message


def test_an_init_container_that_cannot_start_holds_the_pod_and_says_so():
    view = classify(
        job(active=1), [pod(phase="Pending", waiting=("PodInitializing", ""), init=("ErrImageNeverPull", "no image"))]
    )
    assert view.failure.kind == "image" and "init container fetch" in view.message


def test_a_missing_secret_is_a_config_failure():
    view = classify(
        job(active=1), [pod(phase="Pending", waiting=("CreateContainerConfigError", 'secret "token" not found'))]
    )
    assert view.failure.kind == "config" and view.failure.retry is False and 'secret "token"' in view.message


UNSCHEDULABLE = ("PodScheduled", "False", "Unschedulable", "0/6 nodes are available: 6 Insufficient nvidia.com/gpu.")


def test_an_unschedulable_pod_waits_then_fails_with_the_schedulers_message():
    pods = [pod(phase="Pending", node="", conditions=[UNSCHEDULABLE])]
    waiting = classify(job(active=1), pods, unschedulable_for=30, unschedulable_limit=600)
    assert waiting.phase is JobPhase.PENDING and "Insufficient nvidia.com/gpu" in waiting.message
    assert classify(job(active=1), pods, unschedulable_for=30).phase is JobPhase.PENDING  # no limit: waits
    given_up = classify(job(active=1), pods, unschedulable_for=601, unschedulable_limit=600)
    assert given_up.failure.kind == "unschedulable" and "6 Insufficient nvidia.com/gpu" in given_up.message


DISRUPTED = ("DisruptionTarget", "True", "PreemptionByScheduler", "Preempted in order to admit critical pod")


def test_a_preempted_pod_is_replaced_not_failed_and_counted():
    pods = [
        pod("gs-1-a", phase="Failed", conditions=[DISRUPTED], started="2026-12-07T10:00:00Z"),
        pod("gs-1-b", phase="Running", node="node-2", started="2026-12-07T10:05:00Z"),
    ]
    view = classify(job(active=1), pods, max_disruptions=3)
    assert view.phase is JobPhase.RUNNING and view.disruptions == 1 and view.node == "node-2"
    assert "after 1 disruption" in view.message


def test_more_disruptions_than_allowed_fail_it():
    pods = [
        pod(f"gs-1-{i}", phase="Failed", conditions=[DISRUPTED], started=f"2026-12-07T10:0{i}:00Z") for i in range(3)
    ]
    view = classify(job(active=0), pods, max_disruptions=2)
    assert (
        view.failure.kind == "too-many-disruptions"
        and view.failure.retry is True
        and "3 pods disrupted" in view.message
    )


def test_a_job_that_is_gone_was_deleted():
    view = classify(None, name="gs-1", namespace="lab")
    assert view.phase is JobPhase.DELETED and view.failure.kind == "deleted"


def test_a_suspended_job_waits_for_admission():
    view = classify(job(suspend=True))
    assert view.phase is JobPhase.PENDING and "Kueue" in view.message


def test_gpu_capacity_reads_each_nodes_allocatable_gpus():
    nodes = [
        {"metadata": {"name": "a"}, "status": {"allocatable": {"nvidia.com/gpu": "8"}}},
        {"metadata": {"name": "b"}, "status": {"allocatable": {"cpu": "4"}}},
        {"metadata": {"name": "c"}, "status": {"allocatable": {"nvidia.com/gpu": "x"}}},
    ]
    assert gpu_capacity(nodes) == {"a": 8}


@pytest.mark.parametrize(
    ("the_job", "pods", "rule", "why"),
    [
        (job(active=1, labels={"gpusched.io/work-key": "k"}), [pod()], "attach", "still running"),
        (job([("Complete", "", "")], labels={"gpusched.io/work-key": "k"}), [], "attach", "no try took its result"),
        (
            job(
                [("Complete", "", "")],
                labels={"gpusched.io/work-key": "k"},
                annotations={"gpusched.io/result-taken": "1"},
            ),
            [],
            "replace",
            "try 1 took",
        ),
        (
            job([("Failed", "BackoffLimitExceeded", "")], labels={"gpusched.io/work-key": "k"}),
            [pod(phase="Failed", terminated=(1, "Error"))],
            "replace",
            "failed",
        ),
        (job(active=1, labels={"gpusched.io/work-key": "other"}), [], "replace", "other work"),
    ],
)
def test_a_retry_attaches_to_live_or_untaken_work_and_replaces_the_rest(the_job, pods, rule, why):
    got, reason = attach_rule(the_job, pods, "k")
    assert got == rule and why in reason


def test_the_unschedulable_clock_waits_its_limit_then_fails_and_starts_again_when_the_pod_is_placed():
    from airflow_provider_gpusched.core.kubernetes.states import UnschedulableClock

    stuck = [pod(phase="Pending", node="", conditions=[UNSCHEDULABLE])]
    waiting = UnschedulableClock(600)
    assert waiting.classify(job(active=1), stuck).phase is JobPhase.PENDING and waiting.since is not None
    assert waiting.classify(job(active=1), [pod()]).phase is JobPhase.RUNNING and waiting.since is None
    assert UnschedulableClock(None).classify(job(active=1), stuck).phase is JobPhase.PENDING  # waits forever
    view = UnschedulableClock(0).classify(job(active=1), stuck)
    assert view.failure.kind == "unschedulable" and "Insufficient nvidia.com/gpu" in view.message
