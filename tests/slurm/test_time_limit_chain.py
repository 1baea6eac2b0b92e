"""Time-limit chains on the real test cluster (core/slurm/chain.py): jobs with a 1-minute limit, signalled 10 s
before it (slurmctld sends the signal at its 30-second check, so 10-40 s before), requeued from their checkpoints.

The scenarios run at once (each job sleeps; they share the cluster's 16 CPUs), then each test reads its job's end:
a command that checkpoints on the signal, one that ignores the signal but checkpoints on its own, a hung one, one
that runs out of requeues, and one cancelled in its second segment. Three of them run through slurmrestd too
(``-rest``): there the chain's wrapper signals the batch shell itself (slurmrestd 22.05 refuses ``--signal=B:``)."""

import json
import sys
import time
from itertools import pairwise

import pytest

from airflow_provider_gpusched.core import pyfunc
from airflow_provider_gpusched.core.pyfunc import Checkpointable
from airflow_provider_gpusched.core.slurm import JobPhase, SlurmClient, SlurmTransport, client_for
from airflow_provider_gpusched.core.slurm.chain import read_chain
from airflow_provider_gpusched.core.slurm.job import SlurmJobSpec

from .conftest import make_transport

pytestmark = pytest.mark.slurm

#: a step a second up to argv[2] steps, its count kept in the checkpoint file; mode "signal" saves and exits on the
#: chain's signal, "ignore" ignores it and saves every 3 steps, "hang" ignores it and never saves
WORK = r"""
import json, os, signal, sys, time
mode, total = sys.argv[1], int(sys.argv[2])
ck = os.environ["GPUSCHED_CHAIN_CHECKPOINT"]
stop = []
sig = getattr(signal, "SIG" + os.environ["GPUSCHED_CHAIN_SIGNAL"])
signal.signal(sig, (lambda *a: stop.append(1)) if mode == "signal" else signal.SIG_IGN)
done = json.load(open(ck))["done"] if os.path.exists(ck) else 0
print("segment", os.environ["GPUSCHED_CHAIN_SEGMENT"], "of", int(os.environ["GPUSCHED_CHAIN_MAX_REQUEUES"]) + 1,
      "from step", done, flush=True)

def save():
    with open(ck + ".tmp", "w") as fh:
        json.dump({"done": done}, fh)
    os.replace(ck + ".tmp", ck)

while done < total:
    time.sleep(1)
    if mode == "hang":
        continue
    done += 1
    if mode == "ignore" and done % 3 == 0:
        save()
    if stop:
        save()
        print("saved at step", done, flush=True)
        sys.exit(143)
save()
print("finished at step", done, flush=True)
"""


class Steps(Checkpointable):
    """A Python callable the chain continues through its checkpoint method (submitit's contract): the step count
    is its state, pickled with it when the signal comes (Checkpointable's default checkpoint)."""

    def __init__(self, total: int) -> None:
        self.total, self.done, self.segments = total, 0, []

    def __call__(self) -> dict:
        import os

        self.segments.append((int(os.environ["GPUSCHED_CHAIN_SEGMENT"]), self.done))
        while self.done < self.total:
            time.sleep(1)
            self.done += 1
        return {"done": self.done, "segments": self.segments}


CHAIN = {"signal_delay": 10}
#: (mode, steps, max_requeues): the work of each scenario
SCENARIOS = {
    "continues": ("signal", 55, 3),  # more than one segment's 20-50 s
    "ignores": ("ignore", 55, 3),
    "hangs": ("hang", 1000, 3),
    "runs-out": ("signal", 1000, 1),
    "cancelled": ("signal", 1000, 3),
    "array": ("signal", 55, 3),  # two array tasks, each its own chain
}
#: scenarios submitted (and cancelled) through slurmrestd, as the CLI one they are named after
REST_SCENARIOS = ("continues", "array", "cancelled")
SCENARIOS.update({f"{name}-rest": SCENARIOS[name] for name in REST_SCENARIOS})


