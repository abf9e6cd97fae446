"""The time limit holds when the any-time fallback runs: its budget ends ``max(0.1 T, 0.2 s)`` (at most
30 s) after the limit, counted from the limit, not from when the search noticed it. A clock the test
drives (no wall-clock timing here; the measured overshoot is in benchmarks/solve_times.py --overshoot)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from test_schedule import fa_like_graph

import twill.search.fallback as fallback
from twill.ir.machine import load_machine
from twill.model.bounds import bounds
from twill.model.problem import build_problem
from twill.search.run import Run


@pytest.mark.parametrize(("limit", "budget"), [(1.0, 0.2), (2.0, 0.2), (5.0, 0.5), (10.0, 1.0), (60.0, 6.0),
                                               (600.0, 30.0)])
def test_the_budget_is_a_tenth_of_the_limit_with_a_floor_of_a_fifth_of_a_second(limit: float,
                                                                                  budget: float) -> None:
    assert fallback.fallback_budget(limit) == pytest.approx(budget)


class Clock:
    """``time.monotonic`` for the fallback module: advances ``step`` seconds per modulo-schedule try."""

    def __init__(self, now: float, step: float) -> None:
        self.now, self.step, self.tries = now, step, []

    def monotonic(self) -> float:
        return self.now

    def ims(self, problem, ii):  # no modulo schedule at any II: the fallback tries until its time is up
        self.tries.append(self.now)
        self.now += self.step
        return None


@pytest.mark.parametrize(("limit", "late"), [(1.0, 0.0), (2.0, 0.15), (5.0, 0.4), (10.0, 0.3), (60.0, 2.0)])
def test_the_fallback_ends_by_the_limit_plus_its_budget_whenever_the_search_stopped(
        monkeypatch: pytest.MonkeyPatch, limit: float, late: float) -> None:
    """The search noticed the limit ``late`` seconds after it (a solver call that stopped late): the
    fallback's tries all start before ``T + fallback_budget(T)``; before, its budget was counted from
    when it started, with a 1 s floor (2.0 s, 1.55 s, 0.9 s over at T = 1, 2, 5)."""
    machine = load_machine("h100")
    p = build_problem(fa_like_graph(), machine)
    answer_by = limit + fallback.fallback_budget(limit)
    run = Run(p, bounds(p), limit, None, 0.0, [], {}, {}, answer_by=answer_by)
    clock = Clock(limit + late, step=fallback.fallback_budget(limit) / 25)  # time runs out before the IIs
    monkeypatch.setattr(fallback, "time", SimpleNamespace(monotonic=clock.monotonic))
    monkeypatch.setattr(fallback, "iterative_modulo_schedule", clock.ims)
    monkeypatch.setattr(fallback, "_list_schedule", lambda p, group, hi: None)
    monkeypatch.setattr(fallback, "_no_overlap", lambda p, group, hi: None)
    assert fallback.heuristic_fallback(run, 1, 10**6) is None
    assert clock.tries, "the fallback made no try"
    assert max(clock.tries) < answer_by
    # and it used its time: the last try began within two steps of the end it keeps for the certificate
    reserve = fallback.FINISH_RESERVE * fallback.fallback_budget(limit)
    assert max(clock.tries) >= answer_by - reserve - 2 * clock.step


def test_a_search_that_ran_past_the_budget_still_gets_one_short_try(monkeypatch: pytest.MonkeyPatch) -> None:
    machine = load_machine("h100")
    p = build_problem(fa_like_graph(), machine)
    run = Run(p, bounds(p), 1.0, None, 0.0, [], {}, {}, answer_by=1.2)
    clock = Clock(1.5, step=0.01)
    monkeypatch.setattr(fallback, "time", SimpleNamespace(monotonic=clock.monotonic))
    monkeypatch.setattr(fallback, "iterative_modulo_schedule", clock.ims)
    monkeypatch.setattr(fallback, "_list_schedule", lambda p, group, hi: None)
    monkeypatch.setattr(fallback, "_no_overlap", lambda p, group, hi: None)
    fallback.heuristic_fallback(run, 1, 10**6)
    assert clock.tries and max(clock.tries) < 1.5 + fallback.FALLBACK_LAST_S
