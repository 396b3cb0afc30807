"""The ``emulated`` device: separate device memory in host RAM, with a real allocator.

Owns: ``Arena`` (a best-fit allocator over one block of bytes, 256-byte aligned like
``cudaMalloc``, coalescing freed neighbours) and ``EmulatedDevice``.

Device memory is one numpy ``uint8`` array of ``capacity`` bytes (``PYACC_EMULATED_MEMORY``,
default 4 GiB), reserved lazily by the OS: untouched pages cost nothing. Device arrays are
numpy views into it, so a test can read (and write) "device memory" directly through
``acc.deviceptr``. Device addresses are real addresses inside that block, disjoint from
every host array, so a copy that forgot to happen shows up as stale data — the point of
this device: every refcount and transfer path runs in CI without a GPU.

Invariants:
- live blocks and free blocks tile ``[0, capacity)`` exactly; no two free blocks touch
  (they are coalesced); ``in_use`` is the sum of live block sizes.
- a block's offset and size are multiples of ``ALIGNMENT``.
"""

from __future__ import annotations

import bisect
import os
import threading

import numpy as np

from . import _probe
from .device import Device, emit
from .errors import InvalidArgumentError, OutOfMemoryError, describe_array, format_range
from .events import EventKind

__all__ = ["Arena", "EmulatedDevice", "DEFAULT_CAPACITY", "ALIGNMENT"]

DEFAULT_CAPACITY = 4 << 30
ALIGNMENT = 256


def _round_up(nbytes: int) -> int:
    return max(ALIGNMENT, (nbytes + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT)


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

    def allocate(self, nbytes: int) -> int | None:
        """Offset of a new block of at least ``nbytes``, or None when nothing fits."""
        size = _round_up(nbytes)
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

    @property
    def largest_free(self) -> int:
        return max(self._free_sizes, default=0)

    def reset(self) -> None:
        self.__init__(self.capacity)


class EmulatedDevice(Device):
    """A discrete device whose memory is a separate block of host RAM.

    Args:
        number: device number.
        capacity: bytes of device memory (default ``PYACC_EMULATED_MEMORY`` or 4 GiB).
    """

    type_name = "emulated"
    shares_host_memory = False

    def __init__(self, number: int, capacity: int | None = None):
        super().__init__(number)
        if capacity is None:
            capacity = capacity_from_environment()
        self._arena = Arena(capacity)
        self._memory: np.ndarray | None = None  # reserved at first allocation
        self._base = 0
        self._requested: dict[int, int] = {}  # address -> bytes asked for (events, stats)

    # -- memory -------------------------------------------------------------------
    def _ensure_memory(self) -> None:
        if self._memory is None:
            self._memory = np.empty(max(self._arena.capacity, ALIGNMENT), dtype=np.uint8)
            self._base = self._memory.ctypes.data

    def allocate(self, nbytes: int) -> int:
        self._ensure_memory()
        offset = self._arena.allocate(nbytes)
        if offset is None:
            raise OutOfMemoryError(
                f"emulated device {self.number} is out of memory: {nbytes} bytes requested, "
                f"{self._arena.capacity - self._arena.in_use} of {self._arena.capacity} free "
                f"(largest free block {self._arena.largest_free}). Free or unmap data, or "
                "raise PYACC_EMULATED_MEMORY",
                nbytes=nbytes,
            )
        address = self._base + offset
        self._requested[address] = nbytes
        emit(EventKind.ALLOC, self.identity, nbytes, device_begin=address)
        return address

    def free(self, address: int) -> None:
        self._arena.free(address - self._base)
        nbytes = self._requested.pop(address)
        emit(EventKind.FREE, self.identity, nbytes, device_begin=address)

    def allocation_of(self, address: int):
        if self._memory is None:
            return None
        block = self._arena.block_of(address - self._base)
        return None if block is None else (self._base + block[0], block[1])

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
                "acc.deviceptr or acc.copyin of this device (is it a host array?)"
            )
        return data, low, high

    def _copy(self, destination, source):
        np.copyto(destination, source, casting="no")

    # -- properties and lifetime ---------------------------------------------------
    @property
    def memory_in_use(self) -> int:
        return self._arena.in_use

    def properties(self) -> dict:
        return {
            "memory": self._arena.capacity,
            "free_memory": self._arena.capacity - self._arena.in_use,
            "shared_memory_support": 0,
            "name": f"pyacc emulated device {self.number}",
            "vendor": "pyacc",
            "driver": f"numpy {np.__version__}",
        }

    def reset(self) -> None:
        """Forget every allocation and release the memory block (``acc.shutdown``); the
        capacity is re-read from the environment at the next use."""
        self._arena = Arena(capacity_from_environment())
        self._memory = None
        self._base = 0
        self._requested.clear()


def capacity_from_environment() -> int:
    """``PYACC_EMULATED_MEMORY`` in bytes (suffixes K, M, G accepted), default 4 GiB."""
    text = os.environ.get("PYACC_EMULATED_MEMORY", "").strip()
    if not text:
        return DEFAULT_CAPACITY
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1].upper(), 1)
    digits = text[:-1] if scale != 1 else text
    try:
        value = int(float(digits) * scale)
    except ValueError:
        raise InvalidArgumentError(
            f"PYACC_EMULATED_MEMORY={text!r} is not a size in bytes (e.g. 1073741824 or 1G)"
        ) from None
    if value < 0:
        raise InvalidArgumentError(f"PYACC_EMULATED_MEMORY={text!r} is negative")
    return value
