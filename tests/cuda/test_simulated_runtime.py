"""pyacc end to end on the ``cuda`` device type without a GPU: the runtime, the cuda
device (memory and streams of ``mapping.devices.cuda_fake.FakeCudaBackend``, separate from host
memory like a GPU's) and the cuda target's kernels (in Numba's CUDA simulator). Collected
only under NUMBA_ENABLE_CUDASIM=1; ``test_simulator_run.py`` also sets
PYACC_TESTING_FAKE_CUDA=1 for this run."""
from __future__ import annotations

import weakref

import numpy as np
import pytest

import pyacc as acc
from pyacc._outcome import AsyncResult
from tests.launcher_calls import slow_calls
from cases import private_arrays_made_in_the_region

pytestmark = pytest.mark.skipif(acc.get_num_devices("cuda") == 0,
                                reason="needs PYACC_TESTING_FAKE_CUDA=1")


@pytest.fixture(autouse=True)
def on_cuda():
    acc.shutdown("cuda")
    acc.set_device_type("cuda")
    acc.reset_stats()
    yield
    acc.wait()
    acc.shutdown("cuda")


@acc.parallel_loop
def saxpy(a, x, y):
    for i in range(x.shape[0]):
        y[i] = a * x[i] + y[i]


@acc.parallel_loop(reduction="+:s")
def dot(x, y):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] * y[i]
    return s


@acc.parallel_loop(collapse=2, reduction="max:err")
def jacobi_step(u, unew):
    err = 0.0
    for i in range(1, u.shape[0] - 1):
        for j in range(1, u.shape[1] - 1):
            unew[i, j] = 0.25 * (u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1])
            err = max(err, abs(unew[i, j] - u[i, j]))
    return err


@acc.parallel_loop(collapse=2)
def add_column_index(a):
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            a[i, j] += j


def test_cuda_is_the_default_device_type_when_usable():
    assert acc.get_num_devices("cuda") == 1
    assert acc.get_device_type() == "cuda"


def test_data_region_keeps_arrays_on_the_device():
    x, y = np.arange(40.0), np.ones(40)
    with acc.data(copyin=x, copy=y):
        for _ in range(3):
            saxpy(2.0, x, y)
        assert (y == 1).all()  # the host copy is untouched until the region ends
    np.testing.assert_allclose(y, 1 + 6 * np.arange(40.0))
    stats = acc.stats()
    assert (stats["h2d_count"], stats["d2h_count"], stats["launch_count"]) == (2, 1, 3)
    assert stats["memory_in_use"] == 0


def test_reduction_result_comes_back_to_the_host():
    x = np.arange(30.0)
    with acc.data(copyin=x):
        assert dot(x, x) == pytest.approx((x * x).sum())


def test_jacobi_converges_like_numpy():
    u = np.zeros((10, 12))
    u[0] = 1.0
    unew = u.copy()
    reference = u.copy()
    with acc.data(copy=u, copyin=unew):
        for _ in range(4):
            jacobi_step(u, unew)
            err = jacobi_step(unew, u)
    for _ in range(8):
        new = reference.copy()
        new[1:-1, 1:-1] = 0.25 * (reference[:-2, 1:-1] + reference[2:, 1:-1]
                                  + reference[1:-1, :-2] + reference[1:-1, 2:])
        previous, reference = reference, new
    np.testing.assert_allclose(u, reference)
    assert err == pytest.approx(np.abs(reference - previous).max())


def test_update_self_of_a_column_is_one_packed_transfer():
    a = np.zeros((8, 6))
    acc.enter_data(copyin=a)
    add_column_index(a)
    acc.reset_stats()
    acc.update(self=a[:, 3])
    stats = acc.stats()
    assert (stats["d2h_count"], stats["d2h_bytes"]) == (1, 8 * 8)
    expected = np.zeros((8, 6))
    expected[:, 3] = 3
    np.testing.assert_array_equal(a, expected)  # only the column came back
    acc.exit_data(delete=a)


def test_async_queue_runs_in_order_and_wait_completes_it():
    x, y = np.arange(20.0), np.zeros(20)
    acc.enter_data(copyin=[x, y])
    saxpy(1.0, x, y, async_=1)
    saxpy(1.0, x, y, async_=1)
    acc.update(self=y, async_=1)
    acc.wait(1)
    np.testing.assert_allclose(y, 2 * x)
    acc.exit_data(delete=[x, y])
    assert acc.stats()["memory_in_use"] == 0


