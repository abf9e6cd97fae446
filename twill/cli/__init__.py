"""The ``twill`` command line, a thin layer over the public API; nothing in twill imports it.

* :mod:`.main` -- the entry point (``twill = "twill.cli.main:main"``), the parser and the exit codes;
* :mod:`.options` -- the option groups commands share (argparse parent parsers: machine, kernel input,
  every search option of ``twill schedule``);
* :mod:`.common` -- reading inputs and checking output paths, the stderr console;
* one module per command: :mod:`.schedule`, :mod:`.show`, :mod:`.verify`, :mod:`.machines`,
  :mod:`.explain`, :mod:`.simulate`, :mod:`.plot`, :mod:`.apply`, :mod:`.regs`.

``python -m twill.cli ARGS`` runs it as ``twill ARGS`` does; ``from twill.cli import main`` is the entry
function.
"""

from twill.cli.main import main

__all__ = ["main"]
