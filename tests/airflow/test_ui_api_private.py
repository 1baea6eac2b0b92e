"""Issue 77, items 2, 3, 12, B and D: what the plugin API shows a user of DAGs the user may not read, inside
Airflow's real FastAPI app (in process, SQLite) after real DAG runs (dag.test, no Slurm: the DAGs publish the
records). A record decides no file the API reads; a DAG's task folders are its own, whatever its id; the quota table
hides the names of every DAG the user may not read; parameters out of range are a 422, never a 500; the API's schema
and its pages need the API's login."""

import hashlib
import os
import time

import pendulum
import pytest

from .conftest import REPO, load_dag_file, run_and_collect, token

pytestmark = pytest.mark.airflow

DAG_FILE = REPO / "tests" / "airflow" / "dagfiles" / "t_ui_slurm_forger.py"
#: the private DAG and ``_ui_private_slurm`` (ids that clean alike) run at the same logical date: one run id
WHEN = pendulum.datetime(2026, 2, 3, 4, 5, 6, tz="UTC")


@pytest.fixture(scope="module")
def runs(airflow_db):
    """``_ui_private_slurm`` first (it claims its task folder: the private DAG's own while their names were one),
    the private DAG at the same logical date (its job claims its folder too), then the forger (it names the private
    job's files)."""
    from .conftest import dag_run_results

    module = load_dag_file(DAG_FILE)
    out = {}
    for dag in (module.same_folder_forger, module.private, module.forger):
        if dag is module.forger:
            state, xcoms, _states = run_and_collect(dag)
        else:
            dag_run = dag.test(logical_date=WHEN, run_after=WHEN)
            state, (xcoms, _states) = dag_run.state, dag_run_results(dag_run)
        assert state == "success", (dag.dag_id, xcoms)
        out[dag.dag_id] = xcoms
    out["module"] = module
    return out


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
    answers 403 to the outsider; the outsider does not see them through a DAG that names those files in its record."""
    module = runs["module"]
    admin, outsider = token(client, "admin"), token(client, "outsider")
    own = _slurm_tab(client, "ui_private_slurm", "job", admin)
    assert own.status_code == 200, own.text
    view = own.json()
    assert view["tails"] == {"": module.SECRET} and view["tail_source"].startswith("read now from ")
    assert [(s["segment"], s["node"]) for s in view["segments"]] == [(1, module.SECRET_NODE)]
    assert _slurm_tab(client, "ui_private_slurm", "job", outsider).status_code == 403
    r = _slurm_tab(client, "ui_forger_slurm", "forge", outsider)
    assert r.status_code == 200, r.text
    forged = r.json()
    assert forged["found"] and forged["job_id"] == module.JOB, forged
    assert module.SECRET not in r.text and module.SECRET_NODE not in r.text, forged
    assert forged["tails"] == {} and not forged.get("segments"), forged
    # why, said on the tab: the forger's own folder lists no DAG
    assert forged["tail_source"].startswith("not available yet (its task folder "), forged["tail_source"]
    assert "does not list DAG ui_forger_slurm" in forged["tail_source"], forged["tail_source"]


def test_a_dag_whose_ids_clean_alike_has_task_folders_of_its_own(client, runs):
    """Item B: ``_ui_private_slurm`` (its ids clean as the private DAG's, at the same logical date: one run id) ran
    first and claimed its task folder; the private DAG's job still ran (its claim did not find the folder taken, see
    ``runs``), and each tab reads its own DAG's output in its own folder."""
    from airflow_provider_gpusched import settings

    module = runs["module"]
    assert _run_id("_ui_private_slurm") == _run_id("ui_private_slurm")
    other = _slurm_tab(client, "_ui_private_slurm", "job", token(client, "outsider"))
    assert other.status_code == 200, other.text
    view = other.json()
    assert view["tails"] == {"": module.OWN_OUTPUT} and module.SECRET not in other.text, view
    private = _slurm_tab(client, "ui_private_slurm", "job", token(client, "admin")).json()
    assert private["tails"] == {"": module.SECRET}, private
    root, run = settings.slurm_output_dir(), _run_id("ui_private_slurm").replace(":", "_").replace("+", "_")
    sha = hashlib.sha256(b"_ui_private_slurm").hexdigest()[:16]
    assert view["tail_source"] == f"read now from {os.path.join(root, f'_ui_private_slurm-{sha}', run, 'job')}"
    assert private["tail_source"] == f"read now from {os.path.join(root, 'ui_private_slurm', run, 'job')}"


