"""The Gluon backend for sm_100 (tcgen05, tensor memory): generate + compile on the CPU, checked against the
schedule and the machine.

The b200 schedules are read from ``tests/data/gluon_b200`` (solved by ``twill schedule --machine b200``;
regenerate with ``twill schedule FILE --machine b200 --json``), so the tests do not solve. Every expected
value is derived independently of the generator: partitions from ``schedule.warp_groups``; TMEM columns by
arithmetic from the kernels' tile shapes (the descriptor blocks) and, for a P tile that may take S's
columns, from the schedule's own lifetimes; shared memory from the graph's tiles times the schedule's
buffer depths; the tcgen05 issue order from the schedule's ``start mod II``.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("triton.experimental.gluon.language.nvidia.blackwell")

import twill
from twill.codegen.gluon import CodegenError, generate
from twill.codegen.gluon.cpu_sim import Descriptor, SimulationError, run_kernel
from twill.ir.machine import load_machine
from twill.schedule import Schedule

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "gluon_b200"
TARGETS = {
    # name: (kernel, compile on the CPU)
    "gemm": ("examples/gemm.py", True),
    "fa_fwd_subtiled": ("examples/flash_attention_fwd_subtiled.py", True),
    # their compile tries every default partition (ptxas spills in each): generated here, compiled in the docs
    "fa_fwd": ("examples/flash_attention_fwd.py", False),
    "fa_fwd_subtiled_sm100": ("examples/flash_attention_fwd_subtiled.py::attn_fwd_subtiled_sm100", False),
}


def _schedule(name: str) -> Schedule:
    return Schedule.from_json((DATA / f"{name}.json").read_text())


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = {}
    for name, (spec, comp) in TARGETS.items():
        sched = _schedule(name)
        kernel = generate(sched, str(ROOT / spec), "b200", tmp_path_factory.mktemp(name), compile=comp)
        graph = twill.graph_from_kernel(str(ROOT / spec), machine="b200")
        out[name] = (graph, sched, kernel)
    return out


def _functions(text: str) -> dict[str, str]:
    parts = re.split(r"\n@gluon\.jit\n", text)
    return {re.match(r"def (\w+)", p).group(1): p for p in parts[1:]}


def _steady(body: str) -> list[str]:
    lines = body.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("    for t in range("))
    out = []
    for line in lines[at + 1:]:
        if not line.startswith("        "):
            break
        out.append(line.strip())
    return out


@pytest.mark.parametrize("name", list(TARGETS))
def test_partitions_are_the_warp_groups(built, name):
    _graph, sched, kernel = built[name]
    call = re.search(r"gl\.warp_specialize\(\[(.*)\], \[([\d, ]*)\], \[([\d, ]*)\]\)", kernel.source)
    parts = re.findall(r"\((_part\d+_g(\d+)), ", call.group(1))
    groups = {g.index: g for g in sched.warp_groups}
    assert sorted(int(g) for _, g in parts) == sorted(groups)
    workers = [groups[int(g)] for _, g in parts[1:]]
    assert [int(x) for x in call.group(2).split(",") if x.strip()] == [g.warps for g in workers]
    assert [int(x) for x in call.group(3).split(",") if x.strip()] == [g.registers for g in workers]
    assert kernel.manifest["num_warps"] == groups[int(parts[0][1])].warps
    if kernel.compiled is not None:
        ptx = (kernel.folder / f"{kernel.report.kernel}.ptx").read_text()
        assert ".target sm_100a" in ptx and "tcgen05.mma" in ptx
        budgets = {int(x) for x in re.findall(r"setmaxnreg\.(?:inc|dec)\.sync\.aligned\.u32\s+(\d+)", ptx)}
        assert all(g.registers in budgets for g in workers)


@pytest.mark.parametrize("name", list(TARGETS))
def test_tcgen05_order_per_partition_is_the_schedule(built, name):
    graph, sched, kernel = built[name]
    for fname, body in _functions(kernel.source).items():
        m = re.match(r"_part\d+_g(\d+)", fname)
        if not m:
            continue
        mine = [n for n, s in sched.slots.items() if s.warp_group == int(m.group(1))]
        order = sorted(mine, key=lambda n: (sched.slots[n].start % sched.ii, list(sched.slots).index(n)))
        loop = _steady(body)
        mmas = [re.search(r"# twill: (\w+)", x).group(1) for x in loop if x.startswith("tcgen05_mma(")]
        assert mmas == [n for n in order if graph.op(n).kind == "gemm"]
        assert "warpgroup_mma" not in body


def _cols(rows: int, cols: int, bits: int) -> int:
    """TMEM columns of a [rows, cols] tile (32-bit cells, 128 lanes; a packed 16-bit tile two per cell)."""
    return -(-rows // 128) * cols * bits // 32


def _disjoint(sched: Schedule, a: tuple[int, int], b: tuple[int, int]) -> bool:
    ii = sched.ii
    fold = [set(range(ii)) if hi - lo >= ii else {t % ii for t in range(lo, hi)} for lo, hi in (a, b)]
    return not (fold[0] & fold[1])


def _lifetime(sched: Schedule, writer: str) -> tuple[int, int]:
    """[start of the writer, end of its last TMEM reader) in the schedule's time units."""
    p = sched.problem
    end = sched.slots[writer].start + p.op(writer).cycles
    for e in p.out_edges(writer):
        if e.carrier == "tmem":
            end = max(end, sched.slots[e.dst].start + e.distance * sched.ii + p.op(e.dst).cycles)
    return sched.slots[writer].start, end


