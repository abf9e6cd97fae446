"""The Gluon trip model (``twill.tune.gluon_terms.trip_terms``) on the benchmark kernels of
``benchmarks/gluon_kernels/`` (CPU), against their H200 times in ``benchmarks/results/h200_gluon_run3.json``.

These seven kernels (three GEMMs at 8192^3, four FA forwards at N 16384, B 4, H 32, D 128) were not read
when the terms were built (those came from the FA grid, ``benchmarks/gluon_fa_grid/``), so they are a
second check; decode attention is left out (its time is HBM bandwidth, which the trip model does not
price)::

    python benchmarks/gluon_kernels_scores.py --out benchmarks/results/h200_gluon_kernels_scores.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "benchmarks" / "calibrate"))

TERMS = ("ii", "simulated", "serialized", "conflicts", "signals", "arrives")
GEMM = {"M": 8192, "N": 8192, "K": 8192}
FA = {"B": 4, "H": 32, "N": 16384}


def sizes(kernel: str, constexprs: dict[str, int]) -> tuple[int, int, float]:
    """``(ctas, trips, flops)`` of a benchmark kernel at the sizes h200_gluon.py times."""
    if "BLOCK_K" in constexprs:
        bm, bn, bk = constexprs["BLOCK_M"], constexprs["BLOCK_N"], constexprs["BLOCK_K"]
        ctas = (-(-GEMM["M"] // bm)) * (-(-GEMM["N"] // bn))
        return ctas, -(-GEMM["K"] // bk), 2.0 * GEMM["M"] * GEMM["N"] * GEMM["K"]
    rows = constexprs["BLOCK_M"] if "BLOCK_M" in constexprs else 2 * constexprs["SUB_M"]
    n = FA["N"]
    return n // rows * FA["B"] * FA["H"], n // constexprs["BLOCK_N"], 4.0 * FA["B"] * FA["H"] * n * n * \
        constexprs["HEAD_DIM"]


def predict() -> list[dict[str, Any]]:
    """Per benchmark kernel: predicted TFLOP/s after each term."""
    from gluon_generate import TARGETS

    from twill.frontend.compile import compile_to_ttgir, load_kernel, target_for
    from twill.frontend.lower import lower_loop
    from twill.frontend.ttgir import parse_ttgir
    from twill.ir.costmodel import CostModel
    from twill.ir.machine import load_machine
    from twill.schedule import Schedule
    from twill.tune.gluon_terms import result_encodings, trip_terms
    from twill.tune.gluon_worker import gluon_prediction
    from twill.tune.triton_model import gemm_operands, wgmma_serialized

    machine = load_machine("h200")
    cm = CostModel(machine)
    rows = []
    for name, (spec_path, _) in TARGETS.items():
        if name.startswith("decode"):
            continue
        folder = ROOT / "benchmarks" / "gluon_kernels" / name
        spec = load_kernel(str(ROOT / spec_path))
        low = lower_loop(parse_ttgir(compile_to_ttgir(spec, target=target_for(machine)).pre_swp), machine,
                         name=spec.name)
        sched = Schedule.from_json((folder / "schedule.json").read_text())
        report = json.loads((folder / "report.json").read_text())
        spills = report["spill_store_bytes"] + report["spill_load_bytes"]
        ctas, trips, flops = sizes(name, dict(spec.constexprs))
        terms = trip_terms(sched, low.graph, gemm_operands(low), result_encodings(low), cm,
                           serialized=wgmma_serialized(report["not_kept"], spills > 0), trips=trips)
        k = cm.ctas_per_sm(report["threads"], report["registers_ptxas"], report["shared_compiled"])
        row: dict[str, Any] = {"name": name, "constexprs": dict(spec.constexprs), "ctas": ctas,
                               "trips": trips, "ctas_per_sm": k,
                               "serialized_wgmma": terms["serialized_wgmma"],
                               "cycles_per_trip": {}, "predicted_tflops": {}}
        for term in TERMS:
            pred = gluon_prediction(ii_cycles=terms[term], drain_cycles=(sched.length - sched.ii)
                                    * sched.problem.cycles_per_unit, stages=sched.stages,
                                    res_mii_cycles=float(sched.bounds_cycles.get("res_mii", 0.0)),
                                    ctas_per_sm=max(1, k), trips=trips, ctas=ctas,
                                    sms=int(machine.const("chip.sms")),
                                    clock_ghz=float(machine.const("chip.clock_ghz")),
                                    edge=float(machine.const("cost.tma_latency")), flops=flops)
            row["cycles_per_trip"][term] = round(pred["cycles_per_trip"], 1)
            row["predicted_tflops"][term] = round(pred["tflops"], 1)
        rows.append(row)
        print(name, row["cycles_per_trip"], row["predicted_tflops"], flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    """Predict, compare with run 3's largest size of each kernel, write ``--out``."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--measured", type=Path, default=ROOT / "benchmarks" / "results" / "h200_gluon_run3.json")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    rows = predict()
    measured = {}
    for r in json.loads(args.measured.read_text())["rows"]:
        largest = 16384 if r["kernel"].startswith("fa") else 8192
        if r.get("backend") == "twill-gluon" and r.get("tflops") and r["N"] == largest:
            measured[r["kernel"]] = r["tflops"]
    for row in rows:
        m = measured.get(row["name"])
        row["measured_tflops"] = m
        if m:
            row["predicted_over_measured_time"] = {t: round(m / v, 3)
                                                   for t, v in row["predicted_tflops"].items()}
    where = args.measured.resolve()
    out = {"machine": "h200", "gemm": GEMM, "fa": FA, "terms": list(TERMS), "fitted": "nothing",
           "measured_file": str(where.relative_to(ROOT)) if where.is_relative_to(ROOT) else str(where),
           "rows": rows}
    args.out.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    for row in rows:
        print(f"{row['name']:20s} measured {row['measured_tflops']} TFLOP/s; predicted / measured time "
              f"{row.get('predicted_over_measured_time')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
