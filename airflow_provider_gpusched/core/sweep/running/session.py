"""One sweep on disk, from plan to leaderboard: what the Airflow task group and ``gpusched sweep`` call.

* :meth:`SweepSession.prepare` — expand (or, for searches in rounds, ask the round's trials), skip trials
  that already succeeded or were pruned (unless ``force_rerun``), write the manifest the trial runner reads.
* :meth:`SweepSession.finish_round` — tell a round's scores to the search.
* :meth:`SweepSession.collect` — read every trial's state and result, count them (DI-toolkit's status table),
  rank them by the objective, write ``summary.json``, ``leaderboard.json`` and ``best.json``.
"""

from __future__ import annotations

import hashlib
import os
import re
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from airflow_provider_gpusched.core.errors import GpuschedError
from airflow_provider_gpusched.core.sweep.definition.sweep_spec import SweepSpec
from airflow_provider_gpusched.core.sweep.parts.expand import (
    DEFAULT_LABELS,
    Trial,
    finite_space_size,
    flatten,
    make_trial,
    nested,
)
from airflow_provider_gpusched.core.sweep.parts.objective import format_leaderboard, leaderboard, pareto_front
from airflow_provider_gpusched.core.sweep.records.store import (
    DONE_STATES,
    FAILED_STATES,
    TrialStore,
    format_counts,
    read_json,
    state_counts,
)
from airflow_provider_gpusched.core.sweep.running.trial_run import (
    CALLABLE_FILE,
    REQUIRED_ENV_FILE,
    Manifest,
    save_callable,
    write_manifest,
)
from airflow_provider_gpusched.core.sweep.searches.optuna import report_curve
from airflow_provider_gpusched.core.sweep.searches.rounds import RoundSearch, make_search
from airflow_provider_gpusched.core.text import printable

if TYPE_CHECKING:
    from airflow_provider_gpusched.core.sweep.running.asynchronous import AsyncRun

ONE_SHOT_MANIFEST = "manifest.json"
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def manifest_name(round_no: int | None = None, run: str | None = None) -> str:
    """Where the manifest of a stage lives under the sweep folder: one per DAG run (``runs/<run>/...``) so
    two runs of one sweep never read each other's plan; without a run, the sweep's own (scripts, the CLI)."""
    name = ONE_SHOT_MANIFEST if round_no is None else os.path.join("rounds", f"round-{round_no:03d}.manifest.json")
    if not run:
        return name
    safe = _UNSAFE.sub("_", run).strip("._")[:120] or "_"
    return os.path.join("runs", f"{safe}-{hashlib.sha1(run.encode()).hexdigest()[:8]}", name)


