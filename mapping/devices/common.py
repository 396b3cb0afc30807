"""What every device and its helpers share, below the ``Device`` protocol (``base``).

Owns: ``emit`` (publish a counted action), ``announce`` (a transfer's or launch's enqueue
event), ``Timed`` (an operation that publishes its DONE event once it has run) and
``size_setting`` (a device's size in bytes from the environment). Nothing here holds or
calls a device: the helpers of a device (``cuda_queues``, ``cuda_pins``) import these
instead of ``base``, so that calls go down, from the device to its helpers; ``common``
imports nothing of the room.
"""

from __future__ import annotations

import math
import os
import time

from ..errors import InvalidArgumentError
from ..events import BUS, Event, EventKind

__all__ = ["Timed", "announce", "emit", "size_setting"]

_ACTIVE = BUS.active
_DONE = int(EventKind.DONE)
_clock = time.perf_counter

_SCALES = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def size_setting(name: str, default: int, advice: str) -> int:
    """The environment variable ``name`` as a size in bytes (suffixes K, M, G accepted):
    a device setting (``PYACC_EMULATED_MEMORY``, ``PYACC_PIN``); unset or empty: ``default``.

    Raises:
        InvalidArgumentError: the value is not a finite size ≥ 0: naming the setting, its
            value, and ``advice`` (what to give instead).
    """
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    scale = _SCALES.get(text[-1].upper(), 1)
    try:
        value = float(text[:-1] if scale != 1 else text) * scale
    except ValueError:
        value = math.nan
    if not 0 <= value < math.inf:
        raise InvalidArgumentError(f"{name}={text!r} is not a size in bytes: {advice}")
    return int(value)


def emit(kind: EventKind, device: tuple[str, int], nbytes=None, **fields) -> None:
    """Publish a counted action (alloc, free, transfer, launch): its compact form to the
    tally subscribers, and a full ``Event`` when someone subscribes to its kind."""
    BUS.count(kind, device, nbytes)
    if _ACTIVE[kind]:
        BUS.publish(kind, device, nbytes=nbytes, **fields)


def announce(kind, device, queue_number, nbytes, name, where=None, info=None):
    """The enqueue event of a transfer or launch: published to its subscribers, and
    returned when someone wants the operation timed (DONE), else None. ``info``: the
    operation's arrays ``(destination, source)``, or what the launcher passed."""
    kind = EventKind(kind)
    event = None
    if _ACTIVE[kind]:
        event = BUS.publish(kind, device, queue=queue_number, nbytes=nbytes, name=name,
                            info=info, where=where)
    if _ACTIVE[_DONE]:
        return event or Event(kind, device, queue_number, nbytes, name, info=info, where=where)
    return None


class Timed:
    """An operation that publishes a DONE event (its start and end) once it has run, on
    whatever thread runs it: kernel and transfer times for reports and traces."""

    __slots__ = ("operation", "event")

    def __init__(self, operation, event: Event):
        self.operation = operation
        self.event = event

    def __call__(self):
        start = _clock()
        try:
            return self.operation()
        finally:
            self.finish(start)

    def finish(self, start: float) -> None:
        """Publish DONE for the operation, begun at ``start``, that has now completed
        (queues whose operations complete after their call returns, CUDA streams, call
        this themselves once the stream has passed the operation)."""
        event = self.event
        BUS.publish(EventKind.DONE, event.device, queue=event.queue, nbytes=event.nbytes,
                    name=event.name, info=event, start=start, where=event.where)
        self.operation = None

    def skipped(self, description):
        skipped = getattr(self.operation, "skipped", None)
        self.operation = None
        if skipped is not None:
            skipped(description)
