"""The CUDA backend: the only code that calls CuPy, and the block index of device memory.

Owns: ``CupyBackend``, ``BlockIndex`` and ``StreamHolds`` (holding a stream, for tests).
``cuda.CudaDevice`` talks to the GPU only through a backend; ``cuda_fake.FakeCudaBackend``
implements the same interface over host memory, so that the whole ``cuda`` device runs,
and is tested, without a GPU.

The backend interface (device ``n``; ``stream``/``event`` are backend objects; addresses
are ints; "enqueue" means the call returns at once and the work runs in stream order):
- memory: ``allocate(nbytes) -> (address, handle)`` (raises ``MemoryError`` when full;
  ``handle`` keeps the block alive), ``free(handle)``, ``memory_info() -> (free, total)``;
- device arrays: ``view(handle, offset, shape, dtype, strides)`` (a CuPy array; ``handle``
  None: an empty one), ``foreign_view(address, shape, dtype, strides)`` (the same over
  memory the program allocated, for ``acc.map_data``), ``unowned_view(array)`` (a new
  device array over ``array``'s memory, with its layout, that keeps no allocation alive;
  the caller uses it only while the memory is allocated), ``interface_of(obj)`` (its ``__cuda_array_interface__`` dict, or
  None when ``obj`` is not a device array), ``as_device_array(obj)`` (a view the backend
  can copy elements of), ``is_device_memory(address)`` (memory of device ``n``:
  ``cudaPointerGetAttributes``, with device ``n``'s context current, as CuPy queries:
  without one the query fails, cupy#3991);
- enqueued copies: ``copy(destination, source, stream)`` (elementwise, two same-shaped
  device arrays of any strides: the pack/unpack kernel), ``memcpy_htod(address,
  host_buffer, stream)``, ``memcpy_dtoh(host_buffer, address, stream)`` (``host_buffer``:
  a contiguous numpy array, all of its bytes), ``memcpy_dtod(destination, source, nbytes,
  stream)``; ``pinned(nbytes)``: a numpy ``uint8`` array in page-locked memory;
- page-locking program memory: ``register(address, nbytes) -> bool``
  (``cudaHostRegister`` of whole pages; False, never an error, when the system refuses),
  ``unregister(address)`` (never raises: the memory may be gone); a memcpy on an
  asynchronous stream takes page-locked host memory only (pageable memory would be read
  at enqueue time);
- streams: ``new_stream(blocking=)``, ``synchronize(stream)``, ``stream_done(stream)``,
  ``use_stream(stream)`` (context manager: the thread's current stream, CuPy's ``with
  stream:``; compiled kernels launch on the current stream), ``launch(stream, fn)`` (run
  ``fn``, which launches kernels on the current stream, in stream order),
  ``launch_host_func(stream, fn)`` (``cudaLaunchHostFunc``: ``fn()`` on a driver thread
  in stream order; it must not call CUDA);
- events: ``record_event(stream)``, ``event_done(event)``, ``synchronize_event(event)``,
  ``wait_event(stream, event)`` (the stream waits, the host does not);
- identity: ``device_name()``, ``driver_version()``;
- testing: ``hold(stream)`` (context manager: the stream starts no further work while
  the block runs; ``StreamHolds`` below on a GPU).

Threading: a backend is called from any thread; CuPy's ``Device`` context is entered per
call (``_device``), never kept. Host functions must not call the backend.
"""

from __future__ import annotations

import bisect
import contextlib
import ctypes
import threading

import numpy as np

from ..errors import DeviceTypeUnavailableError, DeviceUnavailableError, ExecutionError
from .cuda_layout import extent

__all__ = ["CupyBackend", "BlockIndex", "StreamHolds", "HOLD_LIMIT_S"]

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

    def overlaps(self, begin: int, end: int) -> bool:
        """Whether a live block shares a byte with ``[begin, end)``."""
        slot = bisect.bisect_left(self._starts, end) - 1
        if slot < 0:
            return False
        start = self._starts[slot]
        return start + max(self._blocks[start][0], 1) > begin

    def clear(self) -> list:
        """Forget every block; their handles."""
        handles = [handle for _, handle in self._blocks.values()]
        self._blocks.clear()
        self._starts.clear()
        self.in_use = 0
        return handles



