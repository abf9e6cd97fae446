"""The solver-neutral formulation (twill.model.formulation) of a small hand-built loop, item by item.

The loop: a TMA load ``ld`` (variable latency, an SMEM tile) feeds an asynchronous MMA ``mm`` (a register
accumulator carried to itself) whose value a softmax-like ``ex`` reads; ``ex``'s value goes on to ``st``.
Every expected value is computed here from the ops' and edges' own fields and docs/model.md's rules, not
read back from the formulation's helpers.
"""

from __future__ import annotations

import dataclasses

import pytest

import twill
from twill.model.formulation import ALWAYS, Formulation, Placement, Use, When
from twill.model.problem import HANDOFF_UNIT, Options, build_problem


def _loop(**options):  # type: ignore[no-untyped-def]
    g = twill.Graph("hand")
    g.add_op("ld", "load", busy={"tma": 2}, latency=10, smem=4096, variable_latency=True, source="t")
    g.add_op("mm", "mma", busy={"tc": 8}, issue_cycles=2, regs=64, result_bytes=8192, source="t")
    g.add_op("ex", "alu", busy={"alu": 4}, regs=32, result_bytes=4096, source="t")
    g.add_op("st", "alu", busy={"alu": 2}, regs=16, source="t")
    g.add_edge("ld", "mm", carrier="smem", source="t")
    g.add_edge("mm", "mm", distance=1, inplace=True, source="t")
    g.add_edge("mm", "ex", latency=8, source="t")
    g.add_edge("ex", "st", latency=4, source="t")
    g.add_edge("ex", "mm", distance=1, latency=3, source="t")
    return build_problem(g, twill.load_machine("h100"), Options(**options))


@pytest.fixture(scope="module")
def problem():  # type: ignore[no-untyped-def]
    return _loop(max_groups=3, prefetch=1)


def _edge(p, src, dst):  # type: ignore[no-untyped-def]
    (e,) = [e for e in p.edges if e.src == src and e.dst == dst]
    return e


def test_groups_and_shapes(problem) -> None:  # type: ignore[no-untyped-def]
    f = Formulation.of(problem)
    assert f.pool == 3
    # group 0 holds exactly the variable-latency op; the others take groups 1 and 2
    assert dict(f.groups_of) == {"ex": (1, 2), "ld": (0,), "mm": (1, 2), "st": (1, 2)}
    assert set(f.warpgroups) == {(n, 1, False) for n in ("ex", "ld", "mm", "st")}  # one-warp ops
    assert f.shapes == (1,)
    assert f.accumulators == ("mm",)
    res = problem.resources
    assert f.register_limit == min(res.max_regs, res.setmaxnreg_max)


def test_register_items(problem) -> None:  # type: ignore[no-untyped-def]
    f = Formulation.of(problem)
    values = {it.op: it for it in f.register_items if it.length is None}
    received = [it for it in f.register_items if it.length is not None]
    assert set(values) == {"mm", "ex", "st"}  # regs > small_value_regs (2) on h100
    mm, ex = values["mm"], values["ex"]
    assert (mm.weight, mm.end_from, mm.when) == (64, 8, ALWAYS)  # mm's cycles: its 8-cycle RRT
    # mm's uses: itself in place (hold 0, always) and ex on the same group (ex is synchronous: hold 0)
    assert set(mm.uses) == {Use("mm", 0, 1, Placement.ANY), Use("ex", 0, 0, Placement.SAME_GROUP)}
    # ex's uses: st (synchronous, hold 0) and mm, which is asynchronous and not in place: hold = its 8 cycles
    assert set(ex.uses) == {Use("st", 0, 0, Placement.SAME_GROUP), Use("mm", 8, 1, Placement.SAME_GROUP)}
    # the one received copy: ex's 32 registers held on mm's group for mm's 8 cycles, when ex -> mm crosses
    assert [(it.holder, it.weight, it.length, it.when) for it in received] == [
        ("mm", 32, 8, When((("ex", "mm"),)))]


