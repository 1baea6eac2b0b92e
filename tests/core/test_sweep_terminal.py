"""Sweeps without Airflow (core/sweep/running/terminal.py, ``gpusched sweep run``): real trial processes on SIMULATED GPU
leases, the same results folder, status table and leaderboard, resumable after Ctrl-C."""

import io
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from airflow_provider_gpusched.core.gpu.inventory import SimulatedInventory
from airflow_provider_gpusched.core.gpu.leases import LeaseManager
from tests.cli import gpusched

WRITE = (
    "import json, os, sys, time; x = float(sys.argv[2]);"
    " time.sleep(60 if os.environ.get('SLOW') == '1' and x >= 1 else 0);"
    " json.dump({'y': 1 - (x - 1.5) ** 2}, open(os.path.join(sys.argv[1], 'result.json'), 'w'))"
)


def spec_yaml(tmp_path, name="terminal", xs=(0, 1, 2, 3)) -> str:
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        textwrap.dedent(f"""
        name: {name}
        test_config: [{{x: {list(xs)}}}]
        command: [{sys.executable}, -c, "{WRITE}", "{{trial_dir}}", "{{x}}"]
        objective: {{metric: y, mode: maximize}}
        resources: {{gpu_memory: 1GiB}}
    """)
    )
    return str(path)


@pytest.fixture
def manager(tmp_path):
    state = tmp_path / "leases"
    state.mkdir(mode=0o700)
    return LeaseManager(SimulatedInventory("2x24GiB"), str(state))


@pytest.mark.heavy  # 0.8 s of CPU in the fast tier's run of 2026-12-07 (docs/development.md Tiers)
def test_run_sweep_runs_every_trial_ranks_them_and_a_second_run_skips_them(tmp_path, manager):
    from airflow_provider_gpusched import run_sweep

    out = io.StringIO()
    summary = run_sweep(spec_yaml(tmp_path), results_root=str(tmp_path / "sweeps"), manager=manager, progress=out)
    assert summary["counts"]["succeeded"] == 4 and summary["counts"]["failed"] == 0
    assert [r["label"] for r in summary["leaderboard"][:2]] in (["x=1", "x=2"], ["x=2", "x=1"])
    assert summary["best"]["score"] == pytest.approx(0.75)
    assert "| rank" in summary["text"] or "rank" in summary["text"]
    lines = out.getvalue().splitlines()
    assert lines[-1].startswith("[########################] 4/4 done, 0 running, 0 failed, best so far y 0.75")
    folder = tmp_path / "sweeps" / "terminal"
    assert json.loads((folder / "best.json").read_text())["score"] == pytest.approx(0.75)
    ended = {p: json.loads(p.read_text())["ended"] for p in folder.glob("trials/*/status.json")}
    again = run_sweep(spec_yaml(tmp_path), results_root=str(tmp_path / "sweeps"), manager=manager, progress=False)
    assert again["counts"]["skipped"] == 4 and again["counts"]["succeeded"] == 4
    assert {p: json.loads(p.read_text())["ended"] for p in folder.glob("trials/*/status.json")} == ended  # not re-run
    assert manager.leases() == []


def test_a_setting_the_host_cannot_honour_is_refused_before_anything_runs(tmp_path, manager):
    from airflow_provider_gpusched import SweepSpec, TrialResources, run_sweep
    from airflow_provider_gpusched.core.errors import GpuschedError

    spec = SweepSpec(name="s", test_config=[{"x": [1]}], command=["true"], resources=TrialResources(partition="gpu"))
    with pytest.raises(GpuschedError, match="resources.partition='gpu': a Slurm partition is not something the local"):
        run_sweep(spec, results_root=str(tmp_path), manager=manager, progress=False)
    assert not (tmp_path / "s").exists()


