"""`gpusched sweep run --backend slurm` / run_sweep(backend="slurm"): a sweep from a terminal as Slurm job arrays
on the project's two-node cluster, in the same results folder and with the same leaderboard."""

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slurm

WRITE = (
    "import json, os, sys; x = float(sys.argv[1]);"
    " json.dump(dict(y=1 - (x - 2) ** 2, job=os.environ['SLURM_ARRAY_JOB_ID'], host=os.uname().nodename),"
    " open('result.json', 'w'))"
)


def test_run_sweep_on_slurm_runs_every_trial_as_array_tasks_and_a_rerun_skips_them(client, tmp_path):
    from airflow_provider_gpusched import Objective, SweepSpec, TrialResources, run_sweep

    spec = SweepSpec(
        name="on_slurm",
        test_config=[{"x": [0, 1, 2, 3, 4]}],
        command=[sys.executable, "-c", WRITE, "{x}"],
        objective=Objective("y", "maximize"),
        resources=TrialResources(gpus=0, cpus=1, time_limit=5),
        max_workers=3,
    )
    summary = run_sweep(
        spec, backend="slurm", slurm=client, results_root=str(tmp_path), progress=False, poll_interval=0.5
    )
    assert summary["counts"]["succeeded"] == 5 and summary["best"]["score"] == 1.0
    records = json.loads((tmp_path / "on_slurm" / "summary.json").read_text())["records"]
    assert len({r["result"]["job"] for r in records}) == 1  # one job array
    assert {r["result"]["host"] for r in records} <= {"n1", "n2"}
    again = run_sweep(spec, backend="slurm", slurm=client, results_root=str(tmp_path), progress=False)
    assert again["counts"]["skipped"] == 5


def test_gpusched_sweep_run_backend_slurm_from_a_terminal(slurm_cluster, tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_text(
        json.dumps(
            {
                "name": "cli_slurm",
                "test_config": [{"x": [1, 2]}],
                "objective": "maximize y",
                "command": [sys.executable, "-c", WRITE, "{x}"],
                "resources": {"gpus": 0, "cpus": 1, "time_limit": 5},
            }
        )
    )
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "airflow_provider_gpusched.cli",
            "sweep",
            "run",
            str(spec),
            "--backend",
            "slurm",
            "--results-root",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "SLURM_CONF": slurm_cluster},
    )
    assert out.returncode == 0, out.stderr
    assert "x=2" in out.stdout and "succeeded" in out.stdout


def test_a_killed_terminal_run_leaves_its_arrays_and_the_next_run_re_attaches_instead_of_submitting_again(
    slurm_cluster, client, tmp_path
):
    """`gpusched sweep run --backend slurm` SIGKILLed while its job array runs (a closed laptop lid, an OOM-killed
    shell): the array goes on. The next run of the same trials finds that array by its key (core/slurm/
    submission.py) and follows it: one job in all, every trial once."""
    import signal
    import time
    import uuid

    name = f"reattach_{uuid.uuid4().hex[:6]}"
    gate = tmp_path / "gate"
    spec = tmp_path / "s.yaml"
    wait_then_write = (
        "import json, os, sys, time\n"
        f"while not os.path.exists({str(gate)!r}): time.sleep(0.2)\n"
        "x = float(sys.argv[1])\n"
        "json.dump(dict(y=x, job=os.environ['SLURM_ARRAY_JOB_ID']), open('result.json', 'w'))\n"
    )
    spec.write_text(
        json.dumps(
            {
                "name": name,
                "test_config": [{"x": [1, 2, 3]}],
                "objective": "maximize y",
                "command": [sys.executable, "-c", wait_then_write, "{x}"],
                "resources": {"gpus": 0, "cpus": 1, "time_limit": 5},
            }
        )
    )
    argv = [sys.executable, "-m", "airflow_provider_gpusched.cli", "sweep", "run", str(spec), "--backend", "slurm"]
    argv += ["--results-root", str(tmp_path), "--json"]
    env = {**os.environ, "SLURM_CONF": slurm_cluster}

    def jobs():
        out = client.runner.run(["squeue", "-h", "-t", "all", "-n", f"sweep.{name}", "-o", "%i|%T"], check=False)
        return sorted({line.split("|")[0].split("_")[0] for line in out.stdout.split()})

    first = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not jobs():
        time.sleep(0.3)
    (job,) = jobs()
    first.send_signal(signal.SIGKILL)  # no Ctrl-C handler runs: the array is left behind
    first.wait()
    said = tmp_path / "second.err"
    with open(said, "w") as err_file:
        second = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=err_file, text=True)
        following = f"Slurm job {job} of an earlier run does these trials; following it"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and following not in said.read_text() and second.poll() is None:
            time.sleep(0.2)
        gate.write_text("")  # the trials may end only once the second run follows them
        out, _ = second.communicate(timeout=240)
    assert second.returncode == 0, said.read_text()
    assert following in said.read_text()
    assert jobs() == [job]  # nothing submitted twice
    summary = json.loads(out)
    assert summary["best"]["score"] == 3.0
    records = json.loads((tmp_path / name / "summary.json").read_text())["records"]
    assert sorted((r["state"], r["result"]["job"]) for r in records) == [("succeeded", job)] * 3


