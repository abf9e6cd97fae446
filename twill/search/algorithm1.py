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

import dataclasses
import logging
import math
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import networkx as nx

from twill.errors import (
    GraphError,
    InfeasibleError,
    InterruptedSolveError,
    OptionsError,
    ResourceError,
    SolverError,
    TwillWarning,
)
from twill.ir.graph import Graph
from twill.ir.machine import Machine, load_machine
from twill.model.bounds import Bounds, bounds
from twill.model.formulation import accumulators, pool_size
from twill.model.liveness import fold, memory_intervals, register_intervals
from twill.model.problem import HANDOFF_UNIT, Edge, Options, Problem, build_problem, check_resources
from twill.model.reductions import stage_bound
from twill.schedule import (
    DECIDED,
    STRATEGIES,
    Attempt,
    Certificate,
    PhaseStats,
    Schedule,
    ScopeRun,
    make_groups,
    slots_from,
)
from twill.search.progress import EventKind, Progress, ProgressEvent
from twill.search.reasons import budget_sum, register_floor
from twill.solvers.cpsat import load_cp_model
from twill.solvers.joint.cpsat import solve_joint_cpsat
from twill.solvers.joint.result import JointResult
from twill.solvers.joint.smt import RangeResult, solve_joint, solve_range
from twill.solvers.modulo.ims import iterative_modulo_schedule
from twill.solvers.modulo.methods import ModuloResult, modulo_schedule
from twill.solvers.normalize import Normalization, normalize_problem
from twill.solvers.smt import SMT_BACKENDS, available_backends
from twill.solvers.status import CheckResult, SolveStatus
from twill.verify import violations

__all__ = ["STRATEGIES", "schedule"]

logger = logging.getLogger(__name__)

JOINT_SOLVERS = (*SMT_BACKENDS, "cpsat")
"""The values of ``schedule(solver=)``: an SMT backend (:mod:`twill.joint`) or CP-SAT
(:mod:`twill.joint_cpsat`)."""

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
MODULO_SLICE_S = 20.0
"""Seconds the modulo phase of one II may take before the search goes on with the bounds it has on the
least modulo length ``LEN(M)`` (``[low, length]``): the joint windows then run from ``ceil(low / II)`` to
``ceil(length / II) + stage_slack``, a superset of those the exact ``LEN(M)`` gives. A tuning choice:
every FA loop decides each II's ``LEN(M)`` in under 1.5 s; the 45-op synthetic loop took 16-19 s at II 126
and 114 s at II 127 (benchmarks/results/modulo_methods.md, benchmarks/results/solve_times_changes.md)."""


