"""The runtime verbs of a device that shares memory with the host (``host``).

Owns: ``SharedMemoryRuntime``, which implements ``protocol.MappingRuntime`` beside
``runtime.DeviceRuntime`` (it inherits none of its behaviour: a verb added to the protocol
must be written here too). OpenACC 3.3 §2.7.4 and §3.2.18–3.2.25: for data in shared
memory every data clause and data routine takes no action, ``acc_is_present`` is true and
``acc_deviceptr`` returns the host address. Arguments are still validated exactly as on a
device with separate memory (by ``pyacc`` before the verb, and here where the verb
validates: ``map_data``, ``hostptr``, raw copies), so a program that is wrong on a GPU is
wrong here too; raw memory (``malloc``/``free``/``memcpy_*``, ``raw_memory``) and launches
are real.

Invariants: there is no mapping — ``table`` stays empty (observers may lock and read it),
``present_table()`` is empty, ``refcounts`` is ``(0, 0)``, no counter ever changes. The
only state is the device's (its raw blocks and queues). Threading: every verb may run on
any thread; raw memory changes take the (empty) table's lock, as on other devices.
"""

from __future__ import annotations

import logging

from . import _probe, raw_memory
from .devices.base import Device, Queue
from .entry import Counter
from .errors import ExecutionError
from .events import BUS, EventKind, publish_reset
from .plan import check_writeable
from .protocol import MappingRecord, MappingRuntime
from .ranges import check_array
from .requests import MapKind, MapRequest, Mapped, StructuredMemo
from .table import PresentTable

__all__ = ["SharedMemoryRuntime"]

_LOG = logging.getLogger("pyacc")
#: ``with _HOLD:`` — an event subscriber's exception waits for the end of the verb
_HOLD = BUS.holding()


class SharedMemoryRuntime(MappingRuntime):
    """Every data action a no-op; queries answer "present, at the host address"."""

    def __init__(self, device: Device):
        assert device.shares_host_memory
        self.device = device
        self.table = PresentTable()  # always empty: nothing is ever mapped
        #: the data API's lane (``_cprobe.DataLane`` of shared memory: every data
        #: routine on a plain block is one C call that takes no action)
        self.lane = _probe.DataLane(None, None, None, None, None, BUS.active,
                                       (int(EventKind.ENTER_DATA), int(EventKind.EXIT_DATA),
                                        int(EventKind.DIRECTIVE_END)))
        #: finds a variable name for an array (set by pyacc; used in error messages)
        self.namer = lambda array: None

    # == entry and exit: no action (OpenACC 3.3 §2.7.4) ===================================
    def enter(self, requests: list[MapRequest], counter: Counter, queue: Queue, *, at_once=True) -> list[Mapped]:
        return [Mapped(request, None) for request in requests]

    def enter_one(self, kind: MapKind, array, counter: Counter, queue: Queue | None = None):
        return array

    def exit_structured(self, mapped, queue, *, copy_back=True, counter=None) -> None:
        pass

    def exit_dynamic(self, requests, queue, *, finalize=False) -> None:
        pass

    def join_structured(self, arrays, memos=None, counter=None):
        """Everything is present and nothing is counted: one ``None`` entry per array."""
        entries = StructuredMemo([None] * len(arrays))  # the entries are the memo
        entries.version = 0  # the (empty) table never changes
        entries.counter = counter
        if memos is not None:
            memos.append(entries)
        return entries

    def rejoin_structured(self, memo):
        """As ``join_structured``: the table never changes, so the memo always holds."""
        return memo

    def leave_structured(self, entries, counter=None) -> bool:
        return True

    def leave_present(self, array, *, finalize=False, queue=None) -> bool:
        return True

    def update(self, items, queue, *, if_present=False) -> None:
        pass

    def update_one(self, direction, array, queue, *, name=None, if_present=False) -> None:
        pass

    def declare(self, requests) -> list[Mapped]:
        return [Mapped(request, None) for request in requests]

    def end_declarations(self) -> None:
        pass

    def map_data(self, array, device_array, name=None) -> None:
        self.device.extent_of(device_array)  # must be an array of this device

    def unmap_data(self, array, name=None) -> None:
        pass

    # == queries ==========================================================================
    def is_present(self, array) -> bool:
        return True

    def refcounts(self, array) -> tuple[int, int]:
        return (0, 0)

    def deviceptr(self, array):
        return array

    def hostptr(self, device_array):
        self.device.extent_of(device_array)
        return device_array

    def device_array(self, mapped: Mapped):
        return mapped.request.array

    def device_array_of(self, entry, array):
        return array

    def records(self) -> list[MappingRecord]:
        return []

    # == residency: one memory, nothing to evict (API.md §10) =============================
    def set_oversubscribe(self, enabled: bool) -> None:
        pass

    def note_use(self, entries, queue=None, written=None) -> bool:
        return False

    def end_use(self) -> None:
        pass

    def prefetch(self, array, queue=None, *, if_present=False, name=None) -> None:
        check_array(array, name=name, contiguous=False)

    def wont_use(self, array, name=None) -> None:
        check_array(array, name=name, contiguous=False)

    # == raw memory: real (host arrays are device arrays) =================================
    def malloc(self, shape, dtype):
        return raw_memory.malloc(self.device, self.table, shape, dtype)

    def free(self, device_array) -> None:
        raw_memory.free(self.device, self.table, device_array)

    def memcpy_to_device(self, device_array, array, queue) -> None:
        check_array(array)
        raw_memory.memcpy_device(self.device, device_array, array, queue)

    def memcpy_from_device(self, array, device_array, queue) -> None:
        check_array(array)
        if not array.flags.writeable:
            check_writeable("acc.memcpy_from_device", array, self.namer(array), "the destination")
        raw_memory.memcpy_device(self.device, array, device_array, queue)

    def memcpy_device(self, destination, source, queue) -> None:
        raw_memory.memcpy_device(self.device, destination, source, queue)

    # == lifetime =========================================================================
    def shutdown(self) -> None:
        """Wait for the queues (their errors are dropped with the program's lifetimes, as
        on other devices) and free every raw block (OpenACC 3.3 §3.2.8)."""
        with self.table.locked(), _HOLD:
            try:
                self.device.synchronize()
            except ExecutionError as error:
                _LOG.debug("shutdown of %s %d dropped a queued error: %s",
                           self.device.type_name, self.device.number, error)
            self.device.reset()
            publish_reset(self.device.identity)

    def after_fork_in_child(self) -> None:
        """The child of ``os.fork``: new table lock, the parent's queues forgotten."""
        self.table.after_fork_in_child()
        self.device.forget_queues()
