"""Benchmark: a time-limit chain's hand-over, gpusched next to submitit, on the same Slurm cluster in one run.

Each tool runs the same work as ``--jobs`` jobs with a 1-minute limit, signalled ``--delay`` seconds before it: a
loop of 1-second steps that saves its step count when the signal comes and goes on from it in the next segment,
until ``--steps`` steps are done. For every hand-over it records:

  signal      when the work learnt of the signal (gpusched: the chain's record; submitit: its checkpoint() call)
  saved       when the work's checkpoint was written
  requeued    when the segment ended with the requeue (gpusched's record; submitit: the job's requeue, read from
              Slurm's completion record)
  running     when the next segment's work began (its first line)

and prints the median (min-max) of signal -> saved, saved -> running and signal -> running. Slurm itself holds a
requeued job for its credential's lifetime (``AuthInfo=cred_expire``; the test cluster: 20 s, Slurm's default:
120 s), which both tools wait out.

    .venv/bin/python bench/slurm_chain.py [--jobs 3] [--steps 75] [--delay 10]

Needs the test cluster (scripts/slurm-cluster.sh up; SLURM_CONF) and, for the peer, submitit (the ``bench``
extra).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

from airflow_provider_gpusched.core.slurm import SlurmClient, SlurmTransport
from airflow_provider_gpusched.core.slurm.chain import read_chain
from airflow_provider_gpusched.core.slurm.job import SlurmJobSpec

#: gpusched's work: a command; the chain's wrapper tells it the checkpoint path and the signal
WORK = r"""
import json, os, signal, sys, time
ck, log, total = os.environ["GPUSCHED_CHAIN_CHECKPOINT"], sys.argv[1], int(sys.argv[2])
stop = []
signal.signal(getattr(signal, "SIG" + os.environ["GPUSCHED_CHAIN_SIGNAL"]), lambda *a: stop.append(time.time()))
done = json.load(open(ck))["done"] if os.path.exists(ck) else 0
with open(log, "a") as fh:
    fh.write(json.dumps({"event": "running", "at": time.time(), "done": done}) + "\n")
while done < total:
    time.sleep(1)
    done += 1
    if stop:
        with open(ck + ".tmp", "w") as fh:
            json.dump({"done": done}, fh)
        os.replace(ck + ".tmp", ck)
        with open(log, "a") as fh:
            fh.write(json.dumps({"event": "saved", "at": time.time(), "signal": stop[0]}) + "\n")
        sys.exit(143)
