"""``NAME=VALUE`` assignments from a command line (``--constexpr``, ``--signature``): the one parser.

A constexpr value is read as a Python literal number or truth value and otherwise kept as text, so
``BLOCK_N=64`` binds the int 64, ``SCALE=0.5`` the float 0.5, ``CAUSAL=True`` (or ``true``) the bool, and
``MODE=fast`` the string ``"fast"``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from twill.errors import FrontendError

__all__ = ["constexpr_value", "parse_assignments", "parse_constexprs"]

_TRUTH = {"True": True, "true": True, "False": False, "false": False}


def constexpr_value(text: str) -> bool | int | float | str:
    """The value a constexpr written as ``text`` binds.

    ``True``/``true`` and ``False``/``false`` are bools; an integer literal (``64``, ``-1``, ``1_024``) is an
    int; a float literal (``0.5``, ``1e-3``, ``inf``) is a float; anything else is the text itself.

    >>> [constexpr_value(t) for t in ("64", "0.5", "True", "false", "fast", "1e3")]
    [64, 0.5, True, False, 'fast', 1000.0]
    """
    text = text.strip()
    if text in _TRUTH:
        return _TRUTH[text]
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def parse_assignments(pairs: Iterable[str], *, flag: str) -> dict[str, str]:
    """``["A=x", "B=y"]`` -> ``{"A": "x", "B": "y"}``, names and values stripped of white space.

    Raises
    ------
    FrontendError
        A pair without ``=`` or without a name, named with ``flag`` (``--signature``, ...).
    """
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise FrontendError(f"{flag} {pair!r} must look like NAME=VALUE")
        out[key] = value.strip()
    return out


def parse_constexprs(pairs: Iterable[str], *, flag: str = "--constexpr") -> dict[str, Any]:
    """``--constexpr NAME=VALUE`` pairs as a dict, each value read by :func:`constexpr_value`.

    Raises
    ------
    FrontendError
        A pair without ``=`` or without a name.

    >>> parse_constexprs(["BLOCK_N=64", "SCALE=0.5", "CAUSAL=True", "MODE=fast"])
    {'BLOCK_N': 64, 'SCALE': 0.5, 'CAUSAL': True, 'MODE': 'fast'}
    """
    return {key: constexpr_value(value) for key, value in parse_assignments(pairs, flag=flag).items()}
