"""``PYACC_CHECK=race``: work on shared data that nothing orders (API.md §11).

Owns: ``RaceChecker``: operations, their queues' order and the reports. The bytes an
operation may touch — ``Access``, a kernel's ``footprint`` — are ``_footprint``'s
(``footprint`` is re-exported here).

OpenACC 3.3 §2.16.1: operations on one async queue run in order, and different queues
(the synchronous one included) run in any order with respect to each other unless a
``wait`` orders them. A race is an operation that touches data which *unfinished* work on
another queue writes, or that writes data such work reads, with nothing ordering the two.
The checker follows the event stream:

- every enqueue event is one *operation* with the byte ranges it reads and writes:
  a transfer (UPLOAD, DOWNLOAD, DEVICE_COPY: an ``update``, a data region's or compute
  region's copy, ``acc.acquire``'s copies) reads its source and writes its destination;
  a kernel (LAUNCH) writes the elements its stores may reach in the arrays
  ``KernelInfo.written`` names and reads the elements its loads may reach
  (``footprint``: the index ranges of its subscripts, evaluated at the launch with the
  call's scalars and shapes; the whole array where the analysis cannot bound them);
- an operation is *pending* from its enqueue event until its DONE (the queue ran it;
  on ``cuda`` published when the host polls the stream), until a host ``wait`` covering
  its queue (WAIT: also the work that queue had joined), or until its device block is
  freed (FREE: the queues have passed it) or the device reset (RESET);
- a new operation on queue W is checked against each pending operation A on another
  queue (each host thread's synchronous queue is a queue of its own): they race when
  one writes bytes the other touches and A is not ordered before it — ordered means the
  same queue, or W joined A's queue after A was queued (``acc.wait_async``, ``wait=``,
  ``acc.wait(async_=)``; joins compose: a vector clock per queue).

Ranges are device (or host) byte ranges, per address space: the host's memory (also the
``host`` device's), and each other device's. Two accesses overlap when their byte hulls
do and — when either is strided — their element sets share bytes
(``numpy.shares_memory`` on address-only views that are never read); views of one
mapping overlap wherever their elements do.

A finding is an ``acc.RaceWarning`` at the user's line of the new operation, naming both
operations (kernel and region file:line, or the copy's file:line; their queues), the
array, the bytes both touch and the fix (``acc.wait``, ``acc.wait_async``/``wait=``, or
the same queue); ``PYACC_CHECK=race:error`` raises ``acc.RaceError`` instead, once the
action that found it is queued or done (``BUS.holding``). Each (operation, operation,
array) is reported once. Quiet by construction on ordered work: a wait, a join, the same
queue, work whose DONE was seen (or that ``async_test`` found complete: its DONE was
published first), synchronous programs (a thread's own synchronous work is complete when
its next action starts).

Cost: an operation's accesses (and a transfer's array name) are worked out only when it
is first compared with an unordered pending one — a synchronous program pays for the
events and one source location per operation — and a kernel's index boxes are kept per
(integer scalars, shapes) of its calls.

Limits: only pyacc's operations are seen — host code that reads a host array while a
copy to it is queued is not (``acc.acquire``'s entry and exit copies are); work skipped
behind a failed operation publishes no DONE and is finished by the host wait that
reports the failure (WAIT), not by ``AsyncResult.result()``, which publishes none.

Joins: a queue that waits for others on the device (``acc.wait_async``, ``wait=``)
publishes ``JOIN`` (``pyacc.mapping.events``) after the join; a host wait publishes WAIT.

Threading: subscribers run on the publishing thread — enqueue events and WAIT on the
program's threads, DONE and FREE also on queue worker threads — so every state change
is under ``_lock``; a report is made after the lock is released, and only for enqueue
events (never on a queue's thread). Off, the mode costs nothing: nothing is subscribed
or wrapped.
"""

from __future__ import annotations

import threading
import warnings

import numpy as np

from pyacc.mapping import BUS, EventKind, RaceError, RaceWarning
from pyacc.mapping.errors import format_range

