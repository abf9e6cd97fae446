"""Graph building and ``Graph.check``: malformed loops are rejected with the op or edge named."""

from __future__ import annotations

import pytest

from twill.errors import GraphError
from twill.ir.graph import Graph, Op, Reservation
from twill.ir.paper import figure1_graph


def _three_ops() -> Graph:
    g = Graph("g")
    g.add_op("A", "gemm", busy={"tc": 2}, latency=3)
    g.add_op("B", "exp", busy={"mufu": 1})
    g.add_op("C", "alu", busy={"alu": 1})
    return g


def test_figure1_graph_passes_check():
    g = figure1_graph()
    g.check(units=("tc", "mufu"))
    assert [op.name for op in g.ops] == ["S", "P", "O"]
    assert [(e.src, e.dst, e.distance) for e in g.edges] == [("S", "P", 0), ("P", "O", 0), ("O", "O", 1)]


def test_builder_defaults():
    g = Graph("g")
    op = g.add_op("A", "alu", rrt=[Reservation("alu", 0, 2), Reservation("smem", 1, 3, count=2)])
    # RRT rows: alu busy cycles 0-1, smem cycles 1-3, so the table is 4 rows long; the latency and the
    # issue time default to that length (a synchronous op).
    assert op.cycles == 4
    assert op.latency == 4 and op.issue_cycles == 4
    assert op.usage("smem") == [0, 2, 2, 2]
    assert op.total_usage("smem") == 6
    assert not op.is_async
    dep = g.add_edge("A", "A", distance=1)
    # An edge without a latency takes the producer's.
    assert g.edge_latency(dep) == 4


def test_streaming_producer_edge_has_zero_latency():
    # Paper §5.3: a variable-latency op with no incoming data edge streams; its consumers see d = 0.
    g = Graph("g")
    g.add_op("L", "tma_load", busy={"tma": 5}, latency=40, issue_cycles=1, variable_latency=True)
    g.add_op("G", "gemm", busy={"tc": 2})
    dep = g.add_edge("L", "G", blocking=True, carrier="smem")
    assert g.is_streaming("L")
    assert g.edge_latency(dep) == 0


def test_zero_distance_cycle_rejected_naming_the_cycle():
    g = _three_ops()
    g.add_edge("A", "B")
    g.add_edge("B", "C")
    g.add_edge("C", "A")
    with pytest.raises(GraphError, match="total distance 0") as info:
        g.check()
    message = str(info.value)
    # The cycle is reported as a path through all three ops, back to its start.
    names = message.split("dependence cycle ")[1].split(" ")[0].split("->")
    assert names[0] == names[-1]
    assert sorted(names[:-1]) == ["A", "B", "C"]
    assert info.value.edge is not None and set(info.value.edge) <= {"A", "B", "C"}


def test_cycle_with_a_carried_edge_is_fine():
    g = _three_ops()
    g.add_edge("A", "B")
    g.add_edge("B", "C")
    g.add_edge("C", "A", distance=1)
    g.check()


def test_negative_latency_rejected_on_edge():
    g = _three_ops()
    with pytest.raises(GraphError, match=r"edge A->B: latency=-1") as info:
        g.add_edge("A", "B", latency=-1)
    assert info.value.edge == ("A", "B")


def test_negative_latency_rejected_on_op():
    g = Graph("g")
    with pytest.raises(GraphError, match=r"op 'A': latency=-2") as info:
        g.add_op("A", "alu", busy={"alu": 1}, latency=-2)
    assert info.value.op == "A"


def test_negative_distance_rejected():
    g = _three_ops()
    with pytest.raises(GraphError, match=r"edge A->B \(δ=-1\): distance=-1"):
        g.add_edge("A", "B", distance=-1)


def test_unknown_unit_rejected_by_check_with_units():
    g = _three_ops()
    g.check()  # without a machine, any unit name is accepted
    with pytest.raises(GraphError, match=r"op 'C' uses unknown unit 'alu'") as info:
        g.check(units=("tc", "mufu"))
    assert info.value.op == "C"
    assert "mufu, tc" in str(info.value)  # the message lists the units the machine has


