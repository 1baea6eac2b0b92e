"""A sweep specification: what to try, how to run a trial, what to optimise — in Python or YAML.

Python::

    SweepSpec(name="gan", global_config={"num_epoch": 200},
              test_config=[{"method": ["GAN", "ALI"]}, {"method": ["WGAN"], "num_zmode": [1, 2]}],
              command=["python", "train.py", "--method", "{method}", "--out", "{trial_dir}"],
              objective=Objective("inception_score", "maximize"))

YAML (the same keys; search spaces as one-key mappings, ``when`` for conditional parameters)::

    name: hpo
    search: random            # grid (default) | random | optuna | evolution
    count: 20
    space:
      lr: {loguniform: [1.0e-5, 1.0e-1]}
      optimizer: [sgd, adam]
      momentum: {uniform: [0.8, 0.99], when: {optimizer: sgd}}
    command: [python, train.py, --lr, "{lr}"]
    objective: {metric: accuracy, mode: maximize}
    resources: {gpus: 1, gpu_memory: 6GiB, partition: batch, setup: [source /shared/env.sh], job_class: idle}

Every error names the file and the key path (``sweeps/hpo.yaml: space.lr: expected ...``).
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from types import FrameType
from typing import Any

from airflow_provider_gpusched.core.backends import get_backend
from airflow_provider_gpusched.core.checks import check_int, is_int, record_from_mapping
from airflow_provider_gpusched.core.distributed import DEFAULT_RANK_EXIT_GRACE, check_grace, check_mode
from airflow_provider_gpusched.core.errors import GpuschedError, InvalidArgumentError, UnknownKeyError
from airflow_provider_gpusched.core.import_target import import_callable
from airflow_provider_gpusched.core.job_classes import JOB_CLASSES
from airflow_provider_gpusched.core.job_shape import SHAPE_FIELDS, check_shape
from airflow_provider_gpusched.core.sweep import spaces
from airflow_provider_gpusched.core.sweep.expand import (
    DEFAULT_LABELS,
    LabelFormat,
    Trial,
    flatten,
)
from airflow_provider_gpusched.core.sweep.objective import Objective
from airflow_provider_gpusched.core.sweep.pruning import PruningRule
from airflow_provider_gpusched.core.sweep.search_kind import SearchKind
from airflow_provider_gpusched.core.sweep.search_kinds import SEARCH_KINDS, EvolutionSettings
from airflow_provider_gpusched.core.sweep.store import check_sweep_name
from airflow_provider_gpusched.core.units import parse_bytes, slurm_time_limit

_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_.]*)\}")
_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]+$")
#: the most trials one stage of a sweep may have unless the spec raises ``max_trials`` (or
#: ``$GPUSCHED_MAX_TRIALS``): counted before anything is expanded
DEFAULT_MAX_TRIALS = 100_000
TRIAL_FIELDS = ("trial_dir", "trial_id", "label")  # placeholders every command may use besides parameters


class _NotRegular(Exception):
    """A path that is not a regular file (what it is: the message)."""


def _check_regular(path: str) -> None:
    """Raise :class:`_NotRegular` for a FIFO, socket or device (reading one could block forever); a directory is
    left to ``open`` (IsADirectoryError)."""
    import stat

    mode = os.stat(path).st_mode
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        raise _NotRegular("a FIFO" if stat.S_ISFIFO(mode) else "a special file")


@dataclass
class TrialResources:
    """Per-trial resources (seed 000's ``function_resource``): used by the local and the Slurm backend."""

    gpus: int = 1
    gpu_memory: int | str | None = None
    cpus: int | None = None
    mem: int | str | None = None
    partition: str | None = None
    qos: str | None = None
    time_limit: int | str | None = None
    setup: list[str] = field(default_factory=list)
    job_class: str = "normal"
    priority: int = 0
    env: dict[str, str] = field(default_factory=dict)
    #: local GPUs: the GPU indices trials may use (GPU Task Scheduler's ``gpu`` list); None: any
    devices: list[int] | None = None
    #: the only backend these trials may run on (pavi's ``launcher='slurm'``); None: either
    backend: str | None = None
    #: local GPUs: fixed groups, each trial takes one whole (GPU Task Scheduler's ``[["0", "1"], ["2", "3"]]`` or a
    #: mixed ``["0", ["1", "2"]]``): it sees exactly that group's GPUs
    device_groups: list[list[int]] | None = None
    #: Slurm: nodes per trial (a multi-node trial), GPUs on each node (``gpus`` is per node on Slurm too), and the
    #: rest of a job's shape (SlurmJobOperator's arguments of the same names)
    nodes: int | str | None = None
    gpus_per_node: int | None = None
    ntasks_per_node: int | None = None
    gpus_per_task: int | None = None
    cpus_per_gpu: int | None = None
    exclusive: bool | None = None
    constraint: str | None = None
    nodelist: str | list[str] | None = None
    exclude: str | list[str] | None = None
    #: start each trial's command as ranks: "torchrun" or "srun" (one per GPU of each node; on local GPUs, of the
    #: lease), with ``rank_exit_grace`` seconds for the others after the first rank ends (core/distributed.py)
    distributed: str | None = None
    rank_exit_grace: float = DEFAULT_RANK_EXIT_GRACE
    #: local GPUs: fedflow's two-stage trial, loading on host RAM (``mem``) before it gets its GPUs
    #: (``wait_for_gpus()``), with at most ``max_waiting`` load stages on the host at once (None: ``[gpusched]
    #: max_waiting``)
    load_stage: bool | None = None
    max_waiting: int | None = None

    def check(self, where: str) -> None:
        if not is_int(self.gpus) or self.gpus < 0:
            raise InvalidArgumentError(f"{where}.gpus", self.gpus, "an integer >= 0")
        for name in ("gpu_memory", "mem"):  # "lots", "-1GiB", 0: refused here, not when a trial runs
            value = getattr(self, name)
            if value is not None and parse_bytes(value, argument=f"{where}.{name}") <= 0:
                raise InvalidArgumentError(f"{where}.{name}", value, "a positive size such as '6GiB'")
        if self.time_limit is not None:
            slurm_time_limit(self.time_limit, argument=f"{where}.time_limit")
        for name in ("partition", "qos"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not _NAME_RE.match(value)):
                raise InvalidArgumentError(f"{where}.{name}", value, "a Slurm name (letters, digits, '_', '-', '.')")
        if not is_int(self.priority):
            raise InvalidArgumentError(f"{where}.priority", self.priority, "a whole number")
        if self.cpus is not None and (not is_int(self.cpus) or self.cpus < 1):
            raise InvalidArgumentError(f"{where}.cpus", self.cpus, "an integer >= 1")
        if self.job_class not in JOB_CLASSES:
            raise InvalidArgumentError(f"{where}.job_class", self.job_class, f"one of {list(JOB_CLASSES)}")
        if isinstance(self.setup, str):
            self.setup = [self.setup]
        if not isinstance(self.setup, list) or not all(isinstance(s, str) for s in self.setup):
            raise InvalidArgumentError(f"{where}.setup", self.setup, "a list of shell lines")
        if not isinstance(self.env, Mapping):
            raise InvalidArgumentError(f"{where}.env", self.env, "a mapping of environment variables")
        for key, value in self.env.items():
            if not isinstance(key, str) or not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", key):
                raise InvalidArgumentError(f"{where}.env", key, "environment variable names")
            if not isinstance(value, (str, int, float)) or isinstance(value, bool) or "\x00" in str(value):
                raise InvalidArgumentError(f"{where}.env.{key}", value, "a string or number")
        self.env = {str(k): str(v) for k, v in self.env.items()}
        if self.backend is not None:
            get_backend(self.backend, f"{where}.backend")
        if self.devices is not None:
            if (
                isinstance(self.devices, (str, bytes))
                or not isinstance(self.devices, Sequence)
                or not self.devices
                or not all(is_int(d) and d >= 0 for d in self.devices)
                or len(set(self.devices)) != len(self.devices)
            ):
                raise InvalidArgumentError(
                    f"{where}.devices", self.devices, "a list of distinct GPU indices such as [0, 2]"
                )
            if len(self.devices) < max(1, self.gpus):
                raise InvalidArgumentError(f"{where}.devices", self.devices, f"at least gpus={self.gpus} indices")
            self.devices = list(self.devices)
        if self.device_groups is not None:
            from airflow_provider_gpusched.core.gpu.placement import GPURequest

            try:
                request = GPURequest(device_groups=self.device_groups, devices=self.devices)
            except InvalidArgumentError as exc:
                raise InvalidArgumentError(f"{where}.{exc.argument}", exc.value, exc.expected) from None
            self.device_groups = [list(g) for g in request.device_groups or ()]
            self.gpus = request.gpus  # the largest group (pool slots, the board)
        if self.gpus_per_node is not None and (not is_int(self.gpus_per_node) or self.gpus_per_node < 0):
            raise InvalidArgumentError(f"{where}.gpus_per_node", self.gpus_per_node, "a whole number >= 0")
        if self.gpus_per_node is not None and self.gpus not in (1, self.gpus_per_node):
            raise InvalidArgumentError(
                f"{where}.gpus_per_node",
                self.gpus_per_node,
                f"the same as gpus ({self.gpus}), or gpus left out: on Slurm gpus is per node",
            )
        if self.load_stage is not None and not isinstance(self.load_stage, bool):
            raise InvalidArgumentError(f"{where}.load_stage", self.load_stage, "true or false")
        if self.max_waiting is not None and (not is_int(self.max_waiting) or self.max_waiting < 0):
            raise InvalidArgumentError(f"{where}.max_waiting", self.max_waiting, "a whole number >= 0 (0: no bound)")
        if self.load_stage and self.distributed:
            raise InvalidArgumentError(
                f"{where}.load_stage", self.load_stage, "a trial started as one process (not with distributed=...)"
            )
        self.distributed = check_mode(self.distributed, f"{where}.distributed")
        self.rank_exit_grace = check_grace(self.rank_exit_grace, f"{where}.rank_exit_grace")
        if isinstance(self.nodelist, tuple):
            self.nodelist = list(self.nodelist)
        if isinstance(self.exclude, tuple):
            self.exclude = list(self.exclude)
        # the job's shape, by the rules every Slurm job's is checked by (core/job_shape.py)
        check_shape(
            {n: getattr(self, n) for n in SHAPE_FIELDS},
            cpus_per_task=self.cpus,
            distributed=self.distributed,
            where=f"{where}.",
            names={"cpus_per_task": "cpus"},
        )

    #: the job-shape settings that only Slurm has (gpus_per_node is the local backend's gpus too)
    SLURM_SHAPE = tuple(n for n in SHAPE_FIELDS if n != "gpus_per_node")

    def job_shape(self) -> dict[str, Any]:
        """The job's shape as SlurmJobSpec / SlurmJobOperator arguments (those set); a distributed trial gets one
        task slot per rank on each node (the trial runner starts the ranks with srun)."""
        shape = {name: getattr(self, name) for name in self.SLURM_SHAPE if getattr(self, name) is not None}
        if self.distributed:
            shape["ntasks_per_node"] = self.nproc_per_node
        return shape

    @property
    def nproc_per_node(self) -> int:
        return self.ntasks_per_node or max(1, self.gpus_on_each_node)

    @property
    def gpus_on_each_node(self) -> int:
        return self.gpus if self.gpus_per_node is None else self.gpus_per_node

    def distributed_settings(self, backend: str) -> dict[str, Any] | None:
        """How the trial runner starts a trial's command as ranks (written into the manifest), or None."""
        if not self.distributed:
            return None
        return {
            "mode": self.distributed,
            "backend": backend,
            "grace": self.rank_exit_grace,
            "nproc_per_node": self.nproc_per_node,
        }

    def check_backend(self, backend: str, sweep: str) -> None:
        """Refuse the settings that ``backend`` cannot honour (docs/sweeps.md: each setting per backend), naming the
        setting and the backend: nothing is dropped without a word."""
        if self.backend is not None and self.backend != backend:
            raise GpuschedError(
                f"sweep {sweep}: resources.backend={self.backend!r} (pavi's launcher): these trials "
                f"run on {self.backend} only, not on the {backend} backend"
            )
        get_backend(backend).check_resources(self, sweep)

    def local_gpu_arguments(self) -> dict[str, Any]:
        """What a trial on local GPUs asks for (``LocalGPUOperator`` arguments): at least one GPU; ``mem``
        (Slurm's --mem) is the host RAM it reserves, ``cpus`` the host CPUs (pinned); ``setup`` lines run in the
        trial's shell first."""
        return {
            "gpus": max(1, self.gpus_on_each_node),
            "gpu_memory": self.gpu_memory,
            "mem": self.mem,
            "job_class": self.job_class,
            "priority": self.priority,
            "env": self.env or None,
            "devices": self.devices,
            "device_groups": self.device_groups,
            "setup": self.setup or None,
            "cpus": self.cpus,
            "time_limit": self.time_limit,
            "load_stage": bool(self.load_stage),
            "max_waiting": self.max_waiting,
        }

    def local_gpu_request(self, host_limits: Mapping[str, Any]) -> Any:
        """The :class:`~airflow_provider_gpusched.core.gpu.placement.GPURequest` of one trial on local GPUs, with
        ``host_limits`` (``[gpusched]`` defaults: :func:`~airflow_provider_gpusched.core.options.host_limit_defaults`)
        for what the trial does not give."""
        from airflow_provider_gpusched.core.gpu.placement import GPURequest

        wanted = self.local_gpu_arguments()
        limits = dict(host_limits)
        if wanted["max_waiting"] is not None:
            limits["max_waiting"] = wanted["max_waiting"]
        return GPURequest(
            gpus=wanted["gpus"],
            gpu_memory=wanted["gpu_memory"],
            host_memory=wanted["mem"],
            devices=wanted["devices"],
            cpus=wanted["cpus"],
            device_groups=wanted["device_groups"],
            load_stage=wanted["load_stage"],
            **limits,
        )

    def slurm_arguments(self) -> dict[str, Any]:
        """What a trial on Slurm asks for (``SlurmJobOperator`` arguments); unset ones are left to Slurm."""
        return {
            "gpus": self.gpus_on_each_node or None,
            "cpus": self.cpus,
            "mem": self.mem,
            "partition": self.partition,
            "qos": self.qos,
            "time_limit": self.time_limit,
            "setup": self.setup or None,
            "job_class": self.job_class,
            "priority": self.priority,
            "env": self.env or None,
            **self.job_shape(),
        }


@dataclass
class SweepSpec:
    name: str
    search: str = "grid"
    global_config: Mapping[str, Any] = field(default_factory=dict)
    test_config: Sequence[Mapping[str, Any]] = field(default_factory=lambda: [{}])
    space: Mapping[str, Any] = field(default_factory=dict)
    count: int | None = None
    rounds: int | None = None
    per_round: int | None = None
    seed: int = 0
    grid_steps: int | None = None
    code_version: str | None = None
    command: Sequence[str] | None = None
    python_callable: Callable[..., Any] | None = None
    objective: Objective | None = None
    results_root: str | None = None
    force_rerun: bool = False
    #: other DAGs may use this sweep's results folder too (each DAG's Sweeps tab then shows trials the others
    #: ran); by default a folder belongs to the first DAG that planned in it, and another DAG is refused
    shared_with_other_dags: bool = False
    top_n: int = 10
    sampler: str = "tpe"
    resources: TrialResources = field(default_factory=TrialResources)
    evolution: EvolutionSettings | None = None
    #: a trial that ran but whose result cannot be scored: "fail" its task, or only "record" it as invalid
    on_invalid_result: str = "fail"
    #: refuse a stage of more trials than this (counted before expanding); default $GPUSCHED_MAX_TRIALS or 100,000
    max_trials: int | None = None
    #: failed + invalid trials a run may have and still succeed (None: any number)
    max_failed_trials: int | None = 0
    #: DI-toolkit's way of passing parameters: a config file with ``{{ param }}`` placeholders, rendered into
    #: each trial's folder (commands get its path as ``{config}``, every trial as $GPUSCHED_TRIAL_CONFIG)
    config_template: str | None = None
    #: stop trials early from their intermediate reports: core/sweep/pruning.py (``{rule: median}``, ``asha``)
    pruning: PruningRule | None = None
    #: how labels and result folders are spelled (GPU Task Scheduler's indicator, separator, value length)
    label_format: LabelFormat | None = None
    #: where a relative path in ``command`` is found (a trial runs in its own folder): default the YAML spec's
    #: directory, or the directory of the Python file that made the spec (the DAG file)
    base_dir: str | None = None
    #: at most this many trials run at once, on any backend (DI-toolkit's ``.max_workers(4)``); None: what fits
    max_workers: int | None = None
    #: GPU Task Scheduler's ``required_env``: ``(params, trial_dir) -> {name: value}``, called in each trial before
    #: it starts; its variables join the trial's environment (``package.module:function`` in YAML)
    required_env: Callable[..., Any] | None = None
    #: GPU Task Scheduler's own result folders count: a trial whose ``<results_root>/<label>`` folder exists (as
    #: that tool names them) is not run again unless force_rerun (set by a ``scheduler_config`` block)
    gts_result_folders: bool = False
    where: str = "sweep"

    def __post_init__(self) -> None:
        w = self.where
        check_sweep_name(self.name, f"{w}: name")
        if "." in self.name:  # Airflow's group ids: '.' joins a group's id to its tasks' ids
            raise InvalidArgumentError(
                f"{w}: name",
                self.name,
                "a sweep name of letters, digits, '_' and '-' (it "
                "becomes the Airflow task group id, where '.' is not "
                "allowed)",
            )
        if not isinstance(self.search, str) or self.search not in SEARCH_KINDS:
            raise InvalidArgumentError(f"{w}: search", self.search, f"one of {list(SEARCH_KINDS)}")
        self._check_shared_fields()
        self._build_parts()
        self._check_target()
        self._check_counts()
        self.kind.check(self)
        size = self.stage_size()
        if self.max_trials is not None and size > self.max_trials:  # None only before _check_shared_fields
            raise InvalidArgumentError(
                f"{w}: {self.kind.size_key}",
                f"{size:,} trials",
                f"at most max_trials={self.max_trials:,} trials per "
                f"stage: split the sweep, lower grid_steps/count, or raise max_trials (in the spec, or "
                f"$GPUSCHED_MAX_TRIALS) to run it",
            )
        self._check_placeholders()

    def _check_shared_fields(self) -> None:
        """The fields every search type reads: their types, and defaults for the ones left out."""
        w = self.where
        if self.global_config is None:
            self.global_config = {}
        if not isinstance(self.global_config, Mapping):
            raise InvalidArgumentError(f"{w}: global_config", self.global_config, "a mapping of fixed values")
        if self.space is None:
            self.space = {}
        if not isinstance(self.space, Mapping):
            raise InvalidArgumentError(f"{w}: space", self.space, "a mapping of parameter -> search space")
        if isinstance(self.objective, str):
            self.objective = Objective.parse(self.objective, f"{w}: objective")
        if self.objective is not None and not isinstance(self.objective, (Objective, Mapping)):
            raise InvalidArgumentError(
                f"{w}: objective", self.objective, "a mapping such as {metric: acc, mode: maximize}, or 'maximize acc'"
            )
        if not isinstance(self.resources, (TrialResources, Mapping)):
            raise InvalidArgumentError(f"{w}: resources", self.resources, "a mapping such as {gpus: 1}")
        if self.evolution is not None and not isinstance(self.evolution, (EvolutionSettings, Mapping)):
            raise InvalidArgumentError(f"{w}: evolution", self.evolution, "a mapping of evolution settings")
        if not isinstance(self.sampler, str):
            raise InvalidArgumentError(f"{w}: sampler", self.sampler, "'tpe', 'random' or 'nsga2'")
        for name in ("force_rerun", "shared_with_other_dags"):  # YAML 'no' in quotes is a string, and would be true
            if not isinstance(getattr(self, name), bool):
                raise InvalidArgumentError(f"{w}: {name}", getattr(self, name), "true or false")
        if self.results_root is not None and (
            not isinstance(self.results_root, str) or not self.results_root or "\x00" in self.results_root
        ):
            raise InvalidArgumentError(f"{w}: results_root", self.results_root, "a directory path")
        if self.code_version is not None and not isinstance(self.code_version, str):
            raise InvalidArgumentError(f"{w}: code_version", self.code_version, "a string")
        if self.grid_steps is not None and (
            not is_int(self.grid_steps) or not 1 <= self.grid_steps <= spaces.MAX_POINTS
        ):
            raise InvalidArgumentError(
                f"{w}: grid_steps", self.grid_steps, f"an integer from 1 to {spaces.MAX_POINTS:,}"
            )
        if self.max_trials is None:
            self.max_trials = _env_max_trials(w)
        check_int(self.max_trials, f"{w}: max_trials", 1)
        for key, value in (
            ("global_config", self.global_config),
            ("test_config", self.test_config),
            ("space", self.space),
        ):
            _check_finite(value, f"{w}: {key}")
        if isinstance(self.test_config, Sequence) and not isinstance(self.test_config, str) and not self.test_config:
            raise InvalidArgumentError(
                f"{w}: test_config",
                self.test_config,
                "a non-empty list of mappings (leave it out for one trial of global_config)",
            )

    def _build_parts(self) -> None:
        """The objective, resources, labels and pruning rule, from mappings where the spec gave mappings."""
        w = self.where
        if isinstance(self.objective, Mapping):
            self.objective = _objective(self.objective, f"{w}: objective")
        if isinstance(self.resources, Mapping):
            self.resources = _build(TrialResources, self.resources, f"{w}: resources")
        if self.label_format is None:
            self.label_format = DEFAULT_LABELS
        if isinstance(self.label_format, Mapping):
            self.label_format = _build(LabelFormat, self.label_format, f"{w}: label_format")
        if not isinstance(self.label_format, LabelFormat):
            raise InvalidArgumentError(
                f"{w}: label_format",
                self.label_format,
                "a mapping such as {indicator: '-', separator: ',', value_maxlen: 30}",
            )
        self.label_format.check(f"{w}: label_format")
        self.resources.check(f"{w}: resources")
        if isinstance(self.pruning, str):
            self.pruning = {"rule": self.pruning}
        if isinstance(self.pruning, Mapping):
            self.pruning = _build(PruningRule, self.pruning, f"{w}: pruning")
        if self.pruning is not None:
            self._check_pruning()

    def _check_pruning(self) -> None:
        w = self.where
        if not isinstance(self.pruning, PruningRule):
            raise InvalidArgumentError(
                f"{w}: pruning", self.pruning, "a rule such as {rule: median} or {rule: asha, reduction_factor: 3}"
            )
        self.pruning.check(f"{w}: pruning")
        if self.objective is None and (self.pruning.metric is None or self.pruning.mode is None):
            raise InvalidArgumentError(
                f"{w}: pruning",
                self.pruning.rule,
                "an objective (or pruning.metric and pruning.mode) to judge trials by",
            )
        if self.objective is not None:
            # several metrics: the rule judges the first unless pruning.metric names another
            primary = self.objective.primary
            metric = self.pruning.metric or primary.metrics[0]
            self.pruning.metric = metric
            self.pruning.mode = self.pruning.mode or (
                dict(zip(self.objective.metrics, self.objective.modes, strict=True)).get(metric, primary.modes[0])
            )

    def _check_target(self) -> None:
        """What a trial runs: exactly one of an argv list or a Python callable, and the optional env function."""
        w = self.where
        if (self.command is None) == (self.python_callable is None):
            raise InvalidArgumentError(
                f"{w}: command", self.command, "exactly one of command (an argv list) or python_callable"
            )
        if self.resources.distributed and self.python_callable is not None:
            raise InvalidArgumentError(
                f"{w}: resources.distributed",
                self.resources.distributed,
                "a command target (a python_callable trial runs inside the trial runner's own "
                "process; start the ranks from a command such as ['python', 'train.py'])",
            )
        if self.command is not None:
            if isinstance(self.command, str) or not isinstance(self.command, Sequence) or not self.command:
                raise InvalidArgumentError(
                    f"{w}: command", self.command, "a non-empty argv list such as [python, train.py, --lr, '{lr}']"
                )
            for i, arg in enumerate(self.command):
                if isinstance(arg, bool) or not isinstance(arg, (str, int, float)) or "\x00" in str(arg):
                    raise InvalidArgumentError(
                        f"{w}: command[{i}]", arg, "a string or number (quote true/false/null and lists in YAML)"
                    )
            self.command = [str(a) for a in self.command]
            self._resolve_command_paths()
        if isinstance(self.required_env, str):
            self.required_env = import_callable(self.required_env, f"{w}: required_env")
        if self.required_env is not None and not callable(self.required_env):
            raise InvalidArgumentError(
                f"{w}: required_env", self.required_env, "a function (params, trial_dir) -> {name: value}"
            )
        if self.python_callable is not None and not callable(self.python_callable):
            raise InvalidArgumentError(f"{w}: python_callable", self.python_callable, "a callable")

    def _check_counts(self) -> None:
        w = self.where
        check_int(self.max_workers, f"{w}: max_workers", 1, optional=True, expected="a whole number >= 1")
        for name in ("count", "rounds", "per_round", "top_n"):
            check_int(getattr(self, name), f"{w}: {name}", 1, optional=True)
        check_int(self.seed, f"{w}: seed")
        if self.on_invalid_result not in ("fail", "record"):
            raise InvalidArgumentError(f"{w}: on_invalid_result", self.on_invalid_result, "'fail' or 'record'")
        check_int(
            self.max_failed_trials,
            f"{w}: max_failed_trials",
            0,
            optional=True,
            expected="a whole number >= 0, or null for any number",
        )

    def _check_placeholders(self) -> None:
        """Every ``{{ name }}`` in the config template and ``{name}`` in the command names something a trial has."""
        w = self.where
        self._template: ConfigTemplate | None = None
        if self.config_template is not None:
            self._template = ConfigTemplate.read(self.config_template, f"{w}: config_template")
            known = set(self.parameter_names()) | set(TRIAL_FIELDS)
            unknown = [n for n in self._template.names if n not in known]
            if unknown:
                raise InvalidArgumentError(
                    f"{w}: config_template",
                    f"{self.config_template}: {{{{ {unknown[0]} }}}}",
                    f"placeholders naming a parameter or one of {list(TRIAL_FIELDS)} "
                    f"(parameters: {sorted(self.parameter_names())})",
                )
        if self.command is not None:
            known = set(self.parameter_names()) | set(TRIAL_FIELDS) | ({"config"} if self._template else set())
            for arg in self.command:
                for name in _PLACEHOLDER.findall(re.sub(r"\{\{|\}\}", "", arg)):
                    if name not in known:
                        raise InvalidArgumentError(
                            f"{w}: command",
                            arg,
                            f"placeholders naming a parameter or one of {list(TRIAL_FIELDS)}; "
                            f"{{{name}}} is neither (parameters: {sorted(self.parameter_names())}). "
                            "A brace meant literally (inline code, such as Python's f'{x}') "
                            "is written twice: f'{{x}}' reaches the program as f'{x}'",
                        )

    def _resolve_command_paths(self) -> None:
        """A trial's command runs in the trial's own folder, so a relative path there would name nothing: a
        relative file path that exists under ``base_dir`` becomes absolute. One that is not there is left as it is
        (a ``setup`` line may ``cd`` to where it is); if the trial then fails, its error says where it was looked
        for (trial_run.relative_path_hint)."""
        base = os.path.abspath(os.path.expanduser(self.base_dir)) if self.base_dir else _defining_directory()
        self.base_dir = base
        command = list(self.command or ())
        for i, arg in enumerate(command):
            if "{" in arg or arg.startswith("-") or os.path.isabs(os.path.expanduser(arg)) or not arg:
                continue
            pathlike = "/" in arg or os.path.splitext(arg)[1] in _FILE_SUFFIXES
            if not pathlike:
                continue
            candidate = os.path.normpath(os.path.join(base, os.path.expanduser(arg)))
            if os.path.isfile(candidate):
                command[i] = candidate
        self.command = command

    # -- what the spec means --------------------------------------------------------------------------
    @property
    def kind(self) -> SearchKind:
        """This spec's search type (core/sweep/search_kinds.py)."""
        return SEARCH_KINDS[self.search]

    @property
    def in_rounds(self) -> bool:
        return self.kind.in_rounds

    def parameter_names(self) -> list[str]:
        names = list(flatten(self.global_config))
        return names + [k for k in self.kind.varying(self) if k not in names]

    def stage_size(self) -> int:
        """Trials one stage maps over (a round, or the whole one-shot sweep), known without expanding, so a
        DAG file's parse time stays flat for huge grids (an upper bound for grids: conditions and duplicates
        can only remove trials)."""
        return self.kind.stage_size(self)

    def trials(self) -> list[Trial]:
        """Every trial of a one-shot (grid or random) sweep, in order, duplicates removed."""
        return self.kind.trials(self)

    @property
    def report_metric(self) -> str | None:
        """The reported metric that judges and draws a trial's curve: the pruning rule's, else the objective's
        first (None without either)."""
        if self.pruning is not None:
            return self.pruning.metric
        return self.objective.metrics[0] if self.objective is not None else None

    @property
    def log_scaled_params(self) -> list[str]:
        """Parameters whose space is ``loguniform``: the UI draws them on a log axis."""
        if not self.space:
            return []
        out = []
        for name, dim in flatten(self.space).items():
            dim = dim.dim if isinstance(dim, spaces.Conditional) else dim
            if isinstance(dim, spaces.LogUniform):
                out.append(name)
        return sorted(out)

    def varying(self) -> list[str]:
        return self.kind.varying(self)

    # -- loading -------------------------------------------------------------------------------------
    @classmethod
    def from_dict(cls, data: Any, where: str = "sweep") -> SweepSpec:
        if not isinstance(data, Mapping):
            raise InvalidArgumentError(where, data, "a mapping with name, command and a search space")
        allowed = {f.name for f in fields(cls)} - {"where", "python_callable"} | {
            "callable",
            "scheduler_config",
            "function_resource",
        }
        if "name" not in data:
            raise InvalidArgumentError(f"{where}: name", None, "a sweep name (the key is missing)")
        unknown = [k for k in data if k not in allowed]
        if unknown:
            raise UnknownKeyError(f"{where}: {unknown[0]}", unknown[0], allowed)
        kwargs = dict(data)
        if "function_resource" in kwargs:  # pavi's name for the resources of each call
            if "resources" in kwargs:
                raise InvalidArgumentError(
                    f"{where}: function_resource", kwargs["function_resource"], "one place: resources is given too"
                )
            kwargs["resources"] = kwargs.pop("function_resource")
        if "scheduler_config" in kwargs:
            kwargs = _scheduler_config(kwargs, where)
        if "callable" in kwargs:
            kwargs["python_callable"] = import_callable(kwargs.pop("callable"), f"{where}: callable")
        if "test_config" in kwargs and isinstance(kwargs["test_config"], list):
            kwargs["test_config"] = [
                {k: parse_dim(v, f"{where}: test_config[{i}].{k}") for k, v in block.items()}
                if isinstance(block, Mapping)
                else block
                for i, block in enumerate(kwargs["test_config"])
            ]
        if "space" in kwargs and isinstance(kwargs["space"], Mapping):
            kwargs["space"] = {k: parse_dim(v, f"{where}: space.{k}") for k, v in kwargs["space"].items()}
        if isinstance(kwargs.get("evolution"), Mapping) and isinstance(kwargs["evolution"].get("measure"), str):
            kwargs["evolution"] = {
                **kwargs["evolution"],
                "measure": import_callable(kwargs["evolution"]["measure"], f"{where}: evolution.measure"),
            }
        return cls(**kwargs, where=where)

    @classmethod
    def from_yaml(cls, path: str) -> SweepSpec:
        import yaml

        from airflow_provider_gpusched.core.yaml_loader import safe_load

        try:
            _check_regular(path)
            with open(path) as fh:
                data = safe_load(fh)
        except FileNotFoundError:
            raise InvalidArgumentError("sweep spec", path, "an existing YAML file") from None
        except _NotRegular as exc:
            raise InvalidArgumentError("sweep spec", path, f"a YAML file, not {exc}") from None
        except IsADirectoryError:
            raise InvalidArgumentError("sweep spec", path, "a YAML file, not a directory") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise InvalidArgumentError("sweep spec", path, f"a readable YAML file ({exc})") from None
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            at = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
            raise InvalidArgumentError(f"{path}:{at}", getattr(exc, "problem", str(exc)), "valid YAML") from None
        if isinstance(data, Mapping) and isinstance(data.get("config_template"), str):
            # a relative template path is relative to the spec file, wherever the command is run from
            data = {
                **data,
                "config_template": os.path.join(
                    os.path.dirname(os.path.abspath(path)), os.path.expanduser(data["config_template"])
                ),
            }
        if isinstance(data, Mapping):  # relative paths in the command: relative to the spec file
            data = {"base_dir": os.path.dirname(os.path.abspath(path)), **data}
        return cls.from_dict(data, where=path)


#: GPU Task Scheduler's scheduler_config keys, and where each goes
SCHEDULER_CONFIG = {
    "gpu": "resources.devices",
    "result_root_folder": "results_root",
    "force_rerun": "force_rerun",
    "test_config_string_indicator": "label_format.indicator",
    "test_config_string_separator": "label_format.separator",
    "config_string_value_maxlen": "label_format.value_maxlen",
    "test_config_string_inst_separator": "label_format.instance_separator",
}


def _scheduler_config(data: Mapping[str, Any], where: str) -> dict[str, Any]:
    """GPU Task Scheduler's ``scheduler_config`` block as our keys (a key given both ways is an error). Its
    ``gpu`` list (``["0", "1"]``, or groups ``[["0", "1"], ["2", "3"]]``) becomes ``resources.devices`` and
    ``resources.gpus`` (each group's size; trials may take any free GPUs of the list, not only a listed group).
    ``temp_folder``, ``log_file`` and ``scheduler_log_file_path`` are accepted and have no use here: each
    trial's folder holds its ``output.log`` and ``status.json``."""
    block = data["scheduler_config"]
    w = f"{where}: scheduler_config"
    if not isinstance(block, Mapping):
        raise InvalidArgumentError(w, block, "a mapping (GPU Task Scheduler's scheduler_config)")
    out = {k: v for k, v in data.items() if k != "scheduler_config"}
    out.setdefault("gts_result_folders", True)
    ignored = ("temp_folder", "log_file", "scheduler_log_file_path")
    unknown = [k for k in block if k not in SCHEDULER_CONFIG and k not in ignored]
    if unknown:
        raise InvalidArgumentError(
            f"{w}.{unknown[0]}",
            block[unknown[0]],
            f"a GPU Task Scheduler key (one of {sorted([*SCHEDULER_CONFIG, *ignored])})",
        )
    for key, value in block.items():
        if key in ignored:
            continue
        target = SCHEDULER_CONFIG[key]
        if key == "gpu":
            value = _gpu_groups(value, f"{w}.gpu")
        head, _, leaf = target.partition(".")
        if not leaf:
            if head in out:
                raise InvalidArgumentError(f"{w}.{key}", value, f"one place: {head} is given too")
            out[head] = value
            continue
        section = out.get(head) or {}
        if not isinstance(section, Mapping):
            raise InvalidArgumentError(f"{where}: {head}", section, "a mapping")
        section = dict(section)
        if key == "gpu":
            gpus, devices, groups = value
            if "devices" in section or "device_groups" in section:
                raise InvalidArgumentError(
                    f"{w}.gpu", block[key], "one place: resources.devices (or device_groups) is given too"
                )
            if groups is not None:  # groups, or a mixed list: each trial takes one whole group
                section["device_groups"] = groups
            else:
                section.setdefault("gpus", gpus)
                section["devices"] = devices
        else:
            if leaf in section:
                raise InvalidArgumentError(f"{w}.{key}", value, f"one place: {target} is given too")
            section[leaf] = value
        out[head] = section
    # GPU Task Scheduler's own label defaults (key-value,key-value), so its result folders keep their names
    labels = out.get("label_format")
    if labels is None or isinstance(labels, Mapping):
        out["label_format"] = {"indicator": "-", "separator": ",", "instance_separator": "+", **dict(labels or {})}
    return out


def _gpu_groups(value: Any, where: str) -> tuple[int, list[int], list[list[int]] | None]:
    """``(gpus, devices, None)`` for a list of GPU ids (each trial one GPU of them); ``(largest group, ids,
    groups)`` when the list holds groups (``[["0", "1"], ["2", "3"]]``, or mixed ``["0", ["1", "2"]]``)."""
    groups = (
        [g if isinstance(g, (list, tuple)) else [g] for g in value]
        if isinstance(value, (list, tuple)) and value
        else None
    )
    try:
        indices = [[int(str(d), 10) for d in g] for g in groups] if groups else None
    except ValueError:
        indices = None
    if not indices or any(not g or min(g) < 0 for g in indices):
        raise InvalidArgumentError(
            where, value, "GPU ids such as ['0', '1'] or groups such as [['0', '1'], ['2', '3']]"
        )
    flat = [d for g in indices for d in g]
    if len(set(flat)) != len(flat):
        raise InvalidArgumentError(where, value, "each GPU id once")
    if all(not isinstance(g, (list, tuple)) for g in value):
        return 1, flat, None
    return max(len(g) for g in indices), flat, indices


def _env_max_trials(where: str) -> int:
    raw = os.environ.get("GPUSCHED_MAX_TRIALS", "")
    if not raw:
        return DEFAULT_MAX_TRIALS
    if not raw.isdigit() or int(raw) < 1:
        raise InvalidArgumentError(f"{where}: $GPUSCHED_MAX_TRIALS", raw, "an integer >= 1")
    return int(raw)


def _check_finite(value: Any, where: str, depth: int = 0) -> None:
    """NaN and infinities are refused wherever a parameter value can be written (they break ids, JSON and
    comparisons)."""
    if depth > 50:
        raise InvalidArgumentError(where, "...", "values nested less than 50 levels deep")
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidArgumentError(where, value, "a finite number (not NaN or infinity)")
    if isinstance(value, Mapping):
        for k, v in value.items():
            _check_finite(v, f"{where}.{k}", depth + 1)
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _check_finite(v, f"{where}[{i}]", depth + 1)


def _objective(data: Mapping[str, Any], where: str) -> Objective:
    unknown = [k for k in data if k not in ("metric", "mode", "weights")]
    if unknown:
        raise InvalidArgumentError(f"{where}.{unknown[0]}", data[unknown[0]], "only metric, mode and weights")
    try:
        metric: Any = data.get("metric")  # Objective checks it and names what it expected
        return Objective(metric, data.get("mode", "maximize"), data.get("weights"))
    except InvalidArgumentError as exc:
        raise InvalidArgumentError(f"{where}.{exc.argument.split('.')[-1]}", exc.value, exc.expected) from None


#: pavi's launchers: where its function runs, and how it starts as ranks
PAVI_LAUNCHERS = {"slurm": ("slurm", "srun"), "pytorch": (None, "torchrun"), "none": (None, None)}


def _pavi_launch(data: dict[str, Any], where: str) -> dict[str, Any]:
    """pavi's ``function_resource`` keys ``launcher`` and ``dist_params`` as our settings: ``launcher='slurm'``
    runs the trials on Slurm only (``backend``), ``dist_params`` starts them as ranks (one per GPU: srun on Slurm,
    torchrun elsewhere) with ``$GPUSCHED_DIST_BACKEND`` naming the backend for ``init_process_group``."""
    if "executor" in data:
        raise InvalidArgumentError(
            f"{where}.executor",
            data["executor"],
            "no executor: pavi's cluster name has no "
            "meaning here; the sweep's Slurm connection picks the cluster "
            "(sweep_task_group(spec, backend='slurm', slurm_conn_id=...))",
        )
    launcher = data.pop("launcher", None)
    if launcher is not None and launcher not in PAVI_LAUNCHERS:
        raise InvalidArgumentError(f"{where}.launcher", launcher, f"one of {sorted(PAVI_LAUNCHERS)} (pavi's launchers)")
    backend, start = PAVI_LAUNCHERS.get(launcher, (None, None))
    if backend:
        data.setdefault("backend", backend)
    params = data.pop("dist_params", None)
    if params is not None:
        if not isinstance(params, Mapping) or set(params) - {"backend"}:
            raise InvalidArgumentError(f"{where}.dist_params", params, "{backend: nccl} (the process group's backend)")
        if params.get("backend") not in (None, "nccl", "gloo", "mpi"):
            raise InvalidArgumentError(f"{where}.dist_params.backend", params.get("backend"), "nccl, gloo or mpi")
        data.setdefault("distributed", start or "torchrun")
        if params.get("backend"):
            data["env"] = {**dict(data.get("env") or {}), "GPUSCHED_DIST_BACKEND": params["backend"]}
    return data


def _build(kind: type, data: Mapping[str, Any], where: str) -> Any:
    data = dict(data)
    if kind is TrialResources:  # seed 000 spellings
        for seed_name, ours in (("num_gpus", "gpus"), ("num_cpus", "cpus"), ("source", "setup")):
            if seed_name in data and ours not in data:
                data[ours] = data.pop(seed_name)
        data = _pavi_launch(data, where)
        if "normal" in data and "job_class" not in data:
            normal = data.pop("normal")
            if not isinstance(normal, bool):
                raise InvalidArgumentError(f"{where}.normal", normal, "true or false")
            data["job_class"] = "normal" if normal else "idle"
    return record_from_mapping(kind, data, where)


_SPACE_MAKERS = {"choice": 1, "uniform": 2, "loguniform": 2, "randint": 2, "quniform": 3}


def _refuse_misspelt_space(value: Mapping[str, Any], where: str) -> None:
    """A one-key mapping (beside ``when``) whose key looks like a space type (``{logunifrom: [1e-4, 0.1]}``)
    is a typo, not a nested parameter ``lr.logunifrom`` with two values: refused, naming the key and the closest
    space type. A real nested parameter of that spelling can be written as ``{values: [...]}`` under its key."""
    rest = {k: v for k, v in value.items() if k != "when"}
    if len(rest) != 1:
        return
    ((key, args),) = rest.items()
    if not isinstance(key, str) or not isinstance(args, list):
        return
    import difflib

    names = [*_SPACE_MAKERS, "values"]
    close = difflib.get_close_matches(key.lower(), names, n=1, cutoff=0.75)
    if close:
        raise UnknownKeyError(f"{where}.{key}", key, names, what="search space type")


def parse_dim(value: Any, where: str) -> Any:
    """YAML form of a dimension: a list of values, ``{uniform: [lo, hi]}`` and friends, ``{values: [...]}``,
    each optionally with ``when: {param: value-or-list}``; a nested plain mapping stays nested."""
    if isinstance(
        value, (spaces.Choice, spaces.Uniform, spaces.LogUniform, spaces.RandInt, spaces.QUniform, spaces.Conditional)
    ):
        return value
    if not isinstance(value, Mapping):
        return value
    kinds = [k for k in value if k in _SPACE_MAKERS or k == "values"]
    if not kinds:
        _refuse_misspelt_space(value, where)
        if "when" in value:
            raise InvalidArgumentError(f"{where}.when", value["when"], "a search space or values next to when")
        return {k: parse_dim(v, f"{where}.{k}") for k, v in value.items()}
    extra = [k for k in value if k not in (*kinds, "when")]
    if len(kinds) > 1 or extra:
        raise InvalidArgumentError(
            where, dict(value), "one space (choice/uniform/loguniform/randint/quniform/values) and optionally when"
        )
    kind = kinds[0]
    args = value[kind]
    try:
        if kind in ("values", "choice"):
            if not isinstance(args, list) or not args:
                raise InvalidArgumentError(kind, args, "a non-empty list of values")
            dim: Any = list(args) if kind == "values" else spaces.choice(args)
        else:
            if not isinstance(args, list) or len(args) != _SPACE_MAKERS[kind]:
                raise InvalidArgumentError(kind, args, f"a list of {_SPACE_MAKERS[kind]} numbers")
            dim = getattr(spaces, kind)(*args)
        if "when" in value:
            dim = spaces.when(value["when"], dim)
    except InvalidArgumentError as exc:
        raise InvalidArgumentError(where, exc.value, exc.expected) from None
    return dim


_FILE_SUFFIXES = (".py", ".sh", ".bash", ".yaml", ".yml", ".json", ".toml", ".cfg", ".ini", ".txt", ".csv")


def _defining_directory() -> str:
    """The directory of the first Python file up the stack that is not this package's (nor the standard
    library's dataclasses): the DAG file or script that made the spec."""
    import sys

    package = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        name = frame.f_code.co_filename
        if not name.startswith(package) and not name.startswith("<") and "dataclasses" not in os.path.basename(name):
            return os.path.dirname(os.path.abspath(name))
        frame = frame.f_back
    return os.getcwd()


_TEMPLATE_PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_.]*)\s*\}\}")


