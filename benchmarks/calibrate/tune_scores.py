"""Score ``twill tune``'s predictions against the H200 timings of the issue-25 grids; fit the estimated terms.

Inputs (committed): ``benchmarks/results/h200_tune_grid.json`` (``tune_grid.py`` on the lent H200: 48 FA
forward configs at B 4, H 32, N 8192, D 128 and 24 GEMM configs at 8192^3, every config timed once with
``triton.testing.do_bench``) and ``benchmarks/results/tune_predictions_{fa,gemm}.json`` (``twill tune``
on the CPU for the same configs; ``--predict`` re-runs it).

The predicted time of a config is rebuilt from the per-config parts ``twill tune`` records (simulated
cycles per trip of Triton's own schedule with the co-resident CTAs, issue cycles from the compiled loop's
SASS, per-unit busy cycles, each GEMM's Tensor Core cycles and shared-memory operand bytes, waits,
waves), so the estimated constants can be varied without compiling again:

    per_trip = max(shared + waits * barrier_wait + stretch, round_trip, k * max(issue, tc', smem', tma', ...))
    stretch  = sum over GEMMs of max(0, smem_bytes / wgmma_smem_bytes_per_cycle - tc)
    round_trip = (tma_latency + tma') / (num_stages - 1) for num_stages >= 2, else 0
    tc'      = sum over GEMMs of max(tc, smem_bytes / wgmma_smem_bytes_per_cycle)
    smem'    = smem of the tile model + sum of smem_bytes / wgmma_smem_bytes_per_cycle
    tma'     = TMA busy of the tile model x tma_bytes_per_cycle / tma_kernel_bytes_per_cycle
    time     = waves * (2 * tma_latency + trips * per_trip) / clock

Models scored: ``before`` (Triton's schedule simulated with ptxas registers and occupancy, no hardware
terms), ``terms`` (the machine file's constants), ``fitted`` (``barrier_wait`` and
``wgmma_smem_bytes_per_cycle`` fitted on the **GEMM grid** only, by the least mean absolute log error of
the time; scored on the **FA grid**, which they were not fitted to), and each term alone. Statistics
(scipy.stats): Spearman's rho and Kendall's tau-b over the configs that ran, the measured speed of each
model's top pick against the measured best, mean / max absolute relative error of the time per family,
and whether each config's fit (shared memory) was predicted right.

    python benchmarks/calibrate/tune_scores.py             # writes results/tune_scores.{json,md}
    python benchmarks/calibrate/tune_scores.py --predict   # first re-run twill tune on both grids
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
MEASURED = RESULTS / "h200_tune_grid.json"
PREDICTIONS = {"fa_fwd": RESULTS / "tune_predictions_fa.json", "gemm": RESULTS / "tune_predictions_gemm.json"}
GRIDS = {
    "fa_fwd": ("examples/flash_attention_fwd.py::attn_fwd", {"BLOCK_M": [64, 128], "BLOCK_N": [32, 64, 128]},
               [4, 8], [1, 2, 3, 4]),
    "gemm": ("examples/gemm.py::matmul", {"BLOCK_M": [64, 128], "BLOCK_N": [128, 256], "BLOCK_K": [64, 128]},
             [4, 8], [2, 3, 4]),
}
BARRIER_WAITS = (0, 17, 34, 51, 68, 102, 136, 204)
WGMMA_RATES = (96, 128, 160, 192, 256, 1e9)
"""From 96 up: m64n128k16 SS by 2 warp groups runs at the measured 4095.7 FLOP/cycle while reading 96 B/cycle
(results/microbench.json), so the rate is at least that."""
TMA_RATES = (30, 36, 42, 48, 56, 64)
ESTIMATES = {"barrier_wait": 34.0, "wgmma_rate": 128.0, "tma_rate": 36.0}
"""The terms' values before the fit: the h100.toml estimates and the measured all-SM L2 TMA rate."""


def predict_grids(machine: str = "h200") -> None:
    """Run ``twill tune`` (library) on both grids and write the prediction files."""
    from twill.tune.api import tune
    from twill.tune.report import write_json

    for family, (kernel, grid, warps, stages) in GRIDS.items():
        outcome = tune(str(ROOT / kernel.split("::")[0]) + "::" + kernel.split("::")[1], machine, grid,
                       num_warps=warps, num_stages=stages, time_limit=5.0)
        write_json(PREDICTIONS[family], outcome.results, **{**outcome.meta, "kernel": kernel})


