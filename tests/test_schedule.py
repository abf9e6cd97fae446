"""``twill.schedule`` end to end, the Schedule's derived views, its certificate and its JSON form."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest

import twill
import twill.solvers.cpsat
from twill.errors import TwillError
from twill.ir.costmodel import CostModel
from twill.ir.graph import Graph
from twill.ir.machine import load_machine
from twill.ir.paper import figure1_graph
from twill.schedule import Schedule, slots_from
from twill.verify import violations

# ---------------------------------------------------------------------------------------------- graphs


def fa_like_graph(machine_name: str = "h100") -> Graph:
    """A FlashAttention-forward-like loop body, costed by the cost model: TMA loads of K and V (variable
    latency, SMEM), S = Q K^T and O += P V on the Tensor Cores, P = exp2(S) on MUFU with ALU work, and the
    O accumulator carried to the next iteration (updated in place). Tile 64 x 128, head dim 64, fp16."""
    cm = CostModel(load_machine(machine_name))
    bm, bn, d = 64, 128, 64
    g = Graph("fa_like")

    def add(name, cost, **kwargs):
        g.add_op(name, cost.kind, **cost.op_kwargs(), **kwargs)

    tile = bn * d * 2  # a K or V tile: 128 x 64 fp16 = 16 KB
    add("K", cm.tma_load(tile), smem=tile)
    add("V", cm.tma_load(tile), smem=tile)
    s_cost = cm.gemm(bm, bn, d)
    add("S", s_cost, regs=cm.regs_for(bm * bn * 4, s_cost.warps), result_bytes=bm * bn * 4)
    add("P", cm.exp2(bm * bn, alu_ops_per_element=2), regs=cm.regs_for(bm * bn * 2, 4),
        result_bytes=bm * bn * 2)
    o_cost = cm.gemm(bm, d, bn)
    add("O", o_cost, regs=cm.regs_for(bm * d * 4, o_cost.warps), result_bytes=bm * d * 4)
    g.add_edge("K", "S", blocking=True, carrier="smem")
    g.add_edge("S", "P", blocking=True)
    g.add_edge("P", "O")
    g.add_edge("V", "O", blocking=True, carrier="smem")
    g.add_edge("O", "O", distance=1, inplace=True)
    return g


@pytest.fixture(scope="module")
def fig1() -> Schedule:
    return twill.schedule(figure1_graph(), "h100")


@pytest.fixture(scope="module")
def fa_h100() -> Schedule:
    return twill.schedule(fa_like_graph(), "h100")


# ---------------------------------------------------------------------------------------------- Figure 1


def test_figure1_end_to_end(fig1):
    # Normalization keeps the paper's unit: every op is 1 time unit long.
    assert [fig1.problem.op(n).cycles for n in "SPO"] == [1, 1, 1]
    # ResMII: TC holds S and O, one cycle each, capacity 1 -> 2. RecMII: O->O, d = 1, δ = 1 -> 1.
    # So II >= 2, and II = 2 works (below). L >= 3 (S -> P -> O); L = 3 forces S0 P1 O2, where S and O
    # collide on TC residue 0 mod 2. L = 4: starts in [0, 3], O >= S + 2, S and O of different parity,
    # so S = 0 and O = 3, and P in {1, 2} (both optimal). T = (ceil(4/2) - 1) * 2 + 4 = 6.
    assert (fig1.ii, fig1.length, fig1.stages, fig1.total_length) == (2, 4, 2, 6)
    assert (fig1.start["S"], fig1.start["O"]) == (0, 3)
    assert fig1.start["P"] in (1, 2)
    assert violations(fig1) == []
    cert = fig1.certificate
    assert (cert.lower_bound, cert.res_mii, cert.rec_mii) == (2, 1 + 1, 1)
    assert cert.proven_optimal


def test_figure1_op_order_does_not_matter():
    g = Graph("figure1_reversed")
    for name, unit in (("O", "tc"), ("P", "mufu"), ("S", "tc")):  # GEMMs issue asynchronously, as in
        g.add_op(name, "op", busy={unit: 1}, latency=1,       # twill.ir.paper.figure1_graph
                 issue_cycles=0 if unit == "tc" else 1)
    g.add_edge("O", "O", latency=1, distance=1, inplace=True)
    g.add_edge("P", "O", latency=1)
    g.add_edge("S", "P", latency=1)
    s = twill.schedule(g, "h100")
    assert (s.ii, s.length, s.total_length) == (2, 4, 6)
    assert (s.start["S"], s.start["O"]) == (0, 3)


def test_figure1_listing_with_the_paper_schedule(fig1):
    paper = replace(fig1, slots=slots_from({"S": 0, "P": 2, "O": 3}, fig1.group, 2, fig1.problem.names))
    assert violations(paper) == []
    rows = paper.listing()
    # Two copies, iteration i shifted by 2i: S 0, P 2, O 3 and S 2, P 4, O 5. Prologue [0, 2): S of
    # iteration 0; steady state [2, 4): P of iteration 0 and S of iteration 1 at 2, O of iteration 0 at 3;
    # epilogue: P of iteration 1 at 4, O at 5 (paper Fig. 1e/f).
    assert [(t, op, i) for t, op, i, _ in rows["prologue"]] == [(0, "S", 0)]
    assert [(t, op, i) for t, op, i, _ in rows["steady_state"]] == [(2, "P", 0), (2, "S", 1), (3, "O", 0)]
    assert [(t, op, i) for t, op, i, _ in rows["epilogue"]] == [(4, "P", 1), (5, "O", 1)]


def test_certificate_rules_out_every_smaller_ii(quick_h100):
    # A loop whose answer lies above its lower bound: a 1-cycle TC op that an exp must wait for, with an
    # ALU op issuing for 2 cycles on the same (only) warp group. ResMII = 2 (each unit busy 2 cycles), but
    # the group's one issue stream needs 1 + 2 + 2 = 5 cycles per iteration (the issue limit), so IIs
    # 2-4 have no schedule; at II 5, G at 0, X at 1 (issuing [1, 3)) and E at 3 clear of both.
    g = Graph("blocking")
    g.add_op("G", "gemm", busy={"tc": 2}, latency=3, issue_cycles=1, warps=4)
    g.add_op("E", "exp", busy={"mufu": 2}, warps=4)
    g.add_op("X", "alu", busy={"alu": 2}, warps=4)
    g.add_edge("G", "E", blocking=True)
    s = twill.schedule(g, quick_h100, max_groups=1)
    cert = s.certificate
    assert cert.lower_bound == 2 and s.ii == 5
    assert set(range(cert.lower_bound, s.ii)) <= set(cert.ruled_out())
    assert cert.proven_optimal
    assert violations(s) == []


# ---------------------------------------------------------------------------------------------- FA-like


def test_a_hand_off_into_a_variable_latency_op_takes_the_smem_ports(quick_h100):
    # A hands its 8192-byte register result to V, an atomic on the LSU that must sit on the
    # variable-latency group, so every schedule pays the store (8192 B / 128 B per cycle = 64 cycles,
    # machines/h100.toml cost.smem_bytes_per_cycle) and the load (64 cycles) on the SMEM ports, beside C's
    # 64-cycle conversion: 192 port cycles per iteration against 64 on the ALU and the LSU.
    g = Graph("forced_hand_off")
    g.add_op("A", "alu", busy={"alu": 64}, warps=4, result_bytes=8192)
    g.add_op("V", "atomic", busy={"lsu": 64}, variable_latency=True)
    g.add_op("C", "convert_layout", busy={"smem": 64}, warps=4)
    g.add_edge("A", "V")
    s = twill.schedule(g, quick_h100)
    assert violations(s) == [] and s.certificate.proven_optimal
    assert s.ii_cycles == 64 + 2 * 8192 // 128
    assert s.certificate.res_mii * s.problem.cycles_per_unit == 192  # the bound counts the forced traffic
    free = twill.schedule(g, quick_h100, relax={"handoff"})
    assert free.ii_cycles == 64


def test_a_consumer_of_two_handed_off_values_loads_them_one_after_the_other(quick_h100):
    # C reads two 8192-byte register values, each from a variable-latency op on the producer group: the
    # producers store them (64 cycles each at 128 B/cycle) and C's group loads both before C starts, one
    # after the other (64 + 64): 256 cycles of SMEM-port time per iteration, more than any other unit.
    g = Graph("two_loads")
    g.add_op("P1", "load", busy={"lsu": 32}, variable_latency=True, result_bytes=8192)
    g.add_op("P2", "load", busy={"lsu": 32}, variable_latency=True, result_bytes=8192)
    g.add_op("C", "alu", busy={"alu": 64}, warps=4)
    g.add_edge("P1", "C")
    g.add_edge("P2", "C")
    s = twill.schedule(g, quick_h100, time_limit=120)
    assert violations(s) == [] and s.certificate.proven_optimal
    assert s.ii_cycles == 4 * 8192 // 128
    p = s.problem
    loads = sorted(offset for op, offset, _ in p.transfers(p.edges) if op == "C")
    assert [-o * p.cycles_per_unit for o in loads] == [128, 64]  # two slots before C, back to back


def test_ops_of_different_warpgroup_counts_always_pay_their_hand_off():
    # P (one warpgroup) and C (two) never share a group, so the 8192-byte value always crosses: its store
    # and load take 2 x 8192 / 128 = 128 cycles of SMEM port per iteration, more than P's ALU or C's MUFU
    # (16 each). The modulo bound and the stage window know it (they once did not, and a window of too
    # few stages hid this II behind a "proven" 160).
    g = Graph("shapes")
    g.add_op("P", "alu", busy={"alu": 16}, warps=4, regs=32, result_bytes=8192)
    g.add_op("C", "exp", busy={"mufu": 16}, warps=8, regs=32)
    g.add_edge("P", "C")
    s = twill.schedule(g, "h100", time_limit=60)
    assert violations(s) == [] and s.certificate.proven_optimal
    assert s.ii_cycles == 2 * 8192 // 128
    assert s.problem.forced_cross(s.problem.edges[0])
    assert s.certificate.res_mii * s.problem.cycles_per_unit == 128


def test_fa_like_schedules_verifies_and_is_proven(fa_h100):
    s = fa_h100
    assert violations(s) == []
    cert = s.certificate
    assert cert.proven_optimal
    assert cert.lower_bound <= s.ii
    assert set(range(cert.lower_bound, s.ii)) <= set(cert.ruled_out())
    # The loads are variable-latency: they sit together on a producer group of their own.
    producer = {g.index for g in s.warp_groups if g.role == "producer"}
    assert {s.group["K"], s.group["V"]} == producer
    assert not producer & {s.group[n] for n in ("S", "P", "O")}
    # The Tensor Cores alone bound the II from below: S and O each busy 2*64*128*64 / 4096 = 256 cycles.
    assert s.bounds_cycles["res_mii"] >= 512
    # O's accumulator is carried to the next iteration: O of iteration i+1 starts no earlier than O of
    # iteration i finishes its latency, so II >= O's normalized latency.
    assert s.ii >= s.problem.op("O").latency
    # The stages and T follow from L and II.
    assert s.stages == -(-s.length // s.ii)
    assert s.total_length == (s.stages - 1) * s.ii + s.length


def test_overhead_above_the_smallest_budget_is_respected(quick_h100):
    # A warp group always holds the machine's per-group overhead. With an overhead of 30 registers per
    # thread, no group may get the smallest setmaxnreg budget (24): not even the producer group, which
    # holds no register value of its own.
    machine = replace(quick_h100, group_overhead_regs=30)
    g = Graph("producer")
    g.add_op("L", "tma_load", busy={"tma": 2}, latency=4, issue_cycles=1, variable_latency=True, smem=16384)
    g.add_op("G", "gemm", busy={"tc": 2}, latency=3, issue_cycles=1, warps=4, regs=64)
    g.add_edge("L", "G", blocking=True, carrier="smem")
    s = twill.schedule(g, machine)
    assert violations(s) == []
    assert len(s.warp_groups) == 2
    assert all(grp.registers >= 32 and grp.registers_needed >= 32 for grp in s.warp_groups)


# ---------------------------------------------------------------------------------------------- JSON


@pytest.mark.parametrize("which", ["fig1", "fa_h100"])
def test_json_round_trip(request, which):
    s = request.getfixturevalue(which)
    text = s.to_json()
    back = Schedule.from_json(text)
    assert back.to_json() == text
    assert back.slots == s.slots and back.warp_groups == s.warp_groups
    assert back.certificate == s.certificate
    assert back.problem == s.problem
    assert violations(back) == []


def test_json_fields(fig1):
    data = json.loads(fig1.to_json())
    assert data["kind"] == "twill.schedule" and isinstance(data["schema_version"], int)
    assert (data["ii"], data["length"], data["total_length"]) == (2, 4, 6)
    assert {o["name"]: (o["start"], o["stage"], o["warp_group"]) for o in data["ops"]} == {
        n: (sl.start, sl.start // 2, sl.warp_group) for n, sl in fig1.slots.items()}
    assert sorted(data["ops"][0]) == ["name", "stage", "start", "warp_group"]
    for group in data["warp_groups"]:
        assert {"ops", "warps", "registers"} <= set(group)
    assert sorted(n for group in data["warp_groups"] for n in group["ops"]) == ["O", "P", "S"]
    assert data["certificate"]["lower_bound"] == 2
    assert data["certificate"]["proven_optimal"] is True


def _corrupt(text: str, edit) -> str:
    data = json.loads(text)
    edit(data)
    return json.dumps(data)


CORRUPTIONS = {
    "kind": lambda d: d.update(kind="something.else"),
    "no kind": lambda d: d.pop("kind"),
    "schema": lambda d: d.update(schema_version=999),
    "no ops": lambda d: d.pop("ops"),
    "start not a number": lambda d: d["ops"][0].update(start="zero"),
    "ops not a list": lambda d: d.update(ops="S,P,O"),
    "no certificate": lambda d: d.pop("certificate"),
    "attempt field": lambda d: d["certificate"]["attempts"].append({"ii": 1, "bogus": True}),
    "problem missing": lambda d: d.update(problem=None),
    "edge field": lambda d: d["problem"]["edges"][0].update(weight=3),
    "options not a table": lambda d: d["problem"].update(options=[]),
    "resources not a table": lambda d: d["problem"].update(resources=[1, 2]),
    "op listed twice": lambda d: d["ops"].append(dict(d["ops"][0], start=1)),
}


@pytest.mark.parametrize("name", list(CORRUPTIONS))
def test_from_json_rejects_corrupted_json(fig1, name):
    with pytest.raises(TwillError):
        Schedule.from_json(_corrupt(fig1.to_json(), CORRUPTIONS[name]))


@pytest.mark.parametrize("text", ["", "not json", "[1, 2, 3]", "42", '{"ii": 2, "length": 4}', "null"])
def test_from_json_rejects_foreign_json(text):
    with pytest.raises(TwillError):
        Schedule.from_json(text)


def test_window_limit_skips_undecided_windows_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    """A window that cannot be decided within ``window_limit`` is recorded as undecided, the search goes
    on to the next II, and the answer is not called optimal."""
    import time

    import twill.search.decide as search
    from twill.solvers.joint.result import JointResult
    from twill.solvers.status import CheckResult

    g = figure1_graph()
    exact = twill.schedule(g, "h100")
    assert exact.certificate.proven_optimal
    real = search.solve_joint
    seen: list[float | None] = []

    def hard_at_the_optimum(problem, ii, stages, **kw):  # type: ignore[no-untyped-def]
        if ii != exact.ii:
            return real(problem, ii, stages, **kw)
        seen.append(kw["window_s"])
        end = min(kw["deadline"], time.monotonic() + kw["window_s"])
        while time.monotonic() < end:  # a window the solver cannot decide in time
            time.sleep(0.01)
        return JointResult(ii, stages, CheckResult.TIMEOUT, wall_s=0.2)

    monkeypatch.setattr(search, "solve_joint", hard_at_the_optimum)
    s = twill.schedule(g, "h100", window_limit=0.2, time_limit=60)
    assert seen and all(w == 0.2 for w in seen)
    assert s.ii > exact.ii and not s.certificate.proven_optimal
    undecided = [a for a in s.certificate.attempts if a.ii == exact.ii and a.phase == "joint"]
    # each window of the II gets its own limit: the window after an undecided one is still asked (the
    # search's windows, then the closing phase's re-decision of the II up to its stage bound)
    # (under load the 60 s limit can also stop the closing phase: that attempt names no window limit)
    windows = [a for a in undecided if "window_limit" in a.reason]
    assert len(seen) == len(windows) >= 1 + s.certificate.stage_slack
    assert [a.stages for a in windows[:2]] == [2, 3]
    assert all(a.status == "timeout" for a in undecided)
    twill.verify(s)


def test_the_windows_of_one_ii_in_one_formula_answer_as_each_on_its_own() -> None:
    """``solve_joint(first=...)`` states one formula for the windows ``first..stages`` and asks them in
    order; each answer (status, window, L and the tightened goals) is the one a formula per window gives.
    The FA-like loop at its optimal II 102: the first window is refuted, the next has the schedule."""
    import math

    from twill.model.problem import build_problem
    from twill.solvers.joint.smt import solve_joint
    from twill.solvers.modulo.methods import modulo_schedule
    from twill.solvers.normalize import normalize_problem
    from twill.solvers.status import CheckResult

    problem, _ = normalize_problem(build_problem(fa_like_graph(), load_machine("h100")), upper=300)
    mod = modulo_schedule(problem, 102)
    first = math.ceil(mod.length / 102)

    def shape(r):  # type: ignore[no-untyped-def]
        return (r.status, r.stages, r.length, dict(r.proven), sorted(r.budgets.values()),
                len(set(r.group.values())))

    alone = [solve_joint(problem, 102, n, min_length=mod.length) for n in (first, first + 1)]
    assert [r.status for r in alone] == [CheckResult.UNSAT, CheckResult.SAT]
    shared = solve_joint(problem, 102, first + 1, first=first, min_length=mod.length)
    assert shape(shared) == shape(alone[1]) and shared.stages == first + 1
    assert first * 102 < shared.length <= (first + 1) * 102  # inside the second window, by its definition
    assert shared.length_low == shared.length  # the length goal proven: every shorter L refuted
    refuted = solve_joint(problem, 102, first, first=first, min_length=mod.length)
    assert refuted.status == CheckResult.UNSAT and refuted.length_low == first * 102 + 1


def test_a_window_past_max_stages_is_noted_only_once_the_allowed_ones_are_refuted() -> None:
    """The FA-like loop at II 102: 2 stages refuted, 3 stages (where its schedule is) beyond max_stages=2,
    noted as skipped after the refutation; Figure 1 has its schedule in the first window, so nothing
    past max_stages is noted."""
    s = twill.schedule(fa_like_graph(), "h100", max_stages=2)
    first = [(a.stages, a.status) for a in s.certificate.attempts if a.ii == 102]
    assert first == [(2, "unsat"), (3, "skipped")] and s.ii > 102 and s.stages <= 2
    f1 = twill.schedule(figure1_graph(), "h100", max_stages=2)
    assert [a.status for a in f1.certificate.attempts] == ["sat"]


def test_a_modulo_phase_stopped_with_bounds_gives_the_same_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    """When the modulo phase only bounds the least modulo length (its time slice ran out), the joint
    windows run from ``ceil(low / II)`` to ``ceil(length / II) + stage_slack``, a superset of the exact
    ones, and the joint search's lower bound on L is ``low``. The FA-like loop, every II's bounds one II
    below and two above the exact least length (past the optimal L, so a lower bound on L taken from it
    would force a longer one): the same II, L and costs, proven, one more window (refuted) below, and the
    certificate saying which IIs were only bounded."""
    import dataclasses
    import math

    import twill.search.decide as search
    from twill.search.run import MODULO_SLICE_S
    from twill.solvers.status import SolveStatus

    exact = twill.schedule(fa_like_graph(), "h100")
    real = search.modulo_schedule
    lengths: dict[int, int] = {}

    def bounded(problem, ii, **kw):  # type: ignore[no-untyped-def]
        # no time limit here: only the phase's slice, which applies once a schedule is in hand
        assert kw["time_limit"] is None and kw["bounds_after"] == MODULO_SLICE_S
        mod = real(problem, ii, **kw)
        if mod.status != SolveStatus.OPTIMAL:
            return mod
        lengths[ii] = mod.length
        # only the bounds are read by the joint search (the start times serve strategy="swp")
        return dataclasses.replace(mod, status=SolveStatus.FEASIBLE, low=max(1, mod.length - ii),
                                   length=mod.length + 2 * ii)

    monkeypatch.setattr(search, "modulo_schedule", bounded)
    s = twill.schedule(fa_like_graph(), "h100")
    assert s.certificate.proven_optimal and exact.certificate.proven_optimal
    assert all(length + 2 * ii > exact.length for ii, length in lengths.items())
    assert (s.ii, s.length, s.stages) == (exact.ii, exact.length, exact.stages)
    assert sorted(g.registers for g in s.warp_groups) == sorted(g.registers for g in exact.warp_groups)

    def handoffs(x: Schedule) -> int:
        return sum(e.cross for e in x.problem.edges if x.group[e.src] != x.group[e.dst])

    assert handoffs(s) == handoffs(exact)
    assert lengths and all(length > ii for ii, length in lengths.items())
    for ii, length in lengths.items():
        windows = [a.stages for a in s.certificate.attempts if a.ii == ii and a.phase == "joint"]
        assert windows[0] == math.ceil((length - ii) / ii) == math.ceil(length / ii) - 1
        assert next(a.status for a in s.certificate.attempts if a.ii == ii) == "unsat"
        assert max(windows) <= math.ceil((length + 2 * ii) / ii) + s.certificate.stage_slack
        assert any(f"LEN(M) at II {ii} bounded to [{length - ii}, {length + 2 * ii}]" in n
                   for n in s.certificate.notes)


@pytest.mark.skipif(not twill.solvers.cpsat.available(), reason="ortools is not installed")
def test_the_cpsat_modulo_method_gives_the_same_answer() -> None:
    """``modulo="cpsat"`` is one more exact way to the least modulo length: the same II, L and proof."""
    exact = twill.schedule(fa_like_graph(), "h100")
    s = twill.schedule(fa_like_graph(), "h100", modulo="cpsat")
    assert s.certificate.proven_optimal
    assert (s.ii, s.length, s.stages) == (exact.ii, exact.length, exact.stages)
    assert [(a.ii, a.stages, a.status) for a in s.certificate.attempts] == [
        (a.ii, a.stages, a.status) for a in exact.certificate.attempts]


@pytest.mark.skipif(not twill.solvers.cpsat.available(), reason="ortools is not installed")
def test_the_cpsat_joint_solver_gives_the_same_answer() -> None:
    """``solver="cpsat"`` (the joint problem on CP-SAT) finds the II, L and goals of the SMT encoding and
    refutes the same (II, window) pairs, every II on its own."""
    exact = twill.schedule(fa_like_graph(), "h100", ranges=False)
    s = twill.schedule(fa_like_graph(), "h100", solver="cpsat")
    assert s.certificate.proven_optimal
    assert (s.ii, s.length, s.stages, len(s.warp_groups)) == (exact.ii, exact.length, exact.stages,
                                                              len(exact.warp_groups))
    assert sum(g.warps * g.registers for g in s.warp_groups) == sum(
        g.warps * g.registers for g in exact.warp_groups)
    assert [(a.ii, a.stages, a.status) for a in s.certificate.attempts] == [
        (a.ii, a.stages, a.status) for a in exact.certificate.attempts]


def test_an_unknown_solver_is_named(monkeypatch) -> None:
    import sys

    with pytest.raises(twill.OptionsError, match=r"solver 'cvc5' is not one of yices, z3, cpsat"):
        twill.schedule(figure1_graph(), "h100", solver="cvc5")
    monkeypatch.setitem(sys.modules, "ortools.sat.python", None)  # import fails as if not installed
    with pytest.raises(twill.SolverUnavailableError, match=r"solver 'cpsat' needs the ortools package.*"
                                                           r"available: yices, z3"):
        twill.schedule(figure1_graph(), "h100", solver="cpsat")


# ----------------------------------------------------------------------------------------- apart pairs
def test_apart_keeps_two_ops_on_different_groups_and_is_checked_and_saved():
    s = twill.schedule(figure1_graph(), "h100", apart=[("P", "S")])
    assert s.problem.options.apart == (("P", "S"),)
    assert s.group["S"] != s.group["P"]
    assert violations(s) == []
    again = Schedule.from_json(s.to_json())
    assert again.problem.options.apart == (("P", "S"),) and violations(again) == []
    # A schedule that puts them together breaks the "apart" family.
    g = s.group["S"]
    together = {n: replace(slot, warp_group=g) if n == "P" else slot for n, slot in s.slots.items()}
    groups = tuple(replace(w, ops=tuple(sorted({*w.ops, "P"})) if w.index == g else
                           tuple(o for o in w.ops if o != "P")) for w in s.warp_groups)
    found = violations(replace(s, slots=together, warp_groups=tuple(w for w in groups if w.ops)))
    assert "apart" in [e.family for e in found]


@pytest.mark.parametrize(("apart", "message"), [
    ([("S", "X")], "apart: 'X' of the pair ('S', 'X') is not an op of 'figure1'"),
    ([("S", "S")], "apart: ('S', 'S') is not a pair of two different op names"),
    (["SP"], "apart: 'SP' is not a pair of two different op names"),
    ([1], "apart: 1 is not a pair of two different op names"),
    (("S", "P"), "apart=('S', 'P') is one pair, not a list of pairs: write [('S', 'P')]"),
    ("SP", "apart='SP' must be a list of op-name pairs"),
])
def test_apart_names_a_bad_pair(apart, message):
    from twill.errors import OptionsError

    with pytest.raises(OptionsError, match=re.escape(message)):
        twill.schedule(figure1_graph(), "h100", apart=apart)


def test_cli_apart(tmp_path):
    from pathlib import Path

    from twill.cli import main

    out = tmp_path / "s.json"
    paper = Path(__file__).resolve().parents[1] / "twill" / "ir" / "paper.py"
    assert main(["schedule", f"{paper}::figure1_graph", "--machine", "h100", "--apart", "S,P",
                 "--json", str(out)]) == 0
    s = Schedule.from_json(out.read_text())
    assert s.problem.options.apart == (("P", "S"),) and s.group["S"] != s.group["P"]


@pytest.mark.parametrize(("options", "message"), [
    ({"strategy": "swp"}, "needs strategy='joint'"),
    ({"max_groups": 1}, "apart: 'P' and 'S' need two warp groups, but the pool offers one"),
    ({"cross_group": False}, "joined by the register edge S->P, which cross_group=False keeps inside"),
])
def test_apart_that_no_schedule_can_keep_is_refused_before_solving(options, message):
    from twill.errors import OptionsError

    with pytest.raises(OptionsError, match=re.escape(message)):
        twill.schedule(figure1_graph(), "h100", apart=[("S", "P")], time_limit=5, **options)


def test_apart_of_two_variable_latency_ops_is_refused():
    from twill.errors import OptionsError

    g = figure1_graph()
    g.add_op("L1", "tma_load", busy={"tma": 1}, latency=4, variable_latency=True)
    g.add_op("L2", "tma_load", busy={"tma": 1}, latency=4, variable_latency=True)
    g.add_edge("L1", "S", carrier="smem")
    g.add_edge("L2", "O", carrier="smem")
    with pytest.raises(OptionsError, match="'L1' and 'L2' both have variable latency"):
        twill.schedule(g, "h100", apart=[("L1", "L2")], time_limit=5)


def test_a_saved_schedule_whose_apart_names_an_unknown_op_is_refused(tmp_path):
    from twill.errors import TwillError

    data = json.loads(twill.schedule(figure1_graph(), "h100", apart=[("S", "P")]).to_json())
    data["problem"]["options"]["apart"] = [["S", "nosuch"]]
    with pytest.raises(TwillError, match="'nosuch' of the pair"):
        Schedule.from_dict(data)


def test_a_schedule_not_proven_shortest_refutes_only_the_windows_below_its_bound(monkeypatch) -> None:
    """CP-SAT minimizes L over all the windows of an II at once: when the time limit stops it at a
    schedule in window 3 with only L >= 11 proven (II 10), window 1 is refuted, window 2 is undecided,
    and the certificate says so (it once called window 2 refuted)."""
    import time
    from types import SimpleNamespace

    from twill.model.bounds import bounds
    from twill.search import decide as search
    from twill.search.run import Run
    from twill.solvers.joint.result import JointResult
    from twill.solvers.status import CheckResult

    problem = twill.schedule(figure1_graph(), "h100").problem
    run = Run(problem, bounds(problem), None, None, time.monotonic(), [], {}, {})
    found = JointResult(10, 3, CheckResult.SAT, {"S": 0, "P": 1, "O": 2}, {"S": 0, "P": 0, "O": 0}, {0: 24},
                        {0: 4}, 25, {"length": False}, length_low=11)
    monkeypatch.setattr(search, "solve_joint_cpsat", lambda *args, **kwargs: found)
    assert search._joint(run, 10, 1, 4, SimpleNamespace(low=5), "cpsat") is found
    assert [(a.stages, a.status) for a in run.attempts] == [(1, "unsat"), (2, "timeout"), (3, "sat")]
