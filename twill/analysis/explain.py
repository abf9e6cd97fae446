"""Why is II not lower? Re-solve with one constraint family relaxed at a time and report what changes.

:func:`explain` schedules the loop as asked, then once more per *what-if*: each constraint family of
:data:`twill.model.problem.RELAXABLE` left out (live registers, the register file, SMEM, TMEM, hand-off
latency, blocking-wait concurrency, the warp-group count) and each limit the caller set lifted (the
per-thread register limit back to the machine's, any number of stages, register values allowed to cross
warp groups). A what-if that lowers II (or, at the same II, the length ``L``) binds the answer, and the
report says by how much: ``II 2048 -> 1536 cycles if registers per thread were 255``.

When no schedule exists at all, the what-ifs are tried one at a time, then in pairs, and the smallest
sets that make a schedule exist are named responsible.

Every what-if keeps the cost normalization of the real problem (relaxing a family changes no cost), so
the IIs compare exactly; the stage windows searched are the same as the real search's
(``stage_slack``), so a what-if that needs many more stages may not be found (``docs/model.md`` §6).
A relaxed schedule is an answer to a question, not a schedule the machine can run.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from twill.errors import InfeasibleError, ResourceError, TwillError
from twill.ir.graph import Graph
from twill.ir.machine import Machine, load_machine
from twill.model.problem import RELAXABLE
from twill.schedule import DECIDED, Schedule
from twill.search.algorithm1 import schedule

__all__ = ["WHAT_IFS", "Explanation", "Outcome", "explain", "what_ifs"]

WHAT_IFS: tuple[str, ...] = ("register_limit", "registers", "register_file", "smem", "tmem", "handoff",
                             "blocking", "groups", "max_stages", "cross_group", "apart")
"""Every what-if :func:`explain` knows, in the order it tries them: the families of
:data:`~twill.model.problem.RELAXABLE` and the caller's own limits (``register_limit``, ``max_stages``,
``cross_group``, ``apart``)."""


@dataclass(frozen=True)
class Outcome:
    """The answer to one what-if (or to a set of them, when no schedule exists).

    Attributes
    ----------
    families : tuple of str
        The what-ifs applied together (names of :data:`WHAT_IFS`).
    description : str
        In words: ``"if registers per thread were 255"``.
    schedule : Schedule or None
        The relaxed schedule, or ``None`` when there is still none.
    error : str
        Why there is none (empty when there is one).
    """

    families: tuple[str, ...]
    description: str
    schedule: Schedule | None
    error: str = ""

    @property
    def ii_cycles(self) -> float | None:
        """II of the relaxed schedule in cycles (``None`` without a schedule)."""
        return None if self.schedule is None else self.schedule.ii_cycles

    @property
    def length_cycles(self) -> float | None:
        """``L`` of the relaxed schedule in cycles."""
        if self.schedule is None:
            return None
        return self.schedule.length * self.schedule.problem.cycles_per_unit


@dataclass(frozen=True)
class Explanation:
    """What binds a loop's schedule.

    Attributes
    ----------
    graph : str
        Loop name.
    machine : str
        Machine name.
    baseline : Schedule or None
        The schedule with every constraint (``None`` when there is none).
    baseline_error : str
        Why there is no schedule (empty when there is one).
    outcomes : tuple of Outcome
        One per what-if tried (and per pair, when no schedule exists).
    responsible : tuple of tuple of str
        When there is no schedule: the smallest sets of what-ifs found that make one exist (singletons
        first, then pairs); empty when none of those sets does, or when a schedule exists.
    undecided : bool
        The baseline found no schedule but did not prove that none exists (the time limit stopped it
        with some II undecided): nothing is named responsible then.
    """

    graph: str
    machine: str
    baseline: Schedule | None
    baseline_error: str
    outcomes: tuple[Outcome, ...]
    responsible: tuple[tuple[str, ...], ...] = ()
    undecided: bool = False

    def binding(self) -> list[Outcome]:
        """What-ifs that lower II, or keep II and shorten ``L`` (best first)."""
        if self.baseline is None:
            return []
        base = (self.baseline.ii, self.baseline.length)
        out = [o for o in self.outcomes if o.schedule is not None and len(o.families) == 1
               and (o.schedule.ii, o.schedule.length) < base]
        return sorted(out, key=lambda o: (o.schedule.ii, o.schedule.length))  # type: ignore[union-attr]

    def lines(self) -> list[str]:
        """The explanation in plain language, one finding per line."""
        if self.baseline is None and self.undecided:
            out = [f"{self.graph} on {self.machine}: no schedule found, none ruled out either (some II was "
                   f"left undecided: {self.baseline_error}); raise the time limit to learn what binds"]
            out += [f"{o.description}: II {o.ii_cycles:.0f} cycles" if o.schedule is not None else
                    f"unknown {o.description}: {o.error}" for o in self.outcomes]
            return out
        if self.baseline is None:
            out = [f"{self.graph} on {self.machine}: no schedule ({self.baseline_error})"]
            if self.responsible:
                sets = "; ".join(" and ".join(s) for s in self.responsible)
                out.append(f"responsible (smallest sets found): {sets}")
                for o in self.outcomes:
                    if o.families in self.responsible and o.schedule is not None:
                        out.append(f"  II {o.ii_cycles:.0f} cycles {o.description}")
            else:
                out.append("no single what-if nor any pair of them gives a schedule")
            return out
        b = self.baseline
        cpu = b.problem.cycles_per_unit
        cert = b.certificate
        out = [f"{self.graph} on {self.machine}: II = {b.ii_cycles:.0f} cycles ({b.ii} units), "
               f"L = {b.length * cpu:.0f} cycles, {len(b.warp_groups)} warp group(s)"]
        bound = "ResMII" if cert.res_mii >= cert.rec_mii else "RecMII"
        if b.ii == cert.lower_bound:
            lowered = any(o.schedule is not None and o.schedule.ii < b.ii for o in self.binding())
            out.append(f"II is at its lower bound ({bound} = {cert.lower_bound} units): "
                       + ("the bound itself includes a cost a family below prices (hand-offs between ops "
                          "that must sit on different warp groups: their latency on a recurrence (RecMII) or "
                          "their SMEM-port time on the smem unit (ResMII))" if lowered else
                          "no constraint family holds it up; only the units (ResMII) or the recurrences "
                          "(RecMII) do"))
        else:
            out.append(f"II is {b.ii - cert.lower_bound} units above its lower bound ({bound} = "
                       f"{cert.lower_bound} units)")
        binding = self.binding()
        for o in binding:
            s = o.schedule
            assert s is not None
            if s.ii < b.ii:
                out.append(f"binds: II {b.ii_cycles:.0f} -> {s.ii_cycles:.0f} cycles (L {b.length * cpu:.0f} "
                           f"-> {s.length * cpu:.0f}) {o.description}")
            else:
                out.append(f"binds L only: L {b.length * cpu:.0f} -> {s.length * cpu:.0f} cycles at the same "
                           f"II {o.description}")
        for o in self.outcomes:
            if o in binding:
                continue
            if o.schedule is None:
                out.append(f"unknown {o.description}: {o.error}")
            else:
                out.append(f"does not bind: II and L unchanged {o.description}")
        return out


def what_ifs(graph: Graph, machine: Machine, options: dict[str, Any]) -> list[tuple[str, str]]:
    """The what-ifs that can matter for ``graph`` under ``options``, each with its description.

    ``register_limit``, ``max_stages`` and ``cross_group`` only when the caller set them; ``smem`` when
    some value lives in shared memory (or a register value may be staged there), ``tmem`` when the
    machine or an op has tensor memory; ``groups`` unless a register plan fixes the groups.
    """
    out = []
    limit = options.get("register_limit")
    if limit is not None and limit < machine.max_regs_per_thread:
        most = machine.max_regs_per_thread
        out.append(("register_limit", f"if registers per thread were {most} (not {limit})"))
    out.append(("registers", "if live registers per warp group were not limited"))
    out.append(("register_file",
                f"if the setmaxnreg budgets could exceed the {machine.register_file}-register file"))
    if graph.fixed_smem or any(op.smem or op.result_bytes for op in graph.ops):
        out.append(("smem", f"if shared memory were unlimited (not {machine.smem_per_cta} bytes)"))
    if machine.tmem_columns or graph.fixed_tmem or any(op.tmem for op in graph.ops):
        out.append(("tmem", f"if tensor memory were unlimited (not {machine.tmem_columns} columns)"))
    out.append(("handoff", "if hand-offs between warp groups cost 0 cycles and no SMEM-port time"))
    out.append(("blocking", "if an op could wait while its warp group is issuing"))
    if not options.get("register_plan"):
        out.append(("groups", "if up to 8 warp groups were allowed, with no warps-per-CTA limit"))
    if options.get("max_stages") is not None:
        out.append(("max_stages", f"if any number of stages were allowed (not {options['max_stages']})"))
    if options.get("cross_group") is False:
        out.append(("cross_group", "if register values could cross warp groups"))
    if options.get("apart"):
        out.append(("apart", "if the apart pairs could share a warp group"))
    return out


def _apply(families: Iterable[str], options: dict[str, Any]) -> dict[str, Any]:
    opts = dict(options)
    relax = set(opts.get("relax", ()))
    for f in families:
        if f in RELAXABLE:
            relax.add(f)
        elif f == "register_limit":
            opts["register_limit"] = None
        elif f == "max_stages":
            opts["max_stages"] = None
        elif f == "cross_group":
            opts["cross_group"] = True
        elif f == "apart":
            opts["apart"] = ()
        else:
            raise TwillError(f"unknown what-if {f!r}; known: {', '.join(WHAT_IFS)}")
    opts["relax"] = frozenset(relax)
    return opts


def explain(
    graph: Graph,
    machine: str | Machine = "h100",
    *,
    families: Iterable[str] | None = None,
    pairs: bool = True,
    on_solve: Callable[[tuple[str, ...]], None] | None = None,
    **schedule_options: Any,
) -> Explanation:
    """Find which constraint families bind the schedule of ``graph`` on ``machine``.

    Parameters
    ----------
    graph : Graph
        The loop (machine cycles).
    machine : str or Machine
        Machine name, TOML path or loaded machine.
    families : iterable of str, optional
        The what-ifs to try (names of :data:`WHAT_IFS`); default: every one that can matter
        (:func:`what_ifs`).
    pairs : bool
        When no schedule exists and no single what-if gives one, try every pair.
    on_solve : callable, optional
        Called with the what-ifs of each solve before it starts (an empty tuple for the baseline).
    **schedule_options
        Passed to :func:`twill.schedule` for every solve (``register_limit``, ``max_groups``,
        ``cross_group``, ``max_stages``, ``time_limit`` (per solve), ``solver`` ...).

    Returns
    -------
    Explanation

    Raises
    ------
    GraphError, MachineError
        Bad input (the baseline's errors other than "no schedule").
    """
    mach = load_machine(machine)
    candidates = what_ifs(graph, mach, schedule_options)
    if families is not None:
        wanted = list(families)
        unknown = [f for f in wanted if f not in WHAT_IFS]
        if unknown:
            raise TwillError(f"unknown what-if {', '.join(unknown)}; known: {', '.join(WHAT_IFS)}")
        known = dict(candidates)
        candidates = [(f, known.get(f, _default_description(f))) for f in wanted]

    undecided = False

    def solve(fams: tuple[str, ...]) -> tuple[Schedule | None, str]:
        nonlocal undecided
        if on_solve is not None:
            on_solve(fams)
        try:
            return schedule(graph, mach, **_apply(fams, schedule_options)), ""
        except (InfeasibleError, ResourceError) as exc:
            cert = getattr(exc, "certificate", None)
            if not fams and cert is not None:  # the baseline: was "no schedule" proven?
                undecided = any(a.status not in DECIDED for a in cert.attempts)
            return None, str(exc)

    base, error = solve(())
    outcomes = []
    for fam, text in candidates:
        s, why = solve((fam,))
        outcomes.append(Outcome((fam,), text, s, why))
    responsible: list[tuple[str, ...]] = []
    if base is None and not undecided:
        responsible = [o.families for o in outcomes if o.schedule is not None]
        if not responsible and pairs:
            words = dict(candidates)
            for a, b in itertools.combinations([f for f, _ in candidates], 2):
                s, why = solve((a, b))
                outcomes.append(Outcome((a, b), f"{words[a]} and {words[b]}", s, why))
                if s is not None:
                    responsible.append((a, b))
    return Explanation(graph.name, mach.name, base, error, tuple(outcomes), tuple(responsible), undecided)


def _default_description(family: str) -> str:
    if family in RELAXABLE:
        return f"without the {family} constraint ({RELAXABLE[family]})"
    return {"register_limit": "with the machine's per-thread register limit",
            "max_stages": "with any number of stages",
            "cross_group": "if register values could cross warp groups",
            "apart": "if the apart pairs could share a warp group"}[family]
