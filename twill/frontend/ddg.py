"""Import the ``ddg-0.1`` dependence graphs that FBTriton's modulo scheduler dumps.

Meta's FBTriton fork (``facebookexperimental/triton``) writes, with ``TRITON_MODULO_DUMP_DDG=FILE`` during
``-nvgpu-modulo-schedule``, the pre-schedule data dependence graph of every scheduled loop as JSON, schema
``ddg-0.1``: a top-level ``ops`` table (``op_ref`` -> ``kind``, ``operands``, ``result_types``) and
``loops[]``, each with ``loop_id``, ``is_outer`` and ``ddg.nodes`` / ``ddg.edges``. A node carries the
cost its latency model assigned: ``pipeline`` (``TC``, ``TMA``, ``CUDA``, ``SFU``, or ``NONE`` for index
arithmetic and views; AMD pipelines too), ``latency`` (issue to result usable), ``self_latency`` (cycles
until the next op on the same pipe may issue), ``occupancy`` (cycles the engine is held; 0 when unset)
and ``min_warps``; an edge carries ``src``, ``dst``, ``distance`` and ``latency``. :func:`graph_from_ddg`
turns one loop into a :class:`~twill.ir.graph.Graph` by these rules (the dump gives no more than this, so
each rule is a choice, stated here):

* **unit**: the pipeline through :data:`PIPELINE_UNITS` (``TC`` -> ``tc``, ``TMA`` -> ``tma``, ``CUDA``
  -> ``alu``, ``SFU`` -> ``mufu``, ``NONE`` -> no unit), except the op kinds of :data:`KIND_UNITS`
  (TMEM copies, which the dump books on ``CUDA``, take ``tmem`` where the machine has it). A node whose
  busy time is 0 uses no unit either (index arithmetic priced at nothing): no phantom unit.
* **times**: busy ``occupancy`` (else ``self_latency``, else ``latency`` for ``TC``/``TMA``) from issue;
  ``completion = max(busy, latency)`` (an MMA holds the Tensor Core 128 cycles, its result lands at 559:
  idle trailing cycles); ``latency`` as given; ``issue_cycles`` the busy time for ops the warps execute
  (``CUDA``, ``SFU``), ``min(busy, self_latency)`` for the asynchronous engines (``TC``, ``TMA``), 0
  without a unit.
* **flags**: ``async_reader`` true exactly for ``TC`` nodes (an MMA reads its operands while it runs),
  false otherwise, never inferred; ``variable_latency`` for ``TMA`` loads and gathers; ``warps`` the
  node's ``min_warps``.
* **values**, from the op's first result type in the ``ops`` table: a ``tensor<...>`` of elements is a
  register value (``result_bytes``, and registers per thread over the node's warps, ``ceil(bytes / 4 /
  threads)``), except a TMA load's, which lands in shared memory (``smem``); a
  ``!ttg.memdesc<..., #ttg.shared_memory>`` is an SMEM buffer and a ``..., #ttng.tensor_memory>`` one a
  TMEM buffer (columns of 128 lanes x 32 bits); an ``!ttg.async.token`` or a scalar holds nothing; a
  ``tt.load`` on the TMA pipeline (a pointer load) yields registers. Buffers made outside the loop that
  its nodes read are the graph's ``fixed_smem`` / ``fixed_tmem``. A register op of the ``NONE``
  pipeline that reads another node (``expand_dims``, ``broadcast``, ``reshape``) is a view too.
  A buffer op that reads another node's value and only renames it is a **view** (:data:`VIEW_KINDS`:
  transposes, subviews, reinterprets, and a ``local_alloc`` of a TMA load's result, which the load writes
  in place), so the buffer's liveness follows it to the real reader (docs/model.md §5).
* **edge kinds** (:data:`EDGE_KINDS`; an edge must give one): ``data``, the consumer reads the producer's
  result in the same iteration (``distance`` 0), and ``loop_carried``, the result is passed through the
  loop's ``scf.yield`` to an ``iter_arg`` the consumer reads in a later iteration (``distance`` >= 1);
  a kind that contradicts its distance is refused. Which result an edge carries is read off the ops table:
  the operand ``{"op": <producer>, "result": r}`` of the consumer (``data``), or the ``scf.yield`` operand
  that feeds the consumer's ``{"iter_arg": ...}`` (``loop_carried``); when the table does not link them
  (a hand-written dump), the producer's first shaped result. A loop-carried ``!ttg.async.token`` of a
  ``tmem_load`` (the next MMA may overwrite the accumulator once the load has read it) is so an ordering
  edge, not the register tile the load also yields.
* **edges**: the carrier is what the producer yields (register, smem, tmem; the TMEM accumulator of an
  MMA that yields only a token: tmem, and that MMA is a view of the accumulator it read, so the buffer
  lives until the accumulator's reader; an address, pointer or index value: an ordering edge, since it
  holds no tile and an address is known ahead of the data it points to); ``blocking`` when the
  producer is ``TC`` or ``TMA`` (an asynchronous result); an edge whose latency equals its producer's
  is given no latency of its own, so a streaming load's edges get ``d = 0`` (paper §5.3); ``inplace``
  for an MMA's self edge.

Anything else is refused with a :class:`~twill.errors.FrontendError` naming the file and the node or
edge: an unknown pipeline (``units=`` maps it), a super node (an inner loop), a missing field (``op_ref``
included: without it the node's value cannot be sized), a field the importer does not read (with the
closest known name: a cost it ignored would change the answer), an ``op_ref`` the table lacks, an unknown
edge kind, a result type of an unknown memory space.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from twill.errors import FrontendError, GraphError
from twill.ir.fields import unknown_keys_message
from twill.ir.graph import Graph, Reservation
from twill.ir.machine import Machine, load_machine

__all__ = ["EDGE_KINDS", "KIND_UNITS", "PIPELINE_UNITS", "SCHEMA", "VIEW_KINDS", "graph_from_ddg", "is_ddg"]

SCHEMA = "ddg-0.1"
"""The ``schema_version`` this importer reads."""

PIPELINE_UNITS: dict[str, str | None] = {"TC": "tc", "TMA": "tma", "CUDA": "alu", "SFU": "mufu", "NONE": None}
"""twill unit of each FBTriton pipeline (``None``: the node uses no unit)."""

KIND_UNITS: dict[str, str] = {"ttng.tmem_load": "tmem", "ttng.tmem_store": "tmem"}
"""Op kinds that take another unit than their pipeline's, when the machine has that unit."""

