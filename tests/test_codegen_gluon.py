"""The Gluon backend (twill.codegen.gluon): generate + compile for sm_90 on the CPU, checked against the
schedule.

Every expected value is derived from the schedule, the graph or the generated text independently of what the
generator computed: partitions and warps from ``schedule.warp_groups``; ``setmaxnreg`` budgets from the PTX;
the Tensor Core and TMA issue order of each partition's steady loop from the schedule's ``start mod II``;
the shared memory from the graph's tiles times the schedule's buffer depths; spills from ptxas.
"""

from __future__ import annotations

import dataclasses
import itertools
import random
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("triton.experimental.gluon")

import twill
from twill.codegen.gluon import CodegenError, cpu_sim, generate, load
from twill.codegen.gluon.cpu_sim import Descriptor, Pointer, SimulationError, run_kernel
from twill.ir.machine import load_machine
from twill.schedule import OpSlot, WarpGroup

ROOT = Path(__file__).resolve().parents[1]
TARGETS = {
    "gemm": ("examples/gemm.py", "h100", {}),
    "fa_fwd": ("examples/flash_attention_fwd.py", "h200", {}),
    "fa_fwd_subtiled": ("examples/flash_attention_fwd_subtiled.py::attn_fwd_subtiled_sm90", "h200", {}),
    # streaming loads two iterations ahead: rings of 3, a value read two trips after it is made
    "fa_fwd_subtiled_p2": ("examples/flash_attention_fwd_subtiled.py::attn_fwd_subtiled_sm90", "h200",
                           {"prefetch": 2}),
}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = {}
    for name, (spec, machine, options) in TARGETS.items():
        graph = twill.graph_from_kernel(str(ROOT / spec), machine=machine)
        sched = twill.schedule(graph, machine, **options)
        kernel = generate(sched, str(ROOT / spec), machine, tmp_path_factory.mktemp(name))
        out[name] = (graph, sched, kernel)
    return out


def _functions(text: str) -> dict[str, str]:
    """Source of each generated ``@gluon.jit`` function, by name."""
    parts = re.split(r"\n@gluon\.jit\n", text)
    return {re.match(r"def (\w+)", p).group(1): p for p in parts[1:]}


def _steady(body: str) -> str:
    """The steady-state loop of a partition function: the lines indented under its first ``for t in range``
    (the pipelined body's; a kernel with a short-loop body has a second loop after ``else:``)."""
    lines = body.splitlines()
    at = next(i for i, line in enumerate(lines) if line.lstrip().startswith("for t in range("))
    indent = len(lines[at]) - len(lines[at].lstrip()) + 4
    out = []
    for line in lines[at + 1:]:
        if not line.startswith(" " * indent):
            break
        out.append(line)
    return "\n".join(out)


def _tagged(code: str, what: str) -> list[str]:
    return re.findall(rf"{what}\(.*# twill: (\w+)", code)


@pytest.mark.parametrize("name", list(TARGETS))
def test_partitions_are_the_warp_groups(built, name):
    _graph, sched, kernel = built[name]
    funcs = _functions(kernel.source)
    call = re.search(r"gl\.warp_specialize\(\[(.*)\], \[([\d, ]*)\], \[([\d, ]*)\]\)", kernel.source)
    parts = re.findall(r"\((_part\d+_g(\d+)), ", call.group(1))
    groups = {g.index: g for g in sched.warp_groups}
    assert sorted(int(g) for _, g in parts) == sorted(groups)           # one partition per warp group
    worker_warps = [int(x) for x in call.group(2).split(",") if x.strip()]
    worker_regs = [int(x) for x in call.group(3).split(",") if x.strip()]
    workers = [groups[int(g)] for _, g in parts[1:]]
    assert worker_warps == [g.warps for g in workers]
    assert worker_regs == [g.registers for g in workers]
    assert kernel.manifest["num_warps"] == groups[int(parts[0][1])].warps  # the default runs num_warps
    ptx = (kernel.folder / f"{kernel.report.kernel}.ptx").read_text()
    budgets = {int(x) for x in re.findall(r"setmaxnreg\.(?:inc|dec)\.sync\.aligned\.u32\s+(\d+)", ptx)}
    for g in workers:
        assert g.registers in budgets                                    # each worker's setmaxnreg
    default = kernel.report.partitions[0]
    assert default.setmaxnreg_ptx in budgets
    if default.setmaxnreg_ptx != groups[default.group].registers:      # Triton decides the default's budget
        assert any(f"Triton gives {default.setmaxnreg_ptx}" in n for n in kernel.report.not_kept)
    assert set(funcs) >= {f for f, _ in parts}


@pytest.mark.parametrize("name", list(TARGETS))
def test_issue_order_per_partition_is_the_schedule(built, name):
    graph, sched, kernel = built[name]
    funcs = _functions(kernel.source)
    ii = sched.ii
    for fname, body in funcs.items():
        m = re.match(r"_part\d+_g(\d+)", fname)
        if not m:
            continue
        group = int(m.group(1))
        mine = [n for n, s in sched.slots.items() if s.warp_group == group]
        order = sorted(mine, key=lambda n: (sched.slots[n].start % ii, list(sched.slots).index(n)))
        loop = _steady(body)
        gemms = [n for n in order if graph.op(n).kind == "gemm"]
        loads = [n for n in order if graph.op(n).kind == "tma_load"]
        assert _tagged(loop, "warpgroup_mma") == gemms
        assert _tagged(loop, "tma.async_copy_global_to_shared") == loads


@pytest.mark.parametrize("name", list(TARGETS))
def test_shared_memory_is_the_model_plus_barriers(built, name):
    graph, sched, kernel = built[name]
    depths = sched.buffer_depths()
    tiles = graph.fixed_smem + sum(depths.get(op.name, 1) * op.smem for op in graph.ops if op.smem)
    report = kernel.report
    assert report.shared_model_buffers == tiles
    store = report.shared_difference.get("epilogue store staging (not in the model)", 0)
    assert report.barrier_bytes == 8 * len(re.findall(r"mbarrier\.init\(", kernel.source)) or \
        report.barrier_bytes > 0
    rest = report.shared_compiled - tiles - store - report.barrier_bytes
    assert 0 <= rest <= 1024                                             # alignment only
    assert report.shared_compiled <= load_machine(sched.machine).smem_per_cta


