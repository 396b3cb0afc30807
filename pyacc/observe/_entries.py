"""Mappings by device address, followed from the event stream (the ``stale`` checker and
``PYACC_AUTOCOMPARE`` find the host data behind a kernel's or a copy's device array).

Owns: ``EntryIndex`` — per device, the mappings seen created (ENTER_DATA from (0, 0)),
keyed by device address, each with a record the subscriber attaches. Under
oversubscription a mapping's device block moves: ``evicted`` (EVICT) sets its record
aside, ``restored`` (RESTORE) files it again under its new device address. A mapping whose
counters reached (0, 0) is marked ended but kept until its device block is freed (FREE)
or a new mapping takes its device range: the copy-backs that end a lifetime are
published after its last EXIT_DATA. Callers hold their own lock.
"""

from __future__ import annotations

import bisect

import numpy as np

from pyacc.mapping import _probe
from pyacc.mapping.devices.cuda_layout import extent, interface_layout

__all__ = ["EntryIndex", "host_view", "device_extent", "array_layout"]


def array_layout(array):
    """``(data, shape, dtype, strides)`` of a numpy array (an ``emulated`` device array,
    or host data) or of a device array exporting ``__cuda_array_interface__`` (a CuPy
    array on ``cuda``); None for anything else."""
    if isinstance(array, np.ndarray):
        return array.__array_interface__["data"][0], array.shape, array.dtype, array.strides
    try:
        interface = getattr(array, "__cuda_array_interface__", None)
    except Exception:  # e.g. a CPU tensor refuses to export one
        return None
    return None if interface is None else interface_layout(interface)


def device_extent(array):
    """``(data, low, high)`` device addresses of a device array (None for anything
    else, and for an empty array)."""
    if isinstance(array, np.ndarray):
        return _probe.extent(array) if array.size else None
    layout = array_layout(array)
    if layout is None:
        return None
    data, shape, dtype, strides = layout
    if 0 in shape:
        return None
    return extent(data, shape, dtype.itemsize, strides)


def host_view(flat: np.ndarray, offset: int, like: np.ndarray) -> np.ndarray:
    """The bytes of ``flat`` (a flat uint8 buffer) that hold the elements of an array of
    ``like``'s shape and strides whose first element is at byte ``offset``, as a uint8
    array of shape ``like.shape + (itemsize,)`` (NaN-safe, dtype-free comparisons)."""
    if like.flags.c_contiguous:
        return flat[offset:offset + like.nbytes].reshape(like.shape + (like.itemsize,))
    return np.ndarray(like.shape + (like.itemsize,), np.uint8, buffer=flat, offset=offset,
                      strides=like.strides + (1,))


class EntryIndex:
    """Mappings of each device by device address, each with a record."""

    def __init__(self):
        self._books: dict = {}  # device identity -> [sorted begins, {begin: [entry, record, ended]}]
        self._evicted: dict = {}  # (device identity, id(entry)) -> (entry, record)

    def _device(self, identity):
        books = self._books.get(identity)
        if books is None:
            books = self._books[identity] = ([], {})
        return books

    def add(self, identity, entry, record) -> None:
        begins, items = self._device(identity)
        low, high = entry.device_address, entry.device_address + entry.nbytes
        slot = bisect.bisect_left(begins, low)
        # a new mapping replaces whatever ended mapping still covered its device range
        for begin in list(begins[max(slot - 1, 0):slot + 2]):
            other = items[begin][0]
            if begin < high and low < begin + other.nbytes:
                self.remove(identity, begin)
        bisect.insort(begins, low)
        items[low] = [entry, record, False]

    def remove(self, identity, begin) -> None:
        books = self._books.get(identity)
        if books is not None and begin in books[1]:
            begins, items = books
            del items[begin]
            del begins[bisect.bisect_left(begins, begin)]

    def ended(self, identity, entry) -> None:
        books = self._books.get(identity)
        if books is not None:
            item = books[1].get(entry.device_address)
            if item is not None and item[0] is entry:
                item[2] = True

    def freed(self, identity, address) -> None:
        """A device block was freed: its mappings go."""
        books = self._books.get(identity)
        if books is not None and address in books[1]:
            self.remove(identity, address)

    def reset(self, identity) -> None:
        self._books.pop(identity, None)
        self._evicted = {key: item for key, item in self._evicted.items() if key[0] != identity}

    def evicted(self, identity, entry, address) -> None:
        """EVICT: ``entry``'s block at ``address`` is going; its record is set aside."""
        books = self._books.get(identity)
        if books is not None:
            item = books[1].get(address)
            if item is not None and item[0] is entry:
                self.remove(identity, address)
                self._evicted[(identity, id(entry))] = (entry, item[1])

    def restored(self, identity, entry) -> None:
        """RESTORE: ``entry`` lives at its new device address with the record it had."""
        item = self._evicted.pop((identity, id(entry)), None)
        if item is not None and item[0] is entry:
            self.add(identity, entry, item[1])

    def find(self, identity, array):
        """``(entry, record, byte offset of array's first element in the mapping)`` of
        the mapping holding device array ``array``, or None."""
        books = self._books.get(identity)
        if books is None:
            return None
        found = device_extent(array)
        if found is None:
            return None
        data, low, high = found
        begins, items = books
        slot = bisect.bisect_right(begins, low) - 1
        if slot < 0:
            return None
        begin = begins[slot]
        entry, record, _ = items[begin]
        if high > begin + entry.nbytes:
            return None
        return entry, record, data - begin

    def records(self, identity=None):
        for key, (_, items) in self._books.items():
            if identity is None or key == identity:
                yield from ((item[0], item[1]) for item in items.values())
