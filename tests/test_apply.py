"""Apply a schedule back into Triton (sm_90 and sm_100), compile to a cubin, and check the emitted TTGIR.

Everything runs on the CPU in well under a minute: the two FlashAttention-forward schedules in
``tests/data`` (solved by ``twill schedule`` for h100 and b200) are applied without solving.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from twill.apply.compile import partition_regions
from twill.apply.kernel import AppliedKernel
from twill.apply.map import plan_placement
from twill.apply.rewrite import _set_attr, read_slots
from twill.apply.triton import ApplyError, apply
from twill.cli import main
from twill.frontend.compile import compile_to_ttgir
from twill.frontend.lower import lower_loop
from twill.ir.machine import load_machine
from twill.schedule import Schedule

DATA = Path(__file__).parent / "data"
KERNEL = str(Path(__file__).parents[1] / "examples" / "flash_attention_fwd.py")


def _schedule(machine: str) -> Schedule:
    return Schedule.from_json((DATA / f"apply_attn_fwd.{machine}.json").read_text())


@pytest.fixture(scope="module")
def sm90(tmp_path_factory: pytest.TempPathFactory):
    out = tmp_path_factory.mktemp("apply90")
    return _schedule("h100"), apply(_schedule("h100"), KERNEL, output_dir=out, baseline=False), out


@pytest.fixture(scope="module")
def sm100(tmp_path_factory: pytest.TempPathFactory):
    out = tmp_path_factory.mktemp("apply100")
    return _schedule("b200"), apply(_schedule("b200"), KERNEL, output_dir=out, baseline=False), out


def _node_rows(result, schedule):
    """(graph op, stage, cluster, partitions) of each graph op's own TTGIR ops, read from the emitted text."""
    found = [f for f in read_slots(result.ttgir) if f[0] != "ttng.warp_group_dot_wait"]
    rows = []
    for got, slot in zip(found, result.report.ops, strict=True):
        if slot.node is not None and slot.role == "node":
            rows.append((slot.node, got[1], got[2], got[3]))
    return rows


def test_stages_and_clusters_follow_the_schedule_sm90(sm90) -> None:
    schedule, result, _ = sm90
    offsets = sorted({s.start % schedule.ii for s in schedule.slots.values()})
    for name, stage, cluster, _ in _node_rows(result, schedule):
        slot = schedule.slots[name]
        assert cluster == offsets.index(slot.start % schedule.ii), name
        if name in schedule.problem.streaming:
            continue
        assert stage == slot.stage + 1, name  # prefetch 1
    # Streaming loads sit one stage before their first consumer (K before QK, V before PV).
    stage_of = {n: s for n, s, _, _ in _node_rows(result, schedule)}
    assert stage_of["k"] == stage_of["qk"] - 1
    assert stage_of["v"] == stage_of["out"] - 1


def test_sm90_wraps_early_wgmma_and_compiles(sm90) -> None:
    _, result, out = sm90
    report = result.report
    # QK (stage 1 of 3) is wrapped so that Triton can predicate it; PV stays in the last stage.
    assert result.ttgir.count("scf.if %twill_true") == 1
    assert "%twill_anchor = ttng.warp_group_dot_wait" in result.ttgir
    assert any("warp specialization" in d for d in report.dropped)
    assert report.compiled is not None and report.compiled.pipelined
    assert report.compiled.smem_fits and report.compiled.spill_store_bytes == 0
    assert report.stages == 3 and report.compiled.num_warps == 8
    assert (out / "attn_fwd.cubin").stat().st_size > 10_000
    assert "kept:" in (out / "report.txt").read_text()


def test_sm90_peels_the_last_iteration(sm90) -> None:
    """QK and the softmax sit in a non-last stage: the peeled last iteration runs only PV and its rescale."""
    _, result, out = sm90
    assert any(k.startswith("epilogue: the loop's last iteration is peeled") for k in result.report.kept)
    assert json.loads((out / "attn_fwd.json").read_text())["twill_peel"]["stage_predicates"] == 2
    lines = (out / "attn_fwd.ttgir").read_text().split("\n")
    head = next(i for i, line in enumerate(lines) if " = scf.for " in line)
    indent = lines[head][:len(lines[head]) - len(lines[head].lstrip())]
    end = next(i for i in range(head + 1, len(lines)) if lines[i].startswith(indent + "}"))
    loop, after = "\n".join(lines[head:end]), "\n".join(lines[end:])
    assert loop.count("ttng.warp_group_dot ") == 3  # QK in both branches of its scf.if, PV
    assert after.count("ttng.warp_group_dot ") == 1 and after.count("math.exp2") == 1  # PV; alpha only