VIEW_KINDS: frozenset[str] = frozenset({
    "ttg.memdesc_trans", "ttg.memdesc_subview", "ttg.memdesc_index", "ttg.memdesc_subslice",
    "ttg.memdesc_reinterpret", "ttg.memdesc_reshape", "ttng.tmem_subslice", "ttng.tmem_reinterpret",
})
"""Op kinds that rename a buffer without copying it."""

EDGE_KINDS: dict[str, str] = {
    "data": "the consumer reads the producer's result in the same iteration (distance 0)",
    "loop_carried": "the result reaches the consumer through the loop's scf.yield, iterations later "
                    "(distance >= 1)",
}
"""The edge kinds of a ``ddg-0.1`` dump and what each means here."""

NODE_FIELDS: tuple[str, ...] = ("id", "op_ref", "op_kind", "pipeline", "latency", "self_latency", "occupancy",
                                "min_warps", "is_super_node", "inner_ii", "prologue_latency")
"""The fields of a ``ddg-0.1`` node (``inner_ii`` and ``prologue_latency`` only on super nodes, which are
refused)."""
EDGE_FIELDS: tuple[str, ...] = ("src", "dst", "kind", "distance", "latency")
"""The fields of a ``ddg-0.1`` edge."""

_ASYNC_PIPELINES = ("TC", "TMA")
_ELEMENT_BYTES = {"f64": 8, "i64": 8, "f32": 4, "i32": 4, "tf32": 4, "f16": 2, "bf16": 2, "i16": 2,
                  "f8E4M3FN": 1, "f8E5M2": 1, "i8": 1, "i1": 1}
_SHAPED = re.compile(r"^(tensor|!ttg\.memdesc)<((?:\d+x)+)([A-Za-z0-9!.<>]+?)[,>]")


def is_ddg(data: Any) -> bool:
    """True for a parsed JSON document that says it is a ``ddg-0.1`` dump."""
    return isinstance(data, Mapping) and data.get("schema_version") == SCHEMA


