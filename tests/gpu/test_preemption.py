"""Idle-time filling on (SIMULATED) local GPUs: normal work preempts idle leases, idle work relaunches
from its checkpoint, minimum runtime / maximum preemptions / idle thresholds are honoured, and GPU time
is accounted. Real processes, real signals; only the GPUs are simulated."""

import json
import sys
import threading
import time
from pathlib import Path

import pytest

from airflow_provider_gpusched.core.gpu.accounting import GPUTimeLedger, accounting_totals
from airflow_provider_gpusched.core.gpu.inventory import SimulatedInventory
from airflow_provider_gpusched.core.gpu.leases import LeaseManager
from airflow_provider_gpusched.core.gpu.placement import GPURequest, LeaseView
from airflow_provider_gpusched.core.gpu.supervisor import GPUWorkSupervisor, Work
from airflow_provider_gpusched.core.gpu.yielding import choose_victims
from airflow_provider_gpusched.core.job_classes import JobClassMapping
from tests.polling import wait_until

TRAINER = Path(__file__).resolve().parents[1] / "checkpointing_trainer.py"


def classes(**local):
    base = {"idle_for": 0, "min_runtime": 0, "grace_period": 3, "backoff": 0.2, "max_backoff": 1}
    return JobClassMapping.from_dict({"idle": {"local": {**base, **local}}}, "test classes")


def make_manager(state_dir, usage_file=None, **local):
    return LeaseManager(SimulatedInventory("4x24GiB", usage_file), state_dir, classes=classes(**local))


def trainer_work(tmp_path, name, steps):
    return Work(
        argv=[sys.executable, str(TRAINER), str(steps)],
        cwd=str(tmp_path / name),
        checkpoint_dir=str(tmp_path / name / "ckpt"),
    )


class Background:
    """Runs a GPUWorkSupervisor in a thread and keeps its result or error."""

    def __init__(self, runner, request, work, log):
        self.runner, self.events, self.result, self.error = runner, [], None, None
        runner.on_event = self.events.append
        self.thread = threading.Thread(target=self._run, args=(request, work, log), daemon=True)
        self.thread.start()

    def _run(self, request, work, log):
        try:
            self.result = self.runner.run(request, work, log)
        except Exception as exc:  # noqa: BLE001
            self.error = exc

    def join(self, timeout=60):
        self.thread.join(timeout)
        assert not self.thread.is_alive(), f"still running; events: {self.events}"
        if self.error:
            raise self.error
        return self.result


def wait_for_lease(manager, job_class, timeout=20):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        held = [lease for lease in manager.leases() if lease.job_class == job_class]
        if held:
            return held
        time.sleep(0.05)
    raise AssertionError(f"no {job_class} lease within {timeout}s")


def idle_runner(manager):
    return GPUWorkSupervisor(manager, owner="idle-fill", job_class="idle", poll_interval=0.1, yield_interval=0.2)


def test_normal_work_preempts_idle_within_grace_and_idle_resumes_from_checkpoint(tmp_path, state_dir):
    manager = make_manager(state_dir)
    idle = Background(
        idle_runner(manager), GPURequest(gpus=4), trainer_work(tmp_path, "idle", 40), str(tmp_path / "idle.log")
    )
    wait_for_lease(manager, "idle")
    time.sleep(1.0)  # ~10 steps done, a checkpoint at step 10
    asked = time.monotonic()
    lease = manager.acquire(GPURequest(gpus=4), "train-main", poll_interval=0.1, timeout=30)
    waited = time.monotonic() - asked
    assert lease.gpus == [0, 1, 2, 3] and not lease.preemptible
    assert waited < 3 + 1.5, f"normal work waited {waited:.1f}s; the grace period is 3s"
    manager.release(lease)
    result = idle.join()
    assert result.exit_code == 0
    assert result.history.preemptions == 1 and result.attempts[0].preempted == "preempted for train-main"
    assert [a.exit_code for a in result.attempts] == [143, 0]  # the trainer checkpointed on SIGTERM
    log = (tmp_path / "idle.log").read_text()
    assert "start at step 0 after 0 preemption(s)" in log
    resumed = [line for line in log.splitlines() if line.startswith("start at step") and "after 1" in line]
    assert resumed and int(resumed[0].split()[3]) >= 5, log  # resumed from its checkpoint, not from 0
    # GPU time: 4 GPUs for each attempt; lost is the time since the last checkpoint, not the whole first attempt (a
    # chunk of 5 steps is 0.5 s on an idle machine; on a loaded one, 4.7 GPU-s were seen: a bound in seconds fails
    # there, the attempt's own length does not)
    h = result.history
    assert h.gpu_seconds == pytest.approx(4 * sum(a.seconds for a in result.attempts), rel=1e-6)
    assert 0 < h.lost_gpu_seconds < 4 * result.attempts[0].seconds
    assert any("preempted at" in e and "relaunching after 0.2s" in e for e in idle.events)
    totals = accounting_totals(GPUTimeLedger(state_dir).records())
    assert totals["idle"]["preemptions"] == 1 and totals["idle"]["attempts"] == 2
    assert totals["idle"]["lost_gpu_seconds"] == pytest.approx(h.lost_gpu_seconds)


