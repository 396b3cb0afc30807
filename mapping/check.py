"""The consistency checker behind ``PYACC_CHECK=1``: a second bookkeeping of the runtime,
kept from the event stream, compared with the real one after each directive.

Owns: ``Ledger`` and ``LEDGER`` (the process-wide instance, attached on demand).

The model is that of libgomp's reference-count checking (``gomp_map_vars`` asserts, and
the ``refcount_set`` that keeps one construct from touching an entry twice): every
change of an entry's counters is an ENTER_DATA or EXIT_DATA event carrying the entry
and its counters before → after — the structured count changed by the data and compute
regions that are live, the dynamic count by the enter/exit-data operations, failed
directives rolling back as the changes they are. The ledger replays those changes on
its own copy of each entry's counters, and follows device memory through the ALLOC and
FREE events, noting which entry owns each block. ``verify(runtime)`` then checks, with
the table lock held:

- the table's sorted container agrees with its entries, and no two entries overlap;
- every entry in the table has the counters the ledger expects, both ≥ 0, not both 0
  (an entry whose counts reached 0 must have been removed), a map_data or declare
  entry dynamic ≥ 1;
- every entry the ledger still expects to be present is in the table;
- every block the ledger knows is still allocated on the device, and the device's memory
  in use equals those blocks (plus what was allocated before checking began);
- under oversubscription (EVICT/RESTORE events), an entry is evicted iff the events say
  so, keeps its saved copy while evicted, and owns the block it was restored into;
- when no queue of the device has work pending, no block of a removed entry is still
  allocated: device memory in use = live allocations + pending deferred frees, and with
  nothing pending the second term is 0.

A counter changed behind the runtime's back (a corrupted entry), an entry lost from the
table, a leaked or double-freed block, all raise ``ConsistencyError`` naming the entry.

Invariants: the ledger's handlers run on the publishing thread; counter events are
published with the table lock held, so a ``verify`` that holds it sees both sides of a
directive at the same point. ALLOC and FREE events of one device address alternate,
whatever thread frees: devices publish ALLOC after taking a block and FREE before giving
it back (``Device.free``). The ledger keeps the entries it follows alive only while
they are expected to be present.
"""

from __future__ import annotations

import threading

from .errors import ConsistencyError, format_range
from .events import BUS, EventKind

__all__ = ["Ledger", "LEDGER"]

_KINDS = (EventKind.ENTER_DATA, EventKind.EXIT_DATA, EventKind.ALLOC, EventKind.FREE,
          EventKind.RESET, EventKind.EVICT, EventKind.RESTORE)


class _DeviceBooks:
    """What the ledger knows of one device."""

    def __init__(self):
        self.counters: dict[int, list] = {}  # id(entry) -> [entry, structured, dynamic]
        self.blocks: dict[int, list] = {}  # device address -> [bytes asked, owner entry]
        self.unknown_bytes = 0  # in use before the ledger was attached (adopted)
        self.problems: list[str] = []  # found while replaying events, reported at verify
        self.evicted: dict[int, object] = {}  # id(entry) -> entry, evicted (EVICT, no RESTORE)
        self.restored: set[int] = set()  # ids of entries restored into a block seen allocated


