"""``twill regs``: registers, spills and shared memory per ``num_warps`` from ptxas, on the CPU."""

from __future__ import annotations

import argparse
import json
from typing import Any

from twill.cli import common
from twill.render.terminal import make_console

__all__ = ["add_parser", "run", "warps_list"]

HELP = "registers, spills and SMEM per num_warps from ptxas (CPU only)"


def warps_list(text: str) -> list[int]:
    """``"2,4,8"`` -> ``[2, 4, 8]``; an :class:`argparse.ArgumentTypeError` unless each is a power of two.

    >>> warps_list("2, 4,8")
    [2, 4, 8]
    """
    try:
        values = [int(x) for x in text.replace(" ", "").split(",") if x]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--num-warps {text!r} must be a comma-separated list of integers") \
            from None
    if not values or any(v < 1 or v & (v - 1) for v in values):
        raise argparse.ArgumentTypeError(f"--num-warps {text!r}: each value must be a power of two >= 1")
    return values


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Register ``twill regs``."""
    p = sub.add_parser(
        "regs", help=HELP,
        description="Compile a Triton kernel on the CPU for each num_warps and print registers per thread, "
                    "spills, STL/LDL, shared memory and setmaxnreg budgets from the ptxas and cuobjdump "
                    "shipped in the Triton wheel; flags the register cliff and spills.")
    p.add_argument("file", help="FILE.py[::KERNEL] with a TWILL_KERNELS entry")
    p.add_argument("--target", default="sm_90", help="sm_90 (default) or sm_100")
    p.add_argument("--num-warps", type=warps_list, default=[2, 4, 8, 16], metavar="W,W,...",
                   help="comma-separated num_warps values (default 2,4,8,16)")
    p.add_argument("--num-stages", type=int, help="num_stages (default the kernel entry's)")
    p.add_argument("--constexpr", action="append", default=[], metavar="K=V",
                   help="override a constexpr (repeatable; 64 -> int, 0.5 -> float, True/true -> bool, "
                        "else text)")
    p.add_argument("--signature", action="append", default=[], metavar="ARG=TYPE",
                   help="override an argument type, e.g. k_desc='tensordesc<fp16[64, 128]>'")
    p.add_argument("--json", metavar="OUT", help="also write the reports as JSON")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    """Run ``twill regs``: print the table, the register cliff and the spilling rows; returns 0."""
    from twill.calibrate.regs import find_cliffs, render_table, sweep
    from twill.frontend.constexprs import parse_assignments, parse_constexprs

    if args.json is not None:
        common.check_output(args.json, inputs=(args.file,))
    reports = sweep(args.file, target=args.target, num_warps=args.num_warps, num_stages=args.num_stages,
                    constexprs=parse_constexprs(args.constexpr),
                    signature=parse_assignments(args.signature, flag="--signature"))
    console = make_console()
    console.print(render_table(reports))
    for cliff in find_cliffs(reports):
        if cliff.steepest:
            console.print(f"register cliff: num_warps {cliff.before.num_warps} -> {cliff.after.num_warps}: "
                          f"{cliff.before.registers} -> {cliff.after.registers} registers/thread "
                          f"(-{cliff.drop:.0%}){'' if cliff.after.spills else ', no spill instructions'}",
                          soft_wrap=True)
    spilling = [r.num_warps for r in reports if r.spills]
    if spilling:
        console.print(f"[red]spills[/] at num_warps {', '.join(map(str, spilling))}", soft_wrap=True)
    if args.json:
        common.write_output(args.json, json.dumps([r.to_dict() for r in reports], indent=1))
    return 0
