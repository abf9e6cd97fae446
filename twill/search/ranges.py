"""Range queries (one formula with the II as an unknown refutes a run of IIs; docs/model.md §6) and the
closing phase that covers every stage count the model allows below the answer."""

from __future__ import annotations

import math
import time

from twill.schedule import (
    Attempt,
)
from twill.search.certificate import ii_runs, is_complete, stage_coverage, stages_needed
from twill.search.decide import decide_ii
from twill.search.progress import EventKind
from twill.search.run import Run
from twill.solvers.joint.cpsat import solve_joint_cpsat
from twill.solvers.joint.decompose import solve_joint_decomposed
from twill.solvers.joint.smt import RangeResult, solve_range
from twill.solvers.modulo.ims import iterative_modulo_schedule
from twill.solvers.status import CheckResult

__all__ = [
    "CLOSING_SPAN",
    "RANGE_FIRST",
    "RANGE_MIN_SLICE_S",
    "RANGE_SLICE_GROWTH",
    "RANGE_SLICE_IIS",
    "closing_phase",
    "range_query",
]

RANGE_FIRST = 4
"""IIs in the first range query after a refuted II; each refuted range doubles the next (galloping).
This and the slice constants below are tuning choices, measured on the FA backward (Blackwell, plain):
a 16-II slice made its 32-wide queries time out and the widths collapse into II-by-II steps."""


RANGE_MIN_SLICE_S = 2.0
"""Least seconds a range query may take. Otherwise it gets what deciding its IIs one by one would cost
(up to ``RANGE_SLICE_IIS`` of them) at ``RANGE_SLICE_GROWTH`` times the slowest per-II time seen so far:
a query that does not pay is stopped early, keeps what its bisection refuted, and the next one is
narrower. A query stopped just before its answer wastes its whole slice, and deciding an II gets dearer
toward the answer, so the estimate leans high (FA backward, Blackwell, plain: 0.3 s per II at the MII,
0.5-4 s at IIs 146-180; its 64-II query that finds II 180 needs 14-20 s. Slices of the mean over 32 IIs
cut it: 56-80 s in all; of the slowest over 64: 22 s, but 33-100 s once deciding the MII got cheaper;
with the growth factor: 27-30 s beside another solve)."""


RANGE_SLICE_IIS = 64


RANGE_SLICE_GROWTH = 4
"""How much dearer an II near the answer is assumed to be than the slowest decided so far (see above)."""


CLOSING_SPAN = 2
"""A closing query covers IIs ``[lo, CLOSING_SPAN * lo)`` at most (a tuning choice: its modulo shifts per
pair of ops grow with ``stages * hi / lo``; the FA backward's [105, 1096] in one query held 1.4 GB)."""


def closing_phase(run: Run, found: tuple | None, limit_ii: int, solver: str, ilp: str,
            method: str) -> tuple | None:
    """The closing phase: refute every II below the answer (or up to ``limit_ii`` without one) for every
    stage count the model allows (:func:`stages_needed`), where the search refuted only its stage windows
    (``n_min .. n_min + stage_slack``). A II found to have a schedule with more stages is decided again
    with its windows up to that bound, and becomes the answer. Stops at the deadline (the answer is then
    not proven: :func:`finish` sees the IIs left incomplete)."""
    while True:
        run.found = found
        top = limit_ii if found is None else found[1] - 1
        better = _close(run, top, solver)
        if better is None:
            return found
        again = decide_ii(run, better, solver, ilp, method, "joint", upto=stages_needed(run, better))
        if again is None:  # the deadline stopped the II's own search
            return found
        found = again


