"""Chunked, double-buffered staging of the cuda device (mapping/devices/cuda_staging.py) on
the fake backend: a staged transfer of more than ``CHUNK`` bytes (``ASYNC_CHUNK`` on an
asynchronous queue; both set to 96 here) moves in pieces of at most that many bytes through two pinned buffers (so its pinned memory is ``2 × CHUNK`` whatever
its size), each piece one memcpy; the data are exact; on an asynchronous queue the host
is still read and written in stream order, and a buffer is refilled only once the DMA
(upload) or host copy (download) of its previous piece has run, even when the streams
run at different speeds."""

import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyacc.mapping import DeviceRuntime, UpdateDirection
from pyacc.mapping import errors as acc_errors
from pyacc.mapping.devices import cuda_staging
from pyacc.mapping.devices.cuda import CudaDevice
from pyacc.mapping.devices.cuda_fake import FakeCudaBackend
from pyacc.mapping.devices.cuda_layout import Packing
from tests.mapping.test_cuda_device import _copyin, backend, device, runtime  # noqa: F401  (fixtures)
from tests.mapping.fakes import close_streams

CHUNK = 96  # bytes: 12 float64 elements per piece in these tests


@pytest.fixture(autouse=True)
def _small_chunks(monkeypatch):
    monkeypatch.setattr(cuda_staging, "CHUNK", CHUNK)
    monkeypatch.setattr(cuda_staging, "ASYNC_CHUNK", CHUNK)
    monkeypatch.setenv("PYACC_PIN", "0")  # nothing is page-locked: every async copy is staged


def _queue(device, which):
    return device.sync_queue if which == "sync" else device.queue(1)


def _htod(backend):
    return [n for kind, n in backend.memcpys if kind == "htod"]


def _dtoh(backend):
    return [n for kind, n in backend.memcpys if kind == "dtoh"]


def _views():
    """(name, host array maker, view of it): contiguous and strided host sides."""
    return {
        "contiguous": lambda a: a,
        "column": lambda a: a[:, 3],
        "every-other": lambda a: a[::2, 1::3],
        "reversed-fortran": lambda a: np.asfortranarray(a)[::-1, :5],
    }


# == the pieces of a block ======================================================================
@settings(max_examples=80, deadline=None)
@given(shape=st.lists(st.integers(1, 6), min_size=0, max_size=4), order=st.sampled_from("CF"),
       limit=st.integers(1, 400), itemsize=st.sampled_from([1, 4, 8, 16]))
def test_pieces_cover_the_block_in_order_each_at_most_the_limit(shape, order, limit, itemsize):
    dtype = np.dtype(f"V{itemsize}") if itemsize == 16 else np.dtype(f"u{itemsize}")
    host = np.arange(int(np.prod(shape)) * itemsize, dtype=np.uint8).view(dtype).reshape(shape, order=order)
    interface = {"data": (0, False), "shape": tuple(shape), "typestr": dtype.str,
                 "strides": host.strides, "version": 3}
    packing = Packing(host, interface, "a test")
    block = np.empty(host.nbytes, np.uint8)
    packing.staged(block)[...] = host
    position = 0
    for index, begin, end in packing.pieces(limit):
        assert begin == position and 0 < end - begin <= max(limit, itemsize)
        part = host[index + (Ellipsis,)]  # as cuda_staging reads it: a view, also when 0-d
        assert isinstance(part, np.ndarray) and part.base is not None
        assert part.ndim == host.ndim and part.nbytes == end - begin
        assert np.array_equal(packing.staged(block[begin:end], part.shape), part)
        position = end
    assert position == host.nbytes


def test_pieces_of_a_block_without_elements_are_none():
    host = np.zeros((3, 0))
    interface = {"data": (0, False), "shape": (3, 0), "typestr": "<f8", "strides": host.strides, "version": 3}
    assert Packing(host, interface, "a test").pieces(CHUNK) == []


