"""Page-locked mappings of the cuda device (mapping/devices/cuda_pins.py, API.md §12) on the fake
backend: host arrays at least ``PYACC_PIN`` bytes are registered while they are mapped
(counts leave zero → registered; back at zero → unregistered once the queues have passed
the free; reset), their async transfers are one memcpy with no staging and still touch
the host in stream order, and a refused registration falls back to staging silently."""

import gc
import weakref

import numpy as np
import pytest

from pyacc.mapping import Counter, DeviceRuntime, InvalidArgumentError, MapKind, MapRequest, UpdateDirection
from pyacc.mapping.devices.cuda import CudaDevice
from pyacc.mapping.errors import ExecutionError
from pyacc.mapping.devices.cuda_fake import FakeCudaBackend
from pyacc.mapping.devices.cuda_pins import DEFAULT_THRESHOLD, PAGE, threshold_from_environment
from tests.mapping.test_cuda_device import backend, device, runtime  # noqa: F401  (fixtures)

BIG = DEFAULT_THRESHOLD // 8  # float64 elements of a mapping exactly at the default threshold


@pytest.fixture(autouse=True)
def _default_threshold(monkeypatch):
    """Each test's device reads an unset PYACC_PIN (autouse: before ``device`` is made)."""
    monkeypatch.delenv("PYACC_PIN", raising=False)


def _enter(runtime, array, kind=MapKind.COPYIN, queue=None):
    runtime.enter([MapRequest(kind, array)], Counter.DYNAMIC, queue or runtime.device.sync_queue)
    return runtime.deviceptr(array)


def _exit(runtime, array, kind=MapKind.DELETE, queue=None):
    runtime.exit_dynamic([MapRequest(kind, array)], queue or runtime.device.sync_queue)


