"""The bookkeeping of one search (:class:`Run`): attempts, phase times, the deadline, progress events."""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from twill.model.bounds import Bounds
from twill.model.problem import Problem
from twill.schedule import (
    Attempt,
    Schedule,
)
from twill.search.progress import EventKind, Progress, ProgressEvent

__all__ = ["MODULO_SLICE_S", "Run", "with_note"]

logger = logging.getLogger(__name__)


MODULO_SLICE_S = 20.0
"""Seconds the modulo phase of one II may take before the search goes on with the bounds it has on the
least modulo length ``LEN(M)`` (``[low, length]``): the joint windows then run from ``ceil(low / II)`` to
``ceil(length / II) + stage_slack``, a superset of those the exact ``LEN(M)`` gives. A tuning choice:
every FA loop decides each II's ``LEN(M)`` in under 1.5 s; the 45-op synthetic loop took 16-19 s at II 126
and 114 s at II 127 (benchmarks/results/modulo_methods.md, benchmarks/results/solve_times_changes.md)."""


@dataclass
class Run:
    """Mutable bookkeeping of one search."""

    problem: Problem
    bound: Bounds
    deadline: float | None
    progress: Progress | None
    started: float
    attempts: list[Attempt]
    phase_time: dict[str, float]
    phase_calls: dict[str, int]
    timed_out: bool = False
    interrupted: bool = False
    window_limit: float | None = None
    builds: list[tuple[int, float]] = field(default_factory=list)  # (stages, seconds) per joint formula
    ranges: bool = True
    per_ii: list[float] = field(default_factory=list)  # seconds of each II decided one by one
    range_build: float = 0.0  # seconds to state the last range formula
    bounded: list[tuple[int, int, int]] = field(default_factory=list)  # (II, low, length): LEN(M) not proven
    methods: str = ""  # the joint solver and modulo method, for the certificate
    method: str = "direct"  # how a joint question is decided: "direct" or "decompose"
    first_window: dict[int, int] = field(default_factory=dict)  # II -> first window the modulo bound allows
    range_covered: dict[int, int] = field(default_factory=dict)  # II -> stages a range query refuted up to
    modulo_refuted: set[int] = field(default_factory=set)  # IIs without any modulo schedule
    stage_bounds: dict[int, int] = field(default_factory=dict)  # II -> stage_bound (computed once)
    found: tuple | None = None  # the schedule found before the closing phase, for Ctrl-C there
    answer_by: float | None = None  # monotonic time the whole call must return by (the fallback's end)
    limit_ii: int = 0  # the largest II the search asks (max_ii, or the sequential II)
    seed_done: bool = False  # a window was seeded by probes (twill.search.seed): once per search
    incumbent: tuple | None = None  # the seeding probes' schedule when not at the seeded II (an upper bound)
    seed_notes: dict[int, str] = field(default_factory=dict)  # II -> how seeding found its schedule

    def note(self, attempt: Attempt, quiet: bool = False) -> None:
        """Record ``attempt``; report it (an ``attempt`` progress event) unless ``quiet``."""
        self.attempts.append(attempt)
        logger.debug("II=%d stages=%s %s %s in %.2fs %s", attempt.ii, attempt.stages, attempt.phase,
                     attempt.status, attempt.wall_s, attempt.reason)
        if not quiet:
            self.emit(EventKind.ATTEMPT, ii=attempt.ii, stages=attempt.stages, phase=attempt.phase,
                      status=attempt.status)

    def emit(self, kind: EventKind, **info: Any) -> None:
        """Report a :class:`~twill.search.progress.ProgressEvent` of ``kind`` with the fields ``info``."""
        if self.progress is not None:
            self.progress(ProgressEvent(kind, time.monotonic() - self.started, **info))

    def spend(self, phase: str, seconds: float, calls: int = 1) -> None:
        """Add ``seconds`` and ``calls`` to ``phase`` and report them (a ``spent`` progress event)."""
        self.phase_time[phase] = self.phase_time.get(phase, 0.0) + seconds
        self.phase_calls[phase] = self.phase_calls.get(phase, 0) + calls
        self.emit(EventKind.SPENT, phase=phase, wall_s=seconds, calls=calls)

    def left(self) -> float | None:
        """Seconds until the deadline (never negative), or None without a time limit."""
        return None if self.deadline is None else max(0.0, self.deadline - time.monotonic())

    def build_estimate(self, stages: int) -> float:
        """Seconds that stating the joint formula of a ``stages``-stage window should take: the last one
        of that many stages, else the last one scaled by the stage count (the copies grow with it); 0
        before the first."""
        same = [sec for n, sec in self.builds if n == stages]
        if same:
            return same[-1]
        if self.builds:
            n, sec = self.builds[-1]
            return sec * stages / n
        return 0.0

    def expired(self) -> bool:
        """True (and the run marked timed out) once the deadline has passed: no solver call may start."""
        if self.deadline is not None and time.monotonic() >= self.deadline:
            self.timed_out = True
            return True
        return False


def with_note(sched: Schedule, note: str) -> Schedule:
    """``sched`` with ``note`` appended to its certificate's notes."""
    cert = dataclasses.replace(sched.certificate, notes=(*sched.certificate.notes, note))
    return dataclasses.replace(sched, certificate=cert)
