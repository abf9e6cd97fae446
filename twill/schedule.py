"""The answer: a software-pipelined, warp-specialized schedule with its proof and its costs.

A :class:`Schedule` holds the problem it solves (in normalized time units), the initiation interval, each
op's start in iteration 0 and warp group, the warp groups with their register budgets, buffer depths, the
optimality :class:`Certificate` and per-phase :class:`PhaseStats`. Derived views (stage of an op, the
prologue / steady state / epilogue listings, the straight-line length ``T``) are properties. It
round-trips through JSON (:meth:`Schedule.to_json`, :meth:`Schedule.from_json`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from twill.errors import TwillError
from twill.ir.fields import unknown_keys_message
from twill.model.liveness import memory_intervals, register_intervals, smem_buffers
from twill.model.problem import Problem

__all__ = ["DECIDED", "MAX_STAGES_READ", "SANITY_LIMIT", "SCHEMA_VERSION", "STRATEGIES", "Attempt",
           "Certificate", "OpSlot", "PhaseStats", "Schedule", "ScopeRun", "WarpGroup", "group_role"]

SCHEMA_VERSION = 1
SANITY_LIMIT = 10**6
"""Largest II, L, start or duration (time units) a schedule file may hold: far above any real loop's, low
enough that checking or printing the schedule takes no noticeable time or memory."""
MAX_STAGES_READ = 1000
"""Largest number of stages ``ceil(L / II)`` a schedule file may have."""
STRATEGIES = ("joint", "swp")
"""How a schedule was found: ``joint`` (Algorithm 1, SWP and WS together) or ``swp`` (the modulo schedule
with a fixed warp split)."""


@dataclass(frozen=True)
class OpSlot:
    """Where one op runs: ``start`` in iteration 0 (time units), its ``stage`` and ``warp_group``."""

    name: str
    start: int
    stage: int
    warp_group: int


@dataclass(frozen=True)
class WarpGroup:
    """One warp group (an instruction stream) of the warp-specialized loop.

    Attributes
    ----------
    index : int
        Group number (0 is the variable-latency producer group when there is one).
    ops : tuple of str
        Its ops, by start time.
    warps : int
        Warps it runs (whole hardware warpgroups of 4).
    registers : int
        ``setmaxnreg`` value to give it: the model's need, raised so that all groups share the whole
        register file (a multiple of 8 in [24, 256]).
    registers_needed : int
        The smallest budget the model allows (peak live registers per thread plus overhead, rounded).
    role : str
        ``producer`` (variable-latency ops), ``consumer`` or ``compute``.
    """

    index: int
    ops: tuple[str, ...]
    warps: int
    registers: int
    registers_needed: int
    role: str


DECIDED = ("infeasible", "unsat", "sat", "skipped", "invalid")
"""Attempt statuses that decide their (II, window); any other (``timeout``, ``interrupted``) leaves it
open."""


@dataclass(frozen=True)
class Attempt:
    """What the search proved at one ``(II, stage window)``.

    ``phase`` is ``bounds``, ``modulo``, ``joint`` or ``heuristic``; ``status`` is ``infeasible``,
    ``unsat``, ``sat``, ``timeout``, ``skipped`` or ``invalid``; ``reason`` says why in words.
    """

    ii: int
    stages: int | None
    phase: str
    status: str
    wall_s: float
    reason: str = ""


@dataclass(frozen=True)
class ScopeRun:
    """IIs ``lo .. hi`` (normalized units) each refuted for every schedule of at most ``stages`` stages
    (``None``: of any length, e.g. no modulo schedule exists); ``complete`` when that covers every stage
    count the model allows at each of these IIs."""

    lo: int
    hi: int
    stages: int | None
    complete: bool

    def to_dict(self) -> dict[str, Any]:
        """Plain-data form."""
        return {"lo": self.lo, "hi": self.hi, "stages": self.stages, "complete": self.complete}


@dataclass(frozen=True)
class Certificate:
    """The optimality proof of a schedule.

    Attributes
    ----------
    lower_bound : int
        ``max(ResMII, RecMII)`` of the normalized problem.
    res_mii, rec_mii : int
        The two bounds.
    proven_optimal : bool
        Every II below the schedule's was proven infeasible (no time limit hit), and the length and the
        secondary objectives were proven minimal.
    attempts : tuple of Attempt
        Everything tried, in order.
    stage_slack : int
        Stage windows tried beyond the modulo schedule's (0: the paper's Algorithm 1).
    notes : tuple of str
        Plain-language remarks (normalization collapses, time limits).
    scope : tuple of ScopeRun
        What was refuted below the answer's II, as runs of IIs each refuted for every stage count up
        to a number (``complete`` when that number reaches the stage bound of every II of the run,
        :func:`twill.reductions.stage_bound`, or the user's ``max_stages``: then no stage count the
        model allows is left). ``proven_optimal`` needs every II from the lower bound up covered
        completely.
    undecided : tuple of int
        IIs below (or at) the answer's that some window or phase left undecided.
    heuristic : bool
        The schedule is the fallback heuristic's (the time limit ended the search before any joint
        schedule was found): valid (verified), not optimal, ``proven_optimal`` False.
    ii_bound : int
        With ``heuristic``: the proven lower bound on the optimal II (every smaller II was refuted);
        0 otherwise.
    """

    lower_bound: int
    res_mii: int
    rec_mii: int
    proven_optimal: bool
    attempts: tuple[Attempt, ...]
    stage_slack: int = 0
    notes: tuple[str, ...] = ()
    scope: tuple[ScopeRun, ...] = ()
    undecided: tuple[int, ...] = ()
    heuristic: bool = False
    ii_bound: int = 0

    def ii_optimal(self, ii: int) -> bool:
        """True if the II ``ii`` is proven optimal (no smaller II has a schedule), whether or not the length
        and the later goals are: every II from :attr:`lower_bound` below ``ii`` is covered by a complete
        :attr:`scope` run and none of them is :attr:`undecided` (at the lower bound itself, nothing is
        needed). ``proven_optimal`` implies it; a schedule found without a proof of its length (a
        seeded window, a heuristic at the bound) can have it too.

        >>> Certificate(100, 100, 0, False, ()).ii_optimal(100)
        True
        >>> Certificate(100, 100, 0, False, (), scope=(ScopeRun(100, 101, 3, True),)).ii_optimal(102)
        True
        >>> Certificate(100, 100, 0, False, (), scope=(ScopeRun(100, 101, 3, False),)).ii_optimal(102)
        False
        """
        covered = {x for r in self.scope if r.complete for x in range(r.lo, r.hi + 1)}
        return all(x in covered and x not in self.undecided for x in range(self.lower_bound, ii))

    def ruled_out(self) -> dict[int, str]:
        """For each II below the answer, why it failed (the last attempt's reason)."""
        out: dict[int, str] = {}
        for a in self.attempts:
            if a.status != "sat":
                out[a.ii] = f"{a.phase} {a.status}" + (f": {a.reason}" if a.reason else "")
        return out


@dataclass(frozen=True)
class PhaseStats:
    """Time and size of one solver phase (``bounds``, ``normalize``, ``modulo``, ``joint``, ``verify``)."""

    phase: str
    wall_s: float
    calls: int = 1
    detail: str = ""


@dataclass(frozen=True)
class Schedule:
    """A modulo schedule with a warp assignment.

    Attributes
    ----------
    problem : Problem
        The normalized problem it solves (ops, edges, machine limits, options).
    ii : int
        Initiation interval in normalized units.
    length : int
        ``L``, the length of one iteration's schedule.
    slots : mapping of str to OpSlot
        Per op: start, stage, warp group.
    warp_groups : tuple of WarpGroup
        Groups in index order.
    certificate : Certificate
    stats : tuple of PhaseStats
    strategy : str
        ``joint`` (Algorithm 1) or ``swp`` (modulo schedule plus the fixed split).
    normalization : mapping
        The cost normalization used (``raw``, ``scaled``, ``cycles_per_unit``, ``collapses``).
    bounds_cycles : mapping of str to int
        ResMII, RecMII and the critical path of the problem in machine cycles.
    """

    problem: Problem
    ii: int
    length: int
    slots: Mapping[str, OpSlot]
    warp_groups: tuple[WarpGroup, ...]
    certificate: Certificate
    stats: tuple[PhaseStats, ...] = ()
    strategy: str = "joint"
    normalization: Mapping[str, Any] = field(default_factory=dict)
    bounds_cycles: Mapping[str, int] = field(default_factory=dict)

    # ------------------------------------------------------------------------ derived
    @property
    def machine(self) -> str:
        """Name of the machine scheduled for."""
        return self.problem.resources.machine

    @property
    def stages(self) -> int:
        """Copies of an iteration in flight: ``ceil(L / II)``."""
        return max(1, math.ceil(self.length / self.ii))

    @property
    def total_length(self) -> int:
        """``T = (ceil(L/II) - 1) * II + L``: length of prologue + one steady state + epilogue."""
        return (self.stages - 1) * self.ii + self.length

    @property
    def ii_cycles(self) -> float:
        """II in machine cycles: the normalized II times cycles per unit, but never below the MII of the
        unnormalized problem (``bounds_cycles``). Normalization rounds each cost to whole units, so the
        product can fall a few cycles under a bound no schedule beats (1011 against a ResMII of 1024
        cycles on the decode example); the loop then needs the bound."""
        bound = max(self.bounds_cycles.get("res_mii", 0), self.bounds_cycles.get("rec_mii", 0))
        return max(self.ii_cycles_scaled, float(bound))

    @property
    def ii_cycles_scaled(self) -> float:
        """The normalized II times cycles per unit, without the floor of :attr:`ii_cycles`."""
        return self.ii * self.problem.cycles_per_unit

    @property
    def start(self) -> dict[str, int]:
        """Start of each op in iteration 0."""
        return {n: s.start for n, s in self.slots.items()}

    @property
    def group(self) -> dict[str, int]:
        """Warp group of each op."""
        return {n: s.warp_group for n, s in self.slots.items()}

    def buffer_depths(self) -> dict[str, int]:
        """Copies of each value alive at once (its buffer depth): ``ceil(lifetime / II)`` at least 1.

        Register values, SMEM values (streaming loads include their prefetch) and TMEM values.
        """
        out: dict[str, int] = {}
        intervals = (register_intervals(self.problem, self.ii, self.start, self.group)
                     + memory_intervals(self.problem, self.ii, self.start, self.group, "smem")
                     + memory_intervals(self.problem, self.ii, self.start, self.group, "tmem"))
        for iv in intervals:
            if iv.what in self.slots:
                out[iv.what] = max(out.get(iv.what, 1), max(1, math.ceil(iv.length / self.ii)))
        return dict(sorted(out.items()))

    def smem_usage(self) -> dict[str, Any]:
        """The shared memory the schedule allocates, against the machine's capacity.

        Returns
        -------
        dict
            ``buffers``: one row per SMEM buffer (:func:`twill.liveness.smem_buffers`: an SMEM value, a
            streaming load's ring with its prefetch, the staging buffer of a register value handed to
            another group) with ``what``, ``bytes`` (one copy), ``depth`` (copies alive at once,
            ``max(1, ceil(lifetime / II))``) and ``total`` = bytes x depth; ``loop_invariant`` (bytes
            held for the whole loop, ``problem.fixed_smem``); ``total`` = loop_invariant + the buffers'
            totals (bytes per CTA); ``capacity`` (``problem.resources.smem``, bytes per CTA). The
            solvers bound the folded peak occupancy, which is at most this total; the total is what a
            code generator that gives each buffer a ring of ``depth`` slots allocates.
        """
        buffers = smem_buffers(self.problem, self.ii, self.start, self.group)
        fixed = self.problem.fixed_smem
        return {
            "buffers": [{"what": b.what, "bytes": b.bytes, "depth": b.depth, "total": b.total}
                        for b in buffers],
            "loop_invariant": fixed,
            "total": fixed + sum(b.total for b in buffers),
            "capacity": self.problem.resources.smem,
        }

    def listing(self) -> dict[str, list[tuple[int, str, int, int]]]:
        """The straight-line program: ``(time, op, iteration, group)`` rows of prologue, steady state and
        epilogue. The steady state is the window ``[(n-1) II, n II)`` that repeats once per iteration."""
        n, ii = self.stages, self.ii
        rows = []
        for name, slot in self.slots.items():
            for i in range(n):
                rows.append((slot.start + i * ii, name, i, slot.warp_group))
        rows.sort()
        return {
            "prologue": [r for r in rows if r[0] < (n - 1) * ii],
            "steady_state": [r for r in rows if (n - 1) * ii <= r[0] < n * ii],
            "epilogue": [r for r in rows if r[0] >= n * ii],
        }

    # ------------------------------------------------------------------------ JSON
    def to_dict(self, *, timings: bool = True) -> dict[str, Any]:
        """Plain data: at least ``ii``, ``length``, ``ops``, ``warp_groups`` and ``certificate``.

        Parameters
        ----------
        timings : bool
            Keep the wall-clock seconds (``wall_s`` of the attempts, the phase statistics and the
            normalization). ``False`` writes 0.0 in their place, so that the same input solved twice gives
            the same data.
        """
        data = {
            "schema_version": SCHEMA_VERSION,
            "kind": "twill.schedule",
            "machine": self.machine,
            "strategy": self.strategy,
            "ii": self.ii,
            "ii_cycles": round(self.ii_cycles, 1),
            "length": self.length,
            "stages": self.stages,
            "total_length": self.total_length,
            "ops": [
                {"name": s.name, "start": s.start, "stage": s.stage, "warp_group": s.warp_group}
                for s in sorted(self.slots.values(), key=lambda s: (s.start, s.name))
            ],
            "warp_groups": [
                {"index": g.index, "ops": list(g.ops), "warps": g.warps, "registers": g.registers,
                 "registers_needed": g.registers_needed, "role": g.role}
                for g in self.warp_groups
            ],
            "buffer_depths": self.buffer_depths(),
            "smem": self.smem_usage(),
            "certificate": {
                "lower_bound": self.certificate.lower_bound,
                "res_mii": self.certificate.res_mii,
                "rec_mii": self.certificate.rec_mii,
                "proven_optimal": self.certificate.proven_optimal,
                "stage_slack": self.certificate.stage_slack,
                "heuristic": self.certificate.heuristic,
                "ii_bound": self.certificate.ii_bound,
                "notes": list(self.certificate.notes),
                "scope": [r.to_dict() for r in self.certificate.scope],
                "undecided": list(self.certificate.undecided),
                "attempts": [dict(a.__dict__) for a in self.certificate.attempts],
            },
            "stats": [dict(s.__dict__) for s in self.stats],
            "normalization": dict(self.normalization),
            "bounds_cycles": dict(self.bounds_cycles),
            "problem": self.problem.to_dict(),
        }
        if not timings:
            for row in (*data["certificate"]["attempts"], *data["stats"]):
                row["wall_s"] = 0.0
            if "wall_s" in data["normalization"]:
                data["normalization"]["wall_s"] = 0.0
        return data

    def to_json(self, *, indent: int | None = 2, timings: bool = True) -> str:
        """JSON text of :meth:`to_dict` (keys in a fixed order, so equal schedules give equal text).

        With ``timings=False`` the wall-clock seconds are written as 0.0: the same input solved twice then
        gives the same text, byte for byte.
        """
        return json.dumps(self.to_dict(timings=timings), indent=indent)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Schedule:
        """Inverse of :meth:`to_dict`.

        Raises
        ------
        TwillError
            The data is not a twill schedule (wrong ``kind`` or ``schema_version``, missing fields).
        """
        if not isinstance(data, Mapping) or data.get("kind") != "twill.schedule":
            raise TwillError("not a twill schedule: the JSON has no \"kind\": \"twill.schedule\"")
        if data.get("schema_version") != SCHEMA_VERSION:
            raise TwillError(f"schedule schema_version {data.get('schema_version')!r} is not supported "
                             f"(this twill reads {SCHEMA_VERSION})")
        try:
            problem = Problem.from_dict(_table(data["problem"], "problem"))
            problem.check()
        except KeyError as exc:
            raise TwillError(f"schedule JSON is malformed: problem: missing field {exc.args[0]!r}") from exc
        except (TypeError, ValueError, AttributeError) as exc:
            raise TwillError(f"schedule JSON is malformed: problem: {exc}") from exc
        try:
            data = _Fields(data, "")
            _only(data, TOP_FIELDS, "schedule")
            names = set(problem.names)
            ii = _whole(data["ii"], "ii", low=1, high=SANITY_LIMIT)
            length = _whole(data["length"], "length", low=0, high=SANITY_LIMIT)
            if -(-length // ii) > MAX_STAGES_READ:
                raise ValueError(f"L = {length} and II = {ii} make {-(-length // ii)} stages, more than the "
                                 f"{MAX_STAGES_READ} a schedule file may have")
            slots: dict[str, OpSlot] = {}
            for i, o in enumerate(_rows(data["ops"], "ops")):
                o = _table(o, f"ops[{i}]")
                _only(o, ("name", "start", "stage", "warp_group"), f"ops[{i}] (op {o.get('name', '?')!r})")
                name = _text(o["name"], f"ops[{i}].name")
                if name in slots:
                    raise ValueError(f"op {name!r} is listed more than once under \"ops\"")
                if name not in names:
                    raise ValueError(f"ops[{i}] names {name!r}, which is not an op of the problem")
                slots[name] = OpSlot(name, _whole(o["start"], f"ops[{i}].start", -SANITY_LIMIT, SANITY_LIMIT),
                                     _whole(o["stage"], f"ops[{i}].stage", -SANITY_LIMIT, SANITY_LIMIT),
                                     _whole(o["warp_group"], f"ops[{i}].warp_group", low=0))
            missing = [n for n in problem.names if n not in slots]
            if missing:
                raise ValueError(f"op(s) {', '.join(map(repr, missing))} of the problem have no entry under "
                                 f"\"ops\"")
            groups = []
            for i, g in enumerate(_rows(data["warp_groups"], "warp_groups")):
                where = f"warp_groups[{i}]"
                g = _table(g, where)
                _only(g, ("index", "ops", "warps", "registers", "registers_needed", "role"), where)
                ops = tuple(_text(n, f"{where}.ops") for n in _rows(g["ops"], f"{where}.ops"))
                strange = [n for n in ops if n not in names]
                if strange:
                    raise ValueError(f"{where} lists {', '.join(map(repr, strange))}, not ops of the problem")
                groups.append(WarpGroup(_whole(g["index"], f"{where}.index", low=0), ops,
                                        _whole(g["warps"], f"{where}.warps", low=1),
                                        _whole(g["registers"], f"{where}.registers", low=0),
                                        _whole(g["registers_needed"], f"{where}.registers_needed", low=0),
                                        _text(g["role"], f"{where}.role")))
            c = _table(data["certificate"], "certificate")
            _only(c, CERTIFICATE_FIELDS, "certificate")
            attempts = tuple(_attempt(a, f"certificate.attempts[{i}]")
                             for i, a in enumerate(_rows(c["attempts"], "certificate.attempts")))
            cert = Certificate(_whole(c["lower_bound"], "certificate.lower_bound"),
                               _whole(c["res_mii"], "certificate.res_mii"),
                               _whole(c["rec_mii"], "certificate.rec_mii"),
                               _flag(c["proven_optimal"], "certificate.proven_optimal"), attempts,
                               _whole(c.get("stage_slack", 0), "certificate.stage_slack", low=0),
                               tuple(_text(n, "certificate.notes") for n in _rows(c.get("notes", []),
                                                                                   "certificate.notes")),
                               tuple(_scope_run(r, f"certificate.scope[{i}]")
                                     for i, r in enumerate(_rows(c.get("scope", []), "certificate.scope"))),
                               tuple(_whole(x, "certificate.undecided", low=1)
                                     for x in _rows(c.get("undecided", []), "certificate.undecided")),
                               _flag(c.get("heuristic", False), "certificate.heuristic"),
                               _whole(c.get("ii_bound", 0), "certificate.ii_bound", low=0))
            stats = tuple(_stat(row, f"stats[{i}]")
                          for i, row in enumerate(_rows(data.get("stats", []), "stats")))
            strategy = _text(data.get("strategy", "joint"), "strategy")
            if strategy not in STRATEGIES:
                raise ValueError(f"strategy {strategy!r} is not one of {', '.join(STRATEGIES)}")
            if cert.lower_bound > ii:
                raise ValueError(f"certificate.lower_bound {cert.lower_bound} is above the schedule's II "
                                 f"{ii}")
            _check_certificate(cert, ii, strategy, scoped="scope" in c)
            sched = cls(problem, ii, length, slots, tuple(groups), cert, stats, strategy,
                        dict(_table(data.get("normalization", {}), "normalization")),
                        dict(_table(data.get("bounds_cycles", {}), "bounds_cycles")))
            _check_summary(sched, data)
            return sched
        except KeyError as exc:
            raise TwillError(f"schedule JSON is malformed: missing field {exc.args[0]!r}") from exc
        except (TypeError, ValueError, AttributeError) as exc:
            raise TwillError(f"schedule JSON is malformed: {exc}") from exc

    @classmethod
    def from_json(cls, text: str) -> Schedule:
        """Parse JSON text written by :meth:`to_json`; :class:`TwillError` if it is not one."""
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise TwillError(f"not JSON: {exc}") from exc
        except RecursionError as exc:
            raise TwillError("not a twill schedule: the JSON is nested too deeply to read") from exc
        return cls.from_dict(data)


def _check_certificate(cert: Certificate, ii: int, strategy: str, *, scoped: bool) -> None:
    """ValueError naming the fields of a certificate that contradict each other (a hand-edited or
    corrupted file): the lower bound is ``max(ResMII, RecMII, 1)``; a proof of optimality
    (``proven_optimal``) is the joint strategy's, not the heuristic's, leaves no II undecided and covers
    every II from the lower bound below the schedule's with a complete scope run (as
    :func:`twill.search.certificate.finish` makes it); a heuristic schedule's ``ii_bound`` is at most
    its II. ``scoped``: the file records the scope (files written before it was recorded are not held to
    the coverage rule)."""
    mii = max(cert.res_mii, cert.rec_mii, 1)
    if cert.lower_bound != mii:
        raise ValueError(f"certificate.lower_bound {cert.lower_bound} is not max(res_mii {cert.res_mii}, "
                         f"rec_mii {cert.rec_mii}, 1) = {mii}")
    if cert.heuristic and cert.ii_bound > ii:
        raise ValueError(f"certificate.ii_bound {cert.ii_bound} is above the heuristic schedule's II {ii}")
    if not cert.proven_optimal:
        return
    if cert.heuristic:
        raise ValueError("certificate.proven_optimal is true but certificate.heuristic is true: a heuristic "
                         "schedule proves nothing")
    if strategy != "joint":
        raise ValueError(f"certificate.proven_optimal is true for strategy {strategy!r}: only the joint "
                         f"search proves optimality")
    if cert.undecided:
        raise ValueError(f"certificate.proven_optimal is true but certificate.undecided lists II(s) "
                         f"{', '.join(map(str, cert.undecided))}: an undecided II is not refuted")
    covered = {x for r in cert.scope if r.complete for x in range(r.lo, r.hi + 1)}
    missing = [x for x in range(cert.lower_bound, ii) if x not in covered] if scoped else []
    if missing:
        span = f"{missing[0]}..{missing[-1]}" if len(missing) > 1 else str(missing[0])
        raise ValueError(f"certificate.proven_optimal is true but II(s) {span} below the schedule's II {ii} "
                         f"are not refuted for every stage count (certificate.scope, from the lower bound "
                         f"{cert.lower_bound})")


def _whole(value: Any, where: str, low: int | None = None, high: int | None = None) -> int:
    """``value`` if it is an integer (not a bool) in ``[low, high]``; ValueError naming ``where``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{where} = {value!r} is not an integer")
    if low is not None and value < low:
        raise ValueError(f"{where} = {value} must be >= {low}")
    if high is not None and value > high:
        raise ValueError(f"{where} = {value} is above the sanity limit {high} (a corrupted file?)")
    return value


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{where} = {value!r} is not a number")
    return float(value)


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{where} = {value!r} is not a string")
    return value


def _flag(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{where} = {value!r} is not true or false")
    return value


class _Fields(dict):
    """A JSON object that knows where it sits: a missing field's ``KeyError`` names its full path
    (``warp_groups[0].warps``), so the error says where the file is wrong."""

    def __init__(self, value: Mapping[str, Any], where: str) -> None:
        super().__init__(value)
        self.where = where

    def __missing__(self, key: str) -> Any:
        raise KeyError(f"{self.where}.{key}" if self.where else key)


def _table(value: Any, where: str) -> Mapping[str, Any]:
    """``value`` as a :class:`_Fields` if it is a JSON object; ValueError naming ``where`` otherwise."""
    if not isinstance(value, Mapping):
        raise ValueError(f"{where} is {type(value).__name__}, not a JSON object")
    return _Fields(value, where)


TOP_FIELDS: tuple[str, ...] = (
    "schema_version", "kind", "machine", "strategy", "ii", "ii_cycles", "length", "stages", "total_length",
    "ops", "warp_groups", "buffer_depths", "smem", "certificate", "stats", "normalization", "bounds_cycles",
    "problem")
"""The top-level fields of a saved schedule (:meth:`Schedule.to_dict`)."""
CERTIFICATE_FIELDS: tuple[str, ...] = (
    "lower_bound", "res_mii", "rec_mii", "proven_optimal", "stage_slack", "heuristic", "ii_bound", "notes",
    "scope", "undecided", "attempts")
"""The fields of a saved schedule's ``certificate``."""


def _only(data: Mapping[str, Any], valid: Sequence[str], where: str) -> None:
    """ValueError naming every field of ``data`` outside ``valid``, with the closest valid name: a
    misspelled field would otherwise be ignored and its default used."""
    message = unknown_keys_message(data, valid, where)
    if message:
        raise ValueError(message)


def _rows(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise ValueError(f"{where} is {type(value).__name__}, not a JSON list")
    return value


def _scope_run(r: Any, where: str) -> ScopeRun:
    row = _table(r, where)
    _only(row, ("lo", "hi", "stages", "complete"), where)
    stages = row.get("stages")
    return ScopeRun(_whole(row["lo"], f"{where}.lo", low=1), _whole(row["hi"], f"{where}.hi", low=1),
                    None if stages is None else _whole(stages, f"{where}.stages", low=0),
                    _flag(row["complete"], f"{where}.complete"))


def _attempt(a: Any, where: str) -> Attempt:
    a = _table(a, where)
    _only(a, ("ii", "stages", "phase", "status", "wall_s", "reason"), where)
    stages = a.get("stages")
    return Attempt(_whole(a["ii"], f"{where}.ii"),
                   None if stages is None else _whole(stages, f"{where}.stages"),
                   _text(a["phase"], f"{where}.phase"), _text(a["status"], f"{where}.status"),
                   _number(a["wall_s"], f"{where}.wall_s"), _text(a.get("reason", ""), f"{where}.reason"))


def _stat(row: Any, where: str) -> PhaseStats:
    row = _table(row, where)
    _only(row, ("phase", "wall_s", "calls", "detail"), where)
    return PhaseStats(_text(row["phase"], f"{where}.phase"), _number(row["wall_s"], f"{where}.wall_s"),
                      _whole(row.get("calls", 1), f"{where}.calls", low=0),
                      _text(row.get("detail", ""), f"{where}.detail"))


def _check_summary(sched: Schedule, data: Mapping[str, Any]) -> None:
    """The fields a file repeats for readers (machine, stages, total length, II in cycles, buffer depths,
    SMEM use)
    must be what the schedule gives; a file that disagrees was edited or is corrupt, and silently
    recomputing them would hide that. ``ValueError`` naming the field and both values."""
    derived: dict[str, Any] = {"machine": sched.machine, "stages": sched.stages,
                               "total_length": sched.total_length, "buffer_depths": sched.buffer_depths(),
                               "smem": sched.smem_usage()}
    for key, want in derived.items():
        if key in data and data[key] != want:
            raise ValueError(f"{key} is {data[key]!r}, but the schedule (II {sched.ii}, L {sched.length}, "
                             f"its ops and problem) gives {want!r}")
    if "ii_cycles" in data:
        stored = data["ii_cycles"]
        if isinstance(stored, bool) or not isinstance(stored, (int, float)) \
                or abs(stored - sched.ii_cycles) > 0.051:
            raise ValueError(f"ii_cycles is {stored!r}, but II {sched.ii} x {sched.problem.cycles_per_unit} "
                             f"cycles per unit = {round(sched.ii_cycles, 1)}")


def group_role(problem: Problem, ops: Sequence[str]) -> str:
    """A warp group's role from its ops: ``producer`` (only variable-latency ops: loads, atomics),
    ``consumer`` (fixed-latency ops beside a producer) or ``compute`` (a loop without variable latency)."""
    if all(problem.op(n).variable_latency for n in ops):
        return "producer"
    return "consumer" if problem.has_vl else "compute"


def make_groups(problem: Problem, start: Mapping[str, int], group: Mapping[str, int],
                warps: Mapping[int, int], needed: Mapping[int, int]) -> tuple[WarpGroup, ...]:
    """Warp groups with a ``setmaxnreg`` plan that hands spare registers to the compute groups.

    Each group gets at least its need; what the register file has left is spread over the non-producer
    groups in steps of the machine's granularity, up to the per-thread limit rounded down to the step,
    largest need first.
    """
    res = problem.resources
    used = sorted(set(group.values()))
    threads = {g: res.group_threads(warps[g]) for g in used}
    plan = {g: needed[g] for g in used}
    cap = min(res.setmaxnreg_max, res.max_regs // res.setmaxnreg_step * res.setmaxnreg_step)
    if problem.options.register_plan is None:
        producer = {g for g in used if all(problem.op(n).variable_latency for n in group if group[n] == g)}
        takers = sorted((g for g in used if g not in producer), key=lambda g: (-needed[g], g))
        spare = res.register_file - sum(threads[g] * plan[g] for g in used)
        progress = True
        while progress and takers:
            progress = False
            for g in takers:
                cost = threads[g] * res.setmaxnreg_step
                if plan[g] + res.setmaxnreg_step <= max(cap, needed[g]) and cost <= spare:
                    plan[g] += res.setmaxnreg_step
                    spare -= cost
                    progress = True
    out = []
    for g in used:
        ops = tuple(sorted((n for n in group if group[n] == g), key=lambda n: (start[n], n)))
        out.append(WarpGroup(g, ops, warps[g], plan[g], needed[g], group_role(problem, ops)))
    return tuple(out)


def slots_from(start: Mapping[str, int], group: Mapping[str, int], ii: int,
               order: Sequence[str]) -> dict[str, OpSlot]:
    """OpSlots in the order of ``order`` (the problem's: ops by name)."""
    return {n: OpSlot(n, start[n], start[n] // ii, group[n]) for n in order}
