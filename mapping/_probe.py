"""Compiled helpers for the hot path: an array's byte range and the sorted-range search.

Owns: small Numba functions (extent, lookup, containment) and their pure-Python fallbacks. Nothing here knows about
entries or counters.

Why compiled (measured, see ``benchmarks/bench_runtime.py`` and environment-notes.md):
reading an array's address from Python (``a.ctypes.data`` ~0.75–1.3 µs,
``__array_interface__`` ~0.8–1.5 µs) costs more than the whole lookup budget of 0.5 µs.
A Numba function reads the data pointer from the array struct for free and dispatches in
~0.2 µs, so "address + binary search" runs in one call. Numba compiles one specialisation
per (dtype, ndim, layout) the first time it sees it (cached on disk, ``cache=True``).
Arrays Numba cannot type (non-native byte order, exotic dtypes) take the pure-Python
fallback, which gives the same answers more slowly. The two searches on the path of every
present-data call, ``extent`` and ``contained_index``, come from ``mapping/_cprobe.c``
when it is built (the same answers without the Numba dispatch: ~0.05 instead of ~0.35 µs);
``_contained_index`` is whichever of the two is in use.

Invariant expected from callers: ``bounds`` is an int64 array of shape ``(2, capacity)``:
row 0 begins, row 1 ends, of non-overlapping half-open ranges sorted ascending, unused
slots padded with int64 max in both rows (so both rows are sorted).
"""

from __future__ import annotations

import threading

import numpy as np
from numba import njit

try:  # numpy >= 2
    from numpy.lib.array_utils import byte_bounds as _byte_bounds
except ImportError:  # pragma: no cover - numpy 1.x
    _byte_bounds = np.byte_bounds

__all__ = ["extent", "lookup", "lookup_range", "contained_index", "contained_index_python", "same_layout",
           "plain_block", "DataLane", "TableLock"]

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
def _relation_code(bounds, low, high):
    begins = bounds[0]
    ends = bounds[1]
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
def _lookup(bounds, x):
    data, low, high = _extent(x)
    first, stop, code = _relation_code(bounds, low, high)
    return data, low, high, first, stop, code


@njit(cache=True, nogil=True)
def _contained_index(bounds, x):
    data, low, high = _extent(x)
    if high == low:
        return -1
    index = np.searchsorted(bounds[1], low, side="right")
    if index < bounds.shape[1] and bounds[0, index] < high:
        if bounds[0, index] <= low and high <= bounds[1, index]:
            return index
        return -2  # overlaps a mapping without lying inside it
    return -1


_contained_index_numba = _contained_index
try:  # the C searches (optional extension, like pyacc._fastcall)
    from ._cprobe import DataLane, TableLock, contained_index as _contained_index, extent as _extent_c, \
        plain_block, same_layout
except ImportError:  # pragma: no cover - built without a C compiler
    _extent_c = _extent
    #: the present table's lock: without the C extension, an RLock (same semantics)
    TableLock = threading.RLock

    class DataLane:
        """Without the C extension: no lane. ``enter``/``leave`` always send the caller to
        the Python verb; ``present`` is the table's own check."""

        def __init__(self, table, ranges, runtime, entry_type, normal, active, kinds):
            self.present = table.contains if table is not None else lambda x: True
            self.tracks_use = False

        @staticmethod
        def enter(x):
            return None

        @staticmethod
        def leave(x):
            return None

        upload = download = join = part = leave

        def allow_copies(self, *args):
            pass

    def plain_block(x) -> bool:
        """Whether ``x`` is a numpy.ndarray (not a subclass) of plain data (no object
        references) in one C- or F-ordered block."""
        return type(x) is np.ndarray and not x.dtype.hasobject and (x.flags.c_contiguous or x.flags.f_contiguous)

    def same_layout(a, b):
        """Whether two numpy arrays have one shape, strides and dtype: None, ask Python."""
        return None


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
        return _extent_c(x)
    except Exception:  # not a numpy array, or one Numba cannot type (non-native byte order)
        return _extent_python(x)


def contained_index(bounds: np.ndarray, x) -> int:
    """Index of the range that wholly contains the elements of ``x``; -1 when they
    overlap no range (also for an empty ``x``), -2 when they overlap one without lying
    inside it."""
    try:
        return _contained_index(bounds, x)
    except Exception:
        return contained_index_python(bounds, x)


def contained_index_python(bounds: np.ndarray, x) -> int:
    """``contained_index`` for arrays Numba cannot type (reads the address in Python)."""
    _, low, high = _extent_python(x)
    if high == low:
        return -1
    first, _, code = lookup_range(bounds, low, high)
    return first if code == CONTAINED else -1 if code == DISJOINT else -2


def lookup(bounds: np.ndarray, x) -> tuple[int, int, int, int, int, int]:
    """Locate the elements of ``x`` among the sorted ranges in one call.

    Returns:
        ``(data, low, high, first, stop, relation)``: the extent as in :func:`extent`, the
        ranges ``first .. stop-1`` that overlap it, and a relation code (``DISJOINT`` ...
        ``SPANS``) of the extent to those ranges.
    """
    try:
        return _lookup(bounds, x)
    except Exception:
        data, low, high = _extent_python(x)
        return (data, low, high) + lookup_range(bounds, low, high)


def lookup_range(bounds: np.ndarray, low: int, high: int) -> tuple[int, int, int]:
    """``(first, stop, relation)`` of the byte range ``[low, high)``; see :func:`lookup`."""
    first, stop, code = _relation_code(bounds, low, high)
    return int(first), int(stop), int(code)
