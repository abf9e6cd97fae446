"""The kernel's shared memory is the most any phase needs, and the scheduler and the Gluon generator agree on
it: the epilogue's store staging goes into a loop buffer whose readers are done (a loop-invariant tile of the
same block, else a TMA ring of at least its bytes), so it adds nothing to the steady state's buffers, which
are what the model counts.

The case: examples/gemm.py on an H100 whose CTA may use 100,000 B. The model's buffers are the A and B rings
(3 x 16 KB + 2 x 16 KB = 81,920 B, read off the schedule below); the epilogue stores a 128 x 128 fp16 tile
(32,768 B). Before, the generator gave it its own buffer: 81,920 + 32,768 + barriers = 114,788 B compiled,
over the limit, so a schedule the scheduler returned could not be generated."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("triton.experimental.gluon")

import twill
from twill.codegen.gluon import generate
from twill.codegen.gluon.cpu_sim import Descriptor, run_kernel
from twill.ir.machine import load_machine

ROOT = Path(__file__).resolve().parents[1]
GEMM = str(ROOT / "examples" / "gemm.py")
LIMIT = 100_000


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> tuple:
    folder = tmp_path_factory.mktemp("small_smem")
    machine = folder / "h100_small_smem.toml"
    machine.write_text(f'base = "h100"\nname = "h100_small_smem"\n[memory]\n'
                       f'smem_per_cta = {{ value = {LIMIT}, source = "test: a smaller CTA" }}\n')
    graph = twill.graph_from_kernel(GEMM, machine=str(machine))
    sched = twill.schedule(graph, str(machine))
    kernel = generate(sched, GEMM, str(machine), folder / "out")
    return graph, sched, kernel, machine


def test_a_schedule_that_fits_the_model_is_generated_within_the_machine(small) -> None:
    graph, sched, kernel, machine = small
    assert load_machine(machine).smem_per_cta == LIMIT
    depths = sched.buffer_depths()
    tiles = graph.fixed_smem + sum(depths.get(op.name, 1) * op.smem for op in graph.ops if op.smem)
    assert tiles <= LIMIT < tiles + 128 * 128 * 2  # the model fits; with a separate staging tile it would not
    report = kernel.report
    assert "epilogue store staging (not in the model)" not in report.shared_difference
    barriers = 8 * len(re.findall(r"mbarrier\.init\(", kernel.source))
    assert 0 <= report.shared_compiled - tiles - barriers <= 1024   # alignment and scratch only
    assert report.shared_compiled <= LIMIT
    # the staging tile is a view of a ring (a store after the loop, in the partition that read the rings)
    assert re.search(r"obuf\w* = ring_\w+\._reinterpret\(gl\.float16, \[128, 128\]", kernel.source)


def test_the_store_staged_in_a_ring_computes_the_product(small) -> None:
    _graph, _sched, kernel, _machine = small
    rng = np.random.default_rng(2)
    kdim = 320
    a = rng.standard_normal((128, kdim)).astype(np.float16)
    b = rng.standard_normal((128, kdim)).astype(np.float16)
    c = np.full((128, 128), np.nan, dtype=np.float16)
    consts = kernel.manifest["constexprs"]
    args = [Descriptor(a, [128, 64]), Descriptor(b, [128, 64]), Descriptor(c, [128, 128]), kdim,
            *(consts[x] for x in kernel.manifest["arg_names"] if x in consts)]
    run_kernel(kernel.source, "matmul", args, (1, 1))
    ref = a.astype(np.float32) @ b.astype(np.float32).T
    assert np.abs(c.astype(np.float32) - ref).max() / np.abs(ref).max() < 1e-2
