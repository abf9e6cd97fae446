"""``twill schedule``: find the optimal schedule of a kernel's main loop, print it, save it as JSON."""

from __future__ import annotations

import argparse
import time
from typing import Any

from rich.markup import escape

from twill.cli import common
from twill.cli.options import kernel_options, machine_options, search_kwargs, search_options
from twill.errors import InterruptedSolveError
from twill.render.terminal import make_console
from twill.search.progress import EventKind, Progress, ProgressEvent

__all__ = ["add_parser", "progress_printer", "run"]

HELP = "find the optimal schedule of a kernel's main loop"


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Register ``twill schedule`` on an :mod:`argparse` subparsers object."""
    p = sub.add_parser("schedule", help=HELP, parents=[kernel_options(), machine_options(), search_options()],
                       description="Find the provably optimal software-pipelined, warp-specialized schedule "
                                   "of a loop (a Triton kernel, a TTGIR file, a graph JSON or a graph "
                                   "builder), print it and, with --json, save it.")
    p.add_argument("--json", metavar="OUT", help="write the schedule as JSON")
    p.set_defaults(func=run)
    return p


def progress_printer(status: Any) -> Progress:
    """A ``progress`` callback of :func:`twill.schedule` that shows the search on a rich ``status`` line and
    prints each refuted II on stderr.

    A spinner, not a ``rich.progress`` bar: the search walks up from the MII with no known end (the first
    II with a schedule is the answer, and the limit ``max_ii`` is far above it), and a range query or the
    closing phase decides its whole range in one solver call, so no fraction of the work done is known."""
    state: dict[str, Any] = {"ii": None}

    def update(event: ProgressEvent) -> None:
        kind = event.kind
        if kind is EventKind.BOUNDS:
            state["bounds"] = f"MII {event.mii} (ResMII {event.res_mii}, RecMII {event.rec_mii})"
        elif kind is EventKind.II:
            state["ii"] = event.ii
        elif kind is EventKind.PHASE:
            window = f", {event.stages} stage(s)" if event.stages else ""
            where = f"II = {event.ii}" if event.ii is not None else f"II = {event.lo}..{event.hi}"
            status.update(f"{where}{window}: {event.phase}  [{event.elapsed_s:.1f}s]  "
                          f"{state.get('bounds', '')}")
        elif kind is EventKind.ATTEMPT and event.status != "sat":
            window = f", {event.stages} stage(s)" if event.stages else ""
            common.ERR.print(f"  II = {event.ii}{window}: {event.phase} {event.status} "
                             f"[{event.elapsed_s:.1f}s]")
        elif (kind is EventKind.RANGE and event.refuted is not None and event.lo is not None
              and event.refuted >= event.lo):
            common.ERR.print(f"  II = {event.lo}..{event.refuted}: joint unsat (one range query, up to "
                             f"{event.stages} stages) [{event.elapsed_s:.1f}s]")

    return update


def run(args: argparse.Namespace) -> int:
    """Run ``twill schedule``; 0 when a schedule was found (a failed search raises)."""
    from twill.render.show import render
    from twill.search.algorithm1 import schedule

    out = (common.check_output(args.json, inputs=(args.file, args.machine))
           if args.json is not None else None)
    graph = common.graph_from_args(args)
    console = make_console()
    console.print(f"[bold]{escape(graph.name)}[/]: {len(graph.ops)} ops, {len(graph.edges)} edges "
                  f"(from {escape(graph.source or args.file)})")
    started = time.monotonic()
    try:
        with console.status("solving...") as status:
            sched = schedule(graph, args.machine, progress=progress_printer(status), **search_kwargs(args))
    except InterruptedSolveError as exc:
        if exc.schedule is not None:  # the best schedule found before Ctrl-C, marked not proven
            if out is not None:
                common.write_output(out, exc.schedule.to_json())
            console.print(render(exc.schedule))
            if out is not None:
                console.print(f"wrote {escape(str(out))} (the best schedule before the interrupt, not "
                              f"proven optimal)")
        raise
    if args.relax:
        console.print(f"[bold]what-if[/]: {', '.join(sorted(set(args.relax)))} left out; "
                      "not a schedule the machine can run")
    if out is not None:  # saved before printing: a closed pipe must not lose the solve
        common.write_output(out, sched.to_json())
    console.print(render(sched))
    console.print(f"solved in {time.monotonic() - started:.1f}s")
    if out is not None:
        console.print(f"wrote {escape(str(out))}")
    return 0
