"""The loop dependence graph: tile-level ops, their reservation tables, and dependences.

A :class:`Graph` is the body of one singly nested loop (paper §3.1). Each node is an :class:`Op` that uses
functional units of the whole SM, described by its reservation table (RRT); each edge is a
:class:`Dependence` ``(u, v, d, δ)``: the instance of ``v`` in iteration ``i`` may issue no earlier than
``d`` cycles after the instance of ``u`` in iteration ``i - δ``.

Build a graph by hand::

    >>> g = Graph("figure1")
    >>> _ = g.add_op("S", "gemm", busy={"tc": 1}, latency=1)
    >>> _ = g.add_op("P", "exp", busy={"mufu": 1}, latency=1)
    >>> _ = g.add_op("O", "gemm", busy={"tc": 1}, latency=1)
    >>> _ = g.add_edge("S", "P")
    >>> _ = g.add_edge("P", "O")
    >>> _ = g.add_edge("O", "O", distance=1)
    >>> g.check()
    >>> [op.name for op in g.ops]
    ['S', 'P', 'O']

All times are in cycles of the machine (or, after :mod:`twill.normalize`, in normalized time units);
``regs`` is registers per thread, ``smem`` bytes, ``tmem`` columns.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import networkx as nx

from twill.errors import GraphError
from twill.ir.fields import unknown_keys_message

__all__ = ["CARRIERS", "Carrier", "Dependence", "Graph", "Op", "Reservation"]

Carrier = Literal["register", "smem", "tmem", "none"]
CARRIERS: tuple[str, ...] = ("register", "smem", "tmem", "none")


@dataclass(frozen=True)
class Reservation:
    """One rectangle of a reservation table: ``count`` instances of ``unit`` busy for ``cycles`` cycles.

    Parameters
    ----------
    unit : str
        Functional unit name as the machine calls it (``"tc"``, ``"mufu"``, ``"alu"``, ``"tma"``, ...).
    start : int
        Offset in cycles from the op's issue at which the unit becomes busy (>= 0).
    cycles : int
        Number of consecutive cycles the unit is busy (>= 1).
    count : int
        Instances of the unit busy in each of those cycles (>= 1).
    """

    unit: str
    start: int
    cycles: int
    count: int = 1

    @property
    def end(self) -> int:
        """First cycle (relative to issue) after the reservation."""
        return self.start + self.cycles


@dataclass(frozen=True)
class Op:
    """A tile-level operation of the loop body.

    Parameters
    ----------
    name : str
        Unique name in the graph.
    kind : str
        What it does: ``gemm``, ``tma_load``, ``exp``, ``alu``, ``reduce``, ``tmem_load``, ``tmem_store``,
        ``convert``, ``store``, ``atomic`` ... (free text; the solver only reads the fields below).
    rrt : tuple of Reservation
        Reservation table. ``cycles`` (the number of RRT rows) is ``max(r.start + r.cycles)``.
    latency : int
        Cycles from issue until the result can be used: the default ``d`` of the op's outgoing edges.
    issue_cycles : int
        Cycles the issuing warp group is busy issuing the op. Equal to ``cycles`` for an op the warps
        execute themselves (ALU, MUFU); small for an asynchronous Tensor Core or TMA op, which frees its
        warps right after issue. Blocking-wait concurrency (paper §4.3) is judged on this interval.
    regs : int
        Registers per thread the result holds, for a warp group of ``warps`` warps.
    smem : int
        Bytes of shared memory the result holds while live.
    tmem : int
        Tensor-memory columns (of 128 lanes x 32 bit) the result holds while live.
    result_bytes : int
        Size of the result in bytes; prices a hand-off of the value to another warp group.
    variable_latency : bool
        The latency varies at run time (TMA loads, atomics); such ops go on their own warp group.
    warps : int
        Warps that must issue the op together (4 per warp group for a Hopper wgmma, 1 for a TMA load or a
        Blackwell tcgen05.mma issued by one thread).
    spill_cost : int or None
        Cycles of extra latency a cross-warp-group hand-off of the result costs (reg -> SMEM -> reg).
        ``None``: computed from the machine's hand-off model and ``result_bytes``. Either way the hand-off
        also takes SMEM-port time for ``result_bytes`` (store and load, docs/model.md §2), and the
        consumer cannot load before the store is done; with ``result_bytes = 0`` it takes none. Prices
        register-carried edges only; :attr:`Dependence.handoff` prices one edge of any carrier.
    completion : int or None
        Cycles from issue until the op has completed (its result written, its operands read), when that
        is later than its last busy cycle: a reservation table with idle trailing cycles. ``None``: the
        table's length. Must be at least the table's length.
    async_reader : bool or None
        The op reads its register operands asynchronously, over its whole duration (an RS wgmma), so a
        register value it reads stays live until it completes. ``None``: inferred, ``issue_cycles <
        busy_cycles`` (the warps are free before the units are), which is what every graph meant before
        the flag existed.
    view : bool
        The op is a pure view or alias of the values it reads (a subview, transpose, reshape of a
        buffer): it holds no storage of its own (``regs``, ``smem`` and ``tmem`` must be 0), and a value
        it reads stays live until the view's own readers are done with it (docs/model.md §5).
    source : str
        Where the op came from: TTGIR location or ``file.py:line`` of the builder call.
    attrs : tuple of (str, str)
        Free-form annotations (the TTGIR ops merged into it, shapes), kept for display only.
    """

    name: str
    kind: str
    rrt: tuple[Reservation, ...]
    latency: int
    issue_cycles: int
    regs: int = 0
    smem: int = 0
    tmem: int = 0
    result_bytes: int = 0
    variable_latency: bool = False
    warps: int = 1
    spill_cost: int | None = None
    source: str = ""
    attrs: tuple[tuple[str, str], ...] = ()
    completion: int | None = None
    async_reader: bool | None = None
    view: bool = False

    @property
    def busy_cycles(self) -> int:
        """Rows of the reservation table: cycles from issue until every unit the op uses is free (0 for
        an op that uses no unit)."""
        return max((r.end for r in self.rrt), default=0)

    @property
    def cycles(self) -> int:
        """Cycles from issue until the op has completed: :attr:`completion` when given, else the
        reservation table's length (:attr:`busy_cycles`)."""
        return self.busy_cycles if self.completion is None else self.completion

    @property
    def units(self) -> frozenset[str]:
        """Names of the functional units the op reserves."""
        return frozenset(r.unit for r in self.rrt)

    @property
    def is_async(self) -> bool:
        """True when the op reads its register operands asynchronously (:attr:`async_reader`; when not
        given, inferred as ``issue_cycles < busy_cycles``: the warps are free before the units are)."""
        if self.async_reader is not None:
            return self.async_reader
        return self.issue_cycles < self.busy_cycles

    def usage(self, unit: str) -> list[int]:
        """Busy count of ``unit`` in each cycle ``0 .. cycles-1`` (one RRT column)."""
        column = [0] * self.cycles
        for r in self.rrt:
            if r.unit == unit:
                for c in range(r.start, r.end):
                    column[c] += r.count
        return column

    def total_usage(self, unit: str) -> int:
        """Unit-cycles of ``unit`` the op reserves (the sum of its RRT column)."""
        return sum(r.cycles * r.count for r in self.rrt if r.unit == unit)


