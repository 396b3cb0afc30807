"""The ``emulated`` device: separate device memory in host RAM, with a real allocator.

Owns: ``Arena`` (a best-fit allocator over one block of bytes, 256-byte aligned like
``cudaMalloc``, coalescing freed neighbours) and ``EmulatedDevice``. Its fault injection
lives in ``faults`` (``FaultPlan``) and its memory checking in ``memcheck``
(``GuardedMemory``, the mixin that guards, poisons and scans blocks); the rules of both
are described here.

Device memory is one pool of ``capacity`` bytes (``PYACC_EMULATED_MEMORY``, default 4 GiB)
and up to ``ROOM`` more (``_pool_size``), reserved lazily by the OS (``_reserve``):
untouched pages cost nothing. Device arrays are numpy views into it (``owns``: numpy
records the pool as their ``base``), so a test can read (and write) "device memory"
directly through ``acc.deviceptr``. Device addresses are real addresses inside that
pool, disjoint from every host array, so a copy that forgot to happen shows up as stale
data — the point of this device: every refcount and transfer path runs in CI without a
GPU.

Capacity and zones: the capacity counts each block as ``_round_up`` of the bytes asked
for (``memory_in_use``; an allocation beyond it raises ``OutOfMemoryError``, whatever
the pool holds besides). Every block also carries a tail zone: from its last byte asked
for to the end of its arena block, at least ``TAIL`` bytes (the rounding's padding, or
one more ``ALIGNMENT`` unit where that is shorter, as for sizes that are multiples of
it), filled with ``GUARD_BYTE`` whether memory checking is on or not; blocks allocated
while it is on carry ``GUARD``-byte guard zones on both sides instead. The zones and the
quarantine take pool room the capacity does not count, so memory checking never changes
which allocation fails (unless a program keeps so many blocks live that their zones fill
the room: ``OutOfMemoryError`` then says how much of the capacity is still free). A
write past the end of any block — a kernel's index one past the last element — changes
its tail zone: a scan (``memcheck_scan``, at every check point of ``PYACC_CHECK=memory``
and at ``pyacc.testing.check("memory")``) finds it, and so does the block's free, which
keeps the finding for the next scan.

Invariants:
- live blocks and free blocks tile the pool ``[0, _pool_size(capacity))`` exactly; no two
  free blocks touch (they are coalesced); ``Arena.in_use`` is the sum of live block sizes.
- a block's offset and size are multiples of ``ALIGNMENT``.
- ``memory_in_use`` is the sum of ``_round_up(nbytes)`` over the live blocks (one
  requested size recorded per live block, quarantined ones excluded) and never exceeds
  the capacity; ``allocation_of`` reports each block so (``PYACC_CHECK=counters`` adds
  them up).
- a block's tail zone (and guard zones) hold ``GUARD_BYTE`` from its allocation until a
  write past it, which a scan reports once and restores; a block is listed for scans
  (``_requested``) only once its zones are laid.

Fault injection (``EmulatedDevice.inject_faults``, ``pyacc.testing.inject_faults``): while
a ``FaultPlan`` is installed, every allocation, copy and kernel launch of the device is
counted (from 1, per kind, in the order they run) and the chosen ones fail as they would
on a GPU:
- an allocation raises ``OutOfMemoryError`` at once (``cudaMalloc`` returning
  ``cudaErrorMemoryAllocation``);
- a copy raises ``ExecutionError`` when it runs: at once on the synchronous queue; on an
  asynchronous queue on its worker thread, so the error surfaces at the wait that covers
  the queue (a failed ``cudaMemcpyAsync`` reported by ``cudaStreamSynchronize``); the
  destination is left untouched;
- a launch fails with ``ExecutionError`` instead of running the kernel: at once on the
  synchronous queue, at the wait on an asynchronous one (a launch failure reported by
  the next synchronisation).
Copies and launches are counted when they run (on an asynchronous queue: on its worker
thread, in queue order), allocations when they are asked for.

Memory checking (``set_memcheck(True)``, ``PYACC_CHECK=memory``; compute-sanitizer's
memcheck for device memory, ASan's redzones and quarantine): while it is on, every new
block gets a guard zone of ``GUARD`` bytes before it and at least as many after it (from
the last byte asked for to the end of the arena block), filled with ``GUARD_BYTE``, and
its own bytes hold ``UNDEFINED_BYTE`` until something writes them; a
freed block is filled with ``POISON_BYTE`` and kept out of the allocator (quarantined)
until ``QUARANTINE_BYTES`` of later frees push it out, so a write through a stale device
array lands in poison rather than in the next owner's data. ``memcheck_scan`` lists the
guard, tail and poison bytes that changed; ``memcheck_state`` says whether a device range
is inside a live block, crosses a guard, or lies in freed memory. The addresses, sizes and
``memory_in_use`` the device reports are those of the blocks asked for (zones and
quarantine excluded), so the ``PYACC_CHECK`` ledger sees the same books. Blocks allocated
before checking began have no head guard but their tail zones; blocks allocated while it
was on keep their guards until freed. Off, an allocation lays its tail zone (less than
two units of bytes) and a free compares it, each under the check lock (measured: an
allocation and its free cost 5.1 µs instead of 3.2 µs).
"""

