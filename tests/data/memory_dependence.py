"""Test kernel (tests/test_frontend.py): each iteration reads the row the previous one stored."""

import triton
import triton.language as tl


@triton.jit
def running_sum_rows(x_ptr, y_ptr, n, D: tl.constexpr):
    d = tl.arange(0, D)
    for i in range(1, n):
        prev = tl.load(y_ptr + (i - 1) * D + d)
        x = tl.load(x_ptr + i * D + d)
        tl.store(y_ptr + i * D + d, prev + x)


TWILL_KERNELS = {"running_sum_rows": {"signature": {"x_ptr": "*fp32", "y_ptr": "*fp32", "n": "i32"},
                                      "constexprs": {"D": 1024}, "num_warps": 4, "num_stages": 2,
                                      "default": True}}
