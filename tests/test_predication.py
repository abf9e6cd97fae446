"""Masked tiles are predicated, if-converted branches are divergent (seed 003), through the frontend.

``tests/data/masked_tail.py`` handles a partial final tile two ways: masks (``masked_tail``: a masked load
with ``other=``, ``tl.where``, a masked store) and a branch on "is this the final tile" (``branch_tail``).
Every number below is worked out by hand from the machine constants (h200: lsu 32 B/cycle, lsu latency
600, ALU 128/cycle, MUFU 16/cycle, reconvergence 38 cycles per extra path; h100: the same rates, 0 gap).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from twill.frontend.compile import compile_to_ttgir
from twill.frontend.lower import lower_loop
from twill.frontend.ttgir import parse_ttgir
from twill.ir.costmodel import CostModel
from twill.ir.graph import Reservation
from twill.ir.machine import load_machine

DATA = Path(__file__).resolve().parent / "data"
KERNELS = DATA / "masked_tail.py"

pytest.importorskip("triton")


def _lower(kernel: str, machine: str):
    snaps = compile_to_ttgir(f"{KERNELS}::{kernel}", target="sm_90")
    return lower_loop(parse_ttgir(snaps.pre_swp), machine)


@pytest.fixture(scope="module")
def masked():
    return _lower("masked_tail", "h200")


@pytest.fixture(scope="module")
def branch():
    return _lower("branch_tail", "h200")


@pytest.fixture(scope="module")
def h200() -> CostModel:
    return CostModel(load_machine("h200"))


def test_machine_constants_the_numbers_assume(h200):
    m = h200.machine
    assert (m.const("cost.lsu_bytes_per_cycle"), m.const("cost.lsu_latency"), m.const("cost.alu_per_cycle"),
            m.const("cost.mufu_per_cycle"), m.const("cost.divergence_reconverge")) == (32, 600, 128, 16, 38)
    assert load_machine("h100").const("cost.divergence_reconverge") == 0


def test_masked_load_costs_the_full_tile_plus_the_fill(masked):
    # 64 x 64 fp32 = 16384 B at 32 B/cycle: 512 LSU cycles whatever the mask keeps (a final tile with 1
    # valid column costs the same); other=0.0 is one select per element: 4096 / 128 = 32 ALU cycles,
    # ahead of the load. Each CTA reads its own rows (program_id * BLOCK_M + arange, times the stride), so
    # the tile streams from HBM: ceil(16384 / 17.1) = 959 cycles of the SM's HBM share from the load's
    # issue, latency max(512, 600, 959, 1850) + 32.
    x = masked.graph.op("x")
    assert x.kind == "load" and dict(x.attrs)["predicated"].endswith("mask 64x64")
    assert x.rrt == (Reservation("alu", 0, 32), Reservation("lsu", 32, 512), Reservation("dram", 32, 959))
    assert (x.latency, x.issue_cycles, x.variable_latency) == (1882, 544, True)


def test_masked_store_costs_the_unmasked_store(masked, h200):
    # No fill value: predication makes the masked store exactly the unmasked one, 16384 / 32 = 512.
    store = masked.graph.op("y_store")
    assert dict(store.attrs)["predicated"].startswith("tt.store@")
    assert store.rrt == (Reservation("lsu", 0, 512),) == h200.global_store(16384).rrt


def test_where_is_one_select_per_element_without_serializing(masked, h200):
    # exp2 then tl.where(mask, ., 0): MUFU 4096 / 16 = 256, the select 4096 / 128 = 32 on the ALU pipes
    # in parallel, so 256 cycles. The same tile with a lane-dependent branch instead (valid lanes exp2,
    # the others a zero fill) would run the paths back to back: 256 + 38 + 32 = 326.
    y = masked.graph.op("y")
    assert {m.name for m in masked.members["y"]} == {"math.exp2", "arith.select"}
    assert sorted((r.unit, r.cycles) for r in y.rrt) == [("alu", 32), ("mufu", 256)]
    assert y.cycles == y.latency == 256
    assert h200.divergent([h200.exp2(4096), h200.alu(4096)]).cycles == 326 > y.cycles


def test_if_converted_branch_costs_both_sides_back_to_back(branch):
    # then: exp2 (256 MUFU) + mulf (32 ALU) merged = 256; else: exp2 = 256; divergent: 256 + 38 + 256.
    y = branch.graph.op("y")
    assert y.kind == "divergent" and dict(y.attrs)["if_converted"].startswith("scf.if@")
    assert {m.name for m in branch.members["y"]} == {"math.exp2", "arith.mulf", "scf.if"}
    assert y.rrt == (Reservation("mufu", 0, 256), Reservation("alu", 0, 32), Reservation("mufu", 294, 256))
    assert (y.cycles, y.latency, y.issue_cycles) == (550, 550, 550)
    # The loaded x feeds the branch group (both exp2 read it); the accumulation stays its own op.
    assert {(e.src, e.dst) for e in branch.graph.edges} == {("x", "y"), ("y", "acc"), ("acc", "acc")}


def test_branch_rule_against_predication_on_the_same_tile(masked, branch):
    # Per iteration the two kernels do the same load and accumulation; the tail handling differs:
    # predicated select 256 cycles, divergent branch 550 (2 x 256 + 38), i.e. the sum of both sides.
    assert masked.graph.op("x").rrt == branch.graph.op("x").rrt
    assert masked.graph.op("acc").rrt == branch.graph.op("acc").rrt == (Reservation("alu", 0, 32),)
    assert branch.graph.op("y").cycles - masked.graph.op("y").cycles == 256 + 38


def test_branch_on_h100_has_no_reconvergence_gap():
    # h100.toml keeps the seed's "no super-linear reconvergence penalty": 256 + 0 + 256.
    y = _lower("branch_tail", "h100").graph.op("y")
    assert y.cycles == 512 and [r.start for r in y.rrt if r.unit == "mufu"] == [0, 256]


def test_if_select_toy_is_divergent():
    # tests/data/if_select.ttgir: then mulf, else addf, 64 x 64 fp32: 32 + 38 + 32 on h200.
    lowering = lower_loop(DATA / "if_select.ttgir", "h200")
    (op,) = [o for o in lowering.graph.ops if "if_converted" in dict(o.attrs)]
    assert op.kind == "divergent" and op.cycles == 102
    assert [(r.start, r.cycles) for r in op.rrt] == [(0, 32), (70, 32)]


def test_tma_loads_are_never_predicated():
    # tt.descriptor_load has no mask (the TMA unit fills out-of-bounds elements): FA forward is unchanged.
    from twill.frontend.lower import graph_from_kernel

    example = Path(__file__).resolve().parents[1] / "examples" / "flash_attention_fwd.py"
    graph = graph_from_kernel(str(example), "h200")
    assert not any("predicated" in dict(op.attrs) or op.kind == "divergent" for op in graph.ops)
