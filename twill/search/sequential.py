"""The any-time fallback's schedule of last resort that heeds registers and SMEM: the ops one after
another in an order that keeps few values live, each streaming load just before its first reader, and the
warp groups chosen for those times by :func:`twill.solvers.assign.assign_groups`.

The split rules of :mod:`twill.search.fallback` fix the groups first and the times after; on a loop whose
registers leave little room (the 60-op synthetic loop: four 64-register accumulators, and 26 registers of
overhead per group, in a 512-per-thread register file) every such split fails verification at every II
(a group holds more than 255 registers per thread, the budgets overflow the register file, or every TMA
buffer's second copy is live at once), so the search stopped by its limit had nothing to return.
Here the times come first, chosen so that any group assignment keeps them valid, and the assignment is
then a small exact problem over the registers and SMEM those times leave.
"""

from __future__ import annotations

import math
import time

import networkx as nx

from twill.model.problem import Edge, Problem
from twill.solvers.assign import assign_groups

__all__ = ["SEQUENTIAL_HOW", "oldest_first_order", "register_order", "sequential_schedule",
           "sequential_times"]

SEQUENTIAL_HOW = ("a schedule without overlap (ops one after another, few values live), its warp groups "
                  "chosen for the registers and SMEM")
"""How :func:`sequential_schedule`'s answer is described in the certificate's note."""


def _worst_delay(p: Problem, e: Edge) -> int:
    """The delay ``e`` needs whichever groups its ends get: its latency or its crossing delay."""
    return max(e.latency, p.crossing_delay(e))


def register_order(p: Problem) -> list[str] | None:
    """The ops in a topological order of the distance-0 edges that keeps few register values live: at
    each step the ready op whose placement adds the fewest tracked registers (its value, less the values
    it reads last), then the earliest in problem order; an op with no distance-0 predecessor (a streaming
    load) is placed only just before its first reader, or at the end if it has none. None if the
    distance-0 edges have a cycle. Depends only on the problem (names and op order)."""
    forward = nx.DiGraph()
    forward.add_nodes_from(p.names)
    forward.add_edges_from((e.src, e.dst) for e in p.edges if e.distance == 0 and e.src != e.dst)
    if not nx.is_directed_acyclic_graph(forward):
        return None
    index = {n: i for i, n in enumerate(p.names)}
    preds = {n: set(forward.predecessors(n)) for n in p.names}
    sources = {n for n in p.names if not preds[n]}
    readers = {n: {e.dst for e in p.out_edges(n)
                   if e.carrier == "register" and e.dst != n and e.distance == 0} for n in p.names}
    carried = {n for n in p.names
               if any(e.carrier == "register" and e.distance > 0 for e in p.out_edges(n))}
    res = p.resources
    done: set[str] = set()
    order: list[str] = []

    def place(n: str) -> None:
        for s in sorted(preds[n] - done, key=index.__getitem__):  # only sources are left undone here
            place(s)
        order.append(n)
        done.add(n)

    def growth(n: str) -> int:
        own = p.op(n).regs if res.tracked(p.op(n).regs) and (readers[n] or n in carried) else 0
        freed = sum(p.op(v).regs for v in preds[n] if res.tracked(p.op(v).regs) and v not in carried
                    and readers[v] - done <= {n})
        return own - freed

    while len(done) < len(p.names):
        ready = [n for n in p.names if n not in done and n not in sources
                 and all(q in done or q in sources for q in preds[n])]
        if not ready:
            for n in sorted(set(p.names) - done, key=index.__getitem__):
                place(n)
            break
        place(min(ready, key=lambda n: (growth(n), index[n])))
    return order


