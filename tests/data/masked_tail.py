"""Row-wise ``exp2`` of a matrix whose width is not a multiple of the tile: the final tile is partial.

Two ways to handle the partial final tile, for the predication/divergence cost tests
(``tests/test_predication.py``, shared/seeds/003_8ff7bc8ce6113243.txt):

* ``masked_tail``: masks. ``tl.load(mask=, other=)``, ``tl.where`` (``arith.select``) and
  ``tl.store(mask=)`` run the full tile on every iteration with the out-of-range lanes predicated off;
  twill costs them by the predication rule (a full tile plus the predicate, no serialization).
* ``branch_tail``: an ``if`` on the (scalar) "is this the final tile" condition around side-effect-free
  tile math; twill if-converts the ``scf.if`` and costs it as both sides, back to back (the divergence
  rule, ``CostModel.divergent``).

``TWILL_KERNELS`` tells twill how to compile them on the CPU (``twill schedule tests/data/masked_tail.py``).
"""

import triton
import triton.language as tl


@triton.jit
def masked_tail(x_ptr, y_ptr, sum_ptr, n_cols, stride, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """``y = exp2(x)`` tile by tile along a row block, and the row sums of ``y``; masks for the tail."""
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        mask = (cols < n_cols)[None, :]
        offs = rows[:, None] * stride + cols[None, :]
        x = tl.load(x_ptr + offs, mask=mask, other=0.0)
        y = tl.where(mask, tl.math.exp2(x), 0.0)
        tl.store(y_ptr + offs, y, mask=mask)
        acc += y
    tl.store(sum_ptr + rows, tl.sum(acc, axis=1))


@triton.jit
def branch_tail(x_ptr, sum_ptr, n_cols, stride, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """The same row sums of ``exp2(x)``, with a branch for the final tile instead of a masked select."""
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        mask = (cols < n_cols)[None, :]
        x = tl.load(x_ptr + rows[:, None] * stride + cols[None, :], mask=mask, other=0.0)
        if start + BLOCK_N > n_cols:  # noqa: SIM108 - a statement if, so Triton emits an scf.if
            y = tl.math.exp2(x) * 0.5
        else:
            y = tl.math.exp2(x)
        acc += y
    tl.store(sum_ptr + rows, tl.sum(acc, axis=1))


_SIGNATURE = {"x_ptr": "*fp32", "y_ptr": "*fp32", "sum_ptr": "*fp32", "n_cols": "i32", "stride": "i32"}

TWILL_KERNELS = {
    "masked_tail": {
        "signature": _SIGNATURE,
        "constexprs": {"BLOCK_M": 64, "BLOCK_N": 64},
        "num_warps": 4,
        "num_stages": 1,
        "default": True,
    },
    "branch_tail": {
        "signature": {k: v for k, v in _SIGNATURE.items() if k != "y_ptr"},
        "constexprs": {"BLOCK_M": 64, "BLOCK_N": 64},
        "num_warps": 4,
        "num_stages": 1,
    },
}
"""How twill compiles each kernel of this file (argument types in Triton signature form)."""
