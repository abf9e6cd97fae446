"""Frontend tests: Triton kernels and TTGIR files become the loop graphs the paper draws.

Everything runs on the CPU (Triton compiles for sm_90 / sm_100 without a GPU). Expected values are
derived from the kernels' known structure and the machine constants, never from snapshots of the output.
"""

from __future__ import annotations

import importlib.util
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest

from twill.errors import FrontendError, TwillWarning, UnsupportedOpError
from twill.frontend import (
    compile_to_ttgir,
    graph_from_kernel,
    graph_from_ttgir,
    load_kernel,
    lower_loop,
    parse_ttgir,
)
from twill.ir.graph import Dependence, Graph
from twill.ir.machine import load_machine

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parent / "data"
FA = ROOT / "examples" / "flash_attention_fwd.py"
GEMM = ROOT / "examples" / "gemm.py"


def _module(path: Path):
    spec = importlib.util.spec_from_file_location(f"_example_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


FA_SPEC = _module(FA).TWILL_KERNELS["attn_fwd"]
GEMM_SPEC = _module(GEMM).TWILL_KERNELS


@pytest.fixture(scope="module")
def fa_sm90():
    return compile_to_ttgir(str(FA), target="sm_90")


@pytest.fixture(scope="module")
def fa_sm100():
    return compile_to_ttgir(str(FA), target="sm_100")


def _ops_named(lowering, name: str) -> list[str]:
    """Graph ops that hold a TTGIR op called ``name``."""
    return [node for node, ops in lowering.members.items() if any(op.name == name for op in ops)]


def _reduce_combiners(lowering) -> dict[str, set[str]]:
    """Reduce node -> the arith ops of its combiner region."""
    out = {}
    for node, ops in lowering.members.items():
        for op in ops:
            if op.name == "tt.reduce":
                out[node] = {inner.name for inner in op.walk() if inner.name.startswith("arith.")}
    return out


def _carried_self_loop(graph: Graph, node: str) -> bool:
    return any(e.src == node and e.dst == node and e.distance == 1 for e in graph.edges)


def _gemm_cycles(machine_name: str, m: int, n: int, k: int) -> int:
    """Dense fp16 Tensor Core cycles: 4096 FLOP/cycle/SM on H100, 8192 on B200 (paper-facts §10)."""
    return 2 * m * n * k // {"h100": 4096, "b200": 8192}[machine_name]


# ------------------------------------------------------------------------------------------ FA, Hopper
def test_fa_forward_sm90_graph(fa_sm90):
    lowering = lower_loop(fa_sm90.pre_swp, "h100")
    g = lowering.graph
    g.check(load_machine("h100").unit_names)
    block_m, block_n, dim = (FA_SPEC["constexprs"][k] for k in ("BLOCK_M", "BLOCK_N", "HEAD_DIM"))

    gemms = [op for op in g.ops if op.kind == "gemm"]
    assert len(gemms) == 2
    assert {op.total_usage("tc") for op in gemms} == {_gemm_cycles("h100", block_m, block_n, dim)}
    assert all(dict(op.attrs)["mma"] == "wgmma" and op.warps == FA_SPEC["num_warps"] for op in gemms)

    loads = [op for op in g.ops if op.kind == "tma_load"]
    assert len(loads) == 2 and all(g.is_streaming(op.name) for op in loads)
    assert all(op.smem == block_n * dim * 2 and op.variable_latency for op in loads)

    exps = [op for op in g.ops if op.kind == "exp" and op.total_usage("mufu") >= block_m * block_n // 16]
    assert len(exps) == 1 and exps[0].total_usage("alu") > 0  # scale-subtract merged into the exp2

    combiners = _reduce_combiners(lowering)
    assert sorted(map(sorted, combiners.values())) == [["arith.addf"], ["arith.maxnumf"]]

    qk = next(e.dst for e in g.edges if e.src == loads[0].name)
    pv = next(op.name for op in gemms if op.name != qk)
    assert any(e.src == qk and e.blocking and e.carrier == "register" for e in g.edges)
    m_i = next(n for n in _ops_named(lowering, "arith.maxnumf") if n not in combiners)
    l_i = next(n for n in _ops_named(lowering, "arith.addf") if n not in combiners)
    assert _carried_self_loop(g, m_i) and _carried_self_loop(g, l_i)
    acc_update = [e for e in g.edges if e.src == pv and e.distance == 1]
    assert len(acc_update) == 1 and acc_update[0].blocking
    assert any(e.src == acc_update[0].dst and e.dst == pv and e.distance == 0 for e in g.edges)
    assert g.fixed_smem == block_m * dim * 2  # the Q tile, loaded before the loop


def test_fa_forward_sm90_accounts_for_every_op(fa_sm90):
    lowering = lower_loop(fa_sm90.pre_swp, "h100")
    body = [op for op in lowering.loop.body.ops if op.name != "scf.yield"]
    merged = [op for ops in lowering.members.values() for op in ops]
    assert sorted(map(id, body)) == sorted(map(id, merged + lowering.folded))
    assert len(merged) == len(set(map(id, merged)))
    assert all(op.source.startswith("examples/") or "flash_attention_fwd.py" in op.source
               for op in lowering.graph.ops)


# ------------------------------------------------------------------------------------------ FA, Blackwell
def test_fa_forward_sm100_graph(fa_sm100):
    lowering = lower_loop(fa_sm100.pre_swp, "b200")
    g = lowering.graph
    block_m, block_n, dim = (FA_SPEC["constexprs"][k] for k in ("BLOCK_M", "BLOCK_N", "HEAD_DIM"))
    gemms = [op for op in g.ops if op.kind == "gemm"]
    assert len(gemms) == 2
    assert {op.total_usage("tc") for op in gemms} == {_gemm_cycles("b200", block_m, block_n, dim)}
    assert all(op.warps == 1 for op in gemms)
    assert len([op for op in g.ops if op.kind == "tma_load" and g.is_streaming(op.name)]) == 2

    tmem_loads = [op.name for op in g.ops if op.kind == "tmem_load"]
    assert len(tmem_loads) == 2  # S and O
    p_in_tmem = [op for op in g.ops if op.kind == "tmem_store" and op.tmem]
    assert [op.tmem for op in p_in_tmem] == [block_n * 16 // 32]  # packed fp16 P: N/2 columns
    # Both accumulators are allocated before the loop; O carries its value (fixed), S is overwritten by
    # each QK MMA (use_acc = false), so its columns belong to that MMA while S is live.
    assert g.fixed_tmem == block_n
    (qk_mma,) = [op for op in gemms if op.tmem]
    assert qk_mma.tmem == block_n and any(e.src == qk_mma.name and e.dst in tmem_loads for e in g.edges)

    mma_to_load = [e for e in g.edges if e.src in {op.name for op in gemms} and e.dst in tmem_loads]
    assert {e.distance for e in mma_to_load} == {0, 1}  # S now; O from the previous iteration
    assert all(e.blocking and e.carrier == "tmem" for e in mma_to_load)
    war = [e for e in g.edges if e.src in tmem_loads and e.dst in {op.name for op in gemms}]
    assert any(e.distance == 1 and not e.blocking and e.carrier == "tmem" for e in war)
    combiners = _reduce_combiners(lowering)
    m_i = next(n for n in _ops_named(lowering, "arith.maxnumf") if n not in combiners)
    assert _carried_self_loop(g, m_i)


# ------------------------------------------------------------------------------------------ GEMM
@pytest.mark.parametrize("machine_name", ["h100", "b200"])
def test_gemm_example(machine_name):
    g = graph_from_kernel(str(GEMM), machine_name)
    tiles = GEMM_SPEC["matmul"]["constexprs"]
    loads = [op for op in g.ops if op.kind == "tma_load"]
    (gemm,) = [op for op in g.ops if op.kind == "gemm"]
    assert len(loads) == 2 and all(g.is_streaming(op.name) for op in loads)
    assert gemm.total_usage("tc") == _gemm_cycles(machine_name, tiles["BLOCK_M"], tiles["BLOCK_N"],
                                                  tiles["BLOCK_K"])
    (carried,) = [e for e in g.edges if e.distance == 1]
    assert (carried.src, carried.dst, carried.blocking) == (gemm.name, gemm.name, False)
    if "inplace" in Dependence.__dataclass_fields__:
        assert carried.inplace  # the accumulator is overwritten in place
    assert {e.src for e in g.edges if e.dst == gemm.name and e.blocking} == {op.name for op in loads}
    if machine_name == "h100":
        assert gemm.regs == tiles["BLOCK_M"] * tiles["BLOCK_N"] * 4 // (4 * 32 * gemm.warps)


def test_gemm_pointer_kernel_selected_by_name():
    g = graph_from_kernel(f"{GEMM}::matmul_ptr", "h100")
    loads = [op for op in g.ops if op.kind == "load"]
    assert len(loads) == 2 and all(op.units == {"lsu"} and g.is_streaming(op.name) for op in loads)
    assert sum(op.kind == "gemm" for op in g.ops) == 1


# ------------------------------------------------------------------------------------------ TTGIR input
def test_ttgir_file_and_text_input():
    path = DATA / "attn_fwd_sm90_pre_swp.ttgir"
    from_file = graph_from_ttgir(path, "h100")
    from_text = graph_from_ttgir(path.read_text(), "h100")
    assert from_file.to_dict()["ops"] == from_text.to_dict()["ops"]
    assert sum(op.kind == "gemm" for op in from_file.ops) == 2
    module = parse_ttgir(path)
    loop = module.find("scf.for")[0]
    lines = path.read_text().splitlines()
    assert loop.line == next(i for i, line in enumerate(lines, 1) if "scf.for" in line)
    dot = next(op for op in loop.body.ops if op.name == "ttng.warp_group_dot")
    assert dot.loc.name == "qk" and dot.loc.file.endswith("flash_attention_fwd.py") and dot.loc.line > 0


def test_toy_chain_merges_into_one_exp_op():
    lowering = lower_loop(DATA / "toy_loop.ttgir", "h100")
    (op,) = lowering.graph.ops
    assert op.kind == "exp" and op.units == {"mufu", "alu"}
    assert [m.name for m in lowering.members[op.name]] == ["arith.mulf", "math.exp2", "arith.addf"]
    assert _carried_self_loop(lowering.graph, op.name)


def test_scheduled_snapshot_carries_triton_stages(fa_sm90):
    assert "loop.stage" not in fa_sm90.pre_swp
    module = parse_ttgir(fa_sm90.scheduled)
    (loop,) = module.find("scf.for")
    assert isinstance(loop.attrs["tt.scheduled_max_stage"], int)
    body = [op for op in loop.body.ops if op.name != "scf.yield"]
    assert all(isinstance(op.attrs.get("loop.stage"), int) for op in body)
    loads = [op for op in body if op.name == "tt.descriptor_load"]
    assert loads and all(op.attrs["loop.stage"] == 0 for op in loads)
    g = graph_from_ttgir(fa_sm90.scheduled, "h100")
    assert all("loop.stage" in dict(op.attrs) for op in g.ops)


def test_divisibility_hints_reach_the_ttgir(fa_sm90):
    assert "%seq_len: i32 {tt.divisibility = 16 : i32}" in fa_sm90.pre_swp
    plain = compile_to_ttgir(str(FA), target="sm_90", divisible=())
    assert "tt.divisibility" not in plain.pre_swp


# ------------------------------------------------------------------------------------------ errors
def test_malformed_ttgir_reports_line():
    with pytest.raises(FrontendError) as err:
        graph_from_ttgir(DATA / "malformed.ttgir", "h100")
    assert err.value.line == 9


def test_unreadable_ttgir():
    with pytest.raises(FrontendError, match="cannot read"):
        graph_from_ttgir(DATA / "does_not_exist.ttgir", "h100")


def test_no_loop():
    with pytest.raises(FrontendError, match=r"no scf\.for loop"):
        graph_from_ttgir(DATA / "no_loop.ttgir", "h100")


def test_nested_loops_name_both_lines():
    with pytest.raises(FrontendError, match=r"line 9 inside scf.for at TTGIR line 8"):
        graph_from_ttgir(DATA / "nested_loops.ttgir", "h100")


def test_sibling_loops_need_loop_index():
    with pytest.raises(FrontendError, match=r"lines 8, 12 in .*sibling_loops\.ttgir; pass loop_index "
                                            r"\(twill schedule --loop N\)"):
        graph_from_ttgir(DATA / "sibling_loops.ttgir", "h100")
    second = lower_loop(DATA / "sibling_loops.ttgir", "h100", loop_index=1)
    assert second.loop.line == 12


def test_if_with_side_effect_rejected():
    with pytest.raises(FrontendError, match=r"tt.store at TTGIR line 12") as err:
        graph_from_ttgir(DATA / "if_store.ttgir", "h100")
    assert err.value.line == 11


def test_side_effect_free_if_converted():
    lowering = lower_loop(DATA / "if_select.ttgir", "h100")
    (select,) = [op for op in lowering.graph.ops if "if_converted" in dict(op.attrs)]
    assert dict(select.attrs)["if_converted"] == "scf.if@11"
    assert {m.name for m in lowering.members[select.name]} == {"arith.mulf", "arith.addf", "scf.if"}
    assert [op.line for op in lowering.if_converted] == [11]


def test_unknown_op_names_op_and_line():
    with pytest.raises(UnsupportedOpError) as err:
        graph_from_ttgir(DATA / "unknown_op.ttgir", "h100")
    assert err.value.op_name == "math.erf" and err.value.line == 9


def test_target_must_match_machine():
    with pytest.raises(FrontendError, match="cuda:90"):
        graph_from_ttgir(DATA / "toy_loop.ttgir", "b200")


def test_pipelined_ttgir_rejected():
    text = (DATA / "toy_loop.ttgir").read_text().replace(
        "      %e = math.exp2", "      ttng.fence_async_shared {bCluster = false}\n      %e = math.exp2")
    with pytest.raises(UnsupportedOpError, match="pre-pipelining snapshot"):
        graph_from_ttgir(text, "h100")


def test_load_kernel_errors(tmp_path):
    with pytest.raises(FrontendError, match=r"entries: matmul, matmul_ptr"):
        load_kernel(f"{GEMM}::nope")
    assert load_kernel(str(GEMM)).name == "matmul"  # the default entry
    bare = tmp_path / "bare.py"
    bare.write_text(textwrap.dedent("""
        import triton

        @triton.jit
        def lonely(x):
            pass
    """))
    with pytest.raises(FrontendError, match=r"no TWILL_KERNELS.*lonely"):
        load_kernel(str(bare))
    with pytest.raises(FrontendError, match="does not exist"):
        load_kernel(str(tmp_path / "missing.py"))


# ------------------------------------------------------------------------------------------ other op rules
STREAM_KERNEL = '''
import triton
import triton.language as tl

@triton.jit
def stream(x_desc, y_desc, out_ptr, acc_ptr, n, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    for start in range(0, n, BLOCK):
        x = x_desc.load([start, 0])
        y = tl.math.exp2(x.to(tl.float32))
        y_desc.store([start, 0], y.to(tl.float16))
        s = tl.sum(y, axis=1)
        tl.store(out_ptr + start + cols, s)
        tl.atomic_add(acc_ptr + cols, s)

TWILL_KERNELS = {"stream": {
    "signature": {"x_desc": "tensordesc<fp16[64, 64]>", "y_desc": "tensordesc<fp16[64, 64]>",
                  "out_ptr": "*fp32", "acc_ptr": "*fp32", "n": "i32"},
    "constexprs": {"BLOCK": 64}, "num_warps": 4, "num_stages": 2}}
'''


def test_loads_read_in_registers_stores_and_atomics(tmp_path):
    path = tmp_path / "stream.py"
    path.write_text(STREAM_KERNEL)
    g = graph_from_kernel(str(path), "h100")
    by_kind = {op.kind: op for op in g.ops}
    tile = 64 * 64 * 2
    tma, lds = by_kind["tma_load"], by_kind["local_load"]
    assert g.is_streaming(tma.name) and tma.smem == tile
    (staged,) = [e for e in g.edges if e.src == tma.name]
    assert (staged.dst, staged.blocking, staged.carrier) == (lds.name, True, "smem")
    assert lds.units == {"smem"} and lds.regs > 0
    store = by_kind["tma_store"]
    smem_part, tma_part = sorted(store.rrt, key=lambda r: r.start)
    assert (smem_part.unit, tma_part.unit) == ("smem", "tma") and tma_part.start == smem_part.end
    assert by_kind["atomic"].variable_latency and by_kind["store"].units == {"lsu"}
    assert by_kind["convert_layout"].units == {"smem"}  # row sums change layout for the pointer store
    # statements without an assigned variable: named after the value they take
    assert {by_kind[k].name for k in ("store", "atomic", "convert_layout")} == {
        "s_store", "s_atomic", "s_convert_layout"}


def test_entries_can_share_a_jit_function(tmp_path):
    path = tmp_path / "shared.py"
    path.write_text(STREAM_KERNEL + textwrap.dedent('''
        TWILL_KERNELS["stream_wide"] = dict(TWILL_KERNELS["stream"], kernel="stream",
                                            constexprs={"BLOCK": 128})
        TWILL_KERNELS["broken"] = dict(TWILL_KERNELS["stream"], kernel="missing")
    '''))
    wide = load_kernel(f"{path}::stream_wide")
    assert wide.name == "stream_wide" and wide.fn.__name__ == "stream"
    assert wide.constexprs == {"BLOCK": 128}
    snaps = compile_to_ttgir(f"{path}::stream_wide", target="sm_90",
                             signature={**wide.signature, "x_desc": "tensordesc<fp16[128, 128]>",
                                        "y_desc": "tensordesc<fp16[128, 128]>"})
    assert snaps.kernel == "stream_wide" and "tensor<128x128xf16" in snaps.pre_swp
    with pytest.raises(FrontendError, match=r"'broken' names no @triton.jit function 'missing'"):
        load_kernel(f"{path}::broken")


def test_scalar_constants_keep_their_value(fa_sm100):
    module = parse_ttgir(fa_sm100.pre_swp)
    values = {op.results[0].name: op.attrs.get("value") for op in module.find("arith.constant")}
    assert values["%false"] is False and values["%true"] is True
    assert values["%c0_i32"] == 0
    assert all(v is None for name, v in values.items() if name.startswith("%cst") and "dense" in name)


def test_shared_buffer_round_trip_is_ordered():
    lowering = lower_loop(DATA / "smem_roundtrip.ttgir", "h100")
    g = lowering.graph
    assert g.fixed_smem == 64 * 64 * 4
    load = next(op.name for op in g.ops if op.kind == "local_load")
    store = next(op.name for op in g.ops if op.kind == "local_store")
    edges = {(e.src, e.dst): e for e in g.edges}
    assert edges[(store, load)].distance == 1 and edges[(store, load)].carrier == "smem"  # read after write
    assert edges[(load, store)].distance == 0  # write after read


def test_tl_exp_pays_the_non_ftz_expansion_and_masked_loads_are_predicated():
    # decode_attention.py: p = tl.exp(qk - m_new) over 64 scores. tl.exp is x * log2(e), then
    # ex2.approx.f32 without .ftz = FSETP + 2 FMUL + MUFU.EX2 per element: ALU (1 subf + 1 + 3) x 64 / 128
    # = 2.5 -> 3 cycles, MUFU 64 / 16 = 4. Its K and V loads are masked with other=0: the full 64 x 128
    # fp16 tile (16384 B / 32 B per cycle = 512 LSU cycles) after a 8192 / 128 = 64-cycle fill select.
    # Each head's K/V tile is read by its CTA alone (the address is pid * stride_kh + ...), so it streams
    # from HBM: ceil(16384 / 13.9) = 1179 cycles of the SM's HBM share, latency 1850 + the 64-cycle fill.
    graph = graph_from_kernel(str(ROOT / "examples" / "decode_attention.py"), "h100")
    p = graph.op("p")
    assert sorted((r.unit, r.cycles) for r in p.rrt) == [("alu", 3), ("mufu", 4)]
    for name in ("k", "v"):
        op = graph.op(name)
        assert [(r.unit, r.start, r.cycles) for r in op.rrt] == [("alu", 0, 64), ("lsu", 64, 512),
                                                                  ("dram", 64, 1179)]
        assert op.latency == 1850 + 64
        assert "predicated" in dict(op.attrs)


# ------------------------------------------------------------------------------- split TMEM loads
BWD = ROOT / "examples" / "flash_attention_bwd.py"


def _final_loop_ttgir(entry: dict, target: int) -> str:
    """The loop of Triton's own full sm_100 compile of ``entry`` (its final TTGIR, after pipelining)."""
    import triton
    from triton.backends.compiler import GPUTarget

    fn = getattr(_module(BWD), entry["kernel"])
    src = triton.compiler.ASTSource(fn=fn, signature=entry["signature"], constexprs=entry["constexprs"])
    kernel = triton.compile(src, target=GPUTarget("cuda", target, 32),
                            options={"num_warps": entry["num_warps"], "num_stages": entry["num_stages"]})
    text = kernel.asm["ttgir"]
    start = text.index("scf.for")
    return text[start:text.index("scf.yield", start)]


def test_split_tmem_loads_are_the_loads_triton_emits():
    """A tile split into column halves in registers is loaded from tensor memory half by half, as the
    kernel Triton builds does (its OptimizeTMemLayouts runs after pipelining): one 64-register load per
    half, ordered after the MMA that writes the buffer and before its next write, no layout round trip."""
    entry = _module(BWD).TWILL_KERNELS["attn_bwd_split_sm100"]
    final = _final_loop_ttgir(entry, 100)
    half = "tensor<128x64xf32"
    want = sum(1 for line in final.splitlines() if "ttng.tmem_load" in line and f"-> {half}" in line)
    assert want == 4, "Triton loads S and dP by column halves"
    converts = [line for line in final.splitlines() if "ttg.convert_layout" in line]
    assert not [line for line in converts if "x2x" in line or "x64x2" in line], "joins and splits are free"

    lowering = lower_loop(compile_to_ttgir(f"{BWD}::attn_bwd_split_sm100", target="sm_100").pre_swp, "b200")
    g = lowering.graph
    halves = [op for op in g.ops if op.kind == "tmem_load" and op.result_bytes == 128 * 64 * 4]
    assert len(halves) == want
    assert all(op.regs == 64 for op in halves), "128 x 64 fp32 over 128 threads"
    assert len([op for op in g.ops if op.kind == "convert_layout"]) == len(converts)
    for op in halves:
        (writer,) = {e.src for e in g.in_edges(op.name) if e.carrier == "tmem"}
        assert g.op(writer).kind == "gemm"
        into = [e for e in g.in_edges(op.name) if e.src == writer]
        back = [e for e in g.out_edges(op.name) if e.dst == writer]
        assert [(e.distance, e.blocking) for e in into] == [(0, True)]
        assert [e.distance for e in back] == [1]
    exps = [op.name for op in g.ops if op.kind == "exp"]
    readers = {e.dst for op in halves for e in g.out_edges(op.name) if e.dst in exps}
    assert sorted(readers) == sorted(exps) and len(exps) == 2, "each exponential reads its own half"
    assert not any(e.src == e.dst and g.op(e.src).kind == "gemm" and e.src.startswith(("s", "dp"))
                   for e in g.edges), "an MMA with use_acc = false does not depend on its last result"


def test_apply_refuses_a_kernel_whose_tmem_loads_twill_splits():
    """The split loads exist only in twill's snapshot; a pipeliner could not order them (no token)."""
    from twill import schedule as solve
    from twill.apply.triton import ApplyError, apply

    graph = graph_from_kernel(f"{BWD}::attn_bwd_split_sm100", "b200")
    what_if = solve(graph, "b200", relax={"smem", "registers", "register_file"}, normalize_upper=40,
                    time_limit=120)  # quick; apply refuses a what-if, so it is relabelled a plain schedule
    problem = replace(what_if.problem, options=replace(what_if.problem.options, relax=frozenset()))
    schedule = replace(what_if, problem=problem)
    with pytest.raises(ApplyError, match="splits a tensor-memory tile"):
        apply(schedule, f"{BWD}::attn_bwd_split_sm100", compile=False)


SPLITS = DATA / "tmem_splits.py"


def test_split_of_a_register_tile_leaves_the_graph_alone():
    """A split of a tile that is not loaded from tensor memory does not trigger the early pass."""
    snaps = compile_to_ttgir(f"{SPLITS}::register_halves", target="sm_100")
    assert not snaps.split_tmem_loads
    assert "ttng.tmem_subslice" not in snaps.pre_swp


def test_split_the_early_pass_cannot_handle_falls_back_with_a_warning(recwarn):
    """Triton's OptimizeTMemLayouts fails ahead of its pipeliner on an accumulator rescaled by halves;
    twill then models the loads whole and warns, instead of failing the kernel."""
    from twill.errors import TwillWarning

    g = graph_from_kernel(f"{SPLITS}::rescale", "b200")
    notes = [w for w in recwarn if issubclass(w.category, TwillWarning)]
    assert notes and "OptimizeTMemLayouts" in str(notes[0].message) and "rescale" in str(notes[0].message)
    loads = [op for op in g.ops if op.kind == "tmem_load"]
    assert loads and all(op.result_bytes == 128 * 128 * 4 for op in loads), "whole 128 x 128 fp32 loads"
    assert not compile_to_ttgir(f"{SPLITS}::rescale", target="sm_100").split_tmem_loads


INT_DATA = DATA / "int_data.py"


def test_integer_tile_data_is_costed_and_index_math_folds():
    """Unpacking int4 weights (shift, and, subtract, xor, multiply, then sitofp for the MMA) is ALU work
    over the whole 64 x 128 tile; it used to fold like pointer arithmetic and cost nothing. The pointer
    offsets of the same loop still fold."""
    machine = load_machine("h100")
    g = graph_from_kernel(f"{INT_DATA}::int4_dequant_gemm", "h100")
    alu = [op for op in g.ops if op.kind == "alu"]
    assert len(alu) == 1  # the chain from the loaded integers to the fp16 MMA operand, one op
    tile = 64 * 128
    per_op = tile // int(machine.const("cost.alu_per_cycle"))  # one ALU op over the tile, cycles
    # shrsi, andi, subi, andi, xori, muli on i32 (TTGIR), then sitofp to fp16 at the conversion rate
    assert alu[0].total_usage("alu") == 6 * per_op + tile // int(machine.const("cost.convert_per_cycle"))
    assert not any(op.kind == "alu" and op.total_usage("alu") < per_op for op in g.ops)  # no index math


def test_scalar_integer_division_folds():
    g = graph_from_kernel(f"{INT_DATA}::scaled_by_block", "h100")  # scale = s[k0 // GROUP]
    assert sorted(op.kind for op in g.ops) == ["alu", "load", "load"]


def test_layout_conversion_of_a_broadcast_moves_only_the_distinct_values():
    """A [64] row scale broadcast to [64, 64] and converted to another layout: Triton converts the 64
    values before broadcasting, so the conversion moves 64 x 4 bytes through shared memory (a store and a
    load), not the 16 KB tile."""
    machine = load_machine("h100")
    g = graph_from_ttgir(DATA / "broadcast_convert.ttgir", "h100")
    (convert,) = [op for op in g.ops if op.kind == "convert_layout"]
    rate = float(machine.const("cost.smem_bytes_per_cycle"))
    assert convert.total_usage("smem") == round(2 * 64 * 4 / rate)


def test_a_loop_that_loads_what_it_stores_is_warned_about():
    """y[i] = y[i-1] + x[i]: the dependence runs through global memory, which the graph has no edge for."""
    with pytest.warns(TwillWarning, match=r"running_sum_rows: the loop loads \(TTGIR line \d+\) and stores "
                                          r"\(TTGIR line \d+, .*memory_dependence\.py:\d+:\d+\) through the "
                                          r"same pointer"):
        graph_from_kernel(f"{DATA / 'memory_dependence.py'}::running_sum_rows", "h100")


def test_the_examples_raise_no_memory_dependence_warning(recwarn: pytest.WarningsRecorder):
    examples = [("gemm.py", "h100"), ("flash_attention_fwd.py", "h100"), ("decode_attention.py", "h100"),
                ("flash_attention_bwd.py::attn_bwd_sm100", "b200")]
    for spec, machine in examples:
        graph_from_kernel(str(ROOT / "examples" / spec), machine)
    assert not [w for w in recwarn if "same pointer" in str(w.message)]
