"""Generate, compile (on the CPU, for sm_90) and save a Gluon kernel for a twill schedule; its report.

    from twill.codegen.gluon import generate
    result = generate(schedule, "examples/gemm.py", "h100", "out/gemm")
    print(result.report.render())

The output folder holds ``kernel.py`` (the generated Gluon module), ``manifest.json`` (how to launch it:
arguments, descriptor blocks, ``num_warps``), ``report.json``, ``schedule.json`` and the compiled ``.ptx``.
:func:`twill.codegen.gluon.loader.load` reads it back with only torch and Triton.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from twill.codegen.gluon.blackwell import blackwell_target
from twill.codegen.gluon.emit import KernelSource, check_lowerable, emit_kernel
from twill.codegen.gluon.errors import CodegenError
from twill.codegen.gluon.plan import Plan, default_budget, default_candidates, make_plan
from twill.codegen.gluon.tmem import TMEM_OPS
from twill.ir.machine import Machine, load_machine
from twill.model.liveness import fold, memory_intervals
from twill.schedule import Schedule

__all__ = ["GluonKernel", "GluonReport", "PartitionReport", "compile_source", "generate"]

_SETMAXNREG = r"setmaxnreg\.(?:inc|dec)\.sync\.aligned\.u32\s+(\d+)"

_ARCH = {"sm_90": (90, "sm_90a", "ptxas"), "sm_100": (100, "sm_100a", "ptxas-blackwell")}
"""Per target: compute capability, the ptxas ``--gpu-name`` and the Triton wheel's ptxas binary for it."""

MBARRIER_BYTES = 8
"""Bytes of one mbarrier (a 64-bit shared-memory word, PTX ISA ``mbarrier`` object size)."""


@dataclass(frozen=True)
class PartitionReport:
    """One partition: its warp group, warps, the budget asked for and what the PTX gives it."""

    position: int
    group: int
    role: str
    warps: int
    setmaxnreg_schedule: int
    setmaxnreg_ptx: int | None
    trip_order: tuple[str, ...]
    tensor_core_order: tuple[str, ...]
    stages: int


