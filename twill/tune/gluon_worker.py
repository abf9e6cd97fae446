"""One config of ``twill tune --backend gluon``: solve twill's schedule for the config, generate the Gluon
kernel that executes it (:func:`twill.codegen.gluon.generate`, compiled for the machine's target on the
CPU) and predict its time.

Feasibility comes from the compiled Gluon kernel, not from the model: the shared memory Triton allocates
for it (``metadata.shared``), the registers ptxas gives every thread (the kernel-wide cap of a
warp-specialized kernel, the partitions' ``setmaxnreg`` budgets within it) and its spills. The time is
the schedule's, since the Gluon kernel issues each partition's ops in the schedule's order, trip by trip:

* one trip of the kernel takes ``T`` cycles: the schedule simulated on the loop's raw-cycle graph with the
  costs the compiled kernel adds: a serialized wgmma pipeline when ptxas reports one, the bank
  conflicts of the hand-offs through the backend's unswizzled staging buffers, its mbarrier signals
  between warp groups and the partition barrier before each arrive
  (:func:`twill.tune.gluon_terms.trip_terms`, the ``arrives`` row), and at least what each warp group
  takes per trip on its own in the compiled SASS, the walks of groups that hand registers to each other
  added (:func:`sass_walks`, the ``sass`` row: ``benchmarks/results/tune_scores.md`` scores each);
* per CTA: ``trips x T`` cycles, plus the prologue's ``(stages - 1) x T`` and the drain's ``L - II``
  (the epilogue trips end ``L - II`` after the last start), plus one TMA round trip in and one out
  (``cost.tma_latency``: the first tile's load, the last store), as the Triton path charges;
* ``k`` co-resident CTAs (from the compiled registers, threads and shared memory,
  :meth:`twill.ir.costmodel.CostModel.ctas_per_sm`) share the SM's units: a trip of each takes at least
  ``k x ResMII`` cycles of the busiest unit, so the cycles per trip are ``max(T, k x ResMII)``;
* ``waves = ceil(ctas / (sms x k))``, time ``waves x per-CTA cycles / clock``
  (:func:`twill.tune.worker.predict_from_parts`).

A config the Gluon backend cannot lower comes back with ``fits = False``, ``error = "codegen"`` and the
:class:`~twill.codegen.gluon.CodegenError`'s message as its reason; one it lowers but that does not fit
the machine, with the resource and both numbers.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import subprocess
import warnings
from pathlib import Path
from typing import Any

__all__ = ["gluon_folder", "gluon_prediction", "sass_walks", "tune_gluon"]


def gluon_folder(task: Any) -> Path:
    """Where the config's generated kernel is written: ``<cache>/gluon/<hash of the config>`` (a folder of
    the system's temporary directory without a cache)."""
    import tempfile

    blob = json.dumps({"kernel": task.kernel, "machine": task.machine, "constexprs": task.constexprs,
                       "w": task.num_warps, "s": task.num_stages, "problem": task.problem}, sort_keys=True,
                      default=str)
    key = hashlib.sha256(blob.encode()).hexdigest()[:24]
    root = Path(task.cache_dir) if task.cache_dir else Path(tempfile.gettempdir()) / "twill-tune"
    return root / "gluon" / key


def gluon_prediction(*, ii_cycles: float, drain_cycles: float, stages: int, res_mii_cycles: float,
                     ctas_per_sm: int, trips: int, ctas: int, sms: int, clock_ghz: float, edge: float,
                     flops: float) -> dict[str, float]:
    """The Gluon kernel's time from its schedule (see the module docstring): ``ii_cycles`` the cycles of one
    trip (``T``: :func:`twill.tune.gluon_terms.trip_terms`, or the schedule's II in cycles), ``drain_cycles``
    ``(L - II)`` in cycles.

    >>> r = gluon_prediction(ii_cycles=1000, drain_cycles=500, stages=2, res_mii_cycles=600,
    ...                      ctas_per_sm=2, trips=10, ctas=264, sms=132, clock_ghz=1.0, edge=0, flops=1e9)
    >>> r["cycles_per_trip"], r["per_cta_cycles"], r["waves"]    # max(1000, 2 x 600); 1200 + 10 x 1200 + 500
    (1200, 13700, 1)

    The last wave runs at its own occupancy (:func:`twill.tune.triton_model.tail_ctas_per_sm`): 64 CTAs on
    132 SMs run one per SM, each trip ``max(1000, 1 x 600)``, so the kernel takes 11 x 1000 + 500 cycles.

    >>> r = gluon_prediction(ii_cycles=1000, drain_cycles=500, stages=2, res_mii_cycles=600,
    ...                      ctas_per_sm=2, trips=10, ctas=64, sms=132, clock_ghz=1.0, edge=0, flops=1e9)
    >>> r["tail_ctas_per_sm"], r["tail_cycles_per_trip"], round(r["ms"] * 1e6)    # ns at 1 GHz = cycles
    (1, 1000, 11500)
    """
    from twill.tune.triton_model import tail_ctas_per_sm
    from twill.tune.worker import predict_from_parts

    per_trip = max(ii_cycles, ctas_per_sm * res_mii_cycles)
    # the last wave's CTAs share an SM with fewer others (a grid of fewer CTAs than SMs runs one per SM)
    tail_k = tail_ctas_per_sm(ctas, sms, ctas_per_sm)
    tail_trip = max(ii_cycles, tail_k * res_mii_cycles)
    pred = predict_from_parts(per_trip_cycles=per_trip, trips=trips + stages - 1, ctas=ctas,
                              ctas_per_sm=ctas_per_sm, sms=sms, clock_ghz=clock_ghz, prologue=edge,
                              epilogue=max(0.0, drain_cycles) + edge, flops=flops,
                              tail_per_trip_cycles=tail_trip)
    return {**pred, "cycles_per_trip": per_trip, "tail_ctas_per_sm": tail_k,
            "tail_cycles_per_trip": tail_trip}


