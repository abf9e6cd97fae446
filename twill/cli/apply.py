"""``twill apply``: write a schedule back into Triton's compile and save a launchable kernel."""

from __future__ import annotations

import argparse
from typing import Any

from rich.markup import escape

from twill.cli import common
from twill.cli.options import machine_options
from twill.render.terminal import make_console

__all__ = ["WRITES", "add_parser", "run"]

WRITES = ("schedule.json", "applied.ttgir", "report.txt", "report.json", "manifest.json", "kernel.py",
          "twill_apply.json")
"""File names either backend may write into the output folder (besides compiled artefacts), which no
input may be."""

HELP = "apply a schedule to the kernel: through Triton's compile, or as a generated Gluon kernel"


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Register ``twill apply``."""
    machine = machine_options(default=None, help="machine to solve for (default h100; with --schedule, the "
                                                 "schedule's machine)")
    p = sub.add_parser("apply", help=HELP, parents=[machine],
                       description="Solve (or read --schedule), then either write twill's stages, order "
                                   "and (sm_100) warp groups into Triton's scheduled TTGIR and finish the "
                                   "compile to a cubin (--backend triton), or generate a warp-specialized "
                                   "Gluon kernel that executes the schedule (--backend gluon: one partition "
                                   "per warp group, TMA rings, mbarriers, async wgmma on Hopper, tcgen05 "
                                   "with tensor memory on Blackwell); save it as a "
                                   "launchable kernel and print what was kept and what was dropped.")
    p.add_argument("file", help="FILE.py[::KERNEL] with a TWILL_KERNELS entry")
    p.add_argument("--schedule", metavar="JSON", help="use this saved schedule instead of solving")
    p.add_argument("--backend", choices=("triton", "gluon"), default="triton",
                   help="triton: re-enter Triton's compile (default); gluon: generate a Gluon kernel "
                        "(docs/gluon.md; load it on a GPU with twill.codegen.gluon.load(DIR))")
    p.add_argument("-o", "--output", required=True, metavar="DIR", help="folder for the compiled kernel")
    p.add_argument("--prefetch", type=int, help="stages between a streaming load and its consumer")
    p.add_argument("--time-limit", type=float, metavar="S", help="seconds for the solve")
    p.add_argument("--no-baseline", action="store_true", help="do not compile Triton's own schedule beside")
    p.add_argument("--no-peel", action="store_true",
                   help="sm_90: keep Triton's predicated last iteration (do not peel the epilogue)")
    p.add_argument("--no-compile", action="store_true", help="stop after writing the TTGIR")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    """Run ``twill apply``: solve or load the schedule, apply it, save the kernel, print the report."""
    from twill.apply import apply, refuse_unsupported, triton_apart

    console = make_console()
    out = common.check_output(args.output, folder=True, inputs=(args.file, args.schedule, args.machine),
                              writes=WRITES)
    machine = args.machine
    if args.schedule:
        sched = common.read_schedule(args.schedule)
    else:
        machine = machine or "h100"
        from twill.frontend.compile import compile_to_ttgir, load_kernel, target_for
        from twill.frontend.lower import graph_from_kernel
        from twill.ir.machine import load_machine
        from twill.search import schedule as solve

        target = target_for(load_machine(machine))
        refuse_unsupported(compile_to_ttgir(load_kernel(args.file), target=target), target)  # before solving
        graph = graph_from_kernel(args.file, machine)
        # the pairs Triton's sm_100 pipeliner must keep apart bind only the Triton re-entry path
        apart = triton_apart(graph) if target == "sm_100" and args.backend == "triton" else ()
        with console.status(f"solving {escape(graph.name)} for {escape(str(machine))}..."):
            sched = solve(graph, machine, time_limit=args.time_limit, apart=apart)
    if args.backend == "gluon":
        from twill.codegen.gluon import generate

        with console.status(f"generating and compiling the Gluon kernel of {escape(sched.problem.name)}..."):
            kernel = generate(sched, args.file, machine, out, compile=not args.no_compile)
        common.write_output(out / "schedule.json", sched.to_json())
        print(kernel.report.render())
        print(f"wrote {out}/")
        return 0
    result = apply(sched, args.file, prefetch=args.prefetch, output_dir=args.output,
                   compile=not args.no_compile, baseline=not args.no_baseline, peel=not args.no_peel,
                   machine=machine)
    out.mkdir(parents=True, exist_ok=True)
    common.write_output(out / "schedule.json", sched.to_json())
    common.write_output(out / "applied.ttgir", result.ttgir)
    print(result.report.render())
    print(f"wrote {out}/")
    return 0
