"""Run the configs of a sweep: in this process, in a local process pool, or as Ray tasks.

Results come back as each config finishes (``on_result``), whatever the engine. Ctrl-C (a
``KeyboardInterrupt`` in this process, or raised by a worker) stops the sweep: the results that finished
are kept and returned, the configs not finished are counted as cut (:class:`SweepResult`).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import multiprocessing
import os
import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from twill.errors import TwillError

__all__ = ["SweepResult", "run_sweep"]

Worker = Callable[[Any], dict[str, Any]]


@dataclass
class SweepResult:
    """What a sweep gave back.

    Attributes
    ----------
    results : list of dict
        One per finished config, in the order they finished.
    interrupted : bool
        Ctrl-C stopped the sweep.
    cut : int
        Configs that did not finish (not started or running when it stopped).
    engine : str
        ``serial``, ``process pool (N workers)`` or ``ray (ADDRESS)``.
    """

    results: list[dict[str, Any]] = field(default_factory=list)
    interrupted: bool = False
    cut: int = 0
    engine: str = "serial"


def _pool_worker_start(pids: Any) -> None:
    """Pool worker initializer: Ctrl-C goes to the parent, which stops the sweep; the worker's process id
    goes to ``pids`` (a queue), so that the parent can end it then."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    pids.put(os.getpid())


def _failed(task: Any, exc: BaseException) -> dict[str, Any]:
    """A result for a worker that raised (a bug: the worker reports bad configs itself)."""
    return {"index": getattr(task, "index", None), "constexprs": dict(getattr(task, "constexprs", {})),
            "num_warps": getattr(task, "num_warps", None), "num_stages": getattr(task, "num_stages", None),
            "fits": False, "reason": f"internal error: {type(exc).__name__}: {exc}", "predicted_ms": None,
            "predicted_tflops": None, "schedule": None, "details": {}, "error": "internal"}


def run_sweep(tasks: Sequence[Any], worker: Worker, *, jobs: int | None = None, ray: str | None = None,
              on_result: Callable[[dict[str, Any]], None] | None = None) -> SweepResult:
    """Run ``worker(task)`` for every task; return what finished.

    Parameters
    ----------
    tasks : sequence
        Picklable tasks (:class:`twill.tune.worker.Task`).
    worker : callable
        A module-level function (picklable) returning a plain-data result per task.
    jobs : int, optional
        Worker processes; default every core (``os.cpu_count()``); 1 runs in this process.
    ray : str, optional
        A Ray cluster address (``ray.init(address=...)``), or ``"local"`` to start a local Ray instance;
        the tasks then run as Ray tasks (extra ``twill[ray]``).
    on_result : callable, optional
        Called with each result as it comes back.

    Raises
    ------
    TwillError
        ``ray`` is given and Ray is not installed or cannot connect; ``jobs`` < 1.
    """
    if jobs is not None and jobs < 1:
        raise TwillError(f"--jobs {jobs} must be >= 1")
    out = SweepResult()
    done: set[int] = set()

    def keep(i: int, result: dict[str, Any]) -> None:
        done.add(i)
        out.results.append(result)
        if on_result is not None:
            on_result(result)

    try:
        if ray is not None:
            out.engine = f"ray ({ray})"
            _run_ray(tasks, worker, ray, keep)
        elif (jobs or os.cpu_count() or 1) == 1 or len(tasks) <= 1:
            out.engine = "serial"
            for i, task in enumerate(tasks):
                try:
                    result = worker(task)
                except KeyboardInterrupt:
                    raise
                except Exception as exc:  # a bug in the worker: report it on this config, go on
                    result = _failed(task, exc)
                keep(i, result)
        else:
            n = min(jobs or os.cpu_count() or 1, len(tasks))
            out.engine = f"process pool ({n} workers)"
            _run_pool(tasks, worker, n, keep)
    except KeyboardInterrupt:
        out.interrupted = True
    out.cut = len(tasks) - len(done)
    return out


def _run_pool(tasks: Sequence[Any], worker: Worker, n: int,
              keep: Callable[[int, dict[str, Any]], None]) -> None:
    context = multiprocessing.get_context("spawn")  # no fork of a process that has loaded Triton / threads
    pids = context.SimpleQueue()
    pool = concurrent.futures.ProcessPoolExecutor(max_workers=n, mp_context=context,
                                                  initializer=_pool_worker_start, initargs=(pids,))
    futures = {pool.submit(worker, task): i for i, task in enumerate(tasks)}
    try:
        for future in concurrent.futures.as_completed(futures):
            i = futures[future]
            try:
                result = future.result()
            except KeyboardInterrupt:
                raise
            except Exception as exc:  # a worker bug or a dead worker process
                result = _failed(tasks[i], exc)
            keep(i, result)
    except KeyboardInterrupt:
        # The configs still running are cut: their worker processes (started by this pool) are ended, so
        # that the command exits now rather than when the last running compile and solve would finish.
        pool.shutdown(wait=False, cancel_futures=True)
        while not pids.empty():
            pid = pids.get()
            with contextlib.suppress(OSError):  # already gone
                os.kill(pid, signal.SIGTERM)
        raise
    pool.shutdown(wait=True)


RAY_CONNECT_TIMEOUT_S = 5.0
"""Seconds to wait for a TCP connection to a ``--ray HOST:PORT`` address before calling it unreachable
(Ray itself retries an unreachable address for minutes)."""


def _check_reachable(address: str) -> None:
    """:class:`TwillError` when ``address`` (``HOST:PORT`` or ``ray://HOST:PORT``) takes no TCP connection
    within :data:`RAY_CONNECT_TIMEOUT_S`; ``local``, ``auto`` and other forms are left to Ray."""
    import socket

    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not host or not port.isdigit():
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=RAY_CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        raise TwillError(f"--ray {address}: nothing answers at {host}:{port} ({type(exc).__name__}: {exc}); "
                         "start a cluster there (ray start --head) or use --ray local") from None


def _run_ray(tasks: Sequence[Any], worker: Worker, address: str,
             keep: Callable[[int, dict[str, Any]], None]) -> None:
    try:
        import ray
    except ImportError:
        raise TwillError("--ray needs Ray: pip install 'twill[ray]'") from None
    started = False
    if not ray.is_initialized():
        _check_reachable(address)
        try:
            if address == "local":
                ray.init(include_dashboard=False, log_to_driver=False)
            else:
                ray.init(address=address, log_to_driver=False)
        except Exception as exc:  # Ray raises ConnectionError, RuntimeError, ValueError ...
            raise TwillError(f"--ray {address}: cannot start or reach Ray: {type(exc).__name__}: {exc}") \
                from exc
        started = True
    remote = ray.remote(worker)
    refs = {remote.remote(task): i for i, task in enumerate(tasks)}
    pending = list(refs)
    try:
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            for ref in ready:
                i = refs[ref]
                try:
                    result = ray.get(ref)
                except KeyboardInterrupt:
                    raise
                except Exception as exc:  # ray.exceptions.RayTaskError wraps the worker's exception
                    cause = getattr(exc, "cause", None)
                    if isinstance(cause, KeyboardInterrupt):
                        raise KeyboardInterrupt from exc
                    result = _failed(tasks[i], exc)
                keep(i, result)
    except KeyboardInterrupt:
        for ref in pending:
            ray.cancel(ref, force=True)
        raise
    finally:
        if started:
            ray.shutdown()
