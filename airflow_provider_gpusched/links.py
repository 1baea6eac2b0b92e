"""Extra links on the provider's operators, to the plugin's pages ("Slurm job", "GPU lease", "Sweep leaderboard").

Airflow stores a link's URL in XCom when the task ends; an operator here also publishes it when it starts
(:func:`publish_links`), so the button works while the task is still running. A link never raises: in Airflow
3.1 an exception in ``get_link`` during task finalisation is not caught."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlencode

from airflow.sdk import BaseOperatorLink

#: the plugin's page routes (``url_route`` of its react apps); the plugin module imports them from here
GPU_BOARD_ROUTE = "gpusched-gpus"
SWEEPS_ROUTE = "gpusched-sweeps"
SLURM_JOB_ROUTE = "gpusched-slurm-job"
TIMELINE_ROUTE = "gpusched-timeline"


def ui_prefix() -> str:
    """The UI's address prefix: ``[api] base_url`` (scheme, host and any path), or '' for same-origin paths."""
    try:
        from airflow.sdk import conf

        return (conf.get("api", "base_url", fallback="") or "").rstrip("/")
    except Exception:  # noqa: BLE001 - a link must never fail the task
        return ""


def task_instance_path(dag_id: str, run_id: str, task_id: str, map_index: int | None) -> str:
    path = f"/dags/{quote(dag_id, safe='')}/runs/{quote(run_id, safe='')}/tasks/{quote(task_id, safe='')}"
    if map_index is not None and map_index >= 0:
        path += f"/mapped/{map_index}"
    return path


class _PluginLink(BaseOperatorLink):
    def url(self, operator: Any, dag_id: str, run_id: str, task_id: str, map_index: int | None) -> str:
        raise NotImplementedError

    def get_link(self, operator, *, ti_key) -> str:
        try:
            return ui_prefix() + self.url(
                operator, ti_key.dag_id, ti_key.run_id, ti_key.task_id, getattr(ti_key, "map_index", -1)
            )
        except Exception:  # noqa: BLE001 - see the module docstring
            return ""


class SlurmJobLink(_PluginLink):
    """The task instance's "Slurm job" tab: state, node, requeues, output tail (arrays: per task)."""

    name = "Slurm job"

    def url(self, operator, dag_id, run_id, task_id, map_index) -> str:
        return task_instance_path(dag_id, run_id, task_id, map_index) + f"/plugin/{SLURM_JOB_ROUTE}"


class GPULeaseLink(_PluginLink):
    """The GPU board, with this task instance's lease highlighted."""

    name = "GPU lease"

    def url(self, operator, dag_id, run_id, task_id, map_index) -> str:
        query = {
            "dag_id": dag_id,
            "run_id": run_id,
            "task_id": task_id,
            "map_index": -1 if map_index is None else map_index,
        }
        return f"/plugin/{GPU_BOARD_ROUTE}?{urlencode(query)}"


class SweepLeaderboardLink(_PluginLink):
    """The DAG's "Sweeps" tab on this run, scrolled to the operator's sweep."""

    name = "Sweep leaderboard"

    def url(self, operator, dag_id, run_id, task_id, map_index) -> str:
        query = {"run_id": run_id, "sweep": getattr(operator, "sweep_name", "") or ""}
        return f"/dags/{quote(dag_id, safe='')}/plugin/{SWEEPS_ROUTE}?{urlencode(query)}"


def publish_links(operator: Any, context: Any) -> None:
    """Push each extra link's URL to XCom now (Airflow would only at the end of the task)."""
    ti = context["ti"]
    map_index = ti.map_index if ti.map_index is not None else -1
    for link in getattr(operator, "operator_extra_links", ()):
        if isinstance(link, _PluginLink):
            try:
                url = ui_prefix() + link.url(operator, ti.dag_id, ti.run_id, ti.task_id, map_index)
                ti.xcom_push(key=link.xcom_key, value=url)
            except Exception as exc:  # noqa: BLE001 - a link is never worth failing the task
                operator.log.warning("Could not publish the %r link: %s", link.name, exc)
