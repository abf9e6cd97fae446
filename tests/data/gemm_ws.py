"""A warp-specialized GEMM (``tl.range(..., warp_specialize=True)``) for the register-limit tests.

On sm_100 Triton 3.6 splits the loop into a default partition and worker partitions and hands each its
register budget with ``setmaxnreg``; ``tests/test_regs.py`` checks those budgets against the machine's
register-limit model. (On sm_90 the same kernel fails in Triton's Hopper warp-specialization pass at 4
warps, shared/docs/h200-anchors.md.)
"""

import triton
import triton.language as tl


@triton.jit
def matmul_ws(a_desc, b_desc, c_desc, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """One ``BLOCK_M x BLOCK_N`` tile of ``A @ B^T``, loop warp-specialized by Triton."""
    row = tl.program_id(0) * BLOCK_M
    col = tl.program_id(1) * BLOCK_N
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in tl.range(0, K, BLOCK_K, warp_specialize=True):
        a = a_desc.load([row, k0])
        b = b_desc.load([col, k0])
        acc = tl.dot(a, tl.trans(b), acc)
    c_desc.store([row, col], acc.to(tl.float16))


TWILL_KERNELS = {
    "matmul_ws": {
        "signature": {"a_desc": "tensordesc<fp16[128, 64]>", "b_desc": "tensordesc<fp16[128, 64]>",
                      "c_desc": "tensordesc<fp16[128, 128]>", "K": "i32"},
        "constexprs": {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64},
        "num_warps": 8,
        "num_stages": 3,
    },
}
