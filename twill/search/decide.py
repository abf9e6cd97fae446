"""One II of Algorithm 1: the modulo phase (``LEN(M)`` or its bounds), then the joint windows it allows
(or the Twill-SWP split)."""

from __future__ import annotations

import math
import time

from twill.schedule import (
    Attempt,
)
from twill.search.progress import EventKind
from twill.search.run import MODULO_SLICE_S, Run
from twill.search.seed import seed_slice, seeded_window
from twill.search.swp import swp_at
from twill.solvers.joint.cpsat import solve_joint_cpsat
from twill.solvers.joint.decompose import solve_joint_decomposed
from twill.solvers.joint.result import JointResult
from twill.solvers.joint.smt import solve_joint
from twill.solvers.modulo.methods import ModuloResult, modulo_schedule
from twill.solvers.status import CheckResult, SolveStatus

__all__ = ["decide_ii"]

def decide_ii(run: Run, ii: int, solver: str, ilp: str, method: str, strategy: str,
           upto: int = 0) -> tuple | None:
    """Decide one II: the modulo phase, then the joint windows (or the SWP split); the windows go at least
    to ``upto`` stages (the closing phase asks for every stage count)."""
    opts = run.problem.options
    run.emit(EventKind.II, ii=ii)
    mod = _modulo(run, ii, method, ilp, solver)
    if mod is None:
        return None
    if strategy == "swp":
        return swp_at(run, ii, mod)
    # LEN(M) lies in [mod.low, mod.length] (one value once proven): every window it allows, + stage_slack
    first = max(1, math.ceil(mod.low / ii))
    wanted = max(math.ceil(mod.length / ii) + opts.stage_slack, upto)
    run.first_window[ii] = first
    last = wanted if opts.max_stages is None else min(wanted, opts.max_stages)
    capped = last < wanted  # max_stages leaves windows out: noted once the rest are refuted
    skipped = Attempt(ii, max(first, last + 1), "joint", "skipped", 0.0,
                      f"{max(first, last + 1)} stages > max_stages = {opts.max_stages}")
    if last < first:
        run.note(skipped)
        return None
    if run.expired():  # building the formula alone can take seconds
        run.note(Attempt(ii, first, "joint", "timeout", 0.0, "time limit reached before this II's windows"))
        return None
    left, need = run.left(), run.build_estimate(last)
    if left is not None and need > left:  # it could not even be stated before the deadline
        run.timed_out = True
        run.note(Attempt(ii, first, "joint", "timeout", 0.0,
                         f"time limit: {left:.1f} s left, and stating this II's formula takes about "
                         f"{need:.1f} s"))
        return None
    res = _joint(run, ii, first, last, mod, solver, (method, ilp) if upto == 0 else None)
    if res is None:
        if capped and not run.expired():
            run.note(skipped)
        return None
    return ("joint", ii, res, mod)


def _modulo(run: Run, ii: int, method: str, ilp: str, solver: str) -> ModuloResult | None:
    """The modulo phase of ``ii``: the least modulo length, or bounds on it after
    :data:`MODULO_SLICE_S` seconds (the shortest schedule found bounds it from above, ``mod.low`` from
    below). The slice applies only when the iterative modulo scheduler has a schedule at ``ii`` (the
    phase then surely returns one); otherwise the phase may take the rest of the time limit, since the
    joint windows need an upper bound. None if the II has no modulo schedule or the time limit stopped
    the phase."""
    run.emit(EventKind.PHASE, phase="modulo", ii=ii)
    smt = "yices" if solver == "cpsat" else solver  # the SMT modulo method's backend
    mod = modulo_schedule(run.problem, ii, method=method, backend=ilp, smt=smt, time_limit=run.left(),
                          bounds_after=MODULO_SLICE_S)
    run.spend("modulo", mod.wall_s)
    if mod.status == SolveStatus.INFEASIBLE:
        run.modulo_refuted.add(ii)
        run.note(Attempt(ii, None, "modulo", "infeasible", mod.wall_s,
                         f"no modulo schedule meets the unit capacities and dependences ({method})"))
        return None
    if not mod.found:
        # No schedule, so no upper bound on LEN(M) to end the joint windows; only at the deadline.
        run.timed_out = True
        run.note(Attempt(ii, None, "modulo", "timeout", mod.wall_s, "time limit in the modulo phase: no "
                         "modulo schedule"))
        return None
    if mod.status != SolveStatus.OPTIMAL:
        run.bounded.append((ii, mod.low, mod.length))
        run.emit(EventKind.MODULO_BOUNDS, ii=ii, low=mod.low, length=mod.length)
    return mod


