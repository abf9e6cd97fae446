"""Code generators that turn a twill schedule into a kernel written by twill itself.

:mod:`twill.codegen.gluon` writes a warp-specialized Gluon (Triton 3.6 ``triton.experimental.gluon``)
kernel for Hopper from the loop's graph, its TTGIR and the schedule.
"""