class Ledger:
    """Expected counters and device blocks, replayed from the event stream."""

    def __init__(self, bus=BUS):
        self._bus = bus
        self._lock = threading.RLock()
        self._books: dict[tuple[str, int], _DeviceBooks] = {}
        self.attached = False

    # -- attaching ---------------------------------------------------------------------
    def attach(self) -> None:
        """Start following the event stream (idempotent)."""
        with self._lock:
            if not self.attached:
                self._bus.subscribe(self._on_event, _KINDS)
                self.attached = True

    def detach(self) -> None:
        with self._lock:
            if self.attached:
                self._bus.unsubscribe(self._on_event, _KINDS)
                self.attached = False
                self._books.clear()

    def adopt(self, runtime) -> None:
        """Take ``runtime``'s current state as the starting point (the checker was
        switched on after the device was in use): its entries and counters as they are,
        its memory in use as allocated before checking began."""
        identity = runtime.device.identity
        with runtime.table.locked(), self._lock:
            if identity in self._books:
                return
            books = self._books[identity] = _DeviceBooks()
            for entry in runtime.table.entries():
                books.counters[id(entry)] = [entry, entry.structured, entry.dynamic]
                if entry.evicted:
                    books.evicted[id(entry)] = entry
            books.unknown_bytes = runtime.device.memory_in_use

    def _device(self, identity) -> _DeviceBooks:
        books = self._books.get(identity)
        if books is None:  # first seen through its events: it started empty
            books = self._books[identity] = _DeviceBooks()
        return books

    # -- replaying events --------------------------------------------------------------
    def _on_event(self, event) -> None:
        with self._lock:
            books = self._device(event.device)
            kind = event.kind
            if kind is EventKind.ENTER_DATA or kind is EventKind.EXIT_DATA:
                self._counters_changed(books, event)
            elif kind is EventKind.ALLOC:
                books.blocks[event.device_begin] = [event.nbytes, None]
            elif kind is EventKind.FREE:
                self._freed(books, event)
            elif kind is EventKind.EVICT:
                books.evicted[id(event.info)] = event.info
            elif kind is EventKind.RESTORE:
                self._restored(books, event)
            else:  # RESET: the device forgot everything
                self._books[event.device] = _DeviceBooks()

    def _counters_changed(self, books: _DeviceBooks, event) -> None:
        entry = event.info
        before, after = event.counters
        record = books.counters.get(id(entry))
        if record is None or record[0] is not entry:
            if before != (0, 0):
                books.problems.append(
                    f"{entry.describe()}: its counters went {before} → {after}, but the checker "
                    "never saw it created")
            record = books.counters[id(entry)] = [entry, 0, 0]
            if entry.owns_memory:
                block = books.blocks.get(entry.device_address)
                if block is not None:
                    block[1] = entry
        elif (record[1], record[2]) != before:
            books.problems.append(
                f"{entry.describe()}: its counters were {before} before this "
                f"{event.kind.name.lower()}, but the directives so far give "
                f"(structured={record[1]}, dynamic={record[2]}) — something changed them "
                "without going through the runtime's verbs")
        record[1], record[2] = after
        if after == (0, 0):
            del books.counters[id(entry)]  # (an evicted entry may still be restored for
            # its copy-back: its residency records go when it has left the table)

    def _restored(self, books: _DeviceBooks, event) -> None:
        """RESTORE (oversubscription): the entry owns the block just allocated for it."""
        entry = event.info
        if books.evicted.pop(id(entry), None) is None:
            books.problems.append(f"{entry.describe()} was restored, but the checker never saw "
                                  "it evicted")
        block = books.blocks.get(event.device_begin)
        if block is not None:
            block[1] = entry
            books.restored.add(id(entry))

    def _freed(self, books: _DeviceBooks, event) -> None:
        address = event.device_begin
        if books.blocks.pop(address, None) is not None:
            return
        if books.unknown_bytes >= event.nbytes:  # allocated before checking began
            books.unknown_bytes -= event.nbytes
            return
        books.problems.append(
            f"device block at {format_range(address, event.nbytes or 0)} was freed, but the "
            "checker never saw it allocated (double free?)")

    # -- verifying ---------------------------------------------------------------------
    def problems(self, runtime) -> list[str]:
        """Everything wrong with ``runtime`` now (empty when consistent)."""
        identity = runtime.device.identity
        with runtime.table.locked(), self._lock:
            if identity not in self._books:
                self.adopt(runtime)
            books = self._books[identity]
            problems, books.problems = books.problems, []
            problems += runtime.table.structure_problems()
            entries = runtime.table.entries()
            problems += _entry_problems(books, entries)
            problems += _residency_problems(books, entries)
            problems += _memory_problems(books, runtime.device, entries)
        return problems

    def verify(self, runtime, where: str = "") -> None:
        """Raise ``ConsistencyError`` listing every problem of ``runtime``."""
        problems = self.problems(runtime)
        if problems:
            device = "{} device {}".format(*runtime.device.identity)
            after = f" after {where}" if where else ""
            raise ConsistencyError(
                f"PYACC_CHECK: the runtime state of the {device} is inconsistent{after}:\n  - "
                + "\n  - ".join(problems)
                + "\nThis is a bug in pyacc (or runtime state changed behind its back); "
                "please report it with this message", problems=tuple(problems))


