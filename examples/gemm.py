"""Tiled GEMM ``C = A @ B`` (fp16 in, fp32 accumulate, fp16 out), written for twill.

Two kernels with the same K loop (``matmul_wide`` is ``matmul`` with a 128 x 256 tile on 8 warps, the
tile of the fastest hand-written Hopper GEMMs):

* ``matmul`` (the default) reads A ``[M, K]`` and B ``[N, K]`` (K-major, as ``nn.Linear`` stores weights)
  through host TMA tensor descriptors and writes C through a descriptor.
* ``matmul_ptr`` reads A ``[M, K]`` and B ``[K, N]`` through pointers (``tl.load``), for kernels that
  do not use TMA.

``TWILL_KERNELS`` tells twill how to compile them without running them::

    twill schedule examples/gemm.py --machine h100
    twill schedule examples/gemm.py::matmul_ptr --machine b200

``python examples/gemm.py`` runs both on a GPU and compares with ``torch.matmul`` (needs torch and CUDA;
importing this file does not).
"""

from __future__ import annotations

import triton
import triton.language as tl

TILE_M, TILE_N, TILE_K = 128, 128, 64
"""Tile shape of one program and one K step."""


@triton.jit
def matmul(a_desc, b_desc, c_desc, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """One ``BLOCK_M x BLOCK_N`` tile of ``C = A @ B^T`` with ``B`` stored ``[N, K]``."""
    row = tl.program_id(0) * BLOCK_M
    col = tl.program_id(1) * BLOCK_N
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        a = a_desc.load([row, k0])
        b = b_desc.load([col, k0])
        acc = tl.dot(a, tl.trans(b), acc)
    c_desc.store([row, col], acc.to(tl.float16))


@triton.jit
def matmul_ptr(a_ptr, b_ptr, c_ptr, K, stride_am, stride_bk, stride_cm,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """One ``BLOCK_M x BLOCK_N`` tile of ``C = A @ B`` with row-major ``A [M, K]``, ``B [K, N]``."""
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    a_tile = a_ptr + rows[:, None] * stride_am + ks[None, :]
    b_tile = b_ptr + ks[:, None] * stride_bk + cols[None, :]
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for _ in range(0, K, BLOCK_K):
        a = tl.load(a_tile)
        b = tl.load(b_tile)
        acc = tl.dot(a, b, acc)
        a_tile += BLOCK_K
        b_tile += BLOCK_K * stride_bk
    tl.store(c_ptr + rows[:, None] * stride_cm + cols[None, :], acc.to(tl.float16))


_TILES = {"BLOCK_M": TILE_M, "BLOCK_N": TILE_N, "BLOCK_K": TILE_K}

TWILL_KERNELS = {
    "matmul": {
        "signature": {
            "a_desc": f"tensordesc<fp16[{TILE_M}, {TILE_K}]>",
            "b_desc": f"tensordesc<fp16[{TILE_N}, {TILE_K}]>",
            "c_desc": f"tensordesc<fp16[{TILE_M}, {TILE_N}]>",
            "K": "i32",
        },
        "constexprs": _TILES,
        "num_warps": 4,
        "num_stages": 3,
        "default": True,
    },
    "matmul_wide": {
        "kernel": "matmul",
        "signature": dict(a_desc=f"tensordesc<fp16[{TILE_M}, {TILE_K}]>",
                          b_desc=f"tensordesc<fp16[{2 * TILE_N}, {TILE_K}]>",
                          c_desc=f"tensordesc<fp16[{TILE_M}, {2 * TILE_N}]>", K="i32"),
        "constexprs": {"BLOCK_M": TILE_M, "BLOCK_N": 2 * TILE_N, "BLOCK_K": TILE_K},
        "num_warps": 8,
        "num_stages": 3,
    },
    "matmul_ptr": {
        "signature": {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16", "K": "i32", "stride_am": "i32",
                      "stride_bk": "i32", "stride_cm": "i32"},
        "constexprs": _TILES,
        "num_warps": 4,
        "num_stages": 3,
    },
}
"""How twill compiles each kernel of this file (argument types in Triton signature form)."""

TWILL_TUNE = {
    "matmul": {
        "descriptors": {"a_desc": ["BLOCK_M", "BLOCK_K"], "b_desc": ["BLOCK_N", "BLOCK_K"],
                        "c_desc": ["BLOCK_M", "BLOCK_N"]},
        "problem": {"M": 8192, "N": 8192, "K": 8192},
        "ctas": "ceil(M / BLOCK_M) * ceil(N / BLOCK_N)",
        "trips": "ceil(K / BLOCK_K)",
        "flops": "2 * M * N * K",
        "inputs": "matmul_inputs",
    },
}
"""What ``twill tune`` needs (``twill/tune/grid.py``): descriptor blocks in constexpr names, the problem
size, the launch grid's CTA count, loop trips per CTA and FLOPs; ``inputs``: what ``--measure``
launches."""


def matmul_inputs(constexprs, problem):  # pragma: no cover - needs a GPU
    """Launch arguments of :func:`matmul` for ``twill tune --measure``: ``(grid, args)`` with random fp16
    ``A [M, K]``, ``B [N, K]`` and a preallocated ``C [M, N]`` on the GPU, descriptors of the config's
    blocks (``TWILL_TUNE["matmul"]["inputs"]``, twill/tune/measure.py)."""
    import torch
    from triton.tools.tensor_descriptor import TensorDescriptor

    m, n, k = problem["M"], problem["N"], problem["K"]
    bm, bn, bk = constexprs["BLOCK_M"], constexprs["BLOCK_N"], constexprs["BLOCK_K"]
    gen = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn((m, k), device="cuda", dtype=torch.float16, generator=gen)
    b = torch.randn((n, k), device="cuda", dtype=torch.float16, generator=gen)
    c = torch.empty((m, n), device="cuda", dtype=torch.float16)
    descs = (TensorDescriptor.from_tensor(a, [bm, bk]), TensorDescriptor.from_tensor(b, [bn, bk]),
             TensorDescriptor.from_tensor(c, [bm, bn]))
    return (triton.cdiv(m, bm), triton.cdiv(n, bn)), (*descs, k)


def run_matmul(a, b_nk):  # pragma: no cover - needs a GPU
    """``a @ b_nk.T`` with :func:`matmul` for fp16 CUDA tensors whose sizes are multiples of the tile."""
    import torch
    from triton.tools.tensor_descriptor import TensorDescriptor

    m, k = a.shape
    n = b_nk.shape[0]
    c = torch.empty((m, n), device=a.device, dtype=torch.float16)
    descs = (TensorDescriptor.from_tensor(a, [TILE_M, TILE_K]),
             TensorDescriptor.from_tensor(b_nk, [TILE_N, TILE_K]),
             TensorDescriptor.from_tensor(c, [TILE_M, TILE_N]))
    spec = TWILL_KERNELS["matmul"]
    matmul[(m // TILE_M, n // TILE_N)](*descs, k, **_TILES, num_warps=spec["num_warps"],
                                       num_stages=spec["num_stages"])
    return c


def run_matmul_ptr(a, b):  # pragma: no cover - needs a GPU
    """``a @ b`` with :func:`matmul_ptr` for row-major fp16 CUDA tensors (sizes multiples of the tile)."""
    import torch

    m, k = a.shape
    n = b.shape[1]
    c = torch.empty((m, n), device=a.device, dtype=torch.float16)
    spec = TWILL_KERNELS["matmul_ptr"]
    matmul_ptr[(m // TILE_M, n // TILE_N)](a, b, c, k, a.stride(0), b.stride(0), c.stride(0), **_TILES,
                                           num_warps=spec["num_warps"], num_stages=spec["num_stages"])
    return c


def main() -> int:  # pragma: no cover - needs a GPU
    """Compare both kernels with ``torch.matmul``; returns a process exit code."""
    try:
        import torch
    except ImportError:
        print("torch is not installed; nothing to run")
        return 0
    if not torch.cuda.is_available():
        print("no CUDA device; nothing to run")
        return 0
    torch.manual_seed(0)
    a = torch.randn((512, 1024), device="cuda", dtype=torch.float16)
    b = torch.randn((1024, 256), device="cuda", dtype=torch.float16)
    want = torch.matmul(a.float(), b.float())
    errors = {"matmul": (run_matmul(a, b.t().contiguous()).float() - want).abs().max().item(),
              "matmul_ptr": (run_matmul_ptr(a, b).float() - want).abs().max().item()}
    for name, err in errors.items():
        print(f"{name}: max |triton - torch| = {err:.3e}")
    return 0 if max(errors.values()) < 0.5 else 1


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
