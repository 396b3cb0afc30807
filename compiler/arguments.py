"""What a kernel argument is: the compiler's one home of argument kinds.

Owns :func:`is_device_array` (the one test of a device array, for every layer that
imports the compiler: the kernels' typing and keys, the struct test, the launcher's
sorting, sections, replay and ``if(false)`` refusal), :func:`argument_kind` (an
argument's part of the kernel key), :func:`device_dtype_ndim` (how a device array is
typed: like the host array it stands for) and ``SCALAR_TYPES``.

A device array is any object with ``__cuda_array_interface__`` (CuPy, numba-cuda,
PyTorch ...), and numba's CUDA simulator's ``FakeCUDAArray``, which has none. Where the
data substitution itself happens (host arrays for their device arrays) is the mapping
runtime's (``mapping.compute``) and, for calls the express lane repeats, its C plan's
(``pyacc/_express_plan.c.h``); the generated ``cuda`` drivers' own checks are
``cuda_runtime``'s. Pure functions of the values: no state.
"""

from __future__ import annotations

import numpy as np

__all__ = ["is_device_array", "argument_kind", "device_dtype_ndim", "SCALAR_TYPES"]

#: argument types that are certainly scalars (no device-array check needed)
SCALAR_TYPES = frozenset({int, float, complex, bool, np.float64, np.float32, np.int64, np.int32,
                           np.uint64, np.uint32, np.complex128, np.complex64, np.bool_})


def is_device_array(value) -> bool:
    """A GPU array: any ``__cuda_array_interface__`` object, or the simulator's
    ``FakeCUDAArray`` (module docstring). A numpy array is not one."""
    return hasattr(value, "__cuda_array_interface__") or type(value).__name__ == "FakeCUDAArray"


def argument_kind(value):
    """The kind of a kernel argument, part of the kernel key: ``(dtype char, byteorder,
    ndim)`` for a host or device array, the Python type for a scalar. Cheap attribute
    reads (hashing dtype objects is not)."""
    if type(value) is np.ndarray or isinstance(value, np.ndarray):
        dtype = value.dtype
        if dtype.char == "V":  # every record dtype has char "V": the dtype is the kind
            return (dtype, value.ndim)
        return (dtype.char, dtype.byteorder, value.ndim)
    kind = type(value)
    if kind in SCALAR_TYPES or not is_device_array(value):
        return kind
    dtype, ndim = device_dtype_ndim(value)
    return (dtype, ndim) if dtype.char == "V" else (dtype.char, dtype.byteorder, ndim)


def device_dtype_ndim(value):
    """dtype and ndim of a GPU array, from its ``__cuda_array_interface__`` when it
    has no ``dtype``/``ndim`` attributes of its own."""
    interface = getattr(value, "__cuda_array_interface__", None)
    if interface is not None:
        dtype = np.dtype(interface["typestr"])
        if dtype.char == "V":  # a record: its fields are in the interface's descr
            own = getattr(value, "dtype", None)
            dtype = own if isinstance(own, np.dtype) and own.fields else np.dtype(interface["descr"])
        return dtype, len(interface["shape"])
    return np.dtype(value.dtype), value.ndim
