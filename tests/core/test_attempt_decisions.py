"""The local-GPU attempt loop's decision step, without processes or GPUs: relaunch, retry bigger, succeed, fail."""

import json

from airflow_provider_gpusched.core.gpu.attempts import (
    Action,
    Attempt,
    AttemptOutcome,
    WorkProgress,
    decide,
)
from airflow_provider_gpusched.core.gpu.class_policy import LocalClassPolicy
from airflow_provider_gpusched.core.gpu.lease_store import Lease
from airflow_provider_gpusched.core.gpu.oom import OOMRetryPolicy
from airflow_provider_gpusched.core.gpu.placement import GPURequest
from airflow_provider_gpusched.core.gpu.supervisor import Work

GiB = 1024**3
IDLE = LocalClassPolicy(preemptible=True, max_preemptions=2, backoff=3.0, max_backoff=5.0)
WORK = Work(argv=["train"])


def outcome(number, *, exit_code=0, oom=None, preempted=None, seconds=10.0, tail=("done",)):
    lease = Lease("l", [0], ["GPU-0"], {0: 4 * GiB}, False, "owner", 1)
    attempt = Attempt(
        number=number,
        request="x",
        gpus=[0],
        exit_code=exit_code,
        oom=oom,
        seconds=seconds,
        stopped=bool(preempted),
        preempted=preempted,
        gpu_seconds=seconds,
        lost_gpu_seconds=2.0 if preempted else 0.0,
    )
    return AttemptOutcome(attempt, lease, list(tail))


def step(progress, result, *, policy=IDLE, stopping=False, retries=2):
    return decide(
        progress,
        result,
        job_class="idle",
        policy=policy,
        oom_policy=OOMRetryPolicy(retries=retries),
        gpu_sizes=[24 * GiB],
        stopping=stopping,
        work=WORK,
    )


def test_success_summarises_gpu_time():
    progress = WorkProgress(GPURequest(gpu_memory="4GiB"))
    s = step(progress, outcome(1))
    assert s.action is Action.SUCCEEDED and s.message == "GPU time (idle class): 10.0 GPU-s used"
    assert len(progress.attempts) == 1


def test_preemptions_relaunch_with_doubling_backoff_until_not_preemptible():
    progress = WorkProgress(GPURequest(gpus=1))
    first = step(progress, outcome(1, exit_code=-15, preempted="a normal task"))
    assert first.action is Action.RELAUNCH and first.wait == 3.0 and progress.history.preemptible(IDLE)
    assert "relaunching after 3.0s" in first.message and "not preemptible" not in first.message
    second = step(progress, outcome(2, exit_code=-15, preempted="a normal task"))
    assert second.action is Action.RELAUNCH and second.wait == 5.0  # 6 capped at max_backoff
    assert "the next run is not preemptible (max_preemptions=2)" in second.message
    assert progress.history.preemptions == 2 and progress.history.lost_gpu_seconds == 4.0
    assert progress.relaunch_env() == {"GPUSCHED_PREEMPTIONS": "2"}


def test_a_stopped_task_is_neither_relaunched_nor_retried():
    progress = WorkProgress(GPURequest(gpu_memory="4GiB"))
    assert step(progress, outcome(1, exit_code=-15, preempted="x"), stopping=True).action is Action.FAILED
    assert step(progress, outcome(2, exit_code=1, oom="CUDA out of memory"), stopping=True).action is Action.FAILED


def test_oom_grows_the_request_then_a_whole_gpu_then_fails():
    progress = WorkProgress(GPURequest(gpu_memory="4GiB"))
    s = step(progress, outcome(1, exit_code=1, oom="CUDA out of memory"))
    assert s.action is Action.RETRY_BIGGER and progress.request.describe() == "6.0GiB on 1 GPU"
    assert "retrying with 6.0GiB on 1 GPU" in s.message
    s = step(progress, outcome(2, exit_code=1, oom="CUDA out of memory"))
    assert s.action is Action.RETRY_BIGGER and progress.request.whole
    s = step(progress, outcome(3, exit_code=1, oom="CUDA out of memory", tail=["boom"]))
    assert s.action is Action.FAILED and "GPU out of memory after 3 attempt(s)" in s.message and "boom" in s.message


def test_other_failures_are_left_to_airflow_retries():
    progress = WorkProgress(GPURequest(gpu_memory="4GiB"))
    s = step(progress, outcome(1, exit_code=3, tail=["Traceback", "ValueError: bad lr"]))
    assert s.action is Action.FAILED and "exit code 3" in s.message and "ValueError: bad lr" in s.message


def test_progress_survives_a_deferral_as_json():
    progress = WorkProgress(GPURequest(gpu_memory="4GiB"))
    step(progress, outcome(1, exit_code=-15, preempted="x"))
    step(progress, outcome(2, exit_code=1, oom="CUDA out of memory"))
    back = WorkProgress.from_dict(json.loads(json.dumps(progress.to_dict())))
    assert back == progress and back.oom_failures == 1 and back.next_number == 3
