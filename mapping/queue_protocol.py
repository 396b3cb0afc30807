"""The queue protocol: what every OpenACC async queue does, whoever runs its work.

Owns (OpenACC 3.3 §2.16, §3.2.9–3.2.14; API.md §5):
- ``Queue`` — the protocol every queue implements, each method callers use declared:
  ``submit``, ``defer``, ``synchronize``, ``is_idle``, ``record_event``, ``wait_event``,
  ``settled``, ``hold``;
- ``QueueEvent`` — an event of a queue whose work runs on host threads (set once the
  queue has passed the point where it was recorded; it carries that queue's failure);
- ``SyncQueue`` — the synchronous queue (``acc.async_sync``): each operation runs at once
  on the calling thread;
- error collection: ``describe_operation`` (an operation's description, formatted only
  when an error needs it), ``raise_all`` (the errors of several queues raised as one),
  ``raise_waited_failure`` (a failure carried by an event another queue waited for),
  ``reported_cause`` (the exception a routine raised inside a kernel, not Python's
  ``SystemError`` around it).

The implementations live elsewhere: ``queues.WorkerQueue`` (a worker thread per queue:
``emulated``, ``host``, the fake CUDA backend's streams) and ``cuda_queues`` (CUDA
streams); ``queues`` also re-exports every name here, which is where most code imports
them from. The code that plans and commits mapping work only needs ``Queue``.

Semantics of an asynchronous queue (API.md §5), which every implementation keeps:
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
- ``hold()`` keeps the queue from starting further operations until the block ends:
  the hook that lets tests decide when work "completes" (trio's ``MockClock`` idea); only
  queues whose work runs on host threads can be held.

Invariants: this module holds no state (no lock, no thread); ``SyncQueue`` events are
complete when recorded, and waiting for an event on it is a host wait.
"""

from __future__ import annotations

import abc
import threading
from typing import Callable

from .errors import ExecutionError

__all__ = ["Queue", "QueueEvent", "SyncQueue", "describe_operation", "raise_all",
           "raise_waited_failure"]


def describe_operation(description) -> str:
    """An operation's description: a string, or ``(what, name, nbytes)`` formatted only
    when an error needs it (building strings on every enqueue costs host time)."""
    if isinstance(description, tuple):
        if len(description) == 2:  # ("kernel", name)
            return f"{description[0]} {description[1]}"
        what, name, nbytes = description
        return f"{what} of {repr(name) if name else 'an array'} ({nbytes} bytes)"
    return description


def raise_all(failures: list) -> None:
    """Raise the errors of several queues as one: the first, or an ``ExecutionError``
    that lists them all (none is lost by a wait on several queues)."""
    if not failures:
        return
    if len(failures) == 1:
        raise failures[0]
    raise ExecutionError(
        f"{len(failures)} queued operations failed: " + "; ".join(str(f) for f in failures),
        failures=tuple(failures)) from failures[0]


def reported_cause(cause: BaseException) -> BaseException:
    """The exception an operation raised, as it is reported: Python reports one raised in
    a routine that a compiled kernel calls as ``SystemError: ... returned a result with an
    exception set``, with the routine's exception (``ValueError`` ...) as its context."""
    while isinstance(cause, SystemError) and "with an exception set" in str(cause) \
            and cause.__context__ is not None:
        cause = cause.__context__
    return cause


def raise_waited_failure(event) -> None:
    """Raise the failure ``event`` carries (an event of another queue waited for)."""
    failure = getattr(event, "failure", None)
    if failure is not None:
        description, cause = failure
        cause = reported_cause(cause)
        raise ExecutionError(
            f"{describe_operation(description)} on {event.label}, which this queue waited "
            f"for, failed: {type(cause).__name__}: {cause}") from cause


class Queue(abc.ABC):
    """An ordered stream of device operations (an OpenACC async queue)."""

    #: the async value (``None`` for the synchronous queue)
    async_value: int | None = None
    #: whether ``submit`` may run a ``predicted`` operation at once (``WorkerQueue``)
    inlines: bool = False

    @abc.abstractmethod
    def submit(self, operation: Callable[[], None], description="an operation", *,
               essential: bool = False, predicted: float | None = None) -> None:
        """Run ``operation`` after everything submitted before it (``description`` names
        it in the error raised if it fails). After a failure, operations behind it are
        skipped until it is reported, except ``essential`` ones (releases, events).
        ``predicted``: the seconds it is expected to run (None: unknown); a queue may
        then run it at once on the calling thread (``WorkerQueue``)."""

    @abc.abstractmethod
    def defer(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` once the queue has passed this point (e.g. a deferred free)."""

    @abc.abstractmethod
    def synchronize(self) -> None:
        """Block until every operation submitted so far has completed; raise the first
        error of an operation that failed since the last synchronize (once)."""

    @abc.abstractmethod
    def is_idle(self) -> bool:
        """True when every operation submitted so far has completed."""

    @abc.abstractmethod
    def record_event(self):
        """An event completed once the queue has passed this point; its ``failure`` is
        ``(description, error)`` of the queue's unreported failure there, or None."""

    @abc.abstractmethod
    def wait_event(self, event) -> None:
        """Operations submitted after this start only once ``event`` has completed; a
        failure it carries becomes this queue's."""

    def settled(self) -> bool:
        """True when nothing is pending and no error waits to be reported, known by a
        check (no lock, no device call); False when it cannot be known so (then the
        caller synchronizes)."""
        return False

    def hold(self):
        """A context manager: while it is held, work may be queued but none starts
        (a testing hook; only queues whose work runs on host threads can be held).

        Raises:
            ExecutionError: this queue cannot be held.
        """
        raise ExecutionError(f"{self!r} cannot be held")


class QueueEvent(threading.Event):
    """An event of a queue (``record_event``): set when the queue has passed the point
    where it was recorded. ``failure`` is ``(description, error)`` of the queue's first
    unreported failure at that point, or None; ``label`` names the queue."""

    def __init__(self, label: str):
        super().__init__()
        self.label = label
        self.failure = None


class SyncQueue(Queue):
    """The synchronous queue: each operation runs at once on the calling thread (so its
    events are complete when recorded, and waiting for an event is a host wait)."""

    async_value = None
    label = "the synchronous queue"

    def submit(self, operation, description="an operation", *, essential=False, predicted=None):
        operation()

    def defer(self, callback):
        callback()

    def synchronize(self):
        pass

    def is_idle(self):
        return True

    def record_event(self) -> QueueEvent:
        """Complete at once: every operation has completed when ``submit`` returns."""
        event = QueueEvent(self.label)
        event.set()
        return event

    def wait_event(self, event) -> None:
        """The host waits (there is nothing to enqueue a wait on)."""
        event.wait()
        raise_waited_failure(event)
