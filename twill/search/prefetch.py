"""The prefetch depth of streaming loads: the least that hides their latency (:func:`prefetch_needed`) and
the loop that solves again at that depth (:func:`with_prefetch`)."""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable

from twill.errors import InfeasibleError, ResourceError, TwillWarning
from twill.model.liveness import memory_intervals
from twill.schedule import Schedule
from twill.search.run import with_note

__all__ = ["prefetch_needed", "with_prefetch"]


def prefetch_needed(sched: Schedule) -> int:
    """Least prefetch depth (extra buffers per streaming load, >= 1) that hides every streaming load's
    latency in ``sched``.

    A streaming load's SMEM buffer lives from ``start - prefetch * II`` to the end of its last reader
    (:func:`twill.liveness.memory_intervals`), so it has ``R = prefetch + ceil((end - start) / II)``
    ring slots. The producer issues the copy of iteration ``i`` as soon as the slot of iteration
    ``i - R`` is released (``end - R * II`` in iteration ``i``'s frame: the empty-barrier wait, paper
    §3.2), and the data must land before the first reader starts: ``R * II >= end + latency -
    first_read``, with the op's ``latency`` (``cost.tma_latency`` for a TMA load). Time in the
    schedule's (normalized) units; the simulator's ring (:func:`twill.simulate.simulate`) follows the
    same rule.
    """
    p, ii, start = sched.problem, sched.ii, sched.start
    ends = {iv.what: iv.end for iv in memory_intervals(p, ii, start, sched.group, "smem")}
    need = 1
    for name in sorted(p.streaming):
        reads = [start[e.dst] + e.distance * ii for e in p.out_edges(name)]
        if not reads or name not in ends:
            continue
        slots_for_life = math.ceil((ends[name] - start[name]) / ii)
        ring = math.ceil((ends[name] + p.op(name).latency - min(reads)) / ii)
        need = max(need, ring - slots_for_life)
    return need


def with_prefetch(solve: Callable[[int, float | None], Schedule], prefetch: int | None,
                  time_limit: float | None, started: float) -> Schedule:
    """Solve at the prefetch depth asked for, or find the least depth that hides the streaming loads.

    Parameters
    ----------
    solve : callable
        ``solve(depth, time_limit)``: one search at that prefetch depth (extra buffers per streaming load)
        and time limit in seconds (``None``: none).
    prefetch : int, optional
        The depth asked for; ``None`` starts at 1 and solves again at :func:`prefetch_needed`'s depth
        while the schedule found leaves part of a streaming load's latency exposed.
    time_limit : float, optional
        Seconds for all the solves together, counted from ``started`` (a ``time.monotonic()`` value).

    Returns
    -------
    Schedule
        The last schedule, its certificate noting the depth and why (warns with :class:`TwillWarning`
        when the depth asked for is too shallow).
    """
    first_limit = None if time_limit is None else max(0.1, time_limit - (time.monotonic() - started))
    if prefetch is not None:
        sched = solve(prefetch, first_limit)
        need = prefetch_needed(sched)
        if sched.problem.streaming and need > prefetch:
            sched = with_note(sched, f"prefetch: the {prefetch} extra buffer(s) asked for leave part of the "
                                  f"streaming loads' latency exposed at II {sched.ii} (it takes {need} to "
                                  f"hide it); the II assumes it hidden, so the loop runs slower (twill "
                                  f"simulate shows by how much)")
            warnings.warn(sched.certificate.notes[-1], TwillWarning, stacklevel=3)
        return sched
    sched, depth = solve(1, first_limit), 1
    shallow: list[str] = []  # the depths solved and found too shallow, for the certificate
    while sched.problem.streaming:
        need = prefetch_needed(sched)
        if need <= depth:
            before = f" (solved again: {', '.join(shallow)})" if shallow else ""
            claim = ("heuristic (see above)" if sched.certificate.heuristic
                     else "optimal for this depth")
            return with_note(sched, f"prefetch: {depth} extra buffer(s) per streaming load, the least that "
                                 f"hides their latency at this II{before}; the answer is {claim}")
        left = None if time_limit is None else time_limit - (time.monotonic() - started)
        if left is not None and left <= 0:
            return with_note(sched, f"prefetch: depth {depth} does not hide the streaming loads' latency "
                                 f"(they need {need}); the time limit stopped the solve at depth {need}")
        try:
            deeper = solve(need, left)
        except (InfeasibleError, ResourceError) as exc:  # the deeper rings do not fit, or time ran out
            return with_note(sched, f"prefetch: depth {depth} does not hide the streaming loads' latency, "
                                    f"and "
                                 f"with the {need} buffers that would there is no schedule ({exc}); this "
                                 f"schedule leaves part of the load latency exposed")
        shallow.append(f"depth {depth} at II {sched.ii} was too shallow")
        sched, depth = deeper, need
    return sched
