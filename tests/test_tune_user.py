"""twill tune on kernels and grids a user brings (tests/data/tune_user_kernels.py), no GPU.

What each test expects is derived here: Triton's own words for a value it rejects, the arithmetic of the
launch expressions, the Tensor Core peak from the machine file (SMs x FLOP/cycle x clock), the GEMM
FLOPs from the tile sizes; a real SIGINT is sent to a real ``twill tune`` process.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from twill.cli.main import main as twill_main
from twill.errors import FrontendError, TwillError
from twill.ir.machine import load_machine
from twill.tune.api import tune
from twill.tune.grid import GridError, evaluate_count, repeated
from twill.tune.peak import tc_peak_tflops
from twill.tune.report import rank, render_table, short_reason
from twill.tune.runner import run_sweep

pytest.importorskip("triton")

ROOT = Path(__file__).resolve().parents[1]
USER = ROOT / "tests" / "data" / "tune_user_kernels.py"
GEMM = f"{USER}::gemm_bias"
H200 = load_machine("h200")


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("tune_user_cache"))


def _fake(task):
    """A worker that predicts ``1 + index`` ms without compiling (module level: a pool can import it)."""
    return {"index": task.index, "constexprs": task.constexprs, "num_warps": task.num_warps,
            "num_stages": task.num_stages, "fits": True, "reason": None, "predicted_ms": 1.0 + task.index,
            "predicted_tflops": 1.0, "schedule": None, "details": {}, "error": None}


# ------------------------------------------------------------------------------- Triton's refusals
def test_a_value_triton_rejects_is_named_with_tritons_reason_not_the_source_listing(cache):
    """BLOCK_N=48 fails in ``tl.arange`` and 65536 in ``tl.zeros``: the reason of each starts with
    Triton's message (a CompilationError's own text is the source listing, its cause says why), the table
    cell says it too, and the 64-wide config is still tuned."""
    out = tune(GEMM, "h200", {"BLOCK_N": [48, 65536, 64]}, jobs=1, cache_dir=cache, time_limit=1.0)
    by_n = {r["constexprs"]["BLOCK_N"]: r for r in out.results}
    assert by_n[64]["fits"] and by_n[64]["predicted_ms"] > 0
    for n, words in ((48, "arange's range must be a power of 2"),
                     (65536, f"numel ({128 * 65536}) exceeds triton maximum tensor numel")):
        r = by_n[n]
        assert r["error"] == "compile" and not r["fits"]
        head = r["reason"].split(";")[0]
        assert head.endswith(words) if n == 48 else words in head, r["reason"][:300]
        assert "Triton rejects this config: " + words.split(" (")[0] in short_reason(r["reason"])
    assert "arange's range must be a power of 2" in render_to_text(out.results)


def render_to_text(results) -> str:
    from rich.console import Console

    console = Console(width=220, record=True)
    console.print(render_table(results, ["BLOCK_N"]))
    return console.export_text()


@pytest.mark.parametrize(("reason", "expected"), [
    # ": " inside quoted TTGIR (" : i32") and inside parentheses is no break between parts
    ("Gluon codegen: the Gluon backend cannot lower this config: no Gluon lowering for arith.divsi "
     "(folded into its consumers, not a graph op) at TTGIR line 50: %1 = arith.divsi %0, %c64_i32 : i32 "
     "loc(#loc77) (the backend lowers TMA descriptor loads and stores)",
     "Gluon codegen: no Gluon lowering for arith.divsi at TTGIR line 50: %1 = arith.divsi %0, %c64_i32…"),
    ("twill: no schedule for this config (attn: time limit reached; last: joint timeout: before this II's "
     "windows)", "twill: no schedule for this config"),
    # only the first line: what follows is a source listing
    ("Triton rejects this config: Triton cannot compile 'k' for sm_90 at num_warps=4: arange's range must "
     "be a power of 2; CompilationError: at 7:27:\ndef k(a_ptr):\n    x = tl.arange(0, BLOCK)\n",
     "Triton rejects this config: arange's range must be a power of 2; CompilationError: at 7:27"),
])
def test_short_reason_keeps_what_refused_and_why(reason, expected):
    assert short_reason(reason) == expected


# ------------------------------------------------------------------------------- the launch arithmetic
def test_a_grid_value_the_launch_arithmetic_cannot_use_is_refused_on_its_config_only(cache):
    """BLOCK_N=0 divides ``ceil(N / BLOCK_N)`` by zero: that config comes back with the expression named
    and is not compiled; BLOCK_N=64 is tuned (before, the whole sweep was refused)."""
    out = tune(GEMM, "h200", {"BLOCK_N": [0, 64]}, jobs=1, cache_dir=cache, time_limit=1.0)
    zero, ok = sorted(out.results, key=lambda r: r["constexprs"]["BLOCK_N"])
    assert zero["error"] == "input" and not zero["fits"] and set(zero["details"]) == {"seconds"}
    assert "TWILL_TUNE ctas" in zero["reason"] and "divides by zero" in zero["reason"]
    assert ok["fits"] and ok["details"]["ctas"] == math.ceil(4000 / 128) * math.ceil(3000 / 64)
    with pytest.raises(GridError, match="divides by zero"):  # no config can use it: nothing to tune
        tune(GEMM, "h200", {"BLOCK_N": [0]}, jobs=1, cache_dir=cache)


def test_a_count_is_never_truncated_silently():
    assert evaluate_count("ceil(M / BLOCK_M)", {"M": 4000, "BLOCK_M": 128}) == 32
    with pytest.raises(GridError, match=r"'M / BLOCK_M' is 31.25, not a whole number"):
        evaluate_count("M / BLOCK_M", {"M": 4000, "BLOCK_M": 128}, where="TWILL_TUNE ctas")
    with pytest.raises(GridError, match=r"is -46.*at least 1"):
        evaluate_count("ceil(N / BLOCK_N)", {"N": 2944, "BLOCK_N": -64})


def test_a_negative_flop_count_is_named():
    from twill.tune.grid import evaluate_flops

    assert evaluate_flops("2 * M * N * K", {"M": 3, "N": 5, "K": 7}) == 210.0
    with pytest.raises(GridError, match=r"TWILL_TUNE flops: '2 \* M \* \(N - K\)' is -12; a FLOP count"):
        evaluate_flops("2 * M * (N - K)", {"M": 3, "N": 5, "K": 7}, where="TWILL_TUNE flops")


def test_repeated_values_are_said_and_tuned_once(monkeypatch, capsys):
    import twill.tune.api as api

    assert repeated([64, 128, 64, 64.0, 32]) == [64]
    monkeypatch.setattr(api, "tune_config", _fake)
    code = twill_main(["tune", GEMM, "--machine", "h200", "--grid", "BLOCK_N=64,128,64", "--num-warps",
                       "4,4", "--jobs", "1", "--no-cache"])
    err = capsys.readouterr().err
    assert code == 0
    assert "--grid BLOCK_N lists 64 more than once" in err and "--num-warps lists 4 more than once" in err


# ------------------------------------------------------------------------------- the numbers
def test_a_prediction_above_the_tensor_core_peak_says_the_flops_expression_overcounts(cache):
    """``gemm_bias_overcount`` counts ``8 M N K``: 4x the work. The time is the same kernel's; its TFLOP/s
    would pass the H200's 132 x 4096 FLOP/cycle x 1.6 GHz = 865.1 TFLOP/s, and the config says so with the
    FLOPs of the GEMMs the model prices (2 x 128 x 64 x 64 per trip x 16 trips x 32 x 47 CTAs)."""
    peak = 132 * 4096 * 1.6 / 1000
    assert tc_peak_tflops(H200, ["f16"]) == pytest.approx(peak)
    good = tune(GEMM, "h200", {"BLOCK_N": [64]}, jobs=1, cache_dir=cache, time_limit=1.0).results[0]
    over = tune(f"{USER}::gemm_bias_overcount", "h200", {"BLOCK_N": [64]}, jobs=1, cache_dir=cache,
                time_limit=1.0).results[0]
    assert good["predicted_tflops"] <= peak and "over_peak" not in good["details"]
    assert over["predicted_ms"] == pytest.approx(good["predicted_ms"])
    assert over["predicted_tflops"] == pytest.approx(4 * good["predicted_tflops"])
    modelled = 2 * 128 * 64 * 64 * math.ceil(1000 / 64) * math.ceil(4000 / 128) * math.ceil(3000 / 64)
    assert over["details"]["gemm_flops"] == modelled
    if over["predicted_tflops"] > peak:
        note = over["details"]["over_peak"]
        assert f"peak of {peak:.0f}" in note and "'8 * M * N * K'" in note and f"{modelled:.4g}" in note


def test_jobs_1_and_a_process_pool_give_the_same_ranking(cache):
    grid = {"BLOCK_N": [64, 128, 32]}
    one = tune(GEMM, "h200", grid, num_stages=[3], jobs=1, cache_dir=cache, time_limit=1.0)
    two = tune(GEMM, "h200", grid, num_stages=[3], jobs=2, cache_dir=cache, time_limit=1.0)
    assert one.sweep.engine == "serial" and two.sweep.engine.startswith("process pool")

    def key(out):
        return [(r["index"], r["fits"], r["predicted_ms"]) for r in rank(out.results)]

    why = [(r["index"], r["error"], r["reason"]) for out in (one, two) for r in out.results if not r["fits"]]
    assert key(one) == key(two) and len(key(one)) == 3, why


# ------------------------------------------------------------------------------- several loops
def test_two_sibling_loops_are_each_priced_and_added_up(cache):
    """The row softmax runs two loops over the row (max/sum, then write): each is priced with its own SASS
    instructions and its own streaming terms (twill/tune/membound.py). Its co-resident CTAs are in
    different loops at once, so a CTA takes ``2 x tma_latency / k`` (the other CTAs keep HBM busy while it
    starts and ends) plus the longer of its loops' chains added up and, per shared resource of the SM, the
    loops' use added up; the kernel time is (waves - 1) such CTAs and one at the last wave's occupancy."""
    out = tune(f"{USER}::softmax_rows", "h200", {"BLOCK": [1024]}, jobs=1, cache_dir=cache, time_limit=1.0)
    r = out.results[0]
    assert r["error"] is None and r["fits"], r["reason"]
    d = r["details"]
    loops = d["loops"]
    assert len(loops) == 2 and loops[0]["line"] < loops[1]["line"]
    assert [lp["trips"] for lp in loops] == [65536 // 1024] * 2
    assert all(lp["loop_sass_instructions"] > 0 for lp in loops)
    k, sms, edge = d["ctas_per_sm"], 132, 872
    w = math.ceil(8192 / (sms * k))

    def cta(pre):
        chain = sum(lp["trips"] * lp["membound"][f"{pre}chain"] for lp in loops)
        names = set(loops[0]["membound"][f"{pre}shared"]) | set(loops[1]["membound"][f"{pre}shared"])
        busiest = max(sum(lp["trips"] * lp["membound"][f"{pre}shared"].get(n, 0.0) for lp in loops)
                      for n in names)
        return 2 * edge / k + max(chain, busiest)

    assert d["waves"] == w
    assert r["predicted_ms"] == pytest.approx(((w - 1) * cta("") + cta("tail_")) / 1.6e9 * 1e3, rel=1e-3)
    # each loop's own bound is at most the kernel's share of it: the loops overlap across CTAs
    own = sum(lp["trips"] * lp["cycles_per_trip"] for lp in loops)
    assert cta("") - 2 * edge / k <= own + 1e-6
    assert out.meta["expressions"]["trips"] == ["ceil(cols / BLOCK)"] * 2


def test_one_trips_expression_for_two_loops_is_not_predicted_and_not_called_unrunnable(cache):
    """The same kernel described with one ``trips`` expression: the config says "not predicted", names
    both TTGIR lines and says how to describe the loops; it never says "cannot run"."""
    out = tune(f"{USER}::softmax_one_trips", "h200", {"BLOCK": [1024]}, jobs=1, cache_dir=cache,
               time_limit=1.0)
    r = out.results[0]
    assert r["error"] == "input" and not r["fits"] and r["details"]["registers"] > 0
    assert "2 sibling loop(s) (TTGIR lines" in r["reason"] and "give one per loop" in r["reason"]
    text = render_to_text(out.results)
    assert "not predicted:" in text and "cannot run" not in text


def test_the_gluon_backend_refuses_two_loops_clearly(cache):
    out = tune(f"{USER}::softmax_one_trips", "h200", {"BLOCK": [1024]}, backend="gluon", jobs=1,
               cache_dir=cache, time_limit=1.0)
    r = out.results[0]
    assert r["error"] == "model" and "the Gluon backend generates kernels of one loop" in r["reason"]
    assert "--backend triton" in r["reason"]


# ------------------------------------------------------------------------------- engines
def test_ray_without_the_extra_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    with pytest.raises(TwillError, match=r"--ray needs Ray: pip install 'twill\[ray\]'"):
        run_sweep([object()], _fake, ray="local")


SLOW_WORKER = textwrap.dedent('''
    import os, time

    import twill.tune.api as api

    def slow(task):  # config 0 finishes at once, the others would take 30 s
        time.sleep(0 if task.index == 0 else 30)
        return {"index": task.index, "constexprs": task.constexprs, "num_warps": task.num_warps,
                "num_stages": task.num_stages, "fits": True, "reason": None,
                "predicted_ms": 1.0 + task.index, "predicted_tflops": 1.0, "schedule": None,
                "details": {}, "error": None}

    def install():
        """tune_config -> slow; each result the command receives leaves a file got-INDEX."""
        api.tune_config = slow
        sweep = api.run_sweep

        def run(tasks, worker, *, on_result=None, **kw):
            def got(r):
                on_result(r)
                open(os.path.join(os.environ["TUNE_MARK"], f"got-{r['index']}"), "w").close()
            return sweep(tasks, worker, on_result=got, **kw)

        api.run_sweep = run
''')


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_real_sigint_keeps_the_finished_configs(tmp_path, jobs):
    """``twill tune`` in its own process, SIGINT once it holds the first config's result: exit 130 at once
    (the pool's workers still running are ended, not waited for: they would take 30 s), the JSON holds that
    config, says interrupted, and counts the rest as cut."""
    (tmp_path / "slowworker.py").write_text(SLOW_WORKER)
    script = ("import sys, slowworker; slowworker.install(); "
              "from twill.cli.main import main; sys.exit(main(sys.argv[1:]))")
    out = tmp_path / "cut.json"
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "TUNE_MARK": str(tmp_path)}
    proc = subprocess.Popen([sys.executable, "-c", script, "tune", GEMM, "--machine", "h200", "--grid",
                             "BLOCK_N=64,128,256", "--jobs", jobs, "--no-cache", "--json", str(out)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "got-0").exists():  # the command holds config 0's result
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err[-2000:]
    doc = json.loads(out.read_text())
    assert doc["interrupted"] and [c["index"] for c in doc["configs"]] == [0]
    assert doc["cut"] == 2 and doc["finished"] == 1
    assert "1 of 3 configs finished; 2 cut" in err


def test_frontend_error_of_a_bad_num_warps_names_tritons_reason():
    from twill.calibrate.regs import compile_registers
    from twill.frontend.compile import load_kernel

    with pytest.raises(FrontendError, match=r"at num_warps=3: num_warps must be a power of 2$"):
        compile_registers(load_kernel(GEMM), target="sm_90", num_warps=3)


def test_more_warps_than_a_cta_may_have_is_named_before_any_compile():
    """num_warps 64 is 64 x 32 = 2048 threads; a CTA has at most 1024 (CUDA C Programming Guide): the
    config says so (ptxas's own refusal, "Insufficient registers", does not name the limit)."""
    out = tune(GEMM, "h200", {"BLOCK_N": [64]}, num_warps=[64], jobs=1, cache_dir=None)
    r = out.results[0]
    assert not r["fits"] and r["error"] is None and "registers" not in r["details"]
    assert r["reason"].startswith(f"threads: num_warps 64 is {64 * 32} threads per CTA, more than the 1024")


def test_an_unreachable_ray_address_is_refused_at_once():
    """Ray retries an address nothing listens on for minutes; twill checks the port first."""
    pytest.importorskip("ray")
    import socket

    with socket.socket() as s:  # a port that was free a moment ago, and is closed now
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t0 = time.monotonic()
    with pytest.raises(TwillError, match=rf"--ray 127.0.0.1:{port}: nothing answers at 127.0.0.1:{port}"):
        run_sweep([object()], _fake, ray=f"127.0.0.1:{port}")
    assert time.monotonic() - t0 < 10


def test_a_loop_triton_does_not_pipeline_says_num_stages_has_no_effect(cache):
    """With runtime strides Triton keeps one copy of each tile, whatever num_stages: its shared memory is
    (128 x 64 + 64 x 64) x 2 B at 2 and 3 stages alike, both predictions are equal, and the note says so."""
    out = tune(f"{USER}::gemm_strided", "h200", {"BLOCK_N": [64]}, num_stages=[2, 3], jobs=1, cache_dir=cache,
               time_limit=1.0)
    two, three = sorted(out.results, key=lambda r: r["num_stages"])
    for r in (two, three):
        assert r["fits"] and r["details"]["triton_pipelined"] is False
        assert r["details"]["shared_bytes"] == (128 * 64 + 64 * 64) * 2
    assert two["predicted_ms"] == pytest.approx(three["predicted_ms"])
    assert render_to_text(out.results).count("not pipelined by Triton: num_stages has no effect") == 2


def test_fewer_ctas_than_sms_are_priced_one_per_sm(cache):
    """M = N = 1024 with 128 x 64 tiles is 8 x 16 = 128 CTAs on 132 SMs: one wave, one CTA per SM, each
    trip at that occupancy (no co-resident CTA shares it), so the kernel takes ``2 x 872 + 16 trips x the
    lone CTA's cycles per trip``; the same tile on M = 4000 shares its SM with ``ctas_per_sm - 1`` others."""
    small = tune(GEMM, "h200", {"BLOCK_N": [64]}, problem={"M": 1024, "N": 1024}, jobs=1, cache_dir=cache,
                 time_limit=1.0).results[0]
    big = tune(GEMM, "h200", {"BLOCK_N": [64]}, jobs=1, cache_dir=cache, time_limit=1.0).results[0]
    d = small["details"]
    trips = math.ceil(1000 / 64)
    assert d["ctas"] == 8 * 16 and d["waves"] == 1 and d["tail_ctas_per_sm"] == 1
    assert small["predicted_ms"] == pytest.approx((2 * 872 + trips * d["tail_cycles_per_trip"]) / 1.6e6,
                                                  rel=1e-3)
    k = big["details"]["ctas_per_sm"]
    assert k > 1 and big["details"]["waves"] == math.ceil(32 * 47 / (132 * k))
    assert d["tail_cycles_per_trip"] < big["details"]["cycles_per_trip"]


def test_a_descriptor_without_a_descriptors_entry_is_said_to_stay_fixed(tmp_path, monkeypatch, capsys):
    """examples/gemm.py without TWILL_TUNE's descriptors: every config would compile B's block at the
    default [128, 64] whatever BLOCK_N is (Triton: "accumulator shape is incompatible"); the command says
    which descriptor and why."""
    import twill.tune.api as api

    text = (ROOT / "examples" / "gemm.py").read_text()
    start = text.index('        "descriptors": {"a_desc"')
    end = text.index('        "problem": {"M": 8192')
    path = tmp_path / "gemm_nodesc.py"
    path.write_text(text[:start] + text[end:])
    monkeypatch.setattr(api, "tune_config", _fake)
    assert twill_main(["tune", f"{path}::matmul", "--machine", "h200", "--grid", "BLOCK_N=64,128", "--jobs",
                       "1", "--no-cache"]) == 0
    err = " ".join(capsys.readouterr().err.split())
    for arg, block in (("a_desc", "[128, 64]"), ("b_desc", "[128, 64]"), ("c_desc", "[128, 128]")):
        assert (f"gives no descriptors entry for {arg}, so its block stays tensordesc<fp16{block}> in every "
                "config whatever --grid BLOCK_N says") in err


def test_the_note_says_serialized_and_spills_only_when_they_are_so():
    """ptxas can serialize the wgmma pipeline without spilling (the 8-warp GEMM tiles): that note said
    "spills 0 B"."""
    def row(i, serialized, spill):
        return {"index": i, "constexprs": {"BLOCK_N": 64 * (i + 1)}, "num_warps": 8, "num_stages": 3,
                "fits": True, "reason": None, "predicted_ms": 1.0 + i, "predicted_tflops": 1.0,
                "details": {"wgmma_serialized": serialized, "spill_bytes": spill}}

    lines = render_to_text([row(0, True, 0), row(1, True, 1672), row(2, False, 8)]).splitlines()
    first, second, third = (next(ln for ln in lines if ln.startswith(f"│ {i} ")) for i in (1, 2, 3))
    assert "wgmma serialized" in first and "spills" not in first
    assert "wgmma serialized; spills 1672 B" in second
    assert "spills 8 B" in third and "serialized" not in third


def test_the_gluon_solve_warnings_go_into_the_result_not_the_terminal(monkeypatch, tmp_path):
    """A solve that ends at the time limit warns (a heuristic answer); from a pool worker that warning was
    printed raw between the progress bar and the table. It is the schedule's note now."""
    import warnings

    import twill.search as search
    from twill.errors import TwillWarning

    real = search.schedule

    def warning_schedule(*args, **kwargs):
        out = real(*args, **kwargs)
        warnings.warn(TwillWarning("heuristic: probe"), stacklevel=1)
        return out

    monkeypatch.setattr(search, "schedule", warning_schedule)
    gemm = str(ROOT / "examples" / "gemm.py") + "::matmul"
    with warnings.catch_warnings(record=True) as escaped:
        warnings.simplefilter("always")
        out = tune(gemm, "h200", {"BLOCK_N": [128]}, num_warps=[4], num_stages=[3], backend="gluon", jobs=1,
                   cache_dir=str(tmp_path), time_limit=2.0)
    r = out.results[0]
    assert r["schedule"] is not None, r["reason"]
    assert "twill: heuristic: probe" in r["schedule"]["notes"]
    assert not [w for w in escaped if "probe" in str(w.message)]


def test_a_cost_normalization_that_times_out_goes_on_with_the_rounded_costs(monkeypatch):
    """Under load the normalization ILP (0.2 x --time-limit) found no answer and schedule() raised
    SolverError, which lost the config ("internal error") in a sweep. Its proportional rounding is a
    point of the same model: every counted cost positive, sorted, sum <= U, and the error is the largest
    cross difference |r_i c_j - r_j c_i|."""
    import twill.solvers.normalize as nz
    from twill.solvers.status import SolveStatus

    class Timeout:
        status, wall_s = SolveStatus.TIMEOUT, 0.2

    monkeypatch.setattr(nz, "solve_ilp", lambda *a, **k: Timeout())
    costs = [16, 64, 75, 512, 576, 600, 664, 1099]
    out = nz.normalize_costs(costs, upper=300, time_limit=0.2)
    assert out.status == "feasible" and not out.exact
    scaled = list(out.scaled)
    assert sum(scaled) <= 300 and all(c >= 1 for c in scaled) and scaled == sorted(scaled)
    assert out.error == max(abs(a * cb - b * ca) for i, (a, ca) in enumerate(zip(costs, scaled, strict=True))
                            for b, cb in zip(costs[i + 1:], scaled[i + 1:], strict=True))
    assert scaled[-1] >= 300 * 1099 // sum(costs) // 2  # at least half its proportional share, not all ones


def test_a_failed_solve_keeps_the_triton_prediction_and_is_not_cached(monkeypatch, tmp_path):
    """twill's schedule is reported beside the prediction of the kernel Triton builds, which does not
    depend on it: a solver that fails (SolverError) leaves the config predicted, with the failure in its
    notes, and nothing in the solve cache (a loaded machine must not fix it there)."""
    import twill.search as search
    from twill.errors import SolverError

    def failing(*args, **kwargs):
        raise SolverError("cost normalization found no answer (timeout) for costs (16, 64)")

    monkeypatch.setattr(search, "schedule", failing)
    r = tune(GEMM, "h200", {"BLOCK_N": [64]}, jobs=1, cache_dir=str(tmp_path), time_limit=1.0).results[0]
    assert r["fits"] and r["error"] is None and r["predicted_ms"] > 0 and r["schedule"] is None
    assert any("solver failed (SolverError: cost normalization" in n for n in r["details"]["twill_notes"])
    assert not list(tmp_path.glob("solve-*.json"))


def test_an_output_folder_removed_during_the_sweep_is_said_and_the_plot_still_written(tmp_path, monkeypatch,
                                                                                       capsys):
    import shutil

    import twill.tune.api as api

    gone = tmp_path / "gone"
    gone.mkdir()

    def removing(task):  # the folder of --json disappears while the sweep runs
        shutil.rmtree(gone, ignore_errors=True)
        return _fake(task)

    monkeypatch.setattr(api, "tune_config", removing)
    plot = tmp_path / "p.png"
    code = twill_main(["tune", GEMM, "--machine", "h200", "--grid", "BLOCK_N=64,128", "--jobs", "1",
                       "--no-cache", "--json", str(gone / "t.json"), "--plot", str(plot)])
    captured = capsys.readouterr()
    assert code == 2 and plot.is_file() and "128" in captured.out
    assert f"cannot write {gone / 't.json'}" in captured.err