class _StreamInUse:
    """``CupyBackend.use_stream``'s with-block: ``device`` (a ``cupy.cuda.Device``) entered,
    then ``stream``; left in the reverse order, the device also when entering the stream
    or leaving it raises. What ``with device, stream:`` does, as one object: a
    generator-based context manager cost ~0.7 µs more on each launch it wraps (every
    synchronous kernel and every enqueued one). One per with-block, never kept: a CuPy
    ``Device`` keeps a stack per object (``CupyBackend._device`` makes one each time)."""

    __slots__ = ("device", "stream")

    def __init__(self, device, stream):
        self.device, self.stream = device, stream

    def __enter__(self):
        self.device.__enter__()
        try:
            self.stream.__enter__()
        except BaseException:
            self.device.__exit__(None, None, None)
            raise
        return self.stream

    def __exit__(self, kind, value, trace):
        try:
            self.stream.__exit__(kind, value, trace)
        finally:
            self.device.__exit__(kind, value, trace)
        return False


class CupyBackend:
    """The backend interface (module docstring) over CuPy, for GPU ``number``.

    Raises:
        DeviceTypeUnavailableError: CuPy is not installed, or finds no CUDA driver/GPU.
        DeviceUnavailableError: there is no GPU ``number``.
    """

    def __init__(self, number: int):
        try:
            import cupy  # optional (pyacc[cuda]): imported when a cuda device is made
        except ImportError as error:
            raise DeviceTypeUnavailableError(
                f"the cuda device type needs CuPy, which is not installed ({error}): "
                "pip install 'pyacc[cuda]' (cupy-cuda13x; 'pyacc[cuda12]' for a CUDA 12 driver)",
                device_type="cuda") from None
        except Exception as error:  # a broken CUDA install raises more than ImportError
            raise DeviceTypeUnavailableError(
                f"the cuda device type needs CuPy, which failed to import: "
                f"{type(error).__name__}: {error}", device_type="cuda") from None
        self._cupy = cupy
        self._runtime = cupy.cuda.runtime
        self._holds = None  # the streams' holds (``hold``), made at the first
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

    def hold(self, stream):
        """Keep ``stream`` from starting further work while the block runs (the testing
        hook of ``pyacc.testing.hold_queue``: a kernel that waits for the block's end)."""
        if self._holds is None:
            self._holds = StreamHolds(self._cupy, self._device)
        return self._holds.hold(stream)

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
        _, low, high = extent(address, shape, np.dtype(dtype).itemsize, strides)
        memory = self._cupy.cuda.UnownedMemory(low, high - low, None, self.number)
        pointer = self._cupy.cuda.MemoryPointer(memory, address - low)
        return self._cupy.ndarray(shape, dtype, memptr=pointer, strides=strides)

    def unowned_view(self, array):
        """A new CuPy array over ``array``'s memory, with its layout, whose memory is
        ``UnownedMemory`` without an owner: it keeps nothing alive (module docstring)."""
        if array.size == 0:
            return self.view(None, 0, array.shape, array.dtype, array.strides)
        return self.foreign_view(array.data.ptr, array.shape, array.dtype, array.strides)

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
            with self._device():  # the query needs a current context (CuPy's own: cupy#3991)
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

    def register(self, address: int, nbytes: int) -> bool:
        try:
            with self._device():
                self._runtime.hostRegister(address, nbytes, 1)  # cudaHostRegisterPortable: every GPU
        except self._runtime.CUDARuntimeError:  # the locked-memory limit, already registered
            return False
        return True

    def unregister(self, address: int) -> None:
        with contextlib.suppress(self._runtime.CUDARuntimeError), self._device():
            self._runtime.hostUnregister(address)

    # -- streams and events --------------------------------------------------------------
    def new_stream(self, *, blocking: bool):
        with self._device():
            return self._cupy.cuda.Stream(non_blocking=not blocking)

    def synchronize(self, stream) -> None:
        stream.synchronize()  # releases the GIL while it waits (host functions need it)

    def stream_done(self, stream) -> bool:
        return stream.done

    def use_stream(self, stream):
        """The backend's GPU current, then ``stream`` CuPy's current stream, for a with-block
        (:class:`_StreamInUse`)."""
        return _StreamInUse(self._device(), stream)

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


