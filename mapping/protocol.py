"""The runtime protocol: the verbs every device's runtime implements, and their records.

Owns: ``MappingRuntime`` — the abstract protocol that ``runtime.DeviceRuntime`` (separate
memory: ``emulated``, ``cuda``) and ``shared.SharedMemoryRuntime`` (shared memory:
``host``) implement side by side; neither inherits the other's behaviour, and every verb
is abstract here, so a verb added to the protocol must be written for both (a runtime
that forgets one cannot be created) — and ``MappingRecord``, one row of
``acc.present_table()``.

What ``pyacc`` may call on a runtime is exactly what is declared here, plus the
attributes ``device``, ``table`` (a ``PresentTable``; always empty for shared memory),
``namer`` (finds a variable name for an array; pyacc sets it) and ``lane`` (a
``_probe.DataLane``: the data API's present-data verbs in one C call each — ``enter``,
``leave``, ``upload`` and ``download`` answer None, changing nothing, for every case but
the plain one, and the caller then calls ``enter_one``/``leave_present``/``exit_dynamic``/
``update_one``; a runtime's lane never changes: pyacc's routines remember it).

Threading: every verb may be called from any host thread; a verb that changes the table
holds the table lock (``table.locked()``) for its whole duration. Queries that only find
an entry (``is_present``, ``deviceptr``, ``hostptr``) run without it (``deviceptr`` takes
it under oversubscription, to restore or hand out the device copy); queries that read
counts (``refcounts``, ``records``) take it in ``runtime.DeviceRuntime``, because a
compute call holding the lock (``DeviceRuntime.hold_structured``) stands for structured
counts it does not write (``shared.SharedMemoryRuntime`` counts nothing: it answers
constants).
"""

from __future__ import annotations

import abc
from dataclasses import dataclass

import numpy as np

from .entry import Counter
from .errors import format_range

__all__ = ["MappingRuntime", "MappingRecord"]


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
    #: oversubscription (API.md §10): the device copy is saved in host memory for now
    #: (``device_begin`` is where it was); it is restored before its next use
    evicted: bool = False

    def __str__(self) -> str:
        label = self.name or "?"
        return (
            f"{format_range(self.host_begin, self.nbytes)} -> {self.device_begin:#x}  "
            f"{label} shape={self.shape} dtype={self.dtype}  "
            f"structured={self.structured} dynamic={self.dynamic} {self.kind}"
            + ("  evicted" if self.evicted else "")
        )