def test_wait_async_orders_two_queues():
    x, y = np.arange(16.0), np.zeros(16)
    acc.enter_data(copyin=[x, y])
    saxpy(1.0, x, y, async_=1)
    acc.wait_async(1, 2)
    acc.update(self=y, async_=2)
    acc.wait(2)
    np.testing.assert_allclose(y, x)
    acc.exit_data(delete=[x, y])


def test_host_data_gives_device_arrays_and_the_queue_has_a_stream():
    x = np.arange(8.0)
    with acc.data(copyin=x):
        with acc.host_data(use_device=x) as dx:
            assert not isinstance(dx, np.ndarray) and hasattr(dx, "__cuda_array_interface__")
            assert np.shares_memory(acc.hostptr(dx), x)
            assert acc.is_present(x)
    assert acc.get_cuda_stream(1) is not None
    assert acc.get_cuda_stream(1) is acc.get_cuda_stream(1)


@acc.parallel
def first_and_scale(a, out):
    first = a[0] + a[1]
    for i in acc.loop(range(out.shape[0])):
        out[i] = a[i] * first
    out[0] = first
    return first


def test_sequential_code_between_loops_runs_on_the_device():
    a, out = np.arange(1.0, 11.0), np.zeros(10)
    with acc.data(copyin=a, copyout=out):
        assert first_and_scale(a, out) == 3.0
    expected = np.arange(1.0, 11.0) * 3.0
    expected[0] = 3.0
    np.testing.assert_allclose(out, expected)


#: miniWeather's ``flux_x`` shape (tests/cuda/cases.py), on queue 1
flux_x = acc.parallel_loop(private="stencil vals", async_=1)(private_arrays_made_in_the_region)


def test_private_arrays_of_a_kernel_on_an_async_queue():
    """miniWeather's ``flux_x`` on queue 1 (it failed on an H100 with "NumPy only supports
    stream=None": the region's private arrays reached the GPU kernel as host arrays)."""
    state = np.sin(np.linspace(0.0, 3.0, 103))
    flux = np.zeros(100)
    with acc.data(copyin=[state], copyout=[flux]):
        flux_x(state, flux, 0.25)
        acc.wait(1)
    s = np.lib.stride_tricks.sliding_window_view(state, 4)[:100]
    first = -s[:, 0] / 12 + 7 * s[:, 1] / 12 + 7 * s[:, 2] / 12 - s[:, 3] / 12
    third = -s[:, 0] + 3 * s[:, 1] - 3 * s[:, 2] + s[:, 3]
    np.testing.assert_allclose(flux, first - 0.25 * third, rtol=1e-12)


@acc.parallel_loop(no_create="b")
def adds_if_present(a, b, use):
    for i in range(a.shape[0]):
        a[i] = 1.0
        if use:
            a[i] += b[i]


def test_no_create_of_absent_data_gives_the_kernel_an_empty_device_array():
    """OpenACC 3.3 §2.7.10: no_create of absent data maps nothing; a GPU kernel takes no
    host array, so it gets an empty device array of the same dtype and rank (reading it
    is out of bounds, as the host address would be); present data is used as usual."""
    a, b = np.zeros(4), np.ones(4)
    adds_if_present(a, b, False)
    np.testing.assert_array_equal(a, 1.0)
    stats = acc.stats()
    assert (stats["alloc_count"], stats["h2d_count"]) == (1, 1)  # a only: b is not mapped
    with acc.data(copyin=[b]):
        adds_if_present(a, b, True)
    np.testing.assert_array_equal(a, 2.0)


@acc.parallel_loop
def adds_one(v):
    for i in range(v.shape[0]):
        v[i] += 1.0


def test_strided_view_of_absent_data_goes_through_a_contiguous_copy():
    """A non-contiguous view of absent data without a clause: copied in and back through a
    contiguous device copy (its implicit copy, OpenACC 3.3 §2.6.2), as on host."""
    u = np.zeros((5, 4))
    adds_one(u[:, 1])
    adds_one(u.ravel()[::-3], async_=1)
    acc.wait(1)
    expected = np.zeros((5, 4))
    expected[:, 1] += 1
    expected.ravel()[::-3] += 1
    np.testing.assert_array_equal(u, expected)


