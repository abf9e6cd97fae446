"""Readable views of a schedule: rich tables for the terminal, or plain text.

The library never prints; :func:`render` returns rich renderables and :func:`to_text` a string.
"""

from __future__ import annotations

import io
from collections.abc import Iterator

from rich.console import Console, Group
from rich.text import Text

from twill.render.terminal import PlainTable
from twill.schedule import Schedule

__all__ = ["render", "to_text"]


def _summary(s: Schedule) -> PlainTable:
    cert = s.certificate
    t = PlainTable(title=f"{s.problem.name} on {s.machine} ({s.strategy})", show_header=False, box=None)
    t.add_column(style="bold")
    t.add_column()
    cpu = s.problem.cycles_per_unit
    if round(s.ii_cycles) > round(s.ii_cycles_scaled):  # rounded costs put II x cycles/unit under the MII
        t.add_row("II", f"{s.ii} units = {s.ii_cycles:.0f} cycles, the unnormalized MII ({s.ii} x {cpu:.2f} "
                        f"cycles/unit = {s.ii_cycles_scaled:.0f} with the rounded costs)")
    else:
        t.add_row("II", f"{s.ii} units = {s.ii_cycles:.0f} cycles ({cpu:.1f} cycles/unit)")
    t.add_row("L, T, stages", f"L = {s.length}, T = {s.total_length}, {s.stages} stage(s)")
    t.add_row("lower bound", f"{cert.lower_bound} (ResMII {cert.res_mii}, RecMII {cert.rec_mii})")
    if s.bounds_cycles:
        b = s.bounds_cycles
        t.add_row("bounds in cycles", f"ResMII {b.get('res_mii')}, RecMII {b.get('rec_mii')}, "
                                      f"critical path {b.get('critical_path')}")
    proof = "proven optimal" if cert.proven_optimal else "NOT proven optimal"
    relaxed = sorted(s.problem.options.relax)
    if relaxed:
        proof += f" for the what-if ({', '.join(relaxed)} left out)"
    if not cert.proven_optimal and cert.ii_optimal(s.ii):
        below = ("it is the lower bound" if s.ii == cert.lower_bound
                 else "every smaller II was refuted for every stage count")
        proof += f"; the II is optimal ({below}), the length and the later goals are not proven minimal"
    t.add_row("certificate", Text(proof, style="green" if cert.proven_optimal and not relaxed else "red"))
    if relaxed:
        t.add_row("what-if", Text(f"{', '.join(relaxed)} left out: not a schedule the machine can run",
                                  style="red"))
    if s.problem.options.apart:
        pairs = ", ".join(f"{a} / {b}" for a, b in s.problem.options.apart)
        t.add_row("kept apart", f"{pairs} (on different warp groups: the II is optimal among the schedules "
                                "that keep them apart)")
    return t


def _ops(s: Schedule) -> PlainTable:
    t = PlainTable(title="ops by start (iteration 0; times in units of the problem)")
    for col in ("start", "stage", "group", "op", "kind", "length", "units", "regs", "smem B", "tmem"):
        t.add_column(col, justify="right" if col not in ("op", "kind", "units") else "left")
    for slot in sorted(s.slots.values(), key=lambda x: (x.start, x.warp_group, x.name)):
        op = s.problem.op(slot.name)
        units = ", ".join(f"{r.unit}:{r.cycles}" for r in op.rrt)
        t.add_row(str(slot.start), str(slot.stage), str(slot.warp_group), slot.name, op.kind, str(op.cycles),
                  units, str(op.regs or ""), str(op.smem or ""), str(op.tmem or ""))
    return t


def _groups(s: Schedule) -> PlainTable:
    t = PlainTable(title="warp groups")
    for col in ("group", "role", "warps", "setmaxnreg", "needed", "ops"):
        t.add_column(col)
    for g in s.warp_groups:
        t.add_row(str(g.index), g.role, str(g.warps), str(g.registers), str(g.registers_needed),
                  ", ".join(g.ops))
    return t


def _handoffs(s: Schedule) -> PlainTable | None:
    """Edges whose ends sit on different warp groups, with what each crossing costs (time units): the
    delay it adds past ``d`` (:meth:`Problem.crossing_delay`) and its SMEM-port time, the consumer's load
    plus, on the producer's first crossing edge, its one store."""
    p = s.problem
    crossing = [e for e in p.edges if s.group[e.src] != s.group[e.dst]]
    if not crossing:
        return None
    t = PlainTable(title="hand-offs between warp groups (per iteration; units of the problem)")
    for col in ("edge", "groups", "carrier", "bytes", "added delay", "SMEM port: load (+ store)"):
        t.add_column(col, justify="left" if col in ("edge", "groups", "carrier") else "right")
    stored: set[str] = set()  # a producer stores its value once, however many groups read it
    for e in crossing:
        port = sum(c for op, offset, c in p.transfers([e]) if offset < 0 or op not in stored)
        stored.update(op for op, offset, _ in p.transfers([e]) if offset >= 0)
        t.add_row(e.label, f"{s.group[e.src]} -> {s.group[e.dst]}", e.carrier,
                  str(p.op(e.src).result_bytes or "") if e.carrier == "register" else "",
                  str(p.crossing_delay(e) - e.latency), str(port or ""))
    return t


