"""``PYACC_CHECK=stale``: missing ``update device`` and lost host updates (API.md §11).

Owns: ``StaleChecker``. Each mapping of a device with separate memory carries the state
of its two copies (StarPU's replicate states), kept from the event stream:

- a *snapshot* of the host bytes as they were at the mapping's last transfer (its
  creation, a copy-in or ``update device`` of any part, a copy-back or ``update self``
  of any part, once it has arrived), with that transfer's kind and file:line;
- whether a kernel wrote the device copy since (the LAUNCH event's written arrays).

The host copy has changed since the last transfer when its bytes differ from the
snapshot (compared only where and when it matters, so the host is never instrumented):

- a compute region about to read a mapping (a LAUNCH whose kernel reads elements of the
  array: the kernel's own parameters and the globals it reads) whose host bytes, in the
  part the kernel sees, differ from the snapshot: a **missing update device**;
- a copy back (copyout, ``copy`` at a region's exit, ``update self``) about to overwrite
  host bytes that differ from the snapshot: a **lost host update**.

Each finding is an ``acc.StaleDataWarning`` (reported at the user's line) naming the
array, the region (its file:line and the call's) or the copy's file:line, and the last
transfer's kind and file:line; with ``PYACC_CHECK=stale:error`` an ``acc.StaleDataError``
is raised instead, once the action that found it is complete. A finding re-bases the
snapshot: each change is reported once. While a copy back is queued and has not
arrived, its mapping is not checked (the host is in flux). Only ``emulated`` devices
(API.md §11): on ``cuda`` the checker does nothing (its device arrays are CuPy arrays,
and its queues publish DONE only when polled); the snapshots cost one copy of every
mapped array's bytes.

With ``PYACC_AUTOCOMPARE=1`` too, the host twin of each kernel writes the program's host
arrays: ``host_run`` brackets it, and the bytes it changes that the program had not
changed since the last transfer join the snapshot (they are the host-only run's values,
not host updates never sent); a change the program had made is still reported.
"""

from __future__ import annotations

import ast
import threading
import warnings
from contextlib import contextmanager

import numpy as np

from pyacc.mapping import BUS, EventKind, StaleDataError, StaleDataWarning

from .._names import user_frame
from ._entries import EntryIndex, host_view
from .checking import live_runtimes
from ._locate import Location, location_of

__all__ = ["StaleChecker", "element_reads"]

_KINDS = (EventKind.ENTER_DATA, EventKind.EXIT_DATA, EventKind.UPLOAD, EventKind.DOWNLOAD,
          EventKind.LAUNCH, EventKind.DONE, EventKind.FREE, EventKind.RESET, EventKind.EVICT,
          EventKind.RESTORE)
#: the device types whose mappings the checker follows (module docstring)
_CHECKED = ("emulated",)
_SHAPE_ATTRS = frozenset({"shape", "size", "ndim", "dtype", "itemsize", "nbytes", "strides"})


class _Replica:
    __slots__ = ("snapshot", "last", "device_written", "pending")

    def __init__(self, snapshot, last):
        self.snapshot = snapshot  # host bytes at the last transfer (flat uint8)
        self.last = last  # (what, Location) of the last transfer
        self.device_written = None  # Location of the last kernel that wrote it since
        self.pending = 0  # copies back queued, not yet arrived


def element_reads(info) -> frozenset:
    """The kernel parameters (free parameters included) whose *elements* the kernel may
    read: every use of the name except as the array of an element store (``z[i] = v``),
    of a shape attribute (``z.shape``) or of ``len(z)``. (``KernelInfo.read`` counts any
    use of the name, stores included.)"""
    tree = info.source.tree
    params = set(info.kernel_params)
    parents = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            parents[child] = node
    reads = set()
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Name) and node.id in params and isinstance(node.ctx, ast.Load)):
            continue
        parent = parents.get(node)
        if isinstance(parent, ast.Subscript) and parent.value is node and isinstance(parent.ctx, ast.Store) \
                and not isinstance(parents.get(parent), ast.AugAssign):
            continue
        if isinstance(parent, ast.Attribute) and parent.attr in _SHAPE_ATTRS:
            continue
        if isinstance(parent, ast.Call) and getattr(parent.func, "id", None) == "len":
            continue
        reads.add(node.id)
    return frozenset(reads)


