"""The runtime verbs of one device with separate memory: plan, then commit.

Owns: ``DeviceRuntime`` — a device, its present table, and the verbs the directives and
data routines are made of: ``enter`` / ``exit_structured`` (data and compute regions),
``enter`` / ``enter_one`` / ``exit_dynamic`` (enter/exit data and the routines),
``update``, ``map_data``, ``unmap_data``, ``declare``, queries, raw memory, ``shutdown``.
It implements ``protocol.MappingRuntime``; ``shared.SharedMemoryRuntime`` implements the
same protocol, side by side, for devices that share host memory.

Every verb that can fail is all-or-nothing (API.md §4):
1. *plan* (``plan``) — validate every array and look each one up, with no side effects; a
   later request of the same directive sees the mappings planned by earlier ones;
2. *allocate* — device memory for new mappings; out of memory frees what was allocated;
3. *commit* — insert entries, change counters (only through ``MappingEntry``'s named
   transitions), transfer; an exception here restores the saved counters, removes new
   entries and frees their memory before re-raising.
Exits transfer before they remove anything: a failing copy-out leaves the table intact.
Fast paths (``enter_one``, ``join_structured``/``rejoin_structured``/``leave_structured``,
``leave_present``) ask ``would_end`` before they change anything, and fall back to the
full verb when a lifetime would end.

Threading, lock and event order:
- the table lock is held across each verb (plan and commit see one table); counters
  change at once on the calling thread even when the transfers are queued (OpenACC 3.3
  §2.6.7), and frees of ended lifetimes are deferred on the queue until it has passed
  their copy-outs (libgomp ``gomp_remove_var_async``);
- ENTER_DATA is published after an increment and before the copy-in it leads to (a
  copy that fails is rolled back as a change observers have seen); EXIT_DATA after each
  decrement, one per decrement; a rollback publishes the change back; subscribers'
  exceptions wait for the end of the verb (``BUS.holding``).
"""

from __future__ import annotations

import logging

import numpy as np

from . import _probe, raw_memory
from .devices.base import Device, Queue
from .commit import allocate, device_view, end_lifetimes
from .entry import Counter, EntryKind, MappingEntry, exit_is_plain, increment_all, increment_referenced, leave_all
from .errors import ExecutionError
from .events import BUS, EventKind, publish_reset
from .lifetimes import Declaration, LifetimeVerbs
from .oversubscribe import OversubscriptionVerbs
from .plan import (EntryAction, EntryStep, check_update_targets, check_writeable, not_present,
                   partly_present, plan_create, plan_entry, plan_exit, plan_update)
from .protocol import MappingRecord, MappingRuntime
from .raw_memory import Layout, byte_view
from .requests import MapKind, MapRequest, Mapped, StructuredMemo, UpdateDirection, UpdateItem
from .ranges import check_array
from .table import PARTIAL, PresentTable

__all__ = ["DeviceRuntime", "MappingRecord", "Layout", "byte_view", "Declaration",
           "not_present", "partly_present"]

_LOG = logging.getLogger("pyacc")

# Hot-path constants: plain ints and module globals instead of Enum attribute access.
_ACTIVE = BUS.active
_ENTER_DATA = int(EventKind.ENTER_DATA)
_EXIT_DATA = int(EventKind.EXIT_DATA)
_DIRECTIVE_END = int(EventKind.DIRECTIVE_END)
_DYNAMIC = Counter.DYNAMIC
_STRUCTURED = Counter.STRUCTURED
_CREATE = EntryAction.CREATE
_SKIP = EntryAction.SKIP
_INCREMENT = EntryAction.INCREMENT
_CREATES = (MapKind.COPYIN, MapKind.CREATE)  # absent data: allocate (and copy in), nothing to check
_DEVICE = UpdateDirection.DEVICE
#: ``with _HOLD:`` — an event subscriber's exception waits for the end of the verb
_HOLD = BUS.holding()


