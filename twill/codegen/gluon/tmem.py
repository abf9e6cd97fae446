"""Tensor memory of a Blackwell (sm_100) Gluon kernel: its buffers, their columns, and the waits they need.

Decided from the TTGIR, the graph and the schedule (no source text here):

* **buffers**: every ``ttng.tmem_alloc`` of the function. One allocated before the loop (an MMA accumulator,
  S or O of the FA forward) is one buffer; one inside the loop (P stored for the second MMA, per FA4) is a
  buffer of ``depth`` slots, the schedule's buffer depth of the graph op that writes it. A buffer of a
  ``[M, N]`` tile takes :meth:`twill.frontend.types.Type.tmem_columns` columns (times its depth), rounded
  up to the machine's allocation step.
* **sharing**: buffers written once per iteration (the ones the model charges to the op writing them,
  ``op.tmem``) share columns when the schedule never has them alive at once: their lifetimes (the model's
  TMEM intervals) folded onto the II do not intersect. A shared group is one allocation as wide as its
  widest member; the others are views of it (``_reinterpret``). Each share adds two orders the graph does
  not have: the later occupant's writer waits for the earlier one's readers, and the earlier one's writer of
  the next iteration waits for the later one's readers.
* **waits**: an op that depends on another through tensor memory (a graph edge carried in TMEM, a share, or
  a write into a slot whose previous value a reader still needs) waits on the other op's *done* mbarrier
  for the iteration it needs, unless the order is already there: the same partition issues both and the
  producer is not an asynchronous MMA, or both are MMAs of one partition (tcgen05 runs one thread's MMAs
  in issue order).
* **columns**: the sum over allocations, checked against the machine's columns (:class:`CodegenError`
  naming every buffer and its columns when over).

A done barrier has ``R`` slots, ``R`` the largest distance waited on it (at least 1): iteration ``i`` arrives
on slot ``i % R``, and a wait for iteration ``i`` uses that slot with parity ``(i // R) & 1``. Precondition
of that arithmetic (stated, not proved here): the op never completes ``R`` iterations beyond the one a waiter
wants before the waiter has waited. It holds on the graphs the frontend builds when every buffer has one
slot per value alive and each writer is ordered after the readers of the value it overwrites, which the
waits above add (:func:`plan_tmem` refuses a multi-slot buffer that is read on another partition); the CPU
simulation (:mod:`twill.codegen.gluon.cpu_sim`) checks the generated kernels' barrier protocol.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from twill.codegen.gluon.errors import CodegenError
from twill.frontend.lower import Lowering
from twill.frontend.ttgir import Op, Value
from twill.ir.machine import Machine
from twill.model.liveness import memory_intervals
from twill.schedule import Schedule

__all__ = ["TC_MMA", "TMEM_OPS", "TmemBuffer", "TmemPlan", "TmemWait", "plan_tmem", "tmem_layout"]

TC_MMA = "ttng.tc_gen5_mma"
TMEM_OPS = frozenset({TC_MMA, "ttng.tmem_alloc", "ttng.tmem_load", "ttng.tmem_store"})
"""TTGIR ops the Blackwell emitter places itself."""


@dataclass
class TmemBuffer:
    """One tensor-memory buffer: ``name`` in the kernel, its TTGIR value, tile and columns (all slots).

    ``alias_of``: the buffer whose columns it shares (then it is a view of that allocation), else None.
    ``writer``: the graph op that writes it each iteration (None for a buffer carried across iterations).
    """

    name: str
    value: Value
    shape: tuple[int, ...]
    element: str
    layout: str
    columns: int
    depth: int
    writer: str | None
    readers: list[str]
    alias_of: str | None = None


@dataclass(frozen=True)
class TmemWait:
    """Graph op ``dst`` of iteration ``j`` waits for ``src`` of iteration ``j - distance``; ``why`` says
    which dependence (an edge, a share, a slot reuse)."""

    src: str
    dst: str
    distance: int
    why: str


@dataclass
class TmemPlan:
    """Every tensor-memory decision the Blackwell emitter follows."""

    buffers: list[TmemBuffer]
    of_value: dict[int, TmemBuffer]
    waits: dict[str, list[TmemWait]]
    done: dict[str, int]
    finals: list[tuple[Op, TmemBuffer, str]]
    """``waits``: per graph op, what it waits for; ``done``: the ops with a done barrier and its slots;
    ``finals``: each ``tmem_load`` after the loop, its buffer, the graph op whose partition signals it."""
    columns: int
    limit: int
    notes: list[str] = field(default_factory=list)

    def allocations(self) -> list[TmemBuffer]:
        """The buffers that are allocations (not views of another)."""
        return [b for b in self.buffers if b.alias_of is None]


def tmem_layout(value: Value) -> str:
    """Gluon ``TensorMemoryLayout`` of a TMEM memdesc from its ``#ttng.tensor_memory_encoding``."""
    enc = value.type.encoding
    m = re.search(r"blockM\s*=\s*(\d+),\s*blockN\s*=\s*(\d+)(?:,\s*colStride\s*=\s*(\d+))?", enc)
    if not m:
        raise CodegenError(f"tensor-memory value {value.name} has encoding {enc!r}, not a "
                           "#ttng.tensor_memory_encoding this backend maps")
    return f"TensorMemoryLayout([{m.group(1)}, {m.group(2)}], col_stride={m.group(3) or 1})"