@pytest.fixture(scope="module")
def chains(slurm_cluster, slurm_rest, tmp_path_factory):
    """Every scenario's job, submitted at once and waited for: name -> (job id, final status, folder)."""
    client = SlurmClient(SlurmTransport(slurm_conf=slurm_cluster))
    rest = client_for(make_transport("rest", slurm_cluster, slurm_rest))

    def client_of(name: str) -> SlurmClient:
        return rest if name.endswith("-rest") else client

    root = tmp_path_factory.mktemp("chains")
    jobs = {}
    for name, (mode, steps, requeues) in SCENARIOS.items():
        folder = root / name
        folder.mkdir(mode=0o700)
        array = name.startswith("array")
        spec = SlurmJobSpec(
            command=[sys.executable, "-c", WORK, mode, str(steps)],
            job_name=f"chain-{name}",
            time_limit=1,
            array="0-1" if array else None,
            output=str(folder / ("%A_%a.out" if array else "%j.out")),
            time_limit_chain={
                **CHAIN,
                "checkpoint": str(folder / ("ck-%a.json" if array else "ck.json")),
                "max_requeues": requeues,
            },
            chain_records=str(folder),
        )
        jobs[name] = (client_of(name).submit(spec).job_id, folder)
    folder = root / "python-hook"  # a Python call continued by its checkpoint method
    folder.mkdir(mode=0o700)
    call = pyfunc.write_call(str(folder / "call"), Steps(55))
    spec = SlurmJobSpec(
        command=[sys.executable, "-m", "airflow_provider_gpusched.core.pyfunc", str(folder / "call")],
        job_name="chain-python-hook",
        time_limit=1,
        output=str(folder / "%j.out"),
        time_limit_chain={**CHAIN, "checkpoint": call},
        chain_records=str(folder),
    )
    jobs["python-hook"] = (client.submit(spec).job_id, folder)

    def second_segment_running(name: str) -> bool:
        job_id, folder = jobs[name]
        segments, _ = read_chain(client, str(folder), [job_id])
        return len(segments) >= 2 and segments[-1].ended is None

    deadline = time.monotonic() + 240
    cancelled_at = {}
    while len(cancelled_at) < 2:
        for name in ("cancelled", "cancelled-rest"):
            if name not in cancelled_at and second_segment_running(name):
                client_of(name).cancel([jobs[name][0]])
                cancelled_at[name] = time.time()
        assert time.monotonic() < deadline, f"a cancelled scenario never started its second segment: {cancelled_at}"
        time.sleep(1)
    finals = {
        name: client_of(name).wait(
            job_id, poll_interval=2, timeout=600, array_size=2 if name.startswith("array") else None
        )
        for name, (job_id, _) in jobs.items()
    }
    time.sleep(max(0.0, max(cancelled_at.values()) + 45 - time.time()))  # past a hand-over: nothing started it again
    return {
        name: (job_id, finals[name], folder, client_of(name).status(job_id), cancelled_at.get(name))
        for name, (job_id, folder) in jobs.items()
    }


def segments_of(client_conf, chains, name):
    job_id, _status, folder, _now, _at = chains[name]
    segments, problems = read_chain(SlurmClient(SlurmTransport(slurm_conf=client_conf)), str(folder), [job_id])
    assert not problems
    return segments


def output_of(chains, name):
    job_id, _status, folder, _now, _at = chains[name]
    return (folder / f"{job_id}.out").read_text()


def steps_done(chains, name):
    return json.loads((chains[name][2] / "ck.json").read_text())["done"]


@pytest.mark.parametrize("name", ["continues", "continues-rest"])
def test_a_command_goes_on_from_its_checkpoint_in_one_job_until_its_work_is_done(slurm_cluster, chains, name):
    job_id, status, _folder, _now, _at = chains[name]
    assert status.phase is JobPhase.SUCCEEDED, status.describe()
    segments = segments_of(slurm_cluster, chains, name)
    assert len(segments) >= 2, segments  # 55 s of work; a segment gets at most 50 s of its minute
    assert [s.segment for s in segments] == list(range(1, len(segments) + 1))
    assert all(s.outcome == "requeued" for s in segments[:-1]) and segments[-1].outcome == "completed"
    assert all(s.job == job_id and s.node and s.started <= s.ended for s in segments)
    assert all(s.signalled is not None and s.started < s.signalled <= s.ended for s in segments[:-1])
    assert status.restarts == len(segments) - 1  # one job id, requeued
    assert steps_done(chains, name) == 55
    out = output_of(chains, name)
    # each segment went on where the one before saved, and said so
    starts = [int(line.rsplit(" ", 1)[1]) for line in out.splitlines() if line.startswith("segment ")]
    saves = [int(line.rsplit(" ", 1)[1]) for line in out.splitlines() if line.startswith("saved at step")]
    assert starts == [0, *saves] and len(starts) == len(segments)
    assert out.count("[gpusched chain] segment") == 2 * len(segments)
    assert "finished at step 55" in out
    if name.endswith("-rest"):  # the wrapper signalled the batch shell itself, at the job's end time less 10 s
        assert out.count("[gpusched chain] SIGUSR1 will come at") == len(segments)


