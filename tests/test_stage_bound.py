"""The stage bound of the closing query (twill/model/reductions.py ``stage_bound``,
twill/model/stagebound.py) against the independent oracle (tests/joint_oracle.py): at every II the oracle
finds feasible, its least-length schedule -- the schedule of fewest stages -- has at most the bound's
stages, the oracle being asked to look one stage beyond it. A bound that were too small by one stage
anywhere on these loops would fail here."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import twill
import twill.search.certificate as certificate
from twill.model.bounds import bounds
from twill.model.problem import Problem
from twill.model.reductions import stage_bound
from twill.model.stagebound import BUCKET_SHARE, area_slacks, path_stages, stage_bucket
from twill.search.progress import EventKind, ProgressEvent

sys.path.insert(0, str(Path(__file__).parent))
import test_oracle as cases
from joint_oracle import OracleLimit, oracle

SEEDS = range(0, 60)
"""Random loops of tests/test_oracle.py (2-5 ops), each at its first three IIs."""
NODE_LIMIT = 100_000
REGS_BIND_SEARCH = 200
"""Lengths the oracle searches on :func:`regs_bind` whatever the bound: more than its hand-off on the H100
(157 units), so a bound far too small is caught there too."""


def bound_failures(problem: Problem, iis: range, search: int = 0) -> tuple[list[str], int]:
    """``(failures, IIs checked)``: each II of ``iis`` at which the oracle, searching ``stage_bound + 1``
    stages (or every ``L <= search``, when more), has a least-length schedule of more stages than
    ``stage_bound``."""
    failures, checked = [], 0
    for ii in iis:
        need = stage_bound(problem, ii)
        try:
            ans = oracle(problem, min_ii=ii, max_ii=ii, max_stages=max(need + 1, -(-search // ii)),
                         node_limit=NODE_LIMIT)
        except OracleLimit:
            continue
        if ans is None or ans.ii != ii:
            continue
        checked += 1
        if path_stages(problem, ii, ii) is None:
            failures.append(f"{problem.name} II {ii}: a negative area slack, but the oracle has a schedule")
        stages = -(-ans.length // ii)
        if stages > need:
            failures.append(f"{problem.name} II {ii}: the oracle's least L {ans.length} is {stages} stages, "
                            f"the bound {need}")
    return failures, checked


def random_failures(seeds: range) -> tuple[list[str], int]:
    """:func:`bound_failures` over the random loops ``seeds`` (``max_stages`` taken away: the bound is
    what is tested)."""
    failures, checked = [], 0
    for seed in seeds:
        case = cases.random_case(seed)
        options = dict(case.options, max_stages=None)
        try:
            problem = cases.problem_of(case.graph, cases.machine(case.smem), **options)
        except Exception:  # an option combination build_problem rejects
            continue
        mii = bounds(problem).mii
        more, n = bound_failures(problem, range(mii, min(mii + 3, cases.MAX_II + 1)))
        failures += [f"seed {seed}: {f}" for f in more]
        checked += n
    return failures, checked


def regs_bind(machine: twill.Machine) -> Problem:
    """tests/test_soundness.py's loop: X's 64 registers cannot stay on one group at II < 4, so at II 1-3
    Y sits a hand-off later on another group, many stages after X."""
    g = twill.Graph("regs_bind")
    g.add_op("X", "alu", busy={"alu": 1}, latency=4, regs=64)
    g.add_op("Y", "exp", busy={"mufu": 1}, latency=1)
    g.add_edge("X", "Y")
    return cases.problem_of(g, machine, register_limit=128)


def held(machine: twill.Machine) -> Problem:
    """X's 48 registers stay on its group until Y starts 4 cycles later (one group: 48 x 4 + 26 fits the
    255-register limit at II 1), or cross in a 4 KB staging buffer: at II 1 the least L is 5, 5 stages,
    and the span past X's own cycle costs register or SMEM area. X is an asynchronous GEMM (it issues
    for no time unit), so X and Y fit one group's issue stream at II 1 (the issue limit)."""
    g = twill.Graph("held")
    g.add_op("X", "gemm", busy={"tc": 1}, latency=4, issue_cycles=0, regs=48, result_bytes=4096)
    g.add_op("Y", "exp", busy={"mufu": 1}, latency=1)
    g.add_edge("X", "Y")
    return cases.problem_of(g, machine)


def carried_smem(machine: twill.Machine) -> Problem:
    """X's 8 KB SMEM value is read two iterations on (δ 2) by Y: Y may start right after X, so X's
    buffer lives a few cycles, not two IIs; on a 12000-byte machine two IIs of it would not fit."""
    g = twill.Graph("carried_smem")
    g.add_op("X", "copy", busy={"smem": 1}, latency=1, smem=8192)
    g.add_op("Y", "alu", busy={"alu": 1}, latency=1)
    g.add_edge("X", "Y", latency=1, distance=2, carrier="smem")
    return cases.problem_of(g, machine)


def test_a_loop_carried_reader_does_not_lengthen_the_least_hold() -> None:
    problem = carried_smem(cases.machine(12000))
    failures, checked = bound_failures(problem, range(2, 5))
    assert not failures and checked == 3, failures
    # at II 1 the buffer's two cycles (X, then Y one cycle later) take 16384 > 12000 bytes per cycle
    assert path_stages(problem, 1, 1) is None and oracle(problem, min_ii=1, max_ii=1, max_stages=6) is None


