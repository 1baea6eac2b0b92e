"""Benchmark: a lab shared by three groups, under three policies, on one SIMULATED fleet (time-compressed trace).

The fleet: three hosts of 8 GPUs (24 GPUs). The groups and their quotas (docs/quotas.md):

  vision    12 GPUs, weight 2   a 400-trial sweep at hour 0, a deadline burst of 2-GPU jobs at hour 12
  nlp        8 GPUs, weight 1   long 4-GPU training runs (6-10 h), four at hour 2, four more at hour 9
  robotics   4 GPUs, weight 1   a burst of short 1-GPU jobs every 3 hours, and its own small sweep at hour 15

Three policies replay the same 30 hours of arrivals (seeded), event by event in virtual time:

  static     today's static pools: each group owns a fixed slice of the hosts equal to its quota, nothing lent
  fifo       one queue for everybody, first come first served, any job that fits starts (work-conserving)
  quotas     this provider's quotas with borrowing and reclaim: the rules of core/quota/policy.py themselves
             (admit, borrowed_ids, reclaim_order), borrowed work preempted when its lender needs its quota back,
             losing what it did since its last checkpoint (every 10 minutes) and relaunching 60 s later

Reported per group: the mean and p95 wait from arrival to start, and "waited under quota": GPU-hours that a group's
jobs spent waiting while the job would have fitted in the group's quota and another group held more than its own
(the guarantee: 0 for quotas), when some host could make room by reclaiming; "(fragmented)": the same wait when no
single host could, even with every borrowed lease on it gone (a 2-GPU job, one GPU free here, one borrowed there). Per policy: fleet utilisation (GPU-hours held /
available, until the last job ends; and over the time some job waited to start, when an idle GPU is a loss),
GPU-hours lost to preemption, and Jain's fairness index over what each group received against what it was entitled to (its quota,
then the surplus by weight, among groups with work: core/quota/policy.fair_shares, integrated over time).

    .venv/bin/python bench/fair_share.py [--seed 1] [--policies static,fifo,quotas]

No GPU, no Airflow: the admission rules run as they do on the hosts, placement is first-fit by host.
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import platform
import random
import statistics
import time
from dataclasses import dataclass, field

from airflow_provider_gpusched.core.quota.config import QuotaConfig
from airflow_provider_gpusched.core.quota.policy import (
    Claim,
    Waiter,
    admit,
    fair_shares,
    jain_index,
    reclaim_order,
)

HOSTS = {"host1": 8, "host2": 8, "host3": 8}
CAPACITY = float(sum(HOSTS.values()))
QUOTAS = QuotaConfig.from_dict(
    {
        "groups": {
            "vision": {"quota": 12, "weight": 2},
            "nlp": {"quota": 8},
            "robotics": {"quota": 4},
        }
    },
    "bench quotas",
)
#: the static pools: each group's own slice of the hosts, its quota's worth
STATIC = {"vision": {"host1": 8, "host2": 4}, "nlp": {"host2": 4, "host3": 4}, "robotics": {"host3": 4}}
CHECKPOINT_EVERY = 600.0
RELAUNCH_AFTER = 60.0
HOUR = 3600.0


@dataclass
class Job:
    jid: int
    group: str
    gpus: int
    work: float  # seconds of work left
    arrival: float
    priority: int = 0
    started: float | None = None  # first start
    run_start: float = 0.0  # start of the current run
    done_at: float = 0.0  # checkpointed progress of the current run is counted from here
    host: str = ""
    not_before: float = 0.0
    preemptions: int = 0
    lost: float = 0.0
    waits: list[float] = field(default_factory=list)
    queued_at: float = 0.0


def trace(seed: int) -> list[Job]:
    rng = random.Random(seed)
    jobs: list[Job] = []
    ids = itertools.count()

    def add(group: str, gpus: int, work: float, at: float) -> None:
        jobs.append(Job(next(ids), group, gpus, work, at, queued_at=at))

    for _ in range(400):  # vision's sweep: 400 one-GPU trials of 15-45 minutes, all at once
        add("vision", 1, rng.uniform(15, 45) * 60, rng.uniform(0, 300))
    for _ in range(40):  # vision's deadline burst: 2-GPU runs of about an hour
        add("vision", 2, rng.uniform(40, 80) * 60, 12 * HOUR + rng.uniform(0, 1800))
    for start in (2 * HOUR, 9 * HOUR):  # nlp's long runs
        for _ in range(4):
            add("nlp", 4, rng.uniform(6, 10) * HOUR, start + rng.uniform(0, 600))
    for k in range(10):  # robotics: a burst every 3 hours
        for _ in range(8):
            add("robotics", 1, rng.uniform(20, 40) * 60, k * 3 * HOUR + 1800 + rng.uniform(0, 300))
    for _ in range(60):  # robotics' own sweep
        add("robotics", 1, rng.uniform(10, 30) * 60, 15 * HOUR + rng.uniform(0, 600))
    return sorted(jobs, key=lambda j: (j.arrival, j.jid))


class Fleet:
    """Free GPUs per host, and who runs where."""

    def __init__(self, hosts: dict[str, int]) -> None:
        self.size = dict(hosts)
        self.free = dict(hosts)

    def fit(self, gpus: int) -> str:
        for host in sorted(self.free, key=lambda h: (self.free[h], h)):  # best fit: the fullest host that holds it
            if self.free[host] >= gpus:
                return host
        return ""


class Sim:
    def __init__(self, policy: str, jobs: list[Job]) -> None:
        self.policy = policy
        self.jobs = jobs
        self.now = 0.0
        self.running: dict[int, Job] = {}
        self.waiting: list[Job] = []
        self.events: list[tuple[float, int, str, int]] = []
        self.seq = itertools.count()
        if policy == "static":
            self.fleets = {g: Fleet(hosts) for g, hosts in STATIC.items()}
        else:
            shared = Fleet(HOSTS)
            self.fleets = {g: shared for g in QUOTAS.groups}
        self.busy_gpu_s = 0.0
        self.lost_gpu_s = 0.0
        self.received = {g: 0.0 for g in QUOTAS.groups}
        self.entitled = {g: 0.0 for g in QUOTAS.groups}
        self.under_quota_wait = {g: 0.0 for g in QUOTAS.groups}
        self.fragmented_wait = {g: 0.0 for g in QUOTAS.groups}
        self.end = 0.0
        self.preemptions = 0
        self.contended_s = 0.0
        self.contended_busy_gpu_s = 0.0

    # -- accounting between events ----------------------------------------------------------------------
    def advance(self, to: float) -> None:
        dt = to - self.now
        if dt <= 0:
            return
        use = {g: 0.0 for g in QUOTAS.groups}
        for j in self.running.values():
            use[j.group] += j.gpus
        demand = dict(use)
        over = {g for g in use if use[g] > QUOTAS.quota(g, CAPACITY)}
        placeable: dict[tuple[str, int], bool] = {}
        for j in self.waiting:
            demand[j.group] += j.gpus
            if (
                use[j.group] + j.gpus <= QUOTAS.quota(j.group, CAPACITY)
                and j.not_before <= self.now
                and over - {j.group}
            ):  # it would fit in its quota, and another group holds more than its own
                key = (j.group, j.gpus)
                if key not in placeable:
                    placeable[key] = self.room_by_reclaim(j)
                if placeable[key]:
                    self.under_quota_wait[j.group] += j.gpus * dt
                else:  # no one host has the GPUs, even with every borrowed lease on it gone
                    self.fragmented_wait[j.group] += j.gpus * dt
        if any(j.not_before <= self.now for j in self.waiting):  # work waits: every idle GPU is a loss
            self.contended_s += dt
            self.contended_busy_gpu_s += sum(use.values()) * dt
        shares = fair_shares(QUOTAS, CAPACITY, demand)
        for g in QUOTAS.groups:
            self.received[g] += use[g] * dt
            self.entitled[g] += shares[g] * dt
        self.busy_gpu_s += sum(use.values()) * dt
        self.now = to

    # -- running ----------------------------------------------------------------------------------------
    def start(self, job: Job, host: str) -> None:
        fleet = self.fleets[job.group]
        fleet.free[host] -= job.gpus
        job.host, job.run_start, job.done_at = host, self.now, self.now
        if job.started is None:
            job.started = self.now
        job.waits.append(self.now - job.queued_at)
        self.running[job.jid] = job
        self.waiting.remove(job)
        heapq.heappush(self.events, (self.now + job.work, next(self.seq), "end", job.jid))

    def stop(self, job: Job) -> None:
        """Reclaimed: it keeps what it checkpointed, loses the rest, and waits to relaunch."""
        ran = self.now - job.run_start
        kept = (ran // CHECKPOINT_EVERY) * CHECKPOINT_EVERY
        job.work -= kept
        lost = (ran - kept) * job.gpus
        job.lost += lost
        self.lost_gpu_s += lost
        job.preemptions += 1
        self.preemptions += 1
        self.fleets[job.group].free[job.host] += job.gpus
        del self.running[job.jid]
        job.not_before = self.now + RELAUNCH_AFTER
        job.queued_at = self.now
        self.waiting.append(job)
        heapq.heappush(self.events, (job.not_before, next(self.seq), "wake", job.jid))

    def finish(self, job: Job) -> None:
        self.fleets[job.group].free[job.host] += job.gpus
        del self.running[job.jid]
        self.end = max(self.end, self.now)

    # -- the policies -------------------------------------------------------------------------------------
    def schedule(self) -> None:
        if self.policy == "quotas":
            self.schedule_quotas()
            return
        for job in sorted(self.waiting, key=lambda j: (j.queued_at, j.jid)):  # FIFO, first fit
            if job.not_before > self.now:
                continue
            host = self.fleets[job.group].fit(job.gpus)
            if host:
                self.start(job, host)

    def claims(self) -> list[Claim]:
        return [
            Claim(f"{j.jid:016x}", j.host, j.group, float(j.gpus), j.run_start, j.priority, str(j.jid), 1e18)
            for j in self.running.values()
        ]

    def schedule_quotas(self) -> None:
        fleet = self.fleets["vision"]
        while True:
            ready = sorted((j for j in self.waiting if j.not_before <= self.now), key=lambda j: (j.queued_at, j.jid))
            claims = self.claims()
            use = {g: 0.0 for g in QUOTAS.groups}
            for c in claims:
                use[c.group] += c.amount
            waiters = [
                Waiter(
                    str(j.jid),
                    "fleet",
                    j.group,
                    float(j.gpus),
                    "quota" if use[j.group] + j.gpus <= QUOTAS.quota(j.group, CAPACITY) else "borrow",
                    j.queued_at,
                    1e18,
                )
                for j in ready
            ]
            progressed = False
            for job in ready:
                verdict = admit(
                    QUOTAS,
                    CAPACITY,
                    claims,
                    waiters,
                    group=job.group,
                    amount=float(job.gpus),
                    host="fleet",
                    owner=str(job.jid),
                )
                if verdict.kind == "wait":
                    continue
                host = fleet.fit(job.gpus)
                if host:
                    self.start(job, host)
                    progressed = True
                    break
                if verdict.kind == "quota" and self.reclaim_for(job, claims):
                    progressed = True
                    break
            if not progressed:
                return

    def room_by_reclaim(self, job: Job) -> bool:
        """Whether one host has room for ``job`` once the work there that others borrow is gone."""
        fleet, claims = self.fleets[job.group], self.claims()
        for host in fleet.size:
            mine, _ = reclaim_order(QUOTAS, CAPACITY, claims, group=job.group, host=host, now=self.now)
            if fleet.free[host] + sum(c.amount for c in mine) >= job.gpus:
                return True
        return False

    def reclaim_for(self, job: Job, claims: list[Claim]) -> bool:
        """Preempt borrowed work on the one host where it (and what is free there) makes room, newest first."""
        fleet = self.fleets[job.group]
        for host in sorted(fleet.size):
            mine, _young = reclaim_order(QUOTAS, CAPACITY, claims, group=job.group, host=host, now=self.now)
            room, chosen = fleet.free[host], []
            for c in mine:
                if room >= job.gpus:
                    break
                chosen.append(c)
                room += c.amount
            if room >= job.gpus:
                for c in chosen:
                    self.stop(self.running[int(c.lease_id, 16)])
                host_now = fleet.fit(job.gpus)
                self.start(job, host_now)
                return True
        return False

    def run(self) -> Sim:
        for job in self.jobs:
            heapq.heappush(self.events, (job.arrival, next(self.seq), "arrive", job.jid))
        by_id = {j.jid: j for j in self.jobs}
        while self.events:
            at, _, kind, jid = heapq.heappop(self.events)
            self.advance(at)
            job = by_id[jid]
            if kind == "arrive":
                self.waiting.append(job)
            elif kind == "end" and jid in self.running and abs(job.run_start + job.work - at) < 1e-6:
                self.finish(job)
            # "wake": a relaunch may start now
            if self.events and self.events[0][0] == at:
                continue  # every event at this instant first, then one scheduling pass
            self.schedule()
        assert not self.waiting and not self.running, "jobs left over"
        return self


def pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def report(sims: dict[str, Sim]) -> None:
    print(f"fleet: {len(HOSTS)} hosts x 8 GPUs (SIMULATED); {sum(1 for _ in next(iter(sims.values())).jobs)} jobs")
    print(
        "quotas: "
        + ", ".join(f"{g} {QUOTAS.quota(g, CAPACITY):g} (weight {QUOTAS.weight(g):g})" for g in QUOTAS.groups)
    )
    print()
    print(
        f"{'policy':<8} {'group':<9} {'jobs':>5} {'wait mean':>10} {'wait p95':>9} {'waited under quota':>19}"
        f" {'(fragmented)':>13}"
    )
    for name, sim in sims.items():
        for g in QUOTAS.groups:
            waits = [sum(j.waits) for j in sim.jobs if j.group == g]
            print(
                f"{name:<8} {g:<9} {len(waits):>5} {statistics.mean(waits) / 60:>8.1f} m {pct(waits, 0.95) / 60:>7.1f} m"
                f" {sim.under_quota_wait[g] / HOUR:>13.2f} GPU-h {sim.fragmented_wait[g] / HOUR:>7.2f} GPU-h"
            )
    print()
    print(
        f"{'policy':<8} {'utilisation':>11} {'while work waits':>16} {'makespan':>9} {'lost to preemption':>19}"
        f" {'preemptions':>11} {'Jain':>6}"
    )
    for name, sim in sims.items():
        util = sim.busy_gpu_s / (CAPACITY * sim.end)
        busy_when_needed = sim.contended_busy_gpu_s / (CAPACITY * sim.contended_s) if sim.contended_s else 1.0
        x = [sim.received[g] / sim.entitled[g] for g in QUOTAS.groups if sim.entitled[g] > 0]
        print(
            f"{name:<8} {util * 100:>10.1f}% {busy_when_needed * 100:>15.1f}% {sim.end / HOUR:>7.1f} h"
            f" {sim.lost_gpu_s / HOUR:>13.1f} GPU-h {sim.preemptions:>11} {jain_index(x):>6.3f}"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--policies", default="static,fifo,quotas")
    args = parser.parse_args()
    print(
        f"{time.strftime('%Y-%m-%d')} on {platform.node()} ({platform.processor() or platform.machine()}), seed {args.seed}"
    )
    sims = {}
    for policy in args.policies.split(","):
        started = time.perf_counter()
        sims[policy] = Sim(policy, trace(args.seed)).run()
        print(f"{policy}: replayed in {time.perf_counter() - started:.1f} s")
    print()
    report(sims)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
