"""``verify`` catches one planted violation of each constraint family, and passes valid schedules.

Each case starts from a schedule solved by ``twill.schedule`` on a small graph built to exercise the
family, checks that it verifies, changes exactly one thing, and checks that every violation found is of
the expected family, with the op and the numbers in the message.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

import twill
from twill.errors import ScheduleError
from twill.ir.graph import Graph
from twill.ir.paper import figure1_graph
from twill.model.liveness import memory_intervals
from twill.model.problem import build_problem
from twill.render.show import to_text
from twill.schedule import OpSlot, Schedule, WarpGroup, slots_from
from twill.verify import FAMILIES, verify, violations

# ---------------------------------------------------------------------------------------------- helpers


def with_starts(s: Schedule, **starts: int) -> Schedule:
    """``s`` with the given ops moved (their stages follow)."""
    return replace(s, slots=slots_from({**s.start, **starts}, s.group, s.ii, s.problem.names))


def move_to_group(s: Schedule, op: str, index: int, *, warps: int = 4) -> Schedule:
    """``s`` with ``op`` moved to warp group ``index``; a new group gets ``warps`` and the smallest legal
    budget that holds the group overhead."""
    registers = s.problem.resources.round_budget(s.problem.resources.group_overhead)
    groups = [replace(g, ops=tuple(n for n in g.ops if n != op)) for g in s.warp_groups]
    if index < len(groups):
        groups[index] = replace(groups[index], ops=(*groups[index].ops, op))
    else:
        assert index == len(groups)
        groups.append(WarpGroup(index, (op,), warps, registers, registers, "compute"))
    slots = dict(s.slots)
    slots[op] = replace(slots[op], warp_group=index)
    return replace(s, slots=slots, warp_groups=tuple(groups))


def change_group(s: Schedule, index: int, **fields: object) -> Schedule:
    groups = list(s.warp_groups)
    groups[index] = replace(groups[index], **fields)
    return replace(s, warp_groups=tuple(groups))


def group_of(s: Schedule, op: str) -> WarpGroup:
    return next(g for g in s.warp_groups if op in g.ops)


def only(s: Schedule, family: str) -> ScheduleError:
    """Assert that ``s`` violates ``family`` and nothing else; return the error ``verify`` raises."""
    found = violations(s)
    assert found, "the planted violation was not found"
    assert {e.family for e in found} == {family}, [str(e) for e in found]
    with pytest.raises(ScheduleError) as info:
        verify(s)
    assert info.value.family == family
    assert str(info.value).startswith(f"{family}: ")
    return info.value


# ---------------------------------------------------------------------------------------------- graphs


def ws_graph() -> Graph:
    """Two streaming TMA loads (SMEM), two GEMMs and an exp with registers, a carried accumulator, and an
    independent ALU op: a producer group and compute groups. Results are a few hundred bytes, so a
    hand-off's SMEM traffic (bytes / 128 cycles each side) stays as small as these toy ops."""
    g = Graph("ws")
    g.add_op("L1", "tma_load", busy={"tma": 2}, latency=4, issue_cycles=1, variable_latency=True, smem=16384)
    g.add_op("L2", "tma_load", busy={"tma": 2}, latency=4, issue_cycles=1, variable_latency=True, smem=16384)
    g.add_op("G", "gemm", busy={"tc": 2}, latency=3, issue_cycles=1, warps=4, regs=64, result_bytes=256,
             spill_cost=2)
    g.add_op("E", "exp", busy={"mufu": 2}, latency=2, warps=4, regs=32, result_bytes=128, spill_cost=2)
    g.add_op("H", "gemm", busy={"tc": 2}, latency=3, issue_cycles=1, warps=4, regs=32, result_bytes=128,
             spill_cost=2)
    g.add_op("X", "alu", busy={"alu": 2}, latency=2, warps=4)
    g.add_edge("L1", "G", blocking=True, carrier="smem")
    g.add_edge("G", "E", blocking=True)
    g.add_edge("E", "H")
    g.add_edge("L2", "H", blocking=True, carrier="smem")
    g.add_edge("H", "H", distance=1, inplace=True)
    return g


def blocking_graph() -> Graph:
    """A GEMM whose result an exp waits for, and an ALU op that issues for 2 cycles."""
    g = Graph("blocking")
    g.add_op("G", "gemm", busy={"tc": 2}, latency=3, issue_cycles=1, warps=4)
    g.add_op("E", "exp", busy={"mufu": 2}, warps=4)
    g.add_op("X", "alu", busy={"alu": 2}, warps=4)
    g.add_edge("G", "E", blocking=True)
    return g


