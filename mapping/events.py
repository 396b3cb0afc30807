"""The runtime's one event stream, and the transfer/allocation statistics built on it.

Owns: ``EventKind``, the ``Event`` record, the process-wide ``BUS`` and ``Stats``.

Every runtime action — allocation, free, upload (host→device), download (device→host),
kernel launch, wait, entry into and exit from a data lifetime, error — becomes one
``Event`` published on ``BUS``. Statistics (``acc.stats()``), and later the notify log,
timing report, traces and profiling callbacks, are subscribers of that stream; nothing
else observes the runtime. The counted actions (allocations, frees, transfers, launches)
are also offered in a compact form, ``count(kind, device, nbytes)``, to tally subscribers
such as the statistics, so that counting costs no record.

Invariants:
- Publishing costs one list lookup when nobody subscribes to that kind: producers on hot
  paths test ``BUS.wants(kind)`` before they build a record.
- Subscribers are called synchronously on the thread that performed the action, in
  subscription order; a subscriber must not call back into the runtime.
- A subscriber that raises (a profiling or error callback) never keeps the others from
  seeing the event (the ``PYACC_CHECK`` ledger among them), and never interrupts the
  action it observes: inside ``with BUS.holding():`` — every runtime verb that changes
  the table, device memory or a queue holds — its exception is kept until the outermost
  hold ends, i.e. until the action is complete and the table consistent, and raised
  then (unless the action raised an error of its own, which wins; the callback's is
  added to it as a note). Outside a hold it is raised once every subscriber has run.
"""

from __future__ import annotations

import array
import enum
import threading
import time

__all__ = ["EventKind", "Event", "EventBus", "BUS", "Stats", "STATS"]

_clock = time.perf_counter
_get_ident = threading.get_ident


class EventKind(enum.IntEnum):
    ALLOC = 0  #: device memory allocated
    FREE = 1  #: device memory freed
    UPLOAD = 2  #: host→device transfer
    DOWNLOAD = 3  #: device→host transfer
    DEVICE_COPY = 4  #: device→device transfer
    #: kernel launch (``info``: the launcher's description and the kernel's arguments,
    #: whose device arrays are valid while the kernel may run: a replay lends the kernel
    #: views that keep no memory alive, ``Device.own_view``; keep none past the kernel)
    LAUNCH = 5
    WAIT = 6  #: a wait on a queue
    ENTER_DATA = 7  #: counters of a mapping incremented (a data lifetime begins or is joined)
    EXIT_DATA = 8  #: counters of a mapping decremented (a data lifetime may end)
    REGION_ENTER = 9  #: a structured data region or compute region entered
    REGION_EXIT = 10  #: ... and left
    ERROR = 11  #: an AccError is about to be raised
    #: a timed operation (kernel, transfer) has finished running on its queue:
    #: ``start``/``timestamp`` bound it, ``info`` is the enqueue event (LAUNCH, UPLOAD ...)
    DONE = 12
    DIRECTIVE_END = 13  #: a public directive or data routine returned (checkpoints)
    RESET = 14  #: ``acc.shutdown``: every mapping ended, all device memory forgotten
    #: oversubscription (``residency``): a mapping's device block saved to runtime-owned
    #: host memory and freed (``device_begin``: the freed block; ``nbytes`` moved, 0 when
    #: the saved copy was still valid; ``info``: the entry). Published before its FREE.
    EVICT = 15
    #: ... and its data put back into a new block (``device_begin``: the new block;
    #: ``nbytes`` moved; ``info``: the entry). Published after its ALLOC, before the copy.
    RESTORE = 16
    #: an asynchronous queue waits for others on the device while the host goes on
    #: (``acc.wait_async``, ``wait=``, ``acc.wait(async_=)``; OpenACC 3.3 §2.16.2):
    #: ``queue`` the waiting queue, ``info`` the tuple of the waited ones. Published after
    #: the join, on the calling thread (a synchronous wait publishes WAIT instead)
    JOIN = 17


