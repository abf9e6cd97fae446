"""The tuning grid: what a kernel file says about its problem, and the configs to try.

A kernel file that ``twill tune`` can tune has, beside ``TWILL_KERNELS``, a module-level ``TWILL_TUNE`` dict
with one entry per kernel entry::

    TWILL_TUNE = {
        "attn_fwd": {
            "descriptors": {"q_desc": ["BLOCK_M", "HEAD_DIM"], "k_desc": ["BLOCK_N", "HEAD_DIM"], ...},
            "problem": {"batch": 4, "heads": 32, "seq_len": 8192},
            "ctas": "(seq_len // BLOCK_M) * batch * heads",
            "trips": "seq_len // BLOCK_N",
            "flops": "4 * batch * heads * seq_len * seq_len * HEAD_DIM",
            "inputs": "attn_fwd_inputs",   # optional: what --measure launches (twill/tune/measure.py)
        },
    }

``descriptors`` gives the block shape of each tensor-descriptor argument in constexpr names (the
descriptor's block is part of its type, so it changes with the tile); ``problem`` the default problem
size; ``ctas``, ``trips`` and ``flops`` are arithmetic expressions over the problem sizes and the
constexprs (``+ - * / // % **``, parentheses, ``min``, ``max``, ``ceil``: nothing else is evaluated).
A kernel of several sibling loops (a row softmax's two passes over the row) gives ``trips`` as a list,
one expression per loop in program order (``["ceil(cols / BLOCK)", "ceil(cols / BLOCK)"]``).
``inputs`` (optional, needed by ``--measure``) names a function of the file, ``inputs(constexprs,
problem) -> (grid, args)``, that makes the kernel's launch arguments on the GPU (:mod:`twill.tune.measure`).
"""

from __future__ import annotations

import ast
import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from twill.errors import TwillError

__all__ = ["Config", "GridError", "TuneProblem", "evaluate", "evaluate_count", "evaluate_flops", "expand",
           "load_tune_problem", "parse_grid", "parse_list", "parse_value", "repeated"]


class GridError(TwillError):
    """A bad ``--grid``, ``--num-warps``, ``--num-stages`` or problem size, or a bad ``TWILL_TUNE`` entry."""


def parse_value(text: str) -> Any:
    """``"64"`` -> 64, ``"0.5"`` -> 0.5, ``"True"`` -> True, anything else the string.

    >>> [parse_value(t) for t in ("64", "0.5", "True", "fast")]
    [64, 0.5, True, 'fast']
    """
    text = text.strip()
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return {"True": True, "False": False, "true": True, "false": False}.get(text, text)


def parse_list(text: str, flag: str, *, positive: bool = True) -> list[int]:
    """``"4,8"`` -> ``[4, 8]``; :class:`GridError` naming ``flag`` for an empty list or a non-integer.

    >>> parse_list("1, 2,3", "--num-stages")
    [1, 2, 3]
    """
    items = [x.strip() for x in text.split(",") if x.strip()]
    if not items:
        raise GridError(f"{flag} {text!r} is empty; give comma-separated integers, e.g. {flag} 4,8")
    out = []
    for item in items:
        try:
            value = int(item)
        except ValueError:
            raise GridError(f"{flag}: {item!r} is not an integer") from None
        if positive and value < 1:
            raise GridError(f"{flag}: {value} must be >= 1")
        out.append(value)
    return list(dict.fromkeys(out))


