"""``twill tune --measure``: time the top K configs of a sweep on the GPU and compare with the prediction.

The kernel file says how to launch its kernel: ``TWILL_TUNE[entry]["inputs"]`` names a module-level
function of the file, ``inputs(constexprs, problem) -> (grid, args)``, that allocates the problem's
tensors on the CUDA device (inputs filled, outputs preallocated) and returns the launch grid and the
kernel's positional non-constexpr arguments (tensor descriptors as
``triton.tools.tensor_descriptor.TensorDescriptor``). twill launches, per backend:

* ``triton``: the JIT kernel with the config, ``kernel[grid](*args, **constexprs, num_warps=W,
  num_stages=S)``;
* ``gluon``: the generated kernel of the config (``details["gluon_kernel"]``, the folder
  :func:`twill.codegen.gluon.generate` wrote), through :mod:`twill.codegen.gluon.loader`, whose
  ``bind`` converts the arguments once, outside the timed region.

Each launch is timed with ``triton.testing.do_bench`` (``return_mode="median"``, its default warm-up and
repetitions, the L2 cache flushed between runs by do_bench): the inputs are made once per config, before
timing, so no allocation or copy is in the timed region. The measured milliseconds go into each
measured config's ``measured_ms`` (null for the others), and the Spearman rank correlation of predicted
against measured time over the measured configs is reported (``scipy.stats.spearmanr``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from twill.errors import TwillError

__all__ = ["DEFAULT_TOP", "MeasureError", "Measurement", "do_bench_median", "inputs_function", "make_launch",
           "measure", "render_measured", "require_cuda", "spearman"]

DEFAULT_TOP = 5
"""Configs ``--measure`` times when ``--top`` is not given."""


class MeasureError(TwillError):
    """``--measure`` cannot run: no CUDA device, no ``inputs`` entry, or a launch that failed."""


@dataclass
class Measurement:
    """What :func:`measure` did.

    Attributes
    ----------
    measured : list of dict
        The timed results (those of the sweep, with ``measured_ms`` set), fastest predicted first.
    failed : list of dict
        Results whose launch or timing raised (``measure_error`` says why).
    spearman : float or None
        Spearman's rho of predicted against measured time over ``measured`` (None below 2 configs, or
        without scipy).
    timer : str
        How the configs were timed.
    """

    measured: list[dict[str, Any]]
    failed: list[dict[str, Any]]
    spearman: float | None
    timer: str

    def to_dict(self) -> dict[str, Any]:
        """The JSON's ``measure`` section."""
        return {"configs": len(self.measured), "failed": len(self.failed), "spearman": self.spearman,
                "timer": self.timer}


def require_cuda() -> None:
    """Raise :class:`MeasureError` unless torch sees a CUDA device (call it before any work)."""
    try:
        import torch
    except ImportError:
        raise MeasureError("--measure needs a CUDA device; none found (torch is not installed)") from None
    if not torch.cuda.is_available():
        raise MeasureError("--measure needs a CUDA device; none found")


def do_bench_median(fn: Callable[[], Any]) -> float:
    """Median milliseconds of ``fn()`` by ``triton.testing.do_bench``."""
    from triton.testing import do_bench

    return float(do_bench(fn, return_mode="median"))


def inputs_function(kernel: str) -> tuple[Any, Callable[..., Any]]:
    """The loaded kernel and its ``TWILL_TUNE`` entry's ``inputs`` function.

    Raises
    ------
    FrontendError, GridError
        The kernel or its ``TWILL_TUNE`` entry cannot be loaded.
    MeasureError
        No ``inputs`` entry, or it names no function of the file.
    """
    from twill.frontend.compile import load_kernel
    from twill.tune.grid import load_tune_problem

    spec = load_kernel(kernel)
    tp = load_tune_problem(spec.fn.__globals__.get("TWILL_TUNE"), spec.name, source=spec.source)
    if not tp.inputs:
        raise MeasureError(f"{spec.source}: TWILL_TUNE[{spec.name!r}] has no 'inputs' entry: --measure needs "
                           f"a function that makes the kernel's launch arguments (twill/tune/measure.py)")
    inputs = spec.fn.__globals__.get(tp.inputs)
    if not callable(inputs):
        raise MeasureError(f"{spec.source}: TWILL_TUNE[{spec.name!r}]['inputs'] names {tp.inputs!r}, which "
                           f"is not a function of the file")
    return spec, inputs


