"""One config of a tuning sweep: compile on the CPU, check it fits, solve, predict its time.

:func:`tune_config` takes a :class:`Task` (plain data, so a process pool or a Ray task can carry it) and
returns a plain-data result; a config that Triton rejects or that cannot run comes back with
``fits = False`` and the reason, never as an exception (Ctrl-C excepted).

For ``backend = "triton"`` the kernel that runs is the one Triton builds for the config: its own
software pipeline (``loop.stage`` / ``loop.cluster``) in one instruction stream of ``num_warps`` warps
(Triton 3.6 does not warp-specialize these loops on sm_90). So the predicted time is that schedule,
simulated (:mod:`twill.tune.triton_model`), with the registers, spills and shared memory ptxas and Triton
report for the config, the co-resident CTAs they allow, and the costs the tile model leaves out (issue
slots counted in the compiled loop's SASS, wgmma operand reads, barrier waits). twill's own schedule for
the config (software pipelining with Triton's ``num_stages`` buffers, ``strategy="swp"``, solved within
``time_limit``) is reported beside it with the time it would give.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from twill.errors import FrontendError, InfeasibleError, ResourceError, SolverError, TwillError
from twill.tune.triton_loop import ITERATIONS

__all__ = ["ITERATIONS", "Task", "default_cache_dir", "peak_note", "predict_from_parts", "top_level_loops",
           "trips_mismatch", "tune_config", "why_not_proven"]

CACHE_VERSION = 6
"""Bumped when what the compile cache holds changes (2: the main-loop SASS count skips retry paths; 3: the
main loop's local-memory bytes; 4: every sibling loop's SASS count and local bytes; 5: the CTA-wide
barriers of the main loop and of every sibling loop; 6: every sibling loop's LDG / STG bytes and load
groups)."""
SOLVE_CACHE_VERSION = 1
"""Bumped when what a cached twill solve holds changes (``solve-*.json`` beside the compiles; the key also
holds the graph, the machine's constants, the prefetch, the time limit and a hash of twill's source)."""


@dataclass(frozen=True)
class Task:
    """Plain-data description of one config to tune (picklable).

    Attributes
    ----------
    kernel : str
        ``FILE.py[::KERNEL]``.
    machine : str
        Machine name or TOML path.
    constexprs : dict
        Constexpr values of the config (all of them).
    num_warps, num_stages : int
        Compile options.
    problem : dict
        Problem sizes (``TWILL_TUNE`` defaults with the command line's overrides).
    time_limit : float
        Seconds for twill's solve of this config.
    backend : str
        ``"triton"`` or ``"gluon"`` (:mod:`twill.tune.gluon_worker`).
    cache_dir : str or None
        Folder of the compile cache (None: no cache).
    index : int
        Position in the grid.
    """

    kernel: str
    machine: str
    constexprs: dict[str, Any]
    num_warps: int
    num_stages: int
    problem: dict[str, int] = field(default_factory=dict)
    time_limit: float = 5.0
    backend: str = "triton"
    cache_dir: str | None = None
    index: int = 0


def default_cache_dir() -> str:
    """``$TWILL_CACHE_DIR/tune`` or ``~/.cache/twill/tune``."""
    root = os.environ.get("TWILL_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "twill")
    return os.path.join(root, "tune")


@functools.lru_cache(maxsize=8)
def _kernel(kernel: str) -> tuple[Any, Any]:
    from twill.frontend.compile import load_kernel
    from twill.tune.grid import load_tune_problem

    spec = load_kernel(kernel)
    return spec, load_tune_problem(spec.fn.__globals__.get("TWILL_TUNE"), spec.name, source=spec.source)


def _cache_key(task: Task, signature: dict[str, str]) -> str:
    import triton

    import twill

    text = Path(task.kernel.partition("::")[0]).read_text(encoding="utf-8")
    blob = json.dumps({"cache": CACHE_VERSION, "file": text, "kernel": task.kernel.partition("::")[2],
                       "constexprs": task.constexprs,
                       "signature": signature, "w": task.num_warps, "s": task.num_stages,
                       "machine": task.machine, "triton": triton.__version__,
                       "twill": getattr(twill, "__version__", "")}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def _compile(task: Task, spec: Any, signature: dict[str, str], target: str) -> dict[str, Any]:
    """ptxas report and TTGIR snapshots of the config, from the cache when there."""
    from twill.calibrate.regs import compile_registers
    from twill.frontend.compile import compile_to_ttgir

    path = None
    if task.cache_dir:
        path = Path(task.cache_dir) / f"{_cache_key(task, signature)}.json"
        if path.is_file():
            try:
                return {**json.loads(path.read_text(encoding="utf-8")), "cached": True}
            except (OSError, ValueError):
                pass  # a torn cache file: compile again and overwrite it
    report = compile_registers(spec, target=target, num_warps=task.num_warps, num_stages=task.num_stages,
                               constexprs=task.constexprs, signature=signature, sass=True)
    snaps = compile_to_ttgir(spec, target=target, signature={**spec.signature, **signature},
                             constexprs=task.constexprs, num_warps=task.num_warps,
                             num_stages=task.num_stages)
    data = {"report": report.to_dict(), "scheduled": snaps.scheduled}
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data), encoding="utf-8")
        os.replace(tmp, path)
    return {**data, "cached": False}


def _result(task: Task, **fields: Any) -> dict[str, Any]:
    out = {"index": task.index, "constexprs": dict(task.constexprs), "num_warps": task.num_warps,
           "num_stages": task.num_stages, "fits": False, "reason": None, "predicted_ms": None,
           "predicted_tflops": None, "schedule": None, "details": {}, "error": None}
    out.update(fields)
    return out


def _threads_per_cta(num_warps: int, machine: Any) -> str | None:
    """Why ``num_warps`` warps cannot be one CTA on ``machine`` (``chip.max_threads_per_cta``, 1024 on
    Hopper and Blackwell), or None (also when the machine file does not give the limit)."""
    if "chip.max_threads_per_cta" not in machine.constants:
        return None
    limit = int(machine.const("chip.max_threads_per_cta"))
    threads = 32 * num_warps
    if threads <= limit:
        return None
    return (f"threads: num_warps {num_warps} is {threads} threads per CTA, more than the {limit} a CTA may "
            f"have on {machine.name} (chip.max_threads_per_cta: num_warps <= {limit // 32})")


def _fits(report: dict[str, Any], machine: Any, cm: Any) -> tuple[str | None, int]:
    """Why the compiled config cannot run on ``machine`` (None if it can), and its CTAs per SM.

    The reason names the resource and both numbers: shared memory Triton allocates against
    ``memory.smem_per_cta`` (and, with the reserved 1 KB, ``chip.smem_per_sm``), registers per thread x
    threads against the register file, threads against ``chip.max_threads_per_sm``.
    """
    const = machine.const
    threads = int(report["threads"])
    shared = int(report["shared_bytes"])
    regs = int(report["registers"])
    limit = int(const("memory.smem_per_cta"))
    if shared > limit:
        return (f"shared memory: Triton allocates {shared} B per CTA, more than the {limit} B a CTA may use "
                f"on {machine.name} (memory.smem_per_cta; {shared - limit} B too many)"), 0
    file = machine.register_file
    if regs * threads > file:
        return (f"registers: {regs} per thread x {threads} threads = {regs * threads} > the {file}-register "
                f"file of an SM"), 0
    max_threads = int(const("chip.max_threads_per_sm"))
    if threads > max_threads:
        return f"threads: {threads} per CTA > {max_threads} per SM", 0
    k = cm.ctas_per_sm(threads, regs, shared)
    if k < 1:
        per_sm = int(const("chip.smem_per_sm"))
        reserved = int(const("chip.smem_reserved_per_cta"))
        return (f"shared memory: {shared} B + {reserved} B reserved per CTA > the {per_sm} B of an SM "
                f"(chip.smem_per_sm)"), 0
    return None, k


def predict_from_parts(*, per_trip_cycles: float, trips: int, ctas: int, ctas_per_sm: int, sms: int,
                       clock_ghz: float, prologue: float, epilogue: float, flops: float,
                       tail_per_trip_cycles: float | None = None) -> dict[str, float]:
    """Kernel time from one CTA's cycles per trip (already shared with the co-resident CTAs).

    ``waves = ceil(ctas / (sms * ctas_per_sm))``; per CTA ``prologue + trips * per_trip_cycles +
    epilogue`` cycles; time ``waves * per_cta / clock``; TFLOP/s ``flops / time``. With
    ``tail_per_trip_cycles`` (a CTA's trip at the last wave's occupancy,
    :func:`twill.tune.triton_model.tail_ctas_per_sm`) the last wave takes ``prologue + trips *
    tail_per_trip_cycles + epilogue`` instead.

    >>> r = predict_from_parts(per_trip_cycles=1000, trips=128, ctas=264, ctas_per_sm=1, sms=132,
    ...                        clock_ghz=1.6, prologue=0, epilogue=0, flops=1e12)
    >>> r["waves"], round(r["ms"], 4)
    (2, 0.16)
    """
    from twill.tune.triton_model import waves

    w = waves(ctas, sms, ctas_per_sm)
    per_cta = prologue + trips * per_trip_cycles + epilogue
    tail = per_cta if tail_per_trip_cycles is None else prologue + trips * tail_per_trip_cycles + epilogue
    ms = ((w - 1) * per_cta + tail) / (clock_ghz * 1e9) * 1e3
    return {"waves": w, "per_cta_cycles": per_cta, "ms": ms, "tflops": flops / (ms * 1e-3) / 1e12}


def _twill_schedule(graph: Any, machine: Any, task: Task) -> tuple[Any, list[str]]:
    """twill's schedule with Triton's ``num_stages`` buffers (fewer if twill's ring needs more SMEM)."""
    from twill.search import schedule

    notes: list[str] = []
    prefetch = max(0, task.num_stages - 1)
    deadline = time.monotonic() + task.time_limit
    while True:
        left = max(0.5, deadline - time.monotonic())
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                sched = schedule(graph, machine, strategy="swp", prefetch=prefetch, time_limit=left)
            notes.extend(f"twill: {w.message}" for w in caught)
            return sched, notes
        except ResourceError as exc:
            if prefetch == 0:
                notes.append(f"twill: no schedule fits ({exc})")
                return None, notes
            notes.append(f"twill: prefetch {prefetch} does not fit ({str(exc)[:160]}); tried {prefetch - 1}")
            prefetch -= 1
        except InfeasibleError as exc:
            notes.append(f"twill: no schedule within {task.time_limit:g} s ({str(exc)[:200]})")
            return None, notes
        except SolverError as exc:  # a backend that failed: the prediction (Triton's schedule) stands
            notes.append(f"twill: solver failed ({type(exc).__name__}: {str(exc)[:200]})")
            return None, notes


@functools.lru_cache(maxsize=1)
def _code_hash() -> str:
    """A hash of twill's own source files: a cached solve is only reused by the code that made it."""
    import twill

    digest = hashlib.sha256()
    root = Path(twill.__file__).parent
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _solve_key(graph: Any, machine: Any, task: Task) -> str:
    blob = json.dumps({"solve": SOLVE_CACHE_VERSION, "graph": graph.to_dict(),
                       "machine": {k: c.value for k, c in sorted(machine.constants.items())},
                       "prefetch": max(0, task.num_stages - 1), "time_limit": task.time_limit,
                       "twill": _code_hash()}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def _solve(graph: Any, machine: Any, task: Task) -> tuple[dict[str, Any] | None, list[str], bool]:
    """twill's schedule of the config as plain data (None when there is none) and its notes, from the
    solve cache when there; the last item says whether it came from the cache.

    Only a solve whose outcome does not depend on the machine's speed is kept: one that found a schedule
    with no II left undecided by the time limit (a timeout, or a refusal that names the time limit, is
    solved again next time, so a loaded machine never fixes a worse answer in the cache)."""
    path = Path(task.cache_dir) / f"solve-{_solve_key(graph, machine, task)}.json" if task.cache_dir else None
    if path is not None and path.is_file():
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            return data["schedule"], list(data["notes"]), True
        except (OSError, ValueError, KeyError):
            pass  # a torn cache file: solve again and overwrite it
    sched, notes = _twill_schedule(graph, machine, task)
    core = None
    timed_out = sched is None and any("no schedule within" in n or "solver failed" in n for n in notes)
    if sched is not None:
        cert = sched.certificate
        timed_out = any(a.status == "timeout" for a in cert.attempts)
        core = {"strategy": sched.strategy, "ii": sched.ii, "ii_cycles": round(sched.ii_cycles, 1),
                "length": sched.length, "cycles_per_unit": round(sched.problem.cycles_per_unit, 4),
                "stages": sched.stages, "proven_optimal": cert.proven_optimal,
                "not_proven": None if cert.proven_optimal else why_not_proven(sched, task),
                "warp_groups": [{"index": g.index, "ops": list(g.ops), "warps": g.warps,
                                 "registers": g.registers, "role": g.role} for g in sched.warp_groups],
                "epilogue_cycles": max(0.0, (sched.length - sched.ii) * sched.problem.cycles_per_unit)}
    if path is not None and not timed_out:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"schedule": core, "notes": notes}), encoding="utf-8")
        os.replace(tmp, path)
    return core, notes, False