@dataclass(frozen=True)
class Dependence:
    """A dependence ``src -> dst``: ``dst`` of iteration ``i`` waits for ``src`` of iteration ``i - δ``.

    Parameters
    ----------
    src, dst : str
        Op names.
    latency : int or None
        ``d`` in cycles. ``None`` means "the producer's latency", resolved by :meth:`Graph.edge_latency`
        (0 for a streaming producer, paper §5.3).
    distance : int
        ``δ``, iterations (0 within an iteration, 1 for a loop-carried value).
    blocking : bool
        ``dst`` must issue a blocking wait before reading the value (consumers of Tensor Core, TMA and
        TMEM results). Nothing else may run on its warp group when it starts (paper §4.3).
    carrier : str
        Where the value travels: ``register``, ``smem``, ``tmem``, or ``none`` for a pure ordering edge.
        A register value crossing warp groups costs a spill through SMEM; an SMEM or TMEM value only a
        barrier hand-off.
    source : str
        Where the edge came from.
    inplace : bool
        ``dst`` overwrites the value in place (the accumulator operand of an MMA): the value dies when
        ``dst`` issues instead of when ``dst`` has finished reading it.
    handoff : int or None
        Cycles of extra latency this edge costs when its ends sit on different warp groups, for any
        carrier (an SMEM or TMEM value's barrier hand-off, a register value's spill). ``None``: the
        producer's ``spill_cost`` for a register value, else the machine's hand-off model.
    """

    src: str
    dst: str
    latency: int | None = None
    distance: int = 0
    blocking: bool = False
    carrier: str = "register"
    source: str = ""
    inplace: bool = False
    handoff: int | None = None

    @property
    def label(self) -> str:
        """``"src->dst"`` with the distance when it is not 0, for messages."""
        tail = f" (δ={self.distance})" if self.distance else ""
        return f"{self.src}->{self.dst}{tail}"


def _caller_location() -> str:
    """``file.py:line`` of the first frame outside this module (the builder call's location)."""
    frame = inspect.currentframe()
    here = os.path.abspath(__file__)
    while frame is not None:
        path = os.path.abspath(frame.f_code.co_filename)
        if path != here:
            return f"{os.path.basename(path)}:{frame.f_lineno}"
        frame = frame.f_back
    return ""


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


