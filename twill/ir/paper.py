"""Graphs from the Twill paper, for tests, documentation and demonstrations.

    >>> g = figure1_graph()
    >>> [(e.src, e.dst, e.distance) for e in g.edges]
    [('S', 'P', 0), ('P', 'O', 0), ('O', 'O', 1)]
"""

from __future__ import annotations

from twill.ir.graph import Graph

__all__ = ["figure1_graph"]


def figure1_graph() -> Graph:
    """The paper's running example (Fig. 1): a simplified FlashAttention loop body.

    ``S = GEMM(Q, K_i)`` on the Tensor Cores, ``P = EXP(S)`` on the special function units,
    ``O = O + GEMM(P, V_i)`` on the Tensor Cores. Every op takes one cycle (Hopper ratios: a tile GEMM and
    a tile exp cost about the same, Fig. 1b); edges ``S->P`` and ``P->O`` have ``d = 1, δ = 0`` and ``O``
    carries its accumulator to itself with ``δ = 1`` (Fig. 1c; its ``d`` is not stated, 1 is taken).
    The units are named as in the bundled machines: ``tc`` and ``mufu``, each of capacity 1.

    The GEMMs are asynchronous (a wgmma issues for a few cycles of a tile's hundreds, below this graph's
    time unit), so they state ``issue_cycles=0``; the exp is issued by the warps for its whole cycle. With
    the issue limit of docs/model.md §5 (``Σ issue_cycles <= II`` per warp group) the group issues 1 unit
    per II 2, as the paper's one-group schedule needs; with every op synchronous it would issue 3.
    """
    g = Graph("figure1", source="Twill paper, Figure 1")
    for name, kind, unit in (("S", "gemm", "tc"), ("P", "exp", "mufu"), ("O", "gemm", "tc")):
        g.add_op(name, kind, busy={unit: 1}, latency=1, issue_cycles=0 if unit == "tc" else 1,
                 source=f"Figure 1, {name}")
    g.add_edge("S", "P", latency=1, source="Figure 1c")
    g.add_edge("P", "O", latency=1, source="Figure 1c")
    g.add_edge("O", "O", latency=1, distance=1, carrier="register", inplace=True, source="Figure 1c")
    return g
