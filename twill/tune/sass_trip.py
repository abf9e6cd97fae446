"""Cycles per loop trip of each warp group of a compiled Gluon kernel, read from its SASS.

The Gluon backend (:mod:`twill.codegen.gluon`) makes one loop per partition, and each partition's warps
issue that loop's instructions in order. On the repaired FA kernels (no serialized wgmma, swizzled staging)
a trip measured on the H200 takes 1.1-3x the schedule's II (700-7400 cycles) although every partition issues
only 60-640 instructions per trip (``benchmarks/results/tune_scores.md``): the partitions' warps stall on
their own dependences. A group of 4 warps has one warp on each of the SM's 4 schedulers, and that warp waits
for each result (an exponential, a shuffle of a row reduction, the accumulator of the wgmma it waits for
before the back-edge) before the next instruction that reads it: nothing else on that scheduler hides it.

:func:`walk_trip` prices that: it issues one loop body's instructions in order, one per cycle per warp, each
when its source registers are ready (each result ready a class latency after its issue,
:class:`SassLatencies`, measured on the H200 by ``benchmarks/calibrate/latency.cu``), a ``MUFU`` every
``32 / (mufu_per_cycle / 4)`` cycles, shared-memory instructions at ``cost.smem_bytes_per_cycle``, a
``BAR.SYNC`` costing a barrier, each ``HGMMA`` on the Tensor Cores at ``cost.tc_flops_fp16`` (shared by
the group's warp groups), its commit group done ``cost.tc_latency`` after the last one's throughput time
and ``WARPGROUP.DEPBAR`` waiting for it. The body is walked several times so that values carried over the
back-edge count; the cycles between two trips are the group's trip. An mbarrier wait (``SYNCS.PHASECHK``)
is priced as one that finds its phase done (the other group is ahead): what the walk gives is the group's
own bound.

:func:`loop_bodies` finds each partition's steady loop in the disassembly (the conditional backward branch
with the longest body among those whose lines fall in the partition's function of the generated
``kernel.py``; on the 34 committed FA grid kernels that is the main loop, never the short-trip-count
variant),
:func:`trip_bounds` walks each. :func:`coupled_groups` and :func:`coupled_trip` combine the groups' walks:
groups that hand registers to each other every trip wait for each other, so their walks add up (less the
fitted ``cost.sass_overlap``).
"""

from __future__ import annotations

import math
import re
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "Instr",
    "LoopBody",
    "SassLatencies",
    "WalkResult",
    "coupled_groups",
    "coupled_trip",
    "disassemble",
    "latencies_from_machine",
    "loop_bodies",
    "parse_sass",
    "trip_bounds",
    "walk_trip",
]

_INSTR = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
_LABEL = re.compile(r"^\s*(\.L_x_\d+):")
_LINE = re.compile(r'//## File "([^"]+)", line (\d+)')
_REG = re.compile(r"(?<![A-Za-z0-9_.])(U?R\d+|U?P\d)(?![0-9])")
_HGMMA = re.compile(r"HGMMA\.(\d+)x(\d+)x(\d+)")
_NO_DEST = ("ST", "STS", "STG", "STL", "STSM", "BAR", "BRA", "WARPGROUP", "HGMMA", "UTMALDG", "UTMASTG",
            "UTMACMDFLUSH", "FENCE", "MEMBAR", "EXIT", "NOP", "RET", "BSYNC", "BSSY", "WARPSYNC",
            "CCTL", "ERRBAR", "DEPBAR", "UTMAPF", "CALL", "YIELD", "RED")
_SMEM = ("LDS", "STS", "LDSM", "STSM")
_LOCAL = ("LDL", "STL")


@dataclass(frozen=True)
class Instr:
    """One SASS instruction: its address, opcode with modifiers, guard, operand text, source line."""

    address: int
    opcode: str
    guard: str
    operands: tuple[str, ...]
    line: int | None

    @property
    def base(self) -> str:
        """The opcode without modifiers (``FFMA``, ``HGMMA``, ``SYNCS``)."""
        return self.opcode.split(".")[0]