def _value(type_text: str, where: str) -> tuple[str, int]:
    """``(kind, bytes)`` of one MLIR result type: ``register``, ``smem``, ``tmem``, ``address`` (pointers
    and integers), or ``none`` (tokens, scalars, anything without a shape)."""
    text = type_text.strip()
    m = _SHAPED.match(text)
    if not m:
        return ("none", 0)
    dims = [int(d) for d in m.group(2).rstrip("x").split("x")]
    elem = m.group(3)
    if m.group(1) == "tensor":
        if elem.startswith("!tt.ptr") or elem.startswith("i"):
            return ("address", 0)
        if elem not in _ELEMENT_BYTES:
            raise FrontendError(f"{where}: unknown element type {elem!r} in {text!r}")
        return ("register", math.prod(dims) * _ELEMENT_BYTES[elem])
    size = math.prod(dims) * _ELEMENT_BYTES.get(elem, 0)
    if elem not in _ELEMENT_BYTES:
        raise FrontendError(f"{where}: unknown element type {elem!r} in {text!r}")
    if "#ttg.shared_memory" in text:
        return ("smem", size)
    if "#ttng.tensor_memory" in text:
        return ("tmem", size)
    raise FrontendError(f"{where}: memory space of {text!r} is neither #ttg.shared_memory nor "
                        f"#ttng.tensor_memory")


def _field(node: Mapping[str, Any], name: str, where: str, default: Any = None) -> Any:
    if name not in node:
        if default is not None:
            return default
        raise FrontendError(f"{where}: missing field {name!r}")
    value = node[name]
    if name != "pipeline" and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise FrontendError(f"{where}: {name}={value!r} must be a non-negative integer")
    return value


