"""The Gluon backend over the plain FA forward's ``twill tune`` grid (issue 24): every config of
BLOCK_M 64 / 128 x BLOCK_N 32 / 64 / 128 at 4 and 8 warps and 2 Triton stages (the grid of ``twill tune
examples/flash_attention_fwd.py --grid BLOCK_M=64,128 --grid BLOCK_N=32,64,128 --num-warps 4,8
--num-stages 2 --backend gluon``), solved as that command solves it (``prefetch = num_stages - 1``),
generates and computes attention in the CPU simulation against numpy.

BLOCK_M 128 with BLOCK_N 32 or 64 puts the loop's two results on different warp groups (``out`` on one,
``row_sum`` on another): the kernel epilogue ``out / row_sum`` then reads a loop result of another
partition, which the generator failed on ("%out_50 is read 0 production(s) back in a after trip"); it is
now handed after the loop through shared memory. BLOCK_M 128 with BLOCK_N 128 at 4 warps has a warp group
that reads the staged P in two stages (two trips of one iteration); it deadlocked from two trips on (the
staging slot was freed at each read) and now frees it at the last. The expected output is attention
computed by numpy, independently of the generator.
"""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("triton.experimental.gluon")

from twill.codegen.gluon import generate
from twill.codegen.gluon.cpu_sim import Descriptor, run_kernel
from twill.frontend.compile import compile_to_ttgir, load_kernel, target_for
from twill.frontend.lower import lower_loop
from twill.frontend.ttgir import parse_ttgir
from twill.ir.machine import load_machine
from twill.search import schedule as solve
from twill.tune.grid import load_tune_problem

ROOT = Path(__file__).resolve().parents[1]
FA = str(ROOT / "examples/flash_attention_fwd.py")
GRID = [(bm, bn, w) for w in (4, 8) for bm in (64, 128) for bn in (32, 64, 128)]


def _config(block_m: int, block_n: int, num_warps: int = 4, num_stages: int = 2, head_dim: int | None = None):
    """The kernel spec of one tune config, with the descriptor blocks of its constexprs (as ``twill tune``
    builds it: ``TWILL_TUNE``'s descriptors); ``head_dim`` replaces the example's ``HEAD_DIM``."""
    spec = load_kernel(FA)
    problem = load_tune_problem(spec.fn.__globals__.get("TWILL_TUNE"), spec.name, source=spec.source)
    consts = {**spec.constexprs, "BLOCK_M": block_m, "BLOCK_N": block_n}
    if head_dim is not None:
        consts["HEAD_DIM"] = head_dim
    sig = problem.signature(spec.signature, consts)
    return dataclasses.replace(spec, signature={**spec.signature, **sig}, constexprs=consts,
                               num_warps=num_warps, num_stages=num_stages)


SOLVE_LIMIT = 20.0
"""Seconds each config's solve may take. The tests need the schedule, not its proof: every config here has
its first schedule within about 2 s (the joint phase), but the closing phase of some D 64 configs (refuting
the IIs below it, issue 26) runs for minutes; stopped by the limit it returns that same schedule."""


def _solve(config, machine):
    snaps = compile_to_ttgir(config, target=target_for(machine))
    graph = lower_loop(parse_ttgir(snaps.pre_swp), machine, name=config.name).graph
    return solve(graph, machine, prefetch=max(0, config.num_stages - 1), time_limit=SOLVE_LIMIT)


def _reference(q, k, v, heads, n, scale):
    out = []
    for h in range(heads):
        rows = slice(h * n, (h + 1) * n)
        s = (q[rows].astype(np.float32) @ k[rows].astype(np.float32).T) * scale
        p = np.exp(s - s.max(axis=1, keepdims=True))
        out.append((p / p.sum(axis=1, keepdims=True)) @ v[rows].astype(np.float32))
    return np.concatenate(out)


