"""The device protocol: what the runtime asks of a device.

Owns: ``Device`` (the abstract protocol that ``host``, ``emulated`` and ``cuda`` implement,
after numba-cuda's ``BaseCUDAMemoryManager``). ``Timed``, ``emit`` and ``size_setting``
live in ``common`` (below every device and helper) and are re-exported here, the one
module of the room the runtime side imports. Queues live in ``queues`` (``Queue``,
``SyncQueue``, ``Pending`` and ``raise_all`` are re-exported here for older imports).

A device provides memory (``allocate``/``free`` of byte blocks addressed by integers),
views of that memory shaped like host arrays (``view``), transfers (``upload``,
``download``, ``device_copy``: contiguous and strided, same shape on both sides), queues
and kernel launches (``launch``). The mapping runtime above it never touches device
memory any other way.

Queues: every transfer and launch names the queue it runs on. A device holds one
``queues.QueueSet`` (``device.queues``), built from the queue factory it was given
(``WorkerQueue`` unless the subclass passes its own, as ``cuda`` does) and its synchronous
queue; ``queue(n)``, ``existing_queues``, ``join``, ``wait`` and ``synchronize`` are that
set's.

Threading and event order: allocation, free, transfer and launch may be called from any
thread (the table lock is held by the runtime verbs that call them; deferred frees run on
a queue's thread without it). Every allocation, free, transfer and launch publishes one
event on ``events.BUS``: ALLOC after the block is taken, FREE before it is given back
(so each address's ALLOC and FREE alternate for every subscriber), a transfer's or
launch's event when it is enqueued, its DONE once it has run.
"""

from __future__ import annotations

import abc
from typing import Callable

import numpy as np

from ..events import BUS, STAT_KEYS, STATS, EventKind
from ..queues import CROSSOVER, Pending, Queue, QueueSet, SyncQueue, WorkerQueue, raise_all
from .common import Timed, announce, emit, size_setting

__all__ = ["Device", "Queue", "SyncQueue", "Pending", "Timed", "emit", "raise_all", "size_setting",
           "submit_transfer"]

_ACTIVE = BUS.active
_LAUNCH = int(EventKind.LAUNCH)
_DONE = int(EventKind.DONE)
_HOLD = BUS.holding()
_TRANSFER_NAMES = {EventKind.UPLOAD: "upload", EventKind.DOWNLOAD: "download",
                   EventKind.DEVICE_COPY: "device copy"}


def submit_transfer(identity, kind, destination, source, queue, name, operation) -> None:
    """Queue ``operation``, the transfer of ``source`` into ``destination`` on ``queue``
    (``Device.upload``/``download``/``device_copy`` of every device, ``cuda``'s too):
    counted, its enqueue event published (and its DONE, ``Timed``) when someone
    subscribes; a subscriber that raises does so once the copy is queued."""
    nbytes = source.nbytes
    BUS.count(kind, identity, nbytes)
    description, predicted = (_TRANSFER_NAMES[kind], name, nbytes), _copy_time(queue, nbytes)
    if _ACTIVE[kind] or _ACTIVE[_DONE]:
        with _HOLD:  # a subscriber that raises does so once the copy is queued
            event = announce(kind, identity, queue.async_value, nbytes, name, info=(destination, source))
            if event is not None:
                operation = Timed(operation, event)
            queue.submit(operation, description, predicted=predicted)
        return
    queue.submit(operation, description, predicted=predicted)


def _copy_time(queue: Queue, nbytes: int):
    """A host copy's predicted seconds on ``queue`` (None where it never runs at once)."""
    return nbytes / CROSSOVER.bandwidth() if queue.inlines else None


