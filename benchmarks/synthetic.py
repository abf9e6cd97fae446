"""Synthetic loop bodies for the solver benchmarks: random DAGs with loop-carried edges, Hopper unit mixes.

:func:`synthetic_graph` builds a loop of ``n`` tile ops for the ``h100`` machine from a fixed seed, so
the same call gives the same graph on every machine and every run (``random.Random(seed)``, insertion
order fixed, no dependence on the cost model module: the op templates below are the Hopper cycle counts
of ``machines/h100.toml`` for a 64 x 128 fp32 sub-tile and 4 warps, written out).

The structure imitates attention-like kernels, not a uniform random DAG:

* about one op in eight is a 16 KB TMA load (streaming: variable latency, no incoming edge, SMEM result,
  blocking edges to the GEMMs that read it), and about one in fifteen (at least one) a pointer load of a
  row vector on the LSU (streaming too);
* the compute ops are drawn from a Hopper mix: Tensor Core GEMMs (64 x 128 x 128 and 64 x 128 x 64), tile
  exponentials on MUFU with their ALU share, row exponentials, elementwise ALU tiles, conversions to
  fp16, row reductions and scalar row updates, with registers per thread as the frontend gives them;
  at least one GEMM and one tile exponential;
* each compute op reads one or two values of the last few ops (a GEMM also reads a TMA load), so the
  graph is a braid of short chains, as sub-tiled kernels are; edges out of GEMMs, TMA loads and LSU
  loads are blocking (the consumer waits for an asynchronous result);
* loop-carried edges (``distance = 1``): GEMM accumulators (a self edge, updated in place, as FA's
  ``O += P V``), running row statistics (a scalar op feeding itself, as the running max), and a few
  short recurrences from an op back to one of its recent ancestors, so RecMII stays a few ops long as
  in real kernels;
* for 30 ops and more, one atomic reduction on the LSU (variable latency with an input, as FA backward's
  ``dQ`` atomic) consumes a GEMM result.

    >>> g = synthetic_graph(10)
    >>> len(g.ops), g.name
    (10, 'synthetic10_s10')
    >>> [e.label for e in g.edges] == [e.label for e in synthetic_graph(10).edges]
    True
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from twill.ir.graph import Graph

__all__ = ["SIZES", "TEMPLATES", "synthetic_graph"]

SIZES = (10, 20, 30, 45, 60)
"""Op counts of the benchmark family."""


@dataclass(frozen=True)
class Template:
    """One kind of synthetic op: its reservation table and costs on ``h100`` (cycles).

    ``busy`` maps units to cycles busy from issue; ``latency`` is issue to result; ``issue`` the cycles the
    issuing warps are busy; ``regs`` registers per thread of the result (4 warps); ``smem`` bytes;
    ``result_bytes`` the size of the result; ``variable`` marks variable latency; ``warps`` issuing warps.
    """

    kind: str
    busy: tuple[tuple[str, int], ...]
    latency: int
    issue: int
    regs: int = 0
    smem: int = 0
    result_bytes: int = 0
    variable: bool = False
    warps: int = 4
    weight: float = 0.0


# Cycle counts on h100 (machines/h100.toml [cost]): 4096 TC FLOP/cycle, tc_latency 128, tc_issue 16,
# 16 MUFU and 128 ALU results per cycle, TMA 48 B/cycle with latency 700 and issue 4, LSU 32 B/cycle with
# latency 600. Registers: a 64 x 128 fp32 tile over 128 threads is 64 registers per thread, fp16 is 32.
TEMPLATES: dict[str, Template] = {
    "tma_load": Template("tma_load", (("tma", 342),), 700, 4, smem=16384, result_bytes=16384,
                         variable=True, warps=1),
    "load": Template("load", (("lsu", 8),), 600, 8, regs=1, result_bytes=256, variable=True),
    "atomic": Template("atomic", (("lsu", 1024),), 1024, 1024, variable=True),
    "gemm": Template("gemm", (("tc", 512),), 640, 16, regs=64, result_bytes=32768, weight=0.18),
    "gemm_k64": Template("gemm", (("tc", 256),), 384, 16, regs=64, result_bytes=32768, weight=0.06),
    "exp": Template("exp", (("alu", 128), ("mufu", 512)), 512, 512, regs=64, result_bytes=32768,
                    weight=0.10),
    "exp_row": Template("exp", (("alu", 1), ("mufu", 4)), 4, 4, regs=1, result_bytes=256, weight=0.06),
    "alu": Template("alu", (("alu", 64),), 64, 64, regs=64, result_bytes=32768, weight=0.22),
    "convert": Template("convert", (("alu", 128),), 128, 128, regs=32, result_bytes=16384, weight=0.10),
    "reduce": Template("reduce", (("alu", 84),), 84, 84, regs=1, result_bytes=256, weight=0.14),
    "scalar": Template("alu", (("alu", 2),), 2, 2, regs=1, result_bytes=256, weight=0.14),
}
"""Op kinds and their Hopper costs; ``weight`` is the share among compute ops."""

_WINDOW = 5
"""A compute op reads values of the last this many ops before it (short chains, as in sub-tiled code)."""


def synthetic_graph(n_ops: int, seed: int | None = None) -> Graph:
    """A deterministic random loop body of ``n_ops`` ops for the ``h100`` machine.

    Parameters
    ----------
    n_ops : int
        Number of ops (at least 4: a TMA load, a pointer load, a GEMM and an exponential).
    seed : int, optional
        Random seed; defaults to ``n_ops``, so each size of :data:`SIZES` has one fixed graph.

    Returns
    -------
    Graph
        Named ``synthetic<n>_s<seed>``; it passes :meth:`Graph.check` for the ``h100`` units.

    Raises
    ------
    ValueError
        ``n_ops < 4``.
    """
    if n_ops < 4:
        raise ValueError(f"a synthetic loop needs at least 4 ops, got {n_ops}")
    seed = n_ops if seed is None else seed
    rng = random.Random(seed)
    g = Graph(f"synthetic{n_ops}_s{seed}", source=f"benchmarks/synthetic.py seed {seed}")
    n_tma = max(1, n_ops // 8)
    n_lsu = max(1, n_ops // 15)
    n_atomic = 1 if n_ops >= 30 else 0
    n_compute = n_ops - n_tma - n_lsu - n_atomic
    compute_kinds = [k for k, t in TEMPLATES.items() if t.weight > 0]
    kinds = rng.choices(compute_kinds, weights=[TEMPLATES[k].weight for k in compute_kinds], k=n_compute)
    if not any(k in ("gemm", "gemm_k64") for k in kinds):
        kinds[0] = "gemm"  # every loop has a GEMM to read the loads
    if "exp" not in kinds:  # and a tile exponential (MUFU), so every Hopper unit is used
        first_gemm = next(i for i, k in enumerate(kinds) if k in ("gemm", "gemm_k64"))
        kinds[rng.choice([i for i in range(len(kinds)) if i != first_gemm])] = "exp"

    def add(name: str, key: str) -> str:
        t = TEMPLATES[key]
        g.add_op(name, t.kind, busy=dict(t.busy), latency=t.latency, issue_cycles=t.issue, regs=t.regs,
                 smem=t.smem, result_bytes=t.result_bytes, variable_latency=t.variable, warps=t.warps,
                 source=f"synthetic {key}")
        return name

    loads = [add(f"tma{i}", "tma_load") for i in range(n_tma)]
    rows = [add(f"ld{i}", "load") for i in range(n_lsu)]
    compute: list[tuple[str, str]] = []  # (name, template key) in program order
    edges: set[tuple[str, str]] = set()
    key_of: dict[str, str] = {n: "tma_load" for n in loads} | {n: "load" for n in rows}

    def edge(src: str, dst: str, *, distance: int = 0, carrier: str = "register",
             inplace: bool = False) -> None:
        if (src, dst) in edges:
            return
        edges.add((src, dst))
        blocking = key_of[src] in ("gemm", "gemm_k64", "tma_load", "load")
        g.add_edge(src, dst, distance=distance, blocking=blocking, carrier=carrier, inplace=inplace,
                   source="synthetic")

    unused_loads = list(loads)
    for i, key in enumerate(kinds):
        name = add(f"op{i}_{key}", key)
        key_of[name] = key
        recent = [n for n, _ in compute[-_WINDOW:]]
        if key in ("gemm", "gemm_k64"):
            load = unused_loads.pop(0) if unused_loads else rng.choice(loads)
            edge(load, name, carrier="smem")
            if recent and rng.random() < 0.5:  # a register operand (FA's P in P @ V)
                edge(rng.choice(recent), name)
        elif recent:
            for src in rng.sample(recent, k=min(len(recent), rng.choice((1, 1, 2)))):
                edge(src, name)
        elif rows:
            edge(rng.choice(rows), name)
        if rows and key in ("scalar", "exp", "alu") and rng.random() < 0.25:
            edge(rng.choice(rows), name)  # a row vector loaded by pointer (lse, delta)
        compute.append((name, key))
    for name in rows:  # every pointer load has a reader
        if not any(src == name for src, _ in edges):
            target = rng.choice([n for n, k in compute if k not in ("gemm", "gemm_k64")] or [compute[-1][0]])
            edge(name, target)
    for name in unused_loads:  # every TMA load is read by a GEMM
        gemms = [n for n, k in compute if k in ("gemm", "gemm_k64")]
        edge(name, rng.choice(gemms), carrier="smem")
    if n_atomic:
        gemms = [n for n, k in compute if k in ("gemm", "gemm_k64")]
        atomic = add("atomic0", "atomic")
        key_of[atomic] = "atomic"
        edge(gemms[-1], atomic)
    # Loop-carried edges: accumulators, running statistics, short recurrences.
    for name, key in compute:
        if key in ("gemm", "gemm_k64") and rng.random() < 0.5:
            edge(name, name, distance=1, inplace=True)
        elif key == "scalar" and rng.random() < 0.6:
            edge(name, name, distance=1)
    preds: dict[str, list[str]] = {}
    for src, dst in sorted(edges):
        if src != dst:
            preds.setdefault(dst, []).append(src)
    for name, _ in rng.sample(compute, k=max(1, len(compute) // 10)):
        ancestors = [p for p in preds.get(name, []) if p in dict(compute)]
        if ancestors:
            edge(name, rng.choice(ancestors), distance=1)
    return g
