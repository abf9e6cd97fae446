"""What each TTGIR op of a loop body becomes, and what it costs.

Every op of the loop body falls in exactly one class (:func:`classify`):

``fold``
    Layout-only, addressing and scalar bookkeeping ops (``tt.splat``, ``tt.broadcast``, ``tt.addptr``,
    ``ttg.memdesc_trans``, integer or scalar ``arith``, a register-renaming ``ttg.convert_layout`` ...).
    They vanish; dependences pass through them to the real producers.
``elementwise``
    Floating-point tile arithmetic (``arith.mulf``, ``math.exp2``, ``arith.truncf`` ...). Chains of them
    are merged into one tile op (see :mod:`twill.frontend.lower`).
``node``
    Every other op the cost model knows: GEMMs, loads, stores, reductions, data-moving layout
    conversions, shared- and tensor-memory copies.
``sync``
    Barrier and asynchronous-copy ops that only exist after Triton's own pipelining: an input with them
    is rejected (the pre-pipelining snapshot must be used).

An ``scf.if`` the loop body if-converts is a fifth kind, ``branch`` (see :mod:`twill.frontend.loopbody`).

:func:`op_cost` gives the :class:`~twill.ir.costmodel.OpCost` of one op from the cost model; all cycle
counts come from the machine file through :class:`~twill.ir.costmodel.CostModel`.

**Masks and branches** (shared/seeds/003_8ff7bc8ce6113243.txt: lanes of a warp on different paths run
them one after another, ``T(k) ~ s k``; predication removes the serialization):

* a masked ``tt.load`` / ``tt.store`` / ``tt.atomic_rmw`` (a partial final tile) is *predicated*: it costs
  the full, unmasked tile (:meth:`~twill.ir.costmodel.CostModel.predicated`), plus one select per element
  for the ``other=`` fill of a load. The compare that makes the mask is integer index arithmetic and is
  folded like the addresses, as it is for every load;
* ``arith.select`` (``tl.where``) is one ALU operation per element of its tile, whatever the mask;
* an if-converted ``scf.if`` is costed as its paths back to back (:func:`branch_cost`,
  :meth:`~twill.ir.costmodel.CostModel.divergent`): the sum of both sides plus
  ``cost.divergence_reconverge`` per extra path (38 cycles measured on the H200, 0 on h100/b200).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from twill.errors import UnsupportedOpError
from twill.frontend.layouts import convert_is_trivial, reduce_spread
from twill.frontend.reuse import private_to_cta
from twill.frontend.ttgir import Block, Op, TTGIRModule, Value
from twill.frontend.types import TType
from twill.ir.costmodel import CostModel, OpCost

__all__ = ["GEMM_OPS", "LoweringContext", "branch_cost", "classify", "elementwise_cost", "is_pure",
           "mask_operand", "op_cost"]

LAYOUT_OPS = frozenset({
    "tt.splat", "tt.broadcast", "tt.expand_dims", "tt.make_range", "tt.reshape", "tt.trans", "tt.join",
    "tt.split", "tt.unsplat", "tt.bitcast", "tt.addptr", "tt.advance", "tt.make_tensor_ptr",
    "tt.make_tensor_descriptor", "tt.get_program_id", "tt.get_num_programs", "tt.assume", "arith.constant",
    "arith.bitcast", "ub.poison", "ttg.memdesc_index", "ttg.memdesc_trans", "ttg.memdesc_subslice",
    "ttg.memdesc_reshape", "ttg.memdesc_reinterpret", "ttg.local_dealloc", "ttng.tmem_subslice",
})
"""Ops that only relabel, index or address data: always folded."""

VIEW_OPS = frozenset({"ttg.memdesc_index", "ttg.memdesc_trans", "ttg.memdesc_subslice",
                      "ttg.memdesc_reshape", "ttg.memdesc_reinterpret", "ttng.tmem_subslice"})
"""Ops whose result is a view of the buffer of their first operand."""

ALU_OPS: dict[str, float] = {
    "arith.addf": 1, "arith.subf": 1, "arith.mulf": 1, "arith.negf": 1, "arith.maxnumf": 1,
    "arith.minnumf": 1, "arith.maximumf": 1, "arith.minimumf": 1, "arith.select": 1, "arith.cmpf": 1,
    "math.fma": 1, "math.absf": 1, "math.floor": 1, "math.ceil": 1, "math.copysign": 1, "tt.clampf": 2,
    "arith.addi": 1, "arith.subi": 1, "arith.muli": 1, "arith.andi": 1, "arith.ori": 1, "arith.xori": 1,
    "arith.shli": 1, "arith.shrsi": 1, "arith.shrui": 1, "arith.maxsi": 1, "arith.minsi": 1,
    "arith.maxui": 1, "arith.minui": 1, "arith.cmpi": 1, "arith.extsi": 1, "arith.extui": 1,
    "arith.trunci": 1, "math.absi": 1,
    # estimate: GPUs have no integer divider; ptxas expands a 32-bit division or remainder into a
    # reciprocal-and-correction sequence of about 20 instructions (a scalar one folds like any index math)
    "arith.divsi": 20, "arith.divui": 20, "arith.remsi": 20, "arith.remui": 20, "arith.ceildivsi": 20,
    "arith.ceildivui": 20, "arith.floordivsi": 20,
}
"""Elementwise ops on the FP32/INT32 pipes: ALU operations per element."""

MUFU_OPS: dict[str, tuple[str, float]] = {
    "math.exp2": ("exp", 0), "math.exp": ("exp", 4), "math.log2": ("mufu", 0), "math.log": ("mufu", 1),
    "math.sqrt": ("mufu", 0), "math.rsqrt": ("mufu", 0), "math.sin": ("mufu", 0), "math.cos": ("mufu", 0),
    "math.tanh": ("mufu", 0), "arith.divf": ("mufu", 1), "tt.precise_divf": ("mufu", 1),
    "tt.precise_sqrt": ("mufu", 0),
}
"""Elementwise ops on the special-function unit: kind and extra ALU operations per element
(``exp(x) = ex2(x * log2 e)``, ``log(x) = lg2(x) * ln 2``, ``a / b = a * rcp(b)``).

