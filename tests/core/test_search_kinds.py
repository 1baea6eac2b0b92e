"""Search types live in one place each (core/sweep/definition/search_kind.py); docs/development.md's worked example adds
one, and this test runs that page's code: the new kind, its registry line and its YAML spec, to a finished sweep."""

import re
import sys
from pathlib import Path

import pytest
import yaml

from airflow_provider_gpusched.core.errors import InvalidArgumentError
from airflow_provider_gpusched.core.gpu.inventory import SimulatedInventory
from airflow_provider_gpusched.core.gpu.leases import LeaseManager
from airflow_provider_gpusched.core.sweep.definition import search_kind as search_kinds
from airflow_provider_gpusched.core.sweep.definition.search_kind import SearchKind
from airflow_provider_gpusched.core.sweep.definition.sweep_spec import SweepSpec
from airflow_provider_gpusched.core.sweep.running.terminal import run_sweep

DOC = Path(__file__).resolve().parents[2] / "docs" / "development.md"


def _blocks(language: str) -> list[str]:
    text = DOC.read_text()
    section = text[text.index("## Adding a search type") :]
    section = section[: section.index("\n## ", 3)]
    return re.findall(rf"```{language}\n(.*?)```", section, re.S)


@pytest.fixture
def ablation():
    """The page's module and registry line, run as written against the real registry (the kind removed
    afterwards)."""
    module_code, registry_line = _blocks("python")
    namespace: dict = {}
    exec(compile(module_code, "docs/development.md (ablation.py)", "exec"), namespace)
    exec(
        compile(registry_line, "docs/development.md (registry line)", "exec"),
        {"SEARCH_KINDS": search_kinds.SEARCH_KINDS, "AblationKind": namespace["AblationKind"]},
    )
    yield namespace["AblationKind"]
    search_kinds.SEARCH_KINDS.pop("ablation", None)


def test_the_built_in_kinds_are_registered_under_their_names():
    assert list(search_kinds.SEARCH_KINDS) == ["grid", "random", "optuna", "evolution", "pbt", "hyperband"]
    for name, kind in search_kinds.SEARCH_KINDS.items():
        assert isinstance(kind, SearchKind) and kind.name == name
    assert [k for k, v in search_kinds.SEARCH_KINDS.items() if v.in_rounds] == [
        "optuna",
        "evolution",
        "pbt",
        "hyperband",
    ]


def test_an_unknown_search_lists_the_registered_kinds():
    with pytest.raises(
        InvalidArgumentError,
        match=r"search: expected one of \['grid', 'random', 'optuna', "
        r"'evolution', 'pbt', 'hyperband'\], got 'bayes'",
    ):
        SweepSpec(name="s", search="bayes", space={"a": [1]}, command=["true"])


def test_round_kinds_fill_their_own_defaults():
    optuna = SweepSpec(name="o", search="optuna", space={"a": [1, 2]}, objective="maximize acc", command=["true"])
    assert (optuna.rounds, optuna.per_round) == (3, 4)
    evolution = SweepSpec(
        name="e",
        search="evolution",
        space={"a": [1, 2]},
        objective="maximize acc",
        evolution={"max_epoch": 2, "candidate_pool_size": 5, "candidate_top_k": 2},
        command=["true"],
    )
    assert (evolution.rounds, evolution.per_round) == (2, 5)