def _cpu() -> tuple[float, float]:
    """CPU seconds of this process and of its finished children (ptxas, cuobjdump)."""
    try:
        import resource
    except ImportError:  # not on a Unix: children are not counted
        return time.process_time(), 0.0
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime


def why_not_proven(sched: Any, task: Task) -> str:
    """Why twill's schedule of a config is not a proven optimum, from its certificate."""
    reasons = [n for n in sched.certificate.notes if "not a joint optimum" in n or "not proven" in n]
    if any(a.status == "timeout" for a in sched.certificate.attempts):
        reasons.append(f"the --time-limit of {task.time_limit:g} s left an II undecided")
    return "; ".join(reasons) or "the certificate does not prove it optimal"


def tune_config(task: Task) -> dict[str, Any]:
    """Compile, check, solve and predict one config; a plain-data result (see the module docstring).

    Keys: ``constexprs``, ``num_warps``, ``num_stages``, ``fits``, ``reason``, ``predicted_ms``,
    ``predicted_tflops``, ``schedule`` (twill's schedule for the config, or None), ``details`` (registers,
    shared memory, CTAs per SM, waves, cycles per trip, the hardware terms), ``error`` (``"compile"``
    when Triton rejects the config, ``"model"`` when twill cannot model its loop, ``"input"`` for a bad
    problem description, ``"internal"`` for a bug),
    ``index``, ``seconds``.
    """
    t0 = time.perf_counter()
    out = _tune(task)
    out["seconds"] = round(time.perf_counter() - t0, 3)
    out.setdefault("details", {})["seconds"] = out["seconds"]
    return out


