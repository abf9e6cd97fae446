"""Where the goal phase probes (``twill.solvers.joint.smt.PROBE_ORDER``) changes the checks, never the
values: on random tiny loops the goals of :func:`solve_joint` at the oracle's II equal the exact oracle's
(``tests/joint_oracle.py``: length, groups, hand-off latency, register file) and plain bisection's, and
an unsound probe rule (a goal stopped at its first improving model) is caught by the same comparison.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import test_oracle as cases
from joint_oracle import OracleLimit, oracle

from twill.model.bounds import bounds
from twill.solvers.joint import smt as joint_smt
from twill.solvers.joint.result import GOALS
from twill.solvers.joint.smt import PROBE_ORDER, solve_joint
from twill.solvers.status import CheckResult

SEEDS = range(0, 160)
"""Random loops of :func:`cases.random_case` (those with a register plan are left out: the oracle's
hand-off and register goals are lexicographic only within one arrangement of a plan)."""
NODE_LIMIT = 100_000


def _questions() -> list[tuple[int, object, int, tuple[int, int, int, int]]]:
    """(seed, problem, stages, oracle's (L, groups, hand-off, register file)) at the least II the oracle
    finds, for the loops it decides."""
    out = []
    for seed in SEEDS:
        case = cases.random_case(seed)
        if case.options.get("register_plan"):
            continue
        try:
            prob = cases.problem_of(case.graph, cases.machine(case.smem), **case.options)
        except Exception:  # an option combination Options or build_problem rejects
            continue
        stages = cases.STAGES if case.options["max_stages"] is None else case.options["max_stages"]
        try:
            ans = oracle(prob, max_ii=cases.MAX_II, max_stages=stages, node_limit=NODE_LIMIT)
        except OracleLimit:
            continue
        if ans is None or ans.ii < max(1, bounds(prob).mii):
            continue
        out.append((seed, prob, stages, (ans.ii, ans.length, ans.groups, ans.handoff, ans.register_file)))
    return out


def _goals(prob, ii: int, stages: int) -> tuple[int, ...] | None:
    """(II, L, groups, hand-off latency, register file, SMEM footprint) of ``solve_joint``'s schedule, all
    goals proven, or None."""
    res = solve_joint(prob, ii, stages, first=1)
    if res.status != CheckResult.SAT or not all(res.proven.get(g, False) for g in
                                                ("length", "groups", "handoffs", "registers")):
        return None
    threads = prob.resources.group_threads
    regs = sum(threads(res.group_warps[w]) * b for w, b in res.budgets.items())
    handoff = sum(e.cross for e in prob.edges if res.group[e.src] != res.group[e.dst])
    return (ii, res.length, len(res.budgets), handoff, regs)


def _disagreements(questions) -> tuple[int, list[str]]:
    bad, asked = [], 0
    for seed, prob, stages, want in questions:
        got = _goals(prob, want[0], stages)
        if got is None:
            bad.append(f"seed {seed}: no proven schedule at II {want[0]}, oracle {want}")
            continue
        asked += 1
        if got != want:
            bad.append(f"seed {seed}: solve_joint {got}, oracle {want}")
    return asked, bad


@pytest.fixture(scope="module")
def questions():
    return _questions()


def test_goals_with_the_probe_order_equal_the_oracle(questions) -> None:
    assert set(PROBE_ORDER.values()) <= {"top", "climb", "bisect"}
    asked, bad = _disagreements(questions)
    assert asked >= 40, f"only {asked} loops decided"
    assert not bad, "\n".join(bad[:6])


def test_plain_bisection_gives_the_same_goals(questions, monkeypatch) -> None:
    # the reference: every goal bisected from its lower bound, as before the probe order
    ordered = [_goals(prob, want[0], stages) for _, prob, stages, want in questions[:40]]
    monkeypatch.setattr(joint_smt, "PROBE_ORDER", dict.fromkeys(GOALS, "bisect"))
    plain = [_goals(prob, want[0], stages) for _, prob, stages, want in questions[:40]]
    assert ordered == plain


def test_a_goal_left_at_its_first_model_is_caught(questions, monkeypatch) -> None:
    # unsound: after an encoding's first schedule every probe counts as refuted (undecided taken for
    # UNSAT), so each goal keeps the first model's value, "proven"
    real = joint_smt.check_lazily
    found: dict[int, object] = {}  # id -> encoder (kept, so that an id is not reused)

    def hasty(enc, sess, deadline):
        if id(enc) in found:
            return CheckResult.UNSAT
        status = real(enc, sess, deadline)
        if status == CheckResult.SAT:
            found[id(enc)] = enc
        return status

    monkeypatch.setattr(joint_smt, "check_lazily", hasty)
    _, bad = _disagreements(questions)
    assert bad, "a goal left unproven went unnoticed"