def _entry_problems(books: _DeviceBooks, entries) -> list[str]:
    problems = []
    in_table = set()
    for entry in entries:
        in_table.add(id(entry))
        record = books.counters.get(id(entry))
        counters = (entry.structured, entry.dynamic)
        if record is None or record[0] is not entry:
            problems.append(f"{entry.describe()} is in the present table, but no directive the "
                            "checker saw created it")
        elif counters != (record[1], record[2]):
            problems.append(
                f"{entry.describe()}: the live regions and dynamic operations give "
                f"structured={record[1]}, dynamic={record[2]}")
        if entry.structured < 0 or entry.dynamic < 0:
            problems.append(f"{entry.describe()} has a negative counter")
        elif not (entry.structured or entry.dynamic):
            problems.append(f"{entry.describe()} has both counters 0 but is still in the table")
        if entry.kind.pinned and entry.dynamic < 1:
            problems.append(f"{entry.describe()} was mapped by {entry.kind.value} but its dynamic "
                            "count dropped below 1 (OpenACC 3.3 §3.2.21, §2.13)")
    for key, (entry, structured, dynamic) in books.counters.items():
        if key not in in_table:
            problems.append(f"{entry.describe()} should be present (structured={structured}, "
                            f"dynamic={dynamic}) but is missing from the present table")
    return problems


def _residency_problems(books: _DeviceBooks, entries) -> list[str]:
    """Oversubscription (``residency``): an entry is evicted iff the checker saw it
    evicted and not restored since; an evicted entry has its saved copy; an entry the
    checker saw restored owns a block the checker saw allocated (none shared)."""
    problems = []
    live = {id(entry) for entry in entries}
    for key in [key for key in books.evicted if key not in live]:  # ended while evicted
        del books.evicted[key]
    books.restored &= live
    for entry in entries:
        seen_evicted = id(entry) in books.evicted
        if entry.evicted != seen_evicted:
            problems.append(f"{entry.describe()} is {'evicted' if entry.evicted else 'resident'}, but "
                            f"the EVICT/RESTORE events say it is {'evicted' if seen_evicted else 'resident'}")
        if entry.evicted and (entry.saved is None or entry.saved.nbytes < entry.nbytes):
            problems.append(f"{entry.describe()} is evicted but its saved copy is missing or short")
        if not entry.evicted and id(entry) in books.restored:
            block = books.blocks.get(entry.device_address)
            if block is None or block[1] is not entry:
                problems.append(f"{entry.describe()} was restored, but its device block at "
                                f"{format_range(entry.device_address, entry.nbytes)} is not one "
                                "the checker saw allocated for it")
    return problems


def _memory_problems(books: _DeviceBooks, device, entries) -> list[str]:
    """Checked only while no queue of the device has work pending: a deferred free may
    otherwise be half done on a worker thread. (New frees are queued with the table lock
    held, which the caller holds, so none can start meanwhile.)"""
    if not all(queue.is_idle() for queue in device.existing_queues()):
        return []
    problems = []
    known = 0
    for address, (nbytes, owner) in books.blocks.items():
        block = device.allocation_of(address)
        if block is None or block[0] != address:
            problems.append(f"device block at {format_range(address, nbytes)} was never freed "
                            "through the device, yet the device no longer holds it")
            continue
        known += block[1]
    in_use = device.memory_in_use
    if in_use != known + books.unknown_bytes:
        problems.append(
            f"device memory in use is {in_use} bytes, but the allocations the checker saw add "
            f"up to {known + books.unknown_bytes} bytes")
    live = {id(entry) for entry in entries}
    for address, (nbytes, owner) in books.blocks.items():
        if owner is not None and id(owner) not in live:
            problems.append(
                f"device block at {format_range(address, nbytes)} of {owner.describe()} is "
                "still allocated though its mapping has ended and no queue has a free pending "
                "(leaked)")
    return problems


LEDGER = Ledger()
