"""Reasons with arithmetic, an answer in any time and the SMEM table (issue 22): the numbers in the
messages are recomputed here from the graph's op registers and the machine's limits."""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import pytest

import twill
from twill.ir.machine import load_machine
from twill.render.show import to_text
from twill.verify import violations

ROOT = Path(__file__).resolve().parents[1]


def test_the_fa_backward_refusal_gives_the_register_sums() -> None:
    g = twill.graph_from_kernel(str(ROOT / "examples" / "flash_attention_bwd.py"), machine="h100")
    m = load_machine("h100")
    with pytest.raises(twill.InfeasibleError) as info:
        twill.schedule(g, m)
    text = str(info.value)
    over, cap = m.group_overhead_regs, min(m.max_regs_per_thread, m.setmaxnreg_max)
    # Accumulators: ops with a register self-edge of distance >= 1, grouped by their warps' threads.
    accs = {d.src for d in g.edges if d.src == d.dst and d.distance >= 1 and d.carrier == "register"
            and g.op(d.src).regs > m.small_value_regs}
    threads = {op.name: 128 * max(1, -(-op.warps // 4)) for op in g.ops}
    total = 128 * (-(-over // 8) * 8)  # the load group: overhead rounded to the setmaxnreg step
    for t in sorted({threads[op.name] for op in g.ops if not op.variable_latency}):
        names = [op.name for op in g.ops if not op.variable_latency and threads[op.name] == t]
        acc = sum(g.op(n).regs for n in names if n in accs)
        other = max((g.op(n).regs for n in names if n not in accs and g.op(n).regs > m.small_value_regs),
                    default=0)
        groups = max(1, math.ceil(acc / (cap - over)))
        need = groups * over + acc + other
        assert f"= {need})" in text
        total += t * need
    assert f"= {total} registers" in text
    assert f"register file {m.register_file}" in text
    assert f"{m.register_file - total} registers left" in text
    assert any(f"{total} registers" in n for n in info.value.certificate.notes)


def test_a_schedule_notes_its_budget_sum() -> None:
    g = twill.graph_from_kernel(str(ROOT / "examples" / "flash_attention_fwd.py") + "::attn_fwd",
                                machine="h100")
    s = twill.schedule(g, "h100")
    note = next(n for n in s.certificate.notes if n.startswith("registers: setmaxnreg budgets"))
    total = sum(128 * -(-g_.warps // 4) * g_.registers for g_ in s.warp_groups)
    assert f"= {total} of register file 65536" in note
    for g_ in s.warp_groups:
        assert f"x{g_.registers} (g{g_.index} needs {g_.registers_needed})" in note


def test_a_stopped_search_returns_a_verified_heuristic_schedule() -> None:
    g = twill.graph_from_kernel(str(ROOT / "examples" / "flash_attention_fwd.py") + "::attn_fwd",
                                machine="h100")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        s = twill.schedule(g, "h100", time_limit=0.3)
    cert = s.certificate
    assert cert.heuristic and not cert.proven_optimal
    assert not violations(s)
    refuted = {a.ii for a in cert.attempts if a.status in ("unsat", "infeasible")}
    assert cert.ii_bound >= cert.lower_bound
    assert all(ii in refuted for ii in range(cert.lower_bound, cert.ii_bound))
    assert cert.ii_bound <= s.ii
    assert any(f"[{cert.ii_bound}, {s.ii}]" in n for n in cert.notes)
    back = twill.Schedule.from_json(s.to_json())
    assert back.certificate.heuristic and back.certificate.ii_bound == cert.ii_bound


def test_the_smem_total_is_the_sum_of_bytes_times_depth() -> None:
    g = twill.graph_from_kernel(str(ROOT / "examples" / "flash_attention_fwd.py") + "::attn_fwd",
                                machine="h100")
    s = twill.schedule(g, "h100")
    smem = s.to_dict()["smem"]
    p = s.problem
    # Every op with SMEM holds op.smem bytes per copy; its copies are the buffer depth of its value.
    expected = p.fixed_smem + sum(op.smem * s.buffer_depths()[op.name] for op in p.ops if op.smem)
    staged = [b for b in smem["buffers"] if b["what"].endswith("(staging)")]
    expected += sum(b["bytes"] * b["depth"] for b in staged)
    assert smem["total"] == expected
    assert smem["capacity"] == load_machine("h100").smem_per_cta
    for b in smem["buffers"]:
        assert b["total"] == b["bytes"] * b["depth"]
    text = to_text(s)
    assert f"{smem['total']} of {smem['capacity']}" in text


def test_the_sub_tiled_fa_backward_stopped_early_returns_a_verified_schedule() -> None:
    # The joint search cannot decide the MII of this loop in 20 s; it used to end in "time limit
    # reached before any schedule was found".
    entry = str(ROOT / "examples" / "flash_attention_bwd.py") + "::attn_bwd_subtiled_sm90"
    g = twill.graph_from_kernel(entry, machine="h100")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        s = twill.schedule(g, "h100", time_limit=20)
    assert not violations(s)
    cert = s.certificate
    assert cert.heuristic and not cert.proven_optimal
    assert cert.lower_bound <= cert.ii_bound <= s.ii
    assert any(n.startswith("heuristic:") and f"[{cert.ii_bound}, {s.ii}]" in n for n in cert.notes)