class MappingRuntime(abc.ABC):
    """The verbs of one device (OpenACC 3.3 §2.6–2.7, §2.13–2.14, §3.2)."""

    # -- entry and exit (data regions, compute regions, enter/exit data, routines) --------
    @abc.abstractmethod
    def enter(self, requests, counter, queue, *, at_once=True):
        """Entry actions of the requests; their ``Mapped`` outcomes (all or nothing).
        ``at_once`` False (data directives): while oversubscribing, the requests' data
        need not fit in device memory together (API.md §10)."""

    @abc.abstractmethod
    def exit_structured(self, mapped, queue, *, copy_back=True, counter=Counter.STRUCTURED) -> None:
        """Exit actions of a data or compute region for what its ``enter`` mapped."""

    @abc.abstractmethod
    def exit_dynamic(self, requests, queue, *, finalize=False) -> None:
        """``exit data`` / ``acc.copyout`` / ``acc.delete`` (all or nothing)."""

    @abc.abstractmethod
    def join_structured(self, arrays, memos=None, counter=Counter.STRUCTURED):
        """Compute-call fast path: increments (of ``counter``) of present arrays, or None;
        ``memos`` (a list) receives the join's ``StructuredMemo``."""

    @abc.abstractmethod
    def rejoin_structured(self, memo):
        """``join_structured`` again from its ``StructuredMemo`` while the table is
        unchanged, or None."""

    @abc.abstractmethod
    def leave_structured(self, entries, counter=Counter.STRUCTURED) -> bool:
        """Undo ``join_structured`` when no lifetime ends (True), else change nothing."""

    @abc.abstractmethod
    def enter_one(self, kind, array, counter, queue=None):
        """``acc.copyin``/``acc.create`` of one contiguous array; its device array."""

    @abc.abstractmethod
    def leave_present(self, array, *, finalize=False, queue=None) -> bool:
        """``acc.delete`` fast path: decrement data that stays present (True), or nothing."""

    @abc.abstractmethod
    def update(self, items, queue, *, if_present=False) -> None:
        """``update self/device`` of ``UpdateItem`` records, in order."""

    @abc.abstractmethod
    def update_one(self, direction, array, queue, *, name=None, if_present=False) -> None:
        """``update`` of one array (``acc.update_device``/``acc.update_self``)."""

    @abc.abstractmethod
    def declare(self, requests):
        """``acc.declare``: map for the rest of the program."""

    @abc.abstractmethod
    def end_declarations(self) -> None:
        """End every ``acc.declare`` lifetime (``acc.shutdown``, program exit)."""

    @abc.abstractmethod
    def map_data(self, array, device_array, name=None) -> None:
        """``acc.map_data``."""

    @abc.abstractmethod
    def unmap_data(self, array, name=None) -> None:
        """``acc.unmap_data``."""

    # -- queries -----------------------------------------------------------------------
    @abc.abstractmethod
    def is_present(self, array) -> bool:
        """Every element of ``array`` is present."""

    @abc.abstractmethod
    def refcounts(self, array) -> tuple[int, int]:
        """``(structured, dynamic)`` of the mapping holding ``array``; (0, 0) if none."""

    @abc.abstractmethod
    def deviceptr(self, array):
        """The device array of present ``array``, or None."""

    @abc.abstractmethod
    def hostptr(self, device_array):
        """The host array whose device copy is ``device_array``, or None."""

    @abc.abstractmethod
    def device_array(self, mapped):
        """The device array for a ``Mapped`` outcome of ``enter``."""

    @abc.abstractmethod
    def device_array_of(self, entry, array):
        """The device array of ``array`` inside ``entry`` (from ``join_structured``)."""

    @abc.abstractmethod
    def records(self) -> list[MappingRecord]:
        """Every mapping, in host-address order."""

    # -- raw memory (``raw_memory``) ------------------------------------------------------
    @abc.abstractmethod
    def malloc(self, shape, dtype):
        """``acc.malloc``."""

    @abc.abstractmethod
    def free(self, device_array) -> None:
        """``acc.free``."""

    @abc.abstractmethod
    def memcpy_to_device(self, device_array, array, queue) -> None:
        """``acc.memcpy_to_device``."""

    @abc.abstractmethod
    def memcpy_from_device(self, array, device_array, queue) -> None:
        """``acc.memcpy_from_device``."""

    @abc.abstractmethod
    def memcpy_device(self, destination, source, queue) -> None:
        """``acc.memcpy_device``."""

    # -- residency (API.md §10; ``oversubscribe``, ``residency``) --------------------------
    #: True only while oversubscription is on (a plain attribute: the compute path reads
    #: it on every call and then calls ``note_use``)
    tracks_use: bool = False

    @abc.abstractmethod
    def set_oversubscribe(self, enabled: bool) -> None:
        """``acc.set_oversubscribe``: evict unused device copies when memory runs out."""

    @abc.abstractmethod
    def note_use(self, entries, queue=None, written=None) -> bool:
        """Entries a kernel is about to use on ``queue``: restored, stamped, kept resident
        while in use; True when something was restored."""

    @abc.abstractmethod
    def end_use(self) -> None:
        """The calling thread's synchronous work on its noted entries is over."""

    @abc.abstractmethod
    def prefetch(self, array, queue=None, *, if_present=False, name=None) -> None:
        """``acc.prefetch``: bring present data's device copy back ahead of use."""

    @abc.abstractmethod
    def wont_use(self, array, name=None) -> None:
        """``acc.wont_use``: present data's device copy is evicted first."""

    # -- lifetime ------------------------------------------------------------------------
    @abc.abstractmethod
    def shutdown(self) -> None:
        """End every data lifetime and free all device memory (§3.2.8)."""

    @abc.abstractmethod
    def after_fork_in_child(self) -> None:
        """In the child of ``os.fork``: new locks, the parent's queues forgotten."""
