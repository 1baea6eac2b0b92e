"""The exact check for host-count spaces too large to search densely (many device types, each with fewer hosts
than the model has layers): an integer program solved by HiGHS (through SciPy).

A link's time is ``out(j) / min(bw_a, bw_b)``, the larger of ``out(j) / bw_a`` and ``out(j) / bw_b``, so a link
is within X exactly when each of its two ends would be within X linked to a host of its own type. Within X the
link condition is then a property of each stage alone (its type and the boundaries it touches), not of a pair of
stages, and a schedule within X is a path from boundary 0 to boundary L over *arcs* (first layer, last layer,
type), each an allowed stage, that uses at most as many arcs of each type as the type has hosts: a path in a
graph of L+1 nodes with one side constraint per type. Its linear relaxation is tight in practice (the path
polytope is integral; only the count constraints can make a vertex fractional), so the solver proves or
refutes a bottleneck in milliseconds to a second where the count vectors number 33^8.

SciPy is imported here only, on first use: the small instances never need it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

from airflow_provider_gpusched.core.partition.bits import bit_positions
from airflow_provider_gpusched.core.partition.problem import PartitionInputError
from airflow_provider_gpusched.core.partition.types import CheckResult, StageModel


def stage_arcs(model: StageModel, x: float) -> list[tuple[int, int, int]]:
    """Every stage (start s, 0-based; end r, 1-based; type k) whose compute time, memory and both links are
    within x. A type can stand at boundary j (after layer j, 0 < j < L) iff sending out(j) between two hosts of
    that type is within x."""

    L = model.L
    arcs: list[tuple[int, int, int]] = []
    ends = model._end_bits(x)
    for k in range(model.T):
        at = [True] + [model.comm[j - 1][k][k] <= x for j in range(1, L)] + [True]
        mask = 0
        for j in range(L + 1):
            if at[j]:
                mask |= 1 << j
        for s in range(L):
            if at[s]:
                arcs.extend((s, r, k) for r in bit_positions(ends[k][s] & mask))
    return arcs


#: relaxations with up to this many arcs (variables) are solved by simplex, larger ones by the interior-point method
SIMPLEX_UP_TO = 1000


def check(model: StageModel, x: float, deadline: float | None = None, *, relaxed: bool = False) -> CheckResult:
    """Is there a schedule within x respecting host counts? ``relaxed`` solves the linear relaxation only (a
    refutation is a proof; a fractional answer proves nothing and returns no stages)."""
    try:
        import numpy as np
        from scipy.optimize import Bounds, LinearConstraint, linprog, milp
        from scipy.sparse import csc_matrix
    except ImportError as exc:  # NumPy and SciPy are the partition extra, not dependencies of the package
        raise PartitionInputError(
            f"this instance (host counts that the exact search alone cannot settle) needs SciPy's HiGHS solver, "
            f"which is not installed ({exc}): pip install 'airflow-provider-gpusched[partition]'"
        ) from None
    L, T = model.L, model.T
    arcs = stage_arcs(model, x)
    if not arcs:
        return CheckResult(None, True)
    n = len(arcs)
    # one column per arc, with three entries (rows in order): -1 leaving boundary ``start``, +1 entering boundary
    # ``end`` (flow balance, rows 0..L: -1 at 0, +1 at L, 0 between), +1 in row L+1+kind (stages per type <= its
    # hosts). Built in the compressed-column form HiGHS takes, so SciPy converts nothing (a third of each call)
    rows = np.array(arcs, dtype=np.int64)
    rows[:, 2] += L + 1
    matrix = csc_matrix(
        (np.tile([-1.0, 1.0, 1.0], n), rows.reshape(-1), np.arange(0, 3 * n + 1, 3)), shape=(L + 1 + T, n)
    )
    target = np.zeros(L + 1)
    target[0], target[L] = -1.0, 1.0
    counts = np.array(model.counts, dtype=float)
    options: dict[str, Any] = {}
    if deadline is not None:
        left = deadline - time.monotonic()
        if left <= 0:
            return CheckResult(None, False)
        options["time_limit"] = left
    if relaxed and n > SIMPLEX_UP_TO:  # large: the interior-point method, ~2x faster than simplex here
        result = linprog(
            np.zeros(n),
            A_ub=matrix[L + 1 :],
            b_ub=counts,
            A_eq=matrix[: L + 1],
            b_eq=target,
            bounds=(0, 1),
            method="highs-ipm",
            options=options,
        )
        return CheckResult(None, result.status == 2)
    constraints = LinearConstraint(matrix, np.concatenate([target, np.zeros(T)]), np.concatenate([target, counts]))
    # a small relaxation through milp() with no integer variable: HiGHS's simplex at a third of linprog's cost per
    # call (its input checks and conversions), and it refutes the degenerate cases the interior-point method leaves
    # undecided (bench/partition.py, docs/benchmarks.md 2026-11-27)
    result = milp(
        np.zeros(n),
        constraints=constraints,
        integrality=np.zeros(n) if relaxed else np.ones(n),
        bounds=Bounds(0, 1),
        options={"presolve": True, **options},
    )
    if result.status == 2:  # infeasible: proven
        return CheckResult(None, True)
    if relaxed:  # a fractional answer proves nothing
        return CheckResult(None, False)
    if result.x is None:
        return CheckResult(None, False)
    chosen = {arcs[i][0]: arcs[i] for i in np.nonzero(result.x > 0.5)[0]}
    stages, at = [], 0
    while at < L:  # walk the path from boundary 0
        s, r, k = chosen[at]
        stages.append((k, s + 1, r))
        at = r
    return CheckResult(stages, False)


def lower_bound_index(model: StageModel, values: list[float], lo: int, deadline: float | None) -> tuple[int, int]:
    """The first index at or above ``lo`` whose linear relaxation is feasible: every value below it is refuted
    (a proven lower bound). Galloping upward from ``lo``, then bisection: the relaxation is cheap to refute
    near ``lo``, where few stages are within the value, and costly far above it. Stops early at the deadline
    with what is proven so far. Returns the index and the number of relaxations solved."""
    solved = 0

    def refuted(index: int) -> bool | None:
        nonlocal solved
        if deadline is not None and time.monotonic() >= deadline:
            return None
        solved += 1
        return check(model, values[index], deadline, relaxed=True).proven_infeasible

    top, step, hi = len(values) - 1, 1, None
    index = lo
    while index < top:
        answer = refuted(index)
        if answer is None:
            return lo, solved
        if not answer:
            hi = index
            break
        lo = index + 1
        index = min(top, index + step)
        step *= 2
    hi = top if hi is None else hi
    while lo < hi:
        mid = (lo + hi) // 2
        answer = refuted(mid)
        if answer is None:
            break
        if answer:
            lo = mid + 1
        else:
            hi = mid
    return lo, solved


def weighted_path(model: StageModel, x: float, rounds: int = 200) -> list[tuple[int, int, int]] | None:
    """A quick schedule within x respecting host counts, or None: no proof either way. The cheapest path when
    a stage on type k costs 1 + p[k], the prices p raised for types the path uses more hosts of than there are
    and lowered (not below 0) for types with hosts to spare (subgradient steps on the count constraints), for
    up to ``rounds`` shortest-path passes."""
    L, T, caps = model.L, model.T, model.counts
    leaving: list[list[tuple[int, int]]] = [[] for _ in range(L)]
    for s, r, k in stage_arcs(model, x):
        leaving[s].append((r, k))
    price = [0.0] * T
    seen: dict[tuple[Any, ...], None] = {}  # the paths tried, for splicing
    for n in range(rounds):
        weight = [1.0 + p for p in price]
        cost = [math.inf] * (L + 1)
        via: list[tuple[int, int] | None] = [None] * (L + 1)
        cost[0] = 0.0
        for s in range(L):
            here = cost[s]
            if here == math.inf:
                continue
            for r, k in leaving[s]:
                c = here + weight[k]
                if c < cost[r]:
                    cost[r], via[r] = c, (s, k)
        if cost[L] == math.inf:
            return None  # no path at all within x
        stages: list[tuple[int, int, int]] = []
        at = L
        while at:
            step_back = via[at]
            assert step_back is not None  # every boundary on the cheapest path to L was reached from one before
            s, k = step_back
            stages.append((k, s + 1, at))
            at = s
        used = [0] * T
        for k, _, _ in stages:
            used[k] += 1
        if all(used[k] <= caps[k] for k in range(T)):
            return stages[::-1]
        seen.setdefault(tuple(stages[::-1]), None)
        step = 1.0 / math.sqrt(n + 1)
        for k in range(T):
            price[k] = max(0.0, price[k] + step * (used[k] - caps[k]) / max(1, caps[k]))
    return _crossover([list(path) for path in seen], caps)


#: bits per type in a packed vector of host counts (:func:`_crossover`): a count is below 2**31, the top bit guards
_FIELD = 32


def _packed(counts: Sequence[int]) -> int:
    """Host counts per type as one integer, a ``_FIELD``-bit field per type: adding two packed vectors adds them
    type by type, and one comparison with the guard bits checks every type at once."""
    return sum(c << (_FIELD * k) for k, c in enumerate(counts))


def _crossover(paths: list[list[tuple[int, int, int]]], caps: list[int]) -> list[tuple[int, int, int]] | None:
    """Two paths that each use too many hosts of some type may not when one's stages up to a boundary they
    share are followed by the other's after it: try every such splice (the stages are independent of each
    other within x, so any splice is a schedule within x). The first that fits, in path and boundary order.

    Host counts are packed (:func:`_packed`): with a guard bit set in each field of the caps, subtracting the
    hosts a splice uses leaves every guard bit set exactly when no type uses more than it has."""
    T = len(caps)
    guard = _packed([1 << (_FIELD - 1)] * T)
    room = _packed(caps) | guard
    heads = []  # per path: {boundary: hosts used by the stages up to it}, in boundary order
    tails = []  # per path: {boundary: hosts used by the stages after it}
    for path in paths:
        head, used = {0: 0}, [0] * T
        for k, _, last in path:
            used[k] += 1
            head[last] = _packed(used)
        total = head[max(head)]
        heads.append(head)
        tails.append({boundary: total - before for boundary, before in head.items()})
    for a, first in enumerate(heads):
        for b, rest in enumerate(tails):
            if a == b:
                continue
            for boundary, head_used in first.items():
                tail_used = rest.get(boundary)
                if tail_used is not None and (room - head_used - tail_used) & guard == guard:
                    return [st for st in paths[a] if st[2] <= boundary] + [st for st in paths[b] if st[1] > boundary]
    return None


__all__ = ["CheckResult", "check", "lower_bound_index", "stage_arcs", "weighted_path"]
