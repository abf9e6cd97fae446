"""Loads of tiles no other CTA reads stream from HBM (twill.frontend.reuse, CostModel.from_hbm).

The expectations are Little's-law arithmetic on the H200's measured constants (machines/h200.toml:
``cost.dram_bytes_per_cycle`` 17.1 B/cycle per SM, ``cost.dram_latency`` 1850 cycles) and which CTAs read a
tile, read off each kernel's source.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

import twill
from twill.frontend.compile import compile_to_ttgir, load_kernel
from twill.frontend.reuse import private_to_cta, program_axes
from twill.frontend.ttgir import parse_ttgir
from twill.ir.costmodel import CostModel
from twill.ir.graph import Graph
from twill.ir.machine import load_machine

ROOT = Path(__file__).resolve().parents[1]


def _loads(spec: str) -> dict[int, bool]:
    """``{TTGIR line of each load in the kernel's loop: private_to_cta}``."""
    module = parse_ttgir(compile_to_ttgir(load_kernel(str(ROOT / spec)), target="sm_90").pre_swp)
    return {op.line: private_to_cta(op, module) for op in module.ops()
            if op.name in ("tt.load", "tt.descriptor_load")
            and any(a.name == "scf.for" for a in op.ancestors())}


@pytest.mark.parametrize("spec, private", [
    # one CTA per head; K/V's address is pid * stride_kh + rows: no other CTA reads the tile
    ("examples/decode_attention.py", True),
    # K/V depend on the batch-head axis (through // and %) and not on the query-block axis: every query
    # block of a head reads them
    ("examples/flash_attention_fwd.py", False),
    # A's row of tiles and B's column come from program_id through // and %: shared by a row / column
    ("examples/gemm.py", False),
])
def test_which_loads_stream_from_hbm(spec, private):
    loads = _loads(spec)
    assert loads and set(loads.values()) == {private}


def test_program_axes_are_the_grid_axes_read():
    module = parse_ttgir(compile_to_ttgir(load_kernel(str(ROOT / "examples/flash_attention_fwd.py")),
                                          target="sm_90").pre_swp)
    assert program_axes(module) == frozenset({0, 1})        # start_m, off_hz


def test_hbm_load_pays_the_share_and_the_latency():
    # 16 KB from HBM on the H200: ceil(16384 / 17.1) = 959 cycles of the SM's HBM share; the latency is the
    # measured 1850 (longer than the L2 price of 600 and the share); the L2 load has neither.
    cm = CostModel(load_machine("h200"))
    l2, hbm = cm.global_load(16384), cm.global_load(16384, private=True)
    assert [r.unit for r in l2.rrt] == ["lsu"] and l2.latency == 600
    assert [(r.unit, r.start, r.cycles) for r in hbm.rrt] == [("lsu", 0, 512), ("dram", 0, 959)]
    assert hbm.latency == 1850
    tma = cm.tma_load(32768, private=True)                   # 32 KB: 1917 cycles on dram, 911 on tma
    assert {r.unit: r.cycles for r in tma.rrt} == {"tma": 911, "dram": 1917}
    assert tma.latency == 1917                               # the share itself outlasts the latency


def test_streaming_loop_runs_at_the_hbm_bound():
    """Two 16 KB private loads and a short consumer: II >= 2 x 959 = 1918 cycles (the dram ResMII, above
    the LSU's 2 x 512), i.e. 32768 B / 1918 = 17.1 B/cycle, the SM's HBM share; by Little's law the loop
    needs 17.1 x 1850 = 31.6 KB in flight, less than the 32 KB one iteration loads."""
    cm = CostModel(load_machine("h200"))
    g = Graph("stream")
    load = cm.global_load(16384, warps=4, private=True)
    for name in ("a", "b"):
        g.add_op(name, "load", regs=32, result_bytes=16384, **load.op_kwargs())
    use = cm.alu(8192, warps=4)
    g.add_op("use", "alu", regs=32, **use.op_kwargs())
    g.add_edge("a", "use", distance=0)
    g.add_edge("b", "use", distance=0)
    g.add_edge("use", "use", distance=1)
    sched = twill.schedule(g, "h200", time_limit=60)
    share = 2 * math.ceil(16384 / 17.1)
    assert share == 1918 > 2 * 512
    assert sched.bounds_cycles["res_mii"] == share
    assert sched.ii_cycles >= share
    assert 17.1 * 1850 < 2 * 16384
