"""What the hand-offs between warp groups issue: the tie-break goals after II, L, groups, hand-off latency,
registers and shared memory (docs/model.md §5, "Tie-breaks").

Once the earlier goals are fixed, what still differs between two schedules of twill's model is where
the values cross warp groups. An op's own instructions do not: an op issues the same instructions
(``Op.issue_cycles``) on whichever group of its shape holds it, and the stage count is fixed by ``L``
and ``II``. A value read on another group costs, per iteration:

* **synchronization**: the reader group waits on an mbarrier the producer arrives on, and frees the
  slot on a second one the producer waits on (the Gluon generator's ``sready`` / ``sempty`` pair of a
  staging buffer, ``ready`` / ``empty`` of a ring): one pair per *(producer, reader group)*, however
  many ops of that group read the value (they share one load). Counted by :func:`exchange` as
  ``barriers``;
* **bytes through shared memory**, for a register value: the producer stores it once (``result_bytes``)
  if any group reads it elsewhere, and each reader group loads it once: ``handoff_bytes``. An SMEM or
  TMEM value is already shared (barriers only); an ordering edge moves no bytes.

Both joint encodings minimize ``barriers`` and then ``handoff_bytes`` as the last two goals
(:data:`twill.solvers.joint.result.TIEBREAKS`), from the :class:`Handoff` items of :func:`handoffs`,
and both read the value of a schedule from :func:`exchange`. With hand-offs relaxed
(``Options.relax`` ``"handoff"``) the model prices no hand-off, and there are no items.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from twill.model.problem import Problem

__all__ = ["Handoff", "exchange", "handoffs"]


@dataclass(frozen=True)
class Handoff:
    """A value that ops of other warp groups may read.

    Attributes
    ----------
    producer : str
        The op whose value it is.
    nbytes : int
        Bytes staged through shared memory when a register consumer reads it on another group (the
        producer's ``result_bytes``; 0 when no register edge leaves it).
    consumers : tuple of str
        Ops that read or wait for it (one edge or more from ``producer``, itself excluded), sorted.
    register_consumers : tuple of str
        Those of ``consumers`` that receive it in registers (a ``register`` edge), sorted.
    """

    producer: str
    nbytes: int
    consumers: tuple[str, ...]
    register_consumers: tuple[str, ...]


def handoffs(problem: Problem) -> tuple[Handoff, ...]:
    """The values that may cross warp groups, by producer name (canonical: the same for the same graph,
    whatever order it was built in).

    Parameters
    ----------
    problem : Problem
        The loop.

    Returns
    -------
    tuple of Handoff
        Empty with hand-offs relaxed.

    Examples
    --------
    >>> from twill.ir.graph import Graph
    >>> from twill.ir.machine import load_machine
    >>> from twill.model.problem import build_problem
    >>> g = Graph("x")
    >>> _ = g.add_op("a", "alu", busy={"alu": 2}, result_bytes=512)
    >>> _ = g.add_op("b", "alu", busy={"alu": 2})
    >>> _ = g.add_op("c", "alu", busy={"alu": 2})
    >>> _ = g.add_edge("a", "b", carrier="register"), g.add_edge("a", "c", carrier="none")
    >>> handoffs(build_problem(g, load_machine("h100")))
    (Handoff(producer='a', nbytes=512, consumers=('b', 'c'), register_consumers=('b',)),)
    """
    if "handoff" in problem.options.relax:
        return ()
    readers: dict[str, set[str]] = {}
    in_registers: dict[str, set[str]] = {}
    for e in problem.edges:
        if e.src == e.dst:
            continue
        readers.setdefault(e.src, set()).add(e.dst)
        if e.carrier == "register" and problem.op(e.src).result_bytes:
            in_registers.setdefault(e.src, set()).add(e.dst)
    return tuple(Handoff(src, problem.op(src).result_bytes if src in in_registers else 0,
                         tuple(sorted(readers[src])), tuple(sorted(in_registers.get(src, ()))))
                 for src in sorted(readers))


def exchange(problem: Problem, group: Mapping[str, int]) -> dict[str, int]:
    """The tie-break goals' values of a group assignment: ``barriers`` (mbarrier pairs, one per
    *(producer, reader group)*) and ``handoff_bytes`` (bytes stored and loaded through shared memory
    per iteration: each register value read elsewhere once stored, once loaded per reader group).

    Parameters
    ----------
    problem : Problem
        The loop.
    group : mapping of str to int
        Warp group of each op.

    Returns
    -------
    dict
        ``{"barriers": int, "handoff_bytes": int}``.

    Examples
    --------
    >>> from twill.ir.graph import Graph
    >>> from twill.ir.machine import load_machine
    >>> from twill.model.problem import build_problem
    >>> g = Graph("x")
    >>> for n in "abc":
    ...     _ = g.add_op(n, "alu", busy={"alu": 2}, result_bytes=512)
    >>> _ = g.add_edge("a", "b", carrier="register"), g.add_edge("a", "c", carrier="register")
    >>> p = build_problem(g, load_machine("h100"))
    >>> exchange(p, {"a": 0, "b": 1, "c": 1}), exchange(p, {"a": 0, "b": 1, "c": 2})
    ({'barriers': 1, 'handoff_bytes': 1024}, {'barriers': 2, 'handoff_bytes': 1536})
    """
    barriers = moved = 0
    for h in handoffs(problem):
        home = group[h.producer]
        barriers += len({group[c] for c in h.consumers} - {home})
        loads = len({group[c] for c in h.register_consumers} - {home})
        moved += h.nbytes * (loads + (1 if loads else 0))
    return {"barriers": barriers, "handoff_bytes": moved}