def _tune(task: Task) -> dict[str, Any]:
    from twill.frontend.compile import target_for
    from twill.frontend.lower import lower_loop
    from twill.frontend.ttgir import parse_ttgir
    from twill.ir.costmodel import CostModel
    from twill.ir.machine import load_machine
    from twill.tune import triton_model as tm
    from twill.tune.grid import GridError, evaluate_count, evaluate_flops
    from twill.tune.peak import gemm_flops
    from twill.tune.triton_loop import price_loop

    try:
        spec, problem = _kernel(task.kernel)
        machine = load_machine(task.machine)
        names = problem.names(task.constexprs, task.problem)
        ctas = evaluate_count(problem.ctas, names, where="TWILL_TUNE ctas")
        exprs = problem.trip_expressions
        trips_each = [evaluate_count(e, names, where="TWILL_TUNE trips" if len(exprs) == 1 else
                                     f"TWILL_TUNE trips[{i}]") for i, e in enumerate(exprs)]
        trips = trips_each[0] if len(trips_each) == 1 else trips_each
        flops = evaluate_flops(problem.flops, names, where="TWILL_TUNE flops")
        signature = problem.signature(spec.signature, {**spec.constexprs, **task.constexprs})
    except (GridError, TwillError) as exc:
        return _result(task, reason=f"bad input: {exc}", error="input")
    too_many = _threads_per_cta(task.num_warps, machine)
    if too_many is not None:  # before Triton and ptxas, whose refusal of it does not name the limit
        return _result(task, reason=too_many)
    if task.backend == "gluon":
        from twill.tune.gluon_worker import tune_gluon

        if len(trips_each) > 1:
            return _result(task, reason=f"the Gluon backend generates kernels of one loop; TWILL_TUNE gives "
                                        f"trips for {len(trips_each)}: tune it with --backend triton, which "
                                        "prices every loop", error="model")

        return tune_gluon(task, spec, machine, ctas=ctas, trips=trips, flops=flops, signature=signature,
                          result=_result, flops_expression=problem.flops)
    if task.backend != "triton":
        return _result(task, reason=f"backend {task.backend!r} is not supported (use triton or gluon)",
                       error="input")
    cpu0 = _cpu()
    try:
        built = _compile(task, spec, signature, target_for(machine))
    except FrontendError as exc:
        return _result(task, reason=f"Triton rejects this config: {exc}", error="compile")
    cpu1 = _cpu()
    cpu_seconds = {"compile": round(cpu1[0] - cpu0[0], 3), "tools": round(cpu1[1] - cpu0[1], 3)}
    report = built["report"]
    cm = CostModel(machine)
    details: dict[str, Any] = {
        "registers": report["registers"], "register_cap": report["register_cap"],
        "threads": report["threads"], "spills": report["spills"], "spill_bytes": report["spill_store_bytes"],
        "shared_bytes": report["shared_bytes"],
        "loop_sass_instructions": report.get("loop_sass_instructions"),
        "ptxas_notes": report["ptxas_notes"], "ctas": ctas, "trips": trips, "flops": flops,
        "compile_cached": built["cached"], "cpu_seconds": cpu_seconds}
    reason, k = _fits(report, machine, cm)
    details["ctas_per_sm"] = k
    if reason is not None:
        return _result(task, reason=reason, details=details)
    module = parse_ttgir(built["scheduled"])
    loops = top_level_loops(module)
    if len(loops) != len(trips_each):
        return _result(task, reason=trips_mismatch(spec.name, loops, len(trips_each)), error="input",
                       details=details)
    if len(loops) == 1:  # the main loop of the SASS, as calibrated
        sass = [(report.get("loop_sass_instructions"), report.get("loop_local_bytes"),
                 int(report.get("loop_barriers") or 0))]
    else:
        found = [tuple(x) for x in report.get("loops") or ()]
        if len(found) != len(loops):
            return _result(task, reason=(
                f"twill cannot model this kernel: its TTGIR has {len(loops)} sibling loops (lines "
                f"{', '.join(str(lp.line) for lp in loops)}) but ptxas's SASS {len(found)} outermost loops, "
                "so the compiled instructions of each loop are not known"), error="model", details=details)
        sass = [(ins, (st, ld), bars) for ins, st, ld, bars in found]
    sms = int(machine.const("chip.sms"))
    k_tail = tm.tail_ctas_per_sm(ctas, sms, k)
    lowerings = []
    for i in range(len(sass)):
        try:
            lowerings.append(lower_loop(module, machine, loop_index=None if len(loops) == 1 else i,
                                        name=spec.name))
        except TwillError as exc:
            return _result(task, reason=f"twill cannot model this loop: {exc}", error="model",
                           details=details)
    memory, hits, streams = _memory_streams(lowerings, report, machine, trips_each, k * sms)
    prices = []
    for i, (instructions, local, barriers) in enumerate(sass):
        prices.append(price_loop(lowerings[i], report, machine=machine, cm=cm, num_warps=task.num_warps,
                                 num_stages=task.num_stages, ctas_per_sm=k, tail_ctas_per_sm=k_tail,
                                 loop_instructions=instructions, local_bytes=local,
                                 loop_barriers=barriers, sass_memory=memory[i], reuse_hit=hits[i],
                                 streams=streams[i]))
    clock = float(machine.const("chip.clock_ghz"))
    edge = float(machine.const("cost.tma_latency"))  # one TMA round trip in (Q, first K/V) and one out (O)
    if all(p.stream is not None for p in prices):
        # streaming loops only: while one CTA waits for its first loads and its last stores, the other
        # k - 1 CTAs of its SM keep HBM's queue full, so the SM loses a k-th of it (twill.tune.membound)
        edge /= k
    # per CTA: every loop's trips at its own cycles per trip (one loop: trips x cycles, as calibrated)
    loop_cycles = sum(t * p.per_trip for t, p in zip(trips_each, prices, strict=True))
    tail_cycles = sum(t * p.tail_per_trip for t, p in zip(trips_each, prices, strict=True))
    if len(prices) > 1 and all(p.stream is not None for p in prices):
        # sibling streaming loops: co-resident CTAs out of step share the SM's resources across the loops
        from twill.tune.membound import kernel_cycles

        loop_cycles, tail_cycles = (kernel_cycles([(t, p.stream[f"{pre}chain"], p.stream[f"{pre}shared"])
                                                   for t, p in zip(trips_each, prices, strict=True)])
                                    for pre in ("", "tail_"))
    pred = predict_from_parts(per_trip_cycles=loop_cycles, trips=1, ctas=ctas, ctas_per_sm=k, sms=sms,
                              clock_ghz=clock, prologue=edge, epilogue=edge, flops=flops,
                              tail_per_trip_cycles=tail_cycles)
    main = max(range(len(prices)), key=lambda i: trips_each[i] * prices[i].per_trip)
    cpu2 = _cpu()
    cpu_seconds["model"] = round(cpu2[0] - cpu1[0], 3)
    details.update(prices[main].details)
    details.update({"waves": pred["waves"], "per_cta_cycles": round(pred["per_cta_cycles"], 1)})
    if len(prices) > 1:
        details["main_loop"] = main
        details["loops"] = [{"line": lp.line, "trips": t, "cycles": round(t * p.per_trip, 1), **p.details}
                            for lp, t, p in zip(loops, trips_each, prices, strict=True)]
    summaries, solved_cached = [], []
    for i, p in enumerate(prices):
        core, notes, cached = _solve(p.model_graph, machine, task)
        solved_cached.append(cached)
        if core is None:
            summaries.append(None)
            if notes:
                details.setdefault("twill_notes", []).extend(
                    notes if len(prices) == 1 else [f"loop {i}: {n}" for n in notes])
            continue
        core = dict(core)
        epilogue = core.pop("epilogue_cycles")
        twill_trip = tm.effective_cycles(core["ii_cycles"], p.terms, k)
        summaries.append((core, notes, twill_trip, epilogue))
    cpu3 = _cpu()
    cpu_seconds["solve"] = round(cpu3[0] - cpu2[0], 3)
    details["solve_cached"] = all(solved_cached)
    summary = None
    if summaries[main] is not None:
        core, notes, _, _ = summaries[main]
        applied = None
        if all(x is not None for x in summaries):  # every loop at twill's schedule
            cycles = sum(t * x[2] + (x[0]["stages"] - 1) * x[2] + x[3]
                         for t, x in zip(trips_each, summaries, strict=True))
            applied = round(predict_from_parts(per_trip_cycles=cycles, trips=1, ctas=ctas, ctas_per_sm=k,
                                               sms=sms, clock_ghz=clock, prologue=edge, epilogue=edge,
                                               flops=flops)["ms"], 5)
        summary = {**core, "predicted_ms_if_applied": applied, "notes": notes}
        if len(prices) > 1:
            summary["loop"] = main
            summary["loops"] = [None if x is None else {**x[0], "notes": x[1]} for x in summaries]
            summary["proven_optimal"] = all(x is not None and x[0]["proven_optimal"] for x in summaries)
            if not summary["proven_optimal"]:
                summary["not_proven"] = "; ".join(
                    f"loop {i}: {'no schedule' if x is None else x[0]['not_proven']}"
                    for i, x in enumerate(summaries) if x is None or not x[0]["proven_optimal"])
    operands = [p.operands for p in prices]
    modelled = sum(gemm_flops(o, t, ctas) for o, t in zip(operands, trips_each, strict=True))
    peak_note(details, machine, [v[4] for o in operands for v in o.values()], modelled, problem.flops,
              pred["tflops"])
    return _result(task, fits=True, predicted_ms=pred["ms"], predicted_tflops=pred["tflops"],
                   schedule=summary, details=details)