def parse_grid(items: Iterable[str]) -> dict[str, list[Any]]:
    """``["BLOCK_N=32,64", "BLOCK_M=128"]`` -> ``{"BLOCK_N": [32, 64], "BLOCK_M": [128]}``.

    Raises
    ------
    GridError
        An item without ``=``, with no name, or with no values (``BLOCK_N=``), or a name given twice.

    >>> parse_grid(["BLOCK_N=32,64", "BLOCK_M=128"])
    {'BLOCK_N': [32, 64], 'BLOCK_M': [128]}
    """
    grid: dict[str, list[Any]] = {}
    for item in items:
        name, sep, values = item.partition("=")
        name = name.strip()
        if not sep or not name:
            raise GridError(f"--grid {item!r} must look like NAME=V1,V2,...")
        parsed = [parse_value(v) for v in values.split(",") if v.strip()]
        if not parsed:
            raise GridError(f"--grid {item!r}: no values for {name} (the grid would be empty)")
        if name in grid:
            raise GridError(f"--grid names {name} twice")
        grid[name] = list(dict.fromkeys(parsed))
    return grid


_FUNCS = {"min": min, "max": max, "ceil": math.ceil}
_BINOPS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
           ast.Div: lambda a, b: a / b, ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b,
           ast.Pow: lambda a, b: a ** b}


def evaluate(expression: str, names: Mapping[str, Any], *, where: str = "expression") -> float:
    """Value of an arithmetic ``expression`` over ``names`` (see the module docstring for what is allowed).

    >>> evaluate("(seq_len // BLOCK_M) * heads", {"seq_len": 8192, "BLOCK_M": 128, "heads": 32})
    2048

    Raises
    ------
    GridError
        A syntax error, an unknown name (the message lists the known ones), a construct outside the
        arithmetic subset, or a division by zero; the message names ``where``.
    """
    try:
        tree = ast.parse(expression, mode="eval")
    except SyntaxError as exc:
        raise GridError(f"{where}: {expression!r} is not an expression ({exc.msg})") from None

    def walk(node: ast.AST) -> Any:
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float) \
                and not isinstance(node.value, bool):
            return node.value
        if isinstance(node, ast.Name):
            if node.id not in names:
                raise GridError(f"{where}: {expression!r} uses {node.id!r}, which is neither a problem size "
                                f"nor a constexpr (known: {', '.join(sorted(names))})")
            value = names[node.id]
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise GridError(f"{where}: {expression!r} uses {node.id}={value!r}, which is not a number")
            return value
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            try:
                return _BINOPS[type(node.op)](walk(node.left), walk(node.right))
            except ZeroDivisionError:
                raise GridError(f"{where}: {expression!r} divides by zero") from None
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -walk(node.operand)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCS \
                and not node.keywords:
            return _FUNCS[node.func.id](*(walk(a) for a in node.args))
        raise GridError(f"{where}: {expression!r}: only arithmetic on numbers and names is allowed "
                        f"(found {type(node).__name__})")

    return walk(tree)


def evaluate_count(expression: str, names: Mapping[str, Any], *, where: str = "expression") -> int:
    """:func:`evaluate` for a count (CTAs, loop trips): a whole number >= 1.

    >>> evaluate_count("ceil(M / BLOCK_M)", {"M": 4000, "BLOCK_M": 128})
    32

    Raises
    ------
    GridError
        As :func:`evaluate`; or a value that is not a whole number (``M / BLOCK_M`` = 31.25: a count is
        never truncated silently) or is below 1; the message names ``where`` and the value.
    """
    value = evaluate(expression, names, where=where)
    if value != int(value):
        raise GridError(f"{where}: {expression!r} is {value:g}, not a whole number (round it in the "
                        f"expression: ceil(...) or //)")
    if value < 1:
        raise GridError(f"{where}: {expression!r} is {value:g}; it must be at least 1")
    return int(value)


def evaluate_flops(expression: str, names: Mapping[str, Any], *, where: str = "expression") -> float:
    """:func:`evaluate` for a FLOP count: a number >= 0.

    Raises
    ------
    GridError
        As :func:`evaluate`, or a negative count (the message names ``where`` and the value).

    >>> evaluate_flops("2 * M * N * K", {"M": 2, "N": 3, "K": 4})
    48.0
    """
    value = float(evaluate(expression, names, where=where))
    if value < 0:
        raise GridError(f"{where}: {expression!r} is {value:g}; a FLOP count cannot be negative")
    return value


