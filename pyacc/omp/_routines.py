"""OpenMP device memory routines (OpenMP 5.2 §18.8): ``target_is_present``,
``target_alloc``, ``target_free``, ``target_memcpy``, ``target_memcpy_rect``,
``target_associate_ptr``, ``target_disassociate_ptr``, ``get_mapped_ptr``.

Thin functions over the runtime verbs of pyacc's routines (``is_present``, ``malloc``,
``free``, ``memcpy_*``, ``map_data``, ``unmap_data``, ``deviceptr``) on the runtime of the
OpenMP device named (``_devices.resolve``). Errors are pyacc's exceptions (API.md §7),
never OpenMP's NULL / non-zero returns. On the initial device (the host) the routines act
on host memory: ``target_alloc`` returns a host buffer, copies are host copies.
"""

from __future__ import annotations

import itertools

import numpy as np

from pyacc.mapping import InvalidArgumentError, check_array
from pyacc.mapping.runtime import byte_view

from .._errors import reported
from . import _devices

__all__ = ["target_is_present", "target_alloc", "target_free", "target_memcpy",
           "target_memcpy_rect", "target_associate_ptr", "target_disassociate_ptr",
           "get_mapped_ptr"]



def _reported(function):
    """pyacc's ``reported`` for OpenMP routines: errors reach the error callbacks, and the
    end is published (DIRECTIVE_END, a PYACC_CHECK checkpoint) as ``omp.<name>``."""
    return reported(function, prefix="omp")


def _target(device, what):
    return _devices.resolve(device, what)


@_reported
def target_is_present(a, device=None) -> bool:
    """``omp_target_is_present``: ``a`` (any view) is wholly present on the device (the
    initial device: always True)."""
    check_array(a, contiguous=False)
    target = _target(device, "omp.target_is_present")
    return True if target.on_host else bool(target.runtime.is_present(a))


@_reported
def get_mapped_ptr(a, device=None):
    """``omp_get_mapped_ptr``: the device array of present ``a``, or None (the initial
    device: ``a`` itself)."""
    check_array(a, contiguous=False)
    target = _target(device, "omp.get_mapped_ptr")
    return a if target.on_host else target.runtime.deviceptr(a)


@_reported
def target_alloc(nbytes, device=None):
    """``omp_target_alloc``: ``nbytes`` bytes of device memory as a ``uint8`` device array,
    not in the present table.

    Raises:
        OutOfMemoryError: the device cannot hold it.
        InvalidArgumentError: ``nbytes`` is not an int ≥ 0.
    """
    if not isinstance(nbytes, (int, np.integer)) or isinstance(nbytes, bool) or nbytes < 0:
        raise InvalidArgumentError(f"omp.target_alloc: nbytes must be an int >= 0, got {nbytes!r}")
    target = _target(device, "omp.target_alloc")
    if target.on_host:
        return np.empty(int(nbytes), np.uint8)
    return target.runtime.malloc(int(nbytes), np.uint8)


@_reported
def target_free(d, device=None) -> None:
    """``omp_target_free``: free memory from ``target_alloc`` (None: nothing)."""
    if d is None:
        return
    target = _target(device, "omp.target_free")
    if not target.on_host:
        target.runtime.free(d)


def _bytes(array, offset, length, what):
    """The ``length`` bytes of a contiguous host or device array from byte ``offset``."""
    if not (array.flags.c_contiguous or array.flags.f_contiguous) if hasattr(array, "flags") else False:
        raise InvalidArgumentError(f"omp.target_memcpy: the {what} is not contiguous")
    flat = byte_view(array)
    if offset < 0 or length < 0 or offset + length > flat.shape[0]:
        raise InvalidArgumentError(
            f"omp.target_memcpy: {length} bytes at {what} offset {offset} do not fit in the "
            f"{what}'s {flat.shape[0]} bytes")
    return flat[offset:offset + length]


def _check_int(value, what, routine="omp.target_memcpy"):
    """A ``size_t`` argument of ``routine`` (a length, an offset, a dimension: OpenMP 5.2
    §18.8): an int >= 0, else ``InvalidArgumentError`` naming the routine."""
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 0:
        raise InvalidArgumentError(f"{routine}: {what} must be an int >= 0, got {value!r}")
    return int(value)


@_reported
def target_memcpy(dst, src, length, dst_offset, src_offset, dst_device, src_device) -> None:
    """``omp_target_memcpy`` (OpenMP argument order): copy ``length`` bytes from byte
    ``src_offset`` of ``src`` to byte ``dst_offset`` of ``dst``. Each of ``dst``/``src``
    is a host array when its device is the initial device, else a device array of that
    device (from ``target_alloc``, ``get_mapped_ptr``, ``acc.deviceptr``)."""
    length = _check_int(length, "length")
    dst_offset = _check_int(dst_offset, "dst_offset")
    src_offset = _check_int(src_offset, "src_offset")
    _copy(dst, src, length, dst_offset, src_offset,
          _target(dst_device, "omp.target_memcpy dst_device"),
          _target(src_device, "omp.target_memcpy src_device"))


def _is_host_side(target, array) -> bool:
    if target.on_host:
        return True
    return target.runtime.device.shares_host_memory


