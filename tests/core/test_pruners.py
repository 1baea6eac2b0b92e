"""Pruning rules are small classes in a registry (core/sweep/pruning_rules/base.py, the built-in ones beside it in
median.py, asha.py and optuna.py); docs/development.md's worked example adds one, and this test runs that page's code:
the module installed with its entry point the way pip would leave it, and a real `gpusched sweep run` whose trial
runners find the rule there and stop a command trial with it."""

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from airflow_provider_gpusched.core.errors import InvalidArgumentError
from airflow_provider_gpusched.core.sweep import Objective, SweepSpec
from airflow_provider_gpusched.core.sweep.pruning_rules.base import (
    ENTRY_POINT_GROUP,
    Pruner,
    pruner_class,
    pruner_names,
    register_pruner,
    unregister_pruner,
)

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "development.md"

TRAIN = textwrap.dedent("""
    import json, os, sys, time
    quality = float(sys.argv[sys.argv.index("--quality") + 1])
    for step in range(6):
        # quality 0.1 keeps improving; quality 0.5 reports the same loss from the start
        loss = quality + (1.0 / (step + 1) if quality < 0.3 else 0.0)
        with open(os.environ["GPUSCHED_REPORT_FILE"], "a") as f:
            f.write(f"step={step} loss={loss}\\n")
        time.sleep(0.4)
    json.dump({"loss": loss}, open("result.json", "w"))
""")


def _blocks(language: str) -> list[str]:
    text = DOC.read_text()
    section = text[text.index("## Adding a pruning rule") :]
    section = section[: section.index("\n## ", 3)]
    return re.findall(rf"```{language}\n(.*?)```", section, re.S)


def test_the_built_in_rules_are_registered_under_their_names():
    assert pruner_names()[:3] == ["median", "asha", "optuna"]
    for name in ("median", "asha", "optuna"):
        cls = pruner_class(name)
        assert issubclass(cls, Pruner) and cls.name == name


def _install(tmp_path: Path) -> Path:
    """The page's module as package my_lab, with a dist-info folder naming its entry point."""
    (toml,) = _blocks("toml")
    group, line = toml.strip().splitlines()
    assert group == f'[project.entry-points."{ENTRY_POINT_GROUP}"]'
    name, target = (part.strip().strip('"') for part in line.split("="))
    lib = tmp_path / "lib"
    (lib / "my_lab").mkdir(parents=True)
    (lib / "my_lab" / "__init__.py").write_text("")
    (lib / "my_lab" / "pruning.py").write_text(_blocks("python")[0])
    info = lib / "my_lab-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: my-lab\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\n{name} = {target}\n")
    return lib


@pytest.mark.heavy  # 1.1 s of CPU in the fast tier's run of 2026-12-07 (docs/development.md Tiers)
def test_the_pages_rule_stops_a_command_trial_found_through_its_entry_point(tmp_path):
    lib = _install(tmp_path)
    (spec_text,) = _blocks("yaml")
    spec = yaml.safe_load(spec_text)
    spec["command"][0] = sys.executable  # the page says `python`; this machine's interpreter runs it
    (tmp_path / "train.py").write_text(TRAIN)
    (tmp_path / "plateau.yaml").write_text(yaml.safe_dump(spec))
    (tmp_path / "leases").mkdir(mode=0o700)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(lib), str(REPO)])}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "airflow_provider_gpusched.cli",
            "sweep",
            "run",
            str(tmp_path / "plateau.yaml"),
            "--results-root",
            str(tmp_path / "sweeps"),
            "--simulate",
            "2x24GiB",
            "--state-dir",
            str(tmp_path / "leases"),
            "--parallel",
            "2",
            "--json",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["counts"]["succeeded"] == 1 and summary["counts"]["pruned"] == 1, summary["counts"]
    statuses = {
        json.loads((p / "params.json").read_text())["quality"]: json.loads((p / "status.json").read_text())
        for p in (tmp_path / "sweeps" / "plateau-demo" / "trials").iterdir()
    }
    assert statuses[0.1]["state"] == "succeeded"
    assert statuses[0.5]["state"] == "pruned"
    assert "plateau: no loss better than 0.5 in the last 2 reports" in statuses[0.5]["error"]


def _spec_pruned_by(pruning: dict) -> SweepSpec:
    return SweepSpec(
        name="x", test_config=[{"a": [1]}], command=["true"], objective=Objective("loss", "minimize"), pruning=pruning
    )


@pytest.fixture
def plateau():
    """The page's rule registered in this process (as a notebook would), removed afterwards."""
    namespace: dict = {}
    exec(compile(_blocks("python")[0], "docs/development.md (my_lab/pruning.py)", "exec"), namespace)
    register_pruner(namespace["PlateauRule"])
    yield namespace["PlateauRule"]
    unregister_pruner("plateau")


@pytest.mark.parametrize(
    ("options", "argument", "expected"),
    [
        ({"patience": 0}, "pruning.options.patience", "a whole number >= 1"),
        ({"patient": 2}, "pruning.options.patient", "patience or min_delta"),
        ({"min_delta": -1}, "pruning.options.min_delta", "a number >= 0"),
    ],
)
def test_the_pages_rule_refuses_its_bad_settings_when_the_spec_is_made(plateau, options, argument, expected):
    with pytest.raises(InvalidArgumentError) as err:
        _spec_pruned_by({"rule": "plateau", "options": options})
    assert err.value.argument.endswith(argument) and err.value.expected == expected


def test_settings_a_rule_does_not_read_are_refused_naming_the_rules_that_do(plateau):
    with pytest.raises(InvalidArgumentError) as err:
        _spec_pruned_by({"rule": "median", "options": {"patience": 2}})
    assert (
        err.value.argument.endswith("pruning.options")
        and err.value.expected == "options only with rule: optuna, plateau"
    )
