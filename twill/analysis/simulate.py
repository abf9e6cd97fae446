"""A discrete-event model of one SM running a pipelined, warp-specialized loop.

:func:`simulate` runs ``iterations`` copies of a :class:`~twill.schedule.Schedule`'s loop body, each warp
group issuing its ops in the schedule's order (by start time, iteration by iteration: the prologue,
steady state and epilogue the stages imply; a loop shorter than the stages runs the pieces that exist),
and measures what happens when latencies are not the ones the solver assumed.

The machine model, in order of the checks made before an op of iteration ``i`` may issue at time ``t``:

* **In-order issue.** An op starts no earlier than the previous op of its warp group started. A group may
  issue an op while an earlier one is still issuing (the warps interleave independent instructions; the
  units bound the throughput), as in the solver's model (``docs/model.md`` §7).
* **Blocking waits.** An op that waits (a blocking edge, or any value from another warp group) starts
  only when every earlier op of its group has finished issuing (``issue_cycles``), and the next op
  starts strictly later: the whole group waits with it. Asynchronous Tensor Core, TMA and TMEM ops free
  their warps after ``issue_cycles``; the units stay busy for their reservation table.
* **Data.** For each dependence ``u -> v`` with distance ``δ``: the result of ``u`` in iteration
  ``i - δ`` (a value from before the loop when ``i < δ``) is usable ``d`` cycles after ``u`` issued,
  plus the hand-off cost when the groups differ (the full barrier of the channel).
* **Buffers.** A value that holds registers, SMEM or TMEM, or has bytes to hand to another group, has a
  ring of ``depth`` copies (the schedule's :meth:`~twill.schedule.Schedule.buffer_depths`, raised where
  a copy staged for another group lives longer). The producer of iteration ``i`` waits until every
  consumer of iteration ``i - depth`` has released its copy (the empty barrier): a register reader when
  it issues (when it ends if it reads registers asynchronously), an SMEM/TMEM reader when it ends, and
  never before the producer itself ends. A streaming load (paper §5.3) therefore runs up to ``depth``
  iterations ahead of its consumers. Copies whose consumers lie past the last iteration are drained at
  loop exit.
* **Units.** Every rectangle of the op's reservation table fits its unit's capacity. With
  ``unit_order="schedule"`` (the default) each unit also serves the ops in the schedule's order (by the
  static start of their reservation): an op does not take a unit before the op the schedule puts before
  it there has started on it, as the named barriers of a code generator following the schedule would
  enforce (FA3's ping-pong orders its two consumer warp groups' GEMMs this way). With ``"greedy"`` the
  earliest issuer gets the unit (ties: the lower warp group), as hardware arbitration without such
  barriers; an op issued early can then take a unit from the op the schedule planned there, and the
  steady state can settle above II. A register value that crosses warp groups also takes the SMEM ports
  (:meth:`~twill.model.problem.Problem.transfers`): the producer's store from the moment the value is ready,
  the consumer's load in its slot before the consumer issues. These bookings take the ports when they
  are free, outside the schedule's order on the unit (putting them in it deadlocks: a load's slot lies
  before its op's issue), so a schedule bound by the SMEM ports can settle above its II even with the
  model's latencies.

**Signals as mbarriers** (``barrier_cycles``, off by default). A code generator signals between warp groups
with mbarriers: a buffer copy freed by a reader on another group, and a unit's turn passed to another
group (arrived once the predecessor is issued), then reach the other group ``barrier_cycles`` later.
``twill tune --backend gluon`` simulates its kernels so (:func:`twill.tune.gluon_terms.trip_terms`).

**Time.** By default (``graph=None``) durations are the schedule problem's normalized units times
``cycles_per_unit``: the exact model the solver proved its II on, so with the model's latencies the
simulated steady state can be compared with ``Schedule.ii_cycles``. Normalization may merge costs (the
certificate's notes say which), so pass the loop's :class:`~twill.ir.graph.Graph` as ``graph=`` to simulate
with its raw cycle costs instead: the schedule then only fixes the order, the groups and the depths.
Time advances in integer ticks of about one cycle (``SimResult.cycles_per_tick``).

**Variable latency.** The latency of a variable-latency op (TMA loads, atomics) is drawn per iteration
from a log-normal distribution (``seed`` fixes it) whose median is the machine's ``cost.tma_latency``
for TMA ops (the op's own latency otherwise) and whose spread puts the 99th percentile at 1.22 times
the median, as measured on the H200 (872 / 1062 cycles, ``docs/calibration.md``). ``latencies=``
overrides it per op name or kind. An op's result is never ready before its units are done.
"""

from __future__ import annotations

import bisect
import itertools
import math
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from twill.errors import SimulationError, TwillError
from twill.ir.graph import Graph, Op
from twill.model.liveness import memory_intervals, register_intervals
from twill.model.problem import HANDOFF_UNIT, Edge, Problem
from twill.schedule import Schedule

