"""A DAG that forges the UI's records (issue 53): its task pushes, as its own XComs, another DAG's sweep plan (to read
that DAG's trial output through its own Sweeps tab), leases naming another DAG and made-up hosts (one with
petabyte GPUs), and a lease history on made-up hosts; then it holds until $UI_RELEASE appears. Any DAG author can
push any XCom: none of this may decide what the UI shows."""

import json
import os
import time
from pathlib import Path

import pendulum
from airflow.sdk import DAG, TaskGroup, get_current_context, task

START = pendulum.datetime(2026, 1, 1, tz="UTC")


@task
def plan():
    forged = json.loads(Path(os.environ["UI_FORGED"]).read_text())
    ti = get_current_context()["ti"]
    ti.xcom_push(key="gpusched_sweep_plan", value=forged["plan"])
    ti.xcom_push(key="gpusched_lease_history", value=forged["history"])
    # the lease last: the test waits for it to be drawn, and then reads the plan and history pushed before it
    ti.xcom_push(key="gpusched_lease", value=forged["leases"][0])
    while not os.path.exists(os.environ["UI_RELEASE"]):
        time.sleep(0.2)


@task
def hold(index: int):
    forged = json.loads(Path(os.environ["UI_FORGED"]).read_text())
    get_current_context()["ti"].xcom_push(key="gpusched_lease", value=forged["leases"][index])
    while not os.path.exists(os.environ["UI_RELEASE"]):
        time.sleep(0.2)


# dag.test runs one task at a time: each forged lease is held by a DAG of its own, run at once in its own process
with DAG("ui_forger", schedule=None, start_date=START) as forger, TaskGroup("stolen"):
    plan()

with DAG("ui_forger_host", schedule=None, start_date=START) as forger_host:
    hold.override(task_id="lease_on_a_made_up_host")(1)

with DAG("ui_forger_pb", schedule=None, start_date=START) as forger_pb:
    hold.override(task_id="lease_of_petabyte_gpus")(2)
