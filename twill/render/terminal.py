"""The rich consoles the command line prints through.

rich's :class:`~rich.console.Console` ends the process with exit status 1 when the reader of its stream
goes away (``twill schedule ... | head``). :func:`make_console` returns one that raises
:class:`BrokenPipeError` instead, which :func:`twill.cli.main.main` turns into the quiet exit a shell tool
makes on a closed pipe (status 141, 128 + SIGPIPE).
"""

from __future__ import annotations

from rich.console import Console

__all__ = ["make_console"]


class _PipeConsole(Console):
    def on_broken_pipe(self) -> None:
        raise BrokenPipeError


def make_console(*, stderr: bool = False) -> Console:
    """A console on stdout (or stderr) whose closed pipe raises :class:`BrokenPipeError`."""
    return _PipeConsole(stderr=stderr)
