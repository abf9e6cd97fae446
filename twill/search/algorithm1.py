"""Algorithm 1 of the paper: search II upward, and at each II the whole window of lengths, for the first
joint schedule; the first answer has the highest throughput the model allows.

For each II from ``max(ResMII, RecMII)``: the modulo ILP proves II infeasible or gives the least length
``LEN(M)``; the joint SMT is then asked for any schedule with ``ceil(L / II) = ceil(LEN(M) / II)`` (one
call covers the whole window, and is then tightened to the least ``L``). ``stage_slack`` widens the search
to that many further windows per II; the windows of one II share one formula (asked in order). A modulo
phase that runs out of its slice (:data:`MODULO_SLICE_S`) gives bounds on ``LEN(M)`` instead, and every
window they allow is asked. Every failure is recorded in the :class:`~twill.schedule.Certificate`.
Runs of infeasible IIs are skipped with range queries (:func:`twill.joint.solve_range`: one formula with
the II as an unknown refutes a whole range; docs/model.md §6), which changes the time, not the answer.

The Twill-SWP variant (``strategy="swp"``) takes the modulo ILP's schedule as is and splits it with a fixed
rule (variable-latency ops on a producer group, everything else on one consumer group), then keeps the
first II where that split passes :func:`twill.verify.verify`.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any

from twill.errors import (
    GraphError,
    InfeasibleError,
    InterruptedSolveError,
    OptionsError,
    SolverError,
)
from twill.ir.graph import Graph
from twill.ir.machine import Machine, load_machine
from twill.model.bounds import bounds
from twill.model.problem import Options, Problem, build_problem, check_resources
from twill.model.stagebound import load_lp
from twill.schedule import (
    STRATEGIES,
    Schedule,
)
from twill.search.certificate import (
    finish,
    is_complete,
    least_open_ii,
    make_certificate,
    spans_text,
    stage_coverage,
    summary_of,
)
from twill.search.checks import check_apart, check_numbers, check_pool
from twill.search.decide import decide_ii
from twill.search.fallback import (
    FALLBACK_LAST_S,
    FALLBACK_S,
    HEURISTIC_SHARE,
    fallback_budget,
    fallback_end,
    heuristic_fallback,
    heuristic_schedule,
)
from twill.search.prefetch import with_prefetch
from twill.search.probe import PROBE_MARGIN, joint_probes
from twill.search.progress import EventKind, Progress
from twill.search.ranges import RANGE_FIRST, closing_phase, range_query
from twill.search.reasons import budget_sum, register_floor
from twill.search.run import Run, with_note
from twill.search.swp import check_swp
from twill.solvers.cpsat import load_cp_model
from twill.solvers.ilp import BACKENDS as ILP_BACKENDS
from twill.solvers.modulo.methods import METHODS as MODULO_METHODS
from twill.solvers.normalize import normalize_problem
from twill.solvers.smt import SMT_BACKENDS, available_backends
from twill.solvers.status import CheckResult
from twill.verify import violations

__all__ = ["STRATEGIES", "schedule"]


JOINT_SOLVERS = (*SMT_BACKENDS, "cpsat")
JOINT_METHODS = ("direct", "decompose")
"""The values of ``schedule(method=)``: each joint question asked of the joint solver as one formula
(``"direct"``), or decided by logic-based Benders decomposition of the warp-group choice from the timing
(``"decompose"``, :mod:`twill.solvers.joint.decompose`, with the optional ``ortools`` package)."""
"""The values of ``schedule(solver=)``: an SMT backend (:mod:`twill.joint`) or CP-SAT
(:mod:`twill.joint_cpsat`)."""


def schedule(
    graph: Graph,
    machine: str | Machine = "h100",
    *,
    solver: str = "yices",
    ilp: str = "cbc",
    modulo: str = "smt",
    strategy: str = "joint",
    time_limit: float | None = None,
    max_groups: int | None = None,
    register_limit: int | None = None,
    register_plan: tuple[int, ...] | list[int] | None = None,
    cross_group: bool = True,
    max_stages: int | None = None,
    stage_slack: int = 1,
    prefetch: int | None = None,
    max_ii: int | None = None,
    relax: frozenset[str] | set[str] | tuple[str, ...] = frozenset(),
    apart: Sequence[tuple[str, str]] = (),
    normalize_upper: int = 300,
    window_limit: float | None = None,
    ranges: bool = True,
    method: str = "direct",
    progress: Progress | None = None,
) -> Schedule:
    """Find the optimal software-pipelined, warp-specialized schedule of a loop.

    Parameters
    ----------
    graph : Graph
        The loop body (machine cycles).
    machine : str or Machine
        Bundled machine name (``"h100"``, ``"h200"``, ``"b200"``), TOML path, or a loaded machine.
    solver : str
        Joint solver: the SMT backend ``"yices"`` (default) or ``"z3"``, or ``"cpsat"``: the joint problem
        on OR-Tools' CP-SAT (:mod:`twill.joint_cpsat`, with the optional ``ortools`` package), a second
        encoding written apart from the SMT one that gives the same answer and proof, every II decided on
        its own (no range queries); slower on the FA loops (benchmarks/results/joint_methods.md).
    ilp : str
        MILP backend for normalization (and the ILP modulo method): ``"cbc"`` or ``"highs"``.
    modulo : str
        How OPTIMAL-MODULO-SCHEDULE is solved: ``"smt"`` (default, exact, fast on fine time grids),
        ``"ilp"`` (the paper's time-indexed ZLP through PuLP) or ``"cpsat"`` (OR-Tools' CP-SAT, with the
        optional ``ortools`` package; 0.02 s where ``"smt"`` takes 16 s to over 120 s on the 45-op
        synthetic loop, benchmarks/results/modulo_methods.md); all return the least length.
    strategy : str
        ``"joint"`` (the paper's Algorithm 1) or ``"swp"`` (Twill-SWP: modulo schedule plus a fixed split).
    time_limit : float, optional
        Seconds for the whole search. When it runs out the best schedule found comes back marked not
        proven optimal; with none found (strategy ``"joint"``), a verified heuristic schedule
        (``certificate.heuristic``, with the proven lower bound ``certificate.ii_bound``; the fallback
        ends :func:`~twill.search.fallback.fallback_budget` seconds after the limit: a tenth of it, 0.2 to
        30 s, so the call returns within max(0.1 T, 0.2 s) of ``T``; the heuristic's walk takes at most
        :data:`~twill.search.fallback.HEURISTIC_SHARE` of that time and joint probes for any schedule at a
        smaller II the rest, :func:`~twill.search.probe.joint_probes`), else :class:`InfeasibleError` says
        which IIs were decided. A joint window whose first model takes more than ``min(60 s, 0.1 T)``
        (60 s without a limit; none for ``T`` under 10 s) is seeded once by probes inside ``T``
        (:mod:`twill.search.seed`): a schedule they find at its II is tightened over every assignment;
        ``certificate.ii_optimal(ii)`` then tells whether the II is proven even where the length is not.
    max_groups, register_limit, register_plan, cross_group, max_stages, stage_slack, max_ii :
        See :class:`twill.problem.Options`.
    prefetch : int, optional
        Extra buffers per streaming load (:class:`twill.problem.Options`). ``None`` (default): the least
        depth that hides the loads' latency. The model takes a streaming load as resident when its
        consumer starts, which holds only if the load was issued ``prefetch`` IIs earlier plus its lead
        over the consumer, at least its latency (``cost.tma_latency``) ahead; the search starts at 1 and,
        while a schedule's depth does not cover that, solves again with the depth it needs (a deeper
        ring holds more SMEM, so II can only grow). The certificate notes the depth and why.
    relax : set of str
        Constraint families to leave out (:data:`twill.problem.RELAXABLE`), for what-if questions
        (:mod:`twill.explain`); the answer is then not a schedule the machine can run.
    apart : sequence of (str, str)
        Pairs of ops to keep on different warp groups (:class:`twill.problem.Options`), a code
        generator's rule; the II is then optimal among the schedules that keep them apart.
    normalize_upper : int
        ``U`` of the cost normalization (paper §5.2: 300). A smaller ``U`` is a coarser time grid: fewer
        IIs between the MII and a register-bound optimum (the paper's FA backward ran at II 15-20).
    window_limit : float, optional
        Seconds for one joint window ``(II, stages)``. A window that takes longer is recorded as
        undecided and the search goes on to the next one, so a hard window near the bound does not stop
        the search; the answer is then marked not proven optimal, and the certificate lists the
        undecided windows. A range query gets no more than one window either. Without it, every window
        is decided (or the whole ``time_limit`` runs out).
    ranges : bool
        Jump over runs of infeasible IIs with range queries (one SMT formula with the II as an unknown
        refutes many IIs at once; see :func:`twill.joint.solve_range`). The answer and its proof are the
        same either way; ``False`` decides every II on its own, as Algorithm 1 does (so does
        ``solver="cpsat"``, which has no range query).
    method : str
        How each joint question (one II, its stage windows; a closing II) is decided: ``"direct"``
        (default) asks the joint solver; ``"decompose"`` decides it by branch and check
        (:mod:`twill.solvers.joint.decompose`: a CP-SAT master picks the warp groups, a CP-SAT
        subproblem at fixed groups checks the timing and returns a cut naming the ops whose groups
        left no schedule), and hands an II found feasible to the joint solver, so the answer is the one
        ``"direct"`` gives. The closing phase then decides II by II (no range query). Needs ``ortools``.
        benchmarks/results/solve_times_changes.md has the measurements (it does not pay on the FA
        backward yet, hence not the default).
    progress : callable, optional
        Called with a :class:`~twill.search.progress.ProgressEvent` per step of the search, in order
        (its ``kind`` an :class:`~twill.search.progress.EventKind`: ``BOUNDS``, ``II``, ``PHASE``,
        ``SPENT``, ``ATTEMPT``, ``RANGE``, ``MODULO_BOUNDS``), with ``elapsed_s`` and the kind's fields.

    Returns
    -------
    Schedule
        Verified (:func:`twill.verify.verify` passed) before it is returned.

    Raises
    ------
    GraphError, MachineError, ResourceError
        Bad input, found before any solver runs.
    InfeasibleError
        No II up to ``max_ii`` admits a schedule (the certificate says why for each, and the message gives
        the register floor, :func:`twill.reasons.register_floor`), or the time limit ran out before any
        schedule was found and no heuristic schedule verified.
    InterruptedSolveError
        Ctrl-C; carries the best schedule found so far, if any.
    SolverUnavailableError
        The requested backend cannot be loaded.
    """
    if strategy not in STRATEGIES:
        raise OptionsError(f"strategy {strategy!r} is not one of {', '.join(STRATEGIES)}", option="strategy")
    if not isinstance(graph, Graph):
        raise GraphError(f"graph must be a twill.Graph, got {type(graph).__name__} {graph!r:.60}; build one "
                         "with twill.graph_from_kernel('FILE.py::KERNEL') or twill.Graph")
    check_numbers(normalize_upper=normalize_upper, time_limit=time_limit, window_limit=window_limit)
    started = time.monotonic()  # the time limit counts from here (loading OR-Tools takes ~1 s)
    if solver not in JOINT_SOLVERS:
        raise OptionsError(f"solver {solver!r} is not one of {', '.join(JOINT_SOLVERS)}", option="solver")
    if method not in JOINT_METHODS:
        raise OptionsError(f"method {method!r} is not one of {', '.join(JOINT_METHODS)}", option="method")
    if modulo not in MODULO_METHODS:
        raise OptionsError(f"modulo {modulo!r} is not one of {', '.join(MODULO_METHODS)}", option="modulo")
    if ilp not in ILP_BACKENDS:  # normalization uses it whatever the modulo method
        raise OptionsError(f"ilp {ilp!r} is not one of {', '.join(ILP_BACKENDS)}", option="ilp")
    if progress is not None and not callable(progress):
        raise OptionsError(f"progress={progress!r} must be a callable taking a ProgressEvent (or None)",
                           option="progress")
    if not isinstance(ranges, bool):
        raise OptionsError(f"ranges={ranges!r} must be True or False", option="ranges")
    if solver == "cpsat":  # SolverUnavailableError now, before any phase runs
        load_cp_model("solver 'cpsat'", ", ".join(available_backends()) or "none")
    if method == "decompose":
        load_cp_model("method 'decompose'", "method 'direct'")
    mach = load_machine(machine)
    if register_limit is not None and register_limit > mach.max_regs_per_thread:
        raise OptionsError(f"register_limit={register_limit} is above {mach.name}'s "
                           f"{mach.max_regs_per_thread} registers per thread", option="register_limit")
    common = dict(max_groups=max_groups, register_limit=register_limit,
                  register_plan=_plan(register_plan), cross_group=cross_group,
                  max_stages=max_stages, stage_slack=stage_slack, max_ii=max_ii,
                  relax=(relax if isinstance(relax, str) or not isinstance(relax, Iterable)
                         else frozenset(relax)),
                  apart=apart)

    answer_by = None if time_limit is None else started + time_limit + fallback_budget(time_limit)

    def solve(depth: int, limit: float | None) -> Schedule:
        return _schedule(graph, mach, Options(**common, prefetch=depth), solver=solver, ilp=ilp,
                         modulo=modulo, strategy=strategy, time_limit=limit,
                         normalize_upper=normalize_upper, window_limit=window_limit, ranges=ranges,
                         method=method, progress=progress, answer_by=answer_by)

    return with_prefetch(solve, prefetch, time_limit, started)


def _plan(register_plan: Any) -> tuple[int, ...] | None:
    """``register_plan`` as a tuple (an empty one included, which :class:`Options` refuses); a value that
    is not a sequence is an :class:`OptionsError`."""
    if register_plan is None:
        return None
    if isinstance(register_plan, (str, bytes)) or not isinstance(register_plan, Iterable):
        raise OptionsError(f"register_plan={register_plan!r} must be a non-empty list of integers "
                           f"(setmaxnreg budgets, one per warp group)", option="register_plan")
    return tuple(register_plan)


def _schedule(graph: Graph, mach: Machine, options: Options, *, solver: str, ilp: str, modulo: str,
              strategy: str, time_limit: float | None, normalize_upper: int, window_limit: float | None,
              progress: Progress | None, ranges: bool = True, method: str = "direct",
              answer_by: float | None = None) -> Schedule:
    """One search at fixed options (:func:`schedule` without the prefetch-depth loop)."""
    started = time.monotonic()
    raw = build_problem(graph, mach, options)
    check_resources(raw)
    if strategy == "joint":
        check_pool(raw)
    else:
        check_swp(raw)
    check_apart(raw, strategy)
    deadline = None if time_limit is None else started + time_limit
    if deadline is not None:
        load_lp()  # inside the limit, not at a first use near its end
    t0 = time.monotonic()
    raw_bounds = bounds(raw)
    t1 = time.monotonic()
    norm_limit = None if deadline is None else max(0.1, min(0.2 * time_limit, deadline - t1))
    problem, norm = normalize_problem(raw, upper=normalize_upper, backend=ilp, time_limit=norm_limit)
    t2 = time.monotonic()
    bound = bounds(problem)
    how = "" if method == "direct" else " (questions decided by Benders decomposition on CP-SAT)"
    methods = (f"joint problem on {solver}{how}, modulo phase by {modulo}" if strategy == "joint"
               else f"modulo phase by {modulo} (Twill-SWP: no joint problem)")
    run = Run(problem, bound, deadline, progress, started, [], {}, {}, window_limit=window_limit,
               ranges=ranges, methods=methods, method=method, answer_by=answer_by)
    run.spend("bounds", (t1 - t0) + (time.monotonic() - t2))
    run.spend("normalize", t2 - t1)
    run.emit(EventKind.BOUNDS, res_mii=bound.res_mii, rec_mii=bound.rec_mii, mii=bound.mii)
    limit_ii = options.max_ii or _sequential_ii(problem)
    floor, sums = register_floor(problem) if strategy == "joint" else (0, "")
    if sums and floor > problem.resources.register_file:
        # a proof at every II without a solver call (register_floor: precondition, registers and the
        # register file not relaxed, where it returns no sum): refuse now rather than walk the IIs
        cert = make_certificate(run, proven=False, extra=(f"register arithmetic: {sums}",), top=bound.mii - 1)
        raise InfeasibleError(f"{graph.name}: no schedule at any II: no warp-group assignment holds the "
                              f"registers (every schedule holds at least {sums}: the register file binds at "
                              f"every II); " + summary_of(cert), certificate=cert)
    run.limit_ii = limit_ii
    try:
        found = _search(run, limit_ii, solver, ilp, modulo, strategy)
        if strategy == "joint":
            found = closing_phase(run, found, limit_ii, solver, ilp, modulo)
    except KeyboardInterrupt as exc:
        if run.found is None:
            raise InterruptedSolveError("interrupted before any schedule was found") from exc
        found, run.interrupted = run.found, True
    if found is None and run.timed_out and strategy == "joint":
        lo = least_open_ii(run)
        until = fallback_end(run)  # the limit plus the fallback's budget, less the certificate's reserve
        budget = max(0.0, until - time.monotonic())
        # the heuristic's IIs walk up until one verifies: at most HEURISTIC_SHARE of the budget
        # (and at least FALLBACK_LAST_S of it: the walk is the answer the probes may only improve)
        # (the sequential schedule of last resort may take the budget up to the probes' margin when no
        # split's schedule verifies: with nothing in hand the probes have nothing to improve on)
        walk_top = limit_ii if run.incumbent is None else min(limit_ii, run.incumbent[1] - 1)
        fallback = heuristic_fallback(run, lo, walk_top, max(until - budget * (1 - HEURISTIC_SHARE),
                                                             min(until, time.monotonic() + FALLBACK_LAST_S)),
                                      until - budget * PROBE_MARGIN)
        # the seeding probes' schedule (twill.search.seed), when it beats the heuristic's
        if run.incumbent is not None and (fallback is None or run.incumbent[1] < fallback[1]):
            fallback = run.incumbent
        # the fallback's seconds left go to joint probes below the best II known (twill.search.probe)
        top = limit_ii if fallback is None else fallback[1] - 1
        try:
            better = joint_probes(run, lo, top, until - budget * PROBE_MARGIN, solver, modulo, ilp,
                                  None if fallback is None else fallback[2].group)
        except KeyboardInterrupt as exc:  # Ctrl-C in a probe: the heuristic's schedule, if any, is the best
            if fallback is None:
                raise InterruptedSolveError("interrupted before any schedule was found") from exc
            raise InterruptedSolveError(
                "interrupted during the fallback's joint probes; the heuristic schedule is the best found",
                schedule=heuristic_schedule(run, fallback, norm, raw_bounds)) from exc
        fallback = better if better is not None else fallback
        if fallback is not None:
            return heuristic_schedule(run, fallback, norm, raw_bounds)
        spent = time.monotonic() - (until - budget)
        no_fallback = (f"any-time fallback: nothing verified in its {spent:.1f} s (the splits' modulo and "
                       f"list schedules, the sequential schedule with warp groups chosen for the registers "
                       f"and SMEM, joint probes at IIs {lo}-{top}); with a larger time_limit the "
                       f"fallback gets more (a tenth of it, at most {FALLBACK_S:.0f} s)",)
    else:
        no_fallback = ()
    if found is None:
        reached = least_open_ii(run)
        top = min(limit_ii, reached - 1)
        open_ = [x for x in range(bound.mii, top + 1) if not is_complete(run, x)]
        extra = () if not run.timed_out else (
            f"time limit: every II below {reached} was refuted; II {reached} was not decided", *no_fallback)
        if open_ and strategy == "joint":
            extra = (*extra, f"stage windows: IIs {spans_text(open_)} were refuted only up to "
                             f"{min(stage_coverage(run, x) for x in open_)} stages, not every stage count")
        why = (f"time limit reached before any schedule was found; the optimal II is at least {reached}"
               + (" (nor did the any-time fallback verify one: see the certificate's notes)" if no_fallback
                  else "")
               if run.timed_out else (f"max_ii = {limit_ii} is below the MII {bound.mii} (ResMII "
                                      f"{bound.res_mii}, RecMII {bound.rec_mii})" if limit_ii < bound.mii
                                      else f"no schedule for II in [{bound.mii}, {limit_ii}]"))
        floor, sums = register_floor(problem)
        if sums and not run.timed_out and limit_ii >= bound.mii:
            left = problem.resources.register_file - floor
            binds = ("the register file binds at every II" if left < 0 else
                     f"{left} registers left for every other value live at once")
            why += f" (registers: every schedule holds at least {sums}: {binds})"
            extra = (*extra, f"register arithmetic: {sums}")
        cert = make_certificate(run, proven=False, extra=extra, top=top)
        raise InfeasibleError(f"{graph.name}: {why}; " + summary_of(cert), certificate=cert)
    sched = finish(run, found, norm, raw_bounds, strategy)
    sched = with_note(sched, budget_sum(sched))
    problems = violations(sched)
    if problems:
        raise SolverError(f"internal error: the {strategy} schedule fails verification: {problems[0]}")
    if run.interrupted:
        raise InterruptedSolveError(
            f"interrupted while tightening the schedule at II {sched.ii}; it is the best found so far",
            schedule=sched)
    return sched


def _sequential_ii(problem: Problem) -> int:
    """An II at which running the ops one after another, waiting out every latency and hand-off, works."""
    total = sum(op.cycles for op in problem.ops)
    total += sum(max(e.latency + e.cross, problem.crossing_delay(e)) + 2 * e.transfer for e in problem.edges)
    return max(1, total)


def _search(run: Run, limit_ii: int, solver: str, ilp: str, method: str, strategy: str) -> tuple | None:
    """Algorithm 1 with range jumps: decide the least open II on its own; after a refuted one, ask one
    range query (:func:`twill.joint.solve_range`) for the least II among the next ``width`` that has a
    schedule. An UNSAT range is refuted at once and the next range is twice as wide; after a SAT one the
    IIs below its least feasible II are refuted and that II is decided on its own; one that runs out of
    its time slice keeps what it refuted and halves the width. The IIs are still decided in increasing
    order, so the first schedule found has the least II."""
    ii, width = run.bound.mii, RANGE_FIRST
    while ii <= limit_ii:
        if run.expired():
            return None
        began = time.monotonic()
        found = decide_ii(run, ii, solver, ilp, method, strategy)
        if found is not None:
            return found
        run.per_ii.append(time.monotonic() - began)
        ii += 1
        while strategy == "joint" and run.ranges and solver != "cpsat" and width > 1 and not run.expired():
            hi = min(ii + width - 1, limit_ii)
            res = range_query(run, ii, hi, solver)
            if res is None:
                break
            if res.status == CheckResult.INTERRUPTED:
                raise KeyboardInterrupt
            ii = res.refuted + 1
            if res.status == CheckResult.UNSAT:
                width *= 2
                continue
            if res.status != CheckResult.SAT:  # out of its time slice: narrower from now on
                width //= 2
            break  # decide the least open II (the range's least feasible one after SAT) on its own
    return None