from .._names import user_frame, variable_name
from ._footprint import footprint, whole
from ._locate import Location, location_of

__all__ = ["RaceChecker", "footprint"]

_ENQUEUES = (EventKind.LAUNCH, EventKind.UPLOAD, EventKind.DOWNLOAD, EventKind.DEVICE_COPY)
_KINDS = _ENQUEUES + (EventKind.DONE, EventKind.WAIT, EventKind.FREE, EventKind.RESET)
_JOIN = EventKind.JOIN
_HOST = "host"  # the host's address space (also the ``host`` device's)
_SPEC = "OpenACC 3.3 §2.16.1: work on different queues runs in any order unless a wait orders it"


# == operations ===============================================================================
class _Op:
    """One operation: its queue key and sequence number on it, where it came from, and —
    computed at the first comparison, so that work nothing else overlaps costs no
    analysis — its accesses (``accesses``) and its description (``what``)."""

    __slots__ = ("key", "number", "where", "queue", "device", "_what", "_accesses")

    def __init__(self, key, where, queue, device, what, accesses):
        self.key, self.where, self.queue, self.device = key, where, queue, device
        self._what, self._accesses = what, accesses  # callables until first asked
        self.number = 0

    @property
    def accesses(self) -> list:
        if callable(self._accesses):
            self._accesses = self._accesses()
        return self._accesses

    @accesses.setter
    def accesses(self, value) -> None:
        self._accesses = value

    @property
    def what(self) -> str:
        if callable(self._what):
            self._what = self._what()
        return self._what

    def describe(self) -> str:
        return f"{self.what} on {_queue_words(self.queue, self.device)}"


def _key(event):
    """The queue an enqueue event's operation runs on: ``(device, async value)``, or
    ``("sync", thread)`` — each thread's synchronous work is in order by itself."""
    return (event.device, event.queue) if event.queue is not None else ("sync", event.thread)


def _queue_words(queue, device) -> str:
    label = "{} device {}".format(*device)
    return f"the synchronous queue of {label}" if queue is None else f"queue {queue} of {label}"


def _space(device, host_side: bool):
    return _HOST if host_side or device[0] == "host" else device


def _kernel_accesses(info, args, space) -> list:
    """``footprint``; should its analysis fail on a construct it does not know, the
    whole of every array argument (what it would assume for an unbounded subscript)."""
    try:
        return footprint(info, args, space)
    except Exception:  # noqa: BLE001 - a checker must never break the program it checks
        accesses = []
        for name, value in zip(info.kernel_params, args):
            accesses += whole(space, value, name, False)
            if name in info.written:
                accesses += whole(space, value, name, True)
        return accesses


class _TransferName:
    """The name of a transfer's array: the event's, else the name the user's frame gives
    its host array (``update`` events carry none), read on the publishing thread only."""

    __slots__ = ("event", "name")

    def __init__(self, event):
        self.event, self.name = event, event.name

    def __call__(self) -> str:
        if self.name is None:
            event = self.event
            host = event.info[0] if event.kind is EventKind.DOWNLOAD else \
                event.info[1] if event.kind is EventKind.UPLOAD else None
            found = None
            if isinstance(host, np.ndarray) and threading.get_ident() == event.thread:
                found = variable_name(host)
            self.name = found or "an array"
        return self.name


def _transfer_accesses(event, name) -> list:
    """A transfer reads its source and writes its destination (host arrays in the
    host's space)."""
    destination, source = event.info
    device = event.device
    return (whole(_space(device, event.kind is EventKind.UPLOAD), source, name, False)
            + whole(_space(device, event.kind is EventKind.DOWNLOAD), destination, name, True))


