"""fedflow's two-stage task: a load stage admitted by host RAM, then a train stage admitted by GPU memory.

fedflow's scheduler (seed text): ``if waiting_number < max_waiting or max_waiting == 0: ... if
cls.memory_free(require_memory): task.start_load()`` and then ``device_id = cls.assign_cuda(require_cuda_memory);
if device_id >= 0: task.start_train(device)``. Here the load stage holds a lease of host RAM only, the loaded
process waits for its GPUs, and ``max_waiting`` bounds how many load-stage tasks hold RAM without GPUs.
"""

import os
import sys
import textwrap
import threading
import time

import pytest

from airflow_provider_gpusched.core.errors import InvalidArgumentError
from airflow_provider_gpusched.core.gpu import stages
from airflow_provider_gpusched.core.gpu.inventory import SimulatedInventory
from airflow_provider_gpusched.core.gpu.leases import LeaseManager
from airflow_provider_gpusched.core.gpu.placement import GPURequest
from airflow_provider_gpusched.core.gpu.supervisor import GPUWorkFailed, GPUWorkSupervisor, Work
from tests.polling import wait_until

#: a fedflow-style task: load (host RAM only, no GPU visible), then train on the GPU it is given
TWO_STAGE = textwrap.dedent("""
    import os, sys, time
    from airflow_provider_gpusched import wait_for_gpus
    data = bytearray(4 * 2**20)  # the load stage: data in host RAM
    print("load: CUDA_VISIBLE_DEVICES=%r" % os.environ["CUDA_VISIBLE_DEVICES"], flush=True)
    gpus = wait_for_gpus()
    print("train:", gpus, os.environ["CUDA_VISIBLE_DEVICES"], os.environ.get("GPUSCHED_GPU_MEMORY_BYTES"),
          len(data), flush=True)
""")


@pytest.fixture
def program(tmp_path):
    path = tmp_path / "two_stage.py"
    path.write_text(TWO_STAGE)
    return str(path)


def _run_in_thread(runner, request, work, log):
    box = {}

    def run():
        try:
            box["result"] = runner.run(request, work, log)
        except Exception as exc:  # noqa: BLE001 - the test looks at it
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, box


def test_the_load_stage_sees_no_gpu_and_the_train_stage_gets_the_placed_one(manager, program, tmp_path):
    lines = []
    result = GPUWorkSupervisor(manager, on_line=lines.append).run(
        GPURequest(gpu_memory="6GiB", host_memory="1GiB", load_stage=True),
        Work(argv=[sys.executable, program]),
        str(tmp_path / "log"),
    )
    work_lines = [line for line in lines if not line.startswith("[gpusched]")]
    assert work_lines[0] == "load: CUDA_VISIBLE_DEVICES=''"
    index = result.gpus[0]["index"]
    assert work_lines[1] == f"train: [{index}] {index} {6 * 2**30} {4 * 2**20}"
    assert any(line.startswith("[gpusched] load stage done after") for line in lines)
    assert any(line.startswith(f"[gpusched] train stage on GPU {index} after") for line in lines)
    attempt = result.attempts[0]
    assert attempt.gpus == [index] and attempt.load_seconds is not None and attempt.gpu_wait_seconds is not None
    assert attempt.gpu_seconds <= attempt.seconds - attempt.load_seconds + 0.01  # GPU time counts from the handover
    assert manager.leases() == []


def test_the_load_stage_waits_for_host_ram_while_gpus_are_free(state_dir):
    manager = LeaseManager(SimulatedInventory("2x24GiB"), state_dir, host_memory="10GiB")
    holder, _ = manager.try_acquire(GPURequest(gpu_memory="1GiB", host_memory="8GiB"), "holder")
    request = GPURequest(gpu_memory="6GiB", host_memory="4GiB", load_stage=True)
    lease, why = manager.try_acquire(request, "fedflow task")
    assert lease is None
    assert why == "host RAM: 8.0GiB of the 10.0GiB budget is reserved by 1 lease(s); the request wants 4.0GiB"
    manager.release(holder)
    lease, why = manager.try_acquire(request, "fedflow task")
    assert why == "" and lease.stage == "load" and lease.gpus == [] and lease.host_memory == 4 * 2**30
    manager.release(lease)


