"""Population-based training (core/sweep/searches/pbt.py): generations as rounds, real trial runner processes on simulated GPUs
(no GPU here), a command trial that checkpoints its state in its checkpoint folder as any training script would."""

import json
import sys

import pytest

from airflow_provider_gpusched.core.errors import GpuschedError, InvalidArgumentError
from airflow_provider_gpusched.core.gpu.inventory import SimulatedInventory
from airflow_provider_gpusched.core.gpu.leases import LeaseManager
from airflow_provider_gpusched.core.sweep import Objective, SweepSpec, loguniform
from airflow_provider_gpusched.core.sweep.running.session import SweepSession
from airflow_provider_gpusched.core.sweep.running.terminal import run_sweep

#: a toy training loop with a checkpoint: w moves towards 1 by lr per step (too small a lr learns slowly, too large
#: overshoots); it resumes from checkpoint/state.json (its own, or the one PBT copied there) and reports each step
TRAIN = """
import json, os
p = json.loads(os.environ["GPUSCHED_TRIAL_PARAMS"])
folder = os.path.join(os.environ["GPUSCHED_TRIAL_DIR"], "checkpoint")
os.makedirs(folder, exist_ok=True)
path = os.path.join(folder, "state.json")
state = json.load(open(path)) if os.path.exists(path) else {"step": 0, "w": 0.0}
start = dict(state)
from airflow_provider_gpusched.trial import report
while state["step"] < p["epochs"]:
    state["w"] += p["lr"] * (1.0 - state["w"]) * (2.0 if p["lr"] < 0.9 else -1.0)
    state["step"] += 1
    json.dump(state, open(path + ".tmp", "w")); os.replace(path + ".tmp", path)
    report(step=state["step"], score=-abs(1.0 - state["w"]))
json.dump({"score": -abs(1.0 - state["w"]), "start": start, "end": state, "lr": p["lr"]},
          open(os.path.join(os.environ["GPUSCHED_TRIAL_DIR"], "result.json"), "w"))
"""


def spec(root, **kw):
    settings = dict(
        name="pbt",
        search="pbt",
        seed=4,
        space={"lr": loguniform(0.001, 0.5)},
        command=[sys.executable, "-c", TRAIN],
        objective=Objective("score", "maximize"),
        pbt={"population": 4, "perturbation_interval": 2, "steps": 6, "quantile_fraction": 0.25},
        results_root=str(root),
    )
    settings.update(kw)
    return SweepSpec(**settings)


def manager(root):
    return LeaseManager(SimulatedInventory("4x24GiB"), str(root / "leases"))


