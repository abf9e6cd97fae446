"""Two H200 measurements behind the rank-correlation study (``rank_correlation.py``), in one device call.

1. **Serialized wgmma** (``calib wgmma_serial``, ``microbench.cu``): a warp group that waits for every single
   ``wgmma.mma_async`` before issuing the next (``wgmma.commit_group`` + ``wgmma.wait_group 0`` after each
   instruction). This is the code ptxas emits when a kernel has too few registers for the wgmma pipeline
   (warning C7511: one ``WARPGROUP.DEPBAR.LE gsb0, 0x0`` after every ``HGMMA`` in the SASS of the Triton
   FA forward at BLOCK_N 128 / 4 warps), so it prices the register spill of those configurations.
2. **Occupancy of the Triton FA forward configs**: ``cuOccupancyMaxActiveBlocksPerMultiprocessor`` of each
   compiled kernel of ``fa_configs.py`` (BLOCK_N 64/128, num_stages 2/3, num_warps 4/8) at its launch
   size and dynamic shared memory: how many CTAs the driver keeps on one SM at once.

Run on the lent H200::

    python3 benchmarks/calibrate/run_rank_extras.py --out "$OUT"

Writes ``wgmma_serial.json`` and ``fa_occupancy.json`` (copied into ``results/`` afterwards) and prints
the headline numbers.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib.util
import itertools
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def _load(name: str, path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def serial_wgmma(out: Path) -> bool:
    """Build ``microbench.cu`` and run its ``wgmma_serial`` test; returns True when it produced results."""
    calib = _load("twill_run_calibration", HERE / "run_calibration.py")
    env = calib.environment()
    binary = calib.build(out)
    entry: dict[str, Any] = {"env": env, "binary": str(binary) if binary else None}
    ok = False
    if binary is not None:
        t0 = time.perf_counter()
        rc, stdout, stderr = calib.sh([str(binary), "wgmma_serial"], 120)
        entry.update({"exit": rc, "seconds": round(time.perf_counter() - t0, 2), "stderr": stderr[-2000:]})
        try:
            entry["result"] = json.loads(stdout)
            ok = rc == 0
        except json.JSONDecodeError:
            entry["stdout"] = stdout[-4000:]
    (out / "wgmma_serial.json").write_text(json.dumps(entry, indent=1), encoding="utf-8")
    for case in entry.get("result", {}).get("cases", []):
        per = case["median_cycles_per_tile_step"] / (8 * case["acc_per_wg"])
        print(f"{case['name']:30s} {case['median_cycles_per_tile_step']:9.1f} cycles per tile step, "
              f"{per:6.1f} per wgmma instruction of each warp group", flush=True)
    return ok


def occupancy(out: Path) -> bool:
    """Compile each FA config, ask the driver how many of its CTAs fit on one SM; True on success."""
    import torch
    import triton
    from triton.tools.tensor_descriptor import TensorDescriptor

    fa = _load("twill_fa_configs", HERE / "fa_configs.py")
    mod = fa._load_example()
    cuda = ctypes.CDLL("libcuda.so.1")
    seq, dim, block_m = fa.SEQ, fa.DIM, 128
    props = torch.cuda.get_device_properties(0)
    rows: list[dict[str, Any]] = []
    for block_n, stages, warps in itertools.product((64, 128), (2, 3), (4, 8)):
        flat = [torch.randn(seq, dim, device="cuda", dtype=torch.float16) for _ in range(4)]
        descs = [TensorDescriptor.from_tensor(flat[0], [block_m, dim]),
                 TensorDescriptor.from_tensor(flat[1], [block_n, dim]),
                 TensorDescriptor.from_tensor(flat[2], [block_n, dim]),
                 TensorDescriptor.from_tensor(flat[3], [block_m, dim])]
        compiled = mod.attn_fwd[(seq // block_m, 1)](*descs, dim ** -0.5, seq, BLOCK_M=block_m,
                                                     BLOCK_N=block_n, HEAD_DIM=dim, num_warps=warps,
                                                     num_stages=stages)
        torch.cuda.synchronize()
        shared = int(compiled.metadata.shared)
        blocks = ctypes.c_int(0)
        rc = cuda.cuOccupancyMaxActiveBlocksPerMultiprocessor(
            ctypes.byref(blocks), ctypes.c_void_p(int(compiled.function)), ctypes.c_int(32 * warps),
            ctypes.c_size_t(shared))
        rows.append({"BLOCK_N": block_n, "num_stages": stages, "num_warps": warps, "threads": 32 * warps,
                     "n_regs": int(compiled.n_regs), "n_spills": int(compiled.n_spills),
                     "shared_bytes": shared,
                     "cu_result": int(rc), "ctas_per_sm": int(blocks.value)})
        print(f"BN={block_n:3d} s={stages} w={warps}: regs {compiled.n_regs} smem {shared} -> "
              f"{blocks.value} CTA(s)/SM (cu rc {rc})", flush=True)
    data = {"what": "cuOccupancyMaxActiveBlocksPerMultiprocessor of the Triton FA forward configs "
                    "(examples/flash_attention_fwd.py::attn_fwd), block = 32 x num_warps threads, dynamic "
                    "shared memory = the kernel's metadata.shared",
            "device": props.name, "sms": props.multi_processor_count, "torch": torch.__version__,
            "triton": triton.__version__, "configs": rows}
    (out / "fa_occupancy.json").write_text(json.dumps(data, indent=1), encoding="utf-8")
    return all(r["cu_result"] == 0 for r in rows)


def main(argv: list[str] | None = None) -> int:
    """Run both steps; returns 0 if both produced results."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the JSON results")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    ok = serial_wgmma(args.out)
    try:
        ok = occupancy(args.out) and ok
    except Exception as exc:  # report and keep the wgmma result
        print(f"occupancy step failed: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main())
