"""Profiling and error callbacks, modelled on the OpenACC 3.3 profiling interface (ch. 5).

Owns: ``register(event, callback)``, ``unregister(event, callback)``, the event names
(``EVENTS``) and the ``Info`` record each callback receives.

``acc.profiling.register("enqueue_launch", fn)`` calls ``fn(info)`` for every kernel
launch. Events, after ``acc_event_t``:

==========================  ==========================================================
``enter_data``              a mapping's counter went up (a region or enter data joined
                            or created it; ``info.created`` when it was new)
``exit_data``               a mapping's counter went down (``info.deleted`` when its
                            lifetime ended)
``compute_construct_start`` a compute region was called
``compute_construct_end``   ... and returned (its kernel may still run, if async)
``data_construct_start``    a structured data region was entered
``data_construct_end``      ... and left
``enqueue_launch``          a kernel was launched (queued, or run on the sync queue)
``enqueue_upload``          a host→device copy was queued
``enqueue_download``        a device→host copy was queued
``operation_end``           a kernel or copy finished running (``info.start``/``end``)
``alloc`` / ``free``        device memory was allocated / freed
``wait``                    a wait on one queue (``info.queue``) or all of them ended
``error``                   an ``AccError`` is about to be raised (``info.error``)
==========================  ==========================================================

Callbacks run synchronously on the thread that performed the action (``operation_end``
on the queue's worker for async work); they must not call back into pyacc's data or
compute API. An exception in a callback propagates to the action's caller.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from pyacc.mapping import BUS, EventKind

from .observe._locate import location_of

__all__ = ["register", "unregister", "EVENTS", "Info"]

_COMPUTE_START, _COMPUTE_END = "compute_construct_start", "compute_construct_end"
_DATA_START, _DATA_END = "data_construct_start", "data_construct_end"

#: event name -> the runtime event kind it is made from
EVENTS = {
    "enter_data": EventKind.ENTER_DATA,
    "exit_data": EventKind.EXIT_DATA,
    _COMPUTE_START: EventKind.REGION_ENTER,
    _COMPUTE_END: EventKind.REGION_EXIT,
    _DATA_START: EventKind.REGION_ENTER,
    _DATA_END: EventKind.REGION_EXIT,
    "enqueue_launch": EventKind.LAUNCH,
    "enqueue_upload": EventKind.UPLOAD,
    "enqueue_download": EventKind.DOWNLOAD,
    "operation_end": EventKind.DONE,
    "alloc": EventKind.ALLOC,
    "free": EventKind.FREE,
    "wait": EventKind.WAIT,
    "error": EventKind.ERROR,
}


@dataclass(frozen=True)
class Info:
    """What a callback learns (fields that do not apply are None).

    Attributes:
        event: the event name (a key of ``EVENTS``).
        construct: ``"parallel_loop"``, ``"data"`` ... for construct events; for data
            events the counter that changed (``"structured"`` or ``"dynamic"``); for
            ``operation_end`` what ran (``"kernel"``, ``"upload"``, ``"download"``).
        file, line, function: the user's source location (the construct's, for compute
            regions and their kernels).
        variable: the array's variable name (a kernel's parameter name), or the kernel.
        bytes: bytes allocated, freed or moved.
        queue: the async queue (None: synchronous).
        device_type, device_num: the device.
        host_address, device_address: addresses of the data.
        counters_before, counters_after: ``(structured, dynamic)`` around a data event.
        start, end: ``time.perf_counter()`` bounds of timed events.
        thread: ``threading.get_ident()`` of the thread that published it.
        error: the exception, for ``error``.
    """

    event: str
    construct: str | None = None
    file: str | None = None
    line: int | None = None
    function: str | None = None
    variable: str | None = None
    bytes: int | None = None
    queue: int | None = None
    device_type: str | None = None
    device_num: int | None = None
    host_address: int | None = None
    device_address: int | None = None
    counters_before: tuple | None = None
    counters_after: tuple | None = None
    start: float | None = None
    end: float | None = None
    thread: int | None = None
    error: BaseException | None = None

    @property
    def created(self) -> bool:
        return self.counters_before == (0, 0) and self.event == "enter_data"

    @property
    def deleted(self) -> bool:
        return self.counters_after == (0, 0) and self.event == "exit_data"


_LOCK = threading.Lock()
_CALLBACKS: dict[str, tuple] = {name: () for name in EVENTS}
_DISPATCHERS: dict = {}  # event kind -> the bus subscriber for it


def register(event: str, callback) -> None:
    """Call ``callback(info)`` for every ``event`` (a name of ``EVENTS``). A callback
    registered n times runs n times (OpenACC 3.3 §5.4)."""
    _check(event)
    if not callable(callback):
        raise TypeError(f"profiling callback must be callable, got {callback!r}")
    with _LOCK:
        _CALLBACKS[event] = _CALLBACKS[event] + (callback,)
        kind = EVENTS[event]
        if kind not in _DISPATCHERS:
            _DISPATCHERS[kind] = _dispatcher(kind)
            BUS.subscribe(_DISPATCHERS[kind], (kind,))


def unregister(event: str, callback) -> None:
    """Remove one registration of ``callback`` for ``event``.

    Raises:
        ValueError: it is not registered for that event.
    """
    _check(event)
    with _LOCK:
        callbacks = list(_CALLBACKS[event])
        if callback not in callbacks:
            raise ValueError(f"{callback!r} is not registered for profiling event {event!r}")
        callbacks.remove(callback)
        _CALLBACKS[event] = tuple(callbacks)
        kind = EVENTS[event]
        if not any(_CALLBACKS[name] for name, k in EVENTS.items() if k is kind):
            BUS.unsubscribe(_DISPATCHERS.pop(kind), (kind,))


def _check(event) -> None:
    if event not in EVENTS:
        raise ValueError(f"unknown profiling event {event!r}; the events are: {', '.join(EVENTS)}")


def _dispatcher(kind):
    def dispatch(runtime_event):
        name = _event_name(runtime_event)
        callbacks = _CALLBACKS[name]
        if callbacks:
            info = _info(name, runtime_event)
            for callback in callbacks:
                callback(info)
    return dispatch


def _event_name(event) -> str:
    kind = event.kind
    if kind is EventKind.REGION_ENTER:
        return _DATA_START if event.info == "data" else _COMPUTE_START
    if kind is EventKind.REGION_EXIT:
        return _DATA_END if event.info == "data" else _COMPUTE_END
    for name, event_kind in EVENTS.items():
        if event_kind is kind:
            return name
    raise AssertionError(kind)  # pragma: no cover


def _info(name: str, event) -> Info:
    source = event.info if event.kind is EventKind.DONE else event
    where = location_of(source)
    before = after = construct = error = None
    if event.counters is not None:
        before, after = event.counters
        construct = "structured" if before[0] != after[0] else "dynamic"
    elif event.kind is EventKind.DONE:
        construct = {EventKind.LAUNCH: "kernel", EventKind.UPLOAD: "upload",
                     EventKind.DOWNLOAD: "download"}.get(source.kind, "device copy")
    elif event.kind in (EventKind.REGION_ENTER, EventKind.REGION_EXIT):
        construct = event.info
    if event.kind is EventKind.ERROR:
        error = event.info
    return Info(name, construct, where.file, where.line, where.function, event.name,
                event.nbytes, event.queue, event.device[0], event.device[1], event.host_begin,
                event.device_begin, before, after, event.start,
                event.timestamp if event.start is not None else None, event.thread, error)
