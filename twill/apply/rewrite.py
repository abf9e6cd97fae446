"""Write a coarse schedule into Triton's scheduled TTGIR text, and read it back.

:func:`rewrite_ttgir` sets ``loop.stage``/``loop.cluster`` (and on sm_100 ``ttg.partition``) on the ops of
the main loop as :func:`twill.apply.map.plan_placement` and :func:`twill.apply.map.partition_plan` decided,
and on sm_90 works around two limits of Triton 3.6's Hopper pipeliner (see :func:`rewrite_ttgir`).
Triton's Python bindings cannot set integer or array attributes on ops, so the edit is done on the printed
text, op by op at the lines the parser recorded; :func:`read_slots` parses the result back for the checks.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from twill.apply.map import ApplyError, OpSlot, Placement, array_attr, int_attr, top_op
from twill.frontend.lower import Lowering
from twill.frontend.ttgir import Op, Value

__all__ = ["Rewrite", "attr_line", "read_slots", "rewrite_ttgir"]

_WGMMA = "ttng.warp_group_dot"
_SLOT_RE = re.compile(r"loop\.(stage|cluster) = (\d+) : i32")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def attr_line(lines: Sequence[str], op: Op) -> int:
    """0-based index of the line holding ``op``'s attribute dictionary (after the regions, if any)."""
    i = op.line - 1
    if not op.regions:
        return i
    indent = _indent(lines[i])
    for j in range(i + 1, len(lines)):
        text = lines[j]
        stripped = text.strip()
        if stripped.startswith("}") and _indent(text) == indent and not stripped.endswith("{"):
            return j
    raise ApplyError(f"cannot find the end of the regions of {op.name} at TTGIR line {op.line}")


def _attr_dict_span(line: str) -> tuple[int, int] | None:
    """``(start, end)`` of the op's attribute dictionary ``{...}`` on ``line`` (``None`` if it has none).

    The dictionary is the first ``{`` outside ``(...)``, ``[...]`` and ``<...>`` (types and properties),
    after any leading ``}`` / ``)`` that close regions.
    """
    i = 0
    while i < len(line) and line[i] in " })":
        i += 1
    depth = 0
    quoted = False
    for k in range(i, len(line)):
        ch = line[k]
        if ch == '"':
            quoted = not quoted
        if quoted:
            continue
        if ch in "([<":
            depth += 1
        elif ch in ")]>":
            depth -= 1
        elif ch == "{" and depth == 0:
            level = 0
            for m in range(k, len(line)):
                level += {"{": 1, "}": -1}.get(line[m], 0)
                if level == 0:
                    return k, m + 1
            return None
        elif depth == 0 and line.startswith(" : ", k):
            return None
    return None


def _set_attr(line: str, key: str, value: str) -> str:
    """Set ``key = value`` in the op's attribute dictionary on ``line`` (created if absent)."""
    span = _attr_dict_span(line)
    if span is None:
        return _insert_dict(line, f"{key} = {value}")
    start, end = span
    inner = line[start + 1:end - 1]
    pattern = re.compile(rf"(^|, ){re.escape(key)} = (array<[^>]*>|\[[^\]]*\]|[^,]+?)(?=, [\w\".]+ = |$)")
    if pattern.search(inner):
        inner = pattern.sub(lambda m: f"{m.group(1)}{key} = {value}", inner, count=1)
    else:
        inner = f"{inner}, {key} = {value}" if inner.strip() else f"{key} = {value}"
    return line[:start + 1] + inner + line[end - 1:]


def _insert_dict(line: str, entry: str) -> str:
    """Insert ``{entry}`` before the op's type signature (first top-level `` : ``)."""
    depth = 0
    quoted = False
    for i, ch in enumerate(line):
        if ch == '"':
            quoted = not quoted
        if quoted:
            continue
        if ch in "([{<":
            depth += 1
        elif ch in ")]}>":
            depth -= 1
        elif depth == 0 and line.startswith(" : ", i):
            return line[:i] + f" {{{entry}}}" + line[i:]
    raise ApplyError(f"cannot place an attribute on this TTGIR line: {line.strip()[:100]!r}")


def _wgmma_line(line: str) -> re.Match[str] | None:
    return re.match(r"(?P<ind>\s*)(?P<res>%[\w.$-]+) = ttng\.warp_group_dot (?P<ops>[^{]*?) "
                    r"\{(?P<attrs>[^}]*)\} : (?P<types>.*) -> (?P<rty>tensor<.*>)(?P<loc> loc\(.*\))?$", line)


