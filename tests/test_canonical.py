"""Canonical answers (issue 22): the same graph built in any order of ops and edges gives the same
schedule, byte for byte (``Schedule.to_json(timings=False)``, the ``problem`` section included), and ties
after II, L, groups, hand-offs and registers go to the least shared-memory footprint, and then to
the fewest mbarrier pairs and hand-off bytes (the tie-break goals).

The reference for each shuffled graph is the schedule of the graph as built (not a stored answer); the
least footprint of the tie test is derived by arithmetic from the machine's hand-off constant and the
ops' costs.
"""

from __future__ import annotations

import dataclasses
import math
import random
from pathlib import Path

import pytest
import twill.cpsat

import twill
from twill.ir.graph import Graph
from twill.ir.machine import load_machine
from twill.model.exchange import exchange
from twill.schedule import Schedule, slots_from
from twill.verify import violations

ROOT = Path(__file__).resolve().parents[1]
FA_CASES = [
    ("flash_attention_fwd.py::attn_fwd", "h100"),
    ("flash_attention_fwd_subtiled.py::attn_fwd_subtiled_sm90", "h100"),
    # the Blackwell forward: three solves of about 14 s each on 2 cores, so in the heavy tier (README)
    pytest.param("flash_attention_fwd.py::attn_fwd", "b200", marks=pytest.mark.heavy),
]


def shuffled(g: Graph, rng: random.Random) -> Graph:
    """``g`` rebuilt with its ops and its edges added in a random order (same ops, same dependences)."""
    out = Graph(g.name, g.fixed_smem, g.fixed_tmem, g.source)
    ops = list(g.ops)
    rng.shuffle(ops)
    for op in ops:
        out.add(op)
    deps = list(g.edges)
    rng.shuffle(deps)
    for d in deps:
        out.add_edge(d.src, d.dst, latency=d.latency, distance=d.distance, blocking=d.blocking,
                     carrier=d.carrier, source=d.source, inplace=d.inplace)
    return out


def random_loop(rng: random.Random, n_ops: int) -> Graph:
    """A random loop of ``n_ops`` ops: up to two streaming loads (SMEM buffers), compute ops on the tensor
    core, ALU or MUFU with random latency, registers and SMEM, forward edges of every carrier and
    loop-carried self-edges."""
    g = Graph(f"random{n_ops}")
    names = [f"op{i}" for i in range(n_ops)]
    loads = set(rng.sample(names, rng.randint(0, 2)))
    for n in names:
        if n in loads:
            g.add_op(n, "load", busy={"tma": rng.randint(1, 3)}, latency=rng.randint(2, 8),
                     variable_latency=True, smem=1024 * rng.randint(1, 8), source=n)
        else:
            unit = rng.choice(("tc", "alu", "mufu"))
            g.add_op(n, "compute", busy={unit: rng.randint(2, 12)}, latency=rng.randint(2, 20),
                     regs=rng.choice((0, 8, 32, 64)), smem=rng.choice((0, 0, 2048)),
                     result_bytes=rng.choice((0, 512)), source=n)
    for j, n in enumerate(names):
        for m in names[j + 1:]:
            if rng.random() < 0.4 and m not in loads:
                carrier = "smem" if n in loads else rng.choice(("register", "none"))
                g.add_edge(n, m, carrier=carrier, latency=rng.randint(0, 30), source=f"{n}->{m}")
        if n not in loads and rng.random() < 0.3:
            g.add_edge(n, n, distance=1, carrier=rng.choice(("register", "none")), source=f"{n}->{n}")
    return g


@pytest.mark.parametrize(("entry", "machine"), FA_CASES)
def test_fa_forward_built_in_any_order_gives_the_same_json(entry: str, machine: str) -> None:
    g = twill.graph_from_kernel(str(ROOT / "examples" / entry), machine=machine)
    ref = twill.schedule(g, machine, time_limit=300).to_json(timings=False)
    for seed in (1, 2):
        again = twill.schedule(shuffled(g, random.Random(seed)), machine, time_limit=300)
        assert again.to_json(timings=False) == ref, (entry, machine, seed)


def test_random_loops_built_in_any_order_give_the_same_json() -> None:
    compared = 0
    for seed in range(16):
        g = random_loop(random.Random(seed), 3 + seed % 3)
        try:
            ref = twill.schedule(g, "h100", time_limit=60).to_json(timings=False)
        except (twill.InfeasibleError, twill.ResourceError):
            continue
        again = twill.schedule(shuffled(g, random.Random(100 + seed)), "h100", time_limit=60)
        assert again.to_json(timings=False) == ref, seed
        compared += 1
    assert compared >= 10


def test_the_problem_section_lists_ops_by_name_and_edges_sorted() -> None:
    g = random_loop(random.Random(7), 5)
    data = twill.schedule(shuffled(g, random.Random(3)), "h100", time_limit=60).to_dict(timings=False)
    names = [o["name"] for o in data["problem"]["ops"]]
    assert names == sorted(op.name for op in g.ops)
    ends = [(e["src"], e["dst"], e["distance"]) for e in data["problem"]["edges"]]
    assert ends == sorted((d.src, d.dst, d.distance) for d in g.edges)


