"""Triton 3.6's own schedules beside twill's, op by op, with the II each one reaches under twill's model.

For every case (FlashAttention forward plain and sub-tiled, GEMM; sm_90 on ``h100``, sm_100 on ``b200``)
the script reads what Triton decided and what twill decides for the same loop graph:

* **Triton, as compiled** (sm_90 and sm_100): the ``loop.stage`` / ``loop.cluster`` attributes of the
  scheduled TTGIR, just before Triton's software pipeliner (``twill.frontend.compile``'s ``scheduled``
  snapshot), mapped to graph ops with :func:`twill.frontend.lower.lower_loop` (the lowering
  ``twill.apply.map`` reads Triton's choices through). No warp specialization: one instruction stream.
* **Triton autoWS** (sm_100 only): the same kernel with ``tl.range(..., warp_specialize=True)`` on its
  loop (a temporary copy of the file, same lines), compiled the same way; its own ``loop.stage`` /
  ``loop.cluster`` and the ``ttg.partition`` each op gets from Triton's ``PartitionScheduling`` (the IR
  "before NVWSInsertAref", dumped by MLIR in a child process; ops matched by source location).
  Triton's Hopper warp specialization is not used: 3.6 ignores it at 8 warps and crashes with
  descriptor stores (``shared/docs/ttgir-probe.md``).
* **twill**: ``twill.schedule(graph, machine)`` (stage = start // II, warp group, start).

Each Triton decision is then *evaluated under twill's model*: the smallest II at which a schedule with
Triton's stages (relative to its earliest op), Triton's cluster order inside each instruction stream
(``loop.cluster``: the emitted body issues a lower cluster first, so in-order issue puts its offsets
``start mod II`` first; inside one cluster the order is left free, as a backend instruction scheduler may
reorder it, so the II is the best Triton's coarse schedule allows) and Triton's partitions as warp groups
satisfies every constraint family of twill's joint model
(``twill.solvers.joint.encoding.Encoder``: dependences with hand-offs, unit capacity, blocking waits,
registers,
SMEM/TMEM, warp-group shape and register file).

The search: the problem without registers and memory is *monotone* in II when every unit has capacity 1
and every reservation starts at its op's issue (true of every graph here; otherwise II is scanned from
the modulo bound). A schedule at II with offsets ``o = start - stage * II`` stays valid at II + 1 with
the same offsets: every dependence has ``stage[v] - stage[u] + distance >= 0``, so its slack only grows;
a reservation or issue interval that wraps past II on the circle of length II covers a subset of its old
residues plus the new residue II, which no non-wrapping interval reaches, and two wrapping intervals
would already meet at residue 0. So its least II is found by galloping and bisection (a Bellman-Ford test
of the difference constraints alone first), and from there every II is checked with the full model,
upward, one SMT check each; the first SAT is the answer. The result is verified by ``twill.verify`` and
simulated with ``twill.analysis.simulate`` (raw cycle costs, TMA latency 1x, ``ITERATIONS``
iterations). Writes
``benchmarks/results/triton_comparison.json`` and ``docs/triton_comparison.md``; ``--render`` rebuilds
the report from the JSON.

Usage::

    python benchmarks/triton_comparison.py [--render] [--only LABEL] [--json FILE] [--out FILE.md]
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import networkx as nx

import twill
from twill.apply.map import int_attr, top_op
from twill.errors import InfeasibleError, TwillError
from twill.frontend.compile import compile_to_ttgir, load_kernel, target_for
from twill.frontend.lower import Lowering, lower_loop
from twill.frontend.ttgir import parse_ttgir
from twill.ir.graph import Graph
from twill.ir.machine import Machine, load_machine
from twill.model.bounds import bounds
from twill.model.liveness import fold, register_intervals
from twill.model.problem import Options, Problem, build_problem
from twill.schedule import Certificate, Schedule, make_groups, slots_from
from twill.solvers.joint.encoding import Encoder
from twill.solvers.normalize import normalize_problem
from twill.solvers.smt import SmtSession
from twill.solvers.status import CheckResult
from twill.verify import violations

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report_cli import read_json, run_main, write_report

ROOT = Path(__file__).resolve().parents[1]
FA = "examples/flash_attention_fwd.py::attn_fwd"
SUB = "examples/flash_attention_fwd_subtiled.py"
GEMM = "examples/gemm.py::matmul"
CASES: tuple[tuple[str, str, str], ...] = (
    ("FA forward", "h100", FA),
    ("FA forward", "b200", FA),
    ("FA forward, sub-tiled", "h100", f"{SUB}::attn_fwd_subtiled_sm90"),
    ("FA forward, sub-tiled", "b200", f"{SUB}::attn_fwd_subtiled_sm100"),
    ("GEMM", "h100", GEMM),
    ("GEMM", "b200", GEMM),
)
ITERATIONS = 128
SOLVE_LIMIT = 600.0  # seconds for twill.schedule per case
EVAL_LIMIT = 600.0  # seconds for the II scan of one Triton decision
FULL_SCAN = 1.25  # the full model is checked from the relaxed problem's least II up to this many times it
LOADS = ("tt.descriptor_load", "tt.load")

_CHILD = r"""
import os, sys
os.environ["MLIR_ENABLE_DUMP"] = "1"
os.environ["MLIR_DUMP_PATH"] = sys.argv[2]
from triton._C.libtriton import ir, passes, nvidia
ctx = ir.context(); ir.load_dialects(ctx); nvidia.load_dialects(ctx)
mod = ir.parse_mlir_module(sys.argv[1], ctx)
mod.context = ctx
pm = ir.pass_manager(ctx); pm.enable_debug()
passes.ttgpuir.add_warp_specialize(pm, int(sys.argv[3]))
pm.run(mod, "triton_comparison")
"""
"""Child process: Triton 3.6's automatic warp specialization on a scheduled TTGIR, with MLIR's IR dumps
on (the dump environment is read once per process, hence the child)."""


# ------------------------------------------------------------------------------------ Triton's decisions
@dataclass(frozen=True)
class TritonSlot:
    """What Triton decided for one graph op.

    ``stage``/``cluster`` are those of the op's earliest member (the TMA load itself for a load, whose
    shared-memory allocation, where it is waited for, sits in its consumer's slot); ``line`` places it in
    the emitted body (a load at its own line, a merged chain at its last member in that slot); ``members``
    lists ``name@line stage/cluster`` of every TTGIR op in it; ``partitions`` the ``ttg.partition`` ids
    its members carry (autoWS only; more than one when Triton clones the op into several partitions).
    """

    stage: int
    cluster: int
    line: int
    members: tuple[str, ...]
    partitions: tuple[int, ...] = ()


def _slots(lowering: Lowering, partitions: Mapping[tuple[str, int, int], tuple[int, ...]] | None = None
           ) -> dict[str, TritonSlot]:
    """Triton's stage, cluster (and partitions) per graph op of a lowered scheduled TTGIR."""
    out = {}
    loop = lowering.loop
    for name, members in lowering.members.items():
        rows = []
        parts: set[int] = set()
        for m in members:
            top = top_op(m, loop)
            if top is None:
                continue
            stage, cluster = int_attr(top.attrs.get("loop.stage")), int_attr(top.attrs.get("loop.cluster"))
            rows.append((stage, cluster, top.line, f"{m.name}@{m.line} {stage}/{cluster}"))
            if partitions is not None:
                parts.update(partitions.get((m.name, m.loc.line, m.loc.col), ()))
        stage, cluster, line, _ = min(rows)
        if not any(m.name in LOADS for m in members):  # a merged chain is issued once its last member is
            line = max(r[2] for r in rows if (r[0], r[1]) == (stage, cluster))
        out[name] = TritonSlot(stage, cluster, line, tuple(r[3] for r in rows), tuple(sorted(parts)))
    return out


