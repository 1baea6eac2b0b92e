"""Run example DAGs on a deployed Airflow through its REST API and report how they ended (scripts/docker-smoke.sh).

    python scripts/docker_smoke_dags.py [--expect-hosts A,B] [--wait-task DAG_ID:TASK_ID ...] URL PASSWORD_FILE
                                        DAG_ID [DAG_ID ...]

Each DAG is unpaused and triggered once; the script waits for every run to end and prints its task states and
the hosts that ran them. Exit status 0 when every run succeeded (and, with ``--expect-hosts``, every host named
ran at least one task). ``--wait-task``: wait until the DAG has that task before triggering it (a DAG whose
tasks depend on what the fleet's hosts published).
"""

from __future__ import annotations

import sys
import time
import uuid

import httpx


def main(argv: list[str]) -> int:
    expect: set[str] = set()
    wait_tasks: dict[str, set[str]] = {}
    while argv[:1] in (["--expect-hosts"], ["--wait-task"]) and len(argv) > 1:
        if argv[0] == "--expect-hosts":
            expect = set(argv[1].split(","))
        else:
            dag, _, task_id = argv[1].partition(":")
            wait_tasks.setdefault(dag, set()).add(task_id)
        argv = argv[2:]
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    ran_on: set[str] = set()
    url, password_file, dag_ids = argv[0].rstrip("/"), argv[1], argv[2:]
    with open(password_file) as f:
        password = f.read().strip()
    token = httpx.post(f"{url}/auth/token", json={"username": "admin", "password": password}, timeout=30)
    token.raise_for_status()
    api = httpx.Client(
        base_url=f"{url}/api/v2", headers={"Authorization": f"Bearer {token.json()['access_token']}"}, timeout=60
    )
    runs = {}
    for dag_id in dag_ids:
        deadline = time.monotonic() + 180

        def parsed(dag_id=dag_id) -> bool:
            if api.get(f"/dags/{dag_id}").status_code != 200:
                return False
            wanted = wait_tasks.get(dag_id, set())
            return not wanted or wanted <= {t["task_id"] for t in api.get(f"/dags/{dag_id}/tasks").json()["tasks"]}

        while not parsed():
            if time.monotonic() > deadline:
                print(
                    f"{dag_id}: not parsed (with tasks {sorted(wait_tasks.get(dag_id, []))}) after 180 s; import "
                    f"errors: {api.get('/importErrors').text[:2000]}"
                )
                return 1
            time.sleep(2)
        api.patch(f"/dags/{dag_id}", json={"is_paused": False}).raise_for_status()
        run_id = f"docker-smoke-{uuid.uuid4().hex[:8]}"
        api.post(f"/dags/{dag_id}/dagRuns", json={"dag_run_id": run_id, "logical_date": None}).raise_for_status()
        runs[dag_id] = (run_id, time.monotonic())
        print(f"{dag_id}: triggered {run_id}", flush=True)
    ok = True
    deadline = time.monotonic() + 600
    pending = dict(runs)
    while pending and time.monotonic() < deadline:
        for dag_id, (run_id, started) in list(pending.items()):
            state = api.get(f"/dags/{dag_id}/dagRuns/{run_id}").json()["state"]
            if state in ("success", "failed"):
                tis = api.get(f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances", params={"limit": 100}).json()
                states = sorted(
                    f"{t['task_id']}{'' if t['map_index'] < 0 else '[' + str(t['map_index']) + ']'}={t['state']}"
                    for t in tis["task_instances"]
                )
                print(f"{dag_id}: {state} in {time.monotonic() - started:.0f} s ({', '.join(states)})", flush=True)
                hosts: dict[str, int] = {}
                for t in tis["task_instances"]:
                    if t.get("hostname"):
                        hosts[t["hostname"]] = hosts.get(t["hostname"], 0) + 1
                ran_on |= set(hosts)
                print(f"{dag_id}: tasks per host: {hosts}", flush=True)
                ok = ok and state == "success"
                del pending[dag_id]
        time.sleep(2)
    for dag_id in pending:
        print(f"{dag_id}: still running after 600 s")
    if expect - ran_on:
        print(f"no task ran on {', '.join(sorted(expect - ran_on))} (tasks ran on: {', '.join(sorted(ran_on))})")
        ok = False
    return 0 if ok and not pending else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
