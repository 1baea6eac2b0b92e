"""Intermediate reports: trial code reports step and metrics while it runs; they are stored with the trial
(append-only), summarised in the sweep's records and shown by `gpusched sweep results`."""

import io
import json
import os
import sys
from pathlib import Path

import pytest

from airflow_provider_gpusched.core.sweep import Objective, SweepSpec
from airflow_provider_gpusched.core.sweep.records.reports import parse_report_line, read_reports
from airflow_provider_gpusched.core.sweep.running.session import SweepSession
from airflow_provider_gpusched.core.sweep.running.trial_run import run_trial
from airflow_provider_gpusched.trial import report
from tests.cli import gpusched

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def learning_curve(params):
    for epoch in range(5):
        report(step=epoch, loss=params["lr"] / (epoch + 1), accuracy=0.5 + 0.1 * epoch, checkpoint=f"ckpt/{epoch}.pt")
    return {"loss": params["lr"] / 5}


# any language: key=value lines and JSON lines appended to $GPUSCHED_REPORT_FILE, then one half-written line
SHELL_LIKE = (
    "import os; f = open(os.environ['GPUSCHED_REPORT_FILE'], 'a'); "
    'f.write(\'step=0 loss=0.9\\n\'); f.write(\'{"step": 1, "loss": 0.5, "checkpoint": "c1"}\\n\'); '
    "f.write('not a report\\n'); f.write('step=2 loss=0.3\\n'); f.write('step=3 lo'); f.close(); "
    "open('result.json', 'w').write('{\"loss\": 0.3}')"
)


