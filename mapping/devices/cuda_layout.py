"""Layouts of CUDA device arrays: strides, element order, extents, transfer packing.

Owns: the stride arithmetic of ``cuda`` transfers — ``c_strides``/``f_strides``,
``block_order`` (does a view fill one gap-free C- or F-ordered block?),
``interface_layout`` (a ``__cuda_array_interface__`` as ``(data, shape, dtype,
strides)``), ``extent`` (the byte range a view covers) and ``Packing`` (how one
host↔device transfer moves its elements as a single block, which side is packed, and
how the block splits into pieces of at most so many bytes for chunked staging).
Pure functions of shapes and strides: no CUDA, no device, no lock.
"""

from __future__ import annotations

import numpy as np

from ..errors import InvalidArgumentError

__all__ = ["c_strides", "f_strides", "block_order", "interface_layout", "extent", "Packing"]


def c_strides(shape, itemsize: int) -> tuple:
    strides, step = [], itemsize
    for extent in reversed(shape):
        strides.append(step)
        step *= extent
    return tuple(reversed(strides))


def f_strides(shape, itemsize: int) -> tuple:
    strides, step = [], itemsize
    for extent in shape:
        strides.append(step)
        step *= extent
    return tuple(strides)


def _dense(shape, strides, itemsize: int, axes) -> bool:
    step = itemsize
    for axis in axes:
        if shape[axis] != 1:
            if strides[axis] != step:
                return False
            step *= shape[axis]
    return True


def block_order(shape, strides, itemsize: int) -> str | None:
    """``"C"`` or ``"F"`` when the elements fill one gap-free block in that order (``"C"``
    when both), else None (a strided view)."""
    if _dense(shape, strides, itemsize, range(len(shape) - 1, -1, -1)):
        return "C"
    if _dense(shape, strides, itemsize, range(len(shape))):
        return "F"
    return None


def interface_layout(interface) -> tuple[int, tuple, np.dtype, tuple]:
    """``(data, shape, dtype, strides)`` of a ``__cuda_array_interface__`` dict (strides
    None means C-contiguous)."""
    shape = tuple(int(n) for n in interface["shape"])
    dtype = np.dtype(interface["typestr"])
    strides = interface.get("strides")
    strides = c_strides(shape, dtype.itemsize) if strides is None else tuple(int(s) for s in strides)
    return int(interface["data"][0] or 0), shape, dtype, strides


def extent(data: int, shape, itemsize: int, strides) -> tuple[int, int, int]:
    """``(data, low, high)``: the byte range ``[low, high)`` the elements cover."""
    if any(n == 0 for n in shape):
        return data, data, data
    low, high = data, data + itemsize
    for extent, stride in zip(shape, strides):
        step = (extent - 1) * stride
        if step < 0:
            low += step
        else:
            high += step
    return data, low, high


class Packing:
    """How a host↔device transfer moves its elements as one block of ``nbytes``: the
    block's element order, and which side is packed into / unpacked from it."""

    __slots__ = ("shape", "dtype", "nbytes", "order", "host_packed", "device_packed",
                 "device_address")

    def __init__(self, host: np.ndarray, interface, what: str):
        address, shape, dtype, strides = interface_layout(interface)
        if shape != host.shape or dtype.str != host.dtype.str:
            raise InvalidArgumentError(
                f"{what}: the host array (shape {host.shape}, dtype {host.dtype}) and the "
                f"device array (shape {shape}, dtype {dtype}) differ")
        device_order = block_order(shape, strides, dtype.itemsize)
        host_order = block_order(host.shape, host.strides, dtype.itemsize)
        self.order = device_order or host_order or "C"
        self.host_packed = host_order != self.order
        self.device_packed = device_order != self.order
        self.shape, self.dtype, self.nbytes = shape, host.dtype, host.nbytes
        self.device_address = address

    def block_strides(self) -> tuple:
        itemsize = self.dtype.itemsize
        return c_strides(self.shape, itemsize) if self.order == "C" else f_strides(self.shape, itemsize)

    def staged(self, buffer: np.ndarray, shape=None) -> np.ndarray:
        """The staging ``buffer`` (bytes) seen as the host array's elements (or, with
        ``shape``, those of one of its ``pieces``), block order."""
        return np.ndarray(self.shape if shape is None else shape, self.dtype, buffer=buffer,
                          order=self.order)

    def pieces(self, limit: int) -> list[tuple[tuple, int, int]]:
        """The block in consecutive pieces of at most ``max(limit, itemsize)`` bytes, as
        ``(index, begin, end)``: ``host[index]`` (basic slices, no axis dropped) holds the
        elements of the block's bytes ``[begin, end)``. Pieces are runs of whole slices
        along the block's outermost axis, or of one such slice's inner pieces when a
        slice alone exceeds ``limit``. A block of no element has no piece."""
        if self.nbytes == 0:  # no element: nothing to move
            return []
        axes = list(range(len(self.shape)))
        if self.order == "F":
            axes.reverse()
        found: list[tuple[tuple, int, int]] = []
        _split(self.shape, self.dtype.itemsize, axes, max(limit, self.dtype.itemsize),
               [slice(None)] * len(self.shape), 0, found)
        return found


def _split(shape, itemsize: int, axes: list, limit: int, index: list, offset: int, found: list) -> None:
    """Append to ``found`` the pieces of the sub-block ``index`` (whose bytes start at
    ``offset``) along ``axes`` (outermost first): ``Packing.pieces``."""
    if not axes:  # a 0-d array: one element
        found.append((tuple(index), offset, offset + itemsize))
        return
    axis, inner = axes[0], axes[1:]
    step = itemsize * int(np.prod([shape[a] for a in inner], dtype=np.int64))  # one slice
    count = shape[axis]
    if step <= limit:
        run = limit // step
        for first in range(0, count, run):
            last = min(count, first + run)
            index[axis] = slice(first, last)
            found.append((tuple(index), offset + first * step, offset + last * step))
    else:
        for position in range(count):
            index[axis] = slice(position, position + 1)
            _split(shape, itemsize, inner, limit, index, offset + position * step, found)
    index[axis] = slice(None)
