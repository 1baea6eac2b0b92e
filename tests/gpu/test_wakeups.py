"""Waiting for GPUs without polling: a release wakes the waiters (at once in this process, through the
releases counter from another), identical waiters do not all retry after one release, lease files are
parsed again only when they change, and OOM evidence is sampled only where the inventory lists processes."""

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from airflow_provider_gpusched.core.gpu.inventory import SimulatedInventory
from airflow_provider_gpusched.core.gpu.launch import GPUChild
from airflow_provider_gpusched.core.gpu.lease_store import RELEASES_FILE
from airflow_provider_gpusched.core.gpu.leases import LeaseManager
from airflow_provider_gpusched.core.gpu.placement import GPURequest
from airflow_provider_gpusched.core.gpu.supervisor import MemorySampler, Work, run_attempt
from tests.conftest import REPO

WHOLE = GPURequest(gpus=4)


def _acquire_in_thread(manager, request, owner, poll_interval):
    got = {}

    def wait():
        got["lease"] = manager.acquire(request, owner, poll_interval=poll_interval, timeout=60)
        got["at"] = time.monotonic()

    thread = threading.Thread(target=wait)
    thread.start()
    return thread, got


def test_a_release_in_this_process_wakes_the_waiter_before_its_poll(manager):
    held, _ = manager.try_acquire(WHOLE, "holder")
    thread, got = _acquire_in_thread(manager, WHOLE, "waiter", poll_interval=30)
    time.sleep(0.3)
    assert "lease" not in got
    released = time.monotonic()
    manager.release(held)
    thread.join(timeout=10)
    assert got["lease"].gpus == [0, 1, 2, 3]
    assert got["at"] - released < 2, "the waiter slept until its 30 s poll instead of waking on the release"
    manager.release(got["lease"])


def test_a_release_in_another_process_wakes_the_waiter(manager, state_dir):
    script = (
        f"import sys; sys.path.insert(0, {str(REPO)!r})\n"
        "from airflow_provider_gpusched.core.gpu.inventory import SimulatedInventory\n"
        "from airflow_provider_gpusched.core.gpu.leases import LeaseManager\n"
        "from airflow_provider_gpusched.core.gpu.placement import GPURequest\n"
        f"m = LeaseManager(SimulatedInventory('4x24GiB'), {state_dir!r})\n"
        "lease, why = m.try_acquire(GPURequest(gpus=4), 'other process')\n"
        "print('held', flush=True); sys.stdin.readline(); m.release(lease); print('released', flush=True)\n"
    )
    other = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert other.stdout.readline().strip() == "held"
        before = manager.store.release_count()
        thread, got = _acquire_in_thread(manager, WHOLE, "waiter", poll_interval=30)
        time.sleep(0.3)
        assert "lease" not in got
        other.stdin.write("\n")
        other.stdin.flush()
        assert other.stdout.readline().strip() == "released"
        released = time.monotonic()
        thread.join(timeout=10)
        assert got["at"] - released < 2
        assert manager.store.release_count() == before + 1
        manager.release(got["lease"])
    finally:
        other.kill()
        other.wait()


def test_a_garbled_releases_counter_falls_back_to_polling(manager, state_dir):
    held, _ = manager.try_acquire(WHOLE, "holder")
    with open(os.path.join(state_dir, RELEASES_FILE), "w") as fh:
        fh.write("not a counter")
    assert manager.store.release_count() == -1
    thread, got = _acquire_in_thread(manager, WHOLE, "waiter", poll_interval=0.2)
    manager.release(held)  # rewrites the counter from 0: well-formed again
    thread.join(timeout=10)
    assert got["lease"] is not None
    assert manager.store.release_count() >= 1


