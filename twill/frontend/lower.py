"""Lower the main loop of a TTGIR module to a :class:`twill.Graph`.

The loop body becomes tile-level ops the way the paper draws them (§3.1, §5): folded layout and
address ops disappear, elementwise chains become one op, GEMMs, loads, reductions and memory copies
stay separate, and every op gets its reservation table, latency and footprint from the
:class:`~twill.ir.costmodel.CostModel` of the target machine. ``docs/frontend.md`` lists every rule.

    >>> g = graph_from_kernel("examples/flash_attention_fwd.py", "h100")
    >>> sorted(op.kind for op in g.ops if op.kind == "gemm")
    ['gemm', 'gemm']
"""

from __future__ import annotations

import os
import re
import warnings
from dataclasses import dataclass, field
from typing import Any

from twill.errors import FrontendError, TwillWarning
from twill.frontend.loopbody import LoopBody, Source
from twill.frontend.naming import assign_names, variable_name
from twill.frontend.rules import (
    GEMM_OPS,
    LoweringContext,
    branch_cost,
    elementwise_cost,
    mask_operand,
    op_cost,
)
from twill.frontend.ttgir import Op, TTGIRModule, Value, parse_ttgir
from twill.ir.costmodel import CostModel, OpCost
from twill.ir.graph import Dependence, Graph
from twill.ir.machine import Machine, load_machine

__all__ = ["Lowering", "find_loop", "graph_from_kernel", "graph_from_ttgir", "lower_loop"]

_CARRIER_PRIORITY = ("register", "tmem", "smem", "none")
_WRITES_OPERAND = {"ttng.tc_gen5_mma": 2, "ttng.tmem_store": 0, "ttg.local_store": 0}
_MMA_NAMES = {"ttng.warp_group_dot": "wgmma", "ttng.tc_gen5_mma": "tcgen05.mma", "tt.dot": "mma.sync"}


@dataclass
class NodeSpec:
    """A graph op before it is added: its TTGIR ops, cost, outputs and footprints."""

    primary: Op
    members: list[Op]
    cost: OpCost
    outputs: list[Value]
    kind: str
    smem: int = 0
    name: str = ""
    attrs: dict[str, str] = field(default_factory=dict)
    hint: str = ""


@dataclass
class Lowering:
    """The result of lowering one loop, with the bookkeeping behind the graph.

    Attributes
    ----------
    graph : Graph
        The dependence graph.
    module : TTGIRModule
        The parsed TTGIR.
    loop : Op
        The ``scf.for`` that was lowered.
    members : dict of str to list of Op
        TTGIR ops merged into each graph op.
    folded : list of Op
        Loop-body ops folded away (layout, addressing, scalar bookkeeping).
    if_converted : list of Op
        ``scf.if`` ops that were if-converted.
    """

    graph: Graph
    module: TTGIRModule
    loop: Op
    members: dict[str, list[Op]]
    folded: list[Op]
    if_converted: list[Op]


def find_loop(module: TTGIRModule, loop_index: int | None = None) -> Op:
    """The ``scf.for`` to schedule: the only loop, or ``loop_index`` among sibling loops (pre-order).

    Raises
    ------
    FrontendError
        No ``scf.for``; nested loops (the message names both lines); several loops and no
        ``loop_index``; ``loop_index`` out of range.
    """
    loops = module.find("scf.for")
    if not loops:
        whiles = module.find("scf.while")
        extra = f"; found scf.while at TTGIR line {whiles[0].line}, which is not supported" if whiles else ""
        raise FrontendError(f"no scf.for loop in {module.source}{extra}")
    if loop_index is not None:
        if not 0 <= loop_index < len(loops):
            raise FrontendError(f"loop_index={loop_index} but {module.source} has {len(loops)} scf.for "
                                f"loop(s), at TTGIR lines {', '.join(str(lp.line) for lp in loops)}")
        candidates = [loops[loop_index]]
    else:
        candidates = loops
    for loop in candidates:
        inner = next((op for op in loop.walk() if op is not loop and op.name in ("scf.for", "scf.while")),
                     None)
        if inner is not None:
            raise FrontendError(f"nested loops: {inner.name} at TTGIR line {inner.line} inside scf.for at "
                                f"TTGIR line {loop.line}; twill schedules singly nested loops only",
                                line=loop.line, location=str(loop.loc) or None)
    if len(candidates) > 1:
        raise FrontendError(f"{len(loops)} sibling scf.for loops, at TTGIR lines "
                            f"{', '.join(str(lp.line) for lp in loops)} in {module.source}; pass "
                            f"loop_index (twill schedule --loop N) to pick one")
    return candidates[0]


