"""Slurm operators, trigger, sensor and decorator in real DAGs run with dag.test() against real Slurm."""

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from airflow_provider_gpusched.core.slurm import JobPhase, SlurmJobSpec, SlurmTransport
from airflow_provider_gpusched.core.slurm.job import job_comment, task_key

from .conftest import REPO, jobs_named, the_dag


def dagfile(name):
    return the_dag(REPO / "tests" / "airflow" / "dagfiles" / f"{name}.py")


pytestmark = [pytest.mark.airflow, pytest.mark.slurm]


def test_example_command_dag(run_dag):
    dag = the_dag(REPO / "dags" / "slurm_command.py")
    state, xcoms, states = run_dag(dag)
    assert state == "success", states
    train = xcoms["train"]["return_value"]
    assert train["state"] == "COMPLETED" and train["exit_code"] == 0
    assert xcoms["train"]["slurm_job_id"] == train["job_id"]
    text = Path(train["output_path"]).read_text()
    assert "args ['--lr', '3e-4', '--note', 'a b; c']" in text  # verbatim through Airflow and sbatch
    assert len(text.split("GPUs ")[1].strip().split(",")) == 2
    report = Path(xcoms["report"]["return_value"]["output_path"]).read_text()
    assert f"train output was {train['output_path']}" in report  # templated from the upstream XCom


def test_example_array_dag(run_dag):
    dag = the_dag(REPO / "dags" / "slurm_array.py")
    state, xcoms, _ = run_dag(dag)
    assert state == "success"
    result = xcoms["seeds"]["return_value"]
    assert len(result["array_tasks"]) == 4
    assert {t["state"] for t in result["array_tasks"].values()} == {"COMPLETED"}


def test_example_python_dag(run_dag):
    dag = the_dag(REPO / "dags" / "slurm_python.py")
    state, xcoms, states = run_dag(dag)
    assert state == "success", states
    scores = {
        tuple(v["return_value"]["subnet"]): v["return_value"]["score"]
        for k, v in xcoms.items()
        if isinstance(k, tuple) and k[0] == "evaluate"
    }
    assert scores == {(1, 2, 3): 4.6667, (3, 2, 1): 3.3333, (2, 2, 2): 4.0}
    assert xcoms["best"]["return_value"]["subnet"] == [1, 2, 3]
    assert all(v["return_value"]["gpus"] is not None for k, v in xcoms.items() if isinstance(k, tuple))


def test_failed_job_fails_the_task_with_exit_code_and_output(run_dag, capfd):
    state, xcoms, states = run_dag(dagfile("t_fail"))
    assert state == "failed"
    assert states["fails"][0] == "failed"
    logged = capfd.readouterr()
    text = logged.out + logged.err
    assert "exit code 3" in text
    assert "CUDA error: boom" in text and "loading data" in text


def test_python_exception_surfaces_with_traceback(run_dag, capfd):
    state, _, _ = run_dag(dagfile("t_pyexc"))
    assert state == "failed"
    text = "".join(capfd.readouterr())
    assert "ValueError: bad value 7" in text
    assert "inner_helper" in text  # the remote traceback, not just the message


def test_retry_reattaches_instead_of_resubmitting(run_dag, slurm, monkeypatch):
    name = f"reattach-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("GPUSCHED_TEST_JOB_NAME", name)
    state, xcoms, states = run_dag(dagfile("t_reattach"))
    assert state == "success", states
    assert states["job"] == ("success", 2)
    jobs = jobs_named(slurm, name)
    assert len(jobs) == 1, f"expected one Slurm job for two tries, got {jobs}"
    assert xcoms["job"]["return_value"]["job_id"] == jobs[0][0]


def test_sensor_waits_for_an_existing_job_deferrable_and_poking(run_dag, slurm, tmp_path, monkeypatch):
    ok = slurm.submit(SlurmJobSpec(command="sleep 2", output=str(tmp_path / "s-%j.out"))).job_id
    bad = slurm.submit(SlurmJobSpec(command="sleep 1; exit 5", output=str(tmp_path / "s-%j.out"))).job_id
    monkeypatch.setenv("GPUSCHED_TEST_OK_JOB", ok)
    monkeypatch.setenv("GPUSCHED_TEST_BAD_JOB", bad)
    state, xcoms, states = run_dag(dagfile("t_sensor"))
    assert states["deferred_ok"][0] == "success" and states["poke_ok"][0] == "success"
    assert xcoms["deferred_ok"]["return_value"]["state"] == "COMPLETED"
    assert states["deferred_bad"][0] == "failed"
    assert state == "failed"


def test_trigger_on_kill_cancels_the_job(slurm, slurm_cluster, tmp_path):
    from airflow_provider_gpusched.triggers.slurm import SlurmJobTrigger  # here: see tests/airflow/test_triggers.py

    job = slurm.submit(SlurmJobSpec(command="sleep 300", output=str(tmp_path / "k-%j.out"))).job_id
    trigger = SlurmJobTrigger(job_id=job, runner=SlurmTransport(slurm_conf=slurm_cluster).describe(), poll_interval=0.5)

    async def main():
        run = asyncio.create_task(anext(trigger.run()))
        await asyncio.sleep(2)
        run.cancel()  # what the triggerer does when the user marks the task failed...
        await trigger.on_kill()  # ...followed by on_kill

    asyncio.run(main())
    assert slurm.wait(job, poll_interval=0.5, timeout=60).phase is JobPhase.CANCELLED


