"""The GEMM terms of twill tune's Triton model: a serialized chain as Triton's wgmma layout issues it, a
serialized trip's loads issued after its chains, and the shared-memory ports shared by TMA copies and wgmma
operand reads.

Each expected value is derived here from the PTX ISA's wgmma shapes, the machine file's constants and the
tile sizes, not read back from the code under test.
"""

from __future__ import annotations

import pytest

from twill.ir.costmodel import CostModel
from twill.ir.graph import Graph
from twill.ir.machine import load_machine
from twill.tune import triton_model as tm

H200 = load_machine("h200")
CM = CostModel(H200)
TC_RATE = float(H200.const("cost.tc_flops_fp16"))
TAIL = float(H200.const("cost.tc_serial_latency"))
TMA_LATENCY = float(H200.const("cost.tma_latency"))
SMEM_RATE = float(H200.const("cost.smem_bytes_per_cycle"))


def _instr(n: int) -> float:
    """Cycles of one m64 x n x k16 fp16 wgmma on the Tensor Cores."""
    return 2 * 64 * n * 16 / TC_RATE


def test_serialized_chain_follows_the_layouts_n_split():
    # 64x256x64 at 8 warps, warpsPerCTA [4, 2]: each group 64 rows x 128 columns, 4 k16 steps of
    # m64n128k16, the two groups side by side on the Tensor Cores
    cost = CM.gemm(64, 256, 64, warps=8, serialized=True, warps_per_cta=(4, 2))
    busy = 2 * 64 * 256 * 64 / TC_RATE
    assert sum(r.cycles * r.count for r in cost.rrt if r.unit == "tc") == pytest.approx(busy)
    assert cost.latency == pytest.approx(max(busy, 4 * (_instr(128) + TAIL)))
    # the M split (no layout) prices each group's half of 64 rows as whole m64n256k16 instructions
    m_split = CM.gemm(64, 256, 64, warps=8, serialized=True)
    assert m_split.latency == pytest.approx(4 * (_instr(256) + TAIL))
    assert cost.latency < m_split.latency


def test_serialized_chain_with_the_m_split_layout_is_unchanged():
    # 128x128x64 at 8 warps, warpsPerCTA [8, 1]: each group one 64-row slice, as the M split has it
    for m, n in ((128, 128), (128, 256), (256, 128)):
        a = CM.gemm(m, n, 64, warps=8, serialized=True, warps_per_cta=(8, 1))
        b = CM.gemm(m, n, 64, warps=8, serialized=True)
        assert (a.rrt, a.latency) == (b.rrt, b.latency)


def test_serialized_chain_counts_replicated_rows():
    # 64x32x128 at 8 warps, warpsPerCTA [8, 1]: 8 warps x 16 rows cover 128 rows, so both groups compute
    # the whole 64 x 32 product: twice the Tensor Core work, 8 k16 steps of m64n32k16 per group
    cost = CM.gemm(64, 32, 128, warps=8, serialized=True, warps_per_cta=(8, 1))
    tc = sum(r.cycles * r.count for r in cost.rrt if r.unit == "tc")
    assert tc == pytest.approx(2 * (2 * 64 * 32 * 128) / TC_RATE)
    assert cost.latency >= 8 * (_instr(32) + TAIL)


def test_a_layout_of_other_warps_is_refused():
    with pytest.raises(ValueError, match="warpsPerCTA"):
        CM.gemm(64, 256, 64, warps=8, serialized=True, warps_per_cta=(4, 1))


def test_serialize_gemms_reads_the_layout():
    g = Graph("gemm")
    g.add_op("acc", "gemm", **CM.gemm(64, 256, 64, warps=8).op_kwargs(), regs=64, result_bytes=64 * 256 * 4)
    operands = {"acc": (64, 256, 64, True, "f16")}
    laid = tm.serialize_gemms(g, operands, 8, CM, {"acc": (4, 2, 128)})
    plain = tm.serialize_gemms(g, operands, 8, CM)
    assert laid.op("acc").latency == pytest.approx(max(2 * 64 * 256 * 64 / TC_RATE, 4 * (_instr(128) + TAIL)))
    assert plain.op("acc").latency == pytest.approx(4 * (_instr(256) + TAIL))
    # a layout that does not have the kernel's warps (not Triton's for this config) falls back to the M split
    other = tm.serialize_gemms(g, operands, 8, CM, {"acc": (4, 1, 256)})
    assert other.op("acc").latency == plain.op("acc").latency
    # the chain of the serialized-trip bound is the layout's
    assert tm.serial_gemm_chains(laid, CM) == pytest.approx(
        max(laid.op("acc").latency, 2 * 64 * 256 * 64 / TC_RATE + TAIL))


