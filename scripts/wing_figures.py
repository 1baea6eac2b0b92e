"""Figures on the backends' wings: what outside a wing knows of it.

    python scripts/wing_figures.py [--json]

A backend is one wing (issue 78): its core package and its Airflow modules. For each wing this lists
- the modules outside the wing that import one of its modules (the design view of scripts/code_figures.py:
  lazy and ``if TYPE_CHECKING:`` imports count, a deprecated alias of a moved module imports nothing);
- the places outside the wing that compare a value against the backend's name as a string literal
  (``x == "slurm"``, ``x in ("slurm", "local")``, ``case "slurm":``); a default such as ``backend="local"`` is
  no comparison and is not listed;
- the places outside the wing that look the backend up by a literal name (``get_backend("slurm")``).

tests/core/test_wing_boundary.py holds the imports to its commented allow-list, so the boundary cannot grow
unnoticed."""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import sys
from pathlib import Path

_spec = importlib.util.spec_from_file_location("code_figures", Path(__file__).resolve().parent / "code_figures.py")
assert _spec and _spec.loader
code_figures = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(code_figures)

PACKAGE = code_figures.PACKAGE
ROOT = code_figures.ROOT

#: backend name -> the modules (or packages, with all under them) of its wing, relative to the package
WINGS: dict[str, tuple[str, ...]] = {
    "local": (
        "core.gpu",
        "backends.local",
        "provider_parts.local",
        "operators.local_gpu",
        "hooks.local_gpu",
        "sensors.local_gpu",
        "triggers.local_gpu",
        "decorators.local_gpu",
    ),
    "slurm": (
        "core.slurm",
        "backends.slurm",
        "provider_parts.slurm",
        "operators.slurm",
        "hooks.slurm",
        "sensors.slurm",
        "triggers.slurm",
        "decorators.slurm",
    ),
}


def in_wing(module: str, wing: str) -> bool:
    """``module`` (a full dotted name) belongs to ``wing``."""
    rel = module.removeprefix(PACKAGE + ".")
    return any(rel == m or rel.startswith(m + ".") for m in WINGS[wing])


def outside_imports(graph: dict[str, set[str]] | None = None) -> dict[str, dict[str, list[str]]]:
    """wing -> {module outside it: the wing's modules it imports}, short names, sorted."""
    if graph is None:
        graph = code_figures.import_graph(code_figures.modules(), type_checking=True)
    out: dict[str, dict[str, list[str]]] = {}
    for wing in WINGS:
        found: dict[str, list[str]] = {}
        for mod, edges in sorted(graph.items()):
            if in_wing(mod, wing):
                continue
            inside = sorted(_short(d) for d in edges if in_wing(d, wing))
            if inside:
                found[_short(mod)] = inside
        out[wing] = found
    return out


def _names_in(node: ast.expr) -> set[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return {e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
    return set()


def name_comparisons(known: dict[str, Path] | None = None) -> dict[str, list[str]]:
    """wing -> ``module:line`` of each comparison against its name outside it."""
    known = known or code_figures.modules()
    out: dict[str, list[str]] = {wing: [] for wing in WINGS}
    for mod, path in known.items():
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            names: set[str] = set()
            if isinstance(node, ast.Compare) and all(
                isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)) for op in node.ops
            ):
                for side in (node.left, *node.comparators):
                    names |= _names_in(side)
            elif isinstance(node, ast.match_case) and isinstance(node.pattern, ast.MatchValue):
                names |= _names_in(node.pattern.value)
            for wing in WINGS:
                if wing in names and not in_wing(mod, wing):
                    line = node.pattern.lineno if isinstance(node, ast.match_case) else getattr(node, "lineno", 0)
                    out[wing].append(f"{_short(mod)}:{line}")
    return {wing: sorted(places) for wing, places in out.items()}


def name_lookups(known: dict[str, Path] | None = None) -> dict[str, list[str]]:
    """wing -> ``module:line`` of each ``get_backend("<its name>")`` outside it."""
    known = known or code_figures.modules()
    out: dict[str, list[str]] = {wing: [] for wing in WINGS}
    for mod, path in known.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "id", getattr(node.func, "attr", None)) == "get_backend"
                and node.args
            ):
                for wing in _names_in(node.args[0]) & set(WINGS):
                    if not in_wing(mod, wing):
                        out[wing].append(f"{_short(mod)}:{node.lineno}")
    return {wing: sorted(places) for wing, places in out.items()}


def figures() -> dict:
    imports = outside_imports()
    return {
        "wings": {wing: list(mods) for wing, mods in WINGS.items()},
        "outside_imports": imports,
        "name_comparisons": name_comparisons(),
        "name_lookups": name_lookups(),
    }


def _short(module: str) -> str:
    return module.removeprefix(PACKAGE + ".") if module != PACKAGE else f"{PACKAGE} (the package root)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    data = figures()
    if args.json:
        print(json.dumps(data, indent=2))
        return 0
    for wing in WINGS:
        importers = data["outside_imports"][wing]
        print(f"wing {wing}: {len(importers)} modules outside import it")
        for mod, targets in importers.items():
            print(f"  {mod} -> {', '.join(targets)}")
        places = data["name_comparisons"][wing]
        print(f"wing {wing}: {len(places)} comparisons against {wing!r} outside it")
        for place in places:
            print(f"  {place}")
        lookups = data["name_lookups"][wing]
        print(f"wing {wing}: {len(lookups)} get_backend({wing!r}) outside it")
        for place in lookups:
            print(f"  {place}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