"""


class Steps:
    """submitit's work: the same loop as a Checkpointable callable (its state, the step count, travels in the
    pickle that submitit writes when it requeues)."""

    def __init__(self, total: int, log: str) -> None:
        self.total, self.log, self.done = total, log, 0

    def _note(self, **record: object) -> None:
        with open(self.log, "a") as fh:
            fh.write(json.dumps({**record, "at": time.time()}) + "\n")

    def __call__(self) -> int:
        self._note(event="running", done=self.done)
        while self.done < self.total:
            time.sleep(1)
            self.done += 1
        return self.done

    def checkpoint(self):  # submitit calls it in its signal handler, then requeues the job
        import submitit

        self._note(event="signal")
        again = Steps(self.total, self.log)
        again.done = self.done
        self._note(event="saved")
        return submitit.helpers.DelayedSubmission(again)


def events(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def run_gpusched(client: SlurmClient, args, work: Path) -> list[dict[str, float]]:
    jobs = []
    for i in range(args.jobs):
        folder = work / f"gpusched-{i}"
        folder.mkdir(mode=0o700)
        spec = SlurmJobSpec(
            command=[sys.executable, "-c", WORK, str(folder / "events.jsonl"), str(args.steps)],
            job_name=f"bench-chain-{i}",
            time_limit=1,
            output=str(folder / "%j.out"),
            time_limit_chain={"checkpoint": str(folder / "ck.json"), "signal_delay": args.delay, "max_requeues": 9},
            chain_records=str(folder),
        )
        jobs.append((client.submit(spec).job_id, folder))
    for job_id, _ in jobs:
        client.wait(job_id, poll_interval=2, timeout=1800)
    hand_overs = []
    for job_id, folder in jobs:
        segments, _ = read_chain(client, str(folder), [job_id])
        seen = events(folder / "events.jsonl")
        running = [e["at"] for e in seen if e["event"] == "running"]
        saved = [e for e in seen if e["event"] == "saved"]
        for n, segment in enumerate(segments[:-1]):
            if segment.outcome != "requeued" or n + 1 >= len(running) or n >= len(saved):
                continue
            hand_overs.append(
                {
                    "signal": saved[n]["signal"],
                    "saved": saved[n]["at"],
                    "requeued": segment.ended or saved[n]["at"],
                    "running": running[n + 1],
                }
            )
    return hand_overs


def run_submitit(args, work: Path) -> list[dict[str, float]]:
    import submitit

    executor = submitit.AutoExecutor(folder=str(work / "submitit" / "%j"), cluster="slurm")
    executor.update_parameters(timeout_min=1, slurm_signal_delay_s=args.delay, slurm_partition="batch", cpus_per_task=1)
    logs = [work / f"submitit-{i}.jsonl" for i in range(args.jobs)]
    jobs = [executor.submit(Steps(args.steps, str(log))) for log in logs]
    for job in jobs:
        job.result()
    hand_overs = []
    for log in logs:
        seen = events(log)
        running = [e["at"] for e in seen if e["event"] == "running"]
        signals = [e["at"] for e in seen if e["event"] == "signal"]
        saved = [e["at"] for e in seen if e["event"] == "saved"]
        for n in range(min(len(signals), len(saved), len(running) - 1)):
            hand_overs.append(
                {"signal": signals[n], "saved": saved[n], "requeued": saved[n], "running": running[n + 1]}
            )
    return hand_overs


def summary(label: str, hand_overs: list[dict[str, float]]) -> None:
    def phase(a: str, b: str) -> str:
        values = [h[b] - h[a] for h in hand_overs]
        if not values:
            return "-"
        return f"{statistics.median(values):.1f} s ({min(values):.1f}-{max(values):.1f})"

    print(
        f"| {label} | {len(hand_overs)} | {phase('signal', 'saved')} | {phase('saved', 'running')} | "
        f"{phase('signal', 'running')} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=75, help="1-second steps of work per job")
    parser.add_argument("--delay", type=int, default=10, help="seconds before the limit the signal comes")
    parser.add_argument("--skip-submitit", action="store_true")
    args = parser.parse_args()
    client = SlurmClient(SlurmTransport(slurm_conf=os.environ.get("SLURM_CONF")))
    auth = client.runner.run(["scontrol", "show", "config"]).stdout
    cred = next((line.split("=", 1)[1].strip() for line in auth.splitlines() if line.startswith("AuthInfo")), "?")
    print(f"{time.strftime('%Y-%m-%d')}, {platform.node()}, {os.cpu_count()} CPUs; Slurm AuthInfo: {cred}")
    print(f"{args.jobs} jobs per tool, {args.steps} steps of 1 s, time limit 1 min, signal {args.delay} s before it")
    with tempfile.TemporaryDirectory(prefix="bench-chain-", dir=os.environ.get("GPUSCHED_BENCH_DIR")) as tmp:
        work = Path(tmp)
        os.chmod(work, 0o700)
        results = {"gpusched": run_gpusched(client, args, work)}
        if not args.skip_submitit:
            results["submitit"] = run_submitit(args, work)
    print("\n| tool | hand-overs | signal -> saved | saved -> next segment running | signal -> next running |")
    print("|---|---:|---:|---:|---:|")
    for label, hand_overs in results.items():
        summary(label, hand_overs)


if __name__ == "__main__":
    main()