@pytest.mark.heavy  # a trial process per member and generation: 2.6 s of CPU
def test_the_population_trains_in_generations_and_the_bottom_exploits_the_top_from_its_checkpoint(tmp_path):
    summary = run_sweep(spec(tmp_path), manager=manager(tmp_path), progress=False, run="r1")
    assert summary["counts"]["succeeded"] == 12  # 4 members x 3 generations of 2 steps
    session = SweepSession(spec(tmp_path), str(tmp_path))
    lineage = session.search.lineage()
    members, exploits = lineage["members"], lineage["exploits"]
    assert [len(m) for m in members] == [3, 3, 3, 3]
    assert len(exploits) == 2  # one per generation after the first: the bottom quarter of 4
    results = {}
    for m in members:
        for entry in m:
            results[(entry["member"], entry["generation"])] = json.loads(
                (tmp_path / "pbt" / "trials" / entry["folder"].rsplit("/", 1)[-1] / "result.json").read_text()
            )
    for (k, g), res in results.items():
        assert res["end"]["step"] == 2 * (g + 1)  # each generation trains 2 more steps
        assert res["start"]["step"] == 2 * g  # ... from the checkpoint of the step before, never from scratch
        entry = members[k][g]
        assert res["lr"] == pytest.approx(entry["hyper"]["lr"]) and entry["score"] == pytest.approx(res["score"])
        if g:  # it started where its source ended: its own last trial, or the donor's
            source = entry["from"]
            assert res["start"] == results[(source["member"], source["generation"])]["end"]
    for e in exploits:
        g, k, donor = e["generation"], e["member"], e["from_member"]
        before = [members[m][g - 1]["score"] for m in range(4)]
        assert before[k] == min(before) and before[donor] == max(before)  # the worst copies the best
        assert members[k][g]["from"] == {
            "member": donor,
            "generation": g - 1,
            "trial_id": members[donor][g - 1]["trial_id"],
        }
        assert e["new"] == members[k][g]["hyper"] and e["old"] == members[k][g - 1]["hyper"]
        factor = e["new"]["lr"] / members[donor][g - 1]["hyper"]["lr"]
        assert factor == pytest.approx(1.2) or factor == pytest.approx(0.8) or 0.001 <= e["new"]["lr"] <= 0.5
        note = json.loads(
            (
                tmp_path
                / "pbt"
                / "trials"
                / members[k][g]["folder"].rsplit("/", 1)[-1]
                / "checkpoint"
                / "handed_over.json"
            ).read_text()
        )
        assert note["from_member"] == donor and note["exploited"] is True
    # the Sweeps tab's population, from the lineage as the api-server reads it and the trials' own reports
    from airflow_provider_gpusched.core.sweep.records.reports import read_reports
    from airflow_provider_gpusched.core.sweep.searches.pbt import population_view, read_lineage

    read, why = read_lineage(str(tmp_path / "pbt"))
    assert why == "" and read is not None
    entries = [e for m in members for e in m]
    rows = [{"trial_id": e["trial_id"], "index": i} for i, e in enumerate(entries)]
    curves = [
        {
            "index": i,
            "points": [
                [r["step"], r["metrics"]["score"]]
                for r in read_reports(
                    str(tmp_path / "pbt" / "trials" / e["folder"].rsplit("/", 1)[-1] / "reports.jsonl")
                )[0]
            ],
        }
        for i, e in enumerate(entries)
    ]
    view = population_view(read, rows, curves, "score")
    assert view["params"] == ["lr"] and len(view["members"]) == 4 and view["exploits"] == exploits
    for m in view["members"]:
        k = m["member"]
        assert [p[0] for p in m["curve"]] == [1, 2, 3, 4, 5, 6]  # every step once, over its three generations
        assert [g["score"] for g in m["generations"]] == [e["score"] for e in members[k]]
        assert m["curve"][-1][1] == pytest.approx(members[k][-1]["score"])  # it ends where its last trial ended
        for g in m["generations"]:
            exploited = [e for e in exploits if e["member"] == k and e["generation"] == g["generation"]]
            assert g["from_member"] == (exploited[0]["from_member"] if exploited else None)
            assert g["index"] == rows[entries.index(members[k][g["generation"]])]["index"]
    # a re-run replays the generations: nothing runs again
    again = run_sweep(spec(tmp_path), manager=manager(tmp_path), progress=False, run="r2")
    assert again["counts"]["skipped"] == 12


