"""A row RMSNorm written as a user would: the memory-bound validation kernel of `twill tune`
(benchmarks/results/tune_scores.md)."""

import triton
import triton.language as tl


@triton.jit
def rmsnorm_rows(x_ptr, w_ptr, y_ptr, n_cols, stride, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    base = x_ptr + row * stride
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for c0 in range(0, n_cols, BLOCK):
        cols = c0 + tl.arange(0, BLOCK)
        x = tl.load(base + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
        acc += x * x
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / n_cols + eps)
    for c0 in range(0, n_cols, BLOCK):
        cols = c0 + tl.arange(0, BLOCK)
        x = tl.load(base + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
        tl.store(y_ptr + row * stride + cols, (x * rstd * w).to(tl.float16), mask=cols < n_cols)


TWILL_KERNELS = {
    "rmsnorm_rows": {"signature": {"x_ptr": "*fp16", "w_ptr": "*fp16", "y_ptr": "*fp16", "n_cols": "i32",
                                   "stride": "i32", "eps": "fp32"},
                     "constexprs": {"BLOCK": 1024}, "num_warps": 4, "num_stages": 2, "default": True},
}

TWILL_TUNE = {
    "rmsnorm_rows": {"problem": {"rows": 16384, "cols": 16384}, "ctas": "rows",
                     "trips": ["ceil(cols / BLOCK)", "ceil(cols / BLOCK)"], "flops": "4 * rows * cols",
                     "inputs": "rmsnorm_rows_inputs"},
}


def rmsnorm_rows_inputs(constexprs, problem):  # pragma: no cover - needs a GPU
    import torch

    rows, cols = problem["rows"], problem["cols"]
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn((rows, cols), device="cuda", dtype=torch.float16, generator=gen)
    w = torch.randn((cols,), device="cuda", dtype=torch.float16, generator=gen)
    y = torch.empty_like(x)
    return (rows,), (x, w, y, cols, x.stride(0), 1e-6)
