"""Kernels written the way a user writes them, for ``twill tune`` tests (tests/test_tune_user.py).

* ``gemm_bias``: ``C = A B (+ bias)`` through pointers, masked for ragged M / N / K, a boolean constexpr
  ``HAS_BIAS``, unit strides given as constants (as Triton's JIT specializes a stride of 1);
* ``gemm_bias_overcount``: the same kernel with a ``flops`` expression four times too large;
* ``gemm_strided``: the same kernel with its strides left as runtime integers (Triton 3.6 then does not
  pipeline its loads: no ``loop.stage`` in the TTGIR, one copy of each tile in shared memory);
* ``softmax_rows``: a row softmax over long rows, two sibling K loops (max/sum, then write).
"""

import triton
import triton.language as tl


@triton.jit
def gemm_bias(a_ptr, b_ptr, bias_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_cm, stride_ak, stride_bn,
              stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
              HAS_BIAS: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, tl.cdiv(K, BLOCK_K)):
        ks = k0 * BLOCK_K + rk
        a = tl.load(a_ptr + rm[:, None] * stride_am + ks[None, :] * stride_ak,
                    mask=(rm[:, None] < M) & (ks[None, :] < K), other=0.0)
        b = tl.load(b_ptr + ks[:, None] * stride_bk + rn[None, :] * stride_bn,
                    mask=(ks[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
    if HAS_BIAS:
        bias = tl.load(bias_ptr + rn, mask=rn < N, other=0.0)
        acc = acc + bias[None, :].to(tl.float32)
    tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn, acc.to(c_ptr.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def softmax_rows(x_ptr, y_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    base = x_ptr + row * stride
    m = tl.full([BLOCK], float("-inf"), dtype=tl.float32)
    s = tl.zeros([BLOCK], dtype=tl.float32)
    for c0 in range(0, n_cols, BLOCK):
        cols = c0 + tl.arange(0, BLOCK)
        x = tl.load(base + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)
        new_m = tl.maximum(m, x)
        s = s * tl.exp(m - new_m) + tl.exp(x - new_m)
        m = new_m
    gm = tl.max(m, axis=0)
    gs = tl.sum(s * tl.exp(m - gm), axis=0)
    for c0 in range(0, n_cols, BLOCK):
        cols = c0 + tl.arange(0, BLOCK)
        x = tl.load(base + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)
        tl.store(y_ptr + row * stride + cols, (tl.exp(x - gm) / gs).to(tl.float16), mask=cols < n_cols)


_GB = {"a_ptr": "*fp16", "b_ptr": "*fp16", "bias_ptr": "*fp16", "c_ptr": "*fp16", "M": "i32", "N": "i32",
       "K": "i32", "stride_am": "i32", "stride_bk": "i32", "stride_cm": "i32"}
_GB_CONST = {"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 64, "HAS_BIAS": True, "stride_ak": 1, "stride_bn": 1,
             "stride_cn": 1}
TWILL_KERNELS = {
    "gemm_bias": {"signature": _GB, "constexprs": _GB_CONST, "num_warps": 4, "num_stages": 3,
                  "default": True},
    "gemm_bias_overcount": {"kernel": "gemm_bias", "signature": _GB, "constexprs": _GB_CONST,
                            "num_warps": 4, "num_stages": 3},
    # the strides left as runtime integers: Triton 3.6 does not pipeline the A and B loads
    "gemm_strided": {"kernel": "gemm_bias", "signature": {**_GB, "stride_ak": "i32", "stride_bn": "i32",
                                                          "stride_cn": "i32"},
                     "constexprs": {"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 64, "HAS_BIAS": True},
                     "num_warps": 4, "num_stages": 3},
    "softmax_rows": {"signature": {"x_ptr": "*fp16", "y_ptr": "*fp16", "n_cols": "i32", "stride": "i32"},
                     "constexprs": {"BLOCK": 1024}, "num_warps": 4, "num_stages": 2},
    "softmax_one_trips": {"kernel": "softmax_rows",
                          "signature": {"x_ptr": "*fp16", "y_ptr": "*fp16", "n_cols": "i32", "stride": "i32"},
                          "constexprs": {"BLOCK": 1024}, "num_warps": 4, "num_stages": 2},
}

_GT = {"problem": {"M": 4000, "N": 3000, "K": 1000}, "ctas": "ceil(M / BLOCK_M) * ceil(N / BLOCK_N)",
       "trips": "ceil(K / BLOCK_K)", "flops": "2 * M * N * K", "inputs": "gemm_bias_inputs"}
TWILL_TUNE = {
    "gemm_bias": _GT,
    "gemm_bias_overcount": {**_GT, "flops": "8 * M * N * K"},
    "gemm_strided": {k: v for k, v in _GT.items() if k != "inputs"},
    # two passes over the row: one trip expression per loop, in program order
    "softmax_rows": {"problem": {"rows": 8192, "cols": 65536}, "ctas": "rows",
                     "trips": ["ceil(cols / BLOCK)", "ceil(cols / BLOCK)"], "flops": "5 * rows * cols",
                     "inputs": "softmax_rows_inputs"},
    # the same kernel described as if it had one loop
    "softmax_one_trips": {"problem": {"rows": 8192, "cols": 65536}, "ctas": "rows",
                          "trips": "ceil(cols / BLOCK)", "flops": "5 * rows * cols"},
}


def gemm_bias_inputs(constexprs, problem):  # pragma: no cover - needs a GPU
    """Launch arguments of :func:`gemm_bias` for ``twill tune --measure``: random fp16 ``A [M, K]``,
    ``B [K, N]``, ``bias [N]`` and ``C [M, N]`` (row-major: the unit strides are the entry's constants)."""
    import torch

    m, n, k = problem["M"], problem["N"], problem["K"]
    gen = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn((m, k), device="cuda", dtype=torch.float16, generator=gen)
    b = torch.randn((k, n), device="cuda", dtype=torch.float16, generator=gen)
    bias = torch.randn((n,), device="cuda", dtype=torch.float16, generator=gen)
    c = torch.empty((m, n), device="cuda", dtype=torch.float16)
    grid = (triton.cdiv(m, constexprs["BLOCK_M"]), triton.cdiv(n, constexprs["BLOCK_N"]))
    return grid, (a, b, bias, c, m, n, k, a.stride(0), b.stride(0), c.stride(0))


def softmax_rows_inputs(constexprs, problem):  # pragma: no cover - needs a GPU
    """Launch arguments of :func:`softmax_rows` for ``twill tune --measure``: random fp16 ``x`` and ``y``
    of ``[rows, cols]``, one program per row."""
    import torch

    rows, cols = problem["rows"], problem["cols"]
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn((rows, cols), device="cuda", dtype=torch.float16, generator=gen)
    y = torch.empty_like(x)
    return (rows,), (x, y, cols, x.stride(0))
