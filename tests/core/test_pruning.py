"""Early stopping from intermediate reports: the rules, and trials that end `pruned` (callable and command)."""

import io
import json
import os
import sys
import time
from pathlib import Path

import pytest

from airflow_provider_gpusched.core.sweep import Objective, SweepSpec
from airflow_provider_gpusched.core.sweep.pruning_rules.builtin import ASHARule
from airflow_provider_gpusched.core.sweep.pruning_rules.judging import PruningRule, judge
from airflow_provider_gpusched.core.sweep.running.session import SweepSession
from airflow_provider_gpusched.core.sweep.running.trial_run import run_trial
from airflow_provider_gpusched.trial import report


def curve(values, start=0):
    return [{"step": start + i, "metrics": {"loss": v}} for i, v in enumerate(values)]


def test_median_rule():
    rule = PruningRule("median", metric="loss", mode="minimize", warmup_steps=1, min_trials=2)
    peers = [curve([1.0, 0.5, 0.4]), curve([1.0, 0.6, 0.5])]
    assert judge(rule, curve([2.0]), peers) == ""  # step 0 is warm-up
    assert "worse than the median 0.55 of 2 other trials" in judge(rule, curve([2.0, 0.9]), peers)
    assert judge(rule, curve([2.0, 0.5]), peers) == ""  # better than the median
    assert judge(rule, curve([2.0, 0.9]), peers[:1]) == ""  # too few peers reached step 1
    assert judge(rule, curve([2.0, 0.9, 0.8, 0.7]), peers) == ""  # no peer reached step 3
    up = PruningRule("median", metric="acc", mode="maximize", min_trials=1)
    assert judge(up, [{"step": 0, "metrics": {"acc": 0.2}}], [[{"step": 0, "metrics": {"acc": 0.5}}]])


def test_asha_rule():
    rule = PruningRule("asha", metric="loss", mode="minimize", min_steps=1, reduction_factor=2)
    assert ASHARule(rule).rungs(10) == [1, 2, 4, 8]
    peers = [curve([1.0, 0.3, 0.2]), curve([1.0, 0.4, 0.3]), curve([1.0, 0.8, 0.7]), curve([1.0, 0.9, 0.8])]
    assert judge(rule, curve([1.0]), peers) == ""  # step 0: no rung yet
    why = judge(rule, curve([1.0, 0.85]), peers)  # rung 1: the top half of 0.3, 0.4, 0.8, 0.85 (its own), 0.9
    assert "ASHA at rung 1" in why and "cutoff 0.8" in why
    assert judge(rule, curve([1.0, 0.75]), peers) == ""  # 0.75 is the middle of 0.3, 0.4, 0.75, 0.8, 0.9
    assert "cutoff 0.4" in judge(rule, curve([1.0, 0.5]), peers[:1])  # one peer: halfway between it and its own
    assert judge(rule, curve([1.0, 0.35, 0.3]), peers) == ""  # step 2 is rung 2: judged once, 0.3 <= 0.3
    assert judge(rule, curve([1.0, 0.35]), []) == ""  # nothing recorded at the rung: go on


def learn(params):
    for step in range(6):
        report(step=step, loss=params["quality"] + 1.0 / (step + 1))
    return {"loss": params["quality"]}


def test_bad_trials_end_pruned_and_are_not_run_again(tmp_path):
    spec = SweepSpec(
        name="prune",
        test_config=[{"quality": [0.1, 0.2, 0.3, 5.0, 0.15]}],
        python_callable=learn,
        objective=Objective("loss", "minimize"),
        results_root=str(tmp_path),
        pruning={"rule": "median", "min_trials": 2, "warmup_steps": 1},
    )
    assert spec.pruning.metric == "loss" and spec.pruning.mode == "minimize"  # from the objective
    session = SweepSession(spec)
    manifest = session.prepare()
    assert [run_trial(manifest, t, out=io.StringIO()) for t in manifest.pending] == [0] * 5
    summary = session.collect()
    states = {
        r["params"]["quality"]: r for r in json.loads(Path(tmp_path / "prune" / "summary.json").read_text())["records"]
    }
    assert states[5.0]["state"] == "pruned" and states[5.0]["reports"]["last_step"] == 1  # stopped at step 1
    assert "median stopping at step 1" in states[5.0]["error"]
    assert [states[q]["state"] for q in (0.1, 0.2, 0.3, 0.15)] == ["succeeded", "succeeded", "pruned", "succeeded"]
    assert summary["counts"]["pruned"] == 2 and summary["counts"]["failed"] == 0
    assert summary["best"]["score"] == 0.1 and len(summary["leaderboard"]) == 3  # pruned trials are not ranked
    again = session.prepare()
    assert again.pending == [] and len(again.record.skipped) == 5  # pruned ones are done, like succeeded ones
    with pytest.raises(Exception, match="pruning: expected an objective"):
        SweepSpec(name="x", test_config=[{"a": [1]}], command=["true"], pruning="median")
    with pytest.raises(Exception, match=r"pruning.rule: expected one of \['median', 'asha', 'optuna'\]"):
        SweepSpec(name="x", test_config=[{"a": [1]}], command=["true"], objective=Objective("l"), pruning="hyperband")