def _copy(dst, src, length, dst_offset, src_offset, dst_target, src_target) -> None:
    if length == 0:
        return
    dst_host, src_host = _is_host_side(dst_target, dst), _is_host_side(src_target, src)
    if not dst_host:
        dst = dst_target.runtime.device.as_device_array(dst)
    if not src_host:
        src = src_target.runtime.device.as_device_array(src)
    to_bytes = _bytes(dst, dst_offset, length, "destination")
    from_bytes = _bytes(src, src_offset, length, "source")
    if dst_host and src_host:
        np.copyto(to_bytes, from_bytes)
        return
    if dst_host:
        runtime = src_target.runtime
        runtime.memcpy_from_device(to_bytes, from_bytes, runtime.device.sync_queue)
    elif src_host:
        runtime = dst_target.runtime
        runtime.memcpy_to_device(to_bytes, np.ascontiguousarray(from_bytes), runtime.device.sync_queue)
    elif dst_target.runtime is src_target.runtime:
        runtime = dst_target.runtime
        runtime.memcpy_device(to_bytes, from_bytes, runtime.device.sync_queue)
    else:  # between two devices: through the host
        staging = np.empty(length, np.uint8)
        src_target.runtime.memcpy_from_device(staging, from_bytes, src_target.runtime.device.sync_queue)
        dst_target.runtime.memcpy_to_device(to_bytes, staging, dst_target.runtime.device.sync_queue)


@_reported
def target_memcpy_rect(dst, src, element_size, num_dims, volume, dst_offsets, src_offsets,
                       dst_dimensions, src_dimensions, dst_device, src_device) -> None:
    """``omp_target_memcpy_rect``: copy a ``volume``-shaped sub-block (``num_dims``
    dimensions, elements of ``element_size`` bytes) from ``src`` at ``src_offsets``
    (in elements, per dimension; ``src_dimensions`` its shape) to ``dst`` at
    ``dst_offsets`` (``dst_dimensions``). Row-major, as in C."""
    element_size = _check_int(element_size, "element_size", "omp.target_memcpy_rect")
    num_dims = _check_int(num_dims, "num_dims", "omp.target_memcpy_rect")
    shapes = [list(volume), list(dst_offsets), list(src_offsets), list(dst_dimensions),
              list(src_dimensions)]
    if num_dims < 1 or any(len(s) != num_dims for s in shapes):
        raise InvalidArgumentError(
            f"omp.target_memcpy_rect: volume, offsets and dimensions need num_dims={num_dims} "
            "entries each")
    volume, dst_offsets, src_offsets, dst_dims, src_dims = (
        [_check_int(v, "a dimension", "omp.target_memcpy_rect") for v in s] for s in shapes)
    for name, offsets, dims in (("dst", dst_offsets, dst_dims), ("src", src_offsets, src_dims)):
        for axis in range(num_dims):
            if offsets[axis] < 0 or volume[axis] < 0 or offsets[axis] + volume[axis] > dims[axis]:
                raise InvalidArgumentError(
                    f"omp.target_memcpy_rect: the block of {volume} at {name} offsets {offsets} "
                    f"does not fit {name} dimensions {dims} (axis {axis})")
    if any(v == 0 for v in volume):
        return
    dst_target = _target(dst_device, "omp.target_memcpy_rect dst_device")
    src_target = _target(src_device, "omp.target_memcpy_rect src_device")

    def strides(dims):
        out, step = [], element_size
        for extent in reversed(dims):
            out.append(step)
            step *= extent
        return list(reversed(out))

    dst_strides, src_strides = strides(dst_dims), strides(src_dims)
    row = volume[-1] * element_size
    for index in itertools.product(*(range(v) for v in volume[:-1])):
        d = sum((dst_offsets[k] + (index[k] if k < num_dims - 1 else 0)) * dst_strides[k]
                for k in range(num_dims - 1)) + dst_offsets[-1] * element_size
        s = sum((src_offsets[k] + (index[k] if k < num_dims - 1 else 0)) * src_strides[k]
                for k in range(num_dims - 1)) + src_offsets[-1] * element_size
        _copy(dst, src, row, d, s, dst_target, src_target)


@_reported
def target_associate_ptr(a, d, device=None, *, device_offset=0) -> None:
    """``omp_target_associate_ptr``: map host ``a`` onto device memory ``d`` (from byte
    ``device_offset``), as ``acc.map_data``: present until ``target_disassociate_ptr``,
    whatever maps and exits happen in between.

    Raises:
        PresentError: ``a`` is already present.
    """
    check_array(a)
    target = _target(device, "omp.target_associate_ptr")
    if target.on_host:
        return
    runtime = target.runtime
    offset = _check_int(device_offset, "device_offset", "omp.target_associate_ptr")
    if offset:
        device_array = runtime.device.as_device_array(d)
        d = byte_view(device_array)[offset:]
    runtime.map_data(a, d)


@_reported
def target_disassociate_ptr(a, device=None) -> None:
    """``omp_target_disassociate_ptr``: end a ``target_associate_ptr`` (the device memory
    is not freed).

    Raises:
        PresentError: ``a`` was not associated, or an ``ompx_hold`` / structured
            reference still holds it (LLVM refuses too).
    """
    check_array(a)
    target = _target(device, "omp.target_disassociate_ptr")
    if target.on_host:
        return
    target.runtime.unmap_data(a)