def test_a_job_that_ignores_the_signal_is_stopped_and_continued_from_its_own_checkpoint(slurm_cluster, chains):
    _job_id, status, _folder, _now, _at = chains["ignores"]
    assert status.phase is JobPhase.SUCCEEDED, status.describe()
    segments = segments_of(slurm_cluster, chains, "ignores")
    assert len(segments) >= 2 and segments[-1].outcome == "completed"
    for segment in segments[:-1]:
        assert segment.outcome == "requeued" and "it ignored the signal and was stopped" in segment.detail
        assert segment.ended - segment.signalled >= 5  # its grace (signal_delay - 5 s) was waited out
    assert steps_done(chains, "ignores") == 55


def test_a_hung_job_ends_the_chain_for_lack_of_progress(slurm_cluster, chains):
    _job_id, status, folder, _now, _at = chains["hangs"]
    assert status.phase is JobPhase.FAILED, status.describe()
    [segment] = segments_of(slurm_cluster, chains, "hangs")
    assert segment.outcome == "no-progress"
    assert segment.detail.startswith(f"no progress: no newer checkpoint at {folder / 'ck.json'} since the segment")
    assert "it ignored the signal and was stopped" in segment.detail
    assert status.restarts == 0


def test_a_chain_out_of_requeues_fails_saying_so(slurm_cluster, chains):
    _job_id, status, _folder, _now, _at = chains["runs-out"]
    assert status.phase is JobPhase.FAILED, status.describe()
    segments = segments_of(slurm_cluster, chains, "runs-out")
    assert [s.outcome for s in segments] == ["requeued", "out-of-requeues"]
    assert "out of requeues: the time limit came after 1 requeue(s) (max_requeues=1)" in segments[-1].detail
    assert status.restarts == 1


@pytest.mark.parametrize("name", ["cancelled", "cancelled-rest"])
def test_cancelling_a_chain_stops_its_segment_and_nothing_starts_it_again(slurm_cluster, chains, name):
    _job_id, status, _folder, now, cancelled_at = chains[name]
    assert status.phase is JobPhase.CANCELLED, status.describe()
    assert now.phase is JobPhase.CANCELLED  # 45 s after the cancel: not requeued
    segments = segments_of(slurm_cluster, chains, name)
    assert len(segments) == 2 and segments[0].outcome == "requeued"
    assert segments[1].outcome in ("stopped", None)  # SIGTERM said so, or the kill came first
    assert all(s.started < cancelled_at for s in segments)


@pytest.mark.parametrize("name", ["array", "array-rest"])
def test_each_array_task_is_its_own_chain(slurm_cluster, chains, name):
    job_id, status, folder, _now, _at = chains[name]
    assert status.phase is JobPhase.SUCCEEDED, status.describe()
    keys = [f"{job_id}_0", f"{job_id}_1"]
    assert sorted(status.tasks) == keys
    segments, problems = read_chain(SlurmClient(SlurmTransport(slurm_conf=slurm_cluster)), str(folder), keys)
    assert not problems
    for task, key in enumerate(keys):
        mine = [s for s in segments if s.job == key]
        assert len(mine) >= 2 and mine[-1].outcome == "completed", mine
        assert all(s.outcome == "requeued" for s in mine[:-1])
        assert json.loads((folder / f"ck-{task}.json").read_text())["done"] == 55  # %a: each task's own checkpoint
        assert "finished at step 55" in (folder / f"{key}.out").read_text()


def test_a_python_callable_is_continued_from_the_call_its_checkpoint_method_returns(slurm_cluster, chains):
    job_id, status, folder, _now, _at = chains["python-hook"]
    assert status.phase is JobPhase.SUCCEEDED, status.describe()
    segments = segments_of(slurm_cluster, chains, "python-hook")
    assert len(segments) >= 2 and segments[-1].outcome == "completed"
    outcome = pyfunc.read_outcome(str(folder / "call"))
    assert outcome.finished and outcome.value["done"] == 55
    # every segment began where the pickled state of the one before left off
    starts = outcome.value["segments"]
    assert [n for n, _ in starts] == list(range(1, len(segments) + 1))
    assert starts[0][1] == 0 and all(b > a for (_, a), (_, b) in pairwise(starts))
    assert "[gpusched] checkpoint: the next segment calls" in (folder / f"{job_id}.out").read_text()
