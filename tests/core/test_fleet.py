"""core/fleet.py without Airflow: routing queues, host records read back from disk, room in the fleet."""

from __future__ import annotations

import json
import os
import time

import pytest

from airflow_provider_gpusched.core import fleet
from airflow_provider_gpusched.core.errors import InvalidArgumentError
from airflow_provider_gpusched.core.gpu.inventory import SimulatedInventory
from airflow_provider_gpusched.core.gpu.leases import LeaseManager
from airflow_provider_gpusched.core.gpu.placement import GPURequest
from airflow_provider_gpusched.core.safe_files import BadRecordError

GIB = 1 << 30


def test_a_memory_request_goes_to_the_smallest_tier_that_holds_it_and_only_big_hosts_serve_it():
    assert fleet.queue_for(GPURequest(gpus=2)) == "gpu"
    assert fleet.queue_for(GPURequest(gpu_memory="60GiB")) == "gpu-64g"
    assert fleet.queue_for(GPURequest(gpu_memory="10GiB"), "idle") == "idle-12g"
    small = SimulatedInventory("2x24GiB").gpus()
    big = SimulatedInventory("4x80GiB").gpus()
    assert "gpu-64g" not in fleet.host_queues(small) and "gpu-64g" in fleet.host_queues(big)
    assert fleet.host_queues(small, "idle")[0] == "idle" and "idle-24g" in fleet.host_queues(small, "idle")
    huge = SimulatedInventory("1x288GiB").gpus()  # above every listed tier: multiples of 64 GiB
    assert fleet.queue_for(GPURequest(gpu_memory="200GiB")) == "gpu-256g" and "gpu-256g" in fleet.host_queues(huge)
    assert "gpu-320g" not in fleet.host_queues(huge)
    with pytest.raises(InvalidArgumentError, match="lane"):
        fleet.queue_for(GPURequest(), "batch")


def _publish(folder, host, spec, tmp_path, hold=None):
    manager = LeaseManager(SimulatedInventory(spec), str(tmp_path / f"leases-{host}"))
    lease = manager.try_acquire(hold, "test")[0] if hold else None
    record = fleet.record_of(manager, host)
    fleet.publish(str(folder), record)
    return manager, lease


def test_records_round_trip_and_room_follows_the_leases(tmp_path):
    folder = tmp_path / "fleet"
    _publish(folder, "gpu-a", "2x24GiB", tmp_path, hold=GPURequest(gpus=2))
    _publish(folder, "gpu-b", "4x80GiB", tmp_path)
    view = fleet.read_fleet(str(folder))
    assert [h.host for h in view.hosts] == ["gpu-a", "gpu-b"] and not view.unreadable
    assert len(view.hosts[0].leases) == 1 and view.hosts[0].sizes() == "2x24.0GiB"
    hosts, _ = view.room(GPURequest(gpus=1))
    assert hosts == ["gpu-b"], "gpu-a's two GPUs are leased"
    hosts, why = view.room(GPURequest(gpus=1, gpu_memory="60GiB"))
    assert hosts == ["gpu-b"]
    view.refuse_impossible(GPURequest(gpus=4))
    with pytest.raises(InvalidArgumentError, match=r"gpu-a 2x24.0GiB, gpu-b 4x80.0GiB"):
        view.refuse_impossible(GPURequest(gpus=5))


def test_a_stale_host_offers_no_room_and_a_bad_record_is_named_not_trusted(tmp_path):
    folder = tmp_path / "fleet"
    _publish(folder, "gpu-a", "1x24GiB", tmp_path)
    path = folder / "hosts" / "gpu-a.json"
    data = json.loads(path.read_text())
    data["time"] = time.time() - fleet.FRESH_FOR - 5
    path.write_text(json.dumps(data))
    hosts, why = fleet.read_fleet(str(folder)).room(GPURequest())
    assert hosts == [] and "no host published a record" in why
    data["gpus"][0]["memory_total"] = "lots"
    path.write_text(json.dumps(data))
    view = fleet.read_fleet(str(folder))
    assert view.hosts == [] and "gpus[0].memory_total" in view.unreadable[0][1]
    data["gpus"][0]["memory_total"] = 24 * GIB
    (folder / "hosts" / "gpu-z.json").write_text(json.dumps({**data, "host": "gpu-y"}))
    assert any("the file's name" in why for _, why in fleet.read_fleet(str(folder)).unreadable)


