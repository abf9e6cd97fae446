"""Each reduction of twill/model/reductions.py, with its precondition taken away, makes the search
disagree with the independent oracle (tests/joint_oracle.py) on a loop where the precondition fails:
the property tests can see a broken reduction, so their passing means something. So does liveness that
stops at a view instead of following it to the view's readers."""

from __future__ import annotations

import dataclasses

import pytest
import test_oracle as cases
import test_stage_bound as bound_cases

import twill
import twill.model.formulation as formulation
import twill.model.stagebound as stagebound
import twill.search.certificate as certificate
from twill.model.problem import Problem
from twill.model.reductions import BudgetArrangement, involution


def _positional(problem, pool):  # type: ignore[no-untyped-def]
    """The old rule: the plan's budgets in the order given, every compute group interchangeable."""
    plan = problem.options.register_plan
    first = 1 if problem.has_vl else 0
    return [BudgetArrangement(tuple(plan) if plan else None, (tuple(range(first, pool)),))]


def _blind_to_apart(problem):  # type: ignore[no-untyped-def]
    """The old rule: a tile swap that does not look at ``apart``."""
    return involution(dataclasses.replace(problem, options=dataclasses.replace(problem.options, apart=())))


@pytest.mark.parametrize("repro", [cases.test_repro_plan_order_one_op, cases.test_repro_plan_order_groups])
def test_group_symmetry_without_equal_budgets_disagrees(monkeypatch: pytest.MonkeyPatch, repro) -> None:
    repro()  # the real rule agrees with the oracle
    monkeypatch.setattr(formulation, "budget_arrangements", _positional)  # both encodings read it
    with pytest.raises((AssertionError, pytest.fail.Exception)):
        repro()


def test_tile_swap_blind_to_apart_disagrees(monkeypatch: pytest.MonkeyPatch) -> None:
    cases.test_repro_apart_mirror()
    monkeypatch.setattr(formulation, "involution", _blind_to_apart)
    with pytest.raises((AssertionError, pytest.fail.Exception)):
        cases.test_repro_apart_mirror()


def test_stage_windows_without_the_stage_bound_disagree(monkeypatch: pytest.MonkeyPatch) -> None:
    cases.test_repro_stage_window()
    monkeypatch.setattr(certificate, "stage_bounds",  # "one stage is all there is"
                        lambda problem, lo, hi, area=True: dict.fromkeys(range(lo, hi + 1), 1))
    with pytest.raises((AssertionError, pytest.fail.Exception)):
        cases.test_repro_stage_window()


def _stops_at_views(problem, name, carrier):  # type: ignore[no-untyped-def]
    """Liveness that ends a value at a view instead of following it to the view's readers."""
    return [(e, e.distance) for e in problem.out_edges(name) if e.carrier == carrier]


@pytest.mark.parametrize("seed", [141, 179])  # a register value (141) and an SMEM value (179) via a view
def test_liveness_that_stops_at_views_disagrees(monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    import twill.model.liveness as liveness

    def disagreements() -> list[str]:
        try:
            out = cases.outcome.__wrapped__(seed)  # not the cached outcome
        except Exception as exc:  # the verifier, on its own rules, refuses the mutated search's schedule
            return [f"{type(exc).__name__}: {exc}"]
        return cases.judge(out) + cases.cross_check(out)

    assert any(op.view for op in cases.random_case(seed).graph.ops)
    assert not disagreements()
    monkeypatch.setattr(formulation, "value_uses", _stops_at_views)  # both encodings read it
    monkeypatch.setattr(liveness, "value_uses", _stops_at_views)  # the lazy checks' occupancy
    assert disagreements()


def test_a_stage_bound_without_area_slack_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The area bound with no slack to spare (every gap past a value's own cycles "too dear"): too small
    where a value must be held across stages."""
    problem = bound_cases.held(cases.machine())
    assert not bound_cases.bound_failures(problem, range(1, 4))[0]
    real = stagebound.area_slacks
    monkeypatch.setattr(stagebound, "area_slacks",
                        lambda p, lo, hi=None: {k: min(v, 0.0) for k, v in real(p, lo, hi).items()})
    assert bound_cases.bound_failures(problem, range(1, 4))[0]


def test_a_stage_bound_blind_to_handoffs_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """Both the per-op bound and the area bound with a hand-off costing no delay: too small where Y
    waits a whole hand-off on another group."""
    problem = bound_cases.regs_bind(twill.load_machine("h100"))
    search = bound_cases.REGS_BIND_SEARCH
    assert not bound_cases.bound_failures(problem, range(1, 4), search)[0]
    monkeypatch.setattr(Problem, "crossing_delay", lambda self, e: e.latency)
    assert bound_cases.bound_failures(problem, range(1, 4), search)[0]
