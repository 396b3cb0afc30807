"""The present table of one device: which host ranges are mapped, and to what.

Owns: ``PresentTable`` and ``Lookup``. One table per device, shared by every host thread.

Invariants:
- entries never overlap; adjacent entries are never merged (OpenACC 3.3 §2.7.3: a range
  spanning two mappings is partly present);
- every entry in the table is present (``structured + dynamic > 0``) once the directive
  that touched it has finished; an entry whose counters reach 0 is removed by that
  directive;
- mutations (``insert``/``remove``) happen with the table lock held, taken through
  ``with table.locked():`` for the whole of a directive (LLVM's ``ProtectedObj``);
  ``lookup`` takes the (re-entrant) lock itself; ``probe`` — the hot path of
  ``acc.copyin`` — runs with the caller holding it; ``containing``/``contains`` — the hot
  path of ``is_present`` — run lock-free under the container's sequence lock
  (``_ordered``);
- the table knows nothing of counters (libgomp's ``splay-tree.c``): ``entry`` changes
  them, ``plan`` decides from them.
"""

from __future__ import annotations

from typing import NamedTuple

from . import _probe
from ._probe import _contained_index
from ._ordered import SortedRanges
from .entry import MappingEntry
from .ranges import RELATIONS, HostRange, Relation

__all__ = ["PresentTable", "Lookup", "PARTIAL"]

#: what ``PresentTable.probe`` returns for a range that is partly present
PARTIAL = object()


class Lookup(NamedTuple):
    """What a lookup found.

    Attributes:
        relation: how the requested extent relates to ``entries``.
        entries: the entries it overlaps, in address order (empty when DISJOINT).
        data: host address of the first element of the requested array.
        extent: the byte extent of its elements.
    """

    relation: Relation
    entries: tuple[MappingEntry, ...]
    data: int
    extent: HostRange

    @property
    def entry(self) -> MappingEntry | None:
        """The containing entry when CONTAINED, else None."""
        return self.entries[0] if self.relation is Relation.CONTAINED else None


