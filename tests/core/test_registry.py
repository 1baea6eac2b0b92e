"""One registry helper (core/registry.py) serves backends, pruning rules, search kinds and trackers: a class found
through an installed package's entry point (a dist-info folder on sys.path, the way pip leaves it), an explicit
registration that an entry point never replaces, a built-in put back by unregister, and an unknown name refused
naming the argument and the known names; and each of the two new groups (search kinds, trackers) found that way."""

import importlib
import sys
import threading
from pathlib import Path

import pytest

from airflow_provider_gpusched.core.errors import GpuschedError, InvalidArgumentError
from airflow_provider_gpusched.core.registry import Registry
from airflow_provider_gpusched.core.sweep.definition import search_kind as search_kinds
from airflow_provider_gpusched.core.sweep.definition.search_kind import SearchKind
from airflow_provider_gpusched.core.sweep.pruning_rules.base import Pruner
from airflow_provider_gpusched.core.tracking import config as tracking_config
from airflow_provider_gpusched.core.tracking.callback import TrackingCallback

RULES = "airflow_provider_gpusched.core.sweep.pruning_rules"
PRUNERS = f"{RULES}.median"  # where the built-in MedianRule lives


@pytest.fixture
def install(tmp_path, monkeypatch):
    """``install(package, {module: code}, {group: {name: target}})``: a package and its dist-info on sys.path,
    found by importlib.metadata as an installed distribution; gone afterwards."""
    lib = tmp_path / "lib"
    packages: list[str] = []

    def _install(package: str, modules: dict[str, str], groups: dict[str, dict[str, str]]) -> Path:
        (lib / package).mkdir(parents=True)
        (lib / package / "__init__.py").write_text("")
        for module, code in modules.items():
            (lib / package / f"{module}.py").write_text(code)
        info = lib / f"{package}-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {package}\nVersion: 1.0\n")
        (info / "entry_points.txt").write_text(
            "".join(
                f"[{group}]\n" + "".join(f"{n} = {t}\n" for n, t in entries.items())
                for group, entries in groups.items()
            )
        )
        monkeypatch.syspath_prepend(str(lib))
        importlib.invalidate_caches()
        packages.append(package)
        return lib

    yield _install
    for name in [m for m in sys.modules if any(m == p or m.startswith(p + ".") for p in packages)]:
        del sys.modules[name]


def _rules(group: str) -> Registry[Pruner]:
    return Registry(
        "pruning rule", Pruner, group, {"median": f"{PRUNERS}:MedianRule", "asha": f"{RULES}.asha:ASHARule"}
    )


RULE = """
from airflow_provider_gpusched.core.sweep.pruning_rules.base import Pruner


class Plateau(Pruner):
    name = "plateau"


class Median(Pruner):
    name = "median"
"""


def test_a_class_named_by_an_installed_packages_entry_point_is_found(install):
    group = "test_registry.rules_found"
    install("lab_rules", {"rules": RULE}, {group: {"plateau": "lab_rules.rules:Plateau"}})
    rules = _rules(group)
    assert rules.names() == ["median", "asha", "plateau"]
    assert "plateau" in rules
    found = rules.get("plateau", "pruning.rule")
    assert found.__module__ == "lab_rules.rules" and found.name == "plateau"
    assert rules.get("plateau", "pruning.rule") is found  # imported once


def test_an_entry_point_never_replaces_a_built_in_or_a_registered_class(install):
    group = "test_registry.rules_shadow"
    install(
        "lab_shadow",
        {"rules": RULE},
        {group: {"median": "lab_shadow.rules:Median", "plateau": "lab_shadow.rules:Plateau"}},
    )
    rules = _rules(group)

    class Mine(Pruner):
        name = "plateau"

    rules.register(Mine)  # before the entry points are read
    assert rules.get("median", "rule").__module__ == PRUNERS
    assert rules.get("plateau", "rule") is Mine
    rules.unregister("plateau")  # the installed package's class comes back
    assert rules.get("plateau", "rule").__module__ == "lab_shadow.rules"


def test_unregister_puts_a_built_in_back_and_forgets_a_new_name():
    rules = _rules("test_registry.rules_none")

    class StandIn(Pruner):
        name = "median"

    class Extra(Pruner):
        name = "extra"

    rules.register(StandIn)
    rules.register(Extra)
    assert rules.get("median", "rule") is StandIn
    assert rules.names() == ["median", "asha", "extra"]
    rules.unregister("median")
    rules.unregister("extra")
    assert rules.get("median", "rule").__module__ == PRUNERS
    assert rules.names() == ["median", "asha"]
    with pytest.raises(InvalidArgumentError):
        rules.get("extra", "rule")


