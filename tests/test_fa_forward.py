"""The expert FlashAttention forward schedules, rediscovered from the Triton kernels (issue 3).

FA3 on Hopper (paper §7.1, Fig. 7) and FA4 on Blackwell (§7.2, Fig. 9), from the sub-tiled kernels of
``examples/flash_attention_fwd_subtiled.py`` compiled on the CPU. The tests assert the *structure* of the
answer, with every reference quantity derived here from the graph rather than copied from a run:

* which ops make up a sub-tile: the weakly connected components of the loop graph once the streaming
  (variable-latency) loads are removed;
* the exps: ops whose MUFU reservation is at least half the longest one (``exp2`` of a whole tile; the
  one-row ``alpha`` exps are excluded);
* the resource bound: ``max_u ceil(sum busy_u / capacity_u)`` over the normalized problem.
"""

from __future__ import annotations

import math
from pathlib import Path

import networkx as nx
import pytest

import twill
import twill.solvers.cpsat
from twill.model.bounds import bounds
from twill.model.problem import Options, Problem, build_problem
from twill.schedule import Schedule
from twill.solvers.normalize import normalize_problem

ROOT = Path(__file__).resolve().parents[1]
SUBTILED = ROOT / "examples" / "flash_attention_fwd_subtiled.py"
PLAIN = ROOT / "examples" / "flash_attention_fwd.py"


def _graph(path: Path, kernel: str | None, machine: str) -> twill.Graph:
    entry = f"{path}::{kernel}" if kernel else str(path)
    return twill.graph_from_kernel(entry, machine=machine)


def _busy(p: Problem, name: str, unit: str) -> int:
    return sum(r.cycles * r.count for r in p.op(name).rrt if r.unit == unit)


def _res_mii(p: Problem) -> int:
    """ResMII recomputed from the reservation tables and the unit capacities."""
    total: dict[str, int] = {}
    for op in p.ops:
        for r in op.rrt:
            total[r.unit] = total.get(r.unit, 0) + r.cycles * r.count
    return max(math.ceil(t / p.resources.units[u]) for u, t in total.items())


def _subtiles(p: Problem) -> list[set[str]]:
    """Ops of each sub-tile: components of the graph without the variable-latency loads."""
    g = nx.Graph()
    keep = [op.name for op in p.ops if not op.variable_latency]
    g.add_nodes_from(keep)
    g.add_edges_from((e.src, e.dst) for e in p.edges if e.src in keep and e.dst in keep)
    return sorted((set(c) for c in nx.connected_components(g)), key=lambda c: min(c))


def _exps(p: Problem) -> list[str]:
    longest = max(_busy(p, op.name, "mufu") for op in p.ops)
    return [op.name for op in p.ops if longest and 2 * _busy(p, op.name, "mufu") >= longest]


def _residues(start: int, length: int, ii: int) -> set[int]:
    return {t % ii for t in range(start, start + length)}


def _ancestors_in(p: Problem, name: str, members: set[str]) -> set[str]:
    """Ops of ``members`` that ``name`` depends on in the same iteration (distance-0 paths)."""
    g = nx.DiGraph((e.src, e.dst) for e in p.edges if e.distance == 0)
    g.add_nodes_from(op.name for op in p.ops)
    return nx.ancestors(g, name) & members


@pytest.fixture(scope="module")
def fa3() -> Schedule:
    g = _graph(SUBTILED, "attn_fwd_subtiled_sm90", "h100")
    return twill.schedule(g, "h100", time_limit=300)


@pytest.fixture(scope="module")
def fa4() -> Schedule:
    g = _graph(SUBTILED, "attn_fwd_subtiled_sm100", "b200")
    return twill.schedule(g, "b200", time_limit=600)


# ---------------------------------------------------------------------------------------------- Hopper


def test_fa3_ii_is_the_resource_bound_and_proven(fa3: Schedule) -> None:
    p = fa3.problem
    assert fa3.ii == _res_mii(p)
    assert fa3.certificate.proven_optimal
    twill.verify(fa3)


