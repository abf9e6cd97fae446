"""Line-level reading of printed TTGIR: op lines, attribute dictionaries and source locations.

MLIR's Python bindings in Triton 3.6 give the op tree, the types and the def-use chains, but no integer,
array or dictionary attributes and no text line numbers. This module reads those from the printed text:

* :func:`scan_op_lines` finds every printed op in pre-order with its 1-based line, the SSA names of its
  results, its attribute dictionaries and its ``loc(...)``. For an op with regions the attributes and the
  location printed after the closing brace (``} {tt.scheduled_max_stage = 2 : i32} loc(#loc89)``) are
  credited to the op that opened the region.
* :func:`parse_attr_dict` turns ``{axis = 1 : i32, order = array<i32: 1, 0>}`` into Python values.
* :class:`LocTable` resolves ``#locN`` aliases, name locations (``loc("qk"(...))``) and call sites into a
  :class:`Location` (Python variable name, ``file:line:col``).

Everything here is plain text processing; malformed text gives a :class:`~twill.errors.FrontendError`
naming the line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from twill.errors import FrontendError

__all__ = ["LocTable", "Location", "TextOp", "parse_attr_dict", "scan_op_lines", "split_top_level"]

AttrValue = int | float | bool | str | tuple[int, ...]

_RESULTS = r"(?P<results>%[\w$.-]+(?::\d+)?(?:\s*,\s*%[\w$.-]+(?::\d+)?)*)\s*=\s*"
_OP_NAME = r"(?:\"(?P<quoted>[\w$.-]+)\"|(?P<bare>[A-Za-z_][\w$]*(?:\.[\w$]+)+|module)\b)"
_OP_LINE = re.compile(rf"^\s*(?:{_RESULTS})?{_OP_NAME}")
_LOC_ALIAS = re.compile(r"^(#loc\d*)\s*=\s*(loc\(.*\))\s*$")
_OPEN = {"(": ")", "[": "]", "{": "}", "<": ">"}
_CLOSE = {v: k for k, v in _OPEN.items()}


@dataclass(frozen=True)
class Location:
    """Where Triton says an op comes from.

    Attributes
    ----------
    name : str
        Python variable name of the value (``""`` when the location carries none).
    file : str
        Source file (``""`` when unknown).
    line, col : int
        1-based line and column in ``file`` (0 when unknown).
    """

    name: str = ""
    file: str = ""
    line: int = 0
    col: int = 0

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}" if self.file else ""


@dataclass
class TextOp:
    """One op as printed: its line, result names, attribute text and location text.

    Attributes
    ----------
    name : str
        Op name (``tt.dot``; generic ``"tt.reduce"`` without the quotes; ``builtin.module`` for ``module``).
    line : int
        1-based line of the op's first line.
    results : list of str
        SSA names of the results, ``%x#i`` for a multi-result group ``%x:n``.
    attrs : dict
        Attributes and properties from every ``{...}``/``<{...}>`` printed with the op.
    loc : str
        The op's own ``loc(...)`` text, ``""`` when none is printed.
    """

    name: str
    line: int
    results: list[str]
    attrs: dict[str, AttrValue] = field(default_factory=dict)
    loc: str = ""


def split_top_level(text: str, sep: str = ",") -> list[str]:
    """Split ``text`` at ``sep`` characters outside brackets and strings; pieces are stripped."""
    parts, depth, start, i = [], 0, 0, 0
    while i < len(text):
        ch = text[i]
        if ch == '"':
            i = _skip_string(text, i)
            continue
        if ch == "-" and text.startswith("->", i):
            i += 2
            continue
        if ch in _OPEN:
            depth += 1
        elif ch in _CLOSE:
            depth -= 1
        elif ch == sep and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
        i += 1
    tail = text[start:].strip()
    if tail or parts:
        parts.append(tail)
    return parts


def _skip_string(text: str, i: int) -> int:
    """Index just past the string literal starting at ``text[i] == '"'``."""
    j = i + 1
    while j < len(text):
        if text[j] == "\\":
            j += 2
            continue
        if text[j] == '"':
            return j + 1
        j += 1
    return j


def _matching(text: str, i: int) -> int:
    """Index of the bracket closing the one at ``text[i]``, or -1 if it is not closed in ``text``."""
    stack = [_OPEN[text[i]]]
    j = i + 1
    while j < len(text):
        ch = text[j]
        if ch == '"':
            j = _skip_string(text, j)
            continue
        if ch == "-" and text.startswith("->", j):
            j += 2
            continue
        if ch in _OPEN:
            stack.append(_OPEN[ch])
        elif ch in _CLOSE:
            if ch != stack[-1]:
                return -1
            stack.pop()
            if not stack:
                return j
        j += 1
    return -1


def parse_attr_value(text: str) -> AttrValue:
    """Value of one attribute: ``1 : i32`` -> 1, ``array<i32: 1, 0>`` -> (1, 0), ``true`` -> True."""
    body = split_top_level(text, ":")[0] if not text.startswith("array<") else text
    body = body.strip()
    array = re.fullmatch(r"array<\s*i\d+\s*(?::\s*(.*))?>", body)
    if array:
        items = array.group(1) or ""
        return tuple(int(x) for x in items.split(",") if x.strip())
    if body in ("true", "false"):
        return body == "true"
    if re.fullmatch(r"-?\d+", body):
        return int(body)
    if re.fullmatch(r"-?\d+\.\d*(?:e[+-]?\d+)?", body):
        return float(body)
    if len(body) >= 2 and body[0] == body[-1] == '"':
        return body[1:-1]
    return body


def parse_attr_dict(text: str) -> dict[str, AttrValue]:
    """Parse the inside of an attribute dictionary (without the braces).

    Raises
    ------
    ValueError
        An entry is not ``key`` or ``key = value``.
    """
    attrs: dict[str, AttrValue] = {}
    for entry in split_top_level(text):
        if not entry:
            continue
        key, eq, value = entry.partition("=")
        key = key.strip().strip('"')
        if not re.fullmatch(r"[\w$.-]+", key):
            raise ValueError(f"bad attribute entry {entry!r}")
        attrs[key] = parse_attr_value(value.strip()) if eq else True
    return attrs


def _attr_groups(segment: str) -> tuple[list[str], int]:
    """Top-level ``{...}`` and ``<{...}>`` groups of ``segment`` and the index of an unclosed ``{``.

    Returns the group contents and the position of a region-opening brace (-1 if none).
    """
    groups, i = [], 0
    while i < len(segment):
        ch = segment[i]
        if ch == '"':
            i = _skip_string(segment, i)
            continue
        if ch == "-" and segment.startswith("->", i):
            i += 2
            continue
        if segment.startswith("<{", i):
            end = _matching(segment, i + 1)
            if end < 0:
                return groups, i + 1
            groups.append(segment[i + 2:end])
            i = end + 2
            continue
        if ch == "{":
            end = _matching(segment, i)
            if end < 0:
                return groups, i
            groups.append(segment[i + 1:end])
            i = end + 1
            continue
        if ch in _OPEN:
            end = _matching(segment, i)
            if end < 0:
                return groups, i if segment.rstrip().endswith("{") else -1
            i = end + 1
            continue
        i += 1
    return groups, -1


def _own_loc(segment: str) -> str:
    """The last top-level ``loc(...)`` of ``segment`` (the op's own location), or ``""``."""
    best, i = "", 0
    while i < len(segment):
        ch = segment[i]
        if ch == '"':
            i = _skip_string(segment, i)
            continue
        if segment.startswith("loc(", i) and (i == 0 or not segment[i - 1].isalnum()):
            end = _matching(segment, i + 3)
            if end < 0:
                return best
            best = segment[i:end + 1]
            i = end + 1
            continue
        if ch in _OPEN:
            end = _matching(segment, i)
            i = end + 1 if end >= 0 else i + 1
            continue
        i += 1
    return best


def _result_names(group: str | None) -> list[str]:
    if not group:
        return []
    names: list[str] = []
    for part in group.split(","):
        name, _, count = part.strip().partition(":")
        names.extend([f"{name}#{k}" for k in range(int(count))] if count else [name])
    return names


def _absorb(op: TextOp, segment: str, line: int) -> int:
    """Read attributes and the location of ``segment`` into ``op``; return the region-opening index."""
    groups, opener = _attr_groups(segment)
    for group in groups:
        try:
            op.attrs.update(parse_attr_dict(group))
        except ValueError as exc:
            raise FrontendError(f"malformed attribute dictionary {{{group}}} of {op.name}: {exc}",
                                line=line) from None
    loc = _own_loc(segment if opener < 0 else segment[:opener])
    if loc:
        op.loc = loc
    return opener


def _constant_value(op: TextOp, segment: str) -> None:
    """Keep the literal of a scalar ``arith.constant`` (``false``, ``128 : i32``) as ``attrs["value"]``.

    MLIR prints the value of ``arith.constant`` bare, not as an attribute; dense tensor constants are left
    out.
    """
    body = re.sub(r"\s*loc\(.*$", "", segment.strip())
    literal = split_top_level(body, ":")[0] if body else ""
    value = parse_attr_value(literal) if literal else ""
    if isinstance(value, bool | int | float):
        op.attrs.setdefault("value", value)


def _close_region(line: str, number: int, stack: list[TextOp]) -> None:
    """Handle a line starting with ``}``: close one region and read the owner's trailing text."""
    if not stack:
        raise FrontendError("closing brace without an open region", line=number)
    owner = stack.pop()
    rest = line.strip()[1:].lstrip()
    if rest.startswith(")"):
        rest = rest[1:].lstrip()
    if rest.startswith(","):
        rest = rest[1:].lstrip()
    if not rest:
        return
    if rest.endswith("{") and _attr_groups(rest)[1] >= 0:
        stack.append(owner)
        rest = rest[:rest.rfind("{")]
    _absorb(owner, rest, number)


def scan_op_lines(text: str) -> tuple[list[TextOp], dict[str, str]]:
    """Find the printed ops of ``text`` in pre-order, and the ``#loc`` alias definitions.

    Returns
    -------
    ops : list of TextOp
        Every op line, in the order printed (the pre-order of the op tree).
    loc_aliases : dict of str to str
        ``#locN`` -> its ``loc(...)`` text.

    Raises
    ------
    FrontendError
        Unbalanced region braces or a malformed attribute dictionary, with the line.
    """
    ops: list[TextOp] = []
    aliases: dict[str, str] = {}
    stack: list[TextOp] = []
    last_at_depth: dict[int, TextOp] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("//"):
            continue
        alias = _LOC_ALIAS.match(line)
        if alias:
            aliases[alias.group(1)] = alias.group(2)
            continue
        if line.startswith("#"):
            continue
        if line.startswith("}"):
            _close_region(raw, number, stack)
            continue
        if line.startswith("^"):
            continue
        match = _OP_LINE.match(raw)
        if match is None:
            owner = last_at_depth.get(len(stack))
            if line.endswith("{") and owner is not None:
                stack.append(owner)
                continue
            raise FrontendError(f"cannot read this line as an MLIR op: {line[:80]!r}", line=number)
        name = match.group("quoted") or match.group("bare")
        op = TextOp("builtin.module" if name == "module" else name, number,
                    _result_names(match.group("results")))
        last_at_depth[len(stack)] = op
        if _absorb(op, raw[match.end():], number) >= 0:
            stack.append(op)
        if op.name == "arith.constant":
            _constant_value(op, raw[match.end():])
        ops.append(op)
    if stack:
        raise FrontendError(f"region of {stack[-1].name} is never closed", line=stack[-1].line)
    return ops, aliases


class LocTable:
    """Resolves printed ``loc(...)`` text into :class:`Location` objects.

    Parameters
    ----------
    aliases : dict of str to str
        ``#locN`` -> ``loc(...)`` definitions of the module.
    """

    def __init__(self, aliases: dict[str, str]) -> None:
        self._aliases = aliases
        self._cache: dict[str, Location] = {}

    def resolve(self, loc_text: str) -> Location:
        """Location of ``loc_text`` (``loc(#loc5)``, ``loc("qk"("f.py":3:4))``, ...)."""
        if not loc_text:
            return Location()
        if loc_text not in self._cache:
            inner = loc_text[4:-1] if loc_text.startswith("loc(") else loc_text
            self._cache[loc_text] = self._expr(inner.strip(), depth=0)
        return self._cache[loc_text]

    def _expr(self, text: str, depth: int) -> Location:
        if depth > 64:
            return Location()
        if text.startswith("#loc"):
            target = self._aliases.get(text)
            return self._expr(target[4:-1].strip(), depth + 1) if target else Location()
        if text.startswith("callsite("):
            callee, _, caller = text[len("callsite("):-1].partition(" at ")
            outer = self._expr(caller.strip(), depth + 1)
            inner = self._expr(callee.strip(), depth + 1)
            return Location(outer.name or inner.name, outer.file or inner.file,
                            outer.line or inner.line, outer.col or inner.col)
        if text.startswith("fused"):
            body = text[text.find("[") + 1:text.rfind("]")]
            parts = [self._expr(p, depth + 1) for p in split_top_level(body)]
            named = next((p for p in parts if p.name), Location())
            filed = next((p for p in parts if p.file), Location())
            return Location(named.name, filed.file, filed.line, filed.col)
        file_loc = re.fullmatch(r'"((?:[^"\\]|\\.)*)":(\d+):(\d+)(?:\s+to\s+.*)?', text)
        if file_loc:
            return Location("", file_loc.group(1), int(file_loc.group(2)), int(file_loc.group(3)))
        name_loc = re.fullmatch(r'"((?:[^"\\]|\\.)*)"(?:\((.*)\))?', text, flags=re.S)
        if name_loc:
            child = self._expr(name_loc.group(2).strip(), depth + 1) if name_loc.group(2) else Location()
            return Location(name_loc.group(1), child.file, child.line, child.col)
        return Location()