def test_the_bound_covers_the_oracle_on_random_loops() -> None:
    failures, checked = random_failures(SEEDS)
    assert not failures, "\n".join(failures)
    assert checked >= 60  # the loops decided: not a test that passes by deciding nothing


@pytest.mark.parametrize("machine", ["h100", "oracle"])
def test_the_bound_covers_forced_long_gaps(machine: str) -> None:
    mach = twill.load_machine("h100") if machine == "h100" else cases.machine()
    problem = regs_bind(mach)
    failures, checked = bound_failures(problem, range(1, 4), search=REGS_BIND_SEARCH)
    assert not failures and checked == 3, failures
    # the gap is really long: Y waits the whole hand-off, crossing_delay / II stages at II 1
    assert stage_bound(problem, 1) >= problem.crossing_delay(problem.edges[0]) + 1


def test_the_bound_covers_values_held_across_stages() -> None:
    problem = held(cases.machine())
    failures, checked = bound_failures(problem, range(1, 4))
    assert not failures and checked == 3, failures


def test_negative_slack_means_no_schedule() -> None:
    """Two 200-register values of 8 warps (256 threads) live one cycle each: at II 1 they need 102400
    register-cycles per cycle, more than the 65536-register file less a group's overhead holds, so the
    area bound refutes II 1 outright; the oracle finds no schedule there either, and one at II 2."""
    g = twill.Graph("two_fat")
    g.add_op("A", "alu", busy={"alu": 1}, latency=1, regs=200, warps=8)
    g.add_op("B", "exp", busy={"mufu": 1}, latency=1, regs=200, warps=8)
    g.add_edge("A", "B", carrier="none")
    problem = cases.problem_of(g, cases.machine())
    assert area_slacks(problem, 1)["regs"] == 65536 - 128 * 26 - 2 * 200 * 256 < 0
    assert path_stages(problem, 1, 1) is None and stage_bound(problem, 1) == 1
    assert oracle(problem, min_ii=1, max_ii=1, max_stages=6) is None
    assert area_slacks(problem, 2)["regs"] >= 0
    ans = oracle(problem, min_ii=2, max_ii=2, max_stages=stage_bound(problem, 2) + 1)
    assert ans is not None and -(-ans.length // 2) <= stage_bound(problem, 2)


def test_a_bucket_bounds_each_of_its_iis() -> None:
    """The bound of a range of IIs is at least each II's own (the monotone coefficients of
    twill/model/stagebound.py's docstring), on random loops and the FA-sized Figure 1 loop."""
    problems = [twill.model.problem.build_problem(twill.ir.paper.figure1_graph(), twill.load_machine("h100"))]
    for seed in range(12):
        case = cases.random_case(seed)
        try:
            problems.append(cases.problem_of(case.graph, cases.machine(case.smem),
                                             **dict(case.options, max_stages=None)))
        except Exception:  # an option combination build_problem rejects
            continue
    checked = 0
    for problem in problems:
        for ii in (BUCKET_SHARE, 40, 117, 300):
            lo, hi = stage_bucket(ii)
            assert lo <= ii <= hi and (lo, hi) == stage_bucket(lo) == stage_bucket(hi)
            whole = path_stages(problem, lo, hi)
            for x in range(lo, hi + 1):
                own = path_stages(problem, x, x)
                assert whole is not None or own is None, (problem.name, x)
                if own is not None and whole is not None:
                    assert own <= whole, (problem.name, lo, hi, x, own, whole)
                    checked += 1
    assert checked > 100


def test_buckets_tile_the_iis() -> None:
    for ii in range(1, 2000):
        lo, hi = stage_bucket(ii)
        assert lo <= ii <= hi and stage_bucket(hi + 1)[0] == hi + 1
        assert hi - lo + 1 == max(1, lo // BUCKET_SHARE) if lo >= BUCKET_SHARE else lo == hi


def test_the_closing_query_asks_the_largest_bound_of_its_iis(monkeypatch: pytest.MonkeyPatch) -> None:
    """The stage bound need not fall with II (the area bound does not), so one closing query over
    ``[lo, hi]`` must cover the largest bound of its IIs, not ``lo``'s: here a bound made larger at odd
    IIs (still an upper bound) must be what the query asks."""
    real = certificate.stage_bounds

    def bumped(problem: Problem, lo: int, hi: int, area: bool = True) -> dict[int, int]:
        return {x: v + 3 * (x % 2) for x, v in real(problem, lo, hi, area=area).items()}

    monkeypatch.setattr(certificate, "stage_bounds", bumped)
    case = cases.random_case(35)  # its answer, II 8, lies above its MII 4: IIs 4-7 are closed
    events: list[ProgressEvent] = []
    s = twill.schedule(case.graph, cases.machine(case.smem), **dict(case.options, max_stages=None),
                       progress=events.append)
    spans = [(e.lo, e.hi, e.stages) for e in events if e.phase == "closing" and e.kind == EventKind.PHASE]
    assert any(lo < hi for lo, hi, _ in spans), spans
    for lo, hi, stages in spans:
        assert stages == max(bumped(s.problem, *stage_bucket(x))[x] for x in range(lo, hi + 1))