@pytest.mark.heavy  # 0.9 s of CPU in the fast tier's run of 2026-12-07 (docs/development.md Tiers)
def test_the_documented_ablation_kind_runs_a_sweep_from_its_yaml(ablation, tmp_path):
    data = yaml.safe_load(_blocks("yaml")[0])
    # the page's train.py is the reader's; here a one-line trial scores each point instead
    data["command"] = [
        sys.executable,
        "-c",
        "import json, sys; lr, dropout, width = map(float, sys.argv[1:]); "
        "json.dump({'accuracy': 0.9 - abs(dropout - 0.1) - abs(width - 128) / 1000}, "
        "open('result.json', 'w'))",
        "{lr}",
        "{dropout}",
        "{width}",
    ]
    data["results_root"] = str(tmp_path / "results")
    spec = SweepSpec.from_dict(data, where="dropout-ablation.yaml")
    assert isinstance(spec.kind, ablation) and not spec.in_rounds
    points = [(t.params["dropout"], t.params["width"]) for t in spec.trials()]
    assert points == [(0.1, 128), (0.0, 128), (0.3, 128), (0.1, 64), (0.1, 256)]
    assert spec.stage_size() == 5
    summary = run_sweep(
        spec, manager=LeaseManager(SimulatedInventory("1x24GiB"), str(tmp_path / "leases")), progress=False
    )
    assert summary["counts"]["succeeded"] == 5
    assert summary["best"]["params"]["dropout"] == 0.1 and summary["best"]["params"]["width"] == 128


def test_the_documented_kind_validates_its_own_settings(ablation):
    with pytest.raises(
        InvalidArgumentError,
        match=r"s: global_config.width: expected the baseline value of "
        r"'width' \(search: ablation\)",
    ):
        SweepSpec(
            name="s", search="ablation", global_config={"lr": 0.1}, space={"width": [64]}, command=["true"], where="s"
        )


def _scheduler_blocks() -> list[str]:
    text = DOC.read_text()
    section = text[text.index("## Adding a scheduler") :]
    section = section[: section.index("\n## ", 3)]
    return re.findall(r"```python\n(.*?)```", section, re.S)


@pytest.mark.heavy  # 1.6 s of CPU in the fast tier's run of 2026-12-07 (docs/development.md Tiers)
def test_the_pages_scheduler_halves_its_configurations_and_each_goes_on_from_its_checkpoint(tmp_path):
    """docs/development.md "Adding a scheduler", run as written: 4 configurations of a checkpointing trainer
    (tests/core/test_pbt.py's), rungs of 4, 2 and 1, each trial that goes on resuming where its last one stopped."""
    import json

    from .test_pbt import TRAIN

    module_code, registry_line = _scheduler_blocks()
    namespace: dict = {}
    exec(compile(module_code, "docs/development.md (halving.py)", "exec"), namespace)
    exec(
        compile(registry_line, "docs/development.md (registry line)", "exec"),
        {"SEARCH_KINDS": search_kinds.SEARCH_KINDS, "HalvingKind": namespace["HalvingKind"]},
    )
    try:
        from airflow_provider_gpusched.core.sweep import Objective, loguniform

        spec = SweepSpec(
            name="halving",
            search="halving",
            count=4,
            seed=2,
            space={"lr": loguniform(0.001, 0.5)},
            command=[sys.executable, "-c", TRAIN],
            objective=Objective("score", "maximize"),
            results_root=str(tmp_path),
        )
        manager = LeaseManager(SimulatedInventory("4x24GiB"), str(tmp_path / "leases"))
        summary = run_sweep(spec, manager=manager, progress=False, run="r1")
    finally:
        search_kinds.SEARCH_KINDS.pop("halving", None)
    assert summary["counts"]["succeeded"] == 7  # 4 + 2 + 1
    results = [json.loads(p.read_text()) for p in (tmp_path / "halving" / "trials").glob("*/result.json")]
    by_steps = {steps: [r for r in results if r["end"]["step"] == steps] for steps in (1, 2, 4)}
    assert [len(by_steps[s]) for s in (1, 2, 4)] == [4, 2, 1]
    best_two = sorted(by_steps[1], key=lambda r: -r["score"])[:2]
    assert sorted(r["lr"] for r in by_steps[2]) == sorted(r["lr"] for r in best_two)  # the better half went on
    for later, earlier_steps in ((by_steps[2], 1), (by_steps[4], 2)):
        for r in later:  # from its own checkpoint: it started where its configuration's last trial ended
            before = next(b for b in by_steps[earlier_steps] if b["lr"] == r["lr"])
            assert r["start"] == before["end"]
