"""The joint problem at one II by logic-based Benders decomposition (branch and check): the warp-group
choice apart from the timing (``schedule(method="decompose")``).

A **master** problem (CP-SAT, Booleans only) picks a budget arrangement and a warp group for every op
that has a choice, under the numbering rule of :func:`twill.model.reductions.first_appearance` (sound
for the groups of one block: :func:`~twill.model.reductions.budget_arrangements` states why) and the
group-only constraints the subproblem implies (register relaxations, the issue limit ``Σ issue_cycles
<= II`` per group). A
**subproblem** is the whole joint model of :class:`twill.solvers.joint.cpsat.JointModel` *without* that
numbering rule and with the master's choice fixed (the group Booleans' domains set to one value, which
CP-SAT's presolve turns into a much smaller model: 0.06 s where the same model with the choice as
assumptions takes 2.2 s, FA backward sub-tiled on ``h100`` at II 100). A subproblem without a schedule
gives a **cut**: the choice is shrunk by deletion to a set of ops whose groups alone leave no schedule
(each deletion is kept only when CP-SAT proves the smaller choice infeasible; one it cannot decide keeps
the op), and the master is told never to make that choice again:

* **pattern cut** (when every op with a choice may take every group of one interchangeable block and
  there is one arrangement): the core's ops with the same group may not all again be together and those
  on different groups apart, i.e. no relabelling of the core's groups either. Sound: a schedule whose
  groups follow the same pattern on the core maps, by relabelling the block's groups (which changes no
  start time and no cost: the precondition of the numbering rule), onto one with the core's very
  groups, which the subproblem (no numbering rule, so relabelling stays inside it) refuted;
* **literal cut** otherwise: not (these ops on these groups, and this arrangement).

The II is refuted for the lengths asked (``low <= L <= stages * II``) when the master has no choice left:
every arrangement and group assignment was either refuted by a subproblem or excluded by a cut that
stands for refuted ones, and the numbering rule removes only relabellings. Undecided subproblems make
the whole answer undecided (never counted as refuted).

With a schedule, the answer itself comes from the joint solver the search uses (:func:`solve_joint` or
:func:`solve_joint_cpsat` over the same windows), so the schedule, its goals and tie-breaks are the ones
the direct method gives: the decomposition only decides faster, it never picks among optima.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from twill.errors import OptionsError
from twill.model.formulation import Formulation
from twill.model.problem import Problem
from twill.solvers.cpsat import CpsatRunner, load_cp_model
from twill.solvers.joint.cpsat import JointModel, solve_joint_cpsat
from twill.solvers.joint.encoding import Encoder
from twill.solvers.joint.result import JointResult
from twill.solvers.joint.smt import check_lazily, solve_joint
from twill.solvers.smt import SmtSession
from twill.solvers.status import CheckResult

__all__ = ["CORE_SLICE_S", "SUBPROBLEMS", "BendersOutcome", "benders", "deletion_core",
           "solve_joint_decomposed"]

CORE_SLICE_S = 2.0
"""Seconds one subproblem of the core shrinking may take; one that runs out keeps its ops in the core
(sound: the core only loses ops CP-SAT proved unnecessary). A tuning choice: the fixed subproblems of the
FA backward take 0.05-0.1 s."""


@dataclass(frozen=True)
class BendersOutcome:
    """What :func:`benders` decided at one ``(II, stages)``.

    Attributes
    ----------
    status : CheckResult
        ``UNSAT``: no schedule with ``low <= L <= stages * II`` under any group assignment; ``SAT``: the
        assignment ``group`` (ops with a choice) and arrangement ``arrangement`` have one; ``TIMEOUT`` or
        ``INTERRUPTED``: undecided.
    group : dict of str to int
        With ``SAT``, the group of every op with a choice.
    arrangement : int
        With ``SAT``, the index of the budget arrangement.
    iterations : int
        Master solves.
    cuts : int
        Cuts added.
    checks : int
        CP-SAT solves in all (master, subproblems, core shrinking).
    wall_s : float
        Seconds.
    """

    status: CheckResult
    group: dict[str, int]
    arrangement: int
    iterations: int
    cuts: int
    checks: int
    wall_s: float


class _Master:
    """The group-choice problem: Booleans ``x[op][w]``, one arrangement pick, the numbering rule, cuts."""

    def __init__(self, cp: Any, problem: Problem, f: Formulation, groups_of: dict[str, list[int]],
                 ii: int) -> None:
        self.cp, self.m = cp, cp.CpModel()
        self.choice = sorted(n for n, ws in groups_of.items() if len(ws) > 1)
        self.fixed = {n: ws[0] for n, ws in groups_of.items() if len(ws) == 1}
        self.x = {n: {w: self.m.NewBoolVar(f"x[{n}]={w}") for w in groups_of[n]} for n in self.choice}
        for n in self.choice:
            self.m.AddExactlyOne(self.x[n].values())
        arrangements = f.arrangements
        self.picks = [self.m.NewBoolVar(f"pick[{i}]") for i in range(len(arrangements))]
        self.m.AddExactlyOne(self.picks)
        for pick, numbering in zip(self.picks, f.numbering, strict=True):
            for op, w, earlier in numbering:
                here = self.lit(op, w)
                if here is False:
                    continue
                prev = [lit for lit in (self.lit(o, w - 1) for o in earlier) if lit is not False]
                if any(lit is True for lit in prev):
                    continue
                when = [pick] if here is True else [pick, here]
                if prev:
                    self.m.AddBoolOr(prev).OnlyEnforceIf(when)
                else:
                    self.m.AddBoolOr([self.cp_not(b) for b in when])
        self._registers(problem, f)
        self._issue(f, ii)
        blocks = arrangements[0].blocks if len(arrangements) == 1 else ()
        block = set(blocks[0]) if len(blocks) == 1 else set()
        # pattern cuts need every op with a choice to range over the one block, and no fixed op in it
        self.interchangeable = bool(block) and all(set(groups_of[n]) == block for n in self.choice) and \
            not any(w in block for w in self.fixed.values())
        self._same: dict[tuple[str, str], Any] = {}

    def _registers(self, p: Problem, f: Formulation) -> None:
        """Implied group-only constraints, each a relaxation of one the subproblem states
        (:meth:`JointModel.groups` and its accumulator cuts): a group's budget holds its accumulators
        (live at every moment) plus any one other tracked value it starts, within the register limit;
        the used groups' budgets, times at least the threads their ops need, fit the register file;
        their warps fit the CTA."""
        m = self.m
        res, opts = p.resources, p.options
        per = res.warps_per_group
        per_thread = 32 * per
        need = {op: warpgroups for op, warpgroups, _ in f.warpgroups}
        holders = {it.holder for it in f.register_items}
        costs, warps = [], []
        for w in range(f.pool):
            here = [(op, lit) for op in sorted(need) if (lit := self.lit(op, w)) is not False]
            if not here:
                continue
            used = m.NewBoolVar(f"used[{w}]")
            lits = [lit for _, lit in here]
            if any(lit is True for lit in lits):
                m.Add(used == 1)
            else:
                m.AddMaxEquality(used, lits)
            if opts.register_plan is not None:
                values = sorted({a.budgets[w] for a in f.arrangements})
                r = m.NewIntVarFromDomain(self.cp.Domain.FromValues(values), f"regs[{w}]")
                for pick, arr in zip(self.picks, f.arrangements, strict=True):
                    m.Add(r == arr.budgets[w]).OnlyEnforceIf(pick)
            else:
                step = res.setmaxnreg_step
                k = m.NewIntVar(0, res.setmaxnreg_max // step, f"regs8[{w}]")
                r = m.NewIntVar(0, step * (res.setmaxnreg_max // step), f"regs[{w}]")
                m.Add(r == step * k)
                m.Add(r >= res.setmaxnreg_min).OnlyEnforceIf(used)
                m.Add(r <= res.setmaxnreg_max).OnlyEnforceIf(used)
                m.Add(r == 0).OnlyEnforceIf(used.Not())
            m.Add(r >= res.group_overhead).OnlyEnforceIf(used)
            top = per_thread * max(f.shapes) * max(res.setmaxnreg_max, *(opts.register_plan or (0,)))
            cost = m.NewIntVar(0, top, f"cost[{w}]")
            m.Add(cost >= per_thread * r).OnlyEnforceIf(used)
            wq = m.NewIntVar(0, per * max(f.shapes), f"warps[{w}]")
            m.Add(wq >= per).OnlyEnforceIf(used)
            for op, lit in here:
                when = [] if lit is True else [lit]
                m.Add(cost >= per_thread * need[op] * r).OnlyEnforceIf(when)
                m.Add(wq >= per * need[op]).OnlyEnforceIf(when)
            costs.append(cost)
            warps.append(wq)
            if not any(h in holders and self.lit(h, w) is not False for h in need):
                continue
            cap = m.NewIntVar(0, max(0, f.register_limit - res.group_overhead), f"regcap[{w}]")
            m.Add(cap <= r - res.group_overhead).OnlyEnforceIf(used)
            mine = [(a, self.lit(a, w)) for a in f.accumulators if self.lit(a, w) is not False]
            if not mine:
                continue
            held = sum(p.op(a).regs * (1 if lit is True else lit) for a, lit in mine)
            m.Add(held <= cap)
            for op in p.ops:
                lit = self.lit(op.name, w)
                if op.name not in f.accumulators and lit is not False and res.tracked(op.regs):
                    m.Add(held + op.regs <= cap).OnlyEnforceIf([] if lit is True else [lit])
        if "register_file" not in opts.relax and costs:
            m.Add(sum(costs) <= res.register_file)
        if "groups" not in opts.relax and warps:
            m.Add(sum(warps) <= res.max_warps)

    def _issue(self, f: Formulation, ii: int) -> None:
        """The issue limit (a group-only constraint the subproblem states too): the ``issue_cycles`` of
        the ops on a group sum to at most ``ii``."""
        for w in range(f.pool):
            fixed, free = 0, []
            for op, c in f.issue_load(w):
                lit = self.lit(op, w)
                if lit is True:
                    fixed += c
                elif lit is not False:
                    free.append((c, lit))
            if fixed > ii:
                self.m.AddBoolOr([])  # the fixed ops alone overflow: no choice is left
            elif fixed + sum(c for c, _ in free) > ii:
                self.m.Add(sum(c * lit for c, lit in free) <= ii - fixed)

    @staticmethod
    def cp_not(lit: Any) -> Any:
        return lit.Not()

    def lit(self, op: str, w: int) -> Any:
        """The literal "``op`` on group ``w``" (a constant for an op without a choice)."""
        if op in self.fixed:
            return self.fixed[op] == w
        return self.x[op].get(w, False)

    def same(self, u: str, v: str) -> Any:
        """A Boolean equal to "``u`` and ``v`` on one group" (ops with a choice)."""
        key = (u, v) if u < v else (v, u)
        if key not in self._same:
            both = []
            for w in sorted(set(self.x[u]) & set(self.x[v])):
                a = self.m.NewBoolVar("")
                self.m.AddBoolAnd([self.x[u][w], self.x[v][w]]).OnlyEnforceIf(a)
                self.m.AddBoolOr([self.x[u][w].Not(), self.x[v][w].Not()]).OnlyEnforceIf(a.Not())
                both.append(a)
            b = self.m.NewBoolVar(f"same[{key[0]}][{key[1]}]")
            if both:
                self.m.AddMaxEquality(b, both)
            else:
                self.m.Add(b == 0)
            self._same[key] = b
        return self._same[key]

    def cut(self, core: list[str], group: dict[str, int], pick: int) -> None:
        """Exclude the choice ``group`` on the ops ``core`` (with arrangement ``pick``): as a pattern when
        the groups are interchangeable, else as literals. An empty clause makes the master infeasible."""
        if self.interchangeable:
            lits = [self.same(u, v).Not() if group[u] == group[v] else self.same(u, v)
                    for u, v in itertools.combinations(sorted(core), 2)]
        else:
            lits = [self.x[n][group[n]].Not() for n in sorted(core)]
            if len(self.picks) > 1:
                lits.append(self.picks[pick].Not())
        self.m.AddBoolOr(lits)

    def read(self, solver: Any) -> tuple[dict[str, int], int]:
        group = {n: next(w for w, b in ws.items() if solver.BooleanValue(b)) for n, ws in self.x.items()}
        pick = next(i for i, b in enumerate(self.picks) if solver.BooleanValue(b))
        return group, pick


SUBPROBLEMS = ("smt", "cpsat")
"""How :func:`benders` checks the timing at fixed groups: the SMT encoding (Yices, the choice as
assumptions, the core from Yices' unsat core; the default: 0.9-7.7 s where CP-SAT takes 16-35 s on the
FA backward's hard assignments at II 100, and one incremental context keeps what it learned) or CP-SAT
(the choice fixed in a copy of the model, the core from its sufficient assumptions)."""


class _CpsatSub:
    """The CP-SAT subproblem: :class:`JointModel` without the numbering rule."""

    def __init__(self, cp: Any, runner: CpsatRunner, problem: Problem, ii: int, stages: int,
                 low: int) -> None:
        self.cp, self.runner = cp, runner
        self.model = JointModel(problem, ii, stages, low, numbering=False)
        self.model.build()
        self.feasible = self.model.feasible
        self.groups_of = self.model.groups_of if self.feasible else {}

    def check(self, group: dict[str, int], pick: int, ops: list[str], until: float | None) -> CheckResult:
        """The model with the groups of ``ops`` (and the arrangement) fixed."""
        sub = self.model
        m = sub.m.clone()
        proto = m.Proto()
        chosen = [sub.opw[n][group[n]] for n in ops]
        if len(sub.picks) > 1:
            chosen.append(sub.picks[pick])
        for lit in chosen:  # a Boolean's domain [0, 1] becomes [1, 1]
            domain = proto.variables[lit.Index()].domain
            domain[0] = 1
            domain[1] = 1
        status, _ = self.runner.solve(m, until)
        return _status(self.cp, status)

    def core(self, group: dict[str, int], pick: int, ops: list[str], until: float | None) -> list[str]:
        """The ops of CP-SAT's sufficient assumptions for infeasibility (all of ``ops`` if CP-SAT cannot
        decide in time: that choice itself was refuted)."""
        sub = self.model
        owner = {sub.opw[n][w].Index(): n for n in ops for w in sub.opw[n]}
        m = sub.m.clone()
        m.AddAssumptions([sub.opw[n][group[n]] for n in ops])
        if len(sub.picks) > 1:
            m.AddAssumptions([sub.picks[pick]])
        status, solver = self.runner.solve(m, until)
        if status != self.cp.INFEASIBLE:
            return list(ops)
        return sorted({owner[i] for i in solver.SufficientAssumptionsForInfeasibility() if i in owner})

    def close(self) -> None:
        """Nothing to free."""


class _SmtSub:
    """The SMT subproblem: one :class:`Encoder` without the numbering rule, asked under assumptions."""

    def __init__(self, problem: Problem, ii: int, stages: int, low: int, backend: str) -> None:
        self.sess = SmtSession(backend)
        self.enc = Encoder(problem, ii, stages, self.sess, low, upto=True, numbering=False)
        self.enc.build()
        self.feasible = self.enc.feasible
        self.groups_of = self.enc.groups_of
        self.checks = 0
        self.last: list[Any] = []

    def _assumptions(self, group: dict[str, int], pick: int, ops: list[str]) -> list[Any]:
        lits = [self.enc.opw[n][group[n]] for n in ops]
        if len(self.enc.picks) > 1:
            lits.append(self.enc.picks[pick])
        return lits

    def check(self, group: dict[str, int], pick: int, ops: list[str], until: float | None) -> CheckResult:
        """The formula under the groups of ``ops`` (and the arrangement) as assumptions, with the lazy
        liveness checks (:func:`check_lazily`; each one added is a constraint of the model, kept)."""
        self.sess.assume(self._assumptions(group, pick, ops))
        self.last = list(ops)
        status = check_lazily(self.enc, self.sess, until)
        self.checks = self.sess.checks
        return status

    def core(self, group: dict[str, int], pick: int, ops: list[str], until: float | None) -> list[str]:
        """The ops of the backend's unsat core of the last check (which must have been UNSAT on ``ops``)."""
        owner = {self.enc.opw[n][group[n]]: n for n in ops}
        return sorted({owner[t] for t in self.sess.unsat_core() if t in owner})

    def close(self) -> None:
        """Free the solver."""
        self.sess.close()


