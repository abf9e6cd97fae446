"""What the Gluon kernel must do, decided from the graph, the TTGIR and the schedule (no source text here).

* **partitions**: one per warp group of the schedule, with its warps and ``setmaxnreg`` budget. The default
  partition of ``gl.warp_specialize`` runs with the kernel's ``num_warps`` and Triton gives it the registers
  the workers leave (:func:`default_budget`), so the default is the first group whose budget is exactly
  that (every budget of the schedule is then kept), else the group with the largest budget; the others are
  workers in group order;
* **trip order** of each partition: its ops sorted by ``start mod II`` (the steady state's issue order), an
  op of stage ``s`` working in trip ``t`` on iteration ``t - s``;
* **rings**: one per streaming TMA load, ``depth`` = the schedule's buffer depth of the load, with a ready and
  an empty mbarrier per slot (empty counts one arrival per partition that reads the load);
* **turns**: when several partitions issue Tensor Core ops, the order the schedule gives those ops in
  absolute time (start + iteration x II) is enforced by a barrier per partition: before the first op of its
  run a partition waits for its turn, after the last it hands the turn to the partition of the next op.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from twill.frontend.lower import Lowering
from twill.frontend.ttgir import Op
from twill.schedule import Schedule, WarpGroup

__all__ = ["TENSOR_CORE", "Partition", "Plan", "Ring", "TurnStep", "default_budget", "default_candidates",
           "make_plan", "sequential_plan"]

LOADS = ("tt.descriptor_load",)
MMAS = ("ttng.warp_group_dot",)
TENSOR_CORE = (*MMAS, "ttng.tc_gen5_mma")
"""Tensor Core ops of either target (Hopper wgmma, Blackwell tcgen05): the ops whose cross-partition order the
turns keep."""


@dataclass
class Partition:
    """One warp group as a ``gl.warp_specialize`` partition.

    ``position`` 0 is the default partition. ``regs`` is the ``setmaxnreg`` budget the schedule gives the
    group (a worker's ``worker_num_regs``; for the default partition Triton decides, see the report).
    ``order`` lists the group's graph ops in trip order; ``stages`` = 1 + the largest stage among them.
    """

    position: int
    group: int
    warps: int
    regs: int
    order: list[str]
    stages: int
    role: str

    @property
    def fn(self) -> str:
        """Name of the generated partition function."""
        return f"_part{self.position}_g{self.group}"


@dataclass
class Ring:
    """The shared-memory ring of one streaming TMA load."""

    node: str
    load: Op
    depth: int
    producer: int
    readers: list[int]
    nbytes: int


@dataclass(frozen=True)
class TurnStep:
    """Neighbours of a Tensor Core op in the cross-partition order.

    ``succ`` / ``pred``: the ops after / before it, each as ``(op, iteration offset, partition position)``,
    nearest first, over two periods; the first one whose iteration exists is the real neighbour.
    """

    op: str
    succ: tuple[tuple[str, int, int], ...]
    pred: tuple[tuple[str, int, int], ...]


@dataclass
class Plan:
    """Every decision the emitter follows."""

    partitions: list[Partition]
    part_of_group: dict[int, int]
    rings: dict[str, Ring]
    turns: dict[str, TurnStep]
    stage: dict[str, int]
    offset: dict[str, int]
    notes: list[str] = field(default_factory=list)
    sequential: bool = False
    """The plan of :func:`sequential_plan` (no overlap between iterations)."""

    def part(self, node: str, schedule: Schedule) -> int:
        """Partition position of a graph op."""
        return self.part_of_group[schedule.slots[node].warp_group]


def _tc_ops(schedule: Schedule, lowering: Lowering) -> list[str]:
    return [n for n in schedule.slots if any(m.name in TENSOR_CORE for m in lowering.members[n])]


def _turns(schedule: Schedule, lowering: Lowering, part_of: dict[str, int]) -> dict[str, TurnStep]:
    """Neighbours of each Tensor Core op in absolute time, from a long enough window of iterations."""
    tc = _tc_ops(schedule, lowering)
    if len({part_of[n] for n in tc}) < 2:
        return {}
    ii = schedule.ii
    span = schedule.stages + 2
    base = 4 * span
    seq = sorted((schedule.slots[n].start + j * ii, part_of[n], schedule.slots[n].start, n, j)
                  for n in tc for j in range(0, 8 * span))
    keys = [(n, j) for *_, n, j in seq]
    out: dict[str, TurnStep] = {}
    reach = 2 * len(tc) + 2
    for n in tc:
        i = keys.index((n, base))
        succ = tuple((m, j - base, part_of[m]) for m, j in keys[i + 1:i + 1 + reach])
        pred = tuple((m, j - base, part_of[m]) for m, j in reversed(keys[max(0, i - reach):i]))
        out[n] = TurnStep(n, succ, pred)
    return out


def default_budget(schedule: Schedule, default_group: int) -> int:
    """Registers per thread Triton gives ``gl.warp_specialize``'s default partition when ``default_group`` is
    it: what the workers' budgets leave of the register file, rounded down to the ``setmaxnreg`` step, less
    one step, capped at the maximum. Measured in the PTX Triton 3.6 writes (sm_90, 12 warps): workers 240 and
    24 -> default 240, 240 and 32 -> 232 (gluon-hopper.md), 240 and 240 -> 24 (this module's FA forward)."""
    res = schedule.problem.resources
    others = sum(res.group_threads(g.warps) * g.registers for g in schedule.warp_groups
                 if g.index != default_group)
    mine = next(g for g in schedule.warp_groups if g.index == default_group)
    left = (res.register_file - others) // res.group_threads(mine.warps)
    return min(res.setmaxnreg_max, left // res.setmaxnreg_step * res.setmaxnreg_step - res.setmaxnreg_step)


def default_candidates(schedule: Schedule, lowering: Lowering | None = None) -> list[int]:
    """Warp groups to try as the default partition, best first: those to which Triton's leftover budget
    (:func:`default_budget`) still gives their model need, closest to their schedule budget first; among
    equals, the group whose first Tensor Core op starts earliest in the schedule (given ``lowering``;
    measured on the H200, sub-tiled FA forward: the group that opens the Tensor Core order as the default
    ran 619 TFLOP/s, either other choice 449-457, ``benchmarks/h200_gluon.md``), then the lower index; then
    the others in the same order."""
    groups = sorted(schedule.warp_groups, key=lambda g: g.index)
    first_tc: dict[int, int] = {}
    if lowering is not None:
        for n in _tc_ops(schedule, lowering):
            slot = schedule.slots[n]
            first_tc[slot.warp_group] = min(first_tc.get(slot.warp_group, slot.start), slot.start)
    never = 1 + max((s.start for s in schedule.slots.values()), default=0)

    def key(g: WarpGroup) -> tuple[int, int, int, int]:
        budget = default_budget(schedule, g.index)
        return (0 if budget >= g.registers_needed else 1, abs(budget - g.registers),
                first_tc.get(g.index, never), g.index)
    return [g.index for g in sorted(groups, key=key)]


def make_plan(schedule: Schedule, lowering: Lowering, default_group: int | None = None) -> Plan:
    """Partitions, trip orders, rings and turns of ``schedule`` on ``lowering``'s loop, with
    ``default_group`` (default: the first of :func:`default_candidates`) as the default partition."""
    groups = sorted(schedule.warp_groups, key=lambda g: g.index)
    if default_group is None:
        default_group = default_candidates(schedule, lowering)[0]
    default = next(g for g in groups if g.index == default_group)
    ordered = [default] + [g for g in groups if g is not default]
    part_of_group = {g.index: pos for pos, g in enumerate(ordered)}
    ii = schedule.ii
    offset = {n: s.start - s.stage * ii for n, s in schedule.slots.items()}
    topo = {n: i for i, n in enumerate(schedule.slots)}
    partitions = []
    for pos, g in enumerate(ordered):
        ops = [n for n in schedule.slots if schedule.slots[n].warp_group == g.index]
        ops.sort(key=lambda n: (offset[n], topo[n]))
        stages = 1 + max((schedule.slots[n].stage for n in ops), default=0)
        partitions.append(Partition(pos, g.index, g.warps, g.registers, ops, stages, g.role))
    part_of = {n: part_of_group[s.warp_group] for n, s in schedule.slots.items()}
    depths = schedule.buffer_depths()
    rings: dict[str, Ring] = {}
    for n in schedule.slots:
        load = next((m for m in lowering.members[n] if m.name in LOADS), None)
        if load is None:
            continue
        readers = sorted({part_of[e.dst] for e in lowering.graph.out_edges(n) if e.carrier == "smem"})
        nbytes = load.results[0].type.nbytes
        rings[n] = Ring(n, load, max(1, depths.get(n, 1)), part_of[n], readers, nbytes)
    notes = []
    for p in partitions:
        if p.stages > 1:
            notes.append(f"partition {p.position} (group {p.group}) runs {p.stages} stages: a prologue of "
                         f"{p.stages - 1} trip(s) and an epilogue of {p.stages - 1}; the loop must run at "
                         f"least {p.stages - 1} iteration(s)"
                         + (" for it (a shorter loop takes the sequential body)" if p.stages > 2 else ""))
    plan = Plan(partitions, part_of_group, rings, _turns(schedule, lowering, part_of),
                {n: s.stage for n, s in schedule.slots.items()}, offset, notes)
    return plan


def sequential_plan(plan: Plan, schedule: Schedule) -> Plan:
    """``plan`` without overlap between iterations: every op in stage 0, each partition's ops in the order of
    their start in the schedule, one trip per iteration, no turns. It is the schedule stretched to an II
    longer than its length (every dependence and every buffer's depth still holds), for a loop that runs
    fewer iterations than the pipelined code's prologue needs (``max stages - 1``): each partition works
    through the iterations in order, so a write of iteration ``j`` waits only on releases of ``j - depth``.
    The Tensor Core order between partitions is left to the hardware (it is the steady state's, not an
    order the results depend on)."""
    topo = {n: i for i, n in enumerate(schedule.slots)}
    parts = []
    for p in plan.partitions:
        order = sorted(p.order, key=lambda n: (schedule.slots[n].start, topo[n]))
        parts.append(Partition(p.position, p.group, p.warps, p.regs, order, 1, p.role))
    return Plan(parts, dict(plan.part_of_group), dict(plan.rings), {}, {n: 0 for n in plan.stage},
                {n: s.start for n, s in schedule.slots.items()}, [], sequential=True)


def ring_bytes(plan: Plan) -> int:
    """Shared memory of all rings (bytes)."""
    return sum(r.depth * r.nbytes for r in plan.rings.values())


def stages_needed(length: int, ii: int) -> int:
    """``ceil(L / II)``."""
    return max(1, math.ceil(length / ii))