class Event:
    """One runtime action. Fields that do not apply stay ``None``.

    Attributes:
        kind: what happened.
        device: ``(device_type, device_num)``.
        queue: the async value the action ran on (``None`` for synchronous actions).
        nbytes: bytes allocated, freed or moved.
        name: the variable (or kernel) name, when known.
        host_begin: host address of the data, when it is host data.
        device_begin: device address, when known.
        counters: ``((structured, dynamic) before, (structured, dynamic) after)`` for
            ENTER_DATA / EXIT_DATA.
        info: anything else (the construct name, the error object ...).
        timestamp: ``time.perf_counter()`` when the action was published (for DONE and
            WAIT: when it ended).
        start: ``time.perf_counter()`` when a timed action began (DONE, WAIT), else None.
        where: the user's source location, filled in lazily by the first subscriber
            that asks (``pyacc.observe`` reads the caller's frame on the publishing
            thread), or set by the publisher (compute regions: their definition).
        thread: ``threading.get_ident()`` of the publishing thread.
    """

    __slots__ = ("kind", "device", "queue", "nbytes", "name", "host_begin", "device_begin",
                 "counters", "info", "timestamp", "start", "where", "thread")

    def __init__(self, kind, device, queue=None, nbytes=None, name=None, host_begin=None,
                 device_begin=None, counters=None, info=None, start=None, where=None):
        # a plain class: a dataclass with a default factory costs twice as much to build
        self.kind = kind
        self.device = device
        self.queue = queue
        self.nbytes = nbytes
        self.name = name
        self.host_begin = host_begin
        self.device_begin = device_begin
        self.counters = counters
        self.info = info
        self.timestamp = _clock()
        self.start = start
        self.where = where
        self.thread = _get_ident()

    def __repr__(self) -> str:
        fields = ", ".join(f"{slot}={getattr(self, slot)!r}" for slot in self.__slots__[2:9]
                           if getattr(self, slot) is not None)
        return f"Event({self.kind.name}, {self.device}, {fields})"


class _Holding:
    """``BUS.holding()``: re-entrant, per thread; subscriber exceptions raised inside are
    raised when the outermost hold of the thread ends (module docstring)."""

    __slots__ = ("_local",)

    def __init__(self):
        self._local = threading.local()

    def __enter__(self):
        local = self._local
        try:
            local.depth += 1
        except AttributeError:  # the thread's first hold
            local.depth = 1
            local.held = []
        return self

    def __exit__(self, exc_type, exc, traceback):
        local = self._local
        local.depth -= 1
        if local.depth or not local.held:
            return False
        held, local.held = local.held, []
        if exc is None:
            raise held[0]
        if hasattr(exc, "add_note"):  # the action's own error wins
            exc.add_note(f"pyacc: an event subscriber (profiling or error callback) also "
                         f"raised {type(held[0]).__name__}: {held[0]}")
        return False

    def keep(self, error: BaseException) -> bool:
        """Keep ``error`` for the end of the thread's hold; False when not holding."""
        local = self._local
        if getattr(local, "depth", 0):
            if not local.held:
                local.held.append(error)
            return True
        return False