def _memory_streams(lowerings: list[Any], report: dict[str, Any], machine: Any, trips: list[int],
                    resident: int) -> tuple[list[Any], list[dict[str, float]], list[Any]]:
    """Per loop: its compiled ``(LDG bytes, STG bytes, load groups)`` per thread per trip (None when the
    SASS does not give them loop by loop), the share of each private load L2 still holds from an
    earlier sibling loop (:func:`twill.tune.membound.reuse_hits`, ``resident`` CTAs in a wave) and its
    :func:`twill.tune.membound.loop_streams` (None where the machine lacks the HBM constants)."""
    from twill.tune import membound as mb

    found = [tuple(x) for x in report.get("loop_memory") or ()]
    memory: list[Any] = found if len(found) == len(lowerings) else [None] * len(lowerings)
    if not mb.membound_available(machine):
        return memory, [{} for _ in lowerings], [None] * len(lowerings)
    streams = [mb.loop_streams(lw, int(report["threads"])) for lw in lowerings]
    hits = mb.reuse_hits(streams, trips, resident, machine) if len(lowerings) > 1 else [{}]
    return memory, hits, streams


def top_level_loops(module: Any) -> list[Any]:
    """The ``scf.for`` ops of a TTGIR module that are inside no other loop, in program order."""
    loops = module.find("scf.for")
    inner = {id(op) for lp in loops for op in lp.walk()
             if op is not lp and op.name in ("scf.for", "scf.while")}
    return [lp for lp in loops if id(lp) not in inner]


