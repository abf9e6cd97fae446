"""The discrete-event simulator: steady state against II, trip counts, barriers, deadlocks, latencies.

Expected numbers are derived by hand in each test from the machine model of :mod:`twill.analysis.simulate`
(in-order issue per warp group, blocking waits, units, buffers). Tolerance: the steady state is exact
(to 1e-9 cycles) in these integer examples, where one normalized unit is one cycle.
"""

from __future__ import annotations

import itertools
import json

import pytest

import twill
from twill.analysis.simulate import REASONS, simulate
from twill.cli import main
from twill.errors import SimulationError, TwillError, TwillWarning
from twill.ir.graph import Graph
from twill.ir.machine import load_machine
from twill.ir.paper import figure1_graph
from twill.model.problem import build_problem
from twill.schedule import Certificate, OpSlot, Schedule, WarpGroup

EXACT = 1e-9


def hand_schedule(graph: Graph, ii: int, length: int, start: dict[str, int], group: dict[str, int],
                  registers: int = 240) -> Schedule:
    """A schedule built from the public dataclasses (raw cycles, no solver), checked by ``verify``."""
    problem = build_problem(graph, load_machine("h100"))
    slots = {n: OpSlot(n, start[n], start[n] // ii, group[n]) for n in problem.names}
    groups = []
    for g in sorted(set(group.values())):
        ops = tuple(sorted((n for n in group if group[n] == g), key=start.get))
        role = "producer" if all(problem.op(n).variable_latency for n in ops) else "compute"
        groups.append(WarpGroup(g, ops, 4, registers, registers, role))
    sched = Schedule(problem, ii, length, slots, tuple(groups), Certificate(ii, ii, 0, False, ()))
    twill.verify(sched)
    return sched


def two_op_graph() -> Graph:
    """``A`` (Tensor Core, 2 cycles busy, result after 6, issues in no time: its issue is below the
    cycle here, so the group's issue stream holds B's 3 cycles per II 3) feeds ``B`` (ALU, 3 cycles)
    through a blocking wait."""
    g = Graph("two_op")
    g.add_op("A", "gemm", busy={"tc": 2}, latency=6, issue_cycles=0, regs=32)
    g.add_op("B", "alu", busy={"alu": 3})
    g.add_edge("A", "B", blocking=True)
    return g


@pytest.fixture(scope="module")
def two_op() -> Schedule:
    """II = 3 (the ALU is busy 3 of every 3 cycles), A at 0, B at 7 (after A's 6-cycle latency), L = 10,
    4 stages."""
    return hand_schedule(two_op_graph(), 3, 10, {"A": 0, "B": 7}, {"A": 0, "B": 0})


@pytest.fixture(scope="module")
def fig1() -> Schedule:
    return twill.schedule(figure1_graph(), "h100")


# ------------------------------------------------------------------------------- steady state = II
def test_figure1_steady_state_is_ii(fig1):
    # Both GEMMs use the Tensor Cores for 1 cycle each: ResMII = 2 cycles; the recurrence O->O is 1.
    assert fig1.ii_cycles == 2
    r = simulate(fig1, 40)
    assert abs(r.cycles_per_iteration - 2.0) <= EXACT
    assert r.steady_utilization["tc"] == pytest.approx(1.0)
    assert r.steady_utilization["mufu"] == pytest.approx(0.5)
    assert r.balanced


def test_two_op_loop_steady_state_is_ii(two_op):
    r = simulate(two_op, 40)
    assert two_op.stages == 4
    assert abs(r.cycles_per_iteration - 3.0) <= EXACT
    assert r.buffer_depths == {"A": 3}  # A's value lives 7 cycles (until B issues): ceil(7 / 3) copies
    assert r.steady_utilization["alu"] == pytest.approx(1.0)
    # A waits for buffer copies, B for A's result: no unit contention, every wait has a reason
    assert set(r.stalls) == set(REASONS)


def test_raw_timing_with_the_graph_matches_model_timing_when_units_are_cycles(two_op):
    model = simulate(two_op, 20)
    raw = simulate(two_op, 20, graph=two_op_graph())
    assert raw.timing == "raw" and model.timing == "model"
    assert raw.total_cycles == model.total_cycles
    other = two_op_graph()
    other.add_op("C", "alu", busy={"alu": 1})
    with pytest.raises(TwillError, match="ops"):
        simulate(two_op, 4, graph=other)


def test_units_serve_ops_in_the_schedules_order():
    # Group 0: C (ALU, 2 cycles) then B (Tensor Cores, 1 cycle) at 2; group 1: A (Tensor Cores) at 3.
    # A is ready at once, but the schedule gives the Tensor Cores to B first: A waits until B has
    # started (2) and finished with them (3). First come, first served lets A take them at 0.
    g = Graph("order")
    g.add_op("C", "alu", busy={"alu": 2})
    g.add_op("B", "gemm", busy={"tc": 1})
    g.add_op("A", "gemm", busy={"tc": 1})
    g.add_edge("C", "B")
    s = hand_schedule(g, 4, 4, {"C": 0, "B": 2, "A": 3}, {"C": 0, "B": 0, "A": 1})
    ordered = {(x.name, x.iteration): x for x in simulate(s, 3).trace}
    greedy = {(x.name, x.iteration): x for x in simulate(s, 3, unit_order="greedy").trace}
    assert ordered[("A", 0)].issue == 3 and ordered[("A", 0)].reason == "unit"
    assert greedy[("A", 0)].issue == 0
    with pytest.raises(TwillError, match="unit_order"):
        simulate(s, 3, unit_order="random")


def test_mbarrier_turns_wait_for_the_predecessors_issue_and_the_hand_off():
    # As above, but B is a synchronous GEMM whose group is busy issuing it for 5 cycles (its ALU share;
    # the Tensor Cores only for 1) and the Tensor Core's turn passes between groups through an mbarrier
    # of 10 cycles: the arrive follows B's issue (2 + 5), A's wait ends 10 later, at 17. Without
    # barrier_cycles A takes its turn at 3, once B has started and finished on the Tensor Cores.
    g = Graph("turns")
    g.add_op("C", "alu", busy={"alu": 2})
    g.add_op("B", "gemm", busy={"tc": 1, "alu": 5})
    g.add_op("A", "gemm", busy={"tc": 1})
    g.add_edge("C", "B")
    s = hand_schedule(g, 8, 8, {"C": 0, "B": 2, "A": 3}, {"C": 0, "B": 0, "A": 1})
    plain = {(x.name, x.iteration): x for x in simulate(s, 3).trace}
    turns = {(x.name, x.iteration): x for x in simulate(s, 3, barrier_cycles=10).trace}
    assert plain[("A", 0)].issue == 3
    assert turns[("B", 0)].issue == 2 and turns[("A", 0)].issue == 2 + 5 + 10
    assert turns[("A", 0)].reason == "unit"
    with pytest.raises(TwillError, match="barrier_cycles"):
        simulate(s, 3, barrier_cycles=-1)


# ------------------------------------------------------------------------------- trip counts
@pytest.mark.parametrize(("n", "total"), [(0, 0), (1, 9), (2, 12), (3, 15)])
def test_short_loops_run_and_balance_their_barriers(two_op, n, total):
    # A0 at 0; B0 waits for A0 + 6 -> [6, 9). A1 at 2 (Tensor Cores free), B1 waits for B0's issue to end
    # -> [9, 12); A2 at 4, B2 -> [12, 15). Four stages: n = 1, 2, 3 are all shorter than the stages.
    r = simulate(two_op, n)
    assert r.total_cycles == total
    assert r.iterations == n
    assert sorted((x.name, x.iteration) for x in r.trace) == sorted(
        (v, i) for v in ("A", "B") for i in range(n))
    assert r.cycles_per_iteration is None
    assert r.balanced
    (barrier,) = r.barriers
    assert (barrier.acquires, barrier.full_arrivals, barrier.releases, barrier.drained) == (n, n, n, 0)
    assert barrier.waits == n


@pytest.mark.parametrize("latency", [1, 2, 3])
def test_a_consumer_and_the_next_producer_at_the_same_moment_do_not_deadlock(latency):
    """II 1, one group: C of iteration i and P of iteration i + latency start at the same cycle, and P's
    register ring (depth = latency) needs C's release; the older iteration issues first."""
    g = Graph("tie")  # P issues in no time (an asynchronous producer), so P and C share one issue stream
    g.add_op("P", "gemm", busy={"tc": 1}, issue_cycles=0, regs=8)
    g.add_op("C", "mufu", busy={"mufu": 1}, regs=8)
    g.add_edge("P", "C", latency=latency)
    s = twill.schedule(g, "h100")
    assert (s.ii, s.slots["C"].start, s.buffer_depths()["P"]) == (1, latency, latency)
    r = simulate(s, iterations=12)
    assert r.total_cycles == latency + 12  # C of iteration 11 issues at latency + 11 and takes 1 cycle


@pytest.mark.parametrize("n", [0, 1, 2, 3])
def test_figure1_short_loops(fig1, n):
    r = simulate(fig1, n)
    assert len(r.trace) == 3 * n
    assert r.balanced
    assert (r.total_cycles == 0) == (n == 0)


def test_carried_values_are_drained_at_loop_exit():
    # X carries its value to itself (δ = 1): the last iteration's copy is read after the loop.
    g = Graph("carried")
    g.add_op("X", "alu", busy={"alu": 1}, regs=8)
    g.add_edge("X", "X", distance=1)
    s = hand_schedule(g, 1, 1, {"X": 0}, {"X": 0})
    for n in (1, 2, 5):
        (b,) = simulate(s, n).barriers
        assert (b.acquires, b.releases, b.drained, b.initial_reads) == (n, n - 1, 1, 1)
        assert b.balanced


# ------------------------------------------------------------------------------- deadlock
def deadlock_schedule() -> Schedule:
    """One warp group: X (ALU) at 0 and its reader Y (MUFU) at 3 with II = 2, so X of iteration i+1
    (at 2i+2) comes before Y of iteration i (at 2i+3) in the group's program: X needs two copies."""
    g = Graph("stages")
    g.add_op("X", "alu", busy={"alu": 1}, regs=8)
    g.add_op("Y", "exp", busy={"mufu": 1})
    g.add_edge("X", "Y")
    return hand_schedule(g, 2, 4, {"X": 0, "Y": 3}, {"X": 0, "Y": 0})


def test_buffer_below_the_stages_deadlocks_naming_op_and_barrier():
    s = deadlock_schedule()
    assert simulate(s, 8).buffer_depths == {"X": 2}
    with pytest.raises(SimulationError) as info:
        simulate(s, 8, buffers={"X": 1})
    err = info.value
    assert (err.op, err.iteration, err.group) == ("X", 1, 0)
    assert "empty barrier of 'X' slot 0" in err.barrier
    assert "'Y' (iteration 0, later in the same group's program" in str(err)


def test_two_op_loop_deadlocks_below_its_stages(two_op):
    # A of iteration i + 2 (at 3i + 6) precedes B of iteration i (at 3i + 7) in the group's program, so
    # two copies of A's value are not enough for this in-order warp group.
    with pytest.raises(SimulationError, match="empty barrier of 'A'"):
        simulate(two_op, 30, buffers={"A": 2})


def test_a_shallow_buffer_between_groups_is_only_slower(streaming):
    # Across warp groups the producer simply waits for the consumer to release the copy.
    deep = simulate(streaming, 30, latencies=200)
    shallow = simulate(streaming, 30, latencies=200, buffers={"L": 1})
    assert deep.buffer_depths["L"] >= 2
    assert shallow.cycles_per_iteration > deep.cycles_per_iteration
    assert shallow.stalls["buffer"] > deep.stalls["buffer"]
    assert shallow.balanced


def test_an_mbarrier_release_across_groups_lengthens_the_buffer_cycle_by_its_latency(streaming):
    # With one copy of L the loop's only cycle is C(i-1) releases the copy -> L(i) -> C(i): the release
    # reaches L's group barrier_cycles later, so each iteration takes exactly that much longer.
    shallow = simulate(streaming, 30, latencies=200, buffers={"L": 1})
    signalled = simulate(streaming, 30, latencies=200, buffers={"L": 1}, barrier_cycles=50)
    tick = shallow.cycles_per_tick
    assert abs(signalled.cycles_per_iteration - shallow.cycles_per_iteration - 50) <= tick
    # deep enough, the release is off the critical cycle and costs nothing
    deep = simulate(streaming, 30, latencies=200)
    assert simulate(streaming, 30, latencies=200, barrier_cycles=50).cycles_per_iteration == pytest.approx(
        deep.cycles_per_iteration, abs=tick)


def test_bad_arguments(two_op):
    with pytest.raises(TwillError):
        simulate(two_op, -1)
    with pytest.raises(TwillError, match="not an op"):
        simulate(two_op, 4, buffers={"Z": 2})
    with pytest.raises(TwillError, match=">= 1"):
        simulate(two_op, 4, buffers={"A": 0})
    with pytest.raises(TwillError, match="latency"):
        simulate(two_op, 4, latencies={"A": "slow"})


# ------------------------------------------------------------------------------- latencies
@pytest.fixture(scope="module")
def streaming() -> Schedule:
    """A streaming TMA load feeding an ALU consumer on another warp group (solved by twill). The model
    takes the load's latency (200 cycles) as hidden by prefetching, which holds while II (the consumer's
    400 ALU cycles) exceeds it."""
    g = Graph("stream")
    g.add_op("L", "tma_load", busy={"tma": 8}, latency=200, issue_cycles=1, smem=4096, variable_latency=True)
    g.add_op("C", "alu", busy={"alu": 400})
    g.add_edge("L", "C", blocking=True, carrier="smem")
    return twill.schedule(g, "h100")


@pytest.mark.parametrize("n", [0, 1, 2, 3, 4, 7])
def test_trip_counts_across_warp_groups_balance_every_barrier(streaming, n):
    # peers.md P14: every producer acquire of the load's buffer has a consumer release, every full
    # barrier reaches its count, whatever the trip count against the stages.
    r = simulate(streaming, n, latencies=200)
    (b,) = r.barriers
    assert (b.acquires, b.full_arrivals, b.releases, b.drained, b.waits) == (n, n, n, 0, n)
    assert b.depth >= 2 and r.balanced
    assert sorted((x.name, x.iteration) for x in r.trace) == sorted((v, i) for v in "LC" for i in range(n))


def test_latency_scaling_is_monotone(streaming):
    base = 200.0
    cpis = [simulate(streaming, 48, latencies=base * k).cycles_per_iteration for k in (1, 2, 4, 8, 16)]
    assert all(a <= b + EXACT for a, b in itertools.pairwise(cpis))
    assert cpis[-1] > cpis[0]
    assert cpis[0] == pytest.approx(streaming.ii_cycles, rel=0.02)


def test_latency_draws_are_seeded_and_overridable(streaming):
    a = simulate(streaming, 20, seed=3)
    b = simulate(streaming, 20, seed=3)
    assert a.trace == b.trace
    lo, mean, hi = a.latencies["L"]
    assert lo < mean < hi
    fixed = simulate(streaming, 20, latencies={"tma_load": 350})
    assert fixed.latencies["L"] == (350.0, 350.0, 350.0)
    by_name = simulate(streaming, 20, latencies={"L": lambda rng, op, i: 100.0 + i})
    assert by_name.latencies["L"] == (100.0, 109.5, 119.0)


def test_default_latency_median_is_the_machines_tma_latency(streaming):
    r = simulate(streaming, 400, seed=1)
    _, mean, _ = r.latencies["L"]
    assert mean == pytest.approx(load_machine("h100").const("cost.tma_latency"), rel=0.03)


# ------------------------------------------------------------------------------- CLI
def test_cli_simulate(tmp_path, fig1, capsys):
    path = tmp_path / "fig1.json"
    path.write_text(fig1.to_json())
    assert main(["simulate", str(path), "--iterations", "20"]) == 0
    out = capsys.readouterr().out
    assert "steady state: 2.0 cycles per iteration" in out
    assert json.loads(path.read_text())["ii"] == 2


def test_default_prefetch_depth_hides_a_latency_longer_than_ii():
    """A load whose latency (1000 cycles) is 2.5x the consumer's II (400 ALU cycles): with one prefetch
    buffer the simulated loop waits on it every iteration; the default depth is the least that does not,
    so the simulation at that latency runs at the schedule's II and one buffer fewer does not."""
    g = Graph("slow_stream")
    g.add_op("L", "tma_load", busy={"tma": 8}, latency=1000, issue_cycles=1, smem=4096, variable_latency=True)
    g.add_op("C", "alu", busy={"alu": 400})
    g.add_edge("L", "C", blocking=True, carrier="smem")
    auto = twill.schedule(g, "h100")
    depth = auto.problem.options.prefetch
    assert depth >= 2
    assert any(n.startswith(f"prefetch: {depth} ") for n in auto.certificate.notes)
    assert simulate(auto, 48, latencies=1000).cycles_per_iteration == pytest.approx(auto.ii_cycles, rel=0.02)
    with pytest.warns(TwillWarning, match="latency exposed"):
        shallow = twill.schedule(g, "h100", prefetch=depth - 1)
    assert any("latency exposed" in n for n in shallow.certificate.notes)
    assert shallow.ii == auto.ii
    assert simulate(shallow, 48, latencies=1000).cycles_per_iteration > 1.05 * shallow.ii_cycles


def test_default_prefetch_keeps_the_schedule_when_the_deeper_ring_cannot_fit():
    """A 64 KB load with a 100,000-cycle latency would need about 250 buffers (far over 227 KB of SMEM):
    the search keeps the depth-1 schedule and says in the certificate that the latency stays exposed,
    instead of failing on the deeper ring."""
    g = Graph("very_slow_stream")
    g.add_op("L", "tma_load", busy={"tma": 8}, latency=100_000, issue_cycles=1, smem=65536,
             variable_latency=True)
    g.add_op("C", "alu", busy={"alu": 400})
    g.add_edge("L", "C", blocking=True, carrier="smem")
    sched = twill.schedule(g, "h100")
    assert sched.problem.options.prefetch == 1
    assert "no schedule" in sched.certificate.notes[-1] and "exposed" in sched.certificate.notes[-1]


def test_a_forced_hand_off_simulates_at_its_port_bound() -> None:
    # A hands 8192 bytes to V (an atomic on the producer group) beside C's 64-cycle conversion: 64 + 2 x 64
    # = 192 SMEM-port cycles per iteration, the II. A value with bytes but no registers still has a ring
    # of buffers in the simulator: A once ran 400 iterations ahead of V, whose loads never found the port
    # free, and the estimate read 107 cycles per iteration.
    g = Graph("forced_hand_off")
    g.add_op("A", "alu", busy={"alu": 64}, warps=4, result_bytes=8192)
    g.add_op("V", "atomic", busy={"lsu": 64}, variable_latency=True)
    g.add_op("C", "convert_layout", busy={"smem": 64}, warps=4)
    g.add_edge("A", "V")
    s = twill.schedule(g, "h100")
    assert s.ii_cycles == 192
    r = twill.simulate(s, iterations=200)
    assert r.cycles_per_iteration == pytest.approx(192, rel=0.02)
    assert r.total_cycles / 200 == pytest.approx(192, rel=0.05)
