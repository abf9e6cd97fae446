"""The importer of FBTriton's ``ddg-0.1`` dumps (twill.graph_from_ddg, twill schedule FILE.ddg.json).

tests/data/tiny_attention.ddg.json is written by hand from the schema (a TMA load of K, a local_alloc and a
transpose of it, QK on the Tensor Core into TMEM, a TMEM load, exp2, a register reshape, a conversion, a
register-operand MMA accumulating in registers, an index increment); every expected value below is read
off that file and the mapping rules of :mod:`twill.frontend.ddg`."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

import twill
from twill.cli.main import main
from twill.errors import FrontendError
from twill.frontend.ddg import graph_from_ddg
from twill.ir.machine import load_machine
from twill.model.liveness import memory_intervals, register_intervals, value_uses
from twill.model.problem import build_problem

FIXTURE = Path(__file__).parent / "data" / "tiny_attention.ddg.json"
B200 = load_machine("b200")


def _doc() -> dict:
    return json.loads(FIXTURE.read_text())


def test_nodes_mapped_to_units_and_times() -> None:
    g = graph_from_ddg(FIXTURE, B200)
    assert g.name == "tiny_attention_loop0" and len(g.ops) == 10 and len(g.edges) == 11
    load = g.op("descriptor_load_0")
    # TMA: busy = occupancy 40, completes at its latency 500, issued for min(40, self_latency 20) = 20
    assert [(r.unit, r.cycles) for r in load.rrt] == [("tma", 40)]
    assert (load.cycles, load.issue_cycles) == (500, 20)
    # 64 x 64 f16 lands in SMEM: 8192 bytes; variable latency, and streaming: its only in-edge is an
    # index (addi -> load, an ordering edge)
    assert (load.smem, load.regs, load.variable_latency, g.is_streaming(load.name)) == (8192, 0, True, True)
    qk = g.op("tc_gen5_mma_3")
    # idle trailing cycles: the Tensor Core is busy 100 cycles, the result lands at 600
    assert (qk.busy_cycles, qk.cycles, qk.issue_cycles, qk.async_reader) == (100, 600, 30, True)
    s_load = g.op("tmem_load_4")
    # tmem_load is booked on CUDA by the dump, on b200's TMEM data path here; 128 x 64 f32 over a
    # 128-thread warpgroup: 32768 / (4 x 128) = 64 registers per thread
    assert ([r.unit for r in s_load.rrt], s_load.regs, s_load.result_bytes) == (["tmem"], 64, 32768)
    assert g.op("truncf_7").regs == 32 and g.op("exp2_5").rrt[0].unit == "mufu"
    # no unit, no time: views and the index increment (latency, self_latency and occupancy 0)
    for name in ("local_alloc_1", "memdesc_trans_2", "reshape_6", "addi_8"):
        op = g.op(name)
        assert (op.rrt, op.cycles, op.issue_cycles, op.latency) == ((), 0, 0, 0), name
    assert [n for n in g.nx if g.op(n).view] == ["local_alloc_1", "memdesc_trans_2", "reshape_6"]
    # the reshape holds no registers but a hand-off of it moves exp2's 128 x 64 f32 tile
    assert (g.op("reshape_6").regs, g.op("reshape_6").result_bytes) == (0, 32768)
    # asynchronous readers are stated, never inferred: the two Tensor Core nodes only
    assert sorted(op.name for op in g.ops if op.async_reader) == ["tc_gen5_mma_3", "warp_group_dot_9"]
    assert all(op.async_reader is not None for op in g.ops)
    # Q (128 x 64 f16 = 16384 bytes) and the TMEM accumulator (128 x 64 f32: 64 columns) are made
    # outside the loop and read in it
    assert (g.fixed_smem, g.fixed_tmem) == (16384, 64)


def test_edges_mapped() -> None:
    g = graph_from_ddg(FIXTURE, B200)
    by = {(e.src, e.dst): e for e in g.edges}
    first = by[("descriptor_load_0", "local_alloc_1")]
    # its latency 500 equals the producer's: left to the graph, so the streaming load's d is 0
    assert (first.latency, g.edge_latency(first), first.carrier, first.blocking) == (None, 0, "smem", True)
    assert by[("tc_gen5_mma_3", "tmem_load_4")].carrier == "tmem"  # a token MMA's accumulator
    assert by[("truncf_7", "warp_group_dot_9")].carrier == "register"
    acc = by[("warp_group_dot_9", "warp_group_dot_9")]
    assert (acc.latency, acc.distance, acc.inplace) == (150, 1, True)  # 150 differs from the node's 250
    assert by[("addi_8", "descriptor_load_0")].carrier == "none"


def test_liveness_follows_the_views() -> None:
    p = build_problem(graph_from_ddg(FIXTURE, B200), B200)
    uses = [(e.dst, d) for e, d in value_uses(p, "descriptor_load_0", "smem")]
    assert uses == [("local_alloc_1", 0), ("memdesc_trans_2", 0), ("tc_gen5_mma_3", 0)]
    start = {op.name: 0 for op in p.ops} | {"tc_gen5_mma_3": 10, "exp2_5": 5, "truncf_7": 20,
                                           "warp_group_dot_9": 70}
    group = dict.fromkeys(start, 0)
    (k,) = [iv for iv in memory_intervals(p, 1000, start, group, "smem")
            if iv.what == "descriptor_load_0"]
    # K's buffer, taken prefetch = 1 II early, lives until QK (read through two views) completes: 10 + 600
    assert (k.start, k.end) == (-1000, 610)
    regs = {iv.what: iv.end for iv in register_intervals(p, 1000, start, group)}
    # exp2's tile is read through the reshape by truncf, at 20 (the exp2 itself ends at 5 + 300 = 305)
    assert regs["exp2_5"] == 305
    # the asynchronous reader holds truncf's tile until it completes: 70 + 250 (truncf ends at 60)
    assert regs["truncf_7"] == 320
    start["truncf_7"] = 400
    regs = {iv.what: iv.end for iv in register_intervals(p, 1000, start, group)}
    assert regs["exp2_5"] == 400


def test_schedules_and_verifies() -> None:
    # ResMII: Tensor Core 100 + 80 = 180 cycles (TMA 40, TMEM 64, MUFU 64, ALU 32); RecMII: the
    # accumulator's 150 cycles over one iteration
    s = twill.schedule(graph_from_ddg(FIXTURE, B200), B200, time_limit=120)
    assert (s.bounds_cycles["res_mii"], s.bounds_cycles["rec_mii"]) == (180, 150)
    assert s.ii_cycles >= 180
    twill.verify(s)


def test_cli_schedules_a_dump(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schedule", str(FIXTURE), "--machine", "b200", "--time-limit", "120"]) == 0
    assert "tc_gen5_mma_3" in capsys.readouterr().out


def _broken(change) -> dict:
    doc = copy.deepcopy(_doc())
    change(doc, doc["loops"][0]["ddg"])
    return doc


@pytest.mark.parametrize(("change", "message"), [
    (lambda d, g: d.update(schema_version="ddg-9"), r"schema_version 'ddg-9' is not 'ddg-0.1'"),
    (lambda d, g: g["nodes"][5].update(pipeline="MFMA"),
     r"node 5 \(math.exp2\): pipeline 'MFMA' has no twill unit .*units=\{'MFMA': 'unit'\}"),
    (lambda d, g: g["nodes"][3].update(is_super_node=True), r"node 3 \(ttng.tc_gen5_mma\) is a super node"),
    (lambda d, g: g["nodes"][4].pop("latency"), r"node 4 \(ttng.tmem_load\): missing field 'latency'"),
    (lambda d, g: g["nodes"][7].update(occupancy=-3), r"node 7 \(arith.truncf\): occupancy=-3 must be"),
    (lambda d, g: g["nodes"][2].update(op_ref="nowhere"), r"node 2 .*op_ref 'nowhere' is not in the"),
    (lambda d, g: g["edges"].append({"src": 3, "dst": 42, "kind": "data", "distance": 0, "latency": 1}),
     r"tiny_attention.ddg.json: edge 3->42: dst 42 not a node id of loop 0"),
    (lambda d, g: d["ops"]["p16"].update(result_types=["tensor<128x64xf99>"]),
     r"node 7 \(arith.truncf\): unknown element type 'f99'"),
    (lambda d, g: g["edges"].append({"src": 7, "dst": 5, "kind": "data", "distance": 0, "latency": 1}),
     r"dependence cycle .* has total distance 0"),
])
def test_bad_dumps_name_what_is_wrong(change, message: str) -> None:
    with pytest.raises(FrontendError, match=message):
        graph_from_ddg(_broken(change), B200, origin=str(FIXTURE))


def test_units_override_maps_another_pipeline() -> None:
    doc = _broken(lambda d, g: g["nodes"][5].update(pipeline="MFMA"))
    assert graph_from_ddg(doc, B200, units={"MFMA": "mufu"}).op("exp2_5").rrt[0].unit == "mufu"


def test_loop_choice() -> None:
    doc = _broken(lambda d, g: None)
    outer = copy.deepcopy(doc["loops"][0]) | {"loop_id": 1}
    doc["loops"].append(outer)
    with pytest.raises(FrontendError, match=r"2 inner loops \(\[0, 1\]\); pick one with loop_index="):
        graph_from_ddg(doc, B200)
    assert graph_from_ddg(doc, B200, loop_index=1).name == "tiny_attention_loop1"
    with pytest.raises(FrontendError, match=r"no loop with loop_id 7"):
        graph_from_ddg(doc, B200, loop_index=7)


@pytest.mark.parametrize("field", ["latency", "distance"])
def test_an_edge_without_its_latency_or_distance_is_refused(field: str) -> None:
    """A missing edge latency or distance is not 0 (a wrong, still "proven" answer): the edge is named."""
    data = _doc()
    edge = data["loops"][0]["ddg"]["edges"][3]
    del edge[field]
    with pytest.raises(FrontendError, match=rf"edge {edge['src']}->{edge['dst']}.*missing field '{field}'"):
        twill.graph_from_ddg(data, machine="b200")


@pytest.mark.parametrize(("change", "message"), [
    (lambda d, g: g["edges"][0].update(kind="memory"),
     r"edge 0->1: kind 'memory' is not a ddg-0.1 edge kind; known kinds: 'data' \(the consumer reads the "
     r"producer's result in the same iteration \(distance 0\)\); 'loop_carried' \("),
    (lambda d, g: g["edges"][0].pop("kind"),
     r"edge 0->1: missing field 'kind' \(one of data, loop_carried\)"),
    (lambda d, g: g["edges"][0].update(distance=1),
     r"edge 0->1: kind 'data' with distance 1: the consumer reads"),
    (lambda d, g: g["edges"][8].update(distance=0),
     r"edge 9->9: kind 'loop_carried' with distance 0: the result reaches the consumer through the loop's "
     r"scf.yield"),
    (lambda d, g: g["nodes"][2].pop("op_ref"), r"node 2 \(ttg.memdesc_trans\): missing field 'op_ref'"),
    (lambda d, g: g["nodes"][4].update(ocupancy=64),
     r"node 4 \(ttng.tmem_load\): unknown field 'ocupancy' \(did you mean 'occupancy'\?\)"),
    (lambda d, g: g["edges"][3].update(latncy=600),
     r"edge 3->4: unknown field 'latncy' \(did you mean 'latency'\?\)"),
    (lambda d, g: g["nodes"][6].update(id=5), r"node 5 \(tt.reshape\): id 5 is used by two nodes of loop 0"),
])
def test_edge_kinds_op_refs_and_fields_are_checked(change, message: str) -> None:
    """An edge's kind is read (and must agree with its distance), a node needs its op_ref, and a field the
    importer does not read is refused with the nearest known one; the message names the file."""
    graph_from_ddg(_broken(lambda d, g: None), B200)  # the unedited dump imports
    with pytest.raises(FrontendError, match=rf"^{FIXTURE}: {message}"):
        graph_from_ddg(_broken(change), B200, origin=str(FIXTURE))


def test_the_command_line_names_the_file_not_a_dict(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "mine.ddg.json"
    path.write_text(json.dumps(_broken(lambda d, g: g["nodes"][2].pop("op_ref"))))
    assert main(["schedule", str(path), "--machine", "b200"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"{path}: node 2 (ttg.memdesc_trans): missing field 'op_ref'" in err and "ddg dict" not in err


def _with_token_back_edge(doc: dict) -> dict:
    """The fixture with the loop's scf.yield passing the TMEM load's token (its result 1) to the next
    iteration's QK MMA, which may overwrite the accumulator once the load has read it: FBTriton's
    ``loop_carried`` edge ``tmem_load -> tc_gen5_mma`` (as in its FA dumps)."""
    doc["ops"]["yield"] = {"kind": "scf.yield", "scope": "loop:0", "result_types": [],
                           "operands": [{"op": "s_load", "result": 1}]}
    doc["ops"]["qk"]["operands"].append({"iter_arg": {"loop": 0, "idx": 0}})
    doc["loops"][0]["ddg"]["edges"].append({"src": 4, "dst": 3, "kind": "loop_carried", "distance": 1,
                                            "latency": 150})
    return doc


def test_a_loop_carried_token_is_an_ordering_edge_not_the_register_tile() -> None:
    doc = _with_token_back_edge(_doc())
    # result 1 of s_load is "!ttg.async.token" (the fixture's ops table): it holds nothing
    assert doc["ops"]["s_load"]["result_types"][1] == "!ttg.async.token"
    g = graph_from_ddg(doc, B200)
    back = next(e for e in g.edges if (e.src, e.dst) == ("tmem_load_4", "tc_gen5_mma_3"))
    assert (back.carrier, back.distance, back.latency) == ("none", 1, None)  # 150 = the node's latency
    # the data edge from the same load still carries its register tile (result 0)
    assert next(e for e in g.edges if (e.src, e.dst) == ("tmem_load_4", "exp2_5")).carrier == "register"
    # so the 64-register tile's lifetime is what it was without the back edge: it ends at exp2, not at the
    # next iteration's MMA
    p_with, p_without = build_problem(g, B200), build_problem(graph_from_ddg(_doc(), B200), B200)
    assert ([(e.dst, d) for e, d in value_uses(p_with, "tmem_load_4", "register")]
            == [(e.dst, d) for e, d in value_uses(p_without, "tmem_load_4", "register")])