def _allocs(lowering: Lowering) -> list[Op]:
    func = next(op for op in lowering.module.ops() if op.name == "tt.func")
    return [op for op in func.walk() if op.name == "ttng.tmem_alloc"]


def _node_of(lowering: Lowering) -> dict[int, str]:
    return {id(m): n for n, ms in lowering.members.items() for m in ms}


def _cycles(schedule: Schedule, lo: int, hi: int) -> set[int]:
    ii = schedule.ii
    if hi - lo >= ii:
        return set(range(ii))
    return {t % ii for t in range(lo, hi)}


def plan_tmem(schedule: Schedule, lowering: Lowering, machine: Machine, part_of: dict[str, int]) -> TmemPlan:
    """Tensor-memory buffers, shares, waits and columns of ``schedule`` (see the module docstring).

    ``part_of`` maps each graph op to its partition position.

    Raises
    ------
    CodegenError
        A TMEM view op the backend does not lower; a multi-slot TMEM buffer read on another partition; the
        buffers need more columns than ``machine`` has (every buffer and its columns named).
    """
    node_of = _node_of(lowering)
    graph = lowering.graph
    loop = lowering.loop
    depths = schedule.buffer_depths()
    step = max(1, machine.tmem_alloc_step)
    buffers: list[TmemBuffer] = []
    of_value: dict[int, TmemBuffer] = {}
    for op in lowering.module.ops():
        if op.name in ("ttng.tmem_subslice", "ttg.memdesc_index", "ttng.tmem_copy") and any(
                v.type.space == "tmem" for v in op.results):
            raise CodegenError(f"{op.name} at TTGIR line {op.line} (a view or copy of tensor memory) has no "
                               "Blackwell Gluon lowering")
    writer_of: dict[int, str] = {}
    for n, ms in lowering.members.items():
        for m in ms:
            if m.name == TC_MMA:
                writer_of.setdefault(m.operands[2].key, n)
    for i, alloc in enumerate(_allocs(lowering)):
        v = alloc.results[0]
        inside = loop in alloc.ancestors()
        writer = node_of.get(id(alloc)) if inside else None
        if not inside:
            # a buffer before the loop that an MMA overwrites every iteration (use_acc false): charged to the
            # MMA by the model (op.tmem); else carried across iterations (fixed)
            n = writer_of.get(v.key)
            if n is not None and graph.op(n).tmem:
                writer = n
        depth = max(1, depths.get(writer, 1)) if inside and writer else 1
        cols = v.type.tmem_columns() * depth
        cols = -(-cols // step) * step
        name = f"tm{i}_{(v.name or 'v').lstrip('%')}"
        readers = sorted({e.dst for e in graph.out_edges(writer) if e.carrier == "tmem"}) if writer else []
        buf = TmemBuffer(name, v, tuple(v.type.shape), v.type.element, tmem_layout(v), cols, depth, writer,
                         readers)
        if depth > 1 and any(part_of[r] != part_of[writer] for r in readers if writer):
            raise CodegenError(f"tensor-memory buffer {v.name} of graph op {writer!r} has {depth} slots and "
                               "is read on another partition: multi-slot TMEM hand-offs are not lowered")
        buffers.append(buf)
        of_value[v.key] = buf
    waits: dict[str, list[TmemWait]] = {}
    deps: list[TmemWait] = [TmemWait(e.src, e.dst, e.distance, f"graph edge {e.src} -> {e.dst} (TMEM)")
                            for e in graph.edges if e.carrier == "tmem" and e.src != e.dst]
    for buf in buffers:
        if buf.writer is None or buf.alias_of is not None:
            continue
        if loop in (buf.value.owner.ancestors() if buf.value.owner else ()):
            for r in buf.readers:   # the next write into a slot waits for this value's readers
                deps.append(TmemWait(r, buf.writer, buf.depth, f"slot reuse of {buf.value.name}"))
    _share(schedule, buffers, deps, step)
    for d in deps:
        src_mma = _is_mma(lowering, d.src)
        dst_mma = _is_mma(lowering, d.dst)
        same = part_of[d.src] == part_of[d.dst]
        if same and (not src_mma or dst_mma):
            continue
        lst = waits.setdefault(d.dst, [])
        if all((w.src, w.distance) != (d.src, d.distance) for w in lst):
            lst.append(d)
    # a done barrier of R slots (iteration i arrives on slot i % R) for the largest distance R waited
    done: dict[str, int] = {}
    for ws in waits.values():
        for w in ws:
            done[w.src] = max(done.get(w.src, 1), w.distance)
    finals = _finals(lowering, of_value, node_of)
    columns = sum(b.columns for b in buffers if b.alias_of is None)
    plan = TmemPlan(buffers, of_value, waits, dict(sorted(done.items())), finals, columns,
                    machine.tmem_columns)
    if columns > machine.tmem_columns:
        parts = ", ".join(f"{b.value.name} {'x'.join(map(str, b.shape))}x{b.element}"
                          f"{f' x{b.depth}' if b.depth > 1 else ''} {b.columns}"
                          for b in buffers if b.alias_of is None)
        raise CodegenError(f"the kernel's tensor memory needs {columns} columns, more than machine "
                           f"{machine.name!r} has ({machine.tmem_columns}): {parts}")
    return plan


def _finals(lowering: Lowering, of_value: dict[int, TmemBuffer], node_of: dict[int, str]
            ) -> list[tuple[Op, TmemBuffer, str]]:
    """Each ``tmem_load`` after the loop, its buffer, and the graph op whose TMEM token the loop yields for
    it (the last op touching the buffer in an iteration; its partition signals the final value)."""
    loop = lowering.loop
    func = next(op for op in lowering.module.ops() if op.name == "tt.func")
    yield_op = next(op for op in loop.body.ops if op.name == "scf.yield")
    out = []
    for op in func.body.ops:
        if op.name != "ttng.tmem_load":
            continue
        buf = of_value.get(op.operands[0].key)
        tok = next((v for v in op.operands[1:] if v.type.kind == "token"), None)
        if buf is None or tok is None or tok.owner is not loop:
            raise CodegenError(f"ttng.tmem_load at TTGIR line {op.line} after the loop does not read a loop "
                               "result's tensor memory: not lowered")
        src = yield_op.operands[tok.index].owner
        if src is None or id(src) not in node_of:
            raise CodegenError(f"ttng.tmem_load at TTGIR line {op.line}: the loop's token for its buffer is "
                               "not made by a graph op")
        out.append((op, buf, node_of[id(src)]))
    return out


def _is_mma(lowering: Lowering, node: str) -> bool:
    return any(m.name == TC_MMA for m in lowering.members[node])


def _share(schedule: Schedule, buffers: list[TmemBuffer], deps: list[TmemWait], step: int) -> None:
    """Let per-iteration buffers of one slot share columns when their folded lifetimes are disjoint (first
    fit, widest first); record the two orders each share needs in ``deps``."""
    p = schedule.problem
    intervals = {iv.what: iv for iv in memory_intervals(p, schedule.ii, schedule.start, schedule.group,
                                                         "tmem")}
    cands = [b for b in buffers if b.writer is not None and b.depth == 1 and b.writer in intervals]
    cands.sort(key=lambda b: (-b.columns, b.name))
    groups: list[list[TmemBuffer]] = []
    for b in cands:
        iv = intervals[b.writer]
        mine = _cycles(schedule, iv.start, iv.end)
        for g in groups:
            if g[0].columns < b.columns:
                continue
            if all(not (mine & _cycles(schedule, intervals[o.writer].start, intervals[o.writer].end))
                   for o in g):
                b.alias_of = g[0].name
                g.append(b)
                break
        else:
            groups.append([b])
    ii = schedule.ii
    for g in groups:
        for a in g:
            for b in g:
                if a is b:
                    continue
                # b's value of iteration j + k is written after a's of iteration j dies: k from absolute time
                ia, ib = intervals[a.writer], intervals[b.writer]
                k = -(-(ia.end - ib.start) // ii)
                if ib.start + k * ii < ia.end:
                    k += 1
                for r in a.readers or [a.writer]:
                    deps.append(TmemWait(r, b.writer, -k if k < 0 else k,
                                         f"{b.value.name} shares the columns of {a.value.name}"))