class EventBus:
    """Subscribers per event kind; ``publish`` calls them in subscription order."""

    def __init__(self):
        self._holding = _Holding()
        self._lock = threading.Lock()
        self._by_kind: list[tuple] = [() for _ in EventKind]
        self._tallies: tuple = ()
        #: ``active[int(kind)]``: someone subscribes to ``kind``. Hot paths read this list
        #: with plain-int indexes (an IntEnum index costs more than the whole check).
        self.active: list[bool] = [False for _ in EventKind]
        #: ``silent[0]``: no subscriber listens to any kind (tallies aside): a hot path
        #: that reads this once may skip every ``active`` check and ``holding`` of its call
        self.silent: list[bool] = [True]
        #: ``tally_alone[0]``: at most one tally subscriber (the statistics), which a hot
        #: path may count for in place (``Stats.counter_row``) instead of ``count``
        self.tally_alone: list[bool] = [True]
        #: ``in_order[0]``: a subscriber must see each operation's DONE before the next
        #: operation of its queue runs (``PYACC_AUTOCOMPARE``'s host runs write host
        #: arrays that a later download writes too). Queues that publish DONE when polled
        #: (``cuda``) then complete each operation before ``submit`` returns.
        self.in_order: list[bool] = [False]
        self._in_order: tuple = ()

    def subscribe(self, callback, kinds=tuple(EventKind), *, in_order: bool = False) -> None:
        with self._lock:
            for kind in kinds:
                self._by_kind[kind] = self._by_kind[kind] + (callback,)
                self.active[kind] = True
            self.silent[0] = not any(self.active)
            if in_order:
                self._in_order += (callback,)
                self.in_order[0] = True

    def unsubscribe(self, callback, kinds=tuple(EventKind)) -> None:
        with self._lock:
            if callback in self._in_order:
                self._in_order = tuple(c for c in self._in_order if c is not callback)
                self.in_order[0] = bool(self._in_order)
            for kind in kinds:
                subscribers = list(self._by_kind[kind])
                if callback in subscribers:
                    subscribers.remove(callback)
                self._by_kind[kind] = tuple(subscribers)
                self.active[kind] = bool(subscribers)
            self.silent[0] = not any(self.active)

    def subscribe_tally(self, callback) -> None:
        """Subscribe ``callback(kind, device, nbytes)`` to the compact form of the
        counted events (alloc, free, transfers, launches): no ``Event`` is built for it,
        so statistics cost almost nothing on hot paths."""
        with self._lock:
            self._set_tallies(self._tallies + (callback,))

    def unsubscribe_tally(self, callback) -> None:
        """Undo ``subscribe_tally(callback)``."""
        with self._lock:
            tallies = list(self._tallies)
            if callback in tallies:
                tallies.remove(callback)
            self._set_tallies(tuple(tallies))

    def _set_tallies(self, tallies: tuple) -> None:
        """The tally subscribers and ``count``, which calls them (lock held): one
        subscriber (the statistics, always) is called directly, one frame less; none
        leaves the class's no-op."""
        self._tallies = tallies
        if len(tallies) == 1:
            self.count = tallies[0]
        else:
            self.__dict__.pop("count", None)
            if tallies:
                self.count = self._count_all
        self.tally_alone[0] = len(tallies) <= 1

    def count(self, kind: int, device: tuple[str, int], nbytes=None) -> None:
        """The compact form of an event, for tally subscribers (producers call
        ``BUS.count`` — looked up at each call: ``subscribe_tally`` replaces it — and,
        when ``active[kind]``, ``publish`` with the full record)."""

    def _count_all(self, kind: int, device: tuple[str, int], nbytes=None) -> None:
        for callback in self._tallies:
            callback(kind, device, nbytes)

    def holding(self) -> _Holding:
        """``with BUS.holding():`` — subscriber exceptions wait for the end of the block
        (the runtime verbs hold for the whole of their action)."""
        return self._holding

    def wants(self, kind: EventKind) -> bool:
        """True when some subscriber listens to ``kind`` (check before building records)."""
        return self.active[kind]

    def publish(self, kind: EventKind, device: tuple[str, int], queue=None, nbytes=None, name=None,
                host_begin=None, device_begin=None, counters=None, info=None, start=None,
                where=None) -> Event | None:
        """Build one ``Event`` (fields as in ``Event``), hand it to the subscribers and
        return it (None, having built nothing, when nobody subscribes to ``kind``)."""
        subscribers = self._by_kind[kind]
        if not subscribers:
            return None
        event = Event(kind, device, queue, nbytes, name, host_begin, device_begin, counters, info,
                      start, where)
        failure = None
        for callback in subscribers:
            try:
                callback(event)
            except BaseException as error:  # every subscriber still sees the event
                if failure is None:
                    failure = error
        if failure is not None and not self._holding.keep(failure):
            raise failure
        return event


BUS = EventBus()


_COUNTED = {
    EventKind.ALLOC: ("alloc_count", "alloc_bytes"),
    EventKind.FREE: ("free_count", "free_bytes"),
    EventKind.UPLOAD: ("h2d_count", "h2d_bytes"),
    EventKind.DOWNLOAD: ("d2h_count", "d2h_bytes"),
    EventKind.DEVICE_COPY: ("d2d_count", "d2d_bytes"),
    EventKind.LAUNCH: ("launch_count", None),
    EventKind.EVICT: ("evict_count", "evict_bytes"),
    EventKind.RESTORE: ("restore_count", "restore_bytes"),
}

STAT_KEYS = tuple(key for pair in _COUNTED.values() for key in pair if key)


