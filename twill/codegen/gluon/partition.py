"""The emitter of one partition function of the Gluon kernel (see :mod:`twill.codegen.gluon.emit`)."""

from __future__ import annotations

import re
from typing import Any

from twill.codegen.gluon.errors import CodegenError
from twill.codegen.gluon.facts import (
    KernelFacts,
    all_of,
    any_of,
    descriptor_block,
    is_zero_constant,
    negate,
    py_name,
    tile_bytes,
)
from twill.codegen.gluon.layouts import gluon_layout, parse_encoding
from twill.codegen.gluon.ops import (
    BINARY,
    CASTS,
    COMPARE,
    UNARY,
    broadcasts_operand,
    compare_operator,
    constant_value,
    dtype_of,
    reduce_combiner,
    splat_constant,
)
from twill.codegen.gluon.plan import LOADS, MMAS, Partition
from twill.frontend.ttgir import Op, Value

__all__ = ["PartitionEmitter"]


class PartitionEmitter:
    """Emits one partition function: its preamble (``pre``) and body (``out``) lines, from :meth:`body`."""

    def __init__(self, k: KernelFacts, part: Partition, prefix: str = "") -> None:
        self.k, self.p = k, part
        self.prefix = prefix   # of every name this emitter makes (a second body of the same partition)
        self.pre: list[str] = []
        self.out: list[str] = []
        self.ind = 1
        self.outer: dict[int, str] = {}
        self.tag = ""
        self.local: dict[tuple[int, str], str] = {}
        self.waited: set[tuple[str, str]] = set()
        self.kinds: dict[str, str] = {}
        self.outstanding: list[dict[str, Any]] = []   # wgmmas issued and not known complete, oldest first
        self.pushed: set[int] = set()
        self.tc_log: list[str] = []
        self.uses_turn = False
        self.notes: list[str] = []
        self.invariant_issue: list[tuple[int, dict[str, Any]]] = []
        self.ran: set[int] = set()
        self.pending: list[tuple[int, Value, str, str, int]] = []   # pointer loads not yet handed over
        self.carried: list[tuple[Value, str, int]] = []   # loads of the previous trip (_carry_writes)
        self.ahead = False
        self.defined: set[str] = set()
        self.trip_expr = "0"
        self.counter = 0
        self.mine = set(part.order)
        self.pos = {}
        order = 0
        for n in part.order:
            for m in sorted(k.members[n], key=lambda m: k.body_index.get(id(m), 0)):
                self.pos[id(m)] = order
                order += 1
        self.chains = self._chain_lengths()

    # ------------------------------------------------------------------ helpers
    def _emit(self, line: str) -> None:
        self.out.append("    " * self.ind + line)

    def _fresh(self, hint: str) -> str:
        self.counter += 1
        return f"{self.prefix}{hint}_{self.tag}{self.counter}"

    def _stage(self, node: str) -> int:
        return self.k.plan.stage[node]

    def _layout(self, value: Value) -> str:
        try:
            return gluon_layout(parse_encoding(value.type.encoding), value.type.shape, self.p.warps,
                                self.k.mma_columns)
        except ValueError as exc:
            raise CodegenError(f"{value.name or 'a value'} of {value.owner.name if value.owner else '?'}"
                               f" at TTGIR line {value.owner.line if value.owner else '?'}: {exc}") from exc

    def _producer_member(self, value: Value) -> Op | None:
        """The graph-op member that defines ``value`` in the loop (None for folded / outside)."""
        op = value.owner
        return op if op is not None and id(op) in self.k.node_of else None

    def _reads(self) -> list[tuple[Value, Op | None, int]]:
        """(value, reading member or None for after-the-loop, distance) for every in-loop register value read
        by this partition from a member of its own ops."""
        out = []
        for n in self.p.order:
            for m in self.k.members[n]:
                for v in self.operand_sources(m):
                    out.append((v[0], m, v[1]))
        for i, v in enumerate(self.k.yield_op.operands):
            if self._owner_part(v) == self.p.position and self._loop_result_read(i):
                out.append((v, None, 0))
        return out

    def _loop_result_read(self, i: int) -> bool:
        return any(True for _ in self.k.users(self.k.loop.results[i]))

    def operand_sources(self, op: Op, depth: int = 0) -> list[tuple[Value, int]]:
        """In-loop member values ``op`` reads (through folded ops and iter_args) with their distance."""
        found = []
        for v in op.operands:
            found += self._sources(v, 0)
        for region in op.regions:
            for block in region:
                for inner in block.ops:
                    if inner is not op:
                        for v in inner.operands:
                            if v.block is None or v.block.parent is not op:
                                found += self._sources(v, 0)
        return found

    def _sources(self, v: Value, dist: int, seen: frozenset[int] = frozenset()) -> list[tuple[Value, int]]:
        if v.key in seen:
            return []
        seen = seen | {v.key}
        if v.owner is None:
            if v.block is self.k.loop.body and v.index > 0:
                return self._sources(self.k.yield_op.operands[v.index - 1], dist + 1, seen)
            return []
        if not self.k.in_loop(v.owner):
            return []
        if id(v.owner) in self.k.node_of:
            return [(v, dist)]
        out = []
        for u in v.owner.operands:
            out += self._sources(u, dist, seen)
        return out

    def _owner_part(self, v: Value) -> int | None:
        op = v.owner
        if op is None or id(op) not in self.k.node_of:
            return None
        return self.k.plan.part(self.k.node_of[id(op)], self.k.schedule)

    def _slot_back(self, sp: int, sc: int, dist: int, ran: bool, region: tuple[str, int]) -> int:
        """How many productions back (slot ``c<k>``) the value a reader of stage ``sc`` wants (iteration
        ``j - dist``) lies from the newest value its producer of stage ``sp`` has made so far in trip ``T``
        of ``region`` (``ran``: the producer ran earlier in this trip). The newest produced iteration is
        ``T - sp`` (ran) or ``T - sp - 1``, clipped to ``-1`` (nothing made yet: the slots hold the
        iter_arg's initial value, the "iteration -1" result) in the prologue and to ``n - 1`` in the
        epilogue (the early stages have stopped). Negative: the reader is ahead of the producer."""
        kind, t = region
        b = 0 if ran else 1
        if kind == "pro":
            return max(t - sp - b, -1) - (t - sc - dist)
        if kind == "epi":
            return min(t - sp - b, -1) - (t - sc - dist)
        return sc - sp + dist - b

    def _regions(self) -> list[tuple[tuple[str, int], set[str]]]:
        """Every kind of trip this partition emits, with the graph ops it runs."""
        S = self.p.stages
        out = [(("pro", t), {n for n in self.p.order if self._stage(n) <= t}) for t in range(S - 1)]
        out.append((("steady", 0), set(self.p.order)))
        out += [(("epi", e), {n for n in self.p.order if self._stage(n) >= e + 1}) for e in range(S - 1)]
        return out

    def _chain_lengths(self) -> dict[int, int]:
        """Loop-carried slots each value of this partition needs: the largest :meth:`_slot_back` + 1 over
        every trip kind (prologue, steady, epilogue) that reads it from a slot, 1 for a loop result read
        after the loop. Prologue reads of an iteration before the first take the initial value directly
        (:meth:`_value`) and need no slot."""
        chains: dict[int, int] = {}
        for v, reader, dist in self._reads():
            src = v.owner
            if id(src) not in self.pos:
                continue
            src_node = self.k.node_of[id(src)]
            sp = self._stage(src_node)
            need = 0
            if reader is None:
                need = 1
            else:
                rnode = self.k.node_of[id(reader)]
                if rnode == src_node and dist == 0:
                    continue
                sc = self._stage(rnode)
                for region, ops in self._regions():
                    if rnode not in ops:
                        continue
                    if region[0] == "pro" and region[1] - sc - dist < 0:
                        continue
                    ran = src_node in ops and self.pos[id(src)] < self.pos[id(reader)]
                    k = self._slot_back(sp, sc, dist, ran, region)
                    if k < 0:
                        raise CodegenError(f"{self.k.where(reader)} reads {v.name} of iteration i - {dist} "
                                           f"before the schedule produces it (stage {sp} after stage {sc}, "
                                           f"{region[0]} trip {region[1]})")
                    if not (ran and k == 0):
                        need = max(need, k + 1)
            chains[v.key] = max(chains.get(v.key, 0), need)
        return chains

    # ------------------------------------------------------------------ outer (before-the-loop) values
    def _outer_value(self, v: Value) -> str:
        if v.key in self.outer:
            return self.outer[v.key]
        if v.owner is None:
            if v.key in self.k.args:
                return self.k.args[v.key]
            raise CodegenError(f"block argument {v} outside the loop is not lowered")
        op = v.owner
        if v.key in self.k.invariant:
            name = self._invariant(v)
        elif op.name in LOADS:
            raise CodegenError(f"{self.k.where(op)}: a TMA load read in registers is not lowered")
        else:
            expr = self._pure(op, self._operand_args(op, self._outer_value), v, 0)
            name = f"{py_name(v)}_o"
            self.pre.append(f"    {name} = {expr}")
        self.outer[v.key] = name
        return name

    def _invariant(self, v: Value) -> str:
        info = self.k.invariant[v.key]
        idx = info["index"]
        self.pre.append(f"    mbarrier.wait(inv_bar.index({idx}), 0)")
        return f"inv{idx}"

    # ------------------------------------------------------------------ pure op table
    def _pure(self, op: Op, args: list[str], result: Value, _j: int | str) -> str:
        name = op.name
        if name == "arith.constant":
            value = constant_value(self.k.line(op))
            t = result.type
            if t.kind == "tensor":
                return (f"gl.full({list(t.shape)}, {value}, {dtype_of(t.element, self.k.where(op))}, "
                        f"{self._layout(result)})")
            return value
        if name == "tt.get_program_id":
            axis = "xyz".index(re.search(r"tt\.get_program_id\s+(\w)", self.k.line(op)).group(1))
            return f"gl.program_id({axis})"
        if name in BINARY:
            return BINARY[name](args[0], args[1])
        if name in UNARY:
            return UNARY[name](args[0])
        if name in CASTS:
            return f"{args[0]}.to({dtype_of(result.type.element, self.k.where(op))})"
        if name == "tt.splat":
            return args[0]
        if name == "tt.expand_dims":
            return f"gl.expand_dims({args[0]}, {op.attrs['axis']})"
        if name == "tt.broadcast":
            # Gluon's binary ops, comparisons, where, and the mask / other of a load broadcast size-1
            # dimensions themselves (as Triton's do)
            if all(broadcasts_operand(u, result) for u in self.k.users(result)):
                return args[0]
            return f"{args[0]}.broadcast_to({list(result.type.shape)})"
        if name in COMPARE:
            operator = compare_operator(op, self.k.line(op))
            if operator is None:
                raise CodegenError(f"{self.k.where(op)}: the predicate of {self.k.line(op).strip()[:120]} "
                                   "has no Gluon operator of the same meaning (unsigned or unordered)")
            return f"({args[0]} {operator} {args[1]})"
        if name == "arith.select":
            return f"gl.where({args[0]}, {args[1]}, {args[2]})"
        if name == "tt.make_range":
            return f"gl.arange({op.attrs['start']}, {op.attrs['end']}, {self._layout(result)})"
        if name == "tt.load":
            return self._pointer_load(op, args)
        if name == "ttg.convert_layout":
            src, dst = self._layout(op.operands[0]), self._layout(result)
            return args[0] if src == dst else f"gl.convert_layout({args[0]}, {dst})"
        if name == "tt.reduce":
            fn = reduce_combiner(op)
            if fn is None:
                raise CodegenError(f"{self.k.where(op)}: a reduction whose combiner is not one max/sum/min "
                                   "op has no lowering")
            return f"{fn}({args[0]}, axis={op.attrs['axis']})"
        if name == "ttg.memdesc_trans":
            return f"{args[0]}.permute({tuple(op.attrs['order'])})"
        raise CodegenError(f"no Gluon lowering for {self.k.where(op)}: {self.k.line(op).strip()[:200]} "
                           "(the backend lowers TMA descriptor loads and stores, pointer loads and stores, "
                           "wgmma, and elementwise, comparison, reduction, exp and conversion ops)")

    def _operand_args(self, op: Op, value: Any) -> list[str]:
        """The source expressions of ``op``'s operands (``value`` maps one operand to its expression); the
        ``other`` of a ``tt.load`` that is a one-value constant is not evaluated (:meth:`_pointer_load`
        writes its literal)."""
        if op.name == "tt.load" and len(op.operands) > 2 and op.operands[2].owner is not None and \
                splat_constant(op.operands[2].owner, self.k.line(op.operands[2].owner)) is not None:
            return [value(u) for u in op.operands[:2]] + ["None"]
        return [value(u) for u in op.operands]

    def _plain_access(self, op: Op) -> None:
        """``CodegenError`` for a pointer load / store with a cache, eviction or volatile attribute other
        than the default (Triton prints none for the defaults); the lowering would drop it."""
        odd = {k: v for k, v in op.attrs.items() if k in ("cache", "evict", "isVolatile")
               and str(v) not in ("1", "false", "False")}
        if odd:
            raise CodegenError(f"{self.k.where(op)}: a pointer access with attributes {odd} is not lowered")

    def _pointer_load(self, op: Op, args: list[str]) -> str:
        """``gl.load(pointers, mask, other)``: operands are the pointers, then an optional mask, then an
        optional ``other`` (TTGIR ``tt.load %ptr[, %mask[, %other]]``). An ``other`` that is a one-value
        constant is written as its literal (Gluon broadcasts it to the pointers' shape and layout, and no
        register tile of it is kept alive)."""
        self._plain_access(op)
        text = [args[0]]
        if len(args) > 1:
            text.append(f"mask={args[1]}")
        if len(args) > 2:
            other = op.operands[2]
            literal = splat_constant(other.owner, self.k.line(other.owner)) if other.owner is not None \
                else None
            text.append(f"other={literal if literal is not None else args[2]}")
        return f"gl.load({', '.join(text)})"

    # ------------------------------------------------------------------ in-loop values
    def _iv(self, j: str) -> str:
        lb, step = (self._outer_value(self.k.loop.operands[i]) for i in (0, 2))
        return f"({lb} + ({j}) * {step})"

    @staticmethod
    def _iteration(j: str) -> int | None:
        """The iteration ``j`` as a number where the trip fixes it (prologue, first trip), else None."""
        if re.fullmatch(r"[\d\s()+\-]+", j):
            return int(eval(j, {"__builtins__": {}}))   # digits, parentheses, + and - only
        return None

    def _slot_name(self, v: Value, k: int) -> str:
        return f"{self.prefix}{py_name(v)}_c{k}"

    def _value(self, v: Value, j: str, dist: int, reader: Op | None, complete: bool = True) -> str:
        """Expression of ``v`` for iteration ``j`` read by member ``reader`` (None: after the loop).
        ``complete=False``: the reader is a wgmma accumulating into ``v`` (the Tensor Cores apply wgmmas on
        one accumulator in issue order, so it need not be complete)."""
        if v.owner is None:
            if v.block is self.k.loop.body:
                if v.index == 0:
                    return self._iv(j)
                if self._iteration(j) == 0:
                    # iteration 0 reads the iter_arg's initial value (a prologue / first trip: j is a number)
                    return self._outer_value(self.k.loop.operands[3 + v.index - 1])
                y = self.k.yield_op.operands[v.index - 1]
                prev = self._value(y, f"({j}) - 1", dist + 1, reader, complete)
                if self._lowest(j) > 0 or not self._reads_other_partition(y):
                    return prev   # (a chain of this partition's slots starts at the initial value)
                # iteration j may be the first (the first steady trip, an epilogue trip of a short loop):
                # it takes the initial value; the hand-off read of iteration j - 1 is predicated off then
                key = (v.key, "first", j)
                if key not in self.local:
                    init = self._outer_value(self.k.loop.operands[3 + v.index - 1])
                    name = self._fresh(f"{py_name(v)}_first")
                    self._emit(f"{name} = gl.where(({j}) > 0, {prev}, {init})")
                    self.kinds[name] = "tensor"
                    self.local[key] = name
                return self.local[key]
            return self._outer_value(v)
        op = v.owner
        if not self.k.in_loop(op):
            return self._outer_value(v)
        if id(op) in self.k.node_of:
            node = self.k.node_of[id(op)]
            if self.k.plan.part(node, self.k.schedule) != self.p.position:
                return self._remote(v, node, j, reader, dist)
            return self._chain_read(v, dist, reader, complete)
        # folded op: recompute for this iteration, once per trip
        key = (v.key, j)
        if key in self.local:
            return self.local[key]
        if op.name == "ttg.local_alloc" and op.operands and op.operands[0].owner is not None \
                and op.operands[0].owner.name in LOADS:
            return self._remote(v, self.k.node_of[id(op.operands[0].owner)], j, reader, dist)
        args = self._operand_args(op, lambda u: self._value(u, j, dist, reader))
        expr = self._pure(op, args, v, j)
        name = self._fresh(py_name(v))
        self._emit(f"{name} = {expr}")
        self.local[key] = name
        return name

    def _chain_read(self, v: Value, dist: int, reader: Op | None, complete: bool = True) -> str:
        src = v.owner
        if reader is not None and id(reader) in self.pos and self.k.node_of[id(reader)] == \
                self.k.node_of[id(src)] and dist == 0:
            return self._fresh_read(v, complete)
        if reader is None:
            k = 0
        else:
            sp = self._stage(self.k.node_of[id(src)])
            sc = self._stage(self.k.node_of[id(reader)])
            # made earlier in this trip? (not only by trip order: an epilogue trip skips the early stages)
            before = id(src) in self.ran
            k = self._slot_back(sp, sc, dist, before, self.region)
            if k < 0:
                raise CodegenError(f"{self.k.where(reader)} reads {v.name} of iteration i - {dist} before "
                                   f"the schedule produces it (stage {sp} after stage {sc})")
            if before and k == 0:
                return self._fresh_read(v, complete)
        if k >= self.chains.get(v.key, 0):
            raise CodegenError(f"partition {self.p.position}: {v.name} is read {k} production(s) back in a "
                               f"{self.region[0]} trip, but only {self.chains.get(v.key, 0)} slot(s) are "
                               "carried (generator inconsistency)")
        name = self._slot_name(v, k)
        if complete:
            self._ensure_complete(name, self.k.node_of[id(src)])
        return name

    def _fresh_read(self, v: Value, complete: bool) -> str:
        """The value made earlier in this trip."""
        name = self.local[(v.key, "node")]
        if complete:
            self._ensure_complete(name, None)
        return self.local[(v.key, "node")]

    def _ensure_complete(self, name: str, node: str | None) -> None:
        """Wait for the wgmma whose result ``name`` holds, if it may still be running."""
        for _i, entry in enumerate(self.outstanding):
            if entry["var"] == name and name is not None:
                # all of them (ptxas serializes every wgmma of a kernel in which registers of a wgmma are
                # read while another one issued with it may still run: its C7514 "Potential Performance
                # Loss", seen on the FA forward with wait(1))
                self._wait_through(len(self.outstanding) - 1)
                return

    def _wait_through(self, i: int, keep: str | None = None) -> None:
        """``warpgroup_mma_wait`` so that outstanding wgmmas ``0 .. i`` are complete. ``keep``: an operand of
        a wgmma in flight to name as the wait's dependence when no completed result is read later (Triton
        wants at least one)."""
        done, rest = self.outstanding[:i + 1], self.outstanding[i + 1:]
        deps = [e["var"] for e in done if e["var"] is not None and self.kinds.get(e["var"]) == "token"]
        deps = list(dict.fromkeys(deps))
        if len(deps) == 1:
            self._emit(f"{deps[0]} = warpgroup_mma_wait(num_outstanding={len(rest)}, deps=[{deps[0]}])")
        elif deps:
            self._emit(f"{', '.join(deps)} = warpgroup_mma_wait(num_outstanding={len(rest)}, "
                      f"deps=[{', '.join(deps)}])")
        elif keep is not None:
            # the newest wgmma's own token keeps the wait anchored; it stays in flight (re-wrapped)
            self._emit(f"{keep} = warpgroup_mma_init(warpgroup_mma_wait(num_outstanding={len(rest)}, "
                      f"deps=[{keep}]))")
        else:
            raise CodegenError(f"partition {self.p.position}: a wgmma wait with nothing to depend on")
        for d in deps:
            self.kinds[d] = "tensor"
        self.outstanding = rest
        for e in done:
            for node in e["releases"]:
                self._emit(self._release(node, e["age"]))

    # ------------------------------------------------------------------ rings
    def _ring_slot(self, node: str, j: str) -> tuple[str, str]:
        depth = self.k.plan.rings[node].depth
        return f"(({j}) % {depth})", f"((({j}) // {depth}) & 1)"

    def _lowest(self, j: str) -> int:
        """The smallest value the iteration expression ``j`` takes in the current trip region: a steady
        trip's ``t`` from its first trip, an epilogue trip's ``n_iter`` from the fewest iterations the
        pipelined body runs (the longest prologue, at least one); ``j`` grows with both."""
        if not re.fullmatch(r"[\w\s()+\-]+", j) or set(re.findall(r"[A-Za-z_]\w*", j)) - {"t", "n_iter"}:
            raise CodegenError(f"partition {self.p.position}: iteration expression {j!r} (generator "
                               "inconsistency)")
        kind, t = self.region
        first = self.p.stages - 1 + t if kind == "steady" else 0
        return int(eval(j, {"__builtins__": {}}, {"t": first, "n_iter": max(1, self.p.stages - 1)}))

    def _reads_other_partition(self, v: Value) -> bool:
        """True if ``v`` (a loop value) is, or is computed from, a value of another partition or a ring."""
        for u, _dist in self._sources(v, 0):
            node = self.k.node_of[id(u.owner)]
            if node in self.k.plan.rings or self.k.plan.part(node, self.k.schedule) != self.p.position:
                return True
        return False

    def _remote(self, v: Value, node: str, j: str, reader: Op | None, dist: int = 0) -> str:
        """A value made by another partition (or a ring slot): a loaded tile's slot after its ready wait.
        ``dist``: how many iterations before its reader's the value is (``j`` is its iteration)."""
        ring = self.k.plan.rings.get(node)
        if ring is None:
            return self._staged_read(v, node, j, reader, dist)
        if dist and reader is not None and self._lowest(j) < 0:
            raise CodegenError(f"{self.k.where(reader)} reads the TMA-loaded {v.name} of graph op {node!r} "
                               f"from {dist} iteration(s) before: a loop-carried ring read is not lowered")
        slot, phase = self._ring_slot(node, j)
        key = (node, j)
        if key not in self.waited:
            self._emit(f"mbarrier.wait(ready_{node}.index({slot}), {phase})")
            self.waited.add(key)
        return f"ring_{node}.index({slot})"

    def _release(self, node: str, age: int) -> str:
        """Arrive on the empty barrier of ``node``'s slot of iteration ``trip - age``, predicated on that
        iteration existing when the trip's region does not decide it (the first steady trip)."""
        j = f"({self.trip_expr}) - {age}"
        region, t = self.region
        low = {"pro": t, "steady": self.p.stages - 1 + t, "epi": self.p.stages - 1 + t,
               "after": self.p.stages - 1}[region]
        stmt = self._release_stmt(node, j)
        if region == "pro" and t - age < 0:
            raise CodegenError(f"partition {self.p.position}: a release of iteration {t - age} of {node}")
        if low - age >= 0:
            return stmt
        return stmt[:-1] + f", pred=({j}) >= 0)"

    # ------------------------------------------------------------------ hand-offs between partitions
    def _staged_read(self, v: Value, node: str, j: str, reader: Op | None, dist: int = 0) -> str:
        """A register value of another partition: wait for its staging slot, load it in this partition's
        layout, free the slot. ``dist``: the value is of ``dist`` iterations before the reader's (a
        loop-carried hand-off); where iteration ``j`` may be before the first (the first ``dist``
        iterations of the reader), the wait, load and release are predicated on ``j >= 0`` and the reader
        takes the loop's initial value (:meth:`_value`)."""
        st = self.k.staging.get(v.key)
        if st is None or self.p.position not in st["readers"]:
            raise CodegenError(f"{v.name} of graph op {node!r} is read by partition {self.p.position} "
                               "through a path the hand-off planner did not see")
        # within a trip, an iteration is fixed by how far back it is: the reader's stage plus the distance
        back = None if reader is None else self._stage(self.k.node_of[id(reader)]) + dist
        key = (v.key, "staged", j if back is None else back)
        if key in self.local:
            return self.local[key]
        d = st["depth"]
        low = self._lowest(j) if reader is not None else 0
        pred = f", pred=({j}) >= 0" if low < 0 else ""
        # a slot index >= 0 also where the read is predicated off (a whole number of turns of the ring on)
        at = f"({j}) + {-(low // d) * d}" if low < 0 else j
        slot, phase = f"(({at}) % {d})", f"((({j}) // {d}) & 1)"
        name = self._fresh(f"{py_name(v)}_in")
        self._emit(f"mbarrier.wait(sready_{st['id']}.index({slot}), {phase}{pred})")
        self._emit(f"{name} = stage_{st['id']}.index({slot}).load({self._layout(v)})")
        if back is None or back == self._last_staged_back(v):
            # the slot is freed once per iteration, by this partition's last read of it: readers in a later
            # stage, or of a later iteration, read the same iteration's slot trips later (the staging depth
            # covers them: plan_staging)
            self._emit(f"mbarrier.arrive(sempty_{st['id']}.index({slot}){pred})")
        self.kinds[name] = "tensor"
        self.local[key] = name
        return name

    def _last_staged_back(self, v: Value) -> int:
        """The latest trip, counted back from the one an iteration's value is made in, in which this
        partition reads ``v`` (a value of another partition): iteration ``i``'s value is read in trip
        ``i + s + d`` for each reader of stage ``s`` reading it ``d`` iterations later, the last in this
        one."""
        backs = [self._stage(n) + d for n in self.p.order for m in self.k.members[n]
                 for u, d in self.operand_sources(m) if u.key == v.key]
        return max(backs, default=0)

    def _staged_write(self, v: Value, name: str, j: str, value: str | None = None) -> None:
        """Hand ``v`` (made here, in this trip unless ``value`` names the variable holding it) to the
        partitions that read it."""
        st = self.k.staging.get(v.key)
        if st is None:
            return
        if value is None:
            self._ensure_complete(self.local[(v.key, "node")], None)
            value = self.local[(v.key, "node")]
        d = st["depth"]
        slot, phase = f"(({j}) % {d})", f"((({j}) // {d}) & 1)"
        if st["nearest"]:
            # read only in later iterations: the last ``nearest`` are never read in the loop (plan_staging)
            self._emit(f"if ({j}) + {st['nearest']} < n_iter:")
            self.ind += 1
        self._emit(f"mbarrier.wait(sempty_{st['id']}.index({slot}), {phase} ^ 1)")
        self._emit(f"stage_{st['id']}.index({slot}).store({value})")
        self._emit("fence_async_shared()")
        self._emit(f"mbarrier.arrive(sready_{st['id']}.index({slot}))")
        if st["nearest"]:
            self.ind -= 1

    def _release_stmt(self, node: str, j: str) -> str:
        slot, _ = self._ring_slot(node, j)
        return f"mbarrier.arrive(empty_{node}.index({slot}))"

    # ------------------------------------------------------------------ graph ops
    def _run_node(self, node: str, j: str) -> None:
        members = sorted(self.k.members[node], key=lambda m: self.k.body_index.get(id(m), 0))
        for m in members:
            if m.name not in MMAS and m.name not in LOADS and m.name != "ttg.local_alloc" and any(
                    self._ring_reads(u) for u in m.operands):
                raise CodegenError(f"{self.k.where(m)} reads a TMA ring slot other than as a wgmma operand; "
                                   "only wgmmas release ring slots here (not lowered)")
            if m.name in LOADS:
                self._issue_load(node, m, j)
            elif m.name == "ttg.local_alloc":
                continue
            elif m.name in MMAS:
                self._issue_mma(node, m, j)
                self.ran.add(id(m))
            else:
                args = self._operand_args(m, lambda u, m=m: self._value(u, j, 0, m))
                expr = self._pure(m, args, m.results[0], j)
                name = self._fresh(py_name(m.results[0]))
                self._emit(f"{name} = {expr}")
                self.kinds[name] = "tensor"
                self._define(m.results[0], name)
                self.ran.add(id(m))
                if m.name == "tt.load" and m.results[0].key in self.k.staging:
                    self.pending.append((self._ready_at(node), m.results[0], name, j, self._stage(node)))
                else:
                    self._staged_write(m.results[0], name, j)

    def _ready_at(self, node: str) -> int:
        """When a pointer load of ``node`` has its registers, in the trip's time (``start mod II`` frame,
        problem units): its offset plus the op's latency."""
        return self.k.plan.offset[node] + self.k.schedule.problem.op(node).latency

    def _waits_on_nothing(self, node: str) -> bool:
        """True if ``node``'s code waits on no barrier: no TMA load or Tensor Core op (rings, turns), and
        every operand made by this partition."""
        for m in self.k.members[node]:
            if m.name in MMAS or m.name in LOADS or m.name == "ttg.local_alloc":
                return False
            for v, _dist in self.operand_sources(m):
                src = self.k.node_of[id(v.owner)]
                if src in self.k.plan.rings or self.k.plan.part(src, self.k.schedule) != self.p.position:
                    return False
        return True

    def _flush_writes(self, until: int | None) -> None:
        """Hand over the deferred pointer-load results (in the order they were loaded) that are ready by
        ``until`` (``None``: all of them)."""
        while self.pending and (until is None or self.pending[0][0] <= until):
            _ready, v, name, j, _stage = self.pending.pop(0)
            self._staged_write(v, name, j)

    def _runs_ahead(self) -> bool:
        """True if this partition issues its loads one trip ahead of handing them over: it is pipelined,
        the schedule's streaming loads are issued ``prefetch >= 1`` IIs before their slot (the model's
        streaming rule, docs/model.md), and the partition holds only such loads, pointer loads that wait
        on nothing and whose results other partitions read (a producer group of ``gl.load``), all in one
        stage (its first trip is then written out before the loop, so every load's registers are carried
        into the loop; with a prologue, the loads of the last stage would first run inside it). Iteration
        ``j``'s registers are then stored into its staging slot in the next trip, after that trip's loads
        are issued: the loads of two iterations are in flight while the stores wait. Otherwise a load's
        store is still placed after the trip's later loads (:meth:`_trip`)."""
        p = self.k.schedule.problem
        if self.k.plan.sequential or p.options.prefetch < 1 or not self.p.order or self.p.stages != 1:
            return False
        for n in self.p.order:
            loads = [m for m in self.k.members[n] if m.name == "tt.load"]
            if n not in p.streaming or not loads or not self._waits_on_nothing(n):
                return False
            if any(m.results[0].key not in self.k.staging for m in loads):
                return False
            if any(self.k.plan.part(e.dst, self.k.schedule) == self.p.position
                   for e in self.k.schedule.problem.out_edges(n) if e.dst != n):
                return False
        return True

    def _carry_writes(self) -> None:
        """Run-ahead mode (:meth:`_runs_ahead`): store the registers loaded in the previous trip (their
        loop-carried names), then carry this trip's loads to the next trip."""
        for v, name, stage in self.carried:
            self._staged_write(v, name, f"(({self.trip_expr}) - 1) - {stage}" if stage else
                               f"({self.trip_expr}) - 1", value=name)
        self.carried = []
        for _ready, v, name, _j, stage in self.pending:
            slot = f"{self.prefix}pf_{py_name(v)}"
            self._emit(f"{slot} = {name}")
            self.kinds[slot] = "tensor"
            self.carried.append((v, slot, stage))
        self.pending = []

    def _define(self, v: Value, name: str) -> None:
        self.local[(v.key, "node")] = name
        n = self.chains.get(v.key, 0)
        if n:
            for e in self.outstanding:
                if e["var"] == self._slot_name(v, n - 1):
                    e["var"] = None   # the value leaves its chain: nothing reads it any more
            for i in range(n - 1, 0, -1):
                if self._slot_name(v, i - 1) not in self.defined:
                    continue
                self.defined.add(self._slot_name(v, i))
                self._emit(f"{self._slot_name(v, i)} = {self._slot_name(v, i - 1)}")
                self.kinds[self._slot_name(v, i)] = self.kinds.get(self._slot_name(v, i - 1), "tensor")
                for e in self.outstanding:
                    if e["var"] == self._slot_name(v, i - 1):
                        e["var"] = self._slot_name(v, i)
            self._emit(f"{self._slot_name(v, 0)} = {name}")
            self.defined.add(self._slot_name(v, 0))
            self.kinds[self._slot_name(v, 0)] = self.kinds.get(name, "tensor")
            for e in self.outstanding:
                if e["var"] == name:
                    e["var"] = self._slot_name(v, 0)
            self.local[(v.key, "node")] = self._slot_name(v, 0)

    def _issue_load(self, node: str, m: Op, j: str) -> None:
        ring = self.k.plan.rings[node]
        slot, phase = self._ring_slot(node, j)
        desc = self._value(m.operands[0], j, 0, m)
        coords = [self._value(u, j, 0, m) for u in m.operands[1:]]
        self._emit(f"mbarrier.wait(empty_{node}.index({slot}), {phase} ^ 1)")
        self._emit(f"mbarrier.expect(ready_{node}.index({slot}), {ring.nbytes})")
        self._emit(f"tma.async_copy_global_to_shared({desc}, [{', '.join(coords)}], "
                  f"ready_{node}.index({slot}), ring_{node}.index({slot}))  # twill: {node} j={j}")

    def _issue_mma(self, node: str, m: Op, j: str) -> None:
        a, b = (self._value(u, j, 0, m) for u in m.operands[:2])
        if len(m.operands) > 2:
            acc = self._value(m.operands[2], j, 0, m, complete=False)
        else:
            raise CodegenError(f"{self.k.where(m)} without an accumulator operand is not lowered")
        # which ring slots this wgmma reads, to release them once it is complete
        releases = []
        for u in m.operands[:2]:
            for src, _d in self._sources(u, 0) + self._ring_reads(u):
                ring_node = self.k.node_of.get(id(src.owner))
                if ring_node in self.k.plan.rings and self._last_reader(ring_node, m):
                    releases.append(ring_node)
        if any(e["read"] and self._read_before(e, node) for e in self.outstanding):
            # a wgmma in flight whose result this partition reads before it needs this one's: complete it
            # now, or reading it would wait for this one too (ensure_complete waits for all)
            self._wait_through(len(self.outstanding) - 1)
        turn = self.k.plan.turns.get(node)
        self.cur_stage, self.cur_j = self._stage(node), j
        if turn is not None:
            self._turn_wait(turn)
        name = self._fresh(py_name(m.results[0]))
        zero = is_zero_constant(m.operands[2], self.k)
        flag = ", use_acc=False" if zero else ""
        self._emit(f"{name} = warpgroup_mma({a}, {b}, {acc}{flag}, is_async=True)  # twill: {node} j={j}")
        self.kinds[name] = "token"
        self.tc_log.append(node)
        if turn is not None:
            self._turn_arrive(turn)
        # at most one wgmma in flight behind the newest; those whose result is read in registers are left
        # to the full wait before that read (a partial wait that names them makes ptxas serialize)
        older = [i for i, e in enumerate(self.outstanding) if not e["read"]]
        self.outstanding.append({"node": node, "var": name, "releases": list(dict.fromkeys(releases)),
                                 "age": self._stage(node), "read": self._read_in_registers(m)})
        self._define(m.results[0], name)
        if older:
            self._wait_through(older[-1], keep=self.outstanding[-1]["var"])
        self._staged_write(m.results[0], name, j)

    def _first_read(self, node: str, shift: int) -> tuple[int, int] | None:
        """(trips from now, trip-order position) of the first read in registers of ``node``'s result by an op
        of this partition, for the iteration issued ``shift`` trips ago (chained accumulations excluded)."""
        reads = []
        for e in self.k.lowering.graph.out_edges(node):
            if e.carrier != "register" or e.dst not in self.mine or e.inplace:
                continue
            trips = -shift + e.distance + self._stage(e.dst) - self._stage(node)
            reads.append((trips, self.p.order.index(e.dst)))
        return min(reads) if reads else None

    def _read_before(self, entry: dict[str, Any], node: str) -> bool:
        """The in-flight wgmma ``entry`` is read before the first read of ``node``'s (about to be issued)."""
        mine = self._first_read(node, 0)
        theirs = self._first_read(entry["node"], entry["age"] - self._stage(entry["node"]))
        if theirs is None:
            return False
        return mine is None or theirs < mine

    def _read_in_registers(self, mma: Op) -> bool:
        """Whether the loop reads ``mma``'s result with anything but a wgmma accumulating into it."""
        todo, seen = [mma.results[0]], set()
        while todo:
            v = todo.pop()
            if v.key in seen:
                continue
            seen.add(v.key)
            for u in self.k.users(v):
                if not self.k.in_loop(u) or u is self.k.loop:
                    continue
                if u.name == "scf.yield":
                    todo += [self.k.loop.body.args[i + 1] for i, w in enumerate(u.operands) if w is v]
                elif u.name in MMAS and len(u.operands) > 2 and u.operands[2] is v \
                        and v not in u.operands[:2]:
                    continue
                else:
                    return True
        return False

    def _ring_reads(self, v: Value) -> list[tuple[Value, int]]:
        op = v.owner
        if op is None or not self.k.in_loop(op):
            return []
        if op.name == "ttg.local_alloc" and op.operands and op.operands[0].owner is not None \
                and op.operands[0].owner.name in LOADS:
            return [(op.operands[0], 0)]
        if id(op) in self.k.node_of:
            return []   # another graph op's value: not a shared-memory operand of this wgmma
        out = []
        for u in op.operands:
            out += self._ring_reads(u)
        return out

    def _last_reader(self, ring_node: str, mma: Op) -> bool:
        """``mma`` is the last op of this partition (in trip order) that reads the ring of ``ring_node``."""
        readers = [e.dst for e in self.k.lowering.graph.out_edges(ring_node) if e.dst in self.mine]
        last = max(readers, key=lambda n: (self._stage(n), self.p.order.index(n)))
        return last == self.k.node_of[id(mma)]

    # ------------------------------------------------------------------ turns (cross-partition TC order)
    def _exists(self, d: int) -> bool | str:
        """Whether iteration ``j + d`` exists, for the op being emitted (iteration ``j``, stage ``s``): a
        constant where the trip's region decides it (the loop runs at least ``S - 1`` iterations), else the
        runtime test."""
        S, s = self.p.stages, self.cur_stage
        region, t = self.region
        j = self.cur_j
        if region == "pro":
            jd = t - s + d
            if jd < 0:
                return False
            return True if jd < S - 1 else f"({jd} < n_iter)"
        if region == "steady":
            low = True if S - 1 + t - s + d >= 0 else f"(({j}) + {d} >= 0)"
            high = True if d <= s else f"(({j}) + {d} < n_iter)"
        else:
            if t - s + d >= 0:
                return False
            return True if S - 1 + t - s + d >= 0 else f"(({j}) + {d} >= 0)"
        return all_of([low, high])

    def _nearest_is(self, chain: tuple[tuple[str, int, int], ...], want: Any) -> bool | str:
        """Condition that the nearest existing neighbour in ``chain`` is on a partition ``want(part)``."""
        terms: list[bool | str] = []
        missing: list[bool | str] = []
        for _op, d, part in chain:
            ex = self._exists(d)
            if want(part):
                terms.append(all_of([ex] + [negate(m) for m in missing]))
            missing.append(ex)
            if ex is True:
                break
        return any_of(terms)

    def _turn_wait(self, turn: Any) -> None:
        cond = self._nearest_is(turn.pred, lambda part: part != self.p.position)
        if cond is False:
            return
        self.uses_turn = True
        self._emit(f"mbarrier.wait(turn.index({self.p.position}), tphase, pred={cond})")
        self._emit("tphase = tphase ^ 1" if cond is True else f"tphase = tphase ^ ({cond}).to(gl.int32)")

    def _turn_arrive(self, turn: Any) -> None:
        for target in sorted({part for _, _, part in turn.succ if part != self.p.position}):
            cond = self._nearest_is(turn.succ, lambda part, target=target: part == target)
            if cond is False:
                continue
            self.uses_turn = True
            self._emit(f"mbarrier.arrive(turn.index({target}), pred={cond})")

    # ------------------------------------------------------------------ trips
    def define_carried(self) -> None:
        """Give every loop-carried slot a value before the loop (Triton carries only variables defined before
        it). A slot the prologue has not reached yet is read only after the loop has written it (the
        schedule makes every value before it is read), so it starts as a copy of the newer slot, or as zeros
        of its type when the value has not been made at all yet; that start value is never read."""
        values = {v.key: v for v, _r, _d in self._reads()}
        for key, n in self.chains.items():
            if not n or key not in values:
                continue
            v = values[key]
            for i in range(n):
                name = self._slot_name(v, i)
                if name in self.defined:
                    continue
                if i and self._slot_name(v, i - 1) in self.defined:
                    self._emit(f"{name} = {self._slot_name(v, i - 1)}  # start value, never read")
                    self.kinds[name] = self.kinds.get(self._slot_name(v, i - 1), "tensor")
                else:
                    t = v.type
                    self._emit(f"{name} = gl.full({list(t.shape)}, 0, {dtype_of(t.element, v.name)}, "
                              f"{self._layout(v)})  # start value, never read")
                    self.kinds[name] = "tensor"
                self.defined.add(name)

    def _snapshot(self) -> dict[str, Any]:
        import copy
        return {"kinds": dict(self.kinds), "outstanding": copy.deepcopy(self.outstanding),
                "defined": set(self.defined), "trip_expr": self.trip_expr,
                "region": getattr(self, "region", None),
                "counter": self.counter, "out": len(self.out), "uses_turn": self.uses_turn,
                "tc_log": list(self.tc_log), "pre": len(self.pre)}

    def _restore(self, snap: dict[str, Any]) -> None:
        self.kinds = snap["kinds"]
        self.defined = snap["defined"]
        self.trip_expr = snap["trip_expr"]
        self.region = snap["region"]
        self.outstanding = snap["outstanding"]
        self.counter = snap["counter"]
        self.out = self.out[:snap["out"]]
        self.uses_turn = snap["uses_turn"]
        self.tc_log = snap["tc_log"]

    def _trip(self, ops: list[str], t: str) -> None:
        self.trip_expr = t
        for e in self.outstanding:
            e["age"] += 1
        self.local = {}
        self.waited = set()
        self.ran: set[int] = set()
        self.pending = []
        first = t == "0" and self.invariant_issue
        for node in self.p.order:
            if node not in ops:
                continue
            # a pointer load's hand-off store waits for its registers: it is placed when the schedule's
            # latency says they are there, so the partition's later loads of this trip issue before it
            # (keeping several loads in flight); never after code that waits on a barrier
            if not self.ahead:
                self._flush_writes(self.k.plan.offset[node] if self._waits_on_nothing(node) else None)
            if first:
                self._issue_invariant(self.k.schedule.slots[node].start)
            self._run_node(node, f"({t}) - {self._stage(node)}" if self._stage(node) else t)
        if self.ahead:
            self._carry_writes()
        self._flush_writes(None)
        if first:
            self._issue_invariant(None)

    def _issue_invariant(self, before: int | None) -> None:
        """Issue the loop-invariant TMA loads needed (by iteration 0's schedule) before ``before``."""
        while self.invariant_issue and (before is None or self.invariant_issue[0][0] < before):
            _need, info = self.invariant_issue.pop(0)
            load, idx = info["load"], info["index"]
            desc = self.k.args[load.operands[0].key]
            coords = [self._outer_value(u) for u in load.operands[1:]]
            self._emit(f"mbarrier.expect(inv_bar.index({idx}), {load.results[0].type.nbytes})")
            self._emit(f"tma.async_copy_global_to_shared({desc}, [{', '.join(coords)}], "
                       f"inv_bar.index({idx}), inv{idx})")

    def body(self) -> list[str]:
        """The partition function's source lines."""
        S = self.p.stages
        self.ahead = self._runs_ahead()
        lb, ub, step = (self._outer_value(self.k.loop.operands[i]) for i in range(3))
        self.pre.append(f"    n_iter = gl.cdiv({ub} - {lb}, {step})")
        # chains of loop-carried values start at their initial values
        for i, y in enumerate(self.k.yield_op.operands):
            if self._owner_part(y) != self.p.position or not self.chains.get(y.key):
                continue
            init = self._outer_value(self.k.loop.operands[3 + i])
            for c in range(self.chains[y.key]):
                self.pre.append(f"    {self._slot_name(y, c)} = {init}")
                self.defined.add(self._slot_name(y, c))
                self.kinds[self._slot_name(y, c)] = "tensor"
        self.tag = "p"
        for t in range(S - 1):
            self.region = ("pro", t)
            self._emit(f"# prologue trip {t}")
            self._trip([n for n in self.p.order if self._stage(n) <= t], str(t))
        self.define_carried()
        peeled = 0
        if (self.invariant_issue or self.ahead) and S == 1:
            # the loop-invariant loads go into iteration 0's trip at their place, and loads issued ahead
            # start their carried registers there: write that trip out
            self.tag = "f0"
            self.region = ("pro", 0)
            self._emit("# first trip, written out: " + ("the loop-invariant loads are issued in it"
                                                        if self.invariant_issue else
                                                        "its loads start the ones carried to the next trip"))
            self._trip(list(self.p.order), "0")
            peeled = 1
        adopted = False
        entry_kinds = dict(self.kinds)
        while True:
            snap = self._snapshot()
            entry_out = [(e["node"], e["var"], e["age"]) for e in self.outstanding]
            head = len(self.out)
            self.tag = "s"
            self.ind += 1
            self.region = ("steady", peeled)
            self._trip(list(self.p.order), "t")
            self.ind -= 1
            end_out = [(e["node"], e["var"], e["age"]) for e in self.outstanding]
            if end_out == entry_out:
                break
            if adopted:
                raise CodegenError(f"partition {self.p.position}: the wgmmas in flight at the end of a "
                                   f"steady trip ({end_out}) differ from those at its start ({entry_out}); "
                                   "the steady state is not periodic")
            # The first steady trip has fewer wgmmas in flight than the others (those of iterations before
            # the first): emit the loop for the steady pattern; waits on fewer wgmmas return at once, and the
            # slot releases of iterations that do not exist are predicated off (_release).
            final = [dict(e) for e in self.outstanding]
            self._restore(snap)
            self.out = self.out[:head]
            # wgmmas the prologue leaves in flight that the steady pattern has completed at the loop's top:
            # wait for them before the loop (in order, so through the newest of them)
            pattern = {(e["node"], e["age"]) for e in final}
            extra = [i for i, e in enumerate(self.outstanding) if (e["node"], e["age"]) not in pattern]
            if extra:
                self._wait_through(extra[-1], keep=self.outstanding[-1]["var"] if
                                  extra[-1] + 1 < len(self.outstanding) else None)
            head = len(self.out)
            entry_kinds = dict(self.kinds)
            keep = {(e["node"], e["var"], e["age"]) for e in self.outstanding}
            for e in final:
                if (e["node"], e["var"], e["age"]) not in keep and e["var"] is not None:
                    self.kinds[e["var"]] = "token"
            self.outstanding = final
            adopted = True
        if adopted:
            self.notes.append(f"partition {self.p.position}: the loop's first steady trip waits on fewer "
                              "wgmmas than the others (the steady pattern is emitted; the ring releases of "
                              "iterations before the first are predicated off)")
        fix = []
        for name, kind in self.kinds.items():
            if kind == "token" and entry_kinds.get(name) == "tensor" and re.search(r"_c\d+$", name):
                fix.append(f"    {'    ' * (self.ind - 1)}{name} = warpgroup_mma_init({name})")
        loop_lines = self.out[head:]
        self.out = self.out[:head]
        self.out += fix
        if self.uses_turn and "    tphase = gl.to_tensor(0)" not in self.pre:
            self.pre.append("    tphase = gl.to_tensor(0)")
        if loop_lines:   # (a warp group without ops has nothing to run)
            self._emit(f"for t in range({S - 1 + peeled}, n_iter):")
            self.out += loop_lines
        self.tag = "e"
        for e in range(S - 1):
            self.region = ("epi", e)
            self._emit(f"# epilogue trip {e}")
            self._trip([n for n in self.p.order if self._stage(n) >= e + 1], f"n_iter + {e}")
        if self.uses_turn and "    tphase = gl.to_tensor(0)" not in self.pre:
            self.pre.append("    tphase = gl.to_tensor(0)")
        self.trip_expr = f"n_iter + {S - 1}"
        self.region = ("after", 0)
        if self.ahead:
            self._carry_writes()   # the last trip's loads
        for e in self.outstanding:
            e["age"] += 1
        self._after_loop()
        if self.outstanding:
            self._wait_through(len(self.outstanding) - 1)
        return self.pre + self.out

    # ------------------------------------------------------------------ after the loop
    def epilogue_stores(self) -> list[Op]:
        """The kernel epilogue's stores (``tt.descriptor_store``, ``tt.store`` after the loop)."""
        return [op for op in self.k.func.body.ops
                if self.k.body_index.get(id(op)) is None and op is not self.k.loop
                and op.name in ("tt.descriptor_store", "tt.store") and not self.k.in_loop(op)]

    def store_owner(self, op: Op) -> int | None:
        """The partition that computes and issues the epilogue store ``op``: :meth:`_after_owner` of the
        stored value (the other operands, addresses and masks, are read the same way)."""
        return self._after_owner(op.operands[1])

    def _after_loop(self) -> None:
        self.local = {}
        self._hand_results()
        for op in self.epilogue_stores():
            data = op.operands[1]
            owner = self.store_owner(op)
            if owner != self.p.position:
                continue
            if op.name == "tt.store":
                self._pointer_store(op)
                continue
            value = self._after_value(data)
            desc = self._outer_value(op.operands[0])
            coords = [self._outer_value(u) for u in op.operands[2:]]
            shape, elem = self.k.desc_params[desc]
            reuse = self._reusable(shape, elem)
            ring = None if reuse else self._dead_ring(shape, elem)
            if ring:
                buf = self._fresh("obuf")
                self._emit(f"{buf} = {ring}._reinterpret({dtype_of(elem, 'the store')}, {list(shape)}, "
                           f"{desc}.layout)   # the ring's readers are done: its bytes stage the store")
                self._emit(f"{buf}.store({value})")
            elif reuse:
                self._emit(f"{reuse}.store({value})")
                buf = reuse
            else:
                buf = self._fresh("obuf")
                self._emit(f"{buf} = gl.allocate_shared_memory({dtype_of(elem, 'the store')}, {list(shape)}, "
                          f"{desc}.layout, {value})")
                self.k.buffers.append({"name": buf, "bytes": tile_bytes(shape, elem), "what": "store staging",
                                       "partition": self.p.position})
            self._emit("fence_async_shared()")
            self._emit(f"tma.async_copy_shared_to_global({desc}, [{', '.join(coords)}], {buf})")
            self._emit("tma.store_wait(0)")

    def _pointer_store(self, op: Op) -> None:
        """``gl.store(pointers, value[, mask])`` of a kernel epilogue (TTGIR ``tt.store %ptr, %value[,
        %mask]``), by the partition that owns the stored loop result."""
        self._plain_access(op)
        args = [self._after_value(u) for u in op.operands]
        mask = f", mask={args[2]}" if len(args) > 2 else ""
        self._emit(f"gl.store({args[0]}, {args[1]}{mask})")

    def _reusable(self, shape: tuple[int, ...], elem: str) -> str | None:
        """A loop-invariant TMA buffer with the same block that is dead after the loop: this partition read
        it, or each graph op of another partition that read it (a wgmma) is known complete here: its
        partition has handed this one a loop result that it has waited on in this epilogue (a partition
        hands its results after all its wgmmas are complete: :meth:`_hand_results`), or the op reaches,
        through same-iteration register edges, a value staged to this partition (the staged write waits for
        its value, which waited for the op's; this partition has read the last iteration's before the loop
        ends, and a partition's wgmmas complete in issue order)."""
        waited = {h["from"] for i, h in self.k.after_handoff.items()
                  if (self.k.yield_op.operands[i].key, "handed") in self.local}
        staged = {st["node"] for st in self.k.staging.values() if self.p.position in st["readers"]}
        for key, info in self.k.invariant.items():
            if info.get("reused"):
                continue
            load = info["load"]
            lshape, lelem = descriptor_block(load.operands[0].type.text)
            if lshape != shape or lelem != elem:
                continue
            if key in self.outer and self.outer[key].startswith("inv"):
                info["reused"] = True
                return self.outer[key]
            readers = [n for n in self.k.schedule.slots
                       if any(key in {u.key for u in m.operands} for m in self.k.lowering.members[n])]
            if readers and all(self.k.plan.part(n, self.k.schedule) in waited
                               or self._reaches_by_registers(n, staged) for n in readers):
                info["reused"] = True
                return f"inv{info['index']}"
        return None

    def _dead_ring(self, shape: tuple[int, ...], elem: str) -> str | None:
        """A TMA ring of at least the tile's bytes that is dead after the loop, for an epilogue store with no
        dead loop-invariant buffer (:meth:`_reusable`): every partition reading it is this one (whose
        wgmmas are all retired when its loop ends) or one that has handed this one a loop result it has
        waited on (a partition hands its results after all its wgmmas are complete). Its loads are all
        landed then: the producer loads only iterations that exist, and each is read after its ready
        barrier. The kernel's shared memory is then the steady state's, the model's (docs/gluon.md);
        the smallest such ring is taken, each ring by one store (of one partition) only."""
        waited = {h["from"] for i, h in self.k.after_handoff.items()
                  if (self.k.yield_op.operands[i].key, "handed") in self.local}
        need = tile_bytes(shape, elem)
        fits = [(ring.depth * ring.nbytes, node) for node, ring in self.k.plan.rings.items()
                if node not in self.k.ring_reused and ring.depth * ring.nbytes >= need and ring.readers
                and all(r == self.p.position or r in waited for r in ring.readers)]
        if not fits:
            return None
        node = min(fits)[1]
        self.k.ring_reused.add(node)
        return f"ring_{node}"

    def _reaches_by_registers(self, src: str, targets: set[str]) -> bool:
        """Whether graph op ``src`` reaches one of ``targets`` through same-iteration register edges."""
        todo, seen = [src], set()
        while todo:
            n = todo.pop()
            if n in targets:
                return True
            if n in seen:
                continue
            seen.add(n)
            todo += [e.dst for e in self.k.lowering.graph.out_edges(n)
                     if e.distance == 0 and e.carrier == "register"]
        return False

    def _after_owner(self, v: Value) -> int | None:
        """The partition that computes ``v`` after the loop: of the partitions owning the loop results it
        reads (:meth:`after_sources`), the one whose results take the most bytes (ties: the lower position),
        so the fewest bytes are handed over (:meth:`_hand_results`); None when it reads none."""
        weight: dict[int, int] = {}
        for i, part in self.after_sources(v).items():
            weight[part] = weight.get(part, 0) + self.k.yield_op.operands[i].type.nbytes
        return min(weight, key=lambda part: (-weight[part], part)) if weight else None

    def after_sources(self, v: Value, registers: bool = False) -> dict[int, int]:
        """The loop results (yield index -> owning partition) that ``v``, a value after the loop, is computed
        from; ``registers``: only those it reads in registers (not through a target's own after-loop path,
        :meth:`_after_stop`), the ones a hand-off carries."""
        op = v.owner
        if op is None or (registers and self._after_stop(op)):
            return {}
        if op is self.k.loop:
            part = self._owner_part(self.k.yield_op.operands[v.index])
            return {} if part is None else {v.index: part}
        out: dict[int, int] = {}
        for u in op.operands:
            out.update(self.after_sources(u, registers))
        return out

    def _after_stop(self, op: Op) -> bool:
        """Whether ``op`` after the loop reads loop results other than in registers (a target hook)."""
        return False

    def _hand_results(self) -> None:
        """Hand this partition's final loop results that another partition's epilogue reads
        (``k.after_handoff``): every wgmma complete, the value stored into its shared-memory buffer, fenced,
        and its barrier arrived on (once: the loop has ended)."""
        mine = [(i, h) for i, h in sorted(self.k.after_handoff.items()) if h["from"] == self.p.position]
        if mine and self.outstanding:
            self._wait_through(len(self.outstanding) - 1)
        for i, h in mine:
            value = self._chain_read(self.k.yield_op.operands[i], 0, None)
            self._emit(f"ahand_{h['id']}.index(0).store({value})")
            self._emit("fence_async_shared()")
            self._emit(f"mbarrier.arrive(abar.index({h['id']}))")

    def _handed_result(self, i: int) -> str:
        """Loop result ``i`` of another partition, read after the loop from its hand-off buffer."""
        h = self.k.after_handoff.get(i)
        y = self.k.yield_op.operands[i]
        if h is None or self.p.position not in h["to"]:
            raise CodegenError(f"partition {self.p.position}: the loop result {y.name} of partition "
                               f"{self._owner_part(y)} is read after the loop without a hand-off "
                               "(generator inconsistency)")
        key = (y.key, "handed")
        if key not in self.local:
            name = self._fresh(f"{py_name(y)}_fin")
            self._emit(f"mbarrier.wait(abar.index({h['id']}), 0)")
            self._emit(f"{name} = ahand_{h['id']}.index(0).load({self._layout(y)})")
            self.kinds[name] = "tensor"
            self.local[key] = name
        return self.local[key]

    def _after_value(self, v: Value) -> str:
        op = v.owner
        if op is None:
            return self._outer_value(v)
        if op is self.k.loop:
            y = self.k.yield_op.operands[v.index]
            if self._owner_part(y) not in (None, self.p.position):
                return self._handed_result(v.index)
            return self._chain_read(y, 0, None)
        if self._after_owner(v) is None:
            return self._outer_value(v)
        key = (v.key, "after")
        if key in self.local:
            return self.local[key]
        if op.name == "ttg.convert_layout" and all(u.name == "tt.descriptor_store" for u in self.k.users(v)):
            # the TMA store goes through shared memory, where the register layout does not matter
            return self._after_value(op.operands[0])
        args = self._operand_args(op, self._after_value)
        expr = self._pure(op, args, v, 0)
        name = self._fresh(py_name(v))
        self._emit(f"{name} = {expr}")
        self.local[key] = name
        return name