def sass_walks(kernel: Any, schedule: Any, graph: Any, machine: Any, details: dict[str, Any]
               ) -> tuple[dict[int, float] | None, list[tuple[int, ...]] | None]:
    """Each warp group's cycles per trip walked in the compiled kernel's SASS
    (:func:`twill.tune.sass_trip.trip_bounds`) and the groups whose walks add up
    (:func:`twill.tune.sass_trip.coupled_groups`); ``(None, None)`` when the kernel was not compiled or
    nvdisasm fails, which ``details["sass_walk"]`` then says (the trip is priced without the walk)."""
    from twill.tune.sass_trip import coupled_groups, disassemble, latencies_from_machine, trip_bounds

    compiled = getattr(kernel, "compiled", None)
    if compiled is None or "cubin" not in getattr(compiled, "asm", {}):
        details["sass_walk"] = "not walked: no compiled cubin"
        return None, None
    try:
        sass = disassemble(compiled.asm["cubin"])
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        details["sass_walk"] = f"not walked: {exc}"
        return None, None
    parts = [{"position": p.position, "group": p.group, "warps": p.warps} for p in kernel.report.partitions]
    bounds = trip_bounds(sass, kernel.source, parts, latencies_from_machine(machine))
    details["sass_walk"] = {str(g): b for g, b in sorted(bounds.items())}
    missing = sorted(p["group"] for p in parts if p["group"] not in bounds)
    if missing:   # a partition without a steady loop in the SASS (none has on the FA / GEMM kernels)
        details["sass_walk_missing"] = (f"no steady loop found in the SASS for group(s) {missing}: "
                                        "their trips are priced by the schedule's terms alone")
    if not bounds:
        return None, None
    return {g: b["cycles"] for g, b in bounds.items()}, coupled_groups(graph, schedule)


