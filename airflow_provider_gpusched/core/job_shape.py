"""A Slurm job's shape: how many nodes, tasks and GPUs on each, CPUs per GPU, which nodes. One set of rules, used
by :class:`~airflow_provider_gpusched.core.slurm.job.SlurmJobSpec` and by a sweep's ``TrialResources`` (which is
read, e.g. by ``gpusched sweep preview``, without loading the Slurm client)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from airflow_provider_gpusched.core.checks import is_int
from airflow_provider_gpusched.core.errors import InvalidArgumentError

#: the shape's fields, as SlurmJobSpec, SlurmJobOperator, @task.slurm and TrialResources name them
SHAPE_FIELDS = (
    "nodes",
    "ntasks_per_node",
    "gpus_per_node",
    "gpus_per_task",
    "cpus_per_gpu",
    "exclusive",
    "constraint",
    "nodelist",
    "exclude",
)

_NODES_RE = re.compile(r"^([1-9]\d*)(?:-([1-9]\d*))?$")
_TYPED_COUNT_RE = re.compile(r"^(?:[A-Za-z0-9_.-]+:)?([0-9]{1,6})$")
#: a node name or a Slurm hostlist ("n1", "gpu[01-04]", "a[1,3]b")
_HOSTLIST_RE = re.compile(r"^[A-Za-z0-9_.]([A-Za-z0-9_.-]|\[[0-9,-]+\])*$")
#: a Slurm feature expression ("a100", "a100&ib", "[rack1*2&rack2*4]", "v100|a100")
_CONSTRAINT_RE = re.compile(r"^[A-Za-z0-9_.\[(!][A-Za-z0-9_.:&|*\[\](),!-]*$")


def check_shape(
    shape: Mapping[str, Any],
    *,
    gpus: Any = None,
    gres: str | None = None,
    cpus_per_task: Any = None,
    distributed: str | None = None,
    where: str = "",
    names: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """``shape`` (SHAPE_FIELDS) checked, each field refused by name (``where`` + the name; ``names`` renames the
    caller's own fields, e.g. ``{"cpus_per_task": "cpus"}``), with the combinations Slurm would refuse late.
    Returns it normalised: ``nodelist``/``exclude`` as one comma-separated string."""
    names = dict(names or {})

    def name(field: str) -> str:
        return where + names.get(field, field)

    def refuse(fields: str, value: Any, expected: str) -> None:
        raise InvalidArgumentError("/".join(name(f) for f in fields.split("/")), value, expected)

    out = {f: shape.get(f) for f in SHAPE_FIELDS}
    for field, least in (("ntasks_per_node", 1), ("gpus_per_task", 1), ("cpus_per_gpu", 1)):
        value = out[field]
        if value is not None and (not is_int(value) or value < least):
            refuse(field, value, f"a whole number >= {least}")
    nodes = out["nodes"]
    if nodes is not None:
        text = str(nodes) if is_int(nodes) else nodes
        match = _NODES_RE.match(text) if isinstance(text, str) else None
        if not match or (match.group(2) and int(match.group(2)) < int(match.group(1))):
            refuse("nodes", nodes, "a number of nodes >= 1, or a range such as '2-4'")
    per_node = out["gpus_per_node"]
    if per_node is not None and (
        isinstance(per_node, bool)
        or not isinstance(per_node, (int, str))
        or (isinstance(per_node, int) and per_node < 0)
        or (isinstance(per_node, str) and not _TYPED_COUNT_RE.match(per_node))
    ):
        refuse("gpus_per_node", per_node, "a number of GPUs per node (>= 0), or a type and number such as 'a100:4'")
    if out["exclusive"] is not None and not isinstance(out["exclusive"], bool):
        refuse("exclusive", out["exclusive"], "True, False or None")
    constraint = out["constraint"]
    if constraint is not None and (not isinstance(constraint, str) or not _CONSTRAINT_RE.match(constraint)):
        refuse(
            "constraint", constraint, "a Slurm feature expression such as 'a100', 'a100&ib' or 'v100|a100' (no spaces)"
        )
    for field in ("nodelist", "exclude"):
        value = out[field]
        if value is None:
            continue
        listed = [value] if isinstance(value, str) else value
        if not (
            isinstance(listed, (list, tuple))
            and listed
            and all(isinstance(n, str) and all(_HOSTLIST_RE.match(part) for part in hostlist_parts(n)) for n in listed)
        ):
            refuse(
                field,
                value,
                "node names or Slurm hostlists, as a list or a comma-separated string, such as "
                "['n1', 'n2'] or 'gpu[01-04]'",
            )
        out[field] = ",".join(listed)
    if per_node is not None and gpus:
        refuse("gpus/gpus_per_node", (gpus, per_node), "one of them (on Slurm, gpus is per node too)")
    if per_node is not None and gres and "gpu" in gres:
        refuse("gres/gpus_per_node", (gres, per_node), "GPUs in one of them, not both")
    if out["cpus_per_gpu"] is not None and cpus_per_task is not None:
        refuse("cpus_per_gpu/cpus_per_task", (out["cpus_per_gpu"], cpus_per_task), "one of them (Slurm refuses both)")
    if distributed == "torchrun" and out["gpus_per_task"]:
        refuse(
            "gpus_per_task",
            out["gpus_per_task"],
            "gpus_per_node with distributed='torchrun' (one torchrun task per node starts every rank of the node)",
        )
    return out


def gpus_on_each_node(shape: Mapping[str, Any], gpus: Any = None, gres: str | None = None) -> int:
    """GPUs a (checked) shape asks for on each node: gpus_per_node, else ``gpus`` or a gpu GRES (per node on
    Slurm), else gpus_per_task x ntasks_per_node; 0 when none."""
    if shape.get("gpus_per_node") is not None:
        count = _TYPED_COUNT_RE.match(str(shape["gpus_per_node"]))
        if count is None:
            raise InvalidArgumentError("gpus_per_node", shape["gpus_per_node"], "a count such as 4 or 'a100:4'")
        return int(count.group(1))
    if gpus:
        return int(gpus)
    if gres:
        return gres_gpu_count(gres)
    if shape.get("gpus_per_task") and shape.get("ntasks_per_node"):
        return int(shape["gpus_per_task"]) * int(shape["ntasks_per_node"])
    return 0


def gres_gpu_count(gres: str) -> int:
    """GPUs in a node's gres string: ``gpu:4``, ``gpu:a100:8(S:0-1)``, ``gpu:2,shard:8`` -> 4, 8, 2."""
    total = 0
    for item in re.sub(r"\([^)]*\)", "", gres or "").split(","):
        parts = item.strip().split(":")
        # a count is 1-6 ASCII digits: a node's answer from the cluster (sinfo, slurmrestd) holding a 5000-digit
        # or non-ASCII count is not a count (int() would raise, deep in a poll)
        if parts[0] == "gpu" and len(parts) >= 2 and re.fullmatch(r"[0-9]{1,6}", parts[-1]):
            total += int(parts[-1])
    return total


def hostlist_parts(text: str) -> list[str]:
    """The comma-separated items of a hostlist, commas inside brackets kept: ``'a[1,3],b'`` -> ``['a[1,3]', 'b']``."""
    parts, depth, current = [], 0, ""
    for ch in text:
        depth += (ch == "[") - (ch == "]")
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    parts.append(current)
    return parts