def test_op_using_no_unit_allowed():
    # A pure view uses no functional unit: no issue time, and no time at all unless a latency is given.
    g = Graph("g")
    view = g.add_op("idle", "alu", busy={})
    assert (view.cycles, view.latency, view.issue_cycles, view.units) == (0, 0, 0, frozenset())
    late = g.add_op("late", "alu", busy={}, latency=3)
    assert (late.cycles, late.latency, late.issue_cycles) == (0, 3, 0)
    g.check()


def test_op_using_no_unit_checked():
    # An op smuggled past the builder (straight into the networkx graph) is still checked by check().
    g = _three_ops()
    g.nx.add_node("ghost", op=Op("ghost", "alu", rrt=(), latency=-1, issue_cycles=0))
    with pytest.raises(GraphError, match="op 'ghost': latency=-1 must be a non-negative integer"):
        g.check()


def test_edge_to_missing_op_rejected():
    g = _three_ops()
    with pytest.raises(GraphError, match=r"edge A->Z: op 'Z' is not in graph 'g'") as info:
        g.add_edge("A", "Z")
    assert info.value.edge == ("A", "Z")
    with pytest.raises(GraphError, match=r"op 'Y' is not in graph"):
        g.add_edge("Y", "A")


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"busy": {"tc": 1.5}}, "cycles=1.5"),
        ({"busy": {"tc": 0}}, "cycles=0"),
        ({"busy": {"tc": 2}, "latency": 2.0}, "latency=2.0"),
        ({"busy": {"tc": 2}, "issue_cycles": 1.0}, "issue_cycles=1.0"),
        ({"busy": {"tc": 2}, "regs": 3.5}, "regs=3.5"),
        ({"busy": {"tc": 2}, "smem": "lots"}, "smem='lots'"),
        ({"busy": {"tc": 2}, "latency": True}, "latency=True"),
        ({"busy": {"tc": 2}, "spill_cost": 0.5}, "spill_cost=0.5"),
        ({"rrt": [Reservation("tc", 0, 2, count=0)]}, "count=0"),
        ({"rrt": [Reservation("tc", -1, 2)]}, "start=-1"),
    ],
)
def test_non_integer_or_out_of_range_costs_rejected(kwargs, field):
    g = Graph("g")
    with pytest.raises(GraphError, match=r"op 'X'") as info:
        g.add_op("X", "gemm", **kwargs)
    assert field in str(info.value)
    assert info.value.op == "X"


def test_non_integer_edge_latency_rejected():
    g = _three_ops()
    with pytest.raises(GraphError, match=r"edge A->B: latency=1.5"):
        g.add_edge("A", "B", latency=1.5)


def test_issue_longer_than_reservation_rejected():
    g = Graph("g")
    with pytest.raises(GraphError, match=r"op 'X': issue_cycles=5 exceeds its reservation table length 2"):
        g.add_op("X", "alu", busy={"alu": 2}, issue_cycles=5)


def test_duplicate_op_rejected():
    g = _three_ops()
    with pytest.raises(GraphError, match=r"op 'A' is already in graph"):
        g.add_op("A", "alu", busy={"alu": 1})


def test_bad_carrier_rejected():
    g = _three_ops()
    with pytest.raises(GraphError, match=r"edge A->B: carrier='dram'"):
        g.add_edge("A", "B", carrier="dram")


def test_empty_graph_rejected():
    with pytest.raises(GraphError, match="has no ops"):
        Graph("empty").check()


def test_dict_round_trip_keeps_ops_and_parallel_edges():
    g = _three_ops()
    g.add_edge("A", "B", latency=2)
    g.add_edge("A", "B", latency=1, distance=1, blocking=True, carrier="smem")
    back = Graph.from_dict(g.to_dict())
    assert back.ops == g.ops
    assert back.edges == g.edges
    assert len(back.edges) == 2  # both edges between A and B survive


def test_from_dict_rejects_malformed_data():
    data = _three_ops().to_dict()
    name = data["ops"][0]["name"]
    del data["ops"][0]["rrt"]
    with pytest.raises(GraphError, match=rf"op '{name}' \(ops\[0\]\): missing field\(s\) 'rrt'"):
        Graph.from_dict(data)
