"""Population-based training (``search: pbt``; Jaderberg et al., 2017, as Ray Tune's ``PopulationBasedTraining``
runs it, here in synchronous generations).

A population of ``population`` members trains in generations of ``perturbation_interval`` reported steps, up to
``steps``. Each generation is a round of the sweep: member ``k``'s trial trains from the checkpoint its member left
(``step_param``, default ``epochs``, is the step it trains up to) and is scored by the objective. Between two
generations the members in the bottom ``quantile_fraction`` *exploit* one of the top ``quantile_fraction`` (their next
trial starts from its checkpoint) and *explore*: each hyper-parameter is resampled from ``space`` with probability
``resample_probability``, else a number is multiplied by one of ``perturbation_factors`` (kept within its range) and
a choice moves to a neighbouring value. The others go on from their own checkpoint with their own values.

Checkpoints: a trial's checkpoint folder is ``<trial folder>/checkpoint`` (``$GPUSCHED_CHECKPOINT_DIR`` inside the
examples' ``Checkpoints``). Before a generation runs, each member's new trial folder gets a copy of the checkpoint
folder it starts from (its own last one, or its donor's), with ``handed_over.json`` saying whose it is: the examples'
``Checkpoints.load`` then accepts a checkpoint written for other parameters, and a command trial simply resumes from
its folder. A trial that leaves no checkpoint stops the search with an error naming the folder.

The lineage (which member copied whom at which step, with which new values, and each member's score per generation)
is ``search/pbt.json``: :meth:`PBTSearch.lineage`.
"""

from __future__ import annotations

import logging
import math
import os
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any

from typing_extensions import NotRequired, TypedDict

from airflow_provider_gpusched.core.errors import GpuschedError, InvalidArgumentError
from airflow_provider_gpusched.core.records import Settings, key_path, open_view, says
from airflow_provider_gpusched.core.sweep.definition.search_kind import Fraction, SearchKind
from airflow_provider_gpusched.core.sweep.parts import spaces
from airflow_provider_gpusched.core.sweep.parts.expand import check_space, flatten, sample_params
from airflow_provider_gpusched.core.sweep.records.store import read_json, write_json
from airflow_provider_gpusched.core.sweep.searches.handover import CHECKPOINT_FOLDER as CHECKPOINT_FOLDER
from airflow_provider_gpusched.core.sweep.searches.handover import HANDED_OVER_FILE as HANDED_OVER_FILE
from airflow_provider_gpusched.core.sweep.searches.handover import hand_over as hand_over
from airflow_provider_gpusched.core.sweep.searches.handover import read_handed_over as read_handed_over
from airflow_provider_gpusched.core.sweep.searches.rounds import RoundSearch

if TYPE_CHECKING:
    from airflow_provider_gpusched.core.sweep.definition.sweep_spec import SweepSpec
    from airflow_provider_gpusched.core.sweep.parts.expand import Trial
    from airflow_provider_gpusched.core.sweep.records.store import TrialStore


#: the folder in a trial's folder its checkpoints go to (the examples' ``checkpoint_dir`` default)
@dataclass
class PBTSettings:
    """The settings of ``search: pbt`` (Ray Tune's ``PopulationBasedTraining`` names and defaults)."""

    population: Annotated[int, says("a whole number >= 2", ge=2)] = 4
    #: reported steps per generation (Ray Tune's ``perturbation_interval``, in ``time_attr`` units)
    perturbation_interval: Annotated[int, says("a whole number of steps >= 1", ge=1)] = 2
    #: each member's budget in reported steps (the last generation may be shorter)
    steps: Annotated[int, says("a whole number of steps >= 1", ge=1)] = 10
    #: the trial parameter that says up to which step a trial trains (the digits example's ``epochs``)
    step_param: Annotated[str, says("a parameter name", min_length=1)] = "epochs"
    quantile_fraction: Fraction = 0.25
    resample_probability: Annotated[float, says("a probability between 0 and 1", ge=0, le=1)] = 0.25
    perturbation_factors: Annotated[
        list[Annotated[float, says("a positive number", gt=0)]], says("a list of positive factors such as [1.2, 0.8]")
    ] = field(default_factory=lambda: [1.2, 0.8])

    def check(self, where: str) -> None:
        _PBT.check(self, where)
        if not self.perturbation_factors:
            raise InvalidArgumentError(
                f"{where}.perturbation_factors", [], "a list of positive factors such as [1.2, 0.8]"
            )
        if self.perturbation_interval > self.steps:
            raise InvalidArgumentError(
                f"{where}.perturbation_interval",
                self.perturbation_interval,
                f"at most steps ({self.steps}): a perturbation interval longer than the budget never perturbs",
            )

    @property
    def generations(self) -> int:
        return math.ceil(self.steps / self.perturbation_interval)

    def step_of(self, generation: int) -> int:
        """The step generation ``generation`` trains up to."""
        return min(self.steps, (generation + 1) * self.perturbation_interval)


