"""Issue 77, item 2: a private DAG whose task keeps a Slurm job's files as a Slurm task does (its task folder under
``[gpusched] slurm_output_dir``, claimed for its DAG: the job's output and a running time-limit chain's records) and
publishes its job record, still running; and two DAGs that forge records naming those files: one names them
outright, the other (``_ui_private_slurm``) has an id whose task folder is the private DAG's own (folder names keep
only ``[A-Za-z0-9_.-]`` and drop leading ``_``). No Slurm runs: the records are what the UI reads."""

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


def _chain_lines() -> str:
    lines = [
        {"v": 1, "job": JOB, "segment": 1, "event": "start", "at": 10.0, "node": SECRET_NODE},
        {"v": 1, "job": JOB, "segment": 1, "event": "end", "at": 70.0, "outcome": "requeued", "detail": "x"},
    ]
    return "".join(json.dumps(line) + "\n" for line in lines)


def _record(output_path: str, chain_records: str) -> dict:
    # "via" another host: the api-server polls no Slurm for it (the job is not real)
    return job_record(JOB, output_path=output_path, runner={"host": "login"}, chain_records=chain_records)


@task
def job():
    ti = get_current_context()["ti"]
    folder = settings.task_directory(settings.slurm_output_dir(), ti)
    os.makedirs(folder, exist_ok=True)
    assert claim_output_folder(folder, ti.dag_id) == ""  # as SlurmJobOperator.build_spec does
    output = os.path.join(folder, f"{JOB}.out")
    Path(output).write_text(SECRET + "\n")
    Path(records_path(folder, JOB)).write_text(_chain_lines())
    ti.xcom_push(key=SLURM_JOB_XCOM, value=_record(output, folder))


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
    """Its own task folder is the private DAG's: names the output there, as its own job would."""
    ti = get_current_context()["ti"]
    folder = settings.task_directory(settings.slurm_output_dir(), ti)
    ti.xcom_push(key=SLURM_JOB_XCOM, value=_record(os.path.join(folder, f"{JOB}.out"), folder))


with DAG("ui_private_slurm", schedule=None, start_date=START) as private:
    job()

with DAG("ui_forger_slurm", schedule=None, start_date=START) as forger:
    forge()
    junk()

with DAG("_ui_private_slurm", schedule=None, start_date=START) as same_folder_forger:
    same_folder()
