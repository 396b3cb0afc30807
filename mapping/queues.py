"""Asynchronous queues for devices whose work runs on host threads (``emulated``, ``host``).

Owns: ``WorkerQueue`` — one OpenACC async queue (OpenACC 3.3 §2.16) served by one worker
thread that runs the queue's operations in submission order. (``Pending``, the result
slot of a queued kernel, lives in ``device`` with the launch that fills it.)

Semantics (API.md §5):
- operations on one queue run in order; different queues run concurrently with each other
  and with the host (copies release the GIL in numpy, kernels are compiled ``nogil``);
- ``defer(callback)`` runs ``callback`` when the queue gets there (deferred frees:
  libgomp's ``queue_callback_func``, numba-cuda's ``_PendingDeallocs``);
- ``record_event()`` returns an event set when the queue has passed that point;
  ``wait_event(event)`` makes the queue wait for it (``acc.wait_async``, ``wait=``); an
  event recorded behind a failed operation carries the failure, and the queue that waits
  for it fails too (its later work is skipped and its wait raises), as work queued behind
  a failure on the same queue is — dependent work never runs on garbage data;
- an operation that raises is recorded, with its description; until that error is
  reported, the operations queued behind it are skipped (their data may be garbage, as
  after a CUDA fault: a failed kernel's copy-back does not reach the host) except
  deferred releases and events, so memory returns to baseline and other queues are not
  stuck; the error is raised — once — as ``ExecutionError`` naming the queue and the
  operation by the next ``synchronize`` that covers it (``acc.wait``);
- ``hold()`` keeps the worker from starting further operations until the block ends:
  the hook that lets tests decide when work "completes" (trio's ``MockClock`` idea).

Invariant: ``completed <= submitted``; the queue is idle iff they are equal and nothing is
running. Closures of queued operations keep their host and device arrays alive until
they have run.
"""

from __future__ import annotations

import collections
import threading
from contextlib import contextmanager
from typing import Callable

from .device import Pending, Queue
from .errors import ExecutionError

__all__ = ["WorkerQueue", "QueueEvent"]


def describe_operation(description) -> str:
    """An operation's description: a string, or ``(what, name, nbytes)`` formatted only
    when an error needs it (building strings on every enqueue costs host time)."""
    if isinstance(description, tuple):
        if len(description) == 2:  # ("kernel", name)
            return f"{description[0]} {description[1]}"
        what, name, nbytes = description
        return f"{what} of {repr(name) if name else 'an array'} ({nbytes} bytes)"
    return description


class QueueEvent(threading.Event):
    """An event of a queue (``record_event``): set when the queue has passed the point
    where it was recorded. ``failure`` is ``(description, error)`` of the queue's first
    unreported failure at that point, or None; ``label`` names the queue."""

    def __init__(self, label: str):
        super().__init__()
        self.label = label
        self.failure = None


class WorkerQueue(Queue):
    """An asynchronous queue with its own worker thread (created with the queue).

    Args:
        async_value: the queue number (OpenACC async-value ≥ 0).
        device_label: how messages name the device (``"emulated device 0"``).
    """

    def __init__(self, async_value: int, device_label: str):
        self.async_value = async_value
        self._label = f"queue {async_value} of {device_label}"
        self._condition = threading.Condition()
        self._operations: collections.deque = collections.deque()
        self._submitted = 0
        self._completed = 0
        self._holds = 0
        self._sleeping = False  # the worker waits for work (only then does submit wake it)
        self._error: tuple[str, BaseException] | None = None
        self._closed = False
        self._worker = threading.Thread(target=self._serve, name=f"pyacc {self._label}", daemon=True)
        self._worker.start()

    # -- the protocol ----------------------------------------------------------------------
    def submit(self, operation: Callable[[], None], description="an operation", *,
               essential: bool = False) -> None:
        """Queue ``operation``. After an operation of this queue has failed, the ones
        queued behind it are skipped — the device data they would use may be garbage, as
        after a CUDA kernel fault — until the error is reported, except ``essential`` ones
        (deferred releases, events) that keep memory and other queues going."""
        with self._condition:
            if self._closed:
                raise ExecutionError(f"{self._label} is shut down; "
                                     f"{describe_operation(description)} was not queued")
            self._operations.append((operation, description, essential))
            self._submitted += 1
            if self._sleeping and not self._holds:  # a busy worker finds the work itself
                self._condition.notify_all()

    def defer(self, callback: Callable[[], None]) -> None:
        self.submit(callback, "a deferred release", essential=True)

    def synchronize(self) -> None:
        """Block until everything submitted so far has run; raise the first error of an
        operation that failed since the last synchronize (once)."""
        with self._condition:
            target = self._submitted
            while self._completed < target:
                self._condition.wait()
            error, self._error = self._error, None
        if error is not None:
            description, cause = error
            description = describe_operation(description)
            raise ExecutionError(
                f"{description} on {self._label} failed: {type(cause).__name__}: {cause}",
                queue=self.async_value, operation=description) from cause

    def is_idle(self) -> bool:
        with self._condition:
            return self._completed == self._submitted

    # -- events ------------------------------------------------------------------------------
    def record_event(self) -> "QueueEvent":
        """An event set once every operation submitted so far has run; its ``failure``
        is this queue's unreported error at that point, if any."""
        event = QueueEvent(self._label)

        def record():
            with self._condition:
                event.failure = self._error
            event.set()

        self.submit(record, "an event", essential=True)
        return event

    def wait_event(self, event: threading.Event) -> None:
        """Operations submitted after this start only once ``event`` is set; if the
        queue it was recorded on had failed, this queue fails here too."""

        def wait():
            event.wait()
            failure = getattr(event, "failure", None)
            if failure is not None:
                description, cause = failure
                raise ExecutionError(
                    f"{describe_operation(description)} on {event.label}, which this queue waited "
                    f"for, failed: {type(cause).__name__}: {cause}") from cause

        self.submit(wait, "a wait for another queue", essential=True)

    # -- testing hook --------------------------------------------------------------------------
    @contextmanager
    def hold(self):
        """While held, operations may be queued but none starts (tests use this to keep
        work pending without relying on timing)."""
        with self._condition:
            self._holds += 1
        try:
            yield self
        finally:
            with self._condition:
                self._holds -= 1
                self._condition.notify_all()

    # -- the worker ------------------------------------------------------------------------------
    def _serve(self) -> None:
        while True:
            with self._condition:
                while (not self._operations or self._holds) and not self._closed:
                    self._sleeping = True
                    self._condition.wait()
                    self._sleeping = False
                if self._closed and not self._operations:
                    return
                operation, description, essential = self._operations.popleft()
                skip = self._error is not None and not essential
            try:
                if not skip:
                    operation()
                elif hasattr(operation, "skipped"):
                    operation.skipped(description)  # e.g. a kernel's handle learns why
            except BaseException as cause:  # recorded, raised by the wait that covers it
                with self._condition:
                    if self._error is None:
                        self._error = (description, cause)
            operation = None  # do not keep its closure (and host arrays) alive while idle
            with self._condition:
                self._completed += 1
                self._condition.notify_all()

    def close(self) -> None:
        """Finish what is queued, then stop the worker thread."""
        with self._condition:
            self._closed = True
            self._holds = 0
            self._condition.notify_all()
        self._worker.join()