def test_optuna_pruners_judge_from_the_reports_of_the_other_trials():
    pytest.importorskip("optuna")
    from airflow_provider_gpusched.core.sweep.pruning_rules.builtin import judge_with_optuna

    median = PruningRule(
        "optuna", metric="loss", mode="minimize", pruner="median", options={"n_startup_trials": 2, "n_warmup_steps": 1}
    )
    median.check("pruning")
    done = [("succeeded", curve([1.0, 0.5, 0.4])), ("succeeded", curve([1.0, 0.6, 0.5]))]
    assert judge_with_optuna(median, curve([2.0]), done) == ""  # warm-up
    why = judge_with_optuna(median, curve([2.0, 0.9]), done)
    assert why.startswith("Optuna's MedianPruner at step 1: loss 0.9 (2 other trials with reports)")
    assert judge_with_optuna(median, curve([2.0, 0.5]), done) == ""
    # Optuna's median counts COMPLETE trials only: running or pruned peers do not start it
    assert judge_with_optuna(median, curve([2.0, 0.9]), [("running", c) for _, c in done]) == ""
    assert judge_with_optuna(median, curve([2.0, 0.9]), done[:1] + [("pruned", curve([1.0, 0.2]))]) == ""
    # successive halving counts every trial that reached the rung, running ones too
    halving = PruningRule(
        "optuna",
        metric="loss",
        mode="minimize",
        pruner="successive_halving",
        options={"min_resource": 1, "reduction_factor": 2},
    )
    halving.check("pruning")
    running = [("running", curve([1.0, v])) for v in (0.3, 0.4, 0.8, 0.9)]
    assert "SuccessiveHalvingPruner at step 1" in judge_with_optuna(halving, curve([1.0, 0.85]), running)
    assert judge_with_optuna(halving, curve([1.0, 0.35]), running) == ""
    # threshold needs no peers; a maximised metric is judged in its direction
    threshold = PruningRule("optuna", metric="acc", mode="maximize", pruner="threshold", options={"lower": 0.5})
    threshold.check("pruning")
    acc = [{"step": 0, "metrics": {"acc": 0.4}}]
    assert "ThresholdPruner" in judge_with_optuna(threshold, acc, [])
    patient = PruningRule("optuna", metric="loss", mode="minimize", pruner="patient", options={"patience": 1})
    patient.check("pruning")
    assert judge_with_optuna(patient, curve([1.0, 0.9]), []) == ""  # still improving
    assert "PatientPruner" in judge_with_optuna(patient, curve([1.0, 0.9, 0.95, 0.96]), [])  # 2 steps without
    # patient around another pruner: that one decides once patience ran out
    wrapped = PruningRule(
        "optuna",
        metric="loss",
        mode="minimize",
        pruner="patient",
        options={"patience": 1, "wrapped": {"pruner": "threshold", "options": {"upper": 10}}},
    )
    wrapped.check("pruning")
    assert judge_with_optuna(wrapped, curve([1.0, 0.9, 0.95, 0.96]), []) == ""  # under the threshold's 10


@pytest.mark.parametrize(
    ("pruning", "argument", "expected"),
    [
        ({"rule": "optuna"}, "pruning.pruner", "one of ['median', 'percentile'"),
        ({"rule": "optuna", "pruner": "hyperband"}, "pruning.pruner", "use it with search: optuna and asynchronous"),
        ({"rule": "optuna", "pruner": "wilcoxon"}, "pruning.pruner", "use it with search: optuna and asynchronous"),
        (
            {"rule": "optuna", "pruner": "median", "options": {"n_startup": 2}},
            "pruning.options",
            "arguments of optuna.pruners.MedianPruner",
        ),
        (
            {"rule": "optuna", "pruner": "percentile", "options": {"percentile": 150}},
            "pruning.options",
            "PercentilePruner",
        ),
        ({"rule": "median", "pruner": "median"}, "pruning.pruner", "only with rule: optuna"),
    ],
)
def test_optuna_pruner_settings_are_checked_when_the_spec_is_made(pruning, argument, expected):
    pytest.importorskip("optuna")
    from airflow_provider_gpusched.core.errors import InvalidArgumentError

    with pytest.raises(InvalidArgumentError) as err:
        SweepSpec(name="x", test_config=[{"a": [1]}], command=["true"], objective=Objective("l"), pruning=pruning)
    assert err.value.argument.endswith(argument) and expected in err.value.expected


