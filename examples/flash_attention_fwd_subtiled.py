"""Sub-tiled FlashAttention forward (non-causal): the query tile split into two Tensor Core sub-tiles.

The paper's §6.1 input for the forward pass is the plain kernel (``flash_attention_fwd.py``) plus a
version "split to the target's TC instruction size, so Twill can schedule and assign sub-tiles
separately". Here one program owns ``2 * SUB_M`` query rows of one (batch, head), held as two
``[SUB_M, HEAD_DIM]`` sub-tiles ``q0`` and ``q1``. Every loop step loads one ``[BLOCK_N, HEAD_DIM]``
block of K and of V (one TMA load each, shared by both sub-tiles) and then, for each sub-tile ``i``
separately::

    qk_i      = q_i @ k^T                                   # [SUB_M, BLOCK_N] GEMM
    max_i     = max(row_max_i, rowmax(qk_i) * scale2)       # running row max (base 2)
    p_i       = exp2(qk_i * scale2 - max_i)                 # the exponential
    alpha_i   = exp2(row_max_i - max_i)                     # rescale factor of the old state
    row_sum_i = row_sum_i * alpha_i + rowsum(p_i)
    out_i     = out_i * alpha_i + p_i @ v                   # [SUB_M, HEAD_DIM] GEMM

so the loop carries ``row_max_i``, ``row_sum_i`` and ``out_i`` for each sub-tile, and the graph has two
GEMMs and one exponential per sub-tile. The code of the two sub-tiles is written out (suffixes ``0`` and
``1``) so that every graph op is named after its own variable.

One JIT kernel, :func:`attn_fwd_subtiled`, serves both targets; the sub-tile height is the constexpr
``SUB_M``, and ``TWILL_KERNELS`` has one entry per target:

==========================  ======  =====  =========  ===========================================
entry                       target  SUB_M  CTA tile   why
==========================  ======  =====  =========  ===========================================
``attn_fwd_subtiled_sm90``  sm_90   64     128 x 128  wgmma M is 64 per warpgroup (paper-facts U8)
``attn_fwd_subtiled_sm100`` sm_100  128    256 x 128  tcgen05 M = 128, FA4's ``q_stage = 2``
==========================  ======  =====  =========  ===========================================

``BLOCK_N = HEAD_DIM = 128``, fp16 inputs, fp32 accumulation, 8 warps (one warpgroup per sub-tile's
softmax in twill's cost model). Both entries compile on the CPU with Triton 3.6, so both graphs come from
the frontend; on sm_100 the GEMMs become ``tcgen05`` MMAs with their accumulators in tensor memory
(``ttng.tmem_load``/``tmem_store`` in the loop). The sm_100 binary Triton builds cannot launch on a
B200: its TMEM allocator gives S0, S1, O0, O1 and the fp16 P0, P1 their own columns (640 > 512; FA4
puts P over S) and three pipeline stages take 262,784 B of shared memory (> 232,448). Twill's graph
charges each S buffer only while S is live (docs/frontend.md §6), which is what lets P reuse it::

    twill schedule examples/flash_attention_fwd_subtiled.py::attn_fwd_subtiled_sm90 --machine h100
    twill schedule examples/flash_attention_fwd_subtiled.py::attn_fwd_subtiled_sm100 --machine b200

``python examples/flash_attention_fwd_subtiled.py`` runs the sm_90 entry on a GPU and compares with
``torch.nn.functional.scaled_dot_product_attention`` (needs torch and CUDA; importing this file does not).
"""

from __future__ import annotations

from typing import Any

import triton
import triton.language as tl

HEAD_DIM = 128
"""Head dimension, and keys per loop step (``BLOCK_N``)."""

SUB_M = {"sm_90": 64, "sm_100": 128}
"""Rows of one query sub-tile per target: the Tensor Core instruction's M."""


@triton.jit
def attn_fwd_subtiled(
    q_desc,
    k_desc,
    v_desc,
    o_desc,
    sm_scale,
    seq_len,
    SUB_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    HEAD_DIM: tl.constexpr,
):
    """O = softmax(Q K^T * sm_scale) V for ``2 * SUB_M`` query rows of one (batch, head), two sub-tiles."""
    tile_m = tl.program_id(0)
    head = tl.program_id(1)
    base = head * seq_len
    row0 = base + tile_m * (2 * SUB_M)
    row1 = row0 + SUB_M
    q0 = q_desc.load([row0, 0])
    q1 = q_desc.load([row1, 0])
    # Scores are kept in base 2: exp(x * s) == exp2(x * s * log2(e)).
    scale2 = sm_scale * 1.4426950408889634
    row_max0 = tl.full([SUB_M], float("-inf"), dtype=tl.float32)
    row_max1 = tl.full([SUB_M], float("-inf"), dtype=tl.float32)
    row_sum0 = tl.zeros([SUB_M], dtype=tl.float32)
    row_sum1 = tl.zeros([SUB_M], dtype=tl.float32)
    out0 = tl.zeros([SUB_M, HEAD_DIM], dtype=tl.float32)
    out1 = tl.zeros([SUB_M, HEAD_DIM], dtype=tl.float32)
    for kv_start in range(0, seq_len, BLOCK_N):
        k = k_desc.load([base + kv_start, 0])
        v = v_desc.load([base + kv_start, 0])
        kt = tl.trans(k)
        # sub-tile 0
        qk0 = tl.dot(q0, kt)
        max0 = tl.maximum(row_max0, tl.max(qk0, axis=1) * scale2)
        p0 = tl.math.exp2(qk0 * scale2 - max0[:, None])
        alpha0 = tl.math.exp2(row_max0 - max0)
        row_sum0 = row_sum0 * alpha0 + tl.sum(p0, axis=1)
        out0 = out0 * alpha0[:, None]
        out0 = tl.dot(p0.to(tl.float16), v, out0)
        row_max0 = max0
        # sub-tile 1
        qk1 = tl.dot(q1, kt)
        max1 = tl.maximum(row_max1, tl.max(qk1, axis=1) * scale2)
        p1 = tl.math.exp2(qk1 * scale2 - max1[:, None])
        alpha1 = tl.math.exp2(row_max1 - max1)
        row_sum1 = row_sum1 * alpha1 + tl.sum(p1, axis=1)
        out1 = out1 * alpha1[:, None]
        out1 = tl.dot(p1.to(tl.float16), v, out1)
        row_max1 = max1
    o_desc.store([row0, 0], (out0 / row_sum0[:, None]).to(tl.float16))
    o_desc.store([row1, 0], (out1 / row_sum1[:, None]).to(tl.float16))