``math.exp2`` (``tl.math.exp2``) is one ``MUFU.EX2``: Triton 3.6 emits ``ex2.approx.ftz.f32`` for it (all
66 per thread and iteration of the FA forward at 8 warps). ``math.exp`` (``tl.exp``) is the multiply by
log2(e) and ``ex2.approx.f32`` without ``.ftz``, which ptxas expands to ``FSETP`` + two predicated ``FMUL``
(the denormal range fix) + ``MUFU.EX2``: 4 ALU operations per element (SASS of
``examples/decode_attention.py`` for sm_90a: 17 ``MUFU.EX2``, 18 ``FSETP.GEU``, 43 ``FMUL`` predicated
on them; ``benchmarks/calibrate/microbench.cu``, ``mufu`` test, the same expansion). Predicated-off
lanes still issue, so the FMULs cost every element."""

CONVERT_OPS = frozenset({"arith.truncf", "arith.extf", "arith.sitofp", "arith.uitofp", "arith.fptosi",
                         "arith.fptoui", "tt.fp_to_fp"})
"""Type conversions (F2F, F2FP, I2F, F2I)."""

GEMM_OPS = frozenset({"tt.dot", "ttng.warp_group_dot", "ttng.tc_gen5_mma"})
NODE_OPS = GEMM_OPS | frozenset({
    "tt.descriptor_load", "tt.load", "tt.descriptor_store", "tt.store", "tt.atomic_rmw", "tt.reduce",
    "ttg.convert_layout", "ttg.local_alloc", "ttg.local_load", "ttg.local_store", "ttng.tmem_load",
    "ttng.tmem_store", "ttng.tmem_alloc",
})
SYNC_OPS = frozenset({
    "ttng.wait_barrier", "ttng.arrive_barrier", "ttng.barrier_expect", "ttng.init_barrier",
    "ttng.inval_barrier", "ttg.async_wait", "ttg.async_commit_group", "ttg.async_copy_global_to_local",
    "ttng.async_tma_copy_global_to_local", "ttng.async_tma_copy_local_to_global",
    "ttng.async_tma_store_wait", "ttng.warp_group_dot_wait", "ttng.tc_gen5_commit",
    "ttng.fence_async_shared", "ttg.warp_specialize", "ttg.barrier", "gpu.barrier",
})
IF_CONVERTIBLE = LAYOUT_OPS | frozenset(ALU_OPS) | frozenset(MUFU_OPS) | CONVERT_OPS | frozenset({
    "tt.reduce", "ttg.convert_layout", "scf.if", "scf.yield", "tt.reduce.return"})
"""Ops that may be executed unconditionally when an ``scf.if`` is if-converted (no memory access)."""

_GEMM_DTYPE = {"f16": "fp16", "bf16": "fp16", "f32": "tf32", "i8": "fp8"}


@dataclass(frozen=True)
class LoweringContext:
    """What the cost rules need besides the op: the module, the cost model, the CTA's warps."""

    module: TTGIRModule
    costs: CostModel
    num_warps: int

    def warps(self, rows: int) -> int:
        """Warps owning a register tile of ``rows`` rows (:meth:`CostModel.tile_warps`)."""
        return self.costs.tile_warps(rows, num_warps=self.num_warps)


