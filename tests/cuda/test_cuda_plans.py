"""Prepared launches (``compiler.cuda_plans``) against numba-cuda's real launch path,
without a GPU.

numba-cuda's own dispatcher, typing, compiler (PTX for an H100), ``_Kernel.launch`` and
``_Kernel._prepare_args`` run; only the leaves that need a driver stand in
(``numba_cuda_leaves``): the stream handle, the loaded function, cuda.core's DLPack view
of a device array, and ``cuda.core.launch``, which records the words it is given. A
prepared launch must hand ``cuda.core.launch`` exactly what numba-cuda's launch hands it,
without typing or viewing the arrays again (what every launch did before plans: the 76%
of issue 28).
"""
from __future__ import annotations

import ctypes
import functools
import warnings
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from pyacc.compiler import cuda_compilers, cuda_plans, cuda_runtime

if cuda_runtime.SIMULATED:  # pragma: no cover - conftest keeps this file out
    pytest.skip("numba-cuda's launch path, not the simulator's", allow_module_level=True)

numba_cuda = cuda_compilers.COMPILERS["numba-cuda"]
if not cuda_plans.enabled(numba_cuda):
    pytest.skip(f"plans reproduce numba-cuda 0.30's launch; here: {numba_cuda.label()}",
                allow_module_level=True)

from numba import cuda  # noqa: E402 - numba-cuda is installed (above)
from numba.cuda import dispatcher  # noqa: E402

from numba_cuda_leaves import QUEUE_STREAM, STREAM, DeviceArray, stand_in, watch  # noqa: E402

_stream = cuda_runtime.stream  # (``stand_in`` replaces it: one queue's stream)

@pytest.fixture
def real_launch_path(monkeypatch):
    """numba-cuda's launch path with the driver's leaves standing in
    (``numba_cuda_leaves``); ``cuda_runtime`` launching on one stream with plans for
    :class:`DeviceArray`."""
    return stand_in(monkeypatch)


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
    for step in range(2):  # full path: facts seen once, then the plan made
        cuda_runtime.launch(kernel, 2, 32, (a, 64, float(step)))
    typings = watch.typings
    assert typings >= 2 and watch.views == 3  # words: numba-cuda's two launches, the plan's
    for step in range(2, 10):
        cuda_runtime.launch(kernel, 2, 32, (a, 64, float(step)))
    assert watch.calls == 2  # the dispatcher ran at first and second sight only
    assert (watch.typings, watch.views) == (typings, 3)
    assert [_comparable(w[3])[-1] for w in watch.launches] == \
        [(ctypes.c_double, float(step)) for step in range(10)]


def test_a_repeated_scalar_reuses_its_words_and_a_new_value_is_marshalled(real_launch_path,
                                                                          monkeypatch):
    """A loop bound or a coefficient repeats from launch to launch: its words are the
    marshaller's of the last launch (numba-cuda's own, never spelled by pyacc); a new value,
    or an equal value of another type (0 == 0.0 == False), is marshalled again."""
    kernel, a = _kernel(), DeviceArray((64, 2))
    for _ in range(2):  # the plan made
        cuda_runtime.launch(kernel, 2, 32, (a, 64, 0.5))
    marshalled = []
    real = cuda_plans.marshal
    monkeypatch.setattr(cuda_plans, "marshal", lambda *args: marshalled.append(args[2]) or real(*args))
    values = (0.5, 0.5, 1.0, 1.0, float("nan"), float("nan"), 0.5)
    for value in values:
        cuda_runtime.launch(kernel, 2, 32, (a, 64, value))
    assert [repr(v) for v in marshalled] == ["64", "0.5", "1.0", "nan", "nan", "0.5"]
    launched = [_comparable(w[3])[-2:] for w in watch.launches[-len(values):]]
    assert all(bound == (ctypes.c_int64, 64) for bound, _ in launched)
    assert [repr(x) for (_, (kind, x)) in launched] == [repr(v) for v in values]
    cuda_runtime.launch(kernel, 2, 32, (a, 64, 1))  # an int: other facts, the full path
    assert _comparable(watch.launches[-1][3])[-1] == (ctypes.c_int64, 1)


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
        kernel[1, 32, QUEUE_STREAM].pre_launch_callbacks.append(lambda k, config: seen.append(k))
    for _ in range(3):
        cuda_runtime.launch(kernel, 1, 32, (a, 8, 1.0))
    assert watch.calls == 3 and len(seen) == 3


