"""The ``cuda`` device: GPU memory from CuPy's memory pool, async queues on CUDA streams.

Owns: ``CudaDevice``, its queues (``CudaQueue`` for async queues, ``CudaSyncQueue`` for
``acc.async_sync``), the transfers between host and GPU, and ``CupyBackend``, the only
code that calls CuPy. ``mapping.cuda_fake.FakeCudaBackend`` implements the same backend
over host memory, so that everything here runs, and is tested, without a GPU.

The backend interface (device ``n``; ``stream``/``event`` are backend objects; addresses
are ints; "enqueue" means the call returns at once and the work runs in stream order):

- memory: ``allocate(nbytes) -> (address, handle)`` (raises ``MemoryError`` when full;
  ``handle`` keeps the block alive), ``free(handle)``, ``memory_info() -> (free, total)``;
- device arrays: ``view(handle, offset, shape, dtype, strides)`` (a CuPy array; ``handle``
  None: an empty one), ``foreign_view(address, shape, dtype, strides)`` (the same over
  memory the program allocated, for ``acc.map_data``), ``interface_of(obj)`` (its ``__cuda_array_interface__`` dict, or
  None when ``obj`` is not a device array), ``as_device_array(obj)`` (a view the backend
  can copy elements of), ``is_device_memory(address)`` (memory of device ``n``:
  ``cudaPointerGetAttributes``);
- enqueued copies: ``copy(destination, source, stream)`` (elementwise, two same-shaped
  device arrays of any strides: the pack/unpack kernel), ``memcpy_htod(address,
  host_buffer, stream)``, ``memcpy_dtoh(host_buffer, address, stream)`` (``host_buffer``:
  a contiguous numpy array, all of its bytes), ``memcpy_dtod(destination, source, nbytes,
  stream)``; ``pinned(nbytes)``: a numpy ``uint8`` array in page-locked memory;
- streams: ``new_stream(blocking=)``, ``synchronize(stream)``, ``stream_done(stream)``,
  ``use_stream(stream)`` (context manager: the thread's current stream, CuPy's ``with
  stream:``; compiled kernels launch on the current stream), ``launch(stream, fn)`` (run
  ``fn``, which launches kernels on the current stream, in stream order),
  ``launch_host_func(stream, fn)`` (``cudaLaunchHostFunc``: ``fn()`` on a driver thread
  in stream order; it must not call CUDA);
- events: ``record_event(stream)``, ``event_done(event)``, ``synchronize_event(event)``,
  ``wait_event(stream, event)`` (the stream waits, the host does not);
- identity: ``device_name()``, ``driver_version()``.

Transfers (``upload``/``download``/``device_copy``, same shape on both sides). Exactly one
host↔device memcpy per transfer, of exactly the bytes of the elements:
- a side whose elements fill one C- or F-ordered block is copied as it is; a strided side
  (a column, a sub-block, ``a[::3]``, negative strides) is packed: on the device by one
  elementwise copy into (or out of) a contiguous temporary, on the host by numpy into (or
  out of) the staging buffer;
- on an asynchronous queue the host data goes through a pinned staging buffer by host
  functions enqueued on the stream, so the host array is read (upload) or written
  (download) when the copy runs in stream order, never at enqueue time (OpenACC 3.3
  §2.16.1); staging buffers and temporaries are released once the stream has passed them;
- on the synchronous queue a contiguous host array is copied directly, a strided one
  through a pinned buffer packed/unpacked on the calling thread, and the copy has
  completed when the call returns.
Device-to-device copies: one memcpy when both sides are contiguous in the same order,
else one elementwise copy.

Queues (OpenACC 3.3 §2.16, §3.2.9–3.2.14): ``CudaQueue`` keeps ``queues.WorkerQueue``'s
observable protocol over a non-blocking CUDA stream (``queue.stream``, what
``acc.get_cuda_stream`` returns): ``submit`` runs the operation at once on the calling
thread with the stream current (it enqueues work and returns); kernels (``Pending``) go
through ``backend.launch``. Failures — an operation that raises while it enqueues, a host
function or kernel that raises when it runs — are recorded with the operation's sequence
number; operations (and their host functions) behind a failure are skipped until the
failure is raised, once, as ``ExecutionError`` by the next ``synchronize``. ``defer`` and
DONE events run on the host once an event recorded on the stream has completed (polled in
``submit``, ``is_idle``, ``synchronize``). ``record_event``/``wait_event`` join queues on
the GPU through CUDA events; an event carries the failures before it, and the queue that
waits fails too. ``CudaSyncQueue`` runs each operation on its own blocking stream (ordered
with the legacy default stream, where CuPy code of the user runs by default) and
synchronizes before returning.

Invariants:
- every live block is in ``_blocks`` (a ``BlockIndex``); ``memory_in_use`` is the sum of
  the requested bytes;
- a CudaQueue's sequence numbers follow stream order (assigned under its enqueue lock);
  the failures at or below ``_floor`` have been reported;
- a host function never calls CUDA and never blocks: it copies with numpy and records.
"""

