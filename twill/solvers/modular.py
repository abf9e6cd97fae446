"""Modulo-scheduling constraints over integer start times, shared by the modulo and the joint solvers.

A :class:`ModularModel` holds one integer ``start[v]`` per op of iteration 0 (iteration ``i`` starts
``i*II`` later) and the length ``L``. Every "modulo II" question is asked of explicit copies: two
intervals overlap modulo II iff some shift ``k*II`` (``k`` from a small, precomputed range) makes them
overlap, and each such test is a pair of *difference constraints* ``x - y <= c``, which SMT solvers decide
very efficiently; no division or remainder variables are needed. It states completion, dependence and
unit capacity; :class:`twill.encoding.Encoder` adds warp groups, hand-offs, blocking waits and liveness.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pysmt.typing import INT

from twill.model.problem import Problem
from twill.solvers.smt import SmtSession

__all__ = ["Item", "ModularModel", "start_windows"]


def start_windows(problem: Problem, ii: int, lmax: int) -> tuple[dict[str, int], dict[str, int]]:
    """Earliest and latest start of each op implied by the dependences and ``L <= lmax`` at ``ii``.

    ``start[v] >= start[u] + d' - δ II`` (``d'`` the least latency) pushes earliest starts forward and
    latest starts back; iterated to a fixed point (at most |V| rounds; a positive cycle, II below
    RecMII, leaves an empty window: some ``lo > hi``).
    """
    lo = {op.name: 0 for op in problem.ops}
    hi = {op.name: lmax - op.cycles for op in problem.ops}
    edges = [(e.src, e.dst, problem.least_latency(e) - e.distance * ii) for e in problem.edges]
    for _ in range(len(lo) + 1):
        changed = False
        for u, v, w in edges:
            if lo[u] + w > lo[v]:
                lo[v] = lo[u] + w
                changed = True
            if hi[v] - w < hi[u]:
                hi[u] = hi[v] - w
                changed = True
        if not changed or any(lo[n] > hi[n] for n in lo):
            break
    return lo, hi


@dataclass
class Item:
    """``weight`` units of a resource held from ``start[op] + offset`` until ``end``.

    ``end`` is an INT term with bounds ``end_lo``/``end_hi`` (a value whose life depends on its uses) or
    ``None`` with a constant ``length``. ``cond`` is a Bool term when the item exists only sometimes
    (cross-group hand-offs); ``holder`` the op whose warp group holds it (per-group resources);
    ``cross`` the edge whose crossing creates it, ``crosses`` the edges any of whose crossings does (a
    staging buffer shared by a value's consumers on other groups). ``offset_k`` adds ``offset_k * II``
    to the start (a streaming load's buffer, taken ``prefetch`` iterations ahead).
    """

    op: str
    offset: int
    weight: int
    length: int = 0
    end: Any = None
    end_hi: int = 0
    cond: Any = None
    holder: str | None = None
    cross: tuple[str, str] | None = None
    offset_k: int = 0
    crosses: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Booking:
    """``count`` of a unit from ``start[op] + offset`` for ``cycles``; only when ``cond`` holds (a Bool
    term) if it is given."""

    op: str
    offset: int
    cycles: int
    count: int = 1
    cond: Any = None


@dataclass
class Lazy:
    items: list[Item]
    cap: Callable[[Item], Any] | int
    base: Any
    per_group: bool


class ModularModel:
    """Start times, length, dependences and unit capacity of one ``(problem, II)`` in an SMT session.

    Parameters
    ----------
    problem : Problem
        The loop in (normalized) time units.
    ii : int
        Initiation interval.
    lmax : int
        Largest length ``L`` allowed (every op ends by it).
    session : SmtSession
        Receives the assertions.
    ii_hi : int, optional
        With ``ii_hi > ii`` the II is an unknown ``ii <= II <= ii_hi`` (a *range* model: one UNSAT answer
        refutes every II of the range). Every constraint stays linear because the shifts ``k`` are
        constants: a term ``k * II`` replaces the constant ``k * ii``. Start windows are computed at
        ``ii_hi`` and shift ranges at ``ii`` (both the loosest over the range), so the range model
        contains every schedule of every II in it. Without ``ii_hi`` the formulas are those of one II.
    """

    def __init__(self, problem: Problem, ii: int, lmax: int, session: SmtSession,
                 ii_hi: int | None = None) -> None:
        self.p, self.ii, self.lmax, self.sess = problem, ii, lmax, session
        self.ii_hi = ii if ii_hi is None else max(ii, ii_hi)
        self.ranged = self.ii_hi > ii
        self.m = session.mgr
        self.count = 0
        m = self.m
        self.II = m.Symbol("II", INT) if self.ranged else m.Int(ii)
        self.s = {op.name: m.Symbol(f"start[{op.name}]", INT) for op in problem.ops}
        self.lo, self.hi = self._windows()
        self.feasible = all(self.lo[n] <= self.hi[n] for n in self.s)
        self.length = m.Symbol("L", INT)
        self.lazy: dict[str, Lazy] = {}
        if self.ranged:
            self.add(m.And(m.GE(self.II, m.Int(ii)), m.LE(self.II, m.Int(self.ii_hi))))

    def _windows(self) -> tuple[dict[str, int], dict[str, int]]:
        """Earliest and latest start of each op (:func:`start_windows` at ``ii_hi``, the loosest)."""
        return start_windows(self.p, self.ii_hi, self.lmax)

    # ------------------------------------------------------------------------ term helpers
    def add(self, formula: Any) -> None:
        """Assert ``formula``."""
        self.sess.add(formula)
        self.count += 1

    def int_(self, value: int) -> Any:
        return self.m.Int(int(value))

    def at(self, op: str, const: int = 0, k: int = 0) -> Any:
        """``start[op] + const + k * II`` (``k * II`` folded into the constant when II is fixed)."""
        if k and not self.ranged:
            const, k = const + k * self.ii, 0
        if not k:
            return self.s[op] if const == 0 else self.m.Plus(self.s[op], self.int_(const))
        parts = [self.s[op], self.times(k, self.II)]
        return self.m.Plus([*parts, self.int_(const)] if const else parts)

    def times(self, k: int, term: Any) -> Any:
        return self.m.Times(self.int_(k), term)

    def ii_times(self, k: int) -> Any:
        """``k * II`` as a term."""
        return self.int_(k * self.ii) if not self.ranged else self.times(k, self.II)

    def k_span(self, k: int) -> tuple[int, int]:
        """Least and largest ``k * II`` over the II range."""
        return min(k * self.ii, k * self.ii_hi), max(k * self.ii, k * self.ii_hi)

    def require_ii(self, least: int) -> None:
        """``II >= least`` (a reservation longer than II, a self-loop latency): infeasible when even the
        largest II is below it, one assertion on a range model whose range straddles it."""
        if least > self.ii_hi:
            self.feasible = False
        elif least > self.ii:
            self.add(self.m.GE(self.II, self.int_(least)))

    def same(self, u: str, v: str) -> Any:
        """Whether ``u`` and ``v`` share a warp group; without groups every op shares the one group."""
        return self.m.TRUE()

    def before(self, u: str, cu: int, v: str, cv: int, strict: bool = False, ku: int = 0, kv: int = 0) -> Any:
        """``start[u] + cu + ku II <= start[v] + cv + kv II`` (``<`` when strict); folded to a constant
        when ``u == v`` and the answer is the same for every II."""
        m = self.m
        if not self.ranged:
            cu, cv, ku, kv = cu + ku * self.ii, cv + kv * self.ii, 0, 0
        if u == v:
            gap = cv - cu - (1 if strict else 0)  # holds iff (ku - kv) * II <= gap
            low, high = self.k_span(ku - kv)
            if high <= gap or low > gap:
                return m.Bool(high <= gap)
            return m.LE(self.times(ku - kv, self.II), self.int_(gap))
        left, right = self.at(u, cu, ku), self.at(v, cv, kv)
        return m.LT(left, right) if strict else m.LE(left, right)

    def shifts(self, lo: int, hi: int) -> range:
        """The ``k`` with ``lo <= k*II <= hi`` for some II of the range (``lo``, ``hi`` bound a difference
        of times)."""
        a, b = self.ii, self.ii_hi
        k_lo = -((-lo) // (a if lo < 0 else b))
        k_hi = hi // (a if hi >= 0 else b)
        return range(k_lo, k_hi + 1)

    # ------------------------------------------------------------------------ modulo tests
    def no_overlap(self, u: str, cu: int, lu: int, v: str, cv: int, lv: int) -> list[Any]:
        """Copies of ``[s_u+cu, +lu)`` and ``[s_v+cv, +lv)`` never overlap: one disjunction per shift."""
        out = []
        # overlap under shift k: s_v+cv+kII < s_u+cu+lu  and  s_u+cu < s_v+cv+kII+lv
        lo = self.lo[u] + cu - (self.hi[v] + cv) - lv + 1
        hi = self.hi[u] + cu + lu - 1 - (self.lo[v] + cv)
        for k in self.shifts(lo, hi):
            apart = self.m.Or(self.before(u, cu + lu, v, cv, kv=k),
                              self.before(v, cv + lv, u, cu, ku=k))
            out.append(apart)
        return out

    def copies_at(self, item: Item, p_op: str, p_const: int, p_k: int = 0) -> Any:
        """Copies of ``item`` live at ``P = start[p_op] + p_const + p_k II``: ``Σ_k [S <= P + kII < E]``."""
        m = self.m
        i_lo, i_hi = self.k_span(item.offset_k)
        s_lo, s_hi = self.lo[item.op] + item.offset + i_lo, self.hi[item.op] + item.offset + i_hi
        e_hi = item.end_hi if item.end is not None else s_hi + item.length
        q_lo, q_hi = self.k_span(p_k)
        p_lo, p_hi = self.lo[p_op] + p_const + q_lo, self.hi[p_op] + p_const + q_hi
        terms = []
        for k in self.shifts(s_lo - p_hi, e_hi - 1 - p_lo):
            starts = self.before(item.op, item.offset, p_op, p_const, ku=item.offset_k, kv=p_k + k)
            if item.end is None:
                ends = self.before(p_op, p_const, item.op, item.offset + item.length, strict=True,
                                   ku=p_k + k, kv=item.offset_k)
            else:
                ends = m.LT(self.at(p_op, p_const, p_k + k), item.end)
            parts = [f for f in (starts, ends) if not f.is_true()]
            if any(f.is_false() for f in parts):
                continue
            if not parts:
                terms.append(self.int_(1))
                continue
            terms.append(m.Ite(parts[0] if len(parts) == 1 else m.And(parts), self.int_(1), self.int_(0)))
        if not terms:
            return self.int_(0)
        return terms[0] if len(terms) == 1 else m.Plus(terms)

    # ------------------------------------------------------------------------ families
    def completion(self, low: int = 1) -> None:
        """``start[v]`` in its window (:meth:`_windows`, within ``[0, lmax - cycles(v)]``),
        ``start[v] + cycles(v) <= L``, ``low <= L <= lmax``."""
        m = self.m
        self.add(m.And(m.LE(self.length, self.int_(self.lmax)), m.GE(self.length, self.int_(low))))
        for op in self.p.ops:
            s = self.s[op.name]
            self.add(m.And(m.GE(s, self.int_(self.lo[op.name])), m.LE(s, self.int_(self.hi[op.name])),
                           m.LE(self.at(op.name, op.cycles), self.length)))

    def dependence(self) -> None:
        """``start[v] + δ II >= start[u] + d`` for every edge (``d`` plus the hand-off when the edge always
        crosses warp groups, see :meth:`Problem.least_latency`)."""
        for e in self.p.edges:
            if e.src == e.dst:
                if e.distance * self.ii_hi < e.latency:
                    self.feasible = False
                elif e.distance:
                    self.require_ii(-(-e.latency // e.distance))
                continue
            self.add(self.before(e.src, self.p.least_latency(e), e.dst, 0, kv=e.distance))

    def capacity(self) -> None:
        """Unit capacity modulo II: pairwise for capacity-1 units, at every reservation start otherwise.

        A unit holds what every schedule reserves on it (:meth:`Problem.reservations`: the ops' tables and
        the SMEM traffic of forced hand-offs) and the reservations :meth:`conditional` gives (each present
        only when its condition holds)."""
        for unit, cap in self.p.resources.units.items():
            res = [Booking(op.name, offset, cycles, count) for op in self.p.ops
                   for name, offset, cycles, count in self.p.reservations(op.name) if name == unit]
            res += self.conditional(unit)
            if not res:
                continue
            if cap == 1 and all(b.count == 1 for b in res):
                self._capacity_pairwise(res)
            else:
                items = [Item(b.op, b.offset, b.count, length=b.cycles, cond=b.cond) for b in res]
                key = f"unit/{unit}"
                self.lazy[key] = Lazy(items, cap, 0, False)
                for it in items:
                    self.add(self.point(key, it))

    def conditional(self, unit: str) -> list[Booking]:
        """Reservations of ``unit`` that exist only sometimes (none here; warp-group models add the SMEM
        traffic of cross-group hand-offs)."""
        return []

    def _capacity_pairwise(self, res: list[Booking]) -> None:
        m = self.m
        for i, a in enumerate(res):
            if a.cond is None:
                self.require_ii(a.cycles)
            elif a.cycles > self.ii_hi:
                self.add(m.Not(a.cond))
            elif a.cycles > self.ii:
                self.add(m.Implies(a.cond, m.GE(self.II, self.int_(a.cycles))))
            for b in res[i + 1:]:
                apart = self.no_overlap(a.op, a.offset, a.cycles, b.op, b.offset, b.cycles)
                conds = [c for c in (a.cond, b.cond) if c is not None]
                if not conds:
                    for f in apart:
                        self.add(f)
                elif apart:
                    self.add(m.Implies(m.And(conds), m.And(apart)))
            # a reservation against its own later copies (a.cycles <= II), checked above

    def point(self, resource: str, at: Item) -> Any:
        """The capacity check of ``resource`` at the start of ``at``: the items present there fit."""
        m = self.m
        lazy = self.lazy[resource]
        terms = [lazy.base] if not isinstance(lazy.base, int) else [self.int_(lazy.base)]
        for b in lazy.items:
            present = [b.cond] if b.cond is not None else []
            if lazy.per_group and b is not at:
                present.append(self.same(b.holder, at.holder))
            weight = self.times(b.weight, self.copies_at(b, at.op, at.offset, at.offset_k))
            terms.append(m.Ite(m.And(present), weight, self.int_(0)) if present else weight)
        limit = lazy.cap(at) if callable(lazy.cap) else self.int_(lazy.cap)
        body = m.LE(m.Plus(terms), limit)
        return m.Implies(at.cond, body) if at.cond is not None else body

