"""Planning: what a directive will do, decided before anything changes.

Owns: the pure half of "plan, then commit" (DESIGN.md): functions from requests and the
present table to steps — ``plan_entry``, ``plan_exit``, ``plan_update`` — and the errors a
plan raises (``partly_present``, ``not_present``, ``check_writeable``). A plan validates
every array of the directive and looks each one up; it has no side effects: no counter,
table or device call changes anything, and a planning error leaves everything as it was.
The runtime (``runtime.DeviceRuntime``) then allocates, commits and, on failure, rolls back.

Steps name what they hold: ``host_data`` is the host address of the request's first
element, ``[host_begin, host_end)`` the byte extent of its elements, ``entry`` the mapping
it joins, ``device_address`` the block allocated for it (filled in by the runtime's
allocation phase, the one field a plan leaves empty).

Invariants: the caller holds the table lock for the whole of planning and commit (the
table cannot change between them); a later request of a directive sees the mappings its
earlier requests will create (``EntryAction.JOIN_NEW``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np

from . import _probe
from .entry import EntryKind, MappingEntry
from .errors import (
    InvalidArgumentError,
    NotPresentError,
    PartlyPresentError,
    PresentError,
    describe_array,
    format_range,
)
from .ranges import HostRange, Relation
from .requests import MapKind, MapRequest, Mapped, UpdateDirection, UpdateItem
from .table import Lookup, PresentTable

__all__ = [
    "EntryAction", "EntryStep", "UpdateMove", "plan_entry", "plan_create", "plan_exit",
    "plan_update", "check_update_targets", "plan_map_data",
    "plan_unmap_data", "plan_declare", "partly_present", "not_present", "check_writeable",
    "check_fits", "describe_entries",
]

_COPYOUT = MapKind.COPYOUT
_SELF = UpdateDirection.SELF
_CONTAINED = Relation.CONTAINED
_DISJOINT = Relation.DISJOINT


class EntryAction(enum.Enum):
    SKIP = "skip"  #: nothing to map (zero-size, no_create of absent data)
    INCREMENT = "increment"  #: present: join the existing entry
    JOIN_NEW = "join_new"  #: contained in a mapping created earlier in this directive
    CREATE = "create"  #: absent: allocate, maybe copy in


@dataclass(slots=True)
class EntryStep:
    """What one request of an entry directive will do."""

    request: MapRequest
    action: EntryAction
    host_data: int = 0  #: host address of the array's first element
    host_begin: int = 0  #: byte extent of its elements: [host_begin, host_end)
    host_end: int = 0
    entry: MappingEntry | None = None  #: the entry it joins (INCREMENT), or creates (CREATE)
    creator: "EntryStep | None" = None  #: the CREATE step of this directive it joins (JOIN_NEW)
    device_address: int | None = None  #: the block allocated for it (CREATE; runtime-filled)

    def contains(self, host_begin: int, host_end: int) -> bool:
        return self.host_begin <= host_begin and host_end <= self.host_end

    def overlaps(self, host_begin: int, host_end: int) -> bool:
        return self.host_begin < host_end and host_begin < self.host_end


@dataclass(slots=True)
class UpdateMove:
    """One array an ``update`` moves: through ``entry``, whose range holds its elements."""

    direction: UpdateDirection
    array: np.ndarray
    name: str | None
    entry: MappingEntry
    host_data: int  #: host address of its first element


# == entry (data regions, compute regions, enter data, declare) ============================
def plan_entry(requests, table: PresentTable, namer) -> list[EntryStep]:
    """One step per request, in order (OpenACC 3.3 §2.7.2 entry actions).

    Raises:
        NotPresentError: a ``present`` request is absent.
        PartlyPresentError: a request overlaps a mapping (or one this directive creates)
            without lying inside it.
        InvalidArgumentError: a ``copy``/``copyout`` array is read-only.
    """
    steps: list[EntryStep] = []
    creating: list[EntryStep] = []
    for request in requests:
        step = _plan_entry_one(request, creating, table, namer)
        if step.action is EntryAction.CREATE:
            creating.append(step)
        steps.append(step)
    return steps


def _plan_entry_one(request: MapRequest, creating, table: PresentTable, namer) -> EntryStep:
    array = request.array
    if array.size == 0:
        return EntryStep(request, EntryAction.SKIP)
    found = table.lookup(array)
    begin, end = found.extent.begin, found.extent.end
    if found.relation is _CONTAINED:  # (present: its exit copies back only if it ends it)
        return EntryStep(request, EntryAction.INCREMENT, found.data, begin, end, entry=found.entry)
    if request.kind.copies_out and not array.flags.writeable:
        name = request.name or namer(array)
        raise InvalidArgumentError(
            f"{request.kind.value}: {describe_array(array, name, begin)} is read-only, so its "
            "device data could not be copied back; use copyin, or pass a writeable array",
            name=name)
    if found.relation.is_partial:
        raise partly_present(array, request.name or namer(array), found)
    for creator in creating:  # mappings planned earlier in this directive
        if creator.contains(begin, end):
            return EntryStep(request, EntryAction.JOIN_NEW, found.data, begin, end, creator=creator)
        if creator.overlaps(begin, end):
            raise _partly_present_within(request, creator, found)
    if request.kind is MapKind.PRESENT:
        raise not_present(array, request.name or namer(array), found, "present clause", table)
    if request.kind is MapKind.NO_CREATE:
        return EntryStep(request, EntryAction.SKIP, found.data)
    return EntryStep(request, EntryAction.CREATE, found.data, begin, end)


def plan_create(request: MapRequest, host_data: int, host_begin: int, host_end: int) -> EntryStep:
    """The step of a ``copyin``/``create`` of data known to overlap no mapping (the
    caller's one probe said so): no second lookup."""
    array = request.array
    if array.size == 0:
        return EntryStep(request, EntryAction.SKIP)
    return EntryStep(request, EntryAction.CREATE, host_data, host_begin, host_end)


# == exit data =========================================================================
def plan_exit(requests, table: PresentTable, namer) -> list[Mapped]:
    """The requests of an exit directive that find a mapping, with it (absent data is
    skipped, API.md §8).

    Raises:
        PartlyPresentError: a request overlaps a mapping without lying inside it.
    """
    steps = []
    for request in requests:
        if request.array.size == 0:
            continue
        found = table.lookup(request.array)
        if found.relation.is_partial:
            raise partly_present(request.array, request.name or namer(request.array), found)
        if found.relation is _CONTAINED:
            steps.append(Mapped(request, found.entry, found.data))
    return steps


# == update ============================================================================
def check_update_targets(moves, namer) -> None:
    """``update self`` into a read-only array cannot land: raise before anything moves (only
    for the ``moves`` planned: absent data skipped by ``if_present`` and empty arrays move
    nothing, OpenACC 3.3 §2.14.4)."""
    for move in moves:
        if move.direction is _SELF and not move.array.flags.writeable:
            check_writeable("update self", move.array, move.name or namer(move.array) or move.entry.name)


def plan_update(items: list[UpdateItem], table: PresentTable, namer, *,
                if_present: bool) -> list[UpdateMove]:
    """The moves of an ``update`` directive, in the order given (OpenACC 3.3 §2.14.4);
    any strided view of present data may be updated.

    Raises:
        NotPresentError: absent data without ``if_present``.
        PartlyPresentError: data only partly present (even with ``if_present``).
    """
    moves = []
    for direction, array, name in items:
        if array.size == 0:
            continue
        found = table.lookup(array)
        if found.relation.is_partial:
            raise partly_present(array, name or namer(array), found)
        if found.relation is _DISJOINT:
            if if_present:
                continue
            raise not_present(array, name or namer(array), found, f"update {direction.value}", table)
        moves.append(UpdateMove(direction, array, name, found.entry, found.data))
    return moves


# == map_data / unmap_data / declare (OpenACC 3.3 §3.2.21–3.2.22, §2.13) ==================
def plan_map_data(array, device_array, name, table: PresentTable, device) -> tuple[int, int, int]:
    """``(host_begin, host_end, device_address)`` of the mapping ``acc.map_data`` will
    make (reads the device's allocation map; changes nothing).

    Raises:
        PresentError: any part of ``array`` is already present, or the device memory
            already backs another mapping.
        InvalidArgumentError: ``device_array`` is not allocated memory of this device, is
            not contiguous, or is smaller than ``array``.
    """
    found = table.lookup(array)
    if found.relation is not _DISJOINT:
        raise PresentError(
            f"acc.map_data: {describe_array(array, name, found.extent.begin)} is already "
            f"present: {describe_entries(found)}. Unmap or delete it first",
            name=name, host_range=found.extent)
    device_array = device.as_device_array(device_array)
    data, low, high = device.extent_of(device_array)
    check_fits("acc.map_data", device_array, array, describe_array(array, name))
    block = device.mappable_block(low, high)
    if block is None or low + array.nbytes > block[0] + block[1]:
        raise InvalidArgumentError(
            f"acc.map_data: device range {format_range(low, array.nbytes)} is not inside "
            "device memory allocated with acc.malloc"
            + (" or by the program (a CuPy array)" if device.type_name == "cuda" else ""))
    users = table.entries_overlapping_device(low, low + array.nbytes)
    if users:
        raise PresentError(
            f"acc.map_data: device range {format_range(low, array.nbytes)} already backs "
            f"the mapping of {users[0].describe()}")
    return found.extent.begin, found.extent.end, data


def plan_unmap_data(array, name, table: PresentTable, namer) -> MappingEntry:
    """The ``map_data`` entry that ``acc.unmap_data`` of ``array`` ends.

    Raises:
        PresentError: ``array`` was not mapped by ``map_data`` (absent included), or a
            structured region still holds it (OpenACC 3.3 §3.2.22).
    """
    found = table.lookup(array)
    entry = found.entry
    what = describe_array(array, name or namer(array), found.extent.begin)
    if entry is None or (entry.host_begin, entry.host_end) != tuple(found.extent):
        state = describe_entries(found) if found.entries else "it is not mapped"
        raise PresentError(f"acc.unmap_data: {what} was not mapped by acc.map_data: {state}", name=name)
    if entry.kind is not EntryKind.MAP_DATA:
        raise PresentError(
            f"acc.unmap_data: {what} was not mapped by acc.map_data but by a data "
            f"clause or routine: {entry.describe()}; use acc.delete / exit_data", name=name)
    if entry.structured:
        raise PresentError(
            f"acc.unmap_data: {what} is still held by {entry.structured} structured "
            f"region(s): {entry.describe()}; unmap it after the region ends", name=name)
    return entry


def plan_declare(requests, table: PresentTable, namer) -> list[EntryStep]:
    """``plan_entry`` for ``acc.declare``, where every array must be absent.

    Raises:
        PresentError: an array is already present (declared before included: a
            declaration starts its data's lifetime and cannot join another one), or two
            arrays of this call lie one inside the other.
        PartlyPresentError, InvalidArgumentError: as ``plan_entry``.
    """
    steps = plan_entry(requests, table, namer)
    for step in steps:
        if step.action is EntryAction.INCREMENT or step.action is EntryAction.JOIN_NEW:
            raise _declared_present(step, namer)
    return steps


def _declared_present(step: EntryStep, namer) -> PresentError:
    request = step.request
    name = request.name or namer(request.array)
    if step.action is EntryAction.JOIN_NEW:
        other = step.creator.request
        state = (f"it lies inside {describe_array(other.array, other.name)}, declared by "
                 "the same call")
    else:
        entry = step.entry
        state = ("it was declared already: " if entry.kind is EntryKind.DECLARE
                 else "it is mapped by another directive: ") + entry.describe()
    return PresentError(
        f"acc.declare: {describe_array(request.array, name, step.host_begin)} is already present; "
        f"{state}. A declaration starts the data lifetime of its arrays for the whole "
        "program (OpenACC 3.3 §2.13) and cannot join another one: declare each array once, "
        "before any other directive maps it (or end that mapping first)",
        name=name,
        host_range=HostRange(step.host_begin, step.host_end),
        mapping_range=(step.entry.host_range if step.entry is not None
                       else HostRange(step.creator.host_begin, step.creator.host_end)),
    )


# == the errors a plan raises ==========================================================
def check_fits(routine: str, destination, source, what: str) -> None:
    """``destination`` and ``source`` are contiguous and ``destination`` holds at least
    the bytes of ``source`` (described as ``what`` in the message)."""
    for array in (destination, source):
        if not (array.flags.c_contiguous or array.flags.f_contiguous):
            raise InvalidArgumentError(f"{routine}: {describe_array(array)} is not contiguous")
    if destination.nbytes < source.nbytes:
        raise InvalidArgumentError(
            f"{routine}: the destination has {destination.nbytes} bytes, fewer than the "
            f"{source.nbytes} bytes of {what}")


def check_writeable(what: str, array, name, role: str = "") -> None:
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


def describe_entries(found: Lookup) -> str:
    return "; ".join(entry.describe() for entry in found.entries)


def partly_present(array, name, found: Lookup) -> PartlyPresentError:
    """The error for a range that overlaps mappings without lying inside one."""
    extent = found.extent
    return PartlyPresentError(
        f"{describe_array(array, name)} at {extent} {found.relation.describe()} "
        f"{describe_entries(found)}. It is partly present (OpenACC 3.3 §2.7.3): map the "
        "whole array once and use views of it, or end the other mapping first",
        name=name,
        host_range=extent,
        mapping_range=found.entries[0].host_range,
    )


def _partly_present_within(request: MapRequest, creator: EntryStep, found: Lookup) -> PartlyPresentError:
    other = creator.request
    return PartlyPresentError(
        f"{describe_array(request.array, request.name)} at {found.extent} overlaps "
        f"{describe_array(other.array, other.name)} at "
        f"{format_range(creator.host_begin, creator.host_end - creator.host_begin)}"
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
