"""Peel the last iteration of a loop that Triton's software pipeliner expanded with predication (sm_90).

Triton 3.6's expander does not emit an epilogue: the pipelined loop runs once per original iteration, and
in its last run every op of a non-last stage works for an iteration that does not exist (its loads and
barrier waits predicated off, its arithmetic computed and thrown away). For a schedule that puts compute
in a non-last stage (twill's FA forward issues the QK GEMM and the softmax of iteration ``i + 1`` beside
the PV GEMM of iteration ``i``), the last run still issues that GEMM (twill wraps it in an ``scf.if``
whose two branches both issue it, :mod:`twill.apply.rewrite`) and computes that softmax: about half an
iteration of wasted work per CTA (measured on an H200 at N = 1024, 8 iterations: 400 TFLOP/s unpeeled,
417 peeled, ``benchmarks/h200_attention.md``).

:func:`peel_last_iteration` rewrites the final TTGIR (after all of Triton's TTGIR passes) the way a code
generator emits a pipelined loop's epilogue: the loop stops one iteration early, and a copy of its body
runs that last iteration after it, guarded by "the loop has an iteration". In the copy every predicate
``iv < ub - c`` with a constant ``c >= step`` (a constant step) is the constant ``false``: the last
iteration's ``iv`` is at least ``ub - step``, so such a predicate is false there whoever wrote it (Triton's
stage predicates are ``iv < ub - k * step``, ``k >= 1``). The canonicalizer then folds the wrapped GEMMs to
their dead results and erases the pure ops whose results only a later iteration would read; the
predicated loads and barrier waits stay, switched off as before. The steady-state loop is unchanged.
Ops two or more stages before the last are saved only in the last run (the runs before it still work for
iterations past the end, as without the peel).

Only the text is edited; the caller re-parses it and runs Triton's canonicalizer (and CSE) on the module.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from twill.frontend.ttgir_text import split_top_level

__all__ = ["Peel", "peel_last_iteration"]

_NAME = r"%[\w$.\-]+"
_FOR = re.compile(rf"^(?P<ind>\s*)(?P<res>{_NAME})(?::(?P<n>\d+))? = scf\.for (?P<iv>{_NAME}) = "
                  rf"(?P<lb>{_NAME}) to (?P<ub>{_NAME}) step (?P<step>{_NAME}) "
                  rf"iter_args\((?P<args>.*)\) -> \((?P<types>.*)\)"
                  rf"\s*: (?P<ivty>i\d+) \{{\s*$")
_DEF = re.compile(rf"^\s*((?:{_NAME}(?::\d+)?)(?:\s*,\s*{_NAME}(?::\d+)?)*)\s*=\s")
_BLOCK_ARG = re.compile(rf"({_NAME}):")
_CONST = re.compile(rf"^\s*({_NAME}) = arith\.constant (-?\d+) : i\d+")
_SUBI = re.compile(rf"^\s*({_NAME}) = arith\.subi ({_NAME}), ({_NAME}) : i\d+")
_CMP = re.compile(rf"^(\s*)({_NAME}) = arith\.cmpi slt, ({_NAME}), ({_NAME}) : i\d+(.*)$")
_TOKEN = re.compile(_NAME)
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_FUNC = re.compile(r"^\s*tt\.func\b")


@dataclass(frozen=True)
class Peel:
    """What :func:`peel_last_iteration` did (in the text it was given, before any canonicalization).

    Attributes
    ----------
    predicates : tuple of str
        SSA names (in the loop body) of the predicates that are ``false`` in the peeled copy.
    """

    predicates: tuple[str, ...]


def _main_loop(lines: list[str]) -> tuple[int, re.Match[str]] | None:
    """The outermost ``scf.for`` with loop-carried values (the pipelined loop), if there is exactly one."""
    found = [(i, m) for i, line in enumerate(lines) if (m := _FOR.match(line))]
    if not found:
        return None
    outer = min(len(m.group("ind")) for _, m in found)
    top = [(i, m) for i, m in found if len(m.group("ind")) == outer]
    return top[0] if len(top) == 1 else None


def _closing(lines: list[str], start: int, indent: str) -> int | None:
    for j in range(start + 1, len(lines)):
        if lines[j].startswith(indent + "}") and not lines[j].startswith(indent + "} else"):
            return j
    return None


def _block_end(lines: list[str], end: int, indent: str) -> int:
    """First line after ``end`` that leaves the block holding the loop (a shallower closing brace)."""
    for j in range(end + 1, len(lines)):
        stripped = lines[j].lstrip()
        if stripped.startswith("}") and len(lines[j]) - len(stripped) < len(indent):
            return j
    return len(lines)


def _outside_strings(line: str, edit: Callable[[str], str]) -> str:
    """Apply ``edit`` to the parts of ``line`` outside string literals (asm text, names in locations)."""
    out, at = [], 0
    for s in _STRING.finditer(line):
        out += [edit(line[at:s.start()]), s.group(0)]
        at = s.end()
    return "".join([*out, edit(line[at:])])


def _prefix(text: str) -> str:
    """A name prefix no SSA value of ``text`` starts with."""
    taken = {t[1:] for t in _TOKEN.findall(text)}
    k = 0
    while any(name.startswith(f"peel{k}_") for name in taken):
        k += 1
    return f"peel{k}_"


def peel_last_iteration(text: str) -> tuple[str, Peel | None]:
    """Return ``text`` with the pipelined loop's last iteration peeled after it (module docstring).

    ``(text, None)`` when there is nothing to gain or the loop is not in the expected form: no single
    outermost ``scf.for`` with ``iter_args`` and an integer induction variable, a step that is not a
    constant of the enclosing function, or no predicate ``iv < ub - c`` with a constant ``c >= step`` in
    its body (a loop the pipeliner did not expand, or one whose non-last stages hold nothing).
    """
    lines = text.split("\n")
    found = _main_loop(lines)
    if found is None:
        return text, None
    head, m = found
    ind = m.group("ind")
    end = _closing(lines, head, ind)
    if end is None:
        return text, None
    body = lines[head + 1:end]
    if not body or "scf.yield" not in body[-1]:
        return text, None
    iv, lb, ub, step, ivty = (m.group(k) for k in ("iv", "lb", "ub", "step", "ivty"))
    loop, count = m.group("res"), int(m.group("n") or 1)
    pairs = [a.strip().split(" = ") for a in split_top_level(m.group("args"))]
    types = [t.strip() for t in split_top_level(m.group("types"))]
    if len(pairs) != count or len(types) != count or any(len(p) != 2 for p in pairs):
        return text, None
    func = max((i for i in range(head) if _FUNC.match(lines[i])), default=0)
    scope = lines[func:end]  # the enclosing function up to the loop's end: where its operands are defined
    constants = {c.group(1): int(c.group(2)) for line in scope if (c := _CONST.match(line))}
    if constants.get(step, 0) <= 0:
        return text, None
    subtracted = {s.group(1): s.group(3) for line in scope if (s := _SUBI.match(line)) and s.group(2) == ub}
    false_preds = []
    for line in body:
        c = _CMP.match(line)
        if c and c.group(3) == iv and constants.get(subtracted.get(c.group(4), ""), 0) >= constants[step]:
            false_preds.append(c.group(2))
    if not false_preds:
        return text, None

    pre = _prefix(text)
    defined: set[str] = set()
    for line in body:
        d = _DEF.match(line)
        if d:
            defined.update(n.split(":")[0].strip() for n in d.group(1).split(","))
        if line.lstrip().startswith("^bb"):
            defined.update(_BLOCK_ARG.findall(line))
    result = [f"{loop}#{k}" if count > 1 else loop for k in range(count)]
    rename = {name: f"%{pre}c_{name[1:]}" for name in defined}
    helper = {n: f"%{pre}{n}"  # body values become %{pre}c_NAME, so these never meet them
              for n in ("one", "has", "span", "span1", "trips1", "off", "last0", "last", "out")}
    rename[iv] = helper["last"]
    for k, (arg, _) in enumerate(pairs):
        rename[arg.strip()] = result[k]

    def sub(part: str) -> str:
        return _TOKEN.sub(lambda t: rename.get(t.group(0), t.group(0)), part)

    copy = []
    for line in body[:-1]:
        c = _CMP.match(line)
        if c and c.group(2) in false_preds:
            copy.append(f"{c.group(1)}{rename[c.group(2)]} = arith.constant false{c.group(5)}")
        else:
            copy.append(_outside_strings(line, sub))
    yielded = body[-1].split("scf.yield", 1)[1].rsplit(" : ", 1)[0].split(" loc(")[0]
    values = [sub(v.strip()) for v in split_top_level(yielded)]
    tys = ", ".join(types)
    h = helper
    bounds = [
        f"{ind}{h['one']} = arith.constant 1 : {ivty}",
        f"{ind}{h['has']} = arith.cmpi slt, {lb}, {ub} : {ivty}",
        f"{ind}{h['span']} = arith.subi {ub}, {lb} : {ivty}",
        f"{ind}{h['span1']} = arith.subi {h['span']}, {h['one']} : {ivty}",
        # unsigned: under the guard ub > lb, so the span is positive even where it overflows the signed type
        f"{ind}{h['trips1']} = arith.divui {h['span1']}, {step} : {ivty}",
        f"{ind}{h['off']} = arith.muli {h['trips1']}, {step} : {ivty}",
        f"{ind}{h['last0']} = arith.addi {lb}, {h['off']} : {ivty}",
        f"{ind}{h['last']} = arith.select {h['has']}, {h['last0']}, {lb} : {ivty}",
    ]
    peeled = [f"{ind}{h['out']}{':' + str(count) if count > 1 else ''} = scf.if {h['has']} -> ({tys}) {{",
              *["  " + line for line in copy],
              f"{ind}    scf.yield {', '.join(values)} : {tys}",
              f"{ind}}} else {{",
              f"{ind}  scf.yield {', '.join(result)} : {tys}",
              f"{ind}}}"]
    after = {result[k]: (f"{h['out']}#{k}" if count > 1 else h["out"]) for k in range(count)}
    pattern = re.compile("|".join(re.escape(r) + r"(?![\w$.\-#])"
                                  for r in sorted(result, key=len, reverse=True)))

    def redirect(part: str) -> str:
        return pattern.sub(lambda t: after[t.group(0)], part)

    stop = _block_end(lines, end, ind)  # the loop's results are visible up to the end of its block
    tail = [_outside_strings(line, redirect) for line in lines[end + 1:stop]]
    head_line = lines[head].replace(f" to {ub} step ", f" to {h['last']} step ", 1)
    new = [*lines[:head], *bounds, head_line, *body, lines[end], *peeled, *tail, *lines[stop:]]
    return "\n".join(new), Peel(tuple(false_preds))
