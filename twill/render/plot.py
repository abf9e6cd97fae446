"""Pictures of a schedule: a per-warp-group Gantt chart and the modulo reservation table.

:func:`figure` draws two panels with matplotlib (through the Agg canvas: no display, no pyplot state):

* **Gantt chart** of the straight-line program of length ``T = (stages - 1) II + L``: one band per warp
  group, each op of each iteration a bar from its start for its reservation-table length, coloured by the
  unit it uses longest. The part of the bar where the op's warps are issuing is solid; the rest (an
  asynchronous Tensor Core, TMA or TMEM op running on its unit after the warps moved on) is pale. Bars
  that overlap inside a group are stacked in lanes. The prologue, the steady state (the window
  ``[(stages - 1) II, stages II)`` that repeats once per iteration) and the epilogue are shaded.
* **Modulo reservation table** as a heatmap: for each unit and each cycle of the steady state (residue
  modulo II), the fraction of its capacity in use.

Times are drawn in machine cycles (normalized units times ``cycles_per_unit``).
``twill plot OUT.json -o FILE.svg`` (or ``.png``, ``.pdf``) writes the picture.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from twill.errors import TwillError
from twill.ir.graph import Op
from twill.schedule import Schedule

__all__ = ["UNIT_COLORS", "figure", "mrt", "save"]

UNIT_COLORS: dict[str, str] = {
    "tc": "#d62728",
    "tma": "#1f77b4",
    "mufu": "#9467bd",
    "alu": "#2ca02c",
    "smem": "#ff7f0e",
    "tmem": "#8c564b",
    "lsu": "#17becf",
}
"""Colour of each bundled unit; other units take the remaining colours of the tab10 cycle."""

_SPARE = ("#e377c2", "#7f7f7f", "#bcbd22", "#aec7e8", "#98df8a")


def _unit_of(op: Op) -> str:
    """The unit an op uses longest (its colour); ``""`` for an op that uses no unit (a view)."""
    return max(op.rrt, key=lambda r: (r.cycles * r.count, -r.start)).unit if op.rrt else ""


def _colors(units: list[str]) -> dict[str, str]:
    out, spare = {}, iter(_SPARE)
    for u in units:
        out[u] = UNIT_COLORS.get(u) or next(spare, "#333333")
    return out


def mrt(schedule: Schedule) -> dict[str, list[float]]:
    """Fraction of each unit's capacity in use at each residue ``0 .. II-1`` of the steady state."""
    p, ii = schedule.problem, schedule.ii
    out: dict[str, list[float]] = {}
    for unit, cap in p.resources.units.items():
        used = [0] * ii
        for op in p.ops:
            for r in op.rrt:
                if r.unit == unit:
                    for c in range(r.start, r.end):
                        used[(schedule.slots[op.name].start + c) % ii] += r.count
        if any(used):
            out[unit] = [u / cap for u in used]
    return out


def _occupants(schedule: Schedule, unit: str) -> list[tuple[int, int, str]]:
    """Runs ``(first, last + 1, ops)`` of residues where the same ops hold ``unit``."""
    p, ii = schedule.problem, schedule.ii
    who: list[list[str]] = [[] for _ in range(ii)]
    for op in p.ops:
        for r in op.rrt:
            if r.unit == unit:
                for c in range(r.start, r.end):
                    t = (schedule.slots[op.name].start + c) % ii
                    if op.name not in who[t]:
                        who[t].append(op.name)
    runs: list[tuple[int, int, str]] = []
    for t, names in enumerate(who):
        label = ", ".join(names)
        if runs and runs[-1][2] == label and runs[-1][1] == t:
            runs[-1] = (runs[-1][0], t + 1, label)
        else:
            runs.append((t, t + 1, label))
    return [r for r in runs if r[2]]


def _lanes(bars: list[tuple[float, float]]) -> list[int]:
    """Greedy lane for each ``(start, end)`` bar (sorted by start) so that bars in a lane do not overlap."""
    ends: list[float] = []
    out = []
    for start, end in bars:
        for k, e in enumerate(ends):
            if e <= start + 1e-9:
                ends[k] = end
                out.append(k)
                break
        else:
            ends.append(end)
            out.append(len(ends) - 1)
    return out


