"""The any-time answer: when the time limit ends the search before any schedule, a heuristic one
(groups split by a rule, ops list-scheduled; else ops one after another with groups chosen for the
registers, :mod:`twill.search.sequential`), verified and marked not proven with its bound."""

from __future__ import annotations

import dataclasses
import math
import time
import warnings
from typing import Any

import networkx as nx

from twill.errors import (
    TwillWarning,
)
from twill.model.formulation import accumulators, pool_size
from twill.model.problem import HANDOFF_UNIT, Edge, Problem
from twill.schedule import (
    Schedule,
)
from twill.search.certificate import finish, least_open_ii
from twill.search.probe import PROBE_HOW
from twill.search.reasons import budget_sum
from twill.search.run import Run, with_note
from twill.search.sequential import sequential_schedule
from twill.search.swp import needed_budgets
from twill.solvers.joint.result import JointResult
from twill.solvers.modulo.ims import iterative_modulo_schedule
from twill.solvers.normalize import Normalization
from twill.solvers.status import CheckResult
from twill.verify import violations

__all__ = ["FALLBACK_FRACTION", "FALLBACK_LAST_S", "FALLBACK_MIN_S", "FALLBACK_S", "FINISH_RESERVE",
           "HEURISTIC_SHARE", "fallback_budget", "fallback_end", "heuristic_fallback", "heuristic_schedule"]

FINISH_RESERVE = 0.1
"""Share of the fallback's budget kept for what follows it (the schedule's certificate and its
verification), so the call returns by :attr:`Run.answer_by`."""

FALLBACK_LAST_S = 0.05
"""Seconds the fallback still gets when the search itself ran past :attr:`Run.answer_by` (a limit of a few
milliseconds, or a loaded machine): one try of a small loop's heuristic schedule, which takes
milliseconds, rather than no answer at all."""

FALLBACK_S = 30.0
"""Most seconds the fallback heuristic (:func:`heuristic_fallback`) may take once the time limit has ended
the search without a schedule: a tuning choice (each II costs one iterative modulo schedule and one
verification per split, well under a second on the FA loops)."""

FALLBACK_FRACTION = 0.1
"""The fallback's share of the time limit: a search with limit ``T`` returns by ``T + max(0.1 T, 0.2 s)``
(at most ``T + 30 s``), the time-limit contract of ``benchmarks/solve_times.py --overshoot``."""

HEURISTIC_SHARE = 0.25
"""The share of :func:`fallback_budget` the heuristic's walk over IIs may take before the joint probes
(:func:`twill.search.probe.joint_probes`) get the rest: a tuning choice. The walk ends at once where the
iterative modulo scheduler's split verifies (milliseconds on the FA forwards); where none does (the
sub-tiled FA backward on the H100) it used the whole budget to end with a list schedule at II 330, and
the probes, given the seconds, found II 114-116 in 30-60 s at a load of 8 (solve_times_changes.md)."""

FALLBACK_MIN_S = 0.2
"""The fallback's least budget, for limits under 2 s: long enough for a heuristic schedule of a small loop
(the iterative modulo schedule and one verification per split take milliseconds on the FA loops; the
whole fallback of the 27-op FA backward and of the 60-op synthetic loop finishes in about 0.1 s,
benchmarks/results/solve_times.json, ``overshoot``), short enough to keep a 1-2 s limit within 0.2 s."""


def fallback_budget(time_limit: float) -> float:
    """Seconds past the time limit by which a search with ``time_limit`` seconds returns when the
    fallback runs: ``min(FALLBACK_S, max(FALLBACK_MIN_S, FALLBACK_FRACTION x time_limit))``.

    The budget is counted from the time limit, not from the moment the search stopped: whatever the search
    ran over its limit (a solver call that stops late) comes out of the fallback's share, so the call as a
    whole returns by ``T + fallback_budget(T)`` (:attr:`Run.answer_by`).

    >>> fallback_budget(300.0), fallback_budget(60.0), fallback_budget(5.0), fallback_budget(0.5)
    (30.0, 6.0, 0.5, 0.2)
    """
    return min(FALLBACK_S, max(FALLBACK_MIN_S, FALLBACK_FRACTION * time_limit))


