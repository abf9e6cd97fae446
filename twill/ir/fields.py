"""Unknown keys in a user's file: found, and named with the closest valid key.

Every reader of a user's file (graph JSON, saved schedule JSON, machine TOML, ddg-0.1 dump) takes a fixed
set of keys at each level. A key outside that set is a typo or a field this twill does not read; ignored,
it would silently leave a default in place (``"distnce": 1`` would make a loop-carried edge a
same-iteration one). :func:`unknown_keys_message` states each such key with the nearest valid one
(:func:`difflib.get_close_matches`), for the reader to raise in its own error class with its place.

    >>> unknown_keys_message({"src": "a", "dst": "b", "distnce": 1}, ("src", "dst", "distance"),
    ...                      "edge a->b")
    "edge a->b: unknown field 'distnce' (did you mean 'distance'?); valid fields: distance, dst, src"
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["closest", "unknown_keys_message"]

CUTOFF = 0.6
"""Similarity (difflib's ratio, 0..1) a valid key needs to be offered as the intended one; 0.6 is
:func:`difflib.get_close_matches`' own default."""


def closest(name: str, valid: Iterable[str]) -> str | None:
    """The valid key nearest to ``name`` (difflib's ratio at least :data:`CUTOFF`), or ``None``.

    Parameters
    ----------
    name : str
        The key as the user wrote it.
    valid : iterable of str
        Keys the place takes.
    """
    found = difflib.get_close_matches(str(name), sorted(set(valid)), n=1, cutoff=CUTOFF)
    return found[0] if found else None


def unknown_keys_message(data: Mapping[str, Any], valid: Iterable[str], where: str,
                         noun: str = "field") -> str | None:
    """A message naming every key of ``data`` outside ``valid``, or ``None`` when there is none.

    Parameters
    ----------
    data : mapping
        One table of the user's file (an op, an edge, a TOML section).
    valid : iterable of str
        The keys that table takes.
    where : str
        Where the table is, as the message should start (``"op 'S'"``, ``"edge S->P"``,
        ``"machines/x.toml: [memory]"``).
    noun : str
        What a key is called in that format (``"field"`` for JSON, ``"key"`` for TOML).

    Returns
    -------
    str or None
        ``"<where>: unknown field 'x' (did you mean 'y'?); valid fields: ..."``; several unknown keys
        are listed in sorted order, each with its suggestion when one is close enough.
    """
    allowed = sorted(set(valid))
    extra = sorted(str(k) for k in data if k not in allowed)
    if not extra:
        return None
    parts = []
    for key in extra:
        near = closest(key, allowed)
        parts.append(f"{key!r} (did you mean {near!r}?)" if near else repr(key))
    plural = "s" if len(extra) > 1 else ""
    return (f"{where}: unknown {noun}{plural} {', '.join(parts)}; valid {noun}s: "
            f"{', '.join(allowed)}")
