"""Costs a generated Gluon kernel pays per loop trip that the schedule's tile model does not price.

The Gluon backend (:mod:`twill.codegen.gluon`) executes the schedule exactly: each partition issues its
ops in the schedule's order, trip by trip. Measured on the H200 (``benchmarks/results/
h200_gluon_fa_grid.json``), its trips nevertheless take 1.1-4.2x the schedule's II, and the gap is not
noise: it follows four costs of the code the compiler makes from the schedule, each priced here from
first principles, with no fitted constant.

* **A serialized wgmma pipeline** (:func:`serialized_gemm_graph`). When ptxas cannot keep the ``wgmma``
  pipeline in flight it says so (C7511 / C7512 / C7515, :func:`twill.tune.triton_model.wgmma_serialized`)
  and waits after every ``wgmma`` instruction. A GEMM then takes its instructions one after another, each
  its throughput time plus ``cost.tc_serial_latency`` (56 cycles, measured on the H200:
  :meth:`twill.ir.costmodel.CostModel.gemm` ``serialized=True``). The 128-row FA tiles held by one warp
  group split into two ``m64`` halves and ``K / 16`` steps, so their Q K^T of 16 instructions runs
  16 x 72 instead of 256 cycles.
* **Bank-conflicted hand-offs** (:func:`staging_conflict`, :func:`conflicted_handoff_graph`). A register
  value handed between warp groups goes through a staging buffer, and both sides access it in the
  value's register layout. The backend gives a tile of 8+ rows the NVMMA swizzle
  (:func:`twill.codegen.gluon.layouts.staging_swizzle`), whose addresses this model follows, which
  makes the MMA layout's requests conflict-free; a row vector, and the kernels generated before the
  swizzle (``gl.SwizzledSharedLayout(1, 1, 1)``, row-major), are unswizzled.
  Unswizzled, in the Hopper MMA layout a warp's request touches 8 or 16 rows at the same column; when a row
  is a multiple of 128 bytes they all fall on the same banks, so one request takes 4 times the wavefronts
  of the SMEM ports that a conflict-free one takes (CUDA C Programming Guide, compute capability 9.0,
  shared memory: 32 banks of 4 bytes, successive words in successive banks; a request that touches
  ``n`` distinct words of one bank is split into ``n`` wavefronts). The P tile of FA 128/64 (16 KB of
  fp16, ``stmatrix``) and of FA 128/128 at 4 warps (64 KB of fp32, ``st.shared.v2``, read twice) move at
  a quarter of the port rate.

* **Signals between warp groups as mbarriers.** The backend frees a staging or ring slot read by
  another group, and passes the Tensor Core's turn from one group to the next, with an mbarrier arrive
  and wait (``handoff.mbarrier``, 75 cycles one way, measured on the H200); the turn is arrived after
  the GEMM is issued, which for a serialized GEMM is after its last instruction has run, so two groups'
  serialized GEMMs take turns instead of overlapping.
* **A partition barrier before every arrive.** Each ``mbarrier.arrive`` of a partition is preceded by a
  ``bar.sync`` of its warps (seen in the PTX of every FA grid kernel), so the group pays a named barrier
  (``handoff.named_barrier``, 34 cycles measured on the H200 for a bar.sync hand-off of 256 threads; an
  estimate for one group's own warps) per arrive: ring slots released, staged values published and
  consumed, Tensor Core turns passed (:func:`barrier_arrives`, :func:`arrive_graph`).

:func:`trip_terms` applies them to the loop's graph for a given schedule, one at a time, and
:func:`simulated_trip_cycles` runs the schedule on each graph through
:func:`twill.analysis.simulate.simulate` (raw cycles, each group issuing in the schedule's order, blocking
waits, ring depths, hand-offs): the cycles per trip of the kernel that executes the schedule.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from twill.codegen.gluon.layouts import staging_swizzle
from twill.ir.costmodel import CostModel
from twill.ir.graph import Graph, Reservation

__all__ = [
    "HandoffConflict",
    "arrive_graph",
    "bank_wavefronts",
    "barrier_arrives",
    "conflicted_handoff_graph",
    "mma_v3_accesses",
    "result_encodings",
    "serialized_gemm_graph",
    "simulated_trip_cycles",
    "staging_conflict",
    "trip_terms",
]

BANKS = 32
"""Shared-memory banks per SM (CUDA C Programming Guide, compute capability 9.0, shared memory)."""
BANK_BYTES = 4
"""Bytes per bank word (same source: successive 32-bit words map to successive banks)."""
_ELEMENT_BYTES = {"f16": 2, "bf16": 2, "f32": 4, "i32": 4, "f8E4M3FN": 1, "f8E5M2": 1, "i8": 1, "i1": 1,
                  "f64": 8, "i64": 8}
_MMA_V3 = re.compile(r"nvidia_mma<\{versionMajor = 3,[^}]*instrShape = \[\d+, (\d+), \d+\]")


def bank_wavefronts(accesses: Sequence[tuple[int, int]], *, banks: int = BANKS,
                    bank_bytes: int = BANK_BYTES) -> int:
    """Wavefronts one warp-wide shared-memory request takes: ``accesses`` = ``(address, bytes)`` per lane.

    Each bank serves one distinct word per wavefront; lanes that touch the same word share it (a
    broadcast), so the request takes the largest number of distinct words any bank holds (CUDA C
    Programming Guide, compute capability 9.0, shared memory; 32 banks of 4 bytes by default), and never
    fewer than its distinct bytes over the ports' ``banks x bank_bytes`` per wavefront.

    >>> bank_wavefronts([(4 * lane, 4) for lane in range(32)])             # 32 consecutive words
    1
    >>> bank_wavefronts([(128 * lane, 4) for lane in range(32)])           # one bank, 32 words
    32
    >>> bank_wavefronts([(0, 4)] * 32)                                     # one word: a broadcast
    1

    Raises
    ------
    ValueError
        An empty request, a negative address or a size below 1.
    """
    if not accesses:
        raise ValueError("a shared-memory request needs at least one access")
    words: set[int] = set()
    for address, nbytes in accesses:
        if address < 0 or nbytes < 1:
            raise ValueError(f"access ({address}, {nbytes}): need address >= 0 and bytes >= 1")
        words.update(range(address // bank_bytes, (address + nbytes - 1) // bank_bytes + 1))
    per_bank: dict[int, int] = {}
    for w in words:
        per_bank[w % banks] = per_bank.get(w % banks, 0) + 1
    return max(max(per_bank.values()), math.ceil(len(words) * bank_bytes / (banks * bank_bytes)))


def mma_v3_accesses(shape: Sequence[int], element_bytes: int, *,
                    sliced: bool = False, swizzle: int = 0) -> list[tuple[int, int]]:
    """The first warp request of a Hopper MMA-layout register tile stored to / loaded from a row-major
    shared buffer of ``shape``, unswizzled or with an NVMMA swizzle of ``swizzle`` bytes (128, 64, 32):
    ``(address, bytes)`` per lane.

    The wgmma accumulator fragment (PTX ISA, wgmma register fragments, matrix D): lane ``l`` of a warp
    holds rows ``l // 4`` and ``l // 4 + 8`` of the warp's 16, columns ``2 (l % 4) + {0, 1}`` of each 8.
    What Triton 3.6 emits for it (the PTX of the FA grid's Gluon kernels, ``benchmarks/gluon_fa_grid/``):

    * 16-bit elements: ``stmatrix`` / ``ldmatrix .m8n8.x4``, a 16 x 16 block per instruction: lane ``i``
      gives the address of row ``i % 8`` of 8x8 matrix ``i // 8`` (rows ``0-7`` / ``8-15`` x columns
      ``0-7`` / ``8-15``), 16 bytes each;
    * 32-bit elements: ``st.shared.v2`` / ``ld.shared.v2`` of the two adjacent columns (8 bytes);
    * ``sliced``, a ``#ttg.slice<{dim = 1}>`` of the layout (a row vector such as the softmax's row max):
      lane ``l`` holds element ``l // 4``, one element per access.

    Every other request of the tile is the first shifted by whole rows or 8 columns, which moves every
    lane's bank alike, so the first one stands for all.

    >>> mma_v3_accesses([128, 32], 2)[7:10]    # fp16 rows of 64 B: row 7 of matrix 0, rows 8-9 of matrix 1
    [(448, 16), (512, 16), (576, 16)]
    >>> mma_v3_accesses([128, 128], 4)[:5]     # fp32 rows of 512 B: lanes 0-3 on row 0, lane 4 on row 1
    [(0, 8), (8, 8), (16, 8), (24, 8), (512, 8)]

    With a swizzle of ``W`` bytes the tile is stored as panels of ``W``-byte rows (the row's first ``W``
    bytes of every row, then the next ``W``...), and within a panel the 16-byte chunk ``c`` of row ``r``
    goes to chunk ``c XOR ((r x W / 128) mod (W / 16))`` (CUTLASS's ``Swizzle<log2(W/16), 4, 3>`` on the
    byte offset, which is what ``NVMMASharedLayout(swizzle_byte_width=W)`` lays out):

    >>> mma_v3_accesses([128, 64], 2, swizzle=128)[:9:4]   # rows 0, 4, 8 of 128 B: chunk 0 lands at 0, 4, 0
    [(0, 16), (576, 16), (1024, 16)]

    Raises
    ------
    ValueError
        A tile that is not 2-D, or elements neither 16- nor 32-bit.
    """
    if sliced:
        return [((lane // 4) * element_bytes, element_bytes) for lane in range(32)]
    if len(shape) != 2:
        raise ValueError(f"an MMA-layout tile is 2-D, got shape {list(shape)}")
    row = int(shape[1]) * element_bytes
    if element_bytes == 2:
        cells = [(8 * ((i // 8) % 2) + i % 8, 16 * (i // 16), 16) for i in range(32)]
    elif element_bytes == 4:
        cells = [(lane // 4, 2 * (lane % 4) * element_bytes, 2 * element_bytes) for lane in range(32)]
    else:
        raise ValueError(f"MMA-layout staging of {8 * element_bytes}-bit elements is not modelled (16 or 32)")
    if not swizzle:
        return [(r * row + c, n) for r, c, n in cells]
    if swizzle not in (32, 64, 128) or row % swizzle:
        raise ValueError(f"a swizzle of {swizzle} B does not tile rows of {row} B "
                         "(32, 64 or 128 dividing it)")
    rows = int(shape[0])

    def address(r: int, c: int) -> int:
        panel, within = divmod(c, swizzle)
        chunk, byte = divmod(within, 16)
        phase = (r * swizzle // 128) % (swizzle // 16)
        return panel * rows * swizzle + r * swizzle + 16 * (chunk ^ phase) + byte

    return [(address(r, c), n) for r, c, n in cells]


def staging_conflict(encoding: str, shape: Sequence[int], element: str, swizzle: int = 0) -> float | None:
    """How many times longer than conflict-free a register tile's trip through the Gluon backend's
    staging buffer takes (unswizzled, or with the NVMMA swizzle of ``swizzle`` bytes the backend gives it:
    :func:`twill.codegen.gluon.layouts.staging_swizzle`): ``wavefronts x 128 / bytes`` of a warp's request
    (1.0 = each wavefront moves 128 useful bytes; :func:`bank_wavefronts`, :func:`mma_v3_accesses`).

    ``encoding`` is the TTGIR encoding of the value (``#ttg.nvidia_mma<{versionMajor = 3, ...}>`` or a
    ``#ttg.slice<{dim = 1, parent = ...}>`` of one), ``element`` its TTGIR element type (``f16``, ``f32``).
    None for an encoding this model does not know (the hand-off is then priced conflict-free, and the
    caller says so).

    >>> mma = ("#ttg.nvidia_mma<{versionMajor = 3, versionMinor = 0, warpsPerCTA = [4, 1], "
    ...        "instrShape = [16, 32, 16]}>")
    >>> staging_conflict(mma, [128, 32], "f16")    # rows of 64 B: 8 rows per bank offset, 8 wavefronts
    2.0
    >>> staging_conflict(mma, [128, 64], "f16")    # rows of 128 B: 16 rows on the same banks
    4.0
    >>> staging_conflict(mma, [128, 128], "f32")   # 8 B per lane, rows of 512 B: 8 wavefronts for 256 B
    4.0
    >>> staging_conflict("#blocked", [128], "f32") is None
    True
    >>> staging_conflict(mma, [128, 64], "f16", swizzle=128)     # swizzled: 8 wavefronts' worth spread
    1.0
    """
    eb = _ELEMENT_BYTES.get(element)
    if eb is None or not _MMA_V3.search(encoding):
        return None
    sliced = encoding.lstrip().startswith("#ttg.slice")
    if sliced and not re.match(r"#ttg\.slice<\{dim = 1,", encoding.strip()):
        return None
    if not sliced and eb not in (2, 4):
        return None
    accesses = mma_v3_accesses(shape, eb, sliced=sliced, swizzle=0 if sliced else swizzle)
    useful = len({a for a, _ in accesses}) * accesses[0][1]
    return bank_wavefronts(accesses) * BANKS * BANK_BYTES / useful


def serialized_gemm_graph(graph: Graph, operands: Mapping[str, tuple[int, int, int, bool, str]],
                          warps: Mapping[str, int], cm: CostModel) -> Graph:
    """The graph with every GEMM serialized as ptxas does it under C7511 / C7515, each GEMM issued by
    ``warps[name]`` warps (its warp group in the schedule): :meth:`CostModel.gemm` ``serialized=True``.

    Hopper only; on another family, or for a GEMM without operands, the op is kept as it is.
    """
    if cm.machine.family != "hopper":
        return graph

    def fix(op: Any) -> Any:
        if op.kind != "gemm" or op.name not in operands:
            return op
        m, n, k, _, dtype = operands[op.name]
        cost = cm.gemm(m, n, k, dtype=dtype, warps=warps.get(op.name, op.warps), serialized=True)
        return replace(op, rrt=cost.rrt, latency=cost.latency, issue_cycles=cost.issue_cycles)

    return graph.map_ops(fix)


@dataclass(frozen=True)
class HandoffConflict:
    """One register value handed between warp groups through an unswizzled staging buffer.

    Attributes
    ----------
    value : str
        The producing op.
    nbytes : int
        Bytes per trip.
    factor : float or None
        :func:`staging_conflict` (None: an encoding the model does not know, priced conflict-free).
    store_extra, load_extra : dict
        Extra SMEM-port cycles per trip beyond the conflict-free ``nbytes / cost.smem_bytes_per_cycle``
        (which the simulator already books): on the producer's store, and per consumer op its load.
    """

    value: str
    nbytes: int
    factor: float | None
    store_extra: float
    load_extra: Mapping[str, float]

    def to_dict(self) -> dict[str, Any]:
        """Plain data."""
        return {"value": self.value, "bytes": self.nbytes, "factor": self.factor,
                "store_extra": round(self.store_extra, 1),
                "load_extra": {k: round(v, 1) for k, v in sorted(self.load_extra.items())}}


def conflicted_handoff_graph(graph: Graph, group: Mapping[str, int], encodings: Mapping[str, tuple[str, str]],
                             cm: CostModel) -> tuple[Graph, tuple[HandoffConflict, ...]]:
    """The graph with the bank conflicts of each cross-group register hand-off priced on the ops that
    store and load it (see the module docstring).

    ``group[op]`` is the op's warp group in the schedule, ``encodings[op] = (encoding, element)`` the
    TTGIR register encoding and element type of its result. For each register dependence whose ends sit
    on different groups, with conflict factor ``c``: the producer's store (once, however many readers)
    and each consumer's load take ``(c - 1) x bytes / cost.smem_bytes_per_cycle`` more cycles on the
    SMEM ports, and the issuing warps wait for them (the op's issue time and latency grow by as much).

    >>> from twill.ir.graph import Graph
    >>> from twill.ir.machine import load_machine
    >>> mma = ("#ttg.nvidia_mma<{versionMajor = 3, versionMinor = 0, warpsPerCTA = [4, 1], "
    ...        "instrShape = [16, 64, 16]}>")
    >>> g = Graph("t")
    >>> _ = g.add_op("p", "convert", busy={"alu": 8}, result_bytes=16384,
    ...              attrs={"shape": "128x64xf16 register"})
    >>> _ = g.add_op("o", "alu", busy={"alu": 8})
    >>> _ = g.add_edge("p", "o")
    >>> g2, found = conflicted_handoff_graph(g, {"p": 1, "o": 2}, {"p": (mma, "f16")},
    ...                                      CostModel(load_machine("h200")))
    >>> found[0].factor, found[0].store_extra       # staged with a 128 B swizzle: conflict-free, no extra
    (1.0, 0.0)
    >>> g2.op("p").issue_cycles, g2.op("o").latency
    (8, 8)
    >>> staging_conflict(mma, [128, 64], "f16")   # unswizzled, as before: 16 KB at 4x = 3 x 128 cycles more
    4.0
    """
    rate = float(cm.machine.const("cost.smem_bytes_per_cycle"))
    store: dict[str, float] = {}
    load: dict[str, dict[str, float]] = {}
    found: dict[str, HandoffConflict] = {}
    for dep in graph.edges:
        if dep.carrier != "register" or dep.src == dep.dst or group.get(dep.src) == group.get(dep.dst):
            continue
        src = graph.op(dep.src)
        if src.result_bytes <= 0:
            continue
        enc = encodings.get(dep.src)
        factor = None
        if enc is not None:
            shape = _shape(src)
            factor = (staging_conflict(enc[0], shape, enc[1], staging_swizzle(shape, enc[1]))
                      if shape else None)
        extra = 0.0 if factor is None else max(0.0, factor - 1.0) * src.result_bytes / rate
        store[dep.src] = max(store.get(dep.src, 0.0), extra)
        load.setdefault(dep.src, {})[dep.dst] = max(load.get(dep.src, {}).get(dep.dst, 0.0), extra)
        found[dep.src] = HandoffConflict(dep.src, src.result_bytes, factor, store[dep.src], load[dep.src])
    added: dict[str, float] = dict(store)
    for readers in load.values():
        for dst, extra in readers.items():
            added[dst] = added.get(dst, 0.0) + extra

    def fix(op: Any) -> Any:
        extra = math.ceil(added.get(op.name, 0.0) - 1e-9)
        if extra <= 0:
            return op
        end = max((r.end for r in op.rrt), default=0)
        return replace(op, rrt=(*op.rrt, Reservation("smem", end, extra)), latency=op.latency + extra,
                       issue_cycles=op.issue_cycles + extra)

    return graph.map_ops(fix), tuple(found[k] for k in sorted(found))


def _shape(op: Any) -> list[int]:
    """The op's result shape from its ``shape`` attribute (``"128x32xf16 register"`` -> [128, 32])."""
    text = dict(op.attrs).get("shape", "")
    dims = text.split()[0].split("x")[:-1] if text else []
    return [int(d) for d in dims if d.isdigit()]


def simulated_trip_cycles(schedule: Any, graph: Graph, trips: int, *, tma_latency: float,
                          barrier_cycles: float | None = None) -> float:
    """Cycles per steady-state trip of ``schedule`` run on ``graph`` (raw cycles) by
    :func:`twill.analysis.simulate.simulate`, every TMA load taking ``tma_latency`` cycles, the signals
    between groups as mbarriers of ``barrier_cycles`` when given (the simulator's ``barrier_cycles``),
    over :func:`twill.tune.triton_model.trips_needed` trips (at most 64 more than the stages need)."""
    from twill.analysis.simulate import simulate
    from twill.tune.triton_model import trips_needed

    n = trips_needed(schedule, min(max(1, trips), 64))
    result = simulate(schedule, n, {"tma_load": float(tma_latency)}, graph=graph,
                      barrier_cycles=barrier_cycles)
    if result.cycles_per_iteration is None:
        return float(schedule.ii_cycles)
    return float(result.cycles_per_iteration)


def barrier_arrives(graph: Graph, schedule: Any) -> dict[str, int]:
    """The ``mbarrier.arrive`` s the Gluon backend emits per trip, by the graph op after which each is made
    (the rules of :mod:`twill.codegen.gluon`):

    * a ring slot (a TMA load's SMEM value) is released by each group that reads it, after that group's
      last reader (by start time);
    * a register value handed between groups is published once by its producer (``sready``) and released
      by each other group that reads it, after that group's last reader (``sempty``);
    * the Tensor Core's turn (GEMMs in the order of their start times modulo II, cyclically) is passed
      after each GEMM whose successor sits on another group.

    >>> from twill.ir.graph import Graph
    >>> from types import SimpleNamespace as NS
    >>> g = Graph("t")
    >>> _ = g.add_op("k", "tma_load", busy={"tma": 4}, latency=100, issue_cycles=1, variable_latency=True)
    >>> _ = g.add_op("qk", "gemm", busy={"tc": 64}, latency=80, issue_cycles=2)
    >>> _ = g.add_op("p", "alu", busy={"alu": 8})
    >>> _ = g.add_op("pv", "gemm", busy={"tc": 64}, latency=80, issue_cycles=2)
    >>> for a, b, c in (("k", "qk", "smem"), ("qk", "p", "register"), ("p", "pv", "register")):
    ...     _ = g.add_edge(a, b, carrier=c)
    >>> groups = (NS(index=0, ops=("k",)), NS(index=1, ops=("qk", "p")), NS(index=2, ops=("pv",)))
    >>> s = NS(warp_groups=groups, ii=100, start={"k": 0, "qk": 10, "p": 80, "pv": 150})
    >>> sorted(barrier_arrives(g, s).items())   # qk: ring + turn; p: publishes; pv: releases p + turn
    [('p', 1), ('pv', 2), ('qk', 2)]
    """
    group = {name: g.index for g in schedule.warp_groups for name in g.ops}
    start = schedule.start
    count: dict[str, int] = {}

    def add(name: str) -> None:
        count[name] = count.get(name, 0) + 1

    for op in graph.ops:
        if not op.variable_latency:
            continue
        readers: dict[int, list[str]] = {}
        for e in graph.out_edges(op.name):
            if e.carrier == "smem" and e.dst != op.name:
                readers.setdefault(group[e.dst], []).append(e.dst)
        for names in readers.values():
            add(max(names, key=lambda n: (start[n], n)))
    staged: dict[str, dict[int, list[str]]] = {}
    for e in graph.edges:
        if e.carrier != "register" or e.src == e.dst or group[e.src] == group[e.dst]:
            continue
        staged.setdefault(e.src, {}).setdefault(group[e.dst], []).append(e.dst)
    for src, groups in staged.items():
        add(src)
        for names in groups.values():
            add(max(names, key=lambda n: (start[n], n)))
    ii = max(1, int(schedule.ii))
    gemms = sorted((op.name for op in graph.ops if any(r.unit == "tc" for r in op.rrt)),
                   key=lambda n: (start[n] % ii, n))
    if len({group[n] for n in gemms}) > 1:
        for a, b in zip(gemms, gemms[1:] + gemms[:1], strict=True):
            if group[a] != group[b]:
                add(a)
    return count


def arrive_graph(graph: Graph, arrives: Mapping[str, int], cycles: float) -> Graph:
    """The graph with ``cycles`` of issue time added to an op per arrive made after it (the partition's
    ``bar.sync`` before the arrive): its warps wait that much longer before the group's next op, and a
    synchronous op's result is that much later.

    >>> from twill.ir.graph import Graph
    >>> g = Graph("t")
    >>> _ = g.add_op("a", "alu", busy={"alu": 8})
    >>> _ = g.add_op("m", "gemm", busy={"tc": 64}, latency=80, issue_cycles=2)
    >>> g2 = arrive_graph(g, {"a": 1, "m": 2}, 34)
    >>> (g2.op("a").issue_cycles, g2.op("a").latency), (g2.op("m").issue_cycles, g2.op("m").latency)
    ((42, 42), (70, 80))
    """

    def fix(op: Any) -> Any:
        extra = round(arrives.get(op.name, 0) * cycles)
        if extra <= 0:
            return op
        synchronous = op.issue_cycles >= op.busy_cycles
        issue = op.issue_cycles + extra
        return replace(op, issue_cycles=issue, completion=max(op.cycles, issue),
                       latency=op.latency + (extra if synchronous else 0))

    return graph.map_ops(fix)


def result_encodings(lowering: Any) -> dict[str, tuple[str, str]]:
    """Per graph op of a :class:`twill.frontend.Lowering`: ``(encoding, element)`` of its result's TTGIR
    type (the last TTGIR op of the op's chain: the value another warp group would receive); ops whose
    result is not a register tensor are left out."""
    out: dict[str, tuple[str, str]] = {}
    for name, members in lowering.members.items():
        results = members[-1].results if members else ()
        if results and results[0].type.kind == "tensor" and results[0].type.encoding:
            out[name] = (results[0].type.encoding, results[0].type.element)
    return out


def trip_terms(schedule: Any, graph: Graph, operands: Mapping[str, tuple[int, int, int, bool, str]],
               encodings: Mapping[str, tuple[str, str]], cm: CostModel, *, serialized: bool, trips: int,
               walks: Mapping[int, float] | None = None, components: Sequence[Sequence[int]] | None = None,
               overlap: float | None = None) -> dict[str, Any]:
    """The cycles per trip of the Gluon kernel of ``schedule``, one term at a time (each row adds to the
    one before; ``benchmarks/gluon_fa_grid_scores.py`` scores each):

    * ``ii``: the schedule's II in cycles;
    * ``simulated``: the schedule simulated on the loop's raw-cycle graph (:func:`simulated_trip_cycles`;
      each group in the schedule's order, TMA loads at ``cost.tma_latency``);
    * ``serialized``: with the GEMMs serialized when ptxas says so (:func:`serialized_gemm_graph`);
    * ``conflicts``: and the hand-offs' bank conflicts (:func:`conflicted_handoff_graph`);
    * ``signals``: and the signals between warp groups as the kernel's mbarriers make them
      (``handoff.mbarrier``, 75 cycles measured on the H200): a staging or ring slot freed by a reader on
      another group, and the Tensor Core turn, which the backend passes with an arrive after the GEMM's
      issue (after all its instructions when ptxas serialized it) and a wait before the next
      (:func:`twill.analysis.simulate.simulate` ``barrier_cycles``);
    * ``arrives``: and the partition barrier before each arrive (:func:`barrier_arrives`,
      :func:`arrive_graph`, ``handoff.named_barrier``);
    * ``sass``: and at least what the compiled kernel's warp groups take per trip, walked in its SASS
      (``walks``: :func:`twill.tune.sass_trip.trip_bounds` cycles by group; ``components``:
      :func:`twill.tune.sass_trip.coupled_groups`, whose walks add up,
      :func:`twill.tune.sass_trip.coupled_trip` with ``overlap``, default ``cost.sass_overlap``): the
      larger of ``arrives`` and the walk. This is the kernel's trip; without ``walks`` it is
      ``arrives``.

    ``sass_alone`` is the SASS walks' bound alone (0 without ``walks``); ``sass_over_simulated`` the walk
    over ``simulated`` instead of ``arrives`` (the walk sees a serialized pipeline's waits and every
    ``BAR.SYNC`` in the code itself; scored, not used: it loses the spilled kernel, whose ``arrives``
    prices the spills as serialization).

    ``conflicts_alone`` is the last without the serialization (each term's share in either order).
    Also ``arrive_counts`` (:func:`barrier_arrives`), ``handoffs`` (:class:`HandoffConflict` ``to_dict``
    of each staged value) and ``serialized_wgmma``.
    """
    tma = float(cm.machine.const("cost.tma_latency"))
    group = {name: g.index for g in schedule.warp_groups for name in g.ops}
    warps = {name: g.warps for g in schedule.warp_groups for name in g.ops}
    out: dict[str, Any] = {"ii": float(schedule.ii_cycles),
                           "simulated": simulated_trip_cycles(schedule, graph, trips, tma_latency=tma)}
    serial = serialized_gemm_graph(graph, operands, warps, cm) if serialized else graph
    out["serialized"] = simulated_trip_cycles(schedule, serial, trips, tma_latency=tma) if serialized \
        else out["simulated"]
    conflicted, found = conflicted_handoff_graph(serial, group, encodings, cm)
    out["conflicts"] = simulated_trip_cycles(schedule, conflicted, trips, tma_latency=tma) if any(
        h.store_extra for h in found) else out["serialized"]
    alone, _ = conflicted_handoff_graph(graph, group, encodings, cm)
    out["conflicts_alone"] = simulated_trip_cycles(schedule, alone, trips, tma_latency=tma) if any(
        h.store_extra for h in found) else out["simulated"]
    out["signals"] = simulated_trip_cycles(schedule, conflicted, trips, tma_latency=tma,
                                           barrier_cycles=float(cm.machine.const("handoff.mbarrier")))
    arrives = barrier_arrives(conflicted, schedule)
    fenced = arrive_graph(conflicted, arrives, float(cm.machine.const("handoff.named_barrier")))
    out["arrives"] = simulated_trip_cycles(schedule, fenced, trips, tma_latency=tma,
                                           barrier_cycles=float(cm.machine.const("handoff.mbarrier")))
    if walks:
        from twill.tune.sass_trip import coupled_trip

        k = float(cm.machine.const("cost.sass_overlap")) if overlap is None else float(overlap)
        comps = components if components is not None else [(g,) for g in walks]
        out["sass_alone"] = coupled_trip(walks, comps, overlap=k)
        out["sass"] = max(out["arrives"], out["sass_alone"])
        out["sass_over_simulated"] = max(out["simulated"], out["sass_alone"])
    else:
        out["sass_alone"] = 0.0
        out["sass"] = out["arrives"]
        out["sass_over_simulated"] = out["simulated"]
    out["arrive_counts"] = dict(sorted(arrives.items()))
    out["handoffs"] = [h.to_dict() for h in found]
    out["serialized_wgmma"] = bool(serialized)
    return out
