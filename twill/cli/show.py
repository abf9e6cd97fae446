"""``twill show``: print a saved schedule."""

from __future__ import annotations

import argparse
from typing import Any

from twill.cli import common
from twill.cli.options import saved_schedule_options
from twill.render.terminal import make_console

__all__ = ["add_parser", "run"]

HELP = "print a saved schedule"


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Register ``twill show``."""
    p = sub.add_parser("show", help=HELP, parents=[saved_schedule_options()],
                       description="Print a schedule saved by `twill schedule --json` as `twill schedule` "
                                   "prints it: ops by start time, warp groups, hand-offs, steady state, "
                                   "buffers and the certificate.")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    """Run ``twill show``; returns 0."""
    from twill.render.show import render

    make_console().print(render(common.read_schedule(args.file)))
    return 0
