"""The SASS walk of a Gluon kernel's warp groups (twill/tune/sass_trip.py), each against arithmetic done
by hand on a tiny loop body, and on one committed kernel against counts derived from its tile shapes."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace as NS

import pytest

from twill.ir.graph import Graph
from twill.ir.machine import load_machine
from twill.tune.sass_trip import (
    SassLatencies,
    coupled_groups,
    coupled_trip,
    latencies_from_machine,
    loop_bodies,
    parse_sass,
    trip_bounds,
    walk_trip,
)

ROOT = Path(__file__).resolve().parents[1]
LAT = SassLatencies(alu=4, mufu=18, mufu_interval=8, shfl=24, convert=5, smem=30, smem_bytes_per_cycle=128,
                    bar_sync=20, bar_sync_per_warp=2, trywait=40, uniform=2, tc_flops=4096,
                    wgmma_smem_bytes_per_cycle=192, tc_latency=88, tc_serial_latency=56, local=30)


def _loop(*lines: str) -> list:
    text = ".L_x_0:\n" + "\n".join(f"  /*{16 * i:04x}*/   {t} ;" for i, t in enumerate(lines))
    text += f"\n  /*{16 * len(lines):04x}*/   @P0 BRA `(.L_x_0) ;\n"
    ins, _labels = parse_sass(text)
    return ins


def test_a_dependent_chain_takes_the_sum_of_its_latencies():
    # R1 -> FFMA -> MUFU -> FADD -> R1 (carried): 4 + 18 + 4 per trip; the branch issues in the shadow
    body = _loop("FFMA R1, R1, R2, R3", "MUFU.EX2 R1, R1", "FADD R1, R1, R4")
    assert walk_trip(body, LAT).cycles == 4 + 18 + 4


def test_issue_times_of_the_last_trip():
    body = _loop("FFMA R1, R1, R2, R3", "MUFU.EX2 R1, R1", "FADD R1, R1, R4")
    times: list[float] = []
    walk_trip(body, LAT, issue=times)
    # the trip starts in the slot after the last trip's branch, 2 after that trip's FADD; FFMA waits for
    # the FADD's R1 (4 after its issue: 2 more), MUFU 4 after FFMA, FADD 18 after MUFU, the branch next
    assert times == [2, 2 + 4, 2 + 4 + 18, 2 + 4 + 18 + 1]


def test_independent_instructions_issue_one_per_cycle_per_warp():
    body = _loop(*(f"FFMA R{10 + i}, R2, R3, R4" for i in range(10)))
    assert walk_trip(body, LAT).cycles == 11                      # 10 FFMA + the branch
    # two warps of the group on each scheduler take turns: each warp gets every other slot
    assert walk_trip(body, LAT, warps_per_scheduler=2).cycles == 22


def test_mufu_holds_its_unit_for_the_interval():
    body = _loop(*(f"MUFU.EX2 R{10 + i}, R2" for i in range(4)))
    # 4 independent MUFU, one every 8 cycles (32 lanes at 4 per cycle): the trip is 4 x 8
    assert walk_trip(body, LAT).cycles == 32


def test_hgmma_group_is_waited_for_at_depbar():
    body = _loop("WARPGROUP.ARRIVE", "HGMMA.64x128x16.F32 R24, gdesc[UR8], R24",
                 "HGMMA.64x128x16.F32 R24, gdesc[UR12], R24, gsb0", "WARPGROUP.DEPBAR.LE gsb0, 0x0")
    tc = 2 * 64 * 128 * 16 / 4096              # 64 cycles per m64n128k16 at 4096 FLOP/cycle
    # fence slot, two HGMMAs back to back on the Tensor Cores from the 2nd slot, the group's latency,
    # then DEPBAR and the branch
    assert walk_trip(body, LAT).cycles == 1 + 2 * tc + 88 + 1 + 1
    # a group of one HGMMA (what ptxas emits serialized) waits the serialized latency
    one = _loop("WARPGROUP.ARRIVE", "HGMMA.64x128x16.F32 R24, gdesc[UR8], R24, gsb0",
                "WARPGROUP.DEPBAR.LE gsb0, 0x0")
    assert walk_trip(one, LAT).cycles == 1 + tc + 56 + 1 + 1
    # two warp groups of the partition share the Tensor Cores: each HGMMA holds them twice as long
    assert walk_trip(body, LAT, warpgroups=2).cycles == 1 + 4 * tc + 88 + 1 + 1


def test_small_n_hgmma_is_held_by_its_shared_memory_operands():
    # m64n16k16 SS: 2 x 64 x 16 x 16 / 4096 = 8 cycles of Tensor Core work, but its shared-memory
    # operands are (64 + 16) x 16 x 2 B = 2560 B, 13.3 cycles at 192 B/cycle
    body = _loop("WARPGROUP.ARRIVE", "HGMMA.64x16x16.F32 R24, gdesc[UR8], R24",
                 "HGMMA.64x16x16.F32 R24, gdesc[UR12], R24, gsb0", "WARPGROUP.DEPBAR.LE gsb0, 0x0")
    assert walk_trip(body, LAT).cycles == pytest.approx(1 + 2 * 2560 / 192 + 88 + 2)


def test_bar_sync_and_a_shuffle_chain():
    body = _loop("BAR.SYNC.DEFER_BLOCKING 0x0, 0x80", "SHFL.BFLY PT, R5, R4, 0x2, 0x1f",
                 "FMNMX R4, R4, R5, !PT")
    # the barrier (20, then its issue slot), the shuffle's result (24) for FMNMX, FMNMX's and the
    # branch's slots; FMNMX's R4 (4 cycles) is ready before the next trip's barrier ends
    assert walk_trip(body, LAT).cycles == 20 + 1 + 24 + 1 + 1
    # a barrier of 256 threads (8 warps): 4 warps beyond the first 4 at 2 cycles each
    wide = _loop("BAR.SYNC.DEFER_BLOCKING 0x1, 0x100", "SHFL.BFLY PT, R5, R4, 0x2, 0x1f",
                 "FMNMX R4, R4, R5, !PT")
    assert walk_trip(wide, LAT).cycles == 20 + 4 * 2 + 1 + 24 + 1 + 1


def test_a_try_wait_on_a_done_phase_delays_the_branch_that_reads_it():
    body = _loop("SYNCS.PHASECHK.TRANS64.TRYWAIT P1, [UR14+0xe0f0], R89", "@!P1 BRA `(.L_x_9)",
                 "FFMA R1, R2, R3, R4")
    # the guarded retry branch reads P1: 40 after the try-wait, then FFMA and the back-edge
    assert walk_trip(body, LAT).cycles == 40 + 1 + 1 + 1

def test_parse_keeps_guard_operands_and_lines():
    text = ('//## File "/x/kernel.py", line 12\n.L_x_3:\n  /*0100*/   @!P1 SYNCS.ARRIVE.TRANS64.A1T0 RZ, '
            '[UR5+0xe100], RZ ;\n  //## File "/triton/language/standard.py", line 900\n'
            '  /*0110*/   FMNMX R9, R88, R89, !PT ;\n')
    ins, labels = parse_sass(text)
    assert labels == {".L_x_3": 0}
    assert [(i.opcode, i.guard, i.line) for i in ins] == [("SYNCS.ARRIVE.TRANS64.A1T0", "@!P1", 12),
                                                         ("FMNMX", "", 12)]


def test_loop_bodies_picks_each_functions_longest_loop():
    kernel_py = "\n".join(["# generated", "def _part0_g1(x):", "    pass", "",
                           "def _part1_g0(x):", "    pass"])
    text = "\n".join([
        '//## File "/k/kernel.py", line 3', ".L_x_0:",
        "  /*0000*/   FFMA R1, R1, R2, R3 ;", "  /*0010*/   FFMA R1, R1, R2, R3 ;",
        "  /*0020*/   @P0 BRA `(.L_x_0) ;",
        '//## File "/k/kernel.py", line 6', ".L_x_1:",
        "  /*0030*/   IADD3 R4, R4, 0x1, RZ ;", "  /*0040*/   @P1 BRA `(.L_x_1) ;",
        ".L_x_2:", "  /*0050*/   @!P1 BRA `(.L_x_2) ;"])
    ins, labels = parse_sass(text)
    bodies = loop_bodies(ins, labels, kernel_py)
    assert sorted(bodies) == ["_part0_g1", "_part1_g0"]
    assert len(bodies["_part0_g1"].instrs) == 3 and len(bodies["_part1_g0"].instrs) == 2


def test_coupled_groups_follow_register_handoffs_in_any_edge_order():
    g = Graph("t")
    for n in ("k", "qk", "p", "pv", "st"):
        g.add_op(n, "alu", busy={"alu": 4})
    edges = [("k", "qk", "smem"), ("qk", "p", "register"), ("p", "pv", "register"), ("k", "st", "smem")]
    s = NS(warp_groups=(NS(index=0, ops=("k",)), NS(index=1, ops=("qk", "p")), NS(index=2, ops=("pv",)),
                        NS(index=3, ops=("st",))))
    for order in (edges, edges[::-1]):
        h = Graph("t")
        for op in g.ops:
            h.add_op(op.name, "alu", busy={"alu": 4})
        for a, b, c in order:
            h.add_edge(a, b, carrier=c)
        assert coupled_groups(h, s) == [(0,), (1, 2), (3,)]


def test_coupled_trip_by_hand():
    walks = {0: 190.0, 1: 770.0, 2: 744.0}
    assert coupled_trip(walks, [(0,), (1, 2)]) == 770 + 744
    assert coupled_trip(walks, [(0,), (1,), (2,)]) == 770           # nothing handed: the slowest group
    assert coupled_trip(walks, [(0,), (1, 2)], overlap=0.9) == pytest.approx(0.9 * (770 + 744))
    assert coupled_trip(walks, [(0,), (1, 2)], overlap=0.3) == 770  # never below the slowest group


def test_latencies_come_from_the_machine_file():
    lat = latencies_from_machine(load_machine("h200"))
    m = load_machine("h200")
    assert lat.mufu_interval == 32 / (float(m.const("cost.mufu_per_cycle")) / 4)
    assert lat.tc_latency == float(m.const("cost.tc_latency"))
    assert lat.alu == float(m.const("cost.sass_alu_latency"))


def _committed_sass(folder: Path) -> str:
    pytest.importorskip("triton")
    import sys

    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from gluon_fa_grid_scores import folder_sass
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    return folder_sass(folder)


def test_committed_kernel_loop_counts_match_the_tile_shapes():
    """fa_64_32_w4 at D 128 (CPU compile): the consumer's steady loop issues Q K^T as K / 16 = 8 wgmmas
    of m64n32k16 and P V as BLOCK_N / 16 = 2 of m64n128k16; its exponentials are the 64 x 32 tile over
    128 threads (16 per thread) and one rescale factor per row a thread holds (2: rows l/4 and l/4 + 8
    of its warp's 16); the producer issues the K and V tiles' TMA loads (2)."""
    folder = ROOT / "benchmarks" / "gluon_fa_grid" / "fa_64_32_w4"
    sass = _committed_sass(folder)
    kernel_py = (folder / "kernel.py").read_text()
    ins, labels = parse_sass(sass)
    bodies = loop_bodies(ins, labels, kernel_py)
    consumer, producer = bodies["_part0_g1"].instrs, bodies["_part1_g0"].instrs
    ops = [i.opcode for i in consumer]
    assert sum(o.startswith("HGMMA.64x32x16") for o in ops) == 128 // 16
    assert sum(o.startswith("HGMMA.64x128x16") for o in ops) == 32 // 16
    assert sum(o == "MUFU.EX2" for o in ops) == 64 * 32 // 128 + 2
    assert sum(i.base == "UTMALDG" for i in producer) == 2
    report = json.loads((folder / "report.json").read_text())
    bounds = trip_bounds(sass, kernel_py, report["partitions"], LAT)
    # the consumer's trip is at least its two GEMMs' Tensor Core time and their latencies (they are
    # waited for in the trip), and its exponentials' unit time
    tc = (8 * 2 * 64 * 32 * 16 + 2 * 2 * 64 * 128 * 16) / 4096
    assert bounds[1]["cycles"] >= tc + 2 * 88
    assert bounds[1]["cycles"] >= 18 * 8
    assert bounds[1]["instructions"] == len(consumer)


def test_walk_is_monotone_in_each_latency():
    folder = ROOT / "benchmarks" / "gluon_fa_grid" / "fa_128_32_w4"
    sass = _committed_sass(folder)
    kernel_py = (folder / "kernel.py").read_text()
    parts = json.loads((folder / "report.json").read_text())["partitions"]
    base = trip_bounds(sass, kernel_py, parts, LAT)
    for field in ("alu", "mufu", "shfl", "smem", "bar_sync", "tc_latency"):
        slower = trip_bounds(sass, kernel_py, parts, replace(LAT, **{field: getattr(LAT, field) + 10}))
        assert all(slower[g]["cycles"] >= base[g]["cycles"] for g in base), field


def test_the_tune_worker_walks_the_compiled_kernel_it_generated():
    """``twill tune --backend gluon``'s worker (:func:`twill.tune.gluon_worker.sass_walks`) walks the
    compiled cubin of the kernel it generated: the same walks as :func:`trip_bounds` on that SASS, each
    group by its report entry, and the two consumer groups of 128/32 at 4 warps (P and the row
    statistics handed between them) coupled, the producer alone; without a cubin it says so."""
    pytest.importorskip("triton")
    import sys

    from twill.tune.gluon_worker import sass_walks

    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from gluon_fa_grid_scores import folder_compiled
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    folder = ROOT / "benchmarks" / "gluon_fa_grid" / "fa_128_32_w4"
    compiled = folder_compiled(folder)
    report = json.loads((folder / "report.json").read_text())
    kernel = NS(compiled=compiled, source=(folder / "kernel.py").read_text(),
                report=NS(partitions=[NS(**{k: p[k] for k in ("position", "group", "warps")})
                                      for p in report["partitions"]]))
    groups = {p["group"]: p["trip_order"] for p in report["partitions"]}
    g = Graph("t")
    for ops in groups.values():
        for n in ops:
            g.add_op(n, "alu", busy={"alu": 1})
    g.add_edge("p", "out", carrier="register")          # P, computed on group 1, read by group 2's PV
    sched = NS(warp_groups=[NS(index=k, ops=tuple(v)) for k, v in sorted(groups.items())])
    details: dict = {}
    walks, comps = sass_walks(kernel, sched, g, load_machine("h200"), details)
    from twill.tune.sass_trip import disassemble

    expected = trip_bounds(disassemble(compiled.asm["cubin"]), kernel.source, report["partitions"],
                           latencies_from_machine(load_machine("h200")))
    assert walks == {k: v["cycles"] for k, v in expected.items()} and sorted(walks) == [0, 1, 2]
    assert comps == [(0,), (1, 2)]
    assert details["sass_walk"]["1"]["instructions"] == expected[1]["instructions"]
    none: dict = {}
    assert sass_walks(NS(compiled=None), sched, g, load_machine("h200"), none) == (None, None)
    assert "no compiled cubin" in none["sass_walk"]
