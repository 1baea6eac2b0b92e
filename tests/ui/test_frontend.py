"""The UI's frontend project (ui/: TypeScript, React on the host UI's, Chakra UI, ECharts; docs/development.md "Working
on the UI"): its unit tests (vitest), its type check, its types generated from the plugin API's OpenAPI schema, and
the committed bundle (airflow_provider_gpusched/plugins/static/gpusched.js) as the lock file builds it again.

Node and the npm packages come from scripts/bootstrap.sh (Debian's nodejs and npm where node is missing; ``npm ci``
from ui/package-lock.json). Without them these tests fail, saying so: they are never skipped."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
UI = os.path.join(REPO, "ui")
BUNDLE = os.path.join(REPO, "airflow_provider_gpusched", "plugins", "static", "gpusched.js")


def node(
    *args: str, cwd: str = UI, timeout: float = 600, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("node")
    assert exe, "node is not installed: run scripts/bootstrap.sh (it installs Debian's nodejs and npm)"
    assert os.path.isdir(os.path.join(UI, "node_modules")), (
        "ui/node_modules is missing: run scripts/bootstrap.sh (npm ci in ui/)"
    )
    return subprocess.run([exe, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)


@pytest.mark.heavy  # 15.1 s of CPU in the fast tier's run of 2026-12-07 (docs/development.md Tiers)
def test_the_ui_unit_tests_pass():
    """vitest: the data transforms, the chart options and the pages rendered on the API's answers (tests in ui/tests)."""
    run = node(
        "node_modules/vitest/vitest.mjs", "run", "--reporter=dot", env={**os.environ, "NO_COLOR": "1", "CI": "1"}
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert " passed" in run.stdout and "failed" not in run.stdout.split("Tests")[-1], run.stdout[-2000:]


@pytest.mark.heavy  # imports the api-server's app (about 3 s of CPU): the suite's, not the fast tier's
def test_the_committed_openapi_schema_is_the_apis():
    """ui/openapi.json (what the TypeScript types are generated from) is the schema the plugin's API has now: a field
    renamed in Python without `npm run gen:api` fails here."""
    run = subprocess.run(
        [sys.executable, os.path.join(UI, "scripts", "openapi.py")], capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr[-3000:]
    with open(os.path.join(UI, "openapi.json")) as f:
        committed = json.load(f)
    assert json.loads(run.stdout) == committed, (
        "ui/openapi.json is not the API's schema: run `cd ui && npm run gen:api`"
    )


@pytest.mark.heavy
def test_the_types_are_generated_from_the_schema_and_the_pages_type_check(tmp_path):
    """src/api/schema.ts is what openapi-typescript makes of ui/openapi.json, and `tsc --noEmit` (strict) passes."""
    out = tmp_path / "schema.ts"
    run = node("scripts/gen-api.mjs", "--types-only", f"--out={out}")
    assert run.returncode == 0, run.stderr[-3000:]
    with open(os.path.join(UI, "src", "api", "schema.ts")) as f:
        assert out.read_text() == f.read(), "src/api/schema.ts is stale: run `cd ui && npm run gen:api`"
    check = node("node_modules/typescript/bin/tsc", "--noEmit", "-p", "tsconfig.json")
    assert check.returncode == 0, check.stdout[-4000:]


@pytest.mark.heavy
def test_a_field_renamed_in_the_api_fails_the_type_check(tmp_path):
    """The sweep objective's ``score_label`` renamed in the schema: the pages that read it no longer type-check."""
    copy = tmp_path / "ui"
    shutil.copytree(UI, copy, ignore=shutil.ignore_patterns("node_modules"), symlinks=True)
    os.symlink(os.path.join(UI, "node_modules"), copy / "node_modules")
    schema = json.loads((copy / "openapi.json").read_text())
    props = schema["components"]["schemas"]["ObjectiveView"]["properties"]
    props["score_name"] = props.pop("score_label")
    schema["components"]["schemas"]["ObjectiveView"]["required"] = [
        "score_name" if k == "score_label" else k for k in schema["components"]["schemas"]["ObjectiveView"]["required"]
    ]
    (copy / "openapi.json").write_text(json.dumps(schema))
    assert node("scripts/gen-api.mjs", "--types-only", cwd=str(copy)).returncode == 0
    check = node("node_modules/typescript/bin/tsc", "--noEmit", "-p", "tsconfig.json", cwd=str(copy))
    assert check.returncode != 0
    assert "Property 'score_label' does not exist" in check.stdout, check.stdout[-3000:]
    assert "src/pages/Sweeps.tsx" in check.stdout


@pytest.mark.heavy
def test_the_committed_bundle_is_what_the_lock_file_builds(tmp_path):
    """`npm run build` from ui/package-lock.json makes the committed bundle byte for byte (the wheel, the sdist and the
    Docker image carry that file; nothing is built at install time)."""
    copy = tmp_path / "ui"
    shutil.copytree(UI, copy, ignore=shutil.ignore_patterns("node_modules"), symlinks=True)
    os.symlink(os.path.join(UI, "node_modules"), copy / "node_modules")
    out = tmp_path / "out"
    run = node("node_modules/vite/bin/vite.js", "build", "--outDir", str(out), "--logLevel", "warn", cwd=str(copy))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    built = (out / "gpusched.js").read_bytes()
    with open(BUNDLE, "rb") as f:
        assert built == f.read(), (
            "the committed bundle is not what ui/ builds: run `cd ui && npm run build` and commit it"
        )
    assert b"GpuschedPlugin" in built and len(built) < 1_200_000
