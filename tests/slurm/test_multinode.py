"""Jobs bigger than one node, on the real multi-node test cluster (scripts/slurm-cluster.sh: every node a slurmd in its
own network, hostname and mount namespaces): the job's shape, the distributed starts (srun and torchrun), a real
torch.distributed all-reduce across nodes, and what happens when a rank or a node dies."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from airflow_provider_gpusched.core.slurm import JobPhase, SlurmJobSpec
from tests import services

from ..polling import need_torch, wait_until
from .conftest import REPO, over_every_transport, scontrol

pytestmark = pytest.mark.slurm

RANK_REPORT = r"""
import json, os, socket, sys
out = sys.argv[1]
keys = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_RANK", "GROUP_WORLD_SIZE",
        "MASTER_ADDR", "MASTER_PORT", "CUDA_VISIBLE_DEVICES", "SLURM_JOB_ID")
record = {k: os.environ.get(k) for k in keys}
record.update(host=socket.gethostname(), args=sys.argv[2:])
with open(os.path.join(out, f"rank-{os.environ['RANK']}.json"), "w") as fh:
    json.dump(record, fh)
"""

ALL_REDUCE = r"""
import json, os, socket, sys
import torch
import torch.distributed as dist
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
value = torch.tensor([float(rank + 1)])
dist.all_reduce(value)
hosts = [None] * world
dist.all_gather_object(hosts, socket.gethostname())
with open(os.path.join(sys.argv[1], f"rank-{rank}.json"), "w") as fh:
    json.dump({"rank": rank, "world": world, "sum": value.item(), "hosts": hosts}, fh)