def test_callable_and_command_trials_report_while_running(tmp_path):
    spec = SweepSpec(
        name="curves",
        test_config=[{"lr": [0.1, 0.2]}],
        python_callable=learning_curve,
        objective=Objective("loss", "minimize"),
        results_root=str(tmp_path),
    )
    session = SweepSession(spec)
    manifest = session.prepare()
    for t in manifest.pending:
        assert run_trial(manifest, t, out=io.StringIO()) == 0
    session.collect()
    records = json.loads(Path(tmp_path / "curves" / "summary.json").read_text())["records"]
    for record in records:
        assert record["reports"] == {
            "count": 5,
            "last_step": 4,
            "last": {"loss": pytest.approx(record["params"]["lr"] / 5), "accuracy": pytest.approx(0.9)},
            "checkpoint": "ckpt/4.pt",
        }
    lines = Path(os.path.join(records[0]["folder"], "reports.jsonl")).read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [0, 1, 2, 3, 4]

    cmd = SweepSpec(
        name="cmd",
        test_config=[{"x": [1]}],
        command=[sys.executable, "-c", SHELL_LIKE],
        objective=Objective("loss", "minimize"),
        results_root=str(tmp_path),
    )
    session = SweepSession(cmd)
    manifest = session.prepare()
    assert run_trial(manifest, manifest.pending[0], out=io.StringIO()) == 0
    session.collect()
    summary = json.loads(Path(tmp_path / "cmd" / "summary.json").read_text())["records"][0]["reports"]
    assert summary["count"] == 3 and summary["last_step"] == 2 and summary["checkpoint"] == "c1"
    assert len(summary["problems"]) == 1 and summary["problems"][0].endswith(
        "reports.jsonl:3: expected key=value words, got 'not'"
    )  # named, not dropped; the cut line is left out

    out = gpusched("sweep", "results", str(tmp_path / "cmd"), cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert "latest reports (1 trials" in out.stdout and "loss=0.3" in out.stdout
    assert "reports.jsonl:3: expected key=value words" in out.stdout

    # a re-run starts a new curve and keeps the previous attempt's beside it
    folder = session.store.trial_dir(manifest.pending[0])
    session.store.mark_running(manifest.pending[0])
    assert not os.path.exists(os.path.join(folder, "reports.jsonl"))
    assert len(read_reports(os.path.join(folder, "reports.previous.jsonl"))[0]) == 3


def test_report_outside_a_sweep_and_bad_reports(monkeypatch, tmp_path):
    monkeypatch.delenv("GPUSCHED_REPORT_FILE", raising=False)
    assert report(step=2, loss=0.5)["metrics"] == {"loss": 0.5}  # no sweep: nothing written, no error
    monkeypatch.setenv("GPUSCHED_REPORT_FILE", str(tmp_path / "r.jsonl"))
    report(loss=float("nan"))  # a diverged loss is recorded as null
    report(loss=1.0)  # steps count on from the last one
    found, problems = read_reports(str(tmp_path / "r.jsonl"))
    assert [(r["step"], r["metrics"]["loss"]) for r in found] == [(0, None), (1, 1.0)] and not problems
    with pytest.raises(TypeError, match="expected a number, got str"):
        report(step=1, loss="low")
    with pytest.raises(TypeError, match="step=...\\): expected a whole number >= 0"):
        report(step=-1, loss=1.0)
    with pytest.raises(TypeError, match="at least one metric"):
        report(step=1)
    for line, why in [
        ("step=x loss=1", "step: expected a whole number"),
        ("loss=1", "step: expected"),
        ('{"step": 1}', "no metrics"),
        ('{"step": 1, "loss": "a"}', "metric 'loss'"),
        ("step=1 loss=high", "'high' is not a number"),
        ("[1]", "expected key=value"),
    ]:
        with pytest.raises(ValueError, match=why):
            parse_report_line(line)


BIG = "1" + "0" * 400  # a whole number JSON allows and no float64 holds


def bad_numbers(params):
    with open(os.environ["GPUSCHED_REPORT_FILE"], "a") as fh:
        fh.write('{"step": 0, "loss": ' + BIG + "}\n")
        fh.write('{"step": ' + BIG + ', "loss": 1}\n')
        fh.write('{"step": 1, "loss": 1, "time": ' + BIG + "}\n")
        fh.write('{"step": 1, "loss": 1, "time": NaN}\n')
        fh.write('{"step": 1, "loss": 1, "checkpoint": %s}\n' % ("[" * 5000 + "]" * 5000))
        fh.write('{"step": 2, "loss": 1e400, "acc": Infinity}\n')  # a diverged metric: null, as report() writes it
        fh.write("step=3 loss=0.5\n")
    return {"loss": 0.5}


def test_a_report_with_numbers_no_float_holds_is_named_and_skipped_and_the_summary_is_written(tmp_path):
    """A 400-digit whole number (JSON has no bound) in a metric, the step or the time, NaN for a time, a line nested
    thousands deep: each line is named by file and line and skipped, the rest of the curve is read and collect
    writes the summary (it raised OverflowError)."""
    spec = SweepSpec(
        name="big",
        test_config=[{"lr": [0.1]}],
        python_callable=bad_numbers,
        objective=Objective("loss", "minimize"),
        results_root=str(tmp_path),
    )
    session = SweepSession(spec)
    manifest = session.prepare()
    assert run_trial(manifest, manifest.pending[0], out=io.StringIO()) == 0
    session.collect()
    record = json.loads(Path(tmp_path / "big" / "summary.json").read_text())["records"][0]
    assert record["state"] == "succeeded"
    reports = record["reports"]
    assert reports["count"] == 2 and reports["last_step"] == 3
    path = os.path.join(record["folder"], "reports.jsonl")
    problems = reports["problems"]
    assert [p.split(": ", 1)[0] for p in problems] == [f"{path}:{n}" for n in (1, 2, 3, 4, 5)]
    assert "metric 'loss': expected a number within float range" in problems[0]
    assert "step: expected a whole number from 0 to 2**53" in problems[1]
    assert "time: expected seconds since 1970 (a finite number)" in problems[2] and "nan" in problems[3]
    assert problems[4].endswith("not a report (nested too deeply)")
    found, _ = read_reports(path)
    assert found[0]["metrics"] == {"loss": None, "acc": None}
    # a line longer than a report is not parsed
    with pytest.raises(ValueError, match="longer than 65536 characters"):
        parse_report_line('{"step": 1, "loss": 1, "x": "' + "a" * 70000 + '"}')


def test_a_deeply_nested_report_is_refused_whatever_the_recursion_limit():
    """CI's run of f42dbdd: a worker process had a raised recursion limit (some library sets it), so a line nested
    5,000 deep parsed and was refused for another reason. The depth is now checked before parsing."""
    deep = '{"step": 1, "loss": 1, "checkpoint": %s}' % ("[" * 5000 + "]" * 5000)
    shallow = '{"step": 1, "loss": 1, "extra": %s}' % ("[" * 10 + "]" * 10)
    old = sys.getrecursionlimit()
    try:
        for limit in (old, 100_000):
            sys.setrecursionlimit(limit)
            with pytest.raises(ValueError, match=r"^not a report \(nested too deeply\)$"):
                parse_report_line(deep)
            with pytest.raises(ValueError, match="metric 'extra': expected a number or null"):
                parse_report_line(shallow)  # within the bound: parsed, then refused for what it holds
    finally:
        sys.setrecursionlimit(old)