def tune_gluon(task: Any, spec: Any, machine: Any, *, ctas: int, trips: int, flops: float,
               signature: dict[str, str], result: Any, flops_expression: str = "") -> dict[str, Any]:
    """Solve, generate, compile and predict one config on the Gluon backend.

    Parameters
    ----------
    task : twill.tune.worker.Task
        The config.
    spec : KernelSpec
        The kernel as loaded (its ``TWILL_KERNELS`` entry).
    machine : Machine
        The machine.
    ctas, trips, flops : int, int, float
        ``TWILL_TUNE``'s expressions for the config.
    signature : dict
        The descriptor types of the config (:meth:`twill.tune.grid.TuneProblem.signature`).
    result : callable
        ``result(task, **fields)`` -> the plain-data result (:mod:`twill.tune.worker`'s shape).
    flops_expression : str
        ``TWILL_TUNE``'s ``flops`` expression, named by the note of a prediction above the Tensor Core peak
        (:mod:`twill.tune.peak`).

    Returns
    -------
    dict
        The result; ``details`` holds the compiled resources, the schedule's cycles and the folder of
        the generated kernel (``gluon_kernel``, which ``--measure`` launches).
    """
    from twill.codegen.gluon import CodegenError, generate
    from twill.errors import FrontendError, InfeasibleError, ResourceError, SolverError, TwillError
    from twill.frontend.compile import compile_to_ttgir, target_for
    from twill.frontend.lower import lower_loop
    from twill.frontend.ttgir import parse_ttgir
    from twill.ir.costmodel import CostModel
    from twill.search import schedule as solve
    from twill.tune.gluon_terms import result_encodings, trip_terms
    from twill.tune.peak import gemm_flops
    from twill.tune.triton_model import gemm_operands, wgmma_serialized
    from twill.tune.worker import peak_note, top_level_loops, why_not_proven

    config = dataclasses.replace(spec, signature={**spec.signature, **signature},
                                 constexprs={**spec.constexprs, **task.constexprs},
                                 num_warps=task.num_warps, num_stages=task.num_stages)
    details: dict[str, Any] = {"ctas": ctas, "trips": trips, "flops": flops, "backend": "gluon"}
    try:
        snaps = compile_to_ttgir(config, target=target_for(machine))
    except FrontendError as exc:
        return result(task, reason=f"Triton rejects this config: {exc}", error="compile", details=details)
    try:  # a FrontendError here is twill's reading of the TTGIR (two loops, ...), not Triton's refusal
        module = parse_ttgir(snaps.pre_swp)
        loops = top_level_loops(module)
        if len(loops) > 1:
            return result(task, reason=(
                f"the Gluon backend generates kernels of one loop; {spec.name!r} has {len(loops)} sibling "
                f"loops (TTGIR lines {', '.join(str(lp.line) for lp in loops)}): tune it with --backend "
                "triton, which prices every loop"), error="model", details=details)
        lowering = lower_loop(module, machine, name=spec.name)
        graph = lowering.graph
    except TwillError as exc:
        return result(task, reason=f"twill cannot model this loop: {exc}", error="model", details=details)
    try:  # the solver's warnings (a heuristic answer at the time limit) go into the result, not the terminal
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            sched = solve(graph, machine, prefetch=max(0, task.num_stages - 1), time_limit=task.time_limit)
    except (InfeasibleError, ResourceError, SolverError) as exc:
        return result(task, reason=f"twill: no schedule for this config ({str(exc)[:300]})", details=details)
    summary = {"strategy": sched.strategy, "ii": sched.ii, "ii_cycles": round(sched.ii_cycles, 1),
               "length": sched.length, "stages": sched.stages,
               "proven_optimal": sched.certificate.proven_optimal,
               "not_proven": None if sched.certificate.proven_optimal else why_not_proven(sched, task),
               "warp_groups": [{"index": g.index, "ops": list(g.ops), "warps": g.warps,
                                "registers": g.registers, "role": g.role} for g in sched.warp_groups],
               "notes": [f"twill: {w.message}" for w in caught]}
    folder = gluon_folder(task)
    try:
        kernel = generate(sched, config, machine, folder)
    except CodegenError as exc:
        return result(task, reason=f"Gluon codegen: the Gluon backend cannot lower this config: {exc}",
                      error="codegen",
                      schedule=summary, details=details)
    report = kernel.report
    threads, regs, shared = report.threads, report.registers_ptxas, report.shared_compiled
    spill = report.spill_store_bytes + report.spill_load_bytes
    details.update({"registers": regs, "threads": threads, "shared_bytes": shared,
                    "spills": int(spill > 0), "spill_bytes": spill, "gluon_kernel": os.fspath(folder),
                    "gluon_num_warps": report.num_warps})
    cm = CostModel(machine)
    file = machine.register_file
    if regs * threads > file:
        return result(task, reason=f"registers: the compiled Gluon kernel has {regs} per thread x {threads} "
                                   f"threads = {regs * threads} > the {file}-register file of an SM",
                      schedule=summary, details=details)
    k = cm.ctas_per_sm(threads, regs, shared)
    details["ctas_per_sm"] = k
    if k < 1:
        return result(task, reason=f"shared memory: the compiled Gluon kernel allocates {shared} B per CTA "
                                   f"(+ {int(machine.const('chip.smem_reserved_per_cta'))} B reserved), more "
                                   f"than the {int(machine.const('chip.smem_per_sm'))} B of an SM",
                      schedule=summary, details=details)
    cpu = sched.problem.cycles_per_unit
    walks, components = sass_walks(kernel, sched, graph, machine, details)
    terms = trip_terms(sched, graph, gemm_operands(lowering), result_encodings(lowering), cm,
                       serialized=wgmma_serialized(report.not_kept, spill > 0), trips=trips,
                       walks=walks, components=components)
    details["trip_terms"] = terms
    pred = gluon_prediction(ii_cycles=terms["sass"], drain_cycles=(sched.length - sched.ii) * cpu,
                            stages=sched.stages,
                            res_mii_cycles=float(sched.bounds_cycles.get("res_mii", 0.0)), ctas_per_sm=k,
                            trips=trips, ctas=ctas, sms=int(machine.const("chip.sms")),
                            clock_ghz=float(machine.const("chip.clock_ghz")),
                            edge=float(machine.const("cost.tma_latency")), flops=flops)
    details.update({"cycles_per_trip": round(pred["cycles_per_trip"], 1), "waves": pred["waves"],
                    "per_cta_cycles": round(pred["per_cta_cycles"], 1),
                    "tail_ctas_per_sm": pred["tail_ctas_per_sm"],
                    "tail_cycles_per_trip": round(pred["tail_cycles_per_trip"], 1)})
    if spill:
        details["note"] = (f"ptxas spills {spill} B (priced as a serialized wgmma pipeline; the local-memory "
                           "traffic itself is not priced)")
    ops = gemm_operands(lowering)
    peak_note(details, machine, [v[4] for v in ops.values()], gemm_flops(ops, trips, ctas), flops_expression,
              pred["tflops"])
    return result(task, fits=True, predicted_ms=pred["ms"], predicted_tflops=pred["tflops"],
                  schedule=summary, details=details)

