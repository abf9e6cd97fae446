"""Finish Triton's compile from an edited TTGIR, and read what the compiler made of it (CPU only).

:func:`finish_compile` runs ``triton.compile`` on the kernel's own :class:`~triton.compiler.ASTSource` (so
the result has the JIT's signature, metadata and launcher) with the ``ttgir`` stage replaced: instead of
``make_ttgir``, it parses the edited scheduled TTGIR and runs the rest of Triton 3.6's ``make_ttgir``
from the software pipeliner on (``shared/docs/ttgir-probe.md``, "Re-entry works"). The LLVM IR, PTX and
cubin stages are Triton's own. Every compile gets its own cache key (the edited text's digest), so an
applied kernel never collides with the JIT's compile of the same function. With ``peel=True`` the stage
also peels the pipelined loop's last iteration (:mod:`twill.apply.peel`) after Triton's passes.

:func:`compiled_stats` reads registers, spills, shared memory, threads and ``setmaxnreg`` budgets from
the PTX with the ``ptxas`` in the Triton wheel, and the multi-buffered allocations and the shape of the
main loop from the final TTGIR.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
import tempfile
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from twill.apply import peel as apply_peel
from twill.apply.peel import peel_last_iteration
from twill.errors import FrontendError
from twill.frontend.ttgir_text import split_top_level

__all__ = ["PEEL_KEY", "CompileStats", "compiled_stats", "finish_compile", "tail_passes"]

_HOOK_LOCK = threading.Lock()


def tail_passes(pm: Any, options: Any, capability: int) -> None:
    """``make_ttgir`` of Triton 3.6 from the software pipeliner to its end (sm_90 and sm_100)."""
    from triton._C.libtriton import nvidia, passes

    if capability // 10 == 9:
        passes.ttgpuir.add_pipeline(pm, options.num_stages, False)
    else:
        passes.ttgpuir.add_warp_specialize(pm, options.num_stages)
        passes.ttgpuir.add_pipeline(pm, options.num_stages, False)
        passes.ttgpuir.add_optimize_partition_warps(pm)
        passes.ttgpuir.add_combine_tensor_select_and_if(pm)
        passes.ttgpuir.add_hoist_tmem_alloc(pm, True)
        nvidia.passes.ttnvgpuir.add_remove_tmem_tokens(pm)
    passes.common.add_canonicalizer(pm)
    passes.ttir.add_loop_aware_cse(pm)
    passes.ttgpuir.add_prefetch(pm)
    passes.ttgpuir.add_optimize_dot_operands(pm, capability >= 80)
    passes.ttgpuir.add_coalesce_async_copy(pm)
    nvidia.passes.ttnvgpuir.add_optimize_tmem_layouts(pm)
    nvidia.passes.ttnvgpuir.add_tma_lowering(pm)
    passes.ttgpuir.add_remove_layout_conversions(pm)
    nvidia.passes.ttnvgpuir.add_interleave_tmem(pm)
    passes.ttgpuir.add_reduce_data_duplication(pm)
    passes.ttgpuir.add_reorder_instructions(pm)
    passes.ttir.add_loop_aware_cse(pm)
    passes.common.add_symbol_dce(pm)
    nvidia.passes.ttnvgpuir.add_fence_insertion(pm, capability)
    nvidia.passes.ttnvgpuir.add_lower_mma(pm)
    passes.common.add_sccp(pm)
    passes.common.add_cse(pm)
    passes.common.add_canonicalizer(pm)


_PEEL_CODE = hashlib.sha256(Path(apply_peel.__file__).read_bytes()).hexdigest()[:16]
"""Digest of :mod:`twill.apply.peel`'s source, in the cache key of a peeled compile (a changed peel must
not reuse a cubin that Triton cached for the old one)."""

PEEL_KEY = "twill_peel"
"""Metadata key of a compiled kernel whose last loop iteration twill peeled (:mod:`twill.apply.peel`): a
dict with ``stage_predicates``, how many predicates of the loop body are ``false`` in the peeled copy."""


@contextmanager
def _ttgir_override(path: Path, peel: bool) -> Iterator[None]:
    """Replace Triton's ``ttgir`` stage by: parse ``path``, run :func:`tail_passes` (then, with ``peel``,
    peel the pipelined loop's last iteration and canonicalize; the result goes into the metadata)."""
    from triton import knobs
    from triton._C.libtriton import ir, passes

    def hook(backend: Any, stages: dict[str, Any], options: Any, language: Any, capability: int) -> None:
        def ttgir(module: Any, metadata: dict[str, Any]) -> Any:
            edited = ir.parse_mlir_module(str(path), module.context)
            edited.context = module.context
            pm = ir.pass_manager(module.context)
            pm.enable_debug()
            tail_passes(pm, options, capability)
            pm.run(edited, "twill_apply")
            if peel:
                text, done = peel_last_iteration(str(edited))
                if done is not None:
                    peeled = path.with_suffix(".peeled.ttgir")
                    peeled.write_text(text, encoding="utf-8")
                    edited = ir.parse_mlir_module(str(peeled), module.context)
                    edited.context = module.context
                    pm = ir.pass_manager(module.context)
                    passes.common.add_canonicalizer(pm)
                    passes.common.add_cse(pm)
                    pm.run(edited, "twill_peel")
                    metadata[PEEL_KEY] = {"stage_predicates": len(done.predicates)}
            metadata["tensordesc_meta"] = edited.get_tensordesc_metadata()
            return edited

        stages["ttgir"] = ttgir

    with _HOOK_LOCK:
        previous = knobs.runtime.add_stages_inspection_hook
        knobs.runtime.add_stages_inspection_hook = hook
        try:
            yield
        finally:
            knobs.runtime.add_stages_inspection_hook = previous


