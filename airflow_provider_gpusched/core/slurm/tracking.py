"""Deprecated alias: the shared Slurm poller is :mod:`airflow_provider_gpusched.core.slurm.poller` (issue 78;
"tracking" elsewhere means experiment tracking). Importing this module warns and re-exports the poller's names."""

from airflow_provider_gpusched.core.deprecation import warn_moved_module
from airflow_provider_gpusched.core.slurm.poller import PollProblem, SharedJobPoller

warn_moved_module(__name__, "airflow_provider_gpusched.core.slurm.poller")

__all__ = ["PollProblem", "SharedJobPoller"]
