"""The reductions the joint search applies, each with the precondition that makes it sound.

A reduction removes schedules from the search without changing the optimum. Each one here states why
that holds and applies itself only when its precondition does; both joint encodings
(:mod:`twill.encoding` on SMT, :mod:`twill.joint_cpsat` on CP-SAT) and the search take them from here,
so a precondition is stated once.

* :func:`budget_arrangements` -- **warp-group symmetry.** Groups that differ in nothing the model can see
  are interchangeable, so their numbering can be fixed (first appearance in op order). A register plan is
  a *multiset* of budgets: which group gets which budget is part of the search, so listing the same
  budgets in another order never changes the answer. Groups are interchangeable only within a block of
  equal budgets.
* :func:`involution` -- **sub-tile swap.** A self-inverse automorphism of the whole problem (ops, edges,
  options and every derived cost and tie-break) maps each schedule onto a mirror image with the same
  costs, so one of the two can be required.
* :func:`stage_bound` -- **stage windows.** An upper bound on the stage count of some schedule at an
  II (the least of a per-op bound and an area bound, :mod:`twill.model.stagebound`): a search that
  refutes every window up to it has refuted the II.
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx
from networkx.algorithms import isomorphism

from twill.model.problem import Edge, Problem
from twill.model.stagebound import path_stages, stage_bucket

__all__ = ["BudgetArrangement", "budget_arrangements", "first_appearance", "involution", "stage_bound",
           "stage_bounds"]

MAX_AUTOMORPHISMS = 64
"""Automorphisms :func:`involution` looks at before it gives up (returns None, a reduction not applied:
always sound)."""


@dataclass(frozen=True)
class BudgetArrangement:
    """One way to hand a register plan's budgets to the pool's warp groups.

    Attributes
    ----------
    budgets : tuple of int or None
        ``setmaxnreg`` budget of each group of the pool (registers per thread), or None without a plan
        (every budget is then an unknown of the search).
    blocks : tuple of tuple of int
        The compute groups, split into blocks of interchangeable groups: consecutive group numbers with
        equal budgets (all compute groups form one block without a plan). The numbering of the groups
        of one block may be fixed; groups of different blocks may not be swapped.
    """

    budgets: tuple[int, ...] | None
    blocks: tuple[tuple[int, ...], ...]


def budget_arrangements(problem: Problem, pool: int) -> list[BudgetArrangement]:
    """The ways of giving the register plan's budgets to the ``pool`` warp groups, up to relabelling
    interchangeable groups; the search may pick any one of them.

    Group 0 holds exactly the variable-latency ops when there are any (variable-latency isolation), and
    the other groups are the compute groups, identical in every respect but their budget.

    * Without a register plan every budget is an unknown: one arrangement, one block of all compute
      groups.
    * With a plan (a multiset of budgets, its length the pool): without variable-latency ops the compute
      groups take the plan sorted ascending (any assignment becomes this one by relabelling the compute
      groups, which changes no cost); with them, group 0 takes one of the plan's distinct values and the
      compute groups the rest, sorted -- one arrangement per distinct value.

    Precondition of the numbering each block allows (first appearance: an op may use group ``w`` of a
    block only if an earlier op in op order uses ``w - 1`` of the same block): the groups of a block are
    interchangeable, i.e. they have equal budgets and no other per-group option exists. Relabelling
    groups inside a block keeps every start time, so it combines soundly with :func:`involution`.

    Parameters
    ----------
    problem : Problem
        The loop (its options give the plan).
    pool : int
        Warp groups offered (:func:`twill.encoding.pool_size`).

    Returns
    -------
    list of BudgetArrangement
        At least one; at most one per distinct budget of the plan.

    Examples
    --------
    >>> from twill.ir.graph import Graph
    >>> from twill.ir.machine import load_machine
    >>> from twill.model.problem import Options, build_problem
    >>> g = Graph("t")
    >>> _ = g.add_op("ld", "tma_load", busy={"tma": 1}, latency=2, variable_latency=True)
    >>> _ = g.add_op("a", "exp", busy={"mufu": 1}, latency=1)
    >>> _ = g.add_edge("ld", "a")
    >>> p = build_problem(g, load_machine("h100"), Options(register_plan=(240, 24, 240)))
    >>> [(a.budgets, a.blocks) for a in budget_arrangements(p, 3)]
    [((24, 240, 240), ((1, 2),)), ((240, 24, 240), ((1,), (2,)))]
    """
    first = 1 if problem.has_vl else 0
    compute = tuple(range(first, pool))
    plan = problem.options.register_plan
    if plan is None:
        return [BudgetArrangement(None, (compute,) if compute else ())]
    values = list(plan)
    if not first:
        return [BudgetArrangement(tuple(sorted(values)), _blocks(sorted(values), 0))]
    out = []
    for vl in sorted(set(values)):
        rest = list(values)
        rest.remove(vl)
        rest.sort()
        out.append(BudgetArrangement((vl, *rest), _blocks(rest, 1)))
    return out


def _blocks(budgets: list[int], offset: int) -> tuple[tuple[int, ...], ...]:
    """Runs of equal values of sorted ``budgets``, as group numbers from ``offset``."""
    blocks: list[list[int]] = []
    for i, b in enumerate(budgets):
        if blocks and budgets[i - 1] == b:
            blocks[-1].append(offset + i)
        else:
            blocks.append([offset + i])
    return tuple(tuple(b) for b in blocks)


def first_appearance(compute: list[str],
                     blocks: tuple[tuple[int, ...], ...]) -> list[tuple[str, int, list[str]]]:
    """The numbering rule of :func:`budget_arrangements` as plain data: ``(op, w, earlier)`` means op
    ``op`` may sit on group ``w`` only if one of the ops ``earlier`` sits on group ``w - 1`` (never, if
    ``earlier`` is empty). ``compute`` lists the compute ops in op order."""
    rules = []
    for block in blocks:
        for k, op in enumerate(compute):
            for w in block[1:]:
                rules.append((op, w, compute[:k]))
    return rules


def involution(problem: Problem) -> dict[str, str] | None:
    """A non-trivial automorphism of the whole problem that is its own inverse (swapping two identical
    sub-tiles), or None.

    Precondition of the reduction it allows (``start[first] <= start[sigma[first]]`` for the first op in
    op order that ``sigma`` moves): mapping a schedule through ``sigma`` (``start'[sigma(v)] = start[v]``,
    same group) gives a schedule with the same II, L, groups, budgets and costs. That holds when ``sigma``
    preserves every datum any constraint or tie-break reads: each op's costs and flags, each edge's
    fields (latency, distance, blocking, carrier, hand-off cost ``cross``, SMEM traffic ``transfer``,
    ``inplace``), the derived timings that depend on names or on other edges (:meth:`Problem.load_lead`,
    :meth:`Problem.crossing_delay`, :meth:`Problem.store_offset`, :meth:`Problem.forced_cross`), and the
    options that name ops (``apart``, as a set of pairs). ``sigma`` is checked against all of them.
    """
    g = nx.MultiDiGraph()
    for op in problem.ops:
        g.add_node(op.name, sig=(op.kind, op.rrt, op.latency, op.issue_cycles, op.regs, op.smem,
                                 op.tmem, op.result_bytes, op.variable_latency, op.warps,
                                 op.name in problem.streaming, problem.store_offset(op.name),
                                 op.cycles, op.is_async, op.view))
    for e in problem.edges:
        g.add_edge(e.src, e.dst, sig=_edge_sig(problem, e))

    def edges_match(a: dict, b: dict) -> bool:
        return sorted(d["sig"] for d in a.values()) == sorted(d["sig"] for d in b.values())

    apart = {frozenset(pair) for pair in problem.options.apart}
    matcher = isomorphism.MultiDiGraphMatcher(g, g, node_match=lambda a, b: a["sig"] == b["sig"],
                                              edge_match=edges_match)
    for count, sigma in enumerate(matcher.isomorphisms_iter()):
        if count > MAX_AUTOMORPHISMS:
            return None
        moved = [n for n in sigma if sigma[n] != n]
        if not moved or any(sigma[sigma[n]] != n for n in sigma):
            continue
        if {frozenset(sigma[n] for n in pair) for pair in apart} == apart:
            return dict(sigma)
    return None


def _edge_sig(problem: Problem, e: Edge) -> tuple:
    return (e.latency, e.distance, e.blocking, e.carrier, e.cross, e.inplace, e.transfer,
            problem.load_lead(e), problem.crossing_delay(e), problem.forced_cross(e))


def stage_bound(problem: Problem, ii: int) -> int:
    """An upper bound on the stage count ``ceil(L / II)`` of some schedule at ``ii``, if any exists:
    refuting every window up to it refutes ``ii`` for every stage count. ``stage_bounds(problem,
    *stage_bucket(ii))[ii]`` (:func:`stage_bounds` computes a whole bucket at once).

    Argument. Fix a schedule's residues ``r[v] = start[v] mod II`` and warp groups, and let ``k[v]`` be
    its stages. Every constraint of the model is then either a residue condition (unit capacity,
    blocking waits and hand-off traffic modulo II) or a lower bound ``k[v] - k[u] >= w(e)`` on an edge
    (dependence, hand-off delay), except liveness: a value's lifetime grows with the stage gaps to its
    readers, and the folded occupancy grows with lifetimes. Keep each edge's gap ``y(e) = k[v] - k[u] +
    δ(e)``, which a dependence makes ``>= 0``, at most its value in the schedule, and take the least
    ``k >= 0`` of this system of difference constraints: it exists (the schedule is a solution), no
    lifetime grows, so it is a schedule too. Its largest stage is the weight of a simple path in the
    constraint graph, forward edges weighing ``w(e) <= ceil((D(e) + II - 1) / II)`` (``D(e)`` the most
    delay ``e`` can need: :meth:`Problem.crossing_delay` when its ends may be on different groups) and
    backward edges ``δ(e) - y(e) <= δ(e)``. Two bounds on that path, the smaller taken:

    * **per op**: a simple path enters each op at most once, through one arc (a forward arc of an edge
      into it or the backward arc of an edge out of it), so the largest stage is at most the sum, over
      the ``|V| - 1`` ops with the largest such weight, of each op's largest entering weight, and ``L <=
      (k_max + 1) II + max cycles``;
    * **area** (:func:`twill.model.stagebound.path_stages`): the least solution is a schedule, so its
      values fit the register file, SMEM and TMEM; a forward arc's span past its value's least lifetime
      holds that value's resource, and a simple path's forward arcs leave distinct ops, so their extra
      areas add up to at most each resource's slack. A linear program over the path's arcs bounds its
      length in cycles, for a bucket of IIs at once (:func:`twill.model.stagebound.stage_bucket`); a
      negative slack refutes the II outright (then any bound holds: 1).

    Precondition: liveness is the only family whose constraints grow with stage gaps (true of every
    family in docs/model.md §4; a new family that rewards long gaps would break it). The area bound
    counts a resource only when its family is not relaxed (its arcs are free otherwise).

    Parameters
    ----------
    problem : Problem
        The loop, in its own time units.
    ii : int
        Initiation interval (>= 1).

    Returns
    -------
    int
        Stage count ``>= 1``.
    """
    return stage_bounds(problem, *stage_bucket(ii))[ii]


def stage_bounds(problem: Problem, lo: int, hi: int, *, area: bool = True) -> dict[int, int]:
    """:func:`stage_bound` of every II in ``[lo, hi]``, with one area bound for the whole range (valid
    at each of its IIs; :func:`twill.model.stagebound.path_stages`). With ``area=False`` the per-op
    bound alone: larger, still an upper bound (no linear program is solved)."""
    limit = path_stages(problem, lo, hi) if area else 10**9
    longest = max(op.cycles for op in problem.ops)
    out = {}
    for ii in range(lo, hi + 1):
        # a simple path enters each op at most once, through one arc: a forward arc of an edge into
        # it, or the backward arc of an edge out of it; each op adds at most the largest of those
        entering = {op.name: 0 for op in problem.ops}
        for e in problem.edges:
            if e.src == e.dst:
                continue
            delay = max(e.latency, problem.least_latency(e), problem.crossing_delay(e))
            entering[e.dst] = max(entering[e.dst], -(-(delay + ii - 1) // ii))
            entering[e.src] = max(entering[e.src], e.distance)
        weights = sorted(entering.values(), reverse=True)
        crude = sum(weights[:max(0, len(problem.ops) - 1)]) + 1 + -(-longest // ii)
        # limit None: a resource's least area does not fit at any II of the range, no schedule there
        out[ii] = 1 if limit is None else max(1, min(crude, limit))
    return out
