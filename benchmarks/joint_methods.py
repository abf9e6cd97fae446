"""The whole search per joint solver: the SMT encoding (Yices) against the CP-SAT one, case by case.

For every case of ``solve_times.py`` (the same graphs and options), one :func:`twill.schedule` call per
solver in this process, with a time limit; the table gives the II, the length, whether it is proven
optimal, and the seconds (or why there is no schedule). The answers must agree wherever both finish.
Results go to ``benchmarks/results/joint_methods.md``, followed by the hand-written notes of
``benchmarks/results/joint_methods_notes.md`` (``--notes FILE`` for another file).

    python benchmarks/joint_methods.py                           # yices and cpsat (if ortools is installed)
    python benchmarks/joint_methods.py --cases 'fa_fwd_*' --time-limit 60 --notes notes.md
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import method_page
from solve_times import Case, build_graph

import twill
from twill.search.algorithm1 import JOINT_SOLVERS
from twill.solvers import cpsat

OUT = Path(__file__).resolve().parent / "results" / "joint_methods.md"
NOTES = OUT.with_name("joint_methods_notes.md")


def run_case(case: Case, solver: str, time_limit: float) -> str:
    """``II, L, proven | seconds`` of one search (``no schedule`` or ``timeout`` with the II reached)."""
    began = time.monotonic()
    try:
        s = twill.schedule(build_graph(case), case.machine, solver=solver, time_limit=time_limit,
                           **case.options)
        cell = f"{s.ii}, {s.length}, {'proven' if s.certificate.proven_optimal else 'not proven'}"
    except twill.InfeasibleError as exc:
        cell = "timeout" if "time limit" in str(exc) else "no schedule"
    return f"{cell} | {time.monotonic() - began:.2f}"


def main(argv: Sequence[str] | None = None) -> int:
    default = "yices,cpsat" if cpsat.available() else "yices"
    ap = method_page.parser(__doc__, "solvers", JOINT_SOLVERS, default, "search", OUT, NOTES)
    args = ap.parse_args(argv)
    solvers = method_page.chosen(ap, args.solvers, JOINT_SOLVERS)
    rows = []
    for case in method_page.cases(ap, args.cases):
        cells = [run_case(case, solver, args.time_limit) for solver in solvers]
        rows.append(f"| {case.name} | " + " | ".join(cells) + " |")
        print(rows[-1], flush=True)
    head = " | ".join(f"{s}: II, L, proof | {s} s" for s in solvers)
    what = "One `twill.schedule` call per case and solver, in one process; II and L in normalized units."
    method_page.write(args, "Whole search per joint solver", "joint_methods.py", "search", what,
                      f"| case | {head} |", rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
