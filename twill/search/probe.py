"""Joint probes above the bound: a better any-time answer for a search the time limit stopped.

When the search runs out of time in the first windows of its least II, the fallback heuristic's
schedule can sit far above the optimum: the sub-tiled FA backward on the H100 stalls in the first window
of its MII 100, which has a schedule (found with the warp groups of an II 115 schedule asserted, in about
40 s), and the heuristic's answer was II 330 (benchmarks/results/solve_times_changes.md). With free
groups the joint solver finds schedules quickly far above the bound and slowly near it; with the groups
of a known schedule asserted only the start times are searched, which is much faster. So the fallback's
remaining seconds go to asking for any schedule at IIs between the least II not refuted and the
heuristic's, by bisection: free groups until a schedule is found, then its groups asserted.

Soundness: a probe proves nothing about the IIs below it. Its schedule comes from the same joint encoding
as the search's and passes :func:`twill.verify.violations` before it is returned; the caller marks it
heuristic with the proven lower bound unchanged (:func:`twill.search.fallback.heuristic_schedule`). A
probe records no attempt, so no refutation or undecided window of a probe enters the certificate: an
UNSAT probe window is left open (it is not every stage count), and a probe that runs out of its slice is
simply a failed probe (the bisection moves up).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping

from twill.model.problem import Problem
from twill.search.certificate import finish
from twill.search.run import MODULO_SLICE_S, Run
from twill.solvers.joint.cpsat import solve_joint_cpsat
from twill.solvers.joint.smt import solve_joint
from twill.solvers.modulo.methods import modulo_schedule
from twill.solvers.status import CheckResult, SolveStatus
from twill.verify import violations

__all__ = ["PROBE_HOW", "PROBE_MARGIN", "PROBE_SHARE", "SEED_RELAX", "joint_probes", "renumbered",
           "seed_probes"]

PROBE_SHARE = 0.5
"""The share of the seconds left that one probe may take (a tuning choice): a probe that runs out leaves
the other half to the probes above it, which are easier (more slack on every unit); the last probes
before ``until`` get what is left."""

PROBE_MARGIN = 0.05
"""The share of the fallback's budget kept back from the probes for what follows the last one (the
answer's certificate and verification, about 0.2 s on the 27-op FA backward): the search then returns
within its time limit plus :func:`~twill.search.fallback.fallback_budget` (measured: 132.2 s on a 120 s
limit without it, over the 10 % the benchmark allows)."""

SEED_RELAX = 0.15
"""How far above the II to seed :func:`seed_probes` asks first with free warp groups, as a share of that
II (doubled after each probe that finds nothing): a tuning choice, measured on the sub-tiled FA backward
(H100, MII 100; benchmarks/results.md): free probes found schedules at II 115 in 23-67 s, at 105 none in
150 s; the groups of the II 115 schedule, asserted, give a schedule at II 100 in about 40 s, those of an
II 214 schedule none below 114."""

PROBE_HOW = "a joint schedule found by a probe above the bound (any schedule, its length not minimized)"
"""How :func:`joint_probes` describes its schedule (``found[0]``, quoted in the certificate's note)."""


def joint_probes(run: Run, lo: int, hi: int, until: float, solver: str, modulo: str, ilp: str,
                 seed: Mapping[str, int] | None = None) -> tuple | None:
    """Any verified joint schedule at an II in ``[lo, hi]``, the least found by bisection before ``until``.

    Each probe decides the modulo phase of its II, then asks the joint solver for any schedule in the
    stage windows the search would ask (``ceil(LEN_low / II) .. ceil(LEN / II) + stage_slack``, within
    ``max_stages``), without the secondary goals, within :data:`PROBE_SHARE` of the seconds left. Once a
    warp-group assignment is known (``seed``, renumbered to the search's numbering rule, or the last
    schedule found), a probe first asks at that assignment with the groups asserted (a large
    neighbourhood of the known schedule: only the start times are searched, which the SMT solver
    decides much faster than the joint question), and with free groups only while no schedule was
    found. A schedule found lowers the top of the bisection, anything else (no modulo schedule, UNSAT
    windows, out of its slice) raises the bottom; feasibility need not be monotone in II, so this is a
    heuristic for the least II, not a bound.

    Parameters
    ----------
    run : Run
        The stopped search (read only: no attempt is recorded).
    lo, hi : int
        The IIs to probe (``lo``: the least II not refuted; ``hi``: one below the best schedule known).
    until : float
        ``time.monotonic()`` value at which probing stops.
    solver, modulo, ilp : str
        The search's joint solver (an SMT backend or ``"cpsat"``), modulo method and MILP backend. With
        ``"cpsat"`` every probe has free groups.
    seed : mapping of str to int, optional
        A warp-group assignment to probe first (the heuristic's split); ignored with a register plan
        (its groups are not interchangeable, so renumbering could change the budgets).

    Returns
    -------
    tuple or None
        ``(PROBE_HOW, ii, result, modulo)``, the shape of the search's answers, or None if no probe found
        a schedule that verifies.
    """
    best = None
    groups = None
    if seed is not None and solver != "cpsat" and run.problem.options.register_plan is None:
        groups = renumbered(run.problem, seed)
    low, high = lo, hi
    while low <= high and time.monotonic() < until:
        mid = (low + high) // 2
        found = None if groups is None else _probe(run, mid, until, solver, modulo, ilp, groups)
        if found is None and best is None:
            found = _probe(run, mid, until, solver, modulo, ilp, None)
        if found is not None:
            best, high = found, mid - 1
            if solver != "cpsat":
                groups = dict(found[2].group)
        else:
            low = mid + 1
    return best


def seed_probes(run: Run, ii: int, hi: int, until: float, solver: str, modulo: str, ilp: str) -> tuple | None:
    """Any verified joint schedule at ``ii`` or as close above it as found before ``until``: the
    incumbent that seeds a window whose first model is slow (:mod:`twill.search.seed`).

    A probe with free warp groups at ``ii + ceil(SEED_RELAX x ii)`` (the relaxation doubled after each
    probe that finds nothing, each with :data:`PROBE_SHARE` of the seconds left; the last at ``hi``);
    then that schedule's groups asserted at ``ii`` itself with every second left; if that finds
    nothing, the IIs between by bisection at the same groups (:func:`joint_probes`), for the best
    incumbent above ``ii``.

    Soundness: as :func:`joint_probes` -- a schedule found here is verified; nothing found here refutes
    anything (the probes record no attempt), and a schedule found with asserted groups says nothing about
    the other assignments, so a caller may use it only as an upper bound (a schedule), never as a bound
    from below.

    Parameters
    ----------
    run : Run
        The search (read only).
    ii : int
        The II whose window is seeded.
    hi : int
        The largest II to probe (the search's ``max_ii`` or sequential II).
    until : float
        ``time.monotonic()`` value at which probing stops.
    solver, modulo, ilp : str
        The search's joint SMT backend (not ``"cpsat"``: the probes assert groups), modulo method and
        MILP backend.

    Returns
    -------
    tuple or None
        ``(PROBE_HOW, ii', result, modulo)`` with the least ``ii' >= ii`` found, or None.
    """
    best, relax, at = None, SEED_RELAX, ii
    while best is None and at < hi and time.monotonic() < until:
        at = min(hi, ii + max(1, math.ceil(ii * relax)))
        best = _probe(run, at, until, solver, modulo, ilp, None)
        relax *= 2
    if best is None:
        return None
    groups = dict(best[2].group)
    found = _probe(run, ii, until, solver, modulo, ilp, groups, share=1.0)
    if found is not None:
        return found
    return joint_probes(run, ii + 1, best[1] - 1, until, solver, modulo, ilp, groups) or best


def renumbered(problem: Problem, group: Mapping[str, int]) -> dict[str, int]:
    """``group`` with the compute groups renumbered by first appearance in op order (the numbering rule
    of :func:`twill.model.reductions.first_appearance` for one block of interchangeable compute groups;
    the variable-latency group 0 kept). Relabelling interchangeable groups changes no cost, so the
    renumbered assignment has a schedule exactly when ``group`` has one (precondition: no register plan,
    whose budgets belong to positions)."""
    first = 1 if problem.has_vl else 0
    out, names = {}, {}
    for op in problem.ops:
        w = group[op.name]
        if op.variable_latency:
            out[op.name] = w
            continue
        if w not in names:
            names[w] = first + len(names)
        out[op.name] = names[w]
    return out


def _probe(run: Run, ii: int, until: float, solver: str, modulo: str, ilp: str,
           groups: Mapping[str, int] | None, share: float = PROBE_SHARE) -> tuple | None:
    """One probe at ``ii`` (see :func:`joint_probes`), at ``groups`` when given, its joint solve within
    ``share`` of the seconds left before ``until``."""
    p, opts = run.problem, run.problem.options
    smt = "yices" if solver == "cpsat" else solver
    left = until - time.monotonic()
    mod = modulo_schedule(p, ii, method=modulo, backend=ilp, smt=smt, time_limit=max(0.1, left * PROBE_SHARE),
                          bounds_after=min(MODULO_SLICE_S, max(0.1, left * PROBE_SHARE / 2)))
    if mod.status == SolveStatus.INFEASIBLE or not mod.found:
        return None
    first = max(1, math.ceil(mod.low / ii))
    last = math.ceil(mod.length / ii) + opts.stage_slack
    if opts.max_stages is not None:
        last = min(last, opts.max_stages)
    if last < first:
        return None
    deadline = min(until, time.monotonic() + max(0.0, until - time.monotonic()) * share)
    if time.monotonic() >= deadline:
        return None
    if solver == "cpsat":
        res = solve_joint_cpsat(p, ii, last, first=first, min_length=mod.low, deadline=deadline,
                                optimize=False)
    else:
        res = solve_joint(p, ii, last, first=first, min_length=mod.low, backend=solver, deadline=deadline,
                          optimize=False, groups=groups)
    if res.status != CheckResult.SAT:
        return None
    found = (PROBE_HOW, ii, res, mod)
    if violations(finish(run, found, None, {}, "swp")):
        return None
    return found