class SweepSession:
    def __init__(self, spec: SweepSpec, results_root: str | None = None) -> None:
        self.spec = spec
        self.store = TrialStore(results_root or spec.results_root or default_results_root(), spec.name)
        self._search: RoundSearch | None = None

    @property
    def search(self) -> RoundSearch:
        """The sweep's search, made once per session: an Optuna study is loaded from its journal once,
        and later asks and tells read only what was appended since."""
        if self._search is None:
            self._search = make_search(self.spec, self.store.path("search"))
        return self._search

    def manifest_path(self, round_no: int | None = None, run: str | None = None) -> str:
        """The manifest of a stage (``round_no``, or the one-shot stage) of a DAG run (see :func:`manifest_name`)."""
        return self.store.path(manifest_name(round_no, run))

    def manifest(self, round_no: int | None = None, run: str | None = None) -> Manifest:
        """The manifest :meth:`prepare` wrote for that stage and run."""
        return Manifest(self.manifest_path(round_no, run))

    # -- planning --------------------------------------------------------------------------------------
    def _target(self) -> dict[str, Any]:
        template = self.spec._template
        extra: dict[str, Any] = {"config_template": {"name": template.name, "text": template.text}} if template else {}
        if self.spec.required_env is not None:
            extra["required_env"] = save_callable(self.store.dir, self.spec.required_env, REQUIRED_ENV_FILE)
        if self.spec.python_callable is not None:
            save_callable(self.store.dir, self.spec.python_callable)
            return {"callable": CALLABLE_FILE, **extra}
        return {"command": list(self.spec.command or ()), **extra}  # a command or a callable: SweepSpec checked

    def round_trials(self, round_no: int) -> list[Trial]:
        params = self.search.ask(round_no)
        identities = self.search.identities(round_no)
        varying = self.spec.varying()
        first = (
            round_no * self.search.per_round
        )  # trial numbers run on across rounds: 0..7 in round 0, 8..15 in round 1
        trials, seen = [], set()
        for i, p in enumerate(params):
            identity = identities[i] if i < len(identities) else None
            # (a PBT member's trial: its member keeps it apart from another member's with the same values)
            version = self.spec.code_version if identity is None else f"{self.spec.code_version or ''}|{identity}"
            trial = make_trial(p, varying, version, first + i, self.spec.label_format or DEFAULT_LABELS)
            if trial.trial_id not in seen:
                seen.add(trial.trial_id)
                trials.append(trial)
        self.search.prepare_trials(round_no, trials, self.store)
        return trials

    def prepare(
        self,
        round_no: int | None = None,
        chunk_size: int | None = None,
        run: str | None = None,
        force_rerun: bool | None = None,
        backend: str = "local",
    ) -> Manifest:
        """Write the manifest of this run (or of round ``round_no``) and return it. ``run``: the DAG run
        (trials record which run ran them; two runs of the sweep share trials, never a manifest);
        ``force_rerun``: this run's choice (e.g. from the DAG run's conf), else the spec's; ``backend``: where
        the trials run (``"local"`` or ``"slurm"``: how a distributed trial starts its ranks)."""
        if self.spec.in_rounds and round_no is None:
            raise GpuschedError(f"sweep {self.spec.name}: search {self.spec.search} runs in rounds; give round_no")
        force_rerun = self.spec.force_rerun if force_rerun is None else force_rerun
        if self.spec.asks_as_it_goes:  # its trials are asked for as slots free: the plan holds the earlier ones
            return self.asynchronous(run, force_rerun).plan(chunk_size, backend)
        trials = self.spec.trials() if round_no is None else self.round_trials(round_no)
        if self.spec.gts_result_folders and not force_rerun:
            self._adopt_gts_results(trials)
        pending, skipped = self.store.plan(trials, force_rerun)
        return Manifest(
            self.write_stage_manifest(
                round_no,
                run,
                trials=trials,
                pending=pending,
                skipped=skipped,
                force_rerun=force_rerun,
                chunk_size=chunk_size,
                backend=backend,
            )
        )

    def trials_left(self, manifest: Manifest) -> int | None:
        """How many trials the workers of an asynchronous run (``manifest``, its plan) can still take: the plan's
        pending ones and the new ones the study may still ask for (up to ``count`` and the space's size). None with
        ``force_rerun``: every earlier trial runs again, on a new study trial. A finished sweep run again: 0, and
        no worker need start (nor hold a GPU to find nothing to do)."""
        if manifest.record.force_rerun:
            return None
        size = finite_space_size(flatten(self.spec.space))
        count = self.spec.count or 0
        cap = count if size is None else min(count, size)
        return len(manifest.pending) + max(0, cap - len(manifest.trials))

    def asynchronous(self, run: str | None = None, force_rerun: bool | None = None) -> AsyncRun:
        """The run ``run`` of an asynchronous search (core/sweep/running/asynchronous.py): its plan, its hand-outs."""
        from airflow_provider_gpusched.core.sweep.running.asynchronous import AsyncRun

        return AsyncRun(self, run, force_rerun)

    def write_stage_manifest(
        self,
        round_no: int | None,
        run: str | None,
        *,
        trials: Sequence[Trial],
        pending: Sequence[Trial],
        skipped: Sequence[Trial],
        force_rerun: bool,
        chunk_size: int | None,
        backend: str,
    ) -> str:
        """Write the manifest of a stage of ``run`` (the trial runners read it) and return its path."""
        objective = self.spec.objective.to_dict() if self.spec.objective else None
        return write_manifest(
            self.store,
            manifest_name(round_no, run),
            trials=trials,
            pending=pending,
            target=self._target(),
            objective=objective,
            env=self.spec.resources.env,
            chunk_size=chunk_size,
            skipped=[t.trial_id for t in skipped],
            round=round_no,
            varying=self.spec.varying(),
            run=run,
            planned_at=time.time(),
            force_rerun=bool(force_rerun),
            base_dir=self.spec.base_dir,
            on_invalid_result=self.spec.on_invalid_result,
            distributed=self.spec.resources.distributed_settings(backend),
            pruning=self.spec.pruning.to_dict() if self.spec.pruning else None,
            shared_study=self.spec.asks_as_it_goes,
            checkpoints_in_trial=self.spec.kind.hands_on_checkpoints,
            search=self.spec.search,
            tracking=[c.to_dict() for c in self.spec.tracking or ()],
        )

    def _adopt_gts_results(self, trials: Iterable[Trial]) -> None:
        """GPU Task Scheduler skips a test instance whose result folder exists; so do we: such a trial is recorded
        as succeeded (by that tool, its results in that folder), once."""
        for trial in trials:
            legacy = os.path.join(self.store.root, trial.label)
            if trial.label and os.path.isdir(legacy) and self.store.state(trial) not in DONE_STATES:
                self.store.mark_finished(
                    trial,
                    ok=True,
                    exit_code=0,
                    note=f"finished by GPU Task Scheduler: its result folder {legacy} exists",
                )

    def finish_round(self, round_no: int, run: str | None = None) -> dict[str, Any]:
        manifest = self.manifest(round_no, run)
        objective = self.search.objective
        outcomes: list[tuple[Any, ...]] = []  # (trial, values) or (trial, None, curve) when pruned
        scores: list[float] = []
        metric = self.spec.report_metric
        for record in self.store.records(manifest.trials):
            values = objective.values(record["result"]) if record["state"] == "succeeded" else None
            trial = manifest.trial(record["trial_id"])
            if record["state"] == "pruned":  # the search hears it was pruned, with its curve
                outcomes.append((trial, None, report_curve(record["folder"], metric)))
            else:
                outcomes.append((trial, values))
            score = objective.score(record["result"]) if values is not None else None
            if score is not None:
                scores.append(score)
        told = self.search.tell_trials(round_no, outcomes)
        best = (max if objective.maximize else min)(scores) if scores else None
        return {"round": round_no, "trials": len(outcomes), "told": told, "scored": len(scores), "round_best": best}

    def settle(
        self,
        round_no: int | None,
        run: str | None,
        log: Callable[[str], None] = lambda line: None,
        *,
        state: str = "failed",
        why: str = "its runner stopped before recording an outcome (killed, or its job/process died)",
    ) -> int:
        """After a stage's trial tasks all ended: a trial this run started that is still ``running`` with nobody
        holding its claim (its runner died) is marked ``failed`` with that reason, or gets back the outcome its
        re-run would have replaced (TrialStore.end_unfinished). A trial this run never started keeps its record
        (``not_started`` in this run's counts) and runs next time. Returns how many were marked. A run that was
        stopped (Ctrl-C) settles with ``state="stopped"`` and its reason."""
        path = self.manifest_path(round_no, run)
        if not os.path.exists(path):
            return 0
        manifest = Manifest(path)
        marked = 0
        for trial in manifest.pending:
            if self.store.state(trial) != "running":  # a trial this run never started keeps its record
                continue
            written = self.store.end_unfinished(trial, run=run, state=state, reason=why)
            if written is None:
                continue
            name = printable(trial.label or trial.trial_id)
            log(
                f"trial {trial.index} {name} marked {written}: {why}"
                if written == state
                else f"trial {trial.index} {name}: its re-run ended without an outcome ({why}); its earlier outcome "
                f"({written}) stands"
            )
            marked += 1
        return marked

    # -- results ---------------------------------------------------------------------------------------
    def manifests(self, run: str | None = None) -> list[Manifest]:
        stages = [None] if not self.spec.in_rounds else list(range(self.spec.rounds or 0))
        out = []
        for r in stages:
            path = self.manifest_path(r, run)
            if os.path.exists(path):
                out.append(Manifest(path))
        return out

    def collect(self, run: str | None = None) -> dict[str, Any]:
        """Count, rank and write the summary of the trials of ``run``'s plan — with every trial's state as it
        is on disk now, whichever DAG run finished it."""
        manifests = self.manifests(run)
        if not manifests:
            raise GpuschedError(f"sweep {self.spec.name}: nothing was planned in {self.store.dir}")
        trials: dict[str, Trial] = {}
        skipped: set[str] = set()
        planned_at: dict[str, float] = {}
        for manifest in manifests:
            for trial in manifest.trials:
                trials.setdefault(trial.trial_id, trial)
                planned_at.setdefault(trial.trial_id, float(manifest.record.planned_at or 0))
            skipped.update(manifest.record.skipped)
        records = self.store.records(trials.values())
        # the counts are this run's (a trial it did not start is not_started); the leaderboard, best and Pareto
        # front are the sweep's: every outcome that stands, whichever run established it
        table = state_counts(records, skipped, run, planned_at)
        summary: dict[str, Any] = {
            "sweep": self.spec.name,
            "run": run,
            "folder": self.store.dir,
            "search": self.spec.search,
            "counts": {k: len(v) for k, v in table.items()},
        }
        self.store.write("summary.json", {**summary, "table": table, "records": records})
        text = format_counts(table)
        if self.spec.objective is not None:
            board = leaderboard(records, self.spec.objective, self.spec.top_n)
            self.store.write("leaderboard.json", {"objective": self.spec.objective.to_dict(), "leaderboard": board})
            summary["leaderboard"] = [
                {k: r[k] for k in ("rank", "score", "label", "trial_id", "params", "front", "values") if k in r}
                for r in board
            ]
            if self.spec.objective.several:
                front = pareto_front(records, self.spec.objective)
                summary["pareto_front"] = [{k: r[k] for k in ("label", "trial_id", "params", "values")} for r in front]
                self.store.write(
                    "pareto.json",
                    {
                        "objective": self.spec.objective.to_dict(),
                        "front": [
                            {k: r[k] for k in ("index", "label", "trial_id", "params", "values", "folder")}
                            for r in front
                        ],
                    },
                )
            summary["best"] = summary["leaderboard"][0] if board else None
            if board:
                self.store.write(
                    "best.json",
                    {
                        "objective": self.spec.objective.to_dict(),
                        **summary["best"],
                        "result": board[0]["result"],
                        "folder": board[0]["folder"],
                    },
                )
            text += "\n" + format_leaderboard(board, self.spec.objective)
        failed_here = {i for state in FAILED_STATES for i in table.get(state, [])}  # this run's failures
        failed = [r for r in records if r["index"] in failed_here and r["state"] in FAILED_STATES]
        if failed:
            text += "\nfailed, invalid or timed-out trials:\n" + "\n".join(
                f"  {r['index']} {printable(r['label'] or r['trial_id'])} [{r['state']}]: {printable(str(r['error']))}"
                + (f" (log: {printable(r['log'])})" if r.get("log") else "")
                for r in failed[:20]
            )
        summary["problems"] = [{k: r[k] for k in ("index", "trial_id", "label", "state", "error")} for r in failed]
        if self.spec.in_rounds and trials and not any(m.pending for m in manifests):
            # a finished adaptive sweep run again: its rounds replay what earlier runs proposed and ran
            summary["note"] = (
                f"sweep {self.spec.name}: all {len(manifests)} round(s) were run by earlier runs "
                f"({len(trials)} trials, none new); raise rounds (now {self.spec.rounds}) to search "
                f"further, or force_rerun to evaluate them again"
            )
            text = summary["note"] + "\n" + text
        summary["text"] = text
        return summary

    def _folder_states(self) -> list[str]:
        """The state of each trial folder of the sweep (read only: a preview writes nothing)."""
        trials_dir = os.path.join(self.store.dir, "trials")
        try:
            names = sorted(os.listdir(trials_dir))
        except OSError:
            return []
        return [TrialStore.state_of(read_json(os.path.join(trials_dir, name, "status.json"))) for name in names]

    def preview(self) -> dict[str, Any]:
        """The trials a run would have, with their current state, without running or writing anything."""
        if self.spec.in_rounds:
            size = finite_space_size(flatten(self.spec.space))
            rows = [{"round": r, "trials": n} for r, n in enumerate(self.spec.kind.round_sizes(self.spec, size))]
            return {
                "sweep": self.spec.name,
                "search": self.spec.search,
                "rounds": rows,
                "trials": sum(r["trials"] for r in rows),
                "folder": self.store.dir,
                "space_size": size,
            }
        if self.spec.asks_as_it_goes:
            size = finite_space_size(flatten(self.spec.space))
            count = self.spec.count or 0  # the kind set it
            total = count if size is None else min(count, size)
            # the trials earlier runs ended (each is a study trial: a run skips those that succeeded or were pruned)
            done = 0 if self.spec.force_rerun else sum(1 for s in self._folder_states() if s in DONE_STATES)
            return {
                "sweep": self.spec.name,
                "search": self.spec.search,
                "asynchronous": True,
                "trials": total,
                "workers": self.spec.max_workers or self.spec.per_round,
                "folder": self.store.dir,
                "space_size": size,
                "would_run": max(0, total - done),
                "would_skip": min(done, total),
            }
        trials = self.spec.trials()
        states = {t.trial_id: self.store.state(t) for t in trials}
        would_run = sum(1 for t in trials if self.spec.force_rerun or states[t.trial_id] not in DONE_STATES)
        return {
            "sweep": self.spec.name,
            "search": self.spec.search,
            "folder": self.store.dir,
            "trials": len(trials),
            "would_run": would_run,
            "would_skip": len(trials) - would_run,
            "table": [
                {
                    "index": t.index,
                    "trial_id": t.trial_id,
                    "state": states[t.trial_id],
                    "label": t.label,
                    "params": nested(t.params),
                }
                for t in trials
            ],
        }


def default_results_root() -> str:
    """Outside Airflow (the CLI, scripts): ``$AIRFLOW__GPUSCHED__SWEEP_RESULTS_ROOT``, else
    ``<AIRFLOW_HOME>/gpusched/sweeps`` — the same default the Airflow side uses (core/options.py)."""
    from airflow_provider_gpusched.core.options import directory_outside_airflow

    return directory_outside_airflow("sweep_results_root")
