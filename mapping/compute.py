"""A compute region's data: the one entry and the one exit of a compute call.

Owns :func:`enter_compute` and :func:`exit_compute`, the typed :class:`ComputeTicket` the
entry returns, and :class:`ComputeMemo`, what an entry remembers so that the next call
with the same arrays can replay it.

``enter_compute`` enters a compute region's data the cheapest way that is exact
(OpenACC 3.3 §2.6.2, §2.7; API.md §6):

1. **replay** — the caller found a memo of an earlier call of the same region that
   matches these arguments (:meth:`ComputeMemo.matches`: the same host array objects in
   the same argument slots, with the same dtype and shape, and on a device with separate
   memory the same strides) and the present table is unchanged since that call (its
   ``version``): the same entries get their increments without a lookup, and the device
   arrays made for that call are used again. A synchronous call nobody observes holds
   the table lock for its kernel instead of counting (a *held* replay: atomic for every
   other thread, ``DeviceRuntime.hold_structured``). When the table changed but every
   array of the call still lies wholly inside a mapping (a data region that maps the
   same arrays anew, as a program's time step does), the replay is that of the memo
   *followed* to the table as it is now (:meth:`ComputeMemo.followed`: a new memo of
   their entries and device arrays as they are now, what a join would find), which the
   ticket carries for the caller to keep;
2. **join** — every array of the call lies wholly inside a present mapping: increments
   at once (even for an async call: counts change at once, §2.6.7), and a new memo for
   the next call;
3. **full entry** — the entry actions: present-or-create, copy-ins, all or nothing
   (``runtime.enter``).

Maps count on the counter the caller gives per parameter (``ArgumentSorter.counter_of``):
structured for OpenACC data clauses and OpenMP ``ompx_hold`` maps, dynamic for OpenMP
maps (API.md §9; a region mixing both takes the full entry). ``exit_compute`` undoes
whichever it was: after a replay or a join, the decrements when no lifetime ends by them
(the common case); otherwise the full exit (copy-backs unless the kernel failed, frees;
for the dynamic count nothing where another thread set it to 0 meanwhile).

The caller (``pyacc``'s launcher) knows the clauses, so it sorts the arguments: it passes
an :class:`ArgumentSorter`, asked only when the replay does not apply.

Invariants:
    * A memo keeps nothing alive: the host arrays and the entries are held by weak
      reference, and its device arrays are its own views that hold no memory
      (``Device.own_view``).
    * A memo never changes once made (``followed`` makes a new one), so a caller that
      read one uses it consistently whatever other threads follow meanwhile.
    * While a memo matches and the table version is unchanged, each device array it kept
      is still what ``device_array_of`` would make (the same entry, at the same device
      address, for a host array of the same layout); nobody else holds it, so nobody
      changes it in place.
    * Nothing here changes a counter directly: increments and decrements go through the
      runtime's ``join_structured``/``rejoin_structured``/``leave_structured`` and
      ``enter``/``exit_structured``, which hold the table lock and publish the events.
"""

from __future__ import annotations

import weakref
from typing import NamedTuple, Protocol

from .devices.base import Device
from .entry import Counter
from .requests import MapRequest, Mapped, StructuredMemo

__all__ = ["ArgumentSorter", "ComputeMemo", "ComputeTicket", "enter_compute", "exit_compute"]

_STRUCTURED = Counter.STRUCTURED
_DYNAMIC = Counter.DYNAMIC


class ArgumentSorter(Protocol):
    """What the caller knows of a compute region's arguments (its data clauses)."""

    def sort(self, runtime, args) -> tuple[list[int], list[tuple]]:
        """The argument slots of the arrays to map and their ``(MapKind, name)``, in
        slot order (OpenACC 3.3 §2.6.2); validates what needs no table lookup."""

    def requests(self, runtime, arrays, map_kinds) -> list[MapRequest]:
        """The validated map requests of the full entry."""

    def counter_of(self, name) -> Counter:
        """The count a map of parameter ``name`` holds: ``STRUCTURED`` for OpenACC data
        clauses and OpenMP ``ompx_hold`` maps, ``DYNAMIC`` for OpenMP maps (API.md §9)."""


