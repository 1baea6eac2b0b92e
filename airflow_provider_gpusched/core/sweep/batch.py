"""Deprecated alias: this module is now :mod:`airflow_provider_gpusched.core.gpu.sweep_batch` (issue 78: core/sweep split by what changes
together). Importing it warns and gives the new module itself."""

import sys

from airflow_provider_gpusched.core.deprecation import warn_moved_module
from airflow_provider_gpusched.core.gpu import sweep_batch as _new

warn_moved_module(__name__, "airflow_provider_gpusched.core.gpu.sweep_batch")

sys.modules[__name__] = _new
