"""Twill-SWP refuses at once when its one consumer group can never hold the registers (issue 26).

The floors are derived by hand (H100: group overhead 26, per-thread limit 255, setmaxnreg 24..256 in
steps of 8, register file 65536; a variable-latency group's least budget is its overhead rounded up to
32), and each refusal is compared with what the search does without it."""

from __future__ import annotations

import time

import pytest

import twill
from twill.errors import InfeasibleError
from twill.ir.graph import Graph
from twill.ir.machine import load_machine
from twill.model.problem import Options, build_problem
from twill.search.swp import check_swp_registers, check_swp_shapes, swp_register_floor

H100 = load_machine("h100")
FA_BWD = "examples/flash_attention_bwd.py"


def _accumulators(regs: list[int], distance: int = 1, other: int = 0, warps: int = 4) -> Graph:
    """A TMA load read by one 4-warp ALU op per entry of ``regs``, each an accumulator carried to itself
    over ``distance`` iterations, and optionally a plain ``other``-register value."""
    g = Graph("accs")
    g.add_op("load", "tma_load", busy={"tma": 4}, latency=8, issue_cycles=1, smem=1024, variable_latency=True)
    for i, r in enumerate(regs):
        g.add_op(f"acc{i}", "alu", busy={"alu": 2}, regs=r, warps=warps)
        g.add_edge("load", f"acc{i}", carrier="smem", blocking=True)
        g.add_edge(f"acc{i}", f"acc{i}", distance=distance, inplace=True)
    if other:
        g.add_op("tmp", "alu", busy={"alu": 1}, regs=other, warps=4)
        g.add_edge("acc0", "tmp")
    return g


def test_refused_when_accumulators_overflow_one_group() -> None:
    # three 80-register accumulators on the one consumer group: 26 + 3 x 80 = 266 > 255 at every moment
    g = _accumulators([80, 80, 80])
    t0 = time.monotonic()
    with pytest.raises(InfeasibleError, match=r"= 266 registers per thread .* the most it can hold is 255"):
        twill.schedule(g, H100, strategy="swp")
    assert time.monotonic() - t0 < 5  # no II was walked (the graph's build and checks only)


def test_joint_strategy_still_schedules_it() -> None:
    # The refusal is Twill-SWP's: the joint search spreads the accumulators over two consumer groups.
    s = twill.schedule(_accumulators([80, 80, 80]), H100, time_limit=60)
    assert len({s.group[f"acc{i}"] for i in range(3)}) >= 2


def test_copies_of_a_value_carried_two_iterations() -> None:
    # a 120-register accumulator carried over 2 iterations keeps 2 copies: 26 + 2 x 120 = 266 > 255;
    # carried over 1, 26 + 120 = 146 fits and the search goes ahead
    p2 = build_problem(_accumulators([120], distance=2), H100)
    assert swp_register_floor(p2)[0] == 266
    with pytest.raises(InfeasibleError, match=r"120 \(acc0, accumulator x 2 copies\) = 266"):
        check_swp_registers(p2)
    p1 = build_problem(_accumulators([120], distance=1), H100)
    assert swp_register_floor(p1)[0] == 146
    check_swp_registers(p1)


def test_largest_other_value_and_register_limit() -> None:
    # 26 + 64 + 64 (accumulators) + 64 (tmp, live at its start) = 218: within 255, beyond a limit of 200
    g = _accumulators([64, 64], other=64)
    assert swp_register_floor(build_problem(g, H100))[0] == 218
    check_swp_registers(build_problem(g, H100))
    with pytest.raises(InfeasibleError, match=r"= 218 .* the most it can hold is 200 \(per-thread limit 200"):
        check_swp_registers(build_problem(g, H100, Options(register_limit=200)))


def test_register_file_bounds_an_eight_warp_group() -> None:
    # An 8-warp consumer (256 threads) beside the 128-thread load group at 32: (65536 - 4096) / 256 = 240.
    # 26 + 2 x 100 = 226 <= 240 passes; 26 + 2 x 112 = 250 > 240 is refused, though under 255.
    check_swp_registers(build_problem(_accumulators([100, 100], warps=8), H100))
    with pytest.raises(InfeasibleError, match=r"= 250 .* most it can hold is 240 .* 61440 over 256 threads"):
        check_swp_registers(build_problem(_accumulators([112, 112], warps=8), H100))


def test_relaxed_registers_never_refused() -> None:
    relaxed = Options(relax=frozenset({"registers"}))
    check_swp_registers(build_problem(_accumulators([200, 200]), H100, relaxed))


def test_refused_when_the_consumer_group_mixes_shapes() -> None:
    # a 4-warp and an 8-warp op (one and two warpgroups) on the one consumer group: group_shape fails at
    # every II; a one-warp op beside them is no third shape
    g = _accumulators([16], warps=4)
    g.add_op("wide", "alu", busy={"alu": 1}, warps=8)
    g.add_op("single", "alu", busy={"alu": 1}, warps=1)
    with pytest.raises(InfeasibleError, match=r"consumer op .* acc0 \(4 warps\), wide \(8 warps\)\. No II"):
        twill.schedule(g, H100, strategy="swp")
    check_swp_shapes(build_problem(_accumulators([16], warps=8), H100))  # one shape: searched


# ------------------------------------------------------------------------------ bundled FA backward
@pytest.mark.parametrize(("entry", "machine"), [
    ("attn_bwd_sm100", "b200"), ("attn_bwd_split_sm100", "b200"), ("attn_bwd_subtiled_sm100", "b200"),
])
def test_fa_backward_not_refused(entry: str, machine: str) -> None:
    # these fit one consumer group by the floor (at most 24 + 2 x 64 + 64 = 216 against 240 for 8 warps)
    # and have one consumer shape, so Twill-SWP searches them exactly as before
    p = build_problem(twill.graph_from_kernel(f"{FA_BWD}::{entry}", machine=machine), load_machine(machine))
    check_swp_shapes(p)
    check_swp_registers(p)


def test_fa_backward_hopper_refused_for_its_shapes() -> None:
    # The plain Hopper backward issues dk, dv (and their conversions) with 8 warps and s, p, dp, ... with
    # 4: one consumer group cannot hold both, so the search failed group_shape at each of the 992 IIs
    # from 105 to 1096 before (33.9 s); its registers alone would fit (26 + 64 + 64 + 64 = 218 <= 240)
    p = build_problem(twill.graph_from_kernel(f"{FA_BWD}::attn_bwd_sm90"), H100)
    assert swp_register_floor(p)[0] == 218
    check_swp_registers(p)
    with pytest.raises(InfeasibleError, match=r"dp \(4 warps\), dk \(8 warps\)"):
        check_swp_shapes(p)


def test_fa3_shaped_backward_refused() -> None:
    # FA3's shape: four 64-register accumulators (dk0, dk1, dv0, dv1) and 64-register tiles on one
    # 4-warp group: 26 + 4 x 64 + 64 = 346 > 255; the search found no schedule before either
    g = twill.graph_from_kernel(f"{FA_BWD}::attn_bwd_subtiled_sm90")
    with pytest.raises(InfeasibleError, match=r"= 346 registers per thread .* the most it can hold is 255"):
        twill.schedule(g, H100, strategy="swp")
