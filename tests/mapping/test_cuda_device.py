"""The cuda device (mapping/devices/cuda.py) on the fake backend (mapping/devices/cuda_fake.py), no GPU:
one memcpy per transfer (strided views packed on both sides), async transfers that touch
the host when the stream runs them, deferred frees, queue joins and failures, device
arrays from any ``__cuda_array_interface__`` object, memory bookkeeping and events."""

import subprocess
import sys
import weakref

import numpy as np
import pytest

from pyacc.mapping import (
    BUS,
    Counter,
    DeviceRuntime,
    DeviceTypeUnavailableError,
    EventKind,
    ExecutionError,
    InvalidArgumentError,
    MapKind,
    MapRequest,
    OutOfMemoryError,
    UpdateDirection,
)
from pyacc.mapping.devices.cuda import CudaDevice, CudaQueue, CudaSyncQueue
from pyacc.mapping.devices.cuda_fake import FakeCudaBackend
from tests.mapping.fakes import close_streams


class _Interface:
    """A minimal foreign device array: nothing but ``__cuda_array_interface__``."""

    def __init__(self, pointer, shape, typestr="<f8", strides=None):
        self.__cuda_array_interface__ = {"data": (pointer, False), "shape": shape,
                                         "typestr": typestr, "strides": strides, "version": 3}


@pytest.fixture
def backend():
    return FakeCudaBackend()


@pytest.fixture
def device(backend):
    device = CudaDevice(0, backend=backend)
    yield device
    close_streams(device)


@pytest.fixture
def runtime(device):
    return DeviceRuntime(device)


@pytest.fixture
def events():
    kinds = (EventKind.ALLOC, EventKind.FREE, EventKind.UPLOAD, EventKind.DOWNLOAD, EventKind.DONE)
    seen = []
    BUS.subscribe(seen.append, kinds)
    yield seen
    BUS.unsubscribe(seen.append, kinds)


def _copyin(runtime, array, queue=None):
    runtime.enter([MapRequest(MapKind.COPYIN, array)], Counter.DYNAMIC, queue or runtime.device.sync_queue)
    return runtime.deviceptr(array)


def _queue(device, which):
    return device.sync_queue if which == "sync" else device.queue(1)


# == contiguous transfers ======================================================================
def test_the_sync_queue_and_async_queues_are_stream_backed(device):
    assert isinstance(device.sync_queue, CudaSyncQueue) and device.queue(None) is device.sync_queue
    assert isinstance(device.queue(1), CudaQueue) and device.queue(1) is device.queue(1)
    assert device.queue(1).stream is not device.queue(2).stream is not device.sync_queue.stream
    assert device.sync_queue.stream.blocking and not device.queue(1).stream.blocking


@pytest.mark.parametrize("which", ["sync", "async"])
def test_contiguous_upload_and_download_are_one_memcpy_each_and_exact(device, backend, runtime, which):
    queue = _queue(device, which)
    a = np.random.default_rng(1).standard_normal((7, 9))
    runtime.enter([MapRequest(MapKind.COPYIN, a)], Counter.DYNAMIC, queue)
    queue.synchronize()
    assert backend.memcpys == [("htod", a.nbytes)] and backend.elementwise_copies == []
    device_array = runtime.deviceptr(a)
    assert np.array_equal(device_array.get(), a)
    expected = device_array.get() * 3 + 1
    device_array[...] = expected
    runtime.exit_dynamic([MapRequest(MapKind.COPYOUT, a)], queue)
    queue.synchronize()
    assert backend.memcpys == [("htod", a.nbytes), ("dtoh", a.nbytes)]
    assert np.array_equal(a, expected) and device.memory_in_use == 0


