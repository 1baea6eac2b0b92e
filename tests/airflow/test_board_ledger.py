"""The GPU board and the Sweeps tab for each kind of sweep on (simulated) local GPUs, through dag.test(): the board's
GPU time, attempts and preemptions agree with the host's ledger after an asynchronous search's workers, a batched
stage's runners and mapped trials; a worker's lease is on the board and the timeline while it is held; an
asynchronous sweep's trials draw their curves as they run and link the worker that ran them.

(The board once counted only the tasks that publish a lease and a ``gpu_time`` record, the mapped trials: it said
"0 of 4 GPU(s) leased" while workers held all four, and 0.27 GPU-h where the ledger had 1.27.)"""

from types import SimpleNamespace

import pytest

from .conftest import REPO, dag_test_process, process_result, run_and_collect

pytestmark = [pytest.mark.airflow]

DAGFILE = REPO / "tests" / "airflow" / "dagfiles" / "t_board_ledger.py"
KEYS = ("attempts", "gpu_seconds", "lost_gpu_seconds", "preemptions")


@pytest.fixture
def sweeps_root(tmp_path, monkeypatch):
    root = tmp_path / "sweeps"
    monkeypatch.setenv("AIRFLOW__GPUSCHED__SWEEP_RESULTS_ROOT", str(root))
    return root


def dag_of(dag_id):
    from .conftest import load_dag_file

    module = load_dag_file(DAGFILE)
    return next(v for v in vars(module).values() if getattr(v, "dag_id", None) == dag_id)


@pytest.fixture
def as_admin(monkeypatch):
    """The plugin's board and timeline as a user who may read every DAG (their auth manager is Airflow's app's)."""
    from airflow_provider_gpusched.plugins.api import gpus

    class Everything(set):
        def __contains__(self, item):
            return True

    auth = SimpleNamespace(get_authorized_dag_ids=lambda **kw: Everything())
    monkeypatch.setattr(gpus, "get_auth_manager", lambda: auth)
    return gpus


def board_day(gpus):
    from airflow.utils.session import create_session

    with create_session() as session:
        board = gpus.gpu_board(None, session)
    assert not [p for p in board["problems"] if "board_" in p], board["problems"]
    return board


def minus(after, before):
    return {
        job_class: {k: totals[k] - before.get(job_class, {}).get(k, 0) for k in KEYS}
        for job_class, totals in after.items()
    }


@pytest.mark.parametrize("dag_id", ["board_async", "board_batched", "board_mapped"])
def test_the_boards_gpu_time_agrees_with_the_hosts_ledger_after_each_kind_of_sweep(
    dag_id, airflow_db, sweeps_root, as_admin, tmp_path, monkeypatch
):
    from airflow_provider_gpusched.core.gpu.accounting import GPUTimeLedger, accounting_totals

    leases = tmp_path / "leases"  # this run's own lease directory: its ledger holds this run's attempts only
    leases.mkdir(mode=0o700)
    monkeypatch.setenv("AIRFLOW__GPUSCHED__GPU_STATE_DIR", str(leases))
    before = board_day(as_admin)["gpu_time"]["day"]
    state, _xcoms, states = run_and_collect(dag_of(dag_id))
    assert state == "success", states
    after = board_day(as_admin)
    ledger = accounting_totals(GPUTimeLedger(str(leases)).records())
    assert ledger["normal"]["attempts"] >= 1 and ledger["normal"]["gpu_seconds"] > 0
    shown = minus(after["gpu_time"]["day"], before)
    for key in KEYS:
        assert shown["normal"][key] == pytest.approx(ledger["normal"][key], abs=0.01), (key, shown, ledger)
    held = [lease for h in after["hosts"] for g in h["gpus"] for lease in g["leases"] if lease["dag_id"] == dag_id]
    assert held == []  # ended: nothing of it is held any more


@pytest.mark.parametrize("where", ["the api-server's host", "another host"])
def test_a_workers_lease_is_on_the_board_and_timeline_while_held_and_its_trial_draws_its_curve(
    airflow_db, sweeps_root, as_admin, tmp_path, where
):
    """An asynchronous sweep's worker (a batched runner that holds leases in turn) holds its lease while its trial
    runs: the board lists it under the worker task, the timeline draws it running, the board's GPU time counts it;
    the Sweeps tab draws the running trial's curve and links the worker, and says "earlier run" of no trial. On
    another host (a lease directory the api-server cannot read, outside a fleet) the board knows the lease from what
    the worker publishes as it runs (XCom ``gpusched_held_leases``)."""
    from airflow.utils.session import create_session

    from airflow_provider_gpusched.plugins.api.sweeps import sweeps
    from tests.polling import wait_until

    release = tmp_path / "release"
    env = {"BOARD_RELEASE": str(release)}
    if where == "another host":
        env["AIRFLOW__GPUSCHED__GPU_STATE_DIR"] = str(tmp_path / "remote-leases")
    proc = dag_test_process(DAGFILE, "board_hold", env)
    worker = "board_hold.run_batch"

    def held():
        board = board_day(as_admin)
        return [lease for h in board["hosts"] for g in h["gpus"] for lease in g["leases"] if lease["task_id"] == worker]

    def view():
        with create_session() as session:
            (sweep,) = sweeps("board_hold", None, session)["sweeps"]
        return sweep

    try:
        wait_until(lambda: held(), timeout=240, what="the worker's lease on the board")
        (lease,) = held()
        assert (lease["dag_id"], lease["map_index"], lease["job_class"]) == ("board_hold", 0, "normal")
        assert lease["memory"] == 6 << 30 and not lease["whole"]
        board = board_day(as_admin)
        assert board["gpu_time"]["day"]["normal"]["running"] >= 1
        with create_session() as session:
            timeline = as_admin.gpu_timeline(None, session, 1.0)
        bars = [  # (this run's: an earlier test's run of the same DAG is on the timeline too)
            b
            for row in timeline["rows"]
            for b in row["bars"]
            if b.get("task_id") == worker and b.get("run_id") == lease["run_id"]
        ]
        assert [b["outcome"] for b in bars] == ["running"] and timeline["counts"]["running"] >= 1
        # the running trial's curve, as it reports (its worker publishes it as it takes the trial)
        wait_until(lambda: [len(c["points"]) for c in view()["curves"]] == [2], timeout=120, what="the trial's curve")
        sweep = view()
        assert sweep["curves"][0]["state"] == "running"
        (report,) = sweep["latest_reports"]
        assert (report["task_id"], report["map_index"]) == (worker, 0)
    finally:
        release.write_text("go")
        result = process_result(proc, "board_hold")
    assert result["state"] == "success", result["states"]
    sweep = view()
    assert sweep["counts"]["succeeded"] == 1 and sweep["counts"]["skipped"] == 0
    (row,) = sweep["leaderboard"]
    assert (row["task_id"], row["map_index"], row["skipped"]) == (worker, 0, False)
    assert [c["state"] for c in sweep["curves"]] == ["succeeded"]
    wait_until(lambda: not held(), timeout=30, what="the worker's lease to go")
