"""The status vocabulary of the solver layers: what one solver call answered.

An ILP or CP-SAT call answers a :class:`SolveStatus`, a satisfiability check (SMT, or CP-SAT used as
one) a :class:`CheckResult`. Both flow up into :mod:`twill.search`, which records each refuted II in the
certificate; only the API edge (:func:`twill.schedule`) turns them into exceptions. ``TIMEOUT`` and
``INTERRUPTED`` are undecided answers and are never counted as refutations.

    >>> SolveStatus("infeasible") is SolveStatus.INFEASIBLE, CheckResult.UNSAT.value
    (True, 'unsat')
"""

from __future__ import annotations

from enum import Enum

__all__ = ["CheckResult", "SolveStatus"]


class SolveStatus(str, Enum):
    """Outcome of one optimization call (MILP or CP-SAT)."""

    OPTIMAL = "optimal"
    FEASIBLE = "feasible"  # a solution, not proven optimal (time limit)
    INFEASIBLE = "infeasible"
    TIMEOUT = "timeout"  # time limit hit with no solution and no proof


class CheckResult(str, Enum):
    """Outcome of one satisfiability check."""

    SAT = "sat"
    UNSAT = "unsat"
    TIMEOUT = "timeout"
    INTERRUPTED = "interrupted"
