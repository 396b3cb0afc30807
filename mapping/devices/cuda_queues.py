"""The queues of the ``cuda`` device: async queues on CUDA streams, the synchronous queue.

Owns: ``CudaQueue``, ``CudaQueueEvent``, ``CudaSyncQueue`` and ``SyncKernel`` (a kernel
launched on the synchronous queue). They implement ``queues.Queue`` over a backend
(``cuda_backend``).

Queues (OpenACC 3.3 §2.16, §3.2.9–3.2.14): ``CudaQueue`` keeps ``queues.WorkerQueue``'s
observable protocol over a non-blocking CUDA stream (``queue.stream``, what
``acc.get_cuda_stream`` returns): ``submit`` runs the operation at once on the calling
thread with the stream current (it enqueues work and returns); kernels (``Pending``) go
through ``backend.launch``. Failures — an operation that raises while it enqueues, a host
function or kernel that raises when it runs — are recorded with the operation's sequence
number; operations (and their host functions) behind a failure are skipped until the
failure is raised, once, as ``ExecutionError`` by the next ``synchronize``. ``defer`` and
DONE events run on the host once an event recorded on the stream has completed (polled in
``submit``, ``is_idle``, ``synchronize``); while a subscriber needs DONE in order
(``events.EventBus.in_order``: ``PYACC_AUTOCOMPARE``), ``submit`` completes each operation
and runs its callbacks before it returns. ``submit_relaunch`` enqueues launches made
again from C (``compiler/_relaunch.c.h``) as ``submit`` would enqueue their kernel, with
no ``Pending`` (nothing to skip: it declines behind a failure not yet reported).
``record_event``/``wait_event`` join queues on the GPU through CUDA events; an event
carries the failures before it, and the queue that waits fails too. ``CudaSyncQueue``
runs each operation on its own blocking stream (ordered with the legacy default stream,
where CuPy code of the user runs by default) and synchronizes before returning.

Invariants and threading:
- a CudaQueue's sequence numbers follow stream order (assigned under its enqueue lock);
  the failures at or below ``_floor`` have been reported;
- ``_lock`` guards the failure, wait and deferred lists (host functions take it too);
  ``_enqueue_lock`` (re-entrant) is held while an operation enqueues, so that its host
  functions share its sequence number; events are read outside ``_lock`` (an event locks
  its own queue);
- a host function never calls CUDA and never blocks: it copies with numpy and records;
- event order: a ``Timed`` operation's DONE is published by a deferred callback once the
  stream has passed it, never when it was skipped.
"""

from __future__ import annotations

import collections
import threading
import time

from ..errors import AccError, ExecutionError
from ..events import BUS
from ..queues import Pending, Queue, SyncQueue, describe_operation, reported_cause
from .common import Timed

__all__ = ["CudaQueue", "CudaQueueEvent", "CudaSyncQueue", "SyncKernel", "RELAUNCHED"]

_clock = time.perf_counter
_IN_ORDER = BUS.in_order


class _Failure:
    """A failed operation: its sequence number, description and exception."""

    __slots__ = ("sequence", "description", "cause")

    def __init__(self, sequence: int, description, cause: BaseException):
        self.sequence = sequence
        self.description = description
        self.cause = cause


class _Guarded:
    """An operation of a CudaQueue, run where and when it runs (calling thread, host
    function, kernel launch): skipped when an operation before it has failed and the
    failure is not yet reported (unless ``essential``); a failure is recorded."""

    __slots__ = ("queue", "sequence", "operation", "description", "essential", "was_skipped")

    def __init__(self, queue: "CudaQueue", sequence: int, operation, description, essential: bool):
        self.queue = queue
        self.sequence = sequence
        self.operation = operation
        self.description = description
        self.essential = essential
        self.was_skipped = False

    def __call__(self) -> None:
        operation, self.operation = self.operation, None  # drop its arrays once it has run
        try:
            if not self.essential and self.queue._failure_before(self.sequence) is not None:
                self.was_skipped = True
                skipped = getattr(operation, "skipped", None)
                if skipped is not None:
                    skipped(self.description)  # e.g. a kernel's handle learns why
                return
            operation()
        except Exception as error:  # recorded; raised by the wait that covers it
            self.queue._fail(self.sequence, self.description, error)


