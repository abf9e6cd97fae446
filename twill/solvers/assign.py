"""Warp groups for fixed start times: the assignment of ops to warp groups that fits the registers, the
register file and shared memory when every start time is already chosen (CP-SAT).

With the start times fixed, what a warp-group assignment still decides is which values stay in registers
until their readers start (a reader on the producer's group), which are handed off through an SMEM
staging buffer (a reader on another group), and which readers hold a received copy (an asynchronous
reader, :func:`twill.model.liveness.use_hold`). The model states exactly the rules of
:mod:`twill.model.liveness` at those times, folded modulo II and checked at every residue where an
interval starts (an occupancy's maximum is reached at one of them):

* per warp group and residue, the group overhead plus its live tracked values (each value's interval ends
  at the latest of its own end and its same-group readers' starts, plus the hold of an asynchronous
  reader) and the copies its asynchronous readers receive from other groups: at most the per-thread limit,
  and at most the group's ``setmaxnreg`` budget (a multiple of the step, at least the least value);
* the budgets times the threads of each group used: at most the register file;
* per residue, the SMEM of the buffers (their intervals do not depend on the groups) plus the staging
  buffer of each value read on another group (from its producer's end until the last such reader starts,
  plus one) plus the loop-invariant SMEM: at most the capacity;
* the warps of the groups used: at most the CTA's; variable-latency ops on group 0 (paper §5.3), compute
  ops on the others; ops of different warpgroup shapes (one-warp ops fit anywhere, as
  :meth:`Problem.forced_cross` says) and ``apart`` pairs on different groups; with
  ``cross_group=False`` every register edge inside one group.

Precondition (stated where it is used, :func:`twill.search.sequential.sequential_schedule`): the start
times already hold every edge's delay whichever groups its ends get (each edge's larger of its latency
and :meth:`~twill.model.problem.Problem.crossing_delay`) and keep the SMEM-port traffic of any hand-off
apart from every other op's reservations, so the assignment cannot break a timing or unit constraint
(the edges whose crossing would collide with their own ops' reservations, :func:`self_colliding`, are
kept inside a group). The
answer is then checked by :func:`twill.verify.violations` like every schedule; this model only chooses it.
TMEM does not depend on the groups and is not modelled (the verification checks it).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Mapping
from typing import Any

from twill.model.formulation import pool_size
from twill.model.liveness import memory_intervals, use_hold, value_uses
from twill.model.problem import HANDOFF_UNIT, Problem
from twill.solvers.cpsat import available, load_cp_model

__all__ = ["ASSIGN_SEED", "assign_groups", "covered", "self_colliding"]

ASSIGN_SEED = 1
"""CP-SAT's random seed (one worker), so the same problem and times give the same assignment."""


