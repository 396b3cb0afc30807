"""The cuda device on a real GPU (API.md §1, §2, §5; the issue's interop list): kernels
through ``@acc.parallel_loop`` with ``acc.data``, ``host_data`` yielding CuPy arrays, a
CuPy and a numba-cuda kernel run on pyacc's queues (``acc.get_cuda_stream``), the strided
column update, ``deviceptr`` / ``map_data`` / ``memcpy_*`` with CuPy and numba-cuda arrays.

Every test is marked ``gpu`` and skipped, with the reason printed (``-rs``), where no GPU
is usable (``acc.get_num_devices("cuda") == 0``) or where the cuda device is the
``PYACC_TESTING_FAKE_CUDA`` stand-in. Run them on a GPU machine with
``pip install -e '.[cuda,test]'`` then ``pytest -m gpu -rs``.
"""

import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import pyacc as acc
from pyacc import _devices
from pyacc._express import express_lane
from pyacc.mapping.devices.cuda_backend import CupyBackend


def _why_not() -> str | None:
    if os.environ.get("PYACC_TESTING_FAKE_CUDA", "").strip() not in ("", "0"):
        return "PYACC_TESTING_FAKE_CUDA is set: the cuda device is the host-memory stand-in"
    if acc.get_num_devices("cuda") == 0:
        return f"no usable GPU: {_devices.unavailable_reason('cuda')}"
    return None


_REASON = _why_not()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(_REASON is not None, reason=str(_REASON))]

if _REASON is None:
    import cupy

    from pyacc.compiler import cuda_compilers

    # the user's own kernels, written with the compiler pyacc uses: numba-cuda-mlir's
    # ``cuda`` where installed, numba-cuda's otherwise (loaded with its NumPy 2.5 fix)
    cuda = cuda_compilers.load()


@pytest.fixture
def gpu():
    """The calling thread on cuda device 0, empty table, zeroed stats; shut down after."""
    acc.shutdown("cuda")
    acc.set_device_type("cuda")
    acc.set_device_num(0, "cuda")
    acc.set_default_async(acc.async_noval)
    acc.reset_stats()
    yield
    acc.wait()
    acc.shutdown("cuda")
    acc.set_device_type("host")


# == kernels ====================================================================================
@acc.parallel_loop
def saxpy(a, x, y):
    for i in range(x.shape[0]):
        y[i] = a * x[i] + y[i]


@acc.parallel_loop(collapse=2, reduction="max:err", present=["u", "unew"])
def jacobi_step(u, unew):
    n, m = u.shape
    err = 0.0
    for i in range(1, n - 1):
        for j in range(1, m - 1):
            unew[i, j] = 0.25 * (u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1])
            err = max(err, abs(unew[i, j] - u[i, j]))
    return err


@acc.parallel_loop(reduction="+:total")
def dot(x, y):
    total = 0.0
    for i in range(x.shape[0]):
        total += x[i] * y[i]
    return total


@acc.parallel_loop
def add_one(x):
    for i in range(x.shape[0]):
        x[i] = x[i] + 1.0


@acc.parallel_loop
def scale(x, factor):
    for i in range(x.shape[0]):
        x[i] = x[i] * factor


@acc.parallel_loop(deviceptr="d")
def gather_plus_one(d, out):
    for i in range(out.shape[0]):
        out[i] = d[i] + 1.0


def test_the_default_device_type_is_cuda_with_a_gpu():
    code = "import pyacc as acc; print(acc.get_device_type(), acc.get_num_devices('cuda'))"
    environment = {k: v for k, v in os.environ.items() if k not in ("ACC_DEVICE_TYPE", "PYACC_OFFLOAD")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=environment, check=True).stdout.split()
    assert out[0] == "cuda" and int(out[1]) == cupy.cuda.runtime.getDeviceCount()


def test_properties_name_the_gpu(gpu):
    name = cupy.cuda.runtime.getDeviceProperties(0)["name"]
    name = name.decode() if isinstance(name, bytes) else name
    assert name in acc.get_property("name")
    assert acc.get_property("memory") > acc.get_property("free_memory") > 0
    assert acc.get_property("shared_memory_support") == 0