def _check_target(module: TTGIRModule, machine: Machine) -> None:
    target = re.fullmatch(r"cuda:(\d+)", module.target)
    arch = re.search(r"sm_(\d+)", machine.arch)
    if target and arch and int(target.group(1)) // 10 != int(arch.group(1)) // 10:
        raise FrontendError(f"the TTGIR targets {module.target} but machine {machine.name!r} is "
                            f"{machine.arch}; compile the kernel for the machine's architecture")


def _merged_kind(parts: list[OpCost]) -> str:
    kinds = {p.kind for p in parts}
    for kind in ("exp", "mufu"):
        if kind in kinds:
            return kind
    return "convert" if kinds == {"convert"} else "alu"


def _leaves(body: LoopBody, value: Value, primary: Op) -> bool:
    return any(isinstance(c, str) or body.find(c) is not primary for c in body.consumers(value))


def _group_specs(body: LoopBody, group: list[Op], ctx: LoweringContext) -> list[NodeSpec]:
    primary = body.find(group[0])
    outputs = [v for m in group for v in m.results if _leaves(body, v, primary)]
    if body.role[primary] == "branch":
        cost = branch_cost(primary, ctx, body.role)
        return [NodeSpec(primary, group, cost, outputs, cost.kind)]
    if body.role[primary] == "elementwise":
        parts = [elementwise_cost(m, ctx) for m in group]
        cost = parts[0] if len(parts) == 1 else ctx.costs.merge(_merged_kind(parts), parts)
        return [NodeSpec(primary, group, cost, outputs, cost.kind)]
    cost = op_cost(primary, ctx)
    spec = NodeSpec(primary, group, cost, outputs, cost.kind)
    if primary.name != "tt.descriptor_load" or primary.results[0] not in outputs:
        return [spec]
    staged = primary.results[0]
    spec.outputs = [v for v in outputs if v is not staged]
    spec.smem = staged.type.nbytes
    read = ctx.costs.smem_copy(staged.type.nbytes, kind="local_load", warps=ctx.warps(staged.type.rows))
    return [spec, NodeSpec(primary, [], read, [staged], "local_load")]


def _name_hints(body: LoopBody, specs: list[NodeSpec]) -> None:
    """Set ``hint`` of each op without a variable name: the variable of the value it takes, found
    through other unnamed producers of the same iteration (``dq`` for the atomic adding ``dq``)."""
    by_primary: dict[Op, list[NodeSpec]] = {}
    for spec in specs:
        by_primary.setdefault(spec.primary, []).append(spec)

    def hint(spec: NodeSpec, seen: frozenset[int]) -> str:
        own = variable_name(spec)
        if own or id(spec) in seen:
            return own
        for member in spec.members:
            for _, value in body.inputs(member):
                if value.type.kind == "token":
                    continue
                for src in sorted(body.sources(value), key=lambda s: body.index[s.op]):
                    found = hint(_producer(src, by_primary), seen | {id(spec)}) if src.distance == 0 else ""
                    if found:
                        return found
        return ""

    for spec in specs:
        if not variable_name(spec):
            spec.hint = hint(spec, frozenset())


def _footprints(spec: NodeSpec, costs: CostModel, per_iteration: dict[int, Value],
                body: LoopBody) -> dict[str, int]:
    reg_bytes = sum(v.type.nbytes for v in spec.outputs if v.type.kind in ("tensor", "scalar"))
    smem = spec.smem + sum(v.type.nbytes for v in spec.outputs
                           if v.type.kind == "memdesc" and v.type.space == "smem")
    tmem = sum(v.type.tmem_columns() for v in spec.outputs)
    buffers = {body.buffer_root(w).key for m in spec.members if (w := body.tmem_written(m)) is not None}
    tmem += sum(per_iteration[key].type.tmem_columns() for key in buffers if key in per_iteration)
    result = sum(v.type.nbytes for v in spec.outputs if v.type.kind != "token")
    written = _WRITES_OPERAND.get(spec.primary.name)
    if not result and written is not None and spec.members:
        result = spec.primary.operands[written].type.nbytes
    return {"regs": costs.regs_for(reg_bytes, spec.cost.warps), "smem": smem, "tmem": tmem,
            "result_bytes": result}


