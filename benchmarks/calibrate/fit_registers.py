"""Fit the register-footprint model to ptxas on the CPU and write ``results/register_fit.json``.

The model (:meth:`twill.ir.costmodel.CostModel.thread_registers`): a warp group of ``w`` warps that holds tile
values of ``b_1 .. b_n`` bytes at once needs ``overhead + sum(ceil(b_i / (128 w)))`` registers per thread,
and ptxas gives it ``min(that, cap)`` with ``cap = register_cap(32 w)``; above the cap it spills.

Every configuration below is compiled with :func:`twill.calibrate.regs.compile_registers` (Triton 3.6 +
the ptxas
in its wheel, sm_90a). For each one the tile values live at the register peak are listed by hand:

* GEMM (TMA descriptors, wgmma): the fp32 accumulator ``BM x BN``; A and B stay in shared memory.
* GEMM with pointer loads: the same accumulator (the loads are pipelined into shared memory by cp.async).
* FA forward (TMA, wgmma): S (fp32 ``BM x BN``), P (fp16 ``BM x BN``, read by the PV wgmma from registers)
  and O (fp32 ``BM x D``); Triton keeps the next QK^T in flight while P V runs, so all three are live.
* Decode attention (pointer loads, no Tensor Core): the K and V tiles (fp16 ``BN x D`` each).

``overhead`` is fitted as the median of ``ptxas - tiles`` over the TMA/wgmma kernels at 4 and 8 warps (one
or two warp groups per 128-row tile, the layouts twill schedules) that stay under the cap; the residuals
of every row are written out, per kernel class and per ``num_warps``. Run (about a minute on 2 cores)::

    python benchmarks/calibrate/fit_registers.py
"""

from __future__ import annotations

import itertools
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
OUT = Path(__file__).resolve().parent / "results" / "register_fit.json"
D = 128


def cases() -> list[dict[str, Any]]:
    """Every configuration: kernel spec, compile options, overrides and the tile bytes live at the peak."""
    out: list[dict[str, Any]] = []
    for bn, stages, warps in itertools.product((64, 128), (2, 3), (4, 8, 16)):
        desc = f"tensordesc<fp16[{bn}, {D}]>"
        out.append({"kernel": "examples/flash_attention_fwd.py::attn_fwd", "class": "tma_wgmma",
                    "num_warps": warps, "num_stages": stages, "constexprs": {"BLOCK_N": bn},
                    "signature": {"k_desc": desc, "v_desc": desc},
                    "tiles": {"S": 128 * bn * 4, "P": 128 * bn * 2, "O": 128 * D * 4}})
    gemm_tiles = ((128, 128, 64), (64, 128, 64), (128, 256, 64), (64, 64, 64))
    for (bm, bn, bk), warps in itertools.product(gemm_tiles, (4, 8)):
        out.append({"kernel": "examples/gemm.py::matmul", "class": "tma_wgmma", "num_warps": warps,
                    "num_stages": 3, "constexprs": {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk},
                    "signature": {"a_desc": f"tensordesc<fp16[{bm}, {bk}]>",
                                  "b_desc": f"tensordesc<fp16[{bn}, {bk}]>",
                                  "c_desc": f"tensordesc<fp16[{bm}, {bn}]>"},
                    "tiles": {"acc": bm * bn * 4}})
    for warps in (4, 8):
        out.append({"kernel": "examples/gemm.py::matmul_ptr", "class": "pointer", "num_warps": warps,
                    "num_stages": 3, "constexprs": {}, "signature": {}, "tiles": {"acc": 128 * 128 * 4}})
    for bn, warps in itertools.product((16, 32, 64, 128), (2, 4, 8, 16, 32)):
        out.append({"kernel": "examples/decode_attention.py::decode_attn", "class": "pointer",
                    "num_warps": warps, "num_stages": 3, "constexprs": {"BLOCK_N": bn}, "signature": {},
                    "tiles": {"K": bn * D * 2, "V": bn * D * 2}})
    return out


def measure(case: dict[str, Any]) -> dict[str, Any]:
    """Compile one case and return its row (ptxas numbers and the model's tile registers)."""
    from twill.calibrate.regs import compile_registers
    from twill.ir.costmodel import CostModel
    from twill.ir.machine import load_machine

    path, _, name = case["kernel"].partition("::")
    report = compile_registers(f"{ROOT / path}::{name}", target="sm_90", num_warps=case["num_warps"],
                               num_stages=case["num_stages"], constexprs=case["constexprs"],
                               signature=case["signature"], sass=False)
    cm = CostModel(load_machine("h100"))
    tile_regs = sum(cm.regs_for(b, case["num_warps"]) for b in case["tiles"].values())
    return {**{k: v for k, v in case.items() if k != "signature"}, "registers": report.registers,
            "cap": report.register_cap, "spill_store_bytes": report.spill_store_bytes,
            "spill_load_bytes": report.spill_load_bytes, "tile_registers": tile_regs,
            "residual": report.registers - tile_regs, "ptxas_notes": list(report.ptxas_notes)}


def fit(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The overhead (median residual of the TMA/wgmma rows at 4 and 8 warps under the cap) and the errors."""
    basis = [r["residual"] for r in rows
             if r["class"] == "tma_wgmma" and r["num_warps"] in (4, 8) and r["registers"] < r["cap"]]
    overhead = round(statistics.median(basis))
    for r in rows:
        demand = overhead + r["tile_registers"]
        r["model_demand"] = demand
        r["model_registers"] = min(demand, r["cap"])
        r["model_spills"] = demand > r["cap"]
        r["error"] = r["model_registers"] - r["registers"]
    groups: dict[str, list[int]] = {}
    for r in rows:
        groups.setdefault(f"{r['class']} w{r['num_warps']}", []).append(r["error"])
    summary = {k: {"n": len(v), "min": min(v), "max": max(v), "mean": round(statistics.mean(v), 2)}
               for k, v in sorted(groups.items())}
    return {"overhead": overhead, "basis": sorted(basis), "error_model_minus_ptxas": summary}


def main() -> int:
    """Compile every case, fit, print a summary and write the JSON."""
    sys.path.insert(0, str(ROOT))
    from twill.calibrate.regs import triton_tool

    t0 = time.perf_counter()
    rows = [measure(c) for c in cases()]
    result = fit(rows)
    version = subprocess.run([str(triton_tool("ptxas")), "--version"], capture_output=True, text=True,
                             check=False).stdout.strip().splitlines()[-1]
    data = {"what": "registers per thread from ptxas vs the tile-register model "
                    "(twill.calibrate.regs, sm_90a)",
            "ptxas": version, "seconds": round(time.perf_counter() - t0, 1), **result, "rows": rows}
    OUT.write_text(json.dumps(data, indent=1), encoding="utf-8")
    print(f"overhead = {result['overhead']} (from {len(result['basis'])} rows: {result['basis']})")
    for k, v in result["error_model_minus_ptxas"].items():
        print(f"  {k:16s} {v}")
    print(f"wrote {OUT} in {data['seconds']} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
