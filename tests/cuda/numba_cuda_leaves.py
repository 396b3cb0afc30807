"""numba-cuda's launch path without a GPU: the leaves that need a driver, standing in.

numba-cuda's own dispatcher, typing, compiler (PTX for an H100), ``_Kernel.launch`` and
``_Kernel._prepare_args`` run; what stands in: the device's compute capability, the
stream handle, the loaded function (``get_cufunc``), cuda.core's DLPack view of a device
array (``StridedMemoryView.from_dlpack``, through which numba-cuda types a CuPy array and
reads its words: :class:`View`; it refuses a record dtype, as CuPy's DLPack export
does), the current context (numba-cuda's own device arrays are made in it, by
``cuda.from_cuda_array_interface``), and ``cuda.core.launch`` (numba-cuda's, and the one
a loaded kernel's plan calls: ``cuda_plans._core``), which records the words it is given.
:class:`DeviceArray` is a CuPy array as far as a launch looks at it.

Used by ``test_cuda_plans.py``, the relaunches' tests and ``benchmarks/bench_launch_plans.py``:
``stand_in(monkeypatch)`` (a ``pytest.MonkeyPatch``) puts the leaves in place and sets
``cuda_runtime`` to launch on one queue's stream with plans for :class:`DeviceArray`;
``watch`` counts what ran. :class:`Driver` stands in for the driver's ``cuLaunchKernel``
(a C function made by ctypes) where a prepared launch launches from C, :class:`Waits` for
its ``cuStreamSynchronize``, and :func:`fill_machine` puts both in place around a driver
of one launch (what a relaunch makes again); :class:`QueueBackend` is what an
asynchronous queue (``CudaQueue``) needs of a backend, and :class:`EnqueuingDevice` what the
express lane's enqueue needs of the cuda device; :func:`packed`
is what ``cuda.core``'s ``ParamHolder`` packs of words (what ``cuda.core.launch`` hands the
driver).
"""
from __future__ import annotations

import contextlib
import ctypes
import weakref
from types import SimpleNamespace

import numpy as np

from pyacc.compiler import cuda_compilers, cuda_plans, cuda_runtime

from numba import cuda  # numba-cuda: the callers check it is installed
from numba.cuda import api, codegen, dispatcher
from numba.cuda.cudadrv import devicearray, devices, driver
from numba.cuda.typing import typeof as typeof_module

__all__ = ["STREAM", "CONTEXT", "QUEUE_STREAM", "DeviceArray", "View", "watch", "stand_in",
           "Driver", "Waits", "fill", "fill_kernel", "fill_machine", "QueueBackend", "EnqueuingDevice", "packed",
           "launched_bytes"]

STREAM = SimpleNamespace(handle=0x5eed, name="the queue's stream")  # cuda.core's
CONTEXT = SimpleNamespace(name="the current context")  # numba-cuda's


class _QueueStream:
    """A queue's stream as ``cuda_runtime.stream()`` names it: its compiler's wrapper is
    itself, its cuda.core stream :data:`STREAM`."""

    def compiler(self):
        return self

    def core(self):
        return STREAM


QUEUE_STREAM = _QueueStream()


class DeviceArray:
    """A CuPy array as far as a launch looks at it: ``data.ptr``, shape, byte strides,
    dtype, size, and ``__dlpack__``, through which numba-cuda types it and reads its words
    (a view, :class:`View`), else ``__cuda_array_interface__`` (CuPy's: ``typestr`` only,
    no ``descr``)."""

    def __init__(self, shape, dtype=np.float64, order="C", ptr=0x7f0000000000):
        self._take(np.empty(shape, dtype, order=order), SimpleNamespace(ptr=ptr))

    def _take(self, shadow, data):
        """Its layout and flags are ``shadow``'s (plain attributes: CuPy's are C's)."""
        self._shadow, self.data = shadow, data
        self.shape, self.strides, self.dtype, self.size = (shadow.shape, shadow.strides,
                                                           shadow.dtype, shadow.size)

    def __dlpack__(self, stream=None):  # pragma: no cover - View.from_dlpack reads the array
        raise AssertionError("read through View.from_dlpack")

    def __dlpack_device__(self):
        return (2, 0)  # kDLCUDA, device 0

    @property
    def __cuda_array_interface__(self):
        contiguous = self._shadow.flags.c_contiguous
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.data.ptr, False),
                "strides": None if contiguous else self.strides, "version": 3}

    def view_of_rows(self, count):
        """``a[:count]``: the same pointer, fewer rows."""
        other = DeviceArray.__new__(DeviceArray)
        other._take(self._shadow[:count], self.data)
        return other