def _attrs(spec: NodeSpec, body: LoopBody) -> dict[str, str]:
    ops = spec.members or [spec.primary]
    attrs = {"ttgir": "; ".join(f"{m.name}@{m.line}" for m in ops)}
    if not spec.members:
        attrs["ttgir"] = f"shared-memory read of {spec.primary.name}@{spec.primary.line}"
    main = next((v for v in spec.outputs if v.type.kind != "token"), None)
    if main is not None:
        attrs["shape"] = "x".join(str(d) for d in main.type.shape) + f"x{main.type.element} {main.type.space}"
    for key in ("loop.stage", "loop.cluster"):
        values = sorted({str(m.attrs[key]) for m in ops if key in m.attrs})
        if values:
            attrs[key] = ",".join(values)
    if spec.primary.name in _MMA_NAMES:
        attrs["mma"] = _MMA_NAMES[spec.primary.name]
    ifs = [i for i in body.if_converted if any(i is m or i in m.ancestors() for m in ops)]
    if ifs:
        attrs["if_converted"] = ", ".join(f"scf.if@{i.line}" for i in ifs)
    masked = [(m, mask) for m in ops if (mask := mask_operand(m)) is not None]
    if masked:
        attrs["predicated"] = ", ".join(f"{m.name}@{m.line} mask {'x'.join(map(str, mask.type.shape))}"
                                        for m, mask in masked)
    return attrs


def _carrier(value: Value) -> str:
    kind = value.type.kind
    if kind == "memdesc":
        return value.type.space
    if kind == "token":
        owner = value.owner.name if value.owner is not None else ""
        return "tmem" if owner.startswith("ttng.tmem") or owner == "ttng.tc_gen5_mma" else "none"
    return "register"


class _EdgeSet:
    """Dependences keyed by (src, dst, distance); duplicates merge.

    A merged edge is blocking if any of its parts is, in place only if all are, and its carrier is the
    first of register, tmem, smem, none among its parts.
    """

    def __init__(self) -> None:
        self.edges: dict[tuple[str, str, int], dict[str, Any]] = {}

    def add(self, src: str, dst: str, distance: int, *, blocking: bool, carrier: str, source: str,
            inplace: bool = False, latency: int | None = None) -> None:
        key = (src, dst, distance)
        old = self.edges.get(key)
        if old is None:
            self.edges[key] = {"blocking": blocking, "carrier": carrier, "source": source,
                               "inplace": inplace, "latency": latency}
            return
        old["blocking"] = old["blocking"] or blocking
        old["inplace"] = old["inplace"] and inplace
        # the producer's full latency (None) unless every part is a shorter chained-accumulation edge
        old["latency"] = None if old["latency"] is None or latency is None else max(old["latency"], latency)
        if _CARRIER_PRIORITY.index(carrier) < _CARRIER_PRIORITY.index(old["carrier"]):
            old["carrier"] = carrier

    def add_to(self, graph: Graph) -> None:
        """Add every edge to ``graph`` (``inplace`` only where :class:`Dependence` has that field)."""
        with_inplace = "inplace" in getattr(Dependence, "__dataclass_fields__", {})
        for (src, dst, distance), info in self.edges.items():
            kwargs = info if with_inplace else {k: v for k, v in info.items() if k != "inplace"}
            graph.add_edge(src, dst, distance=distance, **kwargs)


def _chained_latency(producer: NodeSpec) -> int:
    """``d`` of an edge from a GEMM to the next GEMM accumulating into the same accumulator: the cycles the
    first holds the Tensor Cores. MMAs on one accumulator are issued back to back and applied in order
    (PTX ISA: accumulator accesses across wgmma.mma_async of the same shape need no wgmma.fence, their
    order is kept by default; tcgen05.mma operations of one thread execute in issue order), so the second
    waits for the first's throughput time, not for its result to be readable (``tc_latency`` more), which
    only the accumulator's readers wait for."""
    busy = [r.start + r.cycles for r in producer.cost.rrt if r.unit == "tc"]
    return max(busy) if busy else producer.cost.latency


def _producer(source: Source, by_primary: dict[Op, list[NodeSpec]]) -> NodeSpec:
    specs = by_primary[source.op]
    return next((s for s in specs if source.value in s.outputs), specs[0])


