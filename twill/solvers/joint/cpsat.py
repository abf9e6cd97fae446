"""The joint problem at one II on Google OR-Tools' CP-SAT solver (``solver="cpsat"``).

The same constraints as :class:`twill.solvers.joint.encoding.Encoder` (the families of :mod:`twill.verify`),
read from the same :class:`~twill.model.formulation.Formulation` and stated with CP-SAT's scheduling
constraints instead of explicit copies:

* every op has a start ``start[v] = II * stage[v] + residue[v]`` and a warp group (one-hot Booleans and an
  integer ``group[v]``); ``same(u, v)`` is one Boolean per pair, ``group[u] == group[v]``;
* completion, dependence (with the cross-group hand-off delay when ``not same``), register carriers kept on
  one group, ``apart`` pairs, group shape, setmaxnreg budgets, the register file and the CTA's warps, as
  linear constraints, each with its enforcement literals;
* a blocking wait: the waiting op's residue lies outside each same-group op's issue window, one linear
  domain ``residue[v] - residue[o] in [issue - II, -1] u [issue, II - 1]``;
* the issue limit: per group, ``Σ issue_cycles x wg[v]=w <= II`` (one issue stream);
* every modular resource (a unit's reservations and the hand-offs' SMEM traffic; each group's live
  registers; SMEM; TMEM) is one cumulative over ``[0, 3 II)``: an item held for ``q * II + rem`` cycles
  from residue ``r`` puts ``weight * q`` on the whole axis and copies of ``[r, r + rem)`` at ``r`` and
  ``r + II``; the load at ``t`` in ``[II, 2 II)`` is then the folded occupancy at ``t - II`` and elsewhere a
  part of it, so the cumulative holds exactly when the folded occupancy fits (the SMT encoding's
  point checks at every item start say the same). An item that exists only sometimes (a value handed to
  another group, a staging buffer, a register value on group ``w``) is an optional interval;
* the sub-tile swap and the group numbering of :class:`~twill.encoding.Encoder` break symmetry the same way.

The goals (:data:`twill.solvers.joint.result.GOALS`: length, groups, hand-off latency, registers, SMEM
footprint: one ring depth ``depth * II >= lifetime`` per SMEM item, as the SMT encoding's) are minimized
one after another, each fixed at its optimum before the next, every solve hinted with the previous schedule;
CP-SAT
proves each optimum with its own bound. Minimizing ``L`` over ``L <= stages * II`` decides the windows
``first .. stages`` at once: the least ``L`` lies in the first window that has a schedule.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable
from typing import Any

from twill.errors import SolverError
from twill.model.exchange import exchange, handoffs
from twill.model.formulation import Formulation, LiveItem, Placement, When
from twill.model.liveness import smem_footprint
from twill.model.problem import Problem
from twill.solvers.cpsat import CpsatRunner, load_cp_model
from twill.solvers.joint.result import GOAL_KEYS, GOALS, JointResult, goal_deadline
from twill.solvers.modular import start_windows
from twill.solvers.status import CheckResult

__all__ = ["solve_joint_cpsat"]

Lit = Any  # a CP-SAT Boolean literal, or a Python bool for a constant


class JointModel:
    """The CP-SAT model of one ``(problem, II)`` with ``L <= stages * II``."""

    def __init__(self, problem: Problem, ii: int, stages: int, low: int, numbering: bool = True) -> None:
        cp = load_cp_model("solver 'cpsat'", "yices, z3")
        self.numbering = numbering
        self.cp, self.m, self.p, self.ii = cp, cp.CpModel(), problem, ii
        self.feasible = True
        self.lmax = stages * ii
        self.lo, self.hi = start_windows(problem, ii, self.lmax)
        if any(self.lo[n] > self.hi[n] for n in self.lo) or low > self.lmax:
            self.feasible = False
            return
        m = self.m
        self.length = m.NewIntVar(low, self.lmax, "L")
        self.s = {op.name: m.NewIntVar(self.lo[op.name], self.hi[op.name], f"s[{op.name}]")
                  for op in problem.ops}
        self._residues: dict[tuple[str, int], Any] = {}
        self._same: dict[tuple[str, str], Lit] = {}
        self.f = Formulation.of(problem)
        self.pool = self.f.pool
        self.vl = problem.has_vl
        self.groups_of = {name: list(ws) for name, ws in self.f.groups_of}
        self.opw = {n: {w: m.NewBoolVar(f"wg[{n}]={w}") for w in ws} for n, ws in self.groups_of.items()}
        self.g = {n: m.NewIntVarFromDomain(cp.Domain.FromValues(ws), f"g[{n}]")
                  for n, ws in self.groups_of.items()}
        self.used = [m.NewBoolVar(f"used[{w}]") for w in range(self.pool)]
        self.budget: list[Any] = []
        self.quads: list[Any] = []
        self.reg_total: Any = 0
        self.handoff_total: Any = 0
        self.footprint: list[Any] = []  # bytes x ring depth of each SMEM item (the smem goal)
        self._exchange: dict[str, Any] | None = None  # the tie-break goals' terms (exchange_terms)
        self.n_groups = sum(self.used)
        # (intervals, demands) per modular resource; capacity per resource
        self.load: dict[str, list[tuple[Any, Any]]] = {}
        self.cap: dict[str, Any] = {}
        self.energy: dict[str, list[Any]] = {}  # weight x cycles held, per modular resource

    def exchange_terms(self) -> dict[str, Any]:
        """The tie-break goals (:mod:`twill.model.exchange`) as linear terms, stated on the first call (the
        goal phase; the formula of the earlier goals is left as it was).

        ``y[p, w]`` is at least "a consumer of ``p`` sits on group ``w`` and ``p`` does not" (``r`` the
        same for register consumers, ``z[p]`` at least each ``r[p, w]``); minimizing a sum of them makes
        each equal to its condition. ``barriers = sum y``, ``handoff_bytes = sum nbytes (z + sum r)``."""
        if self._exchange is not None:
            return self._exchange
        m = self.m
        barriers: list[Any] = []
        moved: list[Any] = []

        def reads(h_producer: str, consumers: tuple[str, ...], tag: str) -> list[Any]:
            out = []
            for w in sorted({w for c in consumers for w in self.groups_of[c]}):
                home = self.opw[h_producer].get(w, 0)
                y = m.NewBoolVar(f"{tag}[{h_producer}]@{w}")
                for c in consumers:
                    if w in self.opw[c]:
                        m.Add(y >= self.opw[c][w] - home)
                out.append(y)
            return out

        for h in handoffs(self.p):
            barriers += reads(h.producer, h.consumers, "sync")
            if h.nbytes:
                loads = reads(h.producer, h.register_consumers, "load")
                store = m.NewBoolVar(f"store[{h.producer}]")
                for y in loads:
                    m.Add(store >= y)
                moved.append(h.nbytes * (store + sum(loads)))
        self._exchange = {"barriers": sum(barriers), "handoff_bytes": sum(moved)}
        return self._exchange

    # ------------------------------------------------------------------ literals
    def disj(self, lits: list[Lit]) -> Lit:
        """A literal equal to the disjunction of ``lits`` (constants folded): not all of them false."""
        return self.neg(self.conj([self.neg(x) for x in lits]))

    def conj(self, lits: list[Lit]) -> Lit:
        """A literal equal to the conjunction of ``lits`` (constants folded)."""
        if any(x is False for x in lits):
            return False
        rest = [x for x in lits if x is not True]
        if len(rest) <= 1:
            return rest[0] if rest else True
        b = self.m.NewBoolVar("")
        self.m.AddBoolAnd(rest).OnlyEnforceIf(b)
        self.m.AddBoolOr([x.Not() for x in rest]).OnlyEnforceIf(b.Not())
        return b

    @staticmethod
    def neg(lit: Lit) -> Lit:
        """The negation of ``lit``."""
        return (not lit) if isinstance(lit, bool) else lit.Not()

    def add(self, constraint: Any, when: tuple[Lit, ...] | list[Lit] = ()) -> None:
        """Add ``constraint`` (a bounded linear expression) enforced by the conjunction ``when``."""
        self._post(lambda: self.m.Add(constraint), when)

    @staticmethod
    def _post(make: Callable[[], Any], when: tuple[Lit, ...] | list[Lit]) -> None:
        """``make()`` a constraint enforced by the conjunction ``when``; nothing if a literal of it is
        the constant False."""
        if any(x is False for x in when):
            return
        lits = [x for x in when if x is not True]
        ct = make()
        if lits:
            ct.OnlyEnforceIf(lits)

    def same(self, u: str, v: str) -> Lit:
        """``u`` and ``v`` on one warp group (as :meth:`twill.encoding.Encoder.same`)."""
        if u == v:
            return True
        key = (u, v) if u < v else (v, u)
        if key not in self._same:
            common = set(self.groups_of[u]) & set(self.groups_of[v])
            if not common:
                self._same[key] = False
            elif len(self.groups_of[u]) == 1 and len(self.groups_of[v]) == 1:
                self._same[key] = True
            else:
                b = self.m.NewBoolVar(f"same[{key[0]}][{key[1]}]")
                self.m.Add(self.g[u] == self.g[v]).OnlyEnforceIf(b)
                self.m.Add(self.g[u] != self.g[v]).OnlyEnforceIf(b.Not())
                self._same[key] = b
        return self._same[key]

    def present(self, when: When) -> Lit:
        """The literal of ``when``: True, or some edge of it joins ops on different groups."""
        if when.always:
            return True
        return self.disj([self.neg(self.same(a, b)) for a, b in when.crosses])

    def residue(self, op: str, offset: int) -> Any:
        """``(start[op] + offset) mod II`` as a variable in ``[0, II)``."""
        key = (op, offset % self.ii)
        if key not in self._residues:
            m = self.m
            r = m.NewIntVar(0, self.ii - 1, f"r[{op}+{key[1]}]")
            lo, hi = self.lo[op] + key[1], self.hi[op] + key[1]
            k = m.NewIntVar(lo // self.ii, hi // self.ii, "")
            m.Add(self.s[op] + key[1] == self.ii * k + r)
            self._residues[key] = r
        return self._residues[key]

    def apart(self, u: str, lu: int, v: str, lv: int) -> Any:
        """The values of ``start[u] - start[v]`` for which no copy of ``[start[u], +lu)`` overlaps one of
        ``[start[v], +lv)`` (``lu + lv <= II``): ``[lv, II - lu]`` modulo II, over the windows' range."""
        ii = self.ii
        least, most = self.lo[u] - self.hi[v], self.hi[u] - self.lo[v]
        spans = [[lv + k * ii, ii - lu + k * ii] for k in range((least - ii) // ii, most // ii + 2)]
        return self.cp.Domain.FromIntervals([[max(a, least), min(b, most)] for a, b in spans
                                             if max(a, least) <= min(b, most)])

    # ------------------------------------------------------------------ modular resources
    def hold(self, resource: str, op: str, offset: int, weight: int, *, length: int | None = None,
             end: Any = None, end_hi: int = 0, offset_k: int = 0, present: Lit = True) -> None:
        """``weight`` of ``resource`` held from ``start[op] + offset + offset_k * II`` for ``length`` time
        units or until ``end`` (an int variable, at most ``end_hi``), folded modulo II, when ``present``.
        ``weight`` is in the resource's own unit: a count of a machine unit, registers per thread, SMEM
        bytes or TMEM columns. Adds the item's intervals to the resource's cumulative and its area
        (``weight`` x time held) to the resource's implied area cut."""
        if present is False or weight <= 0:
            return
        m, ii = self.m, self.ii
        out = self.load.setdefault(resource, [])
        opt = None if present is True else present
        if end is None:
            energy: Any = weight * int(length or 0)
        else:
            energy = weight * (end - self.s[op] - (offset + offset_k * ii))
        if resource == "smem":
            self._ring(weight, length, end, end_hi, op, offset + offset_k * ii, opt)
        if opt is not None:
            most = int(length or 0) if end is None else max(0, end_hi - self.lo[op] - offset - offset_k * ii)
            top = weight * most
            area = m.NewIntVar(0, top, "")
            m.Add(area >= energy).OnlyEnforceIf(opt)
            energy = area
        self.energy.setdefault(resource, []).append(energy)

        def interval(start: Any, size: Any, stop: Any) -> Any:
            if opt is None:
                return m.NewIntervalVar(start, size, stop, "")
            return m.NewOptionalIntervalVar(start, size, stop, opt, "")

        if end is None:
            whole, rest = divmod(int(length or 0), ii)
            if whole:
                out.append((interval(0, 3 * ii, 3 * ii), weight * whole))
            if rest:
                r = self.residue(op, offset)
                out.append((interval(r, rest, r + rest), weight))
                out.append((interval(r + ii, rest, r + ii + rest), weight))
            return
        r = self.residue(op, offset)
        begin_lo = self.lo[op] + offset + offset_k * ii
        most = max(0, end_hi - begin_lo)
        q = m.NewIntVar(0, most // ii, "")
        rest = m.NewIntVar(0, min(ii - 1, most), "")
        m.Add(end - self.s[op] - (offset + offset_k * ii) == ii * q + rest)
        stop = m.NewIntVar(0, 2 * ii - 2, "")
        out.append((interval(r, rest, stop), weight))
        out.append((interval(r + ii, rest, stop + ii), weight))
        if most >= ii:
            out.append((interval(0, 3 * ii, 3 * ii), weight * q))

    def _ring(self, weight: int, length: int | None, end: Any, end_hi: int, op: str, offset: int,
              opt: Lit | None) -> None:
        """Add an SMEM item's ring (``weight`` bytes x ``depth`` slots, ``depth * II >= lifetime``, the
        lifetime from ``start[op] + offset``) to :attr:`footprint` (the ``smem`` goal), when ``opt``."""
        m, ii = self.m, self.ii
        if end is None:
            self.footprint.append(weight * max(1, -(-int(length or 0) // ii)) if opt is None else
                                  weight * max(1, -(-int(length or 0) // ii)) * opt)
            return
        most = max(1, -(-max(0, end_hi - self.lo[op] - offset) // ii))
        depth = m.NewIntVar(1, most, "")
        self.add(ii * depth >= end - self.s[op] - offset, [] if opt is None else [opt])
        if opt is None:
            self.footprint.append(weight * depth)
            return
        held = m.NewIntVar(0, weight * most, "")
        m.Add(held == weight * depth).OnlyEnforceIf(opt)
        m.Add(held == 0).OnlyEnforceIf(self.neg(opt))
        self.footprint.append(held)

    def end(self, it: LiveItem, name: str) -> tuple[Any, int]:
        """The end of ``it``: ``>= start[op] + end_from`` and ``>= start[dst] + hold + δ II`` for each use
        that applies (its :class:`~twill.model.formulation.Placement`); returns it and its upper bound
        (as :meth:`twill.solvers.joint.encoding.Encoder._end`)."""
        top = self.hi[it.op] + it.end_from
        for u in it.uses:
            top = max(top, self.hi[u.dst] + u.distance * self.ii + u.hold)
        end = self.m.NewIntVar(self.lo[it.op] + it.end_from, top, name)
        self.add(end >= self.s[it.op] + it.end_from)
        for u in it.uses:
            when: Lit = True
            if u.placement is Placement.SAME_GROUP:
                when = self.same(it.holder, u.dst)
            elif u.placement is Placement.OTHER_GROUP:
                when = self.neg(self.same(it.holder, u.dst))
            self.add(end >= self.s[u.dst] + u.hold + u.distance * self.ii, [when])
        return end, top

    # ------------------------------------------------------------------ families
    def build(self) -> None:
        """State every family (:meth:`twill.encoding.Encoder.build`'s, in the same order)."""
        if not self.feasible:
            return
        for op in self.p.ops:
            self.add(self.s[op.name] + op.cycles <= self.length)
        self.groups()
        self.dependence()
        self.capacity()
        self.blocking()
        self.issue_limit()
        self.registers()
        self.memory()
        if self.f.swap is not None:
            self.add(self.s[self.f.swap[0]] <= self.s[self.f.swap[1]])
        for resource, items in self.load.items():
            if items:
                self.m.AddCumulative([iv for iv, _ in items], [d for _, d in items], self.cap[resource])
            # implied: the occupancy's mean over the II is at most its peak (the SMT encoding's area cuts)
            self.m.Add(sum(self.energy[resource]) <= self.ii * self.cap[resource])

    def groups(self) -> None:
        """One group per op, group 0 for exactly the variable-latency ops, shapes, numbering, budgets."""
        m, cp, res, opts = self.m, self.cp, self.p.resources, self.p.options
        per = res.warps_per_group
        for n, choice in self.opw.items():
            m.AddExactlyOne(choice.values())
            m.Add(self.g[n] == sum(w * b for w, b in choice.items()))
        compute = [op for op in self.p.ops if not op.variable_latency]
        if self.vl and self.pool < 2 and compute:
            self.feasible = False
        arrangements = self.f.arrangements
        picks = [m.NewBoolVar(f"arrangement[{i}]") for i in range(len(arrangements))]
        m.AddExactlyOne(picks)
        self.picks = picks
        for pick, numbering in zip(picks, self.f.numbering if self.numbering else (), strict=False):
            for op, w, earlier in numbering:
                if w not in self.opw[op]:
                    continue
                prev = [self.opw[o][w - 1] for o in earlier if w - 1 in self.opw[o]]
                if prev:
                    m.AddBoolOr(prev).OnlyEnforceIf([self.opw[op][w], pick])
                else:
                    m.AddImplication(pick, self.opw[op][w].Not())
        shapes = list(self.f.shapes)
        per_thread = 32 * per
        costs, warps = [], []
        for w in range(self.pool):
            here = [((need, exact), self.opw[op][w]) for op, need, exact in self.f.warpgroups
                    if w in self.opw[op]]
            used = self.used[w]
            if here:
                m.AddBoolOr([b for _, b in here]).OnlyEnforceIf(used)
                for _, b in here:
                    m.AddImplication(b, used)
            else:
                m.Add(used == 0)
            q = m.NewIntVarFromDomain(cp.Domain.FromValues(shapes), f"warpgroups[{w}]")
            self.quads.append(q)
            for (need, exact), b in here:
                m.Add(q == need if exact else q >= need).OnlyEnforceIf(b)
            if opts.register_plan is not None:
                values = sorted({a.budgets[w] for a in arrangements})
                r = m.NewIntVarFromDomain(cp.Domain.FromValues(values), f"regs[{w}]")
                for pick, arr in zip(picks, arrangements, strict=True):
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
            self.budget.append(r)
            top = per_thread * shapes[-1] * max(res.setmaxnreg_max, *(opts.register_plan or (0,)))
            cost = m.NewIntVar(0, top, f"cost[{w}]")
            for shape in shapes:
                is_shape = m.NewBoolVar("")
                m.Add(q == shape).OnlyEnforceIf(is_shape)
                m.Add(q != shape).OnlyEnforceIf(is_shape.Not())
                m.Add(cost == per_thread * shape * r).OnlyEnforceIf([used, is_shape])
            m.Add(cost == 0).OnlyEnforceIf(used.Not())
            costs.append(cost)
            wq = m.NewIntVar(0, per * shapes[-1], "")
            m.Add(wq == per * q).OnlyEnforceIf(used)
            m.Add(wq == 0).OnlyEnforceIf(used.Not())
            warps.append(wq)
        self.reg_total = sum(costs)
        if "register_file" not in opts.relax:
            m.Add(self.reg_total <= res.register_file)
        if "groups" not in opts.relax:
            m.Add(sum(warps) <= res.max_warps)
        cross = [(cost, self.same(src, dst)) for src, dst, cost in self.f.handoff_costs]
        self.handoff_total = sum(c * (1 - s) if not isinstance(s, bool) else c * (not s) for c, s in cross)

    def dependence(self) -> None:
        """Each edge's latency (plus the hand-off delay when its ends are on different groups), the
        ``together`` and ``apart`` pairs (:attr:`~twill.model.formulation.Formulation.dependences`)."""
        ii = self.ii
        for d in self.f.dependences:
            if d.src == d.dst:
                if d.distance * ii < d.least:
                    self.feasible = False
                continue
            self.add(self.s[d.dst] + d.distance * ii >= self.s[d.src] + d.least)
            if d.crossing is not None:
                self.add(self.s[d.dst] + d.distance * ii >= self.s[d.src] + d.crossing,
                         [self.neg(self.same(d.src, d.dst))])
            if d.together:
                self._require(self.same(d.src, d.dst))
        for a, b in self.f.apart:
            self._require(self.neg(self.same(a, b)))

    def _require(self, lit: Lit) -> None:
        if lit is False:
            self.feasible = False
        elif lit is not True:
            self.m.AddBoolOr([lit])

    def capacity(self) -> None:
        """Every unit's reservations modulo II, with the SMEM traffic of the hand-offs chosen."""
        for unit, cap in self.p.resources.units.items():
            self.cap[f"unit/{unit}"] = cap
            for op in self.p.ops:
                for name, offset, cycles, count in self.p.reservations(op.name):
                    if name == unit:
                        self.hold(f"unit/{unit}", op.name, offset, count, length=cycles)
        for b in self.f.bookings:
            self.hold(f"unit/{b.unit}", b.op, b.offset, b.count, length=b.cycles,
                      present=self.present(b.when))

    def blocking(self) -> None:
        """A waiting op starts while no other op of its group issues (copies included)."""
        for b in self.f.blocking:
            v = b.op
            must_wait = self.disj([True] if b.waits.always else
                                  [self.neg(self.same(a, v)) for a, _ in b.waits.crosses])
            for o, issue in b.issuers:
                guard = [must_wait, self.same(v, o)]
                if issue >= self.ii:  # its group issues at every moment
                    self._require(self.neg(self.conj(guard)))
                    continue
                self._post(lambda v=v, o=o, issue=issue: self.m.AddLinearExpressionInDomain(
                    self.s[v] - self.s[o], self.apart(v, 1, o, issue)), guard)

    def issue_limit(self) -> None:
        """One issue stream per group: the ``issue_cycles`` of its ops sum to at most II."""
        for w in range(self.pool):
            load = self.f.issue_load(w)
            if sum(c for _, c in load) > self.ii:
                self.m.Add(sum(c * self.opw[o][w] for o, c in load) <= self.ii)

    def registers(self) -> None:
        """Live registers per group: result values and the copies received from other groups."""
        res = self.p.resources
        limit = self.f.register_limit
        items = []  # (holder, op, weight, length or None, end, end_hi, cond)
        for it in self.f.register_items:
            end, top = (None, 0) if it.length is not None else self.end(it, f"end[{it.op}]")
            items.append((it.holder, it.op, it.weight, it.length, end, top, self.present(it.when)))
        if not items:
            return
        m = self.m
        for w in range(self.pool):
            mine = [it for it in items if w in self.opw[it[0]]]
            if not mine:
                continue
            cap = m.NewIntVar(0, max(0, limit - res.group_overhead), f"regcap[{w}]")
            m.Add(cap <= self.budget[w] - res.group_overhead).OnlyEnforceIf(self.used[w])
            key = f"regs/{w}"
            self.cap[key] = cap
            for holder, op, weight, length, end, top, cond in mine:
                self.hold(key, op, 0, weight, length=length, end=end, end_hi=top,
                          present=self.conj([self.opw[holder][w], cond]))
        self._accumulator_cuts()

    def _accumulator_cuts(self) -> None:
        """Implied (:meth:`twill.encoding.Encoder._accumulator_cuts`): a value carried to itself is live at
        every moment, so its group holds all its accumulators and any one other value it starts."""
        res, m = self.p.resources, self.m
        accs = self.f.accumulators
        for w, cap in ((w, self.cap.get(f"regs/{w}")) for w in range(self.pool)):
            mine = [a for a in accs if w in self.opw[a]]
            if cap is None or not mine:
                continue
            held = sum(self.p.op(a).regs * self.opw[a][w] for a in mine)
            m.Add(held <= cap)
            for op in self.p.ops:
                if op.name not in accs and w in self.opw[op.name] and res.tracked(op.regs):
                    m.Add(held + op.regs <= cap).OnlyEnforceIf(self.opw[op.name][w])

    def memory(self) -> None:
        """SMEM and TMEM: live values, streaming-load buffers, staging buffers of register hand-offs."""
        p = self.p
        for kind, capacity, fixed in (("smem", p.resources.smem, p.fixed_smem),
                                      ("tmem", p.resources.tmem, p.fixed_tmem)):
            if kind in p.options.relax:
                continue
            self.cap[kind] = capacity - fixed
            if capacity - fixed < 0:
                self.feasible = False
            for it in self.f.memory_items:
                if it.resource == kind:
                    end, top = self.end(it, f"end[{it.op}]")
                    self.hold(kind, it.op, it.offset, it.weight, end=end, end_hi=top, offset_k=it.offset_k)
        for it in self.f.staging:
            end, top = self.end(it, f"staged[{it.op}]")
            self.hold("smem", it.op, it.offset, it.weight, end=end, end_hi=top, present=self.present(it.when))


def solve_joint_cpsat(
    problem: Problem,
    ii: int,
    stages: int,
    *,
    first: int | None = None,
    min_length: int = 1,
    deadline: float | None = None,
    window_s: float | None = None,
    optimize: bool = True,
) -> JointResult:
    """:func:`twill.joint.solve_joint` on CP-SAT: the same arguments, answer and proof.

    ``L`` is minimized over the windows ``first .. stages`` (``L <= stages * II``, ``L`` above the windows
    below ``first`` and at least ``min_length``), then each later goal with the earlier ones fixed.
    ``window_s`` bounds the whole call (all its windows); on expiry the result is ``TIMEOUT`` with
    ``length_low`` the bound CP-SAT proved, or ``SAT`` with the goals not proven (``length_low`` then the
    proven bound on ``L``, possibly in a window below the schedule's). ``ii``, ``min_length`` and the
    result's times are in the problem's (normalized) units; ``deadline`` is a ``time.monotonic()`` value.

    Raises
    ------
    SolverUnavailableError
        ``ortools`` is not installed.
    KeyboardInterrupt
        Ctrl-C while ``L`` is minimized (after the search was stopped).
    """
    began = time.monotonic()
    first = stages if first is None else first
    low = max(min_length, (first - 1) * ii + 1)
    if window_s is not None:
        end = began + window_s
        deadline = end if deadline is None else min(deadline, end)
    model = JointModel(problem, ii, stages, low)
    model.build()
    build_s = time.monotonic() - began
    size = len(model.m.Proto().constraints) if model.feasible else 0

    def result(status: CheckResult, **kw: Any) -> JointResult:
        return JointResult(ii, kw.pop("stages", stages), status, checks=runner.solves,
                           wall_s=time.monotonic() - began, build_s=build_s, n_terms=size, **kw)

    runner = CpsatRunner(model.cp)
    if not model.feasible:
        return result(CheckResult.UNSAT, length_low=stages * ii + 1)
    cp, m = model.cp, model.m
    goals: dict[str, Any] = {"length": model.length, "groups": model.n_groups,
                             "handoffs": model.handoff_total, "registers": model.reg_total,
                             "smem": sum(model.footprint)}
    m.Minimize(model.length)
    status, solver = runner.solve(m, deadline)
    if status == cp.INFEASIBLE:
        return result(CheckResult.UNSAT, length_low=stages * ii + 1)
    if status == cp.MODEL_INVALID:
        raise SolverError(f"internal error: invalid CP-SAT model ({model.m.Validate()})")
    bound = max(low, math.ceil(solver.BestObjectiveBound() - 1e-6))  # proven: no shorter L
    if status not in (cp.OPTIMAL, cp.FEASIBLE):
        window = max(first, (bound - 1) // ii + 1)
        return result(CheckResult.TIMEOUT, length_low=min(bound, stages * ii + 1),
                      stages=min(stages, window))
    best = _extract(model, solver)
    proven = {"length": status == cp.OPTIMAL}
    length_low = best["length"] if proven["length"] else min(bound, best["length"])
    interrupted = False
    if optimize and proven["length"]:
        for prev, goal in itertools.pairwise(GOALS):
            m.Add(goals[prev] == best[GOAL_KEYS[prev]])
            if goal not in goals:
                goals.update(model.exchange_terms())
            _hint(model, solver)
            m.Minimize(goals[goal])
            try:
                status, solver = runner.solve(m, goal_deadline(goal, deadline, time.monotonic()))
            except KeyboardInterrupt:  # keep the schedule found; the caller reports the interrupt
                proven[goal], interrupted = False, True
                break
            if status in (cp.OPTIMAL, cp.FEASIBLE):
                best = _extract(model, solver)
            proven[goal] = status == cp.OPTIMAL
            if not proven[goal]:
                break
    window = max(1, -(-best["length"] // ii))
    return result(CheckResult.SAT, stages=window, start=best["start"], group=best["group"],
                  budgets=best["budgets"], group_warps=best["warps"], length=best["length"], proven=proven,
                  interrupted=interrupted, length_low=length_low)


def _hint(model: JointModel, solver: Any) -> None:
    """Hint every variable of ``model`` with its value in ``solver``'s last solution (those it had)."""
    m = model.m
    m.ClearHints()
    proto = m.Proto()
    solved = len(solver.ResponseProto().solution)  # variables added since (the tie-break terms) have none
    for index in range(min(len(proto.variables), solved)):
        var = m.GetIntVarFromProtoIndex(index)
        m.AddHint(var, solver.Value(var))


def _extract(model: JointModel, solver: Any) -> dict[str, Any]:
    value: Callable[[Any], int] = solver.Value
    start = {n: value(v) for n, v in model.s.items()}
    group = {n: next(w for w, b in ws.items() if solver.BooleanValue(b)) for n, ws in model.opw.items()}
    used = sorted(set(group.values()))
    per = model.p.resources.warps_per_group
    return {
        "start": start,
        "group": group,
        "length": value(model.length),
        "budgets": {w: value(model.budget[w]) for w in used},
        "warps": {w: per * value(model.quads[w]) for w in used},
        "n_groups": len(used),
        "reg_total": value(model.reg_total),
        "handoffs": sum(e.cross for e in model.p.edges if group[e.src] != group[e.dst]),
        "smem": smem_footprint(model.p, model.ii, start, group),
        **exchange(model.p, group),
    }
