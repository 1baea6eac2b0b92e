"""``gpusched sweep preview``, the dry run the docs tell a user to start with, works for every sweep spec the docs show:
each YAML spec in docs/*.md and dags/sweeps/ (the example DAGs' SweepSpecs: tests/airflow/test_preview_dag_specs.py),
as text and as JSON. Issue 76: it crashed on every asynchronous spec (``KeyError: 'would_skip'``), the docs' BOHB
example included."""

import json
import re
from pathlib import Path

import pytest
import yaml

from tests.cli import gpusched

REPO = Path(__file__).resolve().parents[2]
YAML_BLOCK = re.compile(r"```ya?ml\n(.*?)```", re.S)
#: a YAML block with a name and one of these is a whole sweep spec (the pages also show fragments: a pruning rule...)
SPEC_KEYS = {"search", "space", "test_config", "global_config"}
#: docs/development.md's specs name the search types its worked examples add (they run in the tests of those)
NOT_BUILT_IN = ("development.md",)


def doc_specs():
    for path in sorted((REPO / "dags" / "sweeps").glob("*.yaml")):
        yield pytest.param(path, id=f"dags/sweeps/{path.name}")  # (its own file: relative paths are to it)
    for page in sorted(p for p in (REPO / "docs").glob("*.md") if p.name not in NOT_BUILT_IN):
        for n, block in enumerate(YAML_BLOCK.findall(page.read_text())):
            try:
                data = yaml.safe_load(block)
            except yaml.YAMLError:
                continue  # (a page's YAML that is not a spec: a compose file excerpt, a template with placeholders)
            excerpt = "# ..." in block  # (a page's excerpt of a spec, the rest left out)
            if isinstance(data, dict) and "name" in data and SPEC_KEYS & set(data) and not excerpt:
                yield pytest.param(block, id=f"{page.name}[{n}]")


DOC_SPECS = list(doc_specs())


def test_the_docs_show_specs_of_every_mode():
    """(the collection above finds what it should: the asynchronous ones among them)"""
    assert len(DOC_SPECS) >= 6, len(DOC_SPECS)
    blocks = [p.values[0] for p in DOC_SPECS if isinstance(p.values[0], str)]
    assert any("asynchronous: true" in b for b in blocks) and any("pruner: hyperband" in b for b in blocks)


def preview_ok(done, where):
    assert done.returncode == 0, f"{where}: {done.stderr[-2000:]}"
    assert "Traceback" not in done.stderr, f"{where}: {done.stderr[-2000:]}"
    assert done.stdout.startswith("sweep "), f"{where}: {done.stdout[:500]}"


@pytest.mark.parametrize("block", DOC_SPECS)
def test_a_docs_spec_previews(block, tmp_path):
    spec = block if isinstance(block, Path) else tmp_path / "spec.yaml"
    if not isinstance(block, Path):
        spec.write_text(block)
    root = tmp_path / "results"
    root.mkdir()
    preview_ok(gpusched("sweep", "preview", str(spec), "--results-root", str(root), cwd=tmp_path), block)
    as_json = gpusched("sweep", "preview", str(spec), "--results-root", str(root), "--json", cwd=tmp_path)
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout)["trials"] >= 1
    assert not list(root.iterdir())  # a preview writes nothing


def test_an_asynchronous_preview_says_what_a_run_would_skip(tmp_path):
    """An asynchronous search's preview counts the trials earlier runs ended, as a grid's does."""
    spec = tmp_path / "bohb.yaml"
    spec.write_text(
        "name: bohb\nsearch: optuna\nasynchronous: true\ncount: 6\nmax_workers: 2\nsampler: tpe\n"
        "space: {lr: {loguniform: [1.0e-4, 1.0e-1]}}\ncommand: [python, train.py, --lr, '{lr}']\n"
        "objective: {metric: accuracy, mode: maximize}\n"
        "pruning: {rule: optuna, pruner: hyperband, options: {min_resource: 1, max_resource: 9}}\n"
    )
    root = tmp_path / "results"
    for n, state in enumerate(["succeeded", "pruned", "failed"]):
        folder = root / "bohb" / "trials" / f"{n:03d}"
        folder.mkdir(parents=True)
        (folder / "status.json").write_text(json.dumps({"state": state}))
    done = gpusched("sweep", "preview", str(spec), "--results-root", str(root))
    preview_ok(done, "bohb")
    assert "2 worker(s)" in done.stdout and "would run 4, skip 2" in done.stdout, done.stdout
    forced = gpusched("sweep", "preview", str(spec), "--results-root", str(root), "--force-rerun", "--json")
    assert json.loads(forced.stdout)["would_run"] == 6
    labels = gpusched("sweep", "preview", str(spec), "--results-root", str(root), "--labels")
    assert labels.returncode == 2 and "as its workers ask: no labels before it runs" in labels.stderr, labels.stderr