def _data_edges(body: LoopBody, specs: list[NodeSpec], edges: _EdgeSet) -> None:
    by_primary: dict[Op, list[NodeSpec]] = {}
    for spec in specs:
        by_primary.setdefault(spec.primary, []).append(spec)
    for spec in specs:
        if not spec.members:
            tma = by_primary[spec.primary][0]
            edges.add(tma.name, spec.name, 0, blocking=tma.cost.blocking_result, carrier="smem",
                      source=str(spec.primary.loc) or f"TTGIR line {spec.primary.line}")
            continue
        for member in spec.members:
            accumulators = body.accumulator_operands(member)
            where = str(member.loc) or f"TTGIR line {member.line}"
            for k, value in body.inputs(member):
                # in body order: a set's order would change the graph's edge order between runs
                order = sorted(body.sources(value), key=lambda s: (body.index[s.op], s.distance, s.value.key))
                for src in order:
                    producer = _producer(src, by_primary)
                    accumulates = member.name in GEMM_OPS and k in accumulators
                    fresh = accumulates and body.overwrites_own_buffer(member)  # use_acc = false
                    if producer is spec and (src.distance == 0 or fresh):
                        continue
                    chained = accumulates and producer.kind == "gemm"
                    edges.add(producer.name, spec.name, src.distance, carrier=_carrier(src.value),
                              blocking=producer.cost.blocking_result and not chained, source=where,
                              inplace=accumulates, latency=_chained_latency(producer) if chained else None)


_Accesses = dict[int, list[tuple[NodeSpec, int]]]
"""Buffer key -> (graph op, body position) of each access."""


def _order_accesses(writers: _Accesses, readers: _Accesses, edges: _EdgeSet, carrier: str,
                    blocking: bool) -> None:
    """Order every read of a buffer after the write before it (the same iteration if the write comes first
    in the body, δ 0, else the previous one, δ 1) and before the next write (write after read).
    ``blocking`` applies to the read-after-write edges."""
    for root, written in writers.items():
        for writer, w_at in written:
            for reader, r_at in readers.get(root, []):
                if reader is writer:
                    continue
                first = 0 if w_at < r_at else 1
                where = f"TTGIR line {writer.primary.line}"
                edges.add(writer.name, reader.name, first, blocking=blocking and writer.cost.blocking_result,
                          carrier=carrier, source=where)
                edges.add(reader.name, writer.name, 1 - first, blocking=False, carrier=carrier, source=where)


def _buffer_edges(body: LoopBody, specs: list[NodeSpec], edges: _EdgeSet) -> None:
    """Order ``ttg.local_store`` writes and reads of the same mutable shared buffer (not SSA-visible)."""
    writers: _Accesses = {}
    readers: _Accesses = {}
    for spec in specs:
        for member in spec.members:
            at = body.index[member]
            if member.name == "ttg.local_store":
                writers.setdefault(body.buffer_root(member.operands[1]).key, []).append((spec, at))
            reads = [member.operands[0]] if member.name == "ttg.local_load" else (
                member.operands[:2] if member.name in GEMM_OPS else [])
            for value in reads:
                if value.type.kind == "memdesc" and value.type.space == "smem":
                    readers.setdefault(body.buffer_root(value).key, []).append((spec, at))
    _order_accesses(writers, readers, edges, "smem", blocking=False)


def _tmem_edges(body: LoopBody, specs: list[NodeSpec], edges: _EdgeSet) -> None:
    """Order a ``tmem_load`` without an async token (one half of a split load, docs/frontend.md §10)
    after the ops writing its tensor-memory buffer (blocking when the writer's result is, as an MMA's
    is) and before their next writes."""
    writers: _Accesses = {}
    readers: _Accesses = {}
    for spec in specs:
        for member in spec.members:
            at = body.index[member]
            written = body.tmem_written(member)
            if written is not None:
                writers.setdefault(body.buffer_root(written).key, []).append((spec, at))
            if member.name == "ttng.tmem_load" and not any(v.type.kind == "token" for v in member.operands):
                readers.setdefault(body.buffer_root(member.operands[0]).key, []).append((spec, at))
    _order_accesses(writers, readers, edges, "tmem", blocking=True)


