"""Test kernels for integer tile arithmetic (tests/test_frontend.py): int4 weights unpacked with shifts and
masks before an MMA (data: costed), and a block index computed with a division (scalar: folded)."""

import triton
import triton.language as tl


@triton.jit
def int4_dequant_gemm(a_desc, q_ptr, c_ptr, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                      BLOCK_K: tl.constexpr):
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    rk = tl.arange(0, BLOCK_K)
    rn = tl.arange(0, BLOCK_N)
    for k0 in range(0, K, BLOCK_K):
        a = a_desc.load([0, k0])
        q = tl.load(q_ptr + (k0 + rk)[:, None] * BLOCK_N + rn[None, :])
        w = ((q >> 4) & 0xF) - 8
        w = (w ^ (q & 0x3)) * 3
        acc = tl.dot(a, w.to(tl.float16), acc)
    rm = tl.arange(0, BLOCK_M)
    tl.store(c_ptr + rm[:, None] * BLOCK_N + rn[None, :], acc)


@triton.jit
def scaled_by_block(x_ptr, s_ptr, y_ptr, K, BLOCK: tl.constexpr, GROUP: tl.constexpr):
    r = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for k0 in range(0, K, BLOCK):
        scale = tl.load(s_ptr + k0 // GROUP)  # a scalar index: folded
        acc += tl.load(x_ptr + k0 + r) * scale
    tl.store(y_ptr + r, acc)


TWILL_KERNELS = {
    "int4_dequant_gemm": {
        "signature": {"a_desc": "tensordesc<fp16[128, 64]>", "q_ptr": "*i32", "c_ptr": "*fp32", "K": "i32"},
        "constexprs": {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64}, "num_warps": 8, "num_stages": 3,
        "default": True,
    },
    "scaled_by_block": {
        "signature": {"x_ptr": "*fp32", "s_ptr": "*fp32", "y_ptr": "*fp32", "K": "i32"},
        "constexprs": {"BLOCK": 1024, "GROUP": 4096}, "num_warps": 4, "num_stages": 2,
    },
}
