"""Team quotas: who is guaranteed how much of the lab's GPUs, one validated configuration.

An admin writes it once (``[gpusched] quotas``: a YAML/JSON file path or inline text)::

    resource: gpus            # or gpu_memory: quotas in bytes of GPU memory ("320GiB")
    groups:
      vision:
        quota: 4              # guaranteed GPUs (or "40%" of the fleet's)
        borrowing_limit: 2    # at most this much beyond the quota, borrowed (default: no limit)
        weight: 2             # share of the surplus against other borrowers (default 1)
        members: [alice, bob] # DAG owners whose work counts for this group
        slurm: {account: vision, qos: vision}
      nlp: {quota: 2}
    default_group: nlp        # work that names no group and whose owner is in none (default: none -> refused)
    reclaim:
      grace_period: 30        # s between SIGTERM and SIGKILL when borrowed work is reclaimed
      min_runtime: 0          # s borrowed work runs before it may be reclaimed

A mistake is refused with the source and the key: ``quotas.yaml: groups.vision.quota: expected a number of GPUs
>= 0 or a percentage such as "25%", got "four"``.

Pure Python, no Airflow imports.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_gpusched.core.checks import is_number
from airflow_provider_gpusched.core.errors import GpuschedError, InvalidArgumentError
from airflow_provider_gpusched.core.units import format_bytes, parse_bytes

RESOURCES = ("gpus", "gpu_memory")
#: a group's name goes into file names, pool names and metric names
_GROUP_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$")
_PERCENT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*%\s*$")
#: the Airflow pool that admits a group's tasks (its quota plus borrowing limit, in GPUs)
POOL_PREFIX = "gpusched_group_"
#: the group of work that names none, whose owner is in none, with no default_group: it has no quota, so it runs only
#: on GPUs no group uses and gives them back to any group that needs its quota (turning quotas on breaks no DAG)
UNASSIGNED = "unassigned"


class QuotaConfigError(GpuschedError):
    """The quota configuration is not valid; the message names the source and key."""


@dataclass(frozen=True)
class Amount:
    """A quota or a limit: a fixed amount (GPUs, or bytes of GPU memory) or a fraction of the fleet."""

    value: float
    fraction: bool = False

    def of(self, capacity: float) -> float:
        return self.value * capacity if self.fraction else self.value

    def describe(self, resource: str) -> str:
        if self.fraction:
            return f"{self.value * 100:g}%"
        return describe_amount(self.value, resource)


def describe_amount(value: float, resource: str) -> str:
    if resource == "gpu_memory":
        return format_bytes(int(value))
    return f"{value:g} GPU" + ("" if value == 1 else "s")


@dataclass(frozen=True)
class Group:
    name: str
    quota: Amount
    borrowing_limit: Amount | None = None  # None: may borrow whatever is idle
    weight: float = 1.0
    members: tuple[str, ...] = ()
    slurm_account: str = ""
    slurm_qos: str = ""


@dataclass(frozen=True)
class ReclaimPolicy:
    grace_period: float = 30.0
    min_runtime: float = 0.0


@dataclass
class QuotaConfig:
    """Every group's quota. ``QuotaConfig()`` (no groups) means quotas are off."""

    groups: dict[str, Group] = field(default_factory=dict)
    resource: str = "gpus"
    default_group: str = ""
    reclaim: ReclaimPolicy = field(default_factory=ReclaimPolicy)
    source: str = "no quotas"
    #: what is wrong with the quota file now, when this is its last good version kept in force (core/quota/last_good.py)
    config_error: str = ""

    @property
    def enabled(self) -> bool:
        return bool(self.groups)

    def capacity_of(self, gpus: Iterable[Any]) -> float:
        """What ``gpus`` (anything with ``memory_total``: an inventory's, a host record's) count towards the quotas:
        their number, or their memory with ``resource: gpu_memory``."""
        gpus = list(gpus)
        return float(sum(g.memory_total for g in gpus)) if self.resource == "gpu_memory" else float(len(gpus))

    def quota(self, group: str, capacity: float) -> float:
        g = self.groups.get(group)
        return g.quota.of(capacity) if g else 0.0

    def borrowing_limit(self, group: str, capacity: float) -> float | None:
        g = self.groups.get(group)
        if g is None:
            return None
        return None if g.borrowing_limit is None else g.borrowing_limit.of(capacity)

    def weight(self, group: str) -> float:
        g = self.groups.get(group)
        return g.weight if g else 1.0

    def group_for(self, group: str | None = None, owner: str | None = None, *, argument: str = "group") -> str:
        """The group work counts for: ``group`` when given (it must be declared), else the group whose
        ``members`` lists ``owner`` (the DAG's owner; several owners ``"a,b"``: the first that is a member),
        else ``default_group``, else :data:`UNASSIGNED` (no quota: it only borrows, and is reclaimed for anyone).
        '' when quotas are off. :class:`InvalidArgumentError` (naming ``argument``) for an undeclared group."""
        if not self.enabled:
            return ""
        if group:
            if group not in self.groups:
                raise InvalidArgumentError(argument, group, f"a group of {self.source} ({', '.join(self.groups)})")
            return group
        for name in [o.strip() for o in str(owner or "").split(",") if o.strip()]:
            for g in self.groups.values():
                if name in g.members:
                    return g.name
        return self.default_group or UNASSIGNED

    def pool(self, group: str) -> str:
        return POOL_PREFIX + group

    def pool_plan(self, capacity_gpus: int, slots_per_gpu: int = 1) -> dict[str, dict[str, Any]]:
        """One Airflow pool per group, sized to what the group may hold at most (its quota plus its borrowing
        limit, in GPUs, at most the fleet's) times ``slots_per_gpu`` (``[gpusched] pool_slots_per_gpu``: the unit of
        the job classes' pools and of a fleet worker's slots, where a task takes one slot per GPU it asks for and a
        memory slice one, so that with 3 slots per GPU three slices of a GPU run at once): a group's tasks beyond
        that never leave the scheduler, so a group's backlog cannot fill the workers' slots ahead of another
        group's work."""
        plan: dict[str, dict[str, Any]] = {}
        groups = list(self.groups.values())
        if not self.default_group:  # work in no group borrows only: its pool is the fleet's size
            groups.append(Group(UNASSIGNED, Amount(0.0)))
        for g in groups:
            if self.resource == "gpus":
                most = g.quota.of(capacity_gpus) + (
                    capacity_gpus if g.borrowing_limit is None else g.borrowing_limit.of(capacity_gpus)
                )
                slots = slots_per_gpu * max(1, min(capacity_gpus, int(most + 1e-9) if most >= 1 else 1))
            else:  # memory quotas: tasks share GPUs, the lease decides; the pool only bounds the backlog
                slots = max(1, 4 * capacity_gpus * slots_per_gpu)
            plan[self.pool(g.name)] = {
                "slots": slots,
                "include_deferred": slots_per_gpu > 1,  # as the job classes' pools: the waiting count too
                "classes": [],
                "description": f"gpusched: group {g.name} (quota {g.quota.describe(self.resource)}), "
                "its quota plus borrowing limit"
                + (f", {slots_per_gpu} slots per GPU, deferred tasks counted" if slots_per_gpu > 1 else ""),
            }
        return plan

    def to_dict(self) -> dict[str, Any]:
        return {
            "resource": self.resource,
            "default_group": self.default_group,
            "source": self.source,
            "reclaim": {"grace_period": self.reclaim.grace_period, "min_runtime": self.reclaim.min_runtime},
            "groups": {
                g.name: {
                    "quota": g.quota.describe(self.resource),
                    "borrowing_limit": None if g.borrowing_limit is None else g.borrowing_limit.describe(self.resource),
                    "weight": g.weight,
                    "members": list(g.members),
                    "slurm": {"account": g.slurm_account, "qos": g.slurm_qos},
                }
                for g in self.groups.values()
            },
        }

    def check_capacity(self, capacity: float) -> str:
        """'' when the quotas fit in ``capacity``, else why not (guarantees that cannot all be kept)."""
        total = sum(g.quota.of(capacity) for g in self.groups.values())
        if total > capacity + 1e-9:
            return (
                f"{self.source}: the groups' quotas add up to {describe_amount(total, self.resource)}, more than "
                f"the {describe_amount(capacity, self.resource)} there are: not every group can have its quota at once"
            )
        return ""

    # -- reading --------------------------------------------------------------------------------------
    @classmethod
    def from_dict(cls, data: Any, source: str = "quotas") -> QuotaConfig:
        if data is None:
            return cls(source=source)
        if not isinstance(data, Mapping):
            raise QuotaConfigError(f"{source}: expected a mapping with 'groups', got {type(data).__name__}")
        known = ("resource", "groups", "default_group", "reclaim")
        for key in data:
            if key not in known:
                raise QuotaConfigError(f"{source}: {key}: unknown key; expected one of {', '.join(known)}")
        resource = data.get("resource", "gpus")
        if resource not in RESOURCES:
            raise QuotaConfigError(f"{source}: resource: expected one of {', '.join(RESOURCES)}, got {_show(resource)}")
        groups_data = data.get("groups")
        if not isinstance(groups_data, Mapping) or not groups_data:
            raise QuotaConfigError(
                f"{source}: groups: expected a mapping of group name -> settings, got {_show(groups_data)}"
            )
        groups: dict[str, Group] = {}
        owners: dict[str, str] = {}
        for name, body in groups_data.items():
            where = f"{source}: groups.{name}"
            if not isinstance(name, str) or not _GROUP_NAME.match(name):
                raise QuotaConfigError(f"{where}: a group name is letters, digits, '_' or '-' (at most 63)")
            if name == UNASSIGNED:
                raise QuotaConfigError(
                    f"{where}: '{UNASSIGNED}' is the group of work in no group (quota 0); name a default_group instead"
                )
            groups[name] = _group(name, body, resource, where)
            for member in groups[name].members:
                if member in owners:
                    raise QuotaConfigError(f"{where}.members: {member!r} is already a member of group {owners[member]}")
                owners[member] = name
        fractions = sum(g.quota.value for g in groups.values() if g.quota.fraction)
        if fractions > 1 + 1e-9:
            raise QuotaConfigError(f"{source}: groups: the percentage quotas add up to {fractions * 100:g}%, over 100%")
        default = data.get("default_group") or ""
        if default and default not in groups:
            raise QuotaConfigError(
                f"{source}: default_group: expected one of {', '.join(groups)}, got {_show(default)}"
            )
        reclaim = _reclaim(data.get("reclaim"), f"{source}: reclaim")
        return cls(groups, resource, default, reclaim, source)

    @classmethod
    def load(cls, text_or_path: str | None) -> QuotaConfig:
        """From a YAML/JSON file path or inline YAML/JSON text; empty: quotas off."""
        if not text_or_path or not str(text_or_path).strip():
            return cls()
        from airflow_provider_gpusched.core.yaml_loader import load_setting

        data, source = load_setting(str(text_or_path), "[gpusched] quotas", "quota file", QuotaConfigError)
        return cls.from_dict(data, source)


