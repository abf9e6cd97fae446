"""Map a twill schedule onto the ops of Triton's scheduled TTGIR: stages, clusters, partitions.

Triton 3.6's software pipeliner reads a *coarse schedule* from two attributes on every op of the loop body:
``loop.stage`` (which iteration, relative to the newest one, the op works on) and ``loop.cluster`` (the
op's place in the emitted loop body: :func:`CoarseSchedule::getOpsInOrder` emits the ops cluster by
cluster in increasing id, and in body order inside one cluster, whatever their stage). A twill schedule
gives each graph op a start time in iteration 0 and a stage ``start // II``; the steady state of the
modulo schedule issues, inside one II, every op at offset ``start mod II``. So:

* **stage**: ``loop.stage`` = twill stage + ``prefetch`` for every op, except a *streaming* load (no
  incoming data edge), which goes ``prefetch`` stages before its first consumer: twill's model prices a
  streaming load as already resident (its buffer is allocated ``prefetch`` iterations early, paper
  §5.3), and Triton needs the stage distance to make the load asynchronous and multi-buffered.
* **cluster**: ``loop.cluster`` = rank of ``start mod II`` among the distinct offsets, so Triton emits
  the steady state in twill's order.
* **partition** (sm_100): ``ttg.partition`` = the op's warp group (see :func:`partition_plan`).

Ops twill folded (layout, addressing, bookkeeping) take the slot of their earliest consumer; every member of
a merged elementwise chain takes its node's slot; the ``ttg.local_alloc`` of a loaded tile takes its
consumer's slot (Triton's convention: the load is issued in its own stage and waited where it is used).

:func:`twill.apply.rewrite.rewrite_ttgir` edits the text and, on sm_90, works around two limits of Triton 3.6
(``docs/apply.md``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from twill.errors import TwillError
from twill.frontend.lower import Lowering
from twill.frontend.ttgir import Op
from twill.schedule import Schedule

__all__ = ["ApplyError", "OpSlot", "PartitionPlan", "Placement", "array_attr", "check_order", "int_attr",
           "partition_plan", "plan_placement", "top_op"]

_LOADS = ("tt.descriptor_load", "tt.load")


class ApplyError(TwillError):
    """A schedule cannot be applied to the kernel (graph mismatch, a dependence Triton would break)."""


@dataclass(frozen=True)
class OpSlot:
    """Where one top-level loop-body op goes in Triton's coarse schedule.

    Attributes
    ----------
    line : int
        1-based line of the op in the scheduled TTGIR.
    name : str
        TTGIR op name.
    node : str or None
        The graph op it belongs to (``None`` for an op twill folded).
    role : str
        ``node`` (the graph op's own op or a member of its chain), ``load-alloc`` (the shared-memory
        allocation of a loaded tile) or ``folded``.
    stage, cluster : int
        ``loop.stage`` and ``loop.cluster`` to write.
    triton_stage, triton_cluster : int
        What Triton's own scheduler had chosen.
    partitions : tuple of int
        ``ttg.partition`` (sm_100 only; empty otherwise).
    """

    line: int
    name: str
    node: str | None
    role: str
    stage: int
    cluster: int
    triton_stage: int
    triton_cluster: int
    partitions: tuple[int, ...] = ()


@dataclass
class Placement:
    """The coarse schedule derived from a twill schedule for one loop.

    Attributes
    ----------
    slots : list of OpSlot
        One per top-level loop-body op (``scf.yield`` excluded), in body order.
    node_slot : dict of str to (int, int)
        ``(stage, cluster)`` of each graph op.
    prefetch : int
        Stages between a streaming load and its first consumer.
    offsets : list of int
        The distinct ``start mod II`` values; cluster ``c`` issues at ``offsets[c]``.
    ops : dict
        Top-level body op of each slot, keyed by line (for the rewriter).
    """

    slots: list[OpSlot]
    node_slot: dict[str, tuple[int, int]]
    prefetch: int
    offsets: list[int]
    ops: dict[int, Op] = field(default_factory=dict, repr=False)

    @property
    def max_stage(self) -> int:
        """Largest ``loop.stage`` written."""
        return max(s.stage for s in self.slots)


# ------------------------------------------------------------------------------------------------ planning
def top_op(op: Op, loop: Op) -> Op | None:
    """The top-level body op of ``loop`` that is ``op`` or holds it."""
    current: Op | None = op
    while current is not None and current.parent is not loop:
        current = current.parent
    return current


def _body_consumers(op: Op, loop: Op) -> list[Op]:
    """Top-level body ops (``scf.yield`` excluded) that read a result of ``op`` or of an op inside it."""
    found: list[Op] = []
    for inner in op.walk():
        for value in inner.results:
            for user in value.users:
                top = top_op(user, loop)
                if top is not None and top is not op and top.name != "scf.yield" and top not in found:
                    found.append(top)
    return found


def _producers(op: Op, loop: Op) -> list[Op]:
    """Top-level body ops whose results ``op`` (or an op inside it) reads in the same iteration."""
    found: list[Op] = []
    inside = set(op.walk())
    for inner in op.walk():
        for value in inner.operands:
            if value.owner is None or value.owner in inside:
                continue
            top = top_op(value.owner, loop)
            if top is not None and top not in found:
                found.append(top)
    return found


def _check_names(schedule: Schedule, lowering: Lowering) -> None:
    graph_ops = set(lowering.members)
    sched_ops = set(schedule.slots)
    if graph_ops != sched_ops:
        missing = sorted(sched_ops - graph_ops)
        extra = sorted(graph_ops - sched_ops)
        raise ApplyError("the schedule does not belong to this kernel's loop: "
                         + (f"scheduled ops not in the loop: {', '.join(missing)}; " if missing else "")
                         + (f"loop ops not in the schedule: {', '.join(extra)}" if extra else ""))
    other = [f"{n} ({schedule.problem.op(n).kind} in the schedule, {lowering.graph.op(n).kind} in the loop)"
             for n in sorted(sched_ops) if schedule.problem.op(n).kind != lowering.graph.op(n).kind]
    if other:
        raise ApplyError(f"the schedule (of {schedule.problem.name!r}) does not belong to this kernel's "
                         f"loop: same op names, other ops: {'; '.join(other)}")


def plan_placement(schedule: Schedule, lowering: Lowering, *, prefetch: int | None = None) -> Placement:
    """Derive ``loop.stage``/``loop.cluster`` for every op of the lowered loop from ``schedule``.

    Parameters
    ----------
    schedule : Schedule
        A twill schedule of ``lowering.graph`` (same op names).
    lowering : Lowering
        :func:`twill.frontend.lower.lower_loop` of Triton's *scheduled* TTGIR snapshot (so every op
        carries Triton's own ``loop.stage``/``loop.cluster``, which are reported beside twill's).
    prefetch : int, optional
        Stages between a streaming load and its consumer; default the schedule's ``prefetch`` option.

    Returns
    -------
    Placement

    Raises
    ------
    ApplyError
        The schedule names other ops than the loop has, or ``prefetch < 1``.
    """
    _check_names(schedule, lowering)
    depth = schedule.problem.options.prefetch if prefetch is None else prefetch
    if depth < 1:
        raise ApplyError(f"prefetch must be at least 1 (a streaming load needs its own stage), got {depth}")
    ii = schedule.ii
    offsets = sorted({slot.start % ii for slot in schedule.slots.values()})
    rank = {offset: i for i, offset in enumerate(offsets)}
    streaming = set(schedule.problem.streaming)
    loop = lowering.loop
    body = [op for op in loop.body.ops if op.name != "scf.yield"]

    node_of: dict[Op, str] = {}
    role: dict[Op, str] = {}
    for name, members in lowering.members.items():
        for member in members:
            top = top_op(member, loop)
            if top is None:
                continue
            node_of.setdefault(top, name)
            loaded = member.operands[0].owner if member.operands else None
            is_alloc = (member.name == "ttg.local_alloc" and loaded is not None and loaded.name in _LOADS
                        and loaded in members)
            role[top] = "load-alloc" if is_alloc else "node"

    base = {name: (slot.stage + depth, rank[slot.start % ii]) for name, slot in schedule.slots.items()}
    assigned: dict[Op, tuple[int, int]] = {op: base[node_of[op]] for op in body
                                           if op in node_of and role[op] == "node"}
    # Streaming loads: ``depth`` stages before their first consumer, at their own steady-state offset.
    for name in streaming:
        loads = [op for op in body if node_of.get(op) == name and op.name in _LOADS]
        first = min((stage for load in loads for stage, _ in _assigned_consumers(load, loop, assigned)),
                    default=base[name][0])
        for load in loads:
            assigned[load] = (max(0, first - depth), base[name][1])
    # Everything else (folded ops, allocations of loaded tiles): the slot of the earliest consumer, else
    # the latest producer; an op with neither (a counter read only by scf.yield) goes first.
    for op in reversed(body):
        if op in assigned:
            continue
        users = [assigned[c] for c in _body_consumers(op, loop) if c in assigned]
        if users:
            assigned[op] = min(users)
            continue
        makers = [assigned[p] for p in _producers(op, loop) if p in assigned]
        assigned[op] = max(makers) if makers else (0, 0)

    slots = []
    for op in body:
        stage, cluster = assigned[op]
        node = node_of.get(op)
        slots.append(OpSlot(op.line, op.name, node, role.get(op, "folded"), stage, cluster,
                            int_attr(op.attrs.get("loop.stage")), int_attr(op.attrs.get("loop.cluster"))))
    node_slot = {name: (min(s.stage for s in slots if s.node == name and s.role == "node"),
                        base[name][1]) for name in schedule.slots}
    for name in streaming:
        node_slot[name] = next((s.stage, s.cluster) for s in slots if s.node == name and s.name in _LOADS)
    placement = Placement(slots, node_slot, depth, offsets, {op.line: op for op in body})
    check_order(placement, lowering)
    return placement


def _assigned_consumers(op: Op, loop: Op, assigned: Mapping[Op, tuple[int, int]],
                        seen: frozenset[int] = frozenset()) -> list[tuple[int, int]]:
    """Slots of the nearest consumers of ``op`` that have one, looking through unplaced ops."""
    out: list[tuple[int, int]] = []
    for user in _body_consumers(op, loop):
        if user in assigned:
            out.append(assigned[user])
        elif id(user) not in seen:
            out += _assigned_consumers(user, loop, assigned, seen | {id(op)})
    return out


def int_attr(value: object) -> int:
    """An integer attribute value, -1 when absent or not an integer."""
    return value if isinstance(value, int) and not isinstance(value, bool) else -1


def check_order(placement: Placement, lowering: Lowering) -> None:
    """Check that Triton's emission order keeps every dependence of the loop body.

    Within one iteration a consumer must come at or after its producer in ``(stage, cluster)`` order (at
    equal slots Triton keeps body order, which SSA already orders). A value carried to the next iteration
    may be read in the same emitted body as its producer only after it (a later cluster).

    Raises
    ------
    ApplyError
        A dependence the coarse schedule would break (names both ops and their lines).
    """
    loop = lowering.loop
    where = {s.line: (s.stage, s.cluster) for s in placement.slots}
    body = [op for op in loop.body.ops if op.name != "scf.yield"]
    index = {op: i for i, op in enumerate(body)}
    for op in body:
        for prod in _producers(op, loop):
            if prod not in index:
                continue
            if where[prod.line] > where[op.line]:
                raise ApplyError(f"{op.name} (line {op.line}) would run before its producer {prod.name} "
                                 f"(line {prod.line}): slots {where[op.line]} < {where[prod.line]}")
    yield_op = loop.body.ops[-1]
    args = loop.body.args[1:]
    for k, arg in enumerate(args):
        value = yield_op.operands[k] if k < len(yield_op.operands) else None
        prod = top_op(value.owner, loop) if value is not None and value.owner is not None else None
        if prod is None or prod not in index:
            continue
        for user in arg.users:
            top = top_op(user, loop)
            if top is None or top not in index:
                continue
            (ps, pc), (us, uc) = where[prod.line], where[top.line]
            # Emitted body k runs stage s of iteration k - s: the producer (iteration i) is in body
            # i + ps, the reader (iteration i + 1) in body i + 1 + us; in one body, by cluster then order.
            if us + 1 < ps or (us + 1 == ps and (uc, index[top]) <= (pc, index[prod])):
                raise ApplyError(f"{top.name} (line {top.line}) reads the value {prod.name} (line "
                                 f"{prod.line}) carries to the next iteration before it is produced")


# ------------------------------------------------------------------------------------------------ partitions
@dataclass
class PartitionPlan:
    """``ttg.partition`` of every op of the loop (sm_100), from the schedule's warp groups.

    Attributes
    ----------
    group_to_partition : dict of int to int
        Twill warp group -> Triton partition (0 is Triton's default region).
    lines : dict of int to tuple of int
        Partitions per TTGIR line, nested ops and the loop's ``scf.yield`` included.
    loop_attrs : dict of str to str
        ``ttg.partition``, ``ttg.partition.outputs``, ``ttg.partition.stages`` and
        ``ttg.warp_specialize.tag`` for the ``scf.for``.
    stages : dict of int to int
        ``ttg.partition.stages`` entry per partition.
    """

    group_to_partition: dict[int, int]
    lines: dict[int, tuple[int, ...]]
    loop_attrs: dict[str, str]
    stages: dict[int, int]


def array_attr(ids: Iterable[int]) -> str:
    """``array<i32: ...>`` text of sorted, distinct ids."""
    return f"array<i32: {', '.join(str(i) for i in sorted(set(ids)))}>"


def partition_plan(schedule: Schedule, lowering: Lowering, placement: Placement) -> PartitionPlan:
    """Assign every loop op to the Triton partition of its graph op's warp group.

    Twill's groups become partitions in index order, except that the group issuing the most register-tile
    ops (the softmax) becomes partition 0, Triton's default region, which runs with the kernel's
    ``num_warps``. A folded op joins every partition that reads it (Triton clones such an op into each),
    an op read only by ``scf.yield`` joins all partitions, ops nested in a region (a reduction's
    combiner) join their owner's, and the shared-memory allocation of a loaded tile stays with its load
    (the TMA writes it). ``ttg.partition.stages`` gets the smallest twill stage of each group.
    """
    loop = lowering.loop
    groups = sorted({slot.warp_group for slot in schedule.slots.values()})
    tiles: dict[int, int] = {g: 0 for g in groups}
    for name, slot in schedule.slots.items():
        tiles[slot.warp_group] += sum(1 for m in lowering.members[name] for v in m.results
                                      if v.type.kind == "tensor" and len(v.type.shape) >= 2)
    default = max(groups, key=lambda g: (tiles[g], -g))
    order = [default] + [g for g in groups if g != default]
    pid = {g: i for i, g in enumerate(order)}
    every = tuple(range(len(order)))
    by_line = {s.line: s for s in placement.slots}
    parts: dict[Op, tuple[int, ...]] = {}
    body = [op for op in loop.body.ops if op.name != "scf.yield"]
    for op in body:
        slot = by_line[op.line]
        if slot.node is not None and slot.role in ("node", "load-alloc"):
            parts[op] = (pid[schedule.slots[slot.node].warp_group],)
    for op in reversed(body):
        if op in parts:
            continue
        users = [parts[c] for c in _body_consumers(op, loop) if c in parts]
        if not users and by_line[op.line].node is not None:
            users = [(pid[schedule.slots[by_line[op.line].node].warp_group],)]
        parts[op] = tuple(sorted({i for u in users for i in u})) or every
    lines: dict[int, tuple[int, ...]] = {}
    for op in body:
        for inner in op.walk():
            lines[inner.line] = parts[op]
    yield_op = loop.body.ops[-1]
    lines[yield_op.line] = every
    outputs = []
    for value in yield_op.operands:
        top = top_op(value.owner, loop) if value.owner is not None else None
        outputs.append(array_attr(parts.get(top, every) if top is not None else every))
    stages = {pid[g]: min(s.stage for s in schedule.slots.values() if s.warp_group == g) for g in groups}
    loop_attrs = {"ttg.partition": array_attr(every), "ttg.partition.outputs": f"[{', '.join(outputs)}]",
                  "ttg.partition.stages": f"[{', '.join(f'{stages[i]} : i32' for i in every)}]",
                  "ttg.warp_specialize.tag": "0 : i32", "tt.warp_specialize": ""}
    return PartitionPlan({g: pid[g] for g in groups}, lines, loop_attrs, stages)
