"""The runtime verbs of one device with separate memory: plan, validate, then commit.

Owns: ``DeviceRuntime`` — a device, its present table, and the verbs the directives and
data routines are made of: ``enter`` / ``exit_structured`` (data and compute regions),
``enter`` / ``exit_dynamic`` (enter/exit data and the routines), ``update``, ``map_data``,
``unmap_data``, queries, raw memory, ``shutdown``. ``shared.SharedMemoryRuntime`` gives
the same verbs for devices that share host memory.

Every verb that can fail is all-or-nothing (API.md §4):
1. *plan* — validate every array and look each one up, with no side effects; a later
   request of the same directive sees the mappings planned by earlier ones;
2. *allocate* — device memory for new mappings; out of memory frees what was allocated;
3. *commit* — insert entries, change counters, transfer; an exception here restores
   the saved counters, removes new entries and frees their memory before re-raising.
Exits transfer before they remove anything: a failing copy-out leaves the table intact.

The table lock is held across each verb; counters change at once on the calling thread
even when the transfers are queued (OpenACC 3.3 §2.6.7), and frees of ended lifetimes are
deferred on the queue until it has passed their copy-outs (libgomp
``gomp_remove_var_async``).
"""

from __future__ import annotations

import enum
import logging
import weakref
from dataclasses import dataclass

import numpy as np

from . import _probe
from .device import Device, Queue
from .entry import Counter, EntryKind, MappingEntry
from .errors import (
    ExecutionError,
    InvalidArgumentError,
    NotPresentError,
    OutOfMemoryError,
    PartlyPresentError,
    PresentError,
    describe_array,
    format_range,
)
from .events import BUS, EventKind
from .ranges import HostRange, Relation, check_array
from .requests import MapKind, MapRequest, Mapped, UpdateDirection
from .table import Lookup, PresentTable

__all__ = ["DeviceRuntime", "MappingRecord", "byte_view"]


@dataclass(frozen=True, slots=True)
class MappingRecord:
    """One row of ``acc.present_table()``."""

    host_begin: int
    host_end: int
    nbytes: int
    shape: tuple
    dtype: np.dtype
    structured: int
    dynamic: int
    kind: str
    name: str | None
    device_begin: int

    def __str__(self) -> str:
        label = self.name or "?"
        return (
            f"{format_range(self.host_begin, self.nbytes)} -> {self.device_begin:#x}  "
            f"{label} shape={self.shape} dtype={self.dtype}  "
            f"structured={self.structured} dynamic={self.dynamic} {self.kind}"
        )


_LOG = logging.getLogger("pyacc")

# Hot-path constants: plain ints and module globals instead of Enum attribute access.
_ACTIVE = BUS.active
_ENTER_DATA = int(EventKind.ENTER_DATA)
_EXIT_DATA = int(EventKind.EXIT_DATA)
_DYNAMIC = Counter.DYNAMIC
_STRUCTURED = Counter.STRUCTURED
_COPYOUT = MapKind.COPYOUT
_SELF = UpdateDirection.SELF
#: ``with _HOLD:`` — an event subscriber's exception waits for the end of the verb
_HOLD = BUS.holding()


class _Action(enum.Enum):
    SKIP = "skip"  # nothing to map (zero-size, no_create of absent data)
    INCREMENT = "increment"  # present: join the existing entry
    JOIN_NEW = "join_new"  # contained in a mapping created earlier in this directive
    CREATE = "create"  # absent: allocate, maybe copy in


@dataclass(slots=True)
class _Step:
    request: MapRequest
    action: _Action
    data: int = 0
    low: int = 0
    high: int = 0
    entry: MappingEntry | None = None
    creator: "_Step | None" = None
    address: int | None = None  # device address allocated for CREATE


@dataclass(frozen=True, slots=True)
class Layout:
    """Shape, dtype and strides of an array not yet created (what ``Device.view`` reads)."""

    shape: tuple
    dtype: np.dtype
    strides: tuple
    size: int
    nbytes: int

    @classmethod
    def c_contiguous(cls, shape, dtype) -> "Layout":
        dimensions = shape if isinstance(shape, (tuple, list)) else (shape,)
        if not all(isinstance(n, (int, np.integer)) and not isinstance(n, bool) for n in dimensions):
            raise InvalidArgumentError(f"acc.malloc: shape {shape!r} must be an int or a tuple of ints")
        shape = tuple(int(n) for n in dimensions)
        try:
            dtype = np.dtype(dtype)
        except TypeError as error:
            raise InvalidArgumentError(f"acc.malloc: {dtype!r} is not a numpy dtype ({error})") from None
        if dtype.hasobject:
            raise InvalidArgumentError(f"acc.malloc: dtype {dtype} holds Python objects; use a numeric dtype")
        if any(n < 0 for n in shape):
            raise InvalidArgumentError(f"acc.malloc: negative dimension in shape {shape}")
        strides, step = [], dtype.itemsize
        for extent in reversed(shape):
            strides.append(step)
            step *= extent
        size = int(np.prod(shape, dtype=np.int64))
        return cls(shape, dtype, tuple(reversed(strides)), size, size * dtype.itemsize)


