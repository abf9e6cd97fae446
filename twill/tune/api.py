"""``tune()``: expand a grid over a kernel and run every config (the library form of ``twill tune``)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from twill.errors import TwillError
from twill.tune.grid import Config, GridError, evaluate_count, evaluate_flops, expand, load_tune_problem
from twill.tune.runner import SweepResult, run_sweep
from twill.tune.worker import Task, default_cache_dir, tune_config

__all__ = ["BACKENDS", "TuneOutcome", "fixed_descriptors", "kernel_constexprs", "plan", "tune"]

BACKENDS = ("triton", "gluon")
"""What runs each config: the kernel Triton builds (:mod:`twill.tune.worker`), or the Gluon kernel generated
from twill's schedule of the config (:mod:`twill.tune.gluon_worker`)."""


@dataclass
class TuneOutcome:
    """A finished (or interrupted) sweep: results ranked later by :mod:`twill.tune.report`.

    Attributes
    ----------
    configs : list of Config
        The grid, in grid order.
    sweep : SweepResult
        What came back (``results``, ``interrupted``, ``cut``, ``engine``).
    meta : dict
        Kernel, machine, problem sizes, grid, options: the JSON's top-level keys.
    """

    configs: list[Config]
    sweep: SweepResult
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def results(self) -> list[dict[str, Any]]:
        """Results of the finished configs."""
        return self.sweep.results


def kernel_constexprs(spec: Any) -> list[str]:
    """Names of the ``tl.constexpr`` arguments of a loaded kernel (in argument order)."""
    fn = spec.fn
    indices = getattr(fn, "constexprs", None)
    if indices:
        return [fn.arg_names[i] for i in sorted(indices)]
    return [a for a in fn.arg_names if a in spec.constexprs]


def plan(kernel: str, grid: Mapping[str, Sequence[Any]], num_warps: Sequence[int] | None,
         num_stages: Sequence[int] | None, problem: Mapping[str, int] | None = None) -> tuple[Any, Any,
                                                                                          list[Config],
                                                                                          dict[str, int]]:
    """Load the kernel and its ``TWILL_TUNE`` entry, check the problem sizes, expand the grid.

    Returns ``(spec, tune_problem, configs, problem_sizes)``.

    Raises
    ------
    FrontendError
        The kernel cannot be loaded.
    GridError
        Unknown constexpr or problem size, an empty grid, no ``TWILL_TUNE`` entry, or launch arithmetic
        (``ctas``, ``trips``, ``flops``) that no config of the grid can evaluate (when only some cannot,
        those come back from the sweep with the error and the others are tuned).
    """
    from twill.frontend.compile import load_kernel

    spec = load_kernel(kernel)
    tp = load_tune_problem(spec.fn.__globals__.get("TWILL_TUNE"), spec.name, source=spec.source)
    sizes = dict(tp.problem)
    for name, value in (problem or {}).items():
        if name not in sizes:
            raise GridError(f"problem size {name!r} is not one of {spec.name}'s ({', '.join(sorted(sizes))})")
        if not isinstance(value, int) or value < 1:
            raise GridError(f"problem size {name}={value!r} must be a positive integer")
        sizes[name] = value
    warps = list(num_warps) if num_warps is not None else [spec.num_warps]
    stages = list(num_stages) if num_stages is not None else [spec.num_stages]
    configs = expand(grid, warps, stages, kernel_constexprs=kernel_constexprs(spec), defaults=spec.constexprs,
                     kernel=spec.name)
    # The launch arithmetic of every config, before any work: when no config can use it (a typo in an
    # expression, a grid of values none of which is a number) the sweep is refused with the first error;
    # a config whose values alone break it (BLOCK_N=0 in ceil(N / BLOCK_N)) comes back from the worker
    # with that error, and the others are tuned.
    errors = []
    for c in configs:
        names = tp.names(c.constexprs, sizes)
        try:
            checks = [("ctas", tp.ctas, evaluate_count), ("flops", tp.flops, evaluate_flops)]
            checks += [("trips" if len(tp.trip_expressions) == 1 else f"trips[{i}]", e, evaluate_count)
                       for i, e in enumerate(tp.trip_expressions)]
            for what, expression, check in checks:
                check(expression, names, where=f"TWILL_TUNE[{spec.name!r}].{what} for {c.label}")
        except GridError as exc:
            errors.append(exc)
    if configs and len(errors) == len(configs):
        raise errors[0]
    return spec, tp, configs, sizes


def fixed_descriptors(spec: Any, tp: Any, grid: Mapping[str, Sequence[Any]]) -> list[str]:
    """A note per tensor-descriptor argument whose block does not follow the grid: it has no
    ``TWILL_TUNE`` ``descriptors`` entry, so every config compiles it with the ``TWILL_KERNELS`` block
    (``tensordesc<fp16[128, 64]>``) whatever the grid's tile, which Triton then refuses as a shape
    mismatch ("accumulator shape is incompatible") or which fixes that tile. Empty when the grid is.

    >>> from types import SimpleNamespace as NS
    >>> spec = NS(name="mm", signature={"a_desc": "tensordesc<fp16[128, 64]>", "K": "i32"})
    >>> fixed_descriptors(spec, NS(descriptors={}), {"BLOCK_M": [64, 128]})[0][:48]
    "TWILL_TUNE['mm'] gives no descriptors entry for "
    """
    if not grid:
        return []
    return [f"TWILL_TUNE[{spec.name!r}] gives no descriptors entry for {arg}, so its block stays {text} in "
            f"every config whatever --grid {', '.join(grid)} says (give its block in constexpr names: "
            "twill/tune/grid.py)"
            for arg, text in spec.signature.items()
            if str(text).startswith("tensordesc<") and arg not in tp.descriptors]


