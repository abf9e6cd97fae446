"""``twill plot``: draw a saved schedule."""

from __future__ import annotations

import argparse
from typing import Any

from rich.markup import escape

from twill.cli import common
from twill.cli.options import saved_schedule_options
from twill.render.terminal import make_console

__all__ = ["add_parser", "run"]

HELP = "draw a saved schedule: Gantt chart per warp group and the MRT"


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Register ``twill plot``."""
    p = sub.add_parser("plot", help=HELP, parents=[saved_schedule_options()],
                       description="Draw a saved schedule as SVG, PNG or PDF: one band per warp group over "
                                   "prologue, steady state and epilogue, ops coloured by unit, and the "
                                   "modulo reservation table.")
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="FILE.svg, FILE.png or FILE.pdf")
    p.add_argument("--title", help="title of the picture")
    p.add_argument("--width", type=float, default=13.0, help="width in inches (default 13)")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    """Run ``twill plot``; returns 0."""
    from twill.render.plot import save

    sched = common.read_schedule(args.file)
    common.check_output(args.output, inputs=(args.file,))
    out = save(sched, args.output, title=args.title, width=args.width)
    make_console().print(f"wrote {escape(str(out))}")
    return 0