def trips_mismatch(kernel: str, loops: list[Any], given: int) -> str:
    """Why a config's ``TWILL_TUNE`` trips do not fit its loops (one expression per sibling loop)."""
    lines = ", ".join(str(lp.line) for lp in loops)
    if not loops:
        return f"the kernel {kernel!r} has no scf.for loop in its TTGIR; twill tune prices a loop's trips"
    return (f"the kernel {kernel!r} has {len(loops)} sibling loop(s) (TTGIR lines {lines}) but "
            f"TWILL_TUNE[{kernel!r}].trips gives {given} expression(s): give one per loop, in program "
            f"order (a list for several), so that every loop is priced")


def peak_note(details: dict[str, Any], machine: Any, dtypes: list[str], modelled: float, expression: str,
              tflops: float) -> None:
    """Put the Tensor Core peak at the fastest of the kernel's GEMM ``dtypes``, the GEMM FLOPs the model
    prices (``modelled``) and, for a prediction above the peak, the note that says so
    (:mod:`twill.tune.peak`) into a config's ``details``."""
    from twill.tune.peak import over_peak, tc_peak_tflops

    peak = tc_peak_tflops(machine, dtypes)
    details["tc_peak_tflops"] = round(peak, 1)
    details["gemm_flops"] = modelled
    note = over_peak(tflops, peak, flops=details["flops"], modelled=modelled, expression=expression,
                     machine=machine.name)
    if note is not None:
        details["over_peak"] = note
