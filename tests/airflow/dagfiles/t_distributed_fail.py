"""Distributed Python tasks that go wrong: one rank raises (the task fails with that rank's traceback, naming the
rank and the node), one rank hangs after the others ended (it is stopped after rank_exit_grace, saying where)."""

import pendulum
from airflow.sdk import DAG, task

with DAG(dag_id="t_distributed_fail", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")) as dag:

    @task.slurm(nodes=2, ntasks_per_node=2, distributed="srun", poll_interval=0.5, time_limit=10, retries=0)
    def one_rank_raises(rank_info=None):
        import time

        def load_shard(rank):
            if rank == 2:
                raise ValueError(f"shard {rank} is corrupt")
            time.sleep(120)  # the others would go on; the failed rank ends them

        load_shard(rank_info.rank)

    @task.slurm(
        nodes=2,
        ntasks_per_node=1,
        distributed="torchrun",
        rank_exit_grace=3,
        poll_interval=0.5,
        time_limit=10,
        retries=0,
    )
    def one_rank_hangs(rank_info=None):
        import time

        def wait_for_peer_that_left():
            time.sleep(300)

        if rank_info.rank == 1:
            wait_for_peer_that_left()
        return rank_info.rank

    one_rank_raises()
    one_rank_hangs()
