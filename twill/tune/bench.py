"""Launch and time tuning configs on a GPU with only torch and Triton (no other part of twill).

``twill tune --measure`` times through this module (:mod:`twill.tune.measure`), and so does a GPU machine
that has torch and Triton but not twill's solvers: this file imports nothing from twill, so it runs by
path (``benchmarks/tune_measure.py`` does) on the JSON ``twill tune --json`` wrote on the CPU::

    python3 benchmarks/tune_measure.py tune.json --top 3 --out measured.json    # on the GPU machine
    python3 benchmarks/tune_measure.py --score measured.json                    # anywhere: Spearman (scipy)

How a config is launched:

* the kernel file (``meta["kernel"]``, ``FILE.py[::ENTRY]``) is imported by path; its ``TWILL_TUNE[entry]
  ["inputs"]`` function, ``inputs(constexprs, problem) -> (grid, args)``, makes the launch arguments on the
  GPU (inputs filled, outputs preallocated);
* ``triton``: the entry's JIT function (``TWILL_KERNELS[entry].get("kernel", entry)``) as
  ``fn[grid](*args, **constexprs, num_warps=W, num_stages=S)``;
* ``gluon``: the generated kernel in ``details["gluon_kernel"]`` through ``loader.py`` of
  ``twill/codegen/gluon`` (imported by path), bound once (``bind``), so the descriptor conversion is not
  timed.

Each launch is timed by ``triton.testing.do_bench(fn, return_mode="median")`` (its warm-up, which also
JIT-compiles, and repetitions; the L2 flushed between runs). The inputs are made before the timing: no
allocation or copy is in the timed region.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["do_bench_median", "inputs_function", "launch_config", "load_file", "measure_document", "ranked",
           "spearman"]

LOADER = Path(__file__).resolve().parents[1] / "codegen" / "gluon" / "loader.py"
"""The Gluon loader (torch and Triton only)."""


def load_file(path: str | Path) -> Any:
    """Import a kernel file by path (a fresh module named after the file)."""
    path = Path(path)
    name = f"twill_bench_{path.stem}_{abs(hash(str(path.resolve()))) % 10**8}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def inputs_function(module: Any, entry: str, where: str = "the kernel file") -> Callable[..., Any]:
    """The ``inputs`` function ``TWILL_TUNE[entry]`` names in ``module``.

    Raises
    ------
    LookupError
        No ``TWILL_TUNE[entry]``, no ``inputs`` key, or it names no function of the file (the message
        says which).
    """
    table = getattr(module, "TWILL_TUNE", None)
    if not isinstance(table, Mapping) or not isinstance(table.get(entry), Mapping):
        raise LookupError(f"{where}: no TWILL_TUNE[{entry!r}] entry")
    name = table[entry].get("inputs")
    if not name:
        raise LookupError(f"{where}: TWILL_TUNE[{entry!r}] has no 'inputs' entry: --measure needs a function "
                          f"that makes the kernel's launch arguments (twill/tune/measure.py)")
    fn = getattr(module, str(name), None)
    if not callable(fn):
        raise LookupError(f"{where}: TWILL_TUNE[{entry!r}]['inputs'] names {name!r}, which is not a function "
                          f"of the file")
    return fn


def launch_config(result: Mapping[str, Any], kernel: str, backend: str,
                  problem: Mapping[str, int]) -> Callable[[], Any]:
    """A zero-argument launch of ``result``'s config (``kernel`` = ``FILE.py[::ENTRY]``; inputs made now).

    Raises
    ------
    LookupError
        As :func:`inputs_function`; a Gluon result without its kernel folder; an entry that names no
        JIT function.
    """
    path, _, entry = kernel.partition("::")
    module = load_file(path)
    kernels = getattr(module, "TWILL_KERNELS", {})
    if not entry:
        entry = next((k for k, v in kernels.items() if v.get("default")), next(iter(kernels), ""))
    inputs = inputs_function(module, entry, where=path)
    constexprs = dict(result["constexprs"])
    grid, args = inputs(constexprs, dict(problem))
    grid = tuple(grid)
    if backend == "gluon":
        folder = result.get("details", {}).get("gluon_kernel")
        if not folder:
            raise LookupError("the result has no generated Gluon kernel (details['gluon_kernel'])")
        return load_file(LOADER).load(folder).bind(grid, *args)
    fn = getattr(module, kernels.get(entry, {}).get("kernel", entry), None)
    if fn is None:
        raise LookupError(f"{path}: no JIT function for entry {entry!r}")
    warps, stages = int(result["num_warps"]), int(result["num_stages"])
    return lambda: fn[grid](*args, **constexprs, num_warps=warps, num_stages=stages)


def do_bench_median(fn: Callable[[], Any]) -> float:
    """Median milliseconds of ``fn()`` by ``triton.testing.do_bench``."""
    from triton.testing import do_bench

    return float(do_bench(fn, return_mode="median"))


def spearman(predicted: Sequence[float], measured: Sequence[float]) -> float | None:
    """Spearman's rho (``scipy.stats.spearmanr``); None for fewer than 2 pairs, a constant column, or
    without scipy.

    >>> spearman([1.0, 2.0, 3.0], [10.0, 30.0, 20.0])
    0.5
    """
    if len(predicted) < 2 or len(set(predicted)) < 2 or len(set(measured)) < 2:
        return None
    try:
        from scipy.stats import spearmanr
    except ImportError:
        return None
    return round(float(spearmanr(predicted, measured).statistic), 4)


def ranked(configs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Fitting configs by predicted time (then grid order): the JSON's own order, re-derived."""
    def key(r: Mapping[str, Any]) -> tuple[float, int]:
        index = r.get("index")
        return float(r["predicted_ms"]), index if isinstance(index, int) else 1 << 30

    return sorted((r for r in configs if r.get("fits") and r.get("predicted_ms") is not None), key=key)


def measure_document(configs: Sequence[dict[str, Any]], top: int, *,
                     launch: Callable[[Mapping[str, Any]], Callable[[], Any]],
                     timer: Callable[[Callable[[], Any]], float] | None = None,
                     on_measured: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Time the ``top`` configs predicted fastest; set ``measured_ms`` on every config (in place; None when
    not measured, ``measure_error`` when its launch or timing raised).

    Returns
    -------
    dict
        ``{"measured": [...], "failed": [...], "spearman": float | None}`` (the configs themselves).
    """
    timer = timer or do_bench_median
    for r in configs:
        r["measured_ms"] = None
    measured, failed = [], []
    for r in ranked(configs)[:top]:
        try:
            r["measured_ms"] = float(timer(launch(r)))
        except Exception as exc:  # a launch the GPU rejects: reported on the config, the others go on
            r["measure_error"] = f"{type(exc).__name__}: {str(exc)[:500]}"
            failed.append(r)
            continue
        measured.append(r)
        if on_measured is not None:
            on_measured(r)
    rho = spearman([float(r["predicted_ms"]) for r in measured], [float(r["measured_ms"]) for r in measured])
    return {"measured": measured, "failed": failed, "spearman": rho}