@dataclass(frozen=True)
class LoopBody:
    """A partition's steady loop: the instructions from the back-edge's target to the back-edge."""

    function: str
    instrs: tuple[Instr, ...]


@dataclass(frozen=True)
class SassLatencies:
    """Cycles from an instruction's issue until a dependent instruction may issue, per class, and the
    other rates of :func:`walk_trip` (each from ``machines/<name>.toml``: :func:`latencies_from_machine`).

    Attributes
    ----------
    alu : float
        FP32 and integer ALU results (``FFMA``, ``FMNMX``, ``IADD3``...).
    mufu : float
        ``MUFU`` results.
    mufu_interval : float
        Cycles a warp's ``MUFU`` holds its scheduler's special-function unit (32 lanes at a quarter of
        the SM's ``cost.mufu_per_cycle``).
    shfl : float
        ``SHFL`` results.
    convert : float
        ``F2FP`` (fp32 -> fp16x2) results.
    smem : float
        ``LDS`` / ``LDSM`` results.
    smem_bytes_per_cycle : float
        The SM's shared-memory port rate (a warp's request of ``n`` bytes holds it ``n / rate`` cycles).
    bar_sync : float
        A ``BAR.SYNC`` of 4 warps (one warp group) arriving together.
    bar_sync_per_warp : float
        What each warp beyond 4 adds to it (the thread count is the instruction's second operand).
    trywait : float
        An mbarrier ``SYNCS.PHASECHK`` (try-wait) that finds its phase complete, until its predicate is
        readable.
    uniform : float
        Uniform-datapath results (``UIADD3``, ``R2UR``...).
    tc_flops : float
        Tensor Core FLOP per cycle per SM (fp16).
    wgmma_smem_bytes_per_cycle : float
        Shared-memory operand rate of ``HGMMA``.
    tc_latency : float
        From the last ``HGMMA`` of a commit group of several instructions' throughput time until its
        accumulator is readable.
    tc_serial_latency : float
        The same for a commit group of one ``HGMMA`` (what ptxas emits when it serializes the pipeline).
    local : float
        ``LDL`` (spilled registers, from L1).
    """

    alu: float
    mufu: float
    mufu_interval: float
    shfl: float
    convert: float
    smem: float
    smem_bytes_per_cycle: float
    bar_sync: float
    bar_sync_per_warp: float
    trywait: float
    uniform: float
    tc_flops: float
    wgmma_smem_bytes_per_cycle: float
    tc_latency: float
    tc_serial_latency: float
    local: float


def latencies_from_machine(machine: Any) -> SassLatencies:
    """The :class:`SassLatencies` of a machine description (its ``cost.sass_*`` latencies and the
    ``[cost]`` rates)."""

    def c(key: str) -> float:
        return float(machine.const(key))

    return SassLatencies(alu=c("cost.sass_alu_latency"), mufu=c("cost.sass_mufu_latency"),
                         mufu_interval=32.0 / (c("cost.mufu_per_cycle") / 4.0),
                         shfl=c("cost.sass_shfl_latency"), convert=c("cost.sass_convert_latency"),
                         smem=c("cost.sass_smem_latency"),
                         smem_bytes_per_cycle=c("cost.smem_bytes_per_cycle"),
                         bar_sync=c("cost.sass_bar_sync"),
                         bar_sync_per_warp=c("cost.sass_bar_sync_per_warp"),
                         trywait=c("cost.sass_trywait_latency"), uniform=c("cost.sass_uniform_latency"),
                         tc_flops=c("cost.tc_flops_fp16"),
                         wgmma_smem_bytes_per_cycle=c("cost.wgmma_smem_bytes_per_cycle"),
                         tc_latency=c("cost.tc_latency"),
                         tc_serial_latency=c("cost.tc_serial_latency"), local=c("cost.sass_local_latency"))


