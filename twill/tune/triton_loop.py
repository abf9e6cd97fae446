"""One loop of the kernel Triton builds for a config, priced (:func:`price_loop`).

:mod:`twill.tune.worker` prices each sibling loop of a kernel (one for a GEMM or an attention forward,
two for a row softmax's max/sum and write passes) with :func:`price_loop` and adds them up: per CTA
``sum over loops of trips x cycles per trip``, each loop with its own compiled instructions and spills
(:func:`twill.calibrate.regs.parse_sass_loops`), its own simulated Triton schedule and hardware terms
(:mod:`twill.tune.triton_model`), and the same CTAs per SM.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["ITERATIONS", "LoopPrice", "price_loop"]

ITERATIONS = 16
"""Loop trips simulated per config (the steady state is read over the middle half; 16 and 48 give the
same cycles per trip on the FA forward configs, and 16 is 3x faster)."""


@dataclass
class LoopPrice:
    """What one loop costs per trip, and what the report says of it.

    Attributes
    ----------
    per_trip : float
        Cycles per trip of one CTA at the kernel's ``k`` CTAs per SM (:func:`twill.tune.triton_model.
        effective_cycles`).
    tail_per_trip : float
        The same at the last wave's occupancy (``tail_ctas_per_sm``).
    terms : object
        The hardware terms (:class:`twill.tune.triton_model.HardwareTerms`).
    model_graph : Graph
        The loop's graph as priced (Triton's wgmma layout, serialized when ptxas says so): what twill's own
        solve schedules.
    operands : dict
        :func:`twill.tune.triton_model.gemm_operands` of the loop.
    details : dict
        The JSON's per-loop details (simulated, compute and final cycles, layouts, terms ...; rounded for
        the report).
    stream : dict or None
        A streaming loop's parts as :mod:`twill.tune.membound` computed them, unrounded (``chain`` and
        ``shared``, ``tail_chain`` and ``tail_shared``: :func:`twill.tune.membound.trip_parts` at the
        kernel's and the last wave's occupancy, for :func:`twill.tune.membound.kernel_cycles`); None for
        any other loop.
    """

    per_trip: float
    tail_per_trip: float
    terms: Any
    model_graph: Any
    operands: dict[str, tuple[Any, ...]]
    details: dict[str, Any]
    stream: dict[str, Any] | None = None


def price_loop(lowering: Any, report: dict[str, Any], *, machine: Any, cm: Any, num_warps: int,
               num_stages: int, ctas_per_sm: int, tail_ctas_per_sm: int, loop_instructions: int | None,
               local_bytes: tuple[int, int] | None, loop_barriers: int = 0,
               sass_memory: tuple[int, int, int] | None = None,
               reuse_hit: dict[str, float] | None = None, streams: Any = None) -> LoopPrice:
    """Price one loop (``lowering``: :func:`twill.frontend.lower.lower_loop` of it) of a compiled config.

    Parameters
    ----------
    lowering : Lowering
        The loop, lowered from Triton's scheduled TTGIR.
    report : dict
        The config's ptxas report (:meth:`twill.calibrate.regs.RegReport.to_dict`): threads, spills,
        notes, stack frame, shared memory.
    machine, cm : Machine, CostModel
        The machine and its cost model.
    num_warps, num_stages : int
        The config's compile options.
    ctas_per_sm, tail_ctas_per_sm : int
        Co-resident CTAs in a full wave and in the last one.
    loop_instructions : int or None
        The loop's SASS instructions per warp per trip (None: estimated from the graph).
    local_bytes : tuple of (int, int) or None
        The loop's ``STL`` / ``LDL`` bytes per thread per trip.
    loop_barriers : int
        The loop's CTA-wide ``BAR.SYNC`` / ``BAR.RED`` per trip
        (:func:`twill.calibrate.regs.parse_sass_loop_barriers`): a serialized trip waits at each
        (:func:`twill.tune.triton_model.serial_chain_cycles`).
    sass_memory : tuple of (int, int, int) or None
        The compiled loop's ``LDG`` / ``STG`` bytes per thread per trip and its load groups
        (:func:`twill.calibrate.regs.parse_sass_loop_memory`), for a streaming loop's bytes in flight.
    reuse_hit : dict of str to float or None
        Per base pointer of a private load, the share L2 still holds from an earlier sibling loop
        (:func:`twill.tune.membound.reuse_hits`).
    streams : LoopStreams or None
        :func:`twill.tune.membound.loop_streams` of ``lowering`` when the caller has it already (it is
        computed here otherwise).

    A streaming loop (pointer loads from HBM, no TMA or GEMM; :attr:`twill.tune.membound.LoopStreams.
    streaming`) on a machine with the HBM constants is priced by :func:`twill.tune.membound.trip_cycles`
    instead of :func:`twill.tune.triton_model.effective_cycles`: its loads' latency is not on one CTA's
    chain trip by trip but shared by every warp's loads in flight (``details.membound``).
    """
    from twill.tune import triton_model as tm

    graph = lowering.graph
    operands = tm.gemm_operands(lowering)
    layouts = tm.gemm_layouts(lowering)
    serialized = tm.wgmma_serialized(report["ptxas_notes"], report["spills"])
    model_graph = tm.layout_gemms(graph, operands, layouts, cm)
    model_graph = (tm.serialize_gemms(model_graph, operands, num_warps, cm, layouts) if serialized
                   else model_graph)
    slots = tm.triton_slots(lowering)
    # Simulated with the loads at the kernel's L2 rate (the rate the throughput term prices them at);
    # at the microbenchmark's rate too, as the model had it (tune_scores.py scores both).
    one = tm.triton_schedule(tm.kernel_rate_loads(model_graph, cm), slots, num_warps, machine)
    single = tm.simulate_triton(one, num_stages, ITERATIONS)
    compute = tm.simulate_triton(one, num_stages, ITERATIONS, latency=1)  # loads arrive at once
    at_raw = tm.triton_schedule(model_graph, slots, num_warps, machine)
    raw_single = tm.simulate_triton(at_raw, num_stages, ITERATIONS)
    raw_compute = tm.simulate_triton(at_raw, num_stages, ITERATIONS, latency=1)
    local = local_bytes or (0, 0)
    terms = tm.hardware_terms(model_graph, operands, num_warps, cm, loop_instructions=loop_instructions,
                              num_stages=num_stages, layouts=layouts, local_bytes_per_thread=sum(local),
                              threads=int(report["threads"]),
                              stack_bytes_per_thread=int(report.get("stack_frame_bytes") or 0),
                              smem_bytes=int(report["shared_bytes"]), ctas_per_sm=ctas_per_sm,
                              serialized=serialized, loop_barriers=loop_barriers)
    per_trip = tm.effective_cycles(single.cycles_per_iteration, terms, ctas_per_sm,
                                   compute.cycles_per_iteration)
    tail_trip = tm.effective_cycles(single.cycles_per_iteration, terms, tail_ctas_per_sm,
                                    compute.cycles_per_iteration)
    stream = _streaming(lowering, one, machine, num_stages=num_stages, threads=int(report["threads"]),
                        terms=terms, ctas=(ctas_per_sm, tail_ctas_per_sm), sass_memory=sass_memory,
                        reuse_hit=reuse_hit, streams=streams)
    if stream is not None:
        per_trip, tail_trip = stream["cycles_per_trip"], stream["tail_cycles_per_trip"]
    details = {
        "loop_sass_instructions": loop_instructions,
        "triton_pipelined": slots.pipelined, "triton_stages": slots.stages, "wgmma_serialized": serialized,
        "model_register_demand": tm.register_demand(one, single, ITERATIONS),
        "simulated_cycles_per_trip": round(single.cycles_per_iteration, 1),
        "compute_cycles_per_trip": round(compute.cycles_per_iteration, 1),
        "raw_rate_cycles_per_trip": [round(raw_single.cycles_per_iteration, 1),
                                     round(raw_compute.cycles_per_iteration, 1)],
        "tail_ctas_per_sm": tail_ctas_per_sm, "tail_cycles_per_trip": round(tail_trip, 1),
        "gemm_layouts": {n: list(v) for n, v in sorted(layouts.items())},
        "loop_local_bytes": list(local), "stack_frame_bytes": report.get("stack_frame_bytes"),
        "loop_barriers": loop_barriers,
        "serial_gemm_chains_m_split": round(tm.serial_gemm_chains(
            tm.serialize_gemms(model_graph, operands, num_warps, cm), cm), 1) if serialized else 0.0,
        "default_gemms": tm.default_gemm_parts(
            tm.serialize_gemms(graph, operands, num_warps, cm) if serialized else graph, operands, num_warps,
            cm),
        "cycles_per_trip": round(per_trip, 1), "terms": terms.to_dict()}
    if stream is not None:
        details["membound"] = {k: round(v, 3) if isinstance(v, float) else (
            {n: round(c, 1) for n, c in v.items()} if isinstance(v, dict) else v) for k, v in stream.items()}
    return LoopPrice(per_trip, tail_trip, terms, model_graph, operands, details, stream)


def _streaming(lowering: Any, schedule: Any, machine: Any, *, num_stages: int, threads: int, terms: Any,
               ctas: tuple[int, int], sass_memory: tuple[int, int, int] | None,
               reuse_hit: dict[str, float] | None, streams: Any = None) -> dict[str, Any] | None:
    """A streaming loop's cycles per trip at the kernel's and the last wave's occupancy
    (:mod:`twill.tune.membound`), or None when the loop is not one or the machine lacks the constants."""
    from twill.tune import membound as mb

    if not mb.membound_available(machine):
        return None
    streams = streams if streams is not None else mb.loop_streams(lowering, threads)
    if not streams.streaming:
        return None
    compute = mb.compute_chain(schedule, num_stages, ITERATIONS)
    extra = terms.fixed + terms.stretch
    out: dict[str, Any] = {"compute_cycles_per_trip": compute}
    for name, k in (("", ctas[0]), ("tail_", ctas[1])):
        m = mb.streaming_cycles(streams, machine, ctas_per_sm=k, threads=threads, sass_memory=sass_memory,
                                hit=reuse_hit, body_instructions=terms.instructions_per_warp)
        issue = mb.issue_per_trip(terms.issue, m["unroll"])
        chain, shared = mb.trip_parts(compute=compute, extra=extra, stream=m, ctas_per_sm=k, issue=issue,
                                      units=terms.shared_units)
        out[f"{name}cycles_per_trip"] = mb.trip_cycles(chain, shared)
        out[f"{name}chain"] = chain
        out[f"{name}shared"] = shared
        if not name:
            out.update({**m, "issue_per_trip": issue})
    return out
