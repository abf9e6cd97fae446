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

import argparse
import datetime
import fnmatch
import platform
import sys
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from solve_times import CASES, Case, build_graph

import twill
from twill import cpsat
from twill.search import JOINT_SOLVERS

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
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--solvers", default="yices,cpsat" if cpsat.available() else "yices",
                    help=f"comma-separated, of {', '.join(JOINT_SOLVERS)}")
    ap.add_argument("--cases", default="*", help="comma-separated case names or globs")
    ap.add_argument("--time-limit", type=float, default=120.0, help="seconds per search")
    ap.add_argument("--notes", type=Path, default=NOTES if NOTES.exists() else None,
                    help=f"a Markdown file appended to the page as its notes (default {NOTES.name})")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    solvers = [s.strip() for s in args.solvers.split(",") if s.strip()]
    bad = [s for s in solvers if s not in JOINT_SOLVERS]
    if bad:
        ap.error(f"unknown solver(s) {', '.join(bad)}; choose from {', '.join(JOINT_SOLVERS)}")
    patterns = [p.strip() for p in args.cases.split(",")]
    cases = [c for name, c in CASES.items() if any(fnmatch.fnmatch(name, p) for p in patterns)]
    if not cases:
        ap.error(f"no case matches {args.cases!r}")
    notes = args.notes.read_text() if args.notes is not None else ""
    rows = []
    for case in cases:
        cells = [run_case(case, solver, args.time_limit) for solver in solvers]
        rows.append(f"| {case.name} | " + " | ".join(cells) + " |")
        print(rows[-1], flush=True)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    head = " | ".join(f"{s}: II, L, proof | {s} s" for s in solvers)
    text = "\n".join([
        "# Whole search per joint solver",
        "",
        f"Written by `benchmarks/joint_methods.py` ({stamp}, {platform.processor() or platform.machine()}, "
        f"Python {platform.python_version()}, time limit {args.time_limit:g} s per search). One "
        "`twill.schedule` call per case and solver, in one process; II and L in normalized units.",
        "",
        f"| case | {head} |",
        "|---|" + "---|---|" * len(solvers),
        *rows,
        "",
        *([notes.rstrip(), ""] if notes else []),
    ])
    args.out.write_text(text)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
