"""The ``twill tune`` command line: ``add_parser(subparsers)`` and ``run(args) -> int``.

    twill tune examples/flash_attention_fwd.py --machine h200 --grid BLOCK_M=64,128 \\
        --grid BLOCK_N=32,64,128 --num-warps 4,8 --num-stages 1,2,3,4 --seq-len 8192 --top 10 \\
        --json tune.json --plot tune.png

    twill tune examples/gemm.py --machine h200 --grid BLOCK_N=64,128 --backend gluon --measure --top 3

Exit codes: 0 done (also when some configs cannot run: the table says why), 2 bad input (nothing tuned;
also ``--measure`` without a CUDA device, checked before any work; or a ``--json`` / ``--plot`` file that
could not be written after the sweep, the table printed), 130 interrupted (the finished configs are
printed and written).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

__all__ = ["add_parser", "run"]


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``tune`` subcommand to an :mod:`argparse` subparsers object (``func=run``)."""
    p = subparsers.add_parser(
        "tune", help="predict the time of every config of a grid (CPU only) and rank them",
        description="Compile every config of a constexpr x num_warps x num_stages grid on the CPU, check "
                    "that it fits (shared memory, registers), solve twill's schedule for it, predict its "
                    "time on the machine (waves, CTAs per SM, cycles per trip) and print them ranked.")
    p.add_argument("file", help="FILE.py[::KERNEL] with TWILL_KERNELS and TWILL_TUNE entries")
    p.add_argument("--machine", required=True, help="machine name (h100, h200, b200) or TOML file")
    p.add_argument("--grid", action="append", default=[], metavar="NAME=V1,V2",
                   help="constexpr values to try (repeatable)")
    p.add_argument("--num-warps", metavar="W,W", help="num_warps values (default the kernel entry's)")
    p.add_argument("--num-stages", metavar="S,S", help="num_stages values (default the kernel entry's)")
    p.add_argument("--seq-len", type=int, metavar="N", help="problem size seq_len (same as --size seq_len=N)")
    p.add_argument("--size", action="append", default=[], metavar="NAME=N",
                   help="a problem size of the kernel's TWILL_TUNE entry (M, N, K, batch, heads ...)")
    p.add_argument("--backend", default="triton", choices=["triton", "gluon"],
                   help="what runs each config: the kernel Triton builds, or the Gluon kernel generated from "
                        "twill's schedule of the config (sm_90; sm_100 compile-only)")
    p.add_argument("--top", type=int, metavar="K", help="show the K fastest configs (all are in --json); "
                                                        "with --measure, time them (default 5)")
    p.add_argument("--measure", action="store_true",
                   help="on a GPU machine, time the top K configs (triton.testing.do_bench, median) and "
                        "print predicted against measured; the kernel file's TWILL_TUNE entry names its "
                        "'inputs'")
    p.add_argument("--json", metavar="OUT", help="write every config's result as JSON")
    p.add_argument("--plot", metavar="OUT", help="plot the predicted time across the grid (PNG/SVG/PDF)")
    p.add_argument("--jobs", type=int, metavar="N", help="worker processes (default: every core)")
    p.add_argument("--ray", metavar="ADDRESS", help="run the configs as Ray tasks ('local' starts Ray here)")
    p.add_argument("--time-limit", type=float, default=5.0, metavar="S",
                   help="seconds for twill's solve of each config (default 5)")
    p.add_argument("--cache-dir", metavar="DIR", help="compile cache (default ~/.cache/twill/tune)")
    p.add_argument("--no-cache", action="store_true", help="compile and solve every config again")
    p.set_defaults(func=run)
    return p


def _sizes(args: argparse.Namespace) -> dict[str, int]:
    from twill.tune.grid import GridError

    sizes: dict[str, int] = {}
    for item in args.size:
        name, sep, value = item.partition("=")
        try:
            sizes[name.strip()] = int(value)
        except ValueError:
            raise GridError(f"--size {item!r} must look like NAME=INTEGER") from None
        if not sep or not name.strip():
            raise GridError(f"--size {item!r} must look like NAME=INTEGER")
    if args.seq_len is not None:
        sizes["seq_len"] = args.seq_len
    return sizes