def test_memory_and_staging(problem) -> None:  # type: ignore[no-untyped-def]
    f = Formulation.of(problem)
    assert "ld" in problem.streaming
    (ld,) = f.memory_items
    # the tile lives at least ld's own 2 RRT cycles and until mm ends (8 cycles after mm starts), taken
    # one II ahead (prefetch=1)
    assert (ld.resource, ld.weight, ld.offset_k, ld.end_from) == ("smem", 4096, -1, 2)
    assert ld.uses == (Use("mm", 8, 0, Placement.ANY),)
    staged = {it.op: it for it in f.staging}
    assert set(staged) == {"mm", "ex"}  # st has no result bytes; ld's value is not in registers
    ex = staged["ex"]
    assert (ex.weight, ex.offset, ex.end_from) == (4096, 4, 5)  # from ex's end until its reader starts + 1
    assert set(ex.uses) == {Use("st", 1, 0, Placement.OTHER_GROUP), Use("mm", 1, 1, Placement.OTHER_GROUP)}
    assert set(ex.when.crosses) == {("ex", "st"), ("ex", "mm")}
    assert f.smem_least() == 4096  # only the tile always exists
    assert f.smem_granularity() == 4096  # gcd(4096, 8192, 4096)


def test_handoff_bookings(problem) -> None:  # type: ignore[no-untyped-def]
    f = Formulation.of(problem)
    crossing = [e for e in problem.edges if e.transfer and e.src != e.dst]
    assert {(e.src, e.dst) for e in crossing} == {("mm", "ex"), ("ex", "st"), ("ex", "mm")}
    loads = [b for b in f.bookings if b.op == b.when.crosses[0][1] and len(b.when.crosses) == 1
             and b.offset < 0]
    stores = [b for b in f.bookings if b.offset >= 0]
    assert all(b.unit == HANDOFF_UNIT for b in f.bookings)
    # one load per crossing edge, in the consumer's slot before it starts
    assert {(b.op, b.cycles) for b in loads} == {(e.dst, e.transfer) for e in crossing}
    # mm receives one value (from ex): its slot is the transfer just before it starts
    t = _edge(problem, "ex", "mm").transfer
    assert [b.offset for b in loads if b.op == "mm"] == [-t]
    # one store per producer, once its value is ready (its least register-edge latency), when any crosses
    by_src = {b.op: b for b in stores}
    assert set(by_src) == {"mm", "ex"}
    assert by_src["ex"].offset == 3  # min(latency 4 to st, 3 to mm)
    assert by_src["ex"].cycles == _edge(problem, "ex", "st").transfer
    assert set(by_src["ex"].when.crosses) == {("ex", "st"), ("ex", "mm")}
    assert by_src["mm"].offset == 8 and by_src["mm"].when == When((("mm", "ex"),))


def test_dependences_and_blocking(problem) -> None:  # type: ignore[no-untyped-def]
    f = Formulation.of(problem)
    deps = {(d.src, d.dst): d for d in f.dependences}
    e = _edge(problem, "mm", "ex")
    d = deps[("mm", "ex")]
    assert d.least == 8 and not d.together  # cross_group is on by default
    # the delay when crossing: the hand-off latency, and at least store offset + transfer + load slot
    assert d.crossing == max(8 + e.cross, 8 + e.transfer + e.transfer)
    assert deps[("ld", "mm")].crossing is None  # the load always crosses: its cost is in ``least``
    assert deps[("ld", "mm")].least > 0
    assert deps[("mm", "mm")].least == _edge(problem, "mm", "mm").latency
    waits = {b.op: b for b in f.blocking}
    assert waits["mm"].waits.always or set(waits["mm"].waits.crosses) >= {("ex", "mm")}


def test_relaxed_families_are_empty() -> None:
    f = Formulation.of(_loop(relax=("registers", "smem", "blocking")))
    assert f.register_items == () and f.staging == () and f.blocking == ()
    assert all(it.resource != "smem" for it in f.memory_items)
    g = Formulation.of(_loop(cross_group=False))
    assert g.bookings == ()
    assert {(d.src, d.dst) for d in g.dependences if d.together} == {("mm", "ex"), ("ex", "st"), ("ex", "mm")}


def test_formulation_is_frozen(problem) -> None:  # type: ignore[no-untyped-def]
    f = Formulation.of(problem)
    with pytest.raises(dataclasses.FrozenInstanceError):
        f.pool = 1  # type: ignore[misc]
    assert Formulation.of(problem) == f  # a function of the problem alone