def test_applied_kernel_loads_with_the_original_signature(sm90) -> None:
    _, result, out = sm90
    kernel = AppliedKernel.load(out)
    assert kernel.arg_names == ("q_desc", "k_desc", "v_desc", "o_desc", "sm_scale", "seq_len", "BLOCK_M",
                                "BLOCK_N", "HEAD_DIM")
    assert kernel.bind(["q", "k", "v", "o", 0.5, 1024], {})[-3:] == [128, 128, 128]
    assert kernel.compiled.metadata.shared == result.report.compiled.shared_bytes
    with pytest.raises(TypeError, match="compiled as 128"):
        kernel.bind(["q", "k", "v", "o", 0.5, 1024], {"BLOCK_N": 64})
    with pytest.raises(TypeError, match="missing"):
        kernel.bind(["q", "k"], {})


def test_partitions_follow_warp_groups_sm100(sm100) -> None:
    schedule, result, _ = sm100
    report = result.report
    plan = report.partitions
    assert len(plan) == len({s.warp_group for s in schedule.slots.values()}) == 4
    for name, stage, _, parts in _node_rows(result, schedule):
        assert parts == (plan[schedule.slots[name].warp_group],), name
        if name not in schedule.problem.streaming:
            assert stage == schedule.slots[name].stage + 1, name
    compiled = report.compiled
    assert compiled is not None and compiled.warp_specialize == 4 and compiled.smem_fits
    assert any("compiled ttg.warp_specialize has 4 partitions" in c for c in report.checks)


def test_compiled_partition_regions_hold_the_groups_ops(sm100) -> None:
    schedule, result, out = sm100
    regions = partition_regions((out / "attn_fwd.ttgir").read_text())
    plan = result.report.partitions
    mma_parts = {plan[schedule.slots[n].warp_group] for n in ("qk_gemm", "out")}
    load_part = plan[schedule.slots["k"].warp_group]
    assert {p for p, ops in regions.items() if ops.get("ttng.tc_gen5_mma")} == mma_parts
    assert {p for p, ops in regions.items() if ops.get("ttng.async_tma_copy_global_to_local")} == {load_part}


def test_triton_apart_pairs_the_s_load_with_every_mma() -> None:
    from twill.apply.triton import triton_apart

    schedule = _schedule("b200")
    # S = QK^T is read from TMEM in its own iteration (qk); the MMAs are the QK and PV GEMMs.
    assert triton_apart(schedule.problem) == (("out", "qk"), ("qk", "qk_gemm"))


def test_sm100_refuses_a_schedule_triton_cannot_warp_specialize(tmp_path: Path) -> None:
    data = json.loads((DATA / "apply_attn_fwd.b200.json").read_text())
    mma_group = next(o["warp_group"] for o in data["ops"] if o["name"] == "qk_gemm")
    for op in data["ops"]:
        if op["name"] == "qk":
            op["warp_group"] = mma_group
    for group in data["warp_groups"]:
        group["ops"] = sorted({*group["ops"], "qk"} if group["index"] == mma_group else
                              set(group["ops"]) - {"qk"})
    data["warp_groups"] = [g for g in data["warp_groups"] if g["ops"]]
    with pytest.raises(ApplyError, match=r"qk and qk_gemm \(group \d+\); Triton 3\.6's warp specialization"):
        apply(Schedule.from_dict(data), KERNEL, output_dir=tmp_path / "out", compile=False)