from __future__ import annotations

import bisect
import collections
import threading

import numpy as np

from .. import _probe
from ..errors import (
    ExecutionError,
    InvalidArgumentError,
    OutOfMemoryError,
    describe_array,
    format_range,
)
from ..events import EventKind
from .base import Device, emit, size_setting
from .faults import FaultPlan, _FaultyKernel
from .memcheck import (GUARD, GUARD_BYTE, POISON_BYTE, TAIL, GuardedMemory, MemoryFinding,  # noqa: F401
                       memcheck_enabled, set_memcheck, _DEVICES, _GUARD_BYTES, _MEMCHECK)

__all__ = ["Arena", "EmulatedDevice", "FaultPlan", "DEFAULT_CAPACITY", "ALIGNMENT", "ROOM",
           "set_memcheck", "memcheck_enabled", "MemoryFinding", "GUARD", "GUARD_BYTE",
           "POISON_BYTE", "TAIL"]

DEFAULT_CAPACITY = 4 << 30
ALIGNMENT = 256
#: bytes the pool holds beyond the capacity (as many as the capacity for small devices),
#: for what the capacity does not count: the blocks' tail and guard zones and the
#: quarantine (module docstring). Reserved, not committed: untouched pages cost nothing,
#: but a fork charges the address space, so the room stays a small part of a large pool.
ROOM = 64 << 20


def _pool_size(capacity: int) -> int:
    """Bytes of the pool of a device of ``capacity`` bytes."""
    return capacity + min(capacity, ROOM)