def test_facts_seen_once_push_no_plan_out(real_launch_path, monkeypatch):
    """Arguments that never repeat (fresh scratch arrays) are only remembered; the plans of
    a configuration are bounded, the oldest made dropped first."""
    monkeypatch.setattr(cuda_plans, "FACTS_KEPT", 2)
    kernel = _kernel()
    u, unew = DeviceArray((8, 1), ptr=0x1000), DeviceArray((8, 1), ptr=0x2000)
    for a in (u, unew, u, unew):
        cuda_runtime.launch(kernel, 1, 32, (a, 8, 1.0))
    assert watch.calls == 4
    for k in range(20):  # one-off arguments between the hot ones
        cuda_runtime.launch(kernel, 1, 32, (DeviceArray((8, 1), ptr=0x10000 * (k + 1)), 8, 1.0))
        cuda_runtime.launch(kernel, 1, 32, (u, 8, 1.0))
        cuda_runtime.launch(kernel, 1, 32, (unew, 8, 1.0))
    assert watch.calls == 24
    third = DeviceArray((8, 1), ptr=0x3000)
    for _ in range(3):
        cuda_runtime.launch(kernel, 1, 32, (third, 8, 1.0))
    assert watch.calls == 26
    (plans,) = cuda_plans._plans.values()
    assert len(plans) == 2 and all(plans.values())  # u's, made first, went
    cuda_runtime.launch(kernel, 1, 32, (u, 8, 1.0))
    assert watch.calls == 27


def test_sightings_are_bounded(real_launch_path, monkeypatch):
    monkeypatch.setattr(cuda_plans, "SIGHTINGS_KEPT", 3)
    kernel = _kernel()
    arrays = [DeviceArray((8, 1), ptr=0x1000 * (k + 1)) for k in range(4)]
    for a in arrays + arrays:  # each first sight forgotten before its second
        cuda_runtime.launch(kernel, 1, 32, (a, 8, 1.0))
    assert len(cuda_plans._sightings) == 3 and cuda_plans._plans == {}


