"""Time the tuning grids of issue 25 on a GPU: Triton FA forward (48 configs) and GEMM (24 configs).

Needs only Python 3.10+, torch and Triton 3.6 (nothing from twill): the kernels are loaded from
``examples/flash_attention_fwd.py`` (``attn_fwd``) and ``examples/gemm.py`` (``matmul``), which import
only Triton.

Grids:

* **FA forward**, batch 4, 32 heads, sequence N = 8192, head dim 128, fp16, non-causal (FLOPs 4 B H N^2 D):
  BLOCK_M 64/128 x BLOCK_N 32/64/128 x num_warps 4/8 x num_stages 1/2/3/4 = 48 configs;
* **GEMM** ``C = A B^T``, M = N = K = 8192, fp16 in, fp32 accumulate (FLOPs 2 M N K): (BLOCK_M, BLOCK_N,
  BLOCK_K) in (128, 128, 64), (128, 256, 64), (64, 128, 64), (128, 128, 128) x num_warps 4/8 x
  num_stages 2/3/4 = 24 configs.

How each config is handled (the same way for all):

1. **Compile in parallel**: one subprocess per config (``--compile-one``), ``--jobs`` at a time, each with
   a ``--compile-timeout`` (seconds). It fills Triton's on-disk cache (``kernel.warmup``) and reports the
   compile error, if any; a config whose compile fails or times out is recorded with that error and not
   launched.
2. **Launch and check** in this process (the kernel comes from the disk cache): registers, spills and
   shared memory of the compiled kernel; the output against a reference (torch SDPA / ``torch.matmul``,
   computed once per grid), relative Frobenius error. A launch error (e.g. out of shared memory) is
   recorded with its message.
3. **Time** with ``triton.testing.do_bench(launch, warmup=25, rep=100, quantiles=[0.5, 0.2, 0.8])``: the
   median (``median_ms``) and the 20th/80th percentiles, L2 cleared between runs by do_bench; only the
   kernel launch is in the timed region (inputs, descriptors and outputs are made before). A config is
   guarded by ``--config-timeout`` seconds (SIGALRM).

The whole run stops starting new configs after ``--budget`` seconds (default 390 s, so the run ends in
under 7 minutes); configs not reached are recorded as skipped. The JSON is rewritten after every config,
so a killed run keeps what was measured. Run from the repository root::

    python3 benchmarks/calibrate/tune_grid.py --out tune_grid.json
    python3 benchmarks/calibrate/tune_grid.py --out quick.json --quick      # 2 configs per grid, smoke test

Another problem with the same grids (a held-out grid: the model is scored on timings it was not fitted to)::

    python3 benchmarks/calibrate/tune_grid.py --out heldout.json --fa-shape 4,32,4096,64 \\
        --gemm-shape 4096,4096,4096 \\
        --gemm-tiles 128x128x64,128x256x64,64x128x64,128x128x128,256x128x64,64x256x64
"""

from __future__ import annotations

import argparse
import concurrent.futures
import importlib.util
import itertools
import json
import os
import platform
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
FA_FILE = ROOT / "examples" / "flash_attention_fwd.py"
GEMM_FILE = ROOT / "examples" / "gemm.py"
FA_SHAPE = {"batch": 4, "heads": 32, "seq": 8192, "head_dim": 128}
GEMM_SHAPE = {"M": 8192, "N": 8192, "K": 8192}
GEMM_TILES = ((128, 128, 64), (128, 256, 64), (64, 128, 64), (128, 128, 128))
_SHAPES_ENV = "TWILL_TUNE_GRID_SHAPES"
"""Environment variable through which ``main`` hands ``--fa-shape`` / ``--gemm-shape`` / ``--gemm-tiles`` to
the compile subprocesses (JSON ``{"fa": {...}, "gemm": {...}, "tiles": [[bm, bn, bk], ...]}``)."""
if os.environ.get(_SHAPES_ENV):
    _given = json.loads(os.environ[_SHAPES_ENV])
    FA_SHAPE.update(_given["fa"])
    GEMM_SHAPE.update(_given["gemm"])
    GEMM_TILES = tuple(tuple(t) for t in _given["tiles"])
BENCH = {"warmup": 25, "rep": 100, "quantiles": [0.5, 0.2, 0.8]}


# ---------------------------------------------------------------------------------------------- grids
def fa_grid() -> list[dict[str, Any]]:
    """The 48 FA forward configs: constexprs, num_warps, num_stages."""
    d = FA_SHAPE["head_dim"]
    return [{"family": "fa_fwd", "constexprs": {"BLOCK_M": bm, "BLOCK_N": bn, "HEAD_DIM": d},
             "num_warps": w, "num_stages": s}
            for bm, bn, w, s in itertools.product((64, 128), (32, 64, 128), (4, 8), (1, 2, 3, 4))]


