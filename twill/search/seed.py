"""Seeding a slow first window with an incumbent from probes: the search proves rather than explores.

Where a window's first joint model is slow to come, the search's own solve can stall until the time limit
even though the window has schedules: the sub-tiled FA backward on the H100 has one at its MII 100, which
the free-group window does not find in 300 s, while a probe with free groups at a relaxed II and then
those groups asserted at II 100 finds one in about a minute (benchmarks/results.md). So the first window
whose first model takes longer than :func:`seed_slice` seconds hands over to
:func:`twill.search.probe.seed_probes`; with a schedule at the window's own II found, the goals are then
tightened *from it, over every group assignment* (:func:`twill.solvers.joint.smt.solve_joint` with
``incumbent``), in the window's formula; otherwise the window is asked again with the time left and the
probes' best schedule, if any, is kept for the any-time answer (:attr:`Run.incumbent`).

Time budget, inside the search's own time limit ``T`` (so the call still returns by ``T`` plus the
fallback's ``max(0.1 T, 0.2 s)``, at most 30 s, :func:`twill.search.fallback.fallback_budget`): the
window's first model gets ``min(SEED_AFTER_S, SEED_SHARE x T)`` seconds (no seeding when that is
under :data:`SEED_MIN_S`, i.e. ``T`` under 10 s); the probes run until the deadline at most; of what
they leave, :data:`SEED_GROUPS_SHARE` goes to the goals at the probe's groups and the rest to the goals
over every assignment (or all of it to the window asked again). Without a time limit the first model
gets :data:`SEED_AFTER_S`, the probes :data:`SEED_PROBE_S`, the goals what they need. Once per search.

Soundness: the probes record no attempt and refute nothing. A window cut by the slice keeps only what it
refuted before the cut (the windows below the one it stopped in); the window it stopped in stays
undecided, and so does every window below the final schedule's that the goals did not refute: the
certificate then says the schedule is not proven optimal (its undecided windows, its length not proven
minimal). The II is proven optimal exactly when every smaller II was refuted for every stage count
(:meth:`twill.schedule.Certificate.ii_optimal`), as for any schedule. Every value the goals prove from
the incumbent is proven over the whole formula (free groups), since the incumbent's pins are released
before the goals are tightened.
"""

from __future__ import annotations

import time

from twill.search.probe import PROBE_HOW, seed_probes
from twill.search.run import Run
from twill.solvers.joint.result import JointResult
from twill.solvers.joint.smt import solve_joint
from twill.solvers.modulo.methods import ModuloResult
from twill.solvers.status import CheckResult

__all__ = ["SEED_AFTER_S", "SEED_GROUPS_SHARE", "SEED_MIN_S", "SEED_PROBE_S", "SEED_SHARE", "seed_slice",
           "seeded_window"]

SEED_SHARE = 0.1
"""The share of the time limit a window's first model may take before the probes seed it (a tuning
choice). Every case of benchmarks/solve_times.py that is solved finds its first model in well under it
at the 300 s limit (the slowest, the sub-tiled Blackwell FA forward, 14.5 s of its first window at a
load of 7, before any goal); the sub-tiled FA backward's does not come in 300 s."""

SEED_AFTER_S = 60.0
"""Most seconds a window's first model may take before the probes seed it (the slice without a time
limit, and its cap with one)."""

SEED_MIN_S = 1.0
"""The least slice: with a time limit under ``SEED_MIN_S / SEED_SHARE`` (10 s) no window is seeded, the
window keeps the whole limit (each probe states a formula and runs a modulo phase of at least 0.1 s, and
may end up to that much past the deadline, which the fallback's budget of a short limit cannot absorb)."""

SEED_GROUPS_SHARE = 0.5
"""With a time limit, the share of the seconds left after the probes that the goals get at the probe's own
warp groups (asserted: a shorter incumbent, which proves nothing; on the sub-tiled FA backward at a 300 s
limit L 300 -> 280, the least at those groups) before they are tightened from it over every assignment
(a tuning choice). Without a limit the goals run over every assignment at once (they finish, and the
detour would prove nothing)."""

SEED_PROBE_S = 300.0
"""Seconds the seeding probes may take without a time limit (with one: until the deadline)."""


