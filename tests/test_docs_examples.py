"""The docs' runnable examples run as written: every ```python block right after a ``<!-- example: runs`` comment in
README.md and docs/*.md, as a script of its own in a fresh folder (on simulated GPUs, as the page says), and what the
page says it prints is what it prints. (docs/development.md's worked examples run in the tests of what they add:
tests/core/test_search_kinds.py, test_pruners.py, test_backends.py, test_tracking.py.)"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
MARK = re.compile(r"<!-- example: runs[^>]*-->\n```python\n(.*?)```", re.S)


def examples():
    for page in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        for n, code in enumerate(MARK.findall(page.read_text())):
            yield pytest.param(page, code, id=f"{page.relative_to(REPO)}[{n}]")


def test_the_pages_have_runnable_examples():
    assert len(list(examples())) >= 1


@pytest.mark.heavy  # 1.0 s of CPU in the fast tier's run of 2026-12-07 (docs/development.md Tiers)
@pytest.mark.parametrize(("page", "code"), list(examples()))
def test_a_docs_example_runs_as_written(page, code, tmp_path):
    script = tmp_path / "example.py"
    script.write_text(code)
    env = {
        **os.environ,
        "GPUSCHED_SIMULATE_GPUS": "4x24GiB",
        "AIRFLOW__GPUSCHED__GPU_STATE_DIR": str(tmp_path / "leases"),
        "TMPDIR": str(tmp_path),
        "PYTHONPATH": str(REPO),
    }
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, f"{page}: {done.stderr[-3000:]}"
    output = done.stdout + done.stderr
    # "# prints: X" and "# X" after a print(...) are what the page promises
    for line in code.splitlines():
        said = re.search(r"#\s*prints:\s*(.+)$", line) or (re.search(r"print\(.*\)\s*#\s*(.+)$", line))
        if said:
            assert said.group(1).strip() in output, (page, said.group(1), output[-2000:])
