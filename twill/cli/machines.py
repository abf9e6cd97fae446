"""``twill machines``: list the bundled machine descriptions."""

from __future__ import annotations

import argparse
from typing import Any

from twill.render.terminal import make_console

__all__ = ["add_parser", "run"]

HELP = "list the bundled machines"


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Register ``twill machines``."""
    p = sub.add_parser("machines", help=HELP,
                       description="List the machine descriptions bundled with twill (the names --machine "
                                   "takes): architecture, units and their capacity, registers, shared memory "
                                   "per CTA and tensor-memory columns. --machine FILE.toml takes your own "
                                   "(docs/model.md §2).")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    """Run ``twill machines``; returns 0."""
    from twill.ir.machine import known_machines, load_machine
    from twill.render.terminal import PlainTable

    table = PlainTable(title="bundled machines")
    for col in ("name", "arch", "description", "units (capacity)", "regs", "SMEM/CTA", "TMEM cols"):
        table.add_column(col)
    for name in known_machines():
        m = load_machine(name)
        units = ", ".join(f"{u.name}:{u.capacity}" for u in m.units.values())
        table.add_row(m.name, m.arch, m.description, units, f"{m.register_file} (<= {m.max_regs_per_thread})",
                      str(m.smem_per_cta), str(m.tmem_columns or "-"))
    make_console().print(table)
    return 0
