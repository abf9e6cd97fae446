"""The Gluon kernels of the plain FA forward's tuning grid on an H200 against Triton's JIT of each config.

BLOCK_M 64/128 x BLOCK_N 32/64/128 x 4/8 warps at 2 Triton stages (the grid of ``twill tune
examples/flash_attention_fwd.py --grid BLOCK_M=64,128 --grid BLOCK_N=32,64,128 --num-warps 4,8 --num-stages
2 --backend gluon``), each config solved as that command solves it (``prefetch = num_stages - 1``)::

    python benchmarks/gluon_fa_grid.py generate             # CPU, twill installed: benchmarks/gluon_fa_grid/
    python3 benchmarks/gluon_fa_grid.py time --out $OUT/h200_gluon_fa_grid.json   # GPU, torch + Triton

``time`` checks each kernel against an fp32 reference (two heads, N = 1024 and 4096, output pre-filled with
NaN), then times it and the JIT at B 4, H 32, N 8192, D 128 fp16 (``do_bench`` median, 3 rounds alternating
the order, outputs preallocated).

``--shape B,H,N,D`` (both commands) takes another problem: ``HEAD_DIM`` = D in the generated kernels,
the timing at N, the check at N = 1024 and N; its kernels go to
``benchmarks/gluon_fa_grid_b{B}_h{H}_n{N}_d{D}/`` (the default shape 4,32,8192,128 keeps
``benchmarks/gluon_fa_grid/``). ``generate --only fa_128_32_w8,... --time-limit S`` (re)makes some configs
with a solver time limit, keeping the other entries of ``index.json``; a config the generator refuses is
kept in ``index.json`` with its ``error`` and skipped by ``time``; ``time --only ...`` times some configs.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HERE = ROOT / "benchmarks" / "gluon_fa_grid"
FA = ROOT / "examples" / "flash_attention_fwd.py"
GRID = [(bm, bn, w) for w in (4, 8) for bm in (64, 128) for bn in (32, 64, 128)]
B, H, D = 4, 32, 128
DEFAULT_SHAPE = (B, H, 8192, D)


def parse_shape(text: str) -> tuple[int, int, int, int]:
    """``"B,H,N,D"`` -> four positive ints; ``argparse.ArgumentTypeError`` naming what is wrong."""
    import argparse

    parts = text.split(",")
    if len(parts) != 4 or not all(p.strip().isdigit() and int(p) > 0 for p in parts):
        raise argparse.ArgumentTypeError(f"--shape wants four positive integers B,H,N,D, got {text!r}")
    b, h, n, d = (int(p) for p in parts)
    if n % 128:
        raise argparse.ArgumentTypeError(f"--shape: N = {n} must be a multiple of 128 (the largest tile)")
    return b, h, n, d


def shape_folder(shape: tuple[int, int, int, int] | None) -> Path:
    """Where the kernels of ``shape`` live (the default shape: ``benchmarks/gluon_fa_grid``)."""
    if shape is None or tuple(shape) == DEFAULT_SHAPE:
        return HERE
    b, h, n, d = shape
    return ROOT / "benchmarks" / f"gluon_fa_grid_b{b}_h{h}_n{n}_d{d}"


def generate(shape: tuple[int, int, int, int] | None = None, *, only: set[str] | None = None,
             time_limit: float | None = None) -> None:
    """Solve, generate and compile each config (CPU); ``index.json`` gets the schedules' numbers, written
    after every config (entries of configs not in ``only`` are kept). ``time_limit``: the solver's, per
    phase (None: none; a schedule it leaves unproven says so in its entry)."""
    from twill.codegen.gluon import CodegenError
    from twill.codegen.gluon import generate as gen
    from twill.frontend.compile import compile_to_ttgir, load_kernel, target_for
    from twill.frontend.lower import lower_loop
    from twill.frontend.ttgir import parse_ttgir
    from twill.ir.machine import load_machine
    from twill.search import schedule
    from twill.tune.grid import load_tune_problem

    machine = load_machine("h200")
    here = shape_folder(shape)
    d = (shape or DEFAULT_SHAPE)[3]
    order = [f"fa_{bm}_{bn}_w{w}" for bm, bn, w in GRID]
    path = here / "index.json"
    index = {e["name"]: e for e in json.loads(path.read_text())} if path.is_file() else {}
    for bm, bn, w in GRID:
        name = f"fa_{bm}_{bn}_w{w}"
        if only is not None and name not in only:
            continue
        spec = load_kernel(str(FA))
        problem = load_tune_problem(spec.fn.__globals__.get("TWILL_TUNE"), spec.name, source=spec.source)
        consts = {**spec.constexprs, "BLOCK_M": bm, "BLOCK_N": bn, "HEAD_DIM": d}
        sig = problem.signature(spec.signature, consts)
        cfg = dataclasses.replace(spec, signature={**spec.signature, **sig}, constexprs=consts, num_warps=w,
                                  num_stages=2)
        snaps = compile_to_ttgir(cfg, target=target_for(machine))
        graph = lower_loop(parse_ttgir(snaps.pre_swp), machine, name=cfg.name).graph
        sched = schedule(graph, machine, prefetch=1, time_limit=time_limit)
        entry = {"name": name, "BLOCK_M": bm, "BLOCK_N": bn, "num_warps": w, "num_stages": 2, "ii": sched.ii}
        if time_limit is not None:
            entry["proven_optimal"] = sched.certificate.proven_optimal
        try:
            rep = gen(sched, cfg, machine, here / name).report
        except CodegenError as exc:  # recorded, not timed; the other configs go on
            index[name] = {**entry, "error": f"CodegenError: {exc}"}
            print(name, "CodegenError:", str(exc)[:200], flush=True)
        else:
            for ptx in (here / name).glob("*.ptx"):
                ptx.unlink()
            index[name] = {**entry, "ii_cycles": sched.ii_cycles, "length": sched.length,
                           "stages": sched.stages, "spills": rep.spill_store_bytes + rep.spill_load_bytes,
                           "shared": rep.shared_compiled}
            print(name, sched.ii, rep.shared_compiled, flush=True)
        here.mkdir(parents=True, exist_ok=True)
        rows = [index[n] for n in order if n in index]
        path.write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")


def time_all(out_path: Path, shape: tuple[int, int, int, int] | None = None, *,
             only: set[str] | None = None) -> None:
    """Check and time every generated kernel (those named in ``only``, if given) beside the JIT (GPU)."""
    import torch
    import triton
    from triton.testing import do_bench
    from triton.tools.tensor_descriptor import TensorDescriptor

    def load(path: Path, name: str):
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module

    ldr = load(ROOT / "twill/codegen/gluon/loader.py", "twill_gluon_loader")
    fa = load(FA, "fa_example")
    here = shape_folder(shape)
    B, H, n_time, D = shape or DEFAULT_SHAPE
    index = json.loads((here / "index.json").read_text())
    out = {"env": {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
                   "triton": triton.__version__, "B": B, "H": H, "D": D}, "rows": []}

    def inputs(n: int):
        g = torch.Generator(device="cuda").manual_seed(0)
        return [torch.randn((B, H, n, D), device="cuda", dtype=torch.float16, generator=g) for _ in range(3)]

    def launches(e: dict, q, k, v, o1, o2):
        n, bm, bn = q.shape[2], e["BLOCK_M"], e["BLOCK_N"]
        launcher = ldr.load(here / e["name"])
        blocks = launcher.manifest["descriptors"]
        descs = [TensorDescriptor.from_tensor(t.reshape(B * H * n, D), blocks[name]["block_shape"])
                 for t, name in ((q, "q_desc"), (k, "k_desc"), (v, "v_desc"), (o1, "o_desc"))]
        gluon = launcher.bind((n // bm, B * H), *descs, D ** -0.5, n)
        jit = [TensorDescriptor.from_tensor(t.reshape(B * H * n, D), [rows, D])
               for t, rows in ((q, bm), (k, bn), (v, bn), (o2, bm))]

        def triton_jit():
            return fa.attn_fwd[(n // bm, B * H)](*jit, D ** -0.5, n, BLOCK_M=bm, BLOCK_N=bn, HEAD_DIM=D,
                                                 num_warps=e["num_warps"], num_stages=e["num_stages"])
        return gluon, triton_jit

    for e in index:
        if only is not None and e["name"] not in only:
            continue
        row = dict(e)
        if "error" in e:  # the generator refused this config (index.json says why)
            out["rows"].append(row)
            continue
        try:
            for n in sorted({1024, 4096 if shape is None else n_time}):
                q, k, v = inputs(n)
                o1, o2 = torch.full_like(q, float("nan")), torch.full_like(q, float("nan"))
                gluon, _ = launches(e, q, k, v, o1, o2)
                gluon()
                torch.cuda.synchronize()
                errs = []
                for b, h in ((0, 0), (B - 1, H - 1)):
                    s = (q[b, h].float() @ k[b, h].float().T) * D ** -0.5
                    ref = torch.softmax(s, -1) @ v[b, h].float()
                    errs.append(float((o1[b, h].float() - ref).abs().max() / ref.abs().max()))
                row[f"rel_err_{n}"] = max(errs)
            n = n_time
            q, k, v = inputs(n)
            gluon, jit = launches(e, q, k, v, torch.empty_like(q), torch.empty_like(q))
            gluon()
            jit()
            torch.cuda.synchronize()
            times: dict[str, list[float]] = {"gluon": [], "triton": []}
            for r in range(3):
                order = [("gluon", gluon), ("triton", jit)]
                for name, fn in (order if r % 2 == 0 else order[::-1]):
                    times[name].append(do_bench(fn, warmup=25, rep=100, return_mode="median"))
            flops = 4.0 * B * H * n * n * D
            for name, ts in times.items():
                ms = statistics.median(ts)
                row[f"{name}_ms"], row[f"{name}_tflops"] = ms, flops / ms / 1e9
        except Exception as exc:  # record the failure and go on with the next config
            row["error"] = f"{type(exc).__name__}: {str(exc)[:400]}"
        out["rows"].append(row)
        print(json.dumps(row), flush=True)
    out["env"]["N"] = n_time
    out_path.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    """``generate`` (CPU) or ``time --out FILE`` (GPU)."""
    import argparse

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("generate")
    g.add_argument("--shape", type=parse_shape, default=None, help="B,H,N,D (default 4,32,8192,128)")
    g.add_argument("--only", default=None, help="comma-separated config names (fa_128_32_w8, ...)")
    g.add_argument("--time-limit", type=float, default=None, help="solver seconds per phase (default none)")
    t = sub.add_parser("time")
    t.add_argument("--out", type=Path, required=True)
    t.add_argument("--shape", type=parse_shape, default=None, help="B,H,N,D (default 4,32,8192,128)")
    t.add_argument("--only", default=None, help="comma-separated config names to time (default all)")
    args = p.parse_args(argv)
    if args.cmd == "generate":
        generate(args.shape, only=None if args.only is None else set(args.only.split(",")),
                 time_limit=args.time_limit)
    else:
        time_all(args.out, args.shape, only=None if args.only is None else set(args.only.split(",")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
