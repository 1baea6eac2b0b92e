"""A deployment started by scripts/stack.sh, driven the way a user's tooling would: the script for up/down/kill/
start, the REST API (``/api/v2``, a JWT from ``/auth/token``) for everything else. Used by the end-to-end tests
(tests/stack) and by bench/stack_makespan.py; needs no pytest."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[2]


#: settings every test deployment adds to scripts/stack.sh's: its dag-processor parses an unchanged file again every
#: 2 minutes, not every 30 s (Airflow queues a new or changed file at once whatever this interval; a parse that failed
#: or timed out under load is tried again within a test's 180 s wait_for_dag). The periodic re-parse of unchanged
#: files was about a fifth of a core per deployment on the 2-core CI machine (2026-11-29: 158 s of CPU in 12 minutes
#: for one deployment, process accounting), and no test changes what a DAG file reads.
TEST_STACK_ENV = "export AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL=120"


@dataclass
class StackConfig:
    """Where a stack lives: its directory, ports, a second DAG folder and extra ``export`` lines."""

    directory: Path
    port: int
    pg_port: int
    extra_dags: Path | None = None
    env_lines: str = ""
    script: str = "stack.sh"  # or fleet.sh: the same stack with GPU hosts in namespaces (tests/fleet)

    def run(self, *args: str, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess:
        """``scripts/<script> ARGS`` for this stack (the caller's Airflow settings left out)."""
        out = subprocess.run(
            self.command(*args), env=self.environment(), capture_output=True, text=True, timeout=timeout
        )
        if check and out.returncode != 0:
            raise AssertionError(
                f"scripts/{self.script} {' '.join(args)} failed ({out.returncode}):\n{out.stdout}\n{out.stderr}"
            )
        return out

    def command(self, *args: str) -> list[str]:
        return ["bash", str(REPO / "scripts" / self.script), *args]

    def register(self) -> Path:
        """Record this stack as started by the tests (tests/services.py: ``destroy`` stops it if its session
        cannot)."""
        from tests import services

        return services.register(self.script.removesuffix(".sh"), stop=self.command("destroy"), env=self.environment())

    def environment(self) -> dict[str, str]:
        """The script's environment for this stack."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW") and k != "GPUSCHED_STATE_DIR"}
        env.update(
            {
                "GPUSCHED_STACK_DIR": str(self.directory),
                "GPUSCHED_STACK_PORT": str(self.port),
                "GPUSCHED_STACK_PG_PORT": str(self.pg_port),
                "GPUSCHED_STACK_ENV": self.env_lines,
            }
        )
        if self.extra_dags:
            env["GPUSCHED_STACK_EXTRA_DAGS"] = str(self.extra_dags)
        return env

    def running(self) -> bool:
        return self.run("status", check=False).returncode == 0

    def pid(self, component: str) -> int:
        return int((self.directory / "pids" / f"{component}.pid").read_text())


class Stack:
    """The running deployment: its REST API with a token, and its directories."""

    def __init__(self, config: StackConfig):
        self.config = config
        self.dir = config.directory
        self.url = f"http://127.0.0.1:{config.port}"
        self.lease_dir = self.dir / "gpu-leases"
        self.extra_dags = config.extra_dags
        password = (self.dir / "admin-password").read_text().strip()
        token = httpx.post(
            f"{self.url}/auth/token", json={"username": "admin", "password": password}, timeout=30
        ).json()["access_token"]
        self.http = httpx.Client(
            base_url=f"{self.url}/api/v2", headers={"Authorization": f"Bearer {token}"}, timeout=60
        )

    def get(self, path: str, **params) -> dict:
        response = self.http.get(path, params=params)
        assert response.status_code == 200, f"GET {path}: {response.status_code} {response.text[:500]}"
        return response.json()

    def wait_for_dag(self, dag_id: str, timeout: float = 180) -> None:
        """Until the DAG can be triggered: parsed, without import errors, and not stale (Airflow marks a DAG stale
        while its file's last parse failed or timed out, and refuses to trigger it: 404)."""
        deadline = time.monotonic() + timeout
        seen: dict = {}
        while time.monotonic() < deadline:
            response = self.http.get(f"/dags/{dag_id}")
            if response.status_code == 200:
                seen = response.json()
                if not seen.get("is_stale") and not seen.get("has_import_errors"):
                    return
            time.sleep(1)
        errors = self.get("/importErrors")
        state = {k: seen.get(k) for k in ("is_stale", "has_import_errors", "last_parsed_time")} if seen else "absent"
        raise AssertionError(
            f"DAG {dag_id} not triggerable within {timeout}s ({state}); import errors: {errors}; "
            f"dag-processor log: {self.log_tail('dag-processor', 'stale|timed out|Deactivat|' + dag_id)}"
        )

    def log_tail(self, component: str, pattern: str, lines: int = 20) -> str:
        """The last ``lines`` lines of a component's log that match ``pattern`` (a regular expression)."""
        path = self.dir / "logs" / f"{component}.log"
        try:
            text = path.read_text(errors="replace")
        except OSError as exc:
            return f"({exc})"
        return "\n".join([line for line in text.splitlines() if re.search(pattern, line)][-lines:])

    def trigger(self, dag_id: str, **conf) -> str:
        run_id = f"e2e-{uuid.uuid4().hex[:8]}"
        for attempt in range(3):
            self.wait_for_dag(dag_id)
            response = self.http.patch(f"/dags/{dag_id}", json={"is_paused": False})  # DAGs start paused
            assert response.status_code == 200, response.text
            response = self.http.post(
                f"/dags/{dag_id}/dagRuns", json={"dag_run_id": run_id, "logical_date": None, "conf": conf}
            )
            # 404: the DAG went stale between the check and the trigger (a parse of its file timed out): once it
            # is parsed again it can be triggered; the log says what happened
            if response.status_code != 404 or attempt == 2:
                break
            print(f"trigger {dag_id}: {response.text[:200]}; dag-processor: {self.log_tail('dag-processor', dag_id)}")
        assert response.status_code == 200, f"trigger {dag_id}: {response.status_code} {response.text[:500]}"
        return run_id

    def task_log(self, dag_id: str, run_id: str, task_id: str, try_number: int = 1) -> str:
        """A task try's log as the UI shows it (the worker's, and the triggerer's while it was deferred): one line
        per event."""
        page = self.get(
            f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/logs/{try_number}", full_content="true"
        )
        content = page.get("content")
        if isinstance(content, str):
            return content
        return "\n".join(item.get("event", "") if isinstance(item, dict) else str(item) for item in content or [])

    def task_instances(self, dag_id: str, run_id: str) -> list[dict]:
        """Every task instance of the run (the API gives at most 100 a page)."""
        tis: list[dict] = []
        while True:
            page = self.get(f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances", limit=100, offset=len(tis))
            tis += page["task_instances"]
            if not page["task_instances"] or len(tis) >= page["total_entries"]:
                return tis

    def run(self, dag_id: str, run_id: str) -> dict:
        return self.get(f"/dags/{dag_id}/dagRuns/{run_id}")

    def run_state(self, dag_id: str, run_id: str) -> str:
        return self.run(dag_id, run_id)["state"]

    def wait_run(self, dag_id: str, run_id: str, timeout: float = 300, during=None) -> str:
        """Wait until the run ends; ``during()`` is called every second meanwhile (for invariants)."""
        deadline = time.monotonic() + timeout
        state = "?"
        while time.monotonic() < deadline:
            state = self.run_state(dag_id, run_id)
            if state in ("success", "failed"):
                return state
            if during:
                during()
            time.sleep(1)
        tis = [(t["task_id"], t.get("map_index"), t["state"]) for t in self.task_instances(dag_id, run_id)]
        raise AssertionError(f"{dag_id} {run_id} still {state} after {timeout}s: {tis}")

    def xcom(self, dag_id: str, run_id: str, task_id: str, key: str = "return_value", map_index: int = -1):
        return self.get(
            f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/xcomEntries/{key}",
            map_index=map_index,
            deserialize=True,
        )["value"]

    def ensure_pool(self, name: str, slots: int, include_deferred: bool = False) -> None:
        body = {"name": name, "slots": slots, "include_deferred": include_deferred}
        response = self.http.patch(f"/pools/{name}", json=body)
        if response.status_code == 404:
            response = self.http.post("/pools", json=body)
        assert response.status_code in (200, 201), response.text

    def gpusched(self, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
        """The `gpusched` command as an operator runs it on the deployment's host: with its env.sh."""
        return subprocess.run(
            ["bash", "-c", 'source "$1/env.sh" && shift && exec gpusched "$@"', "_", str(self.dir), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def restart(self, component: str, signal: str = "KILL") -> None:
        self.config.run("kill", component, signal)  # with KILL, returns once the component is gone
        self.config.run("start", component)


def read_records(out: Path) -> list[dict]:
    """The JSON records the test trials wrote (tests/stack/dagfiles/e2e_common.py)."""
    return [json.loads(path.read_text()) for path in sorted(out.glob("*.json"))]