def _status(cp: Any, status: Any) -> CheckResult:
    if status in (cp.OPTIMAL, cp.FEASIBLE):
        return CheckResult.SAT
    return CheckResult.UNSAT if status == cp.INFEASIBLE else CheckResult.TIMEOUT


def benders(problem: Problem, ii: int, stages: int, *, low: int = 1, deadline: float | None = None,
            subproblem: str = "smt", backend: str = "yices",
            shrink: Callable[[list[str], Callable[[list[str]], bool]], list[str]] | None = None,
            ) -> BendersOutcome:
    """Decide whether the joint problem has a schedule at ``ii`` with ``low <= L <= stages * ii`` by
    branch and check (module docstring).

    Parameters
    ----------
    problem : Problem
        The loop, in (normalized) time units.
    ii, stages : int
        Initiation interval and the largest stage count.
    low : int
        A proven lower bound on ``L`` (time units).
    deadline : float, optional
        ``time.monotonic()`` value at which to stop (the answer is then ``TIMEOUT``).
    subproblem : str
        One of :data:`SUBPROBLEMS`.
    backend : str
        The SMT backend of the ``"smt"`` subproblem (``"yices"`` or ``"z3"``).
    shrink : callable, optional
        How a refuted choice is shrunk to a core instead of the subproblem's own core: called with the
        ops and a test ``infeasible(ops)`` (True only when the choice on ``ops`` alone is proven to leave
        no schedule), e.g. :func:`deletion_core`. The tests pass a wrong one to see the oracle catch it.

    Returns
    -------
    BendersOutcome

    Raises
    ------
    SolverUnavailableError
        ``ortools`` (or the SMT backend) is not installed.
    OptionsError
        ``subproblem`` is not one of :data:`SUBPROBLEMS`.
    KeyboardInterrupt
        Ctrl-C during a solve (after the search was stopped).
    """
    if subproblem not in SUBPROBLEMS:
        raise OptionsError(f"subproblem {subproblem!r} is not one of {', '.join(SUBPROBLEMS)}",
                           option="subproblem")
    began = time.monotonic()
    cp = load_cp_model("method 'decompose'", "method 'direct'")
    runner = CpsatRunner(cp)
    sub: _CpsatSub | _SmtSub = (_SmtSub(problem, ii, stages, low, backend) if subproblem == "smt"
                                else _CpsatSub(cp, runner, problem, ii, stages, low))
    try:
        if not sub.feasible:
            return BendersOutcome(CheckResult.UNSAT, {}, 0, 0, 0, 0, time.monotonic() - began)
        return _loop(cp, runner, sub, Formulation.of(problem), problem, ii, deadline, shrink, began)
    finally:
        sub.close()