def handoff_graph(*, fixed_smem: int = 0, result_bytes: int = 0) -> Graph:
    """A -> B through registers, with a free hand-off (spill_cost 0) so crossing groups costs no time. B is
    an asynchronous GEMM that issues for no time unit, so one group issues 1 unit per II 1 (the issue
    limit) and the schedules below keep A and B together at II 1."""
    g = Graph("handoff", fixed_smem=fixed_smem)
    g.add_op("A", "alu", busy={"alu": 2}, spill_cost=0, result_bytes=result_bytes)
    g.add_op("B", "gemm", busy={"tc": 2}, issue_cycles=0)
    g.add_edge("A", "B")
    return g


SMEM = 232448  # bytes per CTA on the H100 (machines/h100.toml)
STAGING_FIXED = SMEM - 16384  # leaves 16 KB: a 32 KB staging buffer cannot fit


@pytest.fixture(scope="module")
def fig1() -> Schedule:
    return twill.schedule(figure1_graph(), "h100")


@pytest.fixture(scope="module")
def fig1_paper(fig1: Schedule) -> Schedule:
    """The solved Figure 1 schedule with the paper's M = {S: 0, P: 2, O: 3}."""
    return with_starts(fig1, S=0, P=2, O=3)


@pytest.fixture(scope="module")
def ws(quick_h100) -> Schedule:
    return twill.schedule(ws_graph(), quick_h100)


# ---------------------------------------------------------------------------------------------- valid


def test_families_listed():
    assert set(FAMILIES) == {"uniqueness", "consistency", "completion", "stages", "dependence", "cross_warp",
                             "apart", "capacity", "memory", "registers", "register_file",
                             "variable_latency", "group_shape", "blocking", "issue"}


def test_solved_schedules_pass(fig1, ws):
    for s in (fig1, ws):
        assert violations(s) == []
        assert verify(s) is None


def test_ws_schedule_has_the_expected_shape(ws):
    # Variable-latency ops get their own group (paper §4.3), numbered 0, and nothing else is on it.
    assert group_of(ws, "L1") == group_of(ws, "L2")
    assert group_of(ws, "L1").index == 0 and set(group_of(ws, "L1").ops) == {"L1", "L2"}
    assert group_of(ws, "L1").role == "producer"
    assert len(ws.warp_groups) >= 2


def test_paper_schedule_passes_and_its_rejected_alternative_fails(fig1, fig1_paper):
    # Paper Fig. 1d: M = {S: 0, P: 2, O: 3} at II = 2 is valid.
    assert violations(fig1_paper) == []
    # M(P) = 1, M(O) = 2 meets every dependence (S0 -> P1 -> O2, d = 1), but O at 2 and S at 0 are the same
    # TC residue mod 2: two 1-cycle reservations in one slot of a unit with capacity 1.
    bad = with_starts(fig1, S=0, P=1, O=2)
    err = only(bad, "capacity")
    assert "unit 'tc' needs 2 > capacity 1 at residue 0 (mod II 2): O, S" in str(err)


# ---------------------------------------------------------------------------------------------- families


def test_uniqueness_missing_start(fig1_paper):
    bad = replace(fig1_paper, slots={n: s for n, s in fig1_paper.slots.items() if n != "P"})
    err = only(bad, "uniqueness")
    assert err.op == "P" and "op 'P' has no start time" in str(err)


def test_uniqueness_op_in_two_groups(fig1_paper):
    extra = WarpGroup(1, ("P",), 4, 24, 24, "compute")
    bad = replace(fig1_paper, warp_groups=(*fig1_paper.warp_groups, extra))
    err = only(bad, "uniqueness")
    assert err.op == "P" and "op 'P' is listed in warp groups 0 and 1" in str(err)


def test_consistency_stage_disagrees_with_start(fig1_paper):
    slots = dict(fig1_paper.slots)
    slots["O"] = OpSlot("O", 3, 0, 0)  # O starts at 3: stage 3 // 2 = 1, not 0
    err = only(replace(fig1_paper, slots=slots), "consistency")
    assert err.op == "O" and "stage 0 but start 3 // II 2 = 1" in str(err)


def test_consistency_group_disagrees_with_group_list(fig1_paper):
    slots = dict(fig1_paper.slots)
    slots["S"] = replace(slots["S"], warp_group=1)
    err = only(replace(fig1_paper, slots=slots), "consistency")
    assert err.op == "S" and "slot says warp group 1, group list says 0" in str(err)


def test_completion(fig1_paper):
    # O starts at 3 and takes 1 cycle: it needs L >= 4.
    err = only(replace(fig1_paper, length=3), "completion")
    assert err.op == "O" and "op 'O' ends at 3 + 1 = 4 > L = 3" in str(err)


def test_completion_negative_start(fig1_paper):
    # S at -2 still precedes P at 2 (d = 1) and keeps TC residue 0 (O is at residue 1).
    err = only(with_starts(fig1_paper, S=-2), "completion")
    assert err.op == "S" and "starts at -2 < 0" in str(err)


