"""Prepared launches (``compiler.cuda_plans``) against numba-cuda's real launch path,
without a GPU.

numba-cuda's own dispatcher, typing, compiler (PTX for an H100), ``_Kernel.launch`` and
``_Kernel._prepare_args`` run; only the leaves that need a driver stand in: the stream
handle, the loaded function (``get_cufunc``), the DLPack/CAI view of a device array, and
``cuda.core.launch``, which records the words it is given. A prepared launch must hand
``cuda.core.launch`` exactly what numba-cuda's launch hands it, without typing or
viewing the arrays again (what every launch did before plans: the 76% of issue 28).
"""
from __future__ import annotations

import ctypes
import warnings
from types import SimpleNamespace

import numpy as np
import pytest

from pyacc.compiler import cuda_compilers, cuda_plans, cuda_runtime

if cuda_runtime.SIMULATED:  # pragma: no cover - conftest keeps this file out
    pytest.skip("numba-cuda's launch path, not the simulator's", allow_module_level=True)

numba_cuda = cuda_compilers.COMPILERS["numba-cuda"]
if not cuda_plans.enabled(numba_cuda):
    pytest.skip(f"plans reproduce numba-cuda 0.30's launch; here: {numba_cuda.label()}",
                allow_module_level=True)

from numba import cuda  # noqa: E402 - numba-cuda is installed (above)
from numba.cuda import codegen, dispatcher  # noqa: E402
from numba.cuda.cudadrv import devicearray, driver  # noqa: E402

STREAM = SimpleNamespace(handle=0x5eed, name="the queue's stream")


class DeviceArray:
    """A CuPy array as far as a launch looks at it: ``data.ptr``, shape, byte strides,
    dtype, and the CUDA array interface numba-cuda types it by (strides None when
    C-contiguous, as CuPy's)."""

    def __init__(self, shape, dtype=np.float64, order="C", ptr=0x7f0000000000):
        layout = np.empty(shape, dtype, order=order)
        self.shape, self.strides, self.dtype = layout.shape, layout.strides, layout.dtype
        self.size = layout.size
        self.data = SimpleNamespace(ptr=ptr)

    @property
    def __cuda_array_interface__(self):
        contiguous = self.strides == np.empty(self.shape, self.dtype).strides
        return {"shape": self.shape, "strides": None if contiguous else self.strides,
                "typestr": self.dtype.str,
                "data": (self.data.ptr, False), "version": 3}

    def view_of_rows(self, count):
        """``a[:count]``: the same pointer, fewer rows."""
        other = DeviceArray.__new__(DeviceArray)
        other.__dict__.update(self.__dict__, shape=(count,) + self.shape[1:])
        other.size = int(np.prod(other.shape))
        return other


def _view(obj, stream=0, copy=True, user_explicit=False):
    """``_to_strided_memory_view`` of a device array, without a driver: what the words
    of an array argument are read from."""
    watch.views += 1
    interface = obj.__cuda_array_interface__
    layout = SimpleNamespace(strides_in_bytes=interface["strides"],  # None: C-contiguous
                             is_contiguous_c=interface["strides"] is None,
                             is_contiguous_f=False)
    view = SimpleNamespace(size=obj.size, dtype=obj.dtype, ptr=interface["data"][0],
                           shape=interface["shape"], _layout=layout)
    return view, False


watch = SimpleNamespace(views=0, calls=0, launches=[])


@pytest.fixture
def real_launch_path(monkeypatch):
    """numba-cuda's launch path with the driver's leaves standing in (module docstring);
    ``cuda_runtime`` launching on one stream with plans for :class:`DeviceArray`."""
    watch.views, watch.calls, watch.launches = 0, 0, []
    monkeypatch.setattr(dispatcher, "get_current_device",
                        lambda: SimpleNamespace(compute_capability=(9, 0)))
    monkeypatch.setattr(codegen.CUDACodeLibrary, "_ensure_cc",
                        lambda library, cc: cc if cc is not None else (9, 0, "a"))
    monkeypatch.setattr(driver, "_to_core_stream", lambda stream: STREAM)
    monkeypatch.setattr(devicearray, "_to_strided_memory_view", _view)
    monkeypatch.setattr(codegen.CUDACodeLibrary, "get_cufunc",
                        lambda library: SimpleNamespace(
                            kernel=("handle", id(library)), name="kernel",
                            module=SimpleNamespace(initialized=True)))
    monkeypatch.setattr(dispatcher, "launch",
                        lambda stream, config, handle, *words: watch.launches.append(
                            (stream, config, handle, words)))
    call = dispatcher.CUDADispatcher.call

    def counted(self, args, launch_config):
        watch.calls += 1
        return call(self, args, launch_config)
    monkeypatch.setattr(dispatcher.CUDADispatcher, "call", counted)
    monkeypatch.setattr(cuda_runtime, "stream", lambda: 0)
    monkeypatch.setattr(cuda_runtime, "_prepared", [DeviceArray])
    monkeypatch.setattr(cuda_runtime, "_configured", {})
    monkeypatch.setattr(cuda_plans, "_plans", {})
    monkeypatch.setattr(cuda_plans, "_refused", set())
    monkeypatch.setattr(cuda_compilers, "_choice",
                        [(numba_cuda, None, "the test")])
    return watch