# == strided transfers: one packed memcpy, only the view's elements move ========================
def _check_update_device(device, backend, runtime, array, view_of, which, *, packs_on_device):
    """Update device of ``view_of(array)``: exactly its elements reach the device, nothing
    else changes on either side, in one memcpy of exactly the packed bytes."""
    queue = _queue(device, which)
    device_array = _copyin(runtime, array)
    device_array[...] = -7.0  # device data differs from the host everywhere
    view = view_of(array)
    view[...] = np.arange(view.size, dtype=array.dtype).reshape(view.shape) + 100
    host_before = array.copy()
    expected = np.full_like(array, -7.0)
    view_of(expected)[...] = view
    backend.memcpys.clear()
    backend.elementwise_copies.clear()
    runtime.update([(UpdateDirection.DEVICE, view, "v")], queue)
    queue.synchronize()
    assert np.array_equal(device_array.get(), expected)
    assert np.array_equal(array, host_before)
    assert backend.memcpys == [("htod", view.nbytes)]
    assert backend.elementwise_copies == ([view.nbytes] if packs_on_device else [])


def _check_update_self(device, backend, runtime, array, view_of, which, *, packs_on_device):
    """Update self of ``view_of(array)``: exactly its elements come back to the host,
    nothing else changes on either side, in one memcpy of exactly the packed bytes."""
    queue = _queue(device, which)
    device_array = _copyin(runtime, array)
    device_array[...] = np.arange(array.size, dtype=array.dtype).reshape(array.shape) + 1000
    array[...] = -7.0
    device_before = device_array.get()
    expected = np.full_like(array, -7.0)
    view_of(expected)[...] = view_of(device_before)
    backend.memcpys.clear()
    backend.elementwise_copies.clear()
    runtime.update([(UpdateDirection.SELF, view_of(array), "v")], queue)
    queue.synchronize()
    assert np.array_equal(array, expected)
    assert np.array_equal(device_array.get(), device_before)
    assert backend.memcpys == [("dtoh", view_of(array).nbytes)]
    assert backend.elementwise_copies == ([view_of(array).nbytes] if packs_on_device else [])


def _matrix(order="C"):
    return np.zeros((6, 10), order=order)


def _column(a):
    return a[:, 5]


def _sub_block(a):
    return a[2:5, 3:9]


def _stride_3(a):
    return a[::3]


def _reversed_every_other(a):
    return a[::-2]


def _row(a):
    return a[2]


def _block_of_columns(a):
    return a[:, 2:5]


def _cube_slice(a):
    return a[1:3, ::2, 4]


@pytest.mark.parametrize("which", ["sync", "async"])
def test_update_device_of_a_column_is_one_packed_transfer(device, backend, runtime, which):
    _check_update_device(device, backend, runtime, _matrix(), _column, which, packs_on_device=True)


@pytest.mark.parametrize("which", ["sync", "async"])
def test_update_self_of_a_column_is_one_packed_transfer(device, backend, runtime, which):
    _check_update_self(device, backend, runtime, _matrix(), _column, which, packs_on_device=True)


@pytest.mark.parametrize("which", ["sync", "async"])
def test_update_device_of_a_sub_block_is_one_packed_transfer(device, backend, runtime, which):
    _check_update_device(device, backend, runtime, _matrix(), _sub_block, which, packs_on_device=True)


@pytest.mark.parametrize("which", ["sync", "async"])
def test_update_self_of_a_sub_block_is_one_packed_transfer(device, backend, runtime, which):
    _check_update_self(device, backend, runtime, _matrix(), _sub_block, which, packs_on_device=True)


@pytest.mark.parametrize("which", ["sync", "async"])
def test_update_device_of_a_stride_3_slice_is_one_packed_transfer(device, backend, runtime, which):
    _check_update_device(device, backend, runtime, np.zeros(31), _stride_3, which, packs_on_device=True)


@pytest.mark.parametrize("which", ["sync", "async"])
def test_update_self_of_a_stride_3_slice_is_one_packed_transfer(device, backend, runtime, which):
    _check_update_self(device, backend, runtime, np.zeros(31), _stride_3, which, packs_on_device=True)


@pytest.mark.parametrize("which", ["sync", "async"])
def test_update_device_of_a_negative_stride_view_is_one_packed_transfer(device, backend, runtime, which):
    _check_update_device(device, backend, runtime, np.zeros(17), _reversed_every_other, which,
                         packs_on_device=True)


@pytest.mark.parametrize("which", ["sync", "async"])
def test_update_self_of_a_negative_stride_view_is_one_packed_transfer(device, backend, runtime, which):
    _check_update_self(device, backend, runtime, np.zeros(17), _reversed_every_other, which,
                       packs_on_device=True)