def test_async_calls_of_present_data_are_enqueued_by_the_express_lane(monkeypatch):
    """On cuda an ``async_`` call that repeats a replay is handed to its queue by the
    express lane (``ExpressPlan.enqueue``): in queue order, counted, its ``AsyncResult``
    waited as the Python launcher's; a queue not made yet (making one takes a stream,
    and may fail), a negative value (``acc.async_noval``) and calls with other
    keywords stay with the Python launcher."""
    x, y = np.arange(8.0), np.ones(8)
    slow = slow_calls(saxpy, monkeypatch)
    with acc.data(copyin=[x], copy=[y]):
        saxpy(1.0, x, y)
        saxpy(1.0, x, y)  # a join, then a replay that arms the plan
        handles = [saxpy(2.0, x, y, async_=3) for _ in range(4)]
        assert len(slow) == 3  # the first makes queue 3, in Python
        assert all(isinstance(handle, AsyncResult) for handle in handles)
        saxpy(0.5, x, y, async_=acc.async_noval)  # the launcher resolves the default queue
        saxpy(0.5, x, y, async_=3, wait=[3])
        assert len(slow) == 5
        assert [handle.result() for handle in handles] == [None] * 4  # (each waits)
        acc.wait()
        assert acc.async_test(3)
    np.testing.assert_allclose(y, 1.0 + (2 + 8 + 1) * np.arange(8.0))
    assert acc.stats()["launch_count"] == 8


def test_an_async_plan_follows_its_arrays_to_a_new_mapping(monkeypatch):
    """A data region that maps the arrays anew gives them new device memory: the plan of
    an async call follows them there (``CallPlan.follow``) and its kernel is enqueued
    from C with the new mapping's device arrays."""
    x, y = np.arange(8.0), np.ones(8)
    slow = slow_calls(saxpy, monkeypatch)
    with acc.data(copyin=[x], copy=[y]):
        for _ in range(3):  # a join (queue 2 made), a replay that arms the plan, one enqueued
            saxpy(1.0, x, y, async_=2)
        acc.wait(2)
        before = acc.deviceptr(y).__cuda_array_interface__["data"][0]
    spacers = [np.zeros(8), np.zeros(8)]
    acc.enter_data(create=spacers)  # x's and y's blocks taken: their next mappings lie elsewhere
    slow.clear()
    with acc.data(copyin=[x], copy=[y]):
        assert acc.deviceptr(y).__cuda_array_interface__["data"][0] != before
        handle = saxpy(2.0, x, y, async_=2)
        acc.wait(2)
        assert isinstance(handle, AsyncResult) and len(slow) == 0
    acc.exit_data(delete=spacers)
    np.testing.assert_allclose(y, 1.0 + 5 * np.arange(8.0))


def test_an_enqueue_that_raises_leaves_the_table_as_it_was(monkeypatch):
    """A launch that fails while the express lane enqueues it raises at the call, as from
    the Python launcher; the table lock is let go and no count is left behind."""
    from pyacc._devices import runtime_of

    x, y = np.arange(8.0), np.ones(8)
    backend = runtime_of("cuda", 0).device.backend
    slow = slow_calls(saxpy, monkeypatch)
    with acc.data(copyin=[x], copy=[y]):
        saxpy(1.0, x, y)
        saxpy(1.0, x, y)  # a join, then a replay that arms the plan
        saxpy(1.0, x, y, async_=2)
        saxpy(1.0, x, y, async_=2)
        acc.wait(2)
        with monkeypatch.context() as patched:
            patched.setattr(backend, "launch", lambda stream, fn: (_ for _ in ()).throw(RuntimeError("no launch")))
            with pytest.raises(RuntimeError, match="no launch"):
                saxpy(1.0, x, y, async_=2)
        saxpy(1.0, x, y, async_=2)
        acc.wait(2)
        assert acc.is_present(y) and len(slow) == 2  # every async call was the lane's
    assert not acc.is_present(y) and acc.stats()["memory_in_use"] == 0
    np.testing.assert_allclose(y, 1.0 + 5 * np.arange(8.0))  # the failed call added nothing


@acc.kernels
def bumped(x):
    for i in range(x.shape[0]):
        x[i] += 1.0
    return x


def test_a_device_array_a_region_returns_is_the_programs_to_keep():
    """A kernel that may return its arrays (``KernelInfo.may_return_arrays``) is lent no
    device array the replay keeps (``Device.own_view``, which holds no memory): what it
    returns from every call holds its block, as ``acc.deviceptr``'s does, after the data
    left."""
    x = np.zeros(8)
    with acc.data(copy=[x]):
        returned = [bumped(x) for _ in range(4)]
    assert acc.stats()["memory_in_use"] == 0
    assert [array.get()[0] for array in returned] == [4.0] * 4
    np.testing.assert_array_equal(x, 4.0)


