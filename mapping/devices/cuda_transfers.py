"""Transfers of the ``cuda`` device: the operations its queues run for each copy.

Owns: ``HostTransfer`` (one upload or download), ``DeviceCopy`` (device to device),
``block_for`` (where a packed block lives on the device) and ``run_synchronously`` (a
transfer on the synchronous stream, complete on return), with their staging buffers and
temporaries. Layout decisions come from ``cuda_layout``. Calls go down: the device
(``cuda.CudaDevice``) hands each operation its memory (``cuda_memory.CudaMemory``: the
backend, ``allocate_block``, ``interface_of``, ``pins``), its queue, and whether that
queue is the synchronous one; an operation calls those and the backend, never the device.

Transfers (``upload``/``download``/``device_copy``, same shape on both sides). Exactly one
host↔device memcpy per transfer, of exactly the bytes of the elements (a host block that
meets its mapping's page-locked range: one more for each part outside that range, since
CUDA refuses a memcpy whose host bytes run across the edge of a registered range):
- a side whose elements fill one C- or F-ordered block is copied as it is; a strided side
  (a column, a sub-block, ``a[::3]``, negative strides) is packed: on the device by one
  elementwise copy into (or out of) a contiguous temporary, on the host by numpy into (or
  out of) the staging buffer;
- on an asynchronous queue the copy reads (upload) or writes (download) the host array
  when it runs in stream order, never at enqueue time (OpenACC 3.3 §2.16.1): a host
  array that is one block inside a page-locked range (``cuda_pins``: a mapped array
  registered with the driver) is the memcpy's own host side; any other goes through a
  pinned staging buffer filled or emptied by host functions enqueued on the stream;
  staging buffers and temporaries are released once the stream has passed them;
- on the synchronous queue a contiguous host array is copied directly (in parts, as
  above, where it meets a page-locked range), a strided one
  through a pinned buffer packed/unpacked on the calling thread, and the copy has
  completed when the call returns.
Device-to-device copies: one memcpy when both sides are contiguous in the same order,
else one elementwise copy.

Threading: a transfer object runs once, on the thread that enqueues it (a ``CudaQueue``
runs operations on the calling thread); its host functions run later on a driver thread
and only copy with numpy. It drops its arrays once it has run.
"""

from __future__ import annotations

import contextlib

import numpy as np

from ..errors import InvalidArgumentError
from . import cuda_staging
from .cuda_layout import Packing, block_order, interface_layout
from .cuda_staging import CopyInto

__all__ = ["HostTransfer", "DeviceCopy", "block_for", "run_synchronously"]


