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
    """Median milliseconds of ``fn()`` by ``triton.testing.do_bench``
    (:func:`twill.tune.bench.do_bench_median`)."""
    from twill.tune.bench import do_bench_median as median

    return median(fn)


def inputs_function(kernel: str) -> tuple[Any, Callable[..., Any]]:
    """The loaded kernel and its ``TWILL_TUNE`` entry's ``inputs`` function.

    Raises
    ------
    FrontendError
        The kernel cannot be loaded.
    MeasureError
        No ``TWILL_TUNE`` entry or no ``inputs`` entry, or it names no function of the file.
    """
    from twill.frontend.compile import load_kernel
    from twill.tune.bench import inputs_function as find

    spec = load_kernel(kernel)
    try:
        return spec, find(_module(spec), spec.name, where=spec.source)
    except LookupError as exc:
        raise MeasureError(str(exc)) from None


def _module(spec: Any) -> Any:
    """The names of a loaded kernel's file (its JIT function's globals), as attributes."""
    import types

    return types.SimpleNamespace(**spec.fn.__globals__)


def make_launch(result: Mapping[str, Any], kernel: str, backend: str,
                problem: Mapping[str, int]) -> Callable[[], Any]:
    """A zero-argument launch of ``result``'s config (inputs made now, on the device;
    :func:`twill.tune.bench.launch_config`).

    Raises
    ------
    MeasureError
        As :func:`inputs_function`; a Gluon result without its kernel folder.
    """
    from twill.tune.bench import launch_config

    spec, _ = inputs_function(kernel)
    try:
        return launch_config(result, f"{kernel.partition('::')[0]}::{spec.name}", backend, problem)
    except LookupError as exc:
        raise MeasureError(str(exc)) from None


def spearman(predicted: Sequence[float], measured: Sequence[float]) -> float | None:
    """Spearman's rho (:func:`twill.tune.bench.spearman`, ``scipy.stats.spearmanr``); None for fewer than
    2 pairs, a constant column, or without scipy.

    >>> spearman([1.0, 2.0, 3.0], [10.0, 30.0, 20.0])
    0.5
    """
    from twill.tune.bench import spearman as rho

    return rho(predicted, measured)


def measure(results: Sequence[dict[str, Any]], top: int, *,
            launch: Callable[[Mapping[str, Any]], Callable[[], Any]],
            timer: Callable[[Callable[[], Any]], float] | None = None,
            timer_name: str = "triton.testing.do_bench (median)",
            on_measured: Callable[[dict[str, Any]], None] | None = None) -> Measurement:
    """Time the ``top`` configs predicted fastest; set ``measured_ms`` on each result (in place;
    :func:`twill.tune.bench.measure_document`).

    Parameters
    ----------
    results : sequence of dict
        The sweep's results (:func:`twill.tune.api.tune`); every one gets ``measured_ms`` (None when not
        measured).
    top : int
        How many of the fitting configs, fastest predicted first, to time.
    launch : callable
        ``launch(result)`` -> a zero-argument launch (:func:`make_launch` bound to the kernel).
    timer : callable, optional
        ``timer(fn)`` -> milliseconds (default :func:`do_bench_median`).
    timer_name : str
        How ``timer`` times, for the report.
    on_measured : callable, optional
        Called with each result once timed.

    Returns
    -------
    Measurement

    Raises
    ------
    MeasureError
        ``top`` < 1.
    """
    from twill.tune.bench import measure_document

    if top < 1:
        raise MeasureError(f"--top {top} must be >= 1")
    out = measure_document(list(results), top, launch=launch, timer=timer or do_bench_median,
                           on_measured=on_measured)
    return Measurement(out["measured"], out["failed"], out["spearman"], timer_name)


def render_measured(m: Measurement, names: Sequence[str], *, title: str = "") -> Any:
    """A :class:`rich.table.Table` of the measured configs: predicted and measured ms and their ratio."""
    from twill.render.terminal import PlainTable

    table = PlainTable(title=title or None)
    for col in ("#", *names, "warps", "stages", "predicted ms", "measured ms", "measured / predicted"):
        table.add_column(col, justify="right", no_wrap=True)
    for i, r in enumerate(m.measured, 1):
        table.add_row(str(i), *(str(r["constexprs"].get(n)) for n in names), str(r["num_warps"]),
                      str(r["num_stages"]), f"{r['predicted_ms']:.3f}", f"{r['measured_ms']:.3f}",
                      f"{r['measured_ms'] / r['predicted_ms']:.2f}")
    return table
