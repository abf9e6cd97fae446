"""Build and run ``latency.cu`` on a Hopper GPU: the dependent-chain latency of each SASS instruction class
the generated Gluon FA kernels issue per loop trip (``twill.tune.sass_trip`` prices them).

    PYTHONUNBUFFERED=1 python3 benchmarks/calibrate/run_latency.py --out "$OUT"

Writes ``$OUT/latency.json`` (the binary's JSON, the GPU and clocks as found, the build log) and prints
it. One failed step leaves the others' output; the result is copied into
``benchmarks/calibrate/results/latency.json`` of the repository afterwards, and ``machines/h200.toml``
cites it.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def sh(cmd: list[str], timeout: float) -> tuple[int, str, str]:
    """Run ``cmd``; (exit code, stdout, stderr); 124 on time-out, 127 if not found."""
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return 124, "", f"timed out after {timeout} s"
    except FileNotFoundError as exc:
        return 127, "", str(exc)
    return p.returncode, p.stdout, p.stderr


def main() -> int:
    """Build, run twice (the second run is the one kept; both are recorded), write the JSON."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    res: dict = {"time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    fields = "name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu"
    rc, out, err = sh(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader"], 30)
    res["nvidia_smi"] = out.strip() if rc == 0 else err.strip()
    binary = args.out / "latency"
    rc, out, err = sh(["nvcc", "-O3", "-std=c++17", "-gencode", "arch=compute_90a,code=sm_90a", "-o",
                       str(binary), str(HERE / "latency.cu")], 300)
    res["build"] = {"rc": rc, "log": (out + err)[-2000:]}
    if rc == 0:
        runs = []
        for _ in range(2):
            rc, out, err = sh([str(binary)], 120)
            try:
                runs.append(json.loads(out))
            except json.JSONDecodeError:
                runs.append({"rc": rc, "stdout": out[-2000:], "stderr": err[-2000:]})
        res["runs"] = runs
        res["cycles_per_op"] = runs[-1].get("cycles_per_op")
        binary.unlink(missing_ok=True)
    (args.out / "latency.json").write_text(json.dumps(res, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