def seed_slice(run: Run) -> float | None:
    """The ``time.monotonic()`` value by which a window starting now must have its first model before the
    probes seed it, or None when it is not seeded (already seeded once in this search, the slice under
    :data:`SEED_MIN_S`, or the slice would reach the deadline)."""
    if run.seed_done:
        return None
    limit = None if run.deadline is None else run.deadline - run.started
    wait = SEED_AFTER_S if limit is None else min(SEED_AFTER_S, SEED_SHARE * limit)
    end = time.monotonic() + wait
    return None if wait < SEED_MIN_S or (run.deadline is not None and end >= run.deadline) else end


def seeded_window(run: Run, ii: int, first: int, last: int, mod: ModuloResult, cut: JointResult,
                  solver: str, modulo: str, ilp: str) -> JointResult:
    """The windows ``first .. last`` of ``ii`` after their solve ``cut`` ran out of the seed slice.

    The probes (:func:`~twill.search.probe.seed_probes`) look for a schedule at ``ii`` (or above it); with
    one at ``ii`` the windows are solved from it as ``incumbent``: with a time limit first at its own
    groups (asserted, :data:`SEED_GROUPS_SHARE` of the time left: a shorter incumbent), then over every
    assignment (the windows ``cut`` refuted passed on as the length's lower bound); else they are
    asked again from the window ``cut`` stopped in, with the time left. The probes' schedule is kept in
    :attr:`Run.incumbent` (the any-time answer's candidate) and described in :attr:`Run.seed_notes`.

    Returns
    -------
    JointResult
        The windows' answer, whose ``length_low`` counts what ``cut`` refuted: ``SAT`` with the
        incumbent's schedule at least (its ``proven`` then says the length is not proven minimal when the
        goals could not even start), else the second solve's.
    """
    run.seed_done = True
    began = time.monotonic()
    until = began + SEED_PROBE_S if run.deadline is None else run.deadline
    found = seed_probes(run, ii, run.limit_ii, until, solver, modulo, ilp)
    run.spend("seed", time.monotonic() - began)
    stopped = min(last, max(first, (cut.length_low - 1) // ii + 1))  # the window the slice stopped in
    if found is None or found[1] != ii:
        run.incumbent = found
        if found is not None:
            run.seed_notes[found[1]] = (f"seed: II {ii}'s first window had no model within its slice; "
                                        f"{PROBE_HOW}, with warp groups asserted, at II {found[1]}")
        return _spent(run, solve_joint(run.problem, ii, last, first=stopped, min_length=cut.length_low,
                                       backend=solver, deadline=run.deadline, window_s=run.window_limit))
    probe: JointResult = found[2]
    # the goals at the probe's groups first (a better incumbent, proving nothing), then over every assignment
    end = None if run.deadline is None else time.monotonic() + SEED_GROUPS_SHARE * run.left()
    if end is not None and end > time.monotonic():
        near = _spent(run, solve_joint(run.problem, ii, last, first=stopped, min_length=cut.length_low,
                                       backend=solver, deadline=end, groups=probe.group, incumbent=probe))
        probe = near if near.status == CheckResult.SAT else probe
    res = _spent(run, solve_joint(run.problem, ii, last, first=stopped, min_length=cut.length_low,
                                  backend=solver, deadline=run.deadline, incumbent=probe))
    if res.status != CheckResult.SAT:  # the deadline came before the pinned check: the probe's own
        res = JointResult(ii, probe.stages, CheckResult.SAT, probe.start, probe.group, probe.budgets,
                          probe.group_warps, probe.length, {"length": False}, probe.checks, probe.wall_s,
                          probe.build_s, probe.n_terms, False, cut.length_low)
    run.seed_notes[ii] = (f"seed: II {ii}'s first window had no model within its slice; a probe found a "
                          f"schedule at II {ii} (free warp groups at a higher II, then those groups asserted "
                          f"at II {ii}: it proves nothing about other assignments); the goals were then "
                          f"tightened from it over every assignment, and only what they proved is proven")
    return res


def _spent(run: Run, res: JointResult) -> JointResult:
    """``res``, its seconds and checks added to the ``joint`` phase."""
    run.spend("joint", res.wall_s, res.checks)
    run.spend("joint_build", res.build_s)
    return res
