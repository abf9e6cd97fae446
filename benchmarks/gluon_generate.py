"""Regenerate the Gluon kernels that ``benchmarks/h200_gluon.py`` times (CPU only; needs twill's solver).

    python benchmarks/gluon_generate.py                      # writes benchmarks/gluon_kernels/<name>/
    python benchmarks/gluon_generate.py --only decode_attn   # one of them

Each folder gets the generated ``kernel.py``, ``manifest.json``, ``report.json`` and ``schedule.json``
(the compiled PTX is left out: it is large and rebuilt on the GPU machine by Triton's JIT).
"""

from __future__ import annotations

import argparse
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGETS = {
    # folder: (kernel, schedule options)
    "gemm": ("examples/gemm.py", {}),
    "gemm_wide": ("examples/gemm.py::matmul_wide", {}),
    "gemm_wide_p2": ("examples/gemm.py::matmul_wide", {"prefetch": 2}),
    "fa_fwd": ("examples/flash_attention_fwd.py", {}),
    "fa_fwd_p2": ("examples/flash_attention_fwd.py", {"prefetch": 2}),
    "fa_fwd_subtiled": ("examples/flash_attention_fwd_subtiled.py::attn_fwd_subtiled_sm90", {}),
    "fa_fwd_subtiled_p2": ("examples/flash_attention_fwd_subtiled.py::attn_fwd_subtiled_sm90",
                           {"prefetch": 2}),
    # pointer loads on a producer group, staged in shared memory for the consumer group
    "decode_attn": ("examples/decode_attention.py", {}),
}
"""Each kernel with twill's default schedule and with the schedule solved for ``prefetch=2`` (streaming loads
two iterations ahead: one more buffer per ring)."""


def main(argv: list[str] | None = None) -> int:
    """Solve each target for the machine, generate and compile its kernel, print the reports."""
    from twill.codegen.gluon import generate
    from twill.frontend.lower import graph_from_kernel
    from twill.search import schedule

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--machine", default="h200")
    p.add_argument("--only", default=",".join(TARGETS))
    args = p.parse_args(argv)
    for name in args.only.split(","):
        spec, options = TARGETS[name]
        sched = schedule(graph_from_kernel(str(ROOT / spec), args.machine), args.machine, **options)
        folder = ROOT / "benchmarks" / "gluon_kernels" / name
        kernel = generate(sched, str(ROOT / spec), args.machine, folder)
        for ptx in folder.glob("*.ptx"):
            ptx.unlink()
        print(f"== {name}\n{kernel.report.render()}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
