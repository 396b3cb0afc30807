"""The ``host`` device: the CPU, sharing memory with the host program.

Owns: ``HostDevice``. Every host array already is a device array, so the runtime treats
all data as present and every data clause as a no-op (OpenACC 3.3 §2.7.4: "if var is in
shared memory, no action is taken"). The device still allocates (``acc.malloc`` returns a
fresh numpy array), copies (``acc.memcpy_*`` between distinct arrays) and launches kernels,
and it publishes those events like every device.

Invariants and threading: ``_blocks`` (address → buffer from ``acc.malloc``) is read and
written under ``_lock``; a buffer stays referenced until ``free`` has published FREE.
Queues are the default ``queues.WorkerQueue``s (``Device``'s queue factory).
"""

from __future__ import annotations

import os
import threading

import numpy as np

from .. import _probe
from ..errors import InvalidArgumentError, describe_array
from ..events import EventKind
from .base import Device, emit

__all__ = ["HostDevice"]


class HostDevice(Device):
    """The shared-memory CPU device (``host``, alias ``multicore``)."""

    type_name = "host"
    shares_host_memory = True

    def __init__(self, number: int = 0):
        super().__init__(number)
        self._blocks: dict[int, np.ndarray] = {}  # address -> buffer from acc.malloc
        self._lock = threading.Lock()

    def allocate(self, nbytes: int) -> int:
        block = np.empty(max(nbytes, 1), dtype=np.uint8)
        address = block.ctypes.data
        with self._lock:
            self._blocks[address] = block
        emit(EventKind.ALLOC, self.identity, nbytes, device_begin=address)
        return address

    def free(self, address: int) -> None:
        with self._lock:
            block = self._blocks.pop(address)
        # ``block`` holds the memory until this returns: FREE is published first
        emit(EventKind.FREE, self.identity, block.nbytes, device_begin=address)

    def allocation_of(self, address: int):
        with self._lock:
            for begin, block in self._blocks.items():
                if begin <= address < begin + block.nbytes:
                    return begin, block.nbytes
        return None

    def view(self, address: int, like: np.ndarray):
        with self._lock:
            block = self._blocks.get(address)
        if block is None:
            raise InvalidArgumentError(f"no host-device block at {address:#x}")
        return np.ndarray(shape=like.shape, dtype=like.dtype, buffer=block, strides=like.strides)

    def extent_of(self, device_array):
        if not isinstance(device_array, np.ndarray):
            raise InvalidArgumentError(
                f"{describe_array(device_array)} is not an array: on the host device, device "
                "arrays are numpy arrays"
            )
        return _probe.extent(device_array)

    def owns(self, array) -> bool:
        """False: host memory is shared, so an ``acc.malloc`` array is host data like any
        other, and data clauses on it do nothing (OpenACC 3.3 §2.7.4)."""
        return False

    def _copy(self, destination, source):
        np.copyto(destination, source, casting="no")

    @property
    def memory_in_use(self) -> int:
        with self._lock:
            return sum(block.nbytes for block in self._blocks.values())

    def properties(self) -> dict:
        total = _physical_memory()
        return {
            "memory": total,
            "free_memory": _available_memory(total),
            "shared_memory_support": 1,
            "name": f"host CPU ({os.cpu_count()} cores)",
            "vendor": "pyacc",
            "driver": f"numpy {np.__version__}",
        }

    def reset(self) -> None:
        with self._lock:
            self._blocks.clear()


def _physical_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - non-POSIX
        return 0


def _available_memory(total: int) -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - non-POSIX
        return total