ASYNC_TRAIN = (
    "import json, os, sys, time; p = json.loads(os.environ['GPUSCHED_TRIAL_PARAMS'])\n"
    "from airflow_provider_gpusched.trial import report\n"
    "for s in range(1, 4):\n"
    "    time.sleep(0.1); report(step=s, y=-(p['x'] - 1) ** 2 * (1 + 1 / s))\n"
    "json.dump(dict(y=-(p['x'] - 1) ** 2, job=os.environ['SLURM_ARRAY_JOB_ID'],"
    " task=os.environ['SLURM_ARRAY_TASK_ID'], host=os.uname().nodename), open('result.json', 'w'))"
)


def test_an_asynchronous_search_on_slurm_runs_as_one_array_of_workers_sharing_the_study(client, tmp_path):
    """asynchronous: true on Slurm: one job array of 2 worker tasks (on the cluster's nodes), each asking the study
    in the shared results folder for trials until 6 were run; each trial once, each told to the study."""
    optuna = pytest.importorskip("optuna")
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    from airflow_provider_gpusched import Objective, SweepSpec, TrialResources, run_sweep
    from airflow_provider_gpusched.core.sweep import uniform

    spec = SweepSpec(
        name="async_slurm",
        search="optuna",
        asynchronous=True,
        count=6,
        max_workers=2,
        seed=2,
        space={"x": uniform(-3, 3)},
        command=[sys.executable, "-c", ASYNC_TRAIN],
        objective=Objective("y", "maximize"),
        resources=TrialResources(gpus=0, cpus=1, time_limit=5),
    )
    summary = run_sweep(
        spec, backend="slurm", slurm=client, results_root=str(tmp_path), progress=False, poll_interval=0.5
    )
    assert summary["counts"]["succeeded"] == 6, summary["text"]
    records = json.loads((tmp_path / "async_slurm" / "summary.json").read_text())["records"]
    assert len({r["result"]["job"] for r in records}) == 1  # one job array: the workers
    assert {r["result"]["task"] for r in records} <= {"0", "1"}
    assert {r["result"]["host"] for r in records} <= {"n1", "n2"}
    journal = JournalFileBackend(str(tmp_path / "async_slurm" / "search" / "optuna.journal"))
    study = optuna.load_study(study_name="async_slurm", storage=JournalStorage(journal))
    assert sorted(t.user_attrs["trial_id"] for t in study.trials) == sorted(r["trial_id"] for r in records)
    assert all(t.state.name == "COMPLETE" and len(t.intermediate_values) == 3 for t in study.trials)
    assert {t.value for t in study.trials} == {r["result"]["y"] for r in records}


def test_pbt_on_slurm_runs_each_generation_as_an_array_and_the_exploiting_member_resumes_the_donors_checkpoint(
    client, tmp_path
):
    """search: pbt on Slurm: each generation of 4 members a job array on the cluster's nodes, on the shared results
    folder; the worst member's trial of generation 1 starts from the checkpoint the best one's left (copied into its
    own folder before the array was submitted), the others from their own."""
    from airflow_provider_gpusched import TrialResources, run_sweep
    from airflow_provider_gpusched.core.sweep.running.session import SweepSession
    from tests.core.test_pbt import spec as pbt_spec

    spec = pbt_spec(
        tmp_path,
        pbt={"population": 4, "perturbation_interval": 2, "steps": 4, "quantile_fraction": 0.25},
        resources=TrialResources(gpus=0, cpus=1, time_limit=5),
    )
    summary = run_sweep(
        spec, backend="slurm", slurm=client, results_root=str(tmp_path), progress=False, poll_interval=0.5
    )
    assert summary["counts"]["succeeded"] == 8, summary["text"]
    lineage = SweepSession(spec, str(tmp_path)).search.lineage()
    [exploit] = lineage["exploits"]
    results = {}
    for m in lineage["members"]:
        for entry in m:
            folder = tmp_path / "pbt" / "trials" / entry["folder"].rsplit("/", 1)[-1]
            results[(entry["member"], entry["generation"])] = json.loads((folder / "result.json").read_text())
    for k in range(4):
        source = (exploit["from_member"], 0) if k == exploit["member"] else (k, 0)
        assert results[(k, 1)]["start"] == results[source]["end"]  # went on from the checkpoint, on a compute node
        assert results[(k, 1)]["end"]["step"] == 4