__all__ = ["REASONS", "UNIT_ORDERS", "BarrierStats", "OpRun", "SimResult", "scaled_latencies", "simulate"]

REASONS = ("data", "blocking", "buffer", "unit")
"""Why a warp group stalls: ``data`` (a value not yet ready: another group's result behind its full
barrier and hand-off, or a same-group latency), ``blocking`` (a blocking wait for an asynchronous op of
its own group, e.g. ``wgmma.wait``), ``buffer`` (a free buffer copy: the empty barrier), ``unit`` (a
functional unit is busy, or not yet its turn on it in the schedule's order)."""

UNIT_ORDERS = ("schedule", "greedy")
"""How a unit picks among the ops that want it (``simulate(unit_order=...)``)."""

LOGNORMAL_SIGMA = math.log(1062 / 872) / 2.326
"""Spread of the default variable-latency distribution: the H200's p99 / median of a 32 KB TMA load."""

LatencySpec = float | int | Callable[[random.Random, Op, int], float]
Latencies = LatencySpec | Mapping[str, LatencySpec] | None


@dataclass(frozen=True)
class OpRun:
    """One op of one iteration as simulated (times in cycles from the loop's start).

    Attributes
    ----------
    name : str
        The op.
    iteration : int
        Its iteration.
    group : int
        Its warp group.
    issue : float
        When it issued.
    issue_end : float
        When its warps were free again (``issue + issue_cycles``).
    end : float
        When its last unit was free.
    ready : float
        When its result was usable by a same-group consumer (issue + latency).
    stall : float
        Cycles it waited beyond its group's in-order issue point.
    reason : str or None
        The reason that held it longest (one of :data:`REASONS`), ``None`` when it did not stall.
    """

    name: str
    iteration: int
    group: int
    issue: float
    issue_end: float
    end: float
    ready: float
    stall: float
    reason: str | None


@dataclass(frozen=True)
class BarrierStats:
    """The full/empty barrier pair of one value's ring buffer, counted over the whole run.

    Attributes
    ----------
    value : str
        The producing op.
    depth : int
        Copies in the ring (barrier slots).
    acquires : int
        Producer acquires of a free copy (one per iteration that produced it).
    full_arrivals : int
        Producer arrivals on the full barrier (the value is written).
    releases : int
        Copies released by their consumers inside the loop (the empty barrier completed).
    drained : int
        Copies whose consumers come after the last iteration (released at loop exit).
    waits : int
        Consumer waits on the full barrier of a value produced in the loop.
    initial_reads : int
        Consumer reads of the value from before the loop (``i < δ``).
    """

    value: str
    depth: int
    acquires: int
    full_arrivals: int
    releases: int
    drained: int
    waits: int
    initial_reads: int

    @property
    def balanced(self) -> bool:
        """Every acquire has a release (in the loop or at exit), every full barrier reached its count."""
        return self.acquires == self.releases + self.drained == self.full_arrivals


@dataclass(frozen=True)
class SimResult:
    """What a simulation measured (cycles unless said otherwise).

    Attributes
    ----------
    iterations : int
        Iterations run.
    total_cycles : float
        From the first issue to the last unit free (0 for an empty loop).
    cycles_per_iteration : float or None
        Steady-state cycles per iteration: the mean over ops of the issue-time slope over the middle
        half of the iterations; ``None`` with fewer than ``2 * stages + 2`` iterations.
    ii_cycles : float
        The schedule's II in cycles (the model's steady state).
    stalls : dict of str to float
        Stall cycles by reason (:data:`REASONS`): for every op of every iteration, the cycles between
        the point its warp group's in-order issue allowed and its issue, split between the reason that
        set its earliest start and the units; summed over all ops.
    group_stalls : dict of int to dict of str to float
        The same per warp group.
    utilization : dict of str to float
        Busy fraction of each unit over ``total_cycles`` (capacity counted).
    steady_utilization : dict of str to float
        Busy fraction of each unit in the steady state (its work per iteration over
        ``cycles_per_iteration``); empty when there is no steady state.
    buffer_depths : dict of str to int
        Ring depth used for each value.
    barriers : tuple of BarrierStats
        Barrier counts per value.
    trace : tuple of OpRun
        Every op of every iteration, by issue time.
    latencies : dict of str to tuple of float
        For each variable-latency (or overridden) op: (min, mean, max) latency drawn, cycles.
    timing : str
        ``"model"`` (normalized units times cycles per unit) or ``"raw"`` (the graph's cycle costs).
    cycles_per_tick : float
        Length of one simulation tick in cycles.
    unit_order : str
        ``"schedule"`` or ``"greedy"`` (how units picked among waiting ops).
    """

    iterations: int
    total_cycles: float
    cycles_per_iteration: float | None
    ii_cycles: float
    stalls: dict[str, float]
    group_stalls: dict[int, dict[str, float]]
    utilization: dict[str, float]
    steady_utilization: dict[str, float]
    buffer_depths: dict[str, int]
    barriers: tuple[BarrierStats, ...]
    trace: tuple[OpRun, ...] = field(repr=False)
    latencies: dict[str, tuple[float, float, float]] = field(default_factory=dict)
    timing: str = "model"
    cycles_per_tick: float = 1.0
    unit_order: str = "schedule"

    @property
    def balanced(self) -> bool:
        """Every barrier balanced (see :attr:`BarrierStats.balanced`)."""
        return all(b.balanced for b in self.barriers)

    @property
    def mean_cycles_per_iteration(self) -> float | None:
        """``total_cycles / iterations`` (prologue and epilogue included); ``None`` for an empty loop."""
        return self.total_cycles / self.iterations if self.iterations else None

    def summary(self) -> list[str]:
        """Plain-language lines describing the run."""
        out = [f"{self.iterations} iteration(s) in {self.total_cycles:.0f} cycles ({self.timing} timing, "
               f"units in {self.unit_order} order)"]
        if self.cycles_per_iteration is not None:
            ratio = self.cycles_per_iteration / self.ii_cycles if self.ii_cycles else float("nan")
            out.append(f"steady state: {self.cycles_per_iteration:.1f} cycles per iteration "
                       f"(schedule II {self.ii_cycles:.1f} cycles, x{ratio:.3f})")
        stalls = ", ".join(f"{r} {v:.0f}" for r, v in self.stalls.items() if v)
        out.append(f"stall cycles: {stalls or 'none'}")
        util = self.steady_utilization or self.utilization
        out.append("unit utilization: " + ", ".join(f"{u} {v:.0%}" for u, v in util.items()))
        for name, (lo, mean, hi) in self.latencies.items():
            out.append(f"latency of {name}: min {lo:.0f}, mean {mean:.0f}, max {hi:.0f} cycles")
        return out


