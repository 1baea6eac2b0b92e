"""A sweep folder written through the real trial store, for the tracking tests: trials that start, report and end
as a sweep's trial runner records them (core/sweep/records/store.py), without running anything."""

from __future__ import annotations

import json
import os

from airflow_provider_gpusched.core.sweep.definition.sweep_spec import SweepSpec
from airflow_provider_gpusched.core.sweep.records.reports import REPORTS_FILE
from airflow_provider_gpusched.core.sweep.running.session import SweepSession
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


def read_wandb_run(path):
    """The records of a W&B run file (``run-<id>.wandb``), read with W&B's own protocol buffers: the file is
    LevelDB's log format (32 KiB blocks of records, each with a 7-byte header: CRC, length, type) after W&B's 7-byte
    header (``:W&B``, magic 0xBEE1, version). Returns {"config", "history": [(step, {key: value})], "summary", "exit"}."""
    import struct

    from wandb.proto import wandb_internal_pb2

    with open(path, "rb") as fh:
        data = fh.read()
    ident, magic, _version = struct.unpack("<4sHB", data[:7])
    assert ident == b":W&B" and magic == 0xBEE1, path
    block, pos, records, partial = 32768, 7, [], b""
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:  # the rest of a block too small for a header is padding
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        chunk = data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind == 0 and length == 0:
            continue
        if kind == 1:  # FULL
            records.append(chunk)
        elif kind == 2:  # FIRST
            partial = chunk
        elif kind == 3:  # MIDDLE
            partial += chunk
        elif kind == 4:  # LAST
            records.append(partial + chunk)
    out = {"config": {}, "history": [], "summary": {}, "exit": None, "run": None}
    for raw in records:
        record = wandb_internal_pb2.Record()
        record.ParseFromString(raw)
        which = record.WhichOneof("record_type")
        if which == "run":
            out["run"] = record.run
            for item in record.run.config.update:
                out["config"][item.key] = json.loads(item.value_json)
        elif which == "config":
            for item in record.config.update:
                out["config"][item.key] = json.loads(item.value_json)
        elif which == "history":
            items = {("/".join(i.nested_key) or i.key): json.loads(i.value_json) for i in record.history.item}
            out["history"].append((record.history.step.num, items))
        elif which == "summary":
            for item in record.summary.update:
                out["summary"][("/".join(item.nested_key) or item.key)] = json.loads(item.value_json)
        elif which == "exit":
            out["exit"] = record.exit.exit_code
    return out