def fallback_end(run: Run) -> float:
    """The ``time.monotonic()`` value by which the fallback (the heuristic walk and the joint probes) must
    stop: :attr:`Run.answer_by` (the time limit plus :func:`fallback_budget`) less :data:`FINISH_RESERVE`
    of the budget, kept for the certificate and its verification; :data:`FALLBACK_S` from now without a
    limit. A search that ran past its answer time still gets :data:`FALLBACK_LAST_S` for one try."""
    if run.deadline is None:
        end, share = time.monotonic() + FALLBACK_S, FALLBACK_S
    else:
        end = run.answer_by or run.deadline + fallback_budget(run.deadline - run.started)
        share = max(0.0, end - run.deadline)
    return max(end - FINISH_RESERVE * share, time.monotonic() + FALLBACK_LAST_S)


def _splits(p: Problem) -> list[dict[str, int]]:
    """Warp-group assignments for the fallback: the variable-latency ops on group 0 (paper §5.3) and the
    compute ops packed onto ``k`` groups for each ``k`` the pool allows, fewest first. The accumulators
    (live at every moment, :func:`twill.encoding.accumulators`) go largest first to the group holding the
    fewest registers; every other compute op joins the group of the nearest accumulator along register
    edges (either direction; a sub-tile's values stay on its accumulators' group and need no hand-off),
    the lower group on a tie, the least-loaded group when no accumulator is reachable. Ops are taken by
    name, so the splits depend only on the problem."""
    first = 1 if p.has_vl else 0
    compute = [op.name for op in p.ops if not op.variable_latency]
    accs = [a for a in sorted(accumulators(p), key=lambda n: (-p.op(n).regs, n)) if a in compute]
    links = nx.Graph()
    links.add_nodes_from(compute)
    links.add_edges_from((e.src, e.dst) for e in p.edges
                         if e.carrier == "register" and e.src in links and e.dst in links and e.src != e.dst)
    out = []
    for k in range(1, max(1, pool_size(p) - first) + 1):
        group = {op.name: 0 for op in p.ops if op.variable_latency}
        load = dict.fromkeys(range(first, first + k), 0)
        for a in accs:
            g = min(load, key=lambda w: (load[w], w))
            group[a], load[g] = g, load[g] + p.op(a).regs
        hops = {a: nx.single_source_shortest_path_length(links, a) for a in accs}
        for n in compute:
            if n in group:
                continue
            near = [(hops[a][n], group[a]) for a in accs if n in hops[a]]
            group[n] = min(near)[1] if near else min(load, key=lambda w: (load[w], w))
        out.append(group)
    return out


def heuristic_fallback(run: Run, lo: int, hi: int, until: float | None = None,
                       last: float | None = None) -> tuple | None:
    """A valid schedule without a proof, for a search the time limit stopped with none found: at IIs from
    ``lo`` (the least II not refuted) upward in growing steps (1, 2, 4, ... up to ``hi``), the iterative
    modulo schedule of the problem with each :func:`_splits` assignment's crossing delays on the edges it
    makes cross, kept at the first II and split that pass :func:`twill.verify.violations`; then the IIs
    between the last one that failed and it are bisected for a smaller one that passes. The schedules
    without overlap (:func:`_last_resort`) are made first, so a fallback short of time still has one; a
    modulo schedule replaces it when its II is smaller. Takes at most
    :func:`fallback_budget` seconds past the search's time limit, counted from the limit
    (:attr:`Run.answer_by`), less :data:`FINISH_RESERVE` of them, or until the ``time.monotonic()`` value
    ``until`` when given; None if nothing passed in that time (or a
    register plan is given: its budgets belong to the pool's groups, which these splits do not follow).
    When no schedule of the splits verifies (neither a modulo schedule nor one without overlap), the
    sequential schedule with its groups chosen for the registers and SMEM
    (:func:`twill.search.sequential.sequential_schedule`) is made, until the ``time.monotonic()`` value
    ``last`` (default ``until``; later lets it run past the splits' share: with nothing in hand, an
    answer is worth more than the probes' seconds, which only improve one); so wherever the splits give
    a schedule the answer is theirs, as before."""
    p = run.problem
    if p.options.register_plan is not None:
        return None
    if until is None:
        until = fallback_end(run)
    splits = _splits(p)
    clock = _Tries(until)

    def attempt(ii: int) -> tuple | None:
        for group in splits:
            if not clock.room():
                return None
            edges = [dataclasses.replace(e, latency=p.crossing_delay(e))
                     if e.src != e.dst and group[e.src] != group[e.dst] else e for e in p.edges]
            found = clock.timed(_modulo_try, run, p.replace_times(p.ops, edges, p.cycles_per_unit), ii,
                                group)
            if found is not None:
                return found
        return None

    resort = _last_resort(run, splits, hi, clock)  # an answer in hand first: cheap, and always there
    top = hi if resort is None else min(hi, resort[1] - 1)  # a modulo schedule must beat it
    ii, step, failed, best = lo, 1, lo - 1, None
    while ii <= top and clock.room():
        best = attempt(ii)
        if best is not None:
            break
        failed, ii, step = ii, min(top, ii + step), step * 2
        if ii == failed:
            break
    if best is None:
        best = resort
    if best is None:  # nothing of the splits verified: the times first, then groups that fit them
        best = _sequential(run, hi, until if last is None else max(until, last))
    if best is None:
        return None
    low, high = failed + 1, best[1] - 1
    while low <= high and clock.room():
        mid = (low + high) // 2
        better = attempt(mid)
        if better is not None:
            best, high = better, mid - 1
        else:
            low = mid + 1
    return best