@dataclass
class _Run:
    """Mutable bookkeeping of one search."""

    problem: Problem
    bound: Bounds
    deadline: float | None
    progress: Progress | None
    started: float
    attempts: list[Attempt]
    phase_time: dict[str, float]
    phase_calls: dict[str, int]
    timed_out: bool = False
    interrupted: bool = False
    window_limit: float | None = None
    builds: list[tuple[int, float]] = field(default_factory=list)  # (stages, seconds) per joint formula
    ranges: bool = True
    per_ii: list[float] = field(default_factory=list)  # seconds of each II decided one by one
    range_build: float = 0.0  # seconds to state the last range formula
    bounded: list[tuple[int, int, int]] = field(default_factory=list)  # (II, low, length): LEN(M) not proven
    methods: str = ""  # the joint solver and modulo method, for the certificate
    first_window: dict[int, int] = field(default_factory=dict)  # II -> first window the modulo bound allows
    range_covered: dict[int, int] = field(default_factory=dict)  # II -> stages a range query refuted up to
    modulo_refuted: set[int] = field(default_factory=set)  # IIs without any modulo schedule
    found: tuple | None = None  # the schedule found before the closing phase, for Ctrl-C there

    def note(self, attempt: Attempt, quiet: bool = False) -> None:
        """Record ``attempt``; report it (an ``attempt`` progress event) unless ``quiet``."""
        self.attempts.append(attempt)
        logger.debug("II=%d stages=%s %s %s in %.2fs %s", attempt.ii, attempt.stages, attempt.phase,
                     attempt.status, attempt.wall_s, attempt.reason)
        if not quiet:
            self.emit(EventKind.ATTEMPT, ii=attempt.ii, stages=attempt.stages, phase=attempt.phase,
                      status=attempt.status)

    def emit(self, kind: EventKind, **info: Any) -> None:
        """Report a :class:`~twill.search.progress.ProgressEvent` of ``kind`` with the fields ``info``."""
        if self.progress is not None:
            self.progress(ProgressEvent(kind, time.monotonic() - self.started, **info))

    def spend(self, phase: str, seconds: float, calls: int = 1) -> None:
        """Add ``seconds`` and ``calls`` to ``phase`` and report them (a ``spent`` progress event)."""
        self.phase_time[phase] = self.phase_time.get(phase, 0.0) + seconds
        self.phase_calls[phase] = self.phase_calls.get(phase, 0) + calls
        self.emit(EventKind.SPENT, phase=phase, wall_s=seconds, calls=calls)

    def left(self) -> float | None:
        """Seconds until the deadline (never negative), or None without a time limit."""
        return None if self.deadline is None else max(0.0, self.deadline - time.monotonic())

    def build_estimate(self, stages: int) -> float:
        """Seconds that stating the joint formula of a ``stages``-stage window should take: the last one
        of that many stages, else the last one scaled by the stage count (the copies grow with it); 0
        before the first."""
        same = [sec for n, sec in self.builds if n == stages]
        if same:
            return same[-1]
        if self.builds:
            n, sec = self.builds[-1]
            return sec * stages / n
        return 0.0

    def expired(self) -> bool:
        """True (and the run marked timed out) once the deadline has passed: no solver call may start."""
        if self.deadline is not None and time.monotonic() >= self.deadline:
            self.timed_out = True
            return True
        return False


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
        takes up to :data:`FALLBACK_S` more seconds), else :class:`InfeasibleError` says which IIs were
        decided.
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
    _check_numbers(normalize_upper=normalize_upper, time_limit=time_limit, window_limit=window_limit)
    started = time.monotonic()  # the time limit counts from here (loading OR-Tools takes ~1 s)
    if solver not in JOINT_SOLVERS:
        raise OptionsError(f"solver {solver!r} is not one of {', '.join(JOINT_SOLVERS)}", option="solver")
    if solver == "cpsat":  # SolverUnavailableError now, before any phase runs
        load_cp_model("solver 'cpsat'", ", ".join(available_backends()) or "none")
    mach = load_machine(machine)
    if register_limit is not None and register_limit > mach.max_regs_per_thread:
        raise OptionsError(f"register_limit={register_limit} is above {mach.name}'s "
                           f"{mach.max_regs_per_thread} registers per thread", option="register_limit")
    common = dict(max_groups=max_groups, register_limit=register_limit,
                  register_plan=tuple(register_plan) if register_plan else None, cross_group=cross_group,
                  max_stages=max_stages, stage_slack=stage_slack, max_ii=max_ii, relax=frozenset(relax),
                  apart=apart)

    def solve(depth: int, limit: float | None) -> Schedule:
        return _schedule(graph, mach, Options(**common, prefetch=depth), solver=solver, ilp=ilp,
                         modulo=modulo, strategy=strategy, time_limit=limit,
                         normalize_upper=normalize_upper, window_limit=window_limit, ranges=ranges,
                         progress=progress)

    first_limit = None if time_limit is None else max(0.1, time_limit - (time.monotonic() - started))
    if prefetch is not None:
        sched = solve(prefetch, first_limit)
        need = prefetch_needed(sched)
        if sched.problem.streaming and need > prefetch:
            sched = _noted(sched, f"prefetch: the {prefetch} extra buffer(s) asked for leave part of the "
                                  f"streaming loads' latency exposed at II {sched.ii} (it takes {need} to "
                                  f"hide it); the II assumes it hidden, so the loop runs slower (twill "
                                  f"simulate shows by how much)")
            warnings.warn(sched.certificate.notes[-1], TwillWarning, stacklevel=2)
        return sched
    sched, depth = solve(1, first_limit), 1
    shallow: list[str] = []  # the depths solved and found too shallow, for the certificate
    while sched.problem.streaming:
        need = prefetch_needed(sched)
        if need <= depth:
            before = f" (solved again: {', '.join(shallow)})" if shallow else ""
            claim = ("heuristic (see above)" if sched.certificate.heuristic
                     else "optimal for this depth")
            return _noted(sched, f"prefetch: {depth} extra buffer(s) per streaming load, the least that "
                                 f"hides their latency at this II{before}; the answer is {claim}")
        left = None if time_limit is None else time_limit - (time.monotonic() - started)
        if left is not None and left <= 0:
            return _noted(sched, f"prefetch: depth {depth} does not hide the streaming loads' latency "
                                 f"(they need {need}); the time limit stopped the solve at depth {need}")
        try:
            deeper = solve(need, left)
        except (InfeasibleError, ResourceError) as exc:  # the deeper rings do not fit, or time ran out
            return _noted(sched, f"prefetch: depth {depth} does not hide the streaming loads' latency, and "
                                 f"with the {need} buffers that would there is no schedule ({exc}); this "
                                 f"schedule leaves part of the load latency exposed")
        shallow.append(f"depth {depth} at II {sched.ii} was too shallow")
        sched, depth = deeper, need
    return sched


def prefetch_needed(sched: Schedule) -> int:
    """Least prefetch depth (extra buffers per streaming load, >= 1) that hides every streaming load's
    latency in ``sched``.

    A streaming load's SMEM buffer lives from ``start - prefetch * II`` to the end of its last reader
    (:func:`twill.liveness.memory_intervals`), so it has ``R = prefetch + ceil((end - start) / II)``
    ring slots. The producer issues the copy of iteration ``i`` as soon as the slot of iteration
    ``i - R`` is released (``end - R * II`` in iteration ``i``'s frame: the empty-barrier wait, paper
    §3.2), and the data must land before the first reader starts: ``R * II >= end + latency -
    first_read``, with the op's ``latency`` (``cost.tma_latency`` for a TMA load). Time in the
    schedule's (normalized) units; the simulator's ring (:func:`twill.simulate.simulate`) follows the
    same rule.
    """
    p, ii, start = sched.problem, sched.ii, sched.start
    ends = {iv.what: iv.end for iv in memory_intervals(p, ii, start, sched.group, "smem")}
    need = 1
    for name in sorted(p.streaming):
        reads = [start[e.dst] + e.distance * ii for e in p.out_edges(name)]
        if not reads or name not in ends:
            continue
        slots_for_life = math.ceil((ends[name] - start[name]) / ii)
        ring = math.ceil((ends[name] + p.op(name).latency - min(reads)) / ii)
        need = max(need, ring - slots_for_life)
    return need


