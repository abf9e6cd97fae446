"""Joint probes above the bound (twill.search.probe): the any-time answer of a stopped search.

Judged by the independent oracle of tests/joint_oracle.py on the random tiny loops of tests/test_oracle.py:
every schedule a probe returns passes the oracle's own check, and none beats the oracle's optimum; a
mutated probe that skips verification is caught by the same test.
"""

from __future__ import annotations

import dataclasses
import sys
import time
import warnings
from pathlib import Path

import pytest
import test_oracle as cases

import twill
from twill.ir.machine import load_machine
from twill.model.bounds import bounds
from twill.model.problem import Options, build_problem
from twill.search import probe
from twill.search.probe import PROBE_HOW, joint_probes
from twill.search.run import Run
from twill.solvers.normalize import normalize_problem
from twill.verify import violations

sys.path.insert(0, str(Path(__file__).parent))
from joint_oracle import OracleLimit, check, oracle

pytestmark = pytest.mark.filterwarnings("ignore:prefetch. the ")

SEEDS = range(0, 40)
NODE_LIMIT = 100_000
ROOT = Path(__file__).resolve().parents[1]


def _run(prob) -> Run:
    """A stopped search's bookkeeping, with nothing refuted (the probes record nothing)."""
    return Run(prob, bounds(prob), None, None, time.monotonic(), [], {}, {}, methods="joint problem on yices")