class _Tries:
    """The fallback's end (a ``time.monotonic()`` value) and the longest try so far: a try that would not
    finish by the end at that length is not started (the first always is)."""

    def __init__(self, until: float) -> None:
        self.until, self.longest, self.started = until, 0.0, False

    def room(self) -> bool:
        return not self.started or time.monotonic() + self.longest < self.until

    def timed(self, fn: Any, *args: Any) -> Any:
        self.started = True
        began = time.monotonic()
        try:
            return fn(*args)
        finally:
            self.longest = max(self.longest, time.monotonic() - began)


def _sequential(run: Run, hi: int, last: float) -> tuple | None:
    """:func:`twill.search.sequential.sequential_schedule` of ``run``'s problem, made by the
    ``time.monotonic()`` value ``last``, if it verifies."""
    if time.monotonic() >= last:
        return None
    found = sequential_schedule(run.problem, hi, last)
    return None if found is None else _split_result(run, *found)


def _modulo_try(run: Run, problem: Problem, ii: int, group: dict[str, int]) -> tuple | None:
    """The iterative modulo schedule of ``problem`` (crossing delays on the edges ``group`` makes cross) at
    ``ii``, if it verifies with that split."""
    start = iterative_modulo_schedule(problem, ii)
    return None if start is None else _split_result(run, ii, start, group)


def _last_resort(run: Run, splits: list[dict[str, int]], hi: int, clock: _Tries) -> tuple | None:
    """The schedules without overlap (:func:`_list_schedule`, then :func:`_no_overlap`, for every split),
    the one of least II (then by how it was made) that verifies; each made and checked only while
    ``clock`` has room for it."""
    p = run.problem
    made = []
    for build in (_list_schedule, _no_overlap):
        for group in splits:
            if not clock.room():
                break
            found = clock.timed(build, p, group, hi)
            if found is not None:
                made.append(found)
    for ii, start, group, how in sorted(made, key=lambda r: (r[0], r[3])):
        if not clock.room():
            return None
        best = clock.timed(_split_result, run, ii, start, group, how)
        if best is not None:
            return best
    return None


def _no_overlap(p: Problem, group: dict[str, int], hi: int) -> tuple | None:
    """The last resort of :func:`heuristic_fallback`: the ops one after another in a depth-first topological
    order of the distance-0 edges, each after its predecessor ends and after every producer's delay (the
    crossing delay and the SMEM traffic of a hand-off when ``group`` makes it cross); the II is its
    length plus the largest such delay, so no two ops (nor two iterations) overlap. ``(II, start,
    group)``, or None if that II is above ``hi`` or the distance-0 edges have a cycle."""
    forward = nx.DiGraph()
    forward.add_nodes_from(p.names)
    forward.add_edges_from((e.src, e.dst) for e in p.edges if e.distance == 0 and e.src != e.dst)
    order = _depth_first(p)
    if order is None:
        return None

    def delay(e: Edge) -> int:
        return (p.crossing_delay(e) + 2 * e.transfer if group[e.src] != group[e.dst] else e.latency)

    start: dict[str, int] = {}
    t = 0
    for n in order:
        ready = [start[e.src] + delay(e) for e in p.in_edges(n) if e.distance == 0 and e.src in start]
        start[n] = max([t, *ready])
        t = start[n] + p.op(n).cycles + max([2 * e.transfer for e in p.edges], default=0)
    ii = t + max([delay(e) for e in p.edges], default=0) + 1
    return None if ii > hi else (ii, start, group, "a schedule without overlap (ops one after another)")


def _depth_first(p: Problem) -> list[str] | None:
    """The ops in a depth-first topological order of the distance-0 edges (reverse postorder, successors
    by name): a value's readers follow it soon. None if those edges have a cycle."""
    forward = nx.DiGraph()
    forward.add_nodes_from(p.names)
    forward.add_edges_from((e.src, e.dst) for e in p.edges if e.distance == 0 and e.src != e.dst)
    if not nx.is_directed_acyclic_graph(forward):
        return None
    return list(reversed(list(nx.dfs_postorder_nodes(forward, sort_neighbors=sorted))))


