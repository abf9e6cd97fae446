"""Which warp group is ``gl.warp_specialize``'s default partition: the sub-tiled FA forward's kernel with each
choice, timed in one process on an H200 (rotated rounds), against the measured record and cuDNN.

On the CPU (twill installed) write the variants::

    python benchmarks/gluon_variants.py generate          # benchmarks/gluon_variants/fa_sub_def<g>/

On the GPU machine (torch + Triton only)::

    python3 benchmarks/gluon_variants.py time --out $OUT/gluon_variants.json fa_sub_def0 fa_sub_def1 ...

Each kernel's output is checked against an fp32 reference (one head) before timing; timing is
``triton.testing.do_bench`` median per round, 5 rounds whose order rotates, the median reported. Folders are
looked up under ``benchmarks/gluon_variants/`` and then ``benchmarks/gluon_kernels/``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HERE = ROOT / "benchmarks" / "gluon_variants"
EXAMPLE = "examples/flash_attention_fwd_subtiled.py::attn_fwd_subtiled_sm90"


B, H, D = 4, 32, 128
"""The problem of ``benchmarks/h200_gluon.py``: batch, heads, head dim (fp16, non-causal)."""


def _gluon_loader():
    path = ROOT / "twill" / "codegen" / "gluon" / "loader.py"
    spec = importlib.util.spec_from_file_location("twill_gluon_loader", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["twill_gluon_loader"] = module
    spec.loader.exec_module(module)
    return module


def _launch(launcher, q, k, v, o, scale):
    """``launcher[grid](descs..., scale, n)`` with the query block of the kernel's manifest."""
    from triton.tools.tensor_descriptor import TensorDescriptor
    n = q.shape[2]
    rows = next(iter(launcher.manifest["descriptors"].values()))["block_shape"][0]
    flat = [t.reshape(B * H * n, D) for t in (q, k, v, o)]
    blocks = ([rows, D], [128, D], [128, D], [rows, D])
    descs = [TensorDescriptor.from_tensor(t, b) for t, b in zip(flat, blocks, strict=True)]
    return launcher.bind((n // 128, B * H), *descs, scale, n)


def generate() -> None:
    """One kernel per warp group as the default partition (CPU)."""
    from twill.codegen.gluon import generate as gen
    from twill.frontend.lower import graph_from_kernel
    from twill.search import schedule

    sched = schedule(graph_from_kernel(EXAMPLE, machine="h200"), "h200")
    for g in sorted(w.index for w in sched.warp_groups):
        kernel = gen(sched, EXAMPLE, "h200", HERE / f"fa_sub_def{g}", default_group=g)
        for ptx in (HERE / f"fa_sub_def{g}").glob("*.ptx"):
            ptx.unlink()
        print(kernel.report.render().splitlines()[1:4])


def _folder(name: str) -> Path:
    return HERE / name if (HERE / name).is_dir() else ROOT / "benchmarks" / "gluon_kernels" / name


def time_all(names: list[str], out: Path) -> None:
    """Check and time each folder's kernel at N = 4096 and 16384 beside cuDNN (GPU)."""
    import torch
    import triton
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from triton.testing import do_bench

    loader = _gluon_loader()
    result = {"env": {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
                      "triton": triton.__version__, "B": B, "H": H, "D": D}, "rows": []}
    for n in (4096, 16384):
        gen = torch.Generator(device="cuda").manual_seed(0)
        q, k, v = (torch.randn((B, H, n, D), device="cuda", dtype=torch.float16, generator=gen)
                   for _ in range(3))
        scale = D ** -0.5
        ref = torch.softmax((q[0, 0].float() @ k[0, 0].float().T) * scale, dim=-1) @ v[0, 0].float()
        flops = 4.0 * B * H * n * n * D
        fns = {}
        for name in names:
            launcher = loader.load(_folder(name))
            o = torch.full_like(q, float("nan"))
            fns[name] = _launch(launcher, q, k, v, o, scale)
            fns[name]()
            torch.cuda.synchronize()
            err = float((o[0, 0].float() - ref).abs().max() / ref.abs().max())
            result["rows"].append({"kernel": name, "N": n, "rel_err": err})

        def cudnn(q=q, k=k, v=v, scale=scale):
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=scale)
        fns["cudnn"] = cudnn
        cudnn()
        keys = list(fns)
        times: dict[str, list[float]] = {x: [] for x in keys}
        for r in range(5):
            for x in keys[r % len(keys):] + keys[:r % len(keys)]:
                times[x].append(do_bench(fns[x], warmup=25, rep=100, return_mode="median"))
        for x in keys:
            ms = statistics.median(times[x])
            row = {"kernel": x, "N": n, "ms": ms, "tflops": flops / ms / 1e9, "rounds_ms": times[x]}
            result["rows"].append(row)
            print(f"{x:16s} N={n:6d} {row['tflops']:7.1f} TFLOP/s", flush=True)
    out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    """``generate`` (CPU) or ``time`` (GPU)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("generate")
    t = sub.add_parser("time")
    t.add_argument("--out", type=Path, required=True)
    t.add_argument("names", nargs="+")
    args = p.parse_args(argv)
    if args.cmd == "generate":
        generate()
    else:
        time_all(args.names, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