def _wrap_wgmma(lines: list[str], index: int, tag: int) -> list[str]:
    """Replace the ``warp_group_dot`` on ``lines[index]`` by an ``scf.if`` whose branches both issue it."""
    match = _wgmma_line(lines[index])
    if match is None:
        raise ApplyError(f"cannot read the warp_group_dot on TTGIR line {index + 1}")
    ind, res, rty, loc = match["ind"], match["res"], match["rty"], match["loc"] or ""
    inner = ", ".join(a for a in (x.strip() for x in match["attrs"].split(",")) if not a.startswith("loop."))
    outer = ", ".join(a for a in (x.strip() for x in match["attrs"].split(",")) if a.startswith("loop."))
    dot = f"ttng.warp_group_dot {match['ops'].strip()} {{{inner}}} : {match['types']} -> {rty}{loc}"
    return [f"{ind}{res} = scf.if %twill_true -> ({rty}) {{",
            f"{ind}  %twill_then{tag} = {dot}",
            f"{ind}  scf.yield %twill_then{tag} : {rty}{loc}",
            f"{ind}}} else {{",
            f"{ind}  %twill_else{tag} = {dot}",
            f"{ind}  scf.yield %twill_else{tag} : {rty}{loc}",
            f"{ind}}} {{{outer}}}{loc}"]


@dataclass
class Rewrite:
    """The edited TTGIR and what the rewriter did beyond setting attributes.

    Attributes
    ----------
    text : str
        TTGIR for Triton's pipeliner.
    wrapped : list of str
        ``name@line`` of each ``warp_group_dot`` wrapped in ``scf.if`` (sm_90, not in the last stage).
    anchor : str
        Where the ``warp_group_dot_wait`` anchor went (``""`` if none).
    """

    text: str
    wrapped: list[str]
    anchor: str = ""


def _anchor_value(lowering: Lowering) -> Value | None:
    """A small loop-invariant register tensor defined before the loop (the anchor wait's operand)."""
    loop = lowering.loop
    func = next((a for a in loop.ancestors() if a.name == "tt.func"), None)
    if func is None:
        return None
    best: Value | None = None
    for op in func.body.ops:
        if op is loop:
            break
        for value in op.results:
            if value.type.kind == "tensor" and value.name and (best is None or value.type.nbytes
                                                                < best.type.nbytes):
                best = value
    return best


