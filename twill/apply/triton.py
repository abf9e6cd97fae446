"""Apply a twill schedule back into Triton and build the kernel: ``twill.apply.triton.apply`` and
``twill apply``.

The paper's authors translated their schedules to CUDA by hand; twill closes the loop through Triton 3.6,
whose software pipeliner takes a coarse schedule as attributes of the scheduled TTGIR::

    from twill.apply.triton import apply
    applied = apply(schedule, "examples/flash_attention_fwd.py", output_dir="out/fa")
    print(applied.report.render())                     # what was kept, what was dropped
    applied.kernel[grid](q_desc, k_desc, v_desc, o_desc, sm_scale, seq_len)   # on a GPU

    twill apply examples/flash_attention_fwd.py --machine h100 -o out/fa [--schedule fa.json]

Steps (all on the CPU): compile the kernel to Triton's *scheduled* TTGIR (``loop.stage``/``loop.cluster``
from Triton's own scheduler), lower its loop to the same graph twill scheduled, rewrite every op's
``loop.stage``/``loop.cluster`` (and on sm_100 ``ttg.partition``) from the schedule
(:mod:`twill.apply.map`), run the rest of ``make_ttgir`` and Triton's LLVM/PTX/cubin stages
(:mod:`twill.apply.compile`), and save the cubin as an :class:`~twill.apply.kernel.AppliedKernel` that
launches with the original signature. ``docs/apply.md`` says what survives the trip and what does not.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from twill.apply.compile import PEEL_KEY, CompileStats, compiled_stats, finish_compile, partition_regions
from twill.apply.kernel import AppliedKernel
from twill.apply.map import ApplyError, OpSlot, partition_plan, plan_placement
from twill.apply.rewrite import read_slots, rewrite_ttgir
from twill.errors import FrontendError
from twill.ir.machine import Machine
from twill.schedule import Schedule

__all__ = ["AppliedKernelResult", "ApplyError", "ApplyReport", "apply", "refuse_unsupported", "triton_apart"]


@dataclass(frozen=True)
class NodeReport:
    """One graph op: twill's placement and what it became in Triton."""

    name: str
    start: int
    twill_stage: int
    warp_group: int
    stage: int
    cluster: int
    partition: int | None
    ttgir_ops: tuple[str, ...]