def figure(schedule: Schedule, *, title: str | None = None, width: float = 13.0) -> Any:
    """A :class:`matplotlib.figure.Figure` with the Gantt chart and the MRT heatmap of ``schedule``.

    Parameters
    ----------
    schedule : Schedule
        The schedule to draw.
    title : str, optional
        Title; default: loop name, machine, strategy, II and L in cycles.
    width : float
        Figure width in inches.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch, Rectangle

    p, ii, n = schedule.problem, schedule.ii, schedule.stages
    cpu = p.cycles_per_unit
    total = schedule.total_length
    units = [u for u in p.resources.units if any(r.unit == u for op in p.ops for r in op.rrt)]
    colors = _colors(units)
    groups = sorted({s.warp_group for s in schedule.slots.values()})

    # bars per group: (start, end, issue_end, op, iteration)
    bars: dict[int, list[tuple[float, float, float, str, int]]] = {g: [] for g in groups}
    for name, slot in schedule.slots.items():
        op = p.op(name)
        for i in range(n):
            t = (slot.start + i * ii) * cpu
            bars[slot.warp_group].append((t, t + op.cycles * cpu, t + op.issue_cycles * cpu, name, i))
    lanes, rows = {}, {}
    for g in groups:
        bars[g].sort()
        lanes[g] = _lanes([(b[0], b[1]) for b in bars[g]])
        rows[g] = max(lanes[g], default=0) + 1

    heat = mrt(schedule)
    gantt_h = 0.45 * sum(rows.values()) + 0.4 * len(groups) + 1.2
    heat_h = 0.35 * max(1, len(heat)) + 1.0
    fig = Figure(figsize=(width, gantt_h + heat_h), layout="constrained")
    FigureCanvasAgg(fig)
    ax, hx = fig.subplots(2, 1, height_ratios=[gantt_h, heat_h])

    # ---- Gantt
    y = 0.0
    ticks, labels = [], []
    role = {g.index: g.role for g in schedule.warp_groups}
    regs = {g.index: g.registers for g in schedule.warp_groups}
    for g in reversed(groups):
        height = rows[g]
        ticks.append(y + height / 2)
        labels.append(f"group {g}\n{role.get(g, '')}, {regs.get(g, '?')} regs")
        for (start, end, issue_end, name, i), lane in zip(bars[g], lanes[g], strict=True):
            color = colors.get(_unit_of(p.op(name)), "#c7c7c7")
            top = y + height - lane - 0.9
            ax.add_patch(Rectangle((start, top), end - start, 0.8, facecolor=color, alpha=0.3,
                                   edgecolor=color, linewidth=0.6, gid=f"op:{name}:{i}"))
            if issue_end > start:
                ax.add_patch(Rectangle((start, top), issue_end - start, 0.8, facecolor=color, alpha=0.9,
                                       linewidth=0))
            label = f"{name}" + (f" [{i}]" if n > 1 else "")
            if (end - start) / (total * cpu) > 0.025:
                ax.text(start + 0.01 * ii * cpu, top + 0.4, label, fontsize=6.5, va="center", ha="left",
                        clip_on=True)
        y += height + 0.4
    for k, (lo, hi, what) in enumerate(((0, (n - 1) * ii, "prologue"), ((n - 1) * ii, n * ii, "steady state"),
                                        (n * ii, total, "epilogue"))):
        if hi <= lo:
            continue
        ax.axvspan(lo * cpu, hi * cpu, color=("#f0f0f0", "#fff6d5", "#f0f0f0")[k], zorder=0)
        ax.text((lo + hi) / 2 * cpu, y - 0.1, what, ha="center", va="bottom", fontsize=8, style="italic")
    ax.set_xlim(0, total * cpu)
    ax.set_ylim(-0.2, y + 0.5)
    ax.set_yticks(ticks, labels, fontsize=7)
    ax.set_xlabel("cycles (iteration 0 starts at 0; iteration i is shifted by i x II)")
    ax.legend(handles=[Patch(color=colors[u], label=u) for u in units], loc="upper left", fontsize=7,
              bbox_to_anchor=(1.005, 1.0), frameon=False, title="unit", title_fontsize=7)
    head = title or (f"{p.name} on {schedule.machine} ({schedule.strategy}): II = {schedule.ii_cycles:.0f} "
                     f"cycles, L = {schedule.length * cpu:.0f} cycles, {n} stage(s), "
                     f"{len(groups)} warp group(s)")
    ax.set_title(head, fontsize=10, loc="left")

    # ---- MRT heatmap
    names = list(heat)
    if names:
        image = hx.imshow([heat[u] for u in names], aspect="auto", cmap="Blues", vmin=0, vmax=1,
                          interpolation="nearest", extent=(0, ii * cpu, len(names), 0))
        hx.set_yticks([k + 0.5 for k in range(len(names))], names, fontsize=7)
        for k, unit in enumerate(names):
            for first, last, label in _occupants(schedule, unit):
                if (last - first) / ii * 150 >= len(label):  # room for the text at this width
                    full = heat[unit][first] > 0.5
                    hx.text((first + last) / 2 * cpu, k + 0.5, label, ha="center", va="center", fontsize=6.5,
                            color="white" if full else "black")
                hx.axvline(first * cpu, ymin=1 - (k + 1) / len(names), ymax=1 - k / len(names),
                           color="white", linewidth=0.8)
        fig.colorbar(image, ax=hx, label="fraction of capacity", pad=0.01)
    hx.set_xlabel("cycle of the steady state (modulo II)")
    hx.set_title("modulo reservation table", fontsize=9)
    return fig


def save(schedule: Schedule, path: str | Path, **options: Any) -> Path:
    """Write :func:`figure` to ``path``; the format follows the suffix (``.svg``, ``.png``, ``.pdf``).

    Raises
    ------
    TwillError
        The suffix is not a format matplotlib writes, ``width`` (inches) is not a number in
        [2, 100], or the file cannot be written (``cannot write PATH: REASON``).
    """
    out = Path(path)
    fmt = out.suffix.lstrip(".").lower()
    if fmt not in ("svg", "png", "pdf"):
        raise TwillError(f"{path}: the picture format must be .svg, .png or .pdf")
    width = options.get("width", 13.0)
    if isinstance(width, bool) or not isinstance(width, (int, float)) or not 2 <= width <= 100:
        raise TwillError(f"width {width!r} must be a number of inches in [2, 100]")
    import matplotlib

    # no dates and fixed element ids: the same schedule gives the same file
    metadata = {"svg": {"Date": None}, "pdf": {"CreationDate": None}, "png": {}}[fmt]
    with matplotlib.rc_context({"svg.hashsalt": "twill", "svg.fonttype": "none"}):
        fig = figure(schedule, **options)
        try:
            fig.savefig(out, format=fmt, dpi=150 if fmt == "png" else None, metadata=metadata)
        except OSError as exc:
            raise TwillError(f"cannot write {path}: {exc.strerror or exc}") from exc
    return out
