"""The proof paths of issue 22: each reduction applied only under its precondition, undecided never
counted as refuted. Every expected value is derived apart from the search: a relabelled or mirrored
schedule that :func:`twill.verify` accepts, arithmetic, or a second solve of the same question."""

from __future__ import annotations

import dataclasses
import itertools
from collections import Counter

import pytest

import twill
from twill.ir.machine import load_machine
from twill.ir.paper import figure1_graph
from twill.model.problem import Options, build_problem, check_resources
from twill.model.reductions import budget_arrangements, involution, stage_bound


def _three_ops() -> twill.Graph:
    """A TMA load, a small exp and a large GEMM: each compute op needs its own budget."""
    g = twill.Graph("plan3")
    g.add_op("load", "tma_load", busy={"tma": 2}, latency=4, variable_latency=True, smem=1024)
    g.add_op("soft", "exp", busy={"mufu": 4}, latency=4, regs=16)
    g.add_op("mma", "gemm", busy={"tc": 4}, latency=4, regs=160, issue_cycles=1)
    g.add_edge("load", "soft", carrier="smem")
    g.add_edge("load", "mma", carrier="smem")
    g.add_edge("mma", "mma", distance=1, inplace=True)
    g.add_edge("soft", "soft", distance=1)
    return g


def _with_plan(s: twill.Schedule, plan: tuple[int, ...]) -> twill.Schedule:
    """The same schedule judged under another register plan."""
    opts = dataclasses.replace(s.problem.options, register_plan=plan)
    return dataclasses.replace(s, problem=dataclasses.replace(s.problem, options=opts))


def test_a_register_plan_is_a_multiset_of_budgets() -> None:
    """Listing the same budgets in another order gives the same II and L. The schedule found for one
    order verifies under every other (its groups take the same budgets), so no order may do worse; the
    first compute op used to be pinned to the second group whatever its budget, and five of the six
    orders were "proven" to have no schedule at all."""
    budgets = (32, 48, 192)
    found = {plan: twill.schedule(_three_ops(), "h100", register_plan=plan)
             for plan in itertools.permutations(budgets)}
    best = min(found.values(), key=lambda s: (s.ii, s.length))
    for plan, s in found.items():
        twill.verify(_with_plan(best, plan))  # the better schedule is legal under this order too
        assert (s.ii, s.length) == (best.ii, best.length), plan
        assert s.certificate.proven_optimal
        # each group takes a distinct budget of the plan (a multiset, so a repeated value only as often)
        assert not Counter(g.registers for g in s.warp_groups) - Counter(budgets)


def test_verify_takes_budgets_from_the_register_plan() -> None:
    s = twill.schedule(_three_ops(), "h100", register_plan=(32, 48, 192))
    twill.verify(_with_plan(s, (192, 32, 48)))
    bad = twill.violations(_with_plan(s, (32, 48, 200)))
    assert any(e.family == "register_file" and "register plan" in str(e) for e in bad)


def test_budget_arrangements_break_symmetry_only_within_equal_budgets() -> None:
    p = build_problem(_three_ops(), load_machine("h100"), Options(register_plan=(240, 32, 240)))
    arrangements = budget_arrangements(p, 3)
    # the producer group takes 32 or 240; the compute groups the rest, sorted, one block per value
    assert [(a.budgets, a.blocks) for a in arrangements] == [((32, 240, 240), ((1, 2),)),
                                                             ((240, 32, 240), ((1,), (2,)))]
    free = build_problem(_three_ops(), load_machine("h100"), Options(max_groups=3))
    assert [(a.budgets, a.blocks) for a in budget_arrangements(free, 3)] == [(None, ((1, 2),))]


def _two_tiles() -> twill.Graph:
    g = twill.Graph("tiles")
    for i in (0, 1):
        g.add_op(f"a{i}", "gemm", busy={"tc": 3}, latency=3, regs=64, result_bytes=8192)
        g.add_op(f"b{i}", "exp", busy={"mufu": 2}, latency=2, regs=32)
        g.add_edge(f"a{i}", f"b{i}")
        g.add_edge(f"b{i}", f"a{i}", distance=1)
    return g


def _mirror(s: twill.Schedule, sigma: dict[str, str], apart: list[tuple[str, str]]) -> twill.Schedule:
    """``s`` mapped through the tile swap, judged under ``apart``."""
    slots = {sigma[n]: dataclasses.replace(slot, name=sigma[n]) for n, slot in s.slots.items()}
    groups = tuple(dataclasses.replace(g, ops=tuple(sigma[n] for n in g.ops)) for g in s.warp_groups)
    opts = dataclasses.replace(s.problem.options, apart=tuple(tuple(sorted(p)) for p in apart))
    return dataclasses.replace(s, slots=slots, warp_groups=groups,
                               problem=dataclasses.replace(s.problem, options=opts))


def test_the_tile_swap_is_not_used_when_apart_names_one_tile() -> None:
    """``apart`` on one tile or on its mirror image is the same question: the mirror of either answer
    verifies under the other, so both have the least L (287 and 290 before the swap checked ``apart``)."""
    sigma = {"a0": "a1", "a1": "a0", "b0": "b1", "b1": "b0"}
    one = twill.schedule(_two_tiles(), "h100", apart=[("a0", "b0")])
    other = twill.schedule(_two_tiles(), "h100", apart=[("a1", "b1")])
    twill.verify(_mirror(one, sigma, [("a1", "b1")]))
    twill.verify(_mirror(other, sigma, [("a0", "b0")]))
    assert (one.ii, one.length) == (other.ii, other.length)