def _loop(cp: Any, runner: CpsatRunner, sub: _CpsatSub | _SmtSub, f: Formulation, problem: Problem, ii: int,
          deadline: float | None, shrink: Callable[..., list[str]] | None, began: float) -> BendersOutcome:
    """The master/subproblem iterations of :func:`benders`."""
    master = _Master(cp, problem, f, sub.groups_of, ii)
    iterations = cuts = 0

    def outcome(status: CheckResult, group: dict[str, int] | None = None, pick: int = 0) -> BendersOutcome:
        checks = runner.solves + (sub.checks if isinstance(sub, _SmtSub) else 0)
        return BendersOutcome(status, dict(group or {}), pick, iterations, cuts, checks,
                              time.monotonic() - began)

    while True:
        if deadline is not None and time.monotonic() >= deadline:
            return outcome(CheckResult.TIMEOUT)
        iterations += 1
        status, solver = runner.solve(master.m, deadline)
        if status == cp.INFEASIBLE:
            return outcome(CheckResult.UNSAT)
        if status not in (cp.OPTIMAL, cp.FEASIBLE):
            return outcome(CheckResult.TIMEOUT)
        group, pick = master.read(solver)
        verdict = sub.check(group, pick, master.choice, deadline)
        if verdict != CheckResult.UNSAT:
            return outcome(verdict, group, pick)
        if shrink is None:
            core = sub.core(group, pick, master.choice, deadline)
        else:
            def infeasible(ops: list[str], group: dict[str, int] = group, pick: int = pick) -> bool:
                until = time.monotonic() + CORE_SLICE_S
                if deadline is not None:
                    until = min(until, deadline)
                return sub.check(group, pick, ops, until) == CheckResult.UNSAT

            core = shrink(list(master.choice), infeasible)
        master.cut(core, group, pick)
        cuts += 1


