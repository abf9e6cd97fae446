"""Single-pass FlashAttention backward (non-causal), as FlashAttention-3 does it, written for twill.

The paper's §6.1 backward input is FA3's single-pass algorithm written in Triton (5 GEMMs, one
exponential, then an atomic reduction to global memory), plus a sub-tiled version. One program owns a
block of ``BLOCK_N`` keys of one (batch, head): its K and V tiles are loaded once, and the loop walks the
query blocks. For a block of ``M`` query rows (``lse`` and ``delta`` come from the forward pass and a
preprocessing step; ``lse`` is in base 2, ``lse = log2(sum_j exp2(s_j * scale * log2 e))``)::

    s   = q @ k^T                                    # [M, BLOCK_N]        GEMM 1
    p   = exp2(s * scale * log2(e) - lse)            # softmax probabilities (the one exponential)
    dp  = do @ v^T                                   # [M, BLOCK_N]        GEMM 2
    ds  = p * (dp - delta) * scale                   # gradient of the scores (fp16)
    dv += p^T @ do                                   # [BLOCK_N, HEAD_DIM] GEMM 3, accumulator
    dk += ds^T @ q                                   # [BLOCK_N, HEAD_DIM] GEMM 4, accumulator
    dq  = ds @ k                                     # [M, HEAD_DIM]       GEMM 5
    atomic_add(dQ[rows], dq)                         # reduction over the key blocks of all programs

``dk`` and ``dv`` are carried by the loop; ``dq`` goes out through ``tl.atomic_add`` (a ``red.global.add``
of fp32, a variable-latency op in the graph). Q and dO are read with tensor descriptors (TMA), ``lse``
and ``delta`` with pointer loads; ``delta = rowsum(dO * O)`` is computed by the caller.

Two kernels, each with an entry per target in ``TWILL_KERNELS``:

``attn_bwd`` (plain)
    ``M = BLOCK_M`` query rows per step: 64 on sm_90 (a 64 x 128 tile, the power-of-two neighbour of
    FA3's 80 x 128 that the paper's §6.3 mentions), 128 on sm_100 (FA4's 1-CTA 128 x 128 tile).
``attn_bwd_subtiled``
    Two query sub-tiles of ``SUB_M`` rows per step (64 on sm_90: wgmma M per warpgroup; 128 on sm_100:
    tcgen05 M), i.e. 128 and 256 query rows per step. Each sub-tile has its own S, P, dP, dS, its own
    dQ GEMM and atomic, and its own dV and dK GEMMs, which accumulate into the shared ``dk``/``dv`` in
    turn (sub-tile 0 then sub-tile 1); the K/V tiles are shared. Five GEMMs, one exponential and one
    atomic per sub-tile, all separate ops that twill can schedule and assign apart.

``BLOCK_N = HEAD_DIM = 128``, fp16 inputs, fp32 accumulators and dQ, 8 warps. Every entry compiles to
TTGIR for its target on the CPU with Triton 3.6 (on sm_100 the GEMMs are ``tcgen05`` MMAs with TMEM
accumulators), so every graph of this file comes from the frontend and none is built by hand. The sm_100
binaries Triton builds cannot launch on a B200: its TMEM allocator gives S, dP, dQ, dK, dV and the fp16
dS their own columns (704 > 512 plain, 1,344 sub-tiled; FA4 aliases them) and the shared memory comes
to 345,184 B and 526,496 B (> 232,448); the paper (§6.4) too reports that Triton cannot compile the
Blackwell backward. Twill's graph charges the per-iteration S, dP and dQ buffers only while they hold a
value (docs/frontend.md §6). In the sub-tiled sm_100 entry, Triton 3.6 keeps each of dK and dV, which
two MMAs update per iteration, in two TMEM buffers and copies between them through registers
(``tmem_load`` + ``tmem_store``); the graph keeps those copies (docs/frontend.md §10).

``python examples/flash_attention_bwd.py`` runs the sm_90 entries on a GPU and compares dQ, dK and dV with
PyTorch autograd (needs torch and CUDA; importing this file does not).
"""

from __future__ import annotations

from typing import Any

import triton
import triton.language as tl

HEAD_DIM = 128
"""Head dimension, and keys per program (``BLOCK_N``)."""

TC_M = {"sm_90": 64, "sm_100": 128}
"""Rows of a Tensor Core instruction's M per target: the plain query block and the sub-tile height."""

LOG2E = 1.4426950408889634


