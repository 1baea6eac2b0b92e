import pendulum
from airflow.sdk import DAG

from airflow_provider_gpusched.operators.slurm import SlurmJobOperator

with DAG(dag_id="t_fail", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")) as dag:
    SlurmJobOperator(
        task_id="fails", command="echo 'loading data'; echo 'CUDA error: boom' >&2; exit 3", poll_interval=0.5
    )
