"""The fleet tier: the deployed stack with the EdgeExecutor (scripts/fleet.sh) and three GPU hosts in Linux
namespaces (2x24GiB, 4x80GiB, 1x48GiB, SIMULATED), driven through the REST API and the CLI. Its own directory
(.stack-fleet-test/) and ports; destroyed at the end (namespaces and links included)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from tests import services
from tests.polling import wait_until
from tests.stack.client import REPO, TEST_STACK_ENV, Stack, StackConfig

FAST_CLASSES = json.dumps(
    {"idle": {"local": {"idle_for": 0, "min_runtime": 0, "grace_period": 3, "backoff": 2, "max_backoff": 4}}}
)
STACK_DIR = REPO / ".stack-fleet-test"
DAGFILES = REPO / "tests" / "fleet" / "dagfiles"
IMPOSSIBLE = "fleet_impossible.py"  # copied once the hosts are up (the fixture)
EXTRA_DAGS = STACK_DIR / "fleet-dags"
#: the team quotas of the deployment: empty (quotas off) but while tests/fleet's quota test writes its groups there;
#: every process reads the file again when it changes (settings.quota_config)
QUOTAS = STACK_DIR / "quotas.yaml"
CONFIG = StackConfig(
    STACK_DIR,
    int(os.environ.get("GPUSCHED_FLEET_PORT", "28097")),
    int(os.environ.get("GPUSCHED_FLEET_PG_PORT", "55447")),
    EXTRA_DAGS,
    f"export AIRFLOW__GPUSCHED__JOB_CLASSES='{FAST_CLASSES}'\n"
    f"export AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT=20\n"
    # an idle fleet of 7 Edge workers polling every 1 s (the demo's setting) costs the machine 11.3 s of CPU a
    # minute, every 3 s 9.2 s (measured); 2 s here, so a queued task still starts within about a second
    f"export AIRFLOW__EDGE__JOB_POLL_INTERVAL=2\n"
    # heartbeats every 3 s (scripts/fleet.sh: 5 s): a changed concurrency or maintenance state arrives within 3 s, and
    # the head calls a worker that missed five lifeless after 15 s (not 25 s)
    f"export AIRFLOW__EDGE__HEARTBEAT_INTERVAL=3\n"
    # a worker that cannot reach the api-server gives up after 5 tries 1-5 s apart, about 30 s of a network cut
    # (Airflow's 10 tries, up to 90 s apart, take 3-5 minutes): the cut-off test waits for that, and a mended host's
    # worker tries again within 5 s. The api-server never goes away in the other tests.
    f"export AIRFLOW__EDGE__API_RETRIES=5\n"
    f"export AIRFLOW__EDGE__API_RETRY_WAIT_MAX=5\n"
    f"export AIRFLOW__GPUSCHED__QUOTAS={QUOTAS}\n{TEST_STACK_ENV}",
    script="fleet.sh",
)
SIZES = {"gpu-a": (2, 24), "gpu-b": (4, 80), "gpu-c": (1, 48)}


class Fleet(Stack):
    records = STACK_DIR / "fleet" / "records"

    def host_dir(self, name: str):
        return STACK_DIR / "fleet" / name

    def airflow(self, *args: str) -> subprocess.CompletedProcess:
        """The `airflow` command on the head node, with the deployment's env.sh."""
        return subprocess.run(
            ["bash", "-c", 'source "$1/env.sh" && shift && exec airflow "$@"', "_", str(self.dir), *args],
            capture_output=True,
            text=True,
            timeout=180,
        )

    def gpusched(self, *args: str) -> subprocess.CompletedProcess:
        env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
        env["AIRFLOW__GPUSCHED__FLEET_DIR"] = str(self.records)
        env["AIRFLOW__GPUSCHED__QUOTAS"] = str(QUOTAS)
        return subprocess.run(
            [str(REPO / ".venv" / "bin" / "gpusched"), *args], env=env, capture_output=True, text=True, timeout=120
        )


def _published(fleet: Fleet) -> set[str]:
    """The hosts whose record in the fleet directory is fresh."""
    done = fleet.gpusched("fleet", "hosts", "--json")
    return {h["host"] for h in json.loads(done.stdout)["hosts"] if h["fresh"]} if done.returncode == 0 else set()


@pytest.fixture(scope="module")  # torn down before the stack tier starts its own stack: never two at once
def fleet(slurm_cluster):
    if os.geteuid() != 0:
        pytest.skip("the fleet tier needs root: network, UTS and PID namespaces (scripts/fleet.sh)")
    CONFIG.run("destroy", check=False)
    EXTRA_DAGS.mkdir(parents=True, exist_ok=True)
    QUOTAS.write_text("")  # quotas off
    for src in DAGFILES.glob("*.py"):
        if src.name != IMPOSSIBLE:
            shutil.copy(src, EXTRA_DAGS)
    (EXTRA_DAGS / IMPOSSIBLE).unlink(missing_ok=True)
    record = None if os.environ.get("GPUSCHED_E2E_KEEP") else CONFIG.register()
    up = CONFIG.run("up", "--hosts", "3", timeout=900)
    print(up.stderr[-3000:])
    try:
        deployment = Fleet(CONFIG)
        # a request no host can hold is refused when its file is parsed with every host's record there: added once
        # all three have published, it is parsed at once (added with the others, its refusal waited for the next
        # parse of an unchanged file, 2 minutes after the first)
        wait_until(lambda: _published(deployment) == set(SIZES), timeout=120, what="every host's record published")
        shutil.copy(DAGFILES / IMPOSSIBLE, EXTRA_DAGS)
        yield deployment
    finally:
        if record is not None:
            CONFIG.run("destroy", check=False)
            services.stopped(record)
            left = subprocess.run(["ip", "link", "show"], capture_output=True, text=True).stdout
            assert "gsf" not in left, f"links left behind: {left}"
