"""Score ``twill tune --backend gluon``'s time model on the Gluon kernels of the FA forward grid (CPU).

For each kernel of a grid folder written by ``benchmarks/gluon_fa_grid.py generate`` (its committed
``schedule.json`` and ``report.json``), compile the config's TTGIR again (CPU), and predict the kernel's
time with each term of :func:`twill.tune.gluon_terms.trip_terms` added in turn (the same function ``twill
tune --backend gluon`` uses, :func:`twill.tune.gluon_worker.gluon_prediction` for waves and prologue).
No constant is fitted here: every term is priced from the machine file. With ``--measured`` it scores the
predictions against an H200 timing file (Spearman, Kendall tau-b, each kernel's predicted / measured, the
measured time of each term's pick against the best)::

    python benchmarks/gluon_fa_grid_scores.py \\
        --measured benchmarks/results/h200_gluon_fa_grid_v2.json \\
        --out benchmarks/results/h200_gluon_fa_grid_v2_scores.json
    # predictions only (before the grid is measured):
    python benchmarks/gluon_fa_grid_scores.py --shape 4,32,4096,64 \\
        --out benchmarks/results/h200_gluon_fa_grid_d64_predicted.json
    # once measured, score the committed predictions as they are (nothing recomputed):
    python benchmarks/gluon_fa_grid_scores.py --shape 4,32,4096,64 \\
        --predicted benchmarks/results/h200_gluon_fa_grid_d64_predicted.json \\
        --measured benchmarks/results/h200_gluon_fa_grid_d64.json \\
        --out benchmarks/results/h200_gluon_fa_grid_d64_scores.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "benchmarks" / "calibrate"))

TERMS = ("ii", "simulated", "serialized", "conflicts", "signals", "arrives", "conflicts_alone", "sass",
         "sass_alone", "sass_over_simulated")


def folder_sass(folder: Path) -> str:
    """The SASS (``nvdisasm -c -g``) of a committed kernel folder's ``kernel.py``, compiled again
    (:func:`folder_compiled`)."""
    from twill.tune.sass_trip import disassemble

    return disassemble(folder_compiled(folder).asm["cubin"])


def folder_compiled(folder: Path) -> Any:
    """A committed kernel folder's ``kernel.py`` compiled again for sm_90 on the CPU (the same compile as
    the generator's: :func:`twill.codegen.gluon.build.compile_source` with the manifest's descriptors
    and constexprs)."""
    import importlib.util

    from triton.experimental.gluon import language as gl

    from twill.codegen.gluon.build import compile_source

    man = json.loads((folder / "manifest.json").read_text())
    spec = importlib.util.spec_from_file_location(f"twill_scores_{folder.parent.name}_{folder.name}",
                                                  folder / "kernel.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    types = {"f16": (gl.float16, "fp16"), "bf16": (gl.bfloat16, "bf16"), "f32": (gl.float32, "fp32")}
    sig: dict[str, str] = {}
    for a in man["arg_names"]:
        if a in man["constexprs"]:
            sig[a] = "constexpr"
        elif a in man["descriptors"]:
            d = man["descriptors"][a]
            ty, text = types[d["dtype"]]
            layout = gl.NVMMASharedLayout.get_default_for(list(d["block_shape"]), ty)
            sig[a] = f"tensordesc<{text}[{', '.join(map(str, d['block_shape']))}],{layout!r}>"
        else:
            sig[a] = "fp32" if a == "sm_scale" else "i32"
    return compile_source(getattr(mod, man["kernel"]), sig, dict(man["constexprs"]), man["num_warps"])


def predict_folder(folder: Path, shape: tuple[int, int, int, int], *, overlap: float | None = None
                   ) -> list[dict[str, Any]]:
    """Per kernel of ``folder``'s ``index.json``: the predicted ms after each term (CPU)."""
    from gluon_fa_grid import FA

    from twill.frontend.compile import compile_to_ttgir, load_kernel, target_for
    from twill.frontend.lower import lower_loop
    from twill.frontend.ttgir import parse_ttgir
    from twill.ir.costmodel import CostModel
    from twill.ir.machine import load_machine
    from twill.schedule import Schedule
    from twill.tune.gluon_terms import result_encodings, trip_terms
    from twill.tune.gluon_worker import gluon_prediction
    from twill.tune.grid import load_tune_problem
    from twill.tune.sass_trip import coupled_groups, latencies_from_machine, trip_bounds
    from twill.tune.triton_model import gemm_operands, wgmma_serialized

    b, h, n, d = shape
    machine = load_machine("h200")
    cm = CostModel(machine)
    rows = []
    for e in json.loads((folder / "index.json").read_text()):
        if "error" in e:  # not generated: nothing to predict (index.json has the generator's reason)
            rows.append({"name": e["name"], "BLOCK_M": e["BLOCK_M"], "BLOCK_N": e["BLOCK_N"],
                         "num_warps": e["num_warps"], "error": e["error"]})
            continue
        spec = load_kernel(str(FA))
        problem = load_tune_problem(spec.fn.__globals__.get("TWILL_TUNE"), spec.name, source=spec.source)
        consts = {**spec.constexprs, "BLOCK_M": e["BLOCK_M"], "BLOCK_N": e["BLOCK_N"], "HEAD_DIM": d}
        sig = problem.signature(spec.signature, consts)
        cfg = dataclasses.replace(spec, signature={**spec.signature, **sig}, constexprs=consts,
                                  num_warps=e["num_warps"], num_stages=e["num_stages"])
        low = lower_loop(parse_ttgir(compile_to_ttgir(cfg, target=target_for(machine)).pre_swp), machine,
                         name=cfg.name)
        sched = Schedule.from_json((folder / e["name"] / "schedule.json").read_text())
        report = json.loads((folder / e["name"] / "report.json").read_text())
        spills = report["spill_store_bytes"] + report["spill_load_bytes"]
        trips = -(-n // e["BLOCK_N"])
        bounds = trip_bounds(folder_sass(folder / e["name"]), (folder / e["name"] / "kernel.py").read_text(),
                             report["partitions"], latencies_from_machine(machine))
        walks = {g: b["cycles"] for g, b in bounds.items()}
        terms = trip_terms(sched, low.graph, gemm_operands(low), result_encodings(low), cm,
                           serialized=wgmma_serialized(report["not_kept"], spills > 0), trips=trips,
                           walks=walks, components=coupled_groups(low.graph, sched), overlap=overlap)
        k = cm.ctas_per_sm(report["threads"], report["registers_ptxas"], report["shared_compiled"])
        row = {"name": e["name"], "BLOCK_M": e["BLOCK_M"], "BLOCK_N": e["BLOCK_N"],
               "num_warps": e["num_warps"], "ctas_per_sm": k, "trips": trips,
               "serialized_wgmma": terms["serialized_wgmma"],
               "handoffs": terms["handoffs"], "walks": {str(g): b for g, b in sorted(bounds.items())},
               "components": [list(c) for c in coupled_groups(low.graph, sched)],
               "cycles_per_trip": {}, "predicted_ms": {}}
        for term in TERMS:
            pred = gluon_prediction(ii_cycles=terms[term], drain_cycles=(sched.length - sched.ii)
                                    * sched.problem.cycles_per_unit, stages=sched.stages,
                                    res_mii_cycles=float(sched.bounds_cycles.get("res_mii", 0.0)),
                                    ctas_per_sm=max(1, k), trips=trips, ctas=-(-n // e["BLOCK_M"]) * b * h,
                                    sms=int(machine.const("chip.sms")),
                                    clock_ghz=float(machine.const("chip.clock_ghz")),
                                    edge=float(machine.const("cost.tma_latency")),
                                    flops=4.0 * b * h * n * n * d)
            row["cycles_per_trip"][term] = round(pred["cycles_per_trip"], 1)
            row["predicted_ms"][term] = round(pred["ms"], 4)
        rows.append(row)
        print(e["name"], row["cycles_per_trip"], flush=True)
    return rows


def score(rows: list[dict[str, Any]], measured: dict[str, float]) -> dict[str, Any]:
    """Spearman, Kendall tau-b, per-kernel predicted / measured and the pick's measured / best, per term."""
    from rank_correlation import kendall_tau_b, spearman

    names = [r["name"] for r in rows if r["name"] in measured and "predicted_ms" in r]
    meas = [measured[n] for n in names]
    best = min(meas)
    out: dict[str, Any] = {}
    for term in TERMS:
        pred = [next(r for r in rows if r["name"] == n)["predicted_ms"][term] for n in names]
        pick = names[pred.index(min(pred))]
        ratios = {n: round(p / m, 3) for n, p, m in zip(names, pred, meas, strict=True)}
        out[term] = {"spearman": round(spearman(pred, meas), 3),
                     "kendall": round(kendall_tau_b(pred, meas), 3), "pick": pick,
                     "pick_vs_best": round(measured[pick] / best, 3),
                     "mean_abs_log_error": round(
                         sum(abs(math.log(a / b)) for a, b in zip(pred, meas, strict=True)) / len(names), 3),
                     "predicted_over_measured": ratios}
    return {"kernels": len(names), "best": names[meas.index(best)], "terms": out}


def main(argv: list[str] | None = None) -> int:
    """``--shape B,H,N,D`` (default the 12 measured ones), ``--measured FILE`` to score, ``--out FILE``."""
    from gluon_fa_grid import parse_shape, shape_folder

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", type=parse_shape, default=None, help="B,H,N,D (default 4,32,8192,128)")
    p.add_argument("--measured", type=Path, help="an H200 timing file of benchmarks/gluon_fa_grid.py time")
    p.add_argument("--predicted", type=Path, help="score this committed prediction file (no new prediction)")
    p.add_argument("--overlap", type=float, default=None,
                   help="cost.sass_overlap for this prediction (default: the machine file's)")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    shape = args.shape or (4, 32, 8192, 128)
    if args.predicted:
        rows = json.loads(args.predicted.read_text())["rows"]
    else:
        rows = predict_folder(shape_folder(args.shape), shape, overlap=args.overlap)
    overlap = "the machine file's" if args.overlap is None else args.overlap
    out: dict[str, Any] = {"shape": dict(zip("BHND", shape, strict=True)), "machine": "h200",
                           "terms": list(TERMS),
                           "fitted": ("nothing here: every term is priced from machines/h200.toml "
                                      f"(cost.sass_overlap: {overlap})"),
                           "rows": rows}
    if args.measured:
        measured = {r["name"]: r["gluon_ms"] for r in json.loads(args.measured.read_text())["rows"]
                    if "gluon_ms" in r}
        out["measured_file"] = str(args.measured.relative_to(ROOT)) if args.measured.is_absolute() else str(
            args.measured)
        out["scores"] = score(rows, measured)
        for term, s in out["scores"]["terms"].items():
            print(f"{term:11s} spearman {s['spearman']:+.3f} kendall {s['kendall']:+.3f} pick {s['pick']} "
                  f"({s['pick_vs_best']:.2f}x the best)")
    args.out.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
