"""The body of one ``scf.for``: which ops are folded, which are merged together, who feeds whom.

:class:`LoopBody` does the bookkeeping that turns TTGIR ops into tile-level groups, before any cost
is attached:

1. **Flatten** the body: a side-effect-free ``scf.if`` is if-converted (both branches become part of
   the body); any other ``scf.if`` is rejected.
2. **Classify** every op (:func:`twill.frontend.rules.classify`): folded, elementwise, or a node; an
   if-converted ``scf.if`` is a ``branch`` when it computes anything or yields a float tile, else folded.
3. **Group**: a ``ttg.local_alloc`` of a loaded tile joins its load (the load writes straight to
   shared memory after Triton's lowering); an elementwise op whose value has exactly one consumer, and
   that consumer is elementwise too and in the same branch (or both outside any), joins the consumer's
   group; every op inside an if-converted ``scf.if`` joins the outermost ``scf.if``'s group, which is
   costed as its branches back to back (:func:`twill.frontend.rules.branch_cost`).
4. **Sources**: for any SSA value, the groups that really produce it, seen through folded ops and
   through ``iter_args`` (each ``scf.yield`` crossing adds one iteration of distance).
"""

from __future__ import annotations

from dataclasses import dataclass

from twill.errors import FrontendError
from twill.frontend.rules import GEMM_OPS, IF_CONVERTIBLE, VIEW_OPS, LoweringContext, classify, is_pure
from twill.frontend.ttgir import Op, Value

__all__ = ["YIELD", "LoopBody", "Source"]

YIELD = "<yield>"
"""Stands for the loop's ``scf.yield`` among the consumers of a value."""

_LOADS = ("tt.descriptor_load", "tt.load")


@dataclass(frozen=True)
class Source:
    """A producer of a value: the group's primary op, the iteration distance, and the value itself."""

    op: Op
    distance: int
    value: Value