def test_a_preempted_python_call_that_raised_on_sigterm_is_judged_by_its_relaunch(tmp_path, state_dir):
    """The first start turns SIGTERM into SystemExit (as training code that checkpoints does), which leaves an
    error record; the relaunch returns a value, and that value is the outcome."""
    from airflow_provider_gpusched.core.pyfunc import write_call

    ready = tmp_path / "handler-set"

    def train():
        import os
        import signal
        import sys
        import time

        if os.environ["GPUSCHED_PREEMPTIONS"] == "0":
            signal.signal(signal.SIGTERM, lambda *a: sys.exit(143))
            ready.touch()  # a preemption before this line would kill it with -15, leaving no error record
            while True:
                time.sleep(0.05)
        return "finished after a preemption"

    manager = make_manager(state_dir)
    call_dir = str(tmp_path / "call")
    write_call(call_dir, train)
    idle = Background(idle_runner(manager), GPURequest(gpus=4), Work(call_dir=call_dir), str(tmp_path / "idle.log"))
    wait_for_lease(manager, "idle")
    wait_until(ready.exists, timeout=30, what="the first start's SIGTERM handler")
    lease = manager.acquire(GPURequest(gpus=4), "train-main", poll_interval=0.1, timeout=30)
    manager.release(lease)
    result = idle.join()
    assert result.history.preemptions == 1
    assert "SystemExit: 143" in (tmp_path / "idle.log").read_text()  # the first start's error, in the log
    assert result.value == "finished after a preemption"


def test_work_without_checkpoints_loses_the_whole_attempt(tmp_path, state_dir):
    manager = make_manager(state_dir)
    work = Work(
        argv=[sys.executable, "-c", "import time; time.sleep(60)"],
        cwd=str(tmp_path / "w"),
        checkpoint_dir=str(tmp_path / "w" / "ckpt"),
    )
    idle = Background(idle_runner(manager), GPURequest(gpus=2), work, str(tmp_path / "idle.log"))
    wait_for_lease(manager, "idle")
    time.sleep(0.5)
    lease = manager.acquire(GPURequest(gpus=4), "urgent", poll_interval=0.1, timeout=30)
    idle.runner.stop()  # end the test: no relaunch
    # a release wakes "urgent" at once, so the stop may reach the idle runner before it decides to relaunch
    # (then the preempted attempt is its last) or while it waits to relaunch: either way it is not relaunched
    with pytest.raises(Exception, match="stopped while waiting to relaunch|failed: exit code -15"):
        idle.join()
    manager.release(lease)
    record = [r for r in GPUTimeLedger(state_dir).records() if r["job_class"] == "idle"][0]
    assert record["preempted"] == "preempted for urgent"
    assert record["lost_gpu_seconds"] == pytest.approx(
        record["gpu_seconds"], abs=2 * 0.3
    )  # SIGTERM kills sleep at once


def test_minimum_runtime_delays_preemption(tmp_path, state_dir):
    manager = make_manager(state_dir, min_runtime=2.0)
    idle = Background(
        idle_runner(manager), GPURequest(gpus=4), trainer_work(tmp_path, "idle", 30), str(tmp_path / "i.log")
    )
    held = wait_for_lease(manager, "idle")[0]
    lease, why = manager.try_acquire(GPURequest(gpus=1), "main")
    assert lease is None and "become preemptible after their minimum runtime" in why and held.lease_id in why
    lease = manager.acquire(GPURequest(gpus=1), "main", poll_interval=0.1, timeout=30)
    assert time.time() - held.created >= 2.0  # not before the minimum runtime
    manager.release(lease)
    assert idle.join().history.preemptions == 1


