"""TTGIR layouts (encodings) -> Gluon layout expressions for a partition of a given number of warps.

The pre-pipelining TTGIR was laid out by Triton for the whole CTA (``ttg.num-warps`` warps); a partition of
the warp-specialized kernel has its own warps, so every distributed layout is derived again for them:

* ``#ttg.nvidia_mma`` (a wgmma result): ``NVMMADistributedLayout([3, 0], warps_per_cta=[W, 1],
  instr_shape=[16, n, 16])`` with ``n`` the widest wgmma N (<= 256, a multiple of 8) that divides the tile's
  columns; one warpgroup per 64 rows, all of the partition's warps along M (the wgmma rule: a warpgroup
  issues 64 rows).
* ``#ttg.slice``, ``#ttg.dot_op``: the same constructors over the mapped parent.
* ``#ttg.blocked``: the same ``sizePerThread``/``threadsPerWarp``/``order``, the partition's warps along the
  slowest dimension.
* ``#ttg.nvmma_shared``: ``NVMMASharedLayout`` with the same swizzle, element width and transposition.

A buffer that one warp group fills and another reads (a hand-off staging buffer) gets
:func:`staging_layout`: the widest NVMMA swizzle its rows allow, so that the rows of a tile stored or loaded
in the wgmma layout (``stmatrix`` / ``ldmatrix``, eight rows of 16 B per 8x8 matrix) fall in different
banks instead of on the same ones every ``128 / row bytes`` rows.
"""

from __future__ import annotations

import re

__all__ = ["Encoding", "gluon_layout", "parse_encoding", "shared_layout", "staging_layout", "staging_swizzle"]


class Encoding:
    """A parsed TTGIR encoding: ``kind`` (``mma``, ``slice``, ``dot_op``, ``blocked``, ``nvmma_shared``)
    and its fields (``parent`` an :class:`Encoding`)."""

    def __init__(self, kind: str, fields: dict[str, object]) -> None:
        self.kind = kind
        self.fields = fields

    def __repr__(self) -> str:
        return f"Encoding({self.kind}, {self.fields})"


def _split_top(body: str) -> list[str]:
    """Split ``a = 1, b = [1, 2], parent = #x<{...}>`` at top-level commas."""
    parts, depth, cur = [], 0, []
    for ch in body:
        if ch in "<[{(":
            depth += 1
        elif ch in ">]})":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    if "".join(cur).strip():
        parts.append("".join(cur).strip())
    return parts


def parse_encoding(text: str) -> Encoding:
    """Parse an inlined TTGIR encoding such as ``#ttg.slice<{dim = 1, parent = #ttg.nvidia_mma<{...}>}>``.

    Raises
    ------
    ValueError
        An encoding this module does not know.
    """
    m = re.fullmatch(r"\s*#(?:ttg|ttng)\.(\w+)<\{(.*)\}>\s*", text, re.S)
    if not m:
        raise ValueError(f"unknown layout {text!r}")
    kind, body = m.group(1), m.group(2)
    fields: dict[str, object] = {}
    for part in _split_top(body):
        key, _, value = part.partition("=")
        key, value = key.strip(), value.strip()
        if value.startswith("#"):
            fields[key] = parse_encoding(value)
        elif value.startswith("["):
            fields[key] = [int(x) for x in value.strip("[]").split(",") if x.strip()]
        elif value in ("true", "false"):
            fields[key] = value == "true"
        else:
            fields[key] = int(value)
    names = {"nvidia_mma": "mma", "slice": "slice", "dot_op": "dot_op", "blocked": "blocked",
             "nvmma_shared": "nvmma_shared"}
    if kind not in names:
        raise ValueError(f"layout #{kind} has no Gluon mapping")
    return Encoding(names[kind], fields)


def _instr_n(columns: int) -> int:
    for n in range(min(256, columns), 7, -8):
        if columns % n == 0:
            return n
    raise ValueError(f"no wgmma N divides {columns} columns")


