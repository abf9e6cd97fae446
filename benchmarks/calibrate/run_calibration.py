"""Build and run the calibration microbenchmarks and the FA config sweep on a Hopper GPU; write JSON results.

One call does everything, so that a lent GPU is started once::

    PYTHONUNBUFFERED=1 python3 benchmarks/calibrate/run_calibration.py --out "$OUT"

Steps, each under its own time limit so that one failure leaves the others' results:

1. record the GPU, driver, clocks and tool versions (``env.json``);
2. build ``microbench.cu`` with ``nvcc -gencode arch=compute_90a,code=sm_90a`` (falling back to a binary
   built elsewhere at ``build/calib`` if nvcc fails) and keep the ``ptxas -v`` report;
3. run ``calib wgmma``, ``mufu``, ``tma``, ``sync``, ``diverge``; collect their JSON in ``microbench.json``;
4. run ``fa_configs.py`` (Triton FA forward, BLOCK_N x num_stages x num_warps) into ``fa_configs.json``.

The results are copied into ``benchmarks/calibrate/results/`` of the repository afterwards, and
``machines/h200.toml`` cites them (``docs/calibration.md`` explains each constant).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
TESTS = ("wgmma", "mufu", "tma", "sync", "diverge")


def sh(cmd: list[str], timeout: float, cwd: Path | None = None) -> tuple[int, str, str]:
    """Run ``cmd``; returns (exit code, stdout, stderr); exit code 124 on time-out, 127 if not found."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd, check=False)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        return 124, out, f"timed out after {timeout} s"
    except FileNotFoundError as exc:
        return 127, "", str(exc)
    return proc.returncode, proc.stdout, proc.stderr


def environment() -> dict[str, Any]:
    """GPU name, driver, clocks, temperature and tool versions as the card was found."""
    env: dict[str, Any] = {"time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    fields = "name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.draw,power.limit,temperature.gpu"
    rc, out, err = sh(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader"], 30)
    env["nvidia_smi"] = {"fields": fields, "value": out.strip() if rc == 0 else err.strip()}
    rc, out, _ = sh(["nvcc", "--version"], 30)
    env["nvcc"] = out.strip().splitlines()[-1] if rc == 0 and out.strip() else None
    for mod in ("torch", "triton"):
        rc, out, _ = sh([sys.executable, "-c", f"import {mod}; print({mod}.__version__)"], 60)
        env[mod] = out.strip() if rc == 0 else None
    return env


def build(out: Path) -> Path | None:
    """Build ``calib``; returns its path, or the prebuilt ``build/calib`` if nvcc fails, or None."""
    target = Path("/tmp/twill_calib")
    cmd = ["nvcc", "-O3", "-std=c++17", "-gencode", "arch=compute_90a,code=sm_90a", "-Xptxas", "-v", "-o",
           str(target), "microbench.cu"]
    rc, stdout, stderr = sh(cmd, 300, cwd=HERE)
    (out / "build_log.txt").write_text(" ".join(cmd) + f"\nexit {rc}\n{stdout}\n{stderr}", encoding="utf-8")
    if rc == 0 and target.exists():
        return target
    prebuilt = HERE / "build" / "calib"
    if prebuilt.exists():
        shutil.copy(prebuilt, target)
        target.chmod(0o755)
        return target
    return None


def main(argv: list[str] | None = None) -> int:
    """Run every step; returns 0 if every step produced results."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the JSON results")
    parser.add_argument("--skip-fa", action="store_true", help="do not run the FA config sweep")
    args = parser.parse_args(argv)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    ok = True
    env = environment()
    (out / "env.json").write_text(json.dumps(env, indent=1), encoding="utf-8")
    print("env:", json.dumps(env), flush=True)
    binary = build(out)
    bench: dict[str, Any] = {"env": env, "binary": str(binary) if binary else None, "tests": {}}
    if binary is None:
        print("build failed; see build_log.txt", flush=True)
        ok = False
    else:
        for test in TESTS:
            t0 = time.perf_counter()
            rc, stdout, stderr = sh([str(binary), test], 150)
            seconds = round(time.perf_counter() - t0, 2)
            entry: dict[str, Any] = {"exit": rc, "seconds": seconds, "stderr": stderr[-2000:]}
            try:
                entry["result"] = json.loads(stdout)
            except json.JSONDecodeError:
                entry["stdout"] = stdout[-4000:]
                ok = False
            bench["tests"][test] = entry
            print(f"{test}: exit {rc} in {seconds} s; {stderr.strip()[-300:]}", flush=True)
            (out / "microbench.json").write_text(json.dumps(bench, indent=1), encoding="utf-8")
    if not args.skip_fa:
        cmd = [sys.executable, str(HERE / "fa_configs.py"), "--out", str(out / "fa_configs.json")]
        rc, stdout, stderr = sh(cmd, 360)
        print(stdout, stderr[-3000:], f"fa_configs exit {rc}", sep="\n", flush=True)
        ok = ok and rc == 0
    summarize(out)
    return 0 if ok else 1


def summarize(out: Path) -> None:
    """Print the headline numbers (the reply of the device tool keeps the end of the output)."""
    path = out / "microbench.json"
    if not path.exists():
        return
    tests = json.loads(path.read_text(encoding="utf-8"))["tests"]
    for name, entry in tests.items():
        for case in entry.get("result", {}).get("cases", []):
            keys = ("flop_per_cycle_per_sm", "median_cycles_per_tile_step", "ex2_per_cycle_per_sm", "min",
                    "median", "p99", "bytes_per_cycle_per_sm", "median_round_trip_cycles", "median_cycles")
            shown = {k: case[k] for k in keys if k in case}
            label = case.get("name") or (f"{case.get('barrier')}:{case.get('bytes')}B" if "barrier" in case
                                         else f"paths={case.get('paths')} masked={case.get('masked')}")
            print(f"{name:5s} {label:34s} {shown}", flush=True)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main())