def byte_view(array: np.ndarray) -> np.ndarray:
    """A contiguous array's bytes as a flat ``uint8`` array (shares memory)."""
    return array.reshape(-1, order="A").view(np.uint8)


class DeviceRuntime:
    """Verbs over one device that has memory of its own (``emulated``, ``cuda``)."""

    def __init__(self, device: Device):
        self.device = device
        self.table = PresentTable()
        #: finds a variable name for an array (set by pyacc to a caller-frame search);
        #: called only when a mapping is created or an error is raised
        self.namer = lambda array: None
        #: ``is_present(array)``: bound straight to the table's lock-free check (one
        #: call frame less on the hottest query)
        self.is_present = self.table.contains
        #: the ``acc.declare`` mappings of this device, with whether each is copied back
        #: when its declaration ends (``copy`` clause): ``[(entry, copies_out), ...]``
        self.declared: list[tuple[MappingEntry, bool]] = []

    def _name(self, request: MapRequest) -> str | None:
        return request.name or self.namer(request.array)

    # == structured and dynamic entry ==================================================
    def enter(self, requests: list[MapRequest], counter: Counter, queue: Queue) -> list[Mapped]:
        """Entry actions of a data region, compute region or enter-data directive.

        Raises:
            NotPresentError: a ``present`` request is absent.
            PartlyPresentError: a request overlaps a mapping without lying inside it.
            OutOfMemoryError: device memory ran out; nothing was mapped.
        """
        with self.table.locked(), _HOLD:
            mapped = self._join_all_present(requests, counter, queue)
            if mapped is not None:
                return mapped
            steps = self._plan_entry(requests)
            self._allocate(steps)
            return self._commit_entry(steps, counter, queue)

    # -- present increments: the fast paths (no data moves, nothing can fail) ------------
    def join_structured(self, arrays, memo: list | None = None) -> list[MappingEntry] | None:
        """The hot path of a compute call inside a data region: when every array is
        present, their structured increments and their entries; else None, changing
        nothing. Pair with ``leave_structured``.

        ``memo``, when given (an empty list), is filled for ``rejoin_structured``: the
        table's version and the entries, weakly (it keeps nothing alive).
        """
        table = self.table
        with table.locked():
            entries = self._containing_all(arrays)
            if entries is None:
                return None
            if memo is not None:
                memo[:] = [table.version, [weakref.ref(entry) for entry in entries]]
            self._increment_all(entries, _STRUCTURED, None, None)
            return entries

    def rejoin_structured(self, memo: list) -> list[MappingEntry] | None:
        """``join_structured`` again, for the same array objects as the call that filled
        ``memo`` (the caller has checked that they are the same objects, with the same
        shape): while the table is unchanged since, the entries are still in it, so they
        get their structured increments without a lookup. Else None, changing nothing."""
        table = self.table
        with table.locked():
            if memo[0] != table.version:
                return None
            entries = [reference() for reference in memo[1]]
            if _ACTIVE[_ENTER_DATA]:
                self._increment_all(entries, _STRUCTURED, None, None)
            else:
                for entry in entries:
                    entry.structured += 1
            return entries

    def leave_structured(self, entries: list[MappingEntry]) -> bool:
        """Undo ``join_structured`` when no lifetime ends by it (the common case) and
        return True; else change nothing and return False (the caller then runs the full
        ``exit_structured``, which copies back and frees)."""
        with self.table.locked():
            ends = False
            for entry in entries:
                entry.structured -= 1
                if not (entry.structured or entry.dynamic):
                    ends = True
            if ends:
                for entry in entries:
                    entry.structured += 1
                return False
            if _ACTIVE[_EXIT_DATA]:
                # published one decrement at a time, each from the counters it found: an
                # entry listed twice (one array passed for two parameters, or two views of
                # one mapping) has two decrements, (2, 0) → (1, 0) → (0, 0) for the
                # PYACC_CHECK ledger, not twice the final (1, 0) → (0, 0)
                for entry in entries:
                    entry.structured += 1
                with _HOLD:
                    for entry in entries:
                        before = entry.counters
                        entry.decrement(_STRUCTURED)
                        self._publish(EventKind.EXIT_DATA, entry, before, None, None)
            return True

    def join_present(self, array, counter: Counter):
        """The hot path of ``acc.copyin``/``acc.create`` of present data: the present
        increment and the device array, or None (nothing changed) when ``array`` is not
        wholly inside a mapping. The caller has checked that ``array`` is contiguous."""
        with self.table.locked():
            entry = self.table.containing(array)
            if entry is None:
                return None
            self._increment_all((entry,), counter, None, None)
        return self.device_array_of(entry, array)

    def _join_all_present(self, requests, counter: Counter, queue) -> list[Mapped] | None:
        """``enter`` when every array is already present: present increments only.
        Returns None, changing nothing, when any array is not present."""
        entries = self._containing_all([request.array for request in requests])
        if entries is None:
            return None
        self._increment_all(entries, counter, queue, [request.name for request in requests])
        return [Mapped(request, entry) for request, entry in zip(requests, entries)]

    def _containing_all(self, arrays) -> list[MappingEntry] | None:
        containing = self.table.containing
        entries = [containing(array) for array in arrays]
        return None if None in entries else entries

    def _increment_all(self, entries, counter: Counter, queue, names) -> None:
        """Present increments (OpenACC 3.3 §2.7.2), published when someone listens."""
        if not _ACTIVE[_ENTER_DATA]:
            for entry in entries:
                entry.increment(counter)
            return
        with _HOLD:  # a subscriber that raises waits until every increment is done
            for index, entry in enumerate(entries):
                before = entry.counters
                entry.increment(counter)
                self._publish(EventKind.ENTER_DATA, entry, before, queue, names[index] if names else None)

    def device_array_of(self, entry: MappingEntry, array):
        """Device array of ``array`` inside ``entry`` (cached for the mapped array itself,
        re-made when its shape, strides or dtype were changed in place)."""
        if array is entry.host_array:
            device_array = entry.device_array
            if (device_array is None or device_array.shape != array.shape
                    or device_array.strides != array.strides or device_array.dtype != array.dtype):
                device_array = entry.device_array = self.device.view(entry.device_address, array)
            return device_array
        return self.device_view(entry, array, None)

    def _plan_entry(self, requests) -> list[_Step]:
        steps: list[_Step] = []
        creating: list[_Step] = []
        for request in requests:
            step = self._plan_one(request, creating)
            if step.action is _Action.CREATE:
                creating.append(step)
            steps.append(step)
        return steps

    def _plan_one(self, request: MapRequest, creating: list[_Step]) -> _Step:
        array = request.array
        if array.size == 0:
            return _Step(request, _Action.SKIP)
        found = self.table.lookup(array)
        low, high = found.extent.begin, found.extent.end
        if request.kind.copies_out and not array.flags.writeable:
            raise InvalidArgumentError(
                f"{request.kind.value}: {describe_array(array, self._name(request), low)} is "
                "read-only, so its device data could not be copied back; use copyin, or pass "
                "a writeable array", name=self._name(request))
        if found.relation is Relation.CONTAINED:
            return _Step(request, _Action.INCREMENT, found.data, low, high, entry=found.entry)
        if found.relation.is_partial:
            raise partly_present(request.array, self._name(request), found)
        for creator in creating:  # mappings planned earlier in this directive
            if creator.low <= low and high <= creator.high:
                return _Step(request, _Action.JOIN_NEW, found.data, low, high, creator=creator)
            if creator.low < high and low < creator.high:
                raise _partly_present_within(request, creator, found)
        if request.kind is MapKind.PRESENT:
            raise not_present(array, self._name(request), found, "present clause", self.table)
        if request.kind is MapKind.NO_CREATE:
            return _Step(request, _Action.SKIP, found.data)
        return _Step(request, _Action.CREATE, found.data, low, high)

    def _allocate(self, steps: list[_Step]) -> None:
        done: list[_Step] = []
        try:
            for step in steps:
                if step.action is _Action.CREATE:
                    step.address = self.device.allocate(step.high - step.low)
                    done.append(step)
        except BaseException as error:
            for step in done:
                self.device.free(step.address)
                step.address = None
            if not isinstance(error, OutOfMemoryError):
                raise
            request = step.request
            name = self._name(request)
            raise OutOfMemoryError(
                f"cannot map {describe_array(request.array, name, step.low)}: "
                f"{error.message}; nothing of this directive was mapped",
                name=name,
                nbytes=request.array.nbytes,
            ) from None

    def _commit_entry(self, steps, counter: Counter, queue: Queue, *, declare: bool = False) -> list[Mapped]:
        saved = {id(s.entry): (s.entry, s.entry.counters) for s in steps if s.entry is not None}
        created: list[MappingEntry] = []
        try:
            return [self._commit_step(step, counter, queue, created, declare) for step in steps]
        except BaseException:
            for entry, counters in saved.values():
                self._restore(entry, counters)
            for entry in created:
                self._restore(entry, (0, 0))
                self.table.remove(entry)
            for step in steps:
                if step.address is not None:  # after any copy already queued into it
                    self.device.release(step.address, queue)
            raise

    def _commit_step(self, step: _Step, counter, queue, created, declare=False) -> Mapped:
        request = step.request
        if step.action is _Action.SKIP:
            return Mapped(request, None, step.data)
        if step.action is _Action.CREATE:
            entry = MappingEntry(step.low, step.high, request.array, step.address, name=self._name(request))
            self.table.insert(entry)
            created.append(entry)
            step.entry = entry
        else:
            entry = step.entry if step.action is _Action.INCREMENT else step.creator.entry
        before = entry.counters
        if declare:
            entry.declare()
        else:
            entry.increment(counter)
        # published before the copy-in: a copy that fails is rolled back as a change
        # observers (the PYACC_CHECK ledger) have seen
        self._publish(EventKind.ENTER_DATA, entry, before, queue, request.name)
        if step.action is _Action.CREATE and request.kind.copies_in:
            self.device.upload(self.device_view(entry, request.array, step.data), request.array, queue, name=entry.name)
        return Mapped(request, entry, step.data)

    # == exits ==========================================================================
    def exit_structured(self, mapped: list[Mapped], queue: Queue, *, copy_back: bool = True) -> None:
        """Exit actions of a data or compute region (OpenACC 3.3 §2.7.4–2.7.10).

        Each mapped item's structured count drops by one. An entry whose lifetime ends
        here is copied back through the views this region named in ``copy``/``copyout``
        clauses (unless ``copy_back`` is False: the region failed on the device), then
        removed and its memory freed once the queue has passed the copies.
        """
        with self.table.locked(), _HOLD:
            ended = []
            publish = _ACTIVE[_EXIT_DATA]
            for item in mapped:
                entry = item.entry
                if entry is None or not (entry.structured or entry.dynamic):
                    continue
                before = entry.counters if publish else None
                entry.decrement(_STRUCTURED)
                if publish:
                    self._publish(EventKind.EXIT_DATA, entry, before, queue, item.request.name)
                if not (entry.structured or entry.dynamic):
                    ended.append(entry)
            if ended:
                copies = [
                    item
                    for item in mapped
                    if copy_back and item.entry in ended and item.request.kind.copies_out
                ]
                self._end_lifetimes(ended, copies, queue, remove_on_failure=True)

    def exit_dynamic(self, requests: list[MapRequest], queue: Queue, *, finalize: bool = False) -> None:
        """``exit data`` / ``acc.copyout`` / ``acc.delete`` (OpenACC 3.3 §2.6.6, §3.2.19).

        Absent data is skipped (API.md §8). The dynamic count drops by one, or to 0 with
        ``finalize``; an entry whose counters both reach 0 is copied back through the
        named view when the request that ended it is a ``copyout``, then removed.

        Raises:
            PartlyPresentError: a request overlaps a mapping without lying inside it
                (checked for every request before anything changes).
        """
        for request in requests:  # a copy-back could not land (API.md §4: nothing changes)
            if request.kind is _COPYOUT and not request.array.flags.writeable:
                _check_writeable("copyout", request.array, self._name(request))
        with self.table.locked(), _HOLD:
            if len(requests) == 1 and self.leave_present(requests[0].array, finalize=finalize, queue=queue):
                return
            steps = []
            for request in requests:
                if request.array.size == 0:
                    continue
                found = self.table.lookup(request.array)
                if found.relation.is_partial:
                    raise partly_present(request.array, self._name(request), found)
                if found.relation is Relation.CONTAINED:
                    steps.append(Mapped(request, found.entry, found.data))
            ended, copies = [], []
            saved = [(item.entry, item.entry.counters) for item in steps]
            for item in steps:
                entry = item.entry
                if not entry.is_present:
                    continue  # ended by an earlier request of this directive
                before = entry.counters
                entry.decrement(Counter.DYNAMIC, finalize=finalize)
                self._publish(EventKind.EXIT_DATA, entry, before, queue, item.request.name)
                if not entry.is_present:
                    ended.append(entry)
                    if item.request.kind.copies_out:
                        copies.append(item)
            try:
                self._end_lifetimes(ended, copies, queue)
            except BaseException:
                for entry, counters in saved:
                    self._restore(entry, counters)
                raise

    def leave_present(self, array, *, finalize: bool = False, queue=None) -> bool:
        """Fast path of ``exit_dynamic`` for one array whose data stays present: the
        dynamic decrement alone. Returns False (changing nothing) in every other case."""
        with self.table.locked():
            entry = self.table.containing(array)
            if entry is None:
                return False
            before = entry.counters
            entry.decrement(_DYNAMIC, finalize=finalize)
            if not entry.structured and not entry.dynamic:
                entry.restore(before)
                return False
            if _ACTIVE[_EXIT_DATA]:
                self._publish(EventKind.EXIT_DATA, entry, before, queue, None)
            return True

    def _end_lifetimes(self, ended: list[MappingEntry], copies: list[Mapped], queue: Queue,
                       *, remove_on_failure: bool = False) -> None:
        """Copy back ``copies`` (all of them, even after one fails), then remove ``ended``
        and free their memory (deferred on ``queue``). Copies happen before any removal,
        so a failing copy leaves the table as it was — unless ``remove_on_failure`` (a
        structured region is over whatever happens: its entries are removed and freed,
        then the first error propagates)."""
        failure = None
        # an exit that keeps its mappings when a copy fails (exit data) must leave every
        # host buffer as it was too (API.md §4): on the synchronous queue, several
        # copy-backs land in temporaries first and reach the host only once all succeeded
        staged = [] if (not remove_on_failure and len(copies) > 1
                        and queue.async_value is None) else None
        for item in copies:
            array = item.request.array
            target = array if staged is None else np.empty_like(array)
            try:
                self.device.download(target, self.device_view(item.entry, array, item.data), queue,
                                     name=item.request.name or item.entry.name)
            except BaseException as error:  # the other copy-backs still run
                failure = failure or error
                if staged is not None:
                    break
            else:
                if staged is not None:
                    staged.append((array, target))
        if failure is not None and not remove_on_failure:
            raise failure
        for array, target in staged or ():
            np.copyto(array, target)
        self._remove_entries(ended, queue)
        if failure is not None:
            raise failure

    def _remove_entries(self, ended: list[MappingEntry], queue: Queue) -> None:
        for entry in ended:
            self.table.remove(entry)
            if entry.owns_memory:
                self.device.release(entry.device_address, queue)

    # == update ===========================================================================
    def update(self, items: list[tuple[UpdateDirection, np.ndarray, str | None]], queue: Queue,
               *, if_present: bool = False) -> None:
        """``update self/device`` in the order given (OpenACC 3.3 §2.14.4).

        Any strided view of present data may be updated; only its elements move.

        Raises:
            NotPresentError: absent data without ``if_present``.
            PartlyPresentError: data only partly present (even with ``if_present``).
        """
        for direction, array, name in items:
            if direction is _SELF and not array.flags.writeable:
                _check_writeable("update self", array, name or self.namer(array))
        with self.table.locked(), _HOLD:
            moves = []
            if len(items) == 1:  # fast path: one array inside a mapping (no relation needed)
                direction, array, name = items[0]
                entry = self.table.containing(array)
                if entry is not None:
                    items = ()
                    moves.append((direction, array, name, self.device_array_of(entry, array)))
            for direction, array, name in items:
                if array.size == 0:
                    continue
                found = self.table.lookup(array)
                if found.relation.is_partial:
                    raise partly_present(array, name or self.namer(array), found)
                if found.relation is Relation.DISJOINT:
                    if if_present:
                        continue
                    raise not_present(array, name or self.namer(array), found, f"update {direction.value}",
                                      self.table)
                moves.append((direction, array, name, self.device_view(found.entry, array, found.data)))
            # all or nothing for the host data (API.md §4): with several synchronous
            # moves, the host arrays written so far are put back if a later move fails
            saved = [] if len(moves) > 1 and queue.async_value is None else None
            try:
                for direction, array, name, device_array in moves:
                    if direction is UpdateDirection.DEVICE:
                        self.device.upload(device_array, array, queue, name=name)
                    else:
                        if saved is not None:
                            saved.append((array, array.copy()))
                        self.device.download(array, device_array, queue, name=name)
            except BaseException:
                for array, before in reversed(saved or ()):
                    np.copyto(array, before)
                raise

    # == map_data / unmap_data (OpenACC 3.3 §3.2.21–3.2.22) ================================
    def map_data(self, array: np.ndarray, device_array, name: str | None = None) -> None:
        """Map host ``array`` onto existing device memory; dynamic count pinned at 1.

        Raises:
            PresentError: any part of ``array`` is already present, or the device memory
                already backs another mapping.
            InvalidArgumentError: ``device_array`` is not allocated memory of this device,
                is not contiguous, or is smaller than ``array``.
        """
        if array.size == 0:
            return
        name = name or self.namer(array)
        with self.table.locked(), _HOLD:
            found = self.table.lookup(array)
            if found.relation is not Relation.DISJOINT:
                raise PresentError(
                    f"acc.map_data: {describe_array(array, name, found.extent.begin)} is already "
                    f"present: {_describe_entries(found)}. Unmap or delete it first",
                    name=name,
                    host_range=found.extent,
                )
            address = self._check_map_target(array, device_array, name)
            entry = MappingEntry(found.extent.begin, found.extent.end, array, address,
                                 kind=EntryKind.MAP_DATA, name=name, dynamic=1)
            self.table.insert(entry)
            self._publish(EventKind.ENTER_DATA, entry, (0, 0), None, name)

    def _check_map_target(self, array, device_array, name) -> int:
        device_array = self.device.as_device_array(device_array)
        data, low, high = self.device.extent_of(device_array)
        _check_fits("acc.map_data", device_array, array, describe_array(array, name))
        block = self.device.mappable_block(low, high)
        if block is None or low + array.nbytes > block[0] + block[1]:
            raise InvalidArgumentError(
                f"acc.map_data: device range {format_range(low, array.nbytes)} is not inside "
                "device memory allocated with acc.malloc"
                + (" or by the program (a CuPy array)" if self.device.type_name == "cuda" else "")
            )
        users = self.table.entries_overlapping_device(low, low + array.nbytes)
        if users:
            raise PresentError(
                f"acc.map_data: device range {format_range(low, array.nbytes)} already backs "
                f"the mapping of {users[0].describe()}"
            )
        return data

    def unmap_data(self, array: np.ndarray, name: str | None = None) -> None:
        """End a ``map_data`` lifetime; the device memory is not freed.

        Raises:
            PresentError: ``array`` was not mapped by ``map_data`` (absent included), or a
                structured region still holds it (OpenACC 3.3 §3.2.22).
        """
        if array.size == 0:
            return
        with self.table.locked(), _HOLD:
            found = self.table.lookup(array)
            entry = found.entry
            what = describe_array(array, name or self.namer(array), found.extent.begin)
            if entry is None or (entry.host_begin, entry.host_end) != tuple(found.extent):
                state = _describe_entries(found) if found.entries else "it is not mapped"
                raise PresentError(f"acc.unmap_data: {what} was not mapped by acc.map_data: {state}", name=name)
            if entry.kind is not EntryKind.MAP_DATA:
                raise PresentError(
                    f"acc.unmap_data: {what} was not mapped by acc.map_data but by a data "
                    f"clause or routine: {entry.describe()}; use acc.delete / exit_data", name=name)
            if entry.structured:
                raise PresentError(
                    f"acc.unmap_data: {what} is still held by {entry.structured} structured "
                    f"region(s): {entry.describe()}; unmap it after the region ends", name=name)
            before = entry.counters
            entry.restore((0, 0))
            self.table.remove(entry)
            self._publish(EventKind.EXIT_DATA, entry, before, None, name)

    # == declare (OpenACC 3.3 §2.13) ======================================================
    def declare(self, requests: list[MapRequest]) -> list[Mapped]:
        """``acc.declare``: map each array for the rest of the program, dynamic count
        pinned at 1 (``copyin``/``copy``: copied in; ``create``/``device_resident``:
        allocated only). The lifetimes end at ``end_declarations`` (``acc.shutdown``,
        interpreter exit), where ``copy`` data is copied back. All or nothing.

        Raises:
            PresentError: an array is already present (declared before included: a
                declaration starts its data's lifetime and cannot join another one, as a
                second ``declare`` of the same variable is an error in C), or two arrays
                of this call overlap one inside the other.
            PartlyPresentError: an array overlaps a mapping without lying inside it.
            InvalidArgumentError: a ``copy`` array is read-only.
            OutOfMemoryError: device memory ran out; nothing was declared.
        """
        with self.table.locked(), _HOLD:
            steps = self._plan_entry(requests)
            for step in steps:
                if step.action is _Action.INCREMENT or step.action is _Action.JOIN_NEW:
                    raise self._declared_present(step)
            self._allocate(steps)
            mapped = self._commit_entry(steps, _DYNAMIC, self.device.sync_queue, declare=True)
            self.declared += [(item.entry, item.request.kind.copies_out)
                              for item in mapped if item.entry is not None]
            return mapped

    def _declared_present(self, step: _Step) -> PresentError:
        request = step.request
        name = self._name(request)
        if step.action is _Action.JOIN_NEW:
            other = step.creator.request
            state = (f"it lies inside {describe_array(other.array, other.name)}, declared by "
                     "the same call")
        else:
            entry = step.entry
            state = ("it was declared already: " if entry.kind is EntryKind.DECLARE
                     else "it is mapped by another directive: ") + entry.describe()
        return PresentError(
            f"acc.declare: {describe_array(request.array, name, step.low)} is already present; "
            f"{state}. A declaration starts the data lifetime of its arrays for the whole "
            "program (OpenACC 3.3 §2.13) and cannot join another one: declare each array once, "
            "before any other directive maps it (or end that mapping first)",
            name=name,
            host_range=HostRange(step.low, step.high),
            mapping_range=(step.entry.host_range if step.entry is not None
                           else HostRange(step.creator.low, step.creator.high)),
        )

    def end_declarations(self) -> None:
        """End every ``acc.declare`` lifetime of this device (``acc.shutdown``, program
        exit): ``copy`` data is copied back (synchronously), then the mappings are removed
        and their memory freed. A mapping that a structured region still holds stays
        present until that region ends. The caller has waited for the queues.

        Raises:
            ExecutionError: a copy-back failed (the mappings are removed all the same).
        """
        with self.table.locked(), _HOLD:
            declared, self.declared = self.declared, []
            ended, copies = [], []
            for entry, copies_out in declared:
                if entry.kind is not EntryKind.DECLARE:
                    continue
                before = entry.counters
                entry.end_declaration()
                self._publish(EventKind.EXIT_DATA, entry, before, None, None)
                if not entry.is_present:
                    ended.append(entry)
                    if copies_out:
                        copies.append(Mapped(MapRequest(MapKind.COPY, entry.host_array, entry.name), entry))
            self._end_lifetimes(ended, copies, self.device.sync_queue, remove_on_failure=True)

    # == queries ==========================================================================
    def refcounts(self, array) -> tuple[int, int]:
        entry = self.table.containing(array)
        return entry.counters if entry is not None else (0, 0)

    def deviceptr(self, array):
        """The device array of present host data (a view at the matching offset), or None."""
        if array.size == 0:
            return array
        entry = self.table.containing(array)
        if entry is None:
            return None
        return self.device_array(Mapped(MapRequest(None, array), entry))

    def device_array(self, mapped: Mapped):
        """The device array for the outcome of an entry request: its device view, or the
        host array itself when nothing was mapped (zero-size, ``no_create`` of absent
        data: OpenACC 3.3 §2.7.10, device code uses the local address)."""
        entry = mapped.entry
        if entry is None:
            return mapped.request.array
        array = mapped.request.array
        if array is entry.host_array or mapped.data is None:
            return self.device_array_of(entry, array)
        return self.device_view(entry, array, mapped.data)

    def device_view(self, entry: MappingEntry, array: np.ndarray, data: int | None):
        """Device array of ``array``, a view inside ``entry`` whose first element is at
        host address ``data`` (computed when None)."""
        if data is None:
            data = array.__array_interface__["data"][0]
        return self.device.view(entry.device_address_of(data), array)

    def hostptr(self, device_array):
        """The host array whose device copy is ``device_array``, or None."""
        data, low, high = self.device.extent_of(device_array)
        if high == low:
            return None
        entry = self.table.entry_at_device_address(low, high)
        if entry is None:
            return None
        return np.ndarray(
            shape=device_array.shape,
            dtype=device_array.dtype,
            buffer=entry.host_bytes(),
            offset=data - entry.device_address,
            strides=device_array.strides,
        )

    def records(self) -> list[MappingRecord]:
        return [
            MappingRecord(e.host_begin, e.host_end, e.nbytes, e.host_array.shape, e.host_array.dtype,
                          e.structured, e.dynamic, e.kind.value, e.name, e.device_address)
            for e in self.table.entries()
        ]

    # == raw memory (OpenACC 3.3 §3.2.16–3.2.17, §3.2.26–3.2.28) ===========================
    def malloc(self, shape, dtype):
        """Raw device memory for a C-contiguous array of ``shape`` and ``dtype``."""
        layout = Layout.c_contiguous(shape, dtype)
        if layout.size == 0:
            return np.empty(layout.shape, layout.dtype)
        with self.table.locked(), _HOLD:  # device memory changes with the table lock held
            return self.device.view(self.device.allocate(layout.nbytes), layout)

    def free(self, device_array) -> None:
        """Free memory from ``malloc``; refuses memory that backs a mapping."""
        data, low, high = self.device.extent_of(device_array)
        if high == low:
            return
        with self.table.locked(), _HOLD:
            users = self.table.entries_overlapping_device(low, high)
            if users:
                raise PresentError(
                    f"acc.free: device memory {format_range(low, high - low)} is still mapped: "
                    f"{users[0].describe()}; unmap_data / delete it first",
                    host_range=users[0].host_range,
                )
            block = self.device.allocation_of(low)
            if block is None or block[0] != low:
                raise InvalidArgumentError(
                    f"acc.free: {describe_array(device_array)} at {format_range(low, high - low)} "
                    "is not the start of a block from acc.malloc"
                )
            # not before every queue has passed the work already queued on it (a block
            # reused while a kernel still writes it would corrupt its next owner)
            self.device.release(low, self.device.sync_queue)

    def memcpy_to_device(self, device_array, array, queue: Queue) -> None:
        destination, source = self._raw_pair(device_array, array, "acc.memcpy_to_device")
        with _HOLD:
            self.device.upload(destination, source, queue)

    def memcpy_from_device(self, array, device_array, queue: Queue) -> None:
        source, destination = self._raw_pair(device_array, array, "acc.memcpy_from_device")
        if not array.flags.writeable:
            _check_writeable("acc.memcpy_from_device", array, self.namer(array), "the destination")
        with _HOLD:
            self.device.download(destination, source, queue)

    def memcpy_device(self, destination, source, queue: Queue) -> None:
        destination = self.device.as_device_array(destination)
        source = self.device.as_device_array(source)
        to_bytes, from_bytes = _raw_bytes(destination, source, "acc.memcpy_device")
        if to_bytes.size:
            with _HOLD:
                self.device.device_copy(to_bytes, from_bytes, queue)

    def _raw_pair(self, device_array, array, routine):
        """Byte views ``(device side, host side)`` of the ``array.nbytes`` bytes to copy."""
        device_array = self.device.as_device_array(device_array)
        check_array(array)
        device_bytes, host_bytes = _raw_bytes(device_array, array, routine)
        return device_bytes, host_bytes

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
            self.device.reset()
            BUS.publish(EventKind.RESET, self.device.identity)
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