def key(family: str, constexprs: Mapping[str, Any], warps: int, stages: int) -> tuple:
    names = ("BLOCK_M", "BLOCK_N") if family == "fa_fwd" else ("BLOCK_M", "BLOCK_N", "BLOCK_K")
    return (family, *(int(constexprs[n]) for n in names), int(warps), int(stages))


def load_rows(machine: Any) -> list[dict[str, Any]]:
    """Measured and predicted parts of every measured config, matched by constexprs, warps, stages."""
    measured = json.loads(MEASURED.read_text(encoding="utf-8"))
    predicted: dict[tuple, dict[str, Any]] = {}
    for family, path in PREDICTIONS.items():
        for c in json.loads(path.read_text(encoding="utf-8"))["configs"]:
            predicted[key(family, c["constexprs"], c["num_warps"], c["num_stages"])] = c
    rows = []
    for m in measured["configs"]:
        k = key(m["family"], m["constexprs"], m["num_warps"], m["num_stages"])
        p = predicted.get(k)
        if p is None:
            raise SystemExit(f"no prediction for {k}: re-run with --predict")
        ran = "median_ms" in m
        rows.append({"key": k, "family": m["family"], "label": m["id"], "ran": ran,
                     "measured_ms": m.get("median_ms"), "measured_tflops": m.get("tflops"),
                     "measured_error": m.get("error"), "ptxas_regs": m.get("n_regs"),
                     "shared_bytes": m.get("shared_bytes"), "predicted": p})
    return rows


def model_ms(row: Mapping[str, Any], machine: Any, *, barrier_wait: float | None, wgmma_rate: float | None,
             issue: bool = True, tma_rate: float | None = None, round_trip: bool = True,
             throughput: bool = True) -> float | None:
    """Predicted ms of one config from its recorded parts (module docstring); ``None`` disables a term.

    ``tma_rate`` (bytes per cycle per SM) replaces ``cost.tma_bytes_per_cycle`` for the TMA unit's busy
    time; ``round_trip`` adds the load round-trip bound ``(tma_latency + the trip's TMA transfer time) /
    (num_stages - 1)`` for ``num_stages >= 2``.
    """
    p = row["predicted"]
    if not p["fits"]:
        return None
    d = p["details"]
    t = d["terms"]
    k = d["ctas_per_sm"]
    latency = d["shared_cycles_per_trip"] + (t["waits"] * barrier_wait if barrier_wait is not None else 0.0)
    units = dict(t["raw_units"])
    if tma_rate is not None and "tma" in units:
        units["tma"] *= float(machine.const("cost.tma_bytes_per_cycle")) / tma_rate
    trip_floor = 0.0
    if round_trip and p["num_stages"] >= 2 and units.get("tma"):
        trip_floor = (float(machine.const("cost.tma_latency")) + units["tma"]) / (p["num_stages"] - 1)
    if wgmma_rate is not None:
        latency += sum(max(0.0, g["smem_bytes"] / wgmma_rate - g["tc"]) for g in t["gemms"])
        tc = units.get("tc", 0.0) - sum(g["tc"] for g in t["gemms"])
        tc += sum(max(g["tc"], g["smem_bytes"] / wgmma_rate) for g in t["gemms"])
        units["tc"] = tc
        units["smem"] = units.get("smem", 0.0) + sum(g["smem_bytes"] / wgmma_rate for g in t["gemms"])
    bound = max([t["issue"] if issue else 0.0, *(units.values() if throughput else ())])
    per_trip = max(latency, trip_floor, k * bound)
    edge = float(machine.const("cost.tma_latency"))
    per_cta = 2 * edge + d["trips"] * per_trip
    return d["waves"] * per_cta / (float(machine.const("chip.clock_ghz")) * 1e9) * 1e3


