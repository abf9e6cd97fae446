"""The modulo phase alone: seconds to find and prove the least modulo length, per method.

For every case of ``solve_times.py`` (the same graphs, normalized at U = 300) and the three IIs from its
MII, one :func:`twill.modulo.modulo_schedule` call per method, in this process; the table says the least
length each found (they must agree) and the seconds. Results go to ``benchmarks/results/modulo_methods.md``,
followed by the hand-written notes of ``benchmarks/results/modulo_methods_notes.md`` (``--notes FILE`` for
another file).

    python benchmarks/modulo_methods.py                          # smt and cpsat (if ortools is installed)
    python benchmarks/modulo_methods.py --methods smt,ilp --cases 'fa_*'
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

from solve_times import CASES, _option_subset, build_graph

from twill import cpsat
from twill.bounds import bounds
from twill.machine import load_machine
from twill.modulo import METHODS, modulo_schedule
from twill.normalize import normalize_problem
from twill.problem import Options, build_problem

OUT = Path(__file__).resolve().parent / "results" / "modulo_methods.md"
NOTES = OUT.with_name("modulo_methods_notes.md")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--methods", default="smt,cpsat" if cpsat.available() else "smt",
                    help=f"comma-separated, of {', '.join(METHODS)}")
    ap.add_argument("--cases", default="*", help="comma-separated case names or globs")
    ap.add_argument("--time-limit", type=float, default=120.0, help="seconds per call")
    ap.add_argument("--notes", type=Path, default=NOTES if NOTES.exists() else None,
                    help=f"a Markdown file appended to the page as its notes (default {NOTES.name})")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    bad = [m for m in methods if m not in METHODS]
    if bad:
        ap.error(f"unknown method(s) {', '.join(bad)}; choose from {', '.join(METHODS)}")
    patterns = [p.strip() for p in args.cases.split(",")]
    cases = [c for name, c in CASES.items() if any(fnmatch.fnmatch(name, p) for p in patterns)]
    if not cases:
        ap.error(f"no case matches {args.cases!r}")
    notes = args.notes.read_text() if args.notes is not None else ""
    rows = []
    for case in cases:
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
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    head = " | ".join(f"{m}: status, L | {m} s" for m in methods)
    text = "\n".join([
        "# Modulo phase per method",
        "",
        f"Written by `benchmarks/modulo_methods.py` ({stamp}, {platform.processor() or platform.machine()}, "
        f"Python {platform.python_version()}, time limit {args.time_limit:g} s per call). One "
        "`modulo_schedule` call per case, II and method, in one process; L in normalized units.",
        "",
        f"| case | II | {head} |",
        "|---|---|" + "---|---|" * len(methods),
        *rows,
        "",
        *([notes.rstrip(), ""] if notes else []),
    ])
    args.out.write_text(text)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
