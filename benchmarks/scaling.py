"""Scaling benchmark: solve time against loop size on the synthetic loops, with the layer that proved each.

For every size of ``--sizes`` (default 10, 20, 30, 40, 50, 60 ops) and every seed of ``--seeds`` (default
1, 2, 3) the loop is :func:`synthetic.synthetic_graph` ``(n, seed)`` on ``h100``; each is solved once by
``twill.schedule`` in a fresh interpreter with ``--limit`` seconds (default 60), and the record keeps:

* ``status`` (``optimal``, ``not_proven``, ``timeout``, ``infeasible``, ``error`` or ``killed``), ``wall_s``,
  the II, MII and length found, the least II not refuted when none was found;
* ``phases``: seconds spent per search phase (the solver's progress events: ``bounds``, ``normalize``,
  ``modulo``, ``joint``, ``joint_build``, ``range``, ``closing``) and ``dominant_phase``, the largest;
* ``refuted_by``: for the IIs below the answer (or below the least one not refuted), how many each layer
  refuted: ``modulo`` (no modulo schedule), ``joint`` (one II's windows), ``range`` (a range query over
  several IIs), ``closing`` (the every-stage-count closing query); ``method`` is the layer that refuted
  the most, ``mii`` when the proven answer is the lower bound itself, ``undecided`` when the run stopped
  with nothing refuted, ``none`` without a certificate (:func:`method_of`);
* ``load1_before`` / ``load1_after``: the 1-minute load average around the run, and ``cores``.

Results go to ``benchmarks/results/scaling.json`` and the plot to ``docs/img/scaling.svg`` (time against ops,
log scale; marker colour is the method, filled when proven optimal, open when the time limit or an error
stopped it). ``--plot-only`` redraws the plot from the saved file.

    python benchmarks/scaling.py --limit 60 --seeds 1,2,3
    python benchmarks/scaling.py --sizes 10,20 --seeds 1 --limit 20 --out /tmp/scaling.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from synthetic import synthetic_graph  # noqa: E402

MARK = "@@scaling "
PHASES = ("bounds", "normalize", "modulo", "joint", "joint_build", "range", "closing")
LAYERS = ("modulo", "joint", "range", "closing")
DEFAULT_SIZES = (10, 20, 30, 40, 50, 60)
DEFAULT_SEEDS = (1, 2, 3)
COLORS = {"mii": "#7f7f7f", "modulo": "#9467bd", "joint": "#1f77b4", "range": "#2ca02c", "closing": "#d62728",
          "undecided": "#ff7f0e", "none": "#000000"}


def layer_of(phase: str, reason: str) -> str:
    """The layer an attempt's refutation came from (see the module docstring)."""
    if phase != "joint":
        return phase
    if reason.startswith("closing query"):
        return "closing"
    if "range query" in reason:
        return "range"
    return "joint"


def refuted_by(cert: Any, below: int) -> dict[str, int]:
    """Per layer, the IIs under ``below`` that the certificate refutes and that layer refuted (an II
    refuted by several layers counts for the last one that refuted it)."""
    last: dict[int, str] = {}
    for a in cert.attempts:
        if a.ii < below and a.status in ("infeasible", "unsat"):
            last[a.ii] = layer_of(a.phase, a.reason)
    counts = {layer: 0 for layer in LAYERS}
    for layer in last.values():
        counts[layer] = counts.get(layer, 0) + 1
    return {k: v for k, v in counts.items() if v}


def method_of(rec: dict[str, Any]) -> str:
    """The label of a record: the layer that refuted the most IIs; ``mii`` for a proven answer at the
    lower bound (nothing to refute); ``undecided`` for a run stopped with nothing refuted; ``none`` when
    no certificate came back (an error, a killed worker)."""
    counts = rec.get("refuted_by")
    if counts is None:
        return "none"
    if counts:
        return max(counts, key=lambda k: (counts[k], LAYERS.index(k)))
    return "mii" if rec.get("status") == "optimal" else "undecided"


def solve_once(n_ops: int, seed: int, limit: float) -> dict[str, Any]:
    """Solve one synthetic loop in this process; the record described in the module docstring."""
    import twill
    from twill.errors import InfeasibleError, TwillError

    graph = synthetic_graph(n_ops, seed)
    phases: dict[str, float] = {p: 0.0 for p in PHASES}
    bound: dict[str, int] = {}

    def progress(event: twill.ProgressEvent) -> None:
        if event.kind is twill.EventKind.SPENT:
            phases[event.phase or ""] = phases.get(event.phase or "", 0.0) + (event.wall_s or 0.0)
        elif event.kind is twill.EventKind.BOUNDS:
            bound.update(mii=event.mii)

    rec: dict[str, Any] = {"ops": len(graph.ops), "edges": len(graph.edges), "seed": seed, "limit_s": limit}
    t0 = time.monotonic()
    cert = None
    try:
        sched = twill.schedule(graph, "h100", time_limit=limit, progress=progress)
    except InfeasibleError as exc:
        cert = exc.certificate
        timed_out = "time limit" in str(exc) or (cert is not None and any(
            a.status == "timeout" for a in cert.attempts))
        rec.update(status="timeout" if timed_out else "infeasible", message=str(exc)[:300])
    except TwillError as exc:
        rec.update(status="error", message=f"{type(exc).__name__}: {exc}"[:300])
    else:
        cert = sched.certificate
        rec.update(status="optimal" if cert.proven_optimal else "not_proven", ii=sched.ii,
                   length=sched.length, ii_cycles=round(sched.ii_cycles, 1), groups=len(sched.warp_groups))
    rec["wall_s"] = round(time.monotonic() - t0, 3)
    rec.update(bound)
    rec["phases"] = {k: round(v, 3) for k, v in phases.items() if v}
    rec["dominant_phase"] = max(rec["phases"], key=rec["phases"].get) if rec["phases"] else None
    if cert is not None:
        below = rec.get("ii")
        if below is None:  # the least II not refuted
            refuted = {a.ii for a in cert.attempts if a.status in ("infeasible", "unsat")}
            below = cert.lower_bound
            while below in refuted:
                below += 1
            rec["reached_ii"] = below
        rec["refuted_by"] = refuted_by(cert, below)
    rec["method"] = method_of(rec)
    return rec


