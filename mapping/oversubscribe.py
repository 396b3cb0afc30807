"""The runtime verbs of API.md §10 on a device with memory of its own: oversubscription
on or off, the use notes that keep eviction safe, ``prefetch`` and ``wont_use``.

Owns: ``OversubscriptionVerbs``, a mixin of ``runtime.DeviceRuntime`` (it uses its
``device``, ``table``, ``namer``, ``_commit_entry``, ``_increment_all``, ``_undo_entry``) that joins the
runtime to its ``residency.Residency`` (where eviction and restore live). ``runtime``
calls in here at each device access it makes (``enter``, ``enter_one``, ``update``,
``deviceptr``, copy-backs) only while ``tracks_use`` is True.

The contract with the compute path (``pyacc._compute``):
- ``tracks_use`` is a plain attribute, True only while oversubscription is on;
- while it is on, ``containing_all`` answers None, so compute calls enter their data
  through ``enter`` (which restores evicted entries and notes the use, all-or-nothing),
  never through the join or replay fast paths; each eviction and restore also changes
  the table's version (``PresentTable.touch``), so a replayed plan never reuses a device
  array of a block that moved;
- ``note_use(entries, queue, written=None)`` may be called after entering a region's data
  and before launching its kernel (a second note of the same use is harmless). A use on
  an asynchronous queue keeps the entries resident until that queue is idle — the kernel
  queued right after the note included (an allocation that needs the room waits for
  the queue); a use
  on the synchronous queue keeps them resident for the calling thread's work until its
  next ``note_use`` or ``end_use`` (another thread's allocation cannot evict data a
  running synchronous kernel uses; the thread's own later allocation may, its kernel
  having returned).
"""

from __future__ import annotations

from .commit import allocate
from .entry import MappingEntry
from .errors import OutOfMemoryError
from .events import BUS
from .plan import EntryAction, not_present, partly_present, plan_entry
from .queues import Queue
from .ranges import check_array
from .requests import MapKind, Mapped
from .residency import Residency

__all__ = ["OversubscriptionVerbs"]

_HOLD = BUS.holding()
_COPYIN = MapKind.COPYIN
_CREATE = EntryAction.CREATE