def test_the_train_stage_waits_for_gpu_memory_holding_its_ram_and_max_waiting_bounds_the_loaded(
    state_dir, program, tmp_path
):
    manager = LeaseManager(SimulatedInventory("1x24GiB"), state_dir, host_memory="10GiB")
    gpu_holder, _ = manager.try_acquire(GPURequest(gpu_memory="20GiB"), "someone training")
    lines = []
    request = GPURequest(gpu_memory="8GiB", host_memory="3GiB", load_stage=True, max_waiting=1)
    thread, box = _run_in_thread(
        GPUWorkSupervisor(manager, on_line=lines.append),
        request,
        Work(argv=[sys.executable, program]),
        str(tmp_path / "log"),
    )
    wait_until(
        lambda: any(lease.stage == "wait" for lease in manager.leases()),
        timeout=30,
        what="the task to load and wait for GPU memory",
    )
    waiting = next(lease for lease in manager.leases() if lease.stage == "wait")
    assert waiting.gpus == [] and waiting.host_memory == 3 * 2**30  # its RAM stays reserved while it waits
    wait_until(
        lambda: any(line.startswith("[gpusched] waiting for GPUs:") for line in lines),
        timeout=10,
        what="the wait reason in the log",
    )
    assert not any(line.startswith("train:") for line in lines)

    # max_waiting=1: a second load-stage task does not start loading while one is loaded and waiting
    second, why = manager.try_acquire(request, "second task")
    assert second is None and why == "max_waiting=1: 0 task(s) loading and 1 loaded and waiting for GPUs on this host"
    unbounded, why = manager.try_acquire(GPURequest(gpu_memory="8GiB", host_memory="3GiB", load_stage=True), "third")
    assert why == "" and unbounded.stage == "load"  # max_waiting=0 (fedflow's default): no bound
    manager.release(unbounded)

    manager.release(gpu_holder)  # GPU memory frees: the loaded task trains at once, without loading again
    thread.join(timeout=30)
    assert "error" not in box, box.get("error")
    result = box["result"]
    assert [line for line in lines if line.startswith("load:")] == ["load: CUDA_VISIBLE_DEVICES=''"]
    assert [line for line in lines if line.startswith("train:")] == [f"train: [0] 0 {8 * 2**30} {4 * 2**20}"]
    assert result.attempts[0].gpu_wait_seconds > 0
    assert manager.leases() == []


def test_the_time_limit_counts_the_wait_for_gpus(state_dir, program, tmp_path):
    manager = LeaseManager(SimulatedInventory("1x24GiB"), state_dir)
    holder, _ = manager.try_acquire(GPURequest(gpus=1), "holder")
    with pytest.raises(GPUWorkFailed, match="reached its time limit") as failed:
        GPUWorkSupervisor(manager, grace=1).run(
            GPURequest(gpus=1, load_stage=True),
            Work(argv=[sys.executable, program], time_limit=2),
            str(tmp_path / "log"),
        )
    assert failed.value.timed_out and failed.value.attempts[0].gpus == []
    assert failed.value.attempts[0].gpu_seconds == 0
    manager.release(holder)
    assert manager.leases() == []


def test_work_that_never_asks_for_gpus_holds_none(manager, tmp_path):
    result = GPUWorkSupervisor(manager).run(
        GPURequest(gpus=1, host_memory="1GiB", load_stage=True),
        Work(argv=[sys.executable, "-c", "print('only loading')"]),
        str(tmp_path / "log"),
    )
    assert result.attempts[0].gpus == [] and result.attempts[0].gpu_seconds == 0
    assert result.attempts[0].gpu_wait_seconds is None


def test_a_shell_command_with_setup_lines_speaks_the_same_channel(manager, program, tmp_path):
    (tmp_path / "env.sh").write_text("export STAGED='yes'\n")
    lines = []
    GPUWorkSupervisor(manager, on_line=lines.append).run(
        GPURequest(gpus=1, load_stage=True),
        Work(shell_command=f'echo "$STAGED"; "{sys.executable}" "{program}"', setup=[f"source {tmp_path}/env.sh"]),
        str(tmp_path / "log"),
    )
    work_lines = [line for line in lines if not line.startswith("[gpusched]")]
    assert work_lines[0] == "yes" and work_lines[2].startswith("train: [")


def test_wait_for_gpus_outside_a_load_stage_returns_the_gpus_already_given(monkeypatch):
    monkeypatch.delenv(stages.STAGE_ENV, raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert stages.wait_for_gpus() == [2, 3]


def test_cuda_touched_in_the_load_stage_is_a_clear_error(monkeypatch):
    class FakeCuda:
        @staticmethod
        def is_initialized():
            return True

    class FakeTorch:
        cuda = FakeCuda

    read_fd, write_fd = os.pipe()
    try:
        monkeypatch.setenv(stages.STAGE_ENV, f"{read_fd},{write_fd}")
        monkeypatch.setitem(sys.modules, "torch", FakeTorch)
        with pytest.raises(
            stages.StageError,
            match=r"CUDA was initialised during the load stage, before "
            r"wait_for_gpus\(\)",
        ):
            stages.wait_for_gpus()
    finally:
        os.close(read_fd)
        os.close(write_fd)


def test_bad_two_stage_settings_are_refused_by_name(manager, tmp_path):
    with pytest.raises(InvalidArgumentError, match="max_waiting"):
        GPURequest(load_stage=True, max_waiting=-1)
    with pytest.raises(InvalidArgumentError, match="load_stage"):
        GPURequest(load_stage="yes")
    with pytest.raises(InvalidArgumentError, match="load_stage"):
        GPUWorkSupervisor(manager).run(
            GPURequest(gpus=2, load_stage=True), Work(argv=["true"], distributed="srun"), str(tmp_path / "log")
        )
    time.sleep(0)
    assert manager.leases() == []
