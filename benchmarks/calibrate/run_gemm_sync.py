"""Issue 25: what Triton's GEMM trips cost on the H200 (8-warp serialized wgmma; co-resident CTAs).

One call, on a Hopper GPU, from the repository root::

    PYTHONUNBUFFERED=1 python3 benchmarks/calibrate/run_gemm_sync.py --out "$OUT"

Two parts, each under its own time limit, so that one failure keeps the other's results:

1. ``gemm_sync.cu`` (built with nvcc for sm_90a, run once; ``gemm_sync.json``): Triton's GEMM main loop
   rebuilt with inline PTX, one element switched at a time: one vs two warp groups issuing serialized
   wgmma (``wait_group 0`` after each, ptxas C7515), with 0 / 1 / 4 CTA-wide ``bar.sync`` per trip, with and
   without TMA loads from L2 over 2-4 buffers, 1-4 CTAs per SM. Cycles per trip from ``%clock64``.
2. Triton's own ``examples/gemm.py::matmul`` (``triton_occupancy.json``) launched as exactly one wave of
   ``132 x k`` CTAs (k = 1..4 CTAs per SM where the config fits that many) at K = 4096 and K = 16384: the
   difference of the two times over the extra trips (192 at BLOCK_K 64) is the steady-state trip of a CTA
   with ``k - 1`` others on its SM, prologue, epilogue and launch cancelled. Each time is
   ``do_bench``'s median (warmup 25 ms, rep 100 ms); output checked against torch at K = 4096.

Needs torch, Triton 3.6 and nvcc; nothing from twill.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import time
import traceback
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CONFIGS = [  # (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages)
    (128, 128, 64, 4, 2), (128, 128, 64, 4, 3), (128, 128, 64, 4, 4),
    (128, 128, 64, 8, 3), (128, 128, 64, 8, 4),
    (128, 256, 64, 8, 3), (256, 128, 64, 8, 3), (64, 256, 64, 8, 3),
    (64, 128, 64, 4, 3), (64, 128, 64, 4, 4), (128, 64, 64, 4, 3),
    (128, 128, 128, 8, 3), (128, 128, 128, 4, 2),
]
K_SHORT, K_LONG = 4096, 16384


def build_and_run(out: Path) -> None:
    """Part 1: nvcc, then the binary; writes ``gemm_sync.json`` (or the error)."""
    binary = Path("/tmp/twill_gemm_sync")
    cmd = ["nvcc", "-O3", "-std=c++17", "-gencode", "arch=compute_90a,code=sm_90a", "-Xptxas", "-v", "-o",
           str(binary), "gemm_sync.cu"]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=HERE, timeout=300, check=False)
    (out / "gemm_sync_build.txt").write_text(" ".join(cmd) + f"\nexit {proc.returncode}\n{proc.stdout}\n"
                                             f"{proc.stderr}", encoding="utf-8")
    if proc.returncode != 0:
        print("gemm_sync build failed:", proc.stderr[-2000:], flush=True)
        return
    t0 = time.perf_counter()
    run = subprocess.run([str(binary)], capture_output=True, text=True, timeout=150, check=False)
    text = run.stdout
    record: dict[str, Any] = {"exit": run.returncode, "seconds": round(time.perf_counter() - t0, 2),
                              "stderr": run.stderr[-3000:]}
    try:
        record["result"] = json.loads(text)
    except json.JSONDecodeError:
        record["stdout"] = text[-20000:]  # a crash mid-run leaves the cases printed so far
    (out / "gemm_sync.json").write_text(json.dumps(record, indent=1), encoding="utf-8")
    for case in record.get("result", {}).get("cases", []):
        c = case.get("cycles_per_trip", {})
        print(f"{case['name']:38s} k={case['ctas_per_sm']} s={case['stages']} "
              f"tc={case['tc_cycles_per_trip']:5d} "
              f"trip={c.get('median', case.get('error'))} ({c.get('min')}-{c.get('max')}) "
              f"on_sm={case.get('ctas_on_an_sm')} tc_busy={case.get('tc_busy')} "
              f"B/cyc={case.get('load_bytes_per_cycle_per_sm')} ghz={case.get('clock_ghz_from_slowest')}",
              flush=True)
    if "stdout" in record:
        print("gemm_sync output not JSON; exit", run.returncode, run.stderr[-1500:], flush=True)


def _load_gemm() -> Any:
    spec = importlib.util.spec_from_file_location("gemm_example", ROOT / "examples" / "gemm.py")
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


def triton_part(out: Path, budget: float) -> None:
    """Part 2: Triton's kernel at one wave of 132 k CTAs; writes ``triton_occupancy.json`` after each."""
    import torch
    import triton
    from triton.tools.tensor_descriptor import TensorDescriptor

    gemm = _load_gemm()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows, cols = 12, sms // 12  # 132 = 12 x 11 tiles per CTA-per-SM
    results: list[dict[str, Any]] = []
    start = time.perf_counter()
    doc: dict[str, Any] = {"sms": sms, "k_short": K_SHORT, "k_long": K_LONG,
                           "timing": "triton.testing.do_bench(warmup=25, rep=100), median ms",
                           "torch": torch.__version__, "triton": triton.__version__, "configs": results}
    for bm, bn, bk, w, s in CONFIGS:
        for k in (1, 2, 3, 4):
            if time.perf_counter() - start > budget:
                results.append({"config": [bm, bn, bk, w, s], "ctas_per_sm": k, "error": "budget"})
                continue
            rec: dict[str, Any] = {"config": [bm, bn, bk, w, s], "ctas_per_sm": k}
            try:
                m, n = rows * k * bm, cols * bn
                a = torch.randn((m, K_LONG), device="cuda", dtype=torch.float16)
                b = torch.randn((n, K_LONG), device="cuda", dtype=torch.float16)
                c = torch.empty((m, n), device="cuda", dtype=torch.float16)
                times = {}
                for kk in (K_SHORT, K_LONG):
                    descs = (TensorDescriptor.from_tensor(a[:, :kk], [bm, bk]),
                             TensorDescriptor.from_tensor(b[:, :kk], [bn, bk]),
                             TensorDescriptor.from_tensor(c, [bm, bn]))
                    grid = (m // bm, n // bn)

                    def launch(descs=descs, kk=kk, grid=grid, bm=bm, bn=bn, bk=bk, w=w, s=s):
                        return gemm.matmul[grid](*descs, kk, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, num_warps=w,
                                                 num_stages=s)

                    compiled = launch()
                    torch.cuda.synchronize()
                    if kk == K_SHORT:
                        want = torch.matmul(a[:, :kk], b[:, :kk].t()).float()
                        rec["rel_err"] = float((c.float() - want).norm() / want.norm())
                        rec["n_regs"] = int(getattr(compiled, "n_regs", -1))
                        rec["n_spills"] = int(getattr(compiled, "n_spills", -1))
                        rec["shared_bytes"] = int(getattr(compiled.metadata, "shared", -1))
                        occ = _occupancy(rec["shared_bytes"], rec["n_regs"], 32 * w)
                        rec["max_ctas_per_sm"] = occ
                        if occ < k:
                            rec["error"] = f"fits {occ} CTAs per SM, not {k}"
                            break
                    times[kk] = triton.testing.do_bench(launch, warmup=25, rep=100, quantiles=[0.5, 0.2, 0.8])
                if "error" not in rec:
                    rec["ms"] = {str(kk): v for kk, v in times.items()}
                    extra_trips = (K_LONG - K_SHORT) // bk
                    rec["us_per_trip"] = (times[K_LONG][0] - times[K_SHORT][0]) * 1e3 / extra_trips
                    rec["cycles_per_trip_at_1p6ghz"] = rec["us_per_trip"] * 1600.0
                    rec["tc_cycles_per_trip_per_cta"] = 2 * bm * bn * bk / 4096
                    print(f"{bm}x{bn}x{bk} w{w} s{s} k={k}: {rec['cycles_per_trip_at_1p6ghz']:.0f} "
                          f"cycles/trip (tc {rec['tc_cycles_per_trip_per_cta'] * k:.0f} for k CTAs) "
                          f"err {rec['rel_err']:.1e}", flush=True)
                del a, b, c
            except Exception as exc:  # record and go on
                rec["error"] = f"{type(exc).__name__}: {str(exc)[:800]}"
                print(f"{bm}x{bn}x{bk} w{w} s{s} k={k}: {rec['error']}", flush=True)
            results.append(rec)
            (out / "triton_occupancy.json").write_text(json.dumps(doc, indent=1), encoding="utf-8")
            if "error" in rec and rec["error"].startswith("fits"):
                break
    (out / "triton_occupancy.json").write_text(json.dumps(doc, indent=1), encoding="utf-8")


def _occupancy(shared: int, regs: int, threads: int) -> int:
    """CTAs per SM that fit (H100/H200: 228 KB shared per SM with 1 KB reserved per CTA, 64 K registers,
    register allocation in units of 256 per warp, 2048 threads, 32 CTAs)."""
    by_smem = (233472) // max(1, shared + 1024)
    per_warp = ((max(regs, 1) * 32 + 255) // 256) * 256
    by_regs = 65536 // (per_warp * (threads // 32))
    return max(0, min(by_smem, by_regs, 2048 // threads, 32))


def main(argv: list[str] | None = None) -> int:
    """Run both parts; returns 0."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--skip-cuda", action="store_true")
    parser.add_argument("--skip-triton", action="store_true")
    parser.add_argument("--budget", type=float, default=130.0, help="seconds for the Triton part")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    query = "--query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu"
    smi = subprocess.run(["nvidia-smi", query, "--format=csv,noheader"], capture_output=True, text=True,
                         check=False)
    (args.out / "env.txt").write_text(smi.stdout + smi.stderr, encoding="utf-8")
    print("env:", smi.stdout.strip(), flush=True)
    if not args.skip_cuda:
        try:
            build_and_run(args.out)
        except Exception:  # keep the other part
            traceback.print_exc()
    if not args.skip_triton:
        try:
            triton_part(args.out, args.budget)
        except Exception:
            traceback.print_exc()
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main())
