"""Run a generated Gluon kernel on the CPU: its barrier protocol and dataflow, with numpy tiles.

A check that needs no GPU and does not trust the generator: the generated ``kernel.py`` is executed as plain
Python with ``gl``, ``mbarrier``, ``tma`` and the wgmma calls replaced by models of their semantics, each
partition in its own thread:

* an **mbarrier** counts arrivals and transaction bytes; a phase completes when both reach zero, and
  ``wait(bar, parity)`` blocks until the barrier's completed-phase count has the other parity (PTX
  ``mbarrier.try_wait.parity``); a wait that can never return is reported as a deadlock **by
  construction**, not by a clock: when every partition still running is blocked in a wait and each has
  looked at the barriers since the last change of any of them (an arrival, a completed phase, a copy or
  MMA issued, a partition ending), none can ever be released. A slow machine cannot make a correct kernel
  look deadlocked, nor a deadlocked one pass;
* a **TMA load** lands in shared memory only when a partition waits on its barrier, and then completes its
  bytes there; reading a tile (``load``, a wgmma or tcgen05 operand, a TMA store) or writing it
  (``store``, a second TMA copy) while a copy into it is still in flight is reported as a **race** (a
  reader that never waits and runs ahead of the copy's issue sees stale data instead: wrong results, or a
  deadlock when its early releases put the ring's barriers out of step);
* a **wgmma** is computed when it completes (at the ``warpgroup_mma_wait`` that retires it, in issue order),
  reading its shared-memory operands then (a ring slot released and refilled too early gives wrong results);
  its result cannot be read before that wait (an error);
* loop counters are integers whose comparisons give booleans with ``~``, ``&`` and ``|`` as on ``i1``;
* a **pointer** argument is a :class:`Pointer` into a numpy array (element offsets, as ``tt.addptr``);
  ``gl.load`` reads only the lanes its mask keeps (``other`` elsewhere, NaN without one, so a lane the
  kernel should not use shows up in the result) and refuses an address outside the array on a live lane;
  ``gl.store`` writes only the masked lanes.
* sm_100: **tensor memory** is a numpy tile per allocation; a ``_reinterpret`` view shares the allocation's
  columns, so writing one member of such a group poisons (NaN) the others (a read of S after P overwrote it
  is wrong); a **tcgen05 MMA** is computed when it completes: when a partition waits on one of the mbarriers
  it was given (or on a ``tcgen05_commit`` barrier issued after it), completing the issuer's earlier MMAs
  first (issue order), reading its operands then; an MMA without barriers is synchronous. With
  ``mma="early"`` every MMA completes at issue instead (also a legal execution): "late" exposes a result read
  before its wait, "early" an operand or accumulator overwritten before its reader is done.

The kernel's output (written by its TMA stores into the numpy arrays behind the descriptors) is compared by
the caller with a reference. Layouts, warps and registers are not modelled.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

__all__ = ["Descriptor", "Pointer", "SimulationError", "Tmem", "run_kernel"]

_DTYPES = {"float16": np.float16, "bfloat16": np.float32, "float32": np.float32, "float64": np.float64,
           "int32": np.int32, "int64": np.int64, "int1": np.bool_, "int8": np.int8, "int16": np.int16}


class SimulationError(RuntimeError):
    """The simulated kernel deadlocked, read a wgmma result before its wait, or failed otherwise."""


class RInt(int):
    """A loop counter / scalar: arithmetic stays ``RInt``, comparisons give :class:`RBool`."""

    def _w(self, v: Any) -> Any:
        return RInt(v) if isinstance(v, int) and not isinstance(v, bool) else v

    def __add__(self, o: Any) -> Any: return self._w(int(self) + o)
    def __radd__(self, o: Any) -> Any: return self._w(o + int(self))
    def __sub__(self, o: Any) -> Any: return self._w(int(self) - o)
    def __rsub__(self, o: Any) -> Any: return self._w(o - int(self))
    def __mul__(self, o: Any) -> Any: return self._w(int(self) * o)
    def __rmul__(self, o: Any) -> Any: return self._w(o * int(self))
    def __floordiv__(self, o: Any) -> Any: return self._w(int(self) // o)
    def __mod__(self, o: Any) -> Any: return self._w(int(self) % o)
    def __and__(self, o: Any) -> Any: return self._w(int(self) & int(o))
    def __xor__(self, o: Any) -> Any: return self._w(int(self) ^ int(o))
    def __lt__(self, o: Any) -> Any: return RBool(int(self) < o)
    def __le__(self, o: Any) -> Any: return RBool(int(self) <= o)
    def __gt__(self, o: Any) -> Any: return RBool(int(self) > o)
    def __ge__(self, o: Any) -> Any: return RBool(int(self) >= o)


class RBool:
    """An ``i1`` scalar."""

    def __init__(self, v: Any) -> None:
        self.v = bool(v)

    def __bool__(self) -> bool: return self.v
    def __invert__(self) -> RBool: return RBool(not self.v)
    def __and__(self, o: Any) -> RBool: return RBool(self.v and bool(o))
    def __rand__(self, o: Any) -> RBool: return RBool(self.v and bool(o))
    def __or__(self, o: Any) -> RBool: return RBool(self.v or bool(o))
    def __ror__(self, o: Any) -> RBool: return RBool(self.v or bool(o))
    def to(self, _dtype: Any) -> RInt: return RInt(int(self.v))


class Arr(np.ndarray):
    """A register tensor (``x.to(dtype)`` as in Gluon)."""

    def to(self, dtype: Any) -> Arr:
        return np.asarray(self).astype(dtype).view(Arr)

    def broadcast_to(self, shape: Sequence[int]) -> Arr:
        return _arr(np.broadcast_to(np.asarray(self), tuple(shape)))


def _arr(x: Any) -> Arr:
    return np.asarray(x).view(Arr)


class Pointer:
    """A pointer (scalar or tensor) into a numpy array: the array, seen flat, and element offsets."""

    __array_ufunc__ = None   # ndarray + Pointer goes to Pointer.__radd__

    def __init__(self, memory: np.ndarray, offset: Any = 0) -> None:
        if not memory.flags.c_contiguous:
            raise ValueError("a Pointer needs a C-contiguous array")
        self.memory = memory.reshape(-1)
        self.offset = offset

    def __add__(self, other: Any) -> Pointer:
        if isinstance(other, Pointer):
            raise SimulationError("pointer + pointer")
        delta = np.asarray(other).astype(np.int64) if np.ndim(other) else int(other)
        return Pointer(self.memory, self.offset + delta)

    __radd__ = __add__

    def broadcast_to(self, shape: Sequence[int]) -> Pointer:
        return Pointer(self.memory, np.broadcast_to(np.asarray(self.offset), tuple(shape)))

    def load(self, mask: Any = None, other: Any = None) -> Arr:
        off = np.asarray(self.offset, dtype=np.int64)
        keep = np.broadcast_to(np.asarray(True if mask is None else mask, dtype=bool), off.shape)
        live = off[keep]
        if live.size and (live.min() < 0 or live.max() >= self.memory.size):
            raise SimulationError(f"gl.load outside the array ({self.memory.size} elements) on a live lane: "
                                  f"offsets {live.min()} .. {live.max()}")
        dtype = self.memory.dtype
        fill = other if other is not None else (np.nan if np.issubdtype(dtype, np.floating) else 0)
        out = np.empty(off.shape, dtype=dtype)
        out[...] = np.broadcast_to(np.asarray(fill), off.shape).astype(dtype)
        out[keep] = self.memory[live]
        return _arr(out)

    def store(self, value: Any, mask: Any = None) -> None:
        off = np.asarray(self.offset, dtype=np.int64)
        keep = np.broadcast_to(np.asarray(True if mask is None else mask, dtype=bool), off.shape)
        live = off[keep]
        if live.size and (live.min() < 0 or live.max() >= self.memory.size):
            raise SimulationError(f"gl.store outside the array ({self.memory.size} elements) on a live "
                                  f"lane: offsets {live.min()} .. {live.max()}")
        data = np.broadcast_to(np.asarray(value), off.shape)
        self.memory[live] = data[keep].astype(self.memory.dtype)


class _Dummy:
    """A layout or other compile-time object: any constructor, any attribute."""

    def __init__(self, *a: Any, **k: Any) -> None:
        pass

    def __call__(self, *a: Any, **k: Any) -> _Dummy:
        return _Dummy()


def _changed(cond: threading.Condition) -> None:
    """Record a change of barrier state (the caller holds ``cond``) and wake every waiter to look again."""
    cond.epoch = getattr(cond, "epoch", 0) + 1
    cond.notify_all()


class Barrier:
    """One mbarrier."""

    def __init__(self, cond: threading.Condition) -> None:
        self.cond = cond
        self.count = self.pending = 1
        self.tx = 0
        self.completed = 0
        self.in_flight: list[Callable[[], None]] = []

    def _check(self) -> None:
        if self.pending <= 0 and self.tx <= 0:
            self.completed += 1
            self.pending, self.tx = self.count, 0
        _changed(self.cond)


class BarrierArray:
    def __init__(self, n: int, cond: threading.Condition) -> None:
        self.bars = [Barrier(cond) for _ in range(n)]

    def index(self, i: int) -> Barrier:
        return self.bars[int(i)]


class Smem:
    """A shared-memory buffer or a view of one (``index``, ``permute``); ``machine`` (when given) is told of
    every access, so that a use of a tile with a TMA copy in flight is caught
    (:meth:`_Machine.check_access`)."""

    def __init__(self, data: np.ndarray, machine: _Machine | None = None) -> None:
        self.data = data
        self.machine = machine

    def read(self, what: str) -> np.ndarray:
        """The tile's data, for a reader or writer described by ``what``; raises :class:`SimulationError`
        when a copy into it is in flight."""
        if self.machine is not None:
            self.machine.check_access(self.data, what)
        return self.data

    def index(self, i: int) -> Smem:
        return Smem(self.data[int(i)], self.machine)

    def permute(self, order: Sequence[int]) -> Smem:
        return Smem(np.transpose(self.data, tuple(order)), self.machine)

    def _reinterpret(self, dtype: Any, shape: Sequence[int], layout: Any = None) -> Smem:
        """The first bytes of this buffer seen as a ``dtype`` tile of ``shape`` (they share memory: a
        write through one is seen through the other)."""
        flat = self.data.reshape(-1).view(np.uint8)
        n = int(np.prod(shape)) * np.dtype(dtype).itemsize
        if n > flat.size:
            raise SimulationError(f"_reinterpret as {list(shape)} needs {n} B; the buffer has {flat.size} B")
        return Smem(flat[:n].view(dtype).reshape(tuple(int(d) for d in shape)), self.machine)

    def load(self, _layout: Any = None) -> Arr:
        return _arr(self.read("a shared-memory load").copy())

    def store(self, value: Any) -> None:
        np.copyto(self.read("a shared-memory store"), np.asarray(value).astype(self.data.dtype))


class Descriptor:
    """A host tensor descriptor over a 2-D numpy array (``block_shape``; out-of-bounds reads are zeros)."""

    def __init__(self, array: np.ndarray, block_shape: Sequence[int]) -> None:
        self.array = array
        self.block_shape = list(block_shape)
        self.layout = _Dummy()

    def read(self, coord: Sequence[int]) -> np.ndarray:
        r, c = (int(x) for x in coord)
        h, w = self.block_shape
        out = np.zeros((h, w), dtype=self.array.dtype)
        part = self.array[r:r + h, c:c + w]
        out[:part.shape[0], :part.shape[1]] = part
        return out

    def write(self, coord: Sequence[int], block: np.ndarray) -> None:
        r, c = (int(x) for x in coord)
        h, w = block.shape
        dst = self.array[r:r + h, c:c + w]
        dst[...] = block[:dst.shape[0], :dst.shape[1]].astype(self.array.dtype)


class _Token:
    """An asynchronous wgmma: computed when it completes."""

    def __init__(self, a: Any, b: Smem, acc: Any, use_acc: bool) -> None:
        self.a = a if isinstance(a, Smem) else np.asarray(a, dtype=np.float32).copy()  # registers: at issue
        self.b, self.acc, self.use_acc = b, acc, use_acc
        self.value: Arr | None = None

    def complete(self) -> Arr:
        if self.value is None:
            a = self.a.read("a wgmma's A operand").astype(np.float32) if isinstance(self.a, Smem) else self.a
            acc = self.acc
            if isinstance(acc, _Token):
                acc = acc.complete()
            base = np.asarray(acc, dtype=np.float32) if self.use_acc else 0.0
            self.value = _arr(base + a @ self.b.read("a wgmma's B operand").astype(np.float32))
        return self.value

    def __array__(self, *a: Any, **k: Any) -> Any:
        raise SimulationError("a wgmma result was read before the warpgroup_mma_wait that completes it")

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise SimulationError(f"a wgmma result was used ({name}) before the warpgroup_mma_wait that "
                              "completes it")

    def _bad(self, *a: Any) -> Any:
        raise SimulationError("a wgmma result was read before the warpgroup_mma_wait that completes it")

    __add__ = __radd__ = __mul__ = __rmul__ = __sub__ = __rsub__ = __truediv__ = _bad


class Tmem:
    """A tensor-memory allocation or a view of one; ``group`` lists the members sharing its columns."""

    def __init__(self, data: np.ndarray, group: list[Tmem] | None = None) -> None:
        self.data = data
        self.group = group if group is not None else []
        self.group.append(self)

    def index(self, i: int) -> Tmem:
        view = Tmem.__new__(Tmem)
        view.data, view.group = self.data[int(i)], self.group
        return view

    def _reinterpret(self, dtype: Any, shape: Sequence[int], layout: Any = None) -> Tmem:
        return Tmem(np.full(tuple(shape), np.nan, dtype=dtype), self.group)

    def load(self, _layout: Any = None) -> Arr:
        return _arr(self.data.copy())

    def store(self, value: Any, pred: Any = True) -> None:
        if not pred:
            return
        for other in self.group:   # the views that share these columns under another type
            if not np.shares_memory(other.data, self.data):
                other.data[...] = np.nan
        np.copyto(self.data, np.asarray(value).astype(self.data.dtype))


class _Mma:
    """An asynchronous tcgen05 MMA (or a commit): computed when it completes, after the issuer's earlier
    ones; it then arrives on its barriers."""

    def __init__(self, issued: list[_Mma], a: Any, b: Any, acc: Tmem | None, use_acc: bool,
                 bars: Sequence[Barrier]) -> None:
        self.issued, self.a, self.b, self.acc, self.use_acc = issued, a, b, acc, use_acc
        self.bars = list(bars)
        self.done = False
        issued.append(self)

    def complete(self) -> None:   # called with the machine's condition held
        if self.done:
            return
        for earlier in self.issued[:self.issued.index(self)]:
            earlier.complete()
        self.done = True
        if self.acc is not None:
            prod = (_operand(self.a, "a tcgen05 MMA's A operand").astype(np.float32)
                    @ _operand(self.b, "a tcgen05 MMA's B operand").astype(np.float32))
            self.acc.store(prod + (self.acc.data.astype(np.float32) if self.use_acc else 0.0))
        for bar in self.bars:
            bar.pending -= 1
            bar._check()


def _operand(x: Smem | Tmem, what: str) -> np.ndarray:
    """An MMA operand's data (a shared-memory one checked for a copy in flight)."""
    return x.read(what) if isinstance(x, Smem) else x.data