class CudaQueueEvent:
    """A point on a CudaQueue's stream (``record_event``): ``cuda_event`` for streams to
    wait on, and ``failure`` — ``(description, error)`` of the queue's first unreported
    failure before that point, or None — like ``queues.QueueEvent``."""

    __slots__ = ("queue", "cuda_event", "floor", "sequence", "label")

    def __init__(self, queue: "CudaQueue", cuda_event, floor: int, sequence: int):
        self.queue = queue
        self.cuda_event = cuda_event
        self.floor = floor
        self.sequence = sequence
        self.label = queue.label

    def wait(self) -> None:
        """Block the host until the stream has passed the event."""
        self.queue._backend.synchronize_event(self.cuda_event)

    @property
    def failure(self):
        found = self.queue._first_failure(self.floor, self.sequence)
        return None if found is None else (found.description, found.cause)


def _waited_failure(sequence: int, event: CudaQueueEvent, upstream) -> _Failure:
    description, cause = upstream[0], reported_cause(upstream[1])
    error = ExecutionError(
        f"{describe_operation(description)} on {event.label}, which this queue waited for, "
        f"failed: {type(cause).__name__}: {cause}")
    error.__cause__ = cause
    return _Failure(sequence, "a wait for another queue", error)


class CudaQueue(Queue):
    """An asynchronous queue (OpenACC 3.3 §2.16.1) over one non-blocking CUDA stream.

    Args:
        async_value: the queue number (OpenACC async-value ≥ 0).
        backend: the device's backend (module docstring).
        device_label: how messages name the device (``"cuda device 0"``).
    """

    def __init__(self, async_value: int, backend, device_label: str):
        self.async_value = async_value
        self.stream = backend.new_stream(blocking=False)
        self.label = f"queue {async_value} of {device_label}"
        self._backend = backend
        self._lock = threading.Lock()  # the lists below (host functions take it too)
        self._enqueue_lock = threading.RLock()  # sequence numbers follow stream order
        self._report_lock = threading.Lock()
        self._local = threading.local()  # ``running``: (sequence, description) being enqueued
        self._sequence = 0
        self._floor = 0
        self._failures: list[_Failure] = []  # every failure found (rare: never pruned)
        self._waits: list[tuple[int, CudaQueueEvent]] = []  # until known harmless
        self._deferred: collections.deque = collections.deque()  # (event, sequence, callback)
        self._staging_stream = None  # made at first use (``staging_stream``)
        #: per kernel, what makes its launches on this queue again from C (the express
        #: lane's ``Relaunch``, ``pyacc._express.enqueuer``): it lives as long as the stream
        #: its kept launches go to
        self.relaunches: dict = {}

    # -- the protocol ----------------------------------------------------------------------
    def submit(self, operation, description="an operation", *, essential: bool = False,
               predicted: float | None = None) -> None:
        """Enqueue ``operation`` on the stream: run it now with the stream current (a
        kernel, ``Pending``: through ``backend.launch``, in stream order). A ``Timed``
        operation publishes DONE once the stream has passed it. (``predicted`` is not
        used: the GPU runs the work, and enqueueing it is already cheap.)"""
        self.poll()
        timed = operation if isinstance(operation, Timed) else None
        inner = operation if timed is None else operation.operation
        start = 0.0 if timed is None else _clock()
        with self._enqueue_lock:
            guarded = _Guarded(self, self._next(), inner, description, essential)
            if isinstance(inner, Pending):
                self._backend.launch(self.stream, guarded)
            else:
                self._run_now(guarded)
            if timed is not None:
                self.defer(_TimedDone(timed, guarded, start))
        if _IN_ORDER[0]:  # a subscriber needs this DONE before the next operation runs
            self._drain()

    def submit_relaunch(self, again, args, name):
        """Enqueue kernel ``name``'s launches made again from C (``again(*args)``: a
        ``Relaunch``'s, ``compiler/_relaunch.c.h``) as ``submit`` would enqueue the kernel,
        where ``submit`` would do nothing else for it: the queue polled first, as
        ``submit`` polls it; not behind a failure not yet reported (which ``submit`` would
        skip it for) nor for a subscriber in order. The call's outcome when they were
        enqueued, what its handle holds (``AsyncResult``): :data:`RELAUNCHED`, or a
        ``Pending`` with the ``error`` of a launch the driver refused (also this
        operation's failure, raised by the next wait, as ``submit`` records it); None when
        nothing was done: ``submit`` as usual."""
        if _IN_ORDER[0]:
            return None
        if self._deferred or self._waits:  # (else ``poll`` has nothing to do)
            self.poll()
        with self._enqueue_lock:  # (the launches and their sequence number in stream order)
            if (self._failures or self._waits) and self._failure_before(self._sequence + 1) is not None:
                return None
            try:
                if not again(*args):
                    return None
            except Exception as error:  # recorded; raised by the wait that covers it
                self._fail(self._next(), ("kernel", name), error)
                failed = Pending(None, (), name, self.async_value)
                failed.error = error  # (as a queued kernel's handle keeps it)
                return failed
            self._next()
        return RELAUNCHED

    def _drain(self) -> None:
        """Wait for the stream and run the deferred callbacks; a failure is recorded for
        the wait that covers it, as always (``events.EventBus.in_order``)."""
        try:
            self._backend.synchronize(self.stream)
            drained = True
        except Exception as cause:  # a device error: the covering wait reports it
            with self._enqueue_lock:
                target = self._sequence
            if self._first_failure(self._floor, target + 1) is None:  # a sticky error:
                self._fail(target, "an operation", cause)             # recorded once
            drained = False
        self.poll(force=not drained)

    def defer(self, callback) -> None:
        """Run ``callback`` on the host once the stream has passed this point."""
        with self._enqueue_lock:
            sequence = self._next()
            event = self._backend.record_event(self.stream)
            with self._lock:
                self._deferred.append((event, sequence, callback))

    def synchronize(self) -> None:
        """Block until the stream has run everything submitted so far; run the deferred
        callbacks; raise the first failure not yet reported (once) as ``ExecutionError``."""
        with self._enqueue_lock:
            target = self._sequence
        self._drain()
        with self._report_lock:
            failure = self._first_failure(self._floor, target + 1)
            self._floor = max(self._floor, target)
        if failure is not None:
            description, cause = describe_operation(failure.description), reported_cause(failure.cause)
            raise ExecutionError(
                f"{description} on {self.label} failed: {type(cause).__name__}: {cause}",
                queue=self.async_value, operation=description) from cause

    def is_idle(self) -> bool:
        done = self._backend.stream_done(self.stream)
        self.poll()
        with self._lock:
            return done and not self._deferred

    # -- events ------------------------------------------------------------------------------
    def record_event(self) -> CudaQueueEvent:
        with self._enqueue_lock:
            sequence = self._next()
            return CudaQueueEvent(self, self._backend.record_event(self.stream), self._floor, sequence)

    def wait_event(self, event: CudaQueueEvent) -> None:
        """Work submitted after this starts once ``event`` has completed (the stream
        waits on the CUDA event; the host does not). A failure ``event`` carries becomes
        this queue's, as the failure of the wait (OpenACC 3.3 §2.16.2, §3.2.11 ``acc_wait_async``)."""
        with self._enqueue_lock:
            sequence = self._next()
            self._backend.wait_event(self.stream, event.cuda_event)
            with self._lock:
                self._waits.append((sequence, event))

    # -- for operations that enqueue ---------------------------------------------------------
    def host_func(self, function, *, stream=None) -> None:
        """Run ``function`` on the host when the stream (or ``stream``: the
        ``staging_stream``) reaches this point (it must not call CUDA). Called by an
        operation while it enqueues: ``function`` shares its sequence number, is skipped
        when an earlier operation failed, and its failure is the operation's."""
        running = getattr(self._local, "running", None)
        with self._enqueue_lock:
            sequence, description = running or (self._next(), "a host function")
            guarded = _Guarded(self, sequence, function, description, False)
            self._backend.launch_host_func(self.stream if stream is None else stream, guarded)

    @property
    def staging_stream(self):
        """This queue's second stream, made at first use: the host copies of a transfer
        staged in several pieces run on it beside the queue's DMAs (``cuda_staging``),
        ordered with the queue's stream by events only."""
        with self._enqueue_lock:
            if self._staging_stream is None:
                self._staging_stream = self._backend.new_stream(blocking=False)
            return self._staging_stream

    def streams(self) -> tuple:
        """The CUDA streams this queue has made: its own, and its staging stream once made."""
        return (self.stream,) if self._staging_stream is None else (self.stream, self._staging_stream)

    def poll(self, *, force: bool = False) -> None:
        """Run the deferred callbacks whose point the stream has passed (all of them with
        ``force``), and settle the waits on events that have completed."""
        if not self._deferred and not self._waits:  # (read without the lock: what is
            return                                   # deferred meanwhile, the next poll runs)
        ready = []
        with self._lock:
            while self._deferred and (force or self._backend.event_done(self._deferred[0][0])):
                ready.append(self._deferred.popleft())
            waits = list(self._waits)
        for _, sequence, callback in ready:
            try:
                callback()
            except Exception as error:
                self._fail(sequence, "a deferred release", error)
        if waits:
            self._settle(waits, force)

    def hold(self):
        """Keep the stream from starting further work while the block runs (the testing
        hook of ``pyacc.testing.hold_queue``: the backend's ``hold``)."""
        return self._backend.hold(self.stream)

    # -- bookkeeping ---------------------------------------------------------------------------
    def _next(self) -> int:
        with self._lock:
            self._sequence += 1
            return self._sequence

    def _run_now(self, guarded: _Guarded) -> None:
        previous = getattr(self._local, "running", None)
        self._local.running = (guarded.sequence, guarded.description)
        try:
            with self._backend.use_stream(self.stream):
                guarded()
        finally:
            self._local.running = previous

    def _fail(self, sequence: int, description, cause: BaseException) -> None:
        with self._lock:
            self._failures.append(_Failure(sequence, description, cause))

    def _failure_before(self, sequence: int) -> _Failure | None:
        if not self._failures and not self._waits:  # the common case, without the lock
            return None
        return self._first_failure(self._floor, sequence)

    def _first_failure(self, floor: int, before: float) -> _Failure | None:
        """The first failure of an operation numbered in ``(floor, before)``: this queue's
        own, or a failure carried by an event it waited for (then the wait's)."""
        with self._lock:
            failures, waits = list(self._failures), list(self._waits)
        found = None
        for failure in failures:
            if floor < failure.sequence < before and (found is None or failure.sequence < found.sequence):
                found = failure
        for sequence, event in waits:  # events are read outside the lock (they lock their queue)
            if floor < sequence < before and (found is None or sequence < found.sequence):
                upstream = event.failure
                if upstream is not None:
                    found = _waited_failure(sequence, event, upstream)
        return found

    def _settle(self, waits, force: bool) -> None:
        """Waits whose event has completed can no longer fail later: record the failure
        they carry, if any, and forget them."""
        settled = set()
        for sequence, event in waits:
            if force or self._backend.event_done(event.cuda_event):
                upstream = event.failure
                if upstream is not None:
                    failure = _waited_failure(sequence, event, upstream)
                    self._fail(failure.sequence, failure.description, failure.cause)
                settled.add(id(event))
        if settled:
            with self._lock:
                self._waits = [entry for entry in self._waits if id(entry[1]) not in settled]