from __future__ import annotations

import bisect
import collections
import contextlib
import threading
import time

import numpy as np

from .device import Device, Pending, Queue, Timed, emit
from .errors import (
    AccError,
    DeviceTypeUnavailableError,
    DeviceUnavailableError,
    ExecutionError,
    InvalidArgumentError,
    OutOfMemoryError,
    describe_array,
    format_range,
)
from .events import EventKind
from .queues import describe_operation

__all__ = ["CudaDevice", "CudaQueue", "CudaSyncQueue", "CudaQueueEvent", "CupyBackend", "BlockIndex"]

_clock = time.perf_counter
#: ``cudaMemoryType`` values of ``cudaPointerAttributes.type`` that are GPU memory
_DEVICE_MEMORY, _MANAGED_MEMORY = 2, 3


class BlockIndex:
    """Live device blocks by start address, found from any address inside them (bisect on
    the sorted starts). Used by ``CudaDevice`` and by ``cuda_fake.FakeCudaBackend``; the
    owner holds its own lock around every call.

    Invariant: ``_starts`` is the sorted list of the keys of ``_blocks`` (address →
    ``(requested bytes, handle)``); ``in_use`` is the sum of the requested bytes. A
    zero-byte block still holds its start address.
    """

    def __init__(self):
        self._blocks: dict[int, tuple[int, object]] = {}
        self._starts: list[int] = []
        self.in_use = 0

    def __len__(self) -> int:
        return len(self._blocks)

    def add(self, address: int, nbytes: int, handle) -> None:
        self._blocks[address] = (nbytes, handle)
        bisect.insort(self._starts, address)
        self.in_use += nbytes

    def pop(self, address: int) -> tuple[int, object]:
        """Remove the block that starts at ``address``; its ``(nbytes, handle)``."""
        nbytes, handle = self._blocks.pop(address)
        del self._starts[bisect.bisect_left(self._starts, address)]
        self.in_use -= nbytes
        return nbytes, handle

    def find(self, address: int):
        """``(begin, nbytes, handle)`` of the live block holding ``address``, or None."""
        slot = bisect.bisect_right(self._starts, address) - 1
        if slot < 0:
            return None
        begin = self._starts[slot]
        nbytes, handle = self._blocks[begin]
        return (begin, nbytes, handle) if address < begin + max(nbytes, 1) else None

    def clear(self) -> list:
        """Forget every block; their handles."""
        handles = [handle for _, handle in self._blocks.values()]
        self._blocks.clear()
        self._starts.clear()
        self.in_use = 0
        return handles


