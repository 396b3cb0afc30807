"""Queues whose work runs on host threads, and the set of queues of one device.

Owns (OpenACC 3.3 §2.16, §3.2.9–3.2.14; API.md §5):
- ``WorkerQueue`` — an asynchronous queue served by one worker thread that runs the
  queue's operations in submission order (devices whose work runs on host threads:
  ``emulated``, ``host``; the fake CUDA backend's streams); short work on an idle queue
  runs at once on the calling thread below ``CROSSOVER`` (``inline``);
- ``Pending`` — the result slot of a kernel queued on an asynchronous queue;
- ``QueueSet`` — the queues of one device: ``queue(n)`` (created on first use by the
  device's queue factory), ``existing()``, ``join`` (a queue waits for others),
  ``wait`` (the host waits for some), ``synchronize`` (the host waits for all),
  ``release`` (a callback deferred until every busy queue has passed this point).
  ``Device`` holds one and delegates to it; no other code waits on queues.

The protocol every queue keeps — ``Queue``, ``SyncQueue``, ``QueueEvent``, the semantics
of an asynchronous queue and error collection (``raise_all``, ``describe_operation``) —
is ``queue_protocol``'s; its names are re-exported here, where callers import them.

Invariants and threading:
- a ``WorkerQueue``'s ``completed <= submitted``; the queue is idle iff they are equal
  and nothing is running. Closures of queued operations keep their host and device arrays
  alive until they have run;
- a ``WorkerQueue``'s state is guarded by its lock (``_lock``); host threads waiting in
  ``synchronize`` sleep on its condition, the idle worker on a raw lock of its own
  (``_wake``, released once per sleep by ``_wake_worker``); operations run on its worker
  thread with no lock held (they may take the device's allocator lock, never the table
  lock);
- event order: a ``WAIT`` event is published after the wait it reports has ended, also
  when the wait raised; ``QueueSet.wait`` drains every listed queue before it raises (no
  error is lost), ``synchronize`` publishes one ``WAIT`` for all queues;
- a ``QueueSet``'s dictionary is written under its lock and read without it (creation is
  double-checked); after ``os.fork`` the child ``forget``s the parent's queues.
"""

from __future__ import annotations

import _thread
import collections
import threading
import time
from contextlib import contextmanager
from typing import Callable

from ._probe import TableLock
from .errors import AccError, ExecutionError
from .events import BUS, EventKind
from .inline import MOST, Crossover, arguments_bytes, measure, predict_kernel, record_kernel
from .queue_protocol import Queue, QueueEvent, SyncQueue, describe_operation, raise_all, \
    raise_waited_failure, reported_cause

__all__ = ["Queue", "SyncQueue", "WorkerQueue", "QueueEvent", "Pending", "QueueSet", "CROSSOVER",
           "raise_all", "describe_operation", "reported_cause"]

_ACTIVE = BUS.active
_WAIT = int(EventKind.WAIT)
_JOIN = int(EventKind.JOIN)
_clock = time.perf_counter
_thread_id = threading.get_ident
_allocate_lock = _thread.allocate_lock
#: the identities of the threads of ``WorkerQueue``s (work run elsewhere ran at once)
_WORKER_THREADS: set = set()


class Pending:
    """A kernel queued on an asynchronous queue, and its result: the queue calls it;
    ``value`` is set when the kernel has run, ``error`` when it failed or was skipped.
    (One object rather than closures: enqueueing is on the host's critical path.)
    ``nbytes``: the bytes of its array arguments, when its run time is measured for the
    inline crossover's predictions (``inline.predict_kernel``), else None."""

    __slots__ = ("kernel", "args", "name", "queue_number", "value", "error", "nbytes")

    def __init__(self, kernel, args, name, queue_number, measured: bool = False):
        self.kernel = kernel
        self.args = args
        self.name = name
        self.queue_number = queue_number
        self.value = None
        self.error = None  # the kernel's exception, when it failed
        self.nbytes = arguments_bytes(args) if measured else None

    def predicted(self):
        """Its predicted run time in seconds (None: unknown, or not measured)."""
        return None if self.nbytes is None else predict_kernel(self.kernel, self.nbytes)

    def __call__(self):
        try:
            if self.nbytes is None:
                self.value = self.kernel(*self.args)
            else:
                start = _clock()
                self.value = self.kernel(*self.args)
                record_kernel(self.kernel, _clock() - start, self.nbytes,
                              _thread_id() not in _WORKER_THREADS)
        except BaseException as error:
            self.error = error
            raise
        finally:
            self.kernel = self.args = None  # release the arrays once it has run

    def skipped(self, description):
        self.kernel = self.args = None
        self.error = ExecutionError(
            f"kernel {self.name} was skipped: an earlier operation on queue "
            f"{self.queue_number} failed")


