"""The UI plugin's JSON API inside Airflow's real FastAPI app (in process), after real DAG runs (dag.test on SQLite,
real Slurm, simulated GPUs): what each endpoint returns, and Airflow's auth in front of it (401, 403 per DAG)."""

import json
import os
import re

import pytest

from .conftest import REPO, run_and_collect, token

pytestmark = [pytest.mark.airflow, pytest.mark.slurm]


def dags():
    from .conftest import load_dag_file

    module = load_dag_file(REPO / "tests" / "airflow" / "dagfiles" / "t_ui.py")
    return module.private, module.public


#: idle-class work here starts on a GPU quiet for 0 s instead of the default 60 s: the module's runs and the
#: two-host test's idle hold each waited a minute for nothing these tests look at (the two-host test once ran past
#: its 120 s wait for that minute on a loaded CI machine)
QUICK_IDLE = json.dumps({"idle": {"local": {"idle_for": 0}}})


@pytest.fixture(scope="module")
def runs(tmp_path_factory, slurm_cluster):
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "airflow", "db", "migrate"], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    old = os.environ.get("AIRFLOW__GPUSCHED__JOB_CLASSES")
    os.environ["AIRFLOW__GPUSCHED__JOB_CLASSES"] = QUICK_IDLE  # also for the processes the tests start
    try:
        private, public = dags()
        yield {"private": run_and_collect(private), "public": run_and_collect(public)}
    finally:
        if old is None:
            os.environ.pop("AIRFLOW__GPUSCHED__JOB_CLASSES", None)
        else:
            os.environ["AIRFLOW__GPUSCHED__JOB_CLASSES"] = old


def test_every_endpoint_needs_a_login(client, runs):
    run_id = "any-run"  # refused before the run is looked up
    for path in (
        "/gpusched/api/gpus",
        "/gpusched/api/dags/ui_private_mixed/sweeps",
        f"/gpusched/api/dags/ui_open_job/runs/{run_id}/tasks/job/slurm",
    ):
        assert client.get(path).status_code == 401, path
        # a forged token is refused too (Airflow answers 403 for a token it cannot decode)
        assert client.get(path, headers={"Authorization": "Bearer not-a-token"}).status_code in (401, 403), path


def test_a_user_without_access_to_a_dag_gets_403_for_its_sweeps_and_jobs(client, runs):
    outsider = token(client, "outsider")
    run_id = _run_id("ui_private_mixed")
    assert client.get("/gpusched/api/dags/ui_private_mixed/sweeps", headers=outsider).status_code == 403
    r = client.get(f"/gpusched/api/dags/ui_private_mixed/runs/{run_id}/tasks/array/slurm", headers=outsider)
    assert r.status_code == 403
    # the same user reads a DAG it may read, and the board
    open_run = _run_id("ui_open_job")
    assert (
        client.get(f"/gpusched/api/dags/ui_open_job/runs/{open_run}/tasks/job/slurm", headers=outsider).status_code
        == 200
    )
    assert client.get("/gpusched/api/gpus", headers=outsider).status_code == 200


def _run_id(dag_id):
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        return (
            session.execute(select(DagRun.run_id).where(DagRun.dag_id == dag_id).order_by(DagRun.run_after.desc()))
            .scalars()
            .first()
        )


def test_sweep_view_counts_ranks_and_links_each_trial(client, runs):
    state, _xcoms, states = runs["private"]
    assert states[("ui_grid.trial", 0)][0] is not None
    r = client.get("/gpusched/api/dags/ui_private_mixed/sweeps", headers=token(client, "viewer"))
    assert r.status_code == 200, r.text
    data = r.json()
    assert data["run_id"] == _run_id("ui_private_mixed") and data["runs"] == [data["run_id"]]
    (sweep,) = data["sweeps"]
    assert sweep["sweep"] == "ui_grid" and {
        k: sweep["objective"][k] for k in ("metric", "mode", "describe", "several")
    } == {"metric": "acc", "mode": "maximize", "describe": "maximize acc", "several": False}
    counts = sweep["counts"]
    assert counts["defined"] == 6 and counts["succeeded"] == 4 and counts["failed"] == 2, counts
    assert counts["waiting"] == counts["running"] == counts["skipped"] == 0
    board = sweep["leaderboard"]
    assert [row["params"] for row in board[:2]] == [{"lr": 0.01, "depth": 2}, {"lr": 0.001, "depth": 2}]
    assert board[0]["score"] == pytest.approx(0.98) and sweep["best"]["trial_id"] == board[0]["trial_id"]
    assert board[0]["task_id"] == "ui_grid.trial" and board[0]["map_index"] >= 0  # links to its task instance
    assert {p["error"] is not None for p in sweep["problems"]} == {True}
    assert all("diverged" in p["error"] or "failed" in p["error"] for p in sweep["problems"]), sweep["problems"]
    assert sorted(sweep["numeric_params"]) == ["depth", "lr"] and len(sweep["points"]) == 4


