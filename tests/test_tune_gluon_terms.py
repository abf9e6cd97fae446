"""The per-trip costs of a generated Gluon kernel (twill/tune/gluon_terms.py), each against a value worked
out by hand from the hardware's rules (32 banks of 4 bytes; the wgmma accumulator fragment; a serialized
wgmma = instructions one at a time, each its throughput time + ``cost.tc_serial_latency``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from twill.ir.costmodel import CostModel
from twill.ir.graph import Graph
from twill.ir.machine import load_machine
from twill.tune.gluon_terms import (
    bank_wavefronts,
    conflicted_handoff_graph,
    mma_v3_accesses,
    serialized_gemm_graph,
    staging_conflict,
)

ROOT = Path(__file__).resolve().parents[1]


def mma(n: int) -> str:
    """The TTGIR encoding of a Hopper MMA accumulator of instruction width ``n``."""
    return ("#ttg.nvidia_mma<{versionMajor = 3, versionMinor = 0, warpsPerCTA = [4, 1], "
            f"instrShape = [16, {n}, 16]}}>")


def test_bank_wavefronts_counts_distinct_words_per_bank():
    assert bank_wavefronts([(4 * i, 4) for i in range(32)]) == 1           # one word per bank
    assert bank_wavefronts([(8 * i, 8) for i in range(32)]) == 2           # 256 B need two wavefronts
    assert bank_wavefronts([(256 * i, 4) for i in range(32)]) == 32        # every lane on bank 0
    assert bank_wavefronts([(256 * (i % 2), 4) for i in range(32)]) == 2   # two words of bank 0, broadcast
    with pytest.raises(ValueError, match="at least one access"):
        bank_wavefronts([])
    with pytest.raises(ValueError, match="address >= 0"):
        bank_wavefronts([(-4, 4)])


def test_mma_accesses_follow_the_accumulator_fragment():
    acc = mma_v3_accesses([64, 128], 4)
    # lane 5: row 1, columns 2-3 -> byte 1 x 512 + 2 x 4; 8 bytes
    assert acc[5] == (512 + 8, 8)
    assert len(acc) == 32
    mat = mma_v3_accesses([64, 64], 2)
    # ldmatrix lane 21: matrix 2 (rows 0-7, columns 8-15), row 5 -> byte 5 x 128 + 8 x 2; 16 bytes
    assert mat[21] == (5 * 128 + 16, 16)
    with pytest.raises(ValueError, match="8-bit"):
        mma_v3_accesses([64, 64], 1)
    assert mma_v3_accesses([128], 4, sliced=True)[9] == (2 * 4, 4)   # lane 9 holds row 2
    with pytest.raises(ValueError, match="2-D"):
        mma_v3_accesses([128], 4)


@pytest.mark.parametrize(("n", "element", "expected"), [
    # stmatrix .x4: 16 rows x (2 x 16 B); conflict-free it is 512 B = 4 wavefronts
    (32, "f16", 2.0),    # 64-B rows: even rows on banks 0-7, odd on 16-23: 8 words per bank = 8 wavefronts
    (64, "f16", 4.0),    # 128-B rows: all 16 rows on banks 0-7: 16 wavefronts
    (128, "f16", 4.0),   # 256-B rows: the same
    (24, "f16", 1.0),    # 48-B rows: row r starts at word 12 r mod 32; rows r, r + 8 meet: 4 words per bank
    # st.shared.v2: 8 rows x 4 lanes x 8 B = 256 B, conflict-free 2 wavefronts
    (128, "f32", 4.0),   # 512-B rows: banks 0-7 only, 8 words each = 8 wavefronts
    (36, "f32", 1.0),    # 144-B rows: row r starts at word 36 r mod 32 = 4 r: banks 0-31, 2 wavefronts
])
def test_staging_conflict_by_hand(n, element, expected):
    assert staging_conflict(mma(n), [128, n], element) == expected


def test_staging_conflict_of_a_row_vector_and_unknown_layouts():
    sliced = f"#ttg.slice<{{dim = 1, parent = {mma(32)}}}>"
    # lanes 4r..4r+3 share row r's word: 8 distinct words in 8 banks, one wavefront for 32 useful bytes
    assert staging_conflict(sliced, [128], "f32") == 4.0
    assert staging_conflict(f"#ttg.slice<{{dim = 0, parent = {mma(32)}}}>", [32], "f32") is None
    assert staging_conflict("#ttg.blocked<{sizePerThread = [1]}>", [128], "f32") is None
    assert staging_conflict(mma(32), [128, 32], "complex") is None


def _gemm_graph() -> Graph:
    g = Graph("t")
    g.add_op("qk", "gemm", busy={"tc": 256}, latency=344, issue_cycles=16, warps=4, result_bytes=16384)
    g.add_op("sm", "alu", busy={"alu": 32}, warps=4)
    g.add_edge("qk", "sm", blocking=True)
    return g


def test_serialized_gemm_takes_its_instructions_one_at_a_time():
    cm = CostModel(load_machine("h200"))
    ops = {"qk": (128, 32, 128, True, "f16")}
    # one warp group: 2 m64 halves x 128/16 k-steps = 16 instructions of 2*64*32*16/4096 = 16 cycles + 56
    one = serialized_gemm_graph(_gemm_graph(), ops, {"qk": 4}, cm).op("qk")
    assert one.latency == 16 * (16 + 56)
    # two warp groups side by side: 8 instructions each
    two = serialized_gemm_graph(_gemm_graph(), ops, {"qk": 8}, cm).op("qk")
    assert two.latency == 8 * (16 + 56)
    assert serialized_gemm_graph(_gemm_graph(), ops, {"qk": 4}, CostModel(load_machine("b200"))).op(
        "qk").latency == 344


def _handoff_graph(shape: str, nbytes: int) -> Graph:
    g = Graph("h")
    g.add_op("p", "convert", busy={"alu": 10}, result_bytes=nbytes, attrs={"shape": shape}, warps=4)
    g.add_op("o", "alu", busy={"alu": 20}, warps=4)
    g.add_op("r", "alu", busy={"alu": 5}, warps=4)
    g.add_edge("p", "o")
    g.add_edge("p", "r")
    return g


def test_conflicted_handoff_charges_the_store_once_and_each_crossing_load():
    # a row vector (the softmax's row max, 128 fp32) is staged unswizzled: lane l holds element l // 4, so
    # a warp's request moves 8 distinct words (32 B) in one wavefront of 128 B: 4x the conflict-free time
    cm = CostModel(load_machine("h200"))
    g = _handoff_graph("128xf32 register", 512)
    enc = {"p": (f"#ttg.slice<{{dim = 1, parent = {mma(64)}}}>", "f32")}
    # p on group 1, o on group 2 (crosses), r on group 1 (does not)
    out, found = conflicted_handoff_graph(g, {"p": 1, "o": 2, "r": 1}, enc, cm)
    extra = (4 - 1) * 512 / 128   # 3 x the 4 conflict-free cycles of 512 B at 128 B/cycle
    assert [h.value for h in found] == ["p"] and found[0].factor == 4.0
    assert out.op("p").issue_cycles == 10 + extra and out.op("p").latency == 10 + extra
    assert out.op("o").issue_cycles == 20 + extra
    assert out.op("r").issue_cycles == 5                              # same group: no staging
    assert ("smem", 10, extra) in [(r.unit, r.start, r.cycles) for r in out.op("p").rrt]
    # all on one group: nothing changes
    same, none = conflicted_handoff_graph(g, {"p": 1, "o": 1, "r": 1}, enc, cm)
    assert none == () and same.op("p").issue_cycles == 10


def test_a_swizzled_tile_handoff_is_conflict_free():
    # a 128 x 64 fp16 tile (rows of 128 B) gets the backend's 128 B swizzle: row r's 16-byte chunk c goes
    # to chunk c ^ (r % 8), so the 8 rows of each 8x8 stmatrix land on 8 different groups of 4 banks
    cm = CostModel(load_machine("h200"))
    g = _handoff_graph("128x64xf16 register", 16384)
    out, found = conflicted_handoff_graph(g, {"p": 1, "o": 2, "r": 1}, {"p": (mma(64), "f16")}, cm)
    assert found[0].factor == 1.0 and found[0].store_extra == 0.0
    assert out.op("o").issue_cycles == 20
    # unswizzled the same request hits 16 rows on one bank group: 4x (what the earlier kernels paid)
    assert staging_conflict(mma(64), [128, 64], "f16") == 4.0


def test_an_unknown_layout_is_listed_and_priced_conflict_free():
    cm = CostModel(load_machine("h200"))
    g = _handoff_graph("128x64xf16 register", 16384)
    out, found = conflicted_handoff_graph(g, {"p": 1, "o": 2, "r": 1}, {"p": ("#ttg.blocked<{}>", "f16")}, cm)
    assert found[0].factor is None and found[0].store_extra == 0.0
    assert out.op("o").issue_cycles == 20


def test_committed_fa_grid_scores_are_recomputed_by_the_script(tmp_path):
    """The committed scores file is what benchmarks/gluon_fa_grid_scores.py computes now (CPU), from the
    timings of the committed kernels (``h200_gluon_fa_grid_v2.json``: the kernels regenerated with the
    wgmma pipeline kept and swizzled staging; ``h200_gluon_fa_grid.json`` timed the earlier ones)."""
    import subprocess
    import sys

    out = tmp_path / "scores.json"
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gluon_fa_grid_scores.py"), "--measured",
                    str(ROOT / "benchmarks" / "results" / "h200_gluon_fa_grid_v2.json"), "--out", str(out)],
                   check=True, capture_output=True, cwd=ROOT)
    fresh = json.loads(out.read_text())
    committed = json.loads((ROOT / "benchmarks" / "results" / "h200_gluon_fa_grid_v2_scores.json")
                           .read_text())
    assert fresh["scores"] == committed["scores"]
    assert fresh["rows"] == committed["rows"]


def test_result_encodings_reads_the_last_ttgir_op_of_each_chain():
    from types import SimpleNamespace as NS

    from twill.tune.gluon_terms import result_encodings

    def op(kind: str, encoding: str, element: str = "f32") -> NS:
        return NS(results=(NS(type=NS(kind=kind, encoding=encoding, element=element)),))

    lowering = NS(members={
        "p": [op("tensor", "#a"), op("tensor", "#b", "f16")],   # the chain's value is its last op's
        "k": [op("memdesc", "#shared")],                        # shared memory: not a register value
        "s": [NS(results=())],                                  # no result
    })
    assert result_encodings(lowering) == {"p": ("#b", "f16")}


GRIDS = ("gluon_fa_grid", "gluon_fa_grid_b4_h32_n4096_d64")


@pytest.mark.parametrize("name", sorted(f"{g}/{p.name}" for g in GRIDS
                                        for p in (ROOT / "benchmarks" / g).iterdir() if p.is_dir()))
def test_barrier_arrives_match_the_committed_kernels_steady_loops(name):
    """The arrives the rule counts per trip = the ``mbarrier.arrive(`` calls in the steady loops of the
    committed generated kernel (the text the backend wrote, not twill's model)."""
    import re
    from types import SimpleNamespace as NS

    from twill.schedule import Schedule
    from twill.tune.gluon_terms import barrier_arrives

    folder = ROOT / "benchmarks" / name
    sched = Schedule.from_json((folder / "schedule.json").read_text())
    text = (folder / "kernel.py").read_text()
    # each partition's steady loop runs to its "# epilogue trip 0" (the sequential body of a short loop,
    # after "else:", has none)
    loops = re.findall(r"for t in range\(\d+, n_iter\):\n((?:(?!else:|@gluon\.jit).)*?)# epilogue trip 0",
                       text, re.S)
    assert loops
    in_source = sum(body.count("mbarrier.arrive(") for body in loops)
    # the producer's expect-tx arrives (mbarrier.expect) are not bar.sync'd arrives and are not counted
    graph = NS(ops=[NS(name=n, variable_latency=n in ("k", "v"),
                       rrt=[NS(unit="tc")] if n in ("qk", "out") else [NS(unit="alu")])
                    for n in sched.problem.names],
               edges=[NS(src=e.src, dst=e.dst, carrier=e.carrier) for e in sched.problem.edges])
    graph.out_edges = lambda name: [e for e in graph.edges if e.src == name]
    counts = barrier_arrives(graph, sched)
    assert sum(counts.values()) == in_source