# == shared helpers ========================================================================
def _check_writeable(what: str, array, name, role: str = "") -> None:
    """Raise ``InvalidArgumentError`` naming ``array`` when device data would be copied
    into it but it is read-only (checked before anything changes: numpy's own "assignment
    destination is read-only" would come from the middle of a directive, or from a queue
    worker)."""
    if isinstance(array, np.ndarray) and not array.flags.writeable:
        _, low, high = _probe.extent(array)
        label = f"{role} " if role else ""
        raise InvalidArgumentError(
            f"{what}: {label}{describe_array(array, name)} at {format_range(low, high - low)} is "
            "read-only, so device data cannot be copied into it; pass a writeable array "
            "(a.copy(), or set a.flags.writeable = True when you own its memory)"
            + ("" if what.startswith("acc.memcpy") else
               ", or end the mapping without copying (delete) / copy the other way (update device)"),
            name=name)


def _check_fits(routine: str, destination, source, what: str) -> None:
    """``destination`` and ``source`` are contiguous and ``destination`` holds at least
    the bytes of ``source`` (described as ``what`` in the message)."""
    for array in (destination, source):
        if not (array.flags.c_contiguous or array.flags.f_contiguous):
            raise InvalidArgumentError(f"{routine}: {describe_array(array)} is not contiguous")
    if destination.nbytes < source.nbytes:
        raise InvalidArgumentError(
            f"{routine}: the destination has {destination.nbytes} bytes, fewer than the "
            f"{source.nbytes} bytes of {what}"
        )


