"""What a search proved: stage coverage per II, the least II not refuted, the certificate and its scope,
and the verified :class:`~twill.schedule.Schedule` built from the answer (:func:`finish`)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from twill.model.exchange import exchange
from twill.model.reductions import stage_bounds
from twill.model.stagebound import stage_bucket
from twill.schedule import (
    DECIDED,
    Certificate,
    PhaseStats,
    Schedule,
    ScopeRun,
    make_groups,
    slots_from,
)
from twill.search.run import MODULO_SLICE_S, Run
from twill.solvers.joint.result import TIEBREAK_SLICE_S, TIEBREAKS
from twill.solvers.normalize import Normalization

__all__ = [
    "COVER_ALL",
    "finish",
    "ii_runs",
    "is_complete",
    "least_open_ii",
    "make_certificate",
    "spans_text",
    "stage_coverage",
    "stages_needed",
    "summary_of",
]

def summary_of(cert: Certificate) -> str:
    """One line on what ``cert`` ruled out: the IIs tried and the last reason (for an error message)."""
    ruled = cert.ruled_out()
    if not ruled:
        return "nothing was decided"
    lo, hi = min(ruled), max(ruled)
    tried = f"II {lo} tried" if lo == hi else f"II {lo}..{hi} tried ({len(ruled)} values)"
    return f"{tried}; last: {ruled[hi]}"


def least_open_ii(run: Run) -> int:
    """The least II not refuted by the attempts so far: a proven lower bound on the optimal II."""
    undecided = {a.ii for a in run.attempts if a.status not in ("infeasible", "unsat", "skipped", "invalid")}
    refuted = {a.ii for a in run.attempts} - undecided
    ii = run.bound.mii
    # refuted for every stage count (a joint search; the stage windows alone bound nothing)
    while ii in refuted and (run.methods.startswith("modulo") or is_complete(run, ii)):
        ii += 1
    return ii


COVER_ALL = 10**9
"""Stage coverage of an II that has no modulo schedule at all (every stage count refuted)."""


def stages_needed(run: Run, ii: int) -> int:
    """Stage count up to which ``ii`` must be refuted to be refuted for every stage count the model
    allows: :func:`twill.model.reductions.stage_bound`, or the user's ``max_stages`` when smaller."""
    need = run.stage_bounds.get(ii)
    if need is None:  # one area bound per bucket of IIs; past the deadline the per-op bound alone
        # (larger, so never more proof than there is) keeps a timed-out search within its limit
        late = run.deadline is not None and time.monotonic() >= run.deadline
        run.stage_bounds.update(stage_bounds(run.problem, *stage_bucket(ii), area=not late))
        need = run.stage_bounds[ii]
    cap = run.problem.options.max_stages
    return need if cap is None else min(need, cap)


def stage_coverage(run: Run, ii: int) -> int:
    """The largest ``n`` such that every schedule of at most ``n`` stages at ``ii`` was refuted: windows
    below the modulo phase's first one (``LEN(M)`` bounds every joint schedule), then each window refuted
    in turn, or what a range query refuted; :data:`COVER_ALL` without a modulo schedule."""
    if ii in run.modulo_refuted:
        return COVER_ALL
    n = max(run.range_covered.get(ii, 0), run.first_window.get(ii, 1) - 1)
    windows = {a.stages for a in run.attempts
               if a.ii == ii and a.phase == "joint" and a.status == "unsat" and a.stages is not None}
    while n + 1 in windows:
        n += 1
    return n


def is_complete(run: Run, ii: int) -> bool:
    """True if ``ii`` was refuted for every stage count the model allows."""
    return stage_coverage(run, ii) >= stages_needed(run, ii)


def spans_text(iis: Sequence[int]) -> str:
    """``[a, b], c, ...`` for sorted IIs."""
    parts, runs = [], ii_runs(list(iis))
    for lo, hi in runs:
        parts.append(str(lo) if lo == hi else f"[{lo}, {hi}]")
    return ", ".join(parts)


def ii_runs(iis: list[int]) -> list[tuple[int, int]]:
    """Maximal runs of consecutive values of sorted ``iis``."""
    out: list[tuple[int, int]] = []
    for x in iis:
        if out and out[-1][1] == x - 1:
            out[-1] = (out[-1][0], x)
        else:
            out.append((x, x))
    return out


def make_certificate(run: Run, *, proven: bool, extra: tuple[str, ...], top: int) -> Certificate:
    """The certificate, with its scope over the IIs ``[MII, top]``."""
    b = run.bound
    scope: list[ScopeRun] = []
    for x in range(b.mii, top + 1):
        cov = stage_coverage(run, x)
        if cov <= 0:
            continue
        stages, complete = (None if cov >= COVER_ALL else cov), cov >= stages_needed(run, x)
        last = scope[-1] if scope else None
        if last is not None and last.hi == x - 1 and last.stages == stages and last.complete == complete:
            scope[-1] = ScopeRun(last.lo, x, stages, complete)
        else:
            scope.append(ScopeRun(x, x, stages, complete))
    undecided = sorted({a.ii for a in run.attempts if a.ii <= top + 1 and a.status not in DECIDED})
    return Certificate(b.mii, b.res_mii, b.rec_mii, proven, tuple(run.attempts),
                       run.problem.options.stage_slack, extra, tuple(scope), tuple(undecided))


