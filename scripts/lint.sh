#!/usr/bin/env bash
# The checks that read the code (docs/development.md "Checks that read the code"): ruff's rules, ruff format,
# mypy (strict on core/), from the dev extra in .venv, and the UI's TypeScript type check (tsc, strict; ui/node_modules
# from scripts/bootstrap.sh). CI runs it before the tests; .pre-commit-config.yaml runs the Python ones on each
# commit. `bash scripts/lint.sh --fix` lets ruff fix and format what it can first.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$REPO/scripts/bootstrap.sh"  # .venv with the dev extra (nothing to do once it is there)
cd "$REPO"
paths=(airflow_provider_gpusched tests dags bench scripts)
if [ "${1:-}" = "--fix" ]; then
  .venv/bin/ruff check --fix "${paths[@]}"
  .venv/bin/ruff format "${paths[@]}"
fi
status=0
.venv/bin/ruff check "${paths[@]}" || status=1
.venv/bin/ruff format --check "${paths[@]}" || status=1
.venv/bin/mypy || status=1  # the whole package, strict on core/ (pyproject [tool.mypy])
(cd ui && node node_modules/typescript/bin/tsc --noEmit -p tsconfig.json) || status=1  # the UI, strict TypeScript
exit $status