def _partitions(items: list):
    """Every set partition of ``items``."""
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for part in _partitions(rest):
        for i in range(len(part)):
            yield [*part[:i], [first, *part[i]], *part[i + 1:]]
        yield [[first], *part]


def _expected_tmem(name: str, graph, sched: Schedule, manifest) -> int:
    """Columns by arithmetic: O accumulators (carried) plus the per-iteration tiles (S per MMA, P per
    store) packed at the least cost, a pack of tiles whose schedule lifetimes never overlap costing its
    widest tile (brute force over every grouping)."""
    blocks = {k: v["block_shape"] for k, v in manifest["descriptors"].items()}
    if name == "gemm":
        m, n = blocks["a_desc"][0], blocks["b_desc"][0]
        return _cols(m, n, 32)                                             # the fp32 accumulator
    m, d = blocks["q_desc"]
    n = blocks["k_desc"][0]
    tiles = 2 if "SUB_M" in manifest["constexprs"] else 1                 # the sub-tiled kernels: two halves
    s_cols, o_cols, p_cols = _cols(m, n, 32), _cols(m, d, 32), _cols(m, n, 16)
    per_iter = []
    for i in range(tiles):
        suf = str(i) if tiles > 1 else ""
        per_iter.append((s_cols, _lifetime(sched, f"qk{suf}_gemm")))
        per_iter.append((p_cols, _lifetime(sched, f"out{suf}_tmem_store")))
    best = min(sum(max(c for c, _ in g) for g in part) for part in _partitions(per_iter)
               if all(_disjoint(sched, a[1], b[1]) for g in part for a in g for b in g if a is not b))
    return tiles * o_cols + best


