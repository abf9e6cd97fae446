"""The hardware terms of twill tune's model of Triton kernels: wgmma layouts, spilled registers, co-resident
CTAs in lock-step.

Each expected value is derived here from the PTX ISA shapes, the machine file's constants and the tile sizes
(instruction counts, bytes, cycles), not read back from the code under test.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from twill.calibrate.regs import parse_sass_loop_local
from twill.ir.costmodel import CostModel
from twill.ir.machine import load_machine
from twill.tune.triton_model import HardwareTerms, effective_cycles

ROOT = Path(__file__).resolve().parents[1]
FA = str(ROOT / "examples" / "flash_attention_fwd.py") + "::attn_fwd"
GEMM = str(ROOT / "examples" / "gemm.py") + "::matmul"
H200 = load_machine("h200")
CM = CostModel(H200)
TC_RATE = float(H200.const("cost.tc_flops_fp16"))


# ------------------------------------------------------------------------------------------ wgmma layout
def test_replicated_rows_double_the_tensor_core_work_and_reads():
    # FA Q K^T at BLOCK_M 64, BLOCK_N 32, 8 warps: warpsPerCTA [8, 1] covers 128 rows of a 64-row tile, so
    # both warp groups compute all of it, each in 2 (n16) x 8 (k16) instructions.
    w = CM.wgmma_work(64, 32, 128, a_in_smem=True, warps_per_cta=(8, 1), instr_n=16)
    assert w.replication == 2
    assert w.instructions == 2 * 2 * 8
    assert w.tc_cycles == pytest.approx(2 * (2 * 64 * 32 * 128) / TC_RATE)
    # each instruction reads A (64 x 16 fp16) and B (16 x 16 fp16)
    assert w.smem_bytes == 32 * (64 * 16 * 2 + 16 * 16 * 2)
    # the same tile at 4 warps: one group, one n32 instruction per k step, A read once per k step
    w4 = CM.wgmma_work(64, 32, 128, a_in_smem=True, warps_per_cta=(4, 1), instr_n=32)
    assert (w4.replication, w4.instructions) == (1, 8)
    assert w4.smem_bytes == 8 * (64 * 16 * 2 + 16 * 32 * 2)


def test_n_split_halves_each_groups_columns_without_replication():
    # P V at BLOCK_M 64, 8 warps: warpsPerCTA [4, 2], each group 64 of the 128 columns, P in registers.
    w = CM.wgmma_work(64, 128, 32, a_in_smem=False, warps_per_cta=(4, 2), instr_n=64)
    assert w.replication == 1 and w.instructions == 2 * 2
    assert w.tc_cycles == pytest.approx(2 * 64 * 128 * 32 / TC_RATE)
    assert w.smem_bytes == 4 * 16 * 64 * 2


def test_default_layout_keeps_the_old_operand_bytes():
    # one group per 64-row slice, the extra groups along N (the formula of wgmma_smem_bytes' docstring)
    for m, n, k, a, warps in ((128, 64, 128, True, None), (64, 64, 128, True, 8), (128, 128, 64, False, 8),
                              (128, 32, 128, True, 4)):
        slices = -(-m // 64)
        groups = slices if warps is None else warps // 4
        g_n = max(1, groups // slices)
        expected = slices * (k * n * 2 + (64 * k * 2 * g_n if a else 0))
        assert CM.wgmma_smem_bytes(m, n, k, a_in_smem=a, warps=warps) == expected


def test_triton_layout_is_read_and_priced(tmp_path):
    pytest.importorskip("triton")
    from twill.tune.api import tune

    out = tune(FA, "h200", {"BLOCK_M": [64], "BLOCK_N": [32]}, num_warps=[8], num_stages=[3], jobs=1,
               cache_dir=str(tmp_path), time_limit=2.0)
    (r,) = out.results
    d = r["details"]
    assert d["gemm_layouts"]["qk"][:2] == [8, 1]
    gemms = {g["name"]: g for g in d["terms"]["gemms"]}
    # the replicated Q K^T runs twice on the Tensor Cores: 2 x 2 x 64 x 32 x 128 / 4096 cycles
    assert gemms["qk"]["tc"] == pytest.approx(2 * 2 * 64 * 32 * 128 / TC_RATE, abs=1)
    defaults = {g["name"]: g for g in d["default_gemms"]}
    assert defaults["qk"]["tc"] == pytest.approx(2 * 64 * 32 * 128 / TC_RATE, abs=1)


# ------------------------------------------------------------------------------------------ local memory
def test_loop_local_bytes_count_the_widths():
    sass = "\n".join(f"        /*{a:04x}*/  {op} ;" for a, op in (
        (0x0, "MOV R1, R2"), (0x10, "STL.64 [R1+0x8], R4"), (0x20, "LDL.LU R3, [R1]"),
        (0x30, "LDL.128 R8, [R1+0x10]"), (0x40, "STL [R1], R2"), (0x50, "@P1 BRA 0x10"), (0x60, "EXIT"),
        (0x70, "STL.128 [R1], R4")))
    # the loop 0x10-0x50 stores 8 + 4 B and loads 4 + 16 B; the STL after EXIT is not in it
    assert parse_sass_loop_local(sass) == (12, 20)
    assert parse_sass_loop_local("        /*0000*/  EXIT ;") is None


def test_spills_go_to_l2_when_they_do_not_fit_in_l1():
    l1 = int(H200.const("chip.l1_smem_per_sm"))
    reserved = int(H200.const("chip.smem_reserved_per_cta"))
    # below the 48 KB default the CTAs take their own need; above it the whole 228 KB carve-out
    assert CM.l1_free_bytes(20_000, 2) == l1 - 2 * (20_000 + reserved)
    assert CM.l1_free_bytes(100_000, 1) == l1 - int(H200.const("chip.smem_per_sm")) == 28 * 1024
    l2 = float(H200.const("cost.tma_kernel_bytes_per_cycle"))
    port = float(H200.const("cost.smem_bytes_per_cycle"))
    # 128 threads x 1248 B per trip; a 1672 B stack frame x 128 threads x 2 CTAs does not fit 20 KB
    unit, cycles = CM.local_memory_cycles(128 * 1248, working_set=1672 * 128 * 2, l1_free=20_000)
    assert unit == "tma" and cycles == pytest.approx(128 * 1248 / l2)
    unit, cycles = CM.local_memory_cycles(4096, working_set=8192, l1_free=20_000)
    assert unit == "smem" and cycles == pytest.approx(4096 / port)


# ------------------------------------------------------------------------------------------ co-resident CTAs
def _terms(tc: float, issue: float, tma: float = 0.0) -> HardwareTerms:
    units = {"tc": tc, "tma": tma}
    return HardwareTerms(issue, issue, "sass", units, 0.0, 0, 0.0, 0.0, 0.0, dict(units), (), 0.0, "tma",
                         0.0, tc + issue)


def test_lockstep_ctas_add_their_tensor_core_and_issue_time():
    t = _terms(tc=1024, issue=623)
    # one CTA: its own trip
    assert effective_cycles(1900, t, 1, 1800) == 1900
    # two CTAs in step: the compute chain plus the other's Tensor Core time and issue slots
    assert effective_cycles(1900, t, 2, 1800) == 1800 + 1024 + 623
    # the load waits (L - C) are filled: a long L with a short C is not charged twice
    assert effective_cycles(4000, t, 2, 1000) == 4000


def test_throughput_bound_still_holds():
    t = _terms(tc=100, issue=50, tma=900)
    assert effective_cycles(500, t, 3, 400) == 3 * 900


def test_predict_says_why_a_config_does_not_fit(tmp_path):
    pytest.importorskip("triton")
    from twill.tune.api import tune

    # 128 x 256 x 128 GEMM tiles at 4 stages: 4 x (128 + 256) x 128 x 2 B of shared memory > 227 KB
    out = tune(GEMM, "h200", {"BLOCK_M": [128], "BLOCK_N": [256], "BLOCK_K": [128]}, num_warps=[8],
               num_stages=[4], jobs=1, cache_dir=str(tmp_path), time_limit=2.0, problem={"M": 4096, "N": 4096,
                                                                                          "K": 4096})
    (r,) = out.results
    assert r["fits"] is False and r["predicted_ms"] is None and r["error"] is None
    assert r["reason"].startswith("shared memory") and str(r["details"]["shared_bytes"]) in r["reason"]
    assert r["details"]["shared_bytes"] >= 4 * (128 + 256) * 128 * 2


def test_any_ptxas_serialization_note_serializes_the_wgmma():
    from twill.tune.triton_model import wgmma_serialized

    c7515 = ("(C7515) Potential Performance Loss: wgmma.mma_async instructions are serialized due to "
             "non wgmma instructions defining accumulator registers of a wgmma")
    assert wgmma_serialized((c7515,), False)
    assert wgmma_serialized((), True)
    assert not wgmma_serialized(("ptxas info    : Used 90 registers",), False)


# ------------------------------------------------------------------------------ L2 rate in the simulation
def _load_graph(nbytes: int):
    from twill.ir.graph import Graph

    g = Graph("loads")
    g.add_op("K", "tma_load", **CM.tma_load(nbytes).op_kwargs(), smem=nbytes)
    g.add_op("S", "gemm", **CM.gemm(64, 64, 64).op_kwargs(), regs=32, result_bytes=64 * 64 * 4)
    g.add_edge("K", "S", blocking=True, carrier="smem")
    return g


def test_simulated_loads_hold_the_tma_unit_at_the_kernel_rate():
    from twill.tune.triton_model import kernel_rate_loads

    raw = float(H200.const("cost.tma_bytes_per_cycle"))
    kernel = float(H200.const("cost.tma_kernel_bytes_per_cycle"))
    floor = int(H200.const("cost.tma_latency"))
    for nbytes in (32768, 65536):
        busy_raw = math.ceil(nbytes / raw)
        g = kernel_rate_loads(_load_graph(nbytes), CM)
        k = g.op("K")
        (res,) = [r for r in k.rrt if r.unit == "tma"]
        assert res.cycles == round(busy_raw * raw / kernel)
        # a load's latency: the longer of its transfer and the measured L2 latency
        assert k.latency == max(res.cycles, floor)
        # the GEMM is not a TMA op: untouched
        assert g.op("S").rrt == _load_graph(nbytes).op("S").rrt


# ------------------------------------------------------------------------------------------ spill reload
def test_spilled_registers_reload_on_the_chain():
    from twill.tune.triton_model import spill_reload_cycles

    lat = float(H200.const("cost.tma_latency"))
    # 160 KB per trip on the L2 path: its transfer and one L2 latency on the chain
    l2_cycles = 128 * 1248 / float(H200.const("cost.tma_kernel_bytes_per_cycle"))
    assert spill_reload_cycles("tma", l2_cycles, CM) == pytest.approx(l2_cycles + lat)
    # in L1: the transfer only
    assert spill_reload_cycles("smem", 292.0, CM) == 292.0
    assert spill_reload_cycles("tma", 0.0, CM) == 0.0
    with pytest.raises(ValueError, match="local-memory cycles"):
        spill_reload_cycles("tma", -1.0, CM)


def test_reload_lengthens_the_compute_chain_not_the_latency_bound():
    from dataclasses import replace

    t = replace(_terms(tc=1024, issue=272, tma=4975), reload=3803 + 872)
    # one CTA: C + r beats L and the throughput bound 4975
    assert effective_cycles(1383, t, 1, 1383) == 1383 + 3803 + 872
    # two CTAs: 2 x 4975 is the bound (C + r + D = 6058 + 1296 < 9950)
    assert effective_cycles(1417, t, 2, 1416) == 2 * 4975


# ------------------------------------------------------------------------------------------ last wave
def test_last_wave_runs_at_its_own_occupancy():
    from twill.tune.triton_model import tail_ctas_per_sm
    from twill.tune.worker import predict_from_parts

    # 4096^3 GEMM, 64 x 128 tiles: 2048 CTAs, 3 per SM: 5 waves of 396, then 68 CTAs, one per SM
    assert tail_ctas_per_sm(2048, 132, 3) == 1
    # 1024 CTAs at 2 per SM: 3 waves of 264, 232 left: 2 on 100 SMs, so 2
    assert tail_ctas_per_sm(1024, 132, 2) == 2
    assert tail_ctas_per_sm(132, 132, 1) == 1
    with pytest.raises(ValueError):
        tail_ctas_per_sm(0, 132, 1)
    # 6 waves; the last one's trips at 700 cycles instead of 1800: (5 x (2 + 64 x 1800) + 2 + 64 x 700)
    r = predict_from_parts(per_trip_cycles=1800, trips=64, ctas=2048, ctas_per_sm=3, sms=132, clock_ghz=1.0,
                           prologue=1, epilogue=1, flops=1e9, tail_per_trip_cycles=700)
    assert r["waves"] == 6
    assert r["ms"] == pytest.approx((5 * (2 + 64 * 1800) + 2 + 64 * 700) / 1e9 * 1e3)
    same = predict_from_parts(per_trip_cycles=1800, trips=64, ctas=2048, ctas_per_sm=3, sms=132,
                              clock_ghz=1.0, prologue=1, epilogue=1, flops=1e9)
    assert same["ms"] == pytest.approx(6 * (2 + 64 * 1800) / 1e9 * 1e3)


# ---------------------------------------------------------------- serialized wgmma pipeline, the SM's L2 port
def test_loop_barriers_count_the_cta_wide_waits_of_the_loop():
    from twill.calibrate.regs import parse_sass_loop_barriers

    sass = "\n".join(f"        /*{a:04x}*/  {op} ;" for a, op in (
        (0x0, "BAR.SYNC.DEFER_BLOCKING 0x0"), (0x10, "BAR.SYNC.DEFER_BLOCKING 0x0"),
        (0x20, "BAR.ARRIVE 0x1, 0x100"),
        (0x30, "BAR.RED.POPC RZ, 0x0, PT"), (0x40, "HGMMA.64x128x16.F32 R24, gdesc[UR20], R24, gsb0"),
        (0x50, "@!P0 BRA 0x10"), (0x60, "BAR.SYNC.DEFER_BLOCKING 0x0"), (0x70, "EXIT")))
    # the loop is 0x10-0x50: one BAR.SYNC and one BAR.RED; the arrive does not wait, 0x0 and 0x60 are outside
    assert parse_sass_loop_barriers(sass) == 2
    assert parse_sass_loop_barriers("        /*0000*/  EXIT ;") is None


def _gemm_graph(warps: int):
    from twill.ir.graph import Graph

    g = Graph("gemm")
    g.add_op("acc", "gemm", **CM.gemm(128, 128, 64, warps=warps, serialized=True).op_kwargs(), regs=64,
             result_bytes=128 * 128 * 4)
    return g


def test_serial_chain_is_the_gemm_chain_then_the_issue_then_the_barriers():
    from twill.tune.triton_model import serial_chain_cycles

    tail = float(H200.const("cost.tc_serial_latency"))
    bar = float(H200.const("handoff.named_barrier"))
    # 8 warps: two warp groups, each 4 x m64n128k16 (64 cycles each) waited one by one; together they keep
    # the Tensor Cores busy for 2 x 128 x 128 x 64 / 4096 = 512 cycles, then the last one's wait
    tc = 2 * 128 * 128 * 64 / TC_RATE
    got = serial_chain_cycles(_gemm_graph(8), CM, issue=186, barriers=4)
    assert got == pytest.approx(tc + tail + 186 + 4 * bar)
    # 4 warps: one warp group runs the 2 x 4 instructions one after another, each its 64 cycles + the wait
    one = 2 * 64 * 128 * 16 / TC_RATE + tail
    got = serial_chain_cycles(_gemm_graph(4), CM, issue=95, barriers=4)
    assert got == pytest.approx(8 * one + 95 + 4 * bar)
    with pytest.raises(ValueError, match="barriers"):
        serial_chain_cycles(_gemm_graph(8), CM, issue=1, barriers=-1)


def test_a_serialized_trip_is_bounded_by_its_own_chain_not_added_to_the_other_ctas():
    from dataclasses import replace

    t = replace(_terms(tc=512, issue=186, tma=400), serial_chain=893.0)
    # one CTA: the chain (893) beats the simulated trip (782)
    assert effective_cycles(782, t, 1, 782) == 893
    # two CTAs: the other CTA's Tensor Core time and issue fill this one's issue and barrier phases, so the
    # in-step bound C + D = 782 + 698 holds, not 893 + 698
    assert effective_cycles(782, t, 2, 782) == 782 + 512 + 186
    # not serialized: no such bound
    assert effective_cycles(700, _terms(tc=512, issue=186), 1, 700) == 700


def test_co_resident_ctas_share_the_sms_l2_port():
    from dataclasses import replace

    from twill.tune.triton_model import sm_units

    stream = float(H200.const("cost.tma_kernel_bytes_per_cycle"))
    port = float(H200.const("cost.l2_sm_bytes_per_cycle"))
    units = {"tc": 512.0, "tma": 32768 / stream, "smem": 256.0}
    shared = sm_units(units, CM)
    assert shared["tma"] == pytest.approx(32768 / port)
    assert shared["tc"] == 512.0 and shared["smem"] == 256.0
    # spilled registers on the L2 path keep their rate: only the loads' part moves
    spilled = sm_units({"tma": 32768 / stream + 1000.0}, CM, local=1000.0)
    assert spilled["tma"] == pytest.approx(32768 / port + 1000.0)
    with pytest.raises(ValueError, match="exceed"):
        sm_units({"tma": 10.0}, CM, local=20.0)
    # 3 CTAs of 128x128x64 (32 KB of loads, 512 Tensor Core cycles each): the SM bound is 3 x 512 (Tensor
    # Cores), not 3 x 32768 / 42 (one stream's rate three times)
    t = replace(_terms(tc=512, issue=94, tma=32768 / stream), shared_units=shared)
    assert 3 * t.sm_throughput == pytest.approx(3 * max(512, 32768 / port))
    want = max(783 + 2 * (512 + 94), 3 * max(512, 32768 / port))
    assert effective_cycles(783, t, 3, 783) == pytest.approx(want)


def test_the_gemm_sync_constants_are_what_the_h200_runs_give():
    import json
    import sys

    sys.path.insert(0, str(ROOT / "benchmarks" / "calibrate"))
    import derive_gemm_sync

    results = ROOT / "benchmarks" / "calibrate" / "results"
    sync = json.loads((results / "gemm_sync.json").read_text(encoding="utf-8"))
    occupancy = json.loads((results / "triton_occupancy.json").read_text(encoding="utf-8"))
    derived = derive_gemm_sync.derive(sync, occupancy)
    assert derived == json.loads((results / "gemm_sync_derived.json").read_text(encoding="utf-8"))
    # the port rate in the machine file is the largest per-SM rate measured: k x (BM + BN) x BK x 2 / cycles
    best = max((r["ctas_per_sm"] * (r["config"][0] + r["config"][1]) * r["config"][2] * 2
                / r["cycles_per_trip_at_1p6ghz"]) for r in occupancy["configs"]
               if "cycles_per_trip_at_1p6ghz" in r)
    assert float(H200.const("cost.l2_sm_bytes_per_cycle")) == round(best)
    # a bar.sync added to two warp groups' serialized loop costs the measured named-barrier hand-off
    bar = float(H200.const("handoff.named_barrier"))
    assert derived["bar_sync_cycles"]["n128"] == pytest.approx(bar, abs=1.5)


def test_tune_prices_the_serialized_8_warp_gemm_by_its_chain(tmp_path):
    pytest.importorskip("triton")
    from twill.tune.api import tune

    out = tune(GEMM, "h200", {"BLOCK_M": [128], "BLOCK_N": [128], "BLOCK_K": [64]}, num_warps=[4, 8],
               num_stages=[4], jobs=1, cache_dir=str(tmp_path), time_limit=2.0,
               problem={"M": 4096, "N": 4096, "K": 4096})
    by_warps = {r["num_warps"]: r for r in out.results}
    d8, d4 = by_warps[8]["details"], by_warps[4]["details"]
    # ptxas serializes the 8-warp kernel (C7515) and not the 4-warp one; Triton's loop has 4 bar.sync
    assert d8["wgmma_serialized"] and not d4["wgmma_serialized"]
    assert d8["loop_barriers"] == d4["loop_barriers"] == 4
    # the chain: two warp groups keep the Tensor Cores busy 2 x 128 x 128 x 64 / 4096 cycles, then the last
    # instruction's wait, the trip's issue slots (SASS instructions x 8 warps / 4 schedulers), 4 barriers
    tail = float(H200.const("cost.tc_serial_latency"))
    bar = float(H200.const("handoff.named_barrier"))
    issue = d8["loop_sass_instructions"] * 8 / 4
    want = 2 * 128 * 128 * 64 / TC_RATE + tail + issue + 4 * bar
    assert d8["terms"]["serial_chain"] == pytest.approx(want, abs=0.2)
    assert d8["cycles_per_trip"] >= d8["terms"]["serial_chain"] - 0.1
    assert d4["terms"]["serial_chain"] == 0.0
    # one CTA per SM at 4 stages (4 x 32 KB of buffers): the 8-warp trip is longer than the 4-warp one
    assert d8["ctas_per_sm"] == d4["ctas_per_sm"] == 1
    assert by_warps[8]["predicted_ms"] > by_warps[4]["predicted_ms"]


def test_a_serialized_chain_caps_the_simulated_chain_and_keeps_the_load_waits():
    from dataclasses import replace

    # simulated with loads (L 4400) and without (C 3997), the serialized chain S 3325: the trip's own
    # chain is S, its load waits L - C = 403 stay on top of it
    t = replace(_terms(tc=1024, issue=855, tma=400), serial_chain=3325.0)
    assert effective_cycles(4400, t, 1, 3997) == 3325 + (4400 - 3997)
    # two CTAs: S plus the other CTA's Tensor Core time and issue (1024 + 855)
    assert effective_cycles(4400, t, 2, 3997) == max(3325 + 403, 3325 + 1024 + 855)
    # a simulated chain already under S is left alone (S binds as its own bound)
    assert effective_cycles(3000, t, 1, 3000) == 3325
    # not serialized, or twill's own schedule (no compute_cycles): nothing capped
    assert effective_cycles(4400, _terms(tc=1024, issue=855, tma=400), 1, 3997) == 4400
    assert effective_cycles(4400, t, 1) == 4400
