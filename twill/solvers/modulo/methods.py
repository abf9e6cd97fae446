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

    >>> from twill.ir.machine import load_machine
    >>> from twill.ir.paper import figure1_graph
    >>> from twill.model.problem import build_problem
    >>> p = build_problem(figure1_graph(), load_machine("h100"))
    >>> r = modulo_schedule(p, 2)
    >>> r.status.value, r.length, r.start["S"], r.start["O"]
    ('optimal', 4, 0, 3)
    >>> modulo_schedule(p, 1).status.value
    'infeasible'
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pulp

from twill.model.bounds import critical_path
from twill.model.problem import Problem
from twill.solvers import cpsat
from twill.solvers.ilp import add_variable, solve_ilp
from twill.solvers.modular import ModularModel
from twill.solvers.modulo.ims import iterative_modulo_schedule
from twill.solvers.smt import SmtSession
from twill.solvers.status import CheckResult, SolveStatus

__all__ = ["METHODS", "ModuloResult", "modulo_schedule", "stage_horizon"]


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
    low : int
        A proven lower bound on the least length at this II: ``length`` when ``OPTIMAL``; with
        ``FEASIBLE`` the least length lies in ``[low, length]`` (the critical path, or one past the
        longest length refuted); 0 when nothing is known.
    """

    ii: int
    status: SolveStatus
    start: Mapping[str, int]
    length: int
    wall_s: float
    n_vars: int
    n_constraints: int
    low: int = 0

    def __post_init__(self) -> None:
        if self.status == SolveStatus.FEASIBLE and self.low >= self.length:  # the bound meets the schedule
            object.__setattr__(self, "status", SolveStatus.OPTIMAL)
        if self.status == SolveStatus.OPTIMAL and self.low != self.length:
            object.__setattr__(self, "low", self.length)

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
    return 1 + sum(max(0, -(-(problem.least_latency(e) + ii - 1) // ii)) for e in problem.edges)


METHODS = ("smt", "ilp", "cpsat")

SMT_SLICE = 10.0
"""Seconds the ``"smt"`` method tries alone before it hands an undecided II to the ILP (a tuning choice:
every FA loop's modulo phase decides each II well inside it, benchmarks/results.md)."""


def modulo_schedule(
    problem: Problem, ii: int, *, method: str = "smt", backend: str = "cbc", smt: str = "yices",
    time_limit: float | None = None, tie_break: bool = True, bounds_after: float | None = None,
) -> ModuloResult:
    """Find a minimum-length modulo schedule of ``problem`` at initiation interval ``ii``.

    Parameters
    ----------
    problem : Problem
        The loop (time units of the problem).
    ii : int
        Initiation interval (>= 1).
    method : str
        ``"smt"`` (default): the same constraints over integer start times, decided by the SMT solver
        (difference logic), length minimized from the iterative modulo scheduler's schedule down;
        exact and faster than the ILP on fine time grids (measured on the 10-op synthetic loop of
        benchmarks/synthetic.py: 0.16 s, against 1.17 s for the ILP on CBC and 0.64 s on HiGHS). An II it
        does not decide in :data:`SMT_SLICE` seconds goes to the ILP for the rest of ``time_limit``.
        ``"ilp"``: the time-indexed ILP through PuLP. ``"cpsat"``: OR-Tools' CP-SAT (optional ``ortools``
        package; :mod:`twill.solvers.cpsat`), with a cumulative constraint per unit over the residues.
    backend : str
        MILP backend of the ILP method, ``"cbc"`` or ``"highs"``.
    smt : str
        SMT backend of the SMT method, ``"yices"`` or ``"z3"``.
    time_limit : float, optional
        Seconds for the whole call.
    tie_break : bool
        ILP method: run stage 2 (fewest live registers at the minimal length).
    bounds_after : float, optional
        Seconds after which a call that holds a schedule (the iterative modulo scheduler's at least)
        stops with ``FEASIBLE`` and the bounds ``[low, length]`` instead of proving the least length; a
        call without one goes on to ``time_limit``.

    Returns
    -------
    ModuloResult
        ``OPTIMAL`` with the least ``L``; ``INFEASIBLE`` when no ``L`` up to the stage horizon admits a
        modulo schedule (then none exists at this II); ``TIMEOUT`` or ``FEASIBLE`` when the time limit
        stopped the search (``FEASIBLE``: the shortest schedule found, the heuristic's at least, and
        ``low``, a proven lower bound on the least length).

    Raises
    ------
    ValueError
        ``ii < 1``.
    """
    if ii < 1:
        raise ValueError(f"II must be >= 1, got {ii}")
    if method not in METHODS:
        raise ValueError(f"method {method!r} is not one of {', '.join(METHODS)}")
    deadline = None if time_limit is None else time.monotonic() + time_limit
    low = max(critical_path(problem), max(op.cycles for op in problem.ops))
    seed = iterative_modulo_schedule(problem, ii)  # a heuristic upper bound for either method
    if seed is not None and bounds_after is not None:
        end = time.monotonic() + bounds_after
        deadline = end if deadline is None else min(deadline, end)
    if method == "ilp":
        return _ilp_schedule(problem, ii, low, seed, backend, deadline, tie_break)
    if method == "cpsat":
        return _cpsat_schedule(problem, ii, low, seed, deadline)
    # SMT first, for SMT_SLICE seconds; a loop it cannot decide in that time goes to the ILP, whose LP
    # relaxation often refutes a length quickly where the SMT search does not (the 45-op synthetic loop:
    # L <= 127 at II 126 undecided by Yices in 100 s, refuted by CBC in 8 s). Both are exact.
    now = time.monotonic()
    first = _smt_schedule(problem, ii, low, seed, smt, now + SMT_SLICE if deadline is None
                          else min(deadline, now + SMT_SLICE))
    if first.status in (SolveStatus.OPTIMAL, SolveStatus.INFEASIBLE) or (
            deadline is not None and time.monotonic() >= deadline):
        return first
    # the ILP goes on from what the SMT search proved and found
    second = _ilp_schedule(problem, ii, max(low, first.low), dict(first.start) if first.found else seed,
                           backend, deadline, tie_break=False)
    wall, low = first.wall_s + second.wall_s, max(first.low, second.low)
    if second.status in (SolveStatus.OPTIMAL, SolveStatus.INFEASIBLE) or not first.found or (
            second.found and second.length <= first.length):
        return dataclasses.replace(second, wall_s=wall, low=low)
    return dataclasses.replace(first, wall_s=wall, low=low)


def _ilp_schedule(problem: Problem, ii: int, low: int, seed: dict[str, int] | None, backend: str,
                  deadline: float | None, tie_break: bool) -> ModuloResult:
    """Least-length modulo schedule by the time-indexed ILP: down from the heuristic schedule ``seed``,
    or a scan of lengths when there is none."""
    probes = _Probes(problem, ii, backend, deadline, low)
    if seed is not None:
        found = probes.descend(seed, low)
        if found is None:
            return probes.result(SolveStatus.FEASIBLE, probes.best)
    else:
        found = probes.scan(low)
        if isinstance(found, SolveStatus):
            return probes.result(found, probes.best)
    if tie_break:
        probes.run(found, tie_break=True)
    return probes.result(SolveStatus.OPTIMAL, found)


def _smt_schedule(problem: Problem, ii: int, low: int, seed: dict[str, int] | None, backend: str,
                  deadline: float | None) -> ModuloResult:
    """Least-length modulo schedule by SMT: a short horizon first, the full stage horizon if needed.

    The iterative modulo scheduler's schedule ``seed`` (Rau), when it found one, is an upper bound: the first
    probe asks for one unit less than it, so a heuristic schedule that is already minimal costs one
    UNSAT proof instead of a bisection from the critical path (on the 45-op synthetic loop the
    bisection's probes far below the optimum did not finish in 100 s; the one probe takes seconds).
    """
    started = time.monotonic()
    full = ii * (stage_horizon(problem, ii) + 1) + max(op.cycles for op in problem.ops)
    seeded = None if seed is None else (seed, max(seed[op.name] + op.cycles for op in problem.ops))
    if seeded is not None and seeded[1] <= low:  # meets the lower bound: minimal, no solver needed
        return ModuloResult(ii, SolveStatus.OPTIMAL, seeded[0], seeded[1], time.monotonic() - started, 0, 0)
    horizons = sorted({min(full, max(2 * low, low + 2 * ii)), full})
    size = (0, 0)

    def stopped() -> ModuloResult:  # the deadline: the heuristic schedule, if any, is the best known
        return _best_known(problem, ii, [seed], low, time.monotonic() - started, size)

    for lmax in horizons:
        if deadline is not None and time.monotonic() >= deadline:  # stating the model takes time too
            return stopped()
        with SmtSession(backend) as sess:
            model = ModularModel(problem, ii, lmax, sess)
            model.completion(low)
            model.dependence()
            model.capacity()
            if not model.feasible:
                model.add(model.m.FALSE())
            size = (len(problem.ops) + 1, model.count)
            if seeded is not None and seeded[1] <= lmax:
                best, first = seeded, True  # a schedule of this horizon: no first check needed
            else:
                status = sess.check(deadline)
                if status == CheckResult.UNSAT:
                    low = max(low, lmax + 1)  # none within this horizon
                    continue
                if status != CheckResult.SAT:
                    return stopped()
                best, first = _smt_best(model, sess), False
            lo, proven = low, True
            while lo < best[1]:
                mid = best[1] - 1 if first else (lo + best[1]) // 2
                first = False
                sess.push()
                sess.add(model.m.LE(model.length, model.int_(mid)))
                status = sess.check(deadline)
                if status == CheckResult.SAT:
                    best = _smt_best(model, sess)
                elif status == CheckResult.UNSAT:
                    lo = mid + 1
                else:
                    proven = False
                    break
                sess.pop()
            status = SolveStatus.OPTIMAL if proven else SolveStatus.FEASIBLE
            return ModuloResult(ii, status, best[0], best[1], time.monotonic() - started, *size, low=lo)
    return ModuloResult(ii, SolveStatus.INFEASIBLE, {}, 0, time.monotonic() - started, *size, low=low)


def _cpsat_schedule(problem: Problem, ii: int, low: int, seed: dict[str, int] | None,
                    deadline: float | None) -> ModuloResult:
    """Least-length modulo schedule by CP-SAT over the full stage horizon
    (:func:`twill.solvers.cpsat.solve_modulo`);
    at the deadline the better of its schedule and the heuristic's ``seed``."""
    started = time.monotonic()
    horizon = ii * (stage_horizon(problem, ii) + 1)
    out = cpsat.solve_modulo(problem, ii, low=low, horizon=horizon, seed=seed, deadline=deadline)
    wall, size = time.monotonic() - started, (out.n_vars, out.n_constraints)
    if out.status in (SolveStatus.OPTIMAL, SolveStatus.INFEASIBLE):
        return ModuloResult(ii, out.status, out.start, out.length, wall, *size, low=out.low)
    return _best_known(problem, ii, [out.start or None, seed], out.low, wall, size)


def _best_known(problem: Problem, ii: int, schedules: list[Mapping[str, int] | None], low: int, wall: float,
                size: tuple[int, int]) -> ModuloResult:
    """A search stopped before its proof: ``FEASIBLE`` with the shortest of ``schedules`` (None entries
    skipped) and the proven bound ``low``, or ``TIMEOUT`` without any."""
    found = [(max(s[op.name] + op.cycles for op in problem.ops), dict(s)) for s in schedules if s]
    if not found:
        return ModuloResult(ii, SolveStatus.TIMEOUT, {}, 0, wall, *size, low=low)
    length, start = min(found, key=lambda f: f[0])
    return ModuloResult(ii, SolveStatus.FEASIBLE, start, length, wall, *size, low=low)


def _smt_best(model: ModularModel, sess: SmtSession) -> tuple[dict[str, int], int]:
    start = {n: sess.value(v) for n, v in model.s.items()}
    return start, max(start[op.name] + op.cycles for op in model.p.ops)


class _Probes:
    """Feasibility probes at fixed lengths; remembers the schedules found and the time spent."""

    def __init__(self, problem: Problem, ii: int, backend: str, deadline: float | None, low: int) -> None:
        self.p, self.ii, self.backend, self.deadline = problem, ii, backend, deadline
        self.low = low  # proven lower bound on the least length: raised by every refuted probe
        self.wall = 0.0
        self.size = (0, 0)
        self.schedules: dict[int, dict[str, int]] = {}
        self.best: int | None = None
        self.unconfirmed = 0  # MILP refutations the SMT check could not confirm in its slice (unused)
        self.wrong = 0  # MILP refutations the SMT check disproved with a schedule

    def keep(self, start: dict[str, int]) -> int:
        """Record a schedule; return its length."""
        length = max(start[op.name] + op.cycles for op in self.p.ops)
        self.schedules[length] = start
        self.best = length if self.best is None else min(self.best, length)
        return length

    def descend(self, seed: dict[str, int], low: int) -> int | None:
        """From a heuristic schedule, ask for a shorter one until the ILP proves none exists.

        Returns the least length, or None if a probe ran out of time (``best`` is then the shortest
        schedule found, not proven minimal).
        """
        length = self.keep(seed)
        while length > low:
            status = self.run(length - 1)
            if status is None:
                return None
            if not status:
                break
            length = self.best
        return length

    def scan(self, low: int) -> int | SolveStatus:
        """Without a heuristic schedule: scan ``L`` up from ``low`` for one II, then bisect up to the stage
        horizon. Returns the least length or the status that stopped the search."""
        high = self.ii * (stage_horizon(self.p, self.ii) + 1) + max(op.cycles for op in self.p.ops)
        for length in range(low, min(high, low + self.ii) + 1):
            status = self.run(length)
            if status is None:
                return SolveStatus.TIMEOUT
            if status:
                return self.best
        if low + self.ii >= high:
            return SolveStatus.INFEASIBLE
        status = self.run(high)
        if status is None:
            return SolveStatus.TIMEOUT
        if not status:
            return SolveStatus.INFEASIBLE
        lo = low + self.ii + 1
        while lo < self.best:
            mid = (lo + self.best) // 2
            status = self.run(mid)
            if status is None:
                return SolveStatus.TIMEOUT
            if not status:
                lo = mid + 1
        return self.best

    def run(self, length: int, *, tie_break: bool = False) -> bool | None:
        """True if a schedule of length at most ``length`` exists, False if not, None on timeout."""
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
            start = {n: round(e.value()) for n, e in t.items()}
            if tie_break:
                self.schedules[length] = start
            else:
                self.keep(start)
            return True
        if out.status == SolveStatus.INFEASIBLE:
            confirmed = _confirm(self.p, self.ii, length, self.deadline)
            if confirmed is None:  # not part of any proof: the probe counts as undecided
                self.unconfirmed += 1
                return None
            if confirmed is not True:  # the MILP solver's status was wrong: a schedule exists
                self.wrong += 1
                self.keep(confirmed)
                return True
            self.low = max(self.low, length + 1)
            return False
        return None if not tie_break else True

    def result(self, status: SolveStatus, length: int | None) -> ModuloResult:
        start = self.schedules.get(length, {}) if length is not None else {}
        if not start:
            status = SolveStatus.TIMEOUT if status != SolveStatus.INFEASIBLE else status
            return ModuloResult(self.ii, status, {}, 0, self.wall, *self.size, low=self.low)
        return ModuloResult(self.ii, status, start, length, self.wall, *self.size, low=self.low)


CONFIRM_SLICE_S = 10.0
"""Seconds the SMT check that confirms one MILP refutation may take (a tuning choice, as
:data:`SMT_SLICE`). A refutation it cannot confirm in that time is not used: the probe counts as
undecided, so no proof rests on the MILP solver's status alone (PuLP and CBC have open reports of
wrong "Infeasible" statuses)."""


def _confirm(problem: Problem, ii: int, length: int, deadline: float | None) -> bool | dict[str, int] | None:
    """Confirm that no modulo schedule of length ``<= length`` exists at ``ii`` with a second method
    (the SMT formulation of :class:`~twill.modular.ModularModel`, written apart from the MILP): True if
    it is UNSAT too, the schedule it found if it is not, None if undecided within :data:`CONFIRM_SLICE_S`
    (or the deadline)."""
    end = time.monotonic() + CONFIRM_SLICE_S
    if deadline is not None:
        end = min(end, deadline)
    with SmtSession("yices") as sess:
        model = ModularModel(problem, ii, length, sess)
        model.completion(1)
        model.dependence()
        model.capacity()
        if not model.feasible:
            return True
        status = sess.check(end)
        if status == CheckResult.UNSAT:
            return True
        if status == CheckResult.SAT:
            return _smt_best(model, sess)[0]
        return None


def _build(problem: Problem, ii: int, length: int):
    model = pulp.LpProblem(f"modulo_{problem.name}_II{ii}_L{length}", pulp.LpMinimize)
    x: dict[str, dict[int, pulp.LpVariable]] = {}
    t: dict[str, pulp.LpAffineExpression] = {}
    for i, op in enumerate(problem.ops):
        x[op.name] = {s: add_variable(model, f"x[{i}][{s}]", cat="Binary")
                      for s in range(length - op.cycles + 1)}
        model += pulp.lpSum(x[op.name].values()) == 1, f"one_{i}"
        t[op.name] = pulp.lpSum(s * var for s, var in x[op.name].items())
    _capacity(model, problem, ii, x)
    for e in problem.edges:
        if e.src == e.dst:
            if e.distance * ii < e.latency:
                model += pulp.lpSum([]) >= 1, f"dep_{e.index}"
            continue
        model += t[e.dst] - t[e.src] >= problem.least_latency(e) - e.distance * ii, f"dep_{e.index}"
    model.setObjective(pulp.lpSum([]))
    return model, t, _lifetime(model, problem, ii, t, length)


def _capacity(model: pulp.LpProblem, problem: Problem, ii: int, x: Mapping[str, Mapping[int, Any]]) -> None:
    for unit, cap in problem.resources.units.items():
        rows: list[dict[pulp.LpVariable, int]] = [{} for _ in range(ii)]
        for op in problem.ops:
            for name, offset, cycles, count in problem.reservations(op.name):
                if name != unit:
                    continue
                for s, var in x[op.name].items():
                    for c in range(offset, offset + cycles):
                        row = rows[(s + c) % ii]
                        row[var] = row.get(var, 0) + count
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
        end = add_variable(model, f"end[{i}]", 0, top, cat="Integer")
        model += end >= t[op.name] + op.cycles, f"live_self_{i}"
        for e in problem.out_edges(op.name):
            if e.carrier != "register":
                continue
            hold = 0 if e.inplace or not problem.op(e.dst).is_async else problem.op(e.dst).cycles
            model += end >= t[e.dst] + e.distance * ii + hold, f"live_{i}_{e.index}"
        terms.append(op.regs * (end - t[op.name]))
    return pulp.lpSum(terms) if terms else None