def _unsupported(op: Op, hint: str) -> UnsupportedOpError:
    return UnsupportedOpError(op.name, line=op.line, location=str(op.loc) or None, hint=hint)


def _data_types(op: Op) -> list[TType]:
    return [v.type for v in (*op.operands, *op.results)]


_DATA_SINKS = GEMM_OPS | CONVERT_OPS | frozenset({"tt.reduce", "tt.atomic_rmw", "tt.store",
                                                  "tt.descriptor_store", "ttg.local_store", "ttg.local_alloc",
                                                  "ttng.tmem_store"})
"""Uses that make an integer tile data rather than address or mask arithmetic: a conversion to float,
an MMA operand, a reduction, a value stored (to global, shared or tensor memory). A tile only carried to
the next iteration (offsets advanced by a stride) stays index math."""


def _integer_data(op: Op) -> bool:
    """True when ``op`` computes an integer tile that is data (dequantized weights, bit tricks feeding a
    conversion or an MMA) rather than pointer offsets or masks: some chain of integer ops and layout
    changes from its result reaches a :data:`_DATA_SINKS` use (as the stored value, not the address).
    Index and mask arithmetic folds; data costs ALU time like a float tile."""
    if not any(v.type.kind == "tensor" for v in op.results):
        return False
    seen: set[int] = set()
    todo = [v for v in op.results if v.type.kind == "tensor"]
    while todo:
        value = todo.pop()
        for user in value.users:
            if id(user) in seen:
                continue
            seen.add(id(user))
            if user.name in ("tt.store", "tt.descriptor_store", "tt.atomic_rmw"):
                # tt.store / tt.atomic_rmw: (pointers, value, mask); a descriptor store's only tensor
                # operand besides the descriptor is its value (the indices are scalars)
                stored = user.operands[1] if user.name != "tt.descriptor_store" else next(
                    (o for o in user.operands[1:] if o.type.kind == "tensor"), None)
                if stored is value:
                    return True
                continue
            if user.name in _DATA_SINKS:
                return True
            if user.name in ALU_OPS or user.name in LAYOUT_OPS or user.name == "ttg.convert_layout":
                todo.extend(v for v in user.results if v.type.kind == "tensor")
    return False


def is_pure(op: Op) -> bool:
    """True when ``op`` (and everything nested in it) may run unconditionally (if-conversion)."""
    return all(inner.name in IF_CONVERTIBLE for inner in op.walk())


def classify(op: Op, ctx: LoweringContext) -> str:
    """``fold``, ``elementwise``, ``node`` or ``if`` for a loop-body op (see the module docstring).

    Raises
    ------
    UnsupportedOpError
        The op is unknown to the cost model, or is a barrier/async op of already-pipelined TTGIR.
    """
    name = op.name
    if name in SYNC_OPS:
        raise _unsupported(op, "this op only exists after Triton's own software pipelining; give the "
                               "pre-pipelining snapshot (compile_to_ttgir(...).pre_swp)")
    if name == "scf.if":
        return "if"
    if name in LAYOUT_OPS:
        return "fold"
    if name == "ttg.convert_layout":
        return "fold" if convert_is_trivial(ctx.module, op) else "node"
    if name == "ttng.tmem_load" and not any(v.users for v in op.results if v.type.kind == "tensor"):
        return "fold"  # kept only for its async token (the split loads of a tile, docs/frontend.md §10)
    if name in ALU_OPS or name in MUFU_OPS or name in CONVERT_OPS:
        has_float_tile = any(t.kind == "tensor" and t.is_float for t in _data_types(op))
        return "elementwise" if has_float_tile or _integer_data(op) else "fold"
    if name in NODE_OPS:
        return "node"
    raise _unsupported(op, "no cost rule for it (see docs/frontend.md for the supported ops)")


def elementwise_cost(op: Op, ctx: LoweringContext) -> OpCost:
    """Cost of one elementwise op over its result tile (an if-converted ``scf.if`` is a select)."""
    out = next(v.type for v in op.results if v.type.kind == "tensor")
    warps = ctx.warps(out.rows)
    cm = ctx.costs
    if op.name == "scf.if":
        elements = sum(v.type.elements for v in op.results if v.type.kind == "tensor" and v.type.is_float)
        return cm.alu(elements, 1, warps=warps)
    if op.name in MUFU_OPS:
        kind, alu_ops = MUFU_OPS[op.name]
        if kind == "exp":
            return cm.exp2(out.elements, alu_ops_per_element=alu_ops, warps=warps)
        parts = [cm.mufu(out.elements, warps=warps)]
        if alu_ops:
            parts.append(cm.alu(out.elements, alu_ops, warps=warps))
        return cm.merge("mufu", parts)
    if op.name in CONVERT_OPS:
        return cm.convert(out.elements, warps=warps)
    return cm.alu(out.elements, ALU_OPS[op.name], warps=warps)