def parse_sass(text: str, source: str = "kernel.py") -> tuple[list[Instr], dict[str, int]]:
    """Instructions of an ``nvdisasm -c -g`` listing (``-g``: the ``//## File ..., line N`` comments) and
    the index of the instruction after each label.

    ``source`` names the file whose line numbers are kept (the generated ``kernel.py``; lines of Triton's
    own library inlined into it keep the last line of ``source``).

    >>> text = '''
    ... //## File "/x/kernel.py", line 7
    ... .L_x_1:
    ...         /*0010*/                   FFMA R1, R2, R3, R1 ;
    ...         /*0020*/               @P0 BRA `(.L_x_1) ;
    ... '''
    >>> ins, labels = parse_sass(text)
    >>> [(i.opcode, i.guard, i.operands, i.line) for i in ins], labels
    ([('FFMA', '', ('R1', 'R2', 'R3', 'R1'), 7), ('BRA', '@P0', ('`(.L_x_1)',), 7)], {'.L_x_1': 0})
    """
    instrs: list[Instr] = []
    labels: dict[str, int] = {}
    line: int | None = None
    for raw in text.splitlines():
        m = _LINE.search(raw)
        if m:
            if Path(m.group(1)).name == source:
                line = int(m.group(2))
            continue
        m = _LABEL.match(raw)
        if m:
            labels[m.group(1)] = len(instrs)
            continue
        m = _INSTR.search(raw)
        if not m:
            continue
        body = m.group(2).strip()
        guard = ""
        if body.startswith("@"):
            guard, body = body.split(None, 1)
        parts = body.split(None, 1)
        ops = tuple(o.strip() for o in parts[1].split(",")) if len(parts) > 1 else ()
        instrs.append(Instr(int(m.group(1), 16), parts[0], guard, ops, line))
    return instrs, labels


def _functions(kernel_py: str) -> list[tuple[int, str]]:
    """``(first line, name)`` of each top-level ``def`` of the generated kernel source."""
    out = []
    for i, text in enumerate(kernel_py.splitlines(), start=1):
        m = re.match(r"def (\w+)\(", text)
        if m:
            out.append((i, m.group(1)))
    return out


def loop_bodies(instrs: Sequence[Instr], labels: Mapping[str, int], kernel_py: str) -> dict[str, LoopBody]:
    """Per function of the generated ``kernel_py`` (``_part0_g1``...): its steady loop, the longest body
    of a conditional backward branch whose instructions mostly carry that function's lines.

    A mbarrier wait's retry loop (a try-wait and its branch back, placed out of line) is 2-3
    instructions and never the longest; a function without a loop is left out.
    """
    funcs = _functions(kernel_py)

    def owner(line: int | None) -> str | None:
        if line is None:
            return None
        name = None
        for first, fname in funcs:
            if first <= line:
                name = fname
        return name

    best: dict[str, LoopBody] = {}
    for i, ins in enumerate(instrs):
        if ins.base != "BRA" or not ins.guard or not ins.operands:
            continue
        m = re.search(r"\((\.L_x_\d+)\)", ins.operands[0])
        if not m or m.group(1) not in labels or labels[m.group(1)] >= i:
            continue
        body = tuple(instrs[labels[m.group(1)]: i + 1])
        votes: dict[str, int] = {}
        for b in body:
            name = owner(b.line)
            if name is not None:
                votes[name] = votes.get(name, 0) + 1
        if not votes:
            continue
        fname = max(sorted(votes), key=lambda n: votes[n])
        if fname not in best or len(body) > len(best[fname].instrs):
            best[fname] = LoopBody(fname, body)
    return best


def _width(ins: Instr) -> int:
    """Registers a load or a conversion writes: ``.64`` 2, ``.128`` 4, ``LDSM .x2`` 2, ``.x4`` 4."""
    op = ins.opcode
    for suffix, n in ((".128", 4), (".64", 2), (".X4", 4), (".X2", 2)):
        if suffix in op.upper():
            return n
    return 1


