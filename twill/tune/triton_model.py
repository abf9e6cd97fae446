"""Triton's own software pipeline of a loop as a twill Schedule, simulated, with the costs the hardware adds.

Triton 3.6 on sm_90 runs a non-warp-specialized loop as one instruction stream of ``num_warps`` warps in
the order of its coarse schedule (``loop.stage`` / ``loop.cluster`` on each TTGIR op of the ``scheduled``
snapshot, :func:`twill.frontend.compile_to_ttgir`). This module turns that schedule into a
:class:`twill.schedule.Schedule` (:func:`triton_schedule`), runs it through
:func:`twill.analysis.simulate.simulate` with ``num_stages`` buffers per load (:func:`simulate_triton`),
reads the registers ptxas will hold (:func:`register_demand`), serializes the wgmma pipeline when ptxas
spills (:func:`serialize_gemms`, warning C7511), and prices what the tile model leaves out
(:func:`hardware_terms`: issue slots, wgmma operand reads from shared memory, per-trip barrier waits),
combined with co-resident CTAs by :func:`effective_cycles`. ``benchmarks/calibrate/rank_correlation.py``
and ``twill tune`` both use it; docs/calibration.md §5 and §7 give the measurements behind it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from twill.ir.costmodel import CostModel
from twill.ir.graph import Graph
from twill.ir.machine import Machine

__all__ = [
    "HardwareTerms",
    "TritonSlots",
    "default_gemm_parts",
    "effective_cycles",
    "gemm_layouts",
    "gemm_operands",
    "hardware_terms",
    "kernel_rate_loads",
    "layout_gemms",
    "register_demand",
    "replicate",
    "serial_chain_cycles",
    "serial_gemm_chains",
    "serial_round_trip_cycles",
    "serialize_gemms",
    "simulate_triton",
    "sm_units",
    "smem_port_bytes",
    "spill_reload_cycles",
    "tail_ctas_per_sm",
    "trips_needed",
    "triton_schedule",
    "triton_slots",
    "waves",
    "wgmma_serialized",
]


@dataclass(frozen=True)
class TritonSlots:
    """Triton's placement of each graph op: ``slots[name] = (stage, cluster, position)``.

    ``pipelined`` is False when the TTGIR carries no ``loop.stage`` (Triton does not pipeline at
    ``num_stages`` = 1): every op is then in stage 0, cluster 0, in body order.
    """

    slots: Mapping[str, tuple[int, int, int]]
    pipelined: bool

    @property
    def stages(self) -> list[int]:
        """The distinct stages used, ascending."""
        return sorted({s for s, _, _ in self.slots.values()})


def triton_slots(lowering: Any) -> TritonSlots:
    """Per graph op of a :class:`twill.frontend.Lowering` of the ``scheduled`` TTGIR: Triton's stage,
    cluster and position.

    The stage and cluster are those of the op's first TTGIR op (the ``tt.descriptor_load`` of a load,
    whose ``ttg.local_alloc`` Triton places with the consumer); the position is the body index of its last
    TTGIR op in that stage and cluster (a merged elementwise chain is emitted where it completes). Without
    any ``loop.stage`` in the loop (``num_stages`` = 1) every op is stage 0, cluster 0.
    """
    body = {op: i for i, op in enumerate(lowering.loop.body.ops)}

    def top(op: Any) -> Any:
        while op not in body and op.parent is not None:
            op = op.parent
        return op

    pipelined = any("loop.stage" in m.attrs for members in lowering.members.values() for m in members)
    out: dict[str, tuple[int, int, int]] = {}
    for name, members in lowering.members.items():
        first = members[0]
        stage = int(first.attrs.get("loop.stage", 0))
        cluster = int(first.attrs.get("loop.cluster", 0))
        same = [m for m in members if int(m.attrs.get("loop.stage", stage)) == stage
                and int(m.attrs.get("loop.cluster", cluster)) == cluster]
        out[name] = (stage, cluster, max(body.get(top(m), 0) for m in same))
    return TritonSlots(out, pipelined)


def replicate(graph: Graph, copies: int) -> Graph:
    """``copies`` independent copies of the loop (co-resident CTAs), ops named ``c<i>.<op>``.

    Raises
    ------
    ValueError
        ``copies`` < 1 (a kernel that fits no CTA on an SM has no copy to simulate: say why instead).
    """
    if copies < 1:
        raise ValueError(f"copies must be >= 1, got {copies}")
    if copies == 1:
        return graph
    data = graph.to_dict()
    ops, edges = [], []
    for c in range(copies):
        ops += [{**o, "name": f"c{c}.{o['name']}"} for o in data["ops"]]
        edges += [{**e, "src": f"c{c}.{e['src']}", "dst": f"c{c}.{e['dst']}"} for e in data["edges"]]
    return Graph.from_dict({**data, "name": f"{graph.name}_x{copies}",
                            "fixed_smem": copies * graph.fixed_smem, "ops": ops, "edges": edges})


def triton_schedule(graph: Graph, slots: TritonSlots, warps: int, machine: Machine, copies: int = 1) -> Any:
    """Triton's software pipeline as a twill Schedule on the raw problem (cycles), ``copies`` CTAs.

    Each copy is one warp group of ``warps`` warps issuing every op in Triton's emitted order (cluster,
    then position); an op of stage ``s`` of iteration ``i`` runs in loop trip ``i + s``. Start times are
    that order laid out by issue cycles (only the order, the groups and the stages matter to the
    simulation).
    """
    from twill.model.problem import build_problem
    from twill.schedule import Certificate, Schedule, make_groups, slots_from

    full = replicate(graph, copies)
    p = build_problem(full, machine)
    place = slots.slots

    def base(name: str) -> str:
        return name.split(".", 1)[1] if copies > 1 else name

    order = sorted(p.names, key=lambda n: (place[base(n)][1], place[base(n)][2], n))
    offset: dict[str, int] = {}
    t = 0
    for name in order:
        offset[name] = t
        t += max(1, p.op(name).issue_cycles)
    ii = max(1, t)
    start = {n: place[base(n)][0] * ii + offset[n] for n in p.names}
    group = {n: (int(n[1:n.index(".")]) if copies > 1 else 0) for n in p.names}
    length = max(start[n] + p.op(n).cycles for n in p.names)
    note = "Triton 3.6's own schedule (loop.stage / loop.cluster)" if slots.pipelined else (
        "Triton 3.6 does not pipeline this loop (no loop.stage: num_stages = 1); one stage, body order")
    cert = Certificate(0, 0, 0, False, (), 0, (note,))
    groups = make_groups(p, start, group, dict.fromkeys(range(copies), warps),
                         dict.fromkeys(range(copies), p.resources.setmaxnreg_min))
    return Schedule(p, ii, length, slots_from(start, group, ii, p.names), groups, cert, (), "swp")


def simulate_triton(schedule: Any, num_stages: int, iterations: int, *, latency: float | None = None,
                    seed: int = 0) -> Any:
    """Simulate with Triton's ``num_stages`` buffers for every variable-latency load (a SimResult).

    ``latency``: every TMA load takes exactly that many cycles instead of the default draw around
    ``cost.tma_latency``. ``iterations`` loop trips (at least :func:`trips_needed`); the steady state is
    read over the middle half.
    """
    from twill.analysis.simulate import simulate

    loads = {n: max(1, num_stages) for n in schedule.problem.names if schedule.problem.op(n).variable_latency}
    return simulate(schedule, trips_needed(schedule, iterations), None if latency is None else {
        "tma_load": latency}, seed=seed, buffers=loads, unit_order="greedy")


def trips_needed(schedule: Any, iterations: int) -> int:
    """``iterations``, raised to the ``2 * stages + 4`` trips the simulator needs for a steady state (the
    stages of the laid-out schedule: a loop of few short ops, such as a GEMM, spans many)."""
    return max(iterations, 2 * schedule.stages + 4)


def register_demand(schedule: Any, result: Any, iterations: int) -> int:
    """Peak registers per thread of one CTA's warp group in the simulated steady state, as ptxas holds them.

    The model's liveness (:func:`twill.model.liveness.register_intervals`) on the simulated timeline,
    with one change: an asynchronous op that reads registers (the P V wgmma reading P) holds them until the
    wait for its result, which Triton places before the result's first use, not only until the Tensor
    Cores finish (ptxas allocates over the program; docs/calibration.md §5).
    """
    from twill.model.liveness import Interval, fold, register_intervals

    p = schedule.problem
    ii = max(1, round(result.cycles_per_iteration))
    i0 = trips_needed(schedule, iterations) // 2
    issue = {r.name: r.issue for r in result.trace if r.iteration == i0}
    first = min(issue.values())
    start = {n: round(issue[n] - first) for n in p.names}
    group = dict.fromkeys(p.names, 0)
    intervals = []
    for iv in register_intervals(p, ii, start, group):
        end = iv.end
        for e in p.out_edges(iv.what) if iv.what in p.names else ():
            reader = p.op(e.dst)
            if e.carrier != "register" or e.inplace or e.dst == e.src or not reader.is_async:
                continue
            waits = [start[d.dst] + d.distance * ii for d in p.out_edges(e.dst) if d.dst != e.dst]
            if waits:
                end = max(end, min(waits) + e.distance * ii)
        intervals.append(Interval(iv.what, iv.start, end, iv.weight, iv.group))
    return max(fold(intervals, ii, p.resources.group_overhead))


def gemm_operands(lowering: Any) -> dict[str, tuple[int, int, int, bool, str]]:
    """Per GEMM op of a lowering: ``(m, n, k, a_in_smem, dtype)`` from its TTGIR dot.

    The shapes come from the operands, ``A [m, k]`` and ``B [k, n]`` (a Hopper ``warp_group_dot`` and a
    Blackwell ``tc_gen5_mma``, whose accumulator is a TMEM operand and which has no tensor result, alike).
    ``a_in_smem`` is True when ``A`` is a ``!ttg.memdesc`` in shared memory (wgmma ``SS``: Q K^T), False
    when it is a register tensor (``RS``: P V) or in tensor memory; ``dtype`` is ``A``'s element type.
    """
    out: dict[str, tuple[int, int, int, bool, str]] = {}
    for op in lowering.graph.ops:
        if op.kind != "gemm":
            continue
        dot = lowering.members[op.name][0]
        a, b = dot.operands[0].type, dot.operands[1].type
        m, k = a.shape[-2:]
        n = b.shape[-1]
        text = getattr(a, "text", str(a))
        dtype = next((d for d in ("f16", "bf16", "f8E4M3FN", "f8E5M2", "f32") if f"x{d}" in text), "f16")
        out[op.name] = (int(m), int(n), int(k), "memdesc" in text and "tensor_memory" not in text, dtype)
    return out


_MMA_V3 = re.compile(r"nvidia_mma<\{versionMajor = 3,[^}]*warpsPerCTA = \[(\d+), (\d+)\], "
                     r"instrShape = \[\d+, (\d+), \d+\]")


def gemm_layouts(lowering: Any) -> dict[str, tuple[int, int, int]]:
    """Per Hopper GEMM op of a lowering: ``(w_m, w_n, instr_n)`` of its result's ``#ttg.nvidia_mma`` v3
    layout (``warpsPerCTA = [w_m, w_n]``, ``instrShape = [16, instr_n, 16]``), as Triton chose it for the
    config. GEMMs without such a layout (Blackwell's ``tc_gen5_mma``, an mma v2) are left out."""
    out: dict[str, tuple[int, int, int]] = {}
    for op in lowering.graph.ops:
        if op.kind != "gemm":
            continue
        dot = lowering.members[op.name][0]
        types = [r.type for r in dot.results] + [o.type for o in dot.operands[2:3]]
        for t in types:
            match = _MMA_V3.search(getattr(t, "encoding", "") or getattr(t, "text", ""))
            if match:
                out[op.name] = (int(match.group(1)), int(match.group(2)), int(match.group(3)))
                break
    return out


def layout_gemms(graph: Graph, operands: Mapping[str, tuple[int, int, int, bool, str]],
                 layouts: Mapping[str, tuple[int, int, int]], cm: CostModel) -> Graph:
    """The graph with each GEMM's Tensor Core time as Triton's layout issues it
    (:meth:`CostModel.wgmma_work`).

    A layout that covers more rows than the tile (``warpsPerCTA[0] x 16 > m``) makes ``r`` warp groups
    compute the same product: the Tensor Cores run it ``r`` times, one after another (the four Tensor
    Cores of the SM act together on each instruction), so the op's reservation and latency grow by
    ``(r - 1)`` times its busy time. GEMMs without a layout, and a serialized GEMM (several Tensor Core
    rectangles, :func:`serialize_gemms`), are left as they are."""

    def fix(op: Any) -> Any:
        if op.kind != "gemm" or op.name not in layouts or op.name not in operands:
            return op
        m, n, k, a_smem, dtype = operands[op.name]
        w_m, w_n, instr_n = layouts[op.name]
        work = cm.wgmma_work(m, n, k, a_in_smem=a_smem, dtype=dtype, warps_per_cta=(w_m, w_n),
                             instr_n=instr_n)
        if work.replication <= 1:
            return op
        tc = [x for x in op.rrt if x.unit == "tc"]
        if len(tc) != 1:  # a serialized chain (several rectangles): left as the serialization has it
            return op
        r = work.replication
        busy = tc[0].cycles * tc[0].count
        rrt = tuple(replace(x, cycles=x.cycles * r) if x.unit == "tc" else x for x in op.rrt)
        return replace(op, rrt=rrt, latency=op.latency + (r - 1) * busy,
                       issue_cycles=op.issue_cycles if op.is_async else op.issue_cycles + (r - 1) * busy)

    return graph.map_ops(fix)


def default_gemm_parts(graph: Graph, operands: Mapping[str, tuple[int, int, int, bool, str]], warps: int,
                       cm: CostModel) -> list[dict[str, Any]]:
    """Per GEMM of ``graph`` (in op order): its Tensor Core cycles as the graph has them and its operand
    bytes under the default split (:meth:`CostModel.wgmma_smem_bytes` without a layout): what the model
    priced before it read Triton's layout (``benchmarks/calibrate/tune_scores.py`` scores both)."""
    return [{"name": op.name, "tc": round(sum(r.cycles * r.count for r in op.rrt if r.unit == "tc"), 1),
             "smem_bytes": cm.wgmma_smem_bytes(*operands[op.name][:3], a_in_smem=operands[op.name][3],
                                               dtype=operands[op.name][4], warps=warps)}
            for op in graph.ops if op.kind == "gemm" and op.name in operands]


def wgmma_serialized(ptxas_notes: Any, spills: bool) -> bool:
    """Whether ptxas serialized the kernel's wgmma pipeline (a wait after every ``wgmma``).

    ptxas says so in a performance note, whatever the cause: C7511 / C7512 (too few registers for the
    pipeline or the function), C7515 (non-wgmma instructions define an accumulator register inside the
    pipeline: Triton's GEMM at 8 warps, one ``WARPGROUP.DEPBAR`` after each ``HGMMA`` in the SASS); a
    kernel that spills is taken as serialized too (its accumulators go through local memory)."""
    return bool(spills) or any("wgmma.mma_async instructions are serialized" in n or "C7511" in n
                               for n in ptxas_notes)


def serialize_gemms(graph: Graph, operands: Mapping[str, tuple[int, int, int, bool, str]], warps: int,
                    cm: CostModel, layouts: Mapping[str, tuple[int, int, int]] | None = None) -> Graph:
    """The graph with every wgmma serialized (ptxas C7511): :meth:`CostModel.gemm` ``serialized=True``.

    ``layouts`` (:func:`gemm_layouts`): each GEMM's chain as its ``warpsPerCTA`` splits the tile between
    the warp groups (``CostModel.gemm(warps_per_cta=)``); a GEMM without one (or ``layouts`` None) is
    split along M, one 64-row slice per group, as is one whose layout has other than ``warps`` warps.
    Hopper only (a serialized wgmma pipeline is an sm_90 mode); on another family the graph is returned
    as it is."""
    if cm.machine.family != "hopper":
        return graph
    layouts = layouts or {}

    def fix(op: Any) -> Any:
        if op.kind != "gemm":
            return op
        m, n, k, _, dtype = operands[op.name]
        lay = layouts.get(op.name)
        split = None if lay is None or lay[0] * lay[1] != warps else (lay[0], lay[1])
        cost = cm.gemm(m, n, k, dtype=dtype, warps=warps, serialized=True, warps_per_cta=split)
        return replace(op, rrt=cost.rrt, latency=cost.latency, issue_cycles=cost.issue_cycles)

    return graph.map_ops(fix)


def kernel_rate_loads(graph: Graph, cm: CostModel) -> Graph:
    """The graph with every TMA op's reservation on the ``tma`` unit at the L2 rate the kernel's loads get
    (``cost.tma_kernel_bytes_per_cycle``) instead of the microbenchmark's all-SM stream
    (``cost.tma_bytes_per_cycle``), for the simulations of Triton's schedule.

    One resource, one rate: :func:`hardware_terms` prices the loads' throughput at the kernel rate, so the
    simulated trip (``L``, ``C`` of :func:`effective_cycles`) must not hold the TMA unit longer. On the
    H200 a 128x128x64 GEMM at one CTA per SM moves its 32 KB per trip in 724-769 cycles (42-45 B/cycle,
    ``benchmarks/results/tune_scores.md``) where 36 B/cycle makes the simulated trip 912. A load's
    latency stays at least ``cost.tma_latency``; a reservation keeps at least the op's issue cycles.
    Ops without a ``tma`` reservation are returned as they are.

    Raises
    ------
    ValueError
        Either rate is not positive.
    """
    raw = float(cm.machine.const("cost.tma_bytes_per_cycle"))
    kernel = float(cm.machine.const("cost.tma_kernel_bytes_per_cycle"))
    if kernel <= 0 or raw <= 0:
        raise ValueError(f"TMA rates must be > 0 (cost.tma_bytes_per_cycle {raw}, "
                         f"cost.tma_kernel_bytes_per_cycle {kernel})")
    scale = raw / kernel
    floor = int(cm.machine.const("cost.tma_latency"))

    def fix(op: Any) -> Any:
        if not any(r.unit == "tma" for r in op.rrt):
            return op
        rrt = tuple(replace(r, cycles=max(1, op.issue_cycles, round(r.cycles * scale))) if r.unit == "tma"
                    else r for r in op.rrt)
        old = sum(r.cycles * r.count for r in op.rrt if r.unit == "tma")
        new = sum(r.cycles * r.count for r in rrt if r.unit == "tma")
        latency = op.latency  # a TMA copy's latency is max(busy, tma_latency) (+ what comes before it)
        if latency >= max(old, floor):
            latency = latency - max(old, floor) + max(new, floor)
        return replace(op, rrt=rrt, latency=latency)

    return graph.map_ops(fix)


@dataclass(frozen=True)
class HardwareTerms:
    """Per-trip costs of one CTA that the tile model does not price (cycles per loop trip).

    Attributes
    ----------
    issue : float
        Issue-slot cycles: the warp instructions of one trip over the SM's schedulers
        (:meth:`CostModel.issue_cycles`).
    instructions_per_warp : float
        Warp instructions per trip per warp behind ``issue``.
    instructions_source : str
        ``"sass"`` (counted in the compiled loop, :func:`twill.calibrate.regs.parse_sass_loop`) or
        ``"model"`` (:meth:`CostModel.estimated_instructions`, a lower bound).
    units : mapping of str to float
        Busy cycles per trip of each unit: each GEMM at the longer of its Tensor Core time as its layout
        issues it and its shared-memory operand reads (:meth:`CostModel.wgmma_work`); ``smem`` the
        graph's own shared-memory ops plus the operand reads and the TMA copies at the ports' rate
        (``smem_bytes``); TMA loads at the kernel's L2 rate; the local-memory traffic on ``local_unit``.
    wgmma_smem : float
        Cycles of wgmma operand reads per trip.
    waits : int
        Blocking waits per trip (one per TMA load and per GEMM whose result is waited).
    fixed : float
        Their latency, :meth:`CostModel.iteration_fixed_cycles`.
    stretch : float
        Cycles the GEMMs whose operand reads outlast their Tensor Core time add to the trip: the sum of
        ``max(0, reads - tensor core time)`` (the in-order stream waits for each GEMM's result).
    round_trip : float
        The load round trip a trip cannot beat with ``num_stages - 1`` loads in flight ahead (Little's
        law): ``(cost.tma_latency + the trip's TMA busy time) / (num_stages - 1)``; 0 at ``num_stages``
        <= 1 (no prefetch: the simulated schedule waits for every load itself).
    raw_units : mapping of str to float
        Busy cycles per trip of each unit as the tile model has them (no operand reads).
    gemms : tuple of (str, float, int)
        Per GEMM: name, Tensor Core cycles (layout included), shared-memory operand bytes.
    local_bytes : float
        Local-memory bytes (spilled registers: ``STL`` + ``LDL``) the CTA moves per trip.
    local_unit : str
        Where they go: ``"smem"`` (they stay in L1) or ``"tma"`` (L2; :meth:`CostModel.local_memory_cycles`).
    local : float
        Their busy cycles per trip on that unit.
    coresident : float
        Cycles one more co-resident CTA adds to this CTA's trip: its Tensor Core time plus its issue
        slots (:func:`effective_cycles`).
    reload : float
        Cycles the spilled registers add to the trip's compute chain: an in-order warp reloads what it
        spilled before it uses it, so the ``LDL`` bytes' transfer (``local``) and, on the L2 path, one
        load latency (``cost.tma_latency``, the measured latency of an L2 load with every SM loading) lie
        on the chain; 0 without spills.
    shared_units : mapping of str to float
        ``units`` as the SM serves several co-resident CTAs at once: their TMA loads together at the SM's
        L2 port rate ``cost.l2_sm_bytes_per_cycle`` instead of one CTA's stream rate
        ``cost.tma_kernel_bytes_per_cycle`` (:func:`sm_units`); empty: as ``units``.
    serial_chain : float
        Cycles one CTA's trip takes at least when ptxas serialized its wgmma pipeline
        (:func:`serial_chain_cycles`): the GEMMs' serialized chains, the issue of the trip's other
        instructions and its CTA-wide barriers one after another; 0 when the pipeline is not serialized.
    serial_gemm_chains : float
        The GEMMs' serialized chains alone (:func:`serial_gemm_chains`), the part of ``serial_chain``
        that precedes the trip's load issue; 0 when not serialized.
    serial_round_trip : float
        The load round trip of a serialized trip (:func:`serial_round_trip_cycles`): its loads are issued
        after its GEMM chains, so ``num_stages - 1`` trips cover the chains, the load latency and the
        loads' transfer; 0 when not serialized or at ``num_stages`` <= 1.
    smem_bytes : float
        Bytes one trip moves through the SM's shared-memory ports beside the graph's own shared-memory
        ops: its TMA copies (written into shared memory) and its wgmma operand reads
        (:func:`smem_port_bytes`); their cycles at ``cost.smem_bytes_per_cycle`` are in
        ``units["smem"]``.
    """

    issue: float
    instructions_per_warp: float
    instructions_source: str
    units: Mapping[str, float]
    wgmma_smem: float
    waits: int
    fixed: float
    stretch: float = 0.0
    round_trip: float = 0.0
    raw_units: Mapping[str, float] = field(default_factory=dict)
    gemms: tuple[tuple[str, float, int], ...] = ()
    local_bytes: float = 0.0
    local_unit: str = "tma"
    local: float = 0.0
    coresident: float = 0.0
    reload: float = 0.0
    shared_units: Mapping[str, float] = field(default_factory=dict)
    serial_chain: float = 0.0
    serial_gemm_chains: float = 0.0
    serial_round_trip: float = 0.0
    smem_bytes: float = 0.0

    @property
    def throughput(self) -> float:
        """The busiest of the SM's shared resources per trip (issue slots and every unit)."""
        return max([self.issue, *self.units.values()])

    @property
    def sm_throughput(self) -> float:
        """The busiest shared resource per trip when several CTAs share the SM (``shared_units``; the
        loads at the SM's L2 port rate)."""
        return max([self.issue, *(self.shared_units or self.units).values()])

    def to_dict(self) -> dict[str, Any]:
        """Plain data (cycles rounded to 0.1)."""
        return {"issue": round(self.issue, 1), "instructions_per_warp": round(self.instructions_per_warp, 1),
                "instructions_source": self.instructions_source,
                "units": {u: round(c, 1) for u, c in sorted(self.units.items())},
                "wgmma_smem": round(self.wgmma_smem, 1), "waits": self.waits, "fixed": round(self.fixed, 1),
                "stretch": round(self.stretch, 1), "round_trip": round(self.round_trip, 1),
                "raw_units": {u: round(c, 1) for u, c in sorted(self.raw_units.items())},
                "gemms": [{"name": n, "tc": round(c, 1), "smem_bytes": b} for n, c, b in self.gemms],
                "local_bytes": round(self.local_bytes, 1), "local_unit": self.local_unit,
                "local": round(self.local, 1), "coresident": round(self.coresident, 1),
                "reload": round(self.reload, 1),
                "shared_units": {u: round(c, 1) for u, c in sorted(self.shared_units.items())},
                "serial_chain": round(self.serial_chain, 1),
                "serial_gemm_chains": round(self.serial_gemm_chains, 1),
                "serial_round_trip": round(self.serial_round_trip, 1),
                "smem_bytes": round(self.smem_bytes, 1)}


def hardware_terms(graph: Graph, operands: Mapping[str, tuple[int, int, int, bool, str]], warps: int,
                   cm: CostModel, *, loop_instructions: int | None = None, num_stages: int = 1,
                   layouts: Mapping[str, tuple[int, int, int]] | None = None,
                   local_bytes_per_thread: float = 0.0, threads: int | None = None,
                   stack_bytes_per_thread: int = 0, smem_bytes: int = 0,
                   ctas_per_sm: int = 1, serialized: bool = False,
                   loop_barriers: int = 0) -> HardwareTerms:
    """The costs the hardware adds per trip of one CTA of ``warps`` warps (see :class:`HardwareTerms`).

    ``loop_instructions`` (warp instructions per trip, counted in the SASS) prices the issue slots; without
    it they are estimated from the graph's reservation tables. ``num_stages``: Triton's buffers per load
    (for the round trip). ``layouts`` (:func:`gemm_layouts`): each GEMM's Tensor Core time and operand
    reads as its ``wgmma`` instructions have them (:meth:`CostModel.wgmma_work`; without a layout the
    default split). A GEMM's Tensor Core reservation is stretched to its shared-memory operand reads
    when those take longer (Hopper; on Blackwell ``tcgen05.mma`` reads operands the same way, so the
    same rate applies).

    Spilled registers: ``local_bytes_per_thread`` (``STL`` + ``LDL`` bytes per thread per trip in the
    loop's SASS, :func:`twill.calibrate.regs.parse_sass_loop_local`) x ``threads`` bytes per trip, on
    L1 or L2 by :meth:`CostModel.local_memory_cycles`, whose working set is ``stack_bytes_per_thread`` x
    ``threads`` x ``ctas_per_sm`` against the L1 left beside ``ctas_per_sm`` x ``smem_bytes``.

    ``serialized``: ptxas serialized the wgmma pipeline (:func:`wgmma_serialized`; ``graph`` then has the
    serialized GEMMs of :func:`serialize_gemms`); ``loop_barriers``: CTA-wide barriers per trip in the
    loop's SASS (:func:`twill.calibrate.regs.parse_sass_loop_barriers`). Together they give
    :attr:`HardwareTerms.serial_chain` (:func:`serial_chain_cycles`).
    """
    raw_tma_rate = float(cm.machine.const("cost.tma_bytes_per_cycle"))
    tma_scale = raw_tma_rate / float(cm.machine.const("cost.tma_kernel_bytes_per_cycle"))
    layouts = layouts or {}
    tma_bytes = 0.0
    wgmma_bytes = 0.0
    units: dict[str, float] = {}
    raw: dict[str, float] = {}
    gemms: list[tuple[str, float, int]] = []
    reads = 0.0
    stretch = 0.0
    waits = 0
    estimated = 0.0
    for op in graph.ops:
        busy: dict[str, float] = {}
        for r in op.rrt:
            busy[r.unit] = busy.get(r.unit, 0.0) + r.cycles * r.count
        for unit, cycles in busy.items():
            raw[unit] = raw.get(unit, 0.0) + cycles
        if op.kind == "gemm" and op.name in operands:
            m, n, k, a_smem, dtype = operands[op.name]
            lay = layouts.get(op.name)
            work = cm.wgmma_work(m, n, k, a_in_smem=a_smem, dtype=dtype, warps=warps,
                                 warps_per_cta=None if lay is None else lay[:2],
                                 instr_n=None if lay is None else lay[2])
            tc = busy.get("tc", 0.0)
            gemms.append((op.name, tc, work.smem_bytes))
            smem = work.smem_bytes / float(cm.machine.const("cost.wgmma_smem_bytes_per_cycle"))
            reads += smem
            stretch += max(0.0, smem - tc)
            busy["tc"] = max(tc, smem)
            wgmma_bytes += work.smem_bytes
        if "tma" in busy:  # the L2 rate the kernel's loads get at its concurrency
            tma_bytes += busy["tma"] * raw_tma_rate
            busy["tma"] *= tma_scale
        for unit, cycles in busy.items():
            units[unit] = units.get(unit, 0.0) + cycles
        if op.variable_latency or op.kind == "gemm":
            waits += 1
        estimated += cm.estimated_instructions(op.rrt, max(1, op.warps))
    port_bytes = smem_port_bytes(tma_bytes, wgmma_bytes)
    units["smem"] = units.get("smem", 0.0) + port_bytes / float(cm.machine.const("cost.smem_bytes_per_cycle"))
    nthreads = threads if threads is not None else 32 * warps
    local_bytes = max(0.0, local_bytes_per_thread) * nthreads
    local_unit, local = "tma", 0.0
    if local_bytes > 0:
        local_unit, local = cm.local_memory_cycles(
            local_bytes, working_set=stack_bytes_per_thread * nthreads * max(1, ctas_per_sm),
            l1_free=cm.l1_free_bytes(smem_bytes, max(1, ctas_per_sm)))
        units[local_unit] = units.get(local_unit, 0.0) + local
    round_trip = 0.0
    if num_stages >= 2 and units.get("tma"):
        load = units["tma"] - (local if local_unit == "tma" else 0.0)
        round_trip = (float(cm.machine.const("cost.tma_latency")) + load) / (num_stages - 1)
    if loop_instructions is not None:
        per_warp, source = float(loop_instructions), "sass"
    else:
        per_warp, source = estimated, "model"
    issue = cm.issue_cycles(per_warp, warps)
    reload = spill_reload_cycles(local_unit, local, cm) if local_bytes > 0 else 0.0
    serial = serial_chain_cycles(graph, cm, issue=issue, barriers=loop_barriers) if serialized else 0.0
    chains = serial_gemm_chains(graph, cm) if serialized else 0.0
    serial_trip = 0.0
    if serialized and num_stages >= 2 and units.get("tma"):
        serial_trip = serial_round_trip_cycles(
            chains, units["tma"] - (local if local_unit == "tma" else 0.0), num_stages, cm)
    return HardwareTerms(issue, per_warp, source, units, reads, waits,
                         cm.iteration_fixed_cycles(waits), stretch, round_trip, raw, tuple(gemms),
                         local_bytes, local_unit, local, units.get("tc", 0.0) + issue, reload,
                         sm_units(units, cm, local=local if local_unit == "tma" else 0.0), serial,
                         chains, serial_trip, port_bytes)


def sm_units(units: Mapping[str, float], cm: CostModel, *, local: float = 0.0) -> dict[str, float]:
    """``units`` (busy cycles per trip of one CTA) as the SM serves them to several co-resident CTAs at
    once: the TMA loads at the SM's L2 port rate ``cost.l2_sm_bytes_per_cycle`` rather than one CTA's
    stream rate ``cost.tma_kernel_bytes_per_cycle``; ``local`` (spilled-register traffic on the L2 path,
    part of ``units["tma"]``) keeps its rate; every other unit is unchanged.

    One CTA's loads are issued by one elected thread, ``num_stages - 1`` ahead, and arrive at the rate
    one such stream gets (the simulated trip; fitted on the tuning grids). Co-resident CTAs issue
    independent streams that the SM's L2 port serves together: on the H200 Triton's GEMM as one wave of
    132 x k CTAs moves 22-53 B/cycle with one CTA per SM (its stream, latency-bound at 2-3 stages) and up
    to 72 B/cycle per SM with two or three (``benchmarks/calibrate/results/triton_occupancy.json``,
    ``gemm_sync_derived.json``; ``run_gemm_sync.py``).

    Raises
    ------
    ValueError
        Either rate is not positive, or ``local`` exceeds ``units["tma"]``.
    """
    port = float(cm.machine.const("cost.l2_sm_bytes_per_cycle"))
    stream = float(cm.machine.const("cost.tma_kernel_bytes_per_cycle"))
    if port <= 0 or stream <= 0:
        raise ValueError(f"L2 rates must be > 0 (cost.l2_sm_bytes_per_cycle {port}, "
                         f"cost.tma_kernel_bytes_per_cycle {stream})")
    out = dict(units)
    if "tma" in out:
        loads = out["tma"] - local
        if loads < -1e-9:
            raise ValueError(f"local-memory cycles {local} exceed the TMA unit's {out['tma']}")
        out["tma"] = max(0.0, loads) * stream / port + local
    return out


def serial_chain_cycles(graph: Graph, cm: CostModel, *, issue: float, barriers: int) -> float:
    """Cycles a trip of one CTA takes at least when ptxas serialized its wgmma pipeline.

    Each warp waits for every ``wgmma`` it issued before its next instruction (``WARPGROUP.DEPBAR.LE
    gsb0, 0x0`` after each ``HGMMA``), so nothing else of the CTA issues while its GEMMs run, and the
    trip's other instructions and its CTA-wide barriers run after the GEMMs instead of under them
    (Triton's 4-warp pipeline waits with ``wait_group 1``: there the next trip's issue and barriers
    overlap the Tensor Cores). The sum of:

    * each GEMM's serialized chain, ``max(op.latency, tc + cost.tc_serial_latency)``: the op's latency
      (:meth:`CostModel.gemm` ``serialized=True``), and at least its Tensor Core time plus the last
      instruction's wait when the warp groups' chains keep the Tensor Cores busy;
    * ``issue``: the trip's warp instructions over the SM's schedulers (:meth:`CostModel.issue_cycles`);
    * ``barriers`` x ``handoff.named_barrier`` (34 cycles measured on the H200, ping-pong of two warp
      groups; 34.7 per ``bar.sync`` added to a loop of two warp groups' serialized wgmma,
      ``benchmarks/calibrate/results/gemm_sync.json`` ser_wg2_n128_sync4 against _nosync).

    On the H200 (``gemm_sync.json``, ``triton_occupancy.json``, one CTA per SM) Triton's 128x128x64 GEMM at
    8 warps takes 845 cycles per trip where 4 warps take 615, and 128x256x64 / 256x128x64 at 8 warps
    1405 / 1441; this sum gives 890, 1410 and 1446.

    Raises
    ------
    ValueError
        ``issue`` or ``barriers`` negative.
    """
    if issue < 0 or barriers < 0:
        raise ValueError(f"issue cycles and barriers must be >= 0, got {issue}, {barriers}")
    return serial_gemm_chains(graph, cm) + issue + barriers * float(cm.machine.const("handoff.named_barrier"))


def serial_gemm_chains(graph: Graph, cm: CostModel) -> float:
    """The serialized GEMMs' chains of one trip (cycles): per GEMM ``max(op.latency, tc +
    cost.tc_serial_latency)`` (:func:`serial_chain_cycles`; ``graph`` with the GEMMs of
    :func:`serialize_gemms`)."""
    tail = float(cm.machine.const("cost.tc_serial_latency"))
    chains = 0.0
    for op in graph.ops:
        if op.kind != "gemm":
            continue
        busy = sum(r.cycles * r.count for r in op.rrt if r.unit == "tc")
        chains += max(float(op.latency), busy + tail)
    return chains


def serial_round_trip_cycles(chains: float, load_cycles: float, num_stages: int, cm: CostModel) -> float:
    """The load round trip of a trip whose wgmma pipeline ptxas serialized (cycles per trip).

    Triton's main loop issues the TMA loads of trip ``i + num_stages - 1`` after trip ``i``'s GEMMs in
    program order (the SASS of the CPU compile: mbarrier wait, the trip's ``HGMMA`` s, ``BAR.SYNC``,
    arrive, ``BAR.SYNC``, TMA issue; docs/calibration.md §7.1). Unserialized, the ``HGMMA`` s are
    asynchronous and the loads issue at once; serialized, every ``HGMMA`` is followed by a
    ``WARPGROUP.DEPBAR`` that waits for it, so the loads issue only after the trip's chains. A load must
    then land within the ``num_stages - 1`` trips that follow its issue:
    ``(chains + cost.tma_latency + load_cycles) / (num_stages - 1)``. At 2 stages this is the whole chain
    plus the round trip (the H200's 8-warp 128x256x64 GEMM, 2 stages: 2672-2919 cycles per trip where
    the round trip alone gives 2044; benchmarks/results/tune_scores.md).

    Raises
    ------
    ValueError
        ``num_stages`` < 2 (no load is in flight across trips) or a negative cycle count.
    """
    if num_stages < 2:
        raise ValueError(f"a round trip needs num_stages >= 2, got {num_stages}")
    if chains < 0 or load_cycles < 0:
        raise ValueError(f"chain and load cycles must be >= 0, got {chains}, {load_cycles}")
    return (chains + float(cm.machine.const("cost.tma_latency")) + load_cycles) / (num_stages - 1)


def smem_port_bytes(tma_bytes: float, wgmma_bytes: float) -> float:
    """Bytes one trip moves through the SM's shared-memory ports for its TMA copies and wgmma operands.

    A TMA load writes its tile into shared memory (a TMA store reads it from there) and every ``wgmma``
    reads its shared-memory operands (``B``, and ``A`` for ``SS``; :meth:`CostModel.wgmma_work`) through
    the same ports, 32 banks x 4 B per cycle (``cost.smem_bytes_per_cycle``, 128; CUDA C Programming
    Guide). On the H200 Triton's GEMM at one CTA per SM moves 110-125 B/cycle of the two together when
    it is not serialized (64x256x64: 40 KB of loads + 40 KB of operand reads in 673-714 cycles;
    128x128x64: 32 + 48 KB in 667-719; 128x64x128: 48 + 64 KB in 899-970; tune_scores.md), where the
    loads alone would allow 72 B/cycle (``cost.l2_sm_bytes_per_cycle``).

    Raises
    ------
    ValueError
        A negative byte count.
    """
    if tma_bytes < 0 or wgmma_bytes < 0:
        raise ValueError(f"byte counts must be >= 0, got {tma_bytes}, {wgmma_bytes}")
    return tma_bytes + wgmma_bytes


def spill_reload_cycles(unit: str, cycles: float, cm: CostModel) -> float:
    """Cycles a trip's spilled-register reloads add to its compute chain (:attr:`HardwareTerms.reload`).

    ``cycles``: the local-memory traffic's busy cycles on ``unit`` (:meth:`CostModel.local_memory_cycles`).
    On the L2 path (``unit == "tma"``) one load latency, ``cost.tma_latency``, is added: the values come
    back before the instruction that reads them issues (an estimate: the latency of an ``LDL`` that
    misses L1 is taken to be the measured all-SM L2 load latency). In L1 (``"smem"``) only the transfer.

    Raises
    ------
    ValueError
        Negative ``cycles``.
    """
    if cycles < 0:
        raise ValueError(f"local-memory cycles must be >= 0, got {cycles}")
    if cycles == 0:
        return 0.0
    return cycles + (float(cm.machine.const("cost.tma_latency")) if unit == "tma" else 0.0)


def effective_cycles(latency_cycles: float, terms: HardwareTerms, ctas_per_sm: int,
                     compute_cycles: float | None = None) -> float:
    """Cycles one CTA's loop trip takes with ``ctas_per_sm`` CTAs sharing the SM.

    ``max(L + f, C + r + f + (k - 1) D, S + r + f, R, k T)`` (``C``, ``L`` capped as said under ``S``)
    with ``f = terms.fixed + terms.stretch`` and
    ``r = terms.reload`` (spilled registers reloaded on the chain, :func:`spill_reload_cycles`):

    * ``L`` = ``latency_cycles``, the CTA's own simulated cycles per trip (loads at their latency over
      ``num_stages`` buffers); a trip is never shorter, whatever the other CTAs do;
    * ``C`` = ``compute_cycles``, the same schedule simulated with loads that arrive at once (its Tensor
      Core and CUDA-core chain; ``L`` when not given), plus ``k - 1`` times ``D`` =
      ``terms.coresident``, the Tensor Core time plus issue slots of each co-resident CTA. CTAs that
      nothing synchronizes fall into step: they wait for the same loads and issue their GEMMs and their
      softmax at the same time, so the in-order Tensor Core pipe runs the others' GEMMs before this
      one's result is back and the schedulers issue the others' instructions between this one's; the
      load waits (``L - C``) are what other CTAs do fill (FA3 enforces the other order, ping-pong, with
      named barriers because it does not arise on its own). On the H200 FA 128/64 at 4 warps takes
      1.89-1.93 kcycles per trip alone and 3.58-3.65 with two CTAs per SM, where ``max(L, k T)``
      predicts no slowdown (``benchmarks/results/tune_scores.md``);
    * ``S`` = ``terms.serial_chain``, one CTA's trip when ptxas serialized the wgmma pipeline
      (:func:`serial_chain_cycles`; 0 otherwise): the other CTAs' work fills its issue and barrier
      phases, so it is a bound of its own, not added to ``(k - 1) D``. It is also the chain: where the
      simulation of Triton's schedule with the GEMMs at their serialized latencies (``compute_cycles``)
      comes out longer than ``S``, ``C`` is taken down to ``S`` and ``L`` by the same amount (its load
      waits, ``L - C``, kept). Measured one-CTA-per-SM trips follow ``S``, not the simulation: FA
      128/128 at 4 warps, D 64 (ptxas C7511), 3129-3171 cycles per trip for ``S`` 3325 and ``C`` 3997
      (``benchmarks/results/h200_tune_heldout{,5}.json``); GEMM 64x256x64 at 8 warps 877-929 for ``S``
      894, ``C`` 976 (``gemm_sync.cu`` and the grids, tune_scores.md). Only with ``compute_cycles``
      given (the Triton path; twill's own schedules are not simulated this way);
    * ``R`` = ``terms.round_trip``, the loads' round trip over the buffers in flight, and
      ``terms.serial_round_trip`` when the pipeline is serialized (its loads issue after its GEMM
      chains, :func:`serial_round_trip_cycles`);
    * ``k T`` with ``T`` = ``terms.sm_throughput``: the co-resident CTAs' trips together cannot issue or
      use a unit faster than the SM does (their loads at the SM's L2 port rate, :func:`sm_units`).

    Raises
    ------
    ValueError
        ``ctas_per_sm`` < 1.
    """
    if ctas_per_sm < 1:
        raise ValueError(f"ctas_per_sm must be >= 1, got {ctas_per_sm}")
    extra = terms.fixed + terms.stretch
    compute = latency_cycles if compute_cycles is None else min(compute_cycles, latency_cycles)
    if compute_cycles is not None and 0 < terms.serial_chain < compute:
        # serial_cap: Triton's simulated chain with serialized GEMMs above the serialized chain itself
        latency_cycles -= compute - terms.serial_chain
        compute = terms.serial_chain
    serial = terms.serial_chain + terms.reload + extra if terms.serial_chain > 0 else 0.0
    return max(latency_cycles + extra, compute + terms.reload + extra + (ctas_per_sm - 1) * terms.coresident,
               serial, terms.round_trip, terms.serial_round_trip, ctas_per_sm * terms.sm_throughput)


def waves(ctas: int, sms: int, ctas_per_sm: int) -> int:
    """``ceil(ctas / (sms * ctas_per_sm))``."""
    return math.ceil(ctas / (sms * ctas_per_sm))


def tail_ctas_per_sm(ctas: int, sms: int, ctas_per_sm: int) -> int:
    """CTAs per SM in the last wave: its ``r = ctas - (waves - 1) sms k`` CTAs spread over the SMs,
    ``ceil(r / sms)`` on each (the block scheduler hands each CTA to the least-loaded SM), so a last wave
    of few CTAs runs at the occupancy it has, not the kernel's (its CTAs share an SM with fewer others).

    >>> tail_ctas_per_sm(2048, 132, 3)   # 5 full waves of 396, 68 CTAs left: one per SM
    1
    >>> tail_ctas_per_sm(1056, 132, 4)   # 2 full waves, none left over: the last is full
    4

    Raises
    ------
    ValueError
        ``ctas``, ``sms`` or ``ctas_per_sm`` < 1.
    """
    if ctas < 1 or sms < 1 or ctas_per_sm < 1:
        raise ValueError(f"ctas, sms and ctas_per_sm must be >= 1, got {ctas}, {sms}, {ctas_per_sm}")
    left = ctas - (waves(ctas, sms, ctas_per_sm) - 1) * sms * ctas_per_sm
    return min(ctas_per_sm, math.ceil(left / sms))
