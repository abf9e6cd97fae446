"""Speculative probes on forked copies of the solver process: a probe that is likely refuted runs in a
child while the parent goes on as if it were refuted (issue 26: a portfolio on the machine's cores).

:func:`~twill.solvers.joint.smt.solve_joint` asks a sequence of SMT checks in one session, and where a
check is refuted (UNSAT) its answer carries no model: only the fact goes forward. The joint solver's
answer here is defined so that such a fact can be learned elsewhere: **a probe the search predicts to be
refuted (:data:`PREDICTED`) is run on a copy of the session, never in the session itself.** The copy is a
child process made by ``os.fork`` at the probe, so it holds exactly the parent's solver state. If the
probe is refuted, the child reports it and exits, and the parent's session, which never saw the probe,
is the one the definition continues with; the parent went on at once, as if refuted, so the probe ran
beside the parent's next checks on another core. If the probe is not refuted (a model, or a deadline),
the child's session *is* the continuation (the probe asked in the parent's state) and the child carries
the search on; the parent's work since the fork is void, and its answer is the child's final answer.

Which process computes what changes only who does the work, never the sequence of checks any session
sees, so the answer (every start time included) is the same whether the children run beside the parent
or one at a time (:data:`SLOTS` ``0``, one core), and whatever the timing. A refuted probe is a proof
wherever it runs (the copy has the same formula); a child that stops undecided takes over and reports
undecided, exactly as the probe would have in place, so nothing undecided is counted as refuted.

Precondition: ``os.fork`` (POSIX). Where it is missing every probe runs in the session itself (the
sequence of checks then differs, so start times can differ where every goal ties; every goal value is
the same, each being proven least).
"""

from __future__ import annotations

import contextlib
import os
import pickle
import select
import signal
import struct
from dataclasses import dataclass
from typing import Any

from twill.errors import SolverError
from twill.solvers.status import CheckResult

__all__ = ["PREDICTED", "SLOTS", "Speculator", "Superseded", "available", "slots"]

PREDICTED = ("lower windows", "first length probe")
"""The probes predicted refuted, each run on a forked copy (a tuning choice: a wrong prediction costs a
fork and the parent's void work on the other core, never the answer):

* ``"lower windows"``: each stage window below the last one asked for an II
  (:func:`~twill.solvers.joint.smt.solve_joint` with ``first``): the modulo length's lower bound opens the
  first window, and the joint constraints (groups, registers, hand-offs) usually push ``L`` past it.
* ``"first length probe"``: the length goal's first probe, the midpoint between the window's bound and
  the first model's ``L``: the first model of a window lies far above the least ``L``, which lies near
  the window's refuted part."""

SLOTS: int | None = None
"""Children that may run their probe beside the parent at once; ``None``: the CPUs this process may use,
less one (:func:`slots`). ``0`` runs every predicted probe on a copy and waits for it (the same answer,
sequentially)."""

_MAGIC_REFUTED, _MAGIC_TAKEN, _MAGIC_ERROR = b"R", b"T", b"E"


class Superseded(Exception):  # noqa: N818  (a control-flow signal, not an error)
    """Raised in a parent whose speculation was wrong: a child's probe was not refuted, so the parent's
    work since that fork is void and its answer is the child's (:meth:`Speculator.finish`)."""


def available() -> bool:
    """Whether this platform can fork (the precondition of speculation)."""
    return hasattr(os, "fork")


def slots() -> int:
    """:data:`SLOTS`, or the CPUs this process may run on less one (at least 0)."""
    if SLOTS is not None:
        return max(0, SLOTS)
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cpus = os.cpu_count() or 1
    return max(0, cpus - 1)


@dataclass
class _Child:
    pid: int
    fd: int
    verdict: bytes | None = None
    checks: int = 0