@pytest.mark.parametrize("which", ["sync", "async"])
def test_update_of_a_contiguous_row_moves_it_without_packing(device, backend, runtime, which):
    _check_update_device(device, backend, runtime, _matrix(), _row, which, packs_on_device=False)
    _check_update_self(device, backend, runtime, _matrix(), _row, which, packs_on_device=False)


@pytest.mark.parametrize("which", ["sync", "async"])
def test_update_of_fortran_order_columns_moves_them_without_packing(device, backend, runtime, which):
    _check_update_device(device, backend, runtime, _matrix("F"), _block_of_columns, which,
                         packs_on_device=False)
    _check_update_self(device, backend, runtime, _matrix("F"), _block_of_columns, which,
                       packs_on_device=False)


@pytest.mark.parametrize("which", ["sync", "async"])
def test_update_of_a_fortran_order_row_is_one_packed_transfer(device, backend, runtime, which):
    _check_update_device(device, backend, runtime, _matrix("F"), _row, which, packs_on_device=True)
    _check_update_self(device, backend, runtime, _matrix("F"), _row, which, packs_on_device=True)


@pytest.mark.parametrize("which", ["sync", "async"])
def test_update_device_of_a_3d_slice_is_one_packed_transfer(device, backend, runtime, which):
    _check_update_device(device, backend, runtime, np.zeros((4, 5, 6)), _cube_slice, which,
                         packs_on_device=True)


@pytest.mark.parametrize("which", ["sync", "async"])
def test_update_self_of_a_3d_slice_is_one_packed_transfer(device, backend, runtime, which):
    _check_update_self(device, backend, runtime, np.zeros((4, 5, 6)), _cube_slice, which,
                       packs_on_device=True)


def test_a_contiguous_device_view_with_a_strided_host_side_packs_on_the_host_only(device, backend):
    """Device memory from acc.malloc is contiguous; a strided host view packs in numpy."""
    host = np.arange(40.0).reshape(4, 10)
    address = device.allocate(4 * 8)
    device_array = device.view(address, np.empty(4))
    device.upload(device_array, host[:, 7], device.sync_queue)
    assert np.array_equal(device_array.get(), host[:, 7])
    device_array[...] = -1
    device.download(host[:, 7], device_array, device.queue(1))
    device.queue(1).synchronize()
    assert np.array_equal(host[:, 7], [-1] * 4) and host[0, 6] == 6 and host[0, 8] == 8
    assert backend.memcpys == [("htod", 32), ("dtoh", 32)] and backend.elementwise_copies == []
    device.free(address)


@pytest.mark.parametrize("which", ["sync", "async"])
def test_device_copies_are_one_memcpy_when_contiguous_else_one_elementwise_copy(device, backend, which):
    queue = _queue(device, which)
    like = np.empty((4, 6))
    first, second = device.allocate(like.nbytes), device.allocate(like.nbytes)
    source, target = device.view(first, like), device.view(second, like)
    source[...] = np.arange(24.0).reshape(4, 6)
    target[...] = 0
    device.device_copy(target, source, queue)
    queue.synchronize()
    assert np.array_equal(target.get(), source.get()) and backend.memcpys == [("dtod", like.nbytes)]
    device.device_copy(target[:, ::2], source[::-1, 1::2], queue)
    queue.synchronize()
    assert np.array_equal(target[:, ::2].get(), source[::-1, 1::2].get())
    assert backend.memcpys == [("dtod", like.nbytes)] and backend.elementwise_copies == [96]
    device.free(first)
    device.free(second)


# == asynchronous queues ====================================================================
def test_an_async_upload_reads_the_host_when_it_runs_not_when_it_is_enqueued(device, runtime):
    a = np.zeros((5, 4))
    device_array = _copyin(runtime, a)
    queue = device.queue(1)
    with queue.hold():
        runtime.update([(UpdateDirection.DEVICE, a, "a"), (UpdateDirection.DEVICE, a[:, 1], "column")], queue)
        a[...] = 42.0  # after the enqueue, before the stream runs the copies
        assert not device_array.get().any() and not queue.is_idle()
    queue.synchronize()
    assert np.all(device_array.get() == 42.0)