@dataclass(frozen=True)
class ApplyReport:
    """What :func:`apply` did: the mapping, what was kept and dropped, checks, and the compiled code.

    Attributes
    ----------
    kernel, target, machine : str
        Kernel entry, ``sm_90``/``sm_100``, and the machine the schedule was solved for.
    ii, twill_stages : int
        The schedule's II (normalized units) and stage count.
    stages : int
        Stages of Triton's coarse schedule (``tt.scheduled_max_stage + 1``).
    prefetch : int
        Stages between a streaming load and its first consumer.
    nodes : tuple of NodeReport
        Per graph op.
    ops : tuple of OpSlot
        Per TTGIR op of the loop body (folded ones included), with Triton's own choice beside.
    kept, dropped : tuple of str
        Plain-language lists.
    checks : tuple of str
        What was verified on the emitted TTGIR (stages, clusters, partitions read back).
    compiled, triton_default : CompileStats or None
        The applied kernel, and Triton's own schedule of the same kernel compiled the same way.
    """

    kernel: str
    target: str
    machine: str
    ii: int
    twill_stages: int
    stages: int
    prefetch: int
    nodes: tuple[NodeReport, ...]
    ops: tuple[OpSlot, ...]
    kept: tuple[str, ...]
    dropped: tuple[str, ...]
    checks: tuple[str, ...]
    compiled: CompileStats | None = None
    triton_default: CompileStats | None = None
    partitions: dict[int, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Plain data (JSON-ready)."""
        d = asdict(self)
        d["compiled"] = self.compiled.to_dict() if self.compiled else None
        d["triton_default"] = self.triton_default.to_dict() if self.triton_default else None
        d["partitions"] = {str(k): v for k, v in self.partitions.items()}
        return d

    def render(self) -> str:
        """The report as text (what ``twill apply`` prints)."""
        out = [f"{self.kernel} -> {self.target} ({self.machine} schedule): II {self.ii} units, "
               f"{self.twill_stages} twill stage(s) -> {self.stages} Triton stage(s), "
               f"prefetch {self.prefetch}",
               "", f"{'op':<18} {'start':>5} {'twill':>5} {'group':>5} -> {'stage':>5} {'clust':>5} "
               f"{'part':>4}  TTGIR ops"]
        for n in sorted(self.nodes, key=lambda n: (n.stage, n.cluster, n.name)):
            part = "-" if n.partition is None else str(n.partition)
            out.append(f"{n.name:<18} {n.start:>5} {n.twill_stage:>5} {n.warp_group:>5} -> {n.stage:>5} "
                       f"{n.cluster:>5} {part:>4}  {', '.join(n.ttgir_ops)}")
        folded = [o for o in self.ops if o.role != "node"]
        if folded:
            out += ["", "folded / attached ops (slot of their first consumer):"]
            out += [f"  {o.name}@{o.line} ({o.role}{', ' + o.node if o.node else ''}) -> stage {o.stage}, "
                    f"cluster {o.cluster} (Triton: {o.triton_stage}/{o.triton_cluster})" for o in folded]
        out += ["", "kept:"] + [f"  - {k}" for k in self.kept]
        out += ["dropped or changed:"] + [f"  - {d}" for d in self.dropped]
        out += ["checks:"] + [f"  - {c}" for c in self.checks]
        if self.compiled:
            out += ["", f"applied kernel : {self.compiled.summary()}"]
        if self.triton_default:
            out += [f"Triton default : {self.triton_default.summary()}"]
        return "\n".join(out)


@dataclass(frozen=True)
class AppliedKernelResult:
    """What :func:`apply` returns: the launchable kernel (``None`` if not compiled), the report, the TTGIR."""

    kernel: AppliedKernel | None
    report: ApplyReport
    ttgir: str


def triton_apart(graph: Any) -> tuple[tuple[str, str], ...]:
    """Op pairs Triton 3.6's warp specialization cannot put in one partition (sm_100).

    The TMEM load of an MMA's result in the same iteration (``kind`` ``tmem_load`` at the end of a TMEM
    edge of distance 0 from a ``gemm``) and any tcgen05 MMA (``kind`` ``gemm``): with such a load in a
    partition that issues an MMA, Triton's ``RemoveTMEMTokens`` pass leaves a loop-carried TMEM token
    yielded from inside a partition region ("'scf.yield' op using value defined outside the region",
    the FA forward with S's load beside its own MMA) or ``NVWSInsertAref`` fails (the sub-tiled FA
    forward, with one sub-tile's S load beside the other's MMA). Found on 2026-11-30 by compiling twill's
    b200 FA forward schedules: each failed, and each compiled once re-solved with these pairs apart (same
    II, 127 and 94 units). An accumulator read in the next iteration (distance 1) beside its MMA compiles
    and is not constrained. ``graph`` is a :class:`~twill.ir.graph.Graph` or a
    :class:`~twill.model.problem.Problem`.
    """
    loads = {e.dst for e in graph.edges if e.carrier == "tmem" and e.distance == 0
             and graph.op(e.src).kind == "gemm" and graph.op(e.dst).kind == "tmem_load"}
    mmas = {op.name for op in graph.ops if op.kind == "gemm"}
    return tuple(sorted(tuple(sorted((load, mma))) for load in loads for mma in mmas))


def _refuse_triton_partitions(schedule: Schedule) -> None:
    """sm_100: a schedule that puts a :func:`triton_apart` pair on one warp group cannot be compiled."""
    rule = triton_apart(schedule.problem)
    together = [(a, b) for a, b in rule if schedule.slots[a].warp_group == schedule.slots[b].warp_group]
    if together:
        pairs = ", ".join(f"{a} and {b} (group {schedule.slots[a].warp_group})" for a, b in together)
        apart = " ".join(f"--apart {a},{b}" for a, b in rule)
        raise ApplyError(f"the schedule puts a tcgen05 MMA and a TMEM load of an MMA result on one warp "
                         f"group: {pairs}; Triton 3.6's warp specialization cannot compile that (its "
                         "RemoveTMEMTokens / NVWSInsertAref passes fail). Solve with them apart (twill "
                         f"schedule ... {apart}, or twill.schedule(..., "
                         "apart=twill.apply.triton.triton_apart(graph))); twill apply does so itself "
                         "when it solves")


def _early_compute(schedule: Schedule, placement: Any) -> list[str]:
    """Graph ops other than streaming loads that the placement puts before the last stage."""
    streaming = set(schedule.problem.streaming)
    return sorted({s.node for s in placement.slots if s.role == "node" and s.node is not None
                   and s.node not in streaming and s.stage < placement.max_stage})


_WASTE = ("the last iteration still works for an iteration that does not exist: its loads and barrier "
          "waits predicated off, the early stages' ops ({ops}) computed and thrown away")


def _peeled(spec: Any, text: str, target: str, num_stages: int, invariant: int, compiled: Any,
            stats: CompileStats, early: list[str], smem_limit: int) -> tuple[Any, CompileStats, str, bool]:
    """Compile ``text`` again with the last iteration peeled (:mod:`twill.apply.peel`) and keep that kernel
    only if it compiles and ptxas spills no more bytes (stores + loads) in it than in ``compiled``: the
    peeled copy of the body shares the function's registers, and on the sub-tiled FA forward (already
    spilling) it raised the spill bytes 2.4x (h200 schedule) and 2.2x (h100) and cut the throughput by
    up to 2.8x on an H200 (``benchmarks/h200_attention.md``). Returns the kernel and statistics to keep,
    the report line, and whether it is a kept (not a dropped) item."""
    waste = _WASTE.format(ops=", ".join(early))
    try:
        peeled = finish_compile(spec, text, target=target, num_stages=num_stages, peel=True)
    except FrontendError as exc:
        return compiled, stats, (f"epilogue not peeled: the peeled kernel did not compile ({exc}); "
                                 f"{waste}"), False
    done = getattr(peeled.metadata, PEEL_KEY, None)
    if not done:
        return compiled, stats, (f"epilogue not peeled (the pipelined loop is not in the form "
                                 f"twill.apply.peel reads): {waste}"), False
    peeled_stats = compiled_stats(peeled, target=target, smem_limit=smem_limit, invariant_loads=invariant)
    if stats.smem_fits and not peeled_stats.smem_fits:
        return compiled, stats, (f"epilogue not peeled: the peeled kernel needs {peeled_stats.shared_bytes} "
                                 f"B of shared memory, over the machine's {smem_limit}; {waste}"), False
    spills, peeled_spills = (st.spill_store_bytes + st.spill_load_bytes for st in (stats, peeled_stats))
    if peeled_spills > spills:
        return compiled, stats, (f"epilogue not peeled: with the last iteration peeled ptxas spills "
                                 f"{peeled_spills} B per thread (stores + loads) instead of {spills}; "
                                 f"{waste}"), False
    return peeled, peeled_stats, ("epilogue: the loop's last iteration is peeled after it (a copy of the "
                                  f"body in which {done['stage_predicates']} stage predicate(s) iv < ub - c, "
                                  "c >= step, are false), so the early stages' ops "
                                  f"({', '.join(early)}) are not issued for an iteration past the end in "
                                  "its last run"), True


def _kept_dropped(schedule: Schedule, target: str, rewrite: Any, prefetch: int, placement: Any,
                  plan: Any) -> tuple[list[str], list[str]]:
    groups = len({s.warp_group for s in schedule.slots.values()})
    kept = [f"stage of every op: loop.stage = twill stage + {prefetch} (streaming loads {prefetch} stage(s) "
            "before their first consumer)",
            f"order inside the II: loop.cluster = rank of start mod II ({len(placement.offsets)} clusters); "
            "Triton emits the steady state cluster by cluster"]
    dropped = ["exact start times: only the order of issue survives (Triton emits no delays; the hardware "
               "and ptxas set the timing)",
               "ops twill folded take their first consumer's slot; every member of a merged chain takes its "
               "chain's slot (listed above)"]
    if target == "sm_90":
        dropped.append(f"TMA prefetch depth: twill counted {schedule.problem.options.prefetch} extra "
                       "buffer(s) per streaming load; Triton allocates one buffer per stage of distance, "
                       "plus one while an asynchronous wgmma may still read it (see the buffers line)")
        dropped.append(f"warp specialization: the {groups} warp group(s) and their setmaxnreg budgets "
                       f"({', '.join(f'g{g.index}={g.registers}' for g in schedule.warp_groups)}) are not "
                       "expressed; Triton 3.6's Hopper warp specialization is unreliable (ignored at 8 "
                       "warps, crashes with descriptor stores), so all ops run in every warp of the CTA")
        if rewrite.wrapped:
            dropped.append(f"wgmma outside the last stage ({', '.join(rewrite.wrapped)}): Triton 3.6 cannot "
                           "predicate warp_group_dot, so each is wrapped in scf.if (both branches issue it) "
                           "and runs synchronously: its overlap with later ops of its own group is lost")
        if rewrite.anchor:
            kept.append(f"the last-stage wgmma stays asynchronous: warp_group_dot_wait anchor "
                        f"{rewrite.anchor}, where twill first reads its accumulator")
    else:
        mapping = ", ".join(f"g{g}->p{p}" for g, p in plan.group_to_partition.items())
        kept.append(f"warp groups -> ttg.partition ({mapping}; p0 is Triton's default region)")
        dropped.append("setmaxnreg budgets: Triton picks each partition's warps and registers "
                       "(OptimizePartitionWarps); ttg.partition.stages = smallest twill stage per group")
    return kept, dropped


def apply(schedule: Schedule, kernel: Any, *, prefetch: int | None = None,
          output_dir: str | os.PathLike[str] | None = None, compile: bool = True,
          baseline: bool = True, peel: bool = True,
          machine: str | os.PathLike[str] | Machine | None = None) -> AppliedKernelResult:
    """Map ``schedule`` onto ``kernel``'s scheduled TTGIR, finish the compile and load the kernel.

    Parameters
    ----------
    schedule : Schedule
        A twill schedule of the kernel's main loop (solved for an sm_90 or sm_100 machine).
    kernel : str, path-like or KernelSpec
        ``"file.py"`` or ``"file.py::KERNEL"`` with a ``TWILL_KERNELS`` entry, or a loaded spec.
    prefetch : int, optional
        Stages between a streaming load and its consumer (default the schedule's ``prefetch``).
    output_dir : path-like, optional
        Where to save the compiled kernel (default a temporary folder under ``./twill-apply``).
    compile : bool
        False stops after writing and checking the TTGIR (no cubin, ``kernel`` is None).
    baseline : bool
        Also compile Triton's own schedule of the kernel the same way, for the report.
    peel : bool
        sm_90: when the schedule puts compute before the last stage, also compile the kernel with the
        loop's last iteration peeled (:mod:`twill.apply.peel`) and keep that one unless ptxas spills more
        in it. False keeps Triton's predicated last iteration.
    machine : str, path or Machine, optional
        The machine the schedule was solved for, when it is not a bundled one (a TOML file); default
        the bundled machine of ``schedule.machine``.

    Returns
    -------
    AppliedKernelResult

    Raises
    ------
    ApplyError
        The schedule is for another loop, Triton's emission order would break a dependence, the kernel
        splits a tensor-memory tile (its graph's TTGIR is not one Triton can pipeline), the schedule is a
        what-if (a constraint family left out), or its machine is neither bundled nor given, or is not
        the ``machine`` given; for sm_100, the loop loads through pointers (``cp.async``) or the
        schedule puts a :func:`triton_apart` pair on one warp group (Triton 3.6 cannot compile either);
        the compiled kernel needs more shared memory per CTA than the machine's ``memory.smem_per_cta``
        (or Triton emitted only a trap): named with both byte counts, and nothing is saved.
    FrontendError
        The kernel cannot be compiled (before or after the edit); the message quotes Triton's notable
        diagnostics and names the file holding its whole output.
    """
    from twill.frontend.compile import KernelSpec, compile_to_ttgir, load_kernel, target_for
    from twill.frontend.lower import lower_loop
    from twill.frontend.ttgir import parse_ttgir
    from twill.ir.machine import known_machines, load_machine

    relaxed = schedule.problem.options.relax
    if relaxed:
        raise ApplyError(f"the schedule is a what-if ({', '.join(sorted(relaxed))} left out): not a schedule "
                         "the machine can run; solve again without relax")
    if machine is None:
        if schedule.machine not in known_machines():
            raise ApplyError(f"the schedule was solved for machine {schedule.machine!r}, which is not "
                             "bundled; pass its TOML file (machine=, twill apply --machine FILE.toml)")
        machine = schedule.machine
    machine = load_machine(machine)
    if machine.name != schedule.machine:
        raise ApplyError(f"the schedule was solved for {schedule.machine!r}, not {machine.name!r}; give its "
                         f"machine (or none, for a bundled one) or solve again for {machine.name!r}")
    spec = kernel if isinstance(kernel, KernelSpec) else load_kernel(os.fspath(kernel))
    target = target_for(machine)
    snaps = compile_to_ttgir(spec, target=target)
    refuse_unsupported(snaps, target)
    lowering = lower_loop(parse_ttgir(snaps.scheduled), machine, name=spec.name)
    placement = plan_placement(schedule, lowering, prefetch=prefetch)
    if target == "sm_100":
        _refuse_triton_partitions(schedule)
    plan = partition_plan(schedule, lowering, placement) if target == "sm_100" else None
    rewrite = rewrite_ttgir(snaps.scheduled, placement, lowering, target=target,
                            partitions=plan.lines if plan else None,
                            loop_partition_attrs=plan.loop_attrs if plan else None)
    checks = _check_emitted(rewrite.text, placement, plan)
    kept, dropped = _kept_dropped(schedule, target, rewrite, placement.prefetch, placement, plan)
    nodes = tuple(NodeReport(name, slot.start, slot.stage, slot.warp_group, *placement.node_slot[name],
                             plan.group_to_partition[slot.warp_group] if plan else None,
                             tuple(f"{m.name}@{m.line}" for m in lowering.members[name]))
                  for name, slot in schedule.slots.items())
    num_stages = placement.max_stage + 1
    if plan is not None:
        # Warp-specialized: Triton sizes every load's ring of buffers from num_stages; use twill's depth.
        depths = schedule.buffer_depths()
        num_stages = max([depths.get(n, 1) for n in schedule.problem.streaming] + [2])
        kept.append(f"TMA prefetch depth: num_stages = {num_stages}, twill's deepest streaming-load buffer "
                    "(Triton gives every load of a warp-specialized loop that many buffers)")
    stats = default_stats = None
    applied = None
    invariant = sum(1 for op in lowering.module.ops() if op.name in ("tt.descriptor_load", "tt.load")
                    and lowering.loop not in op.ancestors())
    early = _early_compute(schedule, placement)
    smem_limit = machine.smem_per_cta
    if compile:
        compiled = finish_compile(spec, rewrite.text, target=target, num_stages=num_stages)
        stats = compiled_stats(compiled, target=target, smem_limit=smem_limit, invariant_loads=invariant)
        if early and target == "sm_90" and peel:
            compiled, stats, note, peeled = _peeled(spec, rewrite.text, target, num_stages, invariant,
                                                    compiled, stats, early, smem_limit)
            (kept if peeled else dropped).append(note)
        elif early:
            why = "--no-peel / peel=False" if target == "sm_90" else "twill peels only sm_90 loops"
            dropped.append(f"epilogue not peeled ({why}): " + _WASTE.format(ops=", ".join(early)))
        checks.append("the compiled loop is software-pipelined" if stats.pipelined else
                      "WARNING: Triton did not pipeline the loop (it fell back to a synchronous loop)")
        if plan is not None:
            checks.append(_check_partitions(compiled.asm["ttgir"], schedule, plan, lowering))
        if baseline:
            default = finish_compile(spec, snaps.scheduled, target=target, num_stages=spec.num_stages)
            default_stats = compiled_stats(default, target=target, smem_limit=smem_limit,
                                           invariant_loads=invariant)
    report = ApplyReport(spec.name, target, schedule.machine, schedule.ii, schedule.stages,
                         placement.max_stage + 1, placement.prefetch, nodes, tuple(placement.slots),
                         tuple(kept), tuple(dropped), tuple(checks), stats, default_stats,
                         dict(plan.group_to_partition) if plan else {})
    if compile:
        _refuse_over_smem(spec.name, stats, machine)
        folder = Path(output_dir) if output_dir is not None else Path("twill-apply") / f"{spec.name}.{target}"
        signature = {a: ("constexpr" if a in spec.constexprs else spec.signature[a])
                     for a in spec.fn.arg_names}
        applied = AppliedKernel.from_compiled(compiled, folder, arg_names=spec.fn.arg_names,
                                              signature=signature, constexprs=spec.constexprs,
                                              report=report.to_dict(), applied_ttgir=rewrite.text)
        (folder / "report.txt").write_text(report.render() + "\n", encoding="utf-8")
    return AppliedKernelResult(applied, report, rewrite.text)


def _refuse_over_smem(kernel: str, stats: CompileStats, machine: Machine) -> None:
    """:class:`ApplyError` if the compiled kernel does not fit the machine's shared memory per CTA (or Triton
    emitted only a trap, its answer to a kernel over its own limit): such a kernel is never saved."""
    if stats.smem_fits:
        return
    what = ("Triton emitted only a trap for it (its answer to shared memory over the limit)"
            if stats.trap_only else "it would not launch")
    raise ApplyError(f"{kernel!r} compiles to {stats.shared_bytes} B of shared memory per CTA, over the "
                     f"{machine.smem_per_cta} B that machine {machine.name!r} allows (memory.smem_per_cta): "
                     f"{what}; the kernel is not saved (buffers: "
                     f"{', '.join(f'{k} {v}' for k, v in stats.buffers.items()) or 'none'})")


def _check_emitted(text: str, placement: Any, plan: Any) -> list[str]:
    """Read the emitted TTGIR back and compare stages, clusters and partitions with the placement.

    The sm_90 rewrite adds a ``warp_group_dot_wait`` anchor and turns wrapped wgmmas into ``scf.if``;
    those are matched to the placement's ``warp_group_dot`` entries.
    """
    found = [f for f in read_slots(text) if f[0] != "ttng.warp_group_dot_wait"]
    want = placement.slots
    if len(found) != len(want):
        raise ApplyError(f"the emitted loop has {len(found)} ops, the placement {len(want)}")
    for got, slot in zip(found, want, strict=True):
        name = "ttng.warp_group_dot" if got[0] == "scf.if" and slot.name == "ttng.warp_group_dot" else got[0]
        if (name, got[1], got[2]) != (slot.name, slot.stage, slot.cluster):
            raise ApplyError(f"the emitted TTGIR does not carry the placement at {slot.name}@{slot.line}: "
                             f"found {got[0]} stage {got[1]} cluster {got[2]}, expected stage {slot.stage} "
                             f"cluster {slot.cluster}")
    checks = [f"loop.stage/loop.cluster of all {len(want)} loop ops read back from the emitted TTGIR"]
    if plan is not None:
        for got, slot in zip(found, want, strict=True):
            if got[3] != plan.lines[slot.line]:
                raise ApplyError(f"{slot.name}@{slot.line} carries ttg.partition {got[3]}, expected "
                                 f"{plan.lines[slot.line]}")
        checks.append(f"ttg.partition of all {len(want)} loop ops read back ({len(plan.stages)} partitions)")
    return checks


_MARKERS = {"ttng.tc_gen5_mma": "ttng.tc_gen5_mma", "math.exp2": "math.exp2",
            "tt.descriptor_load": "ttng.async_tma_copy_global_to_local", "ttng.tmem_load": "ttng.tmem_load"}


def _check_partitions(ttgir: str, schedule: Schedule, plan: Any, lowering: Any) -> str:
    """Check in the final TTGIR that MMAs, TMA loads, TMEM loads and exponentials sit in their groups'
    partitions (each such op's partition region holds at least one op of its kind)."""
    regions = partition_regions(ttgir)
    if len(regions) != len(plan.stages):
        raise ApplyError(f"the compiled kernel has {len(regions)} partitions, the schedule "
                         f"{len(plan.stages)}")
    seen = []
    for name, slot in schedule.slots.items():
        part = plan.group_to_partition[slot.warp_group]
        for member in lowering.members[name]:
            marker = _MARKERS.get(member.name)
            if marker is None:
                continue
            if not regions[part].get(marker):
                raise ApplyError(f"{name} ({member.name}) belongs to partition {part}, whose region of the "
                                 f"compiled kernel holds no {marker}")
            seen.append(f"{name}->p{part}")
    return (f"compiled ttg.warp_specialize has {len(regions)} partitions; MMAs, TMA loads, TMEM loads and "
            f"exp2 found in the planned regions ({', '.join(seen)})")


# ------------------------------------------------------------------------------------------------ CLI
def refuse_unsupported(snaps: Any, target: str) -> None:
    """Raise :class:`ApplyError` for a kernel apply cannot compile, before any solve or compile.

    * A graph built with split tensor-memory loads (their loads carry no token a pipeliner could order).
    * sm_100 with pointer loads (``tt.load``, compiled to ``cp.async``) in the loop: loads are variable
      latency, so every schedule puts them in a warp group of their own, which becomes a Triton 3.6
      warp-specialization partition, and Triton's ``NVWSInsertAref`` pass stops on them ("cpasync not
      supported yet", an UNREACHABLE in ``InsertAref.cpp``).
    """
    from twill.frontend.lower import find_loop
    from twill.frontend.ttgir import parse_ttgir

    if snaps.split_tmem_loads:
        raise ApplyError(f"{snaps.kernel!r} splits a tensor-memory tile into halves: twill's graph of it "
                         "loads the halves as Triton does after its pipeliner (docs/frontend.md §10), and "
                         "those loads carry no token a pipeliner could order; apply does not support such "
                         "kernels")
    if target != "sm_100":
        return
    loop = find_loop(parse_ttgir(snaps.scheduled))
    lines = sorted(op.line for op in loop.walk() if op.name == "tt.load")
    if lines:
        raise ApplyError(f"{snaps.kernel!r} loads through pointers in its loop (tt.load at TTGIR line(s) "
                         f"{', '.join(map(str, lines))}): on sm_100 twill's warp groups become Triton 3.6 "
                         "warp-specialization partitions, and Triton cannot stage pointer loads (cp.async) "
                         "between partitions ('cpasync not supported yet' in its NVWSInsertAref pass); load "
                         "through tensor descriptors (TMA) as examples/gemm.py::matmul does, or apply the "
                         "kernel for sm_90")
