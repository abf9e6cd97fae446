"""Cost model: divergent, uniform and predicated control flow (seed 003), and the register model helpers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from twill.ir.costmodel import CostModel, OpCost
from twill.ir.graph import Reservation
from twill.ir.machine import load_machine

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "calibrate" / "results"


@pytest.fixture(scope="module")
def h100() -> CostModel:
    return CostModel(load_machine("h100"))


@pytest.fixture(scope="module")
def h200() -> CostModel:
    return CostModel(load_machine("h200"))


@pytest.mark.parametrize("k", [1, 2, 3, 4, 8, 16, 32])
def test_divergent_paths_serialize_linearly(h100, k):
    # Seed 003: T(k) ~ s k with no super-linear reconvergence penalty (h100: r = 0).
    path = h100.alu(4096, 2.0)
    cost = h100.divergent([path] * k)
    assert cost.cycles == k * path.cycles
    assert cost.latency == k * path.cycles
    assert cost.issue_cycles == k * path.cycles
    assert sum(r.cycles for r in cost.rrt) == k * path.cycles
    # Paths do not overlap: each starts where the previous ended.
    starts = sorted(r.start for r in cost.rrt)
    assert starts == [i * path.cycles for i in range(k)]


def test_divergent_adds_the_measured_reconvergence_gap(h200):
    r = int(h200.machine.const("cost.divergence_reconverge"))
    assert r == 38
    a, b = h200.alu(4096), h200.exp2(2048)
    cost = h200.divergent([a, b])
    assert cost.cycles == a.cycles + r + b.cycles
    assert [x.unit for x in cost.rrt] == ["alu", "mufu"]
    assert cost.rrt[1].start == a.cycles + r


def test_divergent_model_matches_the_h200_measurement(h200):
    # T(k) measured for k distinct 2048-FFMA paths in one warp; the model with s = T(1) and the fitted
    # reconvergence gap predicts every T(k) within 1 %.
    raw = json.loads((RESULTS / "microbench.json").read_text(encoding="utf-8"))
    runs = raw["tests"]["diverge"]["result"]["cases"]
    cases = {(c["paths"], c["masked"]): c["median_cycles"] for c in runs}
    one = cases[(1, 0)]
    path = OpCost("path", (Reservation("alu", 0, one),), latency=one, issue_cycles=one, warps=1)
    for k in (2, 3, 4, 8, 16, 32):
        predicted = h200.divergent([path] * k).cycles
        assert abs(predicted - cases[(k, 0)]) / cases[(k, 0)] < 0.01, k
    # Predication: one path plus a masked select over all lanes costs one path, for any k.
    for k in (2, 32):
        assert abs(cases[(k, 1)] - one) / one < 0.01


def test_divergent_keeps_async_and_blocking_flags(h100):
    load = h100.tma_load(16384)
    cost = h100.divergent([h100.alu(1024), load])
    assert cost.variable_latency and cost.blocking_result
    assert cost.latency == h100.alu(1024).cycles + load.latency
    assert cost.warps == max(4, load.warps)


def test_divergent_one_path_is_the_path(h100):
    path = h100.exp2(8192)
    assert h100.divergent([path]).rrt == path.rrt


def test_control_flow_needs_paths(h100):
    with pytest.raises(ValueError, match="at least one path"):
        h100.divergent([])
    with pytest.raises(ValueError, match="at least one path"):
        h100.uniform_branch([])


def test_predicated_costs_the_full_op_without_serialization(h100):
    # A masked op: every lane issues it, so a tile that keeps 1 of 32 lanes costs the full tile; the
    # predicate adds one compare per mask element on the ALU pipes, far below a second path.
    full = h100.alu(16384, 2.0)
    masked = h100.predicated(full, 128)
    assert masked.cycles == full.cycles + 1  # 128 compares / 128 lanes per cycle
    assert masked.cycles < h100.divergent([full, full]).cycles
    assert masked.kind == full.kind and masked.warps == full.warps


def test_predicated_final_tile_of_a_load(h100):
    # A masked final tile of a pointer load costs a full tile: the mask is computed first (ALU), then
    # the load is issued for every lane; latency and busy time grow by the mask only.
    load = h100.global_load(64 * 128 * 2)
    masked = h100.predicated(load, 64, ops_per_element=2.0)
    alu = next(r for r in masked.rrt if r.unit == "alu")
    lsu = next(r for r in masked.rrt if r.unit == "lsu")
    assert alu.start == 0 and alu.cycles == 1
    assert lsu.start == 1 and lsu.cycles == load.rrt[0].cycles
    assert masked.latency == load.latency + 1 and masked.variable_latency and masked.blocking_result


def test_predicated_without_mask_work_is_unchanged(h100):
    op = h100.exp2(8192)
    assert h100.predicated(op, 0) is op


def test_uniform_branch_covers_every_path_without_serializing(h100):
    a = h100.alu(16384)                 # 128 cycles on the ALU
    b = h100.exp2(8192, alu_ops_per_element=1.0)  # 512 on MUFU, 64 on the ALU
    cost = h100.uniform_branch([a, b])
    units = {r.unit: r for r in cost.rrt}
    assert units["alu"].cycles == 128 and units["mufu"].cycles == 512
    assert cost.cycles == 512 < h100.divergent([a, b]).cycles
    assert cost.latency == max(a.latency, b.latency)


def test_uniform_branch_merges_disjoint_spans(h100):
    p1 = OpCost("x", (Reservation("alu", 0, 10),), latency=10, issue_cycles=10)
    p2 = OpCost("y", (Reservation("alu", 20, 5), Reservation("alu", 5, 10)), latency=25, issue_cycles=25)
    cost = h100.uniform_branch([p1, p2])
    spans = sorted((r.start, r.end) for r in cost.rrt)
    assert spans == [(0, 15), (20, 25)]


@pytest.mark.parametrize(("threads", "cap"), [(32, 255), (64, 255), (128, 255), (256, 255), (384, 168),
                                              (512, 128), (640, 96), (768, 80), (1024, 64)])
def test_register_cap(h100, threads, cap):
    assert h100.register_cap(threads) == cap


def test_register_cap_rejects_no_threads(h100):
    with pytest.raises(ValueError):
        h100.register_cap(0)


def test_thread_registers(h100):
    # FA forward, 128x128 tiles on 8 warps: S (64 KB) 64 + P (32 KB) 32 + O (64 KB) 64 + overhead 26.
    assert h100.machine.group_overhead_regs == 26
    assert h100.thread_registers([65536, 32768, 65536], 8) == 186
    assert h100.thread_registers([65536], 4, overhead=0) == 128
    assert h100.thread_registers([], 4) == 26


def test_serialized_gemm_matches_the_h200_measurement(h200):
    # ptxas C7511: a wait after every wgmma. Measured per warp group on the H200 (wgmma_serial.json):
    # 8 x m64n128k16 in 958.3 cycles, 16 (two accumulators, 128 rows on one warp group) in 1902.8, and
    # two warp groups of 8 each in 1056.3 (the Tensor Cores nearly saturated). The model: each
    # instruction 2*64*128*16/4096 = 64 cycles + tc_serial_latency (56) = 120, chains of the warp groups
    # side by side, never faster than the 2mnk/4096 throughput time.
    raw = json.loads((RESULTS / "wgmma_serial.json").read_text(encoding="utf-8"))
    measured = {c["name"]: c["median_cycles_per_tile_step"] for c in raw["result"]["cases"]}
    assert h200.machine.const("cost.tc_serial_latency") == 56
    one = h200.gemm(64, 128, 128, warps=4, serialized=True)
    two_acc = h200.gemm(128, 128, 128, warps=4, serialized=True)
    two_groups = h200.gemm(128, 128, 128, warps=8, serialized=True)
    assert (one.latency, two_acc.latency, two_groups.latency) == (8 * 120, 16 * 120, 1024)
    for cost, name in ((one, "wg1_m64_serial_one_cta"), (two_acc, "wg1_m128_serial_one_cta"),
                       (two_groups, "wg2_m64_each_serial_one_cta")):
        assert abs(cost.latency - measured[name]) / measured[name] < 0.04, name
    # Synchronous: the warps wait for every instruction; the Tensor Cores are busy 64 of each 120 cycles,
    # one rectangle per instruction, so another CTA's GEMM can use the gaps.
    assert not one.blocking_result
    assert [(r.start, r.cycles) for r in one.rrt] == [(120 * i, 64) for i in range(8)]
    assert one.issue_cycles == one.rrt[-1].end == 7 * 120 + 64
    assert sum(r.cycles for r in two_acc.rrt) == h200.gemm(128, 128, 128, warps=4).rrt[0].cycles == 1024
    # Pipelined, the same GEMM is issued in tc_issue cycles and done 88 cycles after the Tensor Cores.
    assert h200.gemm(128, 128, 128, warps=4).latency == 1024 + 88 < two_acc.latency


def test_serialized_gemm_only_on_hopper():
    with pytest.raises(ValueError, match="tcgen05"):
        CostModel(load_machine("b200")).gemm(128, 128, 64, serialized=True)


@pytest.mark.parametrize(("threads", "registers", "smem", "ctas"), [
    (128, 255, 98336, 2),    # FA fwd BN 64, 2 stages, 4 warps: 2 x (4 warps x 8192 registers) = 65536
    (256, 138, 98336, 1),    # 8 warps at 138 (-> 144) registers: 36864 per CTA, 2 would need 73728
    (128, 253, 131128, 1),   # 2 x (131128 + 1024 reserved) B > 228 KB of shared memory
    (256, 187, 229432, 1),
    (128, 32, 0, 16),        # 2048 threads per SM (and 16 x 4096 registers)
    (32, 16, 0, 32),         # 32 CTAs per SM
    (128, 255, 232449, 0),   # more shared memory than an SM has
])
def test_ctas_per_sm(h200, threads, registers, smem, ctas):
    assert h200.ctas_per_sm(threads, registers, smem) == ctas


def test_ctas_per_sm_matches_the_driver_on_the_h200(h200):
    # cuOccupancyMaxActiveBlocksPerMultiprocessor of the eight Triton FA forward kernels, as compiled.
    rows = json.loads((RESULTS / "fa_occupancy.json").read_text(encoding="utf-8"))["configs"]
    assert len(rows) == 8
    for r in rows:
        assert h200.ctas_per_sm(r["threads"], r["n_regs"], r["shared_bytes"]) == r["ctas_per_sm"], r
    assert sorted(r["ctas_per_sm"] for r in rows) == [1] * 7 + [2]


def test_ctas_per_sm_rejects_nonsense(h200):
    with pytest.raises(ValueError):
        h200.ctas_per_sm(0, 32, 0)
    with pytest.raises(ValueError):
        h200.ctas_per_sm(128, -1, 0)