# ---------------------------------------------------------------------------------------------- setup
@dataclass
class _Timing:
    """Op and edge durations in ticks."""

    problem: Problem  # durations in its units; ticks = units * scale
    scale: int
    cycles_per_tick: float
    timing: str

    def t(self, value: int) -> int:
        return value * self.scale


def _timing(schedule: Schedule, graph: Graph | None, machine: Any) -> _Timing:
    p = schedule.problem
    if graph is None:
        cpu = p.cycles_per_unit
        scale = max(1, round(cpu))
        return _Timing(p, scale, cpu / scale, "model")
    from twill.ir.machine import load_machine
    from twill.model.problem import build_problem

    raw = build_problem(graph, load_machine(machine if machine is not None else schedule.machine), p.options)
    if set(raw.names) != set(p.names):
        raise TwillError(f"graph {graph.name!r} has ops {sorted(raw.names)}, the schedule {sorted(p.names)}")
    mine = [(e.src, e.dst, e.distance) for e in p.edges]
    theirs = [(e.src, e.dst, e.distance) for e in raw.edges]
    if mine != theirs:
        raise TwillError(f"graph {graph.name!r} does not have the schedule's dependences")
    return _Timing(raw, 1, 1.0, "raw")


def _topo_rank(p: Problem) -> dict[str, int]:
    """Position of each op in a topological order of the zero-distance edges (graph order otherwise)."""
    order = {n: k for k, n in enumerate(p.names)}
    indeg = {n: 0 for n in p.names}
    succ: dict[str, list[str]] = {n: [] for n in p.names}
    for e in p.edges:
        if e.distance == 0 and e.src != e.dst:
            indeg[e.dst] += 1
            succ[e.src].append(e.dst)
    ready = sorted((n for n in p.names if indeg[n] == 0), key=order.get)
    rank: dict[str, int] = {}
    while ready:
        n = ready.pop(0)
        rank[n] = len(rank)
        for m in succ[n]:
            indeg[m] -= 1
            if indeg[m] == 0:
                bisect.insort(ready, m, key=order.get)
    for n in p.names:  # a zero-distance cycle is rejected by Graph.check; keep the rest in graph order
        rank.setdefault(n, len(rank))
    return rank


def _hold(p: Problem, e: Edge) -> int:
    """Units after the consumer's issue at which it releases the value."""
    dst = p.op(e.dst)
    if e.carrier == "register":
        return 0 if e.inplace or not dst.is_async else dst.cycles
    return dst.cycles


def _first_use(p: Problem) -> dict[str, dict[str, int]]:
    """Per op and unit, the offset of its first reservation of that unit."""
    out: dict[str, dict[str, int]] = {}
    for op in p.ops:
        mine = out.setdefault(op.name, {})
        for r in op.rrt:
            mine[r.unit] = min(mine.get(r.unit, r.start), r.start)
    return out


def _storage(op: Op) -> bool:
    return bool(op.regs or op.smem or op.tmem or op.result_bytes)


