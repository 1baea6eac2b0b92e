"""The plugin's JSON API and page bundle (mounted at ``/gpusched`` by the api-server): a router per page.

Every endpoint is behind Airflow's own auth: the GPU board needs a user with the cluster-activity view; a
sweep or Slurm job needs read access to its DAG (``dag_id`` in the path, so ``requires_access_dag`` sees it).
Data comes from Airflow's database (what tasks published as XCom, and task-instance states), never from a
Slurm command built from a request: the api-server may run on another host than the workers. The only
exceptions, both optional and bounded: a Slurm job's live state through one shared, cached poll of the
api-server's own local Slurm client, and output tails read from files under ``[gpusched] slurm_output_dir``.

* gpus.py: the GPU board, the timeline, a task's lease; telemetry.py: the api-server's own GPUs, sampled by a
  thread the app's lifespan starts and stops
* sweeps.py: the Sweeps tab; slurm.py: the Slurm tab
* xcoms.py: reading the published records, and the rules each page applies to them
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

STATIC_DIR = os.path.join(os.path.dirname(os.path.dirname(__file__)), "static")


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """The api-server's own GPUs are sampled while the app runs (Airflow enters a mounted app's lifespan)."""
    from airflow_provider_gpusched.plugins.api.telemetry import OWN_SAMPLER

    OWN_SAMPLER.start()
    try:
        yield
    finally:
        OWN_SAMPLER.stop()


def create_app() -> FastAPI:
    from airflow_provider_gpusched.plugins.api import gpus, slurm, sweeps

    app = FastAPI(
        title="gpusched",
        description="GPU board, sweeps and Slurm jobs of airflow-provider-gpusched",
        lifespan=lifespan,
    )
    for module in (gpus, sweeps, slurm):
        app.include_router(module.router)
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    return app