class WorkerQueue(Queue):
    """An asynchronous queue with its own worker thread (created with the queue).

    Args:
        async_value: the queue number (OpenACC async-value ≥ 0).
        device_label: how messages name the device (``"emulated device 0"``).
        inline_below: seconds below which a predicted operation runs at once on an idle
            queue (``submit``); default: ``CROSSOVER.below()``; 0.0: never.
    """

    # slots: the express lane's async call run at once (pyacc/_queue_take.c.h) and acc.wait's
    # C entry (pyacc/_queue_settled.c.h) read and write these in place (the rest is in the
    # instance dict)
    __slots__ = ("_lock", "_completed", "_submitted", "_holds", "_closed", "_error", "_inline",
                 "_waiters", "_operations", "_inline_below", "inlines", "_handed")

    def __init__(self, async_value: int, device_label: str, inline_below: float | None = None):
        self.async_value = async_value
        self._label = f"queue {async_value} of {device_label}"
        # guards the state; taken directly on the hot paths, and in place from C when it is
        # the C lock (``_probe.TableLock``). Re-entrant (that, or ``threading.RLock``): the
        # express lane's async call run at once holds it for the kernel's run
        # (pyacc/_queue_take.c.h; no count then, see ``begin_inline``), and code that run
        # calls on this thread (a profiler, Numba's dispatcher) may take it again
        self._lock = TableLock()
        self._condition = threading.Condition(self._lock)  # host threads in synchronize
        # the sleeping worker's wake-up: a raw lock, held except between a ``_notify``'s
        # release and the worker's acquire (C calls: no Python-level Condition, no lock
        # allocated per wait, ~0.1 µs against notify_all's ~8 µs)
        self._wake = _allocate_lock()
        self._wake.acquire()
        self._waiters = 0  # threads in synchronize (end_inline wakes them only when some wait)
        self._operations: collections.deque = collections.deque()
        self._submitted = 0
        self._completed = 0
        self._holds = 0
        self._sleeping = False  # the worker waits for work (only then does submit wake it)
        self._inline = False  # the caller runs an operation (begin_inline), the worker waits
        # seconds (API.md §5; 0.0: never)
        self._inline_below = CROSSOVER.below() if inline_below is None else inline_below
        self._base_below = self._inline_below  # measured (or given); _adapt moves from it
        self._handed = False  # work went to the worker since the host last waited
        self.inlines = self._inline_below > 0.0
        self._error: tuple[str, BaseException] | None = None
        self._closed = False
        self._worker = threading.Thread(target=self._serve, name=f"pyacc {self._label}", daemon=True)
        self._worker.start()

    # -- the protocol ----------------------------------------------------------------------
    def submit(self, operation: Callable[[], None], description="an operation", *,
               essential: bool = False, predicted: float | None = None) -> None:
        """Queue ``operation``. After an operation of this queue has failed, the ones
        queued behind it are skipped — the device data they would use may be garbage, as
        after a CUDA kernel fault — until the error is reported, except ``essential`` ones
        (deferred releases, events) that keep memory and other queues going.

        An operation ``predicted`` to run for less than the inline crossover
        (``CROSSOVER``) runs at once on the calling thread when the queue is idle
        (``run_inline``): observably the same as queued work that completed at once."""
        if predicted is not None and self.take(predicted):
            self.run_inline(operation, description)
            return
        with self._lock:
            if self._closed:
                raise ExecutionError(f"{self._label} is shut down; "
                                     f"{describe_operation(description)} was not queued")
            self._operations.append((operation, description, essential))
            self._submitted += 1
            self._handed = True
            if self._sleeping and not self._holds:  # a busy worker finds the work itself
                self._wake_worker()

    # -- work run at once on the calling thread (API.md §5, last point) ------------------------
    def take(self, predicted: float) -> bool:
        """``begin_inline`` for an operation predicted to run ``predicted`` seconds, when
        that is below this queue's crossover; True when the caller now runs it."""
        return predicted < self._inline_below and self.begin_inline()

    def take_kernel(self, kernel, nbytes: int) -> bool:
        """``take`` for ``kernel`` over arguments of ``nbytes`` bytes, as
        ``inline.predict_kernel`` predicts it (never measured: not taken)."""
        predicted = predict_kernel(kernel, nbytes)  # (``take``, spelled out: a call less)
        return predicted is not None and predicted < self._inline_below and self.begin_inline()

    def ran_at_once(self, kernel, seconds: float, nbytes: int, description,
                    cause: BaseException | None) -> None:
        """A kernel the caller ran at once (``take_kernel``) took ``seconds`` over
        ``nbytes`` bytes; ``cause``: its error, kept for the covering wait
        (``end_inline``)."""
        try:
            if cause is None:
                record_kernel(kernel, seconds, nbytes, True, self._inline_below)
        finally:  # the queue is given back whatever happens
            self.end_inline(description, cause)

    def begin_inline(self) -> bool:
        """Take the queue for one operation run by the caller, when it is idle (nothing
        queued or running), not held, not shut down and has no unreported error (work
        behind an error is skipped, which the worker does); True when taken. Until
        ``end_inline``, the queue is busy: work others queue waits behind it.

        (The express lane's C path runs a kernel at once the other way: it holds the
        lock for the kernel's run, after this same test, and changes no count — nobody
        can queue, hold, close or wait meanwhile; ``pyacc/_queue_take.c.h``.)"""
        with self._lock:
            if self._completed != self._submitted or self._holds or self._closed or \
                    self._error is not None or self._inline:
                return False
            self._inline = True
            self._submitted += 1
            return True

    def end_inline(self, description=None, cause: BaseException | None = None) -> None:
        """The caller's operation has run (``cause``: the error it raised, recorded as a
        queued operation's is: raised by the wait that covers it)."""
        with self._lock:
            if cause is not None and self._error is None:
                self._error = (description, cause)
            self._inline = False
            self._completed += 1
            if self._waiters or self._operations or self._closed:  # a synchronize, work queued
                self._notify()                                       # or a close meanwhile

    def run_inline(self, operation, description) -> None:
        """Run ``operation`` on this thread, taken by ``begin_inline``: its error is kept
        for the covering wait; an interrupt (not an ``Exception``) still propagates."""
        try:
            operation()
        except Exception as cause:
            self.end_inline(description, cause)
        except BaseException:
            self.end_inline()
            raise
        else:
            self.end_inline()

    def defer(self, callback: Callable[[], None]) -> None:
        self.submit(callback, "a deferred release", essential=True)

    def synchronize(self) -> None:
        """Block until everything submitted so far has run; raise the first error of an
        operation that failed since the last synchronize (once). An idle queue with no
        error costs a check (no lock: see ``is_idle``; an error is kept before the
        count of its operation grows)."""
        if self.settled():
            return
        with self._lock:
            target = self._submitted
            if self._handed:
                self._adapt(self._completed < target)
            self._waiters += 1
            try:
                while self._completed < target:
                    self._condition.wait()
            finally:
                self._waiters -= 1
            error, self._error = self._error, None
        if error is not None:
            description, cause = error
            description, cause = describe_operation(description), reported_cause(cause)
            raise ExecutionError(
                f"{description} on {self._label} failed: {type(cause).__name__}: {cause}",
                queue=self.async_value, operation=description) from cause

    def settled(self) -> bool:
        """Idle with no error to report, by a check without the lock (see ``is_idle``):
        a host wait then has nothing to do (``synchronize``'s first step, the wait of
        ``QueueSet.settled``), and work handed to the worker was done (``_adapt``)."""
        if self._completed == self._submitted and self._error is None:
            if self._handed:
                self._adapt(False)
            return True
        return False

    def _adapt(self, blocked: bool) -> None:
        """The host waits for this queue after work went to its worker: when it had to
        block, that work's overlap did not pay (the host had nothing else to do), so
        the crossover doubles, up to ``inline.MOST`` (work that long keeps overlapping);
        when the work was done already, it halves back towards the measured one. (A
        heuristic: a racing write loses one step, never correctness.)"""
        self._handed = False
        if self._base_below > 0.0:
            below = self._inline_below
            self._inline_below = min(2.0 * below, max(MOST, self._base_below)) if blocked \
                else max(self._base_below, 0.5 * below)

    def is_idle(self) -> bool:
        """True when everything submitted has run. Reads without the lock: ``_completed``
        first, so that equal counts mean the queue was idle at that read (both only grow)."""
        completed = self._completed
        return completed == self._submitted

    # -- events ------------------------------------------------------------------------------
    def record_event(self) -> "QueueEvent":
        """An event set once every operation submitted so far has run; its ``failure``
        is this queue's unreported error at that point, if any."""
        event = QueueEvent(self._label)

        def record():
            with self._lock:
                event.failure = self._error
            event.set()

        self.submit(record, "an event", essential=True)
        return event

    def wait_event(self, event: threading.Event) -> None:
        """Operations submitted after this start only once ``event`` is set; if the
        queue it was recorded on had failed, this queue fails here too."""

        def wait():
            event.wait()
            raise_waited_failure(event)

        self.submit(wait, "a wait for another queue", essential=True)

    # -- testing hook --------------------------------------------------------------------------
    @contextmanager
    def hold(self):
        """While held, operations may be queued but none starts (tests use this to keep
        work pending without relying on timing)."""
        with self._lock:
            self._holds += 1
        try:
            yield self
        finally:
            with self._lock:
                self._holds -= 1
                self._notify()

    # -- the worker ------------------------------------------------------------------------------
    def _serve(self) -> None:
        _WORKER_THREADS.add(_thread_id())
        try:
            self._serve_operations()
        finally:
            _WORKER_THREADS.discard(_thread_id())

    def _serve_operations(self) -> None:
        while True:
            with self._lock:
                while self._inline or ((not self._operations or self._holds) and not self._closed):
                    self._sleep()
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
                with self._lock:
                    if self._error is None:
                        self._error = (description, cause)
            operation = None  # do not keep its closure (and host arrays) alive while idle
            with self._lock:
                self._completed += 1
                if self._waiters:
                    self._condition.notify_all()

    def close(self) -> None:
        """Finish what is queued, then stop the worker thread."""
        with self._lock:
            self._closed = True
            self._holds = 0
            self._notify()
        self._worker.join()

    # -- waking: host threads by the condition, the worker by its raw lock (lock held) ----------
    def _sleep(self) -> None:
        """The worker, holding the queue's lock, waits for ``_wake_worker``: the lock is
        given back while it waits and taken again before it returns."""
        self._sleeping = True
        self._lock.release()
        try:
            self._wake.acquire()
        finally:
            self._lock.acquire()

    def _wake_worker(self) -> None:
        """Wake the worker if it sleeps (once per sleep: the flag is cleared here)."""
        if self._sleeping:
            self._sleeping = False
            self._wake.release()

    def _notify(self) -> None:
        """The state changed: wake the host threads in ``synchronize`` and the worker."""
        if self._waiters:
            self._condition.notify_all()
        self._wake_worker()


