"""Joint software pipelining and warp specialization at one ``(II, n)``: solve, then tighten (paper §4).

:class:`~twill.encoding.Encoder` states the problem; :func:`solve_joint` asks the SMT solver for a model,
adding the liveness checks a model violates until one satisfies them all (lazy constraint generation),
and then tightens the goals (:data:`~twill.solvers.joint.result.GOALS`) lexicographically: shortest ``L``,
fewest warp groups, least
hand-off latency between groups, fewest registers (threads x ``setmaxnreg`` budget), least shared memory
allocated (bytes x ring depth), then the tie-breaks (:data:`~twill.solvers.joint.result.TIEBREAKS`:
fewest mbarrier pairs, fewest hand-off bytes; each in its own time slice). Each step bisects
between a lower bound and the best model and is proven by an UNSAT answer unless the deadline stops it;
where the probes fall (:data:`PROBE_ORDER`) changes how many checks that takes, never the value found.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from twill.model.exchange import exchange
from twill.model.liveness import smem_footprint
from twill.model.problem import Problem
from twill.solvers.joint.encoding import Encoder
from twill.solvers.joint.result import GOAL_KEYS, GOALS, TIEBREAKS, JointResult, goal_deadline
from twill.solvers.smt import BuildDeadline, SmtSession
from twill.solvers.status import CheckResult

__all__ = ["PROBE_ORDER", "RangeResult", "check_lazily", "solve_joint", "solve_range"]

PROBE_ORDER = {"length": "climb"}
"""Where :func:`_tighten` probes a goal first, besides bisection (each goal not named: ``"top"``).

* ``"climb"``: after a probe is refuted, the next asks for the new lower bound itself (the value just
  above the refuted one). The first model of a window lands anywhere in it, the least length near the
  refuted part: on the sub-tiled Blackwell FA forward at II 94 the first model has L 282, the window's
  bisection refutes L <= 235 and L <= 236 is a schedule; plain bisection took 9 checks there (8 of them
  SAT, 1-4 s each under load), climbing 2.
* ``"top"``: the first probe asks for one step below the best model (then bisection). After the length
  the first model of a goal is often already its least (SMEM, barriers, hand-off bytes on the FA
  forwards): one refuted probe proves it where bisection from the goal's weak lower bound refuted 2-7.

