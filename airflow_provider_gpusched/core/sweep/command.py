"""Deprecated alias: this module is now :mod:`airflow_provider_gpusched.core.sweep.parts.command` (issue 78: core/sweep split by what changes
together). Importing it warns and gives the new module itself."""

import sys

from airflow_provider_gpusched.core.deprecation import warn_moved_module
from airflow_provider_gpusched.core.sweep.parts import command as _new

warn_moved_module(__name__, "airflow_provider_gpusched.core.sweep.parts.command")

sys.modules[__name__] = _new
