"""Figures on the package's shape: the longest functions, classes with many methods, import cycles and
upward imports.

    python scripts/code_figures.py [--top 10] [--json] [--runtime-only]

Every import the code runs counts, module-level or inside a function (a lazy import is still a dependency), and
so do imports under ``if TYPE_CHECKING:``: they are part of the design (a protocol or a types module breaks a
knot; a string annotation that hides one does not). ``--runtime-only`` leaves them out.
tests/core/test_architecture.py holds both views at zero cycles and zero upward imports (CI fails on any). A deprecated alias of a moved module (it calls
core/deprecation.py's ``warn_moved_module``) imports nothing in either view: it is no part of the design.

An import runs upward (:func:`upward_imports`, each with its reason) where
- the core imports an Airflow adapter (anything of the package outside ``core/``);
- a module of a core subpackage imports a core top-level module that itself imports that subpackage back (the
  top-level module is built on the subpackage);
- it matches a rule of :data:`LAYERS`, the layers the package is built in (the GPU mechanics under the quota
  policy and the fleet, the sweep under experiment tracking, the trial side under each backend, the task groups
  under the backend adapters, everything under the package root's import surface).
The first two are :func:`upward_arrows`; the architecture test holds every kind at zero."""

from __future__ import annotations

import argparse
import ast
import json
import os
import sys
from pathlib import Path

PACKAGE = "airflow_provider_gpusched"
ROOT = Path(__file__).resolve().parent.parent / PACKAGE


def modules(root: Path = ROOT) -> dict[str, Path]:
    out = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _resolve(name: str, known: dict[str, Path]) -> str | None:
    while name:
        if name in known:
            return name
        name = name.rpartition(".")[0]
    return None


def is_moved_alias(tree: ast.Module) -> bool:
    """The module is a deprecated alias of a moved one: it calls ``warn_moved_module`` (core/deprecation.py) at
    its top level."""
    return any(
        isinstance(stmt, ast.Expr)
        and isinstance(stmt.value, ast.Call)
        and getattr(stmt.value.func, "id", getattr(stmt.value.func, "attr", None)) == "warn_moved_module"
        for stmt in tree.body
    )


def import_graph(known: dict[str, Path], *, type_checking: bool = False) -> dict[str, set[str]]:
    """Module -> the package's modules it imports. ``type_checking``: count the imports under
    ``if TYPE_CHECKING:`` too (the design view), except the package root's own (they mirror its lazy import
    surface for type checkers: the root is the top, and an import of it is reported as upward instead).
    An import of the root itself (``import PACKAGE``, ``from PACKAGE import Name``) is an edge to ``PACKAGE``;
    ``from PACKAGE import submodule`` is an edge to the submodule only."""
    graph: dict[str, set[str]] = {}
    for mod, path in known.items():
        tree = ast.parse(path.read_text(), str(path))
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        edges: set[str] = set()
        typing_only = {
            id(n)
            for block in ast.walk(tree)
            if isinstance(block, ast.If)
            and getattr(block.test, "id", getattr(block.test, "attr", None)) == "TYPE_CHECKING"
            for stmt in block.body
            for n in ast.walk(stmt)
        }
        skip = typing_only if not type_checking or mod == PACKAGE else set()
        if is_moved_alias(tree):
            graph[mod] = set()  # an old name kept for a moved module: no part of the design, it goes later
            continue
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    pkg = package.split(".")
                    pkg = pkg[: len(pkg) - node.level + 1]
                    base = ".".join(pkg + ([base] if base else []))
                targets = [f"{base}.{a.name}" for a in node.names]
                if base != PACKAGE or any(f"{base}.{a.name}" not in known for a in node.names):
                    targets.append(base)  # the root counts only where a name is taken from it
            for target in targets:
                if not target.startswith(PACKAGE):
                    continue
                found = _resolve(target, known)
                if found == PACKAGE:
                    if target == PACKAGE and mod != PACKAGE:
                        edges.add(found)  # the root itself, not a module under it
                elif found and found != mod and not mod.startswith(found + "."):
                    edges.add(found)
        graph[mod] = edges
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


#: (importer, imported, why): an import by a module at or under ``importer`` of one at or under ``imported``
#: runs upward. Names are relative to the package; "" is the package root.
LAYERS: list[tuple[str, str, str]] = [
    ("core.gpu", "core.quota", "the GPU mechanics import the quota policy built on them (core/quota reads core/gpu)"),
    ("core.gpu", "core.fleet", "the GPU mechanics import the fleet view built on them (core/fleet reads core/gpu)"),
    ("core.sweep", "core.tracking", "the sweep imports the experiment tracking built on its store"),
    (
        "core.sweep.running.trial_run",
        "core.gpu",
        "the trial side, which every backend runs, imports one backend's package",
    ),
    (
        "core.sweep.running.trial_run",
        "core.slurm",
        "the trial side, which every backend runs, imports one backend's package",
    ),
    ("task_groups", "backends", "the task groups import the backend adapters built on them"),
    ("operators", "", "an operator imports the package root, the import surface that loads every operator"),
]