def scores(rows: Sequence[Mapping[str, Any]], predict: Callable[[Mapping[str, Any]], float | None]) -> dict:
    """Spearman, Kendall tau-b, the top pick's measured speed against the best, relative errors."""
    from scipy import stats

    ran = [r for r in rows if r["ran"]]
    pred = [predict(r) for r in ran]
    pairs = [(p, r["measured_ms"], r) for p, r in zip(pred, ran, strict=True) if p is not None]
    if len(pairs) < 3:
        return {"n": len(pairs)}
    p_ms = [a for a, _, _ in pairs]
    m_ms = [b for _, b, _ in pairs]
    rho = stats.spearmanr(p_ms, m_ms)
    tau = stats.kendalltau(p_ms, m_ms)
    pick = min(pairs, key=lambda x: x[0])
    best = min(m_ms)
    errors = [abs(a / b - 1) for a, b, _ in pairs]
    return {"n": len(pairs), "spearman": round(float(rho.statistic), 4), "spearman_p": float(rho.pvalue),
            "kendall_tau_b": round(float(tau.statistic), 4), "kendall_p": float(tau.pvalue),
            "top_pick": pick[2]["label"], "top_pick_measured_ms": round(pick[1], 4),
            "best": min(pairs, key=lambda x: x[1])[2]["label"], "best_measured_ms": round(best, 4),
            "top_pick_vs_best": round(pick[1] / best - 1, 4),
            "mean_abs_rel_error": round(sum(errors) / len(errors), 4),
            "max_abs_rel_error": round(max(errors), 4),
            "mean_log_error": round(sum(abs(math.log(a / b)) for a, b, _ in pairs) / len(pairs), 4)}


def fit(rows: Sequence[Mapping[str, Any]], machine: Any) -> tuple[float, float, float]:
    """``(barrier_wait, wgmma_rate, tma_rate)`` on the grids above with the least mean absolute log error
    of the time on ``rows`` (ties: the first in grid order)."""
    best = None
    for b, r, t in itertools.product(BARRIER_WAITS, WGMMA_RATES, TMA_RATES):
        s = scores(rows, lambda row, b=b, r=r, t=t: model_ms(row, machine, barrier_wait=b, wgmma_rate=r,
                                                             tma_rate=t))
        value = s.get("mean_log_error", float("inf"))
        if best is None or value < best[0] - 1e-12:
            best = (value, b, r, t)
    assert best is not None
    return best[1], best[2], best[3]