def test_an_express_plan_keeps_no_cuda_memory_alive(monkeypatch):
    """Repeated cuda calls take the express lane, whose plan holds its device arrays
    strongly; they are the memo's own views (``Device.own_view``), which keep no
    allocation alive (a CuPy view would keep the block of data that left for as long as
    the region lives), so the memory goes back when the data leaves."""
    from pyacc._devices import runtime_of

    x, y = np.arange(8.0), np.ones(8)
    device = runtime_of("cuda", 0).device
    slow = slow_calls(saxpy, monkeypatch)
    with acc.data(copyin=[x], copy=[y]):
        for _ in range(5):
            saxpy(2.0, x, y)
        assert (saxpy._express_plans, len(slow)) == (1, 2)  # a join, a replay, then the lane
        addresses = [acc.deviceptr(a).__cuda_array_interface__["data"][0] for a in (x, y)]
        blocks = [weakref.ref(device.backend._buffer_at(address)[1]) for address in addresses]
        assert all(block() is not None for block in blocks)
    assert acc.stats()["memory_in_use"] == 0
    assert [block() for block in blocks] == [None, None]  # the backend's buffers are gone
    np.testing.assert_allclose(y, 1.0 + 5 * 2.0 * np.arange(8.0))
    assert acc.stats()["launch_count"] == 5
    with acc.data(copyin=[x], copy=[y]):  # new blocks: the plan no longer holds, nothing stale is read
        saxpy(1.0, x, y)
    np.testing.assert_allclose(y, 1.0 + 11 * np.arange(8.0))


RECORD = np.dtype([("energy", "f8"), ("count", "i4")], align=True)  # 16 bytes: '|V16'


@acc.parallel_loop
def bump_records(g):
    for i in range(g.shape[0]):
        g[i].energy = 2.0 * g[i].energy
        g[i].count += 1


def test_a_record_array_reaches_the_kernel_as_the_compilers_own_device_array():
    """The cuda device's arrays of a record dtype (CuPy's, here the fake's) cannot be
    typed by numba-cuda (DLPack refuses void dtypes; ``typestr`` '|V16' is no type):
    ``cuda_runtime`` hands the kernel the compiler's own device array over their memory,
    on every call (the express lane's too)."""
    g = np.zeros(30, RECORD)
    g["energy"] = np.arange(30.0)
    with acc.data(copy=g):
        for _ in range(4):
            bump_records(g)
    np.testing.assert_array_equal(g["energy"], 16 * np.arange(30.0))
    np.testing.assert_array_equal(g["count"], 4)


def test_the_simulated_launch_refuses_a_record_array_as_numba_cuda_does():
    """What hid the fault above: the simulated launch took the fake's record arrays as
    they are; it now refuses one, as numba-cuda refuses a CuPy array of a record dtype."""
    from numba.cuda.core.errors import NumbaNotImplementedError

    from pyacc.compiler import cuda_runtime

    g = np.zeros(4, RECORD)
    with acc.data(copy=g):
        with acc.host_data(use_device=g) as device_g:
            with pytest.raises(NumbaNotImplementedError, match=r"\|V16"):
                cuda_runtime._simulated_launch(None, 1, 1, (device_g,))


def test_init_on_cuda_prepares_the_loader_of_saved_kernels(monkeypatch):
    """OpenACC 3.3 §3.2.7: ``acc.init`` isolates initialisation costs; on cuda these include
    importing the loader of saved GPU kernels (``cuda_binaries.prepare``: what it imports
    is ``tests/cuda/test_cuda_binaries.py``'s), which a first compute call would pay."""
    from pyacc.compiler import cuda_binaries

    prepared = []
    monkeypatch.setattr(cuda_binaries, "prepare", lambda: prepared.append(acc.get_device_type()))
    acc.init("host")
    acc.init("cuda")
    acc.init()
    assert prepared == ["cuda", "cuda"]


def test_the_express_lane_calls_a_relaunch_for_a_driver_that_only_launches(monkeypatch):
    """The express lane's synchronous launcher of a driver that only launches
    (``cuda_relaunch``) is a ``Relaunch``, which here (the simulator's launches are never
    prepared, so never recorded) hands every call to ``SyncKernel``: the results are the
    launcher's; a driver with a reduction keeps ``SyncKernel``."""
    import ctypes

    from pyacc.compiler import cuda_plans, cuda_relaunch

    _launch = pytest.importorskip("pyacc.compiler._launch", reason="the C launch is not built")
    wait = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)(lambda stream: 0)
    made = []

    def relaunching(kernel, on_failure):
        made.append(_launch.Relaunch(kernel, cuda_plans.recorded, np.ndarray, cuda_plans.NUMBERS,
                                   on_failure, cuda_plans.driver_error,
                                   ctypes.cast(wait, ctypes.c_void_p).value))
        return made[-1]
    monkeypatch.setattr(cuda_relaunch, "relaunching", relaunching)

    @acc.parallel_loop
    def axpy(a, x, y):
        for i in range(x.shape[0]):
            y[i] = a * x[i] + y[i]

    @acc.parallel_loop(reduction="+:s")
    def inner(x, y):
        s = 0.0
        for i in range(x.shape[0]):
            s += x[i] * y[i]
        return s
    x, y = np.arange(8.0), np.ones(8)
    with acc.data(copyin=[x], copy=[y]):
        for k in range(1, 6):
            axpy(2.0, x, y)  # (the device's y: 1 + 2k x; the host's is copied out at the end)
            assert inner(x, y) == pytest.approx(np.dot(x, 1.0 + 2.0 * k * x))
        assert axpy._express_plans == 1 and inner._express_plans == 1
        [relaunch] = made  # axpy's; inner's driver reads its partials back
        assert (relaunch.kept, relaunch.relaunched) == (0, 0)
    np.testing.assert_allclose(y, 1.0 + 5 * 2.0 * np.arange(8.0))
    assert acc.stats()["launch_count"] == 10