def _placeholder_at(text: str, where: int) -> str:
    """The ``{{ name }}`` placeholder that starts at ``where`` (found there before), for an error message."""
    match = _TEMPLATE_PLACEHOLDER.match(text, where)
    return match.group(0) if match else text[where : where + 40]


MAX_CONFIG_TEMPLATE = 1 << 20


#: how a value is written into each kind of config template (by file extension): a literal of the file's language,
#: so that a value can never become code or syntax. Other extensions take the value as text, refused when it holds
#: a newline or another control character (it could add a key or a command).
TEMPLATE_KINDS = {
    ".py": "python",
    ".json": "json",
    ".yaml": "yaml",
    ".yml": "yaml",
    ".toml": "yaml",
    ".sh": "shell",
    ".bash": "shell",
    ".zsh": "shell",
}


class ConfigTemplate:
    """A config file with ``{{ param }}`` placeholders (dotted names allowed), rendered per trial. Values are
    written as literals of the file's language: Python literals in ``.py`` files; JSON in ``.json``, ``.yaml``,
    ``.yml`` and ``.toml`` (a JSON scalar or list is valid there); shell words quoted with ``shlex.quote`` in
    ``.sh``; plain text elsewhere, without newlines or control characters. A placeholder inside quotes
    (``lr = "{{ lr }}"``) is refused: the literal brings its own quotes, and inside a string a value could
    close it and go on as code."""

    def __init__(self, name: str, text: str) -> None:
        self.name, self.text = name, text
        self.names = sorted(set(_TEMPLATE_PLACEHOLDER.findall(text)))
        self.kind = TEMPLATE_KINDS.get(os.path.splitext(name)[1].lower(), "text")
        quoted = _quoted_placeholder(text, self.kind)
        if quoted:
            raise InvalidArgumentError(
                "config_template",
                f"{name}: {quoted}",
                "a placeholder outside quotes: it is written as a quoted literal of the "
                "file's language (remove the quotes around it)",
            )
        #: placeholders (by offset) that stand in a shell comment: their value may hold no newline
        self.in_comment: set[int] = set()
        if self.kind == "shell":
            where, why, self.in_comment = _shell_placeholder_contexts(text)
            if why:
                line = text.count("\n", 0, where) + 1
                raise InvalidArgumentError(
                    "config_template",
                    f"{name}, line {line}: {_placeholder_at(text, where)}",
                    f"a placeholder where its quoted value stays one shell word, not {why} (there a value can "
                    f"become code). Write it outside (e.g. printf '%s\\n' {{{{ name }}}} >> file) or use a "
                    f".yaml/.json/.cfg template",
                )

    @classmethod
    def read(cls, path: Any, where: str) -> ConfigTemplate:
        if not isinstance(path, str) or not path:
            raise InvalidArgumentError(where, path, "the path of a config template file")
        try:
            _check_regular(path)
            if os.path.getsize(path) > MAX_CONFIG_TEMPLATE:
                raise InvalidArgumentError(where, path, "a config template of at most 1 MiB")
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
        except FileNotFoundError:
            raise InvalidArgumentError(where, path, "an existing config template file") from None
        except _NotRegular as exc:
            raise InvalidArgumentError(where, path, f"a config template file, not {exc}") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise InvalidArgumentError(where, path, f"a readable UTF-8 text file ({exc})") from None
        return cls(os.path.basename(path), text)

    def render(self, values: Mapping[str, Any]) -> str:
        def literal(match: re.Match[str]) -> str:
            name = match.group(1)
            if name not in values:
                raise InvalidArgumentError(
                    "config_template",
                    f"{self.name}: {{{{ {name} }}}}",
                    f"a parameter this trial has (it has {sorted(values)}; a conditional one?)",
                )
            value = values[name]
            if self.kind == "python":
                return repr(value)
            if self.kind in ("json", "yaml"):
                return json.dumps(value)
            if self.kind == "shell":
                import shlex

                text = _text(value)
                if match.start() in self.in_comment and _CONTROL.search(text):
                    raise InvalidArgumentError(
                        "config_template",
                        f"{self.name}: {{{{ {name} }}}} = {text!r}",
                        "a value without newlines or control characters in a shell comment "
                        "(a newline would end the comment and start a command)",
                    )
                return shlex.quote(text)
            text = _text(value)
            if _CONTROL.search(text):
                raise InvalidArgumentError(
                    "config_template",
                    f"{self.name}: {{{{ {name} }}}} = {text!r}",
                    "a value without newlines or control characters in a plain-text "
                    "template (it could add a line of its own)",
                )
            return text

        return _TEMPLATE_PLACEHOLDER.sub(literal, self.text)


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


