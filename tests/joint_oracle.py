"""An exact joint oracle for tiny loops, written from docs/model.md apart from the solver.

:func:`oracle` returns the optimum of the joint problem (docs/model.md §5) of a :class:`twill.problem.Problem`
by exhaustive enumeration: for II from a resource bound upward, for every warp-group assignment (pool slots,
with symmetry broken only between slots that nothing tells apart), a backtracking search over start times
``[0, L)`` with the dependence windows and the modulo reservation table checked as each op is placed, and
every other family (registers, memory, budgets, register file) checked on each complete schedule. At each
II the length bound is ``max_stages * II``, so every stage count up to ``max_stages`` (and
``options.max_stages``) is covered. The goal is lexicographic: least II, least ``L``, fewest warp groups,
least total hand-off latency (``Σ cross`` over crossing edges), least register file (``Σ threads x
budget``). :func:`check` judges one given schedule by the same rules (it is used on twill's schedules).

Nothing here imports ``twill.liveness``, the encodings, ``twill.modular`` or ``twill.verify``, or calls a
:class:`Problem` helper method or an :class:`Op` property: it reads plain data fields (``ops``, ``edges``,
``streaming``, ``resources``, ``options``, ``fixed_smem``, ``fixed_tmem``, and each op's ``rrt``,
``completion``, ``async_reader``, ``view``). An op's length ``cycles`` is its ``completion`` when given,
else the end of its last reservation (0 for an op that uses no unit); it is asynchronous when
``async_reader`` says so, or, without the flag, when ``issue_cycles`` is below the end of its last
reservation (docs/model.md §1).

The rules, one per family, as this module reads docs/model.md (``s`` = start, ``g`` = pool slot):

* pool: ``len(register_plan)``, else ``max_groups``, else ``min(max_warps / warps_per_group, 6, compute ops
  + (1 if any variable-latency op))``; with variable-latency ops slot 0 holds exactly them.
* completion: ``s >= 0``, ``s + cycles <= L``; stages ``ceil(L / II) <= max_stages``.
* dependence: ``s[v] + δ II >= s[u] + delay``; ``delay = d`` on one group; across groups ``d + cross``, and
  for a register value with SMEM traffic at least ``store_offset(u) + transfer + lead(e)``.
* capacity: each unit's reservations folded modulo II fit its capacity; on unit ``smem`` each producer
  with a crossing register value adds one store ``[s + store_offset, + max transfer)``, and each crossing
  edge one load ``[s[v] - lead(e), + transfer)``.
* blocking: an op with an in-edge from another op that is ``blocking`` or crosses groups may not start
  while another op of its group issues: ``(s[v] - s[o]) mod II >= issue_cycles(o)``.
* issue: the ``issue_cycles`` of the ops on one group sum to at most II (one issue stream per group).
* group shape: ops of more than one warp on one group take the same number of warpgroups; a group takes
  that many (1 with only one-warp ops); ``Σ warps_per_group x warpgroups <= max_warps``.
* uses through views: a value's uses are its edges of the carrier, and for an edge into a view also
  the view's edges of that carrier, with the distances added (and so on through views; a view is
  entered once per path); each is judged by its own reader, as if it read the value directly.
* registers (values above ``small_regs`` only): a value lives on its producer's group from ``s`` to
  ``max(s + cycles, use ends)``, a use on the same group (or a self-edge) ending at ``s[v] + δ II`` (+ the
  consumer's cycles if it is asynchronous and the edge not in place); a consumer on
  another group that is asynchronous and not in place holds a received copy ``[s[v], s[v] + cycles(v))``.
  Folded per group over the residues, plus ``group_overhead``: the peak must be ``<= max_regs`` and
  ``<= budget``. Budget: the plan's value of the slot, or the least legal ``setmaxnreg`` value ``>=`` the
  peak. ``Σ threads x budget <= register_file`` over the used groups.
* memory: an SMEM/TMEM value from ``s`` (``s - prefetch II`` for a streaming load's SMEM) until
  ``max(s + cycles, s[v] + δ II + cycles(v))`` over its edges of that carrier; a crossing register value
  with ``result_bytes`` one staging buffer ``[s + cycles, max(s + cycles + 1, s[v] + δ II + 1))`` over its
  crossing consumers; TMEM rounded up to ``tmem_alloc_step``; plus the loop-invariant part; peak folded
  modulo II within capacity.
* apart, cross_group, variable-latency isolation as in docs/model.md §5.

Ambiguities of docs/model.md, settled by reading the code (each is a rule written here on its own):

1. "stores the value ... from the moment it is ready": ready is the *least latency of the producer's
   register edges that carry a transfer* (all of them, crossing or not), not ``op.latency``.
2. The load-slot order ("nearest the consumer the crossings that are always paid, then the smaller
   transfers") does not say how ties are broken; the code breaks them by producer *name*, then distance,
   latency and edge index, so the model itself depends on op names (relabelling can change the answer).
3. The staging buffer lasts "until the last consumer on another group starts": the code holds it one
   unit past that start and at least one unit.
4. "each consumer's registers while it reads it": only asynchronous, not-in-place consumers hold a copy,
   for their whole duration; a synchronous consumer holds none.
5. A register value's life "until its last same-group use starts" is at least ``start + cycles`` even
   with no use, and only register edges extend it (an SMEM edge does not).
6. The streaming buffer's ring depth ``R`` of §1 is not a model constraint: the model takes the buffer
   ``prefetch * II`` early with the problem's ``options.prefetch`` (the search re-solves for depth).
7. Which groups are interchangeable is not stated; here only slots with the same plan budget are (and
   slot 0 is the variable-latency one).
8. The certificate's group count is the number of used groups, the variable-latency one included.

Limits: exhaustive, so only for tiny loops (a handful of ops, II and ``max_stages * II`` of a few tens of
units); its time grows with ``(max_stages * II) ** ops`` in the worst case. ``relax`` is honoured for the
families of :data:`twill.problem.RELAXABLE` except that ``groups`` only lifts the warps-per-CTA limit and
widens the pool as docs/model.md says.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field

from twill.model.problem import Problem

__all__ = ["Answer", "OracleLimit", "check", "oracle", "pool"]


class OracleLimit(RuntimeError):
    """The enumeration visited more search nodes than ``node_limit`` allowed: the loop is undecided."""

SMEM_PORTS = "smem"
"""The unit a register hand-off's store and load occupy (docs/model.md §2)."""


