"""Seeding a slow first window with probes (twill.search.seed): sound answers, honest certificates.

Judged by the independent oracle of tests/joint_oracle.py on the random tiny loops of tests/test_oracle.py.
Seeding is forced on every search: the window's first solve is made to run out of its slice at once
(nothing refuted), so the probes seed it and the goals are tightened from their schedule. Without a time
limit the goals then finish, so twill's proven answer must be the oracle's; a mutant that keeps the
probe's asserted groups through the goals (proving them at one assignment only) is caught.
"""

from __future__ import annotations

import sys
import time
import warnings
from pathlib import Path

import pytest
import test_oracle as cases

import twill
from twill.errors import InfeasibleError, OptionsError, ResourceError
from twill.render.show import to_text
from twill.search import decide, seed
from twill.solvers.joint import smt
from twill.solvers.joint.result import JointResult
from twill.solvers.status import CheckResult
from twill.verify import violations

sys.path.insert(0, str(Path(__file__).parent))
from joint_oracle import OracleLimit, check, oracle

pytestmark = pytest.mark.filterwarnings("ignore:prefetch. the ")

SEEDS = range(0, 40)  # 60 until 2026-12-02 (CI time); the counts the tests require still hold
NODE_LIMIT = 100_000


def _force_seeding(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every search's first window cut by its slice before any check (nothing refuted): the probes seed
    it. Returns a list that gets one entry per seeded window."""
    real = decide.solve_joint
    seeded: list[int] = []

    def cut(problem, ii, stages, **kw):
        if kw.get("model_by") is None:
            return real(problem, ii, stages, **kw)
        seeded.append(ii)
        return JointResult(ii, stages, CheckResult.TIMEOUT, length_low=kw.get("min_length", 1))

    monkeypatch.setattr(decide, "solve_joint", cut)
    monkeypatch.setattr(seed, "SEED_AFTER_S", 0.0)
    monkeypatch.setattr(seed, "SEED_MIN_S", 0.0)
    return seeded


def _judged(seeds=SEEDS, time_limit: float | None = None,
            until: str | None = None) -> tuple[int, int, list[str]]:
    """(loops solved and proven, of them with the answer at a seeded II, disagreements with the oracle).
    With ``until``, stop at the first disagreement that contains it (a mutant caught needs no more loops)."""
    proven_n, at_seed_n, bad = 0, 0, []
    for s_ in seeds:
        if until is not None and any(until in b for b in bad):
            break
        case = cases.random_case(s_)
        mach = cases.machine(case.smem)
        try:
            prob = cases.problem_of(case.graph, mach, **case.options)
        except Exception:  # an option combination Options or build_problem rejects (as test_oracle)
            continue
        stages = cases.STAGES if case.options["max_stages"] is None else case.options["max_stages"]
        try:
            ans = oracle(prob, max_ii=cases.MAX_II, max_stages=stages, node_limit=NODE_LIMIT)
        except OracleLimit:
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                s = twill.schedule(case.graph, mach, **case.options, time_limit=time_limit)
        except (InfeasibleError, ResourceError, OptionsError):
            if ans is not None and ans.ii <= cases.MAX_II:
                bad.append(f"seed {s_}: twill found nothing, the oracle {ans.key}")
            continue
        own = check(s.problem, s.ii, s.length, s.start, s.group)
        if own:
            bad.append(f"seed {s_}: twill's schedule fails the oracle's check: {own}")
            continue
        tw = cases.twill_key(s)
        bounded = case.options.get("max_stages") is not None
        within = bounded or s.stages <= cases.STAGES
        if ans is None:
            if within:
                bad.append(f"seed {s_}: twill {tw}, the oracle nothing")
            continue
        ok = ans.key[:3]
        if within and tw < ok:
            bad.append(f"seed {s_}: twill {tw} beats the oracle's optimum {ok}")
        if s.certificate.ii_optimal(s.ii) and within and s.ii != ans.ii:
            bad.append(f"seed {s_}: twill says II {s.ii} is optimal, the oracle's is {ans.ii}")
        if s.certificate.proven_optimal:
            proven_n += 1
            at_seed_n += any(n.startswith("seed:") for n in s.certificate.notes)
            if (bounded and tw != ok) or (not bounded and tw > ok):
                bad.append(f"seed {s_}: twill proven {tw}, oracle {ok}")
    return proven_n, at_seed_n, bad


@pytest.mark.parametrize("time_limit", [None, 60.0])
def test_seeded_searches_match_the_oracle(monkeypatch: pytest.MonkeyPatch, time_limit: float | None) -> None:
    # without a limit the goals run over every assignment at once; with one, first at the probe's
    # groups (SEED_GROUPS_SHARE of the time left), then over every assignment from that incumbent
    seeded = _force_seeding(monkeypatch)
    proven_n, at_seed_n, bad = _judged(time_limit=time_limit)
    assert not bad, bad[:5]
    assert seeded, "no window was seeded"
    assert proven_n >= 20, f"only {proven_n} loops proven"
    # the test means something only if many answers came from a seeded window's goals
    assert at_seed_n >= 10, (at_seed_n, proven_n)


def test_goals_proven_at_the_probes_groups_only_are_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    # The mutation: the incumbent's groups are asserted outside the pins' push, so they stay through the
    # goals, which are then proven at the probe's assignment only. The oracle must notice somewhere.
    _force_seeding(monkeypatch)
    real = smt._pin

    def kept(enc, sess, incumbent, deadline):
        for name, w in incumbent.group.items():
            sess.add(enc.opw[name][w] if w in enc.opw[name] else enc.m.FALSE())
        return real(enc, sess, incumbent, deadline)

    monkeypatch.setattr(smt, "_pin", kept)
    _, _, bad = _judged(until="proven")
    assert any("proven" in b for b in bad), "goals proven at one assignment went unnoticed"


def test_a_seeded_schedule_without_goals_says_only_that_its_ii_is_optimal(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The goals get no time (the incumbent's solve runs out at once): the answer is the probe's
    # schedule. Its II is the MII here, so the II is optimal; the length is not proven, and the
    # certificate and the CLI's text say exactly that.
    _force_seeding(monkeypatch)
    real = seed.solve_joint

    def no_goals(*args, **kw):
        if kw.get("incumbent") is not None:
            return JointResult(args[1], args[2], CheckResult.TIMEOUT, length_low=kw.get("min_length", 1))
        return real(*args, **kw)

    monkeypatch.setattr(seed, "solve_joint", no_goals)
    found = 0
    for s_ in SEEDS:
        case = cases.random_case(s_)
        mach = cases.machine(case.smem)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                s = twill.schedule(case.graph, mach, **case.options)
        except (InfeasibleError, ResourceError, OptionsError, ValueError):
            continue
        if not any(n.startswith("seed:") for n in s.certificate.notes):
            continue
        found += 1
        cert = s.certificate
        assert not cert.proven_optimal
        assert not violations(s)
        assert any(n.startswith("length not proven minimal") for n in cert.notes), cert.notes
        text = " ".join(to_text(s).split())  # the summary's cells wrap
        assert "NOT proven optimal" in text
        if s.ii == cert.lower_bound:
            assert cert.ii_optimal(s.ii)
            assert "the II is optimal (it is the lower bound)" in text
            assert "the length and the later goals are not proven minimal" in text
        if found >= 8:
            break
    assert found >= 3, found


def test_seed_slice_stays_inside_the_limit() -> None:
    # The slice is min(SEED_AFTER_S, SEED_SHARE x T) from the window's start, and none once seeded or
    # when it would reach the deadline: arithmetic on a Run's fields only.
    from twill.search.run import Run

    now = time.monotonic()
    run = Run(None, None, now + 100.0, None, now, [], {}, {})
    end = seed.seed_slice(run)
    assert end is not None and abs(end - (time.monotonic() + seed.SEED_SHARE * 100.0)) < 0.5
    run.deadline = now + 1e5
    end = seed.seed_slice(run)
    assert end is not None and abs(end - (time.monotonic() + seed.SEED_AFTER_S)) < 0.5
    run.deadline = time.monotonic()  # any slice from now reaches it
    assert seed.seed_slice(run) is None
    run.started, run.deadline = time.monotonic(), time.monotonic() + 9.0  # a slice under SEED_MIN_S
    assert seed.SEED_SHARE * 9.0 < seed.SEED_MIN_S and seed.seed_slice(run) is None
    run.deadline, run.seed_done = None, True
    assert seed.seed_slice(run) is None


def test_skipping_the_goals_over_every_assignment_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    # The mutation: with a time limit, the goals at the probe's groups (asserted) are taken as the
    # answer, their proof at one assignment reported as proven. The oracle must notice somewhere.
    _force_seeding(monkeypatch)
    real = seed.solve_joint

    def groups_only(*args, **kw):
        if kw.get("incumbent") is not None and kw.get("groups") is None:
            return kw["incumbent"]
        return real(*args, **kw)

    monkeypatch.setattr(seed, "solve_joint", groups_only)
    _, _, bad = _judged(time_limit=60.0, until="proven")
    assert any("proven" in b for b in bad), "goals proven at one assignment went unnoticed"