def finish_compile(spec: Any, ttgir: str, *, target: str, num_stages: int, divisible: Any = None,
                   peel: bool = False) -> Any:
    """Compile ``spec``'s kernel with the TTGIR ``ttgir`` in place of Triton's own pipelining input.

    Parameters
    ----------
    spec : twill.frontend.KernelSpec
        The kernel (its signature, constexprs, ``num_warps`` and divisibility hints are used).
    ttgir : str
        Scheduled TTGIR with ``loop.stage``/``loop.cluster`` (and on sm_100 ``ttg.partition``) set.
    target : str
        ``sm_90`` or ``sm_100``.
    num_stages : int
        ``num_stages`` option handed to the pipeliner (the schedule's stage count).
    divisible : iterable of str, optional
        Arguments given ``tt.divisibility = 16``; default as :func:`twill.frontend.compile_to_ttgir`.
    peel : bool
        Peel the pipelined loop's last iteration after Triton's passes (:mod:`twill.apply.peel`); the
        compiled kernel's metadata then holds :data:`PEEL_KEY` if it was done (a loop in another form is
        left alone).

    Returns
    -------
    triton.compiler.CompiledKernel
        Not yet loaded on a device (loading happens at the first launch).

    Raises
    ------
    FrontendError
        Triton rejects the TTGIR or fails in a later stage (its message is kept).
    """
    import triton
    from triton.backends.compiler import GPUTarget

    from twill.frontend.compile import default_divisible, kernel_source, stderr_to, target_capability

    capability = target_capability(target)
    hinted = divisible if divisible is not None else (
        spec.divisible if spec.divisible is not None else default_divisible(spec.fn, spec.signature))
    src = kernel_source(spec, spec.constexprs, hinted)
    digest = hashlib.sha256(ttgir.encode()).hexdigest()[:16]
    with tempfile.TemporaryDirectory(prefix="twill-apply-") as tmp:
        path = Path(tmp) / f"{spec.name}.{target}.ttgir"
        path.write_text(ttgir, encoding="utf-8")
        log = Path(tmp) / "compiler.log"
        try:
            with _ttgir_override(path, peel), stderr_to(str(log)):
                compiled = triton.compile(src, target=GPUTarget("cuda", capability, 32),
                                          options={"num_warps": spec.num_warps, "num_stages": num_stages},
                                          _env_vars={"TWILL_APPLY_TTGIR": digest,
                                                     "TWILL_APPLY_PEEL": _PEEL_CODE if peel else "0"})
        except Exception as exc:  # Triton raises RuntimeError, CompilationError, AssertionError, ...
            raise FrontendError(f"Triton cannot finish the compile of {spec.name!r} for {target} from the "
                                f"applied TTGIR: {type(exc).__name__}: {str(exc).strip()[:2000]}"
                                f"{_compiler_says(log, spec.name)}") from exc
        said = log.read_text(encoding="utf-8", errors="replace")
        if said:  # warnings of a compile that worked go where they would have gone
            sys.stderr.write(said)
        return compiled


_NOTABLE = re.compile(r"error:|UNREACHABLE|not supported|Assertion|LLVM ERROR")


def _compiler_says(log: Path, name: str) -> str:
    """The notable lines of a failed compile's diagnostics, and where the whole text is kept."""
    text = log.read_text(encoding="utf-8", errors="replace") if log.exists() else ""
    if not text.strip():
        return ""
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    kept = Path(tempfile.gettempdir()) / f"twill-apply-{name}-{digest}.log"
    kept.write_text(text, encoding="utf-8")
    lines = [line.strip() for line in text.splitlines() if _NOTABLE.search(line)][:8]
    return ("; Triton says: " + " | ".join(lines) if lines else "") + f" (its whole output: {kept})"