@dataclass(frozen=True)
class Answer:
    """The oracle's optimum: II, L, used groups, hand-off latency, register file, and one schedule."""

    ii: int
    length: int
    groups: int
    handoff: int
    register_file: int
    start: Mapping[str, int] = field(compare=False)
    group: Mapping[str, int] = field(compare=False)
    budgets: Mapping[int, int] = field(compare=False)

    @property
    def key(self) -> tuple[int, int, int, int, int]:
        """The lexicographic goal."""
        return (self.ii, self.length, self.groups, self.handoff, self.register_file)


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def pool(problem: Problem) -> int:
    """Warp groups offered (docs/model.md §5, `Options.max_groups` and `register_plan`)."""
    opts, res = problem.options, problem.resources
    compute = sum(1 for op in problem.ops if not op.variable_latency)
    has_vl = any(op.variable_latency for op in problem.ops)
    if opts.register_plan:
        return len(opts.register_plan)
    if "groups" in opts.relax:
        return max(1, min(8, compute + has_vl))
    if opts.max_groups is not None:
        return opts.max_groups
    return max(1, min(res.max_warps // res.warps_per_group, 6, compute + has_vl))


class _Spec:
    """Static facts of the problem, independent of II and of the assignment."""

    def __init__(self, p: Problem) -> None:
        self.p = p
        self.res = p.resources
        self.opts = p.options
        self.relax = p.options.relax
        self.names = [op.name for op in p.ops]
        self.op = {op.name: op for op in p.ops}
        busy = {op.name: max((r.start + r.cycles for r in op.rrt), default=0) for op in p.ops}
        self.cyc = {op.name: busy[op.name] if op.completion is None else op.completion for op in p.ops}
        self.vl = {op.name: bool(op.variable_latency) for op in p.ops}
        self.has_vl = any(self.vl.values())
        per = max(1, self.res.warps_per_group)
        self.per = per
        self.shape = {op.name: (_ceil(op.warps, per) if op.warps > 1 else None) for op in p.ops}
        self.is_async = {op.name: (op.issue_cycles < busy[op.name] if op.async_reader is None
                                   else op.async_reader) for op in p.ops}
        self.edges = list(p.edges)
        self.pool = pool(p)
        self.handoff = "handoff" not in self.relax
        self.ports = SMEM_PORTS in self.res.units
        # store offset: the least latency of the producer's transfer-carrying edges to other ops
        self.store_off = {}
        for n in self.names:
            lats = [e.latency for e in self.edges if e.src == n and e.transfer and e.dst != n]
            self.store_off[n] = min(lats) if lats else 0
        # load slots, nearest the consumer first: always-paid crossings, then smaller transfers, then the
        # code's name/distance/latency/index tie-break (ambiguity 2)
        self.lead: dict[int, int] = {}
        for v in self.names:
            ins = [e for e in self.edges if e.dst == v and e.transfer and e.src != e.dst]
            ins.sort(key=lambda f: (not self.always_cross(f.src, f.dst), f.transfer, f.src, f.distance,
                                    f.latency, f.index))
            acc = 0
            for f in ins:
                acc += f.transfer
                self.lead[f.index] = acc
        self.issuers = [n for n in self.names if self.op[n].issue_cycles > 0]

    def reads(self, u: str, carrier: str) -> list[tuple[object, int]]:
        """``(edge, distance)`` of every use of ``u``'s value in ``carrier``, through views."""
        out: list[tuple[object, int]] = []

        def rec(src: str, dist: int, seen: frozenset) -> None:
            for e in self.edges:
                if e.src == src and e.carrier == carrier:
                    out.append((e, dist + e.distance))
                    if self.op[e.dst].view and e.dst not in seen:
                        rec(e.dst, dist + e.distance, seen | {e.dst})

        rec(u, 0, frozenset([u]))
        return out

    def always_cross(self, a: str, b: str) -> bool:
        if self.vl[a] != self.vl[b]:
            return True
        sa, sb = self.shape[a], self.shape[b]
        return sa is not None and sb is not None and sa != sb

    def budget_class(self, slot: int) -> object:
        if self.has_vl and slot == 0:
            return "vl"
        plan = self.opts.register_plan
        return plan[slot] if plan else None


class _Assign:
    """Facts of one group assignment (slot per op) at one II."""

    def __init__(self, spec: _Spec, group: Mapping[str, int], ii: int, relaxed: bool = False) -> None:
        self.spec, self.group, self.ii, self.relaxed = spec, dict(group), ii, relaxed
        s = spec
        if relaxed:  # the modulo relaxation: only the crossings every assignment has
            cross = {e.index: e.src != e.dst and s.always_cross(e.src, e.dst) for e in s.edges}
        else:
            cross = {e.index: e.src != e.dst and group[e.src] != group[e.dst] for e in s.edges}
        self.cross = cross
        self.delay = {}
        for e in s.edges:
            d = e.latency
            if cross[e.index] and s.handoff:
                d = e.latency + e.cross
                if e.transfer and not relaxed:  # the lead is a lower bound only with every crossing known
                    d = max(d, s.store_off[e.src] + e.transfer + s.lead[e.index])
            self.delay[e.index] = d
        # reservation rows per op: (unit, offset, cycles, count)
        rows = {n: [(r.unit, r.start, r.cycles, r.count) for r in s.op[n].rrt] for n in s.names}
        if s.handoff and s.ports:
            store: dict[str, int] = {}
            for e in s.edges:
                if cross[e.index] and e.transfer:
                    store[e.src] = max(store.get(e.src, 0), e.transfer)
                    rows[e.dst].append((SMEM_PORTS, -s.lead[e.index], e.transfer, 1))
            for n, t in store.items():
                rows[n].append((SMEM_PORTS, s.store_off[n], t, 1))
        self.rows = rows
        # blocking pairs: v waits, o issues on v's group
        self.block: list[tuple[str, str, int]] = []
        if "blocking" not in s.relax and not relaxed:
            for v in s.names:
                waits = any(e.dst == v and e.src != v and (e.blocking or cross[e.index]) for e in s.edges)
                if not waits:
                    continue
                for o in s.issuers:
                    if o != v and group[o] == group[v]:
                        self.block.append((v, o, s.op[o].issue_cycles))
        self.used = sorted(set(group.values()))
        # ops whose placement can raise a register or memory lifetime (the partial checks run after them)
        self.footprint = {n: bool(s.op[n].regs > s.res.small_regs or s.op[n].smem or s.op[n].tmem
                                  or s.op[n].result_bytes
                                  or any(e.dst == n and e.carrier != "none" for e in s.edges))
                          for n in s.names}
        self.handoff_total = sum(e.cross for e in s.edges if e.cross and cross[e.index])
        self.quads = {}
        for w in self.used:
            shapes = {s.shape[n] for n in s.names if group[n] == w and s.shape[n] is not None}
            self.quads[w] = max(shapes) if shapes else 1

    # ------------------------------------------------------------------ static (assignment-level) checks
    def static_violations(self) -> list[str]:
        s, g, out = self.spec, self.group, []
        for n in s.names:
            if s.has_vl and (g[n] == 0) != s.vl[n]:
                out.append(f"variable_latency: {n} on slot {g[n]}")
            if not 0 <= g[n] < s.pool:
                out.append(f"pool: {n} on slot {g[n]} of {s.pool}")
        for a, b in s.opts.apart:
            if g[a] == g[b]:
                out.append(f"apart: {a} and {b} share group {g[a]}")
        if not s.opts.cross_group:
            for e in s.edges:
                if e.carrier == "register" and self.cross[e.index]:
                    out.append(f"cross_warp: {e.src}->{e.dst}")
        for w in self.used:
            shapes = {s.shape[n] for n in s.names if g[n] == w and s.shape[n] is not None}
            if len(shapes) > 1:
                out.append(f"group_shape: group {w} mixes {sorted(shapes)} warpgroups")
        for w in self.used:  # one issue stream per group: what its ops issue fits in one II
            issued = sum(s.op[n].issue_cycles for n in s.names if g[n] == w)
            if issued > self.ii:
                out.append(f"issue: group {w} issues for {issued} > II {self.ii}")
        if "groups" not in s.relax:
            warps = sum(s.per * self.quads[w] for w in self.used)
            if warps > s.res.max_warps:
                out.append(f"group_shape: {warps} warps > {s.res.max_warps}")
        # every tracked value is live on its group at its start (and a received copy on the consumer's
        # group at the consumer's start), beside the overhead: a lower bound on each group's budget
        res, plan = s.res, s.opts.register_plan
        least = {w: res.group_overhead for w in self.used}
        for u in s.names:
            if s.op[u].regs <= res.small_regs:
                continue
            least[g[u]] = max(least[g[u]], res.group_overhead + s.op[u].regs)
            for e in s.edges:
                if (e.src == u and e.carrier == "register" and self.cross[e.index] and not e.inplace
                        and s.is_async[e.dst]):
                    least[g[e.dst]] = max(least[g[e.dst]], res.group_overhead + s.op[u].regs)
        step = res.setmaxnreg_step or 1
        budget = {}
        for w in self.used:
            if "registers" not in s.relax and (least[w] > res.max_regs or (plan and least[w] > plan[w])):
                out.append(f"registers: group {w} needs at least {least[w]}")
            budget[w] = plan[w] if plan else max(res.setmaxnreg_min, _ceil(least[w], step) * step)
        if "register_file" not in s.relax:
            total = sum(self.threads(w) * budget[w] for w in self.used)
            if total > res.register_file:
                out.append(f"register_file: budgets need at least {total} > {res.register_file}")
        return out

    def threads(self, w: int) -> int:
        return 32 * self.spec.per * self.quads[w]

    # ------------------------------------------------------------------ complete-schedule checks
    def leaf(self, start: Mapping[str, int]) -> tuple[list[str], int, dict[int, int]]:
        """Registers, budgets, register file and memory of a schedule: (violations, register file used,
        budget per slot). With some ops unplaced (``start`` partial) every lifetime and budget is a lower
        bound of its value in any completion (lives only grow as consumers are placed), so a violation
        then holds for every completion: the search prunes on it."""
        s, g, ii, res = self.spec, self.group, self.ii, self.spec.res
        out: list[str] = []
        if self.relaxed:
            return out, 0, {}
        placed = start.keys()
        # registers: (group, start, end, weight)
        regs: dict[int, list[tuple[int, int, int]]] = {w: [] for w in self.used}
        for u in s.names:
            op = s.op[u]
            if op.regs <= res.small_regs or u not in placed:
                continue
            end = start[u] + s.cyc[u]
            for e, dist in s.reads(u, "register"):
                if e.dst not in placed:
                    continue
                hold = 0 if e.inplace or not s.is_async[e.dst] else s.cyc[e.dst]
                if g[e.dst] == g[u] or e.dst == u:
                    end = max(end, start[e.dst] + dist * ii + hold)
                elif hold:
                    regs[g[e.dst]].append((start[e.dst], start[e.dst] + hold, op.regs))
            regs[g[u]].append((start[u], end, op.regs))
        budgets: dict[int, int] = {}
        plan = s.opts.register_plan
        for w in self.used:
            if not any(g[n] == w for n in placed):
                continue
            peak = max(_fold(regs[w], ii, res.group_overhead))
            if plan:
                budget = plan[w]
            else:
                step = res.setmaxnreg_step or 1
                budget = max(res.setmaxnreg_min, _ceil(peak, step) * step)
            if "registers" not in s.relax:
                if peak > res.max_regs:
                    out.append(f"registers: group {w} peak {peak} > limit {res.max_regs}")
                if plan and peak > budget:
                    out.append(f"registers: group {w} peak {peak} > plan budget {budget}")
                if not plan and budget > res.setmaxnreg_max:
                    out.append(f"registers: group {w} peak {peak} needs budget {budget} > "
                               f"{res.setmaxnreg_max}")
            budget = min(budget, res.setmaxnreg_max) if not plan else budget
            budgets[w] = budget
        regfile = sum(self.threads(w) * budgets[w] for w in budgets)
        if "register_file" not in s.relax and regfile > res.register_file:
            out.append(f"register_file: {regfile} > {res.register_file}")
        # memory
        for kind, cap, fixed in (("smem", res.smem, s.p.fixed_smem), ("tmem", res.tmem, s.p.fixed_tmem)):
            if kind in s.relax:
                continue
            items = []
            for u in s.names:
                need = getattr(s.op[u], kind)
                if not need or u not in placed:
                    continue
                if kind == "tmem" and res.tmem_alloc_step:
                    need = _ceil(need, res.tmem_alloc_step) * res.tmem_alloc_step
                end = start[u] + s.cyc[u]
                for e, dist in s.reads(u, kind):
                    if e.dst in placed:
                        end = max(end, start[e.dst] + dist * ii + s.cyc[e.dst])
                early = s.opts.prefetch * ii if kind == "smem" and u in s.p.streaming else 0
                items.append((start[u] - early, end, need))
            if kind == "smem":
                staged: dict[str, int] = {}
                for e in s.edges:
                    if (e.carrier != "register" or not self.cross[e.index] or not s.op[e.src].result_bytes
                            or e.src not in placed or e.dst not in placed):
                        continue
                    ready = start[e.src] + s.cyc[e.src]
                    staged[e.src] = max(staged.get(e.src, ready + 1), start[e.dst] + e.distance * ii + 1)
                for u, end in staged.items():
                    items.append((start[u] + s.cyc[u], end, s.op[u].result_bytes))
            if not items and not fixed:
                continue
            peak = max(_fold(items, ii, fixed))
            if peak > cap:
                out.append(f"memory: {kind} peak {peak} > {cap}")
        return out, regfile, budgets


class _Feasible(Exception):
    """The modulo relaxation has a schedule (its search stops at the first)."""


def _fold(items: list[tuple[int, int, int]], ii: int, base: int) -> list[int]:
    occ = [base] * ii
    for a, b, w in items:
        length = b - a
        if length <= 0:
            continue
        full, rest = divmod(length, ii)
        if full:
            for r in range(ii):
                occ[r] += full * w
        for t in range(a, a + rest):
            occ[t % ii] += w
    return occ


def _order(spec: _Spec) -> list[str]:
    """The order ops are placed in (any order is exact; a good one prunes early): the most connected op
    first, then repeatedly the op with the most edges to those placed (ties: more reserved cycles, graph
    order)."""
    left = list(spec.names)
    links = {n: [e for e in spec.edges if e.src != e.dst and n in (e.src, e.dst)] for n in left}
    weight = {n: sum(r.cycles * r.count for r in spec.op[n].rrt) for n in left}
    out: list[str] = []
    while left:
        def score(n: str) -> tuple[int, int, int, int]:
            near = sum(1 for e in links[n] if (e.dst if e.src == n else e.src) in out)
            return (-near, -len(links[n]), -weight[n], spec.names.index(n))
        pick = min(left, key=score)
        out.append(pick)
        left.remove(pick)
    return out


def _assignments(spec: _Spec):
    """Every slot assignment, up to relabelling of slots nothing tells apart (same plan budget)."""
    first = 1 if spec.has_vl else 0
    names = spec.names

    def rec(i: int, cur: dict[str, int]):
        if i == len(names):
            yield dict(cur)
            return
        n = names[i]
        if spec.has_vl and spec.vl[n]:
            choices = [0]
        else:
            used = set(cur.values())
            choices = []
            opened: set[object] = set()
            for w in range(first, spec.pool):
                if w in used:
                    choices.append(w)
                    continue
                cls = spec.budget_class(w)
                if cls in opened:
                    continue  # a lower unused slot of the same class is offered instead
                opened.add(cls)
                choices.append(w)
        for w in choices:
            cur[n] = w
            yield from rec(i + 1, cur)
            del cur[n]

    if spec.has_vl and any(not spec.vl[n] for n in names) and spec.pool < 2:
        return
    yield from rec(0, {})


class _Search:
    """Branch and bound over the start times of one assignment at one II, updating a shared best.

    ``best[0]`` is the best key ``(L, groups, handoff, regfile)`` found so far and ``best[1]`` its
    ``(start, group, budgets)``; ``budget[0]`` the search nodes left.
    """

    def __init__(self, spec: _Spec, a: _Assign, order: list[str], limit: int, best: list,
                 budget: list) -> None:
        self.spec, self.a, self.order, self.limit = spec, a, order, limit
        self.best, self.budget = best, budget
        self.ii = a.ii
        self.units = spec.res.units
        self.head = (len(a.used), a.handoff_total)
        self.mrt = {u: [0] * a.ii for u in self.units}
        self.start: dict[str, int] = {}
        self.stack: list = []
        self.edges_of = {n: [e for e in spec.edges if e.src != e.dst and n in (e.src, e.dst)]
                         for n in spec.names}
        self.block_of = {n: [(v, o, c) for v, o, c in a.block if n in (v, o)] for n in spec.names}

    def bound(self) -> int:
        """Largest L still worth finding: the best's, or one less if this assignment's group count and
        hand-off latency are worse than the best's."""
        if self.best[0] is None:
            return self.limit
        length, groups, handoff, _ = self.best[0]
        return length - 1 if self.head > (groups, handoff) else length

    def place(self, n: str, t: int) -> bool:
        added = []
        for unit, off, cyc, cnt in self.a.rows[n]:
            col = self.mrt[unit]
            for c in range(off, off + cyc):
                r = (t + c) % self.ii
                col[r] += cnt
                added.append((col, r, cnt))
                if col[r] > self.units[unit]:
                    for col2, r2, cnt2 in added:
                        col2[r2] -= cnt2
                    return False
        self.stack.append(added)
        return True

    def unplace(self) -> None:
        for col, r, cnt in self.stack.pop():
            col[r] -= cnt

    def blocking_ok(self, n: str, t: int) -> bool:
        start = self.start
        for v, o, c in self.block_of[n]:
            other = o if v == n else v
            if other in start:
                sv = t if v == n else start[v]
                so = t if o == n else start[o]
                if (sv - so) % self.ii < c:
                    return False
        return True

    def leaf(self) -> None:
        spec, a, start, best = self.spec, self.a, self.start, self.best
        if min(start.values()) != 0:
            return  # shifting every start down gives a shorter schedule
        length = max(start[n] + spec.cyc[n] for n in spec.names)
        if length > self.bound():
            return
        bad, regfile, budgets = a.leaf(start)
        if bad:
            return
        key = (length, self.head[0], self.head[1], regfile)
        if best[0] is None or key < best[0]:
            best[0] = key
            best[1] = (dict(start), dict(a.group), budgets)
        if a.relaxed:
            raise _Feasible

    def run(self, i: int = 0) -> None:
        self.budget[0] -= 1
        if self.budget[0] < 0:
            raise OracleLimit("node limit reached")
        if i == len(self.order):
            self.leaf()
            return
        spec, a, start, ii = self.spec, self.a, self.start, self.ii
        n = self.order[i]
        lo, hi = 0, self.bound() - spec.cyc[n]
        for e in self.edges_of[n]:
            d = a.delay[e.index]
            if e.dst == n and e.src in start:
                lo = max(lo, start[e.src] + d - e.distance * ii)
            elif e.src == n and e.dst in start:
                hi = min(hi, start[e.dst] + e.distance * ii - d)
        for t in range(lo, hi + 1):
            if t > self.bound() - spec.cyc[n]:
                break
            if not self.blocking_ok(n, t) or not self.place(n, t):
                continue
            start[n] = t
            if not (i + 1 < len(self.order) and a.footprint[n] and a.leaf(start)[0]):
                self.run(i + 1)
            del start[n]
            self.unplace()


def _search_ii(spec: _Spec, ii: int, stages: int, order: list[str], assigns: list[_Assign],
               best: list, budget: list) -> None:
    """Branch and bound over start times for every assignment at ``ii`` (see :class:`_Search`)."""
    for e in spec.edges:  # self-edges never cross
        if e.src == e.dst and e.distance * ii < e.latency:
            return
    for a in assigns:
        # an op whose own value already overflows a register or memory bound does so at any start (the
        # folded occupancy is the same for every shift): the assignment has no schedule at this II
        if any(a.leaf({n: 0})[0] for n in spec.names if a.footprint[n]):
            continue
        _Search(spec, a, order, stages * ii, best, budget).run()


def res_mii(problem: Problem) -> int:
    """A resource lower bound on II: each unit's reservation-table cycles over its capacity, with the
    SMEM-port store and load of every register value that crosses groups in every schedule (between a
    variable-latency op and a fixed-latency one, or ops of different warpgroup counts)."""
    spec = _Spec(problem)
    busy = {u: sum(r.cycles * r.count for op in problem.ops for r in op.rrt if r.unit == u)
            for u in problem.resources.units}
    if spec.handoff and spec.ports:
        stores: dict[str, int] = {}
        for e in spec.edges:
            if e.transfer and e.src != e.dst and spec.always_cross(e.src, e.dst):
                busy[SMEM_PORTS] += e.transfer
                stores[e.src] = max(stores.get(e.src, 0), e.transfer)
        busy[SMEM_PORTS] += sum(stores.values())
    return max([1] + [_ceil(b, problem.resources.units[u]) for u, b in busy.items()])


def _recurrences_fit(spec: _Spec, ii: int) -> bool:
    """False if some dependence cycle needs more than its distance allows at ``ii``, with each edge's
    least delay (``d``, plus ``cross`` where the crossing is forced): no longest path may grow forever."""
    names = spec.names
    dist = {n: 0 for n in names}
    arcs = []
    for e in spec.edges:
        d = e.latency
        if spec.handoff and e.src != e.dst and spec.always_cross(e.src, e.dst):
            d += e.cross
        arcs.append((e.src, e.dst, d - e.distance * ii))
    for _ in range(len(names) + 1):
        changed = False
        for a, b, w in arcs:
            if dist[a] + w > dist[b]:
                dist[b] = dist[a] + w
                changed = True
        if not changed:
            return True
    return False


def _plan_variants(problem: Problem) -> list[Problem]:
    """A register plan is a multiset of budgets (docs/model.md §6, "Reductions"): any group may take any
    of them. The compute slots are already interchangeable within equal budgets here, so the only choice
    left is the variable-latency slot's budget: one problem per distinct value, slot 0 taking it."""
    plan = problem.options.register_plan
    has_vl = any(op.variable_latency for op in problem.ops)
    if not plan or not has_vl or len(set(plan)) == 1:
        return [problem]
    out = []
    for value in sorted(set(plan)):
        rest = list(plan)
        rest.remove(value)
        opts = dataclasses.replace(problem.options, register_plan=(value, *sorted(rest)))
        out.append(dataclasses.replace(problem, options=opts))
    return out


def oracle(problem: Problem, *, max_ii: int, max_stages: int, min_ii: int | None = None,
           node_limit: int | None = None) -> Answer | None:
    """:func:`oracle_positional` over every arrangement of the register plan (:func:`_plan_variants`):
    the best answer of any."""
    best = None
    for variant in _plan_variants(problem):
        ans = oracle_positional(variant, max_ii=max_ii, max_stages=max_stages, min_ii=min_ii,
                                node_limit=node_limit)
        if ans is not None and (best is None or lex(ans.ii, ans.length, ans.groups)
                                < lex(best.ii, best.length, best.groups)):
            best = ans
    return best


def oracle_positional(problem: Problem, *, max_ii: int, max_stages: int, min_ii: int | None = None,
                      node_limit: int | None = None) -> Answer | None:
    """The least ``(II, L, groups, hand-off, register file)`` over schedules with ``II <= max_ii`` and at
    most ``max_stages`` stages (and ``options.max_stages``), or None if there is none.

    Parameters
    ----------
    problem : Problem
        The loop in (normalized) time units.
    max_ii : int
        Largest II tried.
    max_stages : int
        Stage bound of the enumeration: ``L <= max_stages * II``.
    min_ii : int, optional
        First II tried (default: a resource bound computed here).
    node_limit : int, optional
        Search nodes allowed over all IIs; :class:`OracleLimit` beyond (``None``: no limit).

    A register plan with an illegal budget, or whose budgets over one warpgroup each overflow the register
    file, is bad input (docs/model.md §2; ``Options.register_plan``): None.
    """
    res, plan = problem.resources, problem.options.register_plan
    step = res.setmaxnreg_step or 1
    if plan and (any(not (res.setmaxnreg_min <= b <= res.setmaxnreg_max and b % step == 0) for b in plan)
                 or ("register_file" not in problem.options.relax
                     and sum(32 * res.warps_per_group * b for b in plan) > res.register_file)):
        return None
    budget = [node_limit if node_limit is not None else float("inf")]
    spec = _Spec(problem)
    stages = max_stages if problem.options.max_stages is None else min(max_stages, problem.options.max_stages)
    order = _order(spec)
    raw = list(_assignments(spec))
    first = res_mii(problem) if min_ii is None else min_ii
    for ii in range(first, max_ii + 1):
        if not _recurrences_fit(spec, ii):
            continue
        relaxed = [None, None]
        with contextlib.suppress(_Feasible):
            _search_ii(spec, ii, stages, order, [_Assign(spec, {n: 0 for n in spec.names}, ii, relaxed=True)],
                       relaxed, budget)
        if relaxed[0] is None:  # not even the modulo relaxation has a schedule at this II
            continue
        assigns = [a for a in (_Assign(spec, g, ii) for g in raw) if not a.static_violations()]
        assigns.sort(key=lambda a: (len(a.used), a.handoff_total))
        best: list = [None, None]
        _search_ii(spec, ii, stages, order, assigns, best, budget)
        if best[0] is not None:
            length, groups, handoff, regfile = best[0]
            start, group, budgets = best[1]
            return Answer(ii, length, groups, handoff, regfile, start, group, budgets)
    return None


def check(problem: Problem, ii: int, length: int, start: Mapping[str, int],
          group: Mapping[str, int]) -> list[str]:
    """:func:`check_positional` under each arrangement of the register plan: valid if one passes (the
    violations of the first arrangement otherwise)."""
    first: list[str] | None = None
    for variant in _plan_variants(problem):
        bad = check_positional(variant, ii, length, start, group)
        if not bad:
            return []
        first = bad if first is None else first
    return first or []


def check_positional(problem: Problem, ii: int, length: int, start: Mapping[str, int],
                     group: Mapping[str, int]) -> list[str]:
    """Violations of one schedule under this module's rules (an empty list: it is valid).

    ``group`` may number groups in any way: every injective map of its groups onto pool slots (the
    variable-latency group onto slot 0) is tried, and the schedule is valid if one passes (a register
    plan's budgets belong to slots). The violations of the map with the fewest are returned.
    """
    spec = _Spec(problem)
    out: list[str] = []
    if ii < 1:
        return [f"II {ii} < 1"]
    for n in spec.names:
        if start[n] < 0:
            out.append(f"completion: {n} starts at {start[n]}")
        if start[n] + spec.cyc[n] > length:
            out.append(f"completion: {n} ends after L {length}")
    limit = problem.options.max_stages
    if limit is not None and _ceil(length, ii) > limit:
        out.append(f"stages: {_ceil(length, ii)} > {limit}")
    labels = sorted(set(group.values()))
    best: list[str] | None = None
    first = 1 if spec.has_vl else 0
    for perm in itertools.permutations(range(spec.pool), len(labels)):
        slot = dict(zip(labels, perm, strict=True))
        mapped = {n: slot[group[n]] for n in spec.names}
        if spec.has_vl and any((mapped[n] == 0) != spec.vl[n] for n in spec.names):
            if best is None:
                best = ["variable_latency: no slot map puts exactly the variable-latency ops on slot 0"]
            continue
        if any(mapped[n] < first and not spec.vl[n] for n in spec.names):
            continue
        a = _Assign(spec, mapped, ii)
        bad = a.static_violations() + _timing(spec, a, start)
        if not bad:
            bad = a.leaf(start)[0]
        if best is None or len(bad) < len(best) or best[0].startswith("variable_latency: no slot"):
            best = bad
        if not bad:
            break
    return out + (best if best is not None else [f"pool: {len(labels)} groups > pool {spec.pool}"])


def _timing(spec: _Spec, a: _Assign, start: Mapping[str, int]) -> list[str]:
    ii, out = a.ii, []
    for e in spec.edges:
        if start[e.dst] + e.distance * ii < start[e.src] + a.delay[e.index]:
            out.append(f"dependence: {e.src}->{e.dst} (δ={e.distance}) needs {a.delay[e.index]}")
    for unit, cap in spec.res.units.items():
        col = [0] * ii
        for n in spec.names:
            for u, off, cyc, cnt in a.rows[n]:
                if u == unit:
                    for c in range(off, off + cyc):
                        col[(start[n] + c) % ii] += cnt
        if max(col) > cap:
            out.append(f"capacity: {unit} needs {max(col)} > {cap}")
    for v, o, c in a.block:
        if (start[v] - start[o]) % ii < c:
            out.append(f"blocking: {v} starts while {o} issues")
    return out


def lex(ii: int, length: int, groups: int) -> tuple[int, int, int]:
    """The first three goals, for comparisons."""
    return (ii, length, groups)


__all__ += ["lex", "res_mii"]