# == the checker ===============================================================================
class RaceChecker:
    """``PYACC_CHECK=race`` (``error=True``: ``race:error``); module docstring."""

    def __init__(self, *, error: bool = False):
        self.error = error
        self._lock = threading.RLock()
        self._pending: dict = {}  # queue key -> {enqueue Event: _Op}, in queue order
        self._numbers: dict = {}  # queue key -> operations queued on it so far
        self._clocks: dict = {}  # queue key -> {queue key: number}: what it has joined
        self._reported: set = set()
        self.findings: list[str] = []

    # -- installation ------------------------------------------------------------------------
    def install(self) -> None:
        BUS.subscribe(self, _KINDS + (_JOIN,))

    def uninstall(self) -> None:
        BUS.unsubscribe(self, _KINDS + (_JOIN,))

    # -- the event stream ----------------------------------------------------------------------
    def __call__(self, event) -> None:
        kind = event.kind
        if kind is EventKind.DONE:
            with self._lock:
                ops = self._pending.get(_key(event.info))
                if ops is not None:
                    ops.pop(event.info, None)
        elif kind is EventKind.WAIT:
            self._waited(event.device, event.queue)
        elif kind is EventKind.FREE:
            self._freed(event.device, event.device_begin, event.nbytes)
        elif kind is EventKind.RESET:
            self._reset(event.device)
        elif kind is _JOIN:
            self.joined(event.device, event.queue, event.info)
        else:
            op = self._operation(event)
            if op is not None:
                found = self._enqueue(event, op)
                if found is not None:
                    self._report(*found)

    def joined(self, device, waiting, waited) -> None:
        """Queue ``waiting`` (an async value) of ``device`` runs its next operations only
        after everything queued so far on each of ``waited`` (async values; None and
        ``waiting`` itself are skipped) — ``acc.wait_async``, ``wait=`` (§2.16.2, §3.2.11)."""
        if waiting is None:
            return  # a host wait: its WAIT events follow
        with self._lock:
            clock = self._clocks.setdefault((device, waiting), {})
            for number in waited:
                if number is None or number == waiting:
                    continue
                key = (device, number)
                clock[key] = max(clock.get(key, 0), self._numbers.get(key, 0))
                for other, seen in self._clocks.get(key, {}).items():  # what it had joined
                    if other != (device, waiting):
                        clock[other] = max(clock.get(other, 0), seen)

    def _waited(self, device, queue) -> None:
        """The host waited for ``queue`` (None: every queue) of ``device``: its work is
        complete, and so is the work it had joined."""
        with self._lock:
            keys = [key for key in self._numbers if key[0] == device and (queue is None or key[1] == queue)]
            done = {key: self._numbers[key] for key in keys}
            for key in keys:
                for other, seen in self._clocks.get(key, {}).items():
                    done[other] = max(done.get(other, 0), seen)
            for key, number in done.items():
                ops = self._pending.get(key)
                if ops:
                    self._pending[key] = {event: op for event, op in ops.items() if op.number > number}

    def _freed(self, device, begin, nbytes) -> None:
        """A device block was freed: no queue can still touch it (``Device.release``)."""
        if begin is None:
            return
        space, end = _space(device, False), begin + max(nbytes or 0, 1)
        with self._lock:
            for ops in self._pending.values():
                for op in ops.values():
                    op.accesses = [a for a in op.accesses
                                   if not (a.space == space and a.low < end and begin < a.high)]

    def _reset(self, device) -> None:
        with self._lock:
            self._pending = {key: ops for key, ops in self._pending.items() if key[0] != device}
            self._clocks = {key: clock for key, clock in self._clocks.items() if key[0] != device}

    # -- operations ------------------------------------------------------------------------------
    def _operation(self, event) -> _Op | None:
        """The operation an enqueue event stands for (no lock held; its source location
        is read now, on the publishing thread)."""
        device, queue = event.device, event.queue
        if event.kind is EventKind.LAUNCH:
            info, args = event.info
            if info is None:
                return None
            frame = user_frame()
            region = event.where
            call = "" if frame is None else f", called at {frame.f_code.co_filename}:{frame.f_lineno}"
            what = f"kernel '{event.name}' (region {_at(region)}{call})"
            where = region if frame is None else Location(frame.f_code.co_filename, frame.f_lineno,
                                                          frame.f_code.co_name)
            space = _space(device, False)
            return _Op(_key(event), where, queue, device, what,
                       lambda: _kernel_accesses(info, args, space))
        where = location_of(event)
        name = _TransferName(event)
        if queue is not None:
            name()  # async: it may be compared from another thread, after this frame is gone
        verb = {EventKind.UPLOAD: "copy to the device", EventKind.DOWNLOAD: "copy to the host",
                EventKind.DEVICE_COPY: "device-to-device copy"}[event.kind]
        return _Op(_key(event), where, queue, device, lambda: f"{verb} of '{name()}' at {_at(where)}",
                   lambda: _transfer_accesses(event, name()))

    def _enqueue(self, event, op: _Op):
        """Check ``op`` against the pending operations, then make it pending; returns the
        first new finding ``(op, other, access, other access, overlap)`` or None."""
        with self._lock:
            found = None
            clock = self._clocks.get(op.key, {})
            for other in self._unordered(op.key, clock):
                conflict = _conflict(op, other)
                if conflict is not None:
                    mine, theirs, overlap = conflict
                    identity = (op.where, other.where, mine.name, theirs.name)
                    if identity not in self._reported:
                        self._reported.add(identity)
                        found = (op, other, mine, theirs, overlap)
                        break
            number = self._numbers.get(op.key, 0) + 1
            self._numbers[op.key] = op.number = number
            self._pending.setdefault(op.key, {})[event] = op
        return found

    def _unordered(self, key, clock):
        """The pending operations of other queues that no join orders before the next
        operation of queue ``key`` (lock held)."""
        for other_key, ops in self._pending.items():
            if other_key == key or not ops:
                continue
            joined = clock.get(other_key, 0)
            for other in ops.values():
                if other.number > joined:
                    yield other

    # -- reports -----------------------------------------------------------------------------------
    def _report(self, op, other, mine, theirs, overlap) -> None:
        text = f"PYACC_CHECK=race: {_message(op, other, mine, theirs, overlap)}"
        with self._lock:
            self.findings.append(text)
        if self.error:
            raise RaceError(text, name=mine.name, operation=op.what, other=other.what,
                            queue=op.queue, other_queue=other.queue, device_range=overlap)
        where = op.where
        warnings.warn_explicit(text, RaceWarning, where.file if where else "?", where.line if where else 0)


