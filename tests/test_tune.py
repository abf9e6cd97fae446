"""twill tune: grid, per-config predictions, infeasible configs, bad input, JSON, Ray, Ctrl-C (no GPU).

The numbers a test expects are derived here from the machine file and the kernel's tile sizes (shared
memory of Triton's allocation, CTAs per SM, waves, TFLOP/s), not read back from the code under test.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from twill.cli.main import main as _twill_main
from twill.ir.machine import load_machine
from twill.tune.api import tune
from twill.tune.grid import GridError, expand, parse_grid, parse_list
from twill.tune.report import PUBLIC_KEYS, rank, write_json
from twill.tune.runner import run_sweep


def tune_main(argv: list[str]) -> int:
    return _twill_main(["tune", *argv])


pytest.importorskip("triton")

ROOT = Path(__file__).resolve().parents[1]
FA = str(ROOT / "examples" / "flash_attention_fwd.py") + "::attn_fwd"
GEMM = str(ROOT / "examples" / "gemm.py") + "::matmul"
H200 = load_machine("h200")


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("tune_cache"))


@pytest.fixture(scope="module")
def fa_small(cache):
    # BLOCK_M 128, BLOCK_N 64/128, 8 warps, 3/4 stages: the 128 / 4-stage config cannot run.
    return tune(FA, "h200", {"BLOCK_M": [128], "BLOCK_N": [64, 128]}, num_warps=[8], num_stages=[3, 4],
                jobs=1, cache_dir=cache, time_limit=3.0)


def by_config(results, s=None, **constexprs):
    """The one result with these constexpr values (and ``num_stages`` ``s`` when given)."""
    found = [r for r in results if all(r["constexprs"].get(k) == v for k, v in constexprs.items())
             and (s is None or r["num_stages"] == s)]
    assert len(found) == 1, (constexprs, s, [(r["constexprs"], r["num_stages"]) for r in results])
    return found[0]


# ------------------------------------------------------------------------------------------- grid
def test_parse_grid_and_lists():
    assert parse_grid(["BLOCK_N=32,64", "FLAG=True"]) == {"BLOCK_N": [32, 64], "FLAG": [True]}
    assert parse_list("4, 8,4", "--num-warps") == [4, 8]
    with pytest.raises(GridError, match="no values for BLOCK_N"):
        parse_grid(["BLOCK_N="])
    with pytest.raises(GridError, match="NAME=V1"):
        parse_grid(["BLOCK_N"])
    with pytest.raises(GridError, match=r"--num-stages.*'x' is not an integer"):
        parse_list("1,x", "--num-stages")
    with pytest.raises(GridError, match="--num-warps '' is empty"):
        parse_list("", "--num-warps")


def test_expand_is_the_product_in_grid_order():
    configs = expand({"A": [1, 2], "B": [3]}, [4, 8], [2], kernel_constexprs=["A", "B", "C"],
                     defaults={"C": 7})
    assert [(c.constexprs, c.num_warps) for c in configs] == [
        ({"A": 1, "B": 3, "C": 7}, 4), ({"A": 1, "B": 3, "C": 7}, 8), ({"A": 2, "B": 3, "C": 7}, 4),
        ({"A": 2, "B": 3, "C": 7}, 8)]
    assert [c.index for c in configs] == [0, 1, 2, 3]


def test_unknown_constexpr_is_named():
    with pytest.raises(GridError, match=r"'BLOCK_Q', which is not a constexpr of attn_fwd.*BLOCK_M"):
        tune(FA, "h200", {"BLOCK_Q": [64]}, jobs=1, cache_dir=None)


def test_unknown_problem_size_is_named():
    with pytest.raises(GridError, match=r"problem size 'seq' is not one of attn_fwd's \(batch, heads, seq"):
        tune(FA, "h200", {"BLOCK_N": [64]}, problem={"seq": 1024}, jobs=1, cache_dir=None)


def test_command_bad_input_exits_2(capsys, tmp_path):
    assert tune_main([FA, "--machine", "h200", "--grid", "BLOCK_Q=64", "--no-cache"]) == 2
    assert "BLOCK_Q" in capsys.readouterr().err
    assert tune_main([FA, "--machine", "h200", "--grid", "BLOCK_N=", "--no-cache"]) == 2
    assert "no values for BLOCK_N" in capsys.readouterr().err
    assert tune_main([FA, "--machine", "h200", "--grid", "BLOCK_N=64", "--num-stages", "", "--no-cache"]) == 2


# ------------------------------------------------------------------------------------------- predictions
def test_infeasible_config_reports_the_shared_memory_numbers(fa_small):
    bad = by_config(fa_small.results, BLOCK_N=128, s=4)
    assert bad["fits"] is False and bad["predicted_ms"] is None
    # Triton's allocation: Q (128 x 128 fp16) + num_stages x (K + V) (128 x 128 fp16 each) + barriers.
    tiles = 128 * 128 * 2 + 4 * 2 * 128 * 128 * 2
    shared = bad["details"]["shared_bytes"]
    assert tiles <= shared <= tiles + 128
    limit = int(H200.const("memory.smem_per_cta"))
    assert limit == 227 * 1024
    assert bad["reason"].startswith("shared memory")
    assert f"{shared} B" in bad["reason"] and f"{limit} B" in bad["reason"]
    assert f"{shared - limit} B too many" in bad["reason"]


def test_feasible_configs_follow_the_occupancy_and_wave_arithmetic(fa_small):
    sms, clock = int(H200.const("chip.sms")), float(H200.const("chip.clock_ghz"))
    for r in fa_small.results:
        if not r["fits"]:
            continue
        d = r["details"]
        threads = 32 * r["num_warps"]
        per_warp = math.ceil(d["registers"] * 32 / 256) * 256
        by_regs = 65536 // (per_warp * r["num_warps"])
        by_smem = 233472 // (d["shared_bytes"] + 1024)
        assert d["ctas_per_sm"] == min(by_regs, by_smem, 2048 // threads, 32)
        ctas = (8192 // 128) * 4 * 32
        assert d["ctas"] == ctas and d["trips"] == 8192 // r["constexprs"]["BLOCK_N"]
        assert d["waves"] == math.ceil(ctas / (sms * d["ctas_per_sm"]))
        # the last wave's CTAs spread over the SMs, at the occupancy they have
        left = ctas - (d["waves"] - 1) * sms * d["ctas_per_sm"]
        assert d["tail_ctas_per_sm"] == min(d["ctas_per_sm"], math.ceil(left / sms))
        edge = 2 * float(H200.const("cost.tma_latency"))
        last = edge + d["trips"] * d["tail_cycles_per_trip"]
        assert r["predicted_ms"] == pytest.approx(((d["waves"] - 1) * d["per_cta_cycles"] + last)
                                                  / (clock * 1e6), rel=1e-5)
        flops = 4 * 4 * 32 * 8192 * 8192 * 128
        assert r["predicted_tflops"] == pytest.approx(flops / (r["predicted_ms"] * 1e-3) / 1e12, rel=1e-6)
        # the trip is at least the issue slots of its SASS: instructions x warps / 4 schedulers
        terms = d["terms"]
        assert terms["instructions_source"] == "sass"
        assert terms["issue"] == pytest.approx(d["loop_sass_instructions"] * r["num_warps"] / 4)
        assert d["cycles_per_trip"] >= d["ctas_per_sm"] * terms["issue"] - 0.1


def test_wgmma_operand_reads_are_priced(fa_small):
    r = by_config(fa_small.results, BLOCK_N=64, s=3)
    gemms = {g["name"]: g for g in r["details"]["terms"]["gemms"]}
    # Q K^T: A (Q, 128 x 128) from SMEM once, B (K, 64 x 128) once per 64-row slice (2 slices), fp16.
    assert gemms["qk"]["smem_bytes"] == 128 * 128 * 2 + 2 * 64 * 128 * 2
    # P V: A (P) in registers, B (V, 64 x 128) once per slice.
    assert gemms["out"]["smem_bytes"] == 2 * 64 * 128 * 2


def test_gemm_config_and_a_value_triton_rejects(cache):
    out = tune(GEMM, "h200", {"BLOCK_M": [128], "BLOCK_N": [128, 96], "BLOCK_K": [64]}, num_warps=[4],
               num_stages=[3], jobs=1, cache_dir=cache, time_limit=3.0)
    good = by_config(out.results, BLOCK_N=128)
    rejected = by_config(out.results, BLOCK_N=96)
    assert good["fits"] and good["predicted_ms"] > 0
    assert good["predicted_tflops"] == pytest.approx(2 * 8192**3 / (good["predicted_ms"] * 1e-3) / 1e12)
    assert good["details"]["ctas"] == (8192 // 128) ** 2 and good["details"]["trips"] == 8192 // 64
    assert rejected["fits"] is False and rejected["error"] == "compile"
    assert rejected["reason"].startswith("Triton rejects this config") and "power of 2" in rejected["reason"]


def test_json_schema(fa_small, tmp_path):
    path = tmp_path / "tune.json"
    write_json(path, fa_small.results, **fa_small.meta)
    doc = json.loads(path.read_text())
    assert len(doc["configs"]) == 4 and doc["cut"] == 0 and doc["interrupted"] is False
    for c in doc["configs"]:
        assert list(c)[:len(PUBLIC_KEYS)] == list(PUBLIC_KEYS)
        assert isinstance(c["constexprs"], dict) and isinstance(c["num_warps"], int)
        assert isinstance(c["num_stages"], int) and isinstance(c["fits"], bool)
        if c["fits"]:
            assert c["reason"] is None and c["predicted_ms"] > 0 and c["predicted_tflops"] > 0
            assert c["schedule"] is None or {"ii", "ii_cycles", "proven_optimal"} <= set(c["schedule"])
        else:
            assert isinstance(c["reason"], str) and c["predicted_ms"] is None and c["schedule"] is None
    times = [c["predicted_ms"] for c in doc["configs"] if c["fits"]]
    assert times == sorted(times) and not doc["configs"][-1]["fits"]  # ranked, the infeasible last


def test_command_writes_table_json_and_plot(cache, tmp_path, capsys):
    out, plot = tmp_path / "t.json", tmp_path / "t.png"
    code = tune_main([FA, "--machine", "h200", "--grid", "BLOCK_N=64,128", "--num-warps", "8",
                      "--num-stages", "3,4", "--jobs", "1", "--cache-dir", cache, "--json", str(out),
                      "--plot", str(plot), "--time-limit", "3"])
    assert code == 0
    text = capsys.readouterr().out
    assert "cannot run BLOCK_N=128 w8 s4: shared memory" in text
    assert len(json.loads(out.read_text())["configs"]) == 4 and plot.stat().st_size > 1000


# ------------------------------------------------------------------------------------------- engines
def fake_worker(task):
    """Stands in for tune_config: raises KeyboardInterrupt on the config of index 2 (Ctrl-C there)."""
    if task.index == 2:
        raise KeyboardInterrupt
    return {"index": task.index, "constexprs": task.constexprs, "num_warps": task.num_warps,
            "num_stages": task.num_stages, "fits": True, "reason": None, "predicted_ms": 1.0 + task.index,
            "predicted_tflops": 1.0, "schedule": None, "details": {}, "error": None}


@pytest.mark.parametrize("jobs", [1, 2])
def test_ctrl_c_keeps_the_finished_configs(jobs):
    out = tune(FA, "h200", {"BLOCK_N": [32, 64, 128]}, num_warps=[4, 8], num_stages=[2], jobs=jobs,
               cache_dir=None, worker=fake_worker)
    assert out.sweep.interrupted and out.meta["interrupted"]
    done = sorted(r["index"] for r in out.results)
    assert 2 not in done and set(done) <= {0, 1, 3, 4, 5}
    if jobs == 1:
        assert done == [0, 1]  # in order: the interrupt stops the sweep at config 2
    assert out.sweep.cut == 6 - len(done) == out.meta["cut"]


def test_ctrl_c_in_the_command_writes_what_finished(tmp_path, monkeypatch, capsys):
    import twill.tune.api as api

    monkeypatch.setattr(api, "tune_config", fake_worker)
    out = tmp_path / "cut.json"
    code = tune_main([FA, "--machine", "h200", "--grid", "BLOCK_N=32,64,128", "--num-stages", "2",
                      "--jobs", "1", "--no-cache", "--json", str(out)])
    assert code == 130
    doc = json.loads(out.read_text())
    assert doc["interrupted"] and doc["cut"] == 1 and len(doc["configs"]) == 2
    assert "2 of 3 configs finished; 1 cut" in capsys.readouterr().err


def test_worker_bug_is_reported_on_its_config():
    def broken(task):
        raise RuntimeError("boom")

    out = run_sweep([type("T", (), {"index": 0, "constexprs": {}, "num_warps": 4, "num_stages": 2})()],
                    broken, jobs=1)
    assert out.results[0]["error"] == "internal" and "boom" in out.results[0]["reason"]


@pytest.mark.slow  # starting a local Ray instance takes 15-30 s on two shared cores
def test_ray_local(cache):
    pytest.importorskip("ray")
    out = tune(FA, "h200", {"BLOCK_M": [128], "BLOCK_N": [64, 128]}, num_warps=[8], num_stages=[3, 4],
               ray="local", cache_dir=cache, time_limit=3.0)
    assert out.sweep.engine == "ray (local)" and not out.sweep.interrupted
    assert len(out.results) == 4
    fits = {(r["constexprs"]["BLOCK_N"], r["num_stages"]): r["fits"] for r in out.results}
    assert fits == {(64, 3): True, (64, 4): True, (128, 3): True, (128, 4): False}
    assert [r["fits"] for r in rank(out.results)] == [True, True, True, False]


# ------------------------------------------------------------------------------------------- predict()
def test_rank_study_predict_says_why_instead_of_crashing():
    import importlib.util

    path = ROOT / "benchmarks" / "calibrate" / "rank_correlation.py"
    spec = importlib.util.spec_from_file_location("twill_rank_correlation_tune", path)
    rc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rc)
    ctas = 8192 // 128 * 4 * 32
    # num_stages = 1: Triton does not pipeline, the TTGIR has no loop.stage; every op is in stage 0.
    one = rc.predict(128, 1, 8, ctas=ctas)
    assert one["fits"] and one["triton_pipelined"] is False and one["triton_stages"] == [0]
    assert one["cycles_per_iteration"] > 0 and one["with_terms"]["instructions_source"] == "sass"
    # 4 stages of 128 x 128 K and V tiles: Q + 4 (K + V) = 32768 + 4 * 65536 bytes > 227 KB.
    big = rc.predict(128, 4, 8, ctas=ctas)
    assert big["fits"] is False and big["ctas_per_sm"] == 0
    assert big["smem_bytes"] == 128 * 128 * 2 + 4 * 2 * 128 * 128 * 2
    assert f"{big['smem_bytes']} B" in big["reason"] and "232448 B" in big["reason"]


# ------------------------------------------------------------------------------------------- cost terms
def test_cost_terms_arithmetic():
    from twill.calibrate.regs import parse_sass_loop
    from twill.ir.costmodel import CostModel

    cm = CostModel(H200)
    # 4 schedulers x 1 instruction per cycle: 300 instructions x 8 warps x 2 CTAs / 4
    assert cm.issue_cycles(300, 8, ctas=2) == 1200
    # m64 tile at 8 warps: 2 warp groups split N, each reads its own copy of A (64 x 128 fp16)
    assert cm.wgmma_smem_bytes(64, 64, 128, a_in_smem=True, warps=8) == 2 * 64 * 128 * 2 + 128 * 64 * 2
    assert cm.wgmma_smem_bytes(64, 64, 128, a_in_smem=True, warps=4) == 64 * 128 * 2 + 128 * 64 * 2
    assert cm.wgmma_smem_bytes(128, 128, 64, a_in_smem=False, warps=8) == 2 * 64 * 128 * 2
    rate = float(H200.const("cost.wgmma_smem_bytes_per_cycle"))
    assert cm.wgmma_smem_cycles(128, 32, 128, a_in_smem=True) == (128 * 128 * 2 + 2 * 128 * 32 * 2) / rate
    assert cm.iteration_fixed_cycles(4) == 4 * float(H200.const("cost.barrier_wait"))
    with pytest.raises(ValueError):
        cm.issue_cycles(10, 0)
    # the main loop is 0x20-0x40 (3 instructions); the retry stub after EXIT branches back to 0x0
    sass = "\n".join(f"        /*{a:04x}*/  {op} ;" for a, op in (
        (0x0, "MOV R1, R2"), (0x10, "SYNCS.PHASECHK P0"), (0x20, "FMUL R3, R1, R1"), (0x30, "HGMMA"),
        (0x40, "@P1 BRA 0x20"), (0x50, "EXIT"), (0x60, "@!P0 BRA 0x60"), (0x70, "BRA 0x10")))
    assert parse_sass_loop(sass) == 3


def test_blackwell_config_runs_through(cache):
    # sm_100: tcgen05 MMAs (no tensor result, accumulator in TMEM), ptxas-blackwell; no Hopper-only path.
    out = tune(FA, "b200", {"BLOCK_N": [64]}, num_warps=[4], num_stages=[2], jobs=1, cache_dir=cache,
               time_limit=3.0)
    (r,) = out.results
    assert r["error"] is None and r["fits"] and r["predicted_ms"] > 0
    assert {g["name"] for g in r["details"]["terms"]["gemms"]} and r["details"]["shared_bytes"] > 0


def test_a_grid_value_the_launch_arithmetic_cannot_use_is_refused_before_any_work() -> None:
    """``BLOCK_N=abc`` is a legal constexpr value for Triton but not a number for ``ceil(N / BLOCK_N)``: a
    GridError naming it, before any config is compiled (it was an 'internal error' row per config)."""
    with pytest.raises(GridError, match=r"uses BLOCK_N='abc', which is not a number"):
        tune(GEMM, "h100", {"BLOCK_N": ["abc"]}, jobs=1)


@pytest.mark.parametrize("target", ["folder", "missing"])
def test_an_unwritable_json_path_is_refused_before_any_work(tmp_path, capsys, monkeypatch, target) -> None:
    def no_work(*args, **kwargs):
        raise AssertionError("tuned although the output cannot be written")

    monkeypatch.setattr("twill.tune.api.tune", no_work)
    out = tmp_path if target == "folder" else tmp_path / "gone" / "x.json"
    code = _twill_main(["tune", GEMM, "--machine", "h100", "--grid", "BLOCK_N=64", "--json", str(out)])
    assert code == 2
    err = capsys.readouterr().err
    assert "nothing was tuned" in err or "does not exist" in err


def test_a_solved_config_comes_back_from_the_solve_cache_unchanged(tmp_path):
    grid = {"BLOCK_M": [128], "BLOCK_N": [128], "BLOCK_K": [64]}
    first = tune(GEMM, "h200", grid, num_warps=[4], num_stages=[3], jobs=1, cache_dir=str(tmp_path),
                 time_limit=3.0)
    second = tune(GEMM, "h200", grid, num_warps=[4], num_stages=[3], jobs=1, cache_dir=str(tmp_path),
                  time_limit=3.0)
    (a,), (b,) = first.results, second.results
    assert a["schedule"] is not None and not a["details"]["solve_cached"]
    assert b["details"]["solve_cached"] and b["details"]["compile_cached"]
    assert b["schedule"] == a["schedule"] and b["predicted_ms"] == a["predicted_ms"]
    assert len(list(tmp_path.glob("solve-*.json"))) == 1
    # another time limit is another solve
    third = tune(GEMM, "h200", grid, num_warps=[4], num_stages=[3], jobs=1, cache_dir=str(tmp_path),
                 time_limit=2.5)
    assert not third.results[0]["details"]["solve_cached"]
    phases = b["details"]["cpu_seconds"]
    assert set(phases) == {"compile", "tools", "model", "solve"} and min(phases.values()) >= 0
