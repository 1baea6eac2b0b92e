"""The plugin's JSON API and page bundle (mounted at ``/gpusched`` by the api-server): a router per page.

Every endpoint is behind Airflow's own auth: the GPU board needs a user with the cluster-activity view; a
sweep or Slurm job needs read access to its DAG (``dag_id`` in the path, so ``requires_access_dag`` sees it); the
schema and its pages (``/openapi.json``, ``/docs``, ``/redoc``) a logged-in user. Parameters are checked: a
number out of its range, not a number, or text with control characters is a 422 naming it, never a 500.
Data comes from Airflow's database (what tasks published as XCom, and task-instance states), never from a
Slurm command built from a request: the api-server may run on another host than the workers. The only
exceptions, both optional and bounded: a Slurm job's live state through one shared, cached poll of the
api-server's own local Slurm client, and output tails read from the task instance's own folder under
``[gpusched] slurm_output_dir`` (never a path a record names).

* gpus.py: the GPU board, the timeline, a task's lease; telemetry.py: the api-server's own GPUs, sampled by a
  thread the app's lifespan starts and stops
* sweeps.py: the Sweeps tab; slurm.py: the Slurm tab
* xcoms.py: reading the published records, and the rules each page applies to them
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI, HTTPException, Request
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

    # the schema and its pages are served behind the same login as the API (FastAPI's own are public): see
    # :func:`add_docs`
    app = FastAPI(
        title="gpusched",
        description="GPU board, sweeps and Slurm jobs of airflow-provider-gpusched",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        dependencies=[Depends(plain_parameters)],
    )
    for module in (gpus, sweeps, slurm):
        app.include_router(module.router)
    add_docs(app)
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    return app


def plain_parameters(request: Request) -> None:
    """A path or query parameter holding a NUL or another control character names no DAG, run, task or sweep:
    422 naming it (a database such as PostgreSQL would fail on a NUL, answering 500)."""
    for where, params in (("path", list(request.path_params.items())), ("query", request.query_params.multi_items())):
        for name, value in params:
            if isinstance(value, str) and any(ord(c) < 32 or ord(c) == 127 for c in value):
                raise HTTPException(
                    422, f"{where} parameter {name!r}: expected text without control characters, got {value[:80]!r}"
                )


def add_docs(app: FastAPI) -> None:
    """``/openapi.json``, ``/docs`` and ``/redoc``, for a logged-in user (Airflow's token or its UI's cookie: the
    pages' own request for the schema carries the cookie), out of the schema itself."""
    from airflow.api_fastapi.core_api.security import get_user
    from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
    from fastapi.responses import HTMLResponse, JSONResponse

    def schema_url(request: Request) -> str:
        return request.scope.get("root_path", "").rstrip("/") + "/openapi.json"

    login = [Depends(get_user)]

    @app.get("/openapi.json", include_in_schema=False, dependencies=login)
    def openapi() -> JSONResponse:
        return JSONResponse(app.openapi())

    @app.get("/docs", include_in_schema=False, dependencies=login)
    def docs(request: Request) -> HTMLResponse:
        return get_swagger_ui_html(openapi_url=schema_url(request), title=f"{app.title} - Swagger UI")

    @app.get("/redoc", include_in_schema=False, dependencies=login)
    def redoc(request: Request) -> HTMLResponse:
        return get_redoc_html(openapi_url=schema_url(request), title=f"{app.title} - ReDoc")
