"""Does twill's machine model rank real kernels right? The Triton FA forward configurations on the H200.

For each configuration of ``results/fa_configs.json`` (``examples/flash_attention_fwd.py::attn_fwd``, BLOCK_M
128, BLOCK_N 64/128, num_stages 2/3, num_warps 4/8, measured on the lent H200) this script predicts, on the
CPU, what *Triton's own schedule* of that configuration costs under twill's model, and compares the
predictions with the measured times by rank correlation (Spearman's rho, Kendall's tau-b, exact
permutation p-values).

The prediction, step by step (all constants from ``machines/h200.toml``):

1. **Compile** the configuration with Triton 3.6 on the CPU (:func:`twill.frontend.compile_to_ttgir`, the
   K/V descriptor block ``[BLOCK_N, 128]``) and lower the loop of the ``scheduled`` snapshot (Triton's own
   modulo schedule as ``loop.stage`` / ``loop.cluster`` attributes) to a graph for ``h200``.
2. **Triton's schedule as a twill Schedule**: one warp group of ``num_warps`` warps runs every op (Triton
   does not warp-specialize this kernel on sm_90), in the order Triton emits the loop body (cluster, then
   body order), each op at its ``loop.stage``; the K and V loads get ``num_stages`` buffers, as Triton
   allocates (the kernel's shared memory is Q + num_stages x (K + V)).
3. **Simulate** it (:func:`twill.analysis.simulate`, raw cycle costs, TMA latency drawn around the
measured 872-cycle
   median) and read the steady-state cycles per iteration of one CTA.
4. **Registers**: the model's liveness (:func:`twill.model.liveness.register_intervals`) on the simulated
   timeline gives the peak registers per thread; above the entry cap ``min(255, 65536 / threads)`` ptxas
   spills and serializes the wgmma pipeline (C7511), so the GEMMs become
   ``CostModel.gemm(..., serialized=True)`` and the loop is simulated again.
5. **Occupancy**: :meth:`twill.ir.costmodel.CostModel.ctas_per_sm` from the registers and the shared memory;
   with ``k > 1`` CTAs per SM, ``k`` copies of the loop (one warp group each) share the SM's units in the
   simulation.
6. **Time**: ``waves x iterations x cycles per iteration`` with ``waves = ceil(CTAs / (SMs x k))``.

Measured and predicted times are both given as **SM cycles per CTA iteration**: kernel time x SM clock x
SMs / (CTAs x iterations per CTA), with ``chip.clock_ghz`` = 1.60 (the H200's clock under a full wgmma
load, ``results/microbench.json``). Ranks are taken over kernel time (the quantity a user ranks
configurations by; cycles per iteration alone would mostly rank BLOCK_N). The model before this study
(one CTA per SM, ptxas never serializes) is scored as well.

Run (about 30 s on 2 cores)::

    python benchmarks/calibrate/rank_correlation.py            # writes results/rank_correlation.json
    python benchmarks/calibrate/rank_correlation.py --check    # recompute and compare with the file
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
RESULTS = Path(__file__).resolve().parent / "results"
OUT = RESULTS / "rank_correlation.json"
KERNEL = "examples/flash_attention_fwd.py::attn_fwd"
MACHINE = "h200"
ITERATIONS = 48
"""Loop trips simulated per configuration (the steady state is read over the middle half)."""
SEED = 0


# ---------------------------------------------------------------------------------------------- statistics
def ranks(values: Sequence[float]) -> list[float]:
    """1-based ranks, smallest first; ties share the mean of their ranks."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    out = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return out


def _pearson(x: Sequence[float], y: Sequence[float]) -> float:
    n = len(x)
    mx, my = sum(x) / n, sum(y) / n
    sxy = sum((a - mx) * (b - my) for a, b in zip(x, y, strict=True))
    sxx = sum((a - mx) ** 2 for a in x)
    syy = sum((b - my) ** 2 for b in y)
    return sxy / math.sqrt(sxx * syy) if sxx and syy else float("nan")


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rho: Pearson's correlation of the (tie-averaged) ranks."""
    return _pearson(ranks(x), ranks(y))


