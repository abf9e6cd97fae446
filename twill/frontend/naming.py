"""Names of graph ops: the Python variable a TTGIR location carries, made unique.

Triton attaches the name of the assigned variable to every op of a statement (``loc("qk"(...))``), so
several graph ops can carry the same name. The rule: among ops sharing a variable name, the last one in
loop-body order (the value finally bound to the variable) keeps the bare name; the others get the name
plus their kind (``new_max_reduce``), and a number if that is still taken (``out_tmem_store_2``). Ops
without a variable name (those of a statement that assigns nothing, like ``tl.atomic_add(ptrs, dq)``)
are named after the variable of the value they take, plus their kind (``dq_atomic``), else after their
kind alone. Characters other than letters, digits and ``_`` become ``_``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Protocol

from twill.frontend.ttgir import Op

__all__ = ["assign_names", "variable_name"]


class Nameable(Protocol):
    """What :func:`assign_names` needs of a graph-op spec."""

    name: str
    kind: str
    primary: Op
    members: list[Op]
    hint: str


def _clean(text: str) -> str:
    return re.sub(r"\W", "_", text).strip("_") or "op"


def variable_name(spec: Nameable) -> str:
    """The variable name carried by the spec's primary op, else by its first named member, else ``""``."""
    return next((op.loc.name for op in (spec.primary, *spec.members) if op.loc.name), "")


def assign_names(specs: Sequence[Nameable]) -> None:
    """Set ``spec.name`` on every spec, in place (see the module docstring for the rule).

    ``spec.hint`` is the variable name of the value an unnamed op takes (``""`` if none).
    """
    groups: dict[str, list[Nameable]] = {}
    for spec in specs:
        base = variable_name(spec) or (f"{spec.hint}_{spec.kind}" if spec.hint else spec.kind)
        groups.setdefault(_clean(base), []).append(spec)
    taken = set(groups)
    for base, members in groups.items():
        members[-1].name = base
        for spec in members[:-1]:
            wanted = f"{base}_{_clean(spec.kind)}"
            name, n = wanted, 2
            while name in taken:
                name, n = f"{wanted}_{n}", n + 1
            taken.add(name)
            spec.name = name
