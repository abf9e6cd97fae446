"""Score ``twill tune``'s predictions against measured H200 timings of a tuning grid; fit the estimated terms.

Inputs: a measured grid (``--grid``, default ``benchmarks/results/h200_tune_grid.json``: ``tune_grid.py``
on the lent H200, 48 FA forward configs at B 4, H 32, N 8192, D 128 and 24 GEMM configs at 8192^3, every
config timed once with ``triton.testing.do_bench``) and ``twill tune``'s predictions for its configs
(``results/tune_predictions_{fa,gemm}.json``, or ``<grid stem>_predictions_{fa,gemm}.json`` beside another
grid; ``--predict`` runs ``twill tune`` for the problem sizes
of the grid's ``"problems"`` entry: ``fa_fwd`` ``batch`` / ``heads`` / ``seq`` (the head dim is the configs'
``HEAD_DIM``), ``gemm`` ``M`` / ``N`` / ``K``).

The predicted time of a config is rebuilt from the parts ``twill tune`` records, so each term can be
switched off and the estimated constants varied without compiling again (per CTA trip, ``k`` CTAs per SM)::

    per_trip = max(L + f, C + r + f + (k - 1) D, S + r + f, R, k T')       (triton_model.effective_cycles)
    r = spilled-register reload on the chain: local cycles (+ tma_latency on the L2 path)
    f = waits * barrier_wait + stretch,  stretch = sum over GEMMs of max(0, reads - tc)
    reads = smem_bytes / wgmma_smem_bytes_per_cycle (each GEMM's wgmma operand bytes in its layout)
    T = max(issue, tc', smem', l2', mufu, alu)      tc' = sum of max(tc, reads)
    smem' = smem + (TMA bytes + wgmma operand bytes) / smem_bytes_per_cycle   (the shared-memory ports)
    l2' = (TMA bytes + spilled-register bytes when they leave L1) / tma_kernel_bytes_per_cycle
    D = tc' + issue                                 (co-resident CTAs in lock-step)
    S = serialized wgmma pipeline: GEMM chains + issue + loop barriers x handoff.named_barrier (0 if not)
    T' = T with the loads at the SM's L2 port rate cost.l2_sm_bytes_per_cycle (co-resident CTAs together)
    R = (tma_latency + TMA busy) / (num_stages - 1), and when serialized at least
        (GEMM chains + tma_latency + TMA busy) / (num_stages - 1)       (its loads issue after its chains)
    time = ((waves - 1) * (2 * tma_latency + trips * per_trip(k))
            + 2 * tma_latency + trips * per_trip(k_tail)) / clock     k_tail: the last wave's CTAs per SM

``L`` is Triton's schedule simulated for one CTA with the TMA unit at the kernel's L2 rate, ``C`` the same
with loads that arrive at once.

Terms, added one at a time (the score table): the layout of each wgmma (``warpsPerCTA`` / ``instrShape``:
replicated rows and per-instruction operand reads), local-memory traffic of spilled registers, co-resident
CTAs in lock-step, the simulation's TMA unit at the kernel's L2 rate (``sim_rate``), spilled registers
reloaded on the chain (``reload``), the last wave at its own occupancy (``tail``), a serialized wgmma
pipeline's own chain (``serial``), co-resident CTAs' loads at the SM's L2 port rate (``port``).
Constants fitted (least mean absolute log error of the time): on the committed grid per family (fit on
GEMM, score FA; fit on FA, score GEMM) and leave-one-tile-out; across grids (fit on the committed grid,
score the held-out one, and the other way round); on both grids (the machine file: both grids have now
been seen). A grid given with
``--grid`` other than the committed one is scored with the machine file's constants.

    python benchmarks/calibrate/tune_scores.py                   # writes results/tune_scores.json
    python benchmarks/calibrate/tune_scores.py --predict         # first re-run twill tune on both grids
    python benchmarks/calibrate/tune_scores.py --grid NEW.json --predict --out NEW_scores.json
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
KERNELS = {"fa_fwd": "examples/flash_attention_fwd.py::attn_fwd", "gemm": "examples/gemm.py::matmul"}
SHORT = {"fa_fwd": "fa", "gemm": "gemm"}
BARRIER_WAITS = (0, 17, 34, 51, 68)
WGMMA_RATES = (96, 112, 128, 160, 192)
"""From 96 up: m64n128k16 SS by 2 warp groups runs at the measured 4095.7 FLOP/cycle while reading 96 B/cycle
(results/microbench.json), so the rate is at least that."""
L2_RATES = (30, 33, 36, 39, 42, 45, 48)
"""Around the measured 35.9 B/cycle/SM of the all-SM 32 KB TMA stream from L2 (results/microbench.json)."""
ESTIMATES = {"barrier_wait": 34.0, "wgmma_rate": 128.0, "l2_rate": 36.0}
"""The terms' values before any fit: the h100.toml estimates and the measured all-SM L2 TMA rate."""
TERMS = ("layout", "local", "lockstep", "sim_rate", "reload", "tail", "serial", "port", "ser_layout",
         "serial_loads", "smem_port")