def _joint(run: Run, ii: int, first: int, last: int, mod: ModuloResult, solver: str,
           seed: tuple[str, str] | None = None) -> JointResult | None:
    """Solve the stage windows ``first..last`` of ``ii`` in order with one formula (:func:`solve_joint`
    with ``first``) and note one attempt per window decided or left open. A window that runs out of
    ``window_limit`` is left undecided and the windows after it get a formula of their own. ``seed``
    (the modulo method and MILP backend): the search's own windows, which probes may seed when their
    first model is slow (:mod:`twill.search.seed`; the SMT solvers' direct method only)."""
    run.emit(EventKind.PHASE, phase="joint", ii=ii, stages=last)
    model_by = seed_slice(run) if seed is not None and run.method == "direct" and solver != "cpsat" else None
    if run.method == "decompose":
        res = solve_joint_decomposed(run.problem, ii, last, first=first, min_length=mod.low, backend=solver,
                                     deadline=run.deadline, window_s=run.window_limit)
    elif solver == "cpsat":
        res = solve_joint_cpsat(run.problem, ii, last, first=first, min_length=mod.low, deadline=run.deadline,
                                window_s=run.window_limit)
    else:
        res = solve_joint(run.problem, ii, last, first=first, min_length=mod.low, backend=solver,
                          deadline=run.deadline, window_s=run.window_limit, model_by=model_by)
    run.spend("joint", res.wall_s, res.checks)
    run.spend("joint_build", res.build_s)  # part of "joint": stating the formula of one II's windows
    if (model_by is not None and res.status == CheckResult.TIMEOUT and not run.expired()
            and time.monotonic() >= model_by):  # the seed slice cut the first model: probes seed it
        res = seeded_window(run, ii, first, last, mod, res, solver, *seed)
    run.builds.append((last, res.build_s))
    # The windows below ``length_low`` are refuted. With a schedule that is every window below its own
    # unless the length goal was stopped: CP-SAT minimizes L over all the windows at once, so a schedule
    # it has not proven shortest leaves the windows between its bound and its own window undecided.
    refuted = min(last + 1, max(first, (res.length_low - 1) // ii + 1))
    stopped = res.stages if res.status == CheckResult.SAT else refuted
    share = res.wall_s / (min(stopped, last) - first + 1)

    def window(n: int) -> str:
        return f"L in ({(n - 1) * ii}, {n * ii}]"

    for n in range(first, min(refuted, stopped)):
        run.note(Attempt(ii, n, "joint", "unsat", share, f"no joint schedule with {window(n)}"))
    if res.status == CheckResult.SAT:
        for n in range(refuted, res.stages):
            run.note(Attempt(ii, n, "joint", "timeout", share, f"undecided for {window(n)}: the time limit "
                             f"stopped the length goal at a schedule in a later window"))
        run.note(Attempt(ii, res.stages, "joint", "sat", share, f"L = {res.length}"))
        run.interrupted = res.interrupted
        return res
    if res.status == CheckResult.UNSAT:
        return None
    if res.status == CheckResult.INTERRUPTED:
        run.note(Attempt(ii, stopped, "joint", res.status.value, share, f"undecided for {window(stopped)}"))
        raise KeyboardInterrupt
    if run.window_limit is not None and not run.expired():
        run.note(Attempt(ii, stopped, "joint", res.status.value, share,
                         f"undecided for {window(stopped)} within window_limit = {run.window_limit:g} s"))
        return _joint(run, ii, stopped + 1, last, mod, solver) if stopped < last else None
    run.timed_out = True
    run.note(Attempt(ii, stopped, "joint", res.status.value, share, f"undecided for {window(stopped)}"))
    return None
