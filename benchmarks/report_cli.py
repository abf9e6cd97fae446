"""The command-line tail shared by the benchmark report scripts: write the JSON, render the markdown.

Each report script (``compare_strategies.py``, ``sensitivity.py``, ``triton_comparison.py``) collects its
data into a JSON-able dict and renders it to markdown; :func:`write_report` stores both and
:func:`run_main` turns a twill error into a one-line message and exit status 2.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from twill.errors import TwillError

__all__ = ["read_json", "run_main", "write_report"]


def read_json(path: Path, required: tuple[str, ...] = ()) -> dict[str, Any]:
    """The results file at ``path``; a missing or malformed file, or one without the ``required`` keys
    (another script's results), exits with one line naming it."""
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise SystemExit(f"error: cannot read the results file {path}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise SystemExit(f"error: {path} is not valid JSON (line {exc.lineno}, column {exc.colno}: "
                         f"{exc.msg})") from None
    if not isinstance(data, dict):
        raise SystemExit(f"error: {path} holds a {type(data).__name__}, not a results object")
    missing = [key for key in required if key not in data]
    if missing:
        raise SystemExit(f"error: {path} has no {', '.join(repr(k) for k in missing)}: not this script's "
                         "results file")
    return data


def write_report(data: dict[str, Any] | None, json_path: Path, out: Path,
                 render: Callable[[dict[str, Any]], str], log: Callable[[str], None],
                 required: tuple[str, ...] = ()) -> None:
    """Write ``data`` to ``json_path`` (unless ``None``: then re-render what ``json_path`` holds, which
    must have the ``required`` keys) and its rendering to ``out`` (folders created as needed)."""
    if data is None:
        data = read_json(json_path, required)
    else:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(data, indent=1, allow_nan=True) + "\n")
        log(f"wrote {json_path}")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render(data))
    log(f"wrote {out}")


def run_main(main: Callable[[], int]) -> None:
    """Exit with ``main()``'s status; a :class:`TwillError` prints ``error: ...`` and exits 2."""
    try:
        sys.exit(main())
    except TwillError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