def _close(run: Run, top: int, solver: str) -> int | None:
    """Refute the IIs in ``[MII, top]`` not yet refuted for every stage count, one query per run of them
    (:func:`twill.joint.solve_range`, or the CP-SAT joint model per II) with every ``L <= need * II``.

    Returns
    -------
    int or None
        The least II found to have a schedule (every II below it in its run refuted), or None when all
        were refuted or the deadline stopped a query.
    """
    if run.expired():  # before the stage bounds of every pending II are computed: nothing is refuted
        return None
    pending = [x for x in range(run.bound.mii, top + 1) if not is_complete(run, x)]
    for lo, last in ii_runs(pending):
        while lo <= last:
            if run.expired():
                return None
            # a range's formula has about stages * hi / lo shifts per pair of ops: at most a doubling
            hi = min(last, CLOSING_SPAN * lo - 1)
            # the stage bound need not fall with II: the query covers the largest over its range
            stages = max(stages_needed(run, x) for x in range(lo, hi + 1))
            run.emit(EventKind.PHASE, phase="closing", lo=lo, hi=hi, stages=stages)
            deadline = run.deadline
            if run.window_limit is not None:  # one question never takes longer than a window may
                end = time.monotonic() + run.window_limit
                deadline = end if deadline is None else min(deadline, end)
            per_ii = solver == "cpsat" or run.method == "decompose"
            if per_ii:
                if run.method == "decompose":
                    res = solve_joint_decomposed(run.problem, lo, stages, first=stage_coverage(run, lo) + 1,
                                                 min_length=run.bound.critical_path, backend=solver,
                                                 deadline=deadline, window_s=run.window_limit,
                                                 hand_off=False)
                else:
                    res = solve_joint_cpsat(run.problem, lo, stages, first=stage_coverage(run, lo) + 1,
                                            min_length=run.bound.critical_path, deadline=deadline)
                run.spend("closing", res.wall_s, res.checks)
                status, least, refuted = res.status, lo, lo - (res.status != CheckResult.UNSAT)
            else:
                rr = solve_range(run.problem, lo, hi, stages, min_length=run.bound.critical_path,
                                 backend=solver, deadline=deadline)
                run.spend("closing", rr.wall_s, rr.checks)
                status, least, refuted = rr.status, rr.ii, rr.refuted
            for x in range(lo, refuted + 1):
                run.range_covered[x] = max(run.range_covered.get(x, 0), stages)
                run.note(Attempt(x, stages, "joint", "unsat", 0.0,
                                 f"closing query: no joint schedule with L <= {stages} II (every stage count "
                                 f"the model allows: the stage bound of docs/model.md §6)"), quiet=True)
            if status == CheckResult.SAT:
                return least
            if status == CheckResult.INTERRUPTED:
                raise KeyboardInterrupt
            if status != CheckResult.UNSAT:
                run.timed_out = run.timed_out or run.expired()
                run.note(Attempt(refuted + 1, stages, "joint", status.value, 0.0,
                                 f"closing query undecided: schedules of more than "
                                 f"{stage_coverage(run, refuted + 1)} stages not refuted"))
                return None
            lo = lo + 1 if per_ii else hi + 1
    return None


def _range_stages(run: Run, lo: int, hi: int) -> tuple[int, int]:
    """The largest stage count the search would try at any II of ``[lo, hi']``, and ``hi'``.

    At each II the search tries ``ceil(LEN / II) .. + stage_slack`` stages, ``LEN`` the least modulo
    length; the iterative modulo scheduler's length bounds ``LEN`` from above. The range stops before
    the first II where the heuristic finds nothing (that II is then decided on its own).
    """
    opts = run.problem.options
    most = 0
    for ii in range(lo, hi + 1):
        if run.deadline is not None and time.monotonic() >= run.deadline:
            return most, ii - 1
        start = iterative_modulo_schedule(run.problem, ii)
        if start is None:
            return most, ii - 1
        length = max(start[op.name] + op.cycles for op in run.problem.ops)
        most = max(most, math.ceil(length / ii) + opts.stage_slack)
    if opts.max_stages is not None:
        most = min(most, opts.max_stages)
    return most, hi


def range_query(run: Run, lo: int, hi: int, solver: str) -> RangeResult | None:
    """One range query over ``[lo, hi]``; an UNSAT answer is noted as a refutation of each II in it."""
    left = run.left()
    if left is not None and left <= run.range_build:  # it could not even be stated in time
        return None
    stages, hi = _range_stages(run, lo, hi)
    if hi <= lo or stages < 1 or run.expired():
        return None
    slowest = max(run.per_ii, default=RANGE_MIN_SLICE_S)
    slice_s = max(RANGE_MIN_SLICE_S, RANGE_SLICE_GROWTH * slowest * min(hi - lo + 1, RANGE_SLICE_IIS))
    if run.window_limit is not None:  # one question never takes longer than a window may
        slice_s = min(slice_s, run.window_limit)
    deadline = time.monotonic() + slice_s
    if run.deadline is not None:
        deadline = min(deadline, run.deadline)
    run.emit(EventKind.PHASE, phase="range", lo=lo, hi=hi, stages=stages)
    res = solve_range(run.problem, lo, hi, stages, min_length=run.bound.critical_path, backend=solver,
                      deadline=deadline)
    run.spend("range", res.wall_s, res.checks)
    run.range_build = res.build_s
    if res.refuted >= lo:
        share = res.wall_s / (res.refuted - lo + 1)
        for ii in range(lo, res.refuted + 1):
            run.range_covered[ii] = max(run.range_covered.get(ii, 0), stages)
            run.note(Attempt(ii, stages, "joint", "unsat", share,
                             f"no joint schedule with L <= {stages} II for any II in [{lo}, {res.refuted}] "
                             f"(range query over [{lo}, {hi}])"), quiet=True)
    run.emit(EventKind.RANGE, lo=lo, hi=hi, stages=stages, status=res.status.value, least=res.ii or None,
             refuted=res.refuted)
    return res
