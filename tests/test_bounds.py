"""ResMII, RecMII and the critical path on hand-worked loops (arithmetic in the comments)."""

from __future__ import annotations

import itertools
import random
from dataclasses import replace

import networkx as nx
import pytest

from twill.errors import GraphError
from twill.ir.graph import Graph, Reservation
from twill.ir.paper import figure1_graph
from twill.model.bounds import bounds, critical_path, critical_recurrence, rec_mii, res_mii
from twill.model.problem import Edge


def _mixed_units() -> Graph:
    g = Graph("mixed")
    g.add_op("A", "gemm", busy={"tc": 3})                                 # tc: 3 unit-cycles
    g.add_op("B", "gemm", busy={"tc": 2})                                 # tc: 2
    g.add_op("C", "exp", rrt=[Reservation("mufu", 0, 2, count=2)])       # mufu: 2 cycles x 2 = 4
    g.add_op("D", "exp", rrt=[Reservation("mufu", 1, 3)])                # mufu: 3 (rows 1..3)
    g.add_op("E", "alu", rrt=[Reservation("alu", 0, 4, count=3),        # alu: 4 x 3 = 12
                              Reservation("tc", 4, 1)])                   # tc: 1 (row 4)
    return g


@pytest.mark.parametrize(
    ("caps", "expected", "unit"),
    [
        # tc 6 / 1 = 6; mufu ceil(7 / 2) = 4; alu 12 / 3 = 4 -> 6, the Tensor Cores bind.
        ({"tc": 1, "mufu": 2, "alu": 3}, 6, "tc"),
        # tc 6 / 2 = 3; mufu ceil(7 / 2) = 4; alu 12 / 3 = 4 -> 4 (mufu and alu tie).
        ({"tc": 2, "mufu": 2, "alu": 3}, 4, None),
        # tc 6 / 2 = 3; mufu ceil(7 / 1) = 7; alu 12 / 3 = 4 -> 7, mufu binds.
        ({"tc": 2, "mufu": 1, "alu": 3}, 7, "mufu"),
        # tc 6 / 3 = 2; mufu ceil(7 / 3) = 3; alu ceil(12 / 5) = 3 -> 3 (mufu and alu tie).
        ({"tc": 3, "mufu": 3, "alu": 5}, 3, None),
        # tc 6 / 6 = 1; mufu ceil(7 / 7) = 1; alu ceil(12 / 12) = 1 -> 1.
        ({"tc": 6, "mufu": 7, "alu": 12}, 1, None),
    ],
)
def test_res_mii_several_units(h100, make_problem, caps, expected, unit):
    p = make_problem(_mixed_units(), h100, caps)
    assert res_mii(p) == expected
    if unit is not None:
        assert bounds(p).binding_unit == unit


def test_res_mii_is_at_least_one(h100, make_problem):
    g = Graph("tiny")
    g.add_op("A", "alu", busy={"alu": 1})
    # alu: 1 unit-cycle over capacity 4 -> ceil(1/4) = 1; units no op uses do not count.
    assert res_mii(make_problem(g, h100, {"alu": 4})) == 1


def test_figure1_bounds(h100, make_problem):
    p = make_problem(figure1_graph(), h100)
    # TC: S and O take one cycle each, capacity 1 -> ResMII = 2. The only cycle is O's self-loop,
    # d = 1 over δ = 1 -> RecMII = 1. One iteration alone: S at 0, P at 1, O at 2, ends at 3.
    b = bounds(p)
    assert (b.res_mii, b.rec_mii, b.mii, b.critical_path) == (2, 1, 2, 3)
    assert b.binding_unit == "tc"
    assert b.critical_cycle == ()  # RecMII does not bind


def _two_recurrences(c_latency: int) -> Graph:
    g = Graph("rec")
    for name in "ABC":
        g.add_op(name, "alu", busy={"alu": 1})
    g.add_edge("A", "B", latency=3)
    g.add_edge("B", "A", latency=2, distance=2)
    g.add_edge("C", "C", latency=c_latency, distance=2)
    return g


def test_rec_mii_non_integer_ratio_rounds_up(h100, make_problem):
    # A->B->A: Σd = 3 + 2 = 5 over Σδ = 0 + 2 = 2 -> 2.5 -> 3. C's self-loop: 1 / 2 -> 1. Max 3.
    # (At II = 2 the cycle needs 5 cycles but only 2 * 2 = 4 are there.)
    p = make_problem(_two_recurrences(c_latency=1), h100)
    assert rec_mii(p) == 3
    assert set(critical_recurrence(p)) == {"A", "B"}


def test_rec_mii_two_cycles_the_larger_wins(h100, make_problem):
    # A->B->A gives ceil(5/2) = 3 as above; C->C gives ceil(7/2) = 4 (3.5). Max 4.
    p = make_problem(_two_recurrences(c_latency=7), h100)
    assert rec_mii(p) == 4
    assert critical_recurrence(p) == ("C",)
    b = bounds(p)
    # ResMII: three 1-cycle ops on alu, capacity 1 -> 3 < 4, so the recurrence is reported.
    assert (b.res_mii, b.mii, b.critical_cycle) == (3, 4, ("C",))


