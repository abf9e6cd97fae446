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
from functools import cache
from pathlib import Path
from types import ModuleType

import networkx as nx
import pytest

from twill.frontend import graph_from_kernel
from twill.graph import Graph, Op
from twill.machine import load_machine

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
def _bwd_shape(entry: str) -> tuple[str, int, int, int, int]:
    """Machine, sub-tiles, query rows per (sub-)tile, keys per program, head dim."""
    c = _constexprs(BWD, entry)
    tiles = 2 if "subtiled" in entry else 1
    rows = c["SUB_M"] if tiles == 2 else c["BLOCK_M"]
    return MACHINE[entry.rsplit("_", 1)[1]], tiles, rows, c["BLOCK_N"], c["HEAD_DIM"]


def _subtile(name: str) -> str:
    """Sub-tile suffix of an op of the sub-tiled backward (``s0``, ``p16_1``, ``dq0_atomic``), or ``""``."""
    match = re.match(r"^[a-z]+(?:16_)?([01])(?:_|$)", name)
    return match.group(1) if match else ""


@pytest.mark.parametrize("entry", _entries(BWD))
def test_backward_graph(entry: str) -> None:
    machine, tiles, m, n, d = _bwd_shape(entry)
    g = _graph(BWD, entry)
    g.check(load_machine(machine).unit_names)
    assert m == {"h100": 64, "b200": 128}[machine]
    suffixes = ["0", "1"] if tiles == 2 else [""]

    gemms = [op for op in g.ops if op.kind == "gemm"]
    assert len(gemms) == 5 * tiles
    assert all(dict(op.attrs)["mma"] == MMA[machine] for op in gemms)
    shapes = {"s": (m, n, d), "dp": (m, n, d), "dv": (n, d, m), "dk": (n, d, m), "dq": (m, d, n)}
    for var, (rows, cols, inner) in shapes.items():
        for i in suffixes:
            op = g.op(_gemm_named(g, f"{var}{i}"))
            assert op.total_usage("tc") == _gemm_cycles(machine, rows, cols, inner), f"{var}{i}"

    assert len(_tile_exps(g, machine, m, n)) == tiles
    assert len([op for op in g.ops if op.kind == "exp"]) == tiles  # the only exponential

    atomics = [op for op in g.ops if op.kind == "atomic"]
    assert len(atomics) == tiles
    assert all(op.variable_latency and not g.is_streaming(op.name) for op in atomics)
    for i in suffixes:  # dQ reaches its atomic through the data edges of the iteration
        atomic = next(op.name for op in atomics if op.name.startswith(f"dq{i}_"))
        assert nx.has_path(g.nx, _gemm_named(g, f"dq{i}"), atomic)

    tma = [op for op in g.ops if op.kind == "tma_load"]
    pointer = [op for op in g.ops if op.kind == "load"]
    assert len(tma) == 2 * tiles and len(pointer) == 2 * tiles  # Q, dO by TMA; lse, delta by pointer
    assert all(g.is_streaming(op.name) for op in tma + pointer)
    assert all(op.smem == m * d * 2 for op in tma)
    assert g.fixed_smem == 2 * n * d * 2  # K and V, loaded before the loop

    # dK and dV accumulate across iterations: each of their GEMMs is on a dependence cycle of distance 1
    accumulators = [_gemm_named(g, f"{var}{i}") for var in ("dv", "dk") for i in suffixes]
    assert all(_carried_cycle_distance(g, name) == 1 for name in accumulators)
    fresh = [_gemm_named(g, f"{var}{i}") for var in ("s", "dp", "dq") for i in suffixes]
    register_carried = [e for e in g.edges if e.distance and e.carrier == "register"]
    assert all(e.src in accumulators and e.dst in accumulators for e in register_carried)
    if machine == "b200":
        # S, dP and dQ are overwritten by their MMAs each iteration; only dK and dV hold TMEM throughout
        assert g.fixed_tmem == 2 * d
        assert [g.op(name).tmem for name in fresh] == [n] * (2 * tiles) + [d] * tiles
        assert len([op for op in g.ops if op.kind == "tmem_load"]) >= 3 * tiles  # S, dP, dQ
    else:
        assert g.fixed_tmem == 0
        assert all(_carried_cycle_distance(g, name) is None for name in fresh)  # nothing carried


def test_backward_subtiles_share_only_the_accumulators() -> None:
    g = _graph(BWD, "attn_bwd_subtiled_sm90")
    assert all(_subtile(op.name) for op in g.ops)
    crossing = {(e.src, e.dst, e.distance) for e in g.edges if _subtile(e.src) != _subtile(e.dst)}
    # sub-tile 1 adds to dK/dV after sub-tile 0 in the iteration; sub-tile 0 continues from sub-tile 1
    assert crossing == {("dv0", "dv1", 0), ("dv1", "dv0", 1), ("dk0", "dk1", 0), ("dk1", "dk0", 1)}


def test_every_entry_names_its_target() -> None:
    for path in (FWD, BWD):
        for entry in _entries(path):
            assert entry.rsplit("_", 1)[1] in MACHINE
