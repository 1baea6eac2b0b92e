"""The package's layering, measured by scripts/code_figures.py: no import cycle among its modules, and no
upward arrow (a module of a core subpackage importing a core module built on the subpackages, or the core
importing the Airflow adapters). Lazy imports inside functions count; ``if TYPE_CHECKING:`` ones do not."""

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
    """The package's import graph (every module parsed): read once for the checks below."""
    return figures.import_graph(figures.modules())


def test_no_import_cycle(figures, graph):
    assert figures.cycles(graph) == []


def test_no_upward_arrow(figures, graph):
    assert figures.upward_arrows(graph) == []


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