def feasibility(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Did ``twill tune`` say right which configs run? (Triton's launch errors are shared memory.)"""
    right = [r["ran"] == bool(r["predicted"]["fits"]) for r in rows]
    smem = [r for r in rows if r["ran"] and r["shared_bytes"] is not None]
    same_smem = sum(r["predicted"]["details"].get("shared_bytes") == r["shared_bytes"] for r in smem)
    same_regs = sum(r["predicted"]["details"].get("registers") == r["ptxas_regs"] for r in smem)
    return {"configs": len(rows), "fit_predicted_right": sum(right),
            "cannot_run": sum(not r["ran"] for r in rows),
            "smem_equal_to_the_launch": f"{same_smem}/{len(smem)}",
            "registers_equal_to_the_launch": f"{same_regs}/{len(smem)}"}


def study() -> dict[str, Any]:
    """Every score of the page."""
    from twill.ir.machine import load_machine

    machine = load_machine("h200")
    rows = load_rows(machine)
    cfg = {"barrier_wait": float(machine.const("cost.barrier_wait")),
           "wgmma_rate": float(machine.const("cost.wgmma_smem_bytes_per_cycle")),
           "tma_rate": float(machine.const("cost.tma_kernel_bytes_per_cycle"))}
    est = ESTIMATES
    by_family = {f: [r for r in rows if r["family"] == f] for f in ("fa_fwd", "gemm")}
    b_fit, r_fit, t_fit = fit(by_family["gemm"], machine)
    models: dict[str, Callable[[Mapping[str, Any]], float | None]] = {
        "before (no hardware terms)": lambda r: model_ms(r, machine, barrier_wait=None, wgmma_rate=None,
                                                         issue=False, throughput=False, round_trip=False),
        "+ issue slots only": lambda r: model_ms(r, machine, barrier_wait=None, wgmma_rate=None,
                                                 throughput=False, round_trip=False),
        "+ k x unit busy only (36 B/cycle L2)": lambda r: model_ms(r, machine, barrier_wait=None,
                                                                   wgmma_rate=None, issue=False,
                                                                   round_trip=False),
        "+ wgmma SMEM reads only (128 B/cycle)": lambda r: model_ms(
            r, machine, barrier_wait=None, wgmma_rate=est["wgmma_rate"], issue=False, round_trip=False),
        "+ barrier waits only (34)": lambda r: model_ms(r, machine, barrier_wait=est["barrier_wait"],
                                                        wgmma_rate=None, issue=False, throughput=False,
                                                        round_trip=False),
        "+ load round trip only (36 B/cycle)": lambda r: model_ms(r, machine, barrier_wait=None,
                                                                  wgmma_rate=None, issue=False,
                                                                  throughput=False),
        "all terms at the estimates": lambda r: model_ms(
            r, machine, barrier_wait=est["barrier_wait"], wgmma_rate=est["wgmma_rate"],
            tma_rate=est["tma_rate"]),
        "all terms, fitted on GEMM": lambda r: model_ms(r, machine, barrier_wait=b_fit, wgmma_rate=r_fit,
                                                        tma_rate=t_fit),
        "all terms, machine file": lambda r: model_ms(r, machine, barrier_wait=cfg["barrier_wait"],
                                                      wgmma_rate=cfg["wgmma_rate"], tma_rate=cfg["tma_rate"]),
        "as twill tune predicts": lambda r: r["predicted"]["predicted_ms"],
    }
    table = {name: {f: scores(fr, fn) for f, fr in by_family.items()} for name, fn in models.items()}
    per_config = []
    for r in rows:
        per_config.append({"config": r["label"], "measured_ms": r["measured_ms"],
                           "measured_error": (r["measured_error"] or "")[:120] or None,
                           "predicted_fits": r["predicted"]["fits"],
                           "predicted_reason": r["predicted"]["reason"],
                           **{name: (round(v, 4) if (v := fn(r)) is not None else None)
                              for name, fn in models.items()}})
    return {"what": "twill tune against the H200 timings of the issue-25 grids",
            "measured": str(MEASURED.relative_to(ROOT)),
            "predictions": {f: str(p.relative_to(ROOT)) for f, p in PREDICTIONS.items()},
            "machine_constants": cfg, "fitted_on": "gemm grid (24 configs, 22 ran)",
            "scored_on": "fa_fwd grid (48 configs, 44 ran): not fitted to",
            "estimates": ESTIMATES,
            "fitted": {"barrier_wait": b_fit, "wgmma_smem_bytes_per_cycle": r_fit,
                       "tma_kernel_bytes_per_cycle": t_fit},
            "feasibility": {f: feasibility(fr) for f, fr in by_family.items()},
            "scores": table, "per_config": per_config}


def render(result: Mapping[str, Any]) -> str:
    """The score table (markdown)."""
    lines = ["| model | family | n | Spearman | Kendall tau-b | top pick: measured vs best | mean / max abs "
             "error of the time |", "|---|---|---|---|---|---|---|"]
    for name, fams in result["scores"].items():
        for fam, s in fams.items():
            if "spearman" not in s:
                continue
            lines.append(f"| {name} | {fam} | {s['n']} | {s['spearman']:.3f} | {s['kendall_tau_b']:.3f} | "
                         f"{s['top_pick_vs_best']:+.1%} ({s['top_pick']}) | "
                         f"{s['mean_abs_rel_error']:.0%} / {s['max_abs_rel_error']:.0%} |")
    return "\n".join(lines)


def group_errors(result: Mapping[str, Any], model: str) -> str:
    """Mean signed and mean absolute relative error of ``model``'s time per tile shape (markdown)."""
    groups: dict[str, list[float]] = {}
    for r in result["per_config"]:
        if r["measured_ms"] is None or r[model] is None:
            continue
        family, tiles, *_ = r["config"].split(":")
        tiles = ",".join(t for t in tiles.split(",") if not t.startswith("HEAD_DIM"))
        groups.setdefault(f"{family} {tiles}", []).append(r[model] / r["measured_ms"] - 1)
    lines = ["| tile | configs | mean error (signed) | mean abs error | worst |", "|---|---|---|---|---|"]
    for name, errs in groups.items():
        worst = max(errs, key=abs)
        lines.append(f"| {name} | {len(errs)} | {sum(errs) / len(errs):+.0%} | "
                     f"{sum(abs(e) for e in errs) / len(errs):.0%} | {worst:+.0%} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Score (and with ``--predict`` first predict); write ``results/tune_scores.json``; print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--predict", action="store_true", help="re-run twill tune on both grids first")
    parser.add_argument("--out", type=Path, default=RESULTS / "tune_scores.json")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    if args.predict:
        predict_grids()
    result = study()
    args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(render(result))
    print(group_errors(result, "all terms, machine file"))
    print(json.dumps({"fitted": result["fitted"], "feasibility": result["feasibility"]}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
