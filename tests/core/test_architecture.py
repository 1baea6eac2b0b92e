"""The package's layering, measured by scripts/code_figures.py: no import cycle among its modules, and no
upward import (a module of a core subpackage importing a core module built on the subpackage, the core importing
the Airflow adapters, or an import against a rule of its LAYERS). Lazy imports inside functions count, and so do
``if TYPE_CHECKING:`` ones: they are part of the design (the view ``python scripts/code_figures.py`` prints)."""

import importlib.util
import textwrap
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "code_figures.py"


@pytest.fixture(scope="module")
def figures():
    spec = importlib.util.spec_from_file_location("code_figures", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def graph(figures):
    """The package's import graph (every module parsed), TYPE_CHECKING imports included: read once."""
    return figures.import_graph(figures.modules(), type_checking=True)


@pytest.mark.heavy  # 1.6 s of CPU in the fast tier's run of 2026-12-07 (docs/development.md Tiers)
def test_no_import_cycle(figures, graph):
    assert figures.cycles(graph) == []


def test_no_upward_import(figures, graph):
    assert figures.upward_imports(graph) == []


@pytest.mark.heavy  # 1.4 s of CPU in the fast tier's run of 2026-12-07 (docs/development.md Tiers)
def test_the_runtime_view_is_clean_too(figures):
    runtime = figures.import_graph(figures.modules())
    assert figures.cycles(runtime) == [] and figures.upward_arrows(runtime) == []


def test_the_checks_find_a_cycle_and_an_upward_arrow_where_there_is_one(figures, tmp_path):
    """The two checks above would pass on a graph they cannot read; here they must find what was planted."""
    root = tmp_path / figures.PACKAGE
    (root / "core" / "gpu").mkdir(parents=True)
    files = {
        "__init__.py": "",
        "core/__init__.py": "",
        "core/gpu/__init__.py": "",
        # an upward arrow: a subpackage module importing a core module that uses the subpackage (lazily)
        "core/gpu/leases.py": f"from {figures.PACKAGE}.core.queue import StopRequest\n",
        "core/queue.py": f"def f():\n    from {figures.PACKAGE}.core.gpu import leases\n",
        # a cycle through a lazy import; a TYPE_CHECKING import is not one
        "core/a.py": f"from {figures.PACKAGE}.core import b\n",
        "core/b.py": f"def g():\n    from {figures.PACKAGE}.core.a import x\n",
        "core/c.py": textwrap.dedent(f"""\
            from typing import TYPE_CHECKING
            if TYPE_CHECKING:
                from {figures.PACKAGE}.core.a import x
            """),
    }
    for name, text in files.items():
        (root / name).write_text(text)
    graph = figures.import_graph(figures.modules(root))
    package = figures.PACKAGE
    found = [sorted(c) for c in figures.cycles(graph)]
    assert [f"{package}.core.a", f"{package}.core.b"] in found
    assert [f"{package}.core.gpu.leases", f"{package}.core.queue"] in found
    assert not any(f"{package}.core.c" in c for c in found)
    assert (f"{package}.core.gpu.leases", f"{package}.core.queue") in figures.upward_arrows(graph, root)


def test_the_design_view_counts_type_checking_imports_and_the_layers(figures, tmp_path):
    """``python scripts/code_figures.py`` counts imports under ``if TYPE_CHECKING:`` (a string annotation does not
    break a knot) and the layers of :data:`LAYERS`; a deprecated alias of a moved module is left out."""
    package = figures.PACKAGE
    root = tmp_path / package
    for folder in ("core/gpu", "core/quota", "operators", "task_groups", "backends"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    checking = f"from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from {package}.core.a import x\n"
    files = {
        "__init__.py": f"from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from {package}.operators.op import Op\n",
        "core/__init__.py": "",
        "core/a.py": f"from {package}.core import b\n",
        "core/b.py": checking,  # a <-> b only by design
        "core/gpu/__init__.py": "",
        "core/gpu/leases.py": f"from {package}.core.quota.host import HostQuotas\n",
        "core/gpu/board.py": f"from {package}.core.board import *\nwarn_moved_module(__name__, 'x')\n",
        "core/board.py": f"from {package}.core.gpu import leases\n",
        "core/quota/__init__.py": "",
        "core/quota/host.py": "",
        "operators/__init__.py": "",
        "operators/op.py": f"import {package}\nfrom {package} import settings\n",
        "settings.py": "",
        "task_groups/__init__.py": "",
        "task_groups/sweep.py": f"from {package}.backends import local\n",
        "backends/__init__.py": "",
        "backends/local.py": "",
    }
    for name, text in files.items():
        (root / name).write_text(text)
    known = figures.modules(root)
    runtime = figures.import_graph(known)
    design = figures.import_graph(known, type_checking=True)
    assert figures.cycles(runtime) == []
    assert figures.cycles(design) == [[f"{package}.core.a", f"{package}.core.b"]]  # the root's own do not count
    up = {
        (a.removeprefix(package + "."), b.removeprefix(package + "."))
        for a, b, _ in figures.upward_imports(design, root)
    }
    assert up == {
        ("core.gpu.leases", "core.quota.host"),
        ("operators.op", package),  # the root named; `from root import settings` is the settings module
        ("task_groups.sweep", "backends"),
        ("task_groups.sweep", "backends.local"),
    }
    assert figures.upward_arrows(design, root) == []  # none of these is one of the two rules enforced today
    assert design[f"{package}.core.gpu.board"] == set()  # the alias, left out


@pytest.mark.heavy  # 1.5 s of CPU in the fast tier's run of 2026-12-07 (docs/development.md Tiers)
def test_the_gpu_package_imports_neither_the_quotas_nor_the_fleet_nor_the_board(figures):
    """Issue 78: the lease manager is given its quota gate (core/gpu/gate.py), the board sits above core/gpu;
    TYPE_CHECKING imports count."""
    design = figures.import_graph(figures.modules(), type_checking=True)
    gpu = f"{figures.PACKAGE}.core.gpu"
    above = [f"{figures.PACKAGE}.core.{m}" for m in ("quota", "fleet", "board")]
    wrong = [
        (m, d) for m, deps in design.items() if m.startswith(gpu + ".") for d in deps if d.startswith(tuple(above))
    ]
    assert wrong == []
