"""What the tie-break goals (issue 25 item 2: fewest mbarrier pairs, then fewest hand-off bytes) cost
and change on the FA forward examples: each loop solved with every goal and with the goals up to the
SMEM footprint only (the goal tuples of both encodings cut for the run), the II, L and proof of both,
the tie-break values of both answers (:func:`twill.model.exchange.exchange`) and the wall time.

    python benchmarks/tiebreak_cost.py [--out benchmarks/results/tiebreak_cost.json]

A timing, not a proof: the load (``os.getloadavg``) is written with it.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import twill
import twill.solvers.joint.cpsat as cpsat_encoding
import twill.solvers.joint.smt as smt_encoding
from twill.model.exchange import exchange
from twill.solvers.joint.result import GOALS, TIEBREAKS

ROOT = Path(__file__).resolve().parents[1]
CASES = [("flash_attention_fwd.py::attn_fwd", "h100"), ("flash_attention_fwd.py::attn_fwd", "b200")]


def solve(entry: str, machine: str, goals: tuple[str, ...]) -> dict:
    """One search with ``goals`` as both encodings' goal tuple; its answer and wall time."""
    smt_encoding.GOALS = cpsat_encoding.GOALS = goals
    try:
        g = twill.graph_from_kernel(str(ROOT / "examples" / entry), machine=machine)
        t0 = time.perf_counter()
        s = twill.schedule(g, machine, time_limit=300)
        wall = time.perf_counter() - t0
    finally:
        smt_encoding.GOALS = cpsat_encoding.GOALS = GOALS
    return {"ii": s.ii, "length": s.length, "proven_optimal": s.certificate.proven_optimal,
            "groups": len(s.warp_groups), **exchange(s.problem, s.group), "wall_s": round(wall, 2),
            "joint_s": round(sum(p.wall_s for p in s.stats if p.phase == "joint"), 2)}


def main() -> int:
    """Run every case both ways; print and write the results."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "tiebreak_cost.json"))
    args = ap.parse_args()
    before = tuple(g for g in GOALS if g not in TIEBREAKS)
    rows = []
    for entry, machine in CASES:
        load = os.getloadavg()[0]
        off = solve(entry, machine, before)
        on = solve(entry, machine, GOALS)
        rows.append({"kernel": entry, "machine": machine, "load_1min": round(load, 2), "without": off,
                     "with": on, "extra_s": round(on["wall_s"] - off["wall_s"], 2),
                     "extra_joint_s": round(on["joint_s"] - off["joint_s"], 2)})
        print(json.dumps(rows[-1]))
    Path(args.out).write_text(json.dumps({"cases": rows, "cpus": os.cpu_count()}, indent=1) + "\n",
                              encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