def test_task_folder_names_are_one_to_one():
    """Item B: a plain id is its folder's name as before; an id cleaning changes gets ``_`` and its hash, so no two
    ids share a folder (``x``, ``_x``, ``x_``, ``.x``, ``x:``, ``x+``, ``x/``: one folder each), and none is ``.``,
    ``..`` or holds a ``/``."""
    from airflow_provider_gpusched import settings

    for plain in ("x", "ui_private_slurm", "a.b-c_d", "manual__x", "t.3", "-"):
        assert settings.path_part(plain) == plain
    ids = ["x", "_x", "x_", ".x", "x.", "x:", "x+", "x/", "x ", "", ".", "..", "é", "/", "x" * 201, "x" * 200 + "y"]
    names = [settings.path_part(i) for i in ids]
    assert len(set(names)) == len(ids), names
    assert all(n not in (".", "..") and "/" not in n and len(n) <= 218 for n in names), names
    assert settings.path_part("_x") == "_x-" + hashlib.sha256(b"_x").hexdigest()[:16]
    # a plain id cannot take a changed one's name: no plain name starts with "_"
    assert settings.path_part(settings.path_part("_x")) != settings.path_part("_x")

    class TI:
        dag_id, run_id, task_id, map_index = "_x", "scheduled__2026-01-01T00:00:00+00:00", "t", 2

    class Other(TI):
        dag_id = "x"

    parts = settings.task_directory("/r", TI, "try-1").split("/")[2:]
    # the run's folder is named as it always was (a run id is one DAG's: runs that clean alike are one author's)
    assert parts == [settings.path_part("_x"), "scheduled__2026-01-01T00_00_00_00_00", "t.2", "try-1"]
    assert settings.task_directory("/r", TI) != settings.task_directory("/r", Other)


def test_a_slurm_record_that_cannot_be_read_is_said_on_the_tab_never_a_500(client, runs):
    r = _slurm_tab(client, "ui_forger_slurm", "junk", token(client, "admin"))
    assert r.status_code == 200, r.text
    view = r.json()
    assert not view["found"] and view["message"].startswith("the Slurm job record of task junk cannot be read: "), view


def test_a_slurm_task_folder_of_another_dag_is_refused_when_the_job_is_submitted(tmp_path):
    """The second layer under one-to-one folder names: the operator's claim on its task folder (what the tab checks).
    A folder whose ``dags.json`` lists another DAG (written here by hand) is refused, naming both; the tab reads a
    folder only under the setting's root and once it lists the DAG."""
    from airflow_provider_gpusched.core.errors import GpuschedError
    from airflow_provider_gpusched.core.slurm.job_view import claim_output_folder, folder_refusal

    folder = tmp_path / "a" / "run" / "job"
    folder.mkdir(parents=True)
    assert "does not list DAG a" in folder_refusal(str(folder), "a", str(tmp_path))  # not claimed yet
    assert claim_output_folder(str(folder), "a") == "" and claim_output_folder(str(folder), "a") == ""
    assert folder_refusal(str(folder), "a", str(tmp_path)) == ""
    assert "not under" in folder_refusal(str(folder), "a", str(tmp_path / "elsewhere"))
    (folder / "dags.json").write_text('{"dags": ["b"]}')
    with pytest.raises(GpuschedError, match=r"is DAG 'b'.*DAG 'a' maps to it too"):
        claim_output_folder(str(folder), "a")
    assert "does not list DAG a" in folder_refusal(str(folder), "a", str(tmp_path))
    assert folder_refusal(str(folder), "b", str(tmp_path)) == ""


@pytest.fixture
def quota_waiters(tmp_path, monkeypatch, runs):
    """Team quotas, with four requests waiting in the book: a private DAG's task, a task of a DAG Airflow does not
    list (deleted, or another deployment's on a shared fleet), a readable DAG's task whose reason names both, and a
    sweep run outside Airflow."""
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
    unlisted = "gone_dag.grp.train[2] (scheduled__2026-01-01T00:00:00+00:00, try 3)"
    for owner, group, reason in (
        (private, "vision", f"vision is over its quota; {private} waits behind ui_private_slurm.other [3]"),
        (unlisted, "vision", "vision is over its quota"),
        (
            "ui_forger_slurm.forge (manual__x, try 1)",
            "nlp",
            f"normal work is waiting for GPUs ({private}); then {unlisted} on gpu01.example.com, 1.5 GPUs",
        ),
        ("gpusched sweep run s1 (pid 12)", "nlp", "nlp is over its quota"),
    ):
        book.mark_waiting(Waiter(owner, "h1", group, 1.0, "quota", now, now + WAITER_TTL, reason))
    return private, unlisted


def test_the_quota_table_hides_a_private_dags_waiter_as_the_leases_do(client, runs, quota_waiters):
    """Items 3 and D: the GPU board's quota table names a waiting task of a DAG the user may not read nowhere (its
    owner, its reason, another waiter's reason), nor one of a DAG Airflow does not list (an allow-list of the DAGs
    the user may read); who may read it sees it; work started outside Airflow shows as it is."""
    private, unlisted = quota_waiters

    def waiters(user):
        board = client.get("/gpusched/api/gpus", headers=token(client, user))
        assert board.status_code == 200, board.text
        quotas = board.json()["quotas"]
        return [(w["owner"], w["reason"]) for g in quotas["groups"] for w in g["waiters"]], board.text

    seen, _text = waiters("admin")
    assert dict(seen)[private].endswith("waits behind ui_private_slurm.other [3]")
    hidden, text = waiters("outsider")
    assert "ui_private" not in text and "gone_dag" not in text, text
    assert sorted(hidden) == [
        ("(a DAG you cannot see)", ""),
        ("(a DAG you cannot see)", ""),
        ("gpusched sweep run s1 (pid 12)", "nlp is over its quota"),
        (
            "ui_forger_slurm.forge (manual__x, try 1)",
            "normal work is waiting for GPUs ((a DAG you cannot see)); then (a DAG you cannot see) on "
            "gpu01.example.com, 1.5 GPUs",
        ),
    ]


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
