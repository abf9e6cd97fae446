"""What ``modulo_methods.py`` and ``joint_methods.py`` share: the command line (cases, choices, time limit,
notes, output page) and the Markdown page (a table of one row per case, then the hand-written notes).
"""

from __future__ import annotations

import argparse
import datetime
import fnmatch
import platform
from collections.abc import Sequence
from pathlib import Path

from solve_times import CASES, Case


def parser(doc: str, kind: str, choices: Sequence[str], default: str, per: str, out: Path,
           notes: Path) -> argparse.ArgumentParser:
    """The shared options: ``--{kind}`` (comma-separated, of ``choices``), ``--cases``, ``--time-limit``
    (seconds ``per`` call), ``--notes`` (default ``notes`` when it exists) and ``--out``."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument(f"--{kind}", default=default, help=f"comma-separated, of {', '.join(choices)}")
    ap.add_argument("--cases", default="*", help="comma-separated case names or globs")
    ap.add_argument("--time-limit", type=float, default=120.0, help=f"seconds per {per}")
    ap.add_argument("--notes", type=Path, default=notes if notes.exists() else None,
                    help=f"a Markdown file appended to the page as its notes (default {notes.name})")
    ap.add_argument("--out", type=Path, default=out)
    return ap


def chosen(ap: argparse.ArgumentParser, text: str, choices: Sequence[str]) -> list[str]:
    """The comma-separated names of ``text``; a usage error (SystemExit) for one not in ``choices``."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    bad = [n for n in names if n not in choices]
    if bad:
        ap.error(f"unknown name(s) {', '.join(bad)}; choose from {', '.join(choices)}")
    return names


def cases(ap: argparse.ArgumentParser, text: str) -> list[Case]:
    """The cases of ``solve_times.CASES`` that the comma-separated names or globs of ``text`` match."""
    patterns = [p.strip() for p in text.split(",")]
    found = [c for name, c in CASES.items() if any(fnmatch.fnmatch(name, p) for p in patterns)]
    if not found:
        ap.error(f"no case matches {text!r}")
    return found


def write(args: argparse.Namespace, title: str, script: str, per: str, what: str, header: str,
          rows: Sequence[str]) -> None:
    """Write the page to ``args.out``: ``title``, a line on the machine and the time limit per ``per``,
    ``what`` one row measures, the table (the Markdown row ``header``, then ``rows``) and the notes."""
    notes = args.notes.read_text() if args.notes is not None else ""
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    text = "\n".join([
        f"# {title}",
        "",
        f"Written by `benchmarks/{script}` ({stamp}, {platform.processor() or platform.machine()}, "
        f"Python {platform.python_version()}, time limit {args.time_limit:g} s per {per}). {what}",
        "",
        header,
        "|" + "---|" * (header.count("|") - 1),
        *rows,
        "",
        *([notes.rstrip(), ""] if notes else []),
    ])
    args.out.write_text(text)
    print(f"wrote {args.out}")
