"""Shared fixtures of the solver-layer tests: machines and small problem builders."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from dataclasses import replace
from functools import cache
from pathlib import Path
from types import ModuleType

import pytest

from twill.ir.graph import Graph
from twill.ir.machine import Constant, Machine, load_machine
from twill.model.problem import Options, Problem, build_problem


@pytest.fixture(scope="session")
def h100() -> Machine:
    return load_machine("h100")


@pytest.fixture(scope="session")
def quick_h100(h100: Machine) -> Machine:
    """The H100 with one-cycle barrier hand-offs.

    With the real 92-cycle mbarrier, every edge out of a variable-latency op (which must sit on its own
    warp group) costs far more than the toy ops of these tests, and the searches get long. The solver
    layers take any machine, so the tests shrink the hand-off instead of the ops.
    """
    constants = dict(h100.constants)
    constants["handoff.mbarrier"] = Constant(1, "test machine: one-cycle mbarrier hand-off")
    constants["handoff.named_barrier"] = Constant(1, "test machine: one-cycle named barrier")
    return replace(h100, name="h100-quick-handoff", constants=constants)


def problem_on(graph: Graph, machine: Machine, caps: dict[str, int] | None = None,
               **options: object) -> Problem:
    """``build_problem`` with the unit capacities in ``caps`` replacing the machine's."""
    problem = build_problem(graph, machine, Options(**options))
    if caps:
        units = {**problem.resources.units, **caps}
        problem = replace(problem, resources=replace(problem.resources, units=units))
    return problem


@pytest.fixture(scope="session")
def make_problem():
    """The :func:`problem_on` helper, as a fixture."""
    return problem_on


BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


@cache
def _bench_module(name: str) -> ModuleType:
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))  # the scripts import their neighbours (synthetic, report_cli)
    spec = importlib.util.spec_from_file_location(f"_bench_{name}", BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def bench() -> Callable[[str], ModuleType]:
    """``bench("solve_times")``: a script of ``benchmarks/`` loaded as a module (once per session)."""
    return _bench_module


@pytest.fixture(scope="session")
def wgmma_serializations() -> Callable[[str], list[str]]:
    """A function: PTX text -> the codes of ptxas's notes that it serializes the kernel's wgmma pipeline
    (C7511 / C7512 / C7515, "wgmma.mma_async instructions are serialized due to ..."), from assembling the
    PTX for sm_90a with the Triton wheel's ptxas (independently of what a generator reports)."""
    import re
    import tempfile

    from twill.calibrate.regs import run_triton_tool

    def codes(ptx: str) -> list[str]:
        with tempfile.TemporaryDirectory(prefix="twill-test-ptxas-") as tmp:
            src = Path(tmp) / "k.ptx"
            src.write_text(ptx)
            log = run_triton_tool("ptxas", ["-v", "--gpu-name", "sm_90a", str(src), "-o",
                                            str(Path(tmp) / "k.cubin")], timeout=300)
        text = log.stdout + log.stderr
        return [m.group(1) for line in text.splitlines() if "instructions are serialized" in line
                for m in [re.search(r"\((C75\d\d)\)", line)] if m]

    return codes
