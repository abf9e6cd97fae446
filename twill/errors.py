"""The errors twill raises, one class per kind of failure.

Every message names what is wrong and where: the op, the edge, the TTGIR line or the TOML key.
``docs/errors.md`` gives the cause and the fix for each class.

Hierarchy::

    TwillError
    ├── GraphError            malformed dependence graph (op, edge, source location)
    ├── MachineError          unknown machine, bad or missing TOML key
    ├── OptionsError          a search option out of range (max_stages=0, an unknown relax family)
    ├── FrontendError         unreadable TTGIR, no loop, nested loops, control flow
    │   └── UnsupportedOpError    an op the cost model does not know
    ├── ResourceError         a problem that cannot fit before any solver runs (registers, SMEM, TMEM)
    ├── InfeasibleError       the search range holds no schedule (carries the certificate)
    ├── SolverError           a solver failed or returned garbage
    │   └── SolverUnavailableError   a backend cannot be loaded
    ├── InterruptedSolveError a solve stopped by the user (carries the best schedule so far)
    ├── ScheduleError         a schedule violates a constraint family (raised by ``verify``)
    └── SimulationError       a simulated schedule deadlocks (raised by ``twill.analysis.simulate``)

    TwillWarning (a UserWarning)  something the user should know that is not an error (an ``scf.if``
                                  if-converted by the frontend)
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "FrontendError",
    "GraphError",
    "InfeasibleError",
    "InterruptedSolveError",
    "MachineError",
    "OptionsError",
    "ResourceError",
    "ScheduleError",
    "SimulationError",
    "SolverError",
    "SolverUnavailableError",
    "TwillError",
    "TwillWarning",
    "UnsupportedOpError",
]


def _rebuild(cls: type[TwillError], args: tuple[Any, ...], state: dict[str, Any]) -> TwillError:
    """Unpickle a twill error without calling its ``__init__`` (whose keyword-only fields differ)."""
    err = cls.__new__(cls, *args)
    err.args = args
    err.__dict__.update(state)
    return err


class TwillError(Exception):
    """Base class of every error twill raises on purpose.

    Every twill error pickles with its message and fields (``op``, ``line``, ``certificate``, ...), so it
    crosses process boundaries (``multiprocessing``, ``concurrent.futures``) intact.
    """

    def __reduce__(self) -> tuple[Any, ...]:
        return _rebuild, (type(self), self.args, dict(self.__dict__))


class GraphError(TwillError, ValueError):
    """A dependence graph is malformed.

    Attributes
    ----------
    op : str or None
        The op at fault, if one is.
    edge : tuple of (str, str) or None
        The edge ``(src, dst)`` at fault, if one is.
    source : str or None
        Where the op or edge came from (TTGIR location or Python line).
    """

    def __init__(
        self,
        message: str,
        *,
        op: str | None = None,
        edge: tuple[str, str] | None = None,
        source: str | None = None,
    ) -> None:
        if source:
            message = f"{message} (at {source})"
        super().__init__(message)
        self.op = op
        self.edge = edge
        self.source = source


class MachineError(TwillError, ValueError):
    """A machine description is unknown, incomplete or invalid.

    Attributes
    ----------
    key : str or None
        The dotted TOML key at fault, e.g. ``"units.tc.capacity"``.
    file : str or None
        The TOML file read.
    """

    def __init__(self, message: str, *, key: str | None = None, file: str | None = None) -> None:
        prefix = f"{file}: " if file else ""
        super().__init__(prefix + message)
        self.key = key
        self.file = file


class OptionsError(TwillError, ValueError):
    """A search option is out of range or of the wrong type (``max_stages=0``, ``stage_slack=-1``, an
    unknown ``relax`` family).

    Attributes
    ----------
    option : str
        The option's name, as :func:`twill.schedule` spells it.
    """

    def __init__(self, message: str, *, option: str) -> None:
        super().__init__(message)
        self.option = option


class TwillWarning(UserWarning):
    """Something twill did that the user should know about but that is not an error, such as an ``scf.if``
    in the loop body that the frontend if-converted (both branches run, the result is selected)."""


class FrontendError(TwillError, ValueError):
    """A kernel or TTGIR file cannot be turned into a loop graph.

    Attributes
    ----------
    line : int or None
        The 1-based line of the TTGIR text at fault, when known.
    location : str or None
        The source location (``file:line:col``) that Triton attached to the op.
    """

    def __init__(self, message: str, *, line: int | None = None, location: str | None = None) -> None:
        where = []
        if line is not None:
            where.append(f"TTGIR line {line}")
        if location:
            where.append(location)
        if where:
            message = f"{message} ({', '.join(where)})"
        super().__init__(message)
        self.line = line
        self.location = location


class UnsupportedOpError(FrontendError):
    """The cost model has no rule for an op found in the loop body.

    Attributes
    ----------
    op_name : str
        The TTGIR op name, e.g. ``"tt.histogram"``.
    """

    def __init__(
        self, op_name: str, *, line: int | None = None, location: str | None = None, hint: str = ""
    ) -> None:
        message = f"op {op_name!r} is not known to the cost model"
        if hint:
            message += f"; {hint}"
        super().__init__(message, line=line, location=location)
        self.op_name = op_name


class ResourceError(TwillError, ValueError):
    """A problem cannot fit the machine, found by arithmetic before any solver call.

    The message carries the arithmetic (the values and the sum against the capacity).

    Attributes
    ----------
    resource : str
        ``"registers"``, ``"smem"``, ``"tmem"``, ``"register_file"`` or ``"warps"``.
    """

    def __init__(self, message: str, *, resource: str) -> None:
        super().__init__(message)
        self.resource = resource


class InfeasibleError(TwillError):
    """No schedule exists in the searched range.

    Attributes
    ----------
    certificate : twill.schedule.Certificate or None
        What was proven for every II tried.
    """

    def __init__(self, message: str, *, certificate: Any = None) -> None:
        super().__init__(message)
        self.certificate = certificate


class SolverError(TwillError, RuntimeError):
    """A solver backend failed (crashed, returned an unknown status or an invalid model)."""


class SolverUnavailableError(SolverError):
    """A solver backend cannot be loaded; the message says how to fix it and what else is available."""


class InterruptedSolveError(TwillError, KeyboardInterrupt):
    """The solve was interrupted (Ctrl-C).

    Attributes
    ----------
    schedule : twill.schedule.Schedule or None
        The best schedule found before the interrupt, marked not proven optimal, if any.
    """

    def __init__(self, message: str, *, schedule: Any = None) -> None:
        super().__init__(message)
        self.schedule = schedule


class ScheduleError(TwillError, AssertionError):
    """A schedule violates a constraint family.

    Attributes
    ----------
    family : str
        The constraint family, e.g. ``"dependence"``, ``"capacity"``, ``"registers"``.
    op : str or None
        The op involved, when there is one.
    """

    def __init__(self, message: str, *, family: str, op: str | None = None) -> None:
        super().__init__(f"{family}: {message}")
        self.family = family
        self.op = op


class SimulationError(TwillError, RuntimeError):
    """A simulated loop cannot finish: every unfinished warp group waits for something that never comes.

    Attributes
    ----------
    op : str or None
        The op the first blocked warp group waits to issue.
    iteration : int or None
        Its iteration.
    barrier : str or None
        The barrier it waits on, e.g. ``"the empty barrier of 'k' slot 0 phase 1 (depth 1)"``.
    group : int or None
        Its warp group.
    waits : tuple of str
        One line per blocked warp group: what it waits for and who would provide it.
    cycle : float
        Simulated time of the deadlock, cycles.
    """

    def __init__(self, message: str, *, op: str | None = None, iteration: int | None = None,
                 barrier: str | None = None, group: int | None = None, waits: tuple[str, ...] = (),
                 cycle: float = 0.0) -> None:
        super().__init__(message)
        self.op = op
        self.iteration = iteration
        self.barrier = barrier
        self.group = group
        self.waits = waits
        self.cycle = cycle
