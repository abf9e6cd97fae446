"""A predicted config's TFLOP/s against the Tensor Core peak the machine can reach.

No kernel runs faster than its machine's Tensor Cores: ``chip.sms x cost.tc_flops_<dtype> x
chip.clock_ghz`` (H200: 132 x 4096 FLOP/cycle x 1.6 GHz = 865 TFLOP/s). A prediction above it means the
``TWILL_TUNE`` ``flops`` expression counts more work than the kernel does (the time is the model's; the
TFLOP/s is the expression's FLOPs over it), so the config carries a note that says so, with the FLOPs of
the GEMMs the model prices (``2 m n k`` per GEMM op per trip, x trips x CTAs) to compare with.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from twill.ir.costmodel import tc_rate_key

__all__ = ["gemm_flops", "over_peak", "tc_peak_tflops"]


def tc_peak_tflops(machine: Any, dtypes: Iterable[str] = ()) -> float:
    """Tensor Core peak in TFLOP/s: ``chip.sms x tc_flops x chip.clock_ghz / 1000``, at the fastest rate
    of ``dtypes`` (the kernel's GEMM operand types, TTGIR spelling: ``f16``, ``bf16``, ``f8E4M3FN``,
    ``f32``); fp16's rate when there is none.

    >>> from twill.ir.machine import load_machine
    >>> round(tc_peak_tflops(load_machine("h200"), ["f16"]), 1)   # 132 x 4096 x 1.6 GHz
    865.1

    Raises
    ------
    KeyError
        The machine has no ``cost.tc_flops_fp16`` (or the rate of a dtype it is asked for).
    """
    names = {tc_rate_key(d) for d in dtypes} or {"tc_flops_fp16"}
    rate = max(float(machine.const(f"cost.{n}")) for n in names)
    return float(machine.const("chip.sms")) * rate * float(machine.const("chip.clock_ghz")) / 1e3


def gemm_flops(operands: Mapping[str, tuple[Any, ...]], trips: int, ctas: int) -> float:
    """FLOPs of the GEMMs the model prices: ``2 m n k`` per GEMM op (``operands``:
    :func:`twill.tune.triton_model.gemm_operands`, ``(m, n, k, ...)`` each) per trip, x ``trips`` x ``ctas``.

    >>> gemm_flops({"acc": (128, 128, 64, True, "f16")}, trips=2, ctas=3)
    12582912.0
    """
    return float(sum(2 * m * n * k for m, n, k, *_ in operands.values()) * trips * ctas)


def over_peak(tflops: float, peak: float, *, flops: float, modelled: float, expression: str,
              machine: str) -> str | None:
    """The note for a prediction above the Tensor Core ``peak`` (None when it is not above it).

    >>> over_peak(1484.0, 865.1, flops=8e9, modelled=2e9, expression="8 * M * N * K", machine="h200")[:60]
    'predicted 1484 TFLOP/s, above the h200 Tensor Core peak of 8'
    """
    if not tflops > peak * (1 + 1e-9):
        return None
    ratio = f", {flops / modelled:.3g}x the {modelled:.4g} FLOPs of the GEMMs the model prices" \
        if modelled > 0 else ", and the model prices no GEMM in the loop"
    return (f"predicted {tflops:.0f} TFLOP/s, above the {machine} Tensor Core peak of {peak:.0f}: the "
            f"TWILL_TUNE flops {expression!r} gives {flops:.4g} FLOPs{ratio}; the time is the model's, "
            f"the TFLOP/s is not meaningful")