def test_identical_waiters_do_not_all_retry_after_one_release(manager):
    """Eight waiters for the same request, one release that frees room for one of them: the others do
    not each take the allocation lock to find out that the room is gone."""
    held = [manager.try_acquire(GPURequest(gpus=1), f"holder {i}")[0] for i in range(4)]
    calls = []
    real_try = manager.try_acquire

    def counting_try(*args, **kwargs):
        calls.append(time.monotonic())
        return real_try(*args, **kwargs)

    manager.try_acquire = counting_try
    results = []
    threads = [
        threading.Thread(
            target=lambda i=i: results.append(
                manager.acquire(GPURequest(gpus=1), f"waiter {i}", poll_interval=30, timeout=60)
            )
        )
        for i in range(8)
    ]
    for t in threads:
        t.start()
    time.sleep(0.5)
    before = len(calls)
    assert before == 8  # each tried once, and waits
    manager.release(held[0])
    time.sleep(0.5)
    assert len(results) == 1
    assert len(calls) - before <= 2, f"{len(calls) - before} attempts after one release"
    for lease in held[1:]:
        manager.release(lease)
    released = 0
    deadline = time.monotonic() + 30
    while released < 8 and time.monotonic() < deadline:  # each waiter in turn, woken by the last release
        if released < len(results):
            manager.release(results[released])
            released += 1
        else:
            time.sleep(0.01)
    for t in threads:
        t.join(timeout=20)
    assert released == 8


def test_a_lease_file_changed_by_its_holder_is_read_again(manager, state_dir):
    lease, _ = manager.try_acquire(GPURequest(gpus=1), "holder")
    assert manager.leases()[0].child_pids == []
    other = LeaseManager(SimulatedInventory("4x24GiB"), state_dir)
    other.record_child(lease, os.getpid())  # another manager (another process) rewrites the file
    assert manager.leases()[0].child_pids == [os.getpid()]
    path = os.path.join(state_dir, lease.lease_id + ".json")
    record = json.loads(Path(path).read_text())
    record["gpus"] = "not a list"
    with open(path + ".new", "w") as fh:
        json.dump(record, fh)
    os.replace(path + ".new", path)
    seen = manager.leases()
    assert seen[0].unreadable and "gpus" in seen[0].unreadable  # checked again, not served from the cache
    manager.release(lease)


def test_memory_is_sampled_only_where_the_inventory_lists_processes(tmp_path):
    usage = tmp_path / "usage.json"
    usage.write_text("{}")
    plain = LeaseManager(SimulatedInventory("1x24GiB"), str(tmp_path / "a"))
    listed = LeaseManager(SimulatedInventory("1x24GiB", usage_file=str(usage)), str(tmp_path / "b"))
    half = GPURequest(gpu_memory="12GiB")
    for manager, sampled in ((plain, False), (listed, True)):
        lease, _ = manager.try_acquire(half, "me")
        assert MemorySampler.useful(manager.inventory, lease) is sampled
        manager.release(lease)
    whole, _ = listed.try_acquire(GPURequest(gpus=1), "me")
    assert not MemorySampler.useful(listed.inventory, whole)  # a whole GPU has no reservation to run into
    listed.release(whole)


def test_memory_evidence_counts_the_childs_descendants(tmp_path):
    """The child's own child (same session) uses 20 GiB of a 12 GiB reservation on the listed GPU, then
    fails: the sampler attributes it to the child without walking the process tree, so it counts as OOM."""
    usage = tmp_path / "usage.json"
    usage.write_text("{}")
    manager = LeaseManager(SimulatedInventory("1x24GiB", usage_file=str(usage)), str(tmp_path / "leases"))
    lease, _ = manager.try_acquire(GPURequest(gpu_memory="12GiB"), "me")
    script = (
        f"import json, subprocess, sys, time\n"
        f"p = subprocess.Popen(['sleep', '30'])\n"
        f"json.dump({{'0': {{'processes': [{{'pid': p.pid, 'used_memory': '20GiB'}}]}}}}, open({str(usage)!r}, 'w'))\n"
        f"time.sleep(1.5); p.kill(); sys.exit(1)\n"
    )
    outcome = run_attempt(
        manager,
        lease,
        Work(argv=[sys.executable, "-c", script]),
        number=1,
        request=GPURequest(gpu_memory="12GiB"),
        log_path=str(tmp_path / "log"),
        sample_interval=0.1,
    )
    manager.release(lease)
    assert outcome.attempt.exit_code == 1
    assert outcome.attempt.oom, "20 GiB used of a 12 GiB reservation by the child's own child"


def test_a_childs_exit_is_seen_at_once(tmp_path):
    child = GPUChild(["sleep", "0.3"], env=dict(os.environ), cwd=None, log_path=str(tmp_path / "log")).start()
    waits = 0
    while child.wait(timeout=5) is None:
        waits += 1
    assert waits == 0
    assert time.monotonic() - child.started_at < 1.5  # not after the 5 s timeout
    assert child.wait(timeout=1) == 0
