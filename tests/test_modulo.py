"""The modulo-scheduling ILP at fixed II, against hand derivations and an independent brute force."""

from __future__ import annotations

import inspect
import itertools
import random
from dataclasses import replace

import pulp
import pytest

import twill.solvers.cpsat
import twill.solvers.modulo.methods
from twill.ir.graph import Graph, Reservation
from twill.ir.paper import figure1_graph
from twill.model.bounds import rec_mii, res_mii
from twill.model.problem import Problem
from twill.solvers.modulo.methods import modulo_schedule
from twill.solvers.status import SolveStatus

# modulo_schedule solves the time-indexed ILP through a MILP backend (``backend=``); newer versions also
# take ``method="smt"`` (the same constraints by SMT) and need ``method="ilp"`` for the ILP.
_HAS_METHOD = "method" in inspect.signature(modulo_schedule).parameters
SOLVER_MARKS = {
    "cbc": [],
    "highs": [pytest.mark.skipif(not pulp.HiGHS().available(), reason="highspy is not installed")],
    "smt": [pytest.mark.skipif(not _HAS_METHOD, reason="no SMT method in this version")],
    "cpsat": [pytest.mark.skipif(not twill.solvers.cpsat.available(), reason="ortools is not installed")],
}
SOLVERS = [pytest.param(name, marks=marks) for name, marks in SOLVER_MARKS.items()]


def _solve(problem: Problem, ii: int, solver: str = "cbc", **kwargs):
    """``modulo_schedule`` with ``solver`` = a MILP backend (the ILP method) or ``"smt"``."""
    if solver in ("smt", "cpsat"):
        return modulo_schedule(problem, ii, method=solver, **kwargs)
    if _HAS_METHOD:
        kwargs["method"] = "ilp"
    return modulo_schedule(problem, ii, backend=solver, **kwargs)


# ----------------------------------------------------------------------------------------------------
# An independent checker and a brute-force optimum, in plain Python over the Problem's fields.


def _valid(problem: Problem, ii: int, start: dict[str, int]) -> bool:
    """Every dependence holds and no unit exceeds its capacity in the modular reservation table."""
    for e in problem.edges:
        if start[e.dst] + e.distance * ii < start[e.src] + e.latency:
            return False
    for unit, cap in problem.resources.units.items():
        table = [0] * ii
        for op in problem.ops:
            for r in op.rrt:
                if r.unit == unit:
                    for c in range(r.start, r.start + r.cycles):
                        table[(start[op.name] + c) % ii] += r.count
        if max(table) > cap:
            return False
    return True


