"""The area stage bound: how many stages some schedule at an II needs at most, from the memory each
stage of gap holds.

:func:`twill.model.reductions.stage_bound` takes the least solution ``k*`` of a schedule's stage system
(residues and groups fixed, every gap at most the schedule's) and bounds its largest stage by a simple
path of the constraint graph. This module bounds that path's length in cycles with a linear program that
also counts what the path's gaps hold. The argument, for a schedule at ``II`` and its ``k*``:

* ``k*`` is a schedule (the argument of :func:`~twill.model.reductions.stage_bound`), so its register
  values, SMEM buffers and TMEM values fit: folded over ``II``, each resource's occupancy is at most its
  capacity at every residue, hence its **area** (units x cycles held, summed over the values) is at most
  capacity x ``II``. For registers, with each value weighed by the threads of its group shape
  (:meth:`Resources.group_threads`), the capacity is the register file less the overhead of the groups
  every schedule has: each group's occupancy is at most ``budget - overhead`` per thread and ``Σ
  threads x budget`` fits the file (:func:`capacities`).
* Every value holds its resource at least a least lifetime that no schedule shortens (:func:`holds`:
  its op's cycles; an accumulator's register self-edge ``δ II``; an SMEM or TMEM value until each reader
  ends; a forced hand-off's staging buffer), so what is left, the **slack** ``capacity x II - Σ weight x
  least lifetime``, bounds what longer gaps may add (:func:`area_slacks`). A negative slack: no schedule.
* An op ``t`` of largest start in ``k*`` is reached from an op of stage 0 (start ``< II``) by a simple
  path of *tight* arcs, each between the two ends of an edge ``e = u -> v``: a forward arc (a tight
  dependence; its span ``s = start[v] + δ II - start[u]`` is below ``D + II``, ``D`` the delay the
  groups need) adds ``s - δ II`` cycles; a backward arc (a held gap, ``s`` the schedule's own span, at
  least :meth:`Problem.least_latency`) adds ``δ II - s``.
* A forward arc out of ``u`` on a value that holds a resource keeps that value live for its span: a
  register value read on the same group for ``s`` (plus an asynchronous reader's cycles,
  :func:`~twill.model.liveness.use_hold`), a register value read on another group in its SMEM staging
  buffer from ``start[u] + cycles(u)`` until ``start[v] + δ II + 1``, an SMEM or TMEM value until its
  reader ends. Past the value's least lifetime that costs ``weight x`` (the extra cycles) of the
  resource's slack. A simple path leaves each op once, so the values of its forward arcs are distinct
  and their extra areas add up: at most each resource's slack. Ordering edges, untracked values (row
  statistics) and relaxed resources cost nothing: their arcs are free.

The linear program picks arcs fractionally (each op left at most once, entered at most once, at most
one arc between two ops, at most ``|V| - 1`` arcs) with each forward arc's span split into a free part
(up to the least lifetime) and an extension that costs slack, and an end op whose cycles count (a
column per op; the end leaves by no arc); its optimum bounds every such path's length plus its end's
cycles, hence ``L - (II - 1)``, ``L = max(start + cycles)`` and the path's first op starting before II.
The bound taken is the objective of the dual solution the solver returns (weak duality), so it holds
whatever the solver's tolerances.

**Over a range of IIs.** In stages (divided by ``II``) every coefficient is a maximum of terms ``a / II
+ b`` for constants ``a, b``, each monotone in ``II``; taking each term's worse value at ``lo`` or ``hi``
gives one program whose objective and bounds are at least, and whose area rows at most, those of every
II in ``[lo, hi]``, so its optimum bounds the stages of the whole range (:func:`path_stages`).
:func:`stage_bucket` fixes the ranges (width 1 below :data:`BUCKET_SHARE`, then about 6 %), so the bound
at one II does not depend on which IIs a search asks about.

Preconditions: the argument of :func:`~twill.model.reductions.stage_bound` (liveness is the only family
whose constraints grow with stage gaps); a resource's area counts only when its family is not relaxed
(``registers`` and ``register_file`` for registers, ``smem``, ``tmem``); two groups' overhead only where
variable-latency ops sit beside others (variable-latency isolation, which cannot be relaxed).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from twill.model.liveness import use_hold
from twill.model.problem import Edge, Problem

__all__ = ["BUCKET_SHARE", "Arc", "Held", "area_slacks", "capacities", "holds", "load_lp", "path_arcs",
           "path_stages",
           "stage_bucket"]

LP_MARGIN = 1e-9
"""Stages taken off the bound before it is rounded up, so that a value a rounding error above an integer
is not rounded past it. The bound itself does not trust the LP solver: it is the objective of the dual
solution the solver returns (:func:`path_stages`), a valid upper bound for any non-negative duals."""

BUCKET_SHARE = 16
""":func:`stage_bucket` covers ``[lo, lo + lo // BUCKET_SHARE]``: one LP per about 6 % of II."""


Terms = tuple[tuple[int, int], ...]
"""``((a, δ), ...)``: the function ``max(a + δ II)`` of II (a lifetime's lower bound, in time units)."""


def _per_ii(terms: Terms, lo: int, hi: int) -> tuple[float, float]:
    """Bounds on ``max(a + δ II) / II`` over ``II`` in ``[lo, hi]``: (below, above). Each term ``a / II +
    δ`` is monotone, so its extremes lie at ``lo`` or ``hi``."""
    below = max(min(a / lo, a / hi) + d for a, d in terms)
    above = max(max(a / lo, a / hi) + d for a, d in terms)
    return below, above


@dataclass(frozen=True)
class Arc:
    """One arc the tight path may take, from op ``tail`` to op ``head``.

    A backward arc (``least`` None) adds ``δ II - delay`` cycles (a held span, at least ``delay``). A
    forward arc adds its span minus ``δ II``; the span is at most ``delay + II - 1``, and the part of it
    above ``least`` (a function of II, :data:`Terms`) holds ``weight`` units of ``resource`` per cycle
    (``resource`` None: free).
    """

    tail: str
    head: str
    delay: int
    distance: int
    least: Terms | None = None
    weight: int = 0
    resource: str | None = None

    def per_ii(self, lo: int, hi: int) -> tuple[float, float]:
        """``(base, extra)`` in stages, each at least its value at every II of ``[lo, hi]``: what the
        arc adds before it costs area, and how much more it may add holding ``weight`` per cycle."""
        if self.least is None:
            return self.distance - min(self.delay / lo, self.delay / hi), 0.0
        top = 1 + max((self.delay - 1) / lo, (self.delay - 1) / hi)  # (delay + II - 1) / II
        if self.resource is None:
            return top - self.distance, 0.0
        below, above = _per_ii(self.least, lo, hi)
        return min(top, above) - self.distance, max(0.0, top - below)


@dataclass(frozen=True)
class Held:
    """A value's hold on a resource: ``weight`` units for at least :data:`Terms` ``life`` time units."""

    resource: str
    op: str
    weight: int
    life: Terms
    staging: bool = False


def holds(problem: Problem) -> list[Held]:
    """Every value's least hold of each resource whose family is not relaxed (module docstring).

    * ``regs`` (registers x the threads of the op's group shape): an op's own cycles, or a whole
      ``δ II`` for a register self-edge (an accumulator);
    * ``smem`` / ``tmem``: until each reader ends, at least ``least_latency + cycles(reader)`` after the
      value's start (a reader ``δ`` iterations on starts ``δ II`` earlier in its own iteration, so the
      span already counts the distance), and ``δ II + cycles`` for a self-edge; a streaming load's SMEM
      also ``prefetch * II`` earlier, which :func:`capacities` takes off the capacity;
    * ``smem`` of a staging buffer, for a register value with bytes whose hand-off is forced
      (:meth:`Problem.forced_cross`): from its end until the reader starts, plus one.
    """
    res, relax = problem.resources, problem.options.relax
    out: list[Held] = []
    for op in problem.ops:
        outs = problem.out_edges(op.name)
        if not {"registers", "register_file"} & relax and res.tracked(op.regs):
            life = [(op.cycles, 0)] + [(use_hold(problem, e), e.distance) for e in outs
                                       if e.dst == op.name and e.carrier == "register"]
            out.append(Held("regs", op.name, op.regs * res.group_threads(op.warps), tuple(life)))
        for kind, need in (("smem", op.smem), ("tmem", _tmem(problem, op.tmem))):
            if need and kind not in relax:
                life = [(op.cycles, 0)]
                for e in outs:
                    if e.carrier == kind:
                        reader = problem.op(e.dst).cycles
                        # a reader δ iterations on starts at least least_latency after the
                        # value's start, counted from its own iteration: δ II is in the span
                        life.append((op.cycles, e.distance) if e.dst == op.name
                                    else (problem.least_latency(e) + reader, 0))
                out.append(Held(kind, op.name, need, tuple(life)))
        forced = [e for e in outs if e.carrier == "register" and e.dst != op.name and problem.forced_cross(e)]
        if forced and op.result_bytes and "smem" not in relax:
            life = [(1, 0)] + [(problem.least_latency(e) + 1 - op.cycles, 0) for e in forced]
            out.append(Held("smem", op.name, op.result_bytes, tuple(life), staging=True))
    return out


def capacities(problem: Problem) -> dict[str, int]:
    """Units of each resource (whose family is not relaxed) the values may hold per time unit of II:
    ``"regs"`` the register file less the overhead of the groups every schedule has (two with
    variable-latency ops beside others: they never share one), ``"smem"`` bytes less the loop-invariant
    ones and the streaming loads' prefetch, ``"tmem"`` columns less the loop-invariant ones."""
    res, relax = problem.resources, problem.options.relax
    out: dict[str, int] = {}
    if not {"registers", "register_file"} & relax:
        groups = 2 if problem.has_vl and any(not op.variable_latency for op in problem.ops) else 1
        out["regs"] = res.register_file - groups * res.group_threads(1) * res.group_overhead
    if "smem" not in relax:
        ahead = sum(op.smem for op in problem.ops if op.name in problem.streaming)
        out["smem"] = res.smem - problem.fixed_smem - problem.options.prefetch * ahead
    if "tmem" not in relax:
        out["tmem"] = res.tmem - problem.fixed_tmem
    return out


def area_slacks(problem: Problem, lo: int, hi: int | None = None) -> dict[str, float]:
    """Area per time unit of II each resource has beyond its values' least holds, at most over the IIs
    ``[lo, hi]`` (``hi`` defaults to ``lo``): ``capacity - Σ weight x least hold / II`` (units). A
    negative slack means no schedule at any II of the range."""
    hi = lo if hi is None else hi
    out = {name: float(cap) for name, cap in capacities(problem).items()}
    for h in holds(problem):
        out[h.resource] -= h.weight * _per_ii(h.life, lo, hi)[0]
    return out


def _tmem(problem: Problem, need: int) -> int:
    step = problem.resources.tmem_alloc_step
    return -(-need // step) * step if step else need


def path_arcs(problem: Problem, resources: set[str]) -> list[Arc]:
    """The arcs of the linear program (module docstring); only ``resources`` (names of
    :func:`capacities`) make an arc's span cost area."""
    life = {(h.resource, h.op, h.staging): h for h in holds(problem)}
    arcs: list[Arc] = []

    def forward(e: Edge, delay: int, key: str, weight: int, least: Terms) -> None:
        if key not in resources or weight <= 0:
            arcs.append(Arc(e.src, e.dst, delay, e.distance, ()))
        else:
            arcs.append(Arc(e.src, e.dst, delay, e.distance, least, weight, key))

    def shifted(terms: Terms, by: int) -> Terms:
        return tuple((a + by, d) for a, d in terms)

    res = problem.resources
    for e in problem.edges:
        if e.src == e.dst:
            continue
        src, dst = problem.op(e.src), problem.op(e.dst)
        cross = max(e.latency, problem.least_latency(e), problem.crossing_delay(e))
        arcs.append(Arc(e.dst, e.src, problem.least_latency(e), e.distance))  # a held gap
        if e.carrier == "register":
            if not problem.forced_cross(e):  # read on the same group: the value's registers
                held = life.get(("regs", e.src, False))
                forward(e, max(e.latency, problem.least_latency(e)), "regs",
                        src.regs * res.group_threads(src.warps) if held else 0,
                        shifted(held.life if held else ((src.cycles, 0),), -use_hold(problem, e)))
            staged = life.get(("smem", e.src, True))  # its staging buffer, when some hand-off is forced
            base = shifted(staged.life, src.cycles - 1) if staged else ((src.cycles - 1, 0),)
            forward(e, cross, "smem", src.result_bytes, base)  # on another group: its staging buffer
        elif e.carrier in ("smem", "tmem"):
            held = life.get((e.carrier, e.src, False))
            forward(e, cross, e.carrier, held.weight if held else 0,
                    shifted(held.life, -dst.cycles) if held else ())
        else:
            forward(e, cross, "", 0, ())
    return arcs


def stage_bucket(ii: int) -> tuple[int, int]:
    """The range of IIs whose stage bound is computed with ``ii``'s (module docstring): ``(ii, ii)``
    below :data:`BUCKET_SHARE`, then consecutive ranges ``[b, b + b // BUCKET_SHARE - 1]`` from it."""
    if ii < BUCKET_SHARE:
        return ii, ii
    lo = BUCKET_SHARE
    while lo + lo // BUCKET_SHARE <= ii:
        lo += lo // BUCKET_SHARE
    return lo, lo + lo // BUCKET_SHARE - 1


def load_lp() -> None:
    """Import scipy's LP solver and sparse matrices now. :func:`path_stages` imports them on first use (so
    ``import twill`` stays light), which takes 0.1-0.5 s on a loaded 2-core machine; a search with a time
    limit loads them at its start, inside the limit, so a first use near the deadline does not overrun it."""
    from scipy import optimize, sparse  # noqa: F401


def path_stages(problem: Problem, lo: int, hi: int) -> int | None:
    """An upper bound on ``ceil(L / II)`` of the least solution of a schedule at any II in ``[lo, hi]``
    (module docstring), or None when every II of the range has a resource whose slack is negative (then
    none of them has a schedule).

    Parameters
    ----------
    problem : Problem
        The loop, in its own time units.
    lo, hi : int
        The range of IIs (``1 <= lo <= hi``).

    Returns
    -------
    int or None
        Stage count ``>= 1``.
    """
    from scipy import optimize, sparse  # loaded on first use: the solver's import stays light

    slacks = area_slacks(problem, lo, hi)
    if any(v < 0 for v in slacks.values()):
        return None
    arcs = path_arcs(problem, set(slacks))
    first = (hi - 1) / hi  # the first op's residue, at most II - 1, per II
    names = {name: i for i, name in enumerate(problem.names)}
    n = len(arcs)
    base, extra = zip(*(a.per_ii(lo, hi) for a in arcs), strict=True) if arcs else ((), ())
    costly = [i for i in range(n) if extra[i] > 0]
    ends = n + len(costly)  # then z_v in [0, 1]: the path ends at op v (L >= start[v] + cycles[v])
    # columns: x_a in [0, 1] for each arc, t_a >= 0 (stages past its base) for each costly arc, z_v
    rows: list[tuple[float, list[int], list[float]]] = []
    by_tail: dict[int, list[int]] = {k: [ends + k] for k in range(len(problem.ops))}  # the end leaves not
    by_head: dict[int, list[int]] = {}
    by_pair: dict[frozenset[str], list[int]] = {}
    for i, a in enumerate(arcs):
        by_tail[names[a.tail]].append(i)
        by_head.setdefault(names[a.head], []).append(i)
        by_pair.setdefault(frozenset((a.tail, a.head)), []).append(i)
    for group in (*by_tail.values(), *by_head.values(), *by_pair.values()):
        rows.append((1.0, group, [1.0] * len(group)))
    rows.append((float(len(problem.ops) - 1), list(range(n)), [1.0] * n))
    rows.append((1.0, list(range(ends, ends + len(problem.ops))), [1.0] * len(problem.ops)))
    per_resource: dict[str, tuple[list[int], list[float]]] = {}
    upper = [1.0] * n + [0.0] * len(costly) + [1.0] * len(problem.ops)
    for j, i in enumerate(costly):
        a = arcs[i]
        rows.append((0.0, [n + j, i], [1.0, -extra[i]]))  # t_a <= extra_a x_a
        if slacks[a.resource] > 0:
            upper[n + j] = extra[i]
            cols, vals = per_resource.setdefault(a.resource, ([], []))
            cols.append(n + j)
            vals.append(a.weight / slacks[a.resource])
        # else: no slack at all, no extension (t_a <= 0)
    for cols, vals in per_resource.values():
        rows.append((1.0, cols, vals))
    which = [r for r, (_, cols, _) in enumerate(rows) for _ in cols]
    matrix = sparse.coo_array(([v for _, _, vals in rows for v in vals],
                               (which, [c for _, cols, _ in rows for c in cols])),
                              shape=(len(rows), len(upper))).tocsr()
    gain = np.array(list(base) + [1.0] * len(costly) + [op.cycles / lo for op in problem.ops])
    bound = np.array([r[0] for r in rows])
    lp = optimize.linprog(-gain, A_ub=matrix, b_ub=bound, bounds=list(zip([0.0] * len(upper), upper,
                                                                          strict=True)), method="highs")
    duals = np.zeros(len(rows)) if lp.status != 0 else np.maximum(0.0, -lp.ineqlin.marginals)
    # weak duality, whatever the solver's accuracy: for y >= 0, gain.x <= y.b + Σ u max(0, gain - A'y)
    value = float(duals @ bound + np.asarray(upper) @ np.maximum(0.0, gain - matrix.T @ duals))
    return max(1, math.ceil(max(0.0, value) + first - LP_MARGIN))