@dataclass(frozen=True)
class CompileStats:
    """What the compiler made of one kernel.

    Attributes
    ----------
    registers : int
        Registers per thread (``ptxas -v``; the launch cap ``.maxnreg`` for warp-specialized kernels).
    spill_store_bytes, spill_load_bytes : int
        Per thread.
    shared_bytes : int
        Dynamic shared memory per CTA.
    smem_fits : bool
        ``shared_bytes`` within ``smem_limit`` (Triton does not check the machine's limit at compile time)
        and the kernel is not :attr:`trap_only`.
    num_warps, threads : int
        Warps of the CTA (``metadata.num_warps``) and threads at launch.
    setmaxnreg : tuple of (str, int)
        ``setmaxnreg`` budgets in the PTX (warp-specialized kernels).
    buffers : dict of str to str
        Multi-buffered shared allocations of the final TTGIR, by Triton's SSA name of the allocation
        (``{"k": "3x128x128xf16"}``; a tile may carry the name of the value that reads it first, and a
        second allocation under one name is ``name#2``).
    pipelined : bool
        The main loop was software-pipelined (loads issued in a prologue before the loop).
    warp_specialize : int
        Partitions of a ``ttg.warp_specialize`` op (0 if none).
    loop_iter_args : int
        Loop-carried values of the main loop after pipelining.
    trap_only : bool
        The kernel's PTX body is a single ``trap`` (what Triton emits for a kernel whose shared memory
        is over the limit): the other fields then describe no real code.
    smem_limit : int
        Shared memory a CTA may use on the machine the kernel was compiled for (bytes; the machine's
        ``memory.smem_per_cta``).
    """

    registers: int
    spill_store_bytes: int
    spill_load_bytes: int
    shared_bytes: int
    smem_fits: bool
    num_warps: int
    threads: int
    setmaxnreg: tuple[tuple[str, int], ...] = ()
    buffers: Mapping[str, str] = field(default_factory=dict)
    pipelined: bool = False
    warp_specialize: int = 0
    loop_iter_args: int = 0
    trap_only: bool = False
    smem_limit: int = 0

    def to_dict(self) -> dict[str, Any]:
        """Plain data (JSON-ready)."""
        d = asdict(self)
        d["setmaxnreg"] = [list(x) for x in self.setmaxnreg]
        d["buffers"] = dict(self.buffers)
        return d

    def summary(self) -> str:
        """One line: registers, spills, shared memory, buffers."""
        spill = (f", spills {self.spill_store_bytes}/{self.spill_load_bytes} B" if
                 self.spill_store_bytes or self.spill_load_bytes else ", no spills")
        bufs = ", ".join(f"{k} x{v.split('x')[0]}" for k, v in self.buffers.items())
        ws = f", {self.warp_specialize} partitions" if self.warp_specialize else ""
        fit = "" if self.smem_fits else f" (OVER THE LIMIT of {self.smem_limit} B)"
        if self.trap_only:
            return (f"no kernel: Triton emitted only a trap (it needs {self.shared_bytes} B of shared memory"
                    f"{fit.lower()})")
        return (f"{self.registers} regs{spill}, smem {self.shared_bytes} B{fit}, {self.num_warps} warps"
                f"{ws}; buffers: {bufs or 'none'}; {'pipelined' if self.pipelined else 'NOT pipelined'}")


_ALLOC = re.compile(r"%(?P<name>[A-Za-z_][\w]*?)(?:_\d+)? = ttg\.local_alloc\s*(?:\{[^}]*\})?\s*: \(\) -> "
                    r"!ttg\.memdesc<(?P<shape>(?:\d+x){3,}\w+)")


def _loop_shape(ttgir: str) -> tuple[bool, int]:
    """(loads issued before the first loop, iter_args of the first scf.for) of a final TTGIR."""
    lines = ttgir.splitlines()
    loop_at = next((i for i, t in enumerate(lines) if re.search(r"= scf\.for ", t)), None)
    if loop_at is None:
        return False, 0
    before = "\n".join(lines[:loop_at])
    copies = len(re.findall(r"ttng\.async_tma_copy_global_to_local|ttg\.async_copy_global_to_local", before))
    header = lines[loop_at]
    start = header.find("iter_args(")
    if start < 0:
        return copies, 0
    first = start + len("iter_args(")
    depth, end = 0, len(header)
    for pos in range(first, len(header)):
        depth += {"(": 1, "<": 1, "[": 1, "{": 1, ")": -1, ">": -1, "]": -1, "}": -1}.get(header[pos], 0)
        if depth < 0:
            end = pos
            break
    inner = header[first:end]
    return copies, len(split_top_level(inner)) if inner.strip() else 0


