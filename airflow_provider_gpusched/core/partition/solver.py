"""The optimal pipeline partition: minimise the bottleneck stage time (docs/partition.md has the model).

Search over the bottleneck value X (the optimum is one of the finitely many stage compute times or
link times), with an exact feasibility check for each X:

* **relaxed check** (host counts ignored): can layers 1..L be covered by stages of compute time <= X that
  fit in memory, with links <= X between consecutive stages? A reachability pass over (layer, type).
  Binary search with it gives a lower bound, and the schedule it finds there is optimal when it respects
  the host counts.
* **exact check**, respecting host counts. Types with at least as many hosts as layers cannot run out and
  are not counted. Where the remaining count space is small (up to 200,000 count vectors) the reachable
  count vectors of each (layer, type) are one bitset, in plain Python (``exact_dense``); beyond that, an
  integer program over the stages within X (``milp.py``, HiGHS), whose linear relaxation first raises the
  lower bound. Galloping search upward from the lower bound, then bisection.

With a time limit the search can stop with the best schedule found and the proven lower bound.
The reference enumerates every combination of per-type host counts for every layer.
"""

from __future__ import annotations

import bisect
import functools
import math
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_gpusched.core.partition import milp
from airflow_provider_gpusched.core.partition.bits import bit_positions
from airflow_provider_gpusched.core.partition.problem import MiB, Problem
from airflow_provider_gpusched.core.partition.types import CheckResult


@dataclass
class Stage:
    host: str
    device_type: str
    first: int
    last: int
    compute_s: float
    comm_s: float  # sending the last layer's output to the next stage (0 for the last stage)
    memory_bytes: float  # weights + buffers, as the fit rule counts them
    memory_limit_bytes: float

    @property
    def time_s(self) -> float:
        return max(self.compute_s, self.comm_s)

    def to_dict(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "device_type": self.device_type,
            "layers": [self.first, self.last],
            "compute_s": self.compute_s,
            "comm_s": self.comm_s,
            "time_s": self.time_s,
            "memory_bytes": self.memory_bytes,
            "memory_limit_bytes": self.memory_limit_bytes,
        }


@dataclass
class Schedule:
    stages: list[Stage] = field(default_factory=list)
    checks: int = 0  # feasibility checks the search made
    optimal: bool = True  # False: the time limit stopped the search before the optimum was proven
    lower_bound_s: float | None = None  # no schedule has a smaller bottleneck (proven)

    @property
    def gap(self) -> float | None:
        """How far the bottleneck may be above the optimum, as a fraction of the bottleneck (0 when optimal)."""
        bottleneck = self.bottleneck_s
        if bottleneck is None or self.lower_bound_s is None:
            return None
        return 0.0 if self.optimal else (bottleneck - self.lower_bound_s) / bottleneck

    @property
    def feasible(self) -> bool:
        return bool(self.stages)

    @property
    def bottleneck_s(self) -> float | None:
        return max(s.time_s for s in self.stages) if self.stages else None

    @property
    def bottleneck_stage(self) -> int | None:
        if not self.stages:
            return None
        return max(range(len(self.stages)), key=lambda i: self.stages[i].time_s)


