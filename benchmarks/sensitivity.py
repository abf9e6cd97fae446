"""How twill's FlashAttention forward strategy moves when the model's costs and limits move.

For the sub-tiled FA forward (``examples/flash_attention_fwd_subtiled.py``: ``attn_fwd_subtiled_sm90`` on
``h100``, ``attn_fwd_subtiled_sm100`` on ``b200``) the script re-solves the joint problem with one knob
moved by -50 %, -25 %, +25 % and +50 % at a time:

* **GEMM:exp** -- the Tensor Core busy cycles of every GEMM op scaled by the factor (its latency moves by
  the same number of cycles; the exps' MUFU cycles stay), so the GEMM:exp cost ratio moves by it;
* **register limit** -- the per-thread register limit (255) scaled: ``register_limit=`` below 255; above,
  a what-if machine (``base = "<machine>"`` TOML) with ``registers.max_per_thread`` and
  ``registers.setmaxnreg_max`` raised (the 65,536-register file stays);
* **hand-off cost** -- every ``[handoff]`` constant (the reg -> SMEM -> reg spill base and per-KB cost,
  the mbarrier and named-barrier hand-offs) scaled, through a ``base = "<machine>"`` TOML.

Each solve has a time limit (``TIME_LIMIT``); a schedule found under it is reported as not proven optimal,
no schedule as a timeout. For every answer it records II, L, the warp groups and their ops, whether the
two consumer groups still ping-pong (each exp's MUFU time at least half under the other group's Tensor
Core time, never two exps at once: the test of ``tests/test_fa_forward.py``) and whether a sub-tile's
first GEMM is hoisted before the previous iteration's softmax ends. Writes
``benchmarks/results/sensitivity.json`` and ``docs/sensitivity.md``; ``--render`` rebuilds the report
from the JSON; ``--machines h100`` limits the run.

Usage::

    python benchmarks/sensitivity.py [--render] [--machines h100,b200] [--json FILE] [--out FILE.md]
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import networkx as nx

import twill
from twill.errors import InfeasibleError, TwillError
from twill.ir.graph import Graph, Reservation
from twill.ir.machine import Machine, load_machine
from twill.model.bounds import bounds
from twill.model.problem import Problem
from twill.schedule import Schedule

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report_cli import read_json, run_main, write_report

ROOT = Path(__file__).resolve().parents[1]
KERNELS = "examples/flash_attention_fwd_subtiled.py"
CASES = {"h100": f"{KERNELS}::attn_fwd_subtiled_sm90", "b200": f"{KERNELS}::attn_fwd_subtiled_sm100"}
FACTORS = (0.5, 0.75, 1.25, 1.5)
KNOBS = ("gemm_exp", "register_limit", "handoff")
KNOB_TITLES = {"gemm_exp": "GEMM:exp cost ratio", "register_limit": "per-thread register limit",
               "handoff": "cross-warp hand-off (spill) cost"}
TIME_LIMIT = 120.0
HANDOFF_KEYS = ("register_base", "register_per_kb", "mbarrier", "named_barrier")


# ------------------------------------------------------------------------------------ variants
def scale_gemms(graph: Graph, factor: float) -> Graph:
    """A copy of ``graph`` whose GEMM ops hold the Tensor Core ``factor`` times as long.

    Each ``tc`` reservation is scaled (at least one cycle) and the op's latency moves by the same number
    of cycles as its reservation table's length, so the fixed part of the latency (the pipeline drain
    after the last MMA) stays.
    """
    out = copy.deepcopy(graph)
    for op in graph.ops:
        if not any(r.unit == "tc" for r in op.rrt):
            continue
        rrt = tuple(Reservation(r.unit, r.start, max(1, round(r.cycles * factor)), r.count) if r.unit == "tc"
                    else r for r in op.rrt)
        new = dataclasses.replace(op, rrt=rrt)
        new = dataclasses.replace(new, latency=max(0, op.latency + new.cycles - op.cycles))
        out.replace_op(new)
    return out


def variant_machine(base: str, folder: Path, tag: str, sections: dict[str, dict[str, float]]) -> Machine:
    """A machine TOML inheriting ``base`` with the given constants replaced (loaded and returned)."""
    lines = ["schema = 1", f'base = "{base}"', f'name = "{base}-{tag}"',
             f'description = "{base} with {tag} (benchmarks/sensitivity.py what-if)"', ""]
    for section, values in sections.items():
        lines.append(f"[{section}]")
        for key, value in values.items():
            text = repr(int(value)) if float(value).is_integer() else repr(float(value))
            lines.append(f'{key} = {{ value = {text}, source = "what-if: {tag}" }}')
        lines.append("")
    path = folder / f"{base}-{tag}.toml"
    path.write_text("\n".join(lines), encoding="utf-8")
    return load_machine(path)


def variants(graph: Graph, machine: str, folder: Path) -> list[dict[str, Any]]:
    """Every (knob, factor) setting: the graph, the machine and the schedule() keywords to solve with."""
    base = load_machine(machine)
    out: list[dict[str, Any]] = [{"knob": "baseline", "factor": 1.0, "graph": graph, "machine": base,
                                  "kwargs": {}, "detail": "as calibrated"}]
    limit = base.max_regs_per_thread
    for f in FACTORS:
        out.append({"knob": "gemm_exp", "factor": f, "graph": scale_gemms(graph, f), "machine": base,
                    "kwargs": {}, "detail": f"GEMM Tensor Core cycles x{f}"})
        regs = int(limit * f)
        if f < 1:
            out.append({"knob": "register_limit", "factor": f, "graph": graph, "machine": base,
                        "kwargs": {"register_limit": regs}, "detail": f"register_limit={regs}"})
        else:
            step = base.setmaxnreg_step
            cap = -(-regs // step) * step
            m = variant_machine(machine, folder, f"regs{regs}", {"registers": {
                "max_per_thread": regs, "setmaxnreg_max": max(base.setmaxnreg_max, cap)}})
            out.append({"knob": "register_limit", "factor": f, "graph": graph, "machine": m, "kwargs": {},
                        "detail": f"max_per_thread={regs}, setmaxnreg_max={max(base.setmaxnreg_max, cap)}"})
        scaled = {k: base.const(f"handoff.{k}") * f for k in HANDOFF_KEYS}
        m = variant_machine(machine, folder, f"handoff{f}", {"handoff": scaled})
        out.append({"knob": "handoff", "factor": f, "graph": graph, "machine": m, "kwargs": {},
                    "detail": ", ".join(f"{k} {v:g}" for k, v in scaled.items())})
    rank = {"baseline": -1, **{k: i for i, k in enumerate(KNOBS)}}
    return sorted(out, key=lambda v: (rank[v["knob"]], v["factor"]))


# ------------------------------------------------------------------------------------ structure
def _busy(p: Problem, name: str, unit: str) -> int:
    return sum(r.cycles * r.count for r in p.op(name).rrt if r.unit == unit)


def subtiles(p: Problem) -> list[set[str]]:
    """Ops of each sub-tile: components of the graph without the variable-latency loads."""
    g = nx.Graph()
    keep = [op.name for op in p.ops if not op.variable_latency]
    g.add_nodes_from(keep)
    g.add_edges_from((e.src, e.dst) for e in p.edges if e.src in keep and e.dst in keep)
    return sorted((set(c) for c in nx.connected_components(g)), key=lambda c: min(c))


def exps(p: Problem) -> list[str]:
    """Whole-tile exps: MUFU time at least half the longest (the one-row ``alpha`` exps excluded)."""
    longest = max(_busy(p, op.name, "mufu") for op in p.ops)
    return [op.name for op in p.ops if longest and 2 * _busy(p, op.name, "mufu") >= longest]


def _residues(start: int, length: int, ii: int) -> set[int]:
    return {t % ii for t in range(start, start + length)}


def ping_pong(s: Schedule) -> bool:
    """Each exp on its own group, its MUFU time at least half under another compute group's Tensor Core
    time, and never two exps at once (the structure ``tests/test_fa_forward.py`` asserts for FA3)."""
    p, ii = s.problem, s.ii
    found = exps(p)
    producers = {g.index for g in s.warp_groups if g.role == "producer"}
    if len(found) < 2 or len({s.group[e] for e in found}) < len(found):
        return False
    for e in found:
        mufu = _residues(s.start[e], _busy(p, e, "mufu"), ii)
        other: set[int] = set()
        for op in p.ops:
            if _busy(p, op.name, "tc") and s.group[op.name] not in ({s.group[e]} | producers):
                other |= _residues(s.start[op.name], _busy(p, op.name, "tc"), ii)
        if len(mufu & other) < 0.5 * len(mufu):
            return False
    sets = [_residues(s.start[e], _busy(p, e, "mufu"), ii) for e in found]
    return all(not (a & b) for i, a in enumerate(sets) for b in sets[i + 1:])


def hoisted(s: Schedule) -> bool:
    """Some sub-tile's first GEMM of iteration i+1 issues before iteration i's softmax ends."""
    p, ii = s.problem, s.ii
    g = nx.DiGraph((e.src, e.dst) for e in p.edges if e.distance == 0)
    g.add_nodes_from(op.name for op in p.ops)
    for tile in subtiles(p):
        gemms = [n for n in tile if _busy(p, n, "tc")]
        first = [n for n in gemms if not nx.ancestors(g, n) & set(gemms)]
        mine = [e for e in exps(p) if e in tile]
        if len(first) != 1 or len(mine) != 1:
            continue
        soft = {mine[0]} | {n for n in nx.descendants(g, mine[0]) if n in tile and not _busy(p, n, "tc")}
        if s.start[first[0]] + ii < max(s.start[n] + p.op(n).cycles for n in soft):
            return True
    return False


def describe(s: Schedule) -> dict[str, Any]:
    """II, L, groups (with each group's ops labelled by sub-tile), ping-pong, hoisting."""
    p = s.problem
    tiles = subtiles(p)
    tile_of = {n: f"T{i}" for i, t in enumerate(tiles) for n in t}
    groups = []
    for g in s.warp_groups:
        ops = list(g.ops)
        tags = sorted({tile_of.get(n, "load") for n in ops})
        groups.append({"index": g.index, "role": g.role, "warps": g.warps, "registers": g.registers,
                       "ops": ops, "tiles": tags})
    cpu = p.cycles_per_unit
    b = bounds(p)
    return {"ii": s.ii, "ii_cycles": round(s.ii_cycles, 1), "length_cycles": round(s.length * cpu),
            "res_mii_units": b.res_mii, "rec_mii_units": b.rec_mii, "binding_unit": b.binding_unit,
            "cycles_per_unit": round(cpu, 2),
            "stages": s.stages, "proven_optimal": s.certificate.proven_optimal,
            "n_groups": len(s.warp_groups), "groups": groups, "ping_pong": ping_pong(s),
            "hoisted": hoisted(s), "res_mii_cycles": s.bounds_cycles.get("res_mii"),
            "signature": signature(s)}


def signature(s: Schedule) -> list[list[str]]:
    """The warp groups as sorted op lists, sorted: equal signatures mean the same split of the ops."""
    return sorted(sorted(g.ops) for g in s.warp_groups)


# ------------------------------------------------------------------------------------ runs
def solve_variant(v: dict[str, Any]) -> dict[str, Any]:
    """Solve one setting under ``TIME_LIMIT``; the row of the report (status, wall seconds, result)."""
    t0 = time.monotonic()
    row: dict[str, Any] = {"knob": v["knob"], "factor": v["factor"], "detail": v["detail"],
                           "time_limit": v["limit"], "window_limit": v["window"]}
    try:
        s = twill.schedule(v["graph"], v["machine"], time_limit=v["limit"], window_limit=v["window"],
                           **v["kwargs"])
        row["result"] = describe(s)
        skipped = [a for a in s.certificate.attempts if "window_limit" in a.reason]
        row["status"] = ("proven" if s.certificate.proven_optimal else
                         f"not proven: {len(skipped)} window(s) undecided within the window limit, skipped"
                         if skipped else "time limit (best found)")
    except InfeasibleError as exc:
        row["result"] = None
        row["status"] = "time limit, none found" if "time limit" in str(exc) else "infeasible"
        row["error"] = str(exc).replace(f"{ROOT}/", "")[:400]
    except TwillError as exc:  # rejected before solving, e.g. an op needs more registers than the limit
        row["result"] = None
        row["status"] = f"rejected ({type(exc).__name__})"
        row["error"] = str(exc).replace(f"{ROOT}/", "")[:400]  # paths relative to the checkout
    row["wall_s"] = round(time.monotonic() - t0, 1)
    return row


def run_machine(machine: str, log: Callable[[str], None], jobs: int = 1, only: set[str] | None = None,
                limit: float = TIME_LIMIT, window: float | None = None) -> dict[str, Any]:
    """Solve every setting for one machine (or those named ``knob:factor`` in ``only``), ``jobs`` solves
    at a time (each in its own process if > 1), ``limit`` seconds each, ``window`` seconds per joint window
    (``twill.schedule``'s ``window_limit``: an undecided window is skipped and the answer not proven)."""
    started = time.monotonic()
    spec = CASES[machine]
    graph = twill.graph_from_kernel(spec, machine=machine)
    # the what-if machines (variant_machine) change registers and hand-offs, which build_problem reads from
    # the machine, not the op costs lowered here: the graph is scheduled on each of them as it is
    graph.machine = ""
    with tempfile.TemporaryDirectory(prefix="twill-sens-") as tmp:
        todo = [v | {"limit": limit, "window": window} for v in variants(graph, machine, Path(tmp))
                if only is None or f"{v['knob']}:{v['factor']:g}" in only]
        if jobs > 1:
            with ProcessPoolExecutor(max_workers=jobs) as pool:
                rows = list(pool.map(solve_variant, todo))
        else:
            rows = []
            for v in todo:
                log(f"{machine}: {v['knob']} x{v['factor']} ({v['detail']}) ...")
                rows.append(solve_variant(v))
    for row in rows:
        res = row["result"]
        log(f"{machine}: {row['knob']} x{row['factor']}: {row['status']} in {row['wall_s']:.1f} s" + (
            f": II {res['ii']} ({res['ii_cycles']:.0f} cycles), {res['n_groups']} groups, ping-pong "
            f"{res['ping_pong']}" if res else ""))
    return {"machine": machine, "spec": spec, "jobs": jobs, "wall_s": round(time.monotonic() - started),
            "platform": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
                        f"twill {twill.__version__}", "rows": rows}


def _groups_text(res: dict[str, Any]) -> str:
    parts = []
    for g in res["groups"]:
        if g["role"] == "producer":
            parts.append("P(" + ",".join(g["ops"]) + ")")
            continue
        parts.append("+".join(g["tiles"]) + f"[{len(g['ops'])}]")
    return " · ".join(parts)


def _diff(base: dict[str, Any], res: dict[str, Any]) -> str:
    """What changed in the split of ops, in words."""
    if res["signature"] == base["signature"]:
        return "same split"
    if len(res["signature"]) != len(base["signature"]):
        return f"{len(res['signature'])} groups instead of {len(base['signature'])}"
    owner_b = {n: i for i, g in enumerate(base["signature"]) for n in g}
    owner_a = {n: i for i, g in enumerate(res["signature"]) for n in g}
    moved = [n for n in sorted(owner_a)
             if set(res["signature"][owner_a[n]]) != set(base["signature"][owner_b[n]])]
    return f"same count, other split ({len(moved)} ops changed company: {', '.join(moved[:6])}" + (
        ", ..." if len(moved) > 6 else "") + ")"


def _table(data: dict[str, Any]) -> list[str]:
    rows = data["rows"]
    base = rows[0]["result"]
    out = ["| knob | factor | setting | status | solve | II (units) | ResMII (units, unit) | II (cycles) | "
           "ResMII (cycles) | L (cycles) | groups | ping-pong | first GEMM hoisted | split vs baseline |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        res = r["result"]
        head = (f"| {KNOB_TITLES.get(r['knob'], r['knob'])} | {r['factor']:g} | {r['detail']} | "
                f"{r['status']} | {r['wall_s']:.0f} s{_limit(r)} |")
        if res is None:
            out.append(head + " - | - | - | - | - | - | - | - | - |")
            continue
        diff = _diff(base, res) if base else "-"
        out.append(head + f" {res['ii']} | {res['res_mii_units']}, {res['binding_unit']} | "
                   f"{res['ii_cycles']:.0f} | {res['res_mii_cycles']} | "
                   f"{res['length_cycles']} | {_groups_text(res)} | {'yes' if res['ping_pong'] else 'no'} | "
                   f"{'yes' if res['hoisted'] else 'no'} | {diff} |")
    return out


def _narrative(data: dict[str, Any]) -> list[str]:
    """Per knob, the first factor (moving away from 1 each way) at which the strategy changes."""
    rows = data["rows"]
    base = rows[0]["result"]
    if base is None:
        return ["- The baseline did not solve within the time limit; nothing to compare."]
    out = [f"- Baseline: II {base['ii_cycles']:.0f} cycles ({base['ii']} units, ResMII "
           f"{base['res_mii_cycles']} cycles), {base['n_groups']} warp groups ({_groups_text(base)}), "
           f"ping-pong {'yes' if base['ping_pong'] else 'no'}, first GEMM hoisted "
           f"{'yes' if base['hoisted'] else 'no'}."]
    for knob in KNOBS:
        mine = {r["factor"]: r for r in rows if r["knob"] == knob}
        parts = []
        for side, factors in (("down", sorted((f for f in mine if f < 1), reverse=True)),
                              ("up", sorted(f for f in mine if f > 1))):
            flip = None
            for f in factors:
                r = mine[f]
                res = r["result"]
                if res is None and r["status"].startswith("rejected"):
                    parts.append(f"at x{f:g} rejected before solving: {r.get('error', r['status'])}")
                    flip = f
                    break
                if res is None:
                    parts.append(f"at x{f:g} no schedule ({r['status']}, {r['wall_s']:.0f} s)")
                    flip = f
                    break
                changed = []
                if res["signature"] != base["signature"]:
                    changed.append(_diff(base, res))
                if res["ping_pong"] != base["ping_pong"]:
                    changed.append("ping-pong " + ("appears" if res["ping_pong"] else "is lost"))
                if changed:
                    groups = "; ".join(f"{g['role']} " + ", ".join(g["ops"]) for g in res["groups"])
                    parts.append(f"going {side}, the strategy first changes at x{f:g}: " + "; ".join(changed)
                                 + f" (II {res['ii_cycles']:.0f} cycles, bound by {res['binding_unit']}; "
                                 f"groups: {groups})")
                    flip = f
                    break
            if flip is None and factors:
                iis = ", ".join(f"x{f:g}: {mine[f]['result']['ii_cycles']:.0f}" for f in factors)
                parts.append(f"going {side} to x{factors[-1]:g} the split and ping-pong stay "
                             f"(II cycles {iis})")
        out.append(f"- **{KNOB_TITLES[knob]}**: " + "; ".join(parts) + ".")
    unproven = [r for r in rows if r["status"] != "proven" and not r["status"].startswith("rejected")]
    if unproven:
        out.append("- Not proven within the time limit: " + ", ".join(
            f"{KNOB_TITLES.get(r['knob'], r['knob'])} x{r['factor']:g} ({r['status']})"
            for r in unproven) + ".")
    return out


def _limit(row: dict[str, Any]) -> str:
    limit, window = row.get("time_limit", TIME_LIMIT), row.get("window_limit")
    text = "" if limit == TIME_LIMIT else f"limit {limit:.0f} s"
    if window:
        text += (", " if text else "") + f"{window:.0f} s per window"
    return f" ({text})" if text else ""


def _where(m: dict[str, Any]) -> str:
    def how(jobs: int) -> str:
        return "one solve at a time" if jobs == 1 else f"{jobs} solves at a time, each in its own process"

    text = f"Solved in {m['wall_s']:.0f} s on {m['platform']}, {how(m.get('jobs', 1))}."
    for r in m.get("reruns", []):
        text += (f" Solved again ({', '.join(r['settings'])}) in {r['wall_s']:.0f} s on {r['platform']}, "
                 f"{how(r['jobs'])}.")
    return text


def render(data: dict[str, Any]) -> str:
    """The markdown report."""
    text = [
        "# Sensitivity of twill's FA forward strategy to the model's costs and limits",
        "",
        "Generated by `python benchmarks/sensitivity.py` (data in `benchmarks/results/sensitivity.json`; "
        f"do not edit by hand; {TIME_LIMIT:.0f} s limit per solve unless its row says otherwise; where and "
        "how long each machine's solves ran is under its heading).",
        "",
        "The sub-tiled FA forward kernel is re-solved with one knob moved at a time by the factors "
        f"{', '.join(f'x{f:g}' for f in FACTORS)}: the GEMM:exp cost ratio (Tensor Core cycles of every "
        "GEMM scaled, latency shifted by the same cycles; the exps unchanged), the per-thread register "
        "limit (`register_limit=` below the machine's 255; above it a what-if machine with "
        "`registers.max_per_thread` and `registers.setmaxnreg_max` raised and the same 65,536-register "
        "file), and the cross-warp hand-off cost (every `[handoff]` constant of the machine: the reg -> "
        "SMEM -> reg spill base and per-KB cost, the mbarrier and the named barrier; a `base = ...` TOML). "
        "Groups are written `P(...)` for the producer (TMA loads) and `T0`/`T1` for the sub-tile(s) whose "
        "ops a compute group holds, with its op count. *Ping-pong*: the two whole-tile exps sit on "
        "different groups, each with at least half of its MUFU time under another compute group's "
        "Tensor Core time, never both at once (the structure `tests/test_fa_forward.py` asserts). "
        "*Split vs baseline* compares which ops share a group. II in cycles is the II in normalized units "
        "times the cycles per unit of that run's normalization; the normalization maps every duration of "
        "the problem, hand-off costs included, to small integers, so its rounding moves II in cycles by a "
        "few per cent between runs even when the II equals the resource bound in units (compare the two "
        "ResMII columns).",
        "",
    ]
    for m in data["machines"]:
        text += [f"## `{m['spec'].split('::')[1]}` on `{m['machine']}`", "", _where(m), ""]
        text += [*_table(m), "", "What moves the strategy:", "", *_narrative(m), ""]
    return "\n".join(text)


def _merge(old: dict[str, Any], fresh: list[dict[str, Any]]) -> dict[str, Any]:
    """``old`` with the rows of ``fresh`` (same machine, knob and factor) replaced, each machine noting
    where its re-solved rows ran."""
    for new in fresh:
        mine = next(m for m in old["machines"] if m["machine"] == new["machine"])
        by_key = {(r["knob"], r["factor"]): r for r in new["rows"]}
        mine["rows"] = [by_key.get((r["knob"], r["factor"]), r) for r in mine["rows"]]
        mine.setdefault("reruns", []).append(
            {"settings": [f"{k}:{f:g}" for k, f in by_key], "platform": new["platform"],
             "wall_s": new["wall_s"], "jobs": new["jobs"]})
    return old


def main(argv: list[str] | None = None) -> int:
    """Run (or with ``--render`` reload) the study and write the report."""
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--json", default=str(ROOT / "benchmarks" / "results" / "sensitivity.json"))
    ap.add_argument("--out", default=str(ROOT / "docs" / "sensitivity.md"))
    ap.add_argument("--machines", default="h100,b200", help="comma-separated: h100, b200")
    ap.add_argument("--render", action="store_true", help="rebuild the report from --json without solving")
    ap.add_argument("--jobs", type=int, default=1, help="solves at a time, each in its own process (the "
                    "solve times in the report are then those of solves sharing the machine)")
    ap.add_argument("--time-limit", type=float, default=TIME_LIMIT, help="seconds per solve")
    ap.add_argument("--window-limit", type=float, help="seconds per joint window (twill.schedule's "
                    "window_limit); an undecided window is skipped and the answer is not proven")
    ap.add_argument("--only", help="comma-separated knob:factor settings to solve again (knobs: "
                    f"{', '.join(KNOBS)}; factors: {', '.join(f'{f:g}' for f in FACTORS)}; or baseline:1); "
                    "their rows replace those in --json and the report is rewritten")
    args = ap.parse_args(argv)
    machines = [m.strip() for m in args.machines.split(",") if m.strip()]
    if not machines or set(machines) - set(CASES):
        ap.error(f"--machines {args.machines!r}: choose from {', '.join(CASES)}")
    if args.jobs < 1 or args.time_limit <= 0 or (args.window_limit is not None and args.window_limit <= 0):
        ap.error("--jobs must be >= 1, --time-limit and --window-limit > 0")
    known = {"baseline:1"} | {f"{k}:{f:g}" for k in KNOBS for f in FACTORS}
    if args.only and set(args.only.split(",")) - known:
        ap.error(f"--only {args.only!r}: settings are knob:factor, from {', '.join(sorted(known))}")

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    path = Path(args.json)
    data = None
    if not args.render:
        started = time.monotonic()
        only = set(args.only.split(",")) if args.only else None
        machines = [run_machine(m, log, args.jobs, only, args.time_limit, args.window_limit)
                    for m in machines]
        data = {"wall_s": round(time.monotonic() - started), "machines": machines}
        if only:
            data = _merge(read_json(path, ("machines",)), machines)
    write_report(data, path, Path(args.out), render, log, ("machines",))
    return 0


if __name__ == "__main__":
    run_main(main)
