"""The runtime verbs of a device that shares memory with the host (``host``).

Owns: ``SharedMemoryRuntime``. OpenACC 3.3 §2.7.4 and §3.2.18–3.2.25: for data in shared
memory every data clause and data routine takes no action, ``acc_is_present`` is true and
``acc_deviceptr`` returns the host address. Arguments are still validated exactly as on a
device with separate memory, so a program that is wrong on a GPU is wrong here too; raw
memory (``malloc``/``free``/``memcpy_*``) and launches are real.

There is no present table: ``present_table()`` is empty and ``refcounts`` is ``(0, 0)``.
"""

from __future__ import annotations

from .device import Device, Queue
from .entry import Counter
from .ranges import check_array
from .requests import MapRequest, Mapped
from .runtime import DeviceRuntime, _check_writeable

__all__ = ["SharedMemoryRuntime"]


class SharedMemoryRuntime(DeviceRuntime):
    """Every data action a no-op; queries answer "present, at the host address"."""

    def __init__(self, device: Device):
        super().__init__(device)
        assert device.shares_host_memory
        del self.is_present  # the table's check does not apply: everything is present

    def enter(self, requests: list[MapRequest], counter: Counter, queue: Queue) -> list[Mapped]:
        return [Mapped(request, None) for request in requests]

    def join_present(self, array, counter):
        return array

    def join_structured(self, arrays, memo=None):
        """Everything is present and nothing is counted: one ``None`` entry per array."""
        entries = [None] * len(arrays)
        if memo is not None:
            memo[:] = [0, entries]
        return entries

    def rejoin_structured(self, memo):
        """As ``join_structured``: the table never changes, so the memo always holds."""
        return memo[1]

    def leave_structured(self, entries) -> bool:
        return True

    def device_array_of(self, entry, array):
        return array

    def leave_present(self, array, *, finalize=False, queue=None) -> bool:
        return True

    def exit_structured(self, mapped, queue, *, copy_back=True) -> None:
        pass

    def exit_dynamic(self, requests, queue, *, finalize=False) -> None:
        pass

    def update(self, items, queue, *, if_present=False) -> None:
        pass

    def declare(self, requests) -> list[Mapped]:
        return [Mapped(request, None) for request in requests]

    def end_declarations(self) -> None:
        pass

    def map_data(self, array, device_array, name=None) -> None:
        self.device.extent_of(device_array)

    def unmap_data(self, array, name=None) -> None:
        pass

    def is_present(self, array) -> bool:
        return True

    def refcounts(self, array) -> tuple[int, int]:
        return (0, 0)

    def deviceptr(self, array):
        return array

    def hostptr(self, device_array):
        self.device.extent_of(device_array)
        return device_array

    def records(self):
        return []

    def memcpy_to_device(self, device_array, array, queue) -> None:
        check_array(array)
        super().memcpy_device(device_array, array, queue)

    def memcpy_from_device(self, array, device_array, queue) -> None:
        check_array(array)
        if not array.flags.writeable:
            _check_writeable("acc.memcpy_from_device", array, self.namer(array), "the destination")
        super().memcpy_device(array, device_array, queue)