def _regs(text: str) -> list[str]:
    return list(_REG.findall(text))


def _expand(reg: str, n: int) -> list[str]:
    m = re.fullmatch(r"(U?R)(\d+)", reg)
    if not m or n == 1:
        return [reg]
    return [f"{m.group(1)}{int(m.group(2)) + k}" for k in range(n)]


_TWO_DESTS = ("SHFL", "PLOP3")
"""Opcodes that write their first two operands (``SHFL.BFLY PT, R15, R88, ...``: a predicate and the
value; ``PLOP3`` and ``*SETP``: two predicates); ``PT`` is the discarded predicate."""


def _two_dests(ins: Instr) -> bool:
    return ins.base in _TWO_DESTS or ins.base.endswith("SETP")


def _dests(ins: Instr) -> list[str]:
    """Registers and predicates ``ins`` writes (SASS puts them first)."""
    b = ins.base
    if b in _NO_DEST or ins.opcode.startswith("SYNCS.ARRIVE") or not ins.operands:
        return []
    if _two_dests(ins):
        return [r for text in ins.operands[:2] for r in _regs(text)]
    first = _regs(ins.operands[0])
    if not first:
        return []
    return _expand(first[0], _width(ins)) if b in ("LDS", "LDSM", "LDL", "LDG", "LD", "LDC") else [first[0]]


def _sources(ins: Instr, dests: Sequence[str]) -> list[str]:
    skip = 2 if _two_dests(ins) else (1 if dests else 0)
    out = _regs(ins.guard)
    for text in ins.operands[skip:]:
        out += _regs(text)
    return out


def _latency(ins: Instr, lat: SassLatencies) -> float:
    b = ins.base
    if b == "MUFU":
        return lat.mufu
    if b == "SHFL":
        return lat.shfl
    if b == "F2FP":
        return lat.convert
    if ins.opcode.startswith("SYNCS.PHASECHK"):
        return lat.trywait
    if b in ("LDS", "LDSM"):
        return lat.smem
    if b in _LOCAL or b in ("LDG", "LD", "LDC"):
        return lat.local
    if b.startswith("U") or b in ("R2UR", "S2UR", "VOTEU"):
        return lat.uniform
    return lat.alu


