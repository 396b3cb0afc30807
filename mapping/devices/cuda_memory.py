"""The memory of the ``cuda`` device: blocks from the backend, their index, page-locking.

Owns: ``CudaMemory`` — what ``cuda.CudaDevice`` and its transfers (``cuda_transfers``)
both need of device memory, handed down to each (numba-cuda keeps memory management apart
from everything else): the backend, the blocks pyacc allocated (a ``BlockIndex``),
``allocate_block`` (a new block, not indexed: a transfer's temporary), ``interface_of``
(a device array's ``__cuda_array_interface__``, or the error that names the device) and
``pins`` (``cuda_pins.Pins``: host ranges page-locked while their mapping lives).

Calls go down: the device calls its memory, its transfers call the memory they were
given, the memory calls the backend and ``pins``; the memory never calls the device. When
the GPU is full it polls the device's queues, which it was handed (``queues``, the
device's ``queues.QueueSet``), so that the frees they deferred and already passed run.

Invariants and threading:
- every live block is in ``_blocks``, read and written under ``_lock``; ``in_use`` is the
  sum of the requested bytes;
- events are the device's: it publishes ALLOC after ``allocate`` and FREE between
  ``take`` and ``give_back`` (``base.Device.free``);
- a host range registered by ``pins`` stays registered until its block is given back
  (``give_back``, ``clear``).
"""

from __future__ import annotations

import threading

from ..errors import InvalidArgumentError, OutOfMemoryError, describe_array
from .cuda_backend import BlockIndex
from .cuda_pins import Pins

__all__ = ["CudaMemory"]


class CudaMemory:
    """The blocks of one GPU that pyacc allocated, through ``backend``.

    Args:
        backend: the device's backend (``cuda_backend``).
        label: how messages name the device (``"cuda device 0"``).
        queues: the device's queue set (``queues.QueueSet``): its ``existing`` queues are
            polled once when the GPU is full.
    """

    def __init__(self, backend, label: str, queues):
        self.backend = backend
        self.label = label
        self._queues = queues
        self._lock = threading.Lock()
        self._blocks = BlockIndex()  # the live blocks pyacc allocated
        self.pins = Pins(backend)  # host ranges page-locked while their mapping lives

    # -- indexed blocks (the device's allocations) -----------------------------------------
    def allocate(self, nbytes: int) -> int:
        """A new block of ``nbytes``, indexed; its address."""
        address, handle = self.allocate_block(nbytes)
        with self._lock:
            self._blocks.add(address, nbytes, handle)
        return address

    def take(self, address: int):
        """Remove the block at ``address`` from the index; its ``(nbytes, handle)`` (the
        block is still held: ``give_back`` returns it)."""
        with self._lock:
            return self._blocks.pop(address)

    def give_back(self, address: int, handle) -> None:
        """Return a block ``take`` removed to the backend, and unregister its mapping's
        host range."""
        self.backend.free(handle)
        self.pins.unpin(address)

    def block_at(self, address: int):
        """``(begin, nbytes, handle)`` of the live block holding ``address``, or None."""
        with self._lock:
            return self._blocks.find(address)

    @property
    def in_use(self) -> int:
        return self._blocks.in_use

    def clear(self) -> None:
        """Forget every block and registration (``acc.shutdown``); ``PYACC_PIN`` is read
        again."""
        with self._lock:
            handles = self._blocks.clear()
        for handle in handles:
            self.backend.free(handle)
        self.pins.unpin_all()

    # -- blocks of transfers -----------------------------------------------------------------
    def allocate_block(self, nbytes: int):
        """``(address, handle)`` of a new block (not indexed: a transfer's temporary, or
        ``allocate`` indexes it) from ``backend.allocate``; when the GPU is full, once more
        after the frees that queues have deferred and already passed."""
        try:
            return self.backend.allocate(nbytes)
        except MemoryError:
            for queue in self._queues.existing():
                queue.poll()
        try:
            return self.backend.allocate(nbytes)
        except MemoryError as error:
            raise self._out_of_memory(nbytes, error) from None

    def _out_of_memory(self, nbytes: int, cause: BaseException) -> OutOfMemoryError:
        try:
            free, total = self.backend.memory_info()
            state = f"{free} of {total} bytes free on the GPU"
        except Exception:  # the message must not fail
            state = "free memory unknown"
        return OutOfMemoryError(
            f"{self.label} is out of memory: {nbytes} bytes requested, {state}, {self._blocks.in_use} "
            f"bytes held by pyacc in {len(self._blocks)} blocks ({cause}). Free or unmap data "
            "(acc.delete, exit_data, acc.free), wait on async queues so that their deferred "
            "frees run, or release memory other libraries cache "
            "(cupy.get_default_memory_pool().free_all_blocks())", nbytes=nbytes)

    def interface_of(self, device_array):
        """The ``__cuda_array_interface__`` of a device array (InvalidArgumentError when
        ``device_array`` is not one)."""
        interface = self.backend.interface_of(device_array)
        if interface is None:
            raise InvalidArgumentError(
                f"{describe_array(device_array)} is not a device array of {self.label}: pass "
                "a CuPy array or any object with __cuda_array_interface__ (from acc.malloc, "
                "acc.deviceptr or acc.copyin)")
        return interface
