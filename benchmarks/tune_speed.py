"""How long ``twill tune`` takes over the issue-25 FA forward grid (48 configs) on this machine.

Runs the command three times in a fresh cache: ``--no-cache`` (every config compiled and solved), then
with the cache (first filling it, then warm: compiles and completed solves come from it), and writes the
wall times, the core count, the load average and the CPU seconds of each phase (from the ``--json``
output's ``details.cpu_seconds``) to ``benchmarks/results/tune_speed.json``::

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


def phases(path: Path) -> dict[str, object]:
    """CPU seconds per phase summed over the configs of a ``--json`` result (``details.cpu_seconds``:
    ``compile`` Triton's front end to PTX and TTGIR in the worker, ``tools`` ptxas and cuobjdump,
    ``model`` lowering, simulation and terms, ``solve`` twill's schedule), and how many configs found
    their compile and their solve in the cache."""
    configs = json.loads(path.read_text(encoding="utf-8"))["configs"]
    total: dict[str, float] = {}
    for c in configs:
        for name, value in (c.get("details") or {}).get("cpu_seconds", {}).items():
            total[name] = total.get(name, 0.0) + float(value)
    details = [c.get("details") or {} for c in configs]
    return {"cpu_s": {k: round(v, 1) for k, v in total.items()},
            "cpu_s_sum": round(sum(total.values()), 1),
            "compile_cached": sum(bool(d.get("compile_cached")) for d in details),
            "solve_cached": sum(bool(d.get("solve_cached")) for d in details),
            "configs": len(configs),
            "config_wall_s_sum": round(sum(d.get("seconds") or 0 for d in details), 1)}


def timed(args: list[str]) -> dict[str, object]:
    """Wall seconds of one ``twill tune`` run, the load average around it and its CPU seconds per phase."""
    before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="twill-tune-speed-json-") as tmp:
        out = Path(tmp) / "tune.json"
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "twill.cli", "tune", *args, "--json", str(out)],
                              cwd=ROOT, capture_output=True, text=True, check=False)
        wall = time.perf_counter() - t0
        parts = phases(out) if out.is_file() else {}
    after = os.getloadavg()
    return {"wall_s": round(wall, 1), "exit": proc.returncode, "load_before": [round(x, 2) for x in before],
            "load_after": [round(x, 2) for x in after], "args": " ".join(args), **parts}


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
              "note": "the machine is shared: the load average (1, 5, 15 min) says how busy it was; cpu_s is "
                      "the CPU time of each phase summed over the configs (worker start-up and imports "
                      "are not in it), what a quiet machine would spread over its cores"}
    OUT.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(result, indent=1))
    return 0 if all(r["exit"] == 0 for r in runs.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
