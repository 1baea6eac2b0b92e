"""OpenLineage events of gpusched's tasks, as the OpenLineage provider's file transport writes them (dag.test in
another process, with [openlineage] pointed at a file)."""

from __future__ import annotations

import json

import pytest

from .conftest import REPO, dag_test_process, process_result

pytestmark = [pytest.mark.airflow, pytest.mark.slurm]


def _events(path):
    found = []
    for name in sorted(path.parent.glob(path.name + "*")):  # one file, or one per event with a suffix
        for line in name.read_text().splitlines():
            if line.strip():
                found.append(json.loads(line))
    return found


def test_tasks_report_job_type_slurm_id_hyper_parameters_sweep_run_and_errors(airflow_db, slurm_cluster, tmp_path):
    events_file = tmp_path / "openlineage.json"
    env = {
        "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps(
            {"type": "file", "log_file_path": str(events_file), "append": True}
        ),
        "AIRFLOW__OPENLINEAGE__NAMESPACE": "gpusched-test",
    }
    proc = dag_test_process(REPO / "tests" / "airflow" / "dagfiles" / "t_lineage.py", "lineage_mixed", env)
    result = process_result(proc, "lineage_mixed", timeout=400)
    assert result["state"] == "failed"  # gpu_fails fails on purpose
    events = _events(events_file)
    assert events, "no OpenLineage event written"

    def of(task: str, event_type: str) -> list[dict]:
        return [e for e in events if e["eventType"] == event_type and e["job"]["name"].endswith(f".{task}")]

    seen = sorted({(e["eventType"], e["job"]["name"]) for e in events})
    for task in ("slurm_job", "gpu_ok"):
        assert len(of(task, "COMPLETE")) == 1, seen

    (slurm,) = of("slurm_job", "COMPLETE")
    assert slurm["job"]["facets"]["gpuschedJobType"]["integration"] == "GPUSCHED"
    assert slurm["job"]["facets"]["gpuschedJobType"]["jobType"] == "SLURM_JOB"
    query = slurm["run"]["facets"]["externalQuery"]
    assert query["externalQueryId"].isdigit() and query["source"].startswith("slurm://")
    run = slurm["run"]["facets"]["gpusched"]
    assert run["backend"] == "slurm" and run["request"]["partition"] == "batch" and run["placement"]["nodes"]

    (ok,) = of("gpu_ok", "COMPLETE")
    assert ok["job"]["facets"]["gpuschedJobType"]["jobType"] == "LOCAL_GPU"
    run = ok["run"]["facets"]["gpusched"]
    assert (run["backend"], run["jobClass"], run["priority"], run["attempts"]) == ("local_gpu", "idle", 7, 1)
    assert run["request"]["gpu_memory"] == 3 * 2**30 and run["placement"]["gpus"]
    assert (
        of("gpu_ok", "START") and of("gpu_ok", "START")[0]["job"]["facets"]["gpuschedJobType"]["jobType"] == "LOCAL_GPU"
    )

    (failed,) = of("gpu_fails", "FAIL")
    assert failed["run"]["facets"]["gpuschedFailure"] == {
        **failed["run"]["facets"]["gpuschedFailure"],
        "kind": "failed",
        "message": "exit code 3",
    }
    assert "errorMessage" in failed["run"]["facets"]  # the provider's own, from the exception

    trials = of("trial", "COMPLETE")
    assert len(trials) == 2 and {t["job"]["facets"]["gpuschedJobType"]["jobType"] for t in trials} == {
        "SWEEP_TRIAL_LOCAL_GPU"
    }
    facets = [t["run"]["facets"]["gpuschedTrial"] for t in trials]
    assert {f["sweep"] for f in facets} == {"lineage_grid"}
    assert all(f["sweepRun"]["dag_id"] == "lineage_mixed" and f["sweepRun"]["group"] == "lineage_grid" for f in facets)
    params = sorted(tr["params"]["lr"] for f in facets for tr in f["trials"])
    assert params == [0.001, 0.01]
    assert all(tr["state"] == "succeeded" and "acc" in tr["result"] for f in facets for tr in f["trials"])


def test_importing_the_operators_leaves_openlineage_unimported():
    """OpenLineage stays optional: the operators import it only when the provider asks for their facets."""
    import subprocess
    import sys

    code = (
        "import sys, airflow_provider_gpusched.operators.local_gpu, airflow_provider_gpusched.operators.slurm, "
        "airflow_provider_gpusched.task_groups.trial_operators; "
        "print(sorted(m for m in sys.modules if m.startswith('openlineage')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == "[]", out.stdout


def test_a_task_that_has_not_run_reports_its_request():
    from airflow_provider_gpusched.operators.local_gpu import LocalGPUOperator

    lineage = LocalGPUOperator(task_id="t", command=["true"], gpus=2).get_openlineage_facets_on_start()
    assert lineage.job_facets["gpuschedJobType"].jobType == "LOCAL_GPU"
    run = lineage.run_facets["gpusched"]
    assert (run.attempts, run.request["gpus"], run.placement) == (0, 2, {})


def test_a_trial_facet_is_capped_and_says_what_it_left_out():
    """Issue 53, item 6: a 200-trial array sent a 40 MB event. The facet keeps what fits in its cap and says the
    rest is left out; a trial too large on its own is listed without its parameters."""
    import json

    from openlineage.client.serde import Serde

    from airflow_provider_gpusched.lineage import MAX_TRIAL_FACET_BYTES, operator_lineage

    trials = [
        {
            "trial_id": f"t{i}",
            "label": f"lr={i}",
            "params": {"blob": "x" * 60_000, "lr": i},
            "state": "succeeded",
            "result": {"acc": 0.5},
        }
        for i in range(200)
    ]
    lineage = operator_lineage(job_type="TRIAL", trial={"sweep": "s", "sweepRun": {"dag_id": "d"}, "trials": trials})
    facet = json.loads(Serde.to_json(lineage.run_facets["gpuschedTrial"]))
    assert len(json.dumps(facet)) < MAX_TRIAL_FACET_BYTES + 4096
    assert (
        facet["trials"][0]["params"] == {} and facet["trials"][0].get("result") is None and len(facet["trials"]) == 200
    )
    assert facet["leftOut"].startswith("200 trial(s) listed without their parameters and result")
    assert facet["leftOut"].endswith("the sweep's results folder has every trial")
    many = operator_lineage(
        job_type="TRIAL",
        trial={"sweep": "s", "sweepRun": {}, "trials": [{**t, "params": {"blob": "y" * 20_000}} for t in trials]},
    )
    cut = json.loads(Serde.to_json(many.run_facets["gpuschedTrial"]))
    assert 0 < len(cut["trials"]) < 20 and f"{200 - len(cut['trials'])} of 200 trials left out" in cut["leftOut"]
    small = operator_lineage(
        job_type="TRIAL",
        trial={"sweep": "s", "sweepRun": {}, "trials": trials[:1] and [{**trials[0], "params": {"lr": 1}}]},
    )
    assert json.loads(Serde.to_json(small.run_facets["gpuschedTrial"]))["leftOut"] == ""
