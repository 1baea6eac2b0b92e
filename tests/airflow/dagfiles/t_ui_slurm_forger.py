"""Issue 77, items 2 and B: a private DAG whose task keeps a Slurm job's files as a Slurm task does (its task folder
under ``[gpusched] slurm_output_dir``, claimed for its DAG: the job's output and a running time-limit chain's
records) and publishes its job record, still running; a DAG that forges a record naming those files outright; and
``_ui_private_slurm``, whose ids clean as the private DAG's do (``[A-Za-z0-9_.-]``, no leading ``_``): its task folder
was the private one's, so its run at the same logical date took that folder first and the private job failed. Its
folder is its own now: it claims it and keeps its own job's output there. No Slurm runs: the records are what the UI
reads."""

import glob
import json
import os
from pathlib import Path

import pendulum
from airflow.sdk import DAG, get_current_context, task

from airflow_provider_gpusched import settings
from airflow_provider_gpusched.core.slurm.chain import records_path
from airflow_provider_gpusched.core.slurm.job_view import SLURM_JOB_XCOM, claim_output_folder, job_record

START = pendulum.datetime(2026, 1, 1, tz="UTC")
JOB = "4242"
SECRET = "SECRET-OUTPUT of the private job"
SECRET_NODE = "secret-node-7"
OWN_OUTPUT = "the output of _ui_private_slurm's own job"


def _chain_lines() -> str:
    lines = [
        {"v": 1, "job": JOB, "segment": 1, "event": "start", "at": 10.0, "node": SECRET_NODE},
        {"v": 1, "job": JOB, "segment": 1, "event": "end", "at": 70.0, "outcome": "requeued", "detail": "x"},
    ]
    return "".join(json.dumps(line) + "\n" for line in lines)


def _record(output_path: str, chain_records: str) -> dict:
    # "via" another host: the api-server polls no Slurm for it (the job is not real)
    return job_record(JOB, output_path=output_path, runner={"host": "login"}, chain_records=chain_records)


def _keep_output(text: str, chain: bool) -> None:
    """Claim the task folder, keep the job's output there (and a running chain's records), publish its record: as a
    Slurm task does (SlurmJobOperator.build_spec claims the folder; the job writes the files)."""
    ti = get_current_context()["ti"]
    folder = settings.task_directory(settings.slurm_output_dir(), ti)
    os.makedirs(folder, exist_ok=True)
    assert claim_output_folder(folder, ti.dag_id) == ""  # raises where another DAG claimed the folder
    output = os.path.join(folder, f"{JOB}.out")
    Path(output).write_text(text + "\n")
    if chain:
        Path(records_path(folder, JOB)).write_text(_chain_lines())
    ti.xcom_push(key=SLURM_JOB_XCOM, value=_record(output, folder))


@task
def job():
    _keep_output(SECRET, chain=True)


@task
def forge():
    """Names the private job's output file and chain folder, wherever they are."""
    (output,) = glob.glob(os.path.join(settings.slurm_output_dir(), "ui_private_slurm", "*", "job", f"{JOB}.out"))
    get_current_context()["ti"].xcom_push(key=SLURM_JOB_XCOM, value=_record(output, os.path.dirname(output)))


@task
def junk():
    """A record no Slurm task writes: the tab says it cannot be read (it was the API's one 500)."""
    get_current_context()["ti"].xcom_push(key=SLURM_JOB_XCOM, value={"job_id": [[["not a job id"]]], "final": "?"})


@task(task_id="job")
def same_folder():
    """Its own job, in its own task folder (it runs first: its claim made the private job fail while the two
    DAGs' folders were one)."""
    _keep_output(OWN_OUTPUT, chain=False)


with DAG("ui_private_slurm", schedule=None, start_date=START) as private:
    job()

with DAG("ui_forger_slurm", schedule=None, start_date=START) as forger:
    forge()
    junk()

with DAG("_ui_private_slurm", schedule=None, start_date=START) as same_folder_forger:
    same_folder()
