"""A stand-in for CuPy: the backend interface of ``mapping.devices.cuda_backend`` over host memory.

Owns: ``FakeCudaBackend`` and ``FakeDeviceArray``. ``CudaDevice(n,
backend=FakeCudaBackend())`` runs the whole ``cuda`` device — its transfers, packing,
queues, events, deferred frees — without a GPU (tests, and ``PYACC_TESTING_FAKE_CUDA=1``
with kernels in Numba's CUDA simulator).

How it stands in (the interface is listed in ``mapping.devices.cuda_backend``'s docstring):
- device memory: one zero-filled numpy ``uint8`` buffer per allocation; its address is the
  buffer's, so device and host addresses never collide while both are alive;
- device arrays are ``FakeDeviceArray`` objects, not numpy arrays, and refuse what CuPy
  arrays refuse on the real stack, so that a fault only a GPU would show fails here too:
  implicit conversion to NumPy (``np.asarray``, ``np.copyto`` into a host array: "use
  ``.get()``") and being typed by Numba for a CPU kernel ("Cannot determine Numba type").
  Stricter than CuPy, they also refuse reading elements into Python numbers on the host
  (``float(d[0])``, ``int``, ``bool``, ``.item()``, iteration), which CuPy does with a
  hidden synchronous copy: pyacc's own code never relies on that. They have CuPy's surface
  where pyacc touches it: ``__cuda_array_interface__``, ``shape``/``dtype``/``strides``/
  ``ndim``/``size``/``nbytes``/``flags``, basic indexing into views, ``reshape``,
  ``view``, ``T``, ``get()`` (a host copy), ``set(host)`` and ``__setitem__``. Those of
  ``unowned_view`` keep their buffer by weak reference, as CuPy's ``UnownedMemory``, and
  refuse any use once it was freed (a GPU would let the kernel touch reused memory).
  The simulator reaches their memory through ``simulator_view()`` (the launch in
  ``compiler.cuda_runtime`` does); the backend reaches it through ``_view``;
- streams: ``queues.WorkerQueue`` threads that run what is enqueued — memcpys, elementwise
  copies, host functions, kernel launches — in order; ``hold(stream)`` keeps one from
  starting further work (tests decide when work "completes"); events are the worker's
  ``QueueEvent``; ``use_stream`` sets a thread-local current stream (``current_stream()``);
- pinned buffers: numpy arrays filled with 0xA5, so a transfer that reads a staging
  buffer it never filled shows up as garbage;
- page-locking: ``register`` refuses what ``cudaHostRegister`` refuses (a range that
  shares a page with a registered one; every range while ``refuse_registration`` is set,
  standing for the locked-memory limit), and a memcpy on a non-blocking stream refuses
  host memory that is neither a ``pinned`` buffer nor registered: on a GPU such a copy
  reads (or, for a download, waits and writes) the host array when it is enqueued, not
  in stream order; one that took registered memory finds it still registered when it
  runs (a DMA through pages unregistered meanwhile is undefined on a GPU).

For tests it records every host↔device and device↔device memcpy, as ``(kind, nbytes)``
with kind ``"htod"``, ``"dtoh"`` or ``"dtod"``, in ``memcpys``, the byte count of every
elementwise device copy (pack/unpack) in ``elementwise_copies``, of every staging buffer
(``pinned``) in ``staging``, every registration as ``(address, nbytes)`` in ``registered``
and every unregistration's address in ``unregistered``, and checks what the real
API would require: memcpy host buffers are contiguous and device ranges lie inside one
live allocation.

Invariants: ``_buffers`` (a ``mapping.devices.cuda_backend.BlockIndex``) holds every live buffer by its
address; its ``in_use`` is the sum of the requested sizes; every ``FakeDeviceArray`` the
backend hands out views memory of a live buffer (or holds no element). It proves nothing
about CuPy itself, real concurrency or timings.
"""

from __future__ import annotations

import contextlib
import threading
import weakref

import numpy as np

from ..queues import WorkerQueue
from .cuda_backend import BlockIndex

__all__ = ["FakeCudaBackend", "FakeDeviceArray"]

_GARBAGE = 0xA5
_NOT_ON_THE_HOST = ("Implicit conversion to a NumPy array is not allowed. Please use `.get()` "
                    "to construct a NumPy array explicitly.")


