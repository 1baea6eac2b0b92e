"""One DAG per sweep spec in ``dags/sweeps/*.yaml`` (drop-in loader).

Drop a YAML sweep spec (see ``dags/sweeps/lr_schedule.yaml`` and docs/sweeps.md) into the ``sweeps``
folder next to this file and a DAG ``gpusched_sweep_<name>`` appears. ``GPUSCHED_SWEEP_BACKEND`` (``local``
or ``slurm``) picks where trials run; the examples pack trials by GPU memory (``gpu_memory``), which only the
local backend does: for ``slurm``, leave it out (the error says so). A spec with a mistake becomes no DAG but an
import error in the Airflow UI that names the file and the key.
"""

from __future__ import annotations

import os
from pathlib import Path

import pendulum
from airflow.sdk import DAG

from airflow_provider_gpusched.task_groups.sweep import load_spec, sweep_task_group

SPEC_DIR = Path(__file__).with_name("sweeps")
BACKEND = os.environ.get("GPUSCHED_SWEEP_BACKEND", "local")

for path in sorted(SPEC_DIR.glob("*.yaml")):
    spec = load_spec(str(path))
    with DAG(
        dag_id=f"gpusched_sweep_{spec.name}",
        schedule=None,
        start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
        catchup=False,
        tags=["gpusched", "sweep", "yaml", "example"],
        doc_md=f"Sweep `{spec.name}` from `{path.name}` ({spec.search}).\n\n" + (__doc__ or ""),
    ) as dag:
        sweep_task_group(spec, backend=BACKEND, poll_interval=1)
    globals()[f"sweep_{spec.name}_dag"] = dag
