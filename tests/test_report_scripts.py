"""The issue-3 report scripts on their fast cases: Triton's decisions read from its own TTGIR, priced in
twill's model (benchmarks/triton_comparison.py), and the knobs of the sensitivity study
(benchmarks/sensitivity.py). The FA cases run for minutes and live in the committed reports."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

import twill
from twill.ir.machine import load_machine
from twill.model.bounds import bounds
from twill.model.problem import Options, build_problem
from twill.solvers.normalize import normalize_problem

GEMM = "examples/gemm.py::matmul"
SUB = "examples/flash_attention_fwd_subtiled.py::attn_fwd_subtiled_sm90"


@pytest.mark.parametrize("machine", ["h100", "b200"])
def test_triton_gemm_decision_is_read_and_priced(bench: Callable[[str], ModuleType], machine: str) -> None:
    """Triton 3.6 software-pipelines the GEMM with num_stages = 3: both TMA loads two stages ahead of
    the MMA, one cluster order. Priced in twill's model that schedule reaches twill's own II, which for
    this loop is the modulo bound (one MMA per iteration bounds it on both machines)."""
    tc = bench("triton_comparison")
    case = tc.run_case("GEMM", machine, GEMM, log=lambda _msg: None)
    plain = case["triton"]["plain"]
    assert case["num_stages"] == 3
    assert set(plain) == {"a", "b", "acc"}
    assert plain["acc"]["stage"] - plain["a"]["stage"] == 2
    assert plain["acc"]["stage"] - plain["b"]["stage"] == 2
    graph = twill.graph_from_kernel(GEMM, machine=machine)
    mii = bounds(normalize_problem(build_problem(graph, load_machine(machine), Options()))[0]).mii
    assert case["twill"]["ii"] == mii
    for ev in case["evaluations"]:
        assert ev["schedule"] is not None, ev.get("why")
        assert ev["schedule"]["ii"] == mii
        assert ev["violations"] == []
    names = [ev["name"] for ev in case["evaluations"]]
    want = ["Triton, as compiled", "Triton autoWS"] if machine == "b200" else ["Triton, as compiled"]
    assert names == want
    if machine == "b200":  # autoWS: the loads on one partition, the MMA on another
        ws = case["triton"]["ws"]
        assert ws["a"]["partitions"] == ws["b"]["partitions"]
        assert set(ws["acc"]["partitions"]).isdisjoint(ws["a"]["partitions"])
    report = tc.render({"wall_s": 0, "platform": "test", "cases": [case]})
    assert "| `acc` | gemm |" in report


def test_sensitivity_scales_only_the_tensor_core(bench: Callable[[str], ModuleType], tmp_path: Path) -> None:
    """x1.5 on the GEMM:exp knob: every Tensor Core reservation grows by half (latency by the same
    cycles), MUFU and everything else stay; the 13 settings are the baseline and 3 knobs x 4 factors."""
    sens = bench("sensitivity")
    graph = twill.graph_from_kernel(SUB, machine="h100")
    scaled = sens.scale_gemms(graph, 1.5)
    for op in graph.ops:
        new = scaled.op(op.name)
        for old_r, new_r in zip(op.rrt, new.rrt, strict=True):
            want = round(old_r.cycles * 1.5) if old_r.unit == "tc" else old_r.cycles
            assert new_r.cycles == want, (op.name, old_r.unit)
        assert new.latency - op.latency == new.cycles - op.cycles  # 0 for every op without a GEMM
    settings = sens.variants(graph, "h100", tmp_path)
    assert len(settings) == 13
    base = load_machine("h100")
    raised = next(v for v in settings if v["knob"] == "register_limit" and v["factor"] == 1.5)
    assert raised["machine"].max_regs_per_thread == int(base.max_regs_per_thread * 1.5)
    cheap = next(v for v in settings if v["knob"] == "handoff" and v["factor"] == 0.5)
    for key in sens.HANDOFF_KEYS:
        assert cheap["machine"].const(f"handoff.{key}") == pytest.approx(base.const(f"handoff.{key}") * 0.5)
