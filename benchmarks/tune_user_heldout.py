"""Two memory-bound kernels held out from the memory-bound pass of `twill tune` (benchmarks/results/
tune_scores.md, "Held-out memory-bound kernels"): written by the lead and timed on the H200 before that
pass began, kept outside the repository until it was scored.

* ``layernorm_rows``: a row LayerNorm, three sibling loops (mean, variance, normalize and write);
* ``axpby_rows``: ``y = alpha x + beta z`` row by row, one loop of two loads and a store.
"""

import triton
import triton.language as tl


@triton.jit
def layernorm_rows(x_ptr, w_ptr, b_ptr, y_ptr, n_cols, stride, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    base = x_ptr + row * stride
    s = tl.zeros([BLOCK], dtype=tl.float32)
    for c0 in range(0, n_cols, BLOCK):
        cols = c0 + tl.arange(0, BLOCK)
        s += tl.load(base + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    mean = tl.sum(s, axis=0) / n_cols
    v = tl.zeros([BLOCK], dtype=tl.float32)
    for c0 in range(0, n_cols, BLOCK):
        cols = c0 + tl.arange(0, BLOCK)
        x = tl.load(base + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
        d = tl.where(cols < n_cols, x - mean, 0.0)
        v += d * d
    rstd = 1.0 / tl.sqrt(tl.sum(v, axis=0) / n_cols + eps)
    for c0 in range(0, n_cols, BLOCK):
        cols = c0 + tl.arange(0, BLOCK)
        x = tl.load(base + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
        tl.store(y_ptr + row * stride + cols, ((x - mean) * rstd * w + b).to(tl.float16), mask=cols < n_cols)


@triton.jit
def axpby_rows(x_ptr, z_ptr, y_ptr, n_cols, stride, alpha, beta, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    for c0 in range(0, n_cols, BLOCK):
        cols = c0 + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
        z = tl.load(z_ptr + row * stride + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
        tl.store(y_ptr + row * stride + cols, (alpha * x + beta * z).to(tl.float16), mask=cols < n_cols)


TWILL_KERNELS = {
    "layernorm_rows": {"signature": {"x_ptr": "*fp16", "w_ptr": "*fp16", "b_ptr": "*fp16", "y_ptr": "*fp16",
                                     "n_cols": "i32", "stride": "i32", "eps": "fp32"},
                       "constexprs": {"BLOCK": 1024}, "num_warps": 4, "num_stages": 2, "default": True},
    "axpby_rows": {"signature": {"x_ptr": "*fp16", "z_ptr": "*fp16", "y_ptr": "*fp16", "n_cols": "i32",
                                 "stride": "i32", "alpha": "fp32", "beta": "fp32"},
                   "constexprs": {"BLOCK": 1024}, "num_warps": 4, "num_stages": 2},
}

TWILL_TUNE = {
    "layernorm_rows": {"problem": {"rows": 8192, "cols": 32768}, "ctas": "rows",
                       "trips": ["ceil(cols / BLOCK)"] * 3, "flops": "8 * rows * cols",
                       "inputs": "layernorm_rows_inputs"},
    "axpby_rows": {"problem": {"rows": 16384, "cols": 16384}, "ctas": "rows",
                   "trips": "ceil(cols / BLOCK)", "flops": "3 * rows * cols", "inputs": "axpby_rows_inputs"},
}


def layernorm_rows_inputs(constexprs, problem):  # pragma: no cover - needs a GPU
    """Launch arguments of :func:`layernorm_rows`: random fp16 ``x``, ``y`` of ``[rows, cols]``, ``w``,
    ``b`` of ``[cols]``, one program per row."""
    import torch

    rows, cols = problem["rows"], problem["cols"]
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn((rows, cols), device="cuda", dtype=torch.float16, generator=gen)
    w = torch.randn((cols,), device="cuda", dtype=torch.float16, generator=gen)
    b = torch.randn((cols,), device="cuda", dtype=torch.float16, generator=gen)
    y = torch.empty_like(x)
    return (rows,), (x, w, b, y, cols, x.stride(0), 1e-5)


def axpby_rows_inputs(constexprs, problem):  # pragma: no cover - needs a GPU
    """Launch arguments of :func:`axpby_rows`: random fp16 ``x``, ``z``, ``y`` of ``[rows, cols]``, one
    program per row."""
    import torch

    rows, cols = problem["rows"], problem["cols"]
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn((rows, cols), device="cuda", dtype=torch.float16, generator=gen)
    z = torch.randn((rows, cols), device="cuda", dtype=torch.float16, generator=gen)
    y = torch.empty_like(x)
    return (rows,), (x, z, y, cols, x.stride(0), 1.5, -0.5)