#: the outcome of a call made again from C (``CudaQueue.submit_relaunch``): a kernel that
#: returned None and raised nothing, for its handle (one object: never written)
RELAUNCHED = Pending(None, (), None, None)


class _TimedDone:
    """Deferred DONE of a timed operation (not published when the operation was skipped)."""

    __slots__ = ("timed", "guarded", "start")

    def __init__(self, timed: Timed, guarded: _Guarded, start: float):
        self.timed, self.guarded, self.start = timed, guarded, start

    def __call__(self) -> None:
        if not self.guarded.was_skipped:
            self.timed.finish(self.start)


class CudaSyncQueue(SyncQueue):
    """The synchronous queue (``acc.async_sync``): each operation runs on a blocking
    stream of its own, which is synchronized before ``submit`` returns (so ``defer`` can
    run its callback at once, as ``SyncQueue`` does; its events are complete when
    recorded, and waiting for one is a host wait, as there)."""

    async_value = None

    def __init__(self, backend, device_label: str):
        self.stream = backend.new_stream(blocking=True)
        self.label = f"the synchronous queue of {device_label}"
        self._backend = backend

    def submit(self, operation, description="an operation", *, essential: bool = False,
               predicted: float | None = None) -> None:
        with self._backend.use_stream(self.stream):
            operation()
        self.synchronize()

    def defer(self, callback) -> None:
        callback()

    def synchronize(self) -> None:
        try:
            self._backend.synchronize(self.stream)
        except AccError:
            raise
        except Exception as cause:  # CUDARuntimeError: a kernel or copy failed on the GPU
            raise ExecutionError(f"an operation on {self.label} failed: {type(cause).__name__}: "
                                 f"{cause}", queue=None) from cause

    def is_idle(self) -> bool:
        return True


class SyncKernel:
    """A kernel launched on the synchronous queue: with its stream current, then waited
    for (no async clause: the host waits, OpenACC 3.3 §2.16.1)."""

    __slots__ = ("kernel", "backend", "queue")

    def __init__(self, kernel, backend, queue: CudaSyncQueue):
        self.kernel, self.backend, self.queue = kernel, backend, queue

    def __call__(self, *args):
        with self.backend.use_stream(self.queue.stream):
            result = self.kernel(*args)
        self.queue.synchronize()
        return result
