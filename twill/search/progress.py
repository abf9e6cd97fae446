"""What :func:`twill.schedule` reports while it searches: one typed :class:`ProgressEvent` per step.

A ``progress`` callback receives the events in the order the search makes them: ``BOUNDS`` once (after
the ``SPENT`` of the phases before the search: bounds, normalization), then per
II or range of IIs ``PHASE`` (a phase begins), ``SPENT`` (seconds a phase took), ``ATTEMPT`` (an II and
window decided), ``RANGE`` (a range query's answer), ``II`` (the search moves to an II) and
``MODULO_BOUNDS`` (an II's modulo phase ran out of its slice). Fields an event kind does not carry are
``None``.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["EventKind", "Progress", "ProgressEvent"]


class EventKind(str, enum.Enum):
    """The kinds of :class:`ProgressEvent` (the value is the kind's name in lower case)."""

    BOUNDS = "bounds"
    """The lower bounds: ``res_mii``, ``rec_mii``, ``mii``."""
    II = "ii"
    """The search moves to ``ii``."""
    PHASE = "phase"
    """A phase begins: ``phase`` (``modulo``, ``joint``, ``range``, ``closing``) at ``ii``, or over the
    IIs ``lo .. hi``, with ``stages`` when it has a window."""
    SPENT = "spent"
    """``phase`` took ``wall_s`` seconds in ``calls`` solver calls."""
    ATTEMPT = "attempt"
    """``ii`` with ``stages`` was decided by ``phase``: ``status`` (``sat``, ``unsat``, ``timeout`` ...)."""
    RANGE = "range"
    """A range query over ``lo .. hi`` up to ``stages``: ``status``, every II up to ``refuted`` refuted,
    ``least`` the least II with a schedule when it found one."""
    MODULO_BOUNDS = "modulo_bounds"
    """The modulo phase of ``ii`` ran out of its slice and hands over its bound ``low`` and ``length``."""


@dataclass(frozen=True)
class ProgressEvent:
    """One step of the search, as :func:`twill.schedule` reports it to its ``progress`` callback.

    Attributes
    ----------
    kind : EventKind
        What happened (the kind says which of the other fields are set).
    elapsed_s : float
        Seconds since the search began.
    ii, stages : int, optional
        The II and the window (stage count).
    phase : str, optional
        ``modulo``, ``joint``, ``range``, ``closing`` (also the phases of ``SPENT``: ``bounds`` ...).
    lo, hi : int, optional
        The range of IIs of a range query or the closing phase.
    status : str, optional
        A decision's status (:class:`twill.solvers.status.CheckResult` values: ``sat``, ``unsat``, ...).
    refuted, least : int, optional
        A range query's answer: every II in ``lo .. refuted`` has no schedule; ``least`` has one.
    res_mii, rec_mii, mii : int, optional
        The bounds (``BOUNDS``), in the problem's time units.
    low, length : int, optional
        The modulo phase's bound on ``L`` and the length of its schedule (``MODULO_BOUNDS``).
    wall_s : float, optional
        Seconds a phase took (``SPENT``).
    calls : int, optional
        Solver calls of that phase (``SPENT``).
    """

    kind: EventKind
    elapsed_s: float
    ii: int | None = None
    stages: int | None = None
    phase: str | None = None
    lo: int | None = None
    hi: int | None = None
    status: str | None = None
    refuted: int | None = None
    least: int | None = None
    res_mii: int | None = None
    rec_mii: int | None = None
    mii: int | None = None
    low: int | None = None
    length: int | None = None
    wall_s: float | None = None
    calls: int | None = None


Progress = Callable[[ProgressEvent], None]
"""The type of a ``progress`` callback."""