def test_fa3_producer_group_holds_only_the_streaming_loads(fa3: Schedule) -> None:
    p = fa3.problem
    loads = {op.name for op in p.ops if op.variable_latency}
    assert loads, "the sub-tiled kernel loads K and V with TMA"
    groups = {fa3.group[n] for n in loads}
    assert len(groups) == 1
    (producer,) = groups
    assert set(fa3.warp_groups[producer].ops) == loads
    assert fa3.warp_groups[producer].role == "producer"


def test_fa3_two_consumer_groups_one_per_subtile(fa3: Schedule) -> None:
    p = fa3.problem
    tiles = _subtiles(p)
    assert len(tiles) == 2
    consumers = [set(w.ops) for w in fa3.warp_groups if w.role != "producer"]
    assert len(consumers) == 2
    assert sorted(consumers, key=lambda c: min(c)) == tiles


def test_fa3_ping_pong_exp_under_the_other_groups_gemms(fa3: Schedule) -> None:
    """Each exp's MUFU time lies mostly under the *other* consumer group's Tensor Core time."""
    p, ii = fa3.problem, fa3.ii
    exps = _exps(p)
    assert len(exps) == 2
    assert len({fa3.group[e] for e in exps}) == 2, "the two exps run on different groups"
    for e in exps:
        mufu = _residues(fa3.start[e], _busy(p, e, "mufu"), ii)
        other_tc: set[int] = set()
        for op in p.ops:
            if _busy(p, op.name, "tc") and fa3.group[op.name] not in (fa3.group[e], 0):
                other_tc |= _residues(fa3.start[op.name], _busy(p, op.name, "tc"), ii)
        assert len(mufu & other_tc) >= 0.5 * len(mufu), (e, len(mufu & other_tc), len(mufu))
    a, b = (_residues(fa3.start[e], _busy(p, e, "mufu"), ii) for e in exps)
    assert not a & b, "never two groups' exps at once"


def test_fa3_first_gemm_hoisted_before_the_previous_softmax_ends(fa3: Schedule) -> None:
    """In some consumer group, iteration i+1's first GEMM issues before iteration i's softmax ends.

    The paper (§7.1): Twill finds FA3's software pipeline, the first GEMM hoisted into the prologue, but
    applies it to only one warp group, because that already saturates the units. The first GEMM of a
    sub-tile is its Tensor Core op with no Tensor Core op before it in the iteration; its softmax is
    the exp and the non-Tensor-Core ops that follow it.
    """
    p, ii = fa3.problem, fa3.ii
    hoisted = []
    for tile in _subtiles(p):
        gemms = [n for n in tile if _busy(p, n, "tc")]
        first = [n for n in gemms if not _ancestors_in(p, n, set(gemms))]
        assert len(first) == 1
        (exp,) = [e for e in _exps(p) if e in tile]
        g = nx.DiGraph((e.src, e.dst) for e in p.edges if e.distance == 0)
        softmax = {exp} | {n for n in nx.descendants(g, exp) if n in tile and not _busy(p, n, "tc")}
        softmax_end = max(fa3.start[n] + p.op(n).cycles for n in softmax)
        hoisted.append(fa3.start[first[0]] + ii < softmax_end)
        assert fa3.slots[first[0]].stage < max(fa3.slots[n].stage for n in softmax) or not hoisted[-1]
    assert any(hoisted)


def test_fa3_register_plan_fits_the_register_file(fa3: Schedule) -> None:
    total = sum(w.registers * w.warps * 32 for w in fa3.warp_groups)
    assert total <= 65536
    for w in fa3.warp_groups:
        assert w.registers % 8 == 0 and 24 <= w.registers <= 256
        assert w.registers >= w.registers_needed


# ---------------------------------------------------------------------------------------------- ablations


def _mii(g: twill.Graph, machine: str) -> int:
    """The least II the search starts from: the MII of the normalized problem (paper §5.1)."""
    raw = build_problem(g, twill.load_machine(machine), Options())
    problem, _ = normalize_problem(raw)
    return bounds(problem).mii