def make_launch(result: Mapping[str, Any], kernel: str, backend: str,
                problem: Mapping[str, int]) -> Callable[[], Any]:
    """A zero-argument launch of ``result``'s config (inputs made now, on the device).

    Raises
    ------
    MeasureError
        As :func:`inputs_function`; a Gluon result without its kernel folder.
    """
    spec, inputs = inputs_function(kernel)
    constexprs = dict(result["constexprs"])
    grid, args = inputs(constexprs, dict(problem))
    if backend == "gluon":
        from twill.codegen.gluon.loader import load

        folder = result.get("details", {}).get("gluon_kernel")
        if not folder:
            raise MeasureError("the result has no generated Gluon kernel (details['gluon_kernel'])")
        return load(folder).bind(tuple(grid), *args)
    fn, warps, stages = spec.fn, int(result["num_warps"]), int(result["num_stages"])
    return lambda: fn[tuple(grid)](*args, **constexprs, num_warps=warps, num_stages=stages)


def spearman(predicted: Sequence[float], measured: Sequence[float]) -> float | None:
    """Spearman's rho (``scipy.stats.spearmanr``); None for fewer than 2 pairs, no variation, or without
    scipy.

    >>> spearman([1.0, 2.0, 3.0], [10.0, 30.0, 20.0])
    0.5
    """
    if len(predicted) < 2 or len(set(predicted)) < 2 or len(set(measured)) < 2:
        return None
    try:
        from scipy.stats import spearmanr
    except ImportError:
        return None
    rho = spearmanr(predicted, measured).statistic
    return None if rho != rho else round(float(rho), 4)  # NaN: a constant column


def measure(results: Sequence[dict[str, Any]], top: int, *,
            launch: Callable[[Mapping[str, Any]], Callable[[], Any]],
            timer: Callable[[Callable[[], Any]], float] | None = None,
            timer_name: str = "triton.testing.do_bench (median)",
            on_measured: Callable[[dict[str, Any]], None] | None = None) -> Measurement:
    """Time the ``top`` configs predicted fastest; set ``measured_ms`` on each result (in place).

    Parameters
    ----------
    results : sequence of dict
        The sweep's results (:func:`twill.tune.api.tune`); every one gets ``measured_ms`` (None when not
        measured).
    top : int
        How many of the fitting configs, fastest predicted first, to time.
    launch : callable
        ``launch(result)`` -> a zero-argument launch (:func:`make_launch` bound to the kernel).
    timer : callable
        ``timer(fn)`` -> milliseconds (default, None: :func:`do_bench_median`).
    timer_name : str
        How ``timer`` times, for the report.
    on_measured : callable, optional
        Called with each result once timed.

    Returns
    -------
    Measurement
    """
    from twill.tune.report import rank

    if top < 1:
        raise MeasureError(f"--top {top} must be >= 1")
    timer = timer or do_bench_median
    by_index = {r.get("index"): r for r in results}
    for r in results:
        r["measured_ms"] = None
    chosen = [by_index[r.get("index")] for r in rank(results)
              if r.get("fits") and r.get("predicted_ms") is not None][:top]
    measured, failed = [], []
    for r in chosen:
        try:
            ms = float(timer(launch(r)))
        except Exception as exc:  # a launch the GPU rejects: reported on the config, the others go on
            r["measure_error"] = f"{type(exc).__name__}: {str(exc)[:500]}"
            failed.append(r)
            continue
        r["measured_ms"] = ms
        measured.append(r)
        if on_measured is not None:
            on_measured(r)
    rho = spearman([float(r["predicted_ms"]) for r in measured], [float(r["measured_ms"]) for r in measured])
    return Measurement(measured, failed, rho, timer_name)


def render_measured(m: Measurement, names: Sequence[str], *, title: str = "") -> Any:
    """A :class:`rich.table.Table` of the measured configs: predicted and measured ms and their ratio."""
    from rich.table import Table

    table = Table(title=title or None)
    for col in ("#", *names, "warps", "stages", "predicted ms", "measured ms", "measured / predicted"):
        table.add_column(col, justify="right", no_wrap=True)
    for i, r in enumerate(m.measured, 1):
        table.add_row(str(i), *(str(r["constexprs"].get(n)) for n in names), str(r["num_warps"]),
                      str(r["num_stages"]), f"{r['predicted_ms']:.3f}", f"{r['measured_ms']:.3f}",
                      f"{r['measured_ms'] / r['predicted_ms']:.2f}")
    return table