def test_serialized_loads_wait_for_the_chain():
    # 2 stages: the chain, the L2 latency and the transfer lie between a load's issue and its use
    assert tm.serial_round_trip_cycles(1080.0, 1170.0, 2, CM) == pytest.approx(1080 + TMA_LATENCY + 1170)
    # 4 stages: three trips to cover them
    assert tm.serial_round_trip_cycles(568.0, 780.0, 4, CM) == pytest.approx((568 + TMA_LATENCY + 780) / 3)
    with pytest.raises(ValueError, match="num_stages"):
        tm.serial_round_trip_cycles(1.0, 1.0, 1, CM)
    with pytest.raises(ValueError, match=">= 0"):
        tm.serial_round_trip_cycles(-1.0, 1.0, 2, CM)


def _loop(m: int, n: int, k: int, warps: int, serialized: bool) -> tuple[Graph, dict]:
    a, b = m * k * 2, n * k * 2
    g = Graph("loop")
    g.add_op("A", "tma_load", **CM.tma_load(a).op_kwargs(), smem=a)
    g.add_op("B", "tma_load", **CM.tma_load(b).op_kwargs(), smem=b)
    g.add_op("acc", "gemm", **CM.gemm(m, n, k, warps=warps, serialized=serialized).op_kwargs(), regs=64,
             result_bytes=m * n * 4)
    g.add_edge("A", "acc", blocking=True, carrier="smem")
    g.add_edge("B", "acc", blocking=True, carrier="smem")
    return g, {"acc": (m, n, k, True, "f16")}


def test_tma_copies_and_wgmma_reads_share_the_smem_ports():
    # 64x256x64 at 4 warps, warpsPerCTA [4, 1]: 40 KB of loads per trip; 4 m64n256k16 SS instructions, each
    # reading A (64 x 16 fp16) and B (16 x 256 fp16)
    g, ops = _loop(64, 256, 64, 4, False)
    t = tm.hardware_terms(g, ops, 4, CM, loop_instructions=80, num_stages=4, layouts={"acc": (4, 1, 256)})
    loads = (64 + 256) * 64 * 2
    reads = 4 * (64 * 16 * 2 + 16 * 256 * 2)
    raw = float(H200.const("cost.tma_bytes_per_cycle"))
    # the terms count the TMA bytes from the loads' reservations (bytes / raw rate, rounded up per load)
    assert t.smem_bytes == pytest.approx(loads + reads, abs=2 * raw)
    assert t.units["smem"] == pytest.approx((loads + reads) / SMEM_RATE, abs=2 * raw / SMEM_RATE)
    # one CTA's throughput bound is that port time: 80 KB at 128 B/cycle = 640 cycles, above the Tensor
    # Cores' 512 (the H200 runs the trip in 673-714 cycles)
    assert t.throughput == pytest.approx(max(2 * 64 * 256 * 64 / TC_RATE, (loads + reads) / SMEM_RATE,
                                             t.units["tma"]), abs=1.0)
    # not serialized: no serialized round trip
    assert t.serial_round_trip == 0.0
    with pytest.raises(ValueError, match=">= 0"):
        tm.smem_port_bytes(-1.0, 0.0)


def test_a_serialized_trip_at_two_stages_waits_for_its_chain_and_its_loads():
    g, ops = _loop(128, 256, 64, 8, True)
    lay = {"acc": (8, 1, 256)}
    g = tm.serialize_gemms(g, ops, 8, CM, lay)
    t = tm.hardware_terms(g, ops, 8, CM, loop_instructions=180, num_stages=2, layouts=lay, serialized=True,
                          loop_barriers=4)
    chain = max(4 * (_instr(256) + TAIL), 2 * 128 * 256 * 64 / TC_RATE) + TAIL  # two groups, 4 steps each
    assert t.serial_gemm_chains == pytest.approx(chain)
    assert t.serial_round_trip == pytest.approx(chain + TMA_LATENCY + t.units["tma"])
    # it bounds one CTA's trip whatever its simulation says
    assert tm.effective_cycles(1280.0, t, 1, 1173.0) >= t.serial_round_trip
    # at 3 stages two trips cover it
    t3 = tm.hardware_terms(g, ops, 8, CM, loop_instructions=180, num_stages=3, layouts=lay, serialized=True,
                           loop_barriers=4)
    assert t3.serial_round_trip == pytest.approx((chain + TMA_LATENCY + t3.units["tma"]) / 2)