def test_ablation_fewer_warp_groups_is_unsat_at_the_minimum_ii(fa3: Schedule) -> None:
    """Paper §7.2: with fewer warps the joint problem is UNSAT at the least modulo-feasible II."""
    g = _graph(SUBTILED, "attn_fwd_subtiled_sm90", "h100")
    with pytest.raises(twill.InfeasibleError) as info:
        twill.schedule(g, "h100", max_groups=2, max_ii=fa3.ii, time_limit=300)
    at_min = [a for a in info.value.certificate.attempts if a.ii == fa3.ii]
    assert at_min and all(a.status == "unsat" and a.phase == "joint" for a in at_min)


def test_ablation_without_subtiling_is_unsat_at_the_minimum_ii() -> None:
    """The plain kernel's joint problem is UNSAT at its least modulo-feasible II (paper §7.2)."""
    g = _graph(PLAIN, None, "h100")
    mii = _mii(g, "h100")
    with pytest.raises(twill.InfeasibleError) as info:
        twill.schedule(g, "h100", max_ii=mii, time_limit=300)
    attempts = info.value.certificate.attempts
    assert attempts and all(a.ii == mii for a in attempts)
    assert all(a.status == "unsat" and a.phase == "joint" for a in attempts)


@pytest.mark.slow
def test_ablation_no_cross_warp_values_is_unsat_at_the_minimum_ii(fa4: Schedule) -> None:
    """Blackwell: forbidding register values between warp groups makes the minimum II UNSAT (§7.2)."""
    g = _graph(SUBTILED, "attn_fwd_subtiled_sm100", "b200")
    with pytest.raises(twill.InfeasibleError) as info:
        twill.schedule(g, "b200", cross_group=False, max_ii=fa4.ii, time_limit=600)
    at_min = [a for a in info.value.certificate.attempts if a.ii == fa4.ii]
    assert at_min and all(a.status == "unsat" and a.phase == "joint" for a in at_min)


# ---------------------------------------------------------------------------------------------- Blackwell


@pytest.mark.slow
def test_fa4_ii_is_the_resource_bound_and_proven(fa4: Schedule) -> None:
    assert fa4.ii == _res_mii(fa4.problem)
    assert fa4.certificate.proven_optimal
    twill.verify(fa4)


@pytest.mark.slow
def test_fa4_load_group_and_one_softmax_group_per_subtile(fa4: Schedule) -> None:
    p = fa4.problem
    loads = {op.name for op in p.ops if op.variable_latency}
    (producer,) = {fa4.group[n] for n in loads}
    assert set(fa4.warp_groups[producer].ops) == loads
    tiles = _subtiles(p)
    assert len(tiles) == 2
    exps = _exps(p)
    softmax_groups = []
    for tile in tiles:
        (exp,) = [e for e in exps if e in tile]
        g = fa4.group[exp]
        softmax_groups.append(g)
        other = next(t for t in tiles if t is not tile)
        assert not set(fa4.warp_groups[g].ops) & other, "a softmax group holds one sub-tile only"
    assert len(set(softmax_groups)) == 2


@pytest.mark.slow
def test_fa4_correction_group_keeps_blocking_tmem_reads_off_the_softmax_groups(fa4: Schedule) -> None:
    """The accumulator rescale (TMEM load of O, multiply, store back) runs on a group without exps.

    Correction ops are found from the graph: a TMEM load fed by a loop-carried edge from a Tensor Core
    op (the O accumulator of the previous iteration) and the register ops it feeds.
    """
    p = fa4.problem
    exps = set(_exps(p))
    loads_of_o = [e.dst for e in p.edges
                  if e.distance == 1 and _busy(p, e.src, "tc") and _busy(p, e.dst, "tmem")]
    assert len(loads_of_o) == 2
    exp_groups = {fa4.group[e] for e in exps}
    correction = {fa4.group[n] for n in loads_of_o}
    assert not correction & exp_groups
    for load in loads_of_o:
        rescale = [e.dst for e in p.out_edges(load) if e.carrier == "register"]
        assert rescale and all(fa4.group[n] not in exp_groups for n in rescale)
    for g in correction:
        assert not set(fa4.warp_groups[g].ops) & exps


