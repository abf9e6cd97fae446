"""Reasons with arithmetic: which register limits bind a loop, in numbers, without another solver run.

:func:`register_floor` sums what every schedule must hold in registers: per warp shape (ops of a warp
group all take the same number of warpgroups), the group overhead of each group the accumulators
(values carried to themselves, live at every moment, :func:`twill.encoding.accumulators`) need, the
accumulators themselves and the largest other value; and the variable-latency group's overhead. The sum
over threads is a lower bound on the register file any schedule uses (budgets hold at least what is live
on their group at every moment, docs/model.md); a floor above the register file proves the loop
infeasible at every II. :func:`budget_sum` writes a schedule's ``setmaxnreg`` plan as the register-plan
check does (threads x budget per group = total against the register file).
"""

from __future__ import annotations

import math

from twill.model.formulation import accumulators
from twill.model.problem import Problem
from twill.schedule import Schedule

__all__ = ["budget_sum", "register_floor"]


def register_floor(problem: Problem) -> tuple[int, str]:
    """A lower bound on the registers (threads x per-thread budget, summed over the warp groups) that any
    schedule of ``problem`` needs, and the sum written out.

    Per warp shape ``w`` (threads ``T`` = whole warpgroups of ``w`` warps x 32), with accumulators
    ``a_1 .. a_m`` and largest other tracked value ``v`` (registers per thread): a group holds at most
    ``cap - overhead`` accumulator registers (``cap`` the per-thread limit, ``min(max_regs,
    setmaxnreg_max)``), so the accumulators need ``k >= ceil(sum a / (cap - overhead))`` groups, which
    hold ``T x (k x overhead + sum a + v)`` registers at the moment ``v`` is live. The
    variable-latency ops add one group of ``T x round_budget(overhead)``. Registers per thread and
    threads are the machine's (``problem.resources``).

    Returns
    -------
    (int, str)
        The floor, and its terms, ``"... = floor of the register file's F"``, ending with ``" > F"`` or
        ``" <= F"``; ``(0, "")`` when the registers are relaxed.
    """
    res = problem.resources
    if "registers" in problem.options.relax or "register_file" in problem.options.relax:
        return 0, ""
    cap = min(res.max_regs, res.setmaxnreg_max)
    room = max(1, cap - res.group_overhead)
    accs = set(accumulators(problem))
    terms, total = [], 0
    if problem.has_vl:
        threads = max(res.group_threads(op.warps) for op in problem.ops if op.variable_latency)
        budget = res.round_budget(res.group_overhead)
        terms.append(f"{threads}x{budget} (variable-latency group: overhead {res.group_overhead}, rounded)")
        total += threads * budget
    shapes: dict[int, list[str]] = {}
    for op in problem.ops:
        if not op.variable_latency:
            shapes.setdefault(res.group_threads(op.warps), []).append(op.name)
    for threads, names in sorted(shapes.items()):
        held = sorted((n for n in names if n in accs), key=lambda n: (-problem.op(n).regs, n))
        others = [problem.op(n).regs for n in names if n not in accs and res.tracked(problem.op(n).regs)]
        acc_sum = sum(problem.op(n).regs for n in held)
        groups = max(1, math.ceil(acc_sum / room))
        biggest = max(others, default=0)
        need = groups * res.group_overhead + acc_sum + biggest
        parts = [f"{groups} x {res.group_overhead} overhead"]
        parts += [f"{problem.op(n).regs} ({n}, accumulator)" for n in held]
        if biggest:
            parts.append(f"{biggest} (largest other value)")
        terms.append(f"{threads}x({' + '.join(parts)} = {need})")
        total += threads * need
    if not terms:
        return 0, ""
    verdict = ">" if total > res.register_file else "<="
    return total, (f"{' + '.join(terms)} = {total} registers {verdict} register file {res.register_file} "
                   f"(per-thread limit {cap}, at most {room} accumulator registers per group)")


def budget_sum(schedule: Schedule) -> str:
    """The ``setmaxnreg`` plan of ``schedule`` as a sum: ``threads x budget`` per warp group (its need in
    parentheses) ``= total`` against the register file."""
    res = schedule.problem.resources
    terms = [f"{res.group_threads(g.warps)}x{g.registers} (g{g.index} needs {g.registers_needed})"
             for g in schedule.warp_groups]
    total = sum(res.group_threads(g.warps) * g.registers for g in schedule.warp_groups)
    needed = sum(res.group_threads(g.warps) * g.registers_needed for g in schedule.warp_groups)
    return (f"registers: setmaxnreg budgets {' + '.join(terms)} = {total} of register file "
            f"{res.register_file} (the needs alone: {needed})")
