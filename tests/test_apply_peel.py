"""Peeling the last iteration of Triton's predicated pipelined loop (twill.apply_peel), on small texts.

The end-to-end case (the FlashAttention forward compiled for sm_90) is in ``tests/test_apply.py``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from twill.apply_peel import peel_last_iteration

LOOP = """module {
  tt.func @f(%lb: i32, %ub: i32, %x: f32) -> f32 {
    %c1 = arith.constant 1 : i32
    %c3 = arith.constant 3 : i32
    %cst = arith.constant 0.000000e+00 : f32
    %r:2 = scf.for %iv = %lb to %ub step %c3 iter_args(%acc = %cst, %nxt = %x) -> (f32, f32)  : i32 {
      %lim = arith.subi %ub, %c3 : i32
      %p = arith.cmpi slt, %iv, %lim : i32
      %n = arith.mulf %nxt, %x : f32
      %s = arith.select %p, %n, %cst : f32
      %2 = arith.addf %acc, %nxt : f32
      scf.yield %2, %s : f32, f32
    }
    %o = arith.addf %r#0, %r#1 : f32
    tt.return %o : f32
  }
}"""


def _eval_bounds(text: str, lb: int, ub: int) -> dict[str, int]:
    """Evaluate the integer arith lines before the loop (C semantics: divsi truncates toward zero)."""
    env: dict[str, int] = {"%lb": lb, "%ub": ub}
    for line in text.split("\n"):
        if "scf.for" in line:
            break
        m = re.match(r"\s*(%[\w]+) = arith\.(\w+) (.*?) : i\d+$", line)
        if not m:
            continue
        name, op, args = m.groups()
        if op == "constant":
            env[name] = int(args)
            continue
        if op == "cmpi":
            _, a, b = (t.strip() for t in args.split(","))
            env[name] = int(env[a] < env[b])
            continue
        vals = [env[t.strip()] for t in args.split(",")]
        if op == "select":
            env[name] = vals[1] if vals[0] else vals[2]
        else:
            a, b = vals
            env[name] = {"subi": a - b, "addi": a + b, "muli": a * b,
                         "divsi": int(a / b) if b else 0}[op]
    return env


def test_peeled_loop_runs_every_iteration_once() -> None:
    new, peel = peel_last_iteration(LOOP)
    assert peel is not None and peel.predicates == ("%p",)
    bound = re.search(r"scf\.for %iv = %lb to (%\w+) step %c3", new).group(1)
    guard = re.search(r"= scf\.if (%\w+) -> \(f32, f32\)", new).group(1)
    for lb in (0, 2, 5):
        for ub in range(-2, 14):
            env = _eval_bounds(new, lb, ub)
            steady = list(range(lb, env[bound], 3))
            peeled = [env["%tpe_last"]] if env[guard] else []
            assert steady + peeled == list(range(lb, ub, 3)), (lb, ub)


def test_the_copy_has_its_stage_predicate_false_and_its_own_names() -> None:
    new, _ = peel_last_iteration(LOOP)
    copy = new.split("scf.if")[1].split("} else {")[0]
    assert "%tpe_p = arith.constant false" in copy
    assert "%tpe_n = arith.mulf %r#1, %x : f32" in copy  # iter_args -> the loop's results
    assert "%tpe_2 = arith.addf %r#0, %r#1 : f32" in copy  # a numeric name gets a valid prefixed one
    assert "scf.yield %tpe_2, %tpe_s : f32, f32" in copy
    # Uses after the loop read the peeled iteration's results; the else branch passes the loop's through.
    assert "%o = arith.addf %tpe_peeled#0, %tpe_peeled#1 : f32" in new
    assert "scf.yield %r#0, %r#1 : f32, f32" in new


def test_the_copy_parses_and_the_dead_early_stage_work_goes(tmp_path: Path) -> None:
    from triton._C.libtriton import ir, passes

    new, _ = peel_last_iteration(LOOP)
    ctx = ir.context()
    ir.load_dialects(ctx)
    path = tmp_path / "peeled.mlir"
    path.write_text(new)
    module = ir.parse_mlir_module(str(path), ctx)
    pm = ir.pass_manager(ctx)
    passes.common.add_canonicalizer(pm)
    pm.run(module, "peel-test")
    text = str(module)
    # One multiply left: the loop's; the copy's (work for an iteration that does not exist) is gone.
    assert text.count("arith.mulf") == 1


@pytest.mark.parametrize("text", [
    LOOP.replace("%p = arith.cmpi slt, %iv, %lim", "%p = arith.cmpi slt, %x2, %lim").replace(
        "%lim = arith.subi", "%x2 = arith.addi %iv, %c1 : i32\n      %lim = arith.subi"),
    LOOP.replace("%lim = arith.subi %ub, %c3", "%lim = arith.subi %lb, %c3"),
    LOOP.replace("iter_args(%acc = %cst, %nxt = %x) -> (f32, f32)", "iter_args(%acc = %cst) -> (f32, f32)"),
])
def test_a_loop_in_another_form_is_left_alone(text: str) -> None:
    """No stage predicate ``iv < ub - k * step``, or iter_args that do not match the results."""
    assert peel_last_iteration(text) == (text, None)