def test_slurm_job_view_of_an_array_job(client, runs):
    run_id = _run_id("ui_private_mixed")
    r = client.get(
        f"/gpusched/api/dags/ui_private_mixed/runs/{run_id}/tasks/array/slurm", headers=token(client, "admin")
    )
    assert r.status_code == 200, r.text
    job = r.json()
    assert job["final"] and job["state"] == "COMPLETED" and job["exit_code"] == 0 and job["array"] == "0-2"
    assert [t["task"] for t in job["tasks"]] == ["0", "1", "2"]
    assert {t["state"] for t in job["tasks"]} == {"COMPLETED"} and all(t["nodes"] for t in job["tasks"])
    assert all(t["elapsed"] is not None for t in job["tasks"])
    assert {k: v.strip() for k, v in job["tails"].items()} == {str(i): f"array task {i} done" for i in range(3)}
    assert job["task_state"] == "success" and job["via"] == "local"


def test_slurm_job_view_of_a_failed_job_has_exit_code_and_output_tail(client, runs):
    run_id = _run_id("ui_open_job")
    r = client.get(f"/gpusched/api/dags/ui_open_job/runs/{run_id}/tasks/job/slurm", headers=token(client, "viewer"))
    job = r.json()
    assert job["state"] == "FAILED" and job["exit_code"] == 3 and job["task_state"] == "failed"
    assert job["nodes"] and job["partition"] == "batch" and job["elapsed"] is not None
    assert job["tails"][""].splitlines() == ["line one", 'line two; with a quote "']
    missing = client.get(
        f"/gpusched/api/dags/ui_open_job/runs/{run_id}/tasks/nothing/slurm", headers=token(client, "viewer")
    )
    assert missing.status_code == 200 and missing.json()["found"] is False and not missing.json()["local_gpus"]
    assert "no Slurm job recorded" in missing.json()["message"] and job["found"] is True


def test_the_slurm_job_tab_of_a_local_gpu_task_is_a_plain_answer_not_an_error(client, runs):
    """The "Slurm job" tab is on every task instance: a local-GPU task gets 200 and where to look instead."""
    run_id = _run_id("ui_private_mixed")
    r = client.get(
        f"/gpusched/api/dags/ui_private_mixed/runs/{run_id}/tasks/gpu_work/slurm", headers=token(client, "admin")
    )
    assert r.status_code == 200, r.text
    assert r.json()["found"] is False and r.json()["local_gpus"] is True
    assert "it ran on local GPUs" in r.json()["message"]


def test_a_finished_tasks_lease_says_where_and_when_it_ran(client, runs):
    """What the "GPU lease" link of a finished task shows: its lease as published, its GPU time, the task's dates."""
    run_id = _run_id("ui_private_mixed")
    path = f"/gpusched/api/dags/ui_private_mixed/runs/{run_id}/tasks/gpu_work/lease"
    r = client.get(path, headers=token(client, "admin"))
    assert r.status_code == 200, r.text
    info = r.json()
    assert info["task_state"] == "success" and info["end_date"] >= info["start_date"] > 0
    lease = info["lease"]
    assert lease["dag_id"] == "ui_private_mixed" and lease["job_class"] == "idle" and lease["whole"]
    assert len(lease["gpus"]) == 1 and lease["host"] and len(lease["inventory"]) == 4
    assert info["gpu_time"]["job_class"] == "idle" and info["gpu_time"]["gpu_seconds"] > 0 and info["problems"] == []
    assert client.get(path, headers=token(client, "outsider")).status_code == 403
    missing = client.get(
        f"/gpusched/api/dags/ui_private_mixed/runs/{run_id}/tasks/nope/lease", headers=token(client, "admin")
    )
    assert missing.status_code == 404 and "no task instance nope" in missing.json()["detail"]