def _gemm_cost(op: Op, ctx: LoweringContext) -> OpCost:
    a = op.operands[0].type
    if op.name == "ttng.tc_gen5_mma":
        acc = op.operands[2].type
        m, n = acc.shape[-2], acc.shape[-1]
        warps = None
    else:
        acc = op.results[0].type
        m, n = acc.shape[-2], acc.shape[-1]
        warps = ctx.warps(m)
    element = a.element if a.element in _GEMM_DTYPE else ("fp8" if a.element.startswith("f8") else "")
    if not element:
        raise _unsupported(op, f"no Tensor Core rate for {a.element} operands")
    return ctx.costs.gemm(m, n, a.shape[-1], dtype=_GEMM_DTYPE.get(element, element), warps=warps)


def _reduce_cost(op: Op, ctx: LoweringContext) -> OpCost:
    src = op.operands[0].type
    axis = op.attrs.get("axis")
    if not isinstance(axis, int) or isinstance(axis, bool):
        raise _unsupported(op, "its axis attribute is missing")
    lanes, warps_along = reduce_spread(ctx.module, op, axis)
    combine_ops = max(1, sum(1 for inner in op.walk() if inner is not op and inner.name in ALU_OPS))
    inputs = len(op.operands)
    rows = src.elements // src.shape[axis]
    warps = ctx.warps(src.rows)
    parts = [ctx.costs.reduce(src.elements * combine_ops, rows * inputs, lanes, warps=warps)]
    if warps_along > 1:
        partial_bytes = 2 * rows * inputs * warps_along * 4
        parts.append(ctx.costs.smem_copy(partial_bytes, warps=warps))
    return ctx.costs.merge("reduce", parts) if len(parts) > 1 else parts[0]


_MASKABLE = {"tt.load": 1, "tt.store": 2, "tt.atomic_rmw": 2}
"""Pointer memory ops and the operand index where their optional ``i1`` mask tensor sits."""


def mask_operand(op: Op) -> Value | None:
    """The ``i1`` mask tensor of a masked ``tt.load``/``tt.store``/``tt.atomic_rmw``, else ``None``."""
    at = _MASKABLE.get(op.name)
    if at is None or len(op.operands) <= at:
        return None
    mask = op.operands[at]
    return mask if mask.type.kind == "tensor" and mask.type.element == "i1" else None


def _predicate(op: Op, cost: OpCost, ctx: LoweringContext) -> OpCost:
    """A masked memory op under predication: the full tile, plus the ``other=`` fill of a load (one
    select per element; :meth:`CostModel.predicated`). Unmasked ops are returned unchanged."""
    mask = mask_operand(op)
    if mask is None:
        return cost
    fill = op.name == "tt.load" and len(op.operands) > _MASKABLE[op.name] + 1
    return ctx.costs.predicated(cost, mask.type.elements, ops_per_element=1.0 if fill else 0.0)


def _memory_cost(op: Op, ctx: LoweringContext) -> OpCost | None:
    cm, name = ctx.costs, op.name
    if name == "tt.descriptor_load":
        return cm.tma_load(op.results[0].type.nbytes, private=private_to_cta(op, ctx.module))
    if name == "tt.load":
        out = op.results[0].type
        load = cm.global_load(out.nbytes, warps=ctx.warps(out.rows), private=private_to_cta(op, ctx.module))
        return _predicate(op, load, ctx)
    if name == "tt.store":
        val = op.operands[1].type
        return _predicate(op, cm.global_store(val.nbytes, warps=ctx.warps(val.rows)), ctx)
    if name == "tt.atomic_rmw":
        val = op.operands[1].type
        return _predicate(op, cm.atomic_add(val.nbytes, warps=ctx.warps(val.rows)), ctx)
    if name == "tt.descriptor_store":
        tile = next(v.type for v in op.operands if v.type.kind == "tensor")
        return cm.tma_store_from_registers(tile.nbytes, warps=ctx.warps(tile.rows))
    return None


