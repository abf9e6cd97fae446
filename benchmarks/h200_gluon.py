"""H200 benchmark of the Gluon kernels twill generates, against Triton's JIT, cuDNN and cuBLAS.

Runs on a GPU machine with only torch and Triton (no twill solver): the generated kernels are loaded from
``benchmarks/gluon_kernels/<name>/`` (``kernel.py`` + ``manifest.json``, written by
``twill.codegen.gluon.generate``) through ``twill/codegen/gluon/loader.py``, which imports nothing from twill.

* correctness of every generated kernel against an fp32 reference at N = 128, 256, 1024, 4096, 16384
  (outputs pre-filled with NaN; relative error = max |out - ref| / max |ref| <= 1e-2); each kernel's checks
  run in a subprocess with a timeout, so a hang cannot eat the run;
* timing in this process, median of >= 3 rounds whose competitor order rotates, every competitor timed the
  same way (``triton.testing.do_bench``, median, outputs preallocated, no copy in the timed region):
  the generated kernels (``twill-gluon``), Triton's JIT of the example kernel (``triton``), twill's Triton
  re-entry kernels with ``--applied DIR`` (``twill-triton``), cuDNN through SDPA (``cudnn``), cuBLAS through
  ``torch.matmul(out=)`` (``cublas``);
* decode attention (``decode_attn``, one query row per head): ``DECODE_HEADS`` = 16 x 32 heads (batch 16 of a
  32-head model, D = 128: one program per head, 512 programs, about four per SM on the H200's 132), K/V cache
  ``[N, heads, D]`` fp16 as ``examples/decode_attention.py`` takes it; against Triton's JIT of the example and
  torch SDPA with the backend SDPA picks for one query row (row backend ``cudnn`` when it picks cuDNN, else
  ``sdpa-<backend>``; the choice is in ``env.decode_sdpa_backend``), SDPA given its own contiguous
  ``[B, H, N, D]`` copy made outside the timed region. Decode is memory bound: its rows also carry ``gbps``
  (K and V bytes read + q and out, per second). Its checks add N = 64 (one loop trip: the kernel's short-loop
  body) and N = 1000 (a partial last tile, against the example's own semantics: see ``_decode_ref``).

    python3 benchmarks/h200_gluon.py --quick            # one size, one round (smoke run; includes decode)
    python3 benchmarks/h200_gluon.py --kernels decode_attn --quick   # decode alone

    python3 benchmarks/h200_gluon.py --out $OUT/h200_gluon.json

Writes ``{"env": {...}, "rows": [{"kernel", "backend", "N", "tflops", "rel_err"[, "gbps"]}, ...],
"checks": [...]}``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KERNELS = ROOT / "benchmarks" / "gluon_kernels"
SIZES = (128, 256, 1024, 4096, 16384)
B, H, D = 4, 32, 128
TOL = 1e-2
DECODE_B, DECODE_H = 16, 32
DECODE_HEADS = DECODE_B * DECODE_H
"""Decode attention's heads (one program each): a batch of 16 sequences of a 32-head, D = 128 model."""