DURATION_LIMIT = 10**6
"""Largest latency, duration, start, distance or reservation count one op or edge may have, and the largest
sum of the loop's durations (:meth:`Graph.check`), in cycles: the schedule of a loop is at most about that
long, and a saved schedule's II and length are read back only up to the same limit
(:data:`twill.schedule.SANITY_LIMIT`); the listing and the verifier walk schedules cycle by cycle."""


def _check_limit(value: Any, what: str, **where: Any) -> None:
    if _is_int(value) and value > DURATION_LIMIT:
        raise GraphError(f"{what}={value} is above the sanity limit {DURATION_LIMIT} cycles (a typo? twill "
                         f"schedules loops of at most that many cycles)", **where)


def check_op(op: Op, units: Iterable[str] | None = None) -> None:
    """Raise :class:`GraphError` if ``op`` has a negative, non-integer or missing cost.

    Parameters
    ----------
    op : Op
        The op to check.
    units : iterable of str, optional
        Unit names the machine has; when given, an RRT naming another unit is an error.
    """
    where = f"op {op.name!r}"
    if not op.name or not isinstance(op.name, str):
        raise GraphError(f"op name must be a non-empty string, got {op.name!r}", op=str(op.name))
    for r in op.rrt:
        for fld, low in (("start", 0), ("cycles", 1), ("count", 1)):
            value = getattr(r, fld)
            if not _is_int(value) or value < low:
                raise GraphError(f"{where}: reservation of unit {r.unit!r} has {fld}={value!r}, "
                                 f"must be an integer >= {low}", op=op.name, source=op.source)
            _check_limit(value, f"{where}: reservation of unit {r.unit!r} has {fld}", op=op.name,
                         source=op.source)
    if op.completion is not None:
        if not _is_int(op.completion) or op.completion < 0:
            raise GraphError(f"{where}: completion={op.completion!r} must be a non-negative integer "
                             f"(cycles from issue until it completes)", op=op.name, source=op.source)
        if op.completion < op.busy_cycles:
            raise GraphError(f"{where}: completion={op.completion} is before its last busy cycle: the "
                             f"reservation table is {op.busy_cycles} cycles long", op=op.name,
                             source=op.source)
    for fld in ("latency", "issue_cycles", "regs", "smem", "tmem", "result_bytes"):
        value = getattr(op, fld)
        if not _is_int(value) or value < 0:
            raise GraphError(f"{where}: {fld}={value!r} must be a non-negative integer", op=op.name,
                             source=op.source)
    for fld in ("latency", "issue_cycles", "completion", "spill_cost"):
        _check_limit(getattr(op, fld), f"{where}: {fld}", op=op.name, source=op.source)
    if op.spill_cost is not None and (not _is_int(op.spill_cost) or op.spill_cost < 0):
        raise GraphError(f"{where}: spill_cost={op.spill_cost!r} must be a non-negative integer",
                         op=op.name, source=op.source)
    if not _is_int(op.warps) or op.warps < 1:
        raise GraphError(f"{where}: warps={op.warps!r} must be an integer >= 1", op=op.name,
                         source=op.source)
    for flag in ("async_reader", "view", "variable_latency"):
        value = getattr(op, flag)
        if not isinstance(value, bool) and not (flag == "async_reader" and value is None):
            raise GraphError(f"{where}: {flag}={value!r} must be true or false", op=op.name,
                             source=op.source)
    if op.view:
        held = [f"{fld}={getattr(op, fld)}" for fld in ("regs", "smem", "tmem") if getattr(op, fld)]
        if held:
            raise GraphError(f"{where} is a view (an alias of what it reads) but holds storage of its own: "
                             f"{', '.join(held)}; a view's storage is its source's", op=op.name,
                             source=op.source)
    if op.issue_cycles > op.cycles:
        what = "reservation table length" if op.completion is None else "completion"
        raise GraphError(f"{where}: issue_cycles={op.issue_cycles} exceeds its {what} {op.cycles}",
                         op=op.name, source=op.source)
    if units is not None:
        known = set(units)
        for r in op.rrt:
            if r.unit not in known:
                raise GraphError(f"{where} uses unknown unit {r.unit!r}; the machine has "
                                 f"{', '.join(sorted(known))}", op=op.name, source=op.source)