_PBT = Settings(PBTSettings)


LINEAGE_FILE = "pbt.json"

log = logging.getLogger(__name__)


class PBTKind(SearchKind["SweepSpec"]):
    """Population-based training in synchronous generations (see the module's docstring)."""

    settings_key = "pbt"
    settings_class = PBTSettings
    settings_expected = "a mapping of PBT settings such as {population: 4}"

    name = "pbt"
    in_rounds = True
    size_key = "pbt.population"
    hands_on_checkpoints = True
    draws_population = True

    def read_population(self, sweep_folder: str, root: str | None = None) -> tuple[dict[str, Any] | None, str]:
        return read_lineage(sweep_folder, root)

    def check(self, spec: SweepSpec) -> None:
        where = spec.where
        check_space(spec.space, f"{where}: space", spec.global_config)
        if spec.objective is None:
            raise InvalidArgumentError(f"{where}: objective", None, "a metric to rank the population by (search: pbt)")
        if spec.objective.several and not spec.objective.weights:
            raise InvalidArgumentError(
                f"{where}: objective", spec.objective.describe(), "one metric, or weights (PBT ranks one score)"
            )
        if spec.asynchronous:
            raise InvalidArgumentError(
                f"{where}: asynchronous", True, "false for search: pbt (its members exploit each other by generation)"
            )
        if spec.pruning is not None:
            raise InvalidArgumentError(
                f"{where}: pruning",
                spec.pruning.rule,
                "no pruning with search: pbt (it replaces its poor members itself)",
            )
        raw = self.parse_settings(spec)
        flat = flatten(spec.space)
        if raw.step_param in flat:
            raise InvalidArgumentError(
                f"{where}: pbt.step_param",
                raw.step_param,
                f"a parameter PBT sets itself (up to which step a trial trains), not one of space's {sorted(flat)}",
            )
        if not flat:
            raise InvalidArgumentError(f"{where}: space", {}, "the hyper-parameters PBT explores (search: pbt)")
        spec.rounds = raw.generations
        spec.per_round = raw.population

    def round_sizes(self, spec: SweepSpec, space_size: int | None) -> list[int]:
        """Every member in every generation (a member's values may repeat another's)."""
        return [spec.per_round or 0] * (spec.rounds or 0)

    def varying(self, spec: SweepSpec) -> list[str]:
        settings = spec.pbt if isinstance(spec.pbt, PBTSettings) else PBTSettings()
        return [*flatten(spec.space), settings.step_param]

    def round_search(self, spec: SweepSpec, state_dir: str) -> RoundSearch:
        return PBTSearch(spec, state_dir)