def run_one(n_ops: int, seed: int, limit: float) -> dict[str, Any]:
    """:func:`solve_once` in a fresh interpreter (killed after ``2 limit + 60`` s)."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", f"{n_ops}:{seed}",
           "--limit", str(limit)]
    load = os.getloadavg()[0]
    start = time.monotonic()
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=2 * limit + 60, cwd=ROOT)
    except subprocess.TimeoutExpired:
        rec = {"ops": n_ops, "seed": seed, "limit_s": limit, "status": "killed", "method": "none",
               "wall_s": round(time.monotonic() - start, 3), "message": "worker outlived 2 T + 60 s"}
    else:
        lines = [line for line in out.stdout.splitlines() if line.startswith(MARK)]
        if lines:
            rec = json.loads(lines[-1][len(MARK):])
        else:
            tail = " | ".join((out.stderr or out.stdout).strip().splitlines()[-3:])
            rec = {"ops": n_ops, "seed": seed, "limit_s": limit, "status": "error", "method": "none",
                   "wall_s": round(time.monotonic() - start, 3), "message": tail[:300]}
    rec["load1_before"] = round(load, 2)
    rec["load1_after"] = round(os.getloadavg()[0], 2)
    return rec


def environment() -> dict[str, Any]:
    """Machine, cores, commit and date of the run."""
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=ROOT, check=False).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                               text=True, cwd=ROOT, check=False).stdout.strip()
    except OSError:
        commit, dirty = "", ""
    if os.environ.get("SCALING_COMMIT"):  # a run from an exported snapshot names its commit
        commit, dirty = os.environ["SCALING_COMMIT"], ""
    return {"cores": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
            "commit": commit + ("+local changes" if dirty else ""),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}


def plot(data: dict[str, Any], path: Path) -> None:
    """Wall time against ops (log scale); colour: the method that refuted most IIs; filled: proven."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams["svg.hashsalt"] = "twill-scaling"
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    seen: set[str] = set()
    by_size: dict[int, list[float]] = {}
    for rec in data["runs"]:
        method = rec.get("method", "none")
        proven = rec["status"] == "optimal"
        color = COLORS.get(method, "#000000")
        y = max(rec["wall_s"], 1e-2)
        ax.scatter([rec["ops"]], [y], s=36, facecolors=color if proven else "none", edgecolors=color,
                   label=method if method not in seen else None, zorder=3)
        seen.add(method)
        by_size.setdefault(rec["ops"], []).append(rec["wall_s"])
    xs = sorted(by_size)
    ax.plot(xs, [max(statistics.median(by_size[x]), 1e-2) for x in xs], color="#444444", lw=0.8, zorder=1,
            label="median")
    limit = max((rec["limit_s"] for rec in data["runs"]), default=None)
    if limit:
        ax.axhline(limit, color="#999999", lw=0.6, ls="--", zorder=0)
    ax.set_yscale("log")
    ax.set_xlabel("ops in the synthetic loop (benchmarks/synthetic.py, h100)")
    ax.set_ylabel("twill.schedule wall time, s")
    env = data.get("environment", {})
    ax.set_title(f"Solve time vs loop size (filled: proven optimal; open: stopped; dashed: limit {limit:g} s;"
                 f" "
                 f"{env.get('cores', '?')} cores, commit {env.get('commit', '?')})", fontsize=7)
    ax.grid(True, which="both", lw=0.3, alpha=0.5)
    ax.legend(fontsize=7, loc="upper left", title="refuted most IIs", title_fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, metadata={"Date": None})
    plt.close(fig)


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x.strip())


def main(argv: Sequence[str] | None = None) -> int:
    """Command line; see the module docstring."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=_ints, default=DEFAULT_SIZES)
    ap.add_argument("--seeds", type=_ints, default=DEFAULT_SEEDS)
    ap.add_argument("--limit", type=float, default=60.0, help="time limit per loop, s")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "scaling.json")
    ap.add_argument("--plot", type=Path, default=ROOT / "docs" / "img" / "scaling.svg")
    ap.add_argument("--plot-only", action="store_true")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        n, seed = (int(x) for x in args.worker.split(":"))
        print(MARK + json.dumps(solve_once(n, seed, args.limit)), flush=True)
        return 0
    if args.plot_only:  # labels recomputed by the current rule (method_of)
        data = json.loads(args.out.read_text())
        for rec in data["runs"]:
            rec["method"] = method_of(rec)
        args.out.write_text(json.dumps(data, indent=1) + "\n")
        plot(data, args.plot)
        return 0
    data: dict[str, Any] = {"environment": environment(), "sizes": list(args.sizes),
                            "seeds": list(args.seeds), "runs": []}
    for n in args.sizes:
        for seed in args.seeds:
            rec = run_one(n, seed, args.limit)
            data["runs"].append(rec)
            print(f"{n} ops seed {seed}: {rec['status']} in {rec['wall_s']:.1f} s, "
                  f"method {rec.get('method')}, "
                  f"II {rec.get('ii', rec.get('reached_ii'))} (MII {rec.get('mii')}), "
                  f"load {rec['load1_before']}", flush=True)
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(data, indent=1) + "\n")
    plot(data, args.plot)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
