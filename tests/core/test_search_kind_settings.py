"""A search type owns its settings (issue 78 item 2): an installed kind with a typed settings record of its own is
read from its key (a spec file's top level, or ``search_settings`` in Python), checked with errors naming the key,
refused in a spec of another type, and described in the spec's JSON Schema — with no edit outside its module."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import pytest

from airflow_provider_gpusched.core.errors import InvalidArgumentError
from airflow_provider_gpusched.core.records import Settings, says
from airflow_provider_gpusched.core.sweep.definition.schema import sweep_schema
from airflow_provider_gpusched.core.sweep.definition.search_kind import (
    SearchKind,
    register_search_kind,
    unregister_search_kind,
)
from airflow_provider_gpusched.core.sweep.definition.sweep_spec import SweepSpec
from airflow_provider_gpusched.core.sweep.parts.expand import flatten, make_trial


@dataclass
class RepeatSettings:
    """The settings of ``search: repeat``."""

    repeats: Annotated[int, says("a whole number >= 1", ge=1)] = 2
    label: Annotated[str, says("a string")] = "r"

    def check(self, where: str) -> None:
        _REPEAT.check(self, where)


_REPEAT = Settings(RepeatSettings)


class RepeatKind(SearchKind["SweepSpec"]):
    """Each point of a fixed space, ``repeats`` times (a kind of another package, registered in code)."""

    name = "repeat"
    settings_key = "repeat"
    settings_class = RepeatSettings
    settings_expected = "a mapping such as {repeats: 3}"

    def check(self, spec: SweepSpec) -> None:
        self.parse_settings(spec)

    def stage_size(self, spec: SweepSpec) -> int:
        return self.parse_settings(spec).repeats

    def trials(self, spec: SweepSpec) -> list:
        settings = spec.search_settings["repeat"]
        base = {**spec.global_config, **{k: v[0] for k, v in flatten(spec.space).items()}}
        return [
            make_trial({**base, "repeat": i}, ["repeat"], spec.code_version, i, spec.label_format)
            for i in range(settings.repeats)
        ]


CMD = {"command": ["python", "train.py", "{trial_dir}"]}


@pytest.fixture
def repeat_kind():
    register_search_kind(RepeatKind)
    yield
    unregister_search_kind("repeat")


def test_a_kinds_settings_are_read_from_its_key_at_a_files_top_level(repeat_kind):
    spec = SweepSpec.from_dict(
        {"name": "s", "search": "repeat", "repeat": {"repeats": 3}, "space": {"lr": [0.1]}, **CMD}
    )
    assert spec.search_settings["repeat"] == RepeatSettings(repeats=3)
    assert [t.params["repeat"] for t in spec.trials()] == [0, 1, 2]


def test_in_python_they_are_given_under_search_settings_and_defaults_fill_in(repeat_kind):
    spec = SweepSpec(name="s", search="repeat", search_settings={"repeat": {"label": "x"}}, **CMD)
    assert spec.search_settings["repeat"] == RepeatSettings(repeats=2, label="x")
    assert SweepSpec(name="s", search="repeat", **CMD).search_settings["repeat"] == RepeatSettings()


@pytest.mark.parametrize(
    ("data", "where", "expected"),
    [
        ({"repeat": {"repeats": 0}}, "sweep: repeat.repeats", "a whole number >= 1"),
        ({"repeat": {"repeatz": 2}}, "sweep: repeat.repeatz", "repeats"),
        ({"repeat": 5}, "sweep: repeat", "a mapping such as {repeats: 3}"),
    ],
)
def test_a_bad_setting_is_named_by_its_key(repeat_kind, data, where, expected):
    with pytest.raises(InvalidArgumentError) as err:
        SweepSpec.from_dict({"name": "s", "search": "repeat", **data, **CMD})
    assert err.value.argument == where and expected in str(err.value)


def test_its_settings_are_refused_in_a_spec_of_another_type(repeat_kind):
    with pytest.raises(InvalidArgumentError, match="repeat settings only with search: repeat"):
        SweepSpec.from_dict({"name": "s", "search": "grid", "repeat": {"repeats": 3}, **CMD})


def test_without_the_kind_its_key_is_an_unknown_key():
    with pytest.raises(InvalidArgumentError) as err:
        SweepSpec.from_dict({"name": "s", "search": "grid", "repeat": {"repeats": 3}, **CMD})
    assert err.value.argument == "sweep: repeat"


def test_the_schema_describes_the_installed_kinds_settings(repeat_kind):
    schema = sweep_schema()
    own = schema["properties"]["repeat"]
    assert "repeat" in schema["properties"]["search"]["enum"]
    assert any("RepeatSettings" in str(part) for part in (own, schema["$defs"]))


def test_without_the_kind_the_schema_has_no_such_key():
    assert "repeat" not in sweep_schema()["properties"]