def test_an_idle_board_lists_the_api_servers_own_gpus_and_hosts_seen_lately(client, runs):
    """No lease runs in these (finished) runs, yet the board lists this host's 4 simulated GPUs, all free: it is
    the api-server's own host (a GPU host here) and its tasks ended there lately."""
    from airflow.utils.net import get_hostname

    board = client.get("/gpusched/api/gpus", headers=token(client, "viewer")).json()
    (host,) = [h for h in board["hosts"] if h["host"] == get_hostname()]
    assert [g["index"] for g in host["gpus"]] == [0, 1, 2, 3] and host["simulated"]
    assert all(g["memory_total"] == 24 * 2**30 for g in host["gpus"])
    idle = [g for g in host["gpus"] if not g["leases"]]
    assert idle and all(g["memory_free"] == g["memory_total"] for g in idle)
    assert host["seen"] in ("the api-server's own host", "running work")


def test_the_board_shows_what_the_api_servers_own_gpus_measure(client, runs, tmp_path, monkeypatch):
    """The api-server's own (simulated) GPUs are sampled on a thread of the api-server: the driver's figures (a
    usage file stands in for NVML), labelled simulated, and a process that is not ours marked, with its user."""
    import getpass
    import signal

    from airflow.utils.net import get_hostname

    from airflow_provider_gpusched.plugins.api.telemetry import OWN_SAMPLER
    from tests.processes import start_foreign_process

    usage = tmp_path / "usage.json"
    monkeypatch.setenv("GPUSCHED_SIMULATE_USAGE", str(usage))
    colleague = start_foreign_process(120)
    try:
        usage.write_text(
            json.dumps(
                {
                    "1": {
                        "utilization": 64,
                        "memory_used": "5GiB",
                        "processes": [{"pid": colleague, "used_memory": "5GiB"}],
                    }
                }
            )
        )
        assert OWN_SAMPLER.restart()  # its first sample reads the usage file written above
        board = client.get("/gpusched/api/gpus", headers=token(client, "viewer")).json()
        (host,) = [h for h in board["hosts"] if h["host"] == get_hostname()]
        assert host["telemetry"]["sampled_by"] == "the api-server" and host["telemetry"]["error"] == ""
        assert (host["telemetry"]["resolution"], host["telemetry"]["window"]) == (10.0, 600.0)
        busy, idle = host["gpus"][1]["measured"], host["gpus"][0]["measured"]
        assert busy["simulated"] and busy["utilization"] == 64 and busy["memory_used"] == 5 * 2**30
        assert busy["temperature"] == 30 + 64 // 3 and busy["power_watts"] == 50.0 + 2.5 * 64  # made up: simulated
        (proc,) = busy["processes"]
        assert (proc["pid"], proc["ours"], proc["user"]) == (colleague, False, getpass.getuser())
        assert busy["others"] == 1 and busy["others_memory"] == 5 * 2**30 and not busy["stale"]
        assert (idle["utilization"], idle["memory_used"], idle["processes"]) == (0, 0, [])
        assert len(busy["series"]) >= 1 and busy["series"][-1][1:3] == [64, 5 * 2**30]
    finally:
        os.kill(colleague, signal.SIGKILL)
        monkeypatch.delenv("GPUSCHED_SIMULATE_USAGE")
        OWN_SAMPLER.restart()  # the other tests see the simulated GPUs idle again