_HEREDOC = re.compile(r"<<(-?)[ \t]*(?:'([^'\n]*)'|\"([^\"\n]*)\"|\\?([^\s;&|<>()]+))")


def _shell_placeholder_contexts(text: str) -> tuple[int, str, set[int]]:
    """Where a quoted shell word would not stay a word: ``(offset, why, comments)``, the first placeholder inside a
    heredoc (quoted or not: ``$( )`` runs in one, and a value line equal to its delimiter ends it), inside
    backticks (backslashes there are read before the quotes), or as a heredoc's delimiter; ``why`` is "" when
    there is none. ``comments``: the offsets of placeholders in ``#`` comments (their values may not hold a
    newline). Quotes are tracked so that ``#``, ``<<`` and backticks inside them are text."""
    comments: set[int] = set()
    quote, backtick, i = "", False, 0
    pending: list[tuple[str, bool, int]] = []  # heredocs opened on this line: (delimiter, strip tabs, line start)
    while i < len(text):
        c = text[i]
        match = _TEMPLATE_PLACEHOLDER.match(text, i)
        if match:
            if backtick:
                return i, "inside backticks (`...`)", comments
            i = match.end()
            continue
        if quote:
            if c == "\\" and quote == '"':
                i += 1
            elif c == quote:
                quote = ""
            i += 1
            continue
        if c == "\n":
            i += 1
            for delimiter, strip, opened in pending:  # the heredocs' bodies follow this line, one after another
                while i < len(text):
                    end = text.find("\n", i)
                    end = len(text) if end < 0 else end
                    line = text[i:end]
                    body = _TEMPLATE_PLACEHOLDER.search(line)
                    if (line.lstrip("\t") if strip else line) == delimiter:
                        i = end + 1
                        break
                    if body:
                        return i + body.start(), f"inside a heredoc (<<{delimiter}, opened on line {opened})", comments
                    i = end + 1
            pending = []
            continue
        if c == "\\":
            i += 2
            continue
        if c == "#" and (i == 0 or text[i - 1] in " \t\n;&|("):
            end = text.find("\n", i)
            end = len(text) if end < 0 else end
            comments.update(i + m.start() for m in _TEMPLATE_PLACEHOLDER.finditer(text[i:end]))
            i = end
            continue
        if c == "`":
            backtick = not backtick
        elif c in ("'", '"'):
            quote = c
        elif text.startswith("<<", i) and not text.startswith("<<<", i):
            here = _HEREDOC.match(text, i)
            named = _TEMPLATE_PLACEHOLDER.match(text, len(text) - len(text[i + 2 :].lstrip("-'\" \t\\")))
            delimiter = next((g for g in here.group(2, 3, 4) if g is not None), "") if here else ""
            if named or _TEMPLATE_PLACEHOLDER.search(delimiter):
                found = named or _TEMPLATE_PLACEHOLDER.search(text, i)
                return (found.start() if found else i), "as a heredoc's delimiter", comments
            if here is None:  # `<<` and no word: not a heredoc the shell would run either
                i += 2
                continue
            pending.append((delimiter, here.group(1) == "-", text.count("\n", 0, i) + 1))
            i = here.end()
            continue
        i += 1
    return 0, "", comments


