"""``twill tune``: predict the time of every config of a tile / warps / stages grid, on the CPU.

* :mod:`twill.tune.grid` -- the grid (``--grid NAME=V1,V2``), the kernel file's ``TWILL_TUNE`` problem;
* :mod:`twill.tune.triton_model` -- Triton's own pipeline as a twill schedule, simulated, with the costs
  the hardware adds (issue slots, wgmma operand reads, barrier waits);
* :mod:`twill.tune.triton_loop` -- one loop of the kernel Triton builds, priced (a kernel of several
  sibling loops is priced loop by loop);
* :mod:`twill.tune.peak` -- a prediction's TFLOP/s against the machine's Tensor Core peak;
* :mod:`twill.tune.worker` -- one config: compile, check it fits, solve, predict;
* :mod:`twill.tune.runner` -- the sweep over a process pool or Ray, with Ctrl-C keeping what finished;
* :mod:`twill.tune.report` -- ranking, table, JSON, plot;
* the command line is :mod:`twill.cli.tune` (``twill tune``).
"""
