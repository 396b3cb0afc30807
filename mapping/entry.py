"""A present-table entry: one mapped host range, its device copy and its two counters.

Owns: ``MappingEntry``, ``EntryKind`` and ``Counter``, and the counter transitions of
OpenACC 3.3 §2.6.7 and §2.7.2 as small named methods (after LLVM's ``incRefCount`` /
``decShouldRemove`` / ``resetRefCount``), with ``would_end`` — the question a fast path
asks *before* it changes anything — and the batch forms the hot paths use
(``increment_all``, ``leave_all``, ``exit_is_plain`` and their structured and dynamic forms).

This is the only module that writes ``structured`` and ``dynamic``; the runtime and the
planner read them and call these methods.

Invariants:
- ``structured`` and ``dynamic`` are stored separately and never go below 0; the data is
  present iff ``structured + dynamic > 0``.
- a ``MAP_DATA`` entry (``acc.map_data``) keeps ``dynamic >= 1`` until ``unmap_data``
  removes it: no present decrement or finalize takes it to 0 (§3.2.21).
- a ``DECLARE`` entry (``acc.declare``, §2.13) is pinned the same way until its
  declaration ends (``end_declaration``: ``acc.shutdown`` or interpreter exit); unlike
  ``MAP_DATA`` it owns its device block.
- ``host_array`` holds a strong reference to the mapped host buffer, so its address
  cannot be reused while it is mapped (API.md §2).
- the entry owns the device block iff ``owns_memory``; ``device_address`` changes only
  when oversubscription (``residency``) evicts the block and restores the data into a new
  one: while ``evicted``, the entry has no device block (``device_address`` is the old,
  freed one) and its device bytes live in ``saved``, host memory the runtime owns — never
  the user's ``host_array``. The residency fields (``saved``, ``evicted``, ``dirty``,
  ``last_use``, ``wont_use``, ``uses``, ``handed``) are written only by ``residency``.

Threading: counters change only with the device's table lock held (the runtime verbs hold
it across a directive). Counts are read with the lock held too (``acc.refcounts`` and
``acc.present_table``: ``DeviceRuntime.refcounts`` / ``records``; the checker, ``check``):
a compute call holding the lock (``DeviceRuntime.hold_structured``) stands for structured
increments it does not write, which a read without the lock would miss. Finding an entry
(``is_present``, ``deviceptr`` without oversubscription) reads no count and takes no lock.
"""

from __future__ import annotations

import enum
import sys
from dataclasses import dataclass, field

import numpy as np

from .errors import format_range
from .ranges import HostRange

__all__ = ["EntryKind", "Counter", "MappingEntry", "increment_all", "increment_referenced",
           "leave_all_structured", "structured_exit_ends", "leave_all_dynamic", "dynamic_exit_is_plain",
           "leave_all", "exit_is_plain"]


class EntryKind(enum.Enum):
    NORMAL = "normal"  #: created by a data clause or data routine; owns its device block
    MAP_DATA = "map_data"  #: created by acc.map_data over user-provided device memory
    DECLARE = "declare"  #: created by acc.declare: present until shutdown or program exit

    @property
    def pinned(self) -> bool:
        """The dynamic count stays at least 1 until the lifetime is ended explicitly."""
        return self is EntryKind.MAP_DATA or self is EntryKind.DECLARE


class Counter(enum.Enum):
    STRUCTURED = "structured"  #: data regions and compute regions
    DYNAMIC = "dynamic"  #: enter/exit data and the data routines


# Enum members as module constants: attribute access on an Enum class costs ~0.1 µs
# on Python 3.11, and these are read on the hot path of every present increment.
_STRUCTURED = Counter.STRUCTURED
_MAP_DATA = EntryKind.MAP_DATA
_DECLARE = EntryKind.DECLARE


# Slots make the counters' reads and writes cheaper on the hot paths; call-site memos hold
# entries by weak reference, and ``weakref_slot`` needs Python 3.11.
_SLOTS = {"slots": True, "weakref_slot": True} if sys.version_info >= (3, 11) else {}


