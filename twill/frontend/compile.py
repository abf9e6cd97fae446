"""Compile a ``@triton.jit`` kernel to TTGIR on the CPU and keep the snapshots twill needs.

A kernel file tells twill how to compile each kernel without running it, in a module-level dict::

    TWILL_KERNELS = {
        "attn_fwd": {"signature": {"q_desc": "tensordesc<fp16[128, 128]>", "seq_len": "i32", ...},
                     "constexprs": {"BLOCK_M": 128, ...}, "num_warps": 8, "num_stages": 3,
                     "default": True},
    }

An entry is named after its JIT function, or names it with ``"kernel": "fn"`` (several entries, e.g. one
per target with different constexprs, can share one function).

:func:`load_kernel` imports the file and picks the kernel; :func:`compile_to_ttgir` runs Triton 3.6's
front end (AST -> TTIR -> TTGIR) with the pass list of ``make_ttgir`` in
``triton/backends/nvidia/compiler.py``, cut just before Triton's own software pipelining:

* ``pre_swp``: sm_90 stops before ``add_hopper_warpspec``/``add_assign_latencies``; sm_100 stops before
  ``add_assign_latencies``. MMA ops, layouts, TMEM allocation and LICM are done; the loop is plain SSA.
* ``scheduled``: ``pre_swp`` after ``add_assign_latencies`` + ``add_schedule_loops``: Triton's own
  modulo schedule as ``loop.stage``/``loop.cluster`` attributes, the reference to compare twill with.

Both are printed with source locations (``loc(...)``, ``file:line:col`` of each op). No GPU is needed.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import sys
import warnings
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from twill.errors import FrontendError, TwillWarning
from twill.frontend.targets import target_capability, target_for

__all__ = ["KernelSpec", "TTGIRSnapshots", "TritonPipeline", "compile_to_ttgir", "default_divisible",
           "kernel_source", "load_kernel", "stderr_to", "target_capability", "target_for",
           "triton_error_reason", "triton_pipeline"]

_INT_TYPES = ("i32", "i64", "u32", "u64")
_SPEC_KEYS = {"kernel", "signature", "constexprs", "num_warps", "num_stages", "default", "divisible"}


@dataclass(frozen=True)
class KernelSpec:
    """A JIT kernel and what is needed to compile it without running it.

    Attributes
    ----------
    fn : triton.runtime.JITFunction
        The kernel.
    name : str
        Its ``TWILL_KERNELS`` entry (the JIT function's name unless the entry names another with
        ``"kernel"``).
    source : str
        The file it was loaded from (``""`` if built in memory).
    signature : mapping of str to str
        Triton type string per non-constexpr argument (``"*fp16"``, ``"i32"``, ``"fp32"``,
        ``"tensordesc<fp16[128, 64]>"``).
    constexprs : mapping of str to object
        Values of the ``tl.constexpr`` arguments.
    num_warps, num_stages : int
        Compile options.
    divisible : tuple of str or None
        Arguments given the ``tt.divisibility = 16`` hint; ``None``: every pointer and integer argument
        (:func:`default_divisible`).
    """

    fn: Any
    name: str
    source: str
    signature: Mapping[str, str]
    constexprs: Mapping[str, Any] = field(default_factory=dict)
    num_warps: int = 4
    num_stages: int = 3
    divisible: tuple[str, ...] | None = None


@dataclass(frozen=True)
class TTGIRSnapshots:
    """TTGIR of one kernel at the points twill needs (text with source locations).

    Attributes
    ----------
    kernel, source, target : str
        Kernel name, its file, and the target (``sm_90`` or ``sm_100``).
    num_warps, num_stages : int
        Compile options used.
    ttir : str
        Triton IR after ``make_ttir``.
    pre_swp : str
        TTGIR before Triton's software pipelining and warp specialization (the graph's input).
    scheduled : str
        ``pre_swp`` after Triton's latency assignment and loop scheduling (``loop.stage`` attributes).
    split_tmem_loads : bool
        True when twill ran Triton's ``OptimizeTMemLayouts`` ahead of the pipeliner (sm_100 kernels that
        split a tile; :func:`_split_tmem_loads`): right for the graph, not a TTGIR to pipeline.
    """

    kernel: str
    source: str
    target: str
    num_warps: int
    num_stages: int
    ttir: str
    pre_swp: str
    scheduled: str
    split_tmem_loads: bool = False

    def save(self, folder: str | os.PathLike[str]) -> dict[str, Path]:
        """Write ``<kernel>.<target>.{ttir,pre_swp.ttgir,scheduled.ttgir}`` into ``folder``.

        Returns the paths written, keyed ``ttir``, ``pre_swp`` and ``scheduled``.
        """
        out = Path(folder)
        out.mkdir(parents=True, exist_ok=True)
        stem = f"{self.kernel}.{self.target}"
        paths = {"ttir": out / f"{stem}.ttir", "pre_swp": out / f"{stem}.pre_swp.ttgir",
                 "scheduled": out / f"{stem}.scheduled.ttgir"}
        for key, path in paths.items():
            path.write_text(getattr(self, key), encoding="utf-8")
        return paths


def _jit_functions(module: Any) -> dict[str, Any]:
    from triton.runtime.jit import JITFunction

    found = {}
    for name, obj in vars(module).items():
        inner = obj
        while not isinstance(inner, JITFunction) and hasattr(inner, "fn"):
            inner = inner.fn
        if isinstance(inner, JITFunction):
            found[name] = inner
    return found


def _import_file(path: Path) -> Any:
    digest = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:10]
    name = f"_twill_kernel_{path.stem}_{digest}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise FrontendError(f"cannot import {path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        sys.modules.pop(name, None)
        raise FrontendError(f"cannot import {path}: {type(exc).__name__}: {exc}") from exc
    return module


def _pick(path: Path, entries: Mapping[str, Any], wanted: str | None) -> str:
    listing = ", ".join(sorted(entries)) or "none"
    if wanted is not None:
        if wanted not in entries:
            raise FrontendError(f"{path} has no TWILL_KERNELS entry {wanted!r}; entries: {listing}")
        return wanted
    if len(entries) == 1:
        return next(iter(entries))
    defaults = [k for k, v in entries.items() if isinstance(v, Mapping) and v.get("default")]
    if len(defaults) == 1:
        return defaults[0]
    raise FrontendError(f"{path} has {len(entries)} TWILL_KERNELS entries and {len(defaults)} marked "
                        f"default; name one with '{path}::KERNEL' (entries: {listing})")


def _spec_from_entry(path: Path, name: str, fn: Any, entry: Any) -> KernelSpec:
    where = f"{path}: TWILL_KERNELS[{name!r}]"
    if not isinstance(entry, Mapping) or not isinstance(entry.get("signature"), Mapping):
        raise FrontendError(f"{where} must be a dict with a 'signature' dict")
    unknown = set(entry) - _SPEC_KEYS
    if unknown:
        raise FrontendError(f"{where} has unknown key(s) {', '.join(sorted(unknown))}; allowed: "
                            f"{', '.join(sorted(_SPEC_KEYS))}")
    divisible = entry.get("divisible")
    return KernelSpec(fn, name, str(path), dict(entry["signature"]), dict(entry.get("constexprs", {})),
                      int(entry.get("num_warps", 4)), int(entry.get("num_stages", 3)),
                      tuple(divisible) if divisible is not None else None)


def load_kernel(spec: str | os.PathLike[str]) -> KernelSpec:
    """Import a kernel file and return the kernel it names with its ``TWILL_KERNELS`` entry.

    Parameters
    ----------
    spec : str or path-like
        ``"path/to/file.py"`` or ``"path/to/file.py::KERNEL"``. Without ``::KERNEL`` the file must have
        one ``TWILL_KERNELS`` entry, or exactly one marked ``"default": True``.

    Raises
    ------
    FrontendError
        The file is missing or fails to import; it has no ``TWILL_KERNELS`` dict; the kernel or its
        entry is missing (the message lists the JIT functions and entries that exist); the entry is
        malformed.
    """
    text = os.fspath(spec)
    file_part, _, wanted = text.partition("::")
    path = Path(file_part)
    if not path.is_file():
        raise FrontendError(f"kernel file {file_part!r} does not exist")
    module = _import_file(path)
    functions = _jit_functions(module)
    entries = getattr(module, "TWILL_KERNELS", None)
    jits = ", ".join(sorted(functions)) or "none"
    if not isinstance(entries, Mapping):
        raise FrontendError(f"{path} has no TWILL_KERNELS dict telling twill how to compile its kernels "
                            f"(JIT functions in the file: {jits})")
    name = _pick(path, entries, wanted or None)
    entry = entries[name]
    fn_name = entry.get("kernel", name) if isinstance(entry, Mapping) else name
    if fn_name not in functions:
        raise FrontendError(f"{path}: TWILL_KERNELS entry {name!r} names no @triton.jit function "
                            f"{fn_name!r} (JIT functions in the file: {jits})")
    return _spec_from_entry(path, name, functions[fn_name], entry)


def default_divisible(fn: Any, signature: Mapping[str, str]) -> tuple[str, ...]:
    """Arguments the JIT would mark ``tt.divisibility = 16`` for typical sizes: pointers and integers.

    The JIT adds the hint when a pointer is 16-byte aligned or an integer is a multiple of 16; compiling
    without values, twill assumes both (shared/docs/ttgir-probe.md, gotchas).
    """
    return tuple(a for a in fn.arg_names
                 if a in signature and (signature[a].startswith("*") or signature[a] in _INT_TYPES))


def _resolve(kernel: Any, signature: Mapping[str, str] | None) -> KernelSpec:
    if isinstance(kernel, KernelSpec):
        return kernel if signature is None else replace(kernel, signature=dict(signature))
    if isinstance(kernel, str | os.PathLike):
        loaded = load_kernel(kernel)
        return loaded if signature is None else replace(loaded, signature=dict(signature))
    if not hasattr(kernel, "arg_names"):
        raise FrontendError(f"cannot compile {kernel!r}: expected a kernel file spec, a KernelSpec or a "
                            "@triton.jit function")
    if signature is None:
        raise FrontendError(f"kernel {kernel.__name__!r} has no signature; pass signature=...")
    return KernelSpec(kernel, kernel.__name__, "", dict(signature))


def _check_types(kernel: str, signature: Mapping[str, str]) -> None:
    """:class:`FrontendError` naming the argument whose signature type Triton cannot read (Triton itself
    fails later with a bare ``KeyError: 'fp8'``)."""
    from triton.language import str_to_ty

    for arg, text in signature.items():
        if text == "constexpr":
            continue
        try:
            str_to_ty(text, None)
        except Exception as exc:  # Triton's parser raises KeyError, ValueError or IndexError
            raise FrontendError(
                f"kernel {kernel!r}: argument {arg!r} has type {text!r}, which Triton cannot read "
                f"({type(exc).__name__}: {exc}); types look like fp16, bf16, fp32, fp8e4nv, fp8e5, i32, i64, "
                f"*fp16 (a pointer) or tensordesc<fp16[128, 64]>") from exc


def kernel_source(spec: KernelSpec, constexprs: Mapping[str, Any], divisible: Iterable[str]) -> Any:
    """Triton's ``ASTSource`` for ``spec`` with the ``constexprs`` bound and ``divisible`` arguments hinted.

    ``divisible`` names the pointer/integer arguments Triton may assume are multiples of 16 (its
    ``tt.divisibility`` hint). Raises :class:`FrontendError` naming the kernel and each argument that has
    neither a type in the signature nor a constexpr value.
    """
    from triton.compiler.compiler import ASTSource

    fn = spec.fn
    missing = [a for a in fn.arg_names if a not in spec.signature and a not in constexprs]
    if missing:
        raise FrontendError(f"kernel {spec.name!r}: no type or constexpr value for argument(s) "
                            f"{', '.join(missing)}")
    unknown = [k for k in constexprs if k not in fn.arg_names]
    if unknown:
        raise FrontendError(f"kernel {spec.name!r} has no argument(s) {', '.join(map(repr, unknown))} "
                            f"for the constexpr value(s) given; its arguments are {', '.join(fn.arg_names)}")
    signature = {a: "constexpr" if a in constexprs else spec.signature[a] for a in fn.arg_names}
    _check_types(spec.name, signature)
    wanted = set(divisible)
    attrs = {(i,): [["tt.divisibility", 16]] for i, a in enumerate(fn.arg_names) if a in wanted}
    return ASTSource(fn, signature, dict(constexprs), attrs)


def _pre_swp_passes(pm: Any, opt: Any, capability: int) -> None:
    """The front of Triton 3.6 ``make_ttgir``, up to (excluding) Triton's own pipelining passes."""
    from triton._C.libtriton import nvidia, passes

    passes.ttir.add_convert_to_ttgpuir(pm, f"cuda:{capability}", opt.num_warps, 32, opt.num_ctas)
    passes.ttgpuir.add_coalesce(pm)
    passes.ttgpuir.add_f32_dot_tc(pm, capability // 10 >= 8)
    nvidia.passes.ttnvgpuir.add_plan_cta(pm)
    passes.ttgpuir.add_remove_layout_conversions(pm)
    passes.ttgpuir.add_optimize_thread_locality(pm)
    passes.ttgpuir.add_accelerate_matmul(pm)
    passes.ttgpuir.add_remove_layout_conversions(pm)
    passes.ttgpuir.add_optimize_dot_operands(pm, capability >= 80)
    nvidia.passes.ttnvgpuir.add_optimize_descriptor_encoding(pm)
    passes.ttir.add_loop_aware_cse(pm)
    passes.ttgpuir.add_fuse_nested_loops(pm)
    passes.common.add_canonicalizer(pm)
    passes.ttir.add_triton_licm(pm)
    if capability // 10 == 9:
        passes.common.add_canonicalizer(pm)
        passes.ttgpuir.add_combine_tensor_select_and_if(pm)
    else:
        passes.ttgpuir.add_optimize_accumulator_init(pm)
        passes.ttgpuir.add_hoist_tmem_alloc(pm, False)
        nvidia.passes.ttnvgpuir.add_promote_lhs_to_tmem(pm)


_LAYOUT_ONLY = frozenset({"tt.trans", "tt.reshape", "ttg.convert_layout"})


def _splits_a_tmem_load(text: str) -> bool:
    """True when a ``tt.split`` inside a loop takes a ``ttng.tmem_load`` result (through transposes,
    reshapes and layout conversions): a tensor-memory tile split into halves in registers."""
    if "tt.split" not in text:
        return False
    from twill.frontend.ttgir import parse_ttgir

    for op in parse_ttgir(text).ops():
        if op.name != "tt.split" or not op.operands or not any(a.name == "scf.for" for a in op.ancestors()):
            continue
        value = op.operands[0]
        while value.owner is not None and value.owner.name in _LAYOUT_ONLY and value.owner.operands:
            value = value.owner.operands[0]
        if value.owner is not None and value.owner.name == "ttng.tmem_load":
            return True
    return False


def _split_tmem_loads(pm: Any) -> None:
    """Triton's ``OptimizeTMemLayouts`` and a layout clean-up, on sm_100 kernels that split a tile.

    A kernel that splits a tensor-memory accumulator into column halves in registers (the
    ``reshape([M, 2, N/2])``, ``permute``, ``split`` idiom of Triton's Blackwell tutorials) gets, from
    this pass, one ``tmem_load`` of a ``tmem_subslice`` per half and no layout conversion; Triton runs
    it after its pipeliner, so without it the graph would show one whole load and a shared-memory
    layout round trip that the compiled kernel does not have (checked on the final TTGIR of
    ``examples/flash_attention_bwd.py::attn_bwd_split_sm100``, docs/frontend.md §10). The pass also
    re-picks the layout of a ``tmem_load`` that feeds a reduction, so it runs only on kernels that split a
    ``tmem_load`` result (:func:`_splits_a_tmem_load`), leaving the graphs of the other kernels as they
    were. The per-half loads it creates carry no async token; the graph orders each after the MMA that
    writes its buffer (``twill.frontend.lower``), and the whole load left behind only for its token is
    folded.
    """
    from triton._C.libtriton import nvidia, passes

    nvidia.passes.ttnvgpuir.add_optimize_tmem_layouts(pm)
    passes.ttgpuir.add_remove_layout_conversions(pm)


def _run(module: Any, add: Any, name: str) -> None:
    from triton._C.libtriton import ir

    pm = ir.pass_manager(module.context)
    pm.enable_debug()
    add(pm)
    pm.run(module, name)


def compile_to_ttgir(kernel: Any, *, target: str = "sm_90", signature: Mapping[str, str] | None = None,
                     constexprs: Mapping[str, Any] | None = None, num_warps: int | None = None,
                     num_stages: int | None = None, divisible: Iterable[str] | None = None) -> TTGIRSnapshots:
    """Compile ``kernel`` on the CPU and return its TTGIR before and after Triton's loop scheduling.

    Parameters
    ----------
    kernel : str, path-like, KernelSpec or JITFunction
        A kernel file spec (``"file.py"`` or ``"file.py::KERNEL"``), a :class:`KernelSpec`, or a JIT
        function (then ``signature`` is required).
    target : str
        ``"sm_90"`` (Hopper) or ``"sm_100"`` (Blackwell); ``sm_90a``/``cuda:90`` forms are accepted.
    signature : mapping of str to str, optional
        Argument types, replacing the spec's.
    constexprs : mapping, optional
        Constexpr values, merged over the spec's.
    num_warps, num_stages : int, optional
        Override the spec's compile options.
    divisible : iterable of str, optional
        Arguments given ``tt.divisibility = 16``; default: the spec's, else :func:`default_divisible`.

    Returns
    -------
    TTGIRSnapshots

    Raises
    ------
    FrontendError
        Unknown target, missing argument types, a Triton version other than 3.6, or a Triton
        compilation error (its message is kept).

    Warns
    -----
    TwillWarning
        Triton's ``OptimizeTMemLayouts`` failed ahead of the pipeliner on a kernel that splits a
        tensor-memory tile; the snapshot is then taken without it (:func:`_split_tmem_loads`).
    """
    import triton

    if not triton.__version__.startswith("3.6"):
        raise FrontendError(f"twill replicates Triton 3.6's make_ttgir; Triton {triton.__version__} is "
                            "installed")
    capability = target_capability(target)
    spec = _resolve(kernel, signature)
    values = {**spec.constexprs, **(constexprs or {})}
    hinted = divisible if divisible is not None else (
        spec.divisible if spec.divisible is not None else default_divisible(spec.fn, spec.signature))
    warps = num_warps if num_warps is not None else spec.num_warps
    stages = num_stages if num_stages is not None else spec.num_stages
    try:
        try:
            return _compile(spec, kernel_source(spec, values, hinted), capability, warps, stages)
        except _SplitPassFailed as exc:
            warnings.warn(TwillWarning(
                f"{spec.name}: Triton's OptimizeTMemLayouts fails when run ahead of its pipeliner on this "
                f"kernel ({str(exc).strip()[:200]}); its split tensor-memory tiles are modeled as whole "
                "loads and layout conversions (docs/frontend.md §10)"), stacklevel=2)
            return _compile(spec, kernel_source(spec, values, hinted), capability, warps, stages,
                            split_loads=False)
    except FrontendError:
        raise
    except Exception as exc:  # Triton raises CompilationError, RuntimeError, AssertionError, ...
        given = ", ".join(f"{k}={v!r}" for k, v in (constexprs or {}).items())
        given = f" (constexpr values given: {given})" if given else ""
        raise FrontendError(f"Triton cannot compile {spec.name!r} for sm_{capability}: "
                            f"{triton_error_reason(exc)}{given}; {type(exc).__name__}: "
                            f"{str(exc).strip()[:2000]}") from exc


def triton_error_reason(exc: BaseException) -> str:
    """The innermost message of Triton's exception chain (a ``CompilationError`` wraps the error of the
    builtin that failed, e.g. ``Shape element 1 must be a power of 2``, under the source listing), or its
    ``error_message``; the last line of ``exc`` when there is neither."""
    reason = ""
    seen: set[int] = set()
    node: BaseException | None = exc
    while node is not None and id(node) not in seen:
        seen.add(id(node))
        text = getattr(node, "error_message", None) or (
            str(node).strip() if type(node).__name__ != "CompilationError" else "")
        if text:
            reason = str(text).strip()[:500]
        node = node.__cause__ or node.__context__
    if not reason:
        lines = str(exc).strip().splitlines()
        reason = lines[-1].strip() if lines else type(exc).__name__
    return reason


class _SplitPassFailed(Exception):
    """Triton's ``OptimizeTMemLayouts`` failed when run ahead of the pipeliner."""


@contextlib.contextmanager
def stderr_to(path: str) -> Iterator[None]:
    """Send the process's file descriptor 2 (where MLIR writes) to ``path`` for the block.

    A context manager: fd 2 is restored on exit, also when the block raises.
    """
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(path, "w") as sink:
            os.dup2(sink.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _compile(spec: KernelSpec, src: Any, capability: int, num_warps: int, num_stages: int,
             split_loads: bool = True) -> TTGIRSnapshots:
    from triton._C.libtriton import passes

    pipeline = triton_pipeline(src, capability, num_warps, num_stages)
    options = pipeline.options
    module = pipeline.stages["ttir"](pipeline.module, {})
    ttir = module.str()
    _run(module, lambda pm: _pre_swp_passes(pm, options, capability), "twill_pre_swp")
    split = split_loads and capability // 10 >= 10 and _splits_a_tmem_load(module.str())
    if split:
        try:
            with stderr_to(os.devnull):  # MLIR prints its diagnostics and a reproducer on failure
                _run(module, _split_tmem_loads, "twill_split_tmem_loads")
        except Exception as exc:
            raise _SplitPassFailed(str(exc)) from exc
    pre_swp = module.str()

    def schedule(pm: Any) -> None:
        passes.ttgpuir.add_assign_latencies(pm, num_stages)
        passes.ttgpuir.add_schedule_loops(pm)

    _run(module, schedule, "twill_schedule")
    return TTGIRSnapshots(spec.name, spec.source, f"sm_{capability}", num_warps, num_stages, ttir, pre_swp,
                          module.str(), split)


@dataclass(frozen=True)
class TritonPipeline:
    """Triton 3.6's compile of one kernel, set up and not yet run: what :func:`triton_pipeline` returns.

    Attributes
    ----------
    target : triton.backends.compiler.GPUTarget
        ``cuda`` at the capability asked for, 32 threads per warp.
    backend : triton.backends.nvidia.compiler.CUDABackend
        The backend of that target.
    options : CUDAOptions
        The backend's options for the ``num_warps`` and ``num_stages`` asked for.
    module : triton ModuleOp
        The kernel's IR as ``ASTSource.make_ir`` builds it (before the ``ttir`` stage).
    stages : dict of str to callable
        Triton's stages by name (``ttir``, ``ttgir``, ``llir``, ``ptx``, ``cubin``), each
        ``stage(module, metadata) -> module``.
    """

    target: Any
    backend: Any
    options: Any
    module: Any
    stages: dict[str, Any]


def triton_pipeline(src: Any, capability: int, num_warps: int, num_stages: int) -> TritonPipeline:
    """Set up Triton's own compile of ``src`` (an ``ASTSource``, :func:`kernel_source`) for ``capability``.

    The one copy of the pipeline's start that the TTGIR snapshots (:func:`compile_to_ttgir`) and the ptxas
    measurement (:func:`twill.calibrate.regs.compile_registers`) share: the caller runs the stages it needs.

    Raises
    ------
    Exception
        Whatever Triton raises building the IR (``CompilationError`` for a kernel it cannot read); callers
        turn it into a :class:`FrontendError` naming the kernel.
    """
    from triton._C.libtriton import ir
    from triton.backends.compiler import GPUTarget
    from triton.compiler import make_backend

    target = GPUTarget("cuda", capability, 32)
    backend = make_backend(target)
    options = backend.parse_options({"num_warps": num_warps, "num_stages": num_stages})
    context = ir.context()
    ir.load_dialects(context)
    backend.load_dialects(context)
    module = src.make_ir(target, options, backend.get_codegen_implementation(options),
                         backend.get_module_map(), context)
    stages: dict[str, Any] = {}
    backend.add_stages(stages, options, src.language)
    return TritonPipeline(target, backend, options, module, stages)
