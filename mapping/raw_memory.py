"""Raw device memory: ``acc.malloc``, ``acc.free`` and ``acc.memcpy_*`` (OpenACC 3.3
§3.2.16–3.2.17, §3.2.26–3.2.28), and ``Layout``.

Owns: the raw-memory routines as functions of a device (and its present table), shared by
both runtimes (``runtime.DeviceRuntime``, ``shared.SharedMemoryRuntime``): raw memory is
real on every device, host included. No table lookups of host data: raw copies move bytes
between the arrays they are given.

Invariants: device memory is allocated and freed with the table lock held (``malloc``,
``free``); a block from ``acc.malloc`` is freed only once every queue has passed the work
already queued (``Device.release``); memory that backs a mapping is never freed here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import InvalidArgumentError, PresentError, describe_array, format_range
from .events import BUS
from .plan import check_fits, check_writeable
from .queues import Queue
from .ranges import check_array

__all__ = ["Layout", "byte_view", "malloc", "free", "memcpy_to_device",
           "memcpy_from_device", "memcpy_device"]

#: ``with _HOLD:`` — an event subscriber's exception waits for the end of the routine
_HOLD = BUS.holding()


@dataclass(frozen=True, slots=True)
class Layout:
    """Shape, dtype and strides of an array not yet created (what ``Device.view`` reads)."""

    shape: tuple
    dtype: np.dtype
    strides: tuple
    size: int
    nbytes: int

    @classmethod
    def c_contiguous(cls, shape, dtype) -> "Layout":
        dimensions = shape if isinstance(shape, (tuple, list)) else (shape,)
        if not all(isinstance(n, (int, np.integer)) and not isinstance(n, bool) for n in dimensions):
            raise InvalidArgumentError(f"acc.malloc: shape {shape!r} must be an int or a tuple of ints")
        shape = tuple(int(n) for n in dimensions)
        try:
            dtype = np.dtype(dtype)
        except TypeError as error:
            raise InvalidArgumentError(f"acc.malloc: {dtype!r} is not a numpy dtype ({error})") from None
        if dtype.hasobject:
            raise InvalidArgumentError(f"acc.malloc: dtype {dtype} holds Python objects; use a numeric dtype")
        if any(n < 0 for n in shape):
            raise InvalidArgumentError(f"acc.malloc: negative dimension in shape {shape}")
        strides, step = [], dtype.itemsize
        for extent in reversed(shape):
            strides.append(step)
            step *= extent
        size = int(np.prod(shape, dtype=np.int64))
        return cls(shape, dtype, tuple(reversed(strides)), size, size * dtype.itemsize)


def byte_view(array: np.ndarray) -> np.ndarray:
    """A contiguous array's bytes as a flat ``uint8`` array (shares memory)."""
    return array.reshape(-1, order="A").view(np.uint8)


def malloc(device, table, shape, dtype):
    """Raw device memory for a C-contiguous array of ``shape`` and ``dtype``."""
    layout = Layout.c_contiguous(shape, dtype)
    if layout.size == 0:
        return np.empty(layout.shape, layout.dtype)
    with table.locked(), _HOLD:  # device memory changes with the table lock held
        return device.view(device.allocate(layout.nbytes), layout)


def free(device, table, device_array) -> None:
    """Free the block from ``malloc`` that ``device_array`` starts (``acc_free`` of its
    pointer: the whole block, however much of it the array spans); refuses a block any
    part of which backs a mapping."""
    data, low, high = device.extent_of(device_array)
    if high == low:
        return
    with table.locked(), _HOLD:
        block = device.allocation_of(low)
        if block is None or block[0] != low:
            raise InvalidArgumentError(
                f"acc.free: {describe_array(device_array)} at {format_range(low, high - low)} "
                "is not the start of a block from acc.malloc"
            )
        begin, nbytes = block
        users = table.entries_overlapping_device(begin, begin + max(nbytes, 1))
        if users:
            raise PresentError(
                f"acc.free: device memory {format_range(begin, nbytes)} is still mapped: "
                f"{users[0].describe()}; unmap_data / delete it first",
                host_range=users[0].host_range,
            )
        # not before every queue has passed the work already queued on it (a block
        # reused while a kernel still writes it would corrupt its next owner)
        device.release(low, device.sync_queue)


def memcpy_to_device(device, device_array, array, queue: Queue) -> None:
    """Copy the ``array.nbytes`` bytes of host ``array`` to the start of ``device_array``."""
    device_array = device.as_device_array(device_array)
    check_array(array)
    destination, source = _raw_bytes(device_array, array, "acc.memcpy_to_device")
    with _HOLD:
        device.upload(destination, source, queue)


def memcpy_from_device(device, array, device_array, queue: Queue, name=None) -> None:
    """Copy the first ``array.nbytes`` bytes of ``device_array`` into host ``array``."""
    device_array = device.as_device_array(device_array)
    check_array(array)
    source, destination = _raw_bytes(device_array, array, "acc.memcpy_from_device")
    if not array.flags.writeable:
        check_writeable("acc.memcpy_from_device", array, name, "the destination")
    with _HOLD:
        device.download(destination, source, queue)


def memcpy_device(device, destination, source, queue: Queue) -> None:
    """Copy the bytes of device array ``source`` to the start of ``destination``."""
    destination = device.as_device_array(destination)
    source = device.as_device_array(source)
    to_bytes, from_bytes = _raw_bytes(destination, source, "acc.memcpy_device")
    if to_bytes.size:
        with _HOLD:
            device.device_copy(to_bytes, from_bytes, queue)


def _raw_bytes(destination, source, routine):
    """Byte views of ``destination[:source.nbytes]`` and ``source`` for a raw copy."""
    check_fits(routine, destination, source, f"the source {describe_array(source)}")
    return byte_view(destination)[: source.nbytes], byte_view(source)