def _least_starts(problem: Problem, ii: int, residue: dict[str, int]) -> dict[str, int] | None:
    """The least start times with the given residues mod II that meet every dependence among the ops in
    ``residue``, or None when none exist.

    With residues fixed, ``t_v = r_v + II k_v`` and an edge u->v becomes ``k_v >= k_u + w_e`` with
    ``w_e = ceil((d + r_u - r_v) / II) - δ``: a longest-path problem from ``k = 0``. Raising each
    violated consumer to the next start of its residue is Bellman-Ford relaxation: it reaches the least
    solution within n - 1 rounds, and a change in round n means a cycle with positive weight, i.e. no
    solution. The least solution is componentwise below every solution, so it has the least L for these
    residues; adding ops and edges only raises it, so it is also a lower bound for a partial assignment.
    """
    t = dict(residue)
    edges = [e for e in problem.edges if e.src in t and e.dst in t]
    for _ in range(len(t) + 1):  # n - 1 rounds to converge, one more to see it has
        changed = False
        for e in edges:
            need = t[e.src] + e.latency - e.distance * ii
            if t[e.dst] < need:
                t[e.dst] += -(-(need - t[e.dst]) // ii) * ii
                changed = True
        if not changed:
            return t
    return None


def _brute_min_length(problem: Problem, ii: int) -> int | None:
    """Least L = max(start + cycles) of a valid modulo schedule at ``ii``, or None if there is none.

    Every vector of residues mod II is enumerated depth first (the modular capacity depends on the
    residues alone, and is checked directly); for each, the least start times follow from the
    dependences (:func:`_least_starts`). A branch is cut only when the ops placed so far already break
    the capacity, have no valid start times, or cannot beat the best L found.
    """
    ops = list(problem.ops)
    caps = problem.resources.units
    table = {u: [0] * ii for u in caps}
    residue: dict[str, int] = {}
    best: list[int | None] = [None]

    def reserve(op, r, sign):
        ok = True
        for res in op.rrt:
            for c in range(res.start, res.start + res.cycles):
                slot = (r + c) % ii
                table[res.unit][slot] += sign * res.count
                ok = ok and table[res.unit][slot] <= caps[res.unit]
        return ok

    def place(i):
        starts = _least_starts(problem, ii, residue)
        if starts is None:
            return
        length = max((starts[op.name] + op.cycles for op in ops[:i]), default=0)
        if best[0] is not None and length >= best[0]:
            return
        if i == len(ops):
            best[0] = length
            return
        op = ops[i]
        for r in range(ii):
            residue[op.name] = r
            if reserve(op, r, +1):
                place(i + 1)
            reserve(op, r, -1)
            del residue[op.name]

    place(0)
    return best[0]


def _horizon(problem: Problem, ii: int) -> int:
    """Largest start any op needs in a least-length schedule at ``ii``.

    In :func:`_least_starts` each stage ``k_v`` is a longest path from 0 over simple paths, with edge
    weights ``w_e <= ceil((d + II - 1) / II) - δ``; so every stage is at most the sum K of the positive
    bounds over the edges, and every start at most ``II - 1 + II * K``.
    """
    k = sum(max(0, -(-(e.latency + ii - 1) // ii) - e.distance) for e in problem.edges)
    return ii - 1 + ii * k


def _naive_min_length(problem: Problem, ii: int) -> int | None:
    """Least L over every start vector in ``[0, horizon]^n``, one by one (tiny problems only)."""
    names = problem.names
    best = None
    for vec in itertools.product(range(_horizon(problem, ii) + 1), repeat=len(names)):
        start = dict(zip(names, vec, strict=True))
        if _valid(problem, ii, start):
            length = max(start[op.name] + op.cycles for op in problem.ops)
            best = length if best is None else min(best, length)
    return best


def _brute_min_ii(problem: Problem) -> tuple[int, int]:
    """Least II (from 1) with a valid modulo schedule, and the least L there."""
    ii = 1
    while True:
        length = _brute_min_length(problem, ii)
        if length is not None:
            return ii, length
        ii += 1


def _random_problem(seed: int, machine, make_problem) -> Problem:
    """3-6 ops on 1-2 units of capacity 1-2, busy 1-3 cycles, latencies 1-3 (an edge may override its
    producer's with 0-3); δ = 0 edges go forward in op order, carried edges (δ = 1 or 2) anywhere."""
    rng = random.Random(seed)
    n = rng.randint(3, 6)
    units = ["tc", "mufu"][: rng.randint(1, 2)]
    caps = {u: rng.randint(1, 2) for u in units}
    g = Graph(f"random{seed}")
    for i in range(n):
        unit = rng.choice(units)
        offset = rng.choice([0, 0, 1])
        rrt = [Reservation(unit, offset, rng.randint(1, 3), rng.randint(1, caps[unit]))]
        g.add_op(f"v{i}", "alu", rrt=rrt, latency=rng.randint(1, 3))
    for i in range(n):
        for j in range(i + 1, n):
            if rng.random() < 0.35:
                g.add_edge(f"v{i}", f"v{j}", latency=rng.choice([None, rng.randint(0, 3)]))
    for _ in range(rng.randint(1, 2)):
        g.add_edge(f"v{rng.randrange(n)}", f"v{rng.randrange(n)}", latency=rng.randint(1, 3),
                   distance=rng.randint(1, 2))
    return make_problem(g, machine, caps)


# ----------------------------------------------------------------------------------------------------


def test_brute_force_agrees_with_figure1_by_hand(h100, make_problem):
    # Sanity check of the brute force itself on the derivation of test_figure1_modulo: II 2, L 4.
    assert _brute_min_ii(make_problem(figure1_graph(), h100)) == (2, 4)


@pytest.mark.parametrize("solver", SOLVERS)
def test_figure1_modulo(h100, make_problem, solver):
    p = make_problem(figure1_graph(), h100)
    # II = 1: S and O both need the single TC in the one residue -> infeasible (ResMII = 2).
    assert _solve(p, 1, solver).status == SolveStatus.INFEASIBLE
    # II = 2. L >= 3 (S -> P -> O with d = 1 each, O takes 1 cycle). L = 3 forces S0 P1 O2, but 0 and 2
    # are the same TC residue mod 2. With L = 4 the starts lie in [0, 3] with O >= S + 2 and S, O of
    # different parity: only S = 0, O = 3; then P in {1, 2} (P >= S + 1, O >= P + 1), both optimal.
    r = _solve(p, 2, solver)
    assert r.status == SolveStatus.OPTIMAL
    assert r.length == 4
    assert (r.start["S"], r.start["O"]) == (0, 3)
    assert r.start["P"] in (1, 2)
    assert _valid(p, 2, dict(r.start))


def test_modulo_rejects_bad_ii(h100, make_problem):
    with pytest.raises(ValueError, match="II must be >= 1"):
        modulo_schedule(make_problem(figure1_graph(), h100), 0)


@pytest.mark.parametrize("solver", SOLVERS)
def test_self_loop_longer_than_ii_is_infeasible(h100, make_problem, solver):
    g = Graph("acc")
    g.add_op("A", "alu", busy={"alu": 1})
    g.add_edge("A", "A", latency=5, distance=2)
    p = make_problem(g, h100)
    # A's instance i+2 waits 5 cycles after instance i: 2 * II >= 5 -> II >= 3 (RecMII = ceil(5/2)).
    assert _solve(p, 2, solver).status == SolveStatus.INFEASIBLE
    assert _solve(p, 3, solver).length == 1


@pytest.mark.parametrize("solver", SOLVERS)
def test_multi_cycle_reservation_folds(h100, make_problem, solver):
    g = Graph("fold")
    g.add_op("A", "gemm", rrt=[Reservation("tc", 0, 3)])
    g.add_op("B", "gemm", rrt=[Reservation("tc", 1, 2)])
    p = make_problem(g, h100)
    # tc: 3 + 2 = 5 unit-cycles, capacity 1 -> II >= 5; at II = 5 they tile the five residues. A's rows
    # are [s_A, s_A + 3), B's [s_B + 1, s_B + 3): disjoint mod 5 with the least L. A at 0 takes residues
    # 0-2; B's two busy rows must be 3, 4 -> s_B = 2 (ends 4 < ... its RRT is 3 rows: ends at 5), L = 5.
    assert _solve(p, 4, solver).status == SolveStatus.INFEASIBLE
    r = _solve(p, 5, solver)
    assert r.length == 5
    assert _valid(p, 5, dict(r.start))


SEEDS = range(24)
# Seed 3 packs 14 unit-cycles (one op holds 2 Tensor Cores for 3 cycles) into II = 7 x capacity 2 exactly,
# and no packing exists; with the ILP of the first release CBC needed about a minute to prove II = 7
# infeasible (HiGHS well under a second).
CASES = [
    pytest.param(seed, name, marks=[*marks, *([pytest.mark.slow] if (seed, name) == (3, "cbc") else [])])
    for name, marks in SOLVER_MARKS.items() for seed in SEEDS
]


@pytest.mark.parametrize(("seed", "solver"), CASES)
def test_min_ii_and_length_match_brute_force(h100, make_problem, seed, solver):
    p = _random_problem(seed, h100, make_problem)
    want_ii, want_length = _brute_min_ii(p)
    ii = max(res_mii(p), rec_mii(p), 1)
    assert ii <= want_ii  # the bounds are lower bounds
    while True:
        r = _solve(p, ii, solver, tie_break=False)
        if r.status != SolveStatus.INFEASIBLE:
            break
        ii += 1
    assert r.status == SolveStatus.OPTIMAL
    assert ii == want_ii
    assert r.length == want_length
    assert _valid(p, ii, dict(r.start))
    assert r.length == max(r.start[op.name] + op.cycles for op in p.ops)
    assert min(r.start.values()) >= 0


# With seed 9's ops shuffled, CBC takes over 10 s to prove II = 4 infeasible (under a second in graph order).
ORDER_CASES = [
    pytest.param(seed, name, marks=[*marks, *([pytest.mark.slow] if (seed, name) == (9, "cbc") else [])])
    for name, marks in SOLVER_MARKS.items() for seed in (0, 5, 9, 17)
]


@pytest.mark.parametrize(("seed", "solver"), ORDER_CASES)
def test_op_order_does_not_matter(h100, make_problem, seed, solver):
    p = _random_problem(seed, h100, make_problem)
    ops = list(p.ops)
    random.Random(seed).shuffle(ops)
    shuffled = replace(p, ops=tuple(ops))
    want_ii, want_length = _brute_min_ii(p)
    assert _solve(shuffled, want_ii - 1, solver, tie_break=False).status == SolveStatus.INFEASIBLE
    r = _solve(shuffled, want_ii, solver, tie_break=False)
    assert (r.status, r.length) == (SolveStatus.OPTIMAL, want_length)
    assert _valid(p, want_ii, dict(r.start))


def test_time_limit_is_reported_not_hidden(h100, make_problem):
    # The hard case above under a 1 s limit: the answer may be "timeout" (or, on a fast machine, the
    # proof), but never a schedule, and never "infeasible" without the proof.
    p = _random_problem(3, h100, make_problem)
    assert _brute_min_ii(p)[0] == 8
    r = _solve(p, 7, "cbc", time_limit=1.0)
    assert not r.found and r.start == {} and r.length == 0
    assert r.status in (SolveStatus.TIMEOUT, SolveStatus.INFEASIBLE)
    if r.status == SolveStatus.INFEASIBLE:
        assert r.wall_s <= 1.5


@pytest.mark.parametrize("seed", [s for s in SEEDS if s in (2, 6, 10, 14, 19)])
def test_brute_force_matches_naive_enumeration(h100, make_problem, seed):
    # The residue search against plain enumeration of every start vector, at the least II and below it.
    p = _random_problem(seed, h100, make_problem)
    assert len(p.ops) == 3
    ii, length = _brute_min_ii(p)
    assert _naive_min_length(p, ii) == length
    assert _naive_min_length(p, ii - 1) is None


def test_random_problems_are_not_trivial(h100, make_problem):
    # Guard against a generator that only makes easy cases: some seeds need an II above the resource
    # bound, some have several units, and some carry a dependence across iterations on a cycle.
    problems = [_random_problem(seed, h100, make_problem) for seed in SEEDS]
    above = [p for p in problems if _brute_min_ii(p)[0] > res_mii(p)]
    assert len(above) >= 2
    assert any(rec_mii(p) > res_mii(p) for p in problems)
    assert any(len({r.unit for op in p.ops for r in op.rrt}) == 2 for p in problems)
    assert any(max(p.resources.units[u] for u in ("tc", "mufu")) == 2 for p in problems)


def test_tie_break_keeps_length_and_picks_shorter_lifetimes(h100, make_problem):
    g = Graph("regs")
    g.add_op("A", "alu", busy={"alu": 1}, regs=32)
    g.add_op("B", "exp", busy={"mufu": 2}, regs=16)
    g.add_op("C", "gemm", busy={"tc": 1}, regs=64)
    g.add_op("D", "gemm", busy={"tc": 1}, regs=128)
    g.add_edge("A", "B", latency=1)
    g.add_edge("B", "C", latency=2)
    g.add_edge("C", "A", latency=1, distance=1)
    g.add_edge("A", "D", latency=1)
    g.add_edge("D", "C", latency=1)
    p = make_problem(g, h100)
    # RecMII: A->B->C->A has Σd = 1 + 2 + 1 = 4 over δ = 1 -> 4. At II = 4 the critical path gives
    # A 0, B 1, C 3, L = 4; D sits in [A + 1, C - 1] = [1, 2] on the TC (C holds residue 3), so both
    # D = 1 and D = 2 have the least L. D's 128 registers live from D to C: 2 cycles at D = 1, 1 at D = 2;
    # A's value lives to max(B, C, D) = 3 either way. Stage 2 (fewest live registers) must pick D = 2.
    assert _solve(p, 3).status == SolveStatus.INFEASIBLE
    plain = _solve(p, 4, tie_break=False)
    tied = _solve(p, 4)
    assert plain.length == tied.length == 4
    assert dict(tied.start) == {"A": 0, "B": 1, "C": 3, "D": 2}
    assert plain.start["D"] in (1, 2)


@pytest.mark.skipif(not _HAS_METHOD, reason="no SMT method in this version")
@pytest.mark.parametrize("seed", [0, 5, 17])
def test_smt_hands_an_undecided_ii_to_the_ilp(h100, make_problem, monkeypatch, seed):
    # With no time for the SMT search, every II goes to the ILP fallback; the answers are still the
    # brute-force optimum (infeasible below the least II, the least length at it).
    monkeypatch.setattr(twill.solvers.modulo.methods, "SMT_SLICE", 0.0)
    p = _random_problem(seed, h100, make_problem)
    want_ii, want_length = _brute_min_ii(p)
    assert _solve(p, want_ii - 1, "smt").status == SolveStatus.INFEASIBLE
    r = _solve(p, want_ii, "smt")
    assert (r.status, r.length) == (SolveStatus.OPTIMAL, want_length)
    assert _valid(p, want_ii, dict(r.start))


# ----------------------------------------------------------------------------------------------------
# The iterative modulo scheduler (the ILP's incumbent and the range queries' stage bound).


@pytest.mark.parametrize("seed", range(40))
def test_iterative_modulo_schedule_is_valid_wherever_it_answers(h100, make_problem, seed):
    """Each schedule the heuristic returns passes the independent checker (dependences and every unit's
    modular reservation table counted from the ops' own tables), starts at 0, and at an II of twice
    the brute-force optimum (room to spare) the heuristic finds one."""
    from twill.solvers.modulo.ims import is_modulo_schedule, iterative_modulo_schedule

    p = _random_problem(seed, h100, make_problem)
    least, _ = _brute_min_ii(p)
    answered = 0
    for ii in range(1, 2 * least + 1):
        start = iterative_modulo_schedule(p, ii)
        if start is None:
            continue
        answered += 1
        assert ii >= least and _valid(p, ii, start) and min(start.values()) == 0
        assert is_modulo_schedule(p, ii, start)
    assert iterative_modulo_schedule(p, 2 * least) is not None and answered >= 1


def test_is_modulo_schedule_counts_a_units_capacity_across_ops(h100, make_problem):
    """Two ops that share the single tensor core in the same residue overflow it; one residue apart
    they fit (figure 1: S and O on the TC, one cycle each, II 2)."""
    from twill.solvers.modulo.ims import is_modulo_schedule

    p = make_problem(figure1_graph(), h100)
    ok = {"S": 0, "P": 1, "O": 3}
    assert _valid(p, 2, ok) and is_modulo_schedule(p, 2, ok)
    clash = {"S": 0, "P": 1, "O": 4}  # O in S's residue: two TC reservations in one slot
    assert not _valid(p, 2, clash) and not is_modulo_schedule(p, 2, clash)


# ----------------------------------------------------------------------------------------------------
# Stopped early: the bounds [low, length] on the least length that the search's stage windows rest on.


def _stop_after(monkeypatch, smt_checks: int, ilp_solves: int) -> None:
    """Make the SMT solver answer TIMEOUT after ``smt_checks`` checks and the MILP solver after
    ``ilp_solves`` solves, as a time limit would, at a point of the search chosen by the test."""
    from twill.solvers.ilp import IlpResult
    from twill.solvers.smt import SmtSession
    from twill.solvers.status import CheckResult

    real_check, real_ilp = SmtSession.check, twill.solvers.modulo.methods.solve_ilp
    calls = {"smt": 0, "ilp": 0}

    def check(self, deadline=None):
        calls["smt"] += 1
        return real_check(self, deadline) if calls["smt"] <= smt_checks else CheckResult.TIMEOUT

    def solve(model, **kwargs):
        calls["ilp"] += 1
        if calls["ilp"] > ilp_solves:
            return IlpResult(SolveStatus.TIMEOUT, 0.0)
        return real_ilp(model, **kwargs)

    monkeypatch.setattr(SmtSession, "check", check)
    monkeypatch.setattr(twill.solvers.modulo.methods, "solve_ilp", solve)


@pytest.mark.skipif(not _HAS_METHOD, reason="no SMT method in this version")
@pytest.mark.parametrize("seed", [0, 2, 5, 9, 17])
@pytest.mark.parametrize(("smt_checks", "ilp_solves"), [(0, 0), (1, 0), (2, 0), (0, 1), (0, 2), (1, 3)])
@pytest.mark.parametrize("heuristic", [True, False])
def test_a_stopped_search_bounds_the_least_length(h100, make_problem, monkeypatch, seed, smt_checks,
                                                   ilp_solves, heuristic):
    # Whatever the point where the solvers stop answering, a schedule that comes back is valid and the
    # least length (brute force) lies in [low, length]; an OPTIMAL one has low == length == the least.
    # Without the heuristic's schedule the ILP scans lengths up from the critical path instead.
    p = _random_problem(seed, h100, make_problem)
    want_ii, want_length = _brute_min_ii(p)
    if not heuristic:
        monkeypatch.setattr(twill.solvers.modulo.methods, "iterative_modulo_schedule",
                            lambda problem, ii: None)
    for method in ("smt", "cbc"):
        with monkeypatch.context() as mp:  # each method gets its own count of solver calls
            _stop_after(mp, smt_checks, ilp_solves)
            r = _solve(p, want_ii, method)
        assert r.status != SolveStatus.INFEASIBLE
        if not r.found:
            assert r.status == SolveStatus.TIMEOUT and r.low <= want_length
            continue
        assert _valid(p, want_ii, dict(r.start))
        assert r.length == max(r.start[op.name] + op.cycles for op in p.ops)
        assert r.low <= want_length <= r.length
        if r.status == SolveStatus.OPTIMAL:
            assert r.low == r.length == want_length


@pytest.mark.skipif(not _HAS_METHOD, reason="no SMT method in this version")
@pytest.mark.parametrize("limit", [{"time_limit": 0.0}, {"bounds_after": 0.0}])
def test_the_heuristic_schedule_comes_back_when_the_smt_search_cannot_start(h100, make_problem, limit):
    # No time at all (or none before bounds will do): the iterative modulo scheduler's schedule is still
    # a (not proven) answer.
    from twill.solvers.modulo.ims import iterative_modulo_schedule

    for seed in range(8):
        p = _random_problem(seed, h100, make_problem)
        want_ii, want_length = _brute_min_ii(p)
        heuristic = iterative_modulo_schedule(p, want_ii)
        r = _solve(p, want_ii, "smt", **limit)
        if heuristic is None:
            assert not r.found
            continue
        length = max(heuristic[op.name] + op.cycles for op in p.ops)
        assert r.found and r.length == length and dict(r.start) == heuristic
        assert r.status == (SolveStatus.OPTIMAL if r.low == length else SolveStatus.FEASIBLE)
        assert r.low <= want_length


# ----------------------------------------------------------------------------------------------------
# The CP-SAT method (optional ortools).


def test_cpsat_without_ortools_names_the_package(h100, make_problem, monkeypatch):
    import sys

    from twill.errors import SolverUnavailableError

    monkeypatch.setitem(sys.modules, "ortools.sat.python", None)  # import fails as if not installed
    p = _random_problem(0, h100, make_problem)
    with pytest.raises(SolverUnavailableError, match=r"ortools.*twill\[cpsat\]"):
        modulo_schedule(p, 8, method="cpsat")


@pytest.mark.skipif(not twill.solvers.cpsat.available(), reason="ortools is not installed")
def test_cpsat_keeps_the_heuristic_schedule_at_the_deadline(h100, make_problem):
    # No time at all: the answer is the heuristic's schedule (not proven), as for the SMT method.
    from twill.solvers.modulo.ims import iterative_modulo_schedule

    p = _random_problem(5, h100, make_problem)
    want_ii, want_length = _brute_min_ii(p)
    heuristic = iterative_modulo_schedule(p, want_ii)
    assert heuristic is not None
    r = _solve(p, want_ii, "cpsat", time_limit=0.0)
    length = max(heuristic[op.name] + op.cycles for op in p.ops)
    assert r.found and dict(r.start) == heuristic and r.length == length
    assert r.low <= want_length <= r.length


@pytest.mark.skipif(not _HAS_METHOD, reason="no SMT method in this version")
@pytest.mark.parametrize("seed", [0, 5, 17])
def test_bounds_after_does_not_stop_a_call_without_a_schedule(h100, make_problem, monkeypatch, seed):
    # Without the heuristic's schedule there is no upper bound to stop with: the call goes on and proves
    # the least length (brute force), however short bounds_after is.
    monkeypatch.setattr(twill.solvers.modulo.methods, "iterative_modulo_schedule", lambda problem, ii: None)
    p = _random_problem(seed, h100, make_problem)
    want_ii, want_length = _brute_min_ii(p)
    r = _solve(p, want_ii, "smt", bounds_after=0.0)
    assert (r.status, r.length) == (SolveStatus.OPTIMAL, want_length)