class _Model:
    """Stage and link costs (types with at least one host only), in plain Python: SciPy (and numpy) are
    imported only by the integer program (milp.py), for host-count spaces too large to search densely."""

    def __init__(self, problem: Problem) -> None:
        self.p = problem
        self.types = [t for t in problem.types if t.hosts]
        L, T = problem.layers, len(self.types)
        self.L, self.T = L, T
        self.counts = [len(t.hosts) for t in self.types]
        out = [float(v) for v in problem.out_bytes]
        ins = ([float(problem.in_bytes_first)] + out[:-1]) if L else []
        self._mem_prefix = _prefix_sums(problem.mem_mb)
        # memory of stage s+1..r+1: weights + in-buffers (not for stage 1) + out-buffers + working
        self._in_part = [ins[s] * (1 + (problem.buffers_in if s > 0 else 0)) for s in range(L)]
        self._out_part = [o * (problem.buffers_out + 1) for o in out]
        self._time_prefix = [_prefix_sums(t.time_s) for t in self.types]
        bw = [t.bytes_per_second for t in self.types]
        self.link_bw = [[min(a, b) for b in bw] for a in bw]  # the slower end sets the speed
        # comm[j-1][a][b]: sending out(j) from a stage on type a to one on type b (a vanishing bandwidth
        # makes that link infinitely slow: inf is right)
        self.comm = [[[o / b if b else math.inf for b in row] for row in self.link_bw] for o in out]
        # fit_bits[k][s]: bit r+1 set for each stage s+1..r+1 that fits in type k's memory; the distinct
        # compute times of the stages that fit are the bottleneck candidates (with the link times)
        self._stage_times: set[float] = set()
        self.fit_bits = []
        mem_prefix, in_part, out_part = self._mem_prefix, self._in_part, self._out_part
        for t, prefix in zip(self.types, self._time_prefix, strict=True):
            limit = t.mem_mb * MiB
            per_start = []
            for s in range(L):
                bits, base, first_bytes, base_time = 0, mem_prefix[s], in_part[s], prefix[s]
                for r in range(s, L):  # the same sum, in the same order, as stage_memory()
                    without_out = (mem_prefix[r + 1] - base) * MiB + first_bytes
                    if without_out >= limit:  # sizes are >= 0: no longer stage from s fits either
                        break
                    if without_out + out_part[r] < limit:
                        bits |= 1 << (r + 1)
                        self._stage_times.add(prefix[r + 1] - base_time)
                per_start.append(bits)
            self.fit_bits.append(per_start)

    def stage_memory(self, s: int, r: int) -> float:
        """Bytes a stage of layers s+1..r+1 needs, as the fit rule counts them."""
        weights = (self._mem_prefix[r + 1] - self._mem_prefix[s]) * MiB
        return weights + self._in_part[s] + self._out_part[r]

    def comp(self, k: int, s: int, r: int) -> float:
        """Compute time of layers s+1..r+1 on type k."""
        prefix = self._time_prefix[k]
        return prefix[r + 1] - prefix[s]

    def fits(self, k: int, s: int, r: int) -> bool:
        return bool(self.fit_bits[k][s] >> (r + 1) & 1)

    def candidates(self) -> list[float]:
        values = set(self._stage_times)
        for row in self.comm[:-1]:
            for per_source in row:
                values.update(per_source)
        return sorted(values)

    def _link_ok(self, x: float) -> list[list[list[bool]]]:
        return [[[c <= x for c in per_source] for per_source in row] for row in self.comm]

    def _end_bits(self, x: float) -> list[list[int]]:
        """bits[k][s]: a bitset with bit r set for each last layer r (1-based) of a stage that starts at
        layer s+1 on type k and fits within x. Compute times grow with the stage (times are >= 0), so the
        stages within x are a prefix of the ends, and that prefix's end never moves back as the start moves
        on: one pass per type."""
        L = self.L
        bits = []
        for k in range(self.T):
            prefix, fit = self._time_prefix[k], self.fit_bits[k]
            per_start = []
            stop = 1  # the first end e (1-based) with prefix[e] - prefix[s] > x
            for s in range(L):
                base = prefix[s]
                if stop <= s:
                    stop = s + 1
                while stop <= L and prefix[stop] - base <= x:
                    stop += 1
                per_start.append(fit[s] & ((1 << stop) - 1))
            bits.append(per_start)
        return bits

    def relaxed_feasible(self, x: float) -> bool:
        """Ignoring host counts: can the layers be covered within x?"""
        return any(bits >> self.L & 1 for bits in self._relaxed_reach_bits(x))

    def relaxed_schedule(self, x: float) -> list[tuple[int, int, int]] | None:
        """A schedule within x found ignoring host counts (long stages, types with hosts to spare
        preferred), if it happens to respect the counts: then no exact search is needed."""
        L, T = self.L, self.T
        ends = self._end_bits(x)
        reach = self._relaxed_reach_bits(x, ends)
        if not any(reach[k] >> L & 1 for k in range(T)):
            return None
        link_ok = self._link_ok(x)
        left = list(self.counts)
        stages, end = [], L
        k = max((k for k in range(T) if reach[k] >> L & 1), key=lambda k: left[k])
        while True:
            left[k] -= 1
            if ends[k][0] >> end & 1:
                stages.append((k, 1, end))
                break
            for i in range(1, end):  # the longest stage that an earlier reachable state can precede
                if not ends[k][i] >> end & 1:
                    continue
                sources = [k0 for k0 in range(T) if reach[k0] >> i & 1 and link_ok[i - 1][k0][k]]
                if sources:
                    stages.append((k, i + 1, end))
                    end, k = i, max(sources, key=lambda k0: left[k0])
                    break
        return stages[::-1] if min(left) >= 0 else None

    def _relaxed_reach_bits(self, x: float, ends: list[list[int]] | None = None) -> list[int]:
        """Per type k, a bitset of the i such that layers 1..i can be covered within x with the last
        stage on type k (host counts ignored)."""
        L, T = self.L, self.T
        if ends is None:
            ends = self._end_bits(x)
        comm = self.comm
        reach = [ends[k][0] for k in range(T)]
        for i in range(1, L):
            sources = [k0 for k0 in range(T) if reach[k0] >> i & 1]
            if not sources:
                continue
            links = comm[i - 1]
            for k in range(T):
                if ends[k][i] and any(links[k0][k] <= x for k0 in sources):
                    reach[k] |= ends[k][i]
        return reach

    #: host-count grids up to this many cells are searched densely (every reachable count vector as a
    #: bit of one Python int per state); larger ones by an integer program (milp.py, HiGHS through SciPy)
    dense_cells = 200_000

    def limited_types(self) -> list[int]:
        """Types that can run out: only they are counted (one with as many hosts as layers never runs out)."""
        return [k for k in range(self.T) if self.counts[k] < self.L]

    def is_dense(self) -> bool:
        return math.prod(self.counts[k] + 1 for k in self.limited_types()) <= self.dense_cells

    def exact(self, x: float, deadline: float | None = None) -> CheckResult:
        """A schedule within x respecting host counts ([(type index, first, last)]), a proof that none
        exists, or (the integer program only, at the deadline) neither."""
        if self.is_dense():
            stages = self.exact_dense(x, self.limited_types())
            return CheckResult(stages, stages is None)
        return milp.check(self, x, deadline)

    def exact_dense(self, x: float, limited: list[int]) -> list[tuple[int, int, int]] | None:
        """Reachability over (layers done, type of the last stage, hosts used per limited type). Each
        (layers done, type) holds the reachable host-count vectors as one bitset (a Python int, bit n for the
        vector whose C-order index in the count grid is n): one more host of type k is a shift by that axis's
        stride, with the vectors already at k's count masked off first."""
        L, T = self.L, self.T
        end_bits = self._end_bits(x)
        comm = self.comm
        shape = tuple(self.counts[k] + 1 for k in limited)
        axis = {k: a for a, k in enumerate(limited)}
        strides, below_cap = _count_grid(shape)
        reach = [[0] * T for _ in range(L + 1)]
        for i in range(L):
            row = reach[i]
            if i:
                sources = [k0 for k0 in range(T) if row[k0]]
                if not sources:
                    continue
                links = comm[i - 1]
            merged: dict[tuple[int, ...], int] = {}  # the OR of the sources, once per source set
            for k2 in range(T):
                ends = end_bits[k2][i]
                if not ends:
                    continue
                if i == 0:
                    src = 1  # no hosts used yet
                else:
                    key = tuple(k0 for k0 in sources if links[k0][k2] <= x)
                    if not key:
                        continue
                    if key not in merged:
                        merged[key] = _or_all(row[k0] for k0 in key)
                    src = merged[key]
                if k2 in axis:  # one more host of type k2
                    a = axis[k2]
                    src = (src & below_cap[a]) << strides[a]
                    if not src:
                        continue
                for end in bit_positions(ends):
                    reach[end][k2] |= src
            if any(reach[L]):
                break
        if not any(reach[L]):
            return None
        # walk back: find a predecessor state for each stage
        k = next(k for k in range(T) if reach[L][k])
        cell = (reach[L][k] & -reach[L][k]).bit_length() - 1  # the lowest reachable count vector
        stages, end = [], L
        while True:
            prev = cell - strides[axis[k]] if k in axis else cell
            if end_bits[k][0] >> end & 1 and prev == 0:
                stages.append((k, 1, end))
                break
            for i in range(end - 1, 0, -1):
                if not end_bits[k][i] >> end & 1:
                    continue
                sources = [k0 for k0 in range(T) if comm[i - 1][k0][k] <= x and (reach[i][k0] >> prev) & 1]
                if sources:
                    stages.append((k, i + 1, end))
                    k, cell, end = sources[0], prev, i
                    break
            else:  # pragma: no cover - reach says a predecessor exists
                raise AssertionError("no predecessor found")
        return stages[::-1]


