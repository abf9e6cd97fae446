"""Running PuLP models on a chosen MILP backend, with statuses twill understands.

Backends: ``"cbc"`` (COIN-OR CBC, bundled with PuLP, run as a subprocess) and ``"highs"`` (HiGHS through
``highspy``, in process). Both are run with a zero optimality gap, so "optimal" means proven optimal.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass

import psutil
import pulp

from twill.errors import SolverError, SolverUnavailableError
from twill.solvers.status import SolveStatus

__all__ = ["BACKENDS", "IlpResult", "add_variable", "solve_ilp"]

BACKENDS = ("cbc", "highs")


def add_variable(model: pulp.LpProblem, name: str, low: float | None = None, up: float | None = None,
                 cat: str = "Continuous") -> pulp.LpVariable:
    """A variable of ``model``: ``model.add_variable`` where PuLP has it (3.x; constructing
    ``LpVariable`` directly is deprecated for PuLP 4), ``LpVariable`` otherwise (PuLP 2.8 onward)."""
    if hasattr(model, "add_variable"):
        return model.add_variable(name, low, up, cat=cat)
    return pulp.LpVariable(name, low, up, cat=cat)


@dataclass(frozen=True)
class IlpResult:
    """Status and wall time (seconds) of one MILP solve."""

    status: SolveStatus
    wall_s: float


def _solver(backend: str, time_limit: float | None) -> pulp.LpSolver:
    limit = None if time_limit is None else max(0.05, time_limit)
    if backend == "cbc":
        with warnings.catch_warnings():  # PuLP 3.x announces that PULP_CBC_CMD moves in PuLP 4 (pinned < 4)
            warnings.simplefilter("ignore", DeprecationWarning)
            # No ``threads``: any value (1 included) starts CBC's threaded search, whose lock wait
            # stalled 2-3 % of the calls for 10 s (the normalization ILP of the Blackwell GEMM, 150 calls:
            # 3 stalls and 50 s with ``threads=1``, none and 17 s without; CBC issue #640 reports the
            # same lock hangs with more threads). Without it CBC searches serially, on one core.
            return pulp.PULP_CBC_CMD(msg=False, timeLimit=limit, gapRel=0.0)
    if backend == "highs":
        if not pulp.HiGHS().available():
            raise SolverUnavailableError("MILP backend 'highs' needs the highspy package "
                                         "(pip install highspy); available: cbc")
        return pulp.HiGHS(msg=False, timeLimit=limit, gapRel=0.0, threads=1)
    raise SolverUnavailableError(f"unknown MILP backend {backend!r}; available: {', '.join(BACKENDS)}")


@contextlib.contextmanager
def _quiet_stdout(active: bool) -> Iterator[None]:
    """Silence file descriptor 1 (HiGHS prints a banner from C++ even with output turned off)."""
    if not active:
        yield
        return
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)
            yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def _end_children(executable: str) -> list[int]:
    """Terminate this process's child processes running ``executable``; return their ids.

    Only direct children of this process whose program (its executable, or the first word of its command
    line) is ``executable`` are touched: SIGTERM, then SIGKILL for any that has not exited within a
    second; each is reaped (:func:`psutil.wait_procs` waits on its own children).
    """
    if not executable:
        return []
    want = os.path.realpath(executable)
    found = []
    for child in psutil.Process().children(recursive=False):
        try:
            programs = {child.exe(), *child.cmdline()[:1]}
        except (psutil.NoSuchProcess, psutil.AccessDenied):  # gone, a zombie, or not ours to read
            continue
        if any(p and os.path.realpath(p) == want for p in programs):
            found.append(child)
    for child in found:
        with contextlib.suppress(psutil.NoSuchProcess):
            child.terminate()
    _, alive = psutil.wait_procs(found, timeout=1.0)
    for child in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            child.kill()
    psutil.wait_procs(alive, timeout=1.0)
    return [child.pid for child in found]


def solve_ilp(model: pulp.LpProblem, *, backend: str = "cbc", time_limit: float | None = None) -> IlpResult:
    """Solve ``model`` in place and classify the outcome.

    Parameters
    ----------
    model : pulp.LpProblem
        The model; on success its variables hold the solution.
    backend : str
        ``"cbc"`` or ``"highs"``.
    time_limit : float, optional
        Seconds; ``None`` for no limit.

    Raises
    ------
    SolverUnavailableError
        The backend is unknown or not installed.
    SolverError
        The backend failed (for example the CBC binary could not run).
    """
    solver = _solver(backend, time_limit)
    start = time.perf_counter()
    try:
        with _quiet_stdout(backend == "highs"):
            model.solve(solver)
    except pulp.PulpSolverError as exc:
        raise SolverError(f"MILP backend {backend!r} failed on model {model.name!r}: {exc}") from exc
    except KeyboardInterrupt:
        # PuLP runs CBC as a child process and forgets it when its wait is interrupted; a Ctrl-C that
        # reaches only this process (kill -INT, or a parent that forwards it) would leave CBC running.
        if backend == "cbc":
            _end_children(getattr(solver, "path", ""))
        raise
    wall = time.perf_counter() - start
    sol = model.sol_status
    if sol == pulp.LpSolutionOptimal:
        status = SolveStatus.OPTIMAL
    elif sol == pulp.LpSolutionIntegerFeasible:
        status = SolveStatus.FEASIBLE
    elif sol == pulp.LpSolutionInfeasible or model.status == pulp.LpStatusInfeasible:
        status = SolveStatus.INFEASIBLE
    elif sol == pulp.LpSolutionNoSolutionFound:
        timed_out = time_limit is not None and wall >= 0.9 * time_limit
        if not timed_out:
            raise SolverError(f"MILP backend {backend!r} found no solution for {model.name!r} "
                              f"without a proof of infeasibility (status {pulp.LpStatus[model.status]})")
        status = SolveStatus.TIMEOUT
    else:
        raise SolverError(f"MILP backend {backend!r} returned status {pulp.LpStatus[model.status]} "
                          f"for {model.name!r}")
    return IlpResult(status, wall)