def test_a_host_whose_clock_runs_ahead_is_flagged_and_judged_by_when_its_record_was_written(tmp_path):
    """Issue 53, item 14: a host whose clock ran 10 minutes fast stayed "up" for 10 minutes after it died (its
    record's age was clamped at 0). The record's own time is checked against when its file was written: a host
    off by more than CLOCK_SLACK is flagged, and its freshness follows the file's time."""
    folder = tmp_path / "fleet"
    _publish(folder, "gpu-a", "1x24GiB", tmp_path)
    path = folder / "hosts" / "gpu-a.json"
    data = json.loads(path.read_text())
    now = time.time()
    data["time"] = now + 600  # its clock is 10 minutes fast
    path.write_text(json.dumps(data))
    view = fleet.read_fleet(str(folder), now)
    (host,) = view.hosts
    assert host.fresh(now) and 590 < host.clock_off < 610
    assert any("gpu-a's clock is 600s ahead of the fleet directory's" in why for _, why in view.unreadable)
    os.utime(path, (now - 120, now - 120))  # it died two minutes ago: its file was last written then
    (host,) = fleet.read_fleet(str(folder), now).hosts
    assert not host.fresh(now) and round(host.age(now)) == 120
    hosts, why = fleet.read_fleet(str(folder), now).room(GPURequest())
    assert hosts == [] and "no host published a record" in why
    data["time"] = now - 600  # a clock behind: alive (its file is new) though its own time says otherwise
    path.write_text(json.dumps(data))
    (host,) = fleet.read_fleet(str(folder), now).hosts
    assert host.fresh(now) and host.clock_off < -590 and "behind" in host.clock_note()


def test_a_host_whose_gpus_others_hold_offers_no_room(tmp_path):
    usage = tmp_path / "usage.json"
    usage.write_text(json.dumps({"0": {"memory_used": "20GiB", "pids": [os.getpid() + 100000]}}))
    manager = LeaseManager(SimulatedInventory("1x24GiB", str(usage)), str(tmp_path / "leases"))
    record = fleet.record_of(manager, "gpu-a")
    assert record.foreign_busy == [0]
    fleet.publish(str(tmp_path / "fleet"), record)
    hosts, why = fleet.read_fleet(str(tmp_path / "fleet")).room(GPURequest(gpu_memory="2GiB"))
    assert hosts == [] and "processes of others" in why


def test_publish_refuses_a_planted_link(tmp_path):
    folder = tmp_path / "fleet"
    folder.mkdir()
    os.symlink(tmp_path, folder / "hosts")
    with pytest.raises(Exception, match="symbolic link"):
        _publish(folder, "gpu-a", "1x24GiB", tmp_path)
    with pytest.raises(BadRecordError):
        fleet.read_host_record([], "x")


def test_the_head_node_lists_every_hosts_leases_and_stops_one_through_the_fleet_directory(tmp_path):
    """No ssh: the head node reads the hosts' records, and asks a host to stop a lease by a request in
    <fleet_dir>/stops/<host>; the lease's holder there sees it as a local stop request, stops, gives its GPUs
    back and publishes; the head node reports the lease stopped once the record drops it."""
    import threading

    from airflow_provider_gpusched.core.stops import StopRequest
    from airflow_provider_gpusched.core.work_tag import WorkTag

    folder = str(tmp_path / "fleet")
    manager = LeaseManager(SimulatedInventory("2x24GiB"), str(tmp_path / "leases-gpu-a"))
    fleet.join(manager, folder, "gpu-a")
    tag = WorkTag(dag_id="lab", run_id="r1", task_id="train", map_index=3, sweep="lr sweep", job_class="normal")
    lease, _ = manager.try_acquire(GPURequest(gpus=1), "holder", work=tag)
    other, _ = manager.try_acquire(GPURequest(gpus=1), "holder2")
    fleet.publish(folder, fleet.record_of(manager, "gpu-a"))
    _publish(folder, "gpu-b", "4x80GiB", tmp_path)

    entries, problems = fleet.queue_entries(fleet.read_fleet(folder), folder)
    assert not problems
    mine = [e for e in entries if e.id == lease.lease_id]
    assert len(entries) == 2 and len(mine) == 1
    assert (mine[0].host, mine[0].where, mine[0].state, mine[0].tag) == ("gpu-a", "gpu-a GPU 0", "running", tag)

    seen: list[str] = []

    def holder():  # what the operator's wait loop on gpu-a does each second
        while not manager.stop_reason(lease):
            time.sleep(0.05)
        seen.append(manager.stop_reason(lease))
        manager.release(lease)
        fleet.publish(folder, fleet.record_of(manager, "gpu-a"))

    thread = threading.Thread(target=holder)
    thread.start()
    outcomes = fleet.stop_on_hosts(folder, mine, StopRequest.now("bad learning rate; sorry"), wait=10, poll=0.05)
    thread.join(10)
    assert [o.action for o in outcomes] == ["stopped"] and "gpu-a" in outcomes[0].detail
    assert seen and "bad learning rate; sorry" in seen[0] and "gpusched queue stop" in seen[0]
    assert not os.path.exists(os.path.join(fleet.stops_dir(folder, "gpu-a"), lease.lease_id + ".stop"))
    assert manager.stop_reason(other) == ""  # only the chosen lease
    left, _ = fleet.queue_entries(fleet.read_fleet(folder), folder)
    assert [e.id for e in left] == [other.lease_id]


