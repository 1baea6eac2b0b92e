"""The optimal pipeline partition: minimise the bottleneck stage time (docs/partition.md has the model).

Search over the bottleneck value X (the optimum is one of the finitely many stage compute times or
link times), with an exact feasibility check for each X:

* **relaxed check** (host counts ignored): can layers 1..L be covered by stages of compute time <= X that
  fit in memory, with links <= X between consecutive stages? A reachability pass over (layer, type).
  Binary search with it gives a lower bound.
* **exact check**: the same pass carrying, per (layer, type of the last stage), the *Pareto-minimal*
  vectors of hosts used per type (a vector that uses at least as many hosts of every type as another is
  dominated and dropped), pruned by the stages still needed. Types with at least as many hosts as
  layers cannot run out and get no dimension. Galloping search upward from the lower bound: the
  optimum is usually at or just above it.

The reference enumerates every combination of per-type host counts for every layer; this explores only
what is reachable and not dominated.
"""

from __future__ import annotations

import bisect
import functools
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from airflow_provider_gpusched.core.partition.problem import MiB, Problem

if TYPE_CHECKING:
    import numpy as np


@dataclass
class Stage:
    host: str
    device_type: str
    first: int
    last: int
    compute_s: float
    comm_s: float           # sending the last layer's output to the next stage (0 for the last stage)
    memory_bytes: float     # weights + buffers, as the fit rule counts them
    memory_limit_bytes: float

    @property
    def time_s(self) -> float:
        return max(self.compute_s, self.comm_s)

    def to_dict(self) -> dict:
        return {"host": self.host, "device_type": self.device_type, "layers": [self.first, self.last],
                "compute_s": self.compute_s, "comm_s": self.comm_s, "time_s": self.time_s,
                "memory_bytes": self.memory_bytes, "memory_limit_bytes": self.memory_limit_bytes}


@dataclass
class Schedule:
    stages: list[Stage] = field(default_factory=list)
    checks: int = 0  # feasibility checks the search made

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

    def as_yaml_list(self) -> list[dict[str, list[int]]]:
        return [{s.host: [s.first, s.last]} for s in self.stages]