HELDOUT = RESULTS / "h200_tune_heldout.json"
"""The second measured grid (FA N 4096 D 64, GEMM 4096^3 with two more tiles): scored once, held out, by
the model of its day; now a second grid to fit on and to cross-validate with (fit on one, score the
other)."""


def problem_sizes(family: str, problems: Mapping[str, Any]) -> dict[str, int]:
    """``twill tune``'s problem-size options from a grid file's ``problems[family]`` entry.

    Raises
    ------
    SystemExit
        A size ``twill tune`` needs is missing.
    """
    spec = problems.get(family, {})
    names = {"fa_fwd": {"batch": "batch", "heads": "heads", "seq": "seq_len"},
             "gemm": {"M": "M", "N": "N", "K": "K"}}[family]
    missing = [k for k in names if k not in spec]
    if missing:
        raise SystemExit(f"grid problems[{family!r}] lacks {', '.join(missing)} (has {sorted(spec)})")
    return {ours: int(spec[theirs]) for theirs, ours in names.items()}


def prediction_path(family: str, grid: Path) -> Path:
    """Where the predictions for ``grid``'s ``family`` configs live: ``results/tune_predictions_fa.json``
    (and ``_gemm``) for the committed grid, ``<grid stem>_predictions_fa.json`` beside any other."""
    if grid.resolve() == MEASURED.resolve():
        return RESULTS / f"tune_predictions_{SHORT[family]}.json"
    return grid.with_name(f"{grid.stem}_predictions_{SHORT[family]}.json")


def predict_grid(grid: Path, machine: str = "h200") -> None:
    """Run ``twill tune`` (library) for every family of the measured ``grid`` at its problem sizes: the
    grid is the product of the values its configs use (so it holds every measured config)."""
    from twill.tune.api import tune
    from twill.tune.report import write_json

    data = json.loads(grid.read_text(encoding="utf-8"))
    for family in sorted({c["family"] for c in data["configs"]}):
        configs = [c for c in data["configs"] if c["family"] == family]
        names = sorted({n for c in configs for n in c["constexprs"]})
        values = {n: sorted({c["constexprs"][n] for c in configs if n in c["constexprs"]}) for n in names}
        warps = sorted({c["num_warps"] for c in configs})
        stages = sorted({c["num_stages"] for c in configs})
        sizes = problem_sizes(family, data.get("problems", {}))
        kernel = KERNELS[family]
        path, name = kernel.split("::")
        outcome = tune(f"{ROOT / path}::{name}", machine, values, num_warps=warps, num_stages=stages,
                       problem=sizes, time_limit=5.0)
        write_json(prediction_path(family, grid), outcome.results, **{**outcome.meta, "kernel": kernel})


def key(family: str, constexprs: Mapping[str, Any], warps: int, stages: int) -> tuple:
    """A config's identity: family, every constexpr, warps, stages."""
    return (family, tuple(sorted((k, int(v)) for k, v in constexprs.items())), int(warps), int(stages))


def load_rows(grid: Path) -> list[dict[str, Any]]:
    """Measured and predicted parts of every measured config, matched by family, constexprs, warps, stages."""
    measured = json.loads(grid.read_text(encoding="utf-8"))
    predicted: dict[tuple, dict[str, Any]] = {}
    for family in sorted({c["family"] for c in measured["configs"]}):
        path = prediction_path(family, grid)
        if not path.is_file():
            raise SystemExit(f"no predictions {path.relative_to(ROOT)}: run with --predict")
        for c in json.loads(path.read_text(encoding="utf-8"))["configs"]:
            predicted[key(family, c["constexprs"], c["num_warps"], c["num_stages"])] = c
    rows = []
    for m in measured["configs"]:
        k = key(m["family"], m["constexprs"], m["num_warps"], m["num_stages"])
        p = predicted.get(k)
        if p is None:
            raise SystemExit(f"no prediction for {m['id']}: re-run with --predict")
        ran = "median_ms" in m
        rows.append({"key": k, "family": m["family"], "label": m["id"], "ran": ran,
                     "tile": tile_name(m), "measured_ms": m.get("median_ms"),
                     "measured_tflops": m.get("tflops"), "measured_error": m.get("error"),
                     "ptxas_regs": m.get("n_regs"), "shared_bytes": m.get("shared_bytes"), "predicted": p})
    return rows