def _ws_copy(spec: str, folder: Path) -> str:
    """A copy of the kernel file whose main loop reads ``tl.range(..., warp_specialize=True)``."""
    file_part, _, entry = spec.partition("::")
    kernel = load_kernel(spec)
    fn_name = kernel.fn.__name__
    lines = Path(file_part).read_text(encoding="utf-8").splitlines(keepends=True)
    start = next(i for i, t in enumerate(lines) if re.match(rf"\s*def {fn_name}\(", t))
    loop = re.compile(r"^(\s*for \w+ in )range\((.*)\):(\s*)$")
    at = next(i for i in range(start, len(lines)) if loop.match(lines[i]))
    lines[at] = loop.sub(r"\1tl.range(\2, warp_specialize=True):\3", lines[at])
    path = folder / Path(file_part).name
    path.write_text("".join(lines), encoding="utf-8")
    return f"{path}::{entry}" if entry else str(path)


def _dump_sections(text: str) -> dict[str, str]:
    """MLIR's ``IR Dump Before <Pass>`` file split by pass name (the first dump of each)."""
    parts = re.split(r"^// -----// IR Dump Before (\w+).*$", text, flags=re.M)
    out: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        out.setdefault(name, body)
    return out


def triton_decisions(spec: str, machine: Machine) -> dict[str, Any]:
    """Triton's stage/cluster per graph op (and on sm_100 its autoWS stages and partitions)."""
    target = target_for(machine)
    snaps = compile_to_ttgir(spec, target=target)
    plain = lower_loop(parse_ttgir(snaps.scheduled), machine, name=snaps.kernel)
    out: dict[str, Any] = {"target": target, "num_stages": snaps.num_stages,
                           "plain": _slots(plain), "plain_max_stage": int_attr(plain.loop.attrs.get(
                               "tt.scheduled_max_stage"))}
    if target != "sm_100":
        return out
    with tempfile.TemporaryDirectory(prefix="twill-ws-") as tmp:
        folder = Path(tmp)
        ws_spec = _ws_copy(spec, folder)
        ws = compile_to_ttgir(ws_spec, target=target)
        (folder / "scheduled.ttgir").write_text(ws.scheduled, encoding="utf-8")
        env = {k: v for k, v in os.environ.items() if not k.startswith("MLIR_")}
        subprocess.run([sys.executable, "-c", _CHILD, str(folder / "scheduled.ttgir"),
                        str(folder / "dump.txt"), str(ws.num_stages)], check=True, env=env,
                       capture_output=True)
        sections = _dump_sections((folder / "dump.txt").read_text(encoding="utf-8"))
    if "NVWSInsertAref" not in sections:
        raise TwillError(f"{spec}: Triton's warp specialization left no partitioned IR "
                         f"(passes seen: {', '.join(sections)})")
    parted = parse_ttgir(sections["NVWSInsertAref"])
    loop = next(op for op in parted.ops() if op.name == "scf.for")
    where: dict[tuple[str, int, int], tuple[int, ...]] = {}
    for op in loop.body.ops:
        part = op.attrs.get("ttg.partition")
        ids = tuple(part) if isinstance(part, tuple) else ((part,) if isinstance(part, int) else ())
        for inner in op.walk():
            key = (inner.name, inner.loc.line, inner.loc.col)
            where[key] = tuple(sorted(set(where.get(key, ())) | set(ids)))
    ws_low = lower_loop(parse_ttgir(ws.scheduled), machine, name=ws.kernel)
    if set(ws_low.members) != set(plain.members):
        raise TwillError(f"{spec}: the warp-specialized compile lowers to other ops "
                         f"({sorted(set(ws_low.members) ^ set(plain.members))})")
    out["ws"] = _slots(ws_low, where)
    out["ws_max_stage"] = int_attr(ws_low.loop.attrs.get("tt.scheduled_max_stage"))
    out["ws_loop_partitions"] = str(loop.attrs.get("ttg.partition", ""))
    return out


# ------------------------------------------------------------------------------------ a fixed decision
@dataclass
class Decision:
    """A schedule decision to evaluate: per op a stage, an issue-order key and a group label."""

    name: str
    stage: dict[str, int]
    order: dict[str, tuple[int, int]]
    label: dict[str, str]
    notes: list[str] = field(default_factory=list)


def decision_from(name: str, slots: Mapping[str, TritonSlot], graph: Graph, *, partitioned: bool) -> Decision:
    """Triton's decision as stages (relative to its earliest op), issue order and group labels.

    Without partitions, twill's model still needs the variable-latency ops (TMA loads) on a group of their
    own: they get one, everything else shares one group. With partitions, an op Triton cloned into several
    partitions goes to the lowest-numbered one (the model charges one hand-off where Triton recomputes).
    """
    low = min(s.stage for s in slots.values())
    stage = {n: s.stage - low for n, s in slots.items()}
    order = {n: (s.cluster, s.line) for n, s in slots.items()}
    notes = []
    if partitioned:
        label = {}
        for n, s in slots.items():
            if not s.partitions:
                raise TwillError(f"{name}: op {n} carries no ttg.partition")
            label[n] = f"p{s.partitions[0]}"
            if len(s.partitions) > 1:
                notes.append(f"{n} is cloned into partitions {', '.join(f'p{p}' for p in s.partitions)}; "
                             f"evaluated on p{s.partitions[0]}")
    else:
        label = {op.name: ("loads" if op.variable_latency else "all") for op in graph.ops}
    return Decision(name, stage, order, label, notes)