def _list_schedule(p: Problem, group: dict[str, int], hi: int) -> tuple | None:
    """A fallback without overlap between iterations: the ops in :func:`_depth_first` order, each at the
    first time after its producers' delays (the crossing delay when ``group`` makes an edge cross) and
    after the previous op of its warp group has finished issuing, where its reservations (and the SMEM
    traffic of its hand-offs, :meth:`Problem.transfers`) fit the units' capacities; the warp groups run
    side by side. The II is the length plus the largest delay, so iterations never overlap.
    ``(II, start, group, how)``, or None if that II is above ``hi`` or the edges have a cycle."""
    order = _depth_first(p)
    if order is None:
        return None
    caps = p.resources.units
    used: dict[tuple[str, int], int] = {}
    crossing = [e for e in p.edges
                if e.src != e.dst and group[e.src] != group[e.dst] and not p.forced_cross(e)]

    def delay(e: Edge) -> int:
        return p.crossing_delay(e) if group[e.src] != group[e.dst] else e.latency

    start: dict[str, int] = {}
    free: dict[int, int] = {}
    for n in order:
        mine = [e for e in crossing if n in (e.src, e.dst)]
        rows = [*p.reservations(n), *((HANDOFF_UNIT, off, cyc, 1) for op, off, cyc in p.transfers(mine)
                                      if op == n and HANDOFF_UNIT in caps)]
        t = max([free.get(group[n], 0), *(start[e.src] + delay(e) for e in p.in_edges(n)
                                          if e.distance == 0 and e.src in start)])
        t = max(t, -min([off for _, off, _, _ in rows], default=0))
        while any(used.get((u, t + off + c), 0) + k > caps[u] for u, off, cyc, k in rows for c in range(cyc)):
            t += 1
        for u, off, cyc, k in rows:
            for c in range(cyc):
                used[(u, t + off + c)] = used.get((u, t + off + c), 0) + k
        start[n] = t
        free[group[n]] = t + p.op(n).issue_cycles
    length = max(start[op.name] + op.cycles for op in p.ops)
    ii = length + max([delay(e) for e in p.edges] + [0]) + 1
    return None if ii > hi else (ii, start, group, "a list schedule without overlap between iterations")


def _split_result(run: Run, ii: int, start: dict[str, int], group: dict[str, int],
                  how: str = "the iterative modulo schedule") -> tuple | None:
    """``(how, ii, result, None)`` for the schedule ``start`` / ``group`` if it verifies."""
    p = run.problem
    warps = {g: max([p.op(n).warps for n in group if group[n] == g] + [1]) for g in set(group.values())}
    warps = {g: p.resources.group_threads(w) // 32 for g, w in warps.items()}
    length = max(start[op.name] + op.cycles for op in p.ops)
    fake = JointResult(ii, math.ceil(length / ii), CheckResult.SAT, start, group,
                       needed_budgets(p, ii, start, group), warps, length, {"length": False})
    found = (how, ii, fake, None)
    if violations(finish(run, found, None, {}, "swp")):
        return None
    return found


def heuristic_schedule(run: Run, found: tuple, norm: Normalization | None, raw_bounds: Any) -> Schedule:
    """The fallback's schedule, marked not proven: its certificate says it is heuristic and gives the
    proven lower bound on the optimal II (the least II the search did not refute)."""
    reached = least_open_ii(run)
    sched = finish(run, found, norm, raw_bounds, "swp")
    ii = sched.ii
    split = "" if found[0] == PROBE_HOW else " with a fixed warp-group split"
    note = (f"heuristic: the time limit ended the search before any joint schedule was found; this is "
            f"{found[0]} at II {ii}{split} ({len(sched.warp_groups)} "
            f"groups), verified but not proven optimal: every II below {reached} was refuted, so the "
            f"optimal II lies in [{reached}, {ii}]"
            + (" (so this II is optimal; its length and the later goals are not proven minimal)"
               if ii == reached else ""))
    notes = (*(n for n in sched.certificate.notes if not n.startswith("Twill-SWP:")), note)
    cert = dataclasses.replace(sched.certificate, proven_optimal=False, notes=notes, heuristic=True,
                               ii_bound=reached)
    warnings.warn(note, TwillWarning, stacklevel=3)
    return with_note(dataclasses.replace(sched, certificate=cert, strategy="joint"), budget_sum(sched))
