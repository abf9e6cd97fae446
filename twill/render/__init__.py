"""Schedules for people: :mod:`.show` (text tables), :mod:`.plot` (matplotlib figures), :mod:`.terminal` (the
rich consoles the command line prints through)."""
