"""GPU work that holds its lease until the test says so ($UI_RELEASE appears), for the GPU board's API tests."""

import sys

import pendulum
from airflow.sdk import DAG

from airflow_provider_gpusched.operators.local_gpu import LocalGPUOperator

START = pendulum.datetime(2026, 1, 1, tz="UTC")
HOLD = [sys.executable, "-c", "import os, time\nwhile not os.path.exists(os.environ['UI_RELEASE']): time.sleep(0.2)"]

with DAG("ui_private_hold", schedule=None, start_date=START) as private_hold:
    LocalGPUOperator(task_id="hold", gpus=1, job_class="idle", command=HOLD, poll_interval=1)

with DAG("ui_private_waiter", schedule=None, start_date=START) as private_waiter:
    LocalGPUOperator(task_id="queued", gpus=1, command=[sys.executable, "-c", "print('ran')"], poll_interval=1)

with DAG("ui_open_hold", schedule=None, start_date=START) as open_hold:
    LocalGPUOperator(task_id="hold", gpu_memory="10GiB", command=HOLD, poll_interval=1)
