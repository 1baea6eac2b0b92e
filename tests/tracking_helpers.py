"""A sweep folder written through the real trial store, for the tracking tests: trials that start, report and end
as a sweep's trial runner records them (core/sweep/store.py), without running anything."""

from __future__ import annotations

import json
import os

from airflow_provider_gpusched.core.sweep.reports import REPORTS_FILE
from airflow_provider_gpusched.core.sweep.session import SweepSession
from airflow_provider_gpusched.core.sweep.spec import SweepSpec
from airflow_provider_gpusched.core.tracking import SweepRun


class FakeSweep:
    """A grid of ``lrs`` trials in ``root``; ``report``/``finish`` write what a trial runner writes."""

    def __init__(self, root, name="trk", lrs=(0.1, 0.01, 0.001), tracking=None, run="run-1"):
        self.spec = SweepSpec(
            name=name,
            command=["true"],
            test_config=[{"lr": list(lrs), "opt": ["sgd"]}],
            objective={"metric": "acc", "mode": "maximize"},
            tracking=tracking,
        )
        self.session = SweepSession(self.spec, str(root))
        self.store = self.session.store
        self.run = run
        self.manifest = self.session.prepare(None, None, run=run)
        self.trials = self.manifest.trials

    def start(self, i):
        return self.store.mark_running(self.trials[i], run=self.run, log=None)

    def report(self, i, step, **metrics):
        folder = self.store.trial_dir(self.trials[i])
        with open(os.path.join(folder, REPORTS_FILE), "a") as fh:
            fh.write(json.dumps({"step": step, **metrics}) + "\n")

    def finish(self, i, state="succeeded", result=None, output="trained\n"):
        folder = self.store.trial_dir(self.trials[i])
        with open(os.path.join(folder, "output.log"), "w") as fh:
            fh.write(output)
        self.store.mark_finished(
            self.trials[i],
            ok=state == "succeeded",
            state=state,
            result=result,
            error=None if state == "succeeded" else "x",
        )

    def run_all(self, steps=3):
        for i in range(len(self.trials)):
            self.start(i)
            for s in range(steps):
                self.report(i, s, loss=1.0 / (s + 1 + i), acc=0.5 + 0.1 * s)
            self.finish(i, result={"acc": 0.7 + 0.05 * i, "extra": {"flops": 10 * (i + 1)}})

    def sweep_run(self, dag_id="dag-1"):
        return SweepRun(
            sweep=self.spec.name,
            run=self.run,
            folder=self.store.dir,
            search=self.spec.search,
            objective=self.spec.objective.to_dict(),
            dag_id=dag_id,
        )

    def summary(self):
        summary = self.session.collect(self.run)
        summary.pop("text")
        return summary