class PresentTable:
    """Mappings of one device, ordered by host address."""

    # slots: the C lanes (``_cprobe.DataLane``, ``pyacc/_fastcall.c``) read ``_lock``
    # on every present-data call
    __slots__ = ("_ranges", "_lock")

    def __init__(self):
        self._ranges = SortedRanges()
        self._lock = _probe.TableLock()

    def locked(self) -> _probe.TableLock:
        """The table lock, to hold for the duration of a directive:
        ``with table.locked(): ...`` (re-entrant, an RLock's semantics; a plain lock
        object because a generator-based context manager costs microseconds on the hot
        path; ``_cprobe.TableLock``, which the C lanes take in place)."""
        return self._lock

    def __len__(self) -> int:
        return len(self._ranges)

    def after_fork_in_child(self) -> None:
        """A new lock in the child of ``os.fork`` (another thread of the parent may have
        held this one at the fork; it would stay held forever in the child)."""
        self._lock = _probe.TableLock()

    @property
    def version(self) -> int:
        """Changes with every insert and remove, and when an entry's device block moves
        (``touch``: eviction and restore) — callers may memoise lookups and device
        arrays on it."""
        return self._ranges.version

    @property
    def version_holder(self):
        """The object whose ``version`` attribute is ``version`` (read by a caller that
        checks the version without calling back: ``pyacc/_fastcall.c``, which also reads
        the lock as the attribute ``_lock``, at each use: a fork replaces it)."""
        return self._ranges

    def touch(self) -> None:
        """An entry's device block moved (oversubscription evicted or restored it): the
        version changes so that no memo keeps a device array of the old block (table
        lock held)."""
        with self._lock:
            self._ranges.touch()

    # -- lookups -----------------------------------------------------------------------
    def lookup(self, array) -> Lookup:
        """Locate the elements of ``array`` (any strided view) among the mappings."""
        ranges = self._ranges
        with self._lock:
            data, low, high, first, stop, code = _probe.lookup(ranges.bounds, array)
            return Lookup(RELATIONS[code], tuple(ranges.values[first:stop]), data, HostRange(low, high))

    def lookup_range(self, host_range: HostRange) -> Lookup:
        """Locate a byte range among the mappings."""
        ranges = self._ranges
        with self._lock:
            first, stop, code = _probe.lookup_range(ranges.bounds, host_range.begin, host_range.end)
            return Lookup(RELATIONS[code], tuple(ranges.values[first:stop]), host_range.begin, host_range)

    def containing(self, array) -> MappingEntry | None:
        """The entry wholly containing the elements of ``array``, or None.

        The hot path of ``acc.is_present``: lock-free, validated by the container's
        sequence lock; retried under the lock if a mutation ran concurrently.
        """
        ranges = self._ranges
        version = ranges.version
        try:
            index = _contained_index(ranges.bounds, array)
            entry = ranges.values[index] if index >= 0 else None
        except IndexError:  # a concurrent remove shortened the list
            entry = None
        except Exception:  # an array Numba cannot type: the pure-Python search
            index = _probe.contained_index_python(ranges.bounds, array)
            entry = ranges.values[index] if index >= 0 else None
        if version & 1 or ranges.version != version:
            with self._lock:
                index = _probe.contained_index(ranges.bounds, array)
                entry = ranges.values[index] if index >= 0 else None
        return entry

    def probe(self, array):
        """With the lock held: the entry wholly containing the elements of ``array``;
        None when they overlap no entry (or ``array`` is empty); ``PARTIAL`` when they
        overlap one without lying inside it. One compiled search: the hot path of
        ``acc.copyin``, whose absent case is planned from this answer alone."""
        ranges = self._ranges
        try:
            index = _contained_index(ranges.bounds, array)
        except Exception:  # an array Numba cannot type: the pure-Python search
            index = _probe.contained_index_python(ranges.bounds, array)
        if index >= 0:
            return ranges.values[index]
        return None if index == -1 else PARTIAL

    def contains(self, array) -> bool:
        """True when the elements of ``array`` lie inside one mapping, or it is empty
        (zero-size data is always present, API.md §2). The hot path of
        ``acc.is_present``: one compiled call, lock-free (sequence lock)."""
        ranges = self._ranges
        version = ranges.version
        try:
            index = _contained_index(ranges.bounds, array)
        except Exception:  # an array Numba cannot type: the pure-Python search
            index = _probe.contained_index_python(ranges.bounds, array)
        if version & 1 or ranges.version != version:
            return self.containing(array) is not None or array.size == 0
        return index >= 0 or array.size == 0

    def entries(self) -> tuple[MappingEntry, ...]:
        with self._lock:
            return tuple(self._ranges.values)

    def entry_at_device_address(self, low: int, high: int) -> MappingEntry | None:
        """The entry whose device copy holds ``[low, high)``, or None (a linear scan:
        device-to-host lookups are rare, as in libgomp's ``acc_hostptr``)."""
        for entry in self.entries():
            begin = entry.device_address
            if begin <= low and high <= begin + entry.nbytes and not entry.evicted:
                return entry
        return None

    def entries_overlapping_device(self, low: int, high: int) -> list[MappingEntry]:
        return [
            entry
            for entry in self.entries()
            if entry.device_address < high and low < entry.device_address + entry.nbytes
            and not entry.evicted
        ]

    def neighbours(self, begin: int, end: int) -> tuple[MappingEntry | None, MappingEntry | None]:
        """The last entry that ends at or below ``begin`` and the first that starts at or
        above ``end`` (for messages about a range that is absent)."""
        below = above = None
        for entry in self.entries():
            if entry.host_end <= begin:
                below = entry
            elif entry.host_begin >= end and above is None:
                above = entry
        return below, above

    def structure_problems(self) -> list[str]:
        """What is wrong with the container itself (the consistency checker's view):
        bounds that disagree with their entries, ranges out of order or overlapping."""
        problems = []
        with self._lock:
            ranges = self._ranges
            bounds = ranges.bounds
            previous = None
            for slot, entry in enumerate(ranges.values):
                begin, end = int(bounds[0, slot]), int(bounds[1, slot])
                if (begin, end) != (entry.host_begin, entry.host_end) or begin >= end:
                    problems.append(f"slot {slot} holds [{begin:#x},{end:#x}) but its entry is "
                                    f"{entry.describe()}")
                if previous is not None and begin < previous.host_end:
                    problems.append(f"{entry.describe()} overlaps {previous.describe()}")
                previous = entry
        return problems

    # -- mutations (table lock held) ---------------------------------------------------
    def insert(self, entry: MappingEntry) -> None:
        with self._lock:
            self._ranges.insert(entry.host_begin, entry.host_end, entry)

    def remove(self, entry: MappingEntry) -> None:
        with self._lock:
            self._ranges.remove(entry.host_begin, entry)

    def clear(self) -> None:
        with self._lock:
            self._ranges.clear()