class ComputeTicket(NamedTuple):
    """What ``enter_compute`` gave; ``exit_compute`` takes it back. (A named tuple: made
    by ``tuple.__new__`` on the hot path, without a Python frame.)"""

    #: The kernel's arguments: the call's, each mapped array replaced by its device
    #: array (the call's own tuple when the device shares host memory).
    device_args: object
    #: The memo of a replay or a join (None after a full entry).
    memo: object
    #: True when ``memo`` was replayed (the caller's kernel for it applies).
    replayed: bool
    #: The joined entries (replay or join; None for a replay on a device that shares
    #: host memory, where nothing is counted, and for a held replay), or None.
    entries: object
    #: The ``Mapped`` items of a full entry on the structured count, or None.
    mapped: object
    #: The call's arguments (the arrays of a full exit after a join).
    args: tuple
    #: A held replay: the table lock is held until ``exit_compute``
    #: (``DeviceRuntime.hold_structured``).
    held: bool = False
    #: The ``Mapped`` items of a full entry that took the dynamic count (OpenMP maps),
    #: released by the exit like ``target exit data``.
    released: object = ()


#: ``_ticket(ComputeTicket, (fields...))``: a ticket without ``NamedTuple.__new__``'s frame
_ticket = tuple.__new__


class ComputeMemo:
    """What a joined compute call remembers, so that the next call with the same arrays
    replays it (module docstring). Keeps nothing alive that a free would wait for.

    Two forms, by device:
    * shared host memory: the host arrays are the device arrays and nothing is counted;
      a match needs the same objects with the same dtype and ndim (the kernel's kinds);
    * separate memory: the memo keeps device arrays of its own (``Device.own_view``: they
      keep no memory alive, and nobody else can change them in place), used only while
      the table is unchanged since the memo's call, so while their blocks are allocated;
      the kernel's arguments are built from them without any check. Unless the caller
      says the kernel may return one of them to the program (``lend`` False:
      ``KernelInfo.may_return_arrays``), where it would outlive its block: then the
      entries' device arrays are made at each replay (``device_array_of``), as the
      join makes them.

    Attributes:
        slots: The argument slots of the mapped arrays.
        map_kinds: Their ``(MapKind, name)`` (for a full exit after a replay).
        counter: The count the call's maps hold (structured; dynamic for OpenMP maps).
    """

    __slots__ = ("slots", "map_kinds", "counter", "_structured_memo", "_host", "_shared", "_kept")

    def __init__(self, runtime, args, slots, map_kinds, structured_memo, device_args, lend=True):
        self.slots = slots
        self.map_kinds = map_kinds
        self.counter = structured_memo.counter
        self._structured_memo = structured_memo  # the runtime's: table version, weak entries
        device = runtime.device
        self._shared = device.shares_host_memory
        self._kept = None
        if self._shared:
            self._host = tuple((slot, weakref.ref(args[slot]), args[slot].dtype, args[slot].ndim,
                                args[slot].flags.writeable) for slot in slots)
            return
        self._host = tuple((slot, weakref.ref(args[slot]), args[slot].dtype, args[slot].shape,
                            args[slot].strides, args[slot].flags.writeable) for slot in slots)
        if lend:
            self._kept = tuple((slot, device.own_view(device_args[slot])) for slot in slots)

    def matches(self, args) -> bool:
        """Whether ``args`` hold the same host array objects in the mapped slots, with
        the same dtype and ndim, still writeable if they were (a read-only array is the
        full path's to refuse, or to copy nothing back into), and on separate memory the
        same shape and strides (a deprecated in-place ``strides`` change can move the
        bytes out of the mapping). Changes nothing; the table's version is checked by the
        replay itself."""
        if self._shared:
            for slot, reference, dtype, ndim, writeable in self._host:
                array = args[slot]
                if reference() is not array or array.ndim != ndim or (
                        array.dtype is not dtype and array.dtype != dtype) or (
                        writeable and not array.flags.writeable):
                    return False
            return True
        for slot, reference, dtype, shape, strides, writeable in self._host:
            array = args[slot]
            if reference() is not array or array.shape != shape or array.strides != strides or (
                    array.dtype is not dtype and array.dtype != dtype) or (
                    writeable and not array.flags.writeable):
                return False
        return True

    def express(self, runtime, args):
        """What pyacc's express lane (``pyacc/_fastcall.c``) must check and launch to
        repeat this memo's replay for ``args`` (just replayed) without Python:
        ``(version_holder, table, version, arrays, exact)``; None where the replay does
        more than that (a device whose launch is not ``Device.launch``, a memo that
        lends no device arrays, a runtime that records each use). ``arrays``: ``(slot,
        host array, device array or None)``; ``exact``: the same host objects with the
        same layout (separate memory; the table's version is checked under its lock,
        held for the kernel), else arrays of the same kinds (shared memory: nothing is
        mapped)."""
        device = runtime.device
        if "launch" in vars(device) or type(device).launch is not Device.launch:
            return None  # (a fault plan or a device's own launch; the lane checks the
            # device's instance dict at each call, as a plan may be installed later)
        if self._shared:
            return None, None, 0, tuple((slot, args[slot], None) for slot in self.slots), False
        if self._kept is None or runtime.tracks_use:
            return None
        table = runtime.table
        return (table.version_holder, table, self._structured_memo.version,
                tuple((slot, args[slot], view) for slot, view in self._kept), True)

    def arrays(self, args) -> list:
        """The mapped arrays among ``args``."""
        return [args[slot] for slot in self.slots]

    def followed(self, runtime, args) -> ComputeMemo | None:
        """This memo moved to the present table as it is now, for ``args``: a new memo
        of the same slots, kinds and counter, whose entries are those holding the arrays
        now, at the table's version, and whose device arrays are made anew from them, as
        a join would find them — nothing counted; or None when an array is not wholly
        inside a mapping (the launcher's full entry then decides, as for a first call),
        while oversubscribing, and on shared memory (nothing is mapped there: nothing to
        follow). For a table that changed since the memo's call (a data region that maps
        the arrays anew, as a program's time step does), or for other host arrays of the
        same dtype and layout in the mapped slots (the caller checked that they are
        sorted as the memo's were: ``pyacc``'s ``CallPlan.follow``). A memo never changes
        once made, so a replay that read it meanwhile uses one consistent memo."""
        if self._shared:
            return None
        table = runtime.table
        with table.locked():  # (re-entrant: the express lane calls it holding the lock)
            arrays = self.arrays(args)
            entries = runtime.containing_all(arrays)
            if entries is None:
                return None
            memo = _new_memo(ComputeMemo)
            memo.slots, memo.map_kinds, memo.counter = self.slots, self.map_kinds, self.counter
            memo._shared = False
            memo._structured_memo = StructuredMemo.of(entries, table.version, self.counter)
            memo._host = tuple([(slot, weakref.ref(array), array.dtype, array.shape, array.strides,
                                 array.flags.writeable) for slot, array in zip(self.slots, arrays)])
            memo._kept = None
            if self._kept is not None:
                own_view, array_of = runtime.device.own_view, runtime.device_array_of
                memo._kept = tuple([(slot, own_view(array_of(entry, array)))
                                    for slot, entry, array in zip(self.slots, entries, arrays)])
            return memo

    def replay(self, runtime, args, hold=False, follow=True) -> ComputeTicket | None:
        """Replay the memo's call for ``args`` (which ``matches``): while the present
        table is unchanged since that call, the same entries get their structured
        increments — or, with ``hold`` (a synchronous call nobody observes), the table
        lock is held instead until ``exit_compute`` — and the ticket has the kernel's
        arguments; when it changed, the replay of the memo ``followed`` to the table as
        it is now (once: ``follow``), whose ticket carries that new memo; else None,
        changing nothing."""
        if self._shared:  # no counts; the host arrays are the device arrays
            return _ticket(ComputeTicket, (args, self, True, None, None, args, False, ()))
        if hold:
            if not runtime.hold_structured(self._structured_memo):
                return self._replay_followed(runtime, args, hold) if follow else None
            entries = None
        else:
            entries = runtime.rejoin_structured(self._structured_memo)
            if entries is None:
                return self._replay_followed(runtime, args, hold) if follow else None
        if self._kept is not None:
            device_args = _substituted(args, self._kept)
        else:
            try:
                if entries is None:  # held: the entries, for device arrays made anew
                    entries = [reference() for reference in self._structured_memo]
                device_args = _substituted(args, zip(self.slots, map(runtime.device_array_of, entries,
                                                                     self.arrays(args))))
            except BaseException:  # nothing entered after all
                exit_compute(runtime, _ticket(ComputeTicket, (None, self, True, entries, None, args,
                                                              hold, ())), runtime.device.sync_queue,
                             copy_back=False)
                raise
        return _ticket(ComputeTicket, (device_args, self, True, entries, None, args, hold, ()))

    def _replay_followed(self, runtime, args, hold) -> ComputeTicket | None:
        memo = self.followed(runtime, args)
        return None if memo is None else memo.replay(runtime, args, hold, follow=False)


