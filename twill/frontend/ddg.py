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
* **edges**: the carrier is what the producer yields (register, smem, tmem; the TMEM accumulator of an
  MMA that yields only a token: tmem, and that MMA is a view of the accumulator it read, so the buffer
  lives until the accumulator's reader; an address, pointer or index value: an ordering edge, since it
  holds no tile and an address is known ahead of the data it points to); ``blocking`` when the
  producer is ``TC`` or ``TMA`` (an asynchronous result); an edge whose latency equals its producer's
  is given no latency of its own, so a streaming load's edges get ``d = 0`` (paper §5.3); ``inplace``
  for an MMA's self edge.

Anything else is refused with a :class:`~twill.errors.FrontendError` naming the node or edge: an
unknown pipeline (``units=`` maps it), a super node (an inner loop), a missing field, an ``op_ref`` the
table lacks, a result type of an unknown memory space.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from twill.errors import FrontendError, GraphError
from twill.ir.graph import Graph, Reservation
from twill.ir.machine import Machine, load_machine

__all__ = ["KIND_UNITS", "PIPELINE_UNITS", "SCHEMA", "VIEW_KINDS", "graph_from_ddg", "is_ddg"]

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


def graph_from_ddg(source: str | Path | Mapping[str, Any], machine: str | Path | Machine = "b200", *,
                   loop_index: int | None = None, units: Mapping[str, str | None] | None = None) -> Graph:
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
    origin = str(source) if isinstance(source, (str, Path)) else "ddg dict"
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
    if not nodes:
        raise FrontendError(f"{origin}: loop {loop.get('loop_id')} has no ddg.nodes")
    meta = data.get("kernel")
    kernel = str(meta.get("name", "kernel")) if isinstance(meta, Mapping) else "kernel"
    g = Graph(f"{kernel}_loop{loop.get('loop_id', 0)}", source=origin)

    info: dict[int, dict[str, Any]] = {}
    for node in nodes:
        nid = node.get("id") if isinstance(node, Mapping) else None
        if isinstance(nid, bool) or not isinstance(nid, int) or nid in info:
            raise FrontendError(f"{origin}: node {node!r:.80} has a missing or repeated integer id")
        kind = str(node.get("op_kind") or "")
        where = f"{origin}: node {nid} ({kind or '?'})"
        if node.get("is_super_node"):
            raise FrontendError(f"{where} is a super node (an inner loop scheduled on its own); twill "
                                f"schedules one loop without control flow: import the inner loop instead")
        pipeline = _field(node, "pipeline", where)
        if pipeline not in pipes:
            raise FrontendError(f"{where}: pipeline {pipeline!r} has no twill unit (known: "
                                f"{', '.join(sorted(pipes))}); map it with units={{{pipeline!r}: 'unit'}}")
        ref = node.get("op_ref")
        if ref is not None and ref not in table:
            raise FrontendError(f"{where}: op_ref {ref!r} is not in the dump's ops table")
        entry = table.get(ref, {}) if ref is not None else {}
        results = [str(t) for t in entry.get("result_types", [])]
        values = [_value(t, where) for t in results]
        info[nid] = {"node": node, "kind": kind, "where": where, "pipeline": pipeline,
                     "value": next((v for v in values if v[0] != "none"), ("none", 0)),
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

    for e in edges:
        where = (f"{origin}: edge {e.get('src')}->{e.get('dst')}" if isinstance(e, Mapping)
                 else f"{origin}: edge {e!r:.80}")
        if not isinstance(e, Mapping) or e.get("src") not in info or e.get("dst") not in info:
            raise FrontendError(f"{where}: src and dst must be node ids of loop {loop.get('loop_id')}")
        src, dst = info[e["src"]], info[e["dst"]]
        latency = _field(e, "latency", where)  # required: a missing latency is not 0
        distance = _field(e, "distance", where)  # required: a missing distance is not 0
        carrier = src["carrier"]  # "none" for an address, pointer or index value (known ahead of data)
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
