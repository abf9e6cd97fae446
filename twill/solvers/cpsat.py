"""OPTIMAL-MODULO-SCHEDULE on Google OR-Tools' CP-SAT solver (the optional ``modulo="cpsat"`` method).

The constraints are those of :mod:`twill.solvers.modulo.methods`'s other methods: integer start times,
``start[v] + δ II >=
start[u] + d`` per edge (``d`` from :meth:`~twill.model.problem.Problem.least_latency`), and every
unit's capacity
modulo II over :meth:`~twill.model.problem.Problem.reservations` (the reservation tables and the SMEM-port
traffic of values that always cross warp groups). The capacity is stated with CP-SAT's own scheduling
constraint: each reservation's residue ``(start + offset) mod II`` is a variable (``AddModuloEquality``),
and one cumulative per unit holds two copies of every reservation's interval, at the residue and one II
later, over ``[0, 3 II)``; the load at a time ``t`` in ``[II, 2 II)`` is then the modular reservation
table's load at ``t - II``, and elsewhere a part of it, so the cumulative holds exactly when the table
fits. A reservation of ``c >= II`` cycles adds
``count * (c // II)`` to every slot. ``L`` is minimized; CP-SAT proves the optimum with its own bound.

Measured (benchmarks/results/modulo_methods.md): the least length of the 45-op synthetic loop at II 126
and 127 in 0.02 s each, where the SMT method takes 16 s and does not finish in 120 s; on the FA loops
0.01-1 s, as the SMT method.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from dataclasses import dataclass
from typing import Any

from twill.errors import SolverUnavailableError
from twill.model.problem import Problem
from twill.solvers.smt import start_holding_ctrl_c
from twill.solvers.status import SolveStatus

__all__ = ["CPSAT_WORKERS", "CpsatOutcome", "CpsatRunner", "available", "load_cp_model", "solve_modulo"]

CPSAT_WORKERS = 1
"""CP-SAT search workers per solve. One, with a fixed random seed, so an answer does not depend on the
machine's core count or on timing (several workers race, and the schedule among equal optima would);
2 or 8 workers did not make the joint problem faster (benchmarks/results/joint_methods.md)."""

_POLL_S = 0.05


@dataclass(frozen=True)
class CpsatOutcome:
    """What :func:`solve_modulo` found.

    Attributes
    ----------
    status : SolveStatus
        ``OPTIMAL``, ``FEASIBLE`` (time limit; ``start`` is the best found), ``INFEASIBLE`` (no schedule up
        to the horizon) or ``TIMEOUT`` (nothing found, nothing proven).
    start : dict of str to int
        Start time of each op (empty without a schedule).
    length : int
        ``max(start + cycles)`` (0 without a schedule).
    low : int
        A proven lower bound on the least length (the objective bound CP-SAT proved, at least ``low``
        given).
    n_vars, n_constraints : int
        Model size.
    """

    status: SolveStatus
    start: dict[str, int]
    length: int
    low: int
    n_vars: int
    n_constraints: int


def available() -> bool:
    """True if the ``ortools`` package can be imported."""
    try:
        import ortools.sat.python.cp_model  # noqa: F401
    except ImportError:
        return False
    return True


def load_cp_model(what: str = "modulo method 'cpsat'", others: str = "smt, ilp") -> Any:
    """OR-Tools' ``cp_model`` module; :class:`SolverUnavailableError` naming ``what`` needs it and the
    ``others`` that do not, when ortools is not installed."""
    try:
        from ortools.sat.python import cp_model
    except ImportError as exc:
        raise SolverUnavailableError(f"{what} needs the ortools package (pip install 'twill[cpsat]' or pip "
                                     f"install ortools); available: {others}") from exc
    return cp_model


class CpsatRunner:
    """CP-SAT solves, each in a worker thread, stopped at a deadline or on Ctrl-C (then re-raised once
    the search has stopped). ``cp`` is the ``cp_model`` module (:func:`load_cp_model`); ``solves``
    counts the calls."""

    def __init__(self, cp: Any) -> None:
        self.cp = cp
        self.solves = 0

    def solve(self, model: Any, deadline: float | None) -> tuple[Any, Any]:
        """Solve ``model`` until ``deadline`` (a ``time.monotonic()`` value; None: no limit); returns the
        CP-SAT status and the solver holding the answer.

        Raises
        ------
        KeyboardInterrupt
            Ctrl-C, after the search has stopped.
        """
        solver = self.cp.CpSolver()
        solver.parameters.num_workers = CPSAT_WORKERS
        solver.parameters.random_seed = 0
        solver.parameters.catch_sigint_signal = False
        if deadline is not None:
            solver.parameters.max_time_in_seconds = max(0.0, deadline - time.monotonic())
        box: dict[str, Any] = {}
        done = threading.Event()

        def worker() -> None:
            try:
                box["status"] = solver.Solve(model)
            except BaseException as exc:  # handed to the caller's thread
                box["err"] = exc
            finally:
                done.set()

        thread = threading.Thread(target=worker, name="twill-cpsat", daemon=True)
        self.solves += 1
        try:
            start_holding_ctrl_c(thread)
            while not done.is_set():
                done.wait(_POLL_S)
        except KeyboardInterrupt:
            while thread.ident is not None and not done.is_set():
                solver.StopSearch()
                with contextlib.suppress(KeyboardInterrupt):
                    done.wait(_POLL_S)
            raise
        if "err" in box:
            raise box["err"]
        return box["status"], solver


def solve_modulo(problem: Problem, ii: int, *, low: int, horizon: int, seed: dict[str, int] | None = None,
                 deadline: float | None = None) -> CpsatOutcome:
    """Least-length modulo schedule of ``problem`` at ``ii`` with every start in ``[0, horizon]``.

    ``low`` is a known lower bound on the length (the critical path); ``seed``, a modulo schedule, is
    given to CP-SAT as a hint. One search worker with a fixed random seed, so the answer does not depend
    on the machine's core count. Times are in the problem's units; ``deadline`` is a ``time.monotonic()``
    value.

    Raises
    ------
    SolverUnavailableError
        ``ortools`` is not installed.
    KeyboardInterrupt
        Ctrl-C, after the search has stopped.
    """
    cp_model = load_cp_model()
    m = cp_model.CpModel()
    most = max(op.cycles for op in problem.ops)
    start = {op.name: m.NewIntVar(0, horizon, f"s[{op.name}]") for op in problem.ops}
    length = m.NewIntVar(max(low, most), horizon + most, "L")
    for op in problem.ops:
        m.Add(length >= start[op.name] + op.cycles)
    for e in problem.edges:
        if e.src == e.dst:  # a self edge needs delta * II >= d, whatever the start
            if e.distance * ii < e.latency:
                return CpsatOutcome(SolveStatus.INFEASIBLE, {}, 0, low, 0, 0)
            continue
        m.Add(start[e.dst] + e.distance * ii >= start[e.src] + problem.least_latency(e))
    full: dict[str, int] = {}
    parts: dict[str, list[tuple[Any, int]]] = {}
    for op in problem.ops:
        # the reservation table and the SMEM-port traffic of values that always cross warp groups
        for unit, offset, cycles, count in problem.reservations(op.name):
            whole, rest = divmod(cycles, ii)
            full[unit] = full.get(unit, 0) + whole * count
            if not rest:
                continue
            residue = m.NewIntVar(0, ii - 1, f"r[{op.name},{unit},{offset}]")
            shifted = m.NewIntVar(offset, horizon + offset, "")
            m.Add(shifted == start[op.name] + offset)
            m.AddModuloEquality(residue, shifted, ii)
            for k in (0, ii):
                at = m.NewIntVar(k, k + ii - 1, "")
                m.Add(at == residue + k)
                parts.setdefault(unit, []).append((m.NewFixedSizeIntervalVar(at, rest, ""), count))
    for unit in sorted(set(full) | set(parts)):
        cap = problem.resources.units.get(unit, 0) - full.get(unit, 0)
        if cap < 0:
            return CpsatOutcome(SolveStatus.INFEASIBLE, {}, 0, low, 0, 0)
        if parts.get(unit):
            m.AddCumulative([iv for iv, _ in parts[unit]], [c for _, c in parts[unit]], cap)
    if seed is not None:
        for name, var in start.items():
            m.AddHint(var, seed[name])
    m.Minimize(length)
    proto = m.Proto()
    size = (len(proto.variables), len(proto.constraints))
    if deadline is not None and deadline <= time.monotonic():
        return CpsatOutcome(SolveStatus.TIMEOUT, {}, 0, low, *size)
    status, solver = CpsatRunner(cp_model).solve(m, deadline)
    if status == cp_model.INFEASIBLE:
        return CpsatOutcome(SolveStatus.INFEASIBLE, {}, 0, low, *size)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return CpsatOutcome(SolveStatus.TIMEOUT, {}, 0, low, *size)
    found = {name: solver.Value(var) for name, var in start.items()}
    span = max(found[op.name] + op.cycles for op in problem.ops)
    bound = min(span, max(low, math.ceil(solver.BestObjectiveBound() - 1e-6)))
    solved = SolveStatus.OPTIMAL if status == cp_model.OPTIMAL else SolveStatus.FEASIBLE
    return CpsatOutcome(solved, found, span, bound, *size)
