"""The Airflow UI plugin (entry point ``airflow.plugins``): the GPU board (Browse menu and a dashboard summary),
a "Sweeps" tab on DAG pages and a "Slurm job" tab on task instances, with their JSON API.

Every task process imports all plugins, so this module imports nothing heavy: the FastAPI app and the page list
are built on first use by the api-server (``cached_property``)."""

from __future__ import annotations

from functools import cached_property
from typing import Any

from airflow.plugins_manager import AirflowPlugin

from airflow_provider_gpusched import __version__
from airflow_provider_gpusched.links import GPU_BOARD_ROUTE, SLURM_JOB_ROUTE, SWEEPS_ROUTE, TIMELINE_ROUTE

URL_PREFIX = "/gpusched"


def bundle_url() -> str:
    """Absolute (Airflow 3.1/3.2 resolve a relative one against /static/assets/), with the ``[api] base_url`` path
    prefix, versioned against stale caches."""
    from urllib.parse import urlsplit

    from airflow.sdk import conf

    prefix = urlsplit(conf.get("api", "base_url", fallback="") or "").path.rstrip("/")
    return f"{prefix}{URL_PREFIX}/static/gpusched.js?v={__version__}"


class GpuschedPlugin(AirflowPlugin):
    name = "gpusched"

    @cached_property
    def fastapi_apps(self) -> list[dict[str, Any]]:  # type: ignore[override]
        from airflow_provider_gpusched.plugins.api import create_app

        return [{"app": create_app(), "url_prefix": URL_PREFIX, "name": "gpusched"}]

    @cached_property
    def react_apps(self) -> list[dict[str, Any]]:  # type: ignore[override]
        url = bundle_url()
        return [
            {
                "name": "GPU board",
                "bundle_url": url,
                "url_route": GPU_BOARD_ROUTE,
                "destination": "nav",
                "category": "browse",
            },
            {
                "name": "GPU timeline",
                "bundle_url": url,
                "url_route": TIMELINE_ROUTE,
                "destination": "nav",
                "category": "browse",
            },
            {"name": "GPUs", "bundle_url": url, "url_route": "gpusched-gpu-summary", "destination": "dashboard"},
            {"name": "Sweeps", "bundle_url": url, "url_route": SWEEPS_ROUTE, "destination": "dag"},
            {"name": "Slurm job", "bundle_url": url, "url_route": SLURM_JOB_ROUTE, "destination": "task_instance"},
        ]
