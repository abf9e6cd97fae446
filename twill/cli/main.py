"""The ``twill`` command line: the parser of every command and the exit codes.

::

    twill schedule FILE.py[::KERNEL] --machine h100 [--constexpr K=V ...] [--json OUT]
                   [--solver yices|z3|cpsat] [--time-limit S] [--strategy joint|swp] [--max-groups N]
                   [--register-limit R] ...
    twill schedule FILE.ttgir --machine h100        # a TTGIR file
    twill schedule FILE.py::build_graph             # a function returning a twill.Graph
    twill show OUT.json                             # print a saved schedule
    twill verify OUT.json                           # exit 0 only if the schedule is valid
    twill machines                                  # list the bundled machines
    twill explain | simulate | plot | apply | regs  # see twill CMD --help
    twill --version

Exit codes: 0 success, 1 no schedule (infeasible or time limit), 2 bad input, 3 invalid schedule
(``verify``), 130 interrupted, 141 stdout closed.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from collections.abc import Sequence

from rich.markup import escape

from twill.cli import apply, common, explain, machines, plot, regs, schedule, show, simulate, tune, verify
from twill.errors import InfeasibleError, InterruptedSolveError, TwillError

__all__ = ["COMMANDS", "build_parser", "main"]

COMMANDS = (schedule, show, verify, machines, explain, simulate, plot, apply, tune, regs)
"""The command modules, in the order ``twill --help`` lists them; each has ``add_parser`` and ``run``."""


def build_parser() -> argparse.ArgumentParser:
    """The ``twill`` parser with every command of :data:`COMMANDS`."""
    import twill

    parser = argparse.ArgumentParser(prog="twill", description="Optimal software pipelining and warp "
                                     "specialization for Tensor Core GPU loops.")
    parser.add_argument("--version", action="version", version=f"twill {twill.__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit code."""
    args = build_parser().parse_args(argv)
    if not sys.stdout.isatty() and "COLUMNS" not in os.environ:
        # rich lays tables out for 80 columns when stdout is a pipe or file, cutting op names and notes;
        # a reader there scrolls instead (COLUMNS, when set, still decides)
        os.environ["COLUMNS"] = "160"
    previous = warnings.showwarning
    warnings.showwarning = common.showing_notes(previous)
    try:
        return int(args.func(args) or 0)
    except InterruptedSolveError as exc:
        common.ERR.print(f"[yellow]interrupted[/]: {escape(str(exc))}")
        return 130
    except KeyboardInterrupt:
        common.ERR.print("[yellow]interrupted[/]")
        return 130
    except InfeasibleError as exc:
        common.ERR.print(f"[red]no schedule[/]: {escape(str(exc))}", soft_wrap=True)
        return 1
    except TwillError as exc:
        common.ERR.print(f"[red]error[/] ({type(exc).__name__}): {escape(str(exc))}", soft_wrap=True)
        return 2
    except BrokenPipeError:  # the reader of stdout went away (| head): stop quietly, as a shell tool does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except OSError as exc:  # a file that could not be written after all (a full disk, a /proc path)
        common.ERR.print(f"[red]error[/] ({type(exc).__name__}): {escape(str(exc))}", soft_wrap=True)
        return 2
    finally:
        warnings.showwarning = previous


if __name__ == "__main__":
    sys.exit(main())
