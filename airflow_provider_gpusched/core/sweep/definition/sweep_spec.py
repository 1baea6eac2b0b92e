"""A sweep specification: what to try, how to run a trial, what to optimise, in Python or YAML (docs/sweeps.md)::

    name: hpo
    search: random            # grid (default) | random | optuna | evolution
    count: 20
    space: {lr: {loguniform: [1.0e-5, 1.0e-1]}, optimizer: [sgd, adam]}
    command: [python, train.py, --lr, "{lr}"]
    objective: {metric: accuracy, mode: maximize}
    resources: {gpus: 1, gpu_memory: 6GiB}

Its parts live in core/sweep/parts/ (resources.py: each trial's resources; space_yaml.py: spaces in YAML;
seed_formats.py: the seed tools' spellings; config_template.py; command.py: the command per trial, which compute
nodes import); reading YAML and mappings is files.py beside it. Every error names the file and the key path
(``sweeps/hpo.yaml: space.lr: expected ...``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Annotated, Any

from airflow_provider_gpusched.core.checks import check_finite, record_from_mapping
from airflow_provider_gpusched.core.deprecation import moved_names
from airflow_provider_gpusched.core.errors import InvalidArgumentError
from airflow_provider_gpusched.core.import_target import import_callable
from airflow_provider_gpusched.core.records import Settings, one_of, says
from airflow_provider_gpusched.core.sweep.definition.search_kind import (
    SEARCH_KINDS,
    SearchKind,
    settings_keys,
    settings_owner,
)
from airflow_provider_gpusched.core.sweep.definition.tracking_settings import parse_tracking
from airflow_provider_gpusched.core.sweep.parts import spaces
from airflow_provider_gpusched.core.sweep.parts.command import (
    TRIAL_FIELDS,
    check_command_placeholders,
    resolve_command_paths,
)
from airflow_provider_gpusched.core.sweep.parts.config_template import ConfigTemplate
from airflow_provider_gpusched.core.sweep.parts.expand import (
    DEFAULT_LABELS,
    LabelFormat,
    Trial,
    flatten,
)
from airflow_provider_gpusched.core.sweep.parts.objective import Objective, objective_from_mapping
from airflow_provider_gpusched.core.sweep.parts.resources import TrialResources
from airflow_provider_gpusched.core.sweep.parts.seed_formats import seed_resources
from airflow_provider_gpusched.core.sweep.pruning_rules.judging import PruningRule
from airflow_provider_gpusched.core.sweep.records.store import check_sweep_name

#: the most trials one stage of a sweep may have unless the spec raises ``max_trials`` (or
#: ``$GPUSCHED_MAX_TRIALS``): counted before anything is expanded
DEFAULT_MAX_TRIALS = 100_000
AtLeastOne = Annotated[int, says("an integer >= 1", ge=1)]
#: YAML's 'no' in quotes is a string, and would be true
TrueOrFalse = Annotated[bool, says("true or false")]


@dataclass
class SweepSpec:
    name: str
    search: str = "grid"
    global_config: Annotated[Mapping[Any, Any], says("a mapping of fixed values")] = field(default_factory=dict)
    test_config: Sequence[Mapping[str, Any]] = field(default_factory=lambda: [{}])
    space: Annotated[Mapping[Any, Any], says("a mapping of parameter -> search space")] = field(default_factory=dict)
    count: AtLeastOne | None = None
    rounds: AtLeastOne | None = None
    per_round: AtLeastOne | None = None
    seed: Annotated[int, says("an integer")] = 0
    grid_steps: (
        Annotated[int, says(f"an integer from 1 to {spaces.MAX_POINTS:,}", ge=1, le=spaces.MAX_POINTS)] | None
    ) = None
    code_version: Annotated[str, says("a string")] | None = None
    command: Sequence[str] | None = None
    python_callable: Callable[..., Any] | None = None
    objective: Objective | None = None
    results_root: Annotated[str, says("a directory path", min_length=1, pattern=r"^[^\x00]*$")] | None = None
    force_rerun: TrueOrFalse = False
    #: other DAGs may use this sweep's results folder too (each DAG's Sweeps tab then shows trials the others
    #: ran); by default a folder belongs to the first DAG that planned in it, and another DAG is refused
    shared_with_other_dags: TrueOrFalse = False
    top_n: AtLeastOne | None = 10
    sampler: Annotated[str, says("'tpe', 'gp', 'cmaes', 'random' or 'nsga2'")] = "tpe"
    #: optuna: a pool of workers that each ask for the next trial the moment its slot frees (no round barrier):
    #: ``count`` trials in all (default rounds x per_round), ``max_workers`` at once (default per_round);
    #: core/sweep/running/asynchronous.py. Grid and random searches never wait on rounds; evolution is refused
    asynchronous: TrueOrFalse = False
    resources: TrialResources = field(default_factory=TrialResources)
    #: the settings of the built-in search types with settings, under their names: a mapping, or the kind's own
    #: record (EvolutionSettings, PBTSettings, HyperbandSettings); their kind parses and checks them
    #: (core/sweep/searches/evolution.py, pbt.py, hyperband.py)
    evolution: Any = None
    pbt: Any = None
    hyperband: Any = None
    #: the settings of an installed search type, under its kind's ``settings_key`` (a spec file may write that key
    #: at the top level, as the built-in ones are written)
    search_settings: Annotated[Mapping[str, Any], says("a mapping of a search type's settings")] | None = None
    #: a trial that ran but whose result cannot be scored: "fail" its task, or only "record" it as invalid
    on_invalid_result: Annotated[str, says("'fail' or 'record'"), one_of(("fail", "record"))] = "fail"
    #: refuse a stage of more trials than this (counted before expanding); default $GPUSCHED_MAX_TRIALS or 100,000
    max_trials: AtLeastOne | None = None
    #: failed + invalid trials a run may have and still succeed (None: any number)
    max_failed_trials: Annotated[int, says("a whole number >= 0, or null for any number", ge=0)] | None = 0
    #: DI-toolkit's way of passing parameters: a config file with ``{{ param }}`` placeholders, rendered into
    #: each trial's folder (commands get its path as ``{config}``, every trial as $GPUSCHED_TRIAL_CONFIG)
    config_template: str | None = None
    #: stop trials early from their intermediate reports: core/sweep/pruning_rules/judging.py (``{rule: median}``, ``asha``)
    pruning: PruningRule | None = None
    #: how labels and result folders are spelled (GPU Task Scheduler's indicator, separator, value length)
    label_format: LabelFormat | None = None
    #: where a relative path in ``command`` is found (a trial runs in its own folder): default the YAML spec's
    #: directory, or the directory of the DAG file, module or script that uses the spec (:meth:`anchor`)
    base_dir: str | None = None
    #: at most this many trials run at once, on any backend (DI-toolkit's ``.max_workers(4)``); None: what fits
    max_workers: Annotated[int, says("a whole number >= 1", ge=1)] | None = None
    #: GPU Task Scheduler's ``required_env``: ``(params, trial_dir) -> {name: value}``, called in each trial before
    #: it starts; its variables join the trial's environment (``package.module:function`` in YAML)
    required_env: Callable[..., Any] | None = None
    #: GPU Task Scheduler's own result folders count: a trial whose ``<results_root>/<label>`` folder exists (as
    #: that tool names them) is not run again unless force_rerun (set by a ``scheduler_config`` block)
    gts_result_folders: bool = False
    #: experiment trackers the trials are sent to: mlflow, tensorboard, wandb or a callback of your own
    #: (core/sweep/definition/tracking_settings.py, docs/tracking.md); off by default
    tracking: Sequence[Any] | None = None
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
        if self.space is None:
            self.space = {}
        if self.max_trials is None:
            self.max_trials = _env_max_trials(w)
        _SETTINGS.check(self, w, joiner=": ")  # each setting's type and bounds (their annotations)
        if isinstance(self.objective, str):
            self.objective = Objective.parse(self.objective, f"{w}: objective")
        if self.objective is not None and not isinstance(self.objective, (Objective, Mapping)):
            raise InvalidArgumentError(
                f"{w}: objective", self.objective, "a mapping such as {metric: acc, mode: maximize}, or 'maximize acc'"
            )
        if not isinstance(self.resources, (TrialResources, Mapping)):
            raise InvalidArgumentError(f"{w}: resources", self.resources, "a mapping such as {gpus: 1}")
        self._check_kinds_settings()
        for key, value in (
            ("global_config", self.global_config),
            ("test_config", self.test_config),
            ("space", self.space),
        ):
            check_finite(value, f"{w}: {key}")
        if isinstance(self.test_config, Sequence) and not isinstance(self.test_config, str) and not self.test_config:
            raise InvalidArgumentError(
                f"{w}: test_config",
                self.test_config,
                "a non-empty list of mappings (leave it out for one trial of global_config)",
            )

    def _check_kinds_settings(self) -> None:
        """Each search type's settings given: a mapping or that kind's record, and (for most kinds) only in a
        spec of that type. The kind parses its own (:meth:`SearchKind.parse_settings`); a kind is loaded only
        when settings were given, the one the key names first (a broken installed kind breaks no other spec)."""
        w = self.where
        for key in self.search_settings or {}:
            if key in _KIND_SETTING_FIELDS:  # the kind reads the spec's own key: refused, never silently ignored
                raise InvalidArgumentError(
                    f"{w}: search_settings.{key}", "...", f"{key} settings under the spec's own key: write {key}:"
                )
        given = {key: getattr(self, key) for key in _KIND_SETTING_FIELDS if getattr(self, key) is not None}
        given.update(self.search_settings or {})
        for key, raw in given.items():
            found = settings_owner(key, (self.search,))
            if found is None:
                raise InvalidArgumentError(
                    f"{w}: search_settings.{key}", "...", f"the settings of a search type: {settings_keys()}"
                )
            name, kind = found
            if kind.settings_only_with_kind and self.search != name:
                raise InvalidArgumentError(f"{w}: {key}", "...", f"{key} settings only with search: {name}")
            kind.check_settings_type(raw, f"{w}: {key}")

    def _build_parts(self) -> None:
        """The objective, resources, labels and pruning rule, from mappings where the spec gave mappings."""
        w = self.where
        if isinstance(self.objective, Mapping):
            self.objective = objective_from_mapping(self.objective, f"{w}: objective")
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
            self.pruning = PruningRule.from_mapping(self.pruning, f"{w}: pruning")
        if self.pruning is not None:
            self._check_pruning()
        self.tracking = parse_tracking(self.tracking, f"{w}: tracking")

    def _check_pruning(self) -> None:
        w = self.where
        if not isinstance(self.pruning, PruningRule):
            raise InvalidArgumentError(
                f"{w}: pruning", self.pruning, "a rule such as {rule: median} or {rule: asha, reduction_factor: 3}"
            )
        self.pruning.check(f"{w}: pruning")
        if self.pruning.make_judge().needs_shared_study(self.pruning) and not self.asks_as_it_goes:
            raise InvalidArgumentError(
                f"{w}: pruning.pruner",
                self.pruning.pruner,
                "a pruner that judges from the trials' reports in a search in rounds or a grid/random search; "
                "this one keeps state in the study itself: use it with search: optuna and asynchronous: true",
            )
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
            if self.base_dir is not None:  # else when the spec is anchored (anchor())
                self.base_dir = os.path.abspath(os.path.expanduser(self.base_dir))
                self.command = resolve_command_paths(self.command, self.base_dir)
        if isinstance(self.required_env, str):
            self.required_env = import_callable(self.required_env, f"{w}: required_env")
        if self.required_env is not None and not callable(self.required_env):
            raise InvalidArgumentError(
                f"{w}: required_env", self.required_env, "a function (params, trial_dir) -> {name: value}"
            )
        if self.python_callable is not None and not callable(self.python_callable):
            raise InvalidArgumentError(f"{w}: python_callable", self.python_callable, "a callable")

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
            extra = ("config",) if self._template else ()
            check_command_placeholders(self.command, self.parameter_names(), f"{w}: command", extra)

    def anchor(self, directory: str) -> SweepSpec:
        """Where the spec's relative paths are found, when it did not say (``base_dir``): the directory of the file
        that defines it. A YAML spec's is its own (set when it is read); ``sweep_task_group`` gives the DAG
        file's, ``run_sweep`` the module's of ``package.module:ATTR``, or the running script's. A relative file
        path of the command that exists there becomes absolute (a trial runs in its own folder)."""
        if self.base_dir is None:
            self.base_dir = os.path.abspath(directory)
            if self.command is not None:
                self.command = resolve_command_paths(self.command, self.base_dir)
        return self

    # -- what the spec means --------------------------------------------------------------------------
    @property
    def kind(self) -> SearchKind[SweepSpec]:
        """This spec's search type (core/sweep/definition/search_kind.py)."""
        return SEARCH_KINDS[self.search]

    @property
    def in_rounds(self) -> bool:
        """Whether the sweep runs in rounds that each wait for their slowest trial (an asynchronous search does not)."""
        return self.kind.in_rounds and not self.asynchronous

    @property
    def asks_as_it_goes(self) -> bool:
        """An adaptive search that runs asynchronously: each trial is asked for when a slot frees."""
        return self.kind.in_rounds and self.asynchronous

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
        """A spec from a mapping (a YAML file's, or a DAG run's conf): every error names ``where`` and the key."""
        from airflow_provider_gpusched.core.sweep.definition.files import FILE_ONLY_KEYS, spec_arguments

        allowed = {f.name for f in fields(cls)} - {"where", "python_callable"}
        other = [k for k in data if k not in allowed and k not in FILE_ONLY_KEYS] if isinstance(data, Mapping) else []
        if other:  # an installed kind's settings key (only then is any kind asked)
            first = (data["search"],) if isinstance(data.get("search"), str) else ()
            own = {k: data[k] for k in other if isinstance(k, str) and settings_owner(k, first) is not None}
            if own:
                rest = {k: v for k, v in data.items() if k not in own}
                data = {**rest, "search_settings": {**(rest.get("search_settings") or {}), **own}}
        return cls(**spec_arguments(data, where, allowed), where=where)

    @classmethod
    def from_yaml(cls, path: str) -> SweepSpec:
        """A spec from a YAML file; its relative paths (command, config template) are the file's."""
        from airflow_provider_gpusched.core.sweep.definition.files import read_spec_file

        return cls.from_dict(read_spec_file(path), where=path)