def kendall_tau_b(x: Sequence[float], y: Sequence[float]) -> float:
    """Kendall's tau-b: ``(concordant - discordant) / sqrt((n0 - n1) (n0 - n2))`` over the ``n0`` pairs,
    ``n1`` / ``n2`` the pairs tied in ``x`` / in ``y``."""
    concordant = discordant = tied_x = tied_y = pairs = 0
    for i, j in itertools.combinations(range(len(x)), 2):
        pairs += 1
        dx, dy = x[i] - x[j], y[i] - y[j]
        tied_x += dx == 0
        tied_y += dy == 0
        if dx and dy:
            if (dx > 0) == (dy > 0):
                concordant += 1
            else:
                discordant += 1
    denominator = math.sqrt((pairs - tied_x) * (pairs - tied_y))
    return (concordant - discordant) / denominator if denominator else float("nan")


def permutation_p(x: Sequence[float], y: Sequence[float], stat: Callable[[Sequence[float], Sequence[float]],
                                                                     float]) -> float:
    """Exact one-sided p-value: the share of the n! orderings of ``y`` whose statistic is at least the
    observed one (the null hypothesis: the model's order carries no information about the measured one)."""
    observed = stat(x, y) - 1e-12
    hits = total = 0
    for perm in itertools.permutations(y):
        total += 1
        hits += stat(x, perm) >= observed
    return hits / total


def correlations(predicted: Sequence[float], measured: Sequence[float]) -> dict[str, float]:
    """Spearman's rho and Kendall's tau-b with exact one-sided permutation p-values."""
    return {"spearman": spearman(predicted, measured), "kendall_tau_b": kendall_tau_b(predicted, measured),
            "spearman_p": permutation_p(predicted, measured, spearman),
            "kendall_p": permutation_p(predicted, measured, kendall_tau_b)}


# ---------------------------------------------------------------------------------------------- the model
def _signature(block_n: int) -> dict[str, str]:
    q = "tensordesc<fp16[128, 128]>"
    kv = f"tensordesc<fp16[{block_n}, 128]>"
    return {"q_desc": q, "k_desc": kv, "v_desc": kv, "o_desc": q, "sm_scale": "fp32", "seq_len": "i32"}


def lower_config(block_n: int, stages: int, warps: int) -> Any:
    """Compile one configuration on the CPU and lower the loop of Triton's scheduled TTGIR (a Lowering)."""
    from twill.frontend.compile import compile_to_ttgir
    from twill.frontend.lower import lower_loop
    from twill.frontend.ttgir import parse_ttgir

    snaps = compile_to_ttgir(str(ROOT / KERNEL), target="sm_90", constexprs={"BLOCK_N": block_n},
                             signature=_signature(block_n), num_warps=warps, num_stages=stages)
    return lower_loop(parse_ttgir(snaps.scheduled), MACHINE, name=f"attn_fwd_bn{block_n}_s{stages}_w{warps}")


def triton_slots(lowering: Any) -> dict[str, tuple[int, int, int]]:
    """Per graph op: Triton's ``(loop.stage, loop.cluster, position)``
    (:func:`twill.tune.triton_model.triton_slots`; every op in stage 0, cluster 0 when Triton did not
    pipeline the loop, ``num_stages`` = 1)."""
    from twill.tune.triton_model import triton_slots as slots_of

    return dict(slots_of(lowering).slots)


def run(schedule: Any, stages: int, latency: float | None = None) -> Any:
    """Simulate with Triton's ``num_stages`` buffers for every load (a SimResult); ``latency``: every TMA
    load takes exactly that many cycles instead of the default draw around ``cost.tma_latency``."""
    from twill.tune.triton_model import simulate_triton

    return simulate_triton(schedule, stages, ITERATIONS, latency=latency, seed=SEED)