def _tie_loop(k: int, chain: int, start_late: int) -> Graph:
    """``k`` streaming loads ``ld{i}`` (SMEM, ``1024 (i + 1)`` bytes) each read by a short ALU op
    ``mm{i}``, and a chain ``x1 -> x2`` of latency ``chain`` that sets L. ``x1 -> mm{i}`` (latency
    ``start_late``) keeps each reader late and ``x1 -> ld{i}`` lets the load start early: every
    placement of a load between ``x1`` and its reader ties on II, L, groups, hand-offs and registers,
    and the ring it needs grows with the distance."""
    g = Graph("tie")
    for i in range(k):
        g.add_op(f"ld{i}", "load", busy={"tma": 2}, latency=4, variable_latency=True,
                 smem=1024 * (i + 1), source="tie")
        g.add_op(f"mm{i}", "alu", busy={"alu": 3}, source="tie")
        g.add_edge(f"ld{i}", f"mm{i}", carrier="smem", source="tie")
    g.add_op("x1", "alu", busy={"alu": 3}, source="tie")
    g.add_op("x2", "alu", busy={"alu": 3}, source="tie")
    g.add_edge("x1", "x2", latency=chain, carrier="none", source="tie")
    for i in range(k):
        g.add_edge("x1", f"mm{i}", latency=start_late, carrier="none", source="tie")
        g.add_edge("x1", f"ld{i}", latency=1, carrier="none", source="tie")
    return g


def _footprint(s: Schedule) -> int:
    """Bytes x ring depth summed over the SMEM buffers of ``s``, from the JSON (part of the answer)."""
    smem = s.to_dict()["smem"]
    return smem["total"] - smem["loop_invariant"]


def _with_starts(s: Schedule, start: dict[str, int]) -> Schedule:
    return dataclasses.replace(s, slots=slots_from(start, s.group, s.ii, list(s.slots)))


@pytest.mark.parametrize("solver", ["yices", pytest.param("cpsat", marks=pytest.mark.skipif(
    not twill.cpsat.available(), reason="ortools is not installed"))])
@pytest.mark.parametrize(("k", "chain", "start_late"), [(2, 150, 200), (2, 300, 100), (3, 300, 200)])
def test_ties_go_to_the_least_shared_memory(solver: str, k: int, chain: int, start_late: int) -> None:
    s = twill.schedule(_tie_loop(k, chain, start_late), "h100", solver=solver)
    p = s.problem
    assert p.cycles_per_unit == 1.0  # the costs are small: normalization keeps machine cycles
    # Each buffer lives from prefetch x II before its load to its reader's end; the reader waits at
    # least the mbarrier hand-off after the load starts (an SMEM value crossing groups), so the least
    # ring is ceil((prefetch * II + max(load cycles, hand-off + reader cycles)) / II) slots.
    handoff = load_machine("h100").handoff_cycles("smem", 0)
    least = sum(1024 * (i + 1) * math.ceil((p.options.prefetch * s.ii + max(2, handoff + 3)) / s.ii)
                for i in range(k))
    assert _footprint(s) == least
    # A tie exists: the same schedule with a load moved one II earlier (still after x1) is another
    # valid schedule of the same II, L and groups, with a deeper ring.
    start = dict(s.start)
    barrier = load_machine("h100").handoff_cycles("none", 0)  # x1 -> ld0 crosses to the load group
    if start["ld0"] - s.ii >= start["x1"] + 1 + barrier:
        start["ld0"] -= s.ii
        other = _with_starts(s, start)
        assert not violations(other)
        assert (other.ii, other.length) == (s.ii, s.length)
        assert _footprint(other) == least + 1024  # ld0 lives one II longer: one more 1024-byte slot


@pytest.mark.parametrize("solver", ["yices", pytest.param("cpsat", marks=pytest.mark.skipif(
    not twill.cpsat.available(), reason="ortools is not installed"))])
def test_the_tie_break_goals_give_the_same_answer_in_any_order(solver: str) -> None:
    # The loop of tests/test_tiebreaks.py, where the tie-break goals (fewest mbarrier pairs, then hand-off
    # bytes) choose between schedules equal in every earlier goal; the apart pairs given reversed and
    # in another order too.
    from test_tiebreaks import fanout

    g, apart = fanout(1024)
    ref = twill.schedule(g, "h100", solver=solver, apart=apart)
    assert exchange(ref.problem, ref.group) == {"barriers": 1, "handoff_bytes": 2048}
    for seed in (1, 2):
        rng = random.Random(seed)
        pairs = [(b, a) if rng.random() < 0.5 else (a, b) for a, b in apart]
        rng.shuffle(pairs)
        again = twill.schedule(shuffled(g, rng), "h100", solver=solver, apart=pairs)
        assert again.to_json(timings=False) == ref.to_json(timings=False), seed