def _loop_invariant_buffers(table: Mapping[str, Any], info: Mapping[int, Mapping[str, Any]],
                            origin: str) -> tuple[int, int]:
    """SMEM bytes and TMEM columns of the buffers made outside the loop that its nodes read (an
    accumulator allocated before the loop, a resident Q tile): held for the whole loop. Each buffer
    counts once."""
    inside = {it["ref"] for it in info.values()}
    seen: set[str] = set()
    smem = tmem = 0
    for it in info.values():
        entry = table.get(it["ref"], {}) if it["ref"] is not None else {}
        for operand in entry.get("operands", []):
            ref = operand.get("op") if isinstance(operand, Mapping) else None
            if not isinstance(ref, str) or ref in inside or ref in seen or ref not in table:
                continue
            seen.add(ref)
            for text in table[ref].get("result_types", []):
                kind, size = _value(str(text), f"{origin}: op {ref} (outside the loop)")
                if kind == "smem":
                    smem += size
                elif kind == "tmem":
                    tmem += -(-size // (4 * 128))
    return smem, tmem


def _pick_loop(loops: list[Any], loop_index: int | None, origin: str) -> Mapping[str, Any]:
    if not loops:
        raise FrontendError(f"{origin}: the dump has no loops")
    if loop_index is not None:
        for loop in loops:
            if isinstance(loop, Mapping) and loop.get("loop_id") == loop_index:
                return loop
        ids = [loop.get("loop_id") for loop in loops if isinstance(loop, Mapping)]
        raise FrontendError(f"{origin}: no loop with loop_id {loop_index}; the dump has {ids}")
    inner = [loop for loop in loops if isinstance(loop, Mapping) and not loop.get("is_outer", False)]
    if len(inner) != 1:
        ids = [loop.get("loop_id") for loop in inner]
        raise FrontendError(f"{origin}: {len(inner)} inner loops ({ids}); pick one with loop_index=")
    return inner[0]


def _edge_kind(e: Mapping[str, Any], distance: int, where: str) -> str:
    """The edge's ``kind`` (:data:`EDGE_KINDS`), checked against its distance."""
    if "kind" not in e:
        raise FrontendError(f"{where}: missing field 'kind' (one of {', '.join(EDGE_KINDS)})")
    kind = e["kind"]
    if kind not in EDGE_KINDS:
        raise FrontendError(f"{where}: kind {kind!r} is not a ddg-0.1 edge kind; known kinds: "
                            + "; ".join(f"{k!r} ({meaning})" for k, meaning in EDGE_KINDS.items()))
    if (kind == "data") != (distance == 0):
        raise FrontendError(f"{where}: kind {kind!r} with distance {distance}: {EDGE_KINDS[kind]}")
    return kind


def _carried_results(e: Mapping[str, Any], kind: str, src: Mapping[str, Any], dst: Mapping[str, Any],
                     table: Mapping[str, Any], loop_id: Any) -> list[int]:
    """Indices of the producer's results the edge carries, as the ops table links them: the consumer's
    operands ``{"op": <producer>, "result": r}`` for a ``data`` edge; for a ``loop_carried`` one the
    operands of the loop's ``scf.yield`` that feed an ``{"iter_arg": {"loop": id, "idx": k}}`` the consumer
    reads (and, for a dump that writes the carried value as a direct operand, those). Empty when the table
    does not link them."""
    def refs(operands: Any) -> list[int]:
        return [int(o.get("result", 0)) for o in operands if isinstance(o, Mapping)
                and o.get("op") == src["ref"] and isinstance(o.get("result", 0), int)]

    operands = table[dst["ref"]].get("operands", [])
    operands = operands if isinstance(operands, list) else []
    found = refs(operands)
    if kind == "loop_carried":
        slots = [o["iter_arg"].get("idx") for o in operands if isinstance(o, Mapping)
                 and isinstance(o.get("iter_arg"), Mapping) and o["iter_arg"].get("loop") == loop_id]
        for entry in table.values():
            if (isinstance(entry, Mapping) and entry.get("kind") == "scf.yield"
                    and entry.get("scope") == f"loop:{loop_id}"):
                yielded = entry.get("operands", [])
                picked = [yielded[k] for k in slots if isinstance(k, int) and 0 <= k < len(yielded)]
                found = refs(picked) + found
    return sorted(set(found))


def _edge_carrier(e: Mapping[str, Any], src: Mapping[str, Any], dst: Mapping[str, Any], distance: int,
                  table: Mapping[str, Any], loop_id: Any, where: str) -> str:
    """What the edge carries: the producer's value (:func:`graph_from_ddg`'s carrier rules) when it carries
    the producer's main result or the table does not say which; for another result (a ``tmem_load``'s
    token), what that result is: ``none`` for a token, scalar or address (an ordering edge)."""
    kind = _edge_kind(e, distance, where)
    results = _carried_results(e, kind, src, dst, table, loop_id)
    if not results or src["main"] in results:
        return src["carrier"]
    kinds = {src["values"][r][0] for r in results if r < len(src["values"])}
    for carrier in ("tmem", "smem", "register"):
        if carrier in kinds:
            return carrier
    return "none"


def graph_from_ddg(source: str | Path | Mapping[str, Any], machine: str | Path | Machine = "b200", *,
                   loop_index: int | None = None, units: Mapping[str, str | None] | None = None,
                   origin: str | None = None) -> Graph:
    """The :class:`~twill.ir.graph.Graph` of one loop of a ``ddg-0.1`` dump (rules in the module docstring).

    Parameters
    ----------
    source : str, Path or mapping
        The dump's path, or its parsed JSON.
    machine : str, Path or Machine
        The machine whose units the graph uses (``b200`` by default: the dumps come from Blackwell
        kernels); its ``warps.per_warpgroup`` gives the threads a register tensor is spread over.
    loop_index : int, optional
        The ``loop_id`` to import; by default the dump's only inner loop.
    units : mapping of str to (str or None), optional
        Pipeline -> unit overrides on top of :data:`PIPELINE_UNITS` (``{"MFMA": "tc"}``).
    origin : str, optional
        Where a parsed ``source`` came from (its file), for messages and op sources; by default the path
        ``source`` names, or ``"ddg-0.1 dump"`` for a mapping.

    Returns
    -------
    Graph
        Ops named ``<kind>_<id>`` (``tc_gen5_mma_11``), attributes ``op_kind``, ``op_ref``, ``pipeline``;
        checked against the machine's units.

    Raises
    ------
    FrontendError
        Not a ``ddg-0.1`` dump, or a node or edge it cannot map (named, with what is wrong).
    """
    if origin is None:
        origin = str(source) if isinstance(source, (str, Path)) else "ddg-0.1 dump"
    if isinstance(source, (str, Path)):
        try:
            data = json.loads(Path(source).read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise FrontendError(f"{origin}: cannot read a ddg-0.1 dump: {exc}") from exc
    else:
        data = source
    if not is_ddg(data):
        version = data.get("schema_version") if isinstance(data, Mapping) else None
        raise FrontendError(f"{origin}: schema_version {version!r} is not {SCHEMA!r}")
    mach = load_machine(machine)
    pipes = {**PIPELINE_UNITS, **dict(units or {})}
    table = data.get("ops", {})
    loop = _pick_loop(list(data.get("loops", [])), loop_index, origin)
    ddg = loop.get("ddg") if isinstance(loop.get("ddg"), Mapping) else {}
    nodes, edges = list(ddg.get("nodes", [])), list(ddg.get("edges", []))
    loop_id = loop.get("loop_id")
    if not nodes:
        raise FrontendError(f"{origin}: loop {loop_id} has no ddg.nodes")
    meta = data.get("kernel")
    kernel = str(meta.get("name", "kernel")) if isinstance(meta, Mapping) else "kernel"
    g = Graph(f"{kernel}_loop{loop.get('loop_id', 0)}", source=origin)

    info: dict[int, dict[str, Any]] = {}
    for i, node in enumerate(nodes):
        if not isinstance(node, Mapping):
            raise FrontendError(f"{origin}: loop {loop_id}: ddg.nodes[{i}] is {type(node).__name__}, not an "
                                f"object")
        nid = node.get("id")
        if isinstance(nid, bool) or not isinstance(nid, int):
            raise FrontendError(f"{origin}: loop {loop_id}: ddg.nodes[{i}] has id {nid!r}; a node id is an "
                                f"integer")
        kind = str(node.get("op_kind") or "")
        where = f"{origin}: node {nid} ({kind or '?'})"
        if nid in info:
            raise FrontendError(f"{where}: id {nid} is used by two nodes of loop {loop_id} "
                                f"(ddg.nodes[{i}] and an earlier one)")
        if node.get("is_super_node"):
            raise FrontendError(f"{where} is a super node (an inner loop scheduled on its own); twill "
                                f"schedules one loop without control flow: import the inner loop instead")
        message = unknown_keys_message(node, NODE_FIELDS, where)
        if message:
            raise FrontendError(message)
        pipeline = _field(node, "pipeline", where)
        if pipeline not in pipes:
            raise FrontendError(f"{where}: pipeline {pipeline!r} has no twill unit (known: "
                                f"{', '.join(sorted(pipes))}); map it with units={{{pipeline!r}: 'unit'}}")
        if "op_ref" not in node:
            raise FrontendError(f"{where}: missing field 'op_ref' (the ops-table entry whose result types "
                                f"say what the node yields; without it its value could not be sized)")
        ref = node["op_ref"]
        if not isinstance(ref, str) or ref not in table:
            raise FrontendError(f"{where}: op_ref {ref!r} is not in the dump's ops table")
        results = [str(t) for t in table[ref].get("result_types", [])]
        values = [_value(t, where) for t in results]
        main = next((k for k, v in enumerate(values) if v[0] != "none"), 0)
        info[nid] = {"node": node, "kind": kind, "where": where, "pipeline": pipeline,
                     "value": values[main] if values else ("none", 0), "values": values, "main": main,
                     "name": f"{kind.rsplit('.', 1)[-1] or 'op'}_{nid}", "ref": ref}

    g.fixed_smem, g.fixed_tmem = _loop_invariant_buffers(table, info, origin)
    preds: dict[int, list[int]] = {}
    for e in edges:
        if isinstance(e, Mapping) and e.get("src") in info and e.get("dst") in info:
            preds.setdefault(e["dst"], []).append(e["src"])

    def is_tma_load(nid: int) -> bool:
        k = info[nid]["kind"]
        return info[nid]["pipeline"] == "TMA" and ("load" in k or "gather" in k)

    def lands_in_smem(nid: int) -> bool:  # a TMA descriptor load writes shared memory, a tt.load registers
        return is_tma_load(nid) and info[nid]["kind"].startswith("tt.descriptor_")

    for nid, it in info.items():  # what each node yields, and so what its out-edges carry
        kind_of_value = it["value"][0]
        if kind_of_value == "register" and lands_in_smem(nid):
            kind_of_value = "smem"
        elif kind_of_value == "none" and it["pipeline"] == "TC":
            # an MMA that yields only a token wrote its accumulator in place: TMEM where there is any
            kind_of_value = "tmem" if "tmem" in mach.units else "register"
            it["token_mma"] = True
        it["yields"] = kind_of_value
        it["carrier"] = kind_of_value if kind_of_value in ("register", "smem", "tmem") else "none"

    for nid, it in info.items():
        node, where, pipeline, kind = it["node"], it["where"], it["pipeline"], it["kind"]
        latency = _field(node, "latency", where)
        self_lat = _field(node, "self_latency", where, 0)
        occupancy = _field(node, "occupancy", where, 0)
        warps = max(1, _field(node, "min_warps", where, 1))
        unit = pipes[pipeline]
        if unit is not None and kind in KIND_UNITS and KIND_UNITS[kind] in mach.units:
            unit = KIND_UNITS[kind]
        busy = occupancy or self_lat or (latency if pipeline in _ASYNC_PIPELINES else 0)
        if unit is None or busy == 0:
            unit, busy = None, 0
        issue = 0 if unit is None else (min(busy, self_lat or busy) if pipeline in _ASYNC_PIPELINES else busy)
        size = it["value"][1]
        regs = smem = tmem = result_bytes = 0
        from_node = [q for q in preds.get(nid, []) if q != nid]
        view = False
        if it["yields"] == "register" and pipeline == "NONE" and from_node:
            # expand_dims, broadcast, reshape: a free re-indexing of a register tile it reads; a hand-off
            # of it to another group still moves the tile's bytes
            view, result_bytes = True, size
        elif it["yields"] == "register":
            threads = 32 * max(warps, mach.warps_per_group)  # a register tile spreads over a warpgroup
            regs, result_bytes = -(-size // (4 * threads)), size
        elif it.get("token_mma"):  # its result aliases the TMEM accumulator it read
            view = any(info[q]["carrier"] == "tmem" for q in from_node)
        elif it["yields"] == "smem" and lands_in_smem(nid):
            smem = size
        elif it["yields"] in ("smem", "tmem"):
            view = bool(from_node) and (kind in VIEW_KINDS or (
                kind == "ttg.local_alloc" and any(lands_in_smem(q) for q in from_node)))
            if not view and it["yields"] == "smem":
                smem = size
            elif not view:
                tmem = -(-size // (4 * 128))  # columns of 128 lanes x 32 bits
        try:
            g.add_op(it["name"], kind, rrt=() if unit is None else (Reservation(unit, 0, busy),),
                     latency=latency, issue_cycles=issue, completion=max(busy, latency), regs=regs,
                     smem=smem, tmem=tmem, result_bytes=result_bytes, variable_latency=is_tma_load(nid),
                     warps=warps, async_reader=pipeline == "TC", view=view, source=f"{origin}: node {nid}",
                     attrs={"op_kind": kind, "op_ref": str(it["ref"]), "pipeline": pipeline})
        except GraphError as exc:
            raise FrontendError(f"{where}: {exc}") from exc

    for i, e in enumerate(edges):
        if not isinstance(e, Mapping):
            raise FrontendError(f"{origin}: loop {loop_id}: ddg.edges[{i}] is {type(e).__name__}, not an "
                                f"object")
        where = f"{origin}: edge {e.get('src')}->{e.get('dst')}"
        message = unknown_keys_message(e, EDGE_FIELDS, where)
        if message:
            raise FrontendError(message)
        strange = [f"{end} {e.get(end)!r}" for end in ("src", "dst") if e.get(end) not in info]
        if strange:
            raise FrontendError(f"{where}: {' and '.join(strange)} not a node id of loop {loop_id}")
        src, dst = info[e["src"]], info[e["dst"]]
        latency = _field(e, "latency", where)  # required: a missing latency is not 0
        distance = _field(e, "distance", where)  # required: a missing distance is not 0
        carrier = _edge_carrier(e, src, dst, distance, table, loop_id, where)
        own = None if latency == src["node"].get("latency") else latency
        try:
            g.add_edge(src["name"], dst["name"], latency=own, distance=distance, carrier=carrier,
                       blocking=src["pipeline"] in _ASYNC_PIPELINES and e["src"] != e["dst"],
                       inplace=e["src"] == e["dst"] and src["pipeline"] == "TC",
                       source=f"{origin}: edge {e['src']}->{e['dst']}")
        except GraphError as exc:
            raise FrontendError(f"{where}: {exc}") from exc
    try:
        g.check(mach.unit_names)
    except GraphError as exc:
        raise FrontendError(f"{origin}: {exc}") from exc
    return g
