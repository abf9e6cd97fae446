"""How long ``twill tune`` takes over the issue-25 FA forward grid (48 configs) on this machine.

Runs the command three times in a fresh compile cache: ``--no-cache`` (every config compiled), then
with the cache (first filling it, then warm), and writes the wall times, the core count and the load
average to ``benchmarks/results/tune_speed.json``::

    python benchmarks/tune_speed.py [--jobs N]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "tune_speed.json"
GRID = ["examples/flash_attention_fwd.py", "--machine", "h200", "--grid", "BLOCK_M=64,128", "--grid",
        "BLOCK_N=32,64,128", "--num-warps", "4,8", "--num-stages", "1,2,3,4", "--seq-len", "8192"]


def timed(args: list[str]) -> dict[str, float | int | str]:
    """Wall seconds of one ``twill tune`` run and the load average around it."""
    before = os.getloadavg()[0]
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "twill.cli", "tune", *args], cwd=ROOT, capture_output=True,
                          text=True, check=False)
    wall = time.perf_counter() - t0
    return {"wall_s": round(wall, 1), "exit": proc.returncode, "load_before": round(before, 2),
            "load_after": round(os.getloadavg()[0], 2), "args": " ".join(args)}


def main(argv: list[str] | None = None) -> int:
    """Time the three runs and write the results file."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="twill-tune-speed-") as cache:
        jobs = ["--jobs", str(args.jobs)]
        runs = {"no cache": timed([*GRID, *jobs, "--no-cache"]),
                "cache, cold": timed([*GRID, *jobs, "--cache-dir", cache]),
                "cache, warm": timed([*GRID, *jobs, "--cache-dir", cache])}
    result = {"what": "twill tune over the 48-config FA forward grid", "cores": os.cpu_count(),
              "jobs": args.jobs, "runs": runs,
              "note": "the machine is shared: the load average says how busy it was"}
    OUT.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(result, indent=1))
    return 0 if all(r["exit"] == 0 for r in runs.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