def test_involution_checks_apart_and_transfer() -> None:
    mach = load_machine("h100")
    plain = build_problem(_two_tiles(), mach)
    assert involution(plain) == {"a0": "a1", "a1": "a0", "b0": "b1", "b1": "b0"}
    assert involution(build_problem(_two_tiles(), mach, Options(apart=(("a0", "b0"),)))) is None
    both = Options(apart=(("a0", "b0"), ("a1", "b1")))
    assert involution(build_problem(_two_tiles(), mach, both)) is not None
    p = build_problem(_two_tiles(), mach)
    edges = tuple(dataclasses.replace(e, transfer=e.transfer + 1) if e.src == "a1" else e for e in p.edges)
    # the same graph but more SMEM-port traffic for one tile's hand-off: not a symmetry any more
    assert involution(dataclasses.replace(p, edges=edges)) is None


def test_undecided_window_at_the_answer_ii_makes_it_unproven(monkeypatch: pytest.MonkeyPatch) -> None:
    """Figure 1's optimum is II 2, L 4 (the paper). With its first window (L in (2, 4]) undecided, the
    retry from the next window finds L 5 at II 2: that must not be called proven."""
    import twill.search.decide as search
    from twill.solvers.joint.result import JointResult
    from twill.solvers.status import CheckResult

    real, calls = search.solve_joint, []

    def first_window_undecided(problem, ii, stages, **kw):  # type: ignore[no-untyped-def]
        calls.append((ii, kw.get("first")))
        if ii == 2 and kw.get("first") == 2 and len(calls) == 1:
            return JointResult(ii, 2, CheckResult.TIMEOUT, wall_s=0.01, length_low=3)
        return real(problem, ii, stages, **kw)

    monkeypatch.setattr(search, "solve_joint", first_window_undecided)
    s = twill.schedule(figure1_graph(), "h100", window_limit=5.0)
    assert s.ii == 2
    assert s.length == 4 or not s.certificate.proven_optimal
    assert 2 in s.certificate.undecided or s.length == 4


def test_ordering_self_edges_do_not_hold_memory_for_the_whole_loop() -> None:
    """Two ops of 60 % of SMEM each, ordered against their own next iteration (carrier "none"): neither
    value is live across iterations, so the pre-check must not add them up (120 % > capacity) and the
    loop has a schedule; an SMEM self-edge does hold its value, and then the pre-check refuses."""
    mach = load_machine("h100")
    big = int(mach.smem_per_cta * 0.6)

    def loop(carrier: str) -> twill.Graph:
        g = twill.Graph("mem")
        for n in ("x", "y"):
            g.add_op(n, "alu", busy={"alu": 2}, latency=2, smem=big)
            g.add_edge(n, n, distance=1, carrier=carrier)
        g.add_edge("x", "y", carrier="none")
        return g

    check_resources(build_problem(loop("none"), mach))
    twill.verify(twill.schedule(loop("none"), "h100"))
    with pytest.raises(twill.ResourceError, match=f"{big} \\(x\\) \\+ {big} \\(y\\)"):
        check_resources(build_problem(loop("smem"), mach))


def test_a_wrong_milp_infeasible_is_not_a_proof(monkeypatch: pytest.MonkeyPatch) -> None:
    """The MILP solver says "infeasible" for every length (a wrong status); the SMT check that
    confirms each refutation finds the schedule, so the ILP method still gives the least length 4 at
    II 2 (the paper's Figure 1), and II 1 (below ResMII 2) is refuted by the bounds, not the MILP."""
    import twill.solvers.modulo.methods as modulo
    from twill.solvers.ilp import IlpResult
    from twill.solvers.status import SolveStatus

    def always_infeasible(model, *, backend="cbc", time_limit=None):  # type: ignore[no-untyped-def]
        return IlpResult(SolveStatus.INFEASIBLE, 0.0)

    monkeypatch.setattr(modulo, "solve_ilp", always_infeasible)
    p = build_problem(figure1_graph(), load_machine("h100"))
    r = modulo.modulo_schedule(p, 2, method="ilp")
    assert r.found and r.length == 4


def test_the_stage_bound_covers_a_schedule_with_more_stages() -> None:
    """stage_bound is at least the stages of every schedule the search returns (it bounds some
    optimal schedule's stages, and the search's schedule is optimal), on the FA-sized Figure 1 too."""
    s = twill.schedule(figure1_graph(), "h100")
    assert -(-s.length // s.ii) <= stage_bound(s.problem, s.ii)
    assert s.certificate.scope == () or all(r.complete for r in s.certificate.scope)


def test_a_schedule_with_more_stages_than_the_windows_searched_is_found() -> None:
    """X (64 registers, 4 cycles) feeds Y, under a 128-register limit. On one group X's value is live
    until Y starts, 4 cycles later, so II < 4 overfills the group (64 x 4 + 26 overhead > 128 x 1 per
    residue at II 1). On two groups X's value leaves for SMEM as soon as it is produced: II 1 fits, with Y
    a hand-off later -- many more stages than n_min + stage_slack. The windows the search tries first
    refute II 1..3 only for few stages; before the closing query the answer was a "proven" II 4."""
    g = twill.Graph("regs_bind")
    g.add_op("X", "alu", busy={"alu": 1}, latency=4, regs=64)
    g.add_op("Y", "exp", busy={"mufu": 1}, latency=1)
    g.add_edge("X", "Y")
    s = twill.schedule(g, "h100", register_limit=128)
    assert s.ii == 1 and s.group["X"] != s.group["Y"]
    assert s.certificate.proven_optimal
    twill.verify(s)
    edge = s.problem.edges[0]
    assert s.start["Y"] - s.start["X"] >= s.problem.crossing_delay(edge) > 4 * s.ii