def check_dependence(dep: Dependence) -> None:
    """Raise :class:`GraphError` if a dependence has a negative or non-integer latency or distance."""
    edge = (dep.src, dep.dst)
    if dep.latency is not None and (not _is_int(dep.latency) or dep.latency < 0):
        raise GraphError(f"edge {dep.label}: latency={dep.latency!r} must be a non-negative integer",
                         edge=edge, source=dep.source)
    if not _is_int(dep.distance) or dep.distance < 0:
        raise GraphError(f"edge {dep.label}: distance={dep.distance!r} must be a non-negative integer",
                         edge=edge, source=dep.source)
    if dep.carrier not in CARRIERS:
        raise GraphError(f"edge {dep.label}: carrier={dep.carrier!r} is not one of {', '.join(CARRIERS)}",
                         edge=edge, source=dep.source)
    for fld in ("latency", "distance", "handoff"):
        _check_limit(getattr(dep, fld), f"edge {dep.label}: {fld}", edge=edge, source=dep.source)
    if dep.handoff is not None and (not _is_int(dep.handoff) or dep.handoff < 0):
        raise GraphError(f"edge {dep.label}: handoff={dep.handoff!r} must be a non-negative integer (cycles "
                         f"a crossing between warp groups costs) or None", edge=edge, source=dep.source)
    for flag in ("blocking", "inplace"):
        if not isinstance(getattr(dep, flag), bool):
            raise GraphError(f"edge {dep.label}: {flag}={getattr(dep, flag)!r} must be true or false",
                             edge=edge, source=dep.source)