def test_range_queries_reach_the_plain_kernels_optimum_with_the_same_proof() -> None:
    """The plain FA forward on Hopper is register-bound 18 units above its MII: the default search jumps
    over those IIs with range queries and returns what deciding each II on its own (Algorithm 1) returns,
    with the same IIs refuted."""
    g = _graph(PLAIN, "attn_fwd", "h100")
    jumped, plain = twill.schedule(g, "h100"), twill.schedule(g, "h100", ranges=False)
    assert jumped.certificate.proven_optimal and plain.certificate.proven_optimal
    assert (jumped.ii, jumped.length, len(jumped.warp_groups)) == (plain.ii, plain.length,
                                                                    len(plain.warp_groups))
    assert jumped.ii > jumped.certificate.lower_bound
    below = set(range(plain.certificate.lower_bound, plain.ii))
    assert set(jumped.certificate.ruled_out()) == set(plain.certificate.ruled_out()) == below
    by_range = [a for a in jumped.certificate.attempts if "range query" in a.reason]
    assert by_range and all(a.status == "unsat" and a.ii < jumped.ii for a in by_range)
    assert not any("range query" in a.reason for a in plain.certificate.attempts)


def test_a_range_query_takes_no_longer_than_the_window_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """With ``window_limit`` no single question outlasts it: a range query's time slice is capped too
    (without the cap each slice is at least 2 s, ranges.RANGE_MIN_SLICE_S)."""
    import time

    import twill.search.ranges as ranges

    real = ranges.solve_range
    slices: list[float] = []

    def timed(problem, lo, hi, stages, **kw):  # type: ignore[no-untyped-def]
        slices.append(kw["deadline"] - time.monotonic())
        return real(problem, lo, hi, stages, **kw)

    monkeypatch.setattr(ranges, "solve_range", timed)
    assert ranges.RANGE_MIN_SLICE_S > 1.0
    twill.schedule(_graph(PLAIN, "attn_fwd", "h100"), "h100", window_limit=1.0, time_limit=120)
    assert slices and max(slices) <= 1.0


# ------------------------------------------------------------------------------- a second encoding
@pytest.mark.skipif(not twill.solvers.cpsat.available(), reason="ortools is not installed")
def test_the_cpsat_encoding_agrees_at_the_plain_hopper_optimum_and_below() -> None:
    """The joint problem on CP-SAT (written apart from the SMT encoding) refutes the II below the plain FA
    forward's optimum and finds the same least length and goals at the optimum, over the same windows."""
    from twill.solvers.joint.cpsat import solve_joint_cpsat
    from twill.solvers.joint.smt import solve_joint
    from twill.solvers.modulo.methods import modulo_schedule

    s = twill.schedule(_graph(PLAIN, "attn_fwd", "h100"), "h100")
    assert s.certificate.proven_optimal
    for ii in (s.ii - 1, s.ii):
        mod = modulo_schedule(s.problem, ii)
        first, last = max(1, math.ceil(mod.low / ii)), math.ceil(mod.length / ii) + 1
        smt = solve_joint(s.problem, ii, last, first=first, min_length=mod.low)
        cp = solve_joint_cpsat(s.problem, ii, last, first=first, min_length=mod.low)
        assert cp.status == smt.status
        if ii < s.ii:
            assert cp.status.value == "unsat"
            continue
        assert all(cp.proven.values()) and cp.length == smt.length == s.length
        assert len(set(cp.group.values())) == len(set(smt.group.values())) == len(s.warp_groups)
        assert sum(cp.group_warps[w] * cp.budgets[w] for w in cp.budgets) == sum(
            smt.group_warps[w] * smt.budgets[w] for w in smt.budgets)
