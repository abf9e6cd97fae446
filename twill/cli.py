"""The ``twill`` command line.

::

    twill schedule FILE.py[::KERNEL] --machine h100 [--constexpr K=V ...] [--json OUT]
                   [--solver yices|z3|cpsat] [--time-limit S] [--strategy joint|swp] [--max-groups N]
                   [--register-limit R] ...
    twill schedule FILE.ttgir --machine h100        # a TTGIR file
    twill schedule FILE.py::build_graph             # a function returning a twill.Graph
    twill show OUT.json                             # print a saved schedule
    twill verify OUT.json                           # exit 0 only if the schedule is valid
    twill machines                                  # list the bundled machines

Exit codes: 0 success, 1 no schedule (infeasible or time limit), 2 bad input, 3 invalid schedule
(``verify``), 130 interrupted.
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import os
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.markup import escape

from twill.errors import FrontendError, InfeasibleError, InterruptedSolveError, TwillError, TwillWarning
from twill.model.problem import RELAXABLE
from twill.render.terminal import make_console
from twill.solvers.modulo.methods import METHODS

__all__ = ["check_output", "load_graph", "main"]

_err = make_console(stderr=True)


def check_output(path: str | os.PathLike[str], *, folder: bool = False) -> Path:
    """``path`` as a :class:`~pathlib.Path` once it looks writable; checked before a solve, so that a long
    solve is not lost to a typo in the output name.

    A file needs an existing, writable parent folder and must not be a folder itself; a ``folder`` may
    not exist yet (it is created), but its nearest existing ancestor must be a writable folder.

    Raises
    ------
    TwillError
        Naming the path and what is wrong with it.
    """
    p = Path(path)
    if folder:
        if p.exists() and not p.is_dir():
            raise TwillError(f"cannot write into {path}: it exists and is not a folder")
        base = next(a for a in (p, *p.parents) if a.exists())
    else:
        if p.is_dir():
            raise TwillError(f"cannot write {path}: it is a folder; give a file name")
        base = p.parent
        if not base.is_dir():
            raise TwillError(f"cannot write {path}: there is no folder {base}")
        if p.exists() and not os.access(p, os.W_OK):
            raise TwillError(f"cannot write {path}: permission denied")
    if not base.is_dir() or not os.access(base, os.W_OK):
        raise TwillError(f"cannot write {path}: {base} is not a writable folder")
    return p


def cli_constexprs(pairs: Sequence[str]) -> dict[str, Any]:
    """``--constexpr NAME=VALUE`` pairs as a dict: ints, then floats, ``True``/``False`` as bools, else text.

    Raises :class:`FrontendError` naming a pair without ``=`` or a name. (Issue 23 pass 2 merges this with
    :func:`twill.calibrate.regs.parse_constexprs`.)
    """
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise FrontendError(f"--constexpr {pair!r} must look like NAME=VALUE")
        try:
            out[key] = int(value)
        except ValueError:
            try:
                out[key] = float(value)
            except ValueError:
                out[key] = {"True": True, "False": False}.get(value, value)
    return out


def _builder(path: Path, name: str) -> Any:
    """The attribute ``name`` of the Python file ``path`` if it is a plain function (not a Triton kernel)."""
    spec = importlib.util.spec_from_file_location(f"twill_input_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise FrontendError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # the user's file: any error it raises is bad input, named with its file
        raise FrontendError(f"cannot import {path}: {type(exc).__name__}: {exc}") from exc
    attr = getattr(module, name, None)
    entries = getattr(module, "TWILL_KERNELS", None)
    if attr is None and not (isinstance(entries, dict) and name in entries):
        functions = sorted(k for k, v in vars(module).items() if not k.startswith("_") and (
            (inspect.isfunction(v) and v.__module__ == spec.name) or hasattr(v, "fn")))
        listed = f"; TWILL_KERNELS entries: {', '.join(sorted(entries))}" if isinstance(entries, dict) else ""
        raise FrontendError(f"{path} has no function or kernel entry {name!r} (functions: "
                            f"{', '.join(functions) or 'none'}{listed})")
    if attr is None or not callable(attr) or hasattr(attr, "run") or hasattr(attr, "fn"):
        return None
    return attr


def load_graph(target: str, machine: str, constexprs: dict[str, Any] | None = None,
               num_warps: int | None = None, num_stages: int | None = None,
               loop_index: int | None = None) -> Any:
    """The loop graph named on the command line: a kernel, a TTGIR file, a graph JSON or a builder function.

    Raises
    ------
    FrontendError
        The file does not exist or holds nothing twill can read.
    """
    from twill.ir.graph import Graph

    path_text, _, name = target.partition("::")
    path = Path(path_text)
    if not path.is_file():
        raise FrontendError(f"no such file: {path_text}")
    if num_warps is not None and (num_warps < 1 or num_warps & (num_warps - 1)):
        raise FrontendError(f"--num-warps {num_warps} must be a power of two >= 1 (Triton's warps per CTA)")
    if num_stages is not None and num_stages < 1:
        raise FrontendError(f"--num-stages {num_stages} must be >= 1")
    if loop_index is not None and loop_index < 0:
        raise FrontendError(f"--loop {loop_index} must be >= 0 (the loop's index among sibling loops)")
    given = {"--constexpr": bool(constexprs), "--num-warps": num_warps is not None,
             "--num-stages": num_stages is not None}
    compile_only = [flag for flag, used in given.items() if used]
    not_compiled = compile_only + (["--loop"] if loop_index is not None else [])  # flags a graph ignores
    if path.suffix == ".ttgir":
        from twill.frontend.lower import graph_from_ttgir

        _refuse(compile_only, target, "a TTGIR file is compiled already")
        return graph_from_ttgir(path, machine, loop_index=loop_index)
    if path.suffix == ".json":
        import json

        try:
            data = json.loads(_read_text(path))
        except (json.JSONDecodeError, RecursionError) as exc:
            raise FrontendError(f"{path_text} is not a JSON graph: {exc}") from exc
        if isinstance(data, dict) and data.get("kind") == "twill.schedule":
            raise FrontendError(f"{path_text} is a saved schedule, not a graph; use twill show or "
                                f"twill verify")
        _refuse(not_compiled, target, "a graph JSON is not compiled")
        return Graph.from_dict(data)
    if path.suffix != ".py":
        raise FrontendError(f"{path_text}: expected a .py kernel file, a .ttgir file or a graph .json")
    if name:
        builder = _builder(path, name)
        if builder is not None:
            _refuse(not_compiled, target, "a graph builder is not compiled")
            try:
                inspect.signature(builder).bind()
            except TypeError as exc:
                raise FrontendError(f"{target}: a graph builder is called with no arguments, but "
                                    f"{name}{inspect.signature(builder)} needs some") from exc
            try:
                graph = builder()
            except TwillError:
                raise
            except Exception as exc:  # the user's builder: its error is bad input, named with its place
                raise FrontendError(f"{target}: the graph builder raised {type(exc).__name__}: "
                                    f"{exc}") from exc
            if not isinstance(graph, Graph):
                raise FrontendError(f"{target} returned {type(graph).__name__}, not a twill.Graph")
            return graph
    from twill.frontend.lower import graph_from_kernel

    options: dict[str, Any] = {}
    if num_warps is not None:
        options["num_warps"] = num_warps
    if num_stages is not None:
        options["num_stages"] = num_stages
    return graph_from_kernel(target, machine, constexprs=constexprs or None, loop_index=loop_index, **options)


def _refuse(flags: list[str], target: str, why: str) -> None:
    """:class:`FrontendError` if compile flags were given for an input that is not compiled (they would be
    ignored otherwise)."""
    if flags:
        verb = "applies" if len(flags) == 1 else "apply"
        raise FrontendError(f"{' and '.join(flags)} {verb} only to a Triton kernel; {target}: {why}")


def _progress(status: Any) -> Any:
    state: dict[str, Any] = {"ii": None}

    def update(event: dict[str, Any]) -> None:
        kind = event["event"]
        if kind == "bounds":
            state["bounds"] = f"MII {event['mii']} (ResMII {event['res_mii']}, RecMII {event['rec_mii']})"
        elif kind == "ii":
            state["ii"] = event["ii"]
        elif kind == "phase":
            window = f", {event['stages']} stage(s)" if event.get("stages") else ""
            where = f"II = {event['ii']}" if "ii" in event else f"II = {event['lo']}..{event['hi']}"
            status.update(f"{where}{window}: {event['phase']}  [{event['elapsed']:.1f}s]  "
                          f"{state.get('bounds', '')}")
        elif kind == "attempt" and event["status"] != "sat":
            window = f", {event['stages']} stage(s)" if event.get("stages") else ""
            _err.print(f"  II = {event['ii']}{window}: {event['phase']} {event['status']} "
                       f"[{event['elapsed']:.1f}s]")
        elif kind == "range" and event["refuted"] >= event["lo"]:
            _err.print(f"  II = {event['lo']}..{event['refuted']}: joint unsat (one range query, up to "
                       f"{event['stages']} stages) [{event['elapsed']:.1f}s]")

    return update


def _cmd_schedule(args: argparse.Namespace) -> int:
    from twill.render.show import render
    from twill.search.algorithm1 import schedule

    out = check_output(args.json) if args.json else None
    graph = load_graph(args.file, args.machine, cli_constexprs(args.constexpr), args.num_warps,
                       args.num_stages, args.loop)
    console = make_console()
    console.print(f"[bold]{graph.name}[/]: {len(graph.ops)} ops, {len(graph.edges)} edges "
                  f"(from {graph.source or args.file})")
    started = time.monotonic()
    try:
        with console.status("solving...") as status:
            sched = schedule(
                graph, args.machine, solver=args.solver, ilp=args.ilp, modulo=args.modulo,
                strategy=args.strategy, time_limit=args.time_limit, max_groups=args.max_groups,
                register_limit=args.register_limit, cross_group=not args.no_cross_group,
                max_stages=args.max_stages, stage_slack=args.stage_slack, prefetch=args.prefetch,
                normalize_upper=args.normalize_upper, window_limit=args.window_limit,
                ranges=not args.no_ranges, relax=frozenset(args.relax),
                apart=[tuple(n.strip() for n in pair.split(",")) for pair in args.apart],
                progress=_progress(status))
    except InterruptedSolveError as exc:
        if exc.schedule is not None:  # the best schedule found before Ctrl-C, marked not proven
            if out is not None:
                out.write_text(exc.schedule.to_json())
            console.print(render(exc.schedule))
            if out is not None:
                console.print(f"wrote {out} (the best schedule before the interrupt, not proven optimal)")
        raise
    if args.relax:
        console.print(f"[bold]what-if[/]: {', '.join(sorted(set(args.relax)))} left out; "
                      "not a schedule the machine can run")
    if out is not None:  # saved before printing: a closed pipe must not lose the solve
        out.write_text(sched.to_json())
    console.print(render(sched))
    console.print(f"solved in {time.monotonic() - started:.1f}s")
    if out is not None:
        console.print(f"wrote {out}")
    return 0


def _read_text(path: Path) -> str:
    """The UTF-8 text of ``path``; :class:`TwillError` if it cannot be read or is not text."""
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise TwillError(f"{path} is not a text file ({exc.reason} at byte {exc.start})") from exc
    except OSError as exc:
        raise TwillError(f"cannot read {path}: {exc.strerror or exc}") from exc


def _read_schedule(path: str) -> Any:
    from twill.schedule import Schedule

    p = Path(path)
    if not p.is_file():
        raise TwillError(f"no such file: {path}")
    text = _read_text(p)
    try:
        return Schedule.from_json(text)
    except TwillError as exc:
        raise TwillError(f"{path}: {exc}") from exc


def _cmd_show(args: argparse.Namespace) -> int:
    from twill.render.show import render

    make_console().print(render(_read_schedule(args.file)))
    return 0


def _cmd_verify(args: argparse.Namespace) -> int:
    from twill.verify import violations

    sched = _read_schedule(args.file)
    relaxed = sorted(sched.problem.options.relax)
    if relaxed:  # a what-if: check it against the machine, every family included
        real = replace(sched.problem, options=replace(sched.problem.options, relax=frozenset()))
        sched = replace(sched, problem=real)
    found = violations(sched)
    console = make_console()
    what_if = f" (a what-if schedule, solved with {', '.join(relaxed)} left out)" if relaxed else ""
    if not found:
        console.print(f"[green]{escape(args.file)}: valid[/] (every constraint family holds{what_if})")
        return 0
    if relaxed:
        console.print(f"{escape(args.file)}: a what-if schedule, solved with {', '.join(relaxed)} left out; "
                      "against the machine:")
    for err in found:
        console.print(f"[red]violation[/] {escape(str(err))}")
    return 3


def _cmd_machines(args: argparse.Namespace) -> int:
    from rich.table import Table

    from twill.ir.machine import known_machines, load_machine

    table = Table(title="bundled machines")
    for col in ("name", "arch", "description", "units (capacity)", "regs", "SMEM/CTA", "TMEM cols"):
        table.add_column(col)
    for name in known_machines():
        m = load_machine(name)
        units = ", ".join(f"{u.name}:{u.capacity}" for u in m.units.values())
        table.add_row(m.name, m.arch, m.description, units, f"{m.register_file} (<= {m.max_regs_per_thread})",
                      str(m.smem_per_cta), str(m.tmem_columns or "-"))
    make_console().print(table)
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="twill", description="Optimal software pipelining and warp "
                                     "specialization for Tensor Core GPU loops.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("schedule", help="find the optimal schedule of a kernel's main loop")
    p.add_argument("file", help="FILE.py[::KERNEL], FILE.py::graph_builder, FILE.ttgir or a graph .json")
    p.add_argument("--machine", default="h100", help="bundled machine name or TOML path (default h100)")
    p.add_argument("--constexpr", action="append", default=[], metavar="K=V", help="override a constexpr")
    p.add_argument("--num-warps", type=int, help="compile with this many warps")
    p.add_argument("--num-stages", type=int, help="compile with this num_stages")
    p.add_argument("--loop", type=int, metavar="N", help="schedule the N-th of sibling loops (0-based, in "
                   "program order; default: the only loop)")
    p.add_argument("--json", metavar="OUT", help="write the schedule as JSON")
    p.add_argument("--solver", default="yices", choices=("yices", "z3", "cpsat"),
                   help="joint solver: SMT backend yices or z3, or cpsat (OR-Tools CP-SAT, optional)")
    p.add_argument("--ilp", default="cbc", choices=("cbc", "highs"), help="MILP backend")
    p.add_argument("--modulo", default="smt", choices=METHODS,
                   help="how the optimal modulo schedule is found (all exact; cpsat needs ortools)")
    p.add_argument("--strategy", default="joint", choices=("joint", "swp"),
                   help="joint (Algorithm 1) or swp (modulo schedule + fixed split)")
    p.add_argument("--time-limit", type=float, metavar="S", help="seconds for the whole search")
    p.add_argument("--max-groups", type=int, help="warp groups offered to the solver")
    p.add_argument("--register-limit", type=int, help="registers per thread per warp group")
    p.add_argument("--no-cross-group", action="store_true",
                   help="forbid register values crossing warp groups")
    p.add_argument("--apart", action="append", default=[], metavar="OP,OP",
                   help="keep these two ops on different warp groups (repeatable; a code generator's rule)")
    p.add_argument("--max-stages", type=int, help="largest number of pipeline stages")
    p.add_argument("--stage-slack", type=int, default=1,
                   help="stage windows tried per II beyond the modulo schedule's (0: paper's Algorithm 1)")
    p.add_argument("--prefetch", type=int, default=None,
                   help="extra buffers per streaming load (default: the least that hides the load latency)")
    p.add_argument("--normalize-upper", type=int, default=300, help="U of the cost normalization")
    p.add_argument("--window-limit", type=float, default=None, metavar="SECONDS",
                   help="seconds per joint (II, stages) window; an undecided window is skipped and the "
                        "answer is marked not proven")
    p.add_argument("--no-ranges", action="store_true",
                   help="decide every II on its own instead of refuting runs of IIs with range queries "
                        "(same answer and proof; slower when the optimum lies far above the MII)")
    p.add_argument("--relax", action="append", default=[], choices=sorted(RELAXABLE), metavar="FAMILY",
                   help="what-if: leave out a constraint family (repeatable; one of "
                        f"{', '.join(sorted(RELAXABLE))}); the answer is not a schedule the machine can run")
    p.set_defaults(func=_cmd_schedule)
    p = sub.add_parser("show", help="print a saved schedule")
    p.add_argument("file")
    p.set_defaults(func=_cmd_show)
    p = sub.add_parser("verify", help="re-check a saved schedule; exit 0 only if valid")
    p.add_argument("file")
    p.set_defaults(func=_cmd_verify)
    p = sub.add_parser("machines", help="list the bundled machines")
    p.set_defaults(func=_cmd_machines)
    _optional_commands(sub)
    return parser


def _optional_commands(sub: Any) -> None:
    """Subcommands that live in their own modules (each exposes ``add_parser`` and ``run``)."""
    for module_name in ("twill.calibrate.regs", "twill.analysis.simulate", "twill.render.plot",
                        "twill.analysis.explain", "twill.apply.triton"):
        try:
            module = __import__(module_name, fromlist=["add_parser"])
        except ImportError:
            continue
        module.add_parser(sub)


def _showing_notes(previous: Callable[..., None]) -> Callable[..., None]:
    """A ``warnings.showwarning`` that prints a :class:`TwillWarning` as a note on stderr and hands any
    other warning to ``previous``."""

    def show(message: Any, category: type[Warning], filename: str, lineno: int, file: Any = None,
             line: str | None = None) -> None:
        if issubclass(category, TwillWarning):
            _err.print(f"[yellow]note[/]: {escape(str(message))}", highlight=False)
        else:
            previous(message, category, filename, lineno, file, line)

    return show


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit code."""
    args = _parser().parse_args(argv)
    if not sys.stdout.isatty() and "COLUMNS" not in os.environ:
        # rich lays tables out for 80 columns when stdout is a pipe or file, cutting op names and notes;
        # a reader there scrolls instead (COLUMNS, when set, still decides)
        os.environ["COLUMNS"] = "160"
    previous = warnings.showwarning
    warnings.showwarning = _showing_notes(previous)
    try:
        return int(args.func(args) or 0)
    except InterruptedSolveError as exc:
        _err.print(f"[yellow]interrupted[/]: {escape(str(exc))}")
        return 130
    except KeyboardInterrupt:
        _err.print("[yellow]interrupted[/]")
        return 130
    except InfeasibleError as exc:
        _err.print(f"[red]no schedule[/]: {escape(str(exc))}")
        return 1
    except TwillError as exc:
        _err.print(f"[red]error[/] ({type(exc).__name__}): {escape(str(exc))}")
        return 2
    except BrokenPipeError:  # the reader of stdout went away (| head): stop quietly, as a shell tool does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except OSError as exc:  # a file that could not be written after all (a full disk, a /proc path)
        _err.print(f"[red]error[/] ({type(exc).__name__}): {escape(str(exc))}")
        return 2
    finally:
        warnings.showwarning = previous


if __name__ == "__main__":
    sys.exit(main())