def finish(run: Run, found: tuple, norm: Normalization | None, raw_bounds: Any, strategy: str) -> Schedule:
    """The :class:`~twill.schedule.Schedule` of the answer ``found`` (``(kind, ii, result, modulo)``):
    groups renumbered (the variable-latency group first, then by first start), its certificate with the
    scope of the proof, the normalization's notes and the phase times. It reads ``run`` and changes
    nothing in it, so a trial build (a split that may not verify) is free of side effects."""
    _, ii, res, _mod = found
    p = run.problem
    start, group = dict(res.start), dict(res.group)
    # Renumber groups densely, the variable-latency group first, then by first start time.
    order = sorted(set(group.values()), key=lambda g: (
        not all(p.op(n).variable_latency for n in group if group[n] == g),
        min(start[n] for n in group if group[n] == g), g))
    remap = {g: i for i, g in enumerate(order)}
    group = {n: remap[g] for n, g in group.items()}
    needed = {remap[g]: v for g, v in res.budgets.items()}
    warps = {remap[g]: v for g, v in res.group_warps.items()}
    groups = make_groups(p, start, group, warps, needed)
    undecided = any(a.status not in DECIDED for a in run.attempts if a.ii <= ii)
    complete = all(is_complete(run, x) for x in range(run.bound.mii, ii))
    # The tie-breaks (TIEBREAKS) run in their own time slice and prove nothing: the proof is of II, L and
    # the goals before them.
    goals_proven = all(ok for goal, ok in res.proven.items() if goal not in TIEBREAKS)
    proven = not undecided and complete and goals_proven if strategy == "joint" else False
    notes = []
    if norm is not None:
        notes += [f"normalization: {c}" for c in norm.collapses()]
        if norm.status == "feasible":
            notes.append("normalization: the time limit stopped the cost-normalization ILP, so the time "
                         "unit is a feasible scaling, not the least-error one; optimality holds for the "
                         "problem in these units")
    if strategy == "swp":
        notes.append("Twill-SWP: modulo schedule with a fixed split, not a joint optimum")
    else:
        left_open = sorted({a.ii for a in run.attempts if a.ii <= ii and a.status not in DECIDED})
        partial = [x for x in range(run.bound.mii, ii) if not is_complete(run, x)]
        which = (f"every II below {ii} except {', '.join(map(str, left_open))} (undecided)" if left_open
                 else f"every II below {ii}")
        if partial:
            notes.append(f"scope: {which} was refuted for the stage windows searched; IIs "
                         f"{spans_text(partial)} "
                         f"only up to {min(stage_coverage(run, x) for x in partial)} stages, not every stage "
                         f"count the model allows (the closing query did not finish), so a schedule with "
                         f"more stages at a smaller II is not ruled out")
        else:
            notes.append(f"scope: {which} was refuted for every stage count the model allows (up to the "
                         f"stage bound of docs/model.md §6"
                         + (f", or max_stages = {p.options.max_stages}" if p.options.max_stages else "")
                         + ")")
    if strategy == "joint" and ii in run.seed_notes:
        notes.append(run.seed_notes[ii])
    notes.append(f"solvers: {run.methods}")
    for at, low, length in run.bounded if strategy == "joint" else ():
        notes.append(f"modulo phase: LEN(M) at II {at} bounded to [{low}, {length}], not proven within its "
                     f"{MODULO_SLICE_S:g} s slice; every stage window the bounds allow was searched")
    why = "time limit" if strategy == "joint" else f"time limit or the modulo phase's {MODULO_SLICE_S:g} s"
    if run.window_limit is not None and not run.timed_out:
        why = f"window_limit = {run.window_limit:g} s"
    notes += [f"{goal} not proven minimal ({why})" for goal, ok in res.proven.items()
              if not ok and goal not in TIEBREAKS]
    notes += [f"tie-break {goal} not proven minimal (its {TIEBREAK_SLICE_S:g} s slice or the time limit "
              f"ended it; II, L and the proof do not depend on it)" for goal, ok in res.proven.items()
              if not ok and goal in TIEBREAKS]
    if strategy == "joint" and res.start:
        cost = exchange(p, res.group)
        if all(res.proven.get(g, False) for g in TIEBREAKS):
            how = "fewest among the schedules equal in II, L, groups, hand-off latency, registers and SMEM"
        elif any(g in res.proven for g in TIEBREAKS):
            how = "the fewest found within the tie-break slices, not proven fewest"
        else:
            how = "not minimized: the goal phase stopped before the tie-breaks"
        notes.append(f"tie-breaks: {cost['barriers']} mbarrier pair(s) and {cost['handoff_bytes']} B handed "
                     f"through shared memory per iteration between warp groups ({how}; twill.model.exchange)")
    stats = tuple(PhaseStats(ph, round(t, 4), run.phase_calls.get(ph, 1)) for ph, t in run.phase_time.items())
    slots = slots_from(start, group, ii, p.names)
    return Schedule(
        problem=p, ii=ii, length=res.length, slots=slots, warp_groups=groups,
        certificate=make_certificate(run, proven=proven, extra=tuple(notes), top=ii - 1), stats=stats,
        strategy=strategy,
        normalization=norm.to_dict() if norm is not None else {},
        bounds_cycles={"res_mii": raw_bounds.res_mii, "rec_mii": raw_bounds.rec_mii,
                       "critical_path": raw_bounds.critical_path} if raw_bounds else {},
    )
