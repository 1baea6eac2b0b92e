"""What the UI's sweep view shows, built from records a sweep publishes through Airflow (not from the results
folder, which the api-server may not see).

* The ``plan`` task publishes a :func:`plan_record` (XCom :data:`PLAN_XCOM`): the trials of the stage with their
  parameters, which are pending (in map/chunk order: pending trial ``i`` runs in map index ``i``, or in chunk
  ``i // chunk_size``), and the outcomes of trials skipped because they succeeded before.
* Each trial task publishes :func:`outcome_records` of the trials it ran (XCom :data:`OUTCOMES_XCOM`) when it ends.
* :func:`build_sweep_view` puts them together with the state Airflow has for each trial task: status counts
  (defined, waiting, running, succeeded, failed, invalid, pruned, skipped), the leaderboard, the best trial and the
  points the plots draw. A trial without an outcome yet takes its state from its task instance.

Every record read back is checked (:func:`read_plan_record`, :func:`read_outcome_records`); a bad one is
reported by :class:`BadRecordError` naming the source and the key."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, cast

from typing_extensions import NotRequired, TypedDict

from airflow_provider_gpusched.core.checks import is_finite_number, is_int, is_json_number
from airflow_provider_gpusched.core.errors import InvalidArgumentError
from airflow_provider_gpusched.core.records import Check, Float, RecordType, one_of, open_view, record_class, says
from airflow_provider_gpusched.core.sweep.parts.expand import Trial, nested, safe_name
from airflow_provider_gpusched.core.sweep.parts.objective import Objective, leaderboard, pareto_fronts
from airflow_provider_gpusched.core.sweep.records.reports import REPORTS_FILE
from airflow_provider_gpusched.core.sweep.records.store import (
    FAILED_STATES,
    FINAL_STATES,
    RUN_STATES,
    TrialStore,
    state_in_run,
)
from airflow_provider_gpusched.core.sweep.searches.pbt import PopulationView, population_view

PLAN_XCOM = "gpusched_sweep_plan"
OUTCOMES_XCOM = "gpusched_trial_outcomes"
#: trials a plan record lists with their parameters; a bigger stage is published without the rest's parameters
#: (10,000 trials: a plan record of about 2 MB)
MAX_PUBLISHED_TRIALS = 20000
#: points the plots get at most: every trial up to this; beyond it the best quarter and an even sample of the rest
#: (the best-so-far line is always computed over every trial)
MAX_POINTS = 2000
#: Airflow task-instance states, as the sweep view counts a trial that has no outcome yet
_TI_AS_TRIAL = {
    "running": "running",
    "success": "succeeded",
    "failed": "failed",
    "upstream_failed": "failed",
    "removed": "failed",
    "skipped": "failed",
}


Id = Annotated[str, says("a non-empty string", min_length=1, max_length=1000)]
Note = Annotated[str, says("a string", max_length=1000)]


def _objective(value: dict[str, Any] | None) -> dict[str, Any] | None:
    if value is not None:
        try:
            Objective(**value)
        except (TypeError, InvalidArgumentError):  # unknown keys, or bad values
            raise ValueError(
                "{'metric': name(s), 'mode': 'maximize'|'minimize' (one per metric), 'weights': optional} or null"
            ) from None
    return value


@record_class
@dataclass
class PlanTrial:
    index: Annotated[int, says("an integer")]
    trial_id: Note
    label: Note
    params: Annotated[dict[str, Any], says("an object of parameters", strict=None)]


@record_class
@dataclass
class SkippedTrial:
    """A trial of the plan that an earlier run finished: how it ended then (state, error and step are absent in
    plans published before they were)."""

    trial_id: Note
    result: Any = None
    state: Annotated[Literal["succeeded", "pruned"], says("'succeeded' or 'pruned'", strict=None)] = "succeeded"
    error: Note | None = None
    step: Annotated[int, says("an integer or null")] | None = None
    run: Note | None = None  # the DAG run whose curve and result this run carries over


@record_class
@dataclass
class PlanRecord:
    """What a sweep stage's ``plan`` task publishes (XCom :data:`PLAN_XCOM`, written by :func:`plan_record`)."""

    sweep: Id
    search: Id
    backend: Id
    trial_task: Id  # the full task id that runs the pending trials
    run: Id
    defined: Annotated[int, says("a count", ge=0)]
    trials: Annotated[list[PlanTrial], says("a list", strict=None)]
    pending: Annotated[list[Note], says("a list of trial ids", strict=None)]
    skipped: Annotated[list[SkippedTrial], says("a list of {'trial_id', 'result'}", strict=None)]
    round: Annotated[int, says("an integer or null")] | None = None
    chunk_size: Annotated[int, says("a positive integer or null", gt=0)] | None = None
    objective: Annotated[dict[str, Any] | None, Check(_objective)] = None
    #: absent in plans published before reports were drawn
    folder: Annotated[str, says("a non-empty string or null", min_length=1, max_length=4096)] | None = None
    curve_metric: Annotated[str, says("a non-empty string or null", min_length=1, max_length=4096)] | None = None
    log_params: Annotated[
        list[Annotated[str, says("a parameter name", max_length=200)]], says("a list of parameter names", strict=None)
    ] = field(default_factory=list)


