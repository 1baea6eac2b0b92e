"""Team quotas on (SIMULATED) GPU hosts: three lease directories, one quota book, real lease files and locks, real
processes and signals for the reclaim. Each "host" is a LeaseManager with its own lease directory and name, as on
a fleet; tests/fleet runs the same through Airflow on namespace hosts."""

import sys
import threading
import time
from pathlib import Path

import pytest

from airflow_provider_gpusched.core.gpu.inventory import SimulatedInventory
from airflow_provider_gpusched.core.gpu.leases import LeaseManager
from airflow_provider_gpusched.core.gpu.placement import GPURequest
from airflow_provider_gpusched.core.gpu.supervisor import GPUWorkSupervisor, Work
from airflow_provider_gpusched.core.job_classes import JobClassMapping
from airflow_provider_gpusched.core.quota import host as host_quotas
from airflow_provider_gpusched.core.quota.book import QuotaBook
from airflow_provider_gpusched.core.quota.config import QuotaConfig
from airflow_provider_gpusched.core.quota.report import quota_view
from airflow_provider_gpusched.core.work_tag import WorkTag
from tests.polling import wait_until

TRAINER = Path(__file__).resolve().parents[1] / "checkpointing_trainer.py"
HOSTS = {"gpu-a": "2x24GiB", "gpu-b": "4x80GiB", "gpu-c": "1x48GiB"}  # the fleet tier's three hosts: 7 GPUs
FAST = JobClassMapping.from_dict(
    {"normal": {"local": {"backoff": 0.2, "max_backoff": 1, "grace_period": 3}}}, "test classes"
)
ONE = GPURequest(gpus=1)


def fleet(tmp_path, quotas, hosts=HOSTS):
    config = QuotaConfig.from_dict(quotas, "test quotas")
    out = {}
    for host, inventory in hosts.items():
        m = LeaseManager(SimulatedInventory(inventory), str(tmp_path / host), classes=FAST)
        m.use_quotas(
            host_quotas.HostQuotas(QuotaBook(str(tmp_path / "quota"), config), host, m.inventory.gpus, lambda: 7.0)
        )
        out[host] = m
    return out


def take(manager, owner, group):
    lease, why = manager.try_acquire(ONE, owner, work=WorkTag(group=group))
    assert lease is not None, f"{owner} on {manager.quotas.host}: {why}"
    return lease


def states(managers):
    """lease id -> "within" / "borrowed", from the book."""
    m = next(iter(managers.values()))
    return {k: v["state"] for k, v in quota_view(m.quotas.book, 7.0)["leases"].items()}


def test_borrowing_then_the_lender_takes_its_quota_back_on_the_same_host(tmp_path):
    hosts = fleet(tmp_path, {"groups": {"vision": 3, "nlp": 4}})
    a, b, c = hosts.values()
    held = [take(m, f"v{i}", "vision") for i, m in enumerate([a, a, b, b, b, b, c])]  # all 7 GPUs
    st = states(hosts)
    assert sorted(st.values()) == ["borrowed"] * 4 + ["within"] * 3
    assert [st[x.lease_id] for x in held[:3]] == ["within"] * 3  # the oldest fill the quota
    # nlp, within its quota, on gpu-b: its newest borrowed lease there is asked back, nothing else
    lease, why = b.try_acquire(ONE, "n0", work=WorkTag(group="nlp"))
    assert lease is None and f"reclaiming borrowed lease(s) {held[5].lease_id}" in why
    assert b.yield_reason(held[5]) == "reclaimed for n0 (group nlp's quota)"
    assert all(b.yield_reason(x) == "" for x in held[2:5])
    assert [x.lease_id for x in b.yielding_to("n0")] == [held[5].lease_id]
    # while nlp waits within its quota, vision borrows nothing, anywhere
    c.release(held[6])
    lease, why = c.try_acquire(ONE, "v7", work=WorkTag(group="vision"))
    assert lease is None and "group nlp's work within its quota waits for GPUs (n0 on gpu-b)" in why
    b.release(held[5])
    got = take(b, "n0", "nlp")
    assert states(hosts)[got.lease_id] == "within"
    c.release(held[6])  # nobody waits within a quota any more: vision may borrow again
    assert c.try_acquire(ONE, "v7", work=WorkTag(group="vision"))[0] is not None