_SLOTS: list = [None] * len(EventKind)  # int(kind) -> (count index, bytes index or None)
for _kind, (_count_key, _bytes_key) in _COUNTED.items():
    _SLOTS[_kind] = (STAT_KEYS.index(_count_key), None if _bytes_key is None else STAT_KEYS.index(_bytes_key))


class Stats:
    """Per-device counts and bytes of transfers, allocations, frees, launches, and
    oversubscription's evictions and restores (their bytes are not in ``h2d``/``d2h``).

    A tally subscriber of ``BUS``; ``snapshot(device)`` is what ``acc.stats()`` returns
    (plus the device's memory in use, which the device itself reports).

    Lock-free on the hot path: each thread adds to its own rows; ``snapshot`` sums the
    rows of every thread and subtracts the baseline taken by ``reset``.
    """

    def __init__(self, bus: EventBus):
        self._lock = threading.Lock()
        self._local = threading.local()
        self._tables: list[dict] = []  # every thread's {device: row}
        self._baseline: dict[tuple[str, int], list[int]] = {}
        #: {device: row}: counted by callers outside Python (``counter_row``)
        self._counter_rows: dict[tuple[str, int], array.array] = {}
        bus.subscribe_tally(self.add)

    def counter_row(self, device: tuple[str, int]) -> array.array:
        """A row of counts (``STAT_KEYS``' order) of ``device`` that callers outside Python
        add to in place (the express lane's launches, ``pyacc/_express_plan.c.h``; the data
        lane's copies, ``mapping/_lane_copies.c.h``), atomically under the GIL; one per
        device, summed with every thread's rows. An ``array('q')``: C adds to its int64
        items through its buffer (``pyacc/_counter_row.h``)."""
        with self._lock:
            row = self._counter_rows.get(device)
            if row is None:
                row = self._counter_rows[device] = array.array("q", bytes(8 * len(STAT_KEYS)))
                self._tables.append({device: row})
            return row

    def add(self, kind: int, device: tuple[str, int], nbytes=None) -> None:
        row = self._row(device)
        count_index, bytes_index = _SLOTS[kind]
        row[count_index] += 1
        if bytes_index is not None:
            row[bytes_index] += nbytes or 0

    def _row(self, device: tuple[str, int]) -> list[int]:
        """This thread's row of ``device``."""
        try:
            table = self._local.table
        except AttributeError:  # this thread's first count
            table = self._local.table = {}
            with self._lock:
                self._tables.append(table)
        row = table.get(device)
        if row is None:
            row = table[device] = [0] * len(STAT_KEYS)
        return row

    def settle(self, device: tuple[str, int]) -> None:
        """Count as freed every block of ``device`` still allocated: ``acc.shutdown``
        gives all of them back at once (one RESET event, not a FREE each), and
        ``acc.stats()`` then balances allocations with frees (OpenACC 3.3 §3.2.8)."""
        totals = self._totals(device)
        row = self._row(device)
        for freed_key, allocated_key in (("free_count", "alloc_count"), ("free_bytes", "alloc_bytes")):
            freed, allocated = STAT_KEYS.index(freed_key), STAT_KEYS.index(allocated_key)
            row[freed] += totals[allocated] - totals[freed]

    def _totals(self, device) -> list[int]:
        totals = [0] * len(STAT_KEYS)
        with self._lock:
            tables = list(self._tables)
        for table in tables:
            row = table.get(device)
            if row is not None:
                totals = [a + b for a, b in zip(totals, row)]
        return totals

    def snapshot(self, device: tuple[str, int]) -> dict[str, int]:
        baseline = self._baseline.get(device, [0] * len(STAT_KEYS))
        return {key: total - base for key, total, base in zip(STAT_KEYS, self._totals(device), baseline)}

    def reset(self, device: tuple[str, int]) -> None:
        self._baseline[device] = self._totals(device)


STATS = Stats(BUS)


def publish_reset(device: tuple[str, int]) -> None:
    """``acc.shutdown`` forgot every allocation of ``device``: the statistics count them
    freed, then RESET is published (the memory checkers forget the device's blocks)."""
    STATS.settle(device)
    BUS.publish(EventKind.RESET, device)
