"""The ``cuda`` device: GPU memory from CuPy's memory pool, async queues on CUDA streams.

Owns: ``CudaDevice`` — device arrays, events, and the device protocol (``base.Device``)
over its memory and queues. The other concepts of the device have their own modules,
which it calls and which never call it (each gets what it needs handed down):

- ``cuda_memory``     ``CudaMemory``: the blocks (from the backend, indexed by
  ``BlockIndex``), ``allocate_block``, ``interface_of`` and the ``pins``; the device and
  its transfers share it;
- ``cuda_backend``    ``CupyBackend`` (the only code that calls CuPy; the backend
  interface is listed there) and ``BlockIndex``; ``cuda_fake.FakeCudaBackend``
  implements the same interface over host memory, so everything runs without a GPU;
- ``cuda_layout``     strides, element order, extents and transfer packing;
- ``cuda_queues``     ``CudaQueue`` (async queues on non-blocking streams),
  ``CudaSyncQueue`` (``acc.async_sync``), ``CudaQueueEvent``;
- ``cuda_transfers``  the operations a queue runs for uploads, downloads and device
  copies (direct from page-locked host memory, else pinned staging; pack/unpack
  temporaries), over the memory and the queue they are given;
- ``cuda_pins``       ``Pins``: host arrays page-locked while they are mapped
  (``PYACC_PIN``).

The device passes its queue factory (``CudaQueue`` over its backend) and its synchronous
queue to ``Device``, whose ``QueueSet`` creates and waits for the queues.

Invariants and threading:
- every live block is in ``memory`` (``cuda_memory``, under its lock);
  ``memory_in_use`` is the sum of the requested bytes;
- ALLOC is published after a block is taken, FREE before it goes back to the backend
  (``Device.free``); a subscriber that raises on FREE does not leak the block;
- when the GPU is full, ``memory.allocate_block`` polls the queues once (their deferred
  frees that the streams have passed run) and tries again;
- a mapping's host range registered by ``pin`` stays registered until its block is
  freed (``free``, ``reset``): ``pins`` ties each registration to its block.
"""

from __future__ import annotations

import numpy as np

from ..errors import InvalidArgumentError, describe_array, format_range
from ..events import BUS, EventKind
from .base import Device, emit, submit_transfer
from .cuda_backend import BlockIndex, CupyBackend
from .cuda_layout import extent, interface_layout
from .cuda_memory import CudaMemory
from .cuda_queues import CudaQueue, CudaQueueEvent, CudaSyncQueue, SyncKernel
from .cuda_transfers import DeviceCopy, HostTransfer

__all__ = ["CudaDevice", "CudaQueue", "CudaSyncQueue", "CudaQueueEvent", "CupyBackend", "BlockIndex"]

_ACTIVE = BUS.active
_LAUNCH = int(EventKind.LAUNCH)
_DONE = int(EventKind.DONE)


