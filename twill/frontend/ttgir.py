"""Parse TTGIR into a small op tree: ops, SSA values with types, attributes, regions, lines, locations.

Triton's MLIR bindings parse and verify the module and give the exact def-use chains and types; the
printed text gives what the bindings cannot: integer, array and dictionary attributes (``loop.stage``,
``axis``, ``ttg.partition``), the 1-based TTGIR line of each op and its source location. The two views
are aligned op by op in pre-order (the bindings walk in post-order; the tree is rebuilt from the
region/block parents). See ``shared/docs/ttgir-probe.md`` §1 for why this split is needed.

    >>> from twill.frontend.compile import compile_to_ttgir
    >>> mod = parse_ttgir(compile_to_ttgir("examples/gemm.py").pre_swp)
    >>> [op.name for op in mod.find("scf.for")[0].body.ops][:2]
    ['tt.descriptor_load', 'ttg.local_alloc']

Errors: unreadable files and text MLIR rejects raise :class:`~twill.errors.FrontendError` with the line
the MLIR parser names; a text/bindings disagreement names the first line that differs.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from twill.errors import FrontendError
from twill.frontend.ttgir_text import AttrValue, Location, LocTable, TextOp, scan_op_lines
from twill.frontend.types import TType, parse_type

__all__ = ["Block", "Op", "TTGIRModule", "Value", "parse_ttgir", "read_ttgir_text"]

_DIAG = re.compile(r'loc\("(?P<file>[^"]*)":(?P<line>\d+):(?P<col>\d+)\):\s*error:\s*(?P<msg>.*)')
_UNPRINTED = ("ttg.warp_specialize.partitions",)


@dataclass(eq=False)
class Value:
    """An SSA value: an op result or a block argument.

    Attributes
    ----------
    type : TType
        Parsed type.
    name : str
        SSA name as printed (``%qk_27``, ``%out#1``); ``""`` for block arguments.
    owner : Op or None
        The defining op (``None`` for a block argument).
    index : int
        Result number, or argument number in its block.
    block : Block or None
        The block whose argument this is (``None`` for op results).
    """

    key: int
    type: TType
    name: str = ""
    owner: Op | None = None
    index: int = 0
    block: Block | None = None
    handle: Any = field(default=None, repr=False)
    users: list[Op] = field(default_factory=list, repr=False)

    def __repr__(self) -> str:
        return f"Value({self.name or f'arg{self.index}'}: {self.type.text[:40]})"


@dataclass(eq=False)
class Block:
    """A block: its arguments and ops, in order. ``parent`` is the op owning the region."""

    args: list[Value] = field(default_factory=list)
    ops: list[Op] = field(default_factory=list)
    parent: Op | None = None


@dataclass(eq=False)
class Op:
    """One TTGIR operation.

    Attributes
    ----------
    name : str
        Op name, e.g. ``ttng.warp_group_dot``.
    line : int
        1-based line in the TTGIR text.
    loc : Location
        Source location Triton attached (Python variable name, ``file:line:col``).
    attrs : dict
        Attributes and properties (ints, bools, strings, int tuples for ``array<i32: ...>``).
    results, operands : list of Value
        SSA results and operands.
    regions : list of list of Block
        Regions, each a list of blocks.
    parent : Op or None
        The op whose region holds this one.
    """

    name: str
    line: int
    loc: Location
    attrs: dict[str, AttrValue]
    results: list[Value] = field(default_factory=list)
    operands: list[Value] = field(default_factory=list)
    regions: list[list[Block]] = field(default_factory=list)
    parent: Op | None = None
    handle: Any = field(default=None, repr=False)

    def __repr__(self) -> str:
        return f"Op({self.name} @ line {self.line})"

    @property
    def body(self) -> Block:
        """The single block of the first region (``scf.for`` body); :class:`FrontendError` if none."""
        if not self.regions or not self.regions[0]:
            raise FrontendError(f"{self.name} has no body", line=self.line, location=str(self.loc) or None)
        return self.regions[0][0]

    def walk(self) -> Iterator[Op]:
        """This op and every op nested in its regions, in pre-order."""
        yield self
        for region in self.regions:
            for block in region:
                for op in block.ops:
                    yield from op.walk()

    def ancestors(self) -> Iterator[Op]:
        """Enclosing ops, innermost first."""
        op = self.parent
        while op is not None:
            yield op
            op = op.parent


@dataclass(eq=False)
class TTGIRModule:
    """A parsed TTGIR module.

    Attributes
    ----------
    root : Op
        The ``builtin.module`` op.
    text : str
        The TTGIR text.
    source : str
        File it was read from, or ``"<text>"``.
    """

    root: Op
    text: str
    source: str
    context: Any = field(default=None, repr=False)
    module: Any = field(default=None, repr=False)
    cache: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def num_warps(self) -> int:
        """``ttg.num-warps`` of the module (4 when absent)."""
        value = self.root.attrs.get("ttg.num-warps", 4)
        return value if isinstance(value, int) and not isinstance(value, bool) else 4

    @property
    def target(self) -> str:
        """``ttg.target`` of the module (``cuda:90``), ``""`` when absent."""
        return str(self.root.attrs.get("ttg.target", ""))

    def ops(self) -> Iterator[Op]:
        """Every op in pre-order."""
        return self.root.walk()

    def find(self, name: str) -> list[Op]:
        """Every op called ``name``, in pre-order."""
        return [op for op in self.ops() if op.name == name]

    def function_name(self, op: Op) -> str:
        """Symbol name of the ``tt.func`` enclosing ``op`` (``""`` if there is none)."""
        func = next((a for a in (op, *op.ancestors()) if a.name == "tt.func"), None)
        if func is None:
            return ""
        match = re.search(r"@([\w$.-]+)", self.text.splitlines()[func.line - 1])
        return match.group(1) if match else ""


def read_ttgir_text(text_or_path: str | os.PathLike[str]) -> tuple[str, str]:
    """Return ``(text, source)`` for TTGIR given as text or as a file path.

    A string is a path when it has no newline and names an existing file or ends in ``.ttgir``/``.mlir``.

    Raises
    ------
    FrontendError
        The file cannot be read, or the text is empty.
    """
    value = os.fspath(text_or_path)
    is_path = isinstance(text_or_path, os.PathLike) or (
        "\n" not in value and (value.endswith((".ttgir", ".mlir")) or _is_file(value)))
    if is_path:
        try:
            text = Path(value).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise FrontendError(f"cannot read TTGIR file {value!r}: {exc}") from None
        source = value
    else:
        text, source = value, "<text>"
    if not text.strip():
        raise FrontendError(f"TTGIR {source} is empty")
    return text, source


def _is_file(value: str) -> bool:
    try:
        return Path(value).is_file()
    except (OSError, ValueError):  # a long one-line text is no file name
        return False


@contextmanager
def _captured_stderr() -> Iterator[list[str]]:
    """Capture what C++ code writes to file descriptor 2 (MLIR diagnostics) into a one-item list."""
    captured: list[str] = []
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield captured
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            captured.append(tmp.read().decode("utf-8", errors="replace"))


def _mlir_parse(text: str, source: str) -> tuple[Any, Any]:
    from triton._C.libtriton import ir, nvidia

    context = ir.context()
    ir.load_dialects(context)
    nvidia.load_dialects(context)
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "input.ttgir")
        Path(path).write_text(text, encoding="utf-8")
        with _captured_stderr() as diag:
            try:
                module = ir.parse_mlir_module(path, context)
            except RuntimeError:
                module = None
    if module is None:
        message = diag[0] if diag else ""
        match = _DIAG.search(message)
        if match:
            raise FrontendError(f"MLIR cannot parse {source}: {match.group('msg').strip()}",
                                line=int(match.group("line")))
        raise FrontendError(f"MLIR cannot parse {source}: {message.strip() or 'unknown error'}")
    return context, module


def _post_order(module: Any) -> list[Any]:
    ops: list[Any] = []
    module.walk(ops.append)
    return ops


def _pre_order(post: list[Any]) -> tuple[list[int], dict[int, int | None]]:
    """Pre-order of the walked ops and each op's parent index (rebuilt from region ownership)."""
    owner = {op.get_region(r).id(): i for i, op in enumerate(post) for r in range(op.get_num_regions())}
    parent: dict[int, int | None] = {}
    children: dict[int | None, list[int]] = {}
    for i, op in enumerate(post):
        block = op.get_block()
        up = owner.get(block.get_parent().id()) if block is not None else None
        parent[i] = up
        children.setdefault(up, []).append(i)
    order: list[int] = []
    stack = list(reversed(children.get(None, [])))
    while stack:
        i = stack.pop()
        order.append(i)
        stack.extend(reversed(children.get(i, [])))
    return order, parent


def _align(post: list[Any], order: list[int], text_ops: list[TextOp]) -> dict[int, TextOp]:
    """Match walked ops to printed ops; ops MLIR does not print (empty terminators) get none."""
    matched: dict[int, TextOp] = {}
    t = 0
    for i in order:
        name = post[i].get_name()
        if t < len(text_ops) and text_ops[t].name == name:
            matched[i] = text_ops[t]
            t += 1
            continue
        silent = name in _UNPRINTED or (post[i].get_num_operands() == 0 and post[i].get_num_results() == 0
                                         and post[i].get_num_regions() == 0)
        if not silent:
            line = text_ops[t].line if t < len(text_ops) else None
            found = text_ops[t].name if t < len(text_ops) else "end of text"
            raise FrontendError(f"cannot align the TTGIR text with the parsed module: expected op {name}, "
                                f"found {found}", line=line)
    if t != len(text_ops):
        raise FrontendError(f"TTGIR text has an op the parser did not produce: {text_ops[t].name}",
                            line=text_ops[t].line)
    return matched


class _Builder:
    """Turns the aligned walk into :class:`Op`/:class:`Block`/:class:`Value` objects."""

    def __init__(self, post: list[Any], matched: dict[int, TextOp], locs: LocTable) -> None:
        self.post, self.matched, self.locs = post, matched, locs
        self.values: dict[int, Value] = {}
        self.blocks: dict[int, Block] = {}
        self.ops: dict[int, Op] = {}

    def build(self, order: list[int], parent: dict[int, int | None]) -> Op:
        for i in order:
            self._make_op(i, parent[i])
        for i in order:
            self._link_operands(i)
        return self.ops[order[0]]

    def _make_op(self, i: int, up: int | None) -> None:
        handle = self.post[i]
        text = self.matched.get(i)
        names = text.results if text else []
        op = Op(handle.get_name(), text.line if text else (self.ops[up].line if up is not None else 0),
                self.locs.resolve(text.loc) if text else Location(), dict(text.attrs) if text else {},
                parent=self.ops.get(up) if up is not None else None, handle=handle)
        for r in range(handle.get_num_results()):
            res = handle.get_result(r)
            value = Value(res.id(), parse_type(str(res.get_type())), names[r] if r < len(names) else "",
                          op, r, handle=res)
            op.results.append(value)
            self.values[value.key] = value
        self.ops[i] = op
        if up is not None:
            self._block_for(handle, self.ops[up]).ops.append(op)

    def _block_for(self, handle: Any, parent: Op) -> Block:
        raw = handle.get_block()
        key = raw.id()
        if key not in self.blocks:
            block = Block(parent=parent)
            for a in range(raw.get_num_arguments()):
                arg = raw.arg(a)
                value = Value(arg.id(), parse_type(str(arg.get_type())), "", None, a, block, handle=arg)
                block.args.append(value)
                self.values[value.key] = value
            self.blocks[key] = block
            region_key = raw.get_parent().id()
            index = next(r for r in range(parent.handle.get_num_regions())
                         if parent.handle.get_region(r).id() == region_key)
            while len(parent.regions) <= index:
                parent.regions.append([])
            parent.regions[index].append(block)
        return self.blocks[key]

    def _link_operands(self, i: int) -> None:
        op, handle = self.ops[i], self.post[i]
        for k in range(handle.get_num_operands()):
            key = handle.get_operand(k).id()
            value = self.values.get(key)
            if value is None:
                raise FrontendError(f"operand {k} of {op.name} is defined nowhere in the module",
                                    line=op.line)
            op.operands.append(value)
            value.users.append(op)


def parse_ttgir(text_or_path: str | os.PathLike[str]) -> TTGIRModule:
    """Parse TTGIR text or a ``.ttgir`` file into a :class:`TTGIRModule`.

    Parameters
    ----------
    text_or_path : str or path-like
        TTGIR text, or the path of a file holding it.

    Returns
    -------
    TTGIRModule

    Raises
    ------
    FrontendError
        The file is unreadable or empty, MLIR rejects the text (the message carries MLIR's diagnostic
        and ``line`` the line it names), or the printed text cannot be matched with the parsed ops.
    """
    text, source = read_ttgir_text(text_or_path)
    context, module = _mlir_parse(text, source)
    text_ops, aliases = scan_op_lines(text)
    post = _post_order(module)
    order, parent = _pre_order(post)
    matched = _align(post, order, text_ops)
    root = _Builder(post, matched, LocTable(aliases)).build(order, parent)
    return TTGIRModule(root, text, source, context, module)