def test_an_async_download_lands_only_after_the_stream_runs(device, runtime):
    a = np.zeros((5, 4))
    device_array = _copyin(runtime, a)
    device_array[...] = 3.0
    queue = device.queue(1)
    with queue.hold():
        runtime.update([(UpdateDirection.SELF, a[1:4, ::2], "block")], queue)
        assert not a.any()
    queue.synchronize()
    assert np.all(a[1:4, ::2] == 3.0) and a.sum() == 3.0 * 6


def test_a_deferred_free_happens_only_after_the_stream_passes_it(device, runtime, events):
    a = np.ones(64)
    _copyin(runtime, a)
    queue = device.queue(1)
    with queue.hold():
        runtime.exit_dynamic([MapRequest(MapKind.COPYOUT, a)], queue)
        assert not runtime.is_present(a)  # absent at once (API.md §5) ...
        assert device.memory_in_use == a.nbytes and not queue.is_idle()  # ... freed later
        assert EventKind.FREE not in [event.kind for event in events]
    queue.synchronize()
    assert device.memory_in_use == 0 and queue.is_idle()
    assert [e.nbytes for e in events if e.kind is EventKind.FREE] == [a.nbytes]


def test_wait_event_orders_two_queues_on_the_device(device):
    first, second = device.queue(1), device.queue(2)
    address = device.allocate(8 * 8)
    device_array = device.view(address, np.empty(8))
    device_array[...] = 0
    result = np.zeros(8)
    with first.hold():
        device.upload(device_array, np.full(8, 5.0), first)
        device.join(second, [first])  # acc_wait_async(1, 2): no host wait
        device.download(result, device_array, second)
        assert not second.is_idle()
    second.synchronize()
    assert np.all(result == 5.0)
    first.synchronize()
    device.free(address)


def test_a_failing_operation_is_raised_once_at_synchronize_and_skips_later_ones(device):
    queue = device.queue(3)
    ran = []
    queue.submit(lambda: 1 / 0, "a division")
    queue.submit(lambda: ran.append("copy"), "a copy")
    queue.submit(lambda: ran.append("essential"), "an essential step", essential=True)
    queue.defer(lambda: ran.append("free"))
    failed = "a division on queue 3 of cuda device 0 failed: ZeroDivisionError"
    with pytest.raises(ExecutionError, match=failed):
        queue.synchronize()
    queue.synchronize()  # reported once
    assert sorted(ran) == ["essential", "free"]
    queue.submit(lambda: ran.append("after"))
    queue.synchronize()
    assert ran[-1] == "after"  # the queue works again once the error was reported


def test_a_failing_host_function_skips_the_host_side_of_later_transfers(device, runtime):
    a = np.zeros(6)
    device_array = _copyin(runtime, a)
    device_array[...] = 9.0
    queue = device.queue(4)
    with queue.hold():
        queue.submit(lambda: queue.host_func(lambda: 1 / 0), "a host step")
        runtime.update([(UpdateDirection.SELF, a, "a")], queue)
    with pytest.raises(ExecutionError, match="a host step on queue 4 .* ZeroDivisionError"):
        queue.synchronize()
    assert not a.any()  # the download behind the failure never wrote the host


def test_a_failure_crosses_a_queue_join(device):
    first, second = device.queue(5), device.queue(6)
    first.submit(lambda: 1 / 0, "a division")
    device.join(second, [first])
    ran = []
    second.submit(lambda: ran.append("dependent"), "dependent work")
    with pytest.raises(ExecutionError, match="which this queue waited for, failed: ZeroDivisionError"):
        second.synchronize()
    with pytest.raises(ExecutionError, match="a division"):
        first.synchronize()
    assert ran == []


def test_a_kernel_on_an_async_queue_runs_in_stream_order(device, backend):
    queue = device.queue(1)
    seen = []

    def kernel(x):
        seen.append(backend.current_stream())
        return x * 2

    with queue.hold():
        pending = device.launch(kernel, (21,), queue, name="double")
        assert seen == [] and pending.value is None
    queue.synchronize()
    assert pending.value == 42 and seen == [queue.stream]