def _entry(target: str, default: bool) -> dict[str, Any]:
    sub_m = SUB_M[target]
    q_desc = f"tensordesc<fp16[{sub_m}, {HEAD_DIM}]>"
    kv_desc = f"tensordesc<fp16[{HEAD_DIM}, {HEAD_DIM}]>"
    return {
        "kernel": "attn_fwd_subtiled",
        "signature": {"q_desc": q_desc, "k_desc": kv_desc, "v_desc": kv_desc, "o_desc": q_desc,
                      "sm_scale": "fp32", "seq_len": "i32"},
        "constexprs": {"SUB_M": sub_m, "BLOCK_N": HEAD_DIM, "HEAD_DIM": HEAD_DIM},
        "num_warps": 8,
        "num_stages": 3,
        "default": default,
    }


TWILL_KERNELS = {
    "attn_fwd_subtiled_sm90": _entry("sm_90", default=True),
    "attn_fwd_subtiled_sm100": _entry("sm_100", default=False),
}
"""How twill compiles the kernel for each target (argument types in Triton signature form)."""


def run_attention(q: Any, k: Any, v: Any, sm_scale: float,
                  entry: str = "attn_fwd_subtiled_sm90") -> Any:  # pragma: no cover - needs a GPU
    """Run :func:`attn_fwd_subtiled` with the settings of ``TWILL_KERNELS[entry]``.

    Parameters
    ----------
    q, k, v : torch.Tensor
        ``[batch, heads, seq, 128]`` fp16 CUDA tensors; ``seq`` a multiple of ``2 * SUB_M``.
    sm_scale : float
        Softmax scale (usually ``HEAD_DIM ** -0.5``).
    entry : str
        Which ``TWILL_KERNELS`` entry (sub-tile height) to run.

    Returns
    -------
    torch.Tensor
        O, shaped like ``q``.
    """
    import torch
    from triton.tools.tensor_descriptor import TensorDescriptor

    spec = TWILL_KERNELS[entry]
    sub_m = spec["constexprs"]["SUB_M"]
    batch, heads, seq, dim = q.shape
    if dim != HEAD_DIM or seq % (2 * sub_m) or seq % HEAD_DIM:
        raise ValueError(f"head dim must be {HEAD_DIM} and seq a multiple of {max(2 * sub_m, HEAD_DIM)}, "
                         f"got {tuple(q.shape)}")
    out = torch.empty_like(q)
    flat = [t.reshape(batch * heads * seq, dim) for t in (q, k, v, out)]
    blocks = ([sub_m, HEAD_DIM], [HEAD_DIM, HEAD_DIM], [HEAD_DIM, HEAD_DIM], [sub_m, HEAD_DIM])
    descs = [TensorDescriptor.from_tensor(t, b) for t, b in zip(flat, blocks, strict=True)]
    grid = (seq // (2 * sub_m), batch * heads)
    attn_fwd_subtiled[grid](*descs, sm_scale, seq, **spec["constexprs"], num_warps=spec["num_warps"],
                            num_stages=spec["num_stages"])
    return out


def main() -> int:  # pragma: no cover - needs a GPU
    """Compare the sm_90 entry with PyTorch SDPA on a random problem; returns a process exit code."""
    try:
        import torch
    except ImportError:
        print("torch is not installed; nothing to run")
        return 0
    if not torch.cuda.is_available():
        print("no CUDA device; nothing to run")
        return 0
    torch.manual_seed(0)
    shape = (2, 4, 1024, HEAD_DIM)
    q, k, v = (torch.randn(shape, device="cuda", dtype=torch.float16) for _ in range(3))
    scale = HEAD_DIM ** -0.5
    got = run_attention(q, k, v, scale)
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=scale)
    err = (got - want).abs().max().item()
    print(f"attn_fwd_subtiled_sm90: max |triton - sdpa| = {err:.3e}")
    return 0 if err < 2e-2 else 1


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