def _fixed_memory(body: LoopBody, per_iteration: dict[int, Value]) -> tuple[int, int]:
    """SMEM bytes and TMEM columns of buffers allocated before the loop and used inside it, except the
    TMEM buffers whose value does not cross iterations (charged to the ops writing them)."""
    seen: set[int] = set(per_iteration)
    smem = tmem = 0
    for op in body.loop.walk():
        for value in op.operands:
            if value.type.kind != "memdesc":
                continue
            root = body.buffer_root(value)
            if root.owner is None or root.key in seen or body.loop in (root.owner, *root.owner.ancestors()):
                continue
            seen.add(root.key)
            smem += root.type.nbytes if root.type.space == "smem" else 0
            tmem += root.type.tmem_columns()
    return smem, tmem


def lower_loop(ttgir: str | os.PathLike[str] | TTGIRModule, machine: str | Machine, *,
               loop_index: int | None = None, name: str | None = None) -> Lowering:
    """Lower the main loop of ``ttgir`` for ``machine`` and return the graph with its bookkeeping.

    Parameters
    ----------
    ttgir : str, path-like or TTGIRModule
        TTGIR text, a ``.ttgir`` file, or a parsed module (use the pre-pipelining snapshot).
    machine : str or Machine
        Machine name (``"h100"``) or description; costs come from its cost model.
    loop_index : int, optional
        Which ``scf.for`` (pre-order) when the kernel has several sibling loops.
    name : str, optional
        Graph name (default: the kernel function's name).

    Raises
    ------
    FrontendError
        Unreadable or malformed TTGIR, no loop, nested loops, an ``scf.if`` with side effects, a
        TTGIR target that does not match the machine.

    Warns
    -----
    TwillWarning
        An ``scf.if`` was if-converted (it has no side effect; both branches run, the result is
        selected): the graph is not the loop as written, and the warning says which lines and ops.
    UnsupportedOpError
        A loop-body op the cost model has no rule for (the message names the op and its line).
    GraphError
        The resulting graph fails :meth:`Graph.check` (a bug in a rule).
    """
    machine = load_machine(machine)
    module = ttgir if isinstance(ttgir, TTGIRModule) else parse_ttgir(ttgir)
    _check_target(module, machine)
    _check_warps(module.num_warps, machine)
    loop = find_loop(module, loop_index)
    ctx = LoweringContext(module, CostModel(machine), module.num_warps)
    body = LoopBody(loop, ctx)
    specs = [spec for group in body.groups() for spec in _group_specs(body, group, ctx)]
    if machine.tmem_columns == 0 and any(s.cost.kind.startswith("tmem") for s in specs):
        raise FrontendError(f"the loop uses tensor memory, which machine {machine.name!r} does not have")
    _name_hints(body, specs)
    assign_names(specs)
    per_iteration = body.per_iteration_tmem()
    fixed_smem, fixed_tmem = _fixed_memory(body, per_iteration)
    graph = Graph(name or module.function_name(loop) or "loop", fixed_smem, fixed_tmem,
                  f"{module.source}:{loop.line}", machine.name)
    for spec in specs:
        where = spec.members[0] if spec.members else spec.primary
        graph.add_op(spec.name, spec.kind, **spec.cost.op_kwargs(),
                     **_footprints(spec, ctx.costs, per_iteration, body),
                     source=str(where.loc) or f"TTGIR line {where.line}", attrs=_attrs(spec, body))
    edges = _EdgeSet()
    _data_edges(body, specs, edges)
    _buffer_edges(body, specs, edges)
    _tmem_edges(body, specs, edges)
    edges.add_to(graph)
    graph.check(machine.unit_names)
    if body.if_converted:
        lines = ", ".join(str(op.line) for op in body.if_converted)
        into = ", ".join(f"{op.name!r}" for op in graph.ops if "if_converted" in dict(op.attrs))
        warnings.warn(f"{graph.name}: scf.if at TTGIR line(s) {lines} if-converted: the branches have no "
                      f"side effect, so both run and the result is selected (graph op(s) {into})",
                      TwillWarning, stacklevel=2)
    _warn_memory_dependences(loop, graph.name)
    members = {spec.name: list(spec.members) for spec in specs}
    return Lowering(graph, module, loop, members, body.folded(), list(body.if_converted))


_POINTER_VIEWS = frozenset({"tt.addptr", "tt.splat", "tt.broadcast", "tt.expand_dims", "tt.reshape",
                            "ttg.convert_layout", "tt.advance"})
