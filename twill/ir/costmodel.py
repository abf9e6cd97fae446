"""The cost model: turns a tile-level operation and its shape into cycles, a reservation table, a footprint.

One SM runs the loop (paper §3.1): each op's busy time on a unit is its work divided by the SM-wide rate
of that unit, taken from the machine file (``[cost]``). A synchronous op (ALU, MUFU, shuffles, SMEM copies
done by the warps) keeps its warps busy for its whole length; its instructions on different units
interleave, so each unit is busy from issue for its own share of the work. An asynchronous op (Tensor
Core GEMM, TMA copy, TMEM copy) is issued in a few cycles and then runs on its unit.

Every method returns an :class:`OpCost`; :meth:`OpCost.op_kwargs` gives the keyword arguments of
:meth:`twill.ir.graph.Graph.add_op`. Sizes are bytes, rates are per cycle per SM, times are cycles.

    >>> from twill.ir.machine import load_machine
    >>> cm = CostModel(load_machine("h100"))
    >>> cm.gemm(64, 128, 128).rrt[0].cycles      # 2*64*128*128 / 4096
    512
    >>> cm.exp2(8192).rrt[0].cycles              # 8192 / 16
    512
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from math import ceil

from twill.ir.graph import Reservation
from twill.ir.machine import Machine

__all__ = ["DTYPE_BYTES", "CostModel", "OpCost", "WgmmaWork", "tc_rate_key"]

DTYPE_BYTES: Mapping[str, int] = {
    "f64": 8, "fp64": 8, "f32": 4, "fp32": 4, "i32": 4, "tf32": 4, "f16": 2, "fp16": 2, "bf16": 2, "i16": 2,
    "f8E4M3FN": 1, "f8E5M2": 1, "fp8": 1, "i8": 1, "i1": 1, "i64": 8,
}


@dataclass(frozen=True)
class OpCost:
    """Cycles and resources of one tile op on one machine.

    Attributes
    ----------
    kind : str
        Op kind (``gemm``, ``exp``, ``alu``, ``tma_load`` ...).
    rrt : tuple of Reservation
        Reservation table in cycles.
    latency : int
        Cycles from issue until the result is usable.
    issue_cycles : int
        Cycles the issuing warps are busy.
    variable_latency : bool
        The latency varies at run time (memory traffic).
    warps : int
        Warps that issue the op together.
    blocking_result : bool
        Consumers of the result must issue a blocking wait (Tensor Core, TMA and TMEM results).
    """

    kind: str
    rrt: tuple[Reservation, ...]
    latency: int
    issue_cycles: int
    variable_latency: bool = False
    warps: int = 1
    blocking_result: bool = False

    @property
    def cycles(self) -> int:
        """Length of the reservation table."""
        return max(r.end for r in self.rrt)

    def op_kwargs(self) -> dict[str, object]:
        """Keyword arguments for :meth:`twill.ir.graph.Graph.add_op` (``kind`` excluded)."""
        return {"rrt": self.rrt, "latency": self.latency, "issue_cycles": self.issue_cycles,
                "variable_latency": self.variable_latency, "warps": self.warps}


@dataclass(frozen=True)
class WgmmaWork:
    """What a Hopper tile GEMM costs as the ``wgmma`` instructions Triton's layout issues.

    Attributes
    ----------
    replication : int
        Warp groups that compute the same rows (1 unless the layout's ``warpsPerCTA[0] x 16`` rows exceed
        the tile's ``m``: every such group computes the whole ``m x n`` product again).
    instructions : int
        ``wgmma`` instructions the CTA issues for one tile GEMM (all warp groups).
    tc_cycles : float
        Tensor Core cycles of those instructions, ``instructions x 2 x 64 x instr_n x k_step / tc_flops``.
    smem_bytes : int
        Operand bytes they read from shared memory (``A`` of each ``SS`` instruction, ``B`` of every one).
    instr_n : int
        ``N`` of one instruction.
    """

    replication: int
    instructions: int
    tc_cycles: float
    smem_bytes: int
    instr_n: int


def tc_rate_key(dtype: str) -> str:
    """The machine constant (under ``cost.``) of the Tensor Core rate for GEMM operands of ``dtype``
    (TTGIR or short spelling), in FLOP/cycle/SM: ``tc_flops_fp8`` for the fp8 types, ``tc_flops_tf32``
    for fp32 / tf32, ``tc_flops_fp16`` for every other (fp16, bf16).

    >>> tc_rate_key("f8E4M3FN"), tc_rate_key("f32"), tc_rate_key("bf16")
    ('tc_flops_fp8', 'tc_flops_tf32', 'tc_flops_fp16')
    """
    return {"fp8": "tc_flops_fp8", "f8E4M3FN": "tc_flops_fp8", "f8E5M2": "tc_flops_fp8",
            "tf32": "tc_flops_tf32", "f32": "tc_flops_tf32", "fp32": "tc_flops_tf32"}.get(
        dtype, "tc_flops_fp16")


def _cycles(work: float) -> int:
    return max(1, ceil(work - 1e-9))


class CostModel:
    """Tile-op costs for ``machine``; every rate comes from the machine file's ``[cost]`` table.

    Parameters
    ----------
    machine : Machine
        Target machine.
    """

    def __init__(self, machine: Machine) -> None:
        self.machine = machine

    def _rate(self, key: str) -> float:
        return float(self.machine.const(f"cost.{key}"))

    # ------------------------------------------------------------------------------------ helpers
    def tile_warps(self, rows: int, *, num_warps: int | None = None) -> int:
        """Warps that own a register tile of ``rows`` rows in the MMA layout.

        Hopper: a warpgroup (4 warps) per 64 rows, the wgmma M per warpgroup (PTX ISA); Blackwell: a
        warpgroup per 128 rows, one thread per TMEM lane (FA4's softmax warpgroups). Capped by
        ``num_warps`` when given.
        """
        per_group = self.machine.warps_per_group
        rows_per_group = int(self._rate("tc_min_m")) * (2 if self.machine.family == "blackwell" else 1)
        warps = per_group * max(1, ceil(rows / rows_per_group))
        return min(warps, num_warps) if num_warps else warps

    def regs_for(self, nbytes: int, warps: int) -> int:
        """Registers per thread that hold ``nbytes`` spread over ``warps`` warps (32-bit registers)."""
        if nbytes <= 0:
            return 0
        return ceil(nbytes / (4 * 32 * warps))

    def register_cap(self, threads: int) -> int:
        """Registers per thread ptxas may use at kernel entry for a CTA of ``threads`` threads.

        ``min(max_per_thread, register_file / threads)``, rounded down to the allocation step (8
        registers per thread, the ``setmaxnreg`` step): 255 up to 256 threads, 168 at 384, 128 at 512,
        64 at 1024. One CTA must fit in the register file; ``setmaxnreg`` can then move registers between
        warp groups. Checked against ptxas for 64 to 1024 threads in ``tests/test_regs.py``.
        """
        if threads <= 0:
            raise ValueError(f"threads must be positive, got {threads}")
        step = self.machine.setmaxnreg_step
        fit = self.machine.register_file // threads // step * step
        return min(self.machine.max_regs_per_thread, fit)

    def ctas_per_sm(self, threads: int, registers: int, smem_bytes: int) -> int:
        """CTAs of one kernel that the SM keeps resident at once (the CUDA occupancy rules).

        The least of: the register file over the CTA's registers, allocated per warp in units of
        ``chip.register_alloc_unit`` (256: a thread's count rounded up to a multiple of 8); the shared
        memory per SM over the CTA's ``smem_bytes`` plus the ``chip.smem_reserved_per_cta`` (1 KB) the
        system keeps per CTA; ``chip.max_threads_per_sm`` over ``threads``; ``chip.max_ctas_per_sm``.
        Sources: CUDA C Programming Guide (technical specifications per compute capability) and the CUDA
        occupancy calculator; on the lent H200 the driver's ``cuOccupancyMaxActiveBlocksPerMultiprocessor``
        agrees for the eight Triton FA forward configurations
        (``benchmarks/calibrate/results/fa_occupancy.json``).

            >>> from twill.ir.machine import load_machine
            >>> CostModel(load_machine("h200")).ctas_per_sm(128, 255, 98336)   # 2 x 32 K registers
            2

        Raises
        ------
        ValueError
            ``threads`` is not positive, or ``registers`` or ``smem_bytes`` is negative.
        """
        if threads <= 0 or registers < 0 or smem_bytes < 0:
            raise ValueError(f"need threads > 0, registers >= 0, smem_bytes >= 0; got {threads}, "
                             f"{registers}, {smem_bytes}")
        const = self.machine.const
        unit = int(const("chip.register_alloc_unit"))
        warps = ceil(threads / 32)
        per_warp = max(1, ceil(registers * 32 / unit)) * unit
        by_registers = self.machine.register_file // (per_warp * warps)
        by_smem = int(const("chip.smem_per_sm")) // (smem_bytes + int(const("chip.smem_reserved_per_cta")))
        by_threads = int(const("chip.max_threads_per_sm")) // threads
        return max(0, min(by_registers, by_smem, by_threads, int(const("chip.max_ctas_per_sm"))))

    def thread_registers(self, tile_bytes: Iterable[int], warps: int, *, overhead: int | None = None) -> int:
        """Registers per thread a warp group of ``warps`` warps needs to hold ``tile_bytes`` at once.

        The register-footprint model of the scheduler: each tile value takes :meth:`regs_for` registers
        per thread, plus ``overhead`` (default the machine's ``registers.group_overhead``: addresses, loop
        counters, barrier phases, row statistics). Not capped: compare with :meth:`register_cap` to see
        whether ptxas will ration (and spill).
        """
        base = self.machine.group_overhead_regs if overhead is None else overhead
        return base + sum(self.regs_for(b, warps) for b in tile_bytes)

    def sync(self, kind: str, work: Mapping[str, float], *, warps: int) -> OpCost:
        """A synchronous op doing ``work`` (unit -> busy cycles, already divided by the unit's rate).

        Each unit is busy from issue for its own share; the warps are busy for the longest share.
        """
        rrt = tuple(Reservation(unit, 0, _cycles(c)) for unit, c in work.items() if c > 0)
        length = max(r.end for r in rrt)
        return OpCost(kind, rrt, latency=length, issue_cycles=length, warps=warps)

    def merge(self, kind: str, parts: Iterable[OpCost]) -> OpCost:
        """One synchronous op doing the work of several (an elementwise chain drawn as one tile op)."""
        work: dict[str, float] = {}
        warps = 1
        for part in parts:
            warps = max(warps, part.warps)
            for r in part.rrt:
                work[r.unit] = work.get(r.unit, 0) + r.cycles * r.count
        return self.sync(kind, work, warps=warps)

    # ------------------------------------------------------------------------------------ Tensor Core
    def gemm(self, m: int, n: int, k: int, *, dtype: str = "fp16", warps: int | None = None,
             serialized: bool = False, warps_per_cta: tuple[int, int] | None = None) -> OpCost:
        """A tile GEMM ``[m, k] x [k, n]``: ``2mnk / tc_flops`` cycles on the Tensor Cores.

        Asynchronous: issued in ``tc_issue`` cycles; the result is usable ``tc_latency`` cycles after
        the Tensor Cores finish. On Hopper the accumulator lives in the registers of the issuing warp
        groups (``warps`` defaults to :meth:`tile_warps`); on Blackwell one thread issues it (1 warp)
        and the accumulator lives in TMEM.

        ``serialized=True`` is the Hopper GEMM ptxas emits when the kernel has too few registers for the
        wgmma pipeline (warning C7511, e.g. Triton's FA forward at BLOCK_N 128 with 4 warps): a wait
        after every ``wgmma`` instruction. Each warp group then runs its ``ceil(rows / 64) x
        ceil(k / k_step)`` instructions one at a time, each for its throughput time plus
        ``cost.tc_serial_latency`` cycles (56 measured on the H200: 119.8 cycles per m64n128k16,
        ``benchmarks/calibrate/results/wgmma_serial.json``); the warp groups of the tile run their chains
        side by side on the Tensor Cores (one rectangle of the reservation table per instruction step, so
        another CTA's GEMM can use the gaps). The op is synchronous: its warps are busy until the last
        instruction has run on the Tensor Cores, and the result is usable at the end of the chain.

        ``warps_per_cta = (w_m, w_n)`` (serialized only): the chain as Triton's ``#ttg.nvidia_mma`` layout
        issues it (:meth:`wgmma_work`, :func:`twill.tune.triton_model.gemm_layouts`) instead of M split
        between the warp groups: the ``w_m / 4`` groups along M each take ``m / (w_m / 4)`` rows (the
        whole ``m``, computed again by each, when ``16 w_m > m``), the ``w_n`` groups along N each
        ``n / w_n`` columns, so each instruction is ``m64 x (n / w_n) x k16`` (N up to 256, a wider share
        in several). Triton's 64x256 tile at 8 warps has ``[4, 2]``: each group runs 4 m64n128k16 (120
        cycles each serialized) where the M split priced 4 m64n256k16 (184 each).

        Raises
        ------
        ValueError
            ``serialized`` on a machine without wgmma (Blackwell's ``tcgen05.mma`` has one issuing thread
            and no register accumulator); ``warps_per_cta`` whose warps are not ``warps``.
        """
        key = tc_rate_key(dtype)
        rate = self._rate(key)
        busy = _cycles(2 * m * n * k / rate)
        issue = min(busy, int(self._rate("tc_issue")))
        if warps is None:
            warps = 1 if self.machine.family == "blackwell" else self.tile_warps(m)
        if not serialized:
            return OpCost("gemm", (Reservation("tc", 0, busy),),
                          latency=busy + int(self._rate("tc_latency")), issue_cycles=issue, warps=warps,
                          blocking_result=True)
        if self.machine.family == "blackwell":
            raise ValueError("a serialized wgmma pipeline is a Hopper (sm_90) register-shortage mode; "
                             f"machine {self.machine.name!r} issues tcgen05.mma")
        m_step = int(self._rate("tc_min_m"))
        k_step = {"tc_flops_fp8": 32, "tc_flops_tf32": 8}.get(key, 16)  # PTX ISA: wgmma K per dtype
        per_group = self.machine.warps_per_group
        groups = max(1, warps // per_group)
        if warps_per_cta is None:
            count = ceil(ceil(m / groups) / m_step) * ceil(k / k_step)
            instruction = 2 * m_step * n * k_step / rate
        else:
            w_m, w_n = warps_per_cta
            if w_m < 1 or w_n < 1 or w_m * w_n != warps:
                raise ValueError(f"warpsPerCTA {warps_per_cta} does not cover the GEMM's {warps} warps")
            groups_m = max(1, w_m // per_group)
            replication = max(1, (m_step // per_group) * w_m // m)  # each warp owns 16 rows along M
            cols = max(1, n // w_n)
            inst_n = min(cols, 256)
            count = ceil(m * replication / groups_m / m_step) * ceil(cols / inst_n) * ceil(k / k_step)
            instruction = 2 * m_step * inst_n * k_step / rate
            busy = _cycles(groups * count * instruction)  # every group's instructions on the Tensor Cores
        one = instruction + self._rate("tc_serial_latency")
        if groups * instruction >= one:  # the warp groups' chains keep the Tensor Cores busy
            return OpCost("gemm", (Reservation("tc", 0, busy),), latency=max(busy, _cycles(count * one)),
                          issue_cycles=busy, warps=warps)
        width = _cycles(groups * instruction)
        rrt = tuple(Reservation("tc", round(i * one), width) for i in range(count))
        end = rrt[-1].end
        return OpCost("gemm", rrt, latency=max(end, _cycles(count * one)), issue_cycles=end, warps=warps)

    # ------------------------------------------------------------------------------------ CUDA cores
    def alu(self, elements: int, ops_per_element: float = 1.0, *, warps: int = 4) -> OpCost:
        """Elementwise FP32/INT work: ``elements * ops / alu_per_cycle`` cycles on the ALU pipes."""
        return self.sync("alu", {"alu": elements * ops_per_element / self._rate("alu_per_cycle")},
                         warps=warps)

    def exp2(self, elements: int, *, alu_ops_per_element: float = 0.0, warps: int = 4) -> OpCost:
        """``exp2`` over a tile: ``elements / mufu_per_cycle`` cycles on MUFU, plus fused ALU work."""
        work = {"mufu": elements / self._rate("mufu_per_cycle")}
        if alu_ops_per_element:
            work["alu"] = elements * alu_ops_per_element / self._rate("alu_per_cycle")
        return self.sync("exp", work, warps=warps)

    def mufu(self, elements: int, *, warps: int = 4) -> OpCost:
        """Any other special function (``rsqrt``, ``log2``, divide): one MUFU result per element."""
        return self.sync("mufu", {"mufu": elements / self._rate("mufu_per_cycle")}, warps=warps)

    def reduce(self, elements: int, rows: int, lanes_per_row: int, *, warps: int = 4) -> OpCost:
        """Row reduction of a tile of ``elements`` into ``rows`` values.

        One ALU op per element, then ``log2(lanes_per_row)`` butterfly shuffle + combine steps for each
        row (``shuffle_per_cycle`` results per cycle).
        """
        steps = max(0, (lanes_per_row - 1).bit_length())
        shuffles = rows * lanes_per_row * steps
        return self.sync("reduce", {"alu": (elements + shuffles) / self._rate("alu_per_cycle")
                                    + shuffles / self._rate("shuffle_per_cycle")}, warps=warps)

    def convert(self, elements: int, *, warps: int = 4) -> OpCost:
        """Type conversion of a tile (F2F/F2FP): ``elements / convert_per_cycle`` cycles on the ALU pipes."""
        return self.sync("convert", {"alu": elements / self._rate("convert_per_cycle")}, warps=warps)

    # ------------------------------------------------------------------------------------ memory
    def smem_copy(self, nbytes: int, *, kind: str = "smem_store", warps: int = 4) -> OpCost:
        """Registers <-> shared memory by the warps (STS/LDS/STSM/LDSM): ``bytes / smem_bytes_per_cycle``."""
        return self.sync(kind, {"smem": nbytes / self._rate("smem_bytes_per_cycle")}, warps=warps)

    def layout_convert(self, nbytes: int, *, warps: int = 4) -> OpCost:
        """A layout conversion through shared memory: a store and a load of ``nbytes``."""
        return replace(self.smem_copy(2 * nbytes, warps=warps), kind="convert_layout")

    def tma_load(self, nbytes: int, *, private: bool = False) -> OpCost:
        """A TMA bulk tensor copy global -> SMEM of ``nbytes``: variable latency, one issuing thread.

        ``private``: no other CTA reads the tile, so it streams from HBM (:meth:`from_hbm`); else it is
        priced as an L2 hit (``cost.tma_latency``, ``cost.tma_bytes_per_cycle``, both measured from L2).
        """
        busy = _cycles(nbytes / self._rate("tma_bytes_per_cycle"))
        cost = OpCost("tma_load", (Reservation("tma", 0, busy),),
                      latency=max(busy, int(self._rate("tma_latency"))),
                      issue_cycles=min(busy, int(self._rate("tma_issue"))), variable_latency=True, warps=1,
                      blocking_result=True)
        return self.from_hbm(cost, nbytes) if private else cost

    def from_hbm(self, load: OpCost, nbytes: int) -> OpCost:
        """``load`` (an L2-priced global -> SM copy of ``nbytes``) for a tile no other CTA reads: it comes
        from HBM, so it also takes the SM's share of HBM bandwidth and waits HBM's latency.

        The share is a reservation of ``nbytes / cost.dram_bytes_per_cycle`` cycles on the ``dram`` unit
        from the load's issue, the rate measured with every SM streaming (17.1 B/cycle on the H200); like
        every unit of the tile model it is the SM's, so co-resident CTAs divide it (the schedule's II is a
        CTA's, with the SM to itself). The latency is at least ``cost.dram_latency`` (1850 cycles on the
        H200, the median with every SM loading 32 KB at a time). Together they state Little's law: a loop
        that streams ``B`` bytes per iteration runs at ``II >= B / dram_bytes_per_cycle`` (the ``dram``
        ResMII) and needs ``dram_latency / II`` iterations of loads in flight to reach it.

        Precondition: every SM streams (the grid fills the GPU); a grid of fewer CTAs than SMs gets more
        than this share, and the II is then conservative.

            >>> from twill.ir.machine import load_machine
            >>> cm = CostModel(load_machine("h200"))
            >>> hbm = cm.global_load(16384, warps=4, private=True)
            >>> [(r.unit, r.cycles) for r in hbm.rrt], hbm.latency     # ceil(16384 / 17.1) = 959
            ([('lsu', 512), ('dram', 959)], 1850)
        """
        busy = _cycles(nbytes / self._rate("dram_bytes_per_cycle"))
        start = min((r.start for r in load.rrt), default=0)
        return replace(load, rrt=(*load.rrt, Reservation("dram", start, busy)),
                       latency=max(load.latency, start + busy, int(self._rate("dram_latency"))))

    def tma_store(self, nbytes: int) -> OpCost:
        """A TMA bulk tensor copy SMEM -> global of ``nbytes``."""
        cost = self.tma_load(nbytes)
        return replace(cost, kind="tma_store", blocking_result=False)

    def tma_store_from_registers(self, nbytes: int, *, warps: int = 4) -> OpCost:
        """A TMA store of a register tile: the ``warps`` first write it to shared memory
        (``bytes / smem_bytes_per_cycle`` cycles on the SMEM ports), then one thread issues the bulk copy
        SMEM -> global (:meth:`tma_store`), which starts when the shared-memory write is done.

        The warps are busy for the shared-memory write and the TMA issue only.
        """
        sts = _cycles(nbytes / self._rate("smem_bytes_per_cycle"))
        tma = self.tma_store(nbytes)
        rrt = (Reservation("smem", 0, sts), *(replace(r, start=r.start + sts) for r in tma.rrt))
        return OpCost("tma_store", rrt, latency=sts + tma.latency, issue_cycles=sts + tma.issue_cycles,
                      warps=warps)

    def global_load(self, nbytes: int, *, warps: int = 4, private: bool = False) -> OpCost:
        """A pointer load (``ld.global`` / ``cp.async``): variable latency on the load/store units.

        ``private``: no other CTA reads the tile, so it streams from HBM (:meth:`from_hbm`); else it is
        priced as an L2 hit (``cost.lsu_latency``)."""
        busy = _cycles(nbytes / self._rate("lsu_bytes_per_cycle"))
        cost = OpCost("load", (Reservation("lsu", 0, busy),),
                      latency=max(busy, int(self._rate("lsu_latency"))), issue_cycles=busy,
                      variable_latency=True, warps=warps, blocking_result=True)
        return self.from_hbm(cost, nbytes) if private else cost

    def global_store(self, nbytes: int, *, warps: int = 4) -> OpCost:
        """A pointer store (``st.global``)."""
        busy = _cycles(nbytes / self._rate("lsu_bytes_per_cycle"))
        return OpCost("store", (Reservation("lsu", 0, busy),), latency=busy, issue_cycles=busy, warps=warps)

    def atomic_add(self, nbytes: int, *, warps: int = 4) -> OpCost:
        """A global atomic reduction (``red.global.add``) of ``nbytes``: variable latency."""
        busy = _cycles(nbytes / self._rate("atomic_bytes_per_cycle"))
        return OpCost("atomic", (Reservation("lsu", 0, busy),),
                      latency=max(busy, int(self._rate("atomic_latency"))), issue_cycles=busy,
                      variable_latency=True, warps=warps)

    def tmem_load(self, nbytes: int, *, warps: int = 4) -> OpCost:
        """TMEM -> registers (``tcgen05.ld``) of ``nbytes``; consumers need no further wait, but the
        load itself waits for the MMA that wrote the TMEM (a blocking edge into it)."""
        busy = _cycles(self._rate("tmem_base") + nbytes / 1024 * self._rate("tmem_per_kb"))
        return OpCost("tmem_load", (Reservation("tmem", 0, busy),), latency=busy, issue_cycles=busy,
                      warps=warps)

    def tmem_store(self, nbytes: int, *, warps: int = 4) -> OpCost:
        """Registers -> TMEM (``tcgen05.st``) of ``nbytes``."""
        busy = _cycles(self._rate("tmem_base") + nbytes / 1024 * self._rate("tmem_per_kb"))
        return OpCost("tmem_store", (Reservation("tmem", 0, busy),), latency=busy, issue_cycles=busy,
                      warps=warps)

    # ------------------------------------------------------------------------------------ hardware terms
    def issue_cycles(self, instructions_per_warp: float, warps: int, *, ctas: int = 1) -> float:
        """Cycles the SM's warp schedulers need to issue ``instructions_per_warp`` warp instructions from each
        of ``warps`` warps of each of ``ctas`` co-resident CTAs.

        Every instruction a warp issues (arithmetic, address math, barrier tests, the wgmma and its fence)
        takes one issue slot of its scheduler; the SM has ``issue.slots`` schedulers (4 on Hopper and
        Blackwell) that each issue ``cost.issue_per_scheduler_per_cycle`` (1) instruction per cycle, so::

            cycles = instructions_per_warp * warps * ctas / (slots * per_slot_per_cycle)

        Independent of which unit runs the instruction: the ALU, MUFU and SMEM work of one warp group
        share this one budget. Sources in the machine file.

            >>> from twill.ir.machine import load_machine
            >>> CostModel(load_machine("h200")).issue_cycles(910, 8)     # 8 warps, 910 SASS per trip
            1820.0

        Raises
        ------
        ValueError
            A negative count, or ``warps`` / ``ctas`` below 1.
        """
        if instructions_per_warp < 0 or warps < 1 or ctas < 1:
            raise ValueError(f"need instructions_per_warp >= 0, warps >= 1, ctas >= 1; got "
                             f"{instructions_per_warp}, {warps}, {ctas}")
        const = self.machine.const
        rate = float(const("issue.slots")) * float(const("cost.issue_per_scheduler_per_cycle"))
        return instructions_per_warp * warps * ctas / rate

    def estimated_instructions(self, rrt: Iterable[Reservation], warps: int) -> float:
        """Warp instructions per warp that an op's reservation table implies, for when no SASS is at hand.

        Each unit's busy cycles times its SM-wide rate is the op's lane operations (``alu_per_cycle``
        lanes, ``mufu_per_cycle`` results, ``smem_bytes_per_cycle`` / 16 bytes per thread per
        ``STS.128``/``LDS.128``, ``lsu_bytes_per_cycle`` / 16 likewise); 32 lanes make one warp
        instruction, spread over ``warps`` warps. Tensor Core, TMA and TMEM work is a handful of
        instructions per op (counted as 1 per warp). A lower bound: ptxas adds address arithmetic,
        moves and predicates (the FA forward's main loop has 2-3x this count, ``parse_sass_loop``).

        Raises
        ------
        ValueError
            ``warps`` below 1.
        """
        if warps < 1:
            raise ValueError(f"warps must be >= 1, got {warps}")
        lanes = {"alu": self._rate("alu_per_cycle"), "mufu": self._rate("mufu_per_cycle"),
                 "smem": self._rate("smem_bytes_per_cycle") / 16,
                 "lsu": self._rate("lsu_bytes_per_cycle") / 16}
        total = 0.0
        for r in rrt:
            if r.unit in lanes:
                total += r.cycles * r.count * lanes[r.unit] / 32 / warps
            else:
                total += 1.0
        return total

    def wgmma_work(self, m: int, n: int, k: int, *, a_in_smem: bool, dtype: str = "fp16",
                   warps: int | None = None, warps_per_cta: tuple[int, int] | None = None,
                   instr_n: int | None = None) -> WgmmaWork:
        """The ``wgmma`` instructions of a Hopper tile GEMM ``[m, k] x [k, n]`` in Triton's MMA layout.

        Triton's ``#ttg.nvidia_mma`` v3 layout gives ``warpsPerCTA = [w_m, w_n]`` and ``instrShape = [16,
        instr_n, k_step]``: each warp owns 16 rows, so a warp group (4 warps along M) owns 64-row slices
        and the ``w_m / 4`` groups along M cover ``16 w_m`` rows. When that is more than ``m`` (a 64-row
        tile with ``warpsPerCTA = [8, 1]``, what Triton picks for FA's ``Q K^T`` at 8 warps), the layout
        wraps: ``r = 16 w_m / m`` groups hold the same rows and each computes the whole product (the
        TTGIR's ``tensor<64x32xf32, #mma>`` with 8 warps along M; the SASS has each warp issue all 16
        ``HGMMA.64x16x16`` of the 64x32x128 product). The ``w_n`` groups along N each take ``n / w_n``
        columns, in ``ceil((n / w_n) / instr_n)`` instructions per 64-row slice and ``k_step`` (16 for
        16-bit types) of K. Every instruction reads its ``B`` (``k_step x instr_n``) and, for ``SS``, its
        ``A`` slice (``64 x k_step``) from shared memory, so ``A`` is read once per N instruction (PTX
        ISA, wgmma.mma_async matrix descriptors); it runs ``2 x 64 x instr_n x k_step / tc_flops`` cycles
        on the Tensor Cores.

        Without a layout: ``w_m = min(warps, 4 ceil(m / 64))`` (one group per slice, the rest along N),
        ``instr_n = min(n / w_n, 256)``; ``warps`` None: one group per slice.

            >>> from twill.ir.machine import load_machine
            >>> cm = CostModel(load_machine("h200"))
            >>> w = cm.wgmma_work(64, 32, 128, a_in_smem=True, warps_per_cta=(8, 1), instr_n=16)
            >>> w.replication, w.instructions, w.tc_cycles, w.smem_bytes   # 2 groups x 2 x 8 instructions
            (2, 32, 256.0, 81920)

        Raises
        ------
        ValueError
            A non-positive size or a layout with no warps.
        """
        if min(m, n, k) <= 0:
            raise ValueError(f"GEMM sizes must be positive, got m={m}, n={n}, k={k}")
        e = DTYPE_BYTES.get(dtype, 2)
        rows = int(self._rate("tc_min_m"))
        per_group = self.machine.warps_per_group
        slices = ceil(m / rows)
        if warps_per_cta is None:
            total = per_group * slices if warps is None else warps
            w_m = min(total, per_group * slices)
            w_n = max(1, total // max(1, w_m))
        else:
            w_m, w_n = warps_per_cta
        if w_m < 1 or w_n < 1:
            raise ValueError(f"warpsPerCTA must be positive, got {warps_per_cta}")
        groups_m = max(1, w_m // per_group)
        covered = (rows // per_group) * w_m
        replication = max(1, covered // m)
        rows_per_group = max(rows, m * replication // groups_m)
        cols = max(1, n // w_n)
        step = {1: 32, 4: 8}.get(e, 16)  # PTX ISA: wgmma K per instruction for 8-, 32- and 16-bit types
        inst_n = max(8, min(instr_n or min(cols, 256), cols))
        per_slice = ceil(cols / inst_n) * ceil(k / step)
        instructions = groups_m * w_n * ceil(rows_per_group / rows) * per_slice
        key = {1: "tc_flops_fp8", 4: "tc_flops_tf32"}.get(e, "tc_flops_fp16")
        tc = instructions * 2 * rows * inst_n * step / self._rate(key)
        smem = instructions * (step * inst_n * e + (rows * step * e if a_in_smem else 0))
        return WgmmaWork(replication, instructions, tc, smem, inst_n)

    def wgmma_smem_bytes(self, m: int, n: int, k: int, *, a_in_smem: bool, dtype: str = "fp16",
                         warps: int | None = None, warps_per_cta: tuple[int, int] | None = None,
                         instr_n: int | None = None) -> int:
        """Bytes a Hopper tile GEMM ``[m, k] x [k, n]`` reads from shared memory for its operands:
        :meth:`wgmma_work`'s ``smem_bytes``.

        With the default layout (one warp group per 64-row slice, extra groups along N, one instruction
        across a group's columns): ``s (k n e + [a_in_smem] g_n 64 k e)`` for ``s = ceil(m / 64)`` slices
        and ``g_n`` groups along N, ``e`` bytes per element.

            >>> from twill.ir.machine import load_machine
            >>> cm = CostModel(load_machine("h200"))
            >>> cm.wgmma_smem_bytes(128, 64, 128, a_in_smem=True)              # 2 x (16 KB + 16 KB)
            65536
            >>> cm.wgmma_smem_bytes(64, 64, 128, a_in_smem=True, warps=8)      # A read by both groups
            49152
        """
        return self.wgmma_work(m, n, k, a_in_smem=a_in_smem, dtype=dtype, warps=warps,
                               warps_per_cta=warps_per_cta, instr_n=instr_n).smem_bytes

    def wgmma_smem_cycles(self, m: int, n: int, k: int, *, a_in_smem: bool, dtype: str = "fp16",
                          warps: int | None = None) -> float:
        """Cycles of the shared-memory operand reads of :meth:`wgmma_smem_bytes`, at
        ``cost.wgmma_smem_bytes_per_cycle`` (source in the machine file). A GEMM whose reads take longer
        than its Tensor Core time (``2 m n k / tc_flops``) runs at the read rate: small-N tiles
        (``m64n32k16`` reads 3 KB per 16 Tensor Core cycles)."""
        return self.wgmma_smem_bytes(m, n, k, a_in_smem=a_in_smem, dtype=dtype, warps=warps) / self._rate(
            "wgmma_smem_bytes_per_cycle")

    def l1_free_bytes(self, smem_bytes: int, ctas_per_sm: int) -> int:
        """Bytes of the SM's unified L1 / shared-memory array left as L1 cache when ``ctas_per_sm`` CTAs of
        ``smem_bytes`` shared memory each are resident.

        The driver carves shared memory out of the same SRAM (``chip.l1_smem_per_sm``). A kernel that uses
        more than the 48 KB of static shared memory (``chip.smem_default_carveout``) sets
        ``cudaFuncAttributeMaxDynamicSharedMemorySize``, as Triton does, and is taken to get the whole
        ``chip.smem_per_sm`` carve-out, leaving ``l1_smem_per_sm - smem_per_sm`` (28 KB on Hopper); below
        it, the CTAs' shared memory plus ``chip.smem_reserved_per_cta`` each. An estimate consistent with
        the H200: Triton's 128x256x64 GEMM at 4 warps spills 624 B of stack per thread (78 KB per CTA) and
        runs as slowly at 3 stages (147 KB of shared memory, so 109 KB would be left by the CTA's own
        need) as at 4 (196 KB) (``benchmarks/results/tune_scores.md``).
        """
        const = self.machine.const
        used = ctas_per_sm * (smem_bytes + int(const("chip.smem_reserved_per_cta")))
        if used > int(const("chip.smem_default_carveout")):
            used = int(const("chip.smem_per_sm"))
        return max(0, int(const("chip.l1_smem_per_sm")) - used)

    def local_memory_cycles(self, bytes_per_trip: float, *, working_set: int,
                            l1_free: int) -> tuple[str, float]:
        """Where the local-memory traffic of spilled registers goes and its busy cycles per trip.

        ``STL``/``LDL`` go through L1. While the spilled registers of every resident thread
        (``working_set`` bytes: the stack frame per thread x threads x CTAs per SM) fit in the L1 left
        beside shared memory (``l1_free``, :meth:`l1_free_bytes`), they stay there and cost the SRAM's
        port rate (``smem``, ``cost.smem_bytes_per_cycle``: L1 and shared memory are one array). When
        they do not, each spilled line is evicted before it is reloaded, so the traffic goes to L2
        (``tma``: the SM's L2 path, which the TMA loads share) at ``cost.tma_kernel_bytes_per_cycle``.
        On the H200 the spilling 128x256 GEMM at 4 warps moves 160 KB of local memory and 48 KB of TMA
        loads per trip at 31-38 B/cycle per SM (``benchmarks/results/tune_scores.md``).

        Returns ``(unit, cycles)``.

            >>> from twill.ir.machine import load_machine
            >>> cm = CostModel(load_machine("h200"))
            >>> unit, cycles = cm.local_memory_cycles(1280, working_set=1 << 20, l1_free=0)   # from L2
            >>> unit, cycles == 1280 / float(cm.machine.const("cost.tma_kernel_bytes_per_cycle"))
            ('tma', True)

        Raises
        ------
        ValueError
            Negative bytes.
        """
        if bytes_per_trip < 0 or working_set < 0:
            raise ValueError(f"local-memory bytes must be >= 0, got {bytes_per_trip}, {working_set}")
        if working_set <= l1_free:
            return "smem", bytes_per_trip / self._rate("smem_bytes_per_cycle")
        return "tma", bytes_per_trip / self._rate("tma_kernel_bytes_per_cycle")

    def iteration_fixed_cycles(self, waits: int) -> float:
        """Latency one loop trip pays besides its ops: ``waits`` blocking barrier waits (an mbarrier test
        for each TMA load, the ``wgmma`` wait), each ``cost.barrier_wait`` cycles, with the loop's
        branch and counter folded into that constant (source in the machine file).

        Raises
        ------
        ValueError
            ``waits`` is negative.
        """
        if waits < 0:
            raise ValueError(f"waits must be >= 0, got {waits}")
        return waits * self._rate("barrier_wait")

    # ------------------------------------------------------------------------------------ control flow
    def divergent(self, paths: Sequence[OpCost], *, kind: str = "divergent") -> OpCost:
        """An op whose lanes take ``k = len(paths)`` different paths in one warp (a lane-dependent branch).

        The warp runs the paths one after another with the other lanes masked off, so path ``i``'s
        reservation table starts where path ``i - 1`` ends plus ``cost.divergence_reconverge`` cycles:
        ``T(k) = sum(paths) + (k - 1) r``, about ``s k`` for ``k`` paths of ``s`` cycles, and the warp's
        efficiency falls to ``32 / k`` (shared/seeds/003_8ff7bc8ce6113243.txt: linear on Pascal to
        Blackwell, no super-linear reconvergence penalty; measured on the H200, ``r`` = 38 cycles and
        ``T(32) / T(1)`` = 32.1, benchmarks/calibrate/results/microbench.json). One path costs itself.

        The result is usable when the last path's result is (its latency past its start); the warps are
        busy until the last path has issued. Warps: the most any path uses.

        Raises
        ------
        ValueError
            ``paths`` is empty.
        """
        if not paths:
            raise ValueError("a divergent op needs at least one path")
        if len(paths) == 1:
            return replace(paths[0], kind=kind)
        gap = int(self._rate("divergence_reconverge"))
        rrt: list[Reservation] = []
        offset = latency = issue = 0
        for path in paths:
            rrt.extend(replace(r, start=r.start + offset) for r in path.rrt)
            latency = max(latency, offset + path.latency)
            issue = offset + path.issue_cycles
            offset += path.cycles + gap
        return OpCost(kind, tuple(rrt), latency=latency, issue_cycles=issue,
                      variable_latency=any(p.variable_latency for p in paths),
                      warps=max(p.warps for p in paths),
                      blocking_result=any(p.blocking_result for p in paths))

    def uniform_branch(self, paths: Sequence[OpCost], *, kind: str = "branch") -> OpCost:
        """A branch whose condition is the same for all lanes of a warp: each warp runs one path.

        Every ``scf.if`` of a Triton kernel is of this kind (its condition is a scalar). Nothing
        serializes; a static schedule must hold whichever path an iteration takes, so the cost covers
        every path: on each unit the union of the paths' reservations, the longest latency and issue
        time, the most warps.

        Raises
        ------
        ValueError
            ``paths`` is empty.
        """
        if not paths:
            raise ValueError("a branch needs at least one path")
        by_unit: dict[tuple[str, int], list[tuple[int, int]]] = {}
        for path in paths:
            for r in path.rrt:
                by_unit.setdefault((r.unit, r.count), []).append((r.start, r.end))
        rrt: list[Reservation] = []
        for (unit, count), spans in by_unit.items():
            spans.sort()
            start, end = spans[0]
            for s, e in spans[1:]:
                if s <= end:
                    end = max(end, e)
                else:
                    rrt.append(Reservation(unit, start, end - start, count))
                    start, end = s, e
            rrt.append(Reservation(unit, start, end - start, count))
        return OpCost(kind, tuple(rrt), latency=max(p.latency for p in paths),
                      issue_cycles=max(p.issue_cycles for p in paths),
                      variable_latency=any(p.variable_latency for p in paths),
                      warps=max(p.warps for p in paths),
                      blocking_result=any(p.blocking_result for p in paths))

    def predicated(self, op: OpCost, mask_elements: int, *, ops_per_element: float = 1.0) -> OpCost:
        """A masked tile op (``tl.load(..., mask=)``, ``tl.where``, a partial last tile): predication.

        Every lane issues the op under its predicate, so it costs the whole op whatever the fraction of
        lanes the mask keeps (a masked final tile costs a full tile) and nothing serializes
        (shared/seeds/003_8ff7bc8ce6113243.txt: predication removes the divergence cost; measured on the
        H200: one path plus a predicated select over 32 lanes takes the time of one path). Work that
        the mask adds is ``ops_per_element`` ALU operations per mask element on the ALU pipes, before the
        op issues: a compare, a select of the ``other`` value. The frontend passes 1 for a load with
        ``other=`` (the fill select) and 0 otherwise: it folds the compare with the integer address
        arithmetic, which it costs for no load, masked or not (``twill/frontend/rules.py``).
        """
        extra = mask_elements * ops_per_element / self._rate("alu_per_cycle")
        if extra <= 0:
            return op
        mask = _cycles(extra)
        synchronous = not op.blocking_result and not op.variable_latency and op.latency == op.cycles
        if synchronous:
            merged = self.merge(op.kind, [op, self.sync("mask", {"alu": extra}, warps=op.warps)])
            return replace(merged, warps=op.warps)
        rrt = (Reservation("alu", 0, mask), *(replace(r, start=r.start + mask) for r in op.rrt))
        return replace(op, rrt=rrt, latency=op.latency + mask, issue_cycles=op.issue_cycles + mask)