def test_a_damaged_lineage_is_refused_naming_the_file_and_the_key(tmp_path):
    """search/pbt.json read back: a damaged one stops the next generation with the file and key named, and the
    Sweeps tab says why it draws no population; a link is never followed."""
    from airflow_provider_gpusched.core.sweep.searches.pbt import read_lineage

    folder = tmp_path / "pbt" / "search"
    folder.mkdir(parents=True)
    entry = {"member": 0, "generation": 0, "step": 2, "hyper": {"lr": 0.1}, "from": None, "score": 0.5}
    (folder / "pbt.json").write_text(json.dumps({"members": [[{**entry, "step": "two"}]] * 4, "exploits": []}))
    session = SweepSession(spec(tmp_path), str(tmp_path))
    with pytest.raises(
        GpuschedError, match=r"pbt\.json: key 'members\[0\]\[0\]\.step': Input should be a valid integer"
    ):
        session.search.lineage()
    assert "key 'members[0][0].step'" in read_lineage(str(tmp_path / "pbt"))[1]
    (folder / "pbt.json").write_text(json.dumps({"members": [[entry]] * 3, "exploits": []}))
    with pytest.raises(GpuschedError, match=r"expected 4 members \(pbt.population\), found 3"):
        session.search.lineage()
    (folder / "pbt.json").write_text("{not json")
    with pytest.raises(GpuschedError, match="PBT lineage .*pbt.json"):
        session.search.lineage()
    (folder / "pbt.json").unlink()
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps({"members": [[entry]] * 4, "exploits": []}))
    (folder / "pbt.json").symlink_to(elsewhere)
    lineage, why = read_lineage(str(tmp_path / "pbt"))
    assert lineage is None and "link" in why, why
    # the UI reads only under the results root: a folder a record names outside it is refused before any read
    (folder / "pbt.json").unlink()
    (folder / "pbt.json").write_text(json.dumps({"members": [[entry]] * 4, "exploits": []}))
    assert read_lineage(str(tmp_path / "pbt"), str(tmp_path))[0] is not None
    lineage, why = read_lineage(str(tmp_path / "pbt"), str(tmp_path / "other-root"))
    assert lineage is None and "not under the results root" in why, why


NO_CHECKPOINT = "import json, os; json.dump({'score': 1.0}, open(os.path.join(os.environ['GPUSCHED_TRIAL_DIR'], 'result.json'), 'w'))"


@pytest.mark.heavy  # 0.8 s of CPU in the fast tier's run of 2026-12-07 (docs/development.md Tiers)
def test_a_trial_that_leaves_no_checkpoint_stops_the_next_generation_naming_the_folder(tmp_path):
    with pytest.raises(
        GpuschedError,
        match=r"PBT member 0's trial of generation 0 left no checkpoint in .*/checkpoint; its trials must save",
    ):
        run_sweep(
            spec(tmp_path, command=[sys.executable, "-c", NO_CHECKPOINT]),
            manager=manager(tmp_path),
            progress=False,
        )


@pytest.mark.parametrize(
    ("settings", "argument", "expected"),
    [
        ({"pbt": {"perturbation_interval": 8, "steps": 6}}, "pbt.perturbation_interval", "at most steps (6)"),
        ({"pbt": {"population": 1}}, "pbt.population", "a whole number >= 2"),
        ({"pbt": {"quantile_fraction": 0.7}}, "pbt.quantile_fraction", "a fraction above 0 and at most 0.5"),
        ({"pbt": {"perturbation_factors": []}}, "pbt.perturbation_factors", "a list of positive factors"),
        ({"pbt": {"step_param": "lr"}}, "pbt.step_param", "a parameter PBT sets itself"),
        ({"pruning": "median"}, "pruning", "no pruning with search: pbt"),
        ({"asynchronous": True}, "asynchronous", "false for search: pbt"),
        ({"objective": None}, "objective", "a metric to rank the population by"),
        ({"search": "random", "count": 2}, "pbt", "pbt settings only with search: pbt"),
        ({"pbt": {"popultion": 4}}, "pbt.popultion", "did you mean population"),
    ],
)
def test_bad_pbt_settings_are_refused_when_the_spec_is_made(tmp_path, settings, argument, expected):
    with pytest.raises(InvalidArgumentError) as err:
        spec(tmp_path, **settings)
    assert err.value.argument.endswith(argument), err.value
    assert expected in str(err.value), err.value


def test_the_preview_counts_every_member_of_every_generation(tmp_path):
    preview = SweepSession(spec(tmp_path, space={"lr": [0.01, 0.1]}), str(tmp_path)).preview()
    assert [r["trials"] for r in preview["rounds"]] == [4, 4, 4]  # (values repeat across members: no cap)