def test_cli_apply_solves_b200_with_the_triton_pairs_apart(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """From a fresh solve to a warp-specialized cubin (Triton 3.6 failed on the unconstrained optimum)."""
    code = main(["apply", KERNEL, "--machine", "b200", "-o", str(tmp_path / "out"), "--no-baseline"])
    assert code == 0, capsys.readouterr().err
    sched = Schedule.from_json((tmp_path / "out" / "schedule.json").read_text())
    assert set(sched.problem.options.apart) == {("out", "qk"), ("qk", "qk_gemm")}
    assert "compiled ttg.warp_specialize has" in capsys.readouterr().out
    assert (tmp_path / "out" / "attn_fwd.cubin").stat().st_size > 10_000


def test_schedule_of_another_loop_is_rejected() -> None:
    data = json.loads((DATA / "apply_attn_fwd.h100.json").read_text())
    # A consistent schedule of a loop with an op "beta" where the kernel has "alpha" (renamed everywhere:
    # a file renamed only in part is malformed and Schedule.from_dict rejects it).
    for op in (*data["ops"], *data["problem"]["ops"]):
        if op["name"] == "alpha":
            op["name"] = "beta"
    for edge in data["problem"]["edges"]:
        edge.update({end: "beta" for end in ("src", "dst") if edge[end] == "alpha"})
    data["warp_groups"] = [{**g, "ops": ["beta" if o == "alpha" else o for o in g["ops"]]}
                           for g in data["warp_groups"]]
    data["buffer_depths"] = {("beta" if k == "alpha" else k): v for k, v in data["buffer_depths"].items()}
    with pytest.raises(ApplyError, match="beta"):
        apply(Schedule.from_dict(data), KERNEL, compile=False)


def test_order_that_breaks_a_dependence_is_rejected() -> None:
    schedule = _schedule("h100")
    snaps = compile_to_ttgir(KERNEL, target="sm_90")
    lowering = lower_loop(snaps.scheduled, "h100")
    slots = dict(schedule.slots)
    # p before the QK GEMM it reads, in the same stage: Triton would emit p first.
    slots["p"] = type(slots["p"])("p", 0, 0, slots["p"].warp_group)
    tampered = Schedule(schedule.problem, schedule.ii, schedule.length, slots, schedule.warp_groups,
                        schedule.certificate)
    with pytest.raises(ApplyError, match="before its producer"):
        plan_placement(tampered, lowering)


def test_set_attr_edits_only_the_attribute_dictionary() -> None:
    line = ("      %p = tt.expand_dims %m {axis = 1 : i32, loop.cluster = 0 : i32, loop.stage = 2 : i32} : "
            "tensor<128xf32, #ttg.slice<{dim = 1, parent = #mma}>> -> tensor<128x1xf32, #mma>")
    edited = _set_attr(_set_attr(line, "loop.stage", "5 : i32"), "ttg.partition", "array<i32: 0, 2>")
    want = "{axis = 1 : i32, loop.cluster = 0 : i32, loop.stage = 5 : i32, ttg.partition = array<i32: 0, 2>}"
    assert want in edited
    assert edited.endswith("#ttg.slice<{dim = 1, parent = #mma}>> -> tensor<128x1xf32, #mma>")
    bare = "        %x = arith.maxnumf %a, %b : f32 loc(#loc9)"
    assert _set_attr(bare, "ttg.partition", "array<i32: 1>") == \
        "        %x = arith.maxnumf %a, %b {ttg.partition = array<i32: 1>} : f32 loc(#loc9)"


def test_cli_apply_prints_the_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["apply", KERNEL, "--machine", "h100", "--schedule", str(DATA / "apply_attn_fwd.h100.json"),
                 "-o", str(tmp_path / "out"), "--no-compile"])
    text = capsys.readouterr().out
    assert code == 0
    assert "kept:" in text and "dropped or changed:" in text and "loop.cluster" in text
    assert (tmp_path / "out" / "applied.ttgir").is_file() and (tmp_path / "out" / "schedule.json").is_file()


def test_cli_apply_no_peel_keeps_the_predicated_last_iteration(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["apply", KERNEL, "--machine", "h100", "--schedule", str(DATA / "apply_attn_fwd.h100.json"),
                 "-o", str(tmp_path / "out"), "--no-baseline", "--no-peel"])
    assert code == 0
    assert "epilogue not peeled (--no-peel / peel=False): the last iteration" in capsys.readouterr().out
    assert "twill_peel" not in json.loads((tmp_path / "out" / "attn_fwd.json").read_text())
    final = (tmp_path / "out" / "attn_fwd.ttgir").read_text()
    assert final.count("ttng.warp_group_dot ") == 5  # prologue QK (2 branches), loop QK (2), loop PV