def _depths(schedule: Schedule) -> dict[str, int]:
    """Ring depth of every value with storage: the schedule's buffer depths, raised to cover each copy's
    life under the simulator's release rule and the staging buffers of values handed to another group."""
    p, ii, start, group = schedule.problem, schedule.ii, schedule.start, schedule.group
    out = dict(schedule.buffer_depths())
    staging = [iv for iv in memory_intervals(p, ii, start, group, "smem") if iv.what.endswith("(staging)")]
    staging += [iv for iv in register_intervals(p, ii, start, group) if iv.what.endswith("(received)")]
    for op in p.ops:
        if not _storage(op):
            continue
        end = start[op.name] + op.cycles
        for e in p.out_edges(op.name):
            if e.carrier != "none":
                end = max(end, start[e.dst] + e.distance * ii + _hold(p, e))
        begin = start[op.name]
        if op.name in p.streaming and op.smem:
            begin -= p.options.prefetch * ii
        need = max(1, math.ceil((end - begin) / ii))
        for iv in staging:
            if iv.what == f"{op.name} (staging)" or iv.what.startswith(f"{op.name}->"):
                need = max(need, math.ceil((iv.end - start[op.name]) / ii))
        out[op.name] = max(out.get(op.name, 1), need)
    return {n: d for n, d in sorted(out.items()) if _storage(p.op(n))}


def _latency_sampler(schedule: Schedule, timing: _Timing, latencies: Latencies,
                     rng: random.Random) -> dict[str, Callable[[int], float]]:
    """Per op whose latency is drawn or overridden: a function of the iteration giving cycles."""
    p = timing.problem
    tma = _machine_tma_latency(schedule)
    out: dict[str, Callable[[int], float]] = {}
    for op in p.ops:
        spec: Any = None
        if isinstance(latencies, Mapping):
            spec = latencies.get(op.name, latencies.get(op.kind))
        elif latencies is not None and op.variable_latency:
            spec = latencies
        if spec is None and not op.variable_latency:
            continue
        if spec is None:
            median = tma if (tma is not None and op.kind.startswith("tma")) else \
                op.latency * timing.scale * timing.cycles_per_tick
            spec = _lognormal(median)
        out[op.name] = _bind(spec, rng, op)
    return out


def _lognormal(median: float) -> Callable[[random.Random, Op, int], float]:
    mu = math.log(max(median, 1e-9))

    def draw(rng: random.Random, op: Op, iteration: int) -> float:
        return rng.lognormvariate(mu, LOGNORMAL_SIGMA)

    return draw


def _bind(spec: Any, rng: random.Random, op: Op) -> Callable[[int], float]:
    if callable(spec):
        return lambda i: float(spec(rng, op, i))
    if isinstance(spec, bool) or not isinstance(spec, int | float):
        raise TwillError(f"latency for {op.name!r} must be cycles or a callable, got {spec!r}")
    if spec < 0:
        raise TwillError(f"latency for {op.name!r} is negative: {spec}")
    value = float(spec)
    return lambda i: value


def _machine_tma_latency(schedule: Schedule) -> float | None:
    from twill.ir.machine import load_machine

    try:
        return float(load_machine(schedule.machine).const("cost.tma_latency"))
    except TwillError:
        return None


# ---------------------------------------------------------------------------------------------- units
class _Units:
    """Bookings of each unit as (start, end, count) intervals, pruned as time advances."""

    def __init__(self, capacity: Mapping[str, int], lookback: int = 0) -> None:
        self.cap = dict(capacity)
        self.booked: dict[str, list[tuple[int, int, int]]] = {u: [] for u in capacity}
        self.busy: dict[str, int] = {u: 0 for u in capacity}
        self.lookback = lookback  # rectangles that start before their op (a hand-off's load) look back

    def prune(self, now: int) -> None:
        keep = now - self.lookback
        for u, ivs in self.booked.items():
            if ivs and min(end for _, end, _ in ivs) <= keep:
                self.booked[u] = [iv for iv in ivs if iv[1] > keep]

    def _fits(self, unit: str, a: int, b: int, count: int) -> bool:
        cap = self.cap.get(unit, 1)
        over = [iv for iv in self.booked[unit] if iv[0] < b and a < iv[1]]
        if not over:
            return count <= cap
        points = sorted({a} | {max(a, s) for s, _, _ in over})
        return all(sum(c for s, e, c in over if s <= x < e) + count <= cap for x in points)

    def earliest(self, rrt: tuple[tuple[str, int, int, int], ...], t: int) -> int:
        """Earliest time ``>= t`` at which every rectangle fits."""
        while True:
            clash = [(unit, s, d, c) for unit, s, d, c in rrt if not self._fits(unit, t + s, t + s + d, c)]
            if not clash:
                return t
            nxt = min(end - s for unit, s, _, _ in clash for _, end, _ in self.booked[unit] if end - s > t)
            t = nxt

    def book(self, rrt: tuple[tuple[str, int, int, int], ...], t: int) -> None:
        for unit, s, d, c in rrt:
            self.booked[unit].append((t + s, t + s + d, c))
            self.busy[unit] += d * c


