"""``PYACC_CHECK=memory``: device memory checking on the ``emulated`` device, like
compute-sanitizer's memcheck for device memory.

Owns: ``MemoryChecker`` and ``check_point``. Every block of an ``emulated`` device has a
tail zone after its last byte, checking on or off (``mapping.devices.emulated``); while the
checker is installed, every new block also gets guard zones and freed blocks are
poisoned and quarantined (``set_memcheck``). The checker checks them at the check points
and raises ``acc.MemoryCheckError`` naming the array, its block ``[0x…,+nbytes]`` and the
bytes touched (an array is named from its mapping's ENTER_DATA or EXIT_DATA event, else
from the present table while it is mapped):

- a kernel launch or a copy whose device array does not lie inside a live block (it
  reaches into a guard zone, or lies in a freed block: a stale device array) — at once,
  when the operation is queued (the launch still completes first: pyacc's actions are
  never interrupted half-way), and again when it runs (a block freed while the operation
  was queued);
- after each kernel and copy has run: the guard and tail zones of every live block (an
  out-of-bounds write; blocks allocated before checking began have their tail zones);
- at every wait, the end of every directive and routine (``acc.free``, ``acc.delete`` ...),
  and the exit of every region: the guard and tail zones, and the poison of every
  quarantined block (a write through a stale device array after its block was freed),
  plus what was found on a queue's worker thread, and what frees found, since;
- on demand (``check_point``: ``pyacc.testing.check("memory")`` as a statement, or
  where its with-block starts), installed or not: all of the above. A write past a block
  that was freed before the check point is found too (its free checked its tail zone),
  named only when the checker listened while it was mapped.

What a queue's worker thread finds is reported by the next check point on a program
thread (the wait that covers the queue, at the latest). Each changed guard or poison byte
is reported once (the pattern is restored). Only writes are seen (a read leaves the
patterns as they are), only on ``emulated`` devices, and a write of exactly the pattern
byte (0x41 guard, 0x3D poison: ``mapping.devices.memcheck``) goes unnoticed.
"""

from __future__ import annotations

import sys
import threading

import numpy as np

from pyacc.mapping import BUS, EventKind, MemoryCheckError
from pyacc.mapping.devices.emulated import set_memcheck
from pyacc.mapping.errors import format_range

from .. import _devices
from ._entries import device_extent
from ._locate import location_of

__all__ = ["MemoryChecker", "check_point"]

_KINDS = (EventKind.LAUNCH, EventKind.UPLOAD, EventKind.DOWNLOAD, EventKind.DEVICE_COPY,
          EventKind.DONE, EventKind.WAIT, EventKind.DIRECTIVE_END, EventKind.REGION_EXIT,
          EventKind.ENTER_DATA, EventKind.EXIT_DATA, EventKind.RESET)
_TRANSFERS = (EventKind.UPLOAD, EventKind.DOWNLOAD, EventKind.DEVICE_COPY)
_FULL = (EventKind.WAIT, EventKind.DIRECTIVE_END)


