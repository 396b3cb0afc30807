"""pyacc's mapping runtime: present tables, devices, transfers and events.

The layer below ``pyacc`` (DESIGN.md): it knows nothing of decorators or compilers and
imports neither ``pyacc`` nor ``compiler``. Modules:

- ``errors``      the error tree (OpenACC ``acc_error_t`` codes) and the range notation
- ``ranges``      host byte ranges, ``Relation``, host-data validation
- ``_probe``      compiled address read + sorted-range search (the lookup hot path)
- ``_ordered``    generic ordered container of non-overlapping ranges
- ``entry``       a mapping with its structured and dynamic counters
- ``table``       the present table of one device (lock, lookups returning a relation)
- ``requests``    ``MapKind`` / ``MapRequest`` / ``Mapped``: what directives ask for
- ``runtime``     the verbs, plan-then-commit (devices with separate memory)
- ``shared``      the same verbs for shared-memory devices (every clause a no-op)
- ``device``      the device protocol and the synchronous queue
- ``host_device`` / ``emulated``  the ``host`` and ``emulated`` devices
- ``events``      the one event stream and the statistics subscriber
"""

from .device import Device, Queue, SyncQueue
from .emulated import EmulatedDevice
from .entry import Counter, EntryKind, MappingEntry
from .errors import *  # noqa: F401,F403 - the error tree
from .errors import __all__ as _error_names
from .events import BUS, STATS, Event, EventKind
from .host_device import HostDevice
from .ranges import HostRange, Relation, check_array
from .requests import MapKind, Mapped, MapRequest, UpdateDirection
from .runtime import DeviceRuntime, Layout, MappingRecord
from .shared import SharedMemoryRuntime
from .table import Lookup, PresentTable

__all__ = [
    "Device", "Queue", "SyncQueue", "EmulatedDevice", "HostDevice",
    "Counter", "EntryKind", "MappingEntry", "BUS", "STATS", "Event", "EventKind",
    "HostRange", "Relation", "check_array", "MapKind", "Mapped", "MapRequest",
    "UpdateDirection", "DeviceRuntime", "Layout", "MappingRecord", "SharedMemoryRuntime",
    "Lookup", "PresentTable",
] + list(_error_names)