_REPLICATING = frozenset({"tt.broadcast", "tt.splat"})
"""Layout ops whose result repeats its operand's elements."""
_SHAPE_ONLY = _REPLICATING | frozenset({"tt.expand_dims", "tt.reshape", "tt.trans"})
"""Layout ops that only reshape or repeat their one operand (``tt.addptr`` and the like combine values)."""


def _distinct_bytes(value: Value, nbytes: int) -> int:
    """Bytes a layout conversion of ``value`` really moves: when ``value`` is a broadcast (or splat) of a
    smaller tensor, seen through shape-only ops, the smaller tensor's bytes; Triton converts that one
    before broadcasting (its RemoveLayoutConversions pass moves the conversion up), so a ``[128, 1]`` row
    scale broadcast to ``[128, 128]`` costs 128 elements, not the tile. Else ``nbytes``."""
    seen = value
    while seen.owner is not None and seen.owner.name in _SHAPE_ONLY and seen.owner.operands:
        source = seen.owner.operands[0]
        if seen.owner.name in _REPLICATING:
            if source.type.kind != "tensor":  # a splat of a scalar: one element per thread
                return min(nbytes, max(1, seen.type.nbytes // max(1, seen.type.elements)))
            return min(nbytes, source.type.nbytes)
        if source.type.kind != "tensor":
            break
        seen = source
    return nbytes


def _copy_cost(op: Op, ctx: LoweringContext) -> OpCost | None:
    cm, name = ctx.costs, op.name
    tensors = [v.type for v in (*op.operands, *op.results) if v.type.kind == "tensor"]
    if not tensors:
        return None
    tile = tensors[0]
    warps = ctx.warps(tile.rows)
    if name == "ttg.convert_layout":
        return cm.layout_convert(_distinct_bytes(op.operands[0], tile.nbytes), warps=warps)
    if name in ("ttg.local_alloc", "ttg.local_store"):
        return cm.smem_copy(tile.nbytes, kind="local_store", warps=warps)
    if name == "ttg.local_load":
        return cm.smem_copy(tile.nbytes, kind="local_load", warps=warps)
    if name == "ttng.tmem_load":
        return cm.tmem_load(tile.nbytes, warps=warps)
    if name in ("ttng.tmem_store", "ttng.tmem_alloc"):
        return cm.tmem_store(tile.nbytes, warps=warps)
    return None


def _path_cost(region: list[Block], ctx: LoweringContext, role: Mapping[Op, str]) -> OpCost | None:
    """Work of one branch of an if-converted ``scf.if``: its ops' costs merged (``None`` if it has none)."""
    parts: list[OpCost] = []
    for block in region:
        for inner in block.ops:
            kind = role.get(inner, "fold")
            if inner.name == "scf.yield" or kind == "fold":
                continue
            if inner.name == "scf.if":
                parts.append(branch_cost(inner, ctx, role))
            elif kind == "elementwise":
                parts.append(elementwise_cost(inner, ctx))
            else:
                parts.append(op_cost(inner, ctx))
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else ctx.costs.merge("alu", parts)


def branch_cost(op: Op, ctx: LoweringContext, role: Mapping[Op, str]) -> OpCost:
    """Cost of an if-converted ``scf.if`` (``role``: the loop body's op classes, nested ops included).

    Both sides are costed (the graph has no control flow, so a schedule must hold whichever side an
    iteration takes, and lanes that disagree would run both): the branches' work runs back to back as
    :meth:`CostModel.divergent` paths, each the merged cost of its ops (an inner ``scf.if`` by this rule
    again), with ``cost.divergence_reconverge`` cycles between paths. A branch with no costed op adds no
    path. When neither branch computes anything, the ``scf.if`` only picks one of two values: a select,
    one ALU operation per element of its float results (the predication rule of ``arith.select``).
    """
    paths = [p for p in (_path_cost(region, ctx, role) for region in op.regions) if p is not None]
    if not paths:
        return elementwise_cost(op, ctx)
    return ctx.costs.divergent(paths, kind="divergent")


def op_cost(op: Op, ctx: LoweringContext) -> OpCost:
    """Cost of a ``node`` op (see :func:`classify`) on the context's machine.

    Raises
    ------
    UnsupportedOpError
        No rule fits the op's operands (e.g. an allocation without a value, an unknown MMA dtype).
    """
    if op.name in GEMM_OPS:
        return _gemm_cost(op, ctx)
    if op.name == "tt.reduce":
        return _reduce_cost(op, ctx)
    cost = _memory_cost(op, ctx) or _copy_cost(op, ctx)
    if cost is None:
        raise _unsupported(op, "it carries no register value to cost (a buffer allocated inside the loop "
                               "without data is not supported)")
    return cost