def test_rec_mii_parallel_edges_and_nested_cycles(h100, make_problem):
    g = Graph("nested")
    for name in "ABC":
        g.add_op(name, "alu", busy={"alu": 1})
    g.add_edge("A", "B", latency=2)
    g.add_edge("B", "C", latency=2)
    g.add_edge("C", "A", latency=1, distance=1)   # A->B->C->A: (2 + 2 + 1) / 1 = 5
    g.add_edge("C", "B", latency=4, distance=3)   # B->C->B: (2 + 4) / 3 = 2
    g.add_edge("B", "A", latency=9, distance=3)   # A->B->A: (2 + 9) / 3 = 3.67 -> 4
    # Max over the cycles: 5.
    assert rec_mii(make_problem(g, h100)) == 5


def test_rec_mii_without_cycles_is_zero(h100, make_problem):
    g = Graph("chain")
    g.add_op("A", "alu", busy={"alu": 1})
    g.add_op("B", "alu", busy={"alu": 1})
    g.add_edge("A", "B", latency=5)
    assert rec_mii(make_problem(g, h100)) == 0


def test_rec_mii_rejects_zero_distance_cycle_naming_it(h100, make_problem):
    g = Graph("zero")
    g.add_op("A", "alu", busy={"alu": 1})
    g.add_op("B", "alu", busy={"alu": 1})
    g.add_edge("A", "B", latency=1)
    p = make_problem(g, h100)
    # build_problem checks the graph, so plant the back edge in the problem itself.
    back = Edge(index=1, src="B", dst="A", latency=1, distance=0, blocking=False, carrier="register", cross=0)
    bad = replace(p, edges=(*p.edges, back))
    with pytest.raises(GraphError, match="total distance 0") as info:
        rec_mii(bad)
    assert "A->B->A" in str(info.value) or "B->A->B" in str(info.value)
    # The graph layer rejects the same loop before any bound is computed.
    g.add_edge("B", "A", latency=1)
    with pytest.raises(GraphError, match="total distance 0"):
        make_problem(g, h100)


def test_critical_path(h100, make_problem):
    g = Graph("cp")
    g.add_op("A", "alu", busy={"alu": 2})
    g.add_op("B", "alu", busy={"alu": 3})
    g.add_op("C", "alu", busy={"alu": 9})
    g.add_op("D", "alu", busy={"alu": 1})
    g.add_edge("A", "B", latency=5)
    g.add_edge("A", "B", latency=1)             # a parallel, weaker edge changes nothing
    g.add_edge("B", "D", latency=4, distance=1)  # carried edges do not lengthen one iteration
    # A at 0, B at 5, B ends at 8; C alone ends at 9; D at 0 ends at 1 -> 9.
    assert critical_path(make_problem(g, h100)) == 9
    g.add_edge("B", "D", latency=3)
    # Now D at 5 + 3 = 8 ends at 9, still 9; make it longer:
    g.add_edge("A", "D", latency=20)
    # D at 20, ends at 21.
    assert critical_path(make_problem(g, h100)) == 21


def _brute_rec_mii(graph: Graph) -> int:
    """max over simple cycles of ceil(Σd / Σδ), choosing for each step the parallel edge that binds."""
    best = 0
    simple = nx.DiGraph([(e.src, e.dst) for e in graph.edges])
    for cycle in nx.simple_cycles(simple):
        steps = list(zip(cycle, cycle[1:] + cycle[:1], strict=True))
        options = [[(e.latency, e.distance) for e in graph.edges if (e.src, e.dst) == step] for step in steps]
        for choice in itertools.product(*options):
            d = sum(c[0] for c in choice)
            delta = sum(c[1] for c in choice)
            assert delta > 0
            best = max(best, -(-d // delta))
    return best


@pytest.mark.parametrize("seed", range(12))
def test_rec_mii_matches_cycle_enumeration(h100, make_problem, seed):
    rng = random.Random(seed)
    n = rng.randint(2, 6)
    g = Graph(f"r{seed}")
    for i in range(n):
        g.add_op(f"v{i}", "alu", busy={"alu": 1})
    for i, j in itertools.permutations(range(n), 2):
        if rng.random() < 0.3:
            # δ = 0 only forward, so every cycle has a carried edge.
            distance = 0 if i < j else rng.randint(1, 3)
            g.add_edge(f"v{i}", f"v{j}", latency=rng.randint(0, 7), distance=distance)
    for i in range(n):
        if rng.random() < 0.3:
            g.add_edge(f"v{i}", f"v{i}", latency=rng.randint(0, 7), distance=rng.randint(1, 3))
    assert rec_mii(make_problem(g, h100)) == _brute_rec_mii(g)


def test_critical_recurrence_of_a_lone_self_loop(h100, make_problem):
    # One op whose only cycle is its own loop-carried edge: ceil(4 / 2) = 2 > ResMII 1. networkx's
    # find_negative_cycle fails on a graph whose negative cycle is a self-loop ("'str' object has no
    # attribute 'get'"); found by tests/test_fuzz.py.
    g = Graph("lone")
    g.add_op("A", "alu", busy={"alu": 1})
    g.add_edge("A", "A", latency=4, distance=2)
    g.add_edge("A", "A", latency=1, distance=2, carrier="smem")
    p = make_problem(g, h100)
    assert rec_mii(p) == 2
    assert critical_recurrence(p) == ("A",)
    assert bounds(p).critical_cycle == ("A",)