class _Remade:
    """A ``Relaunch`` of an asynchronous queue standing in (the simulator's launches are
    never prepared, so a real one keeps nothing): once the queue has run the driver (its
    ``Pending``), ``again`` enqueues the driver's launches on the stream it ran on, as
    the kept launches would be."""

    gave_up = False  # (a Relaunch's: whether calls still try ``again``)

    def __init__(self, kernel, backend):
        self.kernel, self.backend, self.stream, self.made = kernel, backend, None, 0

    def __call__(self, *args):
        self.stream = self.backend.current_stream()
        return self.kernel(*args)

    def again(self, *args):
        if self.stream is None:
            return False
        self.made += 1
        self.backend.launch(self.stream, lambda: self.kernel(*args))
        return True


def test_an_async_call_made_again_keeps_its_queues_order(monkeypatch):
    """An ``async_`` call of a driver that only launches goes through its queue's relaunch
    (``pyacc._express.enqueuer``): once the queue has run it, calls are made again inside
    the queue's bookkeeping (``CudaQueue.submit_relaunch``), in the queue's order with its
    copies and waits (OpenACC 3.3 §2.16.1), counted as launches, their handles' result
    None; behind a failure not yet reported a call takes ``Device.launch``, whose queue
    skips it, and the wait raises the failure."""
    from pyacc._devices import runtime_of
    from pyacc.compiler import cuda_relaunch

    backend = runtime_of("cuda", 0).device.backend
    made = []

    def relaunching(kernel, on_failure=None):
        if on_failure is not None:  # the synchronous queue's: its launcher
            return kernel
        made.append(_Remade(kernel, backend))  # an asynchronous queue's: no wait
        return made[-1]
    monkeypatch.setattr(cuda_relaunch, "relaunching", relaunching)
    x, y, z = np.arange(8.0), np.ones(8), np.zeros(8)
    with acc.data(copyin=[x, z], copy=[y]):
        saxpy(1.0, x, y)
        saxpy(1.0, x, y)  # the replay that arms the plan
        handles = [saxpy(1.0, x, y, async_=1) for _ in range(2)]  # a replay, then a Pending
        acc.wait(1)  # (the fake stream runs a Pending on its own thread)
        [relaunch] = made
        handles += [saxpy(1.0, x, y, async_=1) for _ in range(3)]
        x[:] = 10.0
        acc.update_device(x, async_=1)  # in the queue's order, before the next calls
        acc.update_device(z, async_=2)
        acc.wait_async(2, 1)  # queue 1 waits for queue 2
        handles += [saxpy(1.0, x, y, async_=1) for _ in range(2)]
        acc.wait(1)
        assert relaunch.made == 5
        with monkeypatch.context() as patched:  # a copy that fails on queue 1
            patched.setattr(backend, "memcpy_htod", lambda *args: (_ for _ in ()).throw(RuntimeError("no copy")))
            acc.update_device(x, async_=1)
        saxpy(1.0, x, y, async_=1)  # skipped
        assert relaunch.made == 5
        with pytest.raises(acc.ExecutionError, match="no copy"):
            acc.wait(1)
        acc.wait(2)
    assert [handle.result() for handle in handles] == [None] * 7
    np.testing.assert_allclose(y, 1.0 + 7 * np.arange(8.0) + 2 * 10.0)  # (not the skipped call)
    assert acc.stats()["launch_count"] == 10


@acc.parallel_loop(async_=1)
def saxpy_on_one(a, x, y):
    for i in range(x.shape[0]):
        y[i] = a * x[i] + y[i]


