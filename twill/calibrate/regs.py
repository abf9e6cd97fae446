"""Registers, spills and shared memory of a Triton kernel, read from the real compiler on the CPU.

``twill regs FILE.py[::KERNEL] --target sm_90 --num-warps 2,4,8,16`` compiles a kernel through Triton
3.6 (AST -> TTIR -> TTGIR -> LLVM IR -> PTX) for each ``num_warps``, assembles the PTX with the ``ptxas``
that ships inside the Triton wheel (``triton/backends/nvidia/bin``; ``ptxas-blackwell`` for sm_100, as
Triton does) and reads back, without a GPU:

* registers per thread and the stack frame / spill-store / spill-load bytes (``ptxas -v``);
* ``REG``, ``SHARED`` (static) and ``LOCAL`` from ``cuobjdump --dump-resource-usage`` (a cross-check);
* the number of ``STL``/``LDL`` (local-memory spill) instructions in the SASS (``cuobjdump -sass``);
* the dynamic shared memory Triton allocates (its ``shared`` metadata);
* for warp-specialized kernels the ``.maxnreg`` launch cap and the ``setmaxnreg`` budgets in the PTX.

It prints the register-rationing table of ``shared/seeds/000_39b60fd9293b68ae.txt``: as ``num_warps``
grows, ptxas gives each thread fewer registers (a tile spread over more threads needs fewer per thread,
and the launch cap ``65536 / threads`` bites at 512+ threads), usually without any spill instruction. Rows
where registers fall are flagged, the steepest fall is marked as the cliff, and spills are flagged.

    >>> reports = sweep("examples/decode_attention.py", num_warps=(2, 4), sass=False)
    >>> [(r.num_warps, r.registers, r.spills) for r in reports]
    [(2, 168, False), (4, 96, False)]

The register-footprint model that the scheduler uses (:meth:`twill.ir.costmodel.CostModel.regs_for`, the
``registers.group_overhead`` of a machine and :meth:`twill.ir.costmodel.CostModel.register_cap`) is fitted to
and tested against these numbers in ``tests/test_regs.py``; ``docs/calibration.md`` gives the fit.
"""

from __future__ import annotations

import itertools
import os
import re
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from twill.errors import FrontendError

__all__ = ["Cliff", "RegReport", "compile_registers", "find_cliffs", "parse_ptx", "parse_ptxas_log",
           "parse_resource_usage", "parse_sass", "parse_sass_loop", "parse_sass_loop_barriers",
           "parse_sass_loop_local", "parse_sass_loop_memory", "parse_sass_loops", "render_table",
           "run_triton_tool", "sweep", "triton_tool"]

_TARGETS = {90: ("sm_90a", "ptxas", "h100"), 100: ("sm_100a", "ptxas-blackwell", "b200")}
"""Per compute capability (:data:`twill.frontend.targets.CAPABILITIES`): the ptxas ``--gpu-name``, the
Triton wheel's ptxas binary and the bundled machine whose register cap applies."""