def oldest_first_order(p: Problem) -> list[str] | None:
    """The ops in a topological order of the distance-0 edges that finishes what it started: the next
    target is a reader of the oldest tracked register value still waiting for one (the reader with the
    fewest ops left before it, then the earliest in problem order; with no value waiting, the op with
    the fewest ops left before it), placed after its own unplaced predecessors (recursively, the one
    with the fewest ops left before it first). None if the distance-0 edges have a cycle. Depends only
    on the problem (names and op order)."""
    forward = nx.DiGraph()
    forward.add_nodes_from(p.names)
    forward.add_edges_from((e.src, e.dst) for e in p.edges if e.distance == 0 and e.src != e.dst)
    if not nx.is_directed_acyclic_graph(forward):
        return None
    index = {n: i for i, n in enumerate(p.names)}
    ancestors = {n: nx.ancestors(forward, n) for n in p.names}
    readers = {n: {e.dst for e in p.out_edges(n)
                   if e.carrier == "register" and e.dst != n and e.distance == 0} for n in p.names}
    done: set[str] = set()
    order: list[str] = []

    def cost(n: str) -> tuple[int, int]:
        return len(ancestors[n] - done), index[n]

    def place(n: str) -> None:
        for q in sorted(forward.predecessors(n), key=cost):
            if q not in done:
                place(q)
        order.append(n)
        done.add(n)

    while len(done) < len(p.names):
        waiting = [v for v in order if p.resources.tracked(p.op(v).regs) and readers[v] - done]
        pool = readers[waiting[0]] - done if waiting else set(p.names) - done
        place(min(pool, key=cost))
    return order


def sequential_times(p: Problem, order: list[str]) -> tuple[dict[str, int], int]:
    """Start times and II for ``order`` that hold for every warp-group assignment.

    Each op gets a slot of its own, one after another: from its earliest reservation or the first load
    slot of the values it may receive (:meth:`Problem.load_lead`) to the latest of its end, its
    reservations and the store of its value for another group (:meth:`Problem.store_offset` plus the
    largest transfer); it starts once every distance-0 producer's larger of latency and crossing delay
    has passed. The II is the slots' span and at least what every loop-carried edge needs at that
    delay, so no two slots of any iterations overlap: no unit, SMEM port or issuing warp is shared, and
    no op waits while another issues. Times in the problem's units.
    """
    start: dict[str, int] = {}
    t = 0
    for n in order:
        op = p.op(n)
        rows = p.reservations(n)
        lead = max([p.load_lead(e) for e in p.in_edges(n)], default=0)
        before = max(0, lead, -min([off for _, off, _, _ in rows], default=0))
        transfer = max([e.transfer for e in p.out_edges(n) if e.transfer and e.dst != n], default=0)
        after = max(op.cycles, max([off + cyc for _, off, cyc, _ in rows], default=0),
                    p.store_offset(n) + transfer if transfer else 0, 1)
        ready = [start[e.src] + _worst_delay(p, e) for e in p.in_edges(n)
                 if e.distance == 0 and e.src != n and e.src in start]
        start[n] = max([t + before, *ready])
        t = start[n] + after
    ii = max(1, t)
    for e in p.edges:
        if e.distance > 0:
            ii = max(ii, math.ceil((start[e.src] + _worst_delay(p, e) - start[e.dst]) / e.distance))
    return start, ii


def sequential_schedule(p: Problem, hi: int,
                        deadline: float) -> tuple[int, dict[str, int], dict[str, int], str] | None:
    """``(II, start, group, how)``: :func:`sequential_times` of :func:`oldest_first_order`, else of
    :func:`register_order` (each order given its share of the time left), with the warp
    groups of :func:`twill.solvers.assign.assign_groups` (whose precondition those times meet: every edge
    keeps its worst-case delay and every op's SMEM-port traffic sits in its own slot); None if the II is
    above ``hi``, the order has a cycle, or no assignment was found by ``deadline`` (a
    ``time.monotonic()`` value). The caller verifies the schedule (:func:`twill.verify.violations`)."""
    orders = []
    for make in (oldest_first_order, register_order):
        order = make(p)
        if order is not None and order not in orders:
            orders.append(order)
    for k, order in enumerate(orders):
        start, ii = sequential_times(p, order)
        if ii > hi:
            continue
        now = time.monotonic()  # the orders left share the time left
        group = assign_groups(p, ii, start, now + (deadline - now) / (len(orders) - k))
        if group is not None:
            return ii, start, group, SEQUENTIAL_HOW
    return None