def _noted(sched: Schedule, note: str) -> Schedule:
    cert = dataclasses.replace(sched.certificate, notes=(*sched.certificate.notes, note))
    return dataclasses.replace(sched, certificate=cert)


def _schedule(graph: Graph, mach: Machine, options: Options, *, solver: str, ilp: str, modulo: str,
              strategy: str, time_limit: float | None, normalize_upper: int, window_limit: float | None,
              progress: Progress | None, ranges: bool = True) -> Schedule:
    """One search at fixed options (:func:`schedule` without the prefetch-depth loop)."""
    started = time.monotonic()
    raw = build_problem(graph, mach, options)
    check_resources(raw)
    if strategy == "joint":
        _check_pool(raw)
    _check_apart(raw, strategy)
    deadline = None if time_limit is None else started + time_limit
    t0 = time.monotonic()
    raw_bounds = bounds(raw)
    t1 = time.monotonic()
    norm_limit = None if deadline is None else max(0.1, min(0.2 * time_limit, deadline - t1))
    problem, norm = normalize_problem(raw, upper=normalize_upper, backend=ilp, time_limit=norm_limit)
    t2 = time.monotonic()
    bound = bounds(problem)
    methods = (f"joint problem on {solver}, modulo phase by {modulo}" if strategy == "joint"
               else f"modulo phase by {modulo} (Twill-SWP: no joint problem)")
    run = _Run(problem, bound, deadline, progress, started, [], {}, {}, window_limit=window_limit,
               ranges=ranges, methods=methods)
    run.spend("bounds", (t1 - t0) + (time.monotonic() - t2))
    run.spend("normalize", t2 - t1)
    run.emit(EventKind.BOUNDS, res_mii=bound.res_mii, rec_mii=bound.rec_mii, mii=bound.mii)
    limit_ii = options.max_ii or _sequential_ii(problem)
    try:
        found = _search(run, limit_ii, solver, ilp, modulo, strategy)
        if strategy == "joint":
            found = _closed(run, found, limit_ii, solver, ilp, modulo)
    except KeyboardInterrupt as exc:
        if run.found is None:
            raise InterruptedSolveError("interrupted before any schedule was found") from exc
        found, run.interrupted = run.found, True
    if found is None and run.timed_out and strategy == "joint":
        fallback = _fallback(run, _reached(run), limit_ii)
        if fallback is not None:
            return _heuristic_schedule(run, fallback, norm, raw_bounds)
    if found is None:
        reached = _reached(run)
        top = min(limit_ii, reached - 1)
        open_ = [x for x in range(bound.mii, top + 1) if not _complete(run, x)]
        extra = () if not run.timed_out else (
            f"time limit: every II below {reached} was refuted; II {reached} was not decided",)
        if open_ and strategy == "joint":
            extra = (*extra, f"stage windows: IIs {_spans(open_)} were refuted only up to "
                             f"{min(_coverage(run, x) for x in open_)} stages, not every stage count")
        why = (f"time limit reached before any schedule was found; the optimal II is at least {reached}"
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
        cert = _certificate(run, proven=False, extra=extra, top=top)
        raise InfeasibleError(f"{graph.name}: {why}; " + _summary(cert), certificate=cert)
    sched = _finish(run, found, norm, raw_bounds, strategy)
    sched = _noted(sched, budget_sum(sched))
    problems = violations(sched)
    if problems:
        raise SolverError(f"internal error: the {strategy} schedule fails verification: {problems[0]}")
    if run.interrupted:
        raise InterruptedSolveError(
            f"interrupted while tightening the schedule at II {sched.ii}; it is the best found so far",
            schedule=sched)
    return sched


def _check_numbers(*, normalize_upper: Any, time_limit: Any, window_limit: Any) -> None:
    """:class:`OptionsError` unless ``normalize_upper`` is an integer >= 1 and the limits are ``None`` or
    finite numbers of seconds > 0."""
    if isinstance(normalize_upper, bool) or not isinstance(normalize_upper, int) or normalize_upper < 1:
        raise OptionsError(f"normalize_upper={normalize_upper!r} must be an integer >= 1 (the bound U on the "
                           "normalized cost sum)", option="normalize_upper")
    for name, value in (("time_limit", time_limit), ("window_limit", window_limit)):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                or value <= 0:
            raise OptionsError(f"{name}={value!r} must be a number of seconds > 0 (or None)", option=name)


def _check_pool(problem: Problem) -> None:
    """Reject a warp-group pool that cannot hold the loop: variable-latency ops take a group of their own
    (variable-latency isolation, paper §5.3), so with any compute op the joint search needs two groups.

    Raises
    ------
    OptionsError
        ``max_groups`` (or the register plan's length) is 1 and the loop has both kinds of op; or
        ``cross_group=False`` and a register value must cross groups (:meth:`Problem.forced_cross`).
    """
    if not problem.options.cross_group:
        forced = [e for e in problem.edges if e.carrier == "register" and e.src != e.dst
                  and problem.forced_cross(e)]
        if forced:
            e = forced[0]
            raise OptionsError(
                f"cross_group=False keeps register values inside a warp group, but edge {e.label} carries "
                f"one between ops that never share a group ({_why_apart(problem, e)}); allow "
                f"cross-group values, or use strategy='swp'", option="cross_group")
    vl = [op.name for op in problem.ops if op.variable_latency]
    compute = [op.name for op in problem.ops if not op.variable_latency]
    if not vl or not compute or pool_size(problem) >= 2:
        return
    plan = problem.options.register_plan is not None
    option = "register_plan" if plan else "max_groups"
    given = f"register_plan {list(problem.options.register_plan)}" if plan else "max_groups=1"
    raise OptionsError(
        f"{given} offers one warp group, but the variable-latency ops ({', '.join(vl)}) need a group of "
        f"their own (paper §5.3) besides the {len(compute)} compute ops ({', '.join(compute[:4])}"
        f"{', ...' if len(compute) > 4 else ''}); offer at least 2 groups, or use strategy='swp' "
        f"(software pipelining without warp specialization)", option=option)


def _check_apart(problem: Problem, strategy: str) -> None:
    """Reject ``apart`` pairs that no schedule can keep apart, before any solve (the search would scan
    every II and say only "no schedule").

    Raises
    ------
    OptionsError
        ``strategy='swp'`` (its fixed split does not read ``apart``); a pair of two variable-latency ops
        (all of them share the variable-latency group); a pool of one warp group; ``cross_group=False``
        with a pair joined by a register edge.
    """
    pairs = problem.options.apart
    if not pairs:
        return
    if strategy != "joint":
        raise OptionsError(f"apart={[list(p) for p in pairs]} needs strategy='joint': the '{strategy}' "
                           "strategy splits ops into groups by a fixed rule that does not read it",
                           option="apart")
    for a, b in pairs:
        if problem.op(a).variable_latency and problem.op(b).variable_latency:
            raise OptionsError(f"apart: {a!r} and {b!r} both have variable latency, and every variable-"
                               "latency op sits on the one variable-latency group (paper §5.3)",
                               option="apart")
        if pool_size(problem) < 2:
            raise OptionsError(f"apart: {a!r} and {b!r} need two warp groups, but the pool offers one "
                               "(max_groups or the register plan)", option="apart")
        joined = [e for e in problem.edges if e.carrier == "register" and {e.src, e.dst} == {a, b}]
        if joined and not problem.options.cross_group:
            raise OptionsError(f"apart: {a!r} and {b!r} are joined by the register edge {joined[0].label}, "
                               "which cross_group=False keeps inside one group", option="apart")


def _why_apart(problem: Problem, e: Edge) -> str:
    a, b = problem.op(e.src), problem.op(e.dst)
    if a.variable_latency != b.variable_latency:
        vl = a if a.variable_latency else b
        return f"{vl.name!r} has variable latency and sits on the variable-latency group"
    return f"{a.name!r} is issued by {a.warps} warps, {b.name!r} by {b.warps}"


def _sequential_ii(problem: Problem) -> int:
    """An II at which running the ops one after another, waiting out every latency and hand-off, works."""
    total = sum(op.cycles for op in problem.ops)
    total += sum(max(e.latency + e.cross, problem.crossing_delay(e)) + 2 * e.transfer for e in problem.edges)
    return max(1, total)


def _summary(cert: Certificate) -> str:
    ruled = cert.ruled_out()
    if not ruled:
        return "nothing was decided"
    lo, hi = min(ruled), max(ruled)
    tried = f"II {lo} tried" if lo == hi else f"II {lo}..{hi} tried ({len(ruled)} values)"
    return f"{tried}; last: {ruled[hi]}"


def _reached(run: _Run) -> int:
    """The least II not refuted by the attempts so far: a proven lower bound on the optimal II."""
    undecided = {a.ii for a in run.attempts if a.status not in ("infeasible", "unsat", "skipped", "invalid")}
    refuted = {a.ii for a in run.attempts} - undecided
    ii = run.bound.mii
    # refuted for every stage count (a joint search; the stage windows alone bound nothing)
    while ii in refuted and (run.methods.startswith("modulo") or _complete(run, ii)):
        ii += 1
    return ii


def _search(run: _Run, limit_ii: int, solver: str, ilp: str, method: str, strategy: str) -> tuple | None:
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
        found = _at_ii(run, ii, solver, ilp, method, strategy)
        if found is not None:
            return found
        run.per_ii.append(time.monotonic() - began)
        ii += 1
        while strategy == "joint" and run.ranges and solver != "cpsat" and width > 1 and not run.expired():
            hi = min(ii + width - 1, limit_ii)
            res = _range(run, ii, hi, solver)
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


CLOSING_SPAN = 2
"""A closing query covers IIs ``[lo, CLOSING_SPAN * lo)`` at most (a tuning choice: its modulo shifts per
pair of ops grow with ``stages * hi / lo``; the FA backward's [105, 1096] in one query held 1.4 GB)."""
COVER_ALL = 10**9
"""Stage coverage of an II that has no modulo schedule at all (every stage count refuted)."""


def _need(run: _Run, ii: int) -> int:
    """Stage count up to which ``ii`` must be refuted to be refuted for every stage count the model
    allows: :func:`twill.reductions.stage_bound`, or the user's ``max_stages`` when smaller."""
    need = stage_bound(run.problem, ii)
    cap = run.problem.options.max_stages
    return need if cap is None else min(need, cap)


def _coverage(run: _Run, ii: int) -> int:
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


def _complete(run: _Run, ii: int) -> bool:
    """True if ``ii`` was refuted for every stage count the model allows."""
    return _coverage(run, ii) >= _need(run, ii)


def _spans(iis: Sequence[int]) -> str:
    """``[a, b], c, ...`` for sorted IIs."""
    parts, runs = [], _runs(list(iis))
    for lo, hi in runs:
        parts.append(str(lo) if lo == hi else f"[{lo}, {hi}]")
    return ", ".join(parts)


def _runs(iis: list[int]) -> list[tuple[int, int]]:
    """Maximal runs of consecutive values of sorted ``iis``."""
    out: list[tuple[int, int]] = []
    for x in iis:
        if out and out[-1][1] == x - 1:
            out[-1] = (out[-1][0], x)
        else:
            out.append((x, x))
    return out


def _closed(run: _Run, found: tuple | None, limit_ii: int, solver: str, ilp: str,
            method: str) -> tuple | None:
    """The closing phase: refute every II below the answer (or up to ``limit_ii`` without one) for every
    stage count the model allows (:func:`_need`), where the search refuted only its stage windows
    (``n_min .. n_min + stage_slack``). A II found to have a schedule with more stages is decided again
    with its windows up to that bound, and becomes the answer. Stops at the deadline (the answer is then
    not proven: :func:`_finish` sees the IIs left incomplete)."""
    while True:
        run.found = found
        top = limit_ii if found is None else found[1] - 1
        better = _close(run, top, solver)
        if better is None:
            return found
        again = _at_ii(run, better, solver, ilp, method, "joint", upto=_need(run, better))
        if again is None:  # the deadline stopped the II's own search
            return found
        found = again


def _close(run: _Run, top: int, solver: str) -> int | None:
    """Refute the IIs in ``[MII, top]`` not yet refuted for every stage count, one query per run of them
    (:func:`twill.joint.solve_range`, or the CP-SAT joint model per II) with every ``L <= need * II``.

    Returns
    -------
    int or None
        The least II found to have a schedule (every II below it in its run refuted), or None when all
        were refuted or the deadline stopped a query.
    """
    pending = [x for x in range(run.bound.mii, top + 1) if not _complete(run, x)]
    for lo, last in _runs(pending):
        while lo <= last:
            if run.expired():
                return None
            # a range's formula has about stages * hi / lo shifts per pair of ops: at most a doubling
            hi = min(last, CLOSING_SPAN * lo - 1)
            stages = _need(run, lo)
            run.emit(EventKind.PHASE, phase="closing", lo=lo, hi=hi, stages=stages)
            deadline = run.deadline
            if run.window_limit is not None:  # one question never takes longer than a window may
                end = time.monotonic() + run.window_limit
                deadline = end if deadline is None else min(deadline, end)
            if solver == "cpsat":
                res = solve_joint_cpsat(run.problem, lo, stages, first=_coverage(run, lo) + 1,
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
                                 f"{_coverage(run, refuted + 1)} stages not refuted"))
                return None
            lo = hi + 1 if solver != "cpsat" else lo + 1
    return None