def test_gpu_board_after_the_runs_shows_gpu_time_by_class_and_no_lease(client, runs):
    """Other tests of the tier share this database: the board must equal what every task published, and hold no
    lease of these (finished) runs."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    r = client.get("/gpusched/api/gpus", headers=token(client, "viewer"))
    board = r.json()
    assert board["problems"] == []
    shown = [lease for host in board["hosts"] for gpu in host["gpus"] for lease in gpu["leases"]]
    assert not [lease for lease in shown if lease["dag_id"].startswith("ui_")]
    expected: dict = {}
    # every task's attempts: those its lease history lists (a batched runner or an asynchronous worker, which
    # another module of this worker's session may have run, publish only that), else its gpu_time record
    with create_session() as session:
        rows = session.execute(
            select(
                XComModel.value,
                XComModel.dag_id,
                XComModel.run_id,
                XComModel.task_id,
                XComModel.map_index,
                XComModel.key,
            ).where(XComModel.key.in_(("gpu_time", "gpusched_lease_history")))
        ).all()
    histories = {}
    for value, dag_id, run_id, task_id, map_index, key in rows:
        if key == "gpusched_lease_history":
            record = XComModel.deserialize_value(type("Row", (), {"value": value})())
            ended = [seg for seg in record["segments"] if seg["outcome"] != "running"]
            if ended and all(seg.get("gpu_seconds") is not None for seg in ended):
                histories[(dag_id, run_id, task_id, map_index)] = (record, ended)
    for (dag_id, *_), (record, ended) in histories.items():
        for seg in ended:
            totals = expected.setdefault(seg["job_class"], {"attempts": 0, "gpu_seconds": 0.0, "ours": 0})
            totals["attempts"] += 1
            totals["gpu_seconds"] += seg["gpu_seconds"]
            totals["ours"] += dag_id == "ui_private_mixed"
        if record.get("dropped"):
            expected[ended[0]["job_class"]]["attempts"] += record["dropped"]
    for value, dag_id, run_id, task_id, map_index, key in rows:
        if key == "gpu_time" and (dag_id, run_id, task_id, map_index) not in histories:
            record = XComModel.deserialize_value(type("Row", (), {"value": value})())
            totals = expected.setdefault(record["job_class"], {"attempts": 0, "gpu_seconds": 0.0, "ours": 0})
            totals["attempts"] += 1
            totals["gpu_seconds"] += record["gpu_seconds"]
            totals["ours"] += dag_id == "ui_private_mixed"
    day = board["gpu_time"]["day"]
    assert expected["idle"]["ours"] == 1 and expected["normal"]["ours"] == 6  # gpu_work, and six sweep trials
    for job_class, totals in expected.items():  # no lease runs now in these runs: finished work only
        assert day[job_class]["attempts"] == totals["attempts"], job_class  # running leases add time, not attempts
    assert day["idle"]["gpu_seconds"] >= expected["idle"]["gpu_seconds"] > 0


def test_the_page_bundle_is_served(client):
    r = client.get("/gpusched/static/gpusched.js")
    assert r.status_code == 200 and "javascript" in r.headers["content-type"]
    from airflow_provider_gpusched.plugins import GpuschedPlugin

    # the built bundle (ui/src/main.tsx) puts a page under the name of each of the plugin's react apps
    for app in GpuschedPlugin().react_apps:
        assert re.search(rf"""(["']?){re.escape(app["name"])}\1:""", r.text), app["name"]


def test_the_plugin_registers_pages_and_its_app():
    from airflow_provider_gpusched.plugins import GpuschedPlugin

    plugin = GpuschedPlugin()
    routes = {(a["destination"], a["url_route"]) for a in plugin.react_apps}
    assert routes == {
        ("nav", "gpusched-gpus"),
        ("nav", "gpusched-timeline"),
        ("dashboard", "gpusched-gpu-summary"),
        ("dag", "gpusched-sweeps"),
        ("task_instance", "gpusched-slurm-job"),
    }
    assert all(a["bundle_url"].startswith("/gpusched/static/gpusched.js?v=") for a in plugin.react_apps)
    assert plugin.fastapi_apps[0]["url_prefix"] == "/gpusched"


def test_gpu_board_of_two_hosts_while_work_runs_waits_and_is_hidden_from_who_may_not_read_it(client, runs, tmp_path):
    """Two simulated GPU hosts (their own host name, inventory and lease directory; no shared files): the board,
    read only from what their tasks published, shows both, a task waiting on host A, and the "GPU lease" link is
    there while the task runs."""
    from tests.polling import wait_until

    from .conftest import dag_test_process, process_result

    path = REPO / "tests" / "airflow" / "dagfiles" / "t_ui_hosts.py"
    release = tmp_path / "release"

    def host(name, gpus):
        leases = tmp_path / f"leases-{name}"
        leases.mkdir(mode=0o700)
        return {
            "AIRFLOW__CORE__HOSTNAME_CALLABLE": f"tests.airflow.hosts.gpu_host_{name}",
            "AIRFLOW__GPUSCHED__GPU_STATE_DIR": str(leases),
            "AIRFLOW__GPUSCHED__SIMULATE_GPUS": gpus,
            "UI_RELEASE": str(release),
        }

    a, b = host("a", "1x24GiB"), host("b", "2x24GiB")
    procs = {
        "ui_private_hold": dag_test_process(path, "ui_private_hold", a),
        "ui_open_hold": dag_test_process(path, "ui_open_hold", b),
    }
    admin, outsider = token(client, "admin"), token(client, "outsider")

    def ours(board):
        return {h["host"]: h for h in board["hosts"] if h["host"].startswith("gpu-host-")}

    seen: list[dict] = []

    def board_now() -> dict:
        seen[:] = [client.get("/gpusched/api/gpus", headers=admin).json()]
        return seen[0]

    def last_board() -> str:  # what the board said last, for a wait that timed out
        b = seen[0] if seen else {}
        keep = ("hosts", "waiting", "waiting_shared", "problems")
        return json.dumps({k: b.get(k) for k in keep}, default=str)[:4000]

    try:
        try:
            # each host is a dag.test() process: Airflow's start and its first calls cost 13-17 s of CPU, several
            # times that in wall time on a loaded 2-core machine (100 s for this test in one CI run)
            wait_until(lambda: len(ours(board_now())) == 2, timeout=240, what="leases on both simulated hosts")
            procs["ui_private_waiter"] = dag_test_process(path, "ui_private_waiter", a)
            wait_until(
                lambda: any(w["host"] == "gpu-host-a" for w in board_now()["waiting"]),
                timeout=240,
                what="the waiter on host A",
            )
        except AssertionError as exc:
            raise AssertionError(f"{exc}; the board said last: {last_board()}") from None
        board = board_now()
        hosts = ours(board)
        assert [len(hosts[h]["gpus"]) for h in ("gpu-host-a", "gpu-host-b")] == [1, 2]
        assert hosts["gpu-host-a"]["simulated"] and hosts["gpu-host-b"]["simulated"]
        (gpu_a,) = hosts["gpu-host-a"]["gpus"]
        (lease_a,) = gpu_a["leases"]
        assert (lease_a["dag_id"], lease_a["task_id"], lease_a["job_class"], lease_a["whole"]) == (
            "ui_private_hold",
            "hold",
            "idle",
            True,
        ) and gpu_a["memory_free"] == 0
        lease_b = next(g for g in hosts["gpu-host-b"]["gpus"] if g["leases"])["leases"][0]
        assert lease_b["dag_id"] == "ui_open_hold" and lease_b["memory"] == 10 * 2**30
        (waiter,) = [w for w in board["waiting"] if w["host"] == "gpu-host-a"]
        assert (waiter["dag_id"], waiter["task_id"], waiter["job_class"]) == ("ui_private_waiter", "queued", "normal")
        assert waiter["why"] and waiter["request"]
        # readable: the first clause as the reason, lease ids named by the task holding them
        shown = " ".join([waiter["reason"], *waiter["details"], *board["waiting_shared"]])
        assert waiter["reason"].startswith("needs 1 GPU(s)") and not re.search(r"\b[0-9a-f]{16}\b", shown), waiter
        assert "ui_private_hold › hold" in shown or "lease" not in waiter["why"], waiter
        # who may not read a DAG sees that its GPU is taken, not by what
        hidden = ours(client.get("/gpusched/api/gpus", headers=outsider).json())
        (lease_seen,) = hidden["gpu-host-a"]["gpus"][0]["leases"]
        assert lease_seen["dag_id"] == "(a DAG you cannot see)" and lease_seen["task_id"] == lease_seen["run_id"] == ""
        assert next(g for g in hidden["gpu-host-b"]["gpus"] if g["leases"])["leases"][0]["task_id"] == "hold"
        # the extra link is there while the task runs
        link = _running_xcom("ui_open_hold", "hold", "_link_GPULeaseLink")
        assert link.startswith("/plugin/gpusched-gpus?dag_id=ui_open_hold&run_id=") and "task_id=hold" in link
    finally:
        release.write_text("go")
        results = {dag_id: process_result(proc, dag_id) for dag_id, proc in procs.items()}
    assert {dag_id: r["state"] for dag_id, r in results.items()} == dict.fromkeys(procs, "success")


def _running_xcom(dag_id, task_id, key):
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import and_, select

    with create_session() as session:
        value, state = session.execute(
            select(XComModel.value, TaskInstance.state)
            .join(
                TaskInstance,
                and_(
                    TaskInstance.dag_id == XComModel.dag_id,
                    TaskInstance.run_id == XComModel.run_id,
                    TaskInstance.task_id == XComModel.task_id,
                ),
            )
            .where(XComModel.dag_id == dag_id, XComModel.task_id == task_id, XComModel.key == key)
            .order_by(TaskInstance.start_date.desc())
        ).first()
    assert state == "running"
    return XComModel.deserialize_value(type("Row", (), {"value": value})())


def test_the_gpu_timeline_has_a_bar_per_lease_linked_to_its_task_and_hides_what_a_user_may_not_read(client, runs):
    """Who held which GPU in the last hour: every finished lease of these runs (the idle-class task, the six sweep
    trials of the normal class) is a bar on its GPU's row, linked to its task instance; a user who may not read the
    DAG sees the bars without their names."""
    run_id = _run_id("ui_private_mixed")
    r = client.get("/gpusched/api/timeline?hours=1", headers=token(client, "viewer"))
    assert r.status_code == 200, r.text
    timeline = r.json()
    assert (
        timeline["problems"] == []
        and timeline["hours"] == 1
        and timeline["until"] - timeline["since"] == pytest.approx(3600)
    )
    bars = [
        b
        for row in timeline["rows"]
        for b in row["bars"]
        if b["dag_id"] == "ui_private_mixed" and b["run_id"] == run_id
    ]
    work = [b for b in bars if b["task_id"] == "gpu_work"]
    assert len(work) == 1 and work[0]["job_class"] == "idle" and work[0]["outcome"] == "succeeded"
    trials = [b for b in bars if b["task_id"] == "ui_grid.trial"]
    assert sorted(b["map_index"] for b in trials) == list(range(6))
    assert {b["job_class"] for b in trials} == {"normal"} and all(b["end"] >= b["start"] for b in trials)
    assert {"idle", "normal"} <= set(timeline["classes"])
    hidden = client.get("/gpusched/api/timeline?hours=1", headers=token(client, "outsider")).json()
    names = {b["dag_id"] for row in hidden["rows"] for b in row["bars"]}
    assert "ui_private_mixed" not in names and "(a DAG you cannot see)" in names
    nameless = [b for row in hidden["rows"] for b in row["bars"] if b["dag_id"] == "(a DAG you cannot see)"]
    assert all(not (b.get("run_id") or b.get("task_id") or b.get("label") or b.get("detail")) for b in nameless)
    assert timeline["windows"] == [1, 6, 24, 72]
    assert client.get("/gpusched/api/timeline?hours=0", headers=token(client, "viewer")).status_code == 422


def test_a_sweeps_importance_comparison_and_trial_log(client, runs):
    run_id = _run_id("ui_private_mixed")
    viewer = token(client, "viewer")
    base = "/gpusched/api/dags/ui_private_mixed/sweeps"
    importance = client.get(f"{base}/importance", params={"run_id": run_id, "group": "ui_grid"}, headers=viewer).json()
    assert importance["trials"] == 4 and importance["importances"] == []  # 4 scored trials: too few to rank
    assert "at least 8" in importance["note"]
    same = client.get(
        f"{base}/compare", params={"run_id": run_id, "other": run_id, "group": "ui_grid"}, headers=viewer
    ).json()
    assert (same["both"], same["changed"], same["only_a"], same["only_b"]) == (4, 0, 0, 0)
    assert same["a"]["best"]["score"] == pytest.approx(0.98) and same["metric"] == "acc"
    sweep = client.get(base, headers=viewer).json()["sweeps"][0]
    assert same["a"]["counts"] == same["b"]["counts"] == sweep["counts"]  # the Sweeps tab's own counts
    failed = next(p for p in sweep["problems"] if "diverged" in (p["error"] or ""))
    trial = client.get(
        f"{base}/trial", headers=viewer, params={"run_id": run_id, "group": "ui_grid", "trial_id": failed["trial_id"]}
    ).json()
    assert trial["state"] == "failed" and "diverged" in trial["error"] and trial["params"]["lr"] == 0.3
    assert "ValueError: diverged" in trial["log_tail"] and trial["log_path"].endswith("output.log")
    assert trial["task_id"] == "ui_grid.trial" and trial["map_index"] == failed["map_index"]
    missing = client.get(
        f"{base}/trial", headers=viewer, params={"run_id": run_id, "group": "ui_grid", "trial_id": "nope"}
    )
    assert missing.status_code == 404 and "no trial 'nope'" in missing.json()["detail"]
    nogroup = client.get(f"{base}/importance", params={"run_id": run_id, "group": "other"}, headers=viewer)
    assert nogroup.status_code == 404 and "planned no sweep 'other'" in nogroup.json()["detail"]
    outsider = token(client, "outsider")
    for path in ("importance", "trial", "compare"):
        assert (
            client.get(
                f"{base}/{path}",
                headers=outsider,
                params={"run_id": run_id, "group": "ui_grid", "trial_id": "x", "other": run_id},
            ).status_code
            == 403
        ), path


def test_a_dag_that_forges_records_sees_nothing_of_another_dag_and_adds_no_host(client, runs, tmp_path):
    """Issue 53, items 1-3: a DAG (readable by the outsider) pushes another DAG's sweep plan, leases naming that DAG
    and made-up hosts (one with eight 1 PiB GPUs), and 600 timeline segments on 48 GPUs of made-up hosts. The
    outsider reads no output of the private DAG through the forging DAG's Sweeps tab; the board draws the forger's
    lease on its own host under its own name and no made-up host; the timeline draws no made-up host."""
    from airflow.models.xcom import XComModel
    from airflow.utils.net import get_hostname
    from airflow.utils.session import create_session
    from sqlalchemy import select

    from tests.polling import wait_until

    from .conftest import dag_test_process, process_result

    private_run = _run_id("ui_private_mixed")
    with create_session() as session:
        (raw,) = session.execute(
            select(XComModel.value).where(
                XComModel.dag_id == "ui_private_mixed",
                XComModel.run_id == private_run,
                XComModel.key == "gpusched_sweep_plan",
            )
        ).first()
    stolen = XComModel.deserialize_value(type("Row", (), {"value": raw})())
    failed = next(t for t in stolen["trials"] if t["params"]["lr"] == 0.3)
    gpu = {"index": 0, "uuid": "GPU-x", "name": "forged", "memory_total": 2**30, "simulated": True}

    def lease(host, dag_id="ui_private_mixed", inventory=(gpu,), gpus=(0,)):
        return {
            "host": host,
            "lease_id": "f" * 16,
            "gpus": list(gpus),
            "memory": {},
            "whole": True,
            "job_class": "normal",
            "started": __import__("time").time(),
            "dag_id": dag_id,
            "run_id": "forged",
            "task_id": "secret_task",
            "inventory": list(inventory),
        }

    petabyte = [{**gpu, "index": i, "memory_total": 2**50} for i in range(8)]
    segments = [
        {
            "host": f"made-up-{i % 6}",
            "gpus": list(range(8)),
            "job_class": "normal",
            "start": 1.0e9,
            "end": 4.0e9,
            "outcome": "succeeded",
            "detail": "x" * 400,
            "label": "y" * 150,
        }
        for i in range(600)
    ]
    forged = tmp_path / "forged.json"
    forged.write_text(
        json.dumps(
            {
                "plan": stolen,
                "history": {"segments": segments, "dropped": 0},
                "leases": [
                    lease(get_hostname()),
                    lease("gpu-forged"),
                    lease("gpu-forged-pb", inventory=petabyte, gpus=range(8)),
                ],
            }
        )
    )
    release = tmp_path / "release"
    path = REPO / "tests" / "airflow" / "dagfiles" / "t_ui_forger.py"
    procs = {
        dag_id: dag_test_process(path, dag_id, {"UI_FORGED": str(forged), "UI_RELEASE": str(release)})
        for dag_id in ("ui_forger", "ui_forger_host", "ui_forger_pb")
    }
    outsider = token(client, "outsider")
    try:

        def forged_leases():
            board = client.get("/gpusched/api/gpus", headers=outsider).json()
            drawn = any(
                lease["lease_id"] == "f" * 16 for h in board["hosts"] for g in h["gpus"] for lease in g["leases"]
            )
            refused = sum("lease_of_petabyte" in p or "made_up_host" in p for p in board["problems"])
            return board if drawn and refused == 2 else None

        board = wait_until(forged_leases, timeout=120, what="the forger's three leases published")
        # 1. the forging DAG's Sweeps tab lists the stolen plan, but shows none of the private DAG's files
        base = "/gpusched/api/dags/ui_forger/sweeps"
        sweeps = client.get(base, headers=outsider).json()
        (view,) = sweeps["sweeps"]
        assert "does not list DAG ui_forger" in view["reports_note"], view.get("reports_note")
        trial = client.get(
            f"{base}/trial",
            headers=outsider,
            params={"run_id": sweeps["run_id"], "group": "stolen", "trial_id": failed["trial_id"]},
        ).json()
        assert trial["log_tail"] is None and "does not list DAG ui_forger" in trial["log_note"], trial
        assert "diverged" not in json.dumps(trial) and "diverged" not in json.dumps(sweeps)
        # 2. the lease on the task's own host is drawn as the forger's; no made-up host, no petabyte GPU
        hosts = {h["host"]: h for h in board["hosts"]}
        assert not {"gpu-forged", "gpu-forged-pb"} & set(hosts), sorted(hosts)
        assert all(g["memory_total"] < 2**44 for h in board["hosts"] for g in h["gpus"])
        drawn = [lease for g in hosts[get_hostname()]["gpus"] for lease in g["leases"] if lease["lease_id"] == "f" * 16]
        assert [(d["dag_id"], d["task_id"]) for d in drawn] == [("ui_forger", "stolen.plan")], drawn
        refused = " ".join(board["problems"])
        assert (
            "names host 'gpu-forged'" in refused
            and "key 'inventory[0].memory_total': expected bytes of GPU memory (at most 16 TiB)" in refused
        ), board["problems"]
        # 3. the timeline draws no made-up host, says why, and stays small
        r = client.get("/gpusched/api/timeline?hours=72", headers=outsider)
        timeline = r.json()
        assert not [row for row in timeline["rows"] if row["host"].startswith("made-up-")]
        assert any("600 segment(s) published by DAG ui_forger name a host" in p for p in timeline["problems"])
        assert len(r.content) < 5 * 2**20
    finally:
        release.write_text("go")
        results = {dag_id: process_result(proc, dag_id)["state"] for dag_id, proc in procs.items()}
    assert results == dict.fromkeys(procs, "success")


def test_the_sweeps_page_asks_a_kind_for_its_population_not_its_name(tmp_path):
    """PBT draws its population (the lineage read checked from the sweep's folder); a kind without one says so;
    a kind of another package that draws one is asked the same way, whatever its name."""
    from airflow_provider_gpusched.core.sweep.definition import search_kind as search_kinds_module
    from airflow_provider_gpusched.core.sweep.definition.search_kind import SearchKind as SearchKindBase
    from airflow_provider_gpusched.plugins.api.sweeps import _kind_of

    pbt, grid = search_kinds_module.search_kind("pbt"), search_kinds_module.search_kind("grid")
    assert pbt.draws_population and not grid.draws_population
    lineage, why = pbt.read_population(str(tmp_path))
    assert lineage is None and why  # no lineage written yet: said, not raised
    assert grid.read_population(str(tmp_path)) == (None, "search 'grid' has no population to draw")

    class Islands(SearchKindBase):
        name = "islands"
        in_rounds = True
        draws_population = True

        def read_population(self, sweep_folder, root=None):
            return {"members": [sweep_folder]}, ""

    search_kinds_module.register_search_kind(Islands)
    try:
        kind = _kind_of("islands")
        assert kind is not None and kind.draws_population
        assert kind.read_population("f") == ({"members": ["f"]}, "")
    finally:
        search_kinds_module.unregister_search_kind("islands")
    assert _kind_of("islands") is None and _kind_of(None) is None  # a plan naming a kind not installed here