class _Machine:
    """The shared state of one simulated CTA and the mock modules bound to it."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.cond.epoch = 0  # changes of barrier state so far (:func:`_changed`)
        self.pid = (0, 0, 0)
        self.local = threading.local()
        self.timeout = 20.0
        self.mma = "late"
        self.live = 0  # partition threads still running (0 outside warp_specialize: the kernel's own thread)
        self.waiting: dict[int, tuple[int, str]] = {}  # thread -> (epoch it last looked at, what it waits on)
        self.deadlock: str | None = None
        self.copies: list[np.ndarray] = []  # destinations of the TMA loads issued and not landed yet

    def check_access(self, data: np.ndarray, what: str) -> None:
        """Raise :class:`SimulationError` when ``data`` overlaps a TMA copy's destination that has not
        landed (no wait on its barrier came between the copy and ``what``)."""
        with self.cond:
            if any(np.may_share_memory(data, dst) for dst in self.copies):
                raise SimulationError(
                    f"race: {what} in {threading.current_thread().name} uses a shared-memory tile while a "
                    "TMA copy into it is in flight (no mbarrier.wait on the copy's barrier came first)")

    # ---------------------------------------------------------------- gl
    def gl(self) -> Any:
        m = self

        class GL:
            constexpr = object
            float16, float32, bfloat16, int32, int64, int1 = (np.float16, np.float32, np.float32, np.int32,
                                                             np.int64, np.bool_)

            def __getattr__(self, name: str) -> Any:
                if name.endswith("Layout"):
                    return _Dummy
                raise AttributeError(f"the CPU simulation has no gl.{name}")

            @staticmethod
            def program_id(axis: int) -> RInt: return RInt(m.pid[axis])
            @staticmethod
            def cdiv(a: int, b: int) -> RInt: return RInt(-(-int(a) // int(b)))
            @staticmethod
            def to_tensor(v: int) -> RInt: return RInt(v)
            @staticmethod
            def static_range(*a: int) -> range: return range(*a)
            @staticmethod
            def full(shape: Sequence[int], value: Any, dtype: Any, layout: Any = None) -> Arr:
                return _arr(np.full(tuple(shape), value, dtype=dtype))
            @staticmethod
            def exp2(x: Any) -> Arr: return _arr(np.exp2(np.asarray(x)))
            @staticmethod
            def exp(x: Any) -> Arr: return _arr(np.exp(np.asarray(x)))
            @staticmethod
            def maximum(a: Any, b: Any) -> Arr: return _arr(np.maximum(a, b))
            @staticmethod
            def minimum(a: Any, b: Any) -> Arr: return _arr(np.minimum(a, b))
            @staticmethod
            def max(x: Any, axis: int) -> Arr: return _arr(np.max(np.asarray(x), axis=axis))
            @staticmethod
            def min(x: Any, axis: int) -> Arr: return _arr(np.min(np.asarray(x), axis=axis))
            @staticmethod
            def sum(x: Any, axis: int) -> Arr: return _arr(np.sum(np.asarray(x), axis=axis))
            @staticmethod
            def expand_dims(x: Any, axis: int) -> Any:
                if isinstance(x, Pointer):
                    return Pointer(x.memory, np.expand_dims(np.asarray(x.offset), axis))
                return _arr(np.expand_dims(np.asarray(x), axis))
            @staticmethod
            def arange(start: int, end: int, layout: Any = None) -> Arr:
                return _arr(np.arange(int(start), int(end), dtype=np.int32))
            @staticmethod
            def where(cond: Any, a: Any, b: Any) -> Arr:
                return _arr(np.where(np.asarray(cond, dtype=bool), a, b))
            @staticmethod
            def load(ptr: Pointer, mask: Any = None, other: Any = None) -> Arr:
                return ptr.load(mask, other)
            @staticmethod
            def store(ptr: Pointer, value: Any, mask: Any = None) -> None:
                ptr.store(value, mask)
            @staticmethod
            def convert_layout(x: Any, layout: Any) -> Any: return x
            @staticmethod
            def allocate_shared_memory(dtype: Any, shape: Sequence[int], layout: Any,
                                       value: Any = None) -> Any:
                if dtype is np.int64 and len(shape) == 2 and shape[1] == 1:
                    return BarrierArray(shape[0], m.cond)
                buf = Smem(np.zeros(tuple(shape), dtype=dtype), m)
                if value is not None:
                    buf.store(value)
                return buf
            @staticmethod
            def warp_specialize(entries: Sequence[tuple[Callable[..., Any], tuple[Any, ...]]],
                                warps: Sequence[int], regs: Sequence[int]) -> None:
                m.run_partitions(entries)
        return GL()

    # ---------------------------------------------------------------- barriers and TMA
    def mbarrier(self) -> Any:
        m = self

        class MB:
            MBarrierLayout = _Dummy

            @staticmethod
            def init(bar: Barrier, count: int) -> None:
                with m.cond:
                    bar.count = bar.pending = int(count)

            @staticmethod
            def expect(bar: Barrier, nbytes: int, pred: Any = True) -> None:
                if not pred:
                    return
                with m.cond:
                    bar.tx += int(nbytes)
                    bar.pending -= 1
                    bar._check()

            @staticmethod
            def arrive(bar: Barrier, count: int = 1, pred: Any = True) -> None:
                if not pred:
                    return
                with m.cond:
                    bar.pending -= count
                    bar._check()

            @staticmethod
            def wait(bar: Barrier, phase: Any, pred: Any = True, deps: Any = ()) -> None:
                if not pred:
                    return
                me = threading.get_ident()
                with m.cond:
                    try:
                        while True:
                            if m.deadlock is not None:
                                raise SimulationError(m.deadlock)
                            while bar.in_flight:          # the copies a waiter sees land now
                                bar.in_flight.pop(0)()
                            if bar.completed % 2 != int(phase) % 2:
                                break
                            m.waiting[me] = (m.cond.epoch, f"{threading.current_thread().name} waits on an "
                                             f"mbarrier for parity {int(phase)} (completed phases "
                                             f"{bar.completed}, pending {bar.pending}, tx {bar.tx})")
                            m.check_deadlock()
                            m.cond.wait()
                    finally:
                        m.waiting.pop(me, None)
        return MB()

    def tma(self) -> Any:
        m = self

        class TMA:
            @staticmethod
            def async_copy_global_to_shared(desc: Descriptor, coord: Sequence[int], bar: Barrier, smem: Smem,
                                            pred: Any = True) -> None:
                if not pred:
                    return
                block = desc.read(coord)
                dst = smem.data

                def land() -> None:   # called with m.cond held
                    np.copyto(dst, block.astype(dst.dtype))
                    m.copies[:] = [c for c in m.copies if c is not dst]
                    bar.tx -= block.nbytes
                    bar._check()
                smem.read("a TMA load into a tile")   # a second copy into a tile whose first has not landed
                with m.cond:
                    m.copies.append(dst)
                    bar.in_flight.append(land)
                    _changed(m.cond)

            @staticmethod
            def async_copy_shared_to_global(desc: Descriptor, coord: Sequence[int], smem: Smem) -> None:
                desc.write(coord, np.asarray(smem.read("a TMA store")))

            @staticmethod
            def store_wait(pendings: int) -> None:
                return None
        return TMA()

    # ---------------------------------------------------------------- wgmma
    def queue(self) -> list[_Token]:
        if not hasattr(self.local, "queue"):
            self.local.queue = []
        return self.local.queue

    def warpgroup_mma(self, a: Any, b: Smem, acc: Any, use_acc: Any = True, is_async: bool = True) -> _Token:
        token = _Token(a, b, acc, bool(use_acc))
        self.queue().append(token)
        return token

    def warpgroup_mma_wait(self, num_outstanding: int = 0, deps: Sequence[Any] = ()) -> Any:
        q = self.queue()
        keep = int(num_outstanding)
        while len(q) > keep:
            q.pop(0).complete()
        out = [d.value if isinstance(d, _Token) and d.value is not None else d for d in deps]
        return out[0] if len(out) == 1 else tuple(out)

    # ---------------------------------------------------------------- tcgen05
    def issued(self) -> list[_Mma]:
        if not hasattr(self.local, "issued"):
            self.local.issued = []
        return self.local.issued

    def tcgen05_mma(self, a: Any, b: Any, acc: Tmem, *, use_acc: Any = True, pred: Any = True,
                    mbarriers: Sequence[Barrier] | None = None, mbarrier_preds: Any = None) -> None:
        if not pred:
            return
        with self.cond:
            mma = _Mma(self.issued(), a, b, acc, bool(use_acc), mbarriers or [])
            if not mbarriers or self.mma == "early":
                mma.complete()
            for bar in mma.bars:
                bar.in_flight.append(mma.complete)
            _changed(self.cond)

    def tcgen05_commit(self, bar: Barrier) -> None:
        with self.cond:
            commit = _Mma(self.issued(), None, None, None, False, [bar])
            if self.mma == "early":
                commit.complete()
            else:
                bar.in_flight.append(commit.complete)
            _changed(self.cond)

    def allocate_tensor_memory(self, dtype: Any, shape: Sequence[int], layout: Any = None,
                               value: Any = None) -> Tmem:
        buf = Tmem(np.full(tuple(shape), np.nan, dtype=dtype))
        if value is not None:
            buf.store(value)
        return buf

    # ---------------------------------------------------------------- partitions
    def check_deadlock(self) -> None:
        """Raise (and flag for every waiter) a deadlock when every running thread waits and each has looked
        at the current barrier state (called with :attr:`cond` held)."""
        live = max(1, self.live)
        if len(self.waiting) < live or any(e != self.cond.epoch for e, _ in self.waiting.values()):
            return
        self.deadlock = ("deadlock: every partition still running waits on an mbarrier no partition can "
                         "complete: " + "; ".join(w for _, w in sorted(self.waiting.values(),
                                                                       key=lambda x: x[1])))
        _changed(self.cond)
        raise SimulationError(self.deadlock)

    def run_partitions(self, entries: Sequence[tuple[Callable[..., Any], tuple[Any, ...]]]) -> None:
        errors: list[BaseException] = []

        def body(fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
            try:
                fn(*args)
            except BaseException as exc:  # reported by the caller
                errors.append(exc)
            finally:
                with self.cond:  # one fewer thread that could release a waiter: the waiters look again
                    self.live -= 1
                    _changed(self.cond)
        threads = [threading.Thread(target=body, args=e, name=e[0].__name__, daemon=True) for e in entries]
        with self.cond:
            self.live = len(threads)
        for t in threads:
            t.start()
        for t in threads:   # a deadlock ends every waiting thread at once; this catches a partition that
            t.join(10 * self.timeout)  # neither waits nor ends (an endless loop)
        alive = [t.name for t in threads if t.is_alive()]
        if errors:
            raise SimulationError(f"{type(errors[0]).__name__}: {errors[0]}") from errors[0]
        if alive:
            raise SimulationError(f"deadlock: partition(s) {', '.join(alive)} did not finish")


def _strip_imports(text: str) -> str:
    """The module without its ``triton`` imports (the names they bind are given by the simulation)."""
    pattern = r"from triton\.experimental[^\n]*\((?:[^)]*)\)\n|from triton\.experimental[^\n]*\n"
    return re.sub(pattern, "", text)


def run_kernel(source: str, kernel: str, args: Sequence[Any], grid: Sequence[int], *,
               timeout: float = 20.0, mma: str = "late") -> None:
    """Execute generated Gluon module text ``source``'s ``kernel`` over ``grid`` on the CPU.

    Parameters
    ----------
    source : str
        The generated ``kernel.py`` text.
    kernel : str
        The kernel function's name.
    args : sequence
        Its arguments in order, constexprs included; tensor descriptors as :class:`Descriptor`.
    grid : sequence of int
        Programs along x, y (and z); they run one after the other.
    timeout : float
        A tenth of the seconds a partition may run before the run is reported as not finishing (a
        partition in an endless loop that never waits). A deadlock is found by construction, whatever the
        time (module docstring).
    mma : {"late", "early"}
        When a tcgen05 MMA completes: when its barrier is waited on (default), or at issue.

    Raises
    ------
    SimulationError
        A deadlock, a wgmma result read before its wait, or an error inside a partition.
    """
    m = _Machine()
    m.timeout = timeout
    if mma not in ("late", "early"):
        raise ValueError(f"mma must be 'late' or 'early', not {mma!r}")
    m.mma = mma
    mods = {"gl": m.gl(), "mbarrier": m.mbarrier(), "tma": m.tma(),
            "fence_async_shared": lambda *a, **k: None, "warpgroup_mma": m.warpgroup_mma,
            "warpgroup_mma_wait": m.warpgroup_mma_wait, "warpgroup_mma_init": lambda x: x,
            "tcgen05_mma": m.tcgen05_mma, "tcgen05_commit": m.tcgen05_commit,
            "allocate_tensor_memory": m.allocate_tensor_memory, "TensorMemoryLayout": _Dummy,
            "range": lambda *a: (RInt(i) for i in range(*(int(x) for x in a)))}

    class _Gluon:
        @staticmethod
        def jit(fn: Callable[..., Any]) -> Callable[..., Any]:
            return fn
    namespace: dict[str, Any] = {"gluon": _Gluon, **mods}
    exec(compile(_strip_imports(source), f"<{kernel}>", "exec"), namespace)
    fn = namespace[kernel]
    dims = list(grid) + [1] * (3 - len(grid))
    for x in range(dims[0]):
        for y in range(dims[1]):
            for z in range(dims[2]):
                m.pid = (x, y, z)
                fn(*args)
