"""Lower bounds on the initiation interval and the schedule length.

* ResMII (resource bound): ``max over units f of ceil(sum of f's busy cycles / cap(f))`` (with the SMEM
  traffic of hand-offs every schedule pays).
* RecMII (recurrence bound): ``max over dependence cycles C of ceil(sum d(C) / sum δ(C))``.
* Critical path: the length of one iteration with unlimited resources (δ = 0 edges only).

All functions take a :class:`~twill.problem.Problem` and work in its time units. References: Rau, "Iterative
modulo scheduling" (MICRO 1994) §2; Twill paper §3.1.

    >>> from twill.ir.machine import load_machine
    >>> from twill.ir.paper import figure1_graph
    >>> from twill.model.problem import build_problem
    >>> p = build_problem(figure1_graph(), load_machine("h100"))
    >>> res_mii(p), rec_mii(p), critical_path(p)
    (2, 1, 3)
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx

from twill.errors import GraphError
from twill.model.problem import Problem

__all__ = ["Bounds", "bounds", "critical_path", "critical_recurrence", "rec_mii", "res_mii"]


@dataclass(frozen=True)
class Bounds:
    """The lower bounds of a problem (time units of the problem).

    Attributes
    ----------
    res_mii : int
        Resource bound on II.
    rec_mii : int
        Recurrence bound on II (0 when the graph has no dependence cycle).
    mii : int
        ``max(res_mii, rec_mii, 1)``.
    binding_unit : str or None
        The unit that sets ``res_mii``.
    critical_cycle : tuple of str
        Ops of a cycle that sets ``rec_mii`` (empty if none).
    critical_path : int
        Length of one iteration with unlimited resources.
    """

    res_mii: int
    rec_mii: int
    mii: int
    binding_unit: str | None
    critical_cycle: tuple[str, ...]
    critical_path: int


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def unit_usage(problem: Problem) -> dict[str, int]:
    """Unit-cycles per iteration for every unit of the machine: the ops' reservation tables, and the SMEM
    traffic of register values that always cross warp groups (:meth:`Problem.reservations`)."""
    usage = dict.fromkeys(problem.resources.units, 0)
    for op in problem.ops:
        for unit, _, cycles, count in problem.reservations(op.name):
            usage[unit] = usage.get(unit, 0) + cycles * count
    return usage


def res_mii(problem: Problem) -> int:
    """Resource-constrained minimum II: ``max_f ceil(Σ busy(f) / cap(f))``, at least 1.

    Every unit-cycle of every op must find a slot among the ``cap(f) * II`` slots of the modulo
    reservation table, hence the bound.
    """
    caps = problem.resources.units
    best = 1
    for unit, used in unit_usage(problem).items():
        if used:
            best = max(best, _ceil_div(used, caps[unit]))
    return best


def _binding_unit(problem: Problem) -> str | None:
    caps = problem.resources.units
    usage = unit_usage(problem)
    ranked = sorted(usage, key=lambda u: (_ceil_div(usage[u], caps[u]), u), reverse=True)
    return ranked[0] if ranked and usage[ranked[0]] else None


def _digraph(problem: Problem) -> nx.MultiDiGraph:
    g = nx.MultiDiGraph()
    g.add_nodes_from(problem.names)
    for e in problem.edges:
        g.add_edge(e.src, e.dst, d=problem.least_latency(e), delta=e.distance)
    return g


def _has_positive_cycle(g: nx.MultiDiGraph, ii: int) -> bool:
    """True if some cycle has Σd - II·Σδ > 0 (then II is below the recurrence bound)."""
    h = nx.DiGraph()
    h.add_nodes_from(g.nodes)
    for u, v, data in g.edges(data=True):
        w = ii * data["delta"] - data["d"]
        if not h.has_edge(u, v) or h[u][v]["weight"] > w:
            h.add_edge(u, v, weight=w)
    return nx.negative_edge_cycle(h, weight="weight")


def rec_mii(problem: Problem) -> int:
    """Recurrence-constrained minimum II: the least II with no cycle where ``Σd > II·Σδ``.

    Found by bisection on II with a Bellman-Ford negative-cycle test on weights ``II·δ - d`` (a
    parametric shortest-path test; polynomial, unlike enumerating cycles).

    Raises
    ------
    GraphError
        A cycle has total distance 0 (no II satisfies it).
    """
    g = _digraph(problem)
    zero = nx.DiGraph([(e.src, e.dst) for e in problem.edges if e.distance == 0])
    if zero.number_of_nodes() and not nx.is_directed_acyclic_graph(zero):
        cycle = nx.find_cycle(zero)
        raise GraphError(f"dependence cycle {'->'.join(u for u, _ in cycle)}->{cycle[0][0]} has total "
                         f"distance 0", edge=cycle[0][:2])
    if not any(e.distance for e in problem.edges) or not _has_positive_cycle(g, 0):
        return 0
    lo, hi = 0, max(1, sum(problem.least_latency(e) for e in problem.edges))
    while lo + 1 < hi:
        mid = (lo + hi) // 2
        if _has_positive_cycle(g, mid):
            lo = mid
        else:
            hi = mid
    return hi


def critical_recurrence(problem: Problem) -> tuple[str, ...]:
    """Ops of a dependence cycle whose ``ceil(Σd/Σδ)`` equals RecMII (empty when RecMII is 0)."""
    target = rec_mii(problem)
    if target == 0:
        return ()
    g = _digraph(problem)
    h = nx.DiGraph()
    for u, v, data in g.edges(data=True):
        w = (target - 1) * data["delta"] - data["d"]
        if not h.has_edge(u, v) or h[u][v]["weight"] > w:
            h.add_edge(u, v, weight=w)
    # A negative self-loop is a critical cycle of one op. networkx (3.6) cannot report one itself (its
    # find_negative_cycle calls the weight function wrongly on that path), and a simple negative cycle never
    # uses a self-loop, so the loops are taken out before the search.
    for u, v, data in h.edges(data=True):
        if u == v and data["weight"] < 0:
            return (u,)
    h.remove_edges_from([(u, v) for u, v in h.edges if u == v])
    for source in h.nodes:
        try:
            cycle = nx.find_negative_cycle(h, source, weight="weight")
        except nx.NetworkXError:
            continue
        return tuple(cycle[:-1])
    return ()


def critical_path(problem: Problem) -> int:
    """Length of one iteration with unlimited resources: longest δ=0 path plus the last op's length."""
    dag = nx.DiGraph()
    dag.add_nodes_from(problem.names)
    for e in problem.edges:
        if e.distance == 0:
            d = problem.least_latency(e)
            w = max(d, dag[e.src][e.dst]["d"]) if dag.has_edge(e.src, e.dst) else d
            dag.add_edge(e.src, e.dst, d=w)
    start: dict[str, int] = {}
    for name in nx.topological_sort(dag):
        start[name] = max((start[u] + dag[u][name]["d"] for u in dag.predecessors(name)), default=0)
    return max(start[op.name] + op.cycles for op in problem.ops)


def bounds(problem: Problem) -> Bounds:
    """All lower bounds of ``problem``."""
    res, rec = res_mii(problem), rec_mii(problem)
    return Bounds(res_mii=res, rec_mii=rec, mii=max(res, rec, 1), binding_unit=_binding_unit(problem),
                  critical_cycle=critical_recurrence(problem) if rec > res else (),
                  critical_path=critical_path(problem))
