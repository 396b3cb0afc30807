"""The verbs of data lifetimes that the program ends explicitly: ``acc.map_data`` /
``acc.unmap_data`` (OpenACC 3.3 §3.2.21–3.2.22) and ``acc.declare`` (§2.13).

Owns: ``LifetimeVerbs`` and ``Declaration``. ``LifetimeVerbs`` is a mixin of
``runtime.DeviceRuntime`` (it uses its ``table``, ``device``, ``namer``, ``declared``,
``_commit_entry`` and ``_publish``); it holds these verbs apart so that ``runtime`` stays
readable. The rules are those of ``runtime``: each verb holds the table lock, is
all-or-nothing, and publishes ENTER_DATA / EXIT_DATA for every counter change.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .commit import allocate, end_lifetimes
from .entry import Counter, EntryKind, MappingEntry
from .events import BUS, EventKind
from .plan import plan_declare, plan_map_data, plan_unmap_data
from .requests import MapKind, MapRequest, Mapped

__all__ = ["LifetimeVerbs", "Declaration"]

_DYNAMIC = Counter.DYNAMIC
_HOLD = BUS.holding()


class Declaration(NamedTuple):
    """An ``acc.declare`` mapping of a device, and whether its data is copied back when
    the declaration ends (``copy`` clause)."""

    entry: MappingEntry
    copies_out: bool


class LifetimeVerbs:
    """``map_data``, ``unmap_data``, ``declare``, ``end_declarations`` of a ``DeviceRuntime``."""

    # == map_data / unmap_data (OpenACC 3.3 §3.2.21–3.2.22) ================================
    def map_data(self, array: np.ndarray, device_array, name: str | None = None) -> None:
        """Map host ``array`` onto existing device memory; dynamic count pinned at 1.
        Raises what ``plan.plan_map_data`` raises (``PresentError``, ``InvalidArgumentError``)."""
        if array.size == 0:
            return
        name = name or self.namer(array)
        with self.table.locked(), _HOLD:
            host_begin, host_end, address = plan_map_data(array, device_array, name, self.table, self.device)
            entry = MappingEntry(host_begin, host_end, array, address, kind=EntryKind.MAP_DATA, name=name)
            entry.increment(_DYNAMIC)
            self.table.insert(entry)
            self._publish(EventKind.ENTER_DATA, entry, (0, 0), None, name)

    def unmap_data(self, array: np.ndarray, name: str | None = None) -> None:
        """End a ``map_data`` lifetime; the device memory is not freed. Raises
        ``PresentError`` as ``plan.plan_unmap_data`` says (OpenACC 3.3 §3.2.22)."""
        if array.size == 0:
            return
        with self.table.locked(), _HOLD:
            entry = plan_unmap_data(array, name, self.table, self.namer)
            before = entry.counters
            entry.reset()
            self.table.remove(entry)
            self._publish(EventKind.EXIT_DATA, entry, before, None, name)

    # == declare (OpenACC 3.3 §2.13) ======================================================
    def declare(self, requests: list[MapRequest]) -> list[Mapped]:
        """``acc.declare``: map each array for the rest of the program, dynamic count
        pinned at 1 (``copyin``/``copy``: copied in; ``create``/``device_resident``:
        allocated only). The lifetimes end at ``end_declarations`` (``acc.shutdown``,
        interpreter exit), where ``copy`` data is copied back. All or nothing: raises
        what ``plan.plan_declare`` raises (an array already present, declared before
        included: a second ``declare`` of a variable is an error in C), or
        ``OutOfMemoryError`` with nothing declared.
        """
        with self.table.locked(), _HOLD:
            steps = plan_declare(requests, self.table, self.namer)
            allocate(self._allocator(), steps, self.namer)
            mapped = self._commit_entry(steps, _DYNAMIC, self.device.sync_queue, declare=True)
            self.declared += [Declaration(item.entry, item.request.kind.copies_out)
                              for item in mapped if item.entry is not None]
            return mapped

    def end_declarations(self) -> None:
        """End every ``acc.declare`` lifetime of this device (``acc.shutdown``, program
        exit): ``copy`` data is copied back (synchronously), then the mappings are removed
        and their memory freed. A mapping that a structured region still holds stays
        present until that region ends. The caller has waited for the queues.

        Raises:
            ExecutionError: a copy-back failed (the mappings are removed all the same).
        """
        with self.table.locked(), _HOLD:
            declared, self.declared = self.declared, []
            ended, copies = [], []
            for entry, copies_out in declared:
                if entry.kind is not EntryKind.DECLARE:
                    continue
                before = entry.counters
                entry.end_declaration()
                self._publish(EventKind.EXIT_DATA, entry, before, None, None)
                if not entry.is_present:
                    ended.append(entry)
                    if copies_out:
                        copies.append(Mapped(MapRequest(MapKind.COPY, entry.host_array, entry.name), entry))
            end_lifetimes(self.device, self.table, ended, copies, self.device.sync_queue, remove_on_failure=True,
                          residency=self.residency)

