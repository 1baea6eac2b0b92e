"""Shared test setup.

* Airflow gets a fresh AIRFLOW_HOME (SQLite metadata DB) in a temporary directory, set before any
  test module imports Airflow.
* The ``slurm_cluster`` fixture gives a real Slurm cluster (two nodes, n1 and n2): the one named by
  ``SLURM_CONF`` if it answers, otherwise one started with ``scripts/slurm-cluster.sh up`` (root
  only) and stopped again at the end. In CI (``CI=true``) a cluster that does not come up fails the
  tests that need it instead of skipping them.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests import services
from tests.polling import wait_until

REPO = Path(__file__).resolve().parent.parent
_AIRFLOW_HOME = tempfile.mkdtemp(prefix="gpusched-test-airflow-")
os.environ["AIRFLOW_HOME"] = _AIRFLOW_HOME
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
# dag.test() runs only DAGs found in the DAGs folder: the examples and the tests' own DAG files
_DAGS = os.path.join(_AIRFLOW_HOME, "dags")
os.makedirs(_DAGS)
for _src in [*(REPO / "dags").glob("*.py"), *(REPO / "tests" / "airflow" / "dagfiles").glob("*.py")]:
    shutil.copy(_src, _DAGS)
shutil.copytree(REPO / "dags" / "sweeps", os.path.join(_DAGS, "sweeps"))  # YAML specs the loader DAG reads
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = _DAGS
os.environ["AIRFLOW__CORE__UNIT_TEST_MODE"] = "False"
os.environ["AIRFLOW__GPUSCHED__SLURM_OUTPUT_DIR"] = os.path.join(_AIRFLOW_HOME, "slurm-out")
os.environ.setdefault("AIRFLOW__GPUSCHED__SLURM_POLL_INTERVAL", "1")
# no GPU on CI machines: Airflow tests use a SIMULATED 4 x 24 GiB inventory and their own lease directory
os.environ["AIRFLOW__GPUSCHED__SIMULATE_GPUS"] = "4x24GiB"
os.environ["AIRFLOW__GPUSCHED__GPU_STATE_DIR"] = os.path.join(_AIRFLOW_HOME, "gpu-leases")
os.environ["AIRFLOW__GPUSCHED__LOCAL_RUN_DIR"] = os.path.join(_AIRFLOW_HOME, "local-runs")
os.environ["AIRFLOW__GPUSCHED__GPU_POLL_INTERVAL"] = "0.5"
# dag.test() runs triggers in its own process, one task at a time: the race min_deferral guards against (a
# deployed scheduler, triggers/deferral.py) cannot happen there. The stack tier runs with the default floor.
os.environ["AIRFLOW__GPUSCHED__MIN_DEFERRAL"] = "0"
os.environ["GPUSCHED_TEST_TRAINER"] = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "checkpointing_trainer.py"
)
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")

if os.environ.get("GPUSCHED_EXPECT_INSTALLED"):  # scripts/test-compat.sh: test the installed wheel, not a checkout
    import airflow_provider_gpusched

    if "site-packages" not in Path(airflow_provider_gpusched.__file__).parts:
        raise RuntimeError(
            f"GPUSCHED_EXPECT_INSTALLED is set but airflow_provider_gpusched was imported from "
            f"{airflow_provider_gpusched.__file__}, not from an installed wheel"
        )


#: the fixtures that start or need a service, and the markers of tiers that do (docs/development.md "Tiers"). A test
#: that uses none of them, directly or through another fixture, and is not marked ``heavy`` (one test's 0.5 s of CPU
#: or more: the fast tier's 60 s on 2 cores are about 120 s of CPU for 1,000 tests) is marked ``fast``:
#: scripts/test-fast.sh runs those; the whole suite runs every test.
SERVICE_FIXTURES = ("slurm_cluster", "airflow_db", "login_host", "stack", "fleet", "mlflow_server", "k8s_cluster")
SERVICE_MARKERS = ("slurm", "stack", "fleet", "gpu", "kubernetes")
#: set by scripts/test-fast.sh: a service fixture asked for there is a mistake in the tiers, said at once
FAST_TIER = os.environ.get("GPUSCHED_TIER") == "fast"


#: tiers whose tests share one deployment (a session fixture that takes minutes to start, on fixed ports): on
#: pytest-xdist each is one unit of work on one worker (scripts/test.sh: --dist loadgroup, pytest_xdist_make_scheduler)
SHARED_DEPLOYMENTS = ("stack", "fleet", "kubernetes")
#: test modules whose tests share a costly start, each set one unit of work on one worker: those that import PyTorch
#: in the test process (about 3.5 s of CPU with torch._dynamo, which the optimizers load), so one worker pays the
#: import instead of each; the partitioner's, whose module fixtures read its 998 cases and solve the 64-host cluster
#: once for the tests that share them (about 5 s of CPU); the layering checks', which parse the package once
SHARED_START_UNITS = {
    "tests/core/test_model_cost.py": "pytorch",
    "tests/core/test_profile.py": "pytorch",
    "tests/examples/test_digits_training.py": "pytorch",
    "tests/core/test_async_search_gp.py": "pytorch",  # Optuna's GP sampler imports PyTorch in the test process
    "tests/core/test_partition.py": "partition",
    "tests/core/test_architecture.py": "architecture",
    # its module fixture runs every time-limit chain scenario at once on the worker's cluster (2 minutes, sleeping)
    "tests/slurm/test_time_limit_chain.py": "slurm-chain",
    # one MLflow server (a minute to make its venv the first time, seconds to start) for the tests that talk to it
    "tests/tracking/test_mlflow.py": "mlflow",
    "tests/airflow/test_tracking_dags.py": "mlflow",
    # the UI's Node runs one after another: two type checks and a Vite build at once on different workers took about
    # 1.2 GB together (tsc alone: 11 s and 360 MB idle, 26 s and 450 MB on a third of a core), and under load the
    # type check failed (issue 76)
    "tests/ui/test_frontend.py": "ui",
}


#: test modules that spend long waiting (on processes they start, on a wheel built once for the session) and are
#: started first on parallel workers, so that no worker is left waiting on one of them at the end while the others
#: have nothing left to do (the fast tier, 2026-11-28: 10-15 s of idle cores at its end without this)
START_EARLY = (
    "tests/test_services.py",  # its reaper test waits 10 s on the processes it signals
    "tests/test_distribution.py",
    "tests/gpu/test_preemption.py",
    "tests/gpu/test_launch_and_oom.py",
    "tests/core/test_sweep_runs.py",
    "tests/core/test_distributed.py",
    "tests/core/test_fleet.py",
    "tests/core/test_sweep_once.py",
    "tests/gpu/test_queue.py",
    "tests/slurm/test_time_limit_chain.py",
    "tests/quota/test_quota_leases.py",
    "tests/ui/test_frontend.py",  # vitest: 5-8 s in its own Node process, collected last of all
)


def pytest_collection_modifyitems(config, items):
    # a stable sort: the same order on every worker, as pytest-xdist requires
    items.sort(key=lambda item: item.nodeid.split("::")[0] not in START_EARLY)
    for item in items:
        needs = [f for f in SERVICE_FIXTURES if f in item.fixturenames]
        needs += [m for m in SERVICE_MARKERS + ("heavy",) if item.get_closest_marker(m)]
        if not needs:
            item.add_marker(pytest.mark.fast)


def tier_unit(nodeid: str, fast_tier: bool = FAST_TIER) -> str:
    """The unit of work a test is scheduled in: its tier for the tiers that share a deployment, else itself.
    In the fast tier, the tests under tests/airflow (those that need no Airflow database: they import Airflow in the
    test process, 2.7 s of CPU) are one unit too, so one worker imports Airflow instead of each; their modules
    import it in the tests, not when every worker collects them (tests/test_tiers.py checks both)."""
    for tier in SHARED_DEPLOYMENTS:
        if nodeid.startswith(f"tests/{tier}/"):
            return tier
    module = nodeid.split("::")[0]
    if module in SHARED_START_UNITS:
        return SHARED_START_UNITS[module]
    if fast_tier and nodeid.startswith("tests/airflow/"):
        return "airflow"
    return nodeid


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadgroup`` (scripts/test.sh, scripts/test-fast.sh): the tests of a shared deployment go to one worker
    as one unit, as do the modules that share a costly start (SHARED_START_UNITS), the largest units first (so the
    stack and the fleet start at once), every other test on its own. pytest-xdist's own loadgroup reads
    ``xdist_group`` marks from node ids it rewrites, which pytest 9 no longer lets it do."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class TierScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return tier_unit(nodeid)

    return TierScheduling(config, log)


def no_service_in_the_fast_tier(what: str) -> None:
    if FAST_TIER:
        pytest.fail(
            f"the fast tier (scripts/test-fast.sh) must start no service, and this test asks for {what}: "
            f"mark it with its tier (tests/conftest.py SERVICE_MARKERS) or use the fixture that starts it"
        )


def pytest_sessionfinish(session, exitstatus):
    shutil.rmtree(_AIRFLOW_HOME, ignore_errors=True)
    if not WORKER and services.OWNER_ENV not in os.environ:  # pytest run by hand: its own services (scripts/test.sh
        services.reap(services.owner())  # stops its run's in its EXIT trap, whatever way the run ends)


def _sinfo_ok(env: dict) -> bool:
    try:
        out = subprocess.run(["sinfo", "-h", "-o", "%T"], env=env, capture_output=True, text=True, timeout=10)
    except (FileNotFoundError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and any(s in out.stdout for s in ("idle", "mixed", "alloc"))


#: this process's place among pytest-xdist's workers ("gw0", "gw1", ...; "" without workers)
WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")


def _worker_index() -> int:
    return int(WORKER[2:]) if WORKER.startswith("gw") and WORKER[2:].isdigit() else 0


def _cluster_settings(root: Path) -> dict:
    """The environment for ``scripts/slurm-cluster.sh up`` of this worker's own cluster: its root, a controller
    port and a subnet no other worker's cluster starts with (two started at once would otherwise both pick the first
    free one)."""
    env = {"GPUSCHED_SLURM_ROOT": str(root)}
    if not WORKER:
        return env  # one cluster: the script picks its free port and subnet itself
    index = _worker_index()
    for port in range(17000 + 20 * index, 17020 + 20 * index):
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) != 0:
                env["GPUSCHED_SLURMCTLD_PORT"] = str(port)
                break
    for port in range(17019 + 20 * index, 17010 + 20 * index, -1):  # slurmrestd's, from the range's other end
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) != 0 and str(port) != env.get("GPUSCHED_SLURMCTLD_PORT"):
                env["GPUSCHED_SLURMRESTD_PORT"] = str(port)
                break
    if not (root / "net").exists():
        used = subprocess.run(["ip", "-4", "addr"], capture_output=True, text=True).stdout
        for octet in range(200 + index, 255, 10):
            if f"10.204.{octet}." not in used:
                env["GPUSCHED_SLURM_NET"] = str(octet)
                break
    return env


@pytest.fixture(scope="session")
def slurm_cluster():
    """SLURM_CONF of a running cluster: two nodes (n1, n2) of 4 GPUs each, partitions batch/idle.

    The cluster ``SLURM_CONF`` names if it answers; otherwise this process's own, started on first use and stopped at
    the end: ``.slurm/`` in a run without workers, ``.slurm-gwN/`` on pytest-xdist's worker N, so that a test that
    restarts the controller or kills a node never pulls the cluster from under another worker's test."""
    no_service_in_the_fast_tier("the Slurm test cluster")
    env = dict(os.environ)
    if env.get("SLURM_CONF") and _sinfo_ok(env):
        yield env["SLURM_CONF"]
        return
    script = REPO / "scripts" / "slurm-cluster.sh"
    root = REPO / (f".slurm-{WORKER}" if WORKER else ".slurm")
    conf = root / "etc" / "slurm.conf"
    os.environ["GPUSCHED_SLURM_ROOT"] = str(root)  # scripts the tests run (restart-ctld, stack.sh) act on this one
    if conf.exists() and _sinfo_ok({**env, "SLURM_CONF": str(conf)}):
        os.environ["SLURM_CONF"] = str(conf)  # already up (kept by an earlier session): leave it up
        yield str(conf)
        return
    problem = None
    started = False
    record = None  # (tests/services.py: stopped below, or by scripts/test.sh however the run ends)
    if os.geteuid() != 0:
        problem = "the test cluster needs root (or set SLURM_CONF to a running cluster)"
    else:
        if not os.environ.get("GPUSCHED_KEEP_CLUSTER"):  # before it starts: a run killed while it starts stops it too
            record = services.register(
                f"slurm-cluster-{root.name}",
                stop=["bash", str(script), "down"],
                env={**os.environ, "GPUSCHED_SLURM_ROOT": str(root)},
            )
        proc = subprocess.run(
            ["bash", str(script), "up"],
            env={**env, **_cluster_settings(root)},
            capture_output=True,
            text=True,
            timeout=600,
        )
        if proc.returncode != 0:
            problem = f"scripts/slurm-cluster.sh up failed:\n{proc.stdout}\n{proc.stderr}"
        else:
            started = True
    if problem:
        if IN_CI:
            pytest.fail(f"Slurm test cluster unavailable in CI: {problem}")
        pytest.skip(f"Slurm test cluster unavailable: {problem}")
    os.environ["SLURM_CONF"] = str(conf)
    try:
        yield str(conf)
    finally:
        if record is not None and started:
            subprocess.run(
                ["bash", str(script), "down"],
                env={**os.environ, "GPUSCHED_SLURM_ROOT": str(root)},
                capture_output=True,
                timeout=120,
            )
            services.stopped(record)