def tma_latencies() -> dict[str, float]:
    """Measured 32 KB TMA load latencies with every SM loading (``results/microbench.json``), cycles."""
    raw = json.loads((RESULTS / "microbench.json").read_text(encoding="utf-8"))
    cases = {c["name"]: c for c in raw["tests"]["tma"]["result"]["cases"]}
    return {"L2 median": cases["32KB_all_sms_l2"]["median"], "L2 p99": cases["32KB_all_sms_l2"]["p99"],
            "HBM median": cases["32KB_all_sms_hbm"]["median"]}


def tune_terms(block_n: int, stages: int, warps: int,
               problem: Mapping[str, int] | None = None) -> dict[str, Any]:
    """``twill tune``'s prediction for one configuration (:func:`twill.tune.worker.tune_config`, no cache):
    its cycles per CTA trip, CTAs per SM and hardware terms. The rank study scores exactly what ``twill
    tune`` predicts, so the two cannot diverge (they did: the study once fed the ``k``-copy simulation,
    which already shares the SM's units between the CTAs, to the in-step term, which charges the other
    CTAs' Tensor Core time and issue slots again)."""
    from twill.tune.worker import Task, tune_config

    path, name = KERNEL.split("::")
    task = Task(kernel=f"{ROOT / path}::{name}", machine=MACHINE,
                constexprs={"BLOCK_M": 128, "BLOCK_N": block_n, "HEAD_DIM": 128}, num_warps=warps,
                num_stages=stages, problem=dict(problem or {}), time_limit=0.5)
    out = tune_config(task)
    if not out["fits"]:
        return {"fits": False, "reason": out["reason"]}
    d = out["details"]
    return {"fits": True, "cycles_per_trip": d["cycles_per_trip"], "ctas_per_sm": d["ctas_per_sm"],
            "terms": d["terms"]}


def predict(block_n: int, stages: int, warps: int, *, ctas: int,
            problem: Mapping[str, int] | None = None) -> dict[str, Any]:
    """The model's prediction for one configuration of ``ctas`` CTAs (module docstring, steps 1-6).

    Cycles are SM clock cycles; ``per_cta_cycles`` is one CTA's steady-state cycles per loop iteration,
    ``cycles_per_iteration`` the SM cycles per CTA iteration over the whole grid (with the waves).
    ``with_terms`` is ``twill tune``'s prediction of the same config (:func:`tune_terms`): the costs the
    hardware pays that the tile model leaves out (:func:`twill.tune.triton_model.hardware_terms`) on
    the single-CTA simulation, co-resident CTAs in step (:func:`twill.tune.triton_model.effective_cycles`;
    docs/calibration.md §7). ``problem`` (``batch``, ``heads``, ``seq_len``) only sets the sizes ``twill
    tune`` is given; its cycles per trip do not depend on them.

    A configuration that cannot run says why instead of a prediction: ``{"fits": False, "reason": ...}``
    (its shared memory exceeds what a CTA may have, so no CTA fits on an SM). At ``num_stages`` = 1
    Triton does not pipeline the loop (no ``loop.stage``): every op is then in stage 0.
    """
    from twill.ir.costmodel import CostModel
    from twill.ir.machine import load_machine
    from twill.tune import triton_model as tm

    machine = load_machine(MACHINE)
    cm = CostModel(machine)
    lowering = lower_config(block_n, stages, warps)
    graph = lowering.graph
    slots = tm.triton_slots(lowering)
    one = tm.triton_schedule(graph, slots, warps, machine)
    plain = run(one, stages)
    demand = tm.register_demand(one, plain, ITERATIONS)
    threads = 32 * warps
    cap = cm.register_cap(threads)
    spills = demand > cap
    smem = graph.fixed_smem + stages * sum(op.smem for op in graph.ops if graph.is_streaming(op.name))
    k = cm.ctas_per_sm(threads, min(demand, cap), smem)
    if k < 1 or smem > int(machine.const("memory.smem_per_cta")):
        limit = int(machine.const("memory.smem_per_cta"))
        return {"fits": False, "smem_bytes": smem, "register_demand": demand, "register_cap": cap,
                "ctas_per_sm": 0, "reason": f"shared memory: Q + {stages} x (K + V) = {smem} B per CTA, more "
                                            f"than the {limit} B a CTA may use (memory.smem_per_cta)"}
    operands = tm.gemm_operands(lowering)
    model_graph = tm.serialize_gemms(graph, operands, warps, cm) if spills else graph
    single = run(tm.triton_schedule(model_graph, slots, warps, machine), stages) if spills else plain
    final = tm.triton_schedule(model_graph, slots, warps, machine, k)
    shared = run(final, stages) if k > 1 else single
    sensitivity = {label: round(run(final, stages, lat).cycles_per_iteration, 1)
                   for label, lat in tma_latencies().items()}
    sms = int(machine.const("chip.sms"))
    tuned = tune_terms(block_n, stages, warps, problem)
    if not tuned["fits"]:
        raise SystemExit(f"twill tune says BLOCK_N {block_n}, {stages} stages, {warps} warps cannot run "
                         f"where the study's model says it can: {tuned['reason']}")
    with_terms, k_tune = tuned["cycles_per_trip"], tuned["ctas_per_sm"]

    def per_iteration(cycles: float, copies: int) -> float:
        """SM cycles per CTA iteration: waves x iterations x cycles, spread over the CTAs' iterations."""
        return math.ceil(ctas / (sms * copies)) * cycles * sms / ctas

    return {
        "fits": True,
        "ops": len(graph.ops),
        "triton_stages": slots.stages, "triton_pipelined": slots.pipelined,
        "single_cta_cycles": round(plain.cycles_per_iteration, 1),
        "register_demand": demand, "register_cap": cap, "spills": spills,
        "serialized_single_cta_cycles": round(single.cycles_per_iteration, 1) if spills else None,
        "smem_bytes": smem, "ctas_per_sm": k, "waves": math.ceil(ctas / (sms * k)),
        "per_cta_cycles": round(shared.cycles_per_iteration, 1),
        "cycles_per_iteration_before": round(per_iteration(plain.cycles_per_iteration, 1), 1),
        "cycles_per_iteration": round(per_iteration(shared.cycles_per_iteration, k), 1),
        "per_cta_cycles_at_fixed_tma_latency": sensitivity,
        "with_terms": {"per_cta_cycles": round(with_terms, 1), "ctas_per_sm": k_tune,
                       "cycles_per_iteration": round(per_iteration(with_terms, k_tune), 1),
                       **tuned["terms"]},
    }


