"""TTGIR types as twill needs them: shape, element type, where the value lives, and its size.

:func:`parse_type` reads the type text MLIR prints (layouts inlined, as the bindings return them)::

    >>> t = parse_type("!ttg.memdesc<128x128xf16, #ttg.nvmma_shared<{swizzlingByteWidth = 128}>, "
    ...                "#ttg.shared_memory>")
    >>> t.kind, t.shape, t.element, t.space, t.nbytes
    ('memdesc', (128, 128), 'f16', 'smem', 32768)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from math import ceil, prod

from twill.frontend.ttgir_text import split_top_level

__all__ = ["TType", "element_bits", "parse_type"]

_FLOAT_BITS = {"f64": 64, "f32": 32, "tf32": 32, "f16": 16, "bf16": 16}


def element_bits(element: str) -> int:
    """Bits per element: ``f16`` -> 16, ``f8E4M3FN`` -> 8, ``i1`` -> 8 (stored as a byte), pointers 64."""
    if element in _FLOAT_BITS:
        return _FLOAT_BITS[element]
    if element.startswith(("f8", "f6", "f4")):
        return int(element[1])
    if element.startswith("!tt.ptr"):
        return 64
    match = re.fullmatch(r"[su]?i(\d+)", element)
    if match:
        return max(8, int(match.group(1)))
    if element == "index":
        return 64
    return 0


@dataclass(frozen=True)
class TType:
    """A TTGIR type.

    Attributes
    ----------
    text : str
        The type as printed.
    kind : str
        ``tensor`` (a register tile), ``memdesc`` (a buffer in shared or tensor memory), ``token``
        (``!ttg.async.token``), ``scalar`` (int, float, index, pointer), ``tensordesc``, or ``other``.
    shape : tuple of int
        Tile shape (``()`` for scalars). For a memdesc, the shape of the view (leading buffer dims included).
    element : str
        Element type (``f16``, ``f32``, ``i32``, ``!tt.ptr<f16>`` ...).
    encoding : str
        Layout text of a tensor or memdesc (``""`` for other kinds).
    space : str
        ``register`` for tensors and scalars, ``smem`` or ``tmem`` for a memdesc, ``""`` otherwise.
    """

    text: str
    kind: str
    shape: tuple[int, ...] = ()
    element: str = ""
    encoding: str = ""
    space: str = ""

    @property
    def elements(self) -> int:
        """Number of elements (1 for a scalar)."""
        return prod(self.shape) if self.shape else 1

    @property
    def bits(self) -> int:
        """Bits per element (0 when not a number)."""
        return element_bits(self.element)

    @property
    def nbytes(self) -> int:
        """Bytes the value occupies (0 for tokens and descriptors)."""
        if self.kind not in ("tensor", "memdesc", "scalar"):
            return 0
        return ceil(self.elements * self.bits / 8)

    @property
    def is_float(self) -> bool:
        """True for floating-point elements."""
        return self.element in _FLOAT_BITS or self.element.startswith(("f8", "f6", "f4"))

    @property
    def is_tile(self) -> bool:
        """True for a register tensor or a memdesc."""
        return self.kind in ("tensor", "memdesc")

    @property
    def rows(self) -> int:
        """Rows of the tile: the first dim not used for multi-buffering (1 for scalars)."""
        if not self.shape:
            return 1
        return self.shape[-2] if self.kind == "memdesc" and len(self.shape) >= 2 else self.shape[0]

    def tmem_columns(self) -> int:
        """Tensor-memory columns a TMEM memdesc of this type occupies (0 for other types).

        Rule (checked against Triton 3.6's TMEM allocator for blockM = 128): a ``[M, N]`` buffer takes
        ``ceil(M / 128) * N * bits * colStride / 32`` columns of 32-bit cells; an fp32 ``[128, N]``
        accumulator takes N columns, a packed fp16 ``[128, N]`` tile (colStride 1) N/2. Leading
        multi-buffer dims multiply the result.
        """
        if self.kind != "memdesc" or self.space != "tmem" or len(self.shape) < 2:
            return 0
        stride = re.search(r"colStride\s*=\s*(\d+)", self.encoding)
        col_stride = int(stride.group(1)) if stride else 1
        m, n = self.shape[-2], self.shape[-1]
        buffers = prod(self.shape[:-2]) if len(self.shape) > 2 else 1
        return buffers * ceil(m / 128) * ceil(n * self.bits * col_stride / 32)


def _shape_and_rest(body: str) -> tuple[tuple[int, ...], str]:
    dims = []
    match = re.match(r"((?:\d+x)*)", body)
    prefix = match.group(1) if match else ""
    for dim in prefix.split("x"):
        if dim:
            dims.append(int(dim))
    return tuple(dims), body[len(prefix):]


def parse_type(text: str) -> TType:
    """Parse a printed MLIR type (see the module docstring); unknown forms give kind ``other``."""
    text = text.strip()
    if text == "!ttg.async.token":
        return TType(text, "token")
    for prefix, kind in (("tensor<", "tensor"), ("!ttg.memdesc<", "memdesc")):
        if text.startswith(prefix) and text.endswith(">"):
            parts = split_top_level(text[len(prefix):-1])
            shape, element = _shape_and_rest(parts[0])
            if kind == "tensor":
                return TType(text, kind, shape, element, parts[1] if len(parts) > 1 else "", "register")
            encoding = parts[1] if len(parts) > 1 else ""
            memory = parts[2] if len(parts) > 2 else ""
            space = "tmem" if "tensor_memory" in memory else "smem"
            return TType(text, kind, shape, element, encoding, space)
    if text.startswith("!tt.tensordesc"):
        return TType(text, "tensordesc")
    if re.fullmatch(r"(?:[su]?i\d+|f\d+|bf16|tf32|f8\w*|index|!tt\.ptr<.*>)", text):
        return TType(text, "scalar", (), text, "", "register")
    return TType(text, "other")