def test_a_kernel_on_the_sync_queue_runs_on_its_stream_and_has_completed_on_return(device, backend):
    seen = []
    value = device.launch(lambda x: seen.append(backend.current_stream()) or x + 1, (1,),
                          device.sync_queue, name="increment")
    assert value == 2 and seen == [device.sync_queue.stream]


def test_done_of_an_async_transfer_is_published_once_the_stream_has_passed_it(device, runtime, events):
    a = np.ones(8)
    _copyin(runtime, a)
    queue = device.queue(1)
    events.clear()
    with queue.hold():
        runtime.update([(UpdateDirection.SELF, a, "a")], queue)
        queue.is_idle()
        assert [event.kind for event in events] == [EventKind.DOWNLOAD]
    queue.synchronize()
    assert [event.kind for event in events] == [EventKind.DOWNLOAD, EventKind.DONE]
    assert events[1].info is events[0] and events[1].nbytes == a.nbytes


# == device arrays and memory ===================================================================
def test_extent_of_accepts_any_cuda_array_interface_object(device):
    address = device.allocate(80)
    assert device.extent_of(_Interface(address + 8, (3,))) == (address + 8, address + 8, address + 32)
    reversed_view = _Interface(address + 72, (5,), strides=(-16,))
    assert device.extent_of(reversed_view) == (address + 72, address + 8, address + 80)
    matrix = _Interface(address, (2, 5), typestr="<f8", strides=(8, 16))  # Fortran order
    assert device.extent_of(matrix) == (address, address, address + 80)
    assert device.allocation_of(address + 40) == (address, 80)
    device.free(address)


def test_extent_of_refuses_host_arrays_foreign_pointers_and_other_objects(device):
    host = np.ones(4)
    not_a_device_array = r"\(shape \(4,\), dtype float64\) is not a device array of cuda device 0"
    with pytest.raises(InvalidArgumentError, match=not_a_device_array):
        device.extent_of(host)
    foreign = _Interface(host.ctypes.data, (4,))
    foreign_memory = (r"\(_Interface, shape \(4,\), dtype float64\) at \[0x[0-9a-f]+,\+32\] is not "
                      "memory of cuda device 0")
    with pytest.raises(InvalidArgumentError, match=foreign_memory):
        device.extent_of(foreign)
    with pytest.raises(InvalidArgumentError, match="not a device array"):
        device.extent_of([1.0, 2.0])
    assert device.extent_of(np.empty(0))[1:] == (device.extent_of(np.empty(0))[0],) * 2


def test_upload_and_download_accept_a_cuda_array_interface_object(device, backend):
    address = device.allocate(6 * 8)
    device_array = _Interface(address, (2, 3))
    device.upload(device_array, np.arange(6.0).reshape(2, 3), device.sync_queue)
    back = np.zeros((2, 3))
    device.download(back, device_array, device.queue(1))
    device.queue(1).synchronize()
    assert np.array_equal(back, np.arange(6.0).reshape(2, 3))
    column = _Interface(address + 8, (2,), strides=(24,))  # the middle column, strided
    device.download(back[:, 0], column, device.sync_queue)
    assert np.array_equal(back[:, 0], [1.0, 4.0]) and backend.elementwise_copies == [16]
    device.free(address)


def test_map_data_and_memcpy_accept_gpu_memory_the_program_allocated(runtime, backend):
    """``acc_map_data`` of memory pyacc did not allocate (a CuPy array of the program,
    here a bare ``__cuda_array_interface__`` object), and the raw ``memcpy`` routines on
    it; the mapping ends without freeing that memory."""
    address, _handle = backend.allocate(5 * 8)  # the program's own GPU memory
    foreign = _Interface(address, (5,))
    host = np.arange(5.0)
    runtime.memcpy_to_device(foreign, host, runtime.device.sync_queue)
    runtime.map_data(host, foreign, "host")
    assert runtime.is_present(host) and runtime.device.memory_in_use == 0
    back = np.zeros(5)
    runtime.memcpy_from_device(back, runtime.deviceptr(host), runtime.device.sync_queue)
    assert np.array_equal(back, host)
    runtime.unmap_data(host, "host")
    assert not runtime.is_present(host) and backend.is_device_memory(address)
    with pytest.raises(InvalidArgumentError, match="is not memory of cuda device 0"):
        runtime.map_data(np.zeros(5), _Interface(np.zeros(5).ctypes.data, (5,)), "h")


