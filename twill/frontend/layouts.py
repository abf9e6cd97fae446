"""Questions about register layouts, answered with Triton's own linear-layout machinery.

Two facts about a TTGIR op depend on how its tensors are spread over registers, lanes and warps:

* whether a ``ttg.convert_layout`` moves data between threads or only renames registers
  (:func:`convert_is_trivial`, Triton's ``isConvertLayoutTrivial``: the minimal conversion layout
  involves only the ``register`` dimension);
* how many lanes and warps share one output element of a ``tt.reduce``
  (:func:`reduce_spread`, read from the linear layout of the reduced operand: the lane and warp bases
  that move along the reduced axis).
"""

from __future__ import annotations

from typing import Any

from twill.errors import UnsupportedOpError
from twill.frontend.ttgir import Op, TTGIRModule, Value

__all__ = ["convert_is_trivial", "reduce_spread"]


def _builder(module: TTGIRModule) -> Any:
    from triton._C.libtriton import gluon_ir

    if "gluon_builder" not in module.cache:
        module.cache["gluon_builder"] = gluon_ir.GluonOpBuilder(module.context)
    return module.cache["gluon_builder"]


def _linear_layout(module: TTGIRModule, value: Value, op: Op) -> Any:
    builder = _builder(module)
    try:
        layout = builder.get_gluon_layout_from_tensor(value.handle)
        return builder.to_linear_layout(layout._to_ir(builder), list(value.type.shape))
    except Exception as exc:  # the bindings raise plain RuntimeError/TypeError on unknown encodings
        raise UnsupportedOpError(op.name, line=op.line, location=str(op.loc) or None,
                                 hint=f"cannot read the register layout {value.type.encoding[:80]!r}: "
                                      f"{exc}") from None


def convert_is_trivial(module: TTGIRModule, op: Op) -> bool:
    """True when ``ttg.convert_layout`` ``op`` only renames registers (no data crosses threads).

    Raises
    ------
    UnsupportedOpError
        The layouts cannot be analysed by the bindings.
    """
    builder = _builder(module)
    src, dst = op.operands[0], op.results[0]
    if src.type.encoding == dst.type.encoding:
        return True
    try:
        return bool(builder.is_convert_layout_trivial(dst.handle.get_type(), src.handle))
    except Exception as exc:
        raise UnsupportedOpError(op.name, line=op.line, location=str(op.loc) or None,
                                 hint=f"cannot compare its layouts: {exc}") from None


def reduce_spread(module: TTGIRModule, op: Op, axis: int) -> tuple[int, int]:
    """``(lanes, warps)`` that hold elements of one output of ``tt.reduce`` ``op`` along ``axis``.

    ``lanes`` > 1 means butterfly shuffles inside a warp; ``warps`` > 1 means a round trip through
    shared memory to combine the partial results of several warps.
    """
    layout = _linear_layout(module, op.operands[0], op)
    lanes = sum(1 for basis in layout.lane_bases if basis[axis] != 0)
    warps = sum(1 for basis in layout.warp_bases if basis[axis] != 0)
    return 2 ** lanes, 2 ** warps