def test_stages():
    s = twill.schedule(figure1_graph(), "h100", max_stages=2)
    assert violations(s) == [] and s.stages <= 2
    # L = 5 at II = 2 is ceil(5/2) = 3 stages; every op still ends by 5.
    err = only(replace(s, length=5), "stages")
    assert "3 stages (L = 5, II = 2) > max_stages = 2" in str(err)


def test_dependence(fig1_paper):
    # P at 0 while S (d = 1) starts at 0: P may start at 1 at the earliest.
    err = only(with_starts(fig1_paper, P=0), "dependence")
    assert err.op == "P"
    assert "S->P: P of iteration i+0 starts at 0 + 0*II(2) = 0, before S at 0 + d 1 = 1" in str(err)


def test_dependence_across_groups_pays_the_hand_off(quick_h100):
    # A -> B with a 5-cycle hand-off: on one group B may start 2 cycles after A (A's latency), on two
    # groups 2 + 5 = 7.
    # B is an asynchronous GEMM (it issues for no time unit), so A and B fit one issue stream at II 2.
    g = Graph("handoff")
    g.add_op("A", "alu", busy={"alu": 2}, spill_cost=5)
    g.add_op("B", "gemm", busy={"tc": 2}, issue_cycles=0)
    g.add_edge("A", "B")
    s = twill.schedule(g, quick_h100)
    assert violations(s) == [] and s.group["A"] == s.group["B"]
    assert s.start["B"] - s.start["A"] < 7
    err = only(move_to_group(s, "B", len(s.warp_groups)), "dependence")
    assert err.op == "B" and "+ hand-off 5 (groups 0 -> 1)" in str(err)


def test_cross_warp(quick_h100):
    s = twill.schedule(handoff_graph(), quick_h100, cross_group=False)
    assert violations(s) == [] and s.group["A"] == s.group["B"] == 0
    # B moved to a group of its own: the hand-off is free (spill_cost 0), nothing else runs there, and
    # A's result has no bytes to stage, so only the ban on crossing is broken.
    err = only(move_to_group(s, "B", 1), "cross_warp")
    assert err.op == "B"
    assert "A->B: register value crosses from warp group 0 to 1, but cross-group communication is " \
           "forbidden" in str(err)


def test_capacity(fig1_paper):
    # S at 1 still precedes P at 2, but shares TC residue 1 with O at 3.
    err = only(with_starts(fig1_paper, S=1), "capacity")
    assert err.op in ("S", "O")
    assert "unit 'tc' needs 2 > capacity 1 at residue 1 (mod II 2): O, S" in str(err)


def test_memory_staging_buffer(quick_h100):
    s = twill.schedule(handoff_graph(fixed_smem=STAGING_FIXED, result_bytes=32768), quick_h100)
    assert violations(s) == [] and s.group["A"] == s.group["B"]
    assert s.ii == 1  # every cost is 2 cycles: one time unit
    # Across groups A's 32768-byte result is staged in SMEM: 216064 loop-invariant + 32768 = 248832
    # bytes > 232448. With II = 1 every moment is residue 0. (Storing and loading it also takes the SMEM
    # ports 2 x 32768 / 128 cycles = 256 units, far over II = 1, so capacity fails too, and B cannot load
    # what A has not stored yet: dependence.)
    moved = move_to_group(s, "B", 1)
    assert {e.family for e in violations(moved)} == {"memory", "capacity", "dependence"}
    err = next(e for e in violations(moved) if e.family == "memory")
    assert "smem needs 248832 bytes > capacity 232448 at residue 0 (216064 loop-invariant; " \
           "live: A (staging) (32768))" in str(err)


def test_capacity_counts_the_smem_traffic_of_a_hand_off(quick_h100):
    # A -> B through registers (256 bytes) and C converting through the SMEM ports: every cost is 2
    # cycles, one time unit, so II = 1. On two groups A's group stores the value (256 B / 128 B per
    # cycle = 2 cycles = 1 unit) and B's group loads it (1 unit): with C the ports need 3 units at the
    # one residue of II = 1.
    g = handoff_graph(result_bytes=256)
    # C issues for no time unit either (only its port time matters here), so A, B and C fit one issue
    # stream at II 1 and B's move to group 1 changes nothing but the hand-off.
    g.add_op("C", "convert_layout", busy={"smem": 2}, issue_cycles=0)
    s = twill.schedule(g, quick_h100)
    assert violations(s) == [] and s.ii == 1 and s.group["A"] == s.group["B"]
    moved = move_to_group(s, "B", 1)
    found = {e.family: str(e) for e in violations(moved)}
    assert set(found) == {"capacity", "dependence"}
    assert "unit 'smem' needs 3 > capacity 1 at residue 0 (mod II 1): C, hand-off load at B, " \
           "hand-off store at A" in found["capacity"]
    # The hand-off itself is free (spill_cost 0), but B cannot load the value before A has stored it: A's
    # latency (1 unit), its store (1) and B's load (1) put B 2 units after A's latency.
    assert "+ hand-off 2 (groups 0 -> 1)" in found["dependence"]
    # show lists the crossing with its price: 2 units of added delay, 1 + 1 of port time
    row = next(line for line in to_text(moved, width=160).splitlines() if "A->B" in line)
    assert [cell.strip() for cell in row.split("│")[1:-1]] == ["A->B", "0 -> 1", "register", "256", "2", "2"]


