"""The GPU board from published lease records (core/board.py): what the UI shows per host and GPU."""

from __future__ import annotations

import re
import time

import pytest

from airflow_provider_gpusched.core.board import build_board, lease_record, read_lease_record
from airflow_provider_gpusched.core.gpu.inventory import SimulatedInventory
from airflow_provider_gpusched.core.safe_files import BadRecordError

GiB = 1024**3


def _record(host: str, lease_id: str, gpus: list[int], memory: int | None, job_class: str = "normal", **kw) -> dict:
    view = {
        "lease_id": lease_id,
        "gpus": gpus,
        "whole": memory is None,
        "job_class": job_class,
        "priority": 0,
        "created": 1000.0,
        "memory": {i: (memory if memory is not None else 24 * GiB) for i in gpus},
    }
    return lease_record(
        host, view, SimulatedInventory("4x24GiB").gpus(), dag_id="d", run_id="r", task_id=f"t_{lease_id}", **kw
    )


def test_two_hosts_leases_memory_and_yielding():
    records = [
        _record("gpu-a", "a1", [0], 6 * GiB),
        _record("gpu-a", "a2", [0], 6 * GiB),
        _record("gpu-a", "a3", [1, 2], None, "idle", yielding_to="d.train (r, try 1)"),
        _record("gpu-b", "b1", [3], None, map_index=7),
    ]
    board = build_board(
        [read_lease_record(r, f"record {i}") for i, r in enumerate(records)],
        waiting=[{"owner": "d.train (r, try 1)", "until": 2000.0}],
        now=1060.0,
    )
    assert [h["host"] for h in board["hosts"]] == ["gpu-a", "gpu-b"]
    a = {g["index"]: g for g in board["hosts"][0]["gpus"]}
    assert board["hosts"][0]["simulated"] and sorted(a) == [0, 1, 2, 3]
    assert a[0]["memory_leased"] == 12 * GiB and a[0]["memory_free"] == 12 * GiB and len(a[0]["leases"]) == 2
    assert a[1]["memory_free"] == 0 and a[1]["leases"][0]["yielding_to"] == "d.train (r, try 1)"
    assert a[1]["leases"][0]["job_class"] == "idle" and a[1]["leases"][0]["seconds"] == 60.0
    assert a[3]["leases"] == [] and a[3]["memory_free"] == 24 * GiB
    b = {g["index"]: g for g in board["hosts"][1]["gpus"]}
    assert b[3]["leases"][0]["map_index"] == 7 and b[3]["leases"][0]["task_id"] == "t_b1"
    assert board["waiting"][0]["owner"] == "d.train (r, try 1)"


def test_gpu_time_per_class_over_the_last_hour_and_day():
    now = 100_000.0
    ledger = [
        {"time": now - 60, "job_class": "idle", "gpu_seconds": 30.0, "lost_gpu_seconds": 1.0, "preempted": True},
        {"time": now - 7200, "job_class": "idle", "gpu_seconds": 50.0, "lost_gpu_seconds": 0.0},
        {"time": now - 600, "job_class": "normal", "gpu_seconds": 20.0, "lost_gpu_seconds": 0.0},
        {"time": now - 200_000, "job_class": "normal", "gpu_seconds": 99.0},
        {"time": "yesterday", "job_class": "normal", "gpu_seconds": 5.0},
    ]
    gpu_time = build_board([], ledger=ledger, now=now)["gpu_time"]
    assert gpu_time["hour"]["idle"]["gpu_seconds"] == 30.0 and gpu_time["hour"]["idle"]["preemptions"] == 1
    assert gpu_time["hour"]["normal"]["gpu_seconds"] == 20.0
    assert gpu_time["day"]["idle"]["gpu_seconds"] == 80.0 and gpu_time["day"]["normal"]["gpu_seconds"] == 20.0


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ({"host": ""}, "host"),
        ({"gpus": []}, "gpus"),
        ({"gpus": [True]}, "gpus[0]"),
        ({"gpus": [64]}, "gpus[0]"),
        ({"memory": {"0": -1}}, "memory.0"),
        ({"memory": {"x": 1}}, "memory.x"),
        ({"memory": []}, "memory"),
        ({"whole": "yes"}, "whole"),
        ({"started": float("nan")}, "started"),
        ({"map_index": "7"}, "map_index"),
        ({"inventory": [{"index": 0}]}, "inventory[0].uuid"),
        ({"dag_id": None}, "dag_id"),
    ],
)
def test_a_bad_record_is_refused_naming_the_key(change, key):
    record = {**_record("gpu-a", "a1", [0], GiB), **change}
    with pytest.raises(BadRecordError, match=re.escape(f"xcom of d.t_a1: key '{key}'")):
        read_lease_record(record, "xcom of d.t_a1")