def _range_stages(run: _Run, lo: int, hi: int) -> tuple[int, int]:
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


def _range(run: _Run, lo: int, hi: int, solver: str) -> RangeResult | None:
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


def _at_ii(run: _Run, ii: int, solver: str, ilp: str, method: str, strategy: str,
           upto: int = 0) -> tuple | None:
    """Decide one II: the modulo phase, then the joint windows (or the SWP split); the windows go at least
    to ``upto`` stages (the closing phase asks for every stage count)."""
    opts = run.problem.options
    run.emit(EventKind.II, ii=ii)
    mod = _modulo(run, ii, method, ilp, solver)
    if mod is None:
        return None
    if strategy == "swp":
        return _swp(run, ii, mod)
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
    res = _joint(run, ii, first, last, mod, solver)
    if res is None:
        if capped and not run.expired():
            run.note(skipped)
        return None
    return ("joint", ii, res, mod)


def _modulo(run: _Run, ii: int, method: str, ilp: str, solver: str) -> ModuloResult | None:
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


def _joint(run: _Run, ii: int, first: int, last: int, mod: ModuloResult, solver: str) -> JointResult | None:
    """Solve the stage windows ``first..last`` of ``ii`` in order with one formula (:func:`solve_joint`
    with ``first``) and note one attempt per window decided or left open. A window that runs out of
    ``window_limit`` is left undecided and the windows after it get a formula of their own."""
    run.emit(EventKind.PHASE, phase="joint", ii=ii, stages=last)
    if solver == "cpsat":
        res = solve_joint_cpsat(run.problem, ii, last, first=first, min_length=mod.low, deadline=run.deadline,
                                window_s=run.window_limit)
    else:
        res = solve_joint(run.problem, ii, last, first=first, min_length=mod.low, backend=solver,
                          deadline=run.deadline, window_s=run.window_limit)
    run.spend("joint", res.wall_s, res.checks)
    run.spend("joint_build", res.build_s)  # part of "joint": stating the formula of one II's windows
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


