"""OpenMP map clauses → the mapping runtime's requests (OpenMP 5.2 §5.8.3, §5.8.9).

Owns: the OpenMP reference-count semantics on pyacc's present table, built only from the
runtime verbs the OpenACC directives use (``enter``, ``exit_dynamic``,
``exit_structured``, ``update``) through ``pyacc._devices.current_runtime()``:

- **One count per mapping.** OpenMP maps — structured (``target data``) and
  unstructured (``target enter/exit data``) — change the entry's *dynamic* count:
  ``runtime.enter(..., Counter.DYNAMIC)`` on entry, ``runtime.exit_dynamic`` on exit (−1;
  ``delete``: ``finalize``, = 0). An exit whose dynamic count is already 0 does nothing
  (the runtime's decrement stops at 0 and absent data is skipped).
- **ompx_hold** (``hold=True``) maps use the *structured* count (``Counter.STRUCTURED``
  / ``exit_structured``): LLVM's hold reference count is OpenACC's structured count.
- **Transfers** at the 0→1 and 1→0 transitions of the total count: the runtime copies in
  when it creates a mapping (``copyin``) and out when a lifetime ends through a request
  whose kind copies out (``copyout``); ``always`` adds an ``update`` (after the entry /
  before the exit), and the entry/exit request then does not copy (no double transfer).
- **present** modifier: absent data raises ``NotPresentError``, partly present data
  ``PartlyPresentError``, before anything changes.
- **Several clauses naming one array** in a construct combine into one map (LLVM's map
  ordering): ``map(alloc: a) map(to: a) map(from: a)`` maps once, copies in and out.
  Arrays are the same map when they cover the same host byte range.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pyacc.mapping import (
    Counter,
    MapKind,
    MapRequest,
    NotPresentError,
    Relation,
    UpdateDirection,
    check_array,
)
from pyacc.mapping.errors import describe_array
from pyacc.mapping.plan import check_writeable
from pyacc.mapping.runtime import partly_present

from ._clauses import MapSpec

__all__ = ["MapItem", "combine", "enter_maps", "exit_maps", "check_present", "check_copy_targets",
           "always_to", "always_from", "describe"]


@dataclass
class MapItem:
    """One array's combined maps in one construct."""

    array: np.ndarray
    name: str | None
    to: bool = False
    from_: bool = False
    always_to: bool = False
    always_from: bool = False
    present: bool = False
    hold: bool = False
    release: bool = False
    delete: bool = False
    text: str = ""  # how the clause was written, for messages

    # -- request kinds -----------------------------------------------------------------
    def entry_kind(self) -> MapKind:
        """The request kind for the entry (copy in only at creation, and not when
        ``always`` copies anyway). With ``hold`` the kind also decides the copy-out at the
        structured exit, so it carries the ``from`` half."""
        copy_out = self.hold and self.from_ and not self.always_from
        if self.present:
            return MapKind.PRESENT
        if self.to and not self.always_to:
            return MapKind.COPY if copy_out else MapKind.COPYIN
        return MapKind.COPYOUT if copy_out else MapKind.CREATE

    def exit_kind(self, copy_back: bool = True) -> MapKind:
        """The request kind for a dynamic exit: copy out when the lifetime ends here."""
        if copy_back and self.from_ and not self.always_from:
            return MapKind.COPYOUT
        return MapKind.DELETE


def _key(array: np.ndarray) -> tuple[int, int]:
    return (array.__array_interface__["data"][0], array.nbytes)


def combine(pairs, namer, what: str) -> list[MapItem]:
    """Group ``(array, MapSpec)`` pairs by host range into :class:`MapItem` values, in
    the order first written. Zero-size arrays are dropped (always present, API.md §2)."""
    items: dict[tuple[int, int], MapItem] = {}
    for array, spec in pairs:
        check_array(array, name=None)
        if array.size == 0:
            continue
        key = _key(array)
        item = items.get(key)
        if item is None:
            item = items[key] = MapItem(array, namer(array))
        _add(item, spec)
        item.text = (item.text + " " if item.text else "") + spec.text().replace("…", item.name or "?")
    return list(items.values())


def _add(item: MapItem, spec: MapSpec) -> None:
    kind = spec.type
    if kind in ("to", "tofrom"):
        item.to = True
        item.always_to |= spec.always
    if kind in ("from", "tofrom"):
        item.from_ = True
        item.always_from |= spec.always
    if kind == "release":
        item.release = True
    if kind == "delete":
        item.delete = True
    item.present |= spec.present
    item.hold |= spec.hold


def describe(item: MapItem) -> str:
    return item.text or describe_array(item.array, item.name)


# == presence =======================================================================================
def check_present(runtime, items, what: str) -> None:
    """``present`` modifier: every such item must be wholly present on ``runtime``'s
    device (nothing changes otherwise)."""
    if runtime.device.shares_host_memory:
        return
    for item in items:
        if not item.present:
            continue
        found = runtime.table.lookup(item.array)
        if found.relation is Relation.CONTAINED:
            continue
        if found.relation.is_partial:
            raise partly_present(item.array, item.name, found)
        device = runtime.device
        raise NotPresentError(
            f"{what} {describe(item)}: {describe_array(item.array, item.name)} at {found.extent} "
            f"is not present on {device.type_name} device {device.number}, and the present "
            "modifier requires it (OpenMP 5.2 §5.8.3). Map it first (omp.target_enter_data, "
            "an enclosing omp.target_data, or OpenACC acc.copyin / acc.data), or drop the "
            "present modifier",
            name=item.name, host_range=found.extent)