#: a memo made by ``ComputeMemo.followed``, its fields set there (no ``__init__``)
_new_memo = object.__new__


def enter_compute(runtime, args, queue, sorter: ArgumentSorter, memo: ComputeMemo | None = None,
                  *, hold: bool = False, lend: bool = True) -> ComputeTicket:
    """Enter the data of a compute call with arguments ``args``: replay ``memo`` (the
    caller checked ``memo.matches(args)``) while the table is unchanged since its call;
    else join data that is all present; else the full entry (module docstring). Maps
    count on the counter ``sorter.counter_of`` gives (structured; dynamic for OpenMP
    maps). ``hold``: the call is synchronous and nobody observes events, so a replay may
    hold the table lock instead of counting (``ComputeMemo.replay``). ``lend``: a new
    memo may lend the kernel device arrays of its own (not when the kernel may return
    one: ``ComputeMemo``). All or nothing: on an exception no counter has changed."""
    if memo is not None:
        ticket = memo.replay(runtime, args, hold)
        if ticket is not None:
            return ticket
    slots, map_kinds = sorter.sort(runtime, args)
    arrays = [args[slot] for slot in slots]
    counters = [sorter.counter_of(name) for _, name in map_kinds]
    if len(set(counters)) > 1:  # OpenMP maps beside ompx_hold maps
        return _enter_mixed(runtime, args, queue, sorter, slots, arrays, map_kinds, counters)
    counter = counters[0] if counters else _STRUCTURED
    memos = []
    entries = runtime.join_structured(arrays, memos, counter)
    if entries is not None:
        device_args = _substituted(args, zip(slots, map(runtime.device_array_of, entries, arrays)))
        memo = ComputeMemo(runtime, args, slots, map_kinds, memos[0], device_args, lend)
        return _ticket(ComputeTicket, (device_args, memo, False, entries, None, args, False, ()))
    mapped = runtime.enter(sorter.requests(runtime, arrays, map_kinds), counter, queue)
    device_args = _substituted(args, zip(slots, map(runtime.device_array, mapped)))
    if counter is _DYNAMIC:
        return _ticket(ComputeTicket, (device_args, None, False, None, [], args, False, mapped))
    return _ticket(ComputeTicket, (device_args, None, False, None, mapped, args, False, ()))


