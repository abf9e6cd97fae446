"""FlashAttention backward on Blackwell (``attn_bwd_sm100``, ``attn_bwd_split_sm100``): two compute groups at
the default budget, a reduced register budget, FA4's groups once shared memory allows.
"""

from __future__ import annotations

import math

import pytest
from test_fa_backward import COARSE, STAGES, bwd_graph

import twill


@pytest.fixture(scope="module")
def bwd_b200() -> twill.Schedule:
    return twill.schedule(bwd_graph("attn_bwd_sm100", "b200"), "b200", normalize_upper=COARSE, time_limit=600,
                          max_stages=STAGES)


@pytest.mark.slow
@pytest.mark.heavy
def test_blackwell_backward_two_compute_groups_at_the_default_budget(bwd_b200: twill.Schedule) -> None:
    s = bwd_b200
    twill.verify(s)
    assert s.certificate.proven_optimal
    assert s.ii > s.certificate.lower_bound, "register-bound: the MII is out of reach"
    p = s.problem
    vl = {op.name for op in p.ops if op.variable_latency}
    producer = [w for w in s.warp_groups if w.role == "producer"]
    assert len(producer) == 1 and set(producer[0].ops) == vl
    compute = [w for w in s.warp_groups if w.role != "producer"]
    assert len(compute) == 2
    # both groups issue Tensor Core work, and the exp sits on one of them
    for w in compute:
        assert any(r.unit == "tc" for n in w.ops for r in p.op(n).rrt)
    exps = [op.name for op in p.ops if any(r.unit == "mufu" for r in op.rrt)]
    assert len({s.group[n] for n in exps}) == 1
    assert sum(w.registers * w.warps * 32 for w in s.warp_groups) <= 65536


@pytest.mark.slow
@pytest.mark.heavy
def test_blackwell_backward_reduced_register_budget(bwd_b200: twill.Schedule) -> None:
    """A lower per-thread limit is honoured by every group and cannot lower the optimal II."""
    limit = 160
    s = twill.schedule(bwd_graph("attn_bwd_sm100", "b200"), "b200", normalize_upper=COARSE,
                       register_limit=limit, time_limit=600, max_stages=STAGES)
    twill.verify(s)
    assert all(w.registers_needed <= limit for w in s.warp_groups)
    assert s.ii >= bwd_b200.ii


def test_blackwell_backward_takes_fa4s_groups_once_shared_memory_allows() -> None:
    """FA4's three groups, at a reduced register budget, once shared memory capacity is not the limit (a
    what-if: Triton's kernel stages P and dS through shared memory each iteration, FA4 keeps P in tensor
    memory), in the split kernel (``FORM = "split"``, the exponential and dS by key halves). The optimum
    is then at the MII, which is the shared-memory ports' (11 units): their own conversions and stores,
    and dQ's store and the atomic's read of it, which every schedule pays since the atomic sits on the
    producer group. It has a group of its own taking dQ out of tensor memory and
    converting it for the atomic reduction, and the two halves' exponentials on different groups. With
    shared memory limited the optimum is two compute groups far above the MII (docs/flash_attention.md,
    "Backward")."""
    limit = 160
    s = twill.schedule(bwd_graph("attn_bwd_split_sm100", "b200"), "b200", normalize_upper=COARSE,
                       register_limit=limit, relax={"smem"}, time_limit=300)
    twill.verify(s)
    assert s.certificate.proven_optimal and s.ii == s.certificate.lower_bound
    p = s.problem
    ports = sum(r.cycles for op in p.ops for r in op.rrt if r.unit == "smem")
    # the forced traffic by the documented rule (model.md §2), not by twill's own transfers(): a register
    # value between a load/atomic and a compute op is stored once (ceil(bytes / 128) cycles) and loaded
    # once per edge, each rounded to whole units
    def units(op: str) -> int:
        return math.floor(math.ceil(p.op(op).result_bytes / 128) / p.cycles_per_unit + 0.5)
    forced_edges = [e for e in p.edges if e.carrier == "register" and e.src != e.dst
                    and p.op(e.src).variable_latency != p.op(e.dst).variable_latency]
    stores = sum(units(src) for src in {e.src for e in forced_edges})
    forced = stores + sum(units(e.src) for e in forced_edges)
    assert forced > 0
    others = {u: sum(r.cycles for op in p.ops for r in op.rrt if r.unit == u) for u in p.resources.units}
    assert s.ii == ports + forced > max(c for u, c in others.items() if u != "smem")
    exps = [op.name for op in p.ops if any(r.unit == "mufu" for r in op.rrt)]
    assert len(exps) == 2
    assert len({s.group[n] for n in exps}) == len(exps)
    staging = {s.group["dq"], s.group["dq_convert_layout"]}  # dQ's TMEM load and its layout change
    assert len(staging) == 1 and staging.isdisjoint(s.group[n] for n in exps)
    producer = [w for w in s.warp_groups if w.role == "producer"]
    assert len(producer) == 1 and set(producer[0].ops) == {op.name for op in p.ops if op.variable_latency}
    assert all(w.registers_needed <= limit for w in s.warp_groups)
    assert len([w for w in s.warp_groups if w.role != "producer"]) >= 3