def _import(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _loader():
    return _import(ROOT / "twill" / "codegen" / "gluon" / "loader.py", "twill_gluon_loader")


# ------------------------------------------------------------------------------------------- problems
def _fa_inputs(n, seed=0):
    import torch
    g = torch.Generator(device="cuda").manual_seed(seed)
    q, k, v = (torch.randn((B, H, n, D), device="cuda", dtype=torch.float16, generator=g) for _ in range(3))
    return q, k, v


def _fa_ref(q, k, v, scale, heads):
    import torch
    out = []
    for b, h in heads:
        s = (q[b, h].float() @ k[b, h].float().T) * scale
        out.append(torch.softmax(s, dim=-1) @ v[b, h].float())
    return torch.stack(out)


def _heads(n):
    return [(b, h) for b in range(B) for h in range(H)] if n <= 1024 else [(0, 0), (B - 1, H - 1)]


def _fa_launch(fn, q, k, v, o, scale, sub_rows):
    """``fn[grid](descs..., scale, n)`` for a kernel over ``2 * sub_rows`` (or ``sub_rows``) query rows."""
    from triton.tools.tensor_descriptor import TensorDescriptor
    n = q.shape[2]
    flat = [t.reshape(B * H * n, D) for t in (q, k, v, o)]
    blocks = ([sub_rows, D], [128, D], [128, D], [sub_rows, D])
    descs = [TensorDescriptor.from_tensor(t, list(b)) for t, b in zip(flat, blocks, strict=True)]
    grid = (n // 128, B * H)
    if hasattr(fn, "bind"):
        return fn.bind(grid, *descs, scale, n)
    return lambda: fn[grid](*descs, scale, n)


def _gemm_inputs(n, seed=0):
    import torch
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn((n, n), device="cuda", dtype=torch.float16, generator=g)
    b = torch.randn((n, n), device="cuda", dtype=torch.float16, generator=g)   # [N, K]
    return a, b


def _gemm_launch(fn, a, b, c, tile):
    """``fn[grid](a_desc, b_desc, c_desc, K)`` for a ``(BM, BN, BK)`` tile."""
    from triton.tools.tensor_descriptor import TensorDescriptor
    bm, bn, bk = tile
    m, k = a.shape
    descs = (TensorDescriptor.from_tensor(a, [bm, bk]), TensorDescriptor.from_tensor(b, [bn, bk]),
             TensorDescriptor.from_tensor(c, [bm, bn]))
    grid = (m // bm, b.shape[0] // bn)
    if hasattr(fn, "bind"):
        return fn.bind(grid, *descs, k)
    return lambda: fn[grid](*descs, k)


def _decode_inputs(n, seed=0):
    """``q [heads, D]``, ``k, v [N, heads, D]`` (fp16), the layout ``examples/decode_attention.py`` reads."""
    import torch
    g = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn((DECODE_HEADS, D), device="cuda", dtype=torch.float16, generator=g)
    k, v = (torch.randn((n, DECODE_HEADS, D), device="cuda", dtype=torch.float16, generator=g)
            for _ in range(2))
    return q, k, v


def _decode_args(q, k, v, o):
    """The example kernel's arguments in order (all of them, strides included)."""
    n = k.shape[0]
    return (q, k, v, o, D ** -0.5, n, DECODE_HEADS, D, q.stride(0), q.stride(1), *k.stride(), *v.stride(),
            *o.stride())


def _decode_ref(q, k, v, heads, block_n):
    """fp32 decode attention of ``heads``. ``examples/decode_attention.py`` masks its loads only, so the
    zero-filled rows of a partial last tile take part in its softmax with score 0 and value 0: for N not a
    multiple of ``block_n`` the reference pads K and V with zero rows the same way (for N a multiple it is
    attention over the N rows)."""
    import torch
    n = k.shape[0]
    pad = -n % block_n
    out = []
    for h in heads:
        kh, vh = k[:, h].float(), v[:, h].float()
        if pad:
            zeros = torch.zeros((pad, D), device=k.device)
            kh, vh = torch.cat([kh, zeros]), torch.cat([vh, zeros])
        s = (kh @ q[h].float()) * D ** -0.5
        out.append(torch.softmax(s, dim=0) @ vh)
    return torch.stack(out)


def _decode_launch(fn, q, k, v, o):
    args = _decode_args(q, k, v, o)
    grid = (DECODE_HEADS,)
    if hasattr(fn, "bind"):
        return fn.bind(grid, *args)
    return lambda: fn[grid](*args)


def _sdpa_choice(q4, k4, v4, scale):
    """Name of the backend SDPA picks for these inputs (``torch._fused_sdp_choice``)."""
    import torch
    from torch.nn.attention import SDPBackend
    try:
        choice = int(torch._fused_sdp_choice(q4, k4, v4, None, 0.0, False, scale=scale))
        members = (getattr(SDPBackend, n) for n in dir(SDPBackend) if n.isupper())
        names = {int(getattr(b, "value", b)): b.name for b in members}
    except Exception as exc:  # a torch without the private helper: say so
        return f"unknown ({type(exc).__name__})"
    return names.get(choice, str(choice))


PROBLEMS = {
    # kernel dir -> (family, example file, example entry)
    "gemm": ("gemm", "examples/gemm.py", "matmul"),
    "gemm_wide": ("gemm", "examples/gemm.py", "matmul_wide"),
    "gemm_wide_p2": ("gemm", "examples/gemm.py", "matmul_wide"),
    "fa_fwd": ("fa", "examples/flash_attention_fwd.py", "attn_fwd"),
    "fa_fwd_p2": ("fa", "examples/flash_attention_fwd.py", "attn_fwd"),
    "fa_fwd_subtiled": ("fa", "examples/flash_attention_fwd_subtiled.py", "attn_fwd_subtiled_sm90"),
    "fa_fwd_subtiled_p2": ("fa", "examples/flash_attention_fwd_subtiled.py", "attn_fwd_subtiled_sm90"),
    "decode_attn": ("decode", "examples/decode_attention.py", "decode_attn"),
}


def _sub_rows(manifest):
    blocks = manifest["descriptors"]
    first = next(iter(blocks.values()))
    return first["block_shape"][0]


def _tile(manifest):
    """(BM, BN, BK) of a generated GEMM from its descriptor blocks."""
    d = manifest["descriptors"]
    return d["a_desc"]["block_shape"][0], d["b_desc"]["block_shape"][0], d["a_desc"]["block_shape"][1]


def _generated(name):
    folder = KERNELS / name
    launcher = _loader().load(folder)
    return launcher, launcher.manifest


APPLIED = {"dir": None}
"""Folder of ``benchmarks/h200_attention.py prepare`` (``--applied``): twill's Triton re-entry kernels."""


def _applied(name):
    """The applied (Triton re-entry) kernel of the same example and machine, or None."""
    folder = APPLIED["dir"]
    if folder is None or PROBLEMS[name][0] != "fa" or name.endswith("_p2"):
        return None
    label = "subtiled" if "subtiled" in name else "plain"
    index = json.loads((Path(folder) / "index.json").read_text())
    entry = next((e for e in index if e.get("label") == label and e.get("machine") == "h200"
                  and not e.get("note")), None)
    if entry is None:
        return None
    loader = _import(ROOT / "twill" / "apply" / "kernel.py", "twill_apply_kernel")
    return loader.AppliedKernel.load(Path(folder) / entry["folder"])


def _sizes(name, quick, timing):
    """Sizes to check (``timing=False``) or time for one kernel."""
    if PROBLEMS[name][0] == "gemm":
        return (4096,) if quick else ((1024, 4096, 8192) if timing else (128, 256, 1024, 4096, 8192, 16384))
    if PROBLEMS[name][0] == "decode" and not timing:
        # also one loop trip (the short-loop body) and a partial last tile
        return (1024,) if quick else (64, 1000, *SIZES)
    return (1024,) if quick else ((1024, 4096, 16384) if timing else SIZES)


def _check(name, sizes):
    """Correctness of one generated kernel at each size: list of {N, rel_err}."""
    import torch
    family = PROBLEMS[name][0]
    launcher, manifest = _generated(name)
    out = []
    for n in sizes:
        if family == "gemm" and any(n % t for t in _tile(manifest)):
            print(json.dumps({"kernel": name, "N": n, "skipped": "not a multiple of the tile"}), flush=True)
            continue
        if family == "decode":
            q, k, v = _decode_inputs(n)
            o = torch.full_like(q, float("nan"))
            _decode_launch(launcher, q, k, v, o)()
            torch.cuda.synchronize()
            heads = list(range(DECODE_HEADS)) if n <= 4096 else [0, 1, DECODE_HEADS // 2, DECODE_HEADS - 1]
            ref = _decode_ref(q, k, v, heads, manifest["constexprs"]["BLOCK_N"])
            got = o[heads].float()
        elif family == "fa":
            q, k, v = _fa_inputs(n)
            o = torch.full_like(q, float("nan"))
            scale = D ** -0.5
            _fa_launch(launcher, q, k, v, o, scale, _sub_rows(manifest))()
            torch.cuda.synchronize()
            heads = _heads(n)
            ref = _fa_ref(q, k, v, scale, heads)
            got = torch.stack([o[b, h].float() for b, h in heads])
        else:
            a, bm = _gemm_inputs(n)
            c = torch.full((n, n), float("nan"), device="cuda", dtype=torch.float16)
            _gemm_launch(launcher, a, bm, c, _tile(manifest))()
            torch.cuda.synchronize()
            ref = a.float() @ bm.float().T
            got = c.float()
        err = ((got - ref).abs().max() / ref.abs().max()).item()
        out.append({"N": n, "rel_err": err if err == err else float("inf")})
        print(json.dumps({"kernel": name, "N": n, "rel_err": out[-1]["rel_err"]}), flush=True)
    return out


# ------------------------------------------------------------------------------------------- timing
def _flops(family, n):
    if family == "decode":
        return 4.0 * DECODE_HEADS * n * D
    return 4.0 * B * H * n * n * D if family == "fa" else 2.0 * n ** 3


def _bytes(family, n):
    """Bytes a decode call must move (K and V read once, q read, out written), None for the others."""
    return 2.0 * (2 * n * DECODE_HEADS * D + 2 * DECODE_HEADS * D) if family == "decode" else None


SDPA_CHOICE = {}
"""N -> the backend SDPA picked for decode (recorded in env)."""


def _competitors(name, n):
    """backend -> zero-argument launch (outputs preallocated; nothing copied)."""
    import torch
    family, path, entry = PROBLEMS[name]
    example = _import(ROOT / path, f"example_{entry}")
    spec = example.TWILL_KERNELS[entry]
    jit = getattr(example, spec.get("kernel", entry))
    consts = dict(spec["constexprs"])
    out = {}
    launcher, manifest = _generated(name)
    applied = _applied(name)
    if family == "decode":
        q, k, v = _decode_inputs(n)
        o1, o2 = torch.empty_like(q), torch.empty_like(q)
        out["twill-gluon"] = _decode_launch(launcher, q, k, v, o1)

        class _DecodeJit:
            def __getitem__(self, grid):
                return lambda *a: jit[grid](*a, BLOCK_N=consts["BLOCK_N"], BLOCK_D=consts["BLOCK_D"],
                                            num_warps=spec["num_warps"], num_stages=spec["num_stages"])
        out["triton"] = _decode_launch(_DecodeJit(), q, k, v, o2)
        # SDPA's own layout, copied here (outside the timed region): [B, H, 1, D] and [B, H, N, D]
        q4 = q.view(DECODE_B, DECODE_H, 1, D)
        k4, v4 = (t.view(n, DECODE_B, DECODE_H, D).permute(1, 2, 0, 3).contiguous() for t in (k, v))
        scale = D ** -0.5
        choice = _sdpa_choice(q4, k4, v4, scale)
        SDPA_CHOICE[n] = choice
        F = torch.nn.functional
        label = "cudnn" if choice == "CUDNN_ATTENTION" else \
            (f"sdpa-{choice.lower()}" if choice.isidentifier() else "sdpa")
        out[label] = lambda: F.scaled_dot_product_attention(q4, k4, v4, scale=scale)
    elif family == "fa":
        q, k, v = _fa_inputs(n)
        scale = D ** -0.5
        o1, o2 = torch.empty_like(q), torch.empty_like(q)
        out["twill-gluon"] = _fa_launch(launcher, q, k, v, o1, scale, _sub_rows(manifest))
        sub = consts.get("SUB_M", consts.get("BLOCK_M"))

        class _Jit:
            def __getitem__(self, grid):
                return lambda *a: jit[grid](*a, **consts, num_warps=spec["num_warps"],
                                            num_stages=spec["num_stages"])
        out["triton"] = _fa_launch(_Jit(), q, k, v, o2, scale, sub)
        if applied is not None:   # twill's schedule through Triton (benchmarks/h200_attention.py prepare)

            class _Applied:
                def __getitem__(self, grid):
                    return lambda *a: applied[grid](*a, **applied.constexprs)
            o3 = torch.empty_like(q)
            out["twill-triton"] = _fa_launch(_Applied(), q, k, v, o3, scale, sub)
        from torch.nn.attention import SDPBackend, sdpa_kernel
        F = torch.nn.functional

        def cudnn():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return F.scaled_dot_product_attention(q, k, v, scale=scale)
        out["cudnn"] = cudnn
    else:
        a, bm = _gemm_inputs(n)
        c1, c2, c3 = (torch.empty((n, n), device="cuda", dtype=torch.float16) for _ in range(3))
        out["twill-gluon"] = _gemm_launch(launcher, a, bm, c1, _tile(manifest))

        class _Jit:
            def __getitem__(self, grid):
                return lambda *a: jit[grid](*a, **consts, num_warps=spec["num_warps"],
                                            num_stages=spec["num_stages"])
        tile = (consts["BLOCK_M"], consts["BLOCK_N"], consts["BLOCK_K"])
        out["triton"] = _gemm_launch(_Jit(), a, bm, c2, tile)
        bt = bm.T
        out["cublas"] = lambda: torch.matmul(a, bt, out=c3)
    return out


def _time(fns, rounds):
    import statistics

    from triton.testing import do_bench
    names = list(fns)
    for fn in fns.values():   # compile / warm up outside the timed rounds
        fn()
    times = {k: [] for k in names}
    for r in range(rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for k in order:
            times[k].append(do_bench(fns[k], warmup=25, rep=100, return_mode="median"))
    return {k: statistics.median(v) for k, v in times.items()}


# ------------------------------------------------------------------------------------------- main
def _env():
    import torch
    import triton
    return {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
            "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(), "B": B, "H": H, "D": D,
            "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=None, help="JSON path (default $OUT/h200_gluon.json, else "
                                                "benchmarks/results/h200_gluon.json)")
    p.add_argument("--quick", action="store_true", help="one size (1024; 4096 for GEMM), one round")
    p.add_argument("--kernels", default=",".join(PROBLEMS), help="comma-separated kernel dirs")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--applied", default=None, metavar="DIR",
                   help="also time twill's Triton re-entry kernels (backend twill-triton) from DIR, written "
                        "on the CPU by: python benchmarks/h200_attention.py prepare --dir DIR "
                        "--machines h200")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--sizes", default=None, help=argparse.SUPPRESS)
    p.add_argument("--timeout", type=float, default=200.0,
                   help="seconds for the correctness runs (all kernels at once, one process each)")
    args = p.parse_args(argv)
    if args.child:
        _check(args.child, [int(s) for s in args.sizes.split(",")])
        return 0
    start = time.time()
    APPLIED["dir"] = args.applied
    names = [k for k in args.kernels.split(",") if k and (KERNELS / k / "manifest.json").is_file()]
    rounds = 1 if args.quick else max(3, args.rounds)
    if args.out:
        out_path = Path(args.out)
    elif os.environ.get("OUT"):
        out_path = Path(os.environ["OUT"]) / "h200_gluon.json"
    else:
        out_path = ROOT / "benchmarks" / "results" / "h200_gluon.json"
    result = {"env": _env(), "rows": [], "checks": []}
    ok = {}
    children = {}
    for name in names:   # every kernel's checks at once, each in its own process
        sizes = _sizes(name, args.quick, timing=False)
        cmd = [sys.executable, __file__, "--child", name, "--sizes", ",".join(map(str, sizes))]
        children[name] = (subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True),
                          sizes, time.time())
    for name, (proc, sizes, t0) in children.items():
        try:
            stdout, stderr = proc.communicate(timeout=max(1.0, args.timeout - (time.time() - t0)))
            status = "ok" if proc.returncode == 0 else f"exit {proc.returncode}: {stderr[-1500:]}"
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, _ = proc.communicate()
            status = f"TIMEOUT after {args.timeout:.0f} s (hang?)"
        lines = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
        errs = [e for e in lines if "rel_err" in e]
        checked = len(sizes) - sum(1 for e in lines if "skipped" in e)
        good = status == "ok" and len(errs) == checked and all(e["rel_err"] <= TOL for e in errs)
        ok[name] = {e["N"]: e["rel_err"] for e in errs} if status == "ok" else None
        result["checks"].append({"kernel": name, "status": status, "errors": errs, "passed": good,
                                 "wall_s": round(time.time() - t0, 1)})
        print(f"check {name}: {status}; {errs}", flush=True)
    for name in names:
        family = PROBLEMS[name][0]
        for n in _sizes(name, args.quick, timing=True):
            if family == "gemm" and any(n % t for t in _tile(_generated(name)[1])):
                continue
            if time.time() - start > 400:
                print("time budget reached; stopping", flush=True)
                break
            fns = _competitors(name, n)
            if ok.get(name) is None:
                fns.pop("twill-gluon")      # failed or hung in its check: never launched here
            try:
                ms = _time(fns, rounds)
            except Exception as exc:  # a competitor that fails is reported, the run goes on
                print(f"timing {name} N={n} failed: {exc}", flush=True)
                continue
            for backend, t in ms.items():
                err = ok.get(name, {}).get(n) if backend == "twill-gluon" and ok.get(name) else None
                row = {"kernel": name, "backend": backend, "N": n,
                       "tflops": round(_flops(family, n) / (t * 1e-3) / 1e12, 1), "rel_err": err}
                moved = _bytes(family, n)
                if moved is not None:
                    row["gbps"] = round(moved / (t * 1e-3) / 1e9, 1)
                result["rows"].append(row)
                tf = row["tflops"]
                extra = f" {row['gbps']:7.1f} GB/s" if "gbps" in row else ""
                print(f"{name:16s} {backend:12s} N={n:6d} {tf:7.1f} TFLOP/s{extra}", flush=True)
    if SDPA_CHOICE:
        result["env"]["decode_sdpa_backend"] = {str(n): c for n, c in SDPA_CHOICE.items()}
        result["env"]["decode_heads"] = {"B": DECODE_B, "H": DECODE_H, "D": D}
    result["wall_s"] = round(time.time() - start, 1)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(result, indent=2))
    print(f"wrote {out_path} ({result['wall_s']} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