def _enter_mixed(runtime, args, queue, sorter, slots, arrays, map_kinds, counters):
    """The full entry of a region whose OpenMP maps (dynamic count, OpenMP 5.2 §5.8.3)
    sit beside ``ompx_hold`` maps (structured count): the first enter like ``target
    enter data``, the others like a data region. All or nothing: when the second entry
    fails, the first is released again. Not replayed (no memo)."""
    requests = sorter.requests(runtime, arrays, map_kinds)
    dynamic = [(slot, request) for slot, request, counter in zip(slots, requests, counters)
               if counter is _DYNAMIC]
    held = [(slot, request) for slot, request, counter in zip(slots, requests, counters)
            if counter is not _DYNAMIC]
    released = runtime.enter([request for _, request in dynamic], _DYNAMIC, queue)
    try:
        mapped = runtime.enter([request for _, request in held], _STRUCTURED, queue)
    except BaseException:
        runtime.exit_structured(released, queue, copy_back=False, counter=_DYNAMIC)
        raise
    device_args = _substituted(args, zip([slot for slot, _ in dynamic + held],
                                         map(runtime.device_array, released + mapped)))
    return _ticket(ComputeTicket, (device_args, None, False, None, mapped, args, False, released))


def exit_compute(runtime, ticket: ComputeTicket, queue, *, copy_back: bool = True) -> None:
    """The exit actions of a compute call entered with ``ticket``: after a replay or a
    join, its decrements when no lifetime ends by them; else the full exit (copy-backs
    of ``copy``/``copyout`` data unless ``copy_back`` is False — the kernel failed —,
    frees once ``queue`` has passed them). Maps on the dynamic count leave like ``target
    exit data``: nothing for a count another thread set to 0 meanwhile."""
    if ticket.held:  # a held replay counted nothing: let the others at the table again
        runtime.release_hold()
        return
    entries = ticket.entries
    if entries is not None:
        memo = ticket.memo
        if runtime.leave_structured(entries, memo.counter):
            return
        mapped = [Mapped(MapRequest(kind, array, name), entry) for array, (kind, name), entry
                  in zip(memo.arrays(ticket.args), memo.map_kinds, entries)]
        runtime.exit_structured(mapped, queue, copy_back=copy_back, counter=memo.counter)
        return
    if ticket.released:
        runtime.exit_structured(ticket.released, queue, copy_back=copy_back, counter=_DYNAMIC)
    if ticket.mapped:  # (None: a replay on shared memory, where nothing was counted)
        runtime.exit_structured(ticket.mapped, queue, copy_back=copy_back)


def _substituted(args, replacements) -> list:
    """``args`` as a list, with the ``(slot, device array)`` ``replacements`` put in."""
    device_args = list(args)
    for slot, device_array in replacements:
        device_args[slot] = device_array
    return device_args
