"""The joint problem's constraint families, stated once and solver-neutral (docs/model.md §4-5).

Both encodings of the joint problem (:mod:`twill.solvers.joint.encoding` on SMT,
:mod:`twill.solvers.joint.cpsat` on CP-SAT) read what to constrain from :meth:`Formulation.of`: which
dependences carry a hand-off delay, which reservations and live items exist only when an edge crosses
warp groups, how long each value lives, which ops wait, which groups may hold which ops, the budgets
and the symmetry reductions (:mod:`twill.model.reductions`). What stays in an encoding is how its
solver says it: terms and shifts ``k * II`` on SMT, cumulatives and optional intervals on CP-SAT.

Nothing here depends on the II: a formulation is a function of the :class:`~twill.model.problem.Problem`
alone. An existence condition is data (:class:`When`): always, or when any of a list of edges joins ops
on different warp groups; an encoding turns it into its own literal.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable
from dataclasses import dataclass

from twill.model.liveness import use_hold, value_uses
from twill.model.problem import HANDOFF_UNIT, Problem
from twill.model.reductions import BudgetArrangement, budget_arrangements, first_appearance, involution

__all__ = [
    "ALWAYS", "Blocking", "CrossingBooking", "Dependence", "Formulation", "LiveItem", "Placement", "Use",
    "When", "accumulators", "pool_size",
]

Pair = tuple[str, str]


def accumulators(problem: Problem) -> list[str]:
    """Ops whose tracked register value is carried to themselves (live at every moment), sorted.

    Parameters
    ----------
    problem : Problem
        The loop.

    Returns
    -------
    list of str
        Names of the ops with a register-carried self edge of distance >= 1 and a tracked register count.
    """
    res = problem.resources
    return sorted(op.name for op in problem.ops if res.tracked(op.regs) and any(
        e.dst == op.name and e.distance >= 1 and e.carrier == "register" for e in problem.out_edges(op.name)))


def pool_size(problem: Problem) -> int:
    """Warp groups offered to the solver: the register plan's length, ``max_groups``, or as many as fit.

    The default is limited by the warps per CTA (each group takes at least one warpgroup), by the number
    of ops, and capped at 6 (a variable-latency group plus five compute groups, FA4's structure). With
    ``"groups"`` relaxed (and no register plan) the pool is one group per op, up to 8.

    Parameters
    ----------
    problem : Problem
        The loop and its options.

    Returns
    -------
    int
        The number of warp groups ``0 .. pool - 1`` an encoding offers.
    """
    opts, res = problem.options, problem.resources
    if opts.register_plan:
        return len(opts.register_plan)
    if "groups" in opts.relax:
        compute = sum(1 for op in problem.ops if not op.variable_latency)
        return max(1, min(8, compute + (1 if problem.has_vl else 0)))
    if opts.max_groups is not None:
        return opts.max_groups
    per_cta = res.max_warps // res.warps_per_group
    compute = sum(1 for op in problem.ops if not op.variable_latency)
    return max(1, min(per_cta, 6, compute + (1 if problem.has_vl else 0)))


@dataclass(frozen=True)
class When:
    """An existence condition: always (``crosses`` empty), or when any edge of ``crosses`` (``(src,
    dst)`` pairs) joins ops on different warp groups."""

    crosses: tuple[Pair, ...] = ()

    @property
    def always(self) -> bool:
        """True for the unconditional case."""
        return not self.crosses


ALWAYS = When()
"""The condition that always holds."""


class Placement(enum.Enum):
    """Where a use's consumer must sit for the use to extend a lifetime."""

    ANY = "any"
    """Always."""
    SAME_GROUP = "same"
    """Only when the consumer is on the holder's warp group (a register value read in place)."""
    OTHER_GROUP = "other"
    """Only when the consumer is on another warp group (a staging buffer's crossing reader)."""


@dataclass(frozen=True)
class Use:
    """A use that keeps an item live: until ``start[dst] + hold + distance * II`` when ``placement``
    holds."""

    dst: str
    hold: int
    distance: int
    placement: Placement = Placement.ANY


@dataclass(frozen=True)
class LiveItem:
    """``weight`` units of ``resource`` held from ``start[op] + offset + offset_k * II``.

    The item is held for the constant ``length`` when it is given; otherwise until its end, the latest
    of ``start[op] + end_from`` and each :class:`Use` that applies. ``holder`` is the op whose warp group
    holds it (the per-group register resource); ``when`` says when it exists. Units: registers per thread
    (``"regs"``), bytes (``"smem"``), TMEM columns (``"tmem"``); times in the problem's units.
    """

    resource: str
    op: str
    holder: str
    weight: int
    offset: int = 0
    offset_k: int = 0
    length: int | None = None
    end_from: int = 0
    uses: tuple[Use, ...] = ()
    when: When = ALWAYS


@dataclass(frozen=True)
class CrossingBooking:
    """``count`` of ``unit`` from ``start[op] + offset`` for ``cycles``, when ``when`` holds (the SMEM
    traffic of a register hand-off that only some assignments make)."""

    unit: str
    op: str
    offset: int
    cycles: int
    count: int
    when: When


@dataclass(frozen=True)
class Dependence:
    """Edge ``src -> dst``: ``start[dst] + distance * II >= start[src] + least`` always, ``+ crossing``
    instead when the ends sit on different groups (``None``: no extra delay beyond ``least``), and
    ``together``: the ends must share a group (a register carrier with ``cross_group=False``)."""

    src: str
    dst: str
    distance: int
    least: int
    crossing: int | None
    together: bool


@dataclass(frozen=True)
class Blocking:
    """Op ``op`` waits when ``waits`` holds; then its start lies outside each same-group issuer's issue
    window: ``issuers`` are ``(op, issue_cycles)``."""

    op: str
    waits: When
    issuers: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class Formulation:
    """What the joint problem constrains, derived once from a :class:`Problem` (:meth:`of`).

    Attributes
    ----------
    pool : int
        Warp groups offered (:func:`pool_size`).
    groups_of : tuple of (str, tuple of int)
        Per op (in problem order) the groups it may take: group 0 exactly for the variable-latency ops
        when the loop has any, the others for the fixed-latency ones (the variable_latency family).
    warpgroups : tuple of (str, int, bool)
        Per op ``(name, warpgroups, exact)``: a group holding the op has ``warpgroups`` warpgroups
        (exactly when ``exact``, at least for a one-warp op): the group_shape family.
    shapes : tuple of int
        The distinct warpgroup counts, ascending (each group's shape is one of them).
    dependences : tuple of Dependence
        One per edge, in problem order (self edges included: their ``least`` bounds the II).
    apart : tuple of (str, str)
        Op pairs that must sit on different groups (``Options.apart``).
    bookings : tuple of CrossingBooking
        The SMEM-port traffic of register hand-offs that exists only when an edge crosses groups: a
        consumer's load per crossing edge, the producer's one store if any consumer crosses
        (:meth:`Problem.transfers`; a forced crossing's traffic is in :meth:`Problem.reservations`).
    register_items : tuple of LiveItem
        A tracked register value from its op's start to the latest of its end and each same-group use
        ``start[dst] + δ II + hold`` (:func:`~twill.model.liveness.use_hold`; uses followed through views,
        :func:`~twill.model.liveness.value_uses`, with ``δ`` summed along the way); and a received copy on the
        consumer's group, ``use_hold`` long, when the edge crosses (none when ``use_hold`` is 0: a
        synchronous consumer streams it out of SMEM). Empty when ``"registers"`` is relaxed.
    memory_items : tuple of LiveItem
        An SMEM or TMEM value until its last consumer ends (through views), a streaming load's buffer
        taken ``prefetch`` IIs ahead, TMEM rounded up to the allocation step.
    staging : tuple of LiveItem
        One SMEM staging buffer per register value read on another group, from its op's end until its
        last crossing reader starts + 1, when any of those edges crosses.
    blocking : tuple of Blocking
        The blocking-wait family (:meth:`Problem.blocking_pairs`); empty when relaxed.
    issue : tuple of (str, int)
        The issue family: ``(op, issue_cycles)`` of every op that issues (``issue_cycles > 0``), in problem
        order. A warp group has one issue stream, so the ops on group ``w`` satisfy ``Σ issue_cycles <= II``
        (the iterations' copies of an op issue once per II each; interleaving inside the II is free).
    handoff_costs : tuple of (str, str, int)
        ``(src, dst, cross)`` of each edge whose hand-off latency counts when it crosses (a goal).
    arrangements : tuple of BudgetArrangement
        Budget arrangements and interchangeable blocks (:func:`~twill.model.reductions.budget_arrangements`).
    numbering : tuple of tuple of (str, int, tuple of str)
        Per arrangement, the first-appearance rules (:func:`~twill.model.reductions.first_appearance`):
        an op on group ``w`` needs an earlier op on ``w - 1``.
    swap : (str, str) or None
        The sub-tile swap's first moved op and its image (:func:`~twill.model.reductions.involution`):
        the first starts no later than the second.
    accumulators : tuple of str
        :func:`accumulators`.
    register_limit : int
        The per-thread register limit, ``min(max_regs, setmaxnreg_max)``.
    """

    pool: int
    groups_of: tuple[tuple[str, tuple[int, ...]], ...]
    warpgroups: tuple[tuple[str, int, bool], ...]
    shapes: tuple[int, ...]
    dependences: tuple[Dependence, ...]
    apart: tuple[Pair, ...]
    bookings: tuple[CrossingBooking, ...]
    register_items: tuple[LiveItem, ...]
    memory_items: tuple[LiveItem, ...]
    staging: tuple[LiveItem, ...]
    blocking: tuple[Blocking, ...]
    issue: tuple[tuple[str, int], ...]
    handoff_costs: tuple[tuple[str, str, int], ...]
    arrangements: tuple[BudgetArrangement, ...]
    numbering: tuple[tuple[tuple[str, int, tuple[str, ...]], ...], ...]
    swap: Pair | None
    accumulators: tuple[str, ...]
    register_limit: int

    @classmethod
    def of(cls, problem: Problem) -> Formulation:
        """Derive every family's data from ``problem`` (docs/model.md §5).

        Parameters
        ----------
        problem : Problem
            The loop in (normalized) time units, with its options.

        Returns
        -------
        Formulation
        """
        p, res, opts = problem, problem.resources, problem.options
        pool = pool_size(p)
        first = 1 if p.has_vl else 0
        groups = {op.name: ((0,) if op.variable_latency else tuple(range(first, pool))) for op in p.ops}
        per = res.warps_per_group
        warpgroups = tuple((op.name, max(1, -(-op.warps // per)), op.warps > 1) for op in p.ops)
        compute = [op.name for op in p.ops if not op.variable_latency]
        arrangements = tuple(budget_arrangements(p, pool))
        numbering = tuple(tuple((o, w, tuple(b)) for o, w, b in first_appearance(compute, a.blocks))
                          for a in arrangements)
        sigma = involution(p)
        swap = None
        if sigma is not None:
            moved = next(n for n in p.names if sigma[n] != n)
            swap = (moved, sigma[moved])
        return cls(
            pool=pool, groups_of=tuple(groups.items()), warpgroups=warpgroups,
            shapes=tuple(sorted({w for _, w, _ in warpgroups})),
            dependences=_dependences(p), apart=tuple(opts.apart), bookings=_bookings(p, groups),
            register_items=_register_items(p), memory_items=_memory_items(p),
            staging=_staging(p, groups), blocking=_blocking(p),
            issue=tuple((op.name, op.issue_cycles) for op in p.ops if op.issue_cycles > 0),
            handoff_costs=tuple((e.src, e.dst, e.cross) for e in p.edges if e.cross and e.src != e.dst),
            arrangements=arrangements, numbering=numbering, swap=swap,
            accumulators=tuple(accumulators(p)), register_limit=min(res.max_regs, res.setmaxnreg_max))

    def issue_load(self, w: int) -> tuple[tuple[str, int], ...]:
        """The issuing ops that group ``w`` may hold, ``(op, issue_cycles)``: the terms of its issue limit."""
        allowed = dict(self.groups_of)
        return tuple((o, c) for o, c in self.issue if w in allowed[o])

    def smem_items(self) -> tuple[LiveItem, ...]:
        """The SMEM items in the order both encodings list them: values and rings, then staging."""
        return tuple(it for it in self.memory_items if it.resource == "smem") + self.staging

    def smem_granularity(self) -> int:
        """The gcd of the SMEM items' bytes (1 without items): the footprint goal moves in these steps."""
        return max(1, math.gcd(*(it.weight for it in self.smem_items()))) if self.smem_items() else 1

    def smem_least(self) -> int:
        """A lower bound on the footprint goal: one slot of every SMEM item that always exists."""
        return sum(it.weight for it in self.smem_items() if it.when.always)


def _always_same(groups: dict[str, tuple[int, ...]]) -> Callable[[str, str], bool]:
    """A predicate: ``u`` and ``v`` share a group in every assignment (one choice each, the same one)."""
    return lambda u, v: u == v or (len(groups[u]) == 1 and groups[u] == groups[v])


def _dependences(p: Problem) -> tuple[Dependence, ...]:
    out = []
    for e in p.edges:
        if e.src == e.dst:
            out.append(Dependence(e.src, e.dst, e.distance, e.latency, None, False))
            continue
        delay = p.crossing_delay(e)
        extra = delay if delay > e.latency and not p.forced_cross(e) else None  # a forced one is in least
        out.append(Dependence(e.src, e.dst, e.distance, p.least_latency(e), extra,
                              e.carrier == "register" and not p.options.cross_group))
    return tuple(out)


def _bookings(p: Problem, groups: dict[str, tuple[int, ...]]) -> tuple[CrossingBooking, ...]:
    """Hand-off traffic on :data:`HANDOFF_UNIT` present only when an edge crosses; none for an edge
    whose ends always or never share a group (never: the crossing is forced, in the reservations)."""
    if HANDOFF_UNIT not in p.resources.units or not p.options.cross_group:
        return ()
    forced = {op for op, offset, _ in p.transfers(e for e in p.edges if p.forced_cross(e))
              if offset >= 0}  # producers whose one store every schedule makes
    out, stores = [], {}
    for e in p.edges:
        parts = p.transfers([e])
        if not parts or p.forced_cross(e):
            continue
        gu, gv = groups[e.src], groups[e.dst]
        if not set(gu) & set(gv) or (len(gu) == 1 and len(gv) == 1):
            continue  # the condition is a constant
        (src, offset, cycles), (dst, load_at, load) = parts
        out.append(CrossingBooking(HANDOFF_UNIT, dst, load_at, load, 1, When(((e.src, e.dst),))))
        if src not in forced:
            stores.setdefault((src, offset, cycles), []).append((e.src, e.dst))
    for (src, offset, cycles), pairs in stores.items():
        out.append(CrossingBooking(HANDOFF_UNIT, src, offset, cycles, 1, When(tuple(pairs))))
    return tuple(out)


def _register_items(p: Problem) -> tuple[LiveItem, ...]:
    res = p.resources
    if "registers" in p.options.relax:
        return ()
    out = []
    for op in p.ops:
        if not res.tracked(op.regs):
            continue
        uses = value_uses(p, op.name, "register")  # through views to their readers
        out.append(LiveItem("regs", op.name, op.name, op.regs, end_from=op.cycles, uses=tuple(
            Use(e.dst, use_hold(p, e), distance,
                Placement.ANY if e.dst == op.name else Placement.SAME_GROUP) for e, distance in uses)))
        for e, _ in uses:
            if e.dst == op.name or not use_hold(p, e):
                continue  # a synchronous consumer streams a received value out of SMEM
            out.append(LiveItem("regs", e.dst, e.dst, op.regs, length=use_hold(p, e),
                                when=When(((op.name, e.dst),))))
    return tuple(out)


def _memory_items(p: Problem) -> tuple[LiveItem, ...]:
    out = []
    step = p.resources.tmem_alloc_step
    for op in p.ops:
        for kind, need in (("smem", op.smem), ("tmem", op.tmem)):
            if not need or kind in p.options.relax:
                continue
            uses = tuple(Use(e.dst, p.op(e.dst).cycles, distance)
                         for e, distance in value_uses(p, op.name, kind))
            ahead = p.options.prefetch if kind == "smem" and op.name in p.streaming else 0
            if kind == "tmem" and step:
                need = -(-need // step) * step
            out.append(LiveItem(kind, op.name, op.name, need, offset_k=-ahead, end_from=op.cycles, uses=uses))
    return tuple(out)


def _staging(p: Problem, groups: dict[str, tuple[int, ...]]) -> tuple[LiveItem, ...]:
    """Staging buffers; an edge whose ends always share a group needs none, and one whose ends never
    share a group makes its buffer unconditional."""
    always_same = _always_same(groups)
    if "smem" in p.options.relax:
        return ()
    staged: dict[str, list] = {}  # one staging buffer per value crossing groups
    for e in p.edges:
        if e.carrier != "register" or e.src == e.dst or not p.op(e.src).result_bytes:
            continue
        if not always_same(e.src, e.dst):
            staged.setdefault(e.src, []).append(e)
    out = []
    for name, edges in staged.items():
        src = p.op(name)
        out.append(LiveItem("smem", name, name, src.result_bytes, offset=src.cycles, end_from=src.cycles + 1,
                            uses=tuple(Use(e.dst, 1, e.distance, Placement.OTHER_GROUP) for e in edges),
                            when=ALWAYS if any(not set(groups[name]) & set(groups[e.dst]) for e in edges)
                            else When(tuple((name, e.dst) for e in edges))))
    return tuple(out)


def _blocking(p: Problem) -> tuple[Blocking, ...]:
    if "blocking" in p.options.relax:
        return ()
    out = []
    for v, edges, issuers in p.blocking_pairs():
        waits = ALWAYS if any(e.blocking for e in edges) else When(tuple((e.src, v) for e in edges))
        out.append(Blocking(v, waits, tuple((o, p.op(o).issue_cycles) for o in issuers)))
    return tuple(out)