@dataclass(frozen=True)
class RegReport:
    """What the compiler says about one kernel at one ``num_warps``.

    Attributes
    ----------
    kernel, source : str
        Kernel name and the file it came from.
    target : str
        ``"sm_90"`` or ``"sm_100"`` (assembled for ``sm_90a`` / ``sm_100a``).
    num_warps, num_stages : int
        Compile options.
    threads : int
        Threads per CTA at launch, from the PTX ``.maxntid``/``.reqntid`` (a warp-specialized kernel has
        more than ``32 * num_warps``).
    registers : int
        Registers per thread (``ptxas -v``: "Used N registers").
    register_cap : int
        Entry budget per thread for ``threads`` threads on the target machine,
        :meth:`twill.ir.costmodel.CostModel.register_cap` (``min(255, 65536 / threads)`` rounded down to 8).
    stack_frame_bytes, spill_store_bytes, spill_load_bytes : int
        Per thread, from ``ptxas -v``.
    stl, ldl : int or None
        ``STL``/``LDL`` instructions in the SASS (static count); None when the SASS was not read
        (``sass=False``).
    shared_bytes : int
        Dynamic shared memory per CTA that Triton allocates (bytes; the launch's ``shared``).
    static_shared_bytes, local_bytes : int
        ``SHARED`` and ``LOCAL`` of ``cuobjdump --dump-resource-usage`` (bytes; on sm_90 ``SHARED`` is
        the 1 KB the system reserves per CTA, not part of Triton's allocation).
    maxnreg : int or None
        ``.maxnreg`` of the PTX entry (warp-specialized kernels).
    setmaxnreg : tuple of (str, int)
        ``setmaxnreg.{inc,dec}`` budgets in PTX order, duplicates removed.
    mma : str
        Tensor Core instruction family in the PTX: ``wgmma``, ``tcgen05``, ``mma.sync`` or ``none``.
    ptx_virtual_registers : int
        Virtual registers the PTX declares (``.reg`` counts summed).
    sass_instructions : int or None
        Instructions in the SASS (None when not read).
    loop_sass_instructions : int or None
        Instructions one warp issues per trip of the kernel's main loop: the SASS between the target of
        the backward branch that spans the most instructions and that branch
        (:func:`parse_sass_loop`); None when the SASS was not read or has no backward branch.
    loop_local_bytes : tuple of (int, int) or None
        ``(stored, loaded)`` local-memory bytes per thread per trip of the main loop (the ``STL``/``LDL``
        of spilled registers inside it, :func:`parse_sass_loop_local`); None when the SASS was not read
        or has no loop.
    loop_barriers : int or None
        CTA-wide ``BAR.SYNC`` / ``BAR.RED`` instructions per trip of the main loop
        (:func:`parse_sass_loop_barriers`); None when the SASS was not read or has no loop.
    loops : tuple of (int, int, int, int)
        Per outermost loop of the SASS, in address order: instructions per warp per trip, the
        ``STL`` / ``LDL`` bytes per thread per trip and the CTA-wide barriers per trip
        (:func:`parse_sass_loops`; a kernel of several sibling loops); empty when the SASS was not read.
    loop_memory : tuple of (int, int, int)
        Per outermost loop of the SASS, in address order: ``LDG`` bytes and ``STG`` bytes per thread per
        trip of the compiled loop, and its load groups (:func:`parse_sass_loop_memory`); empty when the
        SASS was not read.
    cubin_bytes : int
        Size of the cubin.
    ptxas_notes : tuple of str
        ptxas warnings and performance notes (for example C7514, wgmma serialization).
    compile_seconds : float
        Wall time of the compile, PTX assembly and disassembly.
    constexprs : mapping
        Constexpr values used.
    """

    kernel: str
    source: str
    target: str
    num_warps: int
    num_stages: int
    threads: int
    registers: int
    register_cap: int
    stack_frame_bytes: int
    spill_store_bytes: int
    spill_load_bytes: int
    stl: int | None
    ldl: int | None
    shared_bytes: int
    static_shared_bytes: int
    local_bytes: int
    maxnreg: int | None
    setmaxnreg: tuple[tuple[str, int], ...]
    mma: str
    ptx_virtual_registers: int
    sass_instructions: int | None
    cubin_bytes: int
    ptxas_notes: tuple[str, ...] = ()
    compile_seconds: float = 0.0
    constexprs: Mapping[str, Any] = field(default_factory=dict)
    loop_sass_instructions: int | None = None
    loop_local_bytes: tuple[int, int] | None = None
    loop_barriers: int | None = None
    loops: tuple[tuple[int, int, int, int], ...] = ()
    loop_memory: tuple[tuple[int, int, int], ...] = ()

    @property
    def spills(self) -> bool:
        """True if ptxas reports spill bytes or the SASS has STL/LDL instructions."""
        return bool(self.spill_store_bytes or self.spill_load_bytes or self.stl or self.ldl)

    @property
    def at_cap(self) -> bool:
        """True if ptxas used the whole entry budget (the demand may be larger)."""
        return self.registers >= self.register_cap

    @property
    def register_file_use(self) -> int:
        """32-bit registers one CTA takes (registers per thread x threads)."""
        return self.registers * self.threads

    def to_dict(self) -> dict[str, Any]:
        """Plain-data form (JSON-ready)."""
        d = asdict(self)
        d["setmaxnreg"] = [list(x) for x in self.setmaxnreg]
        d["ptxas_notes"] = list(self.ptxas_notes)
        d["constexprs"] = {k: (v if isinstance(v, int | float | bool | str) else repr(v))
                           for k, v in self.constexprs.items()}
        d["spills"] = self.spills
        return d


@dataclass(frozen=True)
class Cliff:
    """A step of a sweep where registers per thread fall as ``num_warps`` grows.

    Attributes
    ----------
    before, after : RegReport
        The rows at the smaller and the larger ``num_warps``.
    steepest : bool
        The largest relative fall of the sweep (the register cliff).
    """

    before: RegReport
    after: RegReport
    steepest: bool = False

    @property
    def drop(self) -> float:
        """Relative fall, ``1 - after / before`` (0.38 for 168 -> 104)."""
        return 1.0 - self.after.registers / self.before.registers