@pytest.mark.parametrize("name", list(TARGETS))
def test_no_spills_where_the_model_fits(built, name):
    _graph, sched, kernel = built[name]
    assert all(g.registers_needed <= g.registers for g in sched.warp_groups)
    assert kernel.report.spill_store_bytes == 0 and kernel.report.spill_load_bytes == 0


@pytest.mark.parametrize("name", ["fa_fwd", "fa_fwd_subtiled", "fa_fwd_subtiled_p2"])
def test_ptxas_keeps_the_fa_forward_wgmma_pipeline(built, wgmma_serializations, name):
    """ptxas assembles the FA forward kernels without serializing their wgmmas: no C7511 / C7512 / C7515
    note when their PTX is assembled here, and none in the report. The plain FA forward's consumer carried
    a wgmma in flight across the loop's back-edge (the O accumulator, waited at the next trip's top); ptxas
    then serialized every wgmma of the kernel (C7512 at 8 consumer warps, C7515 in the FA grid's 128-row
    configs) until the generator waited for it before the back-edge."""
    _graph, _sched, kernel = built[name]
    ptx = (kernel.folder / f"{kernel.report.kernel}.ptx").read_text()
    assert "wgmma.mma_async" in ptx
    assert wgmma_serializations(ptx) == []
    assert not [n for n in kernel.report.not_kept if "instructions are serialized" in n]


def test_rings_have_the_schedule_depths(built):
    for graph, sched, kernel in built.values():
        depths = sched.buffer_depths()
        streaming = [op.name for op in graph.ops if op.kind == "tma_load"]
        for n in streaming:
            ring = re.search(rf"ring_{n} = gl\.allocate_shared_memory\([^,]+, \[(\d+),", kernel.source)
            assert int(ring.group(1)) == depths[n]


def test_ping_pong_between_the_consumer_groups(built):
    graph, sched, kernel = built["fa_fwd_subtiled"]
    tc_groups = {sched.slots[op.name].warp_group for op in graph.ops if op.kind == "gemm"}
    assert len(tc_groups) == 2
    for fname, body in _functions(kernel.source).items():
        g = re.match(r"_part\d+_g(\d+)", fname)
        if g and int(g.group(1)) in tc_groups:
            loop = _steady(body)
            assert "mbarrier.wait(turn.index(" in loop and "mbarrier.arrive(turn.index(" in loop


def test_saved_kernel_loads_without_twill(built):
    loader = (ROOT / "twill" / "codegen" / "gluon" / "loader.py").read_text()
    assert not re.search(r"^\s*(from|import) twill", loader, re.M)
    _graph, _sched, kernel = built["gemm"]
    launcher = load(kernel.folder)
    assert launcher.manifest["kernel"] == "matmul"
    with pytest.raises(ValueError, match="generated for"):
        launcher.arguments((None, None, None, 64), {"BLOCK_M": 64})


# ------------------------------------------------------------------------------------------ random loops
_ELEMENTWISE = ["x * 0.125", "x + 1.0", "tl.exp2(x)", "tl.maximum(x, 0.5)", "x - 2.0",
                "tl.exp2(x * 0.5 - 1.0)"]


def _chain_kernel(rng: random.Random, path: Path) -> tuple[str, list[str], bool, int]:
    bn = rng.choice([64, 128])
    steps = rng.sample(_ELEMENTWISE, rng.randint(1, 3))
    second = rng.random() < 0.6
    body = "\n".join(f"        x = {e}" for e in steps)
    tail = ("        acc = tl.dot(x.to(tl.float16), w, acc)" if second else "        acc = acc + x")
    lines = [
        "import triton",
        "import triton.language as tl",
        "",
        "",
        "@triton.jit",
        "def chain(a_desc, b_desc, w_desc, c_desc, K, BM: tl.constexpr, BN: tl.constexpr):",
        "    row = tl.program_id(0) * BM",
        "    acc = tl.zeros([BM, BN], dtype=tl.float32)",
        "    w = w_desc.load([0, 0])",
        "    for k0 in range(0, K, BN):",
        "        a = a_desc.load([row, k0])",
        "        b = b_desc.load([k0, 0])",
        "        x = tl.dot(a, b)",
        body,
        tail,
        "    c_desc.store([row, 0], acc.to(tl.float16))",
        "",
        "",
        f"TWILL_KERNELS = {{'chain': {{'signature': {{'a_desc': 'tensordesc<fp16[128, {bn}]>', "
        f"'b_desc': 'tensordesc<fp16[{bn}, {bn}]>', 'w_desc': 'tensordesc<fp16[{bn}, {bn}]>', "
        f"'c_desc': 'tensordesc<fp16[128, {bn}]>', 'K': 'i32'}}, 'constexprs': {{'BM': 128, 'BN': {bn}}}, "
        f"'num_warps': {rng.choice([4, 8])}, 'num_stages': 3, 'default': True}}}}",
    ]
    src = "\n".join(lines) + "\n"
    path.write_text(src)
    return str(path), steps, second, bn


def _chain_reference(a, b, w, steps, second, bn):
    """numpy model of the chain kernel: per K block ``x = a_k @ b_k``, the elementwise steps, then the
    accumulation (a second GEMM with ``w`` on fp16 ``x``, or a sum)."""
    acc = np.zeros((a.shape[0], bn), dtype=np.float32)
    for k0 in range(0, a.shape[1], bn):
        x = a[:, k0:k0 + bn].astype(np.float32) @ b[k0:k0 + bn].astype(np.float32)
        for step in steps:
            x = eval(step.replace("tl.", "np."), {"np": np, "x": x})
        acc = acc + (x.astype(np.float16).astype(np.float32) @ w.astype(np.float32) if second else x)
    return acc


