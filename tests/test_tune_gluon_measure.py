"""``twill tune --backend gluon`` and ``--measure`` (issue 25 items 2 and 4), on the CPU.

The Gluon predictions are checked against arithmetic on the generated kernel's own files (the schedule it
executes, ``schedule.json``; the compiled resources, ``report.json``) and the machine file; the
measurement plumbing against an injected timer whose times are known, and Spearman's rho against the
rank formula worked by hand.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

from twill.cli.main import main as twill_main
from twill.ir.costmodel import CostModel
from twill.ir.machine import load_machine
from twill.schedule import Schedule
from twill.tune import measure as measure_mod
from twill.tune.api import tune
from twill.tune.measure import MeasureError, measure, spearman
from twill.tune.report import write_json

pytest.importorskip("triton")

ROOT = Path(__file__).resolve().parents[1]
GEMM = str(ROOT / "examples" / "gemm.py") + "::matmul"
FA = str(ROOT / "examples" / "flash_attention_fwd.py") + "::attn_fwd"


def _cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


@pytest.fixture(scope="module")
def gluon_gemm(tmp_path_factory):
    cache = str(tmp_path_factory.mktemp("tune_gluon"))
    return tune(GEMM, "h100", {"BLOCK_N": [64, 128]}, num_warps=[4], num_stages=[3], backend="gluon", jobs=1,
                cache_dir=cache, time_limit=10.0)


# ----------------------------------------------------------------------------------------- gluon
def test_gluon_configs_are_predicted_from_the_schedule_the_kernel_executes(gluon_gemm):
    machine = load_machine("h100")
    results = gluon_gemm.results
    assert len(results) == 2
    for r in results:
        assert r["fits"], r["reason"]
        d = r["details"]
        folder = Path(d["gluon_kernel"])
        sched = Schedule.from_json((folder / "schedule.json").read_text())
        report = json.loads((folder / "report.json").read_text())
        # feasibility from the compiled kernel
        assert (d["shared_bytes"], d["registers"], d["threads"]) == (
            report["shared_compiled"], report["registers_ptxas"], report["threads"])
        k = CostModel(machine).ctas_per_sm(report["threads"], report["registers_ptxas"],
                                           report["shared_compiled"])
        assert d["ctas_per_sm"] == k >= 1
        # the trip T: the schedule's II, then the kernel's costs (twill/tune/gluon_terms.py, tested there);
        # a GEMM hands no register value between groups, so no staging conflicts; the wgmma pipeline is
        # serialized exactly when ptxas says so
        terms = d["trip_terms"]
        assert terms["ii"] == pytest.approx(sched.ii_cycles, abs=0.05)
        assert terms["handoffs"] == [] and terms["conflicts"] == terms["serialized"]
        serialized = any("serialized" in n or "C7511" in n for n in report["not_kept"])
        assert terms["serialized_wgmma"] == serialized
        assert (terms["serialized"] > terms["simulated"]) == serialized
        # time: T x trips + prologue (stages - 1 trips) + drain (L - II) + a TMA round trip each side
        bn = r["constexprs"]["BLOCK_N"]
        ctas = (8192 // 128) * (8192 // bn)
        trips = 8192 // 64
        cpu = sched.problem.cycles_per_unit
        bounds = sched.bounds_cycles
        assert terms["signals"] >= terms["conflicts"] - 1e-9   # an mbarrier signal only adds time
        assert terms["arrives"] >= terms["signals"] - 1e-9     # so does a barrier before an arrive
        per_trip = max(terms["arrives"], k * bounds["res_mii"])
        tma = machine.const("cost.tma_latency")
        per_cta = trips * per_trip + (sched.stages - 1) * per_trip + (sched.length - sched.ii) * cpu + 2 * tma
        waves = math.ceil(ctas / (machine.const("chip.sms") * k))
        ms = waves * per_cta / (machine.const("chip.clock_ghz") * 1e9) * 1e3
        assert r["predicted_ms"] == pytest.approx(ms, rel=1e-9)
        assert r["predicted_tflops"] == pytest.approx(2 * 8192 ** 3 / (ms * 1e-3) / 1e12, rel=1e-9)
        assert (folder / "kernel.py").is_file() and (folder / "manifest.json").is_file()
        assert r["schedule"]["ii"] == sched.ii


_SINE = """import triton
import triton.language as tl


@triton.jit
def sine(x_ptr, out_ptr, N, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, N, BLOCK):
        x = tl.load(x_ptr + start + offs)
        acc = acc + tl.sin(x)
    tl.store(out_ptr + offs, acc)


TWILL_KERNELS = {"sine": {"signature": {"x_ptr": "*fp32", "out_ptr": "*fp32", "N": "i32"},
                          "constexprs": {"BLOCK": 128}, "num_warps": 4, "num_stages": 3, "default": True}}
