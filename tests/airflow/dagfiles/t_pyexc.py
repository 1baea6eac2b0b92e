import pendulum
from airflow.sdk import DAG, task

with DAG(dag_id="t_pyexc", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")) as dag:

    @task.slurm(poll_interval=0.5)
    def explode(x: int):
        def inner_helper(value):
            raise ValueError(f"bad value {value}")

        return inner_helper(x)

    explode(7)
