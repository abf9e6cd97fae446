"""Score ``twill tune`` on the memory-bound user kernels timed on the H200, with each memory-bound term
taken out in turn (benchmarks/results/tune_scores.md, "Memory-bound loops").

    python benchmarks/calibrate/membound_scores.py [--ablate] [--jobs 2]

Runs ``twill tune`` (on the CPU) over the configs of ``benchmarks/results/h200_tune_user_softmax_rows.json``
and ``h200_tune_user_rmsnorm.json`` (the commands of tune_scores.md) and of the two held-out kernels of
``benchmarks/tune_user_heldout.py`` (``h200_tune_user_{layernorm_rows,axpby_rows}.json``), writes each
prediction with the measured time beside it to
``benchmarks/results/h200_tune_user_<kernel>_membound.json`` and
the scores (Spearman, Kendall tau-b, the pick's measured time against the best, mean |log error|, the range
of predicted / measured) to ``benchmarks/results/membound_scores.json``. With ``--ablate`` it also scores
the model with one term out at a time: a machine file that switches a constant off (L2 reuse, the write
cost, the queueing) or the function replaced in this process (the unroll and load groups, the sibling
loops out of step, the warp's compute in its round trip), which run with one job, in this process (a
process pool's workers are spawned and would not see it). Nothing is fitted here.
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
KERNELS = {
    "softmax_rows": ("tests/data/tune_user_kernels.py::softmax_rows", "h200_tune_user_softmax_rows.json",
                     ["--grid", "BLOCK=512,1024,2048,4096", "--num-warps", "4,8,16", "--num-stages", "2,3"]),
    "rmsnorm": ("benchmarks/tune_user_rmsnorm.py::rmsnorm_rows", "h200_tune_user_rmsnorm.json",
                ["--grid", "BLOCK=256,512,1024,2048,4096", "--num-warps", "2,4,8,16", "--num-stages", "2"]),
    # held out: timed before the memory-bound terms were written, scored once they were
    "layernorm_rows": ("benchmarks/tune_user_heldout.py::layernorm_rows",
                       "h200_tune_user_layernorm_rows.json",
                       ["--grid", "BLOCK=256,512,1024,2048,4096", "--num-warps", "2,4,8,16", "--num-stages",
                        "2,3"]),
    "axpby_rows": ("benchmarks/tune_user_heldout.py::axpby_rows", "h200_tune_user_axpby_rows.json",
                   ["--grid", "BLOCK=256,512,1024,2048,4096,8192", "--num-warps", "2,4,8,16", "--num-stages",
                    "2,3"]),
}
OFF = {  # machine-file ablations: the constant that switches a term off
    "no L2 reuse between sibling loops": {"l2_reuse_full_bytes": 0, "l2_reuse_none_bytes": 1},
    "no write cost (a stored byte = a read byte)": {"hbm_write_cost": 1.0},
    "no queueing (HBM rate = min(N / L0, B))": {"hbm_queue_exponent": 40},
}


def key(c: dict[str, Any]) -> tuple[Any, ...]:
    """A config's identity in a grid file."""
    return tuple(sorted(c["constexprs"].items())), c["num_warps"], c["num_stages"]


def score(measured: list[dict[str, Any]], predicted: list[dict[str, Any]]) -> dict[str, Any]:
    """Spearman, Kendall tau-b, the pick against the best, mean |log error| and the ratio range."""
    from scipy.stats import kendalltau, spearmanr

    pred = {key(c): c for c in predicted if c.get("predicted_ms")}
    rows = [(c["measured_ms"], pred[key(c)]["predicted_ms"], key(c)) for c in measured
            if c.get("measured_ms") and key(c) in pred]
    m, p = [r[0] for r in rows], [r[1] for r in rows]
    pick = min(rows, key=lambda r: r[1])
    ratios = [b / a for a, b, _ in rows]
    return {"n": len(rows), "spearman": round(float(spearmanr(m, p)[0]), 3),
            "kendall": round(float(kendalltau(m, p)[0]), 3),
            "pick": {"config": str(pick[2]), "measured_ms": round(pick[0], 4),
                     "vs_best_pct": round((pick[0] / min(m) - 1) * 100, 1)},
            "mean_abs_log_error": round(sum(abs(math.log(r)) for r in ratios) / len(ratios), 3),
            "ratio_range": [round(min(ratios), 2), round(max(ratios), 2)]}


