"""The scheduling problem handed to the solver layers: a checked graph plus the machine's limits.

A :class:`Problem` is self-contained and integer: every duration is resolved (edge latencies, the extra
latency of a cross-warp-group hand-off on each edge) and every limit is copied from the machine, so the
solvers, the verifier and a saved JSON file need nothing else. :func:`build_problem` makes one from a
:class:`~twill.graph.Graph` in machine cycles; :func:`twill.normalize.normalize_problem` maps it to small
time units with the same ratios.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

from twill.errors import GraphError, OptionsError, ResourceError
from twill.ir.fields import unknown_keys_message
from twill.ir.graph import CARRIERS, DURATION_LIMIT, Dependence, Graph, Op, check_op
from twill.ir.machine import Machine

__all__ = ["HANDOFF_UNIT", "RELAXABLE", "Edge", "Options", "Problem", "Resources", "build_problem",
           "check_resources", "edge_key"]


RELAXABLE: dict[str, str] = {
    "registers": "live registers per warp group and moment (no per-thread limit, budgets need not hold them)",
    "register_file": "the register file shared by the setmaxnreg budgets (their sum is unbounded)",
    "smem": "shared-memory capacity",
    "tmem": "tensor-memory capacity",
    "handoff": "hand-offs between warp groups (cross-warp spills and barriers cost 0 cycles and no SMEM-port "
               "time)",
    "blocking": "blocking-wait concurrency (an op that waits may start while its group is issuing)",
    "groups": "the warp-group count (max_groups ignored, up to 8 groups, no warps-per-CTA limit)",
}
"""Constraint families that :attr:`Options.relax` can switch off, with what each relaxation drops. Used by
:mod:`twill.explain` to find which families bind a schedule; a relaxed schedule is a what-if, not a
schedule the machine can run."""


def _apart_pairs(apart: Any) -> tuple[tuple[str, str], ...]:
    """``Options.apart`` checked and normalized: sorted pairs of two different op names, sorted."""
    if apart is None:
        return ()
    if isinstance(apart, str) or not isinstance(apart, Iterable):
        raise OptionsError(f"apart={apart!r} must be a list of op-name pairs, e.g. [('qk', 'qk_gemm')]",
                           option="apart")
    items = list(apart)
    if len(items) == 2 and all(isinstance(n, str) for n in items):
        raise OptionsError(f"apart={apart!r} is one pair, not a list of pairs: write [{tuple(items)!r}]",
                           option="apart")
    pairs = []
    for pair in items:
        if (isinstance(pair, str) or not isinstance(pair, Iterable) or len(pair := tuple(pair)) != 2
                or not all(isinstance(n, str) for n in pair) or pair[0].strip() == pair[1].strip()):
            raise OptionsError(f"apart: {pair!r} is not a pair of two different op names", option="apart")
        pairs.append(tuple(sorted(n.strip() for n in pair)))
    return tuple(sorted(set(pairs)))


@dataclass(frozen=True)
class Options:
    """What the caller asks of the search.

    Parameters
    ----------
    max_groups : int or None
        Warp groups offered to the solver (the pool), including the variable-latency group. ``None``:
        as many as the machine's warps allow, at most 6.
    register_limit : int or None
        Per-thread register cap for every warp group (``None``: the machine's 255).
    register_plan : sequence of int or None
        Fixed ``setmaxnreg`` budget per warp group (its length sets the pool size); checked before any
        solve: multiples of the step, inside the setmaxnreg range, and fitting the register file.
    cross_group : bool
        Allow register values to cross warp groups (through SMEM). ``False`` forbids it on register-carried
        edges only; SMEM, TMEM and ordering edges may still cross (paper §6.2 ablation, fact sheet U14).
    max_stages : int or None
        Largest number of pipeline stages ``ceil(L / II)`` allowed (a hard budget, like Triton's
        ``num_stages``).
    stage_slack : int
        Extra stage windows tried at each II beyond the one of the modulo schedule's length. 0 is the
        paper's Algorithm 1, which can miss an II that needs one more stage (a longer schedule keeps more
        values alive but gives hand-offs between groups room); the default 1 tries one more window.
    prefetch : int
        Extra buffers per streaming load beyond its live copies (the pipeline depth the paper leaves to an
        autotuner, §5.3).
    max_ii : int or None
        Largest II (normalized units) searched; ``None``: the length of a schedule with no overlap.
    relax : frozenset of str
        Constraint families to leave out (names in :data:`RELAXABLE`); the solver, the verifier and the
        resource checks all skip them. Empty for a real schedule.
    apart : tuple of (str, str)
        Pairs of ops that must sit on different warp groups: a code generator's rule, not the machine's
        (``twill apply`` for sm_100 asks that a tcgen05 MMA and the TMEM load of its result be apart,
        which Triton 3.6's warp specialization needs, :func:`twill.apply.triton_apart`). Stored sorted.
    """

    max_groups: int | None = None
    register_limit: int | None = None
    register_plan: tuple[int, ...] | None = None
    cross_group: bool = True
    max_stages: int | None = None
    stage_slack: int = 1
    prefetch: int = 1
    max_ii: int | None = None
    relax: frozenset[str] = frozenset()
    apart: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if isinstance(self.relax, str) or not isinstance(self.relax, Iterable):
            raise OptionsError(f"relax={self.relax!r} must be a collection of constraint family names (e.g. "
                               f"{{{next(iter(RELAXABLE))!r}}}), among {', '.join(RELAXABLE)}",
                               option="relax")
        unknown = sorted(map(str, set(self.relax) - set(RELAXABLE)))
        if unknown:
            raise OptionsError(f"relax: {', '.join(unknown)} not among {', '.join(RELAXABLE)}",
                               option="relax")
        object.__setattr__(self, "relax", frozenset(self.relax))
        for name, low in (("max_groups", 1), ("register_limit", 1), ("max_stages", 1), ("max_ii", 1)):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < low):
                raise OptionsError(f"{name}={value!r} must be an integer >= {low} (or None)", option=name)
        for name in ("stage_slack", "prefetch"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise OptionsError(f"{name}={value!r} must be an integer >= 0", option=name)
        if not isinstance(self.cross_group, bool):
            raise OptionsError(f"cross_group={self.cross_group!r} must be True or False",
                               option="cross_group")
        if self.register_plan is not None and (
                not self.register_plan
                or any(isinstance(r, bool) or not isinstance(r, int) for r in self.register_plan)):
            raise OptionsError(f"register_plan={list(self.register_plan)!r} must be a non-empty list of "
                               f"integers (setmaxnreg budgets, one per warp group)", option="register_plan")
        object.__setattr__(self, "apart", _apart_pairs(self.apart))

    def to_dict(self) -> dict[str, Any]:
        """Plain-data form."""
        out = dict(self.__dict__)
        out["register_plan"] = list(self.register_plan) if self.register_plan else None
        out["relax"] = sorted(self.relax)
        out["apart"] = [list(pair) for pair in self.apart]
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Options:
        """Inverse of :meth:`to_dict`."""
        plan = data.get("register_plan")
        return cls(**{**dict(data), "register_plan": tuple(plan) if plan else None,
                      "relax": frozenset(data.get("relax", ())),
                      "apart": tuple(tuple(pair) for pair in data.get("apart", ()))})


@dataclass(frozen=True)
class Resources:
    """The machine limits a schedule must respect, copied from a :class:`Machine`.

    Units: registers per thread, bytes of SMEM, TMEM columns, warps.
    """

    machine: str
    family: str
    units: Mapping[str, int]
    register_file: int
    max_regs: int
    setmaxnreg_min: int
    setmaxnreg_max: int
    setmaxnreg_step: int
    group_overhead: int
    small_regs: int
    smem: int
    tmem: int
    tmem_alloc_step: int
    max_warps: int
    warps_per_group: int

    @classmethod
    def from_machine(cls, machine: Machine, options: Options) -> Resources:
        """Limits of ``machine`` with the caller's register limit applied."""
        limit = machine.max_regs_per_thread
        if options.register_limit is not None:
            limit = min(limit, options.register_limit)
        return cls(
            machine=machine.name, family=machine.family,
            units={u.name: u.capacity for u in machine.units.values()},
            register_file=machine.register_file, max_regs=limit,
            setmaxnreg_min=machine.setmaxnreg_min, setmaxnreg_max=machine.setmaxnreg_max,
            setmaxnreg_step=machine.setmaxnreg_step, group_overhead=machine.group_overhead_regs,
            small_regs=machine.small_value_regs,
            smem=machine.smem_per_cta, tmem=machine.tmem_columns, tmem_alloc_step=machine.tmem_alloc_step,
            max_warps=machine.max_warps, warps_per_group=machine.warps_per_group,
        )

    def budget_ok(self, regs: int) -> bool:
        """True if ``regs`` is a legal ``setmaxnreg`` value."""
        return (self.setmaxnreg_min <= regs <= self.setmaxnreg_max and regs % self.setmaxnreg_step == 0)

    def round_budget(self, regs: int) -> int:
        """Smallest legal ``setmaxnreg`` value holding ``regs`` per thread."""
        step = self.setmaxnreg_step
        return max(self.setmaxnreg_min, -(-regs // step) * step)

    def group_threads(self, warps: int) -> int:
        """Threads a warp group of ``warps`` warps occupies: whole hardware warpgroups (a one-warp role
        such as a TMA producer still takes a warpgroup, as in FA3's producer)."""
        per = self.warps_per_group
        return 32 * per * max(1, -(-warps // per))

    def to_dict(self) -> dict[str, Any]:
        """Plain-data form."""
        out = dict(self.__dict__)
        out["units"] = dict(self.units)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Resources:
        """Inverse of :meth:`to_dict` (files written before ``small_regs`` existed track every value)."""
        return cls(**{"small_regs": 0, **dict(data), "units": dict(data["units"])})

    def tracked(self, regs: int) -> bool:
        """True if a value of ``regs`` registers per thread is tracked by the liveness constraints (values of
        at most ``small_regs`` are part of the group overhead)."""
        return regs > self.small_regs


@dataclass(frozen=True)
class Edge:
    """A resolved dependence: integer latency ``d``, distance, and the hand-off cost when it crosses groups.

    Attributes
    ----------
    index : int
        Position in :attr:`Problem.edges`.
    src, dst : str
        Op names.
    latency : int
        ``d`` (time units of the problem).
    distance : int
        ``δ`` (iterations).
    blocking : bool
        The consumer waits synchronously for the value.
    carrier : str
        ``register``, ``smem``, ``tmem`` or ``none``.
    cross : int
        Extra latency when ``src`` and ``dst`` sit on different warp groups (reg -> SMEM -> reg spill plus a
        barrier for a register value; a barrier hand-off otherwise), or the edge's own
        :attr:`~twill.ir.graph.Dependence.handoff` when the graph gives one.
    inplace : bool
        ``dst`` overwrites the value in place (an MMA accumulator): it dies when ``dst`` issues.
    transfer : int
        Time (cycles, or units once normalized) the SMEM ports (unit :data:`HANDOFF_UNIT`) are busy on each
        side of a crossing of a register value, ``ceil(result_bytes / cost.smem_bytes_per_cycle)``: the
        producer's group stores it, the consumer's group loads it (:meth:`Problem.transfers`); 0 for
        SMEM/TMEM values, ordering edges and machines without that unit.
    """

    index: int
    src: str
    dst: str
    latency: int
    distance: int
    blocking: bool
    carrier: str
    cross: int
    inplace: bool = False
    transfer: int = 0

    @property
    def label(self) -> str:
        """``src->dst`` with the distance when not 0."""
        return f"{self.src}->{self.dst}" + (f" (δ={self.distance})" if self.distance else "")


@dataclass(frozen=True)
class Problem:
    """A scheduling problem in integer time units.

    Attributes
    ----------
    name : str
        The loop's name.
    ops : tuple of Op
        Ops (times in this problem's units), sorted by name when made by :func:`build_problem`.
    edges : tuple of Edge
        Resolved dependences, in :func:`edge_key` order when made by :func:`build_problem`.
    streaming : frozenset of str
        Variable-latency ops with no incoming data edge (paper §5.3).
    resources : Resources
        Machine limits.
    options : Options
        The caller's search options.
    fixed_smem, fixed_tmem : int
        SMEM bytes and TMEM columns held by loop-invariant values.
    cycles_per_unit : float
        Machine cycles per time unit (1.0 before normalization).
    """

    name: str
    ops: tuple[Op, ...]
    edges: tuple[Edge, ...]
    streaming: frozenset[str]
    resources: Resources
    options: Options
    fixed_smem: int = 0
    fixed_tmem: int = 0
    cycles_per_unit: float = 1.0
    _index: Mapping[str, Op] = field(default=None, repr=False, compare=False)  # type: ignore[assignment]
    _rows: Mapping[str, tuple[tuple[str, int, int, int], ...]] = field(  # type: ignore[assignment]
        default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_index", {op.name: op for op in self.ops})
        object.__setattr__(self, "_rows", None)  # on first use: a problem read from a file is check()ed first

    def reservations(self, name: str) -> tuple[tuple[str, int, int, int], ...]:
        """``(unit, offset, cycles, count)`` that every schedule gives op ``name``: its reservation table,
        and the SMEM traffic of the register values that always cross warp groups (:meth:`forced_cross`;
        :meth:`transfers`). The modulo problem, the bounds and the iterative modulo scheduler reserve
        these; the joint problem adds the crossings it chooses."""
        if self._rows is None:
            rows: dict[str, list[tuple[str, int, int, int]]] = {
                op.name: [(r.unit, r.start, r.cycles, r.count) for r in op.rrt] for op in self.ops}
            for op_name, offset, cycles in self.transfers(e for e in self.edges if self.forced_cross(e)):
                rows[op_name].append((HANDOFF_UNIT, offset, cycles, 1))
            object.__setattr__(self, "_rows", {n: tuple(r) for n, r in rows.items()})
        return self._rows[name]

    def op(self, name: str) -> Op:
        """The op called ``name``."""
        return self._index[name]

    @property
    def names(self) -> tuple[str, ...]:
        """Op names in order."""
        return tuple(op.name for op in self.ops)

    def in_edges(self, name: str) -> list[Edge]:
        """Edges into ``name``."""
        return [e for e in self.edges if e.dst == name]

    def out_edges(self, name: str) -> list[Edge]:
        """Edges out of ``name``."""
        return [e for e in self.edges if e.src == name]

    def is_vl(self, name: str) -> bool:
        """True for a variable-latency op (it must sit on the variable-latency warp group)."""
        return self._index[name].variable_latency

    @property
    def has_vl(self) -> bool:
        """True if some op has variable latency."""
        return any(op.variable_latency for op in self.ops)

    def blocking_pairs(self) -> list[tuple[str, list[Edge], list[str]]]:
        """What the blocking-wait family constrains: for each op ``v`` with an in-edge from another op,
        those edges (a ``blocking`` one makes ``v`` wait always, any other when it crosses warp groups)
        and the ops whose issue window (``issue_cycles`` from their start, modulo II) ``v``'s start must
        avoid when they share its group: the other ops that issue (``issue_cycles > 0``) with ``v``'s
        variable-latency flag."""
        out = []
        for v in self.ops:
            waits = [e for e in self.in_edges(v.name) if e.src != v.name]
            if waits:
                issuers = [o.name for o in self.ops if o.name != v.name and o.issue_cycles
                           and o.variable_latency == v.variable_latency]
                out.append((v.name, waits, issuers))
        return out

    def forced_cross(self, e: Edge) -> bool:
        """True if ``e`` joins ops that never share a warp group, so its hand-off is always paid: a
        variable-latency op and a fixed-latency one (the variable-latency group holds only
        variable-latency ops), or two ops issued by different numbers of warpgroups (a group holds ops of
        one shape; one-warp ops fit anywhere)."""
        a, b = self._index[e.src], self._index[e.dst]
        if a.variable_latency != b.variable_latency:
            return True
        per = max(1, self.resources.warps_per_group)
        return a.warps > 1 and b.warps > 1 and -(-a.warps // per) != -(-b.warps // per)

    def transfers(self, crossing: Iterable[Edge]) -> list[tuple[str, int, int]]:
        """The reservations ``(op, offset, length)`` on :data:`HANDOFF_UNIT` that the edges ``crossing`` add
        when each joins ops on different warp groups (offsets from ``start[op]`` and lengths in the
        problem's time units).

        A producer whose register value crosses stores it to shared memory once, as soon as it is ready
        (:meth:`store_offset`, ``transfer`` cycles), however many consumers on other groups read it; each
        crossing edge's consumer loads it before it starts, in its own slot (:meth:`load_lead`: a
        consumer that receives several values loads them one after the other). Both take the SMEM ports
        like any STS/LDS at the machine's ``cost.smem_bytes_per_cycle`` rate, so a hand-off is priced in
        bandwidth as well as in latency, and the load never starts before the store is done
        (:meth:`crossing_delay`). Edges without register bytes, self-edges and, with hand-offs relaxed,
        every edge add nothing.
        """
        if "handoff" in self.options.relax:
            return []
        stores: dict[str, int] = {}
        loads = []
        for e in crossing:
            if not e.transfer or e.src == e.dst:
                continue
            stores[e.src] = max(stores.get(e.src, 0), e.transfer)
            loads.append((e.dst, -self.load_lead(e), e.transfer))
        return [(src, self.store_offset(src), cycles) for src, cycles in stores.items()] + loads

    def store_offset(self, name: str) -> int:
        """When ``name``'s value is stored for another group, relative to its start: the least latency of
        its register edges (the value is ready then)."""
        return min((e.latency for e in self.out_edges(name) if e.transfer and e.dst != name), default=0)

    def load_lead(self, e: Edge) -> int:
        """How long before ``e.dst`` starts its load of ``e``'s value begins, if ``e`` crosses groups: the
        consumer loads the values it may receive from other groups one after the other, each in its own
        ``transfer``-long slot; the slot nearest the consumer goes to a crossing that is always paid
        (:meth:`forced_cross`), then to smaller transfers (then by producer name, distance, latency). A
        slot is kept whether or not its edge crosses (the order is fixed), so a consumer of several
        large values that could each cross may wait longer than it needs to. 0 for an edge without a
        transfer."""
        if not e.transfer or e.src == e.dst:
            return 0
        nearest_first = sorted((f for f in self.in_edges(e.dst) if f.transfer and f.src != f.dst),
                               key=lambda f: (not self.forced_cross(f), f.transfer, f.src, f.distance,
                                              f.latency, f.index))
        lead = 0
        for f in nearest_first:
            lead += f.transfer
            if f.index == e.index:
                break
        return lead

    def crossing_delay(self, e: Edge) -> int:
        """The least delay on ``e`` (``start[dst] + δ II - start[src]``) when its ends sit on different
        warp groups: ``d`` plus the hand-off latency ``cross``, and at least until the producer's store is
        done and the consumer's load slot begins (``store_offset + transfer + load_lead``, which binds
        when a hand-off is priced below its own SMEM traffic, or a consumer loads several values). ``d``
        alone with hand-offs relaxed."""
        if "handoff" in self.options.relax:
            return e.latency
        delay = e.latency + e.cross
        if e.transfer and e.src != e.dst:
            delay = max(delay, self.store_offset(e.src) + e.transfer + self.load_lead(e))
        return delay

    def least_latency(self, e: Edge) -> int:
        """The smallest delay any schedule keeps on ``e``: ``d``, or :meth:`crossing_delay` when the
        crossing is forced."""
        return self.crossing_delay(e) if self.forced_cross(e) else e.latency

    def check(self) -> None:
        """Reject a problem that is not well formed (one read from a file): :class:`GraphError` for an op or
        edge, ``ValueError`` for a machine limit.

        Ops pass :func:`twill.graph.check_op` against the problem's units and have unique names; every edge
        joins two ops and has integer ``latency``, ``distance`` and ``cross`` >= 0, a known carrier and
        Boolean flags, and an integer ``transfer`` >= 0;
        streaming ops are ops; every limit is an integer >= 0 and every unit capacity >= 1.
        """
        res = self.resources
        for fld in ("register_file", "max_regs", "setmaxnreg_min", "setmaxnreg_max", "setmaxnreg_step",
                    "group_overhead", "small_regs", "smem", "tmem", "tmem_alloc_step", "max_warps",
                    "warps_per_group"):
            value = getattr(res, fld)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"resources.{fld} = {value!r} must be a non-negative integer")
        if not isinstance(res.units, Mapping) or not res.units:
            raise ValueError("resources.units must name at least one unit")
        for unit, cap in res.units.items():
            if isinstance(cap, bool) or not isinstance(cap, int) or cap < 1:
                raise ValueError(f"resources.units.{unit} = {cap!r} must be an integer >= 1")
        for fld in ("fixed_smem", "fixed_tmem"):
            value = getattr(self, fld)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{fld} = {value!r} must be a non-negative integer")
        if not self.cycles_per_unit > 0:
            raise ValueError(f"cycles_per_unit = {self.cycles_per_unit!r} must be positive")
        if not self.ops:
            raise GraphError(f"problem {self.name!r} has no ops")
        seen: set[str] = set()
        for op in self.ops:
            check_op(op, res.units)
            big = max(op.cycles, op.latency, *(r.count for r in op.rrt))
            if big > DURATION_LIMIT:
                raise GraphError(f"op {op.name!r}: a duration or count of {big} is above the sanity limit "
                                 f"{DURATION_LIMIT}", op=op.name)
            if op.name in seen:
                raise GraphError(f"op {op.name!r} appears twice", op=op.name)
            seen.add(op.name)
        for e in self.edges:
            edge = (str(e.src), str(e.dst))
            for end in (e.src, e.dst):
                if end not in seen:
                    raise GraphError(f"edge {e.label}: {end!r} is not an op", edge=edge)
            for fld in ("latency", "distance", "cross", "transfer"):
                value = getattr(e, fld)
                if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                    raise GraphError(f"edge {e.label}: {fld}={value!r} must be a non-negative integer",
                                     edge=edge)
                if value > DURATION_LIMIT:
                    raise GraphError(f"edge {e.label}: {fld}={value} is above the sanity limit "
                                     f"{DURATION_LIMIT}", edge=edge)
            if e.carrier not in CARRIERS:
                raise GraphError(f"edge {e.label}: carrier={e.carrier!r} is not one of {', '.join(CARRIERS)}",
                                 edge=edge)
            if not isinstance(e.blocking, bool) or not isinstance(e.inplace, bool):
                raise GraphError(f"edge {e.label}: blocking and inplace must be true or false", edge=edge)
        strange = sorted(map(str, set(self.streaming) - seen))
        if strange:
            raise GraphError(f"streaming op(s) {', '.join(strange)} are not ops", op=strange[0])

    def replace_times(self, ops: Sequence[Op], edges: Sequence[Edge], cycles_per_unit: float) -> Problem:
        """The same problem with new op and edge timings."""
        return replace(self, ops=tuple(ops), edges=tuple(edges), cycles_per_unit=cycles_per_unit)

    def to_dict(self) -> dict[str, Any]:
        """Plain-data form (for JSON)."""
        from twill.ir.graph import op_to_dict

        return {
            "name": self.name,
            "ops": [op_to_dict(op) for op in self.ops],
            "edges": [{k: v for k, v in e.__dict__.items() if k != "index"} for e in self.edges],
            "streaming": sorted(self.streaming),
            "resources": self.resources.to_dict(),
            "options": self.options.to_dict(),
            "fixed_smem": self.fixed_smem,
            "fixed_tmem": self.fixed_tmem,
            "cycles_per_unit": self.cycles_per_unit,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Problem:
        """Inverse of :meth:`to_dict`.

        Raises
        ------
        ValueError
            A field the format does not have, at any level (problem, op, edge, resources, options): the
            message names it, where it is and the closest valid name.
        GraphError
            A malformed op.
        KeyError
            A missing field.
        """
        from twill.ir.graph import op_from_dict

        _only(data, [f.name for f in fields(cls) if not f.name.startswith("_")], "problem")
        ops = tuple(op_from_dict(o, f"ops[{i}]") for i, o in enumerate(data["ops"]))
        for name, table in (("options", Options), ("resources", Resources)):
            if isinstance(data[name], Mapping):
                _only(data[name], [f.name for f in fields(table)], name)
        options = Options.from_dict(data["options"])
        _check_apart(options, {op.name for op in ops}, data["name"])
        edge_fields = [f.name for f in fields(Edge) if f.name != "index"]
        for e in data["edges"]:
            if isinstance(e, Mapping):
                _only(e, edge_fields, f"edge {e.get('src', '?')}->{e.get('dst', '?')}")
        return cls(
            name=data["name"],
            ops=ops,
            edges=tuple(Edge(index=i, **e) for i, e in enumerate(data["edges"])),
            streaming=frozenset(data["streaming"]),
            resources=Resources.from_dict(data["resources"]),
            options=options,
            fixed_smem=int(data["fixed_smem"]),
            fixed_tmem=int(data["fixed_tmem"]),
            cycles_per_unit=float(data["cycles_per_unit"]),
        )


def _only(data: Mapping[str, Any], valid: Iterable[str], where: str) -> None:
    """ValueError naming every field of ``data`` outside ``valid`` (with the closest valid name)."""
    message = unknown_keys_message(data, valid, where)
    if message:
        raise ValueError(message)


HANDOFF_UNIT = "smem"
"""The unit a register hand-off between warp groups occupies (the SMEM ports: STS on one side, LDS on the
other), when the machine has it."""


def _cross_cost(graph: Graph, dep: Dependence, machine: Machine) -> int:
    """The hand-off latency of ``dep`` across warp groups: the edge's own ``handoff``, else a register
    value's ``spill_cost``, else the machine's model for the carrier and ``result_bytes``."""
    producer = graph.op(dep.src)
    if dep.handoff is not None:
        return dep.handoff
    if dep.carrier == "register" and producer.spill_cost is not None:
        return producer.spill_cost
    return machine.handoff_cycles(dep.carrier, producer.result_bytes)


def _transfer(graph: Graph, dep: Dependence, machine: Machine) -> int:
    if dep.carrier != "register" or dep.src == dep.dst or HANDOFF_UNIT not in machine.units:
        return 0
    return machine.handoff_transfer_cycles(graph.op(dep.src).result_bytes)


def _check_apart(options: Options, names: set[str], name: str) -> None:
    for pair in options.apart:
        missing = [n for n in pair if n not in names]
        if missing:
            raise OptionsError(f"apart: {', '.join(map(repr, missing))} of the pair {pair} is not an op of "
                               f"{name!r}", option="apart")


def edge_key(e: Edge) -> tuple[str, str, int, int, str, bool, bool, int, int]:
    """The canonical order of resolved edges: by ``(src, dst, distance, latency, carrier, blocking,
    inplace, cross, transfer)``. Two edges equal in all of these are interchangeable (an :class:`Edge`
    has no other field but its index), so the order is total on what matters."""
    return (e.src, e.dst, e.distance, e.latency, e.carrier, e.blocking, e.inplace, e.cross, e.transfer)


def build_problem(graph: Graph, machine: Machine, options: Options | None = None) -> Problem:
    """Resolve ``graph`` on ``machine`` into a :class:`Problem` in machine cycles.

    The problem lists its ops by name and its edges by :func:`edge_key`, whatever order the graph was
    built in: every later phase (normalization, the modulo problem, both joint encodings, the JSON)
    reads the problem in that canonical order, so the same graph built in any order of ops and edges
    gives the same answer, byte for byte. Op names are then the last tie-break among schedules equal
    in every goal (:data:`twill.solvers.joint.result.GOALS`): the solvers see the ops in name order.

    Raises
    ------
    GraphError
        The graph is malformed, uses a unit the machine lacks, or was lowered for another machine
        (:attr:`twill.ir.graph.Graph.machine`: its latencies and reservations are that machine's costs).
    """
    options = options or Options()
    if graph.machine and graph.machine != machine.name:
        raise GraphError(f"graph {graph.name!r} was lowered for machine {graph.machine!r} (its latencies "
                         f"and reservations are that machine's costs); it cannot be scheduled on "
                         f"{machine.name!r}: lower it again with machine={machine.name!r}")
    graph.check(machine.unit_names)
    _check_apart(options, {op.name for op in graph.ops}, graph.name)
    resolved = sorted(
        (Edge(index=0, src=d.src, dst=d.dst, latency=graph.edge_latency(d), distance=d.distance,
              blocking=d.blocking, carrier=d.carrier, cross=_cross_cost(graph, d, machine),
              inplace=d.inplace, transfer=_transfer(graph, d, machine))
         for d in graph.edges),
        key=edge_key)
    edges = tuple(replace(e, index=i) for i, e in enumerate(resolved))
    ops = tuple(sorted(graph.ops, key=lambda op: op.name))
    streaming = frozenset(op.name for op in ops if graph.is_streaming(op.name))
    return Problem(name=graph.name, ops=ops, edges=edges, streaming=streaming,
                   resources=Resources.from_machine(machine, options), options=options,
                   fixed_smem=graph.fixed_smem, fixed_tmem=graph.fixed_tmem)


def check_resources(problem: Problem) -> None:
    """Arithmetic checks that need no solver: raise :class:`ResourceError` with the sums in the message.

    * a register plan: every budget a legal ``setmaxnreg`` value, and their sum over threads within the
      register file;
    * a single value needing more registers per thread than any warp group may hold;
    * an op issued by more warps than a CTA has;
    * loop-invariant SMEM/TMEM plus values that are live at every moment (accumulators, carried to
      themselves) above the capacity, or any single value that cannot fit beside the invariant part.
    """
    res, opts = problem.resources, problem.options
    if opts.register_plan is not None:
        _check_plan(res, opts.register_plan, check_sum="register_file" not in opts.relax)
    cap = res.max_regs
    if opts.register_plan:
        cap = min(cap, max(opts.register_plan))
    if res.group_overhead > cap and "registers" not in opts.relax:
        limit = "register plan's largest budget" if opts.register_plan and cap < res.max_regs else "limit"
        raise ResourceError(f"the warp-group overhead alone, {res.group_overhead} registers per thread, is "
                            f"above the {limit} {cap}: no op can be placed on any warp group",
                            resource="registers")
    for op in problem.ops:
        _check_reservations(op, res.units)
        if op.warps > res.max_warps and "groups" not in opts.relax:
            raise ResourceError(f"op {op.name!r} is issued by {op.warps} warps > {res.max_warps} warps per "
                                f"CTA (source {op.source or '?'})", resource="warps")
        need = op.regs + res.group_overhead
        if need > cap and "registers" not in opts.relax:
            raise ResourceError(
                f"op {op.name!r} needs {op.regs} registers per thread for its result + {res.group_overhead} "
                f"group overhead = {need} > limit {cap} (source {op.source or '?'})", resource="registers")
    if "smem" not in opts.relax:
        _check_memory(problem, "smem", res.smem, problem.fixed_smem, "bytes")
        _check_rings(problem)
    if (res.tmem or problem.fixed_tmem or any(op.tmem for op in problem.ops)) and "tmem" not in opts.relax:
        _check_memory(problem, "tmem", res.tmem, problem.fixed_tmem, "columns")


def _check_reservations(op: Op, capacity: Mapping[str, int]) -> None:
    """:class:`ResourceError` if ``op`` alone holds more of a unit at some cycle of its reservation table
    than the unit's capacity: the modulo table of any II holds at least that at that residue, so no II
    fits (the search would walk every II up to ``max_ii`` to say so)."""
    events: dict[str, list[tuple[int, int]]] = {}
    for r in op.rrt:  # a sweep over the rows' starts and ends, per unit
        events.setdefault(r.unit, []).extend(((r.start, r.count), (r.end, -r.count)))
    for unit, marks in sorted(events.items()):
        held = 0
        for t, delta in sorted(marks, key=lambda m: (m[0], m[1])):  # ends before starts at one cycle
            held += delta
            if held > capacity.get(unit, 0):
                raise ResourceError(f"op {op.name!r} reserves {held} of unit {unit!r} at cycle {t} of its "
                                    f"reservation table, capacity {capacity.get(unit, 0)}: no II can hold "
                                    f"it (source {op.source or '?'})", resource=unit)


def _check_rings(problem: Problem) -> None:
    """Reject a ``prefetch`` whose streaming-load rings cannot fit SMEM at any II.

    Each buffer (``op.smem`` bytes) lives ``prefetch * II`` plus its op's cycles
    (:func:`twill.liveness.memory_intervals`), so it holds ``prefetch`` copies at every moment and one
    more at some (when the op takes a unit or more); the peak is at least
    ``fixed_smem + prefetch * sum(smem) + max(smem)`` bytes.

    Raises
    ------
    ResourceError
        That sum exceeds ``resources.smem`` (bytes per CTA), with the terms in the message.
    """
    depth = problem.options.prefetch
    loads = [op for op in problem.ops if op.name in problem.streaming and op.smem]
    if not loads or not depth:
        return
    extra = max((op.smem for op in loads if op.cycles >= 1), default=0)
    total = problem.fixed_smem + depth * sum(op.smem for op in loads) + extra
    if total > problem.resources.smem:
        terms = " + ".join(f"{op.smem} ({op.name})" for op in loads)
        raise ResourceError(
            f"smem: prefetch={depth} needs at least {problem.fixed_smem} loop-invariant + {depth} x "
            f"({terms}) + {extra} (one more copy of the largest while it lands) = {total} bytes > "
            f"capacity {problem.resources.smem} bytes at every II; use a smaller prefetch", resource="smem")


def _check_plan(res: Resources, plan: Sequence[int], check_sum: bool = True) -> None:
    bad = [r for r in plan if not res.budget_ok(r)]
    if bad:
        raise ResourceError(
            f"register plan {list(plan)}: {bad} not multiples of {res.setmaxnreg_step} in "
            f"[{res.setmaxnreg_min}, {res.setmaxnreg_max}] (setmaxnreg)", resource="register_file")
    threads = 32 * res.warps_per_group
    total = sum(threads * r for r in plan)
    if check_sum and total > res.register_file:
        terms = " + ".join(f"{threads}x{r}" for r in plan)
        raise ResourceError(
            f"register plan {list(plan)} needs {terms} = {total} registers > register file "
            f"{res.register_file}", resource="register_file")


def _check_memory(problem: Problem, kind: str, capacity: int, fixed: int, unit: str) -> None:
    def need(op: Op) -> int:
        return op.smem if kind == "smem" else op.tmem

    # Only an edge that carries the value in this memory keeps it live across iterations (an ordering
    # self-edge, carrier "none", or a register self-edge holds nothing here).
    always = [op for op in problem.ops if need(op) and any(
        e.src == op.name and e.dst == op.name and e.distance >= 1 and e.carrier == kind
        for e in problem.edges)]
    total = fixed + sum(need(op) for op in always)
    if total > capacity:
        terms = " + ".join([f"{fixed} loop-invariant"] + [f"{need(op)} ({op.name})" for op in always])
        raise ResourceError(f"{kind}: values live for the whole loop need {terms} = {total} {unit} > "
                            f"capacity {capacity} {unit}", resource=kind)
    for op in problem.ops:
        if need(op) and fixed + need(op) > capacity:
            raise ResourceError(f"{kind}: op {op.name!r} needs {need(op)} {unit} + {fixed} loop-invariant "
                                f"= {fixed + need(op)} > capacity {capacity} {unit}", resource=kind)
