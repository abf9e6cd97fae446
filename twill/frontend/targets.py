"""Compile targets: the one parser of target strings (``sm_90``, ``sm_90a``, ``cuda:90``) and a machine's
target.

twill models two targets, Hopper (compute capability 90, the H100/H200 machines) and Blackwell (100, the
B200 machine); both Triton's CPU compile (:mod:`twill.frontend.compile`) and the ptxas measurement
(:mod:`twill.calibrate.regs`) read targets here.
"""

from __future__ import annotations

import re

from twill.errors import FrontendError
from twill.ir.machine import Machine

__all__ = ["CAPABILITIES", "target_capability", "target_for"]

CAPABILITIES = (90, 100)
"""The compute capabilities twill compiles for: 90 (Hopper, ``sm_90a``) and 100 (Blackwell, ``sm_100a``)."""

_TARGET = re.compile(r"(?:sm_|cuda:)(\d+)a?")


def target_capability(target: str) -> int:
    """The compute capability a target string names.

    Parameters
    ----------
    target : str
        ``"sm_NN"``, ``"sm_NNa"`` (the architecture-specific form ptxas assembles for) or ``"cuda:NN"``
        (Triton's ``ttg.target``); surrounding white space is ignored.

    Returns
    -------
    int
        One of :data:`CAPABILITIES`.

    Raises
    ------
    FrontendError
        The string is not of these forms, or names a capability twill does not model.

    Examples
    --------
    >>> target_capability("sm_90"), target_capability("sm_100a"), target_capability("cuda:90")
    (90, 100, 90)
    """
    match = _TARGET.fullmatch(target.strip())
    if match is None or int(match.group(1)) not in CAPABILITIES:
        raise FrontendError(f"target {target!r} is not supported; use 'sm_90' (Hopper) or 'sm_100' "
                            "(Blackwell)")
    return int(match.group(1))


def target_for(machine: Machine) -> str:
    """Compile target of a machine: arch ``sm_90a`` -> ``"sm_90"``, ``sm_100a`` -> ``"sm_100"``.

    Raises
    ------
    FrontendError
        The machine's ``arch`` is not a target :func:`target_capability` accepts (named with the machine).
    """
    try:
        return f"sm_{target_capability(machine.arch)}"
    except FrontendError as exc:
        raise FrontendError(f"machine {machine.name!r} has arch {machine.arch!r}: {exc}") from None