def check_not_partial(runtime, items) -> None:
    """Raise ``PartlyPresentError`` for an item overlapping a mapping without lying
    inside it (checked for all before an exit changes anything)."""
    if runtime.device.shares_host_memory:
        return
    for item in items:
        found = runtime.table.lookup(item.array)
        if found.relation.is_partial:
            raise partly_present(item.array, item.name, found)


def check_copy_targets(runtime, items, *, entering: bool, copy_back: bool = True) -> None:
    """A read-only array that device data would be copied into (API.md §4): refused by
    name (``InvalidArgumentError``) before a construct changes anything. Entering: a
    ``from``/``tofrom`` map of absent data (its exit would copy back: as ``acc.data``'s
    ``copy`` clause). Exiting: an ``always from`` map of present data, and a ``from``
    map whose lifetime ends here (``delete``, or the count's last decrement)."""
    if runtime.device.shares_host_memory:
        return
    for item in items:
        if item.array.flags.writeable or not (item.from_ or item.always_from):
            continue
        entry = runtime.table.containing(item.array)
        if entering:
            copies = entry is None and item.from_ and not item.present
        else:
            counter = Counter.STRUCTURED if item.hold else Counter.DYNAMIC
            copies = entry is not None and copy_back and (item.always_from or (
                item.exit_kind(copy_back) is MapKind.COPYOUT or item.hold) and (
                item.delete or entry.would_end(counter)))
        if copies:
            check_writeable(describe(item), item.array, item.name)


# == entry and exit ================================================================================
def _requests(items, kind_of) -> list[MapRequest]:
    return [MapRequest(kind_of(item), item.array, item.name) for item in items]


def always_to(runtime, items, queue) -> None:
    moves = [(UpdateDirection.DEVICE, item.array, item.name) for item in items if item.always_to]
    if moves:
        runtime.update(moves, queue, if_present=True)


def always_from(runtime, items, queue) -> None:
    moves = [(UpdateDirection.SELF, item.array, item.name) for item in items if item.always_from]
    if moves:
        runtime.update(moves, queue, if_present=True)


def enter_maps(runtime, items, queue, what: str):
    """Entry of a ``target data`` / ``target enter data`` construct: dynamic counts for
    ordinary maps, structured counts for ``ompx_hold`` maps, then the ``always``
    copies in. All or nothing. Returns the hold maps' ``Mapped`` values (for
    ``exit_maps``)."""
    check_present(runtime, items, what)
    check_copy_targets(runtime, items, entering=True)
    dynamic = [item for item in items if not item.hold]
    held = [item for item in items if item.hold]
    if dynamic:
        runtime.enter(_requests(dynamic, MapItem.entry_kind), Counter.DYNAMIC, queue)
    mapped = []
    try:
        if held:
            mapped = runtime.enter(_requests(held, MapItem.entry_kind), Counter.STRUCTURED, queue)
        always_to(runtime, items, queue)
    except BaseException:
        # undo the dynamic entry (no copy back): the construct changes nothing
        if mapped:
            runtime.exit_structured(mapped, queue, copy_back=False)
        if dynamic:
            runtime.exit_dynamic(_requests(dynamic, lambda item: MapKind.DELETE), queue)
        raise
    return mapped


def exit_maps(runtime, items, queue, *, held_mapped=(), copy_back: bool = True) -> None:
    """Exit of a ``target data`` / ``target exit data`` construct: ``always`` copies
    out first, then the dynamic decrements (``release``: −1, ``delete``: = 0, copying
    out at the end of a lifetime through ``from`` maps), then the hold maps' structured
    decrements."""
    dynamic = [item for item in items if not item.hold]
    check_not_partial(runtime, dynamic)
    check_copy_targets(runtime, items, entering=False, copy_back=copy_back)  # (all or nothing)
    if copy_back:
        always_from(runtime, items, queue)
    finalize = [item for item in dynamic if item.delete]
    plain = [item for item in dynamic if not item.delete]
    kind = (lambda item: item.exit_kind(copy_back))
    if plain:
        runtime.exit_dynamic(_requests(plain, kind), queue)
    if finalize:
        runtime.exit_dynamic(_requests(finalize, kind), queue, finalize=True)
    if held_mapped:
        if not copy_back:
            runtime.exit_structured(list(held_mapped), queue, copy_back=False)
        else:
            # an always-from map was copied above: its end of lifetime copies nothing more
            always = {id(item.array) for item in items if item.hold and item.always_from}
            mapped = [m._replace(request=m.request._replace(kind=MapKind.DELETE))
                      if id(m.request.array) in always else m for m in held_mapped]
            runtime.exit_structured(mapped, queue, copy_back=True)
