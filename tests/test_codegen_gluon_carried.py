"""Loop-carried hand-offs in the Gluon backend: a register value made on one warp group in iteration ``i`` and
read on another in iteration ``i + d`` (``d >= 1``, through ``scf.for`` iter_args) goes through a staging
ring, and the reader's first ``d`` iterations take the loop's initial values. The generator used to refuse
such a schedule ("a loop-carried hand-off is not lowered").

The loop here reads a value two iterations back, through a chain of two iter_args with distinct initial
values (so iteration 0 reads one initial value and iteration 1 the other); the expected output is computed
by numpy from the kernel's definition, independently of the generator.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("triton.experimental.gluon")

import twill
from twill.codegen.gluon import generate
from twill.codegen.gluon.cpu_sim import Descriptor, run_kernel
from twill.ir.machine import load_machine
from twill.schedule import OpSlot, WarpGroup

LAG = '''import triton
import triton.language as tl


@triton.jit
def lag(a_desc, b_desc, c_desc, K, BM: tl.constexpr, BN: tl.constexpr):
    row = tl.program_id(0) * BM
    acc = tl.zeros([BM, BN], dtype=tl.float32)
    back1 = tl.full([BM, BN], -5.0, dtype=tl.float32)
    back2 = tl.full([BM, BN], 3.0, dtype=tl.float32)
    for k0 in range(0, K, BN):
        a = a_desc.load([row, k0])
        b = b_desc.load([k0, 0])
        x = tl.dot(a, b)
        y = tl.exp2(x * 0.5)
        acc = acc * 0.5 + back2
        back2 = back1
        back1 = y
    c_desc.store([row, 0], acc.to(tl.float16))


TWILL_KERNELS = {"lag": {"signature": {"a_desc": "tensordesc<fp16[128, 64]>",
                                       "b_desc": "tensordesc<fp16[64, 64]>",
                                       "c_desc": "tensordesc<fp16[128, 64]>", "K": "i32"},
                         "constexprs": {"BM": 128, "BN": 64}, "num_warps": 4, "num_stages": 3,
                         "default": True}}
'''


def _lag_reference(a: np.ndarray, b: np.ndarray, bn: int) -> np.ndarray:
    """numpy model of ``lag``: ``y_i = exp2(a_i @ b_i / 2)``; ``acc = acc / 2 + back2`` with ``back2`` 3 in
    iteration 0, -5 in iteration 1 and ``y_{i-2}`` after."""
    acc = np.zeros((a.shape[0], bn), dtype=np.float32)
    ys = []
    for i, k0 in enumerate(range(0, a.shape[1], bn)):
        x = a[:, k0:k0 + bn].astype(np.float32) @ b[k0:k0 + bn].astype(np.float32)
        ys.append(np.exp2(x * 0.5))
        back2 = 3.0 if i == 0 else -5.0 if i == 1 else ys[i - 2]
        acc = acc * 0.5 + back2
    return acc


def _on_own_group(sched, op: str, warps: int = 4, later: int = 0):
    """``sched`` with ``op`` moved to a new consumer warp group of ``warps`` warps (a relabelling of the
    groups that adds hand-offs), ``later`` IIs later (``later`` stages more; the length grows with it)."""
    new = max(g.index for g in sched.warp_groups) + 1
    start = sched.slots[op].start + later * sched.ii
    slots = {n: (OpSlot(n, start, start // sched.ii, new) if n == op else s) for n, s in sched.slots.items()}
    groups = [dataclasses.replace(g, ops=tuple(o for o in g.ops if o != op),
                                  registers=g.registers if g.role == "producer" else 160)
              for g in sched.warp_groups]
    groups.append(WarpGroup(new, (op,), warps, 160, 96, "consumer"))
    length = max(sched.length, start + sched.problem.op(op).cycles)
    return dataclasses.replace(sched, slots=slots, warp_groups=tuple(groups), length=length)


@pytest.mark.parametrize("later", [0, 2])
def test_a_value_read_two_iterations_later_on_another_group_is_handed_through_a_ring(tmp_path: Path,
                                                                                      later: int):
    """``acc`` reads ``y`` two iterations back; with ``acc`` on its own warp group that edge (distance 2)
    is the only register value crossing groups. The kernel stages ``y`` in a ring of the model's depth for
    the edge, ``ceil((start(acc) + 2 II + 1 - end(y)) / II)`` (the last two iterations, never read, are not
    stored), so its shared memory is the model's buffers (plus the epilogue's store staging and the
    barriers), compiles for sm_90 within the H200's, and computes the loop at one to six iterations (the
    reader's first two take the two initial values) in the CPU simulation. ``later`` 2: ``acc`` two stages
    later (a prologue of two trips, the first steady trip reading iteration 0, a sequential body for one
    iteration; every dependence still holds: the move only delays the reader)."""
    path = tmp_path / "lag.py"
    path.write_text(LAG)
    graph = twill.graph_from_kernel(str(path), machine="h200")
    carried = [e for e in graph.edges if e.src == "y" and e.dst == "acc"]
    assert [e.distance for e in carried] == [2]
    sched = _on_own_group(twill.schedule(graph, "h200"), "acc", later=later)
    group = {n: s.warp_group for n, s in sched.slots.items()}
    assert group["acc"] != group["y"]
    kernel = generate(sched, str(path), "h200", tmp_path / "out")
    ii = sched.ii
    lifetime = sched.start["acc"] + 2 * ii + 1 - (sched.start["y"] + sched.problem.op("y").cycles)
    depth = max(1, -(-lifetime // ii))
    assert f"stage_0 = gl.allocate_shared_memory(gl.float32, [{depth}, 128, 64]" in kernel.source
    report = kernel.report
    assert "buffers beyond the model's (depth x bytes)" not in report.shared_difference
    assert set(report.shared_difference) <= {"epilogue store staging (not in the model)", "mbarriers",
                                             "alignment and Triton scratch"}
    assert report.shared_compiled <= load_machine("h200").smem_per_cta
    rng = np.random.default_rng(3)
    for n in (1, 2, 3, 4, 6):
        a = (rng.standard_normal((128, n * 64)) * 0.25).astype(np.float16)
        b = (rng.standard_normal((n * 64, 64)) * 0.25).astype(np.float16)
        c = np.full((128, 64), np.nan, dtype=np.float16)
        descs = [Descriptor(a, [128, 64]), Descriptor(b, [64, 64]), Descriptor(c, [128, 64])]
        run_kernel(kernel.source, "lag", [*descs, n * 64, 128, 64], (1, 1))
        ref = _lag_reference(a, b, 64)
        assert np.abs(c.astype(np.float32) - ref).max() <= 1e-2 * np.abs(ref).max(), n
