"""From a ``@triton.jit`` kernel or a ``.ttgir`` file to the :class:`twill.Graph` of its main loop.

* :mod:`twill.frontend.compile` -- compile a kernel on the CPU and snapshot its TTGIR before Triton's own
  software pipelining (:func:`compile_to_ttgir`, :func:`load_kernel`).
* :mod:`twill.frontend.ttgir` -- parse TTGIR into an op tree with types, attributes, lines and source
  locations (:func:`parse_ttgir`).
* :mod:`twill.frontend.targets` -- the one parser of compile targets (``sm_90``, ``cuda:100``) and
  :mod:`twill.frontend.constexprs` the one parser of ``--constexpr NAME=VALUE`` values.
* :mod:`twill.frontend.lower` -- fold, merge and cost the ops of the loop body into a graph
  (:func:`graph_from_ttgir`, :func:`graph_from_kernel`, :func:`lower_loop`).

Triton is imported lazily: importing this package is cheap.
"""

from twill.frontend.compile import (
    KernelSpec,
    TTGIRSnapshots,
    compile_to_ttgir,
    default_divisible,
    load_kernel,
)
from twill.frontend.constexprs import parse_constexprs
from twill.frontend.lower import Lowering, find_loop, graph_from_kernel, graph_from_ttgir, lower_loop
from twill.frontend.targets import target_capability, target_for
from twill.frontend.ttgir import Block, Op, TTGIRModule, Value, parse_ttgir

__all__ = [
    "Block",
    "KernelSpec",
    "Lowering",
    "Op",
    "TTGIRModule",
    "TTGIRSnapshots",
    "Value",
    "compile_to_ttgir",
    "default_divisible",
    "find_loop",
    "graph_from_kernel",
    "graph_from_ttgir",
    "load_kernel",
    "lower_loop",
    "parse_constexprs",
    "parse_ttgir",
    "target_capability",
    "target_for",
]