def tune(kernel: str, args: list[str], machine: str, jobs: int, out: Path) -> list[dict[str, Any]]:
    """``twill tune`` in this process (its workers forked from it); the configs of its JSON."""
    from twill.cli.main import main

    rc = main(["tune", kernel, "--machine", machine, *args, "--top", "48", "--jobs", str(jobs), "--json",
               str(out)])
    if rc != 0:
        raise SystemExit(f"twill tune {kernel} exited with {rc}")
    return json.loads(out.read_text(encoding="utf-8"))["configs"]


def run_all(machine: str, jobs: int, tmp: Path, tag: str) -> dict[str, Any]:
    """Every kernel of ``KERNELS`` predicted on ``machine`` and scored."""
    out = {}
    for name, (kernel, measured_file, args) in KERNELS.items():
        measured = json.loads((RESULTS / measured_file).read_text(encoding="utf-8"))["configs"]
        configs = tune(kernel, args, machine, jobs, tmp / f"{name}_{tag}.json")
        out[name] = score(measured, configs)
        out[name]["_configs"] = configs
    return out


def strip(row: dict[str, Any]) -> dict[str, Any]:
    """A row's scores without the configs."""
    return {n: {k: v for k, v in s.items() if k != "_configs"} for n, s in row.items()}


def ablations() -> dict[str, Any]:
    """The in-process replacements: name -> (module, attribute, replacement)."""
    from twill.tune import membound as mb

    original_stream = mb.streaming_cycles

    def no_unroll(*a: Any, **kw: Any) -> Any:
        return original_stream(*a, **{**kw, "sass_memory": None})

    def no_compute(*a: Any, **kw: Any) -> Any:
        return original_stream(*a, **{**kw, "body_instructions": 0.0})

    def in_step(loops: Any) -> float:
        return float(sum(t * mb.trip_cycles(c, s) for t, c, s in loops))

    return {"no unroll or load groups (one TTGIR trip in flight per warp)":
            (mb, "streaming_cycles", no_unroll),
            "no compute in a warp's round trip": (mb, "streaming_cycles", no_compute),
            "sibling loops in step (each loop's own bound, summed)": (mb, "kernel_cycles", in_step)}


def main() -> int:
    """Predict, score, write the files."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ablate", action="store_true")
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    scores: dict[str, Any] = {"what": __doc__.splitlines()[0], "before": {}, "rows": {}}
    for name, (_, measured_file, _) in KERNELS.items():
        committed = json.loads((RESULTS / measured_file).read_text(encoding="utf-8"))["configs"]
        scores["before"][name] = score(committed, committed)
    with tempfile.TemporaryDirectory(prefix="twill-membound-") as tmpdir:
        tmp = Path(tmpdir)
        now = run_all("h200", args.jobs, tmp, "all")
        for name, (_, measured_file, _) in KERNELS.items():
            measured = {key(c): c["measured_ms"] for c in json.loads(
                (RESULTS / measured_file).read_text(encoding="utf-8"))["configs"]}
            configs = now[name].pop("_configs")
            for c in configs:
                c["measured_ms"] = measured.get(key(c))
            path = RESULTS / measured_file.replace(".json", "_membound.json")
            path.write_text(json.dumps({"configs": configs}, indent=1) + "\n", encoding="utf-8")
        scores["rows"]["all terms (twill tune now)"] = now
        if args.ablate:
            for label, consts in OFF.items():
                toml = tmp / "machine.toml"
                body = "\n".join(f"{k} = {{ value = {v}, estimate = true, source = \"ablation\" }}"
                                 for k, v in consts.items())
                toml.write_text(f'schema = 1\nbase = "h200"\nname = "h200-ablation"\n\n[cost]\n{body}\n',
                                encoding="utf-8")
                row = run_all(str(toml), args.jobs, tmp, "off")
                scores["rows"][label] = strip(row)
            for label, (module, attr, repl) in ablations().items():
                saved = getattr(module, attr)
                setattr(module, attr, repl)
                try:
                    row = run_all("h200", 1, tmp, "patched")  # one job: in this process
                finally:
                    setattr(module, attr, saved)
                scores["rows"][label] = strip(row)
    (RESULTS / "membound_scores.json").write_text(json.dumps(scores, indent=1) + "\n", encoding="utf-8")
    for label, row in [("before (committed predictions)", scores["before"]), *scores["rows"].items()]:
        print(label)
        for name, s in row.items():
            print(f"  {name}: Spearman {s['spearman']} Kendall {s['kendall']} pick "
                  f"+{s['pick']['vs_best_pct']} % mean |log| {s['mean_abs_log_error']} "
                  f"ratio {s['ratio_range']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