# == the CuPy backend ========================================================================
class CupyBackend:
    """The backend interface (module docstring) over CuPy, for GPU ``number``.

    Raises:
        DeviceTypeUnavailableError: CuPy is not installed, or finds no CUDA driver/GPU.
        DeviceUnavailableError: there is no GPU ``number``.
    """

    def __init__(self, number: int):
        try:
            import cupy
        except ImportError as error:
            raise DeviceTypeUnavailableError(
                f"the cuda device type needs CuPy, which is not installed ({error}): "
                "pip install 'pyacc[cuda]' (cupy-cuda12x)", device_type="cuda") from None
        except Exception as error:  # a broken CUDA install raises more than ImportError
            raise DeviceTypeUnavailableError(
                f"the cuda device type needs CuPy, which failed to import: "
                f"{type(error).__name__}: {error}", device_type="cuda") from None
        self._cupy = cupy
        self._runtime = cupy.cuda.runtime
        self.number = number
        try:
            count = self._runtime.getDeviceCount()
        except Exception as error:  # CUDARuntimeError: no driver, no GPU
            raise DeviceTypeUnavailableError(
                f"no usable CUDA driver or GPU: {type(error).__name__}: {error}",
                device_type="cuda") from None
        if not 0 <= number < count:
            raise DeviceUnavailableError(
                f"there is no cuda device {number}: {count} GPU(s) visible; check "
                "CUDA_VISIBLE_DEVICES", device_num=number)

    def _device(self):
        # a new Device each time: its with-block keeps a per-object stack (not thread-safe)
        return self._cupy.cuda.Device(self.number)

    # -- memory ------------------------------------------------------------------------
    def allocate(self, nbytes: int):
        with self._device():  # MemoryPool.malloc raises cupy's OutOfMemoryError (a MemoryError)
            memory = self._cupy.cuda.memory.alloc(max(nbytes, 1))  # alloc(0) has no address
        return memory.ptr, memory

    def free(self, handle) -> None:
        """Nothing to do: the pool takes the block back when the last reference to its
        ``MemoryPointer`` (ours, or a view's) goes."""

    def memory_info(self):
        with self._device():
            return self._runtime.memGetInfo()

    # -- device arrays -------------------------------------------------------------------
    def view(self, handle, offset: int, shape, dtype, strides):
        if handle is None:
            with self._device():
                return self._cupy.ndarray(shape, dtype)
        return self._cupy.ndarray(shape, dtype, memptr=handle + offset, strides=strides)

    def foreign_view(self, address: int, shape, dtype, strides):
        """A CuPy array at ``address`` in memory CuPy's pool did not hand to pyacc (the
        program's own allocation, which keeps it alive)."""
        _, low, high = _extent(address, shape, np.dtype(dtype).itemsize, strides)
        memory = self._cupy.cuda.UnownedMemory(low, high - low, None, self.number)
        pointer = self._cupy.cuda.MemoryPointer(memory, address - low)
        return self._cupy.ndarray(shape, dtype, memptr=pointer, strides=strides)

    def interface_of(self, obj):
        try:
            return getattr(obj, "__cuda_array_interface__", None)
        except Exception:  # e.g. a CPU torch tensor refuses to export one
            return None

    def as_device_array(self, obj):
        if isinstance(obj, self._cupy.ndarray):
            return obj
        with self._device():
            return self._cupy.asarray(obj)  # zero-copy through __cuda_array_interface__

    def is_device_memory(self, address: int) -> bool:
        try:
            attributes = self._runtime.pointerGetAttributes(address)
        except self._runtime.CUDARuntimeError:  # CUDA < 11 for host pointers
            return False
        return attributes.type in (_DEVICE_MEMORY, _MANAGED_MEMORY) and attributes.device == self.number

    # -- enqueued copies -----------------------------------------------------------------
    def copy(self, destination, source, stream) -> None:
        with self.use_stream(stream):
            self._cupy.copyto(destination, source, casting="no")

    def memcpy_htod(self, address: int, host_buffer: np.ndarray, stream) -> None:
        self._memcpy(address, host_buffer.ctypes.data, host_buffer.nbytes,
                     self._runtime.memcpyHostToDevice, stream)

    def memcpy_dtoh(self, host_buffer: np.ndarray, address: int, stream) -> None:
        self._memcpy(host_buffer.ctypes.data, address, host_buffer.nbytes,
                     self._runtime.memcpyDeviceToHost, stream)

    def memcpy_dtod(self, destination: int, source: int, nbytes: int, stream) -> None:
        self._memcpy(destination, source, nbytes, self._runtime.memcpyDeviceToDevice, stream)

    def _memcpy(self, destination, source, nbytes, kind, stream) -> None:
        with self._device():
            self._runtime.memcpyAsync(destination, source, nbytes, kind, stream.ptr)

    def pinned(self, nbytes: int) -> np.ndarray:
        memory = self._cupy.cuda.alloc_pinned_memory(nbytes)  # CuPy's pinned memory pool
        return np.ndarray((nbytes,), dtype=np.uint8, buffer=memory)  # keeps ``memory`` alive

    # -- streams and events --------------------------------------------------------------
    def new_stream(self, *, blocking: bool):
        with self._device():
            return self._cupy.cuda.Stream(non_blocking=not blocking)

    def synchronize(self, stream) -> None:
        stream.synchronize()  # releases the GIL while it waits (host functions need it)

    def stream_done(self, stream) -> bool:
        return stream.done

    @contextlib.contextmanager
    def use_stream(self, stream):
        with self._device(), stream:
            yield stream

    def launch(self, stream, fn) -> None:
        with self.use_stream(stream):
            fn()

    def launch_host_func(self, stream, fn) -> None:
        stream.launch_host_func(_call, fn)

    def record_event(self, stream):
        with self._device():
            event = self._cupy.cuda.Event(disable_timing=True)
            event.record(stream)
        return event

    def event_done(self, event) -> bool:
        return event.done

    def synchronize_event(self, event) -> None:
        event.synchronize()

    def wait_event(self, stream, event) -> None:
        stream.wait_event(event)

    # -- identity -------------------------------------------------------------------------
    def device_name(self) -> str:
        name = self._runtime.getDeviceProperties(self.number)["name"]
        return name.decode() if isinstance(name, bytes) else str(name)

    def driver_version(self) -> str:
        version = self._runtime.driverGetVersion()  # e.g. 12040
        return f"CUDA driver {version // 1000}.{version % 1000 // 10}"


