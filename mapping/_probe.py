"""Compiled helpers for the hot path: an array's byte range and the sorted-range search.

Owns: two small Numba functions and their pure-Python fallbacks. Nothing here knows about
entries or counters.

Why compiled (measured, see ``benchmarks/bench_runtime.py`` and environment-notes.md):
reading an array's address from Python (``a.ctypes.data`` ~0.75–1.3 µs,
``__array_interface__`` ~0.8–1.5 µs) costs more than the whole lookup budget of 0.5 µs.
A Numba function reads the data pointer from the array struct for free and dispatches in
~0.2 µs, so "address + binary search" runs in one call. Numba compiles one specialisation
per (dtype, ndim, layout) the first time it sees it (cached on disk, ``cache=True``).
Arrays Numba cannot type (non-native byte order, exotic dtypes) take the pure-Python
fallback, which gives the same answers more slowly.

Invariant expected from callers: ``begins``/``ends`` are int64 arrays sorted ascending, of
non-overlapping half-open ranges, so ``ends`` is sorted too.
"""

from __future__ import annotations

import numpy as np
from numba import njit

try:  # numpy >= 2
    from numpy.lib.array_utils import byte_bounds as _byte_bounds
except ImportError:  # pragma: no cover - numpy 1.x
    _byte_bounds = np.byte_bounds

__all__ = ["extent", "lookup", "lookup_range", "contained_index"]

# Relation codes returned by the compiled search; ``ranges.Relation`` gives them names.
DISJOINT, CONTAINED, EXTENDS_BEFORE, EXTENDS_AFTER, COVERS, SPANS = range(6)


@njit(cache=True, nogil=True)
def _extent(x):
    data = np.int64(x.ctypes.data)  # uintp + intp would promote to float64
    if x.size == 0:
        return data, data, data
    low = data
    high = data + x.itemsize
    for axis in range(x.ndim):
        step = (x.shape[axis] - 1) * x.strides[axis]
        if step < 0:
            low += step
        else:
            high += step
    return data, low, high


@njit(cache=True, nogil=True)
def _relation_code(begins, ends, low, high):
    first = np.searchsorted(ends, low, side="right")
    stop = np.searchsorted(begins, high, side="left")
    if stop <= first or high == low:
        return first, first, DISJOINT
    if stop - first > 1:
        return first, stop, SPANS
    begin = begins[first]
    end = ends[first]
    if begin <= low and high <= end:
        return first, stop, CONTAINED
    if low < begin and end < high:
        return first, stop, COVERS
    if low < begin:
        return first, stop, EXTENDS_BEFORE
    return first, stop, EXTENDS_AFTER


@njit(cache=True, nogil=True)
def _lookup(begins, ends, x):
    data, low, high = _extent(x)
    first, stop, code = _relation_code(begins, ends, low, high)
    return data, low, high, first, stop, code


@njit(cache=True, nogil=True)
def _contained_index(begins, ends, x):
    data, low, high = _extent(x)
    if high == low:
        return -1
    index = np.searchsorted(ends, low, side="right")
    if index < begins.shape[0] and begins[index] <= low and high <= ends[index]:
        return index
    return -1


def _extent_python(x):
    data = x.__array_interface__["data"][0]
    if x.size == 0:
        return data, data, data
    low, high = _byte_bounds(x)
    return data, low, high


def extent(x) -> tuple[int, int, int]:
    """Return ``(data_pointer, low, high)``: the first element's address and the half-open
    byte extent ``[low, high)`` covered by the elements of ``x`` (for a contiguous array,
    ``[data, data + nbytes)``; for an empty array ``(data, data, data)``)."""
    try:
        return _extent(x)
    except Exception:  # Numba cannot type this array (e.g. non-native byte order)
        return _extent_python(x)


def contained_index(begins: np.ndarray, ends: np.ndarray, x) -> int:
    """Index of the range that wholly contains the elements of ``x``, or -1 (also for an
    empty ``x``)."""
    try:
        return _contained_index(begins, ends, x)
    except Exception:
        _, low, high = _extent_python(x)
        first, _, code = lookup_range(begins, ends, low, high)
        return first if code == CONTAINED else -1


def lookup(begins: np.ndarray, ends: np.ndarray, x) -> tuple[int, int, int, int, int, int]:
    """Locate the elements of ``x`` among the sorted ranges in one call.

    Returns:
        ``(data, low, high, first, stop, relation)``: the extent as in :func:`extent`, the
        ranges ``first .. stop-1`` that overlap it, and a relation code (``DISJOINT`` ...
        ``SPANS``) of the extent to those ranges.
    """
    try:
        return _lookup(begins, ends, x)
    except Exception:
        data, low, high = _extent_python(x)
        return (data, low, high) + lookup_range(begins, ends, low, high)


def lookup_range(begins: np.ndarray, ends: np.ndarray, low: int, high: int) -> tuple[int, int, int]:
    """``(first, stop, relation)`` of the byte range ``[low, high)``; see :func:`lookup`."""
    first, stop, code = _relation_code(begins, ends, low, high)
    return int(first), int(stop), int(code)