class HostTransfer:
    """One upload or download between a host array and a same-shaped device array: the
    operation its queue runs (module docstring, "Transfers")."""

    __slots__ = ("memory", "upload", "host", "device_array", "queue", "synchronous")

    def __init__(self, memory, upload: bool, host: np.ndarray, device_array, queue, synchronous: bool):
        self.memory = memory
        self.upload = upload
        self.host = host
        self.device_array = device_array
        self.queue = queue
        self.synchronous = synchronous  # ``queue`` is the device's synchronous queue

    def __call__(self) -> None:
        host, device_array = self.host, self.device_array
        self.host = self.device_array = None
        if host.size == 0:
            return
        packing = Packing(host, self.memory.interface_of(device_array), self._what())
        if self.synchronous:
            run = self._upload_now if self.upload else self._download_now
        else:
            part = self._locked_part(host, packing)
            if part is not None:  # a page-locked host block: no staging but at its ends
                self._direct(host, device_array, packing, part)
                return
            run = self._upload_async if self.upload else self._download_async
        run(host, device_array, packing)

    def skipped(self, description) -> None:
        self.host = self.device_array = None

    def _what(self) -> str:
        return "upload" if self.upload else "download"

    # -- asynchronous: host data moves in stream order, through pinned staging unless the -----
    # -- host array is page-locked (``cuda_pins``) -----------------------------------------------
    def _locked_part(self, host: np.ndarray, packing: Packing):
        """``(raw, begin, end)``: the bytes of ``host`` (a view, block order) and the
        offsets in them that the DMA can read or write in place (``host`` is one block in
        the transfer's order and meets a registered range of the device side's own
        mapping), or None."""
        if packing.host_packed:
            return None
        low = host.ctypes.data
        part = self.memory.pins.locked_part(low, low + packing.nbytes, packing.device_address)
        if part is None:
            return None
        raw = host.reshape(-1, order="A").view(np.uint8)
        if raw.ctypes.data != low:  # a view of host, never a copy read or written at enqueue
            return None
        return raw, part[0] - low, part[1] - low

    def _upload_async(self, host, device_array, packing: Packing) -> None:
        backend, queue = self.memory.backend, self.queue
        address, temporary = block_for(self.memory, packing)
        staging = []
        try:  # the host is read when the copies run (cuda_staging)
            cuda_staging.upload_async(backend, queue, host, packing, address, staging)
            if temporary is not None:
                backend.copy(backend.as_device_array(device_array), temporary.view, queue.stream)
        finally:  # released once the stream has passed whatever was enqueued
            queue.defer(_Release(backend, temporary, staging))

    def _download_async(self, host, device_array, packing: Packing) -> None:
        backend, queue = self.memory.backend, self.queue
        address, temporary = block_for(self.memory, packing)
        staging = []
        try:  # the host is written when the copies run (cuda_staging)
            if temporary is not None:
                backend.copy(temporary.view, backend.as_device_array(device_array), queue.stream)
            cuda_staging.download_async(backend, queue, host, packing, address, staging)
        finally:
            queue.defer(_Release(backend, temporary, staging))

    def _direct(self, host, device_array, packing: Packing, part) -> None:
        """A transfer of a host block whose bytes ``raw`` are page-locked from ``begin`` to
        ``end`` (``part``): that part is one memcpy of the host array itself, the bytes
        before and after it (less than a page each) go through staging; all in stream
        order, so the DMA reads or writes ``host`` when it runs (OpenACC 3.3 §2.16.1)."""
        backend, queue = self.memory.backend, self.queue
        address, temporary = block_for(self.memory, packing)
        raw, begin, end = part  # block order: offsets in raw are offsets in the device block
        stagings = []
        try:
            if not self.upload and temporary is not None:
                backend.copy(temporary.view, backend.as_device_array(device_array), queue.stream)
            for low, high, locked in _around(begin, end, raw.size):
                stagings.append(self._piece(raw[low:high], address + low, locked))
            if self.upload and temporary is not None:
                backend.copy(backend.as_device_array(device_array), temporary.view, queue.stream)
        finally:
            queue.defer(_Release(backend, temporary, stagings))

    def _piece(self, host_bytes: np.ndarray, address: int, locked: bool):
        """Enqueue one piece of a ``_direct`` transfer; its staging buffer, or None."""
        backend, queue = self.memory.backend, self.queue
        staging = None if locked else backend.pinned(host_bytes.size)
        if self.upload:
            if staging is not None:
                queue.host_func(CopyInto(staging, host_bytes))  # reads the host when it runs
            backend.memcpy_htod(address, host_bytes if locked else staging, queue.stream)
        else:
            backend.memcpy_dtoh(host_bytes if locked else staging, address, queue.stream)
            if staging is not None:
                queue.host_func(CopyInto(host_bytes, staging))  # writes the host when it runs
        return staging

    # -- synchronous: complete on return ---------------------------------------------------------
    def _pieces_now(self, host, packing: Packing):
        """``[(bytes, offset)]``: the host block of a synchronous copy as memcpys that each
        lie wholly inside or wholly outside its mapping's page-locked range. CUDA refuses
        a copy whose host bytes run from registered memory into memory outside it
        (``cudaErrorInvalidValue``, seen on an H100), and only the whole pages inside a
        mapping are registered (``cuda_pins``): the rows at the end of a registered array
        end in an unregistered page."""
        part = self._locked_part(host, packing)
        if part is None:
            return [(host, 0)]
        raw, begin, end = part
        return [(raw[low:high], low) for low, high, _ in _around(begin, end, raw.size)]

    def _upload_now(self, host, device_array, packing: Packing) -> None:
        backend, stream = self.memory.backend, self.queue.stream
        address, temporary = block_for(self.memory, packing)
        staging = []  # kept until the stream has run the DMAs that read it

        def enqueue():
            if packing.host_packed:  # packed into pinned buffers, piece by piece (cuda_staging)
                cuda_staging.upload_now(backend, stream, host, packing, address, staging)
            else:
                for piece, offset in self._pieces_now(host, packing):
                    backend.memcpy_htod(address + offset, piece, stream)
            if temporary is not None:
                backend.copy(backend.as_device_array(device_array), temporary.view, stream)

        run_synchronously(backend, self.queue, enqueue, _Release(backend, temporary, None))

    def _download_now(self, host, device_array, packing: Packing) -> None:
        backend, stream = self.memory.backend, self.queue.stream
        address, temporary = block_for(self.memory, packing)
        staging = []  # kept until the stream has run the DMAs that write it

        def enqueue():
            if temporary is not None:
                backend.copy(temporary.view, backend.as_device_array(device_array), stream)
            if packing.host_packed:  # unpacked from pinned buffers, piece by piece (cuda_staging)
                cuda_staging.download_now(backend, stream, host, packing, address, staging)
            else:
                for piece, offset in self._pieces_now(host, packing):
                    backend.memcpy_dtoh(piece, address + offset, stream)

        run_synchronously(backend, self.queue, enqueue, _Release(backend, temporary, None))