def test_after_max_preemptions_idle_work_finishes(tmp_path, state_dir):
    manager = make_manager(state_dir, max_preemptions=1)
    idle = Background(
        idle_runner(manager), GPURequest(gpus=4), trainer_work(tmp_path, "idle", 30), str(tmp_path / "i.log")
    )
    wait_for_lease(manager, "idle")
    lease = manager.acquire(GPURequest(gpus=4), "first", poll_interval=0.1, timeout=30)
    manager.release(lease)
    relaunched = None
    deadline = time.monotonic() + 20
    while relaunched is None and time.monotonic() < deadline:  # the relaunch is not preemptible
        relaunched = next((x for x in manager.leases() if x.job_class == "idle"), None)
        time.sleep(0.05)
    assert relaunched is not None and not relaunched.preemptible
    lease, why = manager.try_acquire(GPURequest(gpus=4), "second")
    assert lease is None and "preempting" not in why
    result = idle.join()
    assert result.history.preemptions == 1 and result.exit_code == 0
    assert any("the next run is not preemptible" in e for e in idle.events)


def test_waiting_normal_work_keeps_new_idle_work_off(state_dir):
    manager = make_manager(state_dir)
    normal, _ = manager.try_acquire(GPURequest(gpus=4), "main")
    assert manager.try_acquire(GPURequest(gpus=1), "other-main")[0] is None  # now other-main waits
    lease, why = manager.try_acquire(GPURequest(gpus=1), "filler", job_class="idle")
    manager.release(normal)
    assert lease is None
    lease, why = manager.try_acquire(GPURequest(gpus=1), "filler", job_class="idle")
    assert lease is None and "normal work is waiting for GPUs (other-main)" in why
    got, _ = manager.try_acquire(GPURequest(gpus=1), "other-main")  # taking its GPU clears the mark
    lease, why = manager.try_acquire(GPURequest(gpus=1), "filler", job_class="idle")
    assert got is not None and lease is not None and lease.preemptible, why


def write_usage(path, usage):
    path.write_text(json.dumps(usage))


def test_foreign_process_keeps_idle_work_off_its_gpu(tmp_path, state_dir):
    usage = tmp_path / "usage.json"
    write_usage(
        usage,
        {"0": {"memory_used": "8GiB", "processes": [{"pid": 999999, "used_memory": "8GiB"}]}, "2": {"utilization": 90}},
    )
    manager = make_manager(state_dir, usage_file=str(usage))
    leases = [manager.try_acquire(GPURequest(gpus=1), f"idle-{i}", job_class="idle")[0] for i in range(3)]
    assert sorted(x.gpus[0] for x in leases if x) == [1, 3]  # 0 has a colleague's process, 2 is busy
    lease, why = manager.try_acquire(GPURequest(gpus=1), "idle-x", job_class="idle")
    assert lease is None and "GPU 0: 1 foreign process(es) use 8.0GiB" in why and "GPU 2: 90% utilisation" in why
    normal, _ = manager.try_acquire(GPURequest(gpus=1, memory_margin=0), "main")
    assert normal is not None  # normal work is not held back by the idle thresholds


def test_idle_work_waits_for_gpus_quiet_long_enough(tmp_path, state_dir):
    usage = tmp_path / "usage.json"
    write_usage(usage, {"0": {"memory_used": "8GiB", "processes": [{"pid": 999999, "used_memory": "8GiB"}]}})
    manager = make_manager(state_dir, usage_file=str(usage), idle_for=1.5)
    lease, why = manager.try_acquire(GPURequest(gpus=1, devices=[0]), "idle", job_class="idle")
    assert lease is None and "foreign process" in why
    write_usage(usage, {})  # the colleague's job ended
    lease, why = manager.try_acquire(GPURequest(gpus=1, devices=[0]), "idle", job_class="idle")
    assert lease is None and "quiet for 0s of the 2s" in why
    time.sleep(1.6)
    lease, why = manager.try_acquire(GPURequest(gpus=1, devices=[0]), "idle", job_class="idle")
    assert lease is not None, why


