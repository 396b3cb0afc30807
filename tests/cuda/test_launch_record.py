"""The C launch of a prepared GPU launch (``compiler/_launch.c``, ``cuda_plans.record``),
without a GPU.

The driver's ``cuLaunchKernel`` stands in as a C function made by ctypes (:class:`Driver`),
which reads what it is given: the kernel's handle, grid, block, shared memory, stream and
the bytes of each parameter word. A record must hand the driver, word for word, the bytes
``cuda.core``'s ``ParamHolder`` packs from the same words (what ``cuda.core.launch`` hands
the driver), and through a prepared launch the bytes of the words numba-cuda's own launch
passes for the same arguments.
"""
from __future__ import annotations

import ctypes
import threading
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from numba import cuda  # numba-cuda (the test extra): its launch path, without a GPU

from pyacc.compiler import cuda_compilers, cuda_plans, cuda_runtime

_launch = pytest.importorskip("pyacc.compiler._launch", reason="the C launch is not built")
pytest.importorskip("cuda.core._kernel_arg_handler", reason="cuda.core's packing is not installed")

from numba_cuda_leaves import Driver, launched_bytes, packed  # noqa: E402

_CTYPES = [ctypes.c_int8, ctypes.c_uint8, ctypes.c_int16, ctypes.c_uint16, ctypes.c_int32,
           ctypes.c_uint32, ctypes.c_int64, ctypes.c_uint64, ctypes.c_ssize_t, ctypes.c_float,
           ctypes.c_double]
_NUMPY = [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64,
          np.float16, np.float32, np.float64]


def _ctypes_word(kind):
    if kind in (ctypes.c_float, ctypes.c_double):
        return st.floats(width=32 if kind is ctypes.c_float else 64).map(kind)
    bits = ctypes.sizeof(kind) * 8
    signed = kind(-1).value < 0
    low, high = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if signed else (0, 2 ** bits - 1)
    return st.integers(low, high).map(kind)


def _numpy_word(kind):
    if np.dtype(kind).kind == "f":
        return st.floats(width=np.dtype(kind).itemsize * 8, allow_nan=False).map(kind)
    info = np.iinfo(kind)
    return st.integers(int(info.min), int(info.max)).map(kind)


WORDS = st.one_of(st.booleans(), st.integers(-(2 ** 63), 2 ** 63 - 1), st.floats(),
                  st.sampled_from([np.True_, np.False_]),
                  *map(_ctypes_word, _CTYPES), *map(_numpy_word, _NUMPY))


@settings(max_examples=200, deadline=None)
@given(st.lists(WORDS, min_size=1, max_size=80))
def test_a_record_packs_each_word_as_cuda_cores_param_holder_does(words):
    """Every kind of word numba-cuda's marshaller or ``cuda_binaries.spell`` makes (and
    NumPy scalars), more words than a launch packs on the C stack too: the driver reads
    ParamHolder's bytes."""
    driver = Driver(len(words))
    record = _launch.LaunchRecord(driver.address, 0xfeed, (3, 2, 1), (32, 4, 1), 0, 0x5eed,
                                  words)
    record.launch()
    [(handle, grid, block, shared, stream, slots, extra)] = driver.launches
    assert launched_bytes(words, slots) == packed(words)
    assert (handle, grid, block, shared, stream, extra) == \
        (0xfeed, (3, 2, 1), (32, 4, 1), 0, 0x5eed, None)
    assert record.count == len(words)


def test_spans_replace_words_for_one_launch_only():
    """A scalar's words of this launch (``launch(*spans)``); the record keeps its own."""
    words = (0, 0, 8, 8, 0x7000, ctypes.c_int64(5), ctypes.c_double(1.5))
    driver = Driver(len(words))
    record = _launch.LaunchRecord(driver.address, 1, (1, 1, 1), (1, 1, 1), 0, 2, words)
    record.launch((5, (ctypes.c_int64(9),)), (6, (ctypes.c_double(-2.0),)))
    record.launch()
    first, second = (launch[5] for launch in driver.launches)
    assert first[5:] == packed([ctypes.c_int64(9), ctypes.c_double(-2.0)])
    assert second == [slot.ljust(8, b"\0") for slot in packed(words)]


