"""Training longer than the Slurm time limit: one task, one job, several segments (drop-in example).

``gpusched_digits_slurm_chain`` trains the digits CNN as a ``@task.slurm`` function with a **2-minute** time limit
and ``time_limit_chain``: Slurm signals the job (SIGUSR1) 10 to 40 s before the limit, ``train_digits`` saves its
checkpoint between two batches and exits, and the job is requeued, the same job id, to go on from that
checkpoint, up to 6 times. The task follows the whole chain and logs every segment (job, node, start, end, why it
ended); the Slurm tab draws them. The result is the model an uninterrupted run trains, number for number.

Why 2 minutes: each segment starts Python, imports PyTorch, loads the data and resumes before it trains, and
slurmctld may send the signal 30 s earlier than ``signal_delay`` asks. A 1-minute limit leaves a segment as little
as 20 s before the signal, less than a loaded machine takes to start; 2 minutes leave at least 80 s (docs/slurm.md,
"What a command needs").

A real run on a 24-hour partition is the same with ``time_limit="24:00:00"`` and the default ``signal_delay`` of
90 s. Here each epoch is stretched by ``epoch_pause`` seconds so that this small model meets the 2-minute limit
once or twice, as a long training meets a day's.

Needs ``pip install 'airflow-provider-gpusched[examples]'`` where the job runs, and ``[gpusched]
slurm_output_dir`` shared with the compute nodes (the checkpoint is kept in the task's folder there).
"""

from __future__ import annotations

import pendulum
from airflow.sdk import Param, dag, task

CNN = {
    "model": "cnn",
    "block0": {"channels": 16, "kernel": 3},
    "block1": {"channels": 32, "kernel": 3},
    "lr": 0.01,
    "seed": 3,
}


@dag(
    dag_id="gpusched_digits_slurm_chain",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["gpusched", "slurm", "time-limit", "example"],
    doc_md=__doc__,
    params={
        "epochs": Param(16, type="integer", minimum=1, description="epochs to train"),
        "epoch_pause": Param(8.0, type="number", minimum=0, description="seconds to wait after each epoch"),
    },
)
def digits_slurm_chain():
    @task.slurm(
        cpus=1,
        time_limit=2,  # minutes: at least 80 s of work before the signal (see above)
        poll_interval=2,
        env={"OMP_NUM_THREADS": "1"},  # one thread: the same arithmetic in every segment, and in a run without one
        time_limit_chain={"max_requeues": 6, "signal_delay": 10},
    )
    def train(params: dict | None = None) -> dict:
        import time

        from airflow_provider_gpusched.examples.checkpoints import stop_requested
        from airflow_provider_gpusched.examples.digits import train_digits

        run = params or {}
        pause = float(run.get("epoch_pause", 0))
        config = {**CNN, "epochs": int(run.get("epochs", 16))}

        def pause_after(epoch: int, metrics: dict) -> None:  # cut short by the chain's signal (or a SIGTERM)
            end = time.monotonic() + pause
            while time.monotonic() < end and not stop_requested():
                time.sleep(0.1)

        # the checkpoints go to $GPUSCHED_CHECKPOINT_DIR: the chain's own folder, kept across its segments
        return train_digits(config, on_epoch_end=pause_after)

    train()


digits_slurm_chain_dag = digits_slurm_chain()
