"""twill's joint search against the exact joint oracle of :mod:`joint_oracle` (written from docs/model.md).

* hand-derived answers on a few loops (arithmetic in the comments);
* every schedule twill returns passes the oracle's own check, and every oracle optimum passes
  :func:`twill.verify.verify` (a cross-check of both rule sets);
* on random tiny loops (<= 5 ops, small integer costs) with random register plans, ``apart`` pairs,
  hand-off costs, SMEM limits, stage budgets and ``stage_slack``: a proven answer has the oracle's
  (II, L, groups); an unproven one is no better than the oracle's; "no schedule" only when the oracle has
  none; a :class:`ResourceError` from the pre-checks only when the oracle has none;
* permuting a register plan, mirroring ``apart`` onto a swapped sub-tile and relabelling or reordering ops
  and edges never change twill's (II, L).

The loops use costs of 1-4 cycles and include an op of 1 cycle, so the cost normalization keeps them (the
gcd is 1 and the sum is under U = 300): ``cycles_per_unit == 1`` is asserted, and the oracle is given the
problem twill built, in those units. The machine is the H100 with 2-cycle mbarrier and 1-cycle named-barrier
hand-offs (``dataclasses.replace`` on its constants, as tests/conftest.py does) and, per loop, a random
shared-memory size (the ``smem_per_cta`` field: a loaded machine has copied its constants into fields).

``TWILL_ORACLE_LOOPS`` (default 525, of which at least 500 must be decided by both sides) sets the number of
random loops and ``TWILL_ORACLE_INVARIANCE`` (default 120) those of the relabelling test (three times as many
seeds are scanned for register plans); a nightly run sets both higher, e.g. ``TWILL_ORACLE_LOOPS=5000``.
The oracle's limit per loop is :data:`NODE_LIMIT` search nodes; a loop beyond it is left out and counted.
"""

from __future__ import annotations

import os
import random
import sys
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path

import pytest

import twill
from twill.errors import InfeasibleError, ResourceError
from twill.ir.graph import Graph
from twill.ir.machine import Constant, Machine, load_machine
from twill.ir.paper import figure1_graph
from twill.model.problem import Options, Problem, build_problem
from twill.schedule import Certificate, Schedule, make_groups, slots_from
from twill.solvers.normalize import normalize_problem
from twill.verify import violations

sys.path.insert(0, str(Path(__file__).parent))
from joint_oracle import Answer, OracleLimit, check, oracle

pytestmark = pytest.mark.filterwarnings("ignore:prefetch. the ")  # an explicit shallow depth is asked for

LOOPS = int(os.environ.get("TWILL_ORACLE_LOOPS", "525"))
CHUNK = 25
MAX_II = 10
"""Largest II both twill and the oracle search on random loops."""
STAGES = 4
"""The oracle's stage bound when a loop has no ``max_stages``."""


@cache
def machine(smem: int = 232448) -> Machine:
    """The H100 with short hand-offs of known cost and ``smem`` bytes of shared memory per CTA."""
    h100 = load_machine("h100")
    constants = dict(h100.constants)
    constants["handoff.mbarrier"] = Constant(2, "oracle test machine")
    constants["handoff.named_barrier"] = Constant(1, "oracle test machine")
    constants["memory.smem_per_cta"] = Constant(smem, "oracle test machine")
    mach = replace(h100, name=f"h100-oracle-{smem}", constants=constants, smem_per_cta=smem)
    assert mach.smem_per_cta == smem
    return mach


def problem_of(graph: Graph, mach: Machine, **options: object) -> Problem:
    """The normalized problem twill solves for ``graph`` (cycles kept, asserted)."""
    prob, _ = normalize_problem(build_problem(graph, mach, Options(**options)))
    assert prob.cycles_per_unit == 1.0, "test loops must keep their cycle costs under normalization"
    return prob