@pytest.mark.parametrize("name", list(TARGETS))
def test_tmem_columns_are_the_tiles_and_fit(built, name):
    graph, sched, kernel = built[name]
    report = kernel.report
    want = _expected_tmem(name, graph, sched, kernel.manifest)
    assert report.tmem_columns == want
    assert want <= load_machine("b200").tmem_columns == report.tmem_limit == 512
    allocated = re.findall(r"allocate_tensor_memory\(.*# (\d+) columns", kernel.source)
    assert sum(int(c) for c in allocated) == want
    if kernel.compiled is not None:
        # Triton 3.6 spreads a tile's 32-bit cells over all 128 lanes (a [64, N] fp32 tile takes N/2
        # columns, where the model's rule charges N) and rounds the total up to a power of two (measured)
        cells = 0
        for m in re.finditer(r"allocate_tensor_memory\(gl\.(\w+), \[([\d, ]+)\]", kernel.source):
            dims = [int(x) for x in m.group(2).split(",")]
            bits = {"float32": 32, "float16": 16, "bfloat16": 16}[m.group(1)]
            cells += dims[-2] * dims[-1] * bits // 32 * (dims[0] if len(dims) > 2 else 1)
        assert report.tmem_compiled == 1 << (-(-cells // 128) - 1).bit_length()
        assert report.tmem_compiled <= want <= 512


@pytest.mark.parametrize("name", [n for n, (_s, c) in TARGETS.items() if c])
def test_shared_memory_is_the_model_and_fits_the_machine(built, name):
    graph, sched, kernel = built[name]
    depths = sched.buffer_depths()
    tiles = graph.fixed_smem + sum(depths.get(op.name, 1) * op.smem for op in graph.ops if op.smem)
    report = kernel.report
    assert report.shared_model_buffers == tiles
    store = report.shared_difference.get("epilogue store staging (not in the model)", 0)
    assert report.barrier_bytes == 8 * sum(int(n) for n in re.findall(
        r"gl\.allocate_shared_memory\(gl\.int64, \[(\d+), 1\]", kernel.source))
    rest = report.shared_compiled - tiles - store - report.barrier_bytes
    assert 0 <= rest <= 1024
    assert report.shared_compiled <= load_machine("b200").smem_per_cta


def test_mma_results_are_waited_where_their_consumer_starts(built):
    graph, sched, kernel = built["fa_fwd_subtiled"]
    funcs = _functions(kernel.source)
    for e in graph.edges:
        if e.carrier != "tmem" or graph.op(e.src).kind != "gemm" or graph.op(e.dst).kind != "tmem_load":
            continue
        group = sched.slots[e.dst].warp_group
        body = next(b for f, b in funcs.items() if re.match(rf"_part\d+_g{group}$", f))
        loop = _steady(body)
        at = next(i for i, x in enumerate(loop) if f"# twill: {e.dst} j=" in x)
        waits = [i for i, x in enumerate(loop[:at]) if x.startswith(f"mbarrier.wait(done_{e.src}.")]
        assert waits, f"{e.dst} reads {e.src}'s TMEM without waiting"
        between = [x for x in loop[waits[-1] + 1:at] if "# twill:" in x]
        assert between == []                                  # no op between the wait and the read


def test_ring_slots_are_released_by_the_mma_that_reads_them(built):
    graph, _sched, kernel = built["gemm"]
    mma = next(x for b in _functions(kernel.source).values() for x in _steady(b)
               if x.startswith("tcgen05_mma("))
    for e in graph.edges:
        if e.carrier == "smem" and graph.op(e.src).kind == "tma_load":
            assert f"empty_{e.src}.index(" in mma.split("mbarriers=")[1]


def test_more_tmem_than_the_machine_is_a_clear_error(built, tmp_path):
    graph, sched, kernel = built["fa_fwd_subtiled"]
    want = _expected_tmem("fa_fwd_subtiled", graph, sched, kernel.manifest)
    small = dataclasses.replace(load_machine("b200"), tmem_columns=want - 32)
    with pytest.raises(CodegenError, match=rf"needs {want} columns, more than machine 'b200' has "
                                           rf"\({want - 32}\): %qk0 64x128xf32 128"):
        generate(sched, str(ROOT / TARGETS["fa_fwd_subtiled"][0]), small, tmp_path, compile=False)


def test_cli_generates_for_b200(tmp_path):
    from twill.cli import main

    out = tmp_path / "gemm"
    code = main(["apply", str(ROOT / "examples/gemm.py"), "--machine", "b200", "--backend", "gluon",
                 "--schedule", str(DATA / "gemm.json"), "-o", str(out)])
    assert code == 0
    text = (out / "kernel.py").read_text()
    assert "tcgen05_mma(" in text and "allocate_tensor_memory(" in text


# ------------------------------------------------------------------------------------------ CPU simulation
def _fa_reference(q, k, v, heads, n, scale):
    out = []
    for h in range(heads):
        rows = slice(h * n, (h + 1) * n)
        s = (q[rows].astype(np.float32) @ k[rows].astype(np.float32).T) * scale
        p = np.exp(s - s.max(axis=1, keepdims=True))
        out.append((p / p.sum(axis=1, keepdims=True)) @ v[rows].astype(np.float32))
    return np.concatenate(out)


@pytest.mark.parametrize("name", ["fa_fwd_subtiled", "fa_fwd", "fa_fwd_subtiled_sm100"])
@pytest.mark.parametrize("n", [256, 512])
@pytest.mark.parametrize("mma", ["late", "early"])
def test_fa_kernels_compute_attention_in_the_cpu_simulation(built, name, n, mma):
    """Two loop trips (the fewest the 3-stage partitions allow) and four: prologue, steady state and
    epilogue, with every mbarrier, the tcgen05 MMAs completing as late or as early as allowed, and P sharing
    S's columns modelled."""
    kernel = built[name][2]
    heads, d = 2, 128
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((heads * n, d)).astype(np.float16) for _ in range(3))
    o = np.full((heads * n, d), np.nan, dtype=np.float16)
    sub = kernel.manifest["descriptors"]["q_desc"]["block_shape"][0]
    descs = [Descriptor(q, [sub, d]), Descriptor(k, [128, d]), Descriptor(v, [128, d]),
             Descriptor(o, [sub, d])]
    consts = kernel.manifest["constexprs"]
    args = [*descs, d ** -0.5, n, *(consts[a] for a in kernel.manifest["arg_names"] if a in consts)]
    rows = sub * (2 if "SUB_M" in consts else 1)                          # query rows per program
    run_kernel(kernel.source, kernel.manifest["kernel"], args, (n // rows, heads), mma=mma)
    ref = _fa_reference(q, k, v, heads, n, d ** -0.5)
    assert float(np.abs(o.astype(np.float32) - ref).max() / np.abs(ref).max()) < 1e-2


def test_gemm_computes_a_product_in_the_cpu_simulation(built):
    kernel = built["gemm"][2]
    rng = np.random.default_rng(1)
    kdim = 320   # five K steps, the last one partial (zero padding of TMA)
    a = rng.standard_normal((128, kdim)).astype(np.float16)
    b = rng.standard_normal((128, kdim)).astype(np.float16)
    c = np.full((128, 128), np.nan, dtype=np.float16)
    consts = kernel.manifest["constexprs"]
    args = [Descriptor(a, [128, 64]), Descriptor(b, [128, 64]), Descriptor(c, [128, 128]), kdim,
            *(consts[x] for x in kernel.manifest["arg_names"] if x in consts)]
    run_kernel(kernel.source, "matmul", args, (1, 1))
    ref = a.astype(np.float32) @ b.astype(np.float32).T
    assert np.abs(c.astype(np.float32) - ref).max() / np.abs(ref).max() < 1e-2


def test_the_simulation_catches_a_missing_tmem_wait(built):
    """Dropping the wait before S is read (its MMA, completing late, has not run) gives wrong results or a
    deadlock."""
    kernel = built["fa_fwd_subtiled"][2]
    broken = re.sub(r"\n\s*mbarrier\.wait\(done_qk0_gemm\.[^\n]*", "", kernel.source)
    assert broken != kernel.source
    heads, d, n = 1, 128, 256
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((heads * n, d)).astype(np.float16) for _ in range(3))
    o = np.full((heads * n, d), np.nan, dtype=np.float16)
    descs = [Descriptor(q, [64, d]), Descriptor(k, [128, d]), Descriptor(v, [128, d]), Descriptor(o, [64, d])]
    consts = kernel.manifest["constexprs"]
    args = [*descs, d ** -0.5, n, *(consts[a] for a in kernel.manifest["arg_names"] if a in consts)]
    try:
        run_kernel(broken, kernel.manifest["kernel"], args, (n // 128, heads), timeout=2.0)
    except SimulationError:
        return
    ref = _fa_reference(q, k, v, heads, n, d ** -0.5)
    err = np.abs(o.astype(np.float32) - ref).max() / np.abs(ref).max()
    assert not err < 1e-2                                                 # NaN or far off


def test_a_split_accumulator_is_refused_with_its_op_and_line(tmp_path):
    """The correction step that splits an accumulator in halves (``tests/data/tmem_splits.py``) is not
    lowered: a clear error naming the TTGIR op and line (the split's loop-carried reshape is given a graph
    op by the folded-value rule, so the refusal comes from its layout, which has no Gluon mapping)."""
    spec = str(ROOT / "tests" / "data" / "tmem_splits.py") + "::rescale"
    sched = twill.schedule(twill.graph_from_kernel(spec, machine="b200"), "b200")
    with pytest.raises(CodegenError, match=r"(\(tt\.\w+|of [\w.]+) at TTGIR line \d+"):
        generate(sched, spec, "b200", tmp_path, compile=False)
