"""Early stopping from intermediate reports: the rules, and trials that end `pruned` (callable and command)."""

import json
import os
import sys
import time

import pytest

from airflow_provider_gpusched.core.sweep import Objective, SweepSpec
from airflow_provider_gpusched.core.sweep.pruning import PruningRule, judge
from airflow_provider_gpusched.core.sweep.session import SweepSession
from airflow_provider_gpusched.core.sweep.trial_run import run_trial
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
    assert rule.rungs(10) == [1, 2, 4, 8]
    peers = [curve([1.0, 0.3, 0.2]), curve([1.0, 0.4, 0.3]), curve([1.0, 0.8, 0.7]), curve([1.0, 0.9, 0.8])]
    assert judge(rule, curve([1.0]), peers) == ""  # step 0: no rung yet
    why = judge(rule, curve([1.0, 0.7]), peers)  # rung 1: the top half of 0.3, 0.4, 0.8, 0.9 cuts at 0.6
    assert "ASHA at rung 1" in why and "cutoff 0.6" in why
    assert judge(rule, curve([1.0, 0.5]), peers) == ""
    assert "cutoff 0.3" in judge(rule, curve([1.0, 0.5]), peers[:1])  # one peer: it must do as well
    assert judge(rule, curve([1.0, 0.35, 0.3]), peers) == ""  # step 2 is rung 2: judged once, 0.3 <= 0.3
    assert judge(rule, curve([1.0, 0.35]), []) == ""  # nothing recorded at the rung: go on


def learn(params):
    for step in range(6):
        report(step=step, loss=params["quality"] + 1.0 / (step + 1))
    return {"loss": params["quality"]}


def test_bad_trials_end_pruned_and_are_not_run_again(tmp_path):
    spec = SweepSpec(name="prune", test_config=[{"quality": [0.1, 0.2, 0.3, 5.0, 0.15]}], python_callable=learn,
                     objective=Objective("loss", "minimize"), results_root=str(tmp_path),
                     pruning={"rule": "median", "min_trials": 2, "warmup_steps": 1})
    assert spec.pruning.metric == "loss" and spec.pruning.mode == "minimize"  # from the objective
    session = SweepSession(spec)
    manifest = session.prepare()
    assert [run_trial(manifest, t, out=open(os.devnull, "w")) for t in manifest.pending] == [0] * 5
    summary = session.collect()
    states = {r["params"]["quality"]: r for r in json.load(open(tmp_path / "prune" / "summary.json"))["records"]}
    assert states[5.0]["state"] == "pruned" and states[5.0]["reports"]["last_step"] == 1  # stopped at step 1
    assert "median stopping at step 1" in states[5.0]["error"]
    assert [states[q]["state"] for q in (0.1, 0.2, 0.3, 0.15)] == ["succeeded", "succeeded", "pruned", "succeeded"]
    assert summary["counts"]["pruned"] == 2 and summary["counts"]["failed"] == 0
    assert summary["best"]["score"] == 0.1 and len(summary["leaderboard"]) == 3  # pruned trials are not ranked
    again = session.prepare()
    assert again.pending == [] and len(again.data["skipped"]) == 5  # pruned ones are done, like succeeded ones
    with pytest.raises(Exception, match="pruning: expected an objective"):
        SweepSpec(name="x", test_config=[{"a": [1]}], command=["true"], pruning="median")
    with pytest.raises(Exception, match=r"pruning.rule: expected one of \['median', 'asha'\]"):
        SweepSpec(name="x", test_config=[{"a": [1]}], command=["true"], objective=Objective("l"), pruning="hyperband")


SLOW_COMMAND = ("import json, os, sys, time\n"
                "q = float(sys.argv[1])\n"
                "for step in range(100):\n"
                "    open(os.environ['GPUSCHED_REPORT_FILE'], 'a').write('step=%d loss=%s\\n' % (step, q + 1 / (step + 1)))\n"
                "    time.sleep(0.1 if q < 1 else 0.3)\n"
                "json.dump(dict(loss=q), open('result.json', 'w'))\n")


def test_a_command_trial_is_stopped_by_its_runner(tmp_path):
    """A command in any language only appends report lines; its runner judges them and stops it (its GPU is
    given back when the runner ends), recording `pruned`, and the runner exits 0 (no retry)."""
    spec = SweepSpec(name="cmd", test_config=[{"q": [0.1, 0.2, 9.0]}],
                     command=[sys.executable, "-c", SLOW_COMMAND, "{q}"], objective=Objective("loss", "minimize"),
                     results_root=str(tmp_path), pruning={"rule": "asha", "min_steps": 2, "reduction_factor": 2})
    session = SweepSession(spec)
    manifest = session.prepare()
    good = [t for t in manifest.pending if t.params["q"] < 1]
    for t in good:
        assert run_trial(manifest, t, out=open(os.devnull, "w")) == 0  # 100 steps of 0.1 s each
    bad = [t for t in manifest.pending if t.params["q"] > 1][0]
    started = time.monotonic()
    assert run_trial(manifest, bad, out=open(os.devnull, "w")) == 0
    took = time.monotonic() - started
    status = session.store.status(bad)
    assert status["state"] == "pruned" and "ASHA at rung 2" in status["error"], status
    assert took < 10, took  # it would have run 30 s
    assert not os.path.exists(os.path.join(session.store.trial_dir(bad), "result.json"))