def test_cli_apply_refuses_pointer_loads_on_sm100_before_solving(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """Triton 3.6's warp specialization stops on cp.async loads; apply says so instead of a compiler dump."""
    gemm = Path(__file__).resolve().parents[1] / "examples" / "gemm.py"
    code = main(["apply", f"{gemm}::matmul_ptr", "--machine", "b200", "-o", str(tmp_path / "out"),
                 "--time-limit", "1"])
    assert code == 2
    err = " ".join(capsys.readouterr().err.split())  # the console wraps at its width
    assert "loads through pointers in its loop (tt.load at TTGIR line(s)" in err and "cp.async" in err


def test_a_compile_triton_refuses_quotes_its_diagnostics(capfd: pytest.CaptureFixture[str]) -> None:
    from twill.apply.compile import finish_compile
    from twill.errors import FrontendError
    from twill.frontend.compile import load_kernel

    spec = load_kernel(str(Path(__file__).resolve().parents[1] / "examples" / "gemm.py") + "::matmul")
    with pytest.raises(FrontendError, match="custom op 'garbage' is unknown") as info:
        finish_compile(spec, "module { garbage", target="sm_90", num_stages=3)
    log = Path(str(info.value).rsplit("its whole output: ", 1)[1].rstrip(")"))
    assert "error: custom op 'garbage'" in log.read_text()
    log.unlink()
    assert capfd.readouterr().err == ""  # nothing of Triton's reached the terminal


def test_cli_apply_refuses_a_split_tmem_kernel_before_solving(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """Without --schedule the CLI would solve first; it refuses at once (a 1 s limit would otherwise end
    in a time-limit message, not the refusal)."""
    bwd = Path(__file__).resolve().parents[1] / "examples" / "flash_attention_bwd.py"
    code = main(["apply", f"{bwd}::attn_bwd_split_sm100", "--machine", "b200", "-o", str(tmp_path / "out"),
                 "--time-limit", "1", "--no-compile"])
    assert code == 2
    assert "splits a tensor-memory tile" in capsys.readouterr().err


def test_a_kernel_triton_compiles_to_a_trap_is_reported_as_none() -> None:
    """Triton's own sub-tiled sm_100 build needs more shared memory than a CTA has: its PTX is a trap."""
    from twill.apply.compile import compiled_stats, finish_compile
    from twill.frontend.compile import load_kernel

    examples = Path(__file__).resolve().parents[1] / "examples"
    spec = load_kernel(f"{examples / 'flash_attention_fwd_subtiled.py'}::attn_fwd_subtiled_sm100")
    stats = compiled_stats(finish_compile(spec, compile_to_ttgir(spec, target="sm_100").scheduled,
                                          target="sm_100", num_stages=spec.num_stages), target="sm_100",
                           smem_limit=load_machine("b200").smem_per_cta)
    assert stats.trap_only and not stats.smem_fits
    assert stats.summary().startswith("no kernel: Triton emitted only a trap")


# ------------------------------------------------------------------------------ shared memory of the machine
MACHINES = Path(__file__).resolve().parents[1] / "machines"
GEMM = str(Path(__file__).parents[1] / "examples" / "gemm.py")


def _machine_toml(folder: Path, name: str, smem_per_cta: int) -> Path:
    """The bundled h100 description renamed ``name``, with ``memory.smem_per_cta`` = ``smem_per_cta``."""
    text = (MACHINES / "h100.toml").read_text(encoding="utf-8")
    text, renamed = re.subn(r'(?m)^name = "h100"', f'name = "{name}"', text)
    text, limited = re.subn(r"(?m)^smem_per_cta = \{ value = \d+,",
                            f"smem_per_cta = {{ value = {smem_per_cta},", text)
    assert renamed == limited == 1
    path = folder / f"{name}.{smem_per_cta}.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_a_kernel_over_the_machines_shared_memory_is_refused_and_not_written(sm90, tmp_path: Path) -> None:
    schedule, result, _ = sm90
    compiled = result.report.compiled.shared_bytes
    assert result.report.compiled.smem_fits and compiled <= load_machine("h100").smem_per_cta
    # the same schedule and kernel on an h100 whose CTA may use one byte less than the kernel needs
    small = _machine_toml(tmp_path, "h100", compiled - 1)
    out = tmp_path / "out"
    with pytest.raises(ApplyError, match=rf"compiles to {compiled} B .* over the {compiled - 1} B") as err:
        apply(schedule, KERNEL, output_dir=out, baseline=False, machine=small)
    assert "not saved" in str(err.value)
    assert not out.exists()


def test_gemm_with_deep_prefetch_is_refused_on_a_small_machine(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 24: prefetch 2 on a 101376-byte machine compiled to more than that and was reported as fitting.
    The same schedule on a machine that differs only in its limit shows what the kernel needs."""
    import twill

    limit = 101376
    small = _machine_toml(tmp_path, "smallsmem", limit)
    large = _machine_toml(tmp_path, "smallsmem", load_machine("h100").smem_per_cta)
    sched = twill.schedule(twill.graph_from_kernel(GEMM, machine=small), machine=small, prefetch=2,
                           time_limit=300)
    fits = apply(sched, GEMM, output_dir=tmp_path / "large", baseline=False, machine=large).report.compiled
    assert fits.smem_fits and fits.shared_bytes > limit  # the kernel needs more than the small machine has
    # buffers as Triton allocates them: at least their bytes are shared memory
    tiles = sum(math.prod(int(d) for d in shape.split("x")[:-1]) * 2 for shape in fits.buffers.values())
    assert fits.shared_bytes >= tiles and all(shape.endswith("f16") for shape in fits.buffers.values())
    out = tmp_path / "small"
    saved = tmp_path / "s.json"
    saved.write_text(sched.to_json(), encoding="utf-8")
    code = main(["apply", GEMM, "--schedule", str(saved), "--machine", str(small), "-o", str(out),
                 "--no-baseline"])
    err = " ".join(capsys.readouterr().err.split())
    assert code == 2 and f"compiles to {fits.shared_bytes} B" in err and f"over the {limit} B" in err
    assert not out.exists()