def _moved(sched, op: str, warps: int):
    """``sched`` with ``op`` on a new warp group of ``warps`` warps (a relabelled schedule with hand-offs)."""
    new = max(g.index for g in sched.warp_groups) + 1
    slots = {n: (OpSlot(n, s.start, s.stage, new) if n == op else s) for n, s in sched.slots.items()}
    groups = [dataclasses.replace(g, ops=tuple(o for o in g.ops if o != op),
                                  registers=g.registers if g.role == "producer" else 160)
              for g in sched.warp_groups]
    groups.append(WarpGroup(new, (op,), warps, 160, 96, "consumer"))
    return dataclasses.replace(sched, slots=slots, warp_groups=tuple(groups))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_loops_generate_and_compile(tmp_path, seed):
    rng = random.Random(seed)
    path, steps, second, bn = _chain_kernel(rng, tmp_path / f"chain{seed}.py")
    graph = twill.graph_from_kernel(path, machine="h200")
    options = rng.choice([{}, {"strategy": "swp"}, {"max_groups": 3}, {"prefetch": 2}])
    sched = twill.schedule(graph, "h200", **options)
    if seed == 3:   # an elementwise op on its own group: register hand-offs through shared memory
        op = next(o.name for o in graph.ops if o.kind in ("alu", "exp"))
        sched = _moved(sched, op, 4)
    kernel = generate(sched, path, "h200", tmp_path / "out")
    fns = [f for f in _functions(kernel.source) if f.startswith("_part")]
    assert len(fns) == len(sched.warp_groups)
    assert kernel.report.shared_compiled <= load_machine("h200").smem_per_cta
    if seed == 3:
        assert "stage_0.index(" in kernel.source and ".store(" in kernel.source
        assert kernel.report.shared_model_buffers > graph.fixed_smem
    # and it computes the loop (three K steps) in the CPU simulation of its barriers and wgmmas
    data = np.random.default_rng(seed)
    a = (data.standard_normal((128, 3 * bn)) * 0.1).astype(np.float16)
    b = (data.standard_normal((3 * bn, bn)) * 0.1).astype(np.float16)
    w = (data.standard_normal((bn, bn)) * 0.1).astype(np.float16)
    c = np.full((128, bn), np.nan, dtype=np.float16)
    descs = [Descriptor(a, [128, bn]), Descriptor(b, [bn, bn]), Descriptor(w, [bn, bn]),
             Descriptor(c, [128, bn])]
    run_kernel(kernel.source, "chain", [*descs, 3 * bn, 128, bn], (1, 1))
    ref = _chain_reference(a, b, w, steps, second, bn)
    assert np.abs(c.astype(np.float32) - ref).max() <= 1e-2 * np.abs(ref).max() + 1e-3


