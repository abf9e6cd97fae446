"""The Twill-SWP variant (``strategy="swp"``): the modulo schedule split by a fixed rule (variable-latency
ops on a producer group, the rest on one consumer group), kept if it verifies."""

from __future__ import annotations

import math

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

__all__ = ["needed_budgets", "swp_at"]

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
