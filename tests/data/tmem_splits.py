"""Kernels that split tiles into column halves, for the frontend's handling of split tensor-memory loads
(docs/frontend.md §10). ``TWILL_KERNELS`` compiles each for sm_100 on the CPU.

``rescale``
    Scales the two column halves of an MMA accumulator differently and joins them back as the next
    iteration's accumulator (a correction step). Triton's ``OptimizeTMemLayouts`` cannot run on this
    before its pipeliner, so twill models the loads whole and says so with a warning.
``register_halves``
    Splits a tile loaded through pointers, not from tensor memory: nothing for the pass to do, so twill
    does not run it.
"""

import triton
import triton.language as tl

ROWS, COLS, DEPTH = 128, 128, 64


@triton.jit
def _halves(x, M: tl.constexpr, N: tl.constexpr):
    return tl.split(tl.permute(tl.reshape(x, [M, 2, N // 2]), (0, 2, 1)))


@triton.jit
def _whole(a, b, M: tl.constexpr, N: tl.constexpr):
    return tl.reshape(tl.permute(tl.join(a, b), (0, 2, 1)), [M, N])


@triton.jit
def rescale(a_desc, b_desc, out_ptr, steps, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
    acc = tl.zeros([M, N], dtype=tl.float32)
    for i in range(0, steps):
        acc = tl.dot(a_desc.load([i * M, 0]), tl.trans(b_desc.load([i * N, 0])), acc)
        lo, hi = _halves(acc, M, N)
        acc = _whole(lo * 0.5, hi * 0.25, M, N)
    r = tl.arange(0, M)
    c = tl.arange(0, N)
    tl.store(out_ptr + r[:, None] * N + c[None, :], acc)


@triton.jit
def register_halves(x_ptr, out_ptr, steps, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
    r = tl.arange(0, M)
    c = tl.arange(0, N)
    total = tl.zeros([M, N], dtype=tl.float32)
    for i in range(0, steps):
        lo, hi = _halves(tl.load(x_ptr + i * M * N + r[:, None] * N + c[None, :]), M, N)
        total += _whole(tl.math.exp2(lo), hi * 3.0, M, N)
    tl.store(out_ptr + r[:, None] * N + c[None, :], total)


_SIZES = {"M": ROWS, "N": COLS, "K": DEPTH}
TWILL_KERNELS = {
    "rescale": {"signature": {"a_desc": f"tensordesc<fp16[{ROWS}, {DEPTH}]>",
                              "b_desc": f"tensordesc<fp16[{COLS}, {DEPTH}]>", "out_ptr": "*fp32",
                              "steps": "i32"},
                "constexprs": dict(_SIZES), "num_warps": 4, "num_stages": 2},
    "register_halves": {"signature": {"x_ptr": "*fp32", "out_ptr": "*fp32", "steps": "i32"},
                        "constexprs": dict(_SIZES), "num_warps": 4, "num_stages": 2},
}
