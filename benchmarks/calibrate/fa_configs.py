"""Time the Triton FA forward of ``examples/flash_attention_fwd.py`` over a grid of compile configs.

Problem: batch 4, 32 heads, sequence 4096, head dim 128, fp16, non-causal (FLOPs = 4 B H N^2 D). Configs:
BLOCK_M 128, BLOCK_N in {64, 128}, num_stages in {2, 3}, num_warps in {4, 8}. For each config the script
checks the output against ``torch.nn.functional.scaled_dot_product_attention`` (fresh random inputs), then
times it with ``triton.testing.do_bench`` (median, plus the 20th and 80th percentiles, twice) and records
the registers per thread, spilled registers and shared memory that the compiled kernel reports.

Needs a CUDA GPU with torch and Triton 3.6; run by ``run_calibration.py`` on the lent H200::

    python3 benchmarks/calibrate/fa_configs.py --out results/fa_configs.json
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
BATCH, HEADS, SEQ, DIM = 4, 32, 4096, 128


def _load_example() -> Any:
    path = ROOT / "examples" / "flash_attention_fwd.py"
    spec = importlib.util.spec_from_file_location("twill_example_fa_fwd", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_config(mod: Any, block_n: int, stages: int, warps: int, torch: Any, triton: Any) -> dict[str, Any]:
    """Check and time one config; returns a JSON-ready record (an ``error`` key when it failed)."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    block_m = 128
    rec: dict[str, Any] = {"BLOCK_M": block_m, "BLOCK_N": block_n, "num_stages": stages, "num_warps": warps,
                           "batch": BATCH, "heads": HEADS, "seq": SEQ, "head_dim": DIM, "dtype": "fp16"}
    shape = (BATCH, HEADS, SEQ, DIM)
    q, k, v = (torch.randn(shape, device="cuda", dtype=torch.float16) for _ in range(3))
    out = torch.full_like(q, float("nan"))
    scale = DIM ** -0.5
    flat = [t.reshape(BATCH * HEADS * SEQ, DIM) for t in (q, k, v, out)]
    descs = [TensorDescriptor.from_tensor(flat[0], [block_m, DIM]),
             TensorDescriptor.from_tensor(flat[1], [block_n, DIM]),
             TensorDescriptor.from_tensor(flat[2], [block_n, DIM]),
             TensorDescriptor.from_tensor(flat[3], [block_m, DIM])]
    grid = (SEQ // block_m, BATCH * HEADS)

    def launch() -> Any:
        return mod.attn_fwd[grid](*descs, scale, SEQ, BLOCK_M=block_m, BLOCK_N=block_n, HEAD_DIM=DIM,
                                  num_warps=warps, num_stages=stages)

    t0 = time.perf_counter()
    compiled = launch()
    torch.cuda.synchronize()
    rec["compile_and_first_run_s"] = round(time.perf_counter() - t0, 3)
    rec["n_regs"] = int(getattr(compiled, "n_regs", -1))
    rec["n_spills"] = int(getattr(compiled, "n_spills", -1))
    rec["shared_bytes"] = int(getattr(compiled.metadata, "shared", -1))
    want = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), scale=scale)
    rec["rel_err"] = float((out.float() - want).norm() / want.norm())
    rec["all_written"] = bool(torch.isfinite(out).all().item())
    flops = 4.0 * BATCH * HEADS * SEQ * SEQ * DIM
    timings = []
    for _ in range(2):
        med, lo, hi = triton.testing.do_bench(launch, warmup=25, rep=200, quantiles=[0.5, 0.2, 0.8])
        timings.append({"median_ms": med, "p20_ms": lo, "p80_ms": hi})
    rec["timings"] = timings
    rec["median_ms"] = min(t["median_ms"] for t in timings)
    rec["tflops"] = flops / (rec["median_ms"] * 1e-3) / 1e12
    return rec


def main(argv: list[str] | None = None) -> int:
    """Run every config and write the table as JSON; returns a process exit code."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="JSON file to write")
    args = parser.parse_args(argv)
    import torch
    import triton
    import triton.testing

    if not torch.cuda.is_available():
        print("no CUDA device", file=sys.stderr)
        return 2
    mod = _load_example()
    torch.manual_seed(0)
    result: dict[str, Any] = {
        "kernel": "examples/flash_attention_fwd.py::attn_fwd (TMA descriptors, no warp specialization)",
        "device": torch.cuda.get_device_name(0), "torch": torch.__version__, "triton": triton.__version__,
        "flops_formula": "4*B*H*N^2*D",
        "timing": "triton.testing.do_bench(warmup=25 ms, rep=200 ms), median; two repeats, the smaller "
                  "median is median_ms",
        "configs": []}
    for block_n, stages, warps in itertools.product((64, 128), (2, 3), (4, 8)):
        try:
            rec = run_config(mod, block_n, stages, warps, torch, triton)
        except Exception as exc:  # record the failure and go on with the other configs
            rec = {"BLOCK_N": block_n, "num_stages": stages, "num_warps": warps,
                   "error": f"{type(exc).__name__}: {str(exc)[:500]}"}
        result["configs"].append(rec)
        args.out.write_text(json.dumps(result, indent=1), encoding="utf-8")
        if "error" in rec:
            print(f"BN={block_n} s={stages} w={warps}: {rec['error']}", flush=True)
        else:
            print(f"BN={block_n:3d} s={stages} w={warps}: {rec['median_ms']:.4f} ms "
                  f"{rec['tflops']:6.1f} TFLOP/s "
                  f"regs={rec['n_regs']} spills={rec['n_spills']} smem={rec['shared_bytes']} "
                  f"err={rec['rel_err']:.1e}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
