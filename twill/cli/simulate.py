"""``twill simulate``: run a saved schedule on a one-SM model with other latencies."""

from __future__ import annotations

import argparse
import math
from typing import Any

from twill.cli import common
from twill.cli.options import saved_schedule_options
from twill.errors import TwillError
from twill.render.terminal import make_console

__all__ = ["add_parser", "run"]

HELP = "simulate a saved schedule on one SM (cycles, stalls, deadlocks)"


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Register ``twill simulate``."""
    from twill.analysis.simulate import UNIT_ORDERS

    p = sub.add_parser("simulate", help=HELP, parents=[saved_schedule_options()],
                       description="Run a saved schedule for a number of iterations on a one-SM model whose "
                                   "variable-latency ops (TMA loads) take other latencies than the schedule "
                                   "assumed, and report cycles per iteration, stalls and deadlocks.")
    p.add_argument("--iterations", type=int, default=64, help="trip count (default 64)")
    p.add_argument("--latency", type=float, metavar="CYCLES",
                   help="fixed latency of the variable-latency ops (default: drawn around the machine's)")
    p.add_argument("--latency-scale", type=float, default=1.0, metavar="X",
                   help="multiply the variable-latency ops' latency by X")
    p.add_argument("--seed", type=int, default=0, help="seed of the latency draws")
    p.add_argument("--unit-order", default="schedule", choices=UNIT_ORDERS,
                   help="units serve ops in the schedule's order (default) or first come, first served")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    """Run ``twill simulate``; returns 0."""
    from twill.analysis.simulate import scaled_latencies, simulate

    sched = common.read_schedule(args.file)
    if not math.isfinite(args.latency_scale) or args.latency_scale <= 0:
        raise TwillError(f"--latency-scale {args.latency_scale} must be a finite number > 0 (a factor on the "
                         "latencies)")
    if args.latency is not None and (not math.isfinite(args.latency) or args.latency < 0):
        raise TwillError(f"--latency {args.latency} must be a finite number of cycles >= 0")
    latencies = scaled_latencies(sched, args.latency_scale, args.latency)
    result = simulate(sched, args.iterations, latencies, args.seed, unit_order=args.unit_order)
    console = make_console()
    for line in result.summary():
        console.print(line, markup=False, highlight=False)
    return 0
