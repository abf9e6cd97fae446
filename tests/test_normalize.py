"""Cost normalization (paper §5.2): small integers with the same ratios, checked against brute force."""

from __future__ import annotations

import itertools
import math
from collections import Counter

import pytest

from twill.ir.graph import Graph, Reservation
from twill.ir.machine import load_machine
from twill.model.problem import build_problem
from twill.solvers.normalize import normalize_costs, normalize_problem

# Cases that need the ILP: the gcd-reduced multiset sums to more than U.
ILP_CASES = [
    # (costs, U): reduced sums 3+5+7 = 15 > 10; 2*2+9+3*14+33 = 88 > 20; 4+4+6+10+25 = 49 > 12.
    ([3, 5, 7], 10),
    ([2, 2, 9, 14, 14, 14, 33], 20),
    ([4, 4, 6, 10, 25], 12),
    ([1, 100, 101], 30),
]


def _error(reduced: list[int], scaled: tuple[int, ...]) -> int:
    """F = max over pairs of |C_i C'_j - C_j C'_i|."""
    return max((abs(reduced[i] * scaled[j] - reduced[j] * scaled[i])
                for i, j in itertools.combinations(range(len(reduced)), 2)), default=0)


def _brute(costs: list[int], upper: int, *, keep_positive: bool = True, multiset: bool = True,
           keep_order: bool = True) -> tuple[int, int, set[tuple[int, ...]]]:
    """Least F over every integer vector C' (one value per distinct cost), then the largest Σ C' at that
    F; returns (F, Σ, the optimal vectors). Constraints: 1 <= Σ C' <= U over the (multi)set, C' >= 1 with
    keep_positive, and C' in the order of C."""
    count = Counter(c for c in costs if c)
    raw = sorted(count)
    g = math.gcd(*raw)
    reduced = [c // g for c in raw]
    mult = [count[c] if multiset else 1 for c in raw]
    low = 1 if keep_positive else 0
    best: dict[tuple[int, int], set[tuple[int, ...]]] = {}
    for vec in itertools.product(range(low, upper + 1), repeat=len(raw)):
        if keep_order and any(a > b for a, b in itertools.pairwise(vec)):
            continue
        total = sum(k * v for k, v in zip(mult, vec, strict=True))
        if not 1 <= total <= upper:
            continue
        best.setdefault((_error(reduced, vec), -total), set()).add(vec)
    (f, neg_total), vectors = min(best.items())
    return f, -neg_total, vectors


@pytest.mark.parametrize(("costs", "upper"), ILP_CASES)
def test_optimal_against_brute_force(costs, upper):
    n = normalize_costs(costs, upper=upper)
    f, total, vectors = _brute(costs, upper)
    assert n.status == "optimal"
    assert n.error == f
    assert n.scaled in vectors
    assert sum(n.map(c) for c in costs) == total


@pytest.mark.parametrize(("costs", "upper"), ILP_CASES[:2])
def test_optimal_against_brute_force_distinct_values(costs, upper):
    n = normalize_costs(costs, upper=upper, multiset=False)
    f, total, vectors = _brute(costs, upper, multiset=False)
    assert n.error == f
    assert n.scaled in vectors
    assert sum(n.scaled) == total


@pytest.mark.parametrize(("costs", "upper"), ILP_CASES)
def test_order_constraint_costs_nothing_on_these_cases(costs, upper):
    # Keeping the order of C is a rule of the model; on these cases it does not raise the least F.
    assert _brute(costs, upper, keep_order=False)[0] == _brute(costs, upper)[0]


def test_equal_costs_give_equal_values_and_no_error():
    # 1024 and 1024: gcd 1024, reduced [1, 1], sum 2 <= 300: returned as is, exactly (F = 0).
    n = normalize_costs([1024, 1024])
    assert n.map(1024) == 1
    assert n.error == 0 and n.exact
    assert [n.map(c) for c in (1024, 1024)] == [1, 1]


def test_exact_when_reduced_sum_fits():
    # gcd(1024, 1024, 128) = 128 -> [8, 8, 1], sum 17 <= 300: kept as is (never made larger).
    n = normalize_costs([1024, 1024, 128])
    assert (n.map(1024), n.map(128), n.error, n.status) == (8, 1, 0, "exact")


@pytest.mark.parametrize("k", [2, 3, 7, 64])
@pytest.mark.parametrize(("costs", "upper"), [*ILP_CASES, ([1024, 1024, 128], 300)])
def test_scale_invariance(costs, upper, k):
    base = normalize_costs(costs, upper=upper)
    scaled = normalize_costs([k * c for c in costs], upper=upper)
    assert [scaled.map(k * c) for c in costs] == [base.map(c) for c in costs]
    assert scaled.error == base.error  # F is measured on the gcd-reduced costs


@pytest.mark.parametrize(
    "costs",
    [
        [512, 512, 384, 4, 16, 700, 700, 92, 153, 256, 342],
        [1, 2, 3, 1000, 1001, 5000],
        [7] * 5 + [11] * 4 + [300, 301, 302],
    ],
)
def test_properties_on_realistic_lists(costs):
    upper = 60
    n = normalize_costs(costs, upper=upper)
    mapped = [n.map(c) for c in costs]
    # Sum bounds over the multiset.
    assert 1 <= sum(mapped) <= upper
    # Equal costs stay equal, the order is kept, and no positive cost becomes 0.
    for (a, x), (b, y) in itertools.combinations(zip(costs, mapped, strict=True), 2):
        if a == b:
            assert x == y
        if a < b:
            assert x <= y
    assert min(mapped) >= 1
    # The error reported is the error of the answer.
    reduced = [c // math.gcd(*n.raw) for c in n.raw]
    assert n.error == _error(reduced, n.scaled)


def test_keep_positive_prevents_collapse():
    # C = [1, 10000], U = 300, one entry each. Without keep_positive, C' = (0, 1) has
    # F = |1*1 - 10000*0| = 1, and any (0, k) has F = k, so (0, 1) is the unique optimum: the 1-cycle cost
    # collapses to 0. With keep_positive, C'_0 >= 1: F(1, k) = 10000 - k is least at k = 299 (sum 300),
    # F = 9701; F(c, k) for c >= 2 is at least 2*10000 - 298 > 9701.
    loose = normalize_costs([1, 10000], keep_positive=False)
    assert (loose.map(1), loose.map(10000), loose.error) == (0, 1, 1)
    assert any("collapsed to 0" in note for note in loose.collapses())
    kept = normalize_costs([1, 10000])
    assert (kept.map(1), kept.map(10000), kept.error) == (1, 299, 9701)


def test_zeros_are_ignored_and_map_to_zero():
    n = normalize_costs([0, 0, 6, 9])
    assert (n.map(0), n.map(6), n.map(9)) == (0, 2, 3)  # gcd 3, sum 5 <= 300
    empty = normalize_costs([0, 0])
    assert empty.raw == () and empty.map(0) == 0


@pytest.mark.parametrize("bad", [[-1, 4], [1.5, 2], [True, 3], ["7"], [None]])
def test_bad_input_raises(bad):
    with pytest.raises(ValueError, match="must be a non-negative integer"):
        normalize_costs(bad)


def test_more_costs_than_units_raises():
    # 301 positive entries cannot each keep at least 1 unit under U = 300.
    with pytest.raises(ValueError, match="raise U"):
        normalize_costs([3, 5] * 150 + [7])


def test_map_unknown_cost_raises():
    with pytest.raises(ValueError):
        normalize_costs([3, 5]).map(4)


def test_op_whose_reservations_start_late_is_normalized():
    # The sum bound counts each op's table length (start + cycles of its last reservation); for an op
    # whose second unit starts after the first, that length is none of its reservation sizes, latency or
    # issue time. Found by tests/test_fuzz.py: it used to raise "counted costs [2] are not among the costs".
    g = Graph("late")
    g.add_op("A", "op", rrt=[Reservation("tc", 0, 1), Reservation("mufu", 1, 1)], latency=0, issue_cycles=1)
    raw = build_problem(g, load_machine("h100"))
    problem, norm = normalize_problem(raw)
    assert norm.exact and problem.op("A").cycles == 2


def test_cbc_runs_without_its_threaded_search():
    # CBC's threaded search (any ``threads`` option, 1 included) stalled a few percent of these small
    # ILPs for 10 s on a lock wait (twill/solvers/ilp.py); the command twill builds must leave it off.
    import pulp

    from twill.solvers.ilp import _solver

    cmd = _solver("cbc", 5.0)
    assert isinstance(cmd, pulp.PULP_CBC_CMD)
    assert cmd.optionsDict.get("threads") is None
    assert not any("thread" in str(o).lower() for o in cmd.options)