def _budgets(p: Problem, ii: int, start: Mapping[str, int], group: Mapping[str, int]) -> dict[int, int]:
    res = p.resources
    ivs = register_intervals(p, ii, start, group)
    return {g: min(res.setmaxnreg_max, res.round_budget(max(fold([iv for iv in ivs if iv.group == g], ii,
                                                                  res.group_overhead))))
            for g in set(group.values())}


def _check_lazy(enc: Encoder, sess: SmtSession, deadline: float | None) -> CheckResult:
    """Check, adding the liveness checks a model violates until one satisfies them (as
    twill.solvers.joint.smt)."""
    while True:
        status = sess.check(deadline)
        if status != CheckResult.SAT:
            return status
        start = {v: sess.value(t) for v, t in enc.s.items()}
        group = {v: next(w for w, b in enc.opw[v].items() if sess.value(b)) for v in enc.opw}
        budgets = {w: sess.value(enc.budget[w]) for w in range(enc.pool)}
        if not enc.refine(start, group, budgets):
            return status


def _order_pairs(p: Problem, dec: Decision, group: Mapping[str, int]) -> list[tuple[str, str]]:
    """``(u, v)``: same warp group, ``u`` in the next lower ``loop.cluster`` than ``v``; in-order issue puts
    ``u``'s offset at or before ``v``'s. Ops of one cluster are left in any order."""
    out = []
    for g in set(group.values()):
        levels: dict[int, list[str]] = {}
        for n in p.names:
            if group[n] == g:
                levels.setdefault(dec.order[n][0], []).append(n)
        keys = sorted(levels)
        for a, b in itertools.pairwise(keys):
            out += [(u, v) for u in levels[a] for v in levels[b]]
    return out


def _difference_ok(p: Problem, ii: int, dec: Decision, group: Mapping[str, int]) -> bool:
    """A necessary condition, decided by Bellman-Ford: the difference constraints alone (stage windows,
    dependences with hand-offs, in-order issue) have a solution at ``ii``, and no reservation exceeds it."""
    if any(r.cycles > ii for op in p.ops for r in op.rrt if p.resources.units.get(r.unit, 1) == 1):
        return False
    # longest-path form: s[v] >= s[u] + w for every arc (u, v, w); node "0" is the time origin
    arcs: list[tuple[str, str, int]] = []
    for n in p.names:
        arcs.append(("0", n, dec.stage[n] * ii))
        arcs.append((n, "0", -(dec.stage[n] * ii + ii - 1)))
    for e in p.edges:
        if e.src == e.dst:
            if e.latency > e.distance * ii:
                return False
            continue
        cross = e.cross if group[e.src] != group[e.dst] else 0
        arcs.append((e.src, e.dst, e.latency + cross - e.distance * ii))
    for u, v in _order_pairs(p, dec, group):
        arcs.append((u, v, (dec.stage[v] - dec.stage[u]) * ii))
    # feasible iff no positive cycle, i.e. no negative cycle on the negated weights (as twill.model.bounds)
    g = nx.DiGraph()
    g.add_nodes_from(("0", *p.names))
    for u, v, w in arcs:
        if u == v:
            if w > 0:
                return False
            continue
        if not g.has_edge(u, v) or g[u][v]["weight"] > -w:
            g.add_edge(u, v, weight=-w)
    return not nx.negative_edge_cycle(g, weight="weight")


def _fixed_at(p: Problem, ii: int, stages: int, dec: Decision, group: Mapping[str, int],
              deadline: float | None, *, full: bool) -> tuple[CheckResult, dict[str, int]]:
    """Is there a schedule at ``ii`` with the decision's stages, order and groups? (twill's joint model;
    ``full=False`` leaves out registers and memory, a relaxation used to skip IIs quickly)"""
    with SmtSession("yices") as sess:
        enc = Encoder(p, ii, stages, sess, 1)
        if max(group.values()) >= enc.pool:
            return CheckResult.UNSAT, {}
        enc.timing()
        enc.groups()
        enc.dependence()
        enc.capacity()
        enc.blocking()
        if full:
            enc.registers()
            enc.memory()
            enc.area_cuts()
        m = enc.m
        if not enc.feasible:
            return CheckResult.UNSAT, {}
        for n in p.names:
            enc.add(enc.opw[n][group[n]])
            enc.add(m.GE(enc.s[n], enc.int_(dec.stage[n] * ii)))
            enc.add(m.LE(enc.s[n], enc.int_(dec.stage[n] * ii + ii - 1)))
        for u, v in _order_pairs(p, dec, group):  # in-order issue: offsets follow the clusters
            enc.add(enc.before(u, -dec.stage[u] * ii, v, -dec.stage[v] * ii))
        status = _check_lazy(enc, sess, deadline)
        if status != CheckResult.SAT:
            return status, {}
        return status, {v: sess.value(t) for v, t in enc.s.items()}


def _build(p: Problem, raw: Problem, norm: Any, ii: int, start: Mapping[str, int], group: Mapping[str, int],
           dec: Decision) -> Schedule:
    """A :class:`Schedule` of a decision's start times (budgets as small as its liveness allows)."""
    length = max(start[op.name] + op.cycles for op in p.ops)
    warps = {g: p.resources.group_threads(max(p.op(n).warps for n in group if group[n] == g)) // 32
             for g in set(group.values())}
    b, raw_b = bounds(p), bounds(raw)
    cert = Certificate(b.mii, b.res_mii, b.rec_mii, False, (), 0, (f"fixed decision: {dec.name}",))
    return Schedule(p, ii, length, slots_from(start, group, ii, p.names),
                    make_groups(p, dict(start), dict(group), warps, _budgets(p, ii, start, group)), cert, (),
                    "triton", norm.to_dict(), {"res_mii": raw_b.res_mii, "rec_mii": raw_b.rec_mii,
                                               "critical_path": raw_b.critical_path})


def multibuffered(graph: Graph) -> tuple[Graph, list[str]]:
    """``graph`` without the write-after-read edges that keep one tensor-memory buffer per MMA result.

    twill's graph carries the TMEM token of a result such as S from its reader (``tmem_load``) to the
    next iteration's MMA that overwrites it, which allows one copy of S. Triton multi-buffers MMA results
    in TMEM when its schedule puts the MMA stages ahead of the reader (the warp-specialized loop's TMEM
    arefs, the pipeliner's accumulator multi-buffering); the model's TMEM capacity check then counts
    the copies. Returns the new graph and the dropped edges' labels.
    """
    out = Graph(graph.name, graph.fixed_smem, graph.fixed_tmem, graph.source)
    for op in graph.ops:
        out.add(op)
    dropped = []
    for e in graph.edges:
        if (e.distance >= 1 and e.carrier == "tmem" and graph.op(e.src).kind == "tmem_load"
                and graph.op(e.dst).kind == "gemm"):
            dropped.append(e.label)
            continue
        out.add_edge(e.src, e.dst, latency=e.latency, distance=e.distance, blocking=e.blocking,
                     carrier=e.carrier, source=e.source, inplace=e.inplace)
    return out, dropped