def test_allocation_of_and_memory_in_use_follow_allocations(device):
    first, second = device.allocate(100), device.allocate(0)
    assert device.memory_in_use == 100
    assert device.allocation_of(first) == (first, 100) and device.allocation_of(first + 99) == (first, 100)
    assert device.allocation_of(first + 100) in (None, (second, 0))
    assert device.allocation_of(second) == (second, 0) and second != first
    device.free(first)
    assert device.allocation_of(first) is None and device.memory_in_use == 0
    device.free(second)
    assert device.memory_in_use == 0


def test_own_view_keeps_no_allocation_alive_and_refuses_use_after_the_free(device, backend):
    """``own_view`` (what a compute memo keeps) is a new device array over the same memory
    and layout, as CuPy's ``UnownedMemory`` view: it does not hold the block, and the fake
    refuses any use of it once the block was freed (a GPU would touch reused memory)."""
    address = device.allocate(8 * 24)
    block = weakref.ref(backend._buffer_at(address)[1])
    like = np.zeros((4, 6))[::-1, ::2]  # negative and skipping strides
    viewed = device.view(address + 8 * 18, like)
    own = device.own_view(viewed)
    assert own is not viewed and (own.shape, own.strides, own.dtype) == (like.shape, like.strides, like.dtype)
    viewed[1, 2] = 5.0
    assert own.get()[1, 2] == 5.0 and own.__cuda_array_interface__ == viewed.__cuda_array_interface__
    assert device.own_view(device.view(address, np.zeros(0))).shape == (0,)
    derived = [own[1:], own.T, own[::2].reshape(2, 3), own.view(np.int64), own[2, 1]]
    assert derived[0].get()[0, 2] == 5.0 and derived[1].get()[2, 1] == 5.0
    copied = own.reshape(-1)  # (strided: a copy, as CuPy's, which owns its memory)
    del viewed
    device.free(address)
    assert block() is None  # neither the own view nor its views kept the buffer
    for array in [own] + derived:
        with pytest.raises(ValueError, match="used after its memory was freed"):
            array.get()
    assert copied.get()[5] == 5.0
    assert "unowned" in repr(own)


def test_malloc_map_data_and_update_through_the_runtime(device, backend, runtime):
    host = np.arange(12.0)
    device_array = runtime.malloc((12,), np.float64)
    runtime.map_data(host, device_array)
    runtime.update([(UpdateDirection.DEVICE, host[::4], "h")], device.sync_queue)
    assert np.array_equal(device_array[::4].get(), host[::4]) and not device_array[1:4].get().any()
    assert runtime.hostptr(device_array) is not None
    runtime.unmap_data(host)
    runtime.free(device_array)
    assert device.memory_in_use == 0 and backend.in_use == 0


def test_events_report_allocations_frees_and_transfers_with_their_bytes(device, runtime, events):
    a = np.ones((4, 5))
    _copyin(runtime, a)
    runtime.update([(UpdateDirection.SELF, a[:, 2], "column")], device.sync_queue)
    runtime.exit_dynamic([MapRequest(MapKind.COPYOUT, a)], device.sync_queue)
    actions = [(event.kind, event.nbytes) for event in events if event.kind is not EventKind.DONE]
    assert actions == [(EventKind.ALLOC, 160), (EventKind.UPLOAD, 160), (EventKind.DOWNLOAD, 32),
                       (EventKind.DOWNLOAD, 160), (EventKind.FREE, 160)]
    assert [event.kind for event in events].count(EventKind.DONE) == 3


def test_out_of_memory_is_an_actionable_error(device):
    small = CudaDevice(1, backend=FakeCudaBackend(capacity=1024))
    with pytest.raises(OutOfMemoryError, match="cuda device 1 is out of memory: 2048 bytes requested"):
        small.allocate(2048)
    close_streams(small)


def test_a_full_device_retries_after_the_frees_queues_have_passed(device):
    small = CudaDevice(1, backend=FakeCudaBackend(capacity=1024))
    address = small.allocate(800)
    queue = small.queue(1)
    queue.defer(lambda: small.free(address))
    queue.stream.synchronize()  # the stream has passed the free; nobody has polled yet
    assert small.memory_in_use == 800
    small.free(small.allocate(800))
    assert small.memory_in_use == 0
    close_streams(small)