def tile_name(config: Mapping[str, Any]) -> str:
    """``fa_fwd 64/32`` or ``gemm 128x128x64`` (the tile of a measured config)."""
    c = config["constexprs"]
    if config["family"] == "fa_fwd":
        return f"fa_fwd {c['BLOCK_M']}/{c['BLOCK_N']}"
    return f"gemm {c['BLOCK_M']}x{c['BLOCK_N']}x{c['BLOCK_K']}"


def model_ms(row: Mapping[str, Any], machine: Any, *, barrier_wait: float, wgmma_rate: float,
             l2_rate: float, terms: Sequence[str] = TERMS) -> float | None:
    """Predicted ms of one config from its recorded parts (module docstring), with only ``terms`` on.

    Without ``layout`` every GEMM is priced as the default split (its Tensor Core time ``2 m n k /
    tc_flops`` once, operand bytes as the old model: rows replicated by the layout removed from ``L`` and
    ``C`` by their Tensor Core time); without ``local`` spilled registers cost nothing; without
    ``lockstep`` ``D`` is 0 (the co-resident CTAs only share throughput); without ``sim_rate`` ``L`` and
    ``C`` are the simulations with the TMA unit at the microbenchmark's ``cost.tma_bytes_per_cycle``
    instead of the kernel rate (both are recorded; the simulations are at the machine file's kernel
    rate whatever ``l2_rate`` is, which moves only the throughput and spill terms); without ``reload``
    spilled registers are traffic only, not on the chain (:func:`twill.tune.triton_model.
    spill_reload_cycles`); without ``tail`` the last wave runs at the kernel's CTAs per SM; without
    ``serial`` a serialized wgmma pipeline has no bound of its own (``S``); without ``port`` the co-resident
    CTAs' loads share one stream's rate (``T`` for ``T'``); without ``ser_layout`` a serialized GEMM's
    chain is split along M (``S`` with the M-split chains, ``details.serial_gemm_chains_m_split``; the
    simulations keep the layout's chain); without ``serial_loads`` a serialized trip's loads issue at its
    start (no ``serial_round_trip``); without ``smem_port`` the shared-memory unit carries the wgmma
    operand reads at ``wgmma_rate`` only, not the TMA copies with them at ``cost.smem_bytes_per_cycle``.
    Predictions made before a term existed have no record of it and are scored without it.
    """
    from twill.ir.costmodel import CostModel
    from twill.tune.triton_model import serial_round_trip_cycles, spill_reload_cycles, tail_ctas_per_sm

    p = row["predicted"]
    if not p["fits"]:
        return None
    d = p["details"]
    t = d["terms"]
    k = d["ctas_per_sm"]
    const = machine.const
    file_l2 = float(const("cost.tma_kernel_bytes_per_cycle"))
    lat, comp = d["simulated_cycles_per_trip"], d["compute_cycles_per_trip"]
    if "sim_rate" not in terms and d.get("raw_rate_cycles_per_trip"):
        lat, comp = d["raw_rate_cycles_per_trip"]
    units = dict(t["raw_units"])
    gemms = [dict(g) for g in t["gemms"]]
    if "layout" not in terms and d.get("default_gemms"):
        extra = sum(g["tc"] - dg["tc"] for g, dg in zip(gemms, d["default_gemms"], strict=True))
        lat, comp = lat - extra, comp - extra
        units["tc"] = units.get("tc", 0.0) - extra
        gemms = [dict(g) for g in d["default_gemms"]]
    raw_loads = units.get("tma", 0.0)
    if "tma" in units:
        units["tma"] *= float(const("cost.tma_bytes_per_cycle")) / l2_rate
    trip_floor = 0.0
    if p["num_stages"] >= 2 and units.get("tma"):
        trip_floor = (float(const("cost.tma_latency")) + units["tma"]) / (p["num_stages"] - 1)
    serial = t.get("serial_chain", 0.0) if "serial" in terms else 0.0
    chains = t.get("serial_gemm_chains", 0.0)
    if serial > 0 and "ser_layout" not in terms and d.get("serial_gemm_chains_m_split"):
        serial += d["serial_gemm_chains_m_split"] - chains
        chains = d["serial_gemm_chains_m_split"]
    if serial > 0 and "serial_loads" in terms and "serial_round_trip" in t and p["num_stages"] >= 2:
        trip_floor = max(trip_floor, serial_round_trip_cycles(chains, units.get("tma", 0.0),
                                                              p["num_stages"], CostModel(machine)))
    reload = 0.0
    if "local" in terms and t.get("local_bytes"):
        cm = CostModel(machine)
        unit, cycles = cm.local_memory_cycles(
            t["local_bytes"], working_set=int(d["stack_frame_bytes"] or 0) * d["threads"] * k,
            l1_free=cm.l1_free_bytes(d["shared_bytes"], k))
        cycles *= file_l2 / l2_rate if unit == "tma" else 1.0
        units[unit] = units.get(unit, 0.0) + cycles
        if "reload" in terms:
            reload = spill_reload_cycles(unit, cycles, cm)
    reads = [g["smem_bytes"] / wgmma_rate for g in gemms]
    stretch = sum(max(0.0, r - g["tc"]) for r, g in zip(reads, gemms, strict=True))
    units["tc"] = units.get("tc", 0.0) + stretch
    if "smem_port" in terms and "smem_bytes" in t:  # TMA copies and wgmma operands share the SMEM ports
        units["smem"] = units.get("smem", 0.0) + t["smem_bytes"] / float(const("cost.smem_bytes_per_cycle"))
    else:
        units["smem"] = units.get("smem", 0.0) + sum(reads)
    extra_f = t["waits"] * barrier_wait + stretch
    shared = dict(units)
    if "port" in terms and "tma" in shared and t.get("shared_units"):
        port = float(const("cost.l2_sm_bytes_per_cycle"))
        local_l2 = units["tma"] - raw_loads * float(const("cost.tma_bytes_per_cycle")) / l2_rate
        shared["tma"] = raw_loads * float(const("cost.tma_bytes_per_cycle")) / port + local_l2
    sm_throughput = max([t["issue"], *shared.values()])
    coresident = units["tc"] + t["issue"] if "lockstep" in terms else 0.0

    def trip(ctas_per_sm: int) -> float:
        return max(lat + extra_f, min(comp, lat) + reload + extra_f + (ctas_per_sm - 1) * coresident,
                   serial + reload + extra_f if serial > 0 else 0.0, trip_floor, ctas_per_sm * sm_throughput)

    edge = float(const("cost.tma_latency"))
    per_cta = 2 * edge + d["trips"] * trip(k)
    last = per_cta
    if "tail" in terms:
        last = 2 * edge + d["trips"] * trip(tail_ctas_per_sm(d["ctas"], int(const("chip.sms")), k))
    return ((d["waves"] - 1) * per_cta + last) / (float(const("chip.clock_ghz")) * 1e9) * 1e3


