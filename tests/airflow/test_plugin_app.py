"""The plugin's FastAPI app on its own: a router per page, every endpoint in its OpenAPI, and the api-server's own
GPU sampler started by the app's lifespan and stopped with it (never by a request)."""

import pytest

pytestmark = pytest.mark.airflow

ENDPOINTS = {
    "/api/gpus",
    "/api/timeline",
    "/api/dags/{dag_id}/runs/{run_id}/tasks/{task_id}/lease",
    "/api/dags/{dag_id}/sweeps",
    "/api/dags/{dag_id}/sweeps/trial",
    "/api/dags/{dag_id}/sweeps/importance",
    "/api/dags/{dag_id}/sweeps/compare",
    "/api/dags/{dag_id}/runs/{run_id}/tasks/{task_id}/slurm",
}


def test_the_openapi_describes_every_endpoint_under_its_page():
    from airflow_provider_gpusched.plugins.api import create_app

    schema = create_app().openapi()
    assert set(schema["paths"]) == ENDPOINTS
    for path, methods in schema["paths"].items():
        (operation,) = methods.values()
        assert operation["summary"] and operation["tags"] in (["GPUs"], ["Sweeps"], ["Slurm"]), path
        assert "200" in operation["responses"], path
    params = {p["name"] for p in schema["paths"]["/api/dags/{dag_id}/sweeps/trial"]["get"]["parameters"]}
    assert params == {"dag_id", "run_id", "group", "trial_id"}


def test_the_own_gpu_sampler_runs_while_the_app_does():
    from fastapi.testclient import TestClient

    from airflow_provider_gpusched.plugins.api import create_app
    from airflow_provider_gpusched.plugins.api.telemetry import OWN_SAMPLER

    OWN_SAMPLER.stop()
    assert OWN_SAMPLER.record() is None
    with TestClient(create_app()):
        record = OWN_SAMPLER.record()  # the simulated 4 x 24 GiB of the tests' settings
        assert record is not None and record["sampled_by"] == "the api-server"
        assert record["source"] == "simulated"
    assert OWN_SAMPLER.record() is None  # stopped with the app