PLAN = RecordType(PlanRecord, name="sweep plan")


@record_class
@dataclass
class TrialOutcome:
    """How one trial ended in one DAG run, as its trial task publishes it (XCom :data:`OUTCOMES_XCOM`)."""

    trial_id: Note
    state: Annotated[str, says(f"a state of {RUN_STATES}"), one_of(RUN_STATES)]
    result: Any = None
    seconds: Annotated[Float, says("a number or null", strict=None)] | None = None
    error: Annotated[str, says("a string or null")] | None = None
    step: Annotated[int, says("an integer or null")] | None = None
    #: the trial itself, for a trial no plan lists (an asynchronous search asks for its trials as slots free)
    trial: PlanTrial | None = None


OUTCOME = RecordType(TrialOutcome, name="trial outcome")


def plan_record(
    sweep: str,
    search: str,
    round_no: int | None,
    objective: Objective | None,
    backend: str,
    trial_task: str,
    chunk_size: int | None,
    trials: Sequence[Trial],
    pending: Sequence[Trial],
    store: TrialStore,
    skipped: Sequence[Trial],
    run: str,
    curve_metric: str | None = None,
    log_params: Sequence[str] = (),
) -> dict[str, Any]:
    """The record the ``plan`` task publishes (``trial_task``: the full task id that runs the pending trials;
    ``curve_metric``: the reported metric the UI draws by step, the pruning rule's or the objective's first;
    ``log_params``: parameters drawn on a log scale, e.g. from ``loguniform``). A skipped trial carries the
    state it ended in before (succeeded or pruned) and, when pruned, why."""
    return PLAN.dump(
        PlanRecord(
            sweep=sweep,
            search=search,
            round=round_no,
            backend=backend,
            trial_task=trial_task,
            chunk_size=chunk_size,
            run=run,
            objective=objective.to_dict() if objective else None,
            folder=store.dir,
            curve_metric=curve_metric,
            log_params=sorted(log_params),
            defined=len(trials),
            trials=[PlanTrial(t.index, t.trial_id, t.label, nested(t.params)) for t in trials[:MAX_PUBLISHED_TRIALS]],
            pending=[t.trial_id for t in pending],
            skipped=[_skipped_record(store, t) for t in skipped[:MAX_PUBLISHED_TRIALS]],
        )
    )


def _skipped_record(store: TrialStore, trial: Trial) -> SkippedTrial:
    status = store.status(trial)
    status = status if isinstance(status, dict) else {}
    state = store.state(trial)
    pruned = state == "pruned"
    return SkippedTrial(
        trial_id=trial.trial_id,
        result=store.result(trial),
        state="pruned" if pruned else "succeeded",
        # the DAG run whose curve and result this run carries over
        run=status["run"][:1000] if isinstance(status.get("run"), str) else None,
        error=str(status.get("error") or "")[:1000] if pruned else None,
        step=_last_step(store, trial) if pruned else None,
    )


def _last_step(store: TrialStore, trial: Trial) -> int | None:
    summary = store.reports(trial)
    step = summary.get("last_step") if summary else None
    return step if is_int(step) else None