class _Model:
    """Stage and link costs (types with at least one host only), in plain Python: numpy is imported only
    by the Pareto path, for host-count grids too large to search densely."""

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
        for t, prefix in zip(self.types, self._time_prefix):
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

    def allowed(self, x: float) -> list[list[list[int]]]:
        """allowed[k][s]: last layers r (1-based) of stages starting at layer s+1 on type k within x."""
        return [[_bit_positions(bits) for bits in per_start] for per_start in self._end_bits(x)]

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

    def min_stages_from(self, x: float, ends: list[list[int]] | None = None) -> list[float]:
        """Fewest stages that can cover layers i+1..L within x (counts and links ignored): a pruning bound."""
        L = self.L
        if ends is None:
            ends = self._end_bits(x)
        best = [math.inf] * (L + 1)
        best[L] = 0
        for i in range(L - 1, -1, -1):
            positions = _bit_positions(_or_all(ends[k][i] for k in range(self.T)))
            if positions:
                best[i] = 1 + min(best[e] for e in positions)
        return best

    #: host-count grids up to this many cells are searched densely (every reachable count vector as a
    #: bit of one Python int per state); larger ones by Pareto frontiers (numpy)
    dense_cells = 200_000

    def exact(self, x: float) -> list[tuple[int, int, int]] | None:
        """A schedule within x respecting host counts, [(type index, first, last)], or None. Only types
        with fewer hosts than layers can run out, so only they are counted."""
        limited = [k for k in range(self.T) if self.counts[k] < self.L]
        cells = math.prod(self.counts[k] + 1 for k in limited)
        return self.exact_dense(x, limited) if cells <= self.dense_cells else self.exact_pareto(x, limited)

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
                    src = merged.get(key)
                    if src is None:
                        src = merged[key] = _or_all(row[k0] for k0 in key)
                if k2 in axis:  # one more host of type k2
                    a = axis[k2]
                    src = (src & below_cap[a]) << strides[a]
                    if not src:
                        continue
                for end in _bit_positions(ends):
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

    def exact_pareto(self, x: float, limited: list[int]) -> list[tuple[int, int, int]] | None:
        """Pareto frontiers of hosts used per limited type, over (layers done, type of the last stage)."""
        import numpy as np

        L, T = self.L, self.T
        need = self.min_stages_from(x)
        if not math.isfinite(need[0]):
            return None
        allowed = self.allowed(x)
        link_ok = np.array(self._link_ok(x), dtype=bool).reshape(L, T, T)
        dim = {k: d for d, k in enumerate(limited)}
        caps = np.array([self.counts[k] for k in limited], dtype=np.int64)
        spare_unlimited = len(limited) < T
        # frontier[i][k]: (vectors (m x d), parents (m x 3): source layer, source type, source row)
        frontier: list[dict[int, tuple[np.ndarray, np.ndarray]]] = [dict() for _ in range(L + 1)]
        pending: list[dict[int, list]] = [dict() for _ in range(L + 1)]
        d = len(limited)
        start = (np.zeros((1, d), dtype=np.int64), np.full((1, 3), -1, dtype=np.int64))
        for i in range(L):
            if i > 0:
                for k, parts in pending[i].items():
                    frontier[i][k] = _pareto(parts, caps, need[i], spare_unlimited)
                pending[i] = {}
                if not frontier[i]:
                    continue
                # source types whose links at this boundary allow the same next types act alike: merge them
                groups: dict[bytes, list[int]] = {}
                for k in frontier[i]:
                    groups.setdefault(link_ok[i - 1, k].tobytes(), []).append(k)
                merged = []
                for ks in groups.values():
                    parts = [(frontier[i][k][0], np.column_stack([np.full(len(frontier[i][k][0]), i),
                                                                  np.full(len(frontier[i][k][0]), k),
                                                                  np.arange(len(frontier[i][k][0]))]))
                             for k in ks]
                    vectors, parents = parts[0] if len(parts) == 1 else _pareto(parts, caps)
                    merged.append((link_ok[i - 1, ks[0]], vectors, parents))
            for k2 in range(T):
                ends = allowed[k2][i]
                if not len(ends):
                    continue
                if i == 0:
                    vectors, parents = start
                else:
                    pieces = [(v, p) for row, v, p in merged if row[k2]]
                    if not pieces:
                        continue
                    vectors, parents = pieces[0] if len(pieces) == 1 else _pareto(pieces, caps)
                if k2 in dim:
                    keep = vectors[:, dim[k2]] < caps[dim[k2]]
                    vectors, parents = vectors[keep], parents[keep]
                    if not len(vectors):
                        continue
                    vectors = vectors.copy()
                    vectors[:, dim[k2]] += 1
                for r in ends:
                    pending[r].setdefault(k2, []).append((vectors, parents))
            if pending[L]:
                break
        if not pending[L]:
            return None
        k, parts = next(iter(pending[L].items()))
        _, parents = parts[0]
        stages = []
        end, row_parent = L, parents[0]
        kind = k
        while True:
            src_i = int(row_parent[0])
            first = 1 if src_i < 0 else src_i + 1
            stages.append((kind, first, end))
            if src_i < 0:
                break
            _, par = frontier[src_i][int(row_parent[1])]
            end, kind, row_parent = src_i, int(row_parent[1]), par[int(row_parent[2])]
        return stages[::-1]


