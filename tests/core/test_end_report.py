"""The report a sweep sends when it ends: counts, the top of the leaderboard, failures with their output."""

import io
import os
import sys
from pathlib import Path

import pytest

from airflow_provider_gpusched.core.errors import GpuschedError
from airflow_provider_gpusched.core.sweep import Objective, SweepSpec
from airflow_provider_gpusched.core.sweep.results.end_report import build_end_report, format_for
from airflow_provider_gpusched.core.sweep.running.session import SweepSession
from airflow_provider_gpusched.core.sweep.running.trial_run import run_trial

TRAIN = (
    "import json, sys\n"
    "x = sys.argv[1]\n"
    "if x == '3':\n"
    "    print('epoch 1 loss nan'); print('<b>diverged</b> | at step 7'); sys.exit(3)\n"
    "json.dump(dict(acc=int(x) / 10), open('result.json', 'w'))\n"
)


def run_sweep(tmp_path, objective=None):
    objective = objective or Objective("acc")
    spec = SweepSpec(
        name="rep",
        test_config=[{"x": [1, 2, 3, 4], "tag": ["a|b_<i>"]}],
        command=[sys.executable, "-c", TRAIN, "{x}"],
        objective=objective,
        results_root=str(tmp_path),
        max_failed_trials=None,
    )
    session = SweepSession(spec)
    manifest = session.prepare()
    for t in manifest.pending:
        run_trial(manifest, t, out=io.StringIO())
    session.collect()
    return session.store.dir


def test_the_end_report_has_counts_the_top_and_each_failure_with_its_output(tmp_path):
    folder = run_sweep(tmp_path)
    report = build_end_report(folder, top_n=2, job_class="idle", run="manual__1")
    assert report.counts["succeeded"] == 3 and report.counts["failed"] == 1 and not report.ok
    assert report.subject == "[gpusched] sweep rep finished with failures: 3 succeeded, 1 failed; best acc 0.4"
    assert [r["score"] for r in report.top] == [0.4, 0.2]
    text = report.text()
    assert "top 2 (maximize acc):" in text and "x=4,tag=a|b_<i>" in text
    (failure,) = report.failures
    assert failure["state"] == "failed" and "exit" in failure["error"].lower()
    assert failure["tail"].splitlines()[-2:] == ["epoch 1 loss nan", "<b>diverged</b> | at step 7"]
    assert "    <b>diverged</b> | at step 7" in text
    assert set(report.gpu_seconds) == {"idle"} and report.gpu_seconds["idle"] > 0
    html = format_for("html", report)
    assert "&lt;b&gt;diverged&lt;/b&gt;" in html and "<b>diverged</b>" not in html
    assert "a|b_&lt;i&gt;" in html
    markdown = format_for("markdown", report)
    assert "a\\|b\\_<i>" in markdown  # table cells cannot be broken by a value
    assert "```\n" in markdown and "<b>diverged</b> | at step 7" in markdown  # the tail as a code block
    assert report.to_dict()["failures"][0]["tail"] == failure["tail"]
    with pytest.raises(GpuschedError, match="expected 'text', 'markdown' or 'html'"):
        format_for("pdf", report)


def test_a_two_metric_report_shows_fronts_and_values(tmp_path):
    folder = run_sweep(tmp_path, objective=Objective(["acc", "acc2"], ["maximize", "minimize"]))
    report = build_end_report(folder)
    assert report.top == [] and report.counts["invalid"] == 3  # no acc2 in the results: invalid, named
    assert "no 'acc2'" in report.failures[0]["error"]


def test_a_folder_without_a_summary_is_a_clear_error(tmp_path):
    with pytest.raises(GpuschedError, match="summary.json: missing or malformed"):
        build_end_report(str(tmp_path))


def test_gpu_time_counts_each_trial_by_its_share_of_a_gpu(tmp_path, monkeypatch):
    # each trial on a quarter of GPU 0 (the launcher's environment for a 6 GiB slice of a 24 GiB GPU)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    monkeypatch.setenv("GPUSCHED_GPU_MEMORY_FRACTION", "0.2500")
    folder = run_sweep(tmp_path)
    report = build_end_report(folder, job_class="normal")
    import json

    seconds = 0.0
    for name in os.listdir(os.path.join(folder, "trials")):
        status = json.loads(Path(os.path.join(folder, "trials", name, "status.json")).read_text())
        assert status["gpu_share"] == 0.25
        seconds += status["seconds"]
    assert report.gpu_seconds["normal"] == pytest.approx(0.25 * seconds, abs=0.1)