def fill(a, n, x):
    i = cuda.grid(1)
    if i < n:
        a[i, 0] = x


def _kernel(**options):
    return cuda.jit(**options)(fill)


def _comparable(words):
    """Words with ctypes scalars as (type, value): ctypes objects compare by identity."""
    return tuple((type(w), w.value) if isinstance(w, ctypes._SimpleCData) else w for w in words)


def _launched(index):
    stream, config, handle, words = watch.launches[index]
    return stream, repr(config), handle, _comparable(words)


def test_prepared_launch_passes_the_words_numba_cuda_passes(real_launch_path):
    kernel, a = _kernel(), DeviceArray((100, 3))
    cuda_runtime.launch(kernel, 4, 32, (a, 100, 1.5))  # full path: facts seen once
    cuda_runtime.launch(kernel, 4, 32, (a, 100, 1.5))  # full path; prepares
    cuda_runtime.launch(kernel, 4, 32, (a, 7, -2.0))  # prepared
    assert watch.calls == 2
    cuda_plans._plans.clear()
    cuda_runtime.launch(kernel, 4, 32, (a, 7, -2.0))  # full path again
    assert len(watch.launches) == 4
    assert _launched(2) == _launched(3)
    stream, _, _, words = _launched(2)
    assert stream is STREAM
    assert words == (0, 0, 300, 8, a.data.ptr, 100, 3, 24, 8,
                     (ctypes.c_int64, 7), (ctypes.c_double, -2.0))


def test_prepared_launch_skips_typing_and_views(real_launch_path):
    kernel, a = _kernel(), DeviceArray((64, 2))
    for step in range(10):
        cuda_runtime.launch(kernel, 2, 32, (a, 64, float(step)))
    assert watch.calls == 2  # the dispatcher typed the arguments at first and second sight
    assert watch.views == 3  # by numba-cuda's two launches, and the plan's marshalling
    assert [_comparable(w[3])[-1] for w in watch.launches] == \
        [(ctypes.c_double, float(step)) for step in range(10)]


def test_other_facts_take_the_full_path_then_a_plan_of_their_own(real_launch_path):
    kernel = _kernel()
    u, unew = DeviceArray((50, 2), ptr=0x1000), DeviceArray((50, 2), ptr=0x9000)
    for _ in range(4):  # Jacobi's swap: two plans, both used
        cuda_runtime.launch(kernel, 2, 32, (u, 50, 0.0))
        cuda_runtime.launch(kernel, 2, 32, (unew, 50, 0.0))
    assert watch.calls == 4
    rows = u.view_of_rows(10)  # same pointer, another shape
    cuda_runtime.launch(kernel, 2, 32, (rows, 10, 0.0))
    assert watch.calls == 5
    assert _comparable(watch.launches[-1][3])[:7] == (0, 0, 20, 8, 0x1000, 10, 2)
    fortran = DeviceArray((50, 2), order="F", ptr=0x1000)  # another layout: another kernel
    for _ in range(3):
        cuda_runtime.launch(kernel, 2, 32, (fortran, 50, 0.0))
    assert watch.calls == 7
    assert len(kernel.overloads) == 2
    assert watch.launches[-1][2] != watch.launches[0][2]  # the F kernel's handle


