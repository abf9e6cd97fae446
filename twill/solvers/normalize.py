"""Cost normalization (paper §5.2): small integer costs with the same ratios.

Optimal modulo scheduling and the joint problem grow with the magnitude of the costs, and multiplying
every cost by a positive integer gives an isomorphic problem. Over the distinct positive durations of a
problem (op reservations, latencies and issue times, edge latencies and hand-off costs) an ILP finds
integers ``C'`` and ``F`` with::

    -F <= C[i]*C'[j] - C[j]*C'[i] <= F   for all distinct durations i < j
    1 <= Σ C' over the counted list <= U  (U = 300 by default, paper §5.2)

where the counted list is, by default, the cycle count of every op (one entry per op, as the paper's
list of op costs; see :func:`normalize_problem` for the alternatives). It minimizes ``F``, then (a
second, lexicographic stage) maximizes the counted sum at the optimal ``F``, so the answer is the richest
among the most faithful ones. Two more rules keep the answer meaningful (a known failure of the
single-stage form is that most costs collapse to 0): ``C'`` keeps the order of ``C``, and with
``keep_positive`` (default) no positive cost becomes 0. ``C`` is divided by its gcd first, so scaling every
cost gives the same ``C'``; when the reduced costs already fit under ``U`` they are returned as is
(``F = 0``) without an ILP, since normalization never makes costs larger.

    >>> n = normalize_costs([1024, 1024, 128])
    >>> n.map(1024), n.map(128), n.error
    (8, 1, 0)
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, replace

import pulp

from twill.errors import OptionsError, SolverError
from twill.ir.graph import Op
from twill.model.problem import Edge, Problem
from twill.solvers.ilp import add_variable, solve_ilp
from twill.solvers.status import SolveStatus

__all__ = ["COUNTS", "Normalization", "normalize_costs", "normalize_problem", "problem_costs",
           "rounded_costs"]


@dataclass(frozen=True)
class Normalization:
    """A mapping from machine cycles to normalized time units.

    Attributes
    ----------
    raw : tuple of int
        Distinct positive costs, ascending (cycles).
    scaled : tuple of int
        Their normalized values.
    error : int
        ``F``, the largest cross-product error ``|C_i C'_j - C_j C'_i|`` on the gcd-reduced costs.
    upper : int
        ``U``.
    exact : bool
        True when every ratio is kept exactly (``F = 0``).
    status : str
        ``optimal`` (proven), ``feasible`` (time limit) or ``exact`` (no ILP needed).
    wall_s : float
        Seconds spent in the ILP.
    """

    raw: tuple[int, ...]
    scaled: tuple[int, ...]
    error: int
    upper: int
    exact: bool
    status: str
    wall_s: float
    counts: tuple[int, ...] = ()

    def map(self, value: int) -> int:
        """Normalized value of ``value`` cycles (0 stays 0). :class:`KeyError` for an unknown cost."""
        if value == 0:
            return 0
        return self.scaled[self.raw.index(value)]

    @property
    def cycles_per_unit(self) -> float:
        """Machine cycles per normalized unit: ``Σ C / Σ C'`` over the list ``C`` (with multiplicities)."""
        counts = self.counts or (1,) * len(self.raw)
        total = sum(k * s for k, s in zip(counts, self.scaled, strict=True))
        return sum(k * c for k, c in zip(counts, self.raw, strict=True)) / total if total else 1.0

    def collapses(self, tolerance: float = 0.25) -> list[str]:
        """Human-readable notes on costs that lost their meaning, one per normalized value.

        Positive costs mapped to 0; different costs mapped to the same value (when their ideal values,
        ``cost / cycles_per_unit``, differ by more than ``tolerance`` relative); a cost whose normalized
        value is off its ideal by more than ``tolerance`` and at least one unit.
        """
        notes = []
        unit = self.cycles_per_unit
        by_value: dict[int, list[int]] = {}
        for c, s in zip(self.raw, self.scaled, strict=True):
            by_value.setdefault(s, []).append(c)
        for s, costs in sorted(by_value.items()):
            if s == 0:
                notes.append(f"{', '.join(map(str, costs))} cycles collapsed to 0")
                continue
            if len(costs) > 1 and costs[-1] > (1 + tolerance) * costs[0]:
                notes.append(f"{', '.join(map(str, costs))} cycles all became {s} unit(s) (ideal "
                             f"{costs[0] / unit:.2f}..{costs[-1] / unit:.2f})")
                continue
            for c in costs:
                ideal = c / unit
                if abs(s - ideal) > tolerance * ideal and abs(s - ideal) >= 1:
                    off = (s - ideal) / ideal
                    notes.append(f"{c} cycles became {s} units, ideal {ideal:.2f} ({off:+.0%})")
        return notes

    def to_dict(self) -> dict[str, object]:
        """Plain-data form."""
        return {"raw": list(self.raw), "scaled": list(self.scaled), "counts": list(self.counts),
                "error": self.error, "upper": self.upper,
                "exact": self.exact, "status": self.status, "wall_s": self.wall_s,
                "cycles_per_unit": self.cycles_per_unit, "collapses": self.collapses()}


