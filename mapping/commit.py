"""Committing: the effectful half of "plan, then commit" (``plan`` is the pure half).

Owns: ``allocate`` (device memory for the CREATE steps of a plan, all or nothing; then
``Device.pin`` of each new mapping's host side),
``end_lifetimes`` (copy back, then remove ended entries and free their memory) and
``device_view`` (the device array of a host view inside an entry). ``runtime.DeviceRuntime``
calls them with the table lock held, between planning and publishing; they never change a
counter (``entry`` does) and never decide policy (``plan`` does).

``allocate`` takes anything with the device's ``allocate``/``free``/``pin`` (the device, or while
oversubscribing ``residency``'s evicting allocator).

Invariants: a failure in ``allocate`` frees every block it allocated; ``end_lifetimes``
transfers before it removes anything, so a failing copy-back leaves the table as it was
(unless the caller says the lifetimes end regardless); frees are deferred on the queue
that holds the copy-backs (``Device.release``).
"""

from __future__ import annotations

import numpy as np

from .entry import MappingEntry
from .errors import OutOfMemoryError, describe_array
from .plan import EntryAction, EntryStep, check_writeable
from .queues import Queue
from .requests import Mapped

__all__ = ["allocate", "end_lifetimes", "device_view"]

_CREATE = EntryAction.CREATE


def allocate(device, steps: list[EntryStep], namer) -> None:
    """Device memory for every CREATE step (``step.device_address``).

    Raises:
        OutOfMemoryError: naming the array that did not fit; nothing stays allocated.
    """
    done: list[EntryStep] = []
    try:
        for step in steps:
            if step.action is _CREATE:
                step.device_address = device.allocate(step.host_end - step.host_begin)
                done.append(step)
    except BaseException as error:
        failed = step  # (before the loop below rebinds ``step``)
        for freed in done:
            device.free(freed.device_address)
            freed.device_address = None
        if not isinstance(error, OutOfMemoryError):
            raise
        request = failed.request
        name = request.name or namer(request.array)
        raise OutOfMemoryError(
            f"cannot map {describe_array(request.array, name, failed.host_begin)}: "
            f"{error.message}; nothing of this directive was mapped",
            name=name,
            nbytes=request.array.nbytes,
        ) from None
    for step in done:  # every block is there: the device may page-lock their host sides
        device.pin(step.device_address, step.host_begin, step.host_end, step.request.array)


def device_view(device, entry: MappingEntry, array: np.ndarray, host_data: int | None):
    """Device array of ``array``, a view inside ``entry`` whose first element is at host
    address ``host_data`` (computed when None)."""
    if host_data is None:
        host_data = array.__array_interface__["data"][0]
    return device.view(entry.device_address_of(host_data), array)


def end_lifetimes(device, table, ended: list[MappingEntry], copies: list[Mapped], queue: Queue,
                  *, remove_on_failure: bool = False, residency=None) -> None:
    """Copy back ``copies`` (all of them, even after one fails), then remove ``ended``
    and free their memory (deferred on ``queue``). Copies happen before any removal, so a
    failing copy leaves the table as it was — unless ``remove_on_failure`` (a structured
    region is over whatever happens: its entries are removed and freed, then the first
    error propagates). An evicted entry (``residency``) is restored just before its own
    copy-back (one at a time: copied-back entries may make room for the next; a restore
    that fails counts as a failed copy); blocks freed at eviction are not freed again."""
    failure = None
    # an exit that keeps its mappings when a copy fails (exit data) must leave every host
    # buffer as it was too (API.md §4): on the synchronous queue, several copy-backs land
    # in temporaries first and reach the host only once all succeeded
    staged = [] if (not remove_on_failure and len(copies) > 1 and queue.async_value is None) else None
    for item in copies:
        array = item.request.array
        target = array if staged is None else np.empty_like(array)
        try:
            if not array.flags.writeable:  # numpy's own error would say nothing of the mapping
                check_writeable("copyout", array, item.request.name or item.entry.name)
            if residency is not None and item.entry.evicted:  # restored alone, used by the copy
                residency.note_use((item.entry,), queue, (False,))
            device.download(target, device_view(device, item.entry, array, item.data), queue,
                            name=item.request.name or item.entry.name)
        except BaseException as error:  # the other copy-backs still run
            failure = failure or error
            if staged is not None:
                break
        else:
            if staged is not None:
                staged.append((array, target))
    if failure is not None and not remove_on_failure:
        raise failure
    for array, target in staged or ():
        np.copyto(array, target)
    for entry in ended:
        table.remove(entry)
        if entry.owns_memory and not entry.evicted:
            device.release(entry.device_address, queue)
    if failure is not None:
        raise failure
