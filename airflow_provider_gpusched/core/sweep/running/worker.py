"""A worker of an asynchronous search in a process of its own (a Slurm job or array task, or a slot on local GPUs:
core/gpu/sweep_batch.py), running one trial after another in this one process (the trainable imported once)::

    python -m airflow_provider_gpusched.core.sweep.running.worker MANIFEST NAME [MAX_TRIALS]

asks the search for a trial (core/sweep/running/asynchronous.py; first the one it was running, when a process of the same
name was stopped: a relaunch after a GPU OOM or a preemption, a requeued Slurm job), runs it as the trial runner does
(core/sweep/running/trial_run.py's ``run_trial``: its claim, its records), tells the study how it ended, and asks again
until the search hands out no more (or, with MAX_TRIALS, it ran that many: a slot on local GPUs then starts a new
worker, ``trials_per_process``). The spec it asks with is the one the run's plan left in the sweep folder
(``search/spec.pkl``). Exit status: 0 when every trial it ran succeeded or was pruned, else the last other one
(2 for a usage error or an unreadable plan)."""

from __future__ import annotations

import os
import pickle
import sys
from collections.abc import Sequence

from airflow_provider_gpusched.core.errors import GpuschedError
from airflow_provider_gpusched.core.sweep.running.asynchronous import AsyncRun
from airflow_provider_gpusched.core.sweep.running.session import SweepSession
from airflow_provider_gpusched.core.sweep.running.trial_run import EXIT_USAGE, EXIT_WRITE_FAILED, Manifest, run_trial
from airflow_provider_gpusched.core.sweep.searches.optuna import SPEC_FILE


def run_worker(manifest: Manifest, name: str, max_trials: int | None = None) -> int:
    """Ask, run, tell, until no trial is left; see the module's docstring."""
    path = os.path.join(manifest.store.dir, "search", SPEC_FILE)
    try:
        with open(path, "rb") as fh:
            spec = pickle.load(fh)
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError) as exc:
        raise GpuschedError(
            f"worker {name}: cannot read the search's spec {path} ({exc}); a run's plan writes it"
        ) from None
    searching = AsyncRun(SweepSession(spec, manifest.record.root), manifest.record.run, manifest.record.force_rerun)
    code = ran = 0
    while (max_trials is None or ran < max_trials) and (trial := searching.next_trial(name, resume=True)):
        ran += 1
        rc = run_trial(manifest, trial)
        state = searching.finish(trial)
        if rc != 0 and state not in ("succeeded", "pruned"):
            code = rc
    return code


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) not in (2, 3) or not args[1].strip() or (len(args) == 3 and not args[2].isdigit()):
        print(
            "usage: python -m airflow_provider_gpusched.core.sweep.running.worker MANIFEST NAME [MAX_TRIALS]",
            file=sys.stderr,
        )
        return EXIT_USAGE
    job = os.environ.get("SLURM_JOB_ID", "")
    if os.environ.get("SLURM_ARRAY_TASK_ID"):
        job = f"{os.environ.get('SLURM_ARRAY_JOB_ID', job)}_{os.environ['SLURM_ARRAY_TASK_ID']}"
    name = f"{args[1]} (Slurm job {job})" if job else args[1]
    try:
        return run_worker(Manifest(args[0]), name, int(args[2]) if len(args) == 3 else None)
    except GpuschedError as exc:
        print(f"gpusched worker: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as exc:  # a full disk or a quota under the results root: say which file, no traceback
        print(f"gpusched worker: cannot write {exc.filename or 'a file'}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_WRITE_FAILED


if __name__ == "__main__":
    sys.exit(main())