def _read(fd: int, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = os.read(fd, n - len(out))
        if not chunk:
            break
        out += chunk
    return out


def _write(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


class Speculator:
    """The forked children of one process's joint solve, in fork order, and its link to its own parent.

    Parameters
    ----------
    room : int
        Children whose probe may run at once (:func:`slots`); at a fork past it the parent first waits
        for the oldest child's verdict.
    """

    def __init__(self, room: int) -> None:
        self.room = room
        self.pending: list[_Child] = []
        self.out: int | None = None  # in a child: the pipe to its parent
        self.deciding = False  # in a child: its probe's verdict is not yet sent
        self.forked_checks = 0  # in a child: the session's checks at the fork
        self.extra_checks = 0  # checks of refuted children (the session never counted them)

    @property
    def is_child(self) -> bool:
        """This process is a fork (it must never return to the caller of the solve)."""
        return self.out is not None

    def branch(self, checks: int) -> bool:
        """Fork at a probe predicted refuted. Returns True in the child, which asks the probe and then calls
        :meth:`verdict`; False in the parent, which goes on as if the probe were refuted. ``checks`` is
        the session's check count (the child reports the checks it adds).

        Raises
        ------
        Superseded
            In the parent, when an earlier child's probe was not refuted.
        """
        while sum(c.verdict is None for c in self.pending) > self.room:
            self._wait_oldest()
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: its parent's other children are not its own
            inherited = [read, *(c.fd for c in self.pending if c.fd >= 0), *([self.out] if self.out else [])]
            self.pending, self.out, self.deciding, self.forked_checks = [], write, True, checks
            for fd in inherited:
                with contextlib.suppress(OSError):
                    os.close(fd)
            self.extra_checks = 0
            with contextlib.suppress(ValueError):  # not the main thread: the handlers stay as they were
                signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and ends it
                signal.signal(signal.SIGTERM, self._terminate)  # ended by the parent: end its own children
            return True
        os.close(write)
        self.pending.append(_Child(pid, read))
        while sum(c.verdict is None for c in self.pending) > self.room:
            self._wait_oldest()
        return False

    def verdict(self, status: CheckResult, checks: int) -> None:
        """In a child after its probe: refuted, report and exit; otherwise report that it takes over and
        return (the child carries the search on)."""
        if not self.deciding:
            return
        self.deciding = False
        assert self.out is not None
        if status == CheckResult.UNSAT:
            _write(self.out, _MAGIC_REFUTED + struct.pack("<q", checks - self.forked_checks + self.extra_checks))
            self._reap_all()
            os._exit(0)
        _write(self.out, _MAGIC_TAKEN)

    def superseded(self) -> bool:
        """Whether a child has taken over (non-blocking): this process's work since its fork is void."""
        ready = [c for c in self.pending if c.verdict is None]
        if ready:
            readable, _, _ = select.select([c.fd for c in ready], [], [], 0)
            for child in ready:
                if child.fd in readable:
                    self._take_verdict(child)
        return any(c.verdict != _MAGIC_REFUTED and c.verdict is not None for c in self.pending)

    def poll(self) -> None:
        """Raise :class:`Superseded` if a child has taken over."""
        if self.superseded():
            raise Superseded

    def finish(self, result: Any) -> Any:
        """This process's answer: its own ``result`` if every child's probe was refuted, else the final
        answer of the first child that took over (its own later children void). In a child, hand the
        answer to the parent and exit; in the original process, return it. ``result`` None: this
        process was superseded."""
        answer, extra = result, 0
        for i, child in enumerate(self.pending):
            if child.verdict is None:
                self._take_verdict(child)
            if child.verdict == _MAGIC_REFUTED:
                extra += child.checks
                continue
            for later in self.pending[i + 1:]:
                self._kill(later)
            answer = self._final(child)
            break
        else:
            extra += self.extra_checks
            if answer is None:
                raise SolverError("internal error: a speculative solve was superseded by no child")
        self.pending = []
        if extra and hasattr(answer, "checks"):
            answer = _with_checks(answer, answer.checks + extra)
        if self.out is not None:
            data = pickle.dumps(answer)
            _write(self.out, struct.pack("<q", len(data)) + data)
            os._exit(0)
        return answer

    def fail(self, exc: BaseException) -> None:
        """In a child: report ``exc`` to the parent and exit (a fork never unwinds into the caller)."""
        with contextlib.suppress(BaseException):
            self.abandon()
            if self.out is not None:
                msg = f"{type(exc).__name__}: {exc}".encode(errors="replace")
                _write(self.out, _MAGIC_ERROR + struct.pack("<q", len(msg)) + msg)
        os._exit(1)

    def abandon(self) -> None:
        """End every child (the solve is left by an exception)."""
        for child in self.pending:
            self._kill(child)
        self.pending = []

    def _wait_oldest(self) -> None:
        child = next(c for c in self.pending if c.verdict is None)
        self._take_verdict(child)
        if child.verdict != _MAGIC_REFUTED:
            raise Superseded

    def _take_verdict(self, child: _Child) -> None:
        tag = _read(child.fd, 1)
        if tag == _MAGIC_REFUTED:
            child.checks = struct.unpack("<q", _read(child.fd, 8))[0]
            os.close(child.fd)
            child.fd = -1
            _reap(child.pid)
        elif tag == _MAGIC_TAKEN:
            pass
        else:
            self._raise_from(child, tag)
        child.verdict = tag

    def _final(self, child: _Child) -> Any:
        head = _read(child.fd, 8)
        if len(head) < 8:
            self._raise_from(child, head[:1])
        if head[:1] == _MAGIC_ERROR and len(head) == 8:  # an error after it took over
            self._raise_from(child, _MAGIC_ERROR, head[1:])
        size = struct.unpack("<q", head)[0]
        data = _read(child.fd, size)
        os.close(child.fd)
        _reap(child.pid)
        return pickle.loads(data)  # noqa: S301  (our own fork's answer)

    def _raise_from(self, child: _Child, tag: bytes, head: bytes = b"") -> None:
        msg = "the process exited without a verdict"
        if tag == _MAGIC_ERROR:
            rest = head + _read(child.fd, 8 - len(head))
            size = struct.unpack("<q", rest)[0] if len(rest) == 8 else 0
            msg = _read(child.fd, size).decode(errors="replace")
        self.abandon()
        if msg.startswith("KeyboardInterrupt"):
            raise KeyboardInterrupt
        raise SolverError(f"speculative probe (twill.solvers.joint.speculate) failed: {msg}")

    def _terminate(self, signum: int, frame: Any) -> None:
        """SIGTERM in a child: end its own children, then exit (it is void)."""
        self.abandon()
        os._exit(0)

    def _kill(self, child: _Child) -> None:
        with contextlib.suppress(OSError):
            os.kill(child.pid, signal.SIGTERM)
        if child.fd >= 0:
            with contextlib.suppress(OSError):
                os.close(child.fd)
            child.fd = -1
        _reap(child.pid)

    def _reap_all(self) -> None:
        for child in self.pending:
            self._kill(child)


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, 0)


def _with_checks(result: Any, checks: int) -> Any:
    import dataclasses

    return dataclasses.replace(result, checks=checks)