Measured with benchmarks/solve_times.py (benchmarks/results/solve_times_changes.md): the same answers
everywhere, 19-38 % fewer checks on the FA forwards but the plain Blackwell one, GEMM b200 and synthetic
30 (1-2 more there and on Figure 1); the sub-tiled Blackwell forward's CPU time halved. The value found
is the least either way: every probe is ``term <= mid`` for some ``mid`` in ``[lo, hi)``, SAT lowers
``hi`` to a model's value and UNSAT raises ``lo`` past ``mid`` (bisection's own argument), whatever
``mid`` is."""

def solve_joint(
    problem: Problem,
    ii: int,
    stages: int,
    *,
    first: int | None = None,
    min_length: int = 1,
    backend: str = "yices",
    deadline: float | None = None,
    window_s: float | None = None,
    optimize: bool = True,
    groups: Mapping[str, int] | None = None,
    model_by: float | None = None,
    incumbent: JointResult | None = None,
) -> JointResult:
    """Solve the joint problem at ``ii`` for schedules of ``stages`` stages, or of the first window of
    ``first .. stages`` that has one.

    Parameters
    ----------
    problem : Problem
        The loop, in (normalized) time units.
    ii : int
        Initiation interval.
    stages : int
        The window: ``(stages - 1) * ii < L <= stages * ii``.
    first : int, optional
        Decide the windows ``first .. stages`` in order with one formula (stated once for ``L <= stages *
        ii``; each window asked inside a push, a refuted one closed off for good): the answer is the one
        solving each window on its own would give, without stating a formula per window. The result's
        ``stages`` is then the window of the schedule found.
    min_length : int
        A proven lower bound on ``L`` (the modulo ILP's minimum length), a valid cut.
    backend : str
        ``"yices"`` or ``"z3"``.
    deadline : float, optional
        ``time.monotonic()`` value at which to stop.
    window_s : float, optional
        Seconds each window may take (the one with a schedule: with its goals); the result then stops in
        the window that ran out (``length_low`` says which).
    optimize : bool
        Tighten the secondary objectives (:data:`GOALS`, in order) after the first model.
    groups : mapping of str to int, optional
        Each op's warp group, asserted (a neighbourhood of a known schedule, for
        :mod:`twill.search.probe`): the answer is then the one at these groups only, so an UNSAT answer
        refutes nothing about the II. A group an op may not take (:class:`Formulation`'s ``groups_of``)
        makes the formula UNSAT; an op left out keeps its choice.
    model_by : float, optional
        ``time.monotonic()`` value by which the windows must have given a first model (earlier than
        ``deadline``): the checks for it stop there (``TIMEOUT``, the windows refuted before it in
        ``length_low``); the goals after a first model run under ``deadline``. For the search's seeding
        (:mod:`twill.search.seed`): a first model that is slow to come gives way to probes.
    incumbent : JointResult, optional
        A schedule already known at ``ii`` (its ``start``, ``group`` and ``length``; a probe's, with its
        groups asserted there): the windows are not asked. Its start times and groups are pinned in one
        check (the model of the full formula that equals it, found at once), then released, and the
        goals are tightened from it over *every* group assignment, as after a first model (by plain
        bisection: the incumbent's values lie anywhere above their bounds), so every value proven is
        proven for the whole formula (the length from ``min_length`` up: pass the
        windows refuted before as ``min_length``). ``TIMEOUT`` if that check does not confirm it by
        ``deadline`` (or ``UNSAT``: the incumbent is not a schedule of this formula, e.g. its ``L``
        above ``stages * ii``).

    Raises
    ------
    KeyboardInterrupt
        Ctrl-C during a check (after the search was stopped).
    """
    start = time.monotonic()
    first = stages if first is None else first
    with SmtSession(backend) as sess:
        enc = Encoder(problem, ii, stages, sess, min_length, upto=first < stages or incumbent is not None)
        sess.build_deadline = deadline
        try:
            enc.build()
            for name, w in (groups or {}).items():
                enc.add(enc.opw[name][w] if w in enc.opw[name] else enc.m.FALSE())
        except BuildDeadline:
            return JointResult(ii, stages, CheckResult.TIMEOUT, checks=0, wall_s=time.monotonic() - start,
                               build_s=time.monotonic() - start, length_low=min_length)
        sess.build_deadline = None
        build_s = time.monotonic() - start
        if incumbent is None:
            status, window, deadline = _windows(enc, sess, first, deadline, window_s, model_by)
            length_low = max(min_length, (window - 1) * ii + 1)  # the windows below ``window`` are refuted
        else:
            (status, pinned), length_low = _pin(enc, sess, incumbent, deadline), min_length
        if status != CheckResult.SAT:
            return JointResult(ii, stages, status, checks=sess.checks, wall_s=time.monotonic() - start,
                               build_s=build_s, n_terms=enc.count, length_low=length_low)
        best = _extract(enc, sess)
        if incumbent is not None:
            sess.pop()  # the pins go; the liveness checks found under them hold everywhere and stay
            for formula in enc.scoped[pinned:]:
                sess.add(formula)
        proven: dict[str, bool] = {}
        interrupted = False
        if optimize:
            for goal in GOALS:
                try:
                    best, proven[goal], low = _tighten(enc, sess, goal, best,
                                                       goal_deadline(goal, deadline, time.monotonic()),
                                                       length_low if goal == "length" else None,
                                                       "bisect" if incumbent is not None else None)
                    if goal == "length":
                        length_low = low
                except KeyboardInterrupt:  # keep the schedule found; the caller reports the interrupt
                    proven[goal], interrupted = False, True
                if not proven[goal]:
                    break
        if incumbent is not None:  # no window was asked: the schedule's own
            window = max(1, -(-best["length"] // ii))
        return JointResult(ii, window, CheckResult.SAT, best["start"], best["group"], best["budgets"],
                           best["warps"], best["length"], proven, sess.checks, time.monotonic() - start,
                           build_s, enc.count, interrupted, length_low)


def _pin(enc: Encoder, sess: SmtSession, incumbent: JointResult,
         deadline: float | None) -> tuple[CheckResult, int]:
    """Check the formula with ``incumbent``'s start times, groups and (at most) its length asserted inside
    a push, left open on ``SAT`` (the caller extracts the model, then pops and restates the lazily found
    formulas from the returned mark on, as after any probe)."""
    m = enc.m
    sess.push()
    mark = len(enc.scoped)
    for name, t in enc.s.items():
        sess.add(m.Equals(t, enc.int_(incumbent.start[name])))
    for name, w in incumbent.group.items():
        sess.add(enc.opw[name][w] if w in enc.opw[name] else m.FALSE())
    sess.add(m.LE(enc.length, enc.int_(incumbent.length)))
    status = check_lazily(enc, sess, deadline)
    if status != CheckResult.SAT:
        sess.pop()
    return status, mark


def _windows(enc: Encoder, sess: SmtSession, first: int, deadline: float | None,
             window_s: float | None, model_by: float | None = None) -> tuple[CheckResult, int, float | None]:
    """Check the windows ``first .. enc.n`` in order; returns the status, the window it ended in
    (``enc.n + 1`` when every window is refuted) and that window's deadline (the goals' deadline:
    ``deadline`` or the window's ``window_s``, never ``model_by``, which bounds the checks for a first
    model only). After ``SAT`` the window's bound stays asserted, so the goals are tightened inside
    it."""

    def goals_until() -> float | None:
        if window_s is None:
            return deadline
        end = time.monotonic() + window_s
        return end if deadline is None else min(deadline, end)

    def until() -> tuple[float | None, float | None]:
        end = goals_until()
        return end, (end if model_by is None else model_by if end is None else min(end, model_by))

    if not enc.upto:
        end, model_end = until()
        status = check_lazily(enc, sess, model_end)
        return status, enc.n + (status == CheckResult.UNSAT), end
    for n in range(first, enc.n + 1):
        end, model_end = until()
        sess.push()
        mark = len(enc.scoped)
        sess.add(enc.m.LE(enc.length, enc.int_(n * enc.ii)))
        status = check_lazily(enc, sess, model_end)
        if status != CheckResult.UNSAT:
            return status, n, end
        sess.pop()
        for formula in enc.scoped[mark:]:
            sess.add(formula)
        sess.add(enc.m.GT(enc.length, enc.int_(n * enc.ii)))
    return CheckResult.UNSAT, enc.n + 1, deadline


@dataclass(frozen=True)
class RangeResult:
    """Outcome of one range query (:func:`solve_range`).

    Attributes
    ----------
    lo, hi, stages : int
        The II range ``[lo, hi]`` and the largest stage count (every ``L <= stages * II``).
    status : CheckResult
        ``UNSAT``: no joint schedule for any II of the range with ``L <= stages * II``; ``SAT``: ``ii``
        is the least II of the range with one; ``TIMEOUT`` / ``INTERRUPTED``: undecided beyond
        ``refuted``.
    ii : int
        With ``SAT``, the least II of the range that has a schedule (every II below it was refuted).
    refuted : int
        Every II of ``[lo, refuted]`` was refuted (``lo - 1``: none; ``hi`` when UNSAT).
    checks : int
        Solver calls.
    wall_s, build_s : float
        Seconds in total and in stating the formula.
    """

    lo: int
    hi: int
    stages: int
    status: CheckResult
    ii: int = 0
    refuted: int = 0
    checks: int = 0
    wall_s: float = 0.0
    build_s: float = 0.0


def solve_range(problem: Problem, lo: int, hi: int, stages: int, *, min_length: int = 1,
                backend: str = "yices", deadline: float | None = None) -> RangeResult:
    """The least II in ``[lo, hi]`` that has a joint schedule with ``L <= stages * II``, if any.

    The II is an unknown of one formula (:class:`~twill.encoding.Encoder` with ``ii_hi``), so one UNSAT
    answer refutes the whole range, where the search would otherwise refute each II and stage window
    separately. After a first model at some II, the least one is found by bisection on ``II <= mid``
    in the same solver session (push/pop; the lazy liveness checks found on the way are kept, each
    refined against its model's own II). ``lo``, ``hi``, ``min_length`` and every time are in the
    problem's (normalized) units; ``min_length`` must be a lower bound on ``L`` valid at every II of the
    range (the critical path); ``deadline`` is a ``time.monotonic()`` value.

    Raises
    ------
    KeyboardInterrupt
        Ctrl-C during a check (after the search was stopped).
    """
    start = time.monotonic()
    with SmtSession(backend) as sess:
        enc = Encoder(problem, lo, stages, sess, min_length, ii_hi=hi, upto=True)
        sess.build_deadline = deadline
        try:
            enc.build()
        except BuildDeadline:  # undecided: nothing of the range is refuted
            wall = time.monotonic() - start
            return RangeResult(lo, hi, stages, CheckResult.TIMEOUT, 0, lo - 1, 0, wall, wall)
        sess.build_deadline = None
        build_s = time.monotonic() - start

        def done(status: CheckResult, ii: int = 0, refuted: int = lo - 1) -> RangeResult:
            return RangeResult(lo, hi, stages, status, ii, refuted, sess.checks, time.monotonic() - start,
                               build_s)

        status = check_lazily(enc, sess, deadline)
        if status == CheckResult.UNSAT:
            return done(status, refuted=hi)
        if status != CheckResult.SAT:
            return done(status)
        best, low, status = _bisect(enc, sess, enc.II, 1, lo, _extract(enc, sess), "ii", deadline)
        if status != CheckResult.SAT:
            return done(status, refuted=low - 1)
        return done(CheckResult.SAT, best["ii"], best["ii"] - 1)


def check_lazily(enc: Encoder, sess: SmtSession, deadline: float | None) -> CheckResult:
    """Check, then add the liveness point checks the model violates, until a model satisfies them all
    (lazy constraint generation: the relaxation is sound, and it only grows toward the full model)."""
    while True:
        status = sess.check(deadline)
        if status != CheckResult.SAT:
            return status
        model = _extract(enc, sess)
        if not enc.refine(model["start"], model["group"], model["all_budgets"], model["ii"]):
            return status


def _extract(enc: Encoder, sess: SmtSession) -> dict[str, Any]:
    start = {v: sess.value(t) for v, t in enc.s.items()}
    group = {v: next(w for w, b in enc.opw[v].items() if sess.value(b)) for v in enc.opw}
    used = sorted(set(group.values()))
    per = enc.p.resources.warps_per_group
    ii = sess.value(enc.II) if enc.ranged else enc.ii
    return {
        "ii": ii,
        "start": start,
        "group": group,
        "length": sess.value(enc.length),
        "budgets": {w: sess.value(enc.budget[w]) for w in used},
        "warps": {w: per * sess.value(enc.quads[w]) for w in used},
        "n_groups": len(used),
        "reg_total": sess.value(enc.reg_total),
        "handoffs": sum(e.cross for e in enc.p.edges if group[e.src] != group[e.dst]),
        "smem": smem_footprint(enc.p, ii, start, group) if "smem" in enc.lazy else 0,
        **exchange(enc.p, group),
        "all_budgets": {w: sess.value(enc.budget[w]) for w in range(enc.pool)},
    }


def _goal(enc: Encoder, goal: str) -> tuple[Any, int, int]:
    """The term to minimize for ``goal``, its granularity, and a lower bound on its value."""
    m, res = enc.m, enc.p.resources
    if goal == "length":  # solve_joint passes the window's own bound (the windows below it refuted)
        return enc.length, 1, enc.min_length
    if goal == "groups":
        count = m.Plus([m.Ite(u, enc.int_(1), enc.int_(0)) for u in enc.used])
        compute = any(not op.variable_latency for op in enc.p.ops)
        return count, 1, (2 if enc.vl and compute else 1)
    if goal == "handoffs":
        return enc.handoff_total, 1, 0
    if goal == "smem":
        return enc.smem_footprint()
    if goal in TIEBREAKS:
        return enc.exchange_terms()[goal]
    step = 32 * res.warps_per_group * res.setmaxnreg_step
    return enc.reg_total, step, 32 * res.warps_per_group * res.setmaxnreg_min


def _tighten(enc: Encoder, sess: SmtSession, goal: str, best: dict[str, Any],
             deadline: float | None, low: int | None = None,
             order: str | None = None) -> tuple[dict[str, Any], bool, int]:
    """Minimize ``goal`` by bisection between a lower bound and the best model; fix it there.
    ``order``: where the probes fall (:data:`PROBE_ORDER`'s values, or ``"bisect"``), the goal's entry
    there by default; an incumbent's goals bisect (its length lies anywhere above a lower bound that
    may be far below the optimum, where climbing would walk up one unit per refuted probe).

    Each probe asserts ``goal <= mid`` inside a push/pop: SAT lowers the upper end to the model's value,
    UNSAT proves the optimum is above ``mid``. Returns the best model, whether its value is proven
    minimal (False if the deadline stopped a probe; the session is then spent), and the proven lower
    bound on the goal's value. ``low`` is a proven lower bound known beforehand.
    """
    term, step, least = _goal(enc, goal)
    low = least if low is None else max(low, least)
    key = GOAL_KEYS[goal]
    order = order or PROBE_ORDER.get(goal, "top")
    best, low, status = _bisect(enc, sess, term, step, low, best, key, deadline, top=order == "top",
                                climb=order == "climb")
    if status == CheckResult.SAT:
        sess.add(enc.m.Equals(term, enc.int_(best[key])))
    return best, status == CheckResult.SAT, low


def _bisect(enc: Encoder, sess: SmtSession, term: Any, step: int, low: int, best: dict[str, Any], key: str,
            deadline: float | None, *, top: bool = False,
            climb: bool = False) -> tuple[dict[str, Any], int, CheckResult]:
    """Least value of ``term`` (a multiple of ``step``, at least ``low``) over the models, by bisection
    between ``low`` and the model ``best`` (whose value is ``best[key]``).

    ``top``: the first probe is one step below ``best``; ``climb``: after an UNSAT probe the next is the
    new lower bound itself (:data:`PROBE_ORDER`). Otherwise, and when such a probe is out of range, the
    probe is the midpoint.

    Each probe asserts ``term <= mid`` inside a push/pop: SAT lowers the upper end to the model's value,
    UNSAT proves the least value is above ``mid``; lazily found liveness checks hold everywhere and are
    kept after the pop. Returns the best model, the proven lower bound (a value, every smaller one
    refuted) and ``SAT`` when the two met, else the status that stopped a probe (the deadline: the session
    is then spent).
    """
    lo, hi = low // step, best[key] // step  # in units of step; the least value lies in [lo, hi]
    ahead = hi - 1 if top else None  # the next probe, when it is not the midpoint
    while lo < hi:
        mid = ahead if ahead is not None and lo <= ahead < hi else (lo + hi) // 2
        ahead = None
        sess.push()
        mark = len(enc.scoped)
        sess.add(enc.m.LE(term, enc.int_(mid * step)))
        status = check_lazily(enc, sess, deadline)
        if status == CheckResult.SAT:
            best = _extract(enc, sess)
            hi = best[key] // step
        elif status == CheckResult.UNSAT:
            lo = mid + 1
            if climb:
                ahead = lo
        else:
            return best, lo * step, status
        sess.pop()
        for formula in enc.scoped[mark:]:
            sess.add(formula)
    return best, lo * step, CheckResult.SAT
