"""Replay of a compute call: what a recent call decided, to repeat it cheaply.

Owns :class:`CallPlan` (the plan of a fast-path call: its arrays by weak reference, their
layouts, the scalar kinds, the kernel, the runtime's memo), the argument kinds that key
kernels (:func:`argument_kind`), and the small helpers the launcher shares with it.

Invariants:
    * A plan keeps nothing alive: arrays and device arrays by weak reference, entries in
    the runtime's memo (also weak).
    * A plan applies only while the same array objects sit in the same slots with the
    same dtype and shape (and, on separate memory, strides) and the runtime's table is
    unchanged (``rejoin_structured``); then its device arrays are still what
    ``device_array_of`` would make (see ``CallPlan``).
"""

from __future__ import annotations

import weakref

import numpy as np

from mapping import Mapped, MapRequest

__all__ = ["CallPlan", "argument_kind", "is_device_array", "mapped_items", "SCALARS"]


SCALARS = frozenset({int, float, complex, bool, np.float64, np.float32, np.int64, np.int32,
                      np.uint64, np.uint32, np.complex128, np.complex64, np.bool_})


def is_device_array(value) -> bool:
    """An object exporting ``__cuda_array_interface__`` (CuPy, numba-cuda, PyTorch ...)."""
    return getattr(value, "__cuda_array_interface__", None) is not None


def argument_kind(value):
    """The kernel-key kind of a pass-through argument: its type, or dtype and ndim for
    arrays (``deviceptr`` device arrays are passed through as they are): numpy arrays,
    and any ``__cuda_array_interface__`` object (its type, typestr and ndim)."""
    if isinstance(value, np.ndarray):
        return (value.dtype.char, value.dtype.byteorder, value.ndim)
    kind = type(value)
    if kind in SCALARS:
        return kind
    interface = getattr(value, "__cuda_array_interface__", None)
    if interface is None:
        return kind
    return (kind, interface.get("typestr"), len(interface.get("shape", ())))


class CallPlan:
    """What a recent fast-path call of a region decided, to repeat it cheaply.

    Keeps nothing alive: the arrays, their device arrays and (in the runtime's memo) their
    entries are held by weak reference. The plan keeps the argument kinds (type of the
    scalars, dtype and shape of the arrays) that chose the kernel. It applies while
    ``arrays_of`` matches (the same array objects in the same argument slots, with the
    same dtype and shape, and on a device with separate memory the same strides: a
    deprecated in-place ``strides`` change can move the bytes out of the mapping, and the
    full path then checks presence again) and ``rejoin_structured`` finds the present
    table unchanged since the plan's call.

    Under those two conditions a device array the plan used is still the one
    ``device_array_of`` would make: the same entry at the same device address, and a host
    array of the same layout. So a device array that is still alive (for a mapped array,
    the entry keeps it) and still has that layout is used again; otherwise it is made anew.
    """

    __slots__ = ("runtime", "key", "map_kinds", "memo", "kernel", "scalars", "mapped", "views")

    def __init__(self, runtime, key, args, device_args, slots, map_kinds, memo, kernel):
        self.runtime = runtime
        self.key = key
        self.map_kinds = map_kinds
        self.memo = memo
        self.kernel = kernel
        mapped = set(slots)
        # arguments the kernel gets as they are (scalars, deviceptr arrays), with their kinds
        self.scalars = [(slot, argument_kind(args[slot])) for slot in range(len(args)) if slot not in mapped]
        shares_memory = runtime.device.shares_host_memory
        self.mapped = [(slot, weakref.ref(args[slot]), args[slot].dtype, args[slot].shape,
                        None if shares_memory else args[slot].strides) for slot in slots]
        #: weak references to the device arrays of the mapped slots (None: the host arrays)
        self.views = None if shares_memory else [_weak(device_args[slot]) for slot in slots]

    def arrays_of(self, args, key) -> list | None:
        """The mapped arrays of this call, or None when the plan does not apply."""
        if key != self.key:
            return None
        for slot, kind in self.scalars:
            value = args[slot]
            if type(value) is not kind and argument_kind(value) != kind:
                return None
        arrays = []
        for slot, reference, dtype, shape, strides in self.mapped:
            array = args[slot]
            if reference() is not array:
                return None  # another array (or no array) in this slot
            if array.shape != shape or (array.dtype is not dtype and array.dtype != dtype):
                return None  # changed in place
            if strides is not None and array.strides != strides:
                return None
            arrays.append(array)
        return arrays

    def device_args(self, runtime, args, arrays, entries) -> list:
        """The kernel's arguments: ``args`` with each mapped array replaced by its device
        array (see the class docstring for when a kept one is reused)."""
        device_args = list(args)
        views = self.views
        for index, (slot, _, dtype, shape, strides) in enumerate(self.mapped):
            view = views[index]()
            # a kept device array may have been changed in place since (one that
            # acc.deviceptr handed out, say): then it is made anew
            if view is None or view.shape != shape or view.strides != strides or view.dtype != dtype:
                view = runtime.device_array_of(entries[index], arrays[index])
                views[index] = _weak(view)
            device_args[slot] = view
        return device_args


def _weak(value):
    """A weak reference to ``value``, or a stand-in that is always dead (types without
    weak references: their device arrays are made anew at every call)."""
    try:
        return weakref.ref(value)
    except TypeError:
        return _dead


def _dead():
    return None


def mapped_items(arrays, map_kinds, entries) -> list[Mapped]:
    """The ``Mapped`` items of a fast-path call, for the full structured exit."""
    return [Mapped(MapRequest(kind, array, name), entry)
            for (array, (kind, name)), entry in zip(zip(arrays, map_kinds), entries)]