def test_an_unknown_name_is_refused_naming_the_argument_and_the_known_names():
    rules = _rules("test_registry.rules_none")
    with pytest.raises(
        InvalidArgumentError, match=r"^sweep.yaml: pruning.rule: expected one of \['median', 'asha'\], got 'medain'$"
    ) as caught:
        rules.get("medain", "sweep.yaml: pruning.rule")
    assert caught.value.argument == "sweep.yaml: pruning.rule"
    with pytest.raises(InvalidArgumentError, match=r"got \['median'\]"):
        rules.get(["median"], "pruning.rule")  # not a name at all (unhashable)


def test_what_is_registered_must_be_a_named_subclass_and_a_bad_target_is_said_by_name():
    rules = _rules("test_registry.rules_none")
    with pytest.raises(InvalidArgumentError, match="register: expected a Pruner subclass with a name"):
        rules.register(SearchKind)
    with pytest.raises(InvalidArgumentError, match="register: expected a Pruner subclass with a name"):
        rules.register(Pruner)  # no name
    rules.register("os.path:join", name="joined")
    with pytest.raises(GpuschedError, match=r"pruning.rule: pruning rule 'joined': 'os.path:join' is not a Pruner"):
        rules.get("joined", "pruning.rule")


def test_concurrent_first_uses_load_one_class():
    rules = _rules("test_registry.rules_none")
    seen: list[type] = []
    threads = [threading.Thread(target=lambda: seen.append(rules.get("asha", "rule"))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(seen) == 8 and len(set(seen)) == 1


KIND = """
from airflow_provider_gpusched.core.sweep.searches.grid import GridKind


class Exhaustive(GridKind):
    name = "exhaustive"
"""


def test_a_search_kind_is_found_through_its_entry_point_group(install):
    install(
        "lab_kinds", {"kinds": KIND}, {search_kinds.ENTRY_POINT_GROUP: {"exhaustive": "lab_kinds.kinds:Exhaustive"}}
    )
    search_kinds.REGISTRY.refresh()
    try:
        from airflow_provider_gpusched.core.sweep.definition.sweep_spec import SweepSpec

        spec = SweepSpec(name="x", search="exhaustive", test_config=[{"a": [1, 2]}], command=["true"])
        assert type(spec.kind).__module__ == "lab_kinds.kinds"
        assert [t.params["a"] for t in spec.kind.trials(spec)] == [1, 2]
        assert "exhaustive" in search_kinds.SEARCH_KINDS
    finally:
        search_kinds.REGISTRY.refresh()


TRACKER = """
from airflow_provider_gpusched.core.tracking import TrackingCallback


class Lines(TrackingCallback):
    name = "lines"

    def __init__(self, prefix="trial"):
        self.prefix = prefix
"""


def test_a_tracker_is_found_through_its_entry_point_group_and_named_as_a_kind(install, tmp_path):
    install(
        "lab_tracking",
        {"tracking": TRACKER},
        {tracking_config.ENTRY_POINT_GROUP: {"lines": "lab_tracking.tracking:Lines"}},
    )
    tracking_config.TRACKERS.refresh()
    try:
        (config,) = tracking_config.parse_tracking([{"kind": "lines", "prefix": "t"}])
        callback = config.build(str(tmp_path))
        assert isinstance(callback, TrackingCallback) and type(callback).__module__ == "lab_tracking.tracking"
        assert callback.prefix == "t"  # its keys go to its constructor (no sweep_folder: it is not built in)
        with pytest.raises(
            InvalidArgumentError,
            match=r"tracking\[0\].kind: expected one of mlflow, tensorboard, "
            r"wandb, lines, got 'line'",
        ):
            tracking_config.parse_tracking([{"kind": "line"}])
    finally:
        tracking_config.TRACKERS.refresh()


def test_the_four_registries_are_the_one_helper():
    from airflow_provider_gpusched.core import backends
    from airflow_provider_gpusched.core.sweep.pruning_rules import base as pruner

    registries = {
        backends.REGISTRY.group: backends.REGISTRY,
        pruner.REGISTRY.group: pruner.REGISTRY,
        search_kinds.REGISTRY.group: search_kinds.REGISTRY,
        tracking_config.TRACKERS.group: tracking_config.TRACKERS,
    }
    assert sorted(registries) == [
        "airflow_provider_gpusched.backends",
        "airflow_provider_gpusched.pruners",
        "airflow_provider_gpusched.search_kinds",
        "airflow_provider_gpusched.tracking",
    ]
    assert all(isinstance(r, Registry) for r in registries.values())
