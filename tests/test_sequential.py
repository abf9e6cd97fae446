"""The fallback's sequential schedule (twill.search.sequential) and its group assignment at fixed times
(twill.solvers.assign), judged by twill.verify and by enumerating every assignment.

On the random tiny loops of tests/test_oracle.py (register plans and stage limits dropped: the first is
refused by design, the second does not depend on the groups):
- the sequential times keep every edge delay, unit capacity, issue and blocking rule for every group
  assignment that crosses no edge of :func:`twill.solvers.assign.self_colliding` (the precondition
  :func:`twill.solvers.assign.assign_groups` states; those edges collide in any schedule);
- :func:`assign_groups` is exact at those times: it returns an assignment exactly when one of all the
  assignments passes ``twill.verify.violations``, and the one it returns passes. A mutant model that
  ignores the readers (every register value dead at its op's end) is caught.
And the 45-op synthetic loop, where every split of the old fallback failed verification at every II,
gets a verified sequential schedule.
"""

from __future__ import annotations

import itertools
import math
import sys
import time
from pathlib import Path

import pytest
import test_oracle as cases

from twill.model.bounds import bounds
from twill.model.formulation import pool_size
from twill.model.problem import Problem
from twill.search.certificate import finish
from twill.search.run import Run
from twill.search.sequential import oldest_first_order, register_order, sequential_schedule, sequential_times
from twill.search.swp import needed_budgets
from twill.solvers import assign
from twill.solvers.assign import assign_groups, self_colliding
from twill.solvers.joint.result import JointResult
from twill.solvers.status import CheckResult
from twill.verify import violations

pytest.importorskip("ortools")
pytestmark = pytest.mark.filterwarnings("ignore:prefetch. the ")

ROOT = Path(__file__).resolve().parents[1]
SEEDS = range(0, 60)
TIMING = {"dependence", "capacity", "issue", "blocking", "completion"}
"""Verification families the times alone decide (the sequential times must keep them for any groups)."""


def _problem(seed: int) -> Problem | None:
    case = cases.random_case(seed)
    options = {k: v for k, v in case.options.items() if k not in ("register_plan", "max_stages", "max_ii")}
    try:
        return cases.problem_of(case.graph, cases.machine(case.smem), **options)
    except Exception:  # an option combination Options or build_problem rejects (as test_oracle)
        return None


_RUNS: dict[int, tuple[Problem, Run]] = {}


def _run(p: Problem) -> Run:
    """One search record per problem, so its stage bounds (a linear program per bucket of IIs) are
    computed once, not once per assignment; ``finish`` reads the record and adds only to that cache."""
    if id(p) not in _RUNS:
        _RUNS[id(p)] = (p, Run(p, bounds(p), None, None, time.monotonic(), [], {}, {}, methods="test"))
    return _RUNS[id(p)][1]


