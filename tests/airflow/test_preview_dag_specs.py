"""``gpusched sweep preview`` works for the SweepSpec of every example DAG (dags/*.py), named as ``module:ATTR``, as
the docs' YAML specs do (tests/core/test_preview_every_spec.py)."""

import ast
from pathlib import Path

import pytest

from tests.cli import gpusched

REPO = Path(__file__).resolve().parents[2]


def dag_specs():
    """(module, ATTR) of each module-level ``NAME = SweepSpec(...)`` in dags/*.py."""
    for path in sorted((REPO / "dags").glob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if (
                isinstance(node, ast.Assign)
                and isinstance(node.value, ast.Call)
                and getattr(node.value.func, "id", None) == "SweepSpec"
            ):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        yield pytest.param(path.stem, target.id, id=f"{path.stem}:{target.id}")


DAG_SPECS = list(dag_specs())


def test_the_example_dags_hold_specs_of_every_mode():
    assert len(DAG_SPECS) >= 8 and "digits_bohb" in {p.values[0] for p in DAG_SPECS}, DAG_SPECS


@pytest.mark.parametrize(("module", "attr"), DAG_SPECS)
def test_an_example_dags_spec_previews(module, attr, tmp_path):
    root = tmp_path / "results"
    root.mkdir()
    done = gpusched("sweep", "preview", f"{module}:{attr}", "--results-root", str(root), pythonpath=REPO / "dags")
    assert done.returncode == 0 and "Traceback" not in done.stderr, f"{module}:{attr}: {done.stderr[-2000:]}"
    assert done.stdout.startswith("sweep "), done.stdout[:500]
    assert not list(root.iterdir())  # a preview writes nothing