class StaleChecker:
    def __init__(self, *, error: bool = False):
        self.error = error
        self._lock = threading.RLock()
        self._index = EntryIndex()
        self._reads: dict = {}  # KernelInfo -> element_reads
        self.findings: list[str] = []

    def install(self) -> None:
        BUS.subscribe(self, _KINDS)
        self._adopt()

    def _adopt(self) -> None:
        """Mappings present when checking begins: their host copies as they are now are
        taken as the last transfer's."""
        began = Location("<PYACC_CHECK=stale switched on>", 0, "?")
        for runtime in live_runtimes():
            device = runtime.device
            if device.identity[0] not in _CHECKED:
                continue
            with runtime.table.locked(), self._lock:
                for entry in runtime.table.entries():
                    if self._index.find(device.identity, device.view(entry.device_address,
                                                                     entry.host_array)) is None:
                        self._index.add(device.identity, entry, _Replica(
                            entry.host_bytes().copy(), ("present when checking began", began)))

    def uninstall(self) -> None:
        BUS.unsubscribe(self, _KINDS)

    def __call__(self, event) -> None:
        identity = event.device
        if identity[0] not in _CHECKED:  # host: one copy, nothing can be stale; cuda: above
            return
        kind = event.kind
        with self._lock:
            if kind is EventKind.LAUNCH:
                found = self._launch(event)
            elif kind is EventKind.UPLOAD:
                found = self._upload(event)
            elif kind is EventKind.DOWNLOAD:
                found = self._download(event)
            elif kind is EventKind.DONE:
                found = self._done(event)
            elif kind is EventKind.ENTER_DATA:
                found = self._entered(event)
            elif kind is EventKind.EXIT_DATA:
                if event.counters[1] == (0, 0):
                    self._index.ended(identity, event.info)
                found = None
            elif kind is EventKind.FREE:
                self._index.freed(identity, event.device_begin)
                found = None
            elif kind is EventKind.EVICT:  # oversubscription: the replicates are unchanged
                self._index.evicted(identity, event.info, event.device_begin)
                found = None
            elif kind is EventKind.RESTORE:
                self._index.restored(identity, event.info)
                found = None
            else:  # RESET
                self._index.reset(identity)
                found = None
        if found is not None:
            self._report(*found)

    # -- the replicate states -------------------------------------------------------------
    def _entered(self, event):
        entry = event.info
        if event.counters[0] == (0, 0):
            snapshot = entry.host_bytes().copy()
            self._index.add(event.device, entry, _Replica(snapshot, ("mapped", location_of(event))))
        return None

    def _upload(self, event):
        destination, source = event.info
        found = self._index.find(event.device, destination)
        if found is not None:
            entry, replica, offset = found
            view = host_view(replica.snapshot, offset, destination)
            view[...] = _as_bytes(source)
            replica.last = ("copied to the device", location_of(event))
            replica.device_written = None
        return None

    def _download(self, event):
        destination, source = event.info
        found = self._index.find(event.device, source)
        if found is None:
            return None
        entry, replica, offset = found
        location_of(event)  # on the program's thread, for the DONE that completes it
        problem = None
        if not replica.pending:
            changed = _changed(entry, replica, offset, source)
            if changed:
                where = location_of(event)
                both = (f"; the device copy was also written since, by the kernel at "
                        f"{_at(replica.device_written)} (both copies changed)"
                        if replica.device_written else "")
                problem = ("lost host update", entry, (
                    f"copying '{_name(entry, event)}' back to the host at {_at(where)} overwrites "
                    f"{changed} of the host copy changed since its last transfer "
                    f"({_last(replica)}), never sent to the device (a lost host update: "
                    f"'update device' it first, or make the host change after the copy back)"
                    f"{both}"), where)
                host_view(replica.snapshot, offset, source)[...] = host_view(
                    entry.host_bytes(), offset, source)
        replica.pending += 1
        return problem

    def _done(self, done):
        enqueued = done.info
        if enqueued.kind is not EventKind.DOWNLOAD:
            return None
        destination, source = enqueued.info
        found = self._index.find(done.device, source)
        if found is not None:
            entry, replica, offset = found
            host_view(replica.snapshot, offset, source)[...] = _as_bytes(source)
            replica.last = ("copied to the host", location_of(enqueued))
            replica.device_written = None
            replica.pending = max(replica.pending - 1, 0)
        return None

    def _launch(self, event):
        info, args = event.info
        if info is None:
            return None
        reads = self._reads.get(info)
        if reads is None:
            reads = self._reads[info] = element_reads(info)
        problem = None
        for name, array in zip(info.kernel_params, args):
            if not isinstance(array, np.ndarray):
                continue
            found = self._index.find(event.device, array)
            if found is None:
                continue
            entry, replica, offset = found
            if name in reads and not replica.pending and problem is None:
                changed = _changed(entry, replica, offset, array)
                if changed:
                    frame = user_frame()
                    call = "" if frame is None else f", called at {frame.f_code.co_filename}:{frame.f_lineno}"
                    region = event.where
                    problem = ("missing update device", entry, (
                        f"kernel '{event.name}' ({_at(region)}{call}) reads '{name}' on the device, "
                        f"but {changed} of its host copy '{entry.name or name}' changed since the "
                        f"last transfer ({_last(replica)}) and were never sent (a missing "
                        f"'update device': acc.update(device=[...]) before the region)"),
                        Location(frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name)
                        if frame is not None else region)
                    host_view(replica.snapshot, offset, array)[...] = host_view(
                        entry.host_bytes(), offset, array)
            if name in info.written:
                replica.device_written = event.where
        return problem

    @contextmanager
    def host_run(self, device, arrays):
        """Around ``PYACC_AUTOCOMPARE``'s host run of a kernel that writes the program's
        host arrays behind the device arrays ``arrays`` of device ``device``: checks wait
        for it (the host is in flux), and afterwards each byte it changed whose value
        before it equalled the snapshot takes the new value in the snapshot."""
        with self._lock:
            before = []
            for array in arrays:
                found = self._index.find(device, array)
                if found is not None:
                    entry, replica, offset = found
                    before.append((array, entry, replica, offset,
                                   host_view(entry.host_bytes(), offset, array).copy()))
            yield
            for array, entry, replica, offset, was in before:
                now = host_view(entry.host_bytes(), offset, array)
                snapshot = host_view(replica.snapshot, offset, array)
                ran = (now != was) & (was == snapshot)
                if ran.any():
                    snapshot[ran] = now[ran]

    def _report(self, problem, entry, message, where) -> None:
        text = f"PYACC_CHECK=stale: {message}"
        self.findings.append(text)
        if self.error:
            raise StaleDataError(text, name=entry.name, problem=problem)
        warnings.warn_explicit(text, StaleDataWarning, where.file if where else "?",
                               where.line if where else 0)