def _cli(*args, env=None):
    return subprocess.Popen(
        [sys.executable, "-m", "airflow_provider_gpusched.cli", "sweep", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )


@pytest.mark.heavy  # 1.8 s of CPU in the fast tier's run of 2026-12-07 (docs/development.md Tiers)
def test_gpusched_sweep_run_stops_on_ctrl_c_and_the_next_run_goes_on_with_the_rest(tmp_path):
    spec = spec_yaml(tmp_path, "resumable", xs=(0, 1, 2))
    (tmp_path / "leases").mkdir(mode=0o700)
    common = [
        "--results-root",
        str(tmp_path / "sweeps"),
        "--simulate",
        "1x24GiB",
        "--state-dir",
        str(tmp_path / "leases"),
        "--parallel",
        "1",
    ]
    first = _cli("run", spec, *common, env={"SLOW": "1"})  # x=0 is quick; x=1 waits until it is stopped
    folder = tmp_path / "sweeps" / "resumable" / "trials"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        states = (
            {p.parent.name.split(".")[0]: json.loads(p.read_text()).get("state") for p in folder.glob("*/status.json")}
            if folder.exists()
            else {}
        )
        if states.get("x=1") == "running":
            break
        time.sleep(0.1)
    else:
        first.kill()
        pytest.fail(f"trial x=1 never ran: {first.communicate()}")
    first.send_signal(signal.SIGINT)
    out, err = first.communicate(timeout=60)
    assert first.returncode == 130, (out, err)
    assert "stopped; the trials that finished are kept" in err
    # issue 53, item 17: the stopped trial is recorded as stopped, not left running until the next run
    status = json.loads(next(folder.glob("x=1*/status.json")).read_text() or "{}")
    assert status["state"] == "stopped" and "Ctrl-C" in status.get("reason", status.get("error", "")), status
    listed = json.loads(gpusched("sweep", "results", str(tmp_path / "sweeps" / "resumable"), "--json").stdout)
    assert listed["counts"].get("running", 0) == 0 and listed["counts"]["stopped"] == 1, listed["counts"]
    second = _cli("run", spec, *common)
    out, err = second.communicate(timeout=120)
    assert second.returncode == 0, (out, err)
    data = json.loads(gpusched("sweep", "results", str(tmp_path / "sweeps" / "resumable"), "--json").stdout)
    assert data["counts"]["succeeded"] == 3
    preview = gpusched("sweep", "preview", spec, "--results-root", str(tmp_path / "sweeps"), "--json")
    rows = json.loads(preview.stdout)["table"]
    assert [r["state"] for r in rows] == ["succeeded"] * 3


@pytest.mark.heavy  # 0.7 s of CPU in the fast tier's run of 2026-12-07 (docs/development.md Tiers)
def test_a_relative_script_is_found_next_to_the_spec_and_a_missing_one_is_explained(tmp_path, manager):
    from airflow_provider_gpusched import run_sweep

    project = tmp_path / "project"
    (project / "scripts").mkdir(parents=True)
    (project / "scripts" / "train.py").write_text(
        "import json, os, sys\njson.dump({'y': float(sys.argv[1])}, open('result.json', 'w'))\n"
    )
    (project / "sweep.yaml").write_text(
        textwrap.dedent(f"""
        name: relative
        test_config: [{{x: [1, 2]}}]
        command: [{sys.executable}, scripts/train.py, "{{x}}"]
        objective: {{metric: y, mode: maximize}}
    """)
    )
    summary = run_sweep(
        str(project / "sweep.yaml"), results_root=str(tmp_path / "sweeps"), manager=manager, progress=False
    )  # run from anywhere: the path is the spec's
    assert summary["counts"]["succeeded"] == 2 and summary["best"]["score"] == 2.0
    (project / "missing.yaml").write_text(
        (project / "sweep.yaml").read_text().replace("relative", "missing").replace("scripts/train.py", "train.py")
    )
    summary = run_sweep(
        str(project / "missing.yaml"), results_root=str(tmp_path / "sweeps"), manager=manager, progress=False
    )
    (problem, *_) = summary["problems"]
    assert "command[1] 'train.py' is a relative path: the trial ran in its own folder" in problem["error"]
    assert f"nor in the spec's directory {project}" in problem["error"]


def test_a_python_spec_finds_a_relative_script_next_to_the_module_that_defines_it(tmp_path, manager):
    """``package.module:ATTR``: relative paths of the command are the module's folder's, wherever the command runs
    (and a spec that names its base_dir keeps it)."""
    from airflow_provider_gpusched import run_sweep

    project = tmp_path / "project"
    (project / "scripts").mkdir(parents=True)
    (project / "scripts" / "train.py").write_text(
        "import json, sys\njson.dump({'y': float(sys.argv[1])}, open('result.json', 'w'))\n"
    )
    (project / "anchored_specs.py").write_text(
        textwrap.dedent(f"""
        import sys
        from airflow_provider_gpusched import SweepSpec

        SPEC = SweepSpec(name="anchored", test_config=[{{"x": [1, 2]}}], objective={{"metric": "y", "mode": "maximize"}},
                         command=[sys.executable, "scripts/train.py", "{{x}}"])
        ELSEWHERE = SweepSpec(name="elsewhere", test_config=[{{"x": [1]}}], base_dir={str(tmp_path)!r},
                              command=[sys.executable, "scripts/train.py", "{{x}}"])
    """)
    )
    sys.path.insert(0, str(project))
    try:
        summary = run_sweep(
            "anchored_specs:SPEC", results_root=str(tmp_path / "sweeps"), manager=manager, progress=False
        )
        assert summary["counts"]["succeeded"] == 2 and summary["best"]["score"] == 2.0
        from anchored_specs import ELSEWHERE, SPEC

        assert SPEC.base_dir == str(project) and SPEC.command[1] == str(project / "scripts" / "train.py")
        assert ELSEWHERE.base_dir == str(tmp_path) and ELSEWHERE.command[1] == "scripts/train.py"  # not there
    finally:
        sys.path.remove(str(project))
        sys.modules.pop("anchored_specs", None)


@pytest.mark.heavy  # 1.7 s of CPU in the fast tier's run of 2026-12-07 (docs/development.md Tiers)
def test_gpu_task_scheduler_gpu_groups_each_trial_takes_one_whole_group(tmp_path):
    """GPU Task Scheduler's own words: ``[["0", "1"], ["2", "3"]]`` "means each test may require two GPUs, and the
    scheduler will distribute tasks among the two two-GPU pairs in parallel"; mixed lists too."""
    from airflow_provider_gpusched import run_sweep

    state = tmp_path / "leases"
    state.mkdir(mode=0o700)
    manager = LeaseManager(SimulatedInventory("4x24GiB"), str(state))
    cvd = (
        "import json, os, sys, time; time.sleep(0.5);"
        " json.dump({'y': 1, 'cvd': os.environ['CUDA_VISIBLE_DEVICES']}, open('result.json', 'w'))"
    )
    for name, gpu, groups in (
        ("pairs", '[["0", "1"], ["2", "3"]]', {"0,1", "2,3"}),
        ("mixed", '["0", ["1", "2"]]', {"0", "1,2"}),
    ):
        (tmp_path / f"{name}.yaml").write_text(
            textwrap.dedent(f"""
            name: {name}
            scheduler_config: {{gpu: {gpu}}}
            global_config: {{num_run: 5}}
            test_config: [{{method: [GAN, ALI, WGAN, WGAN-GP]}}]
            command: [{sys.executable}, -c, "{cvd}"]
            objective: {{metric: y}}
        """)
        )
        summary = run_sweep(
            str(tmp_path / f"{name}.yaml"), results_root=str(tmp_path / "sweeps"), manager=manager, progress=False
        )
        assert summary["counts"]["succeeded"] == 4
        records = json.loads((tmp_path / "sweeps" / name / "summary.json").read_text())["records"]
        assert {r["result"]["cvd"] for r in records} == groups  # a whole group each, and both groups used


@pytest.mark.heavy  # 1.3 s of CPU in the fast tier's run of 2026-12-07 (docs/development.md Tiers)
def test_di_toolkit_max_workers_caps_the_trials_running_at_once(tmp_path):
    """DI-toolkit's ``.max_workers(4)``: here 2 on a host where 4 trials would fit."""
    from airflow_provider_gpusched import SweepSpec, run_sweep
    from airflow_provider_gpusched.core.sweep.parts.resources import TrialResources

    state = tmp_path / "leases"
    state.mkdir(mode=0o700)
    manager = LeaseManager(SimulatedInventory("4x24GiB"), str(state))
    # each trial says it started, waits until a second one has (so two always overlap), then works 0.5 s
    marks = tmp_path / "marks"
    marks.mkdir()
    stamp = (
        "import glob, json, os, sys, time; a = time.time(); open(os.path.join(sys.argv[1], sys.argv[2]), 'w').close();"
        " [time.sleep(0.05) for _ in range(400) if len(glob.glob(os.path.join(sys.argv[1], '*'))) < 2];"
        " time.sleep(0.5); json.dump({'y': 1, 'start': a, 'end': time.time()}, open('result.json', 'w'))"
    )
    spec = SweepSpec(
        name="capped",
        test_config=[{"x": [1, 2, 3, 4, 5, 6]}],
        command=[sys.executable, "-c", stamp, str(marks), "{x}"],
        max_workers=2,
        resources=TrialResources(gpu_memory="1GiB"),
    )
    run_sweep(spec, results_root=str(tmp_path / "sweeps"), manager=manager, progress=False)
    spans = [
        (r["result"]["start"], r["result"]["end"])
        for r in json.loads((tmp_path / "sweeps" / "capped" / "summary.json").read_text())["records"]
    ]
    most = max(sum(1 for s, e in spans if s <= t < e) for t, _ in spans)
    assert most == 2  # never more than max_workers at once, and it did use both


@pytest.mark.heavy  # 0.6 s of CPU in the fast tier's run of 2026-12-07 (docs/development.md Tiers)
def test_gpu_task_scheduler_required_env_and_matplotlib_agg_reach_each_trial(tmp_path, manager):
    """GPUTask.required_env(): "extra environment variable settings ... called before the test starts running";
    and "the scheduler will automatically set matplotlib's backend to Agg"."""
    from airflow_provider_gpusched import SweepSpec, run_sweep
    from airflow_provider_gpusched.core.sweep.parts.resources import TrialResources

    def required_env(params, trial_dir):  # as GPUTask.required_env, with its _config and _work_dir
        return {"OMP_NUM_THREADS": params["num_run"], "GAN_OUT": os.path.join(trial_dir, "out")}

    show = (
        "import json, os; json.dump({'y': 1, 'env': [os.environ.get(k) for k in "
        "('OMP_NUM_THREADS', 'GAN_OUT', 'MPLBACKEND')]}, open('result.json', 'w'))"
    )
    spec = SweepSpec(
        name="gts_env",
        global_config={"num_run": 5},
        test_config=[{"method": ["GAN", "ALI"]}],
        command=[sys.executable, "-c", show],
        required_env=required_env,
        resources=TrialResources(gpu_memory="1GiB"),
    )
    run_sweep(spec, results_root=str(tmp_path / "sweeps"), manager=manager, progress=False)
    for r in json.loads((tmp_path / "sweeps" / "gts_env" / "summary.json").read_text())["records"]:
        assert r["result"]["env"] == ["5", os.path.join(r["folder"], "out"), "Agg"]

    def broken(params, trial_dir):
        return {"NOT A NAME": "x"}

    bad = SweepSpec(
        name="gts_bad_env",
        test_config=[{"x": [1]}],
        command=["true"],
        required_env=broken,
        resources=TrialResources(gpu_memory="1GiB"),
    )
    summary = run_sweep(bad, results_root=str(tmp_path / "sweeps"), manager=manager, progress=False)
    assert (
        summary["problems"][0]["error"] == "required_env: ValueError: 'NOT A NAME' is not an environment variable name"
    )


@pytest.mark.heavy  # 0.5 s of CPU in the fast tier's run of 2026-12-07 (docs/development.md Tiers)
def test_gpu_task_schedulers_existing_result_folders_are_not_run_again(tmp_path, manager):
    """ "If force_rerun=False, when the result folder exists, the scheduler will skip the test instance": a folder
    GPU Task Scheduler left under result_root_folder, in its naming, counts as done."""
    from airflow_provider_gpusched import run_sweep

    results = tmp_path / "results"
    (results / "method-GAN,num_packing-1,num_zmode-1").mkdir(parents=True)  # from an earlier GTS run
    (tmp_path / "gts.yaml").write_text(
        textwrap.dedent(f"""
        name: gan
        scheduler_config: {{gpu: ["0", "1"], result_root_folder: {results}}}
        global_config: {{num_run: 5, num_epoch: 200}}
        test_config:
          - {{method: [GAN, ALI], num_packing: [1], num_zmode: [1]}}
          - {{method: [WGAN], num_packing: [3], num_zmode: [1, 2]}}
        command: [{sys.executable}, -c, "import json; json.dump(dict(score=1), open('result.json', 'w'))"]
        objective: {{metric: score}}
    """)
    )
    summary = run_sweep(str(tmp_path / "gts.yaml"), manager=manager, progress=False)
    assert summary["counts"]["succeeded"] == 4
    records = {r["label"]: r for r in json.loads((results / "gan" / "summary.json").read_text())["records"]}
    gan = records["method-GAN,num_packing-1,num_zmode-1"]
    assert gan["result"] is None and not os.path.exists(os.path.join(gan["folder"], "output.log"))  # not run
    status = json.loads(Path(os.path.join(gan["folder"], "status.json")).read_text())
    assert "finished by GPU Task Scheduler" in status["note"]
    assert all(records[k]["result"] == {"score": 1} for k in records if k != gan["label"])


@pytest.mark.heavy  # 1.3 s of CPU in the fast tier's run of 2026-12-07 (docs/development.md Tiers)
def test_an_adaptive_sweep_shows_its_round_and_the_sweeps_best_so_far_and_says_when_rounds_must_be_raised(
    tmp_path, manager
):
    """Issue 52: the progress line gave each round's best with no round number; re-running a finished Optuna
    sweep proposed nothing without saying why."""
    from airflow_provider_gpusched import run_sweep

    path = tmp_path / "adaptive.yaml"
    path.write_text(
        textwrap.dedent(f"""
        name: adaptive
        search: optuna
        rounds: 2
        per_round: 3
        seed: 1
        space: {{x: {{uniform: [0, 3]}}}}
        command: [{sys.executable}, -c, "{WRITE}", "{{trial_dir}}", "{{x}}"]
        objective: {{metric: y, mode: maximize}}
        resources: {{gpu_memory: 1GiB}}
    """)
    )
    out = io.StringIO()
    summary = run_sweep(str(path), results_root=str(tmp_path / "sweeps"), manager=manager, progress=out)
    lines = out.getvalue().splitlines()
    assert any(line.startswith("round 1/2 [") for line in lines) and lines[-1].startswith("round 2/2 [")
    best = summary["best"]["score"]
    assert lines[-1].endswith(f"best so far y {best:.6g}")  # the sweep's best, whichever round found it
    assert "note" not in summary
    again = run_sweep(str(path), results_root=str(tmp_path / "sweeps"), manager=manager, progress=False)
    assert again["note"] == (
        "sweep adaptive: all 2 round(s) were run by earlier runs (6 trials, none new); raise "
        "rounds (now 2) to search further, or force_rerun to evaluate them again"
    )
    assert again["text"].startswith(again["note"])


@pytest.mark.heavy  # 0.7 s of CPU in the fast tier's run of 2026-12-07 (docs/development.md Tiers)
def test_sweep_run_makes_a_missing_state_dir_and_results_lists_the_failed_trials(tmp_path):
    """Issue 76: ``gpusched sweep run --state-dir DIR`` refused a folder that did not exist yet (the run makes it,
    private to the user); ``gpusched sweep results`` showed no error lines where every other view does."""
    spec = tmp_path / "fails.yaml"
    spec.write_text(
        "name: fails\ntest_config: [{x: [0, 1, 2]}]\n"
        f'command: [{sys.executable}, -c, \'import sys; sys.exit("no such dataset: x=" + sys.argv[1]) '
        "if sys.argv[1] == \"1\" else None', '{x}']\n"
    )
    leases = tmp_path / "not-yet" / "leases"
    done = gpusched(
        "sweep", "run", str(spec), "--results-root", str(tmp_path / "sweeps"), "--simulate", "1x24GiB",
        "--state-dir", str(leases),
    )  # fmt: skip
    assert done.returncode == 1 and "does not exist" not in done.stderr, (done.stdout, done.stderr)
    assert leases.is_dir() and (leases.stat().st_mode & 0o077) == 0  # made, private
    shown = gpusched("sweep", "results", str(tmp_path / "sweeps" / "fails"))
    assert shown.returncode == 0, shown.stderr
    assert "1 trial(s) failed or gave an invalid result:" in shown.stdout, shown.stdout
    assert "x=1" in shown.stdout and "no such dataset: x=1" in shown.stdout, shown.stdout
    listed = json.loads(gpusched("sweep", "results", str(tmp_path / "sweeps" / "fails"), "--json").stdout)
    assert [p["state"] for p in listed["problems"]] == ["failed"]
