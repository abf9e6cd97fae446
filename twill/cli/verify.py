"""``twill verify``: re-check a saved schedule against every constraint family."""

from __future__ import annotations

import argparse
from dataclasses import replace
from typing import Any

from rich.markup import escape

from twill.cli import common
from twill.cli.options import saved_schedule_options
from twill.render.terminal import make_console

__all__ = ["INVALID", "add_parser", "run"]

HELP = "re-check a saved schedule; exit 0 only if valid"
INVALID = 3
"""Exit code of a schedule that breaks a constraint."""


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Register ``twill verify``."""
    p = sub.add_parser("verify", help=HELP, parents=[saved_schedule_options()],
                       description="Re-check every constraint family of a saved schedule with the "
                                   "independent checker (twill.verify), without a solver; exit 0 only if it "
                                   f"is valid, {INVALID} if not. A what-if schedule (solved with --relax) is "
                                   "checked against the real machine.")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    """Run ``twill verify``: 0 when valid, :data:`INVALID` otherwise."""
    from twill.verify import violations

    sched = common.read_schedule(args.file)
    relaxed = sorted(sched.problem.options.relax)
    if relaxed:  # a what-if: check it against the machine, every family included
        real = replace(sched.problem, options=replace(sched.problem.options, relax=frozenset()))
        sched = replace(sched, problem=real)
    found = violations(sched)
    console = make_console()
    what_if = f" (a what-if schedule, solved with {', '.join(relaxed)} left out)" if relaxed else ""
    if not found:
        console.print(f"[green]{escape(args.file)}: valid[/] (every constraint family holds{what_if})")
        return 0
    if relaxed:
        console.print(f"{escape(args.file)}: a what-if schedule, solved with {', '.join(relaxed)} left out; "
                      "against the machine:")
    for err in found:
        console.print(f"[red]violation[/] {escape(str(err))}")
    return INVALID