def _call(function) -> None:
    function()


# == layouts ===================================================================================
def _c_strides(shape, itemsize: int) -> tuple:
    strides, step = [], itemsize
    for extent in reversed(shape):
        strides.append(step)
        step *= extent
    return tuple(reversed(strides))


def _f_strides(shape, itemsize: int) -> tuple:
    strides, step = [], itemsize
    for extent in shape:
        strides.append(step)
        step *= extent
    return tuple(strides)


def _dense(shape, strides, itemsize: int, axes) -> bool:
    step = itemsize
    for axis in axes:
        if shape[axis] != 1:
            if strides[axis] != step:
                return False
            step *= shape[axis]
    return True


def _order(shape, strides, itemsize: int) -> str | None:
    """``"C"`` or ``"F"`` when the elements fill one gap-free block in that order (``"C"``
    when both), else None (a strided view)."""
    if _dense(shape, strides, itemsize, range(len(shape) - 1, -1, -1)):
        return "C"
    if _dense(shape, strides, itemsize, range(len(shape))):
        return "F"
    return None


def _interface_layout(interface) -> tuple[int, tuple, np.dtype, tuple]:
    """``(data, shape, dtype, strides)`` of a ``__cuda_array_interface__`` dict (strides
    None means C-contiguous)."""
    shape = tuple(int(n) for n in interface["shape"])
    dtype = np.dtype(interface["typestr"])
    strides = interface.get("strides")
    strides = _c_strides(shape, dtype.itemsize) if strides is None else tuple(int(s) for s in strides)
    return int(interface["data"][0] or 0), shape, dtype, strides


def _extent(data: int, shape, itemsize: int, strides) -> tuple[int, int, int]:
    """``(data, low, high)``: the byte range ``[low, high)`` the elements cover."""
    if any(n == 0 for n in shape):
        return data, data, data
    low, high = data, data + itemsize
    for extent, stride in zip(shape, strides):
        step = (extent - 1) * stride
        if step < 0:
            low += step
        else:
            high += step
    return data, low, high


class _Packing:
    """How a host↔device transfer moves its elements as one block of ``nbytes``: the
    block's element order, and which side is packed into / unpacked from it."""

    __slots__ = ("shape", "dtype", "nbytes", "order", "host_packed", "device_packed",
                 "device_address")

    def __init__(self, host: np.ndarray, interface, what: str):
        address, shape, dtype, strides = _interface_layout(interface)
        if shape != host.shape or dtype.str != host.dtype.str:
            raise InvalidArgumentError(
                f"{what}: the host array (shape {host.shape}, dtype {host.dtype}) and the "
                f"device array (shape {shape}, dtype {dtype}) differ")
        device_order = _order(shape, strides, dtype.itemsize)
        host_order = _order(host.shape, host.strides, dtype.itemsize)
        self.order = device_order or host_order or "C"
        self.host_packed = host_order != self.order
        self.device_packed = device_order != self.order
        self.shape, self.dtype, self.nbytes = shape, host.dtype, host.nbytes
        self.device_address = address

    def block_strides(self) -> tuple:
        itemsize = self.dtype.itemsize
        return _c_strides(self.shape, itemsize) if self.order == "C" else _f_strides(self.shape, itemsize)

    def staged(self, buffer: np.ndarray) -> np.ndarray:
        """The staging ``buffer`` (bytes) seen as the host array's elements, block order."""
        return np.ndarray(self.shape, self.dtype, buffer=buffer, order=self.order)


# == queues ====================================================================================
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

    @property
    def failure(self):
        found = self.queue._first_failure(self.floor, self.sequence)
        return None if found is None else (found.description, found.cause)


