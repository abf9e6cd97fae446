"""The results of a sweep: ranking, the terminal table, the JSON file and the plot.

JSON (``write_json``)::

    {"configs": [{"constexprs": {...}, "num_warps": 8, "num_stages": 3, "fits": true, "reason": null,
                  "predicted_ms": 11.3, "predicted_tflops": 389.1, "schedule": {...} | null,
                  "measured_ms": 12.1 | null, "details": {...}}, ...],
     "kernel": ..., "machine": ..., "problem": {...}, "interrupted": false, "cut": 0, ...}

``configs`` are ranked: the configs that fit by predicted time (fastest first, ties by grid order), then
those that cannot run, in grid order; ``index`` is a config's position in the grid. ``measured_ms`` is the
median time ``--measure`` took on the GPU (:mod:`twill.tune.measure`), null for a config not measured;
the top-level ``measure`` section then holds the count and the Spearman rank correlation.
"""

from __future__ import annotations

import json
import re
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["PUBLIC_KEYS", "plot_title", "rank", "render_table", "short_reason", "to_document", "write_json",
           "write_plot"]

PUBLIC_KEYS = ("constexprs", "num_warps", "num_stages", "fits", "reason", "predicted_ms", "predicted_tflops",
               "schedule", "measured_ms")
"""The keys every config of the JSON has (``details`` and ``error`` come after them)."""


