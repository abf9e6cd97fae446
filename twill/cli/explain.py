"""``twill explain``: which constraint families bind the schedule (why is II not lower?)."""

from __future__ import annotations

import argparse
from typing import Any

from twill.cli import common
from twill.cli.options import kernel_options, machine_options, search_kwargs, search_options
from twill.render.terminal import make_console

__all__ = ["add_parser", "run"]

HELP = "which constraint families bind the schedule (why is II not lower?)"


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Register ``twill explain`` (every search option of ``twill schedule``, applied to each solve)."""
    from twill.analysis.explain import WHAT_IFS

    p = sub.add_parser("explain", help=HELP, parents=[kernel_options(), machine_options(), search_options()],
                       description="Solve the loop, then again with each constraint family left out (and, "
                                   "when there is no schedule, with pairs of them), and say which families "
                                   "hold II and L where they are. The search options are those of `twill "
                                   "schedule` and apply to every solve (--time-limit: per solve).")
    p.add_argument("--families", help=f"comma-separated what-ifs to try (default: all that apply): "
                                      f"{', '.join(WHAT_IFS)}")
    p.add_argument("--no-pairs", action="store_true", help="when there is no schedule, do not try pairs")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    """Run ``twill explain``; exit 0 when a schedule exists, 1 when none does."""
    from twill.analysis.explain import explain

    graph = common.graph_from_args(args)
    console = make_console()
    families = [f.strip() for f in args.families.split(",") if f.strip()] if args.families else None
    with console.status("solving...") as status:
        def report(fams: tuple[str, ...]) -> None:
            what = f"with {' + '.join(fams)} relaxed" if fams else "the real problem"
            status.update(f"solving {what}")

        result = explain(graph, args.machine, families=families, pairs=not args.no_pairs, on_solve=report,
                         **search_kwargs(args))
    for line in result.lines():
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    return 0 if result.baseline is not None else 1
