"""Issue 77, items 2, 3 and 12: what the plugin API shows a user of DAGs the user may not read, inside Airflow's real
FastAPI app (in process, SQLite) after real DAG runs (dag.test, no Slurm: the DAGs publish the records). A record
decides no file the API reads; the quota table hides private names as the leases do; parameters out of range are a
422, never a 500; the API's schema and its pages need the API's login."""

import json
import os
import time

import pendulum
import pytest

from .conftest import REPO, load_dag_file, run_and_collect

pytestmark = pytest.mark.airflow

USERS = {"admin": "admin", "viewer": "viewer", "outsider": "outsider"}
DAG_FILE = REPO / "tests" / "airflow" / "dagfiles" / "t_ui_slurm_forger.py"
#: the private DAG and the one whose task folder is the private one's run at the same logical date: one run id
WHEN = pendulum.datetime(2026, 2, 3, 4, 5, 6, tz="UTC")


@pytest.fixture(scope="module")
def runs(airflow_db):
    module = load_dag_file(DAG_FILE)
    out = {}
    for dag in (module.private, module.forger, module.same_folder_forger):  # the private DAG first: the others
        state, xcoms, _states = run_and_collect_at(dag, WHEN if dag is not module.forger else None)
        assert state == "success", (dag.dag_id, xcoms)
        out[dag.dag_id] = xcoms
    out["module"] = module
    return out


def run_and_collect_at(dag, when):
    if when is None:
        return run_and_collect(dag)
    from .conftest import dag_run_results

    dag_run = dag.test(logical_date=when, run_after=when)
    xcoms, states = dag_run_results(dag_run)
    return dag_run.state, xcoms, states


@pytest.fixture(scope="module")
def client(runs, tmp_path_factory):
    from fastapi.testclient import TestClient

    passwords = tmp_path_factory.mktemp("auth") / "passwords.json"
    passwords.write_text(json.dumps(USERS))
    env = {
        "AIRFLOW__CORE__AUTH_MANAGER": "tests.airflow.ui_auth.PerDagAuthManager",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin,viewer:viewer,outsider:viewer",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
        "AIRFLOW__API_AUTH__JWT_SECRET": "test-secret-for-the-ui-api-tests-" + "x" * 40,
    }
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    from airflow.api_fastapi.app import create_app

    try:
        with TestClient(create_app()) as c:
            yield c
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def token(client, user):
    r = client.post("/auth/token", json={"username": user, "password": USERS[user]})
    assert r.status_code in (200, 201), r.text
    return {"Authorization": f"Bearer {r.json()['access_token']}"}


def _run_id(dag_id):
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        return session.scalars(select(DagRun.run_id).where(DagRun.dag_id == dag_id)).first()


def _slurm_tab(client, dag_id, task_id, user):
    return client.get(f"/gpusched/api/dags/{dag_id}/runs/{_run_id(dag_id)}/tasks/{task_id}/slurm", headers=user)


def test_a_forged_slurm_record_shows_no_file_of_a_private_dag(client, runs):
    """Item 2: the private DAG's own tab shows its running job's output and chain segments to who may read it, and
    answers 403 to the outsider; the outsider sees neither through a DAG that names those files in its record, nor
    through a DAG whose task folder is the private one's (``_ui_private_slurm``: the folder lists the other DAG)."""
    module = runs["module"]
    admin, outsider = token(client, "admin"), token(client, "outsider")
    own = _slurm_tab(client, "ui_private_slurm", "job", admin)
    assert own.status_code == 200, own.text
    view = own.json()
    assert view["tails"] == {"": module.SECRET} and view["tail_source"].startswith("read now from ")
    assert [(s["segment"], s["node"]) for s in view["segments"]] == [(1, module.SECRET_NODE)]
    assert _slurm_tab(client, "ui_private_slurm", "job", outsider).status_code == 403
    for dag_id, task_id in (("ui_forger_slurm", "forge"), ("_ui_private_slurm", "job")):
        r = _slurm_tab(client, dag_id, task_id, outsider)
        assert r.status_code == 200, r.text
        forged = r.json()
        assert forged["found"] and forged["job_id"] == module.JOB, forged
        assert module.SECRET not in r.text and module.SECRET_NODE not in r.text, (dag_id, forged)
        assert forged["tails"] == {} and not forged.get("segments"), forged
        assert forged["tail_source"].startswith("not available yet ("), forged["tail_source"]
    # why, said on the tab: the forger's own folder lists no DAG; the same-folder DAG's lists the private one
    same = _slurm_tab(client, "_ui_private_slurm", "job", outsider).json()
    assert "does not list DAG _ui_private_slurm" in same["tail_source"], same["tail_source"]