def scores(rows: Sequence[Mapping[str, Any]], predict: Callable[[Mapping[str, Any]], float | None]) -> dict:
    """Spearman, Kendall tau-b, the top pick's measured speed against the best, relative errors."""
    from scipy import stats

    ran = [r for r in rows if r["ran"]]
    pairs = [(p, r["measured_ms"], r) for r in ran if (p := predict(r)) is not None]
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


def fit(rows: Sequence[Mapping[str, Any]], machine: Any, terms: Sequence[str] = TERMS) -> dict[str, float]:
    """``barrier_wait``, ``wgmma_rate``, ``l2_rate`` on the grids above with the least mean absolute log
    error of the time on ``rows`` (ties: the first in grid order)."""
    best = None
    for b, r, t in itertools.product(BARRIER_WAITS, WGMMA_RATES, L2_RATES):
        s = scores(rows, lambda row, b=b, r=r, t=t: model_ms(row, machine, barrier_wait=b, wgmma_rate=r,
                                                             l2_rate=t, terms=terms))
        value = s.get("mean_log_error", float("inf"))
        if best is None or value < best[0] - 1e-12:
            best = (value, b, r, t)
    assert best is not None
    return {"barrier_wait": best[1], "wgmma_rate": best[2], "l2_rate": best[3]}


