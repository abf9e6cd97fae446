"""The Benders decomposition of the joint problem (twill/solvers/joint/decompose.py) against the exact
oracle of tests/joint_oracle.py, which shares no code with it:

* per II, on random tiny loops (the generator of tests/test_oracle.py: register plans, ``apart`` pairs,
  hand-off costs, SMEM limits, stage budgets): :func:`benders` says "no schedule" exactly when the oracle
  finds none at that II within the same stage count, and a schedule it finds at fixed groups exists;
* the whole search with ``method="decompose"`` gives the oracle's optimum (the rules of
  ``test_oracle.judge``) and the very schedule ``method="direct"`` gives;
* a broken cut (a core that was never proven infeasible) makes it disagree with the oracle: the
  verdict test can see a wrong cut, so its passing means something.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from pysmt.typing import INT

pytest.importorskip("ortools")

import test_oracle as cases

import twill
from twill.errors import InfeasibleError, OptionsError, ResourceError
from twill.ir.paper import figure1_graph
from twill.model.bounds import bounds
from twill.solvers.joint.decompose import SUBPROBLEMS, benders, deletion_core
from twill.solvers.smt import SmtSession, available_backends
from twill.solvers.status import CheckResult

sys.path.insert(0, str(Path(__file__).parent))
from joint_oracle import OracleLimit, oracle

pytestmark = pytest.mark.filterwarnings("ignore:prefetch. the ")

SEEDS = range(0, 100)
"""Random loops of the verdict test (each II from the MII to ``cases.MAX_II``)."""
NODE_LIMIT = 100_000
STAGES = 3


def _loops(seeds=SEEDS):
    """(seed, problem, stages) of the random loops ``seeds`` that build."""
    for seed in seeds:
        case = cases.random_case(seed)
        try:
            prob = cases.problem_of(case.graph, cases.machine(case.smem), **case.options)
        except Exception:  # an option combination Options or build_problem rejects (as test_oracle)
            continue
        stages = STAGES if case.options["max_stages"] is None else min(STAGES, case.options["max_stages"])
        yield seed, prob, stages


def _verdicts(shrink=None, subproblem: str = "smt", seeds=SEEDS,
              first: bool = False) -> tuple[int, list[str]]:
    """Compare :func:`benders` with the oracle at every II of every loop (until the ``first``
    disagreement); (questions, disagreements)."""
    asked, bad = 0, []
    for seed, prob, stages in _loops(seeds):
        if first and bad:
            break
        lo = max(1, bounds(prob).mii)
        for ii in range(lo, cases.MAX_II + 1):
            try:
                ans = oracle(prob, max_ii=ii, max_stages=stages, min_ii=ii, node_limit=NODE_LIMIT)
            except OracleLimit:
                continue
            got = benders(prob, ii, stages, shrink=shrink, subproblem=subproblem)
            asked += 1
            if got.status not in (CheckResult.SAT, CheckResult.UNSAT):
                bad.append(f"seed {seed} II {ii}: undecided ({got.status.value})")
            elif (got.status == CheckResult.SAT) != (ans is not None):
                bad.append(f"seed {seed} II {ii}: benders {got.status.value} after {got.cuts} cuts, "
                           f"oracle {'schedule' if ans else 'none'}")
            if ans is not None:
                break  # the IIs above the least feasible one add little
    return asked, bad


@pytest.mark.parametrize("subproblem", SUBPROBLEMS)
def test_benders_verdict_matches_the_oracle_at_every_ii(subproblem: str) -> None:
    asked, bad = _verdicts(subproblem=subproblem)
    assert asked >= 200, f"only {asked} questions decided by the oracle"
    assert not bad, "\n".join(bad[:6])


def test_a_core_that_was_never_proven_is_caught() -> None:
    # "the first op alone is to blame": with interchangeable groups that cut is the empty clause, so the
    # first refuted assignment refutes the II; the oracle finds a schedule at some such II
    def wrong(ops, infeasible):
        return ops[:1]

    _, bad = _verdicts(shrink=wrong, first=True)
    assert any("oracle schedule" in line for line in bad), "a wrong cut went unnoticed"


def test_deletion_cores_agree_with_the_oracle_too() -> None:
    # the shrinking the wrong cut above stands in for, done right: every deletion proven by a subproblem
    asked, bad = _verdicts(shrink=deletion_core, seeds=range(0, 50))
    assert asked >= 100 and not bad, "\n".join(bad[:6])


def test_the_deletion_core_is_minimal_and_proven() -> None:
    # infeasible exactly when both "b" and "d" are in the set: the core is {b, d}, found by tests only
    calls = []

    def infeasible(ops):
        calls.append(tuple(ops))
        return "b" in ops and "d" in ops

    core = deletion_core(list("abcdef"), infeasible)
    assert core == ["b", "d"]
    assert all(infeasible(core[:i] + core[i + 1:]) is False for i in range(len(core)))


@pytest.mark.parametrize("seed", [s for s in SEEDS if s % 10 == 0])
def test_decompose_search_gives_the_direct_answer(seed: int) -> None:
    case = cases.random_case(seed)
    mach = cases.machine(case.smem)
    results = {}
    for method in ("direct", "decompose"):
        try:
            s = twill.schedule(case.graph, mach, **case.options, time_limit=30, method=method)
            answer = json.loads(s.to_json(timings=False))
            cert = answer.pop("certificate")  # names the method; stats count its solver calls
            answer.pop("stats")
            answer["bound"] = (cert["lower_bound"], cert["proven_optimal"], cert["heuristic"])
            results[method] = (answer, s.certificate.proven_optimal)
        except (InfeasibleError, ResourceError, OptionsError) as exc:  # both methods must refuse alike
            results[method] = (type(exc).__name__, None)
    assert results["decompose"] == results["direct"]
    if results["decompose"][1]:
        prob = cases.problem_of(case.graph, mach, **case.options)
        stages = cases.STAGES if case.options["max_stages"] is None else case.options["max_stages"]
        try:
            ans = cases.oracle(prob, max_ii=cases.MAX_II, max_stages=stages, node_limit=NODE_LIMIT)
        except OracleLimit:
            return
        s = twill.schedule(case.graph, mach, **case.options, time_limit=30, method="decompose")
        out = cases.Outcome(case, prob, ans, sched=s)
        assert not cases.judge(out) and not cases.cross_check(out)


def test_an_unknown_method_is_refused() -> None:
    with pytest.raises(OptionsError, match="method 'bogus'"):
        twill.schedule(figure1_graph(), "h100", method="bogus")


def test_figure1_by_decomposition() -> None:
    # the hand-derived optimum of test_oracle.test_figure1_by_hand: (2, 4, 1)
    s = twill.schedule(figure1_graph(), "h100", method="decompose")
    assert (s.ii, s.length, len(s.warp_groups), s.certificate.proven_optimal) == (2, 4, 1, True)


@pytest.mark.parametrize("backend", available_backends())
def test_assumptions_hold_for_one_check_and_name_their_core(backend: str) -> None:
    # a -> x >= 5 and b -> x <= 3 cannot both hold; c is unrelated; nothing is asserted of a, b, c
    with SmtSession(backend) as sess:
        m = sess.mgr
        a, b, c = (m.Symbol(n) for n in "abc")
        x = m.Symbol("x", INT)
        sess.add(m.Implies(a, m.GE(x, m.Int(5))))
        sess.add(m.Implies(b, m.LE(x, m.Int(3))))
        sess.assume([a, b, c])
        assert sess.check() == CheckResult.UNSAT
        core = set(sess.unsat_core())
        assert {a, b} <= core <= {a, b, c}
        sess.assume([a, c])
        assert sess.check() == CheckResult.SAT
        assert sess.value(x) >= 5
        sess.assume(None)  # no assumptions: the assertions alone are satisfiable
        assert sess.check() == CheckResult.SAT
        assert sess.unsat_core() == []