# -- holding a stream (the testing hook ``pyacc.testing.hold_queue`` on a GPU) ----------------
# ``StreamHolds.hold(stream)`` enqueues on ``stream`` a one-thread kernel that waits until a
# flag in page-locked host memory is set; work enqueued behind it starts only once the block
# has left (the flag set on exit, an exception included). The fake backend holds its stream
# thread instead; both give tests the same "not run yet" window, so that the tests of
# stream order, races and ``wait_async`` run on a GPU as they run without one.
# - the kernel reads the flag through the device's view of the host memory
#   (``cudaHostAllocMapped``, ``cudaHostGetDevicePointer``), a volatile load about every
#   microsecond (``__nanosleep``, compute capability 7.0 and up);
# - a hold never keeps its stream waiting longer than ``HOLD_LIMIT_S`` seconds: the kernel
#   then returns by itself, so a block that waits for the held queue (a deadlock with the
#   fake) costs that long, and its end raises ``ExecutionError`` saying so;
# - a flag is freed only once the event recorded after its kernel has completed
#   (``cudaFreeHost`` of memory a running kernel reads is undefined): at the next hold (the
#   last hold's flag, 4 bytes, goes with the process);
# - only the held stream waits: other streams, and host functions, run meanwhile (a host
#   function that blocked would stall the driver's callback thread for every stream).

#: the longest a hold keeps its stream waiting on the GPU, in seconds
HOLD_LIMIT_S = 20.0
_HOST_ALLOC_PORTABLE_MAPPED = 1 | 2  # cudaHostAllocPortable | cudaHostAllocMapped

_HOLD_SOURCE = r"""
extern "C" __global__ void pyacc_stream_hold(const volatile int *released, unsigned long long limit_ns) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    while (*released == 0) {
#if __CUDA_ARCH__ >= 700
        __nanosleep(1000);
#endif
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
        if (now - start > limit_ns) break;
    }
}
"""


class StreamHolds:
    """The holds of one device's streams (``hold``), with the kernel compiled once.

    Args:
        cupy: the CuPy module.
        device: a context manager that makes the device current (the backend's ``_device``).
    """

    def __init__(self, cupy, device):
        self._cupy = cupy
        self._device = device
        self._kernel = None
        self._lock = threading.Lock()
        self._spent: list[tuple[int, object]] = []  # (flag's host address, event after its kernel)

    @contextlib.contextmanager
    def hold(self, stream):
        """Keep ``stream`` from starting further work while the block runs."""
        runtime = self._cupy.cuda.runtime
        with self._device():
            self._free_spent(runtime)
            address = runtime.hostAlloc(ctypes.sizeof(ctypes.c_int), _HOST_ALLOC_PORTABLE_MAPPED)
            flag = ctypes.c_int.from_address(address)
            flag.value = 0
            try:
                self._kernel_()((1,), (1,), (self._cupy.uint64(_device_pointer(runtime, address)),
                                             self._cupy.uint64(int(HOLD_LIMIT_S * 1e9))), stream=stream)
            except BaseException:
                runtime.freeHost(address)
                raise
            event = self._cupy.cuda.Event(disable_timing=True)
            event.record(stream)
        try:
            yield stream
        finally:
            expired = event.done  # the kernel stopped waiting before the block's end
            flag.value = 1  # the kernel returns, the stream goes on
            with self._lock:
                self._spent.append((address, event))
        if expired:
            raise ExecutionError(
                f"a hold of a CUDA stream ran out after {HOLD_LIMIT_S:g} s, before its block "
                "ended: something in the block waited for the held queue (on a GPU also an "
                "operation on the legacy default stream, or a device-wide synchronisation, "
                "waits for it); its work may have run inside the block")

    def _kernel_(self):
        with self._lock:
            if self._kernel is None:
                self._kernel = self._cupy.RawKernel(_HOLD_SOURCE, "pyacc_stream_hold")
            return self._kernel

    def _free_spent(self, runtime) -> None:
        """Free the flags whose kernels have returned."""
        done, running = [], []
        with self._lock:
            for address, event in self._spent:
                (done if event.done else running).append((address, event))
            self._spent = running
        for address, _ in done:
            runtime.freeHost(address)


def _device_pointer(runtime, address: int) -> int:
    """The device's address of mapped page-locked host memory: ``cudaHostGetDevicePointer``
    where the runtime module has it; with unified addressing (every 64-bit platform CUDA
    13 runs on) it is the host address itself."""
    query = getattr(runtime, "hostGetDevicePointer", None)
    return address if query is None else query(address, 0)
