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

__all__ = ["BINARY", "CASTS", "DTYPES", "LAYOUT_OPS", "MEMORY_OPS", "UNARY", "constant_value", "dtype_of",
           "lowerable", "reduce_combiner"]

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
}
"""Elementwise binary ops (Gluon broadcasts scalars and size-1 dimensions as Triton does)."""

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
                        "ttg.convert_layout", "ttg.memdesc_trans"})
"""Ops the table lowers that only shape, place or name values."""

MEMORY_OPS = frozenset({"tt.descriptor_load", "ttg.local_alloc", "ttng.warp_group_dot",
                        "tt.descriptor_store"})
"""Ops the emitter places itself (TMA, shared memory, wgmma)."""


def lowerable(op: Op) -> bool:
    """Whether :mod:`twill.codegen.gluon` has a lowering for ``op``."""
    if op.name == "tt.reduce":
        return reduce_combiner(op) is not None
    return op.name in BINARY or op.name in UNARY or op.name in CASTS or op.name in LAYOUT_OPS \
        or op.name in MEMORY_OPS