class Device(abc.ABC):
    """One device of one type. Subclasses implement memory, transfers and launches.

    Attributes:
        type_name: ``"host"``, ``"emulated"`` or ``"cuda"``.
        number: the device number within its type.
        shares_host_memory: True when host arrays are device arrays (every data clause is
            a no-op, OpenACC 3.3 §2.7.4 "shared memory").
    """

    type_name: str = "abstract"
    shares_host_memory: bool = False
    #: transfers are ``_copy`` between two numpy arrays in host memory, run at once on the
    #: synchronous queue with nothing else (``emulated``): the data lane may carry out a
    #: synchronous update of present data itself (``admit_lane_copies``)
    copies_in_place: bool = False

    def __init__(self, number: int, *, queue_factory=WorkerQueue, sync_queue: Queue | None = None):
        self.number = number
        self.identity = (self.type_name, number)
        self.sync_queue = SyncQueue() if sync_queue is None else sync_queue
        #: ``queue_factory(async_value, device_label)`` makes an asynchronous queue
        self._queue_factory = queue_factory
        #: the device's queues (``queues.QueueSet``), created on first use
        self.queues = QueueSet(self._new_queue, self.identity, self.sync_queue)
        self.queue = self.queues.queue  # bound once: on the path of every async enqueue

    # -- memory -------------------------------------------------------------------
    @abc.abstractmethod
    def allocate(self, nbytes: int) -> int:
        """Allocate ``nbytes`` of device memory; return its device address.

        Raises:
            OutOfMemoryError: the device cannot satisfy the request.
        """

    @abc.abstractmethod
    def free(self, address: int) -> None:
        """Free the block that starts at ``address`` (from ``allocate``).

        Publishes FREE *before* giving the block back, as ``allocate`` publishes ALLOC
        after taking it: a deferred free runs on a queue's worker thread without the
        table lock, and another thread may be handed the same address the moment it is
        released; in this order every subscriber (the ``PYACC_CHECK`` ledger, profilers)
        sees each address's ALLOC and FREE events alternate."""

    def pin(self, address: int, host_begin: int, host_end: int, array: np.ndarray) -> None:
        """The mapping of ``array`` (host bytes ``[host_begin, host_end)``) was just given
        the block at ``address``: a device whose transfers are faster from page-locked
        host memory page-locks it until that block is freed (``cuda``: ``cuda_pins``).
        Nothing by default; never raises."""

    def release(self, address: int, queue: "Queue | None" = None) -> None:
        """Free the block at ``address`` once no queue can touch it any more: at once when
        every asynchronous queue is idle, else once every queue that is busy now — and
        ``queue``, the one the caller queued the block's last copies on — has passed this
        point (``QueueSet.release``; cudaFree synchronizes instead). A block freed at once
        while a kernel or copy queued earlier still used it would be handed to the next
        allocation and corrupted by that pending work."""
        self.queues.release(self.free, address, queue)

    @abc.abstractmethod
    def allocation_of(self, address: int) -> tuple[int, int] | None:
        """``(begin, nbytes)`` of the live block that holds ``address``, or None."""

    @abc.abstractmethod
    def view(self, address: int, like: np.ndarray):
        """A device array shaped and strided like ``like`` whose first element lies at
        device ``address``."""

    def own_view(self, device_array):
        """A device array of the caller's own over ``device_array``'s memory, with its
        layout, that keeps no memory alive: a compute memo keeps one per mapped argument
        (``mapping.compute.ComputeMemo``), which nobody else can change in place, and uses
        it only while the present table is unchanged since it was made (so while its
        block is allocated). By default a new numpy array object over the same memory
        (device arrays that are numpy windows on memory that lives anyway); a device
        whose arrays hold their allocation (CuPy's) makes one that does not."""
        return device_array.view()

    def unmapped(self, array: np.ndarray):
        """What a kernel gets for host data without a device copy (``no_create`` of
        absent data, a zero-size array): the host array itself, whose local address
        device code uses (OpenACC 3.3 §2.7.10), where kernels can take host arrays."""
        return array

    def as_device_array(self, device_array):
        """``device_array`` as this device's own array type (a CuPy array for any
        ``__cuda_array_interface__`` object on cuda; the array itself elsewhere).

        Raises:
            InvalidArgumentError: it is not memory of this device.
        """
        self.extent_of(device_array)
        return device_array

    def owns(self, array) -> bool:
        """Whether ``array`` is memory of this device, which no data clause may take for
        host data: memory pyacc allocated on it (``acc.malloc``, ``acc.deviceptr``,
        ``host_data``, ``acc.acquire``'s device arrays) is device memory wherever it is
        passed (API.md §2, §6.2; OpenACC 3.3 §2.7.4). False on a device that shares host
        memory (every array is the host's there, and every data clause a no-op). Never
        raises; O(1) or a bisect: it runs for every array argument of a compute call's
        full path. Devices with memory of their own override it (this default: False,
        every array is taken for host data)."""
        return False

    def mappable_block(self, low: int, high: int) -> tuple[int, int] | None:
        """``(begin, nbytes)`` of device memory that ``acc.map_data`` may map at
        ``[low, high)`` (already checked to be this device's memory by ``extent_of``):
        the ``acc.malloc`` block holding it, or None."""
        return self.allocation_of(low)

    @abc.abstractmethod
    def extent_of(self, device_array) -> tuple[int, int, int]:
        """``(data, low, high)`` device addresses of a device array of this device.

        Raises:
            InvalidArgumentError: it is not memory of this device.
        """

    # -- transfers ----------------------------------------------------------------
    @abc.abstractmethod
    def _copy(self, destination, source) -> None:
        """Copy elements between two same-shaped arrays (either side may be strided)."""

    def upload(self, device_array, host_array, queue: Queue, *, name=None) -> None:
        """Copy ``host_array`` into ``device_array`` on ``queue`` (host→device)."""
        self._transfer(EventKind.UPLOAD, device_array, host_array, queue, name)

    def download(self, host_array, device_array, queue: Queue, *, name=None) -> None:
        """Copy ``device_array`` into ``host_array`` on ``queue`` (device→host)."""
        self._transfer(EventKind.DOWNLOAD, host_array, device_array, queue, name)

    def device_copy(self, destination, source, queue: Queue) -> None:
        """Copy between two device arrays of this device."""
        self._transfer(EventKind.DEVICE_COPY, destination, source, queue, None)

    def zero(self, device_array, queue: Queue) -> None:
        """Set ``device_array``'s elements to 0 on ``queue``: the create action of
        ``create(zero:)``/``copyout(zero:)`` (OpenACC 3.3 §2.7.8, 2.7.9); no transfer."""
        def fill() -> None:
            device_array[...] = 0
        queue.submit(fill, "a zero fill of new device memory")

    def _transfer(self, kind, destination, source, queue, name) -> None:
        """Count, announce and queue a transfer (``submit_transfer``) whose
        operation ``_transfer_operation`` makes."""
        submit_transfer(self.identity, kind, destination, source, queue, name,
                        self._transfer_operation(kind, destination, source, queue))

    def _transfer_operation(self, kind, destination, source, queue) -> Callable[[], None]:
        """The callable ``queue`` runs for a transfer: ``_copy`` on the thread that runs
        it. (Devices whose copies are enqueued on a stream, ``cuda``, return their own.)"""
        return lambda: self._copy(destination, source)

    def admit_lane_copies(self, lane) -> None:
        """Let ``lane`` (the runtime's ``DataLane``) copy synchronous updates of present
        data in place (``mapping/_lane_copies.c.h``), counted in the statistics as
        ``submit_transfer`` counts them, when this device copies in place
        (``copies_in_place``) and its class keeps this class's transfer path."""
        hooks = ("upload", "download", "_transfer", "_transfer_operation")
        if not self.copies_in_place or any(getattr(type(self), hook) is not getattr(Device, hook) for hook in hooks):
            return
        counted = tuple(STAT_KEYS.index(key) for key in ("h2d_count", "h2d_bytes", "d2h_count", "d2h_bytes"))
        lane.allow_copies(self, BUS.tally_alone, STATS.counter_row(self.identity), counted,
                          (int(EventKind.UPLOAD), int(EventKind.DOWNLOAD), _DONE))

    # -- oversubscription's copies (``residency``): not the program's transfers ---------
    def host_buffer(self, nbytes: int) -> np.ndarray:
        """Host memory the runtime owns for an evicted device copy (flat ``uint8``)."""
        return np.empty(nbytes, dtype=np.uint8)

    def save(self, host: np.ndarray, device_array) -> None:
        """Copy ``device_array`` into runtime-owned ``host`` now (an eviction). Counted as
        an EVICT by the caller, never as a DOWNLOAD: no transfer event is published."""
        self._transfer_operation(EventKind.DOWNLOAD, host, device_array, self.sync_queue)()

    def restore(self, device_array, host: np.ndarray, queue: Queue, description) -> None:
        """Copy runtime-owned ``host`` into ``device_array`` on ``queue`` (a restore,
        in order before the work that needs it); no transfer event is published."""
        queue.submit(self._transfer_operation(EventKind.UPLOAD, device_array, host, queue), description)

    # -- queues and launches -------------------------------------------------------
    def queue(self, async_value: int | None) -> Queue:
        """The queue for an async value (``None``: the synchronous queue); asynchronous
        queues are created on first use (``queues.QueueSet.queue``, bound per instance)."""
        return self.queues.queue(async_value)

    def _new_queue(self, async_value: int) -> Queue:
        """A new asynchronous queue, from the device's queue factory."""
        return self._queue_factory(async_value, f"{self.type_name} device {self.number}")

    @property
    def runs_work_at_once(self) -> bool:
        """Whether its asynchronous queues may run short work at once on the calling
        thread (``WorkerQueue``s: devices whose work runs on host threads)."""
        factory = self._queue_factory
        return isinstance(factory, type) and issubclass(factory, WorkerQueue)

    def forget_queues(self) -> None:
        """In the child of ``os.fork``: forget the parent's queues (``QueueSet.forget``)."""
        self.queues.forget()

    def existing_queues(self) -> list[Queue]:
        """The asynchronous queues created so far."""
        return self.queues.existing()

    def launcher(self, kernel: Callable, queue: Queue) -> Callable:
        """What runs ``kernel`` on ``queue`` when it is launched: the kernel itself. A
        device whose launches need more wraps it (``cuda``: the queue's stream current
        while it launches, then waited for on the synchronous queue). ``launch`` runs what
        this returns, and so does pyacc's express lane (``pyacc/_fastcall.c``), which
        takes only devices that keep ``Device.launch``."""
        return kernel

    def launch(self, kernel: Callable, args, queue: Queue, *, name=None, where=None, info=None):
        """Run ``kernel(*args)`` (``launcher``'s) on ``queue``. Returns the kernel's
        result on the synchronous queue; on an asynchronous one a ``Pending`` whose
        ``value`` is set when the kernel has run. ``where`` (the construct's source
        location) and ``info`` (the launcher's description of the kernel) go into the
        LAUNCH event."""
        kernel = self.launcher(kernel, queue)
        BUS.count(_LAUNCH, self.identity)
        if _ACTIVE[_LAUNCH] or _ACTIVE[_DONE]:
            with _HOLD:  # a subscriber that raises does so once the kernel is launched
                event = announce(_LAUNCH, self.identity, queue.async_value, None, name, where,
                                  (info, args))
                return self._launch(kernel, args, queue, name, event)
        if queue is self.sync_queue:  # the common case: no closure, no queue hop
            return kernel(*args)
        return self._launch(kernel, args, queue, name, None)

    def _launch(self, kernel, args, queue, name, event):
        """``launch`` when someone observes launches (``event``: the LAUNCH record to
        time, or None), and every asynchronous launch."""
        if queue is self.sync_queue:
            if event is None:
                return kernel(*args)
            return Timed(lambda: kernel(*args), event)()
        result = Pending(kernel, args, name, queue.async_value, queue.inlines)
        queue.submit(result if event is None else Timed(result, event), ("kernel", name),
                     predicted=result.predicted())
        return result

    def synchronize(self) -> None:
        """Wait for every queue of this device; raise the queued errors after every queue
        has drained (``QueueSet.synchronize``)."""
        self.queues.synchronize()

    def join(self, waiting: Queue, waited) -> None:
        """``waiting`` waits for the ``waited`` queues (``QueueSet.join``)."""
        self.queues.join(waiting, waited)

    def wait(self, queue: Queue) -> None:
        """Block until ``queue`` has finished everything submitted to it."""
        self.queues.wait((queue,))

    # -- properties and lifetime ---------------------------------------------------
    @property
    @abc.abstractmethod
    def memory_in_use(self) -> int:
        """Bytes of device memory currently allocated."""

    @abc.abstractmethod
    def properties(self) -> dict:
        """``memory``, ``free_memory``, ``shared_memory_support``, ``name``, ``vendor``,
        ``driver`` (OpenACC 3.3 §3.2.6)."""

    def reset(self) -> None:
        """Forget every allocation (``acc.shutdown``)."""
