"""The memory-bound loop terms of ``twill tune`` (twill/tune/membound.py): each checked against arithmetic
from its inputs, not against the value the code computed."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from twill.calibrate.regs import parse_sass_loop_memory
from twill.ir.machine import load_machine
from twill.tune import membound as mb

H200 = load_machine("h200")
L0, B, P, W = 610.0, 21.9, 2.0, 1.24  # machines/h200.toml, results/membound.json


def test_constants_are_the_measured_ones():
    assert [float(H200.const(k)) for k in ("cost.hbm_load_latency", "cost.hbm_stream_bytes_per_cycle",
                                           "cost.hbm_queue_exponent", "cost.hbm_write_cost")] == [L0, B, P, W]
    assert not H200.constants["cost.hbm_load_latency"].estimate


@pytest.mark.parametrize("inflight", [512.0, 4096.0, 16384.0, 131072.0])
def test_hbm_rate_is_littles_law_with_queueing(inflight):
    a = inflight / L0
    assert mb.hbm_rate(inflight, H200) == pytest.approx(a / math.sqrt(1 + (a / B) ** 2))
    assert mb.hbm_rate(inflight, H200) < min(a, B)  # below both limits


def test_hbm_rate_matches_the_microbenchmark():
    # results/membound.json: 16 KB in flight per SM (32 warps x 16 B x 1): 3969.6 GB/s on 132 SMs
    measured = 3969.6e9 / 132 / 1.6e9
    assert mb.hbm_rate(16384, H200) == pytest.approx(measured, rel=0.1)


def test_stores_lower_the_read_limit():
    # one byte stored per byte read: the limit is B / (1 + 1.24)
    assert mb.hbm_rate(1e9, H200, write_ratio=1.0) == pytest.approx(B / (1 + W), rel=1e-3)


def test_l2_reuse_is_a_linear_ramp():
    full, none = 32e6, 82e6
    for f in (0, 20e6, 40e6, 60e6, 81e6, 90e6):
        assert mb.l2_reuse_hit(f, H200) == pytest.approx(min(1, max(0, (none - f) / (none - full))))


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="bytes in flight"):
        mb.hbm_rate(-1, H200)
    with pytest.raises(ValueError, match="footprint"):
        mb.l2_reuse_hit(-1, H200)
    streams = mb.LoopStreams((("x", 1024.0, 8.0),), 0.0, 0.0, 0.0, False)
    with pytest.raises(ValueError, match="ctas_per_sm"):
        mb.streaming_cycles(streams, H200, ctas_per_sm=0, threads=128, sass_memory=None)
    with pytest.raises(ValueError, match="first < second"):
        mb.reuse_footprint([streams, streams], [1, 1], 1, 0, 10, "x")


def test_sass_memory_counts_bytes_and_groups():
    sass = "\n".join(f"        /*{a:04x}*/  {ins} ;" for a, ins in enumerate([
        "LDG.E.U16 R1, desc[UR4][R2.64]", "LDG.E.128 R4, desc[UR4][R2.64]", "FADD R1, R1, R4",
        "STG.E.U16 desc[UR4][R8.64], R1", "LDG.E R5, desc[UR4][R6.64]", "STG.E.128 desc[UR4][R8.64], R4",
        "STG.E desc[UR4][R8.64], R4", "@P0 BRA 0x0", "EXIT"], start=0))
    # loads 2 + 16 + 4, stores 2 + 16 + 4, two runs of loads each closed by a store
    assert parse_sass_loop_memory(sass) == [(22, 22, 2)]


def test_unroll_factor():
    assert mb.unroll_factor(64, 16) == 4
    assert mb.unroll_factor(16, 16) == 1
    assert mb.unroll_factor(0, 16) == 1


def test_streaming_cycles_read_only_stream():
    # 4 CTAs x 128 threads, 4 KB per CTA per trip, no unroll: N = 16 KB in flight per SM
    streams = mb.LoopStreams((("x", 4096.0, 32.0),), 0.0, 0.0, 0.0, False)
    out = mb.streaming_cycles(streams, H200, ctas_per_sm=4, threads=128, sass_memory=(32, 0, 1))
    assert out["inflight_bytes"] == 4 * 4096
    rate = mb.hbm_rate(16384, H200)
    assert out["rate"] == pytest.approx(rate, rel=1e-6)
    assert out["load_time"] == pytest.approx(16384 / rate, rel=1e-6)  # Little's law
    assert out["bandwidth"] == pytest.approx(16384 / B)
    assert out["cycles"] == pytest.approx(max(16384 / rate, 16384 / B, 16384 / 72.0), rel=1e-6)


def test_streaming_cycles_unroll_groups_and_stores():
    # a thread loads 2 B per trip; ptxas unrolls 4 trips in 4 groups (a store after each): one trip in flight
    streams = mb.LoopStreams((("x", 1024.0, 2.0),), 0.0, 0.0, 1024.0, False)
    out = mb.streaming_cycles(streams, H200, ctas_per_sm=8, threads=512, sass_memory=(8, 8, 4))
    assert (out["unroll"], out["groups"], out["inflight_bytes"]) == (4.0, 4.0, 8 * 4 * 1024 / 4)
    assert out["bandwidth"] == pytest.approx((8 * 1024 + W * 8 * 1024) / B)
    # the round trip: the latency at the rate found, with the stores in the queue
    rho = out["rate"] * (1 + W) / B
    assert out["latency"] == pytest.approx(L0 / math.sqrt(1 - rho ** 2), rel=1e-6)
    assert out["load_time"] == pytest.approx(4 * out["latency"] / 4, rel=1e-6)
    # and the rate is the bytes of a compiled trip over it (Little's law)
    assert out["rate"] == pytest.approx(8 * 4 * 1024 / (4 * out["latency"]), rel=1e-4)


def test_l2_hits_come_back_at_the_l2_latency():
    streams = mb.LoopStreams((("x", 4096.0, 32.0),), 0.0, 0.0, 0.0, False)
    out = mb.streaming_cycles(streams, H200, ctas_per_sm=4, threads=128, sass_memory=(32, 0, 1),
                              hit={"x": 1.0})
    assert out["hbm_bytes"] == 0 and out["hit"] == 1.0
    assert out["load_time"] == pytest.approx(float(H200.const("cost.lsu_latency")))


def test_kernel_cycles_shares_resources_across_sibling_loops():
    loops = [(10, 50.0, {"hbm": 100.0, "issue": 300.0}), (10, 50.0, {"hbm": 400.0, "issue": 100.0})]
    # out of step: max(sum of chains 1000, hbm 5000, issue 4000); summing each loop's own bound gives 7000
    assert mb.kernel_cycles(loops) == 5000.0
    assert sum(t * mb.trip_cycles(c, s) for t, c, s in loops) == 7000.0


def test_reuse_footprint_and_hits():
    one = mb.LoopStreams((("x", 1000.0, 8.0),), 0.0, 0.0, 0.0, False)
    two = mb.LoopStreams((("x", 1000.0, 8.0),), 50.0, 1.0, 1000.0, False)
    # loop 0 reads the row (10 x 1000 B per CTA), loop 1 stores it (10 x 1000 B); its re-read does not count
    assert mb.reuse_footprint([one, two], [10, 10], 0, 1, 2000, "x") == 2000 * (10_000 + 10_000)
    hits = mb.reuse_hits([one, two], [10, 10], 2000, H200)
    assert hits[0] == {} and hits[1]["x"] == pytest.approx(mb.l2_reuse_hit(40e6, H200))


def test_trip_parts_drop_the_tile_models_dram_and_lsu():
    stream = {"load_time": 80.0, "bandwidth": 900.0, "port": 300.0}
    units = {"dram": 5000.0, "lsu": 4000.0, "mufu": 30.0}
    chain, shared = mb.trip_parts(compute=100.0, extra=5.0, stream=stream, ctas_per_sm=4, issue=50.0,
                                  units=units)
    assert chain == 105.0
    assert shared == {"hbm": 900.0, "port": 300.0, "issue": 200.0, "mufu": 120.0}


def test_loop_streams_of_a_row_norm():
    from twill.frontend.compile import compile_to_ttgir, load_kernel, target_for
    from twill.frontend.lower import lower_loop
    from twill.frontend.ttgir import parse_ttgir

    root = Path(__file__).resolve().parents[1]
    spec = load_kernel(str(root / "benchmarks" / "tune_user_rmsnorm.py") + "::rmsnorm_rows")
    snaps = compile_to_ttgir(spec, target=target_for(H200), signature=spec.signature,
                             constexprs={"BLOCK": 1024}, num_warps=4, num_stages=2)
    module = parse_ttgir(snaps.scheduled)
    first, second = (mb.loop_streams(lower_loop(module, H200, loop_index=i), 128) for i in (0, 1))
    assert first.streaming and second.streaming
    assert [b for _, b, _ in first.private_loads] == [2048.0]  # x: 1024 fp16
    assert second.store_bytes == 2048.0 and second.shared_load_bytes == 2048.0  # y stored, w shared
    assert first.private_loads[0][0] == second.private_loads[0][0]  # the same row of x, read twice