class DeviceCopy:
    """A copy between two same-shaped device arrays: one memcpy when both are contiguous
    in the same order, else one elementwise copy."""

    __slots__ = ("memory", "destination", "source", "queue", "synchronous")

    def __init__(self, memory, destination, source, queue, synchronous: bool):
        self.memory, self.destination, self.source, self.queue = memory, destination, source, queue
        self.synchronous = synchronous  # ``queue`` is the device's synchronous queue

    def __call__(self) -> None:
        destination, source = self.destination, self.source
        self.destination = self.source = None
        backend, stream = self.memory.backend, self.queue.stream
        interface_of = self.memory.interface_of
        to_address, shape, dtype, to_strides = interface_layout(interface_of(destination))
        from_address, from_shape, from_dtype, from_strides = interface_layout(interface_of(source))
        if shape != from_shape or dtype.str != from_dtype.str:
            raise InvalidArgumentError(f"device copy: the destination (shape {shape}, dtype {dtype}) "
                                       f"and the source (shape {from_shape}, dtype {from_dtype}) differ")
        if any(n == 0 for n in shape):
            return
        order = block_order(shape, to_strides, dtype.itemsize)
        if order is not None and order == block_order(shape, from_strides, dtype.itemsize):
            nbytes = int(np.prod(shape)) * dtype.itemsize
            enqueue = lambda: backend.memcpy_dtod(to_address, from_address, nbytes, stream)  # noqa: E731
        else:
            enqueue = lambda: backend.copy(backend.as_device_array(destination),  # noqa: E731
                                           backend.as_device_array(source), stream)
        if self.synchronous:
            run_synchronously(backend, self.queue, enqueue, lambda: None)
        else:
            enqueue()

    def skipped(self, description) -> None:
        self.destination = self.source = None


class _Temporary:
    """A contiguous device block for packing one strided device view."""

    __slots__ = ("address", "handle", "view")

    def __init__(self, address: int, handle, view):
        self.address, self.handle, self.view = address, handle, view


class _Release:
    """Frees a transfer's device temporary and drops its staging buffer (after the
    stream has passed the transfer)."""

    __slots__ = ("backend", "temporary", "staging")

    def __init__(self, backend, temporary: _Temporary | None, staging):
        self.backend, self.temporary, self.staging = backend, temporary, staging

    def __call__(self) -> None:
        temporary, self.temporary, self.staging = self.temporary, None, None
        if temporary is not None:
            self.backend.free(temporary.handle)


def _around(begin: int, end: int, size: int) -> list[tuple[int, int, bool]]:
    """``(low, high, locked)``: a host block's ``size`` bytes split at the page-locked part
    ``[begin, end)`` (``HostTransfer._locked_part``), the empty pieces left out."""
    pieces = ((0, begin, False), (begin, end, True), (end, size, False))
    return [piece for piece in pieces if piece[1] > piece[0]]


def block_for(memory, packing: Packing):
    """``(address, temporary)``: where the packed block of a transfer lives on the device
    — the device array itself when it is contiguous in the block's order, else a new
    temporary (``_Temporary``, from ``memory.allocate_block``) to pack into or unpack from."""
    if not packing.device_packed:
        return packing.device_address, None
    address, handle = memory.allocate_block(packing.nbytes)
    view = memory.backend.view(handle, 0, packing.shape, packing.dtype, packing.block_strides())
    return address, _Temporary(address, handle, view)


def run_synchronously(backend, sync_queue, enqueue, release) -> None:
    """Enqueue on the device's synchronous stream (``sync_queue``'s) and wait; then
    ``release`` — also when it failed, after the stream has drained what was enqueued."""
    try:
        enqueue()
        sync_queue.synchronize()
    except BaseException:
        with contextlib.suppress(Exception):
            backend.synchronize(sync_queue.stream)
        raise
    finally:
        release()