TWILL_TUNE = {"sine": {"problem": {"N": 1 << 20}, "ctas": "1", "trips": "ceil(N / BLOCK)", "flops": "N"}}
"""


def test_a_config_the_gluon_backend_cannot_lower_is_reported_with_the_codegen_reason(tmp_path):
    """``math.sin`` has no Gluon lowering: the config is kept, with the generator's error as its reason."""
    kernel = tmp_path / "sine.py"
    kernel.write_text(_SINE)
    out = tune(str(kernel), "h200", {"BLOCK": [128, 256]}, num_warps=[4], num_stages=[3], backend="gluon",
               jobs=1, cache_dir=str(tmp_path / "cache"), time_limit=10.0)
    assert len(out.results) == 2
    for r in out.results:
        assert not r["fits"] and r["error"] == "codegen"
        assert "math.sin" in r["reason"] and "has no Gluon lowering" in r["reason"]


# --------------------------------------------------------------------------------------- measure
@pytest.mark.skipif(_cuda(), reason="a CUDA device is present")
def test_measure_without_a_gpu_fails_before_any_work(capsys, monkeypatch):
    def no_work(*args, **kwargs):
        raise AssertionError("tuned without a GPU")

    monkeypatch.setattr("twill.tune.api.tune", no_work)
    code = twill_main(["tune", GEMM, "--machine", "h100", "--grid", "BLOCK_N=64,128", "--measure"])
    assert code == 2
    assert "--measure needs a CUDA device; none found" in capsys.readouterr().err


def _fake(predicted: list[float | None]) -> list[dict]:
    return [{"index": i, "constexprs": {"BLOCK_N": 32 * (i + 1)}, "num_warps": 4, "num_stages": 3,
             "fits": p is not None, "reason": None if p is not None else "shared memory: too much",
             "predicted_ms": p, "predicted_tflops": None, "schedule": None, "details": {}}
            for i, p in enumerate(predicted)]


def test_measure_times_the_top_k_predicted_and_ranks_them():
    # predicted (index: ms): 0: 3.0, 1: 1.0, 2: cannot run, 3: 2.0, 4: 4.0; top 3 = indices 1, 3, 0
    results = _fake([3.0, 1.0, None, 2.0, 4.0])
    measured_by_index = {1: 10.0, 3: 30.0, 0: 20.0, 4: 5.0}
    launched = []

    def launch(r):
        launched.append(r["index"])
        return lambda: r["index"]

    m = measure(results, 3, launch=launch, timer=lambda fn: measured_by_index[fn()], timer_name="fake")
    assert launched == [1, 3, 0]
    assert {r["index"]: r["measured_ms"] for r in results} == {0: 20.0, 1: 10.0, 2: None, 3: 30.0, 4: None}
    # ranks: predicted 1, 2, 3 (indices 1, 3, 0), measured 1, 3, 2: d^2 = 0 + 1 + 1, rho = 1 - 6 * 2 / 24
    assert m.spearman == pytest.approx(0.5)
    assert [r["index"] for r in m.measured] == [1, 3, 0]
    assert m.to_dict() == {"configs": 3, "failed": 0, "spearman": pytest.approx(0.5), "timer": "fake"}


def test_a_launch_that_fails_is_reported_and_the_others_are_measured(tmp_path):
    results = _fake([1.0, 2.0, 3.0])

    def launch(r):
        if r["index"] == 1:
            raise RuntimeError("out of resources")
        return lambda: None

    m = measure(results, 3, launch=launch, timer=lambda fn: 7.0)
    assert [r["index"] for r in m.failed] == [1] and "out of resources" in results[1]["measure_error"]
    assert results[1]["measured_ms"] is None and results[0]["measured_ms"] == 7.0
    assert m.spearman is None  # two measured, both 7.0: no ranking
    write_json(tmp_path / "t.json", results, measure=m.to_dict())
    doc = json.loads((tmp_path / "t.json").read_text())
    assert [c["measured_ms"] for c in doc["configs"]] == [7.0, None, 7.0]
    assert doc["configs"][1]["measure_error"].startswith("RuntimeError")
    assert doc["measure"]["failed"] == 1


def test_spearman_matches_the_rank_formula():
    # no ties: rho = 1 - 6 sum d^2 / (n (n^2 - 1)); ranks of [4, 1, 3, 2] are 4 1 3 2, of measured 1 2 3 4
    assert spearman([4.0, 1.0, 3.0, 2.0], [1.0, 2.0, 3.0, 4.0]) == pytest.approx(1 - 6 * (9 + 1 + 0 + 4) / 60)
    assert spearman([1.0], [2.0]) is None


def test_measure_command_plumbing_with_an_injected_timer(gluon_gemm, tmp_path, capsys, monkeypatch):
    # The command with the GPU parts replaced: CUDA present, each launch returns its config's BLOCK_N,
    # the timer turns it into a time (BLOCK_N 64 measured slower than 128).
    monkeypatch.setattr(measure_mod, "require_cuda", lambda: None)
    monkeypatch.setattr(measure_mod, "make_launch", lambda r, kernel, backend, problem:
                        (lambda: r["constexprs"]["BLOCK_N"]))
    monkeypatch.setattr(measure_mod, "do_bench_median", lambda fn: {64: 3.0, 128: 2.0}[fn()])
    cache = str(Path(gluon_gemm.results[0]["details"]["gluon_kernel"]).parents[1])
    out = tmp_path / "m.json"
    code = twill_main(["tune", GEMM, "--machine", "h100", "--grid", "BLOCK_N=64,128", "--num-warps", "4",
                       "--num-stages", "3", "--backend", "gluon", "--jobs", "1", "--cache-dir", cache,
                       "--measure", "--top", "2", "--json", str(out)])
    assert code == 0
    text = capsys.readouterr().out
    assert "Spearman (predicted vs measured, 2 configs)" in text
    doc = json.loads(out.read_text())
    assert {c["constexprs"]["BLOCK_N"]: c["measured_ms"] for c in doc["configs"]} == {64: 3.0, 128: 2.0}
    predicted = {c["constexprs"]["BLOCK_N"]: c["predicted_ms"] for c in doc["configs"]}
    assert doc["measure"]["spearman"] == (1.0 if predicted[128] < predicted[64] else -1.0)