def _repeats(args: argparse.Namespace) -> list[str]:
    """A note per ``--grid`` / ``--num-warps`` / ``--num-stages`` value given more than once (each config
    is tuned once: the repeat is dropped, and said so)."""
    from twill.tune.grid import parse_value, repeated

    lists = [(f"--grid {item.partition('=')[0].strip()}", item.partition("=")[2]) for item in args.grid]
    lists += [(flag, text) for flag, text in (("--num-warps", args.num_warps),
                                              ("--num-stages", args.num_stages)) if text is not None]
    notes = []
    for flag, text in lists:
        again = repeated([parse_value(v) for v in text.split(",") if v.strip()])
        if again:
            notes.append(f"{flag} lists {', '.join(map(str, again))} more than once; each config is tuned "
                         "once")
    return notes


def _measure(args: argparse.Namespace, outcome: Any, names: list[str], console: Any,
             err: Any) -> dict[str, Any]:
    """Time the top K configs on the GPU; print predicted against measured and Spearman."""
    from rich.markup import escape

    from twill.tune.measure import DEFAULT_TOP, make_launch, measure, render_measured

    meta = outcome.meta
    top = args.top or DEFAULT_TOP

    def launch(result: dict[str, Any]) -> Any:
        return make_launch(result, args.file, meta["backend"], meta["problem"])

    m = measure(outcome.results, top, launch=launch)
    title = f"measured on the GPU ({m.timer}): the {top} configs predicted fastest"
    console.print(render_measured(m, names, title=title))
    for r in m.failed:
        label = " ".join(f"{k}={v}" for k, v in r["constexprs"].items() if k in names)
        err.print(f"[yellow]not measured {escape(label)} w{r['num_warps']} s{r['num_stages']}[/]: "
                  f"{escape(r['measure_error'])}", soft_wrap=True)
    rho = f"{m.spearman:.3f}" if m.spearman is not None else "n/a (fewer than 2 measured, or no scipy)"
    console.print(f"Spearman (predicted vs measured, {len(m.measured)} configs): {rho}")
    return m.to_dict()


