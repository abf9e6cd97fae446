"""Decode attention (one query row per head), the kernel of the ``num_warps`` register-rationing study.

One program handles one head: it loads the head's query row ``q [D]`` and walks the key/value cache in
``BLOCK_N`` rows with an online softmax. There is no Tensor Core work (``q`` is a single row): the loop is
elementwise products, row reductions and ``exp``, all in registers, so its register use per thread is
dominated by the ``[BLOCK_N, BLOCK_D]`` K and V tiles divided over the CTA's threads. The masked loads
(``n_range < N``) predicate the last, partial tile instead of branching.

This is the kernel of ``shared/seeds/000_39b60fd9293b68ae.txt`` (experiments A-F) and of the Hopper table
in ``shared/docs/h200-anchors.md``; ``twill regs`` compiles it on the CPU::

    twill regs examples/decode_attention.py --target sm_90 --num-warps 2,4,8,16 --constexpr BLOCK_N=128

``python examples/decode_attention.py`` runs it on a GPU and compares with PyTorch (needs torch and CUDA).
"""

from __future__ import annotations

import triton
import triton.language as tl

HEAD_DIM = 128
"""Head dimension (``BLOCK_D``)."""


@triton.jit
def decode_attn(
    Q_ptr, K_ptr, V_ptr, Out_ptr,
    softmax_scale, N, H, D,
    stride_qh, stride_qd,
    stride_kn, stride_kh, stride_kd,
    stride_vn, stride_vh, stride_vd,
    stride_oh, stride_od,
    BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):
    """``Out[h] = softmax(q_h K_h^T * scale) V_h`` for the head ``h = program_id(0)``."""
    pid_h = tl.program_id(0)
    offs_d = tl.arange(0, BLOCK_D)
    q = tl.load(Q_ptr + pid_h * stride_qh + offs_d * stride_qd).to(tl.float32)
    m_i = -float("inf")
    l_i = 0.0
    acc = tl.zeros([BLOCK_D], dtype=tl.float32)
    for start_n in range(0, N, BLOCK_N):
        n_range = start_n + tl.arange(0, BLOCK_N)
        mask = n_range < N
        k = tl.load(K_ptr + n_range[:, None] * stride_kn + pid_h * stride_kh + offs_d[None, :] * stride_kd,
                    mask=mask[:, None], other=0.0)
        v = tl.load(V_ptr + n_range[:, None] * stride_vn + pid_h * stride_vh + offs_d[None, :] * stride_vd,
                    mask=mask[:, None], other=0.0)
        qk = tl.sum(q[None, :] * k.to(tl.float32), axis=1) * softmax_scale
        m_new = tl.maximum(m_i, tl.max(qk, axis=0))
        p = tl.exp(qk - m_new)
        alpha = tl.exp(m_i - m_new)
        l_i_new = l_i * alpha + tl.sum(p, axis=0)
        pv_sum = tl.sum(p[:, None] * v.to(tl.float32), axis=0)
        acc = acc * alpha + pv_sum
        m_i, l_i = m_new, l_i_new
    tl.store(Out_ptr + pid_h * stride_oh + offs_d * stride_od, acc / l_i)


_UNIT_STRIDES = {"stride_qd": 1, "stride_kd": 1, "stride_vd": 1, "stride_od": 1}

TWILL_KERNELS = {
    "decode_attn": {
        "signature": {
            "Q_ptr": "*fp16", "K_ptr": "*fp16", "V_ptr": "*fp16", "Out_ptr": "*fp16",
            "softmax_scale": "fp32", "N": "i32", "H": "i32", "D": "i32",
            "stride_qh": "i32", "stride_kn": "i32", "stride_kh": "i32", "stride_vn": "i32",
            "stride_vh": "i32", "stride_oh": "i32",
        },
        # Unit strides are constexpr 1, as the JIT specializes an integer argument equal to 1.
        "constexprs": {"BLOCK_N": 64, "BLOCK_D": HEAD_DIM, **_UNIT_STRIDES},
        "num_warps": 2,
        "num_stages": 3,
        "default": True,
    },
}
"""How twill compiles the kernel (argument types in Triton signature form)."""


def run_decode(q, k_cache, v_cache, *, block_n: int = 64, num_warps: int = 2):  # pragma: no cover - GPU
    """Decode attention for ``q [H, D]`` over ``k_cache, v_cache [N, H, D]`` (fp16 CUDA tensors)."""
    import torch

    heads, dim = q.shape
    n = k_cache.shape[0]
    out = torch.empty_like(q)
    decode_attn[(heads,)](q, k_cache, v_cache, out, dim ** -0.5, n, heads, dim,
                          q.stride(0), q.stride(1), *k_cache.stride(), *v_cache.stride(), *out.stride(),
                          BLOCK_N=block_n, BLOCK_D=dim, num_warps=num_warps)
    return out


def main() -> int:  # pragma: no cover - needs a GPU
    """Compare with a PyTorch reference on a random problem; returns a process exit code."""
    try:
        import torch
    except ImportError:
        print("torch is not installed; nothing to run")
        return 0
    if not torch.cuda.is_available():
        print("no CUDA device; nothing to run")
        return 0
    torch.manual_seed(0)
    heads, n = 32, 4096
    q = torch.randn((heads, HEAD_DIM), device="cuda", dtype=torch.float16)
    k = torch.randn((n, heads, HEAD_DIM), device="cuda", dtype=torch.float16)
    v = torch.randn((n, heads, HEAD_DIM), device="cuda", dtype=torch.float16)
    scores = torch.einsum("hd,nhd->hn", q.float(), k.float()) * HEAD_DIM ** -0.5
    want = torch.einsum("hn,nhd->hd", scores.softmax(-1), v.float())
    err = ((run_decode(q, k, v).float() - want).norm() / want.norm()).item()
    print(f"relative error {err:.2e}")
    return 0 if err < 1e-2 else 1


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
