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

Three kernels; ``attn_bwd`` computes a step in one of three forms (its ``FORM`` constexpr, a
compile-time choice: the loop holds only that form's ops). ``TWILL_KERNELS`` has one plain and one
sub-tiled entry per target, and the split and transposed ones.
Sub-tiling splits the dimension whose GEMMs exceed the target's Tensor Core instruction M, so twill can
schedule and assign the sub-tiles separately:

``attn_bwd``, ``FORM = "plain"`` (entries ``attn_bwd_sm90``, ``attn_bwd_sm100``)
    ``BLOCK_N = 128`` keys per program, ``BLOCK_M`` query rows per step: 64 on sm_90 (a 64 x 128 tile, the
    power-of-two neighbour of FA3's 80 x 128 that the paper's §6.3 mentions), 128 on sm_100 (FA4's 1-CTA
    128 x 128 tile).
``attn_bwd``, ``FORM = "split"`` (entry ``attn_bwd_split_sm100``; also ``attn_bwd_split_sm90``)
    The plain kernel with its elementwise work split by the column halves of S and dP, the way FA4's
    backward gives each half of the score tile to its own warpgroup: the five GEMMs stay whole, each
    half is loaded from tensor memory, exponentiated and turned into dS on its own, and the halves are
    joined again for the dV, dK and dQ GEMMs (Triton's ``split``/``join`` idiom; Triton loads each half
    with its own ``tmem_load``, docs/frontend.md §10). Twill can then give the halves to different
    warp groups. The ``_sm90`` entry compiles the same code for Hopper so that its arithmetic can be
    checked on an H200 (``main``).
``attn_bwd``, ``FORM = "transposed"`` (entry ``attn_bwd_transposed_sm100``; also ``_sm90``)
    The plain kernel computed transposed, as FA4's backward does: ``st = k @ q^T`` and ``dpt = v @ do^T``
    are ``[BLOCK_N, BLOCK_M]`` tiles, so P^T and dS^T are the left operands of the dV and dK GEMMs, and
    on sm_100 Triton hands them to those MMAs in tensor memory (``tmem_store``); only dS, for the dQ
    GEMM, is staged in shared memory each iteration (the plain kernel stages P and dS there).
``attn_bwd_subtiled_kv`` (entry ``attn_bwd_subtiled_sm90``)
    On Hopper the plain kernel's S, dP and dQ GEMMs already have wgmma's M = 64 (query rows), but dV and
    dK have M = 128 (keys). This kernel splits the 128 keys into two sub-tiles of ``SUB_N = 64``, the way
    FA3 splits the key block between its two MMA warpgroups: each sub-tile has its own S, P, dP, dS and
    its own loop-carried dV and dK, and contributes a dQ GEMM; the second dQ GEMM accumulates onto the
    first and one atomic adds the sum. Q, dO, lse and delta are shared. Every GEMM is 64 rows.
``attn_bwd_subtiled_q`` (entry ``attn_bwd_subtiled_sm100``; also ``attn_bwd_subtiled_q_sm90``)
    On Blackwell every GEMM of the plain kernel already has tcgen05's M = 128, and splitting the keys
    would need four 128-column dK/dV accumulators, all 512 TMEM columns. This kernel instead takes two
    query sub-tiles of ``SUB_M = 128`` rows per step (as FA4's forward takes two Q tiles): each has its
    own S, P, dP, dS, dQ GEMM and atomic, and its own dV and dK GEMMs, which accumulate in turn into the
    shared dK/dV. The ``_q_sm90`` entry compiles the same kernel for Hopper (SUB_M = 64) so that its code
    can be checked on an H200.

Five GEMMs and one exponential per sub-tile in both sub-tiled kernels, all separate ops.

``BLOCK_N = HEAD_DIM = 128``, fp16 inputs, fp32 accumulators and dQ, 8 warps. Every entry compiles to
TTGIR for its target on the CPU with Triton 3.6 (on sm_100 the GEMMs are ``tcgen05`` MMAs with TMEM
accumulators), so every graph of this file comes from the frontend and none is built by hand. The sm_100
binaries Triton builds cannot launch on a B200: its TMEM allocator gives S, dP, dQ, dK, dV and the fp16
dS their own columns (704 > 512 plain, 1,344 sub-tiled; FA4 aliases them) and the shared memory comes
to 345,184 B and 526,496 B (> 232,448 B); the paper (§6.4) too reports that Triton cannot compile the
Blackwell backward. Twill's graph charges the per-iteration S, dP and dQ buffers only while they hold a
value (docs/frontend.md §6). In the sub-tiled sm_100 entry, Triton 3.6 keeps each of dK and dV, which
two MMAs update per iteration, in two TMEM buffers and copies between them through registers
(``tmem_load`` + ``tmem_store``); the graph keeps those copies (docs/frontend.md §10).

``python examples/flash_attention_bwd.py`` runs the sm_90 entries on a GPU and compares dQ, dK and dV with
PyTorch autograd (needs torch and CUDA; importing this file does not). On an H200 on 2026-11-30 every
entry, ``attn_bwd_split_sm90`` and ``attn_bwd_transposed_sm90`` included, was within 5e-4 of autograd
(largest relative error).
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
def _column_halves(x, M: tl.constexpr, N: tl.constexpr):
    """``x[:, :N/2], x[:, N/2:]`` of an ``[M, N]`` tile (the idiom of Triton's Blackwell tutorials)."""
    return tl.split(tl.permute(tl.reshape(x, [M, 2, N // 2]), (0, 2, 1)))


@triton.jit
def _join_columns(a, b, M: tl.constexpr, N: tl.constexpr):
    """The ``[M, N]`` tile whose column halves are ``a`` and ``b``."""
    return tl.reshape(tl.permute(tl.join(a, b), (0, 2, 1)), [M, N])


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
    FORM: tl.constexpr,
):
    """dK, dV of one block of ``BLOCK_N`` keys and its share of dQ (atomically added), one (batch, head).

    ``FORM`` picks how one step computes the scores (a compile-time choice; the loop holds only its ops):
    ``"plain"`` as the module docstring writes it; ``"split"`` with the exponential and dS on the column
    halves of S and dP (FA4's split), joined again for the GEMMs; ``"transposed"`` as FA4's backward does,
    ``st = k @ q^T`` and ``dpt = v @ do^T`` (``[BLOCK_N, BLOCK_M]``), so ``pt`` (P^T) and ``dst`` (dS^T) are
    the left operands of the dV and dK GEMMs, which Triton hands over in tensor memory on sm_100.
    """
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
        if FORM == "transposed":
            st = tl.dot(k, tl.trans(q))
            pt = tl.math.exp2(st * scale2 - lse[None, :])
            dpt = tl.dot(v, tl.trans(do))
            dst = (pt * (dpt - delta[None, :]) * sm_scale).to(tl.float16)
            dv = tl.dot(pt.to(tl.float16), do, dv)
            dk = tl.dot(dst, q, dk)
            dq = tl.dot(tl.trans(dst), k)
        elif FORM == "split":
            s = tl.dot(q, kt)
            s0, s1 = _column_halves(s, BLOCK_M, BLOCK_N)
            p0 = tl.math.exp2(s0 * scale2 - lse[:, None])
            p1 = tl.math.exp2(s1 * scale2 - lse[:, None])
            dp = tl.dot(do, vt)
            dp0, dp1 = _column_halves(dp, BLOCK_M, BLOCK_N)
            ds0 = (p0 * (dp0 - delta[:, None]) * sm_scale).to(tl.float16)
            ds1 = (p1 * (dp1 - delta[:, None]) * sm_scale).to(tl.float16)
            p16 = _join_columns(p0.to(tl.float16), p1.to(tl.float16), BLOCK_M, BLOCK_N)
            ds = _join_columns(ds0, ds1, BLOCK_M, BLOCK_N)
            dv = tl.dot(tl.trans(p16), do, dv)
            dk = tl.dot(tl.trans(ds), q, dk)
            dq = tl.dot(ds, k)
        else:
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
def attn_bwd_subtiled_kv(
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
    SUB_N: tl.constexpr,
    HEAD_DIM: tl.constexpr,
):
    """As :func:`attn_bwd` for ``2 * SUB_N`` keys held as two sub-tiles of ``SUB_N`` keys (FA3's split of
    the key block between its two MMA warpgroups): each has its own S, P, dP, dS, dV, dK; the dQ
    contributions of the two are summed by the second dQ GEMM, then added atomically."""
    tile_n = tl.program_id(0)
    head = tl.program_id(1)
    base = head * seq_len
    kv_row0 = base + tile_n * (2 * SUB_N)
    kv_row1 = kv_row0 + SUB_N
    k0 = k_desc.load([kv_row0, 0])
    k1 = k_desc.load([kv_row1, 0])
    v0 = v_desc.load([kv_row0, 0])
    v1 = v_desc.load([kv_row1, 0])
    kt0 = tl.trans(k0)
    kt1 = tl.trans(k1)
    vt0 = tl.trans(v0)
    vt1 = tl.trans(v1)
    scale2 = sm_scale * 1.4426950408889634
    rows = tl.arange(0, BLOCK_M)
    cols = tl.arange(0, HEAD_DIM)
    dk0 = tl.zeros([SUB_N, HEAD_DIM], dtype=tl.float32)
    dk1 = tl.zeros([SUB_N, HEAD_DIM], dtype=tl.float32)
    dv0 = tl.zeros([SUB_N, HEAD_DIM], dtype=tl.float32)
    dv1 = tl.zeros([SUB_N, HEAD_DIM], dtype=tl.float32)
    for q_start in range(0, seq_len, BLOCK_M):
        q_row = base + q_start
        q = q_desc.load([q_row, 0])
        do = do_desc.load([q_row, 0])
        lse = tl.load(lse_ptr + q_row + rows)
        delta = tl.load(delta_ptr + q_row + rows)
        # sub-tile 0: keys [kv_row0, kv_row0 + SUB_N)
        s0 = tl.dot(q, kt0)
        p0 = tl.math.exp2(s0 * scale2 - lse[:, None])
        dp0 = tl.dot(do, vt0)
        ds0 = (p0 * (dp0 - delta[:, None]) * sm_scale).to(tl.float16)
        p16_0 = p0.to(tl.float16)
        dv0 = tl.dot(tl.trans(p16_0), do, dv0)
        dk0 = tl.dot(tl.trans(ds0), q, dk0)
        dq0 = tl.dot(ds0, k0)
        # sub-tile 1: keys [kv_row1, kv_row1 + SUB_N)
        s1 = tl.dot(q, kt1)
        p1 = tl.math.exp2(s1 * scale2 - lse[:, None])
        dp1 = tl.dot(do, vt1)
        ds1 = (p1 * (dp1 - delta[:, None]) * sm_scale).to(tl.float16)
        p16_1 = p1.to(tl.float16)
        dv1 = tl.dot(tl.trans(p16_1), do, dv1)
        dk1 = tl.dot(tl.trans(ds1), q, dk1)
        dq = tl.dot(ds1, k1, dq0)
        tl.atomic_add(dq_ptr + (q_row + rows)[:, None] * HEAD_DIM + cols[None, :], dq, sem="relaxed")
    dk_desc.store([kv_row0, 0], dk0.to(tl.float16))
    dk_desc.store([kv_row1, 0], dk1.to(tl.float16))
    dv_desc.store([kv_row0, 0], dv0.to(tl.float16))
    dv_desc.store([kv_row1, 0], dv1.to(tl.float16))


@triton.jit
def attn_bwd_subtiled_q(
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
    """As :func:`attn_bwd`, with ``2 * SUB_M`` query rows per step handled as two separate sub-tiles that
    share K, V and the dK/dV accumulators (sub-tile 1 adds to them after sub-tile 0)."""
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
        # sub-tile 0: query rows [row0, row0 + SUB_M)
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
        # sub-tile 1: query rows [row1, row1 + SUB_M)
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


_KERNELS = {"attn_bwd": attn_bwd, "attn_bwd_subtiled_kv": attn_bwd_subtiled_kv,
            "attn_bwd_subtiled_q": attn_bwd_subtiled_q}


def _entry(kernel: str, target: str, *, form: str = "plain", default: bool = False) -> dict[str, Any]:
    rows = TC_M[target]
    sub = {"attn_bwd": {"BLOCK_M": rows, "BLOCK_N": HEAD_DIM, "FORM": form},
           "attn_bwd_subtiled_kv": {"BLOCK_M": rows, "SUB_N": HEAD_DIM // 2},
           "attn_bwd_subtiled_q": {"SUB_M": rows, "BLOCK_N": HEAD_DIM}}[kernel]
    q_rows = sub.get("BLOCK_M", sub.get("SUB_M"))
    kv_rows = sub.get("SUB_N", sub.get("BLOCK_N"))
    q_desc = f"tensordesc<fp16[{q_rows}, {HEAD_DIM}]>"
    kv_desc = f"tensordesc<fp16[{kv_rows}, {HEAD_DIM}]>"
    return {
        "kernel": kernel,
        "signature": {"q_desc": q_desc, "k_desc": kv_desc, "v_desc": kv_desc, "do_desc": q_desc,
                      "dk_desc": kv_desc, "dv_desc": kv_desc, "dq_ptr": "*fp32", "lse_ptr": "*fp32",
                      "delta_ptr": "*fp32", "sm_scale": "fp32", "seq_len": "i32"},
        "constexprs": {**sub, "HEAD_DIM": HEAD_DIM},
        "num_warps": 8,
        "num_stages": 2,
        "default": default,
    }


TWILL_KERNELS = {
    "attn_bwd_sm90": _entry("attn_bwd", "sm_90", default=True),
    "attn_bwd_sm100": _entry("attn_bwd", "sm_100"),
    "attn_bwd_split_sm100": _entry("attn_bwd", "sm_100", form="split"),
    "attn_bwd_subtiled_sm90": _entry("attn_bwd_subtiled_kv", "sm_90"),
    "attn_bwd_subtiled_sm100": _entry("attn_bwd_subtiled_q", "sm_100"),
    "attn_bwd_subtiled_q_sm90": _entry("attn_bwd_subtiled_q", "sm_90"),
    "attn_bwd_split_sm90": _entry("attn_bwd", "sm_90", form="split"),
    "attn_bwd_transposed_sm100": _entry("attn_bwd", "sm_100", form="transposed"),
    "attn_bwd_transposed_sm90": _entry("attn_bwd", "sm_90", form="transposed"),
}
"""How twill compiles each variant (argument types in Triton signature form); see the module docstring."""


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
    kernel = _KERNELS[spec["kernel"]]
    c = spec["constexprs"]
    rows = c.get("BLOCK_M", c.get("SUB_M"))
    kv_rows = c.get("SUB_N", c.get("BLOCK_N"))
    step = 2 * rows if "SUB_M" in c else rows
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
    kernel[grid](desc(q, rows), desc(k, kv_rows), desc(v, kv_rows), desc(do, rows), desc(dk, kv_rows),
                 desc(dv, kv_rows), dq, lse2.contiguous(), delta, sm_scale, seq, **c,
                 num_warps=spec["num_warps"], num_stages=spec["num_stages"])
    return dq, dk, dv


def main() -> int:  # pragma: no cover - needs a GPU
    """Compare the sm_90 entries with PyTorch autograd on a random problem; returns a process exit code."""
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
    for entry in ("attn_bwd_sm90", "attn_bwd_subtiled_sm90", "attn_bwd_subtiled_q_sm90",
                  "attn_bwd_split_sm90", "attn_bwd_transposed_sm90"):
        got = run_backward(q, k, v, o, do, lse2, scale, entry)
        for name, value, want in zip(("dq", "dk", "dv"), got, (qf.grad, kf.grad, vf.grad), strict=True):
            err = ((value.float() - want).abs().max() / want.abs().max()).item()
            worst = max(worst, err)
            print(f"{entry}: {name} max |triton - torch| / max |torch| = {err:.3e}")
    return 0 if worst < 2e-2 else 1


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