@triton.jit
def attn_bwd(
    q_desc,
    k_desc,
    v_desc,
    do_desc,
    dk_desc,
    dv_desc,
    dq_ptr,
    lse_ptr,
    delta_ptr,
    sm_scale,
    seq_len,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    HEAD_DIM: tl.constexpr,
):
    """dK, dV of one block of ``BLOCK_N`` keys and its share of dQ (atomically added), one (batch, head)."""
    tile_n = tl.program_id(0)
    head = tl.program_id(1)
    base = head * seq_len
    kv_row = base + tile_n * BLOCK_N
    k = k_desc.load([kv_row, 0])
    v = v_desc.load([kv_row, 0])
    kt = tl.trans(k)
    vt = tl.trans(v)
    scale2 = sm_scale * 1.4426950408889634
    rows = tl.arange(0, BLOCK_M)
    cols = tl.arange(0, HEAD_DIM)
    dk = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    for q_start in range(0, seq_len, BLOCK_M):
        q_row = base + q_start
        q = q_desc.load([q_row, 0])
        do = do_desc.load([q_row, 0])
        lse = tl.load(lse_ptr + q_row + rows)
        delta = tl.load(delta_ptr + q_row + rows)
        s = tl.dot(q, kt)
        p = tl.math.exp2(s * scale2 - lse[:, None])
        dp = tl.dot(do, vt)
        ds = (p * (dp - delta[:, None]) * sm_scale).to(tl.float16)
        p16 = p.to(tl.float16)
        dv = tl.dot(tl.trans(p16), do, dv)
        dk = tl.dot(tl.trans(ds), q, dk)
        dq = tl.dot(ds, k)
        tl.atomic_add(dq_ptr + (q_row + rows)[:, None] * HEAD_DIM + cols[None, :], dq, sem="relaxed")
    dk_desc.store([kv_row, 0], dk.to(tl.float16))
    dv_desc.store([kv_row, 0], dv.to(tl.float16))


@triton.jit
def attn_bwd_subtiled(
    q_desc,
    k_desc,
    v_desc,
    do_desc,
    dk_desc,
    dv_desc,
    dq_ptr,
    lse_ptr,
    delta_ptr,
    sm_scale,
    seq_len,
    SUB_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    HEAD_DIM: tl.constexpr,
):
    """As :func:`attn_bwd`, with ``2 * SUB_M`` query rows per step handled as two separate sub-tiles."""
    tile_n = tl.program_id(0)
    head = tl.program_id(1)
    base = head * seq_len
    kv_row = base + tile_n * BLOCK_N
    k = k_desc.load([kv_row, 0])
    v = v_desc.load([kv_row, 0])
    kt = tl.trans(k)
    vt = tl.trans(v)
    scale2 = sm_scale * 1.4426950408889634
    rows = tl.arange(0, SUB_M)
    cols = tl.arange(0, HEAD_DIM)
    dk = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    for q_start in range(0, seq_len, 2 * SUB_M):
        row0 = base + q_start
        row1 = row0 + SUB_M
        # sub-tile 0
        q0 = q_desc.load([row0, 0])
        do0 = do_desc.load([row0, 0])
        lse0 = tl.load(lse_ptr + row0 + rows)
        delta0 = tl.load(delta_ptr + row0 + rows)
        s0 = tl.dot(q0, kt)
        p0 = tl.math.exp2(s0 * scale2 - lse0[:, None])
        dp0 = tl.dot(do0, vt)
        ds0 = (p0 * (dp0 - delta0[:, None]) * sm_scale).to(tl.float16)
        p16_0 = p0.to(tl.float16)
        dv0 = tl.dot(tl.trans(p16_0), do0, dv)
        dk0 = tl.dot(tl.trans(ds0), q0, dk)
        dq0 = tl.dot(ds0, k)
        tl.atomic_add(dq_ptr + (row0 + rows)[:, None] * HEAD_DIM + cols[None, :], dq0, sem="relaxed")
        # sub-tile 1
        q1 = q_desc.load([row1, 0])
        do1 = do_desc.load([row1, 0])
        lse1 = tl.load(lse_ptr + row1 + rows)
        delta1 = tl.load(delta_ptr + row1 + rows)
        s1 = tl.dot(q1, kt)
        p1 = tl.math.exp2(s1 * scale2 - lse1[:, None])
        dp1 = tl.dot(do1, vt)
        ds1 = (p1 * (dp1 - delta1[:, None]) * sm_scale).to(tl.float16)
        p16_1 = p1.to(tl.float16)
        dv1 = tl.dot(tl.trans(p16_1), do1, dv0)
        dk1 = tl.dot(tl.trans(ds1), q1, dk0)
        dq1 = tl.dot(ds1, k)
        tl.atomic_add(dq_ptr + (row1 + rows)[:, None] * HEAD_DIM + cols[None, :], dq1, sem="relaxed")
        dv = dv1
        dk = dk1
    dk_desc.store([kv_row, 0], dk.to(tl.float16))
    dv_desc.store([kv_row, 0], dv.to(tl.float16))