def _raw_bytes(destination, source, routine):
    """Byte views of ``destination[:source.nbytes]`` and ``source`` for a raw copy."""
    _check_fits(routine, destination, source, f"the source {describe_array(source)}")
    return byte_view(destination)[: source.nbytes], byte_view(source)


def _describe_entries(found: Lookup) -> str:
    return "; ".join(entry.describe() for entry in found.entries)


def partly_present(array, name, found: Lookup) -> PartlyPresentError:
    """The error for a range that overlaps mappings without lying inside one."""
    extent = found.extent
    return PartlyPresentError(
        f"{describe_array(array, name)} at {extent} {found.relation.describe()} "
        f"{_describe_entries(found)}. It is partly present (OpenACC 3.3 §2.7.3): map the "
        "whole array once and use views of it, or end the other mapping first",
        name=name,
        host_range=extent,
        mapping_range=found.entries[0].host_range,
    )


def _partly_present_within(request: MapRequest, creator: _Step, found: Lookup) -> PartlyPresentError:
    other = creator.request
    return PartlyPresentError(
        f"{describe_array(request.array, request.name)} at {found.extent} overlaps "
        f"{describe_array(other.array, other.name)} at {format_range(creator.low, creator.high - creator.low)}"
        f", mapped earlier by the same directive, without lying inside it (OpenACC 3.3 §2.7.3)",
        name=request.name,
        host_range=found.extent,
    )


def not_present(array, name, found: Lookup, what: str, table: PresentTable | None = None) -> NotPresentError:
    """The error for absent data where presence is required; it names the mappings on
    either side of the range, when there are any (a near miss is often an off-by-one
    view, or the wrong array)."""
    return NotPresentError(
        f"{what}: {describe_array(array, name)} at {found.extent} is not present on the "
        "device. Map it first (acc.copyin / acc.create / an enclosing acc.data region), or "
        f"pass if_present=True to skip absent data.{_nearby(table, found.extent)}",
        name=name,
        host_range=found.extent,
    )


def _nearby(table: PresentTable | None, extent) -> str:
    if table is None:
        return ""
    before, after = table.neighbours(extent.begin, extent.end)
    if before is None and after is None:
        return " The present table is empty."
    lines = [f" Nearest mappings ({len(table)} in the table):"]
    if before is not None:
        lines.append(f"below: {before.describe()}, ends {extent.begin - before.host_end} bytes before it")
    if after is not None:
        lines.append(f"above: {after.describe()}, starts {after.host_begin - extent.end} bytes after it")
    return " ".join(lines[:1]) + " " + "; ".join(lines[1:])
