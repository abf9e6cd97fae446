"""The H200 machine file agrees with the committed microbenchmark results (no GPU needed)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from twill.ir.machine import load_machine

CALIBRATE = Path(__file__).resolve().parents[1] / "benchmarks" / "calibrate"
RESULTS = CALIBRATE / "results"


def _derive() -> dict[str, dict[str, Any]]:
    spec = importlib.util.spec_from_file_location("twill_derive_constants", CALIBRATE / "derive_constants.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    raw = json.loads((RESULTS / "microbench.json").read_text(encoding="utf-8"))
    serial = json.loads((RESULTS / "wgmma_serial.json").read_text(encoding="utf-8"))
    return module.derive(raw, serial)


@pytest.fixture(scope="module")
def derived() -> dict[str, dict[str, Any]]:
    return _derive()


def test_every_microbenchmark_ran(derived):
    raw = json.loads((RESULTS / "microbench.json").read_text(encoding="utf-8"))
    for test in ("wgmma", "mufu", "tma", "sync", "diverge"):
        assert raw["tests"][test]["exit"] == 0 and raw["tests"][test]["result"]["cases"], test
    assert "H200" in raw["env"]["nvidia_smi"]["value"]


def test_h200_constants_are_the_derived_measurements(derived):
    h200 = load_machine("h200")
    assert len(derived) == 12
    for key, item in derived.items():
        constant = h200.constants[key]
        assert constant.value == item["value"], key
        assert not constant.estimate, key
        assert "microbench.json" in constant.source or "wgmma_serial.json" in constant.source, key


def test_measurements_are_plausible(derived):
    # Sanity bounds from the datasheet and the Hopper tuning guide (a broken run would fall outside).
    assert abs(derived["cost.tc_flops_fp16"]["measured"] - 4096) < 41  # 1 % of 4 TCs x 512 FMA
    assert abs(derived["cost.mufu_per_cycle"]["measured"] - 16) < 0.5
    assert 0 < derived["cost.tc_latency"]["measured"] < 512
    assert 500 < derived["cost.tma_latency"]["measured"] < 3000
    assert 10 < derived["cost.tma_bytes_per_cycle"]["measured"] < 128
    assert 10 < derived["handoff.named_barrier"]["measured"] < derived["handoff.mbarrier"]["measured"] < 200
    assert 8 < derived["handoff.register_per_kb"]["measured"] < 32  # 2 x 1 KB at 128 B/cycle = 16
    assert 1.0 < derived["chip.clock_ghz"]["value"] <= 1.98
    # A serialized wgmma exposes a latency of the order of the pipelined tile's (tc_latency), not zero.
    assert 0.25 * derived["cost.tc_latency"]["measured"] < derived["cost.tc_serial_latency"]["measured"] \
        < 2 * derived["cost.tc_latency"]["measured"]


def test_tma_latency_distributions():
    raw = json.loads((RESULTS / "microbench.json").read_text(encoding="utf-8"))
    cases = {c["name"]: c for c in raw["tests"]["tma"]["result"]["cases"]}
    for size in ("16KB", "32KB"):
        for where in ("idle_hbm", "idle_l2"):
            c = cases[f"{size}_{where}"]
            assert c["min"] <= c["median"] <= c["p99"] <= c["max"]
            assert len(c["latency_sample"]) > 1000
    # Loading from L2 is faster and steadier than from HBM; every SM loading at once slows HBM loads.
    assert cases["16KB_idle_l2"]["p99"] < cases["16KB_idle_hbm"]["median"]
    assert cases["32KB_all_sms_hbm"]["median"] > cases["32KB_idle_hbm"]["median"]


def test_fa_config_table():
    data = json.loads((RESULTS / "fa_configs.json").read_text(encoding="utf-8"))
    configs = data["configs"]
    assert {(c["BLOCK_N"], c["num_stages"], c["num_warps"]) for c in configs} == {
        (bn, s, w) for bn in (64, 128) for s in (2, 3) for w in (4, 8)}
    for c in configs:
        assert "error" not in c and c["all_written"] and c["rel_err"] < 1e-2, c
        assert 0 < c["median_ms"] < 10 and c["tflops"] > 100
    first = configs[0]
    assert (first["batch"], first["heads"], first["seq"], first["head_dim"]) == (4, 32, 4096, 128)