def evaluate(graph: Graph, machine: Machine, dec: Decision, *, time_limit: float | None = None,
             log: Callable[[str], None] = print) -> dict[str, Any]:
    """The smallest II at which ``dec`` is a valid schedule in twill's model, verified and simulated
    (``time_limit`` seconds for the scan, default ``EVAL_LIMIT``)."""
    time_limit = EVAL_LIMIT if time_limit is None else time_limit
    raw = build_problem(graph, machine, Options(prefetch=0))
    p, norm = normalize_problem(raw)
    vl = [op.name for op in p.ops if op.variable_latency]
    labels = sorted({dec.label[n] for n in vl})
    if len(labels) > 1 or any(dec.label[op.name] in labels for op in p.ops if not op.variable_latency):
        return {"name": dec.name, "schedule": None, "notes": dec.notes,
                "why": "the decision mixes TMA loads with other ops on one group, which twill's model "
                       "forbids"}
    group: dict[str, int] = {n: 0 for n in vl}
    numbers: dict[str, int] = {}
    for op in p.ops:  # compute groups numbered by first appearance (the encoder's symmetry breaking)
        if not op.variable_latency:
            numbers.setdefault(dec.label[op.name], len(numbers) + (1 if vl else 0))
            group[op.name] = numbers[dec.label[op.name]]
    b = bounds(p)
    upper = sum(op.cycles for op in p.ops) + sum(e.latency + e.cross for e in p.edges)
    stages = max(dec.stage.values()) + 2  # one window past the last stage: its ops may run over
    started = time.monotonic()
    deadline = started + time_limit
    found = None
    why = ""
    relaxed_ii: int | None = None
    refuted_to: int | None = None  # the last II the full model refuted
    checks = {"difference": 0, "relaxed": 0, "full": 0}

    def relaxed(ii: int) -> CheckResult:
        checks["difference"] += 1
        if not _difference_ok(p, ii, dec, group):
            return CheckResult.UNSAT
        checks["relaxed"] += 1
        return _fixed_at(p, ii, stages, dec, group, deadline, full=False)[0]

    # The relaxed problem is monotone in II (module docstring), so its least II is found by galloping
    # and bisection; from there every II is checked in full, upward.
    lo = hi = b.mii
    step, status = 1, CheckResult.UNSAT
    monotone = (all(cap == 1 for cap in p.resources.units.values())
                and all(r.start == 0 for op in p.ops for r in op.rrt))
    while monotone:
        status = relaxed(hi)
        if status != CheckResult.UNSAT or hi >= upper:
            break
        lo, hi, step = hi + 1, min(upper, hi + step), step * 2
    if not monotone:
        status = CheckResult.SAT
    if status == CheckResult.SAT:
        while monotone and lo < hi:
            mid = (lo + hi) // 2
            status = relaxed(mid)
            if status == CheckResult.SAT:
                hi = mid
            elif status == CheckResult.UNSAT:
                lo = mid + 1
            else:
                break
        if status in (CheckResult.SAT, CheckResult.UNSAT):
            status = CheckResult.UNSAT
            relaxed_ii = lo
            cap = min(upper, math.ceil(FULL_SCAN * lo))
            for ii in range(lo, cap + 1):
                checks["full"] += 1
                status, start = _fixed_at(p, ii, stages, dec, group, deadline, full=True)
                if status == CheckResult.SAT:
                    found = (ii, start)
                    break
                if status != CheckResult.UNSAT:
                    break
                refuted_to = ii
            if found is None and status == CheckResult.UNSAT:
                why = (f"the model without registers and memory first admits it at II {lo} units; with them "
                       f"no II in {lo}..{cap} units does")
                relaxed_status, relaxed_start = _fixed_at(p, lo, stages, dec, group, None, full=False)
                if relaxed_status == CheckResult.SAT:
                    bad = violations(_build(p, raw, norm, lo, relaxed_start, group, dec))
                    if bad:
                        why += f"; at II {lo} the relaxed schedule breaks: {bad[0]}"
    elif status == CheckResult.UNSAT:
        why = f"no II in {b.mii}..{upper} units admits it even without registers and memory"
    wall = time.monotonic() - started
    row: dict[str, Any] = {"name": dec.name, "notes": dec.notes, "wall_s": round(wall, 1),
                           "checks": checks, "ii_low": b.mii, "relaxed_ii": relaxed_ii,
                           "refuted_to": refuted_to,
                           "cycles_per_unit": p.cycles_per_unit,
                           "group_of_label": {lab: g for lab, g in numbers.items()} | (
                               {lab: 0 for lab in labels})}
    if found is None:
        row["schedule"] = None
        if status == CheckResult.UNSAT:
            row["why"] = why
        else:
            row["why"] = f"time limit {time_limit:.0f} s"
            if relaxed_ii is not None:
                row["why"] += (f": the model without registers and memory admits it from II {relaxed_ii} "
                               "units; the full model refuted " + (
                                   f"II {relaxed_ii}..{refuted_to}" if refuted_to is not None else "no II")
                               + " before the limit")
                row["ii_at_least"] = (refuted_to or relaxed_ii - 1) + 1
        log(f"    {dec.name}: {row['why']}")
        return row
    ii, start = found
    sched = _build(p, raw, norm, ii, start, group, dec)
    bad = violations(sched)
    row["violations"] = [str(v) for v in bad]
    row["schedule"] = _summary(sched)
    row["ops"] = {n: {"start": s.start, "stage": s.stage, "group": s.warp_group}
                  for n, s in sched.slots.items()}
    row["sim"] = _simulate(sched, graph)
    log(f"    {dec.name}: II {ii} units ({sched.ii_cycles:.0f} cycles) after {checks}, {wall:.1f} s")
    return row


# ------------------------------------------------------------------------------------ shared helpers
def _simulate(sched: Schedule, graph: Graph) -> float | None:
    """Steady-state cycles per iteration with raw costs and the cost model's TMA latency (1x)."""
    base = {op.name: float(op.latency) for op in graph.ops if op.variable_latency}
    try:
        r = twill.simulate(sched, ITERATIONS, base, graph=graph)
    except TwillError as exc:
        return {"error": str(exc)}  # type: ignore[return-value]
    return r.cycles_per_iteration


