"""Whether a load's tile is read by its CTA alone (it streams from HBM) or by other CTAs too (an L2 hit).

A tile that several CTAs read is fetched from HBM once and then served from L2 to the rest: FA forward's
K/V tiles (every query block of a head reads them; their address does not depend on the query-block axis)
and GEMM's A and B tiles (a CTA's row and column of tiles come from ``program_id`` through ``//`` and ``%``,
which many CTAs share). A tile whose address tells the CTAs apart, as decode attention's K/V tile of one
head, is read once, from HBM: its load takes the SM's share of HBM bandwidth and waits HBM's latency
(:meth:`twill.ir.costmodel.CostModel.from_hbm`).

:func:`private_to_cta` decides it from the TTGIR: the address is *private* when it depends on every
``program_id`` axis the kernel reads through ops that keep distinct inputs distinct (adds, subtracts,
multiplies, pointer offsets, broadcasts, casts that widen). Any other op on the way (``//``, ``%``, a
bitwise and, a shift, a min, a select, a compare) may map many CTAs to one tile, so that path does not count.
"""

from __future__ import annotations

import re

from twill.frontend.ttgir import Op, TTGIRModule, Value

__all__ = ["INJECTIVE_OPS", "private_to_cta", "program_axes"]

INJECTIVE_OPS = frozenset({
    "arith.addi", "arith.subi", "arith.muli", "tt.addptr", "tt.advance", "tt.splat", "tt.broadcast",
    "tt.expand_dims", "tt.reshape", "ttg.convert_layout", "arith.extsi", "arith.extui", "arith.index_cast",
    "arith.index_castui", "tt.make_tensor_descriptor", "tt.make_tensor_ptr",
})
"""Integer and pointer ops whose result tells apart what their operands tell apart, given non-zero strides
(``a * s`` with a run-time stride ``s``; an address with a stride of 0 is shared whatever this says)."""

_AXIS = re.compile(r"tt\.get_program_id\s+(\w)")


def _axis(op: Op, module: TTGIRModule) -> int:
    """The grid axis (0, 1, 2) a ``tt.get_program_id`` reads."""
    axis = op.attrs.get("axis")
    if isinstance(axis, int):
        return axis
    lines = module.text.splitlines()
    found = _AXIS.search(lines[op.line - 1]) if 0 < op.line <= len(lines) else None
    if found is None:
        raise ValueError(f"TTGIR line {op.line}: tt.get_program_id without a readable axis")
    return "xyz".index(found.group(1))


def program_axes(module: TTGIRModule) -> frozenset[int]:
    """The grid axes the kernel reads with ``tt.get_program_id``."""
    return frozenset(_axis(op, module) for op in module.find("tt.get_program_id"))


def _strong_axes(value: Value, module: TTGIRModule, seen: set[int]) -> frozenset[int]:
    """Axes ``value`` depends on through :data:`INJECTIVE_OPS` only."""
    if value.key in seen:
        return frozenset()
    seen.add(value.key)
    owner = value.owner
    if owner is None:  # a block argument: a loop's iter_arg starts from the loop's init operand
        loop = value.block.parent if value.block is not None else None
        if loop is not None and loop.name == "scf.for" and value.index >= 1:
            init = 3 + value.index - 1  # scf.for operands: lower, upper, step, inits...
            if init < len(loop.operands):
                return _strong_axes(loop.operands[init], module, seen)
        return frozenset()
    if owner.name == "tt.get_program_id":
        return frozenset({_axis(owner, module)})
    if owner.name not in INJECTIVE_OPS:
        return frozenset()
    out: frozenset[int] = frozenset()
    for operand in owner.operands:
        out |= _strong_axes(operand, module, seen)
    return out


def private_to_cta(load: Op, module: TTGIRModule) -> bool:
    """True when no other CTA reads the tile ``load`` reads (``tt.load``: its pointer operand;
    ``tt.descriptor_load``: its descriptor and coordinates): the address depends on every grid axis the
    kernel reads through :data:`INJECTIVE_OPS` alone. A kernel that reads no ``program_id`` has one CTA's
    worth of tiles per launch, all private.

    Precondition: the launch has more than one CTA along each axis read (the grid is not in the TTGIR), and
    the CTAs that share a tile run close enough in time for L2 to keep it (they are co-scheduled in launch
    order). A ``tt.load`` whose mask is all that differs between CTAs is shared.
    """
    axes = program_axes(module)
    operands = load.operands[:1] if load.name == "tt.load" else load.operands
    strong: frozenset[int] = frozenset()
    for operand in operands:
        strong |= _strong_axes(operand, module, set())
    return axes <= strong
