"""The provider as deployed: real scheduler (LocalExecutor), triggerer, dag-processor and api-server on PostgreSQL,
many tasks at once, driven through the REST API. Every claim is checked from real timestamps: the GPU children's
own records (tests/stack/dagfiles/e2e_common.py), task instances, the lease ledger and Slurm's RPC counters."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from airflow_provider_gpusched.core.gpu.inventory import SimulatedInventory
from airflow_provider_gpusched.core.gpu.leases import LeaseManager
from airflow_provider_gpusched.core.gpu.placement import GPURequest
from tests.polling import wait_until
from tests.stack.client import REPO, read_records

GiB = 1024**3
pytestmark = pytest.mark.stack


def max_overlap(intervals: list[tuple[float, float]]) -> int:
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    now = best = 0
    for _, step in events:
        now += step
        best = max(best, now)
    return best


def started(ti: dict) -> float:
    from datetime import datetime

    return datetime.fromisoformat(ti["start_date"].replace("Z", "+00:00")).timestamp()


def test_sixteen_trials_pack_four_to_a_gpu_across_worker_processes(stack, out_dir):
    run = stack.trigger("e2e_packing", out=str(out_dir), seconds=30)
    assert stack.wait_run("e2e_packing", run, timeout=480) == "success"
    records = {r["name"]: r for r in read_records(out_dir)}
    assert len(records) == 16 and {r["how"] for r in records.values()} == {"finished"}
    overlap = max_overlap([(r["start"], r["end"]) for r in records.values()])
    print(f"packing: {overlap} of 16 trials ran at the same time")
    assert overlap >= 12
    # no GPU ever above its 24 GiB: replay every start and end
    events = sorted(
        [(r["start"], 1, r) for r in records.values()] + [(r["end"], -1, r) for r in records.values()],
        key=lambda e: (e[0], e[1]),
    )
    reserved: dict[str, int] = {}
    for _, sign, r in events:
        assert r["memory"] == 6 * GiB and "," not in r["cuda"]
        reserved[r["cuda"]] = reserved.get(r["cuda"], 0) + sign * r["memory"]
        assert reserved[r["cuda"]] <= 24 * GiB, f"GPU {r['cuda']} over its memory"
    # each trial saw the CUDA_VISIBLE_DEVICES of its own lease (the task's result names the lease's GPUs)
    for i in range(16):
        result = stack.xcom("e2e_packing", run, "trial", map_index=i)
        assert ",".join(str(g["index"]) for g in result["gpus"]) == records[f"pack{i:02d}"]["cuda"]
        assert all(g["simulated"] for g in result["gpus"])


def test_idle_fillers_yield_to_normal_work_and_finish_without_airflow_retries(stack, out_dir):
    pool = stack.get("/pools/gpusched_idle")
    assert pool["slots"] == 4  # gpusched pools sync: one slot per (simulated) GPU
    fill = stack.trigger("e2e_idle_fillers", out=str(out_dir), seconds=20)
    peak = {"running": 0}

    def pool_within_slots():
        p = stack.get("/pools/gpusched_idle")
        peak["running"] = max(peak["running"], p["running_slots"])
        assert p["running_slots"] <= p["slots"], p

    wait_until(
        lambda: pool_within_slots() or sum(r["how"] == "running" for r in read_records(out_dir)) == 4,
        300,
        "4 fillers holding every GPU",
    )
    normal = stack.trigger("e2e_normal", out=str(out_dir), seconds=4)
    assert stack.wait_run("e2e_normal", normal, timeout=300, during=pool_within_slots) == "success"
    assert stack.wait_run("e2e_idle_fillers", fill, timeout=420, during=pool_within_slots) == "success"
    records = read_records(out_dir)
    [main] = [r for r in records if r["name"] == "normal"]
    [main_ti] = stack.task_instances("e2e_normal", normal)
    delay = main["start"] - started(main_ti)
    print(
        f"idle filling: normal work started its GPU child {delay:.1f}s after its task started "
        f"(fillers' grace period 3s); idle pool peak {peak['running']} of 4 slots"
    )
    assert delay < 25
    fillers = [r for r in records if r["name"].startswith("filler")]
    stopped = [r for r in fillers if r["how"] == "terminated"]
    assert stopped, "no filler was preempted"
    for r in fillers:  # nothing idle ran on the GPUs while normal work held them
        assert r["end"] <= main["start"] + 0.5 or r["start"] >= main["end"] - 0.5, r
    by_name: dict[str, list[dict]] = {}
    for r in sorted(fillers, key=lambda r: r["start"]):
        by_name.setdefault(r["name"], []).append(r)
    assert set(by_name) == {f"filler{i}" for i in range(6)}
    for attempts in by_name.values():
        assert attempts[-1]["how"] == "finished"
        for before, after in zip(
            attempts, attempts[1:], strict=False
        ):  # relaunched after a preemption, from its checkpoint
            # (a filler preempted within its first second has written none yet: it starts again from 0)
            assert before["how"] == "terminated" and after["preemptions"] >= 1
            assert after["resumed_at"] == before["checkpointed"], (before, after)
    tis = stack.task_instances("e2e_idle_fillers", fill)
    assert all(ti["state"] == "success" and ti["try_number"] == 1 for ti in tis), "an Airflow retry was used"
    # the GPU-time ledger adds up: per filler, the attempts recorded equal the children's own run time
    ledger = [json.loads(line) for line in (stack.lease_dir / "accounting.jsonl").read_text().splitlines()]
    for ti in tis:
        owner = f"e2e_idle_fillers.filler[{ti['map_index']}] ({fill}, try 1)"
        mine = [x for x in ledger if x["owner"] == owner]
        name = f"filler{ti['map_index']}"
        lived = sum(r["end"] - r["start"] for r in by_name[name])
        assert len(mine) == len(by_name[name]), (owner, mine)
        assert abs(sum(x["gpu_seconds"] for x in mine) - lived) < 2.0 * len(mine), (mine, lived)
        gpu_time = stack.xcom("e2e_idle_fillers", fill, "filler", key="gpu_time", map_index=ti["map_index"])
        assert gpu_time["preemptions"] == len(mine) - 1
        assert abs(gpu_time["gpu_seconds"] - sum(x["gpu_seconds"] for x in mine)) < 0.01


def test_higher_priority_weight_starts_first_when_slots_are_short(stack, out_dir):
    stack.ensure_pool("e2e_one_slot", 1)
    run = stack.trigger("e2e_priority", out=str(out_dir), seconds=1)
    assert stack.wait_run("e2e_priority", run, timeout=300) == "success"
    tis = sorted(stack.task_instances("e2e_priority", run), key=started)
    assert [ti["task_id"] for ti in tis] == ["p50", "p40", "p30", "p20", "p10", "p00"]
    assert [ti["priority_weight"] for ti in tis] == [150, 140, 130, 120, 110, 100]


def test_a_running_slurm_jobs_output_reaches_the_task_log_while_it_runs(stack):
    """The deferred task's log (read through the REST API, as the UI does) shows the job's lines as it writes
    them, long before it ends; at the end each line is there once and no tail repeats them."""
    run = stack.trigger("e2e_slurm_live_output")
    seen_while_deferred = ""

    def some_lines_while_deferred() -> bool:
        nonlocal seen_while_deferred
        tis = stack.task_instances("e2e_slurm_live_output", run)
        if not tis or tis[0]["state"] in (None, "scheduled", "queued"):
            return False  # no log yet
        (ti,) = tis
        log = stack.task_log("e2e_slurm_live_output", run, "job")
        if ti["state"] == "deferred" and "live line 3" in log:
            seen_while_deferred = log
            return True
        assert ti["state"] not in ("success", "failed"), "the job ended before any line reached the log"
        return False

    wait_until(some_lines_while_deferred, timeout=120, interval=1, what="the job's lines in the task log")
    assert "live line 24" not in seen_while_deferred  # the job was still writing
    assert stack.wait_run("e2e_slurm_live_output", run, timeout=180) == "success"
    log = stack.task_log("e2e_slurm_live_output", run, "job")
    for i in range(25):
        assert len(re.findall(rf"\blive line {i}\b", log)) == 1, (i, log[-3000:])
    assert "The job's output (25 lines) was shown above as it was written" in log


def _sdiag_counts() -> dict[str, int]:
    out = subprocess.run(["sdiag"], capture_output=True, text=True, check=True).stdout
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^\s+(\w+)\s+\(\s*\d+\)\s+count:(\d+)", out, re.M)}


def _slurm_nodes() -> str:
    """Every node of the test cluster, as scontrol takes them (``n1,n2``)."""
    names = subprocess.run(["sinfo", "-h", "-N", "-o", "%N"], capture_output=True, text=True, check=True).stdout.split()
    return ",".join(sorted(set(names)))


#: the tasks of e2e_slurm_many (tests/stack/dagfiles/e2e_slurm.py)
MANY = 100


def test_a_hundred_deferred_slurm_tasks_one_squeue_per_poll_and_restarts(stack, out_dir):
    """100 SlurmJobOperator tasks deferred in one triggerer (every node drained, so every job pends), plus a local-GPU
    task deferred behind a process outside Airflow that holds every GPU; the triggerer and then the scheduler are
    SIGKILLed (their whole process groups) and started again meanwhile. One squeue per poll interval, every job
    submitted once, every task ends in success in its first try. (100, not 200: the same one squeue per poll at half the task
    processes; the poller at 200 jobs is bench/slurm_tracking.py's.)"""
    nodes = _slurm_nodes()
    subprocess.run(["scontrol", "update", f"NodeName={nodes}", "State=DRAIN", "Reason=e2e: jobs pend"], check=True)
    submitted_before = _sdiag_counts().get("REQUEST_SUBMIT_BATCH_JOB", 0)
    holder = LeaseManager(SimulatedInventory("4x24GiB"), str(stack.lease_dir))
    lease, why = holder.try_acquire(GPURequest(gpus=4), "e2e test: another user's job")
    assert lease is not None, why
    released_at = None
    try:
        many = stack.trigger("e2e_slurm_many")
        t0 = time.monotonic()

        def deferred() -> int:
            return sum(ti["state"] == "deferred" for ti in stack.task_instances("e2e_slurm_many", many))

        wait_until(lambda: deferred() == MANY, 900, f"{MANY} deferred Slurm tasks", interval=3)
        print(f"{MANY} Slurm tasks submitted and deferred in {time.monotonic() - t0:.0f}s")
        waiter = stack.trigger("e2e_gpu_waiter", out=str(out_dir), seconds=2)
        wait_until(
            lambda: stack.task_instances("e2e_gpu_waiter", waiter)[0]["state"] == "deferred",
            120,
            "the local-GPU task deferred behind the holder",
        )
        # one shared poll: count the controller's job-info RPCs over a quiet window (poll interval 2 s)
        before, t1 = _sdiag_counts(), time.monotonic()
        time.sleep(20)
        after, window = _sdiag_counts(), time.monotonic() - t1
        calls = sum(after.get(k, 0) - before.get(k, 0) for k in ("REQUEST_JOB_INFO", "REQUEST_JOB_INFO_SINGLE"))
        print(f"{calls} squeue calls in {window:.0f}s for {MANY} deferred tasks (poll interval 2s)")
        assert window / 2 - 3 <= calls <= window / 2 + 3
        stack.restart("triggerer")
        stack.restart("scheduler")
        assert deferred() == MANY  # nothing was failed or resubmitted by the restarts
        assert stack.task_instances("e2e_gpu_waiter", waiter)[0]["state"] == "deferred"
        assert not read_records(out_dir)  # the GPUs are still taken: the waiter has not run
    finally:
        subprocess.run(["scontrol", "update", f"NodeName={nodes}", "State=RESUME"], check=True)
        released_at = time.time()
        holder.release(lease)
    assert stack.wait_run("e2e_slurm_many", many, timeout=600) == "success"
    assert stack.wait_run("e2e_gpu_waiter", waiter, timeout=300) == "success"
    tis = stack.task_instances("e2e_slurm_many", many)
    assert len(tis) == MANY and all(ti["state"] == "success" and ti["try_number"] == 1 for ti in tis)
    assert stack.task_instances("e2e_gpu_waiter", waiter)[0]["try_number"] == 1
    assert _sdiag_counts()["REQUEST_SUBMIT_BATCH_JOB"] - submitted_before == MANY  # no job submitted twice
    [record] = read_records(out_dir)
    assert record["name"] == "waiter" and record["start"] >= released_at  # waited for the GPUs, then ran


def test_a_killed_worker_leaves_no_second_copy_running(stack, out_dir):
    """SIGKILL the task process of a running local-GPU task: its GPU child is stopped, and the retry starts its own
    child only after the first one is gone."""
    run = stack.trigger("e2e_worker_kill", out=str(out_dir), seconds=20)
    wait_until(lambda: any(r["name"] == "victim" for r in read_records(out_dir)), 240, "the GPU child running")

    def holder() -> int:
        for path in stack.lease_dir.glob("*.json"):
            if re.fullmatch(r"[0-9a-f]{16}\.json", path.name):
                lease = json.loads(path.read_text())
                if lease["owner"].startswith("e2e_worker_kill.train"):
                    return lease["pid"]
        return 0

    os.kill(wait_until(holder, 60, "the lease of the running task"), signal.SIGKILL)
    assert stack.wait_run("e2e_worker_kill", run, timeout=360) == "success"
    first, second = sorted((r for r in read_records(out_dir) if r["name"] == "victim"), key=lambda r: r["start"])
    assert first["how"] == "terminated" and second["how"] == "finished"
    assert second["start"] >= first["end"], "the retry ran next to the first copy"
    [ti] = stack.task_instances("e2e_worker_kill", run)
    assert ti["try_number"] == 2


BROKEN_SWEEP = """
import pendulum
from airflow.sdk import DAG
from airflow_provider_gpusched.task_groups.sweep import sweep_task_group

with DAG("e2e_broken_sweep", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")):
    sweep_task_group({"name": "broken", "command": ["python3", "train.py"], "test_config": [{"lr": [0.1]}],
                      "max_trials": "many"})
"""


def test_a_broken_sweep_file_is_an_import_error_naming_the_key_and_the_rest_keeps_running(stack, out_dir):
    bad = Path(stack.extra_dags) / "e2e_broken_sweep.py"
    bad.write_text(BROKEN_SWEEP)
    try:

        def error() -> str:
            for e in stack.get("/importErrors")["import_errors"]:
                if e["filename"].endswith("e2e_broken_sweep.py"):
                    return e["stack_trace"]
            return ""

        message = wait_until(error, 120, "the import error of e2e_broken_sweep.py")
        assert "max_trials" in message, message
        run = stack.trigger("e2e_normal", out=str(out_dir), seconds=1)
        assert stack.wait_run("e2e_normal", run, timeout=240) == "success"
    finally:
        bad.unlink()


def test_queue_stop_ends_a_running_dag_run_without_retries(stack, out_dir):
    """4 trials run on the 4 GPUs and 4 wait (deferred); one `gpusched queue stop --run` ends all 8 as failed on
    their first try (retries=2 is not used), the running children SIGTERMed through their task's own loop."""
    run = stack.trigger("e2e_queue_stop", out=str(out_dir), seconds=120)
    listing: dict = {}

    def four_running():
        out = stack.gpusched("queue", "list", "--run", run, "--json")
        listing.update(json.loads(out.stdout) if out.returncode == 0 else {})
        return len([e for e in listing.get("entries", []) if e["state"] == "running"]) == 4

    wait_until(four_running, timeout=240, what="4 trials running")
    assert {e["tag"]["dag_id"] for e in listing["entries"]} == {"e2e_queue_stop"}
    assert sorted(e["tag"]["map_index"] for e in listing["entries"])[:1] != [-1]
    started = time.monotonic()
    stop = stack.gpusched(
        "queue", "stop", "--dag", "e2e_queue_stop", "--run", run, "--reason", "e2e: make room", "--json"
    )
    assert stop.returncode == 0, stop.stdout + stop.stderr
    result = json.loads(stop.stdout)
    assert [s["action"] for s in result["stopped"]] == ["stopped"] * 4, result
    assert stack.wait_run("e2e_queue_stop", run, timeout=180) == "failed"
    took = time.monotonic() - started
    tis = stack.task_instances("e2e_queue_stop", run)
    assert len(tis) == 8 and {(t["state"], t["try_number"]) for t in tis} == {("failed", 1)}, [
        (t["map_index"], t["state"], t["try_number"]) for t in tis
    ]
    records = read_records(out_dir)
    assert len(records) == 4 and {r["how"] for r in records} == {"terminated"}  # the 4 waiting never started
    print(f"queue stop: 8 task instances failed {took:.1f}s after the stop")
    assert took < 90
    assert stack.gpusched("queue", "list", "--run", run, "--json").stdout.count('"backend"') == 0
    assert stack.gpusched("queue", "lift", "--run", run).stdout.strip() == "lifted 1 stop order(s)"


def test_queue_health_of_the_deployment(stack):
    out = stack.gpusched("queue", "health")
    print(out.stdout)
    assert out.returncode == 0, out.stdout + out.stderr
    for line in (
        "[  ok] slurm reachable",
        "[warn] GPU inventory: SIMULATED: 4 GPU(s)",
        "[  ok] lease directory",
        "[  ok] airflow pools: gpusched_idle (4 slots)",
        "[  ok] triggerer alive",
    ):
        assert line in out.stdout


def test_a_1000_trial_batched_sweep_through_the_deployment(stack):
    """1,000 trials batched through the deployed stack: every trial counted, the leaderboard's best is the best of
    the trials' own results, the Sweeps API's answer stays small (sampled plot points, the best-so-far line over every
    trial), `gpusched sweep results` lists the same counts and best. (How fast each answers is bench/peer_ray_tune.py's
    to measure, not a test's.)"""
    run = stack.trigger("e2e_sweep_1000")
    assert stack.wait_run("e2e_sweep_1000", run, timeout=900) == "success"
    summary = stack.xcom("e2e_sweep_1000", run, "e2e_1000.collect")
    counts = summary["counts"]
    assert (counts["defined"], counts["succeeded"], counts["failed"], counts["waiting"]) == (1000, 1000, 0, 0), counts
    folder = Path(summary["folder"])
    scores = [json.loads(p.read_text())["score"] for p in folder.glob("trials/*/result.json")]
    assert len(scores) == 1000
    assert summary["best"]["score"] == max(scores)
    assert [r["score"] for r in summary["leaderboard"]] == sorted(scores, reverse=True)[: len(summary["leaderboard"])]

    response = stack.http.get(f"{stack.url}/gpusched/api/dags/e2e_sweep_1000/sweeps", params={"run_id": run})
    assert response.status_code == 200, response.text[:500]
    view = response.json()["sweeps"][0]
    assert len(response.content) < 2_000_000, len(response.content)
    assert view["counts"]["succeeded"] == 1000 and view["points_total"] == 1000 and len(view["points"]) == 1000
    assert view["best"]["score"] == max(scores) and view["best_so_far"][-1][1] == max(scores)

    out = stack.gpusched("sweep", "results", str(folder))
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("sweep e2e_1000 (random)"), out.stdout[:500]
    listed = json.loads(stack.gpusched("sweep", "results", "--json", str(folder)).stdout)
    assert listed["counts"]["succeeded"] == 1000 and listed["leaderboard"][0]["score"] == max(scores)


def test_the_stack_script_reads_its_settings_in_a_new_shell_and_applies_or_refuses_changes(stack):
    """Issue 52: `up` on a running stack printed "already running" and kept the old settings; `status` in a new shell
    forgot the custom port. Now `status` needs only the stack's directory; `up` with a changed setting restarts
    the Airflow components with it, and refuses other ports naming what to run."""
    import dataclasses

    config = stack.config
    script = [str(REPO / "scripts" / "stack.sh")]
    new_shell = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "GPUSCHED"))}
    new_shell["GPUSCHED_STACK_DIR"] = str(config.directory)
    status = subprocess.run(["bash", *script, "status"], env=new_shell, capture_output=True, text=True, timeout=60)
    assert status.returncode == 0, status.stdout + status.stderr
    assert f"api-server http://127.0.0.1:{config.port}" in status.stdout and "health: healthy" in status.stdout

    moved = dataclasses.replace(config, port=config.port + 7)
    refused = moved.run("up", check=False)
    assert refused.returncode == 1
    assert f"GPUSCHED_STACK_PORT={config.port + 7} differs from the running stack's {config.port}" in refused.stderr
    assert "bash scripts/stack.sh down, then up with the new ports" in refused.stderr
    assert stack.config.running()

    before = config.pid("scheduler")
    changed = dataclasses.replace(config, env_lines=config.env_lines + "\nexport GPUSCHED_E2E_CHANGED=1")
    applied = changed.run("up")
    assert "GPUSCHED_STACK_ENV changed" in applied.stderr and "restarting" in applied.stderr, applied.stderr
    assert config.pid("scheduler") != before  # restarted with the new settings, and healthy again
    assert "export GPUSCHED_E2E_CHANGED=1" in (config.directory / "env.sh").read_text()
    after = config.pid("scheduler")
    again = changed.run("up")  # the same settings again: nothing to apply, nothing restarted
    assert "changed" not in again.stderr and config.pid("scheduler") == after
    status = subprocess.run(["bash", *script, "status"], env=new_shell, capture_output=True, text=True, timeout=60)
    assert status.returncode == 0 and "health: healthy" in status.stdout, status.stdout