def _check_machine(machine: str) -> None:
    """Load ``machine`` and its compile target once, so a bad name fails the sweep before it starts rather
    than every config."""
    from twill.frontend.compile import target_for
    from twill.ir.machine import load_machine

    target_for(load_machine(machine))


def _check_cache_dir(cache: str | os.PathLike[str]) -> None:
    """:class:`TwillError` if the compile cache ``cache`` cannot be a folder twill writes into."""
    path = Path(cache)
    if path.exists() and not path.is_dir():
        raise TwillError(f"--cache-dir {cache}: it exists and is not a folder")
    base = next(a for a in (path.resolve(), *path.resolve().parents) if a.exists())
    if not base.is_dir() or not os.access(base, os.W_OK):
        raise TwillError(f"--cache-dir {cache}: {base} is not a writable folder")


def tune(kernel: str, machine: str, grid: Mapping[str, Sequence[Any]], *,
         num_warps: Sequence[int] | None = None, num_stages: Sequence[int] | None = None,
         problem: Mapping[str, int] | None = None, backend: str = "triton", time_limit: float = 5.0,
         jobs: int | None = None, ray: str | None = None, cache_dir: str | None = "default",
         worker: Callable[[Task], dict[str, Any]] | None = None,
         on_start: Callable[[int], None] | None = None,
         on_result: Callable[[dict[str, Any]], None] | None = None) -> TuneOutcome:
    """Predict every config of ``grid`` x ``num_warps`` x ``num_stages`` for ``kernel`` on ``machine``.

    Parameters
    ----------
    kernel : str
        ``FILE.py[::KERNEL]`` with ``TWILL_KERNELS`` and ``TWILL_TUNE`` entries.
    machine : str
        Machine name or TOML path.
    grid : mapping of str to sequence
        Constexpr name -> values (:func:`twill.tune.grid.parse_grid`).
    num_warps, num_stages : sequence of int, optional
        Default: the kernel entry's one value.
    problem : mapping of str to int, optional
        Problem sizes overriding ``TWILL_TUNE``'s (``seq_len``, ``M`` ...).
    backend : str
        ``"triton"`` (the kernel Triton builds for each config) or ``"gluon"`` (the Gluon kernel generated
        from twill's schedule of each config, :mod:`twill.tune.gluon_worker`).
    time_limit : float
        Seconds for twill's solve per config.
    jobs, ray : see :func:`twill.tune.runner.run_sweep`.
    cache_dir : str or None
        Compile cache folder; ``"default"``: :func:`twill.tune.worker.default_cache_dir`; None: no cache.
    worker : callable, optional
        The per-config function (default :func:`twill.tune.worker.tune_config`; a module-level function,
        so that worker processes can import it).
    on_start, on_result : callable, optional
        Called with the number of configs before the sweep, and with each result.

    Raises
    ------
    FrontendError, GridError
        As :func:`plan` (before any config runs).
    TwillError
        ``--ray`` without Ray installed, bad ``jobs``; a ``machine`` that is not a bundled name or a
        readable machine file, or whose arch Triton cannot compile for; a ``cache_dir`` that is a file
        or lies under no writable folder (each before any config runs).
    """
    if backend not in BACKENDS:
        raise GridError(f"--backend {backend!r} is not supported; use {' or '.join(BACKENDS)}")
    if not time_limit > 0:
        raise GridError(f"--time-limit {time_limit!r} must be > 0 seconds")
    _check_machine(machine)
    spec, tp, configs, sizes = plan(kernel, grid, num_warps, num_stages, problem)
    cache = default_cache_dir() if cache_dir == "default" else cache_dir
    if cache is not None:
        _check_cache_dir(cache)
    tasks = [Task(kernel, machine, dict(c.constexprs), c.num_warps, c.num_stages, dict(sizes), time_limit,
                  backend, cache, c.index) for c in configs]
    if on_start is not None:
        on_start(len(tasks))
    sweep = run_sweep(tasks, worker or tune_config, jobs=jobs, ray=ray, on_result=on_result)
    meta = {"kernel": kernel, "kernel_entry": spec.name, "machine": machine, "backend": backend,
            "problem": sizes, "grid": {k: list(v) for k, v in grid.items()},
            "num_warps": sorted({c.num_warps for c in configs}),
            "num_stages": sorted({c.num_stages for c in configs}), "time_limit_s": time_limit,
            "engine": sweep.engine, "total": len(tasks), "finished": len(sweep.results),
            "interrupted": sweep.interrupted, "cut": sweep.cut,
            "notes": fixed_descriptors(spec, tp, grid),
            "expressions": {"ctas": tp.ctas, "flops": tp.flops,
                            "trips": tp.trips if isinstance(tp.trips, str) else list(tp.trips)}}
    return TuneOutcome(configs, sweep, meta)