def _summary(s: Schedule) -> dict[str, Any]:
    cpu = s.problem.cycles_per_unit
    return {"ii": s.ii, "ii_cycles": round(s.ii_cycles, 1), "length": s.length,
            "prefetch": s.problem.options.prefetch,
            "length_cycles": round(s.length * cpu), "stages": s.stages,
            "groups": [{"index": g.index, "role": g.role, "ops": list(g.ops), "warps": g.warps,
                        "registers": g.registers} for g in s.warp_groups],
            "proven_optimal": s.certificate.proven_optimal}


def _log_stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def solve_twill(graph: Graph, machine_name: str, log: Callable[[str], None]) -> dict[str, Any]:
    """twill's own schedule of ``graph`` (``SOLVE_LIMIT``), summarized for the report."""
    log("  twill.schedule ...")
    t0 = time.monotonic()
    try:
        sched = twill.schedule(graph, machine_name, time_limit=SOLVE_LIMIT)
        out = {**_summary(sched), "wall_s": round(time.monotonic() - t0, 1),
               "cycles_per_unit": sched.problem.cycles_per_unit,
               "ops": {n: {"start": s.start, "stage": s.stage, "group": s.warp_group}
                       for n, s in sched.slots.items()},
               "sim": _simulate(sched, graph), "bounds_cycles": dict(sched.bounds_cycles),
               "bounds_units": {"res_mii": sched.certificate.res_mii, "rec_mii": sched.certificate.rec_mii}}
    except InfeasibleError as exc:
        out = {"error": str(exc), "wall_s": round(time.monotonic() - t0, 1)}
    log(f"    twill: {out.get('ii', '-')} units in {out['wall_s']:.1f} s")
    return out


def run_case(label: str, machine_name: str, spec: str, log: Callable[[str], None], jobs: int = 1
             ) -> dict[str, Any]:
    """Triton's decisions, twill's schedule and the evaluation of each for one kernel on one machine
    (with ``jobs`` > 1 the solve and the evaluations run side by side, each in its own process)."""
    started = time.monotonic()
    machine = load_machine(machine_name)
    log(f"{label} on {machine_name}: Triton's decisions ...")
    t0 = time.monotonic()
    tri = triton_decisions(spec, machine)
    graph = twill.graph_from_kernel(spec, machine=machine_name)
    if set(tri["plain"]) != {op.name for op in graph.ops}:
        raise TwillError(f"{spec}: the scheduled TTGIR lowers to other ops than the pre-pipelining graph")
    case: dict[str, Any] = {"label": label, "machine": machine_name, "spec": spec, "target": tri["target"],
                            "num_stages": tri["num_stages"], "ops": [op.name for op in graph.ops],
                            "tma_latency": machine.const("cost.tma_latency"),
                            "busy": {op.name: {r.unit: r.cycles * r.count for r in op.rrt}
                                     for op in graph.ops},
                            "kinds": {op.name: op.kind for op in graph.ops},
                            "edges": [[e.src, e.dst, e.distance] for e in graph.edges],
                            "triton_s": round(time.monotonic() - t0, 1),
                            "triton": {k: {n: s.__dict__ for n, s in v.items()} if k in ("plain", "ws") else v
                                       for k, v in tri.items()}}
    decisions = [decision_from("Triton, as compiled", tri["plain"], graph, partitioned=False)]
    if "ws" in tri:
        decisions.append(decision_from("Triton autoWS", tri["ws"], graph, partitioned=True))
    tri_graph, dropped = multibuffered(graph)
    case["multibuffered"] = dropped
    for d in decisions:
        d.notes += [f"dropped (TMEM multi-buffered by Triton): {label}" for label in dropped]
    if jobs > 1:  # twill's solve and each evaluation in its own process, side by side
        with ProcessPoolExecutor(max_workers=min(jobs, 1 + len(decisions))) as pool:
            mine = pool.submit(solve_twill, graph, machine_name, _log_stderr)
            theirs = [pool.submit(evaluate, tri_graph, machine, d, log=_log_stderr) for d in decisions]
            case["twill"] = mine.result()
            case["evaluations"] = [f.result() for f in theirs]
    else:
        case["twill"] = solve_twill(graph, machine_name, log)
        case["evaluations"] = [evaluate(tri_graph, machine, d, log=log) for d in decisions]
    case["wall_s"] = round(time.monotonic() - started, 1)
    return case


# ------------------------------------------------------------------------------------ report
def _cyc(units: int, cpu: float) -> str:
    return f"{units * cpu:.0f}"


def _op_table(case: dict[str, Any]) -> list[str]:
    tri, tw = case["triton"], case["twill"]
    ws = "ws" in tri
    head = ["op", "kind", "Triton stage/cluster"]
    if ws:
        head.append("Triton autoWS stage/cluster/partition")
    head += ["twill stage", "twill group", "twill start (cycles)"]
    for e in case["evaluations"]:
        if e.get("schedule"):
            head.append(f"{e['name']}: start (cycles) in the model")
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    cpu = tw.get("cycles_per_unit", 0.0)
    order = sorted(case["ops"], key=lambda n: (tw["ops"][n]["start"], n) if "ops" in tw else n)
    for n in order:
        p = tri["plain"][n]
        row = [f"`{n}`", case["kinds"][n], f"{p['stage']} / {p['cluster']}"]
        if ws:
            w = tri["ws"][n]
            parts = ", ".join(f"p{x}" for x in w["partitions"])
            row.append(f"{w['stage']} / {w['cluster']} / {parts}")
        if "ops" in tw:
            o = tw["ops"][n]
            row += [str(o["stage"]), str(o["group"]), _cyc(o["start"], cpu)]
        else:
            row += ["-", "-", "-"]
        for e in case["evaluations"]:
            if e.get("schedule"):
                row.append(_cyc(e["ops"][n]["start"], e["cycles_per_unit"]))
        out.append("| " + " | ".join(row) + " |")
    return out


def _groups_text(s: dict[str, Any]) -> str:
    return "; ".join(f"g{g['index']} ({g['role']}, {g['warps']} warps, {g['registers']} regs): "
                     + ", ".join(g["ops"]) for g in s["groups"])


