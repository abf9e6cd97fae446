"""Graph-format features of issue 26: ops that use no unit, idle trailing cycles, per-edge hand-off costs,
liveness through views, the explicit asynchronous-reader flag. Every expected value is derived by hand in
the comments; the random-loop agreement with the exact oracle is in tests/test_oracle.py."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

import twill
from twill.errors import GraphError
from twill.ir.graph import Graph
from twill.ir.machine import load_machine
from twill.model.liveness import memory_intervals, register_intervals, value_uses
from twill.model.problem import Options, build_problem
from twill.schedule import Certificate, Schedule, make_groups, slots_from
from twill.solvers.normalize import normalize_problem
from twill.verify import violations

H100 = load_machine("h100")


def _schedule(problem, ii: int, length: int, start: dict, group: dict) -> Schedule:
    """A hand-made schedule of ``problem`` (4-warp groups, budgets 256) for :func:`twill.verify`."""
    groups = make_groups(problem, start, group, dict.fromkeys(set(group.values()), 4),
                         dict.fromkeys(set(group.values()), 256))
    return Schedule(problem, ii, length, slots_from(start, group, ii, problem.names), groups,
                    Certificate(0, 0, 0, False, ()))


# ------------------------------------------------------------------------------ ops that use no unit
def _chain_with_view() -> Graph:
    g = Graph("view_chain")
    g.add_op("a", "alu", busy={"alu": 2}, warps=4)
    g.add_op("v", "reshape", busy={}, view=True, warps=4)
    g.add_op("b", "alu", busy={"alu": 3}, warps=4)
    g.add_op("c", "alu", busy={"alu": 1}, warps=4)
    g.add_edge("a", "v")
    g.add_edge("v", "b")
    g.add_edge("b", "c")
    return g


def test_no_unit_op_costs_nothing() -> None:
    # ALU work 2 + 3 + 1 = 6 is the ResMII (the view adds none); the chain a (2) -> v (0) -> b (3) -> c (1)
    # has length 6, so II 6 and L 6 on one group, with v at a's end, 2, and b at 2 as well.
    s = twill.schedule(_chain_with_view(), H100, max_groups=1)
    cpu = s.problem.cycles_per_unit
    assert round(s.ii * cpu) == 6 and round(s.length * cpu) == 6
    assert round(s.start["v"] * cpu) == 2 and round(s.start["b"] * cpu) == 2
    assert s.problem.op("v").cycles == 0 and s.problem.op("v").issue_cycles == 0


def test_no_unit_op_bad_value_named() -> None:
    g = Graph("g")
    with pytest.raises(GraphError, match=r"op 'v': latency=-2 must be a non-negative integer") as info:
        g.add_op("v", "view", busy={}, latency=-2)
    assert info.value.op == "v"


# ------------------------------------------------------------------------------ idle trailing cycles
def test_completion_after_last_busy_cycle() -> None:
    # The Tensor Core is busy 2 cycles, the op completes at 6 (idle trailing cycles): ResMII 2 and, one
    # op, L = completion = 6. The same op without completion has L = 2.
    g = Graph("tail")
    g.add_op("mma", "gemm", busy={"tc": 2}, completion=6, issue_cycles=1)
    op = g.op("mma")
    assert (op.busy_cycles, op.cycles, op.latency) == (2, 6, 6)  # latency defaults to completion
    s = twill.schedule(g, H100)
    cpu = s.problem.cycles_per_unit
    assert round(s.ii * cpu) == 2 and round(s.length * cpu) == 6
    plain = Graph("plain")
    plain.add_op("mma", "gemm", busy={"tc": 2}, issue_cycles=1)
    s2 = twill.schedule(plain, H100)
    assert round(s2.length * s2.problem.cycles_per_unit) == 2


def test_completion_normalized_keeps_tail() -> None:
    # Costs 1 (a), 2 busy and 6 complete (mma): gcd 1 and a small sum keep them as they are, so the
    # normalized op still completes 4 units after its last busy unit.
    g = Graph("tail")
    g.add_op("a", "alu", busy={"alu": 1})
    g.add_op("mma", "gemm", busy={"tc": 2}, completion=6, issue_cycles=1)
    g.add_edge("a", "mma")
    prob, _ = normalize_problem(build_problem(g, H100))
    op = prob.op("mma")
    assert op.cycles - op.busy_cycles == round(4 / prob.cycles_per_unit)
    assert op.cycles >= op.busy_cycles


def test_completion_errors_name_the_op() -> None:
    g = Graph("g")
    with pytest.raises(GraphError, match=r"op 'x': completion=1 is before its last busy cycle.*3 cycles"):
        g.add_op("x", "alu", busy={"alu": 3}, completion=1)
    with pytest.raises(GraphError, match=r"op 'y': completion=-1 must be a non-negative integer"):
        g.add_op("y", "alu", busy={"alu": 3}, completion=-1)
    with pytest.raises(GraphError, match=r"op 'z': issue_cycles=5 exceeds its completion 4"):
        g.add_op("z", "alu", busy={"alu": 3}, completion=4, issue_cycles=5)


# ------------------------------------------------------------------------------ per-edge hand-off cost
def _crossing(handoff: int | None, carrier: str) -> Graph:
    g = Graph("handoff")
    g.add_op("a", "alu", busy={"alu": 1})
    g.add_op("b", "alu", busy={"alu": 1})
    g.add_edge("a", "b", latency=2, carrier=carrier, handoff=handoff)
    return g


@pytest.mark.parametrize("carrier", ["smem", "tmem", "register", "none"])
def test_edge_handoff_priced(carrier: str) -> None:
    # a and b kept apart: b waits d = 2 plus the edge's hand-off 7, so b starts at 9 and ends at 10.
    s = twill.schedule(_crossing(7, carrier), H100, apart=[("a", "b")])
    cpu = s.problem.cycles_per_unit
    assert build_problem(_crossing(7, carrier), H100).edges[0].cross == 7
    assert round((s.start["b"] - s.start["a"]) * cpu) == 9 and round(s.length * cpu) == 10


def test_edge_handoff_overrides_machine() -> None:
    # Without the field an SMEM edge costs the machine's mbarrier hand-off; with it, the given cycles.
    machine_cost = H100.handoff_cycles("smem", 0)
    assert build_problem(_crossing(None, "smem"), H100).edges[0].cross == machine_cost
    assert build_problem(_crossing(machine_cost + 5, "smem"), H100).edges[0].cross == machine_cost + 5


def test_edge_handoff_bad_value_names_edge() -> None:
    g = Graph("g")
    g.add_op("a", "alu", busy={"alu": 1})
    g.add_op("b", "alu", busy={"alu": 1})
    with pytest.raises(GraphError, match=r"edge a->b: handoff=-3 must be a non-negative integer") as info:
        g.add_edge("a", "b", carrier="smem", handoff=-3)
    assert info.value.edge == ("a", "b")


# ------------------------------------------------------------------------------ liveness through views
def _through_view(view: bool, carrier: str = "register") -> Graph:
    g = Graph("alias")
    regs = 100 if carrier == "register" else 0
    smem = 4096 if carrier == "smem" else 0
    g.add_op("p", "alu", busy={"alu": 1}, regs=regs, smem=smem)
    g.add_op("v", "trans", busy={}, view=view)
    g.add_op("r", "alu", busy={"alu": 2})
    g.add_edge("p", "v", carrier=carrier)
    g.add_edge("v", "r", carrier=carrier, latency=4, distance=1)
    return g


def test_register_value_lives_until_the_views_reader() -> None:
    # p at 0 (1 cycle), v at 1, r at 5 with δ 1 on the v -> r edge, II 10, one group: read through the
    # view, p's value lives until r of the next iteration starts, 5 + 10 = 15; were v not a view, the
    # value would die when v starts, at max(0 + 1, 1) = 1.
    start, group = {"p": 0, "v": 1, "r": 5}, {"p": 0, "v": 0, "r": 0}
    alias = build_problem(_through_view(True), H100)
    plain = build_problem(_through_view(False), H100)
    assert [(e.dst, d) for e, d in value_uses(alias, "p", "register")] == [("v", 0), ("r", 1)]
    live = {iv.what: (iv.start, iv.end) for iv in register_intervals(alias, 10, start, group)}
    assert live["p"] == (0, 15)
    live = {iv.what: (iv.start, iv.end) for iv in register_intervals(plain, 10, start, group)}
    assert live["p"] == (0, 1)


def test_smem_value_lives_until_the_views_reader_ends() -> None:
    # An SMEM value lives until its last reader ends: through the view, r of the next iteration ends at
    # 5 + 10 + 2 = 17; without the view rule, when v (0 cycles) ends, at max(0 + 1, 1 + 0) = 1.
    start, group = {"p": 0, "v": 1, "r": 5}, {"p": 0, "v": 0, "r": 0}
    for view, end in ((True, 17), (False, 1)):
        prob = build_problem(_through_view(view, "smem"), H100)
        (iv,) = memory_intervals(prob, 10, start, group, "smem")
        assert (iv.start, iv.end) == (0, end)


def test_verifier_follows_views() -> None:
    # The register value of p (100 registers + 26 overhead) overlaps a second 100-register value q only
    # when p lives through the view: q at 3..4 (same group), p live [0, 15) through the view, so at
    # residue 3 the group holds 100 + 100 + 26 = 226 > a limit of 200; as a plain op p dies at 1.
    def graph(view: bool) -> Graph:
        g = _through_view(view)
        g.add_op("q", "alu", busy={"alu": 1}, regs=100)
        return g
    start, group = {"p": 0, "v": 1, "r": 5, "q": 3}, {"p": 0, "v": 0, "r": 0, "q": 0}
    for view in (True, False):
        prob = build_problem(graph(view), H100, Options(register_limit=200))
        found = [v for v in violations(_schedule(prob, 10, 7, start, group)) if v.family == "registers"]
        assert bool(found) == view, (view, found)


def test_view_errors_name_the_op() -> None:
    g = Graph("g")
    with pytest.raises(GraphError, match=r"op 'v' is a view .* holds storage of its own: regs=8"):
        g.add_op("v", "trans", busy={}, view=True, regs=8)
    g.add_op("lonely", "trans", busy={}, view=True)
    with pytest.raises(GraphError, match=r"op 'lonely' is a view but reads no value"):
        g.check()


# ------------------------------------------------------------------------------ asynchronous readers
def _reader(**kw) -> Graph:
    g = Graph("reader")
    g.add_op("p", "alu", busy={"alu": 1}, regs=100)
    g.add_op("r", "gemm", **kw)
    g.add_edge("p", "r")
    return g


@pytest.mark.parametrize(("kw", "expected"), [
    # issue 1 < busy 4: inferred asynchronous, the value lives until r ends, 2 + 4 = 6
    (dict(busy={"tc": 4}, issue_cycles=1), 6),
    # the same op flagged synchronous: the value dies when r starts, at 2
    (dict(busy={"tc": 4}, issue_cycles=1, async_reader=False), 2),
    # busy 2 and issued for 2 cycles, completing at 5 (idle tail): the old inference (issue < cycles)
    # would call it asynchronous; the busy-cycle inference does not: dies at 2
    (dict(busy={"alu": 2}, completion=5), 2),
    # ... unless the flag says so: lives until r completes, 2 + 5 = 7
    (dict(busy={"alu": 2}, completion=5, async_reader=True), 7),
])
def test_async_reader_flag(kw: dict, expected: int) -> None:
    prob = build_problem(_reader(**kw), H100)
    live = {iv.what: iv.end for iv in register_intervals(prob, 20, {"p": 0, "r": 2}, {"p": 0, "r": 0})}
    assert live["p"] == expected


def test_async_reader_bad_value_named() -> None:
    g = Graph("g")
    with pytest.raises(GraphError, match=r"op 'r': async_reader='yes' must be true or false"):
        g.add_op("r", "gemm", busy={"tc": 4}, async_reader="yes")


# ------------------------------------------------------------------------------ JSON
def test_json_round_trip_keeps_features() -> None:
    g = _through_view(True)
    g.add_op("t", "gemm", busy={"tc": 2}, completion=9, async_reader=False)
    g.add_edge("r", "t", carrier="tmem", handoff=11)
    back = Graph.from_dict(json.loads(json.dumps(g.to_dict())))
    assert back.op("v").view and back.op("t").completion == 9 and back.op("t").async_reader is False
    assert [e.handoff for e in back.edges] == [None, None, 11]
    assert back.to_dict() == g.to_dict()
    # a graph without the features writes none of the new keys (old files and outputs are unchanged)
    plain = _crossing(None, "smem").to_dict()
    assert not {"completion", "async_reader", "view"} & set(plain["ops"][0])
    assert "handoff" not in plain["edges"][0]


def test_problem_json_round_trip_keeps_features() -> None:
    g = _through_view(True)
    g.add_op("t", "gemm", busy={"tc": 2}, completion=9, async_reader=False)
    g.add_edge("r", "t", carrier="tmem", handoff=11)
    prob = build_problem(g, H100)
    back = type(prob).from_dict(json.loads(json.dumps(prob.to_dict())))
    back.check()
    assert back.ops == prob.ops and back.edges == prob.edges
    assert replace(back.op("t")).cycles == 9


@pytest.mark.parametrize("where,field",
                         [("edge", "blocking"), ("edge", "inplace"), ("op", "variable_latency")])
def test_a_flag_given_as_text_is_refused_not_read_as_true(where: str, field: str) -> None:
    """``"false"`` in a graph JSON is not true: a flag must be a JSON boolean, named with its op or edge."""
    g = twill.Graph("flags")
    g.add_op("a", "alu", busy={"alu": 1})
    g.add_op("b", "alu", busy={"alu": 1})
    g.add_edge("a", "b")
    data = g.to_dict()
    (data["edges"][0] if where == "edge" else data["ops"][0])[field] = "false"
    with pytest.raises(twill.GraphError, match=rf"{field}='false' must be true or false"):
        twill.Graph.from_dict(data)
