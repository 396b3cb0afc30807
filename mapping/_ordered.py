"""A generic ordered container of non-overlapping half-open integer ranges.

Owns: ``SortedRanges``. It knows nothing of refcounts or devices (as libgomp's
``splay-tree.[ch]`` knows nothing of mappings); each range carries an opaque value.

Representation, chosen by measurement (``benchmarks/bench_runtime.py``): two sorted int64
numpy arrays (``begins``, ``ends``) searched by compiled code (``_probe``) together with
reading the query array's address, plus a tuple of values in the same order. A pure-Python
splay tree costs 0.3–0.95 µs per lookup and ``bisect`` on a list ~0.15–0.25 µs, but
either must first read the array's address from Python (~0.75–1.3 µs), which the compiled
search gets for free.

Copy-on-write: every insert or remove builds new arrays and publishes them as one
immutable ``snapshot`` tuple, so lock-free readers (``acc.is_present``) always see a
consistent state. Mutations cost O(n) copies; lookups O(log n).

Invariant: ranges never overlap and are sorted by begin, so ends are sorted too.
"""

from __future__ import annotations

import numpy as np

__all__ = ["SortedRanges"]

_EMPTY = np.empty(0, dtype=np.int64)


class SortedRanges:
    """Non-overlapping ``[begin, end)`` ranges with values, in ascending order."""

    def __init__(self):
        #: (begins, ends, values): replaced whole on every mutation
        self.snapshot: tuple[np.ndarray, np.ndarray, tuple] = (_EMPTY, _EMPTY, ())

    def __len__(self) -> int:
        return len(self.snapshot[2])

    def insert(self, begin: int, end: int, value) -> None:
        """Add a range. The caller guarantees it overlaps no existing range."""
        begins, ends, values = self.snapshot
        slot = int(np.searchsorted(begins, begin))
        self.snapshot = (
            np.insert(begins, slot, begin),
            np.insert(ends, slot, end),
            values[:slot] + (value,) + values[slot:],
        )

    def remove(self, begin: int, value) -> None:
        """Remove the range that starts at ``begin`` and holds ``value``."""
        begins, ends, values = self.snapshot
        slot = int(np.searchsorted(begins, begin))
        if slot >= len(values) or values[slot] is not value:
            raise KeyError(f"no range at {begin:#x} holding {value!r}")
        self.snapshot = (
            np.delete(begins, slot),
            np.delete(ends, slot),
            values[:slot] + values[slot + 1 :],
        )

    def values(self) -> tuple:
        return self.snapshot[2]

    def clear(self) -> None:
        self.snapshot = (_EMPTY, _EMPTY, ())