def _entry(kernel: str, target: str) -> dict[str, Any]:
    rows = TC_M[target]
    q_desc = f"tensordesc<fp16[{rows}, {HEAD_DIM}]>"
    kv_desc = f"tensordesc<fp16[{HEAD_DIM}, {HEAD_DIM}]>"
    height = "SUB_M" if kernel == "attn_bwd_subtiled" else "BLOCK_M"
    return {
        "kernel": kernel,
        "signature": {"q_desc": q_desc, "k_desc": kv_desc, "v_desc": kv_desc, "do_desc": q_desc,
                      "dk_desc": kv_desc, "dv_desc": kv_desc, "dq_ptr": "*fp32", "lse_ptr": "*fp32",
                      "delta_ptr": "*fp32", "sm_scale": "fp32", "seq_len": "i32"},
        "constexprs": {height: rows, "BLOCK_N": HEAD_DIM, "HEAD_DIM": HEAD_DIM},
        "num_warps": 8,
        "num_stages": 2,
        "default": kernel == "attn_bwd" and target == "sm_90",
    }


TWILL_KERNELS = {
    f"{kernel}_{target.replace('_', '')}": _entry(kernel, target)
    for kernel in ("attn_bwd", "attn_bwd_subtiled")
    for target in ("sm_90", "sm_100")
}
"""Entries ``attn_bwd_sm90``, ``attn_bwd_sm100``, ``attn_bwd_subtiled_sm90``, ``attn_bwd_subtiled_sm100``."""


def run_backward(q: Any, k: Any, v: Any, o: Any, do: Any, lse2: Any, sm_scale: float,
                 entry: str = "attn_bwd_sm90") -> tuple[Any, Any, Any]:  # pragma: no cover - needs a GPU
    """dQ, dK, dV of attention with one ``TWILL_KERNELS`` entry.

    Parameters
    ----------
    q, k, v, o, do : torch.Tensor
        ``[batch, heads, seq, 128]`` fp16 CUDA tensors: inputs, forward output and its gradient; ``seq``
        a multiple of 128 and of the entry's query rows per step.
    lse2 : torch.Tensor
        ``[batch, heads, seq]`` fp32: the base-2 log-sum-exp of each row of ``q k^T * sm_scale``.
    sm_scale : float
        Softmax scale.
    entry : str
        Which ``TWILL_KERNELS`` entry to run.

    Returns
    -------
    tuple of torch.Tensor
        dQ (fp32), dK and dV (fp16), shaped like ``q``.
    """
    import torch
    from triton.tools.tensor_descriptor import TensorDescriptor

    spec = TWILL_KERNELS[entry]
    kernel = attn_bwd_subtiled if spec["kernel"] == "attn_bwd_subtiled" else attn_bwd
    rows = spec["constexprs"].get("SUB_M", spec["constexprs"].get("BLOCK_M"))
    step = rows * (2 if kernel is attn_bwd_subtiled else 1)
    batch, heads, seq, dim = q.shape
    if dim != HEAD_DIM or seq % step or seq % HEAD_DIM:
        raise ValueError(f"head dim must be {HEAD_DIM} and seq a multiple of {max(step, HEAD_DIM)}, "
                         f"got {tuple(q.shape)}")
    delta = (o.float() * do.float()).sum(-1).contiguous()
    dq = torch.zeros(q.shape, device=q.device, dtype=torch.float32)
    dk, dv = torch.empty_like(k), torch.empty_like(v)

    def desc(t: Any, block_rows: int) -> Any:
        return TensorDescriptor.from_tensor(t.reshape(batch * heads * seq, dim), [block_rows, HEAD_DIM])

    grid = (seq // HEAD_DIM, batch * heads)
    kernel[grid](desc(q, rows), desc(k, HEAD_DIM), desc(v, HEAD_DIM), desc(do, rows), desc(dk, HEAD_DIM),
                 desc(dv, HEAD_DIM), dq, lse2.contiguous(), delta, sm_scale, seq, **spec["constexprs"],
                 num_warps=spec["num_warps"], num_stages=spec["num_stages"])
    return dq, dk, dv


def main() -> int:  # pragma: no cover - needs a GPU
    """Compare both sm_90 entries with PyTorch autograd on a random problem; returns a process exit code."""
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
    q, k, v, do = (torch.randn(shape, device="cuda", dtype=torch.float16) for _ in range(4))
    scale = HEAD_DIM ** -0.5
    qf, kf, vf = (t.float().requires_grad_() for t in (q, k, v))
    scores = qf @ kf.transpose(-1, -2) * scale
    of = torch.softmax(scores, dim=-1) @ vf
    of.backward(do.float())
    lse2 = (torch.logsumexp(scores, dim=-1) * LOG2E).detach()
    o = of.detach().to(torch.float16)
    worst = 0.0
    for entry in ("attn_bwd_sm90", "attn_bwd_subtiled_sm90"):
        got = run_backward(q, k, v, o, do, lse2, scale, entry)
        for name, value, want in zip(("dq", "dk", "dv"), got, (qf.grad, kf.grad, vf.grad), strict=True):
            err = ((value.float() - want).abs().max() / want.abs().max()).item()
            worst = max(worst, err)
            print(f"{entry}: {name} max |triton - torch| / max |torch| = {err:.3e}")
    return 0 if worst < 2e-2 else 1


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