# == transfers in pieces: exact, two buffers of at most CHUNK, one memcpy per piece ===========
@pytest.mark.parametrize("which", ["sync", "async"])
@pytest.mark.parametrize("name", ["column", "every-other", "reversed-fortran", "contiguous"])
def test_staging_a_long_update_device_moves_in_pieces_through_two_buffers(device, backend, runtime, which, name):
    array = np.zeros((40, 9))
    device_array = _copyin(runtime, array)
    view = _views()[name](array)
    if view.base is not array and view is not array:  # a Fortran copy: map it on its own
        device_array = _copyin(runtime, view.base if view.base is not None else view)
    staged = which == "async" or not (view.flags.c_contiguous or view.flags.f_contiguous)
    view[...] = np.arange(view.size).reshape(view.shape) + 1.0
    backend.memcpys.clear()
    backend.staging.clear()
    runtime.update([(UpdateDirection.DEVICE, view, "v")], _queue(device, which))
    _queue(device, which).synchronize()
    assert np.array_equal(_device_view(runtime, view), view)
    if staged:
        pieces = -(-view.nbytes // CHUNK)
        assert len(_htod(backend)) >= pieces and sum(_htod(backend)) == view.nbytes
        assert max(_htod(backend)) <= CHUNK
        assert len(backend.staging) == 2 and max(backend.staging) <= CHUNK
    else:  # a contiguous host side on the synchronous queue: copied as it is
        assert _htod(backend) == [view.nbytes] and backend.staging == []
    del device_array


@pytest.mark.parametrize("which", ["sync", "async"])
@pytest.mark.parametrize("name", ["column", "every-other", "contiguous"])
def test_staging_a_long_update_self_moves_in_pieces_through_two_buffers(device, backend, runtime, which, name):
    array = np.zeros((40, 9))
    device_array = _copyin(runtime, array)
    device_array[...] = np.arange(array.size).reshape(array.shape) + 0.5
    expected = np.zeros_like(array)
    _views()[name](expected)[...] = _views()[name](np.arange(array.size).reshape(array.shape) + 0.5)
    view = _views()[name](array)
    staged = which == "async" or not (view.flags.c_contiguous or view.flags.f_contiguous)
    backend.memcpys.clear()
    backend.staging.clear()
    runtime.update([(UpdateDirection.SELF, view, "v")], _queue(device, which))
    _queue(device, which).synchronize()
    assert np.array_equal(array, expected)
    if staged:
        assert sum(_dtoh(backend)) == view.nbytes and max(_dtoh(backend)) <= CHUNK
        assert len(_dtoh(backend)) >= -(-view.nbytes // CHUNK)
        assert len(backend.staging) == 2 and max(backend.staging) <= CHUNK
    else:
        assert _dtoh(backend) == [view.nbytes] and backend.staging == []


def _device_view(runtime, view):
    """The device copy of ``view``'s elements (through its present mapping)."""
    return runtime.deviceptr(view).get()


def test_staging_one_chunk_or_less_is_one_piece_on_the_queues_own_stream(device, backend, runtime):
    a = np.zeros(CHUNK // 8)
    device_array = _copyin(runtime, a)
    queue = device.queue(1)
    a[...] = 5.0
    backend.staging.clear()
    runtime.update([(UpdateDirection.DEVICE, a, "a")], queue)
    queue.synchronize()
    assert np.all(device_array.get() == 5.0) and backend.staging == [a.nbytes]
    assert len(queue.streams()) == 1  # no staging stream for one piece


def test_staging_the_async_queue_makes_one_staging_stream_and_keeps_it(device, runtime):
    a = np.zeros(10 * CHUNK // 8)
    _copyin(runtime, a)
    queue = device.queue(1)
    for _ in range(3):
        runtime.update([(UpdateDirection.DEVICE, a, "a")], queue)
    queue.synchronize()
    streams = queue.streams()
    assert len(streams) == 2 and queue.staging_stream is streams[1] and not streams[1].blocking


# == stream order (OpenACC 3.3 §2.16.1) ==========================================================
def test_staging_an_async_upload_in_pieces_reads_the_host_when_it_runs(device, runtime):
    a = np.zeros((20, 9))
    device_array = _copyin(runtime, a)
    queue = device.queue(1)
    with queue.hold():
        runtime.update([(UpdateDirection.DEVICE, a, "a"), (UpdateDirection.DEVICE, a[:, 1], "column")], queue)
        time.sleep(0.05)  # the staging stream would copy now, were it not waiting for the queue
        a[...] = 42.0  # after the enqueue, before the queue's stream runs anything
        assert not device_array.get().any()
    queue.synchronize()
    assert np.all(device_array.get() == 42.0)


def test_staging_an_async_download_in_pieces_lands_before_what_follows_it(device, runtime):
    a = np.zeros((20, 9))
    device_array = _copyin(runtime, a)
    device_array[...] = 3.0
    queue = device.queue(1)
    seen = []
    with queue.hold():
        runtime.update([(UpdateDirection.SELF, a, "a")], queue)
        queue.host_func(lambda: seen.append(a.copy()))  # the next operation on the queue
        assert not a.any()
    queue.synchronize()
    assert np.all(a == 3.0) and np.all(seen[0] == 3.0)


class _SlowBackend(FakeCudaBackend):
    """The fake backend with one kind of work slowed down on every stream: DMAs
    (``slow="memcpy"``) or host functions (``slow="host function"``), so that a buffer
    refilled before its previous piece has moved shows in the data."""

    def __init__(self, slow: str):
        super().__init__()
        self.slow = slow

    def new_stream(self, *, blocking: bool):
        stream = super().new_stream(blocking=blocking)
        submit = stream.submit

        def slowed(run, description="an operation", **options):
            if self.slow in description:
                inner = run

                def run():
                    time.sleep(0.002)
                    inner()
            return submit(run, description, **options)

        stream.submit = slowed
        return stream


@pytest.mark.parametrize("which", ["sync", "async"])
@pytest.mark.parametrize("slow", ["memcpy", "host function"])
def test_staging_a_buffer_is_refilled_only_after_its_previous_piece_has_moved(which, slow):
    backend = _SlowBackend(slow)
    device = CudaDevice(0, backend=backend)
    runtime = DeviceRuntime(device)
    try:
        queue = _queue(device, which)
        whole = np.zeros((30 * CHUNK // 8, 2))
        column = whole[:, 0]  # strided: staged on both queues, 30 pieces through 2 buffers
        expected = np.arange(column.size, dtype=np.float64)
        device_array = _copyin(runtime, whole)
        column[...] = expected * 2
        runtime.update([(UpdateDirection.DEVICE, column, "column")], queue)
        queue.synchronize()
        assert np.array_equal(device_array.get()[:, 0], expected * 2)
        device_array[:, 0] = expected * 3
        runtime.update([(UpdateDirection.SELF, column, "column")], queue)
        queue.synchronize()
        assert np.array_equal(column, expected * 3)
    finally:
        close_streams(device)


@pytest.mark.parametrize("dtype", [np.float64, np.dtype([("x", "<f8"), ("n", "<i4")])])
def test_staging_an_async_transfer_of_a_0d_array(device, runtime, dtype):
    a = np.zeros((), dtype)
    device_array = _copyin(runtime, a)
    device_array[...] = np.ones((), dtype)
    queue = device.queue(1)
    runtime.update([(UpdateDirection.SELF, a, "a")], queue)
    queue.synchronize()
    assert a == np.ones((), dtype)
    a[...] = np.zeros((), dtype)
    runtime.update([(UpdateDirection.DEVICE, a, "a")], queue)
    queue.synchronize()
    assert device_array.get() == np.zeros((), dtype)


class _FailingMemcpy(FakeCudaBackend):
    """The fake backend whose ``fail_at``-th memcpy fails while it is enqueued, its host
    functions slowed down (so that copies still queued on the staging stream show)."""

    def __init__(self, fail_at: int):
        super().__init__()
        self.fail_at, self.count = fail_at, 0

    def _next(self):
        self.count += 1
        if self.count == self.fail_at:
            raise RuntimeError("injected: the memcpy could not be enqueued")

    def memcpy_htod(self, address, host_buffer, stream):
        self._next()
        super().memcpy_htod(address, host_buffer, stream)

    def memcpy_dtoh(self, host_buffer, address, stream):
        self._next()
        super().memcpy_dtoh(host_buffer, address, stream)

    def launch_host_func(self, stream, fn):
        def later():
            time.sleep(0.005)
            fn()

        stream.submit(later, "a host function")


def test_staging_a_transfer_failing_halfway_leaves_no_host_copy_running():
    """The queue's stream waits for what the staging stream got before the failure: once
    the failure is reported, the download writes the host array no more."""
    backend = _FailingMemcpy(fail_at=6)
    device = CudaDevice(0, backend=backend)
    runtime = DeviceRuntime(device)
    try:
        queue = device.queue(1)
        whole = np.zeros((10 * CHUNK // 8, 2))
        column = whole[:, 0]
        _copyin(runtime, whole)[:, 0] = 7.0
        backend.count = 0
        runtime.update([(UpdateDirection.SELF, column, "column")], queue)
        with pytest.raises(acc_errors.ExecutionError, match="injected"):
            queue.synchronize()
        written = column.copy()
        time.sleep(0.1)
        assert np.array_equal(column, written) and 0 < (written == 7.0).sum() < column.size
    finally:
        close_streams(device)