def repeated(values: Sequence[Any]) -> list[Any]:
    """Values that occur more than once in ``values`` (equal values: ``64`` and ``64.0`` too), in order.

    >>> repeated([64, 128, 64, 32, 128])
    [64, 128]
    """
    seen: list[Any] = []
    out: list[Any] = []
    for v in values:
        if v in seen and v not in out:
            out.append(v)
        seen.append(v)
    return out


@dataclass(frozen=True)
class TuneProblem:
    """What ``TWILL_TUNE`` says about one kernel entry (see the module docstring).

    Attributes
    ----------
    kernel : str
        The ``TWILL_KERNELS`` entry.
    descriptors : mapping of str to tuple of str
        Block shape of each tensor-descriptor argument, in constexpr names.
    problem : mapping of str to int
        Problem sizes (defaults, overridden by the command line).
    ctas, flops : str
        Expressions: CTAs the kernel launches, floating-point operations.
    trips : str or tuple of str
        Loop trips per CTA: one expression, or one per sibling loop in program order
        (:attr:`trip_expressions`).
    inputs : str or None
        Name of the file's function that makes the launch arguments (``--measure``), if it has one.
    """

    kernel: str
    descriptors: Mapping[str, tuple[str, ...]]
    problem: Mapping[str, int]
    ctas: str
    trips: str | tuple[str, ...]
    flops: str
    inputs: str | None = None

    @property
    def trip_expressions(self) -> tuple[str, ...]:
        """The ``trips`` expressions, one per loop in program order (a single expression: one loop)."""
        return (self.trips,) if isinstance(self.trips, str) else tuple(self.trips)

    def names(self, constexprs: Mapping[str, Any],
              problem: Mapping[str, int] | None = None) -> dict[str, Any]:
        """The names the expressions see: problem sizes and constexprs (constexprs win on a clash)."""
        return {**self.problem, **(problem or {}), **constexprs}

    def signature(self, base: Mapping[str, str], constexprs: Mapping[str, Any]) -> dict[str, str]:
        """The descriptor types for ``constexprs``: ``tensordesc<fp16[BLOCK_N, HEAD_DIM]>`` with the values.

        The element type is kept from ``base`` (the kernel's ``TWILL_KERNELS`` signature).

        Raises
        ------
        GridError
            A descriptor that is not in ``base`` or not a ``tensordesc``, or a block dimension that names
            no constexpr.
        """
        out: dict[str, str] = {}
        for arg, dims in self.descriptors.items():
            text = base.get(arg)
            if text is None or not text.startswith("tensordesc<") or "[" not in text:
                raise GridError(f"TWILL_TUNE[{self.kernel!r}].descriptors names {arg!r}, which is not a "
                                f"tensordesc argument of the kernel's signature")
            element = text[len("tensordesc<"):text.index("[")]
            values = []
            for dim in dims:
                if dim not in constexprs:
                    raise GridError(f"TWILL_TUNE[{self.kernel!r}].descriptors[{arg!r}] uses {dim!r}, which "
                                    f"is not a constexpr of the kernel ({', '.join(sorted(constexprs))})")
                values.append(str(constexprs[dim]))
            out[arg] = f"tensordesc<{element}[{', '.join(values)}]>"
        return out