def test_threads_prepare_and_use_plans_at_once(real_launch_path):
    """Launches of one configuration from several threads (each on its own arrays, some
    shared): no error, every launch's words its own, one callback on the configuration."""
    import threading

    kernel = _kernel()
    shared = DeviceArray((8, 1), ptr=0x9000)
    errors, done = [], []

    def work(index):
        try:
            mine = DeviceArray((8, 1), ptr=0x1000 * (index + 1))
            for step in range(30):
                for a in (mine, shared):
                    cuda_runtime.launch(kernel, 1, 32, (a, 8, float(step)))
            done.append(index)
        except Exception as error:  # noqa: BLE001 - reported below
            errors.append(error)
    workers = [threading.Thread(target=work, args=(k,)) for k in range(6)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(30)
    assert errors == [] and sorted(done) == list(range(6))
    assert len(watch.launches) == 6 * 30 * 2
    (configured,) = {config for config in cuda_runtime._configured.values()}
    assert configured.pre_launch_callbacks.count(cuda_plans._seen) == 1
    (plans,) = cuda_plans._plans.values()
    assert len(plans) == 7 and all(plans.values())


def test_no_plans_on_the_default_stream(real_launch_path, monkeypatch):
    """Stream 0 is every device's: a plan would keep one device's function handle."""
    monkeypatch.setattr(cuda_runtime, "stream", lambda: 0)
    kernel, a = _kernel(), DeviceArray((8, 1))
    for _ in range(4):
        cuda_runtime.launch(kernel, 1, 32, (a, 8, 1.0))
    assert watch.calls == 4 and cuda_plans._plans == {} and cuda_plans._sightings == {}


def test_no_plans_on_a_default_stream_of_every_device(real_launch_path, monkeypatch):
    """CuPy's per-thread default stream (handle 2) and the legacy one (1) are every
    device's too."""
    monkeypatch.setattr(cuda_runtime, "_shared", {id(QUEUE_STREAM)})
    kernel, a = _kernel(), DeviceArray((8, 1))
    for _ in range(4):
        cuda_runtime.launch(kernel, 1, 32, (a, 8, 1.0))
    assert watch.calls == 4 and cuda_plans._plans == {}


class _Wrapper:
    """The compiler's wrapper of a stream handle (``cuda.external_stream``)."""

    def __init__(self, handle):
        self.handle = handle


def test_a_stream_handle_reused_by_another_device_gets_no_plan_of_the_first(
        real_launch_path, monkeypatch):
    """``acc.shutdown`` destroys the queues' streams and the driver hands their handles out
    again, to another device's stream too: the stream of a configuration is one device's
    (``cuda_runtime.stream``: wrapped per device and handle), so device 1 never launches
    through a plan that keeps device 0's function handle."""
    current = SimpleNamespace(ptr=0x5000, device_id=0)  # CuPy's current stream
    cupy = SimpleNamespace(cuda=SimpleNamespace(get_current_stream=lambda: current))
    monkeypatch.setattr(cuda_runtime, "stream", _stream)
    monkeypatch.setattr(cuda_runtime, "_cupy", lambda: cupy)
    monkeypatch.setattr(cuda_runtime, "_external", {})
    monkeypatch.setattr(cuda, "external_stream", _Wrapper)
    kernel, a = _kernel(), DeviceArray((8, 1))
    for _ in range(3):
        cuda_runtime.launch(kernel, 1, 32, (a, 8, 1.0))
    assert watch.calls == 2  # the third through device 0's plan
    current.device_id = 1  # device 0's stream destroyed; device 1's has its handle
    cuda_runtime.launch(kernel, 1, 32, (a, 8, 1.0))
    assert watch.calls == 3  # numba-cuda's launch: device 1's function
    assert sorted(cuda_runtime._external) == [(0, 0x5000), (1, 0x5000)]
    current.device_id = 0  # device 0 again, the same handle: its own plan still holds
    cuda_runtime.launch(kernel, 1, 32, (a, 8, 1.0))
    assert watch.calls == 3


RECORD = np.dtype([("energy", "f8"), ("count", "i4")], align=True)  # '|V16'


def fill_records(g, n, x):
    i = cuda.grid(1)
    if i < n:
        g[i].energy = x
        g[i].count = i


def test_a_record_array_launches_as_numba_cudas_own_device_array(real_launch_path):
    """numba-cuda cannot type a CuPy array of a record dtype (CuPy's DLPack export refuses
    it, and ``__cuda_array_interface__``'s ``typestr`` '|V16' is no type: a GPU raised
    ``NumbaNotImplementedError: |V16``): each launch hands the kernel numba-cuda's own
    device array over the same memory, through the dispatcher (records have no facts)."""
    kernel, g = cuda.jit(fill_records), DeviceArray((50,), RECORD, ptr=0x4000)
    for step in range(3):
        cuda_runtime.launch(kernel, 2, 32, (g, 50, float(step)))
    assert watch.calls == 3 and cuda_plans._plans == {} and cuda_plans._sightings == {}
    assert cuda_plans.facts((g, 50, 1.0), DeviceArray) is None
    ((array_type, _, _),) = kernel.overloads
    assert array_type.dtype.fields.keys() == {"energy", "count"}
    assert _comparable(watch.launches[-1][3]) == (0, 0, 50, 16, 0x4000, 50, 16,
                                                  (ctypes.c_int64, 50), (ctypes.c_double, 2.0))


def test_a_failure_while_preparing_fails_no_call(real_launch_path, monkeypatch, capsys):
    """The kernel has run when its plan is made: an error then is reported, not raised,
    and those facts launch in full from then on."""
    monkeypatch.setenv("PYACC_INFO", "1")

    def broken(*args):
        raise RuntimeError("no function handle")
    monkeypatch.setattr(cuda_plans.PreparedLaunch, "__init__", broken)
    kernel, a = _kernel(), DeviceArray((8, 1))
    for step in range(4):
        cuda_runtime.launch(kernel, 1, 32, (a, 8, float(step)))
    assert watch.calls == 4 and len(watch.launches) == 4
    assert list(cuda_plans._plans.popitem()[1].values()) == [False]
    said = capsys.readouterr().err
    assert said.count("preparing its launch failed (RuntimeError: no function handle)") == 1


def test_facts_refuse_what_a_plan_cannot_replay():
    a = DeviceArray((4, 1))
    record = np.zeros(1, dtype=[("x", "f8")])[0]
    for other in (np.zeros(3), (1, 2), record, np.datetime64("2026-11-27"),
                  np.timedelta64(5, "s"), None, "text", 1j):
        assert cuda_plans.facts((a, other), DeviceArray) is None
    assert cuda_plans.facts((a, True, np.bool_(False), 3, 2.5, np.float16(1), np.complex64(1j),
                             np.uint64(7)), DeviceArray) == \
        ((a.data.ptr, a.shape, a.strides, a.dtype), bool, np.bool_, int, float, np.float16,
         np.complex64, np.uint64)


def test_plans_are_for_numba_cuda_0_30_and_the_express_lane(monkeypatch):
    assert not cuda_plans.enabled(cuda_compilers.COMPILERS["mlir"])
    fake = SimpleNamespace(name="numba-cuda", version=lambda: "0.31.0")
    assert not cuda_plans.enabled(fake)
    monkeypatch.setenv("PYACC_EXPRESS", "0")
    assert not cuda_plans.enabled(numba_cuda)


@functools.cache
def _pool():
    """Arrays a program's launches draw from: layouts, dtypes, pointers, a view."""
    u = DeviceArray((6, 2), ptr=0x1000)
    return (u, DeviceArray((6, 2), ptr=0x2000), DeviceArray((6, 2), order="F", ptr=0x1000),
            DeviceArray((6, 2), np.float32, ptr=0x3000), u.view_of_rows(3))


_shared_kernel = functools.cache(_kernel)  # one kernel for every example (compiled once)


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, 4), st.sampled_from([3, 6, 2**40]),
                          st.sampled_from([1.5, -2.0, np.float32(0.25)]),
                          st.sampled_from([(1, 32), (2, 16)])), min_size=1, max_size=14))
def test_plans_launch_exactly_what_the_dispatcher_launches(real_launch_path, program):
    """Any sequence of launches (arrays swapped, views, other layouts and dtypes, scalars
    of two types, two configurations): with plans, ``cuda.core.launch`` gets exactly the
    launches it gets with every launch through numba-cuda's dispatcher."""
    kernel, pool = _shared_kernel(), _pool()
    recorded = {}
    for way, prepared in (("plans", [DeviceArray]), ("dispatcher", [None])):
        cuda_runtime._prepared[:] = prepared
        cuda_plans._plans.clear()
        cuda_plans._sightings.clear()
        watch.launches = []
        for index, n, x, (grid, block) in program:
            cuda_runtime.launch(kernel, grid, block, (pool[index], n, x))
        recorded[way] = [(stream, repr(config), handle, _comparable(words))
                         for stream, config, handle, words in watch.launches]
    assert recorded["plans"] == recorded["dispatcher"]
