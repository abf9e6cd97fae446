"""Kernel-wide facts the Gluon emitter reads: the TTGIR function, its arguments, layouts, invariant loads.

Also the small helpers shared by the emitter modules: Python names of TTGIR values, descriptor blocks,
tile sizes, and boolean source-text conditions simplified where the trip region decides them.
"""

from __future__ import annotations

import re
from typing import Any

from twill.codegen.gluon.errors import CodegenError
from twill.codegen.gluon.layouts import parse_encoding
from twill.codegen.gluon.ops import constant_value
from twill.codegen.gluon.plan import LOADS, MMAS, Plan
from twill.frontend.lower import Lowering
from twill.frontend.ttgir import Op, Value
from twill.schedule import Schedule

__all__ = ["KernelFacts", "all_of", "any_of", "descriptor_block", "is_zero_constant", "negate", "py_name",
           "tile_bytes"]


def py_name(value: Value) -> str:
    """A Python identifier for a TTGIR value (its name without ``%``)."""
    base = re.sub(r"\W", "_", value.name.lstrip("%")) if value.name else f"v{value.index}"
    return base if base and not base[0].isdigit() else f"v_{base}"



class KernelFacts:
    """Kernel-wide facts shared by the partition emitters."""

    def __init__(self, schedule: Schedule, lowering: Lowering, plan: Plan, spec: Any) -> None:
        self.schedule, self.lowering, self.plan, self.spec = schedule, lowering, plan, spec
        self.ring_reused: set[str] = set()  # rings an epilogue store stages its tile in (readers done)
        self.module = lowering.module
        self.loop = lowering.loop
        self.lines = self.module.text.splitlines()
        func = next(op for op in self.module.ops() if op.name == "tt.func")
        self.func = func
        self.node_of: dict[int, str] = {}
        self.members_order: dict[int, int] = {}
        self.members: dict[str, list[Op]] = {name: list(ms) for name, ms in lowering.members.items()}
        for name, members in lowering.members.items():
            for m in members:
                self.node_of[id(m)] = name
        self.args: dict[int, str] = {}
        self.params = [a for a in spec.fn.arg_names if a not in spec.constexprs]
        block_args = func.body.args
        at = 0
        self.desc_params: dict[str, tuple[tuple[int, ...], str]] = {}
        for p in self.params:
            value = block_args[at]
            self.args[value.key] = p
            if value.type.kind == "tensordesc":
                shape, elem = descriptor_block(value.type.text)
                self.desc_params[p] = (shape, elem)
                at += 1 + 2 * len(shape)
            else:
                at += 1
        self.mma_columns: dict[str, int] = {}
        for op in self.module.ops():
            for v in op.results:
                if v.type.kind == "tensor" and "nvidia_mma" in v.type.encoding and len(v.type.shape) == 2:
                    enc = parse_encoding(v.type.encoding)
                    key = repr(enc)
                    if op.name in MMAS or key not in self.mma_columns:
                        self.mma_columns[key] = v.type.shape[1]
        self.yield_op = next(op for op in self.loop.body.ops if op.name == "scf.yield")
        self.body_index = {id(op): i for i, op in enumerate(self.loop.body.ops)}
        self.attached: dict[str, list[str]] = {}
        self._attach_carried()
        # invariant TMA loads: before the loop, in the function body
        self.invariant: dict[int, dict[str, Any]] = {}
        for op in func.body.ops:
            if op.name in LOADS:
                alloc = next((u for u in self.users(op.results[0]) if u.name == "ttg.local_alloc"), None)
                if alloc is None:
                    raise CodegenError(f"{op.name} at TTGIR line {op.line} (before the loop) is read in "
                                       "registers, not through shared memory: not lowered")
                self.invariant[alloc.results[0].key] = {"load": op, "alloc": alloc,
                                                         "index": len(self.invariant)}
        self.barrier_count = 0
        self.buffers: list[dict[str, Any]] = []
        self.staging: dict[int, dict[str, Any]] = {}
        # loop results handed after the loop to the partition of the kernel epilogue that reads them
        # (twill.codegen.gluon.emit.plan_after_handoffs), by yield index
        self.after_handoff: dict[int, dict[str, Any]] = {}

    def _attach_carried(self) -> None:
        """Give each loop-carried value that the frontend folded (scalar bookkeeping such as the running max
        ``m_i = max(m_i, m_new)``) a graph op: it is computed in the trip of the graph op among its
        in-loop sources that the schedule starts last, right after that op's members, and carried in slots as
        a member's value is. A folded op cannot be recomputed from its operands as other folded ops are: its
        iter_arg operand is itself of the previous iteration, back to the first.

        Raises
        ------
        CodegenError
            The value has no graph op among its sources (a counter carried alone), or its sources are on
            several warp groups.
        """
        for v in self.yield_op.operands:
            op = v.owner
            if op is None or not self.in_loop(op) or id(op) in self.node_of:
                continue
            nodes = self._source_nodes(op, set())
            if not nodes:
                raise CodegenError(f"the loop-carried value {v.name} ({op.name} at TTGIR line {op.line}) "
                                   "is a folded op of the graph that no graph op of the iteration feeds (a "
                                   "value carried alone, such as a counter): not lowered")
            groups = {self.schedule.slots[n].warp_group for n in nodes}
            if len(groups) > 1:
                raise CodegenError(f"the loop-carried value {v.name} ({op.name} at TTGIR line {op.line}) "
                                   f"is a folded op of graph ops {sorted(nodes)} on warp groups "
                                   f"{sorted(groups)}: a folded value made on several warp groups is not "
                                   "lowered")
            node = max(nodes, key=lambda n: (self.schedule.slots[n].start, self.body_index.get(
                id(self.members[n][-1]), 0)))
            self.members[node].append(op)
            self.node_of[id(op)] = node
            self.attached.setdefault(node, []).append(v.name)

    def _source_nodes(self, op: Op, seen: set[int]) -> set[str]:
        """Graph ops whose values of the same iteration ``op`` (folded) reads, through other folded ops."""
        out: set[str] = set()
        for u in op.operands:
            src = u.owner
            if src is None or not self.in_loop(src) or id(src) in seen:
                continue
            seen.add(id(src))
            if id(src) in self.node_of:
                out.add(self.node_of[id(src)])
            else:
                out |= self._source_nodes(src, seen)
        return out

    def users(self, value: Value) -> list[Op]:
        return [u for u in self.func.walk() if value in u.operands]

    def line(self, op: Op) -> str:
        return self.lines[op.line - 1] if 0 < op.line <= len(self.lines) else op.name

    def where(self, op: Op) -> str:
        node = self.node_of.get(id(op))
        if node is None:
            return f"{op.name} (folded into its consumers, not a graph op) at TTGIR line {op.line}"
        kind = self.lowering.graph.op(node).kind
        return f"{op.name} (graph op {node!r}, kind {kind}) at TTGIR line {op.line}"

    def in_loop(self, op: Op | None) -> bool:
        return op is not None and (op is self.loop or self.loop in op.ancestors())