def outcome_records(
    store: TrialStore,
    trials: Iterable[Trial],
    run: str | None = None,
    planned_at: float | None = None,
    *,
    described: bool = False,
) -> list[dict[str, Any]]:
    """The outcome of each trial in DAG run ``run`` (what a trial task publishes when it ends; ``planned_at``:
    when that run planned it), with the last step it reported (where a pruned trial was stopped). A trial this run
    did not start is ``not_started``: its record, an earlier run's, stands and is not this run's; one whose re-run
    in this run was stopped is ``stopped``, the earlier outcome standing (core/sweep/records/store.py's state_in_run).
    ``described``: each outcome carries its trial (index, label, parameters), for trials no plan lists."""
    out = []
    trials = list(trials)
    about = {t.trial_id: PlanTrial(t.index, t.trial_id, t.label, nested(t.params)) for t in trials} if described else {}
    for record in store.records(trials):
        step = (record.get("reports") or {}).get("last_step")
        outcome = TrialOutcome(
            trial_id=record["trial_id"],
            state=record["state"],
            result=record["result"],
            seconds=record["seconds"],
            error=record["error"],
            step=step if is_int(step) else None,
        )
        state = state_in_run(record, run, planned_at)
        if state != record["state"]:  # (not_started is never a record's own state)
            earlier = (
                f"; its record ({record['state']}, DAG run {record.get('run')}) stands"
                if record["state"] != "waiting"
                else ""
            )
            interrupted: dict[str, Any] = record["interrupted"] if isinstance(record.get("interrupted"), dict) else {}
            why = interrupted.get("reason") if state != "not_started" else "not started in this run"
            outcome = TrialOutcome(
                trial_id=outcome.trial_id,
                state=state,
                error=f"{why}{earlier}"[:1000],
                seconds=None if state == "not_started" else outcome.seconds,
            )
        outcome.trial = about.get(outcome.trial_id)
        out.append(OUTCOME.dump(outcome))
    return out


def read_plan_record(data: Any, source: str) -> dict[str, Any]:
    """A published plan, checked field by field (as the view's data: a dict)."""
    return PLAN.dump(PLAN.read(data, source))


def read_outcome_records(data: Any, source: str) -> list[dict[str, Any]]:
    """A trial task's published outcomes, each checked (``item 3: key 'step': ...``)."""
    return [OUTCOME.dump(o) for o in OUTCOME.read_list(data, source)]