class View:
    """cuda.core's ``StridedMemoryView`` made from DLPack, as far as numba-cuda reads one:
    typing (``stream_ptr=-1``) and an array argument's words (the launch's stream)."""

    @classmethod
    def from_dlpack(cls, obj, stream_ptr=None):
        if obj.dtype.kind == "V":  # CuPy's export (get_dlpack_dtype_code_itemsize)
            raise BufferError(f"CuPy cannot export dtype {obj.dtype} through DLPack")
        if stream_ptr == -1:
            watch.typings += 1
        else:
            watch.views += 1
        view, flags = cls(), obj._shadow.flags
        view.ptr, view.shape, view.dtype, view.size = obj.data.ptr, obj.shape, obj.dtype, obj.size
        view.readonly = False
        view._layout = SimpleNamespace(strides_in_bytes=obj.strides,
                                       is_contiguous_c=flags.c_contiguous,
                                       is_contiguous_f=flags.f_contiguous)
        return view


watch = SimpleNamespace(typings=0, views=0, calls=0, launches=[])


def stand_in(monkeypatch) -> SimpleNamespace:
    """The leaves in place (module docstring); ``watch``, zeroed."""
    watch.typings, watch.views, watch.calls, watch.launches = 0, 0, 0, []
    monkeypatch.setattr(dispatcher, "get_current_device",
                        lambda: SimpleNamespace(compute_capability=(9, 0)))
    monkeypatch.setattr(codegen.CUDACodeLibrary, "_ensure_cc",
                        lambda library, cc: cc if cc is not None else (9, 0, "a"))
    monkeypatch.setattr(driver, "_to_core_stream", lambda stream: STREAM)
    monkeypatch.setattr(typeof_module, "StridedMemoryView", View)
    monkeypatch.setattr(devicearray, "StridedMemoryView", View)
    monkeypatch.setattr(devices._runtime, "ensure_context", contextlib.nullcontext)
    monkeypatch.setattr(api, "current_context", lambda: CONTEXT)
    monkeypatch.setattr(codegen.CUDACodeLibrary, "get_cufunc",
                        lambda library: SimpleNamespace(
                            kernel=("handle", id(library)), name="kernel",
                            module=SimpleNamespace(initialized=True)))
    monkeypatch.setattr(dispatcher, "launch",
                        lambda stream, config, handle, *words: watch.launches.append(
                            (stream, config, handle, words)))
    # a loaded kernel's plan launches through cuda.core itself: the same stand-in
    monkeypatch.setattr(cuda_plans, "_core", lambda: (
        lambda *launched: dispatcher.launch(*launched), dispatcher.LaunchConfig))
    call = dispatcher.CUDADispatcher.call

    def counted(self, args, launch_config):
        watch.calls += 1
        return call(self, args, launch_config)
    monkeypatch.setattr(dispatcher.CUDADispatcher, "call", counted)
    monkeypatch.setattr(cuda_runtime, "stream", lambda: QUEUE_STREAM)
    monkeypatch.setattr(cuda_runtime, "_prepared", [DeviceArray])
    monkeypatch.setattr(cuda_runtime, "_configured", {})
    monkeypatch.setattr(cuda_plans, "_plans", {})
    monkeypatch.setattr(cuda_plans, "_sightings", {})
    monkeypatch.setattr(cuda_plans, "_refused", weakref.WeakSet())
    # plans launch through cuda.core (the stand-in above), not the driver's function of a
    # GPU this process may have found: a test that wants the C launch sets its own
    monkeypatch.setattr(cuda_plans, "_driver", {"cuLaunchKernel": None, "cuStreamSynchronize": None})
    monkeypatch.setattr(cuda_compilers, "_choice",
                        [(cuda_compilers.COMPILERS["numba-cuda"], None, "stand-ins")])
    return watch


# -- the driver's cuLaunchKernel (a prepared launch's C launch, ``compiler/_launch.c``) ------
_SIGNATURE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, *[ctypes.c_uint] * 7,
                              ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p)


class Driver:
    """``cuLaunchKernel`` standing in: each launch's ``(handle, grid, block, shared, stream,
    words)`` in ``launches``, each word the 8 bytes of its slot; answers ``result``."""

    def __init__(self, count: int):
        self.count, self.result, self.launches = count, 0, []
        self.function = _SIGNATURE(self._launch)  # (kept alive with the stand-in)
        self.address = ctypes.cast(self.function, ctypes.c_void_p).value

    def _launch(self, handle, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        words = [ctypes.string_at(params[i], 8) for i in range(self.count)]
        self.launches.append((handle, (gx, gy, gz), (bx, by, bz), shared, stream, words,
                              extra))
        return self.result


_WAIT = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)


class Waits:
    """``cuStreamSynchronize`` standing in: the streams waited for; answers ``result``."""

    def __init__(self):
        self.streams, self.result = [], 0
        self.function = _WAIT(self._wait)
        self.address = ctypes.cast(self.function, ctypes.c_void_p).value

    def _wait(self, stream):
        self.streams.append(stream)
        return self.result