def descriptor_block(text: str) -> tuple[tuple[int, ...], str]:
    """Block shape and element type of a ``!tt.tensordesc<tensor<...>>`` type."""
    m = re.search(r"tensor<([\dx]+)x(\w+)", text)
    if not m:
        raise CodegenError(f"cannot read the block of descriptor type {text}")
    return tuple(int(d) for d in m.group(1).split("x")), m.group(2)



def is_zero_constant(v: Value, k: KernelFacts) -> bool:
    """``v`` is an ``arith.constant`` of zeros (a wgmma accumulator that need not be read:
    ``use_acc=False``)."""
    op = v.owner
    if op is None or op.name != "arith.constant":
        return False
    try:
        return constant_value(k.line(op)) in ("0", "0.0", "-0.0")
    except ValueError:
        return False



def all_of(terms: list[bool | str]) -> bool | str:
    """Conjunction of constant or source-text conditions."""
    if any(t is False for t in terms):
        return False
    rest = [t for t in terms if t is not True]
    return True if not rest else " & ".join(f"({t})" for t in rest)


def any_of(terms: list[bool | str]) -> bool | str:
    """Disjunction of constant or source-text conditions."""
    if any(t is True for t in terms):
        return True
    rest = [t for t in terms if t is not False]
    return False if not rest else " | ".join(f"({t})" for t in rest)


def negate(term: bool | str) -> bool | str:
    """Negation of a constant or source-text condition."""
    return (not term) if isinstance(term, bool) else f"~({term})"



def tile_bytes(shape: tuple[int, ...], elem: str) -> int:
    """Bytes of a tile of ``shape`` and TTGIR element type ``elem``."""
    n = 1
    for d in shape:
        n *= d
    bits = {"f16": 16, "bf16": 16, "f32": 32, "i32": 32, "i8": 8, "f8E4M3FN": 8}.get(elem, 32)
    return n * bits // 8


