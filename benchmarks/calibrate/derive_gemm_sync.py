"""Derive the constants of twill tune's GEMM terms from the H200 runs of ``run_gemm_sync.py``.

Reads ``results/gemm_sync.json`` (the CUDA rebuild of Triton's GEMM loop, cycles per trip from
``%clock64``) and ``results/triton_occupancy.json`` (Triton's ``matmul`` as one wave of 132 x k CTAs, the
time of 192 / 96 extra trips), writes ``results/gemm_sync_derived.json`` and prints it::

    python benchmarks/calibrate/derive_gemm_sync.py

* ``bar_sync_cycles``: what one CTA-wide ``bar.sync`` adds to a trip of two warp groups' serialized wgmma
  (``ser_wg2_n{128,256}_sync4`` against ``_nosync``, over the 4 barriers); ``machines/h200.toml`` prices
  a barrier as ``handoff.named_barrier`` (34), which this confirms.
* ``serialization``: the trip of two warp groups that wait for every wgmma against one warp group that
  does, and against the same loop without the waits (all with Triton's 4 barriers per trip).
* ``l2_sm_bytes_per_cycle``: per-SM bytes per cycle of Triton's kernel, ``k`` CTAs x the trip's TMA bytes
  over the trip's cycles (at ``chip.clock_ghz`` = 1.6), for every config and ``k``; the largest is the
  rate the SM's L2 port delivered (``cost.l2_sm_bytes_per_cycle``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def derive(sync: dict[str, Any], occupancy: dict[str, Any]) -> dict[str, Any]:
    """The derived numbers (see the module docstring)."""
    cases = {c["name"]: c for c in sync["result"]["cases"] if "cycles_per_trip" in c}

    def trip(name: str) -> float:
        return float(cases[name]["cycles_per_trip"]["median"])

    bars = {n: (trip(f"ser_wg2_n{n}_sync4") - trip(f"ser_wg2_n{n}_nosync")) / 4 for n in (128, 256)}
    serial = {
        "one_group_4_serial_n128": trip("ser_wg1_n128"),
        "two_groups_4_serial_n128_nosync": trip("ser_wg2_n128_nosync"),
        "two_groups_4_serial_n128_4_barriers": trip("ser_wg2_n128_sync4"),
        "two_groups_4_batched_n128_4_barriers": trip("pipe_wg2_n128_sync4"),
        "two_groups_4_serial_n256_nosync": trip("ser_wg2_n256_nosync"),
        "two_groups_4_serial_n256_4_barriers": trip("ser_wg2_n256_sync4"),
        "two_groups_8_serial_n128_4_barriers": trip("ser_wg2_acc2_n128_sync4"),
    }
    rates = []
    for rec in occupancy["configs"]:
        if "cycles_per_trip_at_1p6ghz" not in rec:
            continue
        bm, bn, bk, w, s = rec["config"]
        k = rec["ctas_per_sm"]
        cycles = rec["cycles_per_trip_at_1p6ghz"]
        loaded = (bm + bn) * bk * 2
        rates.append({"config": f"{bm}x{bn}x{bk} w{w} s{s}", "ctas_per_sm": k,
                      "cycles_per_trip": round(cycles),
                      "bytes_per_cycle_per_sm": round(k * loaded / cycles, 1),
                      "bytes_per_cycle_per_cta": round(loaded / cycles, 1),
                      "tensor_cores_busy": round(k * 2 * bm * bn * bk / 4096 / cycles, 3)})
    top = max(rates, key=lambda r: r["bytes_per_cycle_per_sm"])
    return {"bar_sync_cycles": {f"n{n}": round(v, 1) for n, v in bars.items()},
            "serialization_cycles_per_trip": {k: round(v, 1) for k, v in serial.items()},
            "l2_sm_bytes_per_cycle": top["bytes_per_cycle_per_sm"], "l2_sm_bytes_per_cycle_at": top,
            "triton_trips": sorted(rates, key=lambda r: (r["config"], r["ctas_per_sm"]))}


def main() -> int:
    """Derive, write and print."""
    sync = json.loads((RESULTS / "gemm_sync.json").read_text(encoding="utf-8"))
    occupancy = json.loads((RESULTS / "triton_occupancy.json").read_text(encoding="utf-8"))
    out = derive(sync, occupancy)
    (RESULTS / "gemm_sync_derived.json").write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
