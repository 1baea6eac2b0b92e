"""Figures on the package's shape: the longest functions, classes with many methods, import cycles and
upward arrows (a module of a core subpackage importing a core top-level module that itself reaches back into
the subpackages, or the core importing the Airflow adapters).

    python scripts/code_figures.py [--top 10] [--json]

Every import the code runs counts, module-level or inside a function (a lazy import is still a dependency);
imports under ``if TYPE_CHECKING:`` are for annotations only and do not."""

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


def import_graph(known: dict[str, Path]) -> dict[str, set[str]]:
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
        for node in ast.walk(tree):
            if id(node) in typing_only:
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
                targets = [f"{base}.{a.name}" for a in node.names] + [base]
            for target in targets:
                if not target.startswith(PACKAGE):
                    continue
                found = _resolve(target, known)
                if found and found != mod and not mod.startswith(found + ".") and found != PACKAGE:
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


def upward_arrows(graph: dict[str, set[str]], root: Path = ROOT) -> list[tuple[str, str]]:
    core = f"{PACKAGE}.core"

    def subpackage(m: str) -> bool:
        return (
            m.startswith(core + ".")
            and m.count(".") >= 3
            and m.split(".")[2] != "__init__"
            and (root / "core" / m.split(".")[2]).is_dir()
        )

    out = []
    for mod, edges in graph.items():
        if not mod.startswith(core):
            continue
        for dep in sorted(edges):
            if not dep.startswith(core):
                out.append((mod, dep))  # the core reaching into the Airflow adapters
            elif subpackage(mod) and not subpackage(dep) and any(subpackage(d) for d in graph.get(dep, ())):
                out.append((mod, dep))  # a subpackage importing a core module built on the subpackages
    return out


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


def figures(top: int = 10) -> dict:
    known = modules()
    graph = import_graph(known)
    funcs, classes = functions(known)
    return {
        "longest_functions": [{"lines": n, "where": w} for n, w in funcs[:top]],
        "classes_over_20_methods": [{"methods": n, "where": w} for n, w in classes if n > 20],
        "cycles": cycles(graph),
        "upward_arrows": [list(e) for e in upward_arrows(graph)],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=10)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    data = figures(args.top)
    if args.json:
        print(json.dumps(data, indent=2))
        return 0
    print("longest functions:")
    for f in data["longest_functions"]:
        print(f"  {f['lines']:4d}  {f['where']}")
    print("classes with more than 20 methods:")
    for c in data["classes_over_20_methods"]:
        print(f"  {c['methods']:4d}  {c['where']}")
    print(f"import cycles: {len(data['cycles'])}")
    for c in data["cycles"]:
        print("  " + " <-> ".join(m.removeprefix(PACKAGE + ".") for m in c))
    print(f"upward arrows: {len(data['upward_arrows'])}")
    for a, b in data["upward_arrows"]:
        print(f"  {a.removeprefix(PACKAGE + '.')} -> {b.removeprefix(PACKAGE + '.')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