def load_tune_problem(table: Any, kernel: str, *, source: str = "the kernel file") -> TuneProblem:
    """The ``TWILL_TUNE[kernel]`` entry of a kernel file (``table``: its ``TWILL_TUNE`` value, or None).

    Raises
    ------
    GridError
        No ``TWILL_TUNE`` dict or no entry for ``kernel``; a missing or malformed field. The message
        names ``source`` (the file).
    """
    where = source
    if not isinstance(table, Mapping):
        raise GridError(f"{where} has no TWILL_TUNE dict: twill tune needs the problem size, the CTA count, "
                        "the loop trips and the FLOPs of the kernel (twill/tune/grid.py says how)")
    entry = table.get(kernel)
    if not isinstance(entry, Mapping):
        raise GridError(f"{where}: TWILL_TUNE has no entry {kernel!r} (entries: {', '.join(sorted(table))})")
    missing = [k for k in ("problem", "ctas", "trips", "flops") if k not in entry]
    if missing:
        raise GridError(f"{where}: TWILL_TUNE[{kernel!r}] lacks {', '.join(missing)}")
    unknown = set(entry) - {"descriptors", "problem", "ctas", "trips", "flops", "inputs"}
    if unknown:
        raise GridError(f"{where}: TWILL_TUNE[{kernel!r}] has unknown key(s) {', '.join(sorted(unknown))}")
    problem = entry["problem"]
    if not isinstance(problem, Mapping) or not all(isinstance(v, int) for v in problem.values()):
        raise GridError(f"{where}: TWILL_TUNE[{kernel!r}].problem must map names to integers")
    descriptors = {str(k): tuple(str(d) for d in v) for k, v in dict(entry.get("descriptors", {})).items()}
    inputs = entry.get("inputs")
    if inputs is not None and (not isinstance(inputs, str) or not inputs.isidentifier()):
        raise GridError(f"{where}: TWILL_TUNE[{kernel!r}].inputs must name a function of the file, got "
                        f"{inputs!r}")
    trips = entry["trips"]
    if isinstance(trips, list | tuple):
        if not trips or not all(isinstance(t, str) for t in trips):
            raise GridError(f"{where}: TWILL_TUNE[{kernel!r}].trips must be an expression, or a non-empty "
                            f"list of expressions (one per sibling loop), got {trips!r}")
        trips = tuple(trips)
    else:
        trips = str(trips)
    return TuneProblem(kernel, descriptors, dict(problem), str(entry["ctas"]), trips, str(entry["flops"]),
                       inputs)


@dataclass(frozen=True)
class Config:
    """One point of the grid: constexpr values and compile options."""

    constexprs: Mapping[str, Any]
    num_warps: int
    num_stages: int
    index: int = 0

    @property
    def label(self) -> str:
        """``BLOCK_M=128 BLOCK_N=64 w8 s3``."""
        ce = " ".join(f"{k}={v}" for k, v in self.constexprs.items())
        return f"{ce} w{self.num_warps} s{self.num_stages}".strip()


def expand(grid: Mapping[str, Sequence[Any]], num_warps: Sequence[int], num_stages: Sequence[int], *,
           kernel_constexprs: Iterable[str], defaults: Mapping[str, Any] | None = None,
           kernel: str = "kernel") -> list[Config]:
    """Every combination of the grid's values with every ``num_warps`` and ``num_stages``, in grid order.

    Constexprs not in the grid keep their ``defaults`` (the kernel entry's values). The configs differ
    only in the grid's names, which each config lists first.

    Raises
    ------
    GridError
        A grid name that is not a constexpr of the kernel (the message lists the constexprs), an empty
        grid, or an empty ``num_warps`` / ``num_stages`` list.
    """
    known = list(kernel_constexprs)
    unknown = [n for n in grid if n not in known]
    if unknown:
        verb = "is" if len(unknown) == 1 else "are"
        raise GridError(f"--grid names {', '.join(map(repr, unknown))}, which {verb} not a constexpr of "
                        f"{kernel} (its constexprs: {', '.join(known) or 'none'})")
    if not num_warps or not num_stages:
        raise GridError("the grid is empty: --num-warps and --num-stages need at least one value each")
    if any(not values for values in grid.values()):
        raise GridError("the grid is empty: a --grid name has no values")
    names = list(grid)
    base = {k: v for k, v in (defaults or {}).items() if k not in grid}
    out = []
    for i, combo in enumerate(itertools.product(*(grid[n] for n in names), num_warps, num_stages)):
        values = dict(zip(names, combo[:len(names)], strict=True))
        out.append(Config({**values, **base}, int(combo[-2]), int(combo[-1]), i))
    return out
