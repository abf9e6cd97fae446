"""Optimal modulo scheduling at a fixed II by integer linear programming (paper §3.1, §5).

For a fixed II and a candidate length ``L`` the problem is a time-indexed 0/1 program in the style of
Stoutchinin's ZLP that the paper uses: a binary ``x[v][t]`` for every op ``v`` and every start
``t`` in ``[0, L - cycles(v)]``, exactly one per op, and

* capacity: for each unit ``f`` and residue ``ρ`` in ``[0, II)``, the reservations folded modulo II use at
  most ``cap(f)``;
* dependence: ``Σ t x[v][t] + δ II >= Σ t x[u][t] + d`` for every edge.

Fixing ``L`` bounds every start, which makes the relaxation tight: an infeasible ``L`` is usually refuted
in presolve. :func:`modulo_schedule` scans ``L`` upward from a lower bound (critical path, longest op), so
the first feasible ``L`` is the least one; if no ``L`` within one II of the bound works, it asks whether any
``L`` up to the stage horizon works (one probe) and bisects. A second, optional stage keeps that ``L`` and
minimizes the register lifetime ``Σ regs(v) (end(v) - t[v])``.

    >>> from twill.machine import load_machine
    >>> from twill.paper import figure1_graph
    >>> from twill.problem import build_problem
    >>> p = build_problem(figure1_graph(), load_machine("h100"))
    >>> r = modulo_schedule(p, 2)
    >>> r.status.value, r.length, r.start["S"], r.start["O"]
    ('optimal', 4, 0, 3)
    >>> modulo_schedule(p, 1).status.value
    'infeasible'
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pulp

from twill.bounds import critical_path
from twill.ilp import SolveStatus, solve_ilp
from twill.problem import Problem

__all__ = ["ModuloResult", "modulo_schedule", "stage_horizon"]


@dataclass(frozen=True)
class ModuloResult:
    """Outcome of the modulo ILP at one II.

    Attributes
    ----------
    ii : int
        The initiation interval tried.
    status : SolveStatus
        ``OPTIMAL`` (length proven minimal), ``FEASIBLE`` (time limit), ``INFEASIBLE`` or ``TIMEOUT``.
    start : mapping of str to int
        Start time of each op in iteration 0 (empty unless a schedule was found).
    length : int
        ``L = max(start + cycles)`` (0 without a schedule).
    wall_s : float
        Seconds in the solver.
    n_vars, n_constraints : int
        Model size.
    """

    ii: int
    status: SolveStatus
    start: Mapping[str, int]
    length: int
    wall_s: float
    n_vars: int
    n_constraints: int

    @property
    def found(self) -> bool:
        """True if a schedule came back."""
        return self.status in (SolveStatus.OPTIMAL, SolveStatus.FEASIBLE)


def stage_horizon(problem: Problem, ii: int) -> int:
    """An upper bound on the stage of any op in a minimal-stage schedule at ``ii``.

    With residues fixed, stages satisfy ``k[v] - k[u] >= ceil((d - δ II + r[u] - r[v]) / II)``, at most
    ``ceil((d + II - 1) / II)`` per edge; the least solution is a longest path, so it never exceeds the sum
    of those weights over all edges.
    """
    return 1 + sum(max(0, -(-(e.latency + ii - 1) // ii)) for e in problem.edges)


def modulo_schedule(
    problem: Problem, ii: int, *, backend: str = "cbc", time_limit: float | None = None,
    tie_break: bool = True,
) -> ModuloResult:
    """Find a minimum-length modulo schedule of ``problem`` at initiation interval ``ii``.

    Parameters
    ----------
    problem : Problem
        The loop (time units of the problem).
    ii : int
        Initiation interval (>= 1).
    backend : str
        MILP backend, ``"cbc"`` or ``"highs"``.
    time_limit : float, optional
        Seconds for the whole call.
    tie_break : bool
        Run stage 2 (fewest live registers at the minimal length).

    Returns
    -------
    ModuloResult
        ``OPTIMAL`` with the least ``L``; ``INFEASIBLE`` when no ``L`` up to the stage horizon admits a
        modulo schedule (then none exists at this II); ``TIMEOUT`` or ``FEASIBLE`` when the time limit
        stopped the search.

    Raises
    ------
    ValueError
        ``ii < 1``.
    """
    if ii < 1:
        raise ValueError(f"II must be >= 1, got {ii}")
    deadline = None if time_limit is None else time.monotonic() + time_limit
    low = max(critical_path(problem), max(op.cycles for op in problem.ops))
    high = ii * (stage_horizon(problem, ii) + 1) + max(op.cycles for op in problem.ops)
    probes = _Probes(problem, ii, backend, deadline)
    found = None
    for length in range(low, min(high, low + ii) + 1):
        status = probes.run(length)
        if status is None:
            return probes.result(SolveStatus.TIMEOUT, found)
        if status:
            found = length
            break
    if found is None and low + ii < high:
        status = probes.run(high)
        if status is None:
            return probes.result(SolveStatus.TIMEOUT, None)
        if not status:
            return probes.result(SolveStatus.INFEASIBLE, None)
        lo, found = low + ii + 1, high
        while lo < found:
            mid = (lo + found) // 2
            status = probes.run(mid)
            if status is None:
                return probes.result(SolveStatus.FEASIBLE, found)
            if status:
                found = mid
            else:
                lo = mid + 1
    if found is None:
        return probes.result(SolveStatus.INFEASIBLE, None)
    if tie_break:
        probes.run(found, tie_break=True)
    return probes.result(SolveStatus.OPTIMAL, found)


class _Probes:
    """Feasibility probes at fixed lengths; remembers the last schedule and the time spent."""

    def __init__(self, problem: Problem, ii: int, backend: str, deadline: float | None) -> None:
        self.p, self.ii, self.backend, self.deadline = problem, ii, backend, deadline
        self.wall = 0.0
        self.size = (0, 0)
        self.schedules: dict[int, dict[str, int]] = {}

    def run(self, length: int, *, tie_break: bool = False) -> bool | None:
        """True if a schedule of length ``length`` exists, False if not, None on timeout."""
        left = None if self.deadline is None else self.deadline - time.monotonic()
        if left is not None and left <= 0:
            return None
        model, t, lifetime = _build(self.p, self.ii, length)
        if tie_break and lifetime is not None:
            model.setObjective(lifetime)
        out = solve_ilp(model, backend=self.backend, time_limit=left)
        self.wall += out.wall_s
        self.size = (model.numVariables(), model.numConstraints())
        if out.status in (SolveStatus.OPTIMAL, SolveStatus.FEASIBLE):
            self.schedules[length] = {n: round(e.value()) for n, e in t.items()}
            return True
        if out.status == SolveStatus.INFEASIBLE:
            return False
        return None if not tie_break else True

    def result(self, status: SolveStatus, length: int | None) -> ModuloResult:
        start = self.schedules.get(length, {}) if length is not None else {}
        if length is not None and not start:
            status = SolveStatus.TIMEOUT
        return ModuloResult(self.ii, status, start, length if start else 0, self.wall, *self.size)


def _build(problem: Problem, ii: int, length: int):
    model = pulp.LpProblem(f"modulo_{problem.name}_II{ii}_L{length}", pulp.LpMinimize)
    x: dict[str, dict[int, pulp.LpVariable]] = {}
    t: dict[str, pulp.LpAffineExpression] = {}
    for i, op in enumerate(problem.ops):
        x[op.name] = {s: pulp.LpVariable(f"x[{i}][{s}]", cat="Binary") for s in range(length - op.cycles + 1)}
        model += pulp.lpSum(x[op.name].values()) == 1, f"one_{i}"
        t[op.name] = pulp.lpSum(s * var for s, var in x[op.name].items())
    _capacity(model, problem, ii, x)
    for e in problem.edges:
        if e.src == e.dst:
            if e.distance * ii < e.latency:
                model += pulp.lpSum([]) >= 1, f"dep_{e.index}"
            continue
        model += t[e.dst] - t[e.src] >= e.latency - e.distance * ii, f"dep_{e.index}"
    model.setObjective(pulp.lpSum([]))
    return model, t, _lifetime(model, problem, ii, t, length)


def _capacity(model: pulp.LpProblem, problem: Problem, ii: int, x: Mapping[str, Mapping[int, Any]]) -> None:
    for unit, cap in problem.resources.units.items():
        rows: list[dict[pulp.LpVariable, int]] = [{} for _ in range(ii)]
        for op in problem.ops:
            for res in op.rrt:
                if res.unit != unit:
                    continue
                for s, var in x[op.name].items():
                    for c in range(res.start, res.end):
                        row = rows[(s + c) % ii]
                        row[var] = row.get(var, 0) + res.count
        for rho, row in enumerate(rows):
            if row:
                model += pulp.LpAffineExpression(row) <= cap, f"cap_{unit}_{rho}"


def _lifetime(model: pulp.LpProblem, problem: Problem, ii: int, t: Mapping[str, pulp.LpAffineExpression],
              length: int) -> pulp.LpAffineExpression | None:
    terms = []
    top = length + ii * (1 + max((e.distance for e in problem.edges), default=0)) + length
    for i, op in enumerate(problem.ops):
        if not op.regs:
            continue
        end = pulp.LpVariable(f"end[{i}]", 0, top, cat="Integer")
        model += end >= t[op.name] + op.cycles, f"live_self_{i}"
        for e in problem.out_edges(op.name):
            if e.carrier != "register":
                continue
            hold = 0 if e.inplace or not problem.op(e.dst).is_async else problem.op(e.dst).cycles
            model += end >= t[e.dst] + e.distance * ii + hold, f"live_{i}_{e.index}"
        terms.append(op.regs * (end - t[op.name]))
    return pulp.lpSum(terms) if terms else None
