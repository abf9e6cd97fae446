"""The example kernels go through the frontend to graphs with the structure of their algorithms.

Covers the sub-tiled FlashAttention forward (``examples/flash_attention_fwd_subtiled.py``) and the
single-pass FlashAttention backward, plain and sub-tiled (``examples/flash_attention_bwd.py``), each
for Hopper (``h100``, sm_90) and Blackwell (``b200``, sm_100). Expected counts and GEMM costs come from
the algorithms (two GEMMs and one exponential per forward sub-tile; five GEMMs, one exponential and one
atomic per backward (sub-)tile) and the machines' Tensor Core rates, never from snapshots of the output.
Everything runs on the CPU.
"""

from __future__ import annotations

import importlib.util
import re
from collections import Counter
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import ModuleType

import networkx as nx
import pytest

import twill
from twill.frontend import graph_from_kernel
from twill.ir.graph import Graph, Op
from twill.ir.machine import load_machine

ROOT = Path(__file__).resolve().parents[1]
FWD = ROOT / "examples" / "flash_attention_fwd_subtiled.py"
BWD = ROOT / "examples" / "flash_attention_bwd.py"
MACHINE = {"sm90": "h100", "sm100": "b200"}
MMA = {"h100": "wgmma", "b200": "tcgen05.mma"}