class PBTSearch(RoundSearch):
    """The population's generations (rounds): what each member runs next, from whose checkpoint."""

    def __init__(self, spec: SweepSpec, state_dir: str) -> None:
        super().__init__(spec, state_dir)
        if not isinstance(spec.pbt, PBTSettings):
            raise GpuschedError(f"sweep {spec.name}: search 'pbt' needs its settings (pbt)")
        self.settings: PBTSettings = spec.pbt
        self.lineage_path = os.path.join(state_dir, LINEAGE_FILE)

    # -- the record --------------------------------------------------------------------------------
    def lineage(self) -> dict[str, Any]:
        """``{"members": [[generation entry, ...] per member], "exploits": [...]}``: each entry its trial's
        parameters, step, score, and where its checkpoint came from (:class:`LineageRecord`, checked when read
        back: GpuschedError naming the file and the key)."""
        data = read_json(self.lineage_path)
        if data is None:
            return {"members": [[] for _ in range(self.settings.population)], "exploits": []}
        check_lineage(data, self.lineage_path)
        if len(data["members"]) != self.settings.population:
            raise GpuschedError(
                f"{self.lineage_path}: key 'members': expected {self.settings.population} members (pbt.population), "
                f"found {len(data['members'])}; a sweep's population cannot change (give the sweep a new name)"
            )
        return dict(data)

    def _save(self, data: Mapping[str, Any]) -> None:
        write_json(self.lineage_path, dict(data))

    # -- proposing a generation --------------------------------------------------------------------
    def _propose(self, round_no: int) -> list[dict[str, Any]]:
        s, rng = self.settings, random.Random(f"{self.spec.seed}:pbt:{round_no}")
        data = self.lineage()
        members = data["members"]
        step = s.step_of(round_no)
        out = []
        if round_no == 0:
            for k in range(s.population):
                hyper = sample_params(self.space, rng, {})
                out.append(self._proposal(k, round_no, hyper, step, None))
        else:
            if any(len(m) < round_no for m in members):
                raise GpuschedError(f"sweep {self.spec.name}: PBT generation {round_no - 1} was not planned yet")
            last: list[dict[str, Any]] = [m[round_no - 1] for m in members]
            order = sorted(range(s.population), key=lambda k: self._rank_key(last[k]))  # best first
            cut = max(1, int(s.population * s.quantile_fraction))
            top, bottom = order[:cut], set(order[-cut:])
            for k in range(s.population):
                entry = last[k]
                if k in bottom and k not in top:
                    donor = rng.choice(top)
                    hyper = self.explore(dict(last[donor]["hyper"]), rng)
                    source = last[donor]
                    data["exploits"].append(
                        {
                            "generation": round_no,
                            "step": last[donor]["step"],
                            "member": k,
                            "from_member": donor,
                            "old": entry["hyper"],
                            "new": hyper,
                            "score": entry.get("score"),
                            "donor_score": last[donor].get("score"),
                        }
                    )
                else:
                    hyper, source = dict(entry["hyper"]), entry
                out.append(self._proposal(k, round_no, hyper, step, source))
        for proposal in out:
            k = proposal["member"]
            members[k] = members[k][:round_no] + [
                {
                    "member": k,
                    "generation": round_no,
                    "step": step,
                    "hyper": proposal["hyper"],
                    "from": proposal["from"],
                    "score": None,
                    "trial_id": None,
                }
            ]
        self._save(data)
        return out

    def _proposal(
        self, member: int, generation: int, hyper: dict[str, Any], step: int, source: Mapping[str, Any] | None
    ) -> dict[str, Any]:
        params = {**self.fixed, **hyper, self.settings.step_param: step}
        origin = None
        if source is not None:
            origin = {"member": source["member"], "generation": source["generation"], "trial_id": source["trial_id"]}
        return {
            "params": params,
            "hyper": hyper,
            "member": member,
            "generation": generation,
            "from": origin,
            # trials of two members with equal values stay two trials
            "identity": f"pbt member {member}",
        }

    def _rank_key(self, entry: Mapping[str, Any]) -> tuple[int, float]:
        score = entry.get("score")
        if score is None:  # a failed member ranks last: it exploits the top
            return (1, 0.0)
        return (0, self.objective.sort_key(score))

    def explore(self, hyper: dict[str, Any], rng: random.Random) -> dict[str, Any]:
        """Ray Tune's explore: resample with ``resample_probability``, else perturb by a factor (numbers, kept in
        range) or move to a neighbouring choice."""
        s = self.settings
        out = dict(hyper)
        for key, dim in self.space.items():
            if isinstance(dim, spaces.Conditional):
                dim = dim.dim
            if key not in out:
                continue
            if isinstance(dim, (list, tuple)):
                dim = spaces.Choice(tuple(dim))
            if rng.random() < s.resample_probability:
                out[key] = sample_params({key: dim}, rng, {})[key]
            elif isinstance(dim, spaces.Choice):
                values = list(dim.values)
                i = values.index(out[key]) if out[key] in values else 0
                out[key] = values[max(0, min(len(values) - 1, i + rng.choice((-1, 1))))]
            elif isinstance(dim, (spaces.Uniform, spaces.LogUniform, spaces.QUniform)):
                out[key] = min(dim.high, max(dim.low, float(out[key]) * rng.choice(s.perturbation_factors)))
                if isinstance(dim, spaces.QUniform):
                    out[key] = round(out[key] / dim.q) * dim.q
            elif isinstance(dim, spaces.RandInt):
                out[key] = int(min(dim.high, max(dim.low, round(int(out[key]) * rng.choice(s.perturbation_factors)))))
        return out

    # -- before a generation runs: the checkpoints it starts from ---------------------------------------
    def prepare_trials(self, round_no: int, trials: Sequence[Trial], store: TrialStore) -> None:
        """Copy into each new trial's checkpoint folder the one it starts from (once: a re-planned round finds it),
        and note the trials in the lineage."""
        proposals = self.ask_proposals(round_no)
        data = self.lineage()
        for trial, proposal in zip(trials, proposals, strict=False):
            entry = data["members"][proposal["member"]][round_no]
            entry["trial_id"] = trial.trial_id
            entry["folder"] = store.trial_dir(trial)
            source = proposal.get("from")
            if source is None:
                continue
            before = data["members"][source["member"]][source["generation"]]
            hand_over(
                before["folder"],
                store.trial_dir(trial),
                {
                    "from_member": source["member"],
                    "generation": source["generation"],
                    "trial_id": source["trial_id"],
                    "exploited": source["member"] != proposal["member"],
                },
                f"sweep {self.spec.name}: PBT member {source['member']}'s trial of generation {source['generation']}",
            )
        self._save(data)

    def tell_trials(self, round_no: int, outcomes: Sequence[tuple[Any, ...]]) -> int:
        """Each member's score in generation ``round_no``, found by its trial's id (two members may run equal
        values). Returns how many were new."""
        data = self.lineage()
        entries = {m[round_no]["trial_id"]: m[round_no] for m in data["members"] if len(m) > round_no}
        new = 0
        for trial, values, *_ in outcomes:
            entry = entries.get(trial.trial_id)
            if entry is None or entry.get("told"):
                continue
            entry["score"] = None if values is None else self._score(values)
            entry["told"] = True
            new += 1
        self._save(data)
        return new


