"""The docs site builds strict (scripts/docs.sh: Sphinx + MyST, warnings are errors, every reference resolves): the
pages and the API reference from the docstrings; a broken link fails it, as the test shows on a copy."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.heavy  # Sphinx imports every documented module, Airflow's included: seconds of CPU

REPO = Path(__file__).resolve().parents[1]


def build(source: Path, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sphinx", "-b", "html", "-n", "-W", "--keep-going", "-q", str(source), str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
    )


def test_the_docs_site_builds_strict_and_a_broken_link_fails_it(tmp_path):
    done = build(REPO / "docs", tmp_path / "site")
    assert done.returncode == 0, done.stderr[-4000:]
    index = (tmp_path / "site" / "index.html").read_text()
    assert "Experiment tracking" in index and "API reference" in index
    api = (tmp_path / "site" / "api.html").read_text()
    for name in ("SweepSpec", "TrackingCallback", "SlurmJobOperator", "sweep_task_group", "MLflowCallback"):
        assert re.search(rf'id="airflow_provider_gpusched\.[\w.]*\.{name}"', api), name  # its own anchor
    # the same pages without the API reference (no module imported: seconds), a broken link and anchor added: the
    # build fails, and those two are all it says
    copy = tmp_path / "repo" / "docs"
    shutil.copytree(REPO / "docs", copy, ignore=shutil.ignore_patterns("api.md", "_build"))
    (copy.parent / "dags").symlink_to(REPO / "dags")  # the pages link to the example DAGs beside them
    index = copy / "index.md"
    index.write_text(index.read_text().replace("\napi\n", "\n"))
    page = copy / "queue.md"
    page.write_text(page.read_text() + "\nSee [the trackers](trackers.md) and [pruning](sweeps.md#no-such-part).\n")
    broken = build(copy, tmp_path / "broken")
    assert broken.returncode != 0
    assert "'myst' cross-reference target not found: 'trackers.md'" in broken.stderr
    assert "local id not found in doc 'sweeps': 'no-such-part'" in broken.stderr
    assert len([line for line in broken.stderr.splitlines() if "WARNING" in line]) == 2, broken.stderr