def test_an_optuna_sweep_prunes_with_optunas_pruner_and_tells_the_study_pruned_with_the_curve(tmp_path):
    optuna = pytest.importorskip("optuna")
    from airflow_provider_gpusched.core.sweep import choice

    spec = SweepSpec(
        name="op",
        search="optuna",
        space={"quality": choice([0.1, 0.2, 0.3, 5.0, 6.0, 7.0])},
        rounds=2,
        per_round=3,
        seed=4,
        python_callable=learn,
        objective=Objective("loss", "minimize"),
        results_root=str(tmp_path),
        pruning={"rule": "optuna", "pruner": "median", "options": {"n_startup_trials": 1, "n_warmup_steps": 1}},
    )
    session = SweepSession(spec)
    for r in range(2):
        manifest = session.prepare(round_no=r)
        for t in manifest.pending:
            run_trial(manifest, t, out=io.StringIO())
        session.finish_round(r)
    summary = session.collect()
    records = json.loads(Path(tmp_path / "op" / "summary.json").read_text())["records"]
    pruned = [r for r in records if r["state"] == "pruned"]
    # Optuna's median: worse than the median of the completed trials at the same step (after 1 completed)
    assert len(pruned) >= 3 and all("Optuna's MedianPruner at step 1" in r["error"] for r in pruned)
    assert summary["best"]["params"]["quality"] == 0.1 and summary["counts"]["failed"] == 0
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    study = optuna.load_study(
        study_name="op", storage=JournalStorage(JournalFileBackend(str(tmp_path / "op" / "search" / "optuna.journal")))
    )
    told = [t for t in study.trials if t.state.name == "PRUNED" and "duplicate" not in t.user_attrs]
    assert len(told) == len(pruned)
    for t in told:  # the curve it reported up to where it was stopped, as intermediate values
        assert t.intermediate_values == {
            0: pytest.approx(t.params["quality"] + 1),
            1: pytest.approx(t.params["quality"] + 0.5),
        }


SLOW_COMMAND = (
    "import json, os, sys, time\n"
    "q = float(sys.argv[1])\n"
    "for step in range(20 if q < 1 else 100):\n"
    "    open(os.environ['GPUSCHED_REPORT_FILE'], 'a').write('step=%d loss=%s\\n' % (step, q + 1 / (step + 1)))\n"
    "    time.sleep(0.05 if q < 1 else 0.3)\n"
    "json.dump(dict(loss=q), open('result.json', 'w'))\n"
)


def test_a_command_trial_is_stopped_by_its_runner(tmp_path):
    """A command in any language only appends report lines; its runner judges them and stops it (its GPU is
    given back when the runner ends), recording `pruned`, and the runner exits 0 (no retry)."""
    spec = SweepSpec(
        name="cmd",
        test_config=[{"q": [0.1, 0.2, 9.0]}],
        command=[sys.executable, "-c", SLOW_COMMAND, "{q}"],
        objective=Objective("loss", "minimize"),
        results_root=str(tmp_path),
        pruning={"rule": "asha", "min_steps": 2, "reduction_factor": 2},
    )
    session = SweepSession(spec)
    manifest = session.prepare()
    good = [t for t in manifest.pending if t.params["q"] < 1]
    for t in good:
        assert run_trial(manifest, t, out=io.StringIO()) == 0  # 20 steps of 0.05 s each
    bad = [t for t in manifest.pending if t.params["q"] > 1][0]
    started = time.monotonic()
    assert run_trial(manifest, bad, out=io.StringIO()) == 0
    took = time.monotonic() - started
    status = session.store.status(bad)
    assert status["state"] == "pruned" and "ASHA at rung 2" in status["error"], status
    assert took < 10, took  # it would have run 30 s
    assert not os.path.exists(os.path.join(session.store.trial_dir(bad), "result.json"))