def test_a_record_that_is_not_an_object_is_refused():
    with pytest.raises(BadRecordError, match="expected a JSON object"):
        read_lease_record(["gpu-a"], "xcom")


def test_hosts_known_without_a_running_lease_are_listed_with_their_gpus_free():
    """An idle host (the api-server's own, or one whose tasks ended lately) is on the board: not "0 of 0 GPUs"."""
    from airflow_provider_gpusched.core.board import BoardGPU, KnownHost

    gpus = [
        BoardGPU(g.index, g.uuid, g.name, g.memory_total, g.simulated) for g in SimulatedInventory("4x24GiB").gpus()
    ]
    busy = read_lease_record(_record("gpu-a", "a1", [0], 6 * GiB), "record")
    board = build_board(
        [busy],
        known_hosts=[
            KnownHost("gpu-a", gpus, "the api-server's own host"),
            KnownHost("gpu-b", gpus[:2], "a task ended there at 2026-11-25 10:00:00 UTC"),
        ],
    )
    hosts = {h["host"]: h for h in board["hosts"]}
    assert hosts["gpu-a"]["seen"] == "running work" and len(hosts["gpu-a"]["gpus"]) == 4
    assert hosts["gpu-a"]["gpus"][0]["memory_free"] == 18 * GiB and hosts["gpu-a"]["gpus"][1]["memory_free"] == 24 * GiB
    assert hosts["gpu-b"]["seen"].startswith("a task ended there") and hosts["gpu-b"]["simulated"]
    assert [(g["index"], g["leases"], g["memory_free"]) for g in hosts["gpu-b"]["gpus"]] == [
        (0, [], 24 * GiB),
        (1, [], 24 * GiB),
    ]
    assert build_board([], known_hosts=[])["hosts"] == []


def test_wait_reasons_name_the_tasks_holding_leases_and_say_shared_details_once():
    from airflow_provider_gpusched.core.board import explain_wait

    idle = read_lease_record(_record("gpu-a", "0123456789abcdef", [0], None, "idle", map_index=2), "record")
    state = "GPU 0: 1 lease(s), 0 foreign process(es), GPU 1: 1 lease(s), 0 foreign process(es)"
    why = f"needs 1 GPU(s) without leases, 0 free; {state}; preempting idle lease(s) 0123456789abcdef, fedcba9876543210"
    waits = [{"dag_id": "d", "task_id": f"w{i}", "why": why, "since": 1.0, "priority": 0} for i in range(3)]
    waits.append(
        {
            "dag_id": "d",
            "task_id": "w3",
            "why": f"needs 4 GPU(s) without leases, 0 free; {state}",
            "since": 1.0,
            "priority": 0,
        }
    )
    board = build_board([idle], waiting=waits)
    assert board["waiting_shared"] == [state]  # the GPUs' state, said once for every waiting task
    first = board["waiting"][0]
    assert first["reason"] == "needs 1 GPU(s) without leases, 0 free" and first["why"] == why  # the raw text is kept
    assert first["details"] == ["preempting idle lease(s) d › t_0123456789abcdef[2], lease fedcba98"]
    assert board["waiting"][3]["details"] == []
    assert explain_wait("", {}) == {"reason": "no reason recorded", "details": []}
    alone = build_board([], waiting=[waits[3]])
    assert alone["waiting_shared"] == [] and alone["waiting"][0]["details"] == [state]


