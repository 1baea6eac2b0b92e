"""Leases between real processes: races, SIGKILL, and a lease kept alive by its GPU child."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from airflow_provider_gpusched.core.gpu.inventory import SimulatedInventory
from airflow_provider_gpusched.core.gpu.leases import LeaseManager
from airflow_provider_gpusched.core.gpu.placement import GPURequest

GiB = 1024**3
HOLDER = """
import json, sys, time
from airflow_provider_gpusched.core.gpu.inventory import SimulatedInventory
from airflow_provider_gpusched.core.gpu.leases import LeaseManager
from airflow_provider_gpusched.core.gpu.placement import GPURequest
state, memory, hold, out = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
m = LeaseManager(SimulatedInventory("4x24GiB"), state)
req = GPURequest(gpu_memory=None if memory == "whole" else memory)
lease = m.acquire(req, "racer", poll_interval=0.01)
start = time.time()
print("held", lease.gpus, flush=True)
time.sleep(hold)
end = time.time()
with open(out, "a") as fh:
    fh.write(json.dumps({"gpus": lease.gpus, "memory": list(lease.memory.values()), "whole": lease.whole,
                         "start": start, "end": end}) + "\\n")
m.release(lease)
"""


def _spawn(state, memory, hold, out):
    return subprocess.Popen(
        [sys.executable, "-c", HOLDER, state, memory, str(hold), out], stdout=subprocess.PIPE, text=True
    )


@pytest.mark.heavy
def test_twenty_processes_racing_never_exceed_capacity(state_dir, tmp_path):
    out = str(tmp_path / "holds.jsonl")
    sizes = ["8GiB", "10GiB", "whole", "6GiB"]
    procs = [_spawn(state_dir, sizes[i % 4], 0.3, out) for i in range(20)]
    for p in procs:
        assert p.wait(timeout=120) == 0
    holds = [json.loads(line) for line in Path(out).read_text().splitlines()]
    assert len(holds) == 20
    events = sorted(
        [(h["start"], 1, h) for h in holds] + [(h["end"], -1, h) for h in holds], key=lambda e: (e[0], e[1])
    )
    reserved = {i: 0 for i in range(4)}
    whole = {i: 0 for i in range(4)}
    holders = {i: 0 for i in range(4)}
    for _, sign, h in events:
        for gpu, mem in zip(h["gpus"], h["memory"], strict=True):
            reserved[gpu] += sign * mem
            holders[gpu] += sign
            whole[gpu] += sign * h["whole"]
            assert reserved[gpu] <= 24 * GiB, f"GPU {gpu} oversubscribed"
            assert not (whole[gpu] and holders[gpu] > 1), f"GPU {gpu} shared while leased whole"


def test_sigkill_of_a_holder_frees_its_lease(state_dir, tmp_path, manager):
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            HOLDER.replace(
                'req = GPURequest(gpu_memory=None if memory == "whole" else memory)', "req = GPURequest(gpus=4)"
            ),
            state_dir,
            "whole",
            "300",
            str(tmp_path / "x"),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout.readline().startswith("held [0, 1, 2, 3]")
    assert manager.try_acquire(GPURequest(gpus=1), "me")[0] is None
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=10)
    lease, why = manager.try_acquire(GPURequest(gpus=4), "me")
    assert lease is not None, why
    assert len(manager.leases()) == 1  # the dead holder's files were cleaned up


def test_lease_lives_while_the_gpu_child_lives(state_dir, tmp_path, manager):
    """The task process dies (SIGKILL) but its GPU child runs on: the GPU must stay leased."""
    script = f"""
import sys, time
from airflow_provider_gpusched.core.gpu.inventory import SimulatedInventory
from airflow_provider_gpusched.core.gpu.leases import LeaseManager
from airflow_provider_gpusched.core.gpu.placement import GPURequest
from airflow_provider_gpusched.core.gpu.launch import GPUChild, gpu_environment
m = LeaseManager(SimulatedInventory("4x24GiB"), {state_dir!r})
lease = m.acquire(GPURequest(gpus=4), "task")
child = GPUChild(["sleep", "300"], env=gpu_environment(lease, {{}}), cwd=None, log_path={str(tmp_path / "c.log")!r},
                 lease=lease).start()
