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
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from twill.ir.costmodel import CostModel
from twill.ir.graph import Graph
from twill.ir.machine import Machine

__all__ = [
    "HardwareTerms",
    "TritonSlots",
    "effective_cycles",
    "gemm_operands",
    "hardware_terms",
    "register_demand",
    "replicate",
    "serialize_gemms",
    "simulate_triton",
    "trips_needed",
    "triton_schedule",
    "triton_slots",
    "waves",
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


def serialize_gemms(graph: Graph, operands: Mapping[str, tuple[int, int, int, bool, str]], warps: int,
                    cm: CostModel) -> Graph:
    """The graph with every wgmma serialized (ptxas C7511): :meth:`CostModel.gemm` ``serialized=True``.

    Hopper only (a serialized wgmma pipeline is an sm_90 mode); on another family the graph is returned
    as it is."""
    if cm.machine.family != "hopper":
        return graph

    def fix(op: Any) -> Any:
        if op.kind != "gemm":
            return op
        m, n, k, _, dtype = operands[op.name]
        cost = cm.gemm(m, n, k, dtype=dtype, warps=warps, serialized=True)
        return replace(op, rrt=cost.rrt, latency=cost.latency, issue_cycles=cost.issue_cycles)

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
        Busy cycles per trip of each unit, with each GEMM at the longer of its Tensor Core time and its
        shared-memory operand reads (:meth:`CostModel.wgmma_smem_cycles`) and those reads added to ``smem``.
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
        Per GEMM: name, Tensor Core cycles, shared-memory operand bytes.
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

    @property
    def throughput(self) -> float:
        """The busiest of the SM's shared resources per trip (issue slots and every unit)."""
        return max([self.issue, *self.units.values()])

    def to_dict(self) -> dict[str, Any]:
        """Plain data (cycles rounded to 0.1)."""
        return {"issue": round(self.issue, 1), "instructions_per_warp": round(self.instructions_per_warp, 1),
                "instructions_source": self.instructions_source,
                "units": {u: round(c, 1) for u, c in sorted(self.units.items())},
                "wgmma_smem": round(self.wgmma_smem, 1), "waits": self.waits, "fixed": round(self.fixed, 1),
                "stretch": round(self.stretch, 1), "round_trip": round(self.round_trip, 1),
                "raw_units": {u: round(c, 1) for u, c in sorted(self.raw_units.items())},
                "gemms": [{"name": n, "tc": round(c, 1), "smem_bytes": b} for n, c, b in self.gemms]}


def hardware_terms(graph: Graph, operands: Mapping[str, tuple[int, int, int, bool, str]], warps: int,
                   cm: CostModel, *, loop_instructions: int | None = None,
                   num_stages: int = 1) -> HardwareTerms:
    """The costs the hardware adds per trip of one CTA of ``warps`` warps (see :class:`HardwareTerms`).

    ``loop_instructions`` (warp instructions per trip, counted in the SASS) prices the issue slots; without
    it they are estimated from the graph's reservation tables. ``num_stages``: Triton's buffers per load
    (for the round trip). A GEMM's Tensor Core reservation is
    stretched to its shared-memory operand reads when those take longer (Hopper; on Blackwell
    ``tcgen05.mma`` reads operands the same way, so the same rate applies).
    """
    tma_scale = float(cm.machine.const("cost.tma_bytes_per_cycle")) / float(
        cm.machine.const("cost.tma_kernel_bytes_per_cycle"))
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
            gemms.append((op.name, busy.get("tc", 0.0), cm.wgmma_smem_bytes(m, n, k, a_in_smem=a_smem,
                                                                              dtype=dtype, warps=warps)))
            smem = cm.wgmma_smem_cycles(m, n, k, a_in_smem=a_smem, dtype=dtype, warps=warps)
            reads += smem
            stretch += max(0.0, smem - busy.get("tc", 0.0))
            busy["tc"] = max(busy.get("tc", 0.0), smem)
            busy["smem"] = busy.get("smem", 0.0) + smem
        if "tma" in busy:  # the L2 rate the kernel's loads get at its concurrency
            busy["tma"] *= tma_scale
        for unit, cycles in busy.items():
            units[unit] = units.get(unit, 0.0) + cycles
        if op.variable_latency or op.kind == "gemm":
            waits += 1
        estimated += cm.estimated_instructions(op.rrt, max(1, op.warps))
    round_trip = 0.0
    if num_stages >= 2 and units.get("tma"):
        round_trip = (float(cm.machine.const("cost.tma_latency")) + units["tma"]) / (num_stages - 1)
    if loop_instructions is not None:
        per_warp, source = float(loop_instructions), "sass"
    else:
        per_warp, source = estimated, "model"
    return HardwareTerms(cm.issue_cycles(per_warp, warps), per_warp, source, units, reads, waits,
                         cm.iteration_fixed_cycles(waits), stretch, round_trip, raw, tuple(gemms))


def effective_cycles(latency_cycles: float, terms: HardwareTerms, ctas_per_sm: int) -> float:
    """Cycles one CTA's loop trip takes with ``ctas_per_sm`` CTAs sharing the SM.

    ``max(latency_cycles + terms.fixed + terms.stretch, terms.round_trip, ctas_per_sm * terms.throughput)``:
    a trip takes at least its own schedule's length per trip plus its barrier waits and the GEMMs'
    operand-read stretch, no less than its loads' round trip over the buffers in flight, and the
    co-resident CTAs' trips together cannot issue or use a unit faster than the SM does.
    ``latency_cycles`` is the single-CTA (or already shared, simulated) cycles per trip.

    Raises
    ------
    ValueError
        ``ctas_per_sm`` < 1.
    """
    if ctas_per_sm < 1:
        raise ValueError(f"ctas_per_sm must be >= 1, got {ctas_per_sm}")
    return max(latency_cycles + terms.fixed + terms.stretch, terms.round_trip,
               ctas_per_sm * terms.throughput)


def waves(ctas: int, sms: int, ctas_per_sm: int) -> int:
    """``ceil(ctas / (sms * ctas_per_sm))``."""
    return math.ceil(ctas / (sms * ctas_per_sm))
