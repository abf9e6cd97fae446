"""Iterative modulo scheduling (Rau, "Iterative modulo scheduling", MICRO 1994): a fast heuristic.

It finds *a* modulo schedule at a given II, usually close to the shortest, in well under a second. The
modulo ILP (:mod:`twill.solvers.modulo.methods`) uses it as an incumbent: the ILP then only has to
prove that no shorter
schedule exists, which its presolve usually does at once. The heuristic proves nothing by itself.

Ops are taken in order of height (the longest latency path to the end of the iteration, with loop-carried
edges shortened by ``δ II``); each goes to the earliest time in ``[Estart, Estart + II)`` where its
reservations fit the modulo reservation table, evicting conflicting ops when no slot is free, until every
op is placed or the budget of placements runs out.
"""

from __future__ import annotations

from collections.abc import Mapping

from twill.model.problem import Problem

__all__ = ["is_modulo_schedule", "iterative_modulo_schedule"]


def _heights(problem: Problem, ii: int) -> dict[str, int]:
    """Longest path from each op to the end, edges weighted ``d - δ II`` (no positive cycle when II >=
    RecMII)."""
    height = {op.name: op.cycles for op in problem.ops}
    for _ in range(len(problem.ops) + 1):
        changed = False
        for e in problem.edges:
            cand = height[e.dst] + problem.least_latency(e) - e.distance * ii
            if cand > height[e.src]:
                height[e.src] = cand
                changed = True
        if not changed:
            return height
    return height  # a positive cycle: II is below RecMII; the caller will fail to place ops


class _Table:
    """The modulo reservation table: usage per unit and residue (one list of ``II`` counts per unit).

    Each op's footprint is computed once: per unit, the residues its reservations cover relative to its
    start, with the counts of overlapping reservations summed (an op may reserve a unit twice)."""

    def __init__(self, problem: Problem, ii: int) -> None:
        self.p, self.ii = problem, ii
        self.caps = problem.resources.units
        self.use: dict[str, list[int]] = {unit: [0] * ii for unit in self.caps}
        self._foot: dict[str, list[tuple[str, list[tuple[int, int]]]]] = {}

    def footprint(self, name: str) -> list[tuple[str, list[tuple[int, int]]]]:
        """``[(unit, [(residue offset, count), ...]), ...]`` of op ``name``."""
        if name not in self._foot:
            per: dict[str, dict[int, int]] = {}
            for unit, offset, cycles, count in self.p.reservations(name):
                row = per.setdefault(unit, {})
                for c in range(offset, offset + cycles):
                    row[c % self.ii] = row.get(c % self.ii, 0) + count
            self._foot[name] = [(unit, sorted(row.items())) for unit, row in per.items()]
        return self._foot[name]

    def residues(self, name: str, t: int) -> set[tuple[str, int]]:
        """The (unit, residue) cells op ``name`` started at ``t`` occupies."""
        ii = self.ii
        return {(unit, (t + c) % ii) for unit, row in self.footprint(name) for c, _ in row}

    def fits(self, name: str, t: int) -> bool:
        ii = self.ii
        for unit, row in self.footprint(name):
            used, cap = self.use[unit], self.caps[unit]
            for c, n in row:
                if used[(t + c) % ii] + n > cap:
                    return False
        return True

    def place(self, name: str, t: int, sign: int = 1) -> None:
        ii = self.ii
        for unit, row in self.footprint(name):
            used = self.use[unit]
            for c, n in row:
                used[(t + c) % ii] += sign * n

    def within_capacity(self) -> bool:
        return all(n <= self.caps[unit] for unit, used in self.use.items() for n in used)


def iterative_modulo_schedule(problem: Problem, ii: int, *, budget_factor: int = 10) -> dict[str, int] | None:
    """A modulo schedule of ``problem`` at ``ii`` (start times from 0), or None if the heuristic fails.

    Parameters
    ----------
    problem : Problem
        The loop (time units of the problem).
    ii : int
        Initiation interval.
    budget_factor : int
        Placements allowed per op before giving up.
    """
    if any(cycles * count > problem.resources.units[unit] * ii
           for op in problem.ops for unit, _, cycles, count in problem.reservations(op.name)):
        return None
    height = _heights(problem, ii)
    order = sorted(problem.names, key=lambda n: (-height[n], problem.names.index(n)))
    table = _Table(problem, ii)
    start: dict[str, int] = {}
    last: dict[str, int] = {}
    budget = budget_factor * len(order)
    while len(start) < len(order) and budget > 0:
        budget -= 1
        name = next(n for n in order if n not in start)
        early = max([start[e.src] + problem.least_latency(e) - e.distance * ii for e in problem.in_edges(name)
                     if e.src in start] + [0])
        t = next((x for x in range(early, early + ii) if table.fits(name, x)), None)
        if t is None:
            t = max(early, last.get(name, early - 1) + 1)
        _evict_conflicts(problem, table, start, name, t)
        table.place(name, t)
        start[name] = last[name] = t
        for e in problem.out_edges(name):
            late = start.get(e.dst, t) + e.distance * ii < t + problem.least_latency(e)
            if e.dst in start and e.dst != name and late:
                table.place(e.dst, start.pop(e.dst), -1)
    if len(start) < len(order):
        return None
    low = min(start.values())
    start = {n: s - low for n, s in start.items()}
    return start if is_modulo_schedule(problem, ii, start) else None


def _evict_conflicts(problem: Problem, table: _Table, start: dict[str, int], name: str, t: int) -> None:
    """Remove placed ops whose reservations collide with ``name`` at ``t`` until it fits."""
    while not table.fits(name, t):
        mine = table.residues(name, t)
        victim = next((n for n in list(start) if n != name and mine & table.residues(n, start[n])), None)
        if victim is None:
            return  # the op alone exceeds a capacity; the final check rejects the schedule
        table.place(victim, start.pop(victim), -1)


def is_modulo_schedule(problem: Problem, ii: int, start: Mapping[str, int]) -> bool:
    """True if ``start`` meets every dependence and every unit capacity modulo ``ii``."""
    if any(s < 0 for s in start.values()):
        return False
    for e in problem.edges:
        if start[e.dst] + e.distance * ii < start[e.src] + problem.least_latency(e):
            return False
    table = _Table(problem, ii)
    for name, t in start.items():
        table.place(name, t)
    return table.within_capacity()