def rewrite_ttgir(text: str, placement: Placement, lowering: Lowering, *, target: str,
                  partitions: Mapping[int, tuple[int, ...]] | None = None,
                  loop_partition_attrs: Mapping[str, str] | None = None) -> Rewrite:
    """Write the placement into Triton's scheduled TTGIR ``text``.

    Parameters
    ----------
    text : str
        The ``scheduled`` snapshot the lowering was built from.
    placement : Placement
        From :func:`plan_placement`.
    lowering : Lowering
        The lowering of ``text``.
    target : str
        ``sm_90`` or ``sm_100``.
    partitions : mapping of int to tuple of int, optional
        sm_100: ``ttg.partition`` for every op line in the loop (nested ops included).
    loop_partition_attrs : mapping of str to str, optional
        sm_100: attributes to set on the ``scf.for`` (``ttg.partition``, ``ttg.partition.outputs``,
        ``ttg.partition.stages``, ``ttg.warp_specialize.tag``).

    Returns
    -------
    Rewrite

    Notes
    -----
    On sm_90, Triton 3.6's pipeliner cannot predicate a ``warp_group_dot`` (it aborts with "pipeliner
    doesn't know how to predicate this op") and every op outside the last stage is predicated in the
    prologue and the last iterations. Such a wgmma is wrapped in an ``scf.if`` whose two branches both
    issue it (an ``scf.if`` is predicated by its condition; a wgmma on a masked-off iteration reads a
    stale buffer and its result is discarded, so issuing it is harmless, and a branch that yields
    anything cheaper lets Triton's layout pass hoist conversions into the ``if`` and duplicate the
    softmax). Triton then leaves these wgmmas synchronous. For the last-stage wgmma whose accumulator is
    carried (P V) to stay asynchronous, Triton wants a ``warp_group_dot_wait {pendings = 0}`` before the
    first use of that accumulator; one is placed there (on a loop-invariant tensor).
    """
    lines = text.split("\n")
    loop = lowering.loop
    last = placement.max_stage
    by_line = {s.line: s for s in placement.slots}
    for slot in placement.slots:
        op = placement.ops[slot.line]
        j = attr_line(lines, op)
        if not _SLOT_RE.search(lines[j]):
            raise ApplyError(f"{op.name} at TTGIR line {op.line} has no loop.stage/loop.cluster; use "
                             "Triton's scheduled snapshot")
        lines[j] = _set_attr(_set_attr(lines[j], "loop.stage", f"{slot.stage} : i32"), "loop.cluster",
                             f"{slot.cluster} : i32")
    loop_j = attr_line(lines, loop)
    lines[loop_j] = _set_attr(lines[loop_j], "tt.scheduled_max_stage", f"{last} : i32")
    if partitions:
        for op in loop.walk():
            ids = partitions.get(op.line)
            if op is loop or ids is None:
                continue
            j = attr_line(lines, op)
            if op.name == "scf.yield":
                marked = f"scf.yield {{ttg.partition = {array_attr(ids)}}}"
                lines[j] = re.sub(r"scf\.yield( \{[^}]*\})?", marked, lines[j], count=1)
                continue
            lines[j] = _set_attr(lines[j], "ttg.partition", array_attr(ids))
            if op.regions and op.results:
                outs = ", ".join(array_attr(ids) for _ in op.results)
                lines[j] = _set_attr(lines[j], "ttg.partition.outputs", f"[{outs}]")
    if loop_partition_attrs:
        for key, value in loop_partition_attrs.items():
            if value:
                lines[loop_j] = _set_attr(lines[loop_j], key, value)
            elif not re.search(rf"[{{ ]{re.escape(key)}[,}}]", lines[loop_j]):
                _, end = _attr_dict_span(lines[loop_j]) or (0, 0)
                lines[loop_j] = lines[loop_j][:end - 1] + f", {key}" + lines[loop_j][end - 1:]
    result = Rewrite("\n".join(lines), [])
    if target != "sm_90":
        return result
    wgmmas = [s for s in placement.slots if s.name == _WGMMA and s.stage < last]
    if not wgmmas:
        return result
    anchor = _anchor_value(lowering)
    # Insert bottom-up so that line numbers above stay valid.
    inserts: list[tuple[int, list[str]]] = []
    for tag, slot in enumerate(wgmmas):
        inserts.append((slot.line - 1, _wrap_wgmma(lines, slot.line - 1, tag)))
        result.wrapped.append(f"{slot.name}@{slot.line}")
    anchor_at = _anchor_site(placement, lowering, by_line)
    if anchor is not None and anchor_at is not None:
        site = placement.ops[anchor_at]
        slot = by_line[anchor_at]
        ind = " " * _indent(lines[site.line - 1])
        # Last stage (a wait cannot be predicated), reader's cluster: emitted right before the reader.
        wait = (f"{ind}%twill_anchor = ttng.warp_group_dot_wait {anchor.name} {{loop.cluster = {slot.cluster}"
                f" : i32, loop.stage = {last} : i32, pendings = 0 : i32}} : {anchor.type.text}")
        inserts.append((site.line - 1, [wait, lines[site.line - 1]]))
        result.anchor = f"before {site.name}@{site.line} (cluster {slot.cluster})"
    for index, new in sorted(inserts, key=lambda x: -x[0]):
        lines[index:index + 1] = new
    func_line = next(i for i, t in enumerate(lines) if re.search(r"\bscf\.for\b", t)
                     and i + 1 >= loop.line - 1)
    ind = " " * _indent(lines[func_line])
    lines.insert(func_line, f"{ind}%twill_true = arith.constant true")
    result.text = "\n".join(lines)
    return result


def _anchor_site(placement: Placement, lowering: Lowering, by_line: Mapping[int, OpSlot]) -> int | None:
    """Line of the first op (in emission order) that reads the carried result of a last-stage wgmma."""
    loop = lowering.loop
    last = placement.max_stage
    yield_op = loop.body.ops[-1]
    readers: list[Op] = []
    for slot in placement.slots:
        if slot.name != _WGMMA or slot.stage != last:
            continue
        op = placement.ops[slot.line]
        for k, value in enumerate(yield_op.operands):
            if value is op.results[0] or (value.owner is not None and value.owner is op):
                arg = loop.body.args[k + 1]
                readers += [t for u in arg.users if (t := top_op(u, loop)) is not None and t is not op
                            and t.line in by_line]
    if not readers:
        return None
    order = {s.line: (s.stage, s.cluster, i) for i, s in enumerate(placement.slots)}
    return min((r.line for r in readers), key=order.__getitem__)


def read_slots(text: str) -> list[tuple[str, int, int, tuple[int, ...]]]:
    """``(op name, loop.stage, loop.cluster, ttg.partition)`` of every op of the main loop of ``text``.

    Used to check the emitted TTGIR against the schedule (the tests do).
    """
    from twill.frontend.lower import find_loop
    from twill.frontend.ttgir import parse_ttgir

    module = parse_ttgir(text)
    loop = find_loop(module)
    out = []
    for op in loop.body.ops:
        if op.name == "scf.yield":
            continue
        part = op.attrs.get("ttg.partition", ())
        ids = tuple(part) if isinstance(part, tuple) else ((part,) if isinstance(part, int) else ())
        stage, cluster = int_attr(op.attrs.get("loop.stage")), int_attr(op.attrs.get("loop.cluster"))
        out.append((op.name, stage, cluster, ids))
    return out
