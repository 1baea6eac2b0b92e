"""The end-to-end tier: one real Airflow deployment (scripts/stack.sh: PostgreSQL, api-server, scheduler with the
LocalExecutor, dag-processor, triggerer) shared by every test here, driven through the REST API as a user's
tooling would. It runs in its own directory (.stack-test/) and ports, so a developer's own `scripts/stack.sh up`
is left alone; the test DAGs (tests/stack/dagfiles) are a second DAG bundle next to the examples."""

from __future__ import annotations

import json
import os
import shutil
import uuid

import pytest

from tests import services
from tests.stack.client import REPO, TEST_STACK_ENV, Stack, StackConfig

#: idle-class timings short enough for a test (the defaults are minutes)
FAST_CLASSES = json.dumps(
    {"idle": {"local": {"idle_for": 0, "min_runtime": 0, "grace_period": 3, "backoff": 2, "max_backoff": 4}}}
)
STACK_DIR = REPO / ".stack-test"
EXTRA_DAGS = STACK_DIR / "e2e-dags"  # a copy of tests/stack/dagfiles: tests add broken files to it
CONFIG = StackConfig(
    STACK_DIR,
    int(os.environ.get("GPUSCHED_E2E_PORT", "28091")),
    int(os.environ.get("GPUSCHED_E2E_PG_PORT", "55442")),
    EXTRA_DAGS,
    f"export AIRFLOW__GPUSCHED__JOB_CLASSES='{FAST_CLASSES}'\n{TEST_STACK_ENV}",
)


@pytest.fixture(scope="session")
def stack(slurm_cluster):
    """The deployment, started once for the tier (and stopped at the end if this session started it)."""
    started = not CONFIG.running()
    if started:  # a clean start: no runs, deferred tasks or leases left by an earlier session
        CONFIG.run("destroy", check=False)
    EXTRA_DAGS.mkdir(parents=True, exist_ok=True)
    for old in EXTRA_DAGS.glob("*.py"):
        old.unlink()
    for src in (REPO / "tests" / "stack" / "dagfiles").glob("*.py"):
        shutil.copy(src, EXTRA_DAGS)
    record = CONFIG.register() if started and not os.environ.get("GPUSCHED_E2E_KEEP") else None
    if started:
        up = CONFIG.run("up")
        print(up.stderr[-2000:])
    try:
        yield Stack(CONFIG)
    finally:
        if record is not None:
            CONFIG.run("destroy", check=False)  # its database and directory too
            services.stopped(record)


@pytest.fixture(autouse=True)
def _every_component_up(request):
    """Before each test of the tier: a component an earlier test killed and could not bring back (its failure says
    why) is started again, so one test's failure stays that test's and does not fail every test after it."""
    if "stack" not in request.fixturenames or CONFIG.running():
        return
    for component in ("api-server", "scheduler", "dag-processor", "triggerer"):
        CONFIG.run("start", component, check=False)  # "already running" for those that are
    assert CONFIG.running(), CONFIG.run("status", check=False).stdout


@pytest.fixture
def out_dir(stack):
    """Where this test's GPU children write their records (inside the stack's private directory)."""
    path = stack.dir / "e2e-out" / uuid.uuid4().hex[:8]
    path.mkdir(parents=True)
    return path