def _quoted_placeholder(text: str, kind: str) -> str:
    """The first placeholder that stands inside a string literal of the template's language, or ''."""
    if kind == "text" or not _TEMPLATE_PLACEHOLDER.search(text):
        return ""
    if kind == "python":
        import io
        import tokenize

        marked = _TEMPLATE_PLACEHOLDER.sub(lambda m: f"__gpusched_placeholder_{m.start()}__", text)
        try:
            for token in tokenize.generate_tokens(io.StringIO(marked).readline):
                if (
                    token.type != tokenize.COMMENT
                    and token.type not in (tokenize.NAME, tokenize.OP)
                    and "__gpusched_placeholder_" in token.string
                ):
                    start = int(token.string.split("__gpusched_placeholder_", 1)[1].split("__", 1)[0])
                    return _placeholder_at(text, start)
        except (tokenize.TokenError, SyntaxError, IndentationError):
            return ""  # not Python we can read: rendered literals still cannot leave their own quotes
        return ""
    # JSON, YAML, TOML, shell: walk the text keeping track of quotes and # comments. Outside the shell a quote
    # opens a string only where a value starts (an apostrophe inside a word, "it's", is text)
    quote, i = "", 0
    while i < len(text):
        c = text[i]
        if not quote and c == "#" and kind != "json" and (i == 0 or text[i - 1] in " \t\n"):
            i = text.find("\n", i)
            if i < 0:
                break
            continue
        match = _TEMPLATE_PLACEHOLDER.match(text, i)
        if match:
            if quote:
                return match.group(0)
            i = match.end()
            continue
        if quote:
            if c == "\\" and quote == '"':
                i += 1
            elif c == quote:
                quote = ""
        elif c in ("'", '"') and (kind == "shell" or i == 0 or text[i - 1] in " \t\n:[{,=("):
            quote = c
        i += 1
    return ""


