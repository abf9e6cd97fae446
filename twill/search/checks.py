"""Option checks that need no solver: reject a pool, an ``apart`` pair or a number the search cannot use,
before any solve."""

from __future__ import annotations

import math
from typing import Any

from twill.errors import (
    OptionsError,
)
from twill.model.formulation import pool_size
from twill.model.problem import Edge, Problem

__all__ = ["check_apart", "check_numbers", "check_pool"]

def check_numbers(*, normalize_upper: Any, time_limit: Any, window_limit: Any) -> None:
    """:class:`OptionsError` unless ``normalize_upper`` is an integer >= 1 and the limits are ``None`` or
    finite numbers of seconds > 0."""
    if isinstance(normalize_upper, bool) or not isinstance(normalize_upper, int) or normalize_upper < 1:
        raise OptionsError(f"normalize_upper={normalize_upper!r} must be an integer >= 1 (the bound U on the "
                           "normalized cost sum)", option="normalize_upper")
    for name, value in (("time_limit", time_limit), ("window_limit", window_limit)):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                or value <= 0:
            raise OptionsError(f"{name}={value!r} must be a number of seconds > 0 (or None)", option=name)


def check_pool(problem: Problem) -> None:
    """Reject a warp-group pool that cannot hold the loop: variable-latency ops take a group of their own
    (variable-latency isolation, paper §5.3), so with any compute op the joint search needs two groups.

    Raises
    ------
    OptionsError
        ``max_groups`` (or the register plan's length) is 1 and the loop has both kinds of op; or
        ``cross_group=False`` and a register value must cross groups (:meth:`Problem.forced_cross`).
    """
    if not problem.options.cross_group:
        forced = [e for e in problem.edges if e.carrier == "register" and e.src != e.dst
                  and problem.forced_cross(e)]
        if forced:
            e = forced[0]
            raise OptionsError(
                f"cross_group=False keeps register values inside a warp group, but edge {e.label} carries "
                f"one between ops that never share a group ({_why_apart(problem, e)}); allow "
                f"cross-group values, or use strategy='swp'", option="cross_group")
    vl = [op.name for op in problem.ops if op.variable_latency]
    compute = [op.name for op in problem.ops if not op.variable_latency]
    if not vl or not compute or pool_size(problem) >= 2:
        return
    plan = problem.options.register_plan is not None
    option = "register_plan" if plan else "max_groups"
    given = f"register_plan {list(problem.options.register_plan)}" if plan else "max_groups=1"
    raise OptionsError(
        f"{given} offers one warp group, but the variable-latency ops ({', '.join(vl)}) need a group of "
        f"their own (paper §5.3) besides the {len(compute)} compute ops ({', '.join(compute[:4])}"
        f"{', ...' if len(compute) > 4 else ''}); offer at least 2 groups, or use strategy='swp' "
        f"(software pipelining without warp specialization)", option=option)


def check_apart(problem: Problem, strategy: str) -> None:
    """Reject ``apart`` pairs that no schedule can keep apart, before any solve (the search would scan
    every II and say only "no schedule").

    Raises
    ------
    OptionsError
        ``strategy='swp'`` (its fixed split does not read ``apart``); a pair of two variable-latency ops
        (all of them share the variable-latency group); a pool of one warp group; ``cross_group=False``
        with a pair joined by a register edge.
    """
    pairs = problem.options.apart
    if not pairs:
        return
    if strategy != "joint":
        raise OptionsError(f"apart={[list(p) for p in pairs]} needs strategy='joint': the '{strategy}' "
                           "strategy splits ops into groups by a fixed rule that does not read it",
                           option="apart")
    for a, b in pairs:
        if problem.op(a).variable_latency and problem.op(b).variable_latency:
            raise OptionsError(f"apart: {a!r} and {b!r} both have variable latency, and every variable-"
                               "latency op sits on the one variable-latency group (paper §5.3)",
                               option="apart")
        if pool_size(problem) < 2:
            raise OptionsError(f"apart: {a!r} and {b!r} need two warp groups, but the pool offers one "
                               "(max_groups or the register plan)", option="apart")
        joined = [e for e in problem.edges if e.carrier == "register" and {e.src, e.dst} == {a, b}]
        if joined and not problem.options.cross_group:
            raise OptionsError(f"apart: {a!r} and {b!r} are joined by the register edge {joined[0].label}, "
                               "which cross_group=False keeps inside one group", option="apart")


def _why_apart(problem: Problem, e: Edge) -> str:
    a, b = problem.op(e.src), problem.op(e.dst)
    if a.variable_latency != b.variable_latency:
        vl = a if a.variable_latency else b
        return f"{vl.name!r} has variable latency and sits on the variable-latency group"
    return f"{a.name!r} is issued by {a.warps} warps, {b.name!r} by {b.warps}"
