"""Applying the job-class mapping to an operator's Airflow settings (pool, slots, weight, queue)."""

from __future__ import annotations

from typing import Any

from airflow.sdk.exceptions import AirflowException

from airflow_provider_gpusched import settings
from airflow_provider_gpusched.core.checks import is_int
from airflow_provider_gpusched.core.errors import GpuschedError
from airflow_provider_gpusched.core.job_classes import check_job_class, check_priority


def apply_job_class(kwargs: dict[str, Any], job_class: str, priority: int, gpus: Any) -> tuple[str, int]:
    """Fill ``kwargs`` (BaseOperator arguments) with what ``job_class``/``priority`` mean; arguments the
    DAG author gave (directly or through ``default_args``) win. Returns the checked class and priority."""
    where = kwargs.get("task_id", "?")
    try:
        job_class = check_job_class(job_class)
        priority = check_priority(priority)
        mapping = settings.job_class_mapping()
    except GpuschedError as exc:
        raise AirflowException(f"{where}: {exc}") from exc
    n = gpus if is_int(gpus) and gpus > 0 else 1
    explicit_weight = "priority_weight" in kwargs
    for key, value in mapping[job_class].airflow_settings(priority, n).items():
        if key == "weight_rule" and explicit_weight:
            continue  # an explicit weight keeps Airflow's rule unless that is given too
        kwargs.setdefault(key, value)
    return job_class, priority


def apply_quota_group(kwargs: dict[str, Any], group: str | None, job_class: str, *, pool: bool = True) -> str:
    """The quota group a task counts for (docs/quotas.md): ``group`` when given, else the group whose members list
    the task's ``owner`` (``kwargs["owner"]``), else the quotas' ``default_group``, else ``unassigned``; '' when there
    are no quotas. With ``pool``, normal-class work that names no pool (``kwargs["pool"]`` missing or Airflow's
    ``default_pool``) goes to its group's pool. An undeclared group fails the DAG file's import naming the task."""
    where = kwargs.get("task_id", "?")
    config = settings.quota_config()
    if not config.enabled:
        if group:
            raise AirflowException(f"{where}: group={group!r} given, but [gpusched] quotas declares no groups")
        return ""
    try:
        name = config.group_for(group, kwargs.get("owner"))
    except GpuschedError as exc:
        raise AirflowException(f"{where}: {exc}") from exc
    if pool and job_class != "idle" and kwargs.get("pool") in (None, "default_pool"):
        kwargs["pool"] = config.pool(name)
    return name


def apply_quota_group_to(operator: Any, group: str | None, job_class: str, *, pool: bool = True) -> str:
    """:func:`apply_quota_group` for an operator after ``BaseOperator.__init__``: its ``owner`` is known then (Airflow
    has merged the DAG's ``default_args``), and its ``pool`` is set when it named none."""
    values = {"task_id": operator.task_id, "owner": operator.owner, "pool": operator.pool}
    name = apply_quota_group(values, group, job_class, pool=pool)
    if pool:
        operator.pool = values["pool"]
    return name


def quota_pool_for_partial(partial: Any, job_class: str) -> Any:
    """``Operator.partial(...)``'s result with team quotas: the mapped tasks' group (``group=``, else their owner's,
    which Airflow has merged from the DAG's ``default_args`` by now) checked, and its pool set where no pool was named
    (Airflow filled in ``default_pool``). Each task resolves its group again when it runs (the operator's
    ``__init__``)."""
    config = settings.quota_config()
    kwargs = getattr(partial, "kwargs", None)
    if not config.enabled or not isinstance(kwargs, dict):
        return partial
    name = apply_quota_group(dict(kwargs), kwargs.get("group"), job_class, pool=False)
    if job_class != "idle" and kwargs.get("pool") in (None, "default_pool"):
        kwargs["pool"] = config.pool(name)
    return partial


def slurm_gpu_total(gpus: Any, gpus_per_node: Any = None, nodes: Any = None) -> int | None:
    """The GPUs a Slurm job holds at least (its pool slots): per node (``gpus`` or ``gpus_per_node``, an int or
    ``"a100:4"``) x its (least) number of nodes; None when it asks for none that way."""
    per_node = gpus if gpus_per_node is None else gpus_per_node
    if isinstance(per_node, str) and per_node.rpartition(":")[2].isdigit():
        per_node = int(per_node.rpartition(":")[2])
    if not is_int(per_node) or per_node < 1:
        return gpus
    least = nodes
    if isinstance(nodes, str) and nodes.partition("-")[0].isdigit():
        least = int(nodes.partition("-")[0])
    if not is_int(least) or least < 1:
        least = 1
    return per_node * least


def apply_local_gpu_class(
    kwargs: dict[str, Any], job_class: str, priority: int, gpus: Any, gpu_memory: Any
) -> tuple[str, int]:
    """:func:`apply_job_class` for a local GPU task, which in a fleet also goes to the queue of its lane and
    memory tier unless its author named one (airflow_provider_gpusched.fleet)."""
    from airflow_provider_gpusched.fleet import fleet_queue

    explicit_queue = "queue" in kwargs
    job_class, priority = apply_job_class(kwargs, job_class, priority, gpus)
    if not explicit_queue:
        fleet_queue(kwargs, job_class, gpus, gpu_memory)
    return job_class, priority


def apply_partial_job_class(kwargs: dict[str, Any], local_gpus: bool) -> None:
    """The job class applied to ``Operator.partial(...)``'s arguments: a mapped task takes its pool and weight
    from them when it is scheduled (the operator's ``__init__`` runs only later, when a task instance runs).
    The operators call it from their own ``partial`` classmethod, which Airflow lets an operator class define
    (``BaseOperatorMeta`` keeps a subclass's own ``partial``)."""
    job_class, priority = kwargs.get("job_class", "normal"), kwargs.get("priority", 0)
    gpus = kwargs.get("gpus", 1)
    if local_gpus and kwargs.get("group") and not settings.quota_config().enabled:
        apply_quota_group(kwargs, kwargs.get("group"), job_class)  # the error: quotas are off
    if local_gpus:  # a local GPU task: in a fleet, the queue of its lane and memory tier too
        apply_local_gpu_class(kwargs, job_class, priority, gpus, kwargs.get("gpu_memory"))
    else:
        apply_job_class(
            kwargs, job_class, priority, slurm_gpu_total(gpus, kwargs.get("gpus_per_node"), kwargs.get("nodes"))
        )
