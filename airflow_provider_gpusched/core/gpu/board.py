"""Deprecated alias: the GPU board is :mod:`airflow_provider_gpusched.core.board` (issue 78: it reads the fleet's
and the quotas' views, so it sits above the gpu package). Importing this module warns and re-exports the board's
names."""

from airflow_provider_gpusched.core.board import *  # noqa: F403
from airflow_provider_gpusched.core.deprecation import warn_moved_module

warn_moved_module(__name__, "airflow_provider_gpusched.core.board")