class DeviceRuntime(OversubscriptionVerbs, LifetimeVerbs, MappingRuntime):
    """Verbs over one device that has memory of its own (``emulated``, ``cuda``)."""

    def __init__(self, device: Device):
        self.device = device
        self.table = PresentTable()
        #: finds a variable name for an array (set by pyacc to a caller-frame search);
        #: called only when a mapping is created or an error is raised
        self.namer = lambda array: None
        #: the data API's present-data verbs in one C call each (``_cprobe.DataLane``:
        #: ``enter``, ``leave``, ``present``, ``upload``/``download`` where the device admits
        #: them; each answers None, changing nothing, for all but the plain case: the verbs below)
        self.lane = _probe.DataLane(self.table, self.table.version_holder, self, MappingEntry,
                                       EntryKind.NORMAL, _ACTIVE, (_ENTER_DATA, _EXIT_DATA, _DIRECTIVE_END))
        device.admit_lane_copies(self.lane)
        #: ``is_present(array)``: bound straight to the lane's lock-free check (one call
        #: frame less on the hottest query)
        self.is_present = self.lane.present
        #: the ``acc.declare`` mappings of this device
        self.declared: list[Declaration] = []
        #: oversubscribing (API.md §10): a plain attribute, read on the compute hot path
        self.tracks_use = False
        #: ``id(struct) -> [struct, count]``: the attachment counters of pyacc's
        #: ``acc.attach`` (OpenACC 3.3 §2.7.2), opaque here; they end with the device's
        #: data lifetimes (``shutdown``)
        self.attachments: dict = {}

    def _name(self, request: MapRequest) -> str | None:
        return request.name or self.namer(request.array)

    # == entry ===========================================================================
    def enter(self, requests: list[MapRequest], counter: Counter, queue: Queue, *,
              at_once: bool = True) -> list[Mapped]:
        """Entry actions of a data region, compute region or enter-data directive.
        ``at_once`` False (data directives, not kernels): while oversubscribing, the
        requests' data may exceed device memory together (``oversubscribe``).

        Raises:
            NotPresentError: a ``present`` request is absent.
            PartlyPresentError: a request overlaps a mapping without lying inside it.
            OutOfMemoryError: device memory ran out; nothing was mapped.
        """
        with self.table.locked(), _HOLD:
            if self.tracks_use:  # oversubscribing: restores, notes the use (``oversubscribe``)
                return self._enter_tracked(requests, counter, queue, at_once)
            entries = self.containing_all([request.array for request in requests])
            if entries is not None:  # every array present: increments only
                self._increment_all(entries, counter, queue, [request.name for request in requests])
                return [Mapped(request, entry) for request, entry in zip(requests, entries)]
            steps = plan_entry(requests, self.table, self.namer)
            allocate(self._allocator(), steps, self.namer)
            return self._commit_entry(steps, counter, queue)

    def enter_one(self, kind: MapKind, array, counter: Counter, queue: Queue | None = None):
        """``acc.copyin`` / ``acc.create`` of one contiguous array: ``enter`` with one
        table probe — present data gets its increment, absent data is planned from the
        probe's answer (no second lookup) — and one device view. Returns the device array.
        ``queue`` None: the synchronous queue."""
        table = self.table
        with table.locked():
            entry = table.probe(array)
            if entry.__class__ is MappingEntry:  # present: the hot path
                if self.tracks_use:
                    return self._enter_one_tracked(entry, array, counter, queue)
                view = self.device_array_of(entry, array)  # first: all or nothing
                if _ACTIVE[_ENTER_DATA]:
                    self._increment_all((entry,), counter, queue, None)
                else:
                    entry.increment(counter)
                return view
            with _HOLD:
                request = MapRequest(kind, array)
                queue = self.device.sync_queue if queue is None else queue
                check_array(array)  # the fast callers validated only the common case
                if entry is None and kind in _CREATES:  # overlaps no mapping
                    steps = [plan_create(request, *_probe.extent(array))]
                else:
                    steps = plan_entry([request], table, self.namer)
                allocate(self._allocator(), steps, self.namer)
                (mapped,) = self._commit_entry(steps, counter, queue)
                if self.tracks_use:
                    return self._hand_out(mapped, queue)
        return self.device_array(mapped)

    # -- compute regions: the fast paths (no data moves, nothing can fail) ----------------
    def join_structured(self, arrays, memos: list | None = None, counter: Counter = _STRUCTURED):
        """The hot path of a compute call inside a data region: when every array is
        present, their increments of ``counter`` (structured; dynamic for OpenMP maps)
        and their entries; else None, changing nothing. Pair with ``leave_structured``.

        ``memos``, when given (an empty list, opaque to the caller), receives one
        ``StructuredMemo`` for ``rejoin_structured``: the table's version, the counter
        and the entries, weakly (it keeps nothing alive).
        """
        table = self.table
        with table.locked():
            entries = self.containing_all(arrays)
            if entries is None:
                return None
            if memos is not None:
                memos.append(StructuredMemo.of(entries, table.version, counter))
            self._increment_all(entries, counter, None, None)
            return entries

    def rejoin_structured(self, memo: StructuredMemo) -> list[MappingEntry] | None:
        """``join_structured`` again, for the same array objects as the call that made
        ``memo`` (the caller has checked that they are the same objects, with the same
        shape): while the table is unchanged since, the entries are still in it, so they
        get their increments (of ``memo.counter``) without a lookup. Else None,
        changing nothing."""
        table = self.table
        with table.locked():
            if memo.version != table.version or self.tracks_use:
                return None  # (oversubscribing: every use goes through ``enter``)
            if not _ACTIVE[_ENTER_DATA]:
                return increment_referenced(memo, memo.counter)
            entries = [reference() for reference in memo]
            self._increment_all(entries, memo.counter, None, None)
            return entries

    def hold_structured(self, memo: StructuredMemo) -> bool:
        """The held form of ``rejoin_structured``, for a synchronous call nobody observes:
        while the table is unchanged since ``memo``, take the table lock and keep it
        (True) until ``release_hold``; else False, holding nothing. While held, no other
        thread changes the table or reads a count (``refcounts`` and ``records`` take the
        lock), so the call is atomic with respect to every other data action of the
        device: it stands for the structured increments and decrements it skips
        (libgomp's and LLVM's mapping tables are likewise changed under one lock)."""
        lock = self.table.locked()
        lock.acquire()
        if memo.version == self.table.version and not self.tracks_use:
            return True
        lock.release()
        return False

    def release_hold(self) -> None:
        """End a ``hold_structured`` that answered True."""
        self.table.locked().release()

    def leave_structured(self, entries: list[MappingEntry], counter: Counter = _STRUCTURED) -> bool:
        """Undo ``join_structured`` (its ``counter``) when no lifetime ends by it (the
        common case) and return True; else change nothing and return False (the caller
        then runs the full ``exit_structured``, which copies back and frees; for the
        dynamic count also when another thread set it to 0 meanwhile)."""
        with self.table.locked():
            if not _ACTIVE[_EXIT_DATA]:
                return leave_all(entries, counter)  # asks exit_is_plain first
            if not exit_is_plain(entries, counter):
                return False
            # published one decrement at a time, each from the counters it found: an
            # entry listed twice (one array passed for two parameters, or two views of
            # one mapping) has two decrements, (2, 0) → (1, 0) → (0, 0) for the
            # PYACC_CHECK ledger, not twice the final (1, 0) → (0, 0)
            with _HOLD:
                for entry in entries:
                    before = entry.counters
                    entry.decrement(counter)
                    self._publish(EventKind.EXIT_DATA, entry, before, None, None)
            return True

    def containing_all(self, arrays) -> list[MappingEntry] | None:
        """The entries holding each array, or None when one is not inside a mapping
        (table lock held: ``probe``, no sequence-lock checks). Always None while
        oversubscribing: the callers' fast paths then take ``enter``, which restores
        evicted entries and notes their use (``oversubscribe``)."""
        if self.tracks_use:
            return None
        probe = self.table.probe
        entries = [probe(array) for array in arrays]
        return None if None in entries or PARTIAL in entries else entries

    def _increment_all(self, entries, counter: Counter, queue, names) -> None:
        """Present increments (OpenACC 3.3 §2.7.2), published when someone listens."""
        if not _ACTIVE[_ENTER_DATA]:
            increment_all(entries, counter)
            return
        with _HOLD:  # a subscriber that raises waits until every increment is done
            for index, entry in enumerate(entries):
                before = entry.counters
                entry.increment(counter)
                self._publish(EventKind.ENTER_DATA, entry, before, queue, names[index] if names else None)

    # -- allocate and commit ------------------------------------------------------------
    def _commit_entry(self, steps, counter: Counter, queue: Queue, *, declare: bool = False) -> list[Mapped]:
        saved = {id(s.entry): (s.entry, s.entry.counters) for s in steps if s.entry is not None}
        created: list[MappingEntry] = []
        try:
            return [self._commit_step(step, counter, queue, created, declare) for step in steps]
        except BaseException:
            self._undo_entry(saved, created)
            for step in steps:
                if step.device_address is not None:  # after any copy already queued into it
                    self.device.release(step.device_address, queue)
            raise

    def _undo_entry(self, saved, created) -> None:
        """Roll back a failed entry: put back the counters ``saved`` (``{id: (entry,
        counters)}``) and take the entries it ``created`` out of the table (their memory
        is the caller's to release)."""
        for entry, counters in saved.values():
            self._restore(entry, counters)
        for entry in created:
            self._restore(entry, (0, 0))
            self.table.remove(entry)

    def _commit_step(self, step: EntryStep, counter, queue, created, declare=False) -> Mapped:
        request = step.request
        if step.action is _SKIP:
            return Mapped(request, None, step.host_data)
        if step.action is _CREATE:
            entry = MappingEntry(step.host_begin, step.host_end, request.array, step.device_address,
                                 name=self._name(request))
            self.table.insert(entry)
            created.append(entry)
            step.entry = entry
        else:
            entry = step.entry if step.action is _INCREMENT else step.creator.entry
        before = entry.counters
        if declare:
            entry.declare()
        else:
            entry.increment(counter)
        # published before the copy-in: a copy that fails is rolled back as a change
        # observers (the PYACC_CHECK ledger) have seen
        self._publish(EventKind.ENTER_DATA, entry, before, queue, request.name)
        if step.action is _CREATE and (request.kind.copies_in or request.zero):
            device_array = self.device_array_of(entry, request.array)  # (the entry's own view)
            if request.kind.copies_in:  # else ``zero``: set to 0 (OpenACC 3.3 §2.7.9)
                self.device.upload(device_array, request.array, queue, name=entry.name)
            else:
                self.device.zero(device_array, queue)
        return Mapped(request, entry, step.host_data)

    # == exits ==========================================================================
    def exit_structured(self, mapped: list[Mapped], queue: Queue, *, copy_back: bool = True,
                        counter: Counter = _STRUCTURED) -> None:
        """Exit actions of a data or compute region (OpenACC 3.3 §2.7.4–2.7.10).

        Each mapped item's structured count drops by one (``counter`` DYNAMIC: its dynamic
        count, for OpenMP maps, OpenMP 5.2 §5.8.3 — a count already at 0, or an entry
        another thread unmapped meanwhile, is left alone). An entry whose lifetime ends
        here is copied back through the views this region named in ``copy``/``copyout``
        clauses (unless ``copy_back`` is False: the region failed on the device), then
        removed and its memory freed once the queue has passed the copies.
        """
        with self.table.locked(), _HOLD:
            ended = []
            publish = _ACTIVE[_EXIT_DATA]
            for item in mapped:
                entry = item.entry
                if entry is None or not entry.is_present:
                    continue
                before = entry.counters if publish else None
                entry.decrement(counter)
                if publish:
                    self._publish(EventKind.EXIT_DATA, entry, before, queue, item.request.name)
                if not entry.is_present:
                    ended.append(entry)
            if ended:
                copies = [
                    item
                    for item in mapped
                    if copy_back and item.entry in ended and item.request.kind.copies_out
                ]
                end_lifetimes(self.device, self.table, ended, copies, queue, remove_on_failure=True,
                              residency=self.residency)

    def exit_dynamic(self, requests: list[MapRequest], queue: Queue, *, finalize: bool = False) -> None:
        """``exit data`` / ``acc.copyout`` / ``acc.delete`` (OpenACC 3.3 §2.6.6, §3.2.19):
        absent data is skipped (API.md §8). The dynamic count drops by one, or to 0 with
        ``finalize``; an entry whose counters both reach 0 is copied back through the
        named view when the request that ended it is a ``copyout``, then removed.

        Raises:
            PartlyPresentError: a request overlaps a mapping without lying inside it
                (checked for every request before anything changes).
        """
        with self.table.locked(), _HOLD:
            if len(requests) == 1 and self.leave_present(requests[0].array, finalize=finalize, queue=queue):
                return
            steps = plan_exit(requests, self.table, self.namer)
            ended, copies = [], []
            saved = [(item.entry, item.entry.counters) for item in steps]
            for item in steps:
                entry = item.entry
                if not entry.is_present:
                    continue  # ended by an earlier request of this directive
                before = entry.counters
                entry.decrement(_DYNAMIC, finalize=finalize)
                self._publish(EventKind.EXIT_DATA, entry, before, queue, item.request.name)
                if not entry.is_present:
                    ended.append(entry)
                    if item.request.kind.copies_out:
                        copies.append(item)
            try:
                end_lifetimes(self.device, self.table, ended, copies, queue, residency=self.residency)
            except BaseException:
                for entry, counters in saved:
                    self._restore(entry, counters)
                raise

    def leave_present(self, array, *, finalize: bool = False, queue=None) -> bool:
        """Fast path of ``exit_dynamic`` for one array whose data stays present: the
        dynamic decrement alone. Returns False (changing nothing) in every other case."""
        table = self.table
        with table.locked():
            entry = table.probe(array)  # the lock is held: no sequence-lock retry
            if entry.__class__ is not MappingEntry or entry.would_end(_DYNAMIC, finalize=finalize):
                return False
            if not _ACTIVE[_EXIT_DATA]:
                entry.decrement(_DYNAMIC, finalize=finalize)
                return True
            before = entry.counters
            entry.decrement(_DYNAMIC, finalize=finalize)
            self._publish(EventKind.EXIT_DATA, entry, before, queue, None)
            return True

    # == update ===========================================================================
    def update(self, items, queue: Queue, *, if_present: bool = False) -> None:
        """``update self/device`` of ``UpdateItem`` records (or any ``(direction, array,
        name)`` triples) in the order given (OpenACC 3.3 §2.14.4); any strided view of
        present data may be updated, only its elements move.

        Raises:
            NotPresentError: absent data without ``if_present``.
            PartlyPresentError: data only partly present (even with ``if_present``).
        """
        if len(items) == 1:
            direction, array, name = items[0]
            self.update_one(direction, array, queue, name=name, if_present=if_present)
            return
        self._update_planned(items, queue, if_present)

    def update_one(self, direction: UpdateDirection, array, queue: Queue, *, name=None,
                   if_present: bool = False) -> None:
        """``update`` of one array (``acc.update_device``/``acc.update_self``): one
        containment probe for data inside a mapping (no plan, no record), else the
        planned ``update``."""
        with self.table.locked(), _HOLD:
            entry = self.table.containing(array)
            if entry is None:  # absent, partly present or empty: the planned path decides
                self._update_planned((UpdateItem(direction, array, name),), queue, if_present)
                return
            if direction is not _DEVICE and not array.flags.writeable:
                check_writeable("update self", array, name or self.namer(array) or entry.name)
            if self.tracks_use:  # restored first if evicted (``oversubscribe``)
                self.residency.note_use((entry,), queue, (direction is _DEVICE,))
            device_array, name = self.device_array_of(entry, array), name or entry.name
            if direction is _DEVICE:
                self.device.upload(device_array, array, queue, name=name)
            else:
                self.device.download(array, device_array, queue, name=name)

    def _update_planned(self, items, queue: Queue, if_present: bool) -> None:
        with self.table.locked(), _HOLD:
            moves = plan_update(items, self.table, self.namer, if_present=if_present)
            check_update_targets(moves, self.namer)
            if self.tracks_use:
                self.residency.note_use([move.entry for move in moves], queue,
                                        [move.direction is _DEVICE for move in moves])
            views = [self.device_view(move.entry, move.array, move.host_data) for move in moves]
            # all or nothing for the host data (API.md §4): with several synchronous
            # moves, the host arrays written so far are put back if a later move fails
            saved = [] if len(moves) > 1 and queue.async_value is None else None
            try:
                for move, device_array in zip(moves, views):
                    name = move.name or move.entry.name
                    if move.direction is _DEVICE:
                        self.device.upload(device_array, move.array, queue, name=name)
                    else:
                        if saved is not None:
                            saved.append((move.array, move.array.copy()))
                        self.device.download(move.array, device_array, queue, name=name)
            except BaseException:
                for array, before in reversed(saved or ()):
                    np.copyto(array, before)
                raise

    # == queries ==========================================================================
    def is_present(self, array) -> bool:
        """Replaced per instance by the table's lock-free ``contains`` (``__init__``)."""
        return self.table.contains(array)

    def refcounts(self, array) -> tuple[int, int]:
        """The counts of the entry holding ``array``, read under the table lock (a held
        compute call, ``hold_structured``, stands for counts it does not write)."""
        table = self.table
        with table.locked():
            entry = table.containing(array)
            return entry.counters if entry is not None else (0, 0)

    def deviceptr(self, array):
        """The device array of present host data (a view at the matching offset), or None."""
        if array.size == 0:
            return array
        entry = self.table.containing(array)
        if entry is None:
            return None
        if self.tracks_use:  # restored, and kept resident while the program holds it
            return self._deviceptr_tracked(entry, array)
        return self.device_array_of(entry, array)

    def device_array(self, mapped: Mapped):
        """The device array for the outcome of an entry request: its device view, or,
        when nothing was mapped (zero-size, ``no_create`` of absent data: OpenACC 3.3
        §2.7.10, device code uses the local address), what the device hands a kernel
        for data it has no copy of (``Device.unmapped``)."""
        entry = mapped.entry
        if entry is None:
            return self.device.unmapped(mapped.request.array)
        array = mapped.request.array
        if array is entry.host_array or mapped.data is None:
            return self.device_array_of(entry, array)
        return self.device_view(entry, array, mapped.data)

    def device_array_of(self, entry: MappingEntry, array):
        """Device array of ``array`` inside ``entry`` (cached for the mapped array itself,
        re-made when its shape, strides or dtype were changed in place)."""
        if array is entry.host_array:
            device_array = entry.device_array
            if device_array is not None:
                same = _probe.same_layout(device_array, array)  # None: not both numpy arrays
                if same is None:
                    same = (device_array.shape == array.shape and device_array.strides == array.strides
                            and device_array.dtype == array.dtype)
                if same:
                    return device_array
            device_array = entry.device_array = self.device.view(entry.device_address, array)
            return device_array
        return self.device_view(entry, array, None)

    def device_view(self, entry: MappingEntry, array: np.ndarray, data: int | None):
        """Device array of ``array`` inside ``entry``, first element at host ``data``."""
        return device_view(self.device, entry, array, data)

    def hostptr(self, device_array):
        """The host array whose device copy is ``device_array``, or None: also for a NumPy
        array that is not this device's memory (no device address: OpenACC 3.3 §3.2.24
        returns NULL for an address in no mapping). Anything else is refused by
        ``extent_of`` (``InvalidArgumentError``)."""
        if isinstance(device_array, np.ndarray) and not self.device.owns(device_array):
            return None
        data, low, high = self.device.extent_of(device_array)
        if high == low:
            return None
        entry = self.table.entry_at_device_address(low, high)
        if entry is None:
            return None
        return np.ndarray(shape=device_array.shape, dtype=device_array.dtype, buffer=entry.host_bytes(),
                          offset=data - entry.device_address, strides=device_array.strides)

    def records(self) -> list[MappingRecord]:
        with self.table.locked():  # counts are read under the lock (``hold_structured``)
            return [
                MappingRecord(e.host_begin, e.host_end, e.nbytes, e.host_array.shape, e.host_array.dtype,
                              e.structured, e.dynamic, e.kind.value, e.name, e.device_address, e.evicted)
                for e in self.table.entries()
            ]

    # == raw memory (``raw_memory``) =========================================================
    def malloc(self, shape, dtype):
        return raw_memory.malloc(self._allocator(), self.table, shape, dtype)

    def free(self, device_array) -> None:
        raw_memory.free(self.device, self.table, device_array)

    def memcpy_to_device(self, device_array, array, queue: Queue) -> None:
        raw_memory.memcpy_to_device(self.device, device_array, array, queue)

    def memcpy_from_device(self, array, device_array, queue: Queue) -> None:
        raw_memory.memcpy_from_device(self.device, array, device_array, queue, self.namer(array))

    def memcpy_device(self, destination, source, queue: Queue) -> None:
        raw_memory.memcpy_device(self.device, destination, source, queue)

    # == lifetime =========================================================================
    def shutdown(self) -> None:
        """End every data lifetime and free all device memory (OpenACC 3.3 §3.2.8)."""
        with self.table.locked(), _HOLD:
            try:
                self.device.synchronize()
            except ExecutionError as error:  # the lifetimes it belonged to end here
                _LOG.debug("shutdown of %s %d dropped a queued error: %s",
                           self.device.type_name, self.device.number, error)
            failure = None
            try:  # declared ``copy`` data goes back to the host (OpenACC 3.3 §2.13)
                self.end_declarations()
            except ExecutionError as error:
                failure = error
            for entry in self.table.entries():
                self._restore(entry, (0, 0))  # open regions' exits then find nothing to do
                entry.device_array = None
            self.table.clear()
            self.declared = []
            self.attachments.clear()
            if self.residency is not None:
                self.residency.forget()
            self.device.reset()
            publish_reset(self.device.identity)
            if failure is not None:
                raise failure

    def after_fork_in_child(self) -> None:
        """The child of ``os.fork``: new table lock, and the device's queues forgotten
        (their worker threads are the parent's)."""
        self.table.after_fork_in_child()
        self.device.forget_queues()

    def _publish(self, kind, entry: MappingEntry, before, queue, name) -> None:
        """ENTER_DATA / EXIT_DATA: the entry (``info``) and its counters before → after."""
        if BUS.wants(kind):
            BUS.publish(kind, self.device.identity, queue=getattr(queue, "async_value", None),
                        nbytes=entry.nbytes, name=name or entry.name, host_begin=entry.host_begin,
                        device_begin=entry.device_address, counters=(before, entry.counters),
                        info=entry)

    def _restore(self, entry: MappingEntry, counters) -> None:
        """Roll an entry's counters back (a directive failed part-way), published as the
        change it is, so that observers of the counters stay in step."""
        before = entry.counters
        if before == tuple(counters):
            return
        entry.restore(counters)
        up = counters[0] + counters[1] > before[0] + before[1]
        self._publish(EventKind.ENTER_DATA if up else EventKind.EXIT_DATA, entry, before, None, None)