def run(args: argparse.Namespace) -> int:
    """Run ``twill tune``; returns the exit code (see the module docstring)."""
    from rich.markup import escape
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from twill.errors import TwillError
    from twill.render.terminal import make_console
    from twill.tune.api import tune
    from twill.tune.grid import parse_grid, parse_list
    from twill.tune.report import render_table, write_json, write_plot

    console = make_console()
    err = make_console(stderr=True)
    if args.measure:
        from twill.tune.measure import inputs_function, require_cuda

        try:
            require_cuda()  # before any work
            inputs_function(args.file)
        except TwillError as exc:
            err.print(f"[red]error[/]: {escape(str(exc))}")
            return 2
    from twill.cli.common import check_output

    try:
        for out in (args.json, args.plot):
            if out is not None:
                check_output(out, inputs=(args.file, args.machine))
        if args.json and args.plot and os.path.realpath(args.json) == os.path.realpath(args.plot):
            raise TwillError(f"--json {args.json} and --plot {args.plot} are the same file")
        if args.plot is not None and Path(args.plot).suffix.lower() not in (".png", ".svg", ".pdf"):
            raise TwillError(f"--plot {args.plot}: the picture format must be .png, .svg or .pdf")
    except TwillError as exc:
        err.print(f"[red]error[/]: {escape(str(exc))}; nothing was tuned")
        return 2
    for out in (args.json, args.plot):
        if not out:
            continue
        path = Path(out).resolve()
        probe = path.with_name(path.name + ".tmp")  # where write_json / write_plot write first
        try:
            with open(probe, "a", encoding="utf-8"):
                pass
            probe.unlink()
        except OSError as exc:
            err.print(f"[red]error[/]: cannot write {escape(out)} ({escape(str(exc))}); nothing was tuned")
            return 2
    if args.top is not None and args.top < 1:
        err.print(f"[red]error[/]: --top {args.top} must be >= 1")
        return 2
    progress = Progress(TextColumn("tuning"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        TextColumn("{task.fields[last]}"), console=err, transient=True)
    bar: dict[str, Any] = {}

    def start(n: int) -> None:
        progress.start()
        bar["id"] = progress.add_task("tune", total=n, last="")

    def step(result: dict[str, Any]) -> None:
        label = " ".join(f"{k}={v}" for k, v in result.get("constexprs", {}).items())
        progress.update(bar["id"], advance=1, last=f"{label} w{result.get('num_warps')} "
                                                   f"s{result.get('num_stages')}")

    for note in _repeats(args):
        err.print(f"[yellow]note[/]: {escape(note)}", soft_wrap=True)
    try:
        grid = parse_grid(args.grid)
        warps = parse_list(args.num_warps, "--num-warps") if args.num_warps is not None else None
        stages = parse_list(args.num_stages, "--num-stages") if args.num_stages is not None else None
        cache = None if args.no_cache else (args.cache_dir or "default")
        outcome = tune(args.file, args.machine, grid, num_warps=warps, num_stages=stages,
                       problem=_sizes(args), backend=args.backend, time_limit=args.time_limit,
                       jobs=args.jobs, ray=args.ray, cache_dir=cache, on_start=start, on_result=step)
    except TwillError as exc:
        progress.stop()
        err.print(f"[red]error[/] ({type(exc).__name__}): {escape(str(exc))}", soft_wrap=True)
        return 2
    finally:
        progress.stop()
    results = outcome.results
    names = list(grid) or [k for k in (outcome.configs[0].constexprs if outcome.configs else {})]
    meta = outcome.meta
    title = (f"{meta['kernel_entry']} on {args.machine}: "
             f"{', '.join(f'{k}={v}' for k, v in meta['problem'].items())} "
             f"({meta['finished']} of {meta['total']} configs, {meta['engine']})")
    console.print(render_table(results, names, top=args.top, title=title))
    bad = [r for r in results if r.get("error") in ("compile", "model", "input", "internal")]
    for r in results:  # every config that cannot run, whatever refused it (codegen included), in full
        if r.get("fits") or any(r is b for b in bad):
            continue
        label = " ".join(f"{k}={v}" for k, v in r["constexprs"].items() if k in names)
        console.print(f"cannot run {escape(label)} w{r['num_warps']} s{r['num_stages']}: "
                      f"{escape(str(r['reason']))}", soft_wrap=True)
    for r in bad:
        label = " ".join(f"{k}={v}" for k, v in r["constexprs"].items() if k in names)
        err.print(f"[yellow]config {escape(label)} w{r['num_warps']} s{r['num_stages']}[/]: "
                  f"{escape(str(r['reason']))}", soft_wrap=True)
    for r in results:  # a prediction above the Tensor Core peak: the FLOPs expression overcounts
        if r.get("details", {}).get("over_peak"):
            label = " ".join(f"{k}={v}" for k, v in r["constexprs"].items() if k in names)
            err.print(f"[yellow]config {escape(label)} w{r['num_warps']} s{r['num_stages']}[/]: "
                      f"{escape(r['details']['over_peak'])}", soft_wrap=True)
    unproven = [r for r in results if r.get("schedule") and not r["schedule"].get("proven_optimal")]
    if unproven:
        why = "; ".join(sorted({str(r["schedule"].get("not_proven")) for r in unproven}))[:300]
        what = ("the Gluon kernels execute these schedules" if meta["backend"] == "gluon" else
                "the predicted times are of the kernel Triton builds, with its own schedule")
        console.print(f"{len(unproven)} of twill's schedules are not proven optimal ({why}); {what}",
                      soft_wrap=True)
    for note in meta.get("notes", []):
        err.print(f"[yellow]note[/]: {escape(note)}", soft_wrap=True)
    if outcome.sweep.interrupted:
        err.print(f"[yellow]interrupted[/]: {meta['finished']} of {meta['total']} configs finished; "
                  f"{meta['cut']} cut (not run or not finished)")
    if args.measure and not outcome.sweep.interrupted:
        meta["measure"] = _measure(args, outcome, names, console, err)
    failed = False  # an output that became unwritable during the sweep: said, the other one still written
    if args.json is not None:
        try:
            write_json(args.json, results, **meta)
            console.print(f"wrote {escape(args.json)} ({len(results)} configs)")
        except OSError as exc:
            err.print(f"[red]error[/]: cannot write {escape(args.json)} ({escape(str(exc))}); the table "
                      "above holds the results", soft_wrap=True)
            failed = True
    if args.plot is not None and results:
        try:
            write_plot(args.plot, results, names, title=title)
            console.print(f"wrote {escape(args.plot)}")
        except OSError as exc:
            err.print(f"[red]error[/]: cannot write {escape(args.plot)} ({escape(str(exc))})", soft_wrap=True)
            failed = True
    return 130 if outcome.sweep.interrupted else (2 if failed else 0)