@dataclass(eq=False, **_SLOTS)
class MappingEntry:
    """One mapping of ``[host_begin, host_end)`` to device memory at ``device_address``."""

    host_begin: int
    host_end: int
    host_array: np.ndarray  # strong reference: keeps the host buffer alive
    device_address: int
    kind: EntryKind = EntryKind.NORMAL
    name: str | None = None
    structured: int = 0
    dynamic: int = 0
    #: host bytes of the mapped range as one flat uint8 array (built on first use)
    _host_bytes: np.ndarray | None = field(default=None, repr=False)
    #: the device array of ``host_array`` itself (built on first use; the common case
    #: ``acc.copyin(a)`` of the array that was mapped returns it without a new view)
    device_array: object = field(default=None, repr=False)
    # -- residency (``residency``: oversubscription, StarPU's replicates) ---------------
    #: True while the device block is evicted (the data is in ``saved``)
    evicted: bool = field(default=False, repr=False)
    #: runtime-owned host copy of the device bytes (flat uint8), kept after a restore
    saved: np.ndarray | None = field(default=None, repr=False)
    #: the device copy may differ from ``saved`` (written since the last save/restore)
    dirty: bool = field(default=True, repr=False)
    #: LRU stamp of the last device access (``Residency.clock``)
    last_use: int = field(default=0, repr=False)
    #: ``acc.wont_use`` hint: evicted first (cleared by the next use)
    wont_use: bool = field(default=False, repr=False)
    #: asynchronous queues it was used on: resident until each is idle
    uses: list | None = field(default=None, repr=False)
    #: weak references to device arrays handed to the program (``deviceptr``...)
    handed: list | None = field(default=None, repr=False)

    @property
    def nbytes(self) -> int:
        return self.host_end - self.host_begin

    @property
    def host_range(self) -> HostRange:
        return HostRange(self.host_begin, self.host_end)

    @property
    def owns_memory(self) -> bool:
        return self.kind is not _MAP_DATA

    @property
    def is_present(self) -> bool:
        return self.structured + self.dynamic > 0

    @property
    def counters(self) -> tuple[int, int]:
        return (self.structured, self.dynamic)

    # -- transitions (OpenACC 3.3 §2.7.2 data clause actions) --------------------------
    def increment(self, counter: Counter) -> None:
        """Present increment (or the first count of a new entry)."""
        if counter is _STRUCTURED:
            self.structured += 1
        else:
            self.dynamic += 1

    def decrement(self, counter: Counter, *, finalize: bool = False) -> None:
        """Present decrement: −1 only if > 0; ``finalize`` sets the dynamic count to 0.

        A MAP_DATA or DECLARE entry's dynamic count stays at least 1 (OpenACC 3.3
        §3.2.21; §2.13: declared data is present for the whole program).
        """
        if counter is _STRUCTURED:
            if self.structured > 0:
                self.structured -= 1
            return
        kind = self.kind
        floor = 1 if kind is _MAP_DATA or kind is _DECLARE else 0
        if finalize:
            self.dynamic = min(self.dynamic, floor)
        elif self.dynamic > floor:
            self.dynamic -= 1

    def would_end(self, counter: Counter, *, finalize: bool = False, times: int = 1) -> bool:
        """Whether ``times`` present decrements of ``counter`` (``decrement``) would end
        the data lifetime — both counters at 0 — asked before anything changes (LLVM's
        ``decShouldRemove``)."""
        if counter is _STRUCTURED:
            return not self.dynamic and self.structured <= times
        kind = self.kind
        if kind is _MAP_DATA or kind is _DECLARE:  # pinned: the dynamic count stays ≥ 1
            return False
        return not self.structured and (finalize or self.dynamic <= times)

    def declare(self) -> None:
        """The first count of a new ``acc.declare`` mapping (OpenACC 3.3 §2.13): the
        entry becomes DECLARE and its dynamic count is pinned at 1 — exit operations and
        routines, even with finalize, leave it present (as for ``map_data``)."""
        self.kind = _DECLARE
        self.dynamic += 1

    def end_declaration(self) -> None:
        """The declaration's lifetime ends (``acc.shutdown``, program exit): the pin and
        every dynamic count go (dynamic = 0), and the entry is an ordinary mapping again
        — a structured region still holding it ends it as usual."""
        self.kind = EntryKind.NORMAL
        self.dynamic = 0

    def restore(self, counters: tuple[int, int]) -> None:
        """Undo: put back counters saved before a directive that failed part-way."""
        self.structured, self.dynamic = counters

    def reset(self) -> None:
        """Both counters to 0: the lifetime ends at once (``unmap_data``, ``shutdown``;
        LLVM's ``resetRefCount``)."""
        self.structured = self.dynamic = 0

    # -- addresses -------------------------------------------------------------------
    def device_address_of(self, host_address: int) -> int:
        """Device address corresponding to a host address inside the entry."""
        return self.device_address + (host_address - self.host_begin)

    def host_bytes(self) -> np.ndarray:
        """The mapped host range as a flat ``uint8`` array (shares memory)."""
        if self._host_bytes is None:
            flat = self.host_array.reshape(-1, order="A")
            self._host_bytes = flat.view(np.uint8)
        return self._host_bytes

    def describe(self) -> str:
        label = f"'{self.name}' " if self.name else ""
        array = self.host_array
        return (
            f"{label}(shape {array.shape}, dtype {array.dtype}) mapped at "
            f"{format_range(self.host_begin, self.nbytes)} "
            f"[structured={self.structured}, dynamic={self.dynamic}"
            f"{'' if self.kind is EntryKind.NORMAL else ', ' + self.kind.value}]"
        )


