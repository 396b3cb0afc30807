"""``PYACC_NOTIFY=<bitmask>``: one line per runtime event on stderr (NVHPC's
``NV_ACC_NOTIFY``).

Owns: ``Notifier`` and the bits: 1 kernel launches, 2 transfers (upload, download,
device copy), 4 region entry/exit and the data counters of each mapping (before →
after), 8 waits, 16 device allocations and frees. Each line names the user's file:line
and function, the device, the queue, the bytes and the variable (a kernel's parameter
name for its implicit copies). Lines go to ``sys.stderr`` as it is when printed (so
pytest's capture and redirections see them).
"""

from __future__ import annotations

import sys

from pyacc.mapping import BUS, EventKind

from ._locate import location_of

__all__ = ["Notifier", "BITS"]

LAUNCHES, TRANSFERS, REGIONS, WAITS, ALLOCATIONS = 1, 2, 4, 8, 16

#: bit -> the event kinds it shows
BITS = {
    LAUNCHES: (EventKind.LAUNCH,),
    TRANSFERS: (EventKind.UPLOAD, EventKind.DOWNLOAD, EventKind.DEVICE_COPY, EventKind.EVICT,
                EventKind.RESTORE),  # oversubscription's evictions and restores (API.md §10)
    REGIONS: (EventKind.REGION_ENTER, EventKind.REGION_EXIT, EventKind.ENTER_DATA,
              EventKind.EXIT_DATA),
    WAITS: (EventKind.WAIT,),
    ALLOCATIONS: (EventKind.ALLOC, EventKind.FREE),
}

_VERBS = {
    EventKind.LAUNCH: "launch kernel",
    EventKind.UPLOAD: "upload",
    EventKind.DOWNLOAD: "download",
    EventKind.DEVICE_COPY: "device copy",
    EventKind.REGION_ENTER: "enter region",
    EventKind.REGION_EXIT: "exit region",
    EventKind.ENTER_DATA: "enter data",
    EventKind.EXIT_DATA: "exit data",
    EventKind.WAIT: "wait",
    EventKind.ALLOC: "alloc",
    EventKind.FREE: "free",
    EventKind.EVICT: "evict",
    EventKind.RESTORE: "restore",
}


def parse_mask(text: str) -> int:
    """The bitmask of ``PYACC_NOTIFY`` (decimal, or 0x.. hex)."""
    try:
        mask = int(text, 0)
    except ValueError:
        raise ValueError(f"PYACC_NOTIFY={text!r} is not a bitmask: use a number such as 3 "
                         "(1 launches, 2 transfers, 4 regions, 8 waits, 16 allocations)") from None
    if mask < 0 or mask >= 32:
        raise ValueError(f"PYACC_NOTIFY={text!r} is out of range: bits 1, 2, 4, 8, 16 (at most 31)")
    return mask


def format_event(event) -> str:
    """The notify line of one event."""
    where = location_of(event)
    kind = event.kind
    parts = [f"pyacc: {_VERBS[kind]}", f"file={where.file}", f"line={where.line}",
             f"function={where.function}", "device={}:{}".format(*event.device)]
    if kind in (EventKind.REGION_ENTER, EventKind.REGION_EXIT):
        parts.append(f"construct={event.info}")
    if kind is EventKind.WAIT:
        parts.append("queue=all" if event.queue is None else f"queue={event.queue}")
    elif kind not in (EventKind.ALLOC, EventKind.FREE, EventKind.REGION_ENTER, EventKind.REGION_EXIT,
                      EventKind.EVICT):
        parts.append("queue=sync" if event.queue is None else f"queue={event.queue}")
    if event.name is not None:
        label = "kernel" if kind in (EventKind.LAUNCH, EventKind.REGION_ENTER,
                                     EventKind.REGION_EXIT) else "variable"
        parts.append(f"{label}={event.name}")
    if event.nbytes is not None:
        parts.append(f"bytes={event.nbytes}")
    if event.device_begin is not None:
        parts.append(f"device_address={event.device_begin:#x}")
    if event.counters is not None:
        (s0, d0), (s1, d1) = event.counters
        parts.append(f"structured={s0}->{s1} dynamic={d0}->{d1}")
    if event.start is not None:
        parts.append(f"time={1e6 * (event.timestamp - event.start):.1f}us")
    return " ".join(parts)


class Notifier:
    """Subscribes to the kinds of the bits in ``mask`` and prints their lines."""

    def __init__(self, mask: int):
        self.mask = mask
        self.kinds = tuple(kind for bit, kinds in BITS.items() if mask & bit for kind in kinds)

    def __call__(self, event) -> None:
        print(format_event(event), file=sys.stderr, flush=True)

    def install(self) -> None:
        BUS.subscribe(self, self.kinds)

    def uninstall(self) -> None:
        BUS.unsubscribe(self, self.kinds)
