"""Relaxed constraint families (``Options.relax``) and ``twill explain``.

The register example is small enough to solve by hand. ``X`` (ALU, 1 cycle, latency 4) produces a
64-register value that ``Y`` (MUFU, 1 cycle) reads; with ``cross_group=False`` both sit on one warp group,
so the value lives at least 4 cycles and ``ceil(4 / II)`` copies of it are live at once, beside the
H100's 26-register group overhead:

* register limit 128: ``26 + 64 k <= 128`` allows one copy, so ``II = 4``;
* limit 255 (the machine's): ``26 + 64 k <= 255`` allows three, ``ceil(4 / II) <= 3`` gives ``II = 2``;
* no register constraint at all: the units allow ``ResMII = 1``, but X and Y share the group's one issue
  stream (the issue limit: 1 + 1 cycles per iteration), so ``II = 2``.

Nothing else binds: the register file (one warp group of 128 threads x 128) is far from full, and
with one group there is no hand-off or blocking wait. ``L = 5`` (X at 0, Y at 4) in every case.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

import twill
from twill.analysis.explain import explain
from twill.cli import main
from twill.errors import ResourceError, TwillError
from twill.ir.graph import Graph
from twill.model.problem import RELAXABLE, Options
from twill.verify import violations


def regs_bind() -> Graph:
    """The register example of the module docstring."""
    g = Graph("regs_bind")
    g.add_op("X", "alu", busy={"alu": 1}, latency=4, regs=64)
    g.add_op("Y", "exp", busy={"mufu": 1}, latency=1)
    g.add_edge("X", "Y")
    return g


# ------------------------------------------------------------------------------------------ the hook
def test_options_reject_an_unknown_family():
    with pytest.raises(ValueError, match="bogus"):
        Options(relax=frozenset({"bogus"}))


def test_options_relax_round_trips_through_json():
    opts = Options(relax=frozenset({"smem", "registers"}))
    assert opts.to_dict()["relax"] == ["registers", "smem"]
    assert Options.from_dict(opts.to_dict()) == opts
    old = {k: v for k, v in Options().to_dict().items() if k != "relax"}  # a file from before the field
    assert Options.from_dict(old).relax == frozenset()


@pytest.mark.parametrize(("options", "ii"), [
    ({"register_limit": 128}, 4),
    ({}, 2),
    ({"register_limit": 128, "relax": {"registers"}}, 2),
    ({"register_limit": 128, "relax": {"register_file"}}, 4),
])
def test_register_relaxations_change_ii_as_derived(options, ii):
    s = twill.schedule(regs_bind(), "h100", cross_group=False, **options)
    assert (s.ii, s.length) == (ii, 5)
    assert s.problem.cycles_per_unit == 1.0


def test_verify_skips_a_relaxed_family_only():
    relaxed = twill.schedule(regs_bind(), "h100", cross_group=False, register_limit=128, relax={"registers"})
    assert violations(relaxed) == []
    strict = replace(relaxed.problem.options, relax=frozenset())
    as_real = replace(relaxed, problem=replace(relaxed.problem, options=strict))
    assert [e.family for e in violations(as_real)] == ["registers"]


def test_resource_checks_honor_relax():
    g = Graph("big")
    g.add_op("A", "alu", busy={"alu": 1}, regs=300)
    with pytest.raises(ResourceError):
        twill.schedule(g, "h100")
    assert twill.schedule(g, "h100", relax={"registers"}).ii == 1


def test_relaxed_handoffs_include_the_forced_ones():
    # A streaming load always hands its buffer to another warp group (an mbarrier, ``cross`` units): the
    # consumer starts that much later, unless hand-offs are relaxed, where nothing separates them.
    g = Graph("stream")
    g.add_op("L", "tma_load", busy={"tma": 8}, latency=200, issue_cycles=1, smem=4096, variable_latency=True)
    g.add_op("C", "alu", busy={"alu": 400})
    g.add_edge("L", "C", blocking=True, carrier="smem")
    real = twill.schedule(g, "h100")
    what_if = twill.schedule(g, "h100", relax={"handoff"})
    (edge,) = real.problem.edges
    assert real.start["C"] == edge.cross > 0
    assert what_if.start["C"] == 0 and what_if.ii == real.ii
    assert what_if.problem.least_latency(edge) == edge.latency == 0
    assert violations(what_if) == []


def test_relaxable_names_are_documented():
    assert set(RELAXABLE) == {"registers", "register_file", "smem", "tmem", "handoff", "blocking", "groups"}
    assert all(RELAXABLE.values())


# ------------------------------------------------------------------------------------------ explain
@pytest.fixture(scope="module")
def regs_explained():
    return explain(regs_bind(), "h100", register_limit=128, cross_group=False)


def test_explain_finds_the_register_families_that_bind(regs_explained):
    ex = regs_explained
    assert (ex.baseline.ii, ex.baseline.length) == (4, 5)
    binding = {o.families[0]: o.schedule.ii for o in ex.binding()}
    # as derived in the module docstring; and with cross-group values allowed, Y on a group of its own
    # takes X's value through SMEM once it is produced (X then holds 64 + 26 <= 128 registers only for
    # its own cycle), so II 1 works with a schedule as long as the hand-off (stages beyond n_min + 1,
    # which only the closing query over every stage count finds)
    assert binding == {"registers": 2, "register_limit": 2, "cross_group": 1}
    tried = {o.families[0] for o in ex.outcomes}
    # no SMEM, no TMEM on the H100: nothing to relax there; cross_group was forbidden by the caller
    assert tried == {"register_limit", "registers", "register_file", "handoff", "blocking", "groups",
                     "cross_group"}
    # With register values allowed across groups, II = 1 would need X and Y on two groups and
    # L >= 4 + 153 (the H100's register hand-off) = 158 cycles, far outside the searched stage windows.
    unchanged = [o for o in ex.outcomes if o.families[0] not in binding]
    assert all((o.schedule.ii, o.schedule.length) == (4, 5) for o in unchanged)


def test_explanation_in_words(regs_explained):
    text = "\n".join(regs_explained.lines())
    assert "II = 4 cycles" in text
    assert "binds: II 4 -> 2 cycles (L 5 -> 5) if registers per thread were 255 (not 128)" in text
    assert "binds: II 4 -> 2 cycles (L 5 -> 5) if live registers per warp group were not limited" in text
    assert ("does not bind: II and L unchanged if hand-offs between warp groups cost 0 cycles and no "
            "SMEM-port time") in text


def test_explain_names_the_smallest_responsible_set_when_there_is_no_schedule():
    # Each of two values is too big for its resource: 300 registers per thread, 300,000 bytes of SMEM.
    # Relaxing either family alone still fails the other check; relaxing both gives a schedule.
    g = Graph("two_problems")
    g.add_op("A", "alu", busy={"alu": 1}, regs=300)
    g.add_op("B", "exp", busy={"mufu": 1}, smem=300_000)
    ex = explain(g, "h100", families=["registers", "smem", "blocking"])
    assert ex.baseline is None and "registers" in ex.baseline_error
    assert ex.responsible == (("registers", "smem"),)
    singles = [o for o in ex.outcomes if len(o.families) == 1]
    assert all(o.schedule is None for o in singles)
    text = "\n".join(ex.lines())
    assert "responsible (smallest sets found): registers and smem" in text


def test_explain_single_family_responsible():
    g = Graph("too_big")
    g.add_op("A", "alu", busy={"alu": 1}, regs=300)
    ex = explain(g, "h100", families=["registers", "smem"])
    assert ex.responsible == (("registers",),)


def test_explain_rejects_unknown_what_if():
    with pytest.raises(TwillError, match="unknown what-if"):
        explain(regs_bind(), "h100", families=["luck"])


def test_cli_explain(tmp_path, capsys):
    path = tmp_path / "regs_bind.json"
    path.write_text(json.dumps(regs_bind().to_dict()))
    code = main(["explain", str(path), "--machine", "h100", "--register-limit", "128", "--no-cross-group",
                 "--families", "register_limit,handoff"])
    assert code == 0
    out = capsys.readouterr().out
    assert "binds: II 4 -> 2 cycles" in out and "does not bind" in out


def test_a_bound_that_includes_forced_hand_offs_is_said_to() -> None:
    """A recurrence through a variable-latency op crosses warp groups twice, so its RecMII includes two
    hand-offs; explain must not say that no family holds the II up when leaving hand-offs out lowers it."""
    g = twill.Graph("vl")
    g.add_op("idx", "alu", busy={"alu": 5}, regs=1)
    g.add_op("ld", "load", busy={"lsu": 10}, latency=10, variable_latency=True, regs=8)
    g.add_op("use", "alu", busy={"alu": 10}, regs=8)
    g.add_edge("idx", "ld")
    g.add_edge("ld", "use")
    g.add_edge("use", "idx", distance=1)
    lines = twill.explain(g, "h100", time_limit=60).lines()
    assert "the bound itself includes a cost a family below prices" in lines[1]
    assert any(line.startswith("binds: II 331 -> 25 cycles") and "hand-offs" in line for line in lines)


def test_explain_names_nothing_when_the_baseline_was_stopped_undecided(monkeypatch):
    """A baseline that found no schedule because the time limit stopped it (an II left undecided) does
    not prove that none exists: no family is named responsible and no pair is tried; a baseline whose
    every II was refuted does name the families."""
    import sys

    from twill.errors import InfeasibleError
    from twill.schedule import Attempt, Certificate

    ex = sys.modules["twill.analysis.explain"]  # the module, not the function twill.explain
    real = ex.schedule
    calls: list[frozenset] = []

    def stopped(graph, mach, **options):
        calls.append(frozenset(options.get("relax", ())))
        if options.get("relax"):
            return real(graph, mach, **{**options, "time_limit": None})
        cert = Certificate(2, 2, 1, False, (Attempt(2, 1, "joint", "unsat", 0.1), Attempt(3, 2, "joint",
                                                                                           "timeout", 5.0)))
        raise InfeasibleError("time limit reached before any schedule was found", certificate=cert)

    monkeypatch.setattr(ex, "schedule", stopped)
    from twill.ir.paper import figure1_graph

    g = figure1_graph()
    result = explain(g, "h100", families=["registers", "smem"])
    assert result.baseline is None and result.undecided and result.responsible == ()
    assert len(calls) == 3  # the baseline and the two what-ifs; no pairs
    assert "none ruled out either" in result.lines()[0]

    def refuted(graph, mach, **options):
        if options.get("relax"):
            return real(graph, mach, **{**options, "time_limit": None})
        cert = Certificate(2, 2, 1, False, (Attempt(2, 1, "joint", "unsat", 0.1),))
        raise InfeasibleError("no schedule for II in [2, 2]", certificate=cert)

    monkeypatch.setattr(ex, "schedule", refuted)
    result = explain(g, "h100", families=["registers", "smem"])
    assert not result.undecided and ("registers",) in result.responsible
