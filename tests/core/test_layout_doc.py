"""docs/development.md "Layout" stays true to the package.

The listing names every package and module by its path in the folder above it, on that folder's lines (its entry
line and the lines indented under it, less its subfolders' entries), and names no ``.py`` file the package lacks.
The drawing above it places every module in a row, and no module imports one of a row above its own (the imports
of scripts/code_figures.py's design view: lazy and ``if TYPE_CHECKING:`` imports count, moved aliases do not)."""

import importlib.util
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "development.md"
PACKAGE = REPO / "airflow_provider_gpusched"
SCRIPT = REPO / "scripts" / "code_figures.py"
#: a module or folder named in the text: ``leases.py``, ``gpu/leases.py``, ``sweep/`` (not ``core/gpu/x.py``'s tail)
NAME = re.compile(r"(?<![\w./])((?:\w+/)*\w+(?:\.py\b|/))")


def _section() -> str:
    text = DOC.read_text()
    return text[text.index("\n## Layout\n") : text.index("\n## Adding a search type\n")]


def _block(info: str) -> list[str]:
    """The lines of the section's first fenced block whose info string is ``info``."""
    blocks = [m for m in re.finditer(r"^```(\w*)\n(.*?)^```$", _section(), re.S | re.M) if m.group(1) == info]
    assert blocks, f"docs/development.md Layout: no ```{info} block"
    return blocks[0].group(2).splitlines()


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def listed_folders(lines: list[str]) -> dict[str, str]:
    """Folder path (``airflow_provider_gpusched/core/gpu/``) -> its own text in the listing. A folder's entry is a
    line two spaces deeper than its parent's whose first word ends in ``/``; what follows, up to the next line as
    shallow as the entry, is the folder's own, except its subfolders' entries."""
    own: dict[str, list[str]] = {}
    stack: list[tuple[int, str]] = []  # (indent, path) of the open folders
    for line in lines:
        if not line.strip():
            continue
        indent = _indent(line)
        while stack and indent <= stack[-1][0]:
            stack.pop()
        word = line.split()[0]
        child_indent = stack[-1][0] + 2 if stack else 0
        if word.endswith("/") and indent == child_indent:
            stack.append((indent, (stack[-1][1] if stack else "") + word))
        if stack:
            own.setdefault(stack[-1][1], []).append(line)
    return {path: "\n".join(text) for path, text in own.items()}


def package_files() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def package_folders() -> list[Path]:
    return sorted({p.parent for p in package_files()})


def _short(module: str) -> str:
    return module.removeprefix("airflow_provider_gpusched.")


def _rel(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


def _names_py(text: str, name: str) -> bool:
    return any(found == name for found in NAME.findall(text))


def test_the_listing_names_every_package_and_module_under_its_folder():
    folders = listed_folders(_block(""))
    missing = [f"{_rel(d)}/" for d in package_folders() if f"{_rel(d)}/" not in folders]
    missing += [
        _rel(f)
        for f in package_files()
        if f.name != "__init__.py" and not _names_py(folders.get(f"{_rel(f.parent)}/", ""), f.name)
    ]
    assert missing == [], (
        f"docs/development.md Layout does not name these under their folder's entry: {missing} "
        "(add each with a few words on what it owns)"
    )


@pytest.mark.parametrize("info", ["", "text"])
def test_every_module_the_layout_names_exists(info):
    files = [f.relative_to(PACKAGE).as_posix() for f in package_files()]
    text = "\n".join(_block(info))
    if info == "":  # the listing's package part: dags/, tests/... below it name files of their own
        text = text.split("\nui/")[0]
    named = {n for n in NAME.findall(text) if n.endswith(".py")}
    gone = sorted(n for n in named if not any(f == n or f.endswith("/" + n) for f in files))
    assert gone == [], f"docs/development.md Layout names modules the package does not have: {gone}"


def drawing_rows() -> dict[str, int]:
    """The drawing read as rows, top first: module or folder path (from the package root, ``core/gpu/``) -> its
    row. A line at indent 0 names the part below it (``airflow_provider_gpusched/``, ``core/``); a line at indent 2
    starts a row (a label, then names); a deeper line goes on with the row. Text in parentheses is a comment."""
    rows: list[tuple[str, str]] = []  # (part, text)
    part = ""
    for line in _block("text"):
        if _indent(line) == 0 and line.strip():
            part = "" if line.split()[0] == "airflow_provider_gpusched/" else line.split()[0]
        elif _indent(line) == 2:
            rows.append((part, line))
        elif rows and line.strip():
            rows[-1] = (part, rows[-1][1] + "\n" + line)
    place: dict[str, int] = {}
    for row, (part, text) in enumerate(rows):
        for name in NAME.findall(re.sub(r"\([^)]*\)", "", text)):
            assert place.get(part + name, row) == row, f"the drawing names {part + name} in two rows"
            place[part + name] = row
    return place


def _row(module: str, place: dict[str, int]) -> int | None:
    """The row of the longest name in the drawing that is the module's file or a folder above it."""
    path = module.replace(".", "/").removeprefix("airflow_provider_gpusched").lstrip("/")
    candidates = [path + ".py", path + "/", path + "/__init__.py"] if path else ["__init__.py"]
    parts = path.split("/")
    candidates += ["/".join(parts[:i]) + "/" for i in range(len(parts) - 1, 0, -1)]
    return next((place[c] for c in candidates if c in place), None)


def test_the_drawing_names_every_subpackage_of_core():
    place = drawing_rows()
    core = PACKAGE / "core"
    missing = [f"core/{d.name}/" for d in package_folders() if d.parent == core and f"core/{d.name}/" not in place]
    assert missing == [], f"docs/development.md Layout's drawing leaves out {missing}"


@pytest.mark.heavy  # 2.0 s of CPU in the fast tier's run of 2026-12-07 (docs/development.md Tiers)
def test_the_drawing_places_every_module_and_no_import_runs_up_it():
    spec = importlib.util.spec_from_file_location("code_figures", SCRIPT)
    figures = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(figures)
    graph = figures.import_graph(figures.modules(), type_checking=True)
    place = drawing_rows()
    core_init = "airflow_provider_gpusched.core"  # the core's docstring: it imports nothing
    rows = {m: _row(m, place) for m in graph if m != core_init}
    unplaced = sorted(_short(m) for m, r in rows.items() if r is None)
    assert unplaced == [], f"docs/development.md Layout's drawing places these in no row: {unplaced}"
    upward = sorted(
        f"{_short(m)} imports {_short(t)}, a row above it"
        for m, targets in graph.items()
        for t in targets
        if m in rows and t in rows and rows[t] < rows[m]  # rows count from the top
    )
    assert upward == [], f"docs/development.md Layout's drawing is not what imports what: {upward}"
