"""Three GPU hosts (Linux namespaces, SIMULATED GPUs: gpu-a 2x24GiB, gpu-b 4x80GiB, gpu-c 1x48GiB) as one pool on
Airflow's EdgeExecutor: work spreads without host names, lands where it fits, never oversubscribes a host,
survives a host that dies, and the head node sees every host."""

from __future__ import annotations

import json
import re
import threading
import time
from collections import defaultdict
from pathlib import Path

import pytest

from airflow_provider_gpusched.core.fleet import FLEET_HOSTS_XCOM
from tests.fleet.conftest import SIZES
from tests.polling import wait_until

pytestmark = [pytest.mark.fleet]
GIB = 1 << 30
LEASE_FILE = re.compile(r"^[0-9a-f]{16}\.json$")


def read_out(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


class LeaseSampler(threading.Thread):
    """Reads every host's lease files every 200 ms and records any GPU holding more than it has."""

    def __init__(self, fleet):
        super().__init__(daemon=True)
        self.fleet, self.stop, self.samples, self.problems = fleet, threading.Event(), 0, []
        self.peak = defaultdict(int)

    def run(self):
        while not self.stop.is_set():
            for host, (count, size) in SIZES.items():
                reserved, leases = defaultdict(int), 0
                folder = self.fleet.host_dir(host) / "gpu-leases"
                for name in (n for n in _listdir(folder) if LEASE_FILE.match(n)):
                    try:
                        lease = json.loads((folder / name).read_text())
                    except (OSError, ValueError):
                        continue  # released meanwhile
                    leases += 1
                    for index, memory in lease["memory"].items():
                        reserved[int(index)] += memory
                self.peak[host] = max(self.peak[host], leases)
                for index in reserved:
                    # a whole-GPU lease reserves the GPU's whole memory: a second lease on it goes over
                    if index >= count or reserved[index] > size * GIB:
                        self.problems.append((host, index, reserved[index]))
            self.samples += 1
            time.sleep(0.2)


def _listdir(folder: Path) -> list[str]:
    try:
        return [p.name for p in folder.iterdir()]
    except FileNotFoundError:
        return []


@pytest.fixture
def out_file(fleet):
    path = fleet.dir / "fleet-out" / f"{time.time_ns()}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def test_every_host_publishes_and_the_cli_lists_them(fleet):
    done = fleet.gpusched("fleet", "hosts", "--json")
    assert done.returncode == 0, done.stderr
    hosts = {h["host"]: h for h in json.loads(done.stdout)["hosts"]}
    assert set(hosts) == set(SIZES)
    for name, (count, size) in SIZES.items():
        assert [g["memory_total"] for g in hosts[name]["gpus"]] == [size * GIB] * count
        assert hosts[name]["source"] == "simulated" and hosts[name]["fresh"]


def test_24_trials_spread_over_every_host_without_oversubscription(fleet, out_file):
    sampler = LeaseSampler(fleet)
    sampler.start()
    run_id = fleet.trigger("fleet_spread", out=str(out_file), seconds=3)
    try:
        assert fleet.wait_run("fleet_spread", run_id, timeout=420) == "success"
    finally:
        sampler.stop.set()
        sampler.join()
    records = read_out(out_file)
    done = [r for r in records if r["event"] == "done"]
    assert sorted(r["tag"] for r in done) == sorted(f"trial-{i}" for i in range(24))
    assert {r["host"] for r in done} == set(SIZES), "every host took trials"
    assert sampler.samples > 20 and not sampler.problems, sampler.problems
    for host, (count, _) in SIZES.items():
        assert sampler.peak[host] <= count, (host, sampler.peak[host])
    tries = [len(fleet.xcom("fleet_spread", run_id, "trial", FLEET_HOSTS_XCOM, map_index=i)) for i in range(24)]
    print(f"landings per task: {sorted(tries)}; peak leases per host: {dict(sampler.peak)}")
    assert max(tries) <= 3, tries


def test_requests_land_where_they_fit(fleet, out_file):
    run_id = fleet.trigger("fleet_memory", out=str(out_file), seconds=2)
    assert fleet.wait_run("fleet_memory", run_id, timeout=420) == "success"
    done = {r["tag"]: r for r in read_out(out_file) if r["event"] == "done"}
    assert {done[f"big-{i}"]["host"] for i in range(3)} == {"gpu-b"}, "60 GiB fits only on the 80 GiB GPUs"
    assert done["mid"]["host"] in ("gpu-b", "gpu-c"), "40 GiB needs the 48 or 80 GiB GPUs"
    assert done["four"]["host"] == "gpu-b" and len(done["four"]["gpus"].split(",")) == 4


def test_a_request_no_host_can_hold_is_refused_naming_the_sizes(fleet):
    def error():
        errors = fleet.get("/importErrors")["import_errors"]
        return next((e["stack_trace"] for e in errors if "fleet_impossible" in e["filename"]), None)

    trace = wait_until(error, timeout=120, what="the import error of fleet_impossible.py")
    assert "gpus" in trace or "5 whole GPUs" in trace
    for size in ("2x24", "4x80", "1x48"):
        assert size in trace, trace


def test_a_host_killed_mid_sweep_loses_no_trial_and_its_leases_are_reclaimed(fleet, out_file):
    run_id = fleet.trigger("fleet_spread", out=str(out_file), seconds=12)
    wait_until(lambda: any(r["host"] == "gpu-b" for r in read_out(out_file)), timeout=180,
               what="a trial running on gpu-b")
    killed_at = time.time()
    fleet.config.run("kill-host", "gpu-b")
    assert fleet.wait_run("fleet_spread", run_id, timeout=540) == "success"
    done = [r for r in read_out(out_file) if r["event"] == "done"]
    assert sorted(r["tag"] for r in done) == sorted(f"trial-{i}" for i in range(24)), "each trial done exactly once"
    assert not [r for r in done if r["host"] == "gpu-b" and r["time"] > killed_at]
    stale = [n for n in _listdir(fleet.host_dir("gpu-b") / "gpu-leases") if LEASE_FILE.match(n)]
    assert stale, "the killed host left leases behind"
    fleet.config.run("start-host", "gpu-b")

    def reclaimed():
        hosts = {h["host"]: h for h in json.loads(fleet.gpusched("fleet", "hosts", "--json").stdout)["hosts"]}
        b = hosts.get("gpu-b")
        return b is not None and b["fresh"] and b["time"] > killed_at and not b["leases"]

    wait_until(reclaimed, timeout=120, what="gpu-b back, its stale leases reclaimed")
    assert not [n for n in _listdir(fleet.host_dir("gpu-b") / "gpu-leases") if LEASE_FILE.match(n)]