def feasibility(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Did ``twill tune`` say right which configs run? (Triton's launch errors are shared memory.)"""
    right = [r["ran"] == bool(r["predicted"]["fits"]) for r in rows]
    smem = [r for r in rows if r["ran"] and r["shared_bytes"] is not None]
    same_smem = sum(r["predicted"]["details"].get("shared_bytes") == r["shared_bytes"] for r in smem)
    same_regs = sum(r["predicted"]["details"].get("registers") == r["ptxas_regs"] for r in smem)
    wrong = [r["label"] for r, ok in zip(rows, right, strict=True) if not ok]
    return {"configs": len(rows), "fit_predicted_right": sum(right), "wrong": wrong,
            "cannot_run": sum(not r["ran"] for r in rows),
            "reasons_given": sum(bool(r["predicted"]["reason"]) for r in rows if not r["predicted"]["fits"]),
            "smem_equal_to_the_launch": f"{same_smem}/{len(smem)}",
            "registers_equal_to_the_launch": f"{same_regs}/{len(smem)}"}


def cross_validation(rows: Sequence[Mapping[str, Any]], machine: Any) -> dict[str, Any]:
    """Fit on one family, score on the other; leave one tile out (fit on the rest, score the tile)."""
    fams = {f: [r for r in rows if r["family"] == f] for f in ("fa_fwd", "gemm")}
    out: dict[str, Any] = {}
    for train, test in (("gemm", "fa_fwd"), ("fa_fwd", "gemm")):
        c = fit(fams[train], machine)
        out[f"fit {train} -> score {test}"] = {"constants": c, "scores": scores(
            fams[test], lambda r, c=c: model_ms(r, machine, **c))}
    tiles = sorted({r["tile"] for r in rows if r["ran"]})
    loto = {}
    for tile in tiles:
        c = fit([r for r in rows if r["tile"] != tile], machine)
        held = [r for r in rows if r["tile"] == tile and r["ran"]]
        errs = [math.log(model_ms(r, machine, **c) / r["measured_ms"]) for r in held
                if model_ms(r, machine, **c) is not None]
        loto[tile] = {"constants": c, "n": len(errs),
                      "mean_signed_log_error": round(sum(errs) / len(errs), 4) if errs else None,
                      "mean_abs_log_error": round(sum(abs(e) for e in errs) / len(errs), 4) if errs else None}
    out["leave one tile out"] = loto
    for fam, fr in fams.items():  # the family scores with each family's tiles held out
        preds = {}
        for r in fr:
            if r["ran"]:
                c = loto[r["tile"]]["constants"]
                preds[r["label"]] = model_ms(r, machine, **c)
        out[f"leave one tile out, {fam}"] = scores(fr, lambda r, preds=preds: preds.get(r["label"]))
    return out


def grid_cross_validation(rows: Sequence[Mapping[str, Any]], other: Sequence[Mapping[str, Any]],
                          machine: Any) -> dict[str, Any]:
    """Fit on the committed grid and score the held-out one, the other way round, and fit on both (the
    constants of the machine file): each family scored with the constants fitted on the rows named."""
    out: dict[str, Any] = {}
    grids = {"committed grid": rows, "held-out grid": other}
    for train, test in (("committed grid", "held-out grid"), ("held-out grid", "committed grid")):
        c = fit(grids[train], machine)
        out[f"fit {train} -> score {test}"] = {"constants": c, "scores": {
            f: scores([r for r in grids[test] if r["family"] == f], lambda r, c=c: model_ms(r, machine, **c))
            for f in ("fa_fwd", "gemm")}}
    c = fit([*rows, *other], machine)
    out["fit both grids"] = {"constants": c, "scores": {
        g: {f: scores([r for r in gr if r["family"] == f], lambda r, c=c: model_ms(r, machine, **c))
            for f in ("fa_fwd", "gemm")} for g, gr in grids.items()}}
    return out


def study(grid: Path = MEASURED) -> dict[str, Any]:
    """Every score of the page (fits only when ``grid`` is the committed grid)."""
    from twill.ir.machine import load_machine

    machine = load_machine("h200")
    rows = load_rows(grid)
    cfg = {"barrier_wait": float(machine.const("cost.barrier_wait")),
           "wgmma_rate": float(machine.const("cost.wgmma_smem_bytes_per_cycle")),
           "l2_rate": float(machine.const("cost.tma_kernel_bytes_per_cycle"))}
    families = sorted({r["family"] for r in rows})
    by_family = {f: [r for r in rows if r["family"] == f] for f in families}
    held_out = grid.resolve() != MEASURED.resolve()
    models: dict[str, Callable[[Mapping[str, Any]], float | None]] = {}
    est = ESTIMATES
    for i in range(len(TERMS) + 1):
        on = TERMS[:i]
        name = "no new terms (estimates)" if i == 0 else f"+ {TERMS[i - 1]} (estimates)"
        models[name] = lambda r, on=on: model_ms(r, machine, **est, terms=on)
    fitted: dict[str, Any] = {}
    if not held_out:
        for f in families:
            fitted[f"on {f}"] = fit(by_family[f], machine)
        fitted["on both"] = fit(rows, machine)
        models["all terms, fitted on gemm"] = lambda r: model_ms(r, machine, **fitted["on gemm"])
        models["all terms, fitted on fa_fwd"] = lambda r: model_ms(r, machine, **fitted["on fa_fwd"])
    models["all terms, machine file"] = lambda r: model_ms(r, machine, **cfg)
    for term in TERMS:  # each term taken out of the final model
        rest = tuple(t for t in TERMS if t != term)
        models[f"machine file without {term}"] = lambda r, rest=rest: model_ms(r, machine, **cfg, terms=rest)
    models["as twill tune predicts"] = lambda r: r["predicted"]["predicted_ms"]
    table = {name: {f: scores(fr, fn) for f, fr in by_family.items()} for name, fn in models.items()}
    per_config = []
    for r in rows:
        per_config.append({"config": r["label"], "tile": r["tile"], "measured_ms": r["measured_ms"],
                           "measured_error": (r["measured_error"] or "")[:120] or None,
                           "predicted_fits": r["predicted"]["fits"],
                           "predicted_reason": r["predicted"]["reason"],
                           **{name: (round(v, 4) if (v := fn(r)) is not None else None)
                              for name, fn in models.items()}})
    return {"what": "twill tune against measured H200 timings of a tuning grid",
            "measured": str(grid.resolve().relative_to(ROOT)) if grid.resolve().is_relative_to(ROOT)
            else str(grid),
            "held_out": held_out,
            "predictions": {f: str(prediction_path(f, grid)) for f in families},
            "machine_constants": cfg, "estimates": ESTIMATES, "fitted": fitted,
            "cross_validation": None if held_out else cross_validation(rows, machine),
            "grid_cross_validation": None if held_out or not all(
                prediction_path(f, HELDOUT).is_file() for f in families) else grid_cross_validation(
                rows, load_rows(HELDOUT), machine),
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
        groups.setdefault(r["tile"], []).append(r[model] / r["measured_ms"] - 1)
    lines = ["| tile | configs | mean error (signed) | mean abs error | worst |", "|---|---|---|---|---|"]
    for name, errs in groups.items():
        worst = max(errs, key=abs)
        lines.append(f"| {name} | {len(errs)} | {sum(errs) / len(errs):+.0%} | "
                     f"{sum(abs(e) for e in errs) / len(errs):.0%} | {worst:+.0%} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Score (and with ``--predict`` first predict); write the JSON; print the tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grid", type=Path, default=MEASURED,
                        help="measured grid (the JSON schema of h200_tune_grid.json)")
    parser.add_argument("--predict", action="store_true", help="run twill tune on the grid's configs first")
    parser.add_argument("--out", type=Path, default=None,
                        help="scores JSON (default results/tune_scores.json for the committed grid, "
                             "else <grid stem>_scores.json beside it)")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    if not args.grid.is_file():
        parser.error(f"--grid {args.grid}: no such file")
    if args.predict:
        predict_grid(args.grid)
    result = study(args.grid)
    out = args.out or (RESULTS / "tune_scores.json" if not result["held_out"]
                       else args.grid.with_name(f"{args.grid.stem}_scores.json"))
    out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(render(result))
    print(group_errors(result, "all terms, machine file"))
    for name, cv in (result.get("grid_cross_validation") or {}).items():
        flat = cv["scores"] if "fa_fwd" in cv["scores"] else {f"{g} {f}": v for g, fs in cv["scores"].items()
                                                               for f, v in fs.items()}
        print(name, cv["constants"], {k: (v.get("spearman"), v.get("top_pick_vs_best"),
                                          v.get("mean_log_error")) for k, v in flat.items()})
    print(json.dumps({"fitted": result["fitted"], "feasibility": result["feasibility"]}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