def test_measure_needs_an_inputs_entry(tmp_path):
    text = (ROOT / "examples" / "gemm.py").read_text().replace('        "inputs": "matmul_inputs",\n', "")
    (tmp_path / "g.py").write_text(text)
    with pytest.raises(MeasureError, match="no 'inputs' entry"):
        measure_mod.inputs_function(str(tmp_path / "g.py") + "::matmul")


def test_the_examples_name_their_inputs_functions():
    for kernel in (GEMM, FA):
        spec, fn = measure_mod.inputs_function(kernel)
        assert callable(fn) and fn.__module__ == spec.fn.__module__


# ------------------------------------------------------------------- bench.py (torch + Triton only)
FAKE_KERNEL = '''
CALLS = []


class FakeJit:
    """Stands for a JIT function: ``fn[grid](*args, **kw)`` records the launch."""

    def __getitem__(self, grid):
        return lambda *args, **kw: CALLS.append((grid, args, kw))


kern = FakeJit()
TWILL_KERNELS = {"entry": {"kernel": "kern", "signature": {}, "default": True}}
TWILL_TUNE = {"entry": {"problem": {"M": 8}, "ctas": "1", "trips": "1", "flops": "1", "inputs": "make"}}


def make(constexprs, problem):
    return (problem["M"] // constexprs["BLOCK"], 1), ("a", "b", problem["M"])
'''


def test_bench_launches_a_triton_config_with_its_constexprs_warps_and_stages(tmp_path):
    from twill.tune import bench

    path = tmp_path / "fake_kernel.py"
    path.write_text(FAKE_KERNEL)
    result = {"constexprs": {"BLOCK": 4}, "num_warps": 8, "num_stages": 2}
    fn = bench.launch_config(result, f"{path}::entry", "triton", {"M": 8})
    module = bench.load_file(path)
    assert module.CALLS == []  # inputs made, nothing launched yet
    fn()
    assert module.CALLS == [((2, 1), ("a", "b", 8), {"BLOCK": 4, "num_warps": 8, "num_stages": 2})]


def test_bench_launches_a_gluon_config_through_the_loader(tmp_path):
    from twill.tune import bench

    path = tmp_path / "fake_kernel2.py"
    path.write_text(FAKE_KERNEL)
    folder = tmp_path / "gluon"
    folder.mkdir()
    (folder / "kernel.py").write_text(FAKE_KERNEL.replace("kern = FakeJit()", "entry = FakeJit()"))
    (folder / "manifest.json").write_text(json.dumps({
        "kind": "twill.gluon_kernel", "kernel": "entry", "source": "kernel.py", "arg_names": ["x", "y", "M",
                                                                                              "BLOCK"],
        "constexprs": {"BLOCK": 4}, "descriptors": {}, "num_warps": 12}))
    result = {"constexprs": {"BLOCK": 4}, "num_warps": 4, "num_stages": 3,
              "details": {"gluon_kernel": str(folder)}}
    fn = bench.launch_config(result, f"{path}::entry", "gluon", {"M": 8})
    fn()
    launched = [m for name, m in sys.modules.items() if name.startswith("twill_gluon_entry_")]
    assert [m.CALLS for m in launched] == [[((2, 1), ("a", "b", 8, 4), {"num_warps": 12})]]


def test_the_measure_script_scores_and_stops_without_a_gpu(tmp_path, capsys):
    import importlib.util

    path = ROOT / "benchmarks" / "tune_measure.py"
    spec = importlib.util.spec_from_file_location("tune_measure_script", path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    doc = {"kernel": "k.py", "problem": {}, "configs": _fake([1.0, 2.0, 3.0, None])}
    for r, ms in zip(doc["configs"], (1.5, 1.0, 4.0, None), strict=True):
        r["measured_ms"] = ms
    (tmp_path / "m.json").write_text(json.dumps(doc))
    assert script.main([str(tmp_path / "m.json"), "--score"]) == 0
    # predicted ranks 1 2 3, measured 2 1 3: d^2 = 1 + 1, rho = 1 - 6 * 2 / 24
    assert "Spearman (predicted vs measured, 3 configs): 0.5" in capsys.readouterr().out
    if not _cuda():
        assert script.main([str(tmp_path / "m.json")]) == 2
        assert "--measure needs a CUDA device; none found" in capsys.readouterr().err