def test_threads_launch_one_record_with_scalars_of_their_own():
    words = (0x7000, ctypes.c_int64(0))
    driver = Driver(len(words))
    record = _launch.LaunchRecord(driver.address, 1, (1, 1, 1), (1, 1, 1), 0, 2, words)

    def launches(start):
        for value in range(start, start + 500):
            record.launch((1, (ctypes.c_int64(value),)))
    threads = [threading.Thread(target=launches, args=(start,)) for start in (0, 1000, 2000)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    seen = sorted(int.from_bytes(launch[5][1], "little", signed=True)
                  for launch in driver.launches)
    assert seen == sorted(v for start in (0, 1000, 2000) for v in range(start, start + 500))


def test_a_refused_launch_raises_with_the_drivers_code():
    driver = Driver(1)
    driver.result = 1  # CUDA_ERROR_INVALID_VALUE
    record = _launch.LaunchRecord(driver.address, 1, (1, 1, 1), (1, 1, 1), 0, 2, (7,))
    with pytest.raises(_launch.LaunchFailed) as failed:
        record.launch()
    assert failed.value.code == 1
    # what a plan raises: cuda.core's error naming the driver's, as cuda.core.launch does
    # (its name needs the driver's library: here, without one, the number)
    with pytest.raises(Exception, match=r"CUDA_ERROR_INVALID_VALUE|CUresult 1") as raised:
        cuda_plans._launch_record(record)
    assert not isinstance(raised.value, _launch.LaunchFailed)


@pytest.mark.parametrize("words, error, message", [
    ((np.complex128(1),), ValueError, "word 0: a numpy.complex128 of 16 bytes"),
    ((1, object()), TypeError, "word 1: a object cannot be passed"),
    ((2 ** 63,), OverflowError, "too big"),
    ((b"",), ValueError, "word 0: a bytes of 0 bytes"),
])
def test_a_word_the_driver_cannot_take_is_refused_when_recorded(words, error, message):
    with pytest.raises(error, match=message):
        _launch.LaunchRecord(Driver(1).address, 1, (1, 1, 1), (1, 1, 1), 0, 2, words)


def test_a_span_past_the_words_is_refused_and_nothing_launches():
    driver = Driver(2)
    record = _launch.LaunchRecord(driver.address, 1, (1, 1, 1), (1, 1, 1), 0, 2, (1, 2))
    with pytest.raises(IndexError, match="words 1 to 3 of a launch of 2 words"):
        record.launch((1, (5, 6)))
    with pytest.raises(TypeError):
        record.launch([1, (5,)])
    assert driver.launches == []


def test_a_record_keeps_its_owner_alive():
    """What keeps the kernel's handle loaded (its cuda.core ``Kernel``, a loaded binary)
    lives as long as a record that launches it."""
    import gc
    import weakref

    class Owner:
        pass
    owner = Owner()
    alive = weakref.ref(owner)
    record = _launch.LaunchRecord(Driver(0).address, 1, (1, 1, 1), (1, 1, 1), 0, 2, (), owner)
    del owner
    gc.collect()
    assert alive() is not None
    del record
    gc.collect()
    assert alive() is None


def test_no_record_without_a_driver_function():
    with pytest.raises(ValueError, match="no driver function"):
        _launch.LaunchRecord(0, 1, (1, 1, 1), (1, 1, 1), 0, 2, ())


# -- through a prepared launch ----------------------------------------------------------------
numba_cuda = cuda_compilers.COMPILERS["numba-cuda"]
_plans = not cuda_runtime.SIMULATED and cuda_plans.enabled(numba_cuda)


@pytest.fixture
def c_launch(monkeypatch):
    """numba-cuda's launch path (``numba_cuda_leaves``) with the driver's function standing
    in (:class:`Driver`, 11 words: a 2-D array, an int, a float): plans launch from C."""
    if not _plans:
        pytest.skip(f"plans reproduce numba-cuda 0.30's launch; here: {numba_cuda.label()}")
    from numba.cuda import codegen  # numba-cuda is installed (above)
    from numba_cuda_leaves import stand_in

    watch = stand_in(monkeypatch)
    monkeypatch.setattr(codegen.CUDACodeLibrary, "get_cufunc",
                        lambda library: SimpleNamespace(
                            kernel=SimpleNamespace(handle=id(library) & 0xffffffff),
                            name="kernel", module=SimpleNamespace(initialized=True)))
    driver = Driver(11)
    monkeypatch.setattr(cuda_plans, "_driver", {"cuLaunchKernel": driver.address})
    return SimpleNamespace(watch=watch, driver=driver)


def fill(a, n, x):
    i = cuda.grid(1)
    if i < n:
        a[i, 0] = x


def _as_driver_reads(stream, config, handle, words):
    """A launch through cuda.core (the stand-in's record) as the driver would read it."""
    grid, block = (tuple(config.grid) + (1, 1))[:3], (tuple(config.block) + (1, 1))[:3]
    return (handle.handle, grid, block, config.shmem_size, stream.handle, packed(words))


def test_a_plan_launches_from_c_the_bytes_numba_cudas_launch_packs(c_launch):
    """The dispatcher's launches (first and second sight) went through cuda.core; the
    plan's go to the driver's function, with the bytes ParamHolder packs of the words
    numba-cuda passed for the same arguments, a new scalar value marshalled."""
    from numba_cuda_leaves import DeviceArray

    kernel, a = _kernel(), DeviceArray((100, 3))
    for x in (1.5, 1.5, -2.0, 1.5):
        cuda_runtime.launch(kernel, (4, 1), (32, 1), (a, 100, x))
    watch, driver = c_launch.watch, c_launch.driver
    assert len(watch.launches) == 2 and len(driver.launches) == 2
    expected = _as_driver_reads(*watch.launches[0])
    for launch, x in zip(driver.launches, (-2.0, 1.5)):
        handle, grid, block, shared, stream, slots, _ = launch
        words = watch.launches[0][3][:-1] + (ctypes.c_double(x),)
        assert (handle, grid, block, shared, stream) == expected[:5]
        assert launched_bytes(words, slots) == packed(words)


@settings(max_examples=20, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, 2), st.sampled_from([3, 2 ** 40]),
                          st.sampled_from([1.5, -2.0, np.float32(0.25)])),
                min_size=1, max_size=10))
