"""Memory-bound loops: pointer loads streamed from HBM, priced the way the SM and HBM serve them.

A loop whose loads are pointer loads (``tt.load``) of tiles no other CTA reads (a row softmax, a row
norm) runs at the rate HBM returns its bytes, and that rate depends on how many bytes each SM has in
flight: by Little's law ``rate = bytes in flight / latency``, and the latency grows as the rate nears
the HBM limit (queueing). Three things set the bytes in flight per SM (:func:`loop_streams`,
:func:`streaming_cycles`):

* the co-resident CTAs and their threads (``k x threads``);
* the bytes each thread loads per trip, times ptxas's unroll of the loop (read from the SASS: the
  compiled loop's ``LDG`` bytes per thread over the TTGIR loads' bytes per thread,
  :func:`twill.calibrate.regs.parse_sass_loop_memory`);
* the load groups: ptxas does not hoist a load above a store that may alias it, so a warp has one
  group (the loads up to the next ``STG``) in flight at a time.

The HBM rate at ``N`` bytes in flight per SM is measured (:func:`hbm_rate`; ``benchmarks/calibrate/
membound.cu``). Sibling loops that read the same row (a norm's reduction pass and its write pass) find
part of it still in L2 the second time, by how many bytes the resident CTAs bring into L2 in between
(:func:`l2_reuse_hit`, measured by the same microbenchmark); what hits does not come from HBM.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["LoopStreams", "compute_chain", "hbm_rate", "issue_per_trip", "kernel_cycles", "l2_reuse_hit",
           "loop_streams", "membound_available", "reuse_footprint", "reuse_hits", "streaming_cycles",
           "trip_cycles", "trip_parts", "unroll_factor"]

_KEYS = ("cost.hbm_load_latency", "cost.hbm_stream_bytes_per_cycle", "cost.hbm_queue_exponent",
         "cost.hbm_write_cost", "cost.l2_reuse_full_bytes", "cost.l2_reuse_none_bytes")

_THROUGH = frozenset({"tt.addptr", "tt.splat", "tt.broadcast", "tt.expand_dims", "tt.reshape",
                      "ttg.convert_layout"})
"""Ops a pointer tensor is traced back through to its base (:func:`loop_streams`)."""


def membound_available(machine: Any) -> bool:
    """Whether ``machine`` gives the constants of this module (Hopper's files do; others leave the term
    out)."""
    return all(k in machine.constants for k in _KEYS)


def hbm_rate(inflight_bytes: float, machine: Any, *, write_ratio: float = 0.0) -> float:
    """Bytes per cycle (``chip.clock_ghz`` cycles) one SM gets from HBM with ``inflight_bytes`` of loads
    in flight, every SM streaming.

    ``a / (1 + (a / B)^p)^(1/p)`` with ``a = N / L0`` (Little's law at the unloaded latency ``L0`` =
    ``cost.hbm_load_latency``), the limit ``B`` = ``cost.hbm_stream_bytes_per_cycle`` and the queueing
    exponent ``p`` = ``cost.hbm_queue_exponent``: latency-bound (``N / L0``) with few bytes in flight,
    bandwidth-bound (``B``) with many, and between them the latency grows as the queue fills (on the
    H200: 610 cycles unloaded, about 900 at 16 KB per SM, 3000 at 64 KB). Fitted to the all-SM
    ``LDG`` stream of ``benchmarks/calibrate/results/membound.json`` (mean |log error| 3.7 %).

    The same law written for the latency: ``L = L0 / (1 - rho^p)^(1/p)`` at the utilization ``rho`` of
    HBM. A stream that also writes ``write_ratio`` bytes per byte read (whose stores no warp waits for)
    fills HBM to ``rho = X (1 + w write_ratio) / B`` (``w`` = ``cost.hbm_write_cost``), so its reads
    get the law with ``B / (1 + w write_ratio)`` in place of ``B``.

    >>> from twill.ir.machine import load_machine
    >>> m = load_machine("h200")
    >>> a = 16384 / 610                 # 16 KB per SM in flight: 26.9 B/cycle at the unloaded latency
    >>> round(hbm_rate(16384, m), 2) == round(a / (1 + (a / 21.9) ** 2) ** 0.5, 2)
    True

    Raises
    ------
    ValueError
        ``inflight_bytes`` or ``write_ratio`` negative, or a constant not positive.
    """
    if inflight_bytes < 0 or write_ratio < 0:
        raise ValueError(f"bytes in flight and write_ratio must be >= 0, got {inflight_bytes}, {write_ratio}")
    lat = float(machine.const("cost.hbm_load_latency"))
    peak = float(machine.const("cost.hbm_stream_bytes_per_cycle"))
    peak /= 1.0 + float(machine.const("cost.hbm_write_cost")) * write_ratio
    p = float(machine.const("cost.hbm_queue_exponent"))
    if lat <= 0 or peak <= 0 or p <= 0:
        raise ValueError(f"cost.hbm_load_latency {lat}, cost.hbm_stream_bytes_per_cycle {peak} and "
                         f"cost.hbm_queue_exponent {p} must be > 0")
    a = inflight_bytes / lat
    return a / (1.0 + (a / peak) ** p) ** (1.0 / p)


def l2_reuse_hit(footprint_bytes: float, machine: Any) -> float:
    """Share of a re-read that L2 still holds, after the resident CTAs brought ``footprint_bytes`` of
    other lines into it since the first read: 1 up to ``cost.l2_reuse_full_bytes``, 0 from
    ``cost.l2_reuse_none_bytes``, linear between (measured: ``benchmarks/calibrate/membound.cu``'s rows
    read twice, with and without a store of each row between).

    >>> from twill.ir.machine import load_machine
    >>> m = load_machine("h200")
    >>> l2_reuse_hit(10e6, m), l2_reuse_hit(57e6, m), l2_reuse_hit(200e6, m)
    (1.0, 0.5, 0.0)

    Raises
    ------
    ValueError
        ``footprint_bytes`` negative, or the two bounds not increasing.
    """
    if footprint_bytes < 0:
        raise ValueError(f"footprint must be >= 0 bytes, got {footprint_bytes}")
    full = float(machine.const("cost.l2_reuse_full_bytes"))
    none = float(machine.const("cost.l2_reuse_none_bytes"))
    if not 0 <= full < none:
        raise ValueError(f"cost.l2_reuse_full_bytes {full} must be >= 0 and < "
                         f"cost.l2_reuse_none_bytes {none}")
    return min(1.0, max(0.0, (none - footprint_bytes) / (none - full)))


@dataclass(frozen=True)
class LoopStreams:
    """The pointer loads and stores of one loop trip of one CTA.

    Attributes
    ----------
    private_loads : tuple of (str, float, float)
        Per load no other CTA reads (:func:`twill.frontend.reuse.private_to_cta`): the key of its base
        pointer (the value its addresses start from outside the loop), its bytes per CTA and its bytes
        per thread (at least one element: a tile smaller than the CTA is loaded by every thread).
    shared_load_bytes : float
        Bytes per CTA of the loads other CTAs read too (L2 serves them).
    shared_thread_bytes : float
        The same per thread.
    store_bytes : float
        Bytes per CTA of the pointer stores (they go to HBM).
    other_memory : bool
        The loop has TMA copies or GEMMs: not a streaming loop of pointer loads.
    """

    private_loads: tuple[tuple[str, float, float], ...]
    shared_load_bytes: float
    shared_thread_bytes: float
    store_bytes: float
    other_memory: bool

    @property
    def streaming(self) -> bool:
        """A loop of pointer loads from HBM and nothing on the TMA or the Tensor Cores."""
        return bool(self.private_loads) and not self.other_memory

    @property
    def private_bytes(self) -> float:
        """Bytes per CTA per trip of the private loads."""
        return sum(b for _, b, _ in self.private_loads)

    def thread_bytes(self) -> float:
        """Bytes one thread loads per trip (private and shared loads), as the TTGIR has them."""
        return sum(t for _, _, t in self.private_loads) + self.shared_thread_bytes


def _root(value: Any, inside: set[int]) -> str:
    """The key of the value a pointer tensor's addresses start from outside the loop: traced back through
    the loop's pointer offsets (``tt.addptr``), a loop-carried pointer's init operand and layout / shape
    ops (also outside the loop: each loop splats the same base pointer again), to the scalar base (a
    row's ``x_ptr + row * stride``): two loops that read from the same base read the same row."""
    seen = 0
    while seen < 64:
        seen += 1
        owner = value.owner
        if owner is None:  # a block argument: a loop-carried pointer starts from the loop's init operand
            loop = value.block.parent if value.block is not None else None
            if loop is not None and loop.name == "scf.for" and value.index >= 1 and id(loop) in inside:
                value = loop.operands[3 + value.index - 1]
                continue
            return str(value.key)
        # shape ops anywhere (each loop splats the same base pointer again); offsets only inside the loop
        through = owner.name in _THROUGH and (owner.name != "tt.addptr" or id(owner) in inside)
        if not through or not owner.operands:
            return str(value.key)
        value = owner.operands[0]
    return str(value.key)


def loop_streams(lowering: Any, threads: int) -> LoopStreams:
    """The pointer loads and stores of the loop of ``lowering`` (:func:`twill.frontend.lower.lower_loop`)
    for a CTA of ``threads`` threads (see :class:`LoopStreams`).

    Raises
    ------
    ValueError
        ``threads`` < 1.
    """
    from twill.frontend.reuse import private_to_cta

    if threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    loop = lowering.loop
    ops = [op for op in loop.walk() if op is not loop]
    inside = {id(op) for op in ops} | {id(loop)}
    private: list[tuple[str, float, float]] = []
    shared = shared_thread = stores = 0.0
    other = False
    for op in ops:
        if op.name == "tt.load":
            t = op.results[0].type
            per_thread = max(t.nbytes / max(1, t.elements), t.nbytes / threads)
            if private_to_cta(op, lowering.module):
                private.append((_root(op.operands[0], inside), float(t.nbytes), per_thread))
            else:
                shared += t.nbytes
                shared_thread += per_thread
        elif op.name == "tt.store":
            stores += op.operands[1].type.nbytes
        elif op.name in ("tt.descriptor_load", "tt.descriptor_store", "ttng.warp_group_dot",
                         "ttng.tc_gen5_mma", "tt.dot"):
            other = True
    return LoopStreams(tuple(private), shared, shared_thread, stores, other)


def unroll_factor(sass_load_bytes: float, ttgir_thread_bytes: float) -> int:
    """Trips of the TTGIR loop per trip of the compiled loop: the compiled loop's ``LDG`` bytes per
    thread over the TTGIR loads' bytes per thread, rounded (1 when either is unknown or zero).

    >>> unroll_factor(8, 2)      # four LDG.E.U16 per compiled trip, one 2-byte element per TTGIR trip
    4
    >>> unroll_factor(16, 16), unroll_factor(0, 16)
    (1, 1)
    """
    if sass_load_bytes <= 0 or ttgir_thread_bytes <= 0:
        return 1
    return max(1, round(sass_load_bytes / ttgir_thread_bytes))


def reuse_footprint(loops: Sequence[LoopStreams], trips: Sequence[int], first: int, second: int,
                    resident_ctas: int, reread: str) -> float:
    """Bytes the ``resident_ctas`` CTAs of a wave bring into L2 between a CTA's read of a row in loop
    ``first`` and its re-read in loop ``second`` (the same base pointer ``reread``): per CTA the private
    loads of loops ``first`` .. ``second`` other than the re-read ones of the later loops, and the stores
    of loops ``first + 1`` .. ``second``, each times its trips; times ``resident_ctas`` (the CTAs run out
    of step, so the other CTAs move as many bytes in that time as this one).

    Raises
    ------
    ValueError
        The loop indices are not ``0 <= first < second < len(loops)``, or the lengths differ.
    """
    if len(loops) != len(trips):
        raise ValueError(f"{len(loops)} loops but {len(trips)} trip counts")
    if not 0 <= first < second < len(loops):
        raise ValueError(f"loops must satisfy 0 <= first < second < {len(loops)}, got {first}, {second}")
    per_cta = 0.0
    for i in range(first, second + 1):
        lp = loops[i]
        loads = sum(b for key, b, _ in lp.private_loads if i == first or key != reread)
        stores = lp.store_bytes if i > first else 0.0
        per_cta += trips[i] * (loads + stores)
    return resident_ctas * per_cta


def streaming_cycles(streams: LoopStreams, machine: Any, *, ctas_per_sm: int, threads: int,
                     sass_memory: tuple[int, int, int] | None,
                     hit: Mapping[str, float] | None = None,
                     body_instructions: float = 0.0) -> dict[str, float]:
    """Cycles per trip that the ``ctas_per_sm`` co-resident CTAs of a streaming loop take together
    (each makes one trip), at the rate their loads in flight return.

    A warp's compiled trip (``u`` TTGIR trips: ptxas's unroll, :func:`unroll_factor`) issues its loads
    in ``g`` groups (``sass_memory``: ``(LDG bytes, STG bytes, groups)`` per thread per compiled trip;
    without it ``u = g = 1``), waits one round trip for each, and issues its ``body_instructions``
    (at least one cycle each): ``T = g L + body_instructions``. A share ``h`` of the private loads
    (``hit``, per base pointer) L2 still holds and comes back after ``cost.lsu_latency``; the rest
    after the loaded HBM latency ``L0 / (1 - rho^p)^(1/p)`` (:func:`hbm_rate`'s law written for the
    latency; ``rho`` the HBM utilization, with the loop's stores counted at ``cost.hbm_write_cost``).
    The HBM rate ``X`` is where the warps' round trips and the queue agree: ``X = (1 - h) k u P / T(X)``
    (``P`` the private bytes of one CTA per TTGIR trip; Little's law with ``N = k u P / g`` bytes in
    flight, solved by bisection). The warps' chain per TTGIR trip is ``load_time = T / u``; the shared
    resources are HBM bandwidth, ``(R + w W) / B`` (``R`` = ``(1 - h) k P``, ``W`` the stores, which
    no warp waits for, ``w`` = ``cost.hbm_write_cost``: a stream that writes turns the bus around,
    ``B`` = ``cost.hbm_stream_bytes_per_cycle``), and the SM's L2 port for all the loop's loads and
    stores (``cost.l2_sm_bytes_per_cycle``, when the machine gives it).

    Returns ``{"cycles", "load_time", "bandwidth", "inflight_bytes", "rate", "latency", "unroll",
    "groups", "hbm_bytes", "store_bytes", "port", "hit"}`` (cycles and bytes per trip of the ``k``
    CTAs; ``cycles`` the longest of ``load_time``, ``bandwidth`` and ``port``).

    Raises
    ------
    ValueError
        ``ctas_per_sm`` or ``threads`` < 1.
    """
    if ctas_per_sm < 1 or threads < 1:
        raise ValueError(f"ctas_per_sm and threads must be >= 1, got {ctas_per_sm}, {threads}")
    hit = hit or {}
    loads, _, groups = sass_memory if sass_memory is not None else (0, 0, 0)
    u = unroll_factor(loads, streams.thread_bytes())
    g = max(1, groups) if sass_memory is not None else 1
    k = ctas_per_sm
    private = streams.private_bytes
    hbm = sum(b * (1.0 - hit.get(key, 0.0)) for key, b, _ in streams.private_loads)
    share = 0.0 if private <= 0 else 1.0 - hbm / private
    inflight = k * u * private / g
    peak = float(machine.const("cost.hbm_stream_bytes_per_cycle"))
    ratio = streams.store_bytes / hbm if hbm > 0 else 0.0
    limit = peak / (1.0 + float(machine.const("cost.hbm_write_cost")) * ratio)
    unloaded = float(machine.const("cost.hbm_load_latency"))
    p = float(machine.const("cost.hbm_queue_exponent"))
    l2 = float(machine.const("cost.lsu_latency"))

    def body(rate: float) -> float:  # a warp's compiled trip with HBM returning ``rate`` B/cycle to the SM
        rho = min(rate / limit, 1.0 - 1e-9)
        hbm_latency = unloaded / (1.0 - rho ** p) ** (1.0 / p)
        return g * (share * l2 + (1.0 - share) * hbm_latency) + body_instructions

    moved = (1.0 - share) * k * u * private  # HBM bytes of the k CTAs per compiled trip
    rate = 0.0
    if moved > 0:  # the rate at which the warps' round trips and HBM's queue agree (Little's law)
        low, high = 0.0, limit
        for _ in range(60):
            mid = 0.5 * (low + high)
            low, high = (mid, high) if moved / body(mid) > mid else (low, mid)
        rate = low
    latency = (body(rate) - body_instructions) / g
    load_time = body(rate) / u if inflight > 0 else 0.0
    reads, writes = k * hbm, k * streams.store_bytes
    port = 0.0
    if "cost.l2_sm_bytes_per_cycle" in machine.constants:
        port_bytes = k * (private + streams.shared_load_bytes + streams.store_bytes)
        port = port_bytes / float(machine.const("cost.l2_sm_bytes_per_cycle"))
    bandwidth = (reads + float(machine.const("cost.hbm_write_cost")) * writes) / peak
    cycles = max(load_time, bandwidth, port)
    return {"cycles": cycles, "load_time": load_time, "bandwidth": bandwidth, "inflight_bytes": inflight,
            "rate": rate, "latency": latency, "unroll": float(u), "groups": float(g), "hbm_bytes": reads,
            "store_bytes": writes, "port": port, "hit": share}


def issue_per_trip(issue_cycles: float, unroll: float) -> float:
    """One CTA's issue cycles per TTGIR trip: the compiled loop's (``issue_cycles``, counted per compiled
    trip) over ptxas's unroll."""
    return issue_cycles / max(1.0, unroll)


def trip_parts(*, compute: float, extra: float, stream: Mapping[str, float], ctas_per_sm: int,
               issue: float, units: Mapping[str, float]) -> tuple[float, dict[str, float]]:
    """One CTA's trip of a streaming loop with ``ctas_per_sm`` CTAs on the SM, in two parts:

    * its own chain, ``max(C + f, load_time)``: ``C`` its compute chain with the loads arrived
      (``compute``), ``f`` the per-trip extras (``extra``), ``load_time`` its warps' round trips to HBM
      (:func:`streaming_cycles`);
    * what the ``k`` CTAs' trips take of each shared resource of the SM: HBM bandwidth and the L2 port
      (``stream``), the issue slots (``k x issue``) and every unit (``k x units``, without ``dram`` and
      ``lsu``: the stream prices the loop's global loads and stores at the measured HBM rate and L2
      port, in place of the tile model's ``dram`` share and ``lsu`` estimate).

    A trip takes the longer of the chain and the busiest resource (:func:`trip_cycles`); a kernel of
    sibling streaming loops adds chains and resources loop by loop before taking it
    (:func:`kernel_cycles`).

    Raises
    ------
    ValueError
        ``ctas_per_sm`` < 1.
    """
    if ctas_per_sm < 1:
        raise ValueError(f"ctas_per_sm must be >= 1, got {ctas_per_sm}")
    k = ctas_per_sm
    shared = {"hbm": float(stream["bandwidth"]), "port": float(stream["port"]), "issue": k * issue}
    for unit, cycles in units.items():
        if unit not in ("dram", "lsu"):
            shared[unit] = k * cycles
    return max(compute + extra, float(stream["load_time"])), shared


def trip_cycles(chain: float, shared: Mapping[str, float]) -> float:
    """One CTA's cycles per trip from :func:`trip_parts`: the longer of its chain and the busiest shared
    resource.

    >>> trip_cycles(100.0, {"hbm": 1500.0, "issue": 200.0})
    1500.0
    """
    return float(max(chain, *shared.values()))


def kernel_cycles(loops: Sequence[tuple[int, float, Mapping[str, float]]]) -> float:
    """One CTA's cycles over sibling streaming loops, each ``(trips, chain, shared)`` of
    :func:`trip_parts`: ``max(sum of trips x chain, max over resources of sum of trips x use)``.

    The co-resident CTAs run out of step: while one is in its issue-heavy reduction loop another is in
    its store-heavy write loop, so the SM's resources are shared across the loops (each resource's
    cycles add up over a CTA's loops), while each CTA's own chain runs loop after loop. (Summing each
    loop's own bound instead charges a row softmax's first loop its issue slots and its second loop its
    HBM time, as if no CTA were ever in the other loop.)

    >>> kernel_cycles([(8, 100.0, {"hbm": 700.0, "issue": 900.0}),
    ...                (8, 100.0, {"hbm": 1300.0, "issue": 200.0})])
    16000.0
    """
    chain = sum(t * c for t, c, _ in loops)
    names = {name for _, _, shared in loops for name in shared}
    busiest = max((sum(t * shared.get(n, 0.0) for t, _, shared in loops) for n in names), default=0.0)
    return float(max(chain, busiest))


def reuse_hits(loops: Sequence[LoopStreams], trips: Sequence[int], resident_ctas: int,
               machine: Any) -> list[dict[str, float]]:
    """Per loop, the share of each private load (by base pointer) that L2 still holds because an earlier
    sibling loop read the same row: for a load of loop ``j`` whose base pointer a private load of an
    earlier loop ``i`` has too (the latest such ``i``), :func:`l2_reuse_hit` of
    :func:`reuse_footprint`; the first loop and loads read once get nothing.

    Raises
    ------
    ValueError
        ``resident_ctas`` < 1, or the lengths differ.
    """
    if resident_ctas < 1:
        raise ValueError(f"resident_ctas must be >= 1, got {resident_ctas}")
    if len(loops) != len(trips):
        raise ValueError(f"{len(loops)} loops but {len(trips)} trip counts")
    out: list[dict[str, float]] = []
    for j, lp in enumerate(loops):
        hits: dict[str, float] = {}
        for key, _, _ in lp.private_loads:
            earlier = [i for i in range(j) if any(k == key for k, _, _ in loops[i].private_loads)]
            if earlier:
                footprint = reuse_footprint(loops, trips, earlier[-1], j, resident_ctas, key)
                hits[key] = l2_reuse_hit(footprint, machine)
        out.append(hits)
    return out


def compute_chain(schedule: Any, num_stages: int, iterations: int) -> float:
    """Cycles per trip of Triton's schedule of one CTA (:func:`twill.tune.triton_model.triton_schedule`)
    simulated with every load, TMA or pointer, arriving at once: the loop's compute chain. (The
    simulation of :func:`twill.tune.triton_model.simulate_triton` with ``latency=1`` sets only the TMA
    loads; a pointer load would keep its HBM latency on the chain, which :func:`streaming_cycles`
    prices instead, with the loads of ptxas's unrolled trips and of every warp in flight together.)"""
    from twill.analysis.simulate import simulate
    from twill.tune.triton_model import trips_needed

    loads = {n: max(1, num_stages) for n in schedule.problem.names if schedule.problem.op(n).variable_latency}
    result = simulate(schedule, trips_needed(schedule, iterations), {"tma_load": 1, "load": 1}, seed=0,
                      buffers=loads, unit_order="greedy")
    return float(result.cycles_per_iteration)