m.record_child(lease, child.pid)
print(child.pid, flush=True)
time.sleep(300)
"""
    task = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    child_pid = int(task.stdout.readline())
    task.send_signal(signal.SIGKILL)
    task.wait(timeout=10)
    time.sleep(0.2)
    assert manager.try_acquire(GPURequest(gpus=1), "me")[0] is None, "GPU handed out while the child uses it"
    os.killpg(child_pid, signal.SIGKILL)
    deadline = time.time() + 10
    while time.time() < deadline:
        lease, _ = manager.try_acquire(GPURequest(gpus=4), "me")
        if lease:
            break
        time.sleep(0.1)
    assert lease is not None


def test_leases_record_owner_pid_and_class(manager):
    lease, _ = manager.try_acquire(GPURequest(gpu_memory="2GiB"), "dag.task[3]", job_class="idle", priority=5)
    (seen,) = manager.leases()
    assert (seen.owner, seen.pid, seen.job_class, seen.priority) == ("dag.task[3]", os.getpid(), "idle", 5)
    assert seen.memory == {0: 2 * GiB} and seen.simulated
    manager.release(lease)
    assert manager.leases() == []


def test_manager_on_a_fresh_inventory_object_sees_the_same_leases(state_dir):
    a = LeaseManager(SimulatedInventory("4x24GiB"), state_dir)
    b = LeaseManager(SimulatedInventory("4x24GiB"), state_dir)
    a.try_acquire(GPURequest(gpus=3), "a")
    assert b.try_acquire(GPURequest(gpus=2), "b")[0] is None


ORPHANED_HOLDER = """
import os, sys, time
from airflow_provider_gpusched.core.gpu.inventory import SimulatedInventory
from airflow_provider_gpusched.core.gpu.launch import GPUChild
from airflow_provider_gpusched.core.gpu.leases import LeaseManager
from airflow_provider_gpusched.core.gpu.placement import GPURequest
state, out = sys.argv[1], sys.argv[2]
m = LeaseManager(SimulatedInventory("4x24GiB"), state)
# a grace period the test's next looks fit in even on a busy host (with 1.5 s the orphan was stopped and gone between
# two looks on a loaded 2-core machine)
lease, why = m.try_acquire(GPURequest(gpus=2), "dag.train (run1, try 1)", task_key="dag.train (run1)", grace=1.5)
# a child that ignores SIGTERM (a trainer stuck in a CUDA call): only SIGKILL ends it
child = GPUChild(["bash", "-c", "trap '' TERM; : > " + out + ".trapped; while true; do sleep 0.1; done"], env={},
                 cwd=None, log_path=out, lease=lease).start()
m.record_child(lease, child.pid)
while not os.path.exists(out + ".trapped"):  # a SIGTERM before the trap would end it at once
    time.sleep(0.01)
