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


def _resolve(schema: dict, node: dict) -> dict:
    while "$ref" in node:
        node = schema["components"]["schemas"][node["$ref"].rsplit("/", 1)[-1]]
    return node


def test_every_endpoint_answers_with_a_declared_model_whose_records_are_the_core_ones():
    """Issue 55: each answer is a typed model in the OpenAPI (not a bare object), and where it carries a record
    (a lease, a wait, GPU time) it is the record's own definition, the one its writer and reader use."""
    from airflow_provider_gpusched.plugins.api import create_app

    schema = create_app().openapi()
    for path, methods in schema["paths"].items():
        (operation,) = methods.values()
        answer = operation["responses"]["200"]["content"]["application/json"]["schema"]
        models = [_resolve(schema, m) for m in answer.get("anyOf", [answer])]
        for model in models:
            assert model.get("properties") and model.get("required"), (path, model)
    board = _resolve(
        schema, schema["paths"]["/api/gpus"]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
    )
    assert {"hosts", "waiting", "gpu_time", "problems"} <= set(board["required"])
    host = _resolve(schema, board["properties"]["hosts"]["items"])
    gpu = _resolve(schema, host["properties"]["gpus"]["items"])
    assert {"index", "memory_total", "memory_free", "leases"} <= set(gpu["required"])
    lease = schema["paths"]["/api/dags/{dag_id}/runs/{run_id}/tasks/{task_id}/lease"]["get"]
    task = _resolve(schema, lease["responses"]["200"]["content"]["application/json"]["schema"])
    published = _resolve(schema, task["properties"]["lease"]["anyOf"][0])
    assert published["properties"]["gpus"]["maxItems"] == 64  # BoardLease's own bounds
    assert published["properties"]["host"]["description"].startswith("a non-empty string")


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


def test_the_slurm_tab_reads_a_running_chains_segments_only_under_the_slurm_output_folder(tmp_path):
    """A record in XCom names the chain's record folder (anyone who may write XCom could name another): the tab reads
    the segments there only under ``[gpusched] slurm_output_dir``, each line checked."""
    import json

    from airflow_provider_gpusched.plugins.api.slurm import live_segments

    root, outside = tmp_path / "slurm-out", tmp_path / "elsewhere"
    for folder in (root / "dag" / "run" / "train", outside):
        folder.mkdir(parents=True)
        lines = [
            {"v": 1, "job": "41", "segment": 1, "event": "start", "at": 10.0, "node": "n1"},
            {"v": 1, "job": "41", "segment": 1, "event": "end", "at": 70.0, "outcome": "requeued", "detail": "x"},
            {"v": 1, "job": "41", "segment": 2, "event": "start", "at": 95.0, "node": "n2"},
            {"v": 1, "job": "41", "segment": 2, "event": "end", "at": 96.0, "outcome": "<b>forged</b>"},
        ]
        (folder / "chain-41.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    segments = live_segments(str(root / "dag" / "run" / "train"), [], "41", str(root))
    assert [(s["segment"], s["node"], s["outcome"], s["ended"]) for s in segments] == [
        (1, "n1", "requeued", 70.0),
        (2, "n2", None, None),  # its forged end was not a record: the segment shows as running
    ]
    assert live_segments(str(outside), [], "41", str(root)) == []
