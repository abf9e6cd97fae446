"""The modulo phase alone: seconds to find and prove the least modulo length, per method.

For every case of ``solve_times.py`` (the same graphs, normalized at U = 300) and the three IIs from its
MII, one :func:`twill.solvers.modulo.methods.modulo_schedule` call per method, in this process; the
table says the least
length each found (they must agree) and the seconds. Results go to ``benchmarks/results/modulo_methods.md``,
followed by the hand-written notes of ``benchmarks/results/modulo_methods_notes.md`` (``--notes FILE`` for
another file).

    python benchmarks/modulo_methods.py                          # smt and cpsat (if ortools is installed)
    python benchmarks/modulo_methods.py --methods smt,ilp --cases 'fa_*'
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import method_page
from solve_times import _option_subset, build_graph

from twill.ir.machine import load_machine
from twill.model.bounds import bounds
from twill.model.problem import Options, build_problem
from twill.solvers import cpsat
from twill.solvers.modulo.methods import METHODS, modulo_schedule
from twill.solvers.normalize import normalize_problem

OUT = Path(__file__).resolve().parent / "results" / "modulo_methods.md"
NOTES = OUT.with_name("modulo_methods_notes.md")


def main(argv: Sequence[str] | None = None) -> int:
    ap = method_page.parser(__doc__, "methods", METHODS, "smt,cpsat" if cpsat.available() else "smt", "call",
                            OUT, NOTES)
    args = ap.parse_args(argv)
    methods = method_page.chosen(ap, args.methods, METHODS)
    rows = []
    for case in method_page.cases(ap, args.cases):
        mach = load_machine(case.machine)
        raw = build_problem(build_graph(case), mach, Options(**_option_subset(case.options)))
        problem, _ = normalize_problem(raw, upper=300)
        mii = bounds(problem).mii
        for ii in range(mii, mii + 3):
            cells = []
            for method in methods:
                began = time.monotonic()
                res = modulo_schedule(problem, ii, method=method, time_limit=args.time_limit)
                cells.append(f"{res.status.value} {res.length or '-'} | {time.monotonic() - began:.2f}")
            rows.append(f"| {case.name} | {ii} | " + " | ".join(cells) + " |")
            print(rows[-1], flush=True)
    head = " | ".join(f"{m}: status, L | {m} s" for m in methods)
    what = "One `modulo_schedule` call per case, II and method, in one process; L in normalized units."
    method_page.write(args, "Modulo phase per method", "modulo_methods.py", "call", what,
                      f"| case | II | {head} |", rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
