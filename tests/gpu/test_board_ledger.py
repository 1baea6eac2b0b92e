"""The GPU board's totals agree with the host's ledger (core/gpu/accounting.py) for every kind of GPU work, counted
from what the tasks publish: a batched runner's (and an asynchronous sweep's worker's) lease history, a
preempted and relaunched task's attempts, memory slices counted as their share of the GPU, segments a task left out
of its record, and a lease still held. Real processes on leased (SIMULATED) GPUs."""

import sys

import pytest

from airflow_provider_gpusched.core.board import BoardGPU, BoardLease, build_board
from airflow_provider_gpusched.core.gpu.accounting import GPUTimeLedger, accounting_totals
from airflow_provider_gpusched.core.gpu.placement import GPURequest
from airflow_provider_gpusched.core.gpu.sweep_batch import run_local_batch
from airflow_provider_gpusched.core.gpu.timeline import (
    SegmentLog,
    ledger_of_history,
    read_history_record,
    segment_of,
)
from airflow_provider_gpusched.core.sweep import Objective, SweepSpec, uniform
from airflow_provider_gpusched.core.sweep.running.session import SweepSession
from tests.gpu.test_preemption import Background, idle_runner, make_manager, trainer_work, wait_for_lease

KEYS = ("attempts", "gpu_seconds", "lost_gpu_seconds", "preemptions")


def board_totals(history, now):
    """The board's day totals from a task's published history (read back as the api-server reads it)."""
    ledger = ledger_of_history(read_history_record(history, "test"))
    return build_board([], ledger=ledger, now=now)["gpu_time"]["day"]


def assert_same(board, ledger):
    assert set(board) == set(ledger)
    for job_class, want in ledger.items():
        for key in KEYS:
            assert board[job_class][key] == pytest.approx(want[key], abs=1e-6), (job_class, key, board, ledger)


@pytest.mark.heavy  # 0.7 s of CPU in the fast tier's run of 2026-12-07 (docs/development.md Tiers)
def test_a_batched_runners_memory_slices_count_on_the_board_as_the_ledger_counts_them(state_dir, tmp_path):
    """A batched stage's runner publishes no gpu_time record, only its segments: the board counts them, each 6 GiB
    slice of a 24 GiB GPU as a quarter of the GPU, as the ledger does (the board once counted none of it)."""
    manager = make_manager(state_dir)
    spec = SweepSpec(
        name="slices",
        search="random",
        space={"x": uniform(0, 1)},
        count=6,
        seed=0,
        command=[
            sys.executable,
            "-c",
            "import json,time; time.sleep(0.3); json.dump({'y': 1}, open('result.json','w'))",
        ],
        objective=Objective("y"),
        results_root=str(tmp_path),
    )
    manifest = SweepSession(spec).prepare()
    log = SegmentLog()
    run_local_batch(
        manifest,
        manifest.pending,
        manager,
        GPURequest(gpu_memory="6GiB"),
        parallel=3,
        trials_per_process=2,
        on_attempt=lambda attempt, label: log.add(segment_of(attempt, job_class="normal", label=label)),
    )
    ledger = accounting_totals(GPUTimeLedger(state_dir).records())
    assert ledger["normal"]["attempts"] == 3 and ledger["normal"]["gpu_seconds"] > 0
    segments = log.record()["segments"]
    # a quarter of a GPU for each attempt's length: not one GPU per attempt
    assert sum(s["gpu_seconds"] for s in segments) < 0.3 * sum(s["end"] - s["start"] for s in segments)
    assert_same(board_totals(log.record(), segments[-1]["end"] + 1), ledger)


def test_preemptions_and_lost_gpu_time_of_a_relaunched_task_agree_with_the_ledger(tmp_path, state_dir):
    """Idle work preempted by normal work and relaunched: the board's preemptions, GPU time used and lost, and
    attempts from the task's published segments are the ledger's."""
    manager = make_manager(state_dir)
    log = SegmentLog()
    runner = idle_runner(manager)
    runner.on_attempt = lambda attempt, _lease: log.add(segment_of(attempt, job_class="idle"))
    idle = Background(runner, GPURequest(gpus=2), trainer_work(tmp_path, "idle", 30), str(tmp_path / "idle.log"))
    wait_for_lease(manager, "idle")
    lease = manager.acquire(GPURequest(gpus=4), "train-main", poll_interval=0.1, timeout=30)
    manager.release(lease)
    result = idle.join()
    assert result.exit_code == 0 and result.history.preemptions == 1
    ledger = accounting_totals(GPUTimeLedger(state_dir).records())
    assert ledger["idle"]["preemptions"] == 1 and ledger["idle"]["lost_gpu_seconds"] > 0
    board = board_totals(log.record(), log.record()["segments"][-1]["end"] + 1)
    assert_same(board, ledger)


def test_segments_a_task_left_out_of_its_record_still_count():
    """A runner keeps its newest segments only: the GPU time and preemptions of those it dropped stay counted."""
    from airflow_provider_gpusched.core.gpu.attempts import Attempt

    log = SegmentLog(limit=2)
    attempts = [
        Attempt(
            number=k + 1,
            request="1 GPU",
            gpus=[0],
            exit_code=0 if k % 2 else -15,
            oom=None,
            seconds=10.0,
            stopped=not k % 2,
            preempted=None if k % 2 else "normal work needs it",
            gpu_seconds=10.0 - k,
            lost_gpu_seconds=0.0 if k % 2 else 2.0,
            started=1000.0 + 20 * k,
            host="h",
        )
        for k in range(5)
    ]
    for attempt in attempts:
        log.add(segment_of(attempt, job_class="idle"))
    record = log.record()
    assert len(record["segments"]) == 2 and record["dropped"] == 3
    ledger = accounting_totals(
        {
            "job_class": "idle",
            "gpu_seconds": a.gpu_seconds,
            "lost_gpu_seconds": a.lost_gpu_seconds,
            "preempted": a.preempted,
        }
        for a in attempts
    )
    assert ledger["idle"] == {"attempts": 5, "gpu_seconds": 40.0, "lost_gpu_seconds": 6.0, "preemptions": 3}
    assert_same(board_totals(record, 2000.0), ledger)


def test_a_lease_still_held_counts_its_share_of_the_gpu_so_far():
    """A running lease adds its time so far as the ledger will count it when it ends: a 6 GiB slice of a 24 GiB GPU
    a quarter, a whole GPU one."""
    inventory = [BoardGPU(i, f"GPU-{i}", "Simulated", 24 << 30, True) for i in range(2)]

    def lease(lease_id, gpu, memory, whole):
        return BoardLease(
            host="h",
            lease_id=lease_id,
            gpus=[gpu],
            memory={gpu: memory},
            whole=whole,
            job_class="normal",
            started=1000.0,
            dag_id="d",
            run_id="r",
            task_id="s.run_batch",
            map_index=gpu,
            inventory=inventory,
        )

    board = build_board([lease("a" * 16, 0, 6 << 30, False), lease("b" * 16, 1, 24 << 30, True)], now=1100.0)
    day = board["gpu_time"]["day"]["normal"]
    assert day["gpu_seconds"] == pytest.approx(100 * 0.25 + 100 * 1.0) and day["running"] == 2
