"""Independent re-check of a schedule against every constraint family, in plain Python.

Nothing here calls a solver or reuses the SMT encoding or :mod:`twill.liveness`: lifetimes are
derived here from the rules of docs/model.md §4 (the same rules, written a second time), and occupancy
is counted copy by copy at every residue modulo II. :func:`violations` lists everything wrong;
:func:`verify` raises :class:`~twill.errors.ScheduleError` naming the first violation, with the numbers.

Families: ``uniqueness``, ``consistency``, ``completion``, ``stages``, ``dependence``, ``cross_warp``,
``capacity`` (with the SMEM-port traffic of register values crossing groups), ``memory`` (SMEM and
TMEM), ``registers``, ``register_file``, ``variable_latency``, ``group_shape``, ``blocking``, ``issue``
(a warp group's ops issue for at most II cycles per II). Families the problem's ``options.relax`` leaves
out (a what-if schedule of
:mod:`twill.explain`) are not checked: ``registers``, ``register_file``, ``smem``/``tmem`` (of
``memory``), ``blocking``, ``handoff`` (the hand-off term of ``dependence`` and its SMEM traffic) and
``groups`` (the warps-per-CTA limit).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

from twill.errors import ScheduleError
from twill.model.problem import HANDOFF_UNIT, Edge, Problem
from twill.schedule import Schedule, group_role

__all__ = ["FAMILIES", "verify", "violations"]

FAMILIES = ("uniqueness", "consistency", "completion", "stages", "dependence", "cross_warp", "apart",
            "capacity", "memory", "registers", "register_file", "variable_latency", "group_shape", "blocking",
            "issue")


def verify(schedule: Schedule) -> None:
    """Raise :class:`ScheduleError` for the first violated constraint; return None for a valid schedule."""
    for err in _check(schedule):
        raise err


def violations(schedule: Schedule) -> list[ScheduleError]:
    """Every violation found (an empty list for a valid schedule)."""
    return list(_check(schedule))


def _check(s: Schedule) -> Iterator[ScheduleError]:
    for family in (_uniqueness, _consistency, _completion, _dependence, _capacity, _memory, _groups,
                   _registers, _blocking, _issue):
        found = list(family(s))
        yield from found
        if found and family in (_uniqueness, _consistency):
            return  # later families need one well-formed slot per op


def _uniqueness(s: Schedule) -> Iterator[ScheduleError]:
    names = set(s.problem.names)
    for n in names - set(s.slots):
        yield ScheduleError(f"op {n!r} has no start time", family="uniqueness", op=n)
    for n in set(s.slots) - names:
        yield ScheduleError(f"slot {n!r} is not an op of the problem", family="uniqueness", op=n)
    listed: dict[str, int] = {}
    for g in s.warp_groups:
        for n in g.ops:
            if n in listed:
                yield ScheduleError(f"op {n!r} is listed in warp groups {listed[n]} and {g.index}",
                                    family="uniqueness", op=n)
            listed[n] = g.index
    for n in names - set(listed):
        yield ScheduleError(f"op {n!r} is in no warp group", family="uniqueness", op=n)


def _consistency(s: Schedule) -> Iterator[ScheduleError]:
    if s.ii < 1:
        yield ScheduleError(f"II = {s.ii} < 1", family="consistency")
        return
    listed = {n: g.index for g in s.warp_groups for n in g.ops}
    for n, slot in s.slots.items():
        if slot.stage != slot.start // s.ii:
            yield ScheduleError(f"op {n!r}: stage {slot.stage} but start {slot.start} // II {s.ii} = "
                                f"{slot.start // s.ii}", family="consistency", op=n)
        if listed.get(n, slot.warp_group) != slot.warp_group:
            yield ScheduleError(f"op {n!r}: slot says warp group {slot.warp_group}, group list says "
                                f"{listed[n]}", family="consistency", op=n)


def _completion(s: Schedule) -> Iterator[ScheduleError]:
    for op in s.problem.ops:
        start = s.slots[op.name].start
        if start < 0:
            yield ScheduleError(f"op {op.name!r} starts at {start} < 0", family="completion", op=op.name)
        if start + op.cycles > s.length:
            yield ScheduleError(f"op {op.name!r} ends at {start} + {op.cycles} = {start + op.cycles} > L = "
                                f"{s.length}", family="completion", op=op.name)
    limit = s.problem.options.max_stages
    if limit is not None and s.stages > limit:
        yield ScheduleError(f"{s.stages} stages (L = {s.length}, II = {s.ii}) > max_stages = {limit}",
                            family="stages")


def _dependence(s: Schedule) -> Iterator[ScheduleError]:
    start, group = s.start, s.group
    handoff = "handoff" not in s.problem.options.relax
    for e in s.problem.edges:
        crossing = group[e.src] != group[e.dst]
        delay = s.problem.crossing_delay(e) if crossing else e.latency
        need = start[e.src] + delay
        have = start[e.dst] + e.distance * s.ii
        if have < need:
            extra = (f" + hand-off {delay - e.latency} (groups {group[e.src]} -> {group[e.dst]})"
                     if crossing and handoff else "")
            yield ScheduleError(
                f"{e.label}: {e.dst} of iteration i+{e.distance} starts at {start[e.dst]} + {e.distance}*II"
                f"({s.ii}) = {have}, before {e.src} at {start[e.src]} + d {e.latency}{extra} = {need}",
                family="dependence", op=e.dst)
        if crossing and e.carrier == "register" and not s.problem.options.cross_group:
            yield ScheduleError(f"{e.label}: register value crosses from warp group {group[e.src]} to "
                                f"{group[e.dst]}, but cross-group communication is forbidden",
                                family="cross_warp", op=e.dst)
    for a, b in s.problem.options.apart:
        if group[a] == group[b]:
            yield ScheduleError(f"{a} and {b} share warp group {group[a]}, but the options keep them apart",
                                family="apart", op=b)


def _capacity(s: Schedule) -> Iterator[ScheduleError]:
    ii, p = s.ii, s.problem
    crossings = [e for e in p.edges if s.group[e.src] != s.group[e.dst]]
    for unit, cap in p.resources.units.items():
        used = [0] * ii
        who: list[list[tuple[str, str]]] = [[] for _ in range(ii)]
        bookings = [(op.name, op.name, r.start, r.cycles, r.count) for op in p.ops for r in op.rrt
                    if r.unit == unit]
        if unit == HANDOFF_UNIT:  # the store and the load of each register value crossing groups
            bookings += [(op, f"hand-off {'store' if offset >= 0 else 'load'} at {op}", offset, cycles, 1)
                         for op, offset, cycles in p.transfers(crossings)]
        for op_name, label, offset, cycles, count in bookings:
            for c in range(offset, offset + cycles):
                t = (s.slots[op_name].start + c) % ii
                used[t] += count
                who[t].append((op_name, label))
        for t in range(ii):
            if used[t] > cap:
                ops = ", ".join(sorted({label for _, label in who[t]}))
                yield ScheduleError(f"unit {unit!r} needs {used[t]} > capacity {cap} at residue {t} "
                                    f"(mod II {ii}): {ops}", family="capacity", op=who[t][0][0])
                break


@dataclass(frozen=True)
class _Held:
    """``weight`` of ``where`` (``regs/<group>``, ``smem`` or ``tmem``) held over ``[begin, end)`` by
    ``what``, in iteration 0's frame."""

    what: str
    where: str
    begin: int
    end: int
    weight: int

    def copies_at(self, t: int, ii: int) -> int:
        """Iterations ``k`` whose copy ``[begin + k II, end + k II)`` contains ``t``."""
        if self.end <= self.begin:
            return 0
        # k from ceil((begin - t) / II) to floor((end - 1 - t) / II)
        return max(0, (self.end - 1 - t) // ii + (t - self.begin) // ii + 1)


def _hold(p: Problem, e: Edge) -> int:
    """How long past its reader's start a register value stays live: the reader's cycles when it reads
    registers asynchronously (an RS wgmma) and does not update the value in place."""
    dst = p.op(e.dst)
    return dst.cycles if dst.is_async and not e.inplace else 0


def _reads(p: Problem, name: str, carrier: str) -> list[tuple[Edge, int]]:
    """Edges of ``carrier`` out of ``name`` with their distance, and, past each view (an alias), the view's
    own edges of that carrier with the distances added (a view is entered once per path)."""
    found: list[tuple[Edge, int]] = []
    todo = [(name, 0, frozenset([name]))]
    while todo:
        src, dist, seen = todo.pop()
        for e in p.edges:
            if e.src == src and e.carrier == carrier:
                found.append((e, dist + e.distance))
                if p.op(e.dst).view and e.dst not in seen:
                    todo.append((e.dst, dist + e.distance, seen | {e.dst}))
    return found


def _held(s: Schedule) -> list[_Held]:
    """Everything a schedule keeps (docs/model.md §4's liveness rules, stated here on their own)."""
    p, ii, start, group = s.problem, s.ii, s.start, s.group
    res, out = p.resources, []
    for op in p.ops:
        reg_uses = [e for e in p.edges if e.src == op.name and e.carrier == "register"]
        if op.regs > res.small_regs:
            end = start[op.name] + op.cycles
            for e, dist in _reads(p, op.name, "register"):
                if e.dst == op.name or group[e.dst] == group[op.name]:
                    end = max(end, start[e.dst] + dist * ii + _hold(p, e))
                elif _hold(p, e):
                    out.append(_Held(f"{op.name}->{e.dst} (received)", f"regs/{group[e.dst]}",
                                     start[e.dst], start[e.dst] + _hold(p, e), op.regs))
            out.append(_Held(op.name, f"regs/{group[op.name]}", start[op.name], end, op.regs))
        for kind, need in (("smem", op.smem), ("tmem", op.tmem)):
            if not need:
                continue
            if kind == "tmem" and res.tmem_alloc_step:
                need = -(-need // res.tmem_alloc_step) * res.tmem_alloc_step
            end = start[op.name] + op.cycles
            for e, dist in _reads(p, op.name, kind):
                end = max(end, start[e.dst] + dist * ii + p.op(e.dst).cycles)
            ahead = p.options.prefetch * ii if kind == "smem" and op.name in p.streaming else 0
            out.append(_Held(op.name, kind, start[op.name] - ahead, end, need))
        crossing = [e for e in reg_uses if e.dst != op.name and group[e.dst] != group[op.name]]
        if crossing and op.result_bytes:  # one staging buffer until the last reader on another group starts
            begin = start[op.name] + op.cycles
            end = max([begin + 1] + [start[e.dst] + e.distance * ii + 1 for e in crossing])
            out.append(_Held(f"{op.name} (staging)", "smem", begin, end, op.result_bytes))
    return out


def _occupancy(held: list[_Held], where: str, ii: int, base: int) -> list[int]:
    """Units of ``where`` in use at each residue of the steady state."""
    mine = [h for h in held if h.where == where]
    return [base + sum(h.weight * h.copies_at(t, ii) for h in mine) for t in range(ii)]


def _live_terms(held: list[_Held], where: str, t: int, ii: int) -> str:
    """What is live in ``where`` at residue ``t``, each value with its weight and, when more than one
    iteration's copy is live, the count: ``o0 (96 x 4 copies)``; the terms add up to the occupancy of
    :func:`_occupancy` less its base."""
    terms = []
    for h in held:
        copies = h.copies_at(t, ii) if h.where == where else 0
        if copies:
            terms.append(f"{h.what} ({h.weight} x {copies} copies)" if copies > 1
                         else f"{h.what} ({h.weight})")
    return ", ".join(terms)


def _memory(s: Schedule) -> Iterator[ScheduleError]:
    p, res = s.problem, s.problem.resources
    held = _held(s)
    for kind, capacity, fixed, unit in (("smem", res.smem, p.fixed_smem, "bytes"),
                                        ("tmem", res.tmem, p.fixed_tmem, "columns")):
        if kind in p.options.relax or not (fixed or any(h.where == kind for h in held)):
            continue
        occ = _occupancy(held, kind, s.ii, fixed)
        peak = max(occ)
        if peak > capacity:
            t = occ.index(peak)
            yield ScheduleError(f"{kind} needs {peak} {unit} > capacity {capacity} at residue {t} "
                                f"({fixed} loop-invariant; live: {_live_terms(held, kind, t, s.ii)})",
                                family="memory")


def _groups(s: Schedule) -> Iterator[ScheduleError]:
    p, res = s.problem, s.problem.resources
    vl_groups = {s.slots[op.name].warp_group for op in p.ops if op.variable_latency}
    if len(vl_groups) > 1:
        yield ScheduleError(f"variable-latency ops are spread over groups {sorted(vl_groups)}",
                            family="variable_latency")
    for op in p.ops:
        if not op.variable_latency and s.slots[op.name].warp_group in vl_groups:
            yield ScheduleError(f"op {op.name!r} has fixed latency but sits on the variable-latency group "
                                f"{s.slots[op.name].warp_group}", family="variable_latency", op=op.name)
    total_regs = total_warps = 0
    for g in s.warp_groups:
        # an op of k > 1 warps takes whole warpgroups: ceil(k / warps_per_group) of them (the encoding's
        # group shape); ops of one warp fit any group
        per = res.warps_per_group
        shapes = {per * -(-p.op(n).warps // per) for n in g.ops if p.op(n).warps > 1}
        if len(shapes) > 1:
            yield ScheduleError(f"warp group {g.index} mixes ops of {sorted(shapes)} warps",
                                family="group_shape")
        need = max(shapes, default=1)
        if g.warps < need or (shapes and g.warps != need):
            yield ScheduleError(f"warp group {g.index} has {g.warps} warps; its ops need {need}",
                                family="group_shape")
        if g.warps % res.warps_per_group:  # setmaxnreg and the role split act on whole warpgroups
            yield ScheduleError(f"warp group {g.index} has {g.warps} warps, not a multiple of a warpgroup "
                                f"({res.warps_per_group} warps)", family="group_shape")
        role = group_role(p, g.ops)
        mixed = len({p.op(n).variable_latency for n in g.ops}) > 1  # a variable_latency violation already
        if not mixed and g.role != role:
            yield ScheduleError(f"warp group {g.index} is labelled {g.role!r}; with its ops it is a {role!r}",
                                family="consistency")
        if not res.budget_ok(g.registers):
            yield ScheduleError(f"warp group {g.index}: setmaxnreg {g.registers} is not a multiple of "
                                f"{res.setmaxnreg_step} in [{res.setmaxnreg_min}, {res.setmaxnreg_max}]",
                                family="register_file")
        total_regs += res.group_threads(g.warps) * g.registers
        total_warps += res.group_threads(g.warps) // 32
    plan = p.options.register_plan
    if plan is not None:  # a multiset: each used group takes one of its budgets
        extra = Counter(g.registers for g in s.warp_groups) - Counter(plan)
        if extra:
            budgets = sorted(g.registers for g in s.warp_groups)
            yield ScheduleError(f"budgets {budgets} are not taken from the register plan {sorted(plan)} "
                                f"(one budget per group): {sorted(extra.elements())} left over",
                                family="register_file")
    if total_regs > res.register_file and "register_file" not in p.options.relax:
        terms = " + ".join(f"{res.group_threads(g.warps)}x{g.registers}" for g in s.warp_groups)
        yield ScheduleError(f"budgets need {terms} = {total_regs} registers > register file "
                            f"{res.register_file}", family="register_file")
    if total_warps > res.max_warps and "groups" not in p.options.relax:
        yield ScheduleError(f"{total_warps} warps > {res.max_warps} per CTA", family="group_shape")


def _registers(s: Schedule) -> Iterator[ScheduleError]:
    p, res = s.problem, s.problem.resources
    if "registers" in p.options.relax:
        return
    held = _held(s)
    for g in s.warp_groups:
        where = f"regs/{g.index}"
        occ = _occupancy(held, where, s.ii, res.group_overhead)
        limit = min(g.registers, res.max_regs)
        peak = max(occ)
        need = min(res.setmaxnreg_max, res.round_budget(peak))
        if peak <= limit and not need <= g.registers_needed <= g.registers:
            yield ScheduleError(f"warp group {g.index} says it needs {g.registers_needed} registers per "
                                f"thread; its peak of {peak} live ({res.group_overhead} overhead) rounds to "
                                f"{need}, and its setmaxnreg budget is {g.registers}", family="registers")
        if peak > limit:
            t = occ.index(peak)
            yield ScheduleError(f"warp group {g.index} holds {peak} registers per thread at residue {t} "
                                f"> limit {limit} ({res.group_overhead} overhead; live: "
                                f"{_live_terms(held, where, t, s.ii)})", family="registers")


def _blocking(s: Schedule) -> Iterator[ScheduleError]:
    p, start, group = s.problem, s.start, s.group
    if "blocking" in p.options.relax:
        return
    for v in p.ops:
        waits = [e for e in p.in_edges(v.name)
                 if e.src != v.name and (e.blocking or group[e.src] != group[v.name])]
        if not waits:
            continue
        for o in p.ops:
            if o.name == v.name or group[o.name] != group[v.name] or o.issue_cycles == 0:
                continue
            since = (start[v.name] - start[o.name]) % s.ii
            if since < o.issue_cycles:
                yield ScheduleError(
                    f"{v.name} waits for {waits[0].src} at {start[v.name]} while {o.name} (same warp group "
                    f"{group[v.name]}) is issuing: started {since} before (mod II {s.ii}), issues for "
                    f"{o.issue_cycles}", family="blocking", op=v.name)


def _issue(s: Schedule) -> Iterator[ScheduleError]:
    """One issue stream per warp group: its ops' ``issue_cycles`` sum to at most II (each op's copies
    issue once per II, so the stream is busy that long in every II)."""
    p, group = s.problem, s.group
    for g in sorted(set(group.values())):
        mine = [op for op in p.ops if group[op.name] == g and op.issue_cycles > 0]
        total = sum(op.issue_cycles for op in mine)
        if total > s.ii:
            terms = " + ".join(f"{op.name} {op.issue_cycles}" for op in mine)
            unit = "cycles" if p.cycles_per_unit == 1.0 else f"units of {p.cycles_per_unit:g} cycles"
            yield ScheduleError(f"warp group {g} issues for {total} {unit} per iteration ({terms}) > II "
                                f"{s.ii}: one issue stream cannot keep up", family="issue", op=mine[0].name)