@dataclass
class Graph:
    """Dependence graph of one loop body, kept in insertion order.

    Parameters
    ----------
    name : str
        Name for messages and output.
    fixed_smem : int
        Bytes of shared memory held for the whole loop by values defined outside it (the Q tile of an
        attention kernel, barriers). Counted against the machine's SMEM capacity.
    fixed_tmem : int
        Tensor-memory columns held for the whole loop by values defined outside it.
    source : str
        Where the graph came from (kernel file, TTGIR file).
    machine : str
        Name of the machine whose costs the graph's latencies and reservations are (set by the
        frontend: ``graph_from_kernel(..., machine="h100")`` gives ``"h100"``); scheduling it on
        another machine is refused (:func:`twill.model.problem.build_problem`). ``""`` (a hand-built
        graph): machine-agnostic, scheduled on any machine.

    Notes
    -----
    The graph is stored in a :class:`networkx.MultiDiGraph` (``self.nx``), with the :class:`Op` under node
    attribute ``"op"`` and the :class:`Dependence` under edge attribute ``"dep"``. Two edges between the
    same pair of ops (for example one with δ=0 and one with δ=1) are both kept.
    """

    name: str = "loop"
    fixed_smem: int = 0
    fixed_tmem: int = 0
    source: str = ""
    machine: str = ""
    nx: nx.MultiDiGraph = field(default_factory=nx.MultiDiGraph, repr=False)

    # ----------------------------------------------------------------------------------------- building
    def add_op(
        self,
        name: str,
        kind: str,
        *,
        busy: Mapping[str, int] | None = None,
        rrt: Iterable[Reservation] | None = None,
        latency: int | None = None,
        issue_cycles: int | None = None,
        regs: int = 0,
        smem: int = 0,
        tmem: int = 0,
        result_bytes: int = 0,
        variable_latency: bool = False,
        warps: int = 1,
        spill_cost: int | None = None,
        source: str | None = None,
        attrs: Mapping[str, str] | None = None,
        completion: int | None = None,
        async_reader: bool | None = None,
        view: bool = False,
    ) -> Op:
        """Add an op and return it.

        Parameters
        ----------
        name, kind : str
            See :class:`Op`.
        busy : mapping of str to int, optional
            Shorthand reservation table: unit -> cycles busy (count 1, from issue). ``{"tc": 512}``.
            ``{}`` for an op that uses no functional unit (a view, an alias): it costs no issue time and,
            unless ``latency`` or ``completion`` is given, no time at all.
        rrt : iterable of Reservation, optional
            Full reservation table; give ``busy`` or ``rrt``, not both.
        latency : int, optional
            Cycles until the result is usable; defaults to the op's length (``completion``, else the
            RRT length).
        issue_cycles : int, optional
            Cycles the issuing warps are busy; defaults to the RRT length (a synchronous op).
        regs, smem, tmem, result_bytes, variable_latency, warps, spill_cost : see :class:`Op`.
        completion, async_reader, view : see :class:`Op`.
        source : str, optional
            Source location; defaults to the ``file:line`` of the caller.
        attrs : mapping of str to str, optional
            Display annotations.

        Raises
        ------
        GraphError
            The name is taken, both or neither of ``busy`` and ``rrt`` are given, or a cost is invalid.
        """
        src = source if source is not None else _caller_location()
        if name in self.nx:
            raise GraphError(f"op {name!r} is already in graph {self.name!r}", op=name, source=src)
        if (busy is None) == (rrt is None):
            raise GraphError(f"op {name!r}: give exactly one of busy= or rrt=", op=name, source=src)
        if busy is not None:
            table = tuple(Reservation(unit, 0, cycles) for unit, cycles in busy.items())
        else:
            table = tuple(rrt or ())
        length = max((r.end for r in table if _is_int(r.start) and _is_int(r.cycles)), default=0)
        full = completion if _is_int(completion) else length
        op = Op(
            name=name,
            kind=kind,
            rrt=table,
            latency=full if latency is None else latency,
            issue_cycles=length if issue_cycles is None else issue_cycles,
            regs=regs,
            smem=smem,
            tmem=tmem,
            result_bytes=result_bytes,
            variable_latency=variable_latency,
            warps=warps,
            spill_cost=spill_cost,
            source=src,
            attrs=tuple(sorted((attrs or {}).items())),
            completion=completion,
            async_reader=async_reader,
            view=view,
        )
        check_op(op)
        self.nx.add_node(name, op=op)
        return op

    def add(self, op: Op) -> Op:
        """Add a ready-made :class:`Op` (checked like :meth:`add_op`)."""
        if op.name in self.nx:
            raise GraphError(f"op {op.name!r} is already in graph {self.name!r}", op=op.name,
                             source=op.source)
        check_op(op)
        self.nx.add_node(op.name, op=op)
        return op

    def add_edge(
        self,
        src: str,
        dst: str,
        *,
        latency: int | None = None,
        distance: int = 0,
        blocking: bool = False,
        carrier: str = "register",
        source: str | None = None,
        inplace: bool = False,
        handoff: int | None = None,
    ) -> Dependence:
        """Add a dependence ``src -> dst`` and return it (fields as in :class:`Dependence`).

        Raises
        ------
        GraphError
            An endpoint is not in the graph, or the latency, distance or carrier is invalid.
        """
        where = source if source is not None else _caller_location()
        dep = Dependence(src, dst, latency, distance, blocking, carrier, where, inplace, handoff)
        for end in (src, dst):
            if end not in self.nx:
                raise GraphError(f"edge {dep.label}: op {end!r} is not in graph {self.name!r}",
                                 edge=(src, dst), source=where)
        check_dependence(dep)
        self.nx.add_edge(src, dst, dep=dep)
        return dep

    def replace_op(self, op: Op) -> None:
        """Replace the op of the same name (keeps its edges)."""
        if op.name not in self.nx:
            raise GraphError(f"op {op.name!r} is not in graph {self.name!r}", op=op.name)
        check_op(op)
        self.nx.nodes[op.name]["op"] = op

    # ----------------------------------------------------------------------------------------- reading
    @property
    def ops(self) -> list[Op]:
        """Ops in insertion order."""
        return [data["op"] for _, data in self.nx.nodes(data=True)]

    @property
    def edges(self) -> list[Dependence]:
        """Dependences in insertion order."""
        return [data["dep"] for _, _, data in self.nx.edges(data=True)]

    def op(self, name: str) -> Op:
        """The op called ``name``; :class:`GraphError` if there is none."""
        try:
            return self.nx.nodes[name]["op"]
        except KeyError:
            raise GraphError(f"no op {name!r} in graph {self.name!r}", op=name) from None

    def __contains__(self, name: object) -> bool:
        return name in self.nx

    def __len__(self) -> int:
        return self.nx.number_of_nodes()

    def __iter__(self) -> Iterator[Op]:
        return iter(self.ops)

    def in_edges(self, name: str) -> list[Dependence]:
        """Dependences into ``name``."""
        return [d["dep"] for _, _, d in self.nx.in_edges(name, data=True)]

    def out_edges(self, name: str) -> list[Dependence]:
        """Dependences out of ``name``."""
        return [d["dep"] for _, _, d in self.nx.out_edges(name, data=True)]

    def is_streaming(self, name: str) -> bool:
        """True for a variable-latency op with no incoming data edge (paper §5.3), e.g. a TMA input load."""
        op = self.op(name)
        return op.variable_latency and not any(e.carrier != "none" for e in self.in_edges(name))

    def edge_latency(self, dep: Dependence) -> int:
        """The ``d`` of ``dep`` in cycles: its own latency, else the producer's (0 if it is streaming)."""
        if dep.latency is not None:
            return dep.latency
        if self.is_streaming(dep.src):
            return 0
        return self.op(dep.src).latency

    def units(self) -> set[str]:
        """Every unit some op reserves."""
        return {r.unit for op in self.ops for r in op.rrt}

    # ----------------------------------------------------------------------------------------- checking
    def check(self, units: Iterable[str] | None = None) -> None:
        """Reject a malformed graph with a :class:`GraphError` naming the op or edge.

        Checks: every op's RRT (possibly empty: an op that uses no unit) has positive integer entries
        and its costs are non-negative integers; a view reads some value (an in-edge that carries one);
        the loop-invariant ``fixed_smem`` / ``fixed_tmem`` are non-negative integers; when ``units``
        is given, every unit exists; every edge joins ops of the graph and has a
        non-negative integer latency and distance; no dependence cycle has total distance 0 (such a loop
        could never run, and RecMII would divide by zero).

        Parameters
        ----------
        units : iterable of str, optional
            Unit names the target machine has (``machine.unit_names``).
        """
        if len(self) == 0:
            raise GraphError(f"graph {self.name!r} has no ops")
        for name in ("fixed_smem", "fixed_tmem"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                unit = "bytes" if name == "fixed_smem" else "TMEM columns"
                raise GraphError(f"graph {self.name!r}: {name}={value!r} must be a non-negative integer "
                                 f"({unit} held for the whole loop)")
        unit_list = list(units) if units is not None else None
        for op in self.ops:
            check_op(op, unit_list)
        for u, v, data in self.nx.edges(data=True):
            dep = data["dep"]
            if dep.src != u or dep.dst != v:
                raise GraphError(f"edge {u}->{v} holds a dependence labelled {dep.label}", edge=(u, v))
            check_dependence(dep)
        for op in self.ops:
            if op.view and not any(e.carrier != "none" and e.src != op.name for e in self.in_edges(op.name)):
                raise GraphError(f"op {op.name!r} is a view but reads no value: it needs an in-edge that "
                                 f"carries one (register, smem or tmem) from another op", op=op.name,
                                 source=op.source)
        self._check_zero_distance_cycles()
        self._check_total_duration()

    def _check_total_duration(self) -> None:
        """:class:`GraphError` if the loop's durations (each op's latency or reservation length, whichever
        is longer, and each edge's explicit latency and hand-off) add up past :data:`DURATION_LIMIT`: a
        schedule can be that long, and neither its listing nor its saved JSON would be usable."""
        costs = {op.name: max(op.latency, op.cycles) for op in self.ops}
        edges = sum((d.latency or 0) + (d.handoff or 0) for d in self.edges)
        total = sum(costs.values()) + edges
        if total > DURATION_LIMIT:
            worst = max(sorted(costs), key=costs.__getitem__)
            raise GraphError(f"graph {self.name!r}: the loop's durations add up to {total} cycles, above the "
                             f"sanity limit {DURATION_LIMIT} (op {worst!r} alone: {costs[worst]}; edges: "
                             f"{edges})", op=worst, source=self.op(worst).source)

    def _check_zero_distance_cycles(self) -> None:
        zero = nx.DiGraph()
        zero.add_nodes_from(self.nx.nodes)
        zero.add_edges_from((d.src, d.dst) for d in self.edges if d.distance == 0)
        try:
            cycle = nx.find_cycle(zero)
        except nx.NetworkXNoCycle:
            return
        names = [u for u, _ in cycle] + [cycle[0][0]]
        # every edge of the cycle with where it was made: one of them needs a distance
        deps = [next(d for d in self.edges if (d.src, d.dst, d.distance) == (u, v, 0)) for u, v in cycle]
        made = [f"{d.src}->{d.dst} at {d.source}" for d in deps if d.source]
        where = f"; edges: {', '.join(made)}" if made else ""
        raise GraphError(f"dependence cycle {'->'.join(names)} has total distance 0: no iteration could "
                         f"ever start (a loop-carried edge needs distance >= 1){where}",
                         edge=(deps[0].src, deps[0].dst), source=deps[0].source or self.op(names[0]).source)

    # ----------------------------------------------------------------------------------------- copying
    def map_ops(self, fn: Any, *, name: str | None = None) -> Graph:
        """A new graph with every op replaced by ``fn(op)`` (same name) and the edges unchanged."""
        out = Graph(name or self.name, self.fixed_smem, self.fixed_tmem, self.source, self.machine)
        for op in self.ops:
            out.add(fn(op))
        for dep in self.edges:
            out.nx.add_edge(dep.src, dep.dst, dep=dep)
        return out

    def with_edges(self, fn: Any) -> Graph:
        """A new graph with every dependence replaced by ``fn(dep)``."""
        out = Graph(self.name, self.fixed_smem, self.fixed_tmem, self.source, self.machine)
        for op in self.ops:
            out.nx.add_node(op.name, op=op)
        for dep in self.edges:
            new = fn(dep)
            check_dependence(new)
            out.nx.add_edge(new.src, new.dst, dep=new)
        return out

    # ----------------------------------------------------------------------------------------- JSON
    def to_dict(self) -> dict[str, Any]:
        """Plain-data form (for JSON); :meth:`from_dict` reads it back."""
        return {
            "name": self.name,
            "fixed_smem": self.fixed_smem,
            "fixed_tmem": self.fixed_tmem,
            "source": self.source,
            **({"machine": self.machine} if self.machine else {}),
            "ops": [op_to_dict(op) for op in self.ops],
            "edges": [
                {"src": d.src, "dst": d.dst, "latency": d.latency, "distance": d.distance,
                 "blocking": d.blocking, "carrier": d.carrier, "source": d.source, "inplace": d.inplace,
                 **({"handoff": d.handoff} if d.handoff is not None else {})}
                for d in self.edges
            ],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Graph:
        """Inverse of :meth:`to_dict`.

        Raises
        ------
        GraphError
            A missing or mistyped field, or a field the format does not have (a typo such as
            ``"distnce"`` would otherwise leave the default in place): the message names the field, the
            op or edge it sits in, and the closest valid field name.
        """
        if not isinstance(data, Mapping):
            raise GraphError(f"graph data is {type(data).__name__}, not a JSON object")
        _refuse_unknown(data, GRAPH_FIELDS, f"graph {data.get('name', '?')!r}")
        if "name" not in data:
            raise GraphError("graph data is malformed: missing field 'name'")
        name = data["name"]
        if not isinstance(name, str) or not name:
            raise GraphError(f"graph name {name!r} must be a non-empty string")
        for key in ("source", "machine"):
            if not isinstance(data.get(key, ""), str):
                raise GraphError(f"graph {name!r}: {key} {data[key]!r} must be a string")
        for key in ("fixed_smem", "fixed_tmem"):  # checked as given: "100000", 1.5 or true is no count
            value = data.get(key, 0)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise GraphError(f"graph {name!r}: {key} {value!r} must be a non-negative integer "
                                 f"({'bytes' if key == 'fixed_smem' else 'TMEM columns'} held for the whole "
                                 f"loop)")
        g = cls(name, data.get("fixed_smem", 0), data.get("fixed_tmem", 0), data.get("source", ""),
                data.get("machine", ""))
        try:
            g._read_rows(data)
        except GraphError:
            raise
        except (TypeError, ValueError, AttributeError) as exc:
            raise GraphError(f"graph {g.name!r} is malformed: {exc}") from exc
        g._check_total_duration()
        return g

    def _read_rows(self, data: Mapping[str, Any]) -> None:
        """Add the ops and edges of a graph JSON object (:meth:`from_dict`)."""
        g = self
        for i, o in enumerate(_json_list(data, "ops", g.name)):
            g.add(op_from_dict(o, f"ops[{i}]"))
        for i, e in enumerate(_json_list(data, "edges", g.name)):
            if not isinstance(e, Mapping):
                raise GraphError(f"graph {g.name!r}: edges[{i}] is {type(e).__name__}, not a JSON object")
            where = f"edge {e.get('src', '?')}->{e.get('dst', '?')}"
            _refuse_unknown(e, EDGE_FIELDS, where, edge=(str(e.get("src")), str(e.get("dst"))))
            for key in ("src", "dst"):
                if key not in e:
                    raise GraphError(f"graph {g.name!r}: edges[{i}] ({where}) has no field {key!r}")
            g.add_edge(e["src"], e["dst"], latency=e.get("latency"), distance=e.get("distance", 0),
                       blocking=e.get("blocking", False), carrier=e.get("carrier", "register"),
                       source=e.get("source", ""), inplace=e.get("inplace", False),
                       handoff=e.get("handoff"))


GRAPH_FIELDS: tuple[str, ...] = ("name", "fixed_smem", "fixed_tmem", "source", "machine", "ops", "edges")
"""The fields of a graph JSON object (:meth:`Graph.to_dict`)."""
OP_FIELDS: tuple[str, ...] = ("name", "kind", "rrt", "latency", "issue_cycles", "regs", "smem", "tmem",
                              "result_bytes", "variable_latency", "warps", "spill_cost", "source", "attrs",
                              "completion", "async_reader", "view")
"""The fields of an op in a graph or schedule JSON (:func:`op_to_dict`)."""
EDGE_FIELDS: tuple[str, ...] = ("src", "dst", "latency", "distance", "blocking", "carrier", "source",
                                "inplace", "handoff")
"""The fields of an edge in a graph JSON (:meth:`Graph.to_dict`)."""
RESERVATION_FIELDS: tuple[str, ...] = ("unit", "start", "cycles", "count")
"""The fields of one reservation-table row, written as a list in this order (``count`` may be left off:
1) or as an object with these keys."""


def _refuse_unknown(data: Mapping[str, Any], valid: Iterable[str], where: str, *, op: str | None = None,
                    edge: tuple[str, str] | None = None) -> None:
    message = unknown_keys_message(data, valid, where)
    if message:
        raise GraphError(message, op=op, edge=edge)


def _json_list(data: Mapping[str, Any], key: str, graph: str) -> list[Any]:
    if key not in data:
        raise GraphError(f"graph data is malformed: missing field {key!r} (graph {graph!r})")
    value = data[key]
    if not isinstance(value, list):
        raise GraphError(f"graph {graph!r}: {key} is {type(value).__name__}, not a JSON list")
    return value


def op_to_dict(op: Op) -> dict[str, Any]:
    return {
        "name": op.name,
        "kind": op.kind,
        "rrt": [[r.unit, r.start, r.cycles, r.count] for r in op.rrt],
        "latency": op.latency,
        "issue_cycles": op.issue_cycles,
        "regs": op.regs,
        "smem": op.smem,
        "tmem": op.tmem,
        "result_bytes": op.result_bytes,
        "variable_latency": op.variable_latency,
        "warps": op.warps,
        "spill_cost": op.spill_cost,
        "source": op.source,
        "attrs": dict(op.attrs),
        **({"completion": op.completion} if op.completion is not None else {}),
        **({"async_reader": op.async_reader} if op.async_reader is not None else {}),
        **({"view": True} if op.view else {}),
    }


def op_from_dict(d: Mapping[str, Any], where: str = "op") -> Op:
    """The :class:`Op` of one JSON object written by :func:`op_to_dict` (unchecked: :func:`check_op`).

    Parameters
    ----------
    d : mapping
        The op's fields (:data:`OP_FIELDS`).
    where : str
        Its place in the file (``"ops[3]"``), for messages about an op without a name.

    Raises
    ------
    GraphError
        Not an object, a missing required field (``name``, ``kind``, ``rrt``, ``latency``,
        ``issue_cycles``), a field the format does not have, or a malformed reservation-table row; the
        message names the op and the closest valid field name.
    """
    if not isinstance(d, Mapping):
        raise GraphError(f"{where} is {type(d).__name__}, not a JSON object")
    name = d.get("name")
    label = f"op {name!r}" if name is not None else where
    _refuse_unknown(d, OP_FIELDS, label, op=None if name is None else str(name))
    missing = [k for k in ("name", "kind", "rrt", "latency", "issue_cycles") if k not in d]
    if missing:
        placed = label if name is None or where == "op" else f"{label} ({where})"
        raise GraphError(f"{placed}: missing field(s) {', '.join(map(repr, missing))}",
                         op=None if name is None else str(name))
    if not isinstance(d["rrt"], list):
        raise GraphError(f"{label}: rrt is {type(d['rrt']).__name__}, not a list of reservations",
                         op=str(name))
    attrs = d.get("attrs", {})
    if not isinstance(attrs, Mapping):
        raise GraphError(f"{label}: attrs is {type(attrs).__name__}, not a JSON object", op=str(name))
    return Op(
        name=name,
        kind=d["kind"],
        rrt=tuple(_reservation(row, f"{label}: rrt[{i}]", str(name)) for i, row in enumerate(d["rrt"])),
        latency=d["latency"],
        issue_cycles=d["issue_cycles"],
        regs=d.get("regs", 0),
        smem=d.get("smem", 0),
        tmem=d.get("tmem", 0),
        result_bytes=d.get("result_bytes", 0),
        variable_latency=d.get("variable_latency", False),
        warps=d.get("warps", 1),
        spill_cost=d.get("spill_cost"),
        source=d.get("source", ""),
        attrs=tuple(sorted((str(k), str(v)) for k, v in attrs.items())),
        completion=d.get("completion"),
        async_reader=d.get("async_reader"),
        view=d.get("view", False),
    )


def _reservation(row: Any, where: str, op: str) -> Reservation:
    """One reservation-table row: ``[unit, start, cycles]``, ``[unit, start, cycles, count]`` or an object
    with :data:`RESERVATION_FIELDS`."""
    if isinstance(row, Mapping):
        _refuse_unknown(row, RESERVATION_FIELDS, where, op=op)
        missing = [k for k in ("unit", "start", "cycles") if k not in row]
        if missing:
            raise GraphError(f"{where}: missing field(s) {', '.join(map(repr, missing))}", op=op)
        return Reservation(str(row["unit"]), row["start"], row["cycles"], row.get("count", 1))
    if isinstance(row, list) and len(row) in (3, 4):
        return Reservation(str(row[0]), *row[1:])
    raise GraphError(f"{where} is {row!r}: a reservation is [unit, start, cycles] or [unit, start, cycles, "
                     f"count] (or an object with those fields)", op=op)
