"""Try 1 "dies" right after sbatch (as a worker crash would); try 2 must re-attach, not resubmit. The job runs long
enough (15 s) to be alive when try 2 starts, even on a loaded machine."""

import os
from datetime import timedelta

import pendulum
from airflow.sdk import DAG

from airflow_provider_gpusched.operators.slurm import SlurmJobOperator


class CrashAfterSubmit(SlurmJobOperator):
    def execute(self, context):
        self._try = context["ti"].try_number
        return super().execute(context)

    def defer(self, **kwargs):
        if self._try == 1:
            raise RuntimeError("worker lost right after sbatch")
        return super().defer(**kwargs)


with DAG(dag_id="t_reattach", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")) as dag:
    CrashAfterSubmit(
        task_id="job",
        command="sleep 15",
        job_name=os.environ.get("GPUSCHED_TEST_JOB_NAME", "x"),
        retries=1,
        retry_delay=timedelta(seconds=0),
        poll_interval=0.5,
    )