def _show(value: Any) -> str:
    return json.dumps(value, default=str)


def _amount(value: Any, resource: str, where: str, *, allow_none: bool = False) -> Amount | None:
    if value is None and allow_none:
        return None
    unit = 'bytes of GPU memory ("320GiB")' if resource == "gpu_memory" else "a number of GPUs >= 0"
    if isinstance(value, str):
        m = _PERCENT.match(value)
        if m:
            pct = float(m.group(1))
            if pct > 100:
                raise QuotaConfigError(f"{where}: expected a percentage of at most 100%, got {_show(value)}")
            return Amount(pct / 100.0, fraction=True)
        if resource == "gpu_memory":
            try:
                return Amount(float(parse_bytes(value, argument=where)))
            except InvalidArgumentError:
                pass
    elif is_number(value) and math.isfinite(value) and value >= 0:
        return Amount(float(value))
    raise QuotaConfigError(f'{where}: expected {unit} or a percentage such as "25%", got {_show(value)}')


def _group(name: str, body: Any, resource: str, where: str) -> Group:
    if is_number(body) or isinstance(body, str):
        body = {"quota": body}
    if not isinstance(body, Mapping):
        raise QuotaConfigError(f"{where}: expected a mapping with quota, borrowing_limit, weight, members, slurm")
    known = ("quota", "borrowing_limit", "weight", "members", "slurm")
    for key in body:
        if key not in known:
            raise QuotaConfigError(f"{where}.{key}: unknown setting; expected one of {', '.join(known)}")
    if "quota" not in body:
        raise QuotaConfigError(
            f"{where}.quota: missing; expected {'bytes of GPU memory' if resource == 'gpu_memory' else 'a number of GPUs'} or a percentage"
        )
    quota = _amount(body["quota"], resource, f"{where}.quota")
    assert quota is not None
    limit = _amount(body.get("borrowing_limit"), resource, f"{where}.borrowing_limit", allow_none=True)
    weight = body.get("weight", 1)
    if not is_number(weight) or not math.isfinite(weight) or weight <= 0:
        raise QuotaConfigError(f"{where}.weight: expected a number > 0, got {_show(weight)}")
    members = body.get("members") or []
    if isinstance(members, str):
        members = [members]
    if not isinstance(members, list) or not all(isinstance(m, str) and m.strip() for m in members):
        raise QuotaConfigError(f"{where}.members: expected a list of DAG owners (user names), got {_show(members)}")
    slurm = body.get("slurm") or {}
    if not isinstance(slurm, Mapping) or any(k not in ("account", "qos") for k in slurm):
        raise QuotaConfigError(f"{where}.slurm: expected a mapping with account and/or qos, got {_show(slurm)}")
    for key in ("account", "qos"):
        v = slurm.get(key)
        if v is not None and (not isinstance(v, str) or not re.match(r"^[A-Za-z0-9_.-]{1,64}$", v)):
            raise QuotaConfigError(f"{where}.slurm.{key}: expected a Slurm {key} name, got {_show(v)}")
    return Group(
        name,
        quota,
        limit,
        float(weight),
        tuple(m.strip() for m in members),
        slurm.get("account") or "",
        slurm.get("qos") or "",
    )


def _reclaim(body: Any, where: str) -> ReclaimPolicy:
    if body is None:
        return ReclaimPolicy()
    if not isinstance(body, Mapping):
        raise QuotaConfigError(f"{where}: expected a mapping with grace_period, min_runtime")
    out: dict[str, float] = {}
    for key, value in body.items():
        if key not in ("grace_period", "min_runtime"):
            raise QuotaConfigError(f"{where}.{key}: unknown setting; expected one of grace_period, min_runtime")
        if not is_number(value) or not math.isfinite(value) or value < 0:
            raise QuotaConfigError(f"{where}.{key}: expected a number of seconds >= 0, got {_show(value)}")
        out[key] = float(value)
    return ReclaimPolicy(**out)
