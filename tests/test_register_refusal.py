"""A loop whose accumulators no warp-group assignment can hold is refused before any II is tried (the
register floor of twill.search.reasons, a proof at every II), with the sum recomputed here from the
ops' registers and the machine's limits; one just inside the register file is searched as before."""

from __future__ import annotations

import math

import pytest

import twill
from twill.ir.machine import load_machine
from twill.verify import violations


def _loop(n_acc: int, regs: int) -> twill.Graph:
    """A TMA load feeding ``n_acc`` GEMMs that each accumulate ``regs`` registers per thread in place."""
    g = twill.Graph(f"acc{n_acc}x{regs}")
    g.add_op("load", "tma_load", busy={"tma": 4}, latency=8, issue_cycles=1, smem=4096,
             variable_latency=True, warps=1)
    for i in range(n_acc):
        g.add_op(f"mma{i}", "gemm", busy={"tc": 4}, latency=6, issue_cycles=1, regs=regs, warps=4)
        g.add_edge("load", f"mma{i}", carrier="smem", blocking=True)
        g.add_edge(f"mma{i}", f"mma{i}", distance=1, latency=6, inplace=True)
    return g


def _floor(n_acc: int, regs: int) -> int:
    m = load_machine("h100")
    over, cap = m.group_overhead_regs, min(m.max_regs_per_thread, m.setmaxnreg_max)
    groups = math.ceil(n_acc * regs / (cap - over))
    load_group = 128 * (-(-over // m.setmaxnreg_step) * m.setmaxnreg_step)
    return load_group + 128 * (groups * over + n_acc * regs)


def test_accumulators_no_assignment_holds_are_refused_before_any_ii() -> None:
    n_acc, regs = 5, 128
    total = _floor(n_acc, regs)
    assert total > load_machine("h100").register_file  # the arithmetic the refusal rests on
    with pytest.raises(twill.InfeasibleError) as info:
        twill.schedule(_loop(n_acc, regs), "h100", time_limit=30)
    text = str(info.value)
    assert "no schedule at any II" in text
    assert f"= {total} registers > register file 65536" in text
    assert info.value.certificate.attempts == ()  # no II was tried


def test_accumulators_that_fit_are_still_searched() -> None:
    n_acc, regs = 3, 128
    assert _floor(n_acc, regs) <= load_machine("h100").register_file
    s = twill.schedule(_loop(n_acc, regs), "h100", time_limit=60)
    assert s.certificate.attempts
    assert not violations(s)
