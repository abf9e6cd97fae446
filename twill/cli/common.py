"""What the commands share: the stderr console, reading inputs (a kernel, a graph, a saved schedule) and
checking an output path before a long solve."""

from __future__ import annotations

import importlib.util
import inspect
import os
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from rich.markup import escape

from twill.errors import FrontendError, TwillError, TwillWarning
from twill.render.terminal import make_console

__all__ = ["ERR", "check_output", "graph_from_args", "load_graph", "read_schedule", "read_text",
           "showing_notes", "write_output"]

ERR = make_console(stderr=True)
"""The console errors, notes and progress lines go to (stderr); a test may replace it."""


def check_output(path: str | os.PathLike[str], *, folder: bool = False,
                 inputs: Iterable[str | os.PathLike[str] | None] = (), writes: Iterable[str] = ()) -> Path:
    """``path`` as a :class:`~pathlib.Path` once it looks writable; checked before a solve, so that a long
    solve is not lost to a typo in the output name.

    A file needs a non-empty name, an existing, writable parent folder and must not be a folder itself; a
    ``folder`` may not exist yet (it is created), but its nearest existing ancestor must be a writable
    folder. No file written may be one of the command's ``inputs`` (a kernel ``FILE.py::NAME`` counts as
    ``FILE.py``; a machine name that is not a file is skipped): for a file, ``path`` itself, for a folder,
    each of the file names ``writes`` inside it.

    Raises
    ------
    TwillError
        Naming the path and what is wrong with it.
    """
    if not os.fspath(path):
        raise TwillError("an output path is empty; give a file name")
    p = Path(path)
    written = [p / name for name in writes] if folder else [p]
    for given in inputs:
        if given is None or not os.fspath(given):
            continue
        source = Path(os.fspath(given).partition("::")[0])
        if not source.is_file():
            continue
        for target in written:
            if os.path.realpath(target) == os.path.realpath(source):
                raise TwillError(f"cannot write {target}: it is the input {given}; give another output "
                                 f"name")
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


def write_output(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` (UTF-8) to ``path``; :class:`TwillError` ``cannot write PATH: REASON`` if the system
    refuses (a path under ``/proc``, a full disk) after :func:`check_output` passed."""
    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise TwillError(f"cannot write {path}: {exc.strerror or exc}") from exc


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
    if path.is_dir():
        raise FrontendError(f"{path_text} is a folder, not a kernel, TTGIR or graph file")
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
            data = json.loads(read_text(path))
        except (json.JSONDecodeError, RecursionError) as exc:
            raise FrontendError(f"{path_text} is not a JSON graph: {exc}") from exc
        if isinstance(data, dict) and data.get("kind") == "twill.schedule":
            raise FrontendError(f"{path_text} is a saved schedule, not a graph; use twill show or "
                                f"twill verify")
        from twill.frontend.ddg import graph_from_ddg, is_ddg

        if is_ddg(data):  # an FBTriton modulo-scheduler dump (TRITON_MODULO_DUMP_DDG)
            _refuse(compile_only, target, "a ddg-0.1 dump is compiled already")
            return graph_from_ddg(data, machine, loop_index=loop_index, origin=path_text)
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


def read_text(path: Path) -> str:
    """The UTF-8 text of ``path``; :class:`TwillError` if it cannot be read or is not text."""
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise TwillError(f"{path} is not a text file ({exc.reason} at byte {exc.start})") from exc
    except OSError as exc:
        raise TwillError(f"cannot read {path}: {exc.strerror or exc}") from exc


def read_schedule(path: str) -> Any:
    """The :class:`~twill.schedule.Schedule` saved at ``path``; :class:`TwillError` naming the file if it is
    missing, not text or not a schedule."""
    from twill.schedule import Schedule

    p = Path(path)
    if p.is_dir():
        raise TwillError(f"{path} is a folder, not a saved schedule")
    if not p.is_file():
        raise TwillError(f"no such file: {path}")
    text = read_text(p)
    try:
        return Schedule.from_json(text)
    except TwillError as exc:
        raise TwillError(f"{path}: {exc}") from exc


def showing_notes(previous: Callable[..., None]) -> Callable[..., None]:
    """A ``warnings.showwarning`` that prints a :class:`TwillWarning` as a note on stderr and hands any
    other warning to ``previous``."""

    def show(message: Any, category: type[Warning], filename: str, lineno: int, file: Any = None,
             line: str | None = None) -> None:
        if issubclass(category, TwillWarning):
            ERR.print(f"[yellow]note[/]: {escape(str(message))}", highlight=False)
        else:
            previous(message, category, filename, lineno, file, line)

    return show




def graph_from_args(args: Any) -> Any:
    """The loop graph that :func:`twill.cli.options.kernel_options` and ``--machine`` name in ``args``.

    Raises
    ------
    FrontendError
        As :func:`load_graph`, or a ``--constexpr`` that is not ``NAME=VALUE``.
    """
    from twill.frontend.constexprs import parse_constexprs

    return load_graph(args.file, args.machine, parse_constexprs(args.constexpr), args.num_warps,
                      args.num_stages, args.loop)
