"""Peeling the last iteration of Triton's predicated pipelined loop (twill.apply.peel), on small texts.

The end-to-end case (the FlashAttention forward compiled for sm_90) is in ``tests/test_apply.py``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from twill.apply.peel import peel_last_iteration

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


def _i32(v: int) -> int:
    return (v + 2**31) % 2**32 - 2**31


def _eval_bounds(text: str, lb: int, ub: int) -> dict[str, int]:
    """Evaluate the integer arith lines before the loop as i32 (wrapping; divui on the unsigned bits)."""
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
            if op == "divui":
                env[name] = _i32((a % 2**32) // (b % 2**32))
            else:
                env[name] = _i32({"subi": a - b, "addi": a + b, "muli": a * b}[op])
    return env


@pytest.mark.parametrize(("step", "lbs", "ubs"), [
    (3, (0, 2, 5), range(-2, 14)),
    (1, (-3, 0), range(-4, 6)),
    (10**9, (-15 * 10**8, 0), (-10**9, 0, 1, 10**9, 15 * 10**8, 2**31 - 1)),  # spans past 2**31
])
def test_peeled_loop_runs_every_iteration_once(step: int, lbs: tuple[int, ...], ubs: range) -> None:
    new, peel = peel_last_iteration(LOOP.replace("%c3 = arith.constant 3", f"%c3 = arith.constant {step}"))
    assert peel is not None and peel.predicates == ("%p",)
    bound = re.search(r"scf\.for %iv = %lb to (%\w+) step %c3", new).group(1)
    guard = re.search(r"= scf\.if (%\w+) -> \(f32, f32\)", new).group(1)
    for lb in lbs:
        for ub in ubs:
            env = _eval_bounds(new, lb, ub)
            steady = list(range(lb, env[bound], step))
            peeled = [env["%peel0_last"]] if env[guard] else []
            assert steady + peeled == list(range(lb, ub, step)), (lb, ub)


def test_the_copy_has_its_stage_predicate_false_and_its_own_names() -> None:
    new, _ = peel_last_iteration(LOOP)
    copy = new.split("scf.if")[1].split("} else {")[0]
    assert "%peel0_c_p = arith.constant false" in copy
    assert "%peel0_c_n = arith.mulf %r#1, %x : f32" in copy  # iter_args -> the loop's results
    assert "%peel0_c_2 = arith.addf %r#0, %r#1 : f32" in copy  # a numeric name gets a valid prefixed one
    assert "scf.yield %peel0_c_2, %peel0_c_s : f32, f32" in copy
    # Uses after the loop read the peeled iteration's results; the else branch passes the loop's through.
    assert "%o = arith.addf %peel0_out#0, %peel0_out#1 : f32" in new
    assert "scf.yield %r#0, %r#1 : f32, f32" in new


def _parses(text: str, tmp_path: Path) -> str:
    """Parse ``text`` with Triton's MLIR parser, canonicalize it, and print it again."""
    from triton._C.libtriton import ir, passes

    ctx = ir.context()
    ir.load_dialects(ctx)
    path = tmp_path / "peeled.mlir"
    path.write_text(text)
    module = ir.parse_mlir_module(str(path), ctx)
    pm = ir.pass_manager(ctx)
    passes.common.add_canonicalizer(pm)
    pm.run(module, "peel-test")
    return str(module)


def test_the_copy_parses_and_the_dead_early_stage_work_goes(tmp_path: Path) -> None:
    text = _parses(peel_last_iteration(LOOP)[0], tmp_path)
    # One multiply left: the loop's; the copy's (work for an iteration that does not exist) is gone.
    assert text.count("arith.mulf") == 1


@pytest.mark.parametrize("text", [
    LOOP.replace("%p = arith.cmpi slt, %iv, %lim", "%p = arith.cmpi slt, %x2, %lim").replace(
        "%lim = arith.subi", "%x2 = arith.addi %iv, %c1 : i32\n      %lim = arith.subi"),
    LOOP.replace("%lim = arith.subi %ub, %c3", "%lim = arith.subi %lb, %c3"),
    LOOP.replace("iter_args(%acc = %cst, %nxt = %x) -> (f32, f32)", "iter_args(%acc = %cst) -> (f32, f32)"),
    LOOP.replace("%lim = arith.subi %ub, %c3", "%lim = arith.subi %ub, %c1"),  # 1 < step: can be true
    LOOP.replace("step %c3 iter_args", "step %lb iter_args"),  # a step that is not a constant
])
def test_a_loop_in_another_form_is_left_alone(text: str) -> None:
    """No predicate ``iv < ub - c`` with a constant ``c >= step``, or iter_args that do not match."""
    assert peel_last_iteration(text) == (text, None)


def test_a_predicate_that_can_hold_in_the_last_iteration_is_kept(tmp_path: Path) -> None:
    """``iv < ub - 1`` with step 3 is true in a last iteration at ub - 3: it must not become false."""
    text = LOOP.replace("      %n = arith.mulf", "      %lim1 = arith.subi %ub, %c1 : i32\n"
                        "      %q = arith.cmpi slt, %iv, %lim1 : i32\n      %n = arith.mulf").replace(
        "%2 = arith.addf %acc, %nxt : f32", "%sel = arith.select %q, %nxt, %x : f32\n"
        "      %2 = arith.addf %acc, %sel : f32")
    new, peel = peel_last_iteration(text)
    assert peel is not None and peel.predicates == ("%p",)
    assert "%peel0_c_q = arith.cmpi slt, %peel0_last, %peel0_c_lim1 : i32" in new
    _parses(new, tmp_path)


def test_names_never_collide_with_the_kernels_own(tmp_path: Path) -> None:
    """Triton names values after Python variables: off, last, one, has, ... and even peel0_*."""
    text = LOOP.replace("%n = arith.mulf %nxt, %x", "%off = arith.mulf %nxt, %x").replace(
        "%s = arith.select %p, %n, %cst", "%s = arith.select %p, %off, %cst").replace(
        "%2 = arith.addf %acc, %nxt", "%peel0_last = arith.addf %acc, %nxt").replace(
        "scf.yield %2, %s", "scf.yield %peel0_last, %s")
    new, _ = peel_last_iteration(text)
    assert "%peel1_last = arith.select" in new and "%peel1_c_off = arith.mulf" in new
    _parses(new, tmp_path)


def test_only_the_loops_own_function_and_no_string_is_rewritten() -> None:
    later = ('  tt.func @g(%x: f32) -> f32 {\n'
             '    %r:2 = "test.op"() {note = "uses %r#0 and %p"} : () -> (f32, f32)\n'
             '    tt.return %r#0 : f32\n  }\n}')
    text = LOOP[:LOOP.rindex("}")] + later
    new, _ = peel_last_iteration(text)
    assert new.endswith(later)  # the second function's %r is its own
    inline = LOOP.replace("%n = arith.mulf %nxt, %x : f32", '%n = arith.mulf %nxt, %x {s = "%n %iv"} : f32')
    new, _ = peel_last_iteration(inline)
    assert '%peel0_c_n = arith.mulf %r#1, %x {s = "%n %iv"} : f32' in new