class OversubscriptionVerbs:
    """``set_oversubscribe``, ``note_use``, ``end_use``, ``prefetch``, ``wont_use`` and the
    tracked forms of ``enter`` / ``enter_one`` (module docstring)."""

    #: True while oversubscription is on (read on the compute path's hot path)
    tracks_use = False
    #: the ``Residency`` of this runtime (created when oversubscription is first on)
    residency: Residency | None = None

    # -- switching ----------------------------------------------------------------------
    def set_oversubscribe(self, enabled: bool) -> None:
        """Oversubscription on or off for this device. Off restores every evicted mapping
        first (synchronously).

        Raises:
            OutOfMemoryError: switching off, the evicted data does not fit back; it stays on.
        """
        with self.table.locked(), _HOLD:
            if enabled:
                if self.residency is None:
                    self.residency = Residency(self.device, self.table)
                self.tracks_use = True
            elif self.residency is not None:
                self.residency.restore_everything(self.device.sync_queue)
                self.residency.end_use()
                self.tracks_use = False
            self.lane.tracks_use = self.tracks_use  # the lane's copy (``_cprobe.DataLane``)
            self.table.touch()  # memos made under the other mode are not reused

    @property
    def oversubscribes(self) -> bool:
        return self.tracks_use

    # -- uses ----------------------------------------------------------------------------
    def note_use(self, entries, queue: Queue | None = None, written=None) -> bool:
        """Entries a kernel (or another device access) is about to use on ``queue``
        (None: synchronous): restored if evicted, stamped for LRU, kept resident while in
        use (module docstring). ``written``: per entry, whether the use may write its
        device copy (None: all may). Returns True when something was restored (device
        arrays made before this call must be made again). No-op while off.

        Raises:
            OutOfMemoryError: the entries do not fit in device memory together; nothing
                was stamped (counters are never touched here).
        """
        if self.residency is None:
            return False
        with self.table.locked(), _HOLD:
            return self.residency.note_use(entries, queue or self.device.sync_queue, written)

    def end_use(self) -> None:
        """The calling thread's synchronous work on its noted entries is over."""
        if self.residency is not None:
            with self.table.locked():
                self.residency.end_use()

    # -- hints (StarPU's starpu_data_prefetch_on_node, starpu_data_wont_use) ---------------
    def prefetch(self, array, queue: Queue | None = None, *, if_present: bool = False, name=None) -> None:
        """Start bringing present data's device copy back into device memory on ``queue``
        (after an eviction); stamps it as used. A hint: when it does not fit, nothing
        happens. No counter changes.

        Raises:
            NotPresentError: absent data, unless ``if_present``.
            PartlyPresentError: data only partly present.
        """
        entry = self._entry_for_hint(array, "acc.prefetch", if_present, name)
        if entry is None or self.residency is None:
            return
        with self.table.locked(), _HOLD:
            if entry.evicted or self.tracks_use:
                try:
                    self.residency.note_use((entry,), queue or self.device.sync_queue, (False,))
                except OutOfMemoryError:  # a hint: no room now is not an error
                    pass

    def wont_use(self, array, name=None) -> None:
        """Hint that present data's device copy will not be used soon: it is the first
        evicted under memory pressure (until its next use). Absent data: nothing.

        Raises:
            PartlyPresentError: data only partly present.
        """
        entry = self._entry_for_hint(array, "acc.wont_use", True, name)
        if entry is not None:
            with self.table.locked():
                entry.wont_use = True

    def _entry_for_hint(self, array, routine: str, if_present: bool, name) -> MappingEntry | None:
        check_array(array, name=name, contiguous=False)
        if array.size == 0:
            return None
        with self.table.locked():
            found = self.table.lookup(array)
            if found.relation.is_partial:
                raise partly_present(array, name or self.namer(array), found)
            if found.entry is None:
                if if_present:
                    return None
                raise not_present(array, name or self.namer(array), found, routine, self.table)
            return found.entry

    # -- the tracked forms of the entry verbs (table lock held) --------------------------
    def _allocator(self, keep=()):
        """What ``commit.allocate`` and ``raw_memory.malloc`` allocate from: the device,
        or while oversubscribing, the residency's evicting allocator."""
        return self.residency.allocator(keep) if self.tracks_use else self.device

    def _enter_tracked(self, requests, counter, queue: Queue, at_once: bool = True) -> list[Mapped]:
        """``enter`` while oversubscribing: plan (validating every request), then enter
        them together; when they do not fit together and ``at_once`` is False (a data
        directive, not a kernel), each request alone (``_enter_one_by_one``)."""
        probe = self.table.probe
        entries = [probe(request.array) for request in requests]
        if not any(entry is None or entry.__class__ is not MappingEntry for entry in entries):
            # all present (resident or not): restore and note, then increments only
            self.residency.note_use(entries, queue, [request.kind is not _COPYIN for request in requests])
            self._increment_all(entries, counter, queue, [request.name for request in requests])
            return [Mapped(request, entry) for request, entry in zip(requests, entries)]
        steps = plan_entry(requests, self.table, self.namer)
        try:
            return self._enter_steps(steps, counter, queue)
        except OutOfMemoryError as error:
            if at_once or len(requests) == 1 or getattr(error, "injected", False):
                raise
        return self._enter_one_by_one(requests, counter, queue)

    def _enter_steps(self, steps, counter, queue: Queue) -> list[Mapped]:
        """Allocate (evicting others), restore the evicted entries the steps join, commit,
        note the use. All or nothing: a failure before the commit frees the new blocks."""
        joined = [step.entry for step in steps if step.entry is not None]
        allocate(self.residency.allocator(joined), steps, self.namer)
        try:
            self.residency.restore_all([entry for entry in joined if entry.evicted], queue, joined)
        except BaseException:
            for step in steps:
                if step.device_address is not None:
                    self.device.free(step.device_address)
                    step.device_address = None
            raise
        mapped = self._commit_entry(steps, counter, queue)
        used = [item for item in mapped if item.entry is not None]
        self.residency.note_use([item.entry for item in used], queue,
                                [item.request.kind is not _COPYIN for item in used])
        return mapped

    def _enter_one_by_one(self, requests, counter, queue: Queue) -> list[Mapped]:
        """A data directive whose data does not fit at once: each request enters alone,
        its data evicting the earlier requests' if need be (as StarPU registers data of
        any size). All or nothing over the directive: a failure puts back the counters
        of the entries it joined and removes the ones it created."""
        mapped, saved, created = [], {}, []
        try:
            for request in requests:
                steps = plan_entry([request], self.table, self.namer)
                for step in steps:
                    entry = step.entry
                    if entry is not None and id(entry) not in saved and not any(entry is c for c in created):
                        saved[id(entry)] = (entry, entry.counters)
                outcome = self._enter_steps(steps, counter, queue)
                created += [item.entry for item, step in zip(outcome, steps) if step.action is _CREATE]
                mapped += outcome
        except BaseException:
            self._undo_entry(saved, created)
            for entry in created:
                if not entry.evicted:
                    self.device.release(entry.device_address, queue)
            raise
        return mapped

    def _enter_one_tracked(self, entry: MappingEntry, array, counter, queue: Queue | None):
        """``enter_one``'s present path while oversubscribing: restore and hand out a
        device array (it keeps the entry resident while the program holds it), then the
        increment."""
        device_array = self.residency.hand_out(entry, array, queue or self.device.sync_queue)
        self._increment_all((entry,), counter, queue, None)
        return device_array

    def _hand_out(self, mapped: Mapped, queue: Queue | None):
        """The device array of a new mapping, handed to the program (tracked)."""
        if mapped.entry is None:
            return self.device_array(mapped)
        return self.residency.hand_out(mapped.entry, mapped.request.array, queue or self.device.sync_queue)

    def _deviceptr_tracked(self, entry: MappingEntry, array):
        with self.table.locked(), _HOLD:
            if entry.is_present:
                return self.residency.hand_out(entry, array, self.device.sync_queue)
        return None
