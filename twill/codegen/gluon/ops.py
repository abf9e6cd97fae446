"""The TTGIR-op -> Gluon lowering table for register (tensor and scalar) code.

Each entry turns one TTGIR op whose operands are already Gluon expressions into the Gluon expression of its
result. Ops with memory or asynchronous semantics (TMA loads and stores, ``ttg.local_alloc`` of a loaded
tile, ``ttng.warp_group_dot``, ``scf.for``) are not here: :mod:`twill.codegen.gluon.emit` places them with
their barriers. An op without an entry is refused with :class:`~twill.codegen.gluon.errors.CodegenError`.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable

from twill.frontend.ttgir import Op

__all__ = ["BINARY", "CASTS", "COMPARE", "DTYPES", "LAYOUT_OPS", "MEMORY_OPS", "POINTER_OPS", "UNARY",
           "broadcasts_operand", "compare_operator", "constant_value", "dtype_of", "lowerable",
           "reduce_combiner", "splat_constant"]

DTYPES = {"f16": "gl.float16", "bf16": "gl.bfloat16", "f32": "gl.float32", "f64": "gl.float64",
          "i1": "gl.int1", "i8": "gl.int8", "i16": "gl.int16", "i32": "gl.int32", "i64": "gl.int64"}
"""TTGIR element type -> Gluon dtype."""

BINARY: dict[str, Callable[[str, str], str]] = {
    "arith.addf": lambda a, b: f"({a} + {b})",
    "arith.subf": lambda a, b: f"({a} - {b})",
    "arith.mulf": lambda a, b: f"({a} * {b})",
    "arith.divf": lambda a, b: f"({a} / {b})",
    "arith.addi": lambda a, b: f"({a} + {b})",
    "arith.subi": lambda a, b: f"({a} - {b})",
    "arith.muli": lambda a, b: f"({a} * {b})",
    "arith.maxnumf": lambda a, b: f"gl.maximum({a}, {b})",
    "arith.maximumf": lambda a, b: f"gl.maximum({a}, {b})",
    "arith.minnumf": lambda a, b: f"gl.minimum({a}, {b})",
    "arith.minimumf": lambda a, b: f"gl.minimum({a}, {b})",
    "arith.andi": lambda a, b: f"({a} & {b})",
    "arith.ori": lambda a, b: f"({a} | {b})",
    "arith.xori": lambda a, b: f"({a} ^ {b})",
    "tt.addptr": lambda a, b: f"({a} + {b})",
}
"""Elementwise binary ops (Gluon broadcasts scalars and size-1 dimensions as Triton does). ``tt.addptr``
is pointer + offset in elements, which is ``+`` on a Gluon pointer (tensor)."""

COMPARE = {"arith.cmpi": {"slt": "<", "sle": "<=", "sgt": ">", "sge": ">=", "eq": "==", "ne": "!="},
           "arith.cmpf": {"olt": "<", "ole": "<=", "ogt": ">", "oge": ">=", "oeq": "==", "une": "!="}}
"""Comparison predicates with a Python operator of the same meaning on Gluon's signed integers and floats
(Triton's ``<`` on ``i32`` is ``slt``, on floats ``olt``; ``!=`` on floats is ``une``). An unsigned or
unordered predicate has no entry (its operator would compare differently) and is refused."""

POINTER_OPS = frozenset({"tt.load", "tt.store"})
"""Pointer loads and stores (``gl.load`` / ``gl.store`` with the TTGIR's mask and other)."""

UNARY: dict[str, Callable[[str], str]] = {
    "math.exp2": lambda a: f"gl.exp2({a})",
    "math.exp": lambda a: f"gl.exp({a})",
    "math.log2": lambda a: f"gl.log2({a})",
    "math.log": lambda a: f"gl.log({a})",
    "math.sqrt": lambda a: f"gl.sqrt({a})",
    "arith.negf": lambda a: f"(-{a})",
}
"""Elementwise unary ops."""

CASTS = frozenset({"arith.truncf", "arith.extf", "arith.sitofp", "arith.fptosi", "arith.extsi",
                   "arith.trunci"})
"""Element-type conversions (``x.to(dtype)``)."""

_REDUCERS = {"arith.maxnumf": "gl.max", "arith.maximumf": "gl.max", "arith.addf": "gl.sum",
             "arith.minnumf": "gl.min", "arith.minimumf": "gl.min", "arith.addi": "gl.sum"}


def dtype_of(element: str, where: str) -> str:
    """Gluon dtype of a TTGIR element type; ``ValueError`` naming ``where`` for one without a mapping."""
    if element not in DTYPES:
        raise ValueError(f"element type {element!r} of {where} has no Gluon dtype")
    return DTYPES[element]


def reduce_combiner(op: Op) -> str | None:
    """``gl.max`` / ``gl.sum`` / ``gl.min`` for a ``tt.reduce`` whose combiner is one such op, else None."""
    body = [m for m in op.walk() if m is not op and m.name != "tt.reduce.return"]
    if len(body) != 1:
        return None
    return _REDUCERS.get(body[0].name)


def constant_value(line: str) -> str:
    """The Python literal of an ``arith.constant`` from its TTGIR text line (``dense<0xFF800000>``,
    ``1.44269502 : f32``, ``128 : i32``)."""
    b = re.search(r"arith\.constant\s+(true|false)\b", line)   # i1 constants print without a type
    if b:
        return "True" if b.group(1) == "true" else "False"
    m = re.search(r"arith\.constant\s+(?:dense<)?([^>:\s]+)>?\s*:", line)
    if not m:
        raise ValueError(f"cannot read the value of {line.strip()!r}")
    text = m.group(1)
    if text in ("true", "false"):
        return "True" if text == "true" else "False"
    if text.startswith("0x"):
        bits = int(text, 16)
        value = struct.unpack(">f", bits.to_bytes(4, "big"))[0] if len(text) <= 10 else \
            struct.unpack(">d", bits.to_bytes(8, "big"))[0]
        if value != value:
            return "float('nan')"
        if value in (float("inf"), float("-inf")):
            return "float('inf')" if value > 0 else "float('-inf')"
        return repr(value)
    return repr(float(text)) if any(c in text for c in ".eE") else str(int(text))


LAYOUT_OPS = frozenset({"arith.constant", "tt.get_program_id", "tt.splat", "tt.expand_dims", "tt.broadcast",
                        "ttg.convert_layout", "ttg.memdesc_trans", "tt.make_range", "arith.select"})
"""Ops the table lowers that only shape, place or name values."""

MEMORY_OPS = frozenset({"tt.descriptor_load", "ttg.local_alloc", "ttng.warp_group_dot",
                        "tt.descriptor_store"})
"""Ops the emitter places itself (TMA, shared memory, wgmma)."""


def compare_operator(op: Op, line: str) -> str | None:
    """The Python operator of an ``arith.cmpi`` / ``arith.cmpf`` from its TTGIR text ``line``
    (``arith.cmpi slt, %a, %b``), None for a predicate without one (see :data:`COMPARE`)."""
    m = re.search(rf"{re.escape(op.name)}\s+(\w+)\s*,", line)
    return COMPARE[op.name].get(m.group(1)) if m else None


def splat_constant(op: Op | None, line: str) -> str | None:
    """The Python literal of ``op`` when it is an ``arith.constant`` with one value (a scalar or a
    ``dense<v>`` splat, the ``other`` of a masked load), else None."""
    if op is None or op.name != "arith.constant":
        return None
    try:
        return constant_value(line)
    except ValueError:
        return None


def broadcasts_operand(user: Op, value: object) -> bool:
    """Whether ``user`` broadcasts its operand ``value`` to its shape itself, so a ``tt.broadcast`` feeding it
    can be left out: elementwise binary ops, comparisons and ``arith.select`` (Gluon broadcasts size-1
    dimensions as Triton does), the mask and ``other`` of ``tt.load`` and the value and mask of ``tt.store``
    (``gl.load`` / ``gl.store`` broadcast them to the pointer's shape; the pointer itself is not)."""
    if user.name in BINARY or user.name in COMPARE or user.name == "arith.select":
        return True
    if user.name in POINTER_OPS:
        return bool(user.operands) and user.operands[0] is not value
    return False


def lowerable(op: Op, line: str = "") -> bool:
    """Whether :mod:`twill.codegen.gluon` has a lowering for ``op`` (``line``: its TTGIR text, for the
    predicate of a comparison)."""
    if op.name == "tt.reduce":
        return reduce_combiner(op) is not None
    if op.name in COMPARE:
        return compare_operator(op, line) is not None
    return op.name in BINARY or op.name in UNARY or op.name in CASTS or op.name in LAYOUT_OPS \
        or op.name in MEMORY_OPS or op.name in POINTER_OPS