def _pareto(parts: list[tuple[np.ndarray, np.ndarray]], caps: np.ndarray, need: float = 0.0,
            spare_unlimited: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """The Pareto-minimal vectors of ``parts`` (with their parents); with ``need`` (stages still needed)
    and no unlimited type to spare, also without those whose remaining hosts cannot finish."""
    import numpy as np

    vectors = np.concatenate([v for v, _ in parts]) if len(parts) > 1 else parts[0][0]
    parents = np.concatenate([p for _, p in parts]) if len(parts) > 1 else parts[0][1]
    if vectors.shape[1] == 0:
        return vectors[:1], parents[:1]
    if not spare_unlimited:
        keep = (caps[None, :] - vectors).sum(axis=1) >= need
        vectors, parents = vectors[keep], parents[keep]
    if len(vectors) <= 1:
        return vectors, parents
    # distinct vectors: one int64 key each (counts are small), sorted by key
    keys = vectors @ (np.int64(int(caps.max()) + 1) ** np.arange(vectors.shape[1], dtype=np.int64))
    _, index = np.unique(keys, return_index=True)
    vectors, parents = vectors[index], parents[index]
    if len(vectors) == 1:
        return vectors, parents
    # sweep in order of total: a vector can only be dominated by one with a smaller or equal total
    order = np.argsort(vectors.sum(axis=1), kind="stable")
    vectors, parents = vectors[order], parents[order]
    kept: list[np.ndarray] = []
    frontier = vectors[:0]
    block = 256
    for lo in range(0, len(vectors), block):
        b = vectors[lo:lo + block]
        alive = ~np.all(frontier[None, :, :] <= b[:, None, :], axis=2).any(axis=1) if len(frontier) else \
            np.ones(len(b), dtype=bool)
        inner = np.all(b[None, :, :] <= b[:, None, :], axis=2)  # inner[j, i]: b[i] <= b[j]
        np.fill_diagonal(inner, False)
        alive &= ~inner.any(axis=1)
        idx = np.nonzero(alive)[0] + lo
        if len(idx):
            kept.append(idx)
            frontier = vectors[np.concatenate(kept)]
    index = np.concatenate(kept)
    return vectors[index], parents[index]


def partition(problem: Problem) -> Schedule:
    """The schedule with the smallest bottleneck (empty when no schedule is feasible)."""
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
        return _stages(model, easy, checks)
    # exact: gallop up from the relaxed bound, then bisect; a schedule found within values[i] has a
    # bottleneck that may be lower still, which moves the upper end down at once
    def attempt(index: int):
        nonlocal checks
        checks += 1
        result = model.exact(values[index])
        if result is None:
            return None, index
        return result, bisect.bisect_left(values, _bottleneck(model, result))

    found, hi = None, None
    step, index, last_bad = 1, lo, lo - 1
    while index < len(values):
        found, hi = attempt(index)
        if found is not None:
            break
        last_bad = index
        if index == len(values) - 1:
            break
        index = min(len(values) - 1, index + step)
        step *= 2
    if found is None:
        return Schedule(checks=checks)
    lo = last_bad + 1
    while lo < hi:
        mid = (lo + hi) // 2
        result, at = attempt(mid)
        if result is not None:
            found, hi = result, at
        else:
            lo = mid + 1
    return _stages(model, found, checks)


@functools.lru_cache(maxsize=16)
def _count_grid(shape: tuple[int, ...]) -> tuple[list[int], list[int]]:
    """For a count grid of this shape: each axis's stride in C order, and per axis the bitset of the
    vectors whose count on that axis is below its maximum (those that may take one more host)."""
    strides = [math.prod(shape[a + 1:]) for a in range(len(shape))]
    total = math.prod(shape)
    below = []
    for size, stride in zip(shape, strides):
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


def _prefix_sums(values) -> list[float]:
    sums, total = [0.0], 0.0
    for value in values:
        total += value
        sums.append(total)
    return sums


def _bit_positions(bits: int) -> list[int]:
    positions = []
    while bits:
        low = bits & -bits
        positions.append(low.bit_length() - 1)
        bits ^= low
    return positions


def _or_all(values) -> int:
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


def _stages(model: _Model, found: list[tuple[int, int, int]], checks: int) -> Schedule:
    used = [0] * model.T
    stages = []
    for n, (k, first, last) in enumerate(found):
        t = model.types[k]
        host = t.hosts[used[k]]
        used[k] += 1
        comm = 0.0
        if n + 1 < len(found):
            comm = model.comm[last - 1][k][found[n + 1][0]]
        stages.append(Stage(host=host, device_type=t.name, first=first, last=last,
                            compute_s=model.comp(k, first - 1, last - 1), comm_s=comm,
                            memory_bytes=model.stage_memory(first - 1, last - 1),
                            memory_limit_bytes=t.mem_mb * MiB))
    return Schedule(stages, checks)


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
