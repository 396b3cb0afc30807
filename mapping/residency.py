"""Oversubscription: device copies evicted under memory pressure and restored before use.

Owns: ``Residency`` — one per ``DeviceRuntime`` whose oversubscription was switched on
(API.md §10) — and the residency fields of ``MappingEntry`` (``evicted``, ``saved``,
``dirty``, ``last_use``, ``wont_use``, ``uses``, ``handed``), which no other module
writes. The model is StarPU's data management (``starpu_data.h``, peers.md "Eviction and
write-back"): a mapping's device copy is a *replicate* of data whose home is a host buffer
the runtime owns (``saved`` — never the user's host array, which keeps its OpenACC
meaning: only copy-backs and ``update self`` write it); a replicate in use by a task is
kept by a reference count (here: ``uses``, ``handed``, the threads' synchronous uses);
when an allocation fails, unused replicates are evicted, ``wont_use`` ones first
(``starpu_data_wont_use``), then the least recently used, written back first only when
dirty; the next device access restores the data (``starpu_data_prefetch_on_node`` is
``prefetch``).

Rules:
- **Evictable** (``_evictable``): an entry that owns its block (not ``map_data``), is
  resident, not kept by the operation that needs the room, not in use by queued work
  (every queue in ``uses`` — the asynchronous queues it was noted on — is idle: the
  kernel a caller queues right after ``note_use`` is covered, so a queue's work and an
  eviction never race), not in use
  by another thread's synchronous work (``note_use`` on the synchronous queue holds the
  entries for that thread until its next ``note_use`` or ``end_use``; the thread's own
  earlier synchronous work has completed when it allocates), and with no device array
  handed to the program still alive (``acc.deviceptr``, ``acc.copyin``, ``host_data``: a
  device array the program holds stays valid, as a CUDA managed pointer does).
- **Evict** (``_evict``): copy the device bytes into ``saved`` (synchronously; skipped
  when the entry is clean: ``saved`` already equals the device copy), publish EVICT, free
  the block, change the table's version (no memo keeps a device array of the old block).
  A failing copy leaves the entry resident and raises (the caller's operation fails with
  nothing changed: API.md §4).
- **Restore** (``restore_all``): allocate a block (evicting others, never the ones the
  operation keeps), copy ``saved`` into it on the *using* queue (in order before the
  work that needs it; on ``cuda`` an asynchronous queue copies through pinned staging),
  publish RESTORE, change the version. A failing copy on the synchronous queue frees the
  block and leaves the entry evicted.
- When nothing is evictable but queued work holds data, the host waits for those queues
  to pass their uses (``_wait_for_queued_uses``) and tries again.
- ``OutOfMemoryError`` only when evicting every evictable entry does not make room: the
  data one operation needs at once exceeds the memory (or is held by other threads'
  running work or by device arrays the program keeps).
- Residency is not part of what all-or-nothing restores: an operation that fails may
  leave other data evicted or restored — counters, presence and every buffer's contents
  are as before.

Threading: every method runs with the table lock held (the runtime verbs hold it); the
queues' own locks answer ``is_idle``, and waiting for a queue never needs the table lock
(queue work never takes it).
"""

from __future__ import annotations

import threading
import weakref

import numpy as np

from .devices.base import emit
from .errors import OutOfMemoryError
from .events import EventKind
from .queues import Queue

__all__ = ["Residency"]

_get_ident = threading.get_ident