# ------------------------------------------------------------------------------------------------ tools
def triton_tool(name: str) -> Path:
    """Path of a CUDA tool shipped in the Triton wheel (``ptxas``, ``ptxas-blackwell``, ``cuobjdump``,
    ``nvdisasm``); :class:`FrontendError` if it is missing. twill regs uses ptxas and cuobjdump."""
    import triton

    path = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / name
    if not path.is_file():
        raise FrontendError(f"{name} is not in the Triton wheel ({path}); twill regs needs Triton 3.6's "
                            "bundled CUDA tools")
    return path


def run_triton_tool(name: str, args: Sequence[str],
                    timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    """Run the Triton wheel's CUDA tool ``name`` (see :func:`triton_tool`) with ``args``; its output as text.

    ``timeout`` is in seconds. Raises :class:`FrontendError` with the command line and the tool's first
    2000 characters of output when it exits non-zero (or is missing from the wheel).
    """
    proc = subprocess.run([str(triton_tool(name)), *args], capture_output=True, text=True, timeout=timeout,
                          check=False)
    if proc.returncode != 0:
        raise FrontendError(f"{name} {' '.join(args)} failed ({proc.returncode}): "
                            f"{(proc.stderr or proc.stdout).strip()[:2000]}")
    return proc


# ------------------------------------------------------------------------------------------------ parsers
_USED = re.compile(r"Used (\d+) registers")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")


def parse_ptxas_log(text: str) -> dict[str, Any]:
    """Registers, stack frame and spill bytes, and warnings from a ``ptxas -v`` log of one kernel.

    >>> parse_ptxas_log("    176 bytes stack frame, 176 bytes spill stores, 176 bytes spill loads\\n"
    ...                 "ptxas info    : Used 255 registers, used 1 barriers")["registers"]
    255
    """
    used = _USED.findall(text)
    frame = _FRAME.findall(text)
    if not used:
        raise FrontendError(f"no 'Used N registers' line in the ptxas log:\n{text[:2000]}")
    stack, stores, loads = (int(x) for x in frame[-1]) if frame else (0, 0, 0)
    notes = tuple(line.split(":", 1)[-1].strip() for line in text.splitlines()
                  if "warning" in line.lower() or re.search(r"\(C\d{4}\)", line))
    return {"registers": int(used[-1]), "stack_frame_bytes": stack, "spill_store_bytes": stores,
            "spill_load_bytes": loads, "ptxas_notes": notes}


def parse_resource_usage(text: str) -> dict[str, int]:
    """``REG``, ``STACK``, ``SHARED`` and ``LOCAL`` of ``cuobjdump --dump-resource-usage`` (first kernel).

    >>> parse_resource_usage(" REG:206 STACK:0 SHARED:1024 LOCAL:0 CONSTANT[0]:544")
    {'REG': 206, 'STACK': 0, 'SHARED': 1024, 'LOCAL': 0}
    """
    out = {}
    for key in ("REG", "STACK", "SHARED", "LOCAL"):
        match = re.search(rf"\b{key}:(\d+)", text)
        out[key] = int(match.group(1)) if match else 0
    return out


_SASS_LINE = re.compile(r"^\s+/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[T\d]+\s+)?([A-Z][A-Z0-9_]*)")


def parse_sass(text: str) -> Counter[str]:
    """Count SASS instructions by opcode (modifiers dropped: ``STL.64`` counts as ``STL``).

    >>> parse_sass("        /*0070*/                   STL.64 [R1], R2 ;\\n"
    ...            "        /*0080*/               @P0 LDL R4, [R1] ;")
    Counter({'STL': 1, 'LDL': 1})
    """
    counts: Counter[str] = Counter()
    for line in text.splitlines():
        match = _SASS_LINE.match(line)
        if match:
            counts[match.group(1)] += 1
    return counts


_SASS_ADDRESSED = re.compile(r"^\s+/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P[T\d]+\s+)?([A-Z][A-Z0-9_]*)([^;]*)")


def _main_loop(text: str) -> list[tuple[int, str, str]] | None:
    """The main loop's SASS rows ``(address, opcode, rest)`` (see :func:`parse_sass_loop`), or None."""
    rows: list[tuple[int, str, str]] = []
    for line in text.splitlines():
        match = _SASS_ADDRESSED.match(line)
        if match:
            rows.append((int(match.group(1), 16), match.group(2), match.group(3)))
    best: tuple[int, int, int] | None = None
    exits = [a for a, opcode, _ in rows if opcode == "EXIT"]
    first_exit = min(exits) if exits else None
    for address, opcode, rest in rows:
        if opcode != "BRA" or (first_exit is not None and address > first_exit):
            continue
        target = re.search(r"0x([0-9a-f]+)", rest)
        if target is None or int(target.group(1), 16) >= address:
            continue
        low = int(target.group(1), 16)
        count = sum(1 for a, _, _ in rows if low <= a <= address)
        if best is None or count > best[0]:
            best = (count, low, address)
    if best is None:
        return None
    return [r for r in rows if best[1] <= r[0] <= best[2]]


def _sibling_loops(text: str) -> list[list[tuple[int, str, str]]]:
    """The SASS rows of each outermost loop of a kernel, in address order (see :func:`parse_sass_loops`)."""
    rows: list[tuple[int, str, str]] = []
    for line in text.splitlines():
        match = _SASS_ADDRESSED.match(line)
        if match:
            rows.append((int(match.group(1), 16), match.group(2), match.group(3)))
    exits = [a for a, opcode, _ in rows if opcode == "EXIT"]
    last_exit = max(exits) if exits else None
    spans: set[tuple[int, int]] = set()
    for address, opcode, rest in rows:
        if opcode != "BRA" or (last_exit is not None and address > last_exit):
            continue
        target = re.search(r"0x([0-9a-f]+)", rest)
        if target is None or int(target.group(1), 16) >= address:
            continue
        low = int(target.group(1), 16)
        if any(low <= e <= address for e in exits):  # a branch back over an EXIT is a retry path's return
            continue
        spans.add((low, address))
    outer = sorted(s for s in spans if not any(o != s and o[0] <= s[0] and s[1] <= o[1] for o in spans))
    return [[r for r in rows if low <= r[0] <= high] for low, high in outer]


def _local_bytes(loop: Sequence[tuple[int, str, str]]) -> tuple[int, int]:
    """``(STL bytes, LDL bytes)`` per thread of the rows of one loop (see :func:`parse_sass_loop_local`)."""
    stores = loads = 0
    for _, opcode, rest in loop:
        if opcode not in ("STL", "LDL"):
            continue
        width = _LOCAL_WIDTH.match(rest)
        size = int(width.group(1)) // 8 if width else 4
        if opcode == "STL":
            stores += size
        else:
            loads += size
    return stores, loads


def parse_sass_loops(text: str) -> list[tuple[int, int, int, int]]:
    """Per outermost loop of a disassembled kernel, in address order: ``(instructions per warp per trip,
    STL bytes, LDL bytes per thread per trip, CTA-wide barriers per trip)`` (the barriers counted as
    :func:`parse_sass_loop_barriers` counts them), for kernels with several sibling loops (a row
    softmax's two passes).

    A loop is a backward branch (``BRA`` to a lower address) with no ``EXIT`` between its target and it,
    placed before the kernel's last ``EXIT``; a loop inside another (a barrier's spin loop) is part of
    it. So a second loop after an early ``EXIT`` counts, while the out-of-line retry paths ptxas places
    after the last ``EXIT``, and their branches back into the body over an ``EXIT``, do not.

    >>> parse_sass_loops("        /*0010*/  MOV R1, R2 ;\\n        /*0020*/  @P0 BRA 0x10 ;\\n"
    ...                  "        /*0030*/  @P1 EXIT ;\\n        /*0040*/  STL [R1], R2 ;\\n"
    ...                  "        /*0050*/  @P0 BRA 0x40 ;\\n        /*0060*/  EXIT ;\\n"
    ...                  "        /*0070*/  @!P0 BRA 0x70 ;\\n        /*0080*/  BRA 0x10 ;")
    [(2, 0, 0, 0), (2, 4, 0, 0)]
    """
    return [(len(loop), *_local_bytes(loop), _barriers(loop)) for loop in _sibling_loops(text)]


_GLOBAL_WIDTH = re.compile(r"^\.E(?:\.[A-Z]+)*?\.(U8|S8|U16|S16|64|128)\b")
_GLOBAL_BYTES = {"U8": 1, "S8": 1, "U16": 2, "S16": 2, "64": 8, "128": 16}


def _global_memory(loop: Sequence[tuple[int, str, str]]) -> tuple[int, int, int]:
    """``(LDG bytes, STG bytes, load groups)`` per thread of the rows of one loop (see
    :func:`parse_sass_loop_memory`)."""
    loads = stores = groups = 0
    pending = False  # an LDG since the last STG: the group that STG closes
    for _, opcode, rest in loop:
        if opcode not in ("LDG", "STG"):
            continue
        width = _GLOBAL_WIDTH.match(rest)
        size = _GLOBAL_BYTES[width.group(1)] if width else 4
        if opcode == "LDG":
            loads += size
            pending = True
        else:
            stores += size
            if pending:
                groups += 1
                pending = False
    return loads, stores, groups + (1 if pending else 0)


def parse_sass_loop_memory(text: str) -> list[tuple[int, int, int]]:
    """Per outermost loop of a disassembled kernel (:func:`parse_sass_loops`' loops, in address order):
    ``(LDG bytes, STG bytes, load groups)`` per thread per trip of the compiled loop.

    Each ``LDG`` / ``STG`` moves 4 bytes, or 1 / 2 / 8 / 16 with a ``.U8`` / ``.U16`` / ``.64`` / ``.128``
    modifier. ptxas may unroll a loop (a row softmax's ``tl.load`` of 1 element per thread becomes 4
    ``LDG.E.U16`` per trip of the SASS loop), so the bytes are per *compiled* trip. A load group is a run
    of ``LDG`` up to the next ``STG``: ptxas does not move a load above a store to memory that may alias
    it, so an in-order warp issues a group's loads together and waits for them before the store (the
    next group's loads come after it): a warp has one group's loads in flight at a time.

    >>> parse_sass_loop_memory("        /*0010*/  LDG.E.U16 R1, desc[UR4][R2.64] ;\\n"
    ...                        "        /*0020*/  LDG.E.U16 R5, desc[UR4][R6.64] ;\\n"
    ...                        "        /*0030*/  STG.E.U16 desc[UR4][R8.64], R1 ;\\n"
    ...                        "        /*0040*/  LDG.E.128 R4, desc[UR4][R2.64] ;\\n"
    ...                        "        /*0050*/  @P0 BRA 0x10 ;\\n        /*0060*/  EXIT ;")
    [(20, 2, 2)]
    """
    return [_global_memory(loop) for loop in _sibling_loops(text)]


def parse_sass_loop(text: str) -> int | None:
    """Instructions of the main loop of a disassembled kernel (``cuobjdump -sass``), per warp per trip.

    The main loop is taken to be the backward branch (``BRA`` to a lower address) placed before the
    kernel's first ``EXIT`` whose span holds the most instructions; the count is every instruction from
    its target to the branch, both included. ptxas places the retry paths of barrier waits out of line,
    after the ``EXIT``, each ending in a branch back into the body: those are not loops of the kernel
    and are skipped (counting from one of them would take in the whole kernel). A spin loop inside the
    main loop is counted once (its trip count is not known statically). Returns None when there is no
    such branch.

    >>> parse_sass_loop("        /*0010*/  MOV R1, R2 ;\\n        /*0020*/  FMUL R3, R1, R1 ;\\n"
    ...                 "        /*0030*/  @P0 BRA 0x10 ;\\n        /*0040*/  EXIT ;\\n"
    ...                 "        /*0050*/  @!P0 BRA 0x50 ;\\n        /*0060*/  BRA 0x0 ;")
    3
    """
    loop = _main_loop(text)
    return None if loop is None else len(loop)


_LOCAL_WIDTH = re.compile(r"^\.(?:[A-Z]+\.)*?(64|128)\b")


def parse_sass_loop_local(text: str) -> tuple[int, int] | None:
    """Bytes one thread stores to and loads from local memory per trip of the main loop: ``(STL bytes,
    LDL bytes)``, each instruction 4 bytes, or 8 / 16 with a ``.64`` / ``.128`` modifier (the spill
    traffic ptxas emits inside the loop; the loop is :func:`parse_sass_loop`'s). None without a loop.

    >>> parse_sass_loop_local("        /*0010*/  STL.64 [R1], R2 ;\\n        /*0020*/  LDL.LU R3, [R1] ;\\n"
    ...                       "        /*0030*/  @P0 BRA 0x10 ;\\n        /*0040*/  EXIT ;")
    (8, 4)
    """
    loop = _main_loop(text)
    return None if loop is None else _local_bytes(loop)


def _barriers(loop: Sequence[tuple[int, str, str]]) -> int:
    """CTA-wide barrier waits (``BAR.SYNC`` / ``BAR.RED``) among the rows of one loop."""
    return sum(1 for _, opcode, rest in loop if opcode == "BAR" and re.match(r"\.(SYNC|RED)\b", rest))


def parse_sass_loop_barriers(text: str) -> int | None:
    """Thread-block barriers one warp waits at per trip of the main loop: the ``BAR.SYNC`` and
    ``BAR.RED`` instructions (``bar.sync`` / ``__syncthreads`` / ``bar.red`` in PTX) of
    :func:`parse_sass_loop`'s loop; ``BAR.ARRIVE`` does not wait and is not counted. None without a loop.

    >>> parse_sass_loop_barriers("        /*0010*/  BAR.SYNC.DEFER_BLOCKING 0x0 ;\\n"
    ...                          "        /*0020*/  BAR.ARRIVE 0x1, 0x100 ;\\n"
    ...                          "        /*0030*/  @P0 BRA 0x10 ;\\n        /*0040*/  EXIT ;")
    1
    """
    loop = _main_loop(text)
    return None if loop is None else _barriers(loop)


_REG_DECL = re.compile(r"^\s*\.reg\s+\.\w+\s+%\w+<(\d+)>;", re.M)


def parse_ptx(text: str) -> dict[str, Any]:
    """Launch bounds, ``.maxnreg``, ``setmaxnreg`` budgets, Tensor Core family and virtual registers of a PTX.

    >>> p = parse_ptx(".maxnreg 168\\n.reqntid 384, 1, 1\\n.reg .b32 %r<10>;\\n"
    ...               "setmaxnreg.dec.sync.aligned.u32 24;\\nsetmaxnreg.inc.sync.aligned.u32 240;")
    >>> p["threads"], p["maxnreg"], p["setmaxnreg"], p["virtual_registers"]
    (384, 168, (('dec', 24), ('inc', 240)), 10)
    """
    threads = None
    match = re.search(r"\.(?:reqntid|maxntid)\s+(\d+)(?:\s*,\s*(\d+))?(?:\s*,\s*(\d+))?", text)
    if match:
        threads = 1
        for group in match.groups():
            threads *= int(group) if group else 1
    maxnreg = re.search(r"\.maxnreg\s+(\d+)", text)
    budgets: list[tuple[str, int]] = []
    for kind, value in re.findall(r"setmaxnreg\.(inc|dec)\.sync\.aligned\.u32\s+(\d+)", text):
        item = (kind, int(value))
        if item not in budgets:
            budgets.append(item)
    if "tcgen05.mma" in text:
        mma = "tcgen05"
    elif "wgmma.mma_async" in text:
        mma = "wgmma"
    elif re.search(r"\bmma\.sync\b", text):
        mma = "mma.sync"
    else:
        mma = "none"
    return {"threads": threads, "maxnreg": int(maxnreg.group(1)) if maxnreg else None,
            "setmaxnreg": tuple(budgets), "mma": mma,
            "virtual_registers": sum(int(n) for n in _REG_DECL.findall(text))}


# ------------------------------------------------------------------------------------------------ compile
def _to_ptx(src: Any, capability: int, num_warps: int, num_stages: int) -> tuple[str, int]:
    """Triton's stages up to PTX (the cubin is assembled here, so the ptxas log is kept)."""
    from twill.frontend.compile import triton_pipeline

    pipeline = triton_pipeline(src, capability, num_warps, num_stages)
    metadata: dict[str, Any] = {"hash": "twill-regs", "target": pipeline.target, **pipeline.options.__dict__}
    module = pipeline.module
    for name in ("ttir", "ttgir", "llir", "ptx"):
        module = pipeline.stages[name](module, metadata)
    return str(module), int(metadata.get("shared", 0))


def compile_registers(kernel: Any, *, target: str = "sm_90", num_warps: int | None = None,
                      num_stages: int | None = None, constexprs: Mapping[str, Any] | None = None,
                      signature: Mapping[str, str] | None = None, divisible: Iterable[str] | None = None,
                      sass: bool = True) -> RegReport:
    """Compile ``kernel`` on the CPU for ``target`` and read registers, spills and shared memory.

    Parameters
    ----------
    kernel : str, path-like or KernelSpec
        ``"path/to/file.py"`` or ``"path/to/file.py::KERNEL"`` with a ``TWILL_KERNELS`` entry
        (:func:`twill.frontend.load_kernel`), or a loaded :class:`twill.frontend.KernelSpec`.
    target : str
        ``"sm_90"`` (Hopper; ``ptxas --gpu-name=sm_90a``) or ``"sm_100"`` (Blackwell; ``ptxas-blackwell
        --gpu-name=sm_100a``).
    num_warps, num_stages : int, optional
        Compile options; default the kernel entry's.
    constexprs : mapping, optional
        Constexpr values merged over the entry's.
    signature : mapping of str to str, optional
        Argument types merged over the entry's (``{"k_desc": "tensordesc<fp16[64, 128]>"}`` when a block
        size changes a descriptor's block shape).
    divisible : iterable of str, optional
        Arguments given ``tt.divisibility = 16``; default the entry's, else every pointer and integer.
    sass : bool
        Disassemble the cubin to count STL/LDL (about 1 s per kernel, the tool's start-up); False leaves
        ``stl``, ``ldl`` and ``sass_instructions`` None (registers and spill bytes still come from ptxas).

    Returns
    -------
    RegReport

    Raises
    ------
    FrontendError
        The kernel cannot be loaded or compiled, a Triton other than 3.6 is installed, the target is not
        sm_90/sm_100, or a bundled CUDA tool is missing or fails.
    """
    import triton

    from twill.frontend.compile import (
        KernelSpec,
        default_divisible,
        kernel_source,
        load_kernel,
        triton_error_reason,
    )
    from twill.frontend.targets import target_capability
    from twill.ir.costmodel import CostModel
    from twill.ir.machine import load_machine

    if not triton.__version__.startswith("3.6"):
        raise FrontendError(f"twill regs replicates Triton 3.6's compile; Triton {triton.__version__} is "
                            "installed")
    capability = target_capability(target)
    arch, ptxas, machine_name = _TARGETS[capability]
    spec = kernel if isinstance(kernel, KernelSpec) else load_kernel(os.fspath(kernel))
    if signature:
        unknown = set(signature) - set(spec.fn.arg_names)
        if unknown:
            raise FrontendError(f"kernel {spec.name!r} has no argument(s) {', '.join(sorted(unknown))}")
        spec = replace(spec, signature={**spec.signature, **signature})
    values = {**spec.constexprs, **(constexprs or {})}
    unknown = set(values) - set(spec.fn.arg_names)
    if unknown:
        raise FrontendError(f"kernel {spec.name!r} has no constexpr argument(s) {', '.join(sorted(unknown))}")
    hinted = divisible if divisible is not None else (
        spec.divisible if spec.divisible is not None else default_divisible(spec.fn, spec.signature))
    warps = num_warps if num_warps is not None else spec.num_warps
    stages = num_stages if num_stages is not None else spec.num_stages
    t0 = time.perf_counter()
    try:
        ptx, shared = _to_ptx(kernel_source(spec, values, hinted), capability, warps, stages)
    except FrontendError:
        raise
    except Exception as exc:  # Triton raises CompilationError, RuntimeError, AssertionError, ...
        # Triton's own reason first (a CompilationError's message is the source listing; the builtin's
        # error, "arange's range must be a power of 2", is its cause), then the whole exception
        reason, whole = triton_error_reason(exc), str(exc).strip()
        tail = "" if whole == reason else f"; {type(exc).__name__}: {whole[:2000]}"
        raise FrontendError(f"Triton cannot compile {spec.name!r} for sm_{capability} at num_warps={warps}: "
                            f"{reason}{tail}") from exc
    with tempfile.TemporaryDirectory(prefix="twill-regs-") as tmp:
        ptx_path, cubin_path = Path(tmp) / "k.ptx", Path(tmp) / "k.cubin"
        ptx_path.write_text(ptx, encoding="utf-8")
        log = run_triton_tool(ptxas, ["-lineinfo", "-v", f"--gpu-name={arch}", str(ptx_path),
                                      "-o", str(cubin_path)])
        ptxas_info = parse_ptxas_log(log.stdout + log.stderr)
        dumped = run_triton_tool("cuobjdump", ["--dump-resource-usage", str(cubin_path)])
        usage = parse_resource_usage(dumped.stdout)
        sass_text = run_triton_tool("cuobjdump", ["-sass", str(cubin_path)]).stdout if sass else None
        ops = parse_sass(sass_text) if sass_text is not None else None
        loop = parse_sass_loop(sass_text) if sass_text is not None else None
        local = parse_sass_loop_local(sass_text) if sass_text is not None else None
        barriers = parse_sass_loop_barriers(sass_text) if sass_text is not None else None
        loops = tuple(parse_sass_loops(sass_text)) if sass_text is not None else ()
        memory = tuple(parse_sass_loop_memory(sass_text)) if sass_text is not None else ()
        cubin_bytes = cubin_path.stat().st_size
    seconds = time.perf_counter() - t0
    info = parse_ptx(ptx)
    threads = info["threads"] or 32 * warps
    cap = CostModel(load_machine(machine_name)).register_cap(threads)
    if usage["REG"] and usage["REG"] != ptxas_info["registers"]:
        raise FrontendError(f"ptxas reports {ptxas_info['registers']} registers but cuobjdump {usage['REG']} "
                            f"for {spec.name!r}")
    return RegReport(
        kernel=spec.name, source=spec.source, target=f"sm_{capability}", num_warps=warps, num_stages=stages,
        threads=threads, registers=ptxas_info["registers"], register_cap=cap,
        stack_frame_bytes=ptxas_info["stack_frame_bytes"], spill_store_bytes=ptxas_info["spill_store_bytes"],
        spill_load_bytes=ptxas_info["spill_load_bytes"], stl=None if ops is None else ops.get("STL", 0),
        ldl=None if ops is None else ops.get("LDL", 0),
        shared_bytes=shared, static_shared_bytes=usage["SHARED"], local_bytes=usage["LOCAL"],
        maxnreg=info["maxnreg"], setmaxnreg=info["setmaxnreg"], mma=info["mma"],
        ptx_virtual_registers=info["virtual_registers"],
        sass_instructions=None if ops is None else sum(ops.values()),
        cubin_bytes=cubin_bytes, ptxas_notes=ptxas_info["ptxas_notes"], compile_seconds=round(seconds, 3),
        constexprs=values, loop_sass_instructions=loop,
        loop_local_bytes=None if local is None else tuple(local), loop_barriers=barriers, loops=loops,
        loop_memory=memory)


def sweep(kernel: Any, *, target: str = "sm_90", num_warps: Iterable[int] = (2, 4, 8, 16),
          num_stages: int | None = None, constexprs: Mapping[str, Any] | None = None,
          signature: Mapping[str, str] | None = None, divisible: Iterable[str] | None = None,
          sass: bool = True) -> list[RegReport]:
    """:func:`compile_registers` for each ``num_warps`` (in the order given); imports the kernel file once.

    Raises
    ------
    FrontendError
        As :func:`compile_registers`.
    """
    from twill.frontend.compile import KernelSpec, load_kernel

    spec = kernel if isinstance(kernel, KernelSpec) else load_kernel(os.fspath(kernel))
    return [compile_registers(spec, target=target, num_warps=w, num_stages=num_stages, constexprs=constexprs,
                              signature=signature, divisible=divisible, sass=sass) for w in num_warps]


def find_cliffs(reports: Sequence[RegReport]) -> list[Cliff]:
    """Steps where registers per thread fall as ``num_warps`` grows (sorted by ``num_warps``).

    The steepest relative fall is marked ``steepest`` (the register cliff of the seed study).
    """
    rows = sorted(reports, key=lambda r: r.num_warps)
    cliffs = [Cliff(a, b) for a, b in itertools.pairwise(rows)
              if b.num_warps > a.num_warps and b.registers < a.registers]
    if cliffs:
        worst = max(range(len(cliffs)), key=lambda i: cliffs[i].drop)
        cliffs[worst] = replace(cliffs[worst], steepest=True)
    return cliffs


# ------------------------------------------------------------------------------------------------ output
def _flags(report: RegReport, cliffs: Mapping[int, Cliff]) -> str:
    flags = []
    cliff = cliffs.get(report.num_warps)
    if cliff is not None:
        flags.append(f"{'CLIFF ' if cliff.steepest else ''}-{cliff.drop:.0%} regs")
    if report.spills:
        flags.append("SPILLS")
    if report.at_cap:
        flags.append("at cap")
    if any("C7514" in n or "serialized" in n for n in report.ptxas_notes):
        flags.append("wgmma serialized")
    return ", ".join(flags)


def render_table(reports: Sequence[RegReport]) -> Any:
    """The register-rationing table as a :class:`rich.table.Table`."""
    from twill.render.terminal import PlainTable

    rows = sorted(reports, key=lambda r: r.num_warps)
    first = rows[0] if rows else None
    title = "registers" if first is None else (
        f"{first.kernel} ({Path(first.source).name}) on {first.target}, num_stages={first.num_stages}")
    table = PlainTable(title=title)
    for col in ("num_warps", "threads", "regs/thread", "cap", "RF/CTA", "spill st/ld B", "STL/LDL", "SMEM B",
                "setmaxnreg", "mma", "flags"):
        table.add_column(col, justify="left" if col in ("setmaxnreg", "mma", "flags") else "right")
    cliffs = {c.after.num_warps: c for c in find_cliffs(rows)}
    for r in rows:
        budgets = " ".join(f"{k}{v}" for k, v in r.setmaxnreg)
        if r.maxnreg is not None:
            budgets = f"maxnreg {r.maxnreg}" + (f"; {budgets}" if budgets else "")
        flags = _flags(r, cliffs)
        style = "red" if r.spills else ("yellow" if "CLIFF" in flags else None)
        table.add_row(str(r.num_warps), str(r.threads), str(r.registers), str(r.register_cap),
                      f"{r.register_file_use / 65536:.0%}", f"{r.spill_store_bytes}/{r.spill_load_bytes}",
                      "-" if r.stl is None else f"{r.stl}/{r.ldl}", str(r.shared_bytes), budgets or "-",
                      r.mma, flags, style=style)
    return table
