"""How much the Gluon FA grids' ``sass`` scores depend on each measured SASS latency (CPU).

Each latency of :class:`twill.tune.sass_trip.SassLatencies` is halved and raised by half in turn, the two
committed grids are predicted again (``benchmarks/gluon_fa_grid_scores.py``'s ``predict_folder``) and
scored; prints ``field factor`` and per grid ``Spearman / pick vs best / mean abs log error``::

    python benchmarks/gluon_sass_sensitivity.py     # 1-3 min per line on the 2-core machine
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "benchmarks" / "calibrate"))

GRIDS = (((4, 32, 8192, 128), ROOT / "benchmarks" / "gluon_fa_grid", "h200_gluon_fa_grid_v2.json"),
         ((4, 32, 4096, 64), ROOT / "benchmarks" / "gluon_fa_grid_b4_h32_n4096_d64",
          "h200_gluon_fa_grid_d64_v2.json"))
FIELDS = ("alu", "mufu", "shfl", "smem", "trywait", "bar_sync", "uniform", "local")


def main() -> int:
    """Print one line per (latency, factor), the unchanged model first."""
    import gluon_fa_grid_scores as scores

    import twill.tune.sass_trip as sass_trip

    original = sass_trip.latencies_from_machine
    results = ROOT / "benchmarks" / "results"
    measured = [{r["name"]: r["gluon_ms"] for r in json.loads((results / m).read_text())["rows"]
                 if "gluon_ms" in r} for _, _, m in GRIDS]
    cases: list[tuple[str | None, float]] = [(None, 1.0)] + [(f, x) for f in FIELDS for x in (0.5, 1.5)]
    for field, factor in cases:
        def patched(machine, field=field, factor=factor):
            lat = original(machine)
            return lat if field is None else replace(lat, **{field: getattr(lat, field) * factor})

        sass_trip.latencies_from_machine = patched
        out = []
        for (shape, folder, _), meas in zip(GRIDS, measured, strict=True):
            with contextlib.redirect_stdout(io.StringIO()):
                rows = scores.predict_folder(folder, shape)
            s = scores.score(rows, meas)["terms"]["sass"]
            out.append(f"{s['spearman']:+.3f}/{s['pick_vs_best']:.2f}/{s['mean_abs_log_error']:.3f}")
        print(field, factor, *out, flush=True)
    sass_trip.latencies_from_machine = original
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