def partition(problem: Problem, *, time_limit: float | None = None) -> Schedule:
    """The schedule with the smallest bottleneck (empty when no schedule is feasible).

    With ``time_limit`` (seconds) the search stops there and returns the best schedule found, with
    ``optimal=False`` and the proven ``lower_bound_s`` (a bound below which no schedule exists), unless it
    finished in time. Every value below the search's ``lo`` has been refuted, which is what makes it a proof."""
    deadline = None if time_limit is None else time.monotonic() + time_limit
    model = _Model(problem)
    if problem.layers == 0 or model.T == 0:
        return Schedule()
    values = model.candidates()
    if not values or not model.relaxed_feasible(values[-1]):
        return Schedule(checks=1)
    lo, hi = 0, len(values) - 1  # relaxed: values[hi] feasible; find the first feasible
    checks = 1
    while lo < hi:
        mid = (lo + hi) // 2
        checks += 1
        if model.relaxed_feasible(values[mid]):
            hi = mid
        else:
            lo = mid + 1
    checks += 1
    easy = model.relaxed_schedule(values[lo])
    if easy is not None:  # the lower bound is reached with the hosts there are: optimal
        return _stages(model, easy, checks, values[lo])
    if not model.is_dense():  # the linear relaxation's bound: usually the optimum itself
        lo, solved = milp.lower_bound_index(model, values, lo, deadline)
        checks += solved
    # exact: gallop up from the bound, then bisect; a schedule found within values[i] has a bottleneck that
    # may be lower still, which moves the upper end down at once. `lo`: the first value not refuted.
    found, hi, timed_out = None, len(values), False

    def attempt(index: int) -> bool:
        """Check values[index]; False when the time ran out first."""
        nonlocal checks, found, hi, lo
        if deadline is not None and time.monotonic() >= deadline:
            return False
        checks += 1
        result = model.exact(values[index], deadline)
        if result.stages is not None:
            found, hi = result.stages, bisect.bisect_left(values, _bottleneck(model, result.stages))
        elif result.proven_infeasible:
            lo = index + 1
        else:
            return False
        return True

    step, index = 1, lo
    while found is None:
        if not attempt(index):
            timed_out = True
            break
        if found is not None or index == len(values) - 1:  # found, or even the largest value is refuted
            break
        index = min(len(values) - 1, index + step)
        step *= 2
    while not timed_out and found is not None and lo < hi:
        timed_out = not attempt((lo + hi) // 2)
    if found is None and timed_out:
        found = _any_schedule(model, values, lo)
        if found is not None:
            hi = bisect.bisect_left(values, _bottleneck(model, found))
    if found is None:
        return Schedule(checks=checks)
    optimal = lo >= hi
    return _stages(model, found, checks, _bottleneck(model, found) if optimal else values[lo], optimal=optimal)


def _any_schedule(model: _Model, values: list[float], lo: int) -> list[tuple[int, int, int]] | None:
    """Out of time with no schedule yet: a quick one, not proven optimal. The weighted-path heuristic at values
    galloping up from the bound; where that finds none up to the top, the exact check there (every stage
    that fits is allowed: rarely hard, though unbounded in time)."""
    index, step = lo, 1
    while index < len(values) - 1:
        found = milp.weighted_path(model, values[index])
        if found is not None:
            return found
        index = min(len(values) - 1, index + step)
        step *= 2
    return model.exact(values[-1]).stages


@functools.lru_cache(maxsize=16)
def _count_grid(shape: tuple[int, ...]) -> tuple[list[int], list[int]]:
    """For a count grid of this shape: each axis's stride in C order, and per axis the bitset of the
    vectors whose count on that axis is below its maximum (those that may take one more host)."""
    strides = [math.prod(shape[a + 1 :]) for a in range(len(shape))]
    total = math.prod(shape)
    below = []
    for size, stride in zip(shape, strides, strict=True):
        # in every run of size * stride vectors, the first (size - 1) * stride are below the maximum
        period = size * stride
        below.append(_repeat((1 << ((size - 1) * stride)) - 1, period, total // period))
    return strides, below


def _repeat(block: int, period: int, times: int) -> int:
    """``block`` placed ``times`` times, ``period`` bits apart (by doubling)."""
    result, offset, piece, width = 0, 0, block, period
    while times:
        if times & 1:
            result |= piece << offset
            offset += width
        piece |= piece << width
        width *= 2
        times >>= 1
    return result


def _prefix_sums(values: Iterable[float]) -> list[float]:
    sums, total = [0.0], 0.0
    for value in values:
        total += value
        sums.append(total)
    return sums


def _or_all(values: Iterable[int]) -> int:
    result = 0
    for value in values:
        result |= value
    return result


def _bottleneck(model: _Model, found: list[tuple[int, int, int]]) -> float:
    worst = 0.0
    for n, (k, first, last) in enumerate(found):
        worst = max(worst, model.comp(k, first - 1, last - 1))
        if n + 1 < len(found):
            worst = max(worst, model.comm[last - 1][k][found[n + 1][0]])
    return worst


def _stages(
    model: _Model, found: list[tuple[int, int, int]], checks: int, lower_bound_s: float, optimal: bool = True
) -> Schedule:
    used = [0] * model.T
    stages = []
    for n, (k, first, last) in enumerate(found):
        t = model.types[k]
        host = t.hosts[used[k]]
        used[k] += 1
        comm = 0.0
        if n + 1 < len(found):
            comm = model.comm[last - 1][k][found[n + 1][0]]
        stages.append(
            Stage(
                host=host,
                device_type=t.name,
                first=first,
                last=last,
                compute_s=model.comp(k, first - 1, last - 1),
                comm_s=comm,
                memory_bytes=model.stage_memory(first - 1, last - 1),
                memory_limit_bytes=t.mem_mb * MiB,
            )
        )
    return Schedule(stages, checks, optimal=optimal, lower_bound_s=lower_bound_s)


def check_schedule(problem: Problem, assignment: list[tuple[str, int, int]]) -> float:
    """Validate a schedule given as [(host, first, last)] and return its bottleneck; raise ValueError if it
    is not contiguous, reuses a host, uses an unknown host or does not fit in memory."""
    model = _Model(problem)
    host_type = {h: k for k, t in enumerate(model.types) for h in t.hosts}
    if not assignment:
        raise ValueError("empty schedule")
    expected_first, seen, found = 1, set(), []
    for n, (host, first, last) in enumerate(assignment):
        if host not in host_type:
            raise ValueError(f"unknown host {host!r}")
        if host in seen:
            raise ValueError(f"host {host!r} used twice")
        seen.add(host)
        if first != expected_first or last < first:
            raise ValueError(f"stage {n + 1} covers [{first}, {last}], expected to start at {expected_first}")
        if not model.fits(host_type[host], first - 1, last - 1):
            raise ValueError(f"stage {n + 1} on {host} does not fit in memory")
        found.append((host_type[host], first, last))
        expected_first = last + 1
    if expected_first != problem.layers + 1:
        raise ValueError(f"layers {expected_first}..{problem.layers} are not covered")
    return _bottleneck(model, found)


__all__ = ["Schedule", "Stage", "check_schedule", "partition"]
