"""The progress events of twill.schedule: typed (ProgressEvent / EventKind), in the order the search makes
them, and consistent with the certificate the search returns."""

from __future__ import annotations

import pytest

import twill
from twill.cli.schedule import progress_printer
from twill.ir.paper import figure1_graph


@pytest.fixture(scope="module")
def solve():  # type: ignore[no-untyped-def]
    events: list[twill.ProgressEvent] = []
    sched = twill.schedule(figure1_graph(), "h100", progress=events.append)
    return sched, events


def test_events_are_typed(solve) -> None:  # type: ignore[no-untyped-def]
    _, events = solve
    assert events and all(isinstance(e, twill.ProgressEvent) for e in events)
    assert all(isinstance(e.kind, twill.EventKind) for e in events)
    with pytest.raises(AttributeError):
        events[0].kind = twill.EventKind.II  # type: ignore[misc]  # frozen


def test_events_in_order(solve) -> None:  # type: ignore[no-untyped-def]
    sched, events = solve
    kinds = [e.kind for e in events]
    assert kinds.count(twill.EventKind.BOUNDS) == 1
    at = kinds.index(twill.EventKind.BOUNDS)
    # only the time of the phases before the search (bounds, normalization) comes before the bounds
    assert all(e.kind is twill.EventKind.SPENT for e in events[:at])
    assert {twill.EventKind.II, twill.EventKind.PHASE, twill.EventKind.ATTEMPT} <= set(kinds[at:])
    elapsed = [e.elapsed_s for e in events]
    assert elapsed == sorted(elapsed) and elapsed[0] >= 0
    # the bounds event carries the bounds the certificate states
    b = events[at]
    assert b.mii == max(b.res_mii, b.rec_mii)
    # each reported attempt is one of the certificate's, in the certificate's order
    reported = [(e.ii, e.stages, e.phase, e.status) for e in events if e.kind is twill.EventKind.ATTEMPT]
    recorded = [(a.ii, a.stages, a.phase, a.status) for a in sched.certificate.attempts]
    it = iter(recorded)
    assert reported and all(r in it for r in reported)  # a subsequence
    # a phase is announced before the first attempt it decides
    first_attempt = next(i for i, e in enumerate(events) if e.kind is twill.EventKind.ATTEMPT)
    assert any(e.kind is twill.EventKind.PHASE for e in events[:first_attempt])
    for e in events:
        if e.kind is twill.EventKind.SPENT:
            assert e.phase and e.wall_s is not None and e.wall_s >= 0 and e.calls is not None


def test_cli_printer_reads_the_events(solve) -> None:  # type: ignore[no-untyped-def]
    _, events = solve

    class Status:
        def __init__(self) -> None:
            self.lines: list[str] = []

        def update(self, text: str) -> None:
            self.lines.append(text)

    status = Status()
    update = progress_printer(status)
    for e in events:
        update(e)
    phases = [e for e in events if e.kind is twill.EventKind.PHASE]
    assert len(status.lines) == len(phases)
    assert all(f": {e.phase}" in line for e, line in zip(phases, status.lines, strict=True))