class LoopBody:
    """Folding, grouping and def-use bookkeeping for the body of ``loop``.

    Parameters
    ----------
    loop : Op
        The ``scf.for`` op.
    ctx : LoweringContext
        Module, cost model and warps, used to classify ops.

    Raises
    ------
    FrontendError
        An ``scf.if`` with side effects, or a loop whose body does not end in ``scf.yield``.
    UnsupportedOpError
        An op without a cost rule.
    """

    def __init__(self, loop: Op, ctx: LoweringContext) -> None:
        self.loop = loop
        self.block = loop.body
        if not self.block.ops or self.block.ops[-1].name != "scf.yield":
            raise FrontendError("loop body does not end in scf.yield", line=loop.line)
        self.yield_op = self.block.ops[-1]
        self.if_converted: list[Op] = []
        self.branch_of: dict[Op, Op] = {}
        """Each op nested in an if-converted ``scf.if`` -> the outermost such ``scf.if``."""
        self.ops = self._flatten(self.block.ops[:-1])
        self.index = {op: i for i, op in enumerate(self.ops)}
        self.role: dict[Op, str] = {}
        for op in self.ops:  # nested ops come before their scf.if
            self.role[op] = self._role(op, ctx)
        self._consumer_cache: dict[int, frozenset[Op | str]] = {}
        self.parent = {op: op for op in self.ops if self.role[op] != "fold"}
        self._group()

    # ------------------------------------------------------------------------------------ flattening
    def _flatten(self, ops: list[Op], outer: Op | None = None) -> list[Op]:
        out: list[Op] = []
        for op in ops:
            if op.name in ("scf.for", "scf.while"):
                raise FrontendError(f"{op.name} nested in the loop at TTGIR line {self.loop.line}",
                                    line=op.line, location=str(op.loc) or None)
            if outer is not None:
                self.branch_of[op] = outer
            if op.name == "scf.if":
                self._check_if(op)
                self.if_converted.append(op)
                for region in op.regions:
                    for block in region:
                        out.extend(self._flatten([o for o in block.ops if o.name != "scf.yield"],
                                                 outer or op))
            out.append(op)
        return out

    def _check_if(self, op: Op) -> None:
        if is_pure(op):
            return
        culprit = next(inner for inner in op.walk() if inner.name not in IF_CONVERTIBLE)
        raise FrontendError(f"scf.if in the loop body has a side effect or memory access ({culprit.name} "
                            f"at TTGIR line {culprit.line}); twill schedules loops without control flow "
                            "and can only if-convert side-effect-free branches", line=op.line,
                            location=str(op.loc) or None)

    def _role(self, op: Op, ctx: LoweringContext) -> str:
        role = classify(op, ctx)
        if role != "if":
            return role
        floats = [v for v in op.results if v.type.kind == "tensor" and v.type.is_float]
        computes = any(self.role.get(inner, "fold") != "fold" for inner in op.walk() if inner is not op)
        return "branch" if floats or computes else "fold"

    # ------------------------------------------------------------------------------------ structure
    def top(self, op: Op) -> Op | None:
        """The flattened body op that ``op`` is, or is nested in (``None`` outside the loop)."""
        current: Op | None = op
        while current is not None and current not in self.index:
            if current is self.loop:
                return None
            current = current.parent
        return current

    def consumers(self, value: Value) -> frozenset[Op | str]:
        """Non-folded body ops that read ``value`` (through folded ops); :data:`YIELD` if it is carried."""
        if value.key in self._consumer_cache:
            return self._consumer_cache[value.key]
        found: set[Op | str] = set()
        for user in value.users:
            if user is self.yield_op:
                found.add(YIELD)
                continue
            top = self.top(user)
            if top is None:
                continue
            if self.role[top] == "fold":
                for result in top.results:
                    found |= self.consumers(result)
            else:
                found.add(top)
        self._consumer_cache[value.key] = frozenset(found)
        return self._consumer_cache[value.key]

    def inputs(self, op: Op) -> list[tuple[int, Value]]:
        """``(operand index, value)`` that ``op`` reads from outside itself.

        For an if-converted ``scf.if`` these are the condition and the values its branches yield; for
        an op with regions (``tt.reduce``), operands of nested ops defined outside it are included.
        """
        if op.name == "scf.if":
            pairs = [(0, op.operands[0])]
            for region in op.regions:
                for block in region:
                    if block.ops and block.ops[-1].name == "scf.yield":
                        pairs.extend(enumerate(block.ops[-1].operands))
            return pairs
        pairs = list(enumerate(op.operands))
        inside = set(op.walk())
        for inner in op.walk():
            if inner is not op:
                pairs.extend((-1, v) for v in inner.operands if v.owner is not None and v.owner not in inside)
        return pairs

    # ------------------------------------------------------------------------------------ grouping
    def find(self, op: Op) -> Op:
        """Primary op of the group holding ``op``."""
        while self.parent[op] is not op:
            self.parent[op] = self.parent[self.parent[op]]
            op = self.parent[op]
        return op

    def _group(self) -> None:
        for op in self.ops:
            if op.name == "ttg.local_alloc" and self.role[op] == "node" and op.operands:
                src = op.operands[0].owner
                if src is not None and src in self.role and src.name in _LOADS and self.role[src] == "node":
                    self.parent[self.find(op)] = self.find(src)
        for op in self.ops:
            if self.role[op] != "elementwise" or len(op.results) != 1:
                continue
            users = self.consumers(op.results[0])
            if len(users) != 1:
                continue
            (user,) = users
            if isinstance(user, Op) and self.role[user] == "elementwise" and \
                    self.branch_of.get(user) is self.branch_of.get(op):
                self.parent[self.find(op)] = self.find(user)
        for op, outer in self.branch_of.items():
            if self.role[op] != "fold" and self.role[outer] != "fold":
                self.parent[self.find(op)] = self.find(outer)

    def groups(self) -> list[list[Op]]:
        """Groups of non-folded ops, each in body order, ordered by their primary op."""
        members: dict[Op, list[Op]] = {}
        for op in self.ops:
            if self.role[op] != "fold":
                members.setdefault(self.find(op), []).append(op)
        return [members[p] for p in sorted(members, key=self.index.__getitem__)]

    def folded(self) -> list[Op]:
        """Ops folded away, in body order."""
        return [op for op in self.ops if self.role[op] == "fold"]

    # ------------------------------------------------------------------------------------ def-use
    def sources(self, value: Value, visiting: frozenset[int] = frozenset()) -> set[Source]:
        """Groups producing ``value``: seen through folded ops, and through iter_args (distance + 1)."""
        owner = value.owner
        if owner is not None:
            top = self.top(owner)
            if top is None or top is not owner:
                return set()
            if self.role[top] != "fold":
                return {Source(self.find(top), 0, value)}
            found: set[Source] = set()
            for _, operand in self.inputs(top):
                found |= self.sources(operand, visiting)
            return found
        if value.block is not self.block or value.index == 0 or value.key in visiting:
            return set()
        carried = self.yield_op.operands[value.index - 1]
        return {Source(s.op, s.distance + 1, s.value) for s in self.sources(carried, visiting | {value.key})}

    @staticmethod
    def accumulator_operands(op: Op) -> frozenset[int]:
        """Operand indices of an MMA that carry its accumulator (value and TMEM token)."""
        if op.name not in GEMM_OPS:
            return frozenset()
        extra = {3} if op.name == "ttng.tc_gen5_mma" and len(op.operands) > 3 and \
            op.operands[3].type.kind == "token" else set()
        return frozenset({2, *extra})

    def buffer_root(self, value: Value) -> Value:
        """The buffer a memdesc value views (through ``memdesc_index``/``trans``/``subslice`` ...)."""
        while value.owner is not None and value.owner.name in VIEW_OPS and value.owner.operands:
            value = value.owner.operands[0]
        return value

    def defined_before_loop(self, value: Value) -> bool:
        """True when ``value`` is an op result outside the loop (a buffer allocated before it)."""
        owner = value.owner
        return owner is not None and owner is not self.loop and self.loop not in owner.ancestors()

    @staticmethod
    def tmem_written(op: Op) -> Value | None:
        """The tensor-memory buffer (view) ``op`` writes: an MMA's accumulator, a ``tmem_store``'s
        destination; ``None`` for other ops."""
        if op.name == "ttng.tmem_store":
            candidates = op.operands
        elif op.name == "ttng.tc_gen5_mma":
            candidates = op.operands[2:3]
        else:
            return None
        return next((v for v in candidates if v.type.kind == "memdesc" and v.type.space == "tmem"), None)

    def overwrites_own_buffer(self, op: Op) -> bool:
        """True when ``op`` replaces the whole content of the tensor-memory buffer it writes without
        reading it (an MMA with ``use_acc = false``, a whole ``tmem_store``)."""
        written = self.tmem_written(op)
        return written is not None and self._overwrites(op, self.buffer_root(written))

    def _overwrites(self, op: Op, root: Value) -> bool:
        """True when ``op`` replaces the whole content of buffer ``root`` without reading it."""
        written = self.tmem_written(op)
        if written is None or self.buffer_root(written).key != root.key:
            return False
        if written.type.elements != root.type.elements:
            return False
        if op.name == "ttng.tmem_store":
            stored = next((v for v in op.operands if v.type.kind == "tensor"), None)
            return stored is not None and stored.type.elements == root.type.elements
        flags = [v for v in op.operands[3:] if v.type.kind == "scalar" and v.type.element == "i1"]
        use_acc = flags[0].owner if flags else None
        return (use_acc is not None and use_acc.name == "arith.constant"
                and use_acc.attrs.get("value") is False)

    def per_iteration_tmem(self) -> dict[int, Value]:
        """Tensor-memory buffers allocated before the loop whose value never crosses an iteration.

        Triton hoists every TMEM allocation out of the loop, so the scores ``S`` of attention live in
        a buffer allocated once; but each iteration's first access to it replaces its whole content (an
        MMA with ``use_acc = false`` or a ``tmem_store``) and nothing reads it after the loop. Such a
        buffer holds a value only from that write to its last read in the same iteration. Returns
        buffer key -> buffer (the root memdesc).
        """
        first: dict[int, tuple[Value, Op]] = {}
        for op in self.ops:
            for inner in op.walk():
                for value in inner.operands:
                    if value.type.kind != "memdesc" or value.type.space != "tmem":
                        continue
                    root = self.buffer_root(value)
                    if self.defined_before_loop(root) and root.key not in first:
                        first[root.key] = (root, inner)
        return {key: root for key, (root, op) in first.items()
                if self._overwrites(op, root) and not self._read_after_loop(root)}

    def _read_after_loop(self, root: Value) -> bool:
        """True when an op after the loop (in the loop's block) uses ``root`` or a view of it."""
        after: set[Op] = set()
        holder = self.loop.parent
        for region in holder.regions if holder is not None else []:
            for block in region:
                if self.loop in block.ops:
                    after = set(block.ops[block.ops.index(self.loop) + 1:])
        pending, seen = [root], set()
        while pending:
            value = pending.pop()
            if value.key in seen:
                continue
            seen.add(value.key)
            for user in value.users:
                if user is self.loop or self.loop in user.ancestors():
                    continue
                top = next((a for a in (user, *user.ancestors()) if a in after), None)
                if top is not None:
                    return True
                if user.name in VIEW_OPS:
                    pending.extend(user.results)
        return False