class MemoryChecker:
    def __init__(self):
        self._lock = threading.Lock()
        self._names: dict = {}  # (device identity, block address) -> array name
        self._pending: dict = {}  # device identity -> [message] found on worker threads
        self._devices: dict = {}

    def install(self) -> None:
        set_memcheck(True)
        BUS.subscribe(self, _KINDS)

    def uninstall(self) -> None:
        BUS.unsubscribe(self, _KINDS)
        set_memcheck(False)

    def _device(self, identity):
        device = self._devices.get(identity)
        if device is None:
            for runtime in _devices.live_runtimes(identity[0]):
                if runtime.device.number == identity[1]:
                    device = self._devices[identity] = runtime.device
        return device

    # -- events ----------------------------------------------------------------------------
    def __call__(self, event) -> None:
        identity = event.device
        if identity[0] != "emulated":
            return
        kind = event.kind
        if kind is EventKind.ENTER_DATA or kind is EventKind.EXIT_DATA:
            # a block's name: from its mapping's creation, or (a mapping made before the
            # checker listened) from its end, which may free the block
            entry = event.info
            counters = event.counters[0] if kind is EventKind.ENTER_DATA else event.counters[1]
            if counters == (0, 0) and entry.name:
                self._names[(identity, entry.device_address)] = entry.name
            return
        if kind is EventKind.RESET:
            self._devices.pop(identity, None)
            self._pending.pop(identity, None)
            return
        device = self._device(identity)
        if device is None or not hasattr(device, "memcheck_scan"):
            return
        if kind is EventKind.DONE:
            self._done(device, event)
        elif kind is EventKind.LAUNCH or kind in _TRANSFERS:  # reported once it has run
            self._keep(device, self._arrays_outside(device, event))
        else:  # WAIT, DIRECTIVE_END, REGION_EXIT: a check point on a program thread
            where = location_of(event)
            self._report(device, self._scan(device, poison=kind in _FULL),
                         f"at {event.name or event.info or kind.name.lower()} "
                         f"({where.file}:{where.line})")

    def _done(self, device, done) -> None:
        enqueued = done.info
        problems = self._arrays_outside(device, enqueued, running=True)
        problems += self._scan(device, poison=False, after=enqueued)
        if done.queue is None:
            self._report(device, problems, f"after {self._what(enqueued)} ran")
        elif problems:  # a queue's worker thread: the next check point reports it
            self._keep(device, [(f"{text} (found after {self._what(enqueued)} ran on queue "
                                 f"{done.queue})", name, finding) for text, name, finding in problems])

    def _keep(self, device, problems) -> None:
        if problems:
            with self._lock:
                self._pending.setdefault(device.identity, []).extend(problems)

    def _report(self, device, problems, when) -> None:
        """Raise what was found, with what earlier operations left pending — unless an
        exception is already on its way out (the problems wait for the next check
        point rather than replace it)."""
        with self._lock:
            problems = self._pending.pop(device.identity, []) + problems
            if not problems:
                return
            if sys.exc_info()[1] is not None:
                self._pending[device.identity] = problems
                return
        self._raise(problems, when)

    # -- findings --------------------------------------------------------------------------
    def _arrays(self, event):
        """``(label, device array)`` of the device arrays an operation touches."""
        if event.kind is EventKind.LAUNCH:
            info, args = event.info
            names = info.kernel_params if info is not None else ()
            return [(f"argument '{name}'", array) for name, array in zip(names, args)
                    if isinstance(array, np.ndarray)]
        destination, source = event.info
        if event.kind is EventKind.UPLOAD:
            return [("destination", destination)]
        if event.kind is EventKind.DOWNLOAD:
            return [("source", source)]
        return [("destination", destination), ("source", source)]

    def _arrays_outside(self, device, event, running=False) -> list[str]:
        problems = []
        for label, array in self._arrays(event):
            extent = device_extent(array)
            if extent is None:
                continue
            finding = device.memcheck_state(extent[1], extent[2])
            if finding is not None:
                when = "while it ran" if running else "when queued"
                span = format_range(extent[1], extent[2] - extent[1])
                if finding.kind == "use after free":
                    how = f"lies in the freed block of {self._block(device, finding)}"
                else:
                    how = (f"reaches bytes {format_range(*finding.touched)} {finding.detail} of "
                           f"{self._block(device, finding)}")
                problems.append(self._problem(device, finding,
                    f"{finding.kind}: the {label} of {self._what(event)} (shape {array.shape}, "
                    f"dtype {array.dtype}) at {span} {how} ({when})"))
        return problems

    def _scan(self, device, *, poison: bool, after=None) -> list[str]:
        return [self._problem(device, finding,
                              f"{finding.kind}: bytes {format_range(*finding.touched)} written "
                              f"{finding.detail} of {'the freed block of ' if finding.kind == 'use after free' else ''}"
                              f"{self._block(device, finding)}")
                for finding in device.memcheck_scan(poison=poison)]

    def _problem(self, device, finding, text):
        return (text, self._name(device, finding), finding)

    def _block(self, device, finding) -> str:
        name = self._name(device, finding)
        if name:
            owner = f"'{name}'"
        elif finding.kind == "out of bounds" and finding.freed:
            owner = ("an array whose mapping ended before this check point (its name is known "
                     "when PYACC_CHECK=memory is on while it is mapped)")
        else:
            owner = "acc.malloc memory"
        return f"{owner} (device block {format_range(*finding.block)})"

    def _name(self, device, finding):
        """The name of the array whose device block the finding is in: as its mapping
        was announced while the checker listened, else its live mapping's (a live block
        mapped before the checker was installed), else None (``acc.malloc`` memory, or a
        block freed unnamed)."""
        name = self._names.get((device.identity, finding.block[0]))
        if name or finding.freed:  # (a freed block's address may be another's by now)
            return name
        begin, nbytes = finding.block
        for runtime in _devices.live_runtimes(device.identity[0]):
            if runtime.device is device:
                for entry in runtime.table.entries_overlapping_device(begin, begin + max(nbytes, 1)):
                    if entry.name:
                        return entry.name
        return None

    @staticmethod
    def _what(event) -> str:
        if event.kind is EventKind.LAUNCH:
            where = event.where
            at = f" ({where.file}:{where.line})" if where is not None else ""
            return f"kernel '{event.name}'{at}"
        label = {EventKind.UPLOAD: "upload", EventKind.DOWNLOAD: "download",
                 EventKind.DEVICE_COPY: "device copy"}[event.kind]
        return f"the {label}" + (f" of '{event.name}'" if event.name else "")

    def _raise(self, problems, when) -> None:
        texts = [text for text, _, _ in problems]
        _, name, finding = problems[0]
        raise MemoryCheckError(
            f"PYACC_CHECK=memory: {len(problems)} device memory error(s) found {when}:\n  - "
            + "\n  - ".join(texts), name=name, block=finding.block, touched=finding.touched,
            kind=finding.kind, findings=tuple(texts))


def check_point(where: str) -> None:
    """A memory check point now, on the calling thread (``pyacc.testing.check("memory")``
    called as a statement, or where its with-block starts): every ``emulated`` device
    in use is scanned — the guard and tail zones of its live blocks (blocks allocated
    before checking began included: every block has a tail zone), its quarantined
    blocks, and what its frees found meanwhile — and what is found, with what the
    installed checker's queues left pending, raises ``acc.MemoryCheckError`` naming the
    array, its block and the bytes (``where`` says which check point). Without the checker
    installed a throwaway one names the arrays from the present table."""
    from . import active  # the package imports this module

    checker = active("memory") or MemoryChecker()
    for runtime in _devices.live_runtimes("emulated"):
        device = runtime.device
        if hasattr(device, "memcheck_scan"):
            checker._report(device, checker._scan(device, poison=True), where)
