"""`gpusched sweep schema`: the JSON Schema of a sweep spec file, made from the spec's own definitions, accepts the
specs the project ships and documents and refuses what the spec refuses by key (an unknown key, a misspelt
space type, an unknown search type or backend)."""

import dataclasses
import json
import re
from pathlib import Path

import jsonschema
import pytest
import yaml

from airflow_provider_gpusched.core.sweep.definition.search_kind import SEARCH_KINDS
from airflow_provider_gpusched.core.sweep.definition.sweep_spec import SweepSpec
from airflow_provider_gpusched.core.sweep.pruning_rules.base import pruner_names
from tests.cli import gpusched

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def validator():
    done = gpusched("sweep", "schema")
    assert done.returncode == 0, done.stderr
    schema = json.loads(done.stdout)
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def _documented_specs() -> list[tuple[str, dict]]:
    found = [
        (str(p.relative_to(REPO)), yaml.safe_load(p.read_text())) for p in sorted((REPO / "dags/sweeps").glob("*.yaml"))
    ]
    for doc in ("docs/development.md", "docs/sweeps.md"):
        for i, block in enumerate(re.findall(r"```yaml\n(.*?)```", (REPO / doc).read_text(), re.S)):
            data = yaml.safe_load(block)
            if (
                isinstance(data, dict)
                and "name" in data
                and data.get("search", "grid") in SEARCH_KINDS
                and (data.get("pruning") or {}).get("rule", "median") in pruner_names()
            ):
                # (the ablation kind of "Adding a search type" and the plateau rule of "Adding a pruning rule" are
                # registered only by their own tests)
                found.append((f"{doc} yaml block {i}", data))
    return found


def test_every_spec_the_project_ships_or_documents_is_valid(validator):
    specs = _documented_specs()
    assert len(specs) >= 4
    for where, data in specs:
        errors = [f"{list(e.path)}: {e.message}" for e in validator.iter_errors(data)]
        assert not errors, (where, errors)


def test_every_field_of_the_spec_is_in_the_schema(validator):
    fields = {f.name for f in dataclasses.fields(SweepSpec)} - {"where", "python_callable"}
    properties = validator.schema["properties"]
    assert fields | {"callable", "scheduler_config", "function_resource"} == set(properties)
    assert set(validator.schema["$defs"]["TrialResources"]["properties"]) >= {
        "gpus",
        "gpu_memory",
        "partition",
        "nodes",
    }


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ({"serach": "random"}, "serach"),
        ({"search": "bayes"}, "search"),
        # (a misspelt space type, {logunifrom: [...]}, reads as a nested parameter to a schema: the spec's own
        # check refuses it, gpusched sweep preview says so)
        ({"space": {"lr": {"uniform": [1]}}}, "space"),
        ({"resources": {"gpus": 1, "gpu_mem": "6GiB"}}, "resources"),
        ({"resources": {"backend": "k8s"}}, "resources"),
        ({"objective": {"metric": "acc", "mode": "maximise"}}, "objective"),
        ({"command": "python train.py"}, "command"),
        # the settings' bounds and choices are their annotations: the schema has them too
        ({"count": 0}, "count"),
        ({"grid_steps": 10**9}, "grid_steps"),
        ({"on_invalid_result": "ignore"}, "on_invalid_result"),
        ({"force_rerun": "no"}, "force_rerun"),
        ({"pruning": {"rule": "hyperband"}}, "pruning"),
        ({"label_format": {"indicator": "a/b"}}, "label_format"),
        ({"evolution": {"mutate_prob": 1.5}}, "evolution"),
        ({"resources": {"gpus": -1}}, "resources"),
    ],
)
def test_what_the_spec_refuses_the_schema_refuses_at_its_key(validator, change, key):
    data = {"name": "s", "command": ["python", "train.py"], "objective": "maximize acc", **change}
    errors = list(validator.iter_errors(data))
    assert errors, change
    assert any(key in [*e.path, *(e.message.split("'")[1:2])] for e in errors), [e.message for e in errors]


def test_a_setting_says_what_it_expects_in_the_schema(validator):
    """An editor shows the same words the spec's refusal uses."""
    count = next(a for a in validator.schema["properties"]["count"]["anyOf"] if a.get("type") == "integer")
    assert count["minimum"] == 1 and count["description"] == "an integer >= 1"
    with pytest.raises(Exception, match="count: expected an integer >= 1, got 0"):
        SweepSpec(name="s", search="random", count=0, space={"x": [1]}, command=["true"])