# ------------------------------------------------------------------------------------------ bad inputs
def test_schedule_of_another_graph_is_refused(built):
    _graph, sched, _kernel = built["gemm"]
    with pytest.raises(CodegenError, match="not one of this kernel's loop"):
        generate(sched, str(ROOT / "examples/flash_attention_fwd.py"), "h100", compile=False)


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
"""


def test_op_without_lowering_names_op_kind_and_line(tmp_path):
    """``math.sin`` has no Gluon lowering: the error names the graph op made of it, its kind and the TTGIR
    line (found here in the kernel's TTGIR text)."""
    from twill.frontend.compile import compile_to_ttgir, load_kernel
    from twill.frontend.lower import lower_loop
    from twill.frontend.ttgir import parse_ttgir

    spec = tmp_path / "sine.py"
    spec.write_text(_SINE)
    text = compile_to_ttgir(load_kernel(str(spec)), target="sm_90").pre_swp
    line = next(i + 1 for i, row in enumerate(text.splitlines()) if "math.sin" in row)
    lowering = lower_loop(parse_ttgir(text), load_machine("h200"), name="sine")
    graph = lowering.graph
    node = graph.op(next(n for n, ms in lowering.members.items() if any(m.line == line for m in ms)))
    sched = twill.schedule(graph, "h200")
    want = rf"graph op '{node.name}' \(kind {node.kind}\) is made of math\.sin at TTGIR line {line}\b"
    with pytest.raises(CodegenError, match=want):
        generate(sched, str(spec), "h200", tmp_path / "out", compile=False)


def test_kernel_over_the_machines_shared_memory_is_refused(built, tmp_path):
    _graph, sched, kernel = built["fa_fwd_subtiled"]
    small = dataclasses.replace(load_machine("h200"), smem_per_cta=kernel.report.shared_compiled - 1)
    want = rf"needs {kernel.report.shared_compiled} B .* \({small.smem_per_cta} B\)"
    (tmp_path / "mine.txt").write_text("kept")
    with pytest.raises(CodegenError, match=want):
        generate(sched, str(ROOT / TARGETS["fa_fwd_subtiled"][0]), small, tmp_path)
    # no half-written kernel is left behind (kernel.py, its PTX), and nothing else is touched
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.txt"]
    with pytest.raises(CodegenError, match=want):
        generate(sched, str(ROOT / TARGETS["fa_fwd_subtiled"][0]), small, tmp_path / "new")
    assert not (tmp_path / "new").exists()


def test_machine_of_another_schedule_is_refused(built):
    _graph, sched, _kernel = built["gemm"]
    with pytest.raises(CodegenError, match="solved for 'h100', not 'b200'"):
        generate(sched, str(ROOT / "examples/gemm.py"), "b200", compile=False)


# ------------------------------------------------------------------------------------------ CPU simulation
def _fa_reference(q, k, v, heads, n, scale):
    out = []
    for h in range(heads):
        rows = slice(h * n, (h + 1) * n)
        s = (q[rows].astype(np.float32) @ k[rows].astype(np.float32).T) * scale
        p = np.exp(s - s.max(axis=1, keepdims=True))
        out.append((p / p.sum(axis=1, keepdims=True)) @ v[rows].astype(np.float32))
    return np.concatenate(out)


def _simulate_fa(kernel, n, heads=2, d=128, seed=0):
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((heads * n, d)).astype(np.float16) for _ in range(3))
    o = np.full((heads * n, d), np.nan, dtype=np.float16)
    sub = kernel.manifest["descriptors"]["q_desc"]["block_shape"][0]
    descs = [Descriptor(q, [sub, d]), Descriptor(k, [128, d]), Descriptor(v, [128, d]),
             Descriptor(o, [sub, d])]
    consts = kernel.manifest["constexprs"]
    args = [*descs, d ** -0.5, n, *(consts[a] for a in kernel.manifest["arg_names"] if a in consts)]
    run_kernel(kernel.source, kernel.manifest["kernel"], args, (n // 128, heads))
    ref = _fa_reference(q, k, v, heads, n, d ** -0.5)
    return float(np.abs(o.astype(np.float32) - ref).max() / np.abs(ref).max())


@pytest.mark.parametrize("name", ["fa_fwd", "fa_fwd_subtiled", "fa_fwd_subtiled_p2"])
@pytest.mark.parametrize("n", [128, 384])
def test_fa_kernels_compute_attention_in_the_cpu_simulation(built, name, n):
    """One loop trip and three: the prologue, steady state and epilogue with every barrier modelled (the
    prefetch-2 sub-tiled kernel was wrong on the H200 at N >= 256 before the epilogue fix)."""
    assert _simulate_fa(built[name][2], n) < 1e-2


def test_gemm_computes_a_product_in_the_cpu_simulation(built):
    kernel = built["gemm"][2]
    rng = np.random.default_rng(1)
    m = n = 128
    kdim = 320   # five K steps, the last one partial (zero padding of TMA)
    a = rng.standard_normal((m, kdim)).astype(np.float16)
    b = rng.standard_normal((n, kdim)).astype(np.float16)
    c = np.full((m, n), np.nan, dtype=np.float16)
    consts = kernel.manifest["constexprs"]
    args = [Descriptor(a, [128, 64]), Descriptor(b, [128, 64]), Descriptor(c, [128, 128]), kdim,
            *(consts[x] for x in kernel.manifest["arg_names"] if x in consts)]
    run_kernel(kernel.source, "matmul", args, (1, 1))
    ref = a.astype(np.float32) @ b.astype(np.float32).T
    assert np.abs(c.astype(np.float32) - ref).max() / np.abs(ref).max() < 1e-2


def _how_caught(kernel, n):
    """How the simulation rejects ``kernel`` on an ``n``-token FA forward: "race", "deadlock" or "wrong"
    (a result off by more than 10 %); "passed" when it does not."""
    try:
        return "wrong" if _simulate_fa(kernel, n) > 0.1 else "passed"
    except SimulationError as exc:
        return next((w for w in ("race", "deadlock") if w in str(exc)), str(exc))


def test_the_simulation_catches_a_missing_wait_and_a_missing_release(built):
    """A consumer that never waits for K is a data race, which the partitions' thread interleaving decides:
    it reads a K tile whose copy is in flight (a race), or runs ahead of the copy's issue and reads stale
    data (wrong results), or releases ring slots early enough to put the ring's barriers out of step (a
    deadlock, as it can hang the GPU). Each is a catch; passing is not."""
    kernel = built["fa_fwd_subtiled"][2]
    blind = dataclasses.replace(kernel, source=kernel.source.replace("mbarrier.wait(ready_k.index(",
                                                                          "(lambda *a: None)(ready_k.index("))
    assert blind.source != kernel.source
    assert _how_caught(blind, 384) in {"race", "deadlock", "wrong"}
    no_release = re.sub(r"mbarrier\.arrive\(empty_v[^\n]*", "pass", kernel.source)
    x = np.random.default_rng(0).standard_normal((512, 128)).astype(np.float16)
    descs = [Descriptor(x, [64, 128]), Descriptor(x, [128, 128]), Descriptor(x, [128, 128]),
             Descriptor(np.zeros_like(x), [64, 128])]
    with pytest.raises(SimulationError, match="deadlock"):
        run_kernel(no_release, "attn_fwd_subtiled_sm90", [*descs, 0.1, 512, 64, 128, 128], (1, 1),
                   timeout=2.0)


_COPY = """
@gluon.jit
def copy(src, dst):
    bar = gl.allocate_shared_memory(gl.int64, [1, 1], mbarrier.MBarrierLayout())
    mbarrier.init(bar.index(0), count=1)
    buf = gl.allocate_shared_memory(gl.float16, [2, 64, 64], src.layout)
    mbarrier.expect(bar.index(0), 8192)
    tma.async_copy_global_to_shared(src, [0, 0], bar.index(0), buf.index(SLOT))
    WAIT
    READ
"""


@pytest.mark.parametrize("read", ["tma.async_copy_shared_to_global(dst, [0, 0], buf.index(0))",
                                  "dst_tile = buf.index(0).load(None)",
                                  "warpgroup_mma_wait(0, [warpgroup_mma(buf.index(0), buf.index(0), 0.0)])",
                                  "tma.async_copy_global_to_shared(src, [0, 0], bar.index(0), buf.index(0))",
                                  "buf.index(0).store(gl.full([64, 64], 1.0, gl.float16))"])
def test_a_read_of_a_tile_whose_copy_is_in_flight_is_a_race(read):
    """Deterministic, with one thread: without the wait the access (a TMA store, a load, a wgmma operand, a
    second copy, a store from registers) meets the first copy in flight; with it, or when the copy went to
    the other slot, it does not."""
    x = np.arange(64 * 64, dtype=np.float16).reshape(64, 64)

    def run(wait, slot):
        y = np.zeros_like(x)
        src = _COPY.replace("WAIT", wait).replace("READ", read).replace("SLOT", str(slot))
        run_kernel(src, "copy", [Descriptor(x, [64, 64]), Descriptor(y, [64, 64])], (1,))
        return y
    with pytest.raises(SimulationError, match=r"race: .* while a TMA copy into it is in flight"):
        run("pass", 0)
    run("pass", 1)    # the other slot: no overlap
    y = run("mbarrier.wait(bar.index(0), 0)", 0)
    if read.startswith("tma.async_copy_shared"):
        assert np.array_equal(y, x)


def test_the_simulation_does_not_depend_on_the_clock(built, monkeypatch):
    """A loaded machine, here a clock that jumps 100 s at every look, neither makes a correct kernel look
    deadlocked nor hides a deadlock: the simulator finds a deadlock by construction (every running partition
    waits on a barrier state it has already seen), not by how long a wait took. Before, a wait longer than
    ``timeout`` seconds was a deadlock, which a loaded CI machine could reach with a correct kernel."""
    ticks = itertools.count()
    clock = SimpleNamespace(monotonic=lambda: 100.0 * next(ticks))
    monkeypatch.setattr(cpu_sim, "time", clock, raising=False)
    kernel = built["fa_fwd_subtiled"][2]
    assert _simulate_fa(kernel, 128) < 1e-2
    no_release = re.sub(r"mbarrier\.arrive\(empty_v[^\n]*", "pass", kernel.source)
    x = np.random.default_rng(0).standard_normal((512, 128)).astype(np.float16)
    descs = [Descriptor(x, [64, 128]), Descriptor(x, [128, 128]), Descriptor(x, [128, 128]),
             Descriptor(np.zeros_like(x), [64, 128])]
    with pytest.raises(SimulationError, match="every partition still running waits on an mbarrier"):
        run_kernel(no_release, "attn_fwd_subtiled_sm90", [*descs, 0.1, 512, 64, 128, 128], (1, 1))


# ------------------------------------------------------------------------------------------ schedule variety
def _relabelled(sched):
    """``sched`` with its warp-group indices reversed (the same schedule, other labels)."""
    idx = sorted(g.index for g in sched.warp_groups)
    new = dict(zip(idx, reversed(idx), strict=True))
    slots = {n: OpSlot(n, s.start, s.stage, new[s.warp_group]) for n, s in sched.slots.items()}
    groups = tuple(dataclasses.replace(g, index=new[g.index]) for g in sched.warp_groups)
    return dataclasses.replace(sched, slots=slots, warp_groups=groups)


def _shifted(sched):
    """``sched`` with one op moved: the first op (by name) that can start one cycle later, else one cycle
    earlier, else one II later (a stage later), with the length grown by the move, that ``twill.verify``
    accepts (its stage follows its start); None when no op can move."""
    for delta in (1, -1, sched.ii):
        for n in sorted(sched.slots):
            s = sched.slots[n]
            start = s.start + delta
            if start < 0:
                continue
            slots = dict(sched.slots)
            slots[n] = OpSlot(n, start, start // sched.ii, s.warp_group)
            cand = dataclasses.replace(sched, slots=slots, length=sched.length + max(delta, 0))
            try:
                twill.verify(cand)
            except Exception:   # any violated constraint (ScheduleError): try the next move
                continue
            return cand
    return None


def _staged(sched):
    """``sched`` with its latest-starting op that ``twill.verify`` accepts one II later (a stage more: a
    three-stage partition, an epilogue of two trips), the length one II longer; None when none can."""
    for n in sorted(sched.slots, key=lambda n: (-sched.slots[n].start, n)):
        s = sched.slots[n]
        start = s.start + sched.ii
        slots = dict(sched.slots)
        slots[n] = OpSlot(n, start, start // sched.ii, s.warp_group)
        cand = dataclasses.replace(sched, slots=slots, length=sched.length + sched.ii)
        try:
            twill.verify(cand)
        except Exception:   # any violated constraint (ScheduleError): try the next op
            continue
        return cand
    return None


VARIANTS = {
    "gemm": [("prefetch", {"prefetch": 2}), ("relabel", {}), ("shift", {}), ("stage", {})],
    "fa_fwd": [("prefetch", {"prefetch": 2}), ("relabel", {}), ("shift", {}), ("stage", {})],
    "fa_fwd_subtiled": [("relabel", {}), ("shift", {}), ("stage", {}), ("relabel", {"prefetch": 2}),
                        ("shift", {"prefetch": 2}), ("stage", {"prefetch": 2})],
}


@pytest.mark.parametrize("name,variant,options",
                         [(n, v, o) for n, vs in VARIANTS.items() for v, o in vs],
                         ids=[f"{n}-{v}-{'p2' if o else 'p1'}" for n, vs in VARIANTS.items() for v, o in vs])
def test_other_valid_schedules_generate_and_compute(tmp_path, name, variant, options):
    """The generator against schedule variety: another solve (``prefetch``), the same schedule with its
    warp groups relabelled, one op moved within its slack, one op moved a stage later; each is accepted by
    ``twill.verify``, compiles, keeps the schedule's per-partition Tensor Core order, and computes the
    kernel in the CPU simulation (one or two and three loop trips for the FA forwards, five K steps for
    the GEMM) against numpy."""
    spec, machine, _ = TARGETS[name]
    graph = twill.graph_from_kernel(str(ROOT / spec), machine=machine)
    sched = twill.schedule(graph, machine, **options)
    if variant == "relabel":
        sched = _relabelled(sched)
    elif variant == "shift":
        moved = _shifted(sched)
        assert moved is not None, "no op of the schedule has a cycle of slack"
        sched = moved
    elif variant == "stage":
        deeper = _staged(sched)
        assert deeper is not None and deeper.stages == sched.stages + 1
        sched = deeper
    twill.verify(sched)
    kernel = generate(sched, str(ROOT / spec), machine, tmp_path / "out")
    ii = sched.ii
    for fname, body in _functions(kernel.source).items():
        m = re.match(r"_part\d+_g(\d+)", fname)
        if not m:
            continue
        mine = [n for n, s in sched.slots.items() if s.warp_group == int(m.group(1))]
        order = sorted(mine, key=lambda n: (sched.slots[n].start % ii, list(sched.slots).index(n)))
        if "for t in range(" in body:
            assert _tagged(_steady(body), "warpgroup_mma") == [n for n in order if graph.op(n).kind == "gemm"]
    if name == "gemm":
        rng = np.random.default_rng(1)
        a = rng.standard_normal((128, 320)).astype(np.float16)
        b = rng.standard_normal((128, 320)).astype(np.float16)
        c = np.full((128, 128), np.nan, dtype=np.float16)
        consts = kernel.manifest["constexprs"]
        blocks = kernel.manifest["descriptors"]
        args = [Descriptor(a, blocks["a_desc"]["block_shape"]),
                Descriptor(b, blocks["b_desc"]["block_shape"]),
                Descriptor(c, blocks["c_desc"]["block_shape"]), 320,
                *(consts[x] for x in kernel.manifest["arg_names"] if x in consts)]
        run_kernel(kernel.source, "matmul", args, (1, 1))
        ref = a.astype(np.float32) @ b.astype(np.float32).T
        assert np.abs(c.astype(np.float32) - ref).max() / np.abs(ref).max() < 1e-2
    else:   # one trip and three (and two with a three-stage partition: one trip is its short-loop body)
        for n in ((128, 384) if sched.stages <= 2 else (128, 256, 384)):
            assert _simulate_fa(kernel, n) < 1e-2


# ------------------------------------------------------------------------------------------ decode attention
DECODE = str(ROOT / "examples/decode_attention.py")


@pytest.fixture(scope="module")
def decode(tmp_path_factory):
    """Decode attention's h200 schedule (pointer loads on a producer group, staged in shared memory) and its
    generated kernel, with the graph op -> TTGIR lowering."""
    from twill.frontend.compile import compile_to_ttgir, load_kernel
    from twill.frontend.lower import lower_loop
    from twill.frontend.ttgir import parse_ttgir

    graph = twill.graph_from_kernel(DECODE, machine="h200")
    sched = twill.schedule(graph, "h200")
    lowering = lower_loop(parse_ttgir(compile_to_ttgir(load_kernel(DECODE), target="sm_90").pre_swp),
                          load_machine("h200"), name="decode_attn")
    kernel = generate(sched, DECODE, "h200", tmp_path_factory.mktemp("decode"))
    return graph, sched, lowering, kernel


def _decode_reference(q, k, v, block_n):
    """numpy (fp32) model of ``examples/decode_attention.py`` for ``q [H, D]``, ``k, v [N, H, D]``: the
    kernel masks its loads only, so the zero-filled rows of a partial last tile take part in the softmax
    with score 0 (and value 0); the same as attention over the N rows when N is a multiple of BLOCK_N."""
    n, heads, d = k.shape
    pad = -(-n // block_n) * block_n
    kp, vp = (np.zeros((pad, heads, d), np.float32) for _ in range(2))
    kp[:n], vp[:n] = k, v
    s = np.einsum("hd,nhd->hn", q.astype(np.float32), kp) * d ** -0.5
    p = np.exp(s - s.max(axis=1, keepdims=True))
    return np.einsum("hn,nhd->hd", p / p.sum(axis=1, keepdims=True), vp)


def _simulate_decode(kernel, n, heads=2, seed=0):
    rng = np.random.default_rng(seed)
    consts = kernel.manifest["constexprs"]
    d = consts["BLOCK_D"]
    q = rng.standard_normal((heads, d)).astype(np.float16)
    k, v = (rng.standard_normal((n, heads, d)).astype(np.float16) for _ in range(2))
    out = np.full((heads, d), np.nan, dtype=np.float16)
    values = {"Q_ptr": Pointer(q), "K_ptr": Pointer(k), "V_ptr": Pointer(v), "Out_ptr": Pointer(out),
              "softmax_scale": d ** -0.5, "N": n, "H": heads, "D": d, "stride_qh": d, "stride_kn": heads * d,
              "stride_kh": d, "stride_vn": heads * d, "stride_vh": d, "stride_oh": d, **consts}
    run_kernel(kernel.source, kernel.manifest["kernel"], [values[a] for a in kernel.manifest["arg_names"]],
               (heads,))
    ref = _decode_reference(q, k, v, consts["BLOCK_N"])
    return float(np.abs(out.astype(np.float32) - ref).max() / np.abs(ref).max())


def test_decode_partitions_and_budgets_are_the_schedules(decode):
    _graph, sched, _lowering, kernel = decode
    call = re.search(r"gl\.warp_specialize\(\[(.*)\], \[([\d, ]*)\], \[([\d, ]*)\]\)", kernel.source)
    parts = [int(g) for g in re.findall(r"\(_part\d+_g(\d+), ", call.group(1))]
    groups = {g.index: g for g in sched.warp_groups}
    assert sorted(parts) == sorted(groups)
    assert [int(x) for x in call.group(2).split(",")] == [groups[g].warps for g in parts[1:]]
    assert [int(x) for x in call.group(3).split(",")] == [groups[g].registers for g in parts[1:]]
    assert kernel.manifest["num_warps"] == groups[parts[0]].warps
    ptx = (kernel.folder / "decode_attn.ptx").read_text()
    budgets = {int(x) for x in re.findall(r"setmaxnreg\.(?:inc|dec)\.sync\.aligned\.u32\s+(\d+)", ptx)}
    assert {groups[g].registers for g in parts[1:]} <= budgets
    default = kernel.report.partitions[0]
    assert default.setmaxnreg_ptx in budgets and default.setmaxnreg_ptx >= groups[parts[0]].registers_needed


def test_decode_loads_are_issued_by_their_group_and_staged_with_the_schedules_depths(decode):
    """Each pointer load is a ``gl.load`` in the partition of its warp group, stored into a staging ring of
    the schedule's depth; its reader (another group) loads the ring; the producer's steady loop stores in
    the schedule's ``start mod II`` order."""
    graph, sched, lowering, kernel = decode
    funcs = _functions(kernel.source)
    depths = sched.buffer_depths()
    loads = [op.name for op in graph.ops if op.kind == "load"]
    assert loads
    body_of = {int(re.match(r"_part\d+_g(\d+)", f).group(1)): b for f, b in funcs.items()
               if f.startswith("_part")}
    producer = body_of[sched.slots[loads[0]].warp_group]
    for n in loads:
        value = py_name_of(lowering.members[n][0].results[0].name)
        mine = body_of[sched.slots[n].warp_group]
        assert re.search(rf"{value}_\w+ = gl\.load\(", mine)
        ring = re.search(rf"stage_(\d+)\.index\([^\n]*\)\.store\((?:pf_)?{value}[_)]", mine).group(1)
        alloc = re.search(rf"stage_{ring} = gl\.allocate_shared_memory\(gl\.float16, \[(\d+), ",
                          kernel.source)
        assert int(alloc.group(1)) == depths[n]
        readers = {sched.slots[e.dst].warp_group for e in graph.out_edges(n)}
        for g in readers - {sched.slots[n].warp_group}:
            assert f"stage_{ring}.index(" in body_of[g] and ").load(" in body_of[g]
    order = sorted(loads, key=lambda n: (sched.slots[n].start % sched.ii, list(sched.slots).index(n)))
    stored = re.findall(r"stage_\d+\.index\([^\n]*\)\.store\((?:pf_)?(\w+?)(?:_s\d+)?\)", _steady(producer))
    names = {py_name_of(lowering.members[n][0].results[0].name): n for n in loads}
    assert [names[s] for s in stored] == order


def test_decode_producer_of_two_stages_stores_in_the_trip_and_computes(tmp_path, decode):
    """Every op but the first load one II later (a two-stage producer, the other load in its second stage;
    each delay grows or stays, accepted by ``twill.verify``): its loads are not carried across trips (a
    load of the last stage first runs inside the loop), each trip still issues both loads before its
    stores, and the kernel computes decode attention."""
    graph, sched, _lowering, _kernel = decode
    loads = [op.name for op in graph.ops if op.kind == "load"]
    first = min(loads, key=lambda n: (sched.slots[n].start, n))
    slots = {n: o if n == first else OpSlot(n, o.start + sched.ii, o.stage + 1, o.warp_group)
             for n, o in sched.slots.items()}
    moved = dataclasses.replace(sched, slots=slots, length=sched.length + sched.ii)
    s = sched.slots[first]
    twill.verify(moved)
    kernel = generate(moved, DECODE, "h200", tmp_path / "out")
    producer = next(b for f, b in _functions(kernel.source).items()
                    if f.startswith("_part") and int(re.match(r"_part\d+_g(\d+)", f).group(1))
                    == s.warp_group)
    steady = _steady(producer)
    assert "pf_" not in producer
    assert max(m.start() for m in re.finditer(r"= gl\.load\(", steady)) < \
        min(m.start() for m in re.finditer(r"\.store\(", steady))
    for n in (64, 100, 192, 333):
        assert _simulate_decode(kernel, n) < 1e-2


def test_decode_producer_issues_its_loads_a_trip_ahead(decode):
    """The schedule's streaming loads are issued ``prefetch`` (1) II before their slot (docs/model.md): the
    producer's steady trip issues every ``gl.load`` of iteration ``t`` first, then stores the registers of
    iteration ``t - 1`` (carried from the previous trip) into the staging slots, so two iterations' loads
    are in flight while the stores wait; the last iteration's are stored after the loop."""
    graph, sched, _lowering, kernel = decode
    assert sched.problem.options.prefetch >= 1
    loads = [op.name for op in graph.ops if op.kind == "load"]
    producer = next(b for f, b in _functions(kernel.source).items()
                    if f.startswith("_part") and int(re.match(r"_part\d+_g(\d+)", f).group(1))
                    == sched.slots[loads[0]].warp_group)
    steady = _steady(producer)
    issued = [m.start() for m in re.finditer(r"= gl\.load\(", steady)]
    stores = [m.start() for m in re.finditer(r"\.store\(pf_", steady)]
    assert len(issued) == len(stores) == len(loads)
    assert max(issued) < min(stores)
    assert all("index((((t) - 1) % " in line for line in steady.splitlines() if ".store(pf_" in line)
    after = producer.split("for t in range(", 1)[1].split("\n    else:", 1)[0]
    assert after.count(".store(pf_") == 2 * len(loads)      # in the loop, and once more after it


def py_name_of(ttgir_name):
    """The generator's Python name of a TTGIR value (``%k_33`` -> ``k_33``)."""
    return ttgir_name.lstrip("%")


def test_decode_shared_memory_is_the_staging_plus_barriers(decode):
    """Compiled shared memory = the staged tiles (TTGIR load bytes x the schedule's depth) + the mbarriers
    (two per ring slot) + what the report names as Triton's scratch (the cross-warp reductions)."""
    graph, sched, lowering, kernel = decode
    depths = sched.buffer_depths()
    tiles = sum(lowering.members[op.name][0].results[0].type.nbytes * depths[op.name]
                for op in graph.ops if op.kind == "load")
    report = kernel.report
    assert report.shared_model_buffers == tiles
    assert report.barrier_bytes == 8 * 2 * sum(depths[op.name] for op in graph.ops if op.kind == "load")
    scratch = report.shared_difference.get("alignment and Triton scratch", 0)
    assert report.shared_compiled == tiles + report.barrier_bytes + scratch
    assert 0 <= scratch <= 4096
    assert set(report.shared_difference) <= {"mbarriers", "alignment and Triton scratch"}


def test_decode_short_loops_take_a_sequential_body(tmp_path, decode):
    """A partition of three stages (a prologue of two trips; the solver's schedule, whose partitions run one
    stage each, with its latest op moved two IIs later, accepted by ``twill.verify``): a one-trip loop takes
    the second body of each partition, the schedule's ops one iteration after the other in start order."""
    graph, sched, lowering, _kernel = decode
    while max(s.stage for s in sched.slots.values()) < 2:
        sched = _staged(sched)
        assert sched is not None
    twill.verify(sched)
    kernel = generate(sched, DECODE, "h200", tmp_path / "out")
    stages = {g.index: 1 + max(s.stage for s in sched.slots.values() if s.warp_group == g.index)
              for g in sched.warp_groups}
    short = max(stages.values()) - 1
    assert short >= 2
    names = {py_name_of(lowering.members[op.name][0].results[0].name): op.name
             for op in graph.ops if op.kind == "load"}
    for fname, body in _functions(kernel.source).items():
        if not fname.startswith("_part"):
            continue
        group = int(re.match(r"_part\d+_g(\d+)", fname).group(1))
        assert f"    if n_iter >= {short}:" in body and f"    else:   # fewer than {short} iterations" in body
        seq = body.split("    else:   # fewer than", 1)[1]
        assert "for t in range(0, n_iter):" in seq and "# prologue" not in seq
        order = sorted((n for n, s in sched.slots.items() if s.warp_group == group and n in names.values()),
                       key=lambda n: (sched.slots[n].start, list(sched.slots).index(n)))
        stored = re.findall(r"stage_\d+\.index\([^\n]*\)\.store\(x_(\w+?)_s\d+\)", seq)
        assert [names[v] for v in stored] == order      # loads of one iteration in start order


def test_decode_has_no_spills(decode):
    _graph, sched, _lowering, kernel = decode
    assert all(g.registers_needed <= g.registers for g in sched.warp_groups)
    assert kernel.report.spill_store_bytes == 0 and kernel.report.spill_load_bytes == 0


@pytest.mark.parametrize("n", [64, 40, 128, 100, 320, 333])
def test_decode_computes_attention_in_the_cpu_simulation(decode, n):
    """One trip (the short-loop body: fewer iterations than the three-stage prologue), two and five or six;
    N a multiple of BLOCK_N (64) and not (the masked last tile); output pre-filled with NaN."""
    assert _simulate_decode(decode[3], n) < 1e-2


@pytest.mark.parametrize("variant", ["relabel", "shift", "stage"])
def test_decode_other_valid_schedules_generate_and_compute(tmp_path, decode, variant):
    """The decode schedule with its warp groups relabelled, one op moved in its slack, the latest op a stage
    later (a four-stage consumer: loops of one and two trips take the short-loop body); each is accepted by
    ``twill.verify``, compiles and computes decode attention in the CPU simulation."""
    _graph, sched, _lowering, _kernel = decode
    sched = {"relabel": _relabelled, "shift": _shifted, "stage": _staged}[variant](sched)
    assert sched is not None
    twill.verify(sched)
    kernel = generate(sched, DECODE, "h200", tmp_path / "out")
    assert kernel.report.spill_store_bytes == 0
    prologue = max(1 + max(s.stage for n, s in sched.slots.items() if s.warp_group == g.index)
                   for g in sched.warp_groups) - 1
    assert (f"if n_iter >= {prologue}:" in kernel.source) == (prologue >= 2)   # the short-loop body
    for n in (64, 100, 192, 333):
        assert _simulate_decode(kernel, n) < 1e-2


def test_the_default_partition_is_the_group_that_opens_the_tensor_core_order(tmp_path):
    """Among groups that Triton's leftover budget serves equally well, the default partition is the one
    whose first Tensor Core op starts earliest (measured: the other choices ran 25 % slower on the H200).
    The sub-tiled FA forward's two consumer groups are swapped by label, so the lower index no longer
    opens the order: the default must follow the schedule, not the label."""
    spec, machine, _ = TARGETS["fa_fwd_subtiled"]
    graph = twill.graph_from_kernel(str(ROOT / spec), machine=machine)
    sched = twill.schedule(graph, machine)
    consumers = sorted(g.index for g in sched.warp_groups if g.registers == max(w.registers
                                                                             for w in sched.warp_groups))
    assert len(consumers) == 2
    a, b = consumers
    swap = {a: b, b: a}
    slots = {n: OpSlot(n, s.start, s.stage, swap.get(s.warp_group, s.warp_group))
             for n, s in sched.slots.items()}
    groups = tuple(dataclasses.replace(g, index=swap.get(g.index, g.index)) for g in sched.warp_groups)
    swapped = dataclasses.replace(sched, slots=slots, warp_groups=groups)
    twill.verify(swapped)
    gemms = [n for n in swapped.slots if graph.op(n).kind == "gemm"]
    opener = swapped.slots[min(gemms, key=lambda n: (swapped.slots[n].start, n))].warp_group
    kernel = generate(swapped, str(ROOT / spec), machine, tmp_path / "out", compile=False)
    assert kernel.report.partitions[0].group == opener


@pytest.mark.parametrize("shape,element,width", [
    ((128, 32), "f16", 64), ((64, 64), "f16", 128), ((128, 128), "f32", 128), ((128, 48), "f16", 32),
    ((128, 8), "f16", 0), ((4, 64), "f16", 0), ((128,), "f32", 0), ((128, 64), "i1", 0)])
def test_staging_swizzle_is_the_widest_the_rows_allow(shape, element, width):
    """The NVMMA swizzle of a staging buffer: 128, 64 or 32 B, the widest dividing the row's bytes (32 x 2,
    64 x 2, 128 x 4, 48 x 2 = 96 B), none for a row under 32 B, fewer than 8 rows, a rank-1 value or a
    1-bit element; the layout text is an unswizzled ``SwizzledSharedLayout`` exactly when it is 0."""
    from twill.codegen.gluon.layouts import staging_layout, staging_swizzle

    assert staging_swizzle(shape, element) == width
    text = staging_layout(shape, element)
    assert text.startswith("gl.SwizzledSharedLayout(1, 1, 1") == (width == 0)
    if width:
        assert f"swizzle_byte_width={width}," in text and f"rank={len(shape)}" in text