def test_a_slurm_record_that_cannot_be_read_is_said_on_the_tab_never_a_500(client, runs):
    r = _slurm_tab(client, "ui_forger_slurm", "junk", token(client, "admin"))
    assert r.status_code == 200, r.text
    view = r.json()
    assert not view["found"] and view["message"].startswith("the Slurm job record of task junk cannot be read: "), view


def test_a_slurm_task_folder_of_another_dag_is_refused_when_the_job_is_submitted(tmp_path):
    """The operator's claim on its task folder (what the tab checks): a folder another DAG's task claimed (two DAG
    ids whose folders are alike) is refused, naming both."""
    from airflow_provider_gpusched.core.errors import GpuschedError
    from airflow_provider_gpusched.core.slurm.job_view import claim_output_folder, folder_refusal

    folder = tmp_path / "a" / "run" / "job"
    folder.mkdir(parents=True)
    assert folder_refusal(str(folder), "a", str(tmp_path)) != ""  # not claimed yet
    assert claim_output_folder(str(folder), "a") == "" and claim_output_folder(str(folder), "a") == ""
    assert folder_refusal(str(folder), "a", str(tmp_path)) == ""
    with pytest.raises(GpuschedError, match=r"is DAG 'a'.*DAG '_a' maps to it too"):
        claim_output_folder(str(folder), "_a")
    assert "does not list DAG _a" in folder_refusal(str(folder), "_a", str(tmp_path))
    assert "not under" in folder_refusal(str(folder), "a", str(tmp_path / "elsewhere"))


@pytest.fixture
def quota_waiters(tmp_path, monkeypatch, runs):
    """Team quotas, with three requests waiting in the book: a private DAG's task, a readable DAG's task whose
    reason names the private task it waits behind, and a sweep run outside Airflow."""
    from airflow_provider_gpusched import settings
    from airflow_provider_gpusched.core.quota.book import WAITER_TTL, QuotaBook, book_dir
    from airflow_provider_gpusched.core.quota.policy import Waiter

    state = tmp_path / "leases"
    state.mkdir(mode=0o700)
    monkeypatch.setenv("AIRFLOW__GPUSCHED__GPU_STATE_DIR", str(state))
    monkeypatch.setenv("AIRFLOW__GPUSCHED__QUOTAS", "groups:\n  vision: {quota: 2}\n  nlp: {quota: 2}\n")
    book = QuotaBook(book_dir("", str(state)), settings.quota_config())
    now = time.time()
    private = "ui_private_slurm.job (manual__2026-02-03T04:05:06+00:00, try 1)"
    for owner, group, reason in (
        (private, "vision", f"vision is over its quota; {private} waits behind ui_private_slurm.other [3]"),
        ("ui_forger_slurm.forge (manual__x, try 1)", "nlp", f"normal work is waiting for GPUs ({private})"),
        ("gpusched sweep run s1 (pid 12)", "nlp", "nlp is over its quota"),
    ):
        book.mark_waiting(Waiter(owner, "h1", group, 1.0, "quota", now, now + WAITER_TTL, reason))
    return private