def test_a_constant_async_clause_and_async_noval_take_the_lanes_enqueue(monkeypatch):
    """On cuda too, a region's constant ``async`` clause and ``async_=acc.async_noval``
    (the thread's default queue) take the express lane's enqueue as ``async_=<queue>``
    does (OpenACC 3.3 §2.16.1): their repeats never reach the Python launcher."""
    x, y = np.arange(8.0), np.ones(8)
    slow_clause = slow_calls(saxpy_on_one, monkeypatch)
    slow_noval = slow_calls(saxpy, monkeypatch)
    acc.set_default_async(3)
    try:
        with acc.data(copyin=[x], copy=[y]):
            handles = [saxpy_on_one(1.0, x, y) for _ in range(6)]
            acc.wait(1)
            handles += [saxpy(1.0, x, y, async_=acc.async_noval) for _ in range(6)]
            acc.wait(3)
    finally:
        acc.set_default_async(acc.async_noval)
    assert [h._queue.async_value for h in handles] == [1] * 6 + [3] * 6
    assert len(slow_clause) <= 2 and len(slow_noval) <= 2
    np.testing.assert_allclose(y, 1.0 + 12 * np.arange(8.0))


def _counting_joins(monkeypatch):
    """The cuda device, and a list of the streams its backend made wait for an event
    (a queue's join, from now on)."""
    from pyacc._devices import runtime_of

    device = runtime_of("cuda", 0).device
    joins = []
    wait_event = device.backend.wait_event
    monkeypatch.setattr(device.backend, "wait_event",
                        lambda stream, event: (joins.append(stream), wait_event(stream, event))[1])
    return device, joins


@acc.parallel_loop(async_=2, wait=1)
def saxpy_on_two_after_one(a, x, y):
    for i in range(x.shape[0]):
        y[i] = a * x[i] + y[i]


def test_a_constant_wait_clause_joins_in_the_lanes_enqueue(monkeypatch):
    """On cuda a region's constant ``wait`` clause (``async(2) wait(1)``, a pipelined
    program's spelling) takes the express lane's enqueue too: it makes the join first (queue
    2's stream waits for an event of queue 1's: ``enqueue(value, device_args, waits)``), as
    the Python launcher's ``wait_for`` does, so the kernel reads what queue 1 copied before it
    (OpenACC 3.3 §2.16.2); its repeats never reach the Python launcher."""
    device, joins = _counting_joins(monkeypatch)
    x, y = np.arange(8.0), np.ones(8)
    slow = slow_calls(saxpy_on_two_after_one, monkeypatch)
    with acc.data(copyin=[x], copy=[y]):
        acc.update_device(x, async_=1)  # queue 1 made
        handles = [saxpy_on_two_after_one(1.0, x, y) for _ in range(4)]
        acc.wait(2)
        x[:] = 10.0
        with device.backend.hold(device.queue(1).stream):
            acc.update_device(x, async_=1)  # not made until the hold ends
            handles += [saxpy_on_two_after_one(1.0, x, y) for _ in range(2)]
        acc.wait()
    assert [handle._queue.async_value for handle in handles] == [2] * 6
    assert len(slow) <= 2 and len(joins) == 6
    np.testing.assert_allclose(y, 1.0 + 4 * np.arange(8.0) + 2 * 10.0)


@pytest.mark.parametrize("lane", [True, False], ids=["lane", "python launcher"])
def test_a_join_that_fails_is_raised_as_the_python_launcher_raises_it(monkeypatch, lane):
    """A failure of the wait clause's join (the stream's wait for an event) is not the
    kernel's: the call raises it as ``wait_for`` does, the kernel not launched, whether the
    lane's enqueue or the Python launcher made the join."""
    from pyacc._devices import runtime_of

    device = runtime_of("cuda", 0).device
    previous = acc._express.set_lane(lane)
    try:
        x, y = np.arange(8.0), np.ones(8)
        with acc.data(copyin=[x], copy=[y]):
            acc.update_device(x, async_=1)
            for _ in range(3):
                saxpy_on_two_after_one(1.0, x, y)
            acc.wait()
            launches = acc.stats()["launch_count"]

            def refused(stream, event):
                raise RuntimeError("no wait for you")
            with monkeypatch.context() as patched:
                patched.setattr(device.backend, "wait_event", refused)
                with pytest.raises(RuntimeError, match="no wait for you") as raised:
                    saxpy_on_two_after_one(1.0, x, y)
            assert type(raised.value) is RuntimeError  # (not an ExecutionError of the kernel)
            assert acc.stats()["launch_count"] == launches
            acc.wait()
    finally:
        acc._express.set_lane(previous)
    np.testing.assert_allclose(y, 1.0 + 3 * np.arange(8.0))


STEP = 1.0