def _steady(s: Schedule) -> PlainTable:
    rows = s.listing()["steady_state"]
    t = PlainTable(title=f"steady state (one II: times {(s.stages - 1) * s.ii}..{s.stages * s.ii - 1} of T, "
                    f"in units of the problem)")
    t.add_column("t")
    groups = sorted({g.index for g in s.warp_groups})
    for g in groups:
        t.add_column(f"group {g}")
    by_time: dict[int, dict[int, list[str]]] = {}
    for time_, name, it, g in rows:
        by_time.setdefault(time_, {}).setdefault(g, []).append(f"{name}[i{'+' if it else ''}{it or ''}]")
    for time_ in sorted(by_time):
        t.add_row(str(time_), *(", ".join(by_time[time_].get(g, [])) for g in groups))
    return t


def _smem(s: Schedule) -> PlainTable:
    """Each SMEM buffer's bytes x ring depth, and the total against the machine's capacity."""
    use = s.smem_usage()
    t = PlainTable(title="shared memory (bytes per CTA)")
    for col in ("buffer", "bytes", "depth", "bytes x depth"):
        t.add_column(col, justify="left" if col == "buffer" else "right")
    for b in use["buffers"]:
        t.add_row(b["what"], str(b["bytes"]), str(b["depth"]), str(b["total"]))
    if use["loop_invariant"]:
        t.add_row("loop-invariant", str(use["loop_invariant"]), "1", str(use["loop_invariant"]))
    share = 100.0 * use["total"] / use["capacity"] if use["capacity"] else float("inf")
    style = "bold" if use["total"] <= use["capacity"] else "bold red"
    total = f"{use['total']} of {use['capacity']} ({share:.0f} %)"
    t.add_row(Text("total", style="bold"), "", "", Text(total, style=style))
    return t


def _certificate(s: Schedule) -> Iterator[object]:
    cert = s.certificate
    t = PlainTable(title="search (certificate)")
    for col in ("II", "stages", "phase", "status", "s", "reason"):
        t.add_column(col)
    runs: list[list] = []  # IIs refuted by one range query share a row: [first, last, attempt, seconds]
    for a in cert.attempts:
        last = runs[-1] if runs else None
        if last and a.ii == last[1] + 1 and "range query" in a.reason and a.reason == last[2].reason:
            last[1], last[3] = a.ii, last[3] + a.wall_s
        else:
            runs.append([a.ii, a.ii, a, a.wall_s])
    for first, final, a, wall in runs:
        t.add_row(str(first) if first == final else f"{first}..{final}",
                  "" if a.stages is None else str(a.stages), a.phase, a.status, f"{wall:.2f}", a.reason)
    yield t
    for note in cert.notes:
        yield Text(f"note: {note}", style="yellow")


def _stats(s: Schedule) -> PlainTable:
    t = PlainTable(title="solve statistics")
    for col in ("phase", "seconds", "calls"):
        t.add_column(col)
    for p in s.stats:
        t.add_row(p.phase, f"{p.wall_s:.2f}", str(p.calls))
    return t


def render(schedule: Schedule) -> Group:
    """All views of ``schedule`` as one rich renderable."""
    parts: list[object] = [_summary(schedule), _ops(schedule), _groups(schedule)]
    handoffs = _handoffs(schedule)
    if handoffs is not None:
        parts.append(handoffs)
    parts.append(_steady(schedule))
    depths = schedule.buffer_depths()
    if depths:
        t = PlainTable(title="buffer depths (copies alive at once)")
        t.add_column("value")
        t.add_column("copies")
        for name, depth in depths.items():
            t.add_row(name, str(depth))
        parts.append(t)
    parts.append(_smem(schedule))
    parts.extend(_certificate(schedule))
    if schedule.stats:
        parts.append(_stats(schedule))
    return Group(*parts)


def to_text(schedule: Schedule, width: int = 120) -> str:
    """The views of :func:`render` as plain text."""
    console = Console(width=width, record=True, file=io.StringIO(), color_system=None)
    console.print(render(schedule))
    return console.export_text()