def as_schedule(problem: Problem, ans: Answer) -> Schedule:
    """The oracle's optimum as a twill :class:`Schedule` (for :func:`twill.verify.verify`)."""
    warps = {}
    per = problem.resources.warps_per_group
    for w in set(ans.group.values()):
        shapes = [-(-problem.op(n).warps // per) for n in ans.group if ans.group[n] == w
                  and problem.op(n).warps > 1]
        warps[w] = per * max(shapes, default=1)
    groups = make_groups(problem, ans.start, ans.group, warps, dict(ans.budgets))
    cert = Certificate(0, 0, 0, False, ())
    return Schedule(problem, ans.ii, ans.length, slots_from(ans.start, ans.group, ans.ii, problem.names),
                    groups, cert)


def twill_key(s: Schedule) -> tuple[int, int, int]:
    return (s.ii, s.length, len(s.warp_groups))


# ------------------------------------------------------------------------------------ (a) by hand
def test_figure1_by_hand() -> None:
    # S and O both take the Tensor Core for 1 cycle: ResMII 2. S -> P -> O with d = 1 each: O >= 2, but
    # O at 2 is residue 0 mod 2, S's slot; O at 3 ends at 4. One group (nothing makes a second pay off).
    p = problem_of(figure1_graph(), load_machine("h100"))
    ans = oracle(p, max_ii=6, max_stages=4)
    assert (ans.ii, ans.length, ans.groups) == (2, 4, 1)
    assert not violations(as_schedule(p, ans))


def _chain(block: bool) -> Graph:
    g = Graph("chain")
    g.add_op("a", "alu", busy={"alu": 2}, latency=2, issue_cycles=2, regs=0)
    g.add_op("b", "exp", busy={"mufu": 3}, latency=3, issue_cycles=3)
    g.add_edge("a", "b", latency=2, carrier="none", blocking=block)
    g.add_edge("b", "a", latency=3, distance=1, carrier="none")
    return g


def test_recurrence_by_hand() -> None:
    # a (alu 2) -> b (mufu 3) -> a (δ 1): RecMII = 2 + 3 = 5 on one group, ResMII 3. L = 2 + 3 = 5.
    # Two groups would add the named barrier (1 cycle) on both edges: II 7. So (5, 5, 1).
    p = problem_of(_chain(False), machine())
    ans = oracle(p, max_ii=10, max_stages=3)
    assert (ans.ii, ans.length, ans.groups) == (5, 5, 1)


def test_apart_by_hand() -> None:
    # With a and b apart the crossing costs the 1-cycle named barrier on each edge: the cycle is
    # 2 + 1 + 3 + 1 = 7 = II; L = a's 2 + 1 + b's 3 = 6; two groups.
    p = problem_of(_chain(False), machine(), apart=[("a", "b")])
    ans = oracle(p, max_ii=10, max_stages=3)
    assert (ans.ii, ans.length, ans.groups) == (7, 6, 2)


def test_blocking_by_hand() -> None:
    # Two 2-cycle ALU ops on one group, c waits (blocking) on x: c may not start while x or y issues.
    # One group: x [0, 2), y [2, 4) on the ALU, c needs x's result (d 2) and the group idle: c at 4 ends 5.
    # At II 5 the ALU holds x, y (4 cycles) and c is MUFU; c at residue 4 is free of both: II 5, L 5.
    g = Graph("blocking")
    g.add_op("x", "alu", busy={"alu": 2}, latency=2)
    g.add_op("y", "alu", busy={"alu": 2}, latency=2)
    g.add_op("c", "exp", busy={"mufu": 1}, latency=1)
    g.add_edge("x", "c", latency=2, carrier="none", blocking=True)
    p = problem_of(g, machine(), max_groups=1)
    ans = oracle(p, max_ii=10, max_stages=3)
    # II 4: ALU full (x and y), the group issues at every residue, so c can never start: II 5.
    assert (ans.ii, ans.length, ans.groups) == (5, 5, 1)


# ------------------------------------------------------------------------------------ random loops
UNIT_KIND = {"tc": "gemm", "mufu": "exp", "alu": "alu", "tma": "tma_load", "smem": "copy"}
BUDGETS = tuple(range(24, 257, 8))


@dataclass
class Case:
    """One random loop and the options it is solved with."""

    seed: int
    graph: Graph
    smem: int
    options: dict = field(default_factory=dict)

    def describe(self) -> str:
        ops = [f"  {op.name}: rrt={[(r.unit, r.start, r.cycles) for r in op.rrt]} lat={op.latency} "
               f"issue={op.issue_cycles} regs={op.regs} smem={op.smem} bytes={op.result_bytes} "
               f"vl={op.variable_latency} warps={op.warps} spill={op.spill_cost} completion={op.completion} "
               f"async_reader={op.async_reader} view={op.view}" for op in self.graph.ops]
        edges = [f"  {e.src}->{e.dst} d={e.latency} δ={e.distance} {e.carrier} blocking={e.blocking} "
                 f"inplace={e.inplace} handoff={e.handoff}" for e in self.graph.edges]
        return "\n".join([f"seed {self.seed}: smem {self.smem}, options {self.options}", *ops, *edges])


def _graph_features(seed: int, ops: list[dict], edges: list[dict]) -> None:
    """Sprinkle the graph-format features of issue 26 over a random loop, from their own random stream
    (so the base loop of each seed is the one it always was): idle trailing cycles (``completion``), an
    explicit ``async_reader`` flag, per-edge ``handoff`` costs, and, in loops of at most 4 ops, a view
    (no functional unit, no storage) spliced into a value-carrying edge."""
    rng = random.Random(10_007 * seed + 26)
    for op in ops:
        if rng.random() < 0.2:
            op["completion"] = next(iter(op["busy"].values())) + rng.randint(1, 2)
        if rng.random() < 0.2:
            op["async_reader"] = rng.random() < 0.5
    for e in edges:
        if rng.random() < 0.2:
            e["handoff"] = rng.randint(0, 4)
    carrying = [i for i, e in enumerate(edges) if e["carrier"] != "none" and e["src"] != e["dst"]]
    if len(ops) <= 4 and carrying and rng.random() < 0.3:
        e = edges[carrying[rng.randrange(len(carrying))]]
        ops.append({"name": "view", "kind": "memdesc_trans", "busy": {}, "view": True,
                    "latency": rng.choice((0, 0, 1)), "warps": rng.choice((1, 4)), "source": f"seed {seed}"})
        tail = {"src": "view", "dst": e["dst"], "latency": 0, "distance": 0, "carrier": e["carrier"],
                "blocking": e["blocking"]}
        e["dst"] = "view"
        e["blocking"] = False
        edges.append(tail)


def random_case(seed: int) -> Case:
    """A random loop of 2-5 ops with costs 1-4 (at least one 1-cycle op) and random options, with the
    graph-format features of :func:`_graph_features`."""
    rng = random.Random(seed)
    n = rng.randint(2, 5)
    g = Graph(f"rand{seed}")
    names = [f"o{i}" for i in range(n)]
    vl_ok = True
    ops: list[dict] = []
    for i, name in enumerate(names):
        unit = rng.choice(("tc", "mufu", "alu", "alu", "tma", "smem"))
        cycles = 1 if i == 0 else rng.randint(1, 4)
        vl = unit == "tma" and vl_ok and rng.random() < 0.7
        is_async = unit in ("tc", "tma")
        ops.append(dict(name=name, kind=UNIT_KIND[unit], busy={unit: cycles}, latency=rng.randint(1, 4),
                        issue_cycles=(1 if is_async else cycles),
                        regs=rng.choice((0, 0, 2, 16, 48, 96, 160)),
                        smem=rng.choice((0, 0, 0, 1024, 8192)),
                        result_bytes=rng.choice((0, 0, 128, 256, 512)),
                        variable_latency=vl, warps=rng.choice((1, 4, 4, 8)) if not vl else 1,
                        spill_cost=rng.randint(0, 4), source=f"seed {seed}"))
    edges: list[dict] = []
    for _ in range(rng.randint(1, n + 1)):
        a, b = rng.sample(range(n), 2) if n > 1 else (0, 0)
        src, dst = names[min(a, b)], names[max(a, b)]
        dist = 0 if rng.random() < 0.7 else rng.randint(1, 2)
        if rng.random() < 0.25:  # a back edge
            src, dst, dist = dst, src, rng.randint(1, 2)
        edges.append(dict(src=src, dst=dst, latency=rng.randint(0, 4), distance=dist,
                          carrier=rng.choice(("register", "register", "smem", "none")),
                          blocking=rng.random() < 0.3))
    if rng.random() < 0.4:
        acc = rng.choice(names)
        edges.append(dict(src=acc, dst=acc, latency=rng.randint(1, 3), distance=1,
                          carrier=rng.choice(("register", "none")), inplace=True))
    _graph_features(seed, ops, edges)
    for op in ops:
        g.add_op(op.pop("name"), op.pop("kind"), **op)
    for e in edges:
        g.add_edge(e.pop("src"), e.pop("dst"), **e)
    vl_ops = [op.name for op in g.ops if op.variable_latency]
    compute = [op.name for op in g.ops if not op.variable_latency]
    opts: dict = {"prefetch": rng.randint(0, 2), "stage_slack": rng.choice((0, 1, 1, 2)),
                  "max_ii": MAX_II}
    r = rng.random()
    if r < 0.35:
        size = rng.randint(2 if vl_ops else 1, 4)
        plan = [rng.choice(BUDGETS) for _ in range(size)]
        while sum(128 * b for b in plan) > 65536:
            plan[plan.index(max(plan))] -= 8
        opts["register_plan"] = plan
    elif r < 0.55:
        opts["max_groups"] = rng.randint(2 if vl_ops else 1, 4)
    if rng.random() < 0.35 and len(compute) >= 2 and opts.get("max_groups") != 1 and \
            len(opts.get("register_plan") or (0, 0)) >= 2:
        opts["apart"] = [tuple(rng.sample(compute, 2))]
    opts["max_stages"] = rng.choice((None, 1, 2, 2, 3, 4))
    smem = rng.choice((232448, 232448, 20000, 12000))
    return Case(seed, g, smem, opts)


@dataclass
class Outcome:
    case: Case
    problem: Problem | None
    answer: Answer | None
    sched: Schedule | None = None
    error: Exception | None = None
    skip: str = ""


NODE_LIMIT = 300_000
"""Search nodes the oracle may spend on one loop; a loop beyond it is left out (and counted)."""
TIME_LIMIT = 30.0
"""Seconds twill may spend on one loop; an answer cut short is judged as not proven."""


@cache
def outcome(seed: int) -> Outcome:
    case = random_case(seed)
    mach = machine(case.smem)
    try:
        prob = problem_of(case.graph, mach, **case.options)
    except Exception as exc:  # an option combination Options or build_problem rejects
        return Outcome(case, None, None, skip=f"options: {exc}")
    stages = STAGES if case.options["max_stages"] is None else case.options["max_stages"]
    try:
        ans = oracle(prob, max_ii=MAX_II, max_stages=stages, node_limit=NODE_LIMIT)
    except OracleLimit:
        return Outcome(case, prob, None, skip="oracle node limit")
    out = Outcome(case, prob, ans)
    try:
        out.sched = twill.schedule(case.graph, mach, **case.options, time_limit=TIME_LIMIT)
    except (InfeasibleError, ResourceError) as exc:
        out.error = exc
    except twill.errors.OptionsError as exc:
        out.skip = f"twill options: {exc}"
    return out


def cross_check(out: Outcome) -> list[str]:
    """The oracle's optimum passes twill.verify; twill's schedule passes the oracle's check."""
    bad = []
    if out.answer is not None:
        found = violations(as_schedule(out.problem, out.answer))
        if found:
            bad.append(f"the oracle's optimum {out.answer.key} fails twill.verify: {found[0]}")
    s = out.sched
    if s is not None:
        assert s.problem.cycles_per_unit == 1.0
        own = check(s.problem, s.ii, s.length, s.start, s.group)
        if own:
            bad.append(f"twill's schedule {twill_key(s)} fails the oracle's check: {own}")
    return bad


def judge(out: Outcome) -> list[str]:
    """Every disagreement between twill's answer and the oracle's on one loop."""
    if out.skip:
        return []
    ans, s, case = out.answer, out.sched, out.case
    bounded = case.options.get("max_stages") is not None  # both search the same stage counts
    if out.error is not None:
        if ans is not None and "time limit" not in str(out.error):
            return [f"twill: {type(out.error).__name__} ({str(out.error)[:200]}); oracle: {ans.key} start "
                    f"{dict(ans.start)} group {dict(ans.group)}"]
        return []
    assert s is not None
    if check(s.problem, s.ii, s.length, s.start, s.group):
        return []  # reported by the cross-check
    tw = twill_key(s)
    within = bounded or s.stages <= STAGES  # the oracle saw twill's schedule
    if ans is None:
        return [f"twill found {tw} ({s.stages} stages), the oracle nothing up to II {MAX_II}"] * within
    ok = ans.key[:3]
    bad = []
    if within and tw < ok:
        bad.append(f"twill {tw} beats the oracle's optimum {ok}")
    where = f"(oracle start {dict(ans.start)} group {dict(ans.group)} budgets {dict(ans.budgets)})"
    if s.certificate.proven_optimal:
        if bounded and tw != ok:
            bad.append(f"twill proven {tw}, oracle {ok} {where}")
        if not bounded and tw > ok:
            bad.append(f"twill proven {tw}, oracle {ok} within {STAGES} stages {where}")
    elif (bounded or within) and tw[:2] < ok[:2]:
        bad.append(f"twill unproven {tw} below the oracle's {ok}")
    return bad


def _chunks() -> list[int]:
    return list(range(0, LOOPS, CHUNK))


def _failures(first: int, rule) -> list[str]:
    failures = []
    for seed in range(first, min(first + CHUNK, LOOPS)):
        bad = rule(outcome(seed))
        if bad:
            failures.append(outcome(seed).case.describe() + "\n  -> " + "\n  -> ".join(bad))
    return failures


@pytest.mark.parametrize("first", _chunks())
def test_random_loops_cross_check(first: int) -> None:
    failures = _failures(first, cross_check)
    assert not failures, f"{len(failures)} loops:\n" + "\n".join(failures[:4])


@pytest.mark.parametrize("first", _chunks())
def test_random_loops_match_oracle(first: int) -> None:
    failures = _failures(first, judge)
    assert not failures, f"{len(failures)} loops disagree:\n" + "\n".join(failures[:4])


def test_enough_loops_decided() -> None:
    # the property tests above count only loops that both sides decided
    decided = sum(1 for seed in range(LOOPS) if not outcome(seed).skip)
    assert decided >= min(500, LOOPS) * 0.95 and (LOOPS < 500 or decided >= 500), decided


# ------------------------------------------------------------------------------------ (d) invariance
def _key_or_none(graph: Graph, mach: Machine, **options: object) -> tuple | str:
    try:
        s = twill.schedule(graph, mach, **options, time_limit=TIME_LIMIT)
    except InfeasibleError as exc:
        return "time limit" if "time limit" in str(exc) else "infeasible"
    except ResourceError:
        return "infeasible"
    return (s.ii, s.length)


INVARIANCE = int(os.environ.get("TWILL_ORACLE_INVARIANCE", "120"))


def _permuted_plan(plan: list[int], vl: bool, rng: random.Random) -> list[int]:
    # a register plan is a multiset (docs/model.md §6): any order, the variable-latency group's slot too
    out = list(plan)
    while len(set(out)) > 1 and out == list(plan):
        rng.shuffle(out)
    return out


def test_register_plan_permutation_keeps_answer() -> None:
    failures = []
    for seed in range(INVARIANCE * 3):
        case = random_case(seed)
        plan = case.options.get("register_plan")
        if not plan or outcome(seed).skip:
            continue
        vl = any(op.variable_latency for op in case.graph.ops)
        other = _permuted_plan(list(plan), vl, random.Random(seed))
        if other == list(plan):
            continue
        a = _key_or_none(case.graph, machine(case.smem), **case.options)
        b = _key_or_none(case.graph, machine(case.smem), **{**case.options, "register_plan": other})
        if a != b and "time limit" not in (a, b):
            failures.append(f"seed {seed}: plan {plan} -> {a}, plan {other} -> {b}")
    assert not failures, f"{len(failures)} plans:\n" + "\n".join(failures[:8])


def _relabelled(case: Case, rng: random.Random) -> tuple[Graph, dict]:
    """The same loop with ops renamed (a random bijection), added in another order, edges shuffled."""
    names = [op.name for op in case.graph.ops]
    new = [f"n{i}" for i in range(len(names))]
    rng.shuffle(new)
    rename = dict(zip(names, new, strict=True))
    g = Graph(case.graph.name)
    ops = list(case.graph.ops)
    rng.shuffle(ops)
    for op in ops:
        g.add(replace(op, name=rename[op.name]))
    edges = list(case.graph.edges)
    rng.shuffle(edges)
    for e in edges:
        g.add_edge(rename[e.src], rename[e.dst], latency=e.latency, distance=e.distance, blocking=e.blocking,
                   carrier=e.carrier, inplace=e.inplace, handoff=e.handoff)
    opts = dict(case.options)
    if "apart" in opts:
        opts["apart"] = [tuple(rename[n] for n in pair) for pair in opts["apart"]]
    return g, opts


def test_relabelling_keeps_answer() -> None:
    failures = []
    for seed in range(INVARIANCE):
        case = random_case(seed)
        if outcome(seed).skip:
            continue
        g, opts = _relabelled(case, random.Random(seed))
        a = _key_or_none(case.graph, machine(case.smem), **case.options)
        b = _key_or_none(g, machine(case.smem), **opts)
        if a != b and "time limit" not in (a, b):
            failures.append(f"seed {seed}: {a} as built, {b} relabelled\n{case.describe()}")
    assert not failures, f"{len(failures)} loops:\n" + "\n".join(failures[:4])


def two_tiles(seed: int) -> tuple[Graph, Machine, dict]:
    """Two identical sub-tiles ``a{t} -> b{t}`` (t = 1, 2) fed by one shared load; random costs."""
    rng = random.Random(seed)
    g = Graph(f"tiles{seed}")
    load_unit = rng.choice(("tma", "alu"))
    g.add_op("ld", "tma_load" if load_unit == "tma" else "alu", busy={load_unit: 1},
             latency=rng.randint(1, 3),
             issue_cycles=1, variable_latency=load_unit == "tma", result_bytes=rng.choice((0, 128, 256)),
             regs=rng.choice((0, 16)), spill_cost=rng.randint(0, 3), source="two tiles")
    ua, ub = rng.choice(("tc", "alu")), rng.choice(("mufu", "alu", "smem"))
    ca, cb = rng.randint(1, 3), rng.randint(1, 3)
    regs_a, bytes_a, spill = rng.choice((0, 16, 64)), rng.choice((0, 128, 512)), rng.randint(0, 3)
    warps = rng.choice((1, 4))
    for t in (1, 2):
        g.add_op(f"a{t}", "gemm", busy={ua: ca}, latency=ca, issue_cycles=1 if ua == "tc" else ca,
                 regs=regs_a, result_bytes=bytes_a, spill_cost=spill, warps=warps, source="two tiles")
        g.add_op(f"b{t}", "exp", busy={ub: cb}, latency=cb, issue_cycles=cb, regs=16, result_bytes=128,
                 spill_cost=spill, warps=warps, source="two tiles")
    carrier = rng.choice(("register", "smem"))
    lat, blocking = rng.randint(0, 2), rng.random() < 0.5
    for t in (1, 2):
        g.add_edge("ld", f"a{t}", latency=lat, carrier="register")
        g.add_edge(f"a{t}", f"b{t}", carrier=carrier, blocking=blocking)
    opts = {"max_ii": 12, "stage_slack": 1, "prefetch": 1, "max_stages": rng.choice((2, 3))}
    if rng.random() < 0.5:
        opts["max_groups"] = 3
    return g, machine(), opts


@pytest.mark.parametrize("seed", range(20))
def test_apart_mirror_keeps_answer(seed: int) -> None:
    # apart on tile 1 and apart on tile 2 are mirror images: swapping the tiles maps one problem onto the
    # other, so the two answers are equal (and both equal to the oracle's)
    g, mach, opts = two_tiles(seed)
    one = _key_or_none(g, mach, **opts, apart=[("a1", "b1")])
    two = _key_or_none(g, mach, **opts, apart=[("a2", "b2")])
    stages = opts["max_stages"]
    want = oracle(problem_of(g, mach, **opts, apart=[("a1", "b1")]), max_ii=12, max_stages=stages)
    mirror = oracle(problem_of(g, mach, **opts, apart=[("a2", "b2")]), max_ii=12, max_stages=stages)
    assert (want and want.key[:2]) == (mirror and mirror.key[:2]), "the oracle is not mirror-symmetric"
    assert one == two, f"apart on tile 1: {one}, on tile 2: {two}; oracle {want and want.key}"


# ------------------------------------------------------------------------------------ reproducers
# Minimal loops of each disagreement class the random loops found; the expected values are the oracle's,
# and the oracle's schedule passes twill.verify (asserted), so each is a schedule twill missed.
def _agrees(graph: Graph, mach: Machine, max_ii: int, stages: int, **options: object) -> None:
    p = problem_of(graph, mach, max_ii=max_ii, max_stages=stages, **options)
    ans = oracle(p, max_ii=max_ii, max_stages=stages)
    assert ans is not None
    assert not violations(as_schedule(p, ans))
    try:
        s = twill.schedule(graph, mach, max_ii=max_ii, max_stages=stages, **options)
    except (InfeasibleError, ResourceError) as exc:
        pytest.fail(f"twill: {exc}; the oracle's {ans.key[:3]} verifies: start {dict(ans.start)}, "
                    f"group {dict(ans.group)}, budgets {dict(ans.budgets)}")
    assert twill_key(s) <= ans.key[:3], f"twill {twill_key(s)} (proven {s.certificate.proven_optimal})"
    if s.certificate.proven_optimal:
        assert twill_key(s) == ans.key[:3]


def test_repro_plan_order_one_op() -> None:
    # One ALU op holding 96 registers (+ 26 overhead = 122 > 64): it fits the plan's second budget (216)
    # and not the first; a plan is a budget per group, not an order, so II 1 L 1 one group.
    g = Graph("plan1")
    g.add_op("o0", "exp", busy={"mufu": 1}, latency=1, issue_cycles=1, regs=96)
    _agrees(g, machine(), 10, 2, register_plan=[64, 216, 104, 56])


def test_repro_plan_order_groups() -> None:
    # A load (variable latency, group 0) and an 8-warp ALU op that fits the register file only on the 40
    # budget (256 threads x 40) beside the two others: the oracle's L 6 on 4 groups beats L 7 on 3.
    g = Graph("plan4")
    g.add_op("o0", "tma_load", busy={"tma": 1}, latency=1, issue_cycles=1, variable_latency=True)
    g.add_op("o1", "alu", busy={"alu": 2}, latency=1, issue_cycles=2, warps=8)
    g.add_op("o2", "copy", busy={"smem": 3}, latency=1, issue_cycles=3, warps=4)
    g.add_op("o3", "alu", busy={"alu": 4}, latency=1, issue_cycles=4, regs=16, warps=4)
    g.add_edge("o0", "o2", latency=1, carrier="none")
    _agrees(g, machine(), 10, 2, register_plan=[136, 96, 128, 40])


def test_repro_stage_window() -> None:
    # b waits (blocking) on a, so it cannot start while a issues: b >= 1, L = 3 at II 2 (two stages).
    # The modulo schedule has L 2 (one stage), and stage_slack 0 searches that window only.
    g = Graph("window")
    g.add_op("a", "exp", busy={"mufu": 1}, latency=1, issue_cycles=1)
    g.add_op("b", "copy", busy={"smem": 2}, latency=1, issue_cycles=2)
    g.add_edge("a", "b", latency=0, carrier="none", blocking=True)
    _agrees(g, machine(), 10, 4, stage_slack=0)


def test_repro_memory_precheck_ordering_self_edges() -> None:
    # Two 8 KB values with ordering self-edges (carrier none: no value crosses iterations) on a 12000-byte
    # machine: each is live for its op's one cycle only, so at II 2 they never overlap (8192 <= 12000).
    g = Graph("selfedges")
    for name in ("x", "y"):
        g.add_op(name, "alu", busy={"alu": 1}, latency=1, smem=8192)
        g.add_edge(name, name, latency=1, distance=1, carrier="none")
    _agrees(g, machine(12000), 10, 3)


def test_repro_apart_mirror() -> None:
    # Two identical tiles a{t} -> b{t} fed by one ALU op; apart on tile 2 is the mirror of apart on tile 1,
    # whose optimum is II 3, L 6 on 2 groups (the oracle's, verified). The GEMMs issue asynchronously (0
    # units): with 1 unit each the five ops' issue (the issue limit) would bind first, at II 4 either way.
    g = Graph("tiles")
    g.add_op("ld", "alu", busy={"alu": 1}, latency=3, issue_cycles=1, result_bytes=128, spill_cost=3)
    for t in (1, 2):
        g.add_op(f"a{t}", "gemm", busy={"tc": 1}, latency=1, issue_cycles=0, result_bytes=128, spill_cost=3)
        g.add_op(f"b{t}", "copy", busy={"smem": 1}, latency=1, issue_cycles=1, regs=16, result_bytes=128,
                 spill_cost=3)
    for t in (1, 2):
        g.add_edge("ld", f"a{t}", latency=2)
        g.add_edge(f"a{t}", f"b{t}", carrier="smem", blocking=True)
    _agrees(g, machine(), 12, 2, max_groups=3, apart=[("a2", "b2")])
