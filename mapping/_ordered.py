"""A generic ordered container of non-overlapping half-open integer ranges.

Owns: ``SortedRanges``. It knows nothing of refcounts or devices (as libgomp's
``splay-tree.[ch]`` knows nothing of mappings); each range carries an opaque value.

Representation, chosen by measurement (``benchmarks/bench_runtime.py``): one int64 numpy
array ``bounds`` of shape ``(2, capacity)`` — row 0 the sorted begins, row 1 the ends; the
``capacity - count`` spare slots hold ``PAD`` (int64 max) in both rows, so searches need
no count and a compiled call takes just two arguments (Numba's dispatch cost grows with
each one) — searched by compiled code (``_probe``) that also reads the query array's
address, plus a list of values in the same order. A pure-Python splay tree costs 0.3–0.95 µs per lookup and
``bisect`` on a list ~0.15–0.25 µs, but either must first read the array's address from
Python (~0.75–1.3 µs), which the compiled search gets for free. Inserts and removes shift
the tail in place (a memmove: ~20 µs at 100,000 ranges); lookups are O(log n).

Concurrency: writers hold the owner's lock. Lock-free readers use ``version`` as a
sequence lock: it is odd while a mutation is in progress and changes with every mutation,
so a reader that sees the same even version before and after its search read a
consistent state (else it retries under the lock).

Invariant: live ranges never overlap and are sorted by begin, so ends are sorted too.
"""

from __future__ import annotations

import numpy as np

__all__ = ["SortedRanges"]

_INITIAL_CAPACITY = 64
#: the value of unused slots: sorts after every address
PAD = np.iinfo(np.int64).max


class SortedRanges:
    """Non-overlapping ``[begin, end)`` ranges with values, in ascending order."""

    # slots: the C readers (``_cprobe.DataLane``, ``pyacc/_fastcall.c``) read
    # ``bounds``, ``values`` and ``version`` on every present-data call
    __slots__ = ("bounds", "count", "values", "version")

    def __init__(self):
        self.bounds = np.full((2, _INITIAL_CAPACITY), PAD, dtype=np.int64)
        self.count = 0
        self.values: list = []
        self.version = 0  # even: stable; odd: a mutation is in progress

    def __len__(self) -> int:
        return self.count

    def insert(self, begin: int, end: int, value) -> None:
        """Add a range. The caller guarantees it overlaps no existing range."""
        self.version += 1
        try:
            count = self.count
            slot = int(np.searchsorted(self.bounds[0, :count], begin))
            if count == self.bounds.shape[1]:
                self._grow()
            bounds = self.bounds
            bounds[:, slot + 1 : count + 1] = bounds[:, slot:count]
            bounds[0, slot] = begin
            bounds[1, slot] = end
            self.values.insert(slot, value)
            self.count = count + 1
        finally:
            self.version += 1

    def remove(self, begin: int, value) -> None:
        """Remove the range that starts at ``begin`` and holds ``value``."""
        count = self.count
        slot = int(np.searchsorted(self.bounds[0, :count], begin))
        if slot >= count or self.values[slot] is not value:
            raise KeyError(f"no range at {begin:#x} holding {value!r}")
        self.version += 1
        try:
            bounds = self.bounds
            bounds[:, slot : count - 1] = bounds[:, slot + 1 : count]
            bounds[:, count - 1] = PAD
            del self.values[slot]
            self.count = count - 1
        finally:
            self.version += 1

    def touch(self) -> None:
        """Change ``version`` without changing the ranges (a value changed in place:
        callers memoising lookups on the version must look again)."""
        self.version += 2

    def _grow(self) -> None:
        grown = np.full((2, 2 * self.bounds.shape[1]), PAD, dtype=np.int64)
        grown[:, : self.count] = self.bounds[:, : self.count]
        self.bounds = grown

    def clear(self) -> None:
        version = self.version
        self.__init__()
        self.version = version + 2  # monotonic, so no reader mistakes the old state for this
