"""The QF_LIA formula of the joint problem at one ``(II, n)``, built with pySMT (paper §4, Figs. 4-6).

Unknowns: an integer start ``start[v]`` of every op in iteration 0 and its warp group as one-hot Booleans
``wg[v]=w``.
Iteration ``i`` of ``v`` starts at ``start[v] + i*II``, which is the paper's CONSISTENCY constraint; a
copy outside ``[0, n)`` does not exist. Every "modulo II" question is asked of explicit copies: two
intervals overlap modulo II iff some shift ``k*II`` (``k`` from a small, precomputed range) makes them
overlap, and each such test is a pair of *difference constraints* ``x - y <= c``, which SMT solvers decide
very efficiently. No integer division or remainder variables are used.

What each family constrains comes from :class:`~twill.model.formulation.Formulation` (stated once for
both encodings); this module states it as SMT terms. Families (the names of :mod:`twill.verify`):
completion, dependence (with the cross-group hand-off cost),
cross_warp, capacity (with the SMEM traffic of cross-group hand-offs), blocking, issue, variable_latency,
group_shape, register_file, and the liveness families
(registers, memory) whose per-moment checks are generated lazily by :meth:`Encoder.refine`: each check says
"at the start of item A, the items present fit the capacity", and the peak of a sum of intervals is
always at some interval's start, so checking at item starts is exact.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from pysmt.typing import INT

from twill.model.exchange import handoffs
from twill.model.formulation import Formulation, LiveItem, Placement, When
from twill.model.liveness import fold, memory_intervals, register_intervals
from twill.model.problem import Problem
from twill.solvers.modular import Booking, Item, Lazy, ModularModel
from twill.solvers.smt import SmtSession

__all__ = ["PER_ROUND", "Encoder"]

PER_ROUND = 64
"""Lazy liveness checks added per overfull resource per round (the items with the largest excess)."""


class Encoder(ModularModel):
    """Builds the formula of one ``(problem, II, n)`` into an :class:`SmtSession`.

    Parameters
    ----------
    problem : Problem
        The loop in (normalized) time units.
    ii : int
        Initiation interval.
    stages : int
        The window ``(n-1) II < L <= n II``.
    session : SmtSession
        Receives the assertions.
    min_length : int
        A proven lower bound on ``L`` (the modulo ILP's least length).
    ii_hi : int, optional
        A range model (:class:`~twill.modular.ModularModel`): the II is an unknown in ``[ii, ii_hi]`` and
        the window is every ``L <= stages * II`` (all stage counts up to ``stages``), so an UNSAT answer
        refutes every II of the range for every window up to ``stages``. The one conjunct that is not
        linear in II, ``area <= budget * II`` per group, is left out (the lazy checks hold the budget).
    upto : bool
        Every window up to ``stages`` (``min_length <= L <= stages * II``) instead of the one window
        ``(stages - 1) II < L``; always so for a range model.
    numbering : bool
        State the group numbering rule (first appearance, :func:`twill.model.reductions.first_appearance`);
        off for a subproblem of :mod:`twill.solvers.joint.decompose`, whose groups are relabelled by cuts.
    """

    def __init__(self, problem: Problem, ii: int, stages: int, session: SmtSession, min_length: int,
                 ii_hi: int | None = None, upto: bool = False, numbering: bool = True) -> None:
        super().__init__(problem, ii, stages * (ii if ii_hi is None else max(ii, ii_hi)), session, ii_hi)
        self.n = stages
        self.numbering = numbering
        self.upto = upto or self.ranged
        self.min_length = min_length
        self.f = Formulation.of(problem)
        self.pool = self.f.pool
        self.vl = problem.has_vl
        m = self.m
        self.groups_of = {name: list(ws) for name, ws in self.f.groups_of}
        self.opw = {op.name: {w: m.Symbol(f"wg[{op.name}]={w}") for w in self.groups_of[op.name]}
                    for op in problem.ops}
        self.budget = [m.Symbol(f"regs[{w}]", INT) for w in range(self.pool)]
        self.quads = [m.Symbol(f"warpgroups[{w}]", INT) for w in range(self.pool)]
        self.used = [m.Symbol(f"used[{w}]") for w in range(self.pool)]
        self._same: dict[tuple[str, str], Any] = {}
        self.added: dict[tuple[str, int], Any] = {}
        self.scoped: list[Any] = []
        self.reg_total: Any = None
        self.handoff_total: Any = None
        self._footprint: tuple[Any, int, int] | None = None
        self._exchange: dict[str, tuple[Any, int, int]] | None = None

    def exchange_terms(self) -> dict[str, tuple[Any, int, int]]:
        """The tie-break goals (:mod:`twill.model.exchange`): per goal its term, granularity and a lower
        bound, asserted on the first call (the goal phase, outside any push; the formula of the earlier
        goals is left as it was).

        A Bool ``y[p, w]`` is implied by "a consumer of ``p`` sits on group ``w`` and ``p`` does not"
        (``r`` the same for register consumers, ``z[p]`` implied by each ``r[p, w]``); bounding a sum of
        them from above bounds the count of the conditions. ``barriers = sum y``, ``handoff_bytes = sum
        nbytes (z + sum r)``."""
        if self._exchange is not None:
            return self._exchange
        m = self.m
        one, zero = self.int_(1), self.int_(0)
        barriers: list[Any] = []
        moved: list[Any] = []
        sizes: list[int] = []

        def reads(producer: str, consumers: tuple[str, ...], tag: str) -> list[Any]:
            out = []
            for w in sorted({w for c in consumers for w in self.groups_of[c]}):
                y = m.Symbol(f"{tag}[{producer}]@{w}")
                home = self.opw[producer].get(w)
                for c in consumers:
                    if w in self.opw[c]:
                        here = self.opw[c][w] if home is None else m.And(self.opw[c][w], m.Not(home))
                        self.add(m.Implies(here, y))
                out.append(y)
            return out

        for h in handoffs(self.p):
            barriers += [m.Ite(y, one, zero) for y in reads(h.producer, h.consumers, "sync")]
            if h.nbytes:
                loads = reads(h.producer, h.register_consumers, "load")
                store = m.Symbol(f"store[{h.producer}]")
                for y in loads:
                    self.add(m.Implies(y, store))
                moved += [m.Ite(y, self.int_(h.nbytes), zero) for y in (store, *loads)]
                sizes.append(h.nbytes)

        def total(terms: list[Any]) -> Any:
            return m.Plus(terms) if len(terms) > 1 else (terms[0] if terms else zero)

        self._exchange = {"barriers": (total(barriers), 1, 0),
                          "handoff_bytes": (total(moved), max(1, math.gcd(*sizes)) if sizes else 1, 0)}
        return self._exchange

    # ------------------------------------------------------------------------ term helpers
    def same(self, u: str, v: str) -> Any:
        """A Bool that holds iff ``u`` and ``v`` sit on the same warp group (defined once per pair)."""
        m = self.m
        if u == v:
            return m.TRUE()
        key = (u, v) if u < v else (v, u)
        if key not in self._same:
            common = sorted(set(self.opw[u]) & set(self.opw[v]))
            if not common:
                self._same[key] = m.FALSE()
            elif len(self.opw[u]) == 1 and len(self.opw[v]) == 1:
                self._same[key] = m.TRUE()
            else:
                eq = m.Symbol(f"same[{key[0]}][{key[1]}]")
                definition = m.Iff(eq, m.Or([m.And(self.opw[u][w], self.opw[v][w]) for w in common]))
                self.add(definition)
                # A pair first met by a lazy check inside a push (joint._tighten) must keep its
                # definition after the pop, or the cached symbol would be free: re-asserted with the checks.
                self.scoped.append(definition)
                self._same[key] = eq
        return self._same[key]

    def group_of(self, op: str, values: Mapping[int, Any], default: Any) -> Any:
        """``values[w]`` for the group ``w`` of ``op`` (an if-then-else over the one-hot group)."""
        term = default
        for w in reversed(self.groups_of[op]):
            term = self.m.Ite(self.opw[op][w], values[w], term) if w in values else term
        return term

    # ------------------------------------------------------------------------ families
    def timing(self) -> None:
        """Completion: ``start + cycles <= L``; the window ``(n-1) II < L <= n II``; ``L >= min_length``
        (a range model: ``min_length <= L <= n II``)."""
        if not self.upto:
            self.completion(max(self.min_length, (self.n - 1) * self.ii + 1))
            return
        self.completion(self.min_length)
        if self.ranged:
            self.add(self.m.LE(self.length, self.ii_times(self.n)))

    def crossing(self, when: When) -> Any:
        """The Bool term of ``when`` (``None`` for always): some edge of it joins different groups."""
        if when.always:
            return None
        apart = [self.m.Not(self.same(a, b)) for a, b in when.crosses]
        if any(a.is_true() for a in apart):
            return None
        return apart[0] if len(apart) == 1 else self.m.Or(apart)

    def dependence(self) -> None:
        """``start[v] + δ II >= start[u] + d``, and the crossing delay of each
        :class:`~twill.model.formulation.Dependence` (the hand-off, the store before the load) when the
        groups differ; ``together`` and ``apart`` pairs."""
        super().dependence()
        m = self.m
        for d in self.f.dependences:
            if d.src == d.dst:
                continue
            if d.crossing is not None:
                self.add(m.Implies(m.Not(self.same(d.src, d.dst)),
                                   self.before(d.src, d.crossing, d.dst, 0, kv=d.distance)))
            if d.together:
                self.add(self.same(d.src, d.dst))
        for a, b in self.f.apart:  # a code generator's rule (Options.apart)
            self.add(m.Not(self.same(a, b)))

    def conditional(self, unit: str) -> list[Booking]:
        """The SMEM-port traffic of register hand-offs on ``unit``
        (:attr:`~twill.model.formulation.Formulation.bookings`), each when its edges cross."""
        return [Booking(b.op, b.offset, b.cycles, b.count, self.crossing(b.when))
                for b in self.f.bookings if b.unit == unit]

    def blocking(self) -> None:
        """When an op that must wait starts, no other op of its group is issuing (copies included)."""
        m = self.m
        for b in self.f.blocking:
            v = b.op
            must_wait = (m.TRUE() if b.waits.always
                         else m.Or([m.Not(self.same(a, v)) for a, _ in b.waits.crosses]))
            for o, issue in b.issuers:
                guard = m.And(must_wait, self.same(v, o))
                if issue >= self.ii_hi:  # its group issues at every moment
                    self.add(m.Not(guard))
                    continue
                clear = self.no_overlap(v, 0, 1, o, 0, issue)
                if issue >= self.ii:  # a range model whose range straddles the issue time
                    clear.append(m.GT(self.II, self.int_(issue)))
                self.add(m.Implies(guard, m.And(clear)))

    def issue_limit(self) -> None:
        """One issue stream per warp group: the ``issue_cycles`` of the ops on group ``w`` sum to at most
        II (:attr:`~twill.model.formulation.Formulation.issue`); stated only for a group whose possible
        ops could exceed it."""
        m = self.m
        for w in range(self.pool):
            load = self.f.issue_load(w)
            if sum(c for _, c in load) <= self.ii:
                continue  # holds at every II of the model (a range model's least II included)
            terms = [m.Ite(self.opw[o][w], self.int_(c), self.int_(0)) for o, c in load]
            self.add(m.LE(m.Plus(terms) if len(terms) > 1 else terms[0], self.II))

    def groups(self) -> None:
        """Warp uniqueness (one-hot), variable-latency isolation (group 0 holds exactly the
        variable-latency ops), group shape, symmetry breaking and budgets."""
        m = self.m
        compute = [op for op in self.p.ops if not op.variable_latency]
        if self.vl and self.pool < 2 and compute:
            self.feasible = False
        for op in self.p.ops:
            choice = list(self.opw[op.name].values())
            self.add(m.Or(choice))
            for i, a in enumerate(choice):
                for b in choice[i + 1:]:
                    self.add(m.Not(m.And(a, b)))
        self._symmetry()
        shapes = list(self.f.shapes)
        for w in range(self.pool):
            on_w = [(op, need, exact, self.opw[op][w]) for op, need, exact in self.f.warpgroups
                    if w in self.opw[op]]
            self.add(m.Iff(self.used[w], m.Or([here for *_, here in on_w])))
            q = self.quads[w]
            self.add(m.Or([m.Equals(q, self.int_(k)) for k in shapes]))
            for _, need, exact, here in on_w:
                rel = m.Equals(q, self.int_(need)) if exact else m.GE(q, self.int_(need))
                self.add(m.Implies(here, rel))
        self._budgets(shapes)

    def _symmetry(self) -> None:
        """Budgets and group numbering (:func:`twill.reductions.budget_arrangements`): with a register
        plan, one of its arrangements is chosen (a one-hot Boolean each); inside each block of
        interchangeable groups, groups are numbered by first appearance in op order."""
        m = self.m
        arrangements = self.f.arrangements
        picks = [m.Symbol(f"arrangement[{i}]") for i in range(len(arrangements))]
        self.picks = picks
        if len(picks) > 1:
            self.add(m.Or(picks))
            for i, a in enumerate(picks):
                for b in picks[i + 1:]:
                    self.add(m.Not(m.And(a, b)))
        for pick, arr, numbering in zip(picks, arrangements, self.f.numbering, strict=True):
            rules = []
            if arr.budgets is not None:
                rules += [m.Equals(self.budget[w], self.int_(r)) for w, r in enumerate(arr.budgets)]
            for op, w, earlier in numbering if self.numbering else ():
                if w not in self.opw[op]:
                    continue
                rules.append(m.Implies(self.opw[op][w], m.Or([self.opw[o][w - 1] for o in earlier
                                                              if w - 1 in self.opw[o]])))
            if rules:
                self.add(m.Implies(pick, m.And(rules)) if len(picks) > 1 else m.And(rules))

    def _budgets(self, shapes: list[int]) -> None:
        """Per-group setmaxnreg budgets; their sum over threads fits the register file; warps fit the CTA."""
        m, res, opts = self.m, self.p.resources, self.p.options
        per_thread = 32 * res.warps_per_group
        terms, warps = [], []
        for w in range(self.pool):
            r, q, used = self.budget[w], self.quads[w], self.used[w]
            if opts.register_plan is None:
                k = m.Symbol(f"regs8[{w}]", INT)
                self.add(m.Equals(r, self.times(res.setmaxnreg_step, k)))
                self.add(m.Implies(used, m.And(m.GE(r, self.int_(res.setmaxnreg_min)),
                                               m.LE(r, self.int_(res.setmaxnreg_max)))))
                self.add(m.Implies(m.Not(used), m.Equals(r, self.int_(0))))
            # A used group holds its overhead at every moment, even with no register value of its own
            # (the lazy register checks only look at moments where some value starts).
            self.add(m.Implies(used, m.GE(r, self.int_(res.group_overhead))))
            cost = self.times(per_thread * shapes[-1], r)
            for qv in reversed(shapes[:-1]):
                cost = m.Ite(m.Equals(q, self.int_(qv)), self.times(per_thread * qv, r), cost)
            terms.append(m.Ite(used, cost, self.int_(0)))
            warps.append(m.Ite(used, self.times(res.warps_per_group, q), self.int_(0)))
        self.reg_total = m.Plus(terms) if len(terms) > 1 else terms[0]
        cross = [m.Ite(m.Not(self.same(src, dst)), self.int_(cost), self.int_(0))
                 for src, dst, cost in self.f.handoff_costs]
        self.handoff_total = m.Plus(cross) if cross else self.int_(0)
        if "register_file" not in opts.relax:
            self.add(m.LE(self.reg_total, self.int_(res.register_file)))
        if "groups" not in opts.relax:
            self.add(m.LE(m.Plus(warps) if len(warps) > 1 else warps[0], self.int_(res.max_warps)))

    # ------------------------------------------------------------------------ liveness (lazy)
    def refine(self, start: Mapping[str, int], group: Mapping[str, int], budgets: Mapping[int, int],
               ii: int | None = None) -> int:
        """Assert the liveness checks that the model (``start``, ``group``, ``budgets``) violates.

        Occupancy is computed exactly with :mod:`twill.liveness`; for each overfull resource (per group for
        registers) the item starting where the excess is largest gets its check (one per resource per
        round keeps the formula small). Each check is implied by the full formulation, so adding it never
        removes a valid schedule, and the checks only grow toward the full model.

        ``ii`` is the model's II (a range model's unknown); by default the fixed one.

        Returns
        -------
        int
            Checks added (0 means the model satisfies every liveness constraint).
        """
        p, res = self.p, self.p.resources
        ii = self.ii if ii is None else ii
        excess: dict[str, list[int]] = {}  # occupancy above capacity per residue
        if "regs" in self.lazy:
            ivs = register_intervals(p, ii, start, group)
            limit = min(res.max_regs, res.setmaxnreg_max)
            for g in set(group.values()):
                occ = fold([iv for iv in ivs if iv.group == g], ii, res.group_overhead)
                cap = min(budgets.get(g, 0), limit)
                excess[f"regs/{g}"] = [v - cap for v in occ]
        for kind, capacity, fixed in (("smem", res.smem, p.fixed_smem), ("tmem", res.tmem, p.fixed_tmem)):
            if kind in self.lazy:
                occ = fold(memory_intervals(p, ii, start, group, kind), ii, fixed)
                excess[kind] = [v - capacity for v in occ]
        found: dict[str, list[tuple[int, str, int]]] = {}  # key -> [(excess, resource, item index)]
        for resource, lazy in self.lazy.items():
            for idx, it in enumerate(lazy.items):
                if (resource, idx) in self.added:
                    continue
                if it.crosses and all(group[a] == group[b] for a, b in it.crosses):
                    continue
                key = f"regs/{group[it.holder]}" if lazy.per_group else resource
                if key not in excess:
                    continue
                over = excess[key][(start[it.op] + it.offset + it.offset_k * ii) % ii]
                if over > 0:
                    found.setdefault(key, []).append((over, resource, idx))
        added = 0
        for candidates in found.values():
            for _, resource, idx in sorted(candidates, key=lambda c: (-c[0], c[1], c[2]))[:PER_ROUND]:
                formula = self.point(resource, self.lazy[resource].items[idx])
                self.add(formula)
                self.added[(resource, idx)] = formula
                self.scoped.append(formula)
                added += 1
        return added

    def _end(self, it: LiveItem, symbol: str) -> tuple[Any, int]:
        """The end of ``it``: ``>= start[op] + end_from`` and past each use that applies (as its
        :class:`~twill.model.formulation.Placement` says); returns it and its upper bound."""
        m = self.m
        end = m.Symbol(symbol, INT)
        top = self.hi[it.op] + it.end_from
        self.add(m.GE(end, self.at(it.op, it.end_from)))
        for u in it.uses:
            reach = m.GE(end, self.at(u.dst, u.hold, u.distance))
            top = max(top, self.hi[u.dst] + u.distance * self.ii_hi + u.hold)
            if u.placement is Placement.SAME_GROUP:
                reach = m.Implies(self.same(it.holder, u.dst), reach)
            elif u.placement is Placement.OTHER_GROUP:
                reach = m.Implies(m.Not(self.same(it.holder, u.dst)), reach)
            self.add(reach)
        self.add(m.LE(end, self.int_(top)))
        return end, top

    def _item(self, it: LiveItem, symbol: str) -> Item:
        """The SMT item of a formulation item (its end a fresh symbol named ``symbol``)."""
        cond = self.crossing(it.when)
        if it.length is not None:
            return Item(it.op, it.offset, it.weight, length=it.length, cond=cond, holder=it.holder,
                        offset_k=it.offset_k, crosses=it.when.crosses)
        end, top = self._end(it, symbol)
        return Item(it.op, it.offset, it.weight, end=end, end_hi=top, cond=cond, holder=it.holder,
                    offset_k=it.offset_k, crosses=it.when.crosses)

    def registers(self) -> None:
        """Register limit per group and moment: result values and copies received from other groups
        (:attr:`~twill.model.formulation.Formulation.register_items`)."""
        m, res = self.m, self.p.resources
        items = [self._item(it, f"end_regs[{it.op}]") for it in self.f.register_items]
        if not items:
            return
        limit = self.f.register_limit

        def cap(at: Item) -> Any:
            budget = self.group_of(at.holder, dict(enumerate(self.budget)), self.int_(0))
            return m.Ite(m.LE(budget, self.int_(limit)), budget, self.int_(limit))

        self.lazy["regs"] = Lazy(items, cap, res.group_overhead, True)
        self._accumulator_cuts(limit)

    def _held(self, w: int, accs: tuple[str, ...]) -> Any:
        """Registers per thread group ``w`` holds at every moment: its overhead and its accumulators."""
        m = self.m
        held = [m.Ite(self.opw[a][w], self.int_(self.p.op(a).regs), self.int_(0))
                for a in accs if w in self.opw[a]]
        return m.Plus([self.int_(self.p.resources.group_overhead), *held])

    def _accumulator_cuts(self, limit: int) -> None:
        """Eager implied constraints: a value carried to itself (an accumulator) is live at every moment,
        so its group's budget holds the overhead, all its accumulators and any one other value it starts.
        They repeat what the lazy checks would find, early and cheaply."""
        m, res = self.m, self.p.resources
        accs = self.f.accumulators
        for w in range(self.pool):
            if not any(w in self.opw[a] for a in accs):
                continue
            base = self._held(w, accs)
            self.add(m.Implies(self.used[w], m.And(m.LE(base, self.budget[w]), m.LE(base, self.int_(limit)))))
            for op in self.p.ops:
                if op.name in accs or w not in self.opw[op.name] or not res.tracked(op.regs):
                    continue
                load = m.Plus(base, self.int_(op.regs))
                self.add(m.Implies(self.opw[op.name][w],
                                   m.And(m.LE(load, self.budget[w]), m.LE(load, self.int_(limit)))))

    def _length(self, item: Item) -> Any:
        """The lifetime of ``item`` as a term."""
        if item.end is None:
            return self.int_(item.length)
        return self.m.Minus(item.end, self.at(item.op, item.offset, item.offset_k))

    def area_cuts(self) -> None:
        """Eager implied constraints: the occupancy of a resource peaks at least at its mean over the II,
        so ``base * II + Σ weight * lifetime <= cap * II`` (per group for registers). A cheap global view
        the point checks lack; it refutes register- or memory-bound windows early."""
        m = self.m
        for resource, lazy in self.lazy.items():
            if resource.startswith("unit/"):
                continue
            terms = []
            for it in lazy.items:
                area = self.times(it.weight, self._length(it))
                terms.append(area if it.cond is None else m.Ite(it.cond, area, self.int_(0)))
            if not lazy.per_group:
                total = m.Plus([self.ii_times(lazy.base), *terms])
                self.add(m.LE(total, self.ii_times(lazy.cap)))
                continue
            limit = min(self.p.resources.max_regs, self.p.resources.setmaxnreg_max)
            for w in range(self.pool):
                mine = [m.Ite(self.opw[it.holder][w], t, self.int_(0))
                        for it, t in zip(lazy.items, terms, strict=True) if w in self.opw[it.holder]]
                if not mine:
                    continue
                total = m.Plus([self.ii_times(lazy.base), *mine])
                within = [m.LE(total, self.ii_times(limit))]
                if not self.ranged:  # budget * II is not linear when II is an unknown
                    within.append(m.LE(total, self.times(self.ii, self.budget[w])))
                self.add(m.Implies(self.used[w], m.And(within[::-1])))

    def symmetry_of_subtiles(self) -> None:
        """If swapping two parts of the graph (sub-tiles) maps it onto itself, order the two copies:
        the first op the swap moves starts no later than its image
        (:attr:`~twill.model.formulation.Formulation.swap`)."""
        if self.f.swap is not None:
            self.add(self.before(self.f.swap[0], 0, self.f.swap[1], 0))

    def memory(self) -> None:
        """SMEM and TMEM: live values, streaming-load buffers, staging buffers of register hand-offs
        (:attr:`~twill.model.formulation.Formulation.memory_items` and ``staging``)."""
        p = self.p
        made = [(it.resource, self._item(it, f"end_{it.resource}[{it.op}]")) for it in self.f.memory_items]
        tmem = [item for kind, item in made if kind == "tmem"]
        smem = [item for kind, item in made if kind == "smem"]
        smem += [self._item(it, f"staged[{it.op}]") for it in self.f.staging]
        if smem:
            self.lazy["smem"] = Lazy(smem, p.resources.smem, p.fixed_smem, False)
        if tmem:
            self.lazy["tmem"] = Lazy(tmem, p.resources.tmem, p.fixed_tmem, False)

    def smem_footprint(self) -> tuple[Any, int, int]:
        """The SMEM the buffers allocate (:func:`twill.liveness.smem_footprint`) as a term, its
        granularity (the gcd of the buffers' bytes) and a lower bound (every buffer that always exists,
        one slot each); ``(0, 1, 0)`` without SMEM items.

        Each SMEM item gets a ring depth ``depth >= 1`` with ``depth * II >= lifetime`` (stated on the
        first call; it restricts nothing, the depth being free above); the term is the sum of
        ``bytes * depth`` over the items present, so its least value over the models with a given start
        and group assignment is the footprint of that schedule. Needs a fixed II (the goal phase)."""
        m = self.m
        lazy = self.lazy.get("smem")
        if lazy is None or not lazy.items:
            return self.int_(0), 1, 0
        if self._footprint is None:
            terms = []
            for idx, it in enumerate(lazy.items):
                depth = m.Symbol(f"smem_depth[{idx}]", INT)
                self.add(m.GE(depth, self.int_(1)))
                self.add(m.GE(self.times(self.ii, depth), self._length(it)))
                held = self.times(it.weight, depth)
                terms.append(held if it.cond is None else m.Ite(it.cond, held, self.int_(0)))
            self._footprint = (m.Plus(terms) if len(terms) > 1 else terms[0], self.f.smem_granularity(),
                               self.f.smem_least())
        return self._footprint

    def build(self) -> None:
        """Assert every eager family and define the lazy ones."""
        self.timing()
        self.groups()
        self.dependence()
        self.capacity()
        self.blocking()
        self.issue_limit()
        self.registers()
        self.memory()
        self.area_cuts()
        self.symmetry_of_subtiles()
        if not self.feasible:
            self.add(self.m.FALSE())