# -- batch transitions (the hot paths: one call for all the arrays of a directive) ---------
def increment_all(entries, counter: Counter) -> None:
    """``entry.increment(counter)`` for each entry (an entry listed twice gets two)."""
    if counter is _STRUCTURED:
        for entry in entries:
            entry.structured += 1
    else:
        for entry in entries:
            entry.dynamic += 1


def increment_referenced(references, counter: Counter = Counter.STRUCTURED) -> list:
    """The entries behind weak ``references`` (all alive: the caller knows the table is
    unchanged), each with an increment of ``counter``; returned in order."""
    entries = [reference() for reference in references]
    increment_all(entries, counter)
    return entries


def structured_exit_ends(entries) -> bool:
    """Whether one structured decrement per listed entry (an entry listed k times gets k)
    would end some entry's lifetime: ``would_end`` for the whole list, before anything
    changes."""
    for entry in entries:
        if not entry.dynamic and entry.structured <= entries.count(entry):
            return True
    return False


def dynamic_exit_is_plain(entries) -> bool:
    """Whether one dynamic decrement per listed entry (k for an entry listed k times)
    takes back increments that are all still there and ends no lifetime: no entry's
    count was set to 0 meanwhile (an OpenMP ``map(delete:)``: its exit must then do
    nothing), none is pinned (``map_data``, ``declare``), and none reaches (0, 0)."""
    for entry in entries:
        times = entries.count(entry)
        if entry.dynamic < times or entry.kind is not EntryKind.NORMAL or (
                not entry.structured and entry.dynamic <= times):
            return False
    return True


def leave_all_dynamic(entries) -> bool:
    """One dynamic decrement per listed entry when ``dynamic_exit_is_plain``; else
    nothing changes and the answer is False (the caller runs the full exit)."""
    if not dynamic_exit_is_plain(entries):
        return False
    for entry in entries:
        entry.dynamic -= 1
    return True


def leave_all_structured(entries) -> bool:
    """One structured decrement per listed entry unless that would end a lifetime
    (``structured_exit_ends``, asked first): then nothing changes and the answer is
    False (the caller runs the full exit, which copies back and frees)."""
    for entry in entries:
        if not entry.dynamic and entry.structured <= entries.count(entry):
            return False
    for entry in entries:
        entry.structured -= 1
    return True


def exit_is_plain(entries, counter: Counter) -> bool:
    """Whether one decrement of ``counter`` per listed entry leaves the full exit nothing
    to do: no lifetime ends (``structured_exit_ends``), and for the dynamic count the
    increments are all still there (``dynamic_exit_is_plain``)."""
    if counter is _STRUCTURED:
        return not structured_exit_ends(entries)
    return dynamic_exit_is_plain(entries)


def leave_all(entries, counter: Counter) -> bool:
    """``leave_all_structured`` or ``leave_all_dynamic``, by ``counter``."""
    return leave_all_structured(entries) if counter is _STRUCTURED else leave_all_dynamic(entries)