def test_reset_frees_everything(device, backend, runtime):
    _copyin(runtime, np.ones(10))
    device.allocate(64)
    device.reset()
    assert device.memory_in_use == 0 and backend.in_use == 0


def test_properties_describe_the_gpu(device):
    properties = device.properties()
    assert properties["memory"] == 16 << 30 and properties["free_memory"] == 16 << 30
    assert properties["shared_memory_support"] == 0 and properties["vendor"] == "NVIDIA"
    assert properties["name"] and properties["driver"]


# == without CuPy ==============================================================================
def test_mapping_cuda_imports_without_cupy():
    code = ("import sys; sys.modules['cupy'] = None; import mapping.devices.cuda, mapping.devices.cuda_fake; "
            "print(sys.modules['cupy'] is None)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "True"


def test_a_cuda_device_without_cupy_says_cupy_is_missing(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy now raises ImportError
    with pytest.raises(DeviceTypeUnavailableError, match="needs CuPy, which is not installed"):
        CudaDevice(0)


# == the fake refuses what the real stack refuses (issue 27: GPU-only faults show in CI) ========
def test_device_arrays_of_the_fake_refuse_what_cupy_refuses(runtime):
    """A fake device array is no numpy array: like a CuPy array it cannot be converted to
    one implicitly, typed by Numba for a CPU kernel, or read into a Python number on the
    host; ``get()`` is the copy."""
    import numba

    a = np.arange(6.0)
    device_array = _copyin(runtime, a)
    assert not isinstance(device_array, np.ndarray)
    with pytest.raises(TypeError, match=r"use `\.get\(\)`"):
        np.asarray(device_array)
    with pytest.raises(TypeError, match="use `.get"):
        np.copyto(np.zeros(6), device_array)
    with pytest.raises(ValueError, match="Cannot determine Numba type"):
        numba.typeof(device_array)
    for read in (float, int, bool):
        with pytest.raises(TypeError, match="read on the host without a copy"):
            read(device_array[0])
    with pytest.raises(TypeError, match="read on the host without a copy"):
        device_array[1].item()
    assert np.array_equal(device_array.get(), a) and device_array[2:4].get().tolist() == [2.0, 3.0]


def test_a_host_array_is_not_a_device_array_of_the_fake(device, backend):
    """Host memory is never taken for device memory (CuPy: numpy arrays export no
    ``__cuda_array_interface__``); an elementwise device copy refuses a host array."""
    assert backend.interface_of(np.zeros(4)) is None
    address = device.allocate(32)
    target = device.view(address, np.empty(4))
    with pytest.raises(TypeError, match="not a device array"):
        backend.copy(target, np.zeros(4), device.sync_queue.stream)
    device.free(address)


# == Device.owns: device memory stays device memory (issue 29 item 2; API.md §6.2) =========
def test_cuda_owns_its_device_arrays_and_other_memory_of_the_gpu(device, backend):
    """Blocks pyacc allocated (and views of them), memory the program allocated on the
    GPU (a foreign ``__cuda_array_interface__`` object), and empty device arrays are
    device memory; a numpy array never is (answered without a lookup)."""
    d = device.view(device.allocate(80), np.zeros(10))
    assert device.owns(d) and device.owns(d[2:5])
    foreign, _ = backend.allocate(64)  # the program's own allocation, not pyacc's
    assert device.owns(_Interface(foreign, (8,)))
    assert device.owns(device.view(0, np.zeros(0)))


def test_cuda_owns_no_host_memory(device, backend):
    host = np.zeros(8)
    assert not device.owns(host) and not device.owns(np.zeros(0))
    assert not device.owns(_Interface(host.ctypes.data, (8,)))  # host memory behind an interface
    assert not device.owns([1.0]) and not device.owns(3.0) and not device.owns(None)


def test_cuda_does_not_own_a_freed_block(device):
    address = device.allocate(64)
    stale = device.view(address, np.zeros(8))
    device.free(address)
    assert not device.owns(stale)
