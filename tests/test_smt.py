"""The SMT session layer: pySMT's per-term type checks are off by default and every formula twill
states is well-typed when they are on."""

from __future__ import annotations

from pathlib import Path

import pytest
from pysmt.exceptions import PysmtTypeError
from pysmt.typing import INT

import twill
from twill.model.bounds import bounds
from twill.model.problem import Options, build_problem
from twill.solvers.joint import smt as joint
from twill.solvers.modulo.methods import modulo_schedule
from twill.solvers.normalize import normalize_problem
from twill.solvers.smt import SmtSession
from twill.solvers.status import CheckResult

ROOT = Path(__file__).resolve().parents[1]


def test_a_mistyped_assertion_is_named_when_type_checks_are_on() -> None:
    with SmtSession(type_check=True) as sess:
        x = sess.mgr.Symbol("x", INT)
        with pytest.raises(PysmtTypeError):
            sess.add(sess.mgr.Plus(x, sess.mgr.Int(1)))  # an integer term is not an assertion


def test_answers_agree_with_type_checks_on_and_off() -> None:
    for checked in (False, True):
        with SmtSession(type_check=checked) as sess:
            m = sess.mgr
            x, y = m.Symbol("x", INT), m.Symbol("y", INT)
            sess.add(m.And(m.LE(m.Plus(x, m.Int(3)), y), m.LE(y, m.Int(5)), m.GE(x, m.Int(3))))
            assert sess.check() == CheckResult.UNSAT  # x + 3 <= y <= 5 needs x <= 2
        with SmtSession(type_check=checked) as sess:
            m = sess.mgr
            x = m.Symbol("x", INT)
            sess.add(m.And(m.GE(x, m.Int(2)), m.LE(x, m.Int(2))))
            assert sess.check() == CheckResult.SAT
            assert sess.value(x) == 2


def test_every_joint_formula_is_well_typed(monkeypatch: pytest.MonkeyPatch) -> None:
    """State, solve and tighten the joint formula of the FA3 forward (every family, lazy checks included)
    with pySMT's type checks on: a mistyped term would raise PysmtTypeError."""
    made: list[SmtSession] = []

    def checked(backend: str = "yices", *, type_check: bool = False) -> SmtSession:
        made.append(SmtSession(backend, type_check=True))
        return made[-1]

    monkeypatch.setattr(joint, "SmtSession", checked)
    entry = f"{ROOT}/examples/flash_attention_fwd_subtiled.py::attn_fwd_subtiled_sm90"
    g = twill.graph_from_kernel(entry, machine="h100")
    problem, _ = normalize_problem(build_problem(g, twill.load_machine("h100"), Options()))
    mii = bounds(problem).mii
    res = joint.solve_joint(problem, mii, 2, min_length=modulo_schedule(problem, mii).length)
    assert len(made) == 1
    assert res.status == CheckResult.SAT and res.checks > 1  # solved, then tightened under push/pop


def test_a_formula_stated_past_the_deadline_is_undecided_not_refuted(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stating a formula honours the deadline (a closing range query over a wide II range takes tens of
    seconds on a 60-op loop): past it, the session stops within DEADLINE_EVERY assertions and the
    question comes back TIMEOUT with nothing refuted; with the deadline ahead the same question is answered
    with the whole formula stated."""
    import time

    from twill.solvers import smt

    made: list[SmtSession] = []

    def counted(backend: str = "yices", *, type_check: bool = False) -> SmtSession:
        made.append(SmtSession(backend))
        return made[-1]

    monkeypatch.setattr(joint, "SmtSession", counted)
    entry = f"{ROOT}/examples/flash_attention_fwd_subtiled.py::attn_fwd_subtiled_sm90"
    g = twill.graph_from_kernel(entry, machine="h100")
    problem, _ = normalize_problem(build_problem(g, twill.load_machine("h100"), Options()))
    mii = bounds(problem).mii
    lo = max(1, mii - 4)
    ahead = joint.solve_range(problem, lo, mii - 1, 3, deadline=time.monotonic() + 120)
    assert ahead.status == CheckResult.UNSAT  # the MII is a lower bound: nothing below it
    whole = made[-1].assertions
    assert whole > 4 * smt.DEADLINE_EVERY
    past = time.monotonic() - 1.0
    rr = joint.solve_range(problem, lo, mii - 1, 3, deadline=past)
    assert rr.status == CheckResult.TIMEOUT and rr.refuted == lo - 1
    assert made[-1].assertions <= smt.DEADLINE_EVERY
    res = joint.solve_joint(problem, mii, 2, deadline=past)
    assert res.status == CheckResult.TIMEOUT and not res.start
    assert made[-1].assertions <= smt.DEADLINE_EVERY