MAX_VIEW_MEMBERS = 64
MAX_VIEW_EXPLOITS = 500


class LineageFrom(TypedDict):
    member: Annotated[int, says("a member number", ge=0)]
    generation: Annotated[int, says("a generation number", ge=0)]
    trial_id: NotRequired[str | None]


#: one member's trial in one generation (``from``: the trial whose checkpoint it starts from; its own or a donor's)
LineageEntry = TypedDict(
    "LineageEntry",
    {
        "member": Annotated[int, says("a member number", ge=0)],
        "generation": Annotated[int, says("a generation number", ge=0)],
        "step": Annotated[int, says("a step", ge=0)],
        "hyper": dict[str, Any],
        "from": NotRequired[LineageFrom | None],
        "score": NotRequired[float | None],
        "trial_id": NotRequired[str | None],
    },
)


class LineageExploit(TypedDict):
    """Member ``member`` went on, in ``generation``, from ``from_member``'s checkpoint at ``step``, with ``new``
    values (it had ``old``)."""

    generation: Annotated[int, says("a generation number", ge=0)]
    step: Annotated[int, says("a step", ge=0)]
    member: Annotated[int, says("a member number", ge=0)]
    from_member: Annotated[int, says("a member number", ge=0)]
    old: dict[str, Any]
    new: dict[str, Any]
    score: NotRequired[float | None]
    donor_score: NotRequired[float | None]


class LineageRecord(TypedDict):
    """``search/pbt.json``: every member's trial per generation, and every exploit."""

    members: Annotated[list[list[LineageEntry]], says("a list of members", max_length=10_000)]
    exploits: Annotated[list[LineageExploit], says("a list of exploits", max_length=1_000_000)]


_LINEAGE_ADAPTER: list[Any] = []