"""Ops whose result points into the same buffer as their first operand."""


def _base_pointer(value: Value) -> Value:
    """The kernel argument (or other root) a pointer or pointer tensor is derived from."""
    while value.owner is not None and value.owner.name in _POINTER_VIEWS and value.owner.operands:
        value = value.owner.operands[0]
    return value


def _warn_memory_dependences(loop: Op, name: str) -> None:
    """Warn when the loop stores through a pointer argument it also loads from: a value passed from one
    iteration to the next through global memory is not an edge of the graph (twill, like Triton's
    pipeliner, assumes loads and stores of different iterations do not alias)."""
    loads: dict[int, list[Op]] = {}
    stores: dict[int, list[Op]] = {}
    for op in loop.walk():
        if op.name in ("tt.load", "tt.descriptor_load") and op.operands:
            loads.setdefault(_base_pointer(op.operands[0]).key, []).append(op)
        elif op.name in ("tt.store", "tt.atomic_rmw", "tt.descriptor_store") and op.operands:
            stores.setdefault(_base_pointer(op.operands[0]).key, []).append(op)
    for key in sorted(set(loads) & set(stores)):
        read, written = loads[key][0], stores[key][0]
        where = str(written.loc) or f"TTGIR line {written.line}"
        warnings.warn(f"{name}: the loop loads (TTGIR line {read.line}) and stores (TTGIR line "
                      f"{written.line}, {where}) through the same pointer; if an iteration reads what an "
                      "earlier one wrote, that dependence through global memory is not in the graph and "
                      "the schedule may reorder them", TwillWarning, stacklevel=3)


def graph_from_ttgir(text_or_path: str | os.PathLike[str], machine: str | Machine, *,
                     loop_index: int | None = None) -> Graph:
    """The dependence graph of the main loop of TTGIR text or a ``.ttgir`` file (see :func:`lower_loop`)."""
    return lower_loop(text_or_path, machine, loop_index=loop_index).graph


def _check_warps(num_warps: int, machine: Machine) -> None:
    """:class:`FrontendError` if a CTA of ``num_warps`` warps has more threads than ``machine`` allows."""
    if num_warps > machine.max_warps:
        raise FrontendError(f"num_warps {num_warps} is {num_warps * 32} threads per CTA; machine "
                            f"{machine.name!r} allows at most {machine.max_warps} warps "
                            f"({machine.max_warps * 32} threads) per CTA (warps.max_per_cta)")


def graph_from_kernel(spec_or_kernel: Any, machine: str | Machine = "h100", *,
                      constexprs: dict[str, Any] | None = None, loop_index: int | None = None,
                      **compile_options: Any) -> Graph:
    """Compile a ``@triton.jit`` kernel on the CPU for ``machine`` and lower its main loop.

    Parameters
    ----------
    spec_or_kernel : str, KernelSpec or JITFunction
        ``"path/to/file.py"`` or ``"path/to/file.py::KERNEL"`` (see :func:`load_kernel`), a loaded
        spec, or a JIT function (then ``signature=`` must be among ``compile_options``).
    machine : str or Machine
        Target machine; its ``arch`` picks the compile target (sm_90a -> ``sm_90``, sm_100a -> ``sm_100``).
    constexprs : dict, optional
        Overrides of the kernel's constexpr values.
    loop_index : int, optional
        See :func:`find_loop`.
    **compile_options
        Passed to :func:`compile_to_ttgir` (``signature``, ``num_warps``, ``num_stages``, ``divisible``).

    Raises
    ------
    FrontendError, UnsupportedOpError
        As :func:`compile_to_ttgir` and :func:`lower_loop`.
    """
    from twill.frontend.compile import compile_to_ttgir, target_for

    machine = load_machine(machine)
    if isinstance(compile_options.get("num_warps"), int):
        _check_warps(compile_options["num_warps"], machine)  # before the compile
    snapshots = compile_to_ttgir(spec_or_kernel, target=target_for(machine), constexprs=constexprs,
                                 **compile_options)
    module = parse_ttgir(snapshots.pre_swp)
    module.source = f"{snapshots.source} ({snapshots.kernel}, {snapshots.target}, pre-SWP TTGIR)"
    return lower_loop(module, machine, loop_index=loop_index, name=snapshots.kernel).graph
