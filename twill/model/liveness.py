"""Value lifetimes of a modulo schedule, in plain Python.

Given start times and warp groups, every value a schedule keeps is an interval ``[start, end)`` in the time
frame of iteration 0; iteration ``i`` shifts it by ``i * II``. Folding the intervals modulo ``II`` gives
the occupancy of each resource in the steady state. These rules are the model's definition of liveness;
:mod:`twill.joint` encodes the same rules as constraints and :mod:`twill.verify` checks schedules with this
module.

Rules (times in the problem's units):

* a register value lives from its op's start until ``max(start + cycles, last use)``, where a use on the
  same group ends at the consumer's start (``+ δ II``), or at the consumer's end when the consumer reads
  registers asynchronously (an RS wgmma) and does not update the value in place;
* a register value used on another group is also held on the producer's group until it is produced
  (``start + cycles``) and sits in one SMEM staging buffer of ``result_bytes`` from then until the last
  consumer on another group starts (``+1``), however many groups read it; a synchronous consumer
  streams it out of that buffer as it computes, an asynchronous one that reads registers (an RS wgmma)
  holds all of it in its group's registers until it has finished;
* values of at most ``small_regs`` registers per thread (row statistics) are not tracked: the machine's
  fitted per-group overhead contains them;
* an SMEM or TMEM value lives until its last consumer has finished; a streaming load's buffer is taken
  ``prefetch * II`` earlier (it is loaded ahead);
* a use by a view (``Op.view``: an alias of what it reads) is followed to the view's readers: the value
  also stays live for each edge of the same carrier out of the view (through chains of views), as if
  that reader read it directly, at the sum of the distances (:func:`value_uses`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from twill.model.problem import Edge, Problem

__all__ = ["Interval", "SmemBuffer", "fold", "memory_intervals", "register_intervals", "smem_buffers",
           "smem_footprint", "use_hold", "value_uses"]


@dataclass(frozen=True)
class Interval:
    """``weight`` units of a resource held during ``[start, end)``; ``group`` for per-group resources."""

    what: str
    start: int
    end: int
    weight: int
    group: int | None = None

    @property
    def length(self) -> int:
        """``end - start``."""
        return self.end - self.start


def use_hold(problem: Problem, e: Edge) -> int:
    """How long past its consumer's start a register value on ``e`` stays live: the consumer's cycles if
    it reads registers asynchronously and does not update them in place, else 0."""
    dst = problem.op(e.dst)
    return 0 if e.inplace or not dst.is_async else dst.cycles


def value_uses(problem: Problem, name: str, carrier: str) -> list[tuple[Edge, int]]:
    """The uses that keep ``name``'s value in ``carrier`` live: ``(edge, distance)`` for each edge of that
    carrier out of ``name``, and, where the edge's consumer is a view, for each edge of the same carrier
    out of the view (recursively through chains of views; a view already on the path is not entered
    again), with ``distance`` the sum of the distances along the way. The edge gives the reader
    (``edge.dst``) and how it reads (:func:`use_hold`); problem edge order, depth first.

    Parameters
    ----------
    problem : Problem
        The loop.
    name : str
        The producing op.
    carrier : str
        ``"register"``, ``"smem"`` or ``"tmem"``.

    Returns
    -------
    list of (Edge, int)
    """
    out: list[tuple[Edge, int]] = []

    def walk(src: str, distance: int, path: tuple[str, ...]) -> None:
        for e in problem.out_edges(src):
            if e.carrier != carrier:
                continue
            out.append((e, distance + e.distance))
            if problem.op(e.dst).view and e.dst != src and e.dst not in path:
                walk(e.dst, distance + e.distance, (*path, e.dst))

    walk(name, 0, (name,))
    return out


def register_intervals(problem: Problem, ii: int, start: Mapping[str, int],
                       group: Mapping[str, int]) -> list[Interval]:
    """Register intervals (registers per thread) of every value, tagged with the holding group."""
    out = []
    for op in problem.ops:
        if not problem.resources.tracked(op.regs):
            continue
        end = start[op.name] + op.cycles
        for e, distance in value_uses(problem, op.name, "register"):
            hold = use_hold(problem, e)
            if group[e.dst] == group[op.name] or e.dst == op.name:
                end = max(end, start[e.dst] + distance * ii + hold)
            elif hold:
                out.append(Interval(f"{op.name}->{e.dst} (received)", start[e.dst],
                                    start[e.dst] + hold, op.regs, group[e.dst]))
        out.append(Interval(op.name, start[op.name], end, op.regs, group[op.name]))
    return out


def memory_intervals(problem: Problem, ii: int, start: Mapping[str, int], group: Mapping[str, int],
                     kind: str) -> list[Interval]:
    """SMEM (bytes, ``kind="smem"``) or TMEM (columns, ``kind="tmem"``) intervals."""
    out = []
    res = problem.resources
    for op in problem.ops:
        need = op.smem if kind == "smem" else op.tmem
        if not need:
            continue
        if kind == "tmem" and res.tmem_alloc_step:
            need = -(-need // res.tmem_alloc_step) * res.tmem_alloc_step
        end = start[op.name] + op.cycles
        for e, distance in value_uses(problem, op.name, kind):
            end = max(end, start[e.dst] + distance * ii + problem.op(e.dst).cycles)
        pre = problem.options.prefetch * ii if kind == "smem" and op.name in problem.streaming else 0
        out.append(Interval(op.name, start[op.name] - pre, end, need))
    if kind == "smem":  # one staging buffer per value, until its last consumer on another group starts
        staged: dict[str, int] = {}
        for e in problem.edges:
            src = problem.op(e.src)
            if e.carrier != "register" or e.src == e.dst or not src.result_bytes:
                continue
            if group[e.src] == group[e.dst]:
                continue
            begin = start[e.src] + src.cycles
            staged[e.src] = max(staged.get(e.src, begin + 1), start[e.dst] + e.distance * ii + 1)
        for name, end in staged.items():
            begin = start[name] + problem.op(name).cycles
            out.append(Interval(f"{name} (staging)", begin, end, problem.op(name).result_bytes))
    return out


def fold(intervals: list[Interval], ii: int, base: int = 0) -> list[int]:
    """Occupancy at each residue ``0 .. II-1`` of the steady state (``base`` added everywhere)."""
    occupancy = [base] * ii
    for iv in intervals:
        full, rest = divmod(iv.length, ii)
        if full:
            for r in range(ii):
                occupancy[r] += full * iv.weight
        for t in range(iv.start, iv.start + rest):
            occupancy[t % ii] += iv.weight
    return occupancy


@dataclass(frozen=True)
class SmemBuffer:
    """One shared-memory buffer of a schedule: ``depth`` copies of ``bytes`` each (a ring of slots).

    ``what`` names the value (an op, or ``"op (staging)"`` for the staging buffer of a register value
    handed to another group); ``depth`` is ``max(1, ceil(lifetime / II))``, the copies alive at once.
    """

    what: str
    bytes: int
    depth: int

    @property
    def total(self) -> int:
        """``bytes * depth``: the SMEM the buffer's ring takes."""
        return self.bytes * self.depth


def smem_buffers(problem: Problem, ii: int, start: Mapping[str, int],
                 group: Mapping[str, int]) -> list[SmemBuffer]:
    """The SMEM buffers of a schedule (:func:`memory_intervals` with ``kind="smem"``), each with its ring
    depth, in the order of :func:`memory_intervals` (ops in problem order, then staging buffers)."""
    return [SmemBuffer(iv.what, iv.weight, max(1, -(-iv.length // ii)))
            for iv in memory_intervals(problem, ii, start, group, "smem")]


def smem_footprint(problem: Problem, ii: int, start: Mapping[str, int], group: Mapping[str, int]) -> int:
    """Bytes of SMEM the buffers of a schedule allocate: ``sum(bytes * depth)`` over :func:`smem_buffers`,
    without the loop-invariant ``problem.fixed_smem``; 0 with ``"smem"`` relaxed (the goal the joint
    solvers minimize last, :data:`twill.solvers.joint.result.GOALS`). A ring of ``depth`` slots is what a
    code generator allocates, so this is at least the folded peak occupancy that the capacity constraint
    bounds."""
    if "smem" in problem.options.relax:
        return 0
    return sum(b.total for b in smem_buffers(problem, ii, start, group))