def check_lineage(data: Any, source: str) -> None:
    """GpuschedError naming ``source``, the key and what was expected when ``data`` is not a :class:`LineageRecord`
    (pydantic checks it); nothing when it is."""
    from pydantic import TypeAdapter, ValidationError

    if not _LINEAGE_ADAPTER:
        _LINEAGE_ADAPTER.append(TypeAdapter(LineageRecord))
    if isinstance(data, dict) and "_unreadable" in data:
        raise GpuschedError(f"PBT lineage {data['_unreadable']}")
    try:
        _LINEAGE_ADAPTER[0].validate_python(data, strict=False)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise GpuschedError(
            f"{source}: key '{key_path(tuple(first['loc'])) or '(top)'}': {first['msg']} (not a PBT lineage this "
            f"package wrote)"
        ) from None


def read_lineage(sweep_folder: str, root: str | None = None) -> tuple[dict[str, Any] | None, str]:
    """``(lineage, "")`` from a sweep folder's ``search/pbt.json`` (a regular file, never through a link, at most
    8 MiB, checked), or ``(None, why not)``. ``root``: only a file under it, reached without a symbolic link (the
    UI reads folders named by published records)."""
    from airflow_provider_gpusched.core.safe_files import BadRecordError, is_under, read_json_record

    path = os.path.join(sweep_folder, "search", LINEAGE_FILE)
    if root is not None and not is_under(path, root):
        return None, f"{path}: not under the results root {root}"
    try:
        data = read_json_record(path, 8 << 20)
        check_lineage(data, path)
    except FileNotFoundError:
        return None, f"no lineage yet ({path})"
    except (BadRecordError, GpuschedError, OSError) as exc:
        return None, str(exc)
    return data, ""


@open_view
class PopulationGeneration(TypedDict):
    """One member's trial in one generation: its values, what it started from, its score."""

    generation: int
    step: int  # the step it trained up to
    trial_id: str | None
    index: int | None  # the trial's number on the page (None: the view does not list it)
    hyper: dict[str, Any]
    from_member: int | None  # set when it went on from another member's checkpoint (an exploit)
    score: float | None


@open_view
class PopulationMember(TypedDict):
    member: int
    generations: list[PopulationGeneration]
    curve: list[list[float]]  # [step, value] over all its generations, from its trials' reports


@open_view
class PopulationView(TypedDict):
    """A PBT sweep's population as the Sweeps tab draws it (:func:`population_view`)."""

    metric: str | None
    params: list[str]
    members: list[PopulationMember]
    exploits: list[LineageExploit]
    cut: NotRequired[str]


def population_view(
    lineage: Mapping[str, Any],
    rows: Sequence[Mapping[str, Any]],
    curves: Sequence[Mapping[str, Any]],
    metric: str | None,
) -> PopulationView:
    """The population of a checked lineage (:func:`check_lineage`): each member's generations (values, the member
    it copied, score) and its curve over steps (its trials' reports, joined in step order); the exploits."""
    index_of = {r["trial_id"]: r["index"] for r in rows}
    points_of = {c["index"]: c["points"] for c in curves}
    members: list[PopulationMember] = []
    for k, entries in enumerate(lineage["members"][:MAX_VIEW_MEMBERS]):
        generations: list[PopulationGeneration] = []
        by_step: dict[float, float] = {}
        for entry in entries:
            index = index_of.get(entry.get("trial_id") or "")
            source = entry.get("from")
            generations.append(
                {
                    "generation": entry["generation"],
                    "step": entry["step"],
                    "trial_id": entry.get("trial_id"),
                    "index": index,
                    "hyper": dict(entry["hyper"]),
                    "from_member": source["member"] if source and source["member"] != k else None,
                    "score": entry.get("score"),
                }
            )
            for step, value in points_of.get(index, []) if index is not None else []:
                by_step[step] = value  # a later generation's report of a step wins (it is the member's now)
        members.append({"member": k, "generations": generations, "curve": [[s, by_step[s]] for s in sorted(by_step)]})
    view: PopulationView = {
        "metric": metric,
        "params": sorted({name for m in members for g in m["generations"] for name in g["hyper"]}),
        "members": members,
        "exploits": [e for e in lineage["exploits"] if e["member"] < MAX_VIEW_MEMBERS][:MAX_VIEW_EXPLOITS],
    }
    if len(lineage["members"]) > MAX_VIEW_MEMBERS:
        view["cut"] = f"the first {MAX_VIEW_MEMBERS} of {len(lineage['members'])} members are drawn"
    return view
