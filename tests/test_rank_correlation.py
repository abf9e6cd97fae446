"""The model ranks the measured Triton FA forward configurations on the H200 (no GPU needed).

``benchmarks/calibrate/results/rank_correlation.json`` holds the model's predictions for the eight
configurations of ``fa_configs.json`` and the measured times; these tests recompute the measured cycles
and the rank correlations from the committed data, check the stated values (``docs/calibration.md`` §5),
check the model's occupancy and spill predictions against what the driver and ptxas said, and (slow)
recompute every prediction on the CPU.
"""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path
from typing import Any

import pytest

from twill.ir.machine import load_machine

CALIBRATE = Path(__file__).resolve().parents[1] / "benchmarks" / "calibrate"
RESULTS = CALIBRATE / "results"


def _script() -> Any:
    spec = importlib.util.spec_from_file_location("twill_rank_correlation", CALIBRATE / "rank_correlation.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def rc() -> Any:
    return _script()


@pytest.fixture(scope="module")
def committed() -> dict[str, Any]:
    return json.loads((RESULTS / "rank_correlation.json").read_text(encoding="utf-8"))


def test_rank_statistics_on_hand_computed_cases(rc):
    # No ties: one swapped pair of four. Spearman 1 - 6 * sum(d^2) / (n (n^2 - 1)) = 1 - 12/60 = 0.8;
    # Kendall (5 concordant - 1 discordant) / 6 pairs.
    assert rc.spearman([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(0.8)
    assert rc.kendall_tau_b([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(4 / 6)
    # Ties in x: ranks (1.5, 1.5, 3); tau-b = 2 / sqrt((3 - 1) * 3).
    assert rc.ranks([5, 5, 7]) == [1.5, 1.5, 3.0]
    assert rc.kendall_tau_b([1, 1, 2], [1, 2, 3]) == pytest.approx(2 / math.sqrt(6))
    assert rc.spearman([1, 1, 2], [1, 2, 3]) == pytest.approx(math.sqrt(3) / 2)
    assert rc.spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    # Exact permutation p-value: a perfect order of 4 is 1 of 24 orderings.
    assert rc.permutation_p([1, 2, 3, 4], [1, 2, 3, 4], rc.spearman) == pytest.approx(1 / 24)


def test_measured_cycles_come_from_the_timings(rc, committed):
    h200 = load_machine("h200")
    clock, sms = float(h200.const("chip.clock_ghz")), int(h200.const("chip.sms"))
    configs = json.loads((RESULTS / "fa_configs.json").read_text(encoding="utf-8"))["configs"]
    by_key = {(c["BLOCK_N"], c["num_stages"], c["num_warps"]): c for c in configs}
    assert len(committed["rows"]) == len(configs) == 8
    for row in committed["rows"]:
        rec = by_key[(row["BLOCK_N"], row["num_stages"], row["num_warps"])]
        ctas = 4096 // 128 * 4 * 32
        iterations = 4096 // rec["BLOCK_N"]
        cycles = rec["median_ms"] * 1e-3 * clock * 1e9 * sms / (ctas * iterations)
        assert row["measured"] == rc.measured(rec, clock, sms)
        assert row["measured"]["cycles_per_iteration"] == pytest.approx(cycles, abs=0.06)


def test_committed_correlation_is_recomputed_from_the_rows(rc, committed):
    rows = committed["rows"]
    assert rc.correlation_table(rows) == committed["correlation"]
    meas = [rc.kernel_cycles(r, "measured") for r in rows]
    model = [rc.kernel_cycles(r, "model") for r in rows]
    assert rc.ranks(meas) == [r["rank"]["measured"] for r in rows]
    assert rc.ranks(model) == [r["rank"]["model"] for r in rows]


def test_stated_correlation(committed):
    # docs/calibration.md §5: rho = 0.98, tau-b = 0.94 (p = 0.0002 each) with the occupancy and
    # serialized-wgmma model; the model before the study ranked them worse than chance.
    model, before = committed["correlation"]["model"], committed["correlation"]["before"]
    assert 0.97 <= model["spearman"] <= 0.99
    assert 0.93 <= model["kendall_tau_b"] <= 0.95
    assert model["spearman_p"] < 0.001 and model["kendall_p"] < 0.001
    assert before["spearman"] < 0 and before["kendall_tau_b"] < 0
    assert model["mean_abs_rel_error"] < 0.10 < before["mean_abs_rel_error"]
    assert model["max_abs_rel_error"] < 0.20


def test_fastest_and_slowest_are_predicted(committed):
    rows = committed["rows"]
    fastest = min(rows, key=lambda r: r["rank"]["model"])
    assert fastest["rank"]["measured"] == 1  # BLOCK_N 64, 2 stages, 4 warps: two CTAs per SM
    slowest = {(r["BLOCK_N"], r["num_stages"], r["num_warps"]) for r in rows if r["rank"]["model"] == 7.5}
    assert slowest == {(r["BLOCK_N"], r["num_stages"], r["num_warps"]) for r in rows
                       if r["rank"]["measured"] >= 7}


def test_occupancy_and_spills_match_the_driver_and_ptxas(committed):
    occupancy = json.loads((RESULTS / "fa_occupancy.json").read_text(encoding="utf-8"))["configs"]
    driver = {(c["BLOCK_N"], c["num_stages"], c["num_warps"]): c["ctas_per_sm"] for c in occupancy}
    for row in committed["rows"]:
        key = (row["BLOCK_N"], row["num_stages"], row["num_warps"])
        assert row["predicted"]["ctas_per_sm"] == driver[key], key
        assert row["predicted"]["spills"] == (row["ptxas"]["spilled_registers"] > 0), key
        # registers within the fitted tolerance of ptxas (docs/calibration.md §3: -5..0 for FA forward)
        assert -8 <= min(row["predicted"]["register_demand"], 255) - row["ptxas"]["registers"] <= 0, key
        # shared memory: Q + num_stages x (K + V), Triton's allocation minus its barriers (< 128 bytes)
        assert 0 <= row["ptxas"]["shared_bytes"] - row["predicted"]["smem_bytes"] < 128, key


@pytest.mark.slow
def test_predictions_recompute_on_the_cpu(rc, committed):
    pytest.importorskip("triton")
    fresh = rc.study()
    assert fresh["rows"] == committed["rows"]
    assert fresh["correlation"] == committed["correlation"]