class FakeDeviceArray:
    """A device array of the fake backend: CuPy's surface, over fake device memory
    (module docstring). ``_view`` is the numpy view of that memory, for the backend."""

    __slots__ = ("_view", "__weakref__")

    def __init__(self, view: np.ndarray):
        self._view = view

    # -- what CuPy arrays have --------------------------------------------------------
    @property
    def __cuda_array_interface__(self):
        view = self._view
        # as CuPy's: an array without elements has no address (data 0), a view included
        return {"shape": view.shape, "typestr": view.dtype.str,
                "data": (view.__array_interface__["data"][0] if view.size else 0, False),
                "strides": None if view.flags.c_contiguous else view.strides, "version": 3}

    shape = property(lambda self: self._view.shape)
    dtype = property(lambda self: self._view.dtype)
    strides = property(lambda self: self._view.strides)
    ndim = property(lambda self: self._view.ndim)
    size = property(lambda self: self._view.size)
    nbytes = property(lambda self: self._view.nbytes)
    itemsize = property(lambda self: self._view.itemsize)
    flags = property(lambda self: self._view.flags)
    T = property(lambda self: self._derived(self._view.T))

    def __len__(self) -> int:
        return len(self._view)

    def __getitem__(self, key) -> "FakeDeviceArray":
        part = self._view[key]
        if not isinstance(part, np.ndarray):  # one element: a 0-d device array, as CuPy's
            part = self._view[(key if isinstance(key, tuple) else (key,)) + (Ellipsis,)]
        return self._derived(part)

    def __setitem__(self, key, value) -> None:
        self._view[key] = value._view if isinstance(value, FakeDeviceArray) else value

    def reshape(self, *shape, order="C") -> "FakeDeviceArray":
        return self._derived(self._view.reshape(*shape, order=order))

    def view(self, dtype) -> "FakeDeviceArray":
        return self._derived(self._view.view(dtype))

    def _derived(self, part: np.ndarray) -> "FakeDeviceArray":
        """A device array over ``part``, a numpy view of this one's memory (as CuPy's views
        of a view share its memory and its ownership)."""
        return FakeDeviceArray(part)

    def get(self, stream=None) -> np.ndarray:
        """A host copy of the elements (CuPy's ``get``)."""
        return self._view.copy()

    def set(self, host: np.ndarray, stream=None) -> None:
        """Copy a host array's elements in (CuPy's ``set``)."""
        np.copyto(self._view, host, casting="no")

    def simulator_view(self) -> np.ndarray:
        """The memory, for Numba's CUDA simulator (which runs kernels on numpy arrays)."""
        return self._view

    def __repr__(self) -> str:
        return (f"<FakeDeviceArray shape={self.shape} dtype={self.dtype} at "
                f"{self._view.__array_interface__['data'][0]:#x}>")

    # -- what CuPy arrays refuse, or pay a hidden synchronous copy for -------------------
    def __array__(self, dtype=None, copy=None):
        raise TypeError(_NOT_ON_THE_HOST)

    def _read_on_host(self, *args):
        raise TypeError(f"{self!r} read on the host without a copy (on a GPU this is a "
                        "hidden synchronous device-to-host copy): use .get()")

    __float__ = __int__ = __index__ = __bool__ = __complex__ = item = tolist = _read_on_host
    __iter__ = _read_on_host


class _UnownedDeviceArray(FakeDeviceArray):
    """What ``unowned_view`` makes: a device array that keeps its buffer by weak reference,
    as CuPy's ``UnownedMemory`` keeps nothing alive. Stricter than CuPy, every use after
    its buffer was freed raises (on a GPU it would read or write whatever the pool has put
    there since)."""

    __slots__ = ("_backend", "_begin", "_buffer", "_layout")

    def __init__(self, backend: "FakeCudaBackend", begin: int, buffer: np.ndarray, layout: tuple):
        self._backend = backend
        self._begin = begin
        self._buffer = weakref.ref(buffer)
        self._layout = layout  # (shape, dtype, offset, strides)

    @property
    def _view(self) -> np.ndarray:
        buffer = self._buffer()
        found = self._backend._buffer_at(self._begin)
        if buffer is None or found is None or found[1] is not buffer:
            raise ValueError(f"fake CUDA: a device array without an owner (unowned_view) at "
                             f"{self._begin:#x} was used after its memory was freed")
        shape, dtype, offset, strides = self._layout
        return np.ndarray(shape, dtype, buffer=buffer, offset=offset, strides=strides)

    def _derived(self, part: np.ndarray) -> FakeDeviceArray:
        """Views of it keep nothing alive either (a CuPy view of an ``UnownedMemory`` array
        shares its memory pointer)."""
        buffer = self._buffer()
        if not np.may_share_memory(part, buffer):  # a copy (reshape of a strided view): owned
            return FakeDeviceArray(part)
        return _UnownedDeviceArray.over(self._backend, self._begin, buffer, part)

    @classmethod
    def over(cls, backend, begin: int, buffer: np.ndarray, part: np.ndarray) -> "_UnownedDeviceArray":
        """One over ``part``, a numpy view into ``buffer`` (the live buffer at ``begin``)."""
        offset = part.__array_interface__["data"][0] - begin
        return cls(backend, begin, buffer, (part.shape, part.dtype, offset, part.strides))

    def __repr__(self) -> str:
        shape, dtype, offset, _ = self._layout
        return f"<unowned FakeDeviceArray shape={shape} dtype={dtype} at {self._begin + offset:#x}>"