@dataclass(frozen=True)
class GluonReport:
    """What :func:`generate` made and what the compiler says about it."""

    kernel: str
    machine: str
    ii: int
    stages: int
    partitions: tuple[PartitionReport, ...]
    rings: dict[str, int]
    shared_compiled: int
    shared_model_peak: int
    shared_model_buffers: int
    barrier_bytes: int
    shared_difference: dict[str, int]
    shared_limit: int
    registers_ptxas: int
    spill_store_bytes: int
    spill_load_bytes: int
    num_warps: int
    threads: int
    not_kept: tuple[str, ...]
    notes: tuple[str, ...] = field(default_factory=tuple)
    target: str = "sm_90"
    tmem_columns: int = 0
    tmem_compiled: int = 0
    tmem_model_peak: int = 0
    tmem_limit: int = 0
    tmem_buffers: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Plain data (JSON-ready)."""
        return asdict(self)

    def render(self) -> str:
        """The report as text."""
        out = [f"{self.kernel}: Gluon warp-specialized kernel for the {self.machine} schedule (II {self.ii}, "
               f"{self.stages} stage(s)); {self.threads} threads, launch num_warps {self.num_warps}"]
        for p in self.partitions:
            got = "Triton decides" if p.setmaxnreg_ptx is None else str(p.setmaxnreg_ptx)
            out.append(f"  partition {p.position} ({'default' if p.position == 0 else 'worker'}) = group "
                       f"{p.group} ({p.role}): {p.warps} warps, setmaxnreg schedule {p.setmaxnreg_schedule}, "
                       f"PTX {got}; {p.stages} stage(s); trip order {', '.join(p.trip_order)}; Tensor Core "
                       f"order {', '.join(p.tensor_core_order) or '-'}")
        out.append(f"  rings: {', '.join(f'{k} x{v}' for k, v in self.rings.items()) or '-'}")
        diff = ", ".join(f"{k} {v:+d} B" for k, v in self.shared_difference.items())
        out.append(f"  shared memory: compiled {self.shared_compiled} B; model peak "
                   f"{self.shared_model_peak} B, "
                   f"model buffers {self.shared_model_buffers} B; barriers {self.barrier_bytes} B; "
                   f"difference: {diff or 'none'}; limit {self.shared_limit} B")
        if self.target != "sm_90":
            bufs = ", ".join(f"{k} {v}" for k, v in self.tmem_buffers.items())
            out.append(f"  tensor memory: {self.tmem_columns} columns allocated ({bufs}); compiled "
                       f"{self.tmem_compiled}; model peak {self.tmem_model_peak}; limit {self.tmem_limit}")
        out.append(f"  ptxas: {self.registers_ptxas} registers (kernel-wide cap), spills "
                   f"{self.spill_store_bytes} B stores / {self.spill_load_bytes} B loads")
        out += [f"  not kept: {n}" for n in self.not_kept]
        out += [f"  note: {n}" for n in self.notes]
        return "\n".join(out)


@dataclass
class GluonKernel:
    """A generated kernel: its folder, source, report, the compiled object (CPU) and the manifest."""

    folder: Path
    source: str
    report: GluonReport
    manifest: dict[str, Any]
    compiled: Any = None


def _import_source(text: str, name: str, folder: Path) -> Any:
    path = folder / "kernel.py"
    path.write_text(text, encoding="utf-8")
    mod_name = f"twill_gluon_{name}_{abs(hash(str(path.resolve()))) % 10**8}"
    spec = importlib.util.spec_from_file_location(mod_name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module
    spec.loader.exec_module(module)
    return module


def _signature(spec: Any, desc_params: dict[str, tuple[tuple[int, ...], str]]) -> dict[str, str]:
    from triton.experimental.gluon import language as gl

    types = {"f16": gl.float16, "bf16": gl.bfloat16, "f32": gl.float32}
    names = {"f16": "fp16", "bf16": "bf16", "f32": "fp32"}
    sig = {}
    for a in spec.fn.arg_names:
        if a in spec.constexprs:
            sig[a] = "constexpr"
        elif a in desc_params:
            shape, elem = desc_params[a]
            layout = gl.NVMMASharedLayout.get_default_for(list(shape), types[elem])
            sig[a] = f"tensordesc<{names[elem]}[{', '.join(map(str, shape))}],{layout!r}>"
        else:
            sig[a] = spec.signature[a]
    return sig


def compile_source(fn: Any, signature: dict[str, str], constexprs: dict[str, Any], num_warps: int,
                   target: str = "sm_90") -> Any:
    """``triton.compile`` a Gluon function for ``target`` (``sm_90`` or ``sm_100``) on the CPU.

    Raises
    ------
    CodegenError
        Triton rejects the generated module (its message is kept).
    """
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    try:
        gpu = GPUTarget("cuda", _ARCH[target][0], 32)
        return triton.compile(GluonASTSource(fn, signature, constexprs), target=gpu,
                              options={"num_warps": num_warps})
    except Exception as exc:  # Triton raises CompilationError, RuntimeError, AssertionError...
        raise CodegenError(f"Triton did not compile the generated Gluon kernel: {type(exc).__name__}: "
                           f"{str(exc)[-3000:]}") from exc


def _ptxas(ptx: str, target: str = "sm_90") -> dict[str, Any]:
    from twill.calibrate.regs import parse_ptxas_log, triton_tool

    with tempfile.TemporaryDirectory(prefix="twill-gluon-") as tmp:
        src = Path(tmp) / "k.ptx"
        src.write_text(ptx)
        _cap, gpu, tool = _ARCH[target]
        log = subprocess.run([str(triton_tool(tool)), "-v", "--gpu-name", gpu, str(src), "-o",
                              str(Path(tmp) / "k.cubin")], capture_output=True, text=True, timeout=300)
    if log.returncode != 0:
        raise CodegenError(f"ptxas rejected the generated kernel's PTX: {log.stderr[-2000:]}")
    info = parse_ptxas_log(log.stdout + log.stderr)
    text = log.stdout + log.stderr
    info["warnings"] = [line.split("info    :", 1)[-1].strip() for line in text.splitlines()
                        if "Performance Loss" in line]
    return info


def _model_smem(schedule: Schedule) -> tuple[int, int]:
    """The model's peak shared memory (fold of its intervals) and its buffers: loop-invariant bytes plus, per
    interval (a loaded tile, a hand-off staging buffer), ``ceil(lifetime / II)`` copies of its bytes."""
    p = schedule.problem
    intervals = memory_intervals(p, schedule.ii, schedule.start, schedule.group, "smem")
    peak = max(fold(intervals, schedule.ii, p.fixed_smem)) if intervals else p.fixed_smem
    buffers = p.fixed_smem + sum(-(-iv.length // schedule.ii) * iv.weight for iv in intervals)
    return peak, buffers


def check_against(schedule: Schedule, graph: Any) -> None:
    """``CodegenError`` when ``schedule`` is not a schedule of ``graph`` (other op names or kinds)."""
    ops = {op.name: op.kind for op in graph.ops}
    sched = {op.name: op.kind for op in schedule.problem.ops}
    if ops != sched:
        missing = sorted(set(ops) - set(sched))
        extra = sorted(set(sched) - set(ops))
        kinds = sorted(n for n in set(ops) & set(sched) if ops[n] != sched[n])
        raise CodegenError(f"the schedule is not one of this kernel's loop ({graph.name}): ops missing from "
                           f"the schedule {missing}, ops the loop does not have {extra}, other kinds {kinds}")


def generate(schedule: Schedule, kernel: Any, machine: str | os.PathLike[str] | Machine | None = None,
             out_dir: str | os.PathLike[str] | None = None, *, compile: bool = True,
             default_group: int | None = None) -> GluonKernel:
    """Generate the Gluon kernel that executes ``schedule`` on ``kernel``'s loop, compile it and save it.

    Parameters
    ----------
    schedule : Schedule
        A schedule of the kernel's main loop for a Hopper machine.
    kernel : str, path-like or KernelSpec
        ``"file.py[::KERNEL]"`` with a ``TWILL_KERNELS`` entry, or a loaded spec.
    machine : str, path or Machine, optional
        The machine (its shared-memory limit is checked); default the schedule's.
    out_dir : path-like, optional
        Folder to write (default ``twill-gluon/<kernel>``).
    compile : bool
        Compile on the CPU and read registers, spills and shared memory (needed for the report's numbers).
    default_group : int, optional
        The warp group to make ``gl.warp_specialize``'s default partition. Default: the candidates of
        :func:`twill.codegen.gluon.plan.default_candidates` in order, the first without spills kept. On the
        H200 the choice moved the sub-tiled FA forward by 25 % (``benchmarks/h200_gluon.md``, "Which group
        is the default partition").

    Returns
    -------
    GluonKernel

    Raises
    ------
    CodegenError
        Another graph's schedule; an op without a lowering (op, kind, TTGIR line); a machine that is not
        Hopper; the compiled kernel over the machine's shared memory per CTA; Triton rejects the module;
        ``default_group`` not a warp group of the schedule.
    """
    from twill.frontend.compile import KernelSpec, compile_to_ttgir, load_kernel, target_for
    from twill.frontend.lower import lower_loop
    from twill.frontend.ttgir import parse_ttgir

    machine = load_machine(machine if machine is not None else schedule.machine)
    if machine.name != schedule.machine:
        raise CodegenError(f"the schedule was solved for {schedule.machine!r}, not {machine.name!r}")
    target = target_for(machine)
    if target not in _ARCH:
        raise CodegenError(f"the Gluon backend generates Hopper (sm_90) and Blackwell (sm_100) kernels; "
                           f"machine {machine.name!r} is {machine.arch}")
    spec = kernel if isinstance(kernel, KernelSpec) else load_kernel(os.fspath(kernel))
    snaps = compile_to_ttgir(spec, target=target)
    lowering = lower_loop(parse_ttgir(snaps.pre_swp), machine, name=spec.name)
    check_against(schedule, lowering.graph)
    check_lowerable(lowering, TMEM_OPS if target == "sm_100" else frozenset())
    folder = Path(out_dir) if out_dir is not None else Path("twill-gluon") / spec.name
    created = not folder.exists()
    before = set(folder.iterdir()) if folder.is_dir() else set()
    folder.mkdir(parents=True, exist_ok=True)
    try:
        desc_params = _desc_params(spec)
        threads = 32 * sum(g.warps for g in schedule.warp_groups)
        tried: list[str] = []
        best = None
        failure: CodegenError | None = None
        candidates = default_candidates(schedule, lowering)
        if default_group is not None:
            if default_group not in candidates:
                raise CodegenError(f"default_group {default_group} is not a warp group of the schedule "
                                   f"(groups {sorted(candidates)})")
            candidates = [default_group]
        for default in (candidates if compile else candidates[:1]):
            plan = make_plan(schedule, lowering, default)
            kt = blackwell_target(schedule, lowering, plan, machine) if target == "sm_100" else None
            source = emit_kernel(schedule, lowering, plan, spec, kt)
            module = _import_source(source.text, spec.name, folder)
            compiled, stats, shared, ptx_regs = None, {"registers": 0, "spill_store_bytes": 0,
                                                      "spill_load_bytes": 0}, 0, []
            if compile:
                sig = _signature(spec, desc_params)
                try:
                    compiled = compile_source(getattr(module, spec.name), sig, dict(spec.constexprs),
                                              source.num_warps, target)
                except CodegenError as exc:   # e.g. ptxas cannot allocate in the default's leftover budget
                    tried.append(f"group {default} as the default partition: {str(exc)[:300]}")
                    failure = failure or exc
                    continue
                ptx = compiled.asm["ptx"]
                stats = _ptxas(ptx, target)
                shared = int(compiled.metadata.shared)
                ptx_regs = [int(x) for x in re.findall(_SETMAXNREG, ptx)]
            spills = int(stats.get("spill_store_bytes", 0)) + int(stats.get("spill_load_bytes", 0))
            tried.append(f"group {default} as the default partition (Triton gives it "
                         f"{default_budget(schedule, default)} registers): ptxas spills {spills} B")
            if best is None or spills < best[0]:
                best = (spills, plan, source, compiled, stats, shared, ptx_regs, kt)
            if spills == 0:
                break
        if best is None:
            assert failure is not None
            raise CodegenError(f"{failure} (every default partition was tried: "
                               f"{'; '.join(tried)})") from failure
        _spills, plan, source, compiled, stats, shared, ptx_regs, kt = best
        _import_source(source.text, spec.name, folder)
        if compiled is not None:
            (folder / f"{spec.name}.ptx").write_text(compiled.asm["ptx"])
            if shared > machine.smem_per_cta:
                store = sum(b["bytes"] for b in source.buffers if b["what"] == "store staging")
                why = (f"; {store} B of it stage the epilogue's stores, which no loop buffer whose readers "
                       f"are done could hold (the model, which counts the loop's buffers, does not)"
                       if store else "")
                raise CodegenError(f"the generated kernel needs {shared} B of shared memory per CTA, more "
                                   f"than machine {machine.name!r} has ({machine.smem_per_cta} B){why}")
            tmem = int(getattr(compiled.metadata, "tmem_size", 0) or 0)
            if tmem > machine.tmem_columns:
                raise CodegenError(f"the compiled kernel allocates {tmem} tensor-memory columns, more than "
                                   f"machine {machine.name!r} has ({machine.tmem_columns})")
        if len(tried) > 1:
            source.notes.append("default partition chosen by compiling: " + "; ".join(tried))
        manifest = _manifest(spec, source, desc_params, plan)
        report = _report(schedule, machine, plan, source, shared, stats, ptx_regs, threads)
        if kt is not None:
            report = _with_tmem(report, schedule, kt.tm, compiled, target)
        (folder / "report.json").write_text(json.dumps(report.to_dict(), indent=2))
        (folder / "manifest.json").write_text(json.dumps(manifest, indent=2))
        (folder / "schedule.json").write_text(schedule.to_json(timings=False))
        return GluonKernel(folder, source.text, report, manifest, compiled)
    except CodegenError:  # no half-written folder: remove what this call wrote
        for path in set(folder.iterdir()) - before:
            if path.is_file():
                path.unlink()
        if created and not any(folder.iterdir()):
            folder.rmdir()
        raise


def _with_tmem(report: GluonReport, schedule: Schedule, tm: Any, compiled: Any, target: str) -> GluonReport:
    """``report`` with the tensor-memory numbers: columns allocated (per buffer), compiled, model peak."""
    from dataclasses import replace

    p = schedule.problem
    intervals = memory_intervals(p, schedule.ii, schedule.start, schedule.group, "tmem")
    peak = max(fold(intervals, schedule.ii, p.fixed_tmem)) if intervals else p.fixed_tmem
    bufs = {(b.value.name or b.name) + (f" (view of {b.alias_of})" if b.alias_of else ""):
            (0 if b.alias_of else b.columns) for b in tm.buffers}
    tmem = int(getattr(compiled.metadata, "tmem_size", 0) or 0) if compiled is not None else 0
    notes = tuple(report.notes) + tuple(tm.notes)
    return replace(report, target=target, tmem_columns=tm.columns, tmem_compiled=tmem, tmem_model_peak=peak,
                   tmem_limit=tm.limit, tmem_buffers=bufs, notes=notes)


def _desc_params(spec: Any) -> dict[str, tuple[tuple[int, ...], str]]:
    out = {}
    for a, t in spec.signature.items():
        m = re.fullmatch(r"tensordesc<(\w+)\[([\d,\s]+)\]>", t.strip())
        if m:
            elem = {"fp16": "f16", "bf16": "bf16", "fp32": "f32"}[m.group(1)]
            out[a] = (tuple(int(x) for x in m.group(2).split(",")), elem)
    return out


def _manifest(spec: Any, source: KernelSource, desc_params: dict[str, Any], plan: Plan) -> dict[str, Any]:
    return {"kind": "twill.gluon_kernel", "version": 1, "kernel": spec.name, "source": "kernel.py",
            "arg_names": list(spec.fn.arg_names), "constexprs": dict(spec.constexprs),
            "descriptors": {a: {"block_shape": list(s), "dtype": e} for a, (s, e) in desc_params.items()},
            "num_warps": source.num_warps,
            "partitions": [{"position": p.position, "group": p.group, "warps": p.warps, "regs": p.regs}
                           for p in plan.partitions]}


def _report(schedule: Schedule, machine: Machine, plan: Plan, source: KernelSource, shared: int,
            stats: dict[str, Any], ptx_regs: list[int], threads: int) -> GluonReport:
    peak, buffers = _model_smem(schedule)
    barrier_bytes = MBARRIER_BYTES * source.barriers
    allocated = sum(b["bytes"] for b in source.buffers)
    diff: dict[str, int] = {}
    store = sum(b["bytes"] for b in source.buffers if b["what"] == "store staging")
    if store:
        diff["epilogue store staging (not in the model)"] = store
    handed = sum(b["bytes"] for b in source.buffers if b["what"].startswith("after-loop hand-off"))
    if handed:
        diff["after-loop hand-offs of loop results between partitions (not in the model)"] = handed
    diff["mbarriers"] = barrier_bytes
    rest = shared - (allocated + barrier_bytes) if shared else 0
    if rest:
        diff["alignment and Triton scratch"] = rest
    ring_model = allocated - store - handed - buffers
    if ring_model:
        diff["buffers beyond the model's (depth x bytes)"] = ring_model
    parts = []
    for p in plan.partitions:
        got: int | None = p.regs if p.regs in ptx_regs else None
        if p.position == 0:
            expect = default_budget(schedule, p.group)
            got = expect if expect in ptx_regs else None
        parts.append(PartitionReport(p.position, p.group, p.role, p.warps, p.regs, got, tuple(p.order),
                                     tuple(source.tc_order.get(p.position, [])), p.stages))
    not_kept = ["exact start times inside the II: only the issue order of each partition is kept (the "
                "hardware and ptxas set the timing)"]
    for warning in stats.get("warnings", []):
        not_kept.append(f"ptxas: {warning}")
    default = plan.partitions[0]
    if parts[0].setmaxnreg_ptx is not None and parts[0].setmaxnreg_ptx != default.regs:
        not_kept.append(f"default partition (group {default.group}) budget: the schedule asks "
                        f"{default.regs}, Triton gives {parts[0].setmaxnreg_ptx} (what the workers leave)")
    notes = list(plan.notes) + source.notes
    return GluonReport(source.kernel, schedule.machine, schedule.ii, schedule.stages, tuple(parts),
                       {r.node: r.depth for r in plan.rings.values()}, shared, peak, buffers, barrier_bytes,
                       diff, machine.smem_per_cta, int(stats.get("registers", 0)),
                       int(stats.get("spill_store_bytes", 0)), int(stats.get("spill_load_bytes", 0)),
                       source.num_warps, threads, tuple(not_kept), tuple(notes))
