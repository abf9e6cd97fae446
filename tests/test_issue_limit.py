"""The issue limit: one issue stream per warp group, so the ``issue_cycles`` of a group's ops sum to at
most II (docs/model.md §5, the ``issue`` family). Every value below is derived by hand from two ops
that share no unit and no edge, so only the issue stream can make them wait for each other."""

from __future__ import annotations

from dataclasses import replace

import pytest
import test_oracle as cases
from joint_oracle import check, oracle

import twill
import twill.solvers.joint.cpsat as joint_cpsat
import twill.solvers.joint.decompose as decompose
from twill.errors import ScheduleError, SolverError
from twill.ir.graph import Graph
from twill.model.formulation import Formulation
from twill.schedule import Schedule, slots_from
from twill.solvers.joint.encoding import Encoder
from twill.solvers.joint.smt import solve_joint, solve_range
from twill.verify import verify, violations


def two_streams() -> Graph:
    """An ALU op of 3 cycles and a MUFU op of 2, both synchronous (they issue for their whole length;
    the costs keep their cycles under normalization)."""
    g = Graph("two_streams")
    g.add_op("A", "alu", busy={"alu": 3}, latency=3, issue_cycles=3, warps=4)
    g.add_op("B", "exp", busy={"mufu": 2}, latency=2, issue_cycles=2, warps=4)
    return g


def key(s: Schedule) -> tuple[int, int, int]:
    return (s.ii, s.length, len(s.warp_groups))


# By hand: the ALU is busy 3 cycles and the MUFU 2 (ResMII 3), there are no edges (RecMII 0). On one
# warp group the stream issues 3 + 2 = 5 cycles per iteration, so II >= 5; at II 5 both ops start at 0
# (interleaving inside the II is allowed) and A ends at 3: (II, L, groups) = (5, 3, 1). With free groups
# the two ops take a group each and II stays at ResMII 3: (3, 3, 2). Without the limit both would have
# been (3, 3, 1).
ONE_GROUP = (5, 3, 1)
FREE = (3, 3, 2)


@pytest.mark.parametrize("solver", ["yices", "cpsat"])
def test_one_group_waits_for_its_issue_stream(solver: str) -> None:
    s = twill.schedule(two_streams(), cases.machine(), max_groups=1, solver=solver)
    assert key(s) == ONE_GROUP
    assert s.certificate.proven_optimal
    assert violations(s) == []


def test_decomposed_search_agrees() -> None:
    s = twill.schedule(two_streams(), cases.machine(), max_groups=1, method="decompose")
    assert key(s) == ONE_GROUP and s.certificate.proven_optimal


@pytest.mark.parametrize("solver", ["yices", "cpsat"])
def test_free_groups_split_the_issue(solver: str) -> None:
    s = twill.schedule(two_streams(), cases.machine(), solver=solver)
    assert key(s) == FREE
    assert s.group["A"] != s.group["B"]


def test_oracle_agrees() -> None:
    p = cases.problem_of(two_streams(), cases.machine(), max_groups=1)
    ans = oracle(p, max_ii=10, max_stages=2)
    assert (ans.ii, ans.length, ans.groups) == ONE_GROUP
    p = cases.problem_of(two_streams(), cases.machine())
    ans = oracle(p, max_ii=10, max_stages=2)
    assert (ans.ii, ans.length, ans.groups) == FREE


def test_oracle_check_rejects_the_old_schedule() -> None:
    # The oracle's own rule (no code shared with twill.verify): one group at II 3 issues 3 + 2 = 5.
    p = cases.problem_of(two_streams(), cases.machine(), max_groups=1)
    bad = check(p, 3, 3, {"A": 0, "B": 0}, {"A": 0, "B": 0})
    assert any(b.startswith("issue: group 0 issues for 5 > II 3") for b in bad), bad
    assert check(p, 5, 3, {"A": 0, "B": 0}, {"A": 0, "B": 0}) == []