def test_saxpy_with_a_data_region(gpu):
    rng = np.random.default_rng(0)
    x, y = rng.random(1_000_003), rng.random(1_000_003)
    expected = 3.0 * x + y
    with acc.data(copyin=[x], copy=[y]):
        saxpy(3.0, x, y)
        assert isinstance(acc.deviceptr(y), cupy.ndarray)
    np.testing.assert_allclose(y, expected, rtol=1e-15)
    stats = acc.stats()
    assert (stats["h2d_count"], stats["d2h_count"], stats["launch_count"]) == (2, 1, 1)


def test_saxpy_implicit_copies(gpu):
    x, y = np.arange(1000.0), np.ones(1000)
    saxpy(2.0, x, y)  # present-or-copy: x copied in only, y in and out
    np.testing.assert_allclose(y, 2.0 * np.arange(1000.0) + 1.0)
    assert acc.present_table() == [] and acc.stats()["memory_in_use"] == 0


def _numpy_jacobi(u, unew):
    unew[1:-1, 1:-1] = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:])
    return float(np.abs(unew[1:-1, 1:-1] - u[1:-1, 1:-1]).max())


def test_jacobi_with_a_max_reduction(gpu):
    u = np.zeros((257, 131))
    u[0, :] = 1.0
    unew = u.copy()
    ref_u, ref_unew = u.copy(), u.copy()
    expected = []
    for _ in range(10):
        expected.append(_numpy_jacobi(ref_u, ref_unew))
        expected.append(_numpy_jacobi(ref_unew, ref_u))
    errors = []
    with acc.data(copy=[u], create=[unew]):
        acc.update(device=[unew])  # the boundary of unew
        for _ in range(10):
            errors.append(jacobi_step(u, unew))
            errors.append(jacobi_step(unew, u))
    np.testing.assert_allclose(u, ref_u, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(errors, expected, rtol=1e-12)
    assert all(isinstance(e, float) for e in errors)


def test_prepared_launches_repeat_exact_results(gpu, monkeypatch):
    """Repeated present-data calls launch through a plan (``compiler.cuda_plans``) where the
    compiler is numba-cuda; scalars change per call, two arrays swap, a queue switches."""
    from pyacc.compiler import cuda_plans

    monkeypatch.setattr(cuda_plans, "_plans", {})  # only this test's plans
    monkeypatch.setattr(cuda_plans, "_sightings", {})
    x, y = np.arange(4096.0), np.ones(4096)
    expected_x, expected_y = x.copy(), y.copy()
    with acc.data(copy=[x, y]):
        for step in range(12):
            a = 0.5 * step - 1.0
            if step % 3 == 2:  # on queue 1's stream: a configuration of its own
                saxpy(a, x, y, async_=1)
                acc.wait(1)
            else:
                saxpy(a, x, y)
            expected_y = a * expected_x + expected_y
            x, y, expected_x, expected_y = y, x, expected_y, expected_x
    np.testing.assert_allclose(y, expected_y, rtol=1e-14)
    np.testing.assert_allclose(x, expected_x, rtol=1e-14)
    prepared = [plan for plans in cuda_plans._plans.values() for plan in plans.values() if plan]
    if cuda_plans.enabled(cuda_compilers.chosen()):
        assert prepared, "no launch was prepared"
    else:  # numba-cuda-mlir, a numba-cuda other than 0.30, or PYACC_EXPRESS=0
        assert not prepared


def test_calls_made_again_from_c_are_exact_and_keep_the_queues_order(gpu):
    """Repeated calls of a driver that only launches (saxpy) are made again from C
    (``compiler/_relaunch.c.h``): synchronous ones with their wait, ``async_`` ones on
    their queue's stream in its order with its copies (OpenACC 3.3 §2.16.1); a scalar
    that changes at each call is never made again, and the results stay exact."""
    from pyacc._devices import runtime_of
    from pyacc.compiler import cuda_plans

    n = 1 << 16
    x, y = np.arange(n, dtype=np.float64), np.ones(n)
    expected = y.copy()
    with acc.data(copyin=[x], copy=[y]):
        for _ in range(20):
            saxpy(2.0, x, y)
            expected += 2.0 * x
        for k in range(40):
            if k == 20:  # on queue 1, between its kernels
                x[:] = np.arange(n, dtype=np.float64)[::-1].copy()
                acc.update_device(x, async_=1)
            saxpy(0.5, x, y, async_=1)
            expected += 0.5 * x
        acc.wait(1)
        for t in range(30):  # a time step: other facts at each call
            saxpy(float(t), x, y)
            expected += float(t) * x
        queue = runtime_of("cuda", 0).device.queues.made(1)
        relaunches = list(queue.relaunches.values())
    np.testing.assert_array_equal(y, expected)
    if express_lane() and cuda_plans._launch is not None and \
            cuda_plans.enabled(cuda_compilers.chosen()) and cuda_plans.driver_function("cuLaunchKernel"):
        assert relaunches and sum(relaunch.relaunched for relaunch in relaunches) >= 30


@acc.parallel_loop(async_=2, wait=1)
def saxpy_on_two_after_one(a, x, y):
    for i in range(x.shape[0]):
        y[i] = a * x[i] + y[i]


def test_a_wait_clause_joins_the_queues_on_the_gpu(gpu):
    """A pipelined program's regions (``async(2) wait(1)``): each call's kernel on queue 2
    starts after the copy just queued on queue 1 (OpenACC 3.3 §2.16.2), its repeats in the
    express lane (the join made by the lane's enqueue: queue 2's stream waits for an event
    of queue 1's), and the results are exact."""
    n = 1 << 22  # (copies long enough that a missing join would be seen)
    x, y = np.zeros(n), np.zeros(n)
    expected = y.copy()
    with acc.data(copyin=[x], copy=[y]):
        for k in range(30):
            x[:] = float(k)
            acc.update_device(x, async_=1)
            saxpy_on_two_after_one(1.0, x, y)
            expected += float(k)
            acc.wait(2)  # (x is written again by the host next)
        acc.wait()
    np.testing.assert_array_equal(y, expected)


GPU_STEP = 1.0


@acc.parallel_loop(if_="x.shape[0] > 1000")
def step_if_large(x, y):
    for i in range(x.shape[0]):
        y[i] = y[i] + GPU_STEP * x[i]


def test_module_level_names_if_expressions_and_call_waits_on_the_gpu(gpu):
    """Calls the express lane now takes on cuda too: a kernel reading a module-level scalar
    (read at each call, API.md §6.1), a region whose ``if`` clause is an expression (false:
    the host, on host data, §2.5.6), and ``async_=``/``wait=`` given at each call
    (§2.16.2); the results exact."""
    global GPU_STEP
    n = 1 << 20
    x, y = np.arange(n, dtype=np.float64), np.zeros(n)
    expected = y.copy()
    try:
        with acc.data(copyin=[x], copy=[y]):
            for k in range(40):
                GPU_STEP = float(k)
                step_if_large(x, y, async_=k % 2 + 1, wait=(k + 1) % 2 + 1)
                expected += k * x
            acc.wait()
            small = np.ones(8)
            step_if_large(small, small)  # on the host
            np.testing.assert_array_equal(small, 1.0 + 39.0)
    finally:
        GPU_STEP = 1.0
    np.testing.assert_array_equal(y, expected)


def test_an_express_plan_keeps_no_gpu_memory_alive(gpu):
    """Repeated calls take the express lane with the memo's own CuPy views
    (``Device.own_view``: ``UnownedMemory``), so the pool gets the blocks back when the
    data leaves, and data mapped again at the same addresses is read afresh."""
    try:
        import pyacc._fastcall  # noqa: F401 - whether the C express lane is built at all
    except ImportError as error:
        pytest.skip(f"the C express lane (pyacc._fastcall) is not built: {error}")
    if os.environ.get("PYACC_EXPRESS", "1").strip() in ("0", ""):
        pytest.skip("PYACC_EXPRESS=0 turns the C express lane off")
    assert express_lane(), "pyacc._fastcall is built but the express lane is off"
    pool = cupy.get_default_memory_pool()
    acc.wait()
    before = pool.used_bytes()
    x, y = np.arange(1 << 20, dtype=np.float64), np.ones(1 << 20)
    for round_ in range(2):
        with acc.data(copyin=[x], copy=[y]):
            for _ in range(5):
                saxpy(2.0, x, y)
            assert saxpy._express_plans >= 1
            assert pool.used_bytes() >= before + x.nbytes + y.nbytes
        acc.wait()
        assert pool.used_bytes() <= before
        np.testing.assert_allclose(y, 1.0 + 10 * (round_ + 1) * np.arange(1 << 20))


def test_dot_reduction(gpu):
    rng = np.random.default_rng(1)
    x, y = rng.random(2_000_001), rng.random(2_000_001)
    with acc.data(copyin=[x, y]):
        value = dot(x, y)
    assert value == pytest.approx(float(x @ y), rel=1e-11)


def test_async_reduction_handle(gpu):
    x = np.ones(100_000)
    with acc.data(copyin=[x]):
        handle = dot(x, x, async_=2)
        assert handle.result() == pytest.approx(100_000.0)


# == host_data and device arrays ===============================================================
def test_host_data_yields_cupy_arrays(gpu):
    a, b = np.arange(10.0), np.zeros((4, 5), order="F")
    with acc.data(copy=[a, b]):
        with acc.host_data(use_device=[a, b]) as (da, db):
            assert isinstance(da, cupy.ndarray) and isinstance(db, cupy.ndarray)
            assert da.shape == a.shape and db.shape == b.shape and db.flags.f_contiguous
            da *= 2  # CuPy on the device copy
            db[1, :] = 7.0
        with acc.host_data(use_device=a) as single:
            assert isinstance(single, cupy.ndarray)
        assert acc.hostptr(acc.deviceptr(a)) is not None
        np.testing.assert_array_equal(acc.hostptr(acc.deviceptr(a)), a)
    np.testing.assert_array_equal(a, 2 * np.arange(10.0))
    assert (b[1, :] == 7.0).all() and b.sum() == 35.0


def test_deviceptr_of_a_contained_view_is_a_cupy_view(gpu):
    a = np.arange(100.0)
    with acc.data(copyin=[a]):
        view = acc.deviceptr(a[10:20])
        assert isinstance(view, cupy.ndarray)
        np.testing.assert_array_equal(cupy.asnumpy(view), a[10:20])


def test_deviceptr_clause_with_a_cupy_array(gpu):
    d = cupy.arange(1000, dtype=np.float64)
    out = np.zeros(1000)
    gather_plus_one(d, out)
    np.testing.assert_array_equal(out, np.arange(1000.0) + 1.0)
    with acc.data(deviceptr=[d], copyout=[out]):
        gather_plus_one(d, out)
    np.testing.assert_array_equal(out, np.arange(1000.0) + 1.0)


def test_a_cupy_array_without_a_clause_is_device_data(gpu):
    d = cupy.arange(100, dtype=np.float64)
    add_one(d)  # a device array: passed as it is, nothing mapped
    cupy.cuda.runtime.deviceSynchronize()
    np.testing.assert_array_equal(cupy.asnumpy(d), np.arange(100.0) + 1.0)
    assert acc.present_table() == []


def test_deviceptr_clause_with_a_numba_cuda_array(gpu):
    d = cuda.to_device(np.arange(64.0))
    out = np.zeros(64)
    gather_plus_one(d, out)
    np.testing.assert_array_equal(out, np.arange(64.0) + 1.0)


def test_a_data_clause_refuses_a_cupy_array(gpu):
    with pytest.raises(acc.InvalidArgumentError):
        acc.copyin(cupy.zeros(4))


def test_map_data_and_memcpy_with_cupy_memory(gpu):
    a = np.arange(256.0)
    d = acc.malloc(a.shape, a.dtype)
    assert isinstance(d, cupy.ndarray)
    acc.memcpy_to_device(d, a)
    np.testing.assert_array_equal(cupy.asnumpy(d), a)
    acc.map_data(a, d)
    try:
        assert acc.is_present(a)
        add_one(a)  # present through the mapping: runs on d
        b = np.zeros_like(a)
        acc.memcpy_from_device(b, d)
        np.testing.assert_array_equal(b, np.arange(256.0) + 1.0)
        e = acc.malloc(a.shape, a.dtype)
        acc.memcpy_device(e, d)
        np.testing.assert_array_equal(cupy.asnumpy(e), np.arange(256.0) + 1.0)
        acc.free(e)
    finally:
        acc.unmap_data(a)
    acc.free(d)


def test_memcpy_accepts_a_cupy_array_from_the_pool(gpu):
    d = cupy.zeros(32)
    acc.memcpy_to_device(d, np.full(32, 3.0))
    host = np.zeros(32)
    acc.memcpy_from_device(host, d)
    assert (host == 3.0).all()


# == streams: user kernels on pyacc queues =====================================================
def test_get_cuda_stream_gives_cupy_streams(gpu):
    one = acc.get_cuda_stream(1)
    assert isinstance(one, cupy.cuda.Stream)
    assert acc.get_cuda_stream(1) is one
    assert acc.get_cuda_stream(2) is not one
    acc.set_default_async(1)
    assert acc.get_cuda_stream(acc.async_noval) is one
    assert acc.get_cuda_stream(acc.async_sync) is not None


def test_a_cupy_kernel_on_a_pyacc_queue_is_ordered_with_its_work(gpu):
    n = 8_000_000  # big enough that a missing dependency shows
    a = np.zeros(n)
    triple = cupy.ElementwiseKernel("float64 x", "float64 y", "y = 3.0 * x", "triple")
    stream = acc.get_cuda_stream(1)
    with acc.data(create=[a]):
        for round_ in range(3):
            a[:] = round_ + 1.0
            acc.update(device=[a], async_=1)  # on queue 1
            add_one(a, async_=1)  # pyacc kernel on queue 1
            with stream:  # CuPy on the same stream, after them
                device = acc.deviceptr(a)
                triple(device, device)
            acc.update(self=[a], async_=1)  # back to the host after the CuPy kernel
            acc.wait(1)
            assert (a == 3.0 * (round_ + 2.0)).all()


def test_a_numba_cuda_kernel_on_an_external_stream(gpu):
    @cuda.jit
    def double(x):
        i = cuda.grid(1)
        if i < x.shape[0]:
            x[i] = 2.0 * x[i]

    n = 4_000_000
    a = np.ones(n)
    with acc.data(copyin=[a]):
        stream = acc.get_cuda_stream(3)
        numba_stream = cuda.external_stream(stream.ptr)
        add_one(a, async_=3)
        device = acc.deviceptr(a)
        double[(n + 255) // 256, 256, numba_stream](device)
        add_one(a, async_=3)
        acc.update(self=[a], async_=3)
        acc.wait(3)
    assert (a == 5.0).all()


def test_wait_async_orders_two_queues(gpu):
    n = 4_000_000
    a = np.zeros(n)
    with acc.data(copy=[a]):
        for _ in range(5):
            add_one(a, async_=1)
        acc.wait_async(1, 2)  # queue 2 waits for queue 1, the host does not
        with acc.get_cuda_stream(2):
            device = acc.deviceptr(a)
            device *= 10.0
        acc.wait(2)
    assert (a == 50.0).all()


def test_async_exit_frees_after_the_queue(gpu):
    a = np.ones(1_000_000)
    acc.enter_data(copyin=[a], async_=1)
    add_one(a, async_=1)
    acc.exit_data(copyout=[a], async_=1)
    assert not acc.is_present(a)  # absent at once
    acc.wait(1)
    assert (a == 2.0).all()
    assert acc.stats()["memory_in_use"] == 0


# == strided transfers ==========================================================================
def test_strided_column_update_moves_only_the_column_in_one_transfer(gpu):
    n = 2048
    a = np.zeros((n, n))
    with acc.data(copy=[a]):
        with acc.host_data(use_device=a) as device:
            device[:, 5] = cupy.arange(n, dtype=np.float64)
            device[:, 6] = -1.0  # device only
        a[:, 4] = 9.0  # host only
        acc.reset_stats()
        acc.update(self=[a[:, 5]])
        stats = acc.stats()
        assert (stats["d2h_count"], stats["h2d_count"]) == (1, 0)
        assert stats["d2h_bytes"] == n * 8
        np.testing.assert_array_equal(a[:, 5], np.arange(n))
        assert (a[:, 4] == 9.0).all() and not a[:, 6].any()  # neighbours untouched

        a[:, 5] = -np.arange(n)
        acc.reset_stats()
        acc.update(device=[a[:, 5]])
        stats = acc.stats()
        assert (stats["h2d_count"], stats["d2h_count"]) == (1, 0)
        device = cupy.asnumpy(acc.deviceptr(a))
        np.testing.assert_array_equal(device[:, 5], -np.arange(n))
        assert not device[:, 4].any() and (device[:, 6] == -1.0).all()
        a[:, 6] = 0.0  # the copy-out brings the device's -1 back
    assert (a[:, 6] == -1.0).all()


def test_strided_row_block_and_async_update(gpu):
    a = np.arange(64.0 * 64).reshape(64, 64)
    with acc.data(copyin=[a]):
        a[::2, 10:20] = 0.5
        acc.update(device=[a[::2, 10:20]], async_=1)
        acc.wait(1)
        device = cupy.asnumpy(acc.deviceptr(a))
        np.testing.assert_array_equal(device, a)


def test_a_strided_view_of_present_data_in_a_kernel(gpu):
    a = np.ones((300, 8))
    with acc.data(copy=[a]):
        scale(a[:, 3], 4.0)  # the matching strided device view, nothing copied
        assert acc.stats()["h2d_count"] == 1
    assert (a[:, 3] == 4.0).all() and a.sum() == 300 * 7 + 300 * 4.0


# == errors =====================================================================================
def test_deviceptr_refuses_host_memory(gpu):
    with pytest.raises(acc.InvalidArgumentError):
        gather_plus_one(np.arange(4.0), np.zeros(4))  # host memory is not device memory


def _cases():
    """tests/cuda/cases.py (the kernels the simulator and PTX tests use), imported as a
    module of the tests package: executed from its file under a name ``sys.modules``
    lacks, its dataclasses fail on Python 3.12 (``dataclasses`` looks their module up)."""
    import importlib

    return importlib.import_module("tests.cuda.cases")


def test_arrays_a_region_makes_on_an_async_queue(gpu):
    """miniWeather's ``flux_x`` (private arrays the region makes) and a region whose
    loops share an array it makes, on queue 1: on the H100 the first failed with
    "NumPy only supports stream=None" (issue 27 item 2)."""
    cases = _cases()
    flux_x = acc.parallel_loop(private="stencil vals", async_=1)(
        cases.private_arrays_made_in_the_region)
    shared = acc.kernels(async_=1)(cases.array_made_in_the_region)
    state = np.sin(np.linspace(0.0, 3.0, 100_003))
    flux, x, y = np.zeros(100_000), np.linspace(0.0, 1.0, 4000), np.zeros(4000)
    with acc.data(copyin=[state, x], copyout=[flux, y]):
        flux_x(state, flux, 0.25)
        shared(x, y)
        acc.wait(1)
    expected_flux, expected_y = np.zeros_like(flux), np.zeros_like(y)
    cases.private_arrays_made_in_the_region(state, expected_flux, 0.25)
    cases.array_made_in_the_region(x, expected_y)
    np.testing.assert_allclose(flux, expected_flux, rtol=1e-12)
    np.testing.assert_allclose(y, expected_y, rtol=1e-12)


# == page-locked mappings (API.md §12, PYACC_PIN) ==================================================
def _page_locked(array) -> bool:
    """Whether the driver sees the pages inside ``array`` as page-locked host memory."""
    page = 4096
    inside = -(-array.ctypes.data // page) * page
    try:
        attributes = cupy.cuda.runtime.pointerGetAttributes(inside)
    except cupy.cuda.runtime.CUDARuntimeError:
        return False
    return attributes.type == 1  # cudaMemoryTypeHost: page-locked (registered or allocated)


def test_a_large_mapping_is_page_locked_while_mapped_and_its_async_copies_are_exact(gpu):
    a = np.arange(1 << 18, dtype=np.float64)  # 2 MiB, above the default threshold
    acc.enter_data(copyin=[a])
    assert _page_locked(a)
    a *= 3.0
    acc.update(device=[a], async_=1)
    acc.wait(1)
    d = acc.deviceptr(a)
    assert cupy.allclose(d, cupy.asarray(np.arange(1 << 18) * 3.0))
    d *= 2.0
    acc.update(self=[a], async_=1)
    acc.wait(1)
    assert np.array_equal(a, np.arange(1 << 18) * 6.0)
    acc.exit_data(delete=[a])
    assert not _page_locked(a)


def test_pin_zero_leaves_mappings_pageable(gpu, monkeypatch):
    monkeypatch.setenv("PYACC_PIN", "0")
    acc.shutdown("cuda")  # the setting is read when the device is made or reset
    acc.set_device_num(0, "cuda")
    a = np.ones(1 << 18)
    acc.enter_data(copyin=[a])
    assert not _page_locked(a)
    acc.exit_data(delete=[a])


def test_an_array_dropped_after_an_async_delete_stays_registered_until_unregistered(gpu):
    """Registered memory must be unregistered before it is freed. An async ``delete``
    lets the program drop the array at once while the unregistration waits for the
    queue; freed, numpy gave its pages back and the next array of that size, at the same
    addresses, met the stale registration: its copy-in was one DMA through the old pinned
    pages (``cuda_pins``: the registration keeps the array alive)."""
    n = 1 << 22  # 32 MiB: numpy maps it on its own pages and unmaps them when freed
    busy = np.zeros(1 << 25)
    with acc.data(copy=[busy]):
        for value in (1.0, 2.0, 3.0):
            a = np.full(n, -value)
            acc.enter_data(copyin=[a])
            for _ in range(20):  # queue 1 busy well past the delete below
                add_one(busy, async_=1)
            acc.exit_data(delete=[a], async_=1)
            del a
            b = np.full(n, value)
            acc.enter_data(copyin=[b], async_=1)
            acc.wait(1)
            assert bool((acc.deviceptr(b) == value).all())
            acc.exit_data(delete=[b])
    assert (busy == 60.0).all()


@pytest.mark.parametrize("queue", [None, 1])
def test_staged_transfers_in_pieces_are_exact(gpu, monkeypatch, queue):
    """A strided host side is staged in CHUNK-byte pieces through two pinned buffers
    (mapping/devices/cuda_staging.py); on an async queue its host copies run on the
    queue's staging stream: the data must be exact on a real GPU too."""
    from pyacc.mapping.devices import cuda_staging

    monkeypatch.setattr(cuda_staging, "CHUNK", 64 << 10)  # 16 pieces per column below
    monkeypatch.setattr(cuda_staging, "ASYNC_CHUNK", 64 << 10)
    a = np.zeros((1 << 17, 2))
    acc.enter_data(copyin=[a])
    try:
        column = a[:, 1]
        column[...] = np.arange(column.size)
        acc.update(device=[column], async_=queue)
        acc.wait()
        d = acc.deviceptr(a)
        assert np.array_equal(cupy.asnumpy(d[:, 1]), np.arange(column.size)) and not cupy.asnumpy(d[:, 0]).any()
        d[:, 1] *= 3.0
        acc.update(self=[column], async_=queue)
        acc.wait()
        assert np.array_equal(column, np.arange(column.size) * 3.0) and not a[:, 0].any()
    finally:
        acc.exit_data(delete=[a])


# == tiled nests (2-D grids, ``compiler/cuda_target.py``) at sizes that fill the GPU =============
@acc.parallel_loop(collapse=2, present=["a", "b", "c"])
def tiled_matmul(a, b, c):
    for i in range(c.shape[0]):
        for j in range(c.shape[1]):
            total = 0.0
            for k in range(a.shape[1]):
                total += a[i, k] * b[k, j]
            c[i, j] = total


@acc.parallel_loop(collapse=2, reduction="+:total")
def components(v, scale):
    """Three columns and millions of rows: 4-wide tiles, more row blocks than a grid's y
    limit (65,535), so the rows' grid-stride loop runs."""
    total = 0.0
    for i in range(v.shape[0]):
        for k in range(v.shape[1]):
            v[i, k] = v[i, k] * scale + k
            total += v[i, k]
    return total


@acc.parallel_loop(collapse=2, private=["stencil"], reduction="max:top")
def fluxes(state, flux, stencil):
    """miniWeather's shape: a private array per thread in a collapsed nest, with a reduction."""
    top = 0.0
    for k in range(flux.shape[0]):
        for i in range(flux.shape[1]):
            for s in range(4):
                stencil[s] = state[k, i + s]
            flux[k, i] = (-stencil[0] + 7.0 * stencil[1] + 7.0 * stencil[2] - stencil[3]) / 12.0
            top = max(top, flux[k, i])
    return top


def test_a_tiled_matmul_matches_numpy(gpu):
    rng = np.random.default_rng(5)
    a, b = rng.random((300, 70)), rng.random((70, 517))
    c = np.zeros((300, 517))
    with acc.data(copyin=[a, b], copyout=[c]):
        tiled_matmul(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-12)


def test_a_tiled_nest_of_few_columns_past_the_grids_y_limit(gpu):
    v = np.ones((5_000_000, 3))
    total = components(v, 2.0)
    assert np.array_equal(v[:, 0], np.full(5_000_000, 2.0)) and (v[:, 2] == 4.0).all()
    assert total == 5_000_000 * (2.0 + 3.0 + 4.0)


def test_a_tiled_nest_with_a_private_array_and_a_reduction_on_a_queue(gpu):
    state = np.random.default_rng(6).random((130, 1027))
    flux = np.zeros((130, 1024))
    stencil = np.zeros(4)
    with acc.data(copyin=[state], copyout=[flux]):
        top = fluxes(state, flux, stencil, async_=2).result()
    expected = (-state[:, :-3] + 7.0 * state[:, 1:-2] + 7.0 * state[:, 2:-1] - state[:, 3:]) / 12.0
    np.testing.assert_allclose(flux, expected, rtol=1e-12)  # (the GPU may fuse to FMAs)
    assert top == pytest.approx(expected.max(), rel=1e-12)


# == record arrays, contexts, streams (GPU-only faults of an audit against CuPy 14 / numba-cuda 0.30)
RECORD = np.dtype([("energy", "f8"), ("count", "i4"), ("v", "f8", (3,))], align=True)


@acc.parallel_loop
def bump_records(g):
    for i in range(g.shape[0]):
        g[i].energy = 2.0 * g[i].energy
        g[i].count += 1
        g[i].v[2] = g[i].v[1] + g[i].count


def test_record_arrays_in_kernels(gpu):
    """CuPy arrays of a record dtype reach kernels as the compiler's own device arrays
    (``cuda_runtime._own_record_array``): numba-cuda typed them from '|V40' and failed
    (``NumbaNotImplementedError``). Contiguous and a strided view, repeated calls."""
    n = 100_003
    g = np.zeros(n, RECORD)
    g["energy"], g["v"][:, 1] = np.arange(float(n)), 3.0
    with acc.data(copy=g):
        for _ in range(3):
            bump_records(g)
        bump_records(g[1::2])
    twice = np.arange(n) % 2  # the odd records had one call more
    np.testing.assert_array_equal(g["energy"], np.arange(float(n)) * 2.0 ** (3 + twice))
    np.testing.assert_array_equal(g["count"], 3 + twice)
    np.testing.assert_array_equal(g["v"][:, 2], 6.0 + twice)


def test_record_arrays_in_kernels_of_the_other_compiler():
    """The same with the compiler pyacc did not choose here, when installed (a process of
    its own: the choice is made once per process)."""
    other = next(c for c in cuda_compilers.COMPILERS.values() if c is not cuda_compilers.chosen())
    if not other.installed():
        pytest.skip(f"{other.distribution} is not installed")
    environment = dict(os.environ, **{cuda_compilers.ENVIRONMENT: other.name})
    test = f"{__file__}::test_record_arrays_in_kernels"
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test],
                         capture_output=True, text=True, env=environment, timeout=540)
    assert out.returncode == 0 and "1 passed" in out.stdout, out.stdout[-4000:] + out.stderr[-2000:]


def test_device_memory_is_recognised_from_a_thread_without_a_context(gpu):
    """``cudaPointerGetAttributes`` needs a current context (cupy#3991), which a thread
    that has not touched CUDA lacks: the backend makes its GPU's current for the query."""
    memory, host = cupy.empty(64), np.zeros(64)
    answers = []
    thread = threading.Thread(target=lambda: answers.extend(
        CupyBackend(0).is_device_memory(address) for address in (memory.data.ptr, host.ctypes.data)))
    thread.start()
    thread.join(60)
    assert answers == [True, False]


def test_each_gpu_launches_its_own_functions_after_shutdowns(gpu):
    """``acc.shutdown`` destroys the queues' streams and the driver hands their handles out
    again, to another GPU's streams too: a launch on GPU 1 must never go through a plan
    that keeps GPU 0's function handle (``cuda_runtime.stream``: per device and handle)."""
    if cupy.cuda.runtime.getDeviceCount() < 2:
        pytest.skip("needs two GPUs")
    x = np.arange(1000.0)
    for number in (0, 1, 0, 1):
        acc.shutdown("cuda")
        acc.set_device_num(number, "cuda")
        y = np.ones(1000)
        with acc.data(copyin=x, copy=y):
            for _ in range(4):
                saxpy(2.0, x, y)
                saxpy(1.0, x, y, async_=1)  # queue 1's stream: another handle
                acc.wait(1)
        np.testing.assert_allclose(y, 1.0 + 12.0 * x)
    acc.set_device_num(0, "cuda")


def test_a_second_process_loads_the_kernels_the_first_compiled(gpu):
    """Kernels compiled once per machine (``cuda_binaries``): ``bench_cuda.py``'s cold
    start, one process compiling into an empty kernel cache and saving its GPU kernels'
    binaries, the next loading every one of them (each child checks its results)."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks"))
    import bench_cuda

    cold = bench_cuda.cold_start("cuda", 1)
    assert cold["binaries_saved"] >= 2
    assert cold["binaries_loaded"] == cold["binaries_saved"]