@pytest.fixture(scope="session")
def slurm_rest(slurm_cluster):
    """How to reach the test cluster's slurmrestd: ``rest_url``, ``user``, ``token`` (a JWT for this user, one
    day) and the ``environment`` its jobs get (this process's PATH and SLURM_CONF, as sbatch would pass on)."""
    url_file = Path(slurm_cluster).parents[1] / "rest-url"
    assert url_file.exists(), f"the test cluster has no slurmrestd ({url_file} is missing): scripts/slurm-cluster.sh up"
    user = pwd.getpwuid(os.geteuid()).pw_name
    token = subprocess.run(
        ["scontrol", "token", f"username={user}", "lifespan=86400"],
        env={**os.environ, "SLURM_CONF": slurm_cluster},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert token.startswith("SLURM_JWT="), token
    return {
        "rest_url": url_file.read_text().strip(),
        "user": user,
        "token": token.split("=", 1)[1],
        "environment": {"PATH": os.environ["PATH"], "SLURM_CONF": slurm_cluster, "HOME": os.environ.get("HOME", "/")},
    }


@pytest.fixture(scope="session")
def airflow_db():
    """An initialised SQLite metadata DB in the temporary AIRFLOW_HOME."""
    no_service_in_the_fast_tier("an Airflow metadata database")
    proc = subprocess.run(
        [sys.executable, "-m", "airflow", "db", "migrate"], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return _AIRFLOW_HOME


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def login_host(tmp_path_factory):
    """(port, ssh options) of an sshd on 127.0.0.1 that accepts a fresh key for root."""
    no_service_in_the_fast_tier("an sshd")
    if not os.path.exists("/usr/sbin/sshd") or not shutil.which("ssh") or os.geteuid() != 0:
        if IN_CI:
            pytest.fail("sshd/ssh not installed or not root (scripts/test.sh installs openssh-server)")
        pytest.skip("needs root, sshd and ssh")
    d = tmp_path_factory.mktemp("sshd")
    for key in ("hostkey", "clientkey"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / key)], check=True)
    shutil.copy(d / "clientkey.pub", d / "authorized_keys")
    os.makedirs("/run/sshd", exist_ok=True)
    port = free_port()
    proc = subprocess.Popen(
        [
            "/usr/sbin/sshd",
            "-D",
            "-e",
            "-f",
            "/dev/null",
            "-h",
            str(d / "hostkey"),
            "-p",
            str(port),
            "-o",
            "ListenAddress=127.0.0.1",
            "-o",
            f"AuthorizedKeysFile={d / 'authorized_keys'}",
            "-o",
            "PermitRootLogin=prohibit-password",
            "-o",
            "StrictModes=no",
            "-o",
            "UsePAM=no",
            "-o",
            f"PidFile={d / 'sshd.pid'}",
        ],
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its own process group: tests/services.py stops it if this session cannot
    )
    record = services.register("sshd", pgid=proc.pid)
    options = [
        "-i",
        str(d / "clientkey"),
        "-o",
        "StrictHostKeyChecking=no",
        "-o",
        "UserKnownHostsFile=/dev/null",
        "-o",
        "LogLevel=ERROR",
    ]
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.1)
    yield port, options
    proc.terminate()
    proc.wait(timeout=10)
    services.stopped(record)