class CudaDevice(Device):
    """An NVIDIA GPU (``cuda``, alias ``nvidia``), through a backend (module docstring).

    Args:
        number: the GPU number (CUDA device ordinal).
        backend: the backend; None: ``CupyBackend(number)`` (CuPy imported there).

    Beyond ``Device``: ``backend``; ``memory`` (``cuda_memory.CudaMemory``) and its
    ``pins``; ``queue(n).stream`` (the CUDA stream of a queue,
    ``acc.get_cuda_stream``; ``sync_queue.stream`` for the synchronous queue);
    ``interface_of(obj)``; ``as_device_array(obj)`` (a backend view of any device array
    of this device, e.g. a numba-cuda array as a CuPy array).

    Raises:
        DeviceTypeUnavailableError: no backend given and CuPy or a GPU is missing.
    """

    type_name = "cuda"
    shares_host_memory = False

    def __init__(self, number: int, backend=None):
        backend = CupyBackend(number) if backend is None else backend
        self.backend = backend
        self._label = f"cuda device {number}"
        super().__init__(number, sync_queue=CudaSyncQueue(backend, self._label),
                         queue_factory=lambda async_value, label: CudaQueue(async_value, backend, label))
        #: the blocks, ``allocate_block``, ``interface_of``: shared with the transfers
        self.memory = CudaMemory(backend, self._label, self.queues)
        self.pins = self.memory.pins  # host ranges page-locked while their mapping lives

    # -- memory -------------------------------------------------------------------
    def allocate(self, nbytes: int) -> int:
        address = self.memory.allocate(nbytes)
        emit(EventKind.ALLOC, self.identity, nbytes, device_begin=address)
        return address

    def free(self, address: int) -> None:
        memory = self.memory
        nbytes, handle = memory.take(address)
        # FREE is published while the block is still held (see ``Device.free``)
        try:
            emit(EventKind.FREE, self.identity, nbytes, device_begin=address)
        finally:  # a subscriber that raises must not leak the block or the registration
            memory.give_back(address, handle)

    def pin(self, address: int, host_begin: int, host_end: int, array: np.ndarray) -> None:
        """Page-lock the host side of a new mapping (``cuda_pins``) when its elements are
        one contiguous block: its transfers then skip staging; the registration keeps
        ``array`` alive until it ends (``cuda_pins``)."""
        if array.flags.c_contiguous or array.flags.f_contiguous:
            self.pins.pin(address, host_begin, host_end, array)

    def allocation_of(self, address: int):
        block = self.memory.block_at(address)
        return None if block is None else (block[0], block[1])

    # -- device arrays ---------------------------------------------------------------
    def view(self, address: int, like):
        if like.size == 0:
            return self.backend.view(None, 0, like.shape, like.dtype, like.strides)
        block = self.memory.block_at(address)
        if block is None:  # memory the program allocated, mapped with acc.map_data
            if self.backend.is_device_memory(address):
                return self.backend.foreign_view(address, like.shape, like.dtype, like.strides)
            raise InvalidArgumentError(f"{self._label}: no allocation holds device address {address:#x}")
        begin, _, handle = block
        return self.backend.view(handle, address - begin, like.shape, like.dtype, like.strides)

    def own_view(self, device_array):
        """A CuPy array over ``device_array``'s memory that does not hold its allocation
        (``Device.own_view``; a CuPy view would keep a block of data that left alive for
        as long as a memo or an express plan lives)."""
        return self.backend.unowned_view(device_array)

    def unmapped(self, array: np.ndarray):
        """A GPU kernel takes no host array: an empty device array of the same dtype and
        rank stands for data without a device copy (``no_create`` of absent data). Like
        the host address a C kernel would get, it must not be read: its shape is 0."""
        if array.size == 0:
            return self.view(0, array)
        return self.view(0, np.empty((0,) * array.ndim, array.dtype))

    def interface_of(self, device_array):
        """The ``__cuda_array_interface__`` of a device array (InvalidArgumentError when
        ``device_array`` is not one)."""
        return self.memory.interface_of(device_array)

    def extent_of(self, device_array):
        if isinstance(device_array, np.ndarray) and device_array.size == 0:
            data = device_array.__array_interface__["data"][0]  # holds no memory (API.md §2)
            return data, data, data
        data, shape, dtype, strides = interface_layout(self.memory.interface_of(device_array))
        data, low, high = extent(data, shape, dtype.itemsize, strides)
        if high > low and not self.backend.is_device_memory(low):
            raise InvalidArgumentError(
                f"{_describe_device_array(device_array, shape, dtype)} at "
                f"{format_range(low, high - low)} is not memory of {self._label}: pass an array "
                "from acc.malloc, acc.deviceptr or acc.copyin of this device (is it host "
                "memory, or memory of another GPU?)")
        return data, low, high

    def owns(self, array) -> bool:
        """Whether ``array`` is memory of this GPU (``Device.owns``): a numpy array never
        is (host memory, answered at once); any other object is when it exports
        ``__cuda_array_interface__`` (``interface_of``) over a block pyacc allocated here
        (a bisect in ``memory``'s blocks) or other memory of this GPU (``extent_of``'s test)."""
        if isinstance(array, np.ndarray):
            return False
        interface = self.backend.interface_of(array)
        if interface is None:
            return False
        data, shape, dtype, strides = interface_layout(interface)
        if 0 in shape:
            return True  # a device array object holding no memory: never host data
        _, low, _ = extent(data, shape, dtype.itemsize, strides)
        return self.memory.block_at(low) is not None or self.backend.is_device_memory(low)

    def as_device_array(self, device_array):
        """A backend view (a CuPy array) of any device array of this device."""
        self.extent_of(device_array)
        return self.backend.as_device_array(device_array)

    def mappable_block(self, low, high):
        """Memory from ``acc.malloc``, or any other memory of this GPU (a CuPy array the
        program allocated: ``acc_map_data`` of ``cudaMalloc`` memory, as NVHPC allows);
        ``extent_of`` has checked that ``[low, high)`` is this GPU's memory."""
        return self.allocation_of(low) or (low, high - low)

    # -- transfers ----------------------------------------------------------------
    def _transfer(self, kind, destination, source, queue, name) -> None:
        """``Device._transfer``, once foreign device arrays (any other object with
        ``__cuda_array_interface__``) are backend arrays: events carry arrays."""
        destination, source = self._native(destination), self._native(source)
        submit_transfer(self.identity, kind, destination, source, queue, name,
                        self._transfer_operation(kind, destination, source, queue))

    def _native(self, array):
        if isinstance(array, np.ndarray):  # a host array
            return array
        return self.backend.as_device_array(array)

    def _transfer_operation(self, kind, destination, source, queue):
        """The operation ``queue`` runs (``cuda_transfers``): it gets the memory and the
        queue, and whether that is the synchronous queue; never the device."""
        synchronous = queue is self.sync_queue
        if kind == EventKind.DEVICE_COPY:
            return DeviceCopy(self.memory, destination, source, queue, synchronous)
        if kind == EventKind.UPLOAD:
            return HostTransfer(self.memory, True, source, destination, queue, synchronous)
        return HostTransfer(self.memory, False, destination, source, queue, synchronous)

    def _copy(self, destination, source) -> None:
        """Copy between two same-shaped arrays, each a host (numpy) array or a device
        array of this device, on the synchronous queue."""
        to_device = self.backend.interface_of(destination) is not None
        from_device = self.backend.interface_of(source) is not None
        if not (to_device or from_device):
            np.copyto(destination, source, casting="no")
            return
        kind = (EventKind.DEVICE_COPY if to_device and from_device
                else EventKind.UPLOAD if to_device else EventKind.DOWNLOAD)
        self._transfer_operation(kind, destination, source, self.sync_queue)()

    def host_buffer(self, nbytes: int) -> np.ndarray:
        """Pinned host memory for an evicted device copy (fast, asynchronous restores)."""
        return self.backend.pinned(nbytes)

    # -- queues and launches -------------------------------------------------------
    def launcher(self, kernel, queue):
        """On the synchronous queue, ``kernel`` with the queue's stream current while it
        launches (compiled kernels launch on CuPy's current stream), then the stream
        synchronized (OpenACC 3.3 §2.16.1); on an asynchronous one the kernel itself (the
        queue runs it with its stream current, in stream order)."""
        return SyncKernel(kernel, self.backend, queue) if queue is self.sync_queue else kernel

    def relaunch(self, again, args, queue, name=None):
        """Enqueue on the asynchronous ``queue`` the launches a relaunch kept for ``args``
        (``again``: a ``Relaunch``'s, ``compiler/_relaunch.c.h``; ``name``: the kernel's)
        where ``launch`` would add nothing to them: no one observes launches, and the queue
        takes them as it would their kernel (``CudaQueue.submit_relaunch``). Counted
        as ``launch`` counts a launch. The call's outcome for its handle (what
        ``submit_relaunch`` answers) when they were enqueued; None: nothing was done,
        ``launch`` as usual."""
        if _ACTIVE[_LAUNCH] or _ACTIVE[_DONE]:
            return None
        outcome = queue.submit_relaunch(again, args, name)
        if outcome is not None:
            BUS.count(_LAUNCH, self.identity)
        return outcome

    # -- properties and lifetime ---------------------------------------------------
    @property
    def memory_in_use(self) -> int:
        return self.memory.in_use

    def properties(self) -> dict:
        free, total = self.backend.memory_info()
        return {
            "memory": int(total),
            "free_memory": int(free),
            "shared_memory_support": 0,
            "name": self.backend.device_name(),
            "vendor": "NVIDIA",
            "driver": self.backend.driver_version(),
        }

    def reset(self) -> None:
        """Forget every allocation and registration (``acc.shutdown``, after the queues
        have drained); ``PYACC_PIN`` is read again."""
        self.memory.clear()


def _describe_device_array(array, shape, dtype) -> str:
    if isinstance(array, np.ndarray):
        return describe_array(array)
    return f"({type(array).__name__}, shape {shape}, dtype {dtype})"
