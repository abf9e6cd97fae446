"""The Twill-SWP variant (``strategy="swp"``): the modulo schedule split by a fixed rule (variable-latency
ops on a producer group, the rest on one consumer group), kept if it verifies."""

from __future__ import annotations

import math

from twill.errors import InfeasibleError
from twill.model.formulation import accumulators
from twill.model.liveness import fold, register_intervals
from twill.model.problem import Problem
from twill.schedule import (
    Attempt,
)
from twill.search.certificate import finish
from twill.search.run import Run
from twill.solvers.joint.result import JointResult
from twill.solvers.modulo.methods import ModuloResult
from twill.solvers.status import CheckResult, SolveStatus
from twill.verify import violations

__all__ = ["check_swp", "check_swp_registers", "check_swp_shapes", "needed_budgets", "swp_at",
           "swp_register_floor"]

def swp_at(run: Run, ii: int, mod: ModuloResult) -> tuple | None:
    """Twill-SWP: the modulo schedule, variable-latency ops on group 0, the rest on group 1."""
    p = run.problem
    group = {op.name: (0 if op.variable_latency else (1 if p.has_vl else 0)) for op in p.ops}
    warps = {g: max([p.op(n).warps for n in group if group[n] == g] + [1]) for g in set(group.values())}
    warps = {g: p.resources.group_threads(w) // 32 for g, w in warps.items()}
    needed = needed_budgets(p, ii, mod.start, group)
    fake = JointResult(ii, math.ceil(mod.length / ii), CheckResult.SAT, mod.start, group, needed, warps,
                       mod.length, {"length": mod.status == SolveStatus.OPTIMAL})
    trial = finish(run, ("swp", ii, fake, mod), None, {}, "swp")
    bad = violations(trial)
    if bad:
        run.note(Attempt(ii, fake.stages, "heuristic", "invalid", 0.0, str(bad[0])))
        return None
    run.note(Attempt(ii, fake.stages, "heuristic", "sat", 0.0, f"L = {mod.length}"))
    return ("swp", ii, fake, mod)


def needed_budgets(p: Problem, ii: int, start: dict[str, int], group: dict[str, int]) -> dict[int, int]:
    """Smallest legal setmaxnreg per group for the model's peak live registers (plain folding)."""
    res = p.resources
    out = {}
    intervals = register_intervals(p, ii, start, group)
    for g in set(group.values()):
        peak = max(fold([iv for iv in intervals if iv.group == g], ii, res.group_overhead))
        out[g] = min(res.setmaxnreg_max, res.round_budget(peak))
    return out


def _largest_budget(p: Problem, threads: int) -> tuple[int, str]:
    """The most registers per thread the consumer group of ``threads`` threads can hold in the
    Twill-SWP split, and why: the per-thread limit, the largest ``setmaxnreg`` value, and, unless the
    register file is relaxed, the largest legal budget that fits the register file beside the
    variable-latency group at its least budget (its overhead, rounded up to a legal value)."""
    res = p.resources
    cap = min(res.max_regs, res.setmaxnreg_max)
    why = [f"per-thread limit {res.max_regs}", f"setmaxnreg at most {res.setmaxnreg_max}"]
    if "register_file" not in p.options.relax:
        free, text = res.register_file, f"register file {res.register_file}"
        if p.has_vl:
            vl_threads = max(res.group_threads(op.warps) for op in p.ops if op.variable_latency)
            vl_budget = res.round_budget(res.group_overhead)
            free -= vl_threads * vl_budget
            text += f" - {vl_threads}x{vl_budget} (variable-latency group)"
        step = max(1, res.setmaxnreg_step)
        fit = (free // threads) // step * step
        why.append(f"{text} = {free} over {threads} threads, a multiple of {step}: {fit}")
        cap = min(cap, fit)
    return cap, ", ".join(why)


def swp_register_floor(p: Problem) -> tuple[int, str]:
    """Registers per thread that the Twill-SWP consumer group holds at some moment of every schedule, at
    every II, and the sum written out.

    The split puts every fixed-latency op on one consumer group. An accumulator there (a tracked
    register value carried to itself with distance ``δ >= 1``) lives at least ``δ II``, so ``δ`` copies
    of it are live at every moment; at the start of any other tracked value of at least one cycle, that
    value is live too. So the group holds at least ``overhead + Σ δ x regs(accumulator) + max
    regs(other)`` at that moment, whatever the II and the start times.

    Returns
    -------
    (int, str)
        The floor and its terms; ``(0, "")`` when the registers are relaxed or there is no consumer op.
    """
    res = p.resources
    consumer = [op for op in p.ops if not op.variable_latency]
    if "registers" in p.options.relax or not consumer:
        return 0, ""
    accs = set(accumulators(p))
    terms, need = [f"{res.group_overhead} overhead"], res.group_overhead
    for op in sorted((o for o in consumer if o.name in accs), key=lambda o: (-o.regs, o.name)):
        copies = max(e.distance for e in p.out_edges(op.name) if e.dst == op.name and e.carrier == "register")
        need += copies * op.regs
        terms.append(f"{op.regs} ({op.name}, accumulator{f' x {copies} copies' if copies > 1 else ''})")
    others = [op for op in consumer if op.name not in accs and res.tracked(op.regs) and op.cycles >= 1]
    if others:
        top = max(others, key=lambda o: (o.regs, o.name))
        need += top.regs
        terms.append(f"{top.regs} ({top.name}, live at its start)")
    return need, " + ".join(terms) + f" = {need}"


def check_swp_registers(p: Problem) -> None:
    """Refuse Twill-SWP at once when its one consumer group can never hold the registers.

    Raises
    ------
    InfeasibleError
        :func:`swp_register_floor` exceeds the most the consumer group can hold (:func:`_largest_budget`)
        : then no II has an SWP schedule, and the message gives both sums.
    """
    need, terms = swp_register_floor(p)
    consumer = [op for op in p.ops if not op.variable_latency]
    if not terms:
        return
    threads = p.resources.group_threads(max(op.warps for op in consumer))
    cap, why = _largest_budget(p, threads)
    if need > cap:
        raise InfeasibleError(
            f"Twill-SWP puts every fixed-latency op on one consumer group of {threads} threads, which holds "
            f"at least {terms} registers per thread at some moment of every schedule, at any II; the most "
            f"it can hold is {cap} ({why}). No II has a Twill-SWP schedule; use strategy='joint', which "
            f"can spread the values over several consumer groups")


def check_swp_shapes(p: Problem) -> None:
    """Refuse Twill-SWP at once when one of its two groups would mix op shapes.

    The split puts the variable-latency ops on one group and every other op on another; a group holds
    ops issued by one number of warpgroups (the group_shape family, which no option relaxes; one-warp
    ops fit anywhere), so a group given ops of two shapes fails verification at every II.

    Raises
    ------
    InfeasibleError
        A group of the split mixes shapes; the message names an op of each.
    """
    per = max(1, p.resources.warps_per_group)
    for role, ops in (("variable-latency", [op for op in p.ops if op.variable_latency]),
                      ("consumer", [op for op in p.ops if not op.variable_latency])):
        shapes: dict[int, str] = {}
        for op in sorted(ops, key=lambda o: o.name):
            if op.warps > 1:
                shapes.setdefault(per * -(-op.warps // per), op.name)
        if len(shapes) > 1:
            named = ", ".join(f"{shapes[w]} ({w} warps)" for w in sorted(shapes))
            raise InfeasibleError(
                f"Twill-SWP puts every {role} op on one warp group, but a group holds ops of one shape "
                f"(one-warp ops fit anywhere) and these are issued by different numbers of warps: {named}. "
                f"No II has a Twill-SWP schedule; use strategy='joint', which gives each shape its own group")


def check_swp(p: Problem) -> None:
    """Both refusals of Twill-SWP that need no solver: :func:`check_swp_shapes`, then
    :func:`check_swp_registers`."""
    check_swp_shapes(p)
    check_swp_registers(p)