def covered(a: int, b: int, r: int, ii: int) -> int:
    """How many times ``t`` in ``[a, b)`` with ``t = r (mod ii)``: the weight an interval adds to
    residue ``r`` of its fold (:func:`twill.model.liveness.fold`).

    >>> covered(0, 10, 0, 10), covered(0, 10, 9, 10), covered(3, 25, 4, 10), covered(5, 5, 5, 10)
    (1, 1, 3, 0)

    (``[3, 25)`` holds ``t = 4, 14, 24``.)
    """
    return -((r - b) // ii) - -((r - a) // ii)


def self_colliding(p: Problem) -> set[int]:
    """Indices of the register edges whose hand-off traffic, were the edge to cross groups, would overlap
    its own producer's or consumer's reservations on :data:`~twill.model.problem.HANDOFF_UNIT` beyond
    the unit's capacity (an op that uses the SMEM ports itself, with its store or load slot on top):
    offsets are relative to the op's start, so no schedule (of an II above the op's span) can cross
    such an edge. Each edge is tried alone beside the crossings that are always paid; a producer's store
    takes the largest transfer of its crossing edges, so a combination collides only where one of its
    edges does alone."""
    cap = p.resources.units.get(HANDOFF_UNIT)
    if cap is None:
        return set()
    forced = [e for e in p.edges if p.forced_cross(e)]
    out = set()
    for e in p.edges:
        if e.carrier != "register" or e.src == e.dst or not e.transfer or p.forced_cross(e):
            continue
        extra = p.transfers([*forced, e])
        for n in {e.src, e.dst}:
            rows = [(r.start, r.cycles, r.count) for r in p.op(n).rrt if r.unit == HANDOFF_UNIT]
            rows += [(off, cyc, 1) for op, off, cyc in extra if op == n]
            times = {off + c for off, cyc, _ in rows for c in range(cyc)}
            if any(sum(k for off, cyc, k in rows if off <= t < off + cyc) > cap for t in times):
                out.add(e.index)
    return out


def assign_groups(p: Problem, ii: int, start: Mapping[str, int], deadline: float) -> dict[str, int] | None:
    """A warp group per op that fits the registers, the register file and SMEM at fixed ``start`` times.

    Parameters
    ----------
    p : Problem
        The loop (time units of the problem; its options' relaxations drop the families they name).
    ii : int
        Initiation interval.
    start : mapping of str to int
        Every op's start time, holding every edge's delay for either placement of its ends (the module's
        precondition).
    deadline : float
        ``time.monotonic()`` value by which CP-SAT stops.

    Returns
    -------
    dict of str to int or None
        ``{op: group}`` (variable-latency ops on 0), or None if CP-SAT found none by the deadline, proved
        there is none at these times, or is not installed (ortools is optional).
    """
    if not available() or time.monotonic() >= deadline or p.options.register_plan is not None:
        return None
    cp = load_cp_model()
    m = cp.CpModel()
    res = p.resources
    first = 1 if p.has_vl else 0
    compute_groups = list(range(first, max(first + 1, pool_size(p))))
    allowed = {op.name: ([0] if op.variable_latency else compute_groups) for op in p.ops}
    x = {(n, g): m.NewBoolVar(f"x_{n}_{g}") for n, gs in allowed.items() for g in gs}
    for n, gs in allowed.items():
        m.AddExactlyOne(x[n, g] for g in gs)
    groups = sorted({g for gs in allowed.values() for g in gs})
    used = {g: m.NewBoolVar(f"used_{g}") for g in groups}
    for (_, g), var in x.items():
        m.AddImplication(var, used[g])

    same_cache: dict[tuple[str, str], Any] = {}

    def same(a: str, b: str) -> Any:
        """1 if ``a`` and ``b`` share a group (a constant where their allowed groups decide it)."""
        key = (min(a, b), max(a, b))
        if key in same_cache:
            return same_cache[key]
        common = set(allowed[a]) & set(allowed[b])
        if not common:
            val = 0
        elif len(allowed[a]) == 1 and len(allowed[b]) == 1:
            val = 1
        else:
            val = m.NewBoolVar(f"same_{key[0]}_{key[1]}")
            for g in set(allowed[a]) | set(allowed[b]):
                xa, xb = x.get((a, g)), x.get((b, g))
                if xa is not None and xb is not None:
                    m.AddBoolOr([xa.Not(), xb.Not(), val])  # both on g -> same
                    m.AddBoolOr([xa.Not(), xb, val.Not()])  # a on g, b not -> not same
                elif xa is not None:
                    m.AddImplication(xa, val.Not())
                elif xb is not None:
                    m.AddImplication(xb, val.Not())
        same_cache[key] = val
        return val

    per = max(1, res.warps_per_group)
    shape = {op.name: -(-op.warps // per) for op in p.ops if not op.variable_latency and op.warps > 1}
    for a, b in itertools.combinations(sorted(shape), 2):  # a group holds ops of one warpgroup shape
        if shape[a] != shape[b]:
            for g in compute_groups:
                m.AddBoolOr([x[a, g].Not(), x[b, g].Not()])
    for e in p.edges:  # cross_group=False keeps register edges inside a group
        if not p.options.cross_group and e.carrier == "register" and e.src != e.dst:
            s = same(e.src, e.dst)
            if isinstance(s, int):
                if not s:
                    return None
            else:
                m.Add(s == 1)
    for i in sorted(self_colliding(p)):  # crossing these collides with the ops' own SMEM-port use
        e = p.edges[i]
        s = same(e.src, e.dst)
        if isinstance(s, int):
            if not s:
                return None
        else:
            m.Add(s == 1)
    for a, b in p.options.apart:
        for g in groups:
            if (a, g) in x and (b, g) in x:
                m.AddBoolOr([x[a, g].Not(), x[b, g].Not()])

    ops = {op.name: op for op in p.ops}
    points: set[int] = set()  # residues where an interval starts: every occupancy peaks at one
    values: list[tuple[str, int, list[tuple[int, Any]], int]] = []  # (group owner, start, levels, regs)
    received: list[tuple[str, int, int, int, Any]] = []  # (reader, start, end, regs, same-group)
    track_regs = "registers" not in p.options.relax
    for op in p.ops if track_regs else ():
        if not res.tracked(op.regs):
            continue
        s0 = start[op.name]
        base = s0 + op.cycles
        options: list[tuple[int, Any]] = []  # (end, condition): the value reaches `end` if a reader shares
        for e, distance in value_uses(p, op.name, "register"):
            hold = use_hold(p, e)
            end = start[e.dst] + distance * ii + hold
            if e.dst == op.name:
                base = max(base, end)
                continue
            cond = same(op.name, e.dst)
            if isinstance(cond, int):
                base = max(base, end) if cond else base
            else:
                options.append((end, cond))
            if hold and not (isinstance(cond, int) and cond == 1):
                received.append((e.dst, start[e.dst], start[e.dst] + hold, op.regs, cond))
                points.add(start[e.dst] % ii)
        points.add(s0 % ii)
        levels: list[tuple[int, Any]] = [(base, 1)]
        for end in sorted({end for end, _ in options if end > base}):
            z = m.NewBoolVar(f"z_{op.name}_{end}")
            for e_end, cond in options:
                if e_end >= end:
                    m.AddImplication(cond, z)
            levels.append((end, z))
        values.append((op.name, s0, levels, op.regs))
    fixed: list = []
    staging: list[tuple[Any, int, list[tuple[int, Any]]]] = []  # (op, begin, [(end, crosses)])
    if "smem" not in p.options.relax:
        fixed = [iv for iv in memory_intervals(p, ii, start, dict.fromkeys(p.names, 0), "smem")
                 if not iv.what.endswith("(staging)")]  # the buffers: their intervals ignore the groups
        points.update(iv.start % ii for iv in fixed)
        for op in p.ops:
            readers = [e for e in p.out_edges(op.name) if e.carrier == "register" and e.dst != op.name]
            if not op.result_bytes or not readers:
                continue
            begin = start[op.name] + op.cycles
            points.add(begin % ii)
            opts = []
            for e in readers:
                s = same(op.name, e.dst)
                opts.append((max(begin + 1, start[e.dst] + e.distance * ii + 1),
                             1 - s if isinstance(s, int) else s.Not()))
            staging.append((op, begin, opts))
    residues = sorted(points)
    # register constraints
    if track_regs:
        cap = min(res.max_regs, res.setmaxnreg_max)
        occ: dict[tuple[int, int], list] = {}
        for name, s0, levels, regs in values:
            for r in residues:
                parts, prev = [], s0
                for end, ind in levels:
                    k = covered(s0, end, r, ii) - covered(s0, prev, r, ii)
                    prev = end
                    if k:
                        parts.append((k, ind))
                if not parts:
                    continue
                top = sum(k for k, _ in parts)
                count = sum(k * ind for k, ind in parts)
                for g in allowed[name]:
                    w = m.NewIntVar(0, top, f"w_{name}_{g}_{r}")
                    m.Add(w >= count - top * (1 - x[name, g]))
                    occ.setdefault((g, r), []).append(regs * w)
        for owner, a, b, regs, cond in received:
            for r in residues:
                k = covered(a, b, r, ii)
                for g in allowed[owner] if k else ():
                    y = m.NewBoolVar(f"recv_{owner}_{g}_{r}")
                    m.Add(y >= x[owner, g] - cond)
                    occ.setdefault((g, r), []).append(regs * k * y)
        step = max(1, res.setmaxnreg_step)
        budget = {}
        for g in groups:
            k = m.NewIntVar(0, res.setmaxnreg_max // step, f"k_{g}")  # a budget may round up past cap
            budget[g] = k
            m.Add(step * k >= res.setmaxnreg_min).OnlyEnforceIf(used[g])
            m.Add(k == 0).OnlyEnforceIf(used[g].Not())
            for r in residues:
                terms = occ.get((g, r), [])
                m.Add(res.group_overhead + sum(terms) <= cap)
                m.Add(step * k >= res.group_overhead + sum(terms)).OnlyEnforceIf(used[g])
        if "register_file" not in p.options.relax:
            threads = {g: max(res.group_threads(ops[n].warps) for n in p.names if (n, g) in x)
                       for g in groups}  # the widest op allowed there: a bound on the group's threads
            m.Add(sum(threads[g] * step * budget[g] for g in groups) <= res.register_file)
    # smem constraints
    if "smem" not in p.options.relax:
        for r in residues:
            base = p.fixed_smem + sum(iv.weight * covered(iv.start, iv.end, r, ii) for iv in fixed)
            terms = []
            for op, begin, opts in staging:
                ends = sorted({end for end, _ in opts})
                prev = begin
                for end in ends:
                    k = covered(begin, end, r, ii) - covered(begin, prev, r, ii)
                    prev = end
                    if not k:
                        continue
                    conds = [c for e_end, c in opts if e_end >= end]
                    if any(isinstance(c, int) and c for c in conds):
                        base += op.result_bytes * k
                        continue
                    conds = [c for c in conds if not isinstance(c, int)]
                    if not conds:
                        continue
                    q = m.NewBoolVar(f"q_{op.name}_{end}_{r}")
                    for c in conds:
                        m.AddImplication(c, q)
                    terms.append(op.result_bytes * k * q)
            if base > res.smem:
                return None
            m.Add(base + sum(terms) <= res.smem)
    if "groups" not in p.options.relax:
        warps = {g: max(res.group_threads(ops[n].warps) for n in p.names if (n, g) in x) // 32
                 for g in groups}
        m.Add(sum(warps[g] * used[g] for g in groups) <= res.max_warps)
    # first-appearance numbering of the interchangeable compute groups: group g+1 only after g is used
    for a, b in itertools.pairwise(compute_groups):
        m.AddImplication(used[b], used[a])
    solver = cp.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = ASSIGN_SEED
    solver.parameters.max_time_in_seconds = max(0.01, deadline - time.monotonic())
    status = solver.Solve(m)
    if status not in (cp.OPTIMAL, cp.FEASIBLE):
        return None
    return {n: next(g for g in gs if solver.Value(x[n, g])) for n, gs in allowed.items()}