class MLflowServer:
    """A real ``mlflow server`` (SQLite backend, artifacts served) in its own venv (scripts/mlflow-venv.sh)."""

    def __init__(self, url: str, venv: Path, proc):
        self.url, self.venv, self.proc = url, venv, proc

    def read(self, experiment: str | None = None) -> dict:
        """Every run (of ``experiment``), read back with MLflow's own client in the server's venv: info, params,
        tags, each metric's history (step, value) and the artifacts' names."""
        script = (
            "import json, sys\n"
            "from mlflow.tracking import MlflowClient\n"
            "c = MlflowClient(sys.argv[1]); out = {}\n"
            "for e in c.search_experiments():\n"
            "    if sys.argv[2] and e.name != sys.argv[2]: continue\n"
            "    for r in c.search_runs([e.experiment_id], max_results=5000):\n"
            "        out[r.info.run_id] = {'experiment': e.name, 'name': r.info.run_name, 'status': r.info.status,\n"
            "            'params': r.data.params, 'tags': r.data.tags,\n"
            "            'metrics': {k: sorted((m.step, m.value) for m in c.get_metric_history(r.info.run_id, k))\n"
            "                        for k in r.data.metrics},\n"
            "            'artifacts': sorted(a.path for a in c.list_artifacts(r.info.run_id))}\n"
            "print(json.dumps(out))\n"
        )
        done = subprocess.run(
            [str(self.venv / "bin" / "python"), "-c", script, self.url, experiment or ""],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        runs = json.loads(done.stdout)
        for run in runs.values():  # (step, value) pairs as tuples
            run["metrics"] = {k: [tuple(p) for p in v] for k, v in run["metrics"].items()}
        return runs


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory):
    """A real MLflow tracking server on 127.0.0.1 for this worker's session (the tests that use it are one unit of
    work, tests/conftest.py SHARED_START_UNITS), stopped at the end."""
    no_service_in_the_fast_tier("an MLflow server")
    venv = Path(__file__).resolve().parents[1] / ".venv-mlflow"
    made = subprocess.run(["bash", str(venv.parent / "scripts" / "mlflow-venv.sh")], capture_output=True, text=True)
    assert made.returncode == 0, made.stderr[-3000:]
    d = tmp_path_factory.mktemp("mlflow")
    port = free_port()
    log = open(d / "server.log", "wb")  # noqa: SIM115 - the server's log for the session, closed after it
    proc = subprocess.Popen(
        [
            str(venv / "bin" / "mlflow"),
            "server",
            "--backend-store-uri",
            f"sqlite:///{d / 'mlflow.db'}",
            "--artifacts-destination",
            str(d / "artifacts"),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=d,
        start_new_session=True,
        # no job runners (MLflow 3's huey consumers, for GenAI evaluation jobs): tracking needs none, and they are
        # processes polling beside the tests
        env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
    )
    record = services.register("mlflow-server", pgid=proc.pid)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    import urllib.request

    while True:
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
                if r.status == 200:
                    break
        except OSError:
            pass
        assert proc.poll() is None, (d / "server.log").read_text()[-3000:]
        assert time.monotonic() < deadline, "mlflow server did not answer in 120 s"
        time.sleep(0.3)
    yield MLflowServer(url, venv, proc)
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(timeout=30)
    log.close()
    services.stopped(record)


@pytest.fixture
def statsd(monkeypatch):
    """A StatsD listener on a free UDP port, and Airflow's [metrics] pointed at it. ``statsd(wait=2.0)``: the lines
    received within ``wait`` s (sooner once some came and a read times out); ``statsd("prefix")``: the lines received
    until one starts with the prefix (10 s at most)."""
    import contextlib

    from airflow_provider_gpusched import metrics

    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(0.2)
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_ON", "True")
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_HOST", "127.0.0.1")
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_PORT", str(sock.getsockname()[1]))
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_PREFIX", "airflow")
    metrics._state["key"] = None

    def received(wanted: str | None = None, wait: float = 2.0) -> list[str]:
        lines: list[str] = []
        if wanted is not None:

            def seen() -> bool:
                with contextlib.suppress(TimeoutError):
                    lines.extend(sock.recv(65536).decode().splitlines())
                return any(line.startswith(wanted) for line in lines)

            wait_until(seen, timeout=10, what=wanted, interval=0)
            return lines
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                lines += sock.recv(65536).decode().splitlines()
            except TimeoutError:
                if lines:
                    break
        return lines

    yield received
    sock.close()
    monkeypatch.delenv("AIRFLOW__METRICS__STATSD_ON")
    metrics._state["key"] = None
