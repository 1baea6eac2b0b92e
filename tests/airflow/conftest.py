import importlib.util
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def load_dag_file(path: Path):
    """Import a DAG file the way Airflow does: under a name no other process can import."""
    name = f"unusual_prefix_test_{path.stem}_{uuid.uuid4().hex[:6]}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def the_dag(path: Path):
    """The one DAG defined in a DAG file."""
    from airflow.sdk import DAG

    module = load_dag_file(path)
    dags = {id(v): v for v in vars(module).values() if isinstance(v, DAG)}
    assert len(dags) == 1, f"{path} defines {len(dags)} DAGs"
    return next(iter(dags.values()))


def dag_run_results(dag_run):
    """{task_id or (task_id, map_index): {key: value}} and {same: state} for a finished dag.test() run."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    xcoms: dict = {}
    states: dict = {}
    with create_session() as session:
        rows = session.execute(
            select(XComModel.task_id, XComModel.map_index, XComModel.key, XComModel.value).where(
                XComModel.dag_id == dag_run.dag_id, XComModel.run_id == dag_run.run_id
            )
        ).all()
        for task_id, map_index, key, value in rows:
            xcoms.setdefault(task_id if map_index < 0 else (task_id, map_index), {})[key] = value
        for ti in dag_run.get_task_instances(session=session):
            states[ti.task_id if ti.map_index < 0 else (ti.task_id, ti.map_index)] = (ti.state, ti.try_number)
    return xcoms, states


def run_and_collect(dag, run_conf=None):
    """dag.test() (with the DAG run's ``run_conf``) and what came of it: (run state, xcoms, task states)."""
    dag_run = dag.test(run_conf=run_conf)
    xcoms, states = dag_run_results(dag_run)
    return dag_run.state, xcoms, states


@pytest.fixture
def run_dag(airflow_db, slurm_cluster):
    return run_and_collect


@pytest.fixture
def slurm(slurm_cluster):
    """A client of the test cluster (for what the tests do next to the DAGs)."""
    from airflow_provider_gpusched.core.slurm import SlurmClient, SlurmTransport

    return SlurmClient(SlurmTransport(slurm_conf=slurm_cluster))


def jobs_named(slurm, name):
    """[[job id, state], ...] of the jobs called ``name`` (any state)."""
    out = slurm.runner.run(["squeue", "-h", "-t", "all", "-n", name, "-o", "%i|%T"], check=False).stdout
    return [line.split("|") for line in out.split()]


#: the users of the UI API tests' Airflow app (tests/airflow/ui_auth.py: ``outsider`` may not read ``ui_private*``)
UI_USERS = {"admin": "admin", "viewer": "viewer", "outsider": "outsider"}


@pytest.fixture(scope="module")
def client(runs, tmp_path_factory):
    """Airflow's FastAPI app in process (the UI API tests), once the module's ``runs`` fixture ran its DAGs; logins
    of :data:`UI_USERS` (:func:`token`) under tests/airflow/ui_auth.py's per-DAG auth manager."""
    import json
    import os

    from fastapi.testclient import TestClient

    passwords = tmp_path_factory.mktemp("auth") / "passwords.json"
    passwords.write_text(json.dumps(UI_USERS))
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
    """The Authorization header of user ``user`` (:data:`UI_USERS`) of the :func:`client` app."""
    r = client.post("/auth/token", json={"username": user, "password": UI_USERS[user]})
    assert r.status_code in (200, 201), r.text
    return {"Authorization": f"Bearer {r.json()['access_token']}"}


_RESULT_DIR: list[Path] = []


@pytest.fixture(scope="session", autouse=True)
def _dag_test_result_dir(tmp_path_factory):
    """Where :func:`dag_test_process` results go: under pytest's own temporary folder, so a process killed before
    :func:`process_result` read its file leaves nothing in /tmp."""
    _RESULT_DIR.append(tmp_path_factory.mktemp("dag-test-results"))
    yield
    _RESULT_DIR.clear()


def dag_test_process(path: Path, dag_id: str, env: dict | None = None):
    """Start dag.test() of ``dag_id`` from ``path`` in another process (a second worker, or with ``env``: another
    simulated host), with this process's environment plus ``env``. It writes its result as JSON to a file of its
    own (``proc.result_path``), not to stdout: a log line a thread wrote there once landed inside the result line."""
    import os
    import subprocess
    import sys
    import tempfile

    fd, result_path = tempfile.mkstemp(prefix=f"dag-test-{dag_id}-", suffix=".json", dir=_RESULT_DIR[-1])
    os.close(fd)
    script = f"""
import json, sys
sys.path.insert(0, {str(REPO)!r})
from tests.airflow.conftest import load_dag_file, dag_run_results
from airflow.sdk import DAG
module = load_dag_file(__import__("pathlib").Path({str(path)!r}))
dag = next(v for v in vars(module).values() if isinstance(v, DAG) and v.dag_id == {dag_id!r})
run = dag.test()
xcoms, states = dag_run_results(run)
result = json.dumps({{"state": run.state, "xcoms": {{str(k): v for k, v in xcoms.items()}},
                     "states": {{str(k): v for k, v in states.items()}}}}, default=str)
with open({result_path!r}, "w") as fh:
    fh.write(result)
"""
    # its output goes to a file, not a pipe: a pipe nobody reads while the test waits on the run fills at 64 KiB and
    # stops the run mid-task (a dag.test() of an asynchronous sweep prints ~77 KB: the worker blocked in a print)
    log = tempfile.TemporaryFile(  # noqa: SIM115 - open as long as the process runs: process_result closes it
        mode="w+", prefix=f"dag-test-{dag_id}-", suffix=".log", dir=_RESULT_DIR[-1]
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=REPO,
        env={**os.environ, **(env or {})},
    )
    proc.result_path, proc.log = result_path, log
    return proc


def process_result(proc, dag_id: str, timeout: float = 240) -> dict:
    """{"state", "xcoms", "states"} (task keys as strings) of a :func:`dag_test_process`."""
    import json
    import os
    import subprocess

    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:  # stopped, and its output said: what a run that hangs was doing
        proc.kill()
        proc.wait()
        proc.log.seek(0)
        tail = proc.log.read()[-6000:]
        proc.log.close()
        os.unlink(proc.result_path)
        raise AssertionError(f"dag {dag_id} in a subprocess ran past {timeout} s (killed):\n{tail}") from None
    proc.log.seek(0)
    output = proc.log.read()
    proc.log.close()
    try:
        with open(proc.result_path) as fh:
            text = fh.read()
    finally:
        os.unlink(proc.result_path)
    assert text, f"dag {dag_id} in a subprocess gave no result (rc {proc.returncode}):\n{output[-6000:]}"
    return json.loads(text)


def run_in_subprocess(path: Path, dag_id: str, timeout: float = 240) -> dict:
    """dag.test() of ``dag_id`` from ``path`` in another process (a second worker: two DAG runs at once),
    with this process's environment. Returns {"state", "xcoms", "states"} (task keys as strings)."""
    return process_result(dag_test_process(path, dag_id), dag_id, timeout)


def preempted_by_normal_work(
    idle_dag, dagfile: Path, normal_dag_id: str, lease_manager, wait: float = 120, ready=None
) -> tuple:
    """Run ``idle_dag`` here and, once an idle-class lease is held, the DAG ``normal_dag_id`` of ``dagfile`` in a
    second process (a second worker). Returns (normal's {"state", ...}, idle run state, xcoms, task states)."""
    import threading
    import time

    normal: dict = {}

    def run_normal_when_idle_holds_the_gpus():
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            # ``ready``: the idle work has got far enough to be preempted (its SIGTERM handler is in place)
            if any(lease.job_class == "idle" for lease in lease_manager.leases()) and (ready is None or ready()):
                break
            time.sleep(0.1)
        else:
            return
        normal.update(run_in_subprocess(dagfile, normal_dag_id))

    # the idle task works until it is preempted: however long the second process takes to start
    helper = threading.Thread(target=run_normal_when_idle_holds_the_gpus, daemon=True)
    helper.start()
    state, xcoms, states = run_and_collect(idle_dag)
    helper.join(timeout=wait + 120)
    return normal, state, xcoms, states