def test_trigger_round_trips_through_serialize():
    from airflow_provider_gpusched.triggers.slurm import SlurmJobTrigger

    trigger = SlurmJobTrigger(
        job_id="12",
        runner={"slurm_conf": "/x", "timeout": 60.0},
        poll_interval=3,
        array_size=4,
        output_path="/o/%a.out",
        chain=True,
    )
    path, kwargs = trigger.serialize()
    assert kwargs["chain"] is True
    assert path == "airflow_provider_gpusched.triggers.slurm.SlurmJobTrigger"
    assert SlurmJobTrigger(**kwargs).serialize() == (path, kwargs)


def test_execution_timeout_kills_the_blocking_task_and_cancels_the_job(run_dag, slurm, monkeypatch):
    name = f"timeout-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("GPUSCHED_TEST_JOB_NAME", name)
    monkeypatch.setenv("GPUSCHED_TEST_TIMEOUT", "6")
    state, _, _ = run_dag(dagfile("blocking_long_job"))
    assert state == "failed"
    ((job_id, job_state),) = jobs_named(slurm, name)
    assert slurm.wait(job_id, poll_interval=0.5, timeout=60).phase is JobPhase.CANCELLED


def test_sigterm_to_the_task_process_cancels_the_job(airflow_db, slurm, slurm_cluster):
    name = f"sigterm-{uuid.uuid4().hex[:8]}"
    dag_file = str(REPO / "tests" / "airflow" / "dagfiles" / "blocking_long_job.py")
    code = (
        f"import sys; sys.path.insert(0, {str(REPO)!r}); from tests.airflow.conftest import the_dag; "
        f"from pathlib import Path; the_dag(Path({dag_file!r})).test()"
    )
    env = {**os.environ, "GPUSCHED_TEST_JOB_NAME": name, "SLURM_CONF": slurm_cluster}
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not any(s == "RUNNING" for _, s in jobs_named(slurm, name)):
            time.sleep(0.5)
        ((job_id, job_state),) = jobs_named(slurm, name)
        assert job_state == "RUNNING"
        proc.send_signal(signal.SIGTERM)
        assert slurm.wait(job_id, poll_interval=0.5, timeout=60).phase is JobPhase.CANCELLED
    finally:
        proc.kill()
        proc.wait()


def test_key_for_reattach_covers_map_index_not_try():
    assert (
        job_comment(task_key("d", "r", "t", 3), 1).rsplit(":", 1)[0]
        == job_comment(task_key("d", "r", "t", 3), 2).rsplit(":", 1)[0]
    )


def test_job_through_an_ssh_login_host_connection(run_dag, login_host, slurm_cluster, monkeypatch):
    import json

    port, options = login_host
    monkeypatch.setenv(
        "AIRFLOW_CONN_SLURM_SSH",
        json.dumps(
            {
                "conn_type": "slurm",
                "host": "127.0.0.1",
                "login": "root",
                "port": port,
                "extra": {
                    "ssh_options": " ".join(options),
                    "slurm_conf": slurm_cluster,
                    "partition": "batch",
                    "sbatch_options": "--nice=5",
                },
            }
        ),
    )
    state, xcoms, states = run_dag(dagfile("t_ssh"))
    assert state == "success", states
    result = xcoms["remote"]["return_value"]
    assert result["partition"] == "batch"
    assert Path(result["output_path"]).read_text().strip() == "['a b', 'x;y', \"it's\"]"


def test_jobs_through_a_slurmrestd_connection(run_dag, slurm_rest, monkeypatch):
    """A connection whose host is slurmrestd's URL and whose password is the JWT: the deferred command job (the
    trigger looks the token up again: it carries none) and a @task.slurm function, through the REST API only."""
    import json

    from airflow_provider_gpusched.hooks.slurm import SlurmHook

    conn = {
        "conn_type": "slurm",
        "host": slurm_rest["rest_url"],
        "login": slurm_rest["user"],
        "password": slurm_rest["token"],
        "extra": {"job_environment": slurm_rest["environment"], "partition": "batch", "sbatch_options": "--nice=5"},
    }
    monkeypatch.setenv("AIRFLOW_CONN_SLURM_REST", json.dumps(conn))
    hook = SlurmHook("slurm_rest")
    ok, message = hook.test_connection()
    assert ok and message.startswith(f"slurmrestd {slurm_rest['rest_url']} (Slurm 22.05"), message
    assert "token" not in hook.runner_description and slurm_rest["token"] not in json.dumps(hook.runner_description)
    state, xcoms, states = run_dag(dagfile("t_rest"))
    assert state == "success", states
    result = xcoms["remote"]["return_value"]
    assert result["partition"] == "batch"
    assert Path(result["output_path"]).read_text().strip() == "['a b', 'x;y', \"it's\"]"
    assert xcoms["add"]["return_value"]["sum"] == 5 and xcoms["add"]["return_value"]["node"] in ("n1", "n2")
    assert hook.get_conn().runner.calls["POST job/submit"] == 0  # the tasks made their own clients
    monkeypatch.setenv("AIRFLOW_CONN_SLURM_REST", json.dumps({**conn, "password": "not-a-jwt"}))
    ok, message = SlurmHook("slurm_rest").test_connection()
    assert not ok and "the token is not a JWT" in message and "not-a-jwt" not in message