def _task_of(plan: Mapping[str, Any], position: int) -> tuple[str, int]:
    """The task instance (task id, map index) that runs the plan's pending trial number ``position``."""
    size = plan.get("chunk_size")
    return plan["trial_task"], (position // size if size else position)


def _leaves(params: Mapping[str, Any], prefix: str = "") -> Iterable[tuple[str, Any]]:
    """(dotted name, value) of each parameter, nested mappings walked into."""
    for key, value in params.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            yield from _leaves(value, f"{name}.")
        else:
            yield name, value


def _numeric_params(params: Mapping[str, Any]) -> dict[str, float]:
    return {name: float(v) for name, v in _leaves(params) if is_finite_number(v)}


def _categorical_params(params: Mapping[str, Any]) -> dict[str, str]:
    """Parameters that are not numbers (strings, booleans, null, lists), as the labels a plot groups by."""
    return {
        name: (v if isinstance(v, str) else json.dumps(v, default=str))[:60]
        for name, v in _leaves(params)
        if not (is_json_number(v) or isinstance(v, float))
    }


#: a categorical parameter with more distinct values than this gets no plot (it would be unreadable)
MAX_CATEGORIES = 30
#: a numeric parameter whose positive values span at least this ratio is drawn on a log axis when its space does
#: not say (grid lists such as lr: [0.1, 0.01, 0.001])
LOG_AXIS_RATIO = 100.0


def _scale(name: str, seen: set[float], declared_log: set[str]) -> str:
    if name in declared_log:
        return "log"
    # values over orders of magnitude (a grid such as 1e-4, 1e-3, 1e-2): log; draws spread evenly between a tiny
    # minimum and the maximum (uniform(0, 0.1)) are not, though their ratio is as large: half lie above max / 2
    values = sorted(seen)
    if (
        len(values) >= 3
        and values[0] > 0
        and values[-1] / values[0] >= LOG_AXIS_RATIO
        and values[len(values) // 2] <= values[-1] / 10
    ):
        return "log"
    return "linear"


def _objective_view(objective: Objective) -> dict[str, Any]:
    return {
        **objective.to_dict(),
        "metrics": list(objective.metrics),
        "modes": list(objective.modes),
        "several": objective.several,
        "describe": objective.describe(),
        "score_label": objective.score_label,
        "maximize": objective.maximize,
    }


#: report curves drawn per sweep, points kept per curve (the newest and an even spread of the rest), and
#: trials whose reports are looked at per view (running ones first)
MAX_CURVES, MAX_CURVE_POINTS, MAX_REPORT_READS = 60, 120, 300


def _described(outcomes: Mapping[str, Mapping[str, Any]] | None) -> list[Mapping[str, Any]]:
    """The trials the outcomes describe (an asynchronous search's: no plan lists them)."""
    return [o["trial"] for o in (outcomes or {}).values() if isinstance(o.get("trial"), Mapping)]


def report_paths(
    plans: Sequence[Mapping[str, Any]], outcomes: Mapping[str, Mapping[str, Any]] | None = None
) -> dict[str, str]:
    """trial id -> the path of its reports file, for the trials of ``plans`` (which name their folder) and the
    trials ``outcomes`` describe (an asynchronous search's, asked for as its workers free: in the sweep's folder)."""
    out: dict[str, str] = {}
    folder = next((p["folder"] for p in plans if p.get("folder")), None)
    for plan in plans:
        if not plan.get("folder"):
            continue
        for t in plan["trials"]:
            out.setdefault(
                t["trial_id"],
                os.path.join(plan["folder"], "trials", safe_name(t["label"], t["trial_id"]), REPORTS_FILE),
            )
    if folder:
        for t in _described(outcomes):
            out.setdefault(
                t["trial_id"], os.path.join(folder, "trials", safe_name(t["label"], t["trial_id"]), REPORTS_FILE)
            )
    return out


def report_runs(
    plans: Sequence[Mapping[str, Any]], run: str, outcomes: Mapping[str, Mapping[str, Any]] | None = None
) -> dict[str, str]:
    """trial id -> the DAG run whose curve the view of ``run`` draws: ``run`` itself, or for a trial it skipped
    (done before), the run that did it. A trial only ``outcomes`` describe ran in ``run``."""
    out: dict[str, str] = {}
    for plan in plans:
        before = {s["trial_id"]: s.get("run") for s in plan["skipped"]}
        for t in plan["trials"]:
            out.setdefault(t["trial_id"], before.get(t["trial_id"]) or run)
    for t in _described(outcomes):
        out.setdefault(t["trial_id"], run)
    return out


#: how far a trial has got, as outcomes of it from two tasks are weighed (a worker's retry, another worker)
def _progress(outcome: Mapping[str, Any]) -> int:
    state = outcome.get("state")
    return 2 if state in FINAL_STATES else 1 if state == "running" else 0


def add_outcomes(
    outcomes: dict[str, dict[str, Any]], published: Iterable[Mapping[str, Any]], task_id: str, map_index: int
) -> None:
    """Add the outcomes one task instance published (checked: :func:`read_outcome_records`) to ``outcomes``
    (trial id -> outcome), each with the task instance that ran it (``task_id``, ``map_index``: the link of an
    asynchronous sweep's trial, whose worker no plan names). Where two tasks publish one trial, the outcome that
    got further stands (ended, then running, then not started)."""
    for o in published:
        had = outcomes.get(o["trial_id"])
        if had is None or _progress(o) >= _progress(had):
            outcomes[o["trial_id"]] = {**o, "task_id": task_id, "map_index": map_index}


def _curves(
    rows: Sequence[Mapping[str, Any]],
    read: Callable[[str], Sequence[Mapping[str, Any]] | None],
    metric: str,
    most: int = MAX_CURVES,
) -> dict[str, Any]:
    """The curves of ``metric`` by step (running trials first, then by index, ``most`` of them) and each running
    trial's latest report; ``read(trial_id)`` gives a trial's reports (None: not readable), asked lazily."""
    curves: list[dict[str, Any]] = []
    latest: list[dict[str, Any]] = []
    # a trial this run did not start, or whose re-run it stopped (the earlier outcome put back), has no curve of it
    order = sorted(
        (r for r in rows if r["state"] not in ("not_started", "stopped")),
        key=lambda r: (r["state"] != "running", r["index"]),
    )
    for r in order[:MAX_REPORT_READS]:
        if len(curves) >= most:
            break
        found = read(r["trial_id"]) or []
        points = [
            [x["step"], float(v)]
            for x in found
            if isinstance(x.get("step"), int)
            for v in [x["metrics"].get(metric)]
            if is_finite_number(v)
        ]
        if r["state"] == "running" and found:
            last = found[-1]
            latest.append(
                {
                    "index": r["index"],
                    "label": r["label"],
                    "step": last.get("step"),
                    "metrics": last["metrics"],
                    "checkpoint": last.get("checkpoint"),
                    "task_id": r["task_id"],
                    "map_index": r["map_index"],
                }
            )
        if points:
            if len(points) > MAX_CURVE_POINTS:
                stride = len(points) / (MAX_CURVE_POINTS - 1)
                points = [points[int(i * stride)] for i in range(MAX_CURVE_POINTS - 1)] + [points[-1]]
            curves.append({"index": r["index"], "label": r["label"], "state": r["state"], "points": points})
    return {"curve_metric": metric, "curves": curves, "latest_reports": latest[:MAX_CURVES]}


def best_so_far(points: Sequence[Mapping[str, Any]], objective: Objective) -> list[list[float]]:
    """The best score so far by trial index, over every point: ``[[index, best], ...]`` where it improves (and the
    last index, so the line reaches the end)."""
    line: list[list[float]] = []
    best: Any = None
    ordered = sorted(points, key=lambda p: p["index"])
    for p in ordered:
        if best is None or objective.better(p["score"], best):
            best = p["score"]
            line.append([p["index"], best])
    if ordered and line and line[-1][0] != ordered[-1]["index"]:
        line.append([ordered[-1]["index"], best])
    return line


def sample_points(points: list[dict[str, Any]], objective: Objective, limit: int | None = None) -> list[dict[str, Any]]:
    """At most ``limit`` points (default :data:`MAX_POINTS`) for the plots, in index order: all when they fit;
    else the best quarter by score (and every point on the Pareto front), then an even sample of the rest by index,
    so the best region is drawn whole and the rest keeps its shape."""
    limit = MAX_POINTS if limit is None else limit
    if len(points) <= limit:
        return points
    ranked = sorted(range(len(points)), key=lambda i: objective.sort_key(points[i]["score"]))
    keep = set(ranked[: limit // 4]) | {i for i, p in enumerate(points) if p.get("front")}
    rest = [i for i in range(len(points)) if i not in keep]
    room = max(0, limit - len(keep))
    if room and rest:
        stride = len(rest) / room
        keep.update(rest[int(k * stride)] for k in range(min(room, len(rest))))
    return [points[i] for i in sorted(keep, key=lambda i: points[i]["index"])]


def trial_rows(
    plans: Sequence[Mapping[str, Any]],
    outcomes: Mapping[str, Mapping[str, Any]],
    ti_states: Mapping[tuple[str, int], str | None],
    run_ended: bool = False,
) -> list[dict[str, Any]]:
    """Every listed trial of one sweep in one DAG run, in index order: its parameters, state (from its outcome,
    else from its task instance), result, error, the task instance that ran it and whether it was skipped.
    ``run_ended``: the DAG run is over (stopped, failed, done), so a trial still without an outcome or a task that
    ran is ``not_started``, not ``waiting``."""
    rows = _trial_rows(plans, outcomes, ti_states)
    if run_ended:
        for row in rows:
            if row["state"] == "waiting":
                row.update(state="not_started", error=row.get("error") or "not started: its DAG run ended first")
    return rows


def _trial_rows(
    plans: Sequence[Mapping[str, Any]],
    outcomes: Mapping[str, Mapping[str, Any]],
    ti_states: Mapping[tuple[str, int], str | None],
) -> list[dict[str, Any]]:
    trials: dict[str, dict[str, Any]] = {}
    for plan in plans:
        skipped = {s["trial_id"]: s for s in plan["skipped"]}
        position = {trial_id: i for i, trial_id in enumerate(plan["pending"])}
        for t in plan["trials"]:
            row = _new_row(t, plan.get("round"))
            if t["trial_id"] in skipped:
                before = skipped[t["trial_id"]]
                row.update(
                    state=before.get("state", "succeeded"),
                    skipped=True,
                    result=before.get("result"),
                    error=before.get("error"),
                    step=before.get("step"),
                )
            elif t["trial_id"] in position:
                row["task_id"], row["map_index"] = _task_of(plan, position[t["trial_id"]])
                outcome = outcomes.get(t["trial_id"])
                if outcome is not None and (outcome["state"] in FINAL_STATES or outcome["state"] == "not_started"):
                    row.update(
                        state=outcome["state"],
                        result=outcome.get("result"),
                        seconds=outcome.get("seconds"),
                        error=outcome.get("error"),
                        step=outcome.get("step"),
                    )
                else:
                    ti_state = ti_states.get((row["task_id"], row["map_index"]))
                    row["state"] = _TI_AS_TRIAL.get(str(ti_state), "waiting")
                    if row["state"] == "succeeded":  # its task ended without publishing: say so, never guess
                        row.update(state="failed", error="its task succeeded but published no outcome")
                    elif row["state"] == "failed":
                        row["error"] = f"its task is {ti_state} and published no outcome (see the task's log)"
            else:
                row["state"] = "waiting"
                _take_outcome(row, outcomes.get(t["trial_id"]))
            trials.setdefault(t["trial_id"], row)
    for trial_id, outcome in outcomes.items():  # an asynchronous search's trials: asked as slots freed
        about = outcome.get("trial")
        if trial_id in trials or not isinstance(about, Mapping):
            continue
        row = {**_new_row(about, None), "state": "waiting"}
        _take_outcome(row, outcome)
        trials[trial_id] = row
    return sorted(trials.values(), key=lambda r: r["index"])


def _new_row(trial: Mapping[str, Any], round_no: int | None) -> dict[str, Any]:
    """A trial's row before its state is known: what its plan (or its outcome) says about it."""
    return {
        "index": trial["index"],
        "trial_id": trial["trial_id"],
        "label": trial["label"],
        "params": trial["params"],
        "round": round_no,
        "task_id": None,
        "map_index": None,
        "result": None,
        "seconds": None,
        "error": None,
        "skipped": False,
        "step": None,
    }


def _take_outcome(row: dict[str, Any], outcome: Mapping[str, Any] | None) -> None:
    """A row whose trial no task of the plan runs (an asynchronous search's): its state is its outcome's, running
    included (the worker that runs it publishes it as it starts), and its task instance the worker that published
    it (:func:`add_outcomes`)."""
    if outcome is None:
        return
    state = outcome["state"]
    row.update(
        state="waiting" if state == "defined" else state,
        result=outcome.get("result"),
        seconds=outcome.get("seconds"),
        error=outcome.get("error"),
        step=outcome.get("step"),
    )
    if isinstance(outcome.get("task_id"), str) and state != "not_started":
        row.update(task_id=outcome["task_id"], map_index=outcome.get("map_index"))


def sweep_objective(plans: Sequence[Mapping[str, Any]]) -> Objective | None:
    first = plans[0]
    return Objective(**first["objective"]) if first.get("objective") else None


def scored_points(
    rows: Sequence[Mapping[str, Any]], objective: Objective
) -> tuple[list[dict[str, Any]], dict[str, set[Any]], dict[str, set[Any]]]:
    """The succeeded trials as plot points (index, round, score, label, numeric ``params``, ``categories``; with
    several metrics their ``values``), and the values seen of each numeric and categorical parameter."""
    points: list[dict[str, Any]] = []
    values: dict[str, set[Any]] = {}
    categories: dict[str, set[Any]] = {}
    for r in rows:
        metrics = objective.values(r["result"]) if r["state"] == "succeeded" else None
        if metrics is None:
            continue
        numeric = _numeric_params(r["params"])
        for name, value in numeric.items():
            values.setdefault(name, set()).add(value)
        labels = _categorical_params(r["params"])
        for name, label in labels.items():
            categories.setdefault(name, set()).add(label)
        point = {
            "index": r["index"],
            "round": r["round"],
            "score": objective.score(r["result"]),
            "label": r["label"],
            "params": numeric,
            "categories": labels,
            "trial_id": r["trial_id"],
        }
        if objective.several:
            point["values"] = list(metrics)
        points.append(point)
    return points, values, categories


def param_axes(
    plans: Sequence[Mapping[str, Any]], values: Mapping[str, set[Any]], categories: Mapping[str, set[Any]]
) -> dict[str, Any]:
    """The parameters worth drawing: numeric ones that vary (with their scale, log or linear) and categorical ones
    with 2 to :data:`MAX_CATEGORIES` values (their values sorted)."""
    numeric = sorted(n for n, seen in values.items() if len(seen) > 1)  # a constant plots nothing
    declared_log = {n for p in plans for n in p.get("log_params") or []}
    return {
        "numeric_params": numeric,
        "param_scales": {n: _scale(n, values[n], declared_log) for n in numeric},
        "categorical_params": {
            n: sorted(seen) for n, seen in sorted(categories.items()) if 1 < len(seen) <= MAX_CATEGORIES
        },
    }


def trial_counts(
    plans: Sequence[Mapping[str, Any]], rows: Sequence[Mapping[str, Any]], run_ended: bool = False
) -> dict[str, int]:
    """How many trials are in each state (:data:`STATES`), with ``defined`` and ``skipped``; trials whose
    parameters are not published yet count as ``waiting`` (``not_started`` once the DAG run has ended)."""
    counts = {state: 0 for state in RUN_STATES}
    # (an asynchronous search's plan lists the trials known when it planned; its workers publish the others)
    counts["defined"] = max(sum(p["defined"] for p in plans), len(rows)) if len(plans) == 1 else len(rows)
    for r in rows:
        counts[r["state"]] += 1
        counts["skipped"] += r["skipped"]
    if len(plans) == 1 and plans[0]["defined"] > len(rows):  # parameters not published for the rest
        counts["not_started" if run_ended else "waiting"] += plans[0]["defined"] - len(rows)
    return counts


@open_view
class ObjectiveView(TypedDict):
    """A sweep's objective as the page reads it: ``metric``/``mode`` as declared (a name, or lists for several),
    with the lists, the label of the score the leaderboard ranks by and whether more is better."""

    metric: str | list[str]
    mode: str | list[str]
    weights: NotRequired[list[float]]
    metrics: list[str]
    modes: list[str]
    several: bool
    describe: str
    score_label: str
    maximize: bool


@open_view
class TrialRef(TypedDict):
    """A trial in a list of the page (failed, pruned): which one, and its task instance in this run if any."""

    index: int
    trial_id: str
    label: str
    error: str | None
    task_id: str | None
    map_index: int | None
    state: NotRequired[str]
    skipped: NotRequired[bool]
    step: NotRequired[int | None]


@open_view
class LeaderRow(TypedDict):
    """A row of the leaderboard (the best trial is the first)."""

    rank: int
    score: float
    index: int
    label: str
    trial_id: str
    params: dict[str, Any]
    round: NotRequired[int | None]
    task_id: NotRequired[str | None]
    map_index: NotRequired[int | None]
    seconds: NotRequired[float | None]
    skipped: NotRequired[bool]
    front: NotRequired[int | None]  # several metrics: the Pareto front it is on (1: the best)
    values: NotRequired[dict[str, float | None]]


@open_view
class SweepPoint(TypedDict):
    """A scored trial drawn in the plots."""

    index: int
    round: int | None
    score: float
    label: str
    params: dict[str, float]  # its numeric parameters (nested names dotted)
    categories: dict[str, str]
    trial_id: str
    values: NotRequired[list[float]]  # several metrics: each one's value
    front: NotRequired[bool]  # on the Pareto front of the first two metrics


@open_view
class CurveView(TypedDict):
    """A trial's intermediate reports of the curve metric: ``[step, value]`` points."""

    index: int
    label: str
    state: str
    points: list[list[float]]


@open_view
class LatestReport(TypedDict):
    index: int
    label: str
    step: int | None
    metrics: dict[str, Any]
    checkpoint: str | None
    task_id: str | None
    map_index: int | None


@open_view
class SweepView(TypedDict):
    """One sweep in one DAG run (:func:`build_sweep_view`), as ``GET /gpusched/api/dags/{dag_id}/sweeps`` lists
    it."""

    sweep: str
    search: str
    backend: str
    run: str
    objective: ObjectiveView | None
    counts: dict[str, int]  # trials per state, and defined / skipped
    rounds: int | None
    truncated: int  # trials whose parameters the plan did not publish (past MAX_PUBLISHED_TRIALS)
    problems: list[TrialRef]  # failed, invalid or timed out trials
    pruned: list[TrialRef]  # pruned trials with their step and the rule's reason (error)
    curve_metric: str | None
    curves: list[CurveView]
    latest_reports: list[LatestReport]
    leaderboard: list[LeaderRow]
    best: LeaderRow | None
    points: list[SweepPoint]  # scored trials drawn (a sample past MAX_POINTS)
    points_total: int
    best_so_far: list[list[float]]
    numeric_params: list[str]
    categorical_params: dict[str, list[str]]
    param_scales: dict[str, str]
    points_note: NotRequired[str]
    group: NotRequired[str]  # the task group the sweep is
    reports_note: NotRequired[str]
    population: NotRequired[PopulationView]  # search: pbt, where its folder's lineage is readable
    population_note: NotRequired[str]  # what of a PBT sweep's population is not drawn, and why


def build_sweep_view(
    plans: Sequence[Mapping[str, Any]],
    outcomes: Mapping[str, Mapping[str, Any]],
    ti_states: Mapping[tuple[str, int], str | None],
    top_n: int = 20,
    reports: Callable[[str], Sequence[Mapping[str, Any]] | None] | None = None,
    lineage: Mapping[str, Any] | None = None,
    run_ended: bool = False,
) -> SweepView:
    """One sweep's view in one DAG run: ``plans`` (its stages' plan records, rounds in order), ``outcomes``
    (trial id -> published outcome), ``ti_states`` ((task id, map index) -> Airflow state), ``reports``
    (trial id -> its intermediate reports where the caller can read them, asked lazily: drawn by step),
    ``lineage`` (a PBT sweep's checked lineage, :func:`~.pbt.read_lineage`: drawn as its population), ``run_ended``
    (the DAG run is over: what never started is ``not_started``)."""
    first = plans[0]
    objective = sweep_objective(plans)
    rows = trial_rows(plans, outcomes, ti_states, run_ended)
    counts = trial_counts(plans, rows, run_ended)
    view: dict[str, Any] = {
        "sweep": first["sweep"],
        "search": first["search"],
        "backend": first["backend"],
        "run": first["run"],
        "objective": _objective_view(objective) if objective else None,
        "counts": counts,
        "rounds": len(plans) if first.get("round") is not None else None,
        "truncated": max(0, first["defined"] - len(first["trials"])),
        **_trial_refs(rows),
    }
    view.update(_curves_part(rows, reports, first.get("curve_metric"), lineage))
    view.update(_scores_part(plans, rows, objective, top_n) if objective is not None else _no_scores())
    return cast(SweepView, view)  # built up key by key: the api-server's response model checks its shape


def _trial_refs(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``problems`` (failed, invalid or timed out trials) and ``pruned``, at most 50 of each."""
    return {
        "problems": [
            {k: r[k] for k in ("index", "trial_id", "label", "state", "error", "task_id", "map_index")}
            for r in rows
            if r["state"] in FAILED_STATES
        ][:50],
        # pruned trials with the step they were stopped at and the rule's reason, as `gpusched sweep results`
        "pruned": [
            {
                **{k: r[k] for k in ("index", "trial_id", "label", "error", "task_id", "map_index", "skipped")},
                "step": r.get("step"),
            }
            for r in rows
            if r["state"] == "pruned"
        ][:50],
    }


def _curves_part(
    rows: list[dict[str, Any]],
    reports: Callable[[str], Sequence[Mapping[str, Any]] | None] | None,
    metric: str | None,
    lineage: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """The view's learning curves and latest reports, and a PBT sweep's population."""
    # a PBT population draws every member's curve, not only the reports plot's first MAX_CURVES (a population of 8
    # over 10 generations is 80 trials): read once, up to MAX_REPORT_READS trials, said when more
    most = MAX_REPORT_READS if lineage is not None else MAX_CURVES
    read = (
        _curves(rows, reports, metric, most)
        if reports is not None and metric
        else {"curve_metric": metric, "curves": [], "latest_reports": []}
    )
    part: dict[str, Any] = {**read, "curves": read["curves"][:MAX_CURVES]}
    if lineage is not None:
        part["population"] = population_view(lineage, rows, read["curves"], metric)
        if len(rows) > MAX_REPORT_READS:
            part["population_note"] = (
                f"curves are drawn for {MAX_REPORT_READS} of the population's {len(rows)} trials (running first)"
            )
    return part


def _no_scores() -> dict[str, Any]:
    """The view's scored part of a sweep without an objective (new lists each time: a caller may add to them)."""
    return {
        "leaderboard": [],
        "best": None,
        "points": [],
        "points_total": 0,
        "best_so_far": [],
        "numeric_params": [],
        "categorical_params": {},
        "param_scales": {},
    }


#: what a leaderboard row shows (those a row has)
_LEADER_KEYS = (
    "rank",
    "score",
    "index",
    "label",
    "trial_id",
    "params",
    "round",
    "task_id",
    "map_index",
    "seconds",
    "skipped",
    "front",
    "values",
)


def _scores_part(
    plans: Sequence[Mapping[str, Any]], rows: list[dict[str, Any]], objective: Objective, top_n: int
) -> dict[str, Any]:
    """The view's leaderboard, best trial, scored points (a sample past MAX_POINTS), best-so-far line and
    parameter axes."""
    board = leaderboard(rows, objective, top_n)
    part: dict[str, Any] = {"leaderboard": [{k: r[k] for k in _LEADER_KEYS if k in r} for r in board]}
    part["best"] = part["leaderboard"][0] if board else None
    points, values, categories = scored_points(rows, objective)
    if objective.several and points:  # mark the Pareto front for the plot of the first two metrics
        on_front = set(pareto_fronts([p["values"] for p in points], objective.modes, enough=1)[0])
        for i, point in enumerate(points):
            point["front"] = i in on_front
    part["best_so_far"] = best_so_far(points, objective)
    part["points_total"] = len(points)
    part["points"] = sample_points(points, objective)
    if len(part["points"]) < len(points):
        part["points_note"] = (
            f"The plots show {len(part['points']):,} of {len(points):,} scored trials: the best "
            f"{MAX_POINTS // 4:,}{' and the Pareto front' if objective.several else ''}, and an "
            f"even sample of the rest; the best-so-far line and the leaderboard count every trial."
        )
    # categorical parameters (optimizer, activation...): one strip of scores per value, values sorted
    part.update(param_axes(plans, values, categories))
    return part