def test_idle_work_yields_when_a_foreign_process_appears(tmp_path, state_dir):
    usage = tmp_path / "usage.json"
    write_usage(usage, {})
    manager = make_manager(state_dir, usage_file=str(usage), max_preemptions=1)
    idle = Background(
        idle_runner(manager),
        GPURequest(gpus=1, devices=[1]),
        trainer_work(tmp_path, "idle", 25),
        str(tmp_path / "i.log"),
    )
    wait_for_lease(manager, "idle")
    time.sleep(0.3)
    write_usage(usage, {"1": {"memory_used": "4GiB", "processes": [{"pid": 999999, "used_memory": "4GiB"}]}})
    deadline = time.monotonic() + 10
    while not any("preempted at" in e for e in idle.events) and time.monotonic() < deadline:
        time.sleep(0.05)
    write_usage(usage, {})
    result = idle.join()
    assert result.attempts[0].preempted.startswith("foreign work appeared (GPU 1: 1 foreign process(es) use 4.0GiB")
    assert result.exit_code == 0 and result.history.preemptions == 1


def test_choose_victims_takes_the_fewest_lowest_priority_youngest():
    gpus = SimulatedInventory("4x24GiB").gpus()
    views = {
        "a": LeaseView({0: gpus[0].memory_total}, True),
        "b": LeaseView({1: gpus[1].memory_total}, True),
        "c": LeaseView({2: gpus[2].memory_total}, True),
        "d": LeaseView({3: 10 * 2**30}, False),
    }
    cands = [("a", 0, 100.0), ("b", 0, 200.0), ("c", 5, 300.0), ("d", 0, 50.0)]
    assert choose_victims(GPURequest(gpus=1), gpus, views, cands) == ["b"]  # youngest of the lowest priority
    assert sorted(choose_victims(GPURequest(gpus=2), gpus, views, cands)) == ["a", "b"]
    assert choose_victims(GPURequest(gpu_memory="20GiB"), gpus, views, cands) == ["b"]
    assert choose_victims(GPURequest(gpus=4), gpus, views, cands[:3]) is None  # d is not a candidate


def _files(state_dir):
    import os

    return {name: os.stat(os.path.join(state_dir, name)).st_mtime_ns for name in os.listdir(state_dir)}


def test_why_not_only_looks_and_hold_place_claims(state_dir):
    """A question writes nothing; a waiting task's poll marks it waiting and asks the idle lease to yield."""
    manager = make_manager(state_dir)
    idle, _ = manager.try_acquire(GPURequest(gpus=4), "idle-fill", job_class="idle")
    before = _files(state_dir)
    why = manager.why_not(GPURequest(gpus=2), "urgent", task_key="t.urgent")
    assert "GPU" in why and "preempting" not in why
    assert _files(state_dir) == before and manager.yields.waiting() == []
    assert manager.yielding_to("urgent") == []
    why = manager.hold_place(GPURequest(gpus=2), "urgent", task_key="t.urgent")
    assert f"preempting idle lease(s) {idle.lease_id}" in why
    assert [w["owner"] for w in manager.yields.waiting()] == ["urgent"]
    assert [lease.lease_id for lease in manager.yielding_to("urgent")] == [idle.lease_id]
    assert manager.yield_grace(manager.yielding_to("urgent")) == 3  # the idle class's grace_period
    assert manager.yield_reason(idle) == "preempted for urgent"
    manager.release(idle)


def test_fill_in_rules_follow_the_class_policy_not_its_name(state_dir):
    """The rules come from the policy's fill_in and preemptible, not from the name 'idle'. fill_in off: ordinary
    work (no waiting behind normal work, no quiet-GPU rule). preemptible off, fill_in on: a polite filler that
    waits its turn but is never asked to yield."""
    manager = make_manager(state_dir, fill_in=False, preemptible=False, idle_for=3600)
    manager.yields.mark_waiting("someone else")
    lease, why = manager.try_acquire(GPURequest(gpus=4), "filler", job_class="idle")
    assert lease is not None and not lease.preemptible, why
    manager.release(lease)
    polite = make_manager(state_dir, preemptible=False)  # fill_in stays on (the idle class's default)
    lease, why = polite.try_acquire(GPURequest(gpus=1), "filler", job_class="idle")
    assert lease is None and "normal work is waiting" in why
    polite.yields.clear_waiting("someone else")
    lease, why = polite.try_acquire(GPURequest(gpus=4), "filler", job_class="idle")
    assert lease is not None and not lease.preemptible, why
    why = polite.hold_place(GPURequest(gpus=1), "urgent")
    assert "preempting" not in why and polite.yielding_to("urgent") == []
    polite.release(lease)
    polite.yields.clear_waiting("urgent")
    quiet = make_manager(state_dir, idle_for=3600)
    lease, why = quiet.try_acquire(GPURequest(gpus=1), "filler", job_class="idle")
    assert lease is None and "idle work waits for" in why