def test_a_request_on_a_host_with_nothing_to_reclaim_reclaims_on_another(tmp_path):
    """nlp fills gpu-a with its own work; vision holds gpu-b and gpu-c, one GPU beyond its quota. nlp's next
    request lands on gpu-a: nothing there is anyone else's, so vision's newest lease on another host is asked."""
    hosts = fleet(tmp_path, {"groups": {"vision": 4, "nlp": 3}})
    a, b, c = hosts.values()
    take(a, "n0", "nlp"), take(a, "n1", "nlp")
    vision = [take(b, f"v{i}", "vision") for i in range(4)] + [take(c, "v4", "vision")]
    lease, why = a.try_acquire(ONE, "n2", work=WorkTag(group="nlp"))
    assert lease is None and f"reclaiming borrowed lease(s) {vision[4].lease_id} on gpu-c" in why
    assert c.yield_reason(vision[4]) == "reclaimed for n2 (group nlp's quota)"
    assert all(b.yield_reason(x) == "" for x in vision[:4])
    # asking again asks nothing more, and says what it waits for
    again = a.try_acquire(ONE, "n2", work=WorkTag(group="nlp"))[1]
    assert f"waiting for borrowed lease(s) {vision[4].lease_id} on gpu-c" in again
    # vision may not take the GPU back while nlp waits within its quota
    c.release(vision[4])
    assert "nlp's work within its quota waits" in c.try_acquire(ONE, "v5", work=WorkTag(group="vision"))[1]
    take(c, "n2", "nlp")  # the task moved there (in a fleet, FleetRoomTrigger sends it)
    assert quota_view(c.quotas.book, 7.0)["groups"][1]["waiters"] == []  # its waiting mark on gpu-a went with it


def test_a_request_that_gets_gpus_withdraws_the_reclaims_it_asked_for(tmp_path):
    hosts = fleet(tmp_path, {"groups": {"vision": 1, "nlp": 6}}, {"gpu-b": "4x80GiB"})
    b = hosts["gpu-b"]
    vision = [take(b, f"v{i}", "vision") for i in range(4)]
    lease, why = b.try_acquire(ONE, "n0", work=WorkTag(group="nlp"))
    assert lease is None and f"reclaiming borrowed lease(s) {vision[3].lease_id}" in why
    b.release(vision[0])  # a GPU frees by itself before the reclaimed work gives its back
    take(b, "n0", "nlp")
    assert b.yield_reason(vision[3]) == "" and b.quotas.book.reclaims() == {}  # nothing more is taken from vision


def test_weights_decide_who_borrows_the_next_free_gpu(tmp_path):
    hosts = fleet(
        tmp_path, {"groups": {"light": {"quota": 1}, "heavy": {"quota": 1, "weight": 3}}}, {"gpu-b": "4x80GiB"}
    )
    b = hosts["gpu-b"]
    light = [take(b, "l0", "light"), take(b, "l1", "light")]  # 1 borrowed
    heavy = [take(b, "h0", "heavy"), take(b, "h1", "heavy")]  # 1 borrowed
    assert b.try_acquire(ONE, "l2", work=WorkTag(group="light"))[0] is None  # full: both wait to borrow
    assert b.try_acquire(ONE, "h2", work=WorkTag(group="heavy"))[0] is None
    b.release(heavy[0])  # heavy's borrowed one becomes its own; one GPU free
    # light would have 2 borrowed per weight 1 = 2.0; heavy 1 borrowed per weight 3 = 0.33: heavy first
    lease, why = b.try_acquire(ONE, "l2", work=WorkTag(group="light"))
    assert lease is None and "group heavy is further below its weighted share" in why
    take(b, "h2", "heavy")
    del light


def test_a_dead_hosts_claims_count_until_they_expire(tmp_path, monkeypatch):
    """gpu-a dies holding vision's whole quota: its claims are not renewed, and until they expire vision cannot
    run beyond its quota elsewhere; then it can."""
    monkeypatch.setattr(host_quotas, "CLAIM_TTL", 0.8)
    hosts = fleet(tmp_path, {"groups": {"vision": {"quota": 2, "borrowing_limit": 0}, "nlp": 5}})
    a, b = hosts["gpu-a"], hosts["gpu-b"]
    take(a, "v0", "vision"), take(a, "v1", "vision")  # never released, never renewed: the host is gone
    lease, why = b.try_acquire(ONE, "v2", work=WorkTag(group="vision"))
    assert lease is None and "over its borrowing limit 0 GPUs" in why
    time.sleep(0.9)
    assert b.try_acquire(ONE, "v2", work=WorkTag(group="vision"))[0] is not None


def test_a_renewed_claim_keeps_counting(tmp_path, monkeypatch):
    monkeypatch.setattr(host_quotas, "CLAIM_TTL", 0.8)
    monkeypatch.setattr("airflow_provider_gpusched.core.quota.book.CLAIM_TTL", 0.8)
    monkeypatch.setattr("airflow_provider_gpusched.core.quota.book.RENEW_BEFORE", 0.7)
    hosts = fleet(tmp_path, {"groups": {"vision": {"quota": 1, "borrowing_limit": 0}, "nlp": 6}})
    a, b = hosts["gpu-a"], hosts["gpu-b"]
    held = take(a, "v0", "vision")
    for _ in range(4):  # its holder looks every so often (the supervisor does every second)
        time.sleep(0.3)
        assert a.yield_reason(held) == ""
    assert b.try_acquire(ONE, "v1", work=WorkTag(group="vision"))[0] is None