print(child.pid, flush=True)
time.sleep(600)
"""


def test_a_dead_workers_child_is_stopped_and_its_retry_waits_for_it(state_dir, tmp_path):
    """The worker (lease holder) is SIGKILLed while its GPU child runs: the child keeps the GPUs only until the
    next look at the leases stops it (SIGTERM, then SIGKILL after the lease's grace period); a second try of the
    same task gets no GPUs while the first copy lives, other work does."""
    holder = subprocess.Popen(
        [sys.executable, "-c", ORPHANED_HOLDER, state_dir, str(tmp_path / "child.log")],
        stdout=subprocess.PIPE,
        text=True,
    )
    child_pid = int(holder.stdout.readline())
    holder.kill()
    holder.wait(timeout=10)
    m = LeaseManager(SimulatedInventory("4x24GiB"), state_dir)
    retry = GPURequest(gpus=1)
    lease, why = m.try_acquire(retry, "dag.train (run1, try 2)", task_key="dag.train (run1)")
    assert lease is None and "another try of this task still holds lease" in why and "is gone" in why
    [orphan] = m.leases()
    assert orphan.orphaned_at and orphan.child_pids == [child_pid] and orphan.gpus == [0, 1]
    os.kill(child_pid, 0)  # it ignores SIGTERM: still alive within the grace period
    other, _ = m.try_acquire(retry, "dag.other (run1, try 1)", task_key="dag.other (run1)")
    assert other is not None and other.gpus == [2]  # the orphan's GPUs stay taken until it is gone
    m.release(other)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        lease, why = m.try_acquire(retry, "dag.train (run1, try 2)", task_key="dag.train (run1)")
        if lease is not None:
            break
        time.sleep(0.2)
    assert lease is not None, why
    assert lease.gpus == [0]
    try:
        alive = psutil.Process(child_pid).status() != psutil.STATUS_ZOMBIE  # unreaped where PID 1 does not reap
    except psutil.NoSuchProcess:
        alive = False
    assert not alive
    assert not os.path.exists(os.path.join(state_dir, orphan.lease_id + ".orphan"))
    m.release(lease)


RAM_HOLDER = """
import json, os, sys, time
from airflow_provider_gpusched.core.gpu.inventory import SimulatedInventory
from airflow_provider_gpusched.core.gpu.leases import LeaseManager
from airflow_provider_gpusched.core.gpu.placement import GPURequest
state, ram, out = sys.argv[1], sys.argv[2], sys.argv[3]
m = LeaseManager(SimulatedInventory("4x24GiB"), state, host_memory="40GiB")
lease = m.acquire(GPURequest(gpu_memory="1GiB", host_memory=ram), "ram", poll_interval=0.01)
start = time.time()
time.sleep(0.2)
with open(out, "a") as fh:
    fh.write(json.dumps({"ram": lease.host_memory, "start": start, "end": time.time()}) + "\\n")
m.release(lease)
"""


@pytest.mark.heavy
def test_host_ram_is_a_reservation_processes_racing_never_exceed_the_budget(state_dir, tmp_path):
    """fedflow sampled free RAM, so two tasks admitted together both counted the same RAM. A request's
    host_memory is reserved in its lease under the allocation lock: 12 processes asking 16 GiB (plenty of GPU
    memory for all) on a 40 GiB budget never hold more than 2 at once, and all run."""
    out = str(tmp_path / "ram.jsonl")
    procs = [subprocess.Popen([sys.executable, "-c", RAM_HOLDER, state_dir, "16GiB", out]) for _ in range(12)]
    for p in procs:
        assert p.wait(timeout=120) == 0
    holds = [json.loads(line) for line in Path(out).read_text().splitlines()]
    assert len(holds) == 12 and all(h["ram"] == 16 * GiB for h in holds)
    events = sorted([(h["start"], 1) for h in holds] + [(h["end"], -1) for h in holds], key=lambda e: (e[0], e[1]))
    running = peak = 0
    for _, sign in events:
        running += sign
        peak = max(peak, running)
    assert peak == 2, peak


def test_host_ram_reservations_say_why_and_refuse_the_impossible(state_dir):
    import pytest

    from airflow_provider_gpusched.core.errors import InvalidArgumentError

    m = LeaseManager(SimulatedInventory("2x24GiB"), state_dir, host_memory="32GiB")
    first, _ = m.try_acquire(GPURequest(gpu_memory="2GiB", host_memory="24GiB"), "a")
    assert first is not None and first.host_memory == 24 * GiB
    again = LeaseManager(SimulatedInventory("2x24GiB"), state_dir, host_memory="32GiB")  # another process's view
    assert again.leases()[0].host_memory == 24 * GiB  # stored in the lease file, read back checked
    lease, reason = again.try_acquire(GPURequest(gpu_memory="2GiB", host_memory="10GiB"), "b")
    assert lease is None and reason == (
        "host RAM: 24.0GiB of the 32.0GiB budget is reserved by 1 lease(s); the request wants 10.0GiB"
    )
    assert again.why_not(GPURequest(gpu_memory="2GiB", host_memory="10GiB"), "b") == reason
    small, _ = again.try_acquire(GPURequest(gpu_memory="2GiB", host_memory="8GiB"), "c")
    assert small is not None  # 24 + 8 fits exactly
    no_ram, _ = again.try_acquire(GPURequest(gpu_memory="2GiB"), "d")
    assert no_ram is not None and no_ram.host_memory == 0  # a request without host_memory reserves none
    m.release(first)
    lease, reason = again.try_acquire(GPURequest(gpu_memory="2GiB", host_memory="10GiB"), "b")
    assert lease is not None, reason
    with pytest.raises(InvalidArgumentError, match="host_memory: expected at most this host's budget"):
        again.try_acquire(GPURequest(gpu_memory="2GiB", host_memory="64GiB"), "e")
    with pytest.raises(InvalidArgumentError, match="host_memory: expected a positive size"):
        GPURequest(host_memory=0)


@pytest.mark.heavy  # 0.7 s of CPU in the fast tier's run of 2026-12-07 (docs/development.md Tiers)
def test_cpu_and_free_ram_admission_say_why(state_dir):
    """fedflow's sampled host limits, kept for what no lease records (other users' programs): a busy CPU
    or too little free RAM holds a request back, naming the figure."""
    m = LeaseManager(SimulatedInventory("1x24GiB"), state_dir)
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.5)
        lease, reason = m.try_acquire(GPURequest(gpu_memory="1GiB", max_cpu_percent=1), "cpu")
        assert lease is None and "host CPU utilisation" in reason and "above max_cpu_percent=1" in reason
    finally:
        busy.kill()
        busy.wait()
    lease, reason = m.try_acquire(GPURequest(gpu_memory="1GiB", max_cpu_percent=100), "cpu")
    assert lease is not None, reason
    huge = psutil.virtual_memory().total * 2
    lease2, reason = m.try_acquire(GPURequest(gpu_memory="1GiB", min_free_ram=huge), "ram")
    assert lease2 is None and reason.startswith("host has ") and "RAM free, the request wants" in reason
