"""FlashAttention forward (non-causal) with TMA tensor descriptors, written for twill.

One program computes ``BLOCK_M`` query rows of one (batch, head) and walks the keys and values in
``BLOCK_N`` blocks with an online softmax in base 2. Q, K, V and O are 2-D ``[batch * heads * seq, dim]``
fp16 tensors handed in as host :class:`triton.tools.tensor_descriptor.TensorDescriptor` objects, which
compile to TMA loads on both sm_90 and sm_100.

``TWILL_KERNELS`` tells twill how to compile the kernel without running it::

    twill schedule examples/flash_attention_fwd.py --machine h100

``python examples/flash_attention_fwd.py`` runs it on a GPU and compares with
``torch.nn.functional.scaled_dot_product_attention`` (needs torch and CUDA; importing this file does not).
"""

from __future__ import annotations

import triton
import triton.language as tl

BLOCK = 128
"""Rows of Q per program, keys per loop step and head dimension (all 128 here)."""

_DESC = f"tensordesc<fp16[{BLOCK}, {BLOCK}]>"


@triton.jit
def attn_fwd(
    q_desc,
    k_desc,
    v_desc,
    o_desc,
    sm_scale,
    seq_len,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    HEAD_DIM: tl.constexpr,
):
    """O = softmax(Q K^T * sm_scale) V for one block of query rows of one (batch, head)."""
    tile_m = tl.program_id(0)
    head = tl.program_id(1)
    base = head * seq_len
    q_row = base + tile_m * BLOCK_M
    q = q_desc.load([q_row, 0])
    # Scores are kept in base 2: exp(x * s) == exp2(x * s * log2(e)).
    scale2 = sm_scale * 1.4426950408889634
    row_max = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    row_sum = tl.zeros([BLOCK_M], dtype=tl.float32)
    out = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    for kv_start in range(0, seq_len, BLOCK_N):
        k = k_desc.load([base + kv_start, 0])
        qk = tl.dot(q, tl.trans(k))
        new_max = tl.maximum(row_max, tl.max(qk, axis=1) * scale2)
        p = tl.math.exp2(qk * scale2 - new_max[:, None])
        alpha = tl.math.exp2(row_max - new_max)
        row_sum = row_sum * alpha + tl.sum(p, axis=1)
        out = out * alpha[:, None]
        v = v_desc.load([base + kv_start, 0])
        out = tl.dot(p.to(tl.float16), v, out)
        row_max = new_max
    out = out / row_sum[:, None]
    o_desc.store([q_row, 0], out.to(tl.float16))


TWILL_KERNELS = {
    "attn_fwd": {
        "signature": {
            "q_desc": _DESC,
            "k_desc": _DESC,
            "v_desc": _DESC,
            "o_desc": _DESC,
            "sm_scale": "fp32",
            "seq_len": "i32",
        },
        "constexprs": {"BLOCK_M": BLOCK, "BLOCK_N": BLOCK, "HEAD_DIM": BLOCK},
        "num_warps": 8,
        "num_stages": 3,
        "default": True,
    },
}
"""How twill compiles each kernel of this file (argument types in Triton signature form)."""

TWILL_TUNE = {
    "attn_fwd": {
        "descriptors": {"q_desc": ["BLOCK_M", "HEAD_DIM"], "k_desc": ["BLOCK_N", "HEAD_DIM"],
                        "v_desc": ["BLOCK_N", "HEAD_DIM"], "o_desc": ["BLOCK_M", "HEAD_DIM"]},
        "problem": {"batch": 4, "heads": 32, "seq_len": 8192},
        "ctas": "ceil(seq_len / BLOCK_M) * batch * heads",
        "trips": "ceil(seq_len / BLOCK_N)",
        "flops": "4 * batch * heads * seq_len * seq_len * HEAD_DIM",
        "inputs": "attn_fwd_inputs",
    },
}
"""What ``twill tune`` needs: descriptor blocks in constexpr names, the problem size, the launch grid's
CTA count, loop trips per CTA and FLOPs (non-causal: two GEMMs of 2 N^2 D per head); ``inputs``: what
``--measure`` launches."""


def attn_fwd_inputs(constexprs, problem):  # pragma: no cover - needs a GPU
    """Launch arguments of :func:`attn_fwd` for ``twill tune --measure``: ``(grid, args)`` with random fp16
    Q, K, V and a preallocated O, ``[batch * heads * seq_len, HEAD_DIM]`` on the GPU, descriptors of the
    config's blocks (``TWILL_TUNE["attn_fwd"]["inputs"]``, twill/tune/measure.py)."""
    import torch
    from triton.tools.tensor_descriptor import TensorDescriptor

    batch, heads, seq = problem["batch"], problem["heads"], problem["seq_len"]
    bm, bn, dim = constexprs["BLOCK_M"], constexprs["BLOCK_N"], constexprs["HEAD_DIM"]
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn((batch * heads * seq, dim), device="cuda", dtype=torch.float16, generator=gen)
               for _ in range(3))
    o = torch.empty_like(q)
    descs = (TensorDescriptor.from_tensor(q, [bm, dim]), TensorDescriptor.from_tensor(k, [bn, dim]),
             TensorDescriptor.from_tensor(v, [bn, dim]), TensorDescriptor.from_tensor(o, [bm, dim]))
    return (triton.cdiv(seq, bm), batch * heads), (*descs, dim ** -0.5, seq)


def run_attention(q, k, v, sm_scale: float):  # pragma: no cover - needs a GPU
    """Run :func:`attn_fwd` on ``[batch, heads, seq, 128]`` fp16 CUDA tensors; returns O like ``q``."""
    import torch
    from triton.tools.tensor_descriptor import TensorDescriptor

    batch, heads, seq, dim = q.shape
    if dim != BLOCK or seq % BLOCK:
        raise ValueError(f"head dim must be {BLOCK} and seq a multiple of {BLOCK}, got {tuple(q.shape)}")
    out = torch.empty_like(q)
    flat = [t.reshape(batch * heads * seq, dim) for t in (q, k, v, out)]
    descs = [TensorDescriptor.from_tensor(t, [BLOCK, BLOCK]) for t in flat]
    spec = TWILL_KERNELS["attn_fwd"]
    grid = (seq // BLOCK, batch * heads)
    attn_fwd[grid](*descs, sm_scale, seq, **spec["constexprs"], num_warps=spec["num_warps"],
                   num_stages=spec["num_stages"])
    return out


def main() -> int:  # pragma: no cover - needs a GPU
    """Compare with PyTorch SDPA on a random problem; returns a process exit code."""
    try:
        import torch
    except ImportError:
        print("torch is not installed; nothing to run")
        return 0
    if not torch.cuda.is_available():
        print("no CUDA device; nothing to run")
        return 0
    torch.manual_seed(0)
    shape = (2, 4, 1024, BLOCK)
    q, k, v = (torch.randn(shape, device="cuda", dtype=torch.float16) for _ in range(3))
    scale = BLOCK ** -0.5
    got = run_attention(q, k, v, scale)
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=scale)
    err = (got - want).abs().max().item()
    print(f"max |triton - sdpa| = {err:.3e}")
    return 0 if err < 2e-2 else 1


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