def test_the_quota_table_hides_a_private_dags_waiter_as_the_leases_do(client, runs, quota_waiters):
    """Item 3: the GPU board's quota table names a waiting task of a DAG the user may not read nowhere (its owner,
    its reason, another waiter's reason); who may read it sees it."""
    private = quota_waiters

    def waiters(user):
        board = client.get("/gpusched/api/gpus", headers=token(client, user))
        assert board.status_code == 200, board.text
        quotas = board.json()["quotas"]
        return {w["owner"]: w for g in quotas["groups"] for w in g["waiters"]}, board.text

    seen, _text = waiters("admin")
    assert private in seen and "ui_private_slurm.other" in seen[private]["reason"]
    hidden, text = waiters("outsider")
    assert "ui_private" not in text, text
    assert hidden["(a DAG you cannot see)"]["reason"] == ""
    assert hidden["ui_forger_slurm.forge (manual__x, try 1)"]["reason"] == (
        "normal work is waiting for GPUs ((a DAG you cannot see))"
    )
    assert hidden["gpusched sweep run s1 (pid 12)"]["reason"] == "nlp is over its quota"


def test_bad_numbers_and_text_are_refused_with_422_never_500(client, runs):
    """Item 12: each numeric or text parameter of each endpoint out of its range, not a number, or holding a control
    character: 422 naming it."""
    viewer = token(client, "viewer")
    run = _run_id("ui_forger_slurm")
    task = f"/gpusched/api/dags/ui_forger_slurm/runs/{run}/tasks/forge"
    sweeps = "/gpusched/api/dags/ui_forger_slurm/sweeps"
    bad = {
        "/gpusched/api/timeline": [
            {"hours": h} for h in ("1e-300", "0", "-1", "nan", "inf", "-inf", "1e308", "337", "x", "")
        ],
        f"{task}/slurm": [{"map_index": m} for m in ("-2", str(2**31), str(10**30), "1.5", "nan", "x")],
        f"{task}/lease": [{"map_index": m} for m in ("-2", str(2**31), str(10**30), "1e400")],
        sweeps: [{"run_id": "r\x00"}, {"run_id": "x" * 251}],
        f"{sweeps}/trial": [{"run_id": run, "group": "g\x00", "trial_id": "t"}, {"run_id": run, "group": "g"}],
        f"{sweeps}/importance": [{"run_id": run, "group": "\x1b[31m"}],
        f"{sweeps}/compare": [{"run_id": run, "group": "g", "other": "o\x00"}],
    }
    for path, cases in bad.items():
        for params in cases:
            r = client.get(path, params=params, headers=viewer)
            assert r.status_code == 422, (path, params, r.status_code, r.text[:300])
    r = client.get(f"/gpusched/api/dags/ui_forger_slurm/runs/{run}/tasks/for%00ge/slurm", headers=viewer)
    assert r.status_code == 422 and "path parameter 'task_id'" in r.text, r.text
    # the bounds themselves are answered
    for path, params in (
        ("/gpusched/api/timeline", {"hours": str(1 / 60)}),
        ("/gpusched/api/timeline", {"hours": "336"}),
        (f"{task}/slurm", {"map_index": str(2**31 - 1)}),
        (f"{task}/lease", {"map_index": "-1"}),
    ):
        assert client.get(path, params=params, headers=viewer).status_code in (200, 404), (path, params)


def test_the_apis_schema_and_its_pages_need_the_apis_login(client, runs):
    """Item 12: /gpusched/openapi.json, /docs and /redoc answer 401 without a login, and serve a logged-in user
    (the pages ask for the schema at the mounted path)."""
    viewer = token(client, "viewer")
    for path in ("/gpusched/openapi.json", "/gpusched/docs", "/gpusched/redoc"):
        assert client.get(path).status_code == 401, path
        assert client.get(path, headers={"Authorization": "Bearer not-a-token"}).status_code in (401, 403), path
        r = client.get(path, headers=viewer)
        assert r.status_code == 200, (path, r.text[:300])
        if path.endswith(".json"):
            assert "/api/gpus" in r.json()["paths"]
        else:
            assert "/gpusched/openapi.json" in r.text
