#!/usr/bin/env bash
# The docs site: Sphinx with MyST over docs/ (the Markdown pages as they are, the API reference from the docstrings),
# strict: a warning is an error (-W), every cross-reference must resolve (-n), a broken link or renamed class fails.
# Output: build/docs/index.html. tests/test_docs_site.py runs the same build in the test suite.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/bootstrap.sh"
cd "$REPO"
python -m sphinx -b html -n -W --keep-going -q docs build/docs "$@"
echo "[gpusched] docs site: $REPO/build/docs/index.html"
