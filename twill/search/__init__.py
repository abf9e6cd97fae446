"""The search over II and L (the paper's Algorithm 1, :mod:`.algorithm1`): drives the solvers and returns a
verified :class:`~twill.schedule.Schedule`. Re-exports :func:`schedule`, :data:`STRATEGIES` and the
progress events (:mod:`.progress`), so the old ``from twill.search import schedule`` keeps working."""

from twill.search.algorithm1 import STRATEGIES, schedule
from twill.search.progress import EventKind, ProgressEvent

__all__ = ["STRATEGIES", "EventKind", "ProgressEvent", "schedule"]
