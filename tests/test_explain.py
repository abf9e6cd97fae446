"""Relaxed constraint families (``Options.relax``) and ``twill explain``.

The register example is small enough to solve by hand. ``X`` (ALU, 1 cycle, latency 4) produces a
64-register value that ``Y`` (MUFU, 1 cycle) reads; with ``cross_group=False`` both sit on one warp group,
so the value lives at least 4 cycles and ``ceil(4 / II)`` copies of it are live at once, beside the
H100's 26-register group overhead:

* register limit 128: ``26 + 64 k <= 128`` allows one copy, so ``II = 4``;
* limit 255 (the machine's): ``26 + 64 k <= 255`` allows three, ``ceil(4 / II) <= 3`` gives ``II = 2``;
* no register constraint at all: the units bound it, ``ResMII = 1``.

Nothing else binds: the register file (one warp group of 128 threads x 128) is far from full, and
with one group there is no hand-off or blocking wait. ``L = 5`` (X at 0, Y at 4) in every case.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

import twill
from twill.errors import ResourceError
from twill.graph import Graph
from twill.problem import RELAXABLE, Options
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
    ({"register_limit": 128, "relax": {"registers"}}, 1),
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


def test_relaxable_names_are_documented():
    assert set(RELAXABLE) == {"registers", "register_file", "smem", "tmem", "handoff", "blocking", "groups"}
    assert all(RELAXABLE.values())