def test_fleet_hosts_are_listed_from_their_own_records_idle_down_or_held_by_others():
    """Every fleet host is on the board from the record it published: its whole inventory though nothing runs,
    whether it is up (a recent record) or down, and the GPUs that processes of others hold (no room there)."""
    from airflow_provider_gpusched.core.board import fleet_known_host
    from airflow_provider_gpusched.core.fleet import FRESH_FOR, HostRecord

    now = 50_000.0
    idle = HostRecord("gpu-c", now - 3, "simulated", SimulatedInventory("1x48GiB").gpus(), [])
    down = HostRecord("gpu-b", now - FRESH_FOR - 5, "simulated", SimulatedInventory("4x80GiB").gpus(), [])
    others = HostRecord("gpu-d", now - 1, "simulated", SimulatedInventory("2x24GiB").gpus(), [], foreign_busy=[1])
    busy = read_lease_record(_record("gpu-a", "a1", [0], 6 * GiB), "record")
    board = build_board([busy], now=now, known_hosts=[fleet_known_host(r, now) for r in (idle, down, others)])
    hosts = {h["host"]: h for h in board["hosts"]}
    assert sorted(hosts) == ["gpu-a", "gpu-b", "gpu-c", "gpu-d"] and hosts["gpu-a"]["fleet"] is None
    c = hosts["gpu-c"]
    assert c["fleet"]["up"] and c["fleet"]["age"] == 3.0 and c["seen"] == "its fleet record, 3s old"
    assert [(g["memory_total"], g["memory_free"], g["leases"]) for g in c["gpus"]] == [(48 * GiB, 48 * GiB, [])]
    b = hosts["gpu-b"]
    assert not b["fleet"]["up"] and "NO RECORD FOR 35s" in b["seen"] and len(b["gpus"]) == 4
    d = {g["index"]: g for g in hosts["gpu-d"]["gpus"]}
    assert hosts["gpu-d"]["fleet"]["foreign_busy"] == [1]
    assert d[1]["held_by_others"] and d[1]["memory_free"] == 0
    assert not d[0]["held_by_others"] and d[0]["memory_free"] == 24 * GiB


def test_a_fleet_host_with_running_work_says_both_and_its_record_gives_the_inventory():
    from airflow_provider_gpusched.core.board import fleet_known_host
    from airflow_provider_gpusched.core.fleet import HostRecord

    now = 2000.0
    record = HostRecord("gpu-a", now - 2, "simulated", SimulatedInventory("2x80GiB").gpus(), [])
    lease = read_lease_record(_record("gpu-a", "a1", [0], 6 * GiB), "record")  # its XCom says 4x24GiB (older)
    host = build_board([lease], now=now, known_hosts=[fleet_known_host(record, now)])["hosts"][0]
    assert host["seen"] == "running work; its fleet record, 2s old"
    assert [g["memory_total"] for g in host["gpus"]] == [80 * GiB, 80 * GiB]  # not the XCom's older 4x24GiB
    gpu0 = host["gpus"][0]
    assert gpu0["memory_total"] == 80 * GiB and gpu0["memory_leased"] == 6 * GiB and gpu0["memory_free"] == 74 * GiB


def test_with_team_quotas_each_lease_says_its_group_and_whether_it_borrows(tmp_path):
    """The board's quota view (core/quota/report.py) from a real book: leases carry their group (from the lease's
    work tag) and "within"/"borrowed"; the groups' table comes as it is."""
    from airflow_provider_gpusched.core.quota.book import QuotaBook
    from airflow_provider_gpusched.core.quota.config import QuotaConfig
    from airflow_provider_gpusched.core.quota.policy import Claim
    from airflow_provider_gpusched.core.quota.report import quota_view

    book = QuotaBook(str(tmp_path / "quota"), QuotaConfig.from_dict({"groups": {"vision": 1, "nlp": 3}}))
    ids = ["00000000000000a1", "00000000000000a2"]
    for i, lease_id in enumerate(ids):
        # live claims, renewed as a holder does (one whose until is further ahead than its lifetime is refused)
        book.add_claim(Claim(lease_id, "gpu-a", "vision", 1.0, 1000.0 + i, 0, f"t{i}", time.time() + 30))
    view = quota_view(book, 4.0)
    leases = [read_lease_record(_record("gpu-a", lease_id, [i], None), "record") for i, lease_id in enumerate(ids)]
    for lease in leases:
        lease.group = "vision"
    board = build_board(leases, now=1060.0, quotas=view)
    got = {x["lease_id"]: (x["group"], x["quota"]) for g in board["hosts"][0]["gpus"] for x in g["leases"]}
    assert got == {ids[0]: ("vision", "within"), ids[1]: ("vision", "borrowed")}
    groups = {g["group"]: g for g in board["quotas"]["groups"]}
    assert (groups["vision"]["borrowed"], groups["nlp"]["lent"]) == (1.0, 1.0)
    assert build_board(leases, now=1060.0)["quotas"] is None


def test_a_published_lease_takes_its_group_from_its_work_tag():
    view = {
        "lease_id": "00000000000000b1",
        "gpus": [0],
        "whole": True,
        "memory": {0: 24 * GiB},
        "work": {"group": "nlp", "dag_id": "d"},
    }
    record = lease_record("gpu-a", view, SimulatedInventory("1x24GiB").gpus(), dag_id="d", run_id="r", task_id="t")
    assert read_lease_record(record, "record").group == "nlp"