@pytest.mark.heavy  # nine trainer processes: about 3 s of CPU
def test_reclaimed_work_checkpoints_relaunches_and_finishes_once_and_no_host_is_oversubscribed(tmp_path):
    """Real processes: vision's 7 trainers fill the fleet, 4 of them borrowed; nlp runs 2 trainers within its
    quota. The newest borrowed ones get SIGTERM, checkpoint, relaunch when GPUs free again and finish once; nlp
    waits at most the grace period; a sampler checks every host's leases every 50 ms."""
    hosts = fleet(tmp_path, {"groups": {"vision": 3, "nlp": 4}, "reclaim": {"grace_period": 3}})
    seen_over = []
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            for name, m in hosts.items():
                gpus = m.inventory.gpus()
                taken = [i for lease in m.leases() for i in lease.gpus]
                if len(taken) != len(set(taken)) or len(taken) > len(gpus):
                    seen_over.append((name, taken))
            time.sleep(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    runs, results, errors = [], {}, {}

    def run(host, owner, group, steps, first=None):
        sup = GPUWorkSupervisor(
            hosts[host], owner=owner, poll_interval=0.1, yield_interval=0.2, work=WorkTag(group=group), host=host
        )
        argv = [sys.executable, str(TRAINER), str(steps)] + ([str(first)] if first else [])
        work = Work(argv=argv, cwd=str(tmp_path / owner), checkpoint_dir=str(tmp_path / owner / "ckpt"))
        try:
            results[owner] = sup.run(ONE, work, str(tmp_path / f"{owner}.log"))
        except Exception as exc:  # noqa: BLE001
            errors[owner] = exc

    def start(*args):
        t = threading.Thread(target=run, args=args, daemon=True)
        t.start()
        runs.append(t)

    for i, host in enumerate(["gpu-a", "gpu-a", "gpu-b", "gpu-b", "gpu-b", "gpu-b", "gpu-c"]):
        start(host, f"v{i}", "vision", 60)
        wait_until(
            lambda i=i: len(results) + sum(len(m.leases()) for m in hosts.values()) > i, 30, f"v{i}'s lease", 0.05
        )
    time.sleep(0.6)  # every trainer past its first checkpoint
    asked = time.monotonic()
    start("gpu-b", "n0", "nlp", 5)
    start("gpu-c", "n1", "nlp", 5)
    wait_until(lambda: "n0" in results and "n1" in results or errors, 60, "nlp's trainers", 0.1)
    assert not errors, errors
    assert time.monotonic() - asked < 3 + 0.5 + 5 * 0.1 + 10, "nlp waited longer than the grace period allows"
    for t in runs:
        t.join(90)
    stop.set()
    assert not errors, errors
    assert seen_over == []
    preempted = {o: r for o, r in results.items() if r.history.preemptions}
    assert set(preempted) == {"v5", "v6"}  # the newest borrowed one on each host nlp came to
    for owner, r in results.items():
        assert r.exit_code == 0 and r.attempts[-1].exit_code == 0, owner
        log = (tmp_path / f"{owner}.log").read_text()
        assert log.count("done at step") == 1, owner  # finished once
    for owner in preempted:
        log = (tmp_path / f"{owner}.log").read_text()
        stopped = [line for line in log.splitlines() if line.startswith("stopped at step")]
        resumed = [line for line in log.splitlines() if line.startswith("start at step") and "after 1" in line]
        assert resumed and stopped and int(resumed[0].split()[3]) == int(stopped[0].split()[3]) > 0, log
        assert "reclaimed for" in results[owner].attempts[0].preempted
    view = quota_view(hosts["gpu-a"].quotas.book, 7.0)
    assert view["leases"] == {} and all(g["waiters"] == [] for g in view["groups"])


def test_the_lease_manager_is_given_its_quota_gate_and_refuses_a_bare_book(tmp_path):
    """Issue 78: core/gpu builds no HostQuotas (it imports no core/quota); whoever attaches quotas gives the manager
    the gate. A book given where the gate is expected is refused, naming what was expected."""
    from airflow_provider_gpusched.core.errors import InvalidArgumentError

    m = LeaseManager(SimulatedInventory("1x24GiB"), str(tmp_path / "host"), classes=FAST)
    book = QuotaBook(str(tmp_path / "quota"), QuotaConfig.from_dict({"groups": {"vision": {"quota": 1}}}, "q"))
    with pytest.raises(
        InvalidArgumentError, match="use_quotas: quotas: expected the host.s quota gate .*got .*QuotaBook"
    ):
        m.use_quotas(book)
    gate = host_quotas.HostQuotas(book, "gpu-a", m.inventory.gpus)
    m.use_quotas(gate)
    assert m.quotas is gate
    assert take(m, "t1", "vision") is not None
    assert quota_view(book, 1.0)["groups"][0]["used"] == 1