def test_plans_launched_from_c_pass_the_bytes_of_the_dispatchers_launches(c_launch, program):
    """Any sequence of launches: the driver reads, launch by launch, the bytes it reads
    when every launch goes through numba-cuda's dispatcher and cuda.core."""
    from numba_cuda_leaves import DeviceArray

    kernel = _kernel()
    pool = [DeviceArray((8, 2)), DeviceArray((8, 2), ptr=0x2000),
            DeviceArray((8, 2), np.float32, ptr=0x3000)]
    watch, driver = c_launch.watch, c_launch.driver
    reads = {}
    for way, prepared in (("plans", [DeviceArray]), ("dispatcher", [None])):
        cuda_runtime._prepared[:] = prepared
        cuda_plans._plans.clear()
        cuda_plans._sightings.clear()
        reads[way] = []
        for index, n, x in program:
            through_core = len(watch.launches)
            cuda_runtime.launch(kernel, 2, 16, (pool[index], n, x))
            if len(watch.launches) > through_core:
                reads[way].append(_as_driver_reads(*watch.launches[-1]))
            else:  # the driver read whole slots: cut below to the dispatcher's sizes
                reads[way].append(driver.launches[-1][:5] + (driver.launches[-1][5],))
    assert len(reads["plans"]) == len(reads["dispatcher"])
    for plans, dispatcher in zip(reads["plans"], reads["dispatcher"]):
        assert plans[:5] == dispatcher[:5]
        assert [slot[:len(word)] for slot, word in zip(plans[5], dispatcher[5])] == dispatcher[5]


def _kernel():
    """One kernel for every example (compiled once)."""
    if "fill" not in _kernels:
        _kernels["fill"] = cuda.jit(fill)
    return _kernels["fill"]


_kernels = {}