@acc.parallel_loop
def saxpy_by_step(x, y):
    for i in range(x.shape[0]):
        y[i] = STEP * x[i] + y[i]


def test_a_module_level_name_is_read_at_each_call_in_the_lane(monkeypatch):
    """On cuda too, a region whose kernel reads a module-level scalar takes the express
    lane, synchronous and ``async_`` calls, the value read at each call (API.md §6.1)."""
    global STEP
    x, y = np.arange(8.0), np.ones(8)
    slow = slow_calls(saxpy_by_step, monkeypatch)
    expected = y.copy()
    try:
        with acc.data(copyin=[x], copy=[y]):
            for k in range(6):
                STEP = float(k)
                saxpy_by_step(x, y)
                saxpy_by_step(x, y, async_=1)
                expected += 2 * k * x
                acc.wait(1)
    finally:
        STEP = 1.0
    assert len(slow) <= 4
    np.testing.assert_allclose(y, expected)


@acc.parallel_loop(if_="x.shape[0] > 4")
def saxpy_if_long(a, x, y):
    for i in range(x.shape[0]):
        y[i] = a * x[i] + y[i]


def test_an_if_expression_region_has_one_kernel_and_takes_the_lane(monkeypatch):
    """A region whose only expression is its ``if`` clause (OpenACC 3.3 §2.5.6): its
    first call (the full path, which evaluates the clause) and its direct calls (which
    ask the expression first, in the lane too) launch one kernel: no launch shape is
    evaluated for it (on cuda an evaluated shape is part of the kernel's key)."""
    x, y = np.arange(8.0), np.ones(8)
    slow = slow_calls(saxpy_if_long, monkeypatch)
    saxpy_if_long.info.kernels.clear()
    with acc.data(copyin=[x], copy=[y]):
        for _ in range(5):
            saxpy_if_long(1.0, x, y)
        saxpy_if_long(1.0, x[:4], y[:4])  # false: the host's y (copied back over at the exit)
    cuda_kernels = [key for key in saxpy_if_long.info.kernels if key[0] == "cuda"]
    assert len(slow) <= 3 and len(cuda_kernels) == 1  # (and the host's, for the false call)
    np.testing.assert_allclose(y, 1.0 + 5 * np.arange(8.0))


def test_a_wait_given_at_the_call_joins_in_the_lanes_enqueue(monkeypatch):
    """``f(..., async_=2, wait=1)`` on cuda: the lane's enqueue makes the join (queue 2's
    stream waits for an event of queue 1's) before the kernel, as ``wait_for`` does
    (OpenACC 3.3 §2.16.2), and the kernel reads what queue 1 copied before it."""
    device, joins = _counting_joins(monkeypatch)
    x, y = np.arange(8.0), np.ones(8)
    slow = slow_calls(saxpy, monkeypatch)
    with acc.data(copyin=[x], copy=[y]):
        acc.update_device(x, async_=1)  # queues 1 and 2 made
        acc.update_device(x, async_=2)
        handles = [saxpy(1.0, x, y, async_=2, wait=1) for _ in range(4)]
        acc.wait(2)
        x[:] = 10.0
        with device.backend.hold(device.queue(1).stream):
            acc.update_device(x, async_=1)  # not made until the hold ends
            handles += [saxpy(1.0, x, y, async_=2, wait=1) for _ in range(2)]
        acc.wait()
    assert [handle._queue.async_value for handle in handles] == [2] * 6
    assert len(slow) <= 3 and len(joins) == 6
    np.testing.assert_allclose(y, 1.0 + 4 * np.arange(8.0) + 2 * 10.0)


def test_a_synchronous_call_with_wait_waits_on_the_host_on_cuda(monkeypatch):
    """``f(..., wait=1, if_=True)`` on cuda, queue 1 busy: the host waits for queue 1 (a
    CudaQueue is never settled in C: the Python launcher's host wait), then the kernel runs
    on the synchronous queue and reads what queue 1 copied (OpenACC 3.3 §2.16.2)."""
    import threading

    from pyacc._devices import runtime_of

    device = runtime_of("cuda", 0).device
    x, y = np.arange(8.0), np.ones(8)
    with acc.data(copyin=[x], copy=[y]):
        acc.update_device(x, async_=1)
        for _ in range(3):
            saxpy(1.0, x, y, wait=1, if_=True)
        x[:] = 10.0
        held = device.backend.hold(device.queue(1).stream)
        held.__enter__()
        acc.update_device(x, async_=1)  # not made until the hold ends
        released = threading.Timer(0.05, held.__exit__, (None, None, None))
        released.start()
        saxpy(1.0, x, y, wait=1, if_=True)
        released.join()
    np.testing.assert_allclose(y, 1.0 + 3 * np.arange(8.0) + 10.0)


