"""Distributed starts in real DAGs (dag.test) on the real multi-node Slurm cluster and on a simulated local lease:
Python functions on every rank, a real torch.distributed all-reduce, DDP training across two nodes, failures that
name the rank and the node, and sweeps of multi-node trials."""

from __future__ import annotations

import json
import os
import time
import uuid

import pytest

from ..polling import need_torch, wait_until
from .conftest import REPO, load_dag_file, the_dag

pytestmark = [pytest.mark.airflow, pytest.mark.slurm]


def dagfile(name):
    return the_dag(REPO / "tests" / "airflow" / "dagfiles" / f"{name}.py")


def test_python_function_runs_on_every_rank_and_the_xcom_is_rank_zeros(run_dag):
    need_torch()
    state, xcoms, states = run_dag(dagfile("t_distributed"))
    assert state == "success", states
    for task_id in ("slurm_srun", "slurm_torchrun"):
        result = xcoms[task_id]["return_value"]
        assert result["rank"] == 0 and result["world_size"] == 4, result
        assert result["sum"] == 10.0  # 1 + 2 + 3 + 4: gloo across the two nodes
        assert sorted(set(result["hosts"])) == ["n1", "n2"], result
        places = result["places"]
        assert [p["rank"] for p in places] == [0, 1, 2, 3]
        assert {(p["hostname"], p["node_rank"]) for p in places} == {("n1", 0), ("n2", 1)}
        assert {p["master_addr"] for p in places} == {"n1"} and len({p["master_port"] for p in places}) == 1
        assert sorted(p["local_rank"] for p in places) == [0, 0, 1, 1]
        assert xcoms[task_id]["slurm_job_id"]
    for task_id in ("local_torchrun", "local_srun"):
        result = xcoms[task_id]["return_value"]
        assert result["rank"] == 0 and result["world_size"] == 2 and result["sum"] == 3.0, result
        assert len(set(result["hosts"])) == 1
        assert len(result["gpus"].split(",")) == 2  # the lease's two (simulated) GPUs
        assert len(xcoms[task_id]["gpus_used"]) == 2


def test_a_raising_rank_fails_the_task_naming_rank_and_node_and_a_hung_rank_is_stopped(run_dag, capfd):
    started = time.monotonic()
    state, xcoms, states = run_dag(dagfile("t_distributed_fail"))
    took = time.monotonic() - started
    assert state == "failed"
    assert states["one_rank_raises"][0] == "failed" and states["one_rank_hangs"][0] == "failed", states
    text = "".join(capfd.readouterr())
    assert "one_rank_raises raised ValueError: shard 2 is corrupt (rank 2 of 4 on n2)" in text
    assert "load_shard" in text  # the rank's own traceback
    assert (
        "RankStillRunning: still running 3 s after rank 0 ended (rank_exit_grace); stopped (rank 1 of 2 on n2)" in text
    )
    assert "wait_for_peer_that_left" in text  # where the hung rank was
    assert took < 150, took  # neither waited for its sleep (120 s, 300 s) nor its time limit


def test_ddp_example_trains_across_two_nodes(run_dag):
    need_torch()
    state, xcoms, states = run_dag(the_dag(REPO / "dags" / "slurm_ddp.py"))
    assert state == "success", states
    result = xcoms["report"]["return_value"]
    assert result["world_size"] == 4 and result["hosts"] == ["n1", "n2"]
    assert result["rank_hosts"].count("n1") == 2 and result["rank_hosts"].count("n2") == 2
    assert result["weights_in_sync"] is True  # DDP kept every rank's copy of the model equal
    assert result["accuracy"] > 0.9 and result["loss"] < 0.5, result
    assert result["device"] == "cpu"  # fake GPUs and PyTorch's CPU build here: gloo


@pytest.mark.parametrize("batching", ["mapped", "batched"])
def test_sweep_of_multi_node_trials(run_dag, tmp_path, monkeypatch, batching):
    """Each trial is a 2-node job (batched: an array of 2-node tasks) whose command runs as 4 ranks."""
    root = tmp_path / "sweeps"
    monkeypatch.setenv("AIRFLOW__GPUSCHED__SWEEP_RESULTS_ROOT", str(root))
    module = load_dag_file(REPO / "tests" / "airflow" / "dagfiles" / "t_multinode_sweep.py")
    state, xcoms, states = run_dag(getattr(module, batching))
    assert state == "success", states
    results = sorted(root.glob(f"multinode_{batching}/trials/*/result.json"))
    assert len(results) == 3, sorted(map(str, root.rglob("*")))
    for path in results:
        result = json.loads(path.read_text())
        assert result["world"] == 4 and result["hosts"] == ["n1", "n1", "n2", "n2"] and result["master"] == "n1"
    assert sorted(json.loads(p.read_text())["score"] for p in results) == [4.0, 8.0, 12.0]
    best = xcoms[f"multinode_{batching}.leaderboard"]["return_value"]
    assert best["score"] == 12.0


def test_killing_a_multi_node_task_cancels_every_step_on_every_node(run_dag, slurm, monkeypatch):
    """execution_timeout kills the (blocking) task: its job is cancelled and no rank is left on either node."""
    from tests.slurm.test_multinode import processes_with

    from .conftest import jobs_named

    name, token = f"kill-multi-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    for key, value in (
        ("GPUSCHED_TEST_JOB_NAME", name),
        ("GPUSCHED_TEST_TIMEOUT", "15"),
        ("GPUSCHED_TEST_NODES", "2"),
        ("GPUSCHED_TEST_TOKEN", token),
    ):
        monkeypatch.setenv(key, value)
    state, _, _ = run_dag(dagfile("blocking_long_job"))
    assert state == "failed"
    ((job_id, _),) = jobs_named(slurm, name)
    final = slurm.wait(job_id, poll_interval=0.5, timeout=60)
    assert final.state == "CANCELLED" and final.nodes == "n[1-2]", final
    from pathlib import Path

    [output] = Path(os.environ["AIRFLOW__GPUSCHED__SLURM_OUTPUT_DIR"]).rglob(f"{job_id}.out")
    assert "[gpusched] srun start: 2 node(s) (n[1-2]) x 2 rank(s)" in output.read_text()  # the ranks had started
    wait_until(lambda: not processes_with(token), 30, "no rank of the job left on any node")


@pytest.mark.parametrize("shape", [{"nodes": 2}, {"constraint": "a100"}, {"exclusive": True}, {"nodelist": ["n1"]}])
def test_slurm_only_shape_on_the_local_backend_is_refused_naming_it(shape):
    import pendulum
    from airflow.sdk import DAG
    from airflow.sdk.exceptions import AirflowException

    from airflow_provider_gpusched.core.sweep import SweepSpec, TrialResources
    from airflow_provider_gpusched.task_groups.sweep import sweep_task_group

    spec = SweepSpec(
        name="local-shape", test_config=[{"x": [1]}], command=["echo", "{x}"], resources=TrialResources(**shape)
    )
    with (
        DAG(dag_id="t_local_shape", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")),
        pytest.raises(AirflowException) as err,
    ):
        sweep_task_group(spec, backend="local")
    name = next(iter(shape))
    assert f"resources.{name}=" in str(err.value) and "local backend cannot honour" in str(err.value)
    with DAG(dag_id="t_local_one_node", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")):
        sweep_task_group(
            SweepSpec(
                name="one-node",
                test_config=[{"x": [1]}],
                command=["echo", "{x}"],
                resources=TrialResources(nodes=1, distributed="torchrun"),
            ),
            backend="local",
        )
