import pendulum
from airflow.sdk import DAG

from airflow_provider_gpusched.operators.slurm import SlurmJobOperator

with DAG(dag_id="t_ssh", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")) as dag:
    SlurmJobOperator(
        task_id="remote",
        slurm_conn_id="slurm_ssh",
        poll_interval=0.5,
        command=["python3", "-c", "import sys; print(sys.argv[1:])", "a b", "x;y", "it's"],
    )