def _waited_failure(sequence: int, event: CudaQueueEvent, upstream) -> _Failure:
    description, cause = upstream
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

    # -- the protocol ----------------------------------------------------------------------
    def submit(self, operation, description="an operation", *, essential: bool = False) -> None:
        """Enqueue ``operation`` on the stream: run it now with the stream current (a
        kernel, ``Pending``: through ``backend.launch``, in stream order). A ``Timed``
        operation publishes DONE once the stream has passed it."""
        self.poll()
        timed = operation if isinstance(operation, Timed) else None
        inner = operation if timed is None else operation.operation
        start = _clock()
        with self._enqueue_lock:
            guarded = _Guarded(self, self._next(), inner, description, essential)
            if isinstance(inner, Pending):
                self._backend.launch(self.stream, guarded)
            else:
                self._run_now(guarded)
            if timed is not None:
                self.defer(_TimedDone(timed, guarded, start))

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
        try:
            self._backend.synchronize(self.stream)
            drained = True
        except Exception as cause:  # a device error (sticky on CUDA) surfaces here
            self._fail(target, "an operation", cause)
            drained = False
        self.poll(force=not drained)
        with self._report_lock:
            failure = self._first_failure(self._floor, target + 1)
            self._floor = max(self._floor, target)
        if failure is not None:
            description = describe_operation(failure.description)
            raise ExecutionError(
                f"{description} on {self.label} failed: {type(failure.cause).__name__}: "
                f"{failure.cause}", queue=self.async_value, operation=description) from failure.cause

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
    def host_func(self, function) -> None:
        """Run ``function`` on the host when the stream reaches this point (it must not
        call CUDA). Called by an operation while it enqueues: ``function`` shares its
        sequence number, is skipped when an earlier operation failed, and its failure is
        the operation's."""
        running = getattr(self._local, "running", None)
        with self._enqueue_lock:
            sequence, description = running or (self._next(), "a host function")
            guarded = _Guarded(self, sequence, function, description, False)
            self._backend.launch_host_func(self.stream, guarded)

    def poll(self, *, force: bool = False) -> None:
        """Run the deferred callbacks whose point the stream has passed (all of them with
        ``force``), and settle the waits on events that have completed."""
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
        """Keep the stream from starting further work while the block runs (the fake
        backend's testing hook; a real CUDA stream cannot be held)."""
        hold = getattr(self._backend, "hold", None)
        if hold is None:
            raise ExecutionError(f"{self.label}: a CUDA stream cannot be held (only the fake "
                                 "backend, mapping.cuda_fake, can)")
        return hold(self.stream)

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


class _TimedDone:
    """Deferred DONE of a timed operation (not published when the operation was skipped)."""

    __slots__ = ("timed", "guarded", "start")

    def __init__(self, timed: Timed, guarded: _Guarded, start: float):
        self.timed, self.guarded, self.start = timed, guarded, start

    def __call__(self) -> None:
        if not self.guarded.was_skipped:
            self.timed.finish(self.start)


class CudaSyncQueue(Queue):
    """The synchronous queue (``acc.async_sync``): each operation runs on a blocking
    stream of its own, which is synchronized before ``submit`` returns (so ``defer`` can
    run its callback at once, as ``SyncQueue`` does)."""

    async_value = None

    def __init__(self, backend, device_label: str):
        self.stream = backend.new_stream(blocking=True)
        self.label = f"the synchronous queue of {device_label}"
        self._backend = backend

    def submit(self, operation, description="an operation", *, essential: bool = False) -> None:
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


class _SyncKernel:
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


# == transfers =================================================================================
class _HostTransfer:
    """One upload or download between a host array and a same-shaped device array: the
    operation its queue runs (module docstring, "Transfers")."""

    __slots__ = ("device", "upload", "host", "device_array", "queue")

    def __init__(self, device: "CudaDevice", upload: bool, host: np.ndarray, device_array, queue):
        self.device = device
        self.upload = upload
        self.host = host
        self.device_array = device_array
        self.queue = queue

    def __call__(self) -> None:
        host, device_array = self.host, self.device_array
        self.host = self.device_array = None
        if host.size == 0:
            return
        packing = _Packing(host, self.device.interface_of(device_array), self._what())
        if self.queue is self.device.sync_queue:
            run = self._upload_now if self.upload else self._download_now
        else:
            run = self._upload_async if self.upload else self._download_async
        run(host, device_array, packing)

    def skipped(self, description) -> None:
        self.host = self.device_array = None

    def _what(self) -> str:
        return "upload" if self.upload else "download"

    # -- asynchronous: host data moves through pinned staging in stream order -----------------
    def _upload_async(self, host, device_array, packing: _Packing) -> None:
        backend, queue = self.device.backend, self.queue
        staging = backend.pinned(packing.nbytes)
        address, temporary = self.device._block_for(packing)
        try:
            queue.host_func(_CopyInto(packing.staged(staging), host))  # reads the host when it runs
            backend.memcpy_htod(address, staging, queue.stream)
            if temporary is not None:
                backend.copy(backend.as_device_array(device_array), temporary.view, queue.stream)
        finally:  # released once the stream has passed whatever was enqueued
            queue.defer(_Release(self.device, temporary, staging))

    def _download_async(self, host, device_array, packing: _Packing) -> None:
        backend, queue = self.device.backend, self.queue
        staging = backend.pinned(packing.nbytes)
        address, temporary = self.device._block_for(packing)
        try:
            if temporary is not None:
                backend.copy(temporary.view, backend.as_device_array(device_array), queue.stream)
            backend.memcpy_dtoh(staging, address, queue.stream)
            queue.host_func(_CopyInto(host, packing.staged(staging)))  # writes the host when it runs
        finally:
            queue.defer(_Release(self.device, temporary, staging))

    # -- synchronous: complete on return ---------------------------------------------------------
    def _upload_now(self, host, device_array, packing: _Packing) -> None:
        backend, stream = self.device.backend, self.queue.stream
        buffer = host
        if packing.host_packed:
            buffer = backend.pinned(packing.nbytes)
            np.copyto(packing.staged(buffer), host, casting="no")
        address, temporary = self.device._block_for(packing)

        def enqueue():
            backend.memcpy_htod(address, buffer, stream)
            if temporary is not None:
                backend.copy(backend.as_device_array(device_array), temporary.view, stream)

        self.device._synchronously(enqueue, _Release(self.device, temporary, None))

    def _download_now(self, host, device_array, packing: _Packing) -> None:
        backend, stream = self.device.backend, self.queue.stream
        address, temporary = self.device._block_for(packing)
        buffer = backend.pinned(packing.nbytes) if packing.host_packed else host

        def enqueue():
            if temporary is not None:
                backend.copy(temporary.view, backend.as_device_array(device_array), stream)
            backend.memcpy_dtoh(buffer, address, stream)

        self.device._synchronously(enqueue, _Release(self.device, temporary, None))
        if packing.host_packed:
            np.copyto(host, packing.staged(buffer), casting="no")