def deletion_core(ops: list[str], infeasible: Callable[[list[str]], bool]) -> list[str]:
    """A subset of ``ops`` (infeasible by assumption) that ``infeasible`` still proves infeasible and from
    which no single op can be dropped (1-minimal): chunks of halving size are dropped while the rest stays
    infeasible (a ``ddmin``-style deletion), in the given order, so the core is the same on every run."""
    core = list(ops)
    size = max(1, len(core) // 2)
    while True:
        i = 0
        while i < len(core):
            trial = core[:i] + core[i + size:]
            if infeasible(trial):
                core = trial
            else:
                i += size
        if size == 1:
            return core
        size = max(1, size // 2)


def solve_joint_decomposed(problem: Problem, ii: int, stages: int, *, first: int | None = None,
                           min_length: int = 1, backend: str = "yices", deadline: float | None = None,
                           window_s: float | None = None, hand_off: bool = True) -> JointResult:
    """:func:`twill.solvers.joint.smt.solve_joint`'s question (the windows ``first .. stages`` at ``ii``)
    decided by :func:`benders`; a schedule found is handed to the direct solver of ``backend`` (an SMT
    backend or ``"cpsat"``) over the same windows, so the answer is the direct method's.

    ``window_s`` bounds the decomposition and the direct solve each. An ``UNSAT`` result refutes every
    window ``first .. stages``; a ``TIMEOUT`` refutes none (``length_low`` is the start of ``first``).
    Without ``hand_off`` a ``SAT`` result carries no schedule, only the verdict (the closing phase
    decides such an II again on its own).
    """
    began = time.monotonic()
    first = stages if first is None else first
    low = max(min_length, (first - 1) * ii + 1)

    def until() -> float | None:
        if window_s is None:
            return deadline
        end = time.monotonic() + window_s
        return end if deadline is None else min(deadline, end)

    found = benders(problem, ii, stages, low=low, deadline=until(),
                    backend="yices" if backend == "cpsat" else backend)
    if found.status == CheckResult.UNSAT:
        return JointResult(ii, stages, CheckResult.UNSAT, checks=found.checks,
                           wall_s=time.monotonic() - began, length_low=stages * ii + 1)
    if found.status != CheckResult.SAT or not hand_off:
        return JointResult(ii, first, found.status, checks=found.checks, wall_s=time.monotonic() - began,
                           length_low=low)
    if backend == "cpsat":
        res = solve_joint_cpsat(problem, ii, stages, first=first, min_length=min_length, deadline=until())
    else:
        res = solve_joint(problem, ii, stages, first=first, min_length=min_length, backend=backend,
                          deadline=until())
    return JointResult(res.ii, res.stages, res.status, res.start, res.group, res.budgets, res.group_warps,
                       res.length, res.proven, res.checks + found.checks, time.monotonic() - began,
                       res.build_s, res.n_terms, res.interrupted, res.length_low)
