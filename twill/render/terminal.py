"""The rich consoles the command line prints through.

rich's :class:`~rich.console.Console` ends the process with exit status 1 when the reader of its stream
goes away (``twill schedule ... | head``). :func:`make_console` returns one that raises
:class:`BrokenPipeError` instead, which :func:`twill.cli.main.main` turns into the quiet exit a shell tool
makes on a closed pipe (status 141, 128 + SIGPIPE).
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

__all__ = ["PlainTable", "make_console"]


def _plain(value: Any) -> Any:
    """A string as :class:`~rich.text.Text` (printed as is: never read as rich markup), anything else
    unchanged."""
    return Text(value) if isinstance(value, str) else value


class PlainTable(Table):
    """A :class:`~rich.table.Table` whose string cells and title are user text, not rich markup: an op
    named ``acc[i]`` or ``p[red]`` is printed as named (a plain ``Table`` reads ``[i]`` as a style tag and
    drops it). Style a cell by passing a :class:`~rich.text.Text`."""

    def __init__(self, *headers: Any, **options: Any) -> None:
        for key in ("title", "caption"):
            if key in options:
                options[key] = _plain(options[key])
        super().__init__(*(_plain(h) for h in headers), **options)

    def add_row(self, *renderables: Any, **options: Any) -> None:
        super().add_row(*(_plain(r) for r in renderables), **options)


class _PipeConsole(Console):
    def on_broken_pipe(self) -> None:
        raise BrokenPipeError


def make_console(*, stderr: bool = False) -> Console:
    """A console on stdout (or stderr) whose closed pipe raises :class:`BrokenPipeError`."""
    return _PipeConsole(stderr=stderr)