def _swp(run: _Run, ii: int, mod: ModuloResult) -> tuple | None:
    """Twill-SWP: the modulo schedule, variable-latency ops on group 0, the rest on group 1."""
    p = run.problem
    group = {op.name: (0 if op.variable_latency else (1 if p.has_vl else 0)) for op in p.ops}
    warps = {g: max([p.op(n).warps for n in group if group[n] == g] + [1]) for g in set(group.values())}
    warps = {g: p.resources.group_threads(w) // 32 for g, w in warps.items()}
    needed = _needed_budgets(p, ii, mod.start, group)
    fake = JointResult(ii, math.ceil(mod.length / ii), CheckResult.SAT, mod.start, group, needed, warps,
                       mod.length, {"length": mod.status == SolveStatus.OPTIMAL})
    trial = _finish(run, ("swp", ii, fake, mod), None, {}, "swp", record=False)
    bad = violations(trial)
    if bad:
        run.note(Attempt(ii, fake.stages, "heuristic", "invalid", 0.0, str(bad[0])))
        return None
    run.note(Attempt(ii, fake.stages, "heuristic", "sat", 0.0, f"L = {mod.length}"))
    return ("swp", ii, fake, mod)


def _needed_budgets(p: Problem, ii: int, start: dict[str, int], group: dict[str, int]) -> dict[int, int]:
    """Smallest legal setmaxnreg per group for the model's peak live registers (plain folding)."""
    res = p.resources
    out = {}
    intervals = register_intervals(p, ii, start, group)
    for g in set(group.values()):
        peak = max(fold([iv for iv in intervals if iv.group == g], ii, res.group_overhead))
        out[g] = min(res.setmaxnreg_max, res.round_budget(peak))
    return out


def _certificate(run: _Run, *, proven: bool, extra: tuple[str, ...], top: int) -> Certificate:
    """The certificate, with its scope over the IIs ``[MII, top]``."""
    b = run.bound
    scope: list[ScopeRun] = []
    for x in range(b.mii, top + 1):
        cov = _coverage(run, x)
        if cov <= 0:
            continue
        stages, complete = (None if cov >= COVER_ALL else cov), cov >= _need(run, x)
        last = scope[-1] if scope else None
        if last is not None and last.hi == x - 1 and last.stages == stages and last.complete == complete:
            scope[-1] = ScopeRun(last.lo, x, stages, complete)
        else:
            scope.append(ScopeRun(x, x, stages, complete))
    undecided = sorted({a.ii for a in run.attempts if a.ii <= top + 1 and a.status not in DECIDED})
    return Certificate(b.mii, b.res_mii, b.rec_mii, proven, tuple(run.attempts),
                       run.problem.options.stage_slack, extra, tuple(scope), tuple(undecided))


def _finish(run: _Run, found: tuple, norm: Normalization | None, raw_bounds: Any, strategy: str,
            *, record: bool = True) -> Schedule:
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
    complete = all(_complete(run, x) for x in range(run.bound.mii, ii))
    proven = not undecided and complete and all(res.proven.values()) if strategy == "joint" else False
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
        partial = [x for x in range(run.bound.mii, ii) if not _complete(run, x)]
        which = (f"every II below {ii} except {', '.join(map(str, left_open))} (undecided)" if left_open
                 else f"every II below {ii}")
        if partial:
            notes.append(f"scope: {which} was refuted for the stage windows searched; IIs {_spans(partial)} "
                         f"only up to {min(_coverage(run, x) for x in partial)} stages, not every stage "
                         f"count the model allows (the closing query did not finish), so a schedule with "
                         f"more stages at a smaller II is not ruled out")
        else:
            notes.append(f"scope: {which} was refuted for every stage count the model allows (up to the "
                         f"stage bound of docs/model.md §6"
                         + (f", or max_stages = {p.options.max_stages}" if p.options.max_stages else "")
                         + ")")
    notes.append(f"solvers: {run.methods}")
    for at, low, length in run.bounded if strategy == "joint" else ():
        notes.append(f"modulo phase: LEN(M) at II {at} bounded to [{low}, {length}], not proven within its "
                     f"{MODULO_SLICE_S:g} s slice; every stage window the bounds allow was searched")
    why = "time limit" if strategy == "joint" else f"time limit or the modulo phase's {MODULO_SLICE_S:g} s"
    if run.window_limit is not None and not run.timed_out:
        why = f"window_limit = {run.window_limit:g} s"
    notes += [f"{goal} not proven minimal ({why})" for goal, ok in res.proven.items() if not ok]
    stats = tuple(PhaseStats(ph, round(t, 4), run.phase_calls.get(ph, 1)) for ph, t in run.phase_time.items())
    slots = slots_from(start, group, ii, p.names)
    return Schedule(
        problem=p, ii=ii, length=res.length, slots=slots, warp_groups=groups,
        certificate=_certificate(run, proven=proven, extra=tuple(notes), top=ii - 1), stats=stats,
        strategy=strategy,
        normalization=norm.to_dict() if norm is not None else {},
        bounds_cycles={"res_mii": raw_bounds.res_mii, "rec_mii": raw_bounds.rec_mii,
                       "critical_path": raw_bounds.critical_path} if raw_bounds else {},
    )


FALLBACK_S = 30.0
"""Seconds the fallback heuristic (:func:`_fallback`) may take once the time limit has ended the search
without a schedule: a tuning choice (each II costs one iterative modulo schedule and one verification per
split, well under a second on the FA loops)."""


def _splits(p: Problem) -> list[dict[str, int]]:
    """Warp-group assignments for the fallback: the variable-latency ops on group 0 (paper §5.3) and the
    compute ops packed onto ``k`` groups for each ``k`` the pool allows, fewest first. The accumulators
    (live at every moment, :func:`twill.encoding.accumulators`) go largest first to the group holding the
    fewest registers; every other compute op joins the group of the nearest accumulator along register
    edges (either direction; a sub-tile's values stay on its accumulators' group and need no hand-off),
    the lower group on a tie, the least-loaded group when no accumulator is reachable. Ops are taken by
    name, so the splits depend only on the problem."""
    first = 1 if p.has_vl else 0
    compute = [op.name for op in p.ops if not op.variable_latency]
    accs = [a for a in sorted(accumulators(p), key=lambda n: (-p.op(n).regs, n)) if a in compute]
    links = nx.Graph()
    links.add_nodes_from(compute)
    links.add_edges_from((e.src, e.dst) for e in p.edges
                         if e.carrier == "register" and e.src in links and e.dst in links and e.src != e.dst)
    out = []
    for k in range(1, max(1, pool_size(p) - first) + 1):
        group = {op.name: 0 for op in p.ops if op.variable_latency}
        load = dict.fromkeys(range(first, first + k), 0)
        for a in accs:
            g = min(load, key=lambda w: (load[w], w))
            group[a], load[g] = g, load[g] + p.op(a).regs
        hops = {a: nx.single_source_shortest_path_length(links, a) for a in accs}
        for n in compute:
            if n in group:
                continue
            near = [(hops[a][n], group[a]) for a in accs if n in hops[a]]
            group[n] = min(near)[1] if near else min(load, key=lambda w: (load[w], w))
        out.append(group)
    return out


def _fallback(run: _Run, lo: int, hi: int) -> tuple | None:
    """A valid schedule without a proof, for a search the time limit stopped with none found: at IIs from
    ``lo`` (the least II not refuted) upward in growing steps (1, 2, 4, ... up to ``hi``), the iterative
    modulo schedule of the problem with each :func:`_splits` assignment's crossing delays on the edges it
    makes cross, kept at the first II and split that pass :func:`twill.verify.violations`; then the IIs
    between the last one that failed and it are bisected for a smaller one that passes. Takes at most
    :data:`FALLBACK_S` seconds; None if nothing passed (or a register plan is given: its budgets belong to
    the pool's groups, which these splits do not follow)."""
    p = run.problem
    if p.options.register_plan is not None:
        return None
    until = time.monotonic() + FALLBACK_S
    splits = _splits(p)

    def attempt(ii: int) -> tuple | None:
        for group in splits:
            if time.monotonic() >= until:
                return None
            edges = [dataclasses.replace(e, latency=p.crossing_delay(e))
                     if e.src != e.dst and group[e.src] != group[e.dst] else e for e in p.edges]
            start = iterative_modulo_schedule(p.replace_times(p.ops, edges, p.cycles_per_unit), ii)
            if start is None:
                continue
            found = _split_result(run, ii, start, group)
            if found is not None:
                return found
        return None

    ii, step, failed, best = lo, 1, lo - 1, None
    last_resort = sorted(
        (r for r in ([_list_schedule(p, group, hi) for group in splits]
                     + [_no_overlap(p, group, hi) for group in splits]) if r is not None),
        key=lambda r: (r[0], r[3]))
    while ii <= hi and time.monotonic() < until:
        best = attempt(ii)
        if best is not None:
            break
        failed, ii, step = ii, min(hi, ii + step), step * 2
        if ii == failed:
            break
    for ii, start, group, how in last_resort if best is None else ():
        best = _split_result(run, ii, start, group, how)
        if best is not None:
            break
    if best is None:
        return None
    low, high = failed + 1, best[1] - 1
    while low <= high and time.monotonic() < until:
        mid = (low + high) // 2
        better = attempt(mid)
        if better is not None:
            best, high = better, mid - 1
        else:
            low = mid + 1
    return best


def _no_overlap(p: Problem, group: dict[str, int], hi: int) -> tuple | None:
    """The last resort of :func:`_fallback`: the ops one after another in a depth-first topological
    order of the distance-0 edges, each after its predecessor ends and after every producer's delay (the
    crossing delay and the SMEM traffic of a hand-off when ``group`` makes it cross); the II is its
    length plus the largest such delay, so no two ops (nor two iterations) overlap. ``(II, start,
    group)``, or None if that II is above ``hi`` or the distance-0 edges have a cycle."""
    forward = nx.DiGraph()
    forward.add_nodes_from(p.names)
    forward.add_edges_from((e.src, e.dst) for e in p.edges if e.distance == 0 and e.src != e.dst)
    order = _depth_first(p)
    if order is None:
        return None

    def delay(e: Edge) -> int:
        return (p.crossing_delay(e) + 2 * e.transfer if group[e.src] != group[e.dst] else e.latency)

    start: dict[str, int] = {}
    t = 0
    for n in order:
        ready = [start[e.src] + delay(e) for e in p.in_edges(n) if e.distance == 0 and e.src in start]
        start[n] = max([t, *ready])
        t = start[n] + p.op(n).cycles + max([2 * e.transfer for e in p.edges], default=0)
    ii = t + max([delay(e) for e in p.edges], default=0) + 1
    return None if ii > hi else (ii, start, group, "a schedule without overlap (ops one after another)")


def _depth_first(p: Problem) -> list[str] | None:
    """The ops in a depth-first topological order of the distance-0 edges (reverse postorder, successors
    by name): a value's readers follow it soon. None if those edges have a cycle."""
    forward = nx.DiGraph()
    forward.add_nodes_from(p.names)
    forward.add_edges_from((e.src, e.dst) for e in p.edges if e.distance == 0 and e.src != e.dst)
    if not nx.is_directed_acyclic_graph(forward):
        return None
    return list(reversed(list(nx.dfs_postorder_nodes(forward, sort_neighbors=sorted))))


def _list_schedule(p: Problem, group: dict[str, int], hi: int) -> tuple | None:
    """A fallback without overlap between iterations: the ops in :func:`_depth_first` order, each at the
    first time after its producers' delays (the crossing delay when ``group`` makes an edge cross) and
    after the previous op of its warp group has finished issuing, where its reservations (and the SMEM
    traffic of its hand-offs, :meth:`Problem.transfers`) fit the units' capacities; the warp groups run
    side by side. The II is the length plus the largest delay, so iterations never overlap.
    ``(II, start, group, how)``, or None if that II is above ``hi`` or the edges have a cycle."""
    order = _depth_first(p)
    if order is None:
        return None
    caps = p.resources.units
    used: dict[tuple[str, int], int] = {}
    crossing = [e for e in p.edges
                if e.src != e.dst and group[e.src] != group[e.dst] and not p.forced_cross(e)]

    def delay(e: Edge) -> int:
        return p.crossing_delay(e) if group[e.src] != group[e.dst] else e.latency

    start: dict[str, int] = {}
    free: dict[int, int] = {}
    for n in order:
        mine = [e for e in crossing if n in (e.src, e.dst)]
        rows = [*p.reservations(n), *((HANDOFF_UNIT, off, cyc, 1) for op, off, cyc in p.transfers(mine)
                                      if op == n and HANDOFF_UNIT in caps)]
        t = max([free.get(group[n], 0), *(start[e.src] + delay(e) for e in p.in_edges(n)
                                          if e.distance == 0 and e.src in start)])
        t = max(t, -min([off for _, off, _, _ in rows], default=0))
        while any(used.get((u, t + off + c), 0) + k > caps[u] for u, off, cyc, k in rows for c in range(cyc)):
            t += 1
        for u, off, cyc, k in rows:
            for c in range(cyc):
                used[(u, t + off + c)] = used.get((u, t + off + c), 0) + k
        start[n] = t
        free[group[n]] = t + p.op(n).issue_cycles
    length = max(start[op.name] + op.cycles for op in p.ops)
    ii = length + max([delay(e) for e in p.edges] + [0]) + 1
    return None if ii > hi else (ii, start, group, "a list schedule without overlap between iterations")


def _split_result(run: _Run, ii: int, start: dict[str, int], group: dict[str, int],
                  how: str = "the iterative modulo schedule") -> tuple | None:
    """``(how, ii, result, None)`` for the schedule ``start`` / ``group`` if it verifies."""
    p = run.problem
    warps = {g: max([p.op(n).warps for n in group if group[n] == g] + [1]) for g in set(group.values())}
    warps = {g: p.resources.group_threads(w) // 32 for g, w in warps.items()}
    length = max(start[op.name] + op.cycles for op in p.ops)
    fake = JointResult(ii, math.ceil(length / ii), CheckResult.SAT, start, group,
                       _needed_budgets(p, ii, start, group), warps, length, {"length": False})
    found = (how, ii, fake, None)
    if violations(_finish(run, found, None, {}, "swp", record=False)):
        return None
    return found


def _heuristic_schedule(run: _Run, found: tuple, norm: Normalization | None, raw_bounds: Any) -> Schedule:
    """The fallback's schedule, marked not proven: its certificate says it is heuristic and gives the
    proven lower bound on the optimal II (the least II the search did not refute)."""
    reached = _reached(run)
    sched = _finish(run, found, norm, raw_bounds, "swp")
    ii = sched.ii
    note = (f"heuristic: the time limit ended the search before any joint schedule was found; this is "
            f"{found[0]} at II {ii} with a fixed warp-group split ({len(sched.warp_groups)} "
            f"groups), verified but not optimal: every II below {reached} was refuted, so the optimal II "
            f"lies in [{reached}, {ii}]")
    notes = (*(n for n in sched.certificate.notes if not n.startswith("Twill-SWP:")), note)
    cert = dataclasses.replace(sched.certificate, proven_optimal=False, notes=notes, heuristic=True,
                               ii_bound=reached)
    warnings.warn(note, TwillWarning, stacklevel=3)
    return _noted(dataclasses.replace(sched, certificate=cert, strategy="joint"), budget_sum(sched))