def placeholder_values(params: Mapping[str, Any], trial_dir: str, trial: Trial) -> dict[str, Any]:
    """What ``{name}`` in a command and ``{{ name }}`` in a config template may name: the parameters (dotted
    names) and :data:`TRIAL_FIELDS`."""
    return {**params, "trial_dir": trial_dir, "trial_id": trial.trial_id, "label": trial.label}


def format_command(
    command: Sequence[str], params: Mapping[str, Any], trial_dir: str, trial: Trial, config: str | None = None
) -> list[str]:
    """Fill ``{param}`` placeholders (dotted names allowed) in each argv element. Values are put in as text,
    each argument stays one argument (no shell): spaces, quotes and ``;`` arrive verbatim. ``{{``/``}}``
    give literal braces."""
    fill = {**placeholder_values(params, trial_dir, trial), **({"config": config} if config else {})}

    def one(arg: str) -> str:
        parts = re.split(r"(\{\{|\}\})", arg)
        out = []
        for part in parts:
            if part == "{{":
                out.append("{")
            elif part == "}}":
                out.append("}")
            else:
                out.append(_PLACEHOLDER.sub(lambda m: _fill(fill, m.group(1), arg, trial), part))
        return "".join(out)

    return [one(a) for a in command]


def _fill(fill: Mapping[str, Any], name: str, arg: str, trial: Trial) -> str:
    if name not in fill:
        raise InvalidArgumentError(
            "command",
            arg,
            f"parameters trial {trial.label or trial.trial_id} has; it has no {name!r} (a conditional parameter?)",
        )
    return _text(fill[name])


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def default_results_root() -> str:
    """Outside Airflow (the CLI, scripts): ``$AIRFLOW__GPUSCHED__SWEEP_RESULTS_ROOT``, else
    ``<AIRFLOW_HOME>/gpusched/sweeps`` — the same default the Airflow side uses (core/options.py)."""
    from airflow_provider_gpusched.core.options import directory_outside_airflow

    return directory_outside_airflow("sweep_results_root")