_SETTINGS = Settings(SweepSpec)
_SEARCHES = "airflow_provider_gpusched.core.sweep.searches"
#: the kinds' settings records the old spec module (now an alias of this one) imported: still answered, warning
__getattr__ = moved_names(
    __name__,
    {
        "EvolutionSettings": f"{_SEARCHES}.evolution:EvolutionSettings",
        "PBTSettings": f"{_SEARCHES}.pbt:PBTSettings",
        "HyperbandSettings": f"{_SEARCHES}.hyperband:HyperbandSettings",
    },
)
#: the spec's own fields that hold a built-in search type's settings (any other kind's: ``search_settings``)
_KIND_SETTING_FIELDS = ("evolution", "pbt", "hyperband")


def _env_max_trials(where: str) -> int:
    raw = os.environ.get("GPUSCHED_MAX_TRIALS", "")
    if not raw:
        return DEFAULT_MAX_TRIALS
    if not raw.isdigit() or int(raw) < 1:
        raise InvalidArgumentError(f"{where}: $GPUSCHED_MAX_TRIALS", raw, "an integer >= 1")
    return int(raw)


def _build(kind: type, data: Mapping[str, Any], where: str) -> Any:
    if kind is TrialResources:
        data = seed_resources(data, where)
    return record_from_mapping(kind, data, where)
