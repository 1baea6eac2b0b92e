import pendulum
from airflow.sdk import DAG, task

from airflow_provider_gpusched.operators.slurm import SlurmJobOperator

with DAG(dag_id="t_rest", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")) as dag:
    remote = SlurmJobOperator(
        task_id="remote",
        slurm_conn_id="slurm_rest",
        poll_interval=0.5,
        command=["python3", "-c", "import sys; print(sys.argv[1:])", "a b", "x;y", "it's"],
    )

    @task.slurm(slurm_conn_id="slurm_rest", poll_interval=0.5)
    def add(a: int, b: int) -> dict:
        import socket

        return {"sum": a + b, "node": socket.gethostname()}

    remote >> add(2, 3)