@cache
def _module(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"_example_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@cache
def _graph(path: Path, entry: str) -> Graph:
    return graph_from_kernel(f"{path}::{entry}", MACHINE[entry.rsplit("_", 1)[1]])


def _entries(path: Path) -> list[str]:
    return sorted(_module(path).TWILL_KERNELS)


def _constexprs(path: Path, entry: str) -> dict[str, int]:
    return dict(_module(path).TWILL_KERNELS[entry]["constexprs"])


def _gemm_cycles(machine: str, m: int, n: int, k: int) -> int:
    """fp16 Tensor Core cycles of an ``[m, k] x [k, n]`` GEMM: ``2mnk`` over the machine's FLOP/cycle."""
    return 2 * m * n * k // int(load_machine(machine).const("cost.tc_flops_fp16"))


def _tile_exps(g: Graph, machine: str, rows: int, cols: int) -> list[Op]:
    """Exponentials over a whole ``rows x cols`` tile (not the per-row rescale factors)."""
    per_cycle = int(load_machine(machine).const("cost.mufu_per_cycle"))
    return [op for op in g.ops if op.kind == "exp" and op.total_usage("mufu") == rows * cols // per_cycle]


def _carried_cycle_distance(g: Graph, name: str) -> int | None:
    """Least total distance of a dependence cycle through ``name`` (``None`` if it is on no cycle)."""
    weights = nx.DiGraph()
    for e in g.edges:
        if not weights.has_edge(e.src, e.dst) or weights[e.src][e.dst]["d"] > e.distance:
            weights.add_edge(e.src, e.dst, d=e.distance)
    best = None
    for succ in list(weights.successors(name)) if name in weights else []:
        first = weights[name][succ]["d"]
        try:
            back = 0 if succ == name else nx.shortest_path_length(weights, succ, name, weight="d")
        except nx.NetworkXNoPath:
            continue
        best = first + back if best is None else min(best, first + back)
    return best


def _gemm_named(g: Graph, variable: str) -> str:
    """The GEMM computing kernel variable ``variable``: the op itself, or on Blackwell, where the variable
    names the ``tmem_load`` of the MMA's result, ``<variable>_gemm``."""
    return variable if g.op(variable).kind == "gemm" else f"{variable}_gemm"


# ------------------------------------------------------------------------------------------ forward
@pytest.mark.parametrize("entry", _entries(FWD))
def test_forward_subtiled_graph(entry: str) -> None:
    machine = MACHINE[entry.rsplit("_", 1)[1]]
    g = _graph(FWD, entry)
    g.check(load_machine(machine).unit_names)
    c = _constexprs(FWD, entry)
    sub_m, block_n, dim = c["SUB_M"], c["BLOCK_N"], c["HEAD_DIM"]
    assert sub_m == {"h100": 64, "b200": 128}[machine]  # the Tensor Core instruction's M

    gemms = [op for op in g.ops if op.kind == "gemm"]
    assert len(gemms) == 2 * 2  # QK^T and PV per sub-tile
    assert all(dict(op.attrs)["mma"] == MMA[machine] for op in gemms)
    qk, pv = _gemm_cycles(machine, sub_m, block_n, dim), _gemm_cycles(machine, sub_m, dim, block_n)
    assert Counter(op.total_usage("tc") for op in gemms) == Counter([qk, qk, pv, pv])

    assert len(_tile_exps(g, machine, sub_m, block_n)) == 2  # one exponential per sub-tile

    loads = [op for op in g.ops if op.kind == "tma_load"]
    assert len(loads) == 2  # K and V, shared by both sub-tiles
    assert all(g.is_streaming(op.name) and op.smem == block_n * dim * 2 for op in loads)
    for load in loads:  # each load feeds one GEMM of each sub-tile
        targets = {e.dst for e in g.out_edges(load.name)}
        assert len(targets) == 2 and all(g.op(t).kind == "gemm" for t in targets)

    # the two sub-tiles are independent apart from the loads they share
    compute = g.nx.subgraph([op.name for op in g.ops if op.kind != "tma_load"])
    parts = list(nx.weakly_connected_components(compute))
    assert len(parts) == 2 and len(parts[0]) == len(parts[1])

    # accumulators and row statistics are carried to the next iteration
    assert all(_carried_cycle_distance(g, _gemm_named(g, f"out{i}")) == 1 for i in "01")
    for stat in ("max0", "max1", "row_sum0", "row_sum1"):  # running row max and row sum per sub-tile
        assert any(e.src == stat == e.dst and e.distance == 1 for e in g.edges), stat

    if machine == "b200":
        assert len([op for op in g.ops if op.kind == "tmem_load"]) == 2 * 2  # S and O per sub-tile
        # O accumulators carry their value (fixed); each S buffer is charged to its QK MMA
        assert g.fixed_tmem == 2 * dim
        assert sorted(op.tmem for op in gemms) == [0, 0, block_n, block_n]
    else:
        assert g.fixed_tmem == 0
        assert g.fixed_smem == 2 * sub_m * dim * 2  # the two Q sub-tiles


# ------------------------------------------------------------------------------------------ backward
@dataclass(frozen=True)
class Bwd:
    """What one backward entry computes per iteration, from its kernel and constexprs."""

    machine: str
    split: str  # "none", "kv" (two key sub-tiles), "q" (two query sub-tiles)
    m: int  # query rows of one (sub-)tile
    n: int  # keys of one (sub-)tile
    d: int  # head dim
    halves: int = 1  # 2 when the exponential and dS are computed per column half of S (FORM "split")
    transposed: bool = False  # S^T = K Q^T and dP^T = V dO^T, kernel variables st, dpt (FORM "transposed")

    @property
    def suffixes(self) -> list[str]:
        return [""] if self.split == "none" else ["0", "1"]

    @property
    def dq_gemms(self) -> list[str]:
        """Variables of the dQ GEMMs: with a key split the second accumulates onto the first."""
        return {"none": ["dq"], "kv": ["dq0", "dq"], "q": ["dq0", "dq1"]}[self.split]


def _bwd(entry: str) -> Bwd:
    c = _constexprs(BWD, entry)
    kernel = _module(BWD).TWILL_KERNELS[entry]["kernel"]
    machine = MACHINE[entry.rsplit("_", 1)[1]]
    if kernel == "attn_bwd_subtiled_kv":
        return Bwd(machine, "kv", c["BLOCK_M"], c["SUB_N"], c["HEAD_DIM"])
    if kernel == "attn_bwd_subtiled_q":
        return Bwd(machine, "q", c["SUB_M"], c["BLOCK_N"], c["HEAD_DIM"])
    form = c["FORM"]  # attn_bwd: plain, split or transposed
    return Bwd(machine, "none", c["BLOCK_M"], c["BLOCK_N"], c["HEAD_DIM"], 2 if form == "split" else 1,
               transposed=form == "transposed")


def _subtile(name: str) -> str:
    """Sub-tile suffix of an op of a sub-tiled backward (``s0``, ``p16_1``, ``dq0_atomic``), or ``""``."""
    match = re.match(r"^[a-z]+(?:16_)?([01])(?:_|$)", name)
    return match.group(1) if match else ""


@pytest.mark.parametrize("entry", _entries(BWD))
def test_backward_graph(entry: str) -> None:
    b = _bwd(entry)
    g = _graph(BWD, entry)
    g.check(load_machine(b.machine).unit_names)
    tiles = len(b.suffixes)
    tc_m = {"h100": 64, "b200": 128}[b.machine]  # the Tensor Core instruction's M
    if entry.endswith("_q_sm90"):
        assert b.split == "q"  # the Blackwell sub-tiling, compiled for Hopper to check it on an H200
    else:  # sub-tiles split the dimension that exceeded the instruction's M: keys on Hopper
        expected = "none" if "subtiled" not in entry else {"h100": "kv", "b200": "q"}[b.machine]
        assert b.split == expected
        assert (b.n if b.split == "kv" else b.m) == tc_m

    gemms = [op for op in g.ops if op.kind == "gemm"]
    assert len(gemms) == 5 * tiles
    assert all(dict(op.attrs)["mma"] == MMA[b.machine] for op in gemms)
    shapes = {"s": (b.m, b.n, b.d), "dp": (b.m, b.n, b.d), "dv": (b.n, b.d, b.m), "dk": (b.n, b.d, b.m)}
    if b.transposed:  # [keys, queries] score tiles
        shapes = {"st": (b.n, b.m, b.d), "dpt": (b.n, b.m, b.d), "dv": shapes["dv"], "dk": shapes["dk"]}
    for var, (rows, cols, inner) in shapes.items():
        for i in b.suffixes:
            op = g.op(_gemm_named(g, f"{var}{i}"))
            assert op.total_usage("tc") == _gemm_cycles(b.machine, rows, cols, inner), f"{var}{i}"
    for var in b.dq_gemms:
        assert g.op(_gemm_named(g, var)).total_usage("tc") == _gemm_cycles(b.machine, b.m, b.d, b.n)

    assert len(_tile_exps(g, b.machine, b.m, b.n // b.halves)) == tiles * b.halves
    assert len([op for op in g.ops if op.kind == "exp"]) == tiles * b.halves  # the only exponential

    atomics = [op for op in g.ops if op.kind == "atomic"]
    assert len(atomics) == (2 if b.split == "q" else 1)
    assert all(op.variable_latency and not g.is_streaming(op.name) for op in atomics)
    for atomic in atomics:  # dQ reaches the atomic through the data edges of the iteration
        assert any(nx.has_path(g.nx, _gemm_named(g, var), atomic.name) for var in b.dq_gemms)
    if b.split == "kv":  # one atomic adds the dQ of both sub-tiles
        assert all(nx.has_path(g.nx, _gemm_named(g, var), atomics[0].name) for var in b.dq_gemms)

    tma = [op for op in g.ops if op.kind == "tma_load"]
    pointer = [op for op in g.ops if op.kind == "load"]
    loaded = 2 if b.split == "q" else 1  # query blocks loaded per iteration
    assert len(tma) == 2 * loaded and len(pointer) == 2 * loaded  # Q, dO by TMA; lse, delta by pointer
    assert all(g.is_streaming(op.name) for op in tma + pointer)
    assert all(op.smem == b.m * b.d * 2 for op in tma)
    keys = b.n * (2 if b.split == "kv" else 1)
    assert g.fixed_smem == 2 * keys * b.d * 2  # K and V of the program, loaded before the loop

    # dK and dV accumulate across iterations: each of their GEMMs is on a dependence cycle of distance 1
    accumulators = [_gemm_named(g, f"{var}{i}") for var in ("dv", "dk") for i in b.suffixes]
    assert all(_carried_cycle_distance(g, name) == 1 for name in accumulators)
    scores = ("st", "dpt") if b.transposed else ("s", "dp")
    fresh = [_gemm_named(g, f"{var}{i}") for var in scores for i in b.suffixes]
    fresh += [_gemm_named(g, var) for var in b.dq_gemms]
    register_carried = [e for e in g.edges if e.distance and e.carrier == "register"]
    assert all(e.src in accumulators and e.dst in accumulators for e in register_carried)
    if b.machine == "b200":
        # S, dP and dQ are overwritten by their MMAs each iteration; only dK and dV hold TMEM throughout
        assert g.fixed_tmem == 2 * b.d * (2 if b.split == "kv" else 1)
        assert [g.op(name).tmem for name in fresh] == [b.n] * (2 * tiles) + [b.d] * len(b.dq_gemms)
        assert len([op for op in g.ops if op.kind == "tmem_load"]) >= 3 * tiles  # S, dP, dQ
    else:
        assert g.fixed_tmem == 0
        assert all(_carried_cycle_distance(g, name) is None for name in fresh)  # nothing carried


def test_backward_key_subtiles_share_only_the_inputs_and_dq() -> None:
    g = _graph(BWD, "attn_bwd_subtiled_sm90")
    shared = {"q", "do", "lse", "delta", "dq", "dq_convert_layout", "dq_atomic"}
    assert all(_subtile(op.name) for op in g.ops if op.name not in shared)
    crossing = {(e.src, e.dst) for e in g.edges
                if e.src not in shared and e.dst not in shared and _subtile(e.src) != _subtile(e.dst)}
    assert not crossing
    # sub-tile 1's dQ GEMM takes its dS and, as accumulator, sub-tile 0's dQ (after a layout change
    # Triton inserts between the two GEMMs' accumulator layouts)
    into_dq = {e.src: e for e in g.edges if e.dst == "dq"}
    assert set(into_dq) == {"ds1", "dq0"} and into_dq["dq0"].inplace
    assert g.op("dq0").kind == "convert_layout" and g.op("dq0_gemm").kind == "gemm"


def test_backward_query_subtiles_share_only_the_accumulators() -> None:
    g = _graph(BWD, "attn_bwd_subtiled_q_sm90")
    assert all(_subtile(op.name) for op in g.ops)
    crossing = {(e.src, e.dst, e.distance) for e in g.edges if _subtile(e.src) != _subtile(e.dst)}
    # sub-tile 1 adds to dK/dV after sub-tile 0 in the iteration; sub-tile 0 continues from sub-tile 1
    assert crossing == {("dv0", "dv1", 0), ("dv1", "dv0", 1), ("dk0", "dk1", 0), ("dk1", "dk0", 1)}


def test_transposed_backward_hands_p_and_ds_to_the_mmas_in_tensor_memory() -> None:
    """FA4's formulation: P^T and dS^T are the left operands of the dV and dK MMAs, which tcgen05 reads
    from tensor memory, so per iteration only dS (for the dQ MMA) is staged in shared memory, where
    the plain kernel stages P and dS."""
    tile = 128 * 128 * 2  # one fp16 [BLOCK_M, BLOCK_N] tile, bytes

    def staged(g: Graph) -> list[int]:  # shared memory written per iteration by ops other than loads
        return sorted(op.smem for op in g.ops if op.smem and not g.is_streaming(op.name))

    plain, transposed = _graph(BWD, "attn_bwd_sm100"), _graph(BWD, "attn_bwd_transposed_sm100")
    assert staged(plain) == [tile, tile]
    assert staged(transposed) == [tile]
    for mma in ("dv", "dk"):
        stores = [g_src for g_src in transposed.nx.predecessors(mma)
                  if transposed.op(g_src).kind == "tmem_store"]
        assert len(stores) == 1, mma  # its left operand, written to TMEM by the issuing warps
        assert transposed.op(stores[0]).tmem == tile // (4 * 128)  # fp16 packed two per 32-bit column


def test_every_entry_names_its_target() -> None:
    for path in (FWD, BWD):
        for entry in _entries(path):
            assert entry.rsplit("_", 1)[1] in MACHINE


# ------------------------------------------------------------------------------------------ GEMM
GEMM = ROOT / "examples" / "gemm.py"


@pytest.mark.parametrize("machine", ["h100", "b200"])
def test_chained_mmas_on_one_accumulator_wait_only_for_the_tensor_cores(machine: str) -> None:
    """Consecutive MMAs into one accumulator issue back to back (the Tensor Cores apply them in order), so
    the accumulator's loop-carried edge costs the MMA's Tensor Core time, not its full latency; a GEMM loop
    whose only recurrence is its accumulator can then run at the Tensor Cores' rate. (It used to cost
    MMA time + ``tc_latency``: II 384 cycles on b200 instead of 256.)"""
    g = twill.graph_from_kernel(f"{GEMM}::matmul", machine=machine)
    c = _constexprs(GEMM, "matmul")
    tc = _gemm_cycles(machine, c["BLOCK_M"], c["BLOCK_N"], c["BLOCK_K"])  # 2mnk / FLOP per cycle
    acc = next(op for op in g.ops if op.kind == "gemm")
    (carried,) = [e for e in g.edges if e.src == acc.name and e.dst == acc.name]
    assert carried.distance == 1 and carried.inplace
    assert g.edge_latency(carried) == tc < acc.latency
    s = twill.schedule(g, machine, time_limit=120)
    twill.verify(s)
    assert s.ii_cycles >= tc
    if machine == "b200":  # nothing else recurs, and TMA keeps up: the Tensor Cores bound the loop
        assert round(s.ii_cycles) == tc
