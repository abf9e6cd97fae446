"""How fast one CTA's TMA stream runs as a GEMM's operands outgrow L2 (issue 25, tune_scores.md pass 5).

Triton's own ``examples/gemm.py::matmul`` at tiles that put one CTA on each SM (128x128x64 and 64x256x64 at 4
warps, 4 stages) is timed at ``M`` from 1024 to 16384 rows with ``N`` = 8192 and ``K`` = 4096, so that ``A``
(``M x K`` fp16: 8 to 128 MB; its panels are shared by CTAs ``M / BLOCK_M`` apart in launch order) goes from
well inside the H200's 50 MB L2 to well outside it while ``B`` (64 MB; shared by CTAs launched next to each
other) stays; and at ``N`` 2048 / 32768 with ``M`` = 4096. Each config's cycles per trip are
``(ms x clock / waves - 2 x tma_latency) / trips`` (the tune_scores.md convention, ``chip.clock_ghz``
1.6), and its stream rate the trip's TMA bytes over them; ``triton.testing.do_bench(warmup=25,
rep=100)``, median.

Run on the GPU machine (about a minute)::

    python3 benchmarks/calibrate/run_l2_stream.py --out $OUT/l2_stream.json
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
CLOCK_GHZ = 1.6
"""machines/h200.toml chip.clock_ghz (the SM clock under a full wgmma load)."""
TMA_LATENCY = 872
"""machines/h200.toml cost.tma_latency (one load in, one store out per CTA, as tune_scores.py counts)."""
SMS = 132
TILES = ((128, 128, 64, 4, 4), (64, 256, 64, 4, 4))
SHAPES = [(m, 8192, 4096) for m in (1024, 2048, 3072, 4096, 6144, 8192, 12288, 16384)] + [
    (4096, 2048, 4096), (4096, 32768, 4096)]


def _gemm_module() -> Any:
    spec = importlib.util.spec_from_file_location("l2_stream_gemm", ROOT / "examples" / "gemm.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def measure() -> dict[str, Any]:
    """Time every tile at every shape; the rows of the JSON."""
    import torch
    import triton
    from triton.tools.tensor_descriptor import TensorDescriptor

    gemm = _gemm_module()
    rows = []
    for m, n, k in SHAPES:
        torch.manual_seed(0)
        a = torch.randn((m, k), device="cuda", dtype=torch.float16)
        b = torch.randn((n, k), device="cuda", dtype=torch.float16)
        c = torch.empty((m, n), device="cuda", dtype=torch.float16)
        for bm, bn, bk, warps, stages in TILES:
            descs = (TensorDescriptor.from_tensor(a, [bm, bk]), TensorDescriptor.from_tensor(b, [bn, bk]),
                     TensorDescriptor.from_tensor(c, [bm, bn]))
            grid = (m // bm, n // bn)

            def launch(descs=descs, grid=grid, k=k, bm=bm, bn=bn, bk=bk, warps=warps, stages=stages) -> None:
                gemm.matmul[grid](*descs, k, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, num_warps=warps,
                                  num_stages=stages)

            launch()
            torch.cuda.synchronize()
            if (m, n) == SHAPES[0][:2]:
                want = torch.matmul(a.float(), b.float().t())
                err = float((c.float() - want).norm() / want.norm())
                assert err < 1e-2, f"{bm}x{bn}x{bk}: relative error {err}"
            ms = float(triton.testing.do_bench(launch, warmup=25, rep=100))
            ctas, trips = grid[0] * grid[1], math.ceil(k / bk)
            waves = math.ceil(ctas / SMS)  # one CTA per SM at these tiles (4 stages of shared memory)
            cycles = (ms * CLOCK_GHZ * 1e6 / waves - 2 * TMA_LATENCY) / trips
            trip_bytes = (bm + bn) * bk * 2
            rows.append({"M": m, "N": n, "K": k, "tile": f"{bm}x{bn}x{bk}", "num_warps": warps,
                         "num_stages": stages, "A_MB": round(m * k * 2 / 2**20, 1),
                         "B_MB": round(n * k * 2 / 2**20, 1), "ms": round(ms, 5), "ctas": ctas,
                         "waves": waves,
                         "trips": trips, "cycles_per_trip": round(cycles, 1), "trip_bytes": trip_bytes,
                         "bytes_per_cycle": round(trip_bytes / cycles, 2)})
            print(json.dumps(rows[-1]), flush=True)
        del a, b, c
        torch.cuda.empty_cache()
    return {"what": __doc__.splitlines()[0], "clock_ghz": CLOCK_GHZ, "tma_latency": TMA_LATENCY,
            "device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
            "time_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()), "rows": rows}


def main(argv: list[str] | None = None) -> int:
    """Measure and write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="JSON to write")
    args = parser.parse_args(argv)
    result = measure()
    args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