def _as_bytes(array) -> np.ndarray:
    """A host array's element bytes, shaped ``shape + (itemsize,)``."""
    array = np.ascontiguousarray(array)
    return array.reshape(-1).view(np.uint8).reshape(array.shape + (array.itemsize,))


def _changed(entry, replica, offset, like) -> str | None:
    """Words on the host elements (in ``like``'s geometry) that differ from the snapshot,
    or None."""
    host = host_view(entry.host_bytes(), offset, like)
    snapshot = host_view(replica.snapshot, offset, like)
    if like.flags.c_contiguous:  # the common case: one comparison of 8-byte words
        host_flat, snapshot_flat = host.reshape(-1), snapshot.reshape(-1)
        if host_flat.size % 8 == 0:
            host_flat, snapshot_flat = host_flat.view(np.uint64), snapshot_flat.view(np.uint64)
        if np.array_equal(host_flat, snapshot_flat):
            return None
    differ = (host != snapshot).any(axis=-1)
    count = int(np.count_nonzero(differ))
    if not count:
        return None
    first = np.argwhere(differ)[0]
    index = tuple(int(i) for i in first)
    index = index[0] if len(index) == 1 else list(index)
    return f"{count} of {like.size} element(s) (the first at index {index})"


def _name(entry, event) -> str:
    return event.name or entry.name or "?"


def _at(where) -> str:
    return "?" if where is None else f"{where.file}:{where.line}"


def _last(replica) -> str:
    what, where = replica.last
    return f"{what} at {_at(where)}"
