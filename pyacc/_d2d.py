"""``acc.memcpy_d2d``: a copy between the device copies of two host arrays, on any two
devices of the current type (OpenACC 3.3 §3.2.30 ``acc_memcpy_d2d``).

Owns :func:`memcpy_d2d`. Invariants: both arrays must be wholly present on their devices
(``NotPresentError`` naming which and where, before any byte moves); the source's bytes
land at the start of the destination's device copy, which must hold them; between two
devices the bytes go through host memory after the source device's queue has finished
them (``async_`` orders the copy after that queue's earlier work; a copy on one device is
put on that queue, as ``memcpy_device`` does).
"""
from __future__ import annotations

import numpy as np

from pyacc.mapping import InvalidArgumentError, NotPresentError, check_array

from . import _devices
from ._clauses import queue_of
from ._devices import ICVS
from ._errors import reported
from ._names import variable_name


@reported
def memcpy_d2d(dst, src, dst_device, src_device, *, async_=None) -> None:
    """Copy the device copy of host array ``src`` on device ``src_device`` into the device
    copy of ``dst`` on device ``dst_device`` (both of the current device type):
    ``src.nbytes`` bytes, to the start of ``dst``'s. The same array on the same device:
    nothing to do."""
    check_array(dst)
    check_array(src)
    if src.nbytes > dst.nbytes:
        raise InvalidArgumentError(
            f"acc.memcpy_d2d: the source {variable_name(src)} has {src.nbytes} bytes, more "
            f"than the destination {variable_name(dst)}'s {dst.nbytes}: pass a section of "
            f"the source (src[:k]) that fits")
    device_type = ICVS.device_type
    source, target = (_runtime(device_type, number, what) for number, what in
                      ((src_device, "src_device"), (dst_device, "dst_device")))
    d_src = _present(source, src, "source", src_device)
    d_dst = _present(target, dst, "destination", dst_device)
    if src.nbytes == 0 or source is target and _address(src) == _address(dst):
        return  # (§3.2.30: the same address on the same device)
    queue = queue_of(source, async_)
    if source is target:
        source.memcpy_device(d_dst, d_src, queue)
        return
    staging = np.empty(src.shape, src.dtype)
    source.memcpy_from_device(staging, d_src, queue)
    queue.synchronize()
    target.memcpy_to_device(d_dst, staging, target.device.sync_queue)


def _runtime(device_type, number, what):
    count = _devices.num_devices(device_type)
    if isinstance(number, bool) or not isinstance(number, (int, np.integer)) or \
            not 0 <= number < count:
        raise InvalidArgumentError(f"acc.memcpy_d2d: {what}={number!r}: there is no "
                                   f"{device_type} device {number!r} (the type has {count}: "
                                   f"0 to {count - 1})")
    return _devices.runtime_of(device_type, int(number))


def _present(runtime, array, role, number):
    device_array = runtime.deviceptr(array)
    if device_array is None:
        raise NotPresentError(
            f"acc.memcpy_d2d: the {role} {variable_name(array)} is not (wholly) present on "
            f"{runtime.device.type_name} device {number}: map it there first (acc.copyin "
            f"or acc.create with that device current)")
    return device_array


def _address(array) -> int:
    return array.__array_interface__["data"][0]