def test_arguments_by_name_and_async_sync_take_the_lane_on_cuda(monkeypatch):
    """On cuda too, a call giving its arguments by name (API.md §6) is bound in C and
    enqueued by the lane's enqueue, and ``async_=acc.async_sync`` on a region whose
    ``async`` clause names a queue runs synchronously (OpenACC 3.3 §2.16.1): the call
    returns None, not a handle, and its result is on the host at once."""
    x, y = np.arange(8.0), np.ones(8)
    slow = slow_calls(saxpy_on_one, monkeypatch)
    with acc.data(copyin=[x], copy=[y]):
        handles = [saxpy_on_one(y=y, x=x, a=1.0) for _ in range(5)]
        acc.wait(1)
        assert [handle._queue.async_value for handle in handles] == [1] * 5
        for k in range(3):
            assert saxpy_on_one(1.0, x, y=y, async_=acc.async_sync) is None
            acc.update_self(y)
            np.testing.assert_allclose(y, 1.0 + (6 + k) * np.arange(8.0))
    assert len(slow) <= 4


def test_module_attributes_and_defaults_on_cuda(monkeypatch):
    """On cuda too, a module's attribute a kernel reads is a free parameter read at each
    call (``compiler/free_names.py``) and a parameter's default is the call's value."""
    import types

    physics = types.ModuleType("physics_on_cuda")
    physics.G, physics.S = np.arange(8.0), 2.0
    monkeypatch.setitem(globals(), "physics_on_cuda", physics)

    @acc.parallel_loop
    def scaled(y, shift=1.0):
        for i in range(y.shape[0]):
            y[i] = physics_on_cuda.G[i] * physics_on_cuda.S + shift

    y = np.zeros(8)
    scaled(y)
    np.testing.assert_allclose(y, 2.0 * np.arange(8.0) + 1.0)
    physics.S = 3.0
    physics.G = np.ones(8)
    scaled(y, shift=0.5)
    np.testing.assert_allclose(y, 3.5)


@acc.parallel_loop(present="b c")
def accumulates(b, c):
    for i in range(b.shape[0]):
        c[i] = b[i] + c[i]


def test_zero_modifier_fills_new_device_memory_on_the_stream():
    """OpenACC 3.3 §2.7.8, 2.7.9: the create action of create(zero:)/copyout(zero:) sets
    the device memory to 0 (``Device.zero``, on the queue's stream)."""
    garbage = np.full(4096, 7.0)
    acc.copyin(garbage)
    acc.delete(garbage)
    b, c = np.full(8, 5.0), np.full(8, 9.0)
    with acc.data(create_zero=[b], copyout_zero=c, async_=1):
        accumulates(b, c, async_=1)
    acc.wait(1)
    assert (c == 0.0).all() and (b == 5.0).all()


@acc.parallel(firstprivate="c")
def firstprivate_set_before_the_loop(c, d):
    c[0] = 5.0
    for x in acc.loop(range(d.shape[0])):
        d[x] = c[x]


@acc.parallel(private="c")
def private_set_before_the_loop(c, d):
    for y in range(c.shape[0]):
        c[y] = 5.0
    for x in acc.loop(range(d.shape[0])):
        d[x] = c[x]


def test_region_copies_of_private_arrays_are_device_copies():
    """OpenACC 3.3 §2.5.13-14: the region's copy is made on the device
    (``cuda_runtime.firstprivate_copy``), its values seed the loop's rows."""
    c, d = np.full(4, 7.0), np.zeros(4)
    firstprivate_set_before_the_loop(c, d)
    assert list(d) == [5.0, 7.0, 7.0, 7.0] and list(c) == [7.0] * 4
    private_set_before_the_loop(c, d)
    assert list(d) == [5.0] * 4 and list(c) == [7.0] * 4


@acc.serial(firstprivate="t")
def firstprivate_of_any_layout(a, t):
    t[1] += 1
    a[0] = t[1]


@acc.serial(firstprivate="t")
def firstprivate_of_fortran_order(a, t):
    t[0, 1] += 1
    a[0] = t[0, 1]


def test_firstprivate_copies_of_any_layout_on_the_device():
    a = np.zeros(1)
    firstprivate_of_fortran_order(a, np.asfortranarray(np.arange(6.0).reshape(2, 3)))
    assert a[0] == 2.0
    base = np.ones(8)
    with acc.data(copy=[base]):
        firstprivate_of_any_layout(a, base[::2])
    assert a[0] == 2.0 and (base == 1.0).all()