def _conflict(op: _Op, other: _Op):
    """The first pair of accesses of the two operations that overlap with a write."""
    for mine in op.accesses:
        for theirs in other.accesses:
            if mine.writes or theirs.writes:
                overlap = mine.overlap(theirs)
                if overlap is not None:
                    return mine, theirs, overlap
    return None


def _message(op, other, mine, theirs, overlap) -> str:
    verb = "writes" if mine.writes else "reads"
    their_verb = "writes" if theirs.writes else "reads"
    name = f"'{mine.name}'" + ("" if theirs.name == mine.name else f" (its '{theirs.name}')")
    return (f"{op.describe()} {verb} {name} {format_range(*overlap)} while {other.describe()}, "
            f"queued and not finished, {their_verb} it, and nothing orders the two ({_SPEC}). "
            f"Fix: {_fix(op, other)}")


def _fix(op, other) -> str:
    """What orders the two: a host wait, a device-side join, or the same queue."""
    at = _at(op.where)
    if other.queue is None:  # another thread's synchronous work
        return (f"order the two threads (a lock or an event around both), or queue the work on "
                f"one async queue")
    same = f"or queue it on the same queue (async_={other.queue})"
    if op.queue is None:
        return f"acc.wait({other.queue}) before {at}, {same}"
    return (f"make queue {op.queue} wait for queue {other.queue} without blocking the host "
            f"(acc.wait_async({other.queue}, {op.queue}) before {at}, or wait=[{other.queue}] on "
            f"it), acc.wait({other.queue}) before {at}, {same}")


def _at(where) -> str:
    return "?" if where is None else f"{where.file}:{where.line}"