def _judged(seeds=SEEDS) -> tuple[int, int, list[str]]:
    """(probes that found a schedule, of them at the oracle's II, disagreements) over ``seeds``."""
    found_n, optimal_n, bad = 0, 0, []
    for seed in seeds:
        case = cases.random_case(seed)
        try:
            prob = cases.problem_of(case.graph, cases.machine(case.smem), **case.options)
        except Exception:  # an option combination Options or build_problem rejects (as test_oracle)
            continue
        stages = cases.STAGES if case.options["max_stages"] is None else case.options["max_stages"]
        try:
            ans = oracle(prob, max_ii=cases.MAX_II, max_stages=stages, node_limit=NODE_LIMIT)
        except OracleLimit:
            continue
        lo = max(1, bounds(prob).mii)
        got = joint_probes(_run(prob), lo, cases.MAX_II, time.monotonic() + 20, "yices", "smt", "cbc")
        if got is None:
            continue
        how, ii, res, _ = got
        assert how == PROBE_HOW
        found_n += 1
        own = check(prob, ii, res.length, res.start, res.group)
        if own:
            bad.append(f"seed {seed}: the probe's schedule at II {ii} fails the oracle's check: {own}")
            continue
        if -(-res.length // ii) > stages:
            continue  # more stages than the oracle searched: it cannot judge the II
        if ans is None:
            bad.append(f"seed {seed}: probe schedule at II {ii}, the oracle nothing up to II {cases.MAX_II}")
        elif ii < ans.ii:
            bad.append(f"seed {seed}: probe II {ii} beats the oracle's optimum II {ans.ii}")
        else:
            optimal_n += ii == ans.ii
    return found_n, optimal_n, bad


def test_probe_schedules_pass_the_oracle_and_never_beat_it() -> None:
    found_n, optimal_n, bad = _judged()
    assert not bad, bad[:5]
    assert found_n >= 15, f"only {found_n} probes found a schedule"
    # bisection over [MII, MAX_II] is a heuristic for the least II; on these loops it finds it mostly
    assert optimal_n >= found_n // 2, (optimal_n, found_n)


def test_an_unverified_broken_probe_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    # The mutation: verification skipped and every schedule's last op started one unit early (a
    # dependence or capacity it may break). The oracle's check must notice on some loop.
    real = probe.solve_joint

    def broken(*args, **kwargs):
        res = real(*args, **kwargs)
        if not res.start:
            return res
        start = dict(res.start)
        last = max(start, key=lambda n: (start[n], n))
        start[last] -= 1
        return dataclasses.replace(res, start=start)

    monkeypatch.setattr(probe, "solve_joint", broken)
    monkeypatch.setattr(probe, "violations", lambda sched: [])
    _, _, bad = _judged(range(0, 20))
    assert bad, "a probe returning unverified, broken schedules went unnoticed"


def test_the_guard_rejects_the_broken_schedule(monkeypatch: pytest.MonkeyPatch) -> None:
    # The same broken solver with verification on: no probe returns a schedule that fails the oracle.
    real = probe.solve_joint

    def broken(*args, **kwargs):
        res = real(*args, **kwargs)
        if not res.start:
            return res
        start = dict(res.start)
        last = max(start, key=lambda n: (start[n], n))
        start[last] -= 1
        return dataclasses.replace(res, start=start)

    monkeypatch.setattr(probe, "solve_joint", broken)
    _, _, bad = _judged(range(0, 20))
    assert not any("fails the oracle's check" in b for b in bad), bad[:3]


def test_a_stopped_search_keeps_its_bound_with_a_probe_schedule() -> None:
    # FA forward stopped after 0.3 s: the fallback's second (heuristic, then probes) may give a joint
    # schedule; whichever it is, it verifies, is not proven, and the bound is what the search refuted.
    g = twill.graph_from_kernel(str(ROOT / "examples" / "flash_attention_fwd.py") + "::attn_fwd",
                                machine="h100")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        s = twill.schedule(g, "h100", time_limit=0.3)
    cert = s.certificate
    assert cert.heuristic and not cert.proven_optimal
    assert not violations(s)
    refuted = {a.ii for a in cert.attempts if a.status in ("unsat", "infeasible")}
    assert all(ii in refuted for ii in range(cert.lower_bound, cert.ii_bound))
    assert cert.ii_bound <= s.ii
    best = twill.schedule(g, "h100")  # the proven optimum, found without a limit
    assert best.certificate.proven_optimal
    assert cert.ii_bound <= best.ii <= s.ii


def test_the_sub_tiled_fa_backward_has_a_schedule_at_its_mii() -> None:
    # tests/data/fa_bwd_sub_h100_ii100.json: a probe's schedule at II 100 (the groups of a schedule the
    # joint solver found at II 115 asserted; benchmarks/results/solve_times_changes.md). With the MII a
    # proven lower bound, the loop's optimal II is its MII; judged here on the problem built today, by
    # twill.verify and by the oracle's own check (no code shared with the solver).
    entry = str(ROOT / "examples" / "flash_attention_bwd.py") + "::attn_bwd_subtiled_sm90"
    g = twill.graph_from_kernel(entry, machine="h100")
    raw = build_problem(g, load_machine("h100"), Options(prefetch=1))
    prob, _ = normalize_problem(raw)
    s = twill.Schedule.from_json((ROOT / "tests" / "data" / "fa_bwd_sub_h100_ii100.json").read_text())
    def model(p):  # the problem without where its source lives (the checkout's absolute path)
        ops = [dataclasses.replace(o, source=Path(o.source).name if o.source else o.source) for o in p.ops]
        rest = {f.name: getattr(p, f.name) for f in dataclasses.fields(p) if f.name not in ("ops", "_index")}
        return ops, rest

    assert model(s.problem) == model(prob), "the witness was solved for another model of this loop"
    assert s.ii == bounds(prob).mii == 100
    assert not violations(s)
    assert not check(prob, s.ii, s.length, s.start, s.group)
    budgets = sorted(grp.registers for grp in s.warp_groups)
    assert sum(grp.registers * grp.warps * 32 for grp in s.warp_groups) <= prob.resources.register_file
    assert budgets[-1] <= 256 and len(budgets) >= 3  # a producer and at least two consumer groups


def test_asserted_groups_keep_a_schedule_and_refuse_a_group_an_op_cannot_take() -> None:
    # Figure 1 (optimum II 2, L 4, one group: test_oracle.test_figure1_by_hand): its own groups asserted
    # give a schedule; a group outside the pool leaves none (the assertion is FALSE, nothing relaxed).
    from twill.ir.paper import figure1_graph
    from twill.solvers.joint.smt import solve_joint

    prob = cases.problem_of(figure1_graph(), cases.machine())
    free = solve_joint(prob, 2, 2, first=1, optimize=False)
    assert free.status.value == "sat"
    kept = solve_joint(prob, 2, 2, first=1, optimize=False, groups=free.group)
    assert kept.status.value == "sat" and kept.group == free.group
    name = prob.ops[0].name
    gone = solve_joint(prob, 2, 2, first=1, optimize=False, groups={name: 99})
    assert gone.status.value == "unsat"


def test_ctrl_c_in_a_probe_returns_the_heuristic_schedule(monkeypatch: pytest.MonkeyPatch) -> None:
    import twill.search.algorithm1 as algorithm1
    from twill.errors import InterruptedSolveError

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(algorithm1, "joint_probes", interrupted)
    # the fallback's window made long, so the heuristic walk finds its schedule however loaded the machine
    monkeypatch.setattr(algorithm1, "fallback_end", lambda run: time.monotonic() + 30.0)
    g = twill.graph_from_kernel(str(ROOT / "examples" / "flash_attention_fwd.py") + "::attn_fwd",
                                machine="h100")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(InterruptedSolveError, match="joint probes") as info:
            twill.schedule(g, "h100", time_limit=0.3)
    s = info.value.schedule
    assert s is not None and s.certificate.heuristic and not s.certificate.proven_optimal
    assert not violations(s)