class Residency:
    """Eviction and restore for one device and its present table (module docstring)."""

    def __init__(self, device, table):
        self.device = device
        self.table = table
        #: the LRU clock: stamped on an entry at each device access
        self.clock = 0
        #: thread ident -> entries its current synchronous work uses
        self._sync: dict[int, tuple] = {}

    # -- uses ---------------------------------------------------------------------------
    def note_use(self, entries, queue: Queue, written=None) -> bool:
        """Stamp ``entries`` as used now (LRU) and in use by ``queue`` until it is idle
        (the work queued after this call, the kernel, included; the synchronous queue: by
        this thread's work until its next ``note_use`` or ``end_use``); restore evicted
        ones first. ``written``: one bool per entry, whether the use may write the device
        copy (None: all may).

        Returns:
            True when something was restored (device arrays made earlier are stale).

        Raises:
            OutOfMemoryError: the entries do not fit together; nothing was stamped.
            ExecutionError: a restore's copy failed (injected fault, device error).
        """
        restored = self.restore_all([entry for entry in entries if entry.evicted], queue, entries)
        stamp = self.clock
        self.clock += len(entries)
        for index, entry in enumerate(entries):  # in list order: the first is the oldest
            entry.last_use = stamp + index + 1
            entry.wont_use = False
            if written is None or written[index]:
                entry.dirty = True
        if queue.async_value is None:
            self._sync[_get_ident()] = tuple(entries)
        else:  # held until ``queue`` is idle: the kernel queued after this note included
            for entry in entries:
                uses = entry.uses
                if uses is None:
                    entry.uses = [queue]
                elif not any(used is queue for used in uses):
                    uses.append(queue)
        return restored

    def end_use(self) -> None:
        """This thread's synchronous work is over: its entries may be evicted by others."""
        self._sync.pop(_get_ident(), None)

    def hand_out(self, entry, array, queue: Queue, *, written: bool = True):
        """A device array of ``array`` (inside ``entry``) for the program: restored,
        stamped, a fresh view that keeps the entry resident while the program holds it."""
        self.note_use((entry,), queue, (written,))
        device_array = self.device.view(entry.device_address_of(array.__array_interface__["data"][0]), array)
        try:
            reference = weakref.ref(device_array)
        except TypeError:  # an array type without weak references: not tracked
            return device_array
        handed = entry.handed
        entry.handed = [reference] if handed is None else [r for r in handed if r() is not None] + [reference]
        return device_array

    # -- allocation ---------------------------------------------------------------------
    def allocate(self, nbytes: int, keep=()) -> int:
        """A device block of ``nbytes``, evicting unused entries (not those in ``keep``)
        while the device is full.

        Raises:
            OutOfMemoryError: nothing more can be evicted (or the failure was injected).
        """
        while True:
            try:
                return self.device.allocate(nbytes)
            except OutOfMemoryError as error:
                if getattr(error, "injected", False):
                    raise
                victim = self._victim(keep)
                if victim is not None:
                    self._evict(victim)
                elif not self._wait_for_queued_uses(keep):
                    raise self._no_room(error, nbytes, keep) from None

    def allocator(self, keep=()) -> "_Allocator":
        """An object with the device's ``allocate``/``free`` that evicts to make room
        (for ``commit.allocate`` and ``raw_memory.malloc``)."""
        return _Allocator(self, keep)

    def _victim(self, keep):
        kept = {id(entry) for entry in keep}
        best = None
        for entry in self.table.entries():
            if id(entry) in kept or not self._evictable(entry):
                continue
            if best is None or (not entry.wont_use, entry.last_use) < (not best.wont_use, best.last_use):
                best = entry
        return best

    def _wait_for_queued_uses(self, keep) -> bool:
        """Nothing is evictable now, but queued work holds some data: the host waits until
        those queues have passed their uses (as CUDA managed memory waits for the kernels
        using a page) without taking their errors, which their own ``wait`` still
        reports. False when no queued use holds anything."""
        kept = {id(entry) for entry in keep}
        entries = self.table.entries()
        queues = {}
        for entry in entries:
            if id(entry) not in kept and not entry.evicted and entry.uses:
                for queue in entry.uses:
                    if not queue.is_idle():
                        queues[id(queue)] = queue
        for queue in queues.values():
            queue.record_event().wait()  # recorded after every use noted (table lock held)
            poll = getattr(queue, "poll", None)  # cuda: run the callbacks the stream passed
            if poll is not None:
                poll()
        for entry in entries:  # those queues have passed every use noted so far
            if entry.uses:
                entry.uses = [queue for queue in entry.uses if id(queue) not in queues] or None
        return bool(queues)

    def _evictable(self, entry) -> bool:
        if entry.evicted or not entry.owns_memory or not entry.nbytes:  # (ended entries whose
            # copy-back has run may go: they are in the table until their exit removes them)
            return False
        if entry.uses:
            if not all(queue.is_idle() for queue in entry.uses):
                return False
            entry.uses = None
        if entry.handed and any(reference() is not None for reference in entry.handed):
            return False
        me = _get_ident()
        return not any(thread != me and any(used is entry for used in entries)
                       for thread, entries in self._sync.items())

    def _no_room(self, error, nbytes: int, keep) -> OutOfMemoryError:
        held = [entry for entry in self.table.entries()
                if not entry.evicted and entry.owns_memory and not self._evictable(entry)]
        kept = sum(entry.nbytes for entry in keep if not entry.evicted)
        busy = sum(entry.nbytes for entry in held) - kept
        return OutOfMemoryError(
            f"{error.message}; oversubscription found nothing more to evict: {kept} bytes are "
            f"needed by this operation at once and {max(busy, 0)} bytes are in use by queued "
            "work, other threads or device arrays the program still holds (acc.deviceptr, "
            "acc.copyin results). One operation's data must fit in device memory",
            nbytes=nbytes)

    # -- eviction and restore -----------------------------------------------------------
    def _evict(self, entry) -> None:
        """Save ``entry``'s device bytes (when dirty) and free its block (module doc)."""
        device = self.device
        nbytes = entry.nbytes
        moved = 0
        if entry.dirty or entry.saved is None:
            if entry.saved is None or entry.saved.nbytes != nbytes:
                entry.saved = device.host_buffer(nbytes)
            source = device.view(entry.device_address, entry.saved)
            device.save(entry.saved, source)  # raises: the entry stays resident
            moved = nbytes
        address = entry.device_address
        entry.evicted = True
        entry.dirty = False
        entry.device_array = None
        entry.handed = None
        entry.uses = None
        self.table.touch()
        emit(EventKind.EVICT, device.identity, moved, device_begin=address, host_begin=entry.host_begin,
             name=entry.name, info=entry)
        device.free(address)

    def restore_all(self, entries, queue: Queue, keep) -> bool:
        """Restore each evicted entry of ``entries`` (module doc); True if any was."""
        for entry in entries:
            self._restore(entry, queue, keep)
        return bool(entries)

    def _restore(self, entry, queue: Queue, keep) -> None:
        device = self.device
        address = self.allocate(entry.nbytes, keep)
        try:
            device.restore(device.view(address, entry.saved), entry.saved, queue,
                           ("restore", entry.name, entry.nbytes))
        except BaseException:
            device.free(address)
            raise
        entry.device_address = address
        entry.device_array = None
        entry.evicted = False
        entry.dirty = False
        self.table.touch()
        emit(EventKind.RESTORE, device.identity, entry.nbytes, device_begin=address,
             host_begin=entry.host_begin, queue=queue.async_value, name=entry.name, info=entry)

    def evict_all(self) -> None:
        """Evict every evictable entry (tests and ``acc.set_oversubscribe`` checks)."""
        for entry in self.table.entries():
            if self._evictable(entry):
                self._evict(entry)

    def restore_everything(self, queue: Queue) -> None:
        """Restore every evicted entry (oversubscription switched off)."""
        evicted = [entry for entry in self.table.entries() if entry.evicted]
        self.restore_all(evicted, queue, evicted)

    def forget(self) -> None:
        """``acc.shutdown``: every mapping ended."""
        self._sync.clear()


class _Allocator:
    """``allocate``/``free`` of a device, evicting to make room (``Residency.allocator``)."""

    __slots__ = ("residency", "keep")

    def __init__(self, residency: Residency, keep):
        self.residency = residency
        self.keep = keep

    def allocate(self, nbytes: int) -> int:
        return self.residency.allocate(nbytes, self.keep)

    def free(self, address: int) -> None:
        self.residency.device.free(address)

    def pin(self, address: int, host_begin: int, host_end: int, array) -> None:
        self.residency.device.pin(address, host_begin, host_end, array)

    def view(self, address: int, like: np.ndarray):
        return self.residency.device.view(address, like)

