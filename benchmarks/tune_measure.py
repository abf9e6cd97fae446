"""Time the top K configs of a ``twill tune --json`` file on a GPU with only torch and Triton (issue 25,
``--measure`` on a machine without twill's solvers), or score a measured file (Spearman, scipy).

    python3 benchmarks/tune_measure.py .tune_check/gemm_gluon.json --top 3 --out gemm_gluon.measured.json
    python3 benchmarks/tune_measure.py --score gemm_gluon.measured.json

The launching and timing are ``twill/tune/bench.py``'s (imported by path: it imports nothing from twill
but the Gluon loader), the same code ``twill tune --measure`` runs. ``benchmarks/tune_measure_check.sh``
runs it on both examples and both backends.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

_spec = importlib.util.spec_from_file_location(
    "twill_tune_bench", Path(__file__).resolve().parents[1] / "twill" / "tune" / "bench.py")
assert _spec is not None and _spec.loader is not None
bench = importlib.util.module_from_spec(_spec)
sys.modules["twill_tune_bench"] = bench
_spec.loader.exec_module(bench)


def _print_rows(rows: Sequence[Mapping[str, Any]]) -> None:
    """One line per measured config: predicted, measured and their ratio."""
    for i, r in enumerate(rows, 1):
        label = " ".join(f"{k}={v}" for k, v in r["constexprs"].items())
        print(f"{i:3d}. {label} w{r['num_warps']} s{r['num_stages']}: predicted {r['predicted_ms']:.3f} ms, "
              f"measured {r['measured_ms']:.3f} ms ({r['measured_ms'] / r['predicted_ms']:.2f}x)")


def main(argv: Sequence[str] | None = None) -> int:
    """Command line (module docstring); returns the exit code."""
    ap = argparse.ArgumentParser(description="time the top K configs of a `twill tune --json` file on a GPU")
    ap.add_argument("json", help="the file `twill tune --json` wrote (or, with --score, a measured one)")
    ap.add_argument("--top", type=int, default=5, help="configs to time, fastest predicted first")
    ap.add_argument("--out", help="write the document with measured_ms here (default: next to the input)")
    ap.add_argument("--score", action="store_true", help="only print the measured rows and Spearman")
    args = ap.parse_args(argv)
    doc = json.loads(Path(args.json).read_text(encoding="utf-8"))
    configs = doc["configs"]
    if args.score:
        rows = [r for r in bench.ranked(configs) if r.get("measured_ms") is not None]
        _print_rows(rows)
        rho = bench.spearman([r["predicted_ms"] for r in rows], [r["measured_ms"] for r in rows])
        print(f"Spearman (predicted vs measured, {len(rows)} configs): {rho if rho is not None else 'n/a'}")
        return 0
    try:
        import torch
    except ImportError:
        print("--measure needs a CUDA device; none found (torch is not installed)", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("--measure needs a CUDA device; none found", file=sys.stderr)
        return 2
    kernel, backend, problem = doc["kernel"], doc.get("backend", "triton"), doc["problem"]
    out = bench.measure_document(configs, args.top,
                                 launch=lambda r: bench.launch_config(r, kernel, backend, problem))
    _print_rows(out["measured"])
    for r in out["failed"]:
        print(f"not measured {r['constexprs']} w{r['num_warps']} s{r['num_stages']}: {r['measure_error']}")
    print(f"Spearman (predicted vs measured, {len(out['measured'])} configs): "
          f"{out['spearman'] if out['spearman'] is not None else 'n/a (fewer than 2, or no scipy)'}")
    doc["measure"] = {"configs": len(out["measured"]), "failed": len(out["failed"]),
                      "spearman": out["spearman"], "timer": "triton.testing.do_bench (median)",
                      "device": torch.cuda.get_device_name()}
    target = Path(args.out) if args.out else Path(args.json).with_suffix(".measured.json")
    target.write_text(json.dumps(doc, indent=1, default=str) + "\n", encoding="utf-8")
    print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