class _DeviceCopy:
    """A copy between two same-shaped device arrays: one memcpy when both are contiguous
    in the same order, else one elementwise copy."""

    __slots__ = ("device", "destination", "source", "queue")

    def __init__(self, device: "CudaDevice", destination, source, queue):
        self.device, self.destination, self.source, self.queue = device, destination, source, queue

    def __call__(self) -> None:
        destination, source = self.destination, self.source
        self.destination = self.source = None
        backend, stream = self.device.backend, self.queue.stream
        interface_of = self.device.interface_of
        to_address, shape, dtype, to_strides = _interface_layout(interface_of(destination))
        from_address, from_shape, from_dtype, from_strides = _interface_layout(interface_of(source))
        if shape != from_shape or dtype.str != from_dtype.str:
            raise InvalidArgumentError(f"device copy: the destination (shape {shape}, dtype {dtype}) "
                                       f"and the source (shape {from_shape}, dtype {from_dtype}) differ")
        if any(n == 0 for n in shape):
            return
        order = _order(shape, to_strides, dtype.itemsize)
        if order is not None and order == _order(shape, from_strides, dtype.itemsize):
            nbytes = int(np.prod(shape)) * dtype.itemsize
            enqueue = lambda: backend.memcpy_dtod(to_address, from_address, nbytes, stream)  # noqa: E731
        else:
            enqueue = lambda: backend.copy(backend.as_device_array(destination),  # noqa: E731
                                           backend.as_device_array(source), stream)
        if self.queue is self.device.sync_queue:
            self.device._synchronously(enqueue, lambda: None)
        else:
            enqueue()

    def skipped(self, description) -> None:
        self.destination = self.source = None


class _Temporary:
    """A contiguous device block for packing one strided device view."""

    __slots__ = ("address", "handle", "view")

    def __init__(self, address: int, handle, view):
        self.address, self.handle, self.view = address, handle, view


class _CopyInto:
    """``np.copyto(destination, source)``: a host function of a transfer."""

    __slots__ = ("destination", "source")

    def __init__(self, destination: np.ndarray, source: np.ndarray):
        self.destination, self.source = destination, source

    def __call__(self) -> None:
        destination, source = self.destination, self.source
        self.destination = self.source = None  # release the host array once it has run
        np.copyto(destination, source, casting="no")


class _Release:
    """Frees a transfer's device temporary and drops its staging buffer (after the
    stream has passed the transfer)."""

    __slots__ = ("device", "temporary", "staging")

    def __init__(self, device: "CudaDevice", temporary: _Temporary | None, staging):
        self.device, self.temporary, self.staging = device, temporary, staging

    def __call__(self) -> None:
        temporary, self.temporary, self.staging = self.temporary, None, None
        if temporary is not None:
            self.device.backend.free(temporary.handle)