def test_bad_operator_arguments_fail_at_parse_time_naming_task_and_argument():
    from airflow.sdk.exceptions import AirflowException

    from airflow_provider_gpusched.operators.slurm import SlurmJobOperator

    with pytest.raises(AirflowException, match=r"^train: mem: expected"):
        SlurmJobOperator(task_id="train", command=["python", "t.py"], mem="lots")
    with pytest.raises(AirflowException, match=r"^train: sbatch_args"):
        SlurmJobOperator(task_id="train", command=["python", "t.py"], sbatch_args=["exclusive"])


def test_pipeline_partition_example_on_slurm_one_job_every_stage_a_step(run_dag, slurm):
    """The seed's example (hosts that are not Slurm nodes): the pipeline is one job, its 8 stages all steps on the
    job's node, each told its layers and its neighbours there."""
    from .conftest import load_dag_file

    dag = load_dag_file(REPO / "dags" / "pipeline_partition.py").pipeline_partition_slurm_dag
    state, xcoms, states = run_dag(dag)
    assert state == "success", states
    stages = xcoms["partition"]["return_value"]["stages"]
    result = xcoms[("pipeline", 0)]["return_value"]
    output = Path(result["output_path"]).read_text()
    node = next(n for n in ("n1", "n2") if f"[stage 1 on {n}]" in output)
    for i, stage in enumerate(stages):
        first, last = stage["layers"]
        prev = f"{node}:{29700 + i - 1}" if i else "-"
        following = f"{node}:{29700 + i + 1}" if i + 1 < len(stages) else "-"
        assert (
            f"[stage {i + 1} on {node}] stage {i + 1} of 8 for host {stage['host']}: layers {first}..{last} on {node} "
        ) in output and f"previous {prev}, next {following}" in output, output
    assert len(stages) == 8 and "gpusched stages: all 8 stages finished" in output


def test_pipeline_profiled_partitioned_and_run_with_every_stage_on_its_node(run_dag, slurm, tmp_path):
    """The whole path: `gpusched profile` measures a real model (tiny-vit) as two device types, one host each,
    the hosts being the cluster's nodes; the DAG partitions it and runs the pipeline runtime with each stage a
    step on the node the partitioner chose; activations stream from stage to stage over TCP, and the last
    stage's outputs equal the whole model's run in one process."""
    import json

    from airflow_provider_gpusched.examples.pipeline_stage import reference_output

    from .conftest import load_dag_file

    pytest.importorskip("torch")
    for device_type, bandwidth in (("cpu-a", "1000"), ("cpu-b", "800")):
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "airflow_provider_gpusched.cli",
                "profile",
                "tiny-vit",
                "--device-type",
                device_type,
                "--bw-mbps",
                bandwidth,
                "--mem-mb",
                "12",
                "--repeat",
                "3",
            ],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert out.returncode == 0, out.stderr
    (tmp_path / "devices.yml").write_text("cpu-a: [n1]\ncpu-b: [n2]\n")
    dag = load_dag_file(REPO / "dags" / "pipeline_partition.py").pipeline_partition_slurm_dag
    state, xcoms, states = run_dag(
        dag,
        run_conf={
            "inputs": str(tmp_path),
            "model": "tiny-vit",
            "runtime_model": "tiny-vit",
            "microbatches": 6,
            "pin_hosts": True,
            "base_port": 29750,
        },
    )
    assert state == "success", states
    stages = xcoms["partition"]["return_value"]["stages"]
    assert sorted(s["host"] for s in stages) == ["n1", "n2"]  # 12 MiB holds about half of the model
    output = Path(xcoms[("pipeline", 0)]["return_value"]["output_path"]).read_text()
    for i, stage in enumerate(stages):
        first, last = stage["layers"]
        host = stage["host"]
        assert f"[stage {i + 1} on {host}] stage {i + 1} of 2: layers {first}-{last} of 8 on {host} (cpu)" in output, (
            output
        )
        assert f"[stage {i + 1} on {host}] stage {i + 1}: 6 micro-batches through layers {first}-{last}" in output
    other = stages[0]["host"]
    assert f"[stage 2 on {stages[1]['host']}] stage 2: the previous stage connected from" in output
    line = next(ln for ln in output.splitlines() if "pipeline output: " in ln)
    got = json.loads(line.split("pipeline output: ", 1)[1])
    want = reference_output("tiny-vit", microbatches=6)
    assert got["microbatches"] == 6 and got["node"] == stages[1]["host"] != other
    assert got["sum"] == pytest.approx(want["sum"], rel=1e-9, abs=1e-9)
    assert got["first_row"] == pytest.approx(want["first_row"], rel=1e-6)