def gluon_layout(enc: Encoding, shape: tuple[int, ...], warps: int, mma_columns: dict[str, int]) -> str:
    """Gluon source text of ``enc`` for a tensor of ``shape`` in a partition of ``warps`` warps.

    ``mma_columns`` maps the text key of each MMA encoding to the columns of the tiles it lays out (the
    widest wgmma N is derived from it; a slice of an MMA layout has no column count of its own).
    """
    if enc.kind == "mma":
        cols = mma_columns.get(repr(enc), shape[-1] if len(shape) == 2 else 0)
        if warps % 4:
            raise ValueError(f"a wgmma layout needs whole warpgroups, the partition has {warps} warps")
        return (f"gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[{warps}, 1], "
                f"instr_shape=[16, {_instr_n(cols)}, 16])")
    if enc.kind == "slice":
        parent = enc.fields["parent"]
        assert isinstance(parent, Encoding)
        dim = int(enc.fields["dim"])  # type: ignore[call-overload]
        pshape = (*shape[:dim], 0, *shape[dim:])
        return f"gl.SliceLayout({enc.fields['dim']}, {gluon_layout(parent, pshape, warps, mma_columns)})"
    if enc.kind == "dot_op":
        parent = enc.fields["parent"]
        assert isinstance(parent, Encoding)
        return (f"gl.DotOperandLayout(operand_index={enc.fields['opIdx']}, "
                f"parent={gluon_layout(parent, shape, warps, mma_columns)}, k_width={enc.fields['kWidth']})")
    if enc.kind == "blocked":
        rank = len(enc.fields["sizePerThread"])  # type: ignore[arg-type]
        order = list(enc.fields["order"])  # type: ignore[call-overload]
        wpc = [1] * rank
        wpc[order[-1]] = warps
        return (f"gl.BlockedLayout(size_per_thread={enc.fields['sizePerThread']}, "
                f"threads_per_warp={enc.fields['threadsPerWarp']}, warps_per_cta={wpc}, order={order})")
    raise ValueError(f"layout {enc.kind} is not a distributed layout")


def shared_layout(enc: Encoding, rank: int) -> str:
    """Gluon source text of an ``#ttg.nvmma_shared`` encoding."""
    if enc.kind != "nvmma_shared":
        raise ValueError(f"shared layout {enc.kind} has no Gluon mapping")
    return (f"gl.NVMMASharedLayout(swizzle_byte_width={enc.fields['swizzlingByteWidth']}, "
            f"element_bitwidth={enc.fields['elementBitWidth']}, rank={rank}, "
            f"transposed={bool(enc.fields.get('transposed', False))})")


ELEMENT_BITS = {"f16": 16, "bf16": 16, "i16": 16, "f32": 32, "i32": 32, "f64": 64, "i64": 64, "i8": 8}
"""Bits of the TTGIR element types an NVMMA shared layout takes (8, 16, 32 or 64, Gluon's
``NVMMASharedLayout`` assertion); others (``i1``) are staged unswizzled."""

SWIZZLE_BYTES = (128, 64, 32)
"""The NVMMA shared-memory swizzle widths (bytes), widest first: a swizzle atom is 8 rows of that many bytes,
16-byte chunks XOR-ed with the row index (PTX ISA, "Shared memory matrix layout" swizzling modes)."""


def staging_swizzle(shape: tuple[int, ...] | list[int], element: str) -> int:
    """Swizzle width (bytes, 0 for none) of a hand-off staging buffer of one tile ``shape`` of ``element``.

    The widest of :data:`SWIZZLE_BYTES` that divides the row (the last dimension, in bytes), when the tile
    has at least 8 rows (one swizzle atom) over its other dimensions; 0 for a rank-1 value, fewer rows, a
    row of fewer than 32 bytes or an element type not in :data:`ELEMENT_BITS`.
    """
    bits = ELEMENT_BITS.get(element)
    if bits is None or len(shape) < 2:
        return 0
    rows = 1
    for d in shape[:-1]:
        rows *= int(d)
    row_bytes = int(shape[-1]) * bits // 8
    if rows < 8:
        return 0
    return next((w for w in SWIZZLE_BYTES if row_bytes % w == 0), 0)


def staging_layout(shape: tuple[int, ...] | list[int], element: str) -> str:
    """Gluon source text of the shared layout of a staging buffer ``[depth, *shape]`` of ``element``:
    ``NVMMASharedLayout`` with :func:`staging_swizzle` when it swizzles, else the unswizzled
    ``SwizzledSharedLayout(1, 1, 1)`` in row-major order (the rank of ``shape``, as each slot is indexed)."""
    width = staging_swizzle(shape, element)
    if width:
        return (f"gl.NVMMASharedLayout(swizzle_byte_width={width}, element_bitwidth={ELEMENT_BITS[element]}, "
                f"rank={len(shape)})")
    order = list(range(len(shape) - 1, -1, -1))
    return f"gl.SwizzledSharedLayout(1, 1, 1, order={order})"