def _bar_cycles(ins: Instr, lat: SassLatencies, warps: int) -> float:
    """A ``BAR.SYNC`` 's cost: ``bar_sync`` for 4 warps plus ``bar_sync_per_warp`` per warp beyond, the
    warps from its thread-count operand (``BAR.SYNC.DEFER_BLOCKING 0x0, 0x80``: 128 threads), else
    ``warps`` (the partition's)."""
    n = warps
    if len(ins.operands) > 1:
        try:
            n = max(1, int(ins.operands[1], 0) // 32)
        except ValueError:
            n = warps
    return lat.bar_sync + lat.bar_sync_per_warp * max(0, n - 4)


def _smem_bytes(ins: Instr) -> int:
    """Bytes a warp's shared-memory instruction moves (32 lanes x the access width)."""
    op = ins.opcode.upper()
    if ins.base in ("LDSM", "STSM"):
        n = 4 if ".X4" in op else 2 if ".X2" in op else 1
        return 128 * n                      # n 8x8 matrices of 16-bit elements: 128 B each
    per_lane = 16 if ".128" in op else 8 if ".64" in op else 2 if (".U16" in op or ".S16" in op) else (
        1 if (".U8" in op or ".S8" in op) else 4)
    return 32 * per_lane


@dataclass(frozen=True)
class WalkResult:
    """What :func:`walk_trip` found for one loop body.

    Attributes
    ----------
    cycles : float
        Cycles per trip in the steady state (between the last two walked trips).
    instructions : int
        Instructions per trip per warp.
    stall : dict
        Cycles per trip that issue waited, by the class of what it waited for (``tc``: an ``HGMMA``
        commit group; ``register``: a source register; ``mufu`` / ``smem``: the unit; ``barrier``).
    """

    cycles: float
    instructions: int
    stall: Mapping[str, float]


def walk_trip(body: Sequence[Instr], lat: SassLatencies, *, warps_per_scheduler: int = 1,
              warpgroups: int = 1, trips: int = 4, issue: list[float] | None = None) -> WalkResult:
    """Walk ``body`` (a loop's instructions, back-edge last) ``trips`` times in order and return the
    cycles of the last trip (see the module docstring).

    Parameters
    ----------
    body : sequence of Instr
        One loop body (:func:`loop_bodies`), back-edge last.
    lat : SassLatencies
        Latencies and rates, in SM cycles (:func:`latencies_from_machine`).
    warps_per_scheduler : int
        Warps of the partition on each scheduler (a partition of 8 warps has 2): they take turns, so each
        warp's instructions hold the scheduler, the ``MUFU`` and the shared-memory ports that many times
        as long.
    warpgroups : int
        The partition's warp groups, whose ``HGMMA`` s share the Tensor Cores.
    trips : int
        Trips walked (values carried over the back-edge need 2; 4 reach the steady state of every FA
        kernel's loop).
    issue : list, optional
        Filled with each instruction's issue time in the last trip, cycles after that trip's start
        (where a group's arrives and waits fall in its trip).

    Returns
    -------
    WalkResult
        Cycles of the last trip (SM cycles), instructions per trip, stalls of the last trip by cause.

    >>> lat = SassLatencies(alu=4, mufu=18, mufu_interval=8, shfl=24, convert=5, smem=30,
    ...                     smem_bytes_per_cycle=128, bar_sync=20, bar_sync_per_warp=2, trywait=40,
    ...                     uniform=2, tc_flops=4096,
    ...                     wgmma_smem_bytes_per_cycle=192, tc_latency=88,
    ...                     tc_serial_latency=56, local=30)
    >>> ins, labels = parse_sass('''
    ... .L_x_0:
    ...   /*0000*/   FFMA R1, R1, R2, R3 ;
    ...   /*0010*/   MUFU.EX2 R1, R1 ;
    ...   /*0020*/   @P0 BRA `(.L_x_0) ;
    ... ''')
    >>> walk_trip(ins, lat).cycles         # FFMA (4) then MUFU (18) on the carried R1; the branch overlaps
    22.0
    """
    gen = _walk(body, lat, warps_per_scheduler=warps_per_scheduler, warpgroups=warpgroups, trips=trips,
                issue=issue)
    try:
        request = next(gen)
        while True:
            request = gen.send(request[3])     # alone: every wait finds its phase done
    except StopIteration as stop:
        return stop.value


def _walk(body: Sequence[Instr], lat: SassLatencies, *, warps_per_scheduler: int, warpgroups: int,
          trips: int, issue: list[float] | None) -> Any:
    """:func:`walk_trip` as a generator: before each ``SYNCS`` (mbarrier) or ``UTMALDG`` instruction it
    yields ``(trip, index, instr, at)`` (``at``: when it could issue) and takes back when it issues (a
    co-simulation of several groups makes a wait issue when its arrive has landed); its return value is
    the :class:`WalkResult`."""
    ready: dict[str, float] = {}
    t = 0.0                       # the next issue slot of this warp
    mufu_free = smem_free = tc_free = 0.0
    groups: list[float] = []      # completion times of committed HGMMA groups, in order
    open_count = 0                # HGMMAs of the open (uncommitted) group
    starts: list[float] = []
    w = float(max(1, warps_per_scheduler))
    last_stall: dict[str, float] = {}
    for _trip in range(trips):
        starts.append(t)
        last_stall = {}
        if issue is not None:
            issue.clear()
        for idx, ins in enumerate(body):
            dests = _dests(ins)
            srcs = _sources(ins, dests)
            need = max([ready.get(r, 0.0) for r in srcs], default=0.0)
            why = "register"
            at = max(t, need)
            if at > t:
                last_stall[why] = last_stall.get(why, 0.0) + at - t
            b = ins.base
            if ins.opcode.startswith("WARPGROUP.DEPBAR"):
                m = re.search(r"0x([0-9a-f]+)", " ".join(ins.operands))
                keep = int(m.group(1), 16) if m else 0
                done = groups[-1 - keep] if len(groups) > keep else 0.0
                if done > at:
                    last_stall["tc"] = last_stall.get("tc", 0.0) + done - at
                    at = done
            elif ins.opcode.startswith("WARPGROUP.ARRIVE"):
                drain = max(ready.values(), default=0.0)   # wgmma.fence: prior register writes land first
                if drain > at:
                    last_stall["register"] = last_stall.get("register", 0.0) + drain - at
                    at = drain
            elif b in ("SYNCS", "UTMALDG"):
                later = yield (_trip, idx, ins, at)
                if later > at:
                    last_stall["mbarrier"] = last_stall.get("mbarrier", 0.0) + later - at
                    at = later
            if b == "BAR":
                cost = _bar_cycles(ins, lat, 4 * int(w))
                last_stall["barrier"] = last_stall.get("barrier", 0.0) + cost
                at += cost
            elif b == "MUFU":
                if mufu_free > at:
                    last_stall["mufu"] = last_stall.get("mufu", 0.0) + mufu_free - at
                    at = mufu_free
                mufu_free = at + lat.mufu_interval * w
            elif b in _SMEM:
                if smem_free > at:
                    last_stall["smem"] = last_stall.get("smem", 0.0) + smem_free - at
                    at = smem_free
                smem_free = at + _smem_bytes(ins) / lat.smem_bytes_per_cycle * w
            if b == "HGMMA":
                m = _HGMMA.search(ins.opcode)
                mm, nn, kk = (int(x) for x in m.groups()) if m else (64, 64, 16)
                a_smem = "gdesc" in (ins.operands[1] if len(ins.operands) > 1 else "")
                nbytes = (mm * kk * 2 if a_smem else 0) + nn * kk * 2
                busy = max(2.0 * mm * nn * kk / lat.tc_flops, nbytes / lat.wgmma_smem_bytes_per_cycle)
                start = max(at, tc_free)
                tc_free = start + busy * max(1, warpgroups)
                open_count += 1
                if any("gsb0" in o for o in ins.operands):
                    groups.append(tc_free + (lat.tc_latency if open_count > 1 else lat.tc_serial_latency))
                    open_count = 0
            for r in dests:
                ready[r] = at + _latency(ins, lat)
            if issue is not None:
                issue.append(at - starts[-1])
            t = at + w            # the scheduler's next slot for this warp (w warps take turns)
    cycles = t - starts[-1]
    return WalkResult(cycles=float(cycles), instructions=len(body),
                      stall={k: round(v, 1) for k, v in sorted(last_stall.items())})




def disassemble(cubin: bytes) -> str:
    """``nvdisasm -c -g`` of a cubin (Triton's bundled ``nvdisasm``).

    Raises
    ------
    RuntimeError
        nvdisasm fails (its message is kept).
    """
    from twill.calibrate.regs import triton_tool

    with tempfile.TemporaryDirectory(prefix="twill-sass-") as tmp:
        path = Path(tmp) / "k.cubin"
        path.write_bytes(cubin)
        run = subprocess.run([str(triton_tool("nvdisasm")), "-c", "-g", str(path)], capture_output=True,
                             text=True, timeout=300, check=False)
    if run.returncode != 0:
        raise RuntimeError(f"nvdisasm failed on the compiled kernel: {run.stderr[-1000:]}")
    return run.stdout


def trip_bounds(sass: str, kernel_py: str, partitions: Sequence[Mapping[str, Any]],
                lat: SassLatencies) -> dict[int, dict[str, Any]]:
    """Per warp group, its steady loop's :func:`walk_trip`.

    Parameters
    ----------
    sass : str
        ``nvdisasm -c -g`` of the kernel (:func:`disassemble`).
    kernel_py : str
        The generated ``kernel.py`` the SASS was compiled from (its line numbers name each partition's
        function: the partition at ``position`` p is ``_part{p}_g{group}``).
    partitions : sequence of mappings
        The report's partitions: ``position``, ``group``, ``warps``.
    lat : SassLatencies
        Latencies and rates (:func:`latencies_from_machine`).

    Returns
    -------
    dict
        ``{group: {"cycles", "instructions", "stall", "warps"}}``, cycles per trip in SM cycles; a group
        whose function has no loop in the SASS is left out (the caller says so:
        :func:`twill.tune.gluon_worker.sass_walks`).
    """
    instrs, labels = parse_sass(sass)
    bodies = loop_bodies(instrs, labels, kernel_py)
    out: dict[int, dict[str, Any]] = {}
    for p in partitions:
        name = f"_part{p['position']}_g{p['group']}"
        if name not in bodies:
            continue
        warps = int(p["warps"])
        r = walk_trip(bodies[name].instrs, lat, warps_per_scheduler=max(1, math.ceil(warps / 4)),
                      warpgroups=max(1, math.ceil(warps / 4)))
        out[int(p["group"])] = {"cycles": round(r.cycles, 1), "instructions": r.instructions,
                                "stall": dict(r.stall), "warps": warps}
    return out


def coupled_groups(graph: Any, schedule: Any) -> list[tuple[int, ...]]:
    """The warp groups joined by register values handed between them (a dependence with carrier
    ``register`` whose ends sit on different groups, which the Gluon backend stages through a
    single-buffered shared-memory slot with an mbarrier each way), as sorted tuples; a group that hands
    no register value is alone. Groups that only share a TMA ring (the producer) are not joined.

    >>> from types import SimpleNamespace as NS
    >>> from twill.ir.graph import Graph
    >>> g = Graph("t")
    >>> for n in ("k", "qk", "p", "pv"):
    ...     _ = g.add_op(n, "alu", busy={"alu": 4})
    >>> for a, b, c in (("k", "qk", "smem"), ("qk", "p", "register"), ("p", "pv", "register")):
    ...     _ = g.add_edge(a, b, carrier=c)
    >>> s = NS(warp_groups=(NS(index=0, ops=("k",)), NS(index=1, ops=("qk", "p")), NS(index=2, ops=("pv",))))
    >>> coupled_groups(g, s)
    [(0,), (1, 2)]
    """
    group = {name: g.index for g in schedule.warp_groups for name in g.ops}
    parent = {g.index: g.index for g in schedule.warp_groups}

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for e in graph.edges:
        if e.carrier != "register" or e.src == e.dst:
            continue
        a, b = group.get(e.src), group.get(e.dst)
        if a is None or b is None or a == b:
            continue
        parent[find(a)] = find(b)
    comps: dict[int, list[int]] = {}
    for g in sorted(parent):
        comps.setdefault(find(g), []).append(g)
    return sorted(tuple(v) for v in comps.values())


def coupled_trip(walks: Mapping[int, float], components: Sequence[Sequence[int]], *,
                 overlap: float = 1.0) -> float:
    """Cycles per trip that the groups' own walks (:func:`trip_bounds` ``cycles`` by group) allow: each
    component of :func:`coupled_groups` takes ``max(its slowest walk, overlap x the sum of its walks)``
    (a group waits each trip for the value the other hands it, so their walks run one after the other,
    less the part that ``overlap`` < 1 lets them overlap), the kernel its slowest component.

    >>> coupled_trip({0: 200, 1: 700, 2: 600}, [(0,), (1, 2)])
    1300.0
    >>> coupled_trip({0: 200, 1: 700, 2: 600}, [(0,), (1, 2)], overlap=0.5)
    700.0
    """
    best = 0.0
    for comp in components:
        vals = [float(walks[g]) for g in comp if g in walks]
        if vals:
            best = max(best, max(vals), overlap * sum(vals))
    return best