def _inside(array) -> tuple[int, int]:
    """The whole pages inside an array's bytes: what a mapping of it registers."""
    low, high = array.ctypes.data, array.ctypes.data + array.nbytes
    return -(-low // PAGE) * PAGE, high - high % PAGE


def _registered(backend, array) -> bool:
    begin, end = _inside(array)
    return backend.is_registered(begin, end - begin)


def _moved(backend, kind) -> list[int]:
    return [nbytes for k, nbytes in backend.memcpys if k == kind]


# == the lifetime of a registration is the mapping's ========================================
def test_pin_a_mapping_at_least_the_threshold_is_registered_while_mapped(backend, runtime):
    a = np.arange(BIG, dtype=np.float64)
    _enter(runtime, a)
    assert _registered(backend, a) and len(backend.registered) == 1
    begin, nbytes = backend.registered[0]
    assert (begin, begin + nbytes) == _inside(a)  # the whole pages inside it
    _exit(runtime, a)
    assert not _registered(backend, a) and backend.unregistered == [begin]
    assert len(runtime.device.pins) == 0


def test_pin_a_mapping_below_the_threshold_is_not_registered(backend, runtime):
    a = np.zeros(BIG - 1)
    _enter(runtime, a)
    assert backend.registered == [] and not _registered(backend, a)


def test_pin_present_increments_do_not_register_again_and_the_last_exit_unregisters(backend, runtime):
    a = np.zeros(BIG)
    _enter(runtime, a)
    _enter(runtime, a)
    assert len(backend.registered) == 1
    _exit(runtime, a, MapKind.COPYOUT)
    assert _registered(backend, a) and backend.unregistered == []
    _exit(runtime, a, MapKind.COPYOUT)
    assert not _registered(backend, a) and len(backend.unregistered) == 1


def test_pin_a_structured_region_registers_at_entry_and_unregisters_at_exit(backend, runtime):
    a = np.zeros(BIG)
    mapped = runtime.enter([MapRequest(MapKind.COPY, a)], Counter.STRUCTURED, runtime.device.sync_queue)
    assert _registered(backend, a)
    runtime.exit_structured(mapped, runtime.device.sync_queue)
    assert not _registered(backend, a)


def test_pin_unregistration_waits_for_the_queue_that_copies_out(device, backend, runtime):
    a = np.zeros(BIG)
    device_array = _enter(runtime, a)
    device_array[...] = 7.0
    queue = device.queue(1)
    with queue.hold():
        _exit(runtime, a, MapKind.COPYOUT, queue)
        assert not runtime.is_present(a)  # absent at once, its memory still locked ...
        assert _registered(backend, a) and backend.unregistered == [] and not a.any()
    queue.synchronize()
    assert np.all(a == 7.0) and not _registered(backend, a)  # ... until the copy ran


def test_pin_a_registered_array_lives_until_it_is_unregistered(device, backend, runtime):
    """CUDA requires registered memory to be unregistered before it is freed: numpy hands
    a freed large array's pages back (munmap) and the next array often gets the same
    addresses, which the driver still maps to the old, pinned pages (a DMA from them
    reads stale data) and which ``locked_part`` would still find registered. An async
    ``delete`` lets the program drop the array at once (nothing copies it), while the
    unregistration waits for the queue: the registration keeps the array alive."""
    a = np.zeros(BIG)
    alive = weakref.ref(a)
    _enter(runtime, a)
    queue = device.queue(1)
    with queue.hold():
        _exit(runtime, a, MapKind.DELETE, queue)
        del a
        gc.collect()
        assert alive() is not None and backend.unregistered == []
    queue.synchronize()
    gc.collect()
    assert alive() is None and len(backend.unregistered) == 1 and len(device.pins) == 0


def test_pin_reset_drops_the_arrays_it_kept(device, backend, runtime):
    a = np.zeros(BIG)
    alive = weakref.ref(a)
    _enter(runtime, a)
    runtime.shutdown()
    del a
    gc.collect()
    assert alive() is None


def test_pin_a_new_mapping_of_the_array_never_uses_the_registration_of_the_old_one(device, backend, runtime):
    """An async ``delete`` on queue 1 defers the old mapping's unregistration until queue
    1 has passed it, and waits for no other queue. Mapped again at once, the array's
    pages are still registered (the new mapping's registration is refused), and a copy
    of the new mapping on queue 2 must not take them as page-locked: queue 1 passing
    unregisters them while that DMA may still be queued (cudaHostUnregister does not
    wait for it). Its copies go through staging instead."""
    a = np.arange(BIG, dtype=np.float64)
    _enter(runtime, a)
    first, second = device.queue(1), device.queue(2)
    with second.hold():
        with first.hold():
            _exit(runtime, a, MapKind.DELETE, first)
            device_array = _enter(runtime, a, MapKind.COPYIN, second)
        first.synchronize()  # the old mapping's block freed, its pages unregistered
        assert not _registered(backend, a)
    second.synchronize()
    assert np.array_equal(device_array.get(), a)


def test_fake_a_registered_copy_finds_its_memory_still_registered_when_it_runs(device, backend):
    address, _ = backend.allocate(64)
    host = np.zeros(8)
    page = host.ctypes.data - host.ctypes.data % PAGE
    assert backend.register(page, 2 * PAGE)
    stream = device.queue(1).stream
    with backend.hold(stream):
        backend.memcpy_dtoh(host, address, stream)
        backend.unregister(page)
    with pytest.raises(ExecutionError, match="unregistered .* before the copy ran"):
        stream.synchronize()


def test_pin_reset_unregisters_everything(device, backend, runtime):
    a, b = np.zeros(BIG), np.zeros(2 * BIG)
    _enter(runtime, a)
    _enter(runtime, b)
    runtime.shutdown()
    assert not _registered(backend, a) and not _registered(backend, b)
    assert len(backend.unregistered) == 2 and len(device.pins) == 0


def test_pin_a_strided_view_is_not_registered(backend, runtime):
    a = np.zeros((2, BIG))
    _enter(runtime, a[:, ::2])
    assert backend.registered == []


def test_pin_a_fortran_ordered_array_is_registered(backend, runtime):
    a = np.asfortranarray(np.zeros((BIG // 4, 4)))
    _enter(runtime, a)
    assert _registered(backend, a)


# == transfers of page-locked arrays =========================================================
def test_pin_async_transfers_of_a_registered_array_are_one_memcpy_without_staging(device, backend, runtime):
    a = np.arange(BIG, dtype=np.float64)
    device_array = _enter(runtime, a)
    queue = device.queue(1)
    backend.memcpys.clear()
    runtime.update([(UpdateDirection.DEVICE, a, "a")], queue)
    queue.synchronize()
    assert np.array_equal(device_array.get(), a)
    device_array[...] = -1.0  # the fake's device memory, written directly
    runtime.update([(UpdateDirection.SELF, a, "a")], queue)
    queue.synchronize()
    begin, end = _inside(a)
    for kind in ("htod", "dtoh"):  # the pages inside in place, the partial pages at the ends staged
        assert sum(_moved(backend, kind)) == a.nbytes and end - begin in _moved(backend, kind)
    assert sum(backend.staging) == 2 * (a.nbytes - (end - begin)) < 4 * PAGE
    assert np.all(a == -1.0)


def _rows_off_the_page_edges(rows: int = 256, columns: int = 512) -> np.ndarray:
    """A float64 array of ``rows`` × ``columns`` whose first and last bytes are off page
    edges: a mapping of it registers the whole pages inside, its partial end pages are not."""
    buffer = np.zeros(rows * columns + PAGE // 8)
    start = (-buffer.ctypes.data // 8) % (PAGE // 8) + 1  # one element past a page edge
    return buffer[start:start + rows * columns].reshape(rows, columns)


@pytest.mark.parametrize("queue_number", [None, 1], ids=["synchronous", "async"])
def test_pin_copies_never_run_across_the_edge_of_a_registered_range(device, backend, runtime,
                                                                    queue_number):
    """CUDA refuses a memcpy whose host bytes run from registered memory into memory
    outside it (``cudaErrorInvalidValue``): on an H100, the synchronous download of the
    last rows of a registered image failed (examples/mandelbrot_async.py). Every row
    block of a registered array, its first and last included, moves exactly, both ways."""
    a = _rows_off_the_page_edges()
    device_array = _enter(runtime, a)
    assert _registered(backend, a)
    queue = device.queue(queue_number) if queue_number else device.sync_queue
    for rows in (slice(0, 16), slice(100, 116), slice(240, 256), slice(0, 256)):
        a[rows] = np.arange(a[rows].size).reshape(a[rows].shape) + rows.start
        runtime.update([(UpdateDirection.DEVICE, a[rows], "rows")], queue)
        queue.synchronize()
        assert np.array_equal(device_array.get()[rows], a[rows])
        device_array[rows] = -1.0 - rows.start  # the fake's device memory, written directly
        runtime.update([(UpdateDirection.SELF, a[rows], "rows")], queue)
        queue.synchronize()
        assert np.all(a[rows] == -1.0 - rows.start)
    _exit(runtime, a)


@pytest.mark.parametrize("queue_number", [None, 1], ids=["synchronous", "async"])
def test_pin_a_row_shorter_than_a_page_across_the_registrations_end_moves(device, backend, runtime,
                                                                         queue_number):
    """The last row of a 2048 × 64 float64 array (rows of 512 bytes) starts in the last registered
    page and ends in the partial page after it: its first whole page is the
    registration's end, so looked up by that page its registration was not found and the
    synchronous copy ran across the edge (the fake refused it as CUDA does;
    examples/mandelbrot_async.py with PYACC_PIN=1 showed it)."""
    a = _rows_off_the_page_edges(BIG // 64, 64)
    last = a.shape[0] - 1
    begin, end = _inside(a)
    assert a[last].ctypes.data < end < a[last].ctypes.data + a[last].nbytes  # (the case)
    device_array = _enter(runtime, a)
    assert _registered(backend, a)
    queue = device.queue(queue_number) if queue_number else device.sync_queue
    a[last] = np.arange(64.0)
    runtime.update([(UpdateDirection.DEVICE, a[last], "last row")], queue)
    queue.synchronize()
    assert np.array_equal(device_array.get()[last], np.arange(64.0))
    device_array[last] = -2.0
    runtime.update([(UpdateDirection.SELF, a[last], "last row")], queue)
    queue.synchronize()
    assert np.all(a[last] == -2.0)
    _exit(runtime, a)


def test_fake_a_memcpy_across_the_edge_of_a_registered_range_is_refused(device, backend):
    """The fake is as strict as CUDA here (``test_pin_copies_never_run_across...``)."""
    a = _rows_off_the_page_edges()
    begin, end = _inside(a)
    assert backend.register(begin, end - begin)
    address, block = backend.allocate(a.nbytes)
    try:
        for rows in (a[250:], a[:4]):  # from the registered pages into the last, and back
            with pytest.raises(ValueError, match="cudaErrorInvalidValue"):
                backend.memcpy_dtoh(rows, address, device.sync_queue.stream)
        backend.memcpy_dtoh(a[100:104], address, device.sync_queue.stream)  # inside: copied
    finally:
        backend.unregister(begin)
        backend.free(block)


def test_pin_an_async_upload_of_a_registered_array_reads_the_host_when_it_runs(device, backend, runtime):
    a = np.zeros(BIG)
    device_array = _enter(runtime, a)
    queue = device.queue(1)
    with queue.hold():
        runtime.update([(UpdateDirection.DEVICE, a, "a")], queue)
        a[...] = 42.0  # after the enqueue, before the stream runs the copy (§2.16.1)
        assert not device_array.get().any()
    queue.synchronize()
    assert np.all(device_array.get() == 42.0) and sum(backend.staging) < 2 * PAGE


def test_pin_an_async_download_into_a_registered_array_lands_when_it_runs(device, backend, runtime):
    a = np.zeros(BIG)
    device_array = _enter(runtime, a)
    device_array[...] = 5.0
    queue = device.queue(1)
    with queue.hold():
        runtime.update([(UpdateDirection.SELF, a, "a")], queue)
        assert not a.any()
    queue.synchronize()
    assert np.all(a == 5.0) and sum(backend.staging) < 2 * PAGE


def test_pin_a_strided_part_of_a_registered_array_still_goes_through_staging(device, backend, runtime):
    a = np.arange(BIG, dtype=np.float64)
    device_array = _enter(runtime, a)
    device_array[...] = 0.0
    queue = device.queue(1)
    runtime.update([(UpdateDirection.DEVICE, a[::4], "every fourth")], queue)
    queue.synchronize()
    assert len(backend.staging) == 1
    assert np.array_equal(device_array.get()[::4], a[::4]) and not device_array.get()[1::4].any()


def test_pin_an_unregistered_array_goes_through_staging_on_async_queues(device, backend, runtime):
    a = np.arange(1000, dtype=np.float64)
    device_array = _enter(runtime, a)
    runtime.update([(UpdateDirection.DEVICE, a, "a")], device.queue(1))
    device.queue(1).synchronize()
    assert backend.staging == [a.nbytes] and np.array_equal(device_array.get(), a)


# == refusals and settings =====================================================================
def test_pin_a_refused_registration_falls_back_to_staging_silently(device, backend, runtime):
    backend.refuse_registration = True  # the locked-memory limit
    a = np.arange(BIG, dtype=np.float64)
    device_array = _enter(runtime, a)
    assert backend.registered == [] and len(device.pins) == 0
    a += 1.0
    runtime.update([(UpdateDirection.DEVICE, a, "a")], device.queue(1))
    device.queue(1).synchronize()
    assert backend.staging == [a.nbytes] and np.array_equal(device_array.get(), a)
    _exit(runtime, a)
    assert backend.unregistered == []


def test_pin_two_mappings_sharing_a_page_both_register_and_stay_exact(device, backend, runtime):
    whole = np.arange(2 * BIG + 3, dtype=np.float64)
    first, second = whole[:BIG + 1], whole[BIG + 1:]  # the boundary lies inside one page
    d_first, d_second = _enter(runtime, first), _enter(runtime, second)
    assert _registered(backend, first) and _registered(backend, second)
    assert not backend.is_registered(_inside(first)[1], PAGE)  # the shared page: neither's
    whole *= 2.0
    queue = device.queue(1)
    runtime.update([(UpdateDirection.DEVICE, first, "first"), (UpdateDirection.DEVICE, second, "second")], queue)
    queue.synchronize()
    assert np.array_equal(d_first.get(), first) and np.array_equal(d_second.get(), second)
    _exit(runtime, first)
    runtime.update([(UpdateDirection.DEVICE, second, "second")], queue)
    queue.synchronize()
    assert np.array_equal(d_second.get(), second) and len(backend.unregistered) == 1
    d_second[...] = 0.5
    runtime.update([(UpdateDirection.SELF, second, "second")], queue)
    queue.synchronize()
    assert np.all(second == 0.5) and np.array_equal(first, 2.0 * np.arange(BIG + 1))


def test_pin_zero_turns_page_locking_off(backend, monkeypatch):
    monkeypatch.setenv("PYACC_PIN", "0")
    runtime = DeviceRuntime(CudaDevice(0, backend=backend))
    _enter(runtime, np.zeros(4 * BIG))
    assert backend.registered == []


@pytest.mark.parametrize("text, value", [("4096", 4096), ("2M", 2 << 20), ("1.5k", 1536), (" 1G ", 1 << 30),
                                         ("", DEFAULT_THRESHOLD)])
def test_pin_setting_takes_bytes_with_suffixes(monkeypatch, text, value):
    monkeypatch.setenv("PYACC_PIN", text)
    assert threshold_from_environment() == value


@pytest.mark.parametrize("text", ["lots", "-1", "nan", "inf", "1T", "M"])
def test_pin_setting_refuses_what_is_not_a_size_by_name(backend, monkeypatch, text):
    monkeypatch.setenv("PYACC_PIN", text)
    with pytest.raises(InvalidArgumentError, match=r"PYACC_PIN=.*not a size in bytes.*PYACC_PIN=0"):
        CudaDevice(0, backend=backend)


def test_pin_setting_is_read_again_after_reset(backend, monkeypatch, runtime):
    monkeypatch.setenv("PYACC_PIN", "0")
    runtime.shutdown()
    _enter(runtime, np.zeros(BIG))
    assert backend.registered == []


# == the fake is as strict as the GPU about pageable memory ==================================
def test_fake_memcpy_on_an_async_stream_refuses_pageable_host_memory(device, backend):
    address, _ = backend.allocate(64)
    stream = device.queue(1).stream
    with pytest.raises(ValueError, match="neither pinned nor registered"):
        backend.memcpy_htod(address, np.zeros(8), stream)
    with pytest.raises(ValueError, match="neither pinned nor registered"):
        backend.memcpy_dtoh(np.zeros(8), address, stream)
    backend.memcpy_htod(address, np.zeros(8), device.sync_queue.stream)  # blocking: synchronous
    backend.memcpy_htod(address, backend.pinned(64)[:32], stream)  # a view of a staging buffer
    host = np.zeros(8)
    page = host.ctypes.data - host.ctypes.data % PAGE
    assert backend.register(page, 2 * PAGE)  # two pages: the 64 bytes may cross into the second
    backend.memcpy_dtoh(host, address, stream)  # registered: taken
    assert not backend.register(page + PAGE, PAGE)  # shares a registered page: refused, no error
    stream.synchronize()  # (unregistered while the copy is queued, it would fail: below)
    backend.unregister(page)
    backend.unregister(page)  # not registered any more: nothing, as CUDA reports and pyacc ignores
    assert backend.unregistered == [page]
