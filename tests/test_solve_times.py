"""The solve-time benchmark (``benchmarks/solve_times.py``) stays runnable, and time limits hold.

The benchmark module is imported and its Figure 1 case solved once in process, so the suite cannot rot
without a test failing; the synthetic generator must be deterministic and give valid Hopper graphs; and
a ``time_limit`` must stop a search that would otherwise run for minutes within 1.1 x the limit.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from types import ModuleType

import pytest

import twill
from twill.errors import InfeasibleError
from twill.ir.machine import load_machine


def test_figure1_case_runs_and_reports(bench: Callable[[str], ModuleType]) -> None:
    bench = bench("solve_times")
    case = bench.CASES["figure1"]
    graph = bench.build_graph(case)
    rec = bench.solve_once(graph, case, time_limit=60.0)
    assert rec["status"] == "optimal"
    assert (rec["ii"], rec["length"]) == (2, 4)  # paper Fig. 1
    assert rec["probes"] >= 1 and rec["checks"] >= rec["probes"]
    assert set(bench.PHASES) <= set(rec["phases"])
    assert rec["phases"]["joint"]["s"] >= rec["phases"]["joint_build"]["s"] > 0
    facts = bench.graph_facts(graph, case)
    assert (facts["ops"], facts["edges"], facts["carried_edges"]) == (3, 3, 1)
    med = bench.summarize([{**rec, "rss_mb": 100.0, "rss_children_mb": 0.0}])
    data = {"environment": bench.environment(), "cases": {"figure1": {"graph": {**facts, "graph_s": 0.0},
                                                                      "time_limit": 60.0, "runs": [rec],
                                                                      "median": med}}}
    text = bench.render(data)
    assert "| Figure 1 loop | h100 | 3 | 3 |" in text and "optimal: II 2, L 4" in text


def test_every_case_is_listed_once(bench: Callable[[str], ModuleType]) -> None:
    bench = bench("solve_times")
    names = list(bench.CASES)
    assert len(names) == len(set(names))
    assert {"figure1", "fa_fwd_sub_h100", "fa_fwd_sub_b200", "fa_bwd_b200_lr", "synthetic60"} <= set(names)
    assert [c.name for c in bench.select("synthetic*")] == [f"synthetic{n}" for n in (10, 20, 30, 45, 60)]


@pytest.mark.parametrize("n", [10, 30, 60])
def test_synthetic_graphs_are_deterministic_and_valid(bench: Callable[[str], ModuleType], n: int) -> None:
    synthetic = bench("synthetic")
    g, again = synthetic.synthetic_graph(n), synthetic.synthetic_graph(n)
    assert len(g.ops) == n
    assert g.to_dict() == again.to_dict()
    g.check(load_machine("h100").unit_names)
    units = {r.unit for op in g.ops for r in op.rrt}
    assert {"tc", "tma", "mufu", "alu", "lsu"} <= units
    assert any(e.distance > 0 for e in g.edges)
    assert synthetic.synthetic_graph(n, seed=n + 1).to_dict() != g.to_dict()


def test_time_limit_stops_a_long_search_in_time(bench: Callable[[str], ModuleType]) -> None:
    # The 45-op synthetic loop needs minutes; with a 3 s limit the call must return within 1.1 x 3 s and
    # say how far it got (no schedule: InfeasibleError with the least II it could not refute).
    g = bench("synthetic").synthetic_graph(45)
    limit = 3.0
    start = time.monotonic()
    try:
        sched = twill.schedule(g, "h100", time_limit=limit)
    except InfeasibleError as exc:
        assert "time limit" in str(exc) and "at least" in str(exc)
        assert exc.certificate is not None and not exc.certificate.proven_optimal
    else:
        assert not sched.certificate.proven_optimal
    # The 1.1 x limit requirement is measured by the benchmark (benchmarks/results.md, 'Time limits'), on
    # a quiet machine; a unit test on a shared CI core only guards against a search that ignores the
    # limit (a lost stop request once let this loop run for 300 s).
    assert time.monotonic() - start <= limit + 15


def test_modulo_methods_benchmark_runs_and_the_methods_agree(bench: Callable[[str], ModuleType],
                                                              tmp_path) -> None:
    import twill.solvers.cpsat

    mod = bench("modulo_methods")
    out = tmp_path / "modulo.md"
    methods = "smt,ilp,cpsat" if twill.solvers.cpsat.available() else "smt,ilp"
    assert mod.main(["--cases", "figure1,synthetic10", "--methods", methods, "--out", str(out)]) == 0
    rows = [line.split("|")[1:-1] for line in out.read_text().splitlines() if line.startswith("| figure1")
            or line.startswith("| synthetic10")]
    assert len(rows) == 6  # three IIs per case
    for row in rows:
        found = [row[i].strip() for i in range(2, len(row), 2)]  # "status L" per method
        assert len(set(found)) == 1 and found[0].startswith("optimal")
    with pytest.raises(SystemExit):
        mod.main(["--methods", "smt,nope", "--out", str(out)])


def test_joint_methods_benchmark_runs_and_the_solvers_agree(bench: Callable[[str], ModuleType],
                                                            tmp_path) -> None:
    import twill.solvers.cpsat

    mod = bench("joint_methods")
    out, notes = tmp_path / "joint.md", tmp_path / "notes.md"
    notes.write_text("## Notes\n\nkept by hand\n")
    solvers = "yices,cpsat" if twill.solvers.cpsat.available() else "yices,z3"
    assert mod.main(["--cases", "figure1,gemm_h100", "--solvers", solvers, "--notes", str(notes),
                     "--out", str(out)]) == 0
    text = out.read_text()
    rows = [line.split("|")[1:-1] for line in text.splitlines() if line.startswith(("| figure1", "| gemm"))]
    assert len(rows) == 2
    for row in rows:
        found = [row[i].strip() for i in range(1, len(row), 2)]  # "II, L, proof" per solver
        assert len(set(found)) == 1 and found[0].endswith(", proven")
    assert "\n|---|---|---|---|---|\n" in text  # one separator cell per column: case, 2 x (answer, s)
    assert text.rstrip().endswith("kept by hand")
    with pytest.raises(SystemExit):
        mod.main(["--solvers", "yices,nope", "--out", str(out)])
