"""Gluon backend: a warp-specialized Hopper (sm_90) or Blackwell (sm_100) kernel from a twill schedule.

    from twill.codegen.gluon import generate, load
    kernel = generate(schedule, "examples/gemm.py", "h100", "out/gemm")   # on the CPU: generate + compile
    print(kernel.report.render())
    launch = load("out/gemm")                                             # on a GPU: torch + triton only
    launch[grid](a_desc, b_desc, c_desc, K)

Modules: :mod:`.plan` (partitions, rings, turns), :mod:`.layouts` (TTGIR layouts for a partition's warps),
:mod:`.ops` (TTGIR op -> Gluon table), :mod:`.emit` (the source), :mod:`.build` (compile, report, save),
:mod:`.loader` (load a saved kernel without twill); sm_100: :mod:`.tmem` (tensor-memory buffers, columns,
waits) and :mod:`.blackwell` (tcgen05 partitions and the kernel target).
"""

from twill.codegen.gluon.build import GluonKernel, GluonReport, PartitionReport, generate
from twill.codegen.gluon.errors import CodegenError
from twill.codegen.gluon.loader import load

__all__ = ["CodegenError", "GluonKernel", "GluonReport", "PartitionReport", "generate", "load"]