def compiled_stats(compiled: Any, *, target: str, smem_limit: int, invariant_loads: int = 0) -> CompileStats:
    """Registers, spills, shared memory and loop shape of a compiled kernel, without a GPU.

    Parameters
    ----------
    compiled : triton.compiler.CompiledKernel
    target : str
        ``sm_90`` or ``sm_100`` (picks ``ptxas`` or ``ptxas-blackwell``).
    smem_limit : int
        Bytes of shared memory a CTA may use on the machine (:attr:`twill.ir.machine.Machine.smem_per_cta`);
        ``smem_fits`` compares the compiled kernel's allocation with it.
    invariant_loads : int
        Loads issued before the loop whatever the schedule (the Q tile); more than these in the final
        TTGIR means the loop was pipelined.
    """
    from twill.calibrate.regs import parse_ptx, parse_ptxas_log, run_triton_tool
    from twill.frontend.targets import target_capability

    capability = target_capability(target)
    ptx = compiled.asm["ptx"]
    with tempfile.TemporaryDirectory(prefix="twill-ptxas-") as tmp:
        path = Path(tmp) / "k.ptx"
        path.write_text(ptx, encoding="utf-8")
        tool = "ptxas-blackwell" if capability >= 100 else "ptxas"
        log = run_triton_tool(tool, ["-v", f"--gpu-name=sm_{capability}a", str(path), "-o", os.devnull])
    info = parse_ptxas_log(log.stdout + log.stderr)
    ptx_info = parse_ptx(ptx)
    body = ptx[ptx.find(".entry"):]
    instructions = [line.strip() for line in body.splitlines()
                    if line.strip() and not line.strip().startswith((".", "//", "{", "}", "(", ")", "$"))]
    ttgir = compiled.asm["ttgir"]
    buffers: dict[str, str] = {}
    for m in _ALLOC.finditer(ttgir):
        if m["shape"].endswith("i64"):  # barriers
            continue
        key, k = m["name"], 1
        while key in buffers:  # two allocations under one name: keep both
            k += 1
            key = f"{m['name']}#{k}"
        buffers[key] = m["shape"]
    copies, iter_args = _loop_shape(ttgir)
    meta = compiled.metadata
    shared = int(getattr(meta, "shared", 0))
    ws = re.search(r"ttg\.warp_specialize\(", ttgir)
    parts = len(re.findall(r"^\s*partition\d+\(", ttgir, re.M)) + 1 if ws else 0
    return CompileStats(
        registers=info["registers"], spill_store_bytes=info["spill_store_bytes"],
        spill_load_bytes=info["spill_load_bytes"], shared_bytes=shared,
        smem_fits=shared <= smem_limit and instructions != ["trap;"], num_warps=int(meta.num_warps),
        threads=int(ptx_info["threads"] or 32 * int(meta.num_warps)), setmaxnreg=ptx_info["setmaxnreg"],
        buffers=buffers, pipelined=copies > invariant_loads or bool(ws), warp_specialize=parts,
        loop_iter_args=iter_args, trap_only=instructions == ["trap;"], smem_limit=smem_limit)


def partition_regions(ttgir: str) -> dict[int, dict[str, int]]:
    """Op counts per partition of the ``ttg.warp_specialize`` op in a final TTGIR.

    The ``default`` region is partition 0 and region ``partitionN`` is partition ``N + 1`` (Triton keeps
    the order of ``ttg.partition`` ids). Returns ``{}`` when the kernel is not warp-specialized.
    """
    counts: dict[int, dict[str, int]] = {}
    current: int | None = None
    indent = 0
    for line in ttgir.splitlines():
        stripped = line.strip()
        head = re.match(r"(default|partition(\d+))\b.*\{$", stripped)
        if head and "ttg.warp_specialize" not in stripped:
            current = 0 if head.group(1) == "default" else int(head.group(2)) + 1
            indent = len(line) - len(line.lstrip())
            counts.setdefault(current, {})
            continue
        if current is None:
            continue
        if stripped.startswith("}") and len(line) - len(line.lstrip()) == indent:
            current = None
            continue
        op = re.match(r'(?:%[\w#:, %]+ = )?"?([a-z_]+\.[\w.]+)', stripped)
        if op:
            counts[current][op.group(1)] = counts[current].get(op.group(1), 0) + 1
    return counts
