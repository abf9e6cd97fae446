"""The tie-break goals (issue 25 item 2, :mod:`twill.model.exchange`): among schedules equal in II, L,
groups, hand-off latency, registers and SMEM, twill picks the fewest mbarrier pairs and then the fewest
bytes handed through shared memory.

The hand-built loop below has two kinds of schedule that tie on every earlier goal; the values of each
are derived by arithmetic from the graph (one staging store of the producer's bytes, one load per reader
group, one mbarrier pair per reader group), not read from the code under test.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

import twill
from twill.ir.graph import Graph
from twill.model.exchange import exchange
from twill.model.liveness import smem_footprint
from twill.schedule import slots_from
from twill.solvers import cpsat
from twill.verify import violations

SOLVERS = ["yices", pytest.param("cpsat", marks=pytest.mark.skipif(not cpsat.available(),
                                                                    reason="ortools is not installed"))]


def fanout(nbytes: int) -> tuple[Graph, list[tuple[str, str]]]:
    """``p`` (a register value of ``nbytes`` bytes) read by ``c0`` and ``c1``, and ``d``; ``apart`` pairs
    keep ``p`` away from every other op and ``d`` away from ``c0``, so every schedule has three groups
    and both edges' hand-offs are always paid. ``c1`` may join ``c0`` (one reader group) or ``d`` (two):
    the same II, L, hand-off latency, registers and staging buffer either way. (Without the tie-break
    goals both solvers put ``c1`` with ``d``.)"""
    g = Graph("fanout")
    g.add_op("p", "alu", busy={"alu": 2}, latency=4, result_bytes=nbytes, source="p")
    g.add_op("d", "alu", busy={"alu": 2}, latency=4, source="d")
    apart = [("p", "d"), ("c0", "d")]
    for i in range(2):
        g.add_op(f"c{i}", "alu", busy={"alu": 2}, latency=4, source=f"c{i}")
        g.add_edge("p", f"c{i}", carrier="register", latency=4, source=f"p->c{i}")
        apart.append(("p", f"c{i}"))
    return g, apart


@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize("nbytes", [512, 2048])
def test_ties_go_to_the_fewest_barriers_and_handoff_bytes(solver: str, nbytes: int) -> None:
    g, apart = fanout(nbytes)
    s = twill.schedule(g, "h100", solver=solver, apart=apart)
    assert s.certificate.proven_optimal
    # every reader on one group: one mbarrier pair, the value stored once and loaded once
    chosen = exchange(s.problem, s.group)
    assert chosen == {"barriers": 1, "handoff_bytes": 2 * nbytes}
    assert s.group["c0"] == s.group["c1"]
    assert f"tie-breaks: 1 mbarrier pair(s) and {2 * nbytes} B" in " ".join(s.certificate.notes)
    # The tie is real: c1 moved to d's group is a valid schedule of the same II and L with the same
    # number of groups, hand-off latency and registers, one more reader group: one more mbarrier pair
    # and one more load of the value.
    group = dict(s.group)
    group["c1"] = group["d"]
    slots = slots_from(s.start, group, s.ii, list(s.slots))
    groups = [dataclasses.replace(w, ops=tuple(n for n in (*w.ops, "c1") if group[n] == w.index))
              for w in s.warp_groups]
    other = dataclasses.replace(s, slots=slots, warp_groups=tuple(groups))
    assert not violations(other)
    assert (other.ii, other.length, len(set(other.group.values()))) == (s.ii, s.length, 3)
    p = s.problem

    def latency(group: dict[str, int]) -> int:
        return sum(e.cross for e in p.edges if group[e.src] != group[e.dst])

    assert latency(other.group) == latency(s.group)
    assert [w.registers for w in other.warp_groups] == [w.registers for w in s.warp_groups]
    assert smem_footprint(p, s.ii, s.start, other.group) == smem_footprint(p, s.ii, s.start, s.group)
    assert exchange(s.problem, other.group) == {"barriers": 2, "handoff_bytes": 3 * nbytes}


def test_the_tie_breaks_leave_fa_forward_ii_length_and_proof_as_they_were(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import twill.solvers.joint.cpsat as cpsat_encoding
    import twill.solvers.joint.smt as smt_encoding
    from twill.solvers.joint.result import GOALS, TIEBREAKS

    kernel = str(Path(__file__).resolve().parents[1] / "examples" / "flash_attention_fwd.py")
    g = twill.graph_from_kernel(kernel, machine="h100")
    with_tiebreaks = twill.schedule(g, "h100", time_limit=300)
    before = tuple(x for x in GOALS if x not in TIEBREAKS)
    monkeypatch.setattr(smt_encoding, "GOALS", before)
    monkeypatch.setattr(cpsat_encoding, "GOALS", before)
    without = twill.schedule(g, "h100", time_limit=300)
    assert (with_tiebreaks.ii, with_tiebreaks.length) == (without.ii, without.length)
    assert with_tiebreaks.certificate.proven_optimal == without.certificate.proven_optimal
    assert exchange(with_tiebreaks.problem, with_tiebreaks.group)["barriers"] \
        <= exchange(without.problem, without.group)["barriers"]