def rank(results: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Results ranked: fitting configs by predicted time, then the rest in grid order."""
    def key(r: Mapping[str, Any]) -> tuple[int, float, int]:
        index = r.get("index")
        index = index if isinstance(index, int) else 1 << 30
        if r.get("fits") and r.get("predicted_ms") is not None:
            return (0, float(r["predicted_ms"]), index)
        return (1, 0.0, index)

    return [dict(r) for r in sorted(results, key=key)]


def _clean(result: Mapping[str, Any]) -> dict[str, Any]:
    out = {k: result.get(k) for k in PUBLIC_KEYS}
    for k in ("predicted_ms", "predicted_tflops", "measured_ms"):
        if out[k] is not None:
            out[k] = round(float(out[k]), 6)
    out["details"] = result.get("details", {})
    out["error"] = result.get("error")
    out["index"] = result.get("index")
    if result.get("measure_error"):
        out["measure_error"] = result["measure_error"]
    return out


def to_document(results: Sequence[Mapping[str, Any]], **meta: Any) -> dict[str, Any]:
    """The JSON document: ranked configs and ``meta`` (kernel, machine, problem, interrupted, cut ...)."""
    return {"configs": [_clean(r) for r in rank(results)], **meta}


def write_json(path: str | Path, results: Sequence[Mapping[str, Any]], **meta: Any) -> None:
    """Write :func:`to_document` to ``path`` (through a temporary file, so a reader never sees half)."""
    target = Path(path)
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_text(json.dumps(to_document(results, **meta), indent=1, default=str) + "\n", encoding="utf-8")
    tmp.replace(target)


def _label(r: Mapping[str, Any], names: Sequence[str]) -> str:
    ce = r.get("constexprs", {})
    return " ".join(f"{n}={ce.get(n)}" for n in names)


def render_table(results: Sequence[Mapping[str, Any]], names: Sequence[str], *, top: int | None = None,
                 title: str = "") -> Any:
    """A :class:`rich.table.Table`: rank, the grid's constexprs, warps, stages, predicted time and TFLOP/s,
    registers, SMEM, CTAs per SM, and a short note (spills; for a config that cannot run, what refused
    it: the whole reason is printed below the table and is in the JSON). Cycles per trip and twill's II
    are in the JSON (``details``, ``schedule``)."""
    from twill.render.terminal import PlainTable

    table = PlainTable(title=title or None)
    for col in ("#", *names, "warps", "stages", "ms", "TFLOP/s", "regs", "SMEM KB", "CTAs/SM", "note"):
        if col == "note":
            table.add_column(col, justify="left", overflow="fold", min_width=10)
        else:
            table.add_column(col, justify="right", no_wrap=True)
    ranked = rank(results)
    fitting = [r for r in ranked if r.get("fits")]
    rest = [r for r in ranked if not r.get("fits")]
    shown = fitting[:top] if top else fitting
    for i, r in enumerate(shown, 1):
        d = r.get("details", {})
        note = "; ".join(x for x in ("wgmma serialized" if d.get("wgmma_serialized") else "",
                                      f"spills {d['spill_bytes']} B" if d.get("spill_bytes") else "") if x)
        if d.get("triton_pipelined") is False and int(r.get("num_stages") or 1) > 1:
            note = "; ".join(x for x in (note, "not pipelined by Triton: num_stages has no effect") if x)
        if d.get("over_peak"):
            note = "; ".join(x for x in (note, f"TFLOP/s above the {d.get('tc_peak_tflops', 0):.0f} peak: "
                                               "check TWILL_TUNE flops") if x)
        table.add_row(str(i), *(str(r["constexprs"].get(n)) for n in names), str(r["num_warps"]),
                      str(r["num_stages"]), _ms(r["predicted_ms"]), f"{r['predicted_tflops']:.0f}",
                      str(d.get("registers", "")), f"{d.get('shared_bytes', 0) / 1024:.0f}",
                      str(d.get("ctas_per_sm", "")), note)
    for r in rest:
        d = r.get("details", {})
        table.add_row("-", *(str(r["constexprs"].get(n)) for n in names), str(r["num_warps"]),
                      str(r["num_stages"]), "-", "-", str(d.get("registers", "-")),
                      f"{d['shared_bytes'] / 1024:.0f}" if "shared_bytes" in d else "-", "-",
                      f"{_refusal(r)}: {short_reason(r.get('reason'))}", style="red")
    return table


def _ms(ms: float) -> str:
    """A predicted time for the table: 4 significant digits, so small problems keep their ranking visible.

    >>> [_ms(x) for x in (12.3456, 0.065432, 0.0011234)]
    ['12.35', '0.06543', '0.001123']
    """
    return f"{ms:.4g}" if ms < 1e4 else f"{ms:.0f}"


def _refusal(r: Mapping[str, Any]) -> str:
    """What the note cell calls a config with no prediction: ``cannot run`` when the hardware, Triton or
    the Gluon backend refuses it; ``not predicted`` when twill cannot model it or its input is bad (the
    kernel may well run)."""
    return "not predicted" if r.get("error") in ("model", "input", "internal") else "cannot run"


REASON_WIDTH = 100
"""Characters of a refusal's reason shown in the table's note cell (the whole reason is printed below the
table and is in the JSON)."""


def _parts(line: str) -> list[str]:
    """``line`` split at ``": "`` that follows a non-space character (``"%c64_i32 : i32"`` in quoted TTGIR
    is no break), outside parentheses and brackets."""
    parts, depth, last = [], 0, 0
    for i, ch in enumerate(line):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth = max(0, depth - 1)
        elif depth == 0 and i > 0 and line.startswith(": ", i) and not line[i - 1].isspace():
            parts.append(line[last:i])
            last = i + 2
    parts.append(line[last:])
    return parts


def short_reason(reason: str | None, width: int = REASON_WIDTH) -> str:
    """A refusal's reason for a table cell: what refused the config (the text before its first ``": "``)
    and why, at most ``width`` characters; the whole reason is in the JSON and printed below the table.

    Only the reason's first line is used (what follows, e.g. the source listing of a Triton
    ``CompilationError``, is detail). Its parts are split at ``": "`` after a word and outside
    parentheses; a reason of three or more parts (``"Gluon codegen: the Gluon backend cannot lower this
    config: graph op 'sin_3' ... has no Gluon lowering"``) keeps its head and what follows its second
    part, the most specific text. Over ``width``, parenthesised asides are dropped (the last first), then
    the text is cut at a word boundary and ends with ``…``.

    >>> short_reason("Gluon codegen: the Gluon backend cannot lower this config: graph op 's_3' (kind math) "
    ...              "is made of math.sin at TTGIR line 12, which has no Gluon lowering (the backend lowers "
    ...              "TMA descriptor loads, pointer loads and stores)")
    "Gluon codegen: graph op 's_3' is made of math.sin at TTGIR line 12, which has no Gluon lowering"
    >>> short_reason("shared memory: Triton allocates 294976 B per CTA, more than the 232448 B a CTA may use",
    ...              width=60)
    'shared memory: Triton allocates 294976 B per CTA, more than…'
    """
    if not reason:
        return ""
    lines = [ln for ln in str(reason).strip().splitlines() if ln.strip()]
    parts = _parts(" ".join(lines[0].split()) if lines else "")
    if len(parts) == 1:
        text = parts[0]
    else:
        text = f"{parts[0]}: {': '.join(parts[2:]) if len(parts) > 2 else parts[1]}"
    text = text.rstrip(" :")
    while len(text) > width and re.search(r"\s*\([^()]*\)", text):
        text = re.sub(r"\s*\([^()]*\)(?!.*\()", "", text, count=1)
    if len(text) <= width:
        return text
    cut = text[: width - 1]
    if text[width - 1] != " " and " " in cut:  # do not end inside a word
        cut = cut[: cut.rindex(" ")]
    return cut.rstrip(" ,;:") + "…"


def plot_title(text: str, width_inches: float) -> str:
    """``text`` wrapped to lines of about 12 characters per inch of figure at 9 points, so that a long
    title (kernel, problem sizes, engine) is not clipped at the figure's edge.

    >>> plot_title("gemm_bias on h200: M=4000, N=3000, K=1000 (3 of 3 configs, process pool (2 workers))", 4)
    'gemm_bias on h200: M=4000, N=3000, K=1000 (3 of\\n3 configs, process pool (2 workers))'
    """
    return "\n".join(textwrap.wrap(text, width=max(40, int(width_inches * 12))))


def write_plot(path: str | Path, results: Sequence[Mapping[str, Any]], names: Sequence[str], *,
               title: str = "") -> None:
    """Predicted time of every config in grid order (a bar each; configs that cannot run marked x)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = sorted(results, key=lambda r: r.get("index") if isinstance(r.get("index"), int) else 1 << 30)
    labels = [f"{_label(r, names)} w{r['num_warps']} s{r['num_stages']}" for r in rows]
    times = [r["predicted_ms"] if r.get("fits") and r.get("predicted_ms") is not None else 0.0 for r in rows]
    fig, ax = plt.subplots(figsize=(max(6.0, 0.28 * len(rows) + 2), 4.8))
    colors = ["tab:blue" if t > 0 else "lightgray" for t in times]
    ax.bar(range(len(rows)), times, color=colors)
    top = max(times) if any(times) else 1.0
    for i, t in enumerate(times):
        if t == 0:
            ax.text(i, top * 0.02, "x", ha="center", va="bottom", color="tab:red", fontsize=8)
    if any(times):
        best = min(range(len(times)), key=lambda i: times[i] if times[i] > 0 else float("inf"))
        ax.bar([best], [times[best]], color="tab:green")
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels(labels, rotation=90, fontsize=7)
    ax.set_ylabel("predicted time (ms)")
    ax.set_title(plot_title(title or "twill tune: predicted time per config (x: cannot run, green: fastest)",
                            fig.get_size_inches()[0]), fontsize=9)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