dist.destroy_process_group()
"""


def cluster_script(conf: str, *args: str) -> subprocess.CompletedProcess:
    """scripts/slurm-cluster.sh for the cluster of ``conf`` (its root is two levels up)."""
    root = str(Path(conf).resolve().parents[1])
    return subprocess.run(
        ["bash", str(REPO / "scripts" / "slurm-cluster.sh"), *args],
        capture_output=True,
        text=True,
        env={**os.environ, "GPUSCHED_SLURM_ROOT": root},
        timeout=120,
    )


def node_states(conf: str) -> dict[str, str]:
    out = subprocess.run(
        ["sinfo", "-h", "-N", "-o", "%N %T"], env={**os.environ, "SLURM_CONF": conf}, capture_output=True, text=True
    ).stdout
    return dict(line.split() for line in sorted(set(out.splitlines())) if line.strip())


def job_processes(token: str) -> list[tuple[int, str, str]]:
    """``(pid, command name, Slurm node)`` of the live processes (on every node: they share this host's process
    table) whose environment holds ``token``; each read once, a process that ends meanwhile is left out."""
    found = []
    needle = f"GPUSCHED_TEST_TOKEN={token}".encode()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as fh:
                env = fh.read().split(b"\0")
            with open(f"/proc/{name}/stat", "rb") as st:
                stat = st.read()
        except OSError:
            continue
        if needle not in env or stat.rsplit(b")", 1)[1].split()[0] == b"Z":
            continue
        comm = stat[stat.index(b"(") + 1 : stat.rindex(b")")].decode(errors="replace")
        node = next((e.split(b"=", 1)[1].decode() for e in env if e.startswith(b"SLURMD_NODENAME=")), "")
        found.append((int(name), comm, node))
    return found


def processes_with(token: str) -> list[int]:
    return [pid for pid, _, _ in job_processes(token)]


def ranks_running(token: str, command: str = "sleep") -> list[tuple[int, str, str]]:
    return [p for p in job_processes(token) if p[1] == command]


def rank_records(folder: Path, count: int, timeout: float = 5) -> list[dict]:
    wait_until(lambda: len(list(folder.glob("rank-*.json"))) == count, timeout, f"{count} rank records in {folder}")
    return [json.loads((folder / f"rank-{r}.json").read_text()) for r in range(count)]


@pytest.fixture
def nodes_back(slurm_cluster):
    """After the test: every node the test killed is started again and idle (ReturnToService=2)."""
    yield
    for name in cluster_script(slurm_cluster, "nodes").stdout.split():
        if node_states(slurm_cluster).get(name) not in ("idle", "mixed", "allocated"):
            cluster_script(slurm_cluster, "start-node", name)
    wait_until(
        lambda: all(s in ("idle", "mixed", "allocated") for s in node_states(slurm_cluster).values()),
        90,
        "every node back",
    )


@over_every_transport
def test_the_test_cluster_has_two_real_nodes_with_their_own_hostnames(client, out, tmp_path):
    states = node_states(os.environ["SLURM_CONF"])
    assert len(states) >= 2 and {"n1", "n2"} <= set(states), states
    spec = SlurmJobSpec(
        command="srun hostname; srun cat /etc/hostname", nodes=2, ntasks_per_node=1, output=out("hosts")
    )
    job = client.submit(spec)
    final = client.wait(job.job_id, poll_interval=0.5, timeout=120)
    assert final.state == "COMPLETED" and final.nodes == "n[1-2]", final
    lines = Path(spec.output.replace("%j", job.job_id)).read_text().split()
    assert sorted(lines[:2]) == ["n1", "n2"]  # two slurmds, two hostnames (UTS namespaces), one shared filesystem


def test_job_shape_reaches_slurm(client, out):
    name = f"shape-{uuid.uuid4().hex[:6]}"
    conf = os.environ["SLURM_CONF"]
    whole = SlurmJobSpec(
        command=["sleep", "20"],
        nodes=2,
        ntasks_per_node=2,
        gpus_per_node=2,
        cpus_per_gpu=1,
        nodelist="n[1-2]",
        exclusive=True,
        job_name=name,
        output=out("shape"),
    )
    job = client.submit(whole)
    try:
        wait_until(lambda: client.status(job.job_id).phase.name == "RUNNING", 60, "the job to run")
        shown = scontrol(conf, "-o", "show", "job", job.job_id).stdout
        assert "NumNodes=2 " in shown and "NumTasks=4 " in shown and " NodeList=n[1-2] " in shown, shown
        assert "TresPerNode=gres:gpu:2" in shown or "TresPerNode=gpu:2" in shown, shown
        assert "CpusPerTres=gres:gpu:1" in shown or "CpusPerTres=gpu:1" in shown, shown
        assert "OverSubscribe=NO" in shown, shown  # --exclusive: the nodes are the job's alone
    finally:
        client.cancel([job.job_id])
    placed = {}
    for key, shape in (("exclude", {"exclude": ["n1"]}), ("constraint", {"constraint": "rack1&fakegpu"})):
        spec = SlurmJobSpec(command="hostname", nodes=1, output=out(key), **shape)
        final = client.wait(client.submit(spec).job_id, poll_interval=0.5, timeout=60)
        placed[key] = final.nodes
    assert placed == {"exclude": "n2", "constraint": "n1"}


@over_every_transport
def test_srun_start_sets_every_rank_variable_and_passes_arguments_verbatim(client, out, tmp_path):
    script = tmp_path / "report.py"
    script.write_text(RANK_REPORT)
    folder = tmp_path / "ranks"
    folder.mkdir()
    args = ["a b", "it's", "x;y", "$HOME", "--"]
    spec = SlurmJobSpec(
        command=[sys.executable, str(script), str(folder), *args],
        nodes=2,
        gpus_per_node=2,
        distributed="srun",
        output=out("srun"),
    )
    job = client.submit(spec)
    final = client.wait(job.job_id, poll_interval=0.5, timeout=120)
    assert final.state == "COMPLETED", (final, Path(spec.output.replace("%j", job.job_id)).read_text())
    ranks = rank_records(folder, 4)
    assert [r["RANK"] for r in ranks] == ["0", "1", "2", "3"]
    assert {r["WORLD_SIZE"] for r in ranks} == {"4"} and {r["LOCAL_WORLD_SIZE"] for r in ranks} == {"2"}
    assert {r["GROUP_WORLD_SIZE"] for r in ranks} == {"2"}
    by_host = {}
    for r in ranks:
        by_host.setdefault(r["host"], []).append(r)
        assert r["NODE_RANK"] == r["GROUP_RANK"] == ("0" if r["host"] == "n1" else "1")
        assert r["args"] == args  # verbatim through sbatch, srun and the rank wrapper
        assert r["CUDA_VISIBLE_DEVICES"] and len(r["CUDA_VISIBLE_DEVICES"].split(",")) == 2
    assert sorted(by_host) == ["n1", "n2"]
    assert all(sorted(r["LOCAL_RANK"] for r in rs) == ["0", "1"] for rs in by_host.values())
    assert {r["MASTER_ADDR"] for r in ranks} == {"n1"}  # the first node, resolvable on every node
    ports = {r["MASTER_PORT"] for r in ranks}
    assert len(ports) == 1 and 20000 <= int(ports.pop()) < 32000


@pytest.mark.parametrize("mode", ["srun", "torchrun"])
def test_torch_all_reduce_across_two_nodes_with_two_ranks_each(client, out, tmp_path, mode):
    need_torch()
    script = tmp_path / "allreduce.py"
    script.write_text(ALL_REDUCE)
    folder = tmp_path / "ranks"
    folder.mkdir()
    spec = SlurmJobSpec(
        command=[sys.executable, str(script), str(folder)],
        nodes=2,
        gpus_per_node=2,
        distributed=mode,
        torchrun=[sys.executable, "-m", "torch.distributed.run"],
        output=out(mode),
        environment={"PATH": os.environ["PATH"]},
    )
    job = client.submit(spec)
    final = client.wait(job.job_id, poll_interval=0.5, timeout=180)
    text = Path(spec.output.replace("%j", job.job_id)).read_text()
    assert final.state == "COMPLETED", (final, text[-3000:])
    ranks = rank_records(folder, 4)
    assert {r["sum"] for r in ranks} == {10.0}  # 1 + 2 + 3 + 4, reduced over gloo between the nodes
    assert {r["world"] for r in ranks} == {4}
    assert sorted(set(ranks[0]["hosts"])) == ["n1", "n2"] and ranks[0]["hosts"].count("n1") == 2
    assert f"[gpusched] {mode} start: 2 node(s) (n[1-2]) x 2 rank(s), rendezvous n1:" in text


def test_two_jobs_sharing_a_node_rendezvous_on_different_ports(client, out, tmp_path):
    folders, jobs = [], []
    script = tmp_path / "report.py"
    script.write_text(RANK_REPORT + "\nimport time; time.sleep(4)\n")
    for k in range(2):
        folder = tmp_path / f"job{k}"
        folder.mkdir()
        folders.append(folder)
        spec = SlurmJobSpec(
            command=[sys.executable, str(script), str(folder)],
            nodes=1,
            nodelist=["n1"],
            gpus_per_node=2,
            distributed="srun",
            output=out(f"port{k}"),
        )
        jobs.append(client.submit(spec).job_id)
    finals = [client.wait(j, poll_interval=0.5, timeout=120) for j in jobs]
    assert [f.state for f in finals] == ["COMPLETED", "COMPLETED"]
    records = [rank_records(folder, 2) for folder in folders]
    assert {r["host"] for rs in records for r in rs} == {"n1"}
    assert records[0][0]["MASTER_PORT"] != records[1][0]["MASTER_PORT"]


def test_free_port_skips_a_port_in_use(tmp_path):
    """The port finder of the job script (no Slurm needed: bash and /proc/net/tcp)."""
    import socket

    from airflow_provider_gpusched.core.slurm.ranks import PORT_BASE, PORT_SPAN, slurm_launch_function

    job_id = 4242
    wanted = PORT_BASE + job_id % PORT_SPAN
    script = slurm_launch_function("srun", 1) + "\ngpusched_free_port\n"
    free = subprocess.run(
        ["bash", "-c", script],
        env={**os.environ, "SLURM_JOB_ID": str(job_id)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    with socket.socket() as busy:
        busy.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            busy.bind(("127.0.0.1", wanted))
        except OSError:
            pytest.fail(f"port {wanted} is taken on this machine; the test needs it free")
        busy.listen()
        taken = subprocess.run(
            ["bash", "-c", script],
            env={**os.environ, "SLURM_JOB_ID": str(job_id)},
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    assert int(free) == wanted and int(taken) == wanted + 1


def test_a_killed_rank_ends_the_job_at_once_not_at_its_time_limit(client, out):
    token = uuid.uuid4().hex
    spec = SlurmJobSpec(
        command=["sleep", "300"],
        nodes=2,
        gpus_per_node=2,
        distributed="srun",
        time_limit=10,
        environment={"GPUSCHED_TEST_TOKEN": token},
        output=out("killrank"),
    )
    job = client.submit(spec)
    try:
        ranks = wait_until(
            lambda: (lambda p: p if len(p) >= 4 else None)(ranks_running(token)), 60, "four sleeping ranks"
        )
        victim = ranks[-1][0]
        killed_at = time.monotonic()
        os.kill(victim, signal.SIGKILL)
        final = client.wait(job.job_id, poll_interval=0.5, timeout=90)
        took = time.monotonic() - killed_at
        assert final.phase is JobPhase.FAILED and final.state == "FAILED", final
        assert took < 60, took  # --kill-on-bad-exit: the other ranks did not sleep on for 300 s
        wait_until(lambda: not processes_with(token), 30, "no rank left on any node")
    finally:
        client.cancel([job.job_id])


def test_a_rank_that_hangs_after_the_others_ended_is_stopped_after_the_grace(client, out):
    token = uuid.uuid4().hex
    command = 'if [ "$RANK" = 1 ]; then sleep 300; fi; echo "rank $RANK done"'
    spec = SlurmJobSpec(
        command=command,
        nodes=2,
        gpus_per_node=1,
        distributed="srun",
        rank_exit_grace=3,
        environment={"GPUSCHED_TEST_TOKEN": token},
        output=out("hang"),
    )
    started = time.monotonic()
    job = client.submit(spec)
    final = client.wait(job.job_id, poll_interval=0.5, timeout=120)
    assert time.monotonic() - started < 90  # not the 300 s the hung rank would take
    assert not final.phase.is_success, final
    text = Path(spec.output.replace("%j", job.job_id)).read_text()
    assert "rank 0 done" in text and "rank 1 done" not in text, text
    wait_until(lambda: not processes_with(token), 30, "the hung rank gone")


def test_cancelling_stops_every_step_on_every_node(client, out):
    token = uuid.uuid4().hex
    spec = SlurmJobSpec(
        command="sleep 300 & sleep 300; wait",
        nodes=2,
        gpus_per_node=2,
        distributed="srun",
        environment={"GPUSCHED_TEST_TOKEN": token},
        output=out("cancel"),
    )
    job = client.submit(spec)
    wait_until(
        lambda: (lambda r: len(r) >= 8 and {node for _, _, node in r} == {"n1", "n2"})(ranks_running(token)),
        60,
        "sleeps on both nodes",
    )
    client.cancel([job.job_id])
    final = client.wait(job.job_id, poll_interval=0.5, timeout=60)
    assert final.state == "CANCELLED", final
    wait_until(lambda: not processes_with(token), 30, "every step on every node stopped")


def test_a_dying_node_fails_a_job_as_slurm_reports_it_and_requeues_a_requeueable_one(client, out, tmp_path, nodes_back):
    conf = os.environ["SLURM_CONF"]
    log = tmp_path / "starts.log"
    plain = SlurmJobSpec(
        command=["sleep", "300"], nodes=2, ntasks_per_node=1, distributed="srun", requeue=False, output=out("nodefail")
    )
    again = SlurmJobSpec(
        command=f'echo "start $(hostname)" >> {log}; sleep 300',
        nodes=2,
        ntasks_per_node=1,
        distributed="srun",
        requeue=True,
        time_limit=10,
        output=out("requeue"),
    )
    plain_id, again_id = client.submit(plain).job_id, client.submit(again).job_id
    wait_until(lambda: all(client.status(j).phase.name == "RUNNING" for j in (plain_id, again_id)), 60, "both running")
    wait_until(lambda: log.exists() and log.read_text().count("start") == 2, 30, "both ranks of the requeueable job")
    assert cluster_script(conf, "kill-node", "n2").returncode == 0
    final = client.wait(plain_id, poll_interval=1, timeout=120)
    assert final.state == "NODE_FAIL" and not final.phase.is_success, final
    requeued = wait_until(
        lambda: (lambda s: s if s.restarts >= 1 else None)(client.status(again_id)),
        60,
        "the requeueable job back in the queue",
    )
    assert not requeued.is_terminal, requeued
    assert node_states(conf)["n2"].startswith("down"), node_states(conf)
    cluster_script(conf, "start-node", "n2")
    wait_until(lambda: node_states(conf).get("n2") in ("idle", "mixed", "allocated"), 60, "n2 back")
    # Slurm holds a requeued job back ~2 min; release it as an operator would, but not within the second of the
    # requeue: a node refuses a credential made in the same second as the old one's revocation ("Job credential
    # revoked") and the job would fail instead
    time.sleep(3)
    scontrol(conf, "update", f"JobId={again_id}", "StartTime=now")
    wait_until(lambda: log.read_text().count("start") >= 4, 90, "the requeued job running again on both nodes")
    client.cancel([again_id])


def test_queue_list_shows_a_multi_node_jobs_nodes(client, tmp_path, slurm_cluster):
    from airflow_provider_gpusched.core.slurm.job import job_comment
    from airflow_provider_gpusched.core.work_tag import WorkTag

    tag = WorkTag(dag_id="ddp", task_id="train", job_class="normal")
    comment = job_comment("m" * 24, 1, task="t" * 16, work="w" * 16, tag=tag)
    running = client.submit(
        SlurmJobSpec(command="sleep 60", nodes=2, gpus_per_node=1, comment=comment, output=str(tmp_path / "%j.out"))
    )
    waiting = client.submit(
        SlurmJobSpec(
            command="sleep 60",
            nodes=2,
            gpus_per_node=4,
            comment=comment,
            nodelist="n[1-2]",
            exclusive=True,
            output=str(tmp_path / "%j.out"),
        )
    )
    try:
        wait_until(lambda: client.status(running.job_id).phase.name == "RUNNING", 60, "the first job running")
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "airflow_provider_gpusched.cli",
                "queue",
                "list",
                "--no-local",
                "--no-fleet",
                "--dag",
                "ddp",
                "--json",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "SLURM_CONF": slurm_cluster},
            cwd=REPO,
        )
        assert out.returncode == 0, out.stderr
        entries = {e["id"]: e for e in json.loads(out.stdout)["entries"]}
        assert entries[running.job_id]["where"] == "batch on n[1-2] (2 nodes)", entries
        assert entries[waiting.job_id]["where"] == "batch (2 nodes)", entries  # waits for the first: no nodes yet
        text = subprocess.run(
            [
                sys.executable,
                "-m",
                "airflow_provider_gpusched.cli",
                "queue",
                "list",
                "--no-local",
                "--no-fleet",
                "--dag",
                "ddp",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "SLURM_CONF": slurm_cluster},
            cwd=REPO,
        ).stdout
        assert "n[1-2] (2 nodes)" in text
    finally:
        client.cancel([running.job_id, waiting.job_id])


@pytest.mark.parametrize("distributed", ["srun", None])
def test_a_process_a_job_forks_off_ends_with_the_job(client, out, distributed):
    """Issue 53, item 10: `setsid nohup sleep 301 &` in each rank of a 2-node job kept running on n1 and n2 after the
    job COMPLETED (the test cluster's ProctrackType is proctrack/linuxproc: cgroups cannot work in its namespaces).
    The job script and each rank run under the containment shim, so the escaped sleeps end with the job."""
    token = uuid.uuid4().hex
    command = "setsid nohup sleep 301 >/dev/null 2>&1 & sleep 1; echo forked"
    shape = {"nodes": 2, "gpus_per_node": 1, "distributed": "srun"} if distributed else {"nodes": 1}
    spec = SlurmJobSpec(command=command, environment={"GPUSCHED_TEST_TOKEN": token}, output=out("escape"), **shape)
    job = client.submit(spec)
    final = client.wait(job.job_id, poll_interval=0.5, timeout=120)
    text = Path(spec.output.replace("%j", job.job_id)).read_text()
    assert final.state == "COMPLETED", (final, text)
    assert text.count("forked") == (2 if distributed else 1), text
    assert "left 1 process(es) running after it ended" in text, text
    wait_until(lambda: not ranks_running(token), 20, "no escaped sleep left on any node")


def test_a_second_cluster_has_its_own_munged_and_its_down_leaves_the_first_working(client, out, tmp_path):
    """Issue 53, item 15: two test clusters on one machine shared one munged; the first one's `down` killed it and
    the other cluster lost authentication. Each has its own munged (key, socket, pid); the second's `down` stops
    only its own, and the first cluster keeps running jobs."""
    first = Path(os.environ["SLURM_CONF"]).resolve().parents[1]
    # a short private root: slurmstepd's sockets live below it and a Unix socket path has at most 108 bytes (under
    # pytest-xdist, tmp_path alone is 70)
    second = Path(tempfile.mkdtemp(prefix="gss2-"))
    env = {**os.environ, "GPUSCHED_SLURM_ROOT": str(second), "GPUSCHED_SLURM_NODES": "1"}
    env.pop("SLURM_CONF", None)
    record = services.register(
        "slurm-cluster-second", stop=["bash", str(REPO / "scripts" / "slurm-cluster.sh"), "down"], env=env
    )
    up = subprocess.run(
        ["bash", str(REPO / "scripts" / "slurm-cluster.sh"), "up"], env=env, capture_output=True, text=True, timeout=300
    )
    try:
        assert up.returncode == 0, up.stderr[-2000:]
        mine, theirs = (Path(_munge_socket(root)).parent / "munged.pid" for root in (first, second))
        assert mine != theirs and mine.read_text() != theirs.read_text()
        assert f"AuthInfo=socket={_munge_socket(second)}" in (second / "etc" / "slurm.conf").read_text()
        job = subprocess.run(
            ["sbatch", "--parsable", "--wait", f"--output={tmp_path}/second-%j.out", "--wrap", "hostname"],
            env={**env, "SLURM_CONF": str(second / "etc" / "slurm.conf")},
            capture_output=True,
            text=True,
            timeout=300,  # a fresh cluster's first job, while the other workers' tiers load both cores
        )
        assert job.returncode == 0, job.stderr
    finally:
        down = subprocess.run(
            ["bash", str(REPO / "scripts" / "slurm-cluster.sh"), "down"],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    services.stopped(record)
    shutil.rmtree(second, ignore_errors=True)
    assert down.returncode == 0, down.stderr[-2000:]
    assert not theirs.exists()
    os.kill(int(mine.read_text()), 0)  # the first cluster's munged still runs
    spec = SlurmJobSpec(command="echo still authenticated", output=out("after-down"))
    final = client.wait(client.submit(spec).job_id, poll_interval=0.5, timeout=60)
    assert final.state == "COMPLETED", final


def _munge_socket(root: Path) -> str:
    """The munge socket a cluster's slurm.conf names (scripts/slurm-cluster.sh: one munged per cluster)."""
    line = next(x for x in (root / "etc" / "slurm.conf").read_text().splitlines() if x.startswith("AuthInfo="))
    return line.split("socket=", 1)[1]