def test_a_host_that_does_not_answer_is_reported_still_running_and_its_lease_listed_stopping(tmp_path):
    from airflow_provider_gpusched.core.stops import StopRequest

    folder = str(tmp_path / "fleet")
    _publish(folder, "gpu-a", "2x24GiB", tmp_path, hold=GPURequest(gpus=1))
    entries, _ = fleet.queue_entries(fleet.read_fleet(folder), folder)
    outcomes = fleet.stop_on_hosts(folder, entries, StopRequest.now(), wait=0.3, poll=0.05)
    assert [o.action for o in outcomes] == ["still running"] and "gpu-a" in outcomes[0].detail
    again, _ = fleet.queue_entries(fleet.read_fleet(folder), folder)
    assert again[0].state == "stopping"
    stale, _ = fleet.queue_entries(fleet.read_fleet(folder), folder, now=time.time() + fleet.FRESH_FOR + 5)
    assert stale[0].state == "orphaned" and "published nothing" in stale[0].reason


def test_a_fleet_stop_order_is_heeded_by_every_host_and_lifted_only_where_it_was_placed(tmp_path):
    from airflow_provider_gpusched.core.stops import Selector, StopOrders, StopRequest
    from airflow_provider_gpusched.core.work_tag import WorkTag

    folder = str(tmp_path / "fleet")
    manager = LeaseManager(SimulatedInventory("1x24GiB"), str(tmp_path / "leases"))
    assert manager.stop_orders().order_for(WorkTag(dag_id="lab")) is None
    fleet.join(manager, folder, "gpu-a")
    os.makedirs(fleet.orders_dir(folder), mode=0o700)
    StopOrders(fleet.orders_dir(folder)).place(Selector(dag_id="lab"), StopRequest.now("lab paused"), 60)
    order = manager.stop_orders().order_for(WorkTag(dag_id="lab", task_id="t"))
    assert order is not None and "lab paused" in order.refusal()
    assert manager.stop_orders().order_for(WorkTag(dag_id="other")) is None
    assert manager.stop_orders().lift() == 0  # the host's own folder holds none: the head node lifts it
    assert StopOrders(fleet.orders_dir(folder)).lift() == 1
    assert manager.stop_orders().order_for(WorkTag(dag_id="lab")) is None


def test_pipeline_hosts_map_onto_fleet_hosts_and_each_host_has_its_own_queue():
    hosts = ["gpu-b", "gpu-a", "gpu-c"]
    placed = fleet.map_hosts(["rcc-0", "mb-1", "gpu-c", "rcc-0", "mb-2", "rcc-3"], hosts, {"mb-2": "gpu-b"})
    assert placed == {"rcc-0": "gpu-a", "mb-1": "gpu-b", "gpu-c": "gpu-c", "mb-2": "gpu-b", "rcc-3": "gpu-c"}
    with pytest.raises(InvalidArgumentError, match=r"host mapping\['rcc-0'\].*gpu-a, gpu-b, gpu-c"):
        fleet.map_hosts(["rcc-0"], hosts, {"rcc-0": "gpu-z"})
    with pytest.raises(InvalidArgumentError, match="fleet"):
        fleet.map_hosts(["rcc-0"], [])
    assert fleet.host_queue("gpu-b") == "gpu-on-gpu-b"
    assert fleet.host_queues(SimulatedInventory("1x24GiB").gpus(), "gpu", "gpu-b")[-1] == "gpu-on-gpu-b"
    with pytest.raises(InvalidArgumentError, match="host"):
        fleet.host_queue("gpu b; rm -rf /")


def test_a_process_forked_while_the_lease_lock_is_held_does_not_keep_it(tmp_path):
    """An Edge worker forks each task while its heartbeat thread may hold the host's allocation lock for a
    moment (publishing the host's record). A flock belongs to the open file, which the child shares: without
    care the child keeps the lock after the thread lets go, and every task on the host then waits forever (seen
    in bench/fleet_makespan.py: 11 tasks stuck on gpu-a). The child must close its copy at once."""
    import fcntl
    import threading

    manager = LeaseManager(SimulatedInventory("1x24GiB"), str(tmp_path / "leases"))
    held, go = threading.Event(), threading.Event()

    def heartbeat():
        with manager.store.allocation_lock():
            held.set()
            go.wait(10)

    thread = threading.Thread(target=heartbeat)
    thread.start()
    assert held.wait(10)
    pid = os.fork()
    if pid == 0:  # the task process: lives on while the parent goes on
        time.sleep(6)
        os._exit(0)
    try:
        go.set()
        thread.join(10)
        # the child lets go as soon as it runs (its at-fork handler), a moment after the fork: well before it exits
        fd = os.open(str(tmp_path / "leases" / "alloc.lock"), os.O_RDWR)
        try:
            deadline = time.monotonic() + 3
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    assert time.monotonic() < deadline, "the forked child kept the allocation lock"
                    time.sleep(0.05)
        finally:
            os.close(fd)
        lease, why = manager.try_acquire(GPURequest(gpus=1), "next task")
        assert lease is not None, why
    finally:
        os.waitpid(pid, 0)
