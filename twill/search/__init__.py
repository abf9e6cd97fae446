"""The search over II and L (the paper's Algorithm 1, :mod:`.algorithm1`): drives the solvers and returns a
verified :class:`~twill.schedule.Schedule`. Re-exports :func:`schedule` and :data:`STRATEGIES`, so the old
``from twill.search import schedule`` keeps working."""

from twill.search.algorithm1 import STRATEGIES, schedule

__all__ = ["STRATEGIES", "schedule"]