# == the device ================================================================================
class CudaDevice(Device):
    """An NVIDIA GPU (``cuda``, alias ``nvidia``), through a backend (module docstring).

    Args:
        number: the GPU number (CUDA device ordinal).
        backend: the backend; None: ``CupyBackend(number)`` (CuPy imported there).

    Beyond ``Device``: ``backend``; ``queue(n).stream`` (the CUDA stream of a queue,
    ``acc.get_cuda_stream``; ``sync_queue.stream`` for the synchronous queue);
    ``interface_of(obj)``; ``as_device_array(obj)`` (a backend view of any device array
    of this device, e.g. a numba-cuda array as a CuPy array).

    Raises:
        DeviceTypeUnavailableError: no backend given and CuPy or a GPU is missing.
    """

    type_name = "cuda"
    shares_host_memory = False

    def __init__(self, number: int, backend=None):
        super().__init__(number)
        self.backend = CupyBackend(number) if backend is None else backend
        self._label = f"cuda device {number}"
        self.sync_queue = CudaSyncQueue(self.backend, self._label)
        self._lock = threading.Lock()
        self._blocks = BlockIndex()  # the live blocks pyacc allocated

    # -- memory -------------------------------------------------------------------
    def allocate(self, nbytes: int) -> int:
        address, handle = self._backend_allocate(nbytes)
        with self._lock:
            self._blocks.add(address, nbytes, handle)
        emit(EventKind.ALLOC, self.identity, nbytes, device_begin=address)
        return address

    def free(self, address: int) -> None:
        with self._lock:
            nbytes, handle = self._blocks.pop(address)
        # FREE is published while the block is still held (see ``Device.free``)
        try:
            emit(EventKind.FREE, self.identity, nbytes, device_begin=address)
        finally:  # a subscriber that raises must not leak the block
            self.backend.free(handle)

    def allocation_of(self, address: int):
        block = self._block_at(address)
        return None if block is None else (block[0], block[1])

    def _block_at(self, address: int):
        """``(begin, nbytes, handle)`` of the live block holding ``address``, or None."""
        with self._lock:
            return self._blocks.find(address)

    def _backend_allocate(self, nbytes: int):
        """``backend.allocate``; when the GPU is full, once more after the frees that
        queues have deferred and already passed."""
        try:
            return self.backend.allocate(nbytes)
        except MemoryError:
            for queue in self.existing_queues():
                queue.poll()
        try:
            return self.backend.allocate(nbytes)
        except MemoryError as error:
            raise self._out_of_memory(nbytes, error) from None

    def _out_of_memory(self, nbytes: int, cause: BaseException) -> OutOfMemoryError:
        try:
            free, total = self.backend.memory_info()
            state = f"{free} of {total} bytes free on the GPU"
        except Exception:  # the message must not fail
            state = "free memory unknown"
        return OutOfMemoryError(
            f"{self._label} is out of memory: {nbytes} bytes requested, {state}, {self._blocks.in_use} "
            f"bytes held by pyacc in {len(self._blocks)} blocks ({cause}). Free or unmap data "
            "(acc.delete, exit_data, acc.free), wait on async queues so that their deferred "
            "frees run, or release memory other libraries cache "
            "(cupy.get_default_memory_pool().free_all_blocks())", nbytes=nbytes)

    # -- device arrays ---------------------------------------------------------------
    def view(self, address: int, like):
        if like.size == 0:
            return self.backend.view(None, 0, like.shape, like.dtype, like.strides)
        block = self._block_at(address)
        if block is None:  # memory the program allocated, mapped with acc.map_data
            if self.backend.is_device_memory(address):
                return self.backend.foreign_view(address, like.shape, like.dtype, like.strides)
            raise InvalidArgumentError(f"{self._label}: no allocation holds device address {address:#x}")
        begin, _, handle = block
        return self.backend.view(handle, address - begin, like.shape, like.dtype, like.strides)

    def interface_of(self, device_array):
        """The ``__cuda_array_interface__`` of a device array (InvalidArgumentError when
        ``device_array`` is not one)."""
        interface = self.backend.interface_of(device_array)
        if interface is None:
            raise InvalidArgumentError(
                f"{describe_array(device_array)} is not a device array of {self._label}: pass "
                "a CuPy array or any object with __cuda_array_interface__ (from acc.malloc, "
                "acc.deviceptr or acc.copyin)")
        return interface

    def extent_of(self, device_array):
        if isinstance(device_array, np.ndarray) and device_array.size == 0:
            data = device_array.__array_interface__["data"][0]  # holds no memory (API.md §2)
            return data, data, data
        data, shape, dtype, strides = _interface_layout(self.interface_of(device_array))
        data, low, high = _extent(data, shape, dtype.itemsize, strides)
        if high > low and not self.backend.is_device_memory(low):
            raise InvalidArgumentError(
                f"{_describe_device_array(device_array, shape, dtype)} at "
                f"{format_range(low, high - low)} is not memory of {self._label}: pass an array "
                "from acc.malloc, acc.deviceptr or acc.copyin of this device (is it host "
                "memory, or memory of another GPU?)")
        return data, low, high

    def as_device_array(self, device_array):
        """A backend view (a CuPy array) of any device array of this device."""
        self.extent_of(device_array)
        return self.backend.as_device_array(device_array)

    def mappable_block(self, low, high):
        """Memory from ``acc.malloc``, or any other memory of this GPU (a CuPy array the
        program allocated: ``acc_map_data`` of ``cudaMalloc`` memory, as NVHPC allows);
        ``extent_of`` has checked that ``[low, high)`` is this GPU's memory."""
        return self.allocation_of(low) or (low, high - low)

    # -- transfers ----------------------------------------------------------------
    def _transfer(self, kind, destination, source, queue, name) -> None:
        """``Device._transfer``, once foreign device arrays (any other object with
        ``__cuda_array_interface__``) are backend arrays: events carry arrays."""
        super()._transfer(kind, self._native(destination), self._native(source), queue, name)

    def _native(self, array):
        if isinstance(array, np.ndarray):  # a host array (or a device array of the fake)
            return array
        return self.backend.as_device_array(array)

    def _transfer_operation(self, kind, destination, source, queue):
        if kind == EventKind.DEVICE_COPY:
            return _DeviceCopy(self, destination, source, queue)
        if kind == EventKind.UPLOAD:
            return _HostTransfer(self, True, source, destination, queue)
        return _HostTransfer(self, False, destination, source, queue)

    def _copy(self, destination, source) -> None:
        """Copy between two same-shaped arrays, each a host (numpy) array or a device
        array of this device, on the synchronous queue."""
        to_device = self.backend.interface_of(destination) is not None
        from_device = self.backend.interface_of(source) is not None
        if not (to_device or from_device):
            np.copyto(destination, source, casting="no")
            return
        kind = (EventKind.DEVICE_COPY if to_device and from_device
                else EventKind.UPLOAD if to_device else EventKind.DOWNLOAD)
        self._transfer_operation(kind, destination, source, self.sync_queue)()

    def _block_for(self, packing: _Packing):
        """``(address, temporary)``: where the packed block lives on the device — the
        device array itself when it is contiguous in the block's order, else a new
        temporary (``_Temporary``) to pack into or unpack from."""
        if not packing.device_packed:
            return packing.device_address, None
        address, handle = self._backend_allocate(packing.nbytes)
        view = self.backend.view(handle, 0, packing.shape, packing.dtype, packing.block_strides())
        return address, _Temporary(address, handle, view)

    def _synchronously(self, enqueue, release) -> None:
        """Enqueue on the synchronous stream and wait; then ``release`` — also when it
        failed, after the stream has drained what was enqueued."""
        try:
            enqueue()
            self.sync_queue.synchronize()
        except BaseException:
            with contextlib.suppress(Exception):
                self.backend.synchronize(self.sync_queue.stream)
            raise
        finally:
            release()

    # -- queues and launches -------------------------------------------------------
    def _new_queue(self, async_value: int) -> CudaQueue:
        return CudaQueue(async_value, self.backend, self._label)

    def launch(self, kernel, args, queue, **options):
        """``Device.launch`` with the queue's stream current while the kernel launches
        (compiled kernels launch on CuPy's current stream). On the synchronous queue the
        stream is then synchronized; on an asynchronous one the launch is in stream order
        and returns a ``Pending`` (OpenACC 3.3 §2.16.1)."""
        if queue is self.sync_queue:
            kernel = _SyncKernel(kernel, self.backend, queue)
        return super().launch(kernel, args, queue, **options)

    # -- properties and lifetime ---------------------------------------------------
    @property
    def memory_in_use(self) -> int:
        return self._blocks.in_use

    def properties(self) -> dict:
        free, total = self.backend.memory_info()
        return {
            "memory": int(total),
            "free_memory": int(free),
            "shared_memory_support": 0,
            "name": self.backend.device_name(),
            "vendor": "NVIDIA",
            "driver": self.backend.driver_version(),
        }

    def reset(self) -> None:
        """Forget every allocation (``acc.shutdown``, after the queues have drained)."""
        with self._lock:
            handles = self._blocks.clear()
        for handle in handles:
            self.backend.free(handle)


def _describe_device_array(array, shape, dtype) -> str:
    if isinstance(array, np.ndarray):
        return describe_array(array)
    return f"({type(array).__name__}, shape {shape}, dtype {dtype})"