def _under(mod: str, prefix: str) -> bool:
    name = f"{PACKAGE}.{prefix}" if prefix else PACKAGE
    return mod == name or (bool(prefix) and mod.startswith(name + "."))


def upward_imports(
    graph: dict[str, set[str]], root: Path = ROOT, *, layers: list[tuple[str, str, str]] = LAYERS
) -> list[tuple[str, str, str]]:
    """(importer, imported, why) for each upward import of ``graph`` (see the module's docstring)."""
    core = f"{PACKAGE}.core"

    def subpackage(m: str) -> str | None:
        parts = m.split(".")
        if m.startswith(core + ".") and len(parts) >= 4 and (root / "core" / parts[2]).is_dir():
            return ".".join(parts[:3])
        return None

    out = []
    for mod, edges in sorted(graph.items()):
        for dep in sorted(edges):
            if mod.startswith(core) and not dep.startswith(core):
                out.append((mod, dep, "the core imports an Airflow adapter"))
                continue
            sub = subpackage(mod)
            if (
                sub
                and dep.startswith(core + ".")
                and not subpackage(dep)
                and any(d.startswith(sub + ".") for d in graph.get(dep, ()))
            ):
                built_on = f"{dep.removeprefix(PACKAGE + '.')} is built on {sub.removeprefix(PACKAGE + '.')}"
                out.append((mod, dep, f"{built_on} (it imports it back)"))
                continue
            why = next((w for a, b, w in layers if _under(mod, a) and _under(dep, b)), None)
            if why:
                out.append((mod, dep, why))
    return out


def upward_arrows(graph: dict[str, set[str]], root: Path = ROOT) -> list[tuple[str, str]]:
    """The upward imports the architecture test holds at zero today: the core importing an adapter, a core
    subpackage importing a core module built on it (no :data:`LAYERS` rule)."""
    return [(a, b) for a, b, _ in upward_imports(graph, root, layers=[])]


def functions(known: dict[str, Path]) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    funcs, classes = [], []
    for path in known.values():
        tree = ast.parse(path.read_text(), str(path))
        rel = os.path.relpath(path, ROOT.parent)
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                funcs.append((node.end_lineno - node.lineno + 1, f"{rel}:{node.lineno} {node.name}"))
            elif isinstance(node, ast.ClassDef):
                methods = [n for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
                classes.append((len(methods), f"{rel}:{node.lineno} {node.name}"))
    return sorted(funcs, reverse=True), sorted(classes, reverse=True)


def figures(top: int = 10, *, type_checking: bool = True) -> dict:
    known = modules()
    graph = import_graph(known, type_checking=type_checking)
    funcs, classes = functions(known)
    return {
        "imports": "design (TYPE_CHECKING included)" if type_checking else "runtime only",
        "longest_functions": [{"lines": n, "where": w} for n, w in funcs[:top]],
        "classes_over_20_methods": [{"methods": n, "where": w} for n, w in classes if n > 20],
        "cycles": cycles(graph),
        "upward_imports": [{"from": a, "to": b, "why": w} for a, b, w in upward_imports(graph)],
    }


def _short(module: str) -> str:
    return module.removeprefix(PACKAGE + ".") if module != PACKAGE else f"{PACKAGE} (the package root)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=10)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--runtime-only", action="store_true", help="leave out the imports under `if TYPE_CHECKING:`")
    args = parser.parse_args(argv)
    data = figures(args.top, type_checking=not args.runtime_only)
    if args.json:
        print(json.dumps(data, indent=2))
        return 0
    print("longest functions:")
    for f in data["longest_functions"]:
        print(f"  {f['lines']:4d}  {f['where']}")
    print("classes with more than 20 methods:")
    for c in data["classes_over_20_methods"]:
        print(f"  {c['methods']:4d}  {c['where']}")
    print(f"imports counted: {data['imports']}")
    print(f"import cycles: {len(data['cycles'])}")
    for c in data["cycles"]:
        print(f"  ({len(c)} modules) " + " <-> ".join(_short(m) for m in c))
    print(f"upward imports: {len(data['upward_imports'])}")
    for u in data["upward_imports"]:
        print(f"  {_short(u['from'])} -> {_short(u['to'])}: {u['why']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