def _ii_table(case: dict[str, Any]) -> list[str]:
    tw = case["twill"]
    res = tw.get("bounds_cycles", {}).get("res_mii")
    out = ["| schedule | II (units) | II (cycles) | II without registers and memory (units) | simulated "
           "cycles/iteration | simulated vs twill | L (cycles) | stages | warp groups | found in |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    base = tw.get("sim") if isinstance(tw.get("sim"), float) else None
    if "ii" in tw:
        out.append(f"| twill | {tw['ii']} | {tw['ii_cycles']:.0f} | - | {_num(tw['sim'])} | 1.00 | "
                   f"{tw['length_cycles']} | {tw['stages']} | {len(tw['groups'])} | {tw['wall_s']:.1f} s"
                   f"{' (proven optimal)' if tw['proven_optimal'] else ''} |")
    else:
        out.append(f"| twill | none | | | | | | | | {tw['wall_s']:.1f} s |")
    for e in case["evaluations"]:
        s = e.get("schedule")
        if not s:
            low = e.get("ii_at_least")
            first = f"at least {low} (time limit)" if low else "none"
            cyc = f"at least {low * e['cycles_per_unit']:.0f}" if low else ""
            ratio = f"at least {low * e['cycles_per_unit'] / tw['ii_cycles']:.2f} (model)" if low and \
                "ii_cycles" in tw else ""
            out.append(f"| {e['name']} | {first} | {cyc} | {e.get('relaxed_ii') or '-'} | | {ratio} | | | | "
                       f"{e['wall_s']:.1f} s |")
            continue
        sim = e.get("sim")
        ratio = f"{sim / base:.2f}" if isinstance(sim, float) and base else "-"
        out.append(f"| {e['name']} | {s['ii']} | {s['ii_cycles']:.0f} | {e.get('relaxed_ii') or '-'} | "
                   f"{_num(sim)} | {ratio} | "
                   f"{s['length_cycles']} | {s['stages']} | {len(s['groups'])} | {e['wall_s']:.1f} s "
                   f"({sum(e['checks'].values())} checks) |")
    if res is not None:
        b = tw["bounds_cycles"]
        out += ["", f"Bounds: ResMII {b['res_mii']} cycles ({tw['bounds_units']['res_mii']} units), RecMII "
                f"{b['rec_mii']} cycles ({tw['bounds_units']['rec_mii']} units), one iteration's critical "
                f"path {b['critical_path']} cycles; one unit = {tw['cycles_per_unit']:.1f} cycles."]
    return out


def _num(x: Any) -> str:
    return f"{x:.0f}" if isinstance(x, float) and not math.isnan(x) else "-"


def _findings(case: dict[str, Any]) -> list[str]:
    """Differences stated from the data (nothing here is written for one kernel by hand)."""
    tri, tw = case["triton"], case["twill"]
    out = []
    if "ops" not in tw:
        return ["- twill found no schedule: " + tw.get("error", "")]
    names = case["ops"]
    plain = tri["plain"]
    vl = {n for n in names if case["kinds"][n].startswith("tma")}
    compute = [n for n in names if n not in vl]
    edges = case.get("edges", [])

    def by_stage(stage_of: Mapping[str, int]) -> str:
        levels = sorted({stage_of[n] for n in compute})
        return "; ".join(f"stage {lv}: " + ", ".join(f"`{n}`" for n in compute if stage_of[n] == lv)
                         for lv in levels)

    stagings = [("Triton as compiled", {n: plain[n]["stage"] for n in compute})]
    if "ws" in tri:
        stagings.append(("Triton autoWS", {n: tri["ws"][n]["stage"] for n in compute}))
    stagings.append(("twill", {n: tw["ops"][n]["stage"] for n in compute}))
    for who, stage_of in stagings:
        out.append(f"- {who} puts the compute ops in {len(set(stage_of.values()))} stage(s): "
                   f"{by_stage(stage_of)}.")
    ahead = []
    for n in sorted(vl):
        users = [plain[d]["stage"] for s_, d, dist in edges if s_ == n and dist == 0]
        if users:
            ahead.append(f"`{n}` {min(users) - plain[n]['stage']}")
    if ahead:
        out.append("- Stages between a Triton load and its first consumer (its prefetch distance, num_stages "
                   f"{case['num_stages']}): " + ", ".join(ahead) + "; twill prices a streaming load as "
                   f"resident and gives it {tw['prefetch']} prefetch buffer(s), the least that hide the load "
                   "latency at its II (paper §5.3).")
    groups = tw["groups"]
    out.append(f"- twill uses {len(groups)} warp groups: " + _groups_text(tw) + ".")
    if "ws" in tri:
        ws = tri["ws"]
        parts = sorted({p for n in names for p in ws[n]["partitions"]})
        desc = "; ".join(f"p{p}: " + ", ".join(n for n in names if p in ws[n]["partitions"]) for p in parts)
        out.append(f"- Triton autoWS uses {len(parts)} partitions: {desc}.")
    for e in case["evaluations"]:
        s = e.get("schedule")
        if not s:
            out.append(f"- {e['name']}: no schedule found in twill's model ({e['why']}).")
            continue
        ratio = s["ii_cycles"] / tw["ii_cycles"]
        out.append(f"- {e['name']} reaches II {s['ii_cycles']:.0f} cycles in twill's model, {ratio:.2f}x "
                   f"twill's {tw['ii_cycles']:.0f}" + (f"; simulated {_num(e['sim'])} cycles per iteration"
                                                      if isinstance(e.get("sim"), float) else "") + ".")
        for v in e.get("violations", []):
            out.append(f"  - verify: {v}")
        out += [f"  - {note}" for note in e.get("notes", [])]
    return out


def _subtiles(case: dict[str, Any]) -> list[set[str]]:
    """Ops of each sub-tile: components of the loop graph without the TMA loads."""
    keep = [n for n in case["ops"] if not case["kinds"][n].startswith("tma")]
    g = nx.Graph()
    g.add_nodes_from(keep)
    g.add_edges_from((a, b) for a, b, _ in case.get("edges", []) if a in keep and b in keep)
    return sorted((set(c) for c in nx.connected_components(g)), key=lambda c: min(c))


def _ii_of(e: dict[str, Any]) -> float | None:
    s = e.get("schedule")
    return s["ii_cycles"] if s else None


def _summary_table(data: dict[str, Any]) -> list[str]:
    """One row per case: twill's II against each Triton decision's, in cycles of the model."""
    out = ["| kernel | machine | twill II | Triton as compiled II | Triton autoWS II | twill simulated | "
           "Triton simulated (as compiled / autoWS) |", "|---|---|---|---|---|---|---|"]
    for case in data["cases"]:
        tw = case["twill"]
        if "ii_cycles" not in tw:
            continue
        cells = []
        sims = []
        for name in ("Triton, as compiled", "Triton autoWS"):
            e = next((x for x in case["evaluations"] if x["name"] == name), None)
            if e is None:
                cells.append("n/a")
                sims.append("n/a")
            elif _ii_of(e) is not None:
                cells.append(f"{_ii_of(e):.0f} ({_ii_of(e) / tw['ii_cycles']:.2f}x)")
                sims.append(_num(e.get("sim")))
            elif e.get("ii_at_least"):
                low = e["ii_at_least"] * e["cycles_per_unit"]
                cells.append(f">= {low:.0f} (>= {low / tw['ii_cycles']:.2f}x, time limit)")
                sims.append("-")
            else:
                cells.append("none valid")
                sims.append("-")
        out.append(f"| {case['label']} | {case['machine']} | {tw['ii_cycles']:.0f} | {cells[0]} | "
                   f"{cells[1]} | {_num(tw.get('sim'))} | {' / '.join(sims)} |")
    return out


def _why(data: dict[str, Any]) -> list[str]:
    """Why the schedules differ, stated from patterns the data shows (each claim is checked here)."""
    out = []
    fa = [c for c in data["cases"] if "ops" in c["twill"] and len(_subtiles(c)) >= 1
          and any(c["kinds"][n] == "exp" for n in c["ops"])]
    def stages(c: dict[str, Any], stage_of: Callable[[str], int]) -> int:
        return len({stage_of(n) for n in c["ops"] if not c["kinds"][n].startswith("tma")})

    hopper = [c for c in fa if c["target"] == "sm_90"]
    one_stage = [c for c in hopper if stages(c, lambda n, c=c: c["triton"]["plain"][n]["stage"]) == 1]
    if one_stage:
        def later(c: dict[str, Any]) -> list[str]:
            first = min(c["twill"]["ops"][n]["stage"] for n in c["ops"] if c["kinds"][n] != "tma_load")
            return [n for n in c["ops"]
                    if c["kinds"][n] != "tma_load" and c["twill"]["ops"][n]["stage"] > first]

        def priced(c: dict[str, Any]) -> str:
            ev, cpu = c["evaluations"][0], c["evaluations"][0]["cycles_per_unit"]
            relaxed = f"{ev['relaxed_ii'] * cpu:.0f}" if ev.get("relaxed_ii") else "-"
            return (f"{c['label']}: Triton {_ii_of(ev) or 0:.0f} cycles ({relaxed} without registers and "
                    f"memory), ResMII {c['twill']['bounds_cycles']['res_mii']}, one iteration's critical "
                    f"path {c['twill']['bounds_cycles']['critical_path']}; twill moves "
                    + (", ".join(f"`{n}`" for n in later(c)) or "nothing")
                    + " to a later stage")

        cases = "; ".join(priced(c) for c in one_stage if _ii_of(c["evaluations"][0]))
        out.append(
            f"- **One compute stage (sm_90).** In {len(one_stage)} of the {len(hopper)} sm_90 FA cases "
            "Triton's coarse schedule puts every compute op of an iteration in one stage and one cluster; "
            "only the TMA loads get a distance (`num_stages - 1`). The iteration's GEMMs and softmax then "
            "issue in program order from one instruction stream, each wgmma result waited for, so the "
            "next iteration's QK issues after this one's PV; twill overlaps iterations by deferring ops "
            f"to a later stage ({cases}).")
    for c in fa:
        tiles = _subtiles(c)
        if len(tiles) != 2:
            continue
        tw = c["twill"]
        consumer = [set(g["ops"]) for g in tw["groups"] if g["role"] != "producer"]
        own = [g for g in consumer if sum(bool(g & t) for t in tiles) == 1]
        line = (f"- **Sub-tiles, {c['machine']}.** twill gives {len(own)} of its {len(consumer)} compute "
                "groups the ops of a single sub-tile")
        if "ws" in c["triton"]:
            ws = c["triton"]["ws"]
            parts = sorted({p for n in c["ops"] for p in ws[n]["partitions"]})
            mixed = [p for p in parts if sum(any(p in ws[n]["partitions"] for n in t) for t in tiles) > 1]
            mufu = {n: c.get("busy", {}).get(n, {}).get("mufu", 0) for n in c["ops"]}
            exps = [n for n in c["ops"] if mufu[n] and 2 * mufu[n] >= max(mufu.values())]
            exp_parts = sorted({p for n in exps for p in ws[n]["partitions"]})
            line += (f"; Triton's autoWS partitions {', '.join(f'p{p}' for p in mixed) or 'none'} hold ops "
                     f"of both sub-tiles (its exps sit in {', '.join(f'p{p}' for p in exp_parts)}), so one "
                     "partition runs both softmaxes and they cannot overlap each other's GEMMs the way two "
                     "softmax groups do")
        out.append(line + ".")
    slow = [c for c in data["cases"] if isinstance(c["twill"].get("sim"), float)
            and c["twill"]["sim"] > 1.05 * c["twill"]["ii_cycles"]]
    for c in slow:
        out.append(f"- **Simulated above the model, {c['label']} on {c['machine']}.** twill's schedule "
                   f"simulates at {c['twill']['sim']:.0f} cycles per iteration against its model II of "
                   f"{c['twill']['ii_cycles']:.0f}: the simulation replays the schedule's fixed order with "
                   f"raw cycle costs (not the normalized ones the II is proven on), the cost model's TMA "
                   f"latency ({c['tma_latency']:.0f} cycles) and {c['twill']['prefetch']} prefetch buffer(s) "
                   f"per streaming load (Triton rings {c['num_stages']} stages).")
    out.append("- **What the model does not see.** On the plain kernels an op is a whole 128-row tile issued "
               "by one instruction stream (8 warps on Hopper). In hardware Triton's 8 warps are two "
               "warpgroups, each on 64 rows, which drift apart and overlap one's softmax with the other's "
               "GEMMs by themselves; the sub-tiled kernels make that split explicit. So the plain kernels' "
               "Triton IIs here are pessimistic: measured on the H200, Triton's own plain schedule runs "
               "about as fast as twill's applied one (`docs/apply.md` §5). Likewise Triton sizes its "
               "partitions itself (the default partition gets the kernel's 8 warps), while the model gives "
               "a group the warps of its ops (4 per 128-row tile on Blackwell), so a partition that holds "
               "both sub-tiles' softmax is a 4-warp group in the model.")
    return out


def render(data: dict[str, Any]) -> str:
    """The markdown report of the collected data."""
    text = [
        "# Triton 3.6's schedules beside twill's",
        "",
        "Generated by `python benchmarks/triton_comparison.py` (data in "
        "`benchmarks/results/triton_comparison.json`; do not edit by hand; the cases took "
        f"{data['wall_s']:.0f} s in all on {data['platform']}, "
        f"{data.get('how', 'one solve at a time, beside other jobs on two cores')}"
        + "".join(f"; solved again: {', '.join(r['cases'])} in {r['wall_s']:.0f} s on {r['platform']}, "
                  f"{r['how']}" for r in data.get("reruns", [])) + ").",
        "",
        "For each kernel and target the table lists, per graph op: Triton's own `loop.stage` / "
        "`loop.cluster` from the scheduled TTGIR just before its software pipeliner (the TMA load's own "
        "slot for a load; its shared-memory allocation, where it is waited for, sits in its consumer's "
        "slot), on sm_100 also the stage / cluster / `ttg.partition` of Triton's automatic warp "
        "specialization (the same kernel with `tl.range(..., warp_specialize=True)`, partitions read "
        "before `NVWSInsertAref`), then twill's stage (`start // II`), warp group and start, and the start "
        "each Triton decision gets when it is evaluated in twill's model. Rows are in twill's start "
        "order. Triton's stage numbers count back from the newest iteration (stage `s` of emitted body "
        "`k` works on iteration `k - s`), twill's forward from the iteration's first op; only the "
        "differences within one column mean anything.",
        "",
        "**Evaluating a Triton decision in twill's model.** The smallest II (scanned upward from the "
        "modulo bound, one SMT check per II with the same encoder twill's joint solver uses) at which a "
        "schedule exists with: Triton's stages, relative to its earliest op; Triton's issue order inside "
        "each instruction stream (the emitted body issues a lower `loop.cluster` first, so its offsets "
        "`start mod II` come first; inside one cluster the order is left free, as a backend instruction "
        "scheduler may reorder it, so the II is the best Triton's coarse schedule allows in the model); "
        "Triton's partitions as warp groups (autoWS) or a single compute group (as compiled), and every "
        "constraint family of the model (dependences and hand-offs, unit capacity, blocking waits, "
        "registers, SMEM/TMEM, group shape, register file). Two concessions: the model requires the "
        "variable-latency TMA loads on a warp group of their own, so the as-compiled decision gets one "
        "(in Triton the compute warps issue the loads themselves; that only removes a few issue cycles "
        "from the compute stream), and Triton's load-to-consumer stage distance is kept explicit (no "
        "extra prefetch buffer is counted). The result is checked by `twill.verify` and simulated with "
        f"`twill.analysis.simulate` (raw cycle costs, cost-model TMA latency, {ITERATIONS} iterations, "
        f"units in "
        "schedule order). The search: without registers and memory the problem is monotone in II (see "
        "the script's docstring), so its least II is found by bisection (the column 'II without registers "
        f"and memory'); from there the full model is checked II by II up to {FULL_SCAN:g}x that II. A "
        "decision with no valid II in that range is reported with the first violation `twill.verify` finds "
        "in the relaxed schedule.",
        "",
    ]
    text += ["## Summary", "", "II in machine cycles under twill's model (ratio to twill's); simulated: "
             "steady-state cycles per iteration of the same schedules in `twill.analysis.simulate`. II "
             "in cycles is "
             "the II in normalized units times the cycles per unit, so the normalization's rounding can put "
             "it a few per cent off the resource bound in cycles (compare the bounds line under each case); "
             "the simulated column has no rounding. A simulated figure below its "
             "II means the static schedule has slack that run time recovers: the simulator issues each op "
             "as soon as its inputs, buffers and unit allow (in the schedule's order per unit), while the "
             "II prices Triton's fixed stages and issue order exactly.", "",
             *_summary_table(data), "", "## Why they differ", "", *_why(data), ""]
    for case in data["cases"]:
        kernel = case["spec"].split("::")[-1]
        text += [f"## {case['label']}: `{kernel}` on `{case['machine']}` ({case['target']})", ""]
        text += [*_ii_table(case), "", *_op_table(case), "", *_findings(case), ""]
    return "\n".join(text)


def main(argv: list[str] | None = None) -> int:
    """Collect (or with ``--render`` reload) the data and write the report."""
    global EVAL_LIMIT
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--json", default=str(ROOT / "benchmarks" / "results" / "triton_comparison.json"))
    ap.add_argument("--out", default=str(ROOT / "docs" / "triton_comparison.md"))
    ap.add_argument("--render", action="store_true", help="rebuild the report from --json without solving")
    ap.add_argument("--only", help="run only the cases whose 'label machine' contains this text and print "
                                   "the report (nothing written unless --update)")
    ap.add_argument("--update", action="store_true", help="with --only: replace those cases in --json "
                                                          "and rewrite the report")
    ap.add_argument("--jobs", type=int, default=1, help="run twill's solve and the evaluations of one case "
                    "side by side, up to this many processes")
    ap.add_argument("--eval-limit", type=float, default=EVAL_LIMIT, help="seconds for the II scan of one "
                    "Triton decision (the report records the limit of each)")
    args = ap.parse_args(argv)
    if args.update and not args.only:
        ap.error("--update replaces the cases named by --only; to run every case, leave --update out")
    if args.jobs < 1 or args.eval_limit <= 0:
        ap.error("--jobs must be >= 1 and --eval-limit > 0")
    if args.only and not any(args.only in f"{label} {m}" for label, m, _ in CASES):
        ap.error(f"--only {args.only!r} matches no case; cases: " + ", ".join(f"'{label} {m}'"
                                                                          for label, m, _ in CASES))
    log = _log_stderr
    EVAL_LIMIT = args.eval_limit  # read by evaluate(), in this process and in the pool's forked ones

    path = Path(args.json)
    data = None
    if not args.render:
        started = time.monotonic()
        data = {"wall_s": 0, "platform": f"{platform.machine()}, {os.cpu_count()} CPUs, Python "
                f"{platform.python_version()}, twill {twill.__version__}",
                "how": "one case at a time" + (
                    f", its solve and evaluations side by side (--jobs {args.jobs})" if args.jobs > 1
                    else ", one solve at a time"),
                "cases": []}
        partial = path.with_suffix(".partial.json")
        for label, m, spec in CASES:
            if args.only and args.only not in f"{label} {m}":
                continue
            data["cases"].append(run_case(label, m, spec, log, args.jobs))
            data["wall_s"] = round(time.monotonic() - started)
            if not args.only:  # keep what is done if a later case fails
                partial.parent.mkdir(parents=True, exist_ok=True)
                partial.write_text(json.dumps(data, indent=1) + "\n")
        if args.only and not args.update:
            print(render(data))
            return 0
        if args.only:
            old = read_json(path, ("cases",))
            fresh = {(c["label"], c["machine"]): c for c in data["cases"]}
            rerun = {"cases": [f"{label} {m}" for label, m in fresh], "platform": data["platform"],
                     "how": data["how"], "wall_s": data["wall_s"]}
            kept = [fresh.pop((c["label"], c["machine"]), c) for c in old["cases"]]
            data = {**old, "cases": kept + list(fresh.values()), "reruns": [*old.get("reruns", []), rerun]}
        partial.unlink(missing_ok=True)
    write_report(data, path, Path(args.out), render, log, ("cases",))
    return 0


if __name__ == "__main__":
    run_main(main)