def test_a_value_two_groups_read_is_staged_once(quick_h100):
    # A's 32 KB result read on groups 1 and 2 is stored once, into one staging buffer that lives from A's
    # end (cycle 2) until the later consumer starts (C at 9, +1): one interval, not one per reader.
    g = Graph("fan_out")
    g.add_op("A", "alu", busy={"alu": 2}, result_bytes=32768)
    g.add_op("B", "exp", busy={"mufu": 2})
    g.add_op("C", "alu", busy={"alu": 2})
    g.add_edge("A", "B")
    g.add_edge("A", "C")
    p = build_problem(g, quick_h100)
    start, group = {"A": 0, "B": 5, "C": 9}, {"A": 0, "B": 1, "C": 2}
    staged = memory_intervals(p, 20, start, group, "smem")
    assert [(iv.what, iv.start, iv.end, iv.weight) for iv in staged] == [("A (staging)", 2, 10, 32768)]
    port = p.transfers(p.edges)  # one store at A's latency, a load before each reader
    assert sorted(op for op, _, _ in port) == ["A", "B", "C"]


def test_registers(ws):
    g = group_of(ws, "G")
    overhead = ws.problem.resources.group_overhead
    # G's 64-register result is live at least while G runs, on top of the group overhead (24 or more):
    # 64 + overhead > 24, whatever else is live.
    bad = change_group(ws, g.index, registers=24)
    err = only(bad, "registers")
    assert f"warp group {g.index} holds " in str(err)
    assert f"> limit 24 ({overhead} overhead; live: " in str(err)
    assert "G (64)" in str(err)


def test_register_file_bad_budget(fig1_paper):
    err = only(change_group(fig1_paper, 0, registers=250), "register_file")
    assert "warp group 0: setmaxnreg 250 is not a multiple of 8 in [24, 256]" in str(err)


def test_register_file_over_the_file(fig1_paper):
    g = fig1_paper.warp_groups[0]
    # 16 warps are 512 threads; at g.registers per thread that overflows the 65536-register file as soon
    # as the budget is above 128 (the solver hands a lone compute group the spare registers).
    assert 512 * g.registers > 65536
    err = only(change_group(fig1_paper, 0, warps=16), "register_file")
    assert f"budgets need 512x{g.registers} = {512 * g.registers} registers > register file 65536" \
        in str(err)


def test_variable_latency(ws):
    # X has no edges and no registers, so moving it onto the producer group breaks only the isolation of
    # variable-latency ops.
    bad = move_to_group(ws, "X", 0)
    err = only(bad, "variable_latency")
    assert err.op == "X"
    assert "op 'X' has fixed latency but sits on the variable-latency group 0" in str(err)


def test_group_shape(ws):
    g = group_of(ws, "G")  # G is a 4-warp wgmma
    err = only(change_group(ws, g.index, warps=1), "group_shape")
    assert f"warp group {g.index} has 1 warps; its ops need 4" in str(err)


def test_blocking(quick_h100):
    s = twill.schedule(blocking_graph(), quick_h100, max_groups=1)
    assert violations(s) == [] and set(s.group.values()) == {0}
    # E waits for G's result (a blocking edge); X (no edges, alone on the ALU) is moved to start with E,
    # so X is still issuing (2 cycles) when E must wait. E ends by L and X is as long, so X fits too.
    x_start = s.start["E"]
    assert x_start + 2 <= s.length
    err = only(with_starts(s, X=x_start), "blocking")
    assert err.op == "E"
    assert f"E waits for G at {x_start} while X (same warp group 0) is issuing: started 0 before " \
           f"(mod II {s.ii}), issues for 2" in str(err)


def test_every_family_has_a_planted_case():
    tested = {"uniqueness", "consistency", "completion", "stages", "dependence", "cross_warp", "capacity",
              "memory", "registers", "register_file", "variable_latency", "group_shape", "blocking",
              "apart",  # planted in tests/test_schedule.py::test_apart_keeps_two_ops_on_different_groups...
              "issue"}  # planted in tests/test_issue_limit.py::test_verify_rejects_the_old_schedule
    assert tested == set(FAMILIES)