# -- a driver of one launch (what a relaunch makes again, ``compiler/_relaunch.c.h``) ----------
def fill(a, n, x):
    i = cuda.grid(1)
    if i < n:
        a[i, 0] = x


_kernels = {}


def fill_kernel():
    """``fill`` compiled by numba-cuda (once a process)."""
    if "fill" not in _kernels:
        _kernels["fill"] = cuda.jit(fill)
    return _kernels["fill"]


def fill_machine(monkeypatch) -> SimpleNamespace:
    """The leaves in place (:func:`stand_in`), the driver's ``cuLaunchKernel`` and
    ``cuStreamSynchronize`` standing in (``machine.driver``, ``machine.waits``), and
    ``machine.launcher(a, n, x)``: a generated driver of one launch of ``fill`` on 4 blocks
    of 32 threads, as far as a relaunch sees it (``SyncKernel``'s, or an asynchronous
    queue's); ``machine.calls`` counts its calls, ``machine.watch`` what ran."""
    watch = stand_in(monkeypatch)
    monkeypatch.setattr(codegen.CUDACodeLibrary, "get_cufunc", lambda library: SimpleNamespace(
        kernel=SimpleNamespace(handle=0xf111), name="fill", module=SimpleNamespace(initialized=True)))
    driver, waits = Driver(11), Waits()
    monkeypatch.setattr(cuda_plans, "_driver", {"cuLaunchKernel": driver.address,
                                                "cuStreamSynchronize": waits.address})
    machine = SimpleNamespace(watch=watch, driver=driver, waits=waits, calls=0, failures=0)

    def launcher(a, n, x):
        machine.calls += 1
        cuda_runtime.launch(fill_kernel(), (4, 1), (32, 1), (a, n, x))
    machine.launcher = launcher
    return machine


class QueueBackend:
    """A backend (``mapping.devices.cuda_backend``) as far as a ``CudaQueue`` uses it: an
    operation runs when it is enqueued, in order (``log``); an event has passed when its
    ``done`` says (the backend's ``done`` when it was recorded)."""

    def __init__(self):
        self.log, self.done = [], True

    def new_stream(self, *, blocking):
        return object()

    def launch(self, stream, fn):
        self.log.append("launch")
        fn()

    def launch_host_func(self, stream, fn):
        fn()

    def use_stream(self, stream):
        return contextlib.nullcontext()

    def synchronize(self, stream):
        pass

    def record_event(self, stream):
        return SimpleNamespace(done=self.done)

    def event_done(self, event):
        return event.done

    def stream_done(self, stream):
        return True

    def wait_event(self, stream, event):
        pass


class EnqueuingDevice:
    """The cuda device as far as the express lane's enqueue (``pyacc._express.enqueuer``)
    reads it: its queue 1 (``queue``, a ``CudaQueue`` over ``backend``, a
    :class:`QueueBackend` by default), ``CudaDevice.relaunch``, and
    ``launch`` as ``Device.launch`` queues a kernel (a ``Pending`` the queue runs)."""

    identity = ("cuda", 0)

    def __init__(self, backend=None, label="the test device"):
        from pyacc.mapping.devices.cuda_queues import CudaQueue

        self.queue = CudaQueue(1, backend or QueueBackend(), label)
        self.queues = SimpleNamespace(made=lambda value: self.queue if value == 1 else None)

    def relaunch(self, again, args, queue, name=None):
        from pyacc.mapping.devices.cuda import CudaDevice

        return CudaDevice.relaunch(self, again, args, queue, name)

    def launch(self, kernel, device_args, queue, name=None, where=None, info=None):
        from pyacc.mapping.queues import Pending

        pending = Pending(kernel, device_args, name, queue.async_value)
        queue.submit(pending, ("kernel", name))
        return pending


def _size(word) -> int:
    """The bytes of ``word`` the driver reads (its kernel parameter's size)."""
    if isinstance(word, (bool, np.bool_)):
        return 1
    if isinstance(word, ctypes._SimpleCData):
        return ctypes.sizeof(word)
    if isinstance(word, np.generic):
        return word.itemsize
    return 8  # an int (intptr_t) or a float (double)


def packed(words) -> list[bytes]:
    """The bytes ``ParamHolder`` packs for each word (cuda.core's launch)."""
    from cuda.core._kernel_arg_handler import ParamHolder  # the callers skip without it

    holder = ParamHolder(list(words))
    pointers = (ctypes.c_void_p * len(words)).from_address(holder.ptr)
    return [ctypes.string_at(pointer, _size(word)) for pointer, word in zip(pointers, words)]


def launched_bytes(words, slots) -> list[bytes]:
    """What the driver read of each word: its slot cut to its size."""
    return [slot[:_size(word)] for word, slot in zip(words, slots)]