def _simulate(kernel, n: int, heads: int = 2, d: int = 128, seed: int = 0) -> float:
    """Relative max error of the kernel's output (pre-filled with NaN) against numpy's attention."""
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((heads * n, d)).astype(np.float16) for _ in range(3))
    o = np.full((heads * n, d), np.nan, dtype=np.float16)
    blocks = kernel.manifest["descriptors"]
    descs = [Descriptor(x, blocks[name]["block_shape"])
             for x, name in ((q, "q_desc"), (k, "k_desc"), (v, "v_desc"), (o, "o_desc"))]
    consts = kernel.manifest["constexprs"]
    args = [*descs, d ** -0.5, n, *(consts[a] for a in kernel.manifest["arg_names"] if a in consts)]
    block_m = blocks["q_desc"]["block_shape"][0]
    run_kernel(kernel.source, kernel.manifest["kernel"], args, (n // block_m, heads))
    ref = _reference(q, k, v, heads, n, d ** -0.5)
    return float(np.abs(o.astype(np.float32) - ref).max() / np.abs(ref).max())


@pytest.mark.parametrize("block_m,block_n,num_warps", GRID, ids=[f"M{m}-N{n}-w{w}" for m, n, w in GRID])
def test_every_tune_config_generates_and_computes_attention(tmp_path, block_m, block_n, num_warps):
    """Each config of the grid generates (compile=False: the simulation runs the Python source) and
    computes attention at N = lcm(BLOCK_M, BLOCK_N) and three times that (N / BLOCK_N trips: one to twelve,
    the prologue, steady state, epilogue and, where the longest prologue is longer than the loop, the
    sequential body)."""
    machine = load_machine("h200")
    config = _config(block_m, block_n, num_warps)
    sched = _solve(config, machine)
    kernel = generate(sched, config, machine, tmp_path / "out", compile=False)
    tile = math.lcm(block_m, block_n)   # the example does not mask: N is a multiple of both blocks
    for n in (tile, 3 * tile):
        assert _simulate(kernel, n) < 1e-2, (block_m, block_n, n)


def test_loop_results_of_two_groups_are_handed_to_the_epilogue_and_compile(tmp_path):
    """BLOCK_M 128, BLOCK_N 64 (the config ``twill tune`` failed on): the schedule puts ``out`` and
    ``row_sum`` on different warp groups; the kernel compiles for sm_90, the partition that stores O waits
    for the other's loop result (one hand-off buffer of that result's bytes, one barrier) and the kernel
    computes attention at one, two and six trips per tile."""
    machine = load_machine("h200")
    config = _config(128, 64)
    sched = _solve(config, machine)
    group = {n: s.warp_group for n, s in sched.slots.items()}
    assert group["out"] != group["row_sum"], "the config no longer splits the loop results: pick another"
    kernel = generate(sched, config, machine, tmp_path / "out")
    waits = re.findall(r"mbarrier\.wait\(abar\.index\((\d+)\), 0\)", kernel.source)
    arrives = re.findall(r"mbarrier\.arrive\(abar\.index\((\d+)\)\)", kernel.source)
    assert set(waits) == set(arrives) == {"0"}   # one hand-off, waited and arrived on (in both bodies)
    # the smaller result crosses: row_sum, BLOCK_M fp32 values (out, [BLOCK_M, HEAD_DIM] fp32, stays)
    key = "after-loop hand-offs of loop results between partitions (not in the model)"
    assert kernel.report.shared_difference[key] == 128 * 4
    assert kernel.report.shared_compiled <= machine.smem_per_cta
    for n in (128, 256, 768):
        assert _simulate(kernel, n) < 1e-2, n


def test_the_epilogue_store_reuses_q_after_its_reader_has_staged_to_it(tmp_path):
    """BLOCK_M 128, BLOCK_N 128, 4 warps: the warp group that stores O does not read Q; Q's reader (the
    QK wgmma) feeds P, which is staged to the storing group, so Q is dead once the storing group has read
    the last P and the TMA store goes through Q's buffer. Without the reuse the kernel needed 262,832 B
    (32 KB of store staging over the model's 229,376), more than the H200's 232,448, and ``twill tune``
    refused the config. Compiled: the shared memory is the model's buffers plus barriers and Triton's
    scratch, no store staging."""
    machine = load_machine("h200")
    config = _config(128, 128, 4)
    sched = _solve(config, machine)
    group = {n: s.warp_group for n, s in sched.slots.items()}
    assert group["qk"] != group["out"], "the config no longer stores O away from Q's reader: pick another"
    kernel = generate(sched, config, machine, tmp_path / "out")
    report = kernel.report
    assert "epilogue store staging (not in the model)" not in report.shared_difference
    assert report.shared_compiled <= machine.smem_per_cta
    assert report.shared_compiled - report.shared_model_buffers - report.barrier_bytes < 1024   # scratch
    for n in (128, 384):
        assert _simulate(kernel, n) < 1e-2, n


@pytest.mark.parametrize("num_warps", [4, 8])
def test_the_row_max_handed_to_the_next_iteration_on_another_group_computes_attention(tmp_path, num_warps):
    """BLOCK_M 128, BLOCK_N 64, HEAD_DIM 64 (the configs ``benchmarks/gluon_fa_grid.py generate --shape
    4,32,4096,64`` was refused on: "a loop-carried hand-off is not lowered"): ``alpha = exp(m_i -
    new_max)`` is on another warp group than ``new_max`` and reads it in the same iteration and, through
    the ``m_i`` iter_arg, in the next (distance 1). The row max goes through one staging ring of the
    model's depth for both reads (``ceil((start(alpha) + II + 1 - end(new_max)) / II)``), so the kernel's
    buffers are the model's; its first iteration takes ``m_i``'s initial value. It computes attention at
    two trips per tile (the sequential body, whose first trip is the loop's) and six (the pipelined one)."""
    machine = load_machine("h200")
    config = _config(128, 64, num_warps, head_dim=64)
    sched = _solve(config, machine)
    group = {n: s.warp_group for n, s in sched.slots.items()}
    edges = [e for e in sched.problem.edges if e.src == "new_max" and e.dst == "alpha"]
    assert sorted(e.distance for e in edges) == [0, 1] and all(e.carrier == "register" for e in edges)
    assert group["new_max"] != group["alpha"], "the config no longer splits new_max and alpha: pick another"
    kernel = generate(sched, config, machine, tmp_path / "out", compile=num_warps == 4)
    ii = sched.ii
    end = sched.start["new_max"] + sched.problem.op("new_max").cycles
    depth = max(1, -(-(sched.start["alpha"] + ii + 1 - end) // ii))
    # the staging rings of BLOCK_M fp32 row values (the row max, the row sum's partial) and their depths
    rows = re.findall(r"stage_\d+ = gl\.allocate_shared_memory\(gl\.float32, \[(\d+), 128\], ", kernel.source)
    assert str(depth) in rows, (depth, rows)
    # iteration 0 of the sequential body's loop (t = 0) takes m_i's initial value instead of the ring
    assert "gl.where((t) > 0, " in kernel.source
    report = kernel.report
    assert "buffers beyond the model's (depth x bytes)" not in report.shared_difference
    if num_warps == 4:
        assert report.shared_compiled <= machine.smem_per_cta
    for n in (128, 384):
        assert _simulate(kernel, n, d=64) < 1e-2, n


PIPELINED = [(128, 32, 4, 128), (128, 128, 8, 128), (64, 32, 4, 64),
             (128, 32, 8, 64)]
"""Configs (BLOCK_M, BLOCK_N, warps, HEAD_DIM) whose kernels ptxas serialized (C7515 / C7512 in
``benchmarks/gluon_fa_grid*/*/report.json`` before the generator stopped carrying wgmmas in flight across
the loop's back-edge): one warp group or two consumers, one or two stages of O, D 128 and D 64."""


@pytest.mark.parametrize("block_m,block_n,num_warps,head_dim", PIPELINED,
                         ids=[f"M{m}-N{n}-w{w}-D{d}" for m, n, w, d in
                              (c.values if hasattr(c, "values") else c for c in PIPELINED)])
def test_ptxas_keeps_the_wgmma_pipeline_of_grid_configs(tmp_path, wgmma_serializations, block_m, block_n,
                                                        num_warps, head_dim):
    """Compiled for sm_90, each config's PTX assembles without a ptxas note that it serializes the wgmmas
    (C7511 / C7512 / C7515), the report has none either, and the kernel still computes attention."""
    machine = load_machine("h200")
    config = _config(block_m, block_n, num_warps, head_dim=head_dim)
    kernel = generate(_solve(config, machine), config, machine, tmp_path / "out")
    ptx = (kernel.folder / f"{kernel.report.kernel}.ptx").read_text()
    assert "wgmma.mma_async" in ptx
    assert wgmma_serializations(ptx) == []
    assert not [n for n in kernel.report.not_kept if "instructions are serialized" in n]
    assert _simulate(kernel, 2 * math.lcm(block_m, block_n), d=head_dim) < 1e-2


def test_hand_off_staging_of_a_tile_is_swizzled(tmp_path):
    """BLOCK_M 128, BLOCK_N 32, 4 warps: the softmax group hands P (a [128, 32] fp16 tile, 64-byte rows) to
    the group that issues the O wgmma through a staging buffer, stored and loaded in the wgmma layout. The
    buffer has the widest NVMMA swizzle its rows allow (64 B: 128 B does not divide a 64-byte row), in the
    source and in the compiled TTGIR, so the eight rows of a ``stmatrix`` / ``ldmatrix`` 8x8 matrix are not
    on the same banks every other row; a rank-1 hand-off (alpha, [128] fp32) stays unswizzled. The kernel
    still computes attention."""
    machine = load_machine("h200")
    config = _config(128, 32, 4)
    kernel = generate(_solve(config, machine), config, machine, tmp_path / "out")
    allocs = re.findall(r"stage_\d+ = gl\.allocate_shared_memory\(gl\.(\w+), \[(\d+(?:, \d+)*)\], (.*)\)\n",
                        kernel.source)
    tiles = [(dtype, [int(x) for x in shape.split(", ")][1:], layout) for dtype, shape, layout in allocs]
    two_d = [t for t in tiles if len(t[1]) == 2]
    assert two_d, "the config no longer stages a tile between warp groups: pick another"
    for dtype, (rows, cols), layout in two_d:
        row_bytes = cols * {"float16": 2, "bfloat16": 2, "float32": 4}[dtype]
        width = 128 if row_bytes % 128 == 0 else 64 if row_bytes % 64 == 0 else 32
        assert rows >= 8 and layout.startswith(f"gl.NVMMASharedLayout(swizzle_byte_width={width},")
        assert f"swizzlingByteWidth = {width}" in kernel.compiled.asm["ttgir"]
    assert all(layout.startswith("gl.SwizzledSharedLayout(1, 1, 1") for _, shape, layout in tiles
               if len(shape) == 1)
    assert _simulate(kernel, 128) < 1e-2 and _simulate(kernel, 384) < 1e-2