# ---------------------------------------------------------------------------------------------- engine
@dataclass
class _Blocked:
    reason: str  # data, buffer or unit
    barrier: str
    waits_for: tuple[str, int]
    edge: str


def simulate(
    schedule: Schedule,
    iterations: int = 64,
    latencies: Latencies = None,
    seed: int = 0,
    *,
    graph: Graph | None = None,
    machine: Any = None,
    buffers: Mapping[str, int] | None = None,
    unit_order: str = "schedule",
    barrier_cycles: float | None = None,
) -> SimResult:
    """Simulate ``iterations`` iterations of ``schedule`` on one SM.

    Parameters
    ----------
    schedule : Schedule
        The schedule (its order, warp groups, stages and buffer depths are what is simulated).
    iterations : int
        Trip count, ``>= 0``.
    latencies : float, callable or mapping, optional
        Latency in cycles of the variable-latency ops: a number (fixed), a callable
        ``f(rng, op, iteration) -> cycles`` (``rng`` a seeded :class:`random.Random`), or a mapping from
        op name or op kind (the name wins) to either, which may also name fixed-latency ops to override
        theirs. Ops it does not cover keep the default (module docstring).
    seed : int
        Seed of the latency draws.
    graph : Graph, optional
        The loop in raw machine cycles; when given, durations come from it instead of the normalized
        problem (module docstring, **Time**).
    machine : str or Machine, optional
        Machine to resolve ``graph`` on (default: the schedule's).
    buffers : mapping of str to int, optional
        Ring depth per value, replacing the schedule's (to test a smaller buffer).
    unit_order : str
        ``"schedule"`` (each unit serves its ops in the schedule's order) or ``"greedy"`` (first come,
        first served); see the module docstring, **Units**.
    barrier_cycles : float, optional
        Simulate the signals between warp groups as a code generator's mbarriers do them, each taking
        this many cycles from the arrive to the waiter (``handoff.mbarrier``, 75 measured on the H200):
        a buffer copy released by a reader on another group reaches the producer's empty barrier that
        much later, and with ``unit_order="schedule"`` an op whose predecessor on a unit sits on another
        group waits for the predecessor's turn arrive, which its group makes once it has finished issuing
        the predecessor (all of a serialized GEMM's instructions), plus the hand-off. None (the
        default): the solver's model, both instantaneous and a turn taken as soon as the predecessor has
        started on the unit.

    Returns
    -------
    SimResult

    Raises
    ------
    SimulationError
        The loop deadlocks (a buffer too shallow for the stages, for example); the error names the op,
        the barrier and what each warp group waits for.
    TwillError
        Bad arguments (negative trip count, unknown op in ``buffers``, a graph that is not the
        schedule's loop).
    """
    if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 0:
        raise TwillError(f"iterations must be an integer >= 0, got {iterations!r}")
    if unit_order not in UNIT_ORDERS:
        raise TwillError(f"unit_order must be one of {', '.join(UNIT_ORDERS)}, got {unit_order!r}")
    if barrier_cycles is not None and not barrier_cycles >= 0:
        raise TwillError(f"barrier_cycles must be >= 0, got {barrier_cycles!r}")
    timing = _timing(schedule, graph, machine)
    depths = _depths(schedule)
    for name, depth in (buffers or {}).items():
        if name not in schedule.slots:
            raise TwillError(f"buffers: {name!r} is not an op of the schedule")
        if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
            raise TwillError(f"buffers: depth of {name!r} must be an integer >= 1, got {depth!r}")
        depths[name] = depth
    rng = random.Random(seed)
    samplers = _latency_sampler(schedule, timing, latencies, rng)
    engine = _Engine(schedule, timing, depths, samplers, iterations, unit_order == "schedule",
                     None if barrier_cycles is None else round(barrier_cycles / timing.cycles_per_tick))
    return engine.run()