@pytest.mark.parametrize("scalar, expected", [
    (np.float32(0.25), (ctypes.c_float, 0.25)),
    (np.int32(-3), (ctypes.c_int32, -3)),
])
def test_numpy_scalars_are_marshalled_by_their_type(real_launch_path, scalar, expected):
    kernel, a = _kernel(), DeviceArray((8, 1))
    for _ in range(3):
        cuda_runtime.launch(kernel, 1, 32, (a, 8, scalar))
    assert watch.calls == 2
    assert _comparable(watch.launches[2][3])[-1] == expected
    cuda_runtime.launch(kernel, 1, 32, (a, 8, 2.0))  # a float: another type, the full path
    assert watch.calls == 3


def test_an_int_beyond_int64_typing_is_never_prepared(real_launch_path):
    kernel, a = _kernel(), DeviceArray((8, 1))
    for _ in range(3):
        cuda_runtime.launch(kernel, 1, 32, (a, 2**62, 1.0))
    assert watch.calls == 3
    assert cuda_plans.facts((a, 2**62, 1.0), DeviceArray) is None
    assert cuda_plans.facts((a, 2**62 - 1, 1.0), DeviceArray) is not None


def test_a_host_array_is_refused_beside_a_plan(real_launch_path):
    kernel, a = _kernel(), DeviceArray((8, 1))
    for _ in range(3):
        cuda_runtime.launch(kernel, 1, 32, (a, 8, 1.0))
    assert watch.calls == 2
    with pytest.raises(TypeError, match="host NumPy array for parameter 'a'"):
        cuda_runtime.launch(kernel, 1, 32, (np.zeros((8, 1)), 8, 1.0))


def test_a_debug_kernel_is_not_prepared_and_says_why_once(real_launch_path, monkeypatch, capsys):
    monkeypatch.setenv("PYACC_INFO", "1")
    monkeypatch.setattr(dispatcher._Kernel, "launch",
                        lambda self, args, griddim, blockdim, stream=0, sharedmem=0:
                        watch.launches.append(args))  # a debug launch reads an error word
    kernel, a = _kernel(debug=True, opt=False), DeviceArray((8, 1))
    for _ in range(4):
        cuda_runtime.launch(kernel, 1, 32, (a, 8, 1.0))
    assert watch.calls == 4
    assert list(cuda_plans._plans.popitem()[1].values()) == [False]  # refused, once
    said = capsys.readouterr().err
    assert said.count("GPU kernel fill launches through numba-cuda's dispatcher") == 1
    assert "debug" in said


def test_a_configuration_with_other_callbacks_is_not_prepared(real_launch_path):
    kernel, a = _kernel(), DeviceArray((8, 1))
    seen = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # numba-cuda's low-occupancy warning of 1 block
        kernel[1, 32, 0].pre_launch_callbacks.append(lambda k, config: seen.append(k))
    for _ in range(3):
        cuda_runtime.launch(kernel, 1, 32, (a, 8, 1.0))
    assert watch.calls == 3 and len(seen) == 3


def test_plans_per_configuration_are_bounded(real_launch_path, monkeypatch):
    monkeypatch.setattr(cuda_plans, "FACTS_KEPT", 2)
    kernel = _kernel()
    arrays = [DeviceArray((8, 1), ptr=0x1000 * (k + 1)) for k in range(3)]
    for a in arrays + arrays:
        cuda_runtime.launch(kernel, 1, 32, (a, 8, 1.0))
    (plans,) = cuda_plans._plans.values()
    assert len(plans) == 2
    assert watch.calls == 6  # each first sight was dropped before its second
    for a in arrays[1:] * 2:
        cuda_runtime.launch(kernel, 1, 32, (a, 8, 1.0))
    assert watch.calls == 8 and all(plans.values())


def test_facts_refuse_what_a_plan_cannot_replay():
    a = DeviceArray((4, 1))
    record = np.zeros(1, dtype=[("x", "f8")])[0]
    for other in (np.zeros(3), (1, 2), record, np.datetime64("2026-11-27"), None, "text"):
        assert cuda_plans.facts((a, other), DeviceArray) is None
    assert cuda_plans.facts((a, True, np.bool_(False), 3, 2.5), DeviceArray) == \
        ((a.data.ptr, a.shape, a.strides, a.dtype), bool, np.bool_, int, float)


def test_plans_are_for_numba_cuda_0_30_and_the_express_lane(monkeypatch):
    assert not cuda_plans.enabled(cuda_compilers.COMPILERS["mlir"])
    fake = SimpleNamespace(name="numba-cuda", version=lambda: "0.31.0")
    assert not cuda_plans.enabled(fake)
    monkeypatch.setenv("PYACC_EXPRESS", "0")
    assert not cuda_plans.enabled(numba_cuda)