def measured(record: Mapping[str, Any], clock_ghz: float, sms: int) -> dict[str, Any]:
    """SM cycles per CTA iteration of a measured configuration, and the problem's CTA count."""
    ctas = (record["seq"] // record["BLOCK_M"]) * record["batch"] * record["heads"]
    iters = record["seq"] // record["BLOCK_N"]
    cycles = record["median_ms"] * 1e-3 * clock_ghz * 1e9 * sms / (ctas * iters)
    return {"median_ms": record["median_ms"], "tflops": record["tflops"], "ctas": ctas, "iterations": iters,
            "cycles_per_iteration": round(cycles, 1)}


def study() -> dict[str, Any]:
    """Predict every configuration and score the model; returns the results as plain data."""
    from twill.ir.machine import load_machine

    machine = load_machine(MACHINE)
    clock, sms = float(machine.const("chip.clock_ghz")), int(machine.const("chip.sms"))
    data = json.loads((RESULTS / "fa_configs.json").read_text(encoding="utf-8"))
    rows = []
    for rec in sorted(data["configs"], key=lambda c: (c["BLOCK_N"], c["num_stages"], c["num_warps"])):
        meas = measured(rec, clock, sms)
        pred = predict(rec["BLOCK_N"], rec["num_stages"], rec["num_warps"], ctas=meas["ctas"],
                       problem={"batch": rec["batch"], "heads": rec["heads"], "seq_len": rec["seq"]})
        rows.append({"BLOCK_N": rec["BLOCK_N"], "num_stages": rec["num_stages"],
                     "num_warps": rec["num_warps"], "measured": meas, "predicted": pred,
                     "ptxas": {"registers": rec["n_regs"], "spilled_registers": rec["n_spills"],
                               "shared_bytes": rec["shared_bytes"]}})
    score(rows)
    return {"what": "rank correlation of twill's model with the measured Triton FA forward on the H200",
            "kernel": KERNEL, "machine": MACHINE, "clock_ghz": clock, "sms": sms, "iterations": ITERATIONS,
            "seed": SEED, "rank_by": "kernel time (cycles per iteration x iterations per CTA)",
            "rows": rows, "correlation": correlation_table(rows)}


def kernel_cycles(row: Mapping[str, Any], key: str) -> float:
    """``key`` (a cycles-per-iteration figure) times the iterations per CTA: the quantity ranked."""
    section = row["measured"] if key == "measured" else row["predicted"]
    if key == "with_terms":
        value = section["with_terms"]["cycles_per_iteration"]
    else:
        value = section["cycles_per_iteration"] if key in ("measured", "model") else section[
            "cycles_per_iteration_before"]
    return value * row["measured"]["iterations"]


def score(rows: list[dict[str, Any]]) -> None:
    """Add the ranks (1 = fastest) of the measured and predicted kernel times to each row."""
    for key in ("measured", "model", "before", "with_terms"):
        for row, rank in zip(rows, ranks([kernel_cycles(r, key) for r in rows]), strict=True):
            row.setdefault("rank", {})[key] = rank


def correlation_table(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """Correlations of the measured kernel times with the model's and with the model before the study."""
    meas = [kernel_cycles(r, "measured") for r in rows]
    out = {key: {k: round(v, 4) for k, v in correlations([kernel_cycles(r, key) for r in rows], meas).items()}
           for key in ("model", "before", "with_terms")}
    for key, field in (("model", "cycles_per_iteration"), ("before", "cycles_per_iteration_before"),
                       ("with_terms", "with_terms")):
        value = [r["predicted"][field]["cycles_per_iteration"] if field == "with_terms"
                 else r["predicted"][field] for r in rows]
        errors = [v / r["measured"]["cycles_per_iteration"] - 1 for v, r in zip(value, rows, strict=True)]
        out[key]["mean_abs_rel_error"] = round(sum(abs(e) for e in errors) / len(errors), 4)
        out[key]["max_abs_rel_error"] = round(max(abs(e) for e in errors), 4)
    per_iter = [r["predicted"]["cycles_per_iteration"] for r in rows]
    out["model_cycles_per_iteration"] = {
        k: round(v, 4) for k, v in correlations(per_iter, [r["measured"]["cycles_per_iteration"]
                                                           for r in rows]).items()}
    return out


def render(result: Mapping[str, Any]) -> str:
    """The table of ``docs/calibration.md`` (markdown)."""
    lines = ["| BLOCK_N | stages | warps | model: regs / cap, CTAs/SM | predicted cycles/iter | measured "
             "cycles/iter | predicted rank | measured rank | rank before |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        p, m = r["predicted"], r["measured"]
        regs = f"{p['register_demand']} / {p['register_cap']}" + (" spill" if p["spills"] else "")
        lines.append(f"| {r['BLOCK_N']} | {r['num_stages']} | {r['num_warps']} | {regs}, "
                     f"{p['ctas_per_sm']} | "
                     f"{p['cycles_per_iteration']:.0f} | {m['cycles_per_iteration']:.0f} | "
                     f"{r['rank']['model']:g} | {r['rank']['measured']:g} | {r['rank']['before']:g} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the study and write (or, with ``--check``, compare with) ``results/rank_correlation.json``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="recompute and compare with the committed file")
    parser.add_argument("--out", type=Path, default=OUT, help="JSON file to write")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    result = study()
    print(render(result))
    for key, value in result["correlation"].items():
        print(f"{key:28s} {value}")
    if args.check:
        committed = json.loads(args.out.read_text(encoding="utf-8"))
        same = committed["rows"] == result["rows"] and committed["correlation"] == result["correlation"]
        print("matches the committed results" if same else "DIFFERS from the committed results")
        return 0 if same else 1
    args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