class _Engine:
    """State of one run; :meth:`run` is the event loop."""

    def __init__(self, schedule: Schedule, timing: _Timing, depths: dict[str, int],
                 samplers: Mapping[str, Callable[[int], float]], n: int, ordered: bool,
                 barrier: int | None = None) -> None:
        self.s, self.tm, self.n = schedule, timing, n
        self.ordered = ordered
        self.barrier = barrier  # ticks of a cross-group mbarrier signal (None: the solver's model)
        self.sp = schedule.problem  # static (schedule) problem: order and waits
        p = timing.problem  # durations
        self.p = p
        self.depth = depths
        self.group = schedule.group
        cpt = timing.cycles_per_tick
        self.ops = {op.name: op for op in p.ops}
        rrt = {op.name: [(r.unit, timing.t(r.start), timing.t(r.cycles), r.count) for r in op.rrt]
               for op in p.ops}
        crossing = [e for e in p.edges if self.group[e.src] != self.group[e.dst]]
        for name, offset, length in p.transfers(crossing):  # stores and loads of values crossing groups
            rrt[name].append((HANDOFF_UNIT, timing.t(offset), timing.t(length), 1))
        self.rrt = {name: tuple(rows) for name, rows in rrt.items()}
        self.cycles = {op.name: timing.t(op.cycles) for op in p.ops}
        self.issue_len = {op.name: timing.t(op.issue_cycles) for op in p.ops}
        self.in_edges = {n: [e for e in p.edges if e.dst == n] for n in p.names}
        self.consumers = {n: [e for e in p.edges if e.src == n and e.carrier != "none"] for n in p.names}
        self.waits = {v.name: any(e.src != v.name and (e.blocking or self.group[e.src] != self.group[v.name])
                                  for e in self.sp.in_edges(v.name)) for v in self.sp.ops}
        # latencies drawn up front, op by op, so the draws do not depend on the event order
        self.lat: dict[tuple[str, int], int] = {}
        self.drawn: dict[str, list[float]] = {}
        for op in p.ops:
            if op.name in samplers:
                values = [samplers[op.name](i) for i in range(n)]
                self.drawn[op.name] = values
                for i, v in enumerate(values):
                    self.lat[(op.name, i)] = max(self.cycles[op.name], round(v / cpt))
        rank = _topo_rank(self.sp)
        start, ii = schedule.start, schedule.ii
        groups = sorted({g.index for g in schedule.warp_groups} | set(self.group.values()))
        self.program: dict[int, list[tuple[str, int]]] = {}
        for g in groups:
            # Ties in time: the older iteration first (every edge runs from an older or the same
            # iteration, so this is a topological order; a consumer of iteration i then releases the
            # buffer that the producer of iteration i + depth, issued at the same moment, reuses).
            rows = [(start[v] + i * ii, i, rank[v], v) for v in self.sp.names if self.group[v] == g
                    for i in range(n)]
            self.program[g] = [(v, i) for _, i, _, v in sorted(rows)]
        lookback = max((-s for rows in self.rrt.values() for _, s, _, _ in rows if s < 0), default=0)
        self.units = _Units(p.resources.units, lookback)
        # Each instance's predecessor on each unit it uses, in the schedule's order of reservation starts.
        self.unit_prev: dict[tuple[str, int], list[tuple[str, tuple[str, int], int, int]]] = {}
        if ordered:
            first, raw_first = _first_use(self.sp), _first_use(p)
            for unit in p.resources.units:
                seq = sorted((start[v] + i * ii + first[v][unit], i, rank[v], v)
                             for v in self.sp.names if unit in first[v] for i in range(n))
                for (_, k, _, w), (_, i, _, v) in itertools.pairwise(seq):
                    self.unit_prev.setdefault((v, i), []).append(
                        (unit, (w, k), timing.t(raw_first[v][unit]), timing.t(raw_first[w][unit])))
        for op in p.ops:
            for r in op.rrt:
                cap = p.resources.units.get(r.unit, 1)
                if r.count > cap:
                    raise SimulationError(f"op {op.name!r} needs {r.count} x {r.unit!r}, capacity {cap}: "
                                          f"it can never issue", op=op.name)
        self.issued: dict[tuple[str, int], int] = {}
        self.runs: list[OpRun] = []
        self.stalls = {g: dict.fromkeys(REASONS, 0.0) for g in groups}
        self.counts = {v: dict.fromkeys(("acquires", "full", "waits", "initial"), 0) for v in depths}
        self.arrivals: dict[tuple[str, int], int] = {}  # empty-barrier arrivals per copy

    # -------------------------------------------------------------------------------------- timing
    def latency(self, e: Edge, j: int) -> int:
        """Ticks from the issue of ``e.src`` (iteration ``j``) until ``e.dst`` may use the value."""
        key = (e.src, j)
        d = self.lat[key] if key in self.lat else self.tm.t(e.latency)
        if self.group[e.src] != self.group[e.dst]:  # the hand-off, and the store before the load
            d += self.tm.t(self.p.crossing_delay(e) - e.latency)
        return d

    def release(self, e: Edge, k: int) -> int:
        """Ticks at which consumer ``e.dst`` of iteration ``k`` releases its copy of ``e.src``."""
        hold = _hold(self.p, e)
        cross = self.barrier if self.barrier and self.group[e.src] != self.group[e.dst] else 0
        return self.issued[(e.dst, k)] + self.tm.t(hold) + cross

    def bounds(self, g: int, v: str, i: int, base: int) -> tuple[int, str | None] | _Blocked:
        """Earliest issue time ignoring units, and the reason that set it; or why it cannot be known."""
        best, why = base, None
        for e in self.in_edges[v]:
            j = i - e.distance
            if j < 0:
                continue
            if (e.src, j) not in self.issued:
                return _Blocked("data", self._full(e.src, j), (e.src, j), e.label)
            t = self.issued[(e.src, j)] + self.latency(e, j)
            if t > best:
                same = self.group[e.src] == g
                best, why = t, ("blocking" if same and e.blocking else "data")
        for unit, prev, offset, prev_offset in self.unit_prev.get((v, i), ()):
            if prev not in self.issued:
                return _Blocked("unit", f"its turn on unit {unit!r}", prev, f"schedule order of {unit!r}")
            t = self.issued[prev] + prev_offset - offset
            if self.barrier is not None and self.group[prev[0]] != g:  # the turn's mbarrier
                t = max(t, self.issued[prev] + self.issue_len[prev[0]] + self.barrier)
            if t > best:
                best, why = t, "unit"
        if v in self.depth and i >= self.depth[v]:
            j = i - self.depth[v]
            t = self.issued[(v, j)] + self.cycles[v]
            for e in self.consumers[v]:
                k = j + e.distance
                if k >= self.n or (e.dst, k) == (v, i):
                    continue
                if (e.dst, k) not in self.issued:
                    return _Blocked("buffer", self._empty(v, j), (e.dst, k), e.label)
                t = max(t, self.release(e, k))
            if t > best:
                best, why = t, "buffer"
        return best, why

    def _full(self, v: str, j: int) -> str:
        d = self.depth.get(v)
        if d is None:
            return f"the barrier of {v!r} (iteration {j})"
        return f"the full barrier of {v!r} slot {j % d} phase {j // d} (depth {d})"

    def _empty(self, v: str, j: int) -> str:
        d = self.depth[v]
        return f"the empty barrier of {v!r} slot {j % d} phase {j // d} (depth {d})"

    # -------------------------------------------------------------------------------------- loop
    def run(self) -> SimResult:
        ptr = dict.fromkeys(self.program, 0)
        last = dict.fromkeys(self.program, 0)
        issue_end = dict.fromkeys(self.program, 0)
        after_wait = dict.fromkeys(self.program, 0)
        now = 0
        while True:
            live = [g for g in self.program if ptr[g] < len(self.program[g])]
            if not live:
                break
            best: tuple[int, int, int, int, str | None] | None = None
            blocked: dict[int, _Blocked] = {}
            for g in live:
                v, i = self.program[g][ptr[g]]
                base = max(last[g], after_wait[g])
                if self.waits[v]:
                    base = max(base, issue_end[g])
                b = self.bounds(g, v, i, base)
                if isinstance(b, _Blocked):
                    blocked[g] = b
                    continue
                t_pre, why = b
                # Bookings that ended by ``now`` are pruned; no group can issue before ``now`` (commits
                # come in time order), so the unit search starts there.
                t = self.units.earliest(self.rrt[v], max(t_pre, now))
                if best is None or t < best[0]:
                    best = (t, g, base, t_pre, why if t_pre > base else None)
            if best is None:
                self._deadlock(ptr, blocked, now)
                return self._result()  # not reached: _deadlock raises
            t, g, base, pre, why = best
            assert t >= now, "simulation events out of order"
            v, i = self.program[g][ptr[g]]
            if why is not None:
                self.stalls[g][why] += (pre - base)
            if t > pre:
                self.stalls[g]["unit"] += t - pre
            self._commit(g, v, i, t, base, pre, why)
            ptr[g] += 1
            last[g] = t
            issue_end[g] = max(issue_end[g], t + self.issue_len[v])
            if self.waits[v]:
                after_wait[g] = t + 1
            if t > now:
                now = t
                self.units.prune(now)
        return self._result()

    def _commit(self, g: int, v: str, i: int, t: int, base: int, pre: int, why: str | None) -> None:
        self.issued[(v, i)] = t
        self.units.book(self.rrt[v], t)
        for e in self.in_edges[v]:
            j = i - e.distance
            if e.src in self.counts and e.carrier != "none":
                self.counts[e.src]["initial" if j < 0 else "waits"] += 1
                if j >= 0:
                    self.arrivals[(e.src, j)] = self.arrivals.get((e.src, j), 0) + 1
        if v in self.counts:
            self.counts[v]["acquires"] += 1
            self.counts[v]["full"] += 1
        ready = t + (self.lat[(v, i)] if (v, i) in self.lat else self.tm.t(self.ops[v].latency))
        cpt = self.tm.cycles_per_tick
        stall = (t - base) * cpt
        reason = "unit" if why is None or t - pre > pre - base else why
        self.runs.append(OpRun(v, i, g, t * cpt, (t + self.issue_len[v]) * cpt, (t + self.cycles[v]) * cpt,
                               ready * cpt, stall, reason if stall else None))

    def _deadlock(self, ptr: Mapping[int, int], blocked: Mapping[int, _Blocked], now: int) -> None:
        """Raise :class:`SimulationError`, naming first the warp groups on a cycle of waits (the cause)."""
        after = {g: self.group[b.waits_for[0]] for g, b in blocked.items()}
        cycle: list[int] = []
        for g0 in sorted(blocked):
            seen, g = [], g0
            while g in after and g not in seen:
                seen.append(g)
                g = after[g]
            if g in seen:
                cycle = seen[seen.index(g):]
                break
        order = cycle + [g for g in sorted(blocked) if g not in cycle]
        lines = []
        for g in order:
            b = blocked[g]
            v, i = self.program[g][ptr[g]]
            w, k = b.waits_for
            h = self.group[w]
            where = "later in the same group's program" if h == g else f"not yet issued by group {h}"
            verb = {"data": "produced by", "buffer": "released by", "unit": "after"}.get(b.reason, "by")
            lines.append(f"group {g} waits to issue {v!r} (iteration {i}) on {b.barrier}, {verb} {w!r} "
                         f"(iteration {k}, {where}; edge {b.edge})")
        g = order[0]
        b = blocked[g]
        v, i = self.program[g][ptr[g]]
        cycle_s = now * self.tm.cycles_per_tick
        raise SimulationError(f"deadlock at cycle {cycle_s:.0f} after {len(self.issued)} op issues: "
                              + "; ".join(lines), op=v, iteration=i, barrier=b.barrier, group=g,
                              waits=tuple(lines), cycle=cycle_s)

    # -------------------------------------------------------------------------------------- report
    def _result(self) -> SimResult:
        cpt = self.tm.cycles_per_tick
        n = self.n
        runs = sorted(self.runs, key=lambda r: (r.issue, r.group))
        total = max((max(r.end, r.ready) for r in runs), default=0.0)
        stages = self.s.stages
        cpi = None
        if n >= 2 * stages + 2:
            lo = max(stages, n // 4)
            hi = n - 1 - lo
            if hi > lo:
                times = {(r.name, r.iteration): r.issue for r in runs}
                slopes = [(times[(v, hi)] - times[(v, lo)]) / (hi - lo) for v in self.sp.names]
                cpi = sum(slopes) / len(slopes)
        util: dict[str, float] = {}
        steady: dict[str, float] = {}
        for unit, cap in self.p.resources.units.items():
            busy = self.units.busy[unit] * cpt
            if not any(r[0] == unit for rrt in self.rrt.values() for r in rrt):
                continue
            util[unit] = busy / (total * cap) if total else 0.0
            if cpi:
                per_iter = sum(d * c for rrt in self.rrt.values() for u, _, d, c in rrt if u == unit) * cpt
                steady[unit] = per_iter / (cpi * cap)
        barriers = []
        for v, c in self.counts.items():
            drained = releases = 0
            expected = len(self.consumers[v])
            for j in range(n):
                got = self.arrivals.get((v, j), 0)
                if got == expected:  # every consumer released it (none: the producer's own end did)
                    releases += 1
                elif got == sum(1 for e in self.consumers[v] if j + e.distance < n):
                    drained += 1  # the missing consumers come after the last iteration
            barriers.append(BarrierStats(v, self.depth[v], c["acquires"], c["full"], releases, drained,
                                         c["waits"], c["initial"]))
        stalls = {r: sum(s[r] for s in self.stalls.values()) * cpt for r in REASONS}
        group_stalls = {g: {r: x * cpt for r, x in s.items()} for g, s in self.stalls.items()}
        lats = {v: (min(x), sum(x) / len(x), max(x)) for v, x in self.drawn.items() if x}
        return SimResult(n, total, cpi, self.s.ii_cycles, stalls, group_stalls, util, steady,
                         dict(self.depth), tuple(barriers), tuple(runs), lats, self.tm.timing, cpt,
                         "schedule" if self.ordered else "greedy")


def scaled_latencies(schedule: Schedule, scale: float = 1.0, fixed: float | None = None) -> Latencies:
    """The ``latencies`` argument of :func:`simulate` for a latency scale and an optional fixed latency.

    Parameters
    ----------
    schedule : Schedule
        The schedule to be simulated (its machine's ``cost.tma_latency`` is the median of the TMA loads).
    scale : float
        Factor on every variable-latency op's latency (1: the default draws).
    fixed : float, optional
        A fixed latency in cycles for the variable-latency ops (then multiplied by ``scale``); None: drawn
        from the log-normal distribution around the machine's latency (or the op's, in machine cycles)
        with spread :data:`LOGNORMAL_SIGMA`.

    Returns
    -------
    Latencies
        None for the default draws (``scale`` 1, no ``fixed``), a number, or a sampler.

    Raises
    ------
    TwillError
        ``scale`` is not a finite number > 0, or ``fixed`` not a finite number >= 0.
    """
    if not math.isfinite(scale) or scale <= 0:
        raise TwillError(f"latency scale {scale} must be a finite number > 0 (a factor on the latencies)")
    if fixed is not None and (not math.isfinite(fixed) or fixed < 0):
        raise TwillError(f"fixed latency {fixed} must be a finite number of cycles >= 0")
    if fixed is not None:
        return fixed * scale
    if scale == 1.0:
        return None
    median = _machine_tma_latency(schedule)

    def scaled(rng: random.Random, op: Op, i: int) -> float:
        base = median if (median is not None and op.kind.startswith("tma")) else \
            op.latency * schedule.problem.cycles_per_unit
        return scale * rng.lognormvariate(math.log(base), LOGNORMAL_SIGMA)

    return scaled
