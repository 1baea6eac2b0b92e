"""Print what the latest run of a DAG did: task states, Slurm job ids, results and job output."""

import sys
from pathlib import Path

from airflow.models.dagrun import DagRun
from airflow.models.xcom import XComModel
from airflow.utils.session import create_session
from sqlalchemy import select

dag_id = sys.argv[1]
with create_session() as session:
    run = session.scalars(select(DagRun).where(DagRun.dag_id == dag_id).order_by(DagRun.id.desc())).first()
    if run is None:
        sys.exit(f"no run of {dag_id} found")
    print(f"run {run.run_id}: {run.state}")
    for ti in sorted(run.get_task_instances(session=session), key=lambda t: (t.task_id, t.map_index)):
        label = ti.task_id + (f"[{ti.rendered_map_index or ti.map_index}]" if ti.map_index >= 0 else "")
        values = dict(
            session.execute(
                select(XComModel.key, XComModel.value).where(
                    XComModel.dag_id == dag_id,
                    XComModel.run_id == run.run_id,
                    XComModel.task_id == ti.task_id,
                    XComModel.map_index == ti.map_index,
                )
            ).all()
        )
        job = f"slurm job {values['slurm_job_id']}" if values.get("slurm_job_id") else ""
        print(f"  {label:<14} {ti.state:<8} {job}".rstrip())
        result = values.get("return_value")
        if isinstance(result, dict) and "output_path" in result:
            print(
                f"      result: state={result['state']} exit={result['exit_code']} nodes={result['nodes']}"
                f" preemptions={result['preemptions']}"
            )
            path = result["output_path"]
            try:
                lines = Path(path).read_text().strip().splitlines()[-3:]
                for line in lines:
                    print(f"      | {line}")
            except OSError:
                pass
        elif isinstance(result, dict) and "gpus" in result and "exit_code" in result:
            gpus = ", ".join(f"{g['index']} ({g['uuid']})" for g in result["gpus"])
            print(
                f"      result: exit={result['exit_code']} GPUs {gpus} oom_retries={result['oom_retries']}"
                + (" [SIMULATED GPUs]" if result.get("simulated") else "")
            )
        elif result is not None:
            text = str(result)
            print(f"      result: {text[:150]}" + (" ..." if len(text) > 150 else ""))
        if values.get("gpus_used"):
            print(
                f"      ran on GPU(s) {', '.join(str(g['index']) for g in values['gpus_used'])}"
                + (" [SIMULATED]" if values["gpus_used"][0].get("simulated") else "")
            )
    sys.exit(0 if run.state == "success" else 1)