def _errors(p: Problem, ii: int, start: dict[str, int], group: dict[str, int]) -> list:
    """``twill.verify.violations`` of the schedule ``start`` / ``group`` at ``ii``, budgets the least
    that hold its registers."""
    run = _run(p)
    warps = {g: max([p.op(n).warps for n in group if group[n] == g] + [1]) for g in set(group.values())}
    warps = {g: p.resources.group_threads(w) // 32 for g, w in warps.items()}
    length = max(start[op.name] + op.cycles for op in p.ops)
    res = JointResult(ii, math.ceil(length / ii), CheckResult.SAT, start, group,
                      needed_budgets(p, ii, start, group), warps, length, {"length": False})
    return violations(finish(run, ("test", ii, res, None), None, {}, "swp"))


def _assignments(p: Problem):
    """Every assignment: variable-latency ops on group 0, compute ops on the pool's other groups."""
    first = 1 if p.has_vl else 0
    compute = [op.name for op in p.ops if not op.variable_latency]
    groups = range(first, max(first + 1, pool_size(p)))
    for choice in itertools.product(groups, repeat=len(compute)):
        out = {op.name: 0 for op in p.ops if op.variable_latency}
        out.update(zip(compute, choice, strict=True))
        yield out


def _orders(p: Problem) -> list[list[str]]:
    return [o for o in (oldest_first_order(p), register_order(p)) if o is not None]


def test_sequential_times_hold_for_every_assignment() -> None:
    checked = 0
    for seed in SEEDS:
        p = _problem(seed)
        if p is None:
            continue
        colliding = self_colliding(p)
        for order in _orders(p):
            assert sorted(order) == sorted(p.names)
            start, ii = sequential_times(p, order)
            for group in _assignments(p):
                if any(group[p.edges[i].src] != group[p.edges[i].dst] for i in colliding):
                    continue
                bad = [v for v in _errors(p, ii, start, group) if v.family in TIMING]
                assert not bad, f"seed {seed}: the sequential times break {bad[0]} at groups {group}"
                checked += 1
    assert checked > 500


def _judge(seeds=SEEDS) -> tuple[int, list[str]]:
    """(loops with some valid assignment at the sequential times, disagreements with enumeration)."""
    feasible, bad = 0, []
    for seed in seeds:
        p = _problem(seed)
        if p is None:
            continue
        shapes = {p.resources.group_threads(op.warps) for op in p.ops if not op.variable_latency}
        for order in _orders(p)[:1]:
            start, ii = sequential_times(p, order)
            valid = [g for g in _assignments(p) if not _errors(p, ii, start, g)]
            got = assign_groups(p, ii, start, time.monotonic() + 20)
            feasible += bool(valid)
            if got is not None and _errors(p, ii, start, got):
                bad.append(f"seed {seed}: the assignment {got} fails {_errors(p, ii, start, got)[0]}")
            elif got is None and valid and len(shapes) <= 1:
                bad.append(f"seed {seed}: no assignment found, but {valid[0]} passes verification")
    return feasible, bad


def test_assign_groups_is_exact_at_fixed_times() -> None:
    feasible, bad = _judge()
    assert not bad, "\n".join(bad[:5])
    assert feasible > 30


def test_a_mutant_that_ignores_the_readers_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(assign, "value_uses", lambda p, name, carrier: [])
    _, bad = _judge()
    assert bad, "the mutant (every value dead at its op's end, readers ignored) was not caught"


def test_the_45_op_synthetic_loop_gets_a_verified_sequential_schedule() -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from synthetic import synthetic_graph

    from twill.ir.machine import load_machine
    from twill.model.problem import Options, build_problem
    from twill.solvers.normalize import normalize_problem

    p, _ = normalize_problem(build_problem(synthetic_graph(45), load_machine("h100"), Options()))
    found = sequential_schedule(p, 10**6, time.monotonic() + 60)
    assert found is not None
    ii, start, group, _ = found
    assert not _errors(p, ii, start, group)
    # the II is the op slots' span: at least every op's cycles one after another
    assert ii >= sum(op.cycles for op in p.ops)


def test_a_stopped_search_whose_splits_all_fail_returns_the_sequential_schedule(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from test_schedule import fa_like_graph

    import twill
    import twill.search.algorithm1 as algorithm1
    import twill.search.fallback as fallback
    import twill.search.ranges as ranges
    from twill.search.sequential import SEQUENTIAL_HOW

    for module in (fallback, ranges):  # no split's modulo schedule, no schedule without overlap
        monkeypatch.setattr(module, "iterative_modulo_schedule", lambda problem, ii: None)
    monkeypatch.setattr(fallback, "_no_overlap", lambda p, group, hi: None)
    monkeypatch.setattr(fallback, "_list_schedule", lambda p, group, hi: None)
    monkeypatch.setattr(algorithm1, "joint_probes", lambda *args, **kwargs: None)
    monkeypatch.setattr(fallback, "FALLBACK_MIN_S", 10.0)  # the fallback's seconds, whatever the load
    with pytest.warns(twill.TwillWarning, match="heuristic"):
        s = twill.schedule(fa_like_graph(), "h100", time_limit=0.001)  # stopped before any II
    assert not violations(s)
    assert s.certificate.heuristic and not s.certificate.proven_optimal
    assert any(SEQUENTIAL_HOW in n for n in s.certificate.notes)
    assert s.certificate.ii_bound <= s.ii
