"""The option groups commands share, as :mod:`argparse` parent parsers, and their values as keyword
arguments of the public API.

* :func:`machine_options` -- ``--machine``;
* :func:`kernel_options` -- the loop to read (``FILE.py[::KERNEL]``, a ``.ttgir``, a graph ``.json`` or a
  builder function) and how a kernel is compiled (``--constexpr``, ``--num-warps``, ``--num-stages``,
  ``--loop``);
* :func:`search_options` -- every option of :func:`twill.schedule` (the search), so ``twill schedule`` and
  ``twill explain`` take the same set;
* :func:`saved_schedule_options` -- a schedule JSON written by ``twill schedule --json``.
"""

from __future__ import annotations

import argparse
from typing import Any

from twill.model.problem import RELAXABLE
from twill.solvers.modulo.methods import METHODS

__all__ = ["apart_pairs", "kernel_options", "machine_options", "saved_schedule_options", "search_kwargs",
           "search_options"]


def machine_options(default: str | None = "h100", help: str | None = None) -> argparse.ArgumentParser:
    """``--machine NAME|FILE.toml`` (a bundled machine name or a machine TOML)."""
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--machine", default=default,
                   help=help or f"bundled machine name or TOML path (default {default})")
    return p


def kernel_options() -> argparse.ArgumentParser:
    """The input loop and the options of its compile."""
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("file", help="FILE.py[::KERNEL], FILE.py::graph_builder, FILE.ttgir or a graph .json")
    p.add_argument("--constexpr", action="append", default=[], metavar="K=V",
                   help="override a constexpr (repeatable; 64 -> int, 0.5 -> float, True/true -> bool, "
                        "else text)")
    p.add_argument("--num-warps", type=int, help="compile with this many warps")
    p.add_argument("--num-stages", type=int, help="compile with this num_stages")
    p.add_argument("--loop", type=int, metavar="N", help="schedule the N-th of sibling loops (0-based, in "
                   "program order; default: the only loop)")
    return p


def search_options() -> argparse.ArgumentParser:
    """Every search option of :func:`twill.schedule` (read back with :func:`search_kwargs`)."""
    p = argparse.ArgumentParser(add_help=False)
    g = p.add_argument_group("search")
    g.add_argument("--solver", default="yices", choices=("yices", "z3", "cpsat"),
                   help="joint solver: SMT backend yices or z3, or cpsat (OR-Tools CP-SAT, optional)")
    g.add_argument("--ilp", default="cbc", choices=("cbc", "highs"), help="MILP backend")
    g.add_argument("--modulo", default="smt", choices=METHODS,
                   help="how the optimal modulo schedule is found (all exact; cpsat needs ortools)")
    g.add_argument("--strategy", default="joint", choices=("joint", "swp"),
                   help="joint (Algorithm 1) or swp (modulo schedule + fixed split)")
    g.add_argument("--time-limit", type=float, metavar="S", help="seconds for one search")
    g.add_argument("--max-groups", type=int, help="warp groups offered to the solver")
    g.add_argument("--register-limit", type=int, help="registers per thread per warp group")
    g.add_argument("--no-cross-group", action="store_true",
                   help="forbid register values crossing warp groups")
    g.add_argument("--apart", action="append", default=[], metavar="OP,OP",
                   help="keep these two ops on different warp groups (repeatable; a code generator's rule)")
    g.add_argument("--max-stages", type=int, help="largest number of pipeline stages")
    g.add_argument("--stage-slack", type=int, default=1,
                   help="stage windows tried per II beyond the modulo schedule's (0: paper's Algorithm 1)")
    g.add_argument("--prefetch", type=int, default=None,
                   help="extra buffers per streaming load (default: the least that hides the load latency)")
    g.add_argument("--normalize-upper", type=int, default=300, help="U of the cost normalization")
    g.add_argument("--window-limit", type=float, default=None, metavar="SECONDS",
                   help="seconds per joint (II, stages) window; an undecided window is skipped and the "
                        "answer is marked not proven")
    g.add_argument("--no-ranges", action="store_true",
                   help="decide every II on its own instead of refuting runs of IIs with range queries "
                        "(same answer and proof; slower when the optimum lies far above the MII)")
    g.add_argument("--method", default="direct", choices=("direct", "decompose"),
                   help="how each joint question is decided: direct (one formula) or decompose (Benders: "
                        "warp groups by a master, timing by a subproblem; needs ortools; same answer)")
    g.add_argument("--relax", action="append", default=[], choices=sorted(RELAXABLE), metavar="FAMILY",
                   help="what-if: leave out a constraint family (repeatable; one of "
                        f"{', '.join(sorted(RELAXABLE))}); the answer is not a schedule the machine can run")
    return p


def apart_pairs(texts: list[str]) -> list[tuple[str, ...]]:
    """``["A,B"]`` -> ``[("A", "B")]`` (names stripped; :func:`twill.schedule` checks the pairs)."""
    return [tuple(n.strip() for n in pair.split(",")) for pair in texts]


def search_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """The keyword arguments of :func:`twill.schedule` that :func:`search_options` parsed into ``args``."""
    return {"solver": args.solver, "ilp": args.ilp, "modulo": args.modulo, "strategy": args.strategy,
            "time_limit": args.time_limit, "max_groups": args.max_groups,
            "register_limit": args.register_limit, "cross_group": not args.no_cross_group,
            "max_stages": args.max_stages, "stage_slack": args.stage_slack, "prefetch": args.prefetch,
            "normalize_upper": args.normalize_upper, "window_limit": args.window_limit,
            "ranges": not args.no_ranges, "method": args.method, "relax": frozenset(args.relax),
            "apart": apart_pairs(args.apart)}


def saved_schedule_options() -> argparse.ArgumentParser:
    """The positional schedule JSON of the commands that read a saved schedule."""
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("file", help="schedule JSON written by `twill schedule --json`")
    return p