#: the run time below which work on an idle asynchronous queue runs at once (``inline``)
CROSSOVER = Crossover(lambda: measure(lambda number, label: WorkerQueue(number, label, 0.0)))


class _Countdown:
    """A callback shared by several queues: it runs when the last of them gets there."""

    __slots__ = ("remaining", "callback", "argument", "lock")

    def __init__(self, count: int, callback, argument):
        self.remaining = count
        self.callback = callback
        self.argument = argument
        self.lock = threading.Lock()

    def __call__(self) -> None:
        with self.lock:
            self.remaining -= 1
            last = self.remaining == 0
        if last:
            self.callback(self.argument)


class QueueSet:
    """The queues of one device: its synchronous queue and its asynchronous queues,
    created on first use by ``new_queue(async_value)`` (``Device._new_queue``, which
    calls the device's queue factory: ``WorkerQueue`` for host-thread devices).

    Args:
        new_queue: makes the asynchronous queue of an async value.
        identity: the device's ``(type, number)``, for ``WAIT`` events.
        sync_queue: the device's synchronous queue.
    """

    #: (slots: the express lane reads ``_queues`` in place, ``pyacc/_queue_take.c.h``)
    __slots__ = ("sync", "_new_queue", "_identity", "_queues", "_lock")

    def __init__(self, new_queue, identity, sync_queue: Queue):
        self.sync = sync_queue
        self._new_queue = new_queue
        self._identity = identity
        self._queues: dict[int, Queue] = {}  # async value -> queue
        self._lock = threading.Lock()

    def queue(self, async_value: int | None) -> Queue:
        """The queue for an async value (``None``: the synchronous queue)."""
        if async_value is None:
            return self.sync
        queue = self._queues.get(async_value)
        if queue is None:
            with self._lock:
                queue = self._queues.get(async_value)
                if queue is None:
                    queue = self._queues[async_value] = self._new_queue(async_value)
        return queue

    def existing(self) -> list[Queue]:
        """The asynchronous queues created so far."""
        with self._lock:
            return list(self._queues.values())

    def made(self, async_value: int) -> Queue | None:
        """The queue ``async_value`` when it exists, else None (nothing is created)."""
        return self._queues.get(async_value)

    def take_at_once(self, async_value: int, kernel, nbytes: int):
        """The queue ``async_value``, taken for ``kernel`` (arguments of ``nbytes``
        bytes) run at once by the caller (``WorkerQueue.take``): when it exists, is idle
        and the kernel is predicted below its crossover; else None (the caller queues
        the call the ordinary way, which also creates a missing queue)."""
        queue = self._queues.get(async_value)
        return queue if queue is not None and queue.inlines and queue.take_kernel(kernel, nbytes) \
            else None

    def settled(self, numbers) -> bool:
        """Whether a host wait for the queues ``numbers`` (async values; none: every
        queue) has nothing to do: each is a plain int ≥ 0 whose queue was never created
        or is ``settled``. False when any is something else (the wait then checks it)."""
        queues = self._queues
        if not numbers:
            return all(queue.settled() for queue in list(queues.values()))
        for number in numbers:
            if type(number) is not int or number < 0:
                return False
            queue = queues.get(number)
            if queue is not None and not queue.settled():
                return False
        return True

    def retire(self) -> None:
        """Stop the worker threads of the (drained) ``WorkerQueue``s and forget them, so
        that the queues made at their next use read the environment again
        (``acc.shutdown``: ``PYACC_ASYNC_INLINE_BELOW``). Other queues are kept."""
        with self._lock:
            retired = [q for q in self._queues.values() if isinstance(q, WorkerQueue)]
            self._queues = {n: q for n, q in self._queues.items() if q not in retired}
        for queue in retired:
            queue.close()

    def forget(self) -> None:
        """In the child of ``os.fork``: the parent's queues are not this process's (their
        worker threads do not exist here); new ones are created empty on first use."""
        self._lock = threading.Lock()
        self._queues = {}

    def release(self, callback, argument, queue: Queue | None = None) -> None:
        """``callback(argument)`` once no queue can touch what it releases: at once when
        every asynchronous queue is idle (nothing to check when none was ever created),
        else once every queue busy now — and ``queue``, where the caller queued the last
        work on it — has passed this point (numba-cuda's ``_PendingDeallocs``)."""
        if not self._queues:
            callback(argument)
            return
        busy = [q for q in self.existing() if q is queue or not q.is_idle()]
        if not busy:
            callback(argument)
            return
        countdown = _Countdown(len(busy), callback, argument)
        for waiting in busy:
            waiting.defer(countdown)

    def join(self, waiting: Queue, waited) -> None:
        """``waiting`` starts its next operations only after everything already queued on
        each of the ``waited`` queues has run (``acc_wait_async``, ``wait=``): a
        device-side join through events when ``waiting`` is asynchronous, a host wait
        when it is the synchronous queue (OpenACC 3.3 §2.16.2, §3.2.11). A waited queue
        that is ``settled`` (nothing pending, no error to report) has run everything
        already: no event is recorded on it, nothing is queued on ``waiting`` (a region's
        ``wait`` clause on idle queues costs a check, not a hand-off to a worker).
        Published (``JOIN``) with every waited queue all the same."""
        joined = []
        for queue in waited:
            if queue is waiting or queue is self.sync:
                continue
            if waiting is self.sync:
                self.wait((queue,))
            else:  # a settled queue (nothing pending, no error): the join holds already
                if not queue.settled():
                    waiting.wait_event(queue.record_event())
                joined.append(queue.async_value)
        if joined and _ACTIVE[_JOIN]:  # after the join: never seen before it holds
            BUS.publish(EventKind.JOIN, self._identity, queue=waiting.async_value,
                        info=tuple(joined))

    def wait(self, queues) -> None:
        """The host blocks until each of ``queues`` has run everything submitted to it
        (``acc.wait(q, ...)``); every one drains before their errors are raised together
        (``raise_all``). One ``WAIT`` event per queue, published when its wait ends."""
        failures = []
        for queue in queues:
            start = _clock()
            try:
                queue.synchronize()
            except AccError as error:  # every queue drains; no error is lost
                failures.append(error)
            finally:
                if _ACTIVE[_WAIT]:
                    BUS.publish(EventKind.WAIT, self._identity, queue=queue.async_value, start=start)
        raise_all(failures)

    def synchronize(self) -> None:
        """The host blocks until every queue has drained (``acc.wait()``, shutdown); one
        ``WAIT`` event; the queues' errors raised together afterwards."""
        failures = []
        start = _clock()
        for queue in self.existing():
            try:
                queue.synchronize()
            except ExecutionError as error:
                failures.append(error)
        if _ACTIVE[_WAIT]:
            BUS.publish(EventKind.WAIT, self._identity, start=start)
        raise_all(failures)
