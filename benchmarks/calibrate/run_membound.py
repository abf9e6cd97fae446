"""Build and run ``membound.cu`` on a Hopper GPU: the HBM rate pointer loads get at a given number of bytes
in flight per SM, and how much of a twice-read row L2 still holds on the second read.

    PYTHONUNBUFFERED=1 python3 benchmarks/calibrate/run_membound.py --out "$OUT"

Writes ``$OUT/membound.json`` (the binary's JSON, the GPU and clocks before and after, the build log) and
prints it; the result is copied into ``benchmarks/calibrate/results/membound.json`` of the repository, and
``machines/h200.toml`` cites it (``twill.tune.membound`` prices memory-bound loops with it).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from run_latency import sh  # the same runner helper (this folder is the script's sys.path[0])

HERE = Path(__file__).resolve().parent


def smi() -> str:
    """The GPU, driver and clocks as nvidia-smi reads them now."""
    fields = "name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu"
    rc, out, err = sh(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader"], 30)
    return out.strip() if rc == 0 else err.strip()


def main() -> int:
    """Build, run once, write the JSON."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    res: dict = {"time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "nvidia_smi_before": smi()}
    binary = args.out / "membound"
    rc, out, err = sh(["nvcc", "-O3", "-std=c++17", "-gencode", "arch=compute_90a,code=sm_90a", "-o",
                       str(binary), str(HERE / "membound.cu")], 300)
    res["build"] = {"rc": rc, "log": (out + err)[-2000:]}
    if rc == 0:
        t0 = time.time()
        rc, out, err = sh([str(binary)], 400)
        res["seconds"] = round(time.time() - t0, 1)
        try:
            res["result"] = json.loads(out)
        except json.JSONDecodeError:
            res["result"] = {"rc": rc, "stdout": out[-4000:], "stderr": err[-2000:]}
        res["nvidia_smi_after"] = smi()
        binary.unlink(missing_ok=True)
    (args.out / "membound.json").write_text(json.dumps(res, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(res, indent=1)[-3000:])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