def normalize_costs(
    costs: Iterable[int],
    *,
    counted: Iterable[int] | None = None,
    upper: int = 300,
    keep_positive: bool = True,
    multiset: bool = True,
    backend: str = "cbc",
    time_limit: float | None = None,
) -> Normalization:
    """Normalize integer costs (cycles); zeros are ignored.

    Parameters
    ----------
    costs : iterable of int
        Every duration to map (cycles, non-negative integers); duplicates do not matter.
    counted : iterable of int, optional
        The list ``C`` whose normalized sum must lie in ``[1, U]``, with repetitions (default: ``costs``).
        Each entry must be one of ``costs``. When no positive cost is counted (every op of a loop uses no
        unit) the bound is vacuous and the mapping is the exact one (divide by the gcd).
    upper : int
        ``U``.
    keep_positive : bool
        Forbid a positive cost from becoming 0.
    multiset : bool
        Count repeated entries of the counted list as often as they occur (default); ``False`` counts
        each distinct value once.
    backend : str
        MILP backend (``"cbc"`` or ``"highs"``).
    time_limit : float, optional
        Seconds for the two ILP stages together.

    Raises
    ------
    ValueError
        A cost is negative or not an integer, a counted cost is not among ``costs``, or ``upper`` cannot
        hold one unit per counted cost with ``keep_positive``.
    SolverError
        The ILP failed to find any answer in the time limit.
    """
    values = _check_costs(costs)
    listed = values if counted is None else _check_costs(counted)
    raw = tuple(sorted({c for c in values if c > 0}))
    if not raw:
        return Normalization((), (), 0, upper, True, "exact", 0.0)
    extra = {c for c in listed if c > 0} - set(raw)
    if extra:
        raise ValueError(f"counted costs {sorted(extra)} are not among the costs to normalize")
    mult = [listed.count(c) if multiset else int(c in listed) for c in raw]
    # No positive cost counted (a loop of ops that use no unit, whose only durations are edge latencies):
    # the sum bound constrains nothing, and the exact mapping (the gcd reduction, no error) below holds it.
    g = math.gcd(*raw)
    reduced = [c // g for c in raw]
    if sum(k * c for k, c in zip(mult, reduced, strict=True)) <= upper:
        return Normalization(raw, tuple(reduced), 0, upper, True, "exact", 0.0, tuple(mult))
    if keep_positive and sum(mult) > upper:
        raise OptionsError(f"{sum(mult)} counted costs cannot each keep a positive value with U = {upper}; "
                           f"raise U", option="normalize_upper")
    return _solve(raw, reduced, mult, upper, keep_positive, backend, time_limit)


def _check_costs(costs: Iterable[int]) -> list[int]:
    out = []
    for c in costs:
        if isinstance(c, bool) or not isinstance(c, int) or c < 0:
            raise ValueError(f"cost {c!r} must be a non-negative integer (cycles)")
        out.append(c)
    return out


def _model(reduced: list[int], mult: list[int], upper: int,
           keep_positive: bool) -> tuple[pulp.LpProblem, list, pulp.LpVariable, pulp.LpAffineExpression]:
    n = len(reduced)
    m = pulp.LpProblem("normalize", pulp.LpMinimize)
    low = 1 if keep_positive else 0
    cp = [add_variable(m, f"c[{i}]", low, upper, cat="Integer") for i in range(n)]
    f = add_variable(m, "F", 0, cat="Integer")
    m += f
    for i in range(n):
        for j in range(i + 1, n):
            diff = reduced[i] * cp[j] - reduced[j] * cp[i]
            m += diff <= f
            m += -f <= diff
        if i:
            m += cp[i - 1] <= cp[i]
    total = pulp.lpSum(k * c for k, c in zip(mult, cp, strict=True))
    m += total <= upper
    m += total >= 1
    return m, cp, f, total


def _solve(raw: tuple[int, ...], reduced: list[int], mult: list[int], upper: int, keep_positive: bool,
           backend: str, time_limit: float | None) -> Normalization:
    m, cp, f, total = _model(reduced, mult, upper, keep_positive)
    first = solve_ilp(m, backend=backend, time_limit=time_limit)
    if first.status == SolveStatus.TIMEOUT:
        # No ILP answer within the limit (a loaded machine, a short --time-limit): the proportional
        # rounding is a point of the same model, so the search goes on with it, marked "feasible".
        scaled = rounded_costs(reduced, mult, upper, keep_positive)
        if scaled is not None:
            error = max((abs(a * cb - b * ca) for i, (a, ca) in enumerate(zip(reduced, scaled, strict=True))
                         for b, cb in zip(reduced[i + 1:], scaled[i + 1:], strict=True)), default=0)
            return Normalization(raw, scaled, error, upper, error == 0, "feasible", first.wall_s, tuple(mult))
    if first.status not in (SolveStatus.OPTIMAL, SolveStatus.FEASIBLE):
        raise SolverError(f"cost normalization found no answer ({first.status.value}) for costs {raw}")
    best_f = round(f.value())
    start = [round(v.value()) for v in cp]
    m.sense = pulp.LpMaximize
    m.setObjective(total)
    m += f <= best_f
    left = None if time_limit is None else max(0.05, time_limit - first.wall_s)
    second = solve_ilp(m, backend=backend, time_limit=left)
    if second.status in (SolveStatus.OPTIMAL, SolveStatus.FEASIBLE):
        scaled = tuple(round(v.value()) for v in cp)
    else:
        scaled = tuple(start)
    proven = first.status == SolveStatus.OPTIMAL and second.status == SolveStatus.OPTIMAL
    return Normalization(raw, scaled, best_f, upper, best_f == 0, "optimal" if proven else "feasible",
                         first.wall_s + second.wall_s, tuple(mult))


def rounded_costs(reduced: list[int], mult: list[int], upper: int,
                  keep_positive: bool) -> tuple[int, ...] | None:
    """A feasible point of the normalization model without a solver: ``c_i = max(low, floor(s r_i))`` for
    the largest scale ``s`` (bisected) whose counted sum ``sum(mult_i c_i)`` is at most ``upper``, and at
    least 1 (``low`` = 1 with ``keep_positive``, else 0). Sorted costs stay sorted. None when no scale fits
    (``keep_positive`` with more counted costs than ``upper``, refused before the ILP).

    >>> rounded_costs([3, 10, 50], [1, 2, 1], upper=20, keep_positive=True)   # 1 + 2 x 2 + 14 = 19
    (1, 2, 14)

    (at ``s`` = 0.3 it would be ``1 + 2 x 3 + 15 = 22 > 20``).
    """
    low = 1 if keep_positive else 0

    def at(scale: float) -> tuple[int, ...]:
        return tuple(max(low, math.floor(scale * r)) for r in reduced)

    def fits(c: tuple[int, ...]) -> bool:
        return 1 <= sum(k * x for k, x in zip(mult, c, strict=True)) <= upper

    lo, hi = 0.0, upper / max(1, min(r for r in reduced if r > 0))
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if sum(k * x for k, x in zip(mult, at(mid), strict=True)) <= upper else (lo, mid)
    best = at(lo)
    if not fits(best) and not keep_positive:  # every cost rounded to 0: the largest becomes 1
        best = (*best[:-1], 1)
    return best if fits(best) else None


def problem_costs(problem: Problem) -> list[int]:
    """Every duration of ``problem`` that normalization must map (cycles)."""
    out: list[int] = []
    for op in problem.ops:
        for r in op.rrt:
            out += [r.start, r.cycles]
        # op.cycles (the table's length) is the entry the sum bound counts; with reservations that start
        # late (start + cycles) it is none of the numbers above
        out += [op.latency, op.issue_cycles, op.cycles]
    for e in problem.edges:
        out += [e.latency, e.cross]
    return out


def _map_op(op: Op, n: Normalization) -> Op:
    rrt = tuple(replace(r, start=n.map(r.start), cycles=max(1, n.map(r.cycles))) for r in op.rrt)
    busy = max((r.end for r in rrt), default=0)
    # idle trailing cycles keep their meaning (completion after the last busy cycle), never before it
    completion = None if op.completion is None else max(busy, n.map(op.completion))
    length = busy if completion is None else completion
    return replace(op, rrt=rrt, latency=n.map(op.latency), issue_cycles=min(length, n.map(op.issue_cycles)),
                   spill_cost=None, completion=completion)


COUNTS = ("ops", "all", "distinct")


def normalize_problem(
    problem: Problem,
    *,
    upper: int = 300,
    count: str = "ops",
    keep_positive: bool = True,
    backend: str = "cbc",
    time_limit: float | None = None,
) -> tuple[Problem, Normalization]:
    """``problem`` in normalized time units, and the mapping used (see :func:`normalize_costs`).

    ``count`` chooses the list ``C`` bounded by ``U``: ``"ops"`` (default) one entry per op, its cycle
    count (the paper's list of op cycle counts; edge latencies and hand-off costs are mapped with the same
    ratios but not counted); ``"all"`` every duration of ops and edges, with repetitions (coarser);
    ``"distinct"`` each distinct duration once (finer).

    The SMEM traffic of a register hand-off (:attr:`Edge.transfer`) is not one of the normalized costs
    (its many small values, the row statistics' 2-4 cycles, would pull the ratios of the op costs); it is
    rounded to the nearest whole number of units at the mapping's ``cycles_per_unit``, so a transfer under
    half a unit costs no port time.
    """
    if problem.cycles_per_unit != 1.0:
        raise SolverError(f"problem {problem.name!r} is already normalized")
    if count not in COUNTS:
        raise ValueError(f"count={count!r} is not one of {', '.join(COUNTS)}")
    costs = problem_costs(problem)
    counted = {"ops": [op.cycles for op in problem.ops], "all": costs,
               "distinct": sorted({c for c in costs if c > 0})}[count]
    norm = normalize_costs(costs, counted=counted, upper=upper, keep_positive=keep_positive,
                           backend=backend, time_limit=time_limit)
    ops = [_map_op(op, norm) for op in problem.ops]
    unit = norm.cycles_per_unit
    edges = [Edge(e.index, e.src, e.dst, norm.map(e.latency), e.distance, e.blocking, e.carrier,
                  norm.map(e.cross), e.inplace, math.floor(e.transfer / unit + 0.5)) for e in problem.edges]
    return problem.replace_times(ops, edges, norm.cycles_per_unit), norm
