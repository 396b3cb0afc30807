"""pyacc's mapping runtime: present tables, devices, transfers and events.

The layer below ``pyacc`` (DESIGN.md), installed as ``pyacc.mapping`` (the repository's
``mapping/`` folder; ``pyacc._layers``): it knows nothing of decorators or compilers,
imports its own modules relatively and nothing of the surface or ``pyacc.compiler``.
Modules:

- ``errors``      the error tree (OpenACC ``acc_error_t`` codes) and the range notation
- ``ranges``      host byte ranges, ``Relation``, host-data validation
- ``_probe``      compiled address read + sorted-range search (the lookup hot path;
  ``_cprobe``, a C extension, answers its two hottest searches, and its ``DataLane``
  carries out the data API's verbs on present data in one call: ``runtime.lane``)
- ``_ordered``    generic ordered container of non-overlapping ranges
- ``entry``       a mapping with its structured and dynamic counters
- ``table``       the present table of one device (lock, lookups returning a relation)
- ``requests``    ``MapKind`` / ``MapRequest`` / ``UpdateItem`` / ``Mapped`` /
  ``StructuredMemo``: what directives ask for and keep
- ``plan``        pure planning: requests and the table → steps (and planning errors)
- ``commit``      allocation, copy-back and removal for the runtime's commit phase
- ``protocol``    ``MappingRuntime``: the verbs both runtimes implement side by side
- ``runtime``     the verbs, plan-then-commit (devices with separate memory)
- ``lifetimes``   ``map_data``/``unmap_data`` and ``declare`` (a mixin of the runtime)
- ``oversubscribe`` the API.md §10 verbs: oversubscription, ``prefetch``, ``wont_use``
  (a mixin of the runtime); ``residency``: evicting and restoring device copies
- ``compute``     a compute call's one entry and one exit, and its replay memo
- ``shared``      the same verbs for shared-memory devices (every clause a no-op)
- ``raw_memory``  ``acc.malloc`` / ``acc.free`` / ``acc.memcpy_*`` and ``Layout``
- ``queue_protocol`` the queue protocol every queue keeps, the synchronous queue, error
  collection
- ``queues``      the worker-thread queue, pending results, a device's queue set
- ``inline``      when async work runs at once: the crossover and the run-time predictions
- ``devices``     the room of the devices (its own map: ``devices/__init__.py``): the
  device protocol (``devices.base``), ``host`` / ``emulated`` (+ ``memcheck``,
  ``faults``) / ``cuda`` (+ its helpers and backends)
- ``events``      the one event stream and the statistics subscriber
- ``check``       the consistency checker (``PYACC_CHECK``)

Imports go one way (no cycles): ``errors``/``events``/``_probe`` ← ``ranges``/``entry``/
``table``/``requests`` ← ``plan`` ← ``commit``/``raw_memory`` ← ``runtime``/``shared``;
``queue_protocol`` ← ``queues`` ← ``devices``.
"""

from .devices.base import Device
from .devices.emulated import EmulatedDevice
from .entry import Counter, EntryKind, MappingEntry
from .errors import *  # noqa: F401,F403 - the error tree
from .errors import __all__ as _error_names
from .events import BUS, STATS, Event, EventKind
from .devices.host import HostDevice
from .ranges import HostRange, Relation, check_array
from .protocol import MappingRecord, MappingRuntime
from .queues import Queue, QueueSet, SyncQueue
from .raw_memory import Layout
from .requests import MapKind, Mapped, MapRequest, StructuredMemo, UpdateDirection, UpdateItem
from .runtime import DeviceRuntime
from .shared import SharedMemoryRuntime
from .table import Lookup, PresentTable

__all__ = [
    "Device", "Queue", "SyncQueue", "EmulatedDevice", "HostDevice",
    "Counter", "EntryKind", "MappingEntry", "BUS", "STATS", "Event", "EventKind",
    "HostRange", "Relation", "check_array", "MapKind", "Mapped", "MapRequest",
    "UpdateDirection", "UpdateItem", "StructuredMemo", "DeviceRuntime", "Layout", "MappingRecord",
    "MappingRuntime", "SharedMemoryRuntime", "QueueSet",
    "Lookup", "PresentTable",
] + list(_error_names)