def _round_up(nbytes: int) -> int:
    """Block size for ``nbytes``: whole alignment units, plus one unit of gap after
    blocks of 4 KiB and more, so that equal-sized arrays never sit a power of two apart
    (two 32 MiB fields exactly 32 MiB apart share cache sets: a Jacobi step on them ran
    4.5× slower than on host arrays)."""
    size = max(ALIGNMENT, (nbytes + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT)
    return size + ALIGNMENT if size >= 4096 else size


class Arena:
    """Best-fit allocator over ``[0, capacity)`` byte offsets (no memory of its own)."""

    def __init__(self, capacity: int):
        self.capacity = capacity // ALIGNMENT * ALIGNMENT
        self._free_offsets = [0] if self.capacity else []  # sorted
        self._free_sizes = [self.capacity] if self.capacity else []
        self._live: dict[int, int] = {}  # offset -> size of live blocks
        self._live_sorted: list[int] = []  # offsets of live blocks, sorted
        self.in_use = 0
        self._lock = threading.Lock()

    def allocate(self, nbytes: int, *, size: int | None = None) -> int | None:
        """Offset of a new block of at least ``nbytes`` (``_round_up``; ``size``: exactly
        that many bytes, a multiple of ``ALIGNMENT``), or None when nothing fits."""
        size = _round_up(nbytes) if size is None else size
        with self._lock:
            slot = self._best_fit(size)
            if slot is None:
                return None
            offset = self._free_offsets[slot]
            remaining = self._free_sizes[slot] - size
            if remaining:
                self._free_offsets[slot] += size
                self._free_sizes[slot] = remaining
            else:
                del self._free_offsets[slot], self._free_sizes[slot]
            self._live[offset] = size
            bisect.insort(self._live_sorted, offset)
            self.in_use += size
            return offset

    def _best_fit(self, size: int) -> int | None:
        best = None
        for slot, free_size in enumerate(self._free_sizes):
            if free_size >= size and (best is None or free_size < self._free_sizes[best]):
                best = slot
                if free_size == size:
                    break
        return best

    def free(self, offset: int) -> int:
        """Free the live block at ``offset``; return its size."""
        with self._lock:
            size = self._live.pop(offset)
            del self._live_sorted[bisect.bisect_left(self._live_sorted, offset)]
            self.in_use -= size
            self._insert_free(offset, size)
            return size

    def _insert_free(self, offset: int, size: int) -> None:
        slot = bisect.bisect_left(self._free_offsets, offset)
        # coalesce with the following free block
        if slot < len(self._free_offsets) and self._free_offsets[slot] == offset + size:
            size += self._free_sizes[slot]
            del self._free_offsets[slot], self._free_sizes[slot]
        # coalesce with the preceding free block
        if slot and self._free_offsets[slot - 1] + self._free_sizes[slot - 1] == offset:
            self._free_sizes[slot - 1] += size
        else:
            self._free_offsets.insert(slot, offset)
            self._free_sizes.insert(slot, size)

    def block_of(self, offset: int) -> tuple[int, int] | None:
        """``(offset, size)`` of the live block holding byte ``offset``, or None."""
        with self._lock:
            slot = bisect.bisect_right(self._live_sorted, offset) - 1
            if slot < 0:
                return None
            begin = self._live_sorted[slot]
            size = self._live[begin]
            return (begin, size) if offset < begin + size else None

    def size_of(self, offset: int) -> int:
        """The size of the live block that starts at ``offset`` (KeyError: none does)."""
        return self._live[offset]

    @property
    def largest_free(self) -> int:
        return max(self._free_sizes, default=0)

    def reset(self) -> None:
        self.__init__(self.capacity)

    @property
    def live_blocks(self) -> int:
        """Number of live blocks."""
        return len(self._live)

    def check(self) -> list[str]:
        """The broken invariants, in words (an empty list when all hold): live and free
        blocks tile ``[0, capacity)`` exactly, no two free blocks touch, every block is
        aligned, ``in_use`` is the sum of the live block sizes."""
        with self._lock:
            problems = []
            if sorted(self._live) != self._live_sorted:
                problems.append("the sorted list of live blocks differs from the live blocks")
            if sum(self._live.values()) != self.in_use:
                problems.append(f"in_use is {self.in_use} but the live blocks add up to "
                                f"{sum(self._live.values())}")
            blocks = sorted([(o, s, "live") for o, s in self._live.items()]
                            + [(o, s, "free") for o, s in zip(self._free_offsets, self._free_sizes)])
            position, previous = 0, None
            for offset, size, state in blocks:
                if offset % ALIGNMENT or size % ALIGNMENT or size <= 0:
                    problems.append(f"{state} block [{offset},+{size}] is not aligned to {ALIGNMENT}")
                if offset != position:
                    what = "overlaps the previous block" if offset < position else "leaves a hole before it"
                    problems.append(f"{state} block [{offset},+{size}] {what} (expected offset {position})")
                if state == previous == "free":
                    problems.append(f"free block [{offset},+{size}] touches the previous free block")
                position, previous = offset + size, state
            if position != self.capacity:
                problems.append(f"the blocks end at {position}, not at the capacity {self.capacity}")
            return problems


class EmulatedDevice(GuardedMemory, Device):
    """A discrete device whose memory is a separate block of host RAM.

    Args:
        number: device number.
        capacity: bytes of device memory (default ``PYACC_EMULATED_MEMORY`` or 4 GiB).
    """

    type_name = "emulated"
    shares_host_memory = False

    @property
    def copies_in_place(self) -> bool:
        """Transfers are ``np.copyto`` (``_copy``) unless a subclass copies otherwise."""
        return type(self)._copy is EmulatedDevice._copy

    def __init__(self, number: int, capacity: int | None = None):
        super().__init__(number)
        self._faults: FaultPlan | None = None  # fault injection (tests), see the module doc
        self._check_lock = threading.RLock()  # ``_in_use`` and the zones (``memcheck``)
        self._setup(capacity_from_environment() if capacity is None else capacity)
        _DEVICES.add(self)

    def _setup(self, capacity: int) -> None:
        """No allocation, and ``capacity`` bytes to give (``__init__``, ``reset``)."""
        self._capacity = capacity // ALIGNMENT * ALIGNMENT
        self._arena = Arena(_pool_size(self._capacity))  # blocks with their zones (docstring)
        self._memory: np.ndarray | None = None  # the pool, reserved at first allocation
        self._bytes: memoryview | None = None  # the pool's bytes (zones: fast slices)
        self._base = 0
        self._requested: dict[int, int] = {}  # address -> bytes asked for (events, stats)
        self._in_use = 0  # sum of ``_round_up`` of the bytes asked for: ``memory_in_use``
        # memory checking (module docstring): address -> (raw offset, raw size, nbytes)
        self._guarded: dict[int, tuple[int, int, int]] = {}
        # freed guarded blocks, oldest first: raw offset -> (raw size, address, nbytes)
        self._quarantine: collections.OrderedDict = collections.OrderedDict()
        self._quarantined_bytes = 0
        self._guard_index = None  # the guard and tail bytes of the live blocks (cache)
        self._findings: list[MemoryFinding] = []  # found at free/eviction, not yet reported

    # -- memory -------------------------------------------------------------------
    def _ensure_memory(self) -> None:
        """Reserve the pool at the first allocation (``_pool_size``; only the capacity
        where the OS refuses that much address space: the zones then take from it)."""
        if self._memory is None:
            try:
                memory = _reserve(max(self._arena.capacity, ALIGNMENT))
            except MemoryError:
                self._arena = Arena(self._capacity)
                memory = _reserve(max(self._capacity, ALIGNMENT))
            self._base = memory.ctypes.data
            self._bytes = memoryview(memory)
            self._memory = memory

    def allocate(self, nbytes: int) -> int:
        self._ensure_memory()
        plan = self._faults
        if plan is not None:
            index = plan.fails("alloc", f"allocation of {nbytes} bytes")
            if index is not None:
                raise plan.failure(OutOfMemoryError(
                    f"emulated device {self.number}: allocation #{index} of {nbytes} bytes "
                    "failed: injected fault", nbytes=nbytes, injected=True))
        if _MEMCHECK[0]:
            address = self._allocate_guarded(nbytes)
        else:
            address = self._allocate_plain(nbytes)
        self._requested[address] = nbytes  # (after its zones are laid: ``_zones``)
        emit(EventKind.ALLOC, self.identity, nbytes, device_begin=address)
        return address

    def _count(self, nbytes: int) -> int:
        """Count the block of ``nbytes`` against the capacity (OutOfMemoryError: it does
        not fit), under the check lock, before the arena is asked for it and its zones;
        the bytes counted (``_round_up``)."""
        accounted = _round_up(nbytes)
        if self._in_use + accounted > self._capacity:
            raise self._out_of_memory(nbytes)
        self._in_use += accounted
        return accounted

    def _uncount(self, nbytes: int) -> None:
        """Give back what ``_count`` counted for a block of ``nbytes`` (its free, under
        the check lock)."""
        self._in_use -= _round_up(nbytes)

    def _allocate_plain(self, nbytes: int) -> int:
        """A block without a head guard whose tail zone (at least ``TAIL`` bytes from
        the last byte asked for to the end of the block) holds ``GUARD_BYTE``: the
        rounding's padding, or one more ``ALIGNMENT`` unit where that is shorter."""
        with self._check_lock:  # (a scan reads the zones under it)
            accounted = self._count(nbytes)
            size = accounted if accounted - nbytes >= TAIL else accounted + ALIGNMENT
            offset = self._arena.allocate(nbytes, size=size)
            if offset is None:
                self._in_use -= accounted
                raise self._out_of_memory(nbytes)
            self._bytes[offset + nbytes:offset + size] = _GUARD_BYTES[:size - nbytes]
            self._guard_index = None
        return self._base + offset

    def _out_of_memory(self, nbytes: int) -> OutOfMemoryError:
        return OutOfMemoryError(
                f"emulated device {self.number} is out of memory: {nbytes} bytes requested, "
                f"{self._capacity - self._in_use} of {self._capacity} free "
                f"(largest free block {min(self._arena.largest_free, self._capacity)}). Free "
                "or unmap data, or raise PYACC_EMULATED_MEMORY",
                nbytes=nbytes,
            )

    def free(self, address: int) -> None:
        # FREE is published while the block is still held (see ``Device.free``)
        nbytes = self._requested.pop(address)
        try:
            emit(EventKind.FREE, self.identity, nbytes, device_begin=address)
        finally:  # a subscriber that raises must not leak the block
            if self._guarded and address in self._guarded:
                self._free_guarded(address)
            else:
                self._free_plain(address, nbytes)

    def allocation_of(self, address: int):
        """``(begin, bytes)`` of the live block holding ``address``: the block asked for,
        its bytes counted as ``memory_in_use`` counts them (``_round_up``); None in a
        guard or tail zone beyond them, or in a quarantined block."""
        if self._memory is None:
            return None
        block = self._arena.block_of(address - self._base)
        if block is None or block[0] in self._quarantine:
            return None
        begin = self._base + block[0]
        guarded = self._guarded.get(begin + GUARD)
        if guarded is not None and guarded[0] == block[0]:
            begin += GUARD
        nbytes = self._requested.get(begin)
        if nbytes is None:  # being allocated or freed right now
            return None
        accounted = _round_up(nbytes)
        return (begin, accounted) if begin <= address < begin + accounted else None

    def owns(self, array) -> bool:
        """Whether ``array`` lies in this device's memory (``Device.owns``): every device
        array the device makes is a numpy window on its one pool (``view``), and numpy
        records the pool as the ``base`` of every view of it, so the common answer is one
        identity test; an array that reaches the pool through another buffer object (a
        ``memoryview``) is placed by its address. Blocks freed since count too: a stale
        device array is never host data (copying it in and out would hide the use after
        free that ``PYACC_CHECK=memory`` names at the launch)."""
        memory = self._memory
        if memory is None or not isinstance(array, np.ndarray):
            return False
        base = array.base
        if base is memory or array is memory:
            return True
        if base is None or isinstance(base, np.ndarray):
            return False  # it owns its memory, or a view's base (numpy collapses view
            # chains to the array that owns the memory) is another array: host memory
        data = array.__array_interface__["data"][0]
        return self._base <= data < self._base + self._arena.capacity

    def view(self, address: int, like: np.ndarray):
        if like.size == 0:
            return np.empty(like.shape, like.dtype)
        return np.ndarray(
            shape=like.shape,
            dtype=like.dtype,
            buffer=self._memory,
            offset=address - self._base,
            strides=like.strides,
        )

    def extent_of(self, device_array):
        if not isinstance(device_array, np.ndarray):
            raise InvalidArgumentError(
                f"{describe_array(device_array)} is not a device array of emulated device "
                f"{self.number}: pass an array from acc.malloc, acc.deviceptr or acc.copyin"
            )
        data, low, high = _probe.extent(device_array)
        if device_array.size and not (
            self._memory is not None and self._base <= low and high <= self._base + self._arena.capacity
        ):
            raise InvalidArgumentError(
                f"{describe_array(device_array)} at {format_range(low, high - low)} is not "
                f"memory of emulated device {self.number}: pass an array from acc.malloc, "
                "acc.deviceptr or acc.copyin of this device (is it a host array, or another "
                "device's memory? acc.memcpy_d2d copies between devices)"
            )
        return data, low, high

    def _copy(self, destination, source):
        plan = self._faults
        if plan is not None:
            index = plan.fails("copy", f"copy of {source.nbytes} bytes")
            if index is not None:
                raise plan.failure(ExecutionError(
                    f"emulated device {self.number}: copy #{index} ({source.nbytes} bytes) "
                    "failed: injected fault; the destination was not written", injected=True))
        np.copyto(destination, source, casting="no")

    # -- launches and fault injection -------------------------------------------------
    def _launch_under_faults(self, kernel, args, queue, **options):
        """``Device.launch`` while a fault plan is installed (``inject_faults`` binds it
        as the instance's ``launch``, so launches without a plan pay nothing for it): the
        launch is counted when the kernel runs, and fails instead of running when the
        plan says so."""
        plan = self._faults
        if plan is not None:
            kernel = _FaultyKernel(kernel, plan, self.number, options.get("name"))
        return Device.launch(self, kernel, args, queue, **options)

    def inject_faults(self, plan: FaultPlan | None) -> FaultPlan | None:
        """Install ``plan`` (None: stop injecting); returns the plan it replaces. Copies
        and launches already queued are counted against the plan installed when they
        run."""
        previous, self._faults = self._faults, plan
        if plan is None:
            self.__dict__.pop("launch", None)
        else:
            self.launch = self._launch_under_faults
        return previous

    @property
    def fault_plan(self) -> FaultPlan | None:
        return self._faults

    def check_memory(self) -> list[str]:
        """Broken invariants of the allocator, in words (empty when all hold), including
        the bookkeeping of requested sizes (one per live block)."""
        problems = self._arena.check()
        live = self._arena.live_blocks - len(self._quarantine)
        if len(self._requested) != live:
            problems.append(f"{len(self._requested)} requested sizes recorded for "
                            f"{live} live blocks")
        counted = sum(_round_up(nbytes) for nbytes in list(self._requested.values()))
        if counted != self._in_use:
            problems.append(f"memory in use is {self._in_use} bytes, but the live blocks "
                            f"count {counted}")
        if self._in_use > self._capacity:
            problems.append(f"memory in use ({self._in_use} bytes) exceeds the capacity "
                            f"({self._capacity} bytes)")
        return problems

    # -- properties and lifetime ---------------------------------------------------
    @property
    def memory_in_use(self) -> int:
        """Bytes of the live blocks, each rounded up as ``_round_up`` rounds it; guard and
        tail zones and quarantined blocks are not counted (module docstring)."""
        return self._in_use

    def properties(self) -> dict:
        return {
            "memory": self._capacity,
            "free_memory": self._capacity - self.memory_in_use,
            "shared_memory_support": 0,
            "name": f"pyacc emulated device {self.number}",
            "vendor": "pyacc",
            "driver": f"numpy {np.__version__}",
        }

    def reset(self) -> None:
        """Forget every allocation and release the memory block (``acc.shutdown``); the
        capacity is re-read from the environment at the next use."""
        with self._check_lock:
            self._setup(capacity_from_environment())


def _reserve(nbytes: int) -> np.ndarray:
    """``nbytes`` of address space for the pool, committed by the OS page by page as it
    is first touched (``np.empty``: a large block is an anonymous private mapping). Views
    made with the result as their buffer have it as their ``base``.

    Raises:
        MemoryError: the OS refuses that much address space.
    """
    return np.empty(nbytes, dtype=np.uint8)


def capacity_from_environment() -> int:
    """``PYACC_EMULATED_MEMORY`` in bytes (suffixes K, M, G accepted), default 4 GiB."""
    return size_setting("PYACC_EMULATED_MEMORY", DEFAULT_CAPACITY,
                        "give each emulated device's capacity (e.g. 1073741824 or 1G)")