def test_range_query_refutes_below_the_issue_sum() -> None:
    p = cases.problem_of(two_streams(), cases.machine(), max_groups=1)
    assert solve_range(p, 3, 4, 2).status.value == "unsat"
    found = solve_range(p, 3, 8, 2)
    assert found.ii == 5


def test_asserted_groups_of_a_probe_obey_the_limit() -> None:
    # A probe asserts its groups (twill.search.probe): both ops on group 0 leave no schedule below II 5.
    p = cases.problem_of(two_streams(), cases.machine())
    together = {"A": 0, "B": 0}
    assert solve_joint(p, 3, 1, groups=together).status.value == "unsat"
    assert solve_joint(p, 4, 1, groups=together).status.value == "unsat"
    assert solve_joint(p, 5, 1, groups=together).status.value == "sat"
    assert solve_joint(p, 3, 1, groups={"A": 0, "B": 1}).status.value == "sat"


def over_budget(s: Schedule, ii: int) -> Schedule:
    """``s`` (one group) re-slotted at ``ii``: what the solver without the limit returned."""
    return replace(s, ii=ii, slots=slots_from(s.start, s.group, ii, s.problem.names))


def test_verify_rejects_the_old_schedule() -> None:
    s = twill.schedule(two_streams(), cases.machine(), max_groups=1)
    assert s.length == 3 and set(s.group.values()) == {0}
    old = over_budget(s, 3)  # units, dependences, registers all fit at II 3; only the stream does not
    found = violations(old)
    assert [e.family for e in found] == ["issue"]
    with pytest.raises(ScheduleError) as info:
        verify(old)
    assert info.value.op == "A"
    assert "warp group 0 issues for 5 cycles per iteration (A 3 + B 2) > II 3" in str(info.value)
    assert violations(over_budget(s, 4)) and violations(over_budget(s, 5)) == []  # exactly full is fine


def test_formulation_lists_every_issuer() -> None:
    p = cases.problem_of(two_streams(), cases.machine(), max_groups=1)
    f = Formulation.of(p)
    assert f.issue == (("A", 3), ("B", 2))
    assert f.issue_load(0) == (("A", 3), ("B", 2))


@pytest.mark.parametrize("target", [(Encoder, "issue_limit"), (joint_cpsat.JointModel, "issue_limit")])
def test_without_the_limit_the_search_is_caught(monkeypatch: pytest.MonkeyPatch, target) -> None:
    # The mutation: an encoding that forgets the limit finds the old II 3 one-group schedule, which
    # verify refuses.
    monkeypatch.setattr(*target, lambda self: None)
    solver = "yices" if target[0] is Encoder else "cpsat"
    with pytest.raises(SolverError, match=r"fails verification: issue: warp group 0 issues for 5"):
        twill.schedule(two_streams(), cases.machine(), max_groups=1, solver=solver)


def test_master_prunes_choices_over_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    # The master's group-only copy of the limit: with the subproblem's copy taken away, the decomposed
    # search still never returns a one-group schedule at II 3 (free groups: it must split A and B).
    monkeypatch.setattr(joint_cpsat.JointModel, "issue_limit", lambda self: None)
    monkeypatch.setattr(Encoder, "issue_limit", lambda self: None)
    out = decompose.benders(cases.problem_of(two_streams(), cases.machine()), 3, 1, subproblem="cpsat")
    assert out.status.value == "sat"
    assert out.group["A"] != out.group["B"]


def test_twill_swp_split_waits_for_its_issue_stream() -> None:
    # Twill-SWP puts every fixed-latency op on one consumer group: the modulo schedule at II 3 and 4 fails
    # verify (issue 5 > II), so the first split kept is at II 5.
    s = twill.schedule(two_streams(), cases.machine(), strategy="swp")
    assert s.ii == 5 and set(s.group.values()) == {0}
    assert violations(s) == []
