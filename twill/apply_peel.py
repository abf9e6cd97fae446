"""Peel the last iteration of a loop that Triton's software pipeliner expanded with predication (sm_90).

Triton 3.6's expander does not emit an epilogue: the pipelined loop runs once per original iteration, and
in its last runs every op of a non-last stage works for an iteration that does not exist, its side
effects predicated off. For a schedule that puts compute in a non-last stage (twill's FA forward issues
the QK GEMM and the softmax of iteration ``i + 1`` beside the PV GEMM of iteration ``i``), the last run
still issues that GEMM (twill wraps it in an ``scf.if`` whose two branches both issue it,
:mod:`twill.apply_rewrite`) and computes that softmax: on an 8-iteration loop about half an iteration of
wasted work (measured: 3 % of the FA forward's throughput at N = 1024 on an H200,
``benchmarks/h200_attention.md``).

:func:`peel_last_iteration` rewrites the final TTGIR (after all of Triton's TTGIR passes) the way a code
generator emits a pipelined loop's epilogue: the loop stops one iteration early, and a copy of its body
runs that last iteration after it, guarded by "the loop has an iteration". In the copy every stage
predicate of the form ``iv < ub - k * step`` (``k >= 1``, Triton's ``emitPredicate``) is the constant
``false``, so the canonicalizer folds the wrapped GEMMs to their (dead) results and erases the non-last
stages' pure ops; the predicated loads and barrier waits stay, switched off as before. The steady-state
loop is unchanged.

Only the text is edited; the caller re-parses it and runs Triton's canonicalizer (and CSE) on the module.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from twill.frontend.ttgir_text import split_top_level

__all__ = ["PEEL_PREFIX", "Peel", "peel_last_iteration"]

PEEL_PREFIX = "tpe_"
"""Put before every SSA name defined in the peeled copy of the loop body, and the helper values' names
(a prefix: MLIR names that start with a digit may hold only digits)."""

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
_TOKEN = re.compile(rf"{_NAME}")


@dataclass(frozen=True)
class Peel:
    """What :func:`peel_last_iteration` did.

    Attributes
    ----------
    loop_line : int
        1-based line of the peeled ``scf.for`` in the input text.
    predicates : tuple of str
        The stage predicates that are ``false`` in the peeled copy (SSA names in the loop body).
    """

    loop_line: int
    predicates: tuple[str, ...]


def _fresh(name: str) -> str:
    return f"%{PEEL_PREFIX}{name}"


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


def peel_last_iteration(text: str) -> tuple[str, Peel | None]:
    """Return ``text`` with the pipelined loop's last iteration peeled after it (module docstring).

    ``(text, None)`` when there is nothing to gain or the loop is not in the expected form: no single
    outermost ``scf.for`` with ``iter_args``, or no stage predicate ``iv < ub - k * step`` in its body
    (a loop the pipeliner did not expand, or one whose non-last stages hold nothing).
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
    constants = {c.group(1): int(c.group(2)) for line in lines if (c := _CONST.match(line))}
    subtracted = {s.group(1): s.group(3) for line in lines if (s := _SUBI.match(line)) and s.group(2) == ub}
    false_preds = []
    for line in body:
        c = _CMP.match(line)
        if c and c.group(3) == iv and constants.get(subtracted.get(c.group(4), ""), 0) > 0:
            false_preds.append(c.group(2))
    if not false_preds:
        return text, None

    defined: set[str] = set()
    for line in body:
        d = _DEF.match(line)
        if d:
            defined.update(n.split(":")[0].strip() for n in d.group(1).split(","))
        if line.lstrip().startswith("^bb"):
            defined.update(_BLOCK_ARG.findall(line))
    result = [f"{loop}#{k}" if count > 1 else loop for k in range(count)]
    rename = {name: _fresh(name[1:]) for name in defined}
    rename[iv] = _fresh("last")
    for k, (arg, _) in enumerate(pairs):
        rename[arg.strip()] = result[k]

    def sub(line: str) -> str:
        return _TOKEN.sub(lambda t: rename.get(t.group(0), t.group(0)), line)

    copy = []
    for line in body[:-1]:
        c = _CMP.match(line)
        if c and c.group(2) in false_preds:
            copy.append(f"{c.group(1)}{_fresh(c.group(2)[1:])} = arith.constant false{c.group(5)}")
        else:
            copy.append(sub(line))
    yielded = body[-1].split("scf.yield", 1)[1].rsplit(" : ", 1)[0].split(" loc(")[0]
    values = [sub(v.strip()) for v in split_top_level(yielded)]
    tys = ", ".join(types)
    one, has, span, span1, trips1, off, last0, last, out_name = (
        _fresh(n) for n in ("one", "has", "span", "span1", "trips1", "off", "last0", "last", "peeled"))
    bounds = [
        f"{ind}{one} = arith.constant 1 : {ivty}",
        f"{ind}{has} = arith.cmpi slt, {lb}, {ub} : {ivty}",
        f"{ind}{span} = arith.subi {ub}, {lb} : {ivty}",
        f"{ind}{span1} = arith.subi {span}, {one} : {ivty}",
        f"{ind}{trips1} = arith.divsi {span1}, {step} : {ivty}",
        f"{ind}{off} = arith.muli {trips1}, {step} : {ivty}",
        f"{ind}{last0} = arith.addi {lb}, {off} : {ivty}",
        f"{ind}{last} = arith.select {has}, {last0}, {lb} : {ivty}",
    ]
    peeled = [f"{ind}{out_name}{':' + str(count) if count > 1 else ''} = scf.if {has} -> ({tys}) {{",
              *["  " + line for line in copy],
              f"{ind}    scf.yield {', '.join(values)} : {tys}",
              f"{ind}}} else {{",
              f"{ind}  scf.yield {', '.join(result)} : {tys}",
              f"{ind}}}"]
    new_results = [f"{out_name}#{k}" if count > 1 else out_name for k in range(count)]
    after = {result[k]: new_results[k] for k in range(count)}
    pattern = re.compile("|".join(re.escape(r) + r"(?![\w$.\-#])"
                                  for r in sorted(result, key=len, reverse=True)))
    tail = [pattern.sub(lambda t: after[t.group(0)], line) for line in lines[end + 1:]]
    head_line = lines[head].replace(f" to {ub} step ", f" to {last} step ", 1)
    new = [*lines[:head], *bounds, head_line, *body, lines[end], *peeled, *tail]
    return "\n".join(new), Peel(head + 1, tuple(false_preds))
