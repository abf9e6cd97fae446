"""twill: provably optimal software pipelining and warp specialization for Tensor Core GPU loops.

The public surface::

    import twill
    g = twill.Graph("loop")                 # or twill.graph_from_kernel("kernel.py::fn", machine="h100")
    ...
    s = twill.schedule(g, machine="h100")  # -> twill.Schedule, verified
    twill.verify(s)                         # independent re-check; raises ScheduleError
    print(s.to_json())
    r = twill.simulate(s, iterations=100)   # one SM, cycles per iteration, stalls, deadlocks
    print(twill.explain(g, "h100").lines())  # which constraint families bind II and L

See ``docs/`` for the model, the constraint families and the errors.
"""

from __future__ import annotations

import sys
from typing import Any

from twill import moved as _moved
from twill.analysis.explain import Explanation, explain
from twill.analysis.simulate import SimResult, simulate
from twill.errors import (
    FrontendError,
    GraphError,
    InfeasibleError,
    InterruptedSolveError,
    MachineError,
    OptionsError,
    ResourceError,
    ScheduleError,
    SimulationError,
    SolverError,
    SolverUnavailableError,
    TwillError,
    TwillWarning,
    UnsupportedOpError,
)
from twill.ir.graph import Dependence, Graph, Op, Reservation
from twill.ir.machine import Machine, known_machines, load_machine
from twill.schedule import Certificate, Schedule, WarpGroup
from twill.search.algorithm1 import schedule
from twill.search.progress import EventKind, ProgressEvent
from twill.verify import verify, violations

# old flat paths (twill.problem, ...) still import, with a DeprecationWarning
_moved.install(sys.modules[__name__])

__version__ = "0.1.0"

__all__ = [
    "Certificate",
    "Dependence",
    "EventKind",
    "Explanation",
    "FrontendError",
    "Graph",
    "GraphError",
    "InfeasibleError",
    "InterruptedSolveError",
    "Machine",
    "MachineError",
    "Op",
    "OptionsError",
    "ProgressEvent",
    "Reservation",
    "ResourceError",
    "Schedule",
    "ScheduleError",
    "SimResult",
    "SimulationError",
    "SolverError",
    "SolverUnavailableError",
    "TwillError",
    "TwillWarning",
    "UnsupportedOpError",
    "WarpGroup",
    "explain",
    "graph_from_ddg",
    "graph_from_kernel",
    "graph_from_ttgir",
    "known_machines",
    "load_machine",
    "schedule",
    "simulate",
    "verify",
    "violations",
]


def __getattr__(name: str) -> Any:
    """``twill.problem`` etc. as attributes: the moved module, imported through its old path (warns)."""
    if f"twill.{name}" in _moved.MOVED:
        import importlib

        return importlib.import_module(f"twill.{name}")
    raise AttributeError(f"module 'twill' has no attribute {name!r}")


def graph_from_kernel(*args: Any, **kwargs: Any) -> Graph:
    """Compile a Triton kernel on the CPU and build the graph of its loop (see :mod:`twill.frontend`)."""
    from twill.frontend.lower import graph_from_kernel as impl

    return impl(*args, **kwargs)


def graph_from_ddg(*args: Any, **kwargs: Any) -> Graph:
    """Build the graph of one loop of an FBTriton ``ddg-0.1`` dump (see :mod:`twill.frontend.ddg`)."""
    from twill.frontend.ddg import graph_from_ddg as impl

    return impl(*args, **kwargs)


def graph_from_ttgir(*args: Any, **kwargs: Any) -> Graph:
    """Build the graph of the loop of a TTGIR text or file (see :mod:`twill.frontend`)."""
    from twill.frontend.lower import graph_from_ttgir as impl

    return impl(*args, **kwargs)
