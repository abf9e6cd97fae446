"""What a joint solve at one ``(II, n)`` answers, whichever encoding decided it (SMT or CP-SAT): the goals
in their order and the :class:`JointResult`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from twill.solvers.status import CheckResult

__all__ = ["GOALS", "GOAL_KEYS", "TIEBREAKS", "TIEBREAK_SLICE_S", "JointResult", "goal_deadline"]

TIEBREAKS = ("barriers", "handoff_bytes")
"""The last goals, tie-breaks the hardware pays (:mod:`twill.model.exchange`): among schedules equal in
the earlier goals, the fewest mbarrier pairs between warp groups (one per producer and reader group),
then the fewest bytes handed through shared memory. They never change II or L, nor a proof: each gets
at most :data:`TIEBREAK_SLICE_S` seconds, a schedule stays the best found when its slice ends, and
``proven_optimal`` does not depend on them (the certificate notes one not proven minimal)."""

TIEBREAK_SLICE_S = 2.0
"""Seconds each tie-break goal may take (a time slice of the search's deadline, never a proof of
anything: a goal cut by it keeps the best schedule found, with a note)."""

GOALS = ("length", "groups", "handoffs", "registers", "smem", *TIEBREAKS)
"""Secondary objectives at a fixed II, minimized in this order: the length ``L`` (shortest prologue and
epilogue, as Algorithm 1), the number of warp groups, the total hand-off latency between groups (the
communication the model prices only approximately), the register file used (threads x budget), and the
shared memory the buffers allocate (:func:`twill.liveness.smem_footprint`: bytes x ring depth summed
over the buffers; a load read a stage later than it could be costs a ring slot for nothing), then the
:data:`TIEBREAKS`. Schedules equal in all seven are told apart by the solver's first model of the
canonical formula (ops by name, edges by :func:`twill.problem.edge_key`): the same for the same graph,
whatever order it was built in."""

GOAL_KEYS = {"length": "length", "groups": "n_groups", "handoffs": "handoffs", "registers": "reg_total",
             "smem": "smem", "barriers": "barriers", "handoff_bytes": "handoff_bytes"}
"""The key of each goal's value in an extracted model (both encodings)."""


@dataclass(frozen=True)
class JointResult:
    """Outcome of the joint solve at one ``(II, n)``.

    Attributes
    ----------
    ii, stages : int
        The initiation interval and the stage window ``n`` (of the schedule found, when ``SAT``; the
        largest window asked for otherwise).
    status : CheckResult
        ``SAT`` (a schedule), ``UNSAT`` (proof that none exists in the window), ``TIMEOUT`` or
        ``INTERRUPTED`` (no answer).
    start : mapping of str to int
        Start of each op in iteration 0.
    group : mapping of str to int
        Warp group of each op (0 is the variable-latency group when there is one).
    budgets : mapping of int to int
        ``setmaxnreg`` budget (registers per thread) of each used group, as small as the model allows.
    group_warps : mapping of int to int
        Warps of each used group.
    length : int
        ``L``.
    proven : mapping of str to bool
        For each goal of :data:`GOALS` tightened, whether it was proven minimal.
    checks : int
        Solver calls made.
    wall_s, build_s : float
        Seconds in total and in building the formula.
    n_terms : int
        Assertions added.
    length_low : int
        A proven lower bound on ``L``, every shorter length refuted: with a schedule, ``length`` itself
        once the length goal is proven; otherwise one past the windows refuted (``stages * ii + 1`` when
        ``UNSAT``, the start of the window a deadline stopped).
    interrupted : bool
        Ctrl-C arrived while the secondary objectives were tightened: the schedule is the best found
        so far (``proven`` says which goals were not finished).
    """

    ii: int
    stages: int
    status: CheckResult
    start: Mapping[str, int] = field(default_factory=dict)
    group: Mapping[str, int] = field(default_factory=dict)
    budgets: Mapping[int, int] = field(default_factory=dict)
    group_warps: Mapping[int, int] = field(default_factory=dict)
    length: int = 0
    proven: Mapping[str, bool] = field(default_factory=dict)
    checks: int = 0
    wall_s: float = 0.0
    build_s: float = 0.0
    n_terms: int = 0
    interrupted: bool = False
    length_low: int = 0


def goal_deadline(goal: str, deadline: float | None, now: float) -> float | None:
    """The deadline a goal's solves run under: the caller's, and for a tie-break goal at most
    :data:`TIEBREAK_SLICE_S` seconds from ``now`` (``time.monotonic()`` values).

    >>> goal_deadline("smem", 100.0, 10.0), goal_deadline("barriers", 100.0, 10.0)
    (100.0, 12.0)
    >>> goal_deadline("barriers", None, 10.0)
    12.0
    """
    if goal not in TIEBREAKS:
        return deadline
    end = now + TIEBREAK_SLICE_S
    return end if deadline is None else min(deadline, end)