def gemm_grid() -> list[dict[str, Any]]:
    """The 24 GEMM configs."""
    return [{"family": "gemm", "constexprs": {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk},
             "num_warps": w, "num_stages": s}
            for (bm, bn, bk), w, s in itertools.product(GEMM_TILES, (4, 8), (2, 3, 4))]


def config_id(cfg: dict[str, Any]) -> str:
    """``fa_fwd:BLOCK_M=128,BLOCK_N=64,HEAD_DIM=128:w8:s3``."""
    ce = ",".join(f"{k}={v}" for k, v in cfg["constexprs"].items())
    return f"{cfg['family']}:{ce}:w{cfg['num_warps']}:s{cfg['num_stages']}"


# ---------------------------------------------------------------------------------------------- kernels
def _load(path: Path, name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Problem:
    """Inputs, descriptors and reference of one family; ``launcher(cfg)`` gives a no-argument launch."""

    def __init__(self, family: str, torch: Any, *, reference: bool = True) -> None:
        from triton.tools.tensor_descriptor import TensorDescriptor

        self.family, self.torch, self.desc = family, torch, TensorDescriptor
        torch.manual_seed(0)
        if family == "fa_fwd":
            self.module = _load(FA_FILE, "tune_grid_fa")
            b, h, n, d = (FA_SHAPE[k] for k in ("batch", "heads", "seq", "head_dim"))
            shape = (b, h, n, d)
            self.q, self.k, self.v = (torch.randn(shape, device="cuda", dtype=torch.float16)
                                      for _ in range(3))
            self.out = torch.empty_like(self.q)
            self.flat = [t.reshape(b * h * n, d) for t in (self.q, self.k, self.v, self.out)]
            self.scale = d ** -0.5
            self.flops = 4.0 * b * h * n * n * d
            sdpa = torch.nn.functional.scaled_dot_product_attention
            self.want = sdpa(self.q, self.k, self.v, scale=self.scale).float() if reference else None
        else:
            self.module = _load(GEMM_FILE, "tune_grid_gemm")
            m, n, k = (GEMM_SHAPE[x] for x in ("M", "N", "K"))
            self.a = torch.randn((m, k), device="cuda", dtype=torch.float16)
            self.b = torch.randn((n, k), device="cuda", dtype=torch.float16)
            self.out = torch.empty((m, n), device="cuda", dtype=torch.float16)
            self.flops = 2.0 * m * n * k
            self.want = torch.matmul(self.a, self.b.t()).float() if reference else None

    def launcher(self, cfg: dict[str, Any], *, warmup: bool = False) -> Any:
        """A function that launches ``cfg`` once (with ``warmup`` it only compiles)."""
        ce, w, s = cfg["constexprs"], cfg["num_warps"], cfg["num_stages"]
        if self.family == "fa_fwd":
            bm, bn, d = ce["BLOCK_M"], ce["BLOCK_N"], ce["HEAD_DIM"]
            descs = [self.desc.from_tensor(t, [rows, d])
                     for t, rows in zip(self.flat, (bm, bn, bn, bm), strict=True)]
            n = FA_SHAPE["seq"]
            grid = (n // bm, FA_SHAPE["batch"] * FA_SHAPE["heads"])
            kernel, args = self.module.attn_fwd, (*descs, self.scale, n)
        else:
            bm, bn, bk = ce["BLOCK_M"], ce["BLOCK_N"], ce["BLOCK_K"]
            descs = [self.desc.from_tensor(self.a, [bm, bk]), self.desc.from_tensor(self.b, [bn, bk]),
                     self.desc.from_tensor(self.out, [bm, bn])]
            grid = (GEMM_SHAPE["M"] // bm, GEMM_SHAPE["N"] // bn)
            kernel, args = self.module.matmul, (*descs, GEMM_SHAPE["K"])
        if warmup:
            return lambda: kernel.warmup(*args, grid=grid, **ce, num_warps=w, num_stages=s)
        return lambda: kernel[grid](*args, **ce, num_warps=w, num_stages=s)

    def error(self) -> float:
        """Relative Frobenius error of the last output against the reference."""
        got = self.out.float()
        return float((got - self.want).norm() / self.want.norm())


# ---------------------------------------------------------------------------------------------- compile
def compile_one(cfg: dict[str, Any]) -> int:
    """Subprocess body: compile ``cfg`` into Triton's disk cache; prints one JSON line; exit code 0/1."""
    import torch

    t0 = time.perf_counter()
    try:
        problem = Problem(cfg["family"], torch, reference=False)
        problem.launcher(cfg, warmup=True)()
        print(json.dumps({"ok": True, "seconds": round(time.perf_counter() - t0, 2)}), flush=True)
        return 0
    except Exception as exc:  # report every compile error to the parent
        print(json.dumps({"ok": False, "error": f"{type(exc).__name__}: {str(exc).strip()[:1500]}",
                          "seconds": round(time.perf_counter() - t0, 2)}), flush=True)
        return 1


def compile_all(configs: list[dict[str, Any]], jobs: int, timeout: float) -> dict[str, dict[str, Any]]:
    """Compile every config in ``jobs`` parallel subprocesses; config id -> ``{"ok", "error", "seconds"}``."""

    def one(cfg: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        cmd = [sys.executable, str(Path(__file__).resolve()), "--compile-one", json.dumps(cfg)]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            return config_id(cfg), {"ok": False, "error": f"compile timed out after {timeout:.0f} s"}
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
        if lines:
            return config_id(cfg), json.loads(lines[-1])
        return config_id(cfg), {"ok": False, "error": f"compile subprocess exited {proc.returncode}: "
                                                      f"{proc.stderr.strip()[-1500:]}"}

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return dict(pool.map(one, configs))


# ---------------------------------------------------------------------------------------------- timing
class ConfigTimeout(Exception):
    """A config ran past ``--config-timeout``."""


def _alarm(signum: int, frame: Any) -> None:
    raise ConfigTimeout("config timed out")


def measure(problem: Problem, cfg: dict[str, Any], triton: Any, timeout: int) -> dict[str, Any]:
    """Launch, check and time one config; a JSON-ready record (``error`` set when it failed)."""
    torch = problem.torch
    rec: dict[str, Any] = {}
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(timeout)
    try:
        launch = problem.launcher(cfg)
        problem.out.fill_(float("nan"))
        t0 = time.perf_counter()
        compiled = launch()
        torch.cuda.synchronize()
        rec["first_launch_s"] = round(time.perf_counter() - t0, 3)
        rec["n_regs"] = int(getattr(compiled, "n_regs", -1))
        rec["n_spills"] = int(getattr(compiled, "n_spills", -1))
        rec["shared_bytes"] = int(getattr(compiled.metadata, "shared", -1))
        rec["rel_err"] = problem.error()
        med, lo, hi = triton.testing.do_bench(launch, warmup=BENCH["warmup"], rep=BENCH["rep"],
                                              quantiles=BENCH["quantiles"])
        rec.update(median_ms=med, p20_ms=lo, p80_ms=hi, tflops=problem.flops / (med * 1e-3) / 1e12)
    except Exception as exc:  # record the failure and go on
        rec["error"] = f"{type(exc).__name__}: {str(exc).strip()[:1500]}"
        try:
            torch.cuda.synchronize()
        except Exception as sync_exc:  # a broken context: say so, later configs will fail too
            rec["error"] += f"; then synchronize failed: {type(sync_exc).__name__}: {str(sync_exc)[:300]}"
    finally:
        signal.alarm(0)
    return rec


def nvidia_smi() -> dict[str, Any]:
    """Name, clocks, power, temperature and driver from nvidia-smi (``{"error": ...}`` if it does not run)."""
    fields = "name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.draw,temperature.gpu,pstate"
    try:
        proc = subprocess.run(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}
    if proc.returncode != 0:
        return {"error": proc.stderr.strip()[:500]}
    first = proc.stdout.strip().splitlines()[0]
    return dict(zip(fields.split(","), (x.strip() for x in first.split(",")), strict=False))


def main(argv: list[str] | None = None) -> int:
    """Compile, check and time the grids; write ``--out``; returns a process exit code."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="JSON file to write (rewritten after every config)")
    parser.add_argument("--only", choices=("fa_fwd", "gemm"), help="one grid only")
    parser.add_argument("--quick", action="store_true", help="2 configs per grid (smoke test)")
    parser.add_argument("--jobs", type=int, default=min(16, os.cpu_count() or 1),
                        help="parallel compile subprocesses (default min(16, cores))")
    parser.add_argument("--compile-timeout", type=float, default=240.0, help="seconds per compile")
    parser.add_argument("--config-timeout", type=int, default=60, help="seconds per config launch + timing")
    parser.add_argument("--budget", type=float, default=390.0,
                        help="start no new config after this many seconds (default 390)")
    parser.add_argument("--fa-shape", metavar="B,H,N,D",
                        help="FA problem: batch, heads, sequence length, head dim (default 4,32,8192,128)")
    parser.add_argument("--gemm-shape", metavar="M,N,K", help="GEMM problem (default 8192,8192,8192)")
    parser.add_argument("--gemm-tiles", metavar="BMxBNxBK,...",
                        help="GEMM tiles (default 128x128x64,128x256x64,64x128x64,128x128x128)")
    parser.add_argument("--compile-one", metavar="JSON", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    global GEMM_TILES
    try:
        if args.fa_shape:
            b, h, n, d = (int(x) for x in args.fa_shape.split(","))
            FA_SHAPE.update(batch=b, heads=h, seq=n, head_dim=d)
        if args.gemm_shape:
            m, n, k = (int(x) for x in args.gemm_shape.split(","))
            GEMM_SHAPE.update(M=m, N=n, K=k)
        if args.gemm_tiles:
            GEMM_TILES = tuple(tuple(int(x) for x in t.split("x")) for t in args.gemm_tiles.split(","))
            if any(len(t) != 3 for t in GEMM_TILES):
                raise ValueError("each tile is BMxBNxBK")
    except ValueError as exc:
        parser.error(f"bad shape option: {exc}")
    os.environ[_SHAPES_ENV] = json.dumps({"fa": FA_SHAPE, "gemm": GEMM_SHAPE, "tiles": GEMM_TILES})
    if args.compile_one:
        return compile_one(json.loads(args.compile_one))
    if args.out is None:
        parser.error("--out is required")
    start = time.perf_counter()
    import torch
    import triton
    import triton.testing

    if not torch.cuda.is_available():
        print("no CUDA device", file=sys.stderr)
        return 2
    grids = {"fa_fwd": fa_grid(), "gemm": gemm_grid()}
    if args.only:
        grids = {args.only: grids[args.only]}
    if args.quick:
        grids = {k: v[:2] for k, v in grids.items()}
    configs = [c for grid in grids.values() for c in grid]
    result: dict[str, Any] = {
        "what": "issue 25 tuning grids: Triton FA forward and GEMM on one GPU, every config timed alike",
        "env": {"gpu": torch.cuda.get_device_name(0), "nvidia_smi_before": nvidia_smi(),
                "torch": torch.__version__, "triton": triton.__version__, "cuda": torch.version.cuda,
                "python": platform.python_version(), "host": platform.node()},
        "problems": {"fa_fwd": {**FA_SHAPE, "dtype": "fp16", "causal": False, "flops": "4*B*H*N^2*D",
                                "kernel": "examples/flash_attention_fwd.py::attn_fwd"},
                     "gemm": {**GEMM_SHAPE, "dtype": "fp16", "flops": "2*M*N*K",
                              "kernel": "examples/gemm.py::matmul (C = A B^T, B stored [N, K])"}},
        "timing": f"triton.testing.do_bench(launch, warmup={BENCH['warmup']} ms, rep={BENCH['rep']} ms, "
                  "quantiles=[0.5, 0.2, 0.8]); median_ms is the median; one measurement per config",
        "configs": []}

    def write() -> None:
        result["wall_s"] = round(time.perf_counter() - start, 1)
        args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")

    print(f"compiling {len(configs)} configs in {args.jobs} subprocesses ...", flush=True)
    t0 = time.perf_counter()
    compiled = compile_all(configs, args.jobs, args.compile_timeout)
    result["compile_wall_s"] = round(time.perf_counter() - t0, 1)
    print(f"compiled in {result['compile_wall_s']} s; "
          f"{sum(not c['ok'] for c in compiled.values())} failed", flush=True)
    write()
    for family, grid in grids.items():
        problem = Problem(family, torch)
        for cfg in grid:
            cid = config_id(cfg)
            rec: dict[str, Any] = {"id": cid, **cfg, "compile": compiled[cid]}
            if not compiled[cid]["ok"]:
                rec["error"] = f"compile: {compiled[cid]['error']}"
            elif time.perf_counter() - start > args.budget:
                rec["error"] = f"skipped: the run's budget of {args.budget:.0f} s was spent"
            else:
                rec.update(measure(problem, cfg, triton, args.config_timeout))
            result["configs"].append(rec)
            write()
            if "error" in rec:
                print(f"{cid}: {rec['error'][:200]}", flush=True)
            else:
                print(f"{cid}: {rec['median_ms']:.4f} ms {rec['tflops']:6.1f} TFLOP/s regs={rec['n_regs']} "
                      f"spills={rec['n_spills']} smem={rec['shared_bytes']} err={rec['rel_err']:.1e}",
                      flush=True)
        del problem
        torch.cuda.empty_cache()
    result["env"]["nvidia_smi_after"] = nvidia_smi()
    write()
    print(f"wrote {args.out} ({result['wall_s']} s)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