class _FakeStream(WorkerQueue):
    """A fake CUDA stream: a worker thread; ``ptr`` stands for the ``cudaStream_t``."""

    def __init__(self, number: int, blocking: bool):
        # a GPU stream never runs work on the host thread that enqueues it
        super().__init__(number, "the fake CUDA backend (a stream)", inline_below=0.0)
        self.blocking = blocking
        self.ptr = id(self)

    def __repr__(self) -> str:
        return f"<fake CUDA stream {self.async_value}{' (blocking)' if self.blocking else ''}>"


class FakeCudaBackend:
    """The backend interface over host memory (module docstring).

    Args:
        capacity: bytes of "device memory"; ``allocate`` raises ``MemoryError`` beyond it.
    """

    def __init__(self, *, capacity: int = 16 << 30):
        self.capacity = capacity
        self.memcpys: list[tuple[str, int]] = []
        self.elementwise_copies: list[int] = []
        self.staging: list[int] = []
        self.registered: list[tuple[int, int]] = []
        self.unregistered: list[int] = []
        #: set by tests: every registration is refused (the locked-memory limit)
        self.refuse_registration = False
        self._lock = threading.Lock()
        self._registrations = BlockIndex()  # registered host ranges (handles: None)
        self._pinned = weakref.WeakValueDictionary()  # id → live staging buffer
        self._buffers = BlockIndex()  # handles are the numpy buffers
        self._streams = 0
        self._current = threading.local()

    # -- memory ------------------------------------------------------------------------
    def allocate(self, nbytes: int):
        with self._lock:
            if self.in_use + nbytes > self.capacity:
                raise MemoryError(f"fake CUDA device: {nbytes} bytes requested, "
                                  f"{self.capacity - self.in_use} of {self.capacity} free")
            buffer = np.zeros(max(nbytes, 1), dtype=np.uint8)
            address = buffer.ctypes.data
            self._buffers.add(address, nbytes, buffer)
        return address, buffer

    def free(self, handle: np.ndarray) -> None:
        address = handle.ctypes.data
        with self._lock:
            self._buffers.pop(address)

    @property
    def in_use(self) -> int:
        """Bytes of fake device memory allocated (requested sizes)."""
        return self._buffers.in_use

    def memory_info(self):
        with self._lock:
            return self.capacity - self.in_use, self.capacity

    def _buffer_at(self, address: int):
        """``(begin, buffer)`` of the live buffer holding ``address``, or None."""
        with self._lock:
            found = self._buffers.find(address)
        return None if found is None else (found[0], found[2])

    def _bytes(self, address: int, nbytes: int) -> np.ndarray:
        """The device bytes ``[address, address + nbytes)``, which must lie in one buffer."""
        found = self._buffer_at(address)
        if found is None or address + nbytes > found[0] + found[1].size:
            raise ValueError(f"fake CUDA: device range [{address:#x},+{nbytes}] is not inside "
                             "one live allocation")
        begin, buffer = found
        return buffer[address - begin: address - begin + nbytes]

    # -- device arrays -------------------------------------------------------------------
    def view(self, handle, offset: int, shape, dtype, strides) -> FakeDeviceArray:
        if handle is None:
            return FakeDeviceArray(np.empty(shape, dtype))
        return FakeDeviceArray(np.ndarray(shape, dtype, buffer=handle, offset=offset,
                                          strides=strides))

    def foreign_view(self, address: int, shape, dtype, strides) -> FakeDeviceArray:
        begin, buffer = self._buffer_at(address)
        return FakeDeviceArray(np.ndarray(shape, dtype, buffer=buffer, offset=address - begin,
                                          strides=strides))

    def unowned_view(self, array: FakeDeviceArray) -> FakeDeviceArray:
        view = array._view
        if view.size == 0:
            return self.view(None, 0, view.shape, view.dtype, view.strides)
        begin, buffer = self._buffer_at(view.__array_interface__["data"][0])
        return _UnownedDeviceArray.over(self, begin, buffer, view)

    def is_device_memory(self, address: int) -> bool:
        return self._buffer_at(address) is not None

    def interface_of(self, obj):
        """The ``__cuda_array_interface__`` of a device array, None for anything else (a
        host numpy array included, as CuPy's: numpy arrays do not export one)."""
        try:
            return getattr(obj, "__cuda_array_interface__", None)
        except Exception:  # as CupyBackend.interface_of
            return None

    def as_device_array(self, obj) -> FakeDeviceArray:
        if isinstance(obj, FakeDeviceArray):
            return obj
        interface = obj.__cuda_array_interface__
        shape, dtype = tuple(interface["shape"]), np.dtype(interface["typestr"])
        data = interface["data"][0]
        if not shape or 0 in shape:
            return FakeDeviceArray(np.empty(shape, dtype))
        found = self._buffer_at(data)
        if found is None:
            raise ValueError(f"fake CUDA: {type(obj).__name__} at {data:#x} is not device memory")
        begin, buffer = found
        return FakeDeviceArray(np.ndarray(shape, dtype, buffer=buffer, offset=data - begin,
                                          strides=interface.get("strides")))

    # -- enqueued copies -----------------------------------------------------------------
    def copy(self, destination: FakeDeviceArray, source: FakeDeviceArray, stream) -> None:
        target, origin = _device_elements(destination), _device_elements(source)
        if target.shape != origin.shape:
            raise ValueError(f"fake CUDA copy: shapes {target.shape} and {origin.shape} differ")
        self.elementwise_copies.append(target.nbytes)
        stream.submit(lambda: np.copyto(target, origin, casting="no"), "an elementwise copy")

    def memcpy_htod(self, address: int, host_buffer: np.ndarray, stream) -> None:
        source = _contiguous_bytes(host_buffer)
        self._check_within_registration(source)
        registered = self._check_page_locked(host_buffer, source, stream)
        target = self._bytes(address, source.size)
        self.memcpys.append(("htod", source.size))
        stream.submit(self._dma(target, source, registered, source), "a memcpy host to device")

    def memcpy_dtoh(self, host_buffer: np.ndarray, address: int, stream) -> None:
        target = _contiguous_bytes(host_buffer)
        self._check_within_registration(target)
        registered = self._check_page_locked(host_buffer, target, stream)
        source = self._bytes(address, target.size)
        self.memcpys.append(("dtoh", target.size))
        stream.submit(self._dma(target, source, registered, target), "a memcpy device to host")

    def _dma(self, target: np.ndarray, source: np.ndarray, registered: bool, host: np.ndarray):
        """The copy a stream runs; one whose host side was taken as registered memory
        finds it still registered when it runs (on a GPU the DMA goes through the pages
        the registration locked: unregistered before the DMA ran, it is undefined)."""
        def run() -> None:
            if registered and not self.is_registered(host.ctypes.data, host.size):
                raise ValueError(
                    "fake CUDA memcpy: the registered host memory of a queued async copy was "
                    "unregistered (cudaHostUnregister) before the copy ran")
            np.copyto(target, source)
        return run

    def memcpy_dtod(self, destination: int, source: int, nbytes: int, stream) -> None:
        target, origin = self._bytes(destination, nbytes), self._bytes(source, nbytes)
        self.memcpys.append(("dtod", nbytes))
        stream.submit(lambda: np.copyto(target, origin), "a memcpy device to device")

    def pinned(self, nbytes: int) -> np.ndarray:
        buffer = np.full(nbytes, _GARBAGE, dtype=np.uint8)
        self.staging.append(nbytes)
        self._pinned[id(buffer)] = buffer
        return buffer

    # -- page-locking program memory --------------------------------------------------------
    def register(self, address: int, nbytes: int) -> bool:
        with self._lock:
            if self.refuse_registration or self._registrations.overlaps(address, address + nbytes):
                return False  # cudaErrorMemoryAllocation / cudaErrorHostMemoryAlreadyRegistered
            self._registrations.add(address, nbytes, None)
        self.registered.append((address, nbytes))
        return True

    def unregister(self, address: int) -> None:
        with self._lock, contextlib.suppress(KeyError):  # never registered: as CUDA, no raise
            self._registrations.pop(address)
            self.unregistered.append(address)

    def is_registered(self, address: int, nbytes: int) -> bool:
        """Whether the host bytes ``[address, address + nbytes)`` are registered."""
        with self._lock:
            found = self._registrations.find(address)
        return found is not None and address + nbytes <= found[0] + max(found[1], 1)

    def _check_within_registration(self, memory: np.ndarray) -> None:
        """A memcpy's host bytes meet no registered range, or lie inside one, on any
        stream. CUDA refuses one that starts in registered memory and runs past it with
        ``cudaErrorInvalidValue`` (an H100 showed it: a synchronous download of the last
        rows of a registered array, whose partial last page is left out of the
        registration, ``cuda_pins``); one that starts outside and runs into a registered
        range it takes as pageable memory, at pageable speed. The fake refuses both."""
        low, high = memory.ctypes.data, memory.ctypes.data + memory.size
        if memory.size and self._registrations.overlaps(low, high) and not self.is_registered(low, memory.size):
            raise ValueError(
                f"fake CUDA memcpy: the host bytes [{low:#x}, {high:#x}) run across the edge of "
                "a registered range (cudaHostRegister): CUDA refuses the copy with "
                "cudaErrorInvalidValue; copy the registered part and the rest separately")

    def _check_page_locked(self, host_buffer: np.ndarray, memory: np.ndarray, stream) -> bool:
        """A memcpy on a non-blocking stream takes page-locked host memory only; whether
        it takes it as registered program memory (``_dma`` checks that again when it runs)."""
        if stream.blocking or memory.size == 0:
            return False
        array = host_buffer
        while isinstance(array, np.ndarray):  # a view of a staging buffer
            if self._pinned.get(id(array)) is array:
                return False
            array = array.base
        if not self.is_registered(memory.ctypes.data, memory.size):
            raise ValueError(
                "fake CUDA memcpy: host memory that is neither pinned nor registered on an "
                "asynchronous stream (on a GPU the copy would read or write the host array "
                "when it is enqueued, not in stream order): stage it or register it")
        return True

    # -- streams and events --------------------------------------------------------------
    def new_stream(self, *, blocking: bool) -> _FakeStream:
        with self._lock:
            self._streams += 1
            number = self._streams
        return _FakeStream(number, blocking)

    def synchronize(self, stream: _FakeStream) -> None:
        stream.synchronize()

    def stream_done(self, stream: _FakeStream) -> bool:
        return stream.is_idle()

    @contextlib.contextmanager
    def use_stream(self, stream: _FakeStream):
        stack = self._stack()
        stack.append(stream)
        try:
            yield stream
        finally:
            stack.pop()

    def current_stream(self) -> _FakeStream | None:
        """The calling thread's current stream (``use_stream``), or None."""
        stack = self._stack()
        return stack[-1] if stack else None

    def _stack(self) -> list:
        stack = getattr(self._current, "stack", None)
        if stack is None:
            stack = self._current.stack = []
        return stack

    def launch(self, stream: _FakeStream, fn) -> None:
        def run():
            with self.use_stream(stream):
                fn()

        stream.submit(run, "a kernel launch")

    def launch_host_func(self, stream: _FakeStream, fn) -> None:
        stream.submit(fn, "a host function")

    def record_event(self, stream: _FakeStream):
        return stream.record_event()

    def event_done(self, event) -> bool:
        return event.is_set()

    def synchronize_event(self, event) -> None:
        event.wait()

    def wait_event(self, stream: _FakeStream, event) -> None:
        stream.wait_event(event)

    def hold(self, stream: _FakeStream):
        """Keep ``stream`` from starting further work while the block runs."""
        return stream.hold()

    # -- identity -------------------------------------------------------------------------
    def device_name(self) -> str:
        return "pyacc fake CUDA device (host memory)"

    def driver_version(self) -> str:
        return f"fake CUDA (numpy {np.__version__})"


def _device_elements(array) -> np.ndarray:
    """The memory of a device array, for an elementwise copy: cupy.copyto takes device
    arrays only, so a host array here is the caller's fault, as on the GPU."""
    if not isinstance(array, FakeDeviceArray):
        raise TypeError(f"fake CUDA copy: {type(array).__name__} is not a device array "
                        "(an elementwise device copy takes two device arrays)")
    return array._view


def _contiguous_bytes(array: np.ndarray) -> np.ndarray:
    """The bytes of a C- or F-contiguous host array, in memory order (a view: writes land)."""
    if not isinstance(array, np.ndarray):
        raise TypeError(f"fake CUDA memcpy: the host buffer is a {type(array).__name__}, not "
                        "a host (numpy) array")
    if not (array.flags.c_contiguous or array.flags.f_contiguous):
        raise ValueError(f"fake CUDA memcpy: the host buffer (shape {array.shape}, strides "
                         f"{array.strides}) is not contiguous; cudaMemcpy copies one block")
    return array.reshape(-1, order="A").view(np.uint8)
