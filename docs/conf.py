"""The docs site (Sphinx with MyST: the Markdown pages as they are, the API reference from the docstrings).

Built strict by tests/test_docs_site.py and `bash scripts/docs.sh` (warnings are errors, every cross-reference must
resolve: a broken link or a renamed class fails the build)."""

import os
import sys

sys.path.insert(0, os.path.abspath(".."))
from airflow_provider_gpusched import __version__

project = "airflow-provider-gpusched"
author = "airflow-provider-gpusched developers"
copyright = "2026, airflow-provider-gpusched developers"
release = version = __version__

extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx.ext.viewcode"]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build", "grafana", "ui/*.png"]
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence"]
html_theme = "furo"
html_title = f"airflow-provider-gpusched {release}"
nitpicky = True
# the standard library's, Airflow's and other packages' names: no intersphinx inventory can be fetched here (CI has no
# network but package registries), so references to them are not checked; every reference to this package's own
# names must resolve
nitpick_ignore_regex = [
    # a string annotation Sphinx splits at its comma (``'dict[str, Any]'``): not a reference to anything
    (r"py:class", r"'?(dict|list|tuple|set|type)\[.*"),
    (r"py:.*", r"(collections\.abc|typing|datetime|pathlib|argparse|threading|airflow|pendulum|optuna)\..*"),
]
autodoc_member_order = "bysource"
